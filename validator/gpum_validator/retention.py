"""Retention: how long the store keeps what jobs that ended no longer need.

``Pruner.run_once`` (a task of the settlement loop) deletes, ``retention_days`` after a job
ended on chain (completed, cancelled, failed, declined, or its account closed), the job's
proofs, missed windows, intents and non-evidence attestations (``Store.prune``; equivocation
evidence and the attestations this validator gave are kept), a bounded amount of work per
call in small transactions, so the intake never waits long for it.

A job's chain status is kept fresh by the settle pass and the downtime reporter while it
runs; a job that stopped sending proofs and whose account was closed before anyone read its
final status would stay "running" for ever, so the pruner re-reads (at most
``recheck_limit`` per call) jobs with no proof and no chain read for the retention period,
and marks those whose account is gone ``closed`` (``Store.mark_job_closed``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from solders.pubkey import Pubkey

from .chain import job_info, read
from .errors import ChainUnavailable
from .records import Store

log = logging.getLogger("gpum_validator.retention")

DEFAULT_RETENTION_DAYS = 30.0
DAY_SECONDS = 86_400


class Pruner:
    """Prunes ``store`` every ``every_seconds`` (at most ``budget_seconds`` of work per call;
    what is left waits for the next call). ``client`` (the chain) is optional: without it
    closed accounts are not looked for."""

    def __init__(self, store: Store, retention_days: float = DEFAULT_RETENTION_DAYS,
                 client: Any = None, *, clock: Callable[[], float] = time.time,
                 every_seconds: float = 60.0, budget_seconds: float = 0.5,
                 recheck_limit: int = 20, batch_rows: int = 200) -> None:
        if retention_days <= 0:
            raise ValueError("retention_days must be positive")
        self.store = store
        self.retention_days = retention_days
        self.client = client
        self.clock = clock
        self.every_seconds = every_seconds
        self.budget_seconds = budget_seconds
        self.recheck_limit = recheck_limit
        self.batch_rows = batch_rows
        self._next_at = 0.0

    def run_once(self, force: bool = False) -> dict[str, int]:
        """One bounded pass (nothing before ``every_seconds`` since the last one that
        finished its work, unless ``force``); the rows deleted per table."""
        now = self.clock()
        if not force and now < self._next_at:
            return {}
        before = now - self.retention_days * DAY_SECONDS
        if self.client is not None:
            self._recheck(before, now)
        deleted = self.store.prune(before, batch_rows=self.batch_rows,
                                   max_seconds=self.budget_seconds)
        if any(deleted.values()):
            log.info("pruned jobs ended before %d days ago: %s", self.retention_days,
                     " ".join(f"{k}={v}" for k, v in deleted.items() if v))
        # A pass that used its whole budget may have more to do: go on at the next call.
        self._next_at = now if self.clock() - now >= self.budget_seconds else \
            now + self.every_seconds
        return deleted

    def _recheck(self, before: float, now: float) -> None:
        for job in self.store.stale_open_jobs(before, self.recheck_limit):
            try:
                view = read("the job account",
                            lambda job=job: self.client.fetch_job(Pubkey.from_bytes(job)))
            except ChainUnavailable as e:
                log.warning("retention: job status re-read postponed: %s", e)
                return
            if view is None:
                self.store.mark_job_closed(job, now)
            else:
                self.store.update_chain_info(job, job_info(view), now)
