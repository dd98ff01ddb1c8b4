"""Workloads end to end: the user's container on the provider's GPUs, with a real
container runtime (podman + runc), real processes on 127.0.0.1 and the local chain.

One module-wide network: ``gpum-localnet``, a market with 2 s windows, provider P (4 simulated
GPUs; its worker runs ``--api-listen`` and podman, and P registered that API as its endpoint on
chain), provider Q (no endpoint: runs no workloads), one validator node V (every job's
committee of one). The image is built locally from Debian's busybox-static (no registry). The
user drives everything through the ``gpum`` CLI, as users do: ``job create --image ...``,
``job status``, ``job logs``, ``job finish``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from gpu_market import tokens
from gpu_market.processes import tool
from gpu_market.proof import WORKLOAD_RUNNING, decode_proof
from gpu_market.workload import WorkloadSpec, spec_hash
from gpu_market.workload_api import (
    WorkerApiError,
    deliver_workload,
    stream_logs,
    workload_status,
)
from gpum_worker.localimage import INDEX_HTML
from harness import (
    Market,
    WorkerNetwork,
    reaper_pid,
    register_provider,
    start_worker,
    stop_reapers,
    worker_network,
)
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

WINDOW = 2
REAPER_POLL = 1
"""The worker's reaper compares containers with the chain every second here (default 15)."""
IMAGE = "localhost/gpum-busybox:1"
SECRET = "s3cr3t-token-never-in-clear"


@dataclass
class World(WorkerNetwork):
    KEYPAIR_AFTER = 2

    providers: dict[str, Pubkey] = field(default_factory=dict)
    hashes: dict[Pubkey, bytes] = field(default_factory=dict)

    def start_worker(self, name: str = "worker", poll_seconds: float = 1,
                     reaper: bool = True) -> None:
        self.worker = start_worker(self, self.provider, self.worker_port, name=name,
                                   window=WINDOW, poll_seconds=poll_seconds, reaper=reaper,
                                   reaper_poll_seconds=REAPER_POLL)

    def podman(self, *args: str) -> str:
        r = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=60,
                           env={**os.environ, **self.podman_env}, check=False)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def containers(self, job: Pubkey) -> list[dict[str, Any]]:
        out = self.podman("ps", "-a", "--filter", f"label=gpum.job={job}", "--format", "json")
        return json.loads(out or "[]")

    def until(self, what: str, fn: Callable[[], Any], ok: Callable[[Any], Any],
              timeout: float = 60) -> Any:
        """``fn()`` once ``ok`` holds for it."""
        box: list[Any] = []

        def step() -> bool:
            box[:] = [fn()]
            return bool(ok(box[0]))

        self.wait(what, step, timeout)
        return box[0]

    def create(self, job_id: int, *image_args: str, provider: str = "P",
               ok: bool = True) -> tuple[int, str, str]:
        return self.gpum("user", "job", "create", "--market", str(self.market), "--provider",
                         str(self.providers[provider]), "--gpu-count", "1", "--deposit", "20",
                         "--job-id", str(job_id), "--committee", str(self.validator),
                         "--quorum", "1", *image_args, ok=ok)

    def status(self, job: Pubkey) -> dict[str, Any]:
        return self.gpum_json("user", "job", "status", str(job))

    def stop_worker(self) -> None:
        """SIGKILL the worker (its containers keep running, as after a crash)."""
        assert self.worker is not None
        os.killpg(self.worker.pid, signal.SIGKILL)
        self.worker.wait(timeout=10)
        self.procs.children = [(n, p) for n, p in self.procs.children if p is not self.worker]

    def api(self, job: Pubkey, what: str) -> Any:
        """The worker API's workload status (``what="status"``) or log text of ``job``,
        signed by the user, whatever the chain says of the job now."""
        endpoint = f"http://127.0.0.1:{self.worker_port}"
        h = self.hashes[job]
        secret = bytes(self.kps["user"])
        if what == "status":
            return workload_status(endpoint, bytes(job), h, secret)
        return b"".join(stream_logs(endpoint, bytes(job), h, secret)).decode()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory,
          market_factory: Callable[..., Market]) -> Iterator[World]:
    workdir: Path = tmp_path_factory.mktemp("workload")
    m = market_factory(workdir, ["ownerP", "ownerQ", "user", "other", "validator", "worker"], {
        "window_seconds": WINDOW, "max_missed_windows": 2, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0},
        stake=dict.fromkeys(("ownerP", "ownerQ", "validator"), 10_000 * 10**6),
        payment=dict.fromkeys(("user", "other"), 1_000 * 10**6))
    # Provider P publishes its worker's API; Q publishes none.
    with worker_network(World, workdir, m, IMAGE, owner="ownerP", window=WINDOW,
                        reaper_poll_seconds=REAPER_POLL) as world:
        world.providers["P"] = world.provider
        world.providers["Q"] = register_provider(world, "ownerQ", m.kps["worker"].pubkey(),
                                                 gpus=4)  # fmt: skip
        endpoint = f"http://127.0.0.1:{world.worker_port}"
        assert world.client.fetch_provider(world.providers["P"]).endpoint == endpoint
        assert world.client.fetch_provider(world.providers["Q"]).endpoint == ""
        yield world


