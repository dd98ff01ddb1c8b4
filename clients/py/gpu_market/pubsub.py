"""Solana PubSub subscriptions for programs that poll the chain (worker, validator).

``ProgramWatcher`` keeps one ``programSubscribe`` open on the RPC node's WebSocket endpoint
(``pubsub_url``: the RPC port + 1, as Solana clusters and ``gpum-localnet`` serve it) and
calls ``on_change(address, data)`` for every change of a matching account.

Guarantees: subscriptions only ever make a poller react sooner; they never replace polling.
The watcher runs in its own daemon thread, reconnects (and resubscribes) with capped backoff
after any failure, and never raises into the caller: a node without PubSub, a dropped
connection or a malformed notification only means the caller's polling does the work until
the subscription is back. ``on_change`` exceptions are logged and swallowed.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from solders.pubkey import Pubkey

__all__ = ["ProgramWatcher", "pubsub_url"]

log = logging.getLogger("gpu_market.pubsub")

BACKOFF_MAX_S = 30.0


def pubsub_url(rpc_url: str) -> str:
    """``http://host:port`` -> ``ws://host:port+1`` (``https`` -> ``wss``); a URL without a port
    keeps the scheme's default, as web3.js does. ValueError for another scheme."""
    parts = urlsplit(rpc_url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"RPC URL {rpc_url!r} must be http:// or https://")
    scheme = "ws" if parts.scheme == "http" else "wss"
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port + 1}"
    return urlunsplit((scheme, netloc, parts.path, parts.query, ""))


class ProgramWatcher:
    """One ``programSubscribe`` (base64 data, ``filters`` as in ``getProgramAccounts``)."""

    def __init__(self, ws_url: str, program_id: Pubkey, filters: Sequence[dict[str, Any]],
                 on_change: Callable[[Pubkey, bytes], None], *, name: str = "pubsub") -> None:
        self.ws_url = ws_url
        self.program_id = program_id
        self.filters = list(filters)
        self.on_change = on_change
        self.name = name
        self.subscribed = threading.Event()
        """Set while the subscription is confirmed by the node."""
        self.live_since: float | None = None
        """``time.monotonic()`` when the current subscription was confirmed; None while there
        is none. Every change after it is notified (until it drops): a cache may keep a read
        made after it for as long as the same subscription lasts."""
        self.notifications = 0
        self._stop = threading.Event()
        self._ws: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> ProgramWatcher:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        ws = self._ws
        if ws is not None:
            try:
                ws.close()
            except Exception as e:  # noqa: BLE001 - closing a broken socket
                log.debug("%s: close failed: %s", self.name, e)
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        from websockets.sync.client import connect

        backoff = 1.0
        warned = False
        while not self._stop.is_set():
            try:
                with connect(self.ws_url, open_timeout=5, close_timeout=1) as ws:
                    self._ws = ws
                    ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "programSubscribe",
                                        "params": [str(self.program_id),
                                                   {"encoding": "base64",
                                                    "commitment": "confirmed",
                                                    "filters": self.filters}]}))
                    answer = json.loads(ws.recv(timeout=10))
                    if "result" not in answer:
                        raise RuntimeError(f"programSubscribe refused: {answer.get('error')}")
                    self.live_since = time.monotonic()
                    self.subscribed.set()
                    log.info("%s: subscribed to %s accounts at %s", self.name, self.program_id,
                             self.ws_url)
                    backoff, warned = 1.0, False
                    for raw in ws:
                        self._handle(raw)
            except Exception as e:  # noqa: BLE001 - any failure: poll, reconnect later
                if not self._stop.is_set() and not warned:
                    log.warning("%s: no subscription at %s (%s); polling goes on, retrying",
                                self.name, self.ws_url, e)
                    warned = True
            finally:
                self.live_since = None
                self.subscribed.clear()
                self._ws = None
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _handle(self, raw: str | bytes) -> None:
        try:
            msg = json.loads(raw)
            if msg.get("method") != "programNotification":
                return
            value = msg["params"]["result"]["value"]
            address = Pubkey.from_string(value["pubkey"])
            data = base64.b64decode(value["account"]["data"][0])
        except (ValueError, KeyError, TypeError, IndexError):
            log.debug("%s: ignored a malformed notification", self.name)
            return
        self.notifications += 1
        try:
            self.on_change(address, data)
        except Exception:
            log.exception("%s: on_change failed", self.name)
