"""Slow checks run off the agent's main loop, one per subject at a time.

The main loop must never wait on another party (a validator that trickles its answer, an
RPC node that takes a minute to confirm): it closes windows and keeps every other job
going. ``Background.result`` therefore never blocks. For a subject (a job) it returns the
outcome of the last finished call made with the same key, once (the value, or it raises
the exception the call raised), and otherwise starts the call in a thread of its own
(unless one runs for that subject) and raises ``Pending``. ``on_done`` is called from the
thread when a call ends, so the main loop looks again at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger("gpum_worker.background")


class Pending(Exception):
    """The call runs in the background; ask again later (``on_done`` says when)."""


class Background:
    def __init__(self, on_done: Callable[[], None] = lambda: None, name: str = "check") -> None:
        self.on_done = on_done
        self.name = name
        self._lock = threading.Lock()
        self._running: set[Hashable] = set()
        self._done: dict[Hashable, tuple[Hashable, bool, Any]] = {}

    def result(self, subject: Hashable, key: Hashable, call: Callable[[], T]) -> T:
        with self._lock:
            done = self._done.pop(subject, None)
            if done is not None and done[0] == key:
                _key, ok, value = done
                if ok:
                    return value  # type: ignore[no-any-return]
                raise value
            if subject not in self._running:
                self._running.add(subject)
                threading.Thread(target=self._run, args=(subject, key, call), daemon=True,
                                 name=f"{self.name}"[:40]).start()
        raise Pending(f"{self.name} runs in the background")

    def running(self, subject: Hashable) -> bool:
        with self._lock:
            return subject in self._running

    def forget(self, subject: Hashable) -> None:
        """Drop a finished outcome nobody will ask for (the subject ended)."""
        with self._lock:
            self._done.pop(subject, None)

    def _run(self, subject: Hashable, key: Hashable, call: Callable[[], Any]) -> None:
        try:
            outcome: tuple[Hashable, bool, Any] = (key, True, call())
        except Exception as e:  # noqa: BLE001 - handed to the main loop, which decides
            outcome = (key, False, e)
        with self._lock:
            self._running.discard(subject)
            self._done[subject] = outcome
        try:
            self.on_done()
        except Exception:
            log.exception("%s: on_done failed", self.name)
