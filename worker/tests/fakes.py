"""Test doubles for unit tests only: a GPU backend that can inject every NVML failure, and
a container runtime in memory."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from gpum_worker.errors import (
    ContainerRuntimeError,
    GpuLost,
    MetricNotSupported,
    NvmlCallFailed,
    NvmlUnavailable,
)

MIB = 1024 * 1024


@dataclass
class FakeGpu:
    uuid: str
    name: str = "Fake GPU"
    utilization: tuple[int, int] = (80, 40)
    memory: tuple[int, int] = (1000 * MIB, 80_000 * MIB)
    temperature: int = 60
    power: int = 300_000
    power_limit: int = 700_000
    fan: int = 40
    ecc_uncorrected: int = 0
    processes: list[tuple[int, int | None]] = field(default_factory=lambda: [(4242, 900 * MIB)])


class FakeBackend:
    """``GpuBackend`` whose values and failures tests set directly.

    ``unsupported[(index, metric)]``, ``failing[(index, metric)] = message`` and ``lost``
    (set of indexes) inject NotSupported, a failing call and a lost GPU; ``init_error``
    makes ``init`` fail like a missing driver.
    """

    kind = "fake"

    def __init__(self, gpus: list[FakeGpu], init_error: str | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.unsupported: set[tuple[int, str]] = set()
        self.failing: dict[tuple[int, str], str] = {}
        self.lost: set[int] = set()
        self.calls = 0
        self.shut = False

    def init(self) -> None:
        if self.init_error:
            raise NvmlUnavailable(self.init_error)

    def shutdown(self) -> None:
        self.shut = True

    def driver_version(self) -> str | None:
        return "fake-1.0"

    def device_count(self) -> int:
        return len(self.gpus)

    def _get(self, index: int, metric: str):
        self.calls += 1
        if index in self.lost:
            raise GpuLost(f"GPU {index}: NVMLError_GpuIsLost: GPU is lost")
        if (index, metric) in self.unsupported:
            raise MetricNotSupported(f"GPU {index}: {metric}: not supported")
        if (index, metric) in self.failing:
            raise NvmlCallFailed(f"GPU {index}: {metric}: {self.failing[(index, metric)]}")
        return getattr(self.gpus[index], metric)

    def uuid(self, index: int) -> str:
        return self._get(index, "uuid")

    def name(self, index: int) -> str:
        return self._get(index, "name")

    def utilization(self, index: int) -> tuple[int, int]:
        return self._get(index, "utilization")

    def memory(self, index: int) -> tuple[int, int]:
        return self._get(index, "memory")

    def temperature(self, index: int) -> int:
        return self._get(index, "temperature")

    def power_mw(self, index: int) -> int:
        return self._get(index, "power")

    def power_limit_mw(self, index: int) -> int:
        return self._get(index, "power_limit")

    def fan_pct(self, index: int) -> int:
        return self._get(index, "fan")

    def ecc_uncorrected(self, index: int) -> int:
        return self._get(index, "ecc_uncorrected")

    def processes(self, index: int) -> list[tuple[int, int | None]]:
        return list(self._get(index, "processes"))


class FakeNvml:
    """A module-like stand-in for ``pynvml`` (real exception classes) whose driver reloads.

    ``temps`` maps each GPU uuid to its temperature, so a test can tell GPUs apart.
    ``reload_driver(down_inits=k, reorder=True)`` models ``rmmod nvidia; modprobe nvidia``:
    the library loses its state (every call raises ``NVMLError_Uninitialized``, handles
    from before are invalid), the next ``k`` ``nvmlInit`` calls fail with
    ``NVMLError_DriverNotLoaded``, and with ``reorder`` the device indexes change.
    """

    def __init__(self, temps: dict[str, int]) -> None:
        import pynvml

        for name in dir(pynvml):
            if name.startswith(("NVMLError", "NVML_")):
                setattr(self, name, getattr(pynvml, name))
        self._pynvml = pynvml
        self.temps = dict(temps)
        self.order = list(temps)
        self.initialized = False
        self.generation = 0
        self.init_calls: list[float] = []
        self.shutdown_calls = 0
        self.clock = lambda: 0.0
        self.lost: set[str] = set()
        """uuids of GPUs that fell off the bus (their calls raise NVMLError_GpuIsLost)."""
        self._down_inits = 0

    def _err(self, code: int) -> Exception:
        return self._pynvml.NVMLError(code)

    def reload_driver(self, down_inits: int = 0, reorder: bool = False) -> None:
        self.initialized = False
        self.generation += 1
        self._down_inits = down_inits
        if reorder:
            self.order.reverse()

    def nvmlInit(self) -> None:
        self.init_calls.append(self.clock())
        if self._down_inits:
            self._down_inits -= 1
            raise self._err(self._pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1
        if not self.initialized:
            raise self._err(self._pynvml.NVML_ERROR_UNINITIALIZED)
        self.initialized = False

    def _ready(self) -> None:
        if not self.initialized:
            raise self._err(self._pynvml.NVML_ERROR_UNINITIALIZED)

    def _uuid_of(self, handle: tuple) -> str:
        self._ready()
        if handle[1] != self.generation:  # a handle from before the reload
            raise self._err(self._pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if handle[2] in self.lost:
            raise self._err(self._pynvml.NVML_ERROR_GPU_IS_LOST)
        return handle[2]

    def nvmlSystemGetDriverVersion(self) -> str:
        self._ready()
        return "550.54"

    def nvmlDeviceGetCount(self) -> int:
        self._ready()
        return len(self.order)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> tuple:
        self._ready()
        return ("h", self.generation, self.order[i])

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> tuple:
        self._ready()
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        if uuid not in self.temps:
            raise self._err(self._pynvml.NVML_ERROR_NOT_FOUND)
        return ("h", self.generation, uuid)

    def nvmlDeviceGetUUID(self, h: tuple) -> str:
        return self._uuid_of(h)

    def nvmlDeviceGetName(self, h: tuple) -> bytes:
        self._uuid_of(h)
        return b"NVIDIA H100"

    def nvmlDeviceGetUtilizationRates(self, h: tuple):
        import types

        self._uuid_of(h)
        return types.SimpleNamespace(gpu=90, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h: tuple):
        import types

        self._uuid_of(h)
        return types.SimpleNamespace(used=MIB, total=80 * 1024 * MIB)

    def nvmlDeviceGetTemperature(self, h: tuple, sensor: int) -> int:
        return self.temps[self._uuid_of(h)]

    def nvmlDeviceGetPowerUsage(self, h: tuple) -> int:
        self._uuid_of(h)
        return 300_000

    def nvmlDeviceGetEnforcedPowerLimit(self, h: tuple) -> int:
        self._uuid_of(h)
        return 700_000

    def nvmlDeviceGetFanSpeed(self, h: tuple) -> int:
        self._uuid_of(h)
        return 40

    def nvmlDeviceGetTotalEccErrors(self, h: tuple, error_type: int, counter: int) -> int:
        self._uuid_of(h)
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, h: tuple) -> list:
        self._uuid_of(h)
        return []


class NoHeads:
    """A ``HeadSource`` for unit tests: every validator answers ``job_unknown``."""

    def __init__(self) -> None:
        self.calls = 0

    def heads(self, job: bytes, provider: bytes, keys, validators) -> list:
        self.calls += 1
        return []


# ---------------------------------------------------------------------------- containers


@dataclass
class FakeContainer:
    spec: Any
    status: str = "running"
    exit_code: int | None = None
    pids: set[int] = field(default_factory=set)
    output: list[bytes] = field(default_factory=list)
    error: str | None = None
    started_at: float = 0.0


class FakeLogStream:
    """``follow_logs`` of ``FakeRuntime``: the lines so far, then new ones as they are
    written, until the container stops or ``close()``."""

    def __init__(self, rt: FakeRuntime, name: str, tail: int | None) -> None:
        self._rt = rt
        self._name = name
        c = rt.containers[name]
        self._pos = 0 if tail is None else max(0, len(c.output) - tail)
        self.closed = False
        rt.streams.append(self)

    def __iter__(self) -> FakeLogStream:
        return self

    def __next__(self) -> bytes:
        with self._rt.cond:
            while True:
                if self.closed:
                    raise StopIteration
                c = self._rt.containers.get(self._name)
                if c is not None and self._pos < len(c.output):
                    self._pos += 1
                    return c.output[self._pos - 1]
                if c is None or c.status != "running":
                    raise StopIteration
                self._rt.cond.wait(0.05)

    def close(self) -> None:
        with self._rt.cond:
            self.closed = True
            self._rt.cond.notify_all()


class FakeRuntime:
    """A ``ContainerRuntime`` in memory for unit tests.

    ``fail`` maps a method name ("run", "state", "remove", "list", "pids", "logs", "image",
    "prune") to an error message it raises (``ContainerRuntimeError``); ``start_status`` is
    what a new container's status is; ``exit(name, code)``, ``write(name, data)`` and ``add(name,
    labels)`` change containers behind the worker's back; ``calls`` counts calls by method.
    """

    name = "fake"

    def __init__(self) -> None:
        self.containers: dict[str, FakeContainer] = {}
        self.fail: dict[str, str] = {}
        self.start_status = "running"
        self.calls: dict[str, int] = {}
        self.runs: list[Any] = []
        self.removed: list[str] = []
        self.images_checked: list[str] = []
        self.streams: list[FakeLogStream] = []
        self.cond = threading.Condition()
        self.next_pid = 50_000

    def _call(self, method: str) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1
        if method in self.fail:
            raise ContainerRuntimeError(f"fake {method} failed: {self.fail[method]}")

    def run(self, spec: Any) -> str:
        self._call("run")
        with self.cond:
            if spec.name not in self.containers:
                self.runs.append(spec)
                self.next_pid += 1
                self.containers[spec.name] = FakeContainer(
                    spec, status=self.start_status, pids={self.next_pid}, started_at=len(self.runs))
        return "id-" + spec.name

    def state(self, name: str) -> Any:
        from gpum_worker.runtime import ContainerState, PublishedPort

        self._call("state")
        c = self.containers.get(name)
        if c is None:
            return ContainerState("missing", None, None, (), None)
        running = c.status == "running"
        ports = tuple(PublishedPort(p.port, p.protocol, c.spec.publish_host, 40_000 + i)
                      for i, p in enumerate(c.spec.ports)) if running else ()
        return ContainerState(c.status, c.exit_code if c.status == "exited" else None,
                              min(c.pids) if running and c.pids else None, ports,
                              c.started_at, c.error)

    def logs(self, name: str, tail: int | None = None, **caps: Any) -> bytes:
        self._call("logs")
        c = self.containers.get(name)
        if c is None:
            raise ContainerRuntimeError(f"no container named {name}")
        lines = c.output if tail is None else c.output[len(c.output) - tail:] if tail else []
        return b"".join(lines)

    def follow_logs(self, name: str, tail: int | None = None) -> FakeLogStream:
        self._call("follow_logs")
        if name not in self.containers:
            raise ContainerRuntimeError(f"no container named {name}")
        return FakeLogStream(self, name, tail)

    def ensure_image(self, image: str) -> None:
        self._call("image")
        self.images_checked.append(image)

    def prune_volumes(self, keep: set[str]) -> None:
        self._call("prune")

    def writable_dir(self, name: str) -> str | None:
        return None

    def remove(self, name: str, timeout_s: int = 5) -> None:
        self._call("remove")
        with self.cond:
            if self.containers.pop(name, None) is not None:
                self.removed.append(name)
            self.cond.notify_all()

    def list_job_containers(self, match=None) -> dict[str, str]:
        from gpum_worker.runtime import JOB_LABEL

        self._call("list")
        return {n: dict(c.spec.labels).get(JOB_LABEL, "") for n, c in self.containers.items()
                if JOB_LABEL in dict(c.spec.labels)
                and all(dict(c.spec.labels).get(k) == v for k, v in (match or {}).items())}

    def pids(self, name: str) -> frozenset[int]:
        self._call("pids")
        c = self.containers.get(name)
        return frozenset(c.pids) if c is not None and c.status == "running" else frozenset()

    # test helpers
    def exit(self, name: str, code: int) -> None:
        with self.cond:
            c = self.containers[name]
            c.status, c.exit_code = "exited", code
            self.cond.notify_all()

    def write(self, name: str, data: bytes) -> None:
        with self.cond:
            self.containers[name].output.extend(data.splitlines(keepends=True))
            self.cond.notify_all()

    def add(self, name: str, labels: tuple[tuple[str, str], ...], status: str = "running"
            ) -> None:
        from gpum_worker.runtime import ContainerSpec

        self.containers[name] = FakeContainer(ContainerSpec(name=name, image="x", labels=labels),
                                              status=status)
