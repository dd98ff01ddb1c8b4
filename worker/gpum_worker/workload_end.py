"""The end of a job's container, one code path for the worker (``workloads.WorkloadManager``)
and the reaper (``reaper``), so either records it alike:

* ``remove_container``: the last ``LOG_TAIL_LINES`` lines (at most ``LOG_TAIL_BYTES``) of the
  container's log are saved into the store when the store knows the job, then the container
  is stopped (SIGTERM, SIGKILL after 5 s) and removed. A container already gone (the other
  process removed it a moment before) is no error; its log tail is then the one that
  process saved. False only when the runtime failed: nothing was recorded, the caller retries.
* ``mark_stopped``: a job that left Running has no container: its record's state becomes
  "stopped" (exit code and error kept).
* ``record_end``: the job ended with final ``status``: the store's tombstone, with why it
  ended (``job_end.end_reason`` from the record and the job as last read). Recording it
  again updates status and reason, never the time it ended.
* ``job_of_label``: the job a container's ``gpum.job`` label names, or None.
"""

from __future__ import annotations

import logging

from .errors import ContainerRuntimeError
from .job_end import end_reason
from .jobs import AssignedJob
from .keys import b58decode
from .runtime import ContainerRuntime
from .workload_store import LOG_TAIL_BYTES, WorkloadStore

log = logging.getLogger("gpum_worker.workloads")

LOG_TAIL_LINES = 10_000
"""At most this many lines of a removed container's log are saved."""
PROVIDER_LABEL = "gpum.provider"
"""Container label naming the provider (PDA, base58) whose worker started it. Removal of
containers whose job is not live only ever looks at containers of this provider: two workers
of different providers on one host (or a test beside a worker) never remove each other's
containers."""


def remove_container(runtime: ContainerRuntime, store: WorkloadStore, name: str,
                     job: bytes | None) -> bool:
    """Save the log tail of ``name`` (when the store knows ``job``) and remove it; False when
    the runtime failed (see the module docstring). Raises ``WorkloadUnavailable`` when the
    store cannot be read."""
    rec = store.get(job) if job is not None else None
    try:
        if job is not None and rec is not None:
            try:
                store.save_logs(job, runtime.logs(name, tail=LOG_TAIL_LINES,
                                                  max_bytes=LOG_TAIL_BYTES))
            except ContainerRuntimeError as e:
                log.warning("container %s: cannot save its log before removal: %s", name, e)
        runtime.remove(name)
    except ContainerRuntimeError as e:
        log.warning("cannot remove container %s (%s); retrying next poll", name, e)
        return False
    return True


def mark_stopped(store: WorkloadStore, job: bytes) -> None:
    """A job that is not Running has no container (any more)."""
    rec = store.get(job)
    if rec is not None and rec.state not in ("pending", "stopped"):
        store.set_state(job, "stopped", exit_code=rec.exit_code, error=rec.error)


def record_end(store: WorkloadStore, job: bytes, status: str,
               view: AssignedJob | None) -> str | None:
    """Record that ``job`` ended with final ``status`` ("closed": the user closed it);
    ``view``: the job as last read from chain. The reason given when the job has a workload
    record, else None (its tombstone is recorded all the same). Raises ``WorkloadUnavailable``
    when the store fails."""
    rec = store.get(job)
    reason = end_reason(status, rec, view)
    store.mark_ended(job, status, reason)
    return reason if rec is not None else None


def job_of_label(label: str) -> bytes | None:
    try:
        raw = b58decode(label)
    except ValueError:
        return None
    return raw if len(raw) == 32 else None
