"""Container runtimes: the ``ContainerRuntime`` interface and its podman and docker CLIs.

The worker runs every job's workload in a container, never on the host (DESIGN.md §8).
``PodmanRuntime`` and ``DockerRuntime`` drive the runtime's command-line client with
``subprocess`` (argument lists, never a shell, a timeout on every call); what they cannot
do raises ``ContainerRuntimeError`` carrying the CLI's own error text and, for the
failures we know, what to do about them.

Guarantees of ``run`` (both runtimes):

* The container is named ``spec.name`` and carries ``spec.labels``; put
  ``(JOB_LABEL, <job address>)`` there so ``list_job_containers`` finds it after a restart.
* It sees exactly the GPUs of ``spec.gpu_uuids`` (podman: one CDI device
  ``nvidia.com/gpu=<UUID>`` each; docker: ``--gpus "device=<UUID>,..."``) and no other:
  ``NVIDIA_VISIBLE_DEVICES`` is always set by us (``void`` when no GPU is handed over,
  and always under podman, where CDI injects the devices), overriding the image's own
  value (CUDA images say ``all``) and any value in ``spec.env``, so an NVIDIA runtime hook
  cannot hand the container every GPU of the machine.
* No environment value appears on a command line (``ps`` shows argument lists to every
  user): values go through a mode-0600 ``--env-file`` (on ``/dev/shm`` where possible)
  deleted as soon as the CLI returns; values a line-based env file cannot hold
  (line breaks, over 60 000 bytes) go by name (``-e NAME``) through the CLI's own
  environment. Values are never logged, and are redacted from error messages.
* ``--security-opt no-new-privileges``, ``--stop-timeout``, never ``--privileged``.
* Limits (``spec.limits``, from ``limits.job_limits``): RAM with no swap
  (``--memory`` = ``--memory-swap``), ``--cpus``, ``--pids-limit``, ``--shm-size``; always
  ``--oom-score-adj 1000`` (the OOM killer takes a container before anything else) and a
  log file capped at ``--log-opt max-size`` (the runtime starts it over when full).
* ``/scratch`` is a disk volume with a hard size (``ScratchVolumes``: an ext4 filesystem
  image of that size, loop-mounted, one per container), never memory: writing past its
  size fails with ENOSPC inside the container and the host's disk is not touched beyond
  it. It outlives ``remove`` (a container started again after a host reboot keeps its
  data); ``prune_volumes`` releases it once neither a container nor a live job has it.
* Log reads (``logs``) return at most ``max_bytes`` (the tail), no line longer than
  ``max_line_bytes``, within ``deadline_s`` (the CLI is killed then), holding at most
  about twice ``max_bytes`` in memory whatever the container wrote.
* Ports are published on ``spec.publish_host`` at a free host port chosen by the runtime;
  ``state`` reads the chosen ports back.
* Idempotent: if a container named ``spec.name`` exists in any state, its id is returned
  and nothing is created (its spec is not compared). A failed ``run`` leaves no container
  behind, so retrying really retries.

The argument building (``run_argv``, ``split_env``), output parsing (``parse_inspect``,
``parse_top_pids``, ``mount_points``), image checks (``check_image``) and the bounded log
tail (``LogTail``) are pure, tested without a runtime.
"""

from __future__ import annotations

import abc
import contextlib
import ipaddress
import json
import logging
import os
import platform
import re
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, final

from .errors import ContainerRuntimeError
from .limits import CONTAINER_OOM_SCORE_ADJ, LOG_MAX_MIB, JobLimits

__all__ = [
    "JOB_LABEL",
    "LOG_LINE_MAX_BYTES",
    "LOG_READ_DEADLINE_S",
    "LOG_READ_MAX_BYTES",
    "MISSING",
    "NO_RUNTIME_MESSAGE",
    "RUNTIME_NAMES",
    "STATUSES",
    "ContainerRuntime",
    "ContainerSpec",
    "ContainerState",
    "DockerRuntime",
    "LogStream",
    "LogTail",
    "PodmanRuntime",
    "PortBinding",
    "PublishedPort",
    "ScratchVolumes",
    "detect_runtime",
    "env_file_text",
    "parse_inspect",
    "parse_top_pids",
    "run_argv",
    "split_env",
]

