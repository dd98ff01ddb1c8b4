"""Window proof: borsh layout, round trips, rejection of non-canonical bytes, signing."""

from __future__ import annotations

import dataclasses
import hashlib
import struct

import pytest
from gpu_market.proof import (
    MAX_GPUS,
    MAX_PROOF_BYTES,
    MAX_UUID_BYTES,
    PROOF_VERSION,
    WORKLOAD_EXITED,
    WORKLOAD_FAILED,
    WORKLOAD_NONE,
    WORKLOAD_RUNNING,
    ZERO_HASH,
    CheckpointRecord,
    GpuWindow,
    ProofDecodeError,
    ProofEncodeError,
    WindowProof,
    WorkloadWindow,
    decode_proof,
    encode_proof,
    process_list_hash,
    proof_hash,
    receipt_for_proof,
    sign_proof,
    verify_proof,
)
from gpu_market.receipt import (
    PROOF_DOMAIN,
    private_key_from_seed,
    public_key_bytes,
    receipt_message,
    verify,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def _gpu(uuid: str = "GPU-0", **kw) -> GpuWindow:
    base = {"uuid": uuid, "samples": 60, "covered_seconds": 60, "util_gpu_avg_bp": 9_150,
                "util_gpu_max_bp": 10_000, "util_mem_avg_bp": 4_000, "mem_used_max_mib": 70_000,
                "mem_total_mib": 81_559, "temp_max_c": 71, "power_avg_mw": 612_000, "fan_max_pct": None,
                "ecc_uncorrected_delta": 0, "health_flags": 0}
    base.update(kw)
    return GpuWindow(**base)


def _proof(**kw) -> WindowProof:
    base = {"program_id": b"\x01" * 32, "market": b"\x02" * 32, "job": b"\x03" * 32,
                "provider": b"\x04" * 32, "worker_key": b"\x05" * 32, "seq": 1,
                "window_start": 1_700_000_000, "window_end": 1_700_000_060, "sample_interval_ms": 1000,
                "gpus": (_gpu("GPU-a"), _gpu("GPU-b", fan_max_pct=40)),
                "process_list_hash": b"\x06" * 32, "prev_proof_hash": ZERO_HASH, "health_flags": 0,
                "billable_seconds": 60, "cumulative_seconds": 60}
    base.update(kw)
    return WindowProof(**base)


def _manual_gpu(g: GpuWindow) -> bytes:
    def opt(fmt: str, v):
        return b"\x00" if v is None else b"\x01" + struct.pack(fmt, v)
    u = g.uuid.encode()
    return (struct.pack("<I", len(u)) + u + struct.pack("<II", g.samples, g.covered_seconds)
            + opt("<H", g.util_gpu_avg_bp) + opt("<H", g.util_gpu_max_bp)
            + opt("<H", g.util_mem_avg_bp) + opt("<I", g.mem_used_max_mib)
            + opt("<I", g.mem_total_mib) + opt("<H", g.temp_max_c) + opt("<I", g.power_avg_mw)
            + opt("<H", g.fan_max_pct) + opt("<Q", g.ecc_uncorrected_delta)
            + struct.pack("<I", g.health_flags))


def _manual_v1(p: WindowProof, version: int) -> bytes:
    return (bytes([version]) + p.program_id + p.market + p.job + p.provider + p.worker_key
            + struct.pack("<QqqI", p.seq, p.window_start, p.window_end, p.sample_interval_ms)
            + struct.pack("<I", len(p.gpus)) + b"".join(_manual_gpu(g) for g in p.gpus)
            + p.process_list_hash + p.prev_proof_hash
            + struct.pack("<IQQ", p.health_flags, p.billable_seconds, p.cumulative_seconds))


CHECKPOINT = CheckpointRecord(seq=7, manifest_digest=b"\x0c" * 32, total_bytes=5 << 30,
                              created_at=1_700_000_042)


def test_layout_matches_documented_field_order() -> None:
    assert PROOF_VERSION == 3
    w = WorkloadWindow(WORKLOAD_EXITED, exit_code=-3, job_processes=2, foreign_processes=1)
    p = _proof(workload=dataclasses.replace(w, checkpoint=CHECKPOINT))
    manual = (_manual_v1(p, 3) + bytes([WORKLOAD_EXITED, 1]) + struct.pack("<iHH", -3, 2, 1)
              + b"\x01" + struct.pack("<Q", 7) + b"\x0c" * 32
              + struct.pack("<Qq", 5 << 30, 1_700_000_042))
    assert encode_proof(p) == manual
    assert decode_proof(manual) == p
    none = _proof()
    assert encode_proof(none) == _manual_v1(none, 3) + bytes([WORKLOAD_NONE, 0]) + bytes(5)
    v2 = _proof(version=2, workload=w)
    manual2 = _manual_v1(v2, 2) + bytes([WORKLOAD_EXITED, 1]) + struct.pack("<iHH", -3, 2, 1)
    assert encode_proof(v2) == manual2 and decode_proof(manual2) == v2


def test_version_2_proofs_are_read_and_carry_no_checkpoint() -> None:
    with pytest.raises(ProofEncodeError, match="version-2 proof cannot carry a checkpoint"):
        encode_proof(_proof(version=2, workload=WorkloadWindow(WORKLOAD_RUNNING,
                                                               checkpoint=CHECKPOINT)))
    b = encode_proof(_proof(version=2, workload=WorkloadWindow(WORKLOAD_RUNNING)))
    assert decode_proof(b).workload.checkpoint is None
    with pytest.raises(ProofDecodeError, match="trailing"):  # a v2 proof has no checkpoint tag
        decode_proof(b + b"\x00")


@pytest.mark.parametrize(
    ("record", "needle"),
    [
        (dataclasses.replace(CHECKPOINT, seq=0), "checkpoint.seq"),
        (dataclasses.replace(CHECKPOINT, seq=2**64), "checkpoint.seq"),
        (dataclasses.replace(CHECKPOINT, manifest_digest=b"\x00" * 31), "manifest_digest"),
        (dataclasses.replace(CHECKPOINT, total_bytes=-1), "checkpoint.total_bytes"),
        (dataclasses.replace(CHECKPOINT, created_at=2**63), "checkpoint.created_at"),
        ("not a record", "CheckpointRecord"),
    ],
)
def test_checkpoint_record_out_of_range_is_refused(record, needle: str) -> None:
    with pytest.raises(ProofEncodeError, match=needle):
        encode_proof(_proof(workload=WorkloadWindow(WORKLOAD_RUNNING, checkpoint=record)))


def test_decode_rejects_bad_checkpoint_tag_and_seq_zero() -> None:
    p = _proof(workload=WorkloadWindow(WORKLOAD_RUNNING, checkpoint=CHECKPOINT))
    b = bytearray(encode_proof(p))
    tag = len(b) - (1 + 8 + 32 + 8 + 8)
    assert b[tag] == 1
    b[tag] = 2
    with pytest.raises(ProofDecodeError, match="Option tag 2 for workload.checkpoint"):
        decode_proof(bytes(b))
    b[tag] = 1
    struct.pack_into("<Q", b, tag + 1, 0)
    with pytest.raises(ProofDecodeError, match="workload.checkpoint.seq"):
        decode_proof(bytes(b))


def test_version_1_proofs_are_still_read_and_written() -> None:
    p = _proof(version=1)
    b = encode_proof(p)
    assert b == _manual_v1(p, 1)
    assert decode_proof(b) == p and decode_proof(b).workload.state == WORKLOAD_NONE
    with pytest.raises(ProofEncodeError, match="version-1 proof cannot carry a workload"):
        encode_proof(_proof(version=1, workload=WorkloadWindow(WORKLOAD_RUNNING)))


@pytest.mark.parametrize(
    ("workload", "needle"),
    [
        (WorkloadWindow(WORKLOAD_FAILED + 1), "workload.state"),
        (WorkloadWindow(WORKLOAD_EXITED, exit_code=2**31), "workload.exit_code"),
        (WorkloadWindow(WORKLOAD_RUNNING, job_processes=2**16), "workload.job_processes"),
        (WorkloadWindow(WORKLOAD_RUNNING, foreign_processes=-1), "workload.foreign_processes"),
    ],
)
def test_workload_out_of_range_is_refused(workload: WorkloadWindow, needle: str) -> None:
    with pytest.raises(ProofEncodeError, match=needle):
        encode_proof(_proof(workload=workload))


def test_decode_rejects_bad_workload_state_byte() -> None:
    b = bytearray(encode_proof(_proof()))
    b[-7] = 9  # the state byte: state u8, exit Option tag 0, two u16, checkpoint tag 0
    with pytest.raises(ProofDecodeError, match="workload.state"):
        decode_proof(bytes(b))


def test_workload_billable_policy() -> None:
    assert WorkloadWindow(WORKLOAD_RUNNING).billable
    assert WorkloadWindow(WORKLOAD_EXITED, exit_code=0).billable
    assert not WorkloadWindow(WORKLOAD_FAILED).billable
    assert not WorkloadWindow(WORKLOAD_RUNNING, job_processes=1, foreign_processes=1).billable


def test_absent_metric_is_tag_zero_not_zero_value() -> None:
    absent = encode_proof(_proof(gpus=(_gpu(fan_max_pct=None),)))
    zero = encode_proof(_proof(gpus=(_gpu(fan_max_pct=0),)))
    assert absent != zero
    assert len(zero) == len(absent) + 2
    assert decode_proof(absent).gpus[0].fan_max_pct is None
    assert decode_proof(zero).gpus[0].fan_max_pct == 0


def test_all_metrics_absent_round_trip() -> None:
    g = GpuWindow(uuid="GPU-x", samples=0, covered_seconds=0)
    p = _proof(gpus=(g,), billable_seconds=0, cumulative_seconds=0)
    assert decode_proof(encode_proof(p)) == p


def test_rejects_trailing_bytes() -> None:
    b = encode_proof(_proof())
    with pytest.raises(ProofDecodeError, match="trailing"):
        decode_proof(b + b"\x00")


def test_rejects_truncation_everywhere() -> None:
    b = encode_proof(_proof())
    for n in range(len(b)):
        with pytest.raises(ProofDecodeError):
            decode_proof(b[:n])


def _offset_of_first_option(p: WindowProof) -> int:
    # version + 5 keys + seq/start/end + interval + gpus len + uuid len + uuid + samples/covered
    return 1 + 5 * 32 + 24 + 4 + 4 + 4 + len(p.gpus[0].uuid.encode()) + 8


def test_rejects_bad_option_tag() -> None:
    p = _proof()
    b = bytearray(encode_proof(p))
    off = _offset_of_first_option(p)
    assert b[off] == 1
    b[off] = 2
    with pytest.raises(ProofDecodeError, match="Option tag"):
        decode_proof(bytes(b))


def test_rejects_too_many_gpus_in_header() -> None:
    b = bytearray(encode_proof(_proof()))
    struct.pack_into("<I", b, 1 + 5 * 32 + 28, MAX_GPUS + 1)
    with pytest.raises(ProofDecodeError, match="GPUs"):
        decode_proof(bytes(b))


def test_rejects_overlong_uuid_length() -> None:
    b = bytearray(encode_proof(_proof()))
    struct.pack_into("<I", b, 1 + 5 * 32 + 32, MAX_UUID_BYTES + 1)
    with pytest.raises(ProofDecodeError, match="limit"):
        decode_proof(bytes(b))


def test_rejects_invalid_utf8_uuid() -> None:
    p = _proof(gpus=(_gpu("GPU-z"),))
    b = bytearray(encode_proof(p))
    b[1 + 5 * 32 + 32 + 4] = 0xFF
    with pytest.raises(ProofDecodeError, match="UTF-8"):
        decode_proof(bytes(b))


def test_rejects_unknown_version() -> None:
    b = bytearray(encode_proof(_proof()))
    b[0] = 4
    with pytest.raises(ProofDecodeError, match="version"):
        decode_proof(bytes(b))


def test_rejects_oversized_input() -> None:
    with pytest.raises(ProofDecodeError, match="more than"):
        decode_proof(bytes(MAX_PROOF_BYTES + 1))


def test_decode_applies_semantic_checks() -> None:
    b = bytearray(encode_proof(_proof()))
    # billable_seconds := 61 > window length 60 (before the 7-byte workload trailer)
    struct.pack_into("<Q", b, len(b) - 7 - 16, 61)
    with pytest.raises(ProofDecodeError, match="billable"):
        decode_proof(bytes(b))


def test_decode_rejects_bp_over_10000() -> None:
    p = _proof()
    b = bytearray(encode_proof(p))
    off = _offset_of_first_option(p)
    struct.pack_into("<H", b, off + 1, 10_001)
    with pytest.raises(ProofDecodeError, match="util_gpu_avg_bp"):
        decode_proof(bytes(b))


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"version": 4}, "version"),
        ({"job": b"\x00" * 31}, "job"),
        ({"seq": -1}, "seq"),
        ({"window_end": 1_700_000_000}, "window_end"),
        ({"sample_interval_ms": 0}, "sample_interval_ms"),
        ({"gpus": ()}, "1..64"),
        ({"gpus": tuple(_gpu(f"GPU-{i}") for i in range(MAX_GPUS + 1))}, "1..64"),
        ({"gpus": (_gpu("GPU-a"), _gpu("GPU-a"))}, "duplicate"),
        ({"gpus": [_gpu()]}, "tuple"),
        ({"billable_seconds": 61}, "billable"),
        ({"cumulative_seconds": 59}, "cumulative"),
        ({"health_flags": 2**32}, "health_flags"),
        ({"gpus": (_gpu(uuid=""),)}, "uuid"),
        ({"gpus": (_gpu(uuid="x" * (MAX_UUID_BYTES + 1)),)}, "uuid"),
        ({"gpus": (_gpu(util_gpu_max_bp=10_001),)}, "util_gpu_max_bp"),
        ({"gpus": (_gpu(covered_seconds=61),)}, "covered_seconds"),
        ({"gpus": (_gpu(ecc_uncorrected_delta=2**64),)}, "ecc"),
        ({"gpus": (_gpu(temp_max_c=True),)}, "temp_max_c"),
    ],
)
def test_encode_rejects_invalid(kw: dict, needle: str) -> None:
    with pytest.raises(ProofEncodeError, match=needle):
        encode_proof(_proof(**kw))