def _job(world: World, out: str) -> Pubkey:
    job = Pubkey.from_string(json.loads(out.strip().splitlines()[-1])["job"])
    world.jobs.append(job)
    world.hashes[job] = bytes(world.client.fetch_job(job).workload_hash)
    return job


def _expire(world: World, job: Pubkey) -> bool:
    """Whether ``job`` is Failed now: expired by a stranger (its provider went silent), or the
    committee slashed the provider first."""
    c = world.client
    if c.fetch_job(job).status == "failed":
        return True
    try:
        c.expire_job(world.kps["other"], job)
    except Exception:  # noqa: BLE001 - not expirable yet
        return False
    return True


def _ended(world: World, job: Pubkey) -> tuple[str, str] | None:
    """(final status, reason) of ``job`` as the worker's workload store records its end."""
    con = sqlite3.connect(f"file:{world.workdir / 'outbox.workloads.sqlite'}?mode=ro", uri=True)
    try:
        return con.execute("SELECT status, reason FROM ended WHERE job = ?",
                           (bytes(job),)).fetchone()
    finally:
        con.close()


def _proof_states(world: World, job: Pubkey) -> list[int]:
    con = sqlite3.connect(f"file:{world.workdir / 'validator.sqlite'}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT proof FROM proofs WHERE job = ? ORDER BY seq",
                           (bytes(job),)).fetchall()
    finally:
        con.close()
    return [decode_proof(r[0]).workload.state for r in rows]


# ----------------------------------------------------------------------------- scenarios


def test_a_job_runs_the_users_container_with_logs_a_port_and_sealed_secrets(world: World) -> None:
    script = ('echo "hello from $GREETING"; echo "token sha256 $(printf %s "$TOKEN" | sha256sum)"; '
              'exec httpd -f -p 8080 -h /www')
    _, out, _ = world.create(1, "--image", IMAGE, "--cmd", '["/bin/sh", "-c"]', "--arg", script,
                             "--env", "GREETING=gpum", "--secret", f"TOKEN={SECRET}",
                             "--port", "8080")
    job = _job(world, out)
    created = json.loads(out.strip().splitlines()[-1])["workload"]
    view = world.client.fetch_job(job)
    assert view.workload_hash.hex() == created["workload_hash"] != "00" * 32
    # The worker accepts once it holds the spec; the container starts on the job's GPU.
    st = world.until("the container running", lambda: world.status(job),
                     lambda s: s["workload"].get("state") == "running")
    assert world.client.fetch_job(job).status == "running"
    assert st["workload"]["runtime"] == "podman"
    (mapping,) = st["workload"]["ports"]
    host_port = mapping.split(" ->")[0]
    assert mapping.endswith("-> 8080/tcp") and host_port.startswith("127.0.0.1:")
    with httpx.Client(timeout=10) as h:
        page = world.until("the published port", lambda: h.get(f"http://{host_port}/"),
                           lambda r: r.status_code == 200)
    assert page.content == INDEX_HTML
    # Logs through the CLI, signed by the user's wallet; the secret was decrypted only inside.
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    logs = world.until("the container's output",
                       lambda: world.gpum("user", "job", "logs", str(job), "--tail", "20")[1],
                       lambda out: "hello from gpum" in out)
    assert f"token sha256 {digest}" in logs
    for path in world.workdir.iterdir():
        if path.is_file() and path.suffix in (".sqlite", ".log", ".json", ".sqlite-wal"):
            assert SECRET.encode() not in path.read_bytes(), path
    # Anyone else is refused the logs.
    code, _, err = world.gpum("other", "job", "logs", str(job), ok=False)
    assert code != 0 and "only the job's user" in err
    # Proofs know the workload.
    world.wait("a proof with the workload running",
               lambda: WORKLOAD_RUNNING in _proof_states(world, job))
    (c,) = world.containers(job)
    assert c["Labels"]["gpum.job"] == str(job)
    # Finishing the job stops and removes its container; its last logs stay readable.
    world.gpum("user", "job", "finish", str(job))
    world.wait("the container removed", lambda: world.containers(job) == [])
    assert "hello from gpum" in world.gpum("user", "job", "logs", str(job))[1]