log = logging.getLogger("gpum_worker.runtime")

RUNTIME_NAMES = ("podman", "docker")
"""Supported runtimes, in the order ``detect_runtime("auto")`` tries them."""

JOB_LABEL = "gpum.job"
"""Label key on every job container; its value is the job address (base58)."""

STATUSES = ("running", "exited", "restarting", "created", "missing")
"""Every value ``ContainerState.status`` takes."""

DEFAULT_SCRATCH_DIR = "/var/lib/gpum-worker/scratch"
"""Where the /scratch volumes live unless the runtime is told otherwise."""

NO_RUNTIME_MESSAGE = ("no container runtime: install podman (with runc) or docker; "
                      "the worker never runs a workload outside a container")

# Env-file lines are read with Go's bufio.Scanner (64 KiB tokens); stay well below.
_ENV_FILE_LINE_MAX = 60_000
# Linux refuses a single environment string over MAX_ARG_STRLEN (128 KiB) in execve.
_ENV_VALUE_MAX = 128 * 1024 - 1
_LOG_CHUNK = 64 * 1024
LOG_READ_MAX_BYTES = 1 << 20
"""A log read returns at most this much (the tail) unless told otherwise."""
LOG_READ_DEADLINE_S = 10.0
"""A log read ends by then (the CLI is killed) unless told otherwise."""
LOG_LINE_MAX_BYTES = 64 * 1024
"""A longer log line is cut there (and marked) when read."""
_REDACT_MIN = 4

# Environment names the NVIDIA container hooks read to decide which GPUs a container
# gets; never taken from a job's env.
_GPU_CONTROL_ENV = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES",
                    "NVIDIA_MIG_MONITOR_DEVICES")

# Names the container CLI itself may read from its environment: a job variable passed by
# name (-e NAME) must not be one of them.
_CLI_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "LANG", "PWD",
    "NOTIFY_SOCKET", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "FTP_PROXY",
})
_CLI_ENV_PREFIXES = ("LC_", "LD_", "XDG_", "CONTAINERS_", "CONTAINER_", "DOCKER_", "PODMAN_",
                     "BUILDAH_", "REGISTRY_", "STORAGE_", "DBUS_", "SSL_", "GO", "CDI_",
                     "NVIDIA_")

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,252}")
_GPU_UUID_RE = re.compile(r"(GPU|MIG)-[A-Za-z0-9/-]{1,120}")
_ENV_NAME_RE = re.compile(r"[^=\s#\x00][^=\s\x00]*")
_LABEL_KEY_RE = re.compile(r"[^=\s\x00]{1,256}")
_IMAGE_RE = re.compile(r"[A-Za-z0-9][^\s\x00]{0,1023}")
_PROTOCOLS = ("tcp", "udp")


# ----------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class PortBinding:
    """A container port to publish on a random free host port."""

    port: int
    protocol: str
    """"tcp" or "udp"."""


@dataclass(frozen=True)
class ContainerSpec:
    """Everything ``ContainerRuntime.run`` needs to start one job's container."""

    name: str
    """Container name, e.g. "gpum-<job base58>"; [A-Za-z0-9][A-Za-z0-9_.-]*."""
    image: str
    command: tuple[str, ...] = ()
    """Entrypoint override (empty: the image's own). When set, the image's CMD is not used."""
    args: tuple[str, ...] = ()
    """Arguments (the image's CMD when empty and ``command`` is empty too)."""
    env: tuple[tuple[str, str], ...] = ()
    """Includes decrypted secrets: values are never logged nor put on a command line.
    A name given twice takes its last value."""
    ports: tuple[PortBinding, ...] = ()
    gpu_uuids: tuple[str, ...] = ()
    """NVIDIA GPU UUIDs ("GPU-...", or "MIG-..." for MIG devices) to expose; empty: none."""
    labels: tuple[tuple[str, str], ...] = ()
    shm_size_mib: int | None = None
    scratch_mib: int | None = None
    """Size of the disk volume mounted at /scratch (none when None)."""
    publish_host: str = "0.0.0.0"
    """Host address (IPv4 or IPv6) the ports are published on."""
    limits: JobLimits | None = None
    """Memory, CPU, pids, shm and scratch limits (``limits.job_limits``); when set, its
    ``shm_mib`` and ``scratch_mib`` replace ``shm_size_mib`` and ``scratch_mib``."""


