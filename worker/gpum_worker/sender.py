"""Delivery of outbox proofs to their destinations (HTTP, docs/wire-formats.md).

Destinations are the outbox's delivery rows: for each proof, every member of its job's
committee (the endpoints read from chain), or the static ``--validator`` list. A base URL
gets the paths below appended.

Outcome of one delivery attempt (``classify``):

* 200 with ``status`` "accepted" or "duplicate"          -> ack (delivery row marked acked)
* ``error`` "stale_seq" (the validator accepted a later  -> ack ("superseded"): the proof can
  seq of the job, e.g. after catching up from a member's    never be taken there, and the later
  head)                                                     receipts cover its seconds
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

One slow destination delays only itself:

* every call is a ``gpu_market.net.BoundedClient`` call: it ends within
  ``RetryPolicy.timeout_s`` in total (however slowly the validator trickles its answer) and
  reads at most ``MAX_ANSWER_BYTES``; a call that fails either way is a transient failure;
* ``DeliveryLanes`` (``gpum-worker run``) gives every destination a thread, an outbox
  connection and an HTTP client of its own, so a member that stalls or is down never holds
  back the proofs owed to any other member or the main loop;
* a destination that stopped answering is probed (``GET {endpoint}/health``, a short
  deadline) every ``RetryPolicy.probe_s`` while its proofs wait out their backoff; once it
  answers 200 its whole backlog is due at once, so a validator that returns gets every
  proof within seconds, not after a backoff of up to ``cap_s``.
"""

from __future__ import annotations

import base64
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gpu_market.net import BoundedResponse, NetError

from .keys import b58encode
from .outbox import Outbox, OutboxItem

log = logging.getLogger("gpum_worker.sender")

BATCH_MAX = 64
MAX_ANSWER_BYTES = 256 * 1024
"""The largest answer read from a validator (a batch answer of 64 results is a few KiB)."""


class HttpPoster(Protocol):
    """``gpu_market.net.BoundedClient``: total deadline and size cap per call; raises
    ``NetError`` on any failure."""

    def post(self, url: str, **kw: Any) -> BoundedResponse: ...

    def get(self, url: str, **kw: Any) -> BoundedResponse: ...


@dataclass(frozen=True)
class RetryPolicy:
    base_s: float = 1.0
    cap_s: float = 60.0
    rejected_retry_s: float = 3600.0
    timeout_s: float = 10.0
    """Total deadline of one request to a validator (connect, send, the whole answer)."""
    probe_s: float = 3.0
    """How often an unreachable destination is asked ``GET /health`` during its backoff."""
    probe_timeout_s: float = 2.0
    """Total deadline of one liveness probe."""

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


SUPERSEDED_ERROR = "stale_seq"
"""A validator's answer for a proof older than one it accepted: delivered as far as it can be."""


