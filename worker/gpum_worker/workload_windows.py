"""What a workload did in a window, for its proof: states observed and GPU processes.

``WorkloadWindows`` is the part of ``WorkloadManager`` (``workloads``) that keeps, per job,
the container states observed over time and the PIDs seen on the job's GPUs, and turns
them into the workload part of a window's proof (``gpu_market.proof.WorkloadWindow``):

* ``window_state``: the worst state observed in the window (the state at its start
  included), the GPU compute processes on the job's GPUs that are (``job_processes``)
  or are not (``foreign_processes``) in the container, and the workload's last complete
  checkpoint created before the window's end (``checkpoints.record_at``);
* ``has_run``: whether the container ran by a given time; windows before it ever ran are
  not billable (the agent claims 0 seconds for them).

Worst-state order (best to worst): RUNNING, PENDING, EXITED, RESTARTING, FAILED.

Process attribution: ``observe_processes`` (the agent calls it about once a second with the
PIDs NVML reports on the job's GPUs) classifies a new PID at once: in the container's PID
set (``runtime.pids``) it is the job's; otherwise, if it still exists, it is foreign. A
process that is gone before it could be looked up is not counted either way (it lived
less than about a second). The runtime is asked only when an unclassified PID shows up.

Observations older than ``OBSERVATION_KEEP_S`` are pruned (the latest one before is
kept). The state this class reads and writes is set up by ``WorkloadManager.__init__`` and
guarded by its lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpu_market.proof import (
    WORKLOAD_EXITED,
    WORKLOAD_FAILED,
    WORKLOAD_NONE,
    WORKLOAD_PENDING,
    WORKLOAD_RESTARTING,
    WORKLOAD_RUNNING,
    WorkloadWindow,
)

from .checkpoints import Checkpoints
from .errors import ContainerRuntimeError
from .jobs import AssignedJob
from .runtime import ContainerRuntime, container_name
from .workload_store import WorkloadStore, WorkloadUnavailable

__all__ = [
    "OBSERVATION_KEEP_S",
    "WorkloadWindows",
]

log = logging.getLogger("gpum_worker.workloads")

OBSERVATION_KEEP_S = 7200.0
"""State observations older than this are pruned (the latest one before is kept)."""

_RANK = {WORKLOAD_RUNNING: 0, WORKLOAD_PENDING: 1, WORKLOAD_EXITED: 2,
         WORKLOAD_RESTARTING: 3, WORKLOAD_FAILED: 4}
_CODE_OF_STATE = {"pending": WORKLOAD_PENDING, "starting": WORKLOAD_PENDING,
                  "running": WORKLOAD_RUNNING, "exited": WORKLOAD_EXITED,
                  "restarting": WORKLOAD_RESTARTING, "failed": WORKLOAD_FAILED,
                  "stopped": WORKLOAD_EXITED}


@dataclass(frozen=True)
class _Obs:
    t: float
    code: int
    exit_code: int | None = None


class WorkloadWindows:
    """Window accounting of ``WorkloadManager`` (see the module docstring)."""

    runtime: ContainerRuntime | None
    store: WorkloadStore
    _lock: threading.RLock
    _obs: dict[bytes, list[_Obs]]
    _job_pids: dict[bytes, set[int]]
    _foreign_seen: dict[bytes, set[int]]
    _alive: Callable[[int], bool]
    checkpoints: Checkpoints

    def _observe(self, job: bytes, t: float, code: int, exit_code: int | None = None) -> None:
        with self._lock:
            obs = self._obs.setdefault(job, [])
            if obs and obs[-1].t >= t:  # a later word on the same instant replaces it
                if obs[-1].t > t:
                    return
                obs.pop()
            obs.append(_Obs(t, code, exit_code))
            old = [i for i, o in enumerate(obs) if o.t < t - OBSERVATION_KEEP_S]
            if old:
                del obs[: old[-1]]

    def observe_processes(self, job: AssignedJob, pids: Iterable[int]) -> None:
        """Attribute PIDs now seen on the job's GPUs while their processes still exist.
        A PID is looked up once here (a foreign one again only at the window's end)."""
        if not job.has_workload:
            return
        with self._lock:
            seen = self._job_pids.get(job.job, set()) | self._foreign_seen.get(job.job, set())
        new = set(pids) - seen
        if new:
            self._classify(job, new)

    def _classify(self, job: AssignedJob, pids: set[int]) -> tuple[int, int]:
        """(job processes, foreign processes) among ``pids``; asks the runtime only when
        one is not known to be the container's."""
        if not pids:
            return 0, 0
        with self._lock:
            known = set(self._job_pids.get(job.job, ()))
        unknown = pids - known
        if unknown and self.runtime is not None:
            try:
                current = self.runtime.pids(container_name(job.job))
            except ContainerRuntimeError as e:
                log.warning("job %s: cannot list its container's processes (%s); counting "
                            "unattributed GPU processes as foreign", job.job_b58, e)
                current = frozenset()
            known |= set(current)
            with self._lock:
                self._job_pids.setdefault(job.job, set()).update(current)
        mine = pids & known
        foreign = {p for p in pids - known if self._alive(p)}
        if foreign:
            with self._lock:
                self._foreign_seen.setdefault(job.job, set()).update(foreign)
        return len(mine), len(foreign)

    def window_state(self, job: AssignedJob, start: int, end: int,
                     gpu_process_pids: Iterable[int]) -> WorkloadWindow:
        """The workload part of the proof of window ``[start, end)`` of ``job``:
        the worst state observed in it (the state at its start included), and the GPU
        compute processes ``gpu_process_pids`` seen on its GPUs in it, attributed."""
        if not job.has_workload:
            return WorkloadWindow(WORKLOAD_NONE)
        with self._lock:
            obs = self._obs.get(job.job, [])
            before = [o for o in obs if o.t < start]
            inside = [o for o in obs if start <= o.t < end]
            # The state carried in from before counts unless observed anew at ``start``.
            carried = [before[-1]] if before and not (inside and inside[0].t == start) else []
            cands = carried + inside
            if len(before) > 1:  # windows close in order: older ones are never needed again
                del obs[: len(before) - 1]
        if not cands:
            cands = [self._current(job)]
        worst = max(cands, key=lambda o: _RANK[o.code])
        exit_code = None
        if worst.code == WORKLOAD_EXITED:
            exit_code = next((o.exit_code for o in reversed(cands)
                              if o.code == WORKLOAD_EXITED), None)
        mine, foreign = self._classify(job, set(gpu_process_pids))
        return WorkloadWindow(worst.code, exit_code, min(mine, 0xFFFF), min(foreign, 0xFFFF),
                              self.checkpoints.record_at(job.job, end))

    def has_run(self, job: AssignedJob, by: float) -> bool:
        """True when ``job``'s container was seen running (or exited, so it ran) before
        ``by``; always True for a job without a workload. A window ending before the
        workload ever ran is not billable."""
        if not job.has_workload:
            return True
        ran = (WORKLOAD_RUNNING, WORKLOAD_EXITED, WORKLOAD_RESTARTING)
        with self._lock:
            if any(o.code in ran and o.t < by for o in self._obs.get(job.job, ())):
                return True
        try:
            rec = self.store.get(job.job)
        except WorkloadUnavailable:
            return True  # cannot tell: bill as before rather than refuse the provider
        if rec is None or rec.workload_hash != job.workload_hash:
            return False
        if rec.running_at is not None and rec.running_at < by:
            return True
        return rec.exit_code is not None and rec.state in ("exited", "stopped")

    def _current(self, job: AssignedJob) -> _Obs:
        """The state from the store when nothing was observed (e.g. just restarted)."""
        if self.runtime is None:
            return _Obs(0, WORKLOAD_FAILED)
        try:
            rec = self.store.get(job.job)
        except WorkloadUnavailable:
            rec = None
        if rec is None or rec.workload_hash != job.workload_hash:
            return _Obs(0, WORKLOAD_PENDING)
        return _Obs(0, _CODE_OF_STATE[rec.state], rec.exit_code)
