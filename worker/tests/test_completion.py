"""The worker completes its own Finishing jobs once the grace is over (``completion.py``)."""

from __future__ import annotations

import logging

import pytest
from gpum_worker.completion import RETRY_BASE_S, Completer
from gpum_worker.errors import JobSourceError
from gpum_worker.jobs import AssignedJob, JobTerms, StaticJobSource

T0 = 1_700_000_000
GRACE = 8
TERMS = JobTerms(window_seconds=2, max_skew_seconds=5, temp_critical_c=95,
                 ecc_uncorrected_max=0, grace_seconds=GRACE)


class Clock:
    def __init__(self) -> None:
        self.t = float(T0)

    def __call__(self) -> float:
        return self.t


def finishing(n: int = 1) -> AssignedJob:
    return AssignedJob(job=bytes([n]) * 32, market=bytes(32), program_id=bytes(32),
                       provider=bytes(32), gpu_count=1, status="finishing", started_at=T0 - 100,
                       ended_at=T0, terms=TERMS)


def test_completed_once_the_chains_grace_is_over_and_never_before() -> None:
    chain = Clock()
    j = finishing()
    src = StaticJobSource([j], clock=chain)
    c = Completer(src)
    for t in range(T0, T0 + GRACE + 1):  # within the grace (and at its last second): nothing
        chain.t = t
        c.poll([j], t)
    assert src.completed == []
    # The worker's clock is past the grace, the chain's is not: still nothing sent.
    chain.t = T0 + GRACE
    c.poll([j], T0 + GRACE + 5)
    assert src.completed == [] and src.job_status(j.job) == "finishing"
    chain.t = T0 + GRACE + 1
    c.poll([j], T0 + GRACE + 6)
    assert src.completed == [j.job] and src.job_status(j.job) == "completed"
    c.poll([j], T0 + GRACE + 7)  # the listing still shows it finishing: not sent again
    assert src.completed == [j.job]


def test_a_refusal_is_retried_with_backoff_and_logged_once(caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    j = finishing()
    src = StaticJobSource([j], clock=lambda: T0 + 100)
    calls: list[float] = []

    def refuse(job: AssignedJob) -> None:
        calls.append(1)
        raise JobSourceError("completing job: InvalidJobStatus")

    src.complete = refuse  # type: ignore[method-assign]
    c = Completer(src)
    with caplog.at_level(logging.WARNING, logger="gpum_worker.completion"):
        for t in range(T0 + 100, T0 + 100 + int(RETRY_BASE_S) * 3 + 1):
            c.poll([j], t)
    assert len(calls) == 3  # at +0, +5, +15 (5 s doubling), not once per poll
    assert sum("complete_job failed" in r.message for r in caplog.records) == 1


def test_jobs_without_a_known_grace_or_not_finishing_are_left_alone() -> None:
    src = StaticJobSource([], clock=lambda: T0 + 1000)
    c = Completer(src)
    no_grace = AssignedJob(**{**finishing(2).__dict__, "terms": None})
    running = AssignedJob(**{**finishing(3).__dict__, "status": "running"})
    asked: list[AssignedJob] = []
    src.complete = asked.append  # type: ignore[method-assign]
    c.poll([no_grace, running], T0 + 1000)
    assert asked == []
