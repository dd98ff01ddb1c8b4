"""Hardware challenges: the pure protocol shared by the worker (prover) and the validator
(verifier). Standard library and numpy only (numpy imported on first use), no I/O, no
clock; the worker's compute backends are ``gpum_worker.challenge_compute``, timing bounds
and the verdict ``gpu_market.challenge_verdict``, the prose ``docs/gpu-challenge.md``.

Protocol::

    validator                                         worker (one GPU)
    Challenge(seed, n, rounds, ...)      ------>      A, B <- generator(seed) on the GPU
                                                      P_1 = A B, A_r = g_r(P_r), P_{r+1} = A_r B
                                                      C = P_rounds; root = Merkle(rows of C)
                                                      memory: fill, commit Merkle(chunk digests)
                                         <------      Answer(root, memory root, timings)
    nonce (fresh, after the roots)       ------>      rows = pick(root, nonce); chunks likewise
                                         <------      Openings(rows + proofs, chunk digests)
    verify: Merkle paths, recompute the opened rows and chunks from the seed, timing bounds

**Generator.** Counter-based, so any element is computed on its own: the word for
``(stream, hi, lo)`` is ``splitmix64_finalizer(key + (stream << 56 | hi << 32 | lo))`` with
``key`` = the first 8 bytes (little-endian) of ``sha256(KEY_DOMAIN || seed)``; the counter
layout is injective (``stream`` < 2^8, ``hi`` < 2^24, ``lo`` < 2^32) and the finalizer is a
bijection, so no two elements of one challenge share a word. Matrix elements take
``(word >> 32) * 17 >> 32`` - 8, an integer in [-8, 8]: ``A[i, j]`` uses ``(STREAM_A, i, j)``,
``B[i, j]`` ``(STREAM_B, i, j)``. Memory chunk ``c`` is ``CHUNK_WORDS`` uint64 words,
word ``w`` = the word of ``(STREAM_MEMORY, c, w)``, stored little-endian.

**Rounds.** ``P_1 = A B``; for ``r`` < ``rounds``: ``A_r = g_r(P_r)`` with
``g_r(x) = ((x + r) mod 17) - 8`` (floor modulo, so again in [-8, 8]) and
``P_{r+1} = A_r B``; the result is ``C = P_rounds``. With ``rounds = 1`` this is ``A B``. The
chain makes the prover's work ``rounds * 2 n^3`` while checking one row costs the verifier
``rounds`` vector-matrix products with the same ``B``: row ``i`` of ``C`` depends only on row
``i`` of ``A`` and on ``B``.

**Exactness guarantee.** Every product of two elements is an integer of magnitude <= 64, so
every partial sum of an inner product of length ``n`` is an integer of magnitude <= 64 n.
For ``n <= MAX_N`` (16384) that is <= 2^20 < 2^24, and every integer of magnitude <= 2^24
is exactly representable in IEEE fp32. Inputs in [-8, 8] are exact in fp16, bf16, TF32 and
fp32. Hence a GPU multiplying fp16 inputs with fp32 accumulation (tensor cores) or fp32
inputs, in any summation order, blocking or split-K, returns exactly the integer product,
bit for bit equal to numpy's float32 or int64 result. The bound is 64 n <= 2^24, i.e.
n <= 2^18; this module caps n at 2^14. An fp16 *output* would not be exact (it has 11
significant bits): results are fp32 and committed as int32.

**Commitment.** Row leaf ``sha256(ROW_LEAF_DOMAIN || u32 index || row as int32 LE)``;
memory chunk leaf ``sha256(CHUNK_LEAF_DOMAIN || u32 index || chunk bytes)``; inner node
``sha256(NODE_DOMAIN || left || right)``. A level with an odd number of nodes moves its last
node up unchanged (no duplication, so no two leaf lists of one length share a root). The
leaf count (``n`` rows, ``memory_mib`` chunks) is fixed by the challenge, which fixes the
tree's shape; a proof is the sibling hashes from the leaf level up, one per level where the
node has a sibling.

**What a passing matmul check shows.** The worker produced a root before it knew which rows
would be opened, and every opened row is the exact product: a prover that computed only a
fraction f of the rows passes ``rows_to_open`` checks with probability about
f^rows_to_open. Who computed it, on which device, is not shown: only the validator's own
clock (``gpu_market.challenge_verdict``) bounds how fast it was done; the timings in the
answer are the worker's word.

**What the memory check shows, and what it does not.** The worker fills ``memory_mib`` MiB
of device memory with the seeded chunks, commits a root over their digests, and after a
fresh nonce answers the digests of the chunks the nonce names, read back from that memory.
The chunks are a function of the seed: a prover can regenerate any chunk on the fly instead
of keeping it resident, and regenerating 1 MiB costs a GPU microseconds. So the check shows
that the worker computed every chunk correctly and can answer for them; it does not prove
the memory was resident or that the device has ``memory_mib`` MiB. Timing (the answer's
latency against the regeneration cost) is the only bound, and a weak one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported on first use, so the SDK imports without it
    import numpy as np

CHALLENGE_DOMAIN = b"gpu-market/challenge/v1"
KEY_DOMAIN = b"gpu-market/challenge/key/v1"
PICK_DOMAIN = b"gpu-market/challenge/pick/v1"
ROW_LEAF_DOMAIN = b"gpu-market/challenge/row/v1"
CHUNK_LEAF_DOMAIN = b"gpu-market/challenge/chunk/v1"
NODE_DOMAIN = b"gpu-market/challenge/node/v1"

MIN_N = 256
MAX_N = 16384
N_STEP = 256
MAX_ROUNDS = 1024
MAX_ROWS_TO_OPEN = 64
MAX_CHUNKS_TO_OPEN = 256
MAX_MEMORY_MIB = 1 << 20
VALUE_MIN, VALUE_MAX = -8, 8
VALUE_LEVELS = VALUE_MAX - VALUE_MIN + 1
EXACT_LIMIT = 1 << 24
"""Every integer of magnitude <= 2^24 is exact in fp32."""
MAX_EXACT_N = EXACT_LIMIT // (VALUE_MAX * VALUE_MAX)
"""Largest inner dimension whose partial sums stay within ``EXACT_LIMIT`` (2^18)."""

CHUNK_BYTES = 1 << 20
CHUNK_WORDS = CHUNK_BYTES // 8
STREAM_A, STREAM_B, STREAM_MEMORY = 0, 1, 2
SPLITMIX_C1 = 0xBF58476D1CE4E5B9
SPLITMIX_C2 = 0x94D049BB133111EB
_M64 = (1 << 64) - 1

DTYPES = {"fp16": 1}
"""Input dtype on the device -> wire code. fp16 inputs, fp32 accumulation and output."""

_HEADER = struct.Struct("<32sIHBHIHq")  # seed n rounds dtype rows memory_mib chunks issued_at
ENCODED_LEN = len(CHALLENGE_DOMAIN) + _HEADER.size

STANDARD_N = 8192
STANDARD_ROUNDS = 64
STANDARD_ROWS = 16
"""The standard challenge, the one the bounds table's ``max_seconds_standard`` is for."""