def test_finish_on_exit_ends_billing_when_the_container_exits(world: World) -> None:
    _, out, _ = world.create(2, "--image", IMAGE, "--cmd", '["/bin/sh", "-c"]',
                             "--arg", "echo working; sleep 5; echo done", "--finish-on-exit")
    job = _job(world, out)
    j = world.until("the worker finishing the job", lambda: world.client.fetch_job(job),
                    lambda v: v.status == "finishing", timeout=90)
    # Billing stopped at the exit (start + ~5 s + a poll or two), not at the deposit's end.
    assert 0 < j.ended_at - j.started_at <= 20, j
    world.wait("the container removed", lambda: world.containers(job) == [])
    out = world.gpum("user", "job", "logs", str(job))[1]
    assert "working" in out and "done" in out
    st = world.status(job)["workload"]
    assert st["exit_code"] == 0, st


def test_a_worker_restart_neither_loses_nor_duplicates_the_container(world: World) -> None:
    _, out, _ = world.create(3, "--image", IMAGE, "--cmd", '["/bin/sh", "-c"]',
                             "--arg", "while true; do echo tick; sleep 1; done")
    job = _job(world, out)
    world.wait("the container running", lambda: [c for c in world.containers(job)
                                                 if c["State"] == "running"])
    (before,) = world.containers(job)
    assert world.worker is not None
    os.killpg(world.worker.pid, signal.SIGKILL)
    world.worker.wait(timeout=10)
    world.procs.children = [(n, p) for n, p in world.procs.children if p is not world.worker]
    world.start_worker("worker-restarted")
    seq = world.client.fetch_job(job).last_seq
    world.wait("new settlements after the restart",
               lambda: world.client.fetch_job(job).last_seq >= seq + 2, timeout=90)
    (after,) = world.containers(job)
    assert after["Id"] == before["Id"] and after["State"] == "running"
    world.gpum("user", "job", "finish", str(job))
    world.wait("the container removed", lambda: world.containers(job) == [])


def test_a_wrong_spec_or_a_stranger_is_refused_and_nothing_runs(world: World) -> None:
    c = world.client
    asked = WorkloadSpec(image=IMAGE, args=("true",))
    validator = world.validator
    _, job = c.create_job(world.kps["user"], world.market, world.providers["P"], 4, 1, 20 * 10**6,
                          committee=[validator], quorum=1, workload_hash=spec_hash(asked))
    world.jobs.append(job)
    endpoint = f"http://127.0.0.1:{world.worker_port}"
    other = WorkloadSpec(image=IMAGE, args=("sh", "-c", "echo mine"))
    with pytest.raises(WorkerApiError) as e:
        # (retried while the worker has not seen the new job yet: 404 with Retry-After)
        deliver_workload(endpoint, bytes(job), other, bytes(world.kps["user"]), retries=20)
    assert e.value.status == 409
    with pytest.raises(WorkerApiError) as e:
        deliver_workload(endpoint, bytes(job), asked, bytes(world.kps["other"]), retries=0)
    assert e.value.status == 403
    # Without its spec the worker never accepts the job: the user pays nothing.
    time.sleep(4)
    assert c.fetch_job(job).status == "open" and world.containers(job) == []
    deliver_workload(endpoint, bytes(job), asked, bytes(world.kps["user"]))
    world.wait("accepted once the spec arrived", lambda: c.fetch_job(job).status == "running")
    world.gpum("user", "job", "finish", str(job))
    # A provider that publishes no endpoint gets no workload job, and no money moves.
    pay = tokens.ata(world.kps["user"].pubkey(), c.fetch_market(world.market).payment_mint)
    before = c.token_balance(pay)
    code, _, err = world.create(5, "--image", IMAGE, provider="Q", ok=False)
    assert code != 0 and "publishes no worker endpoint" in err
    code, _, err = world.create(6, "--image", "Bad Image!", ok=False)
    assert code != 0 and "image" in err
    assert c.token_balance(pay) == before


