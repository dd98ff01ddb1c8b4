"""Commands and file copies in a job's running container, for the worker API
(``gpum job exec`` / ``gpum job cp``; the wire format is ``gpu_market.exec_api``'s).

* ``ReplayGuard`` remembers every accepted signature until its timestamp is out of the
  signing window, so a signed exec or copy is served once.
* ``ExecProcess`` runs ``podman exec`` (the runtime's ``exec_argv``): with pipes, or under
  a pseudo-terminal of its own (``tty``) whose window size the client sets. It yields frames
  (output, then the exit status) and takes the client's frames (input, end of input, window
  size). It ends at the command's exit, at ``deadline_s`` (killed; status 124) or, without a
  terminal, past ``max_output`` bytes of output (killed; status 125).
* ``copy_in`` / ``open_copy_out``: ``podman cp`` with the container's ``NAME:PATH`` only, so
  every path resolves inside the container's root; uploads are checked tar archives.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import queue
import signal
import struct
import subprocess
import tarfile
import termios
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

from gpu_market.exec_api import MAX_FRAME_BYTES, frame, read_frames
from gpu_market.workload import REQUEST_MAX_SKEW_S

__all__ = ["ExecProcess", "ReplayGuard", "check_tar", "copy_in", "open_copy_out"]

EXEC_DEADLINE_S = 6 * 3600.0
"""The longest one exec session runs."""
MAX_OUTPUT_BYTES = 256 << 20
"""Output of one command without a terminal; more kills it."""
_INPUT_QUEUE = 256
_MAX_TAR_MEMBERS = 100_000


class ReplayGuard:
    """Signatures seen in the signing window (``REQUEST_MAX_SKEW_S`` either side of now),
    at most ``max_per_signer`` for each signer (a job's user), so one user cannot crowd out
    another: ``admit`` is True once per signature, False for a replay, None when that
    signer has ``max_per_signer`` live ones (the caller answers retry later)."""

    def __init__(self, max_per_signer: int = 4096,
                 clock: Callable[[], float] = time.time) -> None:
        self.max_per_signer = max_per_signer
        self.clock = clock
        self._seen: dict[str, OrderedDict[str, float]] = {}
        self._calls = 0
        self._lock = threading.Lock()

    def admit(self, signer: str, signature: str, timestamp: int) -> bool | None:
        now = self.clock()
        with self._lock:
            self._calls += 1
            for who in list(self._seen) if self._calls % 1024 == 0 else [signer]:
                seen = self._seen.get(who)
                if seen is None:
                    continue
                for sig in [k for k, until in seen.items() if until < now]:
                    del seen[sig]
                if not seen:
                    del self._seen[who]
            seen = self._seen.setdefault(signer, OrderedDict())
            if signature in seen:
                return False
            if len(seen) >= self.max_per_signer:
                return None
            # Kept until its timestamp can no longer verify.
            seen[signature] = max(now, timestamp) + REQUEST_MAX_SKEW_S + 1
            return True


class ExecProcess:
    """One ``podman exec``; iterate for the frames to send, ``feed`` the client's bytes,
    ``close`` to end it (kills the command if it still runs)."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], *, tty: bool, stdin: bool,
                 deadline_s: float = EXEC_DEADLINE_S,
                 max_output: int = MAX_OUTPUT_BYTES) -> None:
        self.tty = tty
        self.deadline = time.monotonic() + deadline_s
        self.max_output = max_output
        self._out: queue.Queue[tuple[bytes, bytes]] = queue.Queue(64)
        """Output frames; ``(b"", b"")`` when a reader reached its end."""
        self._in: queue.Queue[tuple[bytes, bytes] | None] = queue.Queue(_INPUT_QUEUE)
        self._buf = bytearray()
        self._closed = threading.Event()
        self._master: int | None = None
        if tty:
            master, slave = os.openpty()
            self._master = master
            _set_winsize(master, 24, 80)
            try:
                # _take_terminal makes one ioctl and takes no lock: safe in a forked child
                # of a threaded process.
                self.proc = subprocess.Popen(
                    list(argv), stdin=slave, stdout=slave, stderr=slave, env=env,
                    start_new_session=True, preexec_fn=_take_terminal,  # noqa: PLW1509
                    close_fds=True)
            finally:
                os.close(slave)
            readers = [(b"o", master)]
        else:
            self.proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                start_new_session=True)
            assert self.proc.stdout is not None and self.proc.stderr is not None
            readers = [(b"o", self.proc.stdout.fileno()), (b"e", self.proc.stderr.fileno())]
        self._readers = [threading.Thread(target=self._read, args=(k, fd), daemon=True,
                                          name="exec-out") for k, fd in readers]
        for t in self._readers:
            t.start()
        if tty or stdin:
            threading.Thread(target=self._write, daemon=True, name="exec-in").start()

    # -- output

    def _read(self, kind: bytes, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, MAX_FRAME_BYTES)
            except OSError:  # EIO: the terminal's last holder is gone
                data = b""
            if not data:
                self._put((b"", b""))  # this reader is done
                return
            if not self._put((kind, data)):
                return

    def _put(self, item: tuple[bytes, bytes]) -> bool:
        while not self._closed.is_set():
            try:
                self._out.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[bytes]:
        sent = 0
        open_readers = len(self._readers)
        while open_readers:
            left = self.deadline - time.monotonic()
            if left <= 0:
                yield from self._stop(124, "the command ran past the exec time limit; "
                                           "stopped")
                return
            try:
                item = self._out.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if not item[0]:
                open_readers -= 1
                continue
            sent += len(item[1])
            yield frame(*item)
            if not self.tty and sent > self.max_output:
                yield from self._stop(125, f"the command wrote over {self.max_output} bytes; "
                                           "stopped (redirect its output to a file and copy "
                                           "that with `gpum job cp`)")
                return
        try:
            code = self.proc.wait(timeout=max(self.deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            yield from self._stop(124, "the command ran past the exec time limit; stopped")
            return
        yield frame(b"x", str(code if code >= 0 else 128 - code).encode())

    def _stop(self, code: int, why: str) -> Iterator[bytes]:
        self._kill()
        yield frame(b"!", why.encode())
        yield frame(b"x", str(code).encode())

    # -- input

    def feed(self, data: bytes) -> bool:
        """Take the client's bytes (whole or partial frames); False ends the session (a
        malformed frame, or input arriving faster than the command reads it)."""
        self._buf.extend(data)
        try:
            for kind, payload in read_frames(self._buf):
                if kind == b"w" and len(payload) == 4 and self._master is not None:
                    rows, cols = struct.unpack(">HH", payload)
                    _set_winsize(self._master, rows, cols)
                elif kind in (b"i", b"c"):
                    self._in.put_nowait((kind, payload))
                elif kind != b"w":
                    return False
        except (ValueError, queue.Full):
            return False
        return True

    def _write(self) -> None:
        fd = self._master if self._master is not None else self.proc.stdin.fileno()  # type: ignore[union-attr]
        while not self._closed.is_set():
            try:
                item = self._in.get(timeout=0.5)
            except queue.Empty:
                continue
            if item is None:
                return
            kind, payload = item
            try:
                if kind == b"c":
                    if self._master is not None:
                        os.write(fd, b"\x04")  # end of input on a terminal: ^D
                    else:
                        self.proc.stdin.close()  # type: ignore[union-attr]
                        return
                else:
                    view = memoryview(payload)
                    while view:
                        view = view[os.write(fd, view):]
            except (OSError, ValueError):
                return

    # -- end

    def _kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=2)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._kill()
        with contextlib.suppress(queue.Full):
            self._in.put_nowait(None)
        if self._master is not None:
            with contextlib.suppress(OSError):
                os.close(self._master)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _take_terminal() -> None:
    """In the child, after setsid: its stdin (the pty's slave) becomes its controlling
    terminal, so window size changes reach it (SIGWINCH)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _set_winsize(fd: int, rows: int, cols: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


# ----------------------------------------------------------------------------- copies


def check_tar(body: bytes) -> int:
    """The number of members of the tar archive ``body``; ValueError when it is not one, or
    a member is absolute, has ``..``, or is a device, fifo or other special file."""
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
            n = 0
            for m in tar:
                n += 1
                if n > _MAX_TAR_MEMBERS:
                    raise ValueError(f"the archive has over {_MAX_TAR_MEMBERS} entries")
                if m.name.startswith("/") or ".." in m.name.split("/"):
                    raise ValueError(f"archive entry {m.name[:200]!r} leaves its directory")
                if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
                    raise ValueError(f"archive entry {m.name[:200]!r} is a special file")
                if m.islnk() and (m.linkname.startswith("/")
                                  or ".." in m.linkname.split("/")):
                    raise ValueError(f"archive entry {m.name[:200]!r} links out of it")
            return n
    except tarfile.TarError as e:
        raise ValueError(f"the body is not a tar archive ({e})") from None


def copy_in(argv: Sequence[str], env: dict[str, str], body: bytes,
            timeout_s: float = 120.0) -> None:
    """Feed the archive to ``podman cp - NAME:DIR``; RuntimeError with its message."""
    try:
        proc = subprocess.run(list(argv), input=body, capture_output=True, env=env,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the copy did not finish within {timeout_s:g} s") from None
    if proc.returncode != 0:
        raise RuntimeError(_cp_error(proc.stderr))


class _CopyOut:
    """The tar stream of ``podman cp NAME:PATH -``, at most ``max_bytes``, ended by
    ``deadline_s``; ``close`` stops it."""

    def __init__(self, proc: subprocess.Popen[bytes], first: bytes, max_bytes: int,
                 deadline_s: float) -> None:
        self.proc = proc
        self.first = first
        self.max_bytes = max_bytes
        self.deadline = time.monotonic() + deadline_s

    def __iter__(self) -> Iterator[bytes]:
        assert self.proc.stdout is not None
        sent = len(self.first)
        yield self.first
        while sent <= self.max_bytes and time.monotonic() < self.deadline:
            data = self.proc.stdout.read1(1 << 16)
            if not data:
                return
            sent += len(data)
            yield data

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for s in (self.proc.stdout, self.proc.stderr):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()


def open_copy_out(argv: Sequence[str], env: dict[str, str], *, max_bytes: int,
                  deadline_s: float) -> _CopyOut:
    """Start ``podman cp NAME:PATH -``; its stream once the first bytes came, RuntimeError
    with podman's message when it fails first (no such path)."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.read1(1 << 16)
    if not first:
        try:
            err = proc.stderr.read(4096)
            proc.wait(timeout=10)
        finally:
            proc.stdout.close()
            proc.stderr.close()
        raise RuntimeError(_cp_error(err))
    return _CopyOut(proc, first, max_bytes, deadline_s)


def _cp_error(stderr: bytes) -> str:
    text = stderr.decode("utf-8", "replace").strip().splitlines()
    return (text[-1] if text else "podman cp failed")[:500]
