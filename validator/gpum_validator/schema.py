"""JSON shape of the worker -> validator requests (docs/wire-formats.md); pure.

``parse_signed_proof`` accepts exactly the four SignedProof fields, strict base64 (canonical,
padded) and canonical base58; anything else raises ``Rejection`` with HTTP 400 and a message
naming the field.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from solders.pubkey import Pubkey

from .config import MAX_BATCH
from .errors import Rejection

SIGNED_PROOF_FIELDS = ("proof", "proof_signature", "receipt_signature", "worker_key")


@dataclass(frozen=True)
class SignedProof:
    """A SignedProof request decoded to bytes (nothing verified yet)."""

    proof: bytes
    proof_signature: bytes
    receipt_signature: bytes
    worker_key: bytes


def _bad(message: str) -> Rejection:
    return Rejection("bad_request", message, 400)


def _b64(obj: dict[str, Any], name: str) -> bytes:
    v = obj[name]
    if not isinstance(v, str):
        raise _bad(f"{name} must be a base64 string")
    try:
        raw = base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(f"{name} is not valid base64") from None
    if base64.b64encode(raw).decode() != v:
        raise _bad(f"{name} is not canonical padded base64")
    return raw


def b58_pubkey(v: object, name: str) -> bytes:
    """32 bytes of a canonical base58 public key, or a 400 Rejection naming ``name``."""
    if not isinstance(v, str):
        raise _bad(f"{name} must be a base58 string")
    try:
        pk = Pubkey.from_string(v)
    except ValueError:
        raise _bad(f"{name} is not a base58 32-byte public key") from None
    if str(pk) != v:
        raise _bad(f"{name} is not canonical base58")
    return bytes(pk)


def parse_signed_proof(obj: object) -> SignedProof:
    """Validate one SignedProof JSON object and decode its fields."""
    if not isinstance(obj, dict):
        raise _bad("a SignedProof must be a JSON object")
    unknown = sorted(set(obj) - set(SIGNED_PROOF_FIELDS))
    if unknown:
        raise _bad(f"unknown field(s) {', '.join(map(repr, unknown))}; "
                   f"expected exactly {', '.join(SIGNED_PROOF_FIELDS)}")
    missing = [f for f in SIGNED_PROOF_FIELDS if f not in obj]
    if missing:
        raise _bad(f"missing field(s) {', '.join(missing)}")
    proof = _b64(obj, "proof")
    if not proof:
        raise _bad("proof is empty")
    psig = _b64(obj, "proof_signature")
    rsig = _b64(obj, "receipt_signature")
    for name, sig in (("proof_signature", psig), ("receipt_signature", rsig)):
        if len(sig) != 64:
            raise _bad(f"{name} must be 64 bytes, got {len(sig)}")
    return SignedProof(proof, psig, rsig, b58_pubkey(obj["worker_key"], "worker_key"))


def parse_batch(obj: object) -> list[object]:
    """The list of raw SignedProof objects of a batch request (each parsed separately)."""
    if not isinstance(obj, dict):
        raise _bad("a batch must be a JSON object {\"proofs\": [...]}")
    unknown = sorted(set(obj) - {"proofs"})
    if unknown:
        raise _bad(f"unknown field(s) {', '.join(map(repr, unknown))}; expected only 'proofs'")
    proofs = obj.get("proofs")
    if not isinstance(proofs, list):
        raise _bad("'proofs' must be a list of SignedProof objects")
    if not 1 <= len(proofs) <= MAX_BATCH:
        raise _bad(f"a batch holds 1..{MAX_BATCH} proofs, got {len(proofs)}")
    return proofs