def test_the_worker_completes_a_finished_job_once_the_grace_is_over(world: World) -> None:
    """Nobody comes back after the grace: the provider's worker sends complete_job, the GPUs
    are free, and the user's last logs and the reason stay readable."""
    c = world.client
    _, out, _ = world.create(7, "--image", IMAGE, "--cmd", '["/bin/sh", "-c"]',
                             "--arg", "echo started; while true; do sleep 1; done")
    job = _job(world, out)
    world.wait("the container running", lambda: [x for x in world.containers(job)
                                                 if x["State"] == "running"])
    in_use = c.fetch_provider(world.providers["P"]).gpus_in_use
    world.gpum("user", "job", "finish", str(job))
    j = c.fetch_job(job)
    assert j.status == "finishing" and j.grace_ends_at is not None
    done = world.until("the worker completing the job", lambda: c.fetch_job(job),
                       lambda v: v.status == "completed",
                       timeout=j.grace_ends_at - c.chain_time() + 30)
    assert c.chain_time() > j.grace_ends_at  # never before the chain allowed it
    assert done.paid_seconds <= done.ended_at - done.started_at
    # Its GPU is free (and those of the module's earlier finished jobs, completed alike).
    assert c.fetch_provider(world.providers["P"]).gpus_in_use <= in_use - 1
    st = world.until("the worker seeing it end", lambda: world.api(job, "status"),
                     lambda s: s["ended"])
    assert st["job_status"] == "completed", st
    assert st["end_reason"] == "finished by the user (or the provider's owner)", st
    assert "started" in world.api(job, "logs")
    world.gpum("user", "job", "close", str(job))


def test_a_job_that_ended_while_the_worker_was_down_loses_its_container_on_restart(
        world: World) -> None:
    """The chain ends two jobs while the worker and its reaper are down (expired: the provider
    went silent; one then closed by its user); the restarted worker stops both containers on
    its first poll, keeps their last logs and tells the user why each ended."""
    c = world.client
    jobs = []
    for n in (8, 9):
        _, out, _ = world.create(n, "--image", IMAGE, "--cmd", '["/bin/sh", "-c"]',
                                 "--arg", f"i=0; while true; do i=$((i+1)); echo job{n} tick $i; "
                                          "sleep 1; done")
        jobs.append(_job(world, out))
    failed, closed = jobs
    for job in jobs:
        world.wait("the container running", lambda job=job: [
            x for x in world.containers(job) if x["State"] == "running"])
    world.stop_worker()
    stop_reapers(world.workdir, signal.SIGKILL)
    for job in jobs:
        world.wait("the job expirable (its provider silent)", lambda job=job: _expire(world, job),
                   timeout=90)
        assert c.fetch_job(job).status == "failed"
    c.close_job(world.kps["user"], closed)
    assert c.fetch_job(closed) is None and c.fetch_closed_job(closed) is not None
    # The worker and its reaper are down: nothing stopped the containers.
    assert all(x["State"] == "running" for job in jobs for x in world.containers(job))
    # Restarted with a 30 s poll and no reaper: only its first poll can have removed them.
    t0 = time.monotonic()
    world.start_worker("worker-after-slash", poll_seconds=30, reaper=False)
    try:
        for job in jobs:
            world.wait("the ended job's container removed",
                       lambda job=job: world.containers(job) == [], timeout=15)
        assert time.monotonic() - t0 < 30
        for job, n in ((failed, 8), (closed, 9)):
            assert f"job{n} tick" in world.api(job, "logs")
            st = world.api(job, "status")
            assert st["ended"] and st["state"] == "stopped", st
            assert st["logs_kept_until"] >= time.time() + 86400 - 120
        st = world.api(failed, "status")
        assert st["job_status"] == "failed" and st["end_reason"].startswith(
            "the provider failed"), st
        assert world.api(closed, "status")["job_status"] == "closed"
    finally:
        world.stop_worker()
        world.start_worker("worker-again")


