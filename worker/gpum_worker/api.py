"""The worker's HTTP API for users of its jobs' workloads (docs/protocol.md, "Workloads").

Endpoints (JSON unless noted; every error is ``{"error": "<what to do>"}``)::

    POST /v1/jobs/<job b58>/workload      body: the spec JSON (at most 64 KiB)
    GET  /v1/jobs/<job b58>/workload      the workload's status
    GET  /v1/jobs/<job b58>/logs?tail=N&follow=0|1   text/plain; chunked while following
    GET  /v1/health                       {"ok": true, "worker": <pubkey>, "runtime": ...,
                                           "cluster": {"udp_port", ...} or null}
    GET  /v1/jobs/<job b58>/mesh          a cluster node's signed mesh key  (``mesh_api``)
    POST /v1/jobs/<job b58>/mesh          body {"peers": [...]}: its peer list
    POST /v1/jobs/<job b58>/exec          body {"cmd": [...], "tty", "stdin", "nonce"}
    PUT  /v1/jobs/<job b58>/files?path=DIR&nonce=N   body: a tar archive, into DIR
    GET  /v1/jobs/<job b58>/files?path=PATH&nonce=N  application/x-tar of PATH
    POST /v1/challenges, /v1/challenges/<digest>/open  validators' hardware challenges
                                          (``challenge_api``, signed by a validator)

Exec and files (``gpu_market.exec_api`` has the wire format; ``gpum_worker.exec`` runs
them): only for a Running job whose container runs, only for its user, each signed request
served once. They sign actions "exec" / "files" with ``exec_api.request_digest`` (method,
endpoint, container path, nonce, body sha256) in place of the workload hash, and the worker
remembers every signature it accepted until its timestamp leaves the signing window
(``exec.ReplayGuard``): a replay is 401. A command without input or terminal answers a
chunked stream of frames ending in its exit status; one with ``tty`` or ``stdin`` needs
``Connection: Upgrade`` + ``Upgrade: gpum-exec`` and gets 101, after which the connection
carries frames both ways (the front's protocol switch, ``Response.feed``: a chunked request
body cannot reach a handler before it is complete, so a terminal needs the switch). At most
``max_execs`` sessions run at once (503 beyond), each at most ``exec_deadline_s``. Paths are
absolute container paths without ``..`` (400 otherwise), used only as ``NAME:PATH`` with
``podman cp``, which resolves them inside the container's root; an upload is a tar archive
of at most ``exec_api.MAX_UPLOAD_BYTES`` (413) whose entries stay in their directory (400).

Every ``/v1/jobs`` request is signed by the job's user wallet
(``gpu_market.workload.sign_request``: headers X-Gpum-Signer / X-Gpum-Timestamp /
X-Gpum-Signature, timestamp within 300 s of the worker's clock) for the action
("deliver", "status", "logs"), the job and a workload hash: for "deliver" the sha256 of the
posted spec, otherwise the job's on-chain ``workload_hash``.

Statuses: 200; 400 malformed job key, body, query or spec (or secrets that do not open
with this worker's key); 401 missing, malformed, stale or forged signature; 403 signed by
someone other than the job's user; 404 not a live job of this provider; 409 the spec's hash
is not the job's ``workload_hash``, or the job has no workload; 410 the job ended longer ago
than the store keeps its record (``WorkloadStore.ended_logs_s``, the message says why it
ended), or, for a delivery, is not open or running; 411 no Content-Length; 413 body over 64 KiB; 503 retry later
(the worker is starting, has no container runtime, or is busy).

Jobs are looked up only in the agent's latest poll (``WorkloadManager.lookup``) and the
workload store (an ended job whose record is kept: ``WorkloadManager.ended_view``; its status
says why it ended and its logs endpoint serves the saved tail, to its user only): a request, authenticated or not, never causes a chain read, and nothing is
stored before the signature of the job's user verified.

Transport: the shared hardened front (``gpu_market.httpfront``, the validator's): requests
are read completely by one event loop under per-connection deadlines, per-source
connection and in-flight caps, a listen backlog and the body cap, and only then handled by
at most ``handler_threads`` threads, so connections that trickle or idle cost a socket each,
never a thread, and never keep another client's request from an answer. At most
``max_follows`` log streams run at once, and at most one log request per job (a second one
is 429 until the first ends); a stream ends when the container stops, the client goes away
or stops reading, or the server closes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

from gpu_market.exec_api import (
    MAX_CMD_BYTES,
    MAX_UPLOAD_BYTES,
    check_container_path,
    request_digest,
)
from gpu_market.httpfront import HttpLimits, HttpServer, Request, Response, serve_in_thread
from gpu_market.workload import (
    MAX_SPEC_BYTES,
    RequestAuthError,
    WorkloadSpecError,
    spec_from_json,
    spec_hash,
    verify_request,
)

from . import exec as execs
from . import mesh_api
from .config import parse_listen
from .errors import ConfigError
from .jobs import AssignedJob
from .keys import decode_pubkey
from .runtime import LOG_READ_DEADLINE_S, LOG_READ_MAX_BYTES, container_name
from .workload_store import WorkloadUnavailable
from .workloads import WorkloadManager

log = logging.getLogger("gpum_worker.api")

MAX_BODY_BYTES = MAX_SPEC_BYTES
MAX_TAIL_LINES = 100_000
DEFAULT_TAIL_LINES = 10_000
"""Lines served when ``tail`` is not given (the whole log can be huge)."""
API_LIMITS = HttpLimits(handler_threads=32, read_timeout_s=10.0, max_connections=1024,
                        max_connections_per_source=64, max_in_flight_per_source=8)
"""The front's limits for the worker API: few honest clients (a job's user), each with a
handful of requests; a source with more waits for its turn."""


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
    ``worker`` is the worker key's base58 pubkey (reported by /v1/health). Log reads are
    bounded by ``log_max_bytes`` and ``log_deadline_s`` (``WorkloadManager.logs``).
    """

    def __init__(self, manager: WorkloadManager, listen: str = "127.0.0.1:0", *,
                 worker: str = "", clock: Callable[[], float] = time.time,
                 limits: HttpLimits = API_LIMITS, max_follows: int = 16,
                 log_max_bytes: int = LOG_READ_MAX_BYTES,
                 log_deadline_s: float = LOG_READ_DEADLINE_S, max_execs: int = 8,
                 exec_deadline_s: float = execs.EXEC_DEADLINE_S,
                 max_download_bytes: int = 4 << 30, challenges: Any = None,
                 peer_chain: mesh_api.PeerChain | None = None) -> None:
        self.manager = manager
        self.peer_chain = peer_chain
        """Reads peer jobs from chain for ``POST .../mesh`` (``mesh_api``); None: refused."""
        self.challenges = challenges
        """``challenge_api.ChallengeService`` behind ``/v1/challenges``; None: 404 there."""
        self.replay = execs.ReplayGuard(clock=clock)
        self.execs = threading.BoundedSemaphore(max_execs)
        self.exec_deadline_s = exec_deadline_s
        self.max_download_bytes = max_download_bytes
        self.worker = worker
        self.clock = clock
        self.limits = limits
        self.log_max_bytes = log_max_bytes
        self.log_deadline_s = log_deadline_s
        self._host, self._port = parse_listen(listen)
        self._follows = threading.BoundedSemaphore(max_follows)
        self._log_jobs: set[bytes] = set()
        """Jobs with a log request running (at most one each)."""
        self._log_lock = threading.Lock()
        self._server: _ApiServer | None = None

    def start(self) -> None:
        """Bind and serve; ConfigError when the address cannot be bound."""
        try:
            self._server = _ApiServer((self._host, self._port), self)
        except OSError as e:
            raise ConfigError(f"cannot listen on {self._host}:{self._port} for the worker "
                              f"API: {e.strerror or e}") from None
        serve_in_thread(self._server, name="worker-api")

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
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # ------------------------------------------------------------------ one log per job

    def _log_slot(self, job: bytes) -> bool:
        with self._log_lock:
            if job in self._log_jobs:
                return False
            self._log_jobs.add(job)
            return True

    def _log_done(self, job: bytes) -> None:
        with self._log_lock:
            self._log_jobs.discard(job)


