"""The provider's machine stays the provider's: a user's container cannot exhaust its
memory, processes, disk or the worker's log reads, and an image that cannot run never books
GPUs nor bills. Pure limit policy first, then attacks run in real podman containers."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from gpu_market.proof import WORKLOAD_FAILED
from gpu_market.workload import WorkloadSpec, spec_hash
from gpum_worker.errors import ConfigError, ContainerRuntimeError
from gpum_worker.jobs import AssignedJob
from gpum_worker.keys import WorkerKey
from gpum_worker.limits import (
    CONTAINER_OOM_SCORE_ADJ,
    DEFAULT_SHM_MIB,
    LOG_MAX_MIB,
    MIN_PIDS,
    WORKER_OOM_SCORE_ADJ,
    JobLimits,
    LimitsError,
    MachineResources,
    job_limits,
    machine_from_host,
)
from gpum_worker.runtime import container_name
from gpum_worker.runtime_argv import check_image
from gpum_worker.runtime_disk import ScratchVolumes, mount_points, scratch_image_mib
from gpum_worker.runtime_logs import LogTail, read_capped
from gpum_worker.workload_store import WorkloadStore
from gpum_worker.workloads import MAX_START_FAILURES, RETRY_BASE_S, WorkloadManager
from runtimetestkit import RealPodman, real_podman, wait_for
from solders.keypair import Keypair

MIB = 1 << 20
RETRY_CAP = 4 * RETRY_BASE_S
USER = bytes(Keypair().pubkey())
T0 = 1_700_000_000

# ------------------------------------------------------------------------------ the policy


def test_limits_are_the_jobs_gpu_share_of_the_machine_less_the_headroom() -> None:
    m = MachineResources(memory_mib=1024 * 1024, cpus=128, gpu_count=8,
                         scratch_mib=8 * 1024 * 1024, pids=80_000)
    assert m.reserved_memory_mib == 16 * 1024 and m.reserved_cpus == 1.0
    one = job_limits(m, 1)
    assert one == JobLimits(memory_mib=(1024 - 16) * 1024 // 8, cpus=15.87, pids=10_000,
                            shm_mib=DEFAULT_SHM_MIB, scratch_mib=None)
    assert one.log_max_mib == LOG_MAX_MIB and one.oom_score_adj == CONTAINER_OOM_SCORE_ADJ
    four = job_limits(m, 4, shm_mib=32 * 1024, scratch_mib=4 * 1024 * 1024)
    assert four.memory_mib == 4 * one.memory_mib and four.pids == 40_000
    assert (four.shm_mib, four.scratch_mib) == (32 * 1024, 4 * 1024 * 1024)
    # All jobs together never get more than the machine less the headroom.
    assert 8 * one.memory_mib <= m.memory_mib - m.reserved_memory_mib
    assert 8 * one.cpus <= m.cpus - m.reserved_cpus


@pytest.mark.parametrize("memory, reserved", [
    (512, 256), (4096, 1024), (64 * 1024, 6553), (2 * 1024 * 1024, 16 * 1024)])
def test_memory_headroom(memory: int, reserved: int) -> None:
    m = MachineResources(memory_mib=memory, cpus=2, gpu_count=1)
    assert m.reserved_memory_mib == reserved


def test_small_machines_keep_a_floor_and_a_headroom() -> None:
    m = MachineResources(memory_mib=512, cpus=1, gpu_count=4, pids=100)
    lim = job_limits(m, 1, shm_mib=1)
    assert lim.memory_mib == (512 - 256) // 4 and lim.cpus == 0.18 and lim.pids == MIN_PIDS


@pytest.mark.parametrize("kw, needle", [
    ({"gpu_count": 3}, "offers 2"),
    ({"gpu_count": 0}, "at least one GPU"),
    ({"shm_mib": 1_048_576}, "shm_size_mib 1048576 is more than the job's memory"),
    ({"scratch_mib": 16_777_216}, "scratch_mib 16777216 is more than"),
])
def test_asking_more_than_the_share_is_refused_with_the_most_allowed(kw: dict,
                                                                   needle: str) -> None:
    m = MachineResources(memory_mib=8192, cpus=4, gpu_count=2, scratch_mib=1000)
    args = {"gpu_count": 1, **kw}
    n = args.pop("gpu_count")
    with pytest.raises(LimitsError, match=needle):
        job_limits(m, n, **args)


def test_machine_values_are_checked() -> None:
    with pytest.raises(LimitsError, match="gpu_count"):
        MachineResources(memory_mib=1024, cpus=1, gpu_count=0)
    with pytest.raises(LimitsError, match="cpus"):
        MachineResources(memory_mib=1024, cpus=0, gpu_count=1)


def test_the_provider_declares_at_most_the_host(tmp_path: Path) -> None:
    from gpum_worker.config import resolve

    cfg = resolve({"workload": {"memory_mib": 1024, "cpus": 1.5, "scratch_mib": 100}}, {}, {})
    assert (cfg.memory_mib, cfg.cpus, cfg.scratch_mib) == (1024, 1.5, 100)
    m = machine_from_host(4, tmp_path, memory_mib=cfg.memory_mib, cpus=cfg.cpus,
                          scratch_mib=cfg.scratch_mib)
    assert (m.memory_mib, m.cpus, m.scratch_mib, m.gpu_count) == (1024, 1.5, 100, 4)
    host = machine_from_host(4, tmp_path)
    big = machine_from_host(4, tmp_path, memory_mib=1 << 40, cpus=1e6, scratch_mib=1 << 40)
    assert (big.memory_mib, big.cpus, big.scratch_mib) == (host.memory_mib, host.cpus,
                                                           host.scratch_mib)
    with pytest.raises(ConfigError, match="cpus must be positive"):
        resolve({"workload": {"cpus": 0}}, {}, {})


def test_log_tail_keeps_the_end_and_cuts_long_lines() -> None:
    t = LogTail(max_bytes=100, max_line_bytes=10)
    t.feed(b"short\n" + b"x" * 25)
    t.feed(b"y" * 1000 + b"\nend\n")
    assert t.value() == b"short\n" + b"x" * 10 + LogTail.CUT_MARK + b"\nend\n"
    t = LogTail(max_bytes=50, max_line_bytes=1000)
    for i in range(1000):
        t.feed(f"line {i}\n".encode())
    out = t.value()
    assert len(out) <= 50 and out.endswith(b"line 999\n") and out.startswith(b"line ")


def test_a_log_read_ends_at_its_deadline_with_at_most_the_cap() -> None:
    started = time.monotonic()
    out, rc, cut = read_capped(["sh", "-c", "while :; do echo spam; done"], os.environ,
                               max_bytes=4096, deadline_s=0.5, max_line_bytes=100)
    assert cut and rc is None and len(out) <= 4096 and out.endswith(b"spam\n")
    assert time.monotonic() - started < 10  # killed, not waited for
    out, rc, cut = read_capped(["sh", "-c", "echo a; echo b >&2; exit 3"], os.environ,
                               max_bytes=4096, deadline_s=10, max_line_bytes=100)
    assert (sorted(out.split()), rc, cut) == ([b"a", b"b"], 3, False)


def _has_cap_sys_resource() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 24 & 1)
    return False


def test_an_image_for_another_os_or_cpu_is_refused() -> None:
    check_image("x", {"Os": "linux", "Architecture": "amd64"}, arch="amd64")
    check_image("x", {"Os": "linux", "Architecture": "x86_64"}, arch="amd64")
    check_image("x", {}, arch="arm64")  # not reported: not held against it
    with pytest.raises(ContainerRuntimeError, match="built for arm64; this machine is amd64"):
        check_image("x", {"Os": "linux", "Architecture": "arm64"}, arch="amd64")
    with pytest.raises(ContainerRuntimeError, match="built for windows"):
        check_image("x", {"Os": "windows", "Architecture": "amd64"}, arch="amd64")


def test_mount_points_are_read_from_mountinfo() -> None:
    text = ("36 35 98:0 / /mnt/a\\040b rw - ext4 /dev/loop0 rw\n"
            "37 35 98:1 / /var/lib/x rw - ext4 /dev/loop1 rw\n")
    assert mount_points(text) == {"/mnt/a b", "/var/lib/x"}


def test_protect_worker_from_oom_lowers_the_processes_score() -> None:
    code = ("from gpum_worker.limits import protect_worker_from_oom as p; ok = p(); "
            "print(ok, open('/proc/self/oom_score_adj').read().strip())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    if _has_cap_sys_resource():
        assert proc.stdout.split() == ["True", str(WORKER_OOM_SCORE_ADJ)]
    else:  # a sandbox without CAP_SYS_RESOURCE: said so, nothing else changed
        assert proc.stdout.split()[0] == "False" and "run it as root" in proc.stderr


# ------------------------------------------------------------------------- real containers


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealPodman]:
    r = real_podman(tmp_path_factory.mktemp("podman"))
    yield r
    r.runtime.prune_volumes(set())  # no scratch volume stays mounted after the tests


# 512 MiB of RAM less 256 MiB of headroom, shared by 2 GPUs: 128 MiB for a 1-GPU job.
SMALL = MachineResources(memory_mib=512, cpus=2, gpu_count=2, scratch_mib=128, pids=600)
JOB_MEMORY_MIB = 128
JOB_PIDS = 300


# Each test's manager is its own provider: it never removes another test's containers.
def mjob(spec: WorkloadSpec, status: str = "running", provider: bytes = b"\x03" * 32
         ) -> AssignedJob:
    return AssignedJob(job=os.urandom(32), market=b"\x02" * 32, program_id=b"\x01" * 32,
                       provider=provider, gpu_count=1, status=status,
                       started_at=T0 if status == "running" else None, user=USER,
                       workload_hash=spec_hash(spec))


class Run:
    """One job's workload run by a real WorkloadManager on ``SMALL``."""

    def __init__(self, tmp_path: Path, key: WorkerKey, real: RealPodman, spec: WorkloadSpec,
                 **kw: object) -> None:
        self.rt = real.runtime
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.provider = os.urandom(32)
        self.m = WorkloadManager(real.runtime, WorkloadStore(tmp_path / "w.sqlite"), key.seed,
                                 publish_host="127.0.0.1", attach_gpus=False, machine=SMALL,
                                 background_starts=False, provider=self.provider,
                                 **kw)  # type: ignore[arg-type]
        self.job = mjob(spec, provider=self.provider)
        self.name = container_name(self.job.job)
        self.m.deliver(self.job, spec)

    def start(self) -> None:
        self.m.reconcile({self.job.job: (self.job, ("GPU-0",))})
        st = self.rt.state(self.name)
        assert st.status in ("running", "exited"), self.m.describe(self.job)

    def exited(self, timeout_s: float = 60) -> int:
        st = wait_for(lambda: (s := self.rt.state(self.name)).status == "exited" and s,
                      timeout_s=timeout_s, what=f"{self.name} to exit")
        assert st.exit_code is not None
        return st.exit_code

    def inspect(self) -> dict:
        out = subprocess.run(["podman", "container", "inspect", self.name], capture_output=True,
                             check=True, env={**os.environ, **self.rt.extra_env}).stdout
        return json.loads(out)[0]

    def close(self) -> None:
        self.rt.remove(self.name, timeout_s=0)
        self.m.store.close()


