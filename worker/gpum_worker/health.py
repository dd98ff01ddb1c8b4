"""Health policy (pure): thresholds, per-sample flags and human-readable warnings.

Bits are the ``HEALTH_*`` constants of ``gpu_market.proof``. Critical bits
(``HEALTH_CRITICAL_MASK``: temperature >= critical, uncorrected ECC errors above the
allowance, GPU lost) make time non-billable; the others are warnings only.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_market.proof import (
    DEFAULT_ECC_UNCORRECTED_MAX,
    DEFAULT_TEMP_CRITICAL_C,
    HEALTH_ECC_UNCORRECTED,
    HEALTH_FAN_HIGH,
    HEALTH_FOREIGN_PROCESS,
    HEALTH_GPU_LOST,
    HEALTH_NVML_ERROR,
    HEALTH_POWER_OVER_LIMIT,
    HEALTH_SAMPLES_MISSING,
    HEALTH_TEMP_CRITICAL,
    HEALTH_TEMP_WARN,
)

from .gpu import GpuSample

FLAG_NAMES = {
    HEALTH_TEMP_WARN: "temperature-warning",
    HEALTH_TEMP_CRITICAL: "temperature-critical",
    HEALTH_FAN_HIGH: "fan-high",
    HEALTH_POWER_OVER_LIMIT: "power-over-limit",
    HEALTH_ECC_UNCORRECTED: "ecc-uncorrected",
    HEALTH_GPU_LOST: "gpu-lost",
    HEALTH_SAMPLES_MISSING: "samples-missing",
    HEALTH_NVML_ERROR: "nvml-error",
    HEALTH_FOREIGN_PROCESS: "foreign-process",
}


@dataclass(frozen=True)
class Thresholds:
    """Health thresholds; defaults suit data-centre GPUs (H100/A100 slow down near 90 C)."""

    temp_warn_c: int = 85
    temp_critical_c: int = DEFAULT_TEMP_CRITICAL_C
    fan_warn_pct: int = 95
    power_over_limit_pct: int = 105
    """Power above this % of the enforced power limit is flagged."""
    ecc_uncorrected_max: int = DEFAULT_ECC_UNCORRECTED_MAX
    """Uncorrected ECC errors allowed per window; more is critical."""

    def validate(self) -> None:
        if not 0 < self.temp_warn_c <= self.temp_critical_c <= 200:
            raise ValueError("need 0 < temp_warn_c <= temp_critical_c <= 200")
        if not 0 < self.fan_warn_pct <= 100:
            raise ValueError("fan_warn_pct must be in 1..100")
        if not 100 <= self.power_over_limit_pct <= 1000:
            raise ValueError("power_over_limit_pct must be in 100..1000")
        if self.ecc_uncorrected_max < 0:
            raise ValueError("ecc_uncorrected_max must be >= 0")


DEFAULT_THRESHOLDS = Thresholds()


def sample_flags(s: GpuSample, th: Thresholds) -> int:
    """Health bits of one sample (ECC is judged per window, see ``window.aggregate_gpu``)."""
    if not s.ok:
        return HEALTH_GPU_LOST
    f = 0
    if s.temp_c is not None:
        if s.temp_c >= th.temp_critical_c:
            f |= HEALTH_TEMP_CRITICAL
        elif s.temp_c >= th.temp_warn_c:
            f |= HEALTH_TEMP_WARN
    if s.fan_pct is not None and s.fan_pct >= th.fan_warn_pct:
        f |= HEALTH_FAN_HIGH
    if (s.power_mw is not None and s.power_limit_mw
            and s.power_mw * 100 > s.power_limit_mw * th.power_over_limit_pct):
        f |= HEALTH_POWER_OVER_LIMIT
    if s.errors:
        f |= HEALTH_NVML_ERROR
    return f


def describe(flags: int) -> str:
    """Comma-separated names of the set bits, e.g. 'temperature-warning,fan-high'."""
    names = [n for bit, n in FLAG_NAMES.items() if flags & bit]
    unknown = flags & ~sum(FLAG_NAMES)
    if unknown:
        names.append(f"0x{unknown:x}")
    return ",".join(names) or "ok"
