"""``gpum run`` and ``gpum job watch`` end to end (issue 11): the local chain, a real worker with
podman + runc, a real validator node, and the user driving the ``gpum`` CLI.

One module-wide network: ``gpum-localnet``, a market with 2 s windows, provider P (4 simulated
GPUs, price 0.001 per GPU-second; its worker runs ``--api-listen`` and podman, and P registered
that API as its endpoint), one validator node V (the default committee: the only healthy
validator). The image is built locally from Debian's busybox-static (no registry).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from gpu_market import pda, tokens
from gpu_market.client import GpuMarketClient
from gpu_market.demo import (
    CONTAINERS_CONF,
    Processes,
    free_port,
    localnet_binary,
    wait_for_line,
    wait_http,
    write_keypair,
)
from gpum_worker.localimage import INDEX_HTML, build_busybox_image
from solders.keypair import Keypair
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

WINDOW = 2
RATE = 1_000  # 0.001 per GPU-second, 6 decimals, one GPU
IMAGE = "localhost/gpum-busybox:1"


def _tool(name: str) -> str:
    path = Path(sys.executable).with_name(name)
    assert path.exists(), f"{name} is not installed in this venv (make venv)"
    return str(path)


def _base(ui: str) -> int:
    """Payment-mint UI units (6 decimals) -> base units."""
    return int(Decimal(ui).scaleb(6))


@dataclass
class Net:
    workdir: Path
    procs: Processes
    url: str
    client: GpuMarketClient
    keys: dict[str, Path]
    kps: dict[str, Keypair]
    market: Pubkey
    provider: Pubkey
    validator: Pubkey
    podman_env: dict[str, str]
    jobs: list[Pubkey]

    def env(self) -> dict[str, str]:
        return {**os.environ, "GPUM_WORKLOADS_DIR": str(self.workdir / "saved-specs"),
                "GPUM_TOPUPS_DIR": str(self.workdir / "topups")}

    def gpum(self, who: str, *args: str, ok: bool = True, timeout: float = 120) -> tuple[int, str, str]:
        argv = [_tool("gpum"), "--url", self.url, "--output", "json", *args,
                "--keypair", str(self.keys[who])]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.env(),
                           check=False)
        if ok and r.returncode != 0:
            raise AssertionError(f"gpum {' '.join(args)} failed:\n{r.stderr}\nworker log:\n"
                                 f"{self.procs.tail('worker', 30)}")
        return r.returncode, r.stdout, r.stderr

    def gpum_json(self, who: str, *args: str, timeout: float = 120) -> dict[str, Any]:
        return json.loads(self.gpum(who, *args, timeout=timeout)[1].strip().splitlines()[-1])

    def balance(self, who: str) -> int:
        mint = self.client.fetch_market(self.market).payment_mint
        return self.client.token_balance(tokens.ata(self.kps[who].pubkey(), mint))

    def wait(self, what: str, fn: Callable[[], Any], timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self.procs.check_alive()
            got = fn()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:.0f}s\n"
                                     f"{self.procs.tail('worker', 40)}")
            time.sleep(0.5)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    assert os.environ.get("GPUM_LOCALNET_BIN"), "run through `make test` (builds gpum-localnet)"
    workdir: Path = tmp_path_factory.mktemp("run-watch")
    (workdir / "containers.conf").write_text(CONTAINERS_CONF)
    podman_env = {"CONTAINERS_CONF": str(workdir / "containers.conf")}
    build_busybox_image(IMAGE, extra_env=podman_env)
    procs = Processes(workdir)
    client = None
    created: list[Pubkey] = []
    try:
        port = free_port()
        chain = procs.start("localnet", [localnet_binary(), "--port", str(port)])
        wait_for_line(chain, workdir / "localnet.log", "ready on", timeout=60)
        url = f"http://127.0.0.1:{port}"
        kps = {n: Keypair() for n in ("admin", "owner", "user", "validator", "worker")}
        keys = {n: write_keypair(workdir / f"{n}.json", k) for n, k in kps.items()}
        client = GpuMarketClient(url, payer=kps["admin"])
        for kp in kps.values():
            client.airdrop(kp.pubkey(), 10 * 10**9)
        admin = kps["admin"]
        stake_mint = tokens.create_mint(client, admin, 6)
        payment_mint = tokens.create_mint(client, admin, 6)
        for n in ("owner", "validator"):
            acct = tokens.create_ata(client, admin, kps[n].pubkey(), stake_mint)
            tokens.mint_to(client, stake_mint, acct, admin, 10_000 * 10**6)
        acct = tokens.create_ata(client, admin, kps["user"].pubkey(), payment_mint)
        tokens.mint_to(client, payment_mint, acct, admin, 1_000 * 10**6)
        treasury = tokens.create_ata(client, admin, admin.pubkey(), payment_mint)
        client.initialize_market(admin, 0, stake_mint, payment_mint, treasury, {
            "window_seconds": WINDOW, "max_missed_windows": 2, "min_stake_per_gpu": 100,
            "validator_min_bond": 100, "unbonding_seconds": 0})
        market = pda.market_pda(admin.pubkey(), 0)
        worker_port, vport = free_port(), free_port()
        net = Net(workdir, procs, url, client, keys, kps, market,
                  pda.provider_pda(market, kps["owner"].pubkey()), kps["validator"].pubkey(),
                  podman_env, created)
        net.gpum("owner", "provider", "register", "--market", str(market), "--worker-key",
                 str(kps["worker"].pubkey()), "--gpu-model", "Simulated H100", "--gpu-count", "4",
                 "--vram-mib", "81920", "--price", "0.001", "--endpoint",
                 f"http://127.0.0.1:{worker_port}")
        net.gpum("owner", "provider", "stake", "--market", str(market), "1000")
        net.gpum("validator", "validator", "register", "--market", str(market), "--endpoint",
                 f"http://127.0.0.1:{vport}", "--bond", "500")
        procs.start("validator", [
            _tool("gpum-validator"), "run", "--url", url, "--keypair", str(keys["validator"]),
            "--market", str(market), "--listen", f"127.0.0.1:{vport}",
            "--db", str(workdir / "validator.sqlite"), "--settle-every", "2"])
        wait_http(f"http://127.0.0.1:{vport}/health", timeout=60)
        procs.start("worker", [
            _tool("gpum-worker"), "run", "--simulate", "--gpus", "4", "--seed", "1",
            "--key", str(keys["worker"]), "--db", str(workdir / "outbox.sqlite"),
            "--window-seconds", str(WINDOW), "--poll-seconds", "1", "--rpc-url", url,
            "--program-id", str(client.program_id), "--market", str(market),
            "--provider", str(net.provider),
            "--api-listen", f"127.0.0.1:{worker_port}", "--runtime", "podman",
            "--containers-conf", str(workdir / "containers.conf"), "--publish-host", "127.0.0.1"])
        wait_http(f"http://127.0.0.1:{worker_port}/v1/health", timeout=60)
        yield net
    finally:
        if client is not None:
            client.close()
        procs.stop_all()
        for job in created:  # the worker removes its containers; a failed test may not
            cmd = f"podman ps -aq --filter label=gpum.job={job} | xargs -r podman rm -f"
            subprocess.run(["sh", "-c", cmd], capture_output=True, timeout=120, check=False,
                           env={**os.environ, **podman_env})


# ----------------------------------------------------------------------------- scenarios


def test_run_rents_the_best_offer_and_its_container_serves_on_the_published_port(net: Net) -> None:
    before = net.balance("user")
    args = ["run", "--market", str(net.market), "--gpu", "h100:1", "--hours", "0.02",
            "--image", IMAGE, "--cmd", '["/bin/sh", "-c"]', "--arg", "exec httpd -f -p 8080 -h /www",
            "--port", "8080", "--timeout", "120"]  # fmt: skip
    # A dry run shows what would happen and sends nothing.
    plan = net.gpum_json("user", *args, "--dry-run")
    assert plan["dry_run"] is True and plan["provider"] == str(net.provider)
    assert plan["committee"] == [str(net.validator)] and plan["quorum"] == 1
    assert plan["deposit"] == "0.072" and plan["cost_per_hour"] == "3.6"
    assert net.balance("user") == before
    # The real run: job created, workload delivered, accepted, container running.
    out = net.gpum_json("user", *args, timeout=180)
    job = Pubkey.from_string(out["job"])
    net.jobs.append(job)
    assert out["state"] == "running" and out["provider"] == str(net.provider)
    assert net.balance("user") == before - _base(out["deposit"]) == before - 72 * RATE
    view = net.client.fetch_job(job)
    assert view.status == "running" and view.workload_hash.hex() == out["workload_hash"]
    (endpoint,) = out["endpoints"]
    assert endpoint.startswith("127.0.0.1:") and out["ports"] == [f"{endpoint} -> 8080/tcp"]
    with httpx.Client(timeout=10) as h:
        page = net.wait("the published port", lambda: (r := h.get(f"http://{endpoint}/"))
                        .status_code == 200 and r)
    assert page.content == INDEX_HTML
    # watch --once: the runway, and the windows the committee's validator holds.
    def watched() -> dict[str, Any] | None:
        d = net.gpum_json("user", "job", "watch", str(job), "--once", "--windows", "2")
        windows = d["windows"].get("windows") or [{}]
        return d if windows[-1].get("workload_state") == "running" else None

    w = net.wait("a window proving the container running", watched)
    assert w["status"] == "running" and w["windows"]["validator"] == str(net.validator)
    assert w["runway_seconds"] is not None and 0 < w["runway_seconds"] <= 72
    assert w["spend_per_hour"] == "3.6" and w["running_seconds"] >= w["settled_seconds"]
    latest = w["windows"]["windows"][-1]
    assert latest["workload_state"] == "running" and latest["gpus"]
    assert all(isinstance(g["util_gpu_avg_bp"], int) for g in latest["gpus"])
    net.gpum("user", "job", "finish", str(job))


def test_watch_keeps_a_job_alive_within_its_budget_then_lets_it_run_dry(net: Net) -> None:
    budget = "0.02"  # 20 s at the job's rate; the first deposit buys 10 s
    _, out, _ = net.gpum("user", "job", "create", "--market", str(net.market), "--provider",
                         str(net.provider), "--gpu-count", "1", "--deposit", "0.01",
                         "--committee", str(net.validator), "--quorum", "1")
    job = Pubkey.from_string(json.loads(out.strip().splitlines()[-1])["job"])
    net.jobs.append(job)
    before = net.balance("user")
    code, out, err = net.gpum("user", "job", "watch", str(job), "--auto-top-up-below", "6s",
                              "--budget", budget, "--interval", "1", timeout=240)
    assert code == 0, err
    rounds = [json.loads(line) for line in out.strip().splitlines()]
    top_ups = [_base(t["amount"]) for r in rounds for t in r["auto_top_up"]["top_ups"]]
    spent = sum(top_ups)
    # Kept alive past its first deposit, never past the budget, and then ran dry.
    assert len(top_ups) >= 2 and spent == _base(budget)
    assert any("budget" in (r["warning"] or "") for r in rounds)
    final = net.client.fetch_job(job)
    assert rounds[-1]["status"] == final.status == "completed"
    assert final.booked_escrow < final.terms.rate_per_second  # escrow exhausted
    assert final.deposited == 10 * RATE + spent
    assert final.paid_seconds > 10 + 10  # well past what the first deposit bought
    # The user's wallet paid exactly the top-ups; the state file remembers them.
    assert before - net.balance("user") == spent
    state = json.loads((net.workdir / "topups" / f"{job}.json").read_text())
    assert state["spent"] == {str(job): spent}
    # Watching again with the same budget tops up nothing more: the job has ended.
    again = net.gpum_json("user", "job", "watch", str(job), "--auto-top-up-below", "6s",
                          "--budget", budget, "--once")
    assert again["auto_top_up"]["top_ups"] == [] and net.balance("user") == before - spent
