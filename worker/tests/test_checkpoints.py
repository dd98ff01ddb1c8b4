"""Workload checkpoints on the worker (``gpum_worker.checkpoints``): real podman containers and
a real S3 server (SeaweedFS, ``tests/s3server.py``). The directory is synced while the
container runs and when it stops, a later job's container starts with it restored, a broken
store never stops the job, and the store's keys never leave the worker's memory."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from gpu_market.checkpoint import (
    CheckpointConfig,
    CheckpointStore,
    Credentials,
    Manifest,
    seal_checkpoint,
)
from gpu_market.checkpoint_manifest import parse_manifest
from gpu_market.proof import WORKLOAD_FAILED, WORKLOAD_RUNNING
from gpu_market.workload import WorkloadSpec, spec_hash
from gpum_worker.jobs import AssignedJob
from gpum_worker.keys import WorkerKey, b58encode
from gpum_worker.limits import MachineResources
from gpum_worker.runtime import container_name
from gpum_worker.runtime_disk import mount_points
from gpum_worker.workload_store import WorkloadStore
from gpum_worker.workloads import MAX_START_FAILURES, WorkloadManager
from runtimetestkit import RealPodman, real_podman, wait_for
from s3server import start_s3_server

T0 = 1_700_000_000
MACHINE = MachineResources(memory_mib=4096, cpus=2, gpu_count=1, scratch_mib=1024, pids=2000)
COUNTER = ("i=0; while true; do i=$((i+1)); echo $i > /checkpoint/.n; "
           "mv /checkpoint/.n /checkpoint/state; sleep 1; done")  # the file: whole or absent


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> RealPodman:
    return real_podman(tmp_path_factory.mktemp("podman"))


class Run:
    """Jobs with a checkpoint run by a real WorkloadManager of a provider of its own."""

    def __init__(self, tmp_path: Path, key: WorkerKey, real: RealPodman, s3, *,
                 store: str | None = None, creds: Credentials | None = None,
                 clock=time.time, **cfg: object) -> None:
        self.real, self.s3, self.key = real, s3, key
        self.provider = os.urandom(32)
        tmp_path.mkdir(parents=True, exist_ok=True)
        cfg = {"interval_s": 10, "max_mib": 64, **cfg}
        self.config = CheckpointConfig(store=store or s3.store_url(), endpoint=s3.endpoint,
                                       region=s3.region, **cfg)  # type: ignore[arg-type]
        self.creds = creds or Credentials(s3.access_key_id, s3.secret_access_key)
        self.m = WorkloadManager(real.runtime, WorkloadStore(tmp_path / "w.sqlite"), key.seed,
                                 "127.0.0.1", clock, attach_gpus=False,
                                 machine=MACHINE, background_starts=False,
                                 provider=self.provider)
        self.jobs: list[AssignedJob] = []

    def spec(self, script: str) -> WorkloadSpec:
        return WorkloadSpec(image=self.real.image, command=("sh", "-c"), args=(script,),
                            checkpoint=seal_checkpoint(self.config, self.creds, self.key.pubkey))

    def job(self, script: str) -> AssignedJob:
        spec = self.spec(script)
        j = AssignedJob(job=os.urandom(32), market=b"\x02" * 32, program_id=b"\x01" * 32,
                        provider=self.provider, gpu_count=1, status="running", started_at=T0,
                        user=bytes(32), workload_hash=spec_hash(spec))
        self.m.deliver(j, spec)
        self.jobs.append(j)
        return j

    def reconcile(self, *running: AssignedJob, now: float | None = None) -> None:
        self.m.reconcile({j.job: (j, ("GPU-0",)) for j in running}, now=now)

    def state(self, j: AssignedJob) -> str:
        return self.real.runtime.state(container_name(j.job)).status

    def store(self) -> CheckpointStore:
        return CheckpointStore(self.config, Credentials(self.s3.access_key_id,
                                                        self.s3.secret_access_key))

    def latest_state(self) -> tuple[Manifest, bytes] | None:
        """The newest checkpoint in the store and its ``state`` file (restored to a tmp dir)."""
        store = self.store()
        m = store.latest()
        if m is None or "state" not in {f.path for f in m.files}:
            return None
        out = Path(self.m.checkpoints.root or "/tmp") / f"check-{os.urandom(4).hex()}"
        os.makedirs(out.parent, exist_ok=True)
        store.restore(m, out)
        data = (out / "state").read_bytes()
        subprocess.run(["rm", "-rf", str(out)], check=True)
        return m, data

    def manifest(self, seq: int) -> Manifest:
        """Manifest ``seq`` as the store holds it."""
        return parse_manifest(self.s3.client().get_object(
            Bucket=self.s3.bucket, Key=f"{self.config.prefix}/manifests/{seq:016d}.json"
        )["Body"].read())

    def inspect(self, j: AssignedJob) -> str:
        return subprocess.run(["podman", "container", "inspect", container_name(j.job)],
                              capture_output=True, check=True, text=True,
                              env={**os.environ, **self.real.extra_env}).stdout

    def close(self) -> None:
        self.m.checkpoints.close()
        for j in self.jobs:
            self.real.runtime.remove(container_name(j.job), timeout_s=0)
        vols = self.m.checkpoints.volumes
        if vols is not None:
            for name in vols.names():
                vols.release(name)
        self.m.store.close()


@pytest.fixture
def run(tmp_path: Path, key: WorkerKey, real: RealPodman, s3_server) -> Iterator[Run]:
    r = Run(tmp_path, key, real, s3_server)
    try:
        yield r
    finally:
        r.close()


def test_the_directory_is_synced_while_running_and_restored_by_the_next_job(
        run: Run) -> None:
    a = run.job(COUNTER)
    run.reconcile(a)
    assert run.state(a) == "running"
    status = run.m.describe(a)["checkpoint"]
    assert status["restored_from"] is None and status["last"] is None and not status["error"]
    assert status["dir"] == "/checkpoint" and status["store"] == run.config.store
    # The first sync comes by itself within the interval (10 s here).
    first = wait_for(run.latest_state, timeout_s=30, interval_s=1, what="a periodic sync")
    m, value = first
    assert int(value) >= 1
    last = wait_for(lambda: run.m.describe(a)["checkpoint"]["last"], what="the status")
    assert last["seq"] >= m.seq and last["bytes"] > 0
    # Every window's proof names the last complete checkpoint before its end.
    ws = run.m.window_state(a, T0, int(time.time()) + 1, set())
    assert ws.state == WORKLOAD_RUNNING and ws.checkpoint is not None
    assert ws.checkpoint.seq == last["seq"] and ws.checkpoint.manifest_digest.hex() == \
        last["digest"]
    assert run.m.window_state(a, T0, T0 + 10, set()).checkpoint is None  # long before
    # The job leaves Running: container removed, one last sync, the volume released.
    time.sleep(2)
    left = int(time.time())
    run.reconcile()
    assert run.state(a) == "missing"
    assert run.m.checkpoints.wait_idle(60)
    final, final_value = run.latest_state()  # type: ignore[misc]
    assert final.seq > m.seq and int(final_value) > int(value)
    assert final.created_at >= left  # the last sync is marked by a checkpoint after the end
    assert not os.path.exists(run.m.checkpoints.data_dir(a.job))
    # A new job (on any provider with the same store) starts where it left off.
    b = run.job("cat /checkpoint/state; ls /checkpoint; echo done")
    run.reconcile(b)
    wait_for(lambda: run.state(b) == "exited", timeout_s=60, what="the second container")
    out = run.m.logs(b).splitlines()
    assert out[0] == final_value.strip() and b"state" in out[1:] and out[-1] == b"done"
    status = run.m.describe(b)["checkpoint"]
    assert status["restored_from"] == {"seq": final.seq, "digest": final.digest.hex()}
    # Before it started, the restored checkpoint was claimed: a child naming job b.
    claim = run.manifest(final.seq + 1)
    assert (claim.parent, claim.job, claim.files) == (final.digest, b58encode(b.job),
                                                      final.files)
    # Its container exited: one more sync, a new checkpoint of the same files.
    run.reconcile(b)
    wait_for(lambda: run.m.describe(b)["checkpoint"]["last"]["seq"] == claim.seq + 1,
             timeout_s=30, what="the sync after the container exited")
    after_exit, exit_value = run.latest_state()  # type: ignore[misc]
    assert after_exit.files == final.files and exit_value == final_value
    assert after_exit.parent == claim.digest


def test_a_broken_store_mid_job_keeps_the_container_running(
        tmp_path: Path, key: WorkerKey, real: RealPodman) -> None:
    own = start_s3_server(tmp_path / "s3")  # a store of its own, to stop and start again
    run = Run(tmp_path / "w", key, real, own)
    try:
        a = run.job(COUNTER)
        run.reconcile(a)
        run.m.checkpoints.sync_now(a.job)
        wait_for(run.latest_state, timeout_s=30, interval_s=0.5, what="the first sync")
        own.stop(0)
        run.m.checkpoints.sync_now(a.job)
        status = wait_for(lambda: (s := run.m.describe(a))["checkpoint"]["error"] and s,
                          timeout_s=60, what="the sync error in the status")
        assert "cannot reach the checkpoint store" in status["checkpoint"]["error"]
        assert "the job keeps running" in status["checkpoint"]["error"]
        assert status["checkpoint"]["error_since"] <= time.time()
        assert status["state"] == "running" and status["error"] is None
        run.reconcile(a)
        assert run.state(a) == "running"
        assert run.m.window_state(a, T0, 2**40, set()).state == WORKLOAD_RUNNING  # billable
        # The store comes back: the next sync succeeds and the error is gone.
        own.restart()
        run.m.checkpoints.sync_now(a.job)
        wait_for(lambda: run.m.describe(a)["checkpoint"]["error"] is None, timeout_s=60,
                 what="the error to clear")
        assert run.latest_state() is not None
    finally:
        run.close()
        own.stop(0)


def test_a_directory_over_its_limit_is_reported_never_fills_the_disk(run: Run) -> None:
    run.config = replace(run.config, max_mib=1)
    a = run.job("dd if=/dev/zero of=/checkpoint/big bs=1024 count=1500 2>&1; "
                "dd if=/dev/zero of=/checkpoint/huge bs=1M count=200 2>&1; echo wrote; "
                "sleep 1000")
    run.reconcile(a)
    wait_for(lambda: b"wrote" in run.m.logs(a), timeout_s=30, what="the writes")
    assert b"No space left on device" in run.m.logs(a)  # the volume's size, not the host's
    run.m.checkpoints.sync_now(a.job)
    status = wait_for(lambda: (s := run.m.describe(a))["checkpoint"]["error"] and s,
                      timeout_s=30, what="the size error")
    assert "over the spec's limit of 1 MiB" in status["checkpoint"]["error"]
    assert status["state"] == "running" and run.store().latest() is None


def test_a_failed_restore_fails_the_start_and_never_runs_from_scratch(
        tmp_path: Path, key: WorkerKey, real: RealPodman, s3_server) -> None:
    clock = [float(T0)]
    run = Run(tmp_path, key, real, s3_server, clock=lambda: clock[0],
              creds=Credentials(s3_server.access_key_id, "wrong-secret-key"))
    finished: list[bytes] = []
    try:
        a = run.job("echo started-from-scratch; sleep 1000")
        for i in range(MAX_START_FAILURES + 1):
            clock[0] = T0 + i * 1000.0
            run.m.reconcile({a.job: (a, ("GPU-0",))}, now=clock[0],
                            finish=lambda j: finished.append(j.job))
        status = run.m.describe(a)
        assert run.state(a) == "missing"
        assert status["state"] == "failed"
        assert "restoring the checkpoint" in status["error"]
        assert "SignatureDoesNotMatch" in status["checkpoint"]["error"]
        assert run.m.window_state(a, T0, 2**40, set()).state == WORKLOAD_FAILED
        assert finished == [a.job]  # given up like any start that keeps failing
    finally:
        run.close()


def test_the_store_keys_never_reach_logs_argv_env_or_disk(
        run: Run, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    secret, key_id = run.s3.secret_access_key, run.s3.access_key_id
    with caplog.at_level(logging.DEBUG):
        a = run.job("echo hi > /checkpoint/x; env; sleep 1000")
        run.reconcile(a)
        run.m.checkpoints.sync_now(a.job)
        wait_for(lambda: run.m.describe(a)["checkpoint"]["last"], timeout_s=30,
                 what="a sync")
        bad = Run(tmp_path / "bad", run.key, run.real, run.s3,
                  creds=Credentials(key_id, secret + "x"))
        try:
            b = bad.job("sleep 1")
            bad.reconcile(b)  # a refused restore: its error is logged
            assert "SignatureDoesNotMatch" in bad.m.describe(b)["error"]
        finally:
            bad.close()
        inspect = run.inspect(a)
        logs = run.m.logs(a)
        api = json.dumps(run.m.describe(a))
    for text in (caplog.text, inspect, logs.decode(), api):
        assert secret not in text and key_id not in text
    assert "CreateCommand" in inspect  # podman records the command line it was given
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".img"]
    assert any(p.name == "w.sqlite" for p in files) and any(p.name == "x" for p in files)
    for path in files:  # the worker's store, the checkpoint volume's files
        data = path.read_bytes()
        assert secret.encode() not in data and key_id.encode() not in data, path
    assert b58encode(a.job) in caplog.text  # the log did record the job's checkpoint work


def _mounted(path: str) -> bool:
    with open("/proc/self/mountinfo") as f:
        return path in mount_points(f.read())


def test_a_worker_back_after_its_job_moved_on_never_overwrites_the_successor(
        tmp_path: Path, key: WorkerKey, real: RealPodman, s3_server,
        caplog: pytest.LogCaptureFixture) -> None:
    """Job a syncs on provider P1, whose worker dies (its threads gone, its container removed,
    the volume left mounted); the successor b on P2 restores a's newest checkpoint. P1's worker
    comes back: a is not live, so it tries a's last sync of its old directory: refused (the
    store's newest is b's), reported in a's status and the log, and the volume unmounted."""
    p1 = Run(tmp_path / "p1", key, real, s3_server)
    p2 = Run(tmp_path / "p2", key, real, s3_server)
    p2.config = p1.config  # one store for the managed job
    back: WorkloadManager | None = None
    try:
        a = p1.job(COUNTER)
        p1.reconcile(a)
        p1.m.checkpoints.sync_now(a.job)
        synced, _ = wait_for(p1.latest_state, timeout_s=30, interval_s=0.5, what="a's sync")
        assert synced.job == b58encode(a.job)
        volume = os.path.dirname(p1.m.checkpoints.data_dir(a.job))
        p1.m.checkpoints.close()  # P1's worker killed: no thread of it runs any more
        p1.real.runtime.remove(container_name(a.job), timeout_s=0)
        p1.m.store.close()
        time.sleep(2)  # the volume holds more than a's newest checkpoint
        assert _mounted(volume)
        a_last = p1.m.checkpoints._last_manifest(a.job)
        assert a_last is not None and a_last.job == b58encode(a.job)
        b = p2.job("cat /checkpoint/state; echo on > /checkpoint/b; sleep 1000")
        p2.reconcile(b)
        assert p2.state(b) == "running"
        claim = p2.store().latest()
        assert claim is not None and claim.job == b58encode(b.job)
        assert claim.parent == a_last.digest and claim.files == a_last.files
        manifests = s3_server.keys(f"{p1.config.prefix}/manifests/")
        with caplog.at_level(logging.WARNING, logger="gpum_worker.checkpoints"):
            back = WorkloadManager(real.runtime, WorkloadStore(tmp_path / "p1" / "w.sqlite"),
                                   key.seed, "127.0.0.1", attach_gpus=False, machine=MACHINE,
                                   background_starts=False, provider=p1.provider)
            back.reconcile({})  # its first poll: a is not live
            assert back.checkpoints.wait_idle(60)
        why = (f"checkpoint: the store moved on (newer checkpoint by job {b58encode(b.job)}); "
               "not syncing this job any more")
        assert back.describe(a)["checkpoint"]["error"] == why
        assert why in caplog.text
        assert p2.store().latest() == claim  # the successor's is still the newest
        assert s3_server.keys(f"{p1.config.prefix}/manifests/") == manifests
        wait_for(lambda: not _mounted(volume), timeout_s=30, what="a's volume unmounted")
        assert not os.path.exists(volume + ".img")
        # The successor syncs on, from its claim.
        p2.m.checkpoints.sync_now(b.job)
        p2.reconcile(b)
        wait_for(lambda: p2.m.describe(b)["checkpoint"]["last"]["seq"] > claim.seq,
                 timeout_s=30, what="b's next sync")
        assert p2.m.describe(b)["checkpoint"]["error"] is None
    finally:
        if back is not None:
            back.checkpoints.close()
            back.store.close()
        p2.close()
        p1.close()
