"""Timing bounds table and the verdict on a challenge (gpu_market.challenge_verdict)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gpu_market import challenge as C
from gpu_market.challenge import (
    Answer,
    Challenge,
    ChunkOpening,
    ComputeTimings,
    MemoryCommitment,
    MerkleTree,
    Openings,
)
from gpu_market.challenge_verdict import (
    FAILURE_CODES,
    UnknownGpuModel,
    Verdict,
    judge,
    load_bounds,
    parse_bounds,
    standard_max_seconds,
)

PKG = Path(__file__).resolve().parents[1]
DATA = PKG / "gpu_market" / "data" / "gpu_challenge_bounds.json"
REQUIRED = {"H100 80GB HBM3", "H200", "A100 80GB", "A100 40GB", "L40S", "RTX 4090", "RTX 3090",
            "simulated"}


@pytest.fixture(scope="module")
def table():
    return load_bounds()


def test_the_table_has_every_model_with_a_vendor_source(table):
    assert {m.model for m in table.models} == REQUIRED
    raw = json.loads(DATA.read_text())
    for row in raw["models"]:
        assert "measured" in row and (row["measured"] is None or isinstance(row["measured"], dict))
        if row["model"] == "simulated":
            assert row["peak_fp16_dense_tflops"] is None and row["floor_tflops"] > 0
            continue
        assert row["source"].startswith(("https://www.nvidia.com/", "https://images.nvidia.com/"))
        assert row["peak_fp16_dense_tflops"] > 50 and row["memory_bandwidth_gbps"] > 500
        assert row["memory_gb"] in (24, 40, 48, 80, 141) and row["source_note"]


def test_stored_standard_seconds_follow_the_formula(table):
    std = table.standard
    assert (std["n"], std["rounds"], std["rows_to_open"]) == (
        C.STANDARD_N, C.STANDARD_ROUNDS, C.STANDARD_ROWS)
    assert std["flop"] == Challenge.standard(bytes(32), issued_at=0).flop
    for m in table.models:
        assert m.max_seconds_standard == standard_max_seconds(table, m), m.model
    h100 = table.for_model("H100 80GB HBM3")
    assert h100.max_seconds_standard == math.ceil(std["flop"] / (989.5e12 * 0.4) * 100) / 100
    # the bound separates the classes: an A100 at its full peak is slower than an H100's floor
    a100 = table.for_model("A100 80GB")
    assert std["flop"] / (a100.peak_tflops * 1e12) > h100.max_seconds_standard


def test_models_are_found_by_their_nvml_names(table):
    assert table.for_model("NVIDIA H100 80GB HBM3").model == "H100 80GB HBM3"
    assert table.for_model("nvidia  a100-sxm4-80gb").model == "A100 80GB"
    assert table.for_model("NVIDIA GeForce RTX 4090").model == "RTX 4090"
    assert table.for_model("simulated").peak_tflops is None
    with pytest.raises(UnknownGpuModel, match="NVIDIA B200"):
        table.for_model("NVIDIA B200")


def test_a_bad_policy_is_refused():
    raw = json.loads(DATA.read_text())
    raw["policy"]["min_efficiency"] = 1.5
    with pytest.raises(C.ChallengeError, match="min_efficiency"):
        parse_bounds(raw)
    raw["schema"] = 2
    with pytest.raises(C.ChallengeError, match="schema"):
        parse_bounds(raw)


def test_the_table_ships_as_package_data(tmp_path):
    """setuptools' own build copies the JSON next to the modules (what a wheel holds)."""
    out = subprocess.run(
        [sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
         "--build-lib", str(tmp_path)], cwd=PKG, check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    shipped = tmp_path / "gpu_market" / "data" / "gpu_challenge_bounds.json"
    assert shipped.read_bytes() == DATA.read_bytes()


# -------------------------------------------------------------------------------- judge


def _honest(ch: Challenge, nonce: bytes, *, matmul_s: float = 0.5, fill_s: float = 1.0,
            rows: np.ndarray | None = None) -> tuple[Answer, Openings]:
    """What an honest worker sends, computed here from the seed with numpy int64."""
    if rows is None:
        a = C.matrix(ch, C.STREAM_A).astype(np.int64)
        b = C.matrix(ch, C.STREAM_B).astype(np.int64)
        p = a @ b
        for r in range(1, ch.rounds):
            p = C.next_matrix(p, r).astype(np.int64) @ b
        rows = C.exact_int32(p, ch.n)
    tree = C.commit_rows(rows)
    memory = chunks = None
    if ch.memory_mib:
        data = C.memory_chunks(ch, 0, ch.memory_mib)
        mtree = MerkleTree.build([C.chunk_leaf(i, data[i].data) for i in range(ch.memory_mib)])
        memory = MemoryCommitment(mtree.root, fill_s, 0.1)
        chunks = tuple(ChunkOpening(i, mtree.levels[0][i], mtree.proof(i))
                       for i in C.chunks_to_check(ch, mtree.root, nonce))
    answer = Answer(ch.challenge_id, 0, "NVIDIA GeForce RTX 3090", tree.root,
                    ComputeTimings(0.01, matmul_s, 0.01, 0.01), memory)
    rows_open = tuple(C.open_rows(tree, C.rows_to_check(ch, tree.root, nonce), rows=rows))
    return answer, Openings(rows_open, chunks or (), 0.01 if memory else None, nonce)


CH = Challenge(seed=b"\x07" * 32, n=512, rounds=3, rows_to_open=5, memory_mib=4,
               chunks_to_open=2, issued_at=1)
NONCE = b"\x09" * 32


@pytest.fixture(scope="module")
def honest():
    return _honest(CH, NONCE)


def _judge(table, answer, openings, *, model="RTX 3090", elapsed=1.0, open_elapsed=0.5):
    return judge(CH, answer, openings, nonce=NONCE, table=table, gpu=table.for_model(model),
                 answer_elapsed_s=elapsed, open_elapsed_s=open_elapsed)


def test_an_honest_answer_passes(table, honest):
    answer, openings = honest
    answer = dataclasses.replace(answer, timings=ComputeTimings(0.01, 2e-5, 0.01, 0.01))
    v = _judge(table, answer, openings)
    assert v.ok and v.failures == () and (v.rows_checked, v.chunks_checked) == (5, 2)
    assert v.model == "RTX 3090" and v.max_response_s > 10 and v.verify_s > 0


def test_no_answer_fails():
    v = Verdict.missing(CH, "timed out after 60s", "H200")
    assert not v.ok and v.codes == ("no_answer",)
    v = judge(CH, None, None, nonce=NONCE, table=load_bounds(),
              gpu=load_bounds().for_model("H200"), answer_elapsed_s=60)
    assert v.codes == ("no_answer",)


def test_each_dishonest_answer_fails_with_its_code(table, honest):
    answer, openings = honest
    fast = dataclasses.replace(answer, timings=ComputeTimings(0.01, 2e-5, 0.01, 0.01))
    cases = {
        "wrong_challenge": (dataclasses.replace(fast, challenge_id=bytes(32)), openings),
        "wrong_indices": (fast, dataclasses.replace(openings, rows=openings.rows[1:])),
        "bad_proof": (dataclasses.replace(fast, root=os.urandom(32)), None),
        "no_memory_answer": (dataclasses.replace(fast, memory=None), openings),
    }
    for code, (a, o) in cases.items():
        if o is None:  # openings for the made-up root, so only the Merkle check can fail
            o = dataclasses.replace(openings, rows=tuple(
                dataclasses.replace(r, index=i) for r, i in
                zip(openings.rows, C.rows_to_check(CH, a.root, NONCE))))
        assert code in _judge(table, a, o).codes, code


def test_a_commitment_to_wrong_values_fails_the_recomputation(table):
    """A worker that got column 0 of every row wrong and committed to it: the Merkle paths
    hold, the recomputation does not."""
    a = C.matrix(CH, C.STREAM_A).astype(np.int64)
    b = C.matrix(CH, C.STREAM_B).astype(np.int64)
    p = a @ b
    for r in range(1, CH.rounds):
        p = C.next_matrix(p, r).astype(np.int64) @ b
    rows = C.exact_int32(p, CH.n)
    rows[:, 0] += 1
    answer, openings = _honest(CH, NONCE, rows=rows, matmul_s=2e-5)
    v = _judge(table, answer, openings)
    assert v.codes == ("wrong_row",) and "column 0" in v.failures[0].message


def test_timing_bounds(table, honest):
    answer, openings = honest
    ok = dataclasses.replace(answer, timings=ComputeTimings(0.01, 2e-5, 0.01, 0.01))
    limit = table.max_response_s(CH, table.for_model("RTX 3090"))
    assert _judge(table, ok, openings, elapsed=limit).ok
    assert _judge(table, ok, openings, elapsed=limit + 0.01).codes == ("too_slow",)
    assert _judge(table, ok, openings, open_elapsed=60).codes == ("too_slow",)
    # a reported matmul slower than a 3090's floor, or faster than an H100's peak allows
    max_mm = table.max_matmul_s(CH, table.for_model("RTX 3090"))
    slow = dataclasses.replace(ok, timings=ComputeTimings(0.01, max_mm * 1.01, 0.01, 0.01))
    assert _judge(table, slow, openings).codes == ("too_slow",)
    min_mm = table.min_matmul_s(CH, table.for_model("H100 80GB HBM3"))
    lie = dataclasses.replace(ok, timings=ComputeTimings(0.01, min_mm * 0.9, 0.01, 0.01))
    assert _judge(table, lie, openings, model="H100 80GB HBM3").codes == ("implausible_timing",)
    fill = dataclasses.replace(ok, memory=dataclasses.replace(ok.memory, fill_s=0.0))
    assert _judge(table, fill, openings).codes == ("implausible_timing",)
    # the simulated model has no peak: no "faster than possible"
    sim = dataclasses.replace(ok, timings=ComputeTimings(0, 0, 0, 0),
                              memory=dataclasses.replace(ok.memory, fill_s=0.0))
    assert _judge(table, sim, openings, model="simulated").ok


def test_failure_codes_are_the_documented_ones(table, honest):
    answer, openings = honest
    bad = dataclasses.replace(answer, root=bytes(32), challenge_id=bytes(32),
                              timings=ComputeTimings(0, 99, 0, 0))
    v = _judge(table, bad, openings, elapsed=1e5, open_elapsed=1e5)
    assert v.codes and set(v.codes) <= set(FAILURE_CODES)
