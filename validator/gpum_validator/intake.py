"""Proof intake: schema -> authenticate -> job assignment -> committee membership ->
worker key -> duplicate / equivocation -> window checks -> store.

``Intake.submit`` returns ``(http_status, json_body)`` as docs/wire-formats.md specifies;
it is the only place that combines the pure checks (``verify``) with storage and chain
reads. Guarantees:

* nothing is stored, and nothing is compared for equivocation, unless the proof is
  authenticated, its job exists in this market, is assigned to ``proof.provider`` and names
  this validator in its committee (else 403 ``not_in_committee``, final), and the signing key
  is valid for that provider at ``window_end``: only the job's own provider can occupy a
  (job, seq), so a stranger can neither block a job's sequence nor pollute its head
  (``GET /v1/jobs/<job>/head``);
* an accepted proof carries the seconds this validator approved of its window and its
  approved total for the job up to it; a job this validator holds no history of (or only
  history older than the chain's last settled receipt) starts from the chain:
  ``last_seq``, ``claimed_seconds``, ``paid_seconds``, ``last_window_end``,
  ``last_receipt_hash`` (a late joiner, a lost database);
* a rejected proof is stored only when its seq extends the job's stored sequence (at most
  one past the highest seq accepted or stored), within ``StoreLimits``; one far ahead is
  answered but never reserves its slot;
* an accepted proof is on disk (with the job's new state) before 200 is returned;
* a proof already accepted (same job, seq, hash) answers 200 "duplicate" without any
  chain read (those exact bytes passed every check when stored), so retries are cheap;
* a second, different proof for a stored (job, seq) answers 409 "equivocation"; the first
  such pair is stored as evidence and the ``on_equivocation`` hook is called (in
  ``gpum-validator run`` it only wakes ``slashing.EquivocationReporter`` on the settlement
  thread, which submits ``slash_equivocation`` from the stored evidence);
* retryable rejections (a state that can heal) answer 425 with ``"retry": true``; a
  transport failure reading the chain or a database failure answers 503, retryable, and
  decides nothing; a stored rejection is re-evaluated when the same bytes come again;
* a request's proofs are judged against the store one request at a time, inside one store
  transaction (``Store.batch``), so two windows of one job never race; authentication and
  chain reads happen before, in parallel across requests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from gpu_market.proof import ZERO_HASH
from solders.pubkey import Pubkey

from . import fastlane, verify
from .chain import (
    DEFAULT_JOB_TTL,
    DEFAULT_PROVIDER_CACHE,
    JOB_READS_PER_SOURCE,
    ChainClient,
    JobAccounts,
    ProviderKeys,
    ReadBudget,
    ReadRefused,
    baseline_state,
    job_info,
    read_refused,
)
from .config import VerifyConfig
from .errors import (
    UNAVAILABLE_RETRY_AFTER_SECONDS,
    ChainUnavailable,
    Equivocation,
    Rejection,
    StoreError,
    error_body,
)
from .metrics import Metrics
from .records import DEFAULT_LIMITS, Store, StoredProof, StoreLimits
from .schema import SignedProof, parse_batch, parse_signed_proof
from .verify import Authenticated, JobState, PrevProof, Verdict

try:  # the compiled fast path (validator/fastpath), built by `make venv`
    from .fastauth import authenticate_many as _fast_authenticate_many
except ImportError:  # pragma: no cover - exercised only where the extension is not built
    _fast_authenticate_many = None

log = logging.getLogger("gpum_validator.intake")

EquivocationHook = Callable[[Authenticated, StoredProof], None]
_KEY_REASONS = ("provider_not_found", "unknown_worker_key", "worker_key_expired")


def authenticate_all(signed: Sequence[SignedProof], cfg: VerifyConfig
                     ) -> list[Authenticated | Rejection]:
    """``verify.authenticate`` of each proof, in order: by the compiled fast path (one call
    without the GIL: decoding, sha256, ``verify_strict`` per receipt signature) when it is
    installed, else in Python.
    Both give the same answer for every input (validator/tests/test_fastpath.py)."""
    if _fast_authenticate_many is not None:
        return _fast_authenticate_many(list(signed), cfg)
    out: list[Authenticated | Rejection] = []
    for sp in signed:
        try:
            out.append(verify.authenticate(sp, cfg))
        except Rejection as r:
            out.append(r)
    return out


def _b58(b: bytes) -> str:
    return str(Pubkey.from_bytes(b))


def _unavailable(reason: str, message: str) -> tuple[int, dict[str, Any]]:
    return 503, error_body(reason, f"{message}; retry later", UNAVAILABLE_RETRY_AFTER_SECONDS)


class GroupCommit:
    """Group commit across requests (leader/follower, no extra thread): a request's work is
    queued; if no leader is writing, the caller becomes the leader, takes everything queued
    (its own and other requests') and runs ``commit(requests, release)`` once for all of it;
    callers whose work a leader took wait until that commit is over. Requests arriving
    during a commit share the next one: one transaction and one fsync per round, not per
    request, whatever the number of concurrent workers. Work is taken in arrival order.

    ``commit`` calls ``release()`` once its transaction is committed and before it waits for
    the fsync (``Store.make_durable``): the next leader takes the queue and writes its group
    while this one's reaches the disk. A group's callers are answered only when its
    ``commit`` returns.
    """

    def __init__(self, commit: Callable[[list[list[_Item]], Callable[[], None]], None]
                 ) -> None:
        self.commit = commit
        self._cv = threading.Condition()
        self._queue: list[list[_Item]] = []
        self._taken: set[int] = set()
        """Work a leader took and has not finished."""
        self._done: set[int] = set()
        self._busy = False
        """A leader is writing (until its ``release`` or the end of its commit)."""
        self.rounds = 0
        """Commits run so far (for tests and metrics)."""

    def run(self, work: list[_Item]) -> None:
        with self._cv:
            self._queue.append(work)
            while id(work) not in self._done and (self._busy or id(work) in self._taken):
                self._cv.wait()
            if id(work) in self._done:
                self._done.discard(id(work))
                return
            self._busy = True
            taken, self._queue = self._queue, []
            self._taken.update(id(req) for req in taken)
        released = False

        def release() -> None:
            nonlocal released
            with self._cv:
                if not released:
                    released, self._busy = True, False
                    self._cv.notify_all()

        try:
            self.commit(taken, release)
        finally:
            for req in taken:
                for it in req:
                    if it.answer is None:  # the commit raised: never leave a caller unanswered
                        it.answer = 500, error_body("internal_error", "the validator failed "
                                                    "while storing this proof; retry later",
                                                    UNAVAILABLE_RETRY_AFTER_SECONDS)
            with self._cv:
                self.rounds += 1
                self._taken.difference_update(id(req) for req in taken)
                self._done.update(id(req) for req in taken if req is not work)
                if not released:
                    self._busy = False
                self._cv.notify_all()


class _Item:
    """One proof of a request on its way through the pipeline."""

    __slots__ = ("answer", "auth", "facts", "fast", "job", "raw", "verdict", "view")

    def __init__(self, raw: object) -> None:
        self.raw = raw
        self.fast: tuple | None = None
        """The screened proof (``fastlane.screen``) when it passed the chain checks in
        ``_fast_chain``: the fast lane may decide it (``auth`` is then built only if the
        reference path has to)."""
        self.facts: fastlane.JobFacts | None = None
        self.auth: Authenticated | None = None
        self.job: bytes | None = None
        self.answer: tuple[int, dict[str, Any]] | None = None
        """Set once decided: (HTTP status, body)."""
        self.view: Any = None
        """The job account it was judged against."""
        self.verdict: Verdict | None = None
        """What it changed, once accepted."""


class Intake:
    """Verifies and stores proofs; safe to call from many HTTP threads.

    A request's proofs (one, or a batch) go through three phases: (1) schema and
    authentication of every proof at once (``authenticate_all``: no lock, no I/O); (2) the
    chain facts for each authenticated proof (``JobAccounts``, ``ProviderKeys``: cached reads,
    no store lock held); (3) under ``Store.batch()`` every remaining proof in request order:
    duplicate/equivocation, job state, window checks, then one commit for all of them (group
    commit: one fsync per request, not two per proof). Answers are built only after the
    commit, so an accepted proof is on disk before its 200; a database failure in phase 3
    answers 503 to every proof of that phase (nothing of it was kept).

    The fast lane (``fastlane``) takes the common proof through all three phases with less
    work (screened in Rust from the raw JSON, chain facts per cached account, judged against
    the job's stored state kept in memory, rows written per group); it only ever accepts
    what the reference path (``_authenticate``, ``_chain_phase``, ``_judge``) would accept,
    with the same answer and rows, and leaves everything else to it.
    """

    def __init__(self, cfg: VerifyConfig, store: Store, client: ChainClient,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.time,
                 provider_ttl: float = 30.0,
                 on_equivocation: EquivocationHook | None = None,
                 limits: StoreLimits = DEFAULT_LIMITS,
                 provider_cache_size: int = DEFAULT_PROVIDER_CACHE,
                 job_ttl: float = DEFAULT_JOB_TTL,
                 job_reads: ReadBudget | None = None) -> None:
        cfg.validate()
        self.cfg = cfg
        self.store = store
        self.client = client
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.limits = limits
        self.providers = ProviderKeys(client, provider_ttl, max_entries=provider_cache_size)
        self.jobs = JobAccounts(client, job_ttl)
        self.job_reads = job_reads or ReadBudget(JOB_READS_PER_SOURCE)
        """Job reads each request source may cause (``submit``'s ``source``)."""
        self.on_equivocation = on_equivocation
        self._group = GroupCommit(self._commit_group)
        self._memo: dict[bytes, fastlane.Memo] = store.lane_memo if store.serial_writers else {}
        """The fast lane's copies of stored job states (``fastlane.Memo``; used by the group
        commit's leader only, under the store's transaction). They live with the store's
        connection, so every intake on one store shares them."""
        self._job_facts = fastlane.FactsCache(lambda v: fastlane.JobFacts.of(v, cfg),
                                              self.jobs.max_entries)
        self._provider_facts = fastlane.FactsCache(
            lambda v: fastlane.ProviderFacts.of(v, cfg), provider_cache_size)
        self._chain_notes: dict[bytes, tuple[Any, fastlane.JobFacts]] = {}
        """Jobs the fast lane accepted a proof of in this group, with the view judged against
        and its facts (their chain facts are stored after the lane's rows, ``_flush``)."""
        self._chain_written: dict[bytes, Any] = {}
        """Per job, the job account whose chain facts were last stored (``_judge``, under the
        group commit: one thread at a time)."""

    # ------------------------------------------------------------------ HTTP-shaped API

    def submit(self, obj: object, source: str = "") -> tuple[int, dict[str, Any]]:
        """Handle one SignedProof JSON object. ``source``: who sent it (``server.source_of``),
        whose ``job_reads`` budget pays for its job reads; "" (in-process callers) pays
        none."""
        item = _Item(obj)
        self._handle([item], batch=False, source=source)
        assert item.answer is not None
        return item.answer

    def submit_batch(self, obj: object, source: str = "") -> tuple[int, dict[str, Any]]:
        """Handle ``{"proofs": [...]}``: each proof is handled in order, independently,
        except that a job's later windows never overtake an earlier one: after a retryable
        answer for a job, that job's remaining items get the same answer, and after a 503
        (chain or database unavailable) every remaining item does."""
        try:
            raw = parse_batch(obj)
        except Rejection as r:
            self.metrics.proof("rejected", r.reason)
            return r.http_status, r.body()
        items = [_Item(x) for x in raw]
        self._handle(items, batch=True, source=source)
        return 200, {"results": [it.answer[1] for it in items if it.answer is not None]}

    # ------------------------------------------------------------------ core

    def _handle(self, items: list[_Item], batch: bool, source: str = "") -> None:
        """Decide every item (``item.answer``); see the class docstring for the phases. Items
        the fast lane screens and whose chain checks pass (``_fast_chain``) skip the
        reference path's phases 1 and 2."""
        budget = self.job_reads.payer(source)
        slow = [it for it, s in zip(items, fastlane.screen([it.raw for it in items], self.cfg))
                if s is None or not self._fast_chain(it, s, budget)]
        self._authenticate(slow)
        self._chain_phase([it for it in slow if it.answer is None], budget)
        self._store_phase(items)
        for it in items:
            assert it.answer is not None

    def _fast_chain(self, it: _Item, s: tuple, budget: Callable[[], bool] | None = None
                    ) -> bool:
        """True (and ``it`` marked for the fast lane) when the screened proof passes
        ``check_assignment``, ``check_committee`` and ``check_worker_key`` with the current
        key, from the cached accounts; False leaves everything to the reference path."""
        job, provider = s[fastlane.JOB], s[fastlane.PROVIDER]
        try:
            view = self.jobs.get(job, budget=budget)
            if view is None:
                return False
            facts = self._job_facts.get(job, view)
            if not facts.eligible or facts.provider != provider:
                return False
            account = self.providers.get(provider)
        except (ChainUnavailable, ReadRefused):
            return False
        if account is None or not self._provider_facts.get(provider, account).signs(
                s[fastlane.WORKER_KEY], s[fastlane.WINDOW_END]):
            return False
        it.fast, it.facts, it.view, it.job = s, facts, view, job
        return True

    def _authenticate(self, items: list[_Item]) -> None:
        """Phase 1 of the reference path: schema and authentication (``it.auth`` or
        ``it.answer``)."""
        signed: list[SignedProof] = []
        pending: list[_Item] = []
        for it in items:
            try:
                signed.append(parse_signed_proof(it.raw))
                pending.append(it)
            except Rejection as r:
                it.answer = self._answer(r)
        for it, res in zip(pending, authenticate_all(signed, self.cfg)):
            if isinstance(res, Rejection):
                it.answer = self._answer(res)
            else:
                it.auth, it.job = res, res.proof.job

    def _chain_phase(self, items: list[_Item], budget: Callable[[], bool] | None = None
                     ) -> None:
        """Job assignment, committee membership and key validity, before anything is stored
        or compared. A proof already accepted here (same job, seq, hash) is a duplicate and
        needs no chain read. A job read its source's budget refuses is a retryable 429
        ``chain_read_budget``."""
        for it in items:
            auth = it.auth
            assert auth is not None
            p = auth.proof
            try:
                try:
                    it.view = self.jobs.get(p.job, budget=budget)
                except ReadRefused:
                    raise read_refused(self.job_reads) from None
                verify.check_assignment(auth, it.view, self.cfg)
                verify.check_committee(it.view, self.cfg)
                self._check_key(auth)
            except Rejection as r:
                # These exact bytes passed every check when they were stored: a retry of a
                # proof accepted here stays a duplicate even once the job is gone from chain
                # (and, below, while the chain cannot be read).
                if self._accepted_before(auth):
                    it.answer = self._duplicate(auth)
                else:
                    it.answer = self._answer(r, auth)
            except ChainUnavailable as e:
                try:
                    accepted = self._accepted_before(auth)
                except StoreError:
                    accepted = False
                it.answer = self._duplicate(auth) if accepted else self._unavailable_chain(e)
            except StoreError as e:
                it.answer = self._unavailable_store(e)

    def _accepted_before(self, auth: Authenticated) -> bool:
        p = auth.proof
        return self.store.decision_of(p.job, p.seq, auth.hash) == "accepted"

    def _duplicate(self, auth: Authenticated) -> tuple[int, dict[str, Any]]:
        self.metrics.proof("duplicate")
        return 200, {"status": "duplicate", "job": _b58(auth.proof.job), "seq": auth.proof.seq}

    def _store_phase(self, items: list[_Item]) -> None:
        """Phase 3 for this request's items, committed together with whatever other requests
        are waiting at the same moment (``GroupCommit``); returns once they are decided and,
        for accepted ones, durable."""
        self._group.run(items)

    def _commit_group(self, requests: list[list[_Item]],
                      release: Callable[[], None] = lambda: None) -> None:
        """Phase 3 of several requests (one thread at a time), in arrival order, under one
        store transaction: per request the hold-back rules, then each proof's stored checks
        and write. Once committed, ``release()`` lets the next group start while this one's
        fsync runs (``Store.make_durable``). If the transaction or its fsync fails, every
        item decided here is answered 503 (nothing of it was kept, or it may be lost);
        answers of accepted proofs are only read once durable."""
        decided_before = [[it.answer is not None for it in req] for req in requests]
        equivocations: list[tuple[Authenticated, StoredProof]] = []
        lane: fastlane.FastLane | None = None
        try:
            with self.store.batch(durable=False):
                enabled = self.store.serial_writers
                if not (enabled and self.store.intake_memo_valid()):
                    self._memo.clear()  # another connection wrote: the copies may be stale
                lane = fastlane.FastLane(self._memo, self.store, enabled, self.clock,
                                         self.jobs.max_entries)
                lane.preload(it.job for req in requests for it in req
                             if it.fast is not None and it.answer is None)
                self._chain_notes = {}
                for req in requests:
                    self._judge_request(req, equivocations, lane)
                self._flush(lane)
                # Still under the store's lock: no other intake's group sees the memo between
                # this group's writes and its overlay (a failed COMMIT clears it below).
                lane.committed()
        except StoreError as e:
            self._chain_written.clear()  # rolled back with the rest
            self._memo.clear()
            self._fail_group(requests, decided_before, e)
            return
        except BaseException:
            # Whatever failed, the copies may be ahead of the database.
            self._chain_written.clear()
            self._memo.clear()
            raise
        release()  # committed: the next group may write while this one's fsync runs
        try:
            self.store.make_durable()
        except StoreError as e:
            # The store now refuses every transaction (``make_durable``), the next group's
            # included, so the memo and the notes, which the next leader may be using, are
            # left alone: nothing is decided against them any more.
            self._fail_group(requests, decided_before, e)
            return
        assert lane is not None
        if lane.accepted:
            self.metrics.proof("accepted", n=lane.accepted)
        debug = log.isEnabledFor(logging.DEBUG)
        for req in requests:
            for it in req:
                if it.verdict is not None:
                    self._log_accepted(it)
                elif debug and it.fast is not None and it.auth is None:
                    self._log_lane_accepted(it)
        if self.on_equivocation is not None:
            for auth, other in equivocations:
                self.on_equivocation(auth, other)

    def _fail_group(self, requests: list[list[_Item]], decided_before: list[list[bool]],
                    e: StoreError) -> None:
        """Answer 503 to every item of the group that was not decided before its store
        phase (what the phase decided was not kept, or may be lost)."""
        failed = self._unavailable_store(e)
        for req, before in zip(requests, decided_before):
            for it, was in zip(req, before):
                if not was or it.answer is None:
                    it.answer = failed

    def _judge_request(self, items: list[_Item],
                       equivocations: list[tuple[Authenticated, StoredProof]],
                       lane: fastlane.FastLane) -> None:
        """A job's later windows never overtake an earlier one: after a retryable answer for a
        job, the request's remaining items of that job get the same answer; after a 503
        every remaining item does."""
        held: dict[bytes, tuple[int, dict[str, Any]]] = {}
        everything: tuple[int, dict[str, Any]] | None = None
        for it in items:
            if everything is not None:
                it.answer = everything
                continue
            if it.job is not None and it.job in held:
                it.answer = held[it.job]
                continue
            if it.answer is None:
                it.answer = self._judge_item(it, equivocations, lane)
            status, body = it.answer
            if status == 503:
                everything = it.answer
            elif body.get("retry") is True and it.job is not None:
                held[it.job] = it.answer
                # A state that can heal (the job not started or not found yet on this node's
                # RPC): the retry reads the job afresh.
                self.jobs.forget(it.job)

    def _judge_item(self, it: _Item, equivocations: list[tuple[Authenticated, StoredProof]],
                    lane: fastlane.FastLane) -> tuple[int, dict]:
        """The fast lane's answer when it can give it, else the reference path's (``_judge``,
        after the lane's queued rows are written, so it reads what the lane decided). The
        lane's memo follows what the reference path decided."""
        if it.fast is not None:
            assert it.facts is not None and it.job is not None
            body = lane.try_accept(it.fast, it.facts)
            if body is not None:
                self._chain_notes[it.job] = (it.view, it.facts)
                return 200, body
            if it.auth is None and not self._authenticate_one(it):
                assert it.answer is not None
                return it.answer
        self._flush(lane)
        answer = self._judge(it, equivocations)
        assert it.auth is not None
        lane.forget(it.auth.proof.job)
        return answer

    def _flush(self, lane: fastlane.FastLane) -> None:
        """Write the lane's queued rows, then, in one statement, the chain facts of their jobs
        whose account was read again since they were last stored (the rows exist only once
        written; a job's first row carries them already)."""
        lane.flush()
        inserted, lane.inserted = lane.inserted, {}
        notes, self._chain_notes = self._chain_notes, {}
        due: list[tuple[bytes, Any, fastlane.JobFacts]] = []
        for job, (view, facts) in notes.items():
            if inserted.get(job) is facts:
                self._chain_stored(job, view)
            elif self._chain_written.get(job) is not view:
                due.append((job, view, facts))
        if due:
            self.store.update_chain_infos([(job, f.info) for job, _, f in due], self.clock())
            for job, view, _ in due:
                self._chain_stored(job, view)

    def _authenticate_one(self, it: _Item) -> bool:
        """The reference path's ``auth`` of a screened item the lane left (screening accepts
        only what ``authenticate`` accepts, so this is a Rejection only if they disagree)."""
        self._authenticate([it])
        return it.answer is None

    def _note_chain_facts(self, job: bytes, view: Any) -> None:
        """Store the job's chain facts when its account was read again since they were last
        stored (they change only then: written once per read, not once per proof)."""
        if self._chain_written.get(job) is not view:
            self.store.update_chain_info(job, job_info(view), self.clock())
            self._chain_stored(job, view)

    def _chain_stored(self, job: bytes, view: Any) -> None:
        """The store holds the chain facts of ``view`` for ``job`` (rolled back with the
        group: ``_commit_group`` clears this when the group fails)."""
        self._chain_written.pop(job, None)
        self._chain_written[job] = view
        while len(self._chain_written) > self.jobs.max_entries:
            self._chain_written.pop(next(iter(self._chain_written)))

    def _judge(self, it: _Item,
               equivocations: list[tuple[Authenticated, StoredProof]]) -> tuple[int, dict]:
        """One authenticated, assigned proof, inside the store batch. StoreError propagates
        (the batch is rolled back)."""
        auth, job = it.auth, it.view
        assert auth is not None
        p = auth.proof
        ok = {"job": _b58(p.job), "seq": p.seq}
        view = self.store.intake_view(p.job, p.seq)
        stored = view.at_seq
        if any(s.hash == auth.hash and s.decision == "accepted" for s in stored):
            return self._duplicate(auth)
        other = next((s for s in stored if s.hash != auth.hash), None)
        if other is not None:
            return self._answer(self._equivocation(auth, other, ok["job"], equivocations))
        local = view.state
        state = start_state(local, baseline_state(job), p.seq)
        prev = _prev(view.before, p.seq, state)
        try:
            verdict = verify.check_window(auth, job, state, self.cfg, int(self.clock()), prev)
        except Rejection as r:
            self._store_rejection(auth, r, state)
            return self._answer(r, auth)
        now = self.clock()
        self.store.record_accepted(auth, verdict, None if local is None else local.last_seq, now)
        self._note_chain_facts(p.job, job)
        self.metrics.proof("accepted")
        it.verdict = verdict
        return 200, {"status": "accepted", **ok, "approved_seconds": verdict.approved_seconds,
                     "approved_total": verdict.approved_total}

    def _log_accepted(self, it: _Item) -> None:
        auth, verdict = it.auth, it.verdict
        assert auth is not None and verdict is not None
        p = auth.proof
        if verdict.missed_seqs:
            log.warning("job=%s missed windows seq %d..%d", _b58(p.job), verdict.missed_seqs[0],
                        verdict.missed_seqs[-1])
        if log.isEnabledFor(logging.DEBUG):
            log.debug("accepted job=%s seq=%d billable=%d approved=%d cumulative=%d "
                      "approved_total=%d", _b58(p.job), p.seq, p.billable_seconds,
                      verdict.approved_seconds, p.cumulative_seconds, verdict.approved_total)

    @staticmethod
    def _log_lane_accepted(it: _Item) -> None:
        """``_log_accepted``'s debug line for a proof the fast lane accepted (it is the next
        window of its job, so it missed no window)."""
        assert it.fast is not None and it.answer is not None
        s, body = it.fast, it.answer[1]
        if body.get("status") == "accepted":
            log.debug("accepted job=%s seq=%d billable=%d approved=%d cumulative=%d "
                      "approved_total=%d", body["job"], s[fastlane.SEQ], s[fastlane.BILLABLE],
                      body["approved_seconds"], s[fastlane.CUMULATIVE], body["approved_total"])

    def _answer(self, r: Rejection, auth: Authenticated | None = None
                ) -> tuple[int, dict[str, Any]]:
        self.metrics.proof("retry" if r.retryable else "rejected", r.reason)
        where = ""
        if auth is not None:
            where = f" job={_b58(auth.proof.job)} seq={auth.proof.seq}"
        log.info("rejected%s reason=%s retry=%s: %s", where, r.reason, r.retryable, r.message)
        return r.http_status, r.body()

    def _unavailable_chain(self, e: ChainUnavailable) -> tuple[int, dict[str, Any]]:
        self.metrics.proof("unavailable", "chain_unavailable")
        log.warning("chain unavailable: %s", e)
        return _unavailable("chain_unavailable", str(e))

    def _unavailable_store(self, e: StoreError) -> tuple[int, dict[str, Any]]:
        self.metrics.proof("unavailable", "store_error")
        log.error("store error: %s", e)
        return _unavailable("store_unavailable", str(e))

    def _equivocation(self, auth: Authenticated, other: StoredProof, job_b58: str,
                      found: list[tuple[Authenticated, StoredProof]]) -> Equivocation:
        """Both proofs are signed by keys of the job's own provider (nothing else is ever
        stored): keep the first pair as evidence, have the reporter woken after the commit,
        answer 409."""
        p = auth.proof
        new = self.store.record_equivocation(auth, other.hash, self.clock())
        if new:
            log.critical("EQUIVOCATION job=%s seq=%d: two signed proofs %s and %s; evidence "
                         "stored", job_b58, p.seq, auth.hash.hex()[:16], other.hash.hex()[:16])
        found.append((auth, other))
        return Equivocation(f"a different proof for job {job_b58} seq {p.seq} was already "
                            "received; the first pair is kept as slashing evidence")

    def _store_rejection(self, auth: Authenticated, r: Rejection, state: JobState) -> None:
        """Keep a rejected proof (the worker signed it: its head must show it, and a
        different proof for that seq is equivocation) only when it extends the job's stored
        sequence and fits ``StoreLimits``; otherwise it is answered but never reserves its
        (job, seq)."""
        p = auth.proof
        frontier = max(state.last_seq, self.store.max_seq(p.job))
        why = "ahead" if p.seq > frontier + 1 else self.store.record_rejected(
            auth, r.reason, self.clock(), self.limits)
        if why is not None:
            self.metrics.rejection_unstored(why)
            log.info("rejected proof job=%s seq=%d not stored (%s)", _b58(p.job), p.seq, why)

    def _check_key(self, auth: Authenticated) -> None:
        provider = self.providers.get(auth.proof.provider)
        try:
            verify.check_worker_key(auth, provider, self.cfg)
        except Rejection as r:
            if r.reason not in _KEY_REASONS:
                raise
            # The cache may predate a rotation or registration: re-read once, then decide.
            provider = self.providers.get(auth.proof.provider, refresh=True)
            verify.check_worker_key(auth, provider, self.cfg)


def _prev(before: list[StoredProof], seq: int, state: JobState) -> PrevProof | None:
    """The worker's proof of ``seq - 1`` as stored here (``before``: the accepted one, else
    the only one), else the state's last receipt when that is ``seq - 1`` and its hash is
    known (the chain's last settled receipt for a job this validator starts on, or the job's
    start for seq 1), else None."""
    accepted = [s for s in before if s.decision == "accepted"]
    pick = accepted[0] if accepted else (before[0] if len(before) == 1 else None)
    if pick is not None:
        return PrevProof(pick.hash, pick.cumulative_seconds, pick.window_end)
    if state.last_seq == seq - 1 and (state.last_hash is not None or state.last_seq == 0):
        # The chain's last settled receipt, or the job's start (nothing claimed yet).
        return PrevProof(state.last_hash or ZERO_HASH, state.cumulative_seconds,
                         state.last_window_end)
    return None


def start_state(local: JobState | None, chain: JobState, seq: int) -> JobState:
    """The state a proof of ``seq`` is judged against: this validator's own history, unless it
    has none, or the chain has settled past it and the proof is after the chain's last
    receipt; then the chain's (the committee's approved ``paid_seconds``, its last receipt),
    keeping the GPU set this validator saw."""
    if local is None:
        return chain
    if chain.last_seq > local.last_seq and seq > chain.last_seq:
        return JobState(chain.last_seq, chain.cumulative_seconds, chain.last_window_end,
                        local.gpu_uuids, chain.approved_total, chain.last_hash)
    return local
