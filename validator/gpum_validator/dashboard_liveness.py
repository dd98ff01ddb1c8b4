"""The dashboard's view of provider liveness: is each provider's worker answering its health
probe, and when was it last seen alive.

``ProbeCache`` asks the workers ``GET /v1/health`` through the SDK's
``gpu_market.offers.probe_liveness`` (``gpu_market.net.BoundedClient``: each probe within
``deadline`` s, all of one refresh within ``total`` s, at most ``parallel`` at once) and keeps
each answer ``period`` seconds (default 30). Guarantees, whatever the request rate:

* **One probe per worker per period.** An answer is keyed by (provider, endpoint, worker
  key): a provider that moves its worker is probed again at once, others only when their
  answer is older than ``period``.
* **Off the request path, bounded.** A request never probes: it reads the answers held and,
  when some are missing or stale, starts one refresh in a background thread (never two at
  once, so at most ``parallel`` probes run on the node at any time, and each refresh ends
  within ``total`` s: a probe still running then counts as offline). A request that holds no
  answer at all for some provider waits for the refresh in flight at most ``wait`` s
  (default 2); past it those providers show ``online`` null ("checking") until the next poll.
* **Bounded memory.** At most ``max_entries`` answers (the oldest go first).

Last seen (``last_seen``, unix seconds): the newest probe that found the worker online, else
the end of the last window the committee settled for any of the provider's jobs on chain
(``Dashboard``'s one cached read of the market's jobs, no read per provider), else None.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpu_market.offers import (
    PROBE_DEADLINE_S,
    PROBE_PARALLEL,
    PROBE_TOTAL_S,
    Liveness,
    probe_liveness,
)

log = logging.getLogger("gpum_validator.dashboard")

PROBE_PERIOD_S = 30.0
"""How long one probe's answer is kept before the worker is probed again."""
FIRST_WAIT_S = 2.0
"""How long a request waits for the refresh in flight when it holds no answer for some
provider (it never waits for a stale one: the old answer is shown)."""
MAX_ENTRIES = 4096

Probe = Callable[..., dict[Any, Liveness]]


def _key(offer: Any) -> tuple[bytes, str, bytes]:
    return (bytes(offer.provider), str(offer.endpoint), bytes(offer.worker_key))


@dataclass
class _Held:
    live: Liveness
    expires: float
    """Monotonic time the answer goes stale."""


class ProbeCache:
    """The providers' liveness, probed at most once per ``period`` each, in the background
    (see the module's doc). ``probe``: ``probe_liveness`` or a stand-in with its signature.
    Thread-safe."""

    def __init__(self, *, period: float = PROBE_PERIOD_S, deadline: float = PROBE_DEADLINE_S,
                 total: float = PROBE_TOTAL_S, parallel: int = PROBE_PARALLEL,
                 wait: float = FIRST_WAIT_S, max_entries: int = MAX_ENTRIES,
                 probe: Probe = probe_liveness, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.period, self.deadline, self.total = period, deadline, total
        self.parallel, self.wait, self.max_entries = parallel, wait, max_entries
        self.probe, self.clock, self.monotonic = probe, clock, monotonic
        self._held: OrderedDict[tuple[bytes, str, bytes], _Held] = OrderedDict()
        self._seen: OrderedDict[bytes, int] = OrderedDict()
        """Provider -> the newest probe that found it online."""
        self._lock = threading.Lock()
        self._running: threading.Event | None = None
        self.refreshes = 0
        """Refreshes started (tests, metrics)."""
        self.probed = 0
        """Workers probed in all."""

    def lookup(self, offers: Iterable[Any]) -> dict[Any, Liveness]:
        """The held answer of each offer's worker, by provider (missing: not probed yet).
        Starts a background refresh when some are missing or stale, and waits for it at most
        ``wait`` s when some are missing."""
        offers = list(offers)
        now = self.monotonic()
        with self._lock:
            held = {o.provider: self._held.get(_key(o)) for o in offers}
            stale = [o for o in offers if held[o.provider] is None
                     or held[o.provider].expires <= now]
            missing = any(h is None for h in held.values())
            running = self._running
            if stale and running is None:
                running = self._running = threading.Event()
                threading.Thread(target=self._refresh, args=(stale, running),
                                 name="gpum-dashboard-probe", daemon=True).start()
        if missing and running is not None and self.wait > 0:
            running.wait(self.wait)
        with self._lock:
            out = {}
            for o in offers:
                h = self._held.get(_key(o))
                if h is not None:
                    self._held.move_to_end(_key(o))
                    out[o.provider] = h.live
            return out

    def seen_online(self, provider: Any) -> int | None:
        """Unix seconds of the newest probe that found ``provider``'s worker online."""
        with self._lock:
            return self._seen.get(bytes(provider))

    def _refresh(self, offers: list[Any], done: threading.Event) -> None:
        try:
            self.refreshes += 1
            self.probed += sum(1 for o in offers if o.endpoint)
            answers = self.probe(offers, deadline=self.deadline, total=self.total,
                                 parallel=self.parallel, clock=self.clock)
            expires = self.monotonic() + self.period
            with self._lock:
                for o in offers:
                    live = answers.get(o.provider)
                    if live is None:
                        continue
                    self._held[_key(o)] = _Held(live, expires)
                    self._held.move_to_end(_key(o))
                    if live.online:
                        self._seen[bytes(o.provider)] = live.checked_at
                        self._seen.move_to_end(bytes(o.provider))
                while len(self._held) > self.max_entries:
                    self._held.popitem(last=False)
                while len(self._seen) > self.max_entries:
                    self._seen.popitem(last=False)
        except Exception:  # a bug in a probe: logged; the next request tries again
            log.exception("dashboard: liveness probe failed")
        finally:
            with self._lock:
                self._running = None
            done.set()


def liveness_json(offer: Any) -> dict[str, Any]:
    """An offer's liveness as the dashboard shows it (the probe's error text is not: it may
    name addresses of the node's network)."""
    return {"online": offer.online, "checked_at": offer.checked_at,
            "last_seen": offer.last_seen}
