"""The podman and docker runtimes: ``ContainerRuntime`` over their command-line clients.

``PodmanRuntime`` and ``DockerRuntime`` drive the runtime's command-line client with
``subprocess`` (argument lists, never a shell, a timeout on every call); what they cannot
do raises ``ContainerRuntimeError`` carrying the CLI's own error text and, for the
failures we know, what to do about them. They keep every guarantee listed in ``runtime``;
``detect_runtime`` picks the one that works on this host, and there is no fallback to
running a workload outside a container.
"""

from __future__ import annotations

import abc
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import ContainerRuntimeError
from .runtime import (
    DEFAULT_SCRATCH_DIR,
    JOB_LABEL,
    LOG_LINE_MAX_BYTES,
    LOG_READ_DEADLINE_S,
    LOG_READ_MAX_BYTES,
    MISSING,
    NO_RUNTIME_MESSAGE,
    RUNTIME_NAMES,
    ContainerRuntime,
    ContainerSpec,
    ContainerState,
)
from .runtime_argv import (
    _IMAGE_RE,
    _check_label,
    _check_name,
    _check_tail,
    _hint,
    _is_missing,
    _redact,
    _tail_text,
    check_image,
    env_file_text,
    parse_inspect,
    parse_top_pids,
    run_argv,
    scratch_size_mib,
    split_env,
)
from .runtime_disk import ScratchVolumes
from .runtime_logs import LogStream, read_capped

__all__ = [
    "DockerRuntime",
    "PodmanRuntime",
    "detect_runtime",
]

log = logging.getLogger("gpum_worker.runtime")


