"""The reaper: one pass against the real SQLite store, a fake runtime and a fake chain reader;
its chain read over JSON-RPC against a stub node; its lock, its loop and the real
``gpum-worker reaper`` process (podman, a node that does not answer)."""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeRuntime
from gpu_market.processes import JsonServer, free_port
from gpu_market.workload import WorkloadSpec, canonical_bytes, spec_hash
from gpum_worker.config import resolve
from gpum_worker.errors import ConfigError, JobSourceError
from gpum_worker.job_end import end_reason
from gpum_worker.jobs import AssignedJob, ChainJobSource
from gpum_worker.keys import b58encode, generate_key_file
from gpum_worker.reaper import (
    REAPER_POLL_S,
    Pass,
    Reaper,
    ReaperKeeper,
    ReaperLock,
    ReaperPaths,
    hold_worker_lock,
    holder_pid,
    run_reaper,
    worker_running,
)
from gpum_worker.runtime import JOB_LABEL, container_name
from gpum_worker.workload_end import PROVIDER_LABEL
from gpum_worker.workload_store import WorkloadStore
from gpum_worker.workloads import WorkloadManager
from runtimetestkit import podman_env

PROVIDER = b"\x03" * 32
PROGRAM = b"\x01" * 32
USER = b"\x05" * 32
SPEC = WorkloadSpec(image="localhost/x:1", args=("sh", "-c", "echo hi"))


def job(n: int, status: str = "running", **kw: Any) -> AssignedJob:
    return AssignedJob(job=bytes([n]) * 32, market=b"\x02" * 32, program_id=PROGRAM,
                       provider=PROVIDER, gpu_count=1, status=status, started_at=1,
                       user=USER, workload_hash=spec_hash(SPEC), **kw)


class Chain:
    """A ``JobReader``: ``jobs[key]`` is what the chain has (a job, "closed", None); ``fail``
    makes every read raise like an RPC that cannot be reached."""

    def __init__(self) -> None:
        self.jobs: dict[bytes, AssignedJob | str | None] = {}
        self.fail: str | None = None
        self.reads: list[tuple[bytes, ...]] = []

    def read_jobs(self, keys: Any) -> dict[bytes, AssignedJob | str | None]:
        self.reads.append(tuple(keys))
        if self.fail:
            raise JobSourceError(self.fail)
        return {k: self.jobs.get(k) for k in keys}


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.store = WorkloadStore(tmp_path / "outbox.workloads.sqlite")
        self.rt = FakeRuntime()
        self.chain = Chain()
        self.reaper = Reaper(self.rt, self.store, self.chain, PROVIDER)

    def running(self, n: int, *lines: bytes, provider: bytes = PROVIDER,
                name: str | None = None) -> AssignedJob:
        """Job ``n`` Running on chain, its spec stored, its container running with ``lines``."""
        j = job(n)
        self.chain.jobs[j.job] = j
        self.store.put_spec(j.job, j.workload_hash, canonical_bytes(SPEC), USER)
        self.store.set_state(j.job, "running", running_at=1.0)
        name = name or container_name(j.job)
        self.rt.add(name, ((JOB_LABEL, j.job_b58), (PROVIDER_LABEL, b58encode(provider))))
        self.rt.write(name, b"".join(lines))
        return j


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


# ----------------------------------------------------------------------------- one pass


def test_a_running_or_open_job_keeps_its_container(world: World) -> None:
    running = world.running(1, b"tick\n")
    lagging = world.running(2, b"tick\n")
    world.chain.jobs[lagging.job] = replace(lagging, status="open")  # a node behind the chain
    for _ in range(3):
        assert world.reaper.reap() == Pass(2)
    assert set(world.rt.containers) == {container_name(running.job), container_name(lagging.job)}
    assert world.rt.calls.get("remove") is None
    for j in (running, lagging):
        assert world.store.get(j.job).state == "running" and world.store.ended(j.job) is None
    assert world.chain.reads == [tuple(sorted((running.job, lagging.job)))] * 3  # one read a pass