def _json(status: int, obj: Any, *, close: bool = False,
          retry_after: int | None = None) -> Response:
    headers = [("Cache-Control", "no-store")]
    if status == 503 or retry_after is not None:
        headers.append(("Retry-After", str(5 if retry_after is None else retry_after)))
    return Response(status, json.dumps(obj).encode() + b"\n", "application/json", headers,
                    close)


class _ApiServer(HttpServer):
    server_name = "gpum-worker"
    methods = ("GET", "POST", "PUT", "DELETE")

    def __init__(self, address: tuple[str, int], api: WorkerApi) -> None:
        self.api = api
        super().__init__(address, api.limits)

    def error_response(self, status: int, code: str, message: str,
                       close: bool = False) -> Response:
        return _json(status, {"error": message}, close=close)

    def check_body(self, req: Request) -> Response | None:
        """Before any byte of a body is read: a method a route does not take is 405, a
        POST or PUT needs a Content-Length (411) of at most ``MAX_BODY_BYTES`` (413; an
        upload: ``MAX_UPLOAD_BYTES``)."""
        h = req.headers
        route = urlsplit(req.path).path.rsplit("/", 1)[-1]
        if req.method == "PUT" and route == "files":
            return _length_check(h, MAX_UPLOAD_BYTES, "an upload (a tar archive)")
        if req.method == "GET":
            length = h.get("content-length")
            if length is not None and length != "0":
                return _json(400, {"error": "a GET carries no body"}, close=True)
            if h.get("transfer-encoding"):
                return _json(400, {"error": "a GET carries no body"}, close=True)
            return None
        if req.method != "POST":
            allowed = "GET or POST" if urlsplit(req.path).path.endswith("/workload") else "GET"
            return _json(405, {"error": f"{req.method} is not allowed on "
                                        f"{urlsplit(req.path).path}; use {allowed}"},
                         close=True)
        if route == "exec":
            return _length_check(h, MAX_CMD_BYTES, "an exec request")
        return _length_check(h, MAX_BODY_BYTES, "a workload spec")

    def respond(self, req: Request) -> Response:
        try:
            return _Exchange(self.api, req).dispatch()
        except Exception:
            self.stats["handler_errors"] += 1
            log.exception("worker API: %s %s failed", req.method, req.path[:200])
            return _json(500, {"error": "internal error; see the worker's log"}, close=True)


