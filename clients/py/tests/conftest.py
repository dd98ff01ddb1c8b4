"""Shared fixtures: the IDL under test and a codec built from it.

Tests use the committed ``idl/gpu_market.json`` (regenerate with ``make idl``). Nothing here
touches the network or the process environment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpu_market.codec import Codec

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


from sdktestkit import job_bytes as _job_bytes


@pytest.fixture(scope="session")
def job_bytes():
    """Builder of Job account bytes encoded by hand from ``state/job.rs``."""
    return _job_bytes
