"""Hardware verdicts and wrong-answer evidence as the program takes them
(``gpu_market.hardware``): the digests the program computes (pinned by
``program-tests/tests/wrong_answer.rs``, the same hex), which evidence is slashable, the
instruction arguments, and the decoded Provider, tombstone and record fields."""

from __future__ import annotations

import hashlib
import struct

import pytest
from gpu_market import challenge as C
from gpu_market.accounts import (
    ClosedJobView,
    HardwareVerdict,
    Ratings,
    decode_account,
    decode_provider,
    decode_wrong_answer_record,
)
from gpu_market.constants import PROGRAM_ID
from gpu_market.hardware import HardwareVerdictArgs, WrongAnswerEvidence, attesters_hash
from solders.pubkey import Pubkey

MARKET, PROVIDER = Pubkey(bytes([1] * 32)), Pubkey(bytes([2] * 32))
VERDICT = HardwareVerdictArgs(Pubkey(bytes([3] * 32)), "H100", 8, 81_559, True, 1_750_000_000,
                              bytes([4] * 32))  # fmt: skip
EVIDENCE = WrongAnswerEvidence(bytes([4] * 32), 1_750_000_000, bytes([5] * 32), 5, 2,
                               bytes([6] * 32), (bytes([7] * 32), bytes([8] * 32), bytes([9] * 32)))  # fmt: skip


def test_digests_are_the_programs() -> None:
    """The same values ``wrong_answer.rs::challenge_message_vectors`` asserts in Rust."""
    keys = (PROGRAM_ID, MARKET, PROVIDER)
    assert VERDICT.digest(*keys).hex() == "3756b492b230c72bd90e17ed9632e1cb5b588bca281458294b958bed4fed4295"
    assert EVIDENCE.answer_digest(*keys).hex() == "a1229ca142bcfd808ad306bcfbe7ddf4e523bf6315fbf8b39f0467a496666ca4"
    assert EVIDENCE.row_digest(*keys).hex() == "2fee750fb9c024aa2d530c8980d3536d5e82f66aacbbab848cf5a933c37790ba"
    assert EVIDENCE.computed_root().hex() == "fc4eafaa3397782154edcab6cc906997afa760a067b17dab6ca88c8bee48e647"
    assert VERDICT.digest(*keys) == hashlib.sha256(VERDICT.message(*keys)).digest()
    assert len(VERDICT.message(*keys)) == 229 and len(EVIDENCE.row_message(*keys)) == 259


def test_every_field_is_bound_by_its_digest() -> None:
    from dataclasses import replace

    keys = (PROGRAM_ID, MARKET, PROVIDER)
    for change in ({"passed": False}, {"gpu_count": 4}, {"vram_mib": 1}, {"gpu_model": "A100"},
                   {"challenged_at": 1}, {"challenge_digest": bytes(32)},
                   {"worker_key": Pubkey(bytes(32))}):  # fmt: skip
        assert replace(VERDICT, **change).digest(*keys) != VERDICT.digest(*keys), change
    assert VERDICT.digest(PROGRAM_ID, PROVIDER, MARKET) != VERDICT.digest(*keys)
    for change in ({"root": bytes(32)}, {"leaf_count": 6}, {"row_index": 3}, {"leaf_hash": bytes(32)},
                   {"siblings": EVIDENCE.siblings[:2] + (bytes(32),)}):  # fmt: skip
        assert replace(EVIDENCE, **change).row_digest(*keys) != EVIDENCE.row_digest(*keys), change
    assert replace(EVIDENCE, challenged_at=1).answer_digest(*keys) != EVIDENCE.answer_digest(*keys)


def tree_and_leaves(n: int) -> tuple[C.MerkleTree, list[bytes]]:
    leaves = [C.row_leaf(i, struct.pack("<4i", i, -i, 2 * i, 7)) for i in range(n)]
    return C.MerkleTree.build(leaves), leaves


