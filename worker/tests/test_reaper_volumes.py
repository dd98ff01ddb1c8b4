"""The reaper releases the disk volumes a dead worker left (``reaper``, step 4): real
loop-mounted ext4 checkpoint volumes (``runtime_disk.ScratchVolumes``, root), the real SQLite
store, a fake runtime and a fake chain reader. Mounts are checked in /proc/self/mountinfo."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeRuntime
from gpu_market.workload import WorkloadSpec, canonical_bytes, spec_hash
from gpum_worker.jobs import AssignedJob
from gpum_worker.keys import b58encode
from gpum_worker.reaper import Reaper, ReaperLock, ReaperPaths, hold_worker_lock, run_reaper
from gpum_worker.runtime import JOB_LABEL, container_name
from gpum_worker.runtime_disk import ScratchVolumes, mount_points
from gpum_worker.workload_end import PROVIDER_LABEL
from gpum_worker.workload_store import WorkloadStore

PROVIDER = b"\x03" * 32
SPEC = WorkloadSpec(image="localhost/x:1", args=("sh", "-c", "sleep 1000"))


def _job(n: int, status: str = "running") -> AssignedJob:
    return AssignedJob(job=bytes([n]) * 32, market=b"\x02" * 32, program_id=b"\x01" * 32,
                       provider=PROVIDER, gpu_count=1, status=status, started_at=1,
                       user=b"\x05" * 32, workload_hash=spec_hash(SPEC))


class Chain:
    """A ``JobReader`` over ``jobs``; ``reads`` records what each pass asked."""

    def __init__(self) -> None:
        self.jobs: dict[bytes, AssignedJob | str | None] = {}
        self.reads: list[tuple[bytes, ...]] = []

    def read_jobs(self, keys: Any) -> dict[bytes, AssignedJob | str | None]:
        self.reads.append(tuple(keys))
        return {k: self.jobs.get(k) for k in keys}


def _mounted(path: str) -> bool:
    with open("/proc/self/mountinfo") as f:
        return path in mount_points(f.read())


class World:
    """A dead worker's directory: its store, checkpoint volumes mounted, no worker running."""

    def __init__(self, tmp_path: Path) -> None:
        self.paths = ReaperPaths.of(tmp_path / "outbox.sqlite")
        self.store = WorkloadStore(self.paths.store)
        self.volumes = ScratchVolumes(self.paths.checkpoints)
        self.rt = FakeRuntime()
        self.chain = Chain()
        self.reaper = Reaper(self.rt, self.store, self.chain, PROVIDER, paths=self.paths)

    def volume(self, j: AssignedJob, *, known: bool = True) -> str:
        """``j``'s checkpoint volume, mounted, holding a file; its spec stored when
        ``known`` (else it is another worker's volume)."""
        if known:
            self.store.put_spec(j.job, j.workload_hash, canonical_bytes(SPEC), j.user)
        self.chain.jobs.setdefault(j.job, j)
        path = self.volumes.ensure(b58encode(j.job), 4)
        Path(path, "data").mkdir()
        Path(path, "data", "state").write_text("42")
        return path

    def close(self) -> None:
        for name in self.volumes.names():
            self.volumes.release(name)
        self.store.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    try:
        yield w
    finally:
        w.close()


def test_the_volume_of_a_job_that_ended_while_no_worker_ran_is_unmounted(world: World) -> None:
    a = _job(1)
    path = world.volume(a)
    # Running on chain: the worker may come back and go on with it.
    assert world.reaper.reap().volumes == 1 and _mounted(path)
    assert world.rt.calls["prune"] == 1  # no worker: /scratch volumes of gone containers go
    world.chain.jobs[a.job] = replace(a, status="completed")
    # A worker runs: the volume is the worker's to sync and release.
    worker = hold_worker_lock(world.paths.worker_lock)
    try:
        done = world.reaper.reap()
        assert (done.volumes, done.unmounted) == (1, ()) and _mounted(path)
        assert world.rt.calls["prune"] == 1
    finally:
        os.close(worker)
    # No worker: unmounted, its image kept for the next worker's last sync of it.
    done = world.reaper.reap()
    assert (done.volumes, done.unmounted) == (0, (b58encode(a.job),))
    assert not _mounted(path) and os.path.exists(path + ".img")
    assert world.reaper.reap().unmounted == ()  # nothing more to do
    world.volumes.ensure(b58encode(a.job), 4)  # the worker mounts it again: the data is there
    assert Path(path, "data", "state").read_text() == "42"


def test_a_volume_whose_job_keeps_a_container_or_is_not_this_workers_stays(
        world: World) -> None:
    kept = _job(1, "completed")
    path = world.volume(kept)
    world.rt.add(container_name(kept.job), ((JOB_LABEL, b58encode(kept.job)),
                                            (PROVIDER_LABEL, b58encode(PROVIDER))))
    world.rt.fail["remove"] = "busy"  # its container cannot be removed this pass
    other = _job(2, "completed")
    other_path = world.volume(other, known=False)  # another database's worker, same folder
    done = world.reaper.reap()
    assert done.unmounted == () and _mounted(path) and _mounted(other_path)
    assert other.job not in world.chain.reads[-1]
    del world.rt.fail["remove"]
    done = world.reaper.reap()  # the container is removed: then its volume goes too
    assert done.removed == (container_name(kept.job),)
    assert done.unmounted == (b58encode(kept.job),) and not _mounted(path)
    assert _mounted(other_path)


def test_a_worker_started_reaper_waits_for_a_mounted_volume_before_it_exits(
        world: World) -> None:
    """No worker, no container, but the volume of a Running job mounted: the reaper stays
    until the job ends, unmounts the volume, then exits as idle."""
    a = _job(1)
    path = world.volume(a)
    lock = ReaperLock(world.paths.lock)
    assert lock.acquire()
    out: dict[str, str] = {}
    t = threading.Thread(target=lambda: out.setdefault("why", run_reaper(
        world.reaper, world.paths, lock, 0.02, threading.Event(), exit_when_idle=True)))
    t.start()
    try:
        time.sleep(0.5)
        assert t.is_alive() and _mounted(path)
        world.chain.jobs[a.job] = "closed"
        t.join(10)
        assert not t.is_alive()
        assert out["why"] == "no worker runs and no container of this provider is left"
        assert not _mounted(path)
    finally:
        world.chain.jobs[a.job] = "closed"
        t.join(10)
        lock.release()
