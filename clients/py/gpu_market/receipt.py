"""Receipt message and Ed25519 helpers (pure: no I/O, no anchorpy); the format is
docs/protocol.md, "Receipts and window proofs".

The receipt message is what the worker key signs for every window and what the on-chain
``settle`` instruction checks byte for byte through an Ed25519-program instruction::

    b"gpu-market/receipt/v1" || program_id(32) || market(32) || job(32) ||
    seq:u64le || cumulative_seconds:u64le || window_end:i64le || proof_hash(32)

The worker key signs the **receipt digest**, ``sha256(receipt message)`` (32 bytes, so
an Ed25519 instruction then carries 32 bytes per receipt instead of 173, which lets three or
four settlements share a transaction). A committee member attests to a receipt and the
seconds it approves for the job up to it by signing the attestation message, the
digest followed by the approved cumulative seconds::

    sha256(receipt_message(...)) || approved_seconds:u64le                (40 bytes)

(``programs/gpu_market/src/receipt.rs::attestation_message``: one copy of these bytes in the
Ed25519 instruction before ``settle`` serves the worker's signature, over its first 32 bytes,
and every attestation.)

Guarantees: ``receipt_message`` returns exactly these 173 bytes or raises ``ValueError``
naming the bad argument; it never truncates, wraps or coerces a value. ``receipt_digest``,
``sign_receipt`` and ``verify_receipt`` take the 173-byte message (never the digest: a
ValueError, or False from ``verify_receipt``, for anything else). ``verify`` never raises on
malformed input, it returns False. Shared vectors: ``docs/vectors/receipt.json``.
"""

from __future__ import annotations

import hashlib
import struct

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

__all__ = [
    "ATTESTATION_MESSAGE_LEN",
    "I64_MAX",
    "I64_MIN",
    "PROOF_DOMAIN",
    "RECEIPT_DIGEST_LEN",
    "RECEIPT_DOMAIN",
    "RECEIPT_MESSAGE_LEN",
    "U64_MAX",
    "attestation_message",
    "attestation_signature",
    "private_key_from_seed",
    "public_key_bytes",
    "receipt_digest",
    "receipt_message",
    "sign",
    "sign_receipt",
    "verify",
    "verify_receipt",
]

RECEIPT_DOMAIN = b"gpu-market/receipt/v1"
"""Domain separator prefixed to every receipt message."""

PROOF_DOMAIN = b"gpu-market/proof/v1"
"""Domain separator prefixed to the borsh bytes of a window proof before signing."""

U64_MAX = 2**64 - 1
I64_MIN = -(2**63)
I64_MAX = 2**63 - 1

RECEIPT_MESSAGE_LEN = len(RECEIPT_DOMAIN) + 3 * 32 + 3 * 8 + 32
RECEIPT_DIGEST_LEN = 32
ATTESTATION_MESSAGE_LEN = RECEIPT_DIGEST_LEN + 8


def _check_bytes32(name: str, value: object) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ValueError(f"{name} must be 32 bytes, got {type(value).__name__}")  # noqa: TRY004
    b = bytes(value)
    if len(b) != 32:
        raise ValueError(f"{name} must be exactly 32 bytes, got {len(b)}")
    return b


def _check_int(name: str, value: object, lo: int, hi: int) -> int:
    # bool is an int subclass; a bool here is always a caller bug.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")  # noqa: TRY004
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value} is out of range [{lo}, {hi}]")
    return value


def receipt_message(
    program_id: bytes,
    market: bytes,
    job: bytes,
    seq: int,
    cumulative_seconds: int,
    window_end: int,
    proof_hash: bytes,
) -> bytes:
    """Return the exact receipt bytes (docs/protocol.md, "Receipts and window proofs") (173 bytes).

    Raises ValueError if a key/hash is not 32 bytes, ``seq`` or ``cumulative_seconds``
    is outside u64, or ``window_end`` is outside i64.
    """
    parts = (
        RECEIPT_DOMAIN,
        _check_bytes32("program_id", program_id),
        _check_bytes32("market", market),
        _check_bytes32("job", job),
        struct.pack("<Q", _check_int("seq", seq, 0, U64_MAX)),
        struct.pack("<Q", _check_int("cumulative_seconds", cumulative_seconds, 0, U64_MAX)),
        struct.pack("<q", _check_int("window_end", window_end, I64_MIN, I64_MAX)),
        _check_bytes32("proof_hash", proof_hash),
    )
    msg = b"".join(parts)
    assert len(msg) == RECEIPT_MESSAGE_LEN
    return msg


