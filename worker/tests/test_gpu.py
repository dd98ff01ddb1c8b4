"""One-sample reads and the NVML backend's error translation (no GPU needed)."""

from __future__ import annotations

import types

import pynvml
import pytest
from fakes import MIB, FakeBackend, FakeGpu, FakeNvml
from gpum_worker.errors import GpuLost, MetricNotSupported, NvmlCallFailed, NvmlUnavailable
from gpum_worker.gpu import GpuInfo, NvmlBackend, discover, read_sample
from gpum_worker.simulate import SimulatedBackend


def _info(i: int = 0) -> GpuInfo:
    return GpuInfo(i, f"GPU-{i}", "Fake")


def test_read_sample_all_metrics() -> None:
    b = FakeBackend([FakeGpu("GPU-0")])
    s = read_sample(b, _info(), 10.5)
    assert s.ok and s.t == 10.5
    assert (s.util_gpu_pct, s.util_mem_pct) == (80, 40)
    assert (s.mem_used_mib, s.mem_total_mib) == (1000, 80_000)
    assert (s.temp_c, s.power_mw, s.power_limit_mw, s.fan_pct) == (60, 300_000, 700_000, 40)
    assert s.ecc_uncorrected_total == 0
    assert s.processes == ((4242, 900 * MIB),)
    assert not s.unsupported and not s.errors


def test_unsupported_metric_is_absent_not_zero() -> None:
    b = FakeBackend([FakeGpu("GPU-0")])
    b.unsupported |= {(0, "fan"), (0, "ecc_uncorrected"), (0, "processes")}
    s = read_sample(b, _info(), 1.0)
    assert s.ok
    assert s.fan_pct is None and s.ecc_uncorrected_total is None and s.processes is None
    assert s.unsupported == {"fan", "ecc_uncorrected", "processes"}
    assert s.temp_c == 60  # the others are still read


def test_failing_call_recorded_and_other_metrics_read() -> None:
    b = FakeBackend([FakeGpu("GPU-0")])
    b.failing[(0, "temperature")] = "NVMLError_Unknown: Unknown Error"
    s = read_sample(b, _info(), 1.0)
    assert s.ok and s.temp_c is None
    assert s.errors == (("temperature", "GPU 0: temperature: NVMLError_Unknown: Unknown Error"),)
    assert s.power_mw == 300_000


def test_lost_gpu_sample() -> None:
    b = FakeBackend([FakeGpu("GPU-0")])
    b.lost.add(0)
    s = read_sample(b, _info(), 1.0)
    assert not s.ok and "lost" in (s.lost_reason or "")
    assert s.util_gpu_pct is None and s.temp_c is None


def test_discover_skips_gpu_without_uuid() -> None:
    b = FakeBackend([FakeGpu("GPU-0"), FakeGpu("GPU-1")])
    b.lost.add(0)
    assert [g.uuid for g in discover(b)] == ["GPU-1"]


# ---------------------------------------------------------------------------- NvmlBackend


def _fake_nvml(**overrides):
    """A module-like object with pynvml's API and its real exception classes."""
    nv = types.SimpleNamespace()
    for name in dir(pynvml):
        if name.startswith(("NVMLError", "NVML_")):
            setattr(nv, name, getattr(pynvml, name))
    nv.nvmlInit = lambda: None
    nv.nvmlShutdown = lambda: None
    nv.nvmlSystemGetDriverVersion = lambda: "550.54"
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: ("h", i)
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-{h[1]}"
    nv.nvmlDeviceGetName = lambda h: b"NVIDIA H100"
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=97, memory=51)
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=2 * 1024 * MIB,
                                                                 total=80 * 1024 * MIB)
    nv.nvmlDeviceGetTemperature = lambda h, sensor: 70 + sensor
    nv.nvmlDeviceGetPowerUsage = lambda h: 650_000
    nv.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000
    nv.nvmlDeviceGetFanSpeed = lambda h: 55
    nv.nvmlDeviceGetTotalEccErrors = lambda h, et, ct: 3 if (et, ct) == (1, 0) else 99
    nv.nvmlDeviceGetComputeRunningProcesses = lambda h: [
        types.SimpleNamespace(pid=7, usedGpuMemory=MIB),
        types.SimpleNamespace(pid=8, usedGpuMemory=None)]
    for k, v in overrides.items():
        setattr(nv, k, v)
    return nv


def _raiser(code: int):
    def f(*args):
        raise pynvml.NVMLError(code)
    return f


def test_nvml_backend_reads_everything() -> None:
    b = NvmlBackend(_fake_nvml())
    b.init()
    assert b.driver_version() == "550.54"
    gpus = discover(b)
    assert [(g.index, g.uuid, g.name) for g in gpus] == [(0, "GPU-0", "NVIDIA H100"),
                                                          (1, "GPU-1", "NVIDIA H100")]
    s = read_sample(b, gpus[1], 5.5)
    assert s.ok and s.util_gpu_pct == 97 and s.util_mem_pct == 51
    assert (s.mem_used_mib, s.mem_total_mib) == (2048, 81920)
    assert s.temp_c == 70  # NVML_TEMPERATURE_GPU == 0
    assert s.ecc_uncorrected_total == 3  # uncorrected (1), volatile (0)
    assert s.processes == ((7, MIB), (8, None))
    b.shutdown()


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
                                  pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
                                  pynvml.NVML_ERROR_NO_PERMISSION])