def sh(real: RealPodman, script: str, **kw: object) -> WorkloadSpec:
    return WorkloadSpec(image=real.image, command=("sh", "-c"), args=(script,),
                        **kw)  # type: ignore[arg-type]


def test_podman_inspect_shows_every_limit(tmp_path: Path, key: WorkerKey,
                                          real: RealPodman) -> None:
    r = Run(tmp_path, key, real, sh(real, "cat /proc/self/oom_score_adj; df -k /dev/shm"))
    try:
        r.start()
        assert r.exited() == 0
        host = r.inspect()["HostConfig"]
        assert host["Memory"] == host["MemorySwap"] == JOB_MEMORY_MIB * MIB
        assert host["NanoCpus"] == int((SMALL.cpus - SMALL.reserved_cpus) * 10**9) // 2
        assert host["PidsLimit"] == JOB_PIDS
        assert host["ShmSize"] == DEFAULT_SHM_MIB * MIB
        assert host["LogConfig"]["Size"] == f"{LOG_MAX_MIB}MB"
        out = r.m.logs(r.job)
        assert out.splitlines()[0] == str(CONTAINER_OOM_SCORE_ADJ).encode()
        assert f"{DEFAULT_SHM_MIB * 1024}".encode() in out.splitlines()[2]
    finally:
        r.close()