def classify(status_code: int, body: Any) -> Outcome:
    """Map an HTTP answer for one proof to an outcome (pure)."""
    msg = _body_message(body)
    if status_code == 200:
        if isinstance(body, dict) and body.get("status") in ("accepted", "duplicate"):
            return Outcome("ack", str(body["status"]))
        return Outcome("retry", f"unexpected 200 body: {msg}")
    if status_code == 409 or (isinstance(body, dict) and body.get("error") == "equivocation"):
        return Outcome("equivocation", f"HTTP {status_code}: {msg}")
    if isinstance(body, dict) and body.get("error") == SUPERSEDED_ERROR:
        return Outcome("ack", "superseded")
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
    if isinstance(item, dict) and item.get("error") == SUPERSEDED_ERROR:
        return Outcome("ack", "superseded")
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
    """Sends due outbox items to their destinations; one ``deliver_once`` = one round over
    every destination, ``deliver_to`` = one destination (a ``DeliveryLanes`` lane)."""

    def __init__(self, outbox: Outbox, client: HttpPoster,
                 policy: RetryPolicy = DEFAULT_RETRY, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.time,
                 single_only: set[str] | None = None) -> None:
        self.outbox = outbox
        self.client = client
        self.policy = policy
        self.rng = rng or random.Random()
        self.clock = clock
        self._single_only: set[str] = single_only if single_only is not None else set()
        self.unreachable: set[str] = set()
        """Destinations whose last call got no HTTP answer (refused, reset, deadline, too
        large); cleared by the next answer. Only these are probed during their backoff."""

    def deliver_once(self) -> int:
        """Try every due delivery once; returns the number of acknowledgements."""
        return sum(self.deliver_to(v) for v in self.outbox.destinations())

    def deliver_to(self, v: str) -> int:
        """Send every delivery due to ``v`` (batches of ``BATCH_MAX``) until none is due or
        ``v`` stops answering; returns the number of acknowledgements."""
        acked = 0
        while True:
            items = self.outbox.due(v, self.clock(), BATCH_MAX)
            if not items:
                break
            n, transport_ok = self._send(v, items)
            acked += n
            if not transport_ok or len(items) < BATCH_MAX:
                break
        return acked

    def probe(self, v: str) -> bool:
        """True when ``v`` answers ``GET /health`` with 200 within ``probe_timeout_s``."""
        try:
            r = self.client.get(v.rstrip("/") + "/health", deadline=self.policy.probe_timeout_s,
                                max_bytes=16 * 1024)
        except NetError:
            return False
        return r.status == 200

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

    def _post(self, v: str, url: str, payload: Any) -> tuple[int, Any] | str:
        try:
            r = self.client.post(url, json=payload, deadline=self.policy.timeout_s,
                                 max_bytes=MAX_ANSWER_BYTES)
        except NetError as e:
            self.unreachable.add(v)
            return f"{type(e).__name__}: {e}"
        self.unreachable.discard(v)
        body = r.json_object()
        if body is None:
            body = r.body[:200].decode("utf-8", "replace")
        return r.status, body

    def _send_single(self, v: str, it: OutboxItem) -> tuple[int, bool]:
        res = self._post(v, v.rstrip("/") + "/v1/proofs", signed_proof_json(it))
        if isinstance(res, str):
            self._apply(v, it, Outcome("retry", res))
            return 0, False
        out = classify(*res)
        self._apply(v, it, out)
        return (1 if out.kind == "ack" else 0), True

    def _send_batch(self, v: str, items: list[OutboxItem]) -> tuple[int, bool]:
        payload = {"proofs": [signed_proof_json(it) for it in items]}
        res = self._post(v, v.rstrip("/") + "/v1/proofs/batch", payload)
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


