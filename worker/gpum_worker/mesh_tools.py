"""The host tools a cluster node's mesh runs, and the process and file helpers around them
(:mod:`gpum_worker.mesh`): every program runs with a timeout and an argument list (never a
shell), and every failure is a ``MeshError`` saying what failed and what to do."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["INSTALL_HINT", "STOP_WAIT_S", "TOOL_TIMEOUT_S", "MeshError", "Tools", "inode",
           "is_wireguard_go", "kill_pid", "kill_stale", "stop", "tail", "udp_free",
           "write_private"]

TOOL_TIMEOUT_S = 10.0
"""Each ``ip``, ``wg`` or ``nsenter`` call ends by then (it is killed)."""
STOP_WAIT_S = 3.0
INSTALL_HINT = ("install the Debian packages wireguard-tools, wireguard-go, nftables, iproute2 "
                "and util-linux (apt-get install --no-install-recommends wireguard-tools "
                "wireguard-go nftables)")


class MeshError(Exception):
    """The mesh could not be made or configured (the message says what to do)."""


def udp_free(port: int) -> bool:
    """Whether this host's UDP ``port`` is free (IPv4 and, where there is IPv6, IPv6)."""
    families = [(socket.AF_INET, "0.0.0.0")]
    if socket.has_ipv6:
        families.append((socket.AF_INET6, "::"))
    for family, addr in families:
        try:
            s = socket.socket(family, socket.SOCK_DGRAM)
        except OSError:
            continue  # no such family on this host
        try:
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((addr, port))
        except OSError as e:
            if family == socket.AF_INET or e.errno == errno.EADDRINUSE:
                return False
            # IPv6 switched off on this host: only IPv4 counts
        finally:
            s.close()
    return True


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (mode 0600) atomically."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def tail(data: bytes | str | None, limit: int = 600) -> str:
    text = (data.decode("utf-8", "replace") if isinstance(data, bytes) else data or "").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


class Tools:
    """The programs the mesh runs, found on PATH; MeshError naming the package otherwise."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or os.environ.get("PATH", os.defpath)
        self._found: dict[str, str] = {}

    def which(self, name: str) -> str:
        found = self._found.get(name) or shutil.which(name, path=self.path)
        if found is None:
            raise MeshError(f"{name} is not installed on this host: {INSTALL_HINT}")
        self._found[name] = found
        return found

    def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
            timeout_s: float = TOOL_TIMEOUT_S, check: bool = True
            ) -> subprocess.CompletedProcess[bytes]:
        """Run ``argv`` (its program looked up first); MeshError on a timeout, a spawn
        error or (with ``check``) a non-zero exit, with the program's own error text."""
        exe = self.which(argv[0])
        try:
            proc = subprocess.run([exe, *argv[1:]], input=stdin if stdin is not None else b"",
                                  capture_output=True, timeout=timeout_s, check=False,
                                  env={"PATH": self.path, "LC_ALL": "C"})
        except subprocess.TimeoutExpired:
            raise MeshError(f"`{' '.join(argv[:3])}` did not finish within "
                            f"{timeout_s:g} s") from None
        except OSError as e:
            raise MeshError(f"cannot run {exe}: {e.strerror or e}") from None
        if check and proc.returncode != 0:
            raise MeshError(f"`{' '.join(argv[:4])}` failed (exit status {proc.returncode}): "
                            f"{tail(proc.stderr) or tail(proc.stdout) or 'no output'}")
        return proc


def inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def is_wireguard_go(pid: int, name: str) -> bool:
    """Whether process ``pid`` is wireguard-go for device ``name`` (not a reused pid)."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return bool(argv) and os.path.basename(argv[0]) == b"wireguard-go" \
        and name.encode() in argv[1:]


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_WAIT_S)


def kill_pid(pid: int) -> None:
    """SIGTERM a wireguard-go this worker did not start (a previous run's), SIGKILL after
    ``STOP_WAIT_S``."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        if not os.path.exists(f"/proc/{pid}") or zombie(pid):
            return
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True


def kill_stale(sock: Path, name: str) -> None:
    """A control socket of ``name`` left by a wireguard-go this worker does not track: stop
    the process that serves it (found by its command line) and remove the socket."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and is_wireguard_go(int(entry), name):
            kill_pid(int(entry))
    try:
        sock.unlink()
    except FileNotFoundError:
        pass
