"""Round rules (pure): leaders, the quorum value, the program's bounds, what a member signs;
and the SDK names the validator codes against."""

from __future__ import annotations

import hashlib
import struct
from collections import Counter
from dataclasses import replace

import pytest
from gpum_validator.attest import (
    SLASH_DOWNTIME_DISCRIMINATOR,
    attestation_message,
    check_downtime_message,
    leader_of,
    leader_position,
    quorum_value,
    settle_bound,
    sign_request_message,
    timeouts_elapsed,
)
from gpum_validator.records import ChainJobInfo
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.message import Message
from vtestkit import JOB, PROGRAM, T0, VALIDATOR_KEYS, FakeChain, pk

MEMBERS = [bytes(k.pubkey()) for k in VALIDATOR_KEYS[:3]]


# ------------------------------------------------------------------ leaders


def test_leader_is_deterministic_spread_and_rotates_on_timeouts():
    assert leader_of(JOB, 7, MEMBERS) == leader_of(JOB, 7, MEMBERS)
    counts = Counter(leader_position(JOB, r, 3) for r in range(300))
    assert set(counts) == {0, 1, 2} and min(counts.values()) > 60  # every member leads
    base = leader_position(JOB, 7, 3)
    assert [leader_position(JOB, 7, 3, k) for k in range(4)] == \
        [base, (base + 1) % 3, (base + 2) % 3, base]
    assert leader_position(bytes([12] * 32), 7, 3) in (0, 1, 2)


def test_timeouts_elapsed():
    assert timeouts_elapsed(100, 100, 120) == 0
    assert timeouts_elapsed(100, 219, 120) == 0
    assert timeouts_elapsed(100, 220, 120) == 1
    assert timeouts_elapsed(100, 50, 120) == 0


# ------------------------------------------------------------------ values


def test_quorum_value_is_the_q_th_highest():
    assert quorum_value([300], 1) == 300
    assert quorum_value([300, 295, 300], 2) == 300
    assert quorum_value([300, 295, 300], 3) == 295
    assert quorum_value([300, 10**6, 300], 2) == 300  # a liar's high claim is not counted
    assert quorum_value([300, 10**6], 3) is None  # too few totals


CHAIN = ChainJobInfo(status="running", last_seq=5, paid_seconds=290, rate_per_second=10,
                     escrow_remaining=10**6, ended_at=0, window_seconds=60,
                     claimed_seconds=300, last_window_end=T0 + 300, started_at=T0,
                     committee=tuple(MEMBERS), quorum=2, max_skew_seconds=5,
                     max_missed_windows=10)


def test_settle_bound_applies_the_program_rules():
    # paid 290 at claimed 300; the receipt claims 600 at T0 + 600
    assert settle_bound(590, CHAIN, 600, T0 + 600) == 590
    assert settle_bound(600, CHAIN, 600, T0 + 600) == 600  # totals: up to the cumulative claim
    assert settle_bound(601, CHAIN, 600, T0 + 600) == 600
    assert settle_bound(290, CHAIN, 600, T0 + 600) == 290  # pays nothing, moves the claim
    assert settle_bound(289, CHAIN, 600, T0 + 600) is None  # below paid: not settleable
    wall = replace(CHAIN, paid_seconds=0, claimed_seconds=0)
    assert settle_bound(10**6, wall, 10**6, T0 + 600) == 605  # window_end - started + skew
    done = replace(wall, status="finishing", ended_at=T0 + 500)
    assert settle_bound(10**6, done, 10**6, T0 + 480) == 485
    assert settle_bound(10**6, done, 10**6, T0 + 499) == 500


def test_attestation_message_is_receipt_digest_then_u64():
    receipt = b"gpu-market/receipt/v1" + bytes(152)
    assert attestation_message(receipt, 7) == hashlib.sha256(receipt).digest() + struct.pack("<Q", 7)


def test_sign_request_binds_job_seq_value_leader_member_and_round():
    a = sign_request_message(JOB, 5, 300, MEMBERS[0], MEMBERS[1], 1, 0)
    assert len({a, sign_request_message(JOB, 5, 301, MEMBERS[0], MEMBERS[1], 1, 0),
                sign_request_message(JOB, 6, 300, MEMBERS[0], MEMBERS[1], 1, 0),
                sign_request_message(JOB, 5, 300, MEMBERS[2], MEMBERS[1], 1, 0),
                sign_request_message(JOB, 5, 300, MEMBERS[0], MEMBERS[2], 1, 0),
                sign_request_message(JOB, 5, 300, MEMBERS[0], MEMBERS[1], 2, 0),
                sign_request_message(JOB, 5, 300, MEMBERS[0], MEMBERS[1], 1, 1)}) == 7


# ------------------------------------------------------------------ downtime messages


def message(chain, submitter=0, others=(1,), lpwe=T0 + 300, job=JOB):
    chain.jobs[job] = chain.jobs[JOB]
    return chain.slash_downtime_message(pk(MEMBERS[submitter]), pk(job),
                                        [pk(MEMBERS[i]) for i in others], lpwe)


