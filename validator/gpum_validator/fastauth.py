"""``authenticate`` for a batch of proofs through the Rust fast path (``gpum_fastpath``).

``authenticate_many(signed_list, cfg)`` returns, per item and in order, what
``verify.authenticate`` returns or raises (an ``Authenticated`` equal to Python's, or the
``Rejection`` with the same reason, message and HTTP status). Like ``authenticate`` it never
checks the proof signature (the receipt signature commits to sha256 of the proof bytes and
to seq, cumulative seconds, window end, job, market and program; the program and the
equivocation slash only ever use receipt signatures). One deliberate difference: the
receipt signature is judged by ed25519-dalek's ``verify_strict``, the rule of Solana's
Ed25519 program, so a receipt the chain would refuse (a small-order worker key or R, a
non-canonical S) is ``bad_receipt_signature`` here even where OpenSSL's cofactorless check,
which ``gpu_market.receipt.verify`` uses, accepts it (the identity key with R = identity,
S = 0 "signs" every message for OpenSSL).

Decoding (the canonical check included) and verification run in Rust with the GIL released;
this module only turns the extension's plain tuples into the validator's dataclasses
(layout: validator/fastpath/README.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpu_market.proof import (
    NO_WORKLOAD_WINDOW,
    CheckpointRecord,
    GpuWindow,
    WindowProof,
    WorkloadWindow,
)

from .config import VerifyConfig
from .errors import Rejection
from .schema import SignedProof
from .verify import Authenticated

try:
    import gpum_fastpath
except ImportError as e:  # pragma: no cover - exercised only on a venv built before it
    raise ImportError(
        "the validator's Rust fast path (gpum_fastpath, validator/fastpath) is not installed: "
        "run `make venv`, or `.venv/bin/pip install ./validator/fastpath`") from e

__all__ = ["authenticate_many", "proof_from_fields"]

_BAD_REQUEST_REASONS = frozenset({"proof_malformed", "proof_not_canonical",
                                  "worker_key_mismatch"})
"""Reasons ``verify.authenticate`` answers with HTTP 400; the others keep Rejection's 422."""

_NO_WORKLOAD = (0, None, 0, 0, None)


def proof_from_fields(fields: tuple[Any, ...]) -> WindowProof:
    """The ``WindowProof`` of an ``("ok", fields, ...)`` result: equal to ``decode_proof`` of
    the same bytes (the tuples are in the dataclasses' field order)."""
    gpus = tuple(GpuWindow(*g) for g in fields[9])
    w = fields[16]
    workload = NO_WORKLOAD_WINDOW if w == _NO_WORKLOAD else WorkloadWindow(
        *w[:4], None if w[4] is None else CheckpointRecord(*w[4]))
    return WindowProof(*fields[:9], gpus, *fields[10:16], workload)


def authenticate_many(signed_list: Sequence[SignedProof],
                      cfg: VerifyConfig) -> list[Authenticated | Rejection]:
    """``verify.authenticate`` of each item (see the module docstring), never raising for a
    bad item: its ``Rejection`` takes its place in the result."""
    results = gpum_fastpath.authenticate_many(
        cfg.program_id, cfg.market,
        [(s.proof, s.receipt_signature, s.worker_key) for s in signed_list])
    out: list[Authenticated | Rejection] = []
    for s, r in zip(signed_list, results, strict=True):
        if r[0] == "ok":
            out.append(Authenticated(s, proof_from_fields(r[1]), r[2], r[3]))
        else:
            reason = r[1]
            out.append(Rejection(reason, r[2], 400 if reason in _BAD_REQUEST_REASONS else None))
    return out
