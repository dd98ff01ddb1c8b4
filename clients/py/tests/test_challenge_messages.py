"""The signed messages of hardware challenges, byte for byte (``docs/vectors/challenge.json``),
against the program's layouts (``programs/gpu_market/src/challenge.rs``)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from gpu_market import challenge as C
from gpu_market import challenge_messages as M
from gpu_market.receipt import private_key_from_seed, public_key_bytes

ROOT = Path(__file__).resolve().parents[3]
DOC = json.loads((ROOT / "docs" / "vectors" / "challenge.json").read_text())
KEYS = tuple(bytes.fromhex(DOC[k]) for k in ("program_id", "market", "provider"))
SEED = bytes.fromhex(DOC["signer_seed"])
PUB = bytes.fromhex(DOC["signer_pubkey"])


def _check_signed(v: dict, msg: bytes) -> None:
    assert msg.hex() == v["message"]
    assert M.digest(msg).hex() == v["digest"] == hashlib.sha256(msg).hexdigest()
    assert M.sign_digest(SEED, msg).hex() == v["signature"]
    assert M.verify_digest(PUB, bytes.fromhex(v["signature"]), msg)


def test_the_signer_of_the_vectors() -> None:
    assert public_key_bytes(private_key_from_seed(SEED)) == PUB
    ch = C.Challenge.decode(bytes.fromhex(DOC["challenge"]))
    assert ch.challenge_id.hex() == DOC["challenge_digest"]


@pytest.mark.parametrize("v", DOC["answers"], ids=lambda v: v["name"])
def test_answer_vectors(v: dict) -> None:
    msg = M.answer_message(*KEYS, bytes.fromhex(v["challenge_digest"]), int(v["challenged_at"]),
                           bytes.fromhex(v["root"]))
    assert len(msg) == 198
    _check_signed(v, msg)


@pytest.mark.parametrize("v", DOC["rows"], ids=lambda v: v["name"])
def test_row_vectors(v: dict) -> None:
    siblings = [bytes.fromhex(s) for s in v["siblings"]]
    leaf = bytes.fromhex(v["leaf_hash"])
    assert C.row_leaf(v["row_index"], bytes.fromhex(v["row"])) == leaf
    msg = M.row_message(*KEYS, bytes.fromhex(v["challenge_digest"]), bytes.fromhex(v["root"]),
                        v["leaf_count"], v["row_index"], leaf, siblings)
    assert len(msg) == 259
    _check_signed(v, msg)
    got = C.root_from_proof(leaf, v["row_index"], v["leaf_count"], siblings)
    if "computed_root" in v:  # the wrong answer: its signed path misses its signed root
        assert got.hex() == v["computed_root"] != v["root"]
    else:
        assert got.hex() == v["root"]


def test_the_rows_are_the_gpus_product() -> None:
    """The row vectors open a real result: the verifier accepts each honest row."""
    ch = C.Challenge.decode(bytes.fromhex(DOC["challenge"]))
    g = M.gpu_challenge(ch, 1)
    honest = [v for v in DOC["rows"] if "computed_root" not in v]
    assert {v["challenge_digest"] for v in DOC["rows"]} == {g.challenge_id.hex()}
    C.verify_rows(g, bytes.fromhex(honest[0]["root"]), [
        C.RowOpening(v["row_index"], bytes.fromhex(v["row"]),
                     tuple(bytes.fromhex(s) for s in v["siblings"])) for v in honest])


@pytest.mark.parametrize("v", DOC["hardware"], ids=lambda v: v["name"])
def test_hardware_vectors(v: dict) -> None:
    args = M.HardwareVerdictArgs(bytes.fromhex(v["worker_key"]), v["gpu_model"], v["gpu_count"],
                                 v["vram_mib"], v["passed"], int(v["challenged_at"]),
                                 bytes.fromhex(v["challenge_digest"]))
    msg = args.message(*KEYS)
    assert len(msg) == 229
    assert M.encode_gpu_model(v["gpu_model"]).hex() == v["gpu_model_hex"]
    _check_signed(v, msg)


def test_request_and_open_vectors() -> None:
    (r,) = DOC["requests"]
    msg = M.request_message(*KEYS, bytes.fromhex(r["challenge_digest"]), int(r["timestamp"]))
    assert len(msg) == 167
    _check_signed(r, msg)
    (o,) = DOC["opens"]
    msg = M.open_message(*KEYS, bytes.fromhex(o["challenge_digest"]), bytes.fromhex(o["nonce"]),
                         int(o["timestamp"]))
    assert len(msg) == 196
    _check_signed(o, msg)


@pytest.mark.parametrize("v", DOC["gpu_challenges"], ids=lambda v: str(v["gpu_index"]))
def test_each_gpu_computes_its_own_challenge(v: dict) -> None:
    ch = C.Challenge.decode(bytes.fromhex(DOC["challenge"]))
    g = M.gpu_challenge(ch, v["gpu_index"])
    assert g.encode().hex() == v["challenge"] and g.challenge_id.hex() == v["challenge_digest"]
    assert (g.n, g.rounds, g.rows_to_open, g.issued_at) == (ch.n, ch.rounds, ch.rows_to_open,
                                                            ch.issued_at)
    assert g.seed != ch.seed
    seeds = {M.gpu_challenge(ch, i).seed for i in range(M.MAX_GPUS)}
    assert len(seeds) == M.MAX_GPUS


def test_every_kind_of_message_has_its_own_domain() -> None:
    """A signature over one kind is no signature over another: the domains differ and none is
    a prefix of another (each message then differs in its first bytes)."""
    domains = [M.ANSWER_DOMAIN, M.ROW_DOMAIN, M.HARDWARE_DOMAIN, M.REQUEST_DOMAIN,
               M.OPEN_DOMAIN, C.CHALLENGE_DOMAIN, b"gpu-market/receipt/v1", b"gpu-market/proof/v1"]
    for a in domains:
        for b in domains:
            assert a == b or not b.startswith(a)


def test_the_programs_domains_are_ours() -> None:
    """``attest_hardware`` and ``slash_wrong_answer`` check these bytes on chain."""
    rust = (ROOT / "programs" / "gpu_market" / "src" / "challenge.rs").read_text()
    consts = dict(re.findall(r'pub const (\w+_DOMAIN): &\[u8\] = b"([^"]+)"', rust))
    assert consts["HARDWARE_DOMAIN"].encode() == M.HARDWARE_DOMAIN
    assert consts["ANSWER_DOMAIN"].encode() == M.ANSWER_DOMAIN
    assert consts["ROW_DOMAIN"].encode() == M.ROW_DOMAIN
    assert consts["NODE_DOMAIN"].encode() == C.NODE_DOMAIN


@pytest.mark.parametrize("call", [
    lambda: M.answer_message(*KEYS, b"\0" * 31, 0, b"\0" * 32),
    lambda: M.answer_message(KEYS[0], KEYS[1], "provider", b"\0" * 32, 0, b"\0" * 32),
    lambda: M.answer_message(*KEYS, b"\0" * 32, 2**63, b"\0" * 32),
    lambda: M.row_message(*KEYS, b"\0" * 32, b"\0" * 32, 0, 0, b"\0" * 32, []),
    lambda: M.row_message(*KEYS, b"\0" * 32, b"\0" * 32, 4, 4, b"\0" * 32, []),
    lambda: M.row_message(*KEYS, b"\0" * 32, b"\0" * 32, 2**15 + 1, 0, b"\0" * 32, []),
    lambda: M.row_message(*KEYS, b"\0" * 32, b"\0" * 32, 4, 0, b"\0" * 32, [b"\0" * 31]),
    lambda: M.hardware_message(*KEYS, b"\0" * 32, "x" * 33, 1, 1, True, 0, b"\0" * 32),
    lambda: M.hardware_message(*KEYS, b"\0" * 32, "a\0b", 1, 1, True, 0, b"\0" * 32),
    lambda: M.hardware_message(*KEYS, b"\0" * 32, "m", 65536, 1, True, 0, b"\0" * 32),
    lambda: M.hardware_message(*KEYS, b"\0" * 32, "m", 1, -1, True, 0, b"\0" * 32),
    lambda: M.hardware_message(*KEYS, b"\0" * 32, "m", 1, 1, 1, 0, b"\0" * 32),
    lambda: M.hardware_message(*KEYS, b"\0" * 32, "m", True, 1, True, 0, b"\0" * 32),
    lambda: M.open_message(*KEYS, b"\0" * 32, b"\0" * 16, 0),
    lambda: M.gpu_challenge(C.Challenge.decode(bytes.fromhex(DOC["challenge"])), 256),
])
def test_bad_arguments_are_refused_never_coerced(call) -> None:
    with pytest.raises(ValueError):
        call()


def test_verify_never_raises() -> None:
    msg = M.request_message(*KEYS, b"\0" * 32, 0)
    sig = M.sign_digest(SEED, msg)
    assert M.verify_digest(PUB, sig, msg)
    assert not M.verify_digest(PUB, sig, msg + b"x")
    assert not M.verify_digest(PUB, sig[:63], msg)
    assert not M.verify_digest(b"\1" * 31, sig, msg)
    assert not M.verify_digest(PUB, sig, msg.replace(M.REQUEST_DOMAIN, M.OPEN_DOMAIN[:31]))


def test_the_instruction_modules_bytes_are_these() -> None:
    """``gpu_market.hardware`` (the instructions' argument types) spells the same messages."""
    from gpu_market import hardware as H
    from solders.pubkey import Pubkey

    keys = tuple(Pubkey.from_bytes(k) for k in KEYS)
    for v in DOC["rows"]:
        e = H.WrongAnswerEvidence(bytes.fromhex(v["challenge_digest"]), DOC_CHALLENGE.issued_at,
                                  bytes.fromhex(v["root"]), v["leaf_count"], v["row_index"],
                                  bytes.fromhex(v["leaf_hash"]),
                                  tuple(bytes.fromhex(s) for s in v["siblings"]))
        assert e.row_message(*keys).hex() == v["message"]
        assert e.answer_message(*keys) == M.answer_message(
            *KEYS, e.challenge_digest, e.challenged_at, e.root)
        assert e.is_wrong == ("computed_root" in v)
    for v in DOC["hardware"]:
        args = H.HardwareVerdictArgs(Pubkey.from_bytes(bytes.fromhex(v["worker_key"])),
                                     v["gpu_model"], v["gpu_count"], v["vram_mib"], v["passed"],
                                     int(v["challenged_at"]), bytes.fromhex(v["challenge_digest"]))
        assert args.message(*keys).hex() == v["message"]


DOC_CHALLENGE = C.Challenge.decode(bytes.fromhex(DOC["challenge"]))
