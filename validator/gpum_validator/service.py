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
* proofs of one job are verified one at a time (a fixed set of striped locks, so memory
  does not grow with the number of jobs); different jobs mostly run in parallel.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpu_market.proof import ZERO_HASH, ProofDecodeError, decode_proof
from solders.pubkey import Pubkey

from .chain import (
    DEFAULT_PROVIDER_CACHE,
    ChainClient,
    ProviderKeys,
    baseline_state,
    job_info,
    read,
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
from .schema import parse_batch, parse_signed_proof
from .store import DEFAULT_LIMITS, Store, StoredProof, StoreLimits
from .verify import (
    Authenticated,
    JobState,
    PrevProof,
    authenticate,
    check_assignment,
    check_committee,
    check_window,
    check_worker_key,
)

log = logging.getLogger("gpum_validator.intake")

EquivocationHook = Callable[[Authenticated, StoredProof], None]
_KEY_REASONS = ("provider_not_found", "unknown_worker_key", "worker_key_expired")
_LOCK_STRIPES = 64


def _b58(b: bytes) -> str:
    return str(Pubkey.from_bytes(b))


def _unavailable(reason: str, message: str) -> tuple[int, dict[str, Any]]:
    return 503, error_body(reason, f"{message}; retry later", UNAVAILABLE_RETRY_AFTER_SECONDS)


class Intake:
    """Verifies and stores proofs; safe to call from many HTTP threads."""

    def __init__(self, cfg: VerifyConfig, store: Store, client: ChainClient,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.time,
                 provider_ttl: float = 30.0,
                 on_equivocation: EquivocationHook | None = None,
                 limits: StoreLimits = DEFAULT_LIMITS,
                 provider_cache_size: int = DEFAULT_PROVIDER_CACHE) -> None:
        cfg.validate()
        self.cfg = cfg
        self.store = store
        self.client = client
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.limits = limits
        self.providers = ProviderKeys(client, provider_ttl, max_entries=provider_cache_size)
        self.on_equivocation = on_equivocation
        self._locks = tuple(threading.Lock() for _ in range(_LOCK_STRIPES))

    # ------------------------------------------------------------------ HTTP-shaped API

    def submit(self, obj: object) -> tuple[int, dict[str, Any]]:
        """Handle one SignedProof JSON object."""
        try:
            return 200, self._submit(obj)
        except Rejection as r:
            return r.http_status, r.body()
        except ChainUnavailable as e:
            self.metrics.proof("unavailable", "chain_unavailable")
            log.warning("chain unavailable: %s", e)
            return _unavailable("chain_unavailable", str(e))
        except StoreError as e:
            self.metrics.proof("unavailable", "store_error")
            log.error("store error: %s", e)
            return _unavailable("store_unavailable", str(e))

    def submit_batch(self, obj: object) -> tuple[int, dict[str, Any]]:
        """Handle ``{"proofs": [...]}``: each proof is handled in order, independently,
        except that a job's later windows never overtake an earlier one: after a retryable
        answer for a job, that job's remaining items get the same answer, and after a 503
        (chain or database unavailable) every remaining item does."""
        try:
            items = parse_batch(obj)
        except Rejection as r:
            self.metrics.proof("rejected", r.reason)
            return r.http_status, r.body()
        results: list[dict[str, Any]] = []
        held: dict[bytes, dict[str, Any]] = {}
        everything: dict[str, Any] | None = None
        for item in items:
            job = _job_of(item)
            if everything is not None:
                results.append(everything)
                continue
            if job is not None and job in held:
                results.append(held[job])
                continue
            status, body = self.submit(item)
            if status == 503:
                everything = body
            elif body.get("retry") is True and job is not None:
                held[job] = body
            results.append(body)
        return 200, {"results": results}

    # ------------------------------------------------------------------ core

    def _job_lock(self, job: bytes) -> threading.Lock:
        return self._locks[int.from_bytes(job[:8], "little") % _LOCK_STRIPES]

    def _reject(self, r: Rejection, auth: Authenticated | None = None) -> Rejection:
        self.metrics.proof("retry" if r.retryable else "rejected", r.reason)
        where = ""
        if auth is not None:
            where = f" job={_b58(auth.proof.job)} seq={auth.proof.seq}"
        log.info("rejected%s reason=%s retry=%s: %s", where, r.reason, r.retryable, r.message)
        return r

    def _submit(self, obj: object) -> dict[str, Any]:
        try:
            signed = parse_signed_proof(obj)
            auth = authenticate(signed, self.cfg)
        except Rejection as r:
            raise self._reject(r) from None
        p = auth.proof
        ok = {"job": _b58(p.job), "seq": p.seq}
        if self.store.decision_of(p.job, p.seq, auth.hash) == "accepted":
            self.metrics.proof("duplicate")
            return {"status": "duplicate", **ok}
        # Job assignment, membership and key validity come before anything is stored or
        # compared.
        job = read("the job account", lambda: self.client.fetch_job(Pubkey.from_bytes(p.job)))
        try:
            check_assignment(auth, job, self.cfg)
            check_committee(job, self.cfg)
            self._check_key(auth)
        except Rejection as r:
            raise self._reject(r, auth) from None
        with self._job_lock(p.job):
            stored = self.store.proofs_at(p.job, p.seq)
            if any(s.hash == auth.hash and s.decision == "accepted" for s in stored):
                self.metrics.proof("duplicate")
                return {"status": "duplicate", **ok}
            other = next((s for s in stored if s.hash != auth.hash), None)
            if other is not None:
                self._equivocation(auth, other, ok["job"])
            local = self.store.job_state(p.job)
            state = start_state(local, baseline_state(job), p.seq)
            prev = self._prev(p.job, p.seq, state)
            try:
                verdict = check_window(auth, job, state, self.cfg, int(self.clock()), prev)
            except Rejection as r:
                self._store_rejection(auth, r, state)
                raise self._reject(r, auth) from None
            now = self.clock()
            self.store.record_accepted(auth, verdict, None if local is None else local.last_seq,
                                       now)
            self.store.update_chain_info(p.job, job_info(job), now)
        self.metrics.proof("accepted")
        if verdict.missed_seqs:
            log.warning("job=%s missed windows seq %d..%d", ok["job"], verdict.missed_seqs[0],
                        verdict.missed_seqs[-1])
        log.info("accepted job=%s seq=%d billable=%d approved=%d cumulative=%d approved_total=%d",
                 ok["job"], p.seq, p.billable_seconds, verdict.approved_seconds,
                 p.cumulative_seconds, verdict.approved_total)
        return {"status": "accepted", **ok, "approved_seconds": verdict.approved_seconds,
                "approved_total": verdict.approved_total}

    def _equivocation(self, auth: Authenticated, other: StoredProof, job_b58: str) -> None:
        """Both proofs are signed by keys of the job's own provider (nothing else is ever
        stored): keep the first pair as evidence, wake the reporter, answer 409."""
        p = auth.proof
        new = self.store.record_equivocation(auth, other.hash, self.clock())
        self.metrics.proof("rejected", "equivocation")
        if new:
            log.critical("EQUIVOCATION job=%s seq=%d: two signed proofs %s and %s; evidence "
                         "stored", job_b58, p.seq, auth.hash.hex()[:16], other.hash.hex()[:16])
        if self.on_equivocation is not None:
            self.on_equivocation(auth, other)
        raise Equivocation(f"a different proof for job {job_b58} seq {p.seq} was already "
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
            check_worker_key(auth, provider, self.cfg)
        except Rejection as r:
            if r.reason not in _KEY_REASONS:
                raise
            # The cache may predate a rotation or registration: re-read once, then decide.
            provider = self.providers.get(auth.proof.provider, refresh=True)
            check_worker_key(auth, provider, self.cfg)

    def _prev(self, job: bytes, seq: int, state: JobState) -> PrevProof | None:
        """The worker's proof of ``seq - 1`` as stored here (the accepted one, else the only
        one), else the state's last receipt when that is ``seq - 1`` and its hash is known
        (the chain's last settled receipt for a job this validator starts on, or the job's
        start for seq 1), else None."""
        stored = self.store.proofs_at(job, seq - 1) if seq > 1 else []
        accepted = [s for s in stored if s.decision == "accepted"]
        pick = accepted[0] if accepted else (stored[0] if len(stored) == 1 else None)
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


def _job_of(item: object) -> bytes | None:
    """The job a batch item names, for holding back its later windows (None if the item
    does not even parse; such an item is answered on its own)."""
    try:
        return decode_proof(parse_signed_proof(item).proof).job
    except (Rejection, ProofDecodeError):
        return None