class ChallengeError(ValueError):
    """A malformed challenge, answer or opening; the message says which field and why."""


class VerificationFailed(ChallengeError):
    """A well-formed opening that does not check out. ``code`` names the check:
    ``bad_proof`` (the Merkle path does not lead to the committed root), ``wrong_row`` or
    ``wrong_chunk`` (the committed value is not what the seed gives)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _np() -> Any:
    import numpy

    return numpy


# ------------------------------------------------------------------------------ challenge


@dataclass(frozen=True)
class Challenge:
    """What a validator sends. ``memory_mib`` = 0 means no memory challenge (then
    ``chunks_to_open`` is 0). ``issued_at`` is Unix seconds, set by the validator."""

    seed: bytes
    n: int
    rounds: int = 1
    dtype: str = "fp16"
    rows_to_open: int = STANDARD_ROWS
    memory_mib: int = 0
    chunks_to_open: int = 0
    issued_at: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.seed, bytes) or len(self.seed) != 32:
            raise ChallengeError("seed must be 32 bytes")
        _int_in("n", self.n, MIN_N, MAX_N)
        if self.n % N_STEP:
            raise ChallengeError(f"n must be a multiple of {N_STEP}, got {self.n}")
        _int_in("rounds", self.rounds, 1, MAX_ROUNDS)
        if self.dtype not in DTYPES:
            raise ChallengeError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        _int_in("rows_to_open", self.rows_to_open, 1, MAX_ROWS_TO_OPEN)
        _int_in("memory_mib", self.memory_mib, 0, MAX_MEMORY_MIB)
        if self.memory_mib == 0:
            _int_in("chunks_to_open (no memory challenge)", self.chunks_to_open, 0, 0)
        else:
            _int_in("chunks_to_open", self.chunks_to_open, 1,
                    min(MAX_CHUNKS_TO_OPEN, self.memory_mib))
        _int_in("issued_at", self.issued_at, 0, (1 << 63) - 1)

    @classmethod
    def random(cls, n: int = STANDARD_N, *, issued_at: int, **fields: Any) -> Challenge:
        """A challenge with a fresh seed from the OS's CSPRNG."""
        return cls(seed=os.urandom(32), n=n, issued_at=issued_at, **fields)

    @classmethod
    def standard(cls, seed: bytes, *, issued_at: int, memory_mib: int = 0,
                 chunks_to_open: int = 0) -> Challenge:
        return cls(seed=seed, n=STANDARD_N, rounds=STANDARD_ROUNDS, rows_to_open=STANDARD_ROWS,
                   memory_mib=memory_mib, chunks_to_open=chunks_to_open, issued_at=issued_at)

    def encode(self) -> bytes:
        """Canonical bytes: ``CHALLENGE_DOMAIN`` then seed(32) n:u32 rounds:u16 dtype:u8
        rows_to_open:u16 memory_mib:u32 chunks_to_open:u16 issued_at:i64, little-endian."""
        return CHALLENGE_DOMAIN + _HEADER.pack(
            self.seed, self.n, self.rounds, DTYPES[self.dtype], self.rows_to_open,
            self.memory_mib, self.chunks_to_open, self.issued_at)

    @classmethod
    def decode(cls, data: bytes) -> Challenge:
        """The inverse of ``encode``; anything else (length, prefix, a field out of range,
        an unknown dtype) raises ``ChallengeError``."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ChallengeError("a challenge is bytes")
        data = bytes(data)
        if len(data) != ENCODED_LEN:
            raise ChallengeError(f"a challenge is {ENCODED_LEN} bytes, got {len(data)}")
        if not data.startswith(CHALLENGE_DOMAIN):
            raise ChallengeError("not a gpu-market challenge (wrong prefix or version)")
        seed, n, rounds, code, rows, mem, chunks, issued = _HEADER.unpack(
            data[len(CHALLENGE_DOMAIN):])
        names = [k for k, v in DTYPES.items() if v == code]
        if not names:
            raise ChallengeError(f"unknown dtype code {code}")
        return cls(seed=seed, n=n, rounds=rounds, dtype=names[0], rows_to_open=rows,
                   memory_mib=mem, chunks_to_open=chunks, issued_at=issued)

    @property
    def challenge_id(self) -> bytes:
        """sha256 of the canonical bytes: what answers and verdicts refer to."""
        return hashlib.sha256(self.encode()).digest()

    @property
    def key(self) -> int:
        """The generator key (u64) derived from the seed."""
        return int.from_bytes(hashlib.sha256(KEY_DOMAIN + self.seed).digest()[:8], "little")

    @property
    def flop(self) -> int:
        """Floating-point operations of the matmul part: ``rounds * 2 n^3``."""
        return self.rounds * 2 * self.n ** 3

    @property
    def result_bytes(self) -> int:
        return self.n * self.n * 4


def _int_in(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ChallengeError(f"{name} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise ChallengeError(f"{name} must be in {lo}..{hi}, got {value}")


# ------------------------------------------------------------------------------ generator


def splitmix_word(key: int, stream: int, hi: int, lo: int) -> int:
    """The generator's word for one counter, in plain Python (the reference the vectorised
    and GPU versions are tested against)."""
    z = (key + ((stream << 56) | (hi << 32) | lo)) & _M64
    z = ((z ^ (z >> 30)) * SPLITMIX_C1) & _M64
    z = ((z ^ (z >> 27)) * SPLITMIX_C2) & _M64
    return z ^ (z >> 31)


def word_to_value(word: int) -> int:
    """A word's matrix element, in [-8, 8]."""
    return (((word >> 32) * VALUE_LEVELS) >> 32) + VALUE_MIN


