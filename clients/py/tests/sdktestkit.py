"""Hand-built account bytes shared by the SDK tests (a module with a unique name: pytest
imports every test folder's ``conftest`` under the same name, so tests must not import from
it)."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from solders.pubkey import Pubkey

# JobTerms of the hand-built job: rate 300, fee 500 bps, burn 5000 bps, 60 s windows, 10 missed
# windows, grace 720 s (12 windows), skew 5, quorum 1, downtime 100 bps, equivocation 5000 bps,
# reporter 1000 bps, 95 C, 0 ECC errors, validator reward 1000 bps.
JOB_TERMS = (300, 500, 5000, 60, 10, 720, 5, 1, 100, 5000, 1000, 95, 0, 1000)
JOB_TERMS_FMT = "<QHHIIqIBHHHHIH"  # JobTerms field types, in order (state/job.rs)
JOB_STARTED_AT = 1_700_000_005
JOB_LAST_WINDOW_END = 1_700_000_125
# deposited, claimed_seconds, paid_seconds, paid_provider, paid_validators, paid_treasury,
# burned, refunded
JOB_AMOUNTS = (1_000_000, 130, 120, 34_200, 100, 800, 900, 0)
DEFAULT_MEMBER = Pubkey(bytes([77] * 32))
"""The committee of a hand-built job unless one is given."""


def job_bytes(market: Pubkey, user: Pubkey, provider: Pubkey, status: int, ended_at: int = 0,
              committee: Sequence[Pubkey] = (DEFAULT_MEMBER,), quorum: int = 1,
              rated: bool = False) -> bytes:  # fmt: skip
    """A Job account, encoded by hand from ``state/job.rs``."""
    terms = list(JOB_TERMS)
    terms[7] = quorum
    members = b"".join(bytes(k) for k in committee).ljust(32 * 5, b"\0")
    return (
        hashlib.sha256(b"account:Job").digest()[:8]
        + bytes(market) + bytes(user) + bytes(provider)
        + struct.pack("<QH", 42, 2)
        + struct.pack(JOB_TERMS_FMT, *terms)
        + members + bytes([len(committee)])
        + struct.pack("<8Q", *JOB_AMOUNTS)
        + bytes([status])
        + struct.pack("<qqqQ", 1_700_000_000, JOB_STARTED_AT, ended_at, 7)
        + bytes(range(32))
        + struct.pack("<qBB", JOB_LAST_WINDOW_END, 254, 253)
        + bytes([0x77]) * 32  # workload_hash
        + bytes([int(rated)])
    )  # fmt: skip


def validator_bytes(market: Pubkey, authority: Pubkey, bond: int = 500, status: int = 0,
                    endpoint: str = "http://127.0.0.1:8080", settlements: int = 4,
                    rewards: tuple[int, int] = (90, 30), slashes: int = 0,
                    unbonding: tuple[int, int] = (0, 0)) -> bytes:  # fmt: skip
    """A Validator account, encoded by hand from ``state/validator.rs`` (status 0 Active, 1
    Exiting; ``rewards``: (earned, unclaimed))."""
    return (
        hashlib.sha256(b"account:Validator").digest()[:8] + bytes(market) + bytes(authority)
        + struct.pack("<QQqBQB", bond, unbonding[0], unbonding[1], status, settlements, 254)
        + endpoint.encode().ljust(96, b"\0") + struct.pack("<QQI", *rewards, slashes)
    )  # fmt: skip
