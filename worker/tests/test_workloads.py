"""Workload containers: the manager's reconcile rules against a fake runtime, window states,
the agent's proofs for workload jobs, and the same lifecycle with real podman."""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from agentkit import run_seconds
from fakes import FakeBackend, FakeGpu, FakeRuntime, NoHeads
from gpu_market.proof import (
    HEALTH_FOREIGN_PROCESS,
    PROOF_VERSION,
    WORKLOAD_EXITED,
    WORKLOAD_FAILED,
    WORKLOAD_NONE,
    WORKLOAD_PENDING,
    WORKLOAD_RESTARTING,
    WORKLOAD_RUNNING,
    WorkloadWindow,
    decode_proof,
)
from gpu_market.workload import (
    PortSpec,
    WorkloadSpec,
    canonical_bytes,
    seal_secrets,
    spec_hash,
)
from gpum_worker.agent import Agent
from gpum_worker.errors import JobSourceError
from gpum_worker.jobs import AssignedJob, StaticJobSource
from gpum_worker.keys import WorkerKey, b58encode
from gpum_worker.limits import MachineResources
from gpum_worker.outbox import Outbox
from gpum_worker.runtime import JOB_LABEL, container_name
from gpum_worker.workload_store import WorkloadStore, WorkloadUnavailable
from gpum_worker.workload_windows import FOREIGN_RECHECK_S, WindowAccount
from gpum_worker.workloads import (
    MAX_IMAGE_CHECKS,
    MAX_START_FAILURES,
    PROVIDER_LABEL,
    RETRY_BASE_S,
    WorkloadManager,
)
from runtimetestkit import RealPodman, real_podman, wait_for
from solders.keypair import Keypair

T0 = 1_700_000_000
W = 10
MACHINE = MachineResources(memory_mib=65536, cpus=16, gpu_count=8, scratch_mib=1 << 20)
USER = bytes(Keypair().pubkey())


def make_spec(key: WorkerKey, **kw) -> WorkloadSpec:
    base = {"image": "docker.io/library/busybox:1.36", "command": ("sh", "-c"),
            "args": ("echo hi; sleep 1000",), "env": (("A", "1"),),
            "secret_env": seal_secrets(key.pubkey, {"TOKEN": "s3cret-value"}),
            "ports": (PortSpec(8080),), "shm_size_mib": 64, "scratch_mib": 128}
    base.update(kw)
    return WorkloadSpec(**base)


def wjob(n: int, spec: WorkloadSpec | None, status: str = "running", gpus: int = 1,
         started_at: int | None = T0, ended_at: int | None = None) -> AssignedJob:
    return AssignedJob(job=bytes([n]) * 32, market=b"\x02" * 32, program_id=b"\x01" * 32,
                       provider=b"\x03" * 32, gpu_count=gpus, status=status,
                       started_at=started_at if status != "open" else None,
                       ended_at=ended_at, user=USER,
                       workload_hash=spec_hash(spec) if spec is not None else bytes(32))


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def manager(tmp_path: Path, key: WorkerKey, rt: FakeRuntime | None, clock: Clock | None = None,
            boot: float = 0.0) -> WorkloadManager:
    clock = clock or Clock()
    store = WorkloadStore(tmp_path / "w.sqlite", clock=clock)
    return WorkloadManager(rt, store, key.seed, publish_host="127.0.0.1", clock=clock,
                           host_boot_time=lambda: boot, process_alive=lambda pid: True,
                           background_starts=False, machine=MACHINE)


def deliver(m: WorkloadManager, j: AssignedJob, spec: WorkloadSpec) -> None:
    m.store.put_spec(j.job, j.workload_hash, canonical_bytes(spec), j.user)


def jobs(*pairs: tuple[AssignedJob, tuple[str, ...]]) -> dict:
    return {j.job: (j, uuids) for j, uuids in pairs}


def delivered(tmp_path: Path, key: WorkerKey, **spec_kw
              ) -> tuple[FakeRuntime, WorkloadManager, WorkloadSpec, AssignedJob]:
    """A manager on a fake runtime, and Running job 1 whose spec (``make_spec(key,
    **spec_kw)``) was delivered."""
    rt = FakeRuntime()
    m = manager(tmp_path, key, rt)
    spec = make_spec(key, **spec_kw)
    j = wjob(1, spec)
    deliver(m, j, spec)
    return rt, m, spec, j


def started(tmp_path: Path, key: WorkerKey, **spec_kw
            ) -> tuple[FakeRuntime, WorkloadManager, WorkloadSpec, AssignedJob]:
    """``delivered``, then reconciled at T0 on GPU-0: its container runs."""
    rt, m, spec, j = delivered(tmp_path, key, **spec_kw)
    m.reconcile(jobs((j, ("GPU-0",))), now=T0)
    return rt, m, spec, j


# ------------------------------------------------------------------------- reconcile rules


