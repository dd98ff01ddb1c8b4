"""Shared fixtures: the IDL under test and a codec built from it.

Tests use the committed ``idl/gpu_market.json`` (regenerate with ``make idl``). Nothing here
touches the network. Every test runs with ``gpum``'s files (job history, saved specs, top-up
ledgers, templates, Solana CLI config) in its own tmp dir, never the user's home.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from gpu_market.codec import Codec
from solders.keypair import Keypair

REPO = Path(__file__).resolve().parents[3]
COMMITTED_IDL = REPO / "idl" / "gpu_market.json"
IDL_PATH = COMMITTED_IDL


@pytest.fixture(scope="session")
def idl_path() -> Path:
    if not IDL_PATH.exists():
        pytest.fail(f"{IDL_PATH} is missing: run `make idl` in the repository root")
    return IDL_PATH


@pytest.fixture(autouse=True)
def gpum_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, idl_path: Path) -> Path:
    """The environment of every test: the committed IDL, no Solana CLI config, no default market,
    and ``gpum``'s local files under ``tmp_path / "home"``."""
    home = tmp_path / "home"
    monkeypatch.setenv("GPU_MARKET_IDL", str(idl_path))
    monkeypatch.setenv("GPUM_SOLANA_CONFIG", str(tmp_path / "no-config.yml"))
    monkeypatch.setenv("GPUM_DATA_DIR", str(home / "data"))
    monkeypatch.setenv("GPUM_WORKLOADS_DIR", str(home / "workloads"))
    monkeypatch.setenv("GPUM_TOPUPS_DIR", str(home / "topups"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.delenv("GPUM_MARKET", raising=False)
    monkeypatch.delenv("GPUM_DEBUG", raising=False)
    return home


@pytest.fixture
def user(tmp_path: Path) -> tuple[Keypair, str]:
    """A fresh wallet and its Solana keypair file (the ``--keypair`` of CLI tests)."""
    kp = Keypair()
    path = tmp_path / "id.json"
    path.write_text(json.dumps(list(bytes(kp))))
    return kp, str(path)


@pytest.fixture
def keyfile(user: tuple[Keypair, str]) -> str:
    """The keypair file of a fresh wallet."""
    return user[1]


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


# The one S3 server launcher of the repository's tests (tests/s3server.py): a session fixture
# shared with every other test folder that imports it.
sys.path.append(str(Path(__file__).resolve().parents[3] / "tests"))
from s3server import s3_server  # noqa: F401
