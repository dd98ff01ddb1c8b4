"""Fixtures of the end-to-end tests: one local chain for the session, a fresh market per world.

``shared_localnet`` is one ``gpum-localnet`` process (``$GPUM_LOCALNET_BIN``, which ``make
test`` builds) for the whole session, RPC on a free port P and PubSub on P + 1; its log is in
the session's ``localnet`` tmp dir. It is the ``localnet`` of every module that does not ask
for its own, and markets never meet on it: ``market_factory`` makes each one with
a fresh admin (``harness.create_market``), so every module or test that asks for one gets its
own mints, market and funded parties, and no state of another.

A module that needs a chain of its own says why in ``OWN_LOCALNET``; its ``localnet`` is then
one started for the module through the same harness and stopped after it. Those are the modules
that warp the chain's clock (``gpum_warpTime``), which never goes back: on the shared chain
every later worker would wait for windows starting minutes or hours after the wall clock's now
(``test_e2e_hardening``, ``test_e2e_offers``, ``test_e2e_batched_settlement``).

``test_e2e_localnet`` starts no chain here: it tests the demo, which starts its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gpu_market.processes import LocalChain, Processes, start_localnet
from harness import Market, create_market


def _chain(workdir: Path) -> Iterator[LocalChain]:
    assert os.environ.get("GPUM_LOCALNET_BIN"), "run through `make test` (builds gpum-localnet)"
    procs = Processes(workdir)
    try:
        yield start_localnet(procs)
    finally:
        procs.stop_all()


@pytest.fixture(scope="session", autouse=True)
def local_job_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``gpum``'s local job history (names, receipts) of every command the tests run, their
    subprocesses included, lives in the session's tmp dir, never in the user's home."""
    folder = tmp_path_factory.mktemp("gpum-data")
    before = os.environ.get("GPUM_DATA_DIR")
    os.environ["GPUM_DATA_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("GPUM_DATA_DIR", None)
    else:
        os.environ["GPUM_DATA_DIR"] = before


@pytest.fixture(scope="session")
def shared_localnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalChain]:
    """The session's local chain."""
    yield from _chain(tmp_path_factory.mktemp("localnet"))


@pytest.fixture(scope="module")
def localnet(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalChain]:
    """The module's chain: the session's, or one of its own where it sets ``OWN_LOCALNET``."""
    if getattr(request.module, "OWN_LOCALNET", None):
        yield from _chain(tmp_path_factory.mktemp("own-localnet"))
    else:
        yield request.getfixturevalue("shared_localnet")


@pytest.fixture(scope="module")
def market_factory(localnet: LocalChain) -> Iterator[Callable[..., Market]]:
    """``make(workdir, names, params, stake=..., payment=...)``: a fresh market on ``localnet``
    (``harness.create_market``); the clients it made are closed after the module."""
    made: list[Market] = []

    def make(workdir: Path, names: list[str], params: dict[str, Any], **funds: Any) -> Market:
        m = create_market(localnet.url, workdir, names, params, **funds)
        made.append(m)
        return m

    yield make
    for m in made:
        m.client.close()


from s3server import s3_server  # noqa: F401  (the real S3 server: tests/s3server.py)
