"""Run commands in a job's container and copy files in and out, through the provider's
worker API (the job's user only; ``gpum job exec`` and ``gpum job cp``).

Requests (``gpum_worker.api`` serves them)::

    POST {endpoint}/v1/jobs/{job}/exec                  action "exec"
        body: JSON {"cmd": [...], "tty": bool, "stdin": bool, "nonce": hex}
        without tty and stdin: 200, a chunked stream of frames (below) ending in "x"
        with tty or stdin: the request carries ``Connection: Upgrade``,
        ``Upgrade: gpum-exec``; the answer is 101 and the connection then carries frames
        both ways until the command exits ("x") or either side closes
    PUT  {endpoint}/v1/jobs/{job}/files?path=DIR&nonce=hex   action "files"
        body: a tar archive (at most MAX_UPLOAD_BYTES) extracted into DIR in the container
        200 {"path": DIR, "bytes": N}
    GET  {endpoint}/v1/jobs/{job}/files?path=PATH&nonce=hex  action "files"
        200 application/x-tar: PATH (a file or a directory) as a tar archive

Every request is signed (``gpu_market.workload.sign_request``) with
:func:`request_digest` of the request in place of the workload hash; the digest covers the
method, the endpoint, the path, a random nonce and the body's sha256, so a signature
authorizes exactly one request, and the worker accepts it once (a replay is 401).

A frame is ``kind (1 byte) || length (u32 big-endian) || payload``. From the worker:
``o`` output (stdout; the terminal with a tty), ``e`` stderr, ``x`` the exit status (ASCII
decimal; the last frame), ``!`` an error message (then ``x``). From the client (upgraded
connection only): ``i`` input bytes, ``c`` end of input, ``w`` the window size
(rows, columns: two u16 big-endian).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import socket
import ssl
import struct
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import PurePosixPath
from typing import IO
from urllib.parse import quote, urlsplit

import httpx

from .workload import sign_request
from .workload_api import (
    _HINTS,
    WorkerApiError,
    _job_b58,
    _server_error,
    _unreachable,
    normalize_endpoint,
)

__all__ = [
    "MAX_FRAME_BYTES",
    "MAX_UPLOAD_BYTES",
    "ExecTunnel",
    "check_container_path",
    "download",
    "exec_stream",
    "frame",
    "open_exec_tunnel",
    "read_frames",
    "request_digest",
    "upload",
]

MAX_FRAME_BYTES = 1 << 16
"""The largest payload of one frame."""
MAX_UPLOAD_BYTES = 64 << 20
"""The largest tar archive one upload carries (the worker reads it whole)."""
MAX_CMD_BYTES = 64 << 10
MAX_PATH_BYTES = 4096
UPGRADE = "gpum-exec"
_HEAD_MAX = 16 << 10


_EXEC_HINTS = {**_HINTS, 400: "the worker refused the request",
               404: "no such path in the container, or the provider does not know the job",
               409: "the job or its container is not running"}


def _http_error(endpoint: str, what: str, response: httpx.Response) -> WorkerApiError:
    status = response.status_code
    server = _server_error(response)
    message = f"the provider's worker at {endpoint} refused to {what}: HTTP {status}"
    if server:
        message += f": {server}"
    if status in _EXEC_HINTS:
        message += f" ({_EXEC_HINTS[status]})"
    return WorkerApiError(message, status=status, endpoint=endpoint, server_error=server)


def request_digest(method: str, endpoint: str, path: str, nonce: str, body: bytes) -> bytes:
    """What an ``exec`` or ``files`` request signs in place of the workload hash: sha256 of a
    canonical JSON of the method, the endpoint ("exec" or "files"), the container path ("" for
    exec), the nonce and the body's sha256."""
    doc = {"body": hashlib.sha256(body).hexdigest(), "endpoint": endpoint, "method": method,
           "nonce": nonce, "path": path}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(b"gpum-exec-request-v1\x00" + text).digest()


