"""The member side of a committee: the endpoints other members (leaders) call.

``POST /v1/attestations/query``  ``{"job", "seq"}`` -> this validator's approved total for the
job up to that seq and the receipt it holds there.
``POST /v1/attestations/sign``   ``{"job", "seq", "approved_seconds", "leader", "member",
"round", "attempt", "leader_signature", "leader_attestation"}`` -> ``{"authority",
"signature"}``: an attestation over ``attestation_message(receipt of ITS stored proof at seq,
approved_seconds)``.
``POST /v1/downtime/sign``       ``{"job", "last_proof_window_end", "message"}`` -> its
signature over a ``slash_downtime`` transaction message.

Guarantees:

* every request is about a job whose on-chain committee names this validator; else 403
  ``not_in_committee`` (nothing is revealed or signed for other jobs);
* an attestation is only ever over this validator's own accepted receipt at that seq, for
  a value at most its own approved total there (409 ``above_own_total``), requested by
  another member of the job's committee that signed the request
  (``attest.sign_request_message``; 403 ``requester_not_member`` / ``bad_request_signature``):
  a stranger can neither obtain an attestation nor pin this member to a value;
* a request is bound to its target and its round: ``member`` must be this validator (403
  ``request_not_for_this_member``: a request sent to one member cannot be replayed to
  another), the leader must be the designated leader of ``round`` after ``attempt`` timeouts
  (``attest.leader_of``; 403 ``not_round_leader``), ``round`` must be ``seq //
  settle_every`` and ``attempt`` no more than the timeouts elapsed since this validator
  received the round's first proof, plus one (``attest.attempt_bound``), and not below an
  attempt it already answered for that seq (409 ``round_not_current``, retryable). So a
  member that is not the round's leader cannot get an honest co-signature at all, and can
  make itself leader only after every member before it in the rotation had a full timeout;
* what an honest member co-signs: the designated leader's value, when it is at most its own
  approved total (409 ``above_own_total``) and not below the value it would propose itself
  from the totals it can see (409 ``below_quorum_value``): the q-th highest of its own total
  and the totals the other members answer it now (``/v1/attestations/query``, asked in
  parallel within half the peer deadline), within ``settle``'s bounds; with fewer than q
  totals known there is no floor. "Never below its own total" would refuse honest rounds
  whenever another honest member approved less (a stricter health policy), so the floor is
  the quorum value, not the member's own total: a leader cannot lowball a committee with an
  honest quorum, and lies from other members can only lower the floor (they delay, never
  cost: a settle pays approved totals up to the worker's cumulative claim, so a later round
  pays what a low one skipped);
* a leader commits first: ``leader_attestation`` is the leader's own attestation of the value
  it asks for, over this member's receipt at seq (403 ``bad_leader_attestation`` otherwise).
  It is kept as evidence (``Store.record_received_attestation``) before anything else is
  decided, also when the request is refused, so a member that asks its peers to co-sign a
  value other than one it attested before for the same seq hands them the evidence that
  slashes its bond (``slashing.ValidatorEquivocationReporter``);
* at most one value is ever signed per (job, seq), in any role: every attestation goes
  through ``signing.AttestationSigner`` (on disk before the signature is returned); the same
  value again gets the same signature, another value 409 ``already_signed_other_value`` (with
  the signed value), also after a restart, also when this node signed it as a leader;
* a downtime signature is given only by an Active validator (409 ``not_active`` while it is
  exiting or its account cannot be read: the program counts only Active members for
  downtime; an exiting member still answers and co-signs settlement as above), only for a
  Running or Finishing job (silence counted up to
  ``ended_at`` once Finishing) when this validator accepted no proof ending after
  ``last_proof_window_end``, no other member holds one it verifies (409
  ``saw_later_proof``; ``downtime.heard_elsewhere``) and ``max_missed_windows``
  windows have passed since then and since the last settled window (409
  ``not_enough_missed_windows``), all of them watched by this node while it was up and
  reachable, with the rejoin grace when it began watching after the silence began (409
  ``not_observed``, retryable; ``liveness.watch_due``), over a message that is
  exactly that slash (``attest.check_downtime_message``; 400 ``bad_downtime_message``).

Errors use the intake's body ``{"error", "message", "retry"}``; a chain or database failure is
503, retryable.
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpu_market.receipt import verify as verify_signature
from solders.message import Message
from solders.pubkey import Pubkey

from .attest import (
    attempt_bound,
    attestation_message,
    check_downtime_message,
    leader_of,
    member_total,
    quorum_value,
    receipt_message_of,
    settle_bound,
    sign_request_message,
)
from .chain import (
    JOB_READS_PER_SOURCE,
    AccountCache,
    JobAccounts,
    ReadBudget,
    ReadRefused,
    job_info,
    read_refused,
)
from .config import SettlePolicy, VerifyConfig
from .downtime import heard_elsewhere
from .errors import (
    UNAVAILABLE_RETRY_AFTER_SECONDS,
    ChainUnavailable,
    Rejection,
    StoreError,
    error_body,
)
from .liveness import Liveness, watch_due
from .metrics import Metrics
from .peers import Peers
from .records import ReceivedAttestation, Store, StoredProof
from .schema import b58_pubkey
from .signing import AttestationSigner, SignedOtherValue
from .verify import committee_of, field_of, quorum_of, status_of

log = logging.getLogger("gpum_validator.members")

U64_MAX = 2**64 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def _bad(message: str) -> Rejection:
    return Rejection("bad_request", message, 400)


def _fields(obj: object, names: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _bad("the body must be a JSON object")
    unknown = sorted(set(obj) - set(names))
    missing = [n for n in names if n not in obj]
    if unknown or missing:
        raise _bad(f"expected exactly the fields {', '.join(names)}")
    return obj


def _int(obj: dict[str, Any], name: str, lo: int, hi: int) -> int:
    v = obj[name]
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _bad(f"{name} must be an integer in [{lo}, {hi}]")
    return v


def _b64(obj: dict[str, Any], name: str, max_len: int) -> bytes:
    v = obj[name]
    if not isinstance(v, str) or len(v) > max_len * 4 // 3 + 4:
        raise _bad(f"{name} must be base64 of at most {max_len} bytes")
    try:
        raw = base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(f"{name} is not valid base64") from None
    return raw


class Member:
    """Answers other committee members; ``authority`` is this validator's Keypair."""

    def __init__(self, cfg: VerifyConfig, authority: Any, store: Store, client: Any,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.time,
                 jobs: AccountCache | None = None, job_reads: ReadBudget | None = None,
                 policy: SettlePolicy | None = None, liveness: Liveness | None = None,
                 peers: Peers | None = None,
                 deliver: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]] | None = None
                 ) -> None:
        self.cfg = cfg
        self.authority = authority
        self.me = bytes(authority.pubkey())
        if self.me != cfg.authority:
            raise ValueError("the keypair is not the configured validator authority")
        self.store = store
        self.client = client
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.jobs = jobs or JobAccounts(client, ttl=0, max_entries=1)
        """Where job accounts are read (``gpum-validator run``: the intake's ``JobAccounts``,
        so a job's reads are shared and kept as long as the intake keeps them); by default
        the chain is read at every request (TTL 0)."""
        self.job_reads = job_reads or ReadBudget(JOB_READS_PER_SOURCE)
        """Job reads each request source may cause (the intake's budget, under ``run``)."""
        self.policy = policy or SettlePolicy()
        """The committee's round rules (``settle_every_windows``, ``leader_timeout_windows``);
        the members of a committee must agree on them, as they agree on who leads."""
        self.signer = AttestationSigner(authority, store, clock)
        self.liveness = liveness
        """This node's uptime; None: only this object's lifetime counts as observed."""
        self.peers = peers
        self.deliver = deliver
        """The other members and this node's intake (``submit``): before co-signing a
        downtime, proofs the other members hold are verified here
        (``downtime.heard_elsewhere``)."""
        self._started = clock()
        self._attempts: dict[tuple[bytes, int], int] = {}
        """The highest attempt answered per (job, seq) (bounded; forgetting one only lets an
        older attempt of that seq be answered again with the same stored value)."""
        self._attempts_lock = threading.Lock()

    def observation_start(self, since: float) -> float | None:
        """From when this node watched the silence since ``since`` (None: not up now)."""
        if self.liveness is None:
            return max(since, self._started)
        return self.liveness.observation_start(since)

    # ------------------------------------------------------------------ HTTP-shaped API
    # ``source``: who sent the request (``server.source_of``); the job reads it causes are
    # paid from that source's ``job_reads`` budget ("": in-process callers, none).

    def query(self, obj: object, source: str = "") -> tuple[int, dict[str, Any]]:
        return self._answer("query", self._query, obj, source)

    def sign(self, obj: object, source: str = "") -> tuple[int, dict[str, Any]]:
        return self._answer("sign", self._sign, obj, source)

    def downtime_sign(self, obj: object, source: str = "") -> tuple[int, dict[str, Any]]:
        return self._answer("downtime_sign", self._downtime_sign, obj, source)

    def _answer(self, what: str, fn: Callable[[object, Callable[[], bool] | None],
                                              dict[str, Any]],
                obj: object, source: str) -> tuple[int, dict[str, Any]]:
        try:
            body = fn(obj, self.job_reads.payer(source))
        except Rejection as r:
            self.metrics.member_request(what, r.reason)
            return r.http_status, r.body()
        except ChainUnavailable as e:
            self.metrics.member_request(what, "chain_unavailable")
            return 503, error_body("chain_unavailable", f"{e}; retry later",
                                   UNAVAILABLE_RETRY_AFTER_SECONDS)
        except StoreError as e:
            self.metrics.member_request(what, "store_unavailable")
            log.error("store error: %s", e)
            return 503, error_body("store_unavailable", f"{e}; retry later",
                                   UNAVAILABLE_RETRY_AFTER_SECONDS)
        self.metrics.member_request(what, "ok")
        return 200, body

    # ------------------------------------------------------------------ checks

    def _job(self, job: bytes, budget: Callable[[], bool] | None) -> Any:
        """The job's account, after checking this validator is on its committee. A read
        ``budget`` refuses is a retryable 429 ``chain_read_budget``."""
        try:
            view = self.jobs.get(job, budget=budget)
        except ReadRefused:
            raise read_refused(self.job_reads) from None
        if view is None or bytes(field_of(view, "market")) != self.cfg.market:
            raise Rejection("job_not_found", "no job of this market at that address", 404)
        if self.me not in committee_of(view):
            raise Rejection("not_in_committee", "this validator is not on the job's "
                            "committee; ask the members the job names on chain", 403)
        return view

    def _accepted(self, job: bytes, seq: int) -> Any:
        stored = self.store.accepted_at(job, seq)
        if stored is None:
            if self.store.newest_accepted(job) is None:
                raise Rejection("job_unknown", "this validator accepted no proof of the job",
                                404)
            raise Rejection("seq_unknown", f"this validator did not accept seq {seq} of the "
                            "job", 404)
        return stored

    # ------------------------------------------------------------------ handlers

    def _query(self, obj: object, budget: Callable[[], bool] | None) -> dict[str, Any]:
        o = _fields(obj, ("job", "seq"))
        job = b58_pubkey(o["job"], "job")
        seq = _int(o, "seq", 1, U64_MAX)
        self._job(job, budget)
        stored = self._accepted(job, seq)
        given = self.store.given_attestation(job, seq)
        return {"job": o["job"], "seq": seq, "approved_seconds": int(stored.approved_total or 0),
                "receipt": {"seq": seq, "cumulative_seconds": stored.cumulative_seconds,
                            "window_end": stored.window_end, "proof_hash": stored.hash.hex()},
                "signed_approved_seconds": None if given is None else given.approved_seconds}

    def _sign(self, obj: object, budget: Callable[[], bool] | None) -> dict[str, Any]:
        o = _fields(obj, ("job", "seq", "approved_seconds", "leader", "member", "round",
                          "attempt", "leader_signature", "leader_attestation"))
        job = b58_pubkey(o["job"], "job")
        seq = _int(o, "seq", 1, U64_MAX)
        approved = _int(o, "approved_seconds", 0, U64_MAX)
        leader = b58_pubkey(o["leader"], "leader")
        target = b58_pubkey(o["member"], "member")
        round_ = _int(o, "round", 0, U64_MAX)
        attempt = _int(o, "attempt", 0, U64_MAX)
        leader_sig = _b64(o, "leader_signature", 64)
        leader_att = _b64(o, "leader_attestation", 64)
        not_member = Rejection("requester_not_member", "only another member of the job's "
                               "committee may ask for an attestation", 403)
        if target != self.me:
            raise Rejection("request_not_for_this_member", "the request names another member; "
                            "a leader signs one request per member", 403)
        if leader == self.me:
            raise not_member
        # Checked before the job is read: a forged request costs no chain read.
        if not verify_signature(leader, leader_sig, sign_request_message(
                job, seq, approved, leader, target, round_, attempt)):
            raise Rejection("bad_request_signature", "leader_signature is not the leader's "
                            "signature over this request", 403)
        view = self._job(job, budget)
        committee = committee_of(view)
        if leader not in committee:
            raise not_member
        stored = self._accepted(job, seq)
        if len(leader_att) != 64 or not verify_signature(
                leader, leader_att, attestation_message(receipt_message_of(stored), approved)):
            raise Rejection("bad_leader_attestation", "leader_attestation is not the leader's "
                            "own attestation of this value over this validator's receipt at "
                            "that seq", 403)
        if self.store.record_received_attestation(ReceivedAttestation(
                job, seq, leader, approved, stored.cumulative_seconds, stored.window_end,
                stored.hash, leader_att, self.clock())):
            log.critical("VALIDATOR EQUIVOCATION: member %s attested two different values for "
                         "job=%s seq=%d; evidence stored", o["leader"], o["job"], seq)
        own = int(stored.approved_total or 0)
        if approved > own:
            raise Rejection("above_own_total", f"this validator approved {own} seconds of the "
                            f"job up to seq {seq}, less than {approved}", 409)
        if leader_of(job, round_, committee, attempt) != leader:
            raise Rejection("not_round_leader", f"{o['leader']} does not lead round {round_} "
                            f"after {attempt} timeouts (attest.leader_of)", 403)
        self._check_round(view, stored, round_, attempt)
        given = self.signer.signed(job, seq)
        if given is None:  # a retry of what was signed needs no second look
            floor = self._quorum_floor(view, stored, committee, own)
            if floor is not None and approved < floor:
                raise Rejection("below_quorum_value", f"{approved} seconds is below {floor}, "
                                "the quorum value of the totals this validator can see "
                                "(its own and the other members'); it co-signs no lower "
                                "value", 409)
        try:
            given = self.signer.sign(stored, approved, leader)
        except SignedOtherValue as e:
            body = Rejection("already_signed_other_value", f"this validator already attested "
                             f"{e.given.approved_seconds} seconds for seq {seq}; it never signs "
                             "two values for one seq", 409)
            raise _WithExtra(body, {"signed_approved_seconds": e.given.approved_seconds}
                             ) from None
        log.info("attested job=%s seq=%d approved=%d for leader %s", o["job"], seq, approved,
                 o["leader"])
        return {"authority": str(Pubkey.from_bytes(self.me)),
                "signature": base64.b64encode(given.signature).decode()}

    def _quorum_floor(self, view: Any, stored: StoredProof, committee: list[bytes],
                      own: int) -> int | None:
        """The value this validator would propose itself from the totals it can see now: the
        q-th highest of its own and the other members' totals at this receipt (asked in
        parallel within half the peer deadline: the leader waits for this answer), within
        ``settle``'s bounds. None when fewer than q totals are known (no floor)."""
        q = quorum_of(view)
        if q <= 1:
            return None
        totals = [own]
        others = [m for m in committee if m != self.me]
        if self.peers is not None and others:
            peers = self.peers
            body = {"job": str(Pubkey.from_bytes(stored.job)), "seq": stored.seq}
            with ThreadPoolExecutor(len(others)) as pool:
                answers = list(pool.map(lambda m: peers.post(
                    m, "/v1/attestations/query", body, deadline=peers.timeout / 2), others))
            for a in answers:
                got = None if a is None or a.status != 200 else member_total(
                    a.body, stored.seq, stored.cumulative_seconds, stored.window_end,
                    stored.hash)
                if got is not None:
                    totals.append(got[0])
        value = quorum_value(totals, q)
        if value is None:
            return None
        return settle_bound(value, job_info(view), stored.cumulative_seconds,
                            stored.window_end)

    def _check_round(self, view: Any, stored: StoredProof, round_: int, attempt: int) -> None:
        """409 ``round_not_current`` unless (round, attempt) is the current round of the seq
        as far as this validator can tell (see the module docstring)."""
        seq, job = stored.seq, stored.job
        expected = seq // self.policy.settle_every_windows
        if round_ != expected:
            raise Rejection("round_not_current", f"seq {seq} is in round {expected}, not "
                            f"{round_}", 409, UNAVAILABLE_RETRY_AFTER_SECONDS)
        # The round began when its first seq arrived here (the leader saw it due no sooner).
        first = stored
        for s in range(max(1, expected * self.policy.settle_every_windows), seq):
            earlier = self.store.accepted_at(job, s)
            if earlier is not None:
                first = earlier
                break
        window = int(field_of(field_of(view, "terms"), "window_seconds"))
        bound = attempt_bound(min(first.received_at, stored.received_at), self.clock(),
                              self.policy.leader_timeout_windows * max(1, window))
        if attempt > bound:
            raise Rejection("round_not_current", f"attempt {attempt} has not begun: at most "
                            f"{bound} leader timeouts passed since this round's first proof "
                            "arrived here", 409, UNAVAILABLE_RETRY_AFTER_SECONDS)
        key = (job, seq)
        with self._attempts_lock:
            seen = self._attempts.get(key, -1)
            if attempt < seen:
                raise Rejection("round_not_current", f"attempt {attempt} of round {round_} is "
                                f"over; attempt {seen} already asked", 409,
                                UNAVAILABLE_RETRY_AFTER_SECONDS)
            self._attempts[key] = attempt
            if len(self._attempts) > 65536:
                self._attempts.pop(next(iter(self._attempts)))

    def _downtime_sign(self, obj: object, budget: Callable[[], bool] | None
                       ) -> dict[str, Any]:
        o = _fields(obj, ("job", "last_proof_window_end", "message"))
        job = b58_pubkey(o["job"], "job")
        lpwe = _int(o, "last_proof_window_end", I64_MIN, I64_MAX)
        raw = _b64(o, "message", 1232)
        view = self._job(job, budget)
        if self.peers is not None and not self.peers.active(self.me):
            raise Rejection("not_active", "this validator is not Active (exiting, or its "
                            "account could not be read): it attests no downtime", 409)
        try:
            message = Message.from_bytes(raw)
            check_downtime_message(message, self.cfg.program_id, job, lpwe, self.me,
                                   committee_of(view))
        except ValueError as e:
            raise Rejection("bad_downtime_message", f"not a slash_downtime this validator "
                            f"signs: {e}", 400) from None
        status = status_of(view)
        if status not in ("running", "finishing"):
            raise Rejection("job_not_running", f"the job is {status}; only a running or "
                            "finishing job misses windows", 409)
        # A finishing job missed windows only up to its finish.
        until = float(self.clock()) if status == "running" else min(
            float(self.clock()), float(field_of(view, "ended_at")))
        newest = self.store.newest_accepted(job)
        if newest is not None and newest.window_end > lpwe:
            raise Rejection("saw_later_proof", f"this validator accepted a proof of the job "
                            f"ending at {newest.window_end}, after {lpwe}", 409)
        terms = field_of(view, "terms")
        window = int(field_of(terms, "window_seconds"))
        needed = int(field_of(terms, "max_missed_windows")) * window
        since = max(lpwe, int(field_of(view, "last_window_end")))
        idle = int(until) - since
        if idle < needed:
            raise Rejection("not_enough_missed_windows", f"only {idle}s without a proof; "
                            f"the job's terms need {needed}s", 409)
        watched_from = self.observation_start(since)
        watched = None if watched_from is None else int(until - watched_from)
        if watched_from is None or watched is None or until < watch_due(since, watched_from,
                                                                          needed):
            raise Rejection("not_observed", "this validator has been up and reachable for "
                            f"{watched or 0}s of the {needed}s without a proof (plus a "
                            "rejoin grace when it came back during the silence); it attests "
                            "only silence it watched (the worker may still be delivering its "
                            "backlog)", 409, UNAVAILABLE_RETRY_AFTER_SECONDS)
        if (self.peers is not None and self.deliver is not None
                and heard_elsewhere(self.peers, self.deliver, job, self.me, committee_of(view),
                                    newest.seq if newest is not None else 0,
                                    # the leader waits for this answer within its own
                                    # deadline: ask the others in at most half of it
                                    deadline=self.peers.timeout / 2)):
            raise Rejection("saw_later_proof", "another member holds a later proof of the job, "
                            "which this validator verified and accepted", 409)
        sig = bytes(self.authority.sign_message(bytes(message)))
        log.warning("signed slash_downtime of job=%s last_proof_window_end=%d", o["job"], lpwe)
        return {"authority": str(Pubkey.from_bytes(self.me)),
                "signature": base64.b64encode(sig).decode()}


class _WithExtra(Rejection):
    """A rejection whose body carries extra fields."""

    def __init__(self, r: Rejection, extra: dict[str, Any]) -> None:
        super().__init__(r.reason, r.message, r.http_status)
        self.extra = extra

    def body(self) -> dict[str, object]:
        return {**super().body(), **self.extra}
