"""Outbound HTTP with a total wall-clock deadline and a response size cap (I/O).

Guarantee. ``bounded_request`` returns or raises within ``deadline`` seconds of its call
(plus scheduling noise), whatever the other side does: refuse, accept and never answer,
trickle its status line, headers or body one byte at a time, stop reading our request, or
send an endless body. Every socket operation of the request (pool wait, connect, TLS,
each send and each receive) runs with the time left to the request's deadline, so no
sequence of individually "timely" reads can stretch it. An answer larger than ``max_bytes``
is cut off as ``ResponseTooLarge`` after at most ``max_bytes`` were read.

Failure contract: every failure is a ``NetError`` (``Unreachable``, ``DeadlineExceeded``,
``ResponseTooLarge``), never an ``httpx`` exception, so a caller handles one type. A
``BoundedClient`` is thread-safe and keeps connections alive between calls; one slow
destination holds only the thread that called it, for at most its deadline (callers that
talk to several destinations give each its own thread, so one never waits on another).
"""

from __future__ import annotations

import json as jsonlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx

__all__ = [
    "BoundedClient",
    "BoundedResponse",
    "DeadlineExceeded",
    "NetError",
    "ResponseTooLarge",
    "Unreachable",
]

# The largest answer a caller takes unless it says otherwise.
DEFAULT_MAX_BYTES = 1 << 20


class NetError(Exception):
    """An outbound call failed; the message names the destination and why."""


class Unreachable(NetError):
    """The destination refused, reset, or is not a valid HTTP server."""


class DeadlineExceeded(NetError):
    """The call did not complete within its total deadline."""


class ResponseTooLarge(NetError):
    """The answer was larger than the caller's cap."""


@dataclass(frozen=True)
class BoundedResponse:
    """A complete answer, read within the deadline and the size cap."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def json_object(self) -> dict[str, Any] | None:
        """The body as a JSON object, or None when it is empty, not JSON or not an object."""
        if not self.body:
            return None
        try:
            obj = jsonlib.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return None
        return obj if isinstance(obj, dict) else None


# The absolute deadline (monotonic seconds) of the request running on this thread.
_local = threading.local()


def _left(timeout: float | None) -> float:
    """The socket timeout to use now: the smaller of ``timeout`` and the time left."""
    end = getattr(_local, "deadline", None)
    if end is None:
        return timeout if timeout is not None else 30.0
    left = end - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("total deadline exceeded")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # One send per call with the time left, so a peer that stops reading cannot hold
        # a large write open past the deadline.
        view = memoryview(buffer)
        while view:
            chunk = bytes(view[:65536])
            self._inner.write(chunk, _left(timeout))
            view = view[len(chunk):]

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                     _left(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_tcp(host, port, _left(timeout),
                                                       local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None
                            ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_unix_socket(path, _left(timeout),
                                                               socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(min(seconds, _left(seconds)))


def deadline_transport(max_connections: int = 64) -> httpx.HTTPTransport:
    """An httpx transport whose every socket operation honours the calling thread's
    deadline (set by ``BoundedClient``); without one it behaves like the default."""
    transport = httpx.HTTPTransport(
        limits=httpx.Limits(max_connections=max_connections,
                            max_keepalive_connections=min(max_connections, 32)))
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=max_connections,
        max_keepalive_connections=min(max_connections, 32),
        keepalive_expiry=5.0,
        network_backend=_DeadlineBackend(),
    )
    return transport


class BoundedClient:
    """Thread-safe HTTP client whose calls each have a total deadline and a size cap.

    ``transport`` is injectable for unit tests (``httpx.MockTransport``); the default is
    ``deadline_transport()``.
    """

    def __init__(self, deadline: float = 5.0, max_bytes: int = DEFAULT_MAX_BYTES,
                 transport: httpx.BaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if deadline <= 0:
            raise ValueError("deadline must be positive")
        self.deadline = deadline
        self.max_bytes = max_bytes
        self.clock = clock
        self._http = httpx.Client(transport=transport or deadline_transport(),
                                  follow_redirects=False)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> BoundedClient:  # noqa: PYI034 - py3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, url: str, *, json: Any = None,
                content: bytes | None = None, headers: dict[str, str] | None = None,
                deadline: float | None = None, max_bytes: int | None = None
                ) -> BoundedResponse:
        """One complete call within ``deadline`` seconds (default: the client's) and
        ``max_bytes`` of answer; raises ``NetError`` on any failure."""
        total = self.deadline if deadline is None else deadline
        cap = self.max_bytes if max_bytes is None else max_bytes
        if total <= 0:
            raise DeadlineExceeded(f"{method} {url}: no time left")
        start = time.monotonic()
        previous = getattr(_local, "deadline", None)
        end = start + total
        _local.deadline = end if previous is None else min(end, previous)
        timeout = httpx.Timeout(total)
        # Raw bytes are capped, so no compressed answer may expand past the cap.
        sent_headers = {"accept-encoding": "identity", **(headers or {})}
        try:
            with self._http.stream(method, url, json=json, content=content,
                                   headers=sent_headers, timeout=timeout) as r:
                declared = r.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > cap:
                    raise ResponseTooLarge(
                        f"{method} {url}: answer of {declared} bytes is over the "
                        f"{cap}-byte limit")
                encoding = r.headers.get("content-encoding", "identity").lower()
                if encoding != "identity":
                    raise Unreachable(f"{method} {url}: answered with content-encoding "
                                      f"{encoding!r}; only identity is accepted")
                body = bytearray()
                for chunk in r.iter_bytes():
                    body += chunk
                    if len(body) > cap:
                        raise ResponseTooLarge(
                            f"{method} {url}: answer over the {cap}-byte limit")
                return BoundedResponse(r.status_code, bytes(body),
                                       {k.lower(): v for k, v in r.headers.items()})
        except httpx.TimeoutException as e:
            raise DeadlineExceeded(
                f"{method} {url}: no complete answer within {total:g} s ({e})") from None
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as e:
            if time.monotonic() >= end:
                raise DeadlineExceeded(
                    f"{method} {url}: no complete answer within {total:g} s") from None
            raise Unreachable(f"{method} {url}: {e or type(e).__name__}") from None
        finally:
            _local.deadline = previous

    def get(self, url: str, **kw: Any) -> BoundedResponse:
        return self.request("GET", url, **kw)

    def post(self, url: str, **kw: Any) -> BoundedResponse:
        return self.request("POST", url, **kw)
