"""Field checks shared by the workload spec (``workload``) and its checkpoint section
(``checkpoint_spec``): pure, no I/O. Every refusal is a :class:`WorkloadSpecError` naming the
field and what is allowed.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

__all__ = [
    "MAX_ITEM_BYTES",
    "MAX_SECRET_B64_CHARS",
    "SEALED_BOX_OVERHEAD",
    "WorkloadSpecError",
    "check_int",
    "check_secret_b64",
    "check_str",
    "json_type",
    "no_duplicate_keys",
    "reject_constant",
    "reject_float",
    "utf8_len",
]

MAX_ITEM_BYTES = 4096
"""One ``command``/``args`` item, one ``env`` value, one secret's plaintext (UTF-8 bytes)."""
SEALED_BOX_OVERHEAD = 48
"""Bytes a sealed box adds to its plaintext (ephemeral X25519 key 32 + MAC 16)."""
MAX_SECRET_B64_CHARS = 8192


class WorkloadSpecError(ValueError):
    """A workload spec, its JSON, a CLI ``--env``/``--port`` argument or a sealed secret is
    not acceptable; the message names the field and what is allowed."""


def utf8_len(field: str, value: str) -> int:
    """UTF-8 length of ``value``; WorkloadSpecError on NUL or a lone surrogate."""
    if "\x00" in value:
        raise WorkloadSpecError(f"{field} contains a NUL character, which is not allowed")
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise WorkloadSpecError(
            f"{field} contains a lone surrogate and is not valid Unicode text"
        ) from None


def check_str(field: str, value: object, max_bytes: int) -> str:
    if not isinstance(value, str):
        raise WorkloadSpecError(f"{field} must be a string, got {type(value).__name__}")
    n = utf8_len(field, value)
    if n > max_bytes:
        raise WorkloadSpecError(f"{field} is {n} bytes; at most {max_bytes} UTF-8 bytes allowed")
    return value


def check_int(field: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadSpecError(
            f"{field} must be an integer {lo}..{hi}, got {type(value).__name__}"
        )
    if not lo <= value <= hi:
        raise WorkloadSpecError(f"{field}={value} is out of range; allowed {lo}..{hi}")
    return value


def check_secret_b64(field: str, value: object) -> bytes:
    """The sealed box that ``value`` encodes: canonical standard base64 (padded) of
    ``SEALED_BOX_OVERHEAD``..``SEALED_BOX_OVERHEAD + MAX_ITEM_BYTES`` bytes."""
    check_str(field, value, MAX_SECRET_B64_CHARS)
    assert isinstance(value, str)
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raw = None
    if raw is None or base64.b64encode(raw).decode("ascii") != value:
        raise WorkloadSpecError(
            f"{field} must be the standard padded base64 of a sealed box (use seal_secrets)"
        )
    lo, hi = SEALED_BOX_OVERHEAD, SEALED_BOX_OVERHEAD + MAX_ITEM_BYTES
    if not lo <= len(raw) <= hi:
        raise WorkloadSpecError(
            f"{field} decodes to {len(raw)} bytes; a sealed secret is {lo}..{hi} bytes"
        )
    return raw


def json_type(value: object) -> str:
    """How an error message names the JSON type of ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` refusing an object with a key twice."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise WorkloadSpecError(f"the spec JSON has the key {key!r} twice in one object")
        obj[key] = value
    return obj


def reject_float(text: str) -> Any:
    raise WorkloadSpecError(f"the spec JSON has the number {text}; only integers are allowed")


def reject_constant(text: str) -> Any:
    raise WorkloadSpecError(f"the spec JSON has {text}, which is not JSON")
