"""The reaper: a job's container stops when the chain ends the job, whatever the worker's state.

``gpum-worker reaper`` is a process of its own, so a worker that crashed, was killed or hangs
does not keep the containers of ended jobs running. Every ``reaper_poll_seconds`` it makes one
pass (``Reaper.reap``):

1. it lists this provider's job containers (label ``gpum.provider``, named ``gpum-<job>`` after
   their ``gpum.job`` label; any other container is never touched);
2. it reads their jobs from chain, 100 per getMultipleAccounts call
   (``ChainJobSource.read_jobs``), each call done within ``REAPER_RPC_DEADLINE_S`` in total
   and reading at most ``REAPER_RPC_MAX_BYTES``;
3. it removes the container of each job that is neither Running nor Open: Finishing,
   Completed, Cancelled, Declined, Failed, closed (the tombstone ``close_job`` leaves), or
   without an account on ``ABSENT_CONFIRMATIONS`` passes in a row (then recorded "closed", as
   the agent does). The container's exit is recorded when it had exited, its log tail saved
   and the container removed, and a job that ended (not Finishing) is recorded ended with the
   reason the worker gives (``workload_end``: the worker's own code path).

Guarantees:

* a container whose job is Running, or Open (a node behind the chain), is never touched, nor
  one whose job account is not a job of this program;
* when the chain cannot be read (an RPC error, the deadline, the size cap, a short answer)
  nothing is removed; the next pass reads again. When the container runtime or the store
  fails, that container is kept and retried next pass;
* the worker removing the same container at the same moment is harmless: removing a container
  that is gone is no error, and both record the same end;
* one reaper per worker database: it holds an exclusive ``flock`` on ``<db stem>.reaper.lock``
  (next to the database, holding its pid) for its whole life; a second one exits at once,
  quietly, with status 0;
* it exits when the workload store is gone (the worker's state was removed), on SIGTERM or
  SIGINT (after the pass under way), and, when started by the worker (``exit_when_idle``),
  once no worker holds ``<db stem>.worker.lock``, no container of this provider is left and
  no checkpoint volume of this worker is mounted: nothing is left to reap then, and the next
  worker starts a new reaper;
* a volume is never unmounted while a worker runs on the database, nor one whose job is
  Running or Open, or still has a container.

4. while no worker runs (no holder of ``<db stem>.worker.lock``), it takes that lock itself
   (exclusively: a worker starting meanwhile waits for it) and releases the disk volumes the
   dead worker left: the /scratch volumes of containers that are gone
   (``ContainerRuntime.prune_volumes``), and the checkpoint volumes
   (``<db dir>/checkpoints/<job>``, of jobs this worker's store knows) of jobs that are
   neither Running nor Open and have no container, which it unmounts keeping their images:
   the reaper cannot sync a checkpoint, so the next worker mounts each again for the job's
   last sync (``checkpoints``) and only then deletes it.

A container of a job the chain ended is thus removed within ``reaper_poll_seconds`` plus one
RPC deadline (and the removal itself: its log read and a stop of at most 5 s) while the worker
is down, as long as the reaper runs. When the machine or both processes are down nothing runs;
the worker's first poll after its restart removes those containers.

In the worker: ``ReaperKeeper`` spawns the reaper detached (a new session, so stopping or
killing the worker's process group does not reach it; output appended to
``<db stem>.reaper.log``) whenever none holds the lock: at start and, checked every
``reaper_poll_seconds``, after one exited.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .agent import ABSENT_CONFIRMATIONS
from .checkpoints import SUBDIR as CHECKPOINTS_SUBDIR
from .errors import ContainerRuntimeError, JobSourceError
from .jobs import TERMINAL_STATUSES, AssignedJob
from .keys import b58decode, b58encode
from .runtime import CONTAINER_PREFIX, ContainerRuntime, container_name
from .runtime_disk import ScratchVolumes
from .workload_end import (
    PROVIDER_LABEL,
    job_of_label,
    mark_stopped,
    record_end,
    remove_container,
)
from .workload_store import WorkloadStore, WorkloadUnavailable

__all__ = [
    "REAPER_POLL_S",
    "REAPER_RPC_DEADLINE_S",
    "REAPER_RPC_MAX_BYTES",
    "JobReader",
    "Pass",
    "Reaper",
    "ReaperKeeper",
    "ReaperLock",
    "ReaperPaths",
    "hold_worker_lock",
    "holder_pid",
    "no_worker",
    "run_reaper",
    "worker_running",
]

log = logging.getLogger("gpum_worker.reaper")

REAPER_POLL_S = 15.0
"""Default ``[workload] reaper_poll_seconds``."""
REAPER_RPC_DEADLINE_S = 10.0
"""Total deadline of one of the reaper's JSON-RPC calls (connect, send, the whole answer)."""
REAPER_RPC_MAX_BYTES = 8 << 20
"""The largest JSON-RPC answer the reaper reads (100 job accounts are far smaller)."""
SPAWN_GRACE_S = 10.0
"""A reaper just spawned gets this long to take its lock before the worker spawns another."""
KEEP_STATUSES = frozenset({"running", "open"})
"""Job statuses whose container the reaper never touches."""


