"""A tiny busybox container image built on this machine: no registry, no network.

``build_busybox_image`` packs the host's statically linked ``/bin/busybox`` (Debian's
``busybox-static``) into a root filesystem tarball and imports it with ``podman import``
(or ``docker import``). The tests of the container runtime and the project's demo run
their workloads in it. The image has:

* ``/bin/busybox`` and symlinks for the applets in ``APPLETS`` (sh, echo, httpd, ...);
* ``/www/index.html`` (so ``httpd -f -p 8080 -h /www`` serves a page out of the box),
  ``/etc/passwd`` and ``/etc/group`` with root and nobody, ``/tmp`` (mode 1777);
* ``CMD ["/bin/sh"]`` and ``PATH=/bin``.

The tarball is reproducible (fixed owners and timestamps), so rebuilding it from the same
busybox gives the same layer.
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .errors import ContainerRuntimeError

DEFAULT_TAG = "localhost/gpum-busybox:1"

APPLETS = ("sh", "echo", "cat", "sleep", "httpd", "nc", "ls", "env", "date", "true",
           "false", "printf", "wget", "head", "tail", "grep", "kill", "ps", "mkdir", "rm",
           "seq", "id", "wc", "test", "tee")
"""Commands linked to busybox in the image's /bin."""

INDEX_HTML = b"gpum busybox image: ok\n"
"""The content of /www/index.html."""

_BUSYBOX_HINT = "install Debian's busybox-static (apt-get install busybox-static)"
_PT_INTERP = 3


def is_static_elf(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is an ELF executable without a program interpreter (PT_INTERP),
    i.e. it runs with no shared library from the host. Raises ``ValueError`` if it is not
    ELF at all; ``OSError`` if it cannot be read."""
    with open(path, "rb") as f:
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF":
            raise ValueError(f"{path} is not an ELF executable")
        ei_class, ei_data = ident[4], ident[5]
        if ei_class not in (1, 2) or ei_data not in (1, 2):
            raise ValueError(f"{path}: unknown ELF class/encoding")
        endian = "<" if ei_data == 1 else ">"
        if ei_class == 2:
            header = f.read(48)
            fmt = endian + "HHIQQQIHHHHHH"
        else:
            header = f.read(36)
            fmt = endian + "HHIIIIIHHHHHH"
        if len(header) < struct.calcsize(fmt):
            raise ValueError(f"{path}: truncated ELF header")
        fields = struct.unpack(fmt, header)
        phoff, phentsize, phnum = fields[4], fields[8], fields[9]
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            raw = f.read(4)
            if len(raw) < 4:
                raise ValueError(f"{path}: truncated ELF program headers")
            if struct.unpack(endian + "I", raw)[0] == _PT_INTERP:
                return False
    return True


def _check_busybox(busybox: Path) -> None:
    if not busybox.is_file():
        raise ContainerRuntimeError(f"{busybox} not found: {_BUSYBOX_HINT}")
    try:
        static = is_static_elf(busybox)
    except (OSError, ValueError) as e:
        raise ContainerRuntimeError(f"{busybox} is not a usable busybox ({e}): "
                                    f"{_BUSYBOX_HINT}") from None
    if not static:
        raise ContainerRuntimeError(
            f"{busybox} is dynamically linked, so it cannot run in an empty image: "
            f"{_BUSYBOX_HINT}")


def _add(tar: tarfile.TarFile, name: str, *, kind: bytes = tarfile.REGTYPE,
         mode: int = 0o644, data: bytes = b"", link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    if kind == tarfile.SYMTYPE:
        info.linkname = link
        tar.addfile(info)
    elif kind == tarfile.DIRTYPE:
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def write_rootfs(dest: str | os.PathLike[str], busybox: str | os.PathLike[str] = "/bin/busybox"
                 ) -> None:
    """Write the image's root filesystem as an uncompressed tarball to ``dest``."""
    data = Path(busybox).read_bytes()
    with tarfile.open(dest, "w", format=tarfile.GNU_FORMAT) as tar:
        for d, mode in (("bin", 0o755), ("dev", 0o755), ("etc", 0o755), ("proc", 0o555),
                        ("root", 0o700), ("sys", 0o555), ("tmp", 0o1777), ("www", 0o755)):
            _add(tar, d, kind=tarfile.DIRTYPE, mode=mode)
        _add(tar, "bin/busybox", mode=0o755, data=data)
        for applet in APPLETS:
            _add(tar, f"bin/{applet}", kind=tarfile.SYMTYPE, mode=0o777, link="busybox")
        _add(tar, "etc/passwd",
             data=b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
        _add(tar, "etc/group", data=b"root:x:0:\nnogroup:x:65534:\n")
        _add(tar, "www/index.html", data=INDEX_HTML)


def build_busybox_image(tag: str = DEFAULT_TAG, *, runtime_bin: str = "podman",
                        extra_env: Mapping[str, str] | None = None,
                        busybox: str | os.PathLike[str] = "/bin/busybox",
                        timeout_s: float = 120.0) -> str:
    """Make sure image ``tag`` exists, building it from the host's busybox if not; return
    ``tag``.

    ``runtime_bin`` is ``podman`` or ``docker`` (a name on PATH or a path; the verbs are the
    same); ``extra_env`` is merged over ``os.environ`` for the CLI (e.g. CONTAINERS_CONF).
    Idempotent: an existing image with that tag is kept as it is. Needs no registry and
    no network. Raises ``ContainerRuntimeError`` when busybox is missing or dynamically
    linked ("install Debian's busybox-static"), or when the CLI fails.
    """
    env = dict(os.environ)
    env.update(extra_env or {})
    cli = shutil.which(runtime_bin, path=env.get("PATH", os.defpath))
    if cli is None:
        raise ContainerRuntimeError(
            f"{runtime_bin!r} not found on PATH: install podman (with runc) or docker")

    def call(*args: str) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run([cli, *args], stdin=subprocess.DEVNULL, capture_output=True,
                                  env=env, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise ContainerRuntimeError(
                f"`{runtime_bin} {args[0]}` did not finish within {timeout_s:g} s") from None

    if call("image", "inspect", tag).returncode == 0:
        return tag
    bb = Path(busybox)
    _check_busybox(bb)
    with tempfile.TemporaryDirectory(prefix="gpum-busybox-") as tmp:
        rootfs = os.path.join(tmp, "rootfs.tar")
        write_rootfs(rootfs, bb)
        proc = call("import", "--change", 'CMD ["/bin/sh"]', "--change", "ENV PATH=/bin",
                    rootfs, tag)
    if proc.returncode != 0:
        text = proc.stderr.decode("utf-8", "replace").strip()[-1500:]
        raise ContainerRuntimeError(
            f"`{runtime_bin} import` of the busybox image {tag} failed "
            f"(exit status {proc.returncode}): {text or 'no output'}")
    return tag
