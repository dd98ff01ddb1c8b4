"""Why a job ended, in words its user reads (pure): ``end_reason``.

Derived from the chain's final status of the job, what the worker knew of it before (was it
Finishing, did this worker finish it) and its container (exit code, failed start):

| chain | reason |
|---|---|
| Completed, booked escrow below one second's rate | the escrow ran dry |
| Completed or Finishing, finished by this worker | the container exited N (finish_on_exit), or could not be started |
| Completed or Finishing otherwise | finished by the user (or the provider's owner) |
| Failed | the provider failed (its worker went silent: expired, or slashed) |
| Cancelled / Declined | cancelled by the user / declined by the provider |
| closed (tombstone) | closed by the user |

When the container had exited (or never started) and the reason does not say so already,
that is added: "the provider failed ...; the container had exited 3".
"""

from __future__ import annotations

from .jobs import AssignedJob
from .workload_store import WorkloadRecord

_PLAIN = {
    "failed": "the provider failed: its worker stopped proving the job's GPUs (the job "
              "expired, or the provider was slashed for it)",
    "cancelled": "cancelled by the user before it started",
    "declined": "declined by the provider",
    "closed": "closed by the user",
    "removed": "removed from the worker's job list",
}


def container_note(rec: WorkloadRecord | None) -> str | None:
    """What became of the container, when it ended on its own (or never started)."""
    if rec is None:
        return None
    if rec.state == "failed":
        return "the container could not be started" + (f" ({rec.error})" if rec.error else "")
    if rec.exit_code is not None and rec.state in ("exited", "stopped"):
        return f"the container exited {rec.exit_code}"
    return None


def end_reason(status: str, rec: WorkloadRecord | None = None,
               view: AssignedJob | None = None) -> str:
    """Why the job is ``status`` (its final status, or "finishing"): see the module
    docstring. ``rec`` is its workload record, ``view`` the job as last read from chain."""
    note = container_note(rec)
    if status in ("completed", "finishing"):
        if status == "completed" and view is not None and view.escrow_dry:
            reason = "the escrow ran dry: the deposit is spent"
        elif rec is not None and rec.finish_requested:
            if rec.state == "failed":
                reason = f"the provider's worker finished it: {note}"
            elif note is not None:
                reason = f"{note} (finish_on_exit): the provider's worker finished the job"
            else:
                reason = "finished by the provider's worker"
            return reason
        else:
            reason = "finished by the user (or the provider's owner)"
    else:
        reason = _PLAIN.get(status, f"the job is {status}")
    if note is not None:
        reason += f"; {note.replace('exited', 'had exited', 1)}"
    return reason