@dataclass(frozen=True)
class ReaperPaths:
    """The files of the worker whose database is ``db`` that the reaper uses."""

    store: Path
    """The workload store (``<db stem>.workloads.sqlite``)."""
    lock: Path
    """Held by the running reaper (``<db stem>.reaper.lock``, its pid inside)."""
    worker_lock: Path
    """Held (shared) by a running worker (``<db stem>.worker.lock``)."""
    log: Path
    """The spawned reaper's output (``<db stem>.reaper.log``)."""
    checkpoints: Path
    """Where the worker keeps its jobs' checkpoint volumes (``<db dir>/checkpoints``)."""

    @classmethod
    def of(cls, db: Path) -> ReaperPaths:
        db = Path(db)
        return cls(store=db.with_name(db.stem + ".workloads.sqlite"),
                   lock=db.with_name(db.stem + ".reaper.lock"),
                   worker_lock=db.with_name(db.stem + ".worker.lock"),
                   log=db.with_name(db.stem + ".reaper.log"),
                   checkpoints=db.with_name(CHECKPOINTS_SUBDIR))


# ----------------------------------------------------------------------------- locks


class ReaperLock:
    """An exclusive ``flock`` on ``path``, which holds the holder's pid while held. The kernel
    releases it when the holder dies, however it dies."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """True when this process holds it now; False when another process does."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)


def holder_pid(path: Path) -> int | None:
    """The pid of the process holding the reaper lock at ``path``, or None when none does
    (0 when one does but its pid is not written yet)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 32).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else 0
        return None
    finally:
        os.close(fd)


def hold_worker_lock(path: Path) -> int:
    """A running worker's shared lock on ``path`` (its fd; released when the worker dies).
    The reaper tells from it whether a worker runs."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def worker_running(path: Path) -> bool:
    """Whether a worker holds its lock at ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def no_worker(path: Path) -> int | None:
    """The worker lock at ``path`` held exclusively: its fd (a worker starting now waits
    until it is closed), or None when a worker holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


# ----------------------------------------------------------------------------- one pass


class JobReader(Protocol):
    def read_jobs(self, jobs: Sequence[bytes]) -> Mapping[bytes, AssignedJob | str | None]:
        """Each job as the chain has it: the job, "closed", None (no account) or "invalid";
        ``JobSourceError`` when the chain cannot be read (``ChainJobSource.read_jobs``)."""
        ...


@dataclass(frozen=True)
class Pass:
    """What one pass saw and did."""

    containers: int | None
    """This provider's job containers listed (None: the runtime failed to list them)."""
    removed: tuple[str, ...] = ()
    chain_read: bool = True
    """False when the chain could not be read (then nothing was removed)."""
    volumes: int = 0
    """This worker's checkpoint volumes still mounted after the pass."""
    unmounted: tuple[str, ...] = ()
    """Checkpoint volumes (job, base58) unmounted by this pass."""