@dataclass(frozen=True)
class PublishedPort:
    """A container port and where the runtime published it on the host."""

    port: int
    protocol: str
    host: str
    host_port: int


@dataclass(frozen=True)
class ContainerState:
    """One read of a container's state.

    ``status`` is one of ``STATUSES``; ``exit_code`` is set only when "exited"; ``pid``
    (host PID of the container's init process) only when "running"; ``ports`` are the
    published ports while the container runs (runtimes drop them once it stops);
    ``error`` is the runtime's error for the container (failed start, OOM kill), if any.
    """

    status: str
    exit_code: int | None
    pid: int | None
    ports: tuple[PublishedPort, ...]
    started_at: float | None
    error: str | None = None


MISSING = ContainerState(status="missing", exit_code=None, pid=None, ports=(),
                         started_at=None)


class ContainerRuntime(Protocol):
    """A container runtime the worker runs workloads with (podman, docker, a test fake).

    Every method raises ``ContainerRuntimeError`` when the runtime fails (with its error
    text); a missing container is not an error except for ``logs`` / ``follow_logs``.
    """

    name: str

    def run(self, spec: ContainerSpec) -> str:
        """Create and start the container detached; return its id.

        Idempotent: if a container named ``spec.name`` exists (any state) its id is returned
        and no other container is created. A failed run leaves no container behind.
        """
        ...

    def state(self, name: str) -> ContainerState:
        """The container's state; status "missing" if there is no such container."""
        ...

    def logs(self, name: str, tail: int | None = None, *, max_bytes: int = LOG_READ_MAX_BYTES,
             deadline_s: float = LOG_READ_DEADLINE_S,
             max_line_bytes: int = LOG_LINE_MAX_BYTES) -> bytes:
        """Its stdout and stderr so far (the last ``tail`` lines when given), at most the
        last ``max_bytes``, each line cut at ``max_line_bytes``, read within ``deadline_s``
        (what was read by then, marked as cut, when it takes longer).

        Each stream keeps its own order; lines of the two interleave as the runtime
        received them (two pipes, so not necessarily as the program wrote them). Raises
        ``ContainerRuntimeError`` when there is no such container."""
        ...

    def ensure_image(self, image: str) -> None:
        """Make sure ``image`` is here (pulling it if not) and runs on this machine (Linux,
        this CPU architecture); ``ContainerRuntimeError`` saying why not."""
        ...

    def prune_volumes(self, keep: set[str]) -> None:
        """Release the /scratch volume of every container name not in ``keep`` that has no
        container (any state)."""
        ...

    def writable_dir(self, name: str) -> str | None:
        """The host directory holding what the container wrote outside its volumes (its
        writable layer), or None when unknown (no such container, another storage driver)."""
        ...

    def follow_logs(self, name: str, tail: int | None = None) -> Iterator[bytes]:
        """Stream stdout and stderr (after the last ``tail`` lines so far, or all) until the
        container stops or the iterator is closed; closing kills the CLI child process.
        Raises ``ContainerRuntimeError`` at once when there is no such container."""
        ...

    def remove(self, name: str, timeout_s: int = 5) -> None:
        """Stop it (SIGTERM, SIGKILL after ``timeout_s``) and remove it; no error if missing."""
        ...

    def list_job_containers(self, match: Mapping[str, str] | None = None) -> dict[str, str]:
        """Container name -> ``JOB_LABEL`` value, for every container (any state) with it
        (and, with ``match``, with each of those labels set to that value)."""
        ...

    def pids(self, name: str) -> frozenset[int]:
        """Host PIDs of all processes in the container (empty if it is not running)."""
        ...