def check_container_path(path: str) -> str:
    """``path`` normalized: an absolute path inside the container without ``..``, NUL or
    control characters, at most 4096 bytes; ValueError saying what is wrong otherwise."""
    if not isinstance(path, str) or not path:
        raise ValueError("a container path is required (an absolute path such as /scratch/x)")
    if len(path.encode()) > MAX_PATH_BYTES:
        raise ValueError(f"the container path is over {MAX_PATH_BYTES} bytes")
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        raise ValueError("the container path has a control character")
    if not path.startswith("/"):
        raise ValueError(f"container path {path!r} is not absolute; start it with /")
    if ".." in PurePosixPath(path).parts:
        raise ValueError(f"container path {path!r} has a '..' component; name the path "
                         "directly")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return "/" + "/".join(parts)


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + struct.pack(">I", len(payload)) + payload


def read_frames(buffer: bytearray) -> Iterator[tuple[bytes, bytes]]:
    """Whole frames taken off the front of ``buffer`` (a partial one stays); ValueError on
    a frame over ``MAX_FRAME_BYTES``."""
    while len(buffer) >= 5:
        (n,) = struct.unpack(">I", buffer[1:5])
        if n > MAX_FRAME_BYTES:
            raise ValueError(f"a frame of {n} bytes (at most {MAX_FRAME_BYTES})")
        if len(buffer) < 5 + n:
            return
        kind, payload = bytes(buffer[:1]), bytes(buffer[5:5 + n])
        del buffer[:5 + n]
        yield kind, payload


def _signed(signer_secret: bytes, job: bytes, action: str, method: str, path: str,
            nonce: str, body: bytes) -> dict[str, str]:
    digest = request_digest(method, action, path, nonce, body)
    return sign_request(signer_secret, action, job, digest, int(time.time()))


def _exec_body(cmd: Sequence[str], tty: bool, stdin: bool) -> tuple[bytes, str]:
    if not cmd or not all(isinstance(c, str) for c in cmd):
        raise ValueError("cmd must be a non-empty list of strings")
    nonce = secrets.token_hex(16)
    body = json.dumps({"cmd": list(cmd), "nonce": nonce, "stdin": bool(stdin),
                       "tty": bool(tty)}, separators=(",", ":")).encode()
    if len(body) > MAX_CMD_BYTES:
        raise ValueError(f"the command is over {MAX_CMD_BYTES} bytes")
    return body, nonce


def exec_stream(endpoint: str, job: bytes, cmd: Sequence[str], signer_secret: bytes, *,
                timeout: float = 10.0, deadline_s: float | None = None
                ) -> Iterator[tuple[bytes, bytes]]:
    """Run ``cmd`` in the job's container without input or a terminal; yield its frames
    (``(b"o", bytes)``, ``(b"e", bytes)``, ``(b"!", message)``, finally ``(b"x", code)``).
    ``timeout`` bounds connecting and each wait for output; ``deadline_s`` the whole run.
    WorkerApiError on refusal or a broken stream."""
    base = normalize_endpoint(endpoint)
    body, nonce = _exec_body(cmd, False, False)
    headers = _signed(signer_secret, job, "exec", "POST", "", nonce, body)
    headers["Content-Type"] = "application/json"
    url = f"{base}/v1/jobs/{_job_b58(job)}/exec"
    end = None if deadline_s is None else time.monotonic() + deadline_s
    buf = bytearray()
    started = False
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout, read=None)) as client, \
                client.stream("POST", url, content=body, headers=headers) as response:
            if not response.is_success:
                response.read()
                raise _http_error(base, "run the command", response)
            started = True
            for chunk in response.iter_raw():
                buf.extend(chunk)
                for kind, payload in read_frames(buf):
                    yield kind, payload
                    if kind == b"x":
                        return
                if end is not None and time.monotonic() > end:
                    raise WorkerApiError(f"the command ran past {deadline_s:g} s; stopped "
                                         "waiting for it", endpoint=base)
    except httpx.TransportError as e:
        if not started:
            raise _unreachable(base, e) from None
        raise WorkerApiError(f"the connection to the worker at {base} broke: "
                             f"{str(e) or type(e).__name__}", endpoint=base) from None
    except ValueError as e:
        raise WorkerApiError(f"the worker at {base} sent a malformed stream: {e}",
                             endpoint=base) from None
    raise WorkerApiError(f"the worker at {base} ended the stream without an exit status",
                         endpoint=base)


