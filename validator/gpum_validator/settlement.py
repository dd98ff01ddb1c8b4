"""Settlement: when to settle (pure ``due_reason``) and the crash-safe settler (I/O).

Policy. A job's newest accepted receipt covers every second up to its cumulative total, so
only that receipt is settled. "Window" is the job's own ``terms.window_seconds`` (as last
read from chain). It is due when (first match wins):

* ``job_finishing``   the job is Finishing on chain (its settlement grace is short);
* ``escrow_low``      after paying the accepted-but-unsettled seconds the escrow covers fewer
                      than ``low_escrow_windows`` windows;
* ``every_n_windows`` ``settle_every_windows`` accepted windows are unsettled;
* ``stale``           the oldest unsettled window ended ``max_unsettled_age_windows`` windows
                      ago (a job whose worker went quiet still gets paid).

Crash safety. For each due job an intent holding the exact receipt is written to the store
(status ``intended``) *before* anything is sent; it becomes ``sent`` right before the
transaction, then ``confirmed`` or ``failed`` (terminal). Every open intent (after a
restart, or after a transport error) is first checked against the chain: if
``job.last_seq >= intent.seq_to`` someone (this process before a crash, or another
validator) already settled it and it is marked confirmed without resending. Program errors
that mean "already settled" (StaleSequence, WindowNotAfterLast, CumulativeDecreased) end
the intent, never a loop; transport errors retry with capped exponential backoff.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from solders.pubkey import Pubkey

from .chain import ChainClient, chain_error_name, job_info, read
from .config import SettlePolicy
from .errors import ChainUnavailable
from .metrics import Metrics
from .store import ChainJobInfo, Intent, SettleCandidate, Store

log = logging.getLogger("gpum_validator.settle")

ALREADY_SETTLED_ERRORS = frozenset({"StaleSequence", "WindowNotAfterLast", "CumulativeDecreased"})
"""Program errors meaning a receipt at or after this one was settled first."""
RETRYABLE_CHAIN_ERRORS = frozenset({"WindowEndInFuture"})
"""Program errors that may pass later (clock skew); retried ``max_chain_error_attempts``."""
SETTLEABLE_STATUSES = ("running", "finishing")


def due_reason(c: SettleCandidate, policy: SettlePolicy, now: float) -> str | None:
    """Why candidate ``c`` should be settled now, or None (see the module docstring).

    The rules that are measured in windows (``escrow_low``, ``stale``) use the job's
    ``terms.window_seconds`` from ``c.chain``; without chain facts only ``every_n_windows``
    can apply (the settler always reads the chain before it asks)."""
    chain = c.chain
    window = chain.window_seconds if chain is not None else 0
    if chain is not None:
        if chain.status not in SETTLEABLE_STATUSES:
            return None
        if chain.status == "finishing":
            return "job_finishing"
        unsettled = max(0, c.accepted_cumulative - chain.settled_seconds)
        left = chain.escrow_remaining - unsettled * chain.rate_per_second
        if left < policy.low_escrow_windows * window * chain.rate_per_second:
            return "escrow_low"
    if c.unsettled_windows >= policy.settle_every_windows:
        return "every_n_windows"
    if window > 0 and (now - c.oldest_unsettled_window_end
                       >= policy.max_unsettled_age_windows * window):
        return "stale"
    return None


def backoff(policy: SettlePolicy, attempts: int) -> float:
    """Delay after ``attempts`` failed attempts: min(cap, base * 2**(attempts-1))."""
    return min(policy.retry_cap_seconds,
               policy.retry_base_seconds * 2 ** max(0, min(attempts - 1, 30)))


def _default_item_factory() -> Callable[..., Any]:
    """The SDK's SettleItem (docs/sdk-api.md lists it with the client; it lives in settle)."""
    try:
        from gpu_market.client import SettleItem
    except ImportError:
        from gpu_market.settle import SettleItem
    return SettleItem


@dataclass
class SettleReport:
    """What one ``settle_now`` pass did (receipt counts)."""

    intended: int = 0
    confirmed: int = 0
    already_settled: int = 0
    failed: int = 0
    retry_later: int = 0
    signatures: list[str] = field(default_factory=list)


