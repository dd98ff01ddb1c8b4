"""The steps of ``gpum provider init`` (``gpu_market.onboarding``): GPU detection over the
worker's backends (simulated, and stand-ins for NVML without a driver, without GPUs, with two
models), the local benchmark judged as a validator judges it, the price suggestion, the
auto-pricing bounds and threshold, the stake to add, the registration's changes, and the
state file's atomic writes, idempotence and lock."""

from __future__ import annotations

import json
import os
import random
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from gpu_market.challenge_verdict import load_bounds
from gpu_market.onboarding import (
    AutoPrice,
    DetectedGpus,
    InitState,
    OnboardingError,
    RunLock,
    atomic_write,
    choose_price,
    declared_model,
    detect_gpus,
    market_prices,
    median_price,
    parse_simulate,
    provider_changes,
    reprice,
    run_benchmark,
    same_model,
    stake_to_add,
)
from gpum_worker.errors import NvmlCallFailed, NvmlUnavailable
from gpum_worker.simulate import SimulatedBackend
from solders.pubkey import Pubkey

TABLE = load_bounds()


# ----------------------------------------------------------------------------- GPUs


class StandInNvml:
    """A ``GpuBackend`` standing in for NVML: ``names`` the GPUs' names (``init_error``: the
    driver's absence)."""

    kind = "nvml"

    def __init__(self, names: list[str], init_error: str | None = None,
                 memory_error: bool = False) -> None:
        self.names, self.init_error, self.memory_error = names, init_error, memory_error
        self.shut = False

    def init(self) -> None:
        if self.init_error:
            raise NvmlUnavailable(self.init_error)

    def shutdown(self) -> None:
        self.shut = True

    def driver_version(self) -> str:
        return "580.1"

    def device_count(self) -> int:
        return len(self.names)

    def uuid(self, i: int) -> str:
        return f"GPU-{i:08d}"

    def name(self, i: int) -> str:
        return self.names[i]

    def memory(self, i: int) -> tuple[int, int]:
        if self.memory_error:
            raise NvmlCallFailed("GPU 0: memory: Unknown Error")
        return 0, (81_559 - i) * 2**20


def test_simulate_takes_a_count_and_a_model():
    assert parse_simulate("2") == (2, "simulated")
    assert parse_simulate("1:RTX  4090") == (1, "RTX 4090")
    for bad in ("0", "65", "x", ":H100", "-1:simulated"):
        with pytest.raises(ValueError, match="write N or N:MODEL"):
            parse_simulate(bad)


def test_the_declared_model_is_the_bounds_tables_name_when_it_knows_the_gpu():
    assert declared_model("NVIDIA H100 80GB HBM3", TABLE) == ("H100 80GB HBM3", True)
    assert declared_model("simulated", TABLE) == ("simulated", True)
    assert declared_model("NVIDIA  Tesla T4", TABLE) == ("NVIDIA Tesla T4", False)
    assert same_model("Simulated H100", "simulated", TABLE)
    assert same_model("NVIDIA GeForce RTX 4090", "rtx 4090", TABLE)
    assert not same_model("H200", "H100 80GB HBM3", TABLE)
    assert same_model("Tesla  T4", "tesla t4", TABLE)


def test_simulated_gpus_are_detected_through_the_workers_backend():
    g = detect_gpus(SimulatedBackend(2, 7), TABLE, simulated_model="simulated", seed=7)
    assert (g.backend, g.model, g.count, g.vram_mib, g.known) == ("simulated", "simulated", 2,
                                                                  81_559, True)
    assert len(set(g.uuids)) == 2 and g.simulate_seed == 7
    other = detect_gpus(SimulatedBackend(2, 8), TABLE, simulated_model="simulated")
    assert set(other.uuids).isdisjoint(g.uuids)


def test_nvml_gpus_declare_the_smallest_memory_and_the_tables_model():
    nv = StandInNvml(["NVIDIA H100 80GB HBM3"] * 2)
    g = detect_gpus(nv, TABLE)
    assert (g.model, g.count, g.vram_mib, g.driver, g.known) == ("H100 80GB HBM3", 2, 81_558,
                                                                 "580.1", True)
    assert nv.shut
    assert detect_gpus(StandInNvml(["NVIDIA H100 80GB HBM3"]), TABLE,
                       model_override="H200").model == "H200"


@pytest.mark.parametrize("backend,needles", [
    (StandInNvml([], init_error="no usable NVIDIA driver: NVML Shared Library Not Found"),
     ("no GPU can be read here", "NVIDIA driver", "--simulate N:MODEL")),
    (StandInNvml([]), ("NVML sees no NVIDIA GPU", "nvidia-smi", "--simulate")),
    (StandInNvml(["NVIDIA H100 80GB HBM3", "NVIDIA H200"]), ("several models", "one model")),
    (StandInNvml(["NVIDIA H200"], memory_error=True), ("memory cannot be read",)),
    (StandInNvml(["NVIDIA " + "X" * 40]), ("longer than the chain's 32 bytes", "--gpu-model")),
])
def test_a_machine_without_usable_gpus_is_told_what_to_do(backend, needles):
    with pytest.raises(OnboardingError) as e:
        detect_gpus(backend, TABLE)
    for n in needles:
        assert n in str(e.value), str(e.value)


