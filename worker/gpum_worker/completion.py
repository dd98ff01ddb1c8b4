"""Completing this provider's Finishing jobs once their grace is over: ``Completer``.

A Finishing job keeps the provider's GPUs (and stake) booked until someone ends it: the
user's ``close_job``, or anyone's ``complete_job`` strictly after ``ended_at +
terms.grace_seconds`` (docs/protocol.md, "Job lifecycle"). The worker sends ``complete_job``
itself, so nobody has to come back after the grace to free the GPUs:

* never before the chain allows it: a job is due once the worker's clock passed the grace's
  end, and then the chain's own clock (``JobSource.chain_time``) is read first; a chain that
  is still within the grace puts the job off until its clock has passed it;
* idempotent: one attempt per job at a time; a job that stays Finishing after a sent
  ``complete_job`` (a dropped transaction) is tried again after the backoff, and an
  attempt the chain refuses because the job already ended costs nothing;
* a refusal or failure is retried with backoff (``RETRY_BASE_S`` doubling to
  ``RETRY_CAP_S``) and logged once per distinct message (WARNING), not on every poll;
* with ``background`` the chain reads and the transaction run in a thread per job
  (``background.Background``), never on the agent's main loop.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from .background import Background, Pending
from .errors import JobSourceError
from .jobs import AssignedJob, JobSource

log = logging.getLogger("gpum_worker.completion")

RETRY_BASE_S = 5.0
RETRY_CAP_S = 300.0
RESEND_AFTER_S = 30.0
"""A job still listed Finishing this long after its ``complete_job`` was sent is tried again."""


@dataclass
class _State:
    next_at: float
    backoff: float = 0.0
    noted: str | None = None


def grace_end(j: AssignedJob) -> int | None:
    """``ended_at + terms.grace_seconds`` of a Finishing job; None when not known."""
    if j.status != "finishing" or j.ended_at is None or j.terms is None \
            or j.terms.grace_seconds is None:
        return None
    return j.ended_at + j.terms.grace_seconds


class Completer:
    """Sends ``complete_job`` for the Finishing jobs it is shown (see the module docstring)."""

    def __init__(self, source: JobSource, background: Background | None = None) -> None:
        self.source = source
        self.background = background
        self._jobs: dict[bytes, _State] = {}

    def poll(self, jobs: Iterable[AssignedJob], now: float) -> None:
        """Look at this poll's jobs; complete those whose grace is over."""
        seen: set[bytes] = set()
        for j in jobs:
            end = grace_end(j)
            if end is None:
                continue
            seen.add(j.job)
            st = self._jobs.setdefault(j.job, _State(next_at=end + 1))
            if now < st.next_at:
                continue
            self._attempt(j, end, st, now)
        for k in set(self._jobs) - seen:
            del self._jobs[k]
            if self.background is not None:
                self.background.forget(k)

    def _attempt(self, j: AssignedJob, end: int, st: _State, now: float) -> None:
        def call() -> int | None:
            chain_now = self.source.chain_time()
            if chain_now <= end:
                return end + 1 - chain_now  # seconds the chain is still within the grace
            self.source.complete(j)
            return None

        try:
            if self.background is None:
                wait = call()
            else:
                wait = self.background.result(j.job, ("complete", end), call)
        except Pending:
            return
        except JobSourceError as e:
            st.backoff = RETRY_BASE_S if st.backoff == 0 else min(st.backoff * 2, RETRY_CAP_S)
            st.next_at = now + st.backoff
            msg = str(e)
            if st.noted != msg:
                st.noted = msg
                log.warning("job %s: its grace is over but complete_job failed (%s); retrying "
                            "in %.0f s, then less often", j.job_b58, msg, st.backoff)
            return
        if wait is not None:
            st.next_at = now + wait
            if st.noted != "early":
                st.noted = "early"
                log.info("job %s: the chain's clock is %d s short of the grace's end; "
                         "completing it then", j.job_b58, wait)
            return
        st.next_at, st.backoff, st.noted = now + RESEND_AFTER_S, 0.0, None
        log.info("job %s: grace over, completed (complete_job): the GPUs are free", j.job_b58)