# ------------------------------------------------------------------------ pure functions


def _check_label(key: object, value: object) -> str:
    """``key=value`` of a valid label; ContainerRuntimeError otherwise."""
    if not isinstance(key, str) or not _LABEL_KEY_RE.fullmatch(key):
        raise ContainerRuntimeError(f"invalid label key {key!r}")
    if not isinstance(value, str) or any(c in value for c in "\n\r\x00"):
        raise ContainerRuntimeError(f"label {key}: value must be one line of text")
    return f"{key}={value}"


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ContainerRuntimeError(
            f"invalid container name {name!r}: use letters, digits, '_', '.' and '-', "
            "starting with a letter or digit")
    return name


def _positive_mib(what: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ContainerRuntimeError(f"{what} must be a positive number of MiB, got {value!r}")
    return value


def _publish_host(host: str) -> str:
    """The host part of a ``-p`` value: an IP address, IPv6 in brackets."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ContainerRuntimeError(
            f"invalid publish host {host!r}: expected an IP address such as 0.0.0.0 or "
            "127.0.0.1") from None
    return f"[{ip}]" if ip.version == 6 else str(ip)


def _is_cli_env_name(name: str) -> bool:
    upper = name.upper()
    return upper in _CLI_ENV_NAMES or upper.startswith(_CLI_ENV_PREFIXES)


def split_env(env: Sequence[tuple[str, str]], cli_env: Mapping[str, str] | None = None
              ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """Split a job's env into (env-file entries, entries passed by name).

    A name given twice keeps its last value. Names in ``_GPU_CONTROL_ENV`` are dropped
    (``run_argv`` sets the GPU selection itself). A value goes by name only when an env
    file cannot hold it (a line break, or a line over 60 000 bytes); such a name must not be
    one the CLI itself reads (PATH, XDG_*, CONTAINERS_*, ...) nor set in ``cli_env``.
    Raises ``ContainerRuntimeError`` naming the variable (never its value).
    """
    merged: dict[str, str] = {}
    for item in env:
        if isinstance(item, (str, bytes)) or not isinstance(item, Sequence) or len(item) != 2:
            raise ContainerRuntimeError("env entries must be (name, value) pairs")
        name, value = item
        if not isinstance(name, str) or not _ENV_NAME_RE.fullmatch(name):
            raise ContainerRuntimeError(
                f"invalid environment variable name {name!r}: it must be non-empty and "
                "contain no '=', whitespace or NUL")
        if not isinstance(value, str):
            raise ContainerRuntimeError(f"environment variable {name}: value must be a string")
        if "\x00" in value:
            raise ContainerRuntimeError(f"environment variable {name}: value contains NUL")
        if len(name.encode()) + 1 + len(value.encode()) > _ENV_VALUE_MAX:
            raise ContainerRuntimeError(
                f"environment variable {name}: value too long (at most 128 KiB); "
                "pass large data as a file, not through the environment")
        merged.pop(name, None)
        merged[name] = value
    by_file: list[tuple[str, str]] = []
    by_name: list[tuple[str, str]] = []
    for name, value in merged.items():
        if name in _GPU_CONTROL_ENV:
            log.warning("ignoring the job's %s: the worker sets the GPU selection itself", name)
            continue
        fits_file = ("\n" not in value and "\r" not in value
                     and len(name.encode()) + 1 + len(value.encode()) <= _ENV_FILE_LINE_MAX)
        if fits_file:
            by_file.append((name, value))
            continue
        if _is_cli_env_name(name) or (cli_env is not None and name in cli_env):
            raise ContainerRuntimeError(
                f"environment variable {name} has a multi-line or very long value, which "
                "can only be handed to the container runtime by name, and the runtime's own "
                f"command reads {name}: rename the variable")
        by_name.append((name, value))
    return tuple(by_file), tuple(by_name)


def env_file_text(entries: Sequence[tuple[str, str]]) -> str:
    """The ``--env-file`` content for ``split_env``'s first result (one NAME=value a line)."""
    return "".join(f"{name}={value}\n" for name, value in entries)


def scratch_size_mib(spec: ContainerSpec) -> int | None:
    """The size of ``spec``'s /scratch volume (None: it has none)."""
    if spec.limits is not None:
        return _positive_mib("scratch_mib", spec.limits.scratch_mib)
    return _positive_mib("scratch_mib", spec.scratch_mib)


def _limit_args(limits: JobLimits) -> list[str]:
    mem = _positive_mib("memory limit", limits.memory_mib)
    pids = limits.pids
    if isinstance(pids, bool) or not isinstance(pids, int) or pids < 1:
        raise ContainerRuntimeError(f"pids limit must be a positive integer, got {pids!r}")
    cpus = limits.cpus
    if isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or not cpus > 0:
        raise ContainerRuntimeError(f"cpus limit must be > 0, got {cpus!r}")
    return ["--memory", f"{mem}m", "--memory-swap", f"{mem}m", "--cpus", f"{cpus:.2f}",
            "--pids-limit", str(pids)]


def run_argv(runtime: str, spec: ContainerSpec, *, env_file: str | None = None,
             env_names: Sequence[str] = (), stop_timeout_s: int = 10,
             scratch_path: str | None = None) -> list[str]:
    """The ``<runtime> run`` arguments (after the binary) that start ``spec`` detached.

    ``env_file`` is the path of the env file holding ``split_env``'s file entries (None when
    there are none) and ``env_names`` its by-name entries; no env value is ever in the
    result. ``scratch_path`` is the host directory of the /scratch volume
    (``ScratchVolumes.ensure``), needed when the spec has a scratch size. Raises
    ``ContainerRuntimeError`` for an invalid spec.
    """
    if runtime not in RUNTIME_NAMES:
        raise ContainerRuntimeError(f"unknown container runtime {runtime!r}")
    _check_name(spec.name)
    if not isinstance(spec.image, str) or not _IMAGE_RE.fullmatch(spec.image):
        raise ContainerRuntimeError(
            f"invalid image reference {spec.image!r}: expected e.g. "
            "docker.io/library/python:3.12 (no whitespace, not starting with '-')")
    for part in (*spec.command, *spec.args):
        if not isinstance(part, str) or "\x00" in part:
            raise ContainerRuntimeError("command and args must be strings without NUL")
    if spec.command and not spec.command[0]:
        raise ContainerRuntimeError("command[0] (the program to run) must not be empty")
    if isinstance(stop_timeout_s, bool) or not isinstance(stop_timeout_s, int) \
            or stop_timeout_s < 0:
        raise ContainerRuntimeError(f"stop timeout must be >= 0 seconds, got {stop_timeout_s}")

    argv = ["run", "-d", "--name", spec.name]
    for key, value in spec.labels:
        argv += ["--label", _check_label(key, value)]
    argv += ["--security-opt", "no-new-privileges", "--stop-timeout", str(stop_timeout_s)]

    if env_file is not None:
        argv += ["--env-file", env_file]
    for name in env_names:
        if not _ENV_NAME_RE.fullmatch(name):
            raise ContainerRuntimeError(f"invalid environment variable name {name!r}")
        argv += ["-e", name]

    for uuid in spec.gpu_uuids:
        if not isinstance(uuid, str) or not _GPU_UUID_RE.fullmatch(uuid):
            raise ContainerRuntimeError(
                f"invalid GPU UUID {uuid!r}: expected NVML's form, e.g. "
                "GPU-5f3c1a9e-0b7d-4c2e-9a61-2d8f0e4b7c13")
    if len(set(spec.gpu_uuids)) != len(spec.gpu_uuids):
        raise ContainerRuntimeError("gpu_uuids lists a GPU twice")
    if runtime == "docker" and spec.gpu_uuids:
        visible = ",".join(spec.gpu_uuids)
    else:
        visible = "void"
    argv += ["-e", f"NVIDIA_VISIBLE_DEVICES={visible}"]
    if spec.gpu_uuids:
        if runtime == "podman":
            for uuid in spec.gpu_uuids:
                argv += ["--device", f"nvidia.com/gpu={uuid}"]
        else:
            argv += ["--gpus", f'"device={",".join(spec.gpu_uuids)}"']

    host = _publish_host(spec.publish_host)
    seen: set[tuple[int, str]] = set()
    for binding in spec.ports:
        port, proto = binding.port, binding.protocol
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ContainerRuntimeError(f"invalid container port {port!r}: expected 1-65535")
        if proto not in _PROTOCOLS:
            raise ContainerRuntimeError(f"invalid protocol {proto!r} for port {port}: "
                                        "expected tcp or udp")
        if (port, proto) in seen:
            raise ContainerRuntimeError(f"port {port}/{proto} is listed twice")
        seen.add((port, proto))
        argv += ["-p", f"{host}::{port}/{proto}"]

    limits = spec.limits
    if limits is not None:
        argv += _limit_args(limits)
        shm = _positive_mib("shm size", limits.shm_mib)
        log_mib = _positive_mib("log size", limits.log_max_mib)
        oom = limits.oom_score_adj
    else:
        shm = _positive_mib("shm_size_mib", spec.shm_size_mib)
        log_mib, oom = LOG_MAX_MIB, CONTAINER_OOM_SCORE_ADJ
    if isinstance(oom, bool) or not isinstance(oom, int) or not -1000 <= oom <= 1000:
        raise ContainerRuntimeError(f"oom_score_adj must be -1000..1000, got {oom!r}")
    argv += ["--oom-score-adj", str(oom), "--log-opt", f"max-size={log_mib}m"]
    if shm is not None:
        argv += ["--shm-size", f"{shm}m"]
    if scratch_size_mib(spec) is not None:
        if not scratch_path or not os.path.isabs(scratch_path) \
                or any(c in scratch_path for c in ":,\n\x00"):
            raise ContainerRuntimeError(
                "/scratch is a disk volume: pass the absolute host path of the job's "
                f"scratch volume (ScratchVolumes.ensure), got {scratch_path!r}")
        argv += ["-v", f"{scratch_path}:/scratch:rw"]

    if spec.command:
        if runtime == "podman":
            # A JSON array replaces the entrypoint as a whole.
            argv += ["--entrypoint", json.dumps(list(spec.command))]
            argv.append(spec.image)
        else:
            # docker takes one program as --entrypoint; the rest of the command leads the
            # arguments, which gives the same process argv.
            argv += ["--entrypoint", spec.command[0]]
            argv.append(spec.image)
            argv += spec.command[1:]
    else:
        argv.append(spec.image)
    argv += spec.args
    return argv


_ARCH_ALIASES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
                 "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}


def host_arch() -> str:
    """This machine's CPU architecture in OCI terms (amd64, arm64, ...)."""
    m = platform.machine().lower()
    return _ARCH_ALIASES.get(m, m)


def check_image(image: str, inspect: Mapping[str, Any], arch: str | None = None) -> None:
    """Refuse (``ContainerRuntimeError``) an image, from one element of ``image inspect``,
    that cannot run here: not Linux, or built for another CPU architecture than ``arch``
    (default: this machine's). Fields the runtime does not report are not held against it."""
    want = arch or host_arch()
    os_name = str(inspect.get("Os") or "").lower()
    if os_name and os_name != "linux":
        raise ContainerRuntimeError(f"image {image} is built for {os_name}; this worker runs "
                                    "Linux containers only")
    got = str(inspect.get("Architecture") or "").lower()
    if got and _ARCH_ALIASES.get(got, got) != want:
        raise ContainerRuntimeError(f"image {image} is built for {got}; this machine is "
                                    f"{want}: push an image for {want} (or a multi-arch one)")


def _parse_time(value: Any) -> float | None:
    """Unix time of an RFC 3339 timestamp from inspect; None for Go's zero time or junk."""
    if not isinstance(value, str) or not value or value.startswith("0001-01-01"):
        return None
    m = re.fullmatch(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(\.\d+)?\s*"
                     r"(Z|UTC|[+-]\d\d:?\d\d)?(?:\s+\w+)?", value.strip())
    if not m:
        return None
    frac = (m[3] or "")[:7]
    tz = m[4] or "Z"
    if tz in ("Z", "UTC"):
        tz = "+00:00"
    elif ":" not in tz:
        tz = f"{tz[:3]}:{tz[3:]}"
    try:
        return datetime.fromisoformat(f"{m[1]}T{m[2]}{frac}{tz}").timestamp()
    except ValueError:
        return None


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _status(raw: Any) -> tuple[str, str | None]:
    """Map podman's and docker's State.Status onto ``STATUSES`` (+ a note for odd ones)."""
    s = str(raw or "").lower()
    if s in ("running", "paused", "stopping"):
        return "running", None
    if s in ("exited", "stopped", "dead", "removing"):
        return "exited", None
    if s in ("created", "configured", "initialized"):
        return "created", None
    if s == "restarting":
        return "restarting", None
    return "exited", f"unexpected container status {raw!r}"


def _published_ports(ports: Any) -> tuple[PublishedPort, ...]:
    out: set[PublishedPort] = set()
    if not isinstance(ports, Mapping):
        return ()
    for key, bindings in ports.items():
        port_s, _, proto = str(key).partition("/")
        port = _int_or_none(port_s)
        if port is None or not isinstance(bindings, list):
            continue
        for b in bindings:
            if not isinstance(b, Mapping):
                continue
            host_port = _int_or_none(b.get("HostPort"))
            if host_port is None or host_port <= 0:
                continue
            host = str(b.get("HostIp") or "0.0.0.0")
            out.add(PublishedPort(port=port, protocol=proto or "tcp", host=host,
                                  host_port=host_port))
    return tuple(sorted(out, key=lambda p: (p.port, p.protocol, p.host, p.host_port)))


def parse_inspect(obj: Mapping[str, Any]) -> ContainerState:
    """A ``ContainerState`` from one element of ``podman/docker container inspect``.

    Reads State.Status, State.ExitCode, State.Pid, State.StartedAt, State.Error,
    State.OOMKilled and NetworkSettings.Ports; a missing or malformed field reads as absent.
    """
    state = obj.get("State") if isinstance(obj, Mapping) else None
    if not isinstance(state, Mapping):
        state = {}
    status, note = _status(state.get("Status"))
    errors = [e for e in (note, str(state.get("Error") or "").strip() or None) if e]
    if state.get("OOMKilled") is True:
        errors.append("out of memory: the container was OOM-killed")
    exit_code = _int_or_none(state.get("ExitCode")) if status == "exited" else None
    pid = _int_or_none(state.get("Pid")) if status == "running" else None
    if pid is not None and pid <= 0:
        pid = None
    net = obj.get("NetworkSettings") if isinstance(obj, Mapping) else None
    ports = _published_ports(net.get("Ports")) if isinstance(net, Mapping) else ()
    return ContainerState(status=status, exit_code=exit_code, pid=pid, ports=ports,
                          started_at=_parse_time(state.get("StartedAt")),
                          error="; ".join(errors) or None)


def parse_top_pids(text: str) -> frozenset[int]:
    """PIDs from ``podman top <c> hpid`` / ``docker top <c> -eo pid``: the first column of
    every line that starts with a number (the header and blank lines are skipped)."""
    pids: set[int] = set()
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0].isdigit():
            pid = int(fields[0])
            if pid > 0:
                pids.add(pid)
    return frozenset(pids)


