"""Hand-built account bytes shared by the SDK tests (a module with a unique name: pytest
imports every test folder's ``conftest`` under the same name, so tests must not import from
it)."""

from __future__ import annotations

import hashlib
import struct

from solders.pubkey import Pubkey

# JobTerms of the hand-built job: rate 300, fee 500 bps, burn 5000 bps, 60 s windows, 10 missed
# windows, grace 720 s (12 windows), skew 5, quorum 1, downtime 100 bps, equivocation 5000 bps,
# reporter 1000 bps, 95 C, 0 ECC errors.
JOB_TERMS = (300, 500, 5000, 60, 10, 720, 5, 1, 100, 5000, 1000, 95, 0)
JOB_TERMS_FMT = "<QHHIIqIBHHHHI"  # JobTerms field types, in order (state/job.rs)
JOB_STARTED_AT = 1_700_000_005
JOB_LAST_WINDOW_END = 1_700_000_125


def job_bytes(market: Pubkey, user: Pubkey, provider: Pubkey, status: int,
               ended_at: int = 0) -> bytes:  # fmt: skip
    """A Job account, encoded by hand from ``state/job.rs``."""
    return (
        hashlib.sha256(b"account:Job").digest()[:8]
        + bytes(market) + bytes(user) + bytes(provider)
        + struct.pack("<QH", 42, 2)
        + struct.pack(JOB_TERMS_FMT, *JOB_TERMS)
        + struct.pack("<QQQQQQ", 1_000_000, 120, 34_200, 900, 900, 0)
        + bytes([status])
        + struct.pack("<qqqQ", 1_700_000_000, JOB_STARTED_AT, ended_at, 7)
        + bytes(range(32))
        + struct.pack("<qBB", JOB_LAST_WINDOW_END, 254, 253)
    )  # fmt: skip