class Reaper:
    """One pass at a time (``reap``); see the module docstring."""

    def __init__(self, runtime: ContainerRuntime, store: WorkloadStore, jobs: JobReader,
                 provider: bytes, *, absent_confirmations: int = ABSENT_CONFIRMATIONS,
                 paths: ReaperPaths | None = None) -> None:
        """``paths``: the worker's files, for the volume release of step 4 (None: no
        volume is ever released)."""
        self.runtime = runtime
        self.store = store
        self.jobs = jobs
        self.provider = provider
        self.absent_confirmations = absent_confirmations
        self.worker_lock = None if paths is None else paths.worker_lock
        self.volumes = None if paths is None else ScratchVolumes(paths.checkpoints)
        self._absent: dict[bytes, int] = {}
        self._noted: set[bytes] = set()

    def reap(self) -> Pass:
        try:
            listed = self.runtime.list_job_containers({PROVIDER_LABEL: b58encode(self.provider)})
        except ContainerRuntimeError as e:
            log.warning("cannot list the job containers (%s); removing none this pass", e)
            return Pass(None)
        ours: dict[str, bytes] = {}
        for name, label in listed.items():
            job = job_of_label(label)
            if job is not None and name.startswith(CONTAINER_PREFIX) \
                    and name == container_name(job):
                ours[name] = job
        worker_up = self.worker_lock is None or worker_running(self.worker_lock)
        mounted = set() if worker_up else self._mounted_volumes()
        self._absent = {k: n for k, n in self._absent.items()
                        if k in ours.values() or k in mounted}
        removed: list[str] = []
        ended: dict[bytes, str | None] = {}
        if ours or mounted:
            try:
                read = self.jobs.read_jobs(sorted(set(ours.values()) | mounted))
            except JobSourceError as e:
                log.warning("cannot read the jobs of %d container(s) and %d volume(s) from "
                            "chain (%s); keeping every container and volume, reading again "
                            "next pass", len(ours), len(mounted), e)
                return Pass(len(listed), chain_read=False, volumes=self._count_mounted())
            ended = {job: self._ended(job, read.get(job, "invalid"))
                     for job in set(ours.values()) | mounted}
            for name, job in sorted(ours.items()):
                got = read.get(job)
                status = ended[job]
                if status is not None and self._end(
                        name, job, status, got if isinstance(got, AssignedJob) else None):
                    removed.append(name)
        unmounted: tuple[str, ...] = ()
        if not worker_up:
            left = set(listed) - set(removed)
            unmounted = self._release_volumes(left, {
                job for job in mounted
                if ended.get(job) is not None and container_name(job) not in left})
        return Pass(len(listed), tuple(removed), volumes=self._count_mounted(),
                    unmounted=unmounted)

    def _mounted_volumes(self) -> set[bytes]:
        """Jobs of this worker (its store knows them) whose checkpoint volume is mounted."""
        if self.volumes is None:
            return set()
        out = set()
        for name in self.volumes.mounted():
            try:
                job = b58decode(name)
            except ValueError:
                continue
            try:
                known = len(job) == 32 and self.store.get(job) is not None
            except WorkloadUnavailable:
                known = False
            if known:
                out.add(job)
        return out

    def _count_mounted(self) -> int:
        try:
            return len(self._mounted_volumes())
        except OSError:
            return 0

    def _release_volumes(self, containers: set[str], ended: set[bytes]) -> tuple[str, ...]:
        """Step 4 of the module docstring, holding the worker lock: the /scratch volumes of
        containers that are gone released, the checkpoint volumes of ``ended`` jobs
        unmounted (images kept); what was unmounted."""
        assert self.worker_lock is not None and self.volumes is not None
        try:
            fd = no_worker(self.worker_lock)
        except OSError as e:
            log.warning("cannot lock %s (%s); no volume is released", self.worker_lock, e)
            return ()
        if fd is None:
            return ()  # a worker started since: it releases them itself
        done = []
        try:
            try:
                self.runtime.prune_volumes(containers)
            except ContainerRuntimeError as e:
                log.warning("cannot release the /scratch volumes of removed containers (%s); "
                            "retrying next pass", e)
            for job in sorted(ended):
                name = b58encode(job)
                try:
                    if self.volumes.detach(name):
                        done.append(name)
                        log.warning("job %s ended while no worker ran: its checkpoint volume "
                                    "is unmounted (its image kept for the worker's last sync "
                                    "of it)", name)
                except ContainerRuntimeError as e:
                    log.warning("job %s: cannot unmount its checkpoint volume (%s); retrying "
                                "next pass", name, e)
        finally:
            os.close(fd)
        return tuple(done)

    def _ended(self, job: bytes, got: AssignedJob | str | None) -> str | None:
        """The job's status when its container must go, else None."""
        if got is None:
            n = self._absent[job] = self._absent.get(job, 0) + 1
            if n < self.absent_confirmations:
                log.warning("job %s: no account on chain (%d/%d); keeping its container until "
                            "that is confirmed", b58encode(job), n, self.absent_confirmations)
                return None
            return "closed"
        self._absent.pop(job, None)
        if isinstance(got, AssignedJob):
            status = got.status
            if status == "finishing" or status in TERMINAL_STATUSES:
                return status
            if status not in KEEP_STATUSES:
                self._note(job, f"is {status} on chain, a status the reaper does not know; "
                                "keeping its container")
            return None
        if got == "closed":
            return "closed"
        self._note(job, "names an account that is not a job of this program; keeping its "
                        "container")
        return None

    def _end(self, name: str, job: bytes, status: str, view: AssignedJob | None) -> bool:
        """Record the container's exit, save its log tail, remove it and record the end;
        False when the runtime or the store failed (retried next pass)."""
        try:
            self._note_exit(name, job)
            if not remove_container(self.runtime, self.store, name, job):
                return False
            reason = None if status == "finishing" else record_end(self.store, job, status,
                                                                    view)
            mark_stopped(self.store, job)
        except WorkloadUnavailable as e:
            log.warning("job %s: %s; retrying next pass", b58encode(job), e)
            return False
        log.warning("job %s is %s on chain: container %s stopped and removed by the reaper%s",
                    b58encode(job), status, name, f" ({reason})" if reason else "")
        return True

    def _note_exit(self, name: str, job: bytes) -> None:
        """A container that exited while no worker watched it: its exit is recorded as the
        worker records it, so the reason says so."""
        rec = self.store.get(job)
        if rec is None or rec.state not in ("starting", "running", "restarting"):
            return
        try:
            st = self.runtime.state(name)
        except ContainerRuntimeError:
            return
        if st.status == "exited":
            self.store.set_state(job, "exited", exit_code=st.exit_code, error=st.error or None)

    def _note(self, job: bytes, why: str) -> None:
        if job not in self._noted:
            self._noted.add(job)
            log.warning("job %s %s", b58encode(job), why)