def _length_check(h: dict[str, str], cap: int, what: str) -> Response | None:
    if h.get("transfer-encoding"):
        return _json(411, {"error": "send the body with a Content-Length (no chunked "
                                    "body)"}, close=True)
    length_text = h.get("content-length")
    if length_text is None or not length_text.strip().isdigit():
        return _json(411, {"error": "Content-Length is required"}, close=True)
    length = int(length_text)
    if length > cap:
        return _json(413, {"error": f"the body is {length} bytes; {what} is at most "
                                    f"{cap} bytes"}, close=True)
    return None


class _Exchange:
    """The routes of one complete request (on a handler thread)."""

    def __init__(self, api: WorkerApi, req: Request) -> None:
        self.api = api
        self.req = req
        self.headers = req.headers

    def dispatch(self) -> Response:
        method = self.req.method
        try:
            parts = urlsplit(self.req.path)
            segs = parts.path.split("/")
            if segs[1:3] == ["v1", "challenges"] and self.api.challenges is not None:
                status, obj, retry = self.api.challenges.route(method, segs, self.req.body)
                return _json(status, obj, retry_after=retry)
            if parts.path == "/v1/health" and method == "GET":
                mesh = self.api.manager.mesh
                return _json(200, {"ok": True, "worker": self.api.worker,
                                   "runtime": self.api.manager.runtime_name,
                                   "cluster": None if mesh is None else mesh.health()})
            if len(segs) != 5 or segs[:3] != ["", "v1", "jobs"] \
                    or segs[4] not in ("workload", "logs", "exec", "files", "mesh"):
                raise ApiError(404, f"no such endpoint: {method} {parts.path}")
            allowed = {"workload": ("GET", "POST"), "logs": ("GET",), "exec": ("POST",),
                       "files": ("GET", "PUT"), "mesh": ("GET", "POST")}[segs[4]]
            if method not in allowed:
                raise ApiError(405, f"{method} is not allowed on {parts.path}; use "
                                    f"{' or '.join(allowed)}")
            try:
                job_key = decode_pubkey(segs[3], "job")
            except ValueError as e:
                raise ApiError(400, str(e)) from None
            if segs[4] == "logs":
                return self._logs(job_key, parse_qs(parts.query))
            if segs[4] in ("exec", "files"):
                return _exec_routes(self, job_key, segs[4], parse_qs(parts.query))
            if segs[4] == "mesh":
                return self._mesh(job_key)
            if method == "POST":
                return self._deliver(job_key)
            return self._status(job_key)
        except ApiError as e:
            return _json(e.status, {"error": str(e)}, close=e.close, retry_after=e.retry_after)
        except WorkloadUnavailable as e:
            return _json(503, {"error": f"{e}; retry later"})

    # ------------------------------------------------------------------ lookups

    def _job(self, job_key: bytes) -> AssignedJob:
        """The live job from the agent's latest poll; never a chain read."""
        m = self.api.manager
        j = m.lookup(job_key)
        if j is not None:
            return j
        if m.ended(job_key):
            ended = m.ended_view(job_key)
            if ended is not None:
                return ended  # its last logs and why it ended, until the store forgets it
            info = m.store.ended(job_key)
            why = f" ({info.reason})" if info is not None and info.reason else ""
            hours = m.store.ended_logs_s / 3600
            raise ApiError(410, f"this job has ended{why}; its workload's status and last "
                                f"logs are kept {hours:g} h after it ended, and are gone now")
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

    def _deliver(self, job_key: bytes) -> Response:
        j = self._job(job_key)
        body = self.req.body
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
        return _json(200, {"job": status["job"], "workload_hash": status["workload_hash"],
                           "state": status["state"]})

    def _mesh(self, job_key: bytes) -> Response:
        j = self._job(job_key)
        method, body = self.req.method, self.req.body
        self._auth("mesh", j, mesh_api.signed_hash(method, body, j.workload_hash))
        self._has_workload(j)
        status, obj = mesh_api.serve(method, j, body, self.api.manager, self.api.peer_chain)
        return _json(status, obj)

    def _status(self, job_key: bytes) -> Response:
        j = self._job(job_key)
        self._auth("status", j, j.workload_hash)
        self._has_workload(j)
        return _json(200, self.api.manager.describe(j))

    def _logs(self, job_key: bytes, query: dict[str, list[str]]) -> Response:
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
        api, m = self.api, self.api.manager
        if not api._log_slot(j.job):
            raise ApiError(429, "a log request for this job is already running; wait for it "
                                "to end (or close the stream you follow) and retry",
                           retry_after=1)
        try:
            if follow_text == "1":
                if not api._follows.acquire(blocking=False):
                    raise ApiError(503, "too many log streams are open on this worker; retry "
                                        "later")
                try:
                    stream = m.follow_logs(j, tail)
                except BaseException:
                    api._follows.release()
                    raise
                if stream is not None:
                    held = _Held(stream, lambda: (api._follows.release(),
                                                  api._log_done(j.job)))
                    return Response(200, b"", "text/plain; charset=utf-8", _LOG_HEADERS,
                                    True, stream=held)
                api._follows.release()
            data = m.logs(j, tail, max_bytes=api.log_max_bytes,
                          deadline_s=api.log_deadline_s)
        except BaseException:
            api._log_done(j.job)
            raise
        api._log_done(j.job)
        return Response(200, data, "text/plain; charset=utf-8", _LOG_HEADERS)


