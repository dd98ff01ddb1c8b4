"""Account views decoded from hand-built account bytes."""

from __future__ import annotations

import dataclasses
import hashlib
import struct

import pytest
from gpu_market.accounts import (
    DEFAULT_MARKET_PARAMS,
    JOB_STATUSES,
    JobView,
    MarketParams,
    announced_params,
    decode_account,
    decode_fixed_str,
    decode_job,
    decode_market,
    decode_provider,
    decode_validator,
    effective_params,
    encode_endpoint,
    encode_fixed_str,
    grace_seconds,
    min_deposit,
)
from sdktestkit import DEFAULT_MEMBER, JOB_LAST_WINDOW_END, JOB_STARTED_AT, validator_bytes
from solders.pubkey import Pubkey

K = [Pubkey(bytes([i] * 32)) for i in range(10)]


def disc(name: str) -> bytes:
    return hashlib.sha256(f"account:{name}".encode()).digest()[:8]


def provider_bytes(status: bytes, codec, expires_at: int = 0) -> bytes:
    retired = (bytes(K[4]) + struct.pack("<q", 99) + bytes(K[6]) + struct.pack("<q", 50)
               + (bytes(32) + bytes(8)) * 2)  # two occupied slots, newest first, two empty
    body = (
        disc("Provider") + bytes(K[1]) + bytes(K[2]) + bytes(K[3]) + struct.pack("<q", expires_at)
        + retired + struct.pack("<q", 1_234)
        + b"NVIDIA H100 80GB HBM3".ljust(32, b"\0") + struct.pack("<HI", 8, 81_920)
        + "eu-west ü".encode().ljust(16, b"\0")
        + struct.pack("<Q", 5) + status + struct.pack("<Q", 1_000) + struct.pack("<Qq", 10, 20)
        + struct.pack("<H", 2) + struct.pack("<QQQQI", 600, 1, 3, 0, 0) + bytes([254])
        + b"http://203.0.113.9:7070".ljust(96, b"\0")
    )  # fmt: skip
    return body.ljust(codec.account_size("Provider"), b"\0")  # allocated at max size


def test_provider_active_and_jailed(codec):
    p = decode_provider(provider_bytes(b"\x00", codec), K[9], codec)
    assert p.status == "active" and p.jailed_until is None
    assert p.spec.gpu_model == "NVIDIA H100 80GB HBM3" and p.spec.region == "eu-west ü"
    assert (p.owner, p.worker_key, p.address) == (K[2], K[3], K[9])
    assert (p.stake, p.unbonding.amount, p.unbonding.release_at, p.gpus_in_use) == (1_000, 10, 20, 2)
    assert p.reputation.verified_seconds == 600 and p.bump == 254 and p.free_gpus == 6
    assert p.endpoint == "http://203.0.113.9:7070"
    assert len(p.retired_keys) == 4 and p.last_equivocation_slash_at == 1_234
    assert [(r.key, r.retired_at) for r in p.retired_worker_keys] == [(K[4], 99), (K[6], 50)]
    assert p.retired_keys[2].empty and p.retired_keys[2].key == Pubkey.default()
    jailed = decode_provider(provider_bytes(b"\x02" + struct.pack("<q", 1_800_000_000), codec), None, codec)
    assert jailed.status == "jailed" and jailed.jailed_until == 1_800_000_000
    assert jailed.stake == 1_000 and jailed.bump == 254


def test_key_signs_window_mirrors_the_program(codec):
    p = decode_provider(provider_bytes(b"\x00", codec), None, codec)
    assert p.key_signs_window(K[3], 10**12)  # current key, never expires
    assert p.key_signs_window(K[4], 99) and not p.key_signs_window(K[4], 100)  # retired at 99
    assert p.key_signs_window(K[6], 50) and not p.key_signs_window(K[6], 51)
    assert not p.key_signs_window(K[7], 1) and not p.key_signs_window(Pubkey.default(), 1)
    expiring = decode_provider(provider_bytes(b"\x00", codec, expires_at=500), None, codec)
    assert expiring.key_signs_window(K[3], 500) and not expiring.key_signs_window(K[3], 501)


