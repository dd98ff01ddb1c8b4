"""Cluster node images built from this machine's files: no registry, no network at build time
(``make demo-cluster``, the cluster e2e tests, ``bench/cluster.py``).

Two images, each a root filesystem packed from the host and imported with ``podman import``:

* **torch** (:func:`build_torch_image`): Debian's Python 3 with the Python packages ``import
  torch`` and ``torch.distributed.run`` load (Debian's ``python3-torch``, a CPU build), the
  ``torchrun`` script and ``/opt/gpum/allreduce.py`` (a gloo all-reduce printing one JSON line
  per rank).
* **ray** (:func:`build_ray_image`): Debian's Python 3 with Ray (:data:`RAY_VERSION`, the
  ``ray`` wheel and its dependencies, pinned by hash in :data:`RAY_REQUIREMENTS`, installed
  once by :func:`install_ray` into ``~/.cache/gpu-market/ray``) under ``/opt/ray/site`` on
  ``PYTHONPATH``, the ``ray`` script and ``/opt/gpum/ray_task.py`` (a driver that runs one task
  on another node and prints one JSON line).

Both hold the whole standard library of the host's ``/usr/bin/python3``, every shared library
their ELF files need (``ldd``) and a static busybox for ``/bin/sh``; the host's merged-/usr
layout (``/bin``, ``/lib``, ``/lib64`` links into ``/usr``) is kept, so every path ``ldd``
printed resolves in the image as on the host.

**Caching.** An image's tag is ``localhost/gpum-<name>:<digest>``, the digest a sha256 over
everything that goes in (each host file's path, size, mode and mtime, each generated file's
bytes, the image's settings): a second build with the same inputs finds the tag and does
nothing, a changed input makes a new tag. The packed root filesystem is kept as
``~/.cache/gpu-market/images/gpum-<name>-<digest>.tar`` (one per name), so a machine whose
podman storage was wiped imports it again without packing.
``GPUM_CACHE_DIR`` moves the cache.

``python -m gpu_market.cluster_demo_image torch|ray|ray-site`` builds one (``ray-site``: only
the Ray install; it downloads the pinned wheels once) and prints its tag or path.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ALLREDUCE", "RAY_TASK", "RAY_VERSION", "ImageError", "Rootfs", "build_ray_image",
           "build_torch_image", "install_ray", "ray_site"]  # fmt: skip

PYTHON = "/usr/bin/python3"
BUILDER = "gpum-node-image/2"
"""Part of every digest: a change of how images are packed makes new tags."""
ALLREDUCE = """\
import json, os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
expected = world * (world + 1) / 2
print(json.dumps({"allreduce": {"rank": rank, "world_size": world, "node_rank":
      int(os.environ["NODE_RANK"]), "sum": value.item(), "expected": expected,
      "ok": value.item() == expected}}), flush=True)
dist.destroy_process_group()
"""
"""Every rank adds rank + 1 over gloo; each prints the sum, which must be K(K+1)/2."""
RAY_TASK = """\
import json, os, socket
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(address="auto")
me = ray.get_runtime_context().get_node_id()
others = [n for n in ray.nodes() if n["Alive"] and n["NodeID"] != me]

@ray.remote(num_cpus=0)
def where():
    return {"node_rank": int(os.environ["NODE_RANK"]), "node_addr": os.environ["NODE_ADDR"],
            "hostname": socket.gethostname()}

got = ray.get([where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
    n["NodeID"], soft=False)).remote() for n in others], timeout=120)
print(json.dumps({"ray": {"driver_rank": int(os.environ["NODE_RANK"]),
                          "nodes": len(others) + 1, "tasks": got}}), flush=True)