def test_a_job_that_ends_while_the_worker_is_down_loses_its_container_to_the_reaper(
        world: World) -> None:
    """The worker is killed (-9) and not restarted; the reaper it started lives on. It leaves
    the Running job's container alone; once the chain ends the job (expired: the provider went
    silent) it stops and removes the container within its poll, keeping the last logs, which
    the restarted worker serves with the reason the job ended. With no worker and no container
    left, the reaper exits; the restarted worker starts a new one."""
    c = world.client
    _, out, _ = world.create(11, "--image", IMAGE, "--cmd", '["/bin/sh", "-c"]', "--arg",
                             "i=0; while true; do i=$((i+1)); echo reaped tick $i; sleep 1; done")
    job = _job(world, out)
    world.wait("the container running", lambda: [x for x in world.containers(job)
                                                 if x["State"] == "running"])
    reaper = reaper_pid(world.workdir)
    assert reaper is not None, "the worker started no reaper"
    world.stop_worker()
    try:
        # The worker is gone; while the job is Running (read after the containers: a status never
        # goes back) its container runs on through the reaper's polls.
        seen_running, until = 0, time.monotonic() + 3 * REAPER_POLL
        while time.monotonic() < until:
            states = [x["State"] for x in world.containers(job)]
            if c.fetch_job(job).status == "running":
                assert states == ["running"], states
                seen_running += 1
            time.sleep(0.2)
        assert seen_running and reaper_pid(world.workdir) == reaper
        world.wait("the job expirable (its provider silent)", lambda: _expire(world, job),
                   timeout=90)
        failed_at = time.monotonic()
        world.wait("the reaper removing the ended job's container",
                   lambda: world.containers(job) == [], timeout=30)
        took = time.monotonic() - failed_at
        print(f"container removed {took:.1f} s after the job failed (reaper poll {REAPER_POLL} s)")
        # The reaper, not a worker, recorded the end (just after the removal) with the
        # worker's reason.
        status, reason = world.wait("the reaper recording the end", lambda: _ended(world, job))
        assert status == "failed" and reason.startswith("the provider failed"), reason
        # Nothing is left to reap and no worker runs: the reaper is gone, nothing leaks.
        world.wait("the idle reaper exiting", lambda: reaper_pid(world.workdir) is None,
                   timeout=10)
        world.start_worker("worker-after-reaper")
        world.wait("the restarted worker's reaper", lambda: reaper_pid(world.workdir), timeout=30)
        assert "reaped tick 1" in world.api(job, "logs")
        st = world.api(job, "status")
        assert st["ended"] and st["state"] == "stopped", st
        assert st["job_status"] == "failed" and st["end_reason"].startswith(
            "the provider failed"), st
    finally:  # the module's next tests need a worker
        assert world.worker is not None
        if world.worker.poll() is not None:
            world.start_worker("worker-after-reaper")


def test_a_job_whose_escrow_ran_dry_keeps_its_logs_and_says_why_it_ended(world: World) -> None:
    """The escrow runs dry (ten seconds bought): ``gpum job status`` says the job ended and why,
    and until when its logs are kept; ``gpum job logs`` prints them, also once the job is
    closed (signed with the spec saved at creation, the provider from the local history)."""
    c = world.client
    _, out, _ = world.create(10, "--image", IMAGE, "--cmd", '["/bin/sh", "-c"]', "--arg",
                             "i=0; while true; do i=$((i+1)); echo dry tick $i; sleep 1; done",
                             "--deposit", "0.01")
    job = _job(world, out)
    world.until("the escrow running dry", lambda: c.fetch_job(job),
                lambda v: v.status == "completed", timeout=90)
    st = world.until("the worker seeing it end", lambda: world.status(job),
                     lambda s: s["workload"].get("ended"))
    assert st["status"] == "completed"
    assert st["ended"] == "completed - the escrow ran dry: the deposit is spent", st
    assert st["logs_kept_until"] >= time.time() + 86400 - 120
    text = subprocess.run([tool("gpum"), "--url", world.url, "job", "status", str(job),
                           "--keypair", str(world.keys["user"])],
                          capture_output=True, text=True, timeout=120, check=True).stdout
    assert "\nended: completed - the escrow ran dry: the deposit is spent\n" in text
    assert re.search(r"\nlogs_kept_until: \S+ \S+ UTC \(in (23 h|1 d)", text), text
    assert "dry tick 1" in world.gpum("user", "job", "logs", str(job))[1]
    world.gpum("user", "job", "close", str(job))
    assert c.fetch_job(job) is None and c.fetch_closed_job(job) is not None
    assert "dry tick 1" in world.gpum("user", "job", "logs", str(job), "--tail", "50")[1]
