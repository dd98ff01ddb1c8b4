"""Delivery of outbox proofs to their destinations (HTTP, docs/wire-formats.md).

Destinations are the outbox's delivery rows: for each proof, every member of its job's
committee (the endpoints read from chain), or the static ``--validator`` list. A base URL
gets the paths below appended.

Outcome of one delivery attempt (``classify``):

* 200 with ``status`` "accepted" or "duplicate"          -> ack (delivery row marked acked)
* 409 or ``error`` "equivocation"                       -> kept, never retried, logged CRITICAL
* a body (or batch item) with ``"retry": true``, 5xx,    -> transient: retried with exponential
  408, 425, 429, timeouts, connection errors, bad JSON      backoff ``min(cap, base *
                                                            2**(n-1))``, jittered to 50-100 %
                                                            (1 s doubling to 60 s: within the
                                                            window, not an hour later)
* other 4xx, or an item ``error``                        -> kept as rejected, logged ERROR,
                                                            retried only every
                                                            ``rejected_retry_s`` (default 1 h)

One disagreement never ends anything: no answer deletes a proof a validator has not
acknowledged.

Several due proofs for one validator go in one ``/v1/proofs/batch`` request (at most 64);
a validator answering the batch route with 404/405/501 or a 4xx gets single requests.
Resending the same bytes is always safe: validators deduplicate by (job, seq, hash).
"""

from __future__ import annotations

import base64
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx

from .keys import b58encode
from .outbox import Outbox, OutboxItem

log = logging.getLogger("gpum_worker.sender")

BATCH_MAX = 64


@dataclass(frozen=True)
class RetryPolicy:
    base_s: float = 1.0
    cap_s: float = 60.0
    rejected_retry_s: float = 3600.0
    timeout_s: float = 10.0

    def backoff(self, attempts: int, rng: random.Random) -> float:
        """Delay before attempt ``attempts + 1`` (attempts >= 1 failures so far)."""
        d = min(self.cap_s, self.base_s * 2 ** max(0, min(attempts - 1, 30)))
        return d * (0.5 + 0.5 * rng.random())


DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True)
class Outcome:
    kind: str  # "ack" | "retry" | "reject" | "equivocation"
    message: str


TRANSIENT_STATUS = frozenset({408, 425, 429})
"""4xx answers that mean "not now" (timeout, too early, rate limited): retried soon."""


def _says_retry(body: Any) -> bool:
    return isinstance(body, dict) and body.get("retry") is True


def classify(status_code: int, body: Any) -> Outcome:
    """Map an HTTP answer for one proof to an outcome (pure)."""
    msg = _body_message(body)
    if status_code == 200:
        if isinstance(body, dict) and body.get("status") in ("accepted", "duplicate"):
            return Outcome("ack", str(body["status"]))
        return Outcome("retry", f"unexpected 200 body: {msg}")
    if status_code == 409 or (isinstance(body, dict) and body.get("error") == "equivocation"):
        return Outcome("equivocation", f"HTTP {status_code}: {msg}")
    if (400 <= status_code < 500 and status_code not in TRANSIENT_STATUS
            and not _says_retry(body)):
        return Outcome("reject", f"HTTP {status_code}: {msg}")
    return Outcome("retry", f"HTTP {status_code}: {msg}")


def classify_item(item: Any) -> Outcome:
    """Map one entry of a batch answer's ``results`` to an outcome (pure)."""
    if isinstance(item, dict) and item.get("status") in ("accepted", "duplicate"):
        return Outcome("ack", str(item["status"]))
    if isinstance(item, dict) and item.get("error") == "equivocation":
        return Outcome("equivocation", _body_message(item))
    if _says_retry(item):
        return Outcome("retry", _body_message(item))
    if isinstance(item, dict) and "error" in item:
        return Outcome("reject", _body_message(item))
    return Outcome("retry", f"malformed batch result {item!r:.200}")


def _body_message(body: Any) -> str:
    if isinstance(body, dict):
        parts = [str(body[k]) for k in ("error", "message", "status") if k in body]
        if parts:
            return " - ".join(parts)
    return f"{body!r:.200}"


def signed_proof_json(item: OutboxItem) -> dict[str, str]:
    """The SignedProof JSON object of docs/wire-formats.md, naming the key that signed it
    (after a key rotation, older outbox rows carry the retired key)."""
    return {
        "proof": base64.b64encode(item.proof).decode(),
        "proof_signature": base64.b64encode(item.proof_sig).decode(),
        "receipt_signature": base64.b64encode(item.receipt_sig).decode(),
        "worker_key": b58encode(item.worker_key),
    }


