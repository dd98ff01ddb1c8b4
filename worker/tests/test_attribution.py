"""GPU process attribution off the proof path: a container runtime that hangs or fails never
delays a window's proof, and what such a window claims (``workload_windows``).

The runtime is ``FakeRuntime`` whose ``pids`` blocks (until released) or fails; the manager
looks processes up in the background as ``gpum-worker run`` makes it (``Agent.run`` calls
``attribute_in_background``); the agent is driven by the test's clock."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from agentkit import run_seconds
from fakes import FakeBackend, FakeGpu, FakeRuntime, NoHeads
from gpu_market.proof import HEALTH_FOREIGN_PROCESS, WORKLOAD_EXITED, WORKLOAD_RUNNING
from gpu_market.workload import WorkloadSpec, canonical_bytes, spec_hash
from gpum_worker.agent import Agent
from gpum_worker.errors import ContainerRuntimeError
from gpum_worker.jobs import AssignedJob, StaticJobSource
from gpum_worker.keys import WorkerKey
from gpum_worker.limits import MachineResources
from gpum_worker.outbox import Outbox
from gpum_worker.runtime import container_name
from gpum_worker.workload_store import WorkloadStore
from gpum_worker.workload_windows import ATTRIBUTION_DEADLINE_S, LOOKUP_RETRY_S
from gpum_worker.workloads import WorkloadManager
from runtimetestkit import wait_for
from solders.keypair import Keypair

T0 = 1_700_000_000
W = 10
MACHINE = MachineResources(memory_mib=65536, cpus=16, gpu_count=8, scratch_mib=1 << 20)
USER = bytes(Keypair().pubkey())
SPEC = WorkloadSpec(image="docker.io/library/busybox:1.36", command=("sleep", "1000"))
FAST_S = 0.5
"""A step that reads memory only ends well within this, on any test machine."""


class HangingRuntime(FakeRuntime):
    """``pids`` of the containers in ``hang`` blocks until ``release`` is set (a hung
    ``podman top``), or fails with ``fail_pids``; ``entered`` counts calls that began."""

    def __init__(self) -> None:
        super().__init__()
        self.hang: set[str] = set()
        self.release = threading.Event()
        self.entered: list[str] = []
        self.fail_pids: str | None = None

    def pids(self, name: str) -> frozenset[int]:
        self.entered.append(name)
        if self.fail_pids is not None:
            raise ContainerRuntimeError(self.fail_pids)
        if name in self.hang:
            self.release.wait(30)
        return super().pids(name)


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def wjob(n: int) -> AssignedJob:
    return AssignedJob(job=bytes([n]) * 32, market=b"\x02" * 32, program_id=b"\x01" * 32,
                       provider=b"\x03" * 32, gpu_count=1, status="running", started_at=T0,
                       user=USER, workload_hash=spec_hash(SPEC))


def manager(tmp_path: Path, key: WorkerKey, rt: FakeRuntime) -> WorkloadManager:
    clock = Clock()
    m = WorkloadManager(rt, WorkloadStore(tmp_path / "w.sqlite", clock=clock), key.seed,
                        publish_host="127.0.0.1", clock=clock, host_boot_time=lambda: 0.0,
                        process_alive=lambda pid: True, background_starts=False,
                        machine=MACHINE)
    m.attribute_in_background()
    return m


def running(tmp_path: Path, key: WorkerKey, n_jobs: int = 1
            ) -> tuple[HangingRuntime, WorkloadManager, list[AssignedJob]]:
    """Jobs 1..n with their containers running since T0."""
    rt = HangingRuntime()
    m = manager(tmp_path, key, rt)
    js = [wjob(i + 1) for i in range(n_jobs)]
    for j in js:
        m.store.put_spec(j.job, j.workload_hash, canonical_bytes(SPEC), j.user)
    m.reconcile({j.job: (j, (f"GPU-{i}",)) for i, j in enumerate(js)}, now=T0)
    return rt, m, js


def timed(fn, *args):  # type: ignore[no-untyped-def]
    t = time.monotonic()
    out = fn(*args)
    return out, time.monotonic() - t


@pytest.fixture
def release():  # type: ignore[no-untyped-def]
    box: list[HangingRuntime] = []
    yield box.append
    for rt in box:  # never leave a lookup thread blocked after the test
        rt.release.set()


def test_a_hung_lookup_blocks_neither_observing_nor_the_window(tmp_path: Path, key: WorkerKey,
                                                                release) -> None:
    rt, m, (j,) = running(tmp_path, key)
    release(rt)
    name = container_name(j.job)
    inside = next(iter(rt.containers[name].pids))
    rt.hang.add(name)
    for t in range(W):  # the sampler, once a second: one lookup under way, never waited for
        _, took = timed(m.observe_processes, j, {inside, 777}, T0 + t)
        assert took < FAST_S
    wait_for(lambda: rt.entered, what="the lookup")
    assert rt.entered == [name]
    acc, took = timed(m.window_account, j, T0, T0 + W, {inside, 777})
    assert took < FAST_S
    # Unanswered for longer than the deadline: unattributed, neither the job's nor foreign.
    assert acc.unattributed == 2 and acc.workload.state == WORKLOAD_RUNNING
    assert (acc.workload.job_processes, acc.workload.foreign_processes) == (0, 0)
    assert acc.workload.billable
    # One first seen less than the deadline before the window's end is not counted yet.
    m.observe_processes(j, {999}, T0 + W - ATTRIBUTION_DEADLINE_S / 2)
    assert m.window_account(j, T0, T0 + W, {inside, 777, 999}).unattributed == 2
    # The runtime answers: the next window has them attributed.
    rt.release.set()
    wait_for(lambda: m.window_state(j, T0 + W, T0 + 2 * W, {inside, 777}).job_processes,
             what="the attribution")
    ws = m.window_state(j, T0 + W, T0 + 2 * W, {inside, 777, 999})
    assert (ws.job_processes, ws.foreign_processes) == (1, 2)
    assert m.window_account(j, T0 + W, T0 + 2 * W, {inside}).unattributed == 0


def test_one_jobs_hung_lookup_does_not_hold_back_anothers(tmp_path: Path, key: WorkerKey,
                                                          release) -> None:
    rt, m, (j1, j2) = running(tmp_path, key, 2)
    release(rt)
    rt.hang.add(container_name(j1.job))
    inside2 = next(iter(rt.containers[container_name(j2.job)].pids))
    m.observe_processes(j1, {4001}, T0)
    wait_for(lambda: rt.entered, what="job 1's lookup")
    m.observe_processes(j2, {inside2}, T0)
    wait_for(lambda: m.window_state(j2, T0, T0 + W, {inside2}).job_processes,
             what="job 2 attributed while job 1's lookup hangs")
    assert m.window_account(j1, T0, T0 + W, {4001}).unattributed == 1


def test_a_failing_runtime_leaves_processes_unattributed_not_foreign(
        tmp_path: Path, key: WorkerKey, caplog: pytest.LogCaptureFixture) -> None:
    rt, m, (j,) = running(tmp_path, key)
    rt.fail_pids = "podman top: cannot connect"
    caplog.set_level(logging.INFO, "gpum_worker.workloads")
    for t in range(W):
        m.observe_processes(j, {4242}, T0 + t)
        wait_for(lambda: not any(th.name.startswith("attribution-")
                                 for th in threading.enumerate()), what="the lookup's end")
    # Asked once, then again only after the retry interval.
    assert len(rt.entered) == 1 + (W - 1) // int(LOOKUP_RETRY_S)
    acc = m.window_account(j, T0, T0 + W, {4242})
    assert acc.unattributed == 1 and acc.workload.foreign_processes == 0
    warned = [r for r in caplog.records if "cannot list its container's processes" in r.message]
    assert len(warned) == 1  # once per failing streak
    rt.fail_pids = None
    m.observe_processes(j, {4242}, T0 + 2 * W)
    wait_for(lambda: m.window_state(j, T0 + 2 * W, T0 + 3 * W, {4242}).foreign_processes,
             what="the process found foreign once the runtime answers")
    assert any("can be listed again" in r.message for r in caplog.records)


def agent(tmp_path: Path, key: WorkerKey, m: WorkloadManager, j: AssignedJob,
          pid: int) -> Agent:
    gpus = [FakeGpu("GPU-0", processes=[(pid, 900 * 2**20)])]
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey, ["http://v"])
    a = Agent(backend=FakeBackend(gpus), job_source=StaticJobSource([j], clock=lambda: T0),
              outbox=ob, key=key, window_seconds=W, heads=NoHeads(), workloads=m)
    a.start()
    a.poll_jobs(T0)
    return a


def test_windows_are_proven_on_time_while_the_runtime_hangs(tmp_path: Path, key: WorkerKey,
                                                            release) -> None:
    rt, m, (j,) = running(tmp_path, key)
    release(rt)
    rt.hang.add(container_name(j.job))
    a = agent(tmp_path, key, m, j, 4242)
    t = time.monotonic()
    proofs = run_seconds(a, T0, T0 + 3 * W)
    assert time.monotonic() - t < 3 * FAST_S  # 30 samples, 3 proofs: nothing waited
    assert [p.seq for p in proofs] == [1, 2, 3]
    for p in proofs:  # the container was seen running throughout: billable, not foreign
        assert p.workload.state == WORKLOAD_RUNNING, p.workload
        assert p.billable_seconds == W and not p.health_flags & HEALTH_FOREIGN_PROCESS
        assert (p.workload.job_processes, p.workload.foreign_processes) == (0, 0)
    assert len(rt.entered) == 1  # one lookup, still hanging


def test_unattributed_processes_bill_nothing_when_the_container_was_not_running(
        tmp_path: Path, key: WorkerKey, release) -> None:
    rt, m, (j,) = running(tmp_path, key)
    release(rt)
    name = container_name(j.job)
    rt.hang.add(name)
    a = agent(tmp_path, key, m, j, 4242)
    (p1,) = run_seconds(a, T0, T0 + W)
    assert p1.billable_seconds == W
    rt.exit(name, 0)  # it exited; some process still runs on its GPU, and nobody can say whose
    m.reconcile({j.job: (j, ("GPU-0",))}, now=T0 + W)
    (p2,) = run_seconds(a, T0 + W, T0 + 2 * W)
    assert p2.workload.state == WORKLOAD_EXITED and p2.billable_seconds == 0
    assert p2.workload.foreign_processes == 0 and not p2.health_flags & HEALTH_FOREIGN_PROCESS