def test_max_size_proof_fits_limit() -> None:
    g = [_gpu("G" * (MAX_UUID_BYTES - 3) + f"{i:03d}", fan_max_pct=100) for i in range(MAX_GPUS)]
    b = encode_proof(_proof(gpus=tuple(g), workload=WorkloadWindow(
        WORKLOAD_EXITED, exit_code=1, checkpoint=CHECKPOINT)))
    assert len(b) == MAX_PROOF_BYTES == 10_008
    assert decode_proof(b).gpus == tuple(g)


def test_sign_and_verify_proof_and_receipt() -> None:
    sk = private_key_from_seed(bytes(range(32)))
    pk = public_key_bytes(sk)
    p = _proof(worker_key=pk)
    b = encode_proof(p)
    sig = sign_proof(sk, b)
    assert verify_proof(pk, sig, b)
    assert verify(pk, sig, PROOF_DOMAIN + b)
    assert not verify_proof(pk, sig, b[:-1] + b"\x01")
    r = receipt_for_proof(p, b)
    assert r == receipt_message(p.program_id, p.market, p.job, p.seq, p.cumulative_seconds,
                                p.window_end, hashlib.sha256(b).digest())
    assert proof_hash(b) == hashlib.sha256(b).digest()
    # A receipt signature is never a valid proof signature (domain separation).
    assert not verify_proof(pk, sign_proof(sk, r), r[len(PROOF_DOMAIN):])


