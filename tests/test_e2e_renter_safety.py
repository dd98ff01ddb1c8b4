"""Never take money for a provider that is not there, end to end: the local chain, a real
worker (``gpum-worker run --api-listen`` with podman), and the user driving the ``gpum`` CLI.

The module's world: a market with two providers of the same GPU model,

    A  price 0.0005/GPU-s (the cheapest)  its real worker, stopped by the first test
    B  price 0.001/GPU-s                  a stand-in worker: /v1/health answers ok, every
                                          delivery answers 503 (it never takes a workload)

and a stand-in validator that answers ``/health`` (the default committee). ``gpum offers``
hides A once its worker is down (``--all`` shows it last, offline), ``gpum run --provider A``
is refused before any transaction, and ``gpum run`` picks B, whose delivery fails: the job is
cancelled and the deposit refunded in full within ``--timeout``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gpu_market import pda
from gpu_market.offers import list_offers
from gpu_market.processes import JsonServer, Processes, free_port
from harness import CliNetwork, Market, podman_setup, register_provider, start_worker
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

IMAGE = "localhost/gpum-busybox:1"
TIMEOUT = 20


@dataclass
class World(CliNetwork):
    ENV = (("GPUM_WORKLOADS_DIR", "specs"),)
    FAILED = "gpum {args} failed:\n{stderr}"

    a: Pubkey
    b: Pubkey
    a_endpoint: str
    b_endpoint: str
    worker_a: subprocess.Popen
    deliveries: list[str]

    def timed(self, who: str, *args: str, ok: bool = True, timeout: float = 120,
              output: str = "json") -> tuple[int, str, str, float]:  # fmt: skip
        """``gpum`` and the seconds it took."""
        start = time.monotonic()
        code, out, err = self.gpum(who, *args, ok=ok, output=output, timeout=timeout)
        return code, out, err, time.monotonic() - start

    def offers(self, *args: str) -> list[dict[str, Any]]:
        return json.loads(self.gpum("user", "offers", "--market", str(self.market), *args)[1])

    def user_jobs(self) -> list[Any]:
        return self.client.list_jobs(user=self.kps["user"].pubkey(), market=self.market)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory,
          market_factory: Callable[..., Market]) -> Iterator[World]:
    workdir: Path = tmp_path_factory.mktemp("renter-safety")
    podman_setup(workdir, IMAGE)
    m = market_factory(workdir, ["owner_a", "owner_b", "user", "validator", "worker_a",
                                 "worker_b"], {
        "window_seconds": 2, "min_stake_per_gpu": 100, "validator_min_bond": 100,
        "unbonding_seconds": 0},
        stake={"owner_a": 10**9, "owner_b": 10**9, "validator": 10**9},
        payment={"user": 1_000 * 10**6})  # fmt: skip
    procs = Processes(workdir)
    deliveries: list[str] = []

    def stand_in_post(path: str, body: Any) -> tuple[int, Any]:
        deliveries.append(path)
        return 503, {"error": "busy"}

    def stand_in_get(path: str) -> tuple[int, Any]:
        if path in ("/v1/health", "/health"):
            return 200, {"ok": True}
        return 404, {"error": "no such endpoint"}

    stub = JsonServer(stand_in_post, stand_in_get)
    try:
        port_a = free_port()
        world = World(workdir, procs, m.url, m.client, m.keys, m.kps, m.address,
                      pda.provider_pda(m.address, m.kps["owner_a"].pubkey()),
                      pda.provider_pda(m.address, m.kps["owner_b"].pubkey()),
                      f"http://127.0.0.1:{port_a}", stub.url, None, deliveries)  # type: ignore[arg-type]
        for owner, worker, price, endpoint in (("owner_a", "worker_a", "1.8", world.a_endpoint),
                                               ("owner_b", "worker_b", "3.6", stub.url)):
            register_provider(world, owner, m.kps[worker].pubkey(), gpus=2, price=price,
                              endpoint=endpoint)  # fmt: skip
        world.gpum("validator", "validator", "register", "--market", str(m.address),
                   "--endpoint", stub.url, "--bond", "500")
        world.worker_a = start_worker(world, world.a, port_a, name="worker_a", key="worker_a",
                                      gpus=2, window=2, publish_host=False)  # fmt: skip
        yield world
    finally:
        procs.stop_all()
        stub.close()


def test_a_provider_whose_worker_stops_is_hidden_then_shown_last_and_refused(world: World) -> None:
    rows = world.offers()
    assert [r["provider"] for r in rows] == [str(world.a), str(world.b)]
    assert [r["online"] for r in rows] == [True, True]
    assert all(isinstance(r["checked_at"], int) and r["last_seen"] == r["checked_at"]
               for r in rows)
    # A's worker goes away.
    os.killpg(world.worker_a.pid, signal.SIGTERM)
    world.worker_a.wait(timeout=30)
    assert [r["provider"] for r in world.offers()] == [str(world.b)]
    shown = world.offers("--all")
    assert [(r["provider"], r["online"]) for r in shown] == [(str(world.b), True),
                                                              (str(world.a), False)]
    assert shown[1]["last_seen"] is None and world.a_endpoint in shown[1]["liveness_error"]
    assert [r["provider"] for r in world.offers("--all", "online=false")] == [str(world.a)]
    sdk = list_offers(world.client, world.market, probe=True)
    assert [(o.provider, o.online) for o in sdk] == [(world.b, True), (world.a, False)]
    _, text, _ = world.gpum("user", "offers", "--market", str(world.market), output="text")
    assert "1 offline provider(s) hidden" in text and "--all" in text
    # Renting A is refused before any transaction: the user's tokens do not move.
    before = world.balance("user")
    code, _, err, took = world.timed(
        "user", "run", "--market", str(world.market), "--gpu", "h100:1", "--hours", "0.01",
        "--image", IMAGE, "--provider", str(world.a), "--timeout", str(TIMEOUT), ok=False)
    assert code == 1 and took < TIMEOUT
    assert f"provider {world.a}'s worker at {world.a_endpoint} failed its health check" in err
    assert "no money moved" in err
    assert world.balance("user") == before and world.user_jobs() == []


def test_a_failed_delivery_cancels_the_job_and_refunds_it_in_full_within_the_timeout(
        world: World) -> None:  # fmt: skip
    before = world.balance("user")
    code, _, err, took = world.timed(
        "user", "run", "--market", str(world.market), "--gpu", "h100:1", "--hours", "0.01",
        "--image", IMAGE, "--timeout", str(TIMEOUT), ok=False)
    # A is down, so B (alive, but refusing every delivery) was chosen; run gave up in time.
    assert code == 1, err
    assert took < TIMEOUT + 5, took  # the command's own start-up is outside its deadline
    assert f"the workload was not delivered to {world.b_endpoint}" in err and "HTTP 503" in err
    assert len(world.deliveries) >= 2  # retried while time was left
    (job,) = world.user_jobs()
    assert job.provider == world.b and job.status == "cancelled"
    assert job.refunded == job.deposited > 0
    assert f"job {job.address} cancelled: " in err and "refunded in full" in err
    assert world.balance("user") == before