class Sender:
    """Sends due outbox items to their destinations; one ``deliver_once`` = one round."""

    def __init__(self, outbox: Outbox, client: httpx.Client,
                 policy: RetryPolicy = DEFAULT_RETRY, rng: random.Random | None = None,
                 clock=time.time) -> None:
        self.outbox = outbox
        self.client = client
        self.policy = policy
        self.rng = rng or random.Random()
        self.clock = clock
        self._single_only: set[str] = set()

    def deliver_once(self) -> int:
        """Try every due delivery once; returns the number of acknowledgements."""
        acked = 0
        for v in self.outbox.destinations():
            while True:
                items = self.outbox.due(v, self.clock(), BATCH_MAX)
                if not items:
                    break
                n, transport_ok = self._send(v, items)
                acked += n
                if not transport_ok or len(items) < BATCH_MAX:
                    break
        return acked

    def _send(self, v: str, items: list[OutboxItem]) -> tuple[int, bool]:
        if len(items) > 1 and v not in self._single_only:
            return self._send_batch(v, items)
        acked = 0
        for it in items:
            n, ok = self._send_single(v, it)
            acked += n
            if not ok:  # validator unreachable: back off every remaining item too
                for rest in items[items.index(it) + 1:]:
                    self._apply(v, rest, Outcome("retry", "validator unreachable"))
                return acked, False
        return acked, True

    def _post(self, url: str, payload: Any) -> tuple[int, Any] | str:
        try:
            r = self.client.post(url, json=payload, timeout=self.policy.timeout_s)
        except httpx.HTTPError as e:
            return f"{type(e).__name__}: {e}"
        try:
            body = r.json()
        except ValueError:
            body = r.text[:200]
        return r.status_code, body

    def _send_single(self, v: str, it: OutboxItem) -> tuple[int, bool]:
        res = self._post(v.rstrip("/") + "/v1/proofs", signed_proof_json(it))
        if isinstance(res, str):
            self._apply(v, it, Outcome("retry", res))
            return 0, False
        out = classify(*res)
        self._apply(v, it, out)
        return (1 if out.kind == "ack" else 0), True

    def _send_batch(self, v: str, items: list[OutboxItem]) -> tuple[int, bool]:
        payload = {"proofs": [signed_proof_json(it) for it in items]}
        res = self._post(v.rstrip("/") + "/v1/proofs/batch", payload)
        if isinstance(res, str):
            for it in items:
                self._apply(v, it, Outcome("retry", res))
            return 0, False
        status, body = res
        results = body.get("results") if isinstance(body, dict) else None
        if status == 200 and isinstance(results, list) and len(results) == len(items):
            outcomes = [classify_item(r) for r in results]
            acks = [(it.job, it.seq) for it, o in zip(items, outcomes) if o.kind == "ack"]
            if acks:
                self.outbox.ack(v, acks)
            for it, o in zip(items, outcomes):
                if o.kind != "ack":
                    self._apply(v, it, o)
            return len(acks), True
        if (400 <= status < 500 and status not in TRANSIENT_STATUS
                and not _says_retry(body)):
            log.warning("validator %s refused the batch route (HTTP %d); sending singly", v,
                        status)
            self._single_only.add(v)
            return self._send(v, items)
        for it in items:
            self._apply(v, it, Outcome("retry", f"batch HTTP {status}: {_body_message(body)}"))
        return 0, False

    def _apply(self, v: str, it: OutboxItem, out: Outcome) -> None:
        key = (it.job, it.seq)
        job = b58encode(it.job)
        now = self.clock()
        if out.kind == "ack":
            self.outbox.ack(v, [key])
            log.debug("validator %s: job %s seq %d %s", v, job, it.seq, out.message)
        elif out.kind == "retry":
            delay = self.policy.backoff(it.attempts + 1, self.rng)
            self.outbox.retry_at(v, key, now + delay, out.message)
            log.warning("validator %s: job %s seq %d not delivered (%s); retry in %.1fs",
                        v, job, it.seq, out.message, delay)
        elif out.kind == "equivocation":
            self.outbox.reject(v, key, out.message, None)
            log.critical("validator %s reports EQUIVOCATION for job %s seq %d (%s). The proof "
                         "is kept in the outbox and not resent; an operator must investigate "
                         "(is a second worker using this key?)", v, job, it.seq, out.message)
        else:
            self.outbox.reject(v, key, out.message, now + self.policy.rejected_retry_s)
            log.error("validator %s REJECTED job %s seq %d: %s. The proof is kept in the "
                      "outbox; next retry in %.0fs", v, job, it.seq, out.message,
                      self.policy.rejected_retry_s)
