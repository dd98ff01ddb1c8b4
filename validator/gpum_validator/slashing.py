"""Equivocation reports: submit ``slash_equivocation`` once per (job, seq) with evidence.

The intake stores every pair of different, validly signed proofs for one (job, seq) in the
``equivocations`` table before it answers 409 and calls its ``on_equivocation`` hook; the hook
only wakes the background loop (``SettlementLoop``), so nothing here runs on an HTTP thread.
``EquivocationReporter.report_pending`` then, for each (job, seq) whose report is not
terminal:

1. checks the chain first: a closed job account -> ``done`` (nothing left to slash through
   this job); an existing EquivocationRecord PDA (``["equivocation", job, started_at, seq]``)
   means it was slashed (by us before a crash, or by anyone) -> ``done``;
2. rebuilds both receipts from the stored proof bytes (``gpu_market.proof.decode_proof`` +
   ``proof_hash``) and uses the stored receipt signatures;
3. records ``sent`` durably, then calls the SDK's ``slash_equivocation``;
4. success -> ``done`` with the signature. Program errors meaning "already slashed"
   (``AccountAlreadyInUse`` from the record's ``init``) or "job gone" -> ``done``. A transport
   failure -> ``retry`` with capped exponential backoff, forever. Any other error (program
   error, TransactionTooLarge, a signature that no longer matches the provider's keys) ->
   ``retry`` up to ``max_chain_error_attempts`` attempts, then ``failed`` (terminal, logged).

A report that is ``done`` is never resubmitted, across restarts.

``ValidatorEquivocationReporter`` does the same for committee members caught signing two
different attestations for one (job, seq): ``slash_validator_equivocation``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpu_market.proof import decode_proof, proof_hash
from solders.pubkey import Pubkey

from .chain import chain_error_name, read
from .config import SettlePolicy
from .errors import ChainUnavailable
from .metrics import Metrics
from .records import EquivocationCase, ReportStatus, Store, StoredProof
from .settle_policy import backoff
from .verify import field_of

log = logging.getLogger("gpum_validator.slash")

ALREADY_SLASHED_ERRORS = frozenset({"AccountAlreadyInUse"})
"""Errors meaning the EquivocationRecord of (job, seq) already exists."""
JOB_GONE_ERRORS = frozenset({"AccountNotInitialized", "AccountOwnedByWrongProgram",
                             "AccountDiscriminatorNotFound"})
"""Errors that mean "job gone" once a re-read confirms the job account is closed."""


@dataclass
class ReportSummary:
    """What one ``report_pending`` pass did, per (job, seq)."""

    slashed: int = 0
    already_done: int = 0
    retry_later: int = 0
    failed: int = 0
    signatures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Receipt:
    """A receipt rebuilt from stored proof bytes (what ``slash_equivocation`` takes)."""

    seq: int
    cumulative_seconds: int
    window_end: int
    proof_hash: bytes


def receipt_of(stored: StoredProof) -> Receipt:
    """The receipt the worker signed for ``stored`` (the same bytes ``authenticate`` checked)."""
    p = decode_proof(stored.proof)
    return Receipt(p.seq, p.cumulative_seconds, p.window_end, proof_hash(stored.proof))


def _report_due(reporter: Any, cases: Any, force: bool) -> ReportSummary:
    """One pass of a reporter over its open cases: submits each due one (``force`` ignores
    backoff); a chain outage is recorded on the case and retried later, never raised."""
    summary = ReportSummary()
    now = reporter.clock()
    for case in cases:
        if not force and case.next_attempt_at > now:
            summary.retry_later += 1
            continue
        try:
            reporter._report(case, summary)
        except ChainUnavailable as e:
            reporter._retry(case, str(e), summary, transport=True)
    return summary


class EquivocationReporter:
    """Turns stored equivocation evidence into at most one successful slash per (job, seq)."""

    def __init__(self, client: Any, authority: Any, store: Store, program_id: bytes,
                 policy: SettlePolicy | None = None, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.authority = authority
        self.store = store
        self.program_id = Pubkey.from_bytes(bytes(program_id))
        self.policy = policy or SettlePolicy()
        self.metrics = metrics or Metrics()
        self.clock = clock
        self._lock = threading.Lock()
        self.wakeup = threading.Event()

    def notify(self, *_: Any) -> None:
        """The intake's ``on_equivocation`` hook: wake the background loop, nothing more."""
        self.wakeup.set()

    def report_pending(self, force: bool = False) -> ReportSummary:
        """Submit every open report that is due (``force`` ignores backoff). Never raises for
        chain trouble: it is recorded and retried on a later pass."""
        with self._lock:
            return _report_due(self, self.store.equivocation_cases(open_only=True), force)

    # ------------------------------------------------------------------ one case

    def _done(self, case: EquivocationCase, outcome: str, summary: ReportSummary,
              signature: str | None = None, error: str | None = None) -> None:
        self.store.mark_report(case.kind, case.key, ReportStatus.DONE, self.clock(),
                               signature=signature, outcome=outcome, error=error)
        self.metrics.equivocation_report(outcome)
        if outcome == "slashed":
            summary.slashed += 1
            summary.signatures.append(str(signature))
        else:
            summary.already_done += 1

    def _resolved_on_chain(self, case: EquivocationCase, summary: ReportSummary) -> bool:
        job = Pubkey.from_bytes(case.job)
        view = read("the job account", lambda: self.client.fetch_job(job))
        if view is None:
            log.warning("equivocation job=%s seq=%d: job account closed; nothing to slash "
                        "through it", job, case.seq)
            self._done(case, "job_gone", summary, error="job account no longer exists")
            return True
        fetch_record = getattr(self.client, "fetch_equivocation_record", None)
        if fetch_record is not None:
            from gpu_market.pda import equivocation_pda

            record_key = equivocation_pda(job, int(field_of(view, "started_at")), case.seq,
                                          self.program_id)
            if read("the equivocation record", lambda: fetch_record(record_key)) is not None:
                log.info("equivocation job=%s seq=%d already slashed on chain", job, case.seq)
                self._done(case, "already_slashed", summary)
                return True
        return False

    def _evidence(self, case: EquivocationCase) -> tuple[StoredProof, StoredProof]:
        by_hash = {s.hash: s for s in self.store.proofs_at(case.job, case.seq)}
        return by_hash[case.hash_a], by_hash[case.hash_b]

    def _report(self, case: EquivocationCase, summary: ReportSummary) -> None:
        if self._resolved_on_chain(case, summary):
            return
        job = Pubkey.from_bytes(case.job)
        try:
            a, b = self._evidence(case)
            first, second = receipt_of(a), receipt_of(b)
        except (KeyError, ValueError) as e:  # evidence rows unusable: nothing to send, ever
            self.store.mark_report(case.kind, case.key, ReportStatus.FAILED, self.clock(),
                                   outcome="failed", error=f"evidence: {e}")
            self.metrics.equivocation_report("failed")
            summary.failed += 1
            log.error("equivocation job=%s seq=%d: stored evidence unusable: %s", job,
                      case.seq, e)
            return
        self.store.mark_report(case.kind, case.key, ReportStatus.SENT, self.clock(),
                               count_attempt=True)
        try:
            sig = self.client.slash_equivocation(self.authority, job, first,
                                                 a.receipt_signature, second,
                                                 b.receipt_signature)
        except Exception as e:  # noqa: BLE001 - classified below
            self._error(case, e, summary)
            return
        self._done(case, "slashed", summary, signature=str(sig))
        log.critical("SLASHED provider for equivocation job=%s seq=%d tx=%s", job, case.seq,
                     sig)

    def _error(self, case: EquivocationCase, exc: Exception, summary: ReportSummary) -> None:
        job = Pubkey.from_bytes(case.job)
        name = chain_error_name(exc)
        if name in ALREADY_SLASHED_ERRORS:
            log.info("equivocation job=%s seq=%d: %s, already slashed; done", job, case.seq,
                     name)
            self._done(case, "already_slashed", summary, error=name)
            return
        if name in JOB_GONE_ERRORS:
            try:
                gone = read("the job account", lambda: self.client.fetch_job(job)) is None
            except ChainUnavailable:
                gone = False
            if gone:
                self._done(case, "job_gone", summary, error=f"{name}: job account closed")
                return
        if name is None and not isinstance(exc, ValueError):
            self._retry(case, f"{type(exc).__name__}: {exc}", summary, transport=True)
            return
        self._retry(case, f"{name or type(exc).__name__}: {exc}", summary, transport=False)

    def _retry(self, case: EquivocationCase, why: str, summary: ReportSummary, *,
               transport: bool) -> None:
        now = self.clock()
        attempts = case.attempts + 1  # this one included
        job = Pubkey.from_bytes(case.job)
        if not transport and attempts >= self.policy.max_chain_error_attempts:
            self.store.mark_report(case.kind, case.key, ReportStatus.FAILED, now,
                                   outcome="failed", error=why)
            self.metrics.equivocation_report("failed")
            summary.failed += 1
            log.error("equivocation job=%s seq=%d: slash_equivocation FAILED after %d "
                      "attempts: %s (evidence kept in the store)", job, case.seq, attempts, why)
            return
        delay = backoff(self.policy, attempts)
        self.store.mark_report(case.kind, case.key, ReportStatus.RETRY, now, error=why,
                               next_attempt_at=now + delay)
        self.metrics.equivocation_report("retry")
        summary.retry_later += 1
        log.warning("equivocation job=%s seq=%d: slash_equivocation not done (%s); retry in "
                    "%.0fs", job, case.seq, why, delay)