# ----------------------------------------------------------------------------- benchmark


def sim_gpus(model: str = "simulated", count: int = 1) -> DetectedGpus:
    return detect_gpus(SimulatedBackend(count, 3), TABLE, simulated_model=model)


def test_the_benchmark_passes_simulated_gpus_declared_as_simulated():
    r = run_benchmark(sim_gpus(count=2), TABLE)
    assert (r.backend, r.passed, r.warning) == ("numpy", True, "")
    assert [g["gpu_index"] for g in r.gpus] == [0, 1]
    assert all(g["passed"] and g["matmul_s"] <= g["max_matmul_s"] for g in r.gpus)
    assert r.challenge == {"n": 512, "rounds": 2, "memory_mib": 4}


def test_the_benchmark_warns_when_this_machine_would_fail_a_validators_challenge():
    r = run_benchmark(sim_gpus("H100 80GB HBM3"), TABLE)  # a CPU declared as an H100
    assert not r.passed
    assert "would fail a validator's challenge as a H100 80GB HBM3" in r.warning
    assert "too_slow" in r.warning and r.gpus[0]["failures"]


def test_the_benchmark_names_an_unknown_model_and_a_missing_cupy():
    r = run_benchmark(replace(sim_gpus(), model="Tesla T4", known=False), TABLE)
    assert not r.passed and "no timing bounds for 'Tesla T4'" in r.warning
    assert "unknown_model" in r.warning and "--gpu-model" in r.warning
    from gpum_worker.challenge_compute import ChallengeComputeError

    def no_cupy():
        raise ChallengeComputeError("CuPy is not importable (No module named 'cupy')")

    gpu = replace(sim_gpus(), backend="nvml")
    r = run_benchmark(gpu, TABLE, backend_factory=no_cupy)
    assert not r.passed and "CuPy is not importable" in r.warning
    assert "answer the validators' challenges on the CPU, and fail them" in r.warning


# ----------------------------------------------------------------------------- price


def offer(price: int, model: str = "simulated", online: bool | None = True,
          provider: Pubkey | None = None) -> SimpleNamespace:
    return SimpleNamespace(price_per_gpu_second=price, gpu_model=model, online=online,
                           provider=provider or Pubkey.new_unique())


def test_the_median_is_exact_in_base_units_per_second():
    assert median_price([]) is None
    assert median_price([7]) == 7
    assert median_price([3, 1, 2]) == 2
    assert median_price([1, 3]) == 2
    assert median_price([1, 2]) == 1  # rounded down to a whole base unit per second
    assert median_price([2**63, 2**63 + 2]) == 2**63 + 1  # no float on the way


def test_market_prices_are_the_models_offers_except_your_own_and_offline_ones():
    me = Pubkey.new_unique()
    offers = [offer(100), offer(200, "Simulated H100"), offer(300, online=None),
              offer(900, online=False), offer(50, provider=me), offer(400, "H200")]
    assert market_prices(offers, "simulated", exclude=me, table=TABLE) == [100, 200, 300]
    assert market_prices(offers, "h200", table=TABLE) == [400]


def test_the_price_is_the_flag_else_the_median_else_the_default():
    c = choose_price(flag=42, market=[10, 20], default=500)
    assert (c.per_second, c.source, c.offers, c.median) == (42, "flag", 2, 15)
    c = choose_price(flag=None, market=[10, 20, 90], default=500)
    assert (c.per_second, c.source, c.clamped) == (20, "median", False)
    c = choose_price(flag=None, market=[], default=500)
    assert (c.per_second, c.source, c.median) == (500, "default", None)
    auto = AutoPrice(100, 300)
    assert choose_price(flag=None, market=[10, 20], default=500, auto=auto).per_second == 100
    c = choose_price(flag=None, market=[], default=500, auto=auto)
    assert (c.per_second, c.clamped) == (300, True)
    with pytest.raises(OnboardingError, match="outside --min-price..--max-price"):
        choose_price(flag=301, market=[], default=500, auto=auto)


def test_auto_pricing_bounds_must_make_sense():
    for lo, hi, thr in ((0, 10, 500), (11, 10, 500), (1, 10, -1), (1, 10, 10_001)):
        with pytest.raises(ValueError):
            AutoPrice(lo, hi, thr)
    assert AutoPrice.from_json(AutoPrice(1, 2, 3).to_json()) == AutoPrice(1, 2, 3)
    with pytest.raises(OnboardingError, match="auto-pricing file is not valid"):
        AutoPrice.from_json({"min_per_second": 1})


