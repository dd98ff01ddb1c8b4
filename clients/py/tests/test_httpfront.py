"""gpu_market.httpfront: the shared front's application hooks and streamed answers.

The validator's attack suite (validator/tests/test_attack_suite.py) covers the transport
limits through the validator's server; these tests cover what an application adds on top:
its own error bodies and early answers, and streamed answers (the worker API's log
follow), against a real server on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from gpu_market import httpfront
from gpu_market.httpfront import HttpLimits, HttpServer, LimitsError, Request, Response


class Source:
    """A stream that yields what ``put`` gives it, until closed."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.items: list[bytes] = []
        self.closed = threading.Event()

    def put(self, b: bytes) -> None:
        with self.cond:
            self.items.append(b)
            self.cond.notify_all()

    def __iter__(self) -> Iterator[bytes]:
        while True:
            with self.cond:
                while not self.items and not self.closed.is_set():
                    self.cond.wait(0.05)
                if self.closed.is_set():
                    return
                item = self.items.pop(0)
            yield item

    def close(self) -> None:
        self.closed.set()


class App(HttpServer):
    server_name = "test-app"

    def __init__(self) -> None:
        self.sources: list[Source] = []
        self.slow = threading.Event()
        super().__init__(("127.0.0.1", 0), HttpLimits(handler_threads=4,
                                                      max_in_flight_per_source=2,
                                                      read_timeout_s=2.0))

    def error_response(self, status, code, message, close=False) -> Response:
        return Response(status, json.dumps({"oops": message}).encode(), "application/json",
                        [], close)

    def respond(self, req: Request) -> Response:
        if req.path == "/stream" or req.path == "/slow-stream":
            src = Source()
            self.sources.append(src)
            if req.path == "/slow-stream":
                self.slow.wait(5)
            src.put(b"hello\n")
            return Response(200, b"", "text/plain", stream=src)
        if req.path == "/echo":  # a protocol switch: what the client sends comes back upper
            src = Source()
            self.sources.append(src)

            def feed(data: bytes) -> bool:
                src.put(data.upper())
                return data != b"stop"

            return Response(101, b"", "", [("Upgrade", "echo")], stream=src, feed=feed)
        return Response(200, b"ok", "text/plain")


@pytest.fixture
def app() -> Iterator[App]:
    a = App()
    httpfront.serve_in_thread(a)
    yield a
    a.shutdown()
    a.server_close()


def url(app: App, path: str) -> str:
    return f"http://127.0.0.1:{app.server_port}{path}"


def test_the_public_names() -> None:
    assert sorted(httpfront.__all__) == sorted([
        "HttpLimits", "HttpServer", "LimitsError", "Request", "Response", "bind",
        "encode_response", "fd_limited", "forwarded_for", "raise_fd_limit",
        "serve_in_thread", "source_of", "standard_body_check"])


def test_limits_are_checked_with_a_named_error() -> None:
    with pytest.raises(LimitsError, match="read-timeout"):
        HttpLimits(read_timeout_s=0).validate()
    with pytest.raises(LimitsError, match="max-in-flight-per-source"):
        HttpLimits(handler_threads=4, max_in_flight_per_source=4).validate()


def test_transport_errors_use_the_applications_error_body(app: App) -> None:
    r = httpx.request("PUT", url(app, "/x"))
    assert r.status_code == 501 and "PUT" in r.json()["oops"]
    assert r.headers["server"] == "test-app"
    r = httpx.post(url(app, "/x"), content=b"x" * (2 << 20))
    assert r.status_code == 413 and "limit" in r.json()["oops"]


def test_a_stream_is_sent_chunked_until_its_source_ends(app: App) -> None:
    with httpx.stream("GET", url(app, "/stream"), timeout=5) as r:
        assert r.headers["transfer-encoding"] == "chunked"
        chunks = r.iter_raw()
        assert next(chunks) == b"hello\n"
        app.sources[0].put(b"more\n")
        assert next(chunks) == b"more\n"
        app.sources[0].close()
        assert list(chunks) == []


def _wait(flag: threading.Event, what: str) -> None:
    assert flag.wait(5), what


def test_a_stream_ends_and_is_closed_when_its_client_goes_away(app: App) -> None:
    with socket.create_connection(("127.0.0.1", app.server_port), timeout=5) as s:
        s.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
    _wait(app.sources[0].closed, "the source closed after the client left")
    assert httpx.get(url(app, "/")).text == "ok"  # and the server goes on


def test_an_answer_whose_client_left_while_it_was_made_is_closed(app: App) -> None:
    with socket.create_connection(("127.0.0.1", app.server_port), timeout=5) as s:
        s.sendall(b"GET /slow-stream HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 5
        while not app.sources:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    app.slow.set()  # the answer is made after its client left
    _wait(app.sources[0].closed, "the unsent stream closed")


def test_a_protocol_switch_carries_bytes_both_ways_until_either_ends(app: App) -> None:
    with socket.create_connection(("127.0.0.1", app.server_port), timeout=5) as s:
        s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                  b"Upgrade: echo\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        head, _, rest = head.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101")
        assert b"Connection: Upgrade" in head and b"Upgrade: echo" in head
        assert b"Content-Length" not in head and b"Transfer-Encoding" not in head
        time.sleep(2.5)  # longer than read_timeout_s: a quiet client is not dropped
        s.sendall(b"abc")
        got = rest
        while len(got) < 3:
            got += s.recv(4096)
        assert got == b"ABC"  # unframed
        s.sendall(b"stop")  # feed says the end: the connection closes, the source too
        _wait(app.sources[0].closed, "the source closed when feed ended it")
    with socket.create_connection(("127.0.0.1", app.server_port), timeout=5) as s:
        s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 101")
        app.sources[1].close()  # the application ends it: the client sees EOF, no chunk end
        data = b""
        while chunk := s.recv(4096):
            data += chunk
        assert data == b""
