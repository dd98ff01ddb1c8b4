"""Computing hardware challenges (``gpu_market.challenge``) on this machine: the prover side.

Backends, one interface (``ChallengeBackend``):

* ``NumpyBackend``: the CPU with numpy float32, for ``--simulate`` and CI. Exact by the
  bound in ``gpu_market.challenge`` (any summation order of integers below 2^24).
* ``CupyBackend``: one NVIDIA GPU per call (``gpu_index``) through CuPy, imported when the
  backend is made, so this module imports with numpy alone. Elementwise kernels generate
  ``A`` and ``B`` on the device with the protocol's hash and apply ``g_r`` between rounds;
  cuBLAS ``gemmEx`` multiplies fp16 inputs with fp32 compute into an fp32 result (an fp16
  result would not be exact); CUDA events time generation and the products; the result is
  copied to the host, where the Merkle tree is built.

``run_challenge(challenge, backend, gpu_index)`` returns a ``ChallengeRun`` whose ``answer``
goes to the validator; ``run.open(nonce)`` answers the validator's nonce with the rows and
memory chunks it names (chunks are read back from the memory the backend filled, which
stays allocated until then) and releases that memory. A device that cannot compute the
challenge (no CuPy, no GPU ``gpu_index``, out of memory, a CUDA error, a result that is not
exact) raises ``ChallengeComputeError`` with the reason.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from gpu_market.challenge import (
    CHUNK_WORDS,
    STREAM_A,
    STREAM_B,
    STREAM_MEMORY,
    VALUE_LEVELS,
    VALUE_MAX,
    VALUE_MIN,
    Answer,
    Challenge,
    ChallengeError,
    ChunkOpening,
    ComputeTimings,
    MemoryCommitment,
    MerkleTree,
    Openings,
    chunk_leaf,
    chunks_to_check,
    commit_rows,
    exact_int32,
    matrix,
    memory_chunks,
    next_matrix,
    open_rows,
    rows_to_check,
)

BATCH_CHUNKS = 256
"""Memory chunks copied to the host and hashed per batch (256 MiB)."""


class ChallengeComputeError(RuntimeError):
    """This machine could not compute the challenge; the message says why."""


class ResidentMemory(Protocol):
    """The filled memory of a memory challenge, kept until ``release``."""

    chunks: int

    def host_batches(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first chunk index, uint64 array (m, CHUNK_WORDS) on the host) in order. An array
        stays valid until the batch after the next one is requested."""
        ...

    def read(self, indices: Sequence[int]) -> list[np.ndarray]:
        """Host copies of the chunks ``indices``, read from the filled memory."""
        ...

    def release(self) -> None: ...


class ChallengeBackend(Protocol):
    kind: str

    def device_name(self, gpu_index: int) -> str: ...

    def multiply(self, challenge: Challenge, gpu_index: int
                 ) -> tuple[np.ndarray, float, float, float]:
        """(result ``C`` as an n x n host array, generate_s, matmul_s, transfer_s)."""
        ...

    def fill_memory(self, challenge: Challenge, gpu_index: int) -> tuple[ResidentMemory, float]:
        """Memory holding the challenge's ``memory_mib`` chunks, and the seconds it took."""
        ...

    def worst_case_exact(self, n: int, gpu_index: int) -> bool:
        """Multiply two n x n matrices of 8s: True iff every entry is exactly 64 n, the
        largest magnitude the exactness bound allows for this n."""
        ...


# ------------------------------------------------------------------------------- numpy


class _HostMemory:
    def __init__(self, data: np.ndarray) -> None:
        self._data: np.ndarray | None = data
        self.chunks = data.shape[0]

    def _get(self) -> np.ndarray:
        if self._data is None:
            raise ChallengeComputeError("the challenge memory was released")
        return self._data

    def host_batches(self) -> Iterator[tuple[int, np.ndarray]]:
        data = self._get()
        for first in range(0, self.chunks, BATCH_CHUNKS):
            yield first, data[first:first + BATCH_CHUNKS]

    def read(self, indices: Sequence[int]) -> list[np.ndarray]:
        data = self._get()
        return [data[i].copy() for i in indices]

    def release(self) -> None:
        self._data = None


