"""What the podman and docker CLIs are called with, and how their answers read.

Pure functions, tested without a runtime: the ``run`` argument list (``run_argv``) and the
job environment's split between the env file and names (``split_env``, ``env_file_text``),
the image checks (``check_image``), the parsing of ``container inspect`` and ``top``
(``parse_inspect``, ``parse_top_pids``), and the validation and error-text helpers the CLI
runtimes (``runtime_cli``) and the /scratch volumes (``runtime_disk``) share. Every
refusal is a ``ContainerRuntimeError`` naming what is wrong (never an environment value).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import platform
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .errors import ContainerRuntimeError
from .limits import CONTAINER_OOM_SCORE_ADJ, LOG_MAX_MIB, JobLimits
from .runtime import RUNTIME_NAMES, ContainerSpec, ContainerState, PublishedPort

__all__ = [
    "env_file_text",
    "parse_inspect",
    "parse_top_pids",
    "run_argv",
    "split_env",
]

log = logging.getLogger("gpum_worker.runtime")

# Env-file lines are read with Go's bufio.Scanner (64 KiB tokens); stay well below.
_ENV_FILE_LINE_MAX = 60_000
# Linux refuses a single environment string over MAX_ARG_STRLEN (128 KiB) in execve.
_ENV_VALUE_MAX = 128 * 1024 - 1
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


_MOUNT_PATH_RE = re.compile(r"/[A-Za-z0-9._/-]*")


def _checkpoint_volume(mount: object) -> str:
    """The ``-v`` value of a checkpoint mount: both paths absolute, normalized, of letters,
    digits and ``._-/`` only (so never read as -v options), the container path not ``/`` nor
    /scratch."""
    ok = isinstance(mount, tuple) and len(mount) == 2
    host, target = mount if ok else ("", "")  # type: ignore[misc]
    for path in (host, target):
        ok = ok and isinstance(path, str) and _MOUNT_PATH_RE.fullmatch(path) is not None \
            and os.path.normpath(path) == path and path != "/"
    if not ok or target == "/scratch" or target.startswith("/scratch/"):
        raise ContainerRuntimeError(
            f"invalid checkpoint mount {mount!r}: expected (host directory, container path), "
            "both absolute and normalized, of letters, digits and ._-/, not / or /scratch")
    return f"{host}:{target}:rw"


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
             scratch_path: str | None = None, create: bool = False) -> list[str]:
    """The ``<runtime> run`` arguments (after the binary) that start ``spec`` detached
    (with ``create``: the ``create`` arguments that make it without starting it).

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

    argv = ["create", "--name", spec.name] if create else ["run", "-d", "--name", spec.name]
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
    if spec.checkpoint_mount is not None:
        argv += ["-v", _checkpoint_volume(spec.checkpoint_mount)]

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