def _merged_env(extra_env: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    if extra_env:
        env.update(extra_env)
    return env


def _default_env_file_dir() -> str | None:
    """/dev/shm (memory, never disk) when usable, else the system temp directory."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return None


class _CliRuntime(abc.ABC):
    """The CLI plumbing podman and docker share; subclasses set ``name``, ``remove`` and
    the ``ps`` / ``top`` arguments."""

    name = ""

    def __init__(self, binary: str | None = None, *,
                 extra_env: Mapping[str, str] | None = None,
                 timeout_s: float = 30.0, run_timeout_s: float = 1800.0,
                 stop_timeout_s: int = 10, env_file_dir: str | None = None,
                 scratch_dir: str | os.PathLike[str] = DEFAULT_SCRATCH_DIR) -> None:
        """``binary``: the CLI (name looked up on PATH, or a path; default: ``name``).
        ``extra_env`` is merged over ``os.environ`` for every call (e.g. CONTAINERS_CONF).
        ``timeout_s`` bounds every call but ``run`` and ``ensure_image``, which may pull the
        image and get ``run_timeout_s``. ``stop_timeout_s`` is the container's
        ``--stop-timeout``. ``scratch_dir`` holds the /scratch volumes
        (``ScratchVolumes``). Raises ``ContainerRuntimeError`` when the binary cannot be
        found."""
        self.extra_env = dict(extra_env or {})
        wanted = binary or self.name
        found = shutil.which(wanted, path=_merged_env(self.extra_env).get("PATH", os.defpath))
        if found is None:
            raise ContainerRuntimeError(
                f"{self.name}: {wanted!r} not found on PATH; install {self.name} "
                f"(or choose another runtime)")
        self.binary = found
        self.timeout_s = timeout_s
        self.run_timeout_s = run_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.env_file_dir = env_file_dir if env_file_dir is not None else _default_env_file_dir()
        self.scratch = ScratchVolumes(scratch_dir)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(binary={self.binary!r})"

    # -- plumbing

    def _env(self) -> dict[str, str]:
        return _merged_env(self.extra_env)

    def _cli(self, args: Sequence[str], *, timeout: float | None = None,
             env: Mapping[str, str] | None = None, merge_stderr: bool = False
             ) -> subprocess.CompletedProcess[bytes]:
        """Run ``<binary> args``; raise ContainerRuntimeError on a timeout or a spawn error
        (the exit status is the caller's to judge)."""
        t = self.timeout_s if timeout is None else timeout
        try:
            return subprocess.run(
                [self.binary, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                env=dict(env) if env is not None else self._env(), timeout=t, check=False)
        except subprocess.TimeoutExpired:
            raise ContainerRuntimeError(
                f"`{self.name} {args[0]}` did not finish within {t:g} s; check that "
                f"`{self.name} info` answers (a hung service or storage lock?)") from None
        except OSError as e:
            raise ContainerRuntimeError(
                f"cannot execute {self.binary}: {e.strerror or e}") from None

    def _failure(self, what: str, proc: subprocess.CompletedProcess[bytes],
                 output: bytes | None = None) -> ContainerRuntimeError:
        text = _tail_text(proc.stderr if output is None else output)
        hint = _hint(text)
        msg = f"{self.name} {what} failed (exit status {proc.returncode}): {text or 'no output'}"
        return ContainerRuntimeError(f"{msg}; {hint}" if hint else msg)

    def _container_id(self, name: str) -> str | None:
        proc = self._cli(["container", "inspect", name])
        if proc.returncode != 0:
            if _is_missing(proc.stderr.decode("utf-8", "replace")):
                return None
            raise self._failure(f"container inspect {name}", proc)
        data = self._inspect_json(name, proc.stdout)
        if data is None:
            return None
        return str(data.get("Id") or "") or None

    def _inspect_json(self, name: str, stdout: bytes) -> Mapping[str, Any] | None:
        try:
            data = json.loads(stdout or b"[]")
        except ValueError:
            raise ContainerRuntimeError(
                f"{self.name} container inspect {name}: output is not JSON: "
                f"{_tail_text(stdout, 200)}") from None
        if isinstance(data, list):
            data = data[0] if data else None
        if data is not None and not isinstance(data, Mapping):
            raise ContainerRuntimeError(
                f"{self.name} container inspect {name}: unexpected output shape")
        return data

    def _write_env_file(self, entries: Sequence[tuple[str, str]]) -> str:
        fd, path = tempfile.mkstemp(prefix="gpum-env-", dir=self.env_file_dir)
        try:
            os.fchmod(fd, 0o600)
            data = env_file_text(entries).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        return path

    def _discard(self, name: str) -> None:
        """Best-effort removal of whatever a failed ``run`` left behind."""
        try:
            self.remove(name, timeout_s=0)
        except ContainerRuntimeError as e:
            log.warning("could not remove the leftover of a failed run of %s: %s", name, e)

    # -- ContainerRuntime

    def run(self, spec: ContainerSpec, *,
            before_start: Callable[[int], None] | None = None) -> str:
        """``ContainerRuntime.run``; with ``before_start`` (podman only) the container is
        created and initialized (its namespaces exist, its command does not run yet),
        ``before_start`` is called with its init's host PID, and only then is it started;
        any failure on the way removes it."""
        _check_name(spec.name)
        existing = self._container_id(spec.name)
        if existing:
            return existing
        if before_start is not None and self.name != "podman":
            raise ContainerRuntimeError(
                f"{self.name} cannot start a container after preparing its network namespace "
                "(cluster nodes need podman: it makes the namespace at `podman init`)")
        cli_env = self._env()
        by_file, by_name = split_env(spec.env, cli_env)
        scratch = scratch_size_mib(spec)
        scratch_path = self.scratch.ensure(spec.name, scratch) if scratch is not None else None
        env_file = self._write_env_file(by_file) if by_file else None
        try:
            argv = run_argv(self.name, spec, env_file=env_file,
                            env_names=[n for n, _ in by_name],
                            stop_timeout_s=self.stop_timeout_s, scratch_path=scratch_path,
                            create=before_start is not None)
            cli_env.update(by_name)
            try:
                proc = self._cli(argv, timeout=self.run_timeout_s, env=cli_env)
            except ContainerRuntimeError:
                self._discard(spec.name)
                raise
        finally:
            if env_file is not None:
                try:
                    os.unlink(env_file)
                except FileNotFoundError:
                    pass
        if proc.returncode == 0:
            lines = proc.stdout.decode("utf-8", "replace").split()
            cid = lines[-1] if lines else ""
            found = cid if re.fullmatch(r"[0-9a-f]{12,64}", cid) else \
                self._container_id(spec.name)
            if found and before_start is not None:
                self._start_held(spec.name, before_start)
            if found:
                return found
            raise ContainerRuntimeError(
                f"{self.name} run {spec.name} reported success but no container exists")
        stderr = _redact(proc.stderr.decode("utf-8", "replace"), spec.env)
        low = stderr.lower()
        if "already in use" in low:
            found = self._container_id(spec.name)
            if found:  # created by a concurrent run with the same name
                return found
        self._discard(spec.name)
        text = _tail_text(stderr)
        hint = _hint(text)
        msg = (f"{self.name} run {spec.name} (image {spec.image}) failed "
               f"(exit status {proc.returncode}): {text or 'no output'}")
        raise ContainerRuntimeError(f"{msg}; {hint}" if hint else msg)

    def _start_held(self, name: str, before_start: Callable[[int], None]) -> None:
        """``init`` the created container, ``before_start(pid)``, ``start``; on any failure
        the container is removed."""
        try:
            proc = self._cli(["container", "init", name])
            if proc.returncode != 0:
                raise self._failure(f"container init {name}", proc)
            proc = self._cli(["container", "inspect", "--format", "{{.State.Pid}}", name])
            text = proc.stdout.decode("utf-8", "replace").strip()
            if proc.returncode != 0 or not text.isdigit() or int(text) <= 0:
                raise ContainerRuntimeError(f"{self.name} container init {name} left no "
                                            f"process to prepare ({_tail_text(text) or 'none'})")
            before_start(int(text))
            proc = self._cli(["start", name])
            if proc.returncode != 0:
                raise self._failure(f"start {name}", proc)
        except BaseException:
            self._discard(name)
            raise

    def state(self, name: str) -> ContainerState:
        _check_name(name)
        proc = self._cli(["container", "inspect", name])
        if proc.returncode != 0:
            if _is_missing(proc.stderr.decode("utf-8", "replace")):
                return MISSING
            raise self._failure(f"container inspect {name}", proc)
        data = self._inspect_json(name, proc.stdout)
        return MISSING if data is None else parse_inspect(data)

    def logs(self, name: str, tail: int | None = None, *, max_bytes: int = LOG_READ_MAX_BYTES,
             deadline_s: float = LOG_READ_DEADLINE_S,
             max_line_bytes: int = LOG_LINE_MAX_BYTES) -> bytes:
        _check_name(name)
        argv = [self.binary, "logs", *_check_tail(tail), name]
        out, rc, cut = read_capped(argv, self._env(), max_bytes=max_bytes,
                                   deadline_s=deadline_s, max_line_bytes=max_line_bytes)
        if cut:
            log.warning("reading the log of %s took longer than %g s; served what was read",
                        name, deadline_s)
            return out + f"[gpum: log read cut at its {deadline_s:g} s deadline]\n".encode()
        if rc == 0:
            return out
        if self.state(name).status == "missing":
            raise ContainerRuntimeError(f"no container named {name}")
        raise ContainerRuntimeError(
            f"{self.name} logs {name} failed (exit status {rc}): "
            f"{_tail_text(out) or 'no output'}")

    def ensure_image(self, image: str) -> None:
        if not isinstance(image, str) or not _IMAGE_RE.fullmatch(image):
            raise ContainerRuntimeError(f"invalid image reference {image!r}")
        proc = self._cli(["image", "inspect", image])
        if proc.returncode != 0:
            pull = self._cli(["pull", "-q", image], timeout=self.run_timeout_s)
            if pull.returncode != 0:
                raise ContainerRuntimeError(
                    f"image {image} is not on this machine and cannot be pulled "
                    f"({_tail_text(pull.stderr, 800) or 'no output'}): check the image name "
                    "and tag, and that its registry is reachable from the provider")
            proc = self._cli(["image", "inspect", image])
            if proc.returncode != 0:
                raise self._failure(f"image inspect {image}", proc)
        check_image(image, self._inspect_json(image, proc.stdout) or {})

    def writable_dir(self, name: str) -> str | None:
        _check_name(name)
        proc = self._cli(["container", "inspect", name])
        if proc.returncode != 0:
            return None
        data = self._inspect_json(name, proc.stdout) or {}
        driver = data.get("GraphDriver")
        upper = driver.get("Data", {}).get("UpperDir") if isinstance(driver, Mapping) else None
        return upper if isinstance(upper, str) and os.path.isabs(upper) else None

    def prune_volumes(self, keep: set[str]) -> None:
        for name in sorted(self.scratch.names() - set(keep)):
            if self._container_id(name) is not None:
                continue  # a container still has it (another worker's, or being removed)
            log.info("releasing the /scratch volume of %s (no such job container)", name)
            self.scratch.release(name)

    def follow_logs(self, name: str, tail: int | None = None) -> LogStream:
        _check_name(name)
        args = ["logs", "-f", *_check_tail(tail), name]
        if self.state(name).status == "missing":
            raise ContainerRuntimeError(f"no container named {name}")
        return LogStream([self.binary, *args], self._env())

    # -- exec and copy (gpum_worker.exec runs these argvs; the paths are inside the
    # container: ``podman cp`` resolves ``NAME:PATH`` in the container's root only)

    def exec_argv(self, name: str, cmd: Sequence[str], *, tty: bool,
                  interactive: bool) -> list[str]:
        """``<binary> exec [-i] [-t] NAME CMD...``: ``cmd`` runs in the job's container."""
        _check_name(name)
        if not cmd:
            raise ValueError("exec needs a command")
        flags = (["-i"] if interactive else []) + (["-t"] if tty else [])
        return [self.binary, "exec", *flags, name, *cmd]

    def copy_in_argv(self, name: str, directory: str) -> list[str]:
        """``<binary> cp - NAME:DIR``: extract the tar archive on stdin into ``directory``."""
        _check_name(name)
        return [self.binary, "cp", "-", f"{name}:{directory}"]

    def copy_out_argv(self, name: str, path: str) -> list[str]:
        """``<binary> cp NAME:PATH -``: a tar archive of ``path`` on stdout."""
        _check_name(name)
        return [self.binary, "cp", f"{name}:{path}", "-"]

    def cli_env(self) -> dict[str, str]:
        """The environment every call of the CLI gets."""
        return self._env()

    def list_job_containers(self, match: Mapping[str, str] | None = None) -> dict[str, str]:
        filters = [f"--filter=label={JOB_LABEL}"]
        for k, v in sorted((match or {}).items()):
            filters.append(f"--filter=label={_check_label(k, v)}")
        proc = self._cli(["ps", "-a", "--no-trunc", *filters, "--format", self._ps_format])
        if proc.returncode != 0:
            raise self._failure("ps", proc)
        out: dict[str, str] = {}
        for line in proc.stdout.decode("utf-8", "replace").splitlines():
            if not line.strip():
                continue
            names, _, value = line.partition("\t")
            name = names.split(",")[0].strip().lstrip("/")
            if name:
                out[name] = value.strip()
        return out

    def pids(self, name: str) -> frozenset[int]:
        _check_name(name)
        proc = self._cli(["top", name, *self._top_args])
        if proc.returncode == 0:
            return parse_top_pids(proc.stdout.decode("utf-8", "replace"))
        if self.state(name).status != "running":
            return frozenset()
        raise self._failure(f"top {name}", proc)

    @abc.abstractmethod
    def remove(self, name: str, timeout_s: int = 5) -> None:
        """Stop (SIGTERM, SIGKILL after ``timeout_s``) and remove; no error if missing."""

    # set by subclasses
    _ps_format = ""
    _top_args: tuple[str, ...] = ()


class PodmanRuntime(_CliRuntime):
    """``ContainerRuntime`` over the podman CLI (GPUs through CDI: ``nvidia.com/gpu=<UUID>``).

    Pass ``extra_env={"CONTAINERS_CONF": path}`` where podman's defaults do not work on the
    host (crun on cgroups v1 hybrid, ulimits a container may not set).
    """

    name = "podman"
    _ps_format = '{{.Names}}\t{{index .Labels "' + JOB_LABEL + '"}}'
    _top_args = ("hpid",)

    def remove(self, name: str, timeout_s: int = 5) -> None:
        _check_name(name)
        t = max(0, int(timeout_s))
        proc = self._cli(["rm", "-f", "-i", "-t", str(t), name], timeout=t + self.timeout_s)
        if proc.returncode != 0 and not _is_missing(proc.stderr.decode("utf-8", "replace")):
            raise self._failure(f"rm {name}", proc)


class DockerRuntime(_CliRuntime):
    """``ContainerRuntime`` over the docker CLI (GPUs through ``--gpus "device=..."``, which
    needs the NVIDIA Container Toolkit configured for dockerd)."""

    name = "docker"
    _ps_format = '{{.Names}}\t{{.Label "' + JOB_LABEL + '"}}'
    _top_args = ("-eo", "pid")

    def remove(self, name: str, timeout_s: int = 5) -> None:
        _check_name(name)
        t = max(0, int(timeout_s))
        stop = self._cli(["stop", "-t", str(t), name], timeout=t + self.timeout_s)
        if stop.returncode != 0:
            text = stop.stderr.decode("utf-8", "replace")
            if _is_missing(text):
                return
            log.warning("docker stop %s failed (%s); removing it by force", name,
                        _tail_text(text, 300))
        proc = self._cli(["rm", "-f", name])
        if proc.returncode != 0 and not _is_missing(proc.stderr.decode("utf-8", "replace")):
            raise self._failure(f"rm {name}", proc)


_RUNTIMES: dict[str, type[_CliRuntime]] = {"podman": PodmanRuntime, "docker": DockerRuntime}


def _probe(name: str, env: Mapping[str, str], timeout_s: float) -> tuple[str | None, str]:
    """(path, '') when ``<name> info`` succeeds, else (None, why not)."""
    path = shutil.which(name, path=env.get("PATH", os.defpath))
    if path is None:
        return None, f"{name}: not found on PATH"
    try:
        proc = subprocess.run([path, "info"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env=dict(env), timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None, f"{name}: `{path} info` did not answer within {timeout_s:g} s"
    except OSError as e:
        return None, f"{name}: cannot execute {path}: {e.strerror or e}"
    if proc.returncode != 0:
        text = _tail_text(proc.stderr, 500)
        hint = _hint(text)
        why = f"{name}: `{path} info` failed (exit status {proc.returncode}): {text or 'no output'}"
        return None, f"{why} ({hint})" if hint else why
    return path, ""


def detect_runtime(choice: str = "auto", *, extra_env: Mapping[str, str] | None = None,
                   probe_timeout_s: float = 15.0,
                   scratch_dir: str | os.PathLike[str] = DEFAULT_SCRATCH_DIR
                   ) -> ContainerRuntime:
    """The container runtime to run workloads with.

    ``"auto"``: podman if it works, else docker if it works; ``"podman"`` / ``"docker"``:
    that one. "Works" means the binary is on PATH (``extra_env`` may set PATH) and
    ``<binary> info`` succeeds within ``probe_timeout_s``. ``extra_env`` is also handed to
    the runtime for every later call; ``scratch_dir`` holds its /scratch volumes. Raises
    ``ContainerRuntimeError`` naming every runtime tried and why it failed; there is no
    fallback to running workloads on the host.
    """
    wanted = (choice or "").strip().lower()
    if wanted != "auto" and wanted not in RUNTIME_NAMES:
        raise ContainerRuntimeError(
            f"unknown container runtime {choice!r}: choose auto, podman or docker")
    env = _merged_env(extra_env)
    candidates = RUNTIME_NAMES if wanted == "auto" else (wanted,)
    tried: list[str] = []
    for name in candidates:
        path, why = _probe(name, env, probe_timeout_s)
        if path is not None:
            return _RUNTIMES[name](path, extra_env=extra_env, scratch_dir=scratch_dir)
        tried.append(why)
    if wanted == "auto":
        raise ContainerRuntimeError(f"{NO_RUNTIME_MESSAGE} (tried {'; '.join(tried)})")
    raise ContainerRuntimeError(
        f"container runtime {wanted} does not work: {tried[0]}. Fix it, or choose "
        f"{'docker' if wanted == 'podman' else 'podman'} (install podman with runc, or "
        "docker); the worker never runs a workload outside a container")