def test_downtime_message_accepted_for_a_co_signer():
    r = check_downtime_message(message(FakeChain()), PROGRAM, JOB, T0 + 300, MEMBERS[1],
                               MEMBERS)
    assert (r.submitter, r.others, r.last_proof_window_end) == (MEMBERS[0], (MEMBERS[1],),
                                                                T0 + 300)


@pytest.mark.parametrize("case, fragment", [
    ("other_job", "another job"),
    ("other_lpwe", "last_proof_window_end"),
    ("me_submitter", "co-signers"),
    ("me_absent", "co-signers"),
    ("outsider", "not on the job's committee"),
    ("other_program", "gpu_market program"),
    ("two_instructions", "exactly one instruction"),
    ("other_instruction", "not a slash_downtime"),
])
def test_downtime_message_refused(case, fragment):
    chain = FakeChain()
    me, lpwe, job, committee = MEMBERS[1], T0 + 300, JOB, MEMBERS
    msg = message(chain)
    if case == "other_job":
        msg = message(chain, job=bytes([12] * 32))
    elif case == "other_lpwe":
        lpwe = T0 + 360
    elif case == "me_submitter":
        me = MEMBERS[0]
    elif case == "me_absent":
        me = MEMBERS[2]
    elif case == "outsider":
        committee = MEMBERS[1:]
    elif case in ("other_program", "two_instructions", "other_instruction"):
        ix = msg.instructions[0]
        keys = list(msg.account_keys)
        n_signers = msg.header.num_required_signatures
        metas = [AccountMeta(keys[i], i < n_signers, True) for i in bytes(ix.accounts)]
        program = pk(bytes(32)) if case == "other_program" else pk(PROGRAM)
        data = bytes(ix.data) if case != "other_instruction" else bytes(16)
        ixs = [Instruction(program, data, metas)]
        if case == "two_instructions":
            ixs.append(Instruction(pk(PROGRAM), bytes(ix.data), metas))
        msg = Message.new_with_blockhash(ixs, pk(MEMBERS[0]), Hash.default())
    with pytest.raises(ValueError, match=fragment):
        check_downtime_message(msg, PROGRAM, job, lpwe, me, committee)


def test_downtime_discriminator_is_the_idl_one():
    import json
    from pathlib import Path

    idl = json.loads((Path(__file__).parents[2] / "idl" / "gpu_market.json").read_text())
    (ix,) = [i for i in idl["instructions"] if i["name"] == "slash_downtime"]
    assert bytes(ix["discriminator"]) == SLASH_DOWNTIME_DISCRIMINATOR
    names = []

    def flat(accs, prefix=""):
        for a in accs:
            if "accounts" in a:
                flat(a["accounts"], prefix + a["name"] + ".")
            else:
                names.append(prefix + a["name"])

    flat(ix["accounts"])
    assert names[4] == "targets.job" and len(names) == 9  # what check_downtime_message reads


# ------------------------------------------------------------------ the SDK names used


def test_sdk_names_the_validator_codes_against():
    """The SDK calls and types the validator uses (tests use local stand-ins)."""
    sdk_settle = pytest.importorskip("gpu_market.settle")
    sdk_receipt = pytest.importorskip("gpu_market.receipt")
    import inspect

    from gpu_market.client import GpuMarketClient

    item = sdk_settle.SettleItem(job=pk(JOB), seq=1, cumulative_seconds=60, window_end=T0 + 60,
                                 proof_hash=bytes(32), worker_key=pk(JOB),
                                 receipt_signature=bytes(64), approved_seconds=60,
                                 attestations=[sdk_settle.Attestation(authority=pk(JOB),
                                                                      signature=bytes(64))])
    assert item.approved_seconds == 60
    receipt = b"gpu-market/receipt/v1" + bytes(152)
    assert sdk_receipt.attestation_message(receipt, 9) == sdk_receipt.receipt_digest(receipt) + struct.pack("<Q", 9)
    for name, params in (
            ("fetch_validator_by_authority", ["market", "authority"]),
            ("slash_downtime_message", ["validator_authority", "job", "others",
                                        "last_proof_window_end"]),
            ("send_presigned", ["tx"]),
            ("slash_validator_equivocation", ["reporter", "job", "validator_authority", "first",
                                              "first_approved", "first_signature", "second",
                                              "second_approved", "second_signature"]),
            ("settle", ["validator_authority", "items"]),
            ("max_settle_items_per_tx", [])):
        sig = inspect.signature(getattr(GpuMarketClient, name))
        assert list(sig.parameters)[1:1 + len(params)] == params, name


def test_sdk_decoder_accepts_the_fake_chains_downtime_message():
    committee = pytest.importorskip("gpu_market.committee")
    from gpu_market.codec import default_codec

    codec = default_codec(pk(PROGRAM))
    r = committee.decode_slash_downtime_message(codec, bytes(message(FakeChain())))
    assert (bytes(r.job), bytes(r.submitter), [bytes(o) for o in r.others]) == \
        (JOB, MEMBERS[0], [MEMBERS[1]])
    assert r.last_proof_window_end == T0 + 300
