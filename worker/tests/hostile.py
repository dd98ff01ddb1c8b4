"""Hostile HTTP peers for tests: real TCP servers on 127.0.0.1 that answer too slowly.

``TrickleServer`` reads each request completely, then answers according to its mode for
that method: ``"trickle"`` sends a valid status line one byte every ``every`` seconds and
never finishes; ``"reset"`` closes the connection without an answer; ``"health"`` answers
``GET /health`` with 200 (anything else 404); ``"job_unknown"`` answers 404 ``{"error": "job_unknown"}`` at once (a
member that stores nothing for the job); ``"accept"`` answers 200 ``{"status":
"accepted"}`` at once (batch requests get one result per proof). It counts requests per
method and path.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter


class TrickleServer:
    def __init__(self, host: str = "127.0.0.1", *, get: str = "trickle",
                 post: str = "trickle", every: float = 0.5) -> None:
        self.modes = {"GET": get, "POST": post}
        self.every = every
        self.requests: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(256)
        self._sock.settimeout(0.2)
        self.url = f"http://{host}:{self._sock.getsockname()[1]}"
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def count(self, method: str, path_part: str = "") -> int:
        with self._lock:
            return sum(n for (m, p), n in self.requests.items() if m == method and path_part in p)

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()
        for c in list(self._conns):
            try:
                c.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            self._conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        c.settimeout(0.5)
        buf = b""
        try:
            while not self._stop.is_set():
                while b"\r\n\r\n" not in buf:
                    try:
                        chunk = c.recv(65536)
                    except TimeoutError:
                        if self._stop.is_set():
                            return
                        continue
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                while len(buf) < length:
                    try:
                        chunk = c.recv(65536)
                    except TimeoutError:
                        continue
                    if not chunk:
                        return
                    buf += chunk
                body, buf = buf[:length], buf[length:]
                with self._lock:
                    self.requests[(method, path)] += 1
                mode = self.modes.get(method, "trickle")
                if mode == "trickle":
                    self._trickle(c)
                    return
                if mode == "reset":
                    return
                if mode == "health":
                    ok = path == "/health"
                    c.sendall(_answer(200 if ok else 404, {"ok": ok}))
                elif mode == "job_unknown":
                    c.sendall(_answer(404, {"error": "job_unknown", "message": "nothing"}))
                elif mode == "accept":
                    obj: dict = {"status": "accepted"}
                    if path.endswith("/batch"):
                        n = len(json.loads(body).get("proofs", []))
                        obj = {"results": [{"status": "accepted"}] * n}
                    c.sendall(_answer(200, obj))
        except OSError:
            return
        finally:
            c.close()

    def _trickle(self, c: socket.socket) -> None:
        line = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: "
        i = 0
        while not self._stop.wait(self.every):
            b = line[i:i + 1] if i < len(line) else b"a"
            i += 1
            c.sendall(b)


def _answer(status: int, obj: dict) -> bytes:
    body = json.dumps(obj).encode()
    return (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def wait_for(what: str, fn, timeout: float, step: float = 0.1):
    """Poll ``fn`` until it returns something truthy; AssertionError naming ``what``."""
    end = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() >= end:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(step)
