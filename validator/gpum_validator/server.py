"""HTTP intake: POST /v1/proofs, /v1/proofs/batch; the committee member endpoints POST
/v1/attestations/query, /v1/attestations/sign, /v1/downtime/sign (``members.Member``); GET
/v1/jobs/<job>/head, /health, /metrics; the dashboard.

Limits: bodies over ``MAX_BODY_BYTES`` get 413 without being read; a body without
Content-Length gets 411; a Content-Type other than JSON gets 415; bodies that are not
UTF-8 JSON get 400 (also a number of thousands of digits, or arrays nested 100,000 deep).
Every error body is ``{"error", "message", "retry"}``; a retryable single-proof answer (425,
503) also carries ``"retry_after"`` and a ``Retry-After`` header. Binding to a non-loopback
address needs ``allow_remote=True``.

Transport (issue 9, "Hostile traffic"). One event-loop thread (asyncio) owns every socket:
it accepts, reads each request completely (request line and headers of at most
``MAX_HEADER_BYTES`` and ``MAX_HEADERS`` lines, else 431; then the body under the rules
above) and only then hands it to one of
at most ``MAX_CONCURRENT`` handler threads, which run the routes (the intake, the member
endpoints and the dashboard are synchronous: SQLite, chain reads). So an idle or slow
connection costs a socket and a few hundred bytes, never a thread, and a slowloris attack
cannot starve the handlers. The limits (``HttpLimits``; the flags of ``gpum-validator run``):

* listen backlog ``LISTEN_BACKLOG`` (1,024): a burst of connections waits, is not reset;
* ``READ_TIMEOUT_S`` (10 s): a connection that does not deliver a complete request line and
  headers within it (idle keep-alive time included), or the body within it once the body is
  due, is closed; so is one that does not read its answer within it;
* at most ``MAX_CONNECTIONS`` (4,096, lowered to fit ``RLIMIT_NOFILE``) open connections;
  at the cap a new connection evicts the connection idle the longest (waiting for, or
  part-way through, a request's head), or is closed when none is idle;
* per source (an IPv4 address, an IPv6 /64): at most ``MAX_CONNECTIONS_PER_SOURCE`` (256)
  open connections, more are closed at once; at most ``MAX_IN_FLIGHT_PER_SOURCE`` (32)
  requests admitted at once (body being read, waiting for a handler, being handled); the
  next request of that source waits, unread, until one of them is answered. When every
  handler is busy, waiting requests are served one source at a time in turn (round robin),
  so a flood from a few hosts delays an honest worker by a few handler runs, not by the
  flood's queue. A trusted proxy (``TRUSTED_PROXIES``: the TLS proxy on this host, 127.0.0.1
  and ::1) has no connection cap, and its requests count against the client it names last
  in ``X-Forwarded-For`` (the address it appended; it must append one);
* a request body holds at most ``MAX_JSON_TOKENS`` commas, colons and brackets, counted
  before parsing: 100,000 numbers or nested arrays are a 400 that costs no parse (nesting
  under that count but past the interpreter's recursion limit is a 400 as well);
* responses go out in one write with ``TCP_NODELAY``; ``/health`` is computed at most once
  per ``HEALTH_CACHE_S`` (1 s) however often it is asked.

The per-source defaults are set for honest workers behind one NAT: a worker sends one proof
per window on one connection, so 256 connections are thousands of workers, and a source over
its in-flight share is slowed to its turn, never refused. Behind the TLS proxy every
connection comes from the proxy, hence no connection cap for it and the per-client count by
its ``X-Forwarded-For`` (the proxy itself should cap connections per client).

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

import asyncio
import base64
import ipaddress
import json
import logging
import queue
import socket
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from solders.pubkey import Pubkey

from .chain import ChainClient
from .config import MAX_BATCH, MAX_BODY_BYTES
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

try:
    import resource
except ImportError:  # not POSIX
    resource = None  # type: ignore[assignment]

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
"""Handler threads: requests handled at once (more wait, read, in the event loop)."""
READ_TIMEOUT_S = 10.0
MAX_HEADER_BYTES = 16 * 1024
MAX_HEADERS = 100
MAX_CONNECTIONS = 4096
MAX_CONNECTIONS_PER_SOURCE = 256
MAX_IN_FLIGHT_PER_SOURCE = 32
HEALTH_CACHE_S = 1.0
TRUSTED_PROXIES = ("127.0.0.1", "::1")
"""The TLS proxy the README asks for runs on the validator's host: its clients are told apart
by the X-Forwarded-For it appends."""
MAX_JSON_TOKENS = 4096
"""Commas, colons and brackets a request body may hold (counted before parsing, none of them
occur in base64 or base58): every request is a flat object or a batch of at most
``MAX_BATCH`` of them, a few hundred; junk of 100,000 numbers or nested arrays costs no
parse."""
FD_RESERVE = 256
"""File descriptors kept for SQLite, the RPC client and the peers when ``MAX_CONNECTIONS``
is fitted to ``RLIMIT_NOFILE``."""


@dataclass(frozen=True)
class HttpLimits:
    """The transport's limits (see the module docstring); ``gpum-validator run`` flags."""

    backlog: int = LISTEN_BACKLOG
    handler_threads: int = MAX_CONCURRENT
    read_timeout_s: float = READ_TIMEOUT_S
    max_header_bytes: int = MAX_HEADER_BYTES
    max_connections: int = MAX_CONNECTIONS
    max_connections_per_source: int = MAX_CONNECTIONS_PER_SOURCE
    max_in_flight_per_source: int = MAX_IN_FLIGHT_PER_SOURCE
    trusted_proxies: tuple[str, ...] = TRUSTED_PROXIES
    """Peers whose connections have no per-source cap and whose requests count against the
    client named last in their ``X-Forwarded-For`` (the address the proxy appended)."""

    def validate(self) -> None:
        for name in ("backlog", "handler_threads", "max_header_bytes", "max_connections",
                     "max_connections_per_source", "max_in_flight_per_source"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name.replace('_', '-')} must be at least 1")
        if not self.read_timeout_s > 0:
            raise ConfigError("read-timeout must be positive")
        if self.max_in_flight_per_source >= self.handler_threads and self.handler_threads > 1:
            raise ConfigError(f"max-in-flight-per-source ({self.max_in_flight_per_source}) "
                              f"must be below the handler threads ({self.handler_threads}), "
                              "or one host can occupy every handler")
        for a in self.trusted_proxies:
            try:
                ipaddress.ip_address(a)
            except ValueError:
                raise ConfigError(f"trusted proxy {a!r} is not an IP address") from None