class ValidatorEquivocationReporter:
    """Turns a member's two different attestations for one (job, seq), received by this
    validator as a leader (``Store.record_received_attestation``), into at most one
    successful ``slash_validator_equivocation`` per (job, seq, member).

    Like ``EquivocationReporter``: the job gone -> ``done``; ``sent`` recorded before the
    call; ``AccountAlreadyInUse`` (the record exists: slashed already, by anyone) -> ``done``;
    transport errors retry with backoff forever, other errors up to
    ``max_chain_error_attempts``, then ``failed``. The receipts and signatures come from the
    stored attestations (the first two different ones).
    """

    def __init__(self, client: Any, authority: Any, store: Store,
                 policy: SettlePolicy | None = None, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.authority = authority
        self.store = store
        self.policy = policy or SettlePolicy()
        self.metrics = metrics or Metrics()
        self.clock = clock
        self._lock = threading.Lock()

    def report_pending(self, force: bool = False) -> ReportSummary:
        with self._lock:
            return _report_due(self, self.store.validator_equivocation_cases(open_only=True), force)

    def _mark(self, case: Any, status: ReportStatus, **kw: Any) -> None:
        self.store.mark_report(case.kind, case.key, status, self.clock(), **kw)

    def _done(self, case: Any, outcome: str, summary: ReportSummary,
              signature: str | None = None, error: str | None = None) -> None:
        self._mark(case, ReportStatus.DONE, signature=signature, outcome=outcome, error=error)
        self.metrics.validator_equivocation_report(outcome)
        if outcome == "slashed":
            summary.slashed += 1
            summary.signatures.append(str(signature))
        else:
            summary.already_done += 1

    def _report(self, case: Any, summary: ReportSummary) -> None:
        job = Pubkey.from_bytes(case.job)
        member = Pubkey.from_bytes(case.member)
        if read("the job account", lambda: self.client.fetch_job(job)) is None:
            self._done(case, "job_gone", summary, error="job account no longer exists")
            return
        atts = self.store.received_attestations(case.job, case.seq, case.member)
        pair = next(((a, b) for i, a in enumerate(atts) for b in atts[i + 1:]
                     if (a.approved_seconds, a.proof_hash) != (b.approved_seconds,
                                                               b.proof_hash)), None)
        if pair is None:
            self._mark(case, ReportStatus.FAILED, outcome="failed", error="evidence rows missing")
            self.metrics.validator_equivocation_report("failed")
            summary.failed += 1
            return
        a, b = pair
        first = Receipt(a.seq, a.cumulative_seconds, a.window_end, a.proof_hash)
        second = Receipt(b.seq, b.cumulative_seconds, b.window_end, b.proof_hash)
        self._mark(case, ReportStatus.SENT, count_attempt=True)
        try:
            sig = self.client.slash_validator_equivocation(
                self.authority, job, member, first, a.approved_seconds, a.signature,
                second, b.approved_seconds, b.signature)
        except Exception as e:  # noqa: BLE001 - classified below
            name = chain_error_name(e)
            if name in ALREADY_SLASHED_ERRORS:
                self._done(case, "already_slashed", summary, error=name)
            elif name is None and not isinstance(e, ValueError):
                self._retry(case, f"{type(e).__name__}: {e}", summary, transport=True)
            else:
                self._retry(case, f"{name or type(e).__name__}: {e}", summary, transport=False)
            return
        self._done(case, "slashed", summary, signature=str(sig))
        log.critical("SLASHED validator %s for equivocation job=%s seq=%d tx=%s", member, job,
                     case.seq, sig)

    def _retry(self, case: Any, why: str, summary: ReportSummary, *, transport: bool) -> None:
        now = self.clock()
        attempts = case.attempts + 1
        if not transport and attempts >= self.policy.max_chain_error_attempts:
            self._mark(case, ReportStatus.FAILED, outcome="failed", error=why)
            self.metrics.validator_equivocation_report("failed")
            summary.failed += 1
            log.error("validator equivocation job=%s seq=%d: FAILED after %d attempts: %s",
                      Pubkey.from_bytes(case.job), case.seq, attempts, why)
            return
        delay = backoff(self.policy, attempts)
        self._mark(case, ReportStatus.RETRY, error=why, next_attempt_at=now + delay)
        self.metrics.validator_equivocation_report("retry")
        summary.retry_later += 1
        log.warning("validator equivocation job=%s seq=%d not reported (%s); retry in %.0fs",
                    Pubkey.from_bytes(case.job), case.seq, why, delay)
