"""Judging a hardware challenge: the timing bounds per GPU model and the ``Verdict``.

The bounds come from ``data/gpu_challenge_bounds.json`` (shipped as package data): per
model the vendor's peak dense fp16 tensor rate with fp32 accumulation and the page it is
from, memory size and bandwidth, and ``measured`` (null until the GPU path has run on that
model). With policy ``min_efficiency`` e and ``max_claimed_efficiency`` m (the file's
``policy``), a challenge of F = ``challenge.flop`` operations on a model of peak rate R:

* ``max_matmul_s = F / (e R)``: the worker's reported matmul time must not exceed it;
* ``min_matmul_s = F / (m R)``: a reported time below it claims more than the vendor peak,
  so the report is false;
* ``max_response_s = max_matmul_s + (result bytes + memory bytes) / commit_rate + overhead``:
  the validator's own clock, from sending the challenge to holding the ``Answer``, must
  not exceed it. This is the only timing a worker cannot misreport; the commit and
  overhead terms are CPU and network allowances, so it separates a GPU from a CPU and a
  fast GPU from a much slower one only when the challenge's ``rounds`` make the GPU
  part dominate.

``judge`` is pure apart from measuring its own duration; any failure is a ``Failure`` in
the verdict, never an exception (a malformed reply included).
"""

from __future__ import annotations

import hmac
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .challenge import (
    CHUNK_BYTES,
    Answer,
    Challenge,
    ChallengeError,
    Openings,
    VerificationFailed,
    chunks_to_check,
    rows_to_check,
    verify_chunks,
    verify_rows,
)

BOUNDS_FILE = "gpu_challenge_bounds.json"

FAILURE_CODES = ("no_answer", "wrong_challenge", "wrong_indices", "bad_proof", "wrong_row",
                 "wrong_chunk", "no_memory_answer", "too_slow", "implausible_timing",
                 "malformed")


class UnknownGpuModel(ChallengeError):
    """No row of the bounds table names this model; add one (with its source) to judge it."""


@dataclass(frozen=True)
class BoundsPolicy:
    min_efficiency: float
    max_claimed_efficiency: float
    commit_bytes_per_second: float
    fixed_overhead_s: float


@dataclass(frozen=True)
class GpuBounds:
    """One row of the table. ``peak_tflops`` is None for the simulated (CPU) model, whose
    floor is ``floor_tflops`` instead and which has no "faster than possible" check."""

    model: str
    names: tuple[str, ...]
    peak_tflops: float | None
    floor_tflops: float
    memory_gb: float | None
    bandwidth_gbps: float | None
    source: str | None
    max_seconds_standard: float
    measured: dict[str, Any] | None

    def matches(self, name: str) -> bool:
        want = " ".join(name.split()).casefold()
        return any(want == n.casefold() for n in (self.model, *self.names))


@dataclass(frozen=True)
class BoundsTable:
    policy: BoundsPolicy
    standard: dict[str, int]
    models: tuple[GpuBounds, ...]

    def for_model(self, name: str) -> GpuBounds:
        """The row whose model or NVML name equals ``name`` (case and spacing ignored)."""
        for m in self.models:
            if m.matches(name):
                return m
        raise UnknownGpuModel(f"no timing bounds for GPU model {name!r}; known: "
                              f"{', '.join(m.model for m in self.models)}")

    def max_matmul_s(self, challenge: Challenge, gpu: GpuBounds) -> float:
        return challenge.flop / (gpu.floor_tflops * 1e12)

    def min_matmul_s(self, challenge: Challenge, gpu: GpuBounds) -> float | None:
        if gpu.peak_tflops is None:
            return None
        return challenge.flop / (gpu.peak_tflops * 1e12 * self.policy.max_claimed_efficiency)

    def max_response_s(self, challenge: Challenge, gpu: GpuBounds) -> float:
        moved = challenge.result_bytes + challenge.memory_mib * CHUNK_BYTES
        return (self.max_matmul_s(challenge, gpu) + moved / self.policy.commit_bytes_per_second
                + self.policy.fixed_overhead_s)

    def max_open_s(self, challenge: Challenge) -> float:
        """The validator's clock from sending the nonce to holding the ``Openings``."""
        moved = challenge.chunks_to_open * CHUNK_BYTES + challenge.rows_to_open * challenge.n * 4
        return moved / self.policy.commit_bytes_per_second + self.policy.fixed_overhead_s

    def min_fill_s(self, challenge: Challenge, gpu: GpuBounds) -> float | None:
        if gpu.bandwidth_gbps is None:
            return None
        return (challenge.memory_mib * CHUNK_BYTES
                / (gpu.bandwidth_gbps * 1e9 * self.policy.max_claimed_efficiency))


