"""Receipt message and digest: shared vectors, layout, range checks, signing."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
from gpu_market.receipt import (
    I64_MAX,
    I64_MIN,
    PROOF_DOMAIN,
    RECEIPT_DOMAIN,
    RECEIPT_MESSAGE_LEN,
    U64_MAX,
    private_key_from_seed,
    public_key_bytes,
    receipt_digest,
    receipt_message,
    sign,
    sign_receipt,
    verify,
    verify_receipt,
)

VECTORS = Path(__file__).resolve().parents[3] / "docs" / "vectors" / "receipt.json"
DOC = json.loads(VECTORS.read_text())


def _args(v: dict) -> tuple:
    return (
        bytes.fromhex(v["program_id"]), bytes.fromhex(v["market"]), bytes.fromhex(v["job"]),
        int(v["seq"]), int(v["cumulative_seconds"]), int(v["window_end"]),
        bytes.fromhex(v["proof_hash"]),
    )


def test_domains() -> None:
    assert RECEIPT_DOMAIN == b"gpu-market/receipt/v1"
    assert PROOF_DOMAIN == b"gpu-market/proof/v1"
    assert DOC["domain_hex"] == RECEIPT_DOMAIN.hex()
    assert RECEIPT_MESSAGE_LEN == DOC["message_len"] == 173


@pytest.mark.parametrize("v", DOC["vectors"], ids=lambda v: v["name"])
def test_vector_message_bytes(v: dict) -> None:
    prog, market, job, seq, cum, we, ph = _args(v)
    # Independent construction straight from docs/protocol.md, "Receipts and window proofs".
    expected = (b"gpu-market/receipt/v1" + prog + market + job + struct.pack("<QQq", seq, cum, we)
                + ph)
    assert expected.hex() == v["message"]
    assert receipt_message(prog, market, job, seq, cum, we, ph) == expected


@pytest.mark.parametrize("v", DOC["vectors"], ids=lambda v: v["name"])
def test_vector_signature(v: dict) -> None:
    """The worker signs sha256 of the message (the receipt digest), never the message."""
    sk = private_key_from_seed(bytes.fromhex(DOC["signer_seed"]))
    pk = public_key_bytes(sk)
    assert pk.hex() == DOC["signer_pubkey"]
    msg = bytes.fromhex(v["message"])
    sig = bytes.fromhex(v["signature"])
    assert receipt_digest(msg) == hashlib.sha256(msg).digest() == bytes.fromhex(v["digest"])
    assert len(receipt_digest(msg)) == DOC["digest_len"] == 32
    assert sign_receipt(sk, msg) == sig  # Ed25519 is deterministic
    assert sign_receipt(bytes.fromhex(DOC["signer_seed"]), msg) == sig
    assert sign(sk, receipt_digest(msg)) == sig
    assert verify_receipt(pk, sig, msg) and verify(pk, sig, receipt_digest(msg))
    assert not verify(pk, sig, msg)  # a signature over the whole message is not a receipt's
    assert not verify_receipt(pk, sign(sk, msg), msg)
    assert not verify_receipt(pk, sig, msg[:-1] + bytes([msg[-1] ^ 1]))
    assert not verify_receipt(pk, sig, receipt_digest(msg))  # a digest is not a message
    bad = bytearray(sig)
    bad[0] ^= 0x80
    assert not verify_receipt(pk, bytes(bad), msg)


@pytest.mark.parametrize("v", DOC["vectors"], ids=lambda v: v["name"])
def test_vector_attestation(v: dict) -> None:
    from gpu_market.receipt import attestation_message, attestation_signature

    seed = bytes.fromhex(DOC["signer_seed"])
    msg, approved = bytes.fromhex(v["message"]), int(v["approved_seconds"])
    att = attestation_message(msg, approved)
    assert att.hex() == v["attestation"] and len(att) == DOC["attestation_len"]
    assert attestation_signature(seed, msg, approved).hex() == v["attestation_signature"]


def test_receipt_digest_refuses_anything_but_a_receipt_message() -> None:
    msg = receipt_message(bytes(32), bytes(32), bytes(32), 1, 60, 60, bytes(32))
    for bad in (msg[:-1], msg + b"\x00", receipt_digest(msg), b"gpu-market/receipt/v2" + msg[21:]):
        with pytest.raises(ValueError, match="173-byte receipt message"):
            receipt_digest(bad)
        with pytest.raises(ValueError, match="173-byte receipt message"):
            sign_receipt(bytes(32), bad)
        assert verify_receipt(bytes(32), bytes(64), bad) is False


def test_known_seed_pubkey() -> None:
    # RFC 8032 key derivation for seed 00..1f (widely published value).
    sk = private_key_from_seed(bytes(range(32)))
    assert public_key_bytes(sk).hex() == (
        "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8")


def test_boundaries_accepted() -> None:
    z = bytes(32)
    assert len(receipt_message(z, z, z, U64_MAX, U64_MAX, I64_MAX, z)) == 173
    assert len(receipt_message(z, z, z, 0, 0, I64_MIN, z)) == 173


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"seq": -1}, "seq"),
        ({"seq": U64_MAX + 1}, "seq"),
        ({"cumulative_seconds": -1}, "cumulative_seconds"),
        ({"cumulative_seconds": U64_MAX + 1}, "cumulative_seconds"),
        ({"window_end": I64_MAX + 1}, "window_end"),
        ({"window_end": I64_MIN - 1}, "window_end"),
        ({"seq": True}, "seq"),
        ({"seq": 1.0}, "seq"),
        ({"program_id": bytes(31)}, "program_id"),
        ({"market": bytes(33)}, "market"),
        ({"job": "00" * 32}, "job"),
        ({"proof_hash": b""}, "proof_hash"),
    ],
)
def test_range_checks(kwargs: dict, needle: str) -> None:
    args = {"program_id": bytes(32), "market": bytes(32), "job": bytes(32), "seq": 1,
                "cumulative_seconds": 1, "window_end": 1, "proof_hash": bytes(32)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=needle):
        receipt_message(**args)


def test_verify_malformed_inputs_return_false() -> None:
    assert not verify(b"\x00" * 31, bytes(64), b"m")
    assert not verify(bytes(32), bytes(63), b"m")
    assert not verify(b"\xff" * 32, bytes(64), b"m")
    assert not verify(None, None, b"m")  # type: ignore[arg-type]


def test_attestation_message_is_the_receipt_digest_then_approved_seconds() -> None:
    from gpu_market.receipt import (
        ATTESTATION_MESSAGE_LEN,
        attestation_message,
        attestation_signature,
    )
    from solders.keypair import Keypair

    msg = receipt_message(bytes(32), bytes([1]) * 32, bytes([2]) * 32, 3, 180, 1_700_000_180, bytes(32))
    att = attestation_message(msg, 170)
    assert ATTESTATION_MESSAGE_LEN == len(att) == 40
    assert att == hashlib.sha256(msg).digest() + struct.pack("<Q", 170)  # receipt.rs::attestation_message
    kp = Keypair()
    sig = attestation_signature(kp, msg, 170)
    assert verify(bytes(kp.pubkey()), sig, att) and not verify(bytes(kp.pubkey()), sig, msg)
    seed = bytes([7]) * 32
    key = private_key_from_seed(seed)
    assert attestation_signature(seed, msg, 170) == attestation_signature(key, msg, 170) == sign(key, att)
    for bad in (-1, 2**64, True):
        with pytest.raises(ValueError, match="approved_seconds"):
            attestation_message(msg, bad)
    with pytest.raises(ValueError, match="173-byte receipt message"):
        attestation_message(msg[:-1], 1)