def test_process_list_hash_canonical() -> None:
    a = process_list_hash([("GPU-b", 7, 100), ("GPU-a", 9, None), ("GPU-b", 7, 300)])
    b = process_list_hash([("GPU-a", 9, None), ("GPU-b", 7, 300)])
    assert a == b
    expect = struct.pack("<I", 2)
    expect += struct.pack("<I", 5) + b"GPU-a" + struct.pack("<I", 9) + b"\x00"
    expect += struct.pack("<I", 5) + b"GPU-b" + struct.pack("<I", 7) + b"\x01" + struct.pack(
        "<Q", 300)
    assert a == hashlib.sha256(expect).digest()
    assert process_list_hash([]) == hashlib.sha256(bytes(4)).digest()
    assert process_list_hash([("GPU-a", 9, 1)]) != process_list_hash([("GPU-a", 9, None)])


# ---------------------------------------------------------------------------- properties

u16o = st.none() | st.integers(0, 2**16 - 1)
u32o = st.none() | st.integers(0, 2**32 - 1)
bpo = st.none() | st.integers(0, 10_000)
b32 = st.binary(min_size=32, max_size=32)


@st.composite
def gpu_windows(draw, length: int, uuid: str) -> GpuWindow:
    return GpuWindow(
        uuid=uuid, samples=draw(st.integers(0, 2**32 - 1)),
        covered_seconds=draw(st.integers(0, min(length, 2**32 - 1))),
        util_gpu_avg_bp=draw(bpo), util_gpu_max_bp=draw(bpo), util_mem_avg_bp=draw(bpo),
        mem_used_max_mib=draw(u32o), mem_total_mib=draw(u32o), temp_max_c=draw(u16o),
        power_avg_mw=draw(u32o), fan_max_pct=draw(u16o),
        ecc_uncorrected_delta=draw(st.none() | st.integers(0, 2**64 - 1)),
        health_flags=draw(st.integers(0, 2**32 - 1)),
    )