@pytest.mark.parametrize("n", [1, 2, 5, 9, 256])
def test_an_honest_opening_is_no_wrong_answer(n: int) -> None:
    tree, leaves = tree_and_leaves(n)
    for i in {0, n // 2, n - 1}:
        e = WrongAnswerEvidence.from_opening(bytes(32), 0, tree.root, n, i, leaves[i], tree.proof(i))
        assert e.computed_root() == tree.root and not e.is_wrong


def test_a_row_that_contradicts_the_root_is_wrong_a_malformed_path_is_not() -> None:
    from dataclasses import replace

    tree, leaves = tree_and_leaves(9)
    honest = WrongAnswerEvidence.from_opening(bytes(32), 0, tree.root, 9, 4, leaves[4], tree.proof(4))
    assert replace(honest, leaf_hash=leaves[5]).is_wrong
    bad_sibling = (bytes(32),) + honest.siblings[1:]
    assert replace(honest, siblings=bad_sibling).is_wrong
    for malformed in (replace(honest, siblings=honest.siblings[:-1]),
                      replace(honest, siblings=honest.siblings + (bytes(32),)),
                      replace(honest, row_index=9), replace(honest, leaf_count=0),
                      replace(honest, leaf_count=(1 << 15) + 1),
                      replace(honest, siblings=(bytes(32),) * 16)):  # fmt: skip
        assert malformed.computed_root() is None and not malformed.is_wrong


def test_arguments_and_attesters_hash() -> None:
    a = VERDICT.args()
    assert a["gpu_model"] == list(b"H100".ljust(32, b"\0")) and a["passed"] is True
    assert a["challenge_digest"] == [4] * 32 and a["worker_key"] == VERDICT.worker_key
    e = EVIDENCE.args()
    assert e["siblings"] == [[7] * 32, [8] * 32, [9] * 32] and e["leaf_count"] == 5
    with pytest.raises(ValueError, match="challenge_digest"):
        HardwareVerdictArgs(MARKET, "H100", 1, 1, True, 0, b"short").args()
    with pytest.raises(ValueError, match="gpu_model"):
        HardwareVerdictArgs(MARKET, "x" * 33, 1, 1, True, 0, bytes(32)).args()
    k1, k2 = Pubkey(bytes([9] * 32)), Pubkey(bytes([1] * 32))
    assert attesters_hash([k1, k2]) == attesters_hash([k2, k1]) == hashlib.sha256(bytes(k2) + bytes(k1)).digest()


# ----------------------------------------------------------------------------- decoders


def test_provider_hardware_and_ratings_decode(codec) -> None:
    """The Provider vector the program serialized (``docs/vectors/accounts.json``,
    ``vectors.rs::provider``), read as a typed view."""
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).resolve().parents[3] / "docs" / "vectors" / "accounts.json").read_text())
    vector = next(v for v in doc["accounts"] if v["name"] == "provider_active")
    p = decode_provider(bytes.fromhex(vector["hex"]), PROVIDER, codec)
    assert (p.registered_at, p.last_slash_at) == (1_700_000_003, 1_745_000_001)
    assert p.hardware == HardwareVerdict(
        verified=True, passed=True, gpu_model="H100-SXM5", gpu_count=257, vram_mib=81_921,
        challenged_at=1_750_000_500, attested_at=1_750_000_530,
        challenge_digest=bytes.fromhex(vector["fields"]["hardware"]["challenge_digest"]),
        attesters=3, attesters_hash=bytes.fromhex(vector["fields"]["hardware"]["attesters_hash"]))  # fmt: skip
    assert p.hardware.status == "verified"
    assert p.ratings == Ratings(17, 71) and p.ratings.average == pytest.approx(71 / 17)
    job = next(v for v in doc["accounts"] if v["type"] == "Job")
    assert decode_account(bytes.fromhex(job["hex"]), None, codec).rated is True


def test_hardware_status_and_ratings_average() -> None:
    assert HardwareVerdict().status == "unverified" and Ratings().average is None
    assert HardwareVerdict(passed=False, challenged_at=5).status == "failed"
    assert HardwareVerdict(passed=True, challenged_at=5).status == "unverified"  # a cleared pass


def test_a_tombstone_carries_what_a_rating_needs() -> None:
    from gpu_market.accounts import CLOSED_JOB_DISCRIMINATOR

    user, provider = Pubkey(bytes([8] * 32)), Pubkey(bytes([9] * 32))
    data = (CLOSED_JOB_DISCRIMINATOR + struct.pack("<q", 1_751_000_000) + bytes(user)
            + bytes(provider) + struct.pack("<Q", 30) + b"\x01")  # fmt: skip
    assert decode_account(data, PROVIDER) == ClosedJobView(1_751_000_000, PROVIDER, user, provider, 30, True)
    # The tombstone of an older program: only closed_at.
    assert decode_account(data[:16]) == ClosedJobView(1_751_000_000)


def test_wrong_answer_record_decodes(codec) -> None:
    reporter = Pubkey(bytes([6] * 32))
    data = codec.encode_account("WrongAnswerRecord", {
        "provider": PROVIDER, "challenge_digest": [4] * 32, "reporter": reporter, "slashed": 50_000,
        "bump": 254})  # fmt: skip
    r = decode_wrong_answer_record(data, MARKET, codec)
    assert (r.provider, r.challenge_digest, r.reporter, r.slashed, r.bump, r.address) == (
        PROVIDER, bytes([4] * 32), reporter, 50_000, 254, MARKET)