def test_a_container_over_its_memory_is_killed_in_its_cgroup(tmp_path: Path, key: WorkerKey,
                                                              real: RealPodman,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    # conmon leaves an empty file named "oom" in its caller's directory after an OOM kill.
    monkeypatch.chdir(tmp_path)
    # tail holds its whole input when it has no newline: 300 MB, over the job's 128 MiB. The
    # shell's own stderr (its "Killed" line) goes to stdout, so the log keeps the order.
    r = Run(tmp_path, key, real,
            sh(real, "exec 2>&1; head -c 300000000 /dev/zero | tail -n 1 | wc -c; echo after"))
    try:
        r.start()
        assert r.exited() == 0
        out = r.m.logs(r.job).split()
        assert out[-1] == b"after"
        assert out[-2] != b"300000000"  # the hog was killed before it had it all
        assert os.getpid() > 0 and Path(f"/proc/{os.getpid()}").exists()  # we live
    finally:
        r.close()


def test_a_fork_bomb_stops_at_the_pids_limit(tmp_path: Path, key: WorkerKey,
                                             real: RealPodman) -> None:
    # The shell gives up at its first failed fork; the sleeps it started live on.
    script = ("(i=0; while [ $i -lt 600 ]; do sleep 300 & i=$((i+1)); done) 2>/dev/null;"
              " echo spawned; exec sleep 300")
    r = Run(tmp_path, key, real, sh(real, script))
    try:
        r.start()
        wait_for(lambda: b"spawned" in r.rt.logs(r.name), timeout_s=120,
                 what="the fork loop to end")
        assert len(r.rt.pids(r.name)) <= JOB_PIDS
    finally:
        r.close()


def test_scratch_is_a_disk_with_a_hard_quota(tmp_path: Path, key: WorkerKey,
                                             real: RealPodman) -> None:
    script = ("grep ' /scratch ' /proc/mounts; cat /dev/zero > /scratch/fill; echo rc=$?;"
              " wc -c < /scratch/fill; id -u > /scratch/who && echo writable")
    r = Run(tmp_path, key, real, sh(real, script, scratch_mib=64))
    try:
        r.start()
        assert r.exited() == 0
        out = r.m.logs(r.job)
        mount = out.splitlines()[0].split()
        assert mount[1:3] == [b"/scratch", b"ext4"]  # disk, not memory
        assert b"No space left on device" in out and b"rc=1" in out
        # stdout and stderr interleave in any order: the byte count is the one number
        written = next(int(line) for line in out.splitlines() if line.strip().isdigit())
        assert 64 * MIB <= written <= scratch_image_mib(64) * MIB
        image = Path(real.runtime.scratch.path(r.name) + ".img")
        assert image.stat().st_blocks * 512 <= scratch_image_mib(64) * MIB
        real.runtime.remove(r.name)
        r.m.reconcile({r.job.job: (r.job, ("GPU-0",))}, now=T0)
        assert image.exists()  # kept while its job runs: a restart after a reboot finds it
        r.m.reconcile({r.job.job: (replace(r.job, status="finishing"), ("GPU-0",))})
        assert not image.exists() and not Path(real.runtime.scratch.path(r.name)).exists()
    finally:
        r.close()


def test_a_spec_asking_more_than_the_share_is_never_accepted(tmp_path: Path, key: WorkerKey,
                                                             real: RealPodman) -> None:
    for field, value in (("shm_size_mib", 1_048_576), ("scratch_mib", 16_777_216)):
        spec = sh(real, "true", **{field: value})
        m = WorkloadManager(real.runtime, WorkloadStore(tmp_path / f"{field}.sqlite"),
                            key.seed, attach_gpus=False, machine=SMALL,
                            background_starts=False)
        j = mjob(spec, status="open")
        m.deliver(j, spec)
        blocker = m.acceptance_blocker(j)
        assert blocker is not None and field in blocker and "not accepting" in blocker


def test_a_64_mib_log_line_is_read_within_the_caps(tmp_path: Path, key: WorkerKey,
                                                   real: RealPodman) -> None:
    script = "head -c 67108864 /dev/zero | tr '\\0' a; echo; echo end"
    r = Run(tmp_path, key, real, sh(real, script))
    try:
        r.start()
        assert r.exited(timeout_s=300) == 0
        log_file = Path(r.inspect()["HostConfig"]["LogConfig"]["Path"])
        assert log_file.stat().st_size <= 2 * LOG_MAX_MIB * MIB  # capped at the runtime
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        out = r.m.logs(r.job, max_bytes=MIB, deadline_s=20, max_line_bytes=4096)
        assert time.monotonic() - started < 20 + 10
        assert len(out) <= MIB + 100 and out.endswith(b"end\n")
        assert all(len(line) <= 4096 + len(LogTail.CUT_MARK) for line in out.splitlines())
        grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert grew_kib < 32 * 1024  # the worker never held the line
    finally:
        r.close()


# --------------------------------------------------------------- images that cannot run


def test_an_image_that_cannot_be_pulled_is_never_accepted(tmp_path: Path, key: WorkerKey,
                                                          real: RealPodman) -> None:
    bad = WorkloadSpec(image="localhost/gpum-does-not-exist:1")
    m = WorkloadManager(real.runtime, WorkloadStore(tmp_path / "w.sqlite"), key.seed,
                        attach_gpus=False, machine=SMALL, background_starts=False)
    j = mjob(bad, status="open")
    m.deliver(j, bad)
    blocker = m.acceptance_blocker(j)
    assert blocker is not None and "cannot be pulled" in blocker
    good = sh(real, "true")
    k = mjob(good, status="open")
    m.deliver(k, good)
    assert m.acceptance_blocker(k) is None


def test_repeated_failed_starts_finish_the_job_and_never_bill(tmp_path: Path, key: WorkerKey,
                                                              real: RealPodman) -> None:
    spec = WorkloadSpec(image=real.image, command=("/no/such/program",))
    clock = [float(T0)]
    r = Run(tmp_path, key, real, spec, clock=lambda: clock[0])
    finished: list[AssignedJob] = []
    try:
        t = float(T0)
        for _ in range(MAX_START_FAILURES + 2):
            clock[0] = t
            r.m.reconcile({r.job.job: (r.job, ("GPU-0",))}, finish=finished.append, now=t)
            t += 2 * RETRY_CAP + 1
        assert finished == [r.job]  # once
        rec = r.m.store.get(r.job.job)
        assert rec.state == "failed" and rec.finish_requested and rec.error
        assert r.rt.state(r.name).status != "running"
        assert r.m.window_state(r.job, T0, int(t), set()).state == WORKLOAD_FAILED
        assert not r.m.has_run(r.job, t)
    finally:
        r.close()


def test_scratch_volumes_are_idempotent_and_survive_a_lost_mount(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("scratch volumes need root (loop devices)")
    v = ScratchVolumes(tmp_path / "scratch")
    path = v.ensure("gpum-x", 16)
    Path(path, "keep").write_text("data")
    assert v.ensure("gpum-x", 16) == path and v.names() == {"gpum-x"}
    subprocess.run(["umount", path], check=True)  # e.g. a host reboot
    assert v.ensure("gpum-x", 16) == path and Path(path, "keep").read_text() == "data"
    v.release("gpum-x")
    assert v.names() == set() and not Path(path).exists()
    with pytest.raises(ContainerRuntimeError, match="scratch size"):
        v.ensure("gpum-y", 0)


def test_a_container_filling_the_workers_disk_is_removed_not_the_worker(
        tmp_path: Path, key: WorkerKey, real: RealPodman) -> None:
    r = Run(tmp_path, key, real,
            sh(real, "head -c 100000000 /dev/zero > /root/fill; echo wrote; sleep 300"),
            disk_reserve_mib=0)
    quiet_spec = sh(real, "echo quiet; sleep 300")
    quiet = mjob(quiet_spec, provider=r.provider)
    r.m.deliver(quiet, quiet_spec)
    both = {r.job.job: (r.job, ("GPU-0",)), quiet.job: (quiet, ("GPU-1",))}
    try:
        r.m.reconcile(both)
        wait_for(lambda: b"wrote" in r.m.logs(r.job), timeout_s=60,
                 what="the writer to fill its layer")
        st = os.statvfs(tmp_path)  # a reserve above what is free: the disk counts as full
        r.m.disk_reserve_mib = (st.f_bavail * st.f_frsize >> 20) + 100 * 1024
        r.m.reconcile(both)
        assert r.rt.state(r.name).status == "missing"
        assert r.rt.state(container_name(quiet.job)).status == "running"
        rec = r.m.store.get(r.job.job)
        assert rec.state == "exited" and rec.exit_code == 137 and "/scratch" in rec.error
        assert b"wrote" in r.m.logs(r.job)  # its log was kept
        r.m.reconcile(both)  # nothing else is big: the quiet one stays, none restarts
        assert r.rt.state(container_name(quiet.job)).status == "running"
        assert r.rt.state(r.name).status == "missing"
    finally:
        r.rt.remove(container_name(quiet.job), timeout_s=0)
        r.close()
