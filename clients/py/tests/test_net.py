"""gpu_market.net: every call ends within its total deadline whatever the server does.

Each hostile server is a real TCP server on 127.0.0.1 that a test thread drives; the
deadline is checked by wall time with a generous margin for scheduling (no timing assert
on performance: the property is "bounded", the margin is 2x the deadline or more).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest
from gpu_market.net import (
    BoundedClient,
    DeadlineExceeded,
    ResponseTooLarge,
    Unreachable,
)

DEADLINE = 1.0


@contextmanager
def tcp_server(handle: Callable[[socket.socket], None]) -> Iterator[str]:
    """A server on 127.0.0.1 that runs ``handle`` for each connection in its own thread."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    stop = threading.Event()
    conns: list[socket.socket] = []

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except (TimeoutError, OSError):
                continue
            conns.append(c)
            threading.Thread(target=_guarded, args=(handle, c, stop), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(2)
        for c in conns:
            c.close()
        srv.close()


def _guarded(handle: Callable[[socket.socket], None], c: socket.socket,
             stop: threading.Event) -> None:
    c.settimeout(0.2)
    try:
        handle(c)
    except OSError:
        pass


def _read_request(c: socket.socket) -> None:
    data = b""
    end = time.monotonic() + 5
    while b"\r\n\r\n" not in data and time.monotonic() < end:
        try:
            data += c.recv(65536)
        except TimeoutError:
            continue


def _trickle(c: socket.socket, payload: bytes, every: float = 0.3) -> None:
    for b in payload:
        c.sendall(bytes([b]))
        time.sleep(every)


def timed(fn: Callable[[], object]) -> tuple[float, BaseException | None]:
    start = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test inspects it
        return time.monotonic() - start, e
    return time.monotonic() - start, None


def test_complete_answer_is_returned() -> None:
    def ok(c: socket.socket) -> None:
        _read_request(c)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: close\r\n\r\n"
                  b'{"ok": true}')

    with tcp_server(ok) as url, BoundedClient(deadline=DEADLINE) as http:
        r = http.post(url + "/x", json={"a": 1})
    assert r.status == 200
    assert r.body == b'{"ok": true}'


def test_json_object_of_a_valid_answer() -> None:
    def ok(c: socket.socket) -> None:
        _read_request(c)
        body = b'{"total": 5}'
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    with tcp_server(ok) as url, BoundedClient(deadline=DEADLINE) as http:
        assert http.get(url).json_object() == {"total": 5}


@pytest.mark.parametrize("phase", ["status_line", "headers", "body"])
def test_trickled_answer_ends_at_the_deadline(phase: str) -> None:
    """One byte every 0.3 s keeps every single read in time; the total deadline still
    ends the call."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"

    def trickler(c: socket.socket) -> None:
        _read_request(c)
        if phase == "status_line":
            _trickle(c, head)
        elif phase == "headers":
            c.sendall(head[:17])
            _trickle(c, head[17:])
        else:
            c.sendall(head)
            _trickle(c, b"x" * 1000)

    with tcp_server(trickler) as url, BoundedClient(deadline=DEADLINE) as http:
        took, err = timed(lambda: http.get(url))
    assert isinstance(err, DeadlineExceeded), err
    assert took < DEADLINE * 2.5, took


def test_silent_server_ends_at_the_deadline() -> None:
    def silent(c: socket.socket) -> None:
        time.sleep(DEADLINE * 4)

    with tcp_server(silent) as url, BoundedClient(deadline=DEADLINE) as http:
        took, err = timed(lambda: http.post(url, json={"x": 1}))
    assert isinstance(err, DeadlineExceeded), err
    assert took < DEADLINE * 2.5, took


def test_server_that_never_reads_our_body_ends_at_the_deadline() -> None:
    def deaf(c: socket.socket) -> None:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        time.sleep(DEADLINE * 4)

    big = b"y" * (32 << 20)
    with tcp_server(deaf) as url, BoundedClient(deadline=DEADLINE) as http:
        took, err = timed(lambda: http.post(url, content=big))
    assert isinstance(err, DeadlineExceeded), err
    assert took < DEADLINE * 2.5, took


def test_declared_oversized_answer_is_refused_before_reading() -> None:
    def big(c: socket.socket) -> None:
        _read_request(c)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n")
        time.sleep(1)

    with tcp_server(big) as url, BoundedClient(deadline=DEADLINE, max_bytes=1000) as http, \
            pytest.raises(ResponseTooLarge, match="1000-byte limit"):
        http.get(url)


def test_endless_chunked_answer_is_cut_at_the_cap() -> None:
    def endless(c: socket.socket) -> None:
        _read_request(c)
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"400\r\n" + b"z" * 0x400 + b"\r\n"
        for _ in range(10_000):
            c.sendall(chunk)

    with tcp_server(endless) as url, BoundedClient(deadline=5.0, max_bytes=50_000) as http, \
            pytest.raises(ResponseTooLarge):
        http.get(url)


def test_refused_connection_is_unreachable() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with BoundedClient(deadline=DEADLINE) as http, \
            pytest.raises(Unreachable, match=f"127.0.0.1:{port}"):
        http.get(f"http://127.0.0.1:{port}/health")


def test_garbage_answer_is_unreachable() -> None:
    def garbage(c: socket.socket) -> None:
        _read_request(c)
        c.sendall(b"this is not http\r\n\r\n")

    with tcp_server(garbage) as url, BoundedClient(deadline=DEADLINE) as http, \
            pytest.raises(Unreachable):
        http.get(url)


def test_compressed_answer_is_refused() -> None:
    def gz(c: socket.socket) -> None:
        _read_request(c)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc")

    with tcp_server(gz) as url, BoundedClient(deadline=DEADLINE) as http, \
            pytest.raises(Unreachable, match="only identity"):
        http.get(url)


def test_bad_url_is_unreachable_not_an_httpx_error() -> None:
    with BoundedClient(deadline=DEADLINE) as http, pytest.raises(Unreachable):
        http.get("ftp://nowhere/")


def test_one_slow_destination_does_not_hold_a_call_to_another() -> None:
    """Two threads share one client: the trickler holds only its own caller."""
    def trickler(c: socket.socket) -> None:
        _read_request(c)
        _trickle(c, b"HTTP/1.1 200 OK\r\n\r\n", every=0.5)

    def fast(c: socket.socket) -> None:
        _read_request(c)
        c.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")

    with tcp_server(trickler) as slow_url, tcp_server(fast) as fast_url, \
            BoundedClient(deadline=3.0) as http:
        t = threading.Thread(target=lambda: timed(lambda: http.get(slow_url)), daemon=True)
        t.start()
        time.sleep(0.2)
        took, err = timed(lambda: http.get(fast_url))
        t.join(10)
    assert err is None
    assert took < 1.5, took


def test_mock_transport_is_injectable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"seen": request.url.path})

    with BoundedClient(deadline=DEADLINE, transport=httpx.MockTransport(handler)) as http:
        assert http.get("http://validator.test/v1/x").json_object() == {"seen": "/v1/x"}


def test_deadline_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        BoundedClient(deadline=0)