def test_nvml_init_failure_is_clear_error(code: int) -> None:
    b = NvmlBackend(_fake_nvml(nvmlInit=_raiser(code)))
    with pytest.raises(NvmlUnavailable, match="no usable NVIDIA driver.*--simulate"):
        b.init()


def test_nvml_not_supported_translates_to_absent() -> None:
    b = NvmlBackend(_fake_nvml(nvmlDeviceGetFanSpeed=_raiser(pynvml.NVML_ERROR_NOT_SUPPORTED)))
    b.init()
    with pytest.raises(MetricNotSupported):
        b.fan_pct(0)
    s = read_sample(b, GpuInfo(0, "GPU-0", "x"), 1.0)
    assert s.ok and s.fan_pct is None and "fan" in s.unsupported


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_GPU_NOT_FOUND,
                                  pynvml.NVML_ERROR_DRIVER_NOT_LOADED])
def test_nvml_gpu_lost_translation(code: int) -> None:
    b = NvmlBackend(_fake_nvml(nvmlDeviceGetUtilizationRates=_raiser(code)))
    b.init()
    with pytest.raises(GpuLost):
        b.utilization(0)
    s = read_sample(b, GpuInfo(0, "GPU-0", "x"), 1.0)
    assert not s.ok


def test_nvml_other_error_is_failed_call() -> None:
    b = NvmlBackend(_fake_nvml(nvmlDeviceGetPowerUsage=_raiser(pynvml.NVML_ERROR_TIMEOUT)))
    b.init()
    with pytest.raises(NvmlCallFailed, match="Timeout"):
        b.power_mw(0)
    s = read_sample(b, GpuInfo(0, "GPU-0", "x"), 1.0)
    assert s.ok and s.power_mw is None and s.errors[0][0] == "power"


def test_nvml_device_count_failure_is_unavailable() -> None:
    b = NvmlBackend(_fake_nvml(nvmlDeviceGetCount=_raiser(pynvml.NVML_ERROR_UNKNOWN)))
    b.init()
    with pytest.raises(NvmlUnavailable):
        b.device_count()


def test_real_pynvml_without_driver_raises_unavailable_or_works() -> None:
    """On this CI machine there is no driver: the real backend must say so plainly."""
    b = NvmlBackend()
    try:
        b.init()
    except NvmlUnavailable as e:
        assert "NVIDIA driver" in str(e)
    else:  # a machine with a GPU: the backend must list it
        try:
            assert b.device_count() >= 0
        finally:
            b.shutdown()


# ---------------------------------------------------------------------------- simulation


def test_simulated_backend_deterministic_and_drifting() -> None:
    def run(seed: int) -> list[tuple]:
        b = SimulatedBackend(3, seed)
        b.init()
        gpus = discover(b)
        out = []
        for t in range(30):
            for g in gpus:
                s = read_sample(b, g, float(t))
                out.append((s.uuid, s.util_gpu_pct, s.temp_c, s.power_mw, s.mem_used_mib))
        return out

    a, b2, c = run(7), run(7), run(8)
    assert a == b2
    assert a != c
    utils = {x[1] for x in a}
    assert len(utils) > 5  # values drift
    assert all(0 <= x[1] <= 100 and 20 <= x[2] <= 100 for x in a)
    assert len({x[0] for x in a}) == 3


def test_simulated_gpu_count_bounds() -> None:
    with pytest.raises(ValueError):
        SimulatedBackend(0, 1)


# ---------------------------------------------------------------------------- driver reload


def _reloading_backend() -> tuple[NvmlBackend, FakeNvml, list[float]]:
    nv = FakeNvml({"GPU-a": 50, "GPU-b": 70})
    now = [0.0]
    nv.clock = lambda: now[0]
    b = NvmlBackend(nv, clock=lambda: now[0], reinit_base_s=1.0, reinit_cap_s=8.0)
    b.init()
    return b, nv, now


def test_nvml_reinitialized_with_backoff_after_driver_reload() -> None:
    b, nv, now = _reloading_backend()
    gpus = discover(b)
    assert [read_sample(b, g, 0.0).temp_c for g in gpus] == [50, 70]
    nv.reload_driver(down_inits=3, reorder=True)  # the module needs 3 tries to come back
    ok_at: dict[float, list[int | None]] = {}
    for step in range(2, 41):  # read every 0.5 s for 20 s
        now[0] = step / 2
        samples = [read_sample(b, g, now[0]) for g in gpus]
        ok_at[now[0]] = [s.temp_c if s.ok else None for s in samples]
    # First try at once, then after 1, 2 and 4 s (backoff doubling): success at t=8.
    assert nv.init_calls == [0.0, 1.0, 2.0, 4.0, 8.0]
    assert nv.shutdown_calls >= 1  # shut down before each re-init
    assert all(v == [None, None] for t, v in ok_at.items() if t < 8)  # lost: not billable
    # Handles are re-acquired by UUID: indexes changed, the readings did not.
    assert all(v == [50, 70] for t, v in ok_at.items() if t >= 8)


def test_nvml_reinit_is_rate_limited_when_one_gpu_stays_lost() -> None:
    b, nv, now = _reloading_backend()
    gpus = discover(b)
    nv.lost.add("GPU-b")  # fell off the bus for good
    good = 0
    for t in range(1, 301):
        now[0] = float(t)
        good += read_sample(b, gpus[0], now[0]).ok
        assert not read_sample(b, gpus[1], now[0]).ok
    assert len(nv.init_calls) <= 1 + 4 + 300 // 8  # backoff capped at 8 s
    assert good >= 290  # the healthy GPU is read between re-inits
