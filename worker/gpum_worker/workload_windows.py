"""What a workload did in a window, for its proof: states observed and GPU processes.

``WorkloadWindows`` is the part of ``WorkloadManager`` (``workloads``) that keeps, per job,
the container states observed over time and the PIDs seen on the job's GPUs, and turns
them into the workload part of a window's proof (``gpu_market.proof.WorkloadWindow``):

* ``window_state``: the worst state observed in the window (the state at its start
  included), the GPU compute processes on the job's GPUs that are (``job_processes``)
  or are not (``foreign_processes``) in the container, and the workload's last complete
  checkpoint created before the window's end (``checkpoints.record_at``);
* ``window_account``: that, and the GPU processes of the window not attributed in time;
* ``has_run``: whether the container ran by a given time; windows before it ever ran are
  not billable (the agent claims 0 seconds for them).

Worst-state order (best to worst): RUNNING, PENDING, EXITED, RESTARTING, FAILED.

Process attribution never happens on the proof path. ``observe_processes`` (the agent's
sampler calls it once a second with the PIDs NVML reports on the job's GPUs) only notes the
PIDs not attributed yet; a lookup thread per job (``attribute_in_background``; without it,
tests, the lookup runs in the caller) asks the runtime for the container's PID set
(``runtime.pids``, bounded by the runtime's own call deadline) and classifies each: in the
set it is the job's; otherwise, if it still exists, it is foreign (looked up again when
seen ``FOREIGN_RECHECK_S`` later: a PID the kernel gave to a container process since);
gone, it is counted neither way (it lived less than a lookup). A failed lookup is retried
after ``LOOKUP_RETRY_S``.

``window_account`` (and ``window_state``), which the prover calls when a window closes,
reads only what is known then, in memory: a PID still waiting for its lookup
``ATTRIBUTION_DEADLINE_S`` after it was first seen (the runtime hangs or fails) is
**unattributed**: neither ``job_processes`` nor ``foreign_processes`` (nothing shows it is
outside the container, so the window is not marked as shared), and the agent bills such a
window only when the container was seen running throughout it (worst state RUNNING):
otherwise nothing but an unverified process used the GPUs, and the window bills 0 seconds,
without ``HEALTH_FOREIGN_PROCESS``. A PID first seen less than that before the window's end
is counted in no field either; it is attributed in the next window if it lives on.

What else the proof path reads: the observations and attributions here and the
checkpoint record (``checkpoints.record_at``), in memory, under locks never held across a
runtime call or I/O; the workload store (local SQLite, its lock held per statement, never
across a runtime call) only when the observations kept in memory do not show that the
container ran before the window's end (``has_run``: not started yet, or started again) or
show nothing at all (``_current``: just restarted). The runtime is never called.

Observations older than ``OBSERVATION_KEEP_S`` are pruned (the latest one before is
kept). The state this class reads and writes is set up by ``WorkloadManager.__init__`` and
guarded by its lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

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
    "ATTRIBUTION_DEADLINE_S",
    "FOREIGN_RECHECK_S",
    "LOOKUP_RETRY_S",
    "OBSERVATION_KEEP_S",
    "WindowAccount",
    "WorkloadWindows",
]

log = logging.getLogger("gpum_worker.workloads")

OBSERVATION_KEEP_S = 7200.0
"""State observations older than this are pruned (the latest one before is kept)."""

ATTRIBUTION_DEADLINE_S = 2.0
"""A GPU process still not attributed this long after it was first seen is unattributed in
the proof of the window it ran in (the runtime did not answer in time)."""
FOREIGN_RECHECK_S = 5.0
"""A process found foreign is looked up again when seen this long after its last lookup."""
LOOKUP_RETRY_S = 5.0
"""After a failed lookup, the job's processes are not looked up again before this."""

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


@dataclass
class _Attribution:
    """One job's GPU processes as attributed so far (guarded by the manager's lock)."""

    mine: set[int] = field(default_factory=set)
    foreign: dict[int, float] = field(default_factory=dict)
    """PID -> when it was last found foreign."""
    pending: dict[int, float] = field(default_factory=dict)
    """PID -> when it was first seen waiting for a lookup."""
    lookup: threading.Thread | None = None
    retry_at: float = 0.0
    failure: str | None = None


@dataclass(frozen=True)
class WindowAccount:
    """The workload part of a window's proof, and ``unattributed``: GPU processes of the
    window whose lookup had not answered ``ATTRIBUTION_DEADLINE_S`` after they were first
    seen (counted in neither field of ``workload``)."""

    workload: WorkloadWindow
    unattributed: int = 0


