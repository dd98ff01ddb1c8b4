"""Account views decoded from hand-built account bytes."""

from __future__ import annotations

import hashlib
import struct

import pytest
from gpu_market.accounts import (
    JobView,
    decode_account,
    decode_fixed_str,
    decode_job,
    decode_market,
    decode_provider,
    decode_validator,
    encode_fixed_str,
)
from solders.pubkey import Pubkey

K = [Pubkey(bytes([i] * 32)) for i in range(10)]


def disc(name: str) -> bytes:
    return hashlib.sha256(f"account:{name}".encode()).digest()[:8]


def provider_bytes(status: bytes, codec) -> bytes:
    body = (
        disc("Provider") + bytes(K[1]) + bytes(K[2]) + bytes(K[3]) + struct.pack("<q", 0)
        + bytes(K[4]) + struct.pack("<q", 99)
        + b"NVIDIA H100 80GB HBM3".ljust(32, b"\0") + struct.pack("<HI", 8, 81_920)
        + "eu-west ü".encode().ljust(16, b"\0")
        + struct.pack("<Q", 5) + status + struct.pack("<Q", 1_000) + struct.pack("<Qq", 10, 20)
        + struct.pack("<H", 2) + struct.pack("<QQQQI", 600, 1, 3, 0, 0) + bytes([254])
    )  # fmt: skip
    return body.ljust(codec.account_size("Provider"), b"\0")  # allocated at max size


def test_provider_active_and_jailed(codec):
    p = decode_provider(provider_bytes(b"\x00", codec), K[9], codec)
    assert p.status == "active" and p.jailed_until is None
    assert p.spec.gpu_model == "NVIDIA H100 80GB HBM3" and p.spec.region == "eu-west ü"
    assert (p.owner, p.worker_key, p.address) == (K[2], K[3], K[9])
    assert (p.stake, p.unbonding.amount, p.unbonding.release_at, p.gpus_in_use) == (1_000, 10, 20, 2)
    assert p.reputation.verified_seconds == 600 and p.bump == 254 and p.free_gpus == 6
    jailed = decode_provider(provider_bytes(b"\x02" + struct.pack("<q", 1_800_000_000), codec), None, codec)
    assert jailed.status == "jailed" and jailed.jailed_until == 1_800_000_000
    assert jailed.stake == 1_000 and jailed.bump == 254


def test_job_view(codec, job_bytes):
    for tag, name in enumerate(("open", "running", "finishing", "completed", "cancelled", "failed")):
        j = decode_job(job_bytes(K[1], K[2], K[3], tag), K[5], codec)
        assert isinstance(j, JobView) and j.status == name
    assert (j.market, j.user, j.provider, j.job_id, j.gpu_count) == (K[1], K[2], K[3], 42, 2)
    assert (j.rate_per_second, j.deposited, j.settled_seconds) == (300, 1_000_000, 120)
    assert j.last_receipt_hash == bytes(range(32)) and j.last_window_end == 1_700_000_125
    assert (j.bump, j.escrow_bump, j.address) == (254, 253, K[5])


def test_market_and_validator(codec):
    params = struct.pack("<HHQqIBIHHHQI", 500, 5000, 10, 1_209_600, 60, 1, 10, 100, 5000, 1000, 7, 5)
    market = (
        disc("Market") + bytes(K[1]) + bytes(K[7]) + bytes(K[0]) + struct.pack("<Q", 3)
        + b"".join(bytes(K[i]) for i in (2, 3, 4, 5)) + params + b"\x01"
        + struct.pack("<6Q", 1, 2, 3, 4, 6, 5) + bytes([250, 251])
    )  # fmt: skip
    m = decode_market(market, K[8], codec)
    assert (m.authority, m.id, m.stake_mint, m.treasury, m.paused) == (K[1], 3, K[2], K[5], True)
    assert m.params.fee_bps == 500 and m.params.validator_min_bond == 7 and m.params.max_skew_seconds == 5
    assert (m.totals.staked, m.totals.jobs, m.bump, m.stake_vault_bump) == (1, 5, 250, 251)
    assert (m.creator, m.totals.slashed) == (K[7], 6)
    validator = disc("Validator") + bytes(K[1]) + bytes(K[2]) + struct.pack("<QQqBQB", 9, 0, 0, 1, 4, 255)
    v = decode_validator(validator, None, codec)
    assert (v.bond, v.status, v.settlements, v.bump) == (9, "exiting", 4, 255)
    assert decode_account(validator, None, codec) == v


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
