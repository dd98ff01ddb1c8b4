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