"""
"""The Ray driver: one task pinned to every other node, each answering where it ran."""
RAY_VERSION = "2.60.0"
RAY_REQUIREMENTS = """\
ray==2.60.0 --hash=sha256:7f7fb209a2df375f141e8d0e132e7644b8e8efe3855b70f4844fbfb14ea6672c --hash=sha256:b951b40965947a63615830916be04f26440d234de1e9a29dbf2155d03fa9ad2a --hash=sha256:e227f6b2af8ab4626dd9a35a5860b33864325ea137383d57f854d4637ee3fea2
attrs==26.1.0 --hash=sha256:c647aa4a12dfbad9333ca4e71fe62ddc36f4e63b2d260a37a8b83d2f043ac309
certifi==2026.10.19.post1 --hash=sha256:1324c476b4811eff41a8bc2122cd0bbd4d9c7234c725446d99ab1612b3a7fdd2
charset-normalizer==3.5.3 --hash=sha256:2a6f937e0b70133d1f826d0a253331b6fe1a4c874808cc12e16f2fb8177042f4 --hash=sha256:656b9744bac4493561d28b56d7d646afd7a8471254ef7004d849aa8368020037 --hash=sha256:e5e4785d8a0adeadfbdf75f4efc357911842674651cbafd7e97f69b11ec3cbc6
click==8.5.1 --hash=sha256:8bb5376d2006950386f8c6427613334a2acadc5f559cb80e638d00b4df957e37
filelock==4.3.1 --hash=sha256:79e43df8e9fe509cd83a3899a7c186c8077cbbe4d200a1ed3705c2f3bb6bc487
idna==3.20 --hash=sha256:ab7ae7122974553370f0bdb919e1a960b2cd1bc1ef0276416d896db81c14582c
jsonschema==4.26.0 --hash=sha256:d489f15263b8d200f8387e64b4c3a75f06629559fb73deb8fdfb525f2dab50ce
jsonschema-specifications==2025.9.1 --hash=sha256:98802fee3a11ee76ecaca44429fda8a41bff98b00a0f2838151b113f210cc6fe
msgpack==1.2.4 --hash=sha256:7fabd415c41e62006c6641fcdf5b3e866f581c4e11c58328c0d0f69584b9577d --hash=sha256:a45ceb5f199d5e388f28b550ba881096a3740d4bda10e661d77f59d9a2e8187a --hash=sha256:c4d5bbdbea8f5669b3a734d6c226772804fb120848f99cbe63a0ddee63b049c9
packaging==26.4 --hash=sha256:81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2
protobuf==7.36.2 --hash=sha256:89f23aa53c24553a2416fd4fd1ec06f74fa42b14b546d8883128813f775bbfd2
pyyaml==6.0.4 --hash=sha256:50588147ab2c6a59b5f990a4905db80899a6c2bd197e046a6201f1e67587e794 --hash=sha256:622aa875fa6533f25fedcffe23079357d65a690d462200afed5d8e9d0e01ebee --hash=sha256:93bfb2459195406a518e2f487a9bbf01df240175f31e06f5a252ac6734c7bbf0
referencing==0.37.0 --hash=sha256:381329a9f99628c9069361716891d34ad94af76e461dcb0335825aecc7692231
requests==2.34.2 --hash=sha256:2a0d60c172f83ac6ab31e4554906c0f3b3588d37b5cb939b1c061f4907e278e0
rpds-py==2026.9.1 --hash=sha256:136a1c3fe4402b7008bc81cb62ee538481795b61a7e83df88dff3b3f02b726ff --hash=sha256:7868b85224291c6cb6759f9b5adb9745f486d226f62b16a614dd5a2a5ab2b35b --hash=sha256:addeda51556dac7c1a2f14cda62db8b621cd12afba3091d03a96c72932387eab
typing-extensions==4.16.0 --hash=sha256:481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8
urllib3==2.8.0 --hash=sha256:0cf3cae568d36aa9576b28dfb35f11328f1cb974ca7647d9475ebb86c75ac6e3
"""
"""Ray and every dependency, pinned with the sha256 of their CPython 3.11-3.13 x86_64 wheels."""
RAY_SITE_IN_IMAGE = "/opt/ray/site"
_APPLETS = ("sh", "env", "cat", "echo", "sleep", "ls", "grep", "ip", "hostname", "ps", "kill",
            "uname", "id", "mkdir", "rm", "df", "nproc")
_LISTED = ("import sys, json, importlib; [importlib.import_module(m) for m in sys.argv[1:]]; "
           "print(json.dumps(sorted({getattr(m, '__file__', None) or '' "
           "for m in list(sys.modules.values())})))")
_SKIP_DIRS = ("__pycache__", "test", "tests")


class ImageError(RuntimeError):
    """The image cannot be built; the message says what is missing."""


def cache_dir() -> Path:
    """Where images and Ray are kept: ``$GPUM_CACHE_DIR`` or ``~/.cache/gpu-market``."""
    return Path(os.environ.get("GPUM_CACHE_DIR") or Path.home() / ".cache" / "gpu-market")


def node_python() -> tuple[int, int]:
    """The (major, minor) version of the host's ``/usr/bin/python3``, the images' Python."""
    try:
        out = subprocess.run([PYTHON, "-c", "import sys; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        major, minor = (int(x) for x in out.split())
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        raise ImageError(f"{PYTHON} does not run ({e}): install Debian's python3") from None
    return major, minor


def _python_files(modules: Sequence[str], pythonpath: Path | None = None) -> list[str]:
    """The files of every module the host's Python loads when it imports ``modules``."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    try:
        out = subprocess.run([PYTHON, "-c", _LISTED, *modules], capture_output=True, text=True,
                             timeout=180, env=env, check=True).stdout  # fmt: skip
    except subprocess.CalledProcessError as e:
        raise ImageError(f"{PYTHON} cannot import {', '.join(modules)}: "
                         f"{e.stderr.strip()[-400:]}") from None  # fmt: skip
    except (OSError, subprocess.SubprocessError) as e:
        raise ImageError(f"{PYTHON} cannot import {', '.join(modules)} ({e})") from None
    return [f for f in json.loads(out) if f]