class DeliveryLanes:
    """One delivery thread ("lane") per destination, so no destination waits on another.

    ``run`` (the agent's sender thread) starts a lane for every destination still owed a
    proof, wakes every lane when the main loop records a proof (``wake``), and on ``stop``
    lets each lane make one last round for what the main loop recorded last. Each lane opens
    its own ``Outbox`` (``outbox_factory``) and HTTP client (``client_factory``); a lane
    with nothing owed for ``idle_exit_s`` ends, and comes back when its destination is owed
    a proof again.

    Within a lane: deliver what is due; sleep until the next retry (at most 1 s, so a wake
    is never missed for long); while the destination got no answer and its next retry is
    still ahead, probe it every ``policy.probe_s`` and make its backlog due as soon as it
    answers. A destination whose ``/health`` answers while its proofs still get no answer
    is probed ever less often (doubling up to ``policy.cap_s``), so the probe never turns
    into a resend loop.
    """

    def __init__(self, outbox_factory: Callable[[], Outbox],
                 client_factory: Callable[[], HttpPoster], policy: RetryPolicy = DEFAULT_RETRY,
                 *, clock: Callable[[], float] = time.time, idle_exit_s: float = 60.0) -> None:
        self.outbox_factory = outbox_factory
        self.client_factory = client_factory
        self.policy = policy
        self.clock = clock
        self.idle_exit_s = idle_exit_s
        self._single_only: set[str] = set()
        self._lanes: dict[str, _Lane] = {}
        self._lock = threading.Lock()

    def lanes(self) -> list[str]:
        """Destinations with a running lane (a snapshot)."""
        with self._lock:
            return [v for v, lane in self._lanes.items() if lane.thread.is_alive()]

    def run(self, stop: threading.Event, wake: threading.Event,
            main_done: threading.Event) -> None:
        outbox = self.outbox_factory()
        try:
            while not stop.is_set():
                wake.clear()
                try:
                    destinations = outbox.destinations()
                except Exception:
                    log.exception("listing delivery destinations failed")
                    destinations = []
                self._ensure(destinations, stop, main_done)
                self._wake_all()
                wake.wait(1.0)
            self._wake_all()
        finally:
            outbox.close()
            for lane in list(self._lanes.values()):
                lane.thread.join(timeout=self.policy.timeout_s + 5)

    def _ensure(self, destinations: list[str], stop: threading.Event,
                main_done: threading.Event) -> None:
        with self._lock:
            for v in destinations:
                lane = self._lanes.get(v)
                if lane is not None and lane.thread.is_alive():
                    continue
                lane = _Lane(self, v, stop, main_done)
                self._lanes[v] = lane
                lane.thread.start()

    def _wake_all(self) -> None:
        with self._lock:
            for lane in self._lanes.values():
                lane.wake.set()


class _Lane:
    """The delivery thread of one destination (see ``DeliveryLanes``)."""

    def __init__(self, lanes: DeliveryLanes, v: str, stop: threading.Event,
                 main_done: threading.Event) -> None:
        self.lanes = lanes
        self.v = v
        self.stop = stop
        self.main_done = main_done
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"deliver {v}"[:60], daemon=True)

    def _run(self) -> None:
        lanes = self.lanes
        try:
            outbox = lanes.outbox_factory()
            client = lanes.client_factory()
        except Exception:
            log.exception("validator %s: cannot start its delivery lane", self.v)
            return
        sender = Sender(outbox, client, lanes.policy, clock=lanes.clock,
                        single_only=lanes._single_only)
        next_probe = 0.0
        false_alarms = 0  # probes answered while the resend that followed got no answer
        resent = False
        idle_since: float | None = None
        try:
            while not self.stop.is_set():
                self.wake.clear()
                try:
                    sender.deliver_to(self.v)
                    nxt = outbox.next_due_at(self.v)
                except Exception:
                    log.exception("validator %s: delivery round failed", self.v)
                    nxt = None
                now = lanes.clock()
                if self.v not in sender.unreachable:
                    false_alarms = 0
                elif resent:  # /health answers but proofs do not get through: probe less
                    false_alarms += 1
                    next_probe = now + min(lanes.policy.cap_s,
                                           lanes.policy.probe_s * 2 ** min(false_alarms, 20))
                resent = False
                if nxt is None:
                    idle_since = now if idle_since is None else idle_since
                    if now - idle_since >= lanes.idle_exit_s:
                        return
                else:
                    idle_since = None
                wait = 1.0 if nxt is None else min(1.0, max(0.05, nxt - now))
                if self.v in sender.unreachable and nxt is not None and nxt > now:
                    if now >= next_probe:
                        next_probe = now + lanes.policy.probe_s
                        if sender.probe(self.v):
                            n = outbox.make_due(self.v, lanes.clock())
                            resent = True
                            log.info("validator %s answers again; resending its backlog of "
                                     "%d proof(s) now", self.v, n)
                            continue
                    wait = min(wait, max(0.05, next_probe - lanes.clock()))
                self.wake.wait(wait)
            # Graceful stop: one last round for what the main loop recorded last.
            self.main_done.wait(5)
            try:
                sender.deliver_to(self.v)
            except Exception:
                log.exception("validator %s: final delivery round failed", self.v)
        finally:
            close = getattr(client, "close", None)
            if close is not None:
                close()
            outbox.close()