_LOG_HEADERS = [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")]


class _Held:
    """A log stream that gives back its places (stream slot, the job's log slot) once,
    when it is closed (the front closes every stream it serves)."""

    def __init__(self, stream: Iterator[bytes], release: Callable[[], object]) -> None:
        self._stream = stream
        self._release: Callable[[], object] | None = release
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._stream)

    def close(self) -> None:
        try:
            close = getattr(self._stream, "close", None)
            if close is not None:
                close()
        finally:
            with self._lock:
                release, self._release = self._release, None
            if release is not None:
                release()


# ----------------------------------------------------------------------------- exec, files

_UPGRADE = "gpum-exec"


def _exec_request(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the exec request is not JSON") from None
    if not isinstance(doc, dict) or set(doc) != {"cmd", "tty", "stdin", "nonce"}:
        raise ApiError(400, 'send {"cmd": [...], "tty": bool, "stdin": bool, "nonce": hex}')
    cmd = doc["cmd"]
    if not isinstance(cmd, list) or not cmd \
            or not all(isinstance(c, str) and "\x00" not in c for c in cmd):
        raise ApiError(400, "cmd must be a non-empty list of strings without NUL")
    if not isinstance(doc["tty"], bool) or not isinstance(doc["stdin"], bool):
        raise ApiError(400, "tty and stdin must be true or false")
    return doc


def _exec_routes(ex: _Exchange, job_key: bytes, route: str,
                 query: dict[str, list[str]]) -> Response:
    """exec and files (module docstring): parse, authenticate once, then run."""
    api, req = ex.api, ex.req
    allowed_query = {"path", "nonce"} if route == "files" else set()
    unknown = sorted(set(query) - allowed_query)
    if unknown:
        raise ApiError(400, f"unknown query parameter {unknown[0]!r}")
    doc: dict[str, Any] = {}
    path_text = path = ""
    if route == "exec":
        doc = _exec_request(req.body)
        nonce = doc["nonce"]
        body = req.body
    else:
        path_text = query.get("path", [""])[-1]
        nonce = query.get("nonce", [""])[-1]
        try:
            path = check_container_path(path_text)
        except ValueError as e:
            raise ApiError(400, str(e)) from None
        body = req.body if req.method == "PUT" else b""
    if not isinstance(nonce, str) or not 8 <= len(nonce) <= 64:
        raise ApiError(400, "a nonce of 8..64 characters is required (a new one each request)")
    j = ex._job(job_key)
    ex._auth(route, j, request_digest(req.method, route, path_text, nonce, body))
    first = api.replay.admit(ex.headers.get("x-gpum-signer", ""),
                             ex.headers.get("x-gpum-signature", ""),
                             int(ex.headers.get("x-gpum-timestamp", "0")))
    if first is False:
        raise ApiError(401, "this signed request was already served (a replay); sign a new "
                            "one")
    if first is None:
        raise ApiError(503, "too many of your signed requests in the last minutes; retry "
                            "in a few minutes", retry_after=60)
    if j.status != "running":
        raise ApiError(409, f"this job is {j.status}; exec and copies need a Running job")
    ex._has_workload(j)
    rt = api.manager.runtime
    if rt is None or not hasattr(rt, "exec_argv"):
        raise ApiError(503, "this worker's container runtime cannot run commands in "
                            "containers")
    name = container_name(j.job)
    state = rt.state(name).status
    if state != "running":
        raise ApiError(409, f"the job's container is {state}, not running; see `gpum job "
                            "logs` for why")
    if req.method == "PUT":
        try:
            execs.check_tar(body)
            execs.copy_in(rt.copy_in_argv(name, path), rt.cli_env(), body)
        except ValueError as e:
            raise ApiError(400, f"bad upload: {e}") from None
        except RuntimeError as e:
            raise ApiError(409, f"cannot copy into {path} in the container: {e} (does the "
                                "directory exist?)") from None
        return _json(200, {"path": path, "bytes": len(body)})
    if not api.execs.acquire(blocking=False):
        raise ApiError(503, "too many commands and copies run on this worker; retry later")
    try:
        if route == "files":
            out = execs.open_copy_out(rt.copy_out_argv(name, path), rt.cli_env(),
                                      max_bytes=api.max_download_bytes,
                                      deadline_s=api.exec_deadline_s)
            return Response(200, b"", "application/x-tar", _LOG_HEADERS, True,
                            stream=_Held(out, api.execs.release))
        tty, stdin = doc["tty"], doc["stdin"]
        tokens = {t.strip().lower() for t in ex.headers.get("connection", "").split(",")}
        upgrade = "upgrade" in tokens and ex.headers.get("upgrade", "").lower() == _UPGRADE
        if (tty or stdin) and not upgrade:
            raise ApiError(400, "a command with a terminal or input needs Connection: Upgrade "
                                f"and Upgrade: {_UPGRADE}")
        proc = execs.ExecProcess(rt.exec_argv(name, doc["cmd"], tty=tty,
                                              interactive=tty or stdin),
                                 rt.cli_env(), tty=tty, stdin=stdin,
                                 deadline_s=api.exec_deadline_s)
    except RuntimeError as e:
        api.execs.release()
        raise ApiError(404, f"cannot copy {path} out of the container: {e}") from None
    except BaseException:
        api.execs.release()
        raise
    held = _Held(proc, api.execs.release)
    if tty or stdin:
        return Response(101, b"", "", [("Upgrade", _UPGRADE)], True, stream=held,
                        feed=proc.feed)
    return Response(200, b"", "application/x-gpum-exec", _LOG_HEADERS, True, stream=held)
