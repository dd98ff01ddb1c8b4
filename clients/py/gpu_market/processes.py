"""Local networks on 127.0.0.1: child processes, free ports, the local chain and stub servers.

What the demo (``gpu_market.demo``), the end-to-end tests (``tests/``) and the benchmarks
(``bench/``) build their networks from: ``Processes`` starts children each in its own process
group with its own log file in a work directory, and stops them all (reverse order, SIGTERM then
SIGKILL after 10 s); ``start_localnet`` starts ``gpum-localnet`` on a free port pair and returns
once it printed its ready line; ``wait_for_line`` and ``wait_http`` wait for a child to be
ready; ``JsonServer`` is an in-process JSON-over-HTTP server that stands in for a party.

Every failure to start or wait raises ``ProcessError``, whose message names the process and,
where there is one, the tail of its log.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = [
    "JsonServer",
    "LocalChain",
    "ProcessError",
    "Processes",
    "free_port",
    "free_port_pair",
    "localnet_binary",
    "start_localnet",
    "tool",
    "wait_for_line",
    "wait_http",
    "write_keypair",
]


class ProcessError(RuntimeError):
    """A process did not start, exited early or did not become ready; the message says which."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_pair() -> int:
    """A port P of 127.0.0.1 with P + 1 free too: ``gpum-localnet --port P`` serves PubSub on
    P + 1, where Solana clients look for it."""
    for _ in range(50):
        p = free_port()
        try:
            with socket.socket() as b:
                b.bind(("127.0.0.1", p + 1))
        except OSError:
            continue
        return p
    raise ProcessError("no two consecutive free ports on 127.0.0.1")


def localnet_binary() -> str:
    """The ``gpum-localnet`` binary: ``$GPUM_LOCALNET_BIN``, else the one on PATH."""
    path = os.environ.get("GPUM_LOCALNET_BIN") or shutil.which("gpum-localnet")
    if not path or not Path(path).exists():
        raise ProcessError(
            "gpum-localnet not found: run `make localnet` and set GPUM_LOCALNET_BIN, "
            "or use `make demo`"
        )
    return path


def tool(name: str) -> str:
    """A console script of the venv this interpreter runs in (gpum, gpum-worker, ...)."""
    candidate = Path(sys.executable).with_name(name)
    found = str(candidate) if candidate.exists() else shutil.which(name)
    if not found:
        raise ProcessError(f"{name} is not installed in this environment: run `make venv`")
    return found


@dataclass
class Processes:
    """Child processes, each in its own process group, stopped in reverse order."""

    workdir: Path
    children: list[tuple[str, subprocess.Popen]] = field(default_factory=list)
    logs: list[Any] = field(default_factory=list)

    def start(self, name: str, argv: list[str],
              env: Mapping[str, str] | None = None) -> subprocess.Popen:
        """Starts ``argv`` as ``name`` (log ``<name>.log``), with this process's environment
        plus ``env``."""
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop_all
        self.logs.append(log)
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=None if env is None else {**os.environ, **env},
        )
        self.children.append((name, proc))
        return proc

    def check_alive(self) -> None:
        for name, proc in self.children:
            if proc.poll() is not None:
                raise ProcessError(f"{name} exited with code {proc.returncode}: {self.tail(name)}")

    def tail(self, name: str, lines: int = 15) -> str:
        path = self.workdir / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop_all(self) -> None:
        for _name, proc in reversed(self.children):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for _name, proc in reversed(self.children):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for log in self.logs:
            log.close()


def wait_for_line(proc: subprocess.Popen, log: Path, needle: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        for line in text.splitlines():
            if needle in line:
                return line
        if proc.poll() is not None:
            raise ProcessError(f"{log.stem} exited with code {proc.returncode}:\n{text[-2000:]}")
        time.sleep(0.1)
    raise ProcessError(f"{log.stem} did not print {needle!r} within {timeout:.0f}s")


def wait_http(url: str, timeout: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise ProcessError(f"{url} did not answer within {timeout:.0f}s")


def write_keypair(path: Path, kp: Any) -> Path:
    path.write_text(json.dumps(list(bytes(kp))))
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class LocalChain:
    """A running ``gpum-localnet``: its JSON-RPC URL, its PubSub URL (RPC port + 1), the line
    it printed when ready and its log file."""

    url: str
    pubsub: str
    ready: str
    log: Path

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def start_localnet(procs: Processes, name: str = "localnet", timeout: float = 60) -> LocalChain:
    """Starts ``gpum-localnet`` under ``procs`` (log ``<name>.log``) on a free port pair and
    returns once it is ready to serve."""
    port = free_port_pair()
    proc = procs.start(name, [localnet_binary(), "--port", str(port)])
    log = procs.workdir / f"{name}.log"
    ready = wait_for_line(proc, log, "ready on", timeout=timeout)
    return LocalChain(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port + 1}", ready, log)


Answer = tuple[int, Any]
"""An HTTP status and the JSON body to send with it."""


class JsonServer:
    """A JSON-over-HTTP server on 127.0.0.1 (a free port unless ``port``), served by daemon
    threads until ``close``: each POST's JSON body goes to ``post(path, body)``, each GET to
    ``get(path)`` (without one, GET is answered 501), and the ``Answer`` they return is sent
    with its Content-Length. A stand-in for a party the code under test calls."""

    def __init__(self, post: Callable[[str, Any], Answer],
                 get: Callable[[str], Answer] | None = None, *, port: int = 0,
                 poll_interval: float = 0.05) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                if get is None:
                    self.send_error(501, f"Unsupported method ({self.command!r})")
                    return
                self._reply(*get(self.path))

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self._reply(*post(self.path, body))

            def _reply(self, status: int, answer: Any) -> None:
                raw = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_port)
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, args=(poll_interval,),
                         daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
