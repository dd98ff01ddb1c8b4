"""This node's own uptime, durably: the spans it was up and reachable (I/O: store, HTTP).

Rule (docs/protocol.md, "Downtime and liveness"): a validator attests downtime only for a period
it was itself up to observe. A worker that finds a validator down keeps its proofs and delivers
them with backoff once it is back, so silence seen by a node that was just down (or unreachable)
proves nothing about the worker.

``Liveness.beat`` runs every ``beat_seconds`` on a thread of its own. Each beat first checks
that this node is reachable where workers reach it: ``probe`` (under ``gpum-validator run``:
``GET <registered endpoint>/health`` of this validator's Validator account, with a total
deadline) answers 200. Only then is the beat written to the store (``meta`` key
``liveness``: ``{"since", "last"}``): it extends the current span when the previous beat is
at most ``max_gap`` seconds old, else it starts a new span at now. The span lives in the
database, so every process sharing it (two processes on one PostgreSQL database) sees the
same spans: when the process behind the registered endpoint dies, the others' probes fail,
nobody beats, and the gap is there for all of them.

``observed_from(now)`` is the start of the span this node is in now (None when the last beat
is older than ``max_gap``: it is not known to be up). ``observation_start(since, now)`` is
``max(since, observed_from)``: the moment from which silence since ``since`` was watched.
Downtime of a job idle since ``since`` is attested only when ``now - observation_start`` is
at least the job's ``max_missed_windows * window_seconds`` (``downtime.py``, ``members.py``),
plus ``REJOIN_GRACE_SECONDS`` when this node began watching after the silence began
(``watch_due``): a worker finds a returning validator with a ``/health`` probe every few
seconds and only then sends its backlog, so a short allowance alone would let a node that
just came back blame the worker for its own outage.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import StoreError
from .records import Store

log = logging.getLogger("gpum_validator.liveness")

LIVENESS_META = "liveness"
DEFAULT_BEAT_SECONDS = 2.0
REJOIN_GRACE_SECONDS = 30.0
"""Extra silence a node that was not watching when a job fell silent waits before it judges
the job: longer than a worker's probe period plus the delivery of its backlog."""


def watch_due(idle_from: float, watched_from: float, allowance: float) -> float:
    """When a silence since ``idle_from``, watched by this node from ``watched_from``, has
    lasted long enough to attest: the allowance counted from ``watched_from``, plus the
    rejoin grace when the node began watching after the silence began."""
    grace = REJOIN_GRACE_SECONDS if watched_from > idle_from else 0.0
    return watched_from + allowance + grace


@dataclass(frozen=True)
class Span:
    """A stretch of time this node was continuously up and reachable."""

    since: float
    last: float


def extend(span: Span | None, now: float, max_gap: float) -> Span:
    """The span after a beat at ``now``: the same span when its last beat is at most
    ``max_gap`` old (and not in the future), else a new one starting now."""
    if span is None or not span.last <= now <= span.last + max_gap:
        return Span(now, now)
    return Span(span.since, now)


def observed_from(span: Span | None, now: float, max_gap: float) -> float | None:
    """Since when this node has been up without a gap, or None when it is not up now."""
    if span is None or not span.last - max_gap <= now <= span.last + max_gap:
        return None
    return span.since


class Liveness:
    """Beats while this node is reachable and answers since when it has been."""

    def __init__(self, store: Store, probe: Callable[[], bool] | None = None,
                 clock: Callable[[], float] = time.time,
                 beat_seconds: float = DEFAULT_BEAT_SECONDS,
                 max_gap: float | None = None) -> None:
        self.store = store
        self.probe = probe or (lambda: True)
        self.clock = clock
        self.beat_seconds = beat_seconds
        self.max_gap = 3 * beat_seconds if max_gap is None else max_gap
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reachable: bool | None = None

    def span(self) -> Span | None:
        raw = self.store.get_meta(LIVENESS_META)
        if raw is None:
            return None
        try:
            d = json.loads(raw)
            return Span(float(d["since"]), float(d["last"]))
        except (ValueError, KeyError, TypeError):
            return None

    def beat(self) -> bool:
        """One beat: True when this node was reachable and the beat is stored."""
        try:
            reachable = self.probe()
        except Exception as e:  # noqa: BLE001 - an unreachable node simply does not beat
            log.warning("liveness probe failed: %s: %s", type(e).__name__, e)
            reachable = False
        if reachable != self._reachable:
            if reachable:
                log.info("reachable at the registered endpoint; liveness beats resume")
            else:
                log.warning("not reachable at the registered endpoint (GET <endpoint>/health "
                            "does not answer 200): no liveness beats, so this node attests "
                            "no downtime until it has been reachable for a whole allowance")
            self._reachable = reachable
        if not reachable:
            return False
        now = self.clock()
        try:
            new = extend(self.span(), now, self.max_gap)
            self.store.set_meta(LIVENESS_META, json.dumps({"since": new.since,
                                                           "last": new.last}))
        except StoreError as e:
            log.warning("liveness beat not stored: %s", e)
            return False
        return True

    def observed_from(self) -> float | None:
        """Since when this node has been up and reachable without a gap (None: not now)."""
        try:
            return observed_from(self.span(), self.clock(), self.max_gap)
        except StoreError:
            return None

    def observation_start(self, since: float) -> float | None:
        """From when silence since ``since`` was watched by this node (None: not up now)."""
        up = self.observed_from()
        return None if up is None else max(since, up)

    # ------------------------------------------------------------------ thread

    def start(self) -> None:
        self.beat()
        self._thread = threading.Thread(target=self._run, name="gpum-liveness", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.beat_seconds):
            self.beat()


class EndpointProbe:
    """``GET <this validator's registered endpoint>/health`` within ``deadline`` seconds:
    whether workers can reach this node where the chain tells them to."""

    def __init__(self, peers: object, me: bytes, deadline: float = 2.0) -> None:
        from gpu_market.net import BoundedClient

        self.peers = peers
        self.me = me
        self.http = BoundedClient(deadline=deadline, max_bytes=64 * 1024)

    def __call__(self) -> bool:
        from gpu_market.net import NetError

        base = self.peers.endpoint(self.me)  # type: ignore[attr-defined]
        if base is None:
            return False
        try:
            return self.http.get(base + "/health").status == 200
        except NetError as e:
            log.debug("own endpoint %s unreachable: %s", base, e)  # beat() warns on the change
            self.peers.forget(self.me)  # type: ignore[attr-defined]
            return False

    def close(self) -> None:
        self.http.close()
