"""Window aggregation and the billable policy (pure: no clock, no I/O).

Billable policy (also in worker/README.md). A window ``[start, end)`` of ``L = end - start``
seconds is split into ``L`` one-second slots ``[start + i, start + i + 1)``.

* A slot is *healthy* for a GPU when the GPU produced at least one successful sample in it
  and no sample of that GPU in it shows a critical condition (temperature >=
  ``temp_critical_c``, or the GPU lost).
* If any assigned GPU's uncorrected ECC error count rose by more than
  ``ecc_uncorrected_max`` during the window, the whole window is non-billable (0): results
  computed on that GPU cannot be trusted.
* Otherwise ``billable_seconds`` = the number of slots that are healthy for *every*
  assigned GPU. When every GPU has a sample in every slot and nothing critical happened,
  this is exactly ``L``.

``covered_seconds`` of a GPU is its own count of healthy slots, so a validator can check
``billable_seconds <= min(covered_seconds)`` (and 0 when any GPU reports an ECC delta over
the allowance) from the proof alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_market.proof import (
    HEALTH_ECC_UNCORRECTED,
    HEALTH_GPU_LOST,
    HEALTH_SAMPLES_MISSING,
    HEALTH_TEMP_CRITICAL,
    GpuWindow,
)

from .gpu import GpuSample
from .health import Thresholds, sample_flags

_SLOT_CRITICAL = HEALTH_TEMP_CRITICAL | HEALTH_GPU_LOST


@dataclass(frozen=True)
class GpuWindowResult:
    window: GpuWindow
    healthy_slots: frozenset[int]
    ecc_critical: bool


def _avg(values: list[int]) -> int | None:
    return sum(values) // len(values) if values else None


def aggregate_gpu(
    uuid: str,
    samples: Sequence[GpuSample],
    window_start: int,
    window_end: int,
    th: Thresholds,
    ecc_baseline: int | None = None,
) -> GpuWindowResult:
    """Aggregate one GPU's samples with ``window_start <= t < window_end``.

    ``ecc_baseline`` is the GPU's last uncorrected-ECC total read before the window (None:
    use the first reading inside it). Samples outside the window are ignored.
    """
    length = window_end - window_start
    inside = [s for s in samples if window_start <= s.t < window_end]
    ok = [s for s in inside if s.ok]
    flags = 0
    covered: set[int] = set()
    bad: set[int] = set()
    for s in inside:
        f = sample_flags(s, th)
        flags |= f
        slot = min(length - 1, math.floor(s.t - window_start))
        if f & _SLOT_CRITICAL:
            bad.add(slot)
        if s.ok:
            covered.add(slot)
    healthy = frozenset(covered - bad)
    if len(covered) < length:
        flags |= HEALTH_SAMPLES_MISSING

    ecc = [s.ecc_uncorrected_total for s in ok if s.ecc_uncorrected_total is not None]
    ecc_delta: int | None = None
    if ecc:
        base = ecc_baseline if ecc_baseline is not None else ecc[0]
        ecc_delta = max(0, max(ecc) - base)
    ecc_critical = ecc_delta is not None and ecc_delta > th.ecc_uncorrected_max
    if ecc_critical:
        flags |= HEALTH_ECC_UNCORRECTED

    util = [s.util_gpu_pct * 100 for s in ok if s.util_gpu_pct is not None]
    util_mem = [s.util_mem_pct * 100 for s in ok if s.util_mem_pct is not None]
    mem_used = [s.mem_used_mib for s in ok if s.mem_used_mib is not None]
    mem_total = [s.mem_total_mib for s in ok if s.mem_total_mib is not None]
    temps = [s.temp_c for s in ok if s.temp_c is not None]
    power = [s.power_mw for s in ok if s.power_mw is not None]
    fans = [s.fan_pct for s in ok if s.fan_pct is not None]
    w = GpuWindow(
        uuid=uuid,
        samples=len(ok),
        covered_seconds=len(healthy),
        util_gpu_avg_bp=None if not util else min(10_000, _avg(util) or 0),
        util_gpu_max_bp=min(10_000, max(util)) if util else None,
        util_mem_avg_bp=None if not util_mem else min(10_000, _avg(util_mem) or 0),
        mem_used_max_mib=max(mem_used) if mem_used else None,
        mem_total_mib=max(mem_total) if mem_total else None,
        temp_max_c=max(temps) if temps else None,
        power_avg_mw=_avg(power),
        fan_max_pct=max(fans) if fans else None,
        ecc_uncorrected_delta=ecc_delta,
        health_flags=flags,
    )
    return GpuWindowResult(window=w, healthy_slots=healthy, ecc_critical=ecc_critical)


def billable_seconds(window_length: int, results: Sequence[GpuWindowResult]) -> int:
    """Billable seconds of a window under the policy in the module docstring."""
    if not results or any(r.ecc_critical for r in results):
        return 0
    slots = set(range(window_length))
    for r in results:
        slots &= r.healthy_slots
    return len(slots)