def test_job_view(codec, job_bytes):
    assert JOB_STATUSES[-1] == "declined"
    for tag, name in enumerate(JOB_STATUSES):
        j = decode_job(job_bytes(K[1], K[2], K[3], tag), K[5], codec)
        assert isinstance(j, JobView) and j.status == name
    assert (j.market, j.user, j.provider, j.job_id, j.gpu_count) == (K[1], K[2], K[3], 42, 2)
    t = j.terms
    assert (t.rate_per_second, t.fee_bps, t.burn_bps, t.window_seconds, t.max_missed_windows) == (
        300, 500, 5000, 60, 10)
    assert (t.grace_seconds, t.max_skew_seconds, t.quorum, t.downtime_slash_bps) == (
        720, 5, 1, 100)
    assert (t.equivocation_slash_bps, t.reporter_reward_bps, t.temp_critical_c,
            t.ecc_uncorrected_max, t.validator_reward_bps) == (5000, 1000, 95, 0, 1000)  # fmt: skip
    assert t.missed_windows_seconds == 600
    assert (j.deposited, j.claimed_seconds, j.paid_seconds) == (1_000_000, 130, 120)
    assert (j.paid_provider, j.paid_validators, j.paid_treasury) == (34_200, 100, 800)
    assert j.booked_escrow == 1_000_000 - 34_200 - 100 - 800 - 900
    assert j.committee == [DEFAULT_MEMBER] and j.committee_len == 1
    assert j.last_receipt_hash == bytes(range(32)) and j.last_window_end == 1_700_000_125
    assert (j.bump, j.escrow_bump, j.address) == (254, 253, K[5])
    assert j.workload_hash == bytes([0x77]) * 32


def test_job_committee(codec, job_bytes):
    members = [K[6], K[7], K[8]]
    j = decode_job(job_bytes(K[1], K[2], K[3], 1, committee=members, quorum=2), None, codec)
    assert j.committee == members and j.committee_len == 3 and j.terms.quorum == 2
    assert [j.member_index(k) for k in (K[6], K[8], K[9], Pubkey.default())] == [0, 2, None, None]


def test_job_deadlines(codec, job_bytes):
    running = decode_job(job_bytes(K[1], K[2], K[3], 1), None, codec)
    # last_window_end + 10 missed windows of 60 s + the 720 s grace
    assert running.expirable_after == JOB_LAST_WINDOW_END + 600 + 720
    assert running.grace_ends_at is None and not running.settlement_over(2**40)
    ended = JOB_STARTED_AT + 1_000
    finishing = decode_job(job_bytes(K[1], K[2], K[3], 2, ended_at=ended), None, codec)
    assert finishing.grace_ends_at == ended + 720 and finishing.expirable_after is None
    assert not finishing.settlement_over(ended + 720)  # strictly after, as on chain
    assert finishing.settlement_over(ended + 721)
    for tag in (0, 1):
        assert not decode_job(job_bytes(K[1], K[2], K[3], tag), None, codec).settlement_over(2**40)
    for tag in (3, 4, 5, 6):  # completed, cancelled, failed, declined: close at once
        job = decode_job(job_bytes(K[1], K[2], K[3], tag), None, codec)
        assert job.settlement_over(0) and job.grace_ends_at is None


MARKET_PARAMS_FMT = "<HHQqIBIHHHQIHIHBII"  # MarketParams field types, in order (state/market.rs)


def market_bytes(params: tuple, pending: tuple, effective_at: int) -> bytes:
    return (
        disc("Market") + bytes(K[1]) + bytes(K[7]) + bytes(K[0]) + struct.pack("<Q", 3)
        + b"".join(bytes(K[i]) for i in (2, 3, 4, 5))
        + struct.pack(MARKET_PARAMS_FMT, *params) + struct.pack(MARKET_PARAMS_FMT, *pending)
        + struct.pack("<q", effective_at) + b"\x01"
        + struct.pack("<8Q", 1, 2, 3, 4, 6, 5, 8, 9) + bytes([250, 251]) + bytes(K[6]) + bytes([249])
    )  # fmt: skip


PARAMS = (500, 5000, 10, 1_209_600, 60, 1, 10, 100, 5000, 1000, 7, 5, 95, 0, 1000, 2, 3600, 2_592_000)
PENDING = (700, 5000, 10, 1_209_600, 30, 2, 4, 100, 5000, 1000, 7, 5, 90, 3, 2000, 3, 600, 0)


