"""The worker's HTTP API for users of its jobs' workloads (DESIGN.md section 8).

Endpoints (JSON unless noted; every error is ``{"error": "<what to do>"}``)::

    POST /v1/jobs/<job b58>/workload      body: the spec JSON (at most 64 KiB)
    GET  /v1/jobs/<job b58>/workload      the workload's status
    GET  /v1/jobs/<job b58>/logs?tail=N&follow=0|1   text/plain; chunked while following
    GET  /v1/health                       {"ok": true, "worker": <pubkey>, "runtime": ...}

Every ``/v1/jobs`` request is signed by the job's user wallet
(``gpu_market.workload.sign_request``: headers X-Gpum-Signer / X-Gpum-Timestamp /
X-Gpum-Signature, timestamp within 300 s of the worker's clock) for the action
("deliver", "status", "logs"), the job and a workload hash: for "deliver" the sha256 of the
posted spec, otherwise the job's on-chain ``workload_hash``.

Statuses: 200; 400 malformed job key, body, query or spec (or secrets that do not open
with this worker's key); 401 missing, malformed, stale or forged signature; 403 signed by
someone other than the job's user; 404 not a live job of this provider; 409 the spec's hash
is not the job's ``workload_hash``, or the job has no workload; 410 the job ended (or, for
a delivery, is finishing); 411 no Content-Length; 413 body over 64 KiB; 503 retry later
(the worker is starting, has no container runtime, or is busy).

Jobs are looked up only in the agent's latest poll (``WorkloadManager.lookup``) and the
workload store: a request, authenticated or not, never causes a chain read, and nothing is
stored before the signature of the job's user verified. Sockets have read timeouts, at most
``max_connections`` are served at once and ``max_follows`` log streams; a stream ends when
the container stops, the client goes away, or the server closes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from gpu_market.workload import (
    MAX_SPEC_BYTES,
    RequestAuthError,
    WorkloadSpecError,
    spec_from_json,
    spec_hash,
    verify_request,
)

from .config import parse_listen
from .errors import ConfigError
from .jobs import AssignedJob
from .keys import decode_pubkey
from .workloads import WorkloadManager, WorkloadUnavailable

log = logging.getLogger("gpum_worker.api")

MAX_BODY_BYTES = MAX_SPEC_BYTES
MAX_TAIL_LINES = 100_000
DEFAULT_TAIL_LINES = 10_000
"""Lines served when ``tail`` is not given (the whole log can be huge)."""


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, close: bool = False,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.close = close
        self.retry_after = retry_after


class WorkerApi:
    """The HTTP server; ``start()`` serves in a daemon thread until ``close()``.

    ``manager`` answers every lookup (latest poll, store) and runs the workloads;
    ``worker`` is the worker key's base58 pubkey (reported by /v1/health).
    """

    def __init__(self, manager: WorkloadManager, listen: str = "127.0.0.1:0", *,
                 worker: str = "", clock: Callable[[], float] = time.time,
                 read_timeout_s: float = 10.0, max_connections: int = 64,
                 max_follows: int = 16) -> None:
        self.manager = manager
        self.worker = worker
        self.clock = clock
        self.read_timeout_s = read_timeout_s
        self._host, self._port = parse_listen(listen)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._follows = threading.BoundedSemaphore(max_follows)
        self._closing = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve; ConfigError when the address cannot be bound."""
        try:
            self._server = _Server((self._host, self._port), self)
        except OSError as e:
            raise ConfigError(f"cannot listen on {self._host}:{self._port} for the worker "
                              f"API: {e.strerror or e}") from None
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.2}, name="worker-api",
                                        daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def close(self) -> None:
        """Stop serving and end every log stream."""
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], api: WorkerApi) -> None:
        self.api = api
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.api._slots.acquire(blocking=False):
            body = b'{"error": "the worker API is busy; retry later"}'
            with contextlib.suppress(OSError):
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                                b"application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
                                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
                                + body)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.api._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.api._slots.release()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gpum-worker"
    sys_version = ""
    server: _Server

    def setup(self) -> None:
        self.timeout = self.server.api.read_timeout_s
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # ------------------------------------------------------------------ plumbing

    @property
    def api(self) -> WorkerApi:
        return self.server.api

    def _unread_body(self) -> bool:
        """True when the request announced a body that was not read (then the connection
        must close: what is left of it is not the next request)."""
        if getattr(self, "_body_read", False):
            return False
        length = (self.headers.get("Content-Length") or "0").strip()
        return bool(self.headers.get("Transfer-Encoding")) or length != "0"

    def _send_json(self, status: int, obj: Any, *, close: bool = False,
                   retry_after: int | None = None) -> None:
        close = close or self._unread_body()
        body = json.dumps(obj).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if status == 503 or retry_after is not None:
            self.send_header("Retry-After", str(5 if retry_after is None else retry_after))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _dispatch(self, method: str) -> None:
        self._body_read = False
        try:
            parts = urlsplit(self.path)
            segs = parts.path.split("/")
            if parts.path == "/v1/health" and method == "GET":
                self._send_json(200, {"ok": True, "worker": self.api.worker,
                                      "runtime": self.api.manager.runtime_name})
                return
            if len(segs) != 5 or segs[:3] != ["", "v1", "jobs"] \
                    or segs[4] not in ("workload", "logs"):
                raise ApiError(404, f"no such endpoint: {method} {parts.path}")
            allowed = ("GET", "POST") if segs[4] == "workload" else ("GET",)
            if method not in allowed:
                raise ApiError(405, f"{method} is not allowed on {parts.path}; use "
                                    f"{' or '.join(allowed)}")
            try:
                job_key = decode_pubkey(segs[3], "job")
            except ValueError as e:
                raise ApiError(400, str(e)) from None
            if segs[4] == "logs":
                self._logs(job_key, parse_qs(parts.query))
            elif method == "POST":
                self._deliver(job_key)
            else:
                self._status(job_key)
        except ApiError as e:
            self._send_json(e.status, {"error": str(e)}, close=e.close,
                            retry_after=e.retry_after)
        except WorkloadUnavailable as e:
            self._send_json(503, {"error": f"{e}; retry later"})
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
        except Exception:
            log.exception("worker API: %s %s failed", method, self.path)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._send_json(500, {"error": "internal error; see the worker's log"},
                                close=True)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ------------------------------------------------------------------ lookups

    def _job(self, job_key: bytes) -> AssignedJob:
        """The live job from the agent's latest poll; never a chain read."""
        m = self.api.manager
        j = m.lookup(job_key)
        if j is not None:
            return j
        if m.ended(job_key):
            raise ApiError(410, "this job has ended")
        if not m.polled:
            raise ApiError(503, "the worker is starting and has not read its jobs yet; "
                                "retry later")
        # A job created moments ago: ask the agent to look at the chain now (it polls at most
        # once per loop turn, about a second, whoever asks) and tell the client when to retry.
        m.on_delivered()
        raise ApiError(404, "not a live job of this provider (open, running or finishing as "
                            "of the worker's last look at the chain; a job created moments "
                            "ago shows up within one poll)", retry_after=1)

    def _auth(self, action: str, j: AssignedJob, workload_hash: bytes) -> None:
        if j.user is None:
            raise ApiError(409, "this job has no workload")
        try:
            verify_request(self.headers, action, j.job, workload_hash,
                           expected_signer=j.user, now=int(self.api.clock()))
        except RequestAuthError as e:
            raise ApiError(e.status, str(e)) from None

    @staticmethod
    def _has_workload(j: AssignedJob) -> None:
        if not j.has_workload:
            raise ApiError(409, "this job has no workload (its workload_hash on chain is "
                                "all zeros)")

    # ------------------------------------------------------------------ endpoints

    def _deliver(self, job_key: bytes) -> None:
        length_text = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding"):
            raise ApiError(411, "send the spec with a Content-Length (no chunked body)",
                           close=True)
        if length_text is None or not length_text.strip().isdigit():
            raise ApiError(411, "Content-Length is required", close=True)
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            raise ApiError(413, f"the body is {length} bytes; a workload spec is at most "
                                f"{MAX_BODY_BYTES} bytes", close=True)
        j = self._job(job_key)
        body = self.rfile.read(length)
        self._body_read = True
        if len(body) != length:
            raise ApiError(400, "the body ended before Content-Length bytes", close=True)
        if j.status != "open" and j.status != "running":
            raise ApiError(410, f"this job is {j.status}: its workload can no longer start")
        try:
            spec = spec_from_json(body)
        except WorkloadSpecError as e:
            raise ApiError(400, f"bad workload spec: {e}") from None
        h = spec_hash(spec)
        self._auth("deliver", j, h)
        self._has_workload(j)
        if h != j.workload_hash:
            raise ApiError(409, f"the spec's hash {h.hex()} is not this job's workload_hash "
                                f"{j.workload_hash.hex()} (fixed at create_job): post the "
                                "exact spec the job was created with")
        try:
            status = self.api.manager.deliver(j, spec)
        except WorkloadSpecError as e:
            raise ApiError(400, f"bad workload spec: {e}") from None
        self._send_json(200, {"job": status["job"], "workload_hash": status["workload_hash"],
                              "state": status["state"]})

    def _status(self, job_key: bytes) -> None:
        j = self._job(job_key)
        self._auth("status", j, j.workload_hash)
        self._has_workload(j)
        self._send_json(200, self.api.manager.describe(j))

    def _logs(self, job_key: bytes, query: dict[str, list[str]]) -> None:
        unknown = sorted(set(query) - {"tail", "follow"})
        if unknown:
            raise ApiError(400, f"unknown query parameter {unknown[0]!r}; use tail and follow")
        tail: int | None = DEFAULT_TAIL_LINES
        if "tail" in query:
            text = query["tail"][-1]
            if not text.isdigit() or int(text) > MAX_TAIL_LINES:
                raise ApiError(400, f"tail must be a number of lines 0..{MAX_TAIL_LINES}")
            tail = int(text)
        follow_text = query.get("follow", ["0"])[-1]
        if follow_text not in ("0", "1"):
            raise ApiError(400, "follow must be 0 or 1")
        j = self._job(job_key)
        self._auth("logs", j, j.workload_hash)
        self._has_workload(j)
        m = self.api.manager
        if follow_text == "1":
            if not self.api._follows.acquire(blocking=False):
                raise ApiError(503, "too many log streams are open on this worker; retry "
                                    "later")
            try:
                stream = m.follow_logs(j, tail)
                if stream is not None:
                    self._stream(stream)
                    return
            finally:
                self.api._follows.release()
        data = m.logs(j, tail)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, stream: Iterator[bytes]) -> None:
        """Send ``stream`` as a chunked body until it ends, the client goes away or the
        server closes; the stream is always closed (which ends its process)."""
        chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=64)
        done = threading.Event()

        def pump() -> None:
            try:
                for chunk in stream:
                    while not done.is_set():
                        try:
                            chunks.put(chunk, timeout=0.5)
                            break
                        except queue.Full:
                            continue
                    if done.is_set():
                        return
            except Exception as e:  # noqa: BLE001 - a runtime error ends the stream
                log.debug("log stream ended: %s", e)
            finally:
                with contextlib.suppress(queue.Full):
                    chunks.put(None, timeout=0.5)

        reader = threading.Thread(target=pump, name="log-stream", daemon=True)
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        reader.start()
        try:
            while not self.api._closing.is_set():
                try:
                    chunk = chunks.get(timeout=0.5)
                except queue.Empty:
                    if self._client_gone():
                        return
                    continue
                if chunk is None:
                    break
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        finally:
            done.set()
            with contextlib.suppress(Exception):
                stream.close()  # type: ignore[attr-defined]
            reader.join(timeout=2)

    def _client_gone(self) -> bool:
        """True when the peer closed its side (a readable socket with nothing to read)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True