def next_value(x: int, r: int) -> int:
    """``g_r``: the element of ``A_r`` made from the element ``x`` of ``P_r``."""
    return (x + r) % VALUE_LEVELS + VALUE_MIN


def _words(key: int, stream: int, his: np.ndarray, width: int) -> np.ndarray:
    """uint64 words for counters ``(stream, hi, 0..width)`` for every ``hi`` in ``his``:
    shape (len(his), width). Array arithmetic wraps modulo 2^64 as the definition needs."""
    np = _np()
    u = np.uint64
    base = (u(stream) << u(56)) | (np.asarray(his, dtype=np.uint64) << u(32))
    z = base[:, None] + (np.arange(width, dtype=np.uint64) + u(key))[None, :]
    z ^= z >> u(30)
    z *= u(SPLITMIX_C1)
    z ^= z >> u(27)
    z *= u(SPLITMIX_C2)
    z ^= z >> u(31)
    return z


def _values(words: np.ndarray) -> np.ndarray:
    np = _np()
    u = np.uint64
    words >>= u(32)
    words *= u(VALUE_LEVELS)
    words >>= u(32)
    return words.astype(np.int8) + np.int8(VALUE_MIN)


_BLOCK_ELEMENTS = 1 << 22  # ~32 MiB of uint64 temporaries per block