class WorkloadWindows:
    """Window accounting of ``WorkloadManager`` (see the module docstring)."""

    runtime: ContainerRuntime | None
    store: WorkloadStore
    clock: Callable[[], float]
    _lock: threading.RLock
    _obs: dict[bytes, list[_Obs]]
    _alive: Callable[[int], bool]
    checkpoints: Checkpoints

    def _init_attribution(self) -> None:
        self._attr: dict[bytes, _Attribution] = {}
        self._lookups_in_background = False

    def _forget_processes(self, job: bytes) -> None:
        """Drop ``job``'s attributions (its container is new or gone); a lookup under way
        finishes into the forgotten record."""
        with self._lock:
            self._attr.pop(job, None)

    def attribute_in_background(self) -> None:
        """From now on GPU processes are looked up in threads of their own, one per job at
        a time (``gpum-worker run``), never in ``observe_processes``' caller."""
        self._lookups_in_background = True

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

    def observe_processes(self, job: AssignedJob, pids: Iterable[int],
                          now: float | None = None) -> None:
        """Note the PIDs seen on ``job``'s GPUs at ``now`` (default: the clock); those not
        attributed yet (and foreign ones last looked up ``FOREIGN_RECHECK_S`` ago) are
        looked up. With ``attribute_in_background`` this never calls the runtime."""
        if not job.has_workload or self.runtime is None:
            return
        t = self.clock() if now is None else now
        with self._lock:
            a = self._attr.setdefault(job.job, _Attribution())
            for p in set(pids) - a.mine:
                found = a.foreign.get(p)
                if found is None or t - found >= FOREIGN_RECHECK_S:
                    a.pending.setdefault(p, t)
            if not a.pending or t < a.retry_at or (a.lookup is not None
                                                   and a.lookup.is_alive()):
                return
            if self._lookups_in_background:
                a.lookup = threading.Thread(target=self._look_up, args=(job, a, t),
                                            name=f"attribution-{job.job_b58[:8]}", daemon=True)
                a.lookup.start()
                return
        self._look_up(job, a, t)

    def _look_up(self, job: AssignedJob, a: _Attribution, t: float) -> None:
        """Classify ``a``'s pending PIDs, one ``runtime.pids`` call per round while new ones
        arrived meanwhile (see the module docstring); on failure they stay pending until
        ``LOOKUP_RETRY_S`` later."""
        assert self.runtime is not None
        with self._lock:
            asked = set(a.pending)
        while asked:
            try:
                current = self.runtime.pids(container_name(job.job))
            except ContainerRuntimeError as e:
                with self._lock:
                    a.retry_at = t + LOOKUP_RETRY_S
                    first, a.failure = a.failure is None, str(e)
                if first:
                    log.warning("job %s: cannot list its container's processes (%s); its %d "
                                "GPU process(es) stay unattributed until the runtime answers",
                                job.job_b58, e, len(asked))
                return
            gone = {p for p in asked - current if not self._alive(p)}
            with self._lock:
                a.mine |= asked & current
                for p in asked - current - gone:
                    a.foreign[p] = t
                for p in asked:
                    if p in current:
                        a.foreign.pop(p, None)
                    a.pending.pop(p, None)
                recovered, a.failure = a.failure is not None, None
                asked = set(a.pending)  # seen while this round was under way
            if recovered:
                log.info("job %s: its container's processes can be listed again",
                         job.job_b58)

    def window_state(self, job: AssignedJob, start: int, end: int,
                     gpu_process_pids: Iterable[int]) -> WorkloadWindow:
        """``window_account(...).workload``."""
        return self.window_account(job, start, end, gpu_process_pids).workload

    def window_account(self, job: AssignedJob, start: int, end: int,
                       gpu_process_pids: Iterable[int]) -> WindowAccount:
        """The workload part of the proof of window ``[start, end)`` of ``job``: the worst
        state observed in it (the state at its start included), and the GPU compute
        processes ``gpu_process_pids`` seen on its GPUs in it, as attributed by now; reads
        memory only (see the module docstring)."""
        if not job.has_workload:
            return WindowAccount(WorkloadWindow(WORKLOAD_NONE))
        pids = set(gpu_process_pids)
        with self._lock:
            obs = self._obs.get(job.job, [])
            before = [o for o in obs if o.t < start]
            inside = [o for o in obs if start <= o.t < end]
            # The state carried in from before counts unless observed anew at ``start``.
            carried = [before[-1]] if before and not (inside and inside[0].t == start) else []
            cands = carried + inside
            if len(before) > 1:  # windows close in order: older ones are never needed again
                del obs[: len(before) - 1]
            a = self._attr.get(job.job) or _Attribution()
            mine = pids & a.mine
            foreign = (pids & a.foreign.keys()) - mine
            late = {p for p in pids - mine - foreign
                    if a.pending.get(p, end) <= end - ATTRIBUTION_DEADLINE_S}
        if not cands:
            cands = [self._current(job)]
        worst = max(cands, key=lambda o: _RANK[o.code])
        exit_code = None
        if worst.code == WORKLOAD_EXITED:
            exit_code = next((o.exit_code for o in reversed(cands)
                              if o.code == WORKLOAD_EXITED), None)
        return WindowAccount(
            WorkloadWindow(worst.code, exit_code, min(len(mine), 0xFFFF),
                           min(len(foreign), 0xFFFF), self.checkpoints.record_at(job.job, end)),
            len(late))

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
