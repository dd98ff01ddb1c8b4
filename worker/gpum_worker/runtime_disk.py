"""The disk a job container uses: its /scratch volume and its writable layer.

``ScratchVolumes`` gives each container a /scratch of a hard size (an ext4 image,
loop-mounted; writing past it fails inside the container, never on the host's disk);
``dir_bytes`` measures what a container wrote outside its volumes, within a deadline.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time

from .errors import ContainerRuntimeError
from .runtime_argv import _NAME_RE, _check_name, _positive_mib, _tail_text

__all__ = [
    "ScratchVolumes",
]


def dir_bytes(path: str, deadline_s: float = 10.0) -> int:
    """Disk used by the files under ``path`` (allocated blocks, one filesystem, links not
    followed); what was counted by ``deadline_s`` when the tree is larger than that allows."""
    end = time.monotonic() + deadline_s
    total, stack = 0, [path]
    try:
        dev = os.lstat(path).st_dev
    except OSError:
        return 0
    while stack and time.monotonic() < end:
        try:
            with os.scandir(stack.pop()) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_dev != dev:
                continue
            total += st.st_blocks * 512
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
    return total



# ------------------------------------------------------------------------- scratch volumes


def _unescape_mount(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def mount_points(mountinfo: str) -> set[str]:
    """Mount points listed in a /proc/<pid>/mountinfo text."""
    out = set()
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            out.add(_unescape_mount(fields[4]))
    return out


def scratch_image_mib(size_mib: int) -> int:
    """Size of the filesystem image that gives at least ``size_mib`` MiB of free space
    (ext4's metadata and journal take a few percent)."""
    return size_mib + size_mib // 16 + 16


class ScratchVolumes:
    """Disk-backed /scratch volumes with a hard size, one per container name.

    ``ensure(name, size_mib)`` makes ``<root>/<name>.img`` (a sparse file: only what the
    container writes takes disk), an ext4 filesystem of ``scratch_image_mib(size_mib)``,
    loop-mounted (nosuid, nodev) at ``<root>/<name>`` with mode 1777 (any user of the
    image may write), and returns that directory. Idempotent: a mounted volume is
    returned as it is, an image left unmounted (a host reboot) is mounted again with its
    data. ``release(name)`` unmounts it and deletes the image; ``detach(name)`` unmounts it
    and keeps the image (its data stays for a later ``ensure``). Unmounting frees the loop
    device (``mount -o loop`` sets it to clear itself); a volume still in use (a container
    that holds it) is detached lazily (``umount -l``): gone from the host at once, its loop
    device freed when the last user ends. Needs root (loop devices) and mkfs.ext4
    (e2fsprogs); errors are ``ContainerRuntimeError`` saying so.
    """

    def __init__(self, root: str | os.PathLike[str], *, timeout_s: float = 300.0,
                 mountinfo: str = "/proc/self/mountinfo") -> None:
        self.root = os.path.abspath(root)
        self.timeout_s = timeout_s
        self._mountinfo = mountinfo

    def path(self, name: str) -> str:
        return os.path.join(self.root, _check_name(name))

    def _mounted(self, path: str) -> bool:
        try:
            with open(self._mountinfo) as f:
                return path in mount_points(f.read())
        except OSError:
            return os.path.ismount(path)

    def _run(self, *argv: str) -> None:
        tool = shutil.which(argv[0], path=os.environ.get("PATH", os.defpath)
                            + ":/usr/sbin:/sbin")
        if tool is None:
            raise ContainerRuntimeError(
                f"{argv[0]} not found: a disk-backed /scratch needs it (apt-get install "
                f"{'e2fsprogs' if argv[0].startswith('mkfs') else 'mount'})")
        try:
            proc = subprocess.run([tool, *argv[1:]], stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise ContainerRuntimeError(
                f"`{argv[0]}` did not finish within {self.timeout_s:g} s") from None
        if proc.returncode != 0:
            text = _tail_text(proc.stderr or proc.stdout, 500)
            hint = (" (a disk-backed /scratch needs root and loop devices: run the worker as "
                    "root)" if argv[0] == "mount" else "")
            raise ContainerRuntimeError(
                f"`{' '.join(argv[:2])}` failed (exit status {proc.returncode}): "
                f"{text or 'no output'}{hint}")

    def ensure(self, name: str, size_mib: int) -> str:
        path = self.path(name)
        size = _positive_mib("scratch size", size_mib)
        assert size is not None
        if self._mounted(path):
            return path
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        image = path + ".img"
        if not os.path.exists(image):
            part = image + ".part"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, scratch_image_mib(size) << 20)
            finally:
                os.close(fd)
            try:
                self._run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner=0:0", part)
            except ContainerRuntimeError:
                with contextlib.suppress(OSError):
                    os.unlink(part)
                raise
            os.replace(part, image)
        os.makedirs(path, mode=0o755, exist_ok=True)
        self._run("mount", "-o", "loop,nosuid,nodev", image, path)
        os.chmod(path, 0o1777)
        return path

    def detach(self, name: str) -> bool:
        """Unmount ``name``'s volume, keeping its image; False when it was not mounted."""
        path = self.path(name)
        if not self._mounted(path):
            return False
        try:
            self._run("umount", path)
        except ContainerRuntimeError:
            self._run("umount", "-l", path)  # busy: detach now, freed when unused
        return True

    def mounted(self) -> set[str]:
        """Names whose volume is mounted now."""
        try:
            with open(self._mountinfo) as f:
                points = mount_points(f.read())
        except OSError:
            return {n for n in self.names() if os.path.ismount(self.path(n))}
        return {n for n in self.names() if self.path(n) in points}

    def release(self, name: str) -> None:
        path = self.path(name)
        self.detach(name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + ".img")
        with contextlib.suppress(FileNotFoundError, OSError):
            os.rmdir(path)

    def names(self) -> set[str]:
        """Names that have a volume (an image or a mount point)."""
        try:
            entries = os.listdir(self.root)
        except FileNotFoundError:
            return set()
        out = set()
        for e in entries:
            base = e.removesuffix(".img")
            if _NAME_RE.fullmatch(base) and not e.endswith(".part"):
                out.add(base)
        return out