class NumpyBackend:
    """The CPU (``--simulate``, CI): numpy float32 products, memory in host RAM."""

    kind = "numpy"

    def device_name(self, gpu_index: int) -> str:
        return "simulated"

    def multiply(self, challenge: Challenge, gpu_index: int
                 ) -> tuple[np.ndarray, float, float, float]:
        t0 = time.perf_counter()
        a = matrix(challenge, STREAM_A).astype(np.float32)
        b = matrix(challenge, STREAM_B).astype(np.float32)
        t1 = time.perf_counter()
        p = a @ b
        for r in range(1, challenge.rounds):
            p = next_matrix(p, r).astype(np.float32) @ b
        t2 = time.perf_counter()
        return p, t1 - t0, t2 - t1, 0.0

    def fill_memory(self, challenge: Challenge, gpu_index: int) -> tuple[ResidentMemory, float]:
        t0 = time.perf_counter()
        data = memory_chunks(challenge, 0, challenge.memory_mib)
        return _HostMemory(data), time.perf_counter() - t0

    def worst_case_exact(self, n: int, gpu_index: int) -> bool:
        a = np.full((n, n), VALUE_MAX, dtype=np.float32)
        return bool(np.all(a @ a == VALUE_MAX * VALUE_MAX * n))


# -------------------------------------------------------------------------------- cupy

_MIX = """
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z = z ^ (z >> 31);
"""
_GENERATE = ("""
    unsigned long long row = (unsigned long long)(i / cols);
    unsigned long long col = (unsigned long long)(i % cols);
    unsigned long long z = key + ((stream << 56) | (row << 32) | col);
""" + _MIX + f"""
    int v = (int)(((z >> 32) * {VALUE_LEVELS}ULL) >> 32) + ({VALUE_MIN});
    out = (T)(float)v;
""")
_NEXT = f"""
    int x = (int)p;
    int m = (x + r) % {VALUE_LEVELS};
    if (m < 0) m += {VALUE_LEVELS};
    a = (T)(float)(m + ({VALUE_MIN}));
"""
_FILL = ("""
    unsigned long long c = (unsigned long long)(chunk0 + i / """ + str(CHUNK_WORDS) + """);
    unsigned long long w = (unsigned long long)(i % """ + str(CHUNK_WORDS) + """);
    unsigned long long z = key + ((stream << 56) | (c << 32) | w);
""" + _MIX + """
    out = z;
""")


class _DeviceMemory:
    def __init__(self, cp: Any, gpu_index: int, arrays: list[tuple[int, Any]],
                 chunks: int) -> None:
        self._cp = cp
        self._gpu = gpu_index
        self._arrays = arrays  # (first chunk, device array (m, CHUNK_WORDS))
        self.chunks = chunks

    def _locate(self, index: int) -> tuple[Any, int]:
        for first, arr in self._arrays:
            if first <= index < first + arr.shape[0]:
                return arr, index - first
        raise ChallengeComputeError(f"chunk {index} is not held (released, or out of range)")

    def host_batches(self) -> Iterator[tuple[int, np.ndarray]]:
        cp = self._cp
        import cupyx

        with cp.cuda.Device(self._gpu):
            buffers = [cupyx.empty_pinned((BATCH_CHUNKS, CHUNK_WORDS), dtype=np.uint64)
                       for _ in range(2)]
            k = 0
            for first, arr in self._arrays:
                for s in range(0, arr.shape[0], BATCH_CHUNKS):
                    part = arr[s:s + BATCH_CHUNKS]
                    host = buffers[k % 2][:part.shape[0]]
                    part.get(out=host)
                    k += 1
                    yield first + s, host

    def read(self, indices: Sequence[int]) -> list[np.ndarray]:
        with self._cp.cuda.Device(self._gpu):
            out = []
            for i in indices:
                arr, row = self._locate(i)
                out.append(self._cp.asnumpy(arr[row]))
            return out

    def release(self) -> None:
        self._arrays = []
        with self._cp.cuda.Device(self._gpu):
            self._cp.get_default_memory_pool().free_all_blocks()


