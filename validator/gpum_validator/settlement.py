"""Settlement: settle rounds among the job's committee, and the crash-safe settler (I/O).
When a job is due, its round and the backoff are pure (``settle_policy``); the lookup tables
that batched transactions load from are kept by ``settle_tables``.

Rounds (docs/protocol.md, "Committees, approvals and rounds"). A due job's round is ``newest
accepted seq // settle_every``; its leader is ``attest.leader_of(job, round, committee,
timeouts)``, where ``timeouts`` counts the ``leader_timeout_windows`` that passed since this
validator first saw the round due, so the next member leads when a leader is down. Only the
leader acts. It asks every other member (``POST /v1/attestations/query`` on the endpoint of its
Validator account) for its approved total at the leader's newest receipt, counts the members
that hold the same receipt, and takes the q-th highest of all totals, its own included
(``attest.quorum_value``). If its own total is below that value it does not lead this time (it
could not attest the value; the next member leads after the timeout). The value is lowered to
what ``settle`` accepts (``attest.settle_bound``), then ``q - 1`` members whose totals reach it
are asked to sign it (``POST /v1/attestations/sign``, the request signed by the leader and
carrying the leader's own attestation of the value, which the member keeps as evidence); every
valid signature is kept as evidence (``Store.record_received_attestation``: two different ones
by one member for one seq make a validator-equivocation case for
``slashing.ValidatorEquivocationReporter``). With ``q - 1`` signatures the intent is written and
sent; with fewer nothing is sent and the round is tried again on the next pass (a 3-of-3
committee with a member down waits for it).

One value per seq. Before the leader sends anything it attests the chosen value through
``signing.AttestationSigner`` (stored durably first). Once this node attested a value for a
seq, in either role, every later round at that seq proposes exactly that value (if it still
settles) or nothing, so no member can collect two attestations of this node for one seq by
refusing, lowering its total or answering late; settlement moves on with the next seq. A
sign request names its target member, the round and the attempt (``attest.leader_of``'s
elapsed timeouts), all under the leader's signature.

Isolation. Members are asked in parallel, each call bounded by a total deadline
(``peers.Peers``); the rounds of different jobs run concurrently (``round_workers``) and a pass
waits for them at most ``round_wait_seconds``, then sends the intents ready; a round still
running finishes in the background (its job is skipped until then) and the next pass sends
its intent. One member's slowness therefore delays only the rounds of the jobs it serves.

Crash safety. For each settlement an intent holding the exact receipt, the approved value and
the attestations is written to the store (status ``intended``) *before* anything is sent; it
becomes ``sent`` right before the transaction, then ``confirmed`` or ``failed`` (terminal).
Every open intent (after a restart, or after a transport error) is first checked against the
chain: if ``job.last_seq >= intent.seq_to`` someone (this process before a crash, or another
member) already settled it and it is marked confirmed without resending; otherwise it is
resent with the same attestations. Program errors that mean "already settled"
(StaleSequence, WindowNotAfterLast, CumulativeDecreased) end the intent, never a loop;
transport errors retry with capped exponential backoff.

Batching. With a client that has ``lookup_tables`` (the SDK's
``gpu_market.lookup_tables.LookupTables``) and ``SettlePolicy.lookup_table`` on, the intents
that are ready in one pass are packed into as few v0 transactions as fit (``LookupTables.pack``:
measured sizes, each job at most once per transaction, a job's older intent never in a later
transaction than its newer one), their accounts loaded from this validator's lookup tables
(``settle_tables.SettleTables``). A fresh quorum-1 intent that would go alone waits up to
``batch_hold_windows`` of its job's windows for a later pass to pair it (never under ``force``,
never once sent). A Finishing job's intents skip all of that: they go at once, as legacy
transactions (``_send_legacy``), so its settlement never waits for a table to be created, extended or warmed
up while the job's settlement grace runs out.

Per batch: every intent of the transaction is marked ``sent`` before it is sent and
``confirmed`` with its signature after it landed, each in one store commit (``Store.batch``);
each job keeps its own intent, so a crash before the second commit leaves open intents that the
next pass checks against the chain first, as above. A program error in one item fails the whole
transaction: its intents are then sent one per transaction (legacy), each classified on its own,
so one bad item never blocks the others and nothing loops (an intent is tried at most once more
in that pass). A transport error or confirmation timeout keeps every intent of the batch open
with backoff. Any other rejection of the v0 transaction (e.g. a lookup that fails to load) also
falls back to one legacy transaction per intent, and the tables are read afresh.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from gpu_market.receipt import verify as verify_signature
from solders.pubkey import Pubkey

from .attest import (
    attestation_message,
    leader_of,
    member_total,
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
from .peers import PeerAnswer, Peers
from .records import ChainJobInfo, Intent, ReceivedAttestation, SettleCandidate, Store
from .settle_policy import (
    ALREADY_SETTLED_ERRORS,
    RETRYABLE_CHAIN_ERRORS,
    SETTLEABLE_STATUSES,
    SettleReport,
    backoff,
    classify_send_error,
    due_reason,
    round_of,
)
from .settle_tables import LookupTableApi, SettleTables
from .signing import AttestationSigner, SignedOtherValue

log = logging.getLogger("gpum_validator.settle")


def _status(view: Any) -> str:
    """A Job view's status in lower case ("" for no view)."""
    return "" if view is None else str(getattr(view, "status", "")).lower()


