"""Onboarding a GPU provider (``gpum provider init``): the state of a run, the GPUs, the local
benchmark, the price, the stake and the registration to send. The machine's side (worker
configuration, service, endpoint probe) is :mod:`gpu_market.onboarding_machine`; the command
that runs the steps is :mod:`gpu_market.cli.provider_init`.

Steps, in order (:data:`STEPS`); each is idempotent, so a run that was interrupted (killed,
a failed step fixed) is simply run again and continues:

1. ``gpus``: the GPUs NVML sees (the worker's ``gpum_worker.gpu``), or ``--simulate N:MODEL``
   (the worker's simulated GPUs); one model per provider, VRAM the smallest GPU's.
2. ``benchmark``: the hardware challenge computed here (``gpum_worker.challenge_compute``:
   numpy for simulated GPUs, CuPy on GPUs) and judged exactly as a validator judges it
   (:func:`gpu_market.challenge_verdict.judge`) against the declared model's bounds; a
   machine that would fail gets a warning saying why, nothing is stopped.
3. ``price``: ``--price``, else the median price per GPU-hour of the market's offers of the
   same model (:func:`market_prices`), else the stated default; with auto-pricing clamped to
   the provider's bounds (:class:`AutoPrice`, :func:`reprice`).
4. ``worker_config``, 5. ``service``, 6. ``endpoint``: the worker's key and configuration,
   its service, and its API answering at the published address
   (:mod:`gpu_market.onboarding_machine`).
7. ``register``: the chain decides: a provider of this owner already there is updated where
   its spec, price or endpoint differ (:func:`provider_changes`), never registered again.
   The endpoint is published in the registration itself, so the validators' first challenge
   (they challenge a provider when they first see it) finds the worker answering.
8. ``stake``: ``min_stake_per_gpu x GPUs`` less what the chain shows staked
   (:func:`stake_to_add`), so a stake is never sent twice.
9. ``verified``: wait until the Provider account shows the validators' verdict attested.

The state file (:class:`InitState`, ``init-state.json`` in the provider's data folder)
records each step's outcome, inputs and times, written atomically (a temporary file renamed
over the old one); a step done with the same inputs is not redone (the benchmark, the price).
Chain steps always read the chain first: a lost or stale state file never registers or stakes
twice. One run at a time per folder (:class:`RunLock`).

Errors are :class:`OnboardingError`, one line saying what to do next.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_PRICE_PER_GPU_HOUR",
    "STEPS",
    "AutoPrice",
    "BenchmarkResult",
    "DetectedGpus",
    "InitState",
    "OnboardingError",
    "PriceChoice",
    "ProviderChanges",
    "RepriceDecision",
    "RunLock",
    "bench_challenge",
    "choose_price",
    "declared_model",
    "detect_gpus",
    "gpu_backend",
    "market_prices",
    "median_price",
    "parse_simulate",
    "provider_changes",
    "reprice",
    "run_benchmark",
    "same_model",
    "stake_to_add",
    "worker_missing",
]

STEPS = ("gpus", "benchmark", "price", "worker_config", "service", "endpoint", "register",
         "stake", "verified")
"""The steps of ``gpum provider init``, in the order they run."""

DEFAULT_PRICE_PER_GPU_HOUR = "1.8"
"""The price (payment-mint tokens per GPU-hour) suggested when the market has no offer of
the model: the stated default of ``--default-price``."""

SIMULATED_MODEL = "simulated"
"""The bounds table's model of the worker's simulated GPUs (CPU timing bounds)."""

STATE_FILE = "init-state.json"
STATE_VERSION = 1

NO_WORKER_PACKAGE = ("the gpum-worker package is not installed here (it reads the GPUs and "
                     "runs the worker): `pip install ./worker` from the gpu-market repository")


class OnboardingError(Exception):
    """A step cannot go on; the message is one line saying what to do next."""


def worker_missing(e: ImportError) -> OnboardingError:
    """``e`` as the one-line error naming the package to install when the worker package is
    what is missing; any other missing module (a dependency) is re-raised as it is."""
    if (e.name or "").split(".")[0] != "gpum_worker":
        raise e
    return OnboardingError(NO_WORKER_PACKAGE)


# ----------------------------------------------------------------------------- state


class InitState:
    """The state file of one provider's onboarding: per step its ``status`` (``done``,
    ``failed``, ``skipped``), ``inputs`` (what it depended on), ``outcome``, ``message``,
    ``started_at`` (Unix seconds) and ``seconds``. Every write replaces the file atomically
    (written to a temporary file, flushed to disk, renamed), so a kill at any moment leaves
    the previous state or the new one, never a torn file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.data: dict[str, Any] = {"version": STATE_VERSION, "steps": {}}
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text())
            except (OSError, ValueError) as e:
                raise OnboardingError(f"the state file {self.path} cannot be read ({e}): move "
                                      "it away to start over (the chain steps read the chain "
                                      "and are never repeated)") from None
            if not isinstance(data, dict) or data.get("version") != STATE_VERSION \
                    or not isinstance(data.get("steps"), dict):
                raise OnboardingError(f"{self.path} is not a gpum provider init state file: "
                                      "move it away")
            self.data = data

    def step(self, name: str) -> dict[str, Any] | None:
        return self.data["steps"].get(name)

    def done_with(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """The outcome of step ``name`` when it is done with exactly these ``inputs``."""
        rec = self.step(name)
        if rec and rec.get("status") == "done" and rec.get("inputs") == _jsonable(inputs):
            return rec.get("outcome")
        return None

    def record(self, name: str, status: str, *, inputs: Mapping[str, Any] | None = None,
               outcome: Mapping[str, Any] | None = None, message: str = "",
               started_at: float, seconds: float) -> None:
        self.data["steps"][name] = {
            "status": status, "inputs": _jsonable(inputs or {}),
            "outcome": _jsonable(outcome or {}), "message": message,
            "started_at": int(started_at), "seconds": round(seconds, 3)}
        self.set()

    def set(self, **top: Any) -> None:
        """Top-level facts (provider, market, ...) and a write."""
        self.data.update(_jsonable(top))
        atomic_write(self.path, json.dumps(self.data, indent=1, sort_keys=True) + "\n")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def atomic_write(path: Path, text: str, mode: int = 0o600) -> bool:
    """Write ``text`` to ``path`` atomically (temporary file, fsync, rename, fsync of the
    folder); False when the file already holds exactly ``text`` (nothing written)."""
    path = Path(path)
    try:
        if path.read_text() == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    except OSError as e:
        raise OnboardingError(f"cannot read {path}: {e.strerror}") from None
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OnboardingError(f"cannot write {path}: {e.strerror}") from None
    return True


class RunLock:
    """An exclusive lock on ``<folder>/init.lock`` held for a whole run: a second ``gpum
    provider init`` on the same folder stops at once instead of racing the first."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / "init.lock"
        self.fd: int | None = None

    def __enter__(self) -> RunLock:  # noqa: PYI034 - py3.10 has no typing.Self
        import fcntl

        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(self.fd, 16).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            self.fd = None
            raise OnboardingError(f"another `gpum provider init` runs on {self.path.parent} "
                                  f"(pid {pid}); wait for it or stop it") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(os.getpid()).encode(), 0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# ----------------------------------------------------------------------------- GPUs


@dataclass(frozen=True)
class DetectedGpus:
    """The GPUs of this machine as the provider declares them. ``model``: the declared model
    (the bounds table's name when the table knows the GPU); ``names``/``uuids`` per GPU as the
    backend reports them; ``vram_mib``: the smallest GPU's memory; ``known``: whether the
    validators' bounds table has ``model`` (else every challenge fails ``unknown_model``)."""

    backend: str
    model: str
    names: tuple[str, ...]
    uuids: tuple[str, ...]
    vram_mib: int
    known: bool
    driver: str | None = None
    simulate_seed: int | None = None

    @property
    def count(self) -> int:
        return len(self.uuids)

    @property
    def simulated(self) -> bool:
        return self.backend == "simulated"


def parse_simulate(text: str) -> tuple[int, str]:
    """``--simulate N[:MODEL]`` -> (N, MODEL); MODEL defaults to ``simulated`` (the bounds
    table's simulated model). ValueError saying what to write."""
    count, _, model = str(text).partition(":")
    model = " ".join(model.split()) or SIMULATED_MODEL
    if not count.strip().isdigit() or not 1 <= int(count) <= 64:
        raise ValueError(f"--simulate {text!r}: write N or N:MODEL with N simulated GPUs, "
                         "1..64 (e.g. 2:simulated)")
    return int(count), model


def declared_model(name: str, table: Any) -> tuple[str, bool]:
    """The model to declare for a GPU NVML names ``name``: the bounds table's model when a row
    matches (``NVIDIA H100 80GB HBM3`` -> ``H100 80GB HBM3``), else ``name``; and whether the
    table knows it."""
    from .challenge_verdict import UnknownGpuModel

    try:
        return table.for_model(name).model, True
    except UnknownGpuModel:
        return " ".join(name.split()), False


def gpu_backend(simulate: tuple[int, str] | None, seed: int = 0) -> Any:
    """The worker's GPU backend: its simulated GPUs, or NVML."""
    try:
        if simulate is not None:
            from gpum_worker.simulate import SimulatedBackend

            return SimulatedBackend(simulate[0], seed)
        from gpum_worker.gpu import NvmlBackend
    except ImportError as e:
        raise worker_missing(e) from None
    return NvmlBackend()


def detect_gpus(backend: Any, table: Any, *, simulated_model: str | None = None,
                model_override: str | None = None, seed: int | None = None) -> DetectedGpus:
    """The GPUs ``backend`` (a worker ``GpuBackend``) sees. OnboardingError when NVML cannot
    start (no driver, no ``nvidia-ml-py``), sees no GPU, or sees GPUs of several models."""
    try:
        from gpum_worker.errors import GpuError, NvmlUnavailable
        from gpum_worker.gpu import discover
    except ImportError as e:
        raise worker_missing(e) from None
    try:
        backend.init()
    except NvmlUnavailable as e:
        raise OnboardingError(f"no GPU can be read here: {e}. A machine without an NVIDIA "
                              "driver can try the market with --simulate N:MODEL") from None
    try:
        found = discover(backend)
        if not found:
            raise OnboardingError("NVML sees no NVIDIA GPU on this machine: check `nvidia-smi` "
                                  "(driver loaded, GPUs visible to this user), or pass "
                                  "--simulate N:MODEL to try the market without GPUs")
        names = tuple(g.name for g in found)
        if len(set(names)) > 1:
            models = ", ".join(sorted(set(names)))
            raise OnboardingError(f"this machine has GPUs of several models ({models}); a "
                                  "provider declares one model: run one provider per model")
        vram = []
        for g in found:
            try:
                vram.append(int(backend.memory(g.index)[1]) // (1024 * 1024))
            except GpuError as e:
                raise OnboardingError(f"GPU {g.index}: its memory cannot be read ({e}); check "
                                      "`nvidia-smi`") from None
        driver = backend.driver_version()
    finally:
        backend.shutdown()
    if model_override:
        model, known = declared_model(model_override, table)
    elif simulated_model is not None:
        model, known = declared_model(simulated_model, table)
    else:
        model, known = declared_model(names[0], table)
    if len(model.encode()) > 32:
        raise OnboardingError(f"the GPU model {model!r} is longer than the chain's 32 bytes: "
                              "pass --gpu-model with a shorter name")
    return DetectedGpus(backend=backend.kind, model=model, names=names,
                        uuids=tuple(g.uuid for g in found), vram_mib=min(vram), known=known,
                        driver=driver, simulate_seed=seed)


# ----------------------------------------------------------------------------- benchmark

SIMULATED_BENCH = {"n": 512, "rounds": 2, "rows_to_open": 4, "memory_mib": 4,
                   "chunks_to_open": 4}
"""The local benchmark on simulated GPUs: a challenge a CPU answers in a second (a validator
must send a small one too: a worker refuses more than ``MAX_SIMULATED_FLOP``)."""
GPU_BENCH_MEMORY_MIB = 1024
"""The memory part of the local benchmark on a GPU (validators fill most of the VRAM; the
fill rate, which the bounds check, shows on 1 GiB)."""


@dataclass(frozen=True)
class BenchmarkResult:
    """The local benchmark: ``passed`` iff every GPU's answer would pass a validator's
    judgement; ``warning``: why this machine would fail one ("" when it passes); ``gpus``:
    per GPU its index, matmul and answer seconds, the bound and the failures."""

    backend: str
    model: str
    passed: bool
    warning: str
    challenge: dict[str, int]
    gpus: tuple[dict[str, Any], ...] = ()
    seconds: float = 0.0


def bench_challenge(simulated: bool, vram_mib: int, seed: bytes | None = None) -> Any:
    """The challenge of the local benchmark: small for simulated GPUs, the standard one (with
    a 1 GiB memory part) on GPUs."""
    from .challenge import Challenge

    seed = seed or os.urandom(32)
    now = int(time.time())
    if simulated:
        return Challenge(seed=seed, issued_at=now, **SIMULATED_BENCH)
    memory = min(GPU_BENCH_MEMORY_MIB, int(vram_mib * 0.9))
    return Challenge.standard(seed, issued_at=now, memory_mib=memory,
                              chunks_to_open=min(16, memory) if memory else 0)


def run_benchmark(gpus: DetectedGpus, table: Any, *,
                  backend_factory: Callable[[], Any] | None = None,
                  clock: Callable[[], float] = time.perf_counter) -> BenchmarkResult:
    """Compute the benchmark challenge on every GPU (one after the other) and judge each
    answer as a validator would, timed by this process's clock. Never raises for the
    machine: what would fail is the result's ``warning``."""
    from .challenge_messages import gpu_challenge
    from .challenge_verdict import UnknownGpuModel, judge

    start = clock()
    ch = bench_challenge(gpus.simulated, gpus.vram_mib)
    params = {"n": ch.n, "rounds": ch.rounds, "memory_mib": ch.memory_mib}
    try:
        bounds = table.for_model(gpus.model)
    except UnknownGpuModel:
        known = ", ".join(m.model for m in table.models)
        return BenchmarkResult("none", gpus.model, False,
                               f"the validators have no timing bounds for {gpus.model!r}: every "
                               f"challenge fails (unknown_model); declare a model they know with "
                               f"--gpu-model ({known})", params, (), clock() - start)
    try:
        from gpum_worker.challenge_api import device_index
        from gpum_worker.challenge_compute import (
            ChallengeComputeError,
            CupyBackend,
            NumpyBackend,
            run_challenge,
        )
        from gpum_worker.gpu import GpuInfo
    except ImportError as e:
        raise worker_missing(e) from None
    try:
        if backend_factory is not None:
            backend = backend_factory()
        else:
            backend = NumpyBackend() if gpus.simulated else CupyBackend()
    except ChallengeComputeError as e:
        return BenchmarkResult("none", gpus.model, False,
                               f"{e}: the worker would answer the validators' challenges on the "
                               "CPU, and fail them", params, (), clock() - start)
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    for i, (uuid, name) in enumerate(zip(gpus.uuids, gpus.names)):
        gch = gpu_challenge(ch, i)
        try:
            t0 = clock()
            run = run_challenge(gch, backend, device_index(backend, GpuInfo(i, uuid, name)))
            answer_s = clock() - t0
            nonce = os.urandom(32)
            t1 = clock()
            openings = run.open(nonce)
            open_s = clock() - t1
        except ChallengeComputeError as e:
            failures.append(f"GPU {i}: {e}")
            rows.append({"gpu_index": i, "error": str(e)})
            continue
        v = judge(gch, run.answer, openings, nonce=nonce, table=table, gpu=bounds,
                  answer_elapsed_s=answer_s, open_elapsed_s=open_s)
        rows.append({"gpu_index": i, "matmul_s": round(run.answer.timings.matmul_s, 6),
                     "answer_s": round(answer_s, 6), "max_matmul_s": round(
                         table.max_matmul_s(gch, bounds), 6),
                     "passed": v.ok, "failures": [f"{f.code}: {f.message}" for f in v.failures]})
        failures += [f"GPU {i}: {f.code}: {f.message}" for f in v.failures]
    warning = ""
    if failures:
        warning = (f"this machine would fail a validator's challenge as a {gpus.model}: "
                   + "; ".join(failures[:3]))
    return BenchmarkResult(getattr(backend, "kind", "?"), gpus.model, not failures, warning,
                           params, tuple(rows), clock() - start)


# ----------------------------------------------------------------------------- price


def same_model(a: str, b: str, table: Any = None) -> bool:
    """Whether two declared models are the same GPU: the same row of the bounds table, else
    the same text (case and spacing ignored)."""
    if table is not None:
        from .challenge_verdict import UnknownGpuModel

        try:
            return table.for_model(a).model == table.for_model(b).model
        except UnknownGpuModel:
            pass
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def market_prices(offers: Iterable[Any], model: str, *, exclude: Any = None,
                  table: Any = None) -> list[int]:
    """Prices (base units per GPU-second) of the offers of ``model``, leaving out the provider
    ``exclude`` (your own) and offers whose worker did not answer its probe (``online`` False);
    rented-out offers count: their price is the market's too."""
    return sorted(o.price_per_gpu_second for o in offers
                  if o.online is not False and (exclude is None or o.provider != exclude)
                  and same_model(o.gpu_model, model, table))


def median_price(prices: Sequence[int]) -> int | None:
    """The median of ``prices`` (base units per GPU-second), rounded down to a whole base unit
    per second (a price the chain holds exactly); None for no price."""
    if not prices:
        return None
    ordered = sorted(int(p) for p in prices)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) // 2


@dataclass(frozen=True)
class AutoPrice:
    """Auto-pricing: follow the market's median within ``[min, max]`` (base units per
    GPU-second, both included), changing the price on chain only when it moves by more than
    ``threshold_bps`` of the current price (or when the current price is outside the
    bounds)."""

    min_per_second: int
    max_per_second: int
    threshold_bps: int = 500

    def __post_init__(self) -> None:
        if not 0 < self.min_per_second <= self.max_per_second:
            raise ValueError("--min-price must be positive and at most --max-price")
        if not 0 <= self.threshold_bps <= 10_000:
            raise ValueError("--reprice-threshold is 0..100 %")

    def clamp(self, per_second: int) -> int:
        return min(self.max_per_second, max(self.min_per_second, per_second))

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AutoPrice:
        try:
            return cls(int(d["min_per_second"]), int(d["max_per_second"]),
                       int(d["threshold_bps"]))
        except (KeyError, TypeError, ValueError) as e:
            raise OnboardingError(f"the auto-pricing file is not valid ({e}): run `gpum "
                                  "provider init --auto-price ...` again") from None


@dataclass(frozen=True)
class PriceChoice:
    """The price ``init`` registers: ``source`` ``flag`` (``--price``), ``median`` (of
    ``offers`` offers of the model) or ``default``; ``clamped``: auto-pricing moved it into
    the bounds."""

    per_second: int
    source: str
    offers: int = 0
    median: int | None = None
    clamped: bool = False


def choose_price(*, flag: int | None, market: Sequence[int], default: int,
                 auto: AutoPrice | None = None) -> PriceChoice:
    """The price to register (base units per GPU-second): ``flag`` when given (refused
    outside the auto-pricing bounds), else the median of ``market``, else ``default``; with
    ``auto`` clamped to its bounds."""
    if flag is not None:
        if auto is not None and auto.clamp(flag) != flag:
            raise OnboardingError("--price is outside --min-price..--max-price")
        return PriceChoice(flag, "flag", len(market), median_price(market))
    median = median_price(market)
    chosen, source = (median, "median") if median is not None else (default, "default")
    if auto is not None and auto.clamp(chosen) != chosen:
        return PriceChoice(auto.clamp(chosen), source, len(market), median, True)
    return PriceChoice(chosen, source, len(market), median)


@dataclass(frozen=True)
class RepriceDecision:
    """What ``gpum provider reprice`` does: set ``target`` when ``update``; ``why`` in words."""

    current: int
    target: int
    update: bool
    why: str
    median: int | None
    offers: int


def reprice(current: int, market: Sequence[int], auto: AutoPrice) -> RepriceDecision:
    """Follow the median of ``market`` (other providers' prices of the model) within the
    bounds: the target is the median clamped to ``[min, max]`` (the current price clamped when
    the market has no offer of the model); the chain is updated when the current price is
    outside the bounds, or when the target differs from it by more than the threshold."""
    median = median_price(market)
    target = auto.clamp(median if median is not None else current)
    n = len(market)
    if auto.clamp(current) != current:
        return RepriceDecision(current, target, True, "the current price is outside your "
                               "bounds", median, n)
    if target == current:
        return RepriceDecision(current, target, False, "the price already follows the market"
                               if median is not None else "no other offer of the model: the "
                               "price stays", median, n)
    if abs(target - current) * 10_000 > auto.threshold_bps * current:
        return RepriceDecision(current, target, True, f"the market moved by more than "
                               f"{auto.threshold_bps / 100:g} %", median, n)
    return RepriceDecision(current, target, False, f"the change is within the "
                           f"{auto.threshold_bps / 100:g} % threshold", median, n)


# ----------------------------------------------------------------------------- chain


def stake_to_add(min_stake_per_gpu: int, gpu_count: int, staked: int) -> int:
    """What to stake so that the stake backs every GPU: ``min_stake_per_gpu x gpu_count`` less
    what is staked already (0 when enough is)."""
    return max(0, min_stake_per_gpu * gpu_count - staked)


@dataclass(frozen=True)
class ProviderChanges:
    """What ``update_provider`` must change on an existing provider (None / {}: nothing)."""

    spec: dict[str, Any] = field(default_factory=dict)
    price: int | None = None
    endpoint: str | None = None

    @property
    def empty(self) -> bool:
        return not self.spec and self.price is None and self.endpoint is None


def provider_changes(view: Any, *, spec: Mapping[str, Any], price: int,
                     endpoint: str) -> ProviderChanges:
    """The fields of the Provider account ``view`` that differ from what this run declares.
    A spec change clears the hardware verdict on chain (validators challenge again)."""
    current = {"gpu_model": view.spec.gpu_model, "gpu_count": view.spec.gpu_count,
               "vram_mib": view.spec.vram_mib, "region": view.spec.region}
    diff = {k: v for k, v in spec.items() if current.get(k) != v}
    return ProviderChanges(diff, None if view.price_per_gpu_second == price else price,
                           None if view.endpoint == endpoint else endpoint)
