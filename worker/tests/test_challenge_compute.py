"""The worker's challenge computation (gpum_worker.challenge_compute): the numpy backend end
to end against the verifier, memory batching, failure paths, and the CUDA kernels' source
compiled for the host CPU and compared with the numpy generator."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from gpu_market import challenge as C
from gpu_market.challenge import Challenge, MerkleTree, Openings
from gpu_market.challenge_verdict import judge, load_bounds
from gpum_worker import challenge_compute as CC
from gpum_worker.challenge_compute import (
    ChallengeComputeError,
    CupyBackend,
    NumpyBackend,
    run_challenge,
)

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Challenge(seed=bytes(32), n=256, rounds=2, rows_to_open=4, memory_mib=3,
                   chunks_to_open=2, issued_at=1_700_000_000)


def int64_result(ch: Challenge) -> np.ndarray:
    a = C.matrix(ch, C.STREAM_A).astype(np.int64)
    b = C.matrix(ch, C.STREAM_B).astype(np.int64)
    p = a @ b
    for r in range(1, ch.rounds):
        p = C.next_matrix(p, r).astype(np.int64) @ b
    return p


@pytest.mark.parametrize("n,rounds", [(256, 1), (256, 4), (768, 2)])
def test_numpy_result_equals_an_independent_computation(n, rounds):
    ch = Challenge(seed=os.urandom(32), n=n, rounds=rounds, issued_at=0)
    result, generate_s, matmul_s, _ = NumpyBackend().multiply(ch, 0)
    assert result.dtype == np.float32 and generate_s > 0 and matmul_s > 0
    assert np.array_equal(result.astype(np.int64), int64_result(ch))
    if rounds == 1:  # one entry by the definition, in plain Python integers
        a = [C.word_to_value(C.splitmix_word(ch.key, C.STREAM_A, 7, k)) for k in range(n)]
        b = [C.word_to_value(C.splitmix_word(ch.key, C.STREAM_B, k, 9)) for k in range(n)]
        assert int(result[7, 9]) == sum(x * y for x, y in zip(a, b))


def test_golden_challenge_gives_the_pinned_roots_on_every_run():
    roots = {(r.answer.root.hex(), r.answer.memory.root.hex())
             for r in (run_challenge(GOLDEN, NumpyBackend()) for _ in range(2))}
    assert roots == {("bb374b2d2054a4ead9f2d7a77aa78b842e004db399f81bf9fd358b0a7a256bdb",
                      "d86a60e322b6f522b5c045117ef07a84f57660f0f44d210c9de84ce9bee4a31c")}


def test_a_run_opens_and_the_verifier_accepts_it():
    ch = Challenge(seed=os.urandom(32), n=512, rounds=3, rows_to_open=8, memory_mib=9,
                   chunks_to_open=4, issued_at=1)
    run = run_challenge(ch, NumpyBackend(), 0, threads=2)
    assert run.answer.device == "simulated" and run.answer.challenge_id == ch.challenge_id
    nonce = os.urandom(32)
    openings = run.open(nonce)
    assert len(openings.rows) == 8 and len(openings.chunks) == 4
    assert openings.memory_answer_s is not None and openings.nonce == nonce
    wire = Openings.from_dict(openings.to_dict(), ch)  # through the wire format
    table = load_bounds()
    v = judge(ch, C.Answer.from_dict(run.answer.to_dict()), wire, nonce=nonce, table=table,
              gpu=table.for_model(run.answer.device), answer_elapsed_s=1.0,
              open_elapsed_s=0.5)
    assert v.ok, v.failures
    assert (v.rows_checked, v.chunks_checked) == (8, 4)
    with pytest.raises(ChallengeComputeError, match="released"):
        run.open(nonce)  # the memory went back after the first opening


def test_open_can_keep_the_memory_and_rows_answer_any_nonce():
    ch = Challenge(seed=os.urandom(32), n=256, memory_mib=2, chunks_to_open=1, issued_at=1)
    run = run_challenge(ch, NumpyBackend())
    first = run.open(bytes(32), release=False)
    second = run.open(b"\x01" * 32)
    assert first.rows != second.rows or first.chunks != second.chunks
    assert run.memory is None


def test_memory_is_committed_batch_by_batch(monkeypatch):
    ch = Challenge(seed=os.urandom(32), n=256, memory_mib=7, chunks_to_open=3, issued_at=1)
    data = C.memory_chunks(ch, 0, 7)
    want = MerkleTree.build([C.chunk_leaf(i, data[i].data) for i in range(7)]).root
    monkeypatch.setattr(CC, "BATCH_CHUNKS", 2)
    assert run_challenge(ch, NumpyBackend(), threads=3).answer.memory.root == want


class _TwoBufferMemory:
    """Hands out batches in two reused buffers, as the GPU backend's pinned buffers are."""

    def __init__(self, data: np.ndarray, batch: int) -> None:
        self.data, self.batch, self.chunks = data, batch, data.shape[0]
        self.buffers = [np.empty((batch, C.CHUNK_WORDS), np.uint64) for _ in range(2)]

    def host_batches(self):
        for k, first in enumerate(range(0, self.chunks, self.batch)):
            part = self.data[first:first + self.batch]
            buf = self.buffers[k % 2][:part.shape[0]]
            buf[...] = part
            yield first, buf

    def read(self, indices):
        return [self.data[i].copy() for i in indices]

    def release(self):
        pass