def _hint(text: str) -> str:
    """What to do about a runtime error we recognise ('' for others)."""
    low = text.lower()
    if "cgroups in hybrid mode" in low or ("crun" in low and "cgroup" in low):
        return ("podman's default OCI runtime crun cannot run containers here: install runc "
                "and set runtime = \"runc\" under [engine] in a containers.conf that "
                "CONTAINERS_CONF points to")
    if "rlimit_nproc" in low or ("setrlimit" in low and "not permitted" in low):
        return ("the runtime's default ulimits cannot be applied here: set "
                "default_ulimits = [] under [containers] in a containers.conf that "
                "CONTAINERS_CONF points to")
    if "unresolvable cdi devices" in low or ("cdi" in low and "nvidia.com/gpu" in low):
        return ("podman finds no CDI device for that GPU: install the NVIDIA Container "
                "Toolkit, run `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` and "
                "check that `nvidia-ctk cdi list` shows nvidia.com/gpu=<GPU UUID>")
    if "could not select device driver" in low and "gpu" in low:
        return ("docker has no GPU support: install the NVIDIA Container Toolkit, run "
                "`nvidia-ctk runtime configure --runtime=docker` and restart dockerd")
    if "cannot connect to the docker daemon" in low or "is the docker daemon running" in low:
        return "start the Docker daemon (systemctl start docker) or use podman"
    if "permission denied" in low and "docker.sock" in low:
        return "run the worker as a user in the docker group (or as root)"
    return ""


