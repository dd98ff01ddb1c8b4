from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gpu_market.receipt import private_key_from_seed, public_key_bytes
from gpum_worker.keys import WorkerKey


@pytest.fixture
def key() -> WorkerKey:
    seed = bytes(range(32))
    sk = private_key_from_seed(seed)
    return WorkerKey(sk, seed, public_key_bytes(sk))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Default key/outbox paths point into a temp dir, never the real home."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    for k in list(__import__("os").environ):
        if k.startswith("GPUM_WORKER_"):
            monkeypatch.delenv(k)


# The one S3 server launcher of the repository's tests (tests/s3server.py): a session fixture
# shared with every other test folder that imports it.
sys.path.append(str(Path(__file__).resolve().parents[2] / "tests"))
from s3server import s3_server  # noqa: F401
