"""An HTTP/1.1 front for a synchronous application that no one client can starve.

Shared by the validator's node (``gpum_validator.transport``) and the worker's API
(``gpum_worker.api``). One event-loop thread (asyncio) owns every socket: it accepts, reads
each request completely (request line and headers of at most ``max_header_bytes`` and
``MAX_HEADERS`` lines, else 431; then the body, after the application's ``check_body``
accepted its announced length) and only then hands it to one of at most
``handler_threads`` threads, which run the application's ``respond``. So an idle or slow
connection costs a socket and a few hundred bytes, never a thread, and a slowloris attack
cannot starve the handlers. The limits (``HttpLimits``):

* listen backlog ``backlog`` (1,024): a burst of connections waits, is not reset;
* ``read_timeout_s`` (10 s): a connection that does not deliver a complete request line and
  headers within it (idle keep-alive time included), or the body within it once the body is
  due, is closed; so is one that does not read its answer within it;
* at most ``max_connections`` (4,096, lowered to fit ``RLIMIT_NOFILE``) open connections;
  at the cap a new connection evicts the connection idle the longest (waiting for, or
  part-way through, a request's head), or is closed when none is idle;
* per source (an IPv4 address, an IPv6 /64): at most ``max_connections_per_source`` (256)
  open connections, more are closed at once; at most ``max_in_flight_per_source`` (32)
  requests admitted at once (body being read, waiting for a handler, being handled); the
  next request of that source waits, unread, until one of them is answered. When every
  handler is busy, waiting requests are served one source at a time in turn (round robin),
  so a flood from a few hosts delays an honest client by a few handler runs, not by the
  flood's queue. A trusted proxy (``trusted_proxies``: 127.0.0.1 and ::1 by default) has
  no connection cap, and its requests count against the client it names last in
  ``X-Forwarded-For`` (the address it appended; it must append one);
* answers go out in one write with ``TCP_NODELAY``; a streamed answer (``Response.stream``)
  is read by a thread of its own and ends when the client stops reading or goes away;
* a protocol switch (``Response.feed`` with ``stream``, status 101) carries raw bytes both
  ways until either side ends; the client's bytes have no deadline (the application bounds it).

An application subclasses ``HttpServer`` and overrides ``respond`` (a handler thread; never
raises), ``check_body`` (the event loop, before any byte of a body is read: 404/411/413
answers; ``standard_body_check`` is the usual one) and ``error_response`` (its error body).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import queue
import socket
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

try:
    import resource
except ImportError:  # not POSIX
    resource = None  # type: ignore[assignment]

__all__ = [
    "HttpLimits",
    "HttpServer",
    "LimitsError",
    "Request",
    "Response",
    "bind",
    "encode_response",
    "fd_limited",
    "forwarded_for",
    "raise_fd_limit",
    "serve_in_thread",
    "source_of",
    "standard_body_check",
]

log = logging.getLogger("gpu_market.httpfront")

LISTEN_BACKLOG = 1024
MAX_CONCURRENT = 256
"""Handler threads: requests handled at once (more wait, read, in the event loop)."""
READ_TIMEOUT_S = 10.0
MAX_HEADER_BYTES = 16 * 1024
MAX_HEADERS = 100
MAX_CONNECTIONS = 4096
MAX_CONNECTIONS_PER_SOURCE = 256
MAX_IN_FLIGHT_PER_SOURCE = 32
TRUSTED_PROXIES = ("127.0.0.1", "::1")
"""A TLS proxy on the same host: its clients are told apart by the X-Forwarded-For it
appends."""
FD_RESERVE = 256
"""File descriptors kept for everything else when ``MAX_CONNECTIONS`` is fitted to
``RLIMIT_NOFILE``."""
STREAM_QUEUE = 64
"""Chunks a streamed answer may read ahead of its client."""


class LimitsError(ValueError):
    """An ``HttpLimits`` value is out of range; the message names the setting."""


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
                raise LimitsError(f"{name.replace('_', '-')} must be at least 1")
        if not self.read_timeout_s > 0:
            raise LimitsError("read-timeout must be positive")
        if self.max_in_flight_per_source >= self.handler_threads and self.handler_threads > 1:
            raise LimitsError(f"max-in-flight-per-source ({self.max_in_flight_per_source}) "
                              f"must be below the handler threads ({self.handler_threads}), "
                              "or one host can occupy every handler")
        for a in self.trusted_proxies:
            try:
                ipaddress.ip_address(a)
            except ValueError:
                raise LimitsError(f"trusted proxy {a!r} is not an IP address") from None


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
    """An answer. With ``stream`` (an iterator of byte chunks, ``close()`` ends it) the body
    is sent chunked as the iterator yields, until it ends, the client goes away or the
    server stops; ``body`` is then ignored and the connection closes after it."""

    status: int
    body: bytes
    ctype: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    close: bool = False
    stream: Iterator[bytes] | None = None
    feed: Callable[[bytes], bool] | None = None
    """With ``stream``: switch protocols (status 101, no body framing). Called on the event
    loop with each read of the client's bytes; must not block; False ends the connection."""