def test_market_and_validator(codec):
    m = decode_market(market_bytes(PARAMS, PENDING, 1_800_000_000), K[8], codec)
    assert (m.authority, m.id, m.stake_mint, m.treasury, m.paused) == (K[1], 3, K[2], K[5], True)
    assert m.params.fee_bps == 500 and m.params.validator_min_bond == 7 and m.params.max_skew_seconds == 5
    assert (m.params.temp_critical_c, m.params.ecc_uncorrected_max) == (95, 0)
    assert (m.pending_params.fee_bps, m.pending_params.temp_critical_c) == (700, 90)
    assert m.pending_params.ecc_uncorrected_max == 3 and m.params_effective_at == 1_800_000_000
    assert m.booked_stake == 1 + 2
    assert (m.totals.staked, m.totals.jobs, m.bump, m.stake_vault_bump) == (1, 5, 250, 251)
    assert (m.creator, m.totals.slashed) == (K[7], 6)
    assert (m.totals.rewards_unclaimed, m.totals.rewards) == (8, 9)
    assert (m.params.min_quorum, m.params.validator_reward_bps) == (1, 1000)
    assert (m.pending_params.min_quorum, m.pending_params.validator_reward_bps) == (2, 2000)
    assert (m.fee_vault, m.fee_vault_bump) == (K[6], 249)
    validator = validator_bytes(K[1], K[2], bond=9, status=1, endpoint="https://v.example:8443",
                                rewards=(70, 20), slashes=2)  # fmt: skip
    v = decode_validator(validator, None, codec)
    assert (v.bond, v.status, v.settlements, v.bump) == (9, "exiting", 4, 254)
    assert (v.endpoint, v.rewards_earned, v.rewards_unclaimed, v.slashes) == (
        "https://v.example:8443", 70, 20, 2)
    assert decode_account(validator, None, codec) == v


def test_effective_and_announced_params(codec):
    pending = decode_market(market_bytes(PARAMS, PENDING, 1_800_000_000), None, codec)
    assert effective_params(pending, 1_799_999_999) == pending.params
    assert effective_params(pending, 1_800_000_000) == pending.pending_params  # from then on
    assert announced_params(pending) == pending.pending_params
    settled = decode_market(market_bytes(PARAMS, PENDING, 0), None, codec)  # 0: nothing pending
    assert effective_params(settled, 2**62) == settled.params == announced_params(settled)


def test_param_helpers():
    assert list(DEFAULT_MARKET_PARAMS) == [f.name for f in dataclasses.fields(MarketParams)]
    p = MarketParams(**DEFAULT_MARKET_PARAMS)
    assert (p.temp_critical_c, p.ecc_uncorrected_max) == (95, 0)
    assert (p.min_quorum, p.validator_reward_bps) == (1, 1000)
    assert grace_seconds(p) == 60 * 12
    assert grace_seconds(dataclasses.replace(p, window_seconds=2, max_missed_windows=2)) == 8
    assert min_deposit(p, 7, 3) == 7 * 3 * 60


def test_wrong_type_and_garbage(codec, job_bytes):
    with pytest.raises(ValueError, match="expected a Market"):
        decode_market(job_bytes(K[1], K[2], K[3], 0), None, codec)
    with pytest.raises(ValueError, match="unknown discriminator"):
        decode_account(bytes(200), None, codec)
    with pytest.raises(ValueError, match="expected"):
        decode_account(disc("Job") + bytes(10), None, codec)


def test_fixed_strings():
    assert encode_fixed_str("H100", 8) == b"H100\0\0\0\0"
    assert decode_fixed_str(b"H100\0\0\0\0") == "H100"
    assert decode_fixed_str(encode_fixed_str("ü" * 16, 32)) == "ü" * 16
    with pytest.raises(ValueError, match="at most 16"):
        encode_fixed_str("x" * 17, 16, "region")
    with pytest.raises(ValueError, match="NUL"):
        encode_fixed_str("a\0b", 16)


@pytest.mark.parametrize("url", ["http://ab", "https://203.0.113.7:8443/v1", "http://" + "x" * 89])
def test_endpoint_accepted_as_the_program_does(url):
    raw = encode_endpoint(url)
    assert len(raw) == 96 and decode_fixed_str(raw) == url


@pytest.mark.parametrize("url, needle", [
    ("ftp://host", "http:// or https://"), ("https://", "http:// or https://"),
    ("http://a", "http:// or https://"),  # 8 bytes: the program wants more than "https://"
    ("http://" + "x" * 90, "at most 96"), ("http://a b", "printable ASCII"),
    ("http://hé", "printable ASCII"),
])  # fmt: skip
def test_endpoint_refused_as_the_program_does(url, needle):
    with pytest.raises(ValueError, match=needle):
        encode_endpoint(url)
