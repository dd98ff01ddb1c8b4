"""Aggregation, health flags and the billable policy (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from gpu_market.proof import (
    HEALTH_ECC_UNCORRECTED,
    HEALTH_FAN_HIGH,
    HEALTH_GPU_LOST,
    HEALTH_NVML_ERROR,
    HEALTH_POWER_OVER_LIMIT,
    HEALTH_SAMPLES_MISSING,
    HEALTH_TEMP_CRITICAL,
    HEALTH_TEMP_WARN,
)
from gpum_worker.gpu import GpuSample
from gpum_worker.health import Thresholds, describe, sample_flags
from gpum_worker.window import aggregate_gpu, billable_seconds

TH = Thresholds()
START = 1_000


def s(t: float, uuid: str = "GPU-a", **kw) -> GpuSample:
    base = {"index": 0, "uuid": uuid, "t": t, "ok": True, "util_gpu_pct": 50, "util_mem_pct": 20,
                "mem_used_mib": 100, "mem_total_mib": 1000, "temp_c": 60, "power_mw": 100_000,
                "power_limit_mw": 700_000, "fan_pct": 30, "ecc_uncorrected_total": 0, "processes": ()}
    base.update(kw)
    return GpuSample(**base)


def full(n: int = 10, uuid: str = "GPU-a", **kw) -> list[GpuSample]:
    return [s(START + i + 0.5, uuid, **kw) for i in range(n)]


def test_full_healthy_window_bills_its_length() -> None:
    r = aggregate_gpu("GPU-a", full(10), START, START + 10, TH)
    w = r.window
    assert (w.samples, w.covered_seconds, w.health_flags) == (10, 10, 0)
    assert w.util_gpu_avg_bp == 5000 and w.util_gpu_max_bp == 5000 and w.util_mem_avg_bp == 2000
    assert w.temp_max_c == 60 and w.power_avg_mw == 100_000 and w.fan_max_pct == 30
    assert w.mem_used_max_mib == 100 and w.mem_total_mib == 1000
    assert w.ecc_uncorrected_delta == 0
    assert billable_seconds(10, [r]) == 10


def test_averages_max_and_rounding() -> None:
    samples = [s(START + 0.5, util_gpu_pct=10, power_mw=1), s(START + 1.5, util_gpu_pct=15,
                                                                power_mw=2)]
    w = aggregate_gpu("GPU-a", samples, START, START + 2, TH).window
    assert w.util_gpu_avg_bp == 1250 and w.util_gpu_max_bp == 1500
    assert w.power_avg_mw == 1  # floor


def test_samples_outside_window_ignored() -> None:
    samples = [s(START - 0.5), *full(3), s(START + 3.0)]
    w = aggregate_gpu("GPU-a", samples, START, START + 3, TH).window
    assert w.samples == 3


def test_absent_metric_stays_none() -> None:
    w = aggregate_gpu("GPU-a", full(3, fan_pct=None, ecc_uncorrected_total=None), START,
                      START + 3, TH).window
    assert w.fan_max_pct is None and w.ecc_uncorrected_delta is None
    assert w.health_flags == 0


def test_missing_samples_reduce_billable_and_flag() -> None:
    samples = [x for i, x in enumerate(full(10)) if i not in (3, 7)]
    r = aggregate_gpu("GPU-a", samples, START, START + 10, TH)
    assert r.window.covered_seconds == 8
    assert r.window.health_flags & HEALTH_SAMPLES_MISSING
    assert billable_seconds(10, [r]) == 8


def test_no_samples_bills_zero() -> None:
    r = aggregate_gpu("GPU-a", [], START, START + 10, TH)
    assert r.window.samples == 0 and r.window.util_gpu_avg_bp is None
    assert billable_seconds(10, [r]) == 0


def test_gpu_lost_mid_window_bills_only_seconds_before() -> None:
    a = full(10, "GPU-a")
    b = full(6, "GPU-b") + [GpuSample(index=1, uuid="GPU-b", t=START + i + 0.5, ok=False,
                                      lost_reason="lost") for i in range(6, 10)]
    ra = aggregate_gpu("GPU-a", a, START, START + 10, TH)
    rb = aggregate_gpu("GPU-b", b, START, START + 10, TH)
    assert ra.window.health_flags == 0
    assert rb.window.health_flags & HEALTH_GPU_LOST
    assert rb.window.samples == 6 and rb.window.covered_seconds == 6
    assert billable_seconds(10, [ra, rb]) == 6


def test_billable_is_intersection_of_slots() -> None:
    a = [x for i, x in enumerate(full(10, "GPU-a")) if i != 2]
    b = [x for i, x in enumerate(full(10, "GPU-b")) if i != 5]
    ra = aggregate_gpu("GPU-a", a, START, START + 10, TH)
    rb = aggregate_gpu("GPU-b", b, START, START + 10, TH)
    assert billable_seconds(10, [ra, rb]) == 8


def test_critical_temperature_slot_not_billable() -> None:
    samples = full(10)
    samples[4] = replace(samples[4], temp_c=TH.temp_critical_c)
    r = aggregate_gpu("GPU-a", samples, START, START + 10, TH)
    assert r.window.health_flags & HEALTH_TEMP_CRITICAL
    assert r.window.covered_seconds == 9
    assert billable_seconds(10, [r]) == 9


def test_warning_temperature_still_billable() -> None:
    samples = full(10)
    samples[4] = replace(samples[4], temp_c=TH.temp_warn_c)
    r = aggregate_gpu("GPU-a", samples, START, START + 10, TH)
    assert r.window.health_flags == HEALTH_TEMP_WARN
    assert billable_seconds(10, [r]) == 10


def test_ecc_delta_makes_whole_window_non_billable() -> None:
    samples = full(10, ecc_uncorrected_total=5)
    samples[7] = replace(samples[7], ecc_uncorrected_total=6)
    r = aggregate_gpu("GPU-a", samples, START, START + 10, TH, ecc_baseline=5)
    other = aggregate_gpu("GPU-b", full(10, "GPU-b"), START, START + 10, TH)
    assert r.window.ecc_uncorrected_delta == 1
    assert r.window.health_flags & HEALTH_ECC_UNCORRECTED
    assert billable_seconds(10, [r, other]) == 0


def test_ecc_baseline_from_before_window() -> None:
    r = aggregate_gpu("GPU-a", full(3, ecc_uncorrected_total=4), START, START + 3, TH,
                      ecc_baseline=2)
    assert r.window.ecc_uncorrected_delta == 2 and r.ecc_critical
    r = aggregate_gpu("GPU-a", full(3, ecc_uncorrected_total=4), START, START + 3, TH)
    assert r.window.ecc_uncorrected_delta == 0 and not r.ecc_critical
    lenient = Thresholds(ecc_uncorrected_max=2)
    r = aggregate_gpu("GPU-a", full(3, ecc_uncorrected_total=4), START, START + 3, lenient,
                      ecc_baseline=2)
    assert not r.ecc_critical


def test_sub_second_sampling_slots() -> None:
    samples = [s(START + i * 0.5 + 0.25) for i in range(20)]
    r = aggregate_gpu("GPU-a", samples, START, START + 10, TH)
    assert r.window.samples == 20 and r.window.covered_seconds == 10


@pytest.mark.parametrize(
    ("kw", "flag"),
    [
        ({"temp_c": 85}, HEALTH_TEMP_WARN),
        ({"temp_c": 95}, HEALTH_TEMP_CRITICAL),
        ({"fan_pct": 95}, HEALTH_FAN_HIGH),
        ({"power_mw": 735_001}, HEALTH_POWER_OVER_LIMIT),
        ({"errors": (("fan", "x"),)}, HEALTH_NVML_ERROR),
        ({"ok": False}, HEALTH_GPU_LOST),
    ],
)
def test_sample_flags(kw: dict, flag: int) -> None:
    assert sample_flags(s(0, **kw), TH) == flag


def test_sample_flags_below_thresholds() -> None:
    assert sample_flags(s(0, temp_c=84, fan_pct=94, power_mw=735_000), TH) == 0
    assert sample_flags(s(0, temp_c=None, fan_pct=None, power_mw=None), TH) == 0


def test_thresholds_validate_and_describe() -> None:
    with pytest.raises(ValueError):
        Thresholds(temp_warn_c=90, temp_critical_c=80).validate()
    Thresholds().validate()
    assert describe(0) == "ok"
    assert describe(HEALTH_TEMP_WARN | HEALTH_FAN_HIGH) == "temperature-warning,fan-high"