def test_an_ended_job_loses_its_container_keeps_its_logs_and_says_why(world: World) -> None:
    j = world.running(1, b"line 1\n", b"line 2\n")
    world.chain.jobs[j.job] = replace(j, status="failed")
    rec = world.store.get(j.job)
    done = world.reaper.reap()
    name = container_name(j.job)
    assert done == Pass(1, (name,))
    assert world.rt.removed == [name]
    assert world.store.logs(j.job) == b"line 1\nline 2\n"
    assert world.store.get(j.job).state == "stopped"
    ended = world.store.ended(j.job)
    assert ended.status == "failed"
    assert ended.reason == end_reason("failed", rec, j) and ended.reason.startswith(
        "the provider failed")
    assert world.reaper.reap() == Pass(0)  # nothing left: no read, nothing removed again
    assert len(world.chain.reads) == 1


def test_the_reason_is_the_one_the_worker_records(world: World, tmp_path: Path,
                                                  key: Any) -> None:
    """Worker and reaper record an end through one code path: the same words for the same
    record, whichever of them saw the job end."""
    j = world.running(1, b"x\n")
    world.rt.exit(container_name(j.job), 3)
    world.chain.jobs[j.job] = replace(j, status="completed", escrow_dry=True)
    other = WorkloadStore(tmp_path / "worker.sqlite")
    other.put_spec(j.job, j.workload_hash, canonical_bytes(SPEC), USER)
    other.set_state(j.job, "exited", exit_code=3)
    WorkloadManager(None, other, key.seed).job_ended(j.job, "completed", world.chain.jobs[j.job])
    world.reaper.reap()
    assert world.store.ended(j.job).reason == other.ended(j.job).reason == (
        "the escrow ran dry: the deposit is spent; the container had exited 3")


def test_a_container_that_exited_unwatched_is_recorded_with_its_exit_code(
        world: World) -> None:
    j = world.running(1, b"boom\n")
    world.rt.exit(container_name(j.job), 3)
    world.chain.jobs[j.job] = replace(j, status="failed")
    world.reaper.reap()
    rec = world.store.get(j.job)
    assert (rec.state, rec.exit_code) == ("stopped", 3)
    assert world.store.ended(j.job).reason.endswith("; the container had exited 3")


def test_a_finishing_job_loses_its_container_but_has_not_ended(world: World) -> None:
    j = world.running(1, b"done\n")
    world.chain.jobs[j.job] = replace(j, status="finishing", ended_at=5)
    assert world.reaper.reap().removed == (container_name(j.job),)
    assert world.store.get(j.job).state == "stopped" and world.store.logs(j.job) == b"done\n"
    assert world.store.ended(j.job) is None  # the worker completes it and records its end


def test_a_closed_job_goes_at_once_a_missing_account_once_confirmed(world: World) -> None:
    closed, missing = world.running(1, b"a\n"), world.running(2, b"b\n")
    world.chain.jobs[closed.job] = "closed"
    world.chain.jobs[missing.job] = None
    assert world.reaper.reap().removed == (container_name(closed.job),)
    assert world.store.ended(closed.job).reason == "closed by the user"
    assert world.reaper.reap().removed == ()  # missing twice: a lagging node, maybe
    world.chain.jobs[missing.job] = missing  # it is back: the count starts over
    world.reaper.reap()
    world.chain.jobs[missing.job] = None
    assert [world.reaper.reap().removed for _ in range(3)] == [
        (), (), (container_name(missing.job),)]
    assert world.store.ended(missing.job).status == "closed"


def test_a_failed_chain_read_removes_nothing(world: World) -> None:
    j = world.running(1, b"x\n")
    world.chain.jobs[j.job] = replace(j, status="failed")
    world.chain.fail = "RPC deadline of 10 s passed"
    for _ in range(3):
        assert world.reaper.reap() == Pass(1, chain_read=False)
    assert container_name(j.job) in world.rt.containers and world.store.ended(j.job) is None
    world.chain.fail = None  # the node answers again: the next pass does it
    assert world.reaper.reap().removed == (container_name(j.job),)


def test_a_failed_listing_or_removal_changes_nothing(world: World) -> None:
    j = world.running(1, b"x\n")
    world.chain.jobs[j.job] = replace(j, status="failed")
    world.rt.fail["list"] = "podman hung"
    assert world.reaper.reap() == Pass(None)
    assert world.chain.reads == []
    del world.rt.fail["list"]
    world.rt.fail["remove"] = "device busy"
    assert world.reaper.reap() == Pass(1)
    assert container_name(j.job) in world.rt.containers
    assert world.store.ended(j.job) is None and world.store.get(j.job).state == "running"
    del world.rt.fail["remove"]
    assert world.reaper.reap().removed == (container_name(j.job),)


