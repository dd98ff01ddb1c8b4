"""The member side of a committee: the endpoints other members (leaders) call.

``POST /v1/attestations/query``  ``{"job", "seq"}`` -> this validator's approved total for the
job up to that seq and the receipt it holds there.
``POST /v1/attestations/sign``   ``{"job", "seq", "approved_seconds", "leader",
"leader_signature", "leader_attestation"}`` -> ``{"authority", "signature"}``: an attestation
over ``attestation_message(receipt of ITS stored proof at seq, approved_seconds)``.
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
* a leader commits first: ``leader_attestation`` is the leader's own attestation of the value
  it asks for, over this member's receipt at seq (403 ``bad_leader_attestation`` otherwise).
  It is kept as evidence (``Store.record_received_attestation``) before anything else is
  decided, also when the request is refused, so a member that asks its peers to co-sign a
  value other than one it attested before for the same seq hands them the evidence that
  slashes its bond (``slashing.ValidatorEquivocationReporter``);
* at most one value is ever signed per (job, seq): it is on disk before the signature is
  returned (``Store.record_given_attestation``); the same value again gets the same
  signature, another value 409 ``already_signed_other_value`` (with the signed value), also
  after a restart;
* a downtime signature is given only for a Running job when this validator accepted no proof
  ending after ``last_proof_window_end`` (409 ``saw_later_proof``) and ``max_missed_windows``
  windows have passed since then and since the last settled window (409
  ``not_enough_missed_windows``), over a message that is exactly that slash
  (``attest.check_downtime_message``; 400 ``bad_downtime_message``).

Errors use the intake's body ``{"error", "message", "retry"}``; a chain or database failure is
503, retryable.
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from collections.abc import Callable
from typing import Any

from gpu_market.receipt import verify as verify_signature
from solders.message import Message
from solders.pubkey import Pubkey

from .attest import (
    attestation_message,
    check_downtime_message,
    receipt_message_of,
    sign_request_message,
)
from .chain import (
    JOB_READS_PER_SOURCE,
    AccountCache,
    JobAccounts,
    ReadBudget,
    ReadRefused,
    read_refused,
)
from .config import VerifyConfig
from .errors import (
    UNAVAILABLE_RETRY_AFTER_SECONDS,
    ChainUnavailable,
    Rejection,
    StoreError,
    error_body,
)
from .metrics import Metrics
from .schema import b58_pubkey
from .store import GivenAttestation, ReceivedAttestation, Store
from .verify import committee_of, field_of, status_of

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
                 jobs: AccountCache | None = None, job_reads: ReadBudget | None = None
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
        o = _fields(obj, ("job", "seq", "approved_seconds", "leader", "leader_signature",
                          "leader_attestation"))
        job = b58_pubkey(o["job"], "job")
        seq = _int(o, "seq", 1, U64_MAX)
        approved = _int(o, "approved_seconds", 0, U64_MAX)
        leader = b58_pubkey(o["leader"], "leader")
        leader_sig = _b64(o, "leader_signature", 64)
        leader_att = _b64(o, "leader_attestation", 64)
        not_member = Rejection("requester_not_member", "only another member of the job's "
                               "committee may ask for an attestation", 403)
        if leader == self.me:
            raise not_member
        # Checked before the job is read: a forged request costs no chain read.
        if not verify_signature(leader, leader_sig, sign_request_message(job, seq, approved,
                                                                         leader)):
            raise Rejection("bad_request_signature", "leader_signature is not the leader's "
                            "signature over this request", 403)
        view = self._job(job, budget)
        if leader not in committee_of(view):
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
        given = self.store.given_attestation(job, seq)
        if given is None:
            msg = attestation_message(receipt_message_of(stored), approved)
            sig = bytes(self.authority.sign_message(msg))
            given = self.store.record_given_attestation(GivenAttestation(
                job, seq, approved, stored.hash, sig, leader, self.clock()))
        if given.approved_seconds != approved or given.proof_hash != stored.hash:
            body = Rejection("already_signed_other_value", f"this validator already attested "
                             f"{given.approved_seconds} seconds for seq {seq}; it never signs "
                             "two values for one seq", 409)
            raise _WithExtra(body, {"signed_approved_seconds": given.approved_seconds})
        log.info("attested job=%s seq=%d approved=%d for leader %s", o["job"], seq, approved,
                 o["leader"])
        return {"authority": str(Pubkey.from_bytes(self.me)),
                "signature": base64.b64encode(given.signature).decode()}

    def _downtime_sign(self, obj: object, budget: Callable[[], bool] | None
                       ) -> dict[str, Any]:
        o = _fields(obj, ("job", "last_proof_window_end", "message"))
        job = b58_pubkey(o["job"], "job")
        lpwe = _int(o, "last_proof_window_end", I64_MIN, I64_MAX)
        raw = _b64(o, "message", 1232)
        view = self._job(job, budget)
        try:
            message = Message.from_bytes(raw)
            check_downtime_message(message, self.cfg.program_id, job, lpwe, self.me,
                                   committee_of(view))
        except ValueError as e:
            raise Rejection("bad_downtime_message", f"not a slash_downtime this validator "
                            f"signs: {e}", 400) from None
        status = status_of(view)
        if status != "running":
            raise Rejection("job_not_running", f"the job is {status}; only a running job "
                            "misses windows", 409)
        newest = self.store.newest_accepted(job)
        if newest is not None and newest.window_end > lpwe:
            raise Rejection("saw_later_proof", f"this validator accepted a proof of the job "
                            f"ending at {newest.window_end}, after {lpwe}", 409)
        terms = field_of(view, "terms")
        window = int(field_of(terms, "window_seconds"))
        needed = int(field_of(terms, "max_missed_windows")) * window
        since = max(lpwe, int(field_of(view, "last_window_end")))
        idle = int(self.clock()) - since
        if idle < needed:
            raise Rejection("not_enough_missed_windows", f"only {idle}s without a proof; "
                            f"the job's terms need {needed}s", 409)
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
