"""``gpum run`` and ``gpum job watch`` end to end: the local chain, a real worker with
podman + runc, a real validator node, and the user driving the ``gpum`` CLI.

One module-wide network: ``gpum-localnet``, a market with 2 s windows, provider P (4 simulated
GPUs, price 0.001 per GPU-second; its worker runs ``--api-listen`` and podman, and P registered
that API as its endpoint), one validator node V (the default committee: the only healthy
validator). The image is built locally from Debian's busybox-static (no registry).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from gpum_worker.localimage import INDEX_HTML
from harness import Market, WorkerNetwork, worker_network
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

WINDOW = 2
RATE = 1_000  # 0.001 per GPU-second, 6 decimals, one GPU
IMAGE = "localhost/gpum-busybox:1"


def _base(ui: str) -> int:
    """Payment-mint UI units (6 decimals) -> base units."""
    return int(Decimal(ui).scaleb(6))


@dataclass
class Net(WorkerNetwork):
    ENV = (*WorkerNetwork.ENV, ("GPUM_TOPUPS_DIR", "topups"))


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory,
        market_factory: Callable[..., Market]) -> Iterator[Net]:
    workdir: Path = tmp_path_factory.mktemp("run-watch")
    m = market_factory(workdir, ["owner", "user", "validator", "worker"], {
        "window_seconds": WINDOW, "max_missed_windows": 2, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0},
        stake={"owner": 10_000 * 10**6, "validator": 10_000 * 10**6},
        payment={"user": 1_000 * 10**6})
    with worker_network(Net, workdir, m, IMAGE, window=WINDOW) as net:
        yield net


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