class WorkerFirst(FakeRuntime):
    """The worker removes the container (its log tail saved) between the reaper's listing and
    the reaper's log read."""

    def __init__(self, store: WorkloadStore) -> None:
        super().__init__()
        self.store = store

    def logs(self, name: str, tail: int | None = None, **caps: Any) -> bytes:
        job = dict(self.containers[name].spec.labels)[JOB_LABEL]
        from gpum_worker.keys import b58decode

        self.store.save_logs(b58decode(job), b"saved by the worker\n")
        self.containers.pop(name)
        return super().logs(name, tail, **caps)


def test_a_container_the_worker_removed_a_moment_before_is_no_error(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.rt = WorkerFirst(w.store)
    w.reaper = Reaper(w.rt, w.store, w.chain, PROVIDER)
    j = w.running(1, b"seen by the reaper\n")
    w.chain.jobs[j.job] = replace(j, status="failed")
    assert w.reaper.reap().removed == (container_name(j.job),)
    assert w.store.logs(j.job) == b"saved by the worker\n"  # the worker's copy stays
    assert w.store.ended(j.job).status == "failed" and w.store.get(j.job).state == "stopped"


def test_containers_of_others_are_never_touched(world: World) -> None:
    mine = world.running(1, b"x\n")
    theirs = world.running(2, b"x\n", provider=b"\x09" * 32)
    renamed = world.running(3, b"x\n", name="gpum-not-its-job")
    world.rt.add("gpum-nolabel", ((JOB_LABEL, "not-base58!"), (PROVIDER_LABEL,
                                                               b58encode(PROVIDER))))
    for j in (mine, theirs, renamed):
        world.chain.jobs[j.job] = replace(j, status="failed")
    assert world.reaper.reap().removed == (container_name(mine.job),)
    assert world.chain.reads == [(mine.job,)]
    assert set(world.rt.containers) == {container_name(theirs.job), "gpum-not-its-job",
                                        "gpum-nolabel"}


def test_an_account_that_is_not_a_job_keeps_its_container(world: World) -> None:
    j = world.running(1, b"x\n")
    world.chain.jobs[j.job] = "invalid"
    assert world.reaper.reap().removed == ()
    assert container_name(j.job) in world.rt.containers


# ----------------------------------------------------------------------------- the chain read


JOB_DISC = hashlib.sha256(b"account:Job").digest()[:8]
CLOSED_DISC = hashlib.sha256(b"account:ClosedJob").digest()[:8]


def job_account(status: str) -> bytes:
    """A Job account of ``status`` (every other field zero)."""
    from gpu_market.codec import default_codec

    codec = default_codec()
    data = bytearray(JOB_DISC + bytes(codec.account_size("Job") - 8))
    data[codec.field_offset("Job", "status")] = codec.enum_index("JobStatus", status)
    return bytes(data)


def account(data: bytes, owner: bytes = PROGRAM) -> dict:
    return {"data": [base64.b64encode(data).decode(), "base64"], "executable": False,
            "lamports": 1_000_000, "owner": b58encode(owner), "rentEpoch": 0,
            "space": len(data)}


class Node:
    """A JSON-RPC stand-in answering getMultipleAccounts from ``accounts`` (address ->
    account JSON); ``mode`` "error" answers 500, "hang" never in time."""

    def __init__(self) -> None:
        self.accounts: dict[bytes, dict | None] = {}
        self.mode = "ok"
        self.calls = 0
        self.server = JsonServer(self.post)
        self.server.server.handle_error = lambda *_: None  # a client that gave up on "hang"

    def post(self, _path: str, body: Any) -> tuple[int, Any]:
        self.calls += 1
        if self.mode == "error":
            return 500, {"error": "overloaded"}
        if self.mode == "hang":
            time.sleep(3)
        from gpum_worker.keys import b58decode

        keys = [b58decode(k) for k in body["params"][0]]
        return 200, {"jsonrpc": "2.0", "id": body["id"], "result": {
            "context": {"slot": 1}, "value": [self.accounts.get(k) for k in keys]}}


@pytest.fixture
def node() -> Any:
    n = Node()
    yield n
    n.server.close()


@contextmanager
def source(node: Node, key: Any, deadline_s: float = 1.0) -> Iterator[ChainJobSource]:
    src = ChainJobSource.connect(node.server.url, PROGRAM, PROVIDER, key,
                                 rpc_deadline_s=deadline_s, rpc_max_bytes=1 << 20)
    try:
        yield src
    finally:
        src._client.close()  # its HTTP connections (the worker's live as long as it does)


def test_jobs_are_read_in_one_call_and_decoded(node: Node, key: Any) -> None:
    keys = [bytes([n]) * 32 for n in range(1, 6)]
    node.accounts = {keys[0]: account(job_account("failed")),
                     keys[1]: account(job_account("running")),
                     keys[2]: account(CLOSED_DISC + (7).to_bytes(8, "little")),
                     keys[4]: account(job_account("failed"), owner=b"\x08" * 32)}
    with source(node, key) as src:
        got = src.read_jobs(keys)
    assert node.calls == 1
    assert isinstance(got[keys[0]], AssignedJob) and got[keys[0]].status == "failed"
    assert got[keys[1]].status == "running"
    assert got[keys[2]] == "closed" and got[keys[3]] is None and got[keys[4]] == "invalid"


@pytest.mark.parametrize("mode", ["error", "hang"])
def test_a_chain_read_that_fails_or_passes_its_deadline_raises(node: Node, key: Any,
                                                                mode: str) -> None:
    node.mode = mode
    t0 = time.monotonic()
    with source(node, key, deadline_s=1.0) as src, pytest.raises(JobSourceError):
        src.read_jobs([b"\x01" * 32])
    assert time.monotonic() - t0 < 2.5


# ----------------------------------------------------------------------------- lock and loop


def test_one_lock_holder_at_a_time_and_its_pid(tmp_path: Path) -> None:
    path = tmp_path / "outbox.reaper.lock"
    first, second = ReaperLock(path), ReaperLock(path)
    assert holder_pid(path) is None
    assert first.acquire() and not second.acquire()
    assert holder_pid(path) == os.getpid()
    first.release()
    assert holder_pid(path) is None and second.acquire()
    second.release()


def test_a_second_reaper_exits_at_once_and_quietly(tmp_path: Path) -> None:
    paths = ReaperPaths.of(tmp_path / "outbox.sqlite")
    WorkloadStore(paths.store).close()
    lock = ReaperLock(paths.lock)
    assert lock.acquire()
    try:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "gpum_worker.cli", "reaper", "--db",
                            str(tmp_path / "outbox.sqlite"), "--rpc-url", "http://127.0.0.1:9",
                            "--program-id", b58encode(PROGRAM), "--provider",
                            b58encode(PROVIDER), "--runtime", "podman"],
                           capture_output=True, timeout=60, check=False)
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
        assert time.monotonic() - t0 < 15
        assert holder_pid(paths.lock) == os.getpid()  # it never took the lock
    finally:
        lock.release()


