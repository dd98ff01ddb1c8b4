"""Proof intake: schema -> authenticate -> worker key -> duplicate/equivocation -> window.

``Intake.submit`` returns ``(http_status, json_body)`` as docs/wire-formats.md specifies;
it is the only place that combines the pure checks (``verify``) with storage and chain
reads. Guarantees:

* an accepted proof is on disk (with the job's new state) before 200 is returned;
* a proof already accepted (same job, seq, hash) answers 200 "duplicate" without any
  chain read, so worker retries are cheap and safe;
* a second, different proof for a stored (job, seq) that is validly signed by the
  provider's key is stored as evidence and answered 409 "equivocation"; the
  ``on_equivocation`` hook is called with both proofs (in ``gpum-validator run`` it only
  wakes ``slashing.EquivocationReporter`` on the settlement thread, which submits
  ``slash_equivocation`` from the stored evidence);
* a transport failure reading the chain answers 503 "chain_unavailable" and stores no
  decision, so the worker retries later;
* proofs of one job are verified one at a time (a per-job lock); different jobs run in
  parallel.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from solders.pubkey import Pubkey

from .chain import ChainClient, ProviderKeys, baseline_state, job_info, read
from .config import VerifyConfig
from .errors import ChainUnavailable, Equivocation, Rejection, StoreError
from .metrics import Metrics
from .schema import parse_batch, parse_signed_proof
from .store import Store, StoredProof
from .verify import Authenticated, authenticate, check_window, check_worker_key

log = logging.getLogger("gpum_validator.intake")

EquivocationHook = Callable[[Authenticated, StoredProof], None]
_KEY_REASONS = ("provider_not_found", "unknown_worker_key", "worker_key_expired")


def _b58(b: bytes) -> str:
    return str(Pubkey.from_bytes(b))


class Intake:
    """Verifies and stores proofs; safe to call from many HTTP threads."""

    def __init__(self, cfg: VerifyConfig, store: Store, client: ChainClient,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.time,
                 provider_ttl: float = 30.0,
                 on_equivocation: EquivocationHook | None = None) -> None:
        cfg.validate()
        self.cfg = cfg
        self.store = store
        self.client = client
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.providers = ProviderKeys(client, provider_ttl)
        self.on_equivocation = on_equivocation
        self._locks: dict[bytes, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    # ------------------------------------------------------------------ HTTP-shaped API

    def submit(self, obj: object) -> tuple[int, dict[str, Any]]:
        """Handle one SignedProof JSON object."""
        try:
            return 200, self._submit(obj)
        except Rejection as r:
            return r.http_status, {"error": r.reason, "message": r.message}
        except ChainUnavailable as e:
            self.metrics.proof("unavailable", "chain_unavailable")
            log.warning("chain unavailable: %s", e)
            return 503, {"error": "chain_unavailable", "message": f"{e}; retry later"}
        except StoreError as e:
            self.metrics.proof("unavailable", "store_error")
            log.error("store error: %s", e)
            return 503, {"error": "store_unavailable", "message": f"{e}; retry later"}

    def submit_batch(self, obj: object) -> tuple[int, dict[str, Any]]:
        """Handle ``{"proofs": [...]}``: each proof is handled in order, independently,
        except that after a transient failure (503) the remaining items are answered
        'unavailable' too, so a job's later windows never overtake an earlier one."""
        try:
            items = parse_batch(obj)
        except Rejection as r:
            self.metrics.proof("rejected", r.reason)
            return r.http_status, {"error": r.reason, "message": r.message}
        results: list[dict[str, Any]] = []
        transient: dict[str, Any] | None = None
        for item in items:
            if transient is not None:
                results.append(transient)
                continue
            status, body = self.submit(item)
            if status == 503:
                transient = body
            results.append(body)
        return 200, {"results": results}

    # ------------------------------------------------------------------ core

    def _job_lock(self, job: bytes) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(job, threading.Lock())

    def _reject(self, r: Rejection, auth: Authenticated | None = None) -> Rejection:
        self.metrics.proof("rejected", r.reason)
        where = ""
        if auth is not None:
            where = f" job={_b58(auth.proof.job)} seq={auth.proof.seq}"
        log.info("rejected%s reason=%s: %s", where, r.reason, r.message)
        return r

    def _submit(self, obj: object) -> dict[str, Any]:
        try:
            signed = parse_signed_proof(obj)
            auth = authenticate(signed, self.cfg)
        except Rejection as r:
            raise self._reject(r) from None
        p = auth.proof
        try:
            self._check_key(auth)
        except Rejection as r:
            raise self._reject(r, auth) from None
        ok = {"job": _b58(p.job), "seq": p.seq}
        with self._job_lock(p.job):
            stored = self.store.proofs_at(p.job, p.seq)
            other = next((s for s in stored if s.hash != auth.hash), None)
            if other is not None:
                self.store.record_equivocation(auth, other.hash, self.clock())
                self.metrics.proof("rejected", "equivocation")
                log.critical("EQUIVOCATION job=%s seq=%d: two signed proofs %s and %s; "
                             "evidence stored", ok["job"], p.seq, auth.hash.hex()[:16],
                             other.hash.hex()[:16])
                if self.on_equivocation is not None:
                    self.on_equivocation(auth, other)
                raise Equivocation(f"a different proof for job {ok['job']} seq {p.seq} was "
                                   "already received; both are kept as slashing evidence")
            if any(s.decision == "accepted" for s in stored):
                self.metrics.proof("duplicate")
                return {"status": "duplicate", **ok}
            job = read("the job account", lambda: self.client.fetch_job(Pubkey.from_bytes(p.job)))
            state = self.store.job_state(p.job)
            if state is None and job is not None:
                state = baseline_state(job)
            prev = self._prev_hash(p.job, p.seq)
            try:
                if state is None:  # job missing on chain and never seen: check_window rejects
                    state = baseline_state({"last_seq": 0, "settled_seconds": 0,
                                            "last_window_end": 0})
                verdict = check_window(auth, job, state, self.cfg, int(self.clock()), prev)
            except Rejection as r:
                self.store.record_rejected(auth, r.reason, self.clock())
                raise self._reject(r, auth) from None
            now = self.clock()
            self.store.record_accepted(auth, verdict, state, now)
            self.store.update_chain_info(p.job, job_info(job), now)
        self.metrics.proof("accepted")
        if verdict.missed_seqs:
            log.warning("job=%s missed windows seq %d..%d", ok["job"], verdict.missed_seqs[0],
                        verdict.missed_seqs[-1])
        log.info("accepted job=%s seq=%d billable=%d cumulative=%d", ok["job"], p.seq,
                 p.billable_seconds, p.cumulative_seconds)
        return {"status": "accepted", **ok}

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

    def _prev_hash(self, job: bytes, seq: int) -> bytes | None:
        if seq <= 1:
            return None
        stored = self.store.proofs_at(job, seq - 1)
        accepted = [s for s in stored if s.decision == "accepted"]
        if accepted:
            return accepted[0].hash
        return stored[0].hash if len(stored) == 1 else None