def _is_missing(text: str) -> bool:
    low = text.lower()
    return "no such container" in low or "no such object" in low or "no container with" in low


def _tail_text(data: bytes | str | None, limit: int = 2000) -> str:
    if data is None:
        return ""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _redact(text: str, env: Sequence[tuple[str, str]]) -> str:
    for _, value in sorted(env, key=lambda kv: -len(kv[1])):
        if len(value) >= _REDACT_MIN:
            text = text.replace(value, "***")
    return text


def _check_tail(tail: int | None) -> list[str]:
    if tail is None:
        return []
    if isinstance(tail, bool) or not isinstance(tail, int) or tail < 0:
        raise ContainerRuntimeError(f"tail must be a number of lines >= 0, got {tail!r}")
    return ["--tail", str(tail)]


# -------------------------------------------------------------------------------- log reads


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
    data. ``release(name)`` unmounts it and deletes the image. Needs root (loop devices)
    and mkfs.ext4 (e2fsprogs); errors are ``ContainerRuntimeError`` saying so.
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

    def release(self, name: str) -> None:
        path = self.path(name)
        if self._mounted(path):
            try:
                self._run("umount", path)
            except ContainerRuntimeError:
                self._run("umount", "-l", path)  # busy: detach now, freed when unused
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


# -------------------------------------------------------------------------------- log stream


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


# ------------------------------------------------------------------------ CLI runtimes


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

    def run(self, spec: ContainerSpec) -> str:
        _check_name(spec.name)
        existing = self._container_id(spec.name)
        if existing:
            return existing
        cli_env = self._env()
        by_file, by_name = split_env(spec.env, cli_env)
        scratch = scratch_size_mib(spec)
        scratch_path = self.scratch.ensure(spec.name, scratch) if scratch is not None else None
        env_file = self._write_env_file(by_file) if by_file else None
        try:
            argv = run_argv(self.name, spec, env_file=env_file,
                            env_names=[n for n, _ in by_name],
                            stop_timeout_s=self.stop_timeout_s, scratch_path=scratch_path)
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
            if re.fullmatch(r"[0-9a-f]{12,64}", cid):
                return cid
            found = self._container_id(spec.name)
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
    the runtime for every later call; ``scratch_dir`` holds its /scratch volumes. Raises ``ContainerRuntimeError`` naming every runtime
    tried and why it failed; there is no fallback to running workloads on the host.
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