def matrix_rows(challenge: Challenge, stream: int, rows: Iterable[int]) -> np.ndarray:
    """Rows ``rows`` of matrix ``stream`` (``STREAM_A`` or ``STREAM_B``) as int8, shape
    (len(rows), n); generated in blocks, so memory stays near the output's size."""
    np = _np()
    idx = np.asarray(list(rows), dtype=np.int64)
    n = challenge.n
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ChallengeError(f"row index out of range 0..{n - 1}")
    out = np.empty((idx.size, n), dtype=np.int8)
    step = max(1, _BLOCK_ELEMENTS // n)
    key = challenge.key
    for s in range(0, idx.size, step):
        out[s:s + step] = _values(_words(key, stream, idx[s:s + step], n))
    return out


def matrix(challenge: Challenge, stream: int) -> np.ndarray:
    """The whole n x n matrix ``stream`` as int8."""
    return matrix_rows(challenge, stream, range(challenge.n))


def memory_chunks(challenge: Challenge, first: int, count: int) -> np.ndarray:
    """Chunks ``first .. first+count`` as uint64 words, shape (count, CHUNK_WORDS)."""
    np = _np()
    if first < 0 or count < 0 or first + count > challenge.memory_mib:
        raise ChallengeError(f"chunk range {first}+{count} outside 0..{challenge.memory_mib}")
    out = np.empty((count, CHUNK_WORDS), dtype=np.dtype("<u8"))
    step = max(1, _BLOCK_ELEMENTS // CHUNK_WORDS)
    for s in range(0, count, step):
        his = np.arange(first + s, first + min(count, s + step), dtype=np.uint64)
        out[s:s + his.size] = _words(challenge.key, STREAM_MEMORY, his, CHUNK_WORDS)
    return out


def next_matrix(p: np.ndarray, r: int) -> np.ndarray:
    """``g_r`` over an integer-valued array (int or float), as int8."""
    np = _np()
    return (np.mod(p.astype(np.int64) + r, VALUE_LEVELS) + VALUE_MIN).astype(np.int8)


def expected_rows(challenge: Challenge, indices: Sequence[int]) -> np.ndarray:
    """Rows ``indices`` of the result ``C``, recomputed from the seed (int64, shape
    (len(indices), n)). Generates all of ``B`` once (n^2 words, kept as float32: 4 n^2
    bytes) and runs ``rounds`` products of the opened rows with it; float32 is exact here
    by the bound in the module docstring."""
    np = _np()
    b = matrix(challenge, STREAM_B).astype(np.float32)
    a = matrix_rows(challenge, STREAM_A, indices).astype(np.float32)
    p = a @ b
    for r in range(1, challenge.rounds):
        a = next_matrix(p, r).astype(np.float32)
        p = a @ b
    return p.astype(np.int64)


# ---------------------------------------------------------------------------- commitment


def exact_int32(result: np.ndarray, n: int) -> np.ndarray:
    """The n x n result as little-endian int32, refusing anything that is not an exact
    integer within the bound (which means the device's arithmetic was not exact)."""
    np = _np()
    if result.shape != (n, n):
        raise ChallengeError(f"result must be {n} x {n}, got {result.shape}")
    bound = VALUE_MAX * VALUE_MAX * n
    if result.dtype.kind == "f":
        if not np.all(np.isfinite(result)) or not np.array_equal(np.rint(result), result):
            raise ChallengeError("the result holds non-integers: the device's arithmetic was "
                                 "not exact (check that it accumulates in fp32)")
    elif result.dtype.kind not in "iu":
        raise ChallengeError(f"the result must be numbers, got {result.dtype}")
    if result.size and float(np.abs(result).max()) > bound:
        raise ChallengeError(f"the result exceeds the bound {bound}: it is not this product")
    return np.ascontiguousarray(result.astype("<i4"))


def row_leaf(index: int, row: bytes | np.ndarray) -> bytes:
    data = row if isinstance(row, (bytes, bytearray, memoryview)) else row.astype("<i4")
    h = hashlib.sha256(ROW_LEAF_DOMAIN)
    h.update(struct.pack("<I", index))
    h.update(data)
    return h.digest()


def chunk_leaf(index: int, chunk: bytes | np.ndarray) -> bytes:
    h = hashlib.sha256(CHUNK_LEAF_DOMAIN)
    h.update(struct.pack("<I", index))
    h.update(chunk)
    return h.digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(NODE_DOMAIN + left + right).digest()


@dataclass(frozen=True)
class MerkleTree:
    """All levels, leaves first; ``root`` is the single node of the last level."""

    levels: tuple[tuple[bytes, ...], ...]

    @classmethod
    def build(cls, leaves: Sequence[bytes]) -> MerkleTree:
        if not leaves:
            raise ChallengeError("a Merkle tree needs at least one leaf")
        levels = [tuple(leaves)]
        while len(levels[-1]) > 1:
            cur = levels[-1]
            nxt = [_node(cur[i], cur[i + 1]) for i in range(0, len(cur) - 1, 2)]
            if len(cur) % 2:
                nxt.append(cur[-1])  # the lone last node moves up unchanged
            levels.append(tuple(nxt))
        return cls(tuple(levels))

    @property
    def root(self) -> bytes:
        return self.levels[-1][0]

    @property
    def count(self) -> int:
        return len(self.levels[0])

    def proof(self, index: int) -> tuple[bytes, ...]:
        if not 0 <= index < self.count:
            raise ChallengeError(f"leaf index {index} outside 0..{self.count - 1}")
        out = []
        for level in self.levels[:-1]:
            sibling = index ^ 1
            if sibling < len(level):
                out.append(level[sibling])
            index //= 2
        return tuple(out)


def root_from_proof(leaf: bytes, index: int, count: int, proof: Sequence[bytes]) -> bytes:
    """The root that ``leaf`` at ``index`` of ``count`` leaves and ``proof`` lead to; a proof
    with too few or too many hashes raises ``VerificationFailed('bad_proof')``."""
    if not 0 <= index < count:
        raise VerificationFailed("bad_proof", f"leaf index {index} outside 0..{count - 1}")
    h, width, used = leaf, count, 0
    while width > 1:
        if index ^ 1 < width:
            if used == len(proof):
                raise VerificationFailed("bad_proof", "the Merkle proof is too short")
            sibling = proof[used]
            used += 1
            h = _node(sibling, h) if index & 1 else _node(h, sibling)
        index //= 2
        width = (width + 1) // 2
    if used != len(proof):
        raise VerificationFailed("bad_proof", "the Merkle proof is too long")
    return h


def commit_rows(result_i32: np.ndarray, *, threads: int | None = None) -> MerkleTree:
    """The row tree of an int32 result (``exact_int32``); rows hashed on ``threads`` threads
    (hashlib releases the GIL on large buffers)."""
    rows = result_i32.shape[0]
    with ThreadPoolExecutor(max_workers=threads or min(16, os.cpu_count() or 1)) as pool:
        leaves = list(pool.map(lambda i: row_leaf(i, result_i32[i].data), range(rows)))
    return MerkleTree.build(leaves)


def pick_indices(kind: bytes, challenge: Challenge, root: bytes, nonce: bytes, count: int,
                 population: int) -> tuple[int, ...]:
    """``count`` distinct indices in ``0..population``, derived from the committed ``root``
    and the verifier's fresh 32-byte ``nonce`` (sha256 in counter mode, rejection sampling,
    so uniform). Anyone holding the challenge, root and nonce can recompute them."""
    if len(root) != 32 or len(nonce) != 32:
        raise ChallengeError("root and nonce must be 32 bytes")
    if not 0 <= count <= population:
        raise ChallengeError(f"cannot pick {count} of {population}")
    limit = (1 << 64) - (1 << 64) % population if population else 0
    prefix = PICK_DOMAIN + kind + challenge.challenge_id + root + nonce
    chosen: list[int] = []
    seen: set[int] = set()
    counter = 0
    while len(chosen) < count:
        block = hashlib.sha256(prefix + struct.pack("<I", counter)).digest()
        counter += 1
        for off in range(0, 32, 8):
            x = int.from_bytes(block[off:off + 8], "little")
            if x >= limit or (x % population) in seen:
                continue
            seen.add(x % population)
            chosen.append(x % population)
            if len(chosen) == count:
                break
    return tuple(chosen)


def rows_to_check(challenge: Challenge, root: bytes, nonce: bytes) -> tuple[int, ...]:
    return pick_indices(b"rows", challenge, root, nonce, challenge.rows_to_open, challenge.n)


def chunks_to_check(challenge: Challenge, memory_root: bytes, nonce: bytes) -> tuple[int, ...]:
    return pick_indices(b"chunks", challenge, memory_root, nonce, challenge.chunks_to_open,
                        challenge.memory_mib)


# ------------------------------------------------------------------------------- openings


@dataclass(frozen=True)
class RowOpening:
    """Row ``index`` of the result as int32 little-endian bytes, with its Merkle proof."""

    index: int
    row: bytes
    proof: tuple[bytes, ...]


@dataclass(frozen=True)
class ChunkOpening:
    """The digest (leaf) of memory chunk ``index``, with its Merkle proof."""

    index: int
    digest: bytes
    proof: tuple[bytes, ...]


def open_rows(result: np.ndarray | MerkleTree, indices: Iterable[int], *,
              rows: np.ndarray | None = None) -> list[RowOpening]:
    """Openings of ``indices``: from an int32 result (its tree is built here), or from a
    tree built before together with ``rows`` (the same int32 result)."""
    if isinstance(result, MerkleTree):
        tree = result
        if rows is None:
            raise ChallengeError("open_rows with a tree needs rows=")
    else:
        rows, tree = result, commit_rows(result)
    return [RowOpening(int(i), rows[int(i)].astype("<i4").tobytes(), tree.proof(int(i)))
            for i in indices]


def _check_rows_wire(challenge: Challenge, openings: Sequence[RowOpening]) -> None:
    for o in openings:
        if len(o.row) != challenge.n * 4:
            raise ChallengeError(f"row {o.index} is {len(o.row)} bytes, want {challenge.n * 4}")
        if any(len(p) != 32 for p in o.proof):
            raise ChallengeError(f"row {o.index}: proof hashes must be 32 bytes")


def verify_rows(challenge: Challenge, root: bytes, openings: Sequence[RowOpening]) -> None:
    """Check every opening: its Merkle path leads to ``root`` and its values are row
    ``index`` of the result recomputed from the seed. Raises ``VerificationFailed``
    (``bad_proof`` / ``wrong_row``) for the first failure; Merkle paths are all checked
    before the (costlier) recomputation."""
    np = _np()
    _check_rows_wire(challenge, openings)
    for o in openings:
        got = root_from_proof(row_leaf(o.index, o.row), o.index, challenge.n, o.proof)
        if not hmac.compare_digest(got, root):
            raise VerificationFailed("bad_proof", f"row {o.index}: the Merkle path does not "
                                                  "lead to the committed root")
    if not openings:
        return
    want = expected_rows(challenge, [o.index for o in openings])
    for o, w in zip(openings, want):
        got = np.frombuffer(o.row, dtype="<i4")
        if not np.array_equal(got, w):
            bad = int(np.flatnonzero(got != w)[0])
            raise VerificationFailed("wrong_row", f"row {o.index} differs from the seed's "
                                     f"product at column {bad}: {int(got[bad])} != {int(w[bad])}")


def verify_row(challenge: Challenge, root: bytes, index: int, row: bytes,
               proof: Sequence[bytes]) -> None:
    """One opening; see ``verify_rows`` (which shares the costly ``B`` among rows)."""
    verify_rows(challenge, root, [RowOpening(index, row, tuple(proof))])


def verify_chunks(challenge: Challenge, memory_root: bytes,
                  openings: Sequence[ChunkOpening]) -> None:
    """Each chunk digest is the seed's chunk (``wrong_chunk``) and its path leads to the
    memory root (``bad_proof``)."""
    for o in openings:
        if len(o.digest) != 32 or any(len(p) != 32 for p in o.proof):
            raise ChallengeError(f"chunk {o.index}: digest and proof hashes must be 32 bytes")
        got = root_from_proof(o.digest, o.index, challenge.memory_mib, o.proof)
        if not hmac.compare_digest(got, memory_root):
            raise VerificationFailed("bad_proof", f"chunk {o.index}: the Merkle path does not "
                                                  "lead to the committed memory root")
        want = chunk_leaf(o.index, memory_chunks(challenge, o.index, 1)[0].data)
        if not hmac.compare_digest(want, o.digest):
            raise VerificationFailed("wrong_chunk", f"chunk {o.index}: the digest is not the "
                                                    "seed's chunk")


# ---------------------------------------------------------------------------- wire types


@dataclass(frozen=True)
class ComputeTimings:
    """Seconds the worker reports (its word, not evidence): generating A and B on the
    device, the ``rounds`` products, copying the result to the host, hashing it."""

    generate_s: float
    matmul_s: float
    transfer_s: float
    commit_s: float


@dataclass(frozen=True)
class MemoryCommitment:
    root: bytes
    fill_s: float
    commit_s: float


@dataclass(frozen=True)
class Answer:
    """The worker's first reply: the roots, before any row is named."""

    challenge_id: bytes
    gpu_index: int
    device: str
    root: bytes
    timings: ComputeTimings
    memory: MemoryCommitment | None = None

    def to_dict(self) -> dict[str, Any]:
        m = self.memory
        return {"challenge_id": self.challenge_id.hex(), "gpu_index": self.gpu_index,
                "device": self.device, "root": self.root.hex(),
                "timings": vars(self.timings).copy(),
                "memory": None if m is None else {"root": m.root.hex(), "fill_s": m.fill_s,
                                                  "commit_s": m.commit_s}}

    @classmethod
    def from_dict(cls, d: Any) -> Answer:
        d = _mapping(d, "answer")
        t = _mapping(d.get("timings"), "timings")
        m = d.get("memory")
        memory = None
        if m is not None:
            m = _mapping(m, "memory")
            memory = MemoryCommitment(_hex32(m.get("root"), "memory.root"),
                                      _seconds(m.get("fill_s"), "memory.fill_s"),
                                      _seconds(m.get("commit_s"), "memory.commit_s"))
        device = d.get("device")
        if not isinstance(device, str) or len(device) > 256:
            raise ChallengeError("device must be a string of at most 256 characters")
        gpu = d.get("gpu_index")
        _int_in("gpu_index", gpu, 0, 255)
        timings = ComputeTimings(*(_seconds(t.get(k), f"timings.{k}")
                                   for k in ("generate_s", "matmul_s", "transfer_s", "commit_s")))
        return cls(_hex32(d.get("challenge_id"), "challenge_id"), gpu, device,
                   _hex32(d.get("root"), "root"), timings, memory)


@dataclass(frozen=True)
class Openings:
    """The worker's second reply, for one nonce. ``memory_answer_s``: the worker's reported
    seconds to read and hash the named chunks."""

    rows: tuple[RowOpening, ...]
    chunks: tuple[ChunkOpening, ...] = ()
    memory_answer_s: float | None = None
    nonce: bytes = field(default=b"")

    def to_dict(self) -> dict[str, Any]:
        return {"nonce": self.nonce.hex(),
                "rows": [{"index": o.index, "row": base64.b64encode(o.row).decode(),
                          "proof": [p.hex() for p in o.proof]} for o in self.rows],
                "chunks": [{"index": o.index, "digest": o.digest.hex(),
                            "proof": [p.hex() for p in o.proof]} for o in self.chunks],
                "memory_answer_s": self.memory_answer_s}

    @classmethod
    def from_dict(cls, d: Any, challenge: Challenge) -> Openings:
        """Strict: sizes are checked against ``challenge`` before anything is decoded."""
        d = _mapping(d, "openings")
        rows_in, chunks_in = d.get("rows"), d.get("chunks")
        if not isinstance(rows_in, list) or len(rows_in) > challenge.rows_to_open:
            raise ChallengeError(f"rows must be a list of at most {challenge.rows_to_open}")
        if not isinstance(chunks_in, list) or len(chunks_in) > challenge.chunks_to_open:
            raise ChallengeError(f"chunks must be a list of at most {challenge.chunks_to_open}")
        rows = []
        for r in rows_in:
            r = _mapping(r, "row opening")
            _int_in("row index", r.get("index"), 0, challenge.n - 1)
            text = r.get("row")
            if not isinstance(text, str) or len(text) > 4 * (challenge.n * 4 + 2) // 3 + 4:
                raise ChallengeError("row must be base64 of n int32 values")
            try:
                raw = base64.b64decode(text, validate=True)
            except ValueError as e:
                raise ChallengeError(f"row is not base64: {e}") from None
            rows.append(RowOpening(r["index"], raw, _proof(r.get("proof"), challenge.n)))
        chunks = []
        for c in chunks_in:
            c = _mapping(c, "chunk opening")
            _int_in("chunk index", c.get("index"), 0, challenge.memory_mib - 1)
            chunks.append(ChunkOpening(c["index"], _hex32(c.get("digest"), "digest"),
                                       _proof(c.get("proof"), challenge.memory_mib)))
        t = d.get("memory_answer_s")
        nonce = _hex32(d.get("nonce"), "nonce")
        openings = cls(tuple(rows), tuple(chunks),
                       None if t is None else _seconds(t, "memory_answer_s"), nonce)
        _check_rows_wire(challenge, openings.rows)
        return openings


def _mapping(d: Any, what: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise ChallengeError(f"{what} must be an object")
    return d


def _hex32(v: Any, what: str) -> bytes:
    if not isinstance(v, str) or len(v) != 64:
        raise ChallengeError(f"{what} must be 64 hex digits")
    try:
        return bytes.fromhex(v)
    except ValueError:
        raise ChallengeError(f"{what} must be 64 hex digits") from None


def _seconds(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e6:
        raise ChallengeError(f"{what} must be seconds in [0, 1e6), got {v!r}")
    return float(v)


def _proof(v: Any, leaves: int) -> tuple[bytes, ...]:
    if not isinstance(v, list) or len(v) > max(1, leaves).bit_length():
        raise ChallengeError("proof must be a list of at most log2(leaves)+1 hashes")
    return tuple(_hex32(p, "proof hash") for p in v)
