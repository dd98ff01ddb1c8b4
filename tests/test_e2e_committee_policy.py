"""A provider's worker serves only committees it can trust, end to end.

The local chain (``gpum-localnet``) holds a market with a minimum validator bond of 100,
provider P and three validators: V1 (an honest node answering ``/health``), V2 (its
endpoint accepts connections and never answers) and V3 (honest, but on P's deny list).
P's real ``gpum-worker run`` process, reading jobs from chain, must accept the job whose
committee is V1, decline at once the job naming V3, and decline the job naming V2 once V2
stayed silent for the policy's grace. Validators are ``StubValidator`` HTTP servers: this
test is about the worker's decision, not about validation.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_market import pda
from gpu_market.processes import Processes, tool
from gpum_worker.stub_validator import StubValidator
from harness import Market, wait_until
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e


class Silent:
    """Accepts connections on 127.0.0.1 and never answers (a validator that hangs)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                self.conns.append(self.sock.accept()[0])
            except (TimeoutError, OSError):
                continue

    def stop(self) -> None:
        self._stop.set()
        self.sock.close()
        for c in self.conns:
            c.close()


def test_the_worker_accepts_only_committees_its_policy_trusts(
        tmp_path: Path, market_factory: Callable[..., Market]) -> None:
    workdir = tmp_path
    procs = Processes(workdir)
    honest, honest3, silent = StubValidator().start(), StubValidator().start(), Silent()
    try:
        made = market_factory(workdir, ["owner", "user", "worker", "v1", "v2", "v3"], {
            "window_seconds": 2, "max_missed_windows": 2, "min_stake_per_gpu": 100,
            "validator_min_bond": 100, "unbonding_seconds": 0},
            stake={n: 10_000 * 10**6 for n in ("owner", "v1", "v2", "v3")},
            payment={"user": 1_000 * 10**6})
        client, url, kps, keys, market = made.client, made.url, made.kps, made.keys, made.address
        for n, endpoint in (("v1", honest.url), ("v2", silent.url), ("v3", honest3.url)):
            client.register_validator(kps[n], market, 500, endpoint)
        client.register_provider(kps["owner"], kps["worker"].pubkey(),
                                 {"gpu_model": "Simulated H100", "gpu_count": 4,
                                  "vram_mib": 81920, "region": ""}, 1000, market)
        client.stake(kps["owner"], market, 1000)
        provider = pda.provider_pda(market, kps["owner"].pubkey())
        (workdir / "worker.toml").write_text(
            "[committee]\nhealth_timeout_seconds = 1\nhealth_grace_seconds = 4\n")
        procs.start("worker", [
            tool("gpum-worker"), "run", "--simulate", "--gpus", "4", "--config",
            str(workdir / "worker.toml"), "--key", str(keys["worker"]),
            "--db", str(workdir / "outbox.sqlite"), "--poll-seconds", "1", "--rpc-url", url,
            "--program-id", str(client.program_id), "--market", str(market),
            "--provider", str(provider), "--committee-deny", str(kps["v3"].pubkey())])

        def create(job_id: int, *members: str) -> Pubkey:
            _sig, job = client.create_job(kps["user"], market, provider, job_id, 1, 20 * 10**6,
                                          committee=[kps[m].pubkey() for m in members],
                                          quorum=1)
            return job

        good, denied, silent_job = create(1, "v1"), create(2, "v1", "v3"), create(3, "v1", "v2")

        def status(job: Pubkey) -> str:
            view = client.fetch_job(job)
            return "" if view is None else str(view.status).lower()

        def wait(what: str, fn: Callable[[], Any], timeout: float = 60) -> None:
            wait_until(what, fn, timeout, check=procs.check_alive,
                       diag=lambda: procs.tail("worker", 40))

        wait("the honest committee's job accepted", lambda: status(good) == "running")
        wait("the job naming a denied validator declined",
             lambda: status(denied) == "declined", timeout=20)
        assert status(silent_job) == "open"  # waits: the member may be restarting
        wait("the job whose member stays silent declined after the grace",
             lambda: status(silent_job) == "declined", timeout=30)
        wait("the accepted job proven to its committee",
             lambda: any(j == bytes(good) for j, _ in honest.stored))
        log = (workdir / "worker.log").read_text()
        assert "is on the deny list" in log and "/health" in log
    finally:
        procs.stop_all()
        for s in (honest, honest3, silent):
            s.stop()
