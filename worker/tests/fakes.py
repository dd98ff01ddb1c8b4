"""Test doubles for unit tests only: a GPU backend that can inject every NVML failure."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpum_worker.errors import GpuLost, MetricNotSupported, NvmlCallFailed, NvmlUnavailable

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
