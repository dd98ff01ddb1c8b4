"""Per-job resource limits of workload containers: the provider's machine stays the
provider's (docs/protocol.md, "Workloads").

Policy (``job_limits``, pure, no I/O):

* The machine (``MachineResources``: RAM, CPU cores, GPUs offered, disk for scratch, process
  budget) keeps a **headroom for the worker and the OS** that no job gets:
  ``reserved_memory_mib`` (a tenth of RAM, at least 1 GiB, at most 16 GiB, never more than
  half) and ``reserved_cpus`` (a quarter of the cores, at most 1).
* A job gets its **GPU share** of the rest: ``share = job GPUs / machine GPUs``.
  memory (RAM + swap: no swap at all) = ``floor((RAM - headroom) * share)`` MiB;
  CPUs = ``(cores - headroom) * share`` (in hundredths, at least 0.01);
  pids = ``floor(pids * share)``, at least ``MIN_PIDS``;
  scratch (disk at ``/scratch``) at most ``floor(scratch disk * share)`` MiB.
  So all jobs together never exceed the machine less the headroom.
* ``/dev/shm`` is what the spec asks (``DEFAULT_SHM_MIB`` when it says nothing); its pages
  are charged to the job's memory, so it may not exceed the job's memory.
* The container's log file is capped at ``LOG_MAX_MIB``.
* Containers get ``CONTAINER_OOM_SCORE_ADJ`` (the kernel kills them first when the host
  runs out of memory); the worker lowers its own score to ``WORKER_OOM_SCORE_ADJ``
  (``protect_worker_from_oom``), which its store shares (it is the same process).

A spec asking more shm or scratch than its share raises ``LimitsError`` naming the field,
the ask and the most this machine gives: such a job is never accepted.

``machine_from_host`` and ``protect_worker_from_oom`` are the only functions here that
touch the host.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import WorkerError

__all__ = [
    "CONTAINER_OOM_SCORE_ADJ",
    "DEFAULT_SHM_MIB",
    "LOG_MAX_MIB",
    "MIN_PIDS",
    "WORKER_OOM_SCORE_ADJ",
    "JobLimits",
    "LimitsError",
    "MachineResources",
    "job_limits",
    "machine_from_host",
    "protect_worker_from_oom",
]

log = logging.getLogger("gpum_worker.limits")

DEFAULT_SHM_MIB = 64
"""/dev/shm of a job whose spec does not say (docker's and podman's own default)."""
LOG_MAX_MIB = 16
"""A container's log file never grows past this (the runtime starts it over)."""
MIN_PIDS = 256
"""No job gets fewer processes and threads than this, however small its share."""
CONTAINER_OOM_SCORE_ADJ = 1000
"""Job containers are the first the kernel's OOM killer picks."""
WORKER_OOM_SCORE_ADJ = -900
"""The worker is the last (still killable, so a leak in it cannot hang the host)."""
_MIN_CPUS = 0.01
_DISK_RESERVE_MIB = 5 * 1024


class LimitsError(WorkerError):
    """A job's spec asks more than its share of this machine gives."""


