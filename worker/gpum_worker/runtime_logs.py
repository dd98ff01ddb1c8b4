"""Reading a container's log: a bounded tail of a finished read, or a live stream.

``LogTail`` keeps the last bytes of a stream fed in pieces, each line cut at a bound;
``read_capped`` runs a ``logs`` CLI call under a deadline through one; ``LogStream`` is a
``logs -f`` child process read a line at a time, killed when closed. Whatever a container
wrote, a read holds at most about twice its byte bound in memory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import final

from .errors import ContainerRuntimeError

__all__ = [
    "LogStream",
    "LogTail",
]

log = logging.getLogger("gpum_worker.runtime")

_LOG_CHUNK = 64 * 1024


@final
class LogTail:
    """The last ``max_bytes`` of a byte stream fed in pieces, each line cut at
    ``max_line_bytes`` (its first bytes kept, then ``CUT_MARK``). Holds at most about
    ``2 * max_bytes`` whatever is fed. When the oldest output was dropped, ``value`` starts
    at a line boundary (unless that would leave nothing)."""

    CUT_MARK = b" [gpum: line cut]"

    def __init__(self, max_bytes: int, max_line_bytes: int) -> None:
        for what, v in (("max_bytes", max_bytes), ("max_line_bytes", max_line_bytes)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ContainerRuntimeError(f"{what} must be a positive integer, got {v!r}")
        self.max_bytes = max_bytes
        self.max_line = max_line_bytes
        self._buf = bytearray()
        self._line = 0  # bytes of the current line kept so far
        self._cut = False  # the current line was cut
        self._dropped = False

    def feed(self, chunk: bytes) -> None:
        pos, n = 0, len(chunk)
        while pos < n:
            nl = chunk.find(b"\n", pos)
            end = n if nl < 0 else nl
            room = self.max_line - self._line
            take = min(end - pos, max(0, room))
            if take:
                self._buf += chunk[pos:pos + take]
                self._line += take
            if end - pos > take and not self._cut:
                self._cut = True
                self._buf += self.CUT_MARK
            if nl < 0:
                break
            self._buf += b"\n"
            self._line, self._cut = 0, False
            pos = nl + 1
        if len(self._buf) > 2 * self.max_bytes:
            del self._buf[: len(self._buf) - self.max_bytes]
            self._dropped = True

    def value(self) -> bytes:
        data = bytes(self._buf[-self.max_bytes:])
        if self._dropped or len(self._buf) > self.max_bytes:
            nl = data.find(b"\n")
            if 0 <= nl < len(data) - 1:
                data = data[nl + 1:]
        return data


def read_capped(argv: Sequence[str], env: Mapping[str, str], *, max_bytes: int,
                deadline_s: float, max_line_bytes: int) -> tuple[bytes, int | None, bool]:
    """Run ``argv`` (stdout and stderr merged) and keep the tail of its output in a
    ``LogTail``; kill it at ``deadline_s``. Returns (output, exit status or None when
    killed, whether the deadline cut it)."""
    tail = LogTail(max_bytes, max_line_bytes)
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=dict(env))
    except OSError as e:
        raise ContainerRuntimeError(f"cannot execute {argv[0]}: {e.strerror or e}") from None
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    end = time.monotonic() + max(0.0, deadline_s)
    cut = False
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0:
                cut = True
                break
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, _LOG_CHUNK)
            if not chunk:
                break
            tail.feed(chunk)
    finally:
        if proc.poll() is None and cut:
            with contextlib.suppress(OSError):
                proc.kill()
        try:
            rc: int | None = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                proc.kill()
            rc = None
        proc.stdout.close()
    return tail.value(), (None if cut else rc), cut



@final
class LogStream(Iterator[bytes]):
    """The output of a ``<runtime> logs -f`` child process, a line at a time.

    Each item ends at a newline unless the line is longer than 64 KiB (then it comes in
    64 KiB pieces) or it is the last, unterminated line. Iteration ends when the container
    stops (the CLI exits) or after ``close``. ``close`` (also on ``with`` exit and garbage
    collection) kills the child process and waits for it; it may be called from another
    thread to end a blocked iteration.
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        self._argv = list(argv)
        self._closed = False
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                self._argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, env=dict(env))
        except OSError as e:
            self._proc = None
            raise ContainerRuntimeError(f"cannot start `{' '.join(self._argv[:2])}`: "
                                        f"{e.strerror or e}") from None

    @property
    def pid(self) -> int | None:
        """PID of the CLI child process (None once closed)."""
        return None if self._closed or self._proc is None else self._proc.pid

    def __iter__(self) -> LogStream:
        return self

    def __next__(self) -> bytes:
        proc = self._proc
        if self._closed or proc is None or proc.stdout is None:
            raise StopIteration
        try:
            chunk = proc.stdout.readline(_LOG_CHUNK)
        except (ValueError, OSError):  # closed from another thread
            chunk = b""
        if chunk:
            return chunk
        rc = proc.wait()
        if rc != 0 and not self._closed:
            log.debug("`%s` exited with status %d", " ".join(self._argv[:3]), rc)
        self.close()
        raise StopIteration

    def close(self) -> None:
        """Kill the child process (if still running) and release its pipe. Idempotent."""
        if self._closed:
            return
        self._closed = True
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("`%s` (pid %d) did not exit after SIGKILL", self._argv[1], proc.pid)
        if proc.stdout is not None:
            try:
                proc.stdout.close()
            except OSError:
                pass

    def __enter__(self) -> LogStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # never raise from a finaliser
            self.close()
