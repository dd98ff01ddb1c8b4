"""HTTP to the other members of a job's committee (I/O).

Endpoints are read from the members' Validator accounts on chain
(``client.fetch_validator_by_authority(market, authority).endpoint``), cached for
``endpoint_ttl`` seconds. A member is reachable for settlement while its account exists and is
Active or Exiting (``SETTLING_STATUSES``: an exiting member still attests and submits
``settle`` for the committees it is in, so one member's exit stalls no proved second); a member
whose account is missing (withdrawn) or without an endpoint is unreachable (it could not attest
on chain either). Only Active members count for downtime (``active``). Every request runs
through ``gpu_market.net.BoundedClient``: it returns within its total deadline (``timeout``
seconds for connect, send and every byte of the answer, however the member trickles) and
its answer is capped (``MAX_PEER_RESPONSE_BYTES``); any failure is ``None``, never an
exception: a member that does not answer is simply not counted. A call holds only the thread
that makes it; callers that ask several members use one thread each.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_market.net import BoundedClient, NetError
from solders.pubkey import Pubkey

from .config import MAX_PEER_RESPONSE_BYTES
from .verify import field_of, status_of

log = logging.getLogger("gpum_validator.peers")

SETTLING_STATUSES = ("active", "exiting")
"""Validator statuses that attest and submit ``settle`` (the program's
``ValidatorStatus::settles``); ``slash_downtime`` counts only ``active`` members."""


@dataclass(frozen=True)
class PeerAnswer:
    """One member's answer: the HTTP status and its JSON object (``{}`` if none)."""

    status: int
    body: dict[str, Any]


class Peers:
    """Finds members' endpoints on chain and POSTs JSON to them. Thread-safe."""

    def __init__(self, client: Any, market: bytes, timeout: float = 5.0,
                 endpoint_ttl: float = 60.0, clock: Callable[[], float] = time.monotonic,
                 http: BoundedClient | None = None) -> None:
        self.client = client
        self.market = Pubkey.from_bytes(bytes(market))
        self.timeout = timeout
        self.endpoint_ttl = endpoint_ttl
        self.clock = clock
        self.http = http or BoundedClient(deadline=timeout, max_bytes=MAX_PEER_RESPONSE_BYTES)
        self._endpoints: dict[bytes, tuple[float, str | None, str | None]] = {}
        """member -> (read at, endpoint if it settles, status; None: no account)."""
        self._lock = threading.Lock()

    def close(self) -> None:
        self.http.close()

    def endpoint(self, member: bytes) -> str | None:
        """The member's endpoint from its Validator account (cached) while it settles (Active
        or Exiting), else None."""
        read = self._read(member)
        return None if read is None else read[0]

    def active(self, member: bytes) -> bool:
        """Whether the member's Validator account is Active (cached): only Active members
        report or co-sign downtime. False when it is not, has no account, or cannot be read."""
        read = self._read(member)
        return read is not None and read[1] == "active"

    def _read(self, member: bytes) -> tuple[str | None, str | None] | None:
        """(endpoint while it settles, status or None without an account), cached for
        ``endpoint_ttl``; None when the read failed (not cached: tried again next time)."""
        now = self.clock()
        with self._lock:
            hit = self._endpoints.get(member)
            if hit is not None and now - hit[0] < self.endpoint_ttl:
                return hit[1], hit[2]
        url: str | None = None
        status: str | None = None
        try:
            view = self.client.fetch_validator_by_authority(self.market,
                                                            Pubkey.from_bytes(member))
        except Exception as e:  # noqa: BLE001 - a read failure: try again next time
            log.warning("cannot read the Validator account of %s: %s",
                        Pubkey.from_bytes(member), e)
            return None
        if view is not None:
            status = status_of(view)
            if status in SETTLING_STATUSES:
                raw = str(field_of(view, "endpoint") or "").rstrip("/")
                url = raw if raw.startswith(("http://", "https://")) else None
        with self._lock:
            self._endpoints[member] = (now, url, status)
            if len(self._endpoints) > 4096:
                self._endpoints.pop(next(iter(self._endpoints)))
        return url, status

    def forget(self, member: bytes) -> None:
        """Drop a cached endpoint (after a failure, so a changed endpoint is re-read)."""
        with self._lock:
            self._endpoints.pop(member, None)

    def post(self, member: bytes, path: str, body: dict[str, Any],
             deadline: float | None = None) -> PeerAnswer | None:
        """POST ``body`` to ``member``'s ``path``; None when it cannot be reached, times out,
        or answers something that is not a JSON object within the size limit."""
        return self._call("POST", member, path, body, deadline=deadline)

    def get(self, member: bytes, path: str, max_bytes: int = MAX_PEER_RESPONSE_BYTES,
            deadline: float | None = None) -> PeerAnswer | None:
        """GET ``member``'s ``path``, as ``post`` (``deadline``: a shorter one than the
        client's, for a call made while another member waits for this node)."""
        return self._call("GET", member, path, None, max_bytes, deadline)

    def _call(self, method: str, member: bytes, path: str, body: dict[str, Any] | None,
              max_bytes: int = MAX_PEER_RESPONSE_BYTES, deadline: float | None = None
              ) -> PeerAnswer | None:
        base = self.endpoint(member)
        if base is None:
            return None
        try:
            r = self.http.request(method, base + path, json=body,
                                  deadline=min(self.timeout, deadline or self.timeout),
                                  max_bytes=max_bytes)
        except NetError as e:
            log.info("member %s at %s: no answer: %s", Pubkey.from_bytes(member), base, e)
            self.forget(member)
            return None
        if not r.body:
            return PeerAnswer(r.status, {})
        obj = r.json_object()
        return PeerAnswer(r.status, obj) if obj is not None else None