@dataclass(frozen=True)
class MachineResources:
    """What the provider's machine offers to all jobs together, before the headroom."""

    memory_mib: int
    """RAM of the machine."""
    cpus: float
    """CPU cores the jobs may use."""
    gpu_count: int
    """GPUs this worker offers (each job's share is its GPU count over this)."""
    scratch_mib: int = 0
    """Disk for every job's /scratch together (0: no job may ask for scratch)."""
    pids: int = 32768
    """Processes and threads for every job together."""

    def __post_init__(self) -> None:
        for name in ("memory_mib", "gpu_count", "scratch_mib", "pids"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise LimitsError(f"machine {name} must be an integer >= 0, got {v!r}")
        if self.gpu_count < 1:
            raise LimitsError("machine gpu_count must be at least 1")
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, (int, float)) \
                or not self.cpus > 0:
            raise LimitsError(f"machine cpus must be > 0, got {self.cpus!r}")

    @property
    def reserved_memory_mib(self) -> int:
        """RAM kept for the worker and the OS: a tenth, within [1 GiB, 16 GiB], at most half."""
        return min(max(self.memory_mib // 10, 1024), 16 * 1024, self.memory_mib // 2)

    @property
    def reserved_cpus(self) -> float:
        """CPU kept for the worker and the OS: a quarter of the cores, at most one."""
        return min(1.0, self.cpus / 4)


@dataclass(frozen=True)
class JobLimits:
    """The limits one job's container runs under."""

    memory_mib: int
    """RAM, also the RAM + swap limit (no swap)."""
    cpus: float
    pids: int
    shm_mib: int
    scratch_mib: int | None
    """Size of the disk-backed /scratch (None: no /scratch)."""
    log_max_mib: int = LOG_MAX_MIB
    oom_score_adj: int = CONTAINER_OOM_SCORE_ADJ


def job_limits(machine: MachineResources, gpu_count: int, *, shm_mib: int | None = None,
               scratch_mib: int | None = None) -> JobLimits:
    """The limits of a job using ``gpu_count`` of the machine's GPUs whose spec asks
    ``shm_mib`` and ``scratch_mib`` (None: not asked). Raises ``LimitsError`` when the job
    asks more GPUs, shm or scratch than this machine gives it."""
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 1:
        raise LimitsError(f"a job uses at least one GPU, got {gpu_count!r}")
    if gpu_count > machine.gpu_count:
        raise LimitsError(f"the job asks {gpu_count} GPU(s); this machine offers "
                          f"{machine.gpu_count}")
    n, d = gpu_count, machine.gpu_count
    memory = (machine.memory_mib - machine.reserved_memory_mib) * n // d
    cpus = max(_MIN_CPUS, int((machine.cpus - machine.reserved_cpus) * 100 * n / d) / 100)
    pids = max(MIN_PIDS, machine.pids * n // d)
    if memory < 1:
        raise LimitsError(f"this machine's {machine.memory_mib} MiB of RAM leave no memory "
                          "for jobs after the worker's headroom")
    shm = DEFAULT_SHM_MIB if shm_mib is None else shm_mib
    if shm > memory:
        raise LimitsError(f"shm_size_mib {shm} is more than the job's memory here "
                          f"({memory} MiB for {n} of {d} GPU(s)); ask at most {memory}")
    if scratch_mib is not None:
        most = machine.scratch_mib * n // d
        if scratch_mib > most:
            raise LimitsError(f"scratch_mib {scratch_mib} is more than this machine's disk "
                              f"gives the job ({most} MiB for {n} of {d} GPU(s)); ask at "
                              f"most {most}")
    return JobLimits(memory_mib=memory, cpus=cpus, pids=pids, shm_mib=shm,
                     scratch_mib=scratch_mib)


# ------------------------------------------------------------------------------ the host


def _meminfo_mib(path: str = "/proc/meminfo") -> int:
    with open(path) as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    raise LimitsError(f"{path} has no MemTotal line")


def _pids_budget() -> int:
    """Half of what the kernel allows (the rest is the host's)."""
    values = []
    for p in ("/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"):
        try:
            values.append(int(Path(p).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    return max(MIN_PIDS, min(values) // 2) if values else 32768


def _scratch_budget_mib(scratch_dir: Path) -> int:
    """Free disk where scratch volumes live, less a reserve (a tenth of the filesystem, at
    least 5 GiB) that keeps the worker's own files writable."""
    d = Path(scratch_dir)
    while not d.exists() and d != d.parent:
        d = d.parent
    st = os.statvfs(d)
    total = st.f_blocks * st.f_frsize >> 20
    free = st.f_bavail * st.f_frsize >> 20
    return max(0, free - max(_DISK_RESERVE_MIB, total // 10))


def machine_from_host(gpu_count: int, scratch_dir: Path | str | None = None, *,
                      memory_mib: int | None = None, cpus: float | None = None,
                      scratch_mib: int | None = None) -> MachineResources:
    """This host's RAM (/proc/meminfo), usable CPU cores, half its pid budget and the
    scratch disk free under ``scratch_dir`` (0 when None), for ``gpu_count`` GPUs.
    ``memory_mib`` / ``cpus`` / ``scratch_mib``, the provider's declaration, replace the
    host's figures when smaller (a declaration never exceeds the host)."""
    try:
        host_cpus = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        host_cpus = float(os.cpu_count() or 1)
    host_memory = _meminfo_mib()
    host_scratch = _scratch_budget_mib(Path(scratch_dir)) if scratch_dir else 0
    return MachineResources(
        memory_mib=host_memory if memory_mib is None else min(memory_mib, host_memory),
        cpus=host_cpus if cpus is None else min(float(cpus), host_cpus),
        gpu_count=max(1, gpu_count),
        scratch_mib=host_scratch if scratch_mib is None else min(scratch_mib, host_scratch),
        pids=_pids_budget())


def protect_worker_from_oom(adj: int = WORKER_OOM_SCORE_ADJ,
                            path: str = "/proc/self/oom_score_adj") -> bool:
    """Make the kernel's OOM killer pick this process (the worker, its store) last. True
    when set; False (logged) when the host does not let us (lowering needs root or
    CAP_SYS_RESOURCE)."""
    try:
        with open(path, "w") as f:
            f.write(str(adj))
    except OSError as e:
        log.warning("cannot protect the worker from the OOM killer (%s: %s); run it as root "
                    "so a container exhausting memory cannot take it down", path,
                    e.strerror or e)
        return False
    return True