def test_running_job_with_spec_gets_exactly_its_container(tmp_path: Path, key: WorkerKey
                                                          ) -> None:
    rt, m, spec, j = delivered(tmp_path, key)
    m.reconcile(jobs((j, ("GPU-1", "GPU-2"))), now=T0)
    name = container_name(j.job)
    assert name == "gpum-" + b58encode(j.job)
    (cs,) = rt.runs
    assert cs.name == name and cs.image == spec.image
    assert cs.command == ("sh", "-c") and cs.args == ("echo hi; sleep 1000",)
    assert cs.gpu_uuids == ("GPU-1", "GPU-2")
    assert dict(cs.labels)[JOB_LABEL] == j.job_b58
    assert dict(cs.env) == {"A": "1", "TOKEN": "s3cret-value"}  # secret opened for the run
    assert [(p.port, p.protocol) for p in cs.ports] == [(8080, "tcp")]
    assert (cs.shm_size_mib, cs.scratch_mib, cs.publish_host) == (64, 128, "127.0.0.1")
    assert m.store.get(j.job).state == "running"
    # Every later poll finds it running: no second run.
    m.reconcile(jobs((j, ("GPU-1", "GPU-2"))), now=T0 + 10)
    assert len(rt.runs) == 1 and rt.calls["run"] == 1
    status = m.describe(j)
    assert status["state"] == "running" and status["runtime"] == "fake"
    assert status["ports"] == [{"port": 8080, "protocol": "tcp", "host": "127.0.0.1",
                                "host_port": 40000}]


def test_spec_is_stored_as_delivered_and_secrets_never_in_clear(tmp_path: Path,
                                                                key: WorkerKey) -> None:
    rt = FakeRuntime()
    m = manager(tmp_path, key, rt)
    spec = make_spec(key)
    j = wjob(1, spec)
    m.deliver(j, spec)
    m.reconcile(jobs((j, ("GPU-0",))), now=T0)
    m.store.close()
    raw = sqlite3.connect(tmp_path / "w.sqlite").execute("SELECT spec FROM workloads").fetchone()
    assert bytes(raw[0]) == canonical_bytes(spec)
    for f in tmp_path.iterdir():
        assert b"s3cret-value" not in f.read_bytes()
    assert (tmp_path / "w.sqlite").stat().st_mode & 0o077 == 0


def test_no_container_without_spec_or_before_running(tmp_path: Path, key: WorkerKey) -> None:
    rt = FakeRuntime()
    m = manager(tmp_path, key, rt)
    spec = make_spec(key)
    waiting, opened = wjob(1, spec), wjob(2, spec, status="open")
    deliver(m, opened, spec)
    m.reconcile(jobs((waiting, ("GPU-0",)), (opened, ("GPU-1",))), now=T0)
    assert rt.containers == {}
    assert m.window_state(waiting, T0, T0 + W, set()).state == WORKLOAD_PENDING
    assert m.describe(waiting)["state"] == "pending"
    assert m.describe(opened)["state"] == "pending"