class CupyBackend:
    """One NVIDIA GPU through CuPy (``pip install cupy-cuda12x`` or ``cupy-cuda13x``)."""

    kind = "cupy"

    def __init__(self) -> None:
        try:
            import cupy
            from cupy_backends.cuda.api import runtime
            from cupy_backends.cuda.libs import cublas
        except ImportError as e:
            raise ChallengeComputeError(
                f"CuPy is not importable ({e}); install cupy-cuda12x or cupy-cuda13x to "
                "compute challenges on the GPU, or use --simulate") from None
        self._cp, self._rt, self._cublas = cupy, runtime, cublas
        self._one = np.array(1.0, dtype=np.float32)
        self._zero = np.array(0.0, dtype=np.float32)
        self._generate = cupy.ElementwiseKernel(
            "uint64 key, uint64 stream, int64 cols", "T out", _GENERATE, "gpum_challenge_gen")
        self._next = cupy.ElementwiseKernel("float32 p, int32 r", "T a", _NEXT,
                                            "gpum_challenge_next")
        self._fill = cupy.ElementwiseKernel("uint64 key, uint64 stream, int64 chunk0",
                                            "uint64 out", _FILL, "gpum_challenge_fill")
        self._prepared: set[int] = set()

    def prepare(self, gpu_index: int) -> None:
        """One-time work on a GPU, kept out of the timed sections: compiling the kernels
        (NVRTC, cached on disk by CuPy), creating the cuBLAS handle, a first small gemm."""
        if gpu_index in self._prepared:
            return
        cp = self._cp
        with self._device(gpu_index):
            try:
                a = cp.empty((256, 256), dtype=cp.float16)
                p = cp.empty((256, 256), dtype=cp.float32)
                self._generate(np.uint64(1), np.uint64(STREAM_A), np.int64(256), a)
                self._gemm(a, a, p)
                self._next(p, np.int32(1), a)
                self._fill(np.uint64(1), np.uint64(STREAM_MEMORY), np.int64(0),
                           cp.empty((1, CHUNK_WORDS), dtype=cp.uint64))
                cp.cuda.Device().synchronize()
            except Exception as e:  # noqa: BLE001 - NVRTC, driver and cuBLAS errors alike
                raise ChallengeComputeError(
                    f"GPU {gpu_index}: cannot compile or run the challenge kernels: "
                    f"{type(e).__name__}: {e}") from None
        self._prepared.add(gpu_index)

    def _device(self, gpu_index: int) -> Any:
        cp = self._cp
        try:
            count = cp.cuda.runtime.getDeviceCount()
        except cp.cuda.runtime.CUDARuntimeError as e:
            raise ChallengeComputeError(f"CUDA is not usable: {e}") from None
        if not 0 <= gpu_index < count:
            raise ChallengeComputeError(f"no GPU {gpu_index}: CUDA sees {count}")
        return cp.cuda.Device(gpu_index)

    def device_name(self, gpu_index: int) -> str:
        name = self._cp.cuda.runtime.getDeviceProperties(gpu_index)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)

    def _gemm(self, a: Any, b: Any, c: Any) -> None:
        """c (fp32, n x n row-major) = a @ b (fp16, row-major); fp32 compute. cuBLAS is
        column-major, so it computes c^T = b^T a^T on the same buffers."""
        cb, rt = self._cublas, self._rt
        # enum values from cublas_api.h / library_types.h, in case a CuPy does not export them
        op_n = getattr(cb, "CUBLAS_OP_N", 0)
        r16f, r32f = getattr(rt, "CUDA_R_16F", 2), getattr(rt, "CUDA_R_32F", 0)
        rows, inner = a.shape
        cols = b.shape[1]
        handle = self._cp.cuda.device.get_cublas_handle()
        cb.setPointerMode(handle, getattr(cb, "CUBLAS_POINTER_MODE_HOST", 0))
        cb.gemmEx(handle, op_n, op_n, cols, rows, inner,
                  self._one.ctypes.data, b.data.ptr, r16f, cols,
                  a.data.ptr, r16f, inner, self._zero.ctypes.data,
                  c.data.ptr, r32f, cols, getattr(cb, "CUBLAS_COMPUTE_32F", 68),
                  getattr(cb, "CUBLAS_GEMM_DEFAULT", -1))

    def multiply(self, challenge: Challenge, gpu_index: int
                 ) -> tuple[np.ndarray, float, float, float]:
        cp = self._cp
        n, key = challenge.n, np.uint64(challenge.key)
        self.prepare(gpu_index)
        with self._device(gpu_index):
            try:
                a = cp.empty((n, n), dtype=cp.float16)
                b = cp.empty((n, n), dtype=cp.float16)
                p = cp.empty((n, n), dtype=cp.float32)
                start, generated, done = cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event()
                start.record()
                self._generate(key, np.uint64(STREAM_A), np.int64(n), a)
                self._generate(key, np.uint64(STREAM_B), np.int64(n), b)
                generated.record()
                self._gemm(a, b, p)
                for r in range(1, challenge.rounds):
                    self._next(p, np.int32(r), a)
                    self._gemm(a, b, p)
                done.record()
                done.synchronize()
                generate_s = cp.cuda.get_elapsed_time(start, generated) / 1e3
                matmul_s = cp.cuda.get_elapsed_time(generated, done) / 1e3
                t0 = time.perf_counter()
                host = cp.asnumpy(p)
                transfer_s = time.perf_counter() - t0
            except (cp.cuda.memory.OutOfMemoryError, cp.cuda.runtime.CUDARuntimeError,
                    self._cublas.CUBLASError) as e:
                raise ChallengeComputeError(f"GPU {gpu_index}: {type(e).__name__}: {e}") from None
            finally:
                a = b = p = None
                cp.get_default_memory_pool().free_all_blocks()
        return host, generate_s, matmul_s, transfer_s

    def fill_memory(self, challenge: Challenge, gpu_index: int) -> tuple[ResidentMemory, float]:
        cp = self._cp
        key = np.uint64(challenge.key)
        self.prepare(gpu_index)
        per_array = 1024  # 1 GiB per allocation keeps each kernel's index below 2^31
        with self._device(gpu_index):
            arrays: list[tuple[int, Any]] = []
            try:
                start, done = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                for first in range(0, challenge.memory_mib, per_array):
                    m = min(per_array, challenge.memory_mib - first)
                    arr = cp.empty((m, CHUNK_WORDS), dtype=cp.uint64)
                    self._fill(key, np.uint64(STREAM_MEMORY), np.int64(first), arr)
                    arrays.append((first, arr))
                done.record()
                done.synchronize()
            except (cp.cuda.memory.OutOfMemoryError, cp.cuda.runtime.CUDARuntimeError) as e:
                arrays.clear()
                cp.get_default_memory_pool().free_all_blocks()
                raise ChallengeComputeError(
                    f"GPU {gpu_index} cannot hold {challenge.memory_mib} MiB: "
                    f"{type(e).__name__}: {e}") from None
            fill_s = cp.cuda.get_elapsed_time(start, done) / 1e3
        return _DeviceMemory(cp, gpu_index, arrays, challenge.memory_mib), fill_s

    def worst_case_exact(self, n: int, gpu_index: int) -> bool:
        cp = self._cp
        self.prepare(gpu_index)
        with self._device(gpu_index):
            a = cp.full((n, n), VALUE_MAX, dtype=cp.float16)
            p = cp.empty((n, n), dtype=cp.float32)
            self._gemm(a, a, p)
            ok = bool((p == VALUE_MAX * VALUE_MAX * n).all())
            a = p = None
            cp.get_default_memory_pool().free_all_blocks()
        return ok