class ExecTunnel:
    """An upgraded connection carrying frames both ways (see the module docstring)."""

    def __init__(self, sock: socket.socket, rest: bytes) -> None:
        self.sock = sock
        self.buffer = bytearray(rest)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send_input(self, data: bytes) -> None:
        for i in range(0, len(data), MAX_FRAME_BYTES):
            self.sock.sendall(frame(b"i", data[i:i + MAX_FRAME_BYTES]))

    def send_eof(self) -> None:
        self.sock.sendall(frame(b"c"))

    def send_winsize(self, rows: int, cols: int) -> None:
        self.sock.sendall(frame(b"w", struct.pack(">HH", min(rows, 65535), min(cols, 65535))))

    def receive(self) -> list[tuple[bytes, bytes]]:
        """The frames one read brings (blocks until data); [] at the end of the stream."""
        frames = list(read_frames(self.buffer))
        if frames:
            return frames
        data = self.sock.recv(1 << 16)
        if not data:
            return []
        self.buffer.extend(data)
        frames = list(read_frames(self.buffer))
        return frames or [(b"", b"")]  # a partial frame: nothing yet

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def open_exec_tunnel(endpoint: str, job: bytes, cmd: Sequence[str], signer_secret: bytes, *,
                     tty: bool, stdin: bool = True, winsize: tuple[int, int] | None = None,
                     timeout: float = 10.0) -> ExecTunnel:
    """Start ``cmd`` with input (and a terminal when ``tty``) and return the upgraded
    connection; ``timeout`` bounds connecting and the answer. WorkerApiError on refusal."""
    base = normalize_endpoint(endpoint)
    parts = urlsplit(base)
    body, nonce = _exec_body(cmd, tty, stdin)
    headers = _signed(signer_secret, job, "exec", "POST", "", nonce, body)
    path = f"{parts.path}/v1/jobs/{_job_b58(job)}/exec"
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    lines = [f"POST {quote(path)} HTTP/1.1", f"Host: {parts.netloc}",
             "Connection: Upgrade", f"Upgrade: {UPGRADE}", "Content-Type: application/json",
             f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
        if parts.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        sock.sendall(request)
        data = bytearray()
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk or len(data) > _HEAD_MAX:
                raise WorkerApiError(f"the worker at {base} closed the connection without an "
                                     "answer", endpoint=base)
            data.extend(chunk)
    except OSError as e:
        raise WorkerApiError(f"cannot reach the provider's worker at {base}: "
                             f"{e.strerror or e}", endpoint=base) from None
    head, _, rest = bytes(data).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(status_line.split()[1])
    except (IndexError, ValueError):
        sock.close()
        raise WorkerApiError(f"the worker at {base} sent a malformed answer", endpoint=base) \
            from None
    if status != 101:
        answer = _read_rest(sock, header_lines, rest, timeout)
        sock.close()
        response = httpx.Response(status, content=answer, request=httpx.Request("POST", base))
        raise _http_error(base, "run the command", response)
    sock.settimeout(None)
    tunnel = ExecTunnel(sock, rest)
    if winsize is not None:
        tunnel.send_winsize(*winsize)
    return tunnel


def _read_rest(sock: socket.socket, header_lines: list[str], rest: bytes,
               timeout: float) -> bytes:
    length = 0
    for line in header_lines:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = min(int(value.strip()), 1 << 20)
    data = bytearray(rest)
    end = time.monotonic() + timeout
    try:
        while len(data) < length and time.monotonic() < end:
            chunk = sock.recv(length - len(data))
            if not chunk:
                break
            data.extend(chunk)
    except OSError:
        pass
    return bytes(data)


# ----------------------------------------------------------------------------- files


def _files_url(base: str, job: bytes, path: str, nonce: str) -> str:
    return (f"{base}/v1/jobs/{_job_b58(job)}/files?path={quote(path, safe='/')}"
            f"&nonce={nonce}")


def upload(endpoint: str, job: bytes, local: str | os.PathLike[str], dest: str,
           signer_secret: bytes, *, timeout: float = 120.0) -> dict:
    """Copy the local file or directory ``local`` to ``dest`` in the job's container (like
    ``docker cp``: ``dest`` ending in ``/`` is a directory to put it in, otherwise its new
    path). ValueError for a bad path or an archive over ``MAX_UPLOAD_BYTES``;
    WorkerApiError when the worker refuses."""
    base = normalize_endpoint(endpoint)
    target = check_container_path(dest)
    if dest.endswith("/") or target == "/":
        directory, name = target, os.path.basename(os.path.normpath(os.fspath(local)))
    else:
        directory, name = str(PurePosixPath(target).parent), PurePosixPath(target).name
    if not os.path.exists(local):
        raise ValueError(f"{os.fspath(local)!r} does not exist")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(os.fspath(local), arcname=name)
    body = buf.getvalue()
    if len(body) > MAX_UPLOAD_BYTES:
        raise ValueError(f"{os.fspath(local)!r} makes a {len(body)} byte archive; one copy "
                         f"carries at most {MAX_UPLOAD_BYTES >> 20} MiB")
    nonce = secrets.token_hex(16)
    headers = _signed(signer_secret, job, "files", "PUT", directory, nonce, body)
    headers["Content-Type"] = "application/x-tar"
    try:
        with httpx.Client(timeout=timeout) as client:
            response = client.put(_files_url(base, job, directory, nonce), content=body,
                                  headers=headers)
    except httpx.TransportError as e:
        raise _unreachable(base, e) from None
    if not response.is_success:
        raise _http_error(base, "take the files", response)
    return {"path": f"{directory.rstrip('/')}/{name}", "bytes": len(body)}


def download(endpoint: str, job: bytes, src: str, local: str | os.PathLike[str],
             signer_secret: bytes, *, timeout: float = 120.0,
             max_bytes: int = 4 << 30) -> str:
    """Copy ``src`` (a file or directory in the job's container) to ``local`` (into it when
    it is an existing directory, else as that path); the local path written. The archive is
    unpacked with tarfile's "data" filter (no absolute paths, links out or devices)."""
    base = normalize_endpoint(endpoint)
    path = check_container_path(src)
    nonce = secrets.token_hex(16)
    headers = _signed(signer_secret, job, "files", "GET", path, nonce, b"")
    with tempfile.TemporaryFile() as spool:
        try:
            with httpx.Client(timeout=timeout) as client, \
                    client.stream("GET", _files_url(base, job, path, nonce),
                                  headers=headers) as response:
                if not response.is_success:
                    response.read()
                    raise _http_error(base, "send the files", response)
                for chunk in response.iter_bytes():
                    spool.write(chunk)
                    if spool.tell() > max_bytes:
                        raise WorkerApiError(f"{src} is over {max_bytes} bytes; copy less at "
                                             "once", endpoint=base)
        except httpx.TransportError as e:
            raise _unreachable(base, e) from None
        spool.seek(0)
        return _unpack(spool, local, src, base)


def _unpack(spool: IO[bytes], local: str | os.PathLike[str], src: str, base: str) -> str:
    local_path = os.fspath(local)
    into = os.path.isdir(local_path)
    directory = local_path if into else os.path.dirname(os.path.abspath(local_path))
    with tarfile.open(fileobj=spool, mode="r:") as tar:
        members = tar.getmembers()
        if not members:
            raise WorkerApiError(f"the worker sent an empty archive for {src}", endpoint=base)
        top = members[0].name.split("/", 1)[0]
        if not into:
            new = os.path.basename(os.path.abspath(local_path))
            for m in members:
                first, sep, tail = m.name.partition("/")
                if first == top:
                    m.name = new + sep + tail
            top = new
        tar.extractall(directory, members=members, filter="data")
    return os.path.join(directory, top)
