"""Type stubs of the gpum_fastpath extension (see validator/fastpath/README.md)."""

from typing import Any

MAX_PROOF_BYTES: int
RECEIPT_MESSAGE_LEN: int

def authenticate_many(
    program_id: bytes, market: bytes, items: list[tuple[bytes, bytes, bytes]]
) -> list[tuple[Any, ...]]: ...
def screen_many(
    program_id: bytes, market: bytes, objs: list[Any]
) -> list[tuple[Any, ...] | None]: ...
def verify_strict_one(pubkey: bytes, sig: bytes, msg: bytes) -> bool: ...
