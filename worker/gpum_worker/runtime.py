"""Container runtimes: the ``ContainerRuntime`` interface and the data it speaks.

The worker runs every job's workload in a container, never on the host (docs/protocol.md,
"Workloads"). This module holds what every runtime shares: the ``ContainerRuntime``
protocol, the container spec and state types, a job container's name and label, and the
log-read bounds. The podman and docker implementations are in ``runtime_cli``
(``detect_runtime`` picks one); the argument building and output parsing they use in
``runtime_argv``, log reads in ``runtime_logs``, the /scratch volumes in ``runtime_disk``.

Guarantees of ``run`` (both CLI runtimes):

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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from .keys import b58encode
from .limits import JobLimits

__all__ = [
    "CONTAINER_PREFIX",
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
    "PortBinding",
    "PublishedPort",
    "container_name",
]

RUNTIME_NAMES = ("podman", "docker")
"""Supported runtimes, in the order ``detect_runtime("auto")`` tries them."""

JOB_LABEL = "gpum.job"
"""Label key on every job container; its value is the job address (base58)."""

CONTAINER_PREFIX = "gpum-"
"""Every job container's name starts so (``container_name``); the worker never touches
another container."""


def container_name(job: bytes) -> str:
    """The container of ``job``: ``gpum-<job b58>``."""
    return CONTAINER_PREFIX + b58encode(job)


STATUSES = ("running", "exited", "restarting", "created", "missing")
"""Every value ``ContainerState.status`` takes."""

DEFAULT_SCRATCH_DIR = "/var/lib/gpum-worker/scratch"
"""Where the /scratch volumes live unless the runtime is told otherwise."""

NO_RUNTIME_MESSAGE = ("no container runtime: install podman (with runc) or docker; "
                      "the worker never runs a workload outside a container")

LOG_READ_MAX_BYTES = 1 << 20
"""A log read returns at most this much (the tail) unless told otherwise."""
LOG_READ_DEADLINE_S = 10.0
"""A log read ends by then (the CLI is killed) unless told otherwise."""
LOG_LINE_MAX_BYTES = 64 * 1024
"""A longer log line is cut there (and marked) when read."""

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
    checkpoint_mount: tuple[str, str] | None = None
    """(host directory, container path): the workload's checkpoint directory, bind-mounted
    read-write (``gpum_worker.checkpoints``); None: none."""


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

