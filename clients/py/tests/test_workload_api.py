"""gpu_market.workload_api against a real HTTP server on 127.0.0.1 that checks every request
with verify_request and answers as the worker API contract says."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from gpu_market import workload_api
from gpu_market.workload import (
    PortSpec,
    RequestAuthError,
    WorkloadSpec,
    WorkloadSpecError,
    spec_from_json,
    spec_hash,
    verify_request,
)
from gpu_market.workload_api import (
    WorkerApiError,
    deliver_workload,
    normalize_endpoint,
    stream_logs,
    workload_status,
)
from solders.keypair import Keypair
from solders.pubkey import Pubkey

USER = Keypair.from_seed(bytes([31] * 32))
STRANGER = Keypair.from_seed(bytes([32] * 32))
JOB = bytes([5] * 32)
SPEC = WorkloadSpec(image="docker.io/library/python:3.12", args=("-c", "print(1)"),
                    ports=(PortSpec(8888),))  # fmt: skip
LOG_CHUNKS = [b"epoch 1\n", b"epoch 2\n", b"done\n"]


class FakeWorker(ThreadingHTTPServer):
    """The worker API of one provider that knows one job (``JOB`` of ``USER`` with the
    on-chain workload hash of ``SPEC``)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.chain_hash = spec_hash(SPEC)
        self.clock_offset = 0
        self.ended = False
        self.forced: list[tuple[int, bytes, dict[str, str]]] = []  # answered first, in order
        self.requests: list[tuple[str, str]] = []
        self.delivered: WorkloadSpec | None = None
        self.log_gates = [threading.Event() for _ in LOG_CHUNKS]
        self.log_sent = 0
        self.log_query: dict[str, list[str]] = {}

    @property
    def endpoint(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeWorker

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)

    def route(self, method: str) -> None:
        srv = self.server
        url = urlsplit(self.path)
        srv.requests.append((method, url.path))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if srv.forced:
            self.answer(*srv.forced.pop(0))
            return
        parts = url.path.split("/")  # "", "v1", "jobs", job, "workload"|"logs"
        if len(parts) != 5 or parts[:3] != ["", "v1", "jobs"]:
            self.answer(404, {"error": "no such route"})
            return
        try:
            job = bytes(Pubkey.from_string(parts[3]))
        except ValueError:
            self.answer(400, {"error": "bad job address"})
            return
        if job != JOB:
            self.answer(404, {"error": f"job {parts[3]} is not on this provider"})
            return
        action = {("POST", "workload"): "deliver", ("GET", "workload"): "status",
                  ("GET", "logs"): "logs"}[(method, parts[4])]  # fmt: skip
        workload_hash = srv.chain_hash
        spec = None
        if action == "deliver":
            try:
                spec = spec_from_json(body)
            except WorkloadSpecError as e:
                self.answer(400, {"error": str(e)})
                return
            workload_hash = spec_hash(spec)
        try:
            verify_request(self.headers, action, job, workload_hash,
                           expected_signer=bytes(USER.pubkey()),
                           now=int(time.time()) + srv.clock_offset)  # fmt: skip
        except RequestAuthError as e:
            self.answer(e.status, {"error": str(e)})
            return
        if srv.ended:
            self.answer(410, {"error": "job ended"})
        elif action == "deliver" and workload_hash != srv.chain_hash:
            self.answer(409, {"error": "workload hash differs from the job's"})
        elif action == "deliver":
            srv.delivered = spec
            self.answer(200, self.state("pending"))
        elif action == "status":
            self.answer(200, self.state("running") | {
                "exit_code": None, "error": None, "runtime": "podman",
                "ports": [{"port": 8888, "protocol": "tcp", "host": "203.0.113.7",
                           "host_port": 40001}],
            })  # fmt: skip
        else:
            self.logs(parse_qs(url.query))

    def state(self, state: str) -> dict[str, Any]:
        return {"job": str(Pubkey.from_bytes(JOB)), "workload_hash": self.server.chain_hash.hex(),
                "state": state}  # fmt: skip

    def logs(self, query: dict[str, list[str]]) -> None:
        srv = self.server
        srv.log_query = query
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        follow = query.get("follow") == ["1"]
        for i, chunk in enumerate(LOG_CHUNKS):
            if follow and i > 0 and not srv.log_gates[i].wait(10):
                break  # the client stopped reading
            srv.log_sent = i + 1
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:
        self.route("GET")

    def do_POST(self) -> None:
        self.route("POST")


