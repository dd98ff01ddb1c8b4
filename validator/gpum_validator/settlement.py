"""Settlement: when to settle (pure ``due_reason``), settle rounds among the job's committee,
and the crash-safe settler (I/O).

Policy. A job's newest accepted receipt covers every second up to its cumulative claim, so
only that receipt is settled. "Window" is the job's own ``terms.window_seconds`` (as last
read from chain). It is due when (first match wins):

* ``job_finishing``   the job is Finishing on chain (its settlement grace is short);
* ``escrow_low``      after paying the approved-but-unpaid seconds the escrow covers fewer
                      than ``low_escrow_windows`` windows;
* ``every_n_windows`` ``settle_every_windows`` accepted windows are unsettled;
* ``stale``           the oldest unsettled window ended ``max_unsettled_age_windows`` windows
                      ago (a job whose worker went quiet still gets paid).

Rounds (DESIGN section 6). A due job's round is ``newest accepted seq // settle_every``; its
leader is ``attest.leader_of(job, round, committee, timeouts)``, where ``timeouts`` counts the
``leader_timeout_windows`` that passed since this validator first saw the round due, so the
next member leads when a leader is down. Only the leader acts. It asks every other member
(``POST /v1/attestations/query`` on the endpoint of its Validator account) for its approved
total at the leader's newest receipt, counts the members that hold the same receipt, and
takes the q-th highest of all totals, its own included (``attest.quorum_value``). If its own
total is below that value it does not lead this time (it could not attest the value; the
next member leads after the timeout). The value is lowered to what ``settle`` accepts
(``attest.settle_bound``), then ``q - 1`` members whose totals reach it are asked to sign it
(``POST /v1/attestations/sign``, the request signed by the leader and carrying the leader's
own attestation of the value, which the member keeps as evidence); every valid signature is
kept as evidence (``Store.record_received_attestation``: two different ones by one member
for one seq make a validator-equivocation case for ``slashing.ValidatorEquivocationReporter``).
With ``q - 1`` signatures the intent is written and sent; with fewer nothing is sent and the
round is tried again on the next pass (a 3-of-3 committee with a member down waits for it).

Crash safety. For each settlement an intent holding the exact receipt, the approved value and
the attestations is written to the store (status ``intended``) *before* anything is sent; it
becomes ``sent`` right before the transaction, then ``confirmed`` or ``failed`` (terminal).
Every open intent (after a restart, or after a transport error) is first checked against the
chain: if ``job.last_seq >= intent.seq_to`` someone (this process before a crash, or another
member) already settled it and it is marked confirmed without resending; otherwise it is
resent with the same attestations. Program errors that mean "already settled"
(StaleSequence, WindowNotAfterLast, CumulativeDecreased) end the intent, never a loop;
transport errors retry with capped exponential backoff.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpu_market.receipt import verify as verify_signature
from solders.pubkey import Pubkey

from .attest import (
    attestation_message,
    leader_of,
    quorum_value,
    receipt_message_of,
    settle_bound,
    sign_request_message,
    timeouts_elapsed,
)
from .chain import ChainClient, chain_error_name, job_info, read
from .config import SettlePolicy
from .errors import ChainUnavailable
from .metrics import Metrics
from .peers import Peers
from .store import ChainJobInfo, Intent, ReceivedAttestation, SettleCandidate, Store

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
        unsettled = max(0, c.approved_total - chain.paid_seconds)
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
    """The SDK's ``SettleItem`` (gpu_market.settle)."""
    from gpu_market.settle import SettleItem

    return SettleItem


def _default_attestation_factory() -> Callable[..., Any]:
    """The SDK's ``Attestation(authority, signature)`` (gpu_market.settle)."""
    from gpu_market.settle import Attestation

    return Attestation


def round_of(seq: int, policy: SettlePolicy) -> int:
    """The settle round a job is in when its newest accepted seq is ``seq``."""
    return seq // policy.settle_every_windows


@dataclass(frozen=True)
class MemberTotal:
    """A member's answer to the query: its approved total at the leader's receipt and the
    value it already signed for that seq, if any."""

    member: bytes
    total: int
    signed: int | None