checkpoints = st.builds(CheckpointRecord, st.integers(1, 2**64 - 1), b32,
                        st.integers(0, 2**64 - 1), st.integers(-(2**63), 2**63 - 1))


@st.composite
def proofs(draw) -> WindowProof:
    start = draw(st.integers(-(2**63), 2**63 - 2))
    end = draw(st.integers(start + 1, min(start + 10**6, 2**63 - 1)))
    length = end - start
    uuids = draw(st.lists(st.text(min_size=1, max_size=24).filter(
        lambda s: len(s.encode()) <= MAX_UUID_BYTES), min_size=1, max_size=5, unique=True))
    gpus = tuple(draw(gpu_windows(length, u)) for u in uuids)
    billable = draw(st.integers(0, length))
    return WindowProof(
        program_id=draw(b32), market=draw(b32), job=draw(b32), provider=draw(b32),
        worker_key=draw(b32), seq=draw(st.integers(0, 2**64 - 1)), window_start=start,
        window_end=end, sample_interval_ms=draw(st.integers(1, 60_000)), gpus=gpus,
        process_list_hash=draw(b32), prev_proof_hash=draw(b32),
        health_flags=draw(st.integers(0, 2**32 - 1)), billable_seconds=billable,
        cumulative_seconds=draw(st.integers(billable, 2**64 - 1)), version=PROOF_VERSION,
        workload=WorkloadWindow(draw(st.integers(WORKLOAD_NONE, WORKLOAD_FAILED)),
                                draw(st.none() | st.integers(-(2**31), 2**31 - 1)),
                                draw(st.integers(0, 2**16 - 1)), draw(st.integers(0, 2**16 - 1)),
                                draw(st.none() | checkpoints)),
    )


@settings(max_examples=300, deadline=None)
@given(proofs())
def test_property_round_trip(p: WindowProof) -> None:
    b = encode_proof(p)
    q = decode_proof(b)
    assert q == p
    assert encode_proof(q) == b


@settings(max_examples=300, deadline=None)
@given(proofs(), st.data())
def test_property_decode_is_canonical_or_rejects(p: WindowProof, data) -> None:
    b = bytearray(encode_proof(p))
    i = data.draw(st.integers(0, len(b) - 1))
    b[i] = data.draw(st.integers(0, 255))
    try:
        q = decode_proof(bytes(b))
    except ProofDecodeError:
        return
    assert encode_proof(q) == bytes(b)


def test_dataclass_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        _proof().seq = 2  # type: ignore[misc]
