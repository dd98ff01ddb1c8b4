"""Exception hierarchy of the worker.

    WorkerError                 fatal, user-facing: the CLI prints its message on one line
    ├── ConfigError             bad/missing config value, URL, flag combination
    ├── KeyFileError            missing, malformed or too-open key file
    ├── NvmlUnavailable         no NVIDIA driver / NVML library (never falls back to --simulate)
    ├── OutboxError             the outbox database is unusable or belongs to another key
    ├── JobSourceError          the job source (chain RPC, SDK) failed
    └── ContainerRuntimeError   no usable podman/docker, or a container command failed
    GpuError                    one NVML call on one GPU failed; the worker keeps running
    ├── MetricNotSupported      the GPU does not report this metric -> recorded as absent
    ├── GpuLost                 the GPU fell off the bus / handle invalid -> GPU flagged lost
    └── NvmlCallFailed          any other NVML error -> metric absent, NVML_ERROR flag
"""

from __future__ import annotations


class WorkerError(Exception):
    """A fatal error whose message tells the operator what to do."""


class ConfigError(WorkerError):
    pass


class KeyFileError(WorkerError):
    pass


class NvmlUnavailable(WorkerError):
    pass


class OutboxError(WorkerError):
    pass


class JobSourceError(WorkerError):
    pass


class GpuError(Exception):
    """An NVML call on one GPU failed."""


class MetricNotSupported(GpuError):
    pass


class GpuLost(GpuError):
    pass


class NvmlCallFailed(GpuError):
    pass


class ContainerRuntimeError(WorkerError):
    """The container runtime (podman/docker) is missing, broken, or refused a command.

    Raised by ``runtime.detect_runtime`` (fatal at start-up) and by one
    ``ContainerRuntime`` call (the caller decides whether the job fails). The message
    names the command and carries the CLI's own error text; it never contains the value
    of a container environment variable.
    """
