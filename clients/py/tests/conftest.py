"""Shared fixtures: the IDL under test and a codec built from it.

Tests use the committed ``idl/gpu_market.json`` (regenerate with ``make idl``). Nothing here
touches the network or the process environment.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
from gpu_market.codec import Codec
from solders.pubkey import Pubkey

REPO = Path(__file__).resolve().parents[3]
COMMITTED_IDL = REPO / "idl" / "gpu_market.json"
IDL_PATH = COMMITTED_IDL


@pytest.fixture(scope="session")
def idl_path() -> Path:
    if not IDL_PATH.exists():
        pytest.fail(f"{IDL_PATH} is missing: run `make idl` in the repository root")
    return IDL_PATH


@pytest.fixture(scope="session")
def new_idl(idl_path) -> dict:
    return json.loads(idl_path.read_text())


@pytest.fixture(scope="session")
def codec(new_idl) -> Codec:
    return Codec(new_idl)


def _job_bytes(market: Pubkey, user: Pubkey, provider: Pubkey, status: int) -> bytes:
    """A Job account, encoded by hand from ``state/job.rs``."""
    return (
        hashlib.sha256(b"account:Job").digest()[:8]
        + bytes(market) + bytes(user) + bytes(provider)
        + struct.pack("<QHQQQQQQQ", 42, 2, 300, 1_000_000, 120, 34_200, 900, 900, 0)
        + bytes([status])
        + struct.pack("<qqqQ", 1_700_000_000, 1_700_000_005, 0, 7)
        + bytes(range(32))
        + struct.pack("<qBB", 1_700_000_125, 254, 253)
    )  # fmt: skip


@pytest.fixture(scope="session")
def job_bytes():
    """Builder of Job account bytes encoded by hand from ``state/job.rs``."""
    return _job_bytes