def test_job_leaving_running_loses_its_container_and_logs_stay_served(
        tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = started(tmp_path, key)
    name = container_name(j.job)
    rt.write(name, b"step 1\nstep 2\n")
    assert m.logs(j, tail=1) == b"step 2\n"
    fin = replace(j, status="finishing", ended_at=T0 + 20)
    m.reconcile(jobs((fin, ("GPU-0",))), now=T0 + 21)
    assert rt.removed == [name] and name not in rt.containers
    assert m.store.get(j.job).state == "stopped"
    assert m.describe(fin)["state"] == "stopped"
    assert m.logs(fin) == b"step 1\nstep 2\n"  # the tail saved before removal
    assert m.logs(fin, tail=1) == b"step 2\n"
    assert m.follow_logs(fin) is None
    m.reconcile(jobs((fin, ("GPU-0",))), now=T0 + 30)
    assert len(rt.runs) == 1  # never started again


def test_held_job_keeps_its_container_and_ended_job_loses_it(tmp_path: Path,
                                                             key: WorkerKey) -> None:
    rt, m, _, j = started(tmp_path, key)
    name = container_name(j.job)
    # Missing from one listing but not known to have ended: the container stays as it is.
    m.reconcile({}, held={j.job}, now=T0 + 10)
    assert name in rt.containers and not rt.removed
    assert m.lookup(j.job) == j  # the API still knows it
    # The agent confirmed the end: its container is an orphan now; its log tail is saved.
    rt.containers[name].output = [b"last words\n"]
    m.job_ended(j.job, "failed")
    m.reconcile({}, now=T0 + 20)
    assert rt.removed == [name]
    assert m.ended(j.job) and m.lookup(j.job) is None
    # Its status, why it ended and its last logs stay readable for the retention period...
    view = m.ended_view(j.job)
    assert view is not None and view.status == "failed"
    assert m.logs(view) == b"last words\n"
    st = m.describe(view)
    assert st["ended"] and st["job_status"] == "failed" and st["state"] == "stopped"
    assert st["end_reason"].startswith("the provider failed")
    assert st["logs_kept_until"] == int(m.store.ended(j.job).ended_at) + 86400
    # ... then only the tombstone stays.
    assert isinstance(m.clock, Clock)
    m.clock.t += 86400 + 1
    m.reconcile({}, now=m.clock.t)
    assert m.ended(j.job) and m.ended_view(j.job) is None and m.store.get(j.job) is None
    assert m.store.ended(j.job).status == "failed"


def test_orphans_are_removed(tmp_path: Path, key: WorkerKey) -> None:
    rt = FakeRuntime()
    m = manager(tmp_path, key, rt)
    spec = make_spec(key)
    live = wjob(1, spec)
    deliver(m, live, spec)
    rt.add("gpum-old", ((JOB_LABEL, b58encode(b"\x09" * 32)),), status="exited")
    rt.add("gpum-garbage", ((JOB_LABEL, "not-base58-0OIl"),))
    rt.add("gpum-wrongname", ((JOB_LABEL, live.job_b58),))  # our label, not our name
    rt.add("someone-else", (("other", "x"),))
    rt.add("gpumtest-1", ((JOB_LABEL, b58encode(b"\x09" * 32)),))  # not named like ours
    m.reconcile(jobs((live, ("GPU-0",))), now=T0)
    assert sorted(rt.removed) == ["gpum-garbage", "gpum-old", "gpum-wrongname"]
    assert set(rt.containers) == {"someone-else", "gpumtest-1", container_name(live.job)}


def test_a_worker_removes_only_its_own_providers_containers(tmp_path: Path, key: WorkerKey
                                                            ) -> None:
    # Two providers' workers on one host (or one beside another's test): each labels its
    # containers with its provider and never takes the other's for an orphan.
    rt = FakeRuntime()
    spec = make_spec(key)
    mine = wjob(1, spec)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ours = manager(tmp_path / "a", key, rt)
    ours.provider = mine.provider
    deliver(ours, mine, spec)
    ours.reconcile(jobs((mine, ("GPU-0",))), now=T0)
    name = container_name(mine.job)
    assert dict(rt.containers[name].spec.labels)[PROVIDER_LABEL] == b58encode(mine.provider)
    theirs = manager(tmp_path / "b", key, rt)
    theirs.provider = b"\x07" * 32
    theirs.reconcile({}, now=T0 + 1)  # none of its jobs are live: mine is not its orphan
    assert name in rt.containers and rt.removed == []
    ours.reconcile({}, now=T0 + 2)  # the job ended for its own worker: removed
    assert rt.removed == [name]


def test_listing_failure_removes_nothing(tmp_path: Path, key: WorkerKey) -> None:
    rt = FakeRuntime()
    m = manager(tmp_path, key, rt)
    rt.add("gpum-old", ((JOB_LABEL, b58encode(b"\x09" * 32)),))
    rt.fail["list"] = "podman ps hung"
    m.reconcile({}, now=T0)
    assert "gpum-old" in rt.containers
    del rt.fail["list"]
    m.reconcile({}, now=T0 + 10)
    assert rt.removed == ["gpum-old"]


def test_restart_neither_loses_nor_duplicates(tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = started(tmp_path, key)
    m.store.close()
    m2 = manager(tmp_path, key, rt)  # a new process on the same store
    assert m2.ready_to_accept(replace(j, status="open"))
    m2.reconcile(jobs((j, ("GPU-0",))), now=T0 + 60)
    assert len(rt.runs) == 1 and len(rt.containers) == 1
    # A container that exited is not run again after a restart either...
    rt.exit(container_name(j.job), 0)
    m2.reconcile(jobs((j, ("GPU-0",))), now=T0 + 70)
    m2.store.close()
    m3 = manager(tmp_path, key, rt)
    m3.reconcile(jobs((j, ("GPU-0",))), now=T0 + 80)
    assert len(rt.runs) == 1
    # ...nor when someone removed it by hand: the user's work ran once.
    rt.remove(container_name(j.job))
    m3.reconcile(jobs((j, ("GPU-0",))), now=T0 + 90)
    assert len(rt.runs) == 1
    assert m3.window_state(j, T0 + 90, T0 + 100, set()).state == WORKLOAD_EXITED


def test_container_stopped_by_a_host_reboot_is_started_again(tmp_path: Path,
                                                             key: WorkerKey) -> None:
    rt, m, _, j = started(tmp_path, key, finish_on_exit=True)
    m.store.close()
    rt.exit(container_name(j.job), 137)  # the host went down with it
    finished: list[bytes] = []
    m2 = manager(tmp_path, key, rt, boot=T0 + 500)
    m2.reconcile(jobs((j, ("GPU-0",))), finish=lambda x: finished.append(x.job), now=T0 + 600)
    assert len(rt.runs) == 2 and rt.containers[container_name(j.job)].status == "running"
    assert finished == []  # a reboot is not the workload finishing


def test_finish_on_exit_once(tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = delivered(tmp_path, key, finish_on_exit=True)
    calls: list[bytes] = []
    fail = [True]

    def finish(x: AssignedJob) -> None:
        calls.append(x.job)
        if fail[0]:
            raise JobSourceError("rpc down")

    m.reconcile(jobs((j, ("GPU-0",))), finish=finish, now=T0)
    assert calls == []  # still running
    rt.exit(container_name(j.job), 3)
    m.reconcile(jobs((j, ("GPU-0",))), finish=finish, now=T0 + 10)
    assert len(calls) == 1 and not m.store.get(j.job).finish_requested
    fail[0] = False
    m.reconcile(jobs((j, ("GPU-0",))), finish=finish, now=T0 + 20)  # retried
    assert len(calls) == 2 and m.store.get(j.job).finish_requested
    m.reconcile(jobs((j, ("GPU-0",))), finish=finish, now=T0 + 30)  # the chain lags
    m.store.close()
    m2 = manager(tmp_path, key, rt)
    m2.reconcile(jobs((j, ("GPU-0",))), finish=finish, now=T0 + 40)
    assert len(calls) == 2  # never twice after success, also across restarts
    assert m2.describe(j)["state"] == "exited" and m2.describe(j)["exit_code"] == 3


def test_no_finish_without_finish_on_exit(tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = delivered(tmp_path, key)
    calls: list[bytes] = []
    m.reconcile(jobs((j, ("GPU-0",))), finish=lambda x: calls.append(x.job), now=T0)
    rt.exit(container_name(j.job), 0)
    m.reconcile(jobs((j, ("GPU-0",))), finish=lambda x: calls.append(x.job), now=T0 + 10)
    assert calls == [] and len(rt.runs) == 1  # exited, stays exited, GPUs stay reserved


def test_start_failure_is_failed_and_retried_with_backoff(tmp_path: Path, key: WorkerKey,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    rt, m, _, j = delivered(tmp_path, key)
    rt.fail["run"] = "image not found"
    with caplog.at_level(logging.ERROR):
        m.reconcile(jobs((j, ("GPU-0",))), now=T0)
    assert "s3cret-value" not in caplog.text
    rec = m.store.get(j.job)
    assert rec.state == "failed" and "image not found" in rec.error
    assert m.describe(j)["state"] == "failed"
    m.reconcile(jobs((j, ("GPU-0",))), now=T0 + RETRY_BASE_S - 1)
    assert rt.calls["run"] == 1  # backing off
    m.reconcile(jobs((j, ("GPU-0",))), now=T0 + RETRY_BASE_S)
    assert rt.calls["run"] == 2
    m.reconcile(jobs((j, ("GPU-0",))), now=T0 + RETRY_BASE_S + 10)
    assert rt.calls["run"] == 2  # the backoff doubled
    ws = m.window_state(j, T0, T0 + W, set())
    assert ws.state == WORKLOAD_FAILED and not ws.billable
    del rt.fail["run"]
    m.reconcile(jobs((j, ("GPU-0",))), now=T0 + 3 * RETRY_BASE_S)
    assert m.store.get(j.job).state == "running"
    assert m.window_state(j, T0 + 3 * RETRY_BASE_S, T0 + 4 * RETRY_BASE_S,
                          set()).state == WORKLOAD_RUNNING


def test_no_runtime_never_accepts_and_says_so_once(tmp_path: Path, key: WorkerKey,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    m = manager(tmp_path, key, None)
    spec = make_spec(key)
    j = wjob(1, spec, status="open")
    plain = replace(wjob(2, None, status="open"))
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            assert not m.ready_to_accept(j)
    assert "podman" in m.acceptance_blocker(j)
    assert sum("not accepted" in r.message for r in caplog.records) == 1
    assert m.ready_to_accept(plain)
    with pytest.raises(WorkloadUnavailable, match="no container runtime"):
        m.deliver(j, spec)
    running = replace(j, status="running", started_at=T0)
    m.reconcile(jobs((running, ("GPU-0",))), now=T0)
    assert m.window_state(running, T0, T0 + W, set()).state == WORKLOAD_FAILED


def test_ready_to_accept_needs_the_spec(tmp_path: Path, key: WorkerKey) -> None:
    m = manager(tmp_path, key, FakeRuntime())
    spec = make_spec(key)
    j = wjob(1, spec, status="open")
    assert m.ready_to_accept(wjob(2, None, status="open"))
    assert not m.ready_to_accept(j)
    assert "not delivered" in m.acceptance_blocker(j)
    m.deliver(j, spec)
    assert m.ready_to_accept(j)


def test_start_runs_in_the_background(tmp_path: Path, key: WorkerKey) -> None:
    """An image pull never blocks the agent's loop; a second poll does not start twice."""
    import threading

    rt = FakeRuntime()
    release = threading.Event()
    fake_run = rt.run

    def slow_run(spec):
        release.wait(10)
        return fake_run(spec)

    rt.run = slow_run  # type: ignore[method-assign]
    m = manager(tmp_path, key, rt)
    m.background_starts = True
    spec = make_spec(key)
    j = wjob(1, spec)
    deliver(m, j, spec)
    m.reconcile(jobs((j, ("GPU-0",))), now=T0)
    assert m.store.get(j.job).state == "starting" and m.describe(j)["state"] == "starting"
    m.reconcile(jobs((j, ("GPU-0",))), now=T0 + 10)
    assert not m.wait_for_starts(0.05)
    assert m.window_state(j, T0, T0 + W, set()).state == WORKLOAD_PENDING
    release.set()
    assert m.wait_for_starts(5)
    assert len(rt.runs) == 1 and m.store.get(j.job).state == "running"
    m.reconcile(jobs((j, ("GPU-0",))), now=T0 + 20)
    assert len(rt.runs) == 1


# ------------------------------------------------------------------------- window states


def test_window_state_processes_attributed(tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = started(tmp_path, key)
    inside = next(iter(rt.containers[container_name(j.job)].pids))
    pids_calls = rt.calls.get("pids", 0)
    assert m.window_state(j, T0, T0 + W, set()) == WorkloadWindow(WORKLOAD_RUNNING)
    # The proof counts what the sampler's lookups found; it never asks the runtime itself.
    assert m.window_state(j, T0, T0 + W, {inside, 777}) == WorkloadWindow(WORKLOAD_RUNNING)
    assert rt.calls.get("pids", 0) == pids_calls
    m.observe_processes(j, {inside, 777}, T0 + 1)
    ws = m.window_state(j, T0, T0 + W, {inside, 777})
    assert ws == WorkloadWindow(WORKLOAD_RUNNING, None, job_processes=1, foreign_processes=1)
    assert not ws.billable
    # Attributed while it ran; gone by the window's end: still the job's.
    rt.containers[container_name(j.job)].pids.clear()
    assert m.window_state(j, T0 + W, T0 + 2 * W, {inside}).job_processes == 1
    # A process that vanished before anyone could look is not counted at all.
    m._alive = lambda pid: False
    m.observe_processes(j, {888}, T0 + W + 1)
    assert m.window_account(j, T0 + W, T0 + 2 * W, {888}) == WindowAccount(
        WorkloadWindow(WORKLOAD_RUNNING))
    assert m.window_state(wjob(2, None), T0, T0 + W, {1, 2}) == WorkloadWindow(WORKLOAD_NONE)


def test_processes_are_looked_up_once(tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = started(tmp_path, key)
    inside = next(iter(rt.containers[container_name(j.job)].pids))
    before = rt.calls.get("pids", 0)
    for t in range(5):  # once a second, as the agent's sampler does
        m.observe_processes(j, {inside, 777}, T0 + t)
    assert rt.calls["pids"] == before + 1
    m.observe_processes(j, {inside, 777}, T0 + FOREIGN_RECHECK_S)  # a foreign one again
    assert rt.calls["pids"] == before + 2
    ws = m.window_state(j, T0, T0 + W, {inside, 777})
    assert (ws.job_processes, ws.foreign_processes) == (1, 1)
    assert m.window_state(j, T0 + W, T0 + 2 * W, {inside}).job_processes == 1
    assert rt.calls["pids"] == before + 2


def test_window_state_worst_and_exit_code(tmp_path: Path, key: WorkerKey) -> None:
    rt = FakeRuntime()
    m = manager(tmp_path, key, rt)
    spec = make_spec(key)
    j = wjob(1, spec)
    m.reconcile(jobs((j, ("GPU-0",))), now=T0 + 1)  # no spec yet: pending
    deliver(m, j, spec)
    m.reconcile(jobs((j, ("GPU-0",))), now=T0 + 4)  # started
    assert m.window_state(j, T0, T0 + W, set()).state == WORKLOAD_PENDING
    m.reconcile(jobs((j, ("GPU-0",))), now=T0 + 14)
    assert m.window_state(j, T0 + W, T0 + 2 * W, set()).state == WORKLOAD_RUNNING
    rt.exit(container_name(j.job), 3)
    m.reconcile(jobs((j, ("GPU-0",))), now=T0 + 25)
    assert m.window_state(j, T0 + 2 * W, T0 + 3 * W, set()) == WorkloadWindow(
        WORKLOAD_EXITED, 3)
    assert m.window_state(j, T0 + 3 * W, T0 + 4 * W, set()) == WorkloadWindow(
        WORKLOAD_EXITED, 3)  # carried from before the window
    c = rt.containers[container_name(j.job)]
    c.status, c.exit_code = "restarting", None
    m.reconcile(jobs((j, ("GPU-0",))), now=T0 + 45)
    assert m.window_state(j, T0 + 4 * W, T0 + 5 * W, set()).state == WORKLOAD_RESTARTING


def test_window_state_after_restart_uses_the_store(tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = started(tmp_path, key)
    rt.exit(container_name(j.job), 9)
    m.reconcile(jobs((j, ("GPU-0",))), now=T0 + 5)
    m.store.close()
    m2 = manager(tmp_path, key, rt)
    assert m2.window_state(j, T0, T0 + W, set()) == WorkloadWindow(WORKLOAD_EXITED, 9)


# ------------------------------------------------------------------------- the agent


def agent(tmp_path: Path, key: WorkerKey, job_list: list[AssignedJob], m: WorkloadManager,
          n_gpus: int = 2, processes: list | None = None) -> tuple[Agent, StaticJobSource]:
    gpus = [FakeGpu(f"GPU-{i}", processes=list(processes or [])) for i in range(n_gpus)]
    src = StaticJobSource(job_list, clock=lambda: T0)
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey, ["http://v"])
    a = Agent(backend=FakeBackend(gpus), job_source=src, outbox=ob, key=key, window_seconds=W,
              heads=NoHeads(), workloads=m)
    a.start()
    return a, src


def test_agent_accepts_only_after_delivery_and_proves_the_workload(tmp_path: Path,
                                                                   key: WorkerKey) -> None:
    rt = FakeRuntime()
    m = manager(tmp_path, key, rt)
    spec = make_spec(key)
    plain = wjob(2, None, status="open")
    j = wjob(1, spec, status="open")
    a, src = agent(tmp_path, key, [j, plain], m)
    a.poll_jobs(T0)
    assert src.accepted == [plain.job]  # the workload job waits for its spec
    assert a._waiting[j.job].startswith("has a workload whose spec")
    m.deliver(j, spec)
    a.poll_jobs(T0)
    assert src.accepted == [plain.job, j.job]
    a.poll_jobs(T0)  # now Running: its container starts on its GPU
    (cs,) = rt.runs
    assert cs.gpu_uuids == a.active[j.job].uuids == ("GPU-0",)
    proofs = {p.job: p for p in run_seconds(a, T0, T0 + W)}
    p = proofs[j.job]
    assert p.version == PROOF_VERSION == 3
    assert p.workload == WorkloadWindow(WORKLOAD_RUNNING) and p.billable_seconds == W
    assert proofs[plain.job].workload == WorkloadWindow(WORKLOAD_NONE)
    assert proofs[plain.job].billable_seconds == W
    (row,) = [r for r in a.outbox.due("http://v", 1e12, 64) if r.job == j.job]
    assert decode_proof(row.proof).workload == p.workload


def test_a_slow_container_runtime_never_delays_windows(tmp_path: Path, key: WorkerKey
                                                       ) -> None:
    # With workload_thread (gpum-worker run) the reconcile runs beside the main loop: a
    # runtime that hangs does not hold up polls or window closing, and reconciles never pile up.
    import threading

    release, entered = threading.Event(), []

    class Hanging(FakeRuntime):
        def list_job_containers(self, match=None):
            entered.append(1)
            release.wait(10)
            return super().list_job_containers(match)

    m = manager(tmp_path, key, Hanging())
    j = wjob(2, None, status="running")
    a, _ = agent(tmp_path, key, [j], m)
    a.workload_thread = True
    a.poll_jobs(T0)
    wait_for(lambda: entered, what="the reconcile thread")
    a.poll_jobs(T0 + 1)  # the first reconcile still hangs: no second one
    assert [p.seq for p in run_seconds(a, T0, T0 + 2 * W)] == [1, 2]
    assert len(entered) == 1
    release.set()
    a._reconciling.join(5)
    a.poll_jobs(T0 + 2 * W)
    wait_for(lambda: len(entered) == 2, what="the next reconcile")


def test_agent_foreign_process_window_is_not_billable(tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = delivered(tmp_path, key)
    a, _ = agent(tmp_path, key, [j], m, processes=[(4242, 900 * 2**20)])
    a.poll_jobs(T0)
    (p1,) = run_seconds(a, T0, T0 + W)
    assert p1.workload.foreign_processes == 1 and p1.workload.job_processes == 0
    assert p1.health_flags & HEALTH_FOREIGN_PROCESS and p1.billable_seconds == 0
    assert p1.cumulative_seconds == 0
    # The same PID inside the container (a fresh attribution): billable again.
    m._forget_processes(j.job)
    rt.containers[container_name(j.job)].pids.add(4242)
    (p2,) = run_seconds(a, T0 + W, T0 + 2 * W)
    assert p2.workload == WorkloadWindow(WORKLOAD_RUNNING, None, 1, 0)
    assert p2.billable_seconds == W and not p2.health_flags & HEALTH_FOREIGN_PROCESS


def test_agent_failed_workload_window_is_not_billable(tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = delivered(tmp_path, key)
    rt.fail["run"] = "no such image"
    a, _ = agent(tmp_path, key, [j], m)
    a.poll_jobs(T0)
    (p,) = run_seconds(a, T0, T0 + W)
    assert p.workload.state == WORKLOAD_FAILED and p.billable_seconds == 0


def test_agent_windows_before_the_workload_ran_are_not_billable(tmp_path: Path,
                                                                key: WorkerKey) -> None:
    rt, m, _, j = delivered(tmp_path, key)
    rt.start_status = "created"  # the runtime has not started it yet (a slow start)
    a, _ = agent(tmp_path, key, [j], m)
    a.poll_jobs(T0)
    (p1,) = run_seconds(a, T0, T0 + W)
    assert p1.workload.state == WORKLOAD_PENDING and p1.billable_seconds == 0
    assert not m.has_run(j, T0 + W)
    rt.containers[container_name(j.job)].status = "running"
    a.poll_jobs(T0 + W + 0.2)
    (p2,) = run_seconds(a, T0 + W, T0 + 2 * W)
    assert p2.billable_seconds == W and p2.cumulative_seconds == W
    # A restarted worker knows from its store that the container ran.
    m.store.close()
    m2 = manager(tmp_path, key, rt)
    assert m2.has_run(j, T0 + 2 * W) and not m2.has_run(j, T0 + W)


def test_image_check_runs_before_acceptance_in_the_background(tmp_path: Path,
                                                              key: WorkerKey) -> None:
    import threading

    gate = threading.Event()

    class SlowPull(FakeRuntime):
        def ensure_image(self, image: str) -> None:
            gate.wait(10)
            super().ensure_image(image)

    rt = SlowPull()
    m = manager(tmp_path, key, rt)
    m.background_starts = True
    spec = make_spec(key)
    j = wjob(1, spec, status="open")
    m.deliver(j, spec)
    assert "being pulled" in m.acceptance_blocker(j)
    assert "being pulled" in m.acceptance_blocker(j)  # one check, not two
    # At most MAX_IMAGE_CHECKS pulls at once: an unpaid Open job cannot make many.
    others = [wjob(10 + i, spec, status="open") for i in range(MAX_IMAGE_CHECKS)]
    for o in others:
        m.deliver(o, spec)
    assert [("waits for other" in (m.acceptance_blocker(o) or "")) for o in others] == [
        False] * (MAX_IMAGE_CHECKS - 1) + [True]
    gate.set()
    assert m.wait_for_starts(10)
    assert m.acceptance_blocker(j) is None and rt.images_checked == [spec.image] * MAX_IMAGE_CHECKS
    # A failing check is reported, and retried only after its backoff.
    rt.fail["image"] = "manifest unknown"
    k = wjob(2, spec, status="open")
    m.deliver(k, spec)
    m.background_starts = False
    assert "manifest unknown" in m.acceptance_blocker(k)
    calls = rt.calls["image"]
    assert "manifest unknown" in m.acceptance_blocker(k) and rt.calls["image"] == calls


def test_start_failures_finish_the_job_once(tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = delivered(tmp_path, key)
    rt.fail["run"] = "exec: no such file"
    finished: list = []

    def finish(job: AssignedJob) -> None:
        if len(finished) == 0 and "flaky" not in finished:
            finished.append("flaky")
            raise JobSourceError("rpc down")
        finished.append(job.job)

    t = T0
    for _ in range(MAX_START_FAILURES):
        m.reconcile(jobs((j, ("GPU-0",))), finish=finish, now=t)
        t += 10 * RETRY_BASE_S
    assert rt.calls["run"] == MAX_START_FAILURES and finished == []
    m.reconcile(jobs((j, ("GPU-0",))), finish=finish, now=t)  # the chain refuses once
    m.reconcile(jobs((j, ("GPU-0",))), finish=finish, now=t + 1)
    m.reconcile(jobs((j, ("GPU-0",))), finish=finish, now=t + 2)
    assert finished == ["flaky", j.job] and rt.calls["run"] == MAX_START_FAILURES
    assert m.store.get(j.job).finish_requested
    assert m.window_state(j, T0, t + 3, set()).state == WORKLOAD_FAILED


def test_agent_exited_workload_window_stays_billable(tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = delivered(tmp_path, key)
    a, _ = agent(tmp_path, key, [j], m)
    a.poll_jobs(T0)
    rt.exit(container_name(j.job), 0)
    a.poll_jobs(T0 + 0.2)
    (p,) = run_seconds(a, T0, T0 + W)
    assert p.workload == WorkloadWindow(WORKLOAD_EXITED, 0) and p.billable_seconds == W


def test_agent_finish_on_exit_then_container_removed(tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = delivered(tmp_path, key, finish_on_exit=True)
    a, src = agent(tmp_path, key, [j], m)
    a.poll_jobs(T0)
    name = container_name(j.job)
    rt.write(name, b"done\n")
    rt.exit(name, 0)
    a.poll_jobs(T0 + 5)
    assert src.finished == [j.job] and src.job_status(j.job) == "finishing"
    a.poll_jobs(T0 + 6)
    assert rt.removed == [name]
    fin = src.fetch(j.job)
    assert m.logs(fin) == b"done\n"
    a.poll_jobs(T0 + 7)
    assert src.finished == [j.job]
    # The job ends: its last logs and why it ended stay readable (the retention period).
    src.set(replace(fin, status="completed"))
    a.poll_jobs(T0 + 8)
    view = m.ended_view(j.job)
    assert m.ended(j.job) and view is not None and m.logs(view) == b"done\n"
    st = m.describe(view)
    assert (st["job_status"], st["exit_code"]) == ("completed", 0)
    assert st["end_reason"] == ("the container exited 0 (finish_on_exit): the provider's "
                                "worker finished the job")


def test_agent_source_failure_reconciles_nothing(tmp_path: Path, key: WorkerKey) -> None:
    rt, m, _, j = delivered(tmp_path, key)
    a, src = agent(tmp_path, key, [j], m)
    a.poll_jobs(T0)

    def boom() -> list:
        raise JobSourceError("rpc down")

    src.assigned_jobs = boom  # type: ignore[method-assign]
    calls = dict(rt.calls)
    a.poll_jobs(T0 + 10)
    assert rt.calls == calls and container_name(j.job) in rt.containers


def test_agent_keeps_container_of_a_job_missing_from_the_listing(tmp_path: Path,
                                                                 key: WorkerKey) -> None:
    """After a restart, a Running job missing from one listing keeps its container."""
    rt, m, _, j = delivered(tmp_path, key)
    a, _ = agent(tmp_path, key, [j], m)
    a.poll_jobs(T0)
    a.outbox.close()
    m.store.close()
    m2 = manager(tmp_path, key, rt)
    a2, src2 = agent(tmp_path, key, [], m2)
    src2.job_status = lambda job: "running"  # type: ignore[method-assign]
    a2.poll_jobs(T0 + 30)
    assert container_name(j.job) in rt.containers and not rt.removed


# ------------------------------------------------------------------------- real podman


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> RealPodman:
    return real_podman(tmp_path_factory.mktemp("podman"))


def real_job(spec: WorkloadSpec) -> AssignedJob:
    """A Running job of a provider of its own: its manager never removes other tests'
    containers."""
    return AssignedJob(job=os.urandom(32), market=b"\x02" * 32, program_id=b"\x01" * 32,
                       provider=os.urandom(32), gpu_count=1, status="running", started_at=T0,
                       user=USER, workload_hash=spec_hash(spec))


def test_real_podman_lifecycle(tmp_path: Path, key: WorkerKey, real: RealPodman) -> None:
    script = ("trap 'exit 0' TERM; echo \"hello $GREETING\";"
              ' [ "$TOKEN" = s3cret ] && echo token-ok;'
              " while true; do echo tick; sleep 1; done")
    spec = WorkloadSpec(image=real.image, command=("sh", "-c"), args=(script,),
                        env=(("GREETING", "world"),),
                        secret_env=seal_secrets(key.pubkey, {"TOKEN": "s3cret"}))
    j = real_job(spec)
    name = container_name(j.job)

    def mk() -> WorkloadManager:  # its own provider: never removes other tests' containers
        return WorkloadManager(real.runtime, WorkloadStore(tmp_path / "w.sqlite"), key.seed,
                               publish_host="127.0.0.1", attach_gpus=False,
                               provider=j.provider)

    m = mk()
    try:
        m.deliver(j, spec)
        m.reconcile(jobs((j, ("GPU-0",))))
        assert m.wait_for_starts(120)
        assert real.runtime.state(name).status == "running"
        assert real.runtime.list_job_containers()[name] == j.job_b58
        def output() -> bytes | None:
            b = m.logs(j)
            return b if b"token-ok" in b else None

        out = wait_for(output, what="the workload's output")
        assert b"hello world\n" in out and b"s3cret" not in out
        assert m.logs(j, tail=1) in (b"tick\n", b"token-ok\n")
        assert m.describe(j)["state"] == "running"
        stream = m.follow_logs(j, tail=0)
        assert stream is not None
        assert next(iter(stream)) == b"tick\n"
        stream.close()
        started = real.runtime.state(name).started_at
        # A restarted worker finds the container: no second one, not restarted.
        m.store.close()
        m = mk()
        m.reconcile(jobs((j, ("GPU-0",))))
        assert [k for k, v in real.runtime.list_job_containers().items()
                if v == j.job_b58] == [name]
        assert real.runtime.state(name).started_at == started
        # The job leaves Running: the container is stopped and removed, its log kept.
        fin = replace(j, status="finishing", ended_at=T0 + 100)
        m.reconcile(jobs((fin, ("GPU-0",))))
        assert real.runtime.state(name).status == "missing"
        assert b"hello world\n" in m.logs(fin)
        assert m.describe(fin)["state"] == "stopped"
    finally:
        real.runtime.remove(name, timeout_s=0)
        m.store.close()


def test_real_podman_failed_start_is_failed(tmp_path: Path, key: WorkerKey,
                                            real: RealPodman) -> None:
    spec = WorkloadSpec(image="localhost/gpum-does-not-exist:1")
    j = real_job(spec)
    m = WorkloadManager(real.runtime, WorkloadStore(tmp_path / "w.sqlite"), key.seed,
                        attach_gpus=False, provider=j.provider)
    try:
        m.deliver(j, spec)
        m.reconcile(jobs((j, ("GPU-0",))))
        assert m.wait_for_starts(120)
        status = m.describe(j)
        assert status["state"] == "failed" and status["error"]
        assert real.runtime.state(container_name(j.job)).status == "missing"
        ws = m.window_state(j, 0, 2**40, set())
        assert ws.state == WORKLOAD_FAILED
    finally:
        real.runtime.remove(container_name(j.job), timeout_s=0)
        m.store.close()


def test_a_store_from_before_ended_logs_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE workloads(job BLOB PRIMARY KEY, workload_hash BLOB NOT NULL,
            spec BLOB NOT NULL, state TEXT NOT NULL, exit_code INTEGER, error TEXT,
            finish_requested INTEGER NOT NULL DEFAULT 0, delivered_at REAL NOT NULL,
            updated_at REAL NOT NULL, running_at REAL, logs BLOB);
        CREATE TABLE ended(job BLOB PRIMARY KEY, ended_at REAL NOT NULL);
        INSERT INTO meta VALUES('schema', '1');
    """)
    con.execute("INSERT INTO workloads VALUES(?, ?, ?, 'running', NULL, NULL, 0, ?, ?, NULL, "
                "NULL)", (b"\1" * 32, b"\2" * 32, b"{}", T0, T0))
    con.commit()
    con.close()
    store = WorkloadStore(path, clock=Clock())
    rec = store.get(b"\1" * 32)
    assert rec is not None and rec.state == "running" and rec.user is None
    store.mark_ended(b"\1" * 32, "failed", "the provider failed")
    assert store.ended(b"\1" * 32).reason == "the provider failed"
    store.close()