# ------------------------------------------------------------------------------- runs


@dataclass
class ChallengeRun:
    """One computed challenge, held until opened: the int32 result and its tree, and the
    filled memory with its tree."""

    challenge: Challenge
    answer: Answer
    rows: np.ndarray
    tree: MerkleTree
    memory: ResidentMemory | None = None
    memory_tree: MerkleTree | None = None

    def open(self, nonce: bytes, *, release: bool = True) -> Openings:
        """The rows and chunks ``nonce`` names (derived here exactly as the validator
        derives them), chunks re-read from the filled memory and hashed again."""
        ch = self.challenge
        rows = open_rows(self.tree, rows_to_check(ch, self.answer.root, nonce), rows=self.rows)
        chunks: list[ChunkOpening] = []
        answer_s = None
        if ch.memory_mib:
            if self.memory is None or self.memory_tree is None:
                raise ChallengeComputeError("the challenge memory was already released")
            t0 = time.perf_counter()
            idx = chunks_to_check(ch, self.memory_tree.root, nonce)
            data = self.memory.read(idx)
            chunks = [ChunkOpening(i, chunk_leaf(i, d.data), self.memory_tree.proof(i))
                      for i, d in zip(idx, data)]
            answer_s = time.perf_counter() - t0
        if release:
            self.release()
        return Openings(tuple(rows), tuple(chunks), answer_s, nonce)

    def release(self) -> None:
        if self.memory is not None:
            self.memory.release()
            self.memory = None