@pytest.fixture
def worker() -> Iterator[FakeWorker]:
    srv = FakeWorker()
    thread = threading.Thread(target=srv.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        for gate in srv.log_gates:
            gate.set()
        srv.shutdown()
        srv.server_close()
        thread.join(5)


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    calls: list[float] = []
    monkeypatch.setattr(workload_api, "_sleep", calls.append)
    return calls


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- endpoints


def test_public_api_is_pinned():
    assert sorted(workload_api.__all__) == [
        "WorkerApiError", "deliver_workload", "normalize_endpoint", "stream_logs",
        "workload_status",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        ("127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("worker.example.com:443//", "http://worker.example.com:443"),
        (" https://worker.example.com/gpum/ ", "https://worker.example.com/gpum"),
        ("HTTPS://[::1]:9000", "HTTPS://[::1]:9000"),
    ],
)
def test_normalize_endpoint(given, expected):
    assert normalize_endpoint(given) == expected


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("ftp://host:21", "uses the scheme 'ftp'; only http:// and https:// are supported"),
        ("file:///etc/passwd", "uses the scheme 'file'"),
        ("", "the provider has no worker endpoint"),
        ("http://", "is not http\\[s\\]://host\\[:port\\]\\[/path\\] or host:port"),
        ("http://host:8080?x=1", "is not http"),
        ("http://ho st:8080", "is not http"),
        ("http://host:99999", "has an invalid port"),
    ],
)
def test_normalize_endpoint_refuses(given, message):
    with pytest.raises(WorkerApiError, match=message) as err:
        normalize_endpoint(given)
    assert err.value.status is None


# ----------------------------------------------------------------------------- deliver


def test_deliver_success(worker):
    endpoint = worker.endpoint.removeprefix("http://") + "/"  # host:port/ works too
    answer = deliver_workload(endpoint, JOB, SPEC, bytes(USER))
    assert answer == {"job": str(Pubkey.from_bytes(JOB)), "workload_hash": spec_hash(SPEC).hex(),
                      "state": "pending"}  # fmt: skip
    assert worker.delivered == SPEC
    assert worker.requests == [("POST", f"/v1/jobs/{Pubkey.from_bytes(JOB)}/workload")]
    # A Pubkey job and a solders Keypair signer work too.
    assert deliver_workload(worker.endpoint, Pubkey(JOB), SPEC, USER)["state"] == "pending"


def test_deliver_invalid_spec_fails_before_any_request(worker):
    with pytest.raises(WorkloadSpecError, match="image must not be empty"):
        deliver_workload(worker.endpoint, JOB, WorkloadSpec(image=""), bytes(USER))
    assert worker.requests == []


@pytest.mark.parametrize(
    ("setup", "status", "message"),
    [
        ("stranger", 403, "HTTP 403: .* is not this job's user .*sign with the wallet"),
        ("clock", 401, "HTTP 401: the request timestamp is -(999|1000|1001) s from the worker"),
        ("unknown_job", 404, "HTTP 404: job .* is not on this provider .*does not know the job"),
        ("other_spec", 409, "HTTP 409: workload hash differs from the job's .*deliver the exact"),
        ("ended", 410, "HTTP 410: job ended \\(the job has ended\\)"),
        ("bad_spec", 400, "HTTP 400: image is too plain \\(the worker rejected the spec\\)"),
        ("not_json", 500, "HTTP 500: Internal Server Error: boom$"),
    ],
)
def test_deliver_errors(worker, sleeps, setup, status, message):
    signer, job, spec = USER, JOB, SPEC
    if setup == "stranger":
        signer = STRANGER
    elif setup == "clock":
        worker.clock_offset = 1000
    elif setup == "unknown_job":
        job = bytes([6] * 32)
    elif setup == "other_spec":
        spec = WorkloadSpec(image="docker.io/library/python:3.13")
    elif setup == "ended":
        worker.ended = True
    elif setup == "bad_spec":
        worker.forced.append((400, b'{"error": "image is too plain"}', {}))
    else:
        worker.forced.append((500, b"Internal Server Error: boom", {}))
    with pytest.raises(WorkerApiError, match=message) as err:
        deliver_workload(worker.endpoint, job, spec, bytes(signer))
    assert err.value.status == status and err.value.endpoint == worker.endpoint
    assert f"the provider's worker at {worker.endpoint} refused to accept the workload" in str(
        err.value
    )
    assert len(worker.requests) == 1 and sleeps == []  # no retry


def test_deliver_retries_on_503_then_succeeds(worker, sleeps):
    busy = (503, b'{"error": "pulling another image"}', {"Retry-After": "0"})
    worker.forced += [busy, (503, b'{"error": "still busy"}', {})]
    answer = deliver_workload(worker.endpoint, JOB, SPEC, bytes(USER), retries=3)
    assert answer["state"] == "pending" and worker.delivered == SPEC
    assert len(worker.requests) == 3
    assert sleeps == [0.0, 1.0]  # Retry-After, then the backoff of the second attempt


