"""HTTP intake (stdlib ``ThreadingHTTPServer``): POST /v1/proofs, /v1/proofs/batch; the
committee member endpoints POST /v1/attestations/query, /v1/attestations/sign,
/v1/downtime/sign (``members.Member``); GET /v1/jobs/<job>/head, /health, /metrics.

Limits: bodies over ``MAX_BODY_BYTES`` get 413 without being read; a body without
Content-Length gets 411; a Content-Type other than JSON gets 415; bodies that are not
UTF-8 JSON get 400. Every error body is ``{"error", "message", "retry"}``; a retryable
single-proof answer (425, 503) also carries ``"retry_after"`` and a ``Retry-After`` header.
Binding to a non-loopback address needs ``allow_remote=True``.

Hostile traffic (issue 9, first part): the listen backlog is ``LISTEN_BACKLOG`` (a burst of
connections waits instead of being reset); at most ``MAX_CONCURRENT`` requests are handled at
once (more wait in the backlog; threads never grow without bound); a connection that sends
nothing for ``READ_TIMEOUT_S`` is closed (slowloris); responses go out with ``TCP_NODELAY``
(no Nagle delay); a JSON number the parser refuses (thousands of digits) is a 400 like any
other bad body, never a traceback.

``GET /v1/jobs/<job base58>/head`` serves the stored proof with the highest seq of a job,
accepted or rejected, for a worker that lost its disk (it must never re-sign a seq it
signed). Only proofs that passed authentication, the job-assignment and the worker-key
checks are ever stored, so strangers cannot make it lie.

The dashboard (``dashboard.py``, read-only, public): ``GET /v1/jobs/<job>/windows?limit=N``
(the stored windows, decoded; served from the database alone), ``GET /v1/dashboard/market``,
``/offers``, ``/jobs/<job>``, ``/providers/<provider>``, ``/validator``, and the pages under
``/dashboard/`` with their assets (sent with a Content-Security-Policy that allows nothing
but this node's own files). JSON answers carry ``Cache-Control: no-store``.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from solders.pubkey import Pubkey

from .chain import ChainClient
from .config import MAX_BODY_BYTES
from .dashboard import (
    ASSETS,
    CONTENT_SECURITY_POLICY,
    PAGES,
    ApiError,
    Dashboard,
    load_asset,
    parse_address,
    windows,
)
from .errors import (
    UNAVAILABLE_RETRY_AFTER_SECONDS,
    ConfigError,
    Rejection,
    StoreError,
    error_body,
)
from .members import Member
from .rewards import stored_rewards
from .schema import b58_pubkey
from .service import Intake
from .store import Store

log = logging.getLogger("gpum_validator.http")


def parse_listen(listen: str, allow_remote: bool = False) -> tuple[str, int]:
    """``host:port`` -> (host, port); ConfigError unless loopback or ``allow_remote``."""
    host, sep, port_s = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ConfigError(f"--listen {listen!r} must be HOST:PORT, e.g. 127.0.0.1:8787")
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            raise ConfigError(f"--listen host {host!r} must be an IP address or localhost") \
                from None
        if not loopback and not allow_remote:
            raise ConfigError(f"--listen {listen} is not a loopback address; put the validator "
                              "behind a TLS proxy, or pass --allow-remote to bind it anyway")
    return host, int(port_s)


class HealthProbe:
    """Answers 'is the chain reachable' with a cached ``fetch_market`` (at most every ttl s)."""

    def __init__(self, client: ChainClient, market: bytes, ttl: float = 10.0) -> None:
        self.client = client
        self.market = Pubkey.from_bytes(market)
        self.ttl = ttl
        self._at = -1e18
        self._ok = False
        self._lock = threading.Lock()

    def chain_ok(self) -> bool:
        with self._lock:
            if time.monotonic() - self._at < self.ttl:
                return self._ok
            try:
                self._ok = self.client.fetch_market(self.market) is not None
            except Exception as e:  # noqa: BLE001 - reported as chain_ok false
                log.warning("health: chain unreachable: %s", e)
                self._ok = False
            self._at = time.monotonic()
            return self._ok


LISTEN_BACKLOG = 1024
MAX_CONCURRENT = 256
READ_TIMEOUT_S = 10.0


class ValidatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, addr: tuple[str, int], intake: Intake, store: Store,
                 probe: HealthProbe | Callable[[], bool],
                 max_body: int = MAX_BODY_BYTES, member: Member | None = None,
                 dashboard: Dashboard | None = None) -> None:
        self.intake = intake
        self.store = store
        self.probe = probe
        self.max_body = max_body
        self.member = member
        self.dashboard = dashboard
        """The ``/v1/dashboard/*`` routes and the pages; None: they answer 404 (the windows
        route needs only the store and is always served)."""
        self.read_timeout_s = READ_TIMEOUT_S
        self._slots = threading.BoundedSemaphore(MAX_CONCURRENT)
        super().__init__(addr, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """One handler thread per connection, at most ``MAX_CONCURRENT`` at once: the accept
        loop waits for a free slot, and further connections wait in the listen backlog."""
        self._slots.acquire()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def chain_ok(self) -> bool:
        p = self.probe
        return p.chain_ok() if isinstance(p, HealthProbe) else bool(p())

    def health(self) -> tuple[int, dict[str, Any]]:
        db_ok = self.store.ping()
        chain_ok = self.chain_ok()
        summary = self.store.summary() if db_ok else {}
        body = {"ok": db_ok and chain_ok, "db_ok": db_ok, "chain_ok": chain_ok,
                "last_settlement_at": summary.get("last_settlement_at"),
                "pending_windows": summary.get("pending_windows"),
                "open_intents": (summary.get("intents") or {}).get("intended", 0)
                + (summary.get("intents") or {}).get("sent", 0) if db_ok else None}
        return (200 if body["ok"] else 503), body

    def head(self, job_b58: str) -> tuple[int, dict[str, Any]]:
        """``GET /v1/jobs/<job>/head``: 200 with the job's highest stored seq, 404
        ``job_unknown`` when nothing is stored, 400 for a bad address, 503 on a database
        failure (retryable)."""
        try:
            job = b58_pubkey(job_b58, "the job address")
            sp = self.store.head(job)
        except Rejection as r:
            return r.http_status, r.body()
        except StoreError as e:
            log.error("store error: %s", e)
            return 503, error_body("store_unavailable", f"{e}; retry later",
                                   UNAVAILABLE_RETRY_AFTER_SECONDS)
        if sp is None:
            return 404, error_body("job_unknown", f"no proof of job {job_b58} is stored here; "
                                   "this validator never accepted or kept one")
        return 200, {"job": job_b58, "seq": sp.seq,
                     "proof": base64.b64encode(sp.proof).decode(),
                     "proof_signature": base64.b64encode(sp.proof_signature).decode(),
                     "receipt_signature": base64.b64encode(sp.receipt_signature).decode(),
                     "worker_key": str(Pubkey.from_bytes(sp.worker_key)),
                     "decision": sp.decision}

    def metrics_text(self) -> str:
        def pending() -> float:
            return float(self.store.pending_windows()) if self.store.ping() else -1.0

        def last() -> float:
            v = self.store.summary().get("last_settlement_at") if self.store.ping() else None
            return float(v) if isinstance(v, (int, float)) else 0.0

        def earned() -> float:
            r = stored_rewards(self.store) if self.store.ping() else None
            return float(r["earned"]) if r and isinstance(r.get("earned"), int) else 0.0

        return self.intake.metrics.render({
            "gpum_validator_rewards_earned": (
                ("Rewards ever credited to this validator (its Validator account, in payment "
                 "token base units; 0 until read)."), earned),
            "gpum_validator_pending_windows": (
                "Accepted windows not yet covered by a confirmed settlement.", pending),
            "gpum_validator_last_settlement_timestamp_seconds": (
                "Unix time of the last confirmed settlement (0: none).", last),
            "gpum_validator_chain_up": (
                "1 if the RPC answered the last probe.", lambda: float(self.chain_ok())),
        })


class _Handler(BaseHTTPRequestHandler):
    server: ValidatorHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "gpum-validator"

    def setup(self) -> None:
        self.timeout = self.server.read_timeout_s  # slowloris: an idle connection is closed
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # not a TCP socket (tests over a socketpair)

    def log_message(self, format: str, *args: Any) -> None:  # stdlib signature
        log.debug("%s %s", self.client_address[0], format % args)

    def _send(self, status: int, body: bytes, ctype: str, close: bool = False,
              retry_after: int | None = None,
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: dict[str, Any], close: bool = False,
              headers: dict[str, str] | None = None) -> None:
        """Send ``obj``; a non-200 answer whose body says ``retry`` also gets Retry-After."""
        ra = obj.get("retry_after") if status != 200 and obj.get("retry") is True else None
        self._send(status, json.dumps(obj, separators=(",", ":")).encode(), "application/json",
                   close, ra if isinstance(ra, int) else None, headers)

    def _error(self, status: int, code: str, message: str, close: bool = False) -> None:
        self._json(status, error_body(code, message), close)

    def do_GET(self) -> None:  # stdlib name
        url = urlsplit(self.path)
        path = url.path
        parts = path.split("/")
        if len(parts) == 5 and parts[:3] == ["", "v1", "jobs"] and parts[4] == "head":
            self._json(*self.server.head(parts[3]))
        elif len(parts) == 5 and parts[:3] == ["", "v1", "jobs"] and parts[4] == "windows":
            self._json(*windows(self.server.store, parts[3], url.query), headers=_NO_STORE)
        elif path == "/health":
            status, body = self.server.health()
            self._json(status, body)
        elif path == "/metrics":
            self._send(200, self.server.metrics_text().encode(),
                       "text/plain; version=0.0.4; charset=utf-8")
        elif self.server.dashboard is not None and (
                path == "/dashboard" or path.startswith(("/dashboard/", "/v1/dashboard/"))):
            self._dashboard(self.server.dashboard, path, parts)
        else:
            self._error(404, "not_found", f"no route GET {self.path[:200]}")

    def _dashboard(self, d: Dashboard, path: str, parts: list[str]) -> None:
        """The dashboard's JSON routes, its pages and their assets (GET only)."""
        api = {"/v1/dashboard/market": d.market_summary, "/v1/dashboard/offers": d.offers,
               "/v1/dashboard/validator": lambda: d.validator(self.server.chain_ok())}
        if path in api:
            self._json(*api[path](), headers=_NO_STORE)
        elif len(parts) == 5 and parts[:3] == ["", "v1", "dashboard"] and parts[3] == "jobs":
            self._json(*d.job(parts[4]), headers=_NO_STORE)
        elif (len(parts) == 5 and parts[:3] == ["", "v1", "dashboard"]
              and parts[3] == "providers"):
            self._json(*d.provider(parts[4]), headers=_NO_STORE)
        elif path == "/dashboard":
            self._send(308, b"", "text/plain", headers={"Location": "/dashboard/"})
        elif path == "/dashboard/":
            self._page("market")
        elif path in ("/dashboard/offers", "/dashboard/validator"):
            self._page(parts[2])
        elif len(parts) == 4 and parts[2] in ("job", "provider"):
            try:
                parse_address(parts[3], f"the {parts[2]} address")
            except ApiError as e:
                self._error(e.status, e.reason, e.message)
                return
            self._page(parts[2])
        elif len(parts) == 4 and parts[2] == "assets" and parts[3] in ASSETS:
            self._send(200, load_asset(parts[3]), ASSETS[parts[3]],
                       headers={"Cache-Control": "no-cache", **_STATIC_HEADERS})
        else:
            self._error(404, "not_found", f"no route GET {path[:200]}")

    def _page(self, name: str) -> None:
        self._send(200, load_asset(PAGES[name]), "text/html; charset=utf-8",
                   headers={"Cache-Control": "no-cache",
                            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
                            "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
                            **_STATIC_HEADERS})

    def do_POST(self) -> None:  # stdlib name
        routes = {"/v1/proofs": self.server.intake.submit,
                  "/v1/proofs/batch": self.server.intake.submit_batch}
        member = self.server.member
        if member is not None:
            routes.update({"/v1/attestations/query": member.query,
                           "/v1/attestations/sign": member.sign,
                           "/v1/downtime/sign": member.downtime_sign})
        handler = routes.get(self.path)
        if handler is None:
            self._error(404, "not_found", f"no route POST {self.path}", close=True)
            return
        obj = self._read_json()
        if obj is _NO_BODY:
            return
        status, body = handler(obj)
        self._json(status, body)

    def _read_json(self) -> Any:
        if self.headers.get("Transfer-Encoding"):
            self._error(411, "length_required", "send the body with a Content-Length, not "
                        "chunked", close=True)
            return _NO_BODY
        length_s = self.headers.get("Content-Length")
        if length_s is None or not length_s.isdigit():
            self._error(411, "length_required", "a Content-Length header is required",
                        close=True)
            return _NO_BODY
        length = int(length_s)
        if length > self.server.max_body:
            self.server.intake.metrics.proof("rejected", "body_too_large")
            self._error(413, "body_too_large", f"the body is {length} bytes; the limit is "
                        f"{self.server.max_body}; send smaller batches", close=True)
            return _NO_BODY
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        raw = self.rfile.read(length)
        if ctype.lower() != "application/json":
            self._error(415, "unsupported_media_type", "send Content-Type: application/json")
            return _NO_BODY
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:  # JSONDecodeError too
            self.server.intake.metrics.proof("rejected", "bad_json")
            self._error(400, "bad_json", f"the body is not UTF-8 JSON: {e}")
            return _NO_BODY


_NO_BODY = object()
_NO_STORE = {"Cache-Control": "no-store"}
_STATIC_HEADERS = {"X-Content-Type-Options": "nosniff"}


def serve_in_thread(server: ValidatorHTTPServer, poll_interval: float = 0.1) -> threading.Thread:
    """Start ``server.serve_forever`` on a daemon thread (stop with ``server.shutdown()``)."""
    t = threading.Thread(target=server.serve_forever, args=(poll_interval,), name="gpum-http",
                         daemon=True)
    t.start()
    return t