def test_reprice_never_leaves_the_bounds_and_moves_only_past_the_threshold():
    auto = AutoPrice(200, 750, 500)
    rng = random.Random(5)
    for _ in range(2000):
        current = rng.randint(1, 2000)
        market = [rng.randint(1, 3000) for _ in range(rng.randint(0, 6))]
        d = reprice(current, market, auto)
        assert 200 <= d.target <= 750
        after = d.target if d.update else current
        if 200 <= current <= 750:
            assert 200 <= after <= 750
            moved = abs(d.target - current) * 10_000 > 500 * current
            assert d.update == moved, (current, market, d)
        else:
            assert d.update and "outside your bounds" in d.why
    d = reprice(560, [500, 580, 600], auto)  # 3.6 % away: within 5 %
    assert (d.target, d.update, d.median) == (580, False, 580)
    assert "within the 5 % threshold" in d.why
    d = reprice(560, [], auto)
    assert (d.target, d.update) == (560, False) and "the price stays" in d.why
    assert reprice(900, [], auto).target == 750
    assert reprice(560, [560], auto).why == "the price already follows the market"


# ----------------------------------------------------------------------------- chain


def test_stake_to_add_is_the_minimum_less_what_is_staked():
    assert stake_to_add(50, 2, 0) == 100
    assert stake_to_add(50, 2, 30) == 70
    assert stake_to_add(50, 2, 100) == 0
    assert stake_to_add(50, 2, 500) == 0
    assert stake_to_add(0, 8, 0) == 0


def test_provider_changes_name_only_what_differs():
    view = SimpleNamespace(spec=SimpleNamespace(gpu_model="simulated", gpu_count=2,
                                                vram_mib=81_559, region=""),
                           price_per_gpu_second=500, endpoint="http://a:1")
    spec = {"gpu_model": "simulated", "gpu_count": 2, "vram_mib": 81_559, "region": ""}
    assert provider_changes(view, spec=spec, price=500, endpoint="http://a:1").empty
    ch = provider_changes(view, spec={**spec, "gpu_count": 4}, price=600, endpoint="http://b:2")
    assert (ch.spec, ch.price, ch.endpoint) == ({"gpu_count": 4}, 600, "http://b:2")


# ----------------------------------------------------------------------------- state


def test_the_state_file_records_steps_and_reuses_a_step_done_with_the_same_inputs(tmp_path):
    path = tmp_path / "init-state.json"
    s = InitState(path)
    s.set(provider="P")
    s.record("price", "done", inputs={"price": None, "auto": {"min": 1}},
             outcome={"per_second": 500}, message="1.8", started_at=100.7, seconds=0.0123)
    assert (path.stat().st_mode & 0o777) == 0o600
    again = InitState(path)
    assert again.data["provider"] == "P"
    assert again.done_with("price", {"price": None, "auto": {"min": 1}}) == {"per_second": 500}
    assert again.done_with("price", {"price": 42, "auto": {"min": 1}}) is None
    assert again.done_with("stake", {}) is None
    assert again.step("price")["started_at"] == 100 and again.step("price")["seconds"] == 0.012
    again.record("price", "failed", message="no", started_at=1, seconds=1)
    assert InitState(path).done_with("price", {"price": None, "auto": {"min": 1}}) is None
    assert sorted(os.listdir(tmp_path)) == ["init-state.json"]  # no temporary file left


def test_a_torn_or_foreign_state_file_is_refused_with_what_to_do(tmp_path):
    path = tmp_path / "init-state.json"
    path.write_text('{"version": 1, "steps": {')
    with pytest.raises(OnboardingError, match="cannot be read .* move it away"):
        InitState(path)
    path.write_text(json.dumps({"jobs": {}}))
    with pytest.raises(OnboardingError, match="not a gpum provider init state file"):
        InitState(path)


def test_atomic_write_replaces_whole_files_and_skips_unchanged_ones(tmp_path):
    f = tmp_path / "a.toml"
    assert atomic_write(f, "x = 1\n") is True
    assert atomic_write(f, "x = 1\n") is False
    assert atomic_write(f, "x = 2\n", 0o644) is True
    assert f.read_text() == "x = 2\n" and (f.stat().st_mode & 0o777) == 0o644
    with pytest.raises(OnboardingError, match="cannot write"):
        atomic_write(tmp_path / "missing" / "b", "y")


def test_one_init_at_a_time_per_folder(tmp_path: Path):
    busy = f"another `gpum provider init` runs on {tmp_path} \\(pid {os.getpid()}\\)"
    with RunLock(tmp_path), pytest.raises(OnboardingError, match=busy), RunLock(tmp_path):
        pass
    with RunLock(tmp_path):
        pass