class Settler:
    """Turns due jobs into intents and intents into ``settle`` transactions."""

    def __init__(self, client: ChainClient, authority: Any, store: Store,
                 policy: SettlePolicy | None = None,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.time,
                 item_factory: Callable[..., Any] | None = None) -> None:
        self.client = client
        self.authority = authority
        self.store = store
        self.policy = policy or SettlePolicy()
        self.policy.validate()
        self.metrics = metrics or Metrics()
        self.clock = clock
        self._item_factory = item_factory
        self._lock = threading.Lock()
        self.last_settlement_at: float | None = None

    @property
    def item_factory(self) -> Callable[..., Any]:
        if self._item_factory is None:
            self._item_factory = _default_item_factory()
        return self._item_factory

    def settle_now(self, force: bool = False) -> SettleReport:
        """One pass: refresh chain facts, record intents for due jobs, send open intents.

        ``force`` settles every candidate regardless of the policy and ignores backoff.
        Raises nothing for chain trouble: it is logged and retried on the next pass.
        """
        with self._lock:
            report = SettleReport()
            try:
                self._plan(report, force)
            except ChainUnavailable as e:
                log.warning("settlement planning postponed: %s", e)
            self._send_open(report, force)
            return report

    # ------------------------------------------------------------------ planning

    def _refresh(self, job: bytes) -> ChainJobInfo | None:
        view = read("the job account", lambda: self.client.fetch_job(Pubkey.from_bytes(job)))
        if view is None:
            return None
        info = job_info(view)
        self.store.update_chain_info(job, info, self.clock())
        return info

    def _plan(self, report: SettleReport, force: bool) -> None:
        now = self.clock()
        for c in self.store.settle_candidates():
            if (c.chain is None or c.chain.window_seconds <= 0
                    or now - c.chain_checked_at >= self.policy.chain_refresh_seconds):
                info = self._refresh(c.job)
                if info is None:
                    continue
                c = SettleCandidate(c.job, c.latest, max(c.covered_seq, info.last_seq),
                                    c.unsettled_windows, c.oldest_unsettled_window_end,
                                    c.accepted_cumulative, info, now)
                if c.latest.seq <= info.last_seq:
                    continue
            reason = due_reason(c, self.policy, now)
            if force and reason is None and c.chain and c.chain.status in SETTLEABLE_STATUSES:
                reason = "forced"
            if reason is None:
                continue
            intent = self.store.add_intent(c.latest, c.covered_seq + 1, now)
            report.intended += 1
            log.info("settle intent id=%d job=%s seq=%d..%d cumulative=%d reason=%s", intent.id,
                     Pubkey.from_bytes(c.job), intent.seq_from, intent.seq_to,
                     intent.cumulative_seconds, reason)

    # ------------------------------------------------------------------ sending

    def _send_open(self, report: SettleReport, force: bool) -> None:
        now = self.clock()
        ready: list[Intent] = []
        for it in self.store.open_intents():
            if not force and it.next_attempt_at > now:
                report.retry_later += 1
                continue
            try:
                if self._resolved_on_chain(it, report):
                    continue
            except ChainUnavailable as e:
                self._transport_retry([it], str(e), report)
                continue
            ready.append(it)
        if not ready:
            return
        try:
            per_tx = max(1, int(self.client.max_settle_items_per_tx()))
        except Exception as e:  # noqa: BLE001 - reported and retried
            self._transport_retry(ready, f"max_settle_items_per_tx failed: {e}", report)
            return
        for i in range(0, len(ready), per_tx):
            self._send(ready[i:i + per_tx], report)

    def _resolved_on_chain(self, it: Intent, report: SettleReport) -> bool:
        """Close ``it`` if the chain already decides it; True when closed."""
        job = Pubkey.from_bytes(it.job)
        info = self._refresh(it.job)
        now = self.clock()
        if info is None:
            self.store.mark_intent(it.id, "failed", now, error="job account no longer exists")
            self.metrics.settlement("failed")
            report.failed += 1
            log.warning("settle intent id=%d job=%s failed: job account closed", it.id, job)
            return True
        if info.last_seq >= it.seq_to:
            self.store.mark_intent(it.id, "confirmed", now,
                                   error=f"already settled on chain (last_seq={info.last_seq})")
            self.metrics.settlement("confirmed")
            report.already_settled += 1
            log.info("settle intent id=%d job=%s seq=%d already settled on chain (last_seq=%d)",
                     it.id, job, it.seq_to, info.last_seq)
            return True
        if info.status not in SETTLEABLE_STATUSES:
            self.store.mark_intent(it.id, "failed", now,
                                   error=f"job is {info.status}; it can no longer be settled")
            self.metrics.settlement("failed")
            report.failed += 1
            log.warning("settle intent id=%d job=%s failed: job is %s", it.id, job, info.status)
            return True
        return False

    def _item(self, it: Intent) -> Any:
        return self.item_factory(
            job=Pubkey.from_bytes(it.job), seq=it.seq_to,
            cumulative_seconds=it.cumulative_seconds, window_end=it.window_end,
            proof_hash=it.proof_hash, worker_key=Pubkey.from_bytes(it.worker_key),
            receipt_signature=it.receipt_signature)

    def _send(self, batch: list[Intent], report: SettleReport) -> None:
        now = self.clock()
        for it in batch:
            self.store.mark_intent(it.id, "sent", now, count_attempt=True)
        self.metrics.settlement("sent", len(batch))
        try:
            sig = self.client.settle(self.authority, [self._item(it) for it in batch])
        except Exception as e:  # noqa: BLE001 - classified below
            name = chain_error_name(e)
            if name is None and isinstance(e, ValueError):
                name = type(e).__name__  # e.g. TransactionTooLarge: nothing was sent
            if name is None:
                self._transport_retry(batch, f"{type(e).__name__}: {e}", report, "sent")
            elif len(batch) > 1:
                # One bad item fails the whole transaction: resolve each on its own.
                log.warning("batched settle of %d receipts failed with %s; retrying singly",
                            len(batch), name)
                for it in batch:
                    self._send_single_after_batch(it, report)
            else:
                self._chain_error(batch[0], name, e, report)
            return
        now = self.clock()
        sig_s = str(sig)
        for it in batch:
            self.store.mark_intent(it.id, "confirmed", now, signature=sig_s)
        self.metrics.settlement("confirmed", len(batch))
        report.confirmed += len(batch)
        report.signatures.append(sig_s)
        self.last_settlement_at = now
        log.info("settled %d receipt(s) in tx %s: %s", len(batch), sig_s,
                 ", ".join(f"{Pubkey.from_bytes(it.job)}#{it.seq_to}" for it in batch))

    def _send_single_after_batch(self, it: Intent, report: SettleReport) -> None:
        try:
            if self._resolved_on_chain(it, report):
                return
        except ChainUnavailable as e:
            self._transport_retry([it], str(e), report)
            return
        self._send([it], report)

    def _chain_error(self, it: Intent, name: str, exc: Exception, report: SettleReport) -> None:
        now = self.clock()
        job = Pubkey.from_bytes(it.job)
        if name in ALREADY_SETTLED_ERRORS:
            self.store.mark_intent(it.id, "confirmed", now,
                                   error=f"{name}: a receipt at or after this one was settled "
                                   "first")
            self.metrics.settlement("confirmed")
            report.already_settled += 1
            log.info("settle intent id=%d job=%s seq=%d: %s, already settled; done", it.id, job,
                     it.seq_to, name)
            return
        attempts = it.attempts + 1
        if name in RETRYABLE_CHAIN_ERRORS and attempts < self.policy.max_chain_error_attempts:
            delay = backoff(self.policy, attempts)
            self.store.mark_intent(it.id, "sent", now, error=name, next_attempt_at=now + delay)
            report.retry_later += 1
            log.warning("settle intent id=%d job=%s: %s; retry in %.0fs", it.id, job, name, delay)
            return
        self.store.mark_intent(it.id, "failed", now, error=f"{name}: {exc}")
        self.metrics.settlement("failed")
        report.failed += 1
        log.error("settle intent id=%d job=%s seq=%d FAILED: %s (%s); a newer receipt will be "
                  "tried when due", it.id, job, it.seq_to, name, exc)

    def _transport_retry(self, batch: list[Intent], why: str, report: SettleReport,
                         status: str | None = None) -> None:
        """Keep the intents open and retry after a backoff; nothing is lost or duplicated
        because the next attempt first re-checks the chain."""
        now = self.clock()
        for it in batch:
            counted = status == "sent"  # _send already counted this attempt
            delay = backoff(self.policy, it.attempts + 1)
            self.store.mark_intent(it.id, status or it.status, now, error=why,
                                   next_attempt_at=now + delay, count_attempt=not counted)
            report.retry_later += 1
            log.warning("settle intent id=%d job=%s not sent (%s); retry in %.0fs", it.id,
                        Pubkey.from_bytes(it.job), why, delay)


class SettlementLoop:
    """Runs ``settler.settle_now()`` every ``interval`` seconds on a daemon thread, and,
    when given a ``reporter`` (``slashing.EquivocationReporter``), its ``report_pending()``
    right after; the reporter's ``notify`` (the intake's equivocation hook) wakes the loop
    at once."""

    def __init__(self, settler: Settler, interval: float = 5.0, reporter: Any = None) -> None:
        self.settler = settler
        self.interval = interval
        self.reporter = reporter
        self._stop = threading.Event()
        self._wake: threading.Event = getattr(reporter, "wakeup", None) or threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpum-settle", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def wake(self) -> None:
        """Run the next pass now instead of after the interval."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.settler.settle_now()
            except Exception:  # the loop must survive; the error is logged
                log.exception("settlement pass failed; retrying in %.0fs", self.interval)
            if self.reporter is not None:
                try:
                    self.reporter.report_pending()
                except Exception:  # same: logged, retried next pass
                    log.exception("equivocation report pass failed; retrying in %.0fs",
                                  self.interval)
            self._wake.wait(self.interval)