def _checked_receipt_message(receipt_message: bytes) -> bytes:
    msg = bytes(receipt_message)
    if len(msg) != RECEIPT_MESSAGE_LEN or not msg.startswith(RECEIPT_DOMAIN):
        raise ValueError(
            f"receipt_message must be a {RECEIPT_MESSAGE_LEN}-byte receipt message, got {len(msg)} bytes"
        )
    return msg


def receipt_digest(receipt_message: bytes) -> bytes:
    """``sha256(receipt_message)``: the 32 bytes the worker key signs (``Receipt::digest``).

    ValueError unless ``receipt_message`` is a 173-byte receipt message (a digest passed here
    by mistake would otherwise be hashed again and sign nothing the chain accepts).
    """
    return hashlib.sha256(_checked_receipt_message(receipt_message)).digest()


def sign_receipt(private_key: object, receipt_message: bytes) -> bytes:
    """The worker's receipt signature: Ed25519 over :func:`receipt_digest` by ``private_key``
    (an ``Ed25519PrivateKey``, a 32-byte seed, or anything with ``sign_message``)."""
    return _sign_any(private_key, receipt_digest(receipt_message))


def verify_receipt(pubkey32: bytes, sig64: bytes, receipt_message: bytes) -> bool:
    """True iff ``sig64`` is ``pubkey32``'s signature of the digest of ``receipt_message``;
    False (never an exception) for anything malformed, a wrong-length message included."""
    try:
        digest = receipt_digest(receipt_message)
    except (TypeError, ValueError):
        return False
    return verify(pubkey32, sig64, digest)


def attestation_message(receipt_message: bytes, approved_seconds: int) -> bytes:
    """The 40 bytes a committee member signs: ``receipt_digest(receipt_message) ||
    approved_seconds:u64le``.

    ValueError if ``receipt_message`` is not 173 bytes or ``approved_seconds`` is not a u64.
    """
    return receipt_digest(receipt_message) + struct.pack(
        "<Q", _check_int("approved_seconds", approved_seconds, 0, U64_MAX))


def _sign_any(signer: object, msg: bytes) -> bytes:
    sign_message = getattr(signer, "sign_message", None)
    if sign_message is not None:
        return bytes(sign_message(msg))
    return sign(signer, msg)  # type: ignore[arg-type]


def attestation_signature(signer: object, receipt_message: bytes, approved_seconds: int) -> bytes:
    """Ed25519 signature (64 bytes) of :func:`attestation_message` by ``signer``: a
    ``solders`` Keypair (anything with ``sign_message``), an ``Ed25519PrivateKey`` or a
    32-byte seed."""
    return _sign_any(signer, attestation_message(receipt_message, approved_seconds))


def private_key_from_seed(seed: bytes) -> Ed25519PrivateKey:
    """Ed25519 private key from its 32-byte seed (the first half of a Solana key file)."""
    return Ed25519PrivateKey.from_private_bytes(_check_bytes32("seed", seed))


def public_key_bytes(private_key: Ed25519PrivateKey) -> bytes:
    """The 32 raw public-key bytes (a Solana pubkey) of ``private_key``."""
    return private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def sign(private_key: Ed25519PrivateKey | bytes, msg: bytes) -> bytes:
    """Ed25519 signature (64 bytes) of ``msg``; ``private_key`` may be a 32-byte seed."""
    if not isinstance(private_key, Ed25519PrivateKey):
        private_key = private_key_from_seed(private_key)
    return private_key.sign(bytes(msg))


def verify(pubkey32: bytes, sig64: bytes, msg: bytes) -> bool:
    """True iff ``sig64`` is a valid Ed25519 signature of ``msg`` by ``pubkey32``.

    Malformed keys or signatures (wrong length, not a curve point) yield False.
    """
    try:
        pk = bytes(pubkey32)
        sig = bytes(sig64)
    except TypeError:
        return False
    if len(pk) != 32 or len(sig) != 64:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(pk).verify(sig, bytes(msg))
    except (InvalidSignature, ValueError):
        return False
    return True