def test_deliver_retries_a_job_the_worker_has_not_seen_yet(worker, sleeps):
    # The worker answers 404 with Retry-After for a job created moments ago (not in its last
    # poll); a 404 without Retry-After is final.
    worker.forced += [(404, b'{"error": "not a live job of this provider"}', {"Retry-After": "1"})]
    answer = deliver_workload(worker.endpoint, JOB, SPEC, bytes(USER), retries=3)
    assert answer["state"] == "pending" and len(worker.requests) == 2 and sleeps == [1.0]
    worker.forced += [(404, b'{"error": "not a live job of this provider"}', {})]
    with pytest.raises(WorkerApiError) as err:
        deliver_workload(worker.endpoint, JOB, SPEC, bytes(USER), retries=3)
    assert err.value.status == 404 and len(worker.requests) == 3


def test_deliver_gives_up_after_retries(worker, sleeps):
    worker.forced += [(503, b'{"error": "busy"}', {"Retry-After": "120"})] * 3
    with pytest.raises(WorkerApiError, match="HTTP 503: busy \\(the worker is busy") as err:
        deliver_workload(worker.endpoint, JOB, SPEC, bytes(USER), retries=2)
    assert err.value.status == 503 and err.value.server_error == "busy"
    assert len(worker.requests) == 3 and sleeps == [30.0, 30.0]  # Retry-After capped


def test_deliver_connection_refused(sleeps):
    endpoint = f"127.0.0.1:{free_port()}"
    with pytest.raises(WorkerApiError) as err:
        deliver_workload(endpoint, JOB, SPEC, bytes(USER), retries=2, timeout=2.0)
    assert err.value.status is None
    assert str(err.value).startswith(f"cannot reach the provider's worker at http://{endpoint}: ")
    assert sleeps == [0.5, 1.0]


def test_deliver_retries_after_connection_error(worker, sleeps, monkeypatch):
    # The first attempt goes to a closed port, the retry to the worker.
    dead = f"http://127.0.0.1:{free_port()}"
    urls: list[str] = []
    real_post = workload_api.BoundedClient.post

    def post(self, url, **kwargs):
        urls.append(url)
        if len(urls) == 1:
            url = url.replace(worker.endpoint, dead)
        return real_post(self, url, **kwargs)

    monkeypatch.setattr(workload_api.BoundedClient, "post", post)
    assert deliver_workload(worker.endpoint, JOB, SPEC, bytes(USER))["state"] == "pending"
    assert len(urls) == 2 and sleeps == [0.5]


def test_timeout_is_reported_as_unreachable(sleeps):
    with socket.socket() as listener:  # accepts, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(WorkerApiError, match="cannot reach .* timed out"):
            workload_status(endpoint, JOB, spec_hash(SPEC), bytes(USER), timeout=0.2)