def source_of(address: str) -> str:
    """The key of per-source limits: an IPv4 address, or the /64 of an IPv6 address (one
    host usually holds a whole /64); an IPv4-mapped IPv6 address is its IPv4 address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def raise_fd_limit() -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one (``gpum-validator run`` does, once):
    every open connection is a descriptor. The new soft limit, or None where unknown."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-file limit from %d: %s", soft, e)
    return None if soft == resource.RLIM_INFINITY else soft


def fd_limited(max_connections: int) -> int:
    """``max_connections`` lowered to fit the soft ``RLIMIT_NOFILE`` (less ``FD_RESERVE``)."""
    if resource is None:
        return max_connections
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(16, min(max_connections, soft - FD_RESERVE))


# ----------------------------------------------------------------------------- messages


@dataclass
class Request:
    """A complete request as the event loop read it."""

    method: str
    path: str
    headers: dict[str, str]
    """Lower-case names, the first value of each."""
    body: bytes = b""
    source: str = ""


@dataclass
class Response:
    status: int
    body: bytes
    ctype: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    close: bool = False


_PHRASES = {s.value: s.phrase for s in HTTPStatus}
_date_cache: list[Any] = [0, ""]


def _http_date() -> str:
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[:] = [now, formatdate(now, usegmt=True)]
    return str(_date_cache[1])


def encode_response(r: Response, close: bool) -> bytes:
    lines = [f"HTTP/1.1 {r.status} {_PHRASES.get(r.status, '')}", "Server: gpum-validator",
             f"Date: {_http_date()}", f"Content-Type: {r.ctype}",
             f"Content-Length: {len(r.body)}"]
    lines += [f"{k}: {v}" for k, v in r.headers]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + r.body


def _json_response(status: int, obj: dict[str, Any], close: bool = False,
                   headers: dict[str, str] | None = None) -> Response:
    """``obj`` as JSON; a non-200 answer whose body says ``retry`` also gets Retry-After."""
    ra = obj.get("retry_after") if status != 200 and obj.get("retry") is True else None
    extra = [("Retry-After", str(ra))] if isinstance(ra, int) else []
    extra += list((headers or {}).items())
    return Response(status, json.dumps(obj, separators=(",", ":")).encode(), "application/json",
                    extra, close)


def _error(status: int, code: str, message: str, close: bool = False) -> Response:
    return _json_response(status, error_body(code, message), close)


# ----------------------------------------------------------------------------- the server


class ValidatorHTTPServer:
    """The validator's HTTP server. ``serve_forever()`` runs it on the calling thread until
    ``shutdown()``; ``server_close()`` releases the socket and the handler threads. The
    socket is bound in the constructor (``server_port`` is known at once; ``OSError`` if the
    address is taken)."""

    def __init__(self, addr: tuple[str, int], intake: Intake, store: Store,
                 probe: HealthProbe | Callable[[], bool],
                 max_body: int = MAX_BODY_BYTES, member: Member | None = None,
                 dashboard: Dashboard | None = None, limits: HttpLimits | None = None) -> None:
        self.intake = intake
        self.store = store
        self.probe = probe
        self.max_body = max_body
        self.member = member
        self.dashboard = dashboard
        """The ``/v1/dashboard/*`` routes and the pages; None: they answer 404 (the windows
        route needs only the store and is always served)."""
        self.limits = limits or HttpLimits()
        self.limits.validate()
        self.read_timeout_s = self.limits.read_timeout_s
        """Read at every use, so a test may lower it on a running server."""
        self.request_queue_size = self.limits.backlog
        self.max_connections = fd_limited(self.limits.max_connections)
        self._trusted = frozenset(source_of(a) for a in self.limits.trusted_proxies)
        self.socket = _bind(addr, self.limits.backlog)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self.server_port = self.server_address[1]
        self._health: tuple[float, tuple[int, dict[str, Any]] | None] = (0.0, None)
        self._health_lock = threading.Lock()
        self._workers = _Workers(self.limits.handler_threads)
        self.stats: Counter[str] = Counter()
        """Transport counters (metric ``gpum_validator_http_connections_closed_total{why}``):
        ``refused_source_cap``, ``refused_global_cap`` (closed at once), ``evicted`` (idle,
        closed at the global cap), ``timeouts`` (a deadline passed, idle keep-alive included),
        ``bad_requests`` (malformed HTTP), ``handler_errors`` (answered 500)."""
        self._state = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._serving = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._front: _Front | None = None

    # ------------------------------------------------------------------ lifecycle

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until ``shutdown()`` (``poll_interval`` is accepted for the socketserver
        signature; nothing polls)."""
        with self._state:
            if not self._stopped.is_set():
                raise RuntimeError("the server is already serving")
            self._stopped.clear()
            loop = asyncio.new_event_loop()
            self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                with self._state:
                    self._loop = None
                    self._serving.clear()
                    self._stopped.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        front = _Front(self, asyncio.get_running_loop())
        self._front = front
        server = await asyncio.start_server(front.on_connection, sock=self.socket,
                                            backlog=self.limits.backlog,
                                            limit=self.limits.max_header_bytes)
        self._serving.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            await front.close_all()

    def wait_serving(self, timeout: float | None = None) -> bool:
        """True once ``serve_forever`` accepts connections."""
        return self._serving.wait(timeout)

    def shutdown(self) -> None:
        """Stop ``serve_forever`` and wait until it returned (open connections are closed)."""
        with self._state:
            loop, stop = self._loop, self._stop
        if loop is None:
            return
        self._serving.wait(10)
        stop = self._stop
        if stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop already closed
                pass
        self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()
        self._workers.stop()

    # ------------------------------------------------------------------ transport state

    def open_connections(self) -> dict[str, int]:
        """Open connections per source (a snapshot)."""
        front = self._front
        return dict(front.connections_by_source()) if front is not None else {}

    def in_flight(self) -> int:
        """Requests admitted: body being read, waiting for a handler, or being handled."""
        front = self._front
        return front.in_flight if front is not None else 0

    def waiting(self) -> int:
        """Requests whose head is read, waiting (unread) for their source's turn."""
        front = self._front
        return front.waiting if front is not None else 0

    # ------------------------------------------------------------------ routes' data

    def chain_ok(self) -> bool:
        p = self.probe
        return p.chain_ok() if isinstance(p, HealthProbe) else bool(p())

    def health(self) -> tuple[int, dict[str, Any]]:
        """``GET /health``, computed at most once per ``HEALTH_CACHE_S`` (spam costs one
        database summary a second)."""
        with self._health_lock:
            at, cached = self._health
            if cached is not None and time.monotonic() - at < HEALTH_CACHE_S:
                return cached
            value = self._health_now()
            self._health = (time.monotonic(), value)
            return value

    def _health_now(self) -> tuple[int, dict[str, Any]]:
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

        text = self.intake.metrics.render({
            "gpum_validator_rewards_earned": (
                ("Rewards ever credited to this validator (its Validator account, in payment "
                 "token base units; 0 until read)."), earned),
            "gpum_validator_pending_windows": (
                "Accepted windows not yet covered by a confirmed settlement.", pending),
            "gpum_validator_last_settlement_timestamp_seconds": (
                "Unix time of the last confirmed settlement (0: none).", last),
            "gpum_validator_chain_up": (
                "1 if the RPC answered the last probe.", lambda: float(self.chain_ok())),
            "gpum_validator_http_connections_open": (
                "Open HTTP connections.",
                lambda: float(sum(self.open_connections().values()))),
            "gpum_validator_http_requests_in_flight": (
                "Requests admitted (body being read, waiting for or in a handler).",
                lambda: float(self.in_flight())),
        })
        stats = dict(self.stats)
        out = [("# HELP gpum_validator_http_connections_closed_total Connections the server "
                "closed early, by why."),
               "# TYPE gpum_validator_http_connections_closed_total counter"]
        for why in ("refused_source_cap", "refused_global_cap", "evicted", "timeouts",
                    "bad_requests", "handler_errors"):
            out.append(f'gpum_validator_http_connections_closed_total{{why="{why}"}} '
                       f'{stats.get(why, 0)}')
        return text + "\n".join(out) + "\n"

    # ------------------------------------------------------------------ handling

    def post_routes(self) -> set[str]:
        routes = {"/v1/proofs", "/v1/proofs/batch"}
        if self.member is not None:
            routes |= {"/v1/attestations/query", "/v1/attestations/sign", "/v1/downtime/sign"}
        return routes

    def respond(self, req: Request) -> Response:
        """Run the routes for a complete request (on a handler thread); never raises."""
        try:
            ex = _Exchange(self, req)
            if req.method == "GET":
                ex.do_GET()
            else:
                ex.do_POST()
            if ex.response is None:
                raise RuntimeError("the route gave no answer")
            return ex.response
        except Exception:  # a bug: answered 500, logged with its traceback
            self.stats["handler_errors"] += 1
            log.exception("error handling %s %s", req.method, req.path[:200])
            return _error(500, "internal_error", "the validator failed on this request; "
                          "retry later, and report it if it persists", close=True)


def _bind(addr: tuple[str, int], backlog: int) -> socket.socket:
    host, port = addr[0], addr[1]
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    infos.sort(key=lambda i: i[0] != socket.AF_INET)  # "localhost" is 127.0.0.1, as before
    family, kind, proto, _canon, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


class _Workers:
    """Daemon handler threads (started as needed, at most ``n``), fed from a queue; a
    result goes back to the event loop through ``call_soon_threadsafe``."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._busy = 0

    def submit(self, fn: Callable[[], Any], loop: asyncio.AbstractEventLoop,
               fut: asyncio.Future[Any]) -> None:
        with self._lock:
            self._busy += 1
            if self._busy > self._threads and self._threads < self._n:
                self._threads += 1
                threading.Thread(target=self._run, name=f"gpum-http-{self._threads}",
                                 daemon=True).start()
        self._q.put((fn, loop, fut))

    def stop(self) -> None:
        with self._lock:
            n, self._threads = self._threads, 0
        for _ in range(n):
            self._q.put(None)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fn, loop, fut = item
            result = fn()
            with self._lock:
                self._busy -= 1
            try:
                loop.call_soon_threadsafe(_resolve, fut, result)
            except RuntimeError:  # the loop closed (shutdown) meanwhile
                pass


def _resolve(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


class _Admission:
    """One client's requests in flight, and those waiting (unread) for a place."""

    __slots__ = ("in_flight", "waiters")

    def __init__(self) -> None:
        self.in_flight = 0
        self.waiters: deque[asyncio.Future[None]] = deque()


class _Conn:
    __slots__ = ("source", "transport")

    def __init__(self, source: str, transport: asyncio.BaseTransport) -> None:
        self.source = source
        self.transport = transport


class _FairSlots:
    """``n`` handler slots; when all are taken, waiters are served one source at a time in
    turn (round robin over the sources that wait), first come first served within one."""

    def __init__(self, n: int) -> None:
        self.free = n
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    async def acquire(self, loop: asyncio.AbstractEventLoop, source: str) -> None:
        if self.free > 0 and not self._waiting:
            self.free -= 1
            return
        fut: asyncio.Future[None] = loop.create_future()
        self._waiting.setdefault(source, deque()).append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed over just as it was cancelled
            else:
                q = self._waiting.get(source)
                if q is not None and fut in q:
                    q.remove(fut)
                    if not q:
                        del self._waiting[source]
            raise

    def release(self) -> None:
        while self._waiting:
            source, q = next(iter(self._waiting.items()))
            fut = q.popleft()
            if q:
                self._waiting.move_to_end(source)
            else:
                del self._waiting[source]
            if not fut.done():
                fut.set_result(None)
                return
        self.free += 1


class _Closed(Exception):
    """The connection is done (closed by the peer, timed out, or answered with close)."""


class _Front:
    """The event-loop side: connections, reading requests, admission, writing answers."""

    def __init__(self, server: ValidatorHTTPServer, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.loop = loop
        self.limits = server.limits
        self.conns: dict[str, int] = {}
        """Open connections per source (peer address, IPv6 by /64)."""
        self.clients: dict[str, _Admission] = {}
        """Requests per client: the source, or behind a trusted proxy the forwarded one."""
        self.idle: OrderedDict[_Conn, None] = OrderedDict()
        """Connections waiting for (or part-way through) a request head, idle longest first."""
        self.open = 0
        self.in_flight = 0
        self.waiting = 0
        self.slots = _FairSlots(self.limits.handler_threads)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.post_routes = server.post_routes()

    def connections_by_source(self) -> dict[str, int]:
        return dict(self.conns)

    async def close_all(self) -> None:
        for t in list(self.tasks):
            t.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=5)

    # ------------------------------------------------------------------ connections

    async def on_connection(self, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
        transport = writer.transport
        peer = writer.get_extra_info("peername")
        source = source_of(str(peer[0])) if peer else "unknown"
        proxy = source in self.server._trusted
        stats = self.server.stats
        if not proxy and self.conns.get(source, 0) >= self.limits.max_connections_per_source:
            stats["refused_source_cap"] += 1
            transport.abort()
            return
        if self.open >= self.server.max_connections:
            if not self.idle:
                stats["refused_global_cap"] += 1
                transport.abort()
                return
            victim, _ = self.idle.popitem(last=False)
            stats["evicted"] += 1
            victim.transport.abort()
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass  # not TCP
        self.conns[source] = self.conns.get(source, 0) + 1
        self.open += 1
        conn = _Conn(source, transport)
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        try:
            await self._serve_connection(conn, proxy, reader, writer)
        except (_Closed, ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except Exception:  # a bug must not kill the loop; logged
            log.exception("connection from %s failed", source)
        finally:
            self.idle.pop(conn, None)
            self.open -= 1
            if self.conns[source] > 1:
                self.conns[source] -= 1
            else:
                del self.conns[source]
            if task is not None:
                self.tasks.discard(task)
            transport.close()  # after what is left to write, unless that is never read:
            if transport.get_write_buffer_size():
                self.loop.call_later(self.server.read_timeout_s, transport.abort)

    def _deadline(self) -> asyncio.TimerHandle:
        return self.loop.call_later(self.server.read_timeout_s, self._expire,
                                    asyncio.current_task())

    def _expire(self, task: asyncio.Task[Any] | None) -> None:
        self.server.stats["timeouts"] += 1
        if task is not None:
            task.cancel()

    async def _serve_connection(self, conn: _Conn, proxy: bool, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
        while True:
            self.idle[conn] = None  # waiting for a request: evictable, idle longest first
            timer = self._deadline()
            try:
                head = await self._read_head(reader)
            finally:
                timer.cancel()
                self.idle.pop(conn, None)
            if head is None:
                return
            parsed = self._parse_head(head, conn.source)
            if isinstance(parsed, Response):
                self.server.stats["bad_requests"] += 1
                await self._write(writer, parsed, True)
                return
            req, keep_alive = parsed
            early = self._check_body(req)
            if early is not None:
                await self._write(writer, early, early.close or not keep_alive)
                if early.close or not keep_alive:
                    return
                continue
            client = _forwarded_for(req.headers) if proxy else None
            client = client or conn.source
            req.source = client  # whose limits and budgets the request counts against
            adm = await self._admit(client)
            try:
                length = int(req.headers.get("content-length") or 0)
                if length:
                    if req.headers.get("expect", "").lower() == "100-continue":
                        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    timer = self._deadline()
                    try:
                        req.body = await reader.readexactly(length)
                    finally:
                        timer.cancel()
                if req.method == "GET" and req.headers.get("transfer-encoding"):
                    keep_alive = False  # a chunked body we do not read: end with this answer
                await self.slots.acquire(self.loop, client)
                try:
                    fut: asyncio.Future[Response] = self.loop.create_future()
                    self.server._workers.submit(lambda r=req: self.server.respond(r), self.loop,
                                                fut)
                    resp = await fut
                finally:
                    self.slots.release()
            finally:
                self._release(client, adm)
            close = resp.close or not keep_alive
            await self._write(writer, resp, close)
            if close:
                return

    async def _read_head(self, reader: asyncio.StreamReader) -> bytes | None:
        """The request line and headers (without the blank line), None at a clean EOF
        between requests; a head over the limit is answered by the caller (431)."""
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as e:
                if not e.partial.strip():
                    return None
                raise _Closed from None
            except asyncio.LimitOverrunError:
                return b""  # marker: too large
            head = head.lstrip(b"\r\n")
            if head:
                return head[:-4] if head.endswith(b"\r\n\r\n") else head

    def _parse_head(self, head: bytes, source: str) -> tuple[Request, bool] | Response:
        if not head:
            return _error(431, "header_too_large", "the request line and headers exceed "
                          f"{self.limits.max_header_bytes} bytes", close=True)
        lines = head.split(b"\r\n")
        if len(lines) > MAX_HEADERS + 1:
            return _error(431, "header_too_large", f"more than {MAX_HEADERS} header lines",
                          close=True)
        words = lines[0].decode("latin-1").split()
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            return _error(400, "bad_request", "malformed request line; send METHOD PATH "
                          "HTTP/1.1", close=True)
        method, path, version = words
        try:
            major, minor = (int(x) for x in version[5:].split(".", 1))
        except ValueError:
            return _error(400, "bad_request", f"bad HTTP version {version[:20]!r}", close=True)
        if major != 1:
            return _error(505, "http_version_not_supported", "send HTTP/1.1", close=True)
        headers: dict[str, str] = {}
        for raw in lines[1:]:
            name_b, sep, value_b = raw.partition(b":")
            name = name_b.decode("latin-1")
            if not sep or not name or name != name.strip() or " " in name or "\t" in name:
                return _error(400, "bad_request", "malformed header line", close=True)
            key = name.lower()
            value = value_b.decode("latin-1").strip()
            if key in headers:
                if key == "x-forwarded-for":  # one list, in order (RFC 9110 5.3)
                    headers[key] = f"{headers[key]}, {value}"
                    continue
                if key == "content-length" and headers[key] != value:
                    return _error(400, "bad_request", "conflicting Content-Length headers",
                                  close=True)
                continue
            headers[key] = value
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        keep_alive = "close" not in tokens and (minor >= 1 or "keep-alive" in tokens)
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
        if method not in ("GET", "POST"):
            return _error(501, "not_implemented", f"method {method[:20]!r} is not served; "
                          "use GET or POST", close=True)
        return Request(method, path, headers, source=source), keep_alive

    def _check_body(self, req: Request) -> Response | None:
        """The answers given before any byte of the body is read: 404 for an unknown POST
        route, 411 without Content-Length (or chunked), 413 over the limit."""
        h = req.headers
        if req.method == "GET":
            length_s = h.get("content-length")
            if length_s is not None and not length_s.isdigit():
                return _error(400, "bad_request", "malformed Content-Length", close=True)
            if length_s is not None and int(length_s) > self.server.max_body:
                return _error(413, "body_too_large", "a GET carries no body", close=True)
            return None
        if req.path not in self.post_routes:
            return _error(404, "not_found", f"no route POST {req.path}", close=True)
        if h.get("transfer-encoding"):
            return _error(411, "length_required", "send the body with a Content-Length, not "
                          "chunked", close=True)
        length_s = h.get("content-length")
        if length_s is None or not length_s.isdigit():
            return _error(411, "length_required", "a Content-Length header is required",
                          close=True)
        length = int(length_s)
        if length > self.server.max_body:
            self.server.intake.metrics.proof("rejected", "body_too_large")
            return _error(413, "body_too_large", f"the body is {length} bytes; the limit is "
                          f"{self.server.max_body}; send smaller batches", close=True)
        return None

    # ------------------------------------------------------------------ admission

    async def _admit(self, client: str) -> _Admission:
        """One of the client's ``max_in_flight_per_source`` places; waits for one."""
        adm = self.clients.get(client)
        if adm is None:
            adm = self.clients[client] = _Admission()
        if adm.in_flight < self.limits.max_in_flight_per_source:
            adm.in_flight += 1
            self.in_flight += 1
            return adm
        fut: asyncio.Future[None] = self.loop.create_future()
        adm.waiters.append(fut)
        self.waiting += 1
        try:
            await fut  # the place is handed over by _release: in_flight already counts it
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release(client, adm)
            elif fut in adm.waiters:
                adm.waiters.remove(fut)
            raise
        finally:
            self.waiting -= 1
        return adm

    def _release(self, client: str, adm: _Admission) -> None:
        while adm.waiters:
            fut = adm.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        adm.in_flight -= 1
        self.in_flight -= 1
        if adm.in_flight == 0 and self.clients.get(client) is adm:
            del self.clients[client]  # bounded by the requests in flight

    # ------------------------------------------------------------------ answers

    async def _write(self, writer: asyncio.StreamWriter, resp: Response, close: bool) -> None:
        writer.write(encode_response(resp, close))
        if writer.transport.get_write_buffer_size():
            timer = self._deadline()  # a client that does not read its answer is dropped
            try:
                await writer.drain()
            finally:
                timer.cancel()


class _Exchange:
    """The routes of one request (on a handler thread); the answer goes to ``response``."""

    def __init__(self, server: ValidatorHTTPServer, req: Request) -> None:
        self.server = server
        self.path = req.path
        self.headers = req.headers
        self.body = req.body
        self.source = req.source or "unknown"
        """Who sent it (``source_of``; behind a trusted proxy, the client it names)."""
        self.response: Response | None = None

    def _send(self, status: int, body: bytes, ctype: str, close: bool = False,
              headers: dict[str, str] | None = None) -> None:
        self.response = Response(status, body, ctype, list((headers or {}).items()), close)

    def _json(self, status: int, obj: dict[str, Any], close: bool = False,
              headers: dict[str, str] | None = None) -> None:
        self.response = _json_response(status, obj, close, headers)

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
        status, body = handler(obj, source=self.source)  # job reads paid by the source
        self._json(status, body)

    def _read_json(self) -> Any:
        """The body as JSON (the event loop already applied 411 and 413)."""
        ctype = (self.headers.get("content-type") or "application/json").split(";")[0].strip()
        if ctype.lower() != "application/json":
            self._error(415, "unsupported_media_type", "send Content-Type: application/json")
            return _NO_BODY
        tokens = sum(self.body.count(c) for c in _JSON_STRUCTURE)
        if tokens > MAX_JSON_TOKENS:  # a C-speed count, before any parsing
            self.server.intake.metrics.proof("rejected", "bad_json")
            self._error(400, "bad_json", f"the body has {tokens} JSON separators and brackets, "
                        f"more than {MAX_JSON_TOKENS} (a batch of {MAX_BATCH} proofs needs a "
                        "few hundred); huge or deeply nested JSON is refused unparsed")
            return _NO_BODY
        try:
            return json.loads(self.body.decode("utf-8"))
        except RecursionError:
            self.server.intake.metrics.proof("rejected", "bad_json")
            self._error(400, "bad_json", "the body is nested too deeply; a request is a flat "
                        "JSON object")
        except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError too
            self.server.intake.metrics.proof("rejected", "bad_json")
            self._error(400, "bad_json", f"the body is not UTF-8 JSON: {e}")
        return _NO_BODY


def _forwarded_for(headers: dict[str, str]) -> str | None:
    """The client a trusted proxy names: the last address of ``X-Forwarded-For`` (the one the
    proxy appended; earlier ones come from the client and prove nothing)."""
    last = headers.get("x-forwarded-for", "").rsplit(",", 1)[-1].strip()
    if not last:
        return None
    try:
        ipaddress.ip_address(last.split("%", 1)[0])
    except ValueError:
        return None
    return source_of(last)


_NO_BODY = object()
_JSON_STRUCTURE = (b",", b":", b"[", b"{")
_NO_STORE = {"Cache-Control": "no-store"}
_STATIC_HEADERS = {"X-Content-Type-Options": "nosniff"}


def serve_in_thread(server: ValidatorHTTPServer, poll_interval: float = 0.1) -> threading.Thread:
    """Start ``server.serve_forever`` on a daemon thread and return once it accepts
    connections (stop with ``server.shutdown()``)."""
    t = threading.Thread(target=server.serve_forever, args=(poll_interval,), name="gpum-http",
                         daemon=True)
    t.start()
    if not server.wait_serving(30):
        raise RuntimeError("the HTTP server did not start")
    return t
