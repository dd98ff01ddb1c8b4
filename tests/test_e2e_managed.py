"""Managed jobs end to end: the local chain, two providers with real workers running podman
containers, a validator node (the committee), and the user's controller as a ``gpum``
process.

The module's world: a market with 2 s windows (``max_missed_windows`` 6: a grace of 16 s, and
the committee's downtime report after 12 s of silence, later than the controller's 3 windows),

    P1  price 1.8 per GPU-hour (the cheapest)   worker "worker_p1" (its database in workdir/)
    P2  price 3.6 per GPU-hour                  worker "worker_p2" (its database in workdir/p2/)
    V   the validator node, the default committee

1. ``gpum run --managed`` starts the job on P1; P1's worker is killed (SIGKILL) and its
   container force-removed; the controller sees no window accepted for 3 windows, finishes
   the old job, creates the successor on P2, delivers the spec and prints the new endpoint,
   where the container answers. The old job is closed with its receipt after its grace; P1
   comes back and neither restarts the container nor gets paid for the time it was down.
2. ``gpum job migrate m1 --to P1``: the controller is killed (SIGKILL) in the middle of the
   migration and restarted (``gpum job watch --managed m1``): exactly one successor exists.
   ``gpum job stop m1`` then closes everything, and the user's tokens are conserved: what left
   the wallet is what the attempts paid, each refunded its deposit less what it paid.
3. With ``--checkpoint-store`` (a real S3 server, ``tests/s3server.py``): a counter kept in the
   container's checkpoint directory goes on, on P2, from the newest checkpoint P1's worker
   synced before it was killed. P1's worker then comes back: its old job's last sync is
   refused (the store moved on to the successor's line), the store's newest checkpoint stays
   the successor's, and the old job's checkpoint volume is unmounted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from gpu_market import pda
from gpu_market.managed.store import DB_FILE, ManagedStore, data_dir
from gpu_market.managed.template import attempt_job_id
from gpu_market.processes import Processes, free_port
from gpum_worker.localimage import INDEX_HTML
from harness import (
    CliNetwork,
    Market,
    podman_setup,
    register_provider,
    release_mounts,
    remove_containers,
    start_validator,
    start_worker,
    stop_reapers,
    wait_until,
)
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

WINDOW = 2
IMAGE = "localhost/gpum-busybox:1"
NAME = "m1"


@dataclass
class World(CliNetwork):
    ENV = (("GPUM_WORKLOADS_DIR", "specs"),)
    FAILED = "gpum {args} failed:\n{stderr}"

    p1: Pubkey
    p2: Pubkey
    port1: int
    port2: int
    podman_env: dict[str, str]
    workers: dict[str, subprocess.Popen]
    p2_net: CliNetwork
    started: list[subprocess.Popen] = field(default_factory=list)
    """Processes a test started (controllers, gpum commands): killed after the module."""

    def start_p1(self) -> None:
        self.workers["p1"] = start_worker(self, self.p1, self.port1, name="worker_p1",
                                          key="worker_p1", gpus=2, window=WINDOW)  # fmt: skip

    def store(self) -> ManagedStore:
        return ManagedStore(data_dir() / DB_FILE)

    def managed(self, name: str = NAME) -> tuple[Any, list[Any]]:
        store = self.store()
        try:
            m = store.find(name, self.url)
            return m, ([] if m is None else store.attempts(m.id))
        finally:
            store.close()

    def containers(self, job: str) -> list[str]:
        r = subprocess.run(["podman", "ps", "-aq", "--filter", f"label=gpum.job={job}"],
                           capture_output=True, text=True, timeout=60, check=True,
                           env={**os.environ, **self.podman_env})  # fmt: skip
        return r.stdout.split()

    def gpum_proc(self, log: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        with open(self.workdir / log, "ab") as out:
            p = subprocess.Popen(self.argv("user", *args, output="json"), stdout=out,
                                 stderr=subprocess.STDOUT, env={**self.env(), **(env or {})},
                                 start_new_session=True)  # fmt: skip
        self.started.append(p)
        return p

    def log(self, name: str) -> str:
        path = self.workdir / name
        return path.read_text(errors="replace") if path.exists() else ""

    def until(self, what: str, fn: Callable[[], Any], timeout: float = 120,
              log: str = "controller.log") -> Any:  # fmt: skip
        return wait_until(what, fn, timeout,
                          diag=lambda: "\n".join(self.log(log).splitlines()[-40:]))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory,
          market_factory: Callable[..., Market]) -> Iterator[World]:  # fmt: skip
    workdir: Path = tmp_path_factory.mktemp("managed")
    podman_env = podman_setup(workdir, IMAGE)
    (workdir / "p2").mkdir()
    shutil.copy(workdir / "containers.conf", workdir / "p2" / "containers.conf")
    m = market_factory(workdir, ["owner_p1", "owner_p2", "user", "validator", "worker_p1",
                                 "worker_p2"], {
        "window_seconds": WINDOW, "max_missed_windows": 6, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0},
        stake={"owner_p1": 10**10, "owner_p2": 10**10, "validator": 10**10},
        payment={"user": 1_000 * 10**6})  # fmt: skip
    procs = Processes(workdir)
    port1, port2 = free_port(), free_port()
    base = CliNetwork(workdir, procs, m.url, m.client, m.keys, m.kps, m.address)
    w = World(workdir, procs, m.url, m.client, m.keys, m.kps, m.address,
              pda.provider_pda(m.address, m.kps["owner_p1"].pubkey()),
              pda.provider_pda(m.address, m.kps["owner_p2"].pubkey()), port1, port2, podman_env,
              {}, replace(base, workdir=workdir / "p2"))  # fmt: skip
    jobs: list[str] = []
    try:
        for owner, worker, price, port in (("owner_p1", "worker_p1", "1.8", port1),
                                           ("owner_p2", "worker_p2", "3.6", port2)):
            register_provider(w, owner, m.kps[worker].pubkey(), gpus=2, price=price,
                              endpoint=f"http://127.0.0.1:{port}")  # fmt: skip
        start_validator(w, free_port())
        w.start_p1()
        w.workers["p2"] = start_worker(w.p2_net, w.p2, port2, name="worker_p2", key="worker_p2",
                                       gpus=2, window=WINDOW)  # fmt: skip
        yield w
    finally:
        _, atts = w.managed() if (data_dir() / DB_FILE).exists() else (None, [])
        jobs = [a.job for a in atts]
        for p in w.started:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        procs.stop_all()
        for folder in (workdir, workdir / "p2"):
            stop_reapers(folder)
        remove_containers([Pubkey.from_string(j) for j in jobs], podman_env)
        release_mounts(workdir)


def _events(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _serves(endpoint: str) -> bool:
    try:
        with httpx.Client(timeout=3) as h:
            return h.get(f"http://{endpoint}/").content == INDEX_HTML
    except httpx.HTTPError:
        return False


def test_a_dead_provider_is_left_for_the_next_and_the_old_job_closed_with_its_receipt(
        world: World) -> None:  # fmt: skip
    w = world
    w.before = w.balance("user")  # type: ignore[attr-defined]
    controller = w.gpum_proc(
        "controller.log", "run", "--market", str(w.market), "--gpu", "h100:1", "--hours", "0.05",
        "--image", IMAGE, "--cmd", '["/bin/sh", "-c"]', "--arg", "exec httpd -f -p 8080 -h /www",
        "--port", "8080", "--timeout", "120", "--managed", "--name", NAME, "--missed-windows", "3",
        "--start-timeout", "90s")  # fmt: skip
    w.controller = controller  # type: ignore[attr-defined]
    summary = w.until("the first attempt running", lambda: next(
        (e for e in _events(w.log("controller.log")) if e.get("phase") == "running"), None))
    first = summary["job"]
    assert summary["provider"] == str(w.p1) and summary["managed"] == NAME
    (endpoint,) = summary["endpoints"]
    w.until("the container on P1 serving", lambda: _serves(endpoint))
    w.until("a settled window", lambda: w.client.fetch_job(Pubkey.from_string(first)).paid_seconds > 0)
    # `gpum job status m1` follows the managed job by its name.
    status = w.gpum_json("user", "job", "status", NAME)
    assert status["job"] == first and status["managed"]["phase"] == "running"
    # P1's machine dies: the worker killed, its container gone.
    os.killpg(w.workers["p1"].pid, signal.SIGKILL)
    w.workers["p1"].wait(timeout=30)
    killed_at = w.client.chain_time()
    for cid in w.containers(first):
        subprocess.run(["podman", "rm", "-f", cid], capture_output=True, timeout=60, check=False,
                       env={**os.environ, **w.podman_env})  # fmt: skip
    moved = w.until("the successor running", lambda: next(
        (e for e in _events(w.log("controller.log"))
         if e.get("event") == "decision" and "attempt 1 runs on provider" in e["text"]), None),
        timeout=150)  # fmt: skip
    m, atts = w.managed()
    a0, a1 = atts
    assert a1.provider == str(w.p2) and a1.state == "running" and m.phase == "running"
    assert a0.end_kind == "failure" and "no window accepted by its committee" in a0.end_reason
    (endpoint2,) = a1.endpoints
    assert endpoint2 in moved["text"]
    w.until("the container on P2 serving", lambda: _serves(endpoint2))
    assert w.containers(a1.job) and not w.containers(a0.job)
    decisions = [e["text"] for e in _events(w.log("controller.log")) if e.get("event") == "decision"]
    assert any("no window accepted by its committee" in t for t in decisions), decisions
    # The old job: no longer billing, closed after its grace, its receipt kept.
    def closed() -> Any:
        first_attempt = w.managed()[1][0]
        return first_attempt if first_attempt.state == "closed" else None

    old = w.until("the old job closed", closed, timeout=90)
    job0 = Pubkey.from_string(a0.job)
    assert w.client.fetch_job(job0) is None and w.client.fetch_closed_job(job0) is not None
    r = old.receipt
    assert r["paid"] + r["refunded"] == r["deposited"] == old.deposited and r["paid"] > 0
    assert a0.started_at and old.paid_seconds <= killed_at - a0.started_at + WINDOW
    # One name for the managed job: status, list and watch follow it across attempts.
    _, text, _ = w.gpum("user", "job", "status", NAME, output="text")
    assert f"job: {a1.job}" in text and f"managed job '{NAME}': running" in text
    assert f"#0 closed    provider {w.p1}" in text and "no window accepted" in text
    _, text, _ = w.gpum("user", "job", "list", output="text")
    assert f"{NAME}#1" in text and f"#1 running   provider {w.p2}" in text
    watched = w.gpum_json("user", "job", "watch", a0.job, "--once")
    assert watched["job"] == a1.job and watched["status"] == "running"
    # The old provider comes back: its container is not started again, nothing more is paid.
    w.start_p1()
    time.sleep(4 * WINDOW)
    assert not w.containers(a0.job)
    assert w.managed()[1][0].receipt == r and len(w.managed()[1]) == 2
    assert w.client.fetch_job(job0) is None


def test_a_controller_killed_mid_migration_restarts_without_a_second_successor(
        world: World) -> None:  # fmt: skip
    w = world
    controller: subprocess.Popen = w.controller  # type: ignore[attr-defined]
    assert controller.poll() is None, w.log("controller.log")[-3000:]
    migrate = subprocess.Popen(w.argv("user", "job", "migrate", NAME, "--to", str(w.p1),
                                      "--timeout", "240s", output="json"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=w.env(), start_new_session=True)  # fmt: skip
    w.started.append(migrate)
    def starting() -> str | None:
        if migrate.poll() is not None:
            raise AssertionError(f"gpum job migrate exited: {migrate.communicate()}")
        atts = w.managed()[1]
        busy = len(atts) == 3 and atts[-1].state in ("planned", "created", "delivered")
        return atts[-1].state if busy else None

    seen = w.until("the controller starting attempt 2", starting, timeout=90)
    os.killpg(controller.pid, signal.SIGKILL)
    controller.wait(timeout=30)
    m, atts = w.managed()
    assert len(atts) == 3 and atts[2].state in ("planned", "created", "delivered", "running"), seen
    resumed = w.gpum_proc("resumed.log", "job", "watch", "--managed", NAME)
    try:
        out, err = migrate.communicate(timeout=240)
        assert migrate.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        assert result["migrated"] is True and result["provider"] == str(w.p1)
        m, atts = w.managed()
        assert [a.idx for a in atts] == [0, 1, 2] and atts[2].state == "running"
        assert atts[1].end_kind == "user_migrate" and atts[2].provider == str(w.p1)
        # Exactly one job per slot ever existed: slots 3.. are empty on chain.
        for idx in range(6):
            job = pda.job_pda(w.market, w.kps["user"].pubkey(), attempt_job_id(m.uid, idx),
                              w.client.program_id)  # fmt: skip
            exists = w.client.fetch_job(job) is not None or w.client.fetch_closed_job(job) is not None
            assert exists == (idx < 3), idx
        user_jobs = w.client.list_jobs(user=w.kps["user"].pubkey(), market=w.market)
        assert {str(j.address) for j in user_jobs} <= {a.job for a in atts}
        w.until("the container on P1 serving again", lambda: _serves(atts[2].endpoints[0]),
                log="resumed.log")  # fmt: skip
        # Stop it all: every attempt closed, tokens conserved.
        done = w.gpum_json("user", "job", "stop", NAME, timeout=180)
        assert done["phase"] == "done"
        m, atts = w.managed()
        assert all(a.state == "closed" and a.receipt for a in atts), [a.state for a in atts]
        paid = sum(a.receipt["paid"] for a in atts)
        assert all(a.receipt["paid"] + a.receipt["refunded"] == a.receipt["deposited"] for a in atts)
        assert w.before - w.balance("user") == paid  # type: ignore[attr-defined]
        assert w.client.list_jobs(user=w.kps["user"].pubkey(), market=w.market) == []
        assert resumed.wait(timeout=30) == 0  # the controller ends with the managed job
    finally:
        if migrate.poll() is None:
            migrate.kill()
            migrate.communicate()


CHECKPOINTED = ('n=$(cat /checkpoint/n 2>/dev/null || echo 0); echo "resumed at $n"; '
                'while true; do n=$((n+1)); echo $n > /checkpoint/n; sleep 1; done')
"""A workload whose state is a counter in its checkpoint directory."""


def test_the_successor_resumes_from_the_newest_checkpoint(world: World, s3_server: Any) -> None:
    w = world
    store = s3_server.store_url()
    prefix = store.split("/", 3)[3]
    keys = {"AWS_ACCESS_KEY_ID": s3_server.access_key_id,
            "AWS_SECRET_ACCESS_KEY": s3_server.secret_access_key}  # fmt: skip
    w.gpum_proc("checkpointed.log", "run", "--market", str(w.market), "--gpu", "h100:1",
                "--hours", "0.05", "--image", IMAGE, "--cmd", '["/bin/sh", "-c"]', "--arg",
                CHECKPOINTED, "--timeout", "120", "--managed", "--name", "m3",
                "--checkpoint-store", store, "--checkpoint-endpoint", s3_server.endpoint,
                "--checkpoint-interval", "10s", "--checkpoint-max-size", "16MiB", env=keys)  # fmt: skip
    first = w.until("m3's first attempt running", lambda: next(
        (e for e in _events(w.log("checkpointed.log")) if e.get("phase") == "running"), None),
        log="checkpointed.log")  # fmt: skip
    assert first["provider"] == str(w.p1)
    w.until("a checkpoint in the store", lambda: s3_server.keys(f"{prefix}/manifests/"),
            log="checkpointed.log")  # fmt: skip
    time.sleep(3)
    os.killpg(w.workers["p1"].pid, signal.SIGKILL)
    w.workers["p1"].wait(timeout=30)
    for cid in w.containers(first["job"]):
        subprocess.run(["podman", "rm", "-f", cid], capture_output=True, timeout=60, check=False,
                       env={**os.environ, **w.podman_env})  # fmt: skip
    w.until("m3's successor running", lambda: next(
        (e for e in _events(w.log("checkpointed.log")) if e.get("event") == "decision"
         and "attempt 1 runs on provider" in e["text"]), None), timeout=150, log="checkpointed.log")  # fmt: skip
    _, logs, _ = w.gpum("user", "job", "logs", "m3", output="text")
    resumed = [int(line.split()[-1]) for line in logs.splitlines() if line.startswith("resumed at")]
    assert resumed and resumed[0] >= 5, logs  # it went on from the checkpoint, not from 0
    # P1's worker comes back: the old job is not live, so it tries that job's last sync of
    # its old directory; the successor claimed the store when it restored: refused.
    successor = w.managed("m3")[1][1].job
    volume = str(w.workdir / "checkpoints" / first["job"])
    w.start_p1()
    moved_on = (f"checkpoint: the store moved on (newer checkpoint by job {successor}); not "
                "syncing this job any more")
    w.until("P1's worker refusing the old job's last sync",
            lambda: moved_on in w.log("worker_p1.log"), timeout=60, log="worker_p1.log")
    w.until("the old job's checkpoint volume unmounted", lambda: volume not in _mounts(),
            timeout=60, log="worker_p1.log")
    newest = _checkpoints(s3_server, store).latest()
    assert newest is not None and newest.job == successor, newest  # still the successor's
    done = w.gpum_json("user", "job", "stop", "m3", timeout=180)
    assert done["phase"] == "done"


def _mounts() -> str:
    with open("/proc/self/mountinfo") as f:
        return f.read()


def _checkpoints(s3_server: Any, store: str) -> Any:
    from gpu_market.checkpoint import CheckpointConfig, CheckpointStore, Credentials

    return CheckpointStore(CheckpointConfig(store=store, endpoint=s3_server.endpoint),
                           Credentials(s3_server.access_key_id, s3_server.secret_access_key))
