"""``SimulatedBackend``: deterministic simulated GPUs for ``--simulate`` (explicit only).

Each GPU follows a seeded random walk: utilization drifts around a per-GPU load level,
temperature and power follow utilization with lag, fan follows temperature, memory use
drifts, ECC stays at 0 and one simulated compute process runs per GPU. The same
``(num_gpus, seed)`` and the same sequence of calls give the same values; the state of a
GPU advances by one step on each ``utilization`` call (the first read of every sample).
UUIDs are stable per (seed, index), so an outbox keeps its GPU assignment across restarts.
"""

from __future__ import annotations

import random
import uuid as uuidlib
from dataclasses import dataclass

from .errors import NvmlCallFailed

MIB = 1024 * 1024


@dataclass
class _SimGpu:
    rng: random.Random
    uuid: str
    load: float
    util: float
    mem_used_mib: float
    temp: float
    power_w: float


class SimulatedBackend:
    """A ``GpuBackend`` with ``num_gpus`` simulated H100-like GPUs (80 GiB, 700 W)."""

    kind = "simulated"
    MEM_TOTAL_MIB = 81_559
    POWER_LIMIT_MW = 700_000
    IDLE_W = 70.0

    def __init__(self, num_gpus: int = 1, seed: int = 0) -> None:
        if not 1 <= num_gpus <= 64:
            raise ValueError("--gpus must be between 1 and 64")
        self.num_gpus = num_gpus
        self.seed = seed
        self._gpus: list[_SimGpu] = []

    def init(self) -> None:
        self._gpus = []
        for i in range(self.num_gpus):
            rng = random.Random(f"gpum-sim/{self.seed}/{i}")
            u = uuidlib.UUID(int=rng.getrandbits(128), version=4)
            load = rng.uniform(0.55, 0.95)
            self._gpus.append(_SimGpu(rng=rng, uuid=f"GPU-{u}", load=load, util=load,
                                      mem_used_mib=rng.uniform(20_000, 70_000),
                                      temp=rng.uniform(45, 60), power_w=self.IDLE_W))

    def shutdown(self) -> None:
        pass

    def driver_version(self) -> str | None:
        return "simulated"

    def device_count(self) -> int:
        return self.num_gpus

    def _g(self, index: int) -> _SimGpu:
        if not 0 <= index < len(self._gpus):
            raise NvmlCallFailed(f"GPU {index}: no such simulated GPU")
        return self._gpus[index]

    def uuid(self, index: int) -> str:
        return self._g(index).uuid

    def name(self, index: int) -> str:
        self._g(index)
        return "Simulated H100 80GB"

    def _step(self, g: _SimGpu) -> None:
        r = g.rng
        g.load = min(0.99, max(0.05, g.load + r.gauss(0, 0.01)))
        g.util = min(1.0, max(0.0, g.util + 0.3 * (g.load - g.util) + r.gauss(0, 0.04)))
        g.mem_used_mib = min(self.MEM_TOTAL_MIB * 0.98,
                             max(1_000.0, g.mem_used_mib + r.gauss(0, 150)))
        target_temp = 38 + 42 * g.util
        g.temp += 0.1 * (target_temp - g.temp) + r.gauss(0, 0.3)
        target_power = self.IDLE_W + (self.POWER_LIMIT_MW / 1000 - self.IDLE_W) * 0.9 * g.util
        g.power_w += 0.5 * (target_power - g.power_w) + r.gauss(0, 5)

    def utilization(self, index: int) -> tuple[int, int]:
        g = self._g(index)
        self._step(g)
        return round(100 * g.util), round(100 * g.util * 0.55)

    def memory(self, index: int) -> tuple[int, int]:
        g = self._g(index)
        return int(g.mem_used_mib) * MIB, self.MEM_TOTAL_MIB * MIB

    def temperature(self, index: int) -> int:
        return round(self._g(index).temp)

    def power_mw(self, index: int) -> int:
        return max(0, round(self._g(index).power_w * 1000))

    def power_limit_mw(self, index: int) -> int:
        self._g(index)
        return self.POWER_LIMIT_MW

    def fan_pct(self, index: int) -> int:
        g = self._g(index)
        return max(30, min(100, round(30 + 1.2 * (g.temp - 40))))

    def ecc_uncorrected(self, index: int) -> int:
        self._g(index)
        return 0

    def processes(self, index: int) -> list[tuple[int, int | None]]:
        g = self._g(index)
        return [(40_000 + index, int(g.mem_used_mib * 0.95) * MIB)]