def _default_item_factory() -> Callable[..., Any]:
    """The SDK's ``SettleItem`` (gpu_market.settle)."""
    from gpu_market.settle import SettleItem

    return SettleItem


def _default_attestation_factory() -> Callable[..., Any]:
    """The SDK's ``Attestation(authority, signature)`` (gpu_market.settle)."""
    from gpu_market.settle import Attestation

    return Attestation


@dataclass(frozen=True)
class RoundId:
    """A settle round as a sign request names it: the round number and the attempt (the
    leader timeouts elapsed, which pick the leader: ``attest.leader_of``)."""

    round: int
    attempt: int


@dataclass(frozen=True)
class MemberTotal:
    """A member's answer to the query: its approved total at the leader's receipt and the
    value it already signed for that seq, if any."""

    member: bytes
    total: int
    signed: int | None


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
        self.signer = AttestationSigner(authority, store, clock)
        """The only signer of attestations (one value per (job, seq), stored first)."""
        self._rounds = ThreadPoolExecutor(self.policy.round_workers,
                                          thread_name_prefix="gpum-round")
        self._peer_pool = ThreadPoolExecutor(self.policy.round_workers * 4,
                                             thread_name_prefix="gpum-peer")
        self._inflight: set[bytes] = set()
        """Jobs whose round is running (possibly past the pass that started it)."""
        self._inflight_lock = threading.Lock()
        self._item_factory = item_factory
        self._attestation_factory = attestation_factory
        self._lock = threading.Lock()
        self._due_since: dict[tuple[bytes, int], float] = {}
        self.tables = SettleTables(store, authority, self.policy, clock, self._read_jobs)
        """The lookup tables batched settle transactions load from."""
        self.last_settlement_at: float | None = None

    def close(self) -> None:
        """Stop taking rounds; rounds in flight end by their own deadlines."""
        self._rounds.shutdown(wait=False, cancel_futures=True)
        self._peer_pool.shutdown(wait=False, cancel_futures=True)

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
            self.tables.retire(self._lookup_api(), report)
            return report

    # ------------------------------------------------------------------ planning

    _UNREAD = object()

    def _read_jobs(self, jobs: Sequence[bytes]) -> dict[bytes, Any]:
        """The Job views of ``jobs`` (None: no such job), in one RPC call per 100 with a
        client that has ``fetch_jobs``, else one by one. ChainUnavailable on transport
        trouble; an account that is not a Job makes the batch fall back to single reads (where
        it reads as None)."""
        keys = list(dict.fromkeys(jobs))
        if not keys:
            return {}
        fetch_jobs = getattr(self.client, "fetch_jobs", None)
        if fetch_jobs is not None:
            views = read("the job accounts",
                         lambda: fetch_jobs([Pubkey.from_bytes(j) for j in keys]))
            if views is not None:
                return dict(zip(keys, views))
        return {j: read("the job account", lambda j=j: self.client.fetch_job(Pubkey.from_bytes(j)))
                for j in keys}

    def _refresh(self, job: bytes, view: Any = _UNREAD) -> ChainJobInfo | None:
        """The job's chain facts (stored); ``view`` read beforehand (``_read_jobs``) or read
        now."""
        if view is Settler._UNREAD:
            view = self._read_jobs([job])[job]
        if view is None:
            return None
        info = job_info(view)
        self.store.update_chain_info(job, info, self.clock())
        return info

    def _plan(self, report: SettleReport, force: bool) -> None:
        now = self.clock()
        seen: set[tuple[bytes, int]] = set()
        candidates = self.store.settle_candidates()
        stale = [c.job for c in candidates
                 if c.chain is None or c.chain.window_seconds <= 0
                 or now - c.chain_checked_at >= self.policy.chain_refresh_seconds]
        views = self._read_jobs(stale)
        with self.store.batch():  # one commit for every refreshed job
            infos = {job: self._refresh(job, view) for job, view in views.items()}
        due: list[tuple[SettleCandidate, int, float, str]] = []
        for c in candidates:
            if c.job in infos:
                info = infos[c.job]
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
            due.append((c, key[1], self._due_since[key], reason))
        # Forget rounds that are no longer due (settled, or the job left).
        self._due_since = {k: v for k, v in self._due_since.items() if k in seen}
        self._run_rounds(due, report)

    def _run_rounds(self, due: list[tuple[SettleCandidate, int, float, str]],
                    report: SettleReport) -> None:
        """Run the due rounds concurrently (at most ``round_workers`` at a time). The pass
        waits for them at most ``round_wait_seconds``; a round still talking to its members
        then goes on in the background (its job is skipped by later passes until it ends)
        and its intent is sent by the next pass. So a slow member delays only the rounds of
        its own jobs, never another job's round nor this pass's sends."""
        futures = []
        with self._inflight_lock:
            for c, round_, due_since, reason in due:
                if c.job in self._inflight:
                    report.waiting += 1
                    continue
                self._inflight.add(c.job)
                futures.append(self._rounds.submit(self._round_guarded, c, round_, due_since,
                                                   reason))
        if not futures:
            return
        done, _ = wait(futures, timeout=self.policy.round_wait_seconds)
        for f in done:
            part = f.result()
            report.intended += part.intended
            report.not_leader += part.not_leader
            report.waiting += part.waiting
            report.deferred += part.deferred
        report.waiting += len(futures) - len(done)

    def _round_guarded(self, c: SettleCandidate, round_: int, due_since: float,
                       reason: str) -> SettleReport:
        part = SettleReport()
        try:
            self._round(c, round_, due_since, reason, part)
        except Exception:
            log.exception("settle round of job=%s failed; retried on a later pass",
                          Pubkey.from_bytes(c.job))
        finally:
            with self._inflight_lock:
                self._inflight.discard(c.job)
        return part

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
        outcome = self._collect(c, chain, RoundId(round_, k))
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

    def _collect(self, c: SettleCandidate, chain: ChainJobInfo, rid: RoundId
                 ) -> tuple[int, list[tuple[bytes, bytes]]] | str:
        """The value of this round and ``q - 1`` other members' attestations of it, or why
        not: ``waiting`` (too few members answered or signed: try again next pass) or
        ``deferred`` (this leader cannot attest the quorum value, or nothing is settleable
        with this receipt).

        One value per seq: once this node attested a value for the seq (as a leader, or as a
        member for another leader), every later round at that seq proposes exactly it, or
        nothing; it never signs a second value (``signing.AttestationSigner``)."""
        job_s = str(Pubkey.from_bytes(c.job))
        q = max(1, chain.quorum)
        own = c.approved_total
        given = self.signer.signed(c.job, c.latest.seq) if q > 1 else None
        if given is not None and (given.proof_hash != c.latest.hash
                                  or settle_bound(given.approved_seconds, chain,
                                                  c.latest.cumulative_seconds,
                                                  c.latest.window_end)
                                  != given.approved_seconds):
            log.info("job=%s seq=%d: this node attested %d there, which no longer settles; "
                     "waiting for a later receipt", job_s, c.latest.seq, given.approved_seconds)
            return "deferred"
        answers = self._query_members(c, chain) if q > 1 else []
        if given is not None:
            candidates = [given.approved_seconds]
        else:
            value = quorum_value([own] + [a.total for a in answers], q)
            if value is None:
                log.info("job=%s seq=%d: %d of the %d totals a quorum needs; waiting", job_s,
                         c.latest.seq, len(answers) + 1, q)
                return "waiting"
            if own < value:
                log.info("job=%s seq=%d: own total %d is below the quorum value %d; the next "
                         "member leads after the timeout", job_s, c.latest.seq, own, value)
                return "deferred"
            bounded = settle_bound(value, chain, c.latest.cumulative_seconds,
                                   c.latest.window_end)
            if bounded is None:
                log.warning("job=%s seq=%d: the quorum value %d is below the paid %d seconds; "
                            "waiting for a later receipt", job_s, c.latest.seq, value,
                            chain.paid_seconds)
                return "deferred"
            if q == 1:
                return bounded, []
            # Members that already signed another value for this seq would refuse; then a
            # value they signed is proposed instead (after a leader change mid-round).
            candidates = [bounded] + sorted(
                {a.signed for a in answers if a.signed is not None
                 and chain.paid_seconds <= a.signed < bounded}, reverse=True)
        for candidate in candidates:
            signers = [a for a in answers if a.total >= candidate
                       and a.signed in (None, candidate)]
            if len(signers) < q - 1:
                continue
            # The value is chosen: this node commits to it, durably, before anyone sees it.
            try:
                mine = self.signer.sign(c.latest, candidate, None)
            except SignedOtherValue as e:
                log.info("job=%s seq=%d: %s", job_s, c.latest.seq, e)
                return "deferred"
            got = self._gather(c, candidate, mine.signature, signers, q - 1, rid)
            if len(got) >= q - 1:
                return candidate, got[:q - 1]
            break
        log.info("job=%s seq=%d: fewer than %d members attested; waiting", job_s, c.latest.seq,
                 q - 1)
        return "waiting"

    def _peer_calls(self, calls: list[tuple[bytes, str, dict[str, Any]]]
                    ) -> list[PeerAnswer | None]:
        """POST every call at once (one thread each, from the peer pool); each call is bounded
        by the peer deadline, so this returns within about one deadline."""
        assert self.peers is not None
        peers = self.peers
        if len(calls) == 1:
            member, path, body = calls[0]
            return [peers.post(member, path, body)]
        futures = [self._peer_pool.submit(peers.post, m, path, body) for m, path, body in calls]
        out: list[PeerAnswer | None] = []
        for f in futures:
            try:
                out.append(f.result())
            except Exception as e:  # noqa: BLE001 - a peer failure is "no answer"
                log.warning("peer call failed: %s: %s", type(e).__name__, e)
                out.append(None)
        return out

    def _query_members(self, c: SettleCandidate, chain: ChainJobInfo) -> list[MemberTotal]:
        """The other members' totals at the leader's receipt (those holding the same one),
        asked in parallel."""
        if self.peers is None:
            return []
        out = []
        body = {"job": str(Pubkey.from_bytes(c.job)), "seq": c.latest.seq}
        others = [m for m in chain.committee if m != self.me]
        answers = self._peer_calls([(m, "/v1/attestations/query", body) for m in others])
        for member, a in zip(others, answers):
            if a is None or a.status != 200:
                continue
            got = member_total(a.body, c.latest.seq, c.latest.cumulative_seconds,
                               c.latest.window_end, c.latest.hash)
            if got is not None:
                out.append(MemberTotal(member, *got))
        return out

    def _sign_body(self, c: SettleCandidate, value: int, attestation: bytes, member: bytes,
                   rid: RoundId) -> dict[str, Any]:
        request = sign_request_message(c.job, c.latest.seq, value, self.me, member, rid.round,
                                       rid.attempt)
        return {"job": str(Pubkey.from_bytes(c.job)), "seq": c.latest.seq,
                "approved_seconds": value, "leader": str(Pubkey.from_bytes(self.me)),
                "member": str(Pubkey.from_bytes(member)), "round": rid.round,
                "attempt": rid.attempt,
                "leader_signature": base64.b64encode(
                    bytes(self.authority.sign_message(request))).decode(),
                # the leader commits first: its own (stored) attestation of the value
                "leader_attestation": base64.b64encode(attestation).decode()}

    def _gather(self, c: SettleCandidate, value: int, attestation: bytes,
                signers: list[MemberTotal], need: int, rid: RoundId
                ) -> list[tuple[bytes, bytes]]:
        """Ask ``signers`` to attest ``value``, ``need`` at a time in parallel, the next ones
        in place of those that refused or did not answer, until ``need`` valid signatures."""
        msg = attestation_message(receipt_message_of(c.latest), value)
        got: list[tuple[bytes, bytes]] = []
        queue = list(signers)
        # The round's own bound: the query phase and at most two waves of sign requests.
        until = time.monotonic() + 2 * self.policy.peer_timeout_seconds
        while queue and len(got) < need and time.monotonic() < until:
            wave, queue = queue[:need - len(got)], queue[need - len(got):]
            answers = self._peer_calls([
                (m.member, "/v1/attestations/sign", self._sign_body(c, value, attestation,
                                                                    m.member, rid))
                for m in wave])
            for m, a in zip(wave, answers):
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
        due: list[Intent] = []
        for it in self.store.open_intents():
            if not force and it.next_attempt_at > now:
                report.retry_later += 1
                continue
            due.append(it)
        try:
            views = self._read_jobs([it.job for it in due])
        except ChainUnavailable as e:
            self._transport_retry(due, str(e), report)
            return
        ready: list[Intent] = []
        with self.store.batch():  # one commit for the chain facts and the intents it closes
            for it in due:
                if not self._resolved_on_chain(it, report, views[it.job]):
                    ready.append(it)
        if not ready:
            return
        api = self._lookup_api()
        if api is not None:
            # A Finishing job's grace is running out: its settlement never waits for a lookup
            # table to be created, extended or warmed up (seconds, more under load), which
            # could land it past the grace and leave its provider unpaid.
            finishing = [it for it in ready if _status(views[it.job]) == "finishing"]
            if finishing:
                self._send_legacy(finishing, report)
                ready = [it for it in ready if _status(views[it.job]) != "finishing"]
            if ready:
                self._send_batched(api, ready, report, force)
        else:
            self._send_legacy(ready, report)

    def _lookup_api(self) -> LookupTableApi | None:
        if not self.policy.lookup_table:
            return None
        return getattr(self.client, "lookup_tables", None)

    def _send_legacy(self, ready: list[Intent], report: SettleReport) -> None:
        """Legacy transactions: items of one transaction share a quorum (their size depends
        on it), ``client.max_settle_items_per_tx(quorum)`` per transaction."""
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

    # ------------------------------------------------------------------ batched (v0)

    def _send_batched(self, api: LookupTableApi, ready: list[Intent], report: SettleReport,
                      force: bool = False) -> None:
        """``ready`` in as few v0 transactions as fit (see the module docstring); the fresh
        intents of a transaction with room for another settlement wait (``_held``) unless
        ``force``."""
        me = self.authority.pubkey()
        try:
            prepared = api.prepare(me, [self._item(it) for it in ready])
        except Exception as e:  # noqa: BLE001 - classified
            kind, _ = classify_send_error(e)
            if kind == "transport":
                self._transport_retry(ready, f"cannot prepare settlements: {e}", report)
                return
            # One item the SDK refuses (a closed job, an attester off the committee) must not
            # block the others: each goes alone and is classified on its own.
            log.warning("preparing %d settlements failed (%s: %s); one per transaction",
                        len(ready), type(e).__name__, e)
            for it in ready:
                self._send([it], report)
            return
        tables = self.tables.tables_for(api, prepared, report)
        try:
            slot = api.slot() if tables else 0
        except Exception as e:  # noqa: BLE001 - the node is unreachable
            self._transport_retry(ready, f"cannot read the slot: {e}", report)
            return
        try:
            packed = self._pack_by_home(api, me, prepared, tables, slot)
        except Exception as e:  # noqa: BLE001 - never stop settling over packing
            log.error("packing %d settlements failed (%s: %s); one per transaction",
                      len(ready), type(e).__name__, e)
            packed = [([i], []) for i in range(len(ready))]
        now = self.clock()
        for group, group_tables in packed:
            if not force and self._has_room(api, [ready[i] for i in group]) and all(
                    self._held(ready[i], now) for i in group):
                report.held += len(group)
                continue
            self._send_v0(api, [ready[i] for i in group], [prepared[i] for i in group],
                          group_tables, slot, report)

    def _pack_by_home(self, api: LookupTableApi, me: Pubkey, prepared: list[Any],
                      tables: list[Any], slot: int) -> list[tuple[list[int], list[Any]]]:
        """Groups of ``prepared`` (indexes) and the tables each group's transaction loads
        from. Items whose accounts all sit in one table are packed with that table alone:
        each further table a v0 transaction names costs 34+ bytes, and four quorum-1
        settlements fit one packet only with one table (1,224 bytes; 1,258 with two). The
        others are packed with every table. A job's items share a home, so their order holds."""
        homes: dict[Any, list[int]] = {}
        by_address = {t.address: t for t in tables}
        usable = [(t.address, set(t.usable(slot))) for t in tables]
        for i, p in enumerate(prepared):
            wanted = {*p.shared, *p.own}
            home = next((address for address, have in usable if wanted <= have), None) \
                if self.policy.lookup_table_job_accounts else None
            homes.setdefault(home, []).append(i)
        out: list[tuple[list[int], list[Any]]] = []
        for address, idx in homes.items():
            group_tables = tables if address is None else [by_address[address]]
            for g in api.pack(me, [prepared[i] for i in idx], group_tables, slot):
                out.append(([idx[k] for k in g], group_tables))
        return out

    def _has_room(self, api: LookupTableApi, group: list[Intent]) -> bool:
        """Whether another settlement of the group's largest quorum surely fits its
        transaction (fewer items than ``max_items_per_tx``, the worst case)."""
        quorum = max(len(it.attestations) + 1 for it in group)
        try:
            room = api.max_items_per_tx(quorum, self.policy.lookup_table_job_accounts)
        except Exception as e:  # noqa: BLE001 - never stop settling over sizing
            log.warning("cannot size settle transactions (%s: %s); sending without waiting",
                        type(e).__name__, e)
            return False
        return len(group) < room

    def _held(self, it: Intent, now: float) -> bool:
        """Whether ``it``, in a transaction with room for more, waits for a pass that fills
        it: an intent never sent, younger than ``batch_hold_windows`` of its job's windows."""
        if self.policy.batch_hold_windows <= 0 or it.attempts:
            return False
        info, _ = self.store.chain_info(it.job)
        window = info.window_seconds if info is not None else 0
        return now - it.created_at < self.policy.batch_hold_windows * window

    def _send_v0(self, api: LookupTableApi, batch: list[Intent], prepared: list[Any],
                 tables: list[Any], slot: int, report: SettleReport) -> None:
        self._mark_sent(batch)
        try:
            sig = api.send_settle(self.authority, prepared, tables, slot)
        except Exception as e:  # noqa: BLE001 - classified below
            kind, name = classify_send_error(e)
            if kind == "transport":
                self._transport_retry(batch, f"{type(e).__name__}: {e}", report, "sent")
            elif kind == "rejected" or len(batch) > 1:
                if kind == "rejected":
                    self.tables.forget()  # read the tables afresh next pass
                log.warning("v0 settle of %d receipt(s) failed with %s (%s); one legacy "
                            "transaction each", len(batch), name, e)
                for it in batch:
                    self._send_single_after_batch(it, report)
            else:
                self._chain_error(batch[0], name or type(e).__name__, e, report)
            return
        self._confirmed(batch, sig, report)

    # ------------------------------------------------------------------ single / legacy

    def _resolved_on_chain(self, it: Intent, report: SettleReport, view: Any = _UNREAD) -> bool:
        """Close ``it`` if the chain already decides it; True when closed. ``view``: the
        job's account read for this check (read now when not given)."""
        job = Pubkey.from_bytes(it.job)
        info = self._refresh(it.job, view)
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
        self._mark_sent(batch)
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
        self._confirmed(batch, sig, report)

    def _mark_sent(self, batch: list[Intent]) -> None:
        """Every intent of ``batch`` ``sent`` in one store commit, before the send."""
        now = self.clock()
        with self.store.batch():
            for it in batch:
                self.store.mark_intent(it.id, "sent", now, count_attempt=True)
        self.metrics.settlement("sent", len(batch))

    def _confirmed(self, batch: list[Intent], sig: Any, report: SettleReport) -> None:
        """Every intent of ``batch`` landed in transaction ``sig``: ``confirmed`` in one
        store commit."""
        now = self.clock()
        sig_s = str(sig)
        with self.store.batch():
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
    each on a daemon thread of its own at the same interval, the ``reporter``
    (``slashing.EquivocationReporter``: ``report_pending()``) and every callable of
    ``tasks`` (the validator-equivocation and downtime reporters, the rewards probe), so a
    slow settlement pass never holds a report back, nor one task another. The reporter's
    ``notify`` (the intake's equivocation hook) wakes its thread at once."""

    def __init__(self, settler: Settler, interval: float = 5.0, reporter: Any = None,
                 tasks: tuple[Callable[[], Any], ...] = ()) -> None:
        self.settler = settler
        self.interval = interval
        self.reporter = reporter
        self.tasks = tasks
        self._stop = threading.Event()
        self._wake = threading.Event()
        jobs: list[tuple[str, Callable[[], Any], threading.Event]] = [
            ("gpum-settle", settler.settle_now, self._wake)]
        if reporter is not None:
            wake = getattr(reporter, "wakeup", None) or threading.Event()
            jobs.append(("gpum-equivocation", reporter.report_pending, wake))
        for task in tasks:
            jobs.append((f"gpum-{getattr(task, '__qualname__', 'task')}", task,
                         threading.Event()))
        self._wakes = [w for _, _, w in jobs]
        self._threads = [threading.Thread(target=self._run, args=(fn, wake), name=name,
                                          daemon=True) for name, fn, wake in jobs]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        for w in self._wakes:
            w.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.settler.close()

    def wake(self) -> None:
        """Run the next settlement pass now instead of after the interval."""
        self._wake.set()

    def _run(self, fn: Callable[[], Any], wake: threading.Event) -> None:
        while not self._stop.is_set():
            wake.clear()
            try:
                fn()
            except Exception:  # the loop must survive; the error is logged
                log.exception("background pass %s failed; retrying in %.0fs",
                              getattr(fn, "__qualname__", fn), self.interval)
            wake.wait(self.interval)