def load_bounds(path: str | Path | None = None) -> BoundsTable:
    """The table shipped with the SDK, or the JSON file at ``path``."""
    if path is None:
        text = resources.files("gpu_market").joinpath("data", BOUNDS_FILE).read_text()
    else:
        text = Path(path).read_text()
    return parse_bounds(json.loads(text))


def parse_bounds(d: dict[str, Any]) -> BoundsTable:
    if d.get("schema") != 1:
        raise ChallengeError("bounds table: unknown schema (want 1)")
    p = d["policy"]
    policy = BoundsPolicy(float(p["min_efficiency"]), float(p["max_claimed_efficiency"]),
                          float(p["commit_bytes_per_second"]), float(p["fixed_overhead_s"]))
    if not 0 < policy.min_efficiency < 1 <= policy.max_claimed_efficiency:
        raise ChallengeError("bounds table: want 0 < min_efficiency < 1 <= "
                             "max_claimed_efficiency")
    models = []
    for m in d["models"]:
        peak = m.get("peak_fp16_dense_tflops")
        floor = (float(peak) * policy.min_efficiency if peak is not None
                 else float(m["floor_tflops"]))
        models.append(GpuBounds(
            model=m["model"], names=tuple(m.get("nvml_names", ())),
            peak_tflops=None if peak is None else float(peak), floor_tflops=floor,
            memory_gb=m.get("memory_gb"), bandwidth_gbps=m.get("memory_bandwidth_gbps"),
            source=m.get("source"), max_seconds_standard=float(m["max_seconds_standard"]),
            measured=m.get("measured")))
    return BoundsTable(policy, dict(d["standard_challenge"]), tuple(models))


def standard_max_seconds(table: BoundsTable, gpu: GpuBounds) -> float:
    """``max_matmul_s`` of the standard challenge, to two decimals rounded up: the value the
    file stores as ``max_seconds_standard`` (a test keeps the two equal)."""
    s = table.standard
    flop = s["rounds"] * 2 * s["n"] ** 3
    return math.ceil(flop / (gpu.floor_tflops * 1e12) * 100) / 100


# --------------------------------------------------------------------------------- verdict


@dataclass(frozen=True)
class Failure:
    code: str
    message: str


@dataclass(frozen=True)
class Verdict:
    """``ok`` iff no failure. ``answer_elapsed_s``/``open_elapsed_s`` are the validator's
    clock; ``reported`` the worker's timings (``ComputeTimings`` as a dict)."""

    challenge_id: bytes
    ok: bool
    failures: tuple[Failure, ...]
    model: str | None
    rows_checked: int = 0
    chunks_checked: int = 0
    verify_s: float = 0.0
    answer_elapsed_s: float | None = None
    open_elapsed_s: float | None = None
    max_response_s: float | None = None
    reported: dict[str, float] | None = None

    @classmethod
    def missing(cls, challenge: Challenge, reason: str, model: str | None = None) -> Verdict:
        """No answer (timeout, refused, unreachable): the challenge fails."""
        return cls(challenge.challenge_id, False, (Failure("no_answer", reason),), model)

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(f.code for f in self.failures)


