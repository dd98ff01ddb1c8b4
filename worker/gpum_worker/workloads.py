"""Workloads: the user's container of a job (docs/protocol.md, "Workloads").

A job may carry a workload: ``job.workload_hash`` (fixed on chain at ``create_job``) is the
sha256 of its spec's canonical bytes (``gpu_market.workload``). The user posts the spec to
this worker's API (``api.py``); the worker keeps it here and runs it with a real container
runtime (``runtime.ContainerRuntime``: podman or docker) on exactly the job's GPUs.

The user's spec, the workload's state and its saved log tail are kept durably by
``WorkloadStore`` (``workload_store``); what the workload did in each window, for its
proof, is accounted by ``WorkloadWindows`` (``workload_windows``), a part of the manager.

``WorkloadManager`` is driven by the agent's main loop:

* ``reconcile`` (every poll) makes the containers match the jobs:

  - a Running job with a stored spec and its GPUs gets container ``gpum-<job b58>``
    (label ``gpum.job=<job b58>``) on exactly those GPUs, with the spec's env plus its
    secrets (opened only here, into the container's environment), ports and limits. The
    start runs in a thread of its own (an image pull must not stall the proofs); the
    workload is "starting" (PENDING) meanwhile. ``run`` is idempotent by name and the
    store survives restarts, so a worker restart neither loses nor duplicates a container;
    a container that exited is never started again (the user's work ran), except one
    stopped by a host reboot while it ran;
  - a runtime that cannot start it: state FAILED (windows not billable), retried with
    backoff (30 s doubling to 10 min);
  - a job that left Running (Finishing, ended, or unknown to the agent's last poll and not
    held) has its container removed after its log tail was saved; so has every container
    named ``gpum-*`` with our label whose job is not live (an orphan; a label that names no
    job, or a name that is not its job's, counts as not live): so on the first poll after
    a restart, the containers of jobs that ended while the worker was down are removed.
    An ended job's record (state, log tail, why it ended: ``job_end.end_reason``) stays
    readable for the store's ``ended_logs_s`` (``ended_view``, ``describe``, ``logs``). Containers named otherwise
    are never touched. A job the agent still holds (missing from one listing, not confirmed
    ended) keeps its container as it is. The removal and the record of the end
    (``workload_end``) are shared with the reaper (``reaper``), which does them while the
    worker is down;
  - ``finish_on_exit``: once the container of a Running job exited, ``finish`` (the job
    source's ``finish_job`` with the worker key) is called; retried next poll on failure,
    never again after it succeeded (recorded durably).

  - a cluster node (a spec with ``cluster``) gets no container until its mesh's peer list
    is kept (``mesh``; "pending", "waiting for the cluster's mesh"); then it is created,
    initialized, given ``gpum0`` and only then started, with the environment contract;
  - a spec with a ``checkpoint``: its directory is a volume of its own, restored from the
    user's store before the first start (a failed restore is a failed start) and synced while
    the container runs, when it exits and after the job left Running (``checkpoints``);
  - every container runs under its job's limits (``limits.job_limits``: its GPU share of
    the machine's memory, CPUs and pids less the worker's headroom, its shm, a disk-backed
    /scratch of the spec's size, a capped log); /scratch volumes of containers that are
    gone are released;
  - the worker's disk stays writable: when the filesystem of its store has less than
    ``disk_reserve_mib`` free, the Running job container that wrote most there outside its
    volumes (its writable layer, at least ``EVICT_MIN_BYTES``) is removed, its log saved,
    state "exited" (137) with an error telling the user to write large data to /scratch;
    one container per poll;
  - a start that failed ``MAX_START_FAILURES`` times in a row gives up: the job is
    finished on chain (``finish``, with the worker key), so the user stops paying and its
    GPUs are freed; the reason is logged and kept as the workload's error.

* ``acceptance_blocker`` / ``ready_to_accept``: a job without a workload is always ready;
  one with a workload only once its spec is stored, a container runtime is available (a
  worker without one never accepts such a job), the spec fits the job's share of this
  machine (shm, scratch) and its image is here and runs on this machine
  (``runtime.ensure_image``, which pulls it; in a thread of its own, retried with backoff
  when it fails). So an image that cannot be pulled never books GPUs.
* ``has_run``: whether the container ran by a given time; windows before it ever ran are
  not billable (the agent claims 0 seconds for them).
* ``window_state`` describes a window for its proof (``gpu_market.proof.WorkloadWindow``):
  the worst state observed in it and the GPU compute processes on the job's GPUs that are
  (``job_processes``) or are not (``foreign_processes``) in the container.

Worst-state order and process attribution: see ``workload_windows``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from gpu_market.proof import (
    WORKLOAD_EXITED,
    WORKLOAD_FAILED,
    WORKLOAD_PENDING,
)
from gpu_market.workload import (
    WorkloadSpec,
    WorkloadSpecError,
    canonical_bytes,
    open_secrets,
    spec_from_json,
)

from .checkpoints import Checkpoints
from .errors import ContainerRuntimeError, JobSourceError
from .job_end import end_reason
from .jobs import AssignedJob
from .keys import b58encode
from .limits import JobLimits, LimitsError, MachineResources, job_limits, machine_from_host
from .mesh import NO_MESH, WAITING_FOR_MESH, Mesh
from .runtime import (
    CONTAINER_PREFIX,
    DEFAULT_SCRATCH_DIR,
    JOB_LABEL,
    LOG_LINE_MAX_BYTES,
    LOG_READ_DEADLINE_S,
    LOG_READ_MAX_BYTES,
    ContainerRuntime,
    ContainerSpec,
    ContainerState,
    PortBinding,
    container_name,
)
from .runtime_disk import dir_bytes
from .workload_end import (
    PROVIDER_LABEL,
    job_of_label,
    mark_stopped,
    record_end,
    remove_container,
)
from .workload_store import WorkloadRecord, WorkloadStore, WorkloadUnavailable
from .workload_windows import _CODE_OF_STATE, WorkloadWindows, _Obs

log = logging.getLogger("gpum_worker.workloads")


WORKLOAD_HASH_LABEL = "gpum.workload"
"""Container label holding the hex workload hash (for operators; the job label decides)."""
RETRY_BASE_S = 30.0
RETRY_CAP_S = 600.0
MAX_START_FAILURES = 3
"""After this many failed starts in a row the worker finishes the job on chain."""
DISK_RESERVE_MIB = 1024
"""Free disk the worker keeps for its store; below it, the biggest writer is removed."""
EVICT_MIN_BYTES = 64 << 20
"""A container's writable layer smaller than this is never blamed for a full disk."""
_WRITABLE_DU_DEADLINE_S = 10.0
MAX_IMAGE_CHECKS = 2
"""Image checks (pulls) of not yet accepted jobs under way at once; the others wait."""
NO_RUNTIME = ("this worker has no container runtime, so it cannot run workloads (install "
              "podman or docker and set [workload] runtime / --runtime, then restart it)")

