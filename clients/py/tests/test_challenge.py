"""Hardware challenge protocol (gpu_market.challenge): generator, exactness, encoding,
Merkle commitment, openings and their verification, with real sha256 and real products."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gpu_market import challenge as C
from gpu_market.challenge import (
    Answer,
    Challenge,
    ChallengeError,
    ChunkOpening,
    ComputeTimings,
    MemoryCommitment,
    MerkleTree,
    Openings,
    RowOpening,
    VerificationFailed,
)
from hypothesis import given, settings
from hypothesis import strategies as st

SEED = bytes(32)
GOLDEN = Challenge(seed=SEED, n=256, rounds=2, rows_to_open=4, memory_mib=3, chunks_to_open=2,
                   issued_at=1_700_000_000)


def small(n: int = 256, rounds: int = 1, seed: bytes = SEED, **kw) -> Challenge:
    return Challenge(seed=seed, n=n, rounds=rounds, rows_to_open=kw.pop("rows_to_open", 4),
                     issued_at=1, **kw)


def reference_result(ch: Challenge) -> np.ndarray:
    """C by the definition, with exact int64 arithmetic (numpy's integer matmul, no BLAS)
    and the element-wise g_r in plain Python."""
    a = C.matrix(ch, C.STREAM_A).astype(np.int64)
    b = C.matrix(ch, C.STREAM_B).astype(np.int64)
    p = a @ b
    for r in range(1, ch.rounds):
        a = np.vectorize(lambda x, r=r: C.next_value(int(x), r))(p).astype(np.int64)
        p = a @ b
    return p


# ----------------------------------------------------------------------------- generator


def test_golden_vector_pins_the_protocol():
    """Encoding, key, elements and roots of one challenge: any change here is a protocol
    change (GPU kernels and validators must change with it)."""
    assert GOLDEN.encode().hex() == (
        "6770752d6d61726b65742f6368616c6c656e67652f7631" + "00" * 32
        + "00010000" + "0200" + "01" + "0400" + "03000000" + "0200" + "00f1536500000000")
    assert GOLDEN.challenge_id.hex() == (
        "392a80f5d818ca851be8394235ccab4212aa87ed12bd7035658be8336c11c299")
    assert GOLDEN.key == 0x973075BFB2510C09
    assert list(C.matrix_rows(GOLDEN, C.STREAM_A, [0])[0][:8]) == [5, 0, -1, -4, -3, 1, -5, 2]
    assert list(C.matrix_rows(GOLDEN, C.STREAM_B, [255])[0][-8:]) == [-4, 5, 5, 6, 8, 3, 7, -3]
    rows = C.exact_int32(reference_result(GOLDEN), GOLDEN.n)
    root = C.commit_rows(rows).root
    assert root.hex() == "bb374b2d2054a4ead9f2d7a77aa78b842e004db399f81bf9fd358b0a7a256bdb"
    chunks = C.memory_chunks(GOLDEN, 0, 3)
    mem_root = MerkleTree.build([C.chunk_leaf(i, chunks[i].data) for i in range(3)]).root
    assert mem_root.hex() == "d86a60e322b6f522b5c045117ef07a84f57660f0f44d210c9de84ce9bee4a31c"
    assert C.rows_to_check(GOLDEN, root, bytes(32)) == (14, 150, 16, 131)
    assert C.chunks_to_check(GOLDEN, mem_root, bytes(32)) == (2, 1)


@settings(max_examples=40, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), rows=st.lists(
    st.integers(0, C.MAX_N - 1), min_size=1, max_size=4), cols=st.lists(
    st.integers(0, C.MAX_N - 1), min_size=1, max_size=4))
def test_vectorised_generator_equals_the_plain_python_definition(seed, rows, cols):
    ch = Challenge(seed=seed, n=C.MAX_N, issued_at=0)
    for stream in (C.STREAM_A, C.STREAM_B):
        block = C.matrix_rows(ch, stream, rows)
        for r, i in enumerate(rows):
            for j in cols:
                word = C.splitmix_word(ch.key, stream, i, j)
                assert block[r, j] == C.word_to_value(word)
    chunk = C.memory_chunks(Challenge(seed=seed, n=256, memory_mib=2, chunks_to_open=1,
                                      issued_at=0), 1, 1)[0]
    key = Challenge(seed=seed, n=256, issued_at=0).key
    for w in (0, 1, C.CHUNK_WORDS - 1):
        assert int(chunk[w]) == C.splitmix_word(key, C.STREAM_MEMORY, 1, w)


def test_values_cover_minus_8_to_8_about_uniformly_and_streams_differ():
    ch = small(512)
    a, b = C.matrix(ch, C.STREAM_A), C.matrix(ch, C.STREAM_B)
    assert a.dtype == np.int8 and a.min() == -8 and a.max() == 8
    counts = np.bincount((a.astype(np.int64) + 8).ravel(), minlength=17)
    expect = a.size / 17
    assert np.all(np.abs(counts - expect) < 0.05 * expect)
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, C.matrix(small(512, seed=b"\x01" * 32), C.STREAM_A))


def test_row_index_out_of_range_is_refused():
    with pytest.raises(ChallengeError, match="row index"):
        C.matrix_rows(small(), C.STREAM_A, [256])
    with pytest.raises(ChallengeError, match="chunk range"):
        C.memory_chunks(small(memory_mib=2, chunks_to_open=1), 1, 2)


# ---------------------------------------------------------------------------- exactness


def test_exactness_bound_covers_every_allowed_n():
    assert C.VALUE_MAX * C.VALUE_MAX * C.MAX_N <= C.EXACT_LIMIT
    assert C.MAX_EXACT_N == 2**18 and C.MAX_N <= C.MAX_EXACT_N


def test_fp32_accumulation_is_exact_at_the_worst_case_and_not_beyond_the_bound():
    """Sequential fp32 sums of the largest products (64) stay exact up to 2^24 (every
    partial sum at n = MAX_N included); past the bound an odd addend is lost."""
    worst = np.cumsum(np.full(C.MAX_N, 64, dtype=np.float32), dtype=np.float32)
    assert np.array_equal(worst, np.arange(1, C.MAX_N + 1, dtype=np.int64) * 64)
    products = np.random.default_rng(7).integers(-8, 9, (2, C.MAX_N)).prod(axis=0)
    assert np.array_equal(np.cumsum(products.astype(np.float32), dtype=np.float32),
                          np.cumsum(products))
    beyond = np.float32(C.EXACT_LIMIT) + np.float32(1)
    assert int(beyond) != C.EXACT_LIMIT + 1  # why the bound exists


@settings(max_examples=25, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), k=st.sampled_from([256, 1024, 4096]))
def test_float32_blas_products_of_generated_values_equal_int64(seed, k):
    ch = Challenge(seed=seed, n=4096, issued_at=0)
    a = C.matrix_rows(ch, C.STREAM_A, [0, 1, 2])[:, :k]
    b = C.matrix_rows(ch, C.STREAM_B, range(k))[:, :512]
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal((a.astype(np.float32) @ b.astype(np.float32)).astype(np.int64), exact)


@pytest.mark.parametrize("n,rounds", [(256, 1), (256, 3), (512, 2)])
def test_expected_rows_equal_the_independent_computation(n, rounds):
    ch = small(n, rounds)
    ref = reference_result(ch)
    idx = [0, 5, n - 1]
    assert np.array_equal(C.expected_rows(ch, idx), ref[idx])


def test_exact_int32_refuses_non_integers_and_values_past_the_bound():
    good = np.zeros((256, 256), dtype=np.float32)
    assert C.exact_int32(good, 256).dtype == np.dtype("<i4")
    bad = good.copy()
    bad[3, 4] = 0.5
    with pytest.raises(ChallengeError, match="not exact"):
        C.exact_int32(bad, 256)
    bad[3, 4] = np.nan
    with pytest.raises(ChallengeError, match="not exact"):
        C.exact_int32(bad, 256)
    big = good.copy()
    big[0, 0] = 64 * 256 + 1
    with pytest.raises(ChallengeError, match="bound"):
        C.exact_int32(big, 256)
    with pytest.raises(ChallengeError, match="256 x 256"):
        C.exact_int32(np.zeros((256, 255), np.float32), 256)


# ----------------------------------------------------------------------------- encoding


@settings(max_examples=60, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), steps=st.integers(1, 64),
       rounds=st.integers(1, C.MAX_ROUNDS), rows=st.integers(1, C.MAX_ROWS_TO_OPEN),
       mem=st.integers(0, C.MAX_MEMORY_MIB), chunks=st.integers(1, C.MAX_CHUNKS_TO_OPEN),
       issued=st.integers(0, 2**63 - 1))
def test_encoding_round_trips(seed, steps, rounds, rows, mem, chunks, issued):
    ch = Challenge(seed=seed, n=256 * steps, rounds=rounds, rows_to_open=rows, memory_mib=mem,
                   chunks_to_open=min(chunks, mem), issued_at=issued)
    data = ch.encode()
    assert len(data) == C.ENCODED_LEN
    assert Challenge.decode(data) == ch
    assert Challenge.decode(bytearray(data)) == ch


def _patched(field_offset: int, fmt: str, value: int) -> bytes:
    data = bytearray(GOLDEN.encode())
    struct.pack_into(fmt, data, len(C.CHALLENGE_DOMAIN) + field_offset, value)
    return bytes(data)


@pytest.mark.parametrize("data,match", [
    (GOLDEN.encode()[:-1], "78 bytes"),
    (GOLDEN.encode() + b"\x00", "78 bytes"),
    (b"x" + GOLDEN.encode()[1:], "prefix"),
    (GOLDEN.encode().replace(b"/v1", b"/v2", 1), "prefix"),
    (_patched(32, "<I", 300), "multiple of 256"),
    (_patched(32, "<I", 0), "n must be in"),
    (_patched(32, "<I", 16384 + 256), "n must be in"),
    (_patched(36, "<H", 0), "rounds"),
    (_patched(36, "<H", C.MAX_ROUNDS + 1), "rounds"),
    (_patched(38, "<B", 0), "dtype code"),
    (_patched(38, "<B", 2), "dtype code"),
    (_patched(39, "<H", 0), "rows_to_open"),
    (_patched(39, "<H", C.MAX_ROWS_TO_OPEN + 1), "rows_to_open"),
    (_patched(41, "<I", 0), "no memory challenge"),
    (_patched(41, "<I", C.MAX_MEMORY_MIB + 1), "memory_mib"),
    (_patched(45, "<H", 4), "chunks_to_open"),
    (_patched(45, "<H", 0), "chunks_to_open"),
    (_patched(47, "<q", -1), "issued_at"),
])
def test_decode_rejects_bad_bytes(data, match):
    with pytest.raises(ChallengeError, match=match):
        Challenge.decode(data)


def test_decode_rejects_non_bytes_and_constructor_checks_types():
    with pytest.raises(ChallengeError, match="bytes"):
        Challenge.decode("00" * 80)  # type: ignore[arg-type]
    with pytest.raises(ChallengeError, match="seed"):
        Challenge(seed=b"short", n=256)
    with pytest.raises(ChallengeError, match="integer"):
        Challenge(seed=SEED, n=True)  # type: ignore[arg-type]
    with pytest.raises(ChallengeError, match="dtype"):
        Challenge(seed=SEED, n=256, dtype="fp8")


def test_random_and_standard_challenges():
    a, b = Challenge.random(512, issued_at=5), Challenge.random(512, issued_at=5)
    assert a.seed != b.seed and a.n == 512
    std = Challenge.standard(SEED, issued_at=0)
    assert (std.n, std.rounds, std.rows_to_open) == (8192, 64, 16)
    assert std.flop == 64 * 2 * 8192**3


# ------------------------------------------------------------------------------- Merkle


def _leaves(count: int) -> list[bytes]:
    return [hashlib.sha256(i.to_bytes(4, "little")).digest() for i in range(count)]


@pytest.mark.parametrize("count", list(range(1, 18)) + [31, 33, 100, 257])
def test_every_proof_verifies_for_any_tree_size(count):
    tree = MerkleTree.build(_leaves(count))
    for i in range(count):
        assert C.root_from_proof(tree.levels[0][i], i, count, tree.proof(i)) == tree.root


def test_odd_levels_move_the_last_node_up_unchanged():
    l0, l1, l2 = _leaves(3)
    assert MerkleTree.build([l0, l1, l2]).root == C._node(C._node(l0, l1), l2)
    assert MerkleTree.build([l0]).root == l0
    assert MerkleTree.build([l0, l1]).root != MerkleTree.build([l0, l1, l1]).root


def test_leaves_and_nodes_are_domain_separated():
    row = np.arange(4, dtype="<i4")
    assert C.row_leaf(0, row) != C.chunk_leaf(0, row.tobytes())
    assert C.row_leaf(0, row) == hashlib.sha256(
        C.ROW_LEAF_DOMAIN + b"\x00" * 4 + row.tobytes()).digest()
    l0, l1 = _leaves(2)
    assert C._node(l0, l1) != hashlib.sha256(l0 + l1).digest()


def test_bad_proofs_are_refused():
    tree = MerkleTree.build(_leaves(7))
    leaf, proof = tree.levels[0][4], tree.proof(4)
    for bad_length in (proof[:-1], proof + (b"\x00" * 32,)):
        with pytest.raises(VerificationFailed, match="too") as e:
            C.root_from_proof(leaf, 4, 7, bad_length)
        assert e.value.code == "bad_proof"
    assert C.root_from_proof(leaf, 4, 7, (b"\x00" * 32,) + proof[1:]) != tree.root
    assert C.root_from_proof(leaf, 5, 7, proof) != tree.root  # another index, another path
    with pytest.raises(VerificationFailed, match="outside"):
        C.root_from_proof(leaf, 7, 7, proof)
    with pytest.raises(ChallengeError):
        MerkleTree.build([])


# ---------------------------------------------------------------------------- openings


@pytest.fixture(scope="module")
def committed():
    ch = small(256, 2, rows_to_open=6)
    rows = C.exact_int32(reference_result(ch), ch.n)
    return ch, rows, C.commit_rows(rows)


def test_roots_are_stable_and_depend_on_every_value(committed):
    _, rows, tree = committed
    assert C.commit_rows(rows.copy(), threads=1).root == tree.root
    changed = rows.copy()
    changed[200, 17] += 1
    assert C.commit_rows(changed).root != tree.root


def test_honest_openings_verify(committed):
    ch, rows, tree = committed
    idx = C.rows_to_check(ch, tree.root, os.urandom(32))
    C.verify_rows(ch, tree.root, C.open_rows(tree, idx, rows=rows))
    o = C.open_rows(rows, [0])[0]
    C.verify_row(ch, tree.root, o.index, o.row, o.proof)


def test_a_made_up_root_fails(committed):
    ch, rows, tree = committed
    o = C.open_rows(tree, [3], rows=rows)[0]
    with pytest.raises(VerificationFailed) as e:
        C.verify_row(ch, os.urandom(32), o.index, o.row, o.proof)
    assert e.value.code == "bad_proof"


def test_a_tampered_row_fails_the_merkle_check(committed):
    ch, rows, tree = committed
    o = C.open_rows(tree, [3], rows=rows)[0]
    values = np.frombuffer(o.row, dtype="<i4").copy()
    values[0] += 1
    with pytest.raises(VerificationFailed) as e:
        C.verify_row(ch, tree.root, 3, values.tobytes(), o.proof)
    assert e.value.code == "bad_proof"


def test_a_wrong_row_under_a_forged_commitment_fails_the_recomputation(committed):
    ch, rows, _ = committed
    forged = rows.copy()
    forged[3, 100] += 64
    tree = C.commit_rows(forged)
    o = C.open_rows(tree, [3], rows=forged)[0]
    with pytest.raises(VerificationFailed, match="column 100") as e:
        C.verify_row(ch, tree.root, o.index, o.row, o.proof)
    assert e.value.code == "wrong_row"
    C.verify_row(ch, tree.root, 4, forged[4].tobytes(), tree.proof(4))  # the others are fine


def test_a_row_presented_under_another_index_fails(committed):
    ch, rows, tree = committed
    o = C.open_rows(tree, [3], rows=rows)[0]
    with pytest.raises(VerificationFailed) as e:
        C.verify_row(ch, tree.root, 4, o.row, o.proof)
    assert e.value.code == "bad_proof"
    swapped = rows.copy()  # a commitment that puts row 3's values at index 4
    swapped[4] = rows[3]
    tree2 = C.commit_rows(swapped)
    with pytest.raises(VerificationFailed) as e:
        C.verify_row(ch, tree2.root, 4, swapped[4].tobytes(), tree2.proof(4))
    assert e.value.code == "wrong_row"


def test_a_row_of_the_wrong_length_is_malformed(committed):
    ch, rows, tree = committed
    with pytest.raises(ChallengeError, match="1020 bytes"):
        C.verify_row(ch, tree.root, 0, rows[0].tobytes()[:-4], tree.proof(0))


def test_picked_indices_are_distinct_in_range_and_bound_to_root_and_nonce():
    ch = small(256, rows_to_open=64)
    root, nonce = os.urandom(32), os.urandom(32)
    idx = C.rows_to_check(ch, root, nonce)
    assert len(set(idx)) == 64 and all(0 <= i < 256 for i in idx)
    assert C.rows_to_check(ch, root, nonce) == idx
    assert C.rows_to_check(ch, os.urandom(32), nonce) != idx
    assert C.rows_to_check(ch, root, os.urandom(32)) != idx
    assert sorted(C.pick_indices(b"rows", ch, root, nonce, 5, 5)) == [0, 1, 2, 3, 4]
    with pytest.raises(ChallengeError):
        C.pick_indices(b"rows", ch, root, nonce, 6, 5)
    with pytest.raises(ChallengeError):
        C.rows_to_check(ch, root, b"short")


def test_memory_chunks_verify_and_wrong_ones_fail():
    ch = small(memory_mib=5, chunks_to_open=2)
    data = C.memory_chunks(ch, 0, 5)
    leaves = [C.chunk_leaf(i, data[i].data) for i in range(5)]
    tree = MerkleTree.build(leaves)
    C.verify_chunks(ch, tree.root, [ChunkOpening(i, leaves[i], tree.proof(i)) for i in (0, 4)])
    forged_leaves = list(leaves)
    forged_leaves[2] = C.chunk_leaf(2, data[3].data)  # chunk 3's bytes at index 2
    forged = MerkleTree.build(forged_leaves)
    with pytest.raises(VerificationFailed) as e:
        C.verify_chunks(ch, forged.root, [ChunkOpening(2, forged_leaves[2], forged.proof(2))])
    assert e.value.code == "wrong_chunk"
    with pytest.raises(VerificationFailed) as e:
        C.verify_chunks(ch, tree.root, [ChunkOpening(1, leaves[2], tree.proof(1))])
    assert e.value.code == "bad_proof"


# ---------------------------------------------------------------------------- wire types


def _answer(ch: Challenge) -> Answer:
    return Answer(ch.challenge_id, 1, "NVIDIA H100 80GB HBM3", os.urandom(32),
                  ComputeTimings(0.1, 0.2, 0.3, 0.4), MemoryCommitment(os.urandom(32), 1.0, 2.0))


def test_answer_and_openings_round_trip(committed):
    ch, rows, tree = committed
    a = _answer(ch)
    assert Answer.from_dict(a.to_dict()) == a
    assert Answer.from_dict(dataclasses.replace(a, memory=None).to_dict()).memory is None
    op = Openings(tuple(C.open_rows(tree, [1, 2], rows=rows)), (), None, os.urandom(32))
    assert Openings.from_dict(op.to_dict(), ch) == op


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(root="zz" * 32), "root"),
    (lambda d: d.update(root="00" * 31), "root"),
    (lambda d: d["timings"].update(matmul_s=-1), "matmul_s"),
    (lambda d: d["timings"].update(matmul_s=True), "matmul_s"),
    (lambda d: d.update(gpu_index=256), "gpu_index"),
    (lambda d: d.update(device=None), "device"),
    (lambda d: d.update(timings=[]), "timings"),
    (lambda d: d["memory"].update(root=1), "memory.root"),
])
def test_answer_from_dict_is_strict(mutate, match):
    d = _answer(small()).to_dict()
    mutate(d)
    with pytest.raises(ChallengeError, match=match):
        Answer.from_dict(d)


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d["rows"].extend(d["rows"] * 6), "at most 6"),
    (lambda d: d["rows"][0].update(row="!!!"), "base64"),
    (lambda d: d["rows"][0].update(row="AAAA"), "bytes, want 1024"),
    (lambda d: d["rows"][0].update(index=256), "row index"),
    (lambda d: d["rows"][0].update(proof=["00" * 32] * 10), "proof"),
    (lambda d: d.update(chunks=[{"index": 0, "digest": "00" * 32, "proof": []}]), "chunks"),
    (lambda d: d.update(nonce="x"), "nonce"),
    (lambda d: d.update(memory_answer_s="1"), "memory_answer_s"),
])
def test_openings_from_dict_is_strict(committed, mutate, match):
    ch, rows, tree = committed
    d = Openings(tuple(C.open_rows(tree, [1], rows=rows)), (), None, bytes(32)).to_dict()
    mutate(d)
    with pytest.raises(ChallengeError, match=match):
        Openings.from_dict(d, ch)


def test_row_opening_is_plain_data():
    o = RowOpening(1, b"\x00" * 4, ())
    assert dataclasses.asdict(o) == {"index": 1, "row": b"\x00" * 4, "proof": ()}


def test_the_protocol_imports_without_numpy():
    """The SDK (CLI, client) imports challenge without numpy; numpy loads on first use."""
    code = ("import sys; sys.modules['numpy'] = None\n"
            "from gpu_market.challenge import Challenge\n"
            "ch = Challenge(seed=bytes(32), n=256)\n"
            "assert Challenge.decode(ch.encode()) == ch\n"
            "import gpu_market.challenge_verdict\n"
            "print('ok')\n")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