def judge(challenge: Challenge, answer: Answer | None, openings: Openings | None, *,
          nonce: bytes, table: BoundsTable, gpu: GpuBounds, answer_elapsed_s: float,
          open_elapsed_s: float | None = None,
          clock: Callable[[], float] = time.perf_counter) -> Verdict:
    """The verdict on one challenge to one GPU declared as ``gpu``. ``nonce`` is the one
    the validator sent after receiving ``answer``; the elapsed times are its own clock."""
    start = clock()
    cid = challenge.challenge_id
    if answer is None or openings is None:
        return Verdict.missing(challenge, "no answer" if answer is None else "no openings",
                               gpu.model)
    fails: list[Failure] = []
    rows_checked = chunks_checked = 0
    if not hmac.compare_digest(answer.challenge_id, cid):
        fails.append(Failure("wrong_challenge", "the answer is for another challenge"))
    want_rows = rows_to_check(challenge, answer.root, nonce)
    got_rows = tuple(o.index for o in openings.rows)
    if sorted(got_rows) != sorted(want_rows):
        fails.append(Failure("wrong_indices", f"opened rows {sorted(got_rows)}, the nonce "
                                              f"names {sorted(want_rows)}"))
    else:
        try:
            verify_rows(challenge, answer.root, openings.rows)
            rows_checked = len(openings.rows)
        except VerificationFailed as e:
            fails.append(Failure(e.code, str(e)))
        except ChallengeError as e:
            fails.append(Failure("malformed", str(e)))
    if challenge.memory_mib:
        memory_fails = _judge_memory(challenge, answer, openings, nonce)
        fails += memory_fails
        chunks_checked = 0 if memory_fails else len(openings.chunks)
    fails += _judge_timing(challenge, answer, openings, table, gpu, answer_elapsed_s,
                           open_elapsed_s)
    return Verdict(cid, not fails, tuple(fails), gpu.model, rows_checked, chunks_checked,
                   clock() - start, answer_elapsed_s, open_elapsed_s,
                   table.max_response_s(challenge, gpu), dict(vars(answer.timings)))


def _judge_memory(challenge: Challenge, answer: Answer, openings: Openings,
                  nonce: bytes) -> list[Failure]:
    if answer.memory is None:
        return [Failure("no_memory_answer", "the answer has no memory commitment")]
    want = chunks_to_check(challenge, answer.memory.root, nonce)
    got = tuple(o.index for o in openings.chunks)
    if sorted(got) != sorted(want):
        return [Failure("wrong_indices", f"opened chunks {sorted(got)}, the nonce names "
                                         f"{sorted(want)}")]
    try:
        verify_chunks(challenge, answer.memory.root, openings.chunks)
    except VerificationFailed as e:
        return [Failure(e.code, str(e))]
    except ChallengeError as e:
        return [Failure("malformed", str(e))]
    return []


def _judge_timing(challenge: Challenge, answer: Answer, openings: Openings,
                  table: BoundsTable, gpu: GpuBounds, answer_elapsed_s: float,
                  open_elapsed_s: float | None) -> list[Failure]:
    fails = []
    limit = table.max_response_s(challenge, gpu)
    if answer_elapsed_s > limit:
        fails.append(Failure("too_slow", f"answered in {answer_elapsed_s:.2f}s; a "
                                         f"{gpu.model} must answer within {limit:.2f}s"))
    reported = answer.timings.matmul_s
    max_mm = table.max_matmul_s(challenge, gpu)
    if reported > max_mm:
        fails.append(Failure("too_slow", f"reported matmul {reported:.3f}s; a {gpu.model} "
                                         f"must take at most {max_mm:.3f}s"))
    min_mm = table.min_matmul_s(challenge, gpu)
    if min_mm is not None and reported < min_mm:
        fails.append(Failure("implausible_timing",
                             f"reported matmul {reported:.4f}s is faster than a {gpu.model}'s "
                             f"peak allows ({min_mm:.4f}s)"))
    if answer.memory is not None:
        min_fill = table.min_fill_s(challenge, gpu)
        if min_fill is not None and answer.memory.fill_s < min_fill:
            fails.append(Failure("implausible_timing",
                                 f"reported memory fill {answer.memory.fill_s:.4f}s is faster "
                                 f"than a {gpu.model}'s bandwidth allows ({min_fill:.4f}s)"))
    if open_elapsed_s is not None and open_elapsed_s > table.max_open_s(challenge):
        fails.append(Failure("too_slow", f"opened in {open_elapsed_s:.2f}s; the limit is "
                                         f"{table.max_open_s(challenge):.2f}s"))
    return fails