class Passes:
    """A stand-in for ``Reaper`` in the loop: each pass sees ``containers``."""

    def __init__(self, containers: int = 0) -> None:
        self.containers = containers
        self.passes = 0

    def reap(self) -> Pass:
        self.passes += 1
        return Pass(self.containers)


def loop(paths: ReaperPaths, reaper: Passes, *, idle: bool) -> tuple[threading.Thread, dict,
                                                                   threading.Event, ReaperLock]:
    lock = ReaperLock(paths.lock)
    assert lock.acquire()
    stop, out = threading.Event(), {}
    t = threading.Thread(target=lambda: out.setdefault("why", run_reaper(
        reaper, paths, lock, 0.01, stop, exit_when_idle=idle)))  # type: ignore[arg-type]
    t.start()
    return t, out, stop, lock


def test_the_loop_stops_when_asked_or_when_the_store_is_gone(tmp_path: Path) -> None:
    paths = ReaperPaths.of(tmp_path / "outbox.sqlite")
    WorkloadStore(paths.store).close()
    t, out, stop, lock = loop(paths, Passes(), idle=False)
    time.sleep(0.1)
    stop.set()
    t.join(5)
    assert out["why"] == "asked to stop"
    lock.release()
    t, out, stop, lock = loop(paths, Passes(), idle=False)
    time.sleep(0.1)
    assert t.is_alive()  # no container and no worker, but not started by a worker: it stays
    paths.store.unlink()
    t.join(5)
    assert out["why"].endswith("is gone")
    lock.release()