def _commit_memory(memory: ResidentMemory, threads: int) -> MerkleTree:
    leaves: list[bytes] = [b""] * memory.chunks
    pending: list[list[Future[None]]] = []

    def leaf(i: int, data: np.ndarray) -> None:
        leaves[i] = chunk_leaf(i, data.data)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for first, host in memory.host_batches():
            pending.append([pool.submit(leaf, first + j, host[j]) for j in range(len(host))])
            if len(pending) == 2:  # the batch before this one is hashed before its buffer
                for f in pending.pop(0):  # is reused for the next batch
                    f.result()
        for futures in pending:
            for f in futures:
                f.result()
    return MerkleTree.build(leaves)


def run_challenge(challenge: Challenge, backend: ChallengeBackend, gpu_index: int = 0, *,
                  threads: int | None = None) -> ChallengeRun:
    """Compute ``challenge`` on GPU ``gpu_index`` of ``backend``; commit the result and, when
    the challenge asks for it, fill and commit the memory (held until ``open``)."""
    threads = threads or min(16, os.cpu_count() or 1)
    raw, generate_s, matmul_s, transfer_s = backend.multiply(challenge, gpu_index)
    t0 = time.perf_counter()
    try:
        rows = exact_int32(raw, challenge.n)
    except ChallengeError as e:
        raise ChallengeComputeError(f"GPU {gpu_index}: {e}") from None
    del raw
    tree = commit_rows(rows, threads=threads)
    commit_s = time.perf_counter() - t0
    memory = memory_tree = commitment = None
    if challenge.memory_mib:
        memory, fill_s = backend.fill_memory(challenge, gpu_index)
        try:
            t0 = time.perf_counter()
            memory_tree = _commit_memory(memory, threads)
            commitment = MemoryCommitment(memory_tree.root, fill_s, time.perf_counter() - t0)
        except BaseException:
            memory.release()
            raise
    answer = Answer(challenge.challenge_id, gpu_index, backend.device_name(gpu_index),
                    tree.root, ComputeTimings(generate_s, matmul_s, transfer_s, commit_s),
                    commitment)
    return ChallengeRun(challenge, answer, rows, tree, memory, memory_tree)