_STATE_OF_RUNTIME = {"running": "running", "exited": "exited", "restarting": "restarting",
                     "created": "starting"}


def boot_time() -> float:
    """When this host booted (unix seconds; ``btime`` of /proc/stat), 0 when unknown."""
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def pid_alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")



@dataclass
class _Retry:
    at: float
    backoff: float
    failures: int = 1


@dataclass
class _ImageCheck:
    image: str
    done: bool = False
    error: str | None = None
    retry: _Retry | None = None


class WorkloadManager(WorkloadWindows):
    """Runs each job's workload (see the module docstring).

    ``runtime`` is None when this worker has no container runtime: it then accepts no job
    with a workload and reports such Running jobs FAILED. ``key`` is the worker key's
    32-byte ed25519 seed (it opens the spec's sealed secrets). ``publish_host`` is the
    host address container ports are published on. ``attach_gpus=False`` (simulated GPUs
    only) starts containers without GPU devices. With ``background_starts`` (the default)
    ``runtime.run``, which may pull an image for minutes, runs in a thread of its own so the
    agent's main loop keeps closing windows (image checks before acceptance too);
    ``wait_for_starts`` waits for those threads. ``machine`` is what this machine offers to
    all jobs together (``limits.MachineResources``; the CLI sets it once the GPUs are
    known); None: this host's RAM, CPUs and the free disk under ``scratch_dir``, shared by
    as many GPUs as the job has (so the worker's headroom is still kept).
    """

    def __init__(self, runtime: ContainerRuntime | None, store: WorkloadStore, key: bytes,
                 publish_host: str = "0.0.0.0", clock: Callable[[], float] = time.time, *,
                 attach_gpus: bool = True, host_boot_time: Callable[[], float] = boot_time,
                 process_alive: Callable[[int], bool] = pid_alive,
                 background_starts: bool = True, provider: bytes | None = None,
                 machine: MachineResources | None = None,
                 scratch_dir: str | os.PathLike[str] | None = None,
                 state_dir: str | os.PathLike[str] | None = None,
                 disk_reserve_mib: int = DISK_RESERVE_MIB) -> None:
        self.runtime = runtime
        self.state_dir = (str(state_dir) if state_dir is not None else None if
                          store.path == ":memory:" else os.path.dirname(os.path.abspath(
                              store.path)))
        """The filesystem kept writable for the worker (default: the store's directory)."""
        self.disk_reserve_mib = disk_reserve_mib
        self.machine = machine
        scratch = getattr(runtime, "scratch", None)
        self.scratch_dir = (scratch_dir if scratch_dir is not None else
                            getattr(scratch, "root", None))
        self.provider = provider
        """This worker's provider: containers are labelled with it and only its containers
        are ever removed as orphans (None: every ``gpum-*`` container with a job label)."""
        self.store = store
        self._seed = bytes(key)[:32]
        self.publish_host = publish_host
        self.clock = clock
        self.attach_gpus = attach_gpus
        self.background_starts = background_starts
        self._boot_time = host_boot_time
        self._alive = process_alive
        self.api_url: str | None = None
        """Where users deliver specs (set by the CLI when the API runs); None: no API."""
        self.on_delivered: Callable[[], None] = lambda: None
        """Called after a new spec was stored (the agent polls early to accept the job)."""
        self._lock = threading.RLock()
        self._jobs: dict[bytes, AssignedJob] = {}
        self._polled = False
        self._obs: dict[bytes, list[_Obs]] = {}
        self._init_attribution()
        self._retry: dict[bytes, _Retry] = {}
        self._starting: dict[bytes, threading.Thread] = {}
        self._images: dict[bytes, _ImageCheck] = {}
        self._noted: dict[bytes, str] = {}
        self._no_runtime_logged = False
        self._disk_noted = False
        self.checkpoints = Checkpoints(self.state_dir, store, self._seed, clock, container_gone=(
            lambda job: self.runtime is None
            or self.runtime.state(container_name(job)).status == "missing"))
        """Each checkpointed job's directory, restore and sync (``checkpoints``)."""
        self.mesh: Mesh | None = None
        """Cluster nodes' meshes (``mesh``; set by the CLI with ``[cluster] enabled``): a
        node's container starts only once its peer list is here, gpum0 up before it runs."""

    def wait_for_starts(self, timeout_s: float | None = None) -> bool:
        """Wait until no container start is under way; False on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            with self._lock:
                threads = list(self._starting.values())
            if not threads:
                return True
            for t in threads:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                t.join(left)
                if deadline is not None and time.monotonic() >= deadline and t.is_alive():
                    return False

    @property
    def runtime_name(self) -> str | None:
        return None if self.runtime is None else self.runtime.name

    # --------------------------------------------------------------- the job directory

    @property
    def polled(self) -> bool:
        """True once the agent passed its first job listing (the API answers 503 before)."""
        return self._polled

    def lookup(self, job: bytes) -> AssignedJob | None:
        """The job as of the agent's latest poll (open, running or finishing), or None."""
        with self._lock:
            return self._jobs.get(job)

    def ended(self, job: bytes) -> bool:
        """True when the worker saw ``job`` end."""
        try:
            return self.store.is_ended(job)
        except WorkloadUnavailable:
            return False

    def has_record(self, job: bytes) -> bool:
        """Whether a workload spec of ``job`` is stored."""
        try:
            return self.store.get(job) is not None
        except WorkloadUnavailable:
            return False

    def job_ended(self, job: bytes, status: str = "removed",
                  view: AssignedJob | None = None) -> None:
        """The agent confirmed that ``job`` ended with final ``status`` ("closed": the user
        closed its account); ``view``: the job as last read. Forget it; its container, if
        any, is removed by the next ``reconcile`` as an orphan (its log tail saved), and its
        record, log tail and the reason it ended stay readable for the store's
        ``ended_logs_s``."""
        with self._lock:
            last = self._jobs.pop(job, None)
            self._obs.pop(job, None)
            self._attr.pop(job, None)
            self._retry.pop(job, None)
            self._noted.pop(job, None)
            self._images.pop(job, None)
        try:
            reason = record_end(self.store, job, status, view or last)
            if reason is not None:
                log.info("job %s ended (%s): %s", b58encode(job), status, reason)
        except WorkloadUnavailable as e:
            log.warning("job %s: %s", b58encode(job), e)

    # --------------------------------------------------------------- acceptance

    def acceptance_blocker(self, job: AssignedJob) -> str | None:
        """Why ``job`` (Open) must not be accepted yet, or None when it may be."""
        if not job.has_workload:
            return None
        if self.runtime is None:
            if not self._no_runtime_logged:
                self._no_runtime_logged = True
                log.error("jobs with a workload are not accepted: %s", NO_RUNTIME)
            return f"has a workload, but {NO_RUNTIME}; not accepting it"
        try:
            rec = self.store.get(job.job)
        except WorkloadUnavailable as e:
            return f"has a workload and its spec cannot be read ({e}); not accepting it yet"
        if rec is None or rec.workload_hash != job.workload_hash:
            where = (f"POST {self.api_url}/v1/jobs/{job.job_b58}/workload" if self.api_url
                     else "nowhere: the worker API is off (set [api] listen / --api-listen)")
            return (f"has a workload whose spec the user has not delivered yet ({where}); "
                    "accepting it once the spec is here")
        try:
            spec = spec_from_json(rec.spec)
            self.limits_for(job, spec)
        except (WorkloadSpecError, LimitsError) as e:
            return f"has a workload this machine cannot run as asked ({e}); not accepting it"
        if spec.cluster is not None and (self.mesh is None or self.mesh.health() is None):
            return f"is a cluster node, but {NO_MESH}; not accepting it"
        return self._image_blocker(job, spec.image)

    # --------------------------------------------------------------- limits and images

    def limits_for(self, job: AssignedJob, spec: WorkloadSpec) -> JobLimits:
        """The limits ``job``'s container runs under (``LimitsError`` when its spec asks
        more than its share of this machine)."""
        machine = self.machine
        if machine is None:
            machine = machine_from_host(job.gpu_count, self.scratch_dir or DEFAULT_SCRATCH_DIR)
        return job_limits(machine, job.gpu_count, shm_mib=spec.shm_size_mib,
                          scratch_mib=spec.scratch_mib)

    def _image_blocker(self, job: AssignedJob, image: str) -> str | None:
        """None once ``image`` was found usable here; else why not yet (and a check is
        started, in the background unless ``background_starts`` is off)."""
        now = self.clock()
        with self._lock:
            check = self._images.get(job.job)
            if check is None or check.image != image:
                check = self._images[job.job] = _ImageCheck(image)
            if check.done and check.error is None:
                return None
            running = job.job in self._starting
            due = not running and (check.retry is None or now >= check.retry.at)
            busy = sum(1 for t in self._starting.values() if t.name.startswith("image-"))
            if due and self.background_starts and busy >= MAX_IMAGE_CHECKS:
                return (f"has a workload whose image {image} waits for other image pulls to "
                        "end; accepting it once it is here")
            if due and self.background_starts:
                t = threading.Thread(target=self._check_image, args=(job, check),
                                     name=f"image-{job.job_b58}", daemon=True)
                self._starting[job.job] = t
                t.start()
        if due and not self.background_starts:
            self._check_image(job, check)
            if check.done and check.error is None:
                return None
        if check.error is not None:
            return (f"has a workload whose image cannot be used here ({check.error}); not "
                    "accepting it (checking again later)")
        return (f"has a workload whose image {image} is being pulled and checked; accepting it "
                "once it is here")

    def _check_image(self, job: AssignedJob, check: _ImageCheck) -> None:
        assert self.runtime is not None
        try:
            try:
                self.runtime.ensure_image(check.image)
            except ContainerRuntimeError as e:
                now = self.clock()
                prev = check.retry
                backoff = RETRY_BASE_S if prev is None else min(prev.backoff * 2, RETRY_CAP_S)
                check.retry = _Retry(now + backoff, backoff)
                check.error, check.done = str(e), True
                log.error("job %s: its image %s cannot be used (%s); the job is not accepted; "
                          "checking again in %ds", job.job_b58, check.image, e, backoff)
                return
            check.error, check.done, check.retry = None, True, None
            log.info("job %s: image %s is here and runs on this machine", job.job_b58,
                     check.image)
        except Exception:
            log.exception("job %s: checking its image failed", job.job_b58)
        finally:
            with self._lock:
                if self._starting.get(job.job) is threading.current_thread():
                    self._starting.pop(job.job, None)

    def ready_to_accept(self, job: AssignedJob) -> bool:
        return self.acceptance_blocker(job) is None

    # --------------------------------------------------------------- delivery (API)

    def deliver(self, job: AssignedJob, spec: WorkloadSpec) -> dict:
        """Store ``spec`` for ``job`` (the caller checked the signature and that its hash
        is the job's ``workload_hash``) and return the job's status. Raises
        WorkloadSpecError when its secrets cannot be opened with this worker's key, and
        WorkloadUnavailable when this worker cannot take it (no runtime, store failing)."""
        if self.runtime is None:
            raise WorkloadUnavailable(NO_RUNTIME)
        open_secrets(self._seed, spec)  # only checks they open; the values are dropped
        self.checkpoints.check_sealed(spec)
        data = canonical_bytes(spec)
        if self.store.put_spec(job.job, job.workload_hash, data, job.user):
            log.info("job %s: workload spec delivered (image %s, %d byte(s), hash %s)",
                     job.job_b58, spec.image, len(data), job.workload_hash.hex())
            self.on_delivered()
        return self.describe(job)

    def ended_view(self, job: bytes) -> AssignedJob | None:
        """An ended job whose record is still kept (``store.ended_logs_s``), as the API
        serves it (status: its final status; its user and workload hash from the record);
        None when the worker never saw it end or its record is gone."""
        ended = self.store.ended(job)
        rec = self.store.get(job) if ended is not None else None
        if ended is None or rec is None or rec.user is None:
            return None  # (a record from before users were stored: nobody to serve it to)
        return AssignedJob(job=job, market=bytes(32), program_id=bytes(32),
                           provider=self.provider or bytes(32), gpu_count=0,
                           status=ended.status or "ended", user=rec.user,
                           workload_hash=rec.workload_hash)

    def describe(self, job: AssignedJob) -> dict:
        """The job's workload status as the API serves it: the container's state, and the
        job's status with, once it is finishing or ended, why (``job_end.end_reason``) and
        until when an ended job's logs are kept."""
        out: dict = {"job": job.job_b58, "workload_hash": job.workload_hash.hex(),
                     "state": "pending", "exit_code": None, "error": None,
                     "runtime": self.runtime_name, "ports": [], "job_status": job.status,
                     "ended": False, "end_reason": None, "logs_kept_until": None}
        rec = self.store.get(job.job)
        out["checkpoint"] = self.checkpoints.status(job.job)
        ended = self.store.ended(job.job) if self.lookup(job.job) is None else None
        if ended is not None:
            out.update(ended=True, job_status=ended.status or job.status,
                       end_reason=ended.reason,
                       logs_kept_until=int(ended.ended_at + self.store.ended_logs_s))
        elif job.status == "finishing":
            out["end_reason"] = end_reason("finishing", rec)
        if rec is None or rec.workload_hash != job.workload_hash:
            if self.runtime is None:
                out["error"] = NO_RUNTIME
            return out
        out.update(state=rec.state, exit_code=rec.exit_code, error=rec.error)
        with self._lock:
            check = self._images.get(job.job)
        if rec.state == "pending" and check is not None and check.error is not None:
            out["error"] = f"the image cannot be used here: {check.error}"
        if self.runtime is None:
            if job.status == "running":
                out.update(state="failed", error=NO_RUNTIME)
            return out
        if rec.state in ("starting", "running", "restarting", "exited"):
            try:
                st = self.runtime.state(container_name(job.job))
            except ContainerRuntimeError as e:
                log.warning("job %s: cannot read its container's state: %s", job.job_b58, e)
                return out
            live = _STATE_OF_RUNTIME.get(st.status)
            if live is not None:
                out.update(state=live, exit_code=st.exit_code if live == "exited" else None,
                           error=st.error or (rec.error if live != "running" else None))
                out["ports"] = [{"port": p.port, "protocol": p.protocol, "host": p.host,
                                 "host_port": p.host_port} for p in st.ports]
        return out

    def logs(self, job: AssignedJob, tail: int | None = None, *,
             max_bytes: int = LOG_READ_MAX_BYTES, deadline_s: float = LOG_READ_DEADLINE_S,
             max_line_bytes: int = LOG_LINE_MAX_BYTES) -> bytes:
        """The container's log (stdout and stderr), or the tail saved when it was removed:
        at most the last ``max_bytes``, lines cut at ``max_line_bytes``, read within
        ``deadline_s`` (``ContainerRuntime.logs``)."""
        if self.runtime is not None and self.store.get(job.job) is not None:
            name = container_name(job.job)
            try:
                if self.runtime.state(name).status != "missing":
                    return self.runtime.logs(name, tail=tail, max_bytes=max_bytes,
                                             deadline_s=deadline_s,
                                             max_line_bytes=max_line_bytes)
            except ContainerRuntimeError as e:
                log.warning("job %s: cannot read its container's log: %s", job.job_b58, e)
        return _tail_lines(self.store.logs(job.job) or b"", tail)[-max_bytes:]

    def follow_logs(self, job: AssignedJob, tail: int | None = None) -> Iterator[bytes] | None:
        """A live log stream of the job's container (``close()`` ends it), or None when
        the job has no container now (then serve ``logs``)."""
        if self.runtime is None or self.store.get(job.job) is None:
            return None
        name = container_name(job.job)
        try:
            if self.runtime.state(name).status == "missing":
                return None
            return self.runtime.follow_logs(name, tail=tail)
        except ContainerRuntimeError as e:
            log.warning("job %s: cannot follow its container's log: %s", job.job_b58, e)
            return None

    # --------------------------------------------------------------- reconcile

    def reconcile(self, jobs: Mapping[bytes, tuple[AssignedJob, tuple[str, ...]]], *,
                  held: Iterable[bytes] = (), finish: Callable[[AssignedJob], None] | None = None,
                  now: float | None = None) -> None:
        """Make containers match ``jobs`` (job -> (latest view, assigned GPU uuids)), the
        agent's listing of this poll. ``held``: jobs the agent keeps without a current view
        (missing from the listing, not confirmed ended): their containers stay as they are.
        ``finish`` finishes a job on chain (``finish_on_exit``)."""
        now = self.clock() if now is None else now
        held = frozenset(held)
        with self._lock:
            directory = {k: j for k, (j, _) in jobs.items()}
            for k in held:
                if k not in directory and k in self._jobs:
                    directory[k] = self._jobs[k]
            self._jobs = directory
            self._polled = True
        try:
            self.store.purge()
        except WorkloadUnavailable as e:
            log.warning("cannot forget the records of long-ended jobs (%s); retrying next "
                        "poll", e)
        if self.runtime is None:
            for k, (j, _) in jobs.items():
                if j.has_workload and j.status == "running":
                    self._note(j, f"is running with a workload, but {NO_RUNTIME}; its windows "
                                  "are not billable", logging.ERROR)
                    self._observe(k, now, WORKLOAD_FAILED)
            return
        keep = {k for k, (j, _) in jobs.items() if j.status == "running"} | held
        try:
            containers: dict[str, str] | None = self.runtime.list_job_containers(
                None if self.provider is None else {PROVIDER_LABEL: b58encode(self.provider)})
        except ContainerRuntimeError as e:
            log.warning("cannot list the workload containers (%s); removing none this poll", e)
            containers = None
        with_container: set[bytes] = set()
        removed: set[str] = set()
        for name, label in sorted((containers or {}).items()):
            if not name.startswith(CONTAINER_PREFIX):
                continue  # labelled by someone else (a test, an operator): not ours
            k = job_of_label(label)
            if k is not None and k in keep and name == container_name(k):
                continue
            view = jobs[k][0] if k is not None and k in jobs else None
            if self._remove(name, k, view):
                removed.add(name)
            elif k is not None:
                with_container.add(k)
        for k, (j, uuids) in jobs.items():
            if j.has_workload and j.status == "running":
                try:
                    self._reconcile_running(j, tuple(uuids), now, finish)
                except ContainerRuntimeError as e:
                    log.warning("job %s: container runtime failed (%s); retrying next poll",
                                j.job_b58, e)
                except WorkloadUnavailable as e:
                    log.warning("job %s: %s; retrying next poll", j.job_b58, e)
            elif j.has_workload and containers is not None and k not in with_container:
                self._stopped(k)  # Open or Finishing, and no container (left)
        if containers is not None:
            try:
                self.runtime.prune_volumes({container_name(k) for k in keep}
                                           | (set(containers) - removed))
            except ContainerRuntimeError as e:
                log.warning("cannot release /scratch volumes of removed containers (%s); "
                            "retrying next poll", e)
        self._guard_disk(jobs, now, finish)
        self.checkpoints.reconcile(keep)  # a job that left Running: last sync, then release
        if self.mesh is not None:  # ended jobs: key deleted, port freed; others: device ended
            self.mesh.reconcile(keep, set(jobs) | held)

    def _guard_disk(self, jobs: Mapping[bytes, tuple[AssignedJob, tuple[str, ...]]],
                    now: float, finish: Callable[[AssignedJob], None] | None) -> None:
        """Below ``disk_reserve_mib`` free on the store's filesystem, remove the Running
        job container with the largest writable layer on it (see the module docstring)."""
        assert self.runtime is not None
        if self.state_dir is None:
            return
        try:
            st = os.statvfs(self.state_dir)
            dev = os.stat(self.state_dir).st_dev
        except OSError:
            return
        free_mib = st.f_bavail * st.f_frsize >> 20
        if free_mib >= self.disk_reserve_mib:
            self._disk_noted = False
            return
        worst: tuple[int, AssignedJob] | None = None
        for _, (j, _) in sorted(jobs.items()):
            if not (j.has_workload and j.status == "running"):
                continue
            try:
                upper = self.runtime.writable_dir(container_name(j.job))
                if upper is None or os.stat(upper).st_dev != dev:
                    continue
            except (ContainerRuntimeError, OSError):
                continue
            size = dir_bytes(upper, _WRITABLE_DU_DEADLINE_S)
            if worst is None or size > worst[0]:
                worst = (size, j)
        if worst is None or worst[0] < EVICT_MIN_BYTES:
            if not self._disk_noted:
                self._disk_noted = True
                log.error("only %d MiB free under %s (the worker keeps %d MiB), and no job "
                          "container wrote much of it: free disk space", free_mib,
                          self.state_dir, self.disk_reserve_mib)
            return
        size, j = worst
        error = (f"removed by the provider's worker: the container wrote {size >> 20} MiB "
                 f"outside its volumes while the provider's disk ran out ({free_mib} MiB "
                 "left); write large data to /scratch, whose size the spec sets")
        name = container_name(j.job)
        log.error("job %s: %s", j.job_b58, error)
        if not self._remove(name, j.job, j):
            return
        self.store.set_state(j.job, "exited", exit_code=137, error=error)
        self._observe(j.job, now, WORKLOAD_EXITED, 137)
        self._maybe_finish(j, finish)

    def _remove(self, name: str, job: bytes | None, view: AssignedJob | None) -> bool:
        """Save the log tail (of a job the store knows) and remove container ``name``;
        False when the runtime failed (retried next poll)."""
        assert self.runtime is not None
        if not remove_container(self.runtime, self.store, name, job):
            return False
        if view is not None:
            log.info("job %s is %s: container %s stopped and removed", view.job_b58,
                     view.status, name)
        else:
            log.warning("container %s removed: its job (label %s=%s) is not a live job of "
                        "this worker", name, JOB_LABEL, b58encode(job) if job else "?")
        if job is not None:
            self._forget_processes(job)
            self._stopped(job)
        return True

    def _stopped(self, job: bytes) -> None:
        """A job that is not Running has no container (any more)."""
        mark_stopped(self.store, job)

    def _reconcile_running(self, j: AssignedJob, uuids: tuple[str, ...], now: float,
                           finish: Callable[[AssignedJob], None] | None) -> None:
        assert self.runtime is not None
        k = j.job
        rec = self.store.get(k)
        if rec is None or rec.workload_hash != j.workload_hash:
            self._note(j, "is running but the user has not delivered its workload spec; "
                          "waiting for it")
            self._observe(k, now, WORKLOAD_PENDING)
            return
        if not uuids:
            self._note(j, "is running with a workload but has no GPUs here; not starting it",
                       logging.ERROR)
            self._observe(k, now, WORKLOAD_PENDING)
            return
        with self._lock:
            starting = k in self._starting
        if starting:  # its start (an image pull?) is still under way
            self._observe(k, now, WORKLOAD_PENDING)
            return
        name = container_name(k)
        st = self.runtime.state(name)
        if rec.finish_requested and rec.state == "failed" and st.status != "running":
            # It never started and the worker finished the job: nothing runs, nothing bills.
            self._observe(k, now, WORKLOAD_FAILED)
            return
        if st.status == "missing":
            if rec.finish_requested or rec.state in ("exited", "stopped"):
                # It ran and exited; its container is gone (removed by hand): never rerun.
                self._observe(k, now, WORKLOAD_EXITED, rec.exit_code)
                return
            self._start(j, uuids, rec, now, finish)
            return
        if st.status == "created" and (rec.state == "failed" or (
                rec.state == "starting" and self.mesh is not None
                and self.mesh.accepted(k) is not None)):
            # A start that failed half-way left a container that never ran: start afresh.
            with self._lock:
                retry = self._retry.get(k)
            if retry is not None and now < retry.at:
                self._observe(k, now, WORKLOAD_FAILED)
                return
            self.runtime.remove(name)
            self._start(j, uuids, rec, now, finish)
            return
        if st.status == "exited" and rec.state == "running" and rec.running_at is not None \
                and self._boot_time() > rec.running_at:
            log.warning("job %s: container %s was stopped by a host reboot while it ran; "
                        "starting it again", j.job_b58, name)
            self.runtime.remove(name)
            self._start(j, uuids, rec, now, finish)
            return
        if st.status == "running" and st.pid and self.mesh is not None:
            self.mesh.repair(k, st.pid)  # a cluster node whose mesh device died
        self._record(j, st, now)
        if st.status == "exited":
            self._maybe_finish(j, finish)

    def _start(self, j: AssignedJob, uuids: tuple[str, ...], rec: WorkloadRecord,
               now: float, finish: Callable[[AssignedJob], None] | None = None) -> None:
        assert self.runtime is not None
        k = j.job
        with self._lock:
            retry = self._retry.get(k)
        if retry is not None and retry.failures >= MAX_START_FAILURES:
            self._give_up(j, rec, retry.failures, now, finish)
            return
        if retry is not None and now < retry.at:
            self._observe(k, now, WORKLOAD_FAILED)
            return
        try:
            spec = spec_from_json(rec.spec)
            limits = self.limits_for(j, spec)
            secrets = open_secrets(self._seed, spec)
        except (WorkloadSpecError, LimitsError) as e:
            self._fail(j, now, f"the stored spec cannot be used: {e}")
            return
        node_env = None if spec.cluster is None or self.mesh is None else self.mesh.node_env(k)
        if spec.cluster is not None and node_env is None:  # the gang hold: no mesh, no start
            self.store.set_state(k, "pending", error=WAITING_FOR_MESH if self.mesh else NO_MESH)
            self._observe(k, now, WORKLOAD_PENDING)
            return
        cspec = ContainerSpec(
            name=container_name(k), image=spec.image, command=tuple(spec.command),
            args=tuple(spec.args),
            env=tuple(sorted((*spec.env, *secrets, *(node_env or {}).items()))),
            ports=tuple(PortBinding(p.port, p.protocol) for p in spec.ports),
            gpu_uuids=uuids if self.attach_gpus else (),
            labels=((JOB_LABEL, j.job_b58), (WORKLOAD_HASH_LABEL, j.workload_hash.hex()),
                    (PROVIDER_LABEL, b58encode(j.provider))),
            shm_size_mib=spec.shm_size_mib, scratch_mib=spec.scratch_mib,
            publish_host=self.publish_host, limits=limits,
            checkpoint_mount=self.checkpoints.mount(k, spec),
        )
        del secrets
        self.store.set_state(k, "starting")
        self._forget_processes(k)
        log.info("job %s: starting container %s (%s) on GPU(s) %s", j.job_b58, cspec.name,
                 spec.image, ", ".join(cspec.gpu_uuids) or "none (simulated GPUs)")
        self._observe(k, now, WORKLOAD_PENDING)
        hold = None if node_env is None or self.mesh is None else self.mesh.before_start(k)
        if not self.background_starts:
            self._run_container(j, cspec, now, hold)
            return
        t = threading.Thread(target=self._run_container, args=(j, cspec, None, hold),
                             name=f"start-{cspec.name}", daemon=True)
        with self._lock:
            self._starting[k] = t
        t.start()

    def _run_container(self, j: AssignedJob, cspec: ContainerSpec, now: float | None,
                       hold: Callable[[int], None] | None = None) -> None:
        """``runtime.run`` (an image pull can take minutes) and record the outcome; in a
        thread of its own unless ``background_starts`` is off. ``hold``: a cluster node's
        mesh configuration, run between the container's init and its start."""
        assert self.runtime is not None
        try:
            try:
                self.checkpoints.before_start(j.job)  # restores it before the first start
                if hold is None:
                    self.runtime.run(cspec)
                else:
                    self.runtime.run(cspec, before_start=hold)  # type: ignore[call-arg]
            except ContainerRuntimeError as e:
                self._fail(j, self.clock() if now is None else now, str(e))
                return
            with self._lock:
                self._retry.pop(j.job, None)
            st = self.runtime.state(cspec.name)
            self._record(j, st, self.clock() if now is None else now)
        except Exception:
            log.exception("job %s: starting its container failed", j.job_b58)
        finally:
            with self._lock:
                self._starting.pop(j.job, None)

    def _fail(self, j: AssignedJob, now: float, error: str) -> None:
        with self._lock:
            prev = self._retry.get(j.job)
            backoff = RETRY_BASE_S if prev is None else min(prev.backoff * 2, RETRY_CAP_S)
            failures = 1 if prev is None else prev.failures + 1
            self._retry[j.job] = _Retry(now + backoff, backoff, failures)
        self.store.set_state(j.job, "failed", error=error)
        self._observe(j.job, now, WORKLOAD_FAILED)
        if failures >= MAX_START_FAILURES:
            log.error("job %s: the workload could not be started (%d failed starts); the job "
                      "is finished: %s", j.job_b58, failures, error)
        else:
            log.error("job %s: the workload could not be started (windows are not billable "
                      "until it runs); retrying in %ds (%d of %d tries): %s", j.job_b58,
                      backoff, failures, MAX_START_FAILURES, error)

    def _give_up(self, j: AssignedJob, rec: WorkloadRecord, failures: int, now: float,
                 finish: Callable[[AssignedJob], None] | None) -> None:
        """Finish the job on chain after ``failures`` failed starts (once; retried next poll
        when the chain refuses), so the user stops paying and the GPUs are freed."""
        self._observe(j.job, now, WORKLOAD_FAILED)
        if rec.finish_requested or finish is None:
            return
        try:
            finish(j)
        except JobSourceError as e:
            log.warning("job %s: its workload failed to start %d times; finishing the job "
                        "failed (%s); retrying next poll", j.job_b58, failures, e)
            return
        self.store.mark_finish_requested(j.job)
        log.error("job %s: finished on chain: its workload failed to start %d times in a row "
                  "(last error: %s)", j.job_b58, failures, rec.error)

    def _record(self, j: AssignedJob, st: ContainerState, now: float) -> None:
        state = _STATE_OF_RUNTIME.get(st.status, "starting")
        exit_code = st.exit_code if state == "exited" else None
        if self.store.set_state(j.job, state, exit_code=exit_code, error=st.error or None,
                                running_at=now if state == "running" else None):
            level = logging.WARNING if state in ("exited", "restarting") else logging.INFO
            log.log(level, "job %s: container %s is %s%s", j.job_b58, container_name(j.job),
                    state, f" (exit code {exit_code})" if state == "exited" else "")
        self._observe(j.job, now, _CODE_OF_STATE[state], exit_code)
        self.checkpoints.observed(j.job, state)

    def _maybe_finish(self, j: AssignedJob, finish: Callable[[AssignedJob], None] | None
                      ) -> None:
        rec = self.store.get(j.job)
        if rec is None or rec.finish_requested or finish is None:
            return
        try:
            finish_on_exit = spec_from_json(rec.spec).finish_on_exit
        except WorkloadSpecError:
            return
        if not finish_on_exit:
            return
        try:
            finish(j)
        except JobSourceError as e:
            log.warning("job %s: its workload exited (finish_on_exit) but finishing the job "
                        "failed (%s); retrying next poll", j.job_b58, e)
            return
        self.store.mark_finish_requested(j.job)
        log.info("job %s: its workload exited (code %s); job finished (finish_on_exit)",
                 j.job_b58, rec.exit_code)

    def _note(self, j: AssignedJob, why: str, level: int = logging.INFO) -> None:
        with self._lock:
            if self._noted.get(j.job) == why:
                return
            self._noted[j.job] = why
        log.log(level, "job %s %s", j.job_b58, why)



def _tail_lines(data: bytes, tail: int | None) -> bytes:
    if tail is None:
        return data
    if tail <= 0:
        return b""
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-tail:])