def test_a_worker_started_reaper_exits_once_idle_and_lets_a_new_one_in(tmp_path: Path) -> None:
    paths = ReaperPaths.of(tmp_path / "outbox.sqlite")
    WorkloadStore(paths.store).close()
    worker = hold_worker_lock(paths.worker_lock)
    assert worker_running(paths.worker_lock)
    busy = Passes(containers=0)
    t, out, _, lock = loop(paths, busy, idle=True)
    time.sleep(0.1)
    assert t.is_alive() and busy.passes > 3  # a worker runs: it stays
    busy.containers = 1
    os.close(worker)  # the worker died; a container is left: it stays
    time.sleep(0.1)
    assert t.is_alive()
    busy.containers = 0  # nothing left to reap, no worker
    t.join(5)
    assert out["why"] == "no worker runs and no container of this provider is left"
    assert not lock.held and holder_pid(paths.lock) is None


def test_the_reaper_process_outlives_its_worker_and_stops_on_sigterm(tmp_path: Path) -> None:
    """Spawned like the worker spawns it: a session of its own, so the worker's stop does not
    reach it; one at a time; SIGTERM stops it cleanly and frees the lock."""
    paths = ReaperPaths.of(tmp_path / "outbox.sqlite")
    WorkloadStore(paths.store).close()
    key = tmp_path / "worker-key.json"
    generate_key_file(key)
    args = ["--db", str(tmp_path / "outbox.sqlite"), "--key", str(key),
            "--rpc-url", f"http://127.0.0.1:{free_port()}", "--program-id",
            b58encode(PROGRAM), "--provider", b58encode(b"\x0a" * 32), "--runtime", "podman",
            "--containers-conf", podman_env(tmp_path)["CONTAINERS_CONF"],
            "--reaper-poll-seconds", "0.2"]
    keeper = ReaperKeeper(paths, args, period_s=0.2).start()
    try:
        deadline = time.monotonic() + 30
        while holder_pid(paths.lock) in (None, 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        pid = holder_pid(paths.lock)
        assert pid, paths.log.read_text()
        assert os.getsid(pid) != os.getsid(0) and os.getpgid(pid) != os.getpgid(0)
        assert os.getppid() != pid and str(os.getpid()) not in Path(
            f"/proc/{pid}/stat").read_text().split()[3:4]  # not the test's child
        time.sleep(0.5)
        assert not keeper.ensure()  # one runs: no second one
    finally:
        keeper.stop()
    time.sleep(0.5)
    assert holder_pid(paths.lock) == pid  # the worker stopped; its reaper did not
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while holder_pid(paths.lock) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert holder_pid(paths.lock) is None
    text = paths.log.read_text()
    assert "reaper stopped: asked to stop" in text and "Traceback" not in text, text


# ----------------------------------------------------------------------------- configuration


def resolved(file: dict | None = None, env: dict | None = None, **flags: Any) -> Any:
    return resolve(file or {}, env or {}, flags)


def test_reaper_settings() -> None:
    cfg = resolved()
    assert cfg.reaper is True and cfg.reaper_poll_seconds == REAPER_POLL_S == 15
    assert resolved({"workload": {"reaper": False, "reaper_poll_seconds": 2}}).reaper is False
    assert resolved({"workload": {"reaper_poll_seconds": 2}}).reaper_poll_seconds == 2
    assert resolved(env={"GPUM_WORKER_REAPER": "false"}).reaper is False
    assert resolved({"workload": {"reaper": False}}, {"GPUM_WORKER_REAPER": "true"}).reaper
    assert resolved({"workload": {"reaper": True}}, reaper=False).reaper is False
    assert resolved(env={"GPUM_WORKER_REAPER_POLL_SECONDS": "0.5"}).reaper_poll_seconds == 0.5
    for bad in ({"workload": {"reaper": "yes"}}, {"workload": {"reaper_poll_seconds": 0}},
                {"workload": {"reaper_poll_seconds": 4000}}):
        with pytest.raises(ConfigError, match="reaper"):
            resolved(bad)
    with pytest.raises(ConfigError, match="GPUM_WORKER_REAPER"):
        resolved(env={"GPUM_WORKER_REAPER": "maybe"})