_PHRASES = {s.value: s.phrase for s in HTTPStatus}
_date_cache: list[Any] = [0, ""]


def _http_date() -> str:
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache[:] = [now, formatdate(now, usegmt=True)]
    return str(_date_cache[1])


def encode_response(r: Response, close: bool, server: str = "gpum-validator") -> bytes:
    """The status line, headers and body of ``r`` (a streamed answer: the head only, with
    ``Transfer-Encoding: chunked``)."""
    lines = [f"HTTP/1.1 {r.status} {_PHRASES.get(r.status, '')}", f"Server: {server}",
             f"Date: {_http_date()}"]
    if r.feed is None:
        length = ("Transfer-Encoding: chunked" if r.stream is not None
                  else f"Content-Length: {len(r.body)}")
        lines += [f"Content-Type: {r.ctype}", length]
    lines += [f"{k}: {v}" for k, v in r.headers]
    if r.feed is not None:
        lines.append("Connection: Upgrade")
    elif close:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if r.stream is not None else head + r.body


def bind(addr: tuple[str, int], backlog: int) -> socket.socket:
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
                _discard(result)


def _resolve(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)
    else:  # its connection ended while the handler ran: nobody will send the answer
        _discard(value)


def _close_stream(stream: Any) -> None:
    """Close a streamed answer's source, if it has one; never raises."""
    close = getattr(stream, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # a finished source may fail to close; nothing to do
            log.debug("closing a stream failed", exc_info=True)


def _discard(value: Any) -> None:
    """Close the stream of an answer that will never be sent."""
    _close_stream(getattr(value, "stream", None))


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

    def __init__(self, server: HttpServer, loop: asyncio.AbstractEventLoop) -> None:
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
            early = self.server.check_body(req)
            if early is not None:
                await self._write(writer, early, early.close or not keep_alive)
                if early.close or not keep_alive:
                    return
                continue
            client = forwarded_for(req.headers) if proxy else None
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
            if resp.stream is not None:
                await self._stream(reader, writer, resp)
                return
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
        _error = self.server.error_response
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
        if method not in self.server.methods:
            return _error(501, "not_implemented", f"method {method[:20]!r} is not served; "
                          f"use {' or '.join(self.server.methods)}", close=True)
        return Request(method, path, headers, source=source), keep_alive

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
        writer.write(encode_response(resp, close, self.server.server_name))
        if writer.transport.get_write_buffer_size():
            timer = self._deadline()  # a client that does not read its answer is dropped
            try:
                await writer.drain()
            finally:
                timer.cancel()

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      resp: Response) -> None:
        """Send ``resp.stream`` chunked, then close. A thread of its own reads the iterator
        (it may block for long: a quiet log), at most ``STREAM_QUEUE`` chunks ahead of the
        client; a client that does not read within ``read_timeout_s``, that closes its side
        or sends anything more, or a server that stops, ends the stream and closes it.
        With ``resp.feed``: unframed, the client's bytes to ``feed`` (EOF, False: the end)."""
        stream = resp.stream
        assert stream is not None
        q: asyncio.Queue[bytes | None] = asyncio.Queue(STREAM_QUEUE)
        done = threading.Event()
        loop = self.loop

        def pump() -> None:
            try:
                for chunk in stream:
                    fut = asyncio.run_coroutine_threadsafe(q.put(chunk), loop)
                    while not done.is_set():
                        try:
                            fut.result(timeout=0.5)
                            break
                        except TimeoutError:
                            continue
                    if done.is_set():
                        fut.cancel()
                        return
            except Exception as e:  # noqa: BLE001 - a failing source ends the stream
                log.debug("stream ended: %s", e)
            finally:
                if not done.is_set():
                    try:
                        asyncio.run_coroutine_threadsafe(q.put(None), loop)
                    except RuntimeError:  # the loop closed meanwhile
                        pass

        gone: asyncio.Future[bytes] | None = None
        item: asyncio.Future[bytes | None] | None = None
        try:
            await self._write(writer, resp, True)
            threading.Thread(target=pump, name="http-stream", daemon=True).start()
            feed = resp.feed  # without it, EOF (or more) from the client: it is done
            gone = asyncio.ensure_future(reader.read(1 if feed is None else 1 << 16))
            while True:
                if item is None or item.done():
                    item = asyncio.ensure_future(q.get())
                await asyncio.wait({item, gone}, return_when=asyncio.FIRST_COMPLETED)
                if gone.done():
                    data = gone.result()
                    if feed is None or not data or not feed(data):
                        return
                    gone = asyncio.ensure_future(reader.read(1 << 16))
                    continue
                chunk = item.result()
                if chunk is None:
                    break
                if chunk:
                    writer.write(chunk if feed else b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    if writer.transport.get_write_buffer_size():
                        timer = self._deadline()
                        try:
                            await writer.drain()
                        finally:
                            timer.cancel()
            if feed is None:
                writer.write(b"0\r\n\r\n")
        finally:
            done.set()
            for pending in (gone, item):
                if pending is not None:
                    pending.cancel()
            _close_stream(stream)


def forwarded_for(headers: dict[str, str]) -> str | None:
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


# ----------------------------------------------------------------------------- the server


class HttpServer:
    """The front's lifecycle and state; an application subclasses it (module docstring).
    ``serve_forever()`` runs it on the calling thread until ``shutdown()``;
    ``server_close()`` releases the socket and the handler threads. The socket is bound in
    the constructor (``server_port`` is known at once; ``OSError`` if the address is
    taken)."""

    server_name = "gpum"
    """The ``Server`` header."""
    methods: tuple[str, ...] = ("GET", "POST")
    """Methods read and handed to ``respond``; any other is a 501."""

    def __init__(self, addr: tuple[str, int], limits: HttpLimits | None = None) -> None:
        self.limits = limits or HttpLimits()
        self.limits.validate()
        self.read_timeout_s = self.limits.read_timeout_s
        """Read at every use, so a test may lower it on a running server."""
        self.request_queue_size = self.limits.backlog
        self.max_connections = fd_limited(self.limits.max_connections)
        self._trusted = frozenset(source_of(a) for a in self.limits.trusted_proxies)
        self.socket = bind(addr, self.limits.backlog)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self.server_port = self.server_address[1]
        self._workers = _Workers(self.limits.handler_threads)
        self.stats: Counter[str] = Counter()
        """Transport counters: ``refused_source_cap``, ``refused_global_cap`` (closed at
        once), ``evicted`` (idle, closed at the global cap), ``timeouts`` (a deadline
        passed, idle keep-alive included), ``bad_requests`` (malformed HTTP),
        ``handler_errors`` (answered 500)."""
        self._state = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._serving = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._front: _Front | None = None

    # ------------------------------------------------------------------ the application

    def respond(self, req: Request) -> Response:
        """The answer to a complete request (on a handler thread); never raises."""
        raise NotImplementedError

    def check_body(self, req: Request) -> Response | None:
        """An answer given before any byte of the body is read, or None to read it."""
        return standard_body_check(req, None, 1 << 20, self.error_response)

    def error_response(self, status: int, code: str, message: str,
                       close: bool = False) -> Response:
        """The application's error answer (transport errors use it too)."""
        body = json.dumps({"error": code, "message": message}).encode()
        return Response(status, body, "application/json", [], close)

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


def standard_body_check(req: Request, post_routes: set[str] | None, max_body: int,
                        error: Callable[..., Response],
                        on_too_large: Callable[[], None] = lambda: None) -> Response | None:
    """The usual answers before a body is read: a GET with a malformed or too large
    Content-Length (400/413); for a POST (or another method with a body): 404 for a path
    not in ``post_routes`` (None: any path), 411 without Content-Length (or chunked), 413
    over ``max_body`` (``on_too_large`` is called first)."""
    h = req.headers
    if req.method == "GET":
        length_s = h.get("content-length")
        if length_s is not None and not length_s.isdigit():
            return error(400, "bad_request", "malformed Content-Length", close=True)
        if length_s is not None and int(length_s) > max_body:
            return error(413, "body_too_large", "a GET carries no body", close=True)
        return None
    if post_routes is not None and req.path not in post_routes:
        return error(404, "not_found", f"no route POST {req.path}", close=True)
    if h.get("transfer-encoding"):
        return error(411, "length_required", "send the body with a Content-Length, not "
                     "chunked", close=True)
    length_s = h.get("content-length")
    if length_s is None or not length_s.isdigit():
        return error(411, "length_required", "a Content-Length header is required",
                     close=True)
    length = int(length_s)
    if length > max_body:
        on_too_large()
        return error(413, "body_too_large", f"the body is {length} bytes; the limit is "
                     f"{max_body}; send smaller batches", close=True)
    return None


def serve_in_thread(server: HttpServer, poll_interval: float = 0.1,
                    name: str = "gpum-http") -> threading.Thread:
    """Start ``server.serve_forever`` on a daemon thread and return once it accepts
    connections (stop with ``server.shutdown()``)."""
    t = threading.Thread(target=server.serve_forever, args=(poll_interval,), name=name,
                         daemon=True)
    t.start()
    if not server.wait_serving(30):
        raise RuntimeError("the HTTP server did not start")
    return t