# ----------------------------------------------------------------------------- the process


def run_reaper(reaper: Reaper, paths: ReaperPaths, lock: ReaperLock, poll_s: float,
               stop: threading.Event, *, exit_when_idle: bool = False) -> str:
    """Pass after pass every ``poll_s`` until it must stop (see the module docstring); why it
    stopped. ``lock`` is held on entry; it is released when it stops idle."""
    while True:
        if not paths.store.exists():
            return f"the workload store {paths.store} is gone"
        done = reaper.reap()
        if exit_when_idle and done.containers == 0 and not done.volumes \
                and not worker_running(paths.worker_lock):
            lock.release()  # a worker starting now finds no reaper and spawns one
            if not worker_running(paths.worker_lock):
                return "no worker runs and no container of this provider is left"
            if not lock.acquire():
                return "the new worker's reaper took over"
        if stop.wait(poll_s):
            return "asked to stop"


_DETACH = ("import os, sys\n"
           "if os.fork() == 0:\n"
           "    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n")
"""The first child's program: it forks the reaper and exits, so the reaper is nobody's child
(no zombie in the worker) in the first child's new session."""


class ReaperKeeper:
    """In the worker: keeps one reaper running for its database (see the module docstring).
    ``args`` are the ``gpum-worker reaper`` arguments. ``stop`` stops the checks and leaves
    the reaper running."""

    def __init__(self, paths: ReaperPaths, args: Sequence[str], period_s: float) -> None:
        self.paths = paths
        self.args = tuple(args)
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._spawned_at: float | None = None

    def ensure(self) -> bool:
        """Spawn the reaper unless one holds its lock (or one spawned less than
        ``SPAWN_GRACE_S`` ago may still be starting); True when one was spawned."""
        if holder_pid(self.paths.lock) is not None:
            return False
        if self._spawned_at is not None and time.monotonic() - self._spawned_at < SPAWN_GRACE_S:
            return False
        self._spawned_at = time.monotonic()
        with open(self.paths.log, "ab") as out:
            subprocess.run(
                [sys.executable, "-c", _DETACH, "-m", "gpum_worker.cli", "reaper", *self.args],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True, timeout=30, check=True)
        log.info("reaper started (log %s): containers of jobs the chain ends are stopped "
                 "even while this worker is down", self.paths.log)
        return True

    def start(self) -> ReaperKeeper:
        self._try()
        self._thread = threading.Thread(target=self._loop, name="reaper-keeper", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self._try()

    def _try(self) -> None:
        try:
            self.ensure()
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("cannot start the reaper (%s); trying again in %gs", e, self.period_s)