def _package_roots(files: Iterable[str], minor: int) -> set[Path]:
    """The directories (or single files) of the host's top-level packages those files are
    of (the standard library and the Debian packages; not a PYTHONPATH folder)."""
    roots: set[Path] = set()
    for f in files:
        p = Path(f)
        for base in ("/usr/lib/python3/dist-packages", f"/usr/lib/python3.{minor}"):
            if str(p).startswith(base + "/"):
                roots.add(Path(base) / p.relative_to(base).parts[0])
    return roots


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _elf_deps(files: Iterable[Path]) -> set[str]:
    """Every shared library ``ldd`` resolves for ``files`` (absolute paths as printed)."""
    found: set[str] = set()
    for f in files:
        try:
            out = subprocess.run(["ldd", str(f)], capture_output=True, text=True, timeout=60,
                                 check=False).stdout  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            continue
        for line in out.splitlines():
            parts = line.split()
            path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0] if parts else ""
            if path.startswith("/"):
                found.add(path)
    return found


@dataclass(frozen=True)
class _Entry:
    kind: bytes
    mode: int
    link: str = ""
    data: bytes | None = None
    source: Path | None = None


class Rootfs:
    """The entries of an image's root filesystem (in the order added), each host path with
    its symlinks and their targets; :meth:`digest` over all of them, :meth:`write` a tarball."""

    def __init__(self, settings: Sequence[str] = ()) -> None:
        self.entries: dict[str, _Entry] = {}
        self.settings = tuple(settings)
        """``podman import --change`` lines (part of the digest)."""

    def _add(self, name: str, entry: _Entry) -> None:
        name = name.lstrip("/")
        if not name or name in self.entries:
            return
        parent = os.path.dirname(name)
        if parent and parent not in self.entries:
            self._add(parent, _Entry(tarfile.DIRTYPE, 0o755))
        self.entries[name] = entry

    def dir(self, path: str, mode: int = 0o755) -> None:
        self._add(path, _Entry(tarfile.DIRTYPE, mode))

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._add(path, _Entry(tarfile.REGTYPE, mode, data=data))

    def link(self, path: str, target: str) -> None:
        self._add(path, _Entry(tarfile.SYMTYPE, 0o777, link=target))

    def _real_dir(self, d: Path) -> Path:
        """``d`` with every linked component resolved, each link added on the way."""
        cur = Path("/")
        for part in d.parts[1:]:
            nxt = cur / part
            if nxt.is_symlink():
                self.link(str(nxt), os.readlink(nxt))
                nxt = Path(os.path.realpath(nxt))
            cur = nxt
        return cur

    def host(self, path: str, *, follow_dirs: bool = True) -> None:
        """``path`` as on the host (a directory with its whole tree, but no ``__pycache__``
        or test folders): the links on the way, the link itself and what it points at."""
        p = self._real_dir(Path(path).parent) / Path(path).name
        if p.is_symlink():
            target = os.readlink(p)
            self.link(str(p), target)
            step = os.path.normpath(p.parent / target)  # the next link of a chain, or the end
            if Path(step).is_file() or follow_dirs:
                self.host(step, follow_dirs=follow_dirs)
        elif p.is_dir():
            self.dir(str(p), p.stat().st_mode & 0o7777)
            for child in sorted(p.iterdir()):
                if child.name in _SKIP_DIRS and child.is_dir():
                    continue
                self.host(str(child), follow_dirs=False)
        elif p.is_file():
            self._add(str(p), _Entry(tarfile.REGTYPE, p.stat().st_mode & 0o7777, source=p))

    def tree(self, source: Path, dest: str) -> list[Path]:
        """The folder ``source`` of the host at ``dest`` in the image (links kept as links, no
        ``__pycache__``); its ELF files."""
        elves = []
        self.dir(dest)
        for root, dirs, files in os.walk(source):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            rel = os.path.relpath(root, source)
            at = dest if rel == "." else f"{dest}/{rel}"
            for name in dirs + sorted(files):
                p = Path(root) / name
                if p.is_symlink():
                    self.link(f"{at}/{name}", os.readlink(p))
                elif p.is_dir():
                    self.dir(f"{at}/{name}", p.stat().st_mode & 0o7777)
                elif p.is_file():
                    self._add(f"{at}/{name}", _Entry(tarfile.REGTYPE, p.stat().st_mode & 0o7777,
                                                     source=p))  # fmt: skip
                    if _is_elf(p):
                        elves.append(p)
        return elves

    def digest(self) -> str:
        """sha256 (hex) of everything that goes in: names, kinds, modes, link targets, the
        bytes of generated files, each host file's size and mtime, and the settings."""
        h = hashlib.sha256(BUILDER.encode() + b"\0" + "\n".join(self.settings).encode())
        for name, e in self.entries.items():
            if e.source is not None:
                st = e.source.stat()
                what = f"{e.source}:{st.st_size}:{st.st_mtime_ns}".encode()
            elif e.data is not None:
                what = hashlib.sha256(e.data).digest()
            else:
                what = e.link.encode()
            h.update(b"\0".join((name.encode(), e.kind, str(e.mode).encode(), what)) + b"\n")
        return h.hexdigest()

    def write(self, dest: Path) -> None:
        """The tarball of every entry (owner root, mtime 0) at ``dest``."""
        with tarfile.open(dest, "w", format=tarfile.GNU_FORMAT) as tar:
            for name, e in self.entries.items():
                info = tarfile.TarInfo(name)
                info.type, info.mode, info.mtime, info.uid, info.gid = e.kind, e.mode, 0, 0, 0
                if e.kind == tarfile.SYMTYPE:
                    info.linkname = e.link
                    tar.addfile(info)
                elif e.kind == tarfile.DIRTYPE:
                    tar.addfile(info)
                elif e.source is not None:
                    info.size = e.source.stat().st_size
                    with e.source.open("rb") as f:
                        tar.addfile(info, f)
                else:
                    info.size = len(e.data or b"")
                    tar.addfile(info, io.BytesIO(e.data or b""))