def test_reused_host_buffers_are_hashed_before_they_are_overwritten():
    ch = Challenge(seed=os.urandom(32), n=256, memory_mib=40, chunks_to_open=3, issued_at=1)
    data = C.memory_chunks(ch, 0, 40)
    want = MerkleTree.build([C.chunk_leaf(i, data[i].data) for i in range(40)]).root
    assert CC._commit_memory(_TwoBufferMemory(data, 3), threads=4).root == want


class _InexactBackend(NumpyBackend):
    def multiply(self, challenge, gpu_index):
        result, *times = super().multiply(challenge, gpu_index)
        result[1, 2] += 0.5  # what an fp16 accumulator or output would do
        return (result, *times)


def test_an_inexact_device_result_is_refused():
    ch = Challenge(seed=os.urandom(32), n=256, issued_at=1)
    with pytest.raises(ChallengeComputeError, match="not exact"):
        run_challenge(ch, _InexactBackend())


def test_without_cupy_the_gpu_backend_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(ChallengeComputeError, match="cupy-cuda12x or cupy-cuda13x"):
        CupyBackend()


@pytest.mark.parametrize("n", [256, 4096])
def test_worst_case_is_exact_on_the_cpu(n):
    assert NumpyBackend().worst_case_exact(n, 0)


# ------------------------------------------------------------- the CUDA kernels' source

_HARNESS = """
#include <stddef.h>
typedef float T;
void gen(unsigned long long key, unsigned long long stream, long long cols, long long count,
         float *dst) {
    for (ptrdiff_t i = 0; i < count; i++) { T out; {GENERATE} dst[i] = out; }
}
void next_values(long long count, const float *src, int r, float *dst) {
    for (ptrdiff_t i = 0; i < count; i++) { float p = src[i]; T a; {NEXT} dst[i] = a; }
}
void fill(unsigned long long key, unsigned long long stream, long long chunk0,
          long long count, unsigned long long *dst) {
    for (ptrdiff_t i = 0; i < count; i++) { unsigned long long out; {FILL} dst[i] = out; }
}
"""


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):
    """The exact kernel bodies the GPU runs, compiled for this CPU by the C compiler."""
    d = tmp_path_factory.mktemp("kernels")
    src = d / "kernels.c"
    src.write_text(_HARNESS.replace("{GENERATE}", CC._GENERATE).replace("{NEXT}", CC._NEXT)
                   .replace("{FILL}", CC._FILL))
    lib = d / "kernels.so"
    out = subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)],
                         check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    so = ctypes.CDLL(str(lib))
    u64, i64, ptr = ctypes.c_ulonglong, ctypes.c_longlong, ctypes.c_void_p
    so.gen.argtypes = [u64, u64, i64, i64, ptr]
    so.next_values.argtypes = [i64, ptr, ctypes.c_int, ptr]
    so.fill.argtypes = [u64, u64, i64, i64, ptr]
    return so


@pytest.mark.parametrize("stream", [C.STREAM_A, C.STREAM_B])
def test_generation_kernel_matches_the_numpy_generator(host_kernels, stream):
    ch = Challenge(seed=os.urandom(32), n=512, issued_at=0)
    out = np.empty((ch.n, ch.n), np.float32)
    host_kernels.gen(ch.key, stream, ch.n, out.size, out.ctypes.data)
    assert np.array_equal(out.astype(np.int8), C.matrix(ch, stream))


def test_next_kernel_matches_g_r(host_kernels):
    p = np.random.default_rng(3).integers(-64 * 16384, 64 * 16384, 10_000).astype(np.float32)
    for r in (1, 2, 16, 1023):
        out = np.empty_like(p)
        host_kernels.next_values(p.size, p.ctypes.data, r, out.ctypes.data)
        assert np.array_equal(out.astype(np.int8), C.next_matrix(p, r))


def test_fill_kernel_matches_the_memory_chunks(host_kernels):
    ch = Challenge(seed=os.urandom(32), n=256, memory_mib=8, chunks_to_open=1, issued_at=0)
    out = np.empty((3, C.CHUNK_WORDS), np.uint64)
    host_kernels.fill(ch.key, C.STREAM_MEMORY, 5, out.size, out.ctypes.data)
    assert np.array_equal(out, C.memory_chunks(ch, 5, 3))


# ------------------------------------------------------------ a GPU machine's packages


def test_the_challenge_modules_import_without_the_workers_other_dependencies():
    """A GPU machine may have only numpy, CuPy and nvidia-ml-py: the protocol, verdict and
    compute modules (and NVML sampling) import and run a challenge without the rest."""
    code = textwrap.dedent("""
        import sys
        for name in ("nacl", "httpx", "solders", "cryptography", "solana", "anchorpy",
                     "click", "construct", "borsh_construct", "based58"):
            sys.modules[name] = None
        import os
        from gpu_market.challenge import Challenge
        from gpu_market.challenge_verdict import judge, load_bounds
        from gpum_worker.challenge_compute import NumpyBackend, run_challenge
        import gpum_worker.gpu
        ch = Challenge(seed=os.urandom(32), n=256, memory_mib=2, chunks_to_open=1,
                       issued_at=0)
        run = run_challenge(ch, NumpyBackend())
        nonce = os.urandom(32)
        t = load_bounds()
        v = judge(ch, run.answer, run.open(nonce), nonce=nonce, table=t,
                  gpu=t.for_model("simulated"), answer_elapsed_s=1.0)
        assert v.ok, v.failures
        assert "nacl" not in sys.modules or sys.modules["nacl"] is None
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'clients/py'}:{ROOT / 'worker'}"}
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
