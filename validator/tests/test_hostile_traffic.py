"""Hostile traffic against the real HTTP server: bursts, idle connections, huge
numbers; honest requests still get their answers. The full attack suite, with the
per-source limits, is ``test_attack_suite.py``."""

from __future__ import annotations

import select
import socket
import threading
import time

import httpx
import pytest
from gpu_market.httpfront import LISTEN_BACKLOG, serve_in_thread
from gpum_validator.intake import Intake
from gpum_validator.server import ValidatorHTTPServer
from gpum_validator.store_sqlite import SQLiteStore
from gpum_validator.transport import HttpLimits
from test_hardening import Node
from vtestkit import cfg, chain_of, signed_json


@pytest.fixture
def node(tmp_path, chain, clock):
    n = Node(tmp_path, chain, clock)
    yield n
    n.close()


def test_a_json_number_of_thousands_of_digits_is_a_400_not_a_dropped_connection(node):
    body = b'{"proof": ' + b"9" * 5000 + b"}"
    r = node.http.post("/v1/proofs", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "bad_json"
    assert "digits" in r.json()["message"]
    assert node.post(chain_of(1)[0]).status_code == 200  # and the node goes on


def test_an_idle_connection_is_closed_and_honest_requests_are_answered(node):
    node.server.read_timeout_s = 0.5
    idle = []
    for _ in range(20):  # slowloris: half a request line, then nothing
        s = socket.create_connection(("127.0.0.1", node.server.server_port))
        s.sendall(b"POST /v1/proofs HTTP/1.1\r\nHost: x\r\n")
        idle.append(s)
    try:
        assert node.post(chain_of(1)[0]).status_code == 200
        for s in idle:
            s.settimeout(5)
            assert s.recv(1024) == b""  # closed by the server after its read timeout
    finally:
        for s in idle:
            s.close()


def test_a_burst_of_connections_is_queued_not_reset(node):
    # 300 connections at once (non-blocking connects from one thread, so they really arrive
    # together; from 3 source addresses, under the per-source cap of 256), then a request on
    # each: every one is answered.
    assert node.server.request_queue_size == LISTEN_BACKLOG >= 300
    addr = ("127.0.0.1", node.server.server_port)
    socks = []
    try:
        for i in range(300):
            s = socket.socket()
            s.bind((f"127.0.0.{2 + i % 3}", 0))
            s.setblocking(False)
            s.connect_ex(addr)
            socks.append(s)
        _, writable, _ = select.select([], socks, [], 30)
        assert len(writable) == 300  # all connected, none reset
        for s in socks:
            s.setblocking(True)
            s.settimeout(30)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        codes = []
        for s in socks:
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            codes.append(int(data.split(b" ", 2)[1]) if data else -1)
        # every connection answered (503 only if the chain probe fails)
        assert set(codes) <= {200, 503}, sorted(set(codes))
    finally:
        for s in socks:
            s.close()


def test_idle_connections_hold_no_handler_thread(tmp_path, chain, clock):
    # The event loop reads requests; handler threads only run complete ones. With 2 handler
    # threads, 6 idle connections neither add threads nor delay a request.
    store = SQLiteStore(tmp_path / "v.sqlite")
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    server = ValidatorHTTPServer(("127.0.0.1", 0), intake, store, lambda: True,
                                 limits=HttpLimits(handler_threads=2, max_in_flight_per_source=1))
    serve_in_thread(server)
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", server.server_port)) for _ in range(6)]
    try:
        for s in idle:
            s.sendall(b"GET /health HTTP/1.1\r\n")
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=10) as c:
            t0 = time.monotonic()
            assert c.get("/health").status_code == 200
            assert c.post("/v1/proofs", json=signed_json(chain_of(1)[0])).status_code == 200
            assert time.monotonic() - t0 < 5  # no read timeout was waited out
        assert threading.active_count() - before <= 2
    finally:
        for s in idle:
            s.close()
        server.shutdown()
        server.server_close()
        store.close()


@pytest.mark.parametrize("args, fragment", [
    (["--trusted-proxy", "my-proxy"], "trusted proxy 'my-proxy' is not an IP address"),
    (["--max-connections-per-source", "0"], "max-connections-per-source must be at least 1"),
    (["--max-in-flight-per-source", "300"], "must be below the handler threads"),
    (["--job-reads-per-source", "0"], "--job-reads-per-source must be more than 0"),
    (["--job-reads-per-source", "nan"], "--job-reads-per-source must be more than 0"),
])
def test_run_refuses_bad_http_limits(tmp_path, args, fragment):
    from click.testing import CliRunner
    from gpum_validator.cli import main

    r = CliRunner().invoke(main, ["run", "--url", "http://127.0.0.1:1", "--market",
                                  "11111111111111111111111111111111", "--keypair",
                                  str(tmp_path / "k.json"), *args])
    assert r.exit_code == 2 and fragment in r.output, r.output