def _base(t: Rootfs, minor: int, busybox: Path) -> None:
    """What every node image holds: the top folders, Python and its standard library, a
    static busybox as the shell and a few tools, passwd, group and hosts."""
    from gpum_worker.localimage import is_static_elf

    if not busybox.is_file() or not is_static_elf(busybox):
        raise ImageError(f"{busybox} is not a static busybox: apt-get install busybox-static")
    for d, mode in (("/dev", 0o755), ("/proc", 0o555), ("/sys", 0o555), ("/tmp", 0o1777),
                    ("/root", 0o700), ("/etc", 0o755), ("/opt/gpum", 0o755)):
        t.dir(d, mode)
    for top in ("/bin", "/sbin", "/lib", "/lib64"):
        if Path(top).is_symlink():
            t.link(top, os.readlink(top))
    t.host(PYTHON)
    t.host(f"/usr/lib/python3.{minor}")  # the whole standard library
    t.file("/usr/local/bin/busybox", busybox.read_bytes(), 0o755)
    for applet in _APPLETS:
        t.link(f"/usr/local/bin/{applet}", "busybox")
    t.link("/usr/bin/sh", "/usr/local/bin/busybox")
    t.file("/etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n")
    t.file("/etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    t.file("/etc/hosts", b"127.0.0.1 localhost\n")


def torch_rootfs(busybox: Path = Path("/bin/busybox")) -> Rootfs:
    """The torch image's root filesystem (module docstring)."""
    _, minor = node_python()
    try:
        files = _python_files(["torch", "torch.distributed.run", "json"])
    except ImageError as e:
        raise ImageError(f"{e}: install Debian's python3-torch (make torch)") from None
    roots = _package_roots(files, minor)
    t = Rootfs(["CMD [\"/bin/sh\"]", "ENV PATH=/usr/local/bin:/usr/bin:/bin"])
    _base(t, minor, busybox)
    for r in sorted(roots):
        t.host(str(r))
    elves = [Path(os.path.realpath(PYTHON))] + [
        f for r in roots if r.is_dir() for f in r.rglob("*.so*") if f.is_file()]
    for lib in sorted(_elf_deps(elves)):
        t.host(lib)
    t.file("/usr/bin/torchrun", b"#!/usr/bin/python3\nimport sys\nfrom torch.distributed.run "
                                b"import main\nsys.exit(main())\n", 0o755)  # fmt: skip
    t.file("/opt/gpum/allreduce.py", ALLREDUCE.encode())
    return t


def ray_site(cache: Path | None = None) -> Path:
    """Where :func:`install_ray` puts Ray for the host's Python."""
    major, minor = node_python()
    return (cache or cache_dir()) / "ray" / f"site-{RAY_VERSION}-cp{major}{minor}"


def install_ray(cache: Path | None = None, say: object = print) -> Path:
    """Ray and its dependencies for the host's ``/usr/bin/python3``, installed once (the
    pinned wheels downloaded once into ``<cache>/ray/wheels``, every one checked against its
    hash): the site folder. ImageError when pip fails (no network on a first run, or a Python
    or machine the pinned wheels do not cover)."""
    site = ray_site(cache)
    if (site / ".installed").is_file():
        return site
    major, minor = node_python()
    machine = platform.machine()
    if machine != "x86_64":
        raise ImageError(f"the pinned Ray wheels are for x86_64, not {machine}")
    wheels = site.parent / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    target = (f"--python-version={major}.{minor} --implementation=cp --abi=cp{major}{minor} "
              "--abi=abi3 --abi=none --platform=manylinux2014_x86_64 "
              "--platform=manylinux_2_17_x86_64 --platform=manylinux_2_28_x86_64").split()
    with tempfile.TemporaryDirectory(prefix="gpum-ray-") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(RAY_REQUIREMENTS)
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
        steps = (
            [*pip, "download", "--require-hashes", "--no-deps", "--only-binary=:all:", *target,
             "-d", str(wheels), "-r", str(req)],
            [*pip, "install", "--require-hashes", "--no-deps", "--only-binary=:all:", *target,
             "--no-index", "--find-links", str(wheels), "--target", str(Path(tmp) / "site"),
             "-r", str(req)],
        )  # fmt: skip
        if callable(say):
            say(f"installing ray {RAY_VERSION} for Python {major}.{minor} into {site}")
        for argv in steps:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
            if r.returncode != 0:
                raise ImageError(f"`pip {argv[4]}` of ray {RAY_VERSION} failed: "
                                 f"{r.stderr.strip()[-800:]}")  # fmt: skip
        if site.exists():
            shutil.rmtree(site)
        shutil.move(str(Path(tmp) / "site"), site)
    (site / ".installed").write_text(RAY_VERSION + "\n")
    return site


def ray_rootfs(site: Path | None = None, busybox: Path = Path("/bin/busybox")) -> Rootfs:
    """The ray image's root filesystem (module docstring); ``site``: the Ray install (default
    :func:`ray_site`, which must be installed: ``make ray``)."""
    _, minor = node_python()
    site = site or ray_site()
    if not (site / ".installed").is_file():
        raise ImageError(f"ray {RAY_VERSION} is not installed at {site}: run `make ray` (it "
                         "downloads the pinned wheels once)")  # fmt: skip
    files = _python_files(["ray", "ray.scripts.scripts", "ray.util.scheduling_strategies",
                           "ray._private.workers.default_worker"], site)  # fmt: skip
    t = Rootfs([f"ENV PYTHONPATH={RAY_SITE_IN_IMAGE}", "CMD [\"/bin/sh\"]",
                "ENV PATH=/usr/local/bin:/usr/bin:/bin"])  # fmt: skip
    _base(t, minor, busybox)
    roots = _package_roots(files, minor)
    for r in sorted(roots):
        t.host(str(r))
    elves = t.tree(site, RAY_SITE_IN_IMAGE) + [Path(os.path.realpath(PYTHON))] + [
        f for r in roots if r.is_dir() for f in r.rglob("*.so*") if f.is_file()]
    for lib in sorted(_elf_deps(elves)):
        t.host(lib)
    t.file("/usr/bin/ray", b"#!/usr/bin/python3\nimport sys\nfrom ray.scripts.scripts import "
                           b"main\nsys.exit(main())\n", 0o755)  # fmt: skip
    t.file("/opt/gpum/ray_task.py", RAY_TASK.encode())
    return t


def _podman(env: Mapping[str, str] | None) -> tuple[str, dict[str, str]]:
    full = {**os.environ, **(env or {})}
    podman = shutil.which("podman", path=full.get("PATH"))
    if podman is None:
        raise ImageError("podman not found: apt-get install podman runc")
    return podman, full


def import_image(name: str, rootfs: Rootfs, *, env: Mapping[str, str] | None = None,
                 cache: Path | None = None, timeout_s: float = 900.0) -> str:  # fmt: skip
    """The tag ``localhost/<name>:<digest>`` of ``rootfs``, imported into podman unless it is
    there; the tarball is packed only when the cache has none for this digest (module
    docstring). ``env``: merged over ``os.environ`` for podman (e.g. CONTAINERS_CONF)."""
    podman, full = _podman(env)
    digest = rootfs.digest()[:16]
    tag = f"localhost/{name}:{digest}"
    if subprocess.run([podman, "image", "inspect", tag], capture_output=True, env=full,
                      timeout=60, check=False).returncode == 0:  # fmt: skip
        return tag
    images = (cache or cache_dir()) / "images"
    images.mkdir(parents=True, exist_ok=True)
    packed = images / f"{name}-{digest}.tar"
    if not packed.is_file():
        for old in images.glob(f"{name}-*.tar"):
            old.unlink(missing_ok=True)  # one tarball per image name
        part = packed.with_name(packed.name + f".part{os.getpid()}")
        try:
            rootfs.write(part)
            os.replace(part, packed)
        finally:
            part.unlink(missing_ok=True)
    argv = [podman, "import"]
    for change in rootfs.settings:
        argv += ["--change", change]
    r = subprocess.run([*argv, str(packed), tag], capture_output=True, text=True, env=full,
                       timeout=timeout_s, check=False)  # fmt: skip
    if r.returncode != 0:
        raise ImageError(f"`podman import` of {tag} failed: {r.stderr.strip()[-800:]}")
    return tag


def build_torch_image(*, env: Mapping[str, str] | None = None, cache: Path | None = None) -> str:
    """The torch image's tag (built when missing; module docstring). ImageError when torch,
    busybox or podman is missing or the import fails."""
    return import_image("gpum-torch", torch_rootfs(), env=env, cache=cache)


def build_ray_image(*, env: Mapping[str, str] | None = None, cache: Path | None = None,
                    site: Path | None = None) -> str:  # fmt: skip
    """The ray image's tag (built when missing; module docstring). ImageError when Ray is not
    installed (``make ray``), busybox or podman is missing or the import fails."""
    return import_image("gpum-ray", ray_rootfs(site or ray_site(cache)), env=env, cache=cache)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in (["torch"], ["ray"], ["ray-site"]):
        print("usage: python -m gpu_market.cluster_demo_image torch|ray|ray-site", file=sys.stderr)
        return 2
    from .demo import CONTAINERS_CONF

    try:
        if args == ["ray-site"]:
            print(install_ray(say=lambda text: print(text, file=sys.stderr)))
            return 0
        with tempfile.TemporaryDirectory() as tmp:
            conf = Path(tmp) / "containers.conf"
            conf.write_text(CONTAINERS_CONF)
            build = build_torch_image if args == ["torch"] else build_ray_image
            print(build(env={"CONTAINERS_CONF": str(conf)}))
    except ImageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
