"""HTTP to the other members of a job's committee (I/O).

Endpoints are read from the members' Validator accounts on chain
(``client.fetch_validator_by_authority(market, authority).endpoint``), cached for
``endpoint_ttl`` seconds; a member whose account is missing, not Active or without an
endpoint is treated as unreachable (it could not attest on chain either). Every request has
a timeout and its answer a size limit (``MAX_PEER_RESPONSE_BYTES``); any failure is
``None``, never an exception: a member that does not answer is simply not counted.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from solders.pubkey import Pubkey

from .config import MAX_PEER_RESPONSE_BYTES
from .verify import field_of

log = logging.getLogger("gpum_validator.peers")


@dataclass(frozen=True)
class PeerAnswer:
    """One member's answer: the HTTP status and its JSON object (``{}`` if none)."""

    status: int
    body: dict[str, Any]


class Peers:
    """Finds members' endpoints on chain and POSTs JSON to them. Thread-safe."""

    def __init__(self, client: Any, market: bytes, timeout: float = 5.0,
                 endpoint_ttl: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 http: httpx.Client | None = None) -> None:
        self.client = client
        self.market = Pubkey.from_bytes(bytes(market))
        self.timeout = timeout
        self.endpoint_ttl = endpoint_ttl
        self.clock = clock
        self.http = http or httpx.Client(timeout=timeout, follow_redirects=False)
        self._endpoints: dict[bytes, tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self.http.close()

    def endpoint(self, member: bytes) -> str | None:
        """The member's endpoint from its Validator account (cached), or None."""
        now = self.clock()
        with self._lock:
            hit = self._endpoints.get(member)
            if hit is not None and now - hit[0] < self.endpoint_ttl:
                return hit[1]
        url: str | None = None
        try:
            view = self.client.fetch_validator_by_authority(self.market,
                                                            Pubkey.from_bytes(member))
        except Exception as e:  # noqa: BLE001 - a read failure: try again next time
            log.warning("cannot read the Validator account of %s: %s",
                        Pubkey.from_bytes(member), e)
            return None
        if view is not None and str(field_of(view, "status")).lower() == "active":
            raw = str(field_of(view, "endpoint") or "").rstrip("/")
            url = raw if raw.startswith(("http://", "https://")) else None
        with self._lock:
            self._endpoints[member] = (now, url)
            if len(self._endpoints) > 4096:
                self._endpoints.pop(next(iter(self._endpoints)))
        return url

    def forget(self, member: bytes) -> None:
        """Drop a cached endpoint (after a failure, so a changed endpoint is re-read)."""
        with self._lock:
            self._endpoints.pop(member, None)

    def post(self, member: bytes, path: str, body: dict[str, Any]) -> PeerAnswer | None:
        """POST ``body`` to ``member``'s ``path``; None when it cannot be reached, times out,
        or answers something that is not a JSON object within the size limit."""
        base = self.endpoint(member)
        if base is None:
            return None
        try:
            with self.http.stream("POST", base + path, json=body,
                                  timeout=self.timeout) as r:
                raw = b""
                for chunk in r.iter_bytes():
                    raw += chunk
                    if len(raw) > MAX_PEER_RESPONSE_BYTES:
                        log.warning("%s%s answered more than %d bytes; ignored", base, path,
                                    MAX_PEER_RESPONSE_BYTES)
                        return None
                status = r.status_code
        except httpx.HTTPError as e:
            log.info("member %s at %s unreachable: %s", Pubkey.from_bytes(member), base, e)
            self.forget(member)
            return None
        try:
            obj = json.loads(raw.decode("utf-8")) if raw else {}
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return None
        return PeerAnswer(status, obj) if isinstance(obj, dict) else None