@dataclass
class SettleReport:
    """What one ``settle_now`` pass did (receipt counts)."""

    intended: int = 0
    not_leader: int = 0
    waiting: int = 0
    deferred: int = 0
    confirmed: int = 0
    already_settled: int = 0
    failed: int = 0
    retry_later: int = 0
    signatures: list[str] = field(default_factory=list)


class Settler:
    """Turns due jobs into settle rounds, rounds into intents and intents into ``settle``
    transactions. ``authority`` is this validator's Keypair; ``peers`` reaches the other
    committee members (needed for jobs whose quorum is above 1)."""

    def __init__(self, client: ChainClient, authority: Any, store: Store,
                 policy: SettlePolicy | None = None,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.time,
                 item_factory: Callable[..., Any] | None = None, *,
                 peers: Peers | None = None,
                 attestation_factory: Callable[..., Any] | None = None) -> None:
        self.client = client
        self.authority = authority
        self.me = bytes(authority.pubkey())
        self.store = store
        self.policy = policy or SettlePolicy()
        self.policy.validate()
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.peers = peers
        self._item_factory = item_factory
        self._attestation_factory = attestation_factory
        self._lock = threading.Lock()
        self._due_since: dict[tuple[bytes, int], float] = {}
        self.last_settlement_at: float | None = None

    @property
    def item_factory(self) -> Callable[..., Any]:
        if self._item_factory is None:
            self._item_factory = _default_item_factory()
        return self._item_factory

    @property
    def attestation_factory(self) -> Callable[..., Any]:
        if self._attestation_factory is None:
            self._attestation_factory = _default_attestation_factory()
        return self._attestation_factory

    def settle_now(self, force: bool = False) -> SettleReport:
        """One pass: refresh chain facts, run the rounds this validator leads (writing
        intents), send open intents.

        ``force`` treats every candidate as due regardless of the policy and ignores
        backoff; leadership still applies. Raises nothing for chain or peer trouble: it is
        logged and retried on the next pass.
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
        seen: set[tuple[bytes, int]] = set()
        for c in self.store.settle_candidates():
            if (c.chain is None or c.chain.window_seconds <= 0
                    or now - c.chain_checked_at >= self.policy.chain_refresh_seconds):
                info = self._refresh(c.job)
                if info is None:
                    continue
                c = SettleCandidate(c.job, c.latest, max(c.covered_seq, info.last_seq),
                                    c.unsettled_windows, c.oldest_unsettled_window_end,
                                    c.accepted_cumulative, info, now, c.approved_total)
                if c.latest.seq <= info.last_seq:
                    continue
            reason = due_reason(c, self.policy, now)
            if force and reason is None and c.chain and c.chain.status in SETTLEABLE_STATUSES:
                reason = "forced"
            if reason is None or c.chain is None:
                continue
            key = (c.job, round_of(c.latest.seq, self.policy))
            seen.add(key)
            self._due_since.setdefault(key, now)
            self._round(c, key[1], self._due_since[key], reason, report)
        # Forget rounds that are no longer due (settled, or the job left).
        self._due_since = {k: v for k, v in self._due_since.items() if k in seen}

    def _round(self, c: SettleCandidate, round_: int, due_since: float, reason: str,
               report: SettleReport) -> None:
        chain = c.chain
        assert chain is not None
        job_s = str(Pubkey.from_bytes(c.job))
        committee = list(chain.committee)
        if self.me not in committee:
            self.metrics.round("not_member")
            log.info("job=%s: this validator is no longer on its committee; not settling",
                     job_s)
            return
        timeout = self.policy.leader_timeout_windows * max(1, chain.window_seconds)
        k = timeouts_elapsed(due_since, self.clock(), timeout)
        leader = leader_of(c.job, round_, committee, k)
        if leader != self.me:
            self.metrics.round("not_leader")
            report.not_leader += 1
            log.debug("job=%s round=%d led by %s", job_s, round_, Pubkey.from_bytes(leader))
            return
        outcome = self._collect(c, chain)
        if isinstance(outcome, str):
            self.metrics.round(outcome)
            if outcome == "waiting":
                report.waiting += 1
            else:
                report.deferred += 1
            return
        value, attestations = outcome
        intent = self.store.add_intent(c.latest, c.covered_seq + 1, self.clock(), value,
                                       attestations)
        self.metrics.round("led")
        report.intended += 1
        log.info("settle intent id=%d job=%s seq=%d..%d cumulative=%d approved=%d "
                 "attesters=%d reason=%s round=%d", intent.id, job_s, intent.seq_from,
                 intent.seq_to, intent.cumulative_seconds, value, len(attestations), reason,
                 round_)

    def _collect(self, c: SettleCandidate,
                 chain: ChainJobInfo) -> tuple[int, list[tuple[bytes, bytes]]] | str:
        """The value of this round and ``q - 1`` other members' attestations of it, or why
        not: ``waiting`` (too few members answered or signed: try again next pass) or
        ``deferred`` (this leader cannot attest the quorum value, or nothing is settleable
        with this receipt)."""
        job_s = str(Pubkey.from_bytes(c.job))
        q = max(1, chain.quorum)
        own = c.approved_total
        answers = self._query_members(c, chain) if q > 1 else []
        value = quorum_value([own] + [a.total for a in answers], q)
        if value is None:
            log.info("job=%s seq=%d: %d of the %d totals a quorum needs; waiting", job_s,
                     c.latest.seq, len(answers) + 1, q)
            return "waiting"
        if own < value:
            log.info("job=%s seq=%d: own total %d is below the quorum value %d; the next "
                     "member leads after the timeout", job_s, c.latest.seq, own, value)
            return "deferred"
        bounded = settle_bound(value, chain, c.latest.cumulative_seconds, c.latest.window_end)
        if bounded is None:
            log.warning("job=%s seq=%d: the quorum value %d is below the paid %d seconds; "
                        "waiting for a later receipt", job_s, c.latest.seq, value,
                        chain.paid_seconds)
            return "deferred"
        if q == 1:
            return bounded, []
        # Members that already signed another value for this seq would refuse; fall back to
        # a value they signed when too few can sign ours (after a leader change mid-round).
        tried: set[int] = set()
        for candidate in [bounded] + sorted({a.signed for a in answers if a.signed is not None
                                             and chain.paid_seconds <= a.signed < bounded},
                                            reverse=True):
            if candidate in tried:
                continue
            tried.add(candidate)
            signers = [a for a in answers if a.total >= candidate
                       and a.signed in (None, candidate)]
            if len(signers) < q - 1:
                continue
            got = self._gather(c, candidate, signers, q - 1)
            if len(got) >= q - 1:
                return candidate, got
        log.info("job=%s seq=%d: fewer than %d members attested; waiting", job_s, c.latest.seq,
                 q - 1)
        return "waiting"

    def _query_members(self, c: SettleCandidate, chain: ChainJobInfo) -> list[MemberTotal]:
        """The other members' totals at the leader's receipt (those holding the same one)."""
        if self.peers is None:
            return []
        out = []
        body = {"job": str(Pubkey.from_bytes(c.job)), "seq": c.latest.seq}
        for member in chain.committee:
            if member == self.me:
                continue
            a = self.peers.post(member, "/v1/attestations/query", body)
            if a is None or a.status != 200:
                continue
            try:
                r = a.body["receipt"]
                same = (r["seq"] == c.latest.seq
                        and r["cumulative_seconds"] == c.latest.cumulative_seconds
                        and r["window_end"] == c.latest.window_end
                        and bytes.fromhex(r["proof_hash"]) == c.latest.hash)
                total = a.body["approved_seconds"]
                signed = a.body.get("signed_approved_seconds")
            except (KeyError, TypeError, ValueError):
                continue
            if not same or not _is_u64(total) or not (signed is None or _is_u64(signed)):
                continue
            out.append(MemberTotal(member, int(total), None if signed is None else int(signed)))
        return out

    def _gather(self, c: SettleCandidate, value: int, signers: list[MemberTotal],
                need: int) -> list[tuple[bytes, bytes]]:
        """Ask ``signers`` in turn to attest ``value`` until ``need`` valid signatures."""
        assert self.peers is not None
        msg = attestation_message(receipt_message_of(c.latest), value)
        request = sign_request_message(c.job, c.latest.seq, value, self.me)
        body = {"job": str(Pubkey.from_bytes(c.job)), "seq": c.latest.seq,
                "approved_seconds": value, "leader": str(Pubkey.from_bytes(self.me)),
                "leader_signature": base64.b64encode(
                    bytes(self.authority.sign_message(request))).decode(),
                # the leader commits first: its own attestation of the value (evidence)
                "leader_attestation": base64.b64encode(
                    bytes(self.authority.sign_message(msg))).decode()}
        got: list[tuple[bytes, bytes]] = []
        for m in signers:
            if len(got) >= need:
                break
            a = self.peers.post(m.member, "/v1/attestations/sign", body)
            if a is None:
                self.metrics.attestation("unreachable")
                continue
            if a.status != 200:
                self.metrics.attestation("refused")
                log.info("member %s refused to attest %d: %s", Pubkey.from_bytes(m.member),
                         value, a.body.get("error"))
                continue
            try:
                sig = base64.b64decode(a.body["signature"], validate=True)
            except (KeyError, TypeError, ValueError):
                sig = b""
            if len(sig) != 64 or not verify_signature(m.member, sig, msg):
                self.metrics.attestation("invalid")
                log.warning("member %s answered an attestation that does not verify",
                            Pubkey.from_bytes(m.member))
                continue
            self.metrics.attestation("received")
            self._keep_evidence(c, m.member, value, sig)
            got.append((m.member, sig))
        return got

    def _keep_evidence(self, c: SettleCandidate, member: bytes, value: int,
                       sig: bytes) -> None:
        new_case = self.store.record_received_attestation(ReceivedAttestation(
            c.job, c.latest.seq, member, value, c.latest.cumulative_seconds,
            c.latest.window_end, c.latest.hash, sig, self.clock()))
        if new_case:
            log.critical("VALIDATOR EQUIVOCATION: member %s signed two different attestations "
                         "for job=%s seq=%d; evidence stored", Pubkey.from_bytes(member),
                         Pubkey.from_bytes(c.job), c.latest.seq)

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
        # Items of one transaction share a quorum (their size depends on it).
        by_quorum: dict[int, list[Intent]] = {}
        for it in ready:
            by_quorum.setdefault(len(it.attestations) + 1, []).append(it)
        for quorum, group in sorted(by_quorum.items()):
            try:
                per_tx = max(1, int(self.client.max_settle_items_per_tx(quorum)))
            except Exception as e:  # noqa: BLE001 - reported and retried
                self._transport_retry(group, f"max_settle_items_per_tx failed: {e}", report)
                continue
            for i in range(0, len(group), per_tx):
                self._send(group[i:i + per_tx], report)

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
            receipt_signature=it.receipt_signature, approved_seconds=it.approved_seconds,
            attestations=[self.attestation_factory(authority=Pubkey.from_bytes(a), signature=sig)
                          for a, sig in it.attestations])

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
    right after, then every callable of ``tasks`` (the validator-equivocation and downtime
    reporters, the rewards probe); the reporter's ``notify`` (the intake's equivocation hook)
    wakes the loop at once."""

    def __init__(self, settler: Settler, interval: float = 5.0, reporter: Any = None,
                 tasks: tuple[Callable[[], Any], ...] = ()) -> None:
        self.settler = settler
        self.interval = interval
        self.reporter = reporter
        self.tasks = tasks
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
            for task in self.tasks:
                try:
                    task()
                except Exception:  # same: logged, retried next pass
                    log.exception("background task %s failed; retrying in %.0fs",
                                  getattr(task, "__qualname__", task), self.interval)
            self._wake.wait(self.interval)


def _is_u64(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**64