def _trickling_worker(body: bytes, every_s: float) -> tuple[socket.socket, threading.Thread]:
    """A worker that answers 200 with ``body``, one byte every ``every_s`` seconds."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(body))
                for i in range(len(body)):
                    conn.sendall(body[i:i + 1])
                    time.sleep(every_s)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return listener, t


@pytest.mark.parametrize("call", ["status", "deliver"])
def test_a_worker_trickling_its_answer_cannot_hold_the_caller(sleeps, call):
    listener, _ = _trickling_worker(b'{"state": "running", "pad": "' + b"x" * 200 + b'"}', 0.1)
    with listener:
        endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(WorkerApiError, match="timed out") as err:
            if call == "status":
                workload_status(endpoint, JOB, spec_hash(SPEC), bytes(USER), timeout=1.0)
            else:
                deliver_workload(endpoint, JOB, SPEC, bytes(USER), timeout=1.0, retries=0)
        assert time.monotonic() - start < 5  # the whole answer would take 23 s
        assert err.value.status is None


def test_a_log_tail_trickled_past_its_deadline_stops(sleeps):
    listener, _ = _trickling_worker(b"line\n" * 100, 0.05)
    with listener:
        endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
        start = time.monotonic()
        got = bytearray()
        with pytest.raises(WorkerApiError, match="did not send the logs within 1 s"):
            for chunk in stream_logs(endpoint, JOB, spec_hash(SPEC), bytes(USER), tail=100,
                                     deadline=1.0):
                got += chunk
        assert time.monotonic() - start < 5 and 0 < len(got) < 500  # the whole takes 25 s


def test_an_oversized_answer_is_refused(worker, monkeypatch):
    monkeypatch.setattr(workload_api, "_MAX_ANSWER_BYTES", 64)
    with pytest.raises(WorkerApiError, match="over 64 bytes"):
        workload_status(worker.endpoint, JOB, spec_hash(SPEC), bytes(USER))


# ----------------------------------------------------------------------------- status


def test_status_success(worker):
    status = workload_status(worker.endpoint, JOB, spec_hash(SPEC), bytes(USER))
    assert status["state"] == "running" and status["runtime"] == "podman"
    assert status["exit_code"] is None and status["error"] is None
    assert status["ports"] == [{"port": 8888, "protocol": "tcp", "host": "203.0.113.7",
                                "host_port": 40001}]  # fmt: skip


def test_status_errors(worker, sleeps):
    with pytest.raises(WorkerApiError, match="HTTP 401: the request signature does not verify"):
        workload_status(worker.endpoint, JOB, bytes(32), bytes(USER))  # not the job's hash
    with pytest.raises(WorkerApiError, match="HTTP 403") as err:
        workload_status(worker.endpoint, JOB, spec_hash(SPEC), bytes(STRANGER))
    assert err.value.status == 403
    worker.forced.append((503, b'{"error": "busy"}', {}))
    with pytest.raises(WorkerApiError, match="refused to report the workload status: HTTP 503"):
        workload_status(worker.endpoint, JOB, spec_hash(SPEC), bytes(USER))
    worker.forced.append((200, b"[1, 2]", {}))
    with pytest.raises(WorkerApiError, match="answered HTTP 200 without a JSON object"):
        workload_status(worker.endpoint, JOB, spec_hash(SPEC), bytes(USER))
    assert sleeps == []
    with pytest.raises(WorkerApiError, match="cannot reach the provider's worker at http://127"):
        workload_status(f"127.0.0.1:{free_port()}", JOB, spec_hash(SPEC), bytes(USER))


# ----------------------------------------------------------------------------- logs


def test_logs_without_follow(worker):
    out = b"".join(stream_logs(worker.endpoint, JOB, spec_hash(SPEC), bytes(USER), tail=100))
    assert out == b"".join(LOG_CHUNKS)
    assert worker.log_query == {"tail": ["100"], "follow": ["0"]}


def test_logs_follow_streams_incrementally(worker):
    chunks = stream_logs(worker.endpoint, JOB, spec_hash(SPEC), bytes(USER), follow=True)
    received = []
    for i in range(len(LOG_CHUNKS)):
        received.append(next(chunks))
        # The worker has sent exactly what we hold: nothing waited for the end of the body.
        assert received == LOG_CHUNKS[: i + 1] and worker.log_sent == i + 1
        if i + 1 < len(LOG_CHUNKS):
            worker.log_gates[i + 1].set()
    assert list(chunks) == []
    assert worker.log_query == {"follow": ["1"]}


def test_logs_follow_can_stop_early(worker):
    chunks = stream_logs(worker.endpoint, JOB, spec_hash(SPEC), bytes(USER), follow=True)
    assert next(chunks) == LOG_CHUNKS[0]
    chunks.close()  # closes the connection; the worker's next write fails or is discarded


def test_logs_errors(worker):
    with pytest.raises(WorkerApiError, match="refused to serve the logs: HTTP 403") as err:
        next(stream_logs(worker.endpoint, JOB, spec_hash(SPEC), bytes(STRANGER)))
    assert err.value.status == 403
    worker.ended = True
    with pytest.raises(WorkerApiError, match="HTTP 410: job ended") as err:
        next(stream_logs(worker.endpoint, JOB, spec_hash(SPEC), bytes(USER), follow=True))
    assert err.value.status == 410
    with pytest.raises(WorkerApiError, match="cannot reach the provider's worker"):
        next(stream_logs(f"127.0.0.1:{free_port()}", JOB, spec_hash(SPEC), bytes(USER)))
    with pytest.raises(ValueError, match="tail must be a non-negative int or None, got -1"):
        next(stream_logs(worker.endpoint, JOB, spec_hash(SPEC), bytes(USER), tail=-1))
    with pytest.raises(WorkerApiError, match="uses the scheme 'ftp'"):
        next(stream_logs("ftp://x", JOB, spec_hash(SPEC), bytes(USER)))


def test_job_must_be_an_address():
    with pytest.raises(ValueError, match="job must be 32 bytes or a Pubkey"):
        workload_status("127.0.0.1:1", JOB[:31], spec_hash(SPEC), bytes(USER))
