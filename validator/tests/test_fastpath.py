"""The Rust fast path (validator/fastpath, module ``gpum_fastpath``) against the Python
reference ``verify.authenticate``, reason for reason.

The reference is ``verify.authenticate`` with its receipt-signature primitive set to the
rule the fast path promises: solders' ``Signature.verify``, i.e. ed25519-dalek's
``verify_strict`` as Solana's Ed25519 program applies it, an implementation independent of
the extension (``gpu_market.receipt.verify``, OpenSSL, differs from it only on crafted keys
and signatures, see ``test_small_order_key_is_refused_where_openssl_accepts``). Everything
else (decoding, the canonical check, the order of the checks, the messages, the
dataclasses) is the Python code itself.
"""

from __future__ import annotations

import base64
import hashlib
import random
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
import vtestkit as vt
from gpu_market.proof import (
    MAX_PROOF_BYTES,
    NO_WORKLOAD_WINDOW,
    CheckpointRecord,
    GpuWindow,
    ProofDecodeError,
    WindowProof,
    WorkloadWindow,
    decode_proof,
    encode_proof,
    receipt_for_proof,
)
from gpu_market.receipt import (
    RECEIPT_MESSAGE_LEN,
    private_key_from_seed,
    public_key_bytes,
    receipt_digest,
    sign,
    verify,
)
from gpum_validator import fastlane
from gpum_validator import verify as verify_mod
from gpum_validator.config import HealthThresholds
from gpum_validator.errors import Rejection
from gpum_validator.schema import SignedProof, parse_signed_proof
from gpum_validator.verify import Authenticated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    import gpum_fastpath
    from gpum_validator import fastauth
except ImportError as e:  # reported by every test below, never skipped
    gpum_fastpath = fastauth = None  # type: ignore[assignment]
    _IMPORT_ERROR: ImportError | None = e
else:
    _IMPORT_ERROR = None

NOT_INSTALLED = ("the Rust fast path gpum_fastpath is not installed in this venv: `make venv` "
                 "builds and installs it (validator/fastpath, pip + maturin; needs cargo)")

CFG = vt.cfg()
KEYS = [private_key_from_seed(bytes([60 + i] * 32)) for i in range(20)]
PUBS = [public_key_bytes(k) for k in KEYS]
PROPERTY = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def fast() -> Any:
    """The fastauth module; fails (never skips) when the extension is missing."""
    if _IMPORT_ERROR is not None:
        pytest.fail(f"{NOT_INSTALLED}: {_IMPORT_ERROR}")
    return fastauth


# ---------------------------------------------------------------------------- the reference


chain_verify = verify_mod.chain_verify
"""The reference's signature rule: the chain's (ed25519-dalek verify_strict through solders),
an implementation independent of the fast path's."""


def reference(items: list[SignedProof]) -> list[Authenticated | Rejection]:
    """``verify.authenticate`` of each item (it judges receipts by ``chain_verify``)."""
    out: list[Authenticated | Rejection] = []
    for s in items:
        try:
            out.append(verify_mod.authenticate(s, CFG))
        except Rejection as e:
            out.append(e)
    return out


def assert_same(items: list[SignedProof]) -> list[Authenticated | Rejection]:
    """The fast path's results equal the reference's, item by item; returns them."""
    got = fast().authenticate_many(items, CFG)
    want = reference(items)
    assert len(got) == len(want) == len(items)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        where = f"item {i}: proof {items[i].proof.hex()}"
        if isinstance(w, Rejection):
            assert isinstance(g, Rejection), f"{where}: fast accepted, reference {w}"
            assert (g.reason, g.http_status, g.retry_after) == (
                w.reason, w.http_status, w.retry_after), f"{where}: {g} != {w}"
            if "duplicate GPU uuid" in w.message:  # Python's repr() escapes are not mirrored
                assert g.message.split(" uuid ")[0] == w.message.split(" uuid ")[0]
            else:
                assert g.message == w.message, where
        else:
            assert isinstance(g, Authenticated), f"{where}: fast {g}, reference accepted"
            assert g == w, where
            assert g.proof == decode_proof(items[i].proof)
            assert len(g.receipt_message) == RECEIPT_MESSAGE_LEN
    return got


# ---------------------------------------------------------------------------- building inputs


def _opt(fmt: str, v: int | None) -> bytes:
    return b"\x00" if v is None else b"\x01" + struct.pack(fmt, v)


def raw_encode(p: WindowProof) -> bytes:
    """The wire layout of ``p`` without ``validate``: out-of-range values are written as
    they are (as long as they fit their wire type), so invalid proofs can be built."""
    parts = [struct.pack("<B", p.version), p.program_id, p.market, p.job, p.provider,
             p.worker_key, struct.pack("<Qqq", p.seq, p.window_start, p.window_end),
             struct.pack("<II", p.sample_interval_ms, len(p.gpus))]
    for g in p.gpus:
        u = g.uuid.encode()
        parts += [struct.pack("<I", len(u)), u, struct.pack("<II", g.samples, g.covered_seconds),
                  _opt("<H", g.util_gpu_avg_bp), _opt("<H", g.util_gpu_max_bp),
                  _opt("<H", g.util_mem_avg_bp), _opt("<I", g.mem_used_max_mib),
                  _opt("<I", g.mem_total_mib), _opt("<H", g.temp_max_c),
                  _opt("<I", g.power_avg_mw), _opt("<H", g.fan_max_pct),
                  _opt("<Q", g.ecc_uncorrected_delta), struct.pack("<I", g.health_flags)]
    parts += [p.process_list_hash, p.prev_proof_hash,
              struct.pack("<IQQ", p.health_flags, p.billable_seconds, p.cumulative_seconds)]
    if p.version >= 2:
        w = p.workload
        parts += [struct.pack("<B", w.state), _opt("<i", w.exit_code),
                  struct.pack("<HH", w.job_processes, w.foreign_processes)]
    if p.version >= 3:
        c = p.workload.checkpoint
        parts.append(b"\x00" if c is None else b"\x01" + struct.pack("<Q", c.seq)
                     + c.manifest_digest + struct.pack("<Qq", c.total_bytes, c.created_at))
    return b"".join(parts)


def option_tag_offsets(p: WindowProof) -> list[int]:
    """Offsets of every Option tag in ``encode_proof(p)``."""
    out, at = [], 1 + 5 * 32 + 24 + 8
    sizes = (2, 2, 2, 4, 4, 2, 4, 2, 8)
    for g in p.gpus:
        at += 4 + len(g.uuid.encode()) + 8
        values = (g.util_gpu_avg_bp, g.util_gpu_max_bp, g.util_mem_avg_bp, g.mem_used_max_mib,
                  g.mem_total_mib, g.temp_max_c, g.power_avg_mw, g.fan_max_pct,
                  g.ecc_uncorrected_delta)
        for v, n in zip(values, sizes, strict=True):
            out.append(at)
            at += 1 + (0 if v is None else n)
        at += 4
    at += 64 + 20
    if p.version >= 2:
        out.append(at + 1)
        at += 2 + (0 if p.workload.exit_code is None else 4) + 4
    if p.version >= 3:
        out.append(at)
    return out


def signed(raw: bytes, key: Any = vt.WORKER_KEY, *, request_key: bytes | None = None,
           receipt_of: bytes | None = None, rsig: bytes | None = None) -> SignedProof:
    """A request for ``raw``: the receipt signed by ``key`` over the receipt digest of
    ``receipt_of`` (default ``raw`` itself, when it decodes), unless ``rsig`` is given."""
    if rsig is None:
        src = raw if receipt_of is None else receipt_of
        try:
            msg = receipt_digest(receipt_for_proof(decode_proof(src), src))
        except ProofDecodeError:
            msg = b"not a proof"
        rsig = sign(key, msg)
    # proof_signature is never checked (the receipt signature covers the proof bytes)
    return SignedProof(proof=raw, proof_signature=bytes(64), receipt_signature=rsig,
                       worker_key=vt.WORKER_PUB if request_key is None else request_key)


bpo = st.none() | st.integers(0, 10_000)
u16o = st.none() | st.integers(0, 2**16 - 1)
u32o = st.none() | st.integers(0, 2**32 - 1)
uuid_text = st.text(min_size=1, max_size=30).filter(lambda s: len(s.encode()) <= 96)


@st.composite
def proofs(draw: Any, max_gpus: int = 64) -> WindowProof:
    """Valid proofs of this validator's program and market (mostly), versions 1 to 3."""
    start = draw(st.integers(-(2**63), 2**63 - 2) | st.integers(vt.T0 - 10**6, vt.T0 + 10**6))
    end = draw(st.integers(start + 1, min(start + 10**6, 2**63 - 1)))
    length = end - start
    n = draw(st.integers(1, min(4, max_gpus)) | st.integers(1, max_gpus) | st.just(max_gpus))
    uuids = draw(st.lists(uuid_text, min_size=n, max_size=n, unique=True)
                 | st.just([f"GPU-{i:04x}" for i in range(n)]))
    gpus = tuple(GpuWindow(
        uuid=u, samples=draw(st.integers(0, 2**32 - 1)),
        covered_seconds=draw(st.integers(0, min(length, 2**32 - 1))),
        util_gpu_avg_bp=draw(bpo), util_gpu_max_bp=draw(bpo), util_mem_avg_bp=draw(bpo),
        mem_used_max_mib=draw(u32o), mem_total_mib=draw(u32o), temp_max_c=draw(u16o),
        power_avg_mw=draw(u32o), fan_max_pct=draw(u16o),
        ecc_uncorrected_delta=draw(st.none() | st.integers(0, 2**64 - 1)),
        health_flags=draw(st.integers(0, 2**32 - 1))) for u in uuids)
    billable = draw(st.integers(0, min(length, 2**64 - 1)))
    version = draw(st.sampled_from((1, 2, 3)))
    b32 = st.binary(min_size=32, max_size=32)
    checkpoint = None if version < 3 else draw(st.none() | st.builds(
        CheckpointRecord, st.integers(1, 2**64 - 1), b32, st.integers(0, 2**64 - 1),
        st.integers(-(2**63), 2**63 - 1)))
    workload = NO_WORKLOAD_WINDOW if version == 1 else WorkloadWindow(
        draw(st.integers(0, 5)), draw(st.none() | st.integers(-(2**31), 2**31 - 1)),
        draw(st.integers(0, 2**16 - 1)), draw(st.integers(0, 2**16 - 1)), checkpoint)
    return WindowProof(
        program_id=draw(st.just(vt.PROGRAM) | b32), market=draw(st.just(vt.MARKET) | b32),
        job=draw(b32), provider=draw(b32), worker_key=vt.WORKER_PUB,
        seq=draw(st.integers(0, 2**64 - 1)), window_start=start, window_end=end,
        sample_interval_ms=draw(st.integers(1, 60_000)), gpus=gpus,
        process_list_hash=draw(b32), prev_proof_hash=draw(b32),
        health_flags=draw(st.integers(0, 2**32 - 1)), billable_seconds=billable,
        cumulative_seconds=draw(st.integers(billable, 2**64 - 1)), version=version,
        workload=workload)


def mutations(p: WindowProof, raw: bytes) -> list[Callable[[Any], bytes]]:
    """Byte-level mutations of ``raw``; each takes a hypothesis ``data`` to draw from."""
    n = len(raw)
    tags = option_tag_offsets(p)

    def at(data: Any, hi: int = n - 1) -> int:
        return data.draw(st.integers(0, hi))

    def flip(d: Any) -> bytes:
        i = at(d)
        return raw[:i] + bytes([raw[i] ^ (1 << d.draw(st.integers(0, 7)))]) + raw[i + 1:]

    def set_byte(d: Any) -> bytes:
        i = at(d)
        return raw[:i] + bytes([d.draw(st.integers(0, 255))]) + raw[i + 1:]

    def insert(d: Any) -> bytes:
        i = at(d, n)
        return raw[:i] + d.draw(st.binary(min_size=1, max_size=4)) + raw[i:]

    def delete(d: Any) -> bytes:
        i = at(d)
        return raw[:i] + raw[i + d.draw(st.integers(1, 4)):]

    def truncate(d: Any) -> bytes:
        return raw[:at(d)]

    def trailing(d: Any) -> bytes:
        return raw + d.draw(st.binary(min_size=1, max_size=8))

    def bad_tag(d: Any) -> bytes:
        i = d.draw(st.sampled_from(tags))
        return raw[:i] + bytes([d.draw(st.integers(2, 255))]) + raw[i + 1:]

    def version(d: Any) -> bytes:
        return bytes([d.draw(st.sampled_from((0, 1, 2, 3, 4, 255)))]) + raw[1:]

    def bad_utf8(d: Any) -> bytes:
        i = 1 + 5 * 32 + 24 + 8 + 4  # first byte of gpus[0].uuid
        junk = d.draw(st.sampled_from((b"\xff", b"\xc0", b"\x80", b"\xed", b"\xf8")))
        return raw[:i] + junk + raw[i + 1:]

    def length_field(d: Any) -> bytes:
        i = d.draw(st.sampled_from((189, 193)))  # gpus length, gpus[0].uuid length
        (v,) = struct.unpack_from("<I", raw, i)
        v = d.draw(st.sampled_from((0, v - 1, v + 1, 65, 97, 2**32 - 1)))
        return raw[:i] + struct.pack("<I", v % 2**32) + raw[i + 4:]

    return [flip, set_byte, insert, delete, truncate, trailing, bad_tag, version, bad_utf8,
            length_field]


# ---------------------------------------------------------------------------- ed25519 (tests)
# RFC 8032 arithmetic, to build small-order and mixed-order points the extension must refuse
# or accept exactly as verify_strict does.

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)
Point = tuple[int, int, int, int]
IDENTITY: Point = (0, 1, 1, 0)


def padd(a: Point, b: Point) -> Point:
    x = (a[1] - a[0]) * (b[1] - b[0]) % P
    y = (a[1] + a[0]) * (b[1] + b[0]) % P
    c = 2 * a[3] * b[3] * D % P
    z = 2 * a[2] * b[2] % P
    e, f, g, h = y - x, z - c, z + c, y + x
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def pmul(s: int, p: Point) -> Point:
    q = IDENTITY
    while s:
        if s & 1:
            q = padd(q, p)
        p, s = padd(p, p), s >> 1
    return q


def penc(p: Point) -> bytes:
    zi = pow(p[2], P - 2, P)
    x, y = p[0] * zi % P, p[1] * zi % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def point_with_y(y: int, sign: int = 0) -> Point | None:
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P:
        return None
    if x & 1 != sign:
        x = (P - x) % P
    return (x, y, 1, x * y % P)


BASE = point_with_y(4 * pow(5, P - 2, P) % P)
assert BASE is not None


def _order8() -> Point:
    for y in range(2, 100):
        q = point_with_y(y)
        if q is not None:
            t = pmul(L, q)
            if penc(pmul(4, t)) != penc(IDENTITY):
                return t
    raise AssertionError("no point of order 8 found")


T8 = _order8()
TORSION = [pmul(i, T8) for i in range(8)]
SMALL_ORDER_KEYS = sorted({penc(t) for t in TORSION} | {
    bytes([1] + [0] * 30 + [0x80]),          # identity, x = -0
    (P + 1).to_bytes(32, "little"),          # identity, y = p + 1 (non-canonical)
    P.to_bytes(32, "little"),                # order 4, y = p (non-canonical)
    (P | 1 << 255).to_bytes(32, "little"),
})


def hram(r: bytes, a: bytes, msg: bytes) -> int:
    return int.from_bytes(hashlib.sha512(r + a + msg).digest(), "little") % L


def enc_scalar(s: int) -> bytes:
    return s.to_bytes(32, "little")


# ---------------------------------------------------------------------------- tests


def test_fast_path_is_installed() -> None:
    """The extension is importable (``make venv`` builds it); never skipped."""
    assert _IMPORT_ERROR is None, f"{NOT_INSTALLED}: {_IMPORT_ERROR}"
    assert callable(gpum_fastpath.authenticate_many)
    assert callable(gpum_fastpath.verify_strict_one)


def test_limits_match_the_python_format() -> None:
    fast()
    assert gpum_fastpath.MAX_PROOF_BYTES == MAX_PROOF_BYTES
    assert gpum_fastpath.RECEIPT_MESSAGE_LEN == RECEIPT_MESSAGE_LEN


def test_raw_encoder_matches_encode_proof() -> None:
    p = vt.make_proof()
    for q in (p, replace(p, version=1, workload=NO_WORKLOAD_WINDOW),
              replace(p, workload=WorkloadWindow(2, -3, 1, 0)),
              replace(p, version=2, workload=WorkloadWindow(2, None, 1, 0)),
              replace(p, workload=WorkloadWindow(2, None, 0, 0, CheckpointRecord(
                  3, b"\x07" * 32, 10, -1)))):
        assert raw_encode(q) == encode_proof(q)
        assert all(encode_proof(q)[i] in (0, 1) for i in option_tag_offsets(q))


@settings(PROPERTY, max_examples=80)
@given(proofs())
def test_valid_proofs_match_the_reference(p: WindowProof) -> None:
    raw = encode_proof(p)
    items = [signed(raw), signed(raw, request_key=vt.OTHER_PUB)]
    got = assert_same(items)
    if p.program_id == vt.PROGRAM and p.market == vt.MARKET:
        assert isinstance(got[0], Authenticated)
        assert got[0].proof == p
        assert got[0].hash == hashlib.sha256(raw).digest()
        assert got[0].receipt_message == receipt_for_proof(p, raw)
    assert isinstance(got[1], Rejection) and got[1].reason == "worker_key_mismatch"


@PROPERTY
@given(proofs(max_gpus=8), st.data())
def test_mutated_bytes_match_the_reference(p: WindowProof, data: Any) -> None:
    p = replace(p, program_id=vt.PROGRAM, market=vt.MARKET)
    raw = encode_proof(p)
    muts = mutations(p, raw)
    items = []
    for _ in range(24):
        mutated = data.draw(st.sampled_from(muts))(data)
        how = data.draw(st.sampled_from(("own", "own", "stale", "proof_key")))
        if how == "own":  # a correct receipt of the mutated bytes: the later checks decide
            items.append(signed(mutated))
        elif how == "stale":  # the receipt of the original bytes
            items.append(signed(mutated, receipt_of=raw))
        else:  # the request names whatever key the mutated proof carries
            try:
                key = decode_proof(mutated).worker_key
            except ProofDecodeError:
                key = vt.WORKER_PUB
            items.append(signed(mutated, request_key=key))
    assert_same(items)


INVALIDATIONS: dict[str, Callable[[WindowProof, Any], WindowProof]] = {
    "sample_interval": lambda p, d: replace(
        p, sample_interval_ms=d.draw(st.sampled_from((0, 60_001, 2**32 - 1)))),
    "empty_window": lambda p, d: replace(p, window_end=p.window_start),
    "reversed_window": lambda p, d: replace(p, window_start=p.window_end, window_end=p.window_start),
    "util_bp": lambda p, d: replace(p, gpus=(replace(p.gpus[0], **{
        d.draw(st.sampled_from(("util_gpu_avg_bp", "util_gpu_max_bp", "util_mem_avg_bp"))):
        d.draw(st.integers(10_001, 2**16 - 1))}),) + p.gpus[1:]),
    "covered": lambda p, d: replace(p, gpus=p.gpus[:-1] + (replace(
        p.gpus[-1], covered_seconds=min(p.window_seconds + 1, 2**32 - 1)),)),
    "billable": lambda p, d: replace(p, billable_seconds=p.window_seconds + 1,
                                     cumulative_seconds=2**64 - 1),
    "cumulative": lambda p, d: replace(p, billable_seconds=1, cumulative_seconds=0),
    "workload_state": lambda p, d: replace(p, version=2, workload=replace(
        p.workload, state=d.draw(st.integers(6, 255)), checkpoint=None)),
    "checkpoint_seq": lambda p, d: replace(p, version=3, workload=replace(
        p.workload, checkpoint=CheckpointRecord(0, b"\x01" * 32, 1, 1))),
    "no_gpus": lambda p, d: replace(p, gpus=()),
    "too_many_gpus": lambda p, d: replace(p, gpus=tuple(
        replace(p.gpus[0], uuid=f"G{i}") for i in range(65))),
    "empty_uuid": lambda p, d: replace(p, gpus=(replace(p.gpus[0], uuid=""),) + p.gpus[1:]),
    "long_uuid": lambda p, d: replace(p, gpus=(replace(
        p.gpus[0], uuid=d.draw(st.sampled_from(("x" * 97, "é" * 49, "\U0001f600" * 25)))),)),
    "duplicate_uuid": lambda p, d: replace(p, gpus=p.gpus + (replace(
        p.gpus[-1], samples=1),)),
    "max_uuid": lambda p, d: replace(p, gpus=(replace(p.gpus[0], uuid="é" * 48),)),
}


@PROPERTY
@given(proofs(max_gpus=4), st.sampled_from(sorted(INVALIDATIONS)), st.data())
def test_out_of_range_fields_match_the_reference(p: WindowProof, name: str, data: Any) -> None:
    p = replace(p, program_id=vt.PROGRAM, market=vt.MARKET)
    bad = INVALIDATIONS[name](p, data)
    raw = raw_encode(bad)
    got = assert_same([signed(raw)])
    if name == "max_uuid":
        assert isinstance(got[0], Authenticated)
    else:
        assert isinstance(got[0], Rejection) and got[0].reason == "proof_malformed", name


def test_oversized_and_empty_input() -> None:
    raw = encode_proof(vt.make_proof())
    items = [signed(b""), signed(b"\x02"), signed(raw + bytes(MAX_PROOF_BYTES)),
             signed(bytes(MAX_PROOF_BYTES + 1)), signed(bytes(MAX_PROOF_BYTES))]
    got = assert_same(items)
    assert [g.reason for g in got if isinstance(g, Rejection)] == ["proof_malformed"] * 5


def test_program_market_and_worker_key_checks_in_order() -> None:
    base = vt.make_proof()
    other = bytes([99] * 32)
    cases = [
        ("wrong_program", signed(encode_proof(replace(base, program_id=other)))),
        ("wrong_market", signed(encode_proof(replace(base, market=other)))),
        # worker_key_mismatch comes before the program check
        ("worker_key_mismatch", signed(encode_proof(replace(base, program_id=other)),
                                       request_key=vt.OTHER_PUB)),
        # wrong_program before wrong_market, both before the signature
        ("wrong_program", signed(encode_proof(replace(base, program_id=other, market=other)),
                                 rsig=bytes(64))),
    ]
    got = assert_same([s for _, s in cases])
    assert [g.reason for g in got if isinstance(g, Rejection)] == [r for r, _ in cases]
    assert [g.http_status for g in got if isinstance(g, Rejection)] == [422, 422, 400, 422]


def _signature_cases() -> dict[str, SignedProof]:
    p = vt.make_proof()
    raw = encode_proof(p)
    msg = receipt_digest(receipt_for_proof(p, raw))
    good = sign(vt.WORKER_KEY, msg)
    s = int.from_bytes(good[32:], "little")
    cases = {
        "good": signed(raw),
        "random": signed(raw, rsig=random.Random(1).randbytes(64)),
        "flipped": signed(raw, rsig=good[:10] + bytes([good[10] ^ 1]) + good[11:]),
        "other_key": signed(raw, vt.OTHER_KEY),
        "stale": signed(raw, receipt_of=encode_proof(vt.make_proof(2))),
        "short": signed(raw, rsig=good[:63]),
        "long": signed(raw, rsig=good + b"\x00"),
        "empty": signed(raw, rsig=b""),
        "s_plus_l": signed(raw, rsig=good[:32] + enc_scalar(s + L)),
        "s_zero": signed(raw, rsig=good[:32] + bytes(32)),
        "proof_signature_only": signed(raw, rsig=sign(vt.WORKER_KEY, b"gpu-market/proof/v1"
                                                      + raw)),
    }
    # Small-order worker keys, with signatures that satisfy the cofactorless equation for
    # some of them (OpenSSL accepts the identity key's): verify_strict refuses every one.
    for i, key in enumerate(SMALL_ORDER_KEYS):
        q = replace(p, worker_key=key)
        qraw = encode_proof(q)
        for j, r in enumerate((penc(IDENTITY), key, penc(TORSION[4]))):
            cases[f"small_order_key_{i}_{j}"] = signed(qraw, request_key=key,
                                                       rsig=r + bytes(32))
    # Mixed-order R (a valid nonce plus an 8-torsion point): refused by every verifier,
    # and the case a cofactorless batch with input-derived coefficients lets through.
    a, r = 0x1234567 * 2**200 + 99, 0x7654321 * 2**190 + 7
    a_pub = penc(pmul(a, BASE))
    q = replace(p, worker_key=a_pub)
    qraw = encode_proof(q)
    qmsg = receipt_digest(receipt_for_proof(q, qraw))
    big_r = penc(padd(pmul(r, BASE), T8))
    cases["mixed_order_r"] = signed(qraw, request_key=a_pub, rsig=big_r + enc_scalar(
        (r + hram(big_r, a_pub, qmsg) * a) % L))
    # A mixed-order key (aB + T8) with a signature whose equation holds without the
    # cofactor: verify_strict accepts it (neither point has small order), so must we.
    m_pub = penc(padd(pmul(a, BASE), T8))
    q = replace(p, worker_key=m_pub)
    qraw = encode_proof(q)
    qmsg = receipt_digest(receipt_for_proof(q, qraw))
    for j in range(256):  # nonces r + j // 8 with each torsion point: 1 in 8 fits
        rn = r + j // 8
        rj = penc(padd(pmul(rn, BASE), TORSION[j % 8]))
        k = hram(rj, m_pub, qmsg)
        if (j + k) % 8 == 0:  # R + kA = (rn + ka)B + (j + k)T8 = (rn + ka)B
            cases["mixed_order_key_valid"] = signed(qraw, request_key=m_pub,
                                                    rsig=rj + enc_scalar((rn + k * a) % L))
            break
    assert "mixed_order_key_valid" in cases
    return cases


def test_signatures_match_verify_strict() -> None:
    fast()
    cases = _signature_cases()
    got = assert_same(list(cases.values()))
    verdict = {name: "ok" if isinstance(g, Authenticated) else g.reason
               for name, g in zip(cases, got, strict=True)}
    assert verdict.pop("good") == "ok"
    assert verdict.pop("mixed_order_key_valid") == "ok"
    assert set(verdict.values()) == {"bad_receipt_signature"}, verdict
    for s in cases.values():  # the exported single check agrees with solders
        try:
            msg = receipt_digest(receipt_for_proof(decode_proof(s.proof), s.proof))
        except ProofDecodeError:
            continue
        key = s.worker_key
        assert gpum_fastpath.verify_strict_one(key, s.receipt_signature, msg) == chain_verify(
            key, s.receipt_signature, msg)


def test_small_order_key_is_refused_where_openssl_accepts() -> None:
    """Why verify_strict and not gpu_market.receipt.verify: the identity key with R =
    identity, S = 0 "signs" every message for OpenSSL, never for the chain."""
    fast()
    ident = penc(IDENTITY)
    forged = ident + bytes(32)
    q = replace(vt.make_proof(), worker_key=ident)
    raw = encode_proof(q)
    msg = receipt_digest(receipt_for_proof(q, raw))
    assert verify(ident, forged, msg)  # OpenSSL: cofactorless, no small-order check
    assert not chain_verify(ident, forged, msg)
    assert not gpum_fastpath.verify_strict_one(ident, forged, msg)
    (got,) = fast().authenticate_many([signed(raw, request_key=ident, rsig=forged)], CFG)
    assert isinstance(got, Rejection) and got.reason == "bad_receipt_signature"


def test_batches_mixing_good_and_bad_items_keep_item_order() -> None:
    rng = random.Random(7)
    items: list[SignedProof] = []
    for i in range(200):
        k = rng.randrange(len(KEYS))  # more keys than the per-call key cache holds
        p = vt.make_proof(seq=i + 1, worker_key=PUBS[k])
        raw = encode_proof(p)
        kind = rng.choice(("good", "good", "bad_sig", "other_key", "mismatch", "truncated",
                           "trailing"))
        if kind == "good":
            items.append(signed(raw, KEYS[k], request_key=PUBS[k]))
        elif kind == "bad_sig":
            items.append(signed(raw, request_key=PUBS[k], rsig=rng.randbytes(64)))
        elif kind == "other_key":
            items.append(signed(raw, KEYS[(k + 1) % len(KEYS)], request_key=PUBS[k]))
        elif kind == "mismatch":
            items.append(signed(raw, KEYS[k], request_key=PUBS[(k + 1) % len(KEYS)]))
        elif kind == "truncated":
            items.append(signed(raw[:rng.randrange(len(raw))], KEYS[k], request_key=PUBS[k]))
        else:
            items.append(signed(raw + b"\x00", KEYS[k], request_key=PUBS[k]))
    got = assert_same(items)
    assert {type(g) for g in got} == {Authenticated, Rejection}
    one_by_one = [fast().authenticate_many([s], CFG)[0] for s in items]
    for g, o in zip(got, one_by_one, strict=True):
        assert type(g) is type(o)
        if isinstance(g, Authenticated):
            assert g == o
        else:
            assert isinstance(o, Rejection) and (g.reason, g.message) == (o.reason, o.message)
    assert fast().authenticate_many([], CFG) == []


def test_concurrent_calls_release_the_gil_and_agree() -> None:
    """Threads calling in parallel (the GIL is released while verifying) get the same
    results as one call."""
    p = vt.make_proof()
    raw = encode_proof(p)
    items = [signed(raw), signed(raw, vt.OTHER_KEY), signed(raw[:-1])] * 20
    want = [(type(r), getattr(r, "reason", None)) for r in fast().authenticate_many(items, CFG)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: fast().authenticate_many(items, CFG), range(8)))
    for res in results:
        assert [(type(r), getattr(r, "reason", None)) for r in res] == want


def test_wrong_arguments_raise() -> None:
    fast()
    good = signed(encode_proof(vt.make_proof()))
    item = (good.proof, good.receipt_signature, good.worker_key)
    with pytest.raises(TypeError):
        gpum_fastpath.authenticate_many(vt.PROGRAM, vt.MARKET, [(good.proof.hex(),) + item[1:]])
    with pytest.raises(ValueError, match="length 3"):
        gpum_fastpath.authenticate_many(vt.PROGRAM, vt.MARKET, [item[:2]])
    with pytest.raises(TypeError):
        gpum_fastpath.authenticate_many(vt.PROGRAM, vt.MARKET, "not a list")


# ---------------------------------------------------------------------------- screen_many
# The intake's fast lane (gpum_validator.fastlane): raw SignedProof JSON objects in, the
# fields the window checks need out, or None where the reference path must decide.


def as_json(s: SignedProof) -> dict[str, Any]:
    return {"proof": base64.b64encode(s.proof).decode(),
            "proof_signature": base64.b64encode(s.proof_signature).decode(),
            "receipt_signature": base64.b64encode(s.receipt_signature).decode(),
            "worker_key": vt.b58(s.worker_key)}


def reference_screen(obj: object) -> Authenticated | None:
    """``parse_signed_proof`` then ``authenticate``: the Authenticated, or None if either
    refuses."""
    try:
        return verify_mod.authenticate(parse_signed_proof(obj), CFG)
    except Rejection:
        return None


THRESHOLDS = [HealthThresholds(temp_critical_c=t, ecc_uncorrected_max=e)
              for t in (0, 70, 90, 65_535) for e in (0, 1, 2**64 - 1)]


def assert_screen_same(objs: list[Any]) -> list[tuple | None]:
    """Every item ``screen`` passes is accepted by the reference with equal fields (and the
    same health bound under any thresholds); every valid item is passed."""
    fast()
    got = fastlane.screen(objs, CFG)
    assert len(got) == len(objs)
    for i, (obj, g) in enumerate(zip(objs, got, strict=True)):
        want = reference_screen(obj)
        if want is None:
            assert g is None, f"item {i}: screened, the reference refuses {obj!r}"
            continue
        assert g is not None, f"item {i}: the reference accepts, screening refused {obj!r}"
        p, sp = want.proof, want.signed
        assert g == (p.job, p.seq, p.provider, p.worker_key, p.window_start, p.window_end,
                     p.cumulative_seconds, p.billable_seconds, p.prev_proof_hash, want.hash,
                     tuple(sorted(x.uuid for x in p.gpus)), g[fastlane.HEALTH], sp.proof,
                     sp.proof_signature, sp.receipt_signature), f"item {i}"
        length = p.window_end - p.window_start
        for th in THRESHOLDS:
            facts = SimpleNamespace(temp_critical_c=th.temp_critical_c,
                                    ecc_uncorrected_max=th.ecc_uncorrected_max)
            assert fastlane.health_bound(g[fastlane.HEALTH], length, facts) == \
                verify_mod.health_bound(p, th), f"item {i}, {th}"
    return got


def json_mutations(obj: dict[str, str]) -> list[object]:
    """Request objects that ``parse_signed_proof`` refuses or that differ in one field."""
    out: list[object] = [dict(obj, extra="x"), {k: v for k, v in obj.items() if k != "proof"},
                         dict(obj, proof=1), dict(obj, worker_key=None), [obj], "proof",
                         dict(obj, proof=""), dict(obj, proof=obj["proof"] + "\n"),
                         dict(obj, proof=obj["proof"].rstrip("=") if obj["proof"].endswith(
                             "=") else obj["proof"] + "="),  # padding missing or stray
                         dict(obj, proof=" " + obj["proof"]),
                         dict(obj, receipt_signature=base64.b64encode(bytes(63)).decode()),
                         dict(obj, proof_signature=base64.b64encode(bytes(65)).decode()),
                         dict(obj, worker_key="1" + obj["worker_key"]),
                         dict(obj, worker_key=obj["worker_key"][:-1]),
                         dict(obj, worker_key=vt.b58(vt.OTHER_PUB)),
                         dict(obj, receipt_signature=obj["proof_signature"])]
    sig = obj["receipt_signature"]  # trailing bits set in the last base64 digit: not canonical
    if sig.endswith("=="):
        last = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        i = last.index(sig[-3])
        if i % 16 == 0:
            out.append(dict(obj, receipt_signature=sig[:-3] + last[i + 1] + "=="))
    return out


@PROPERTY
@given(proofs(max_gpus=8), st.data())
def test_screening_matches_the_reference(p: WindowProof, data: Any) -> None:
    p = replace(p, program_id=vt.PROGRAM, market=vt.MARKET)
    raw = encode_proof(p)
    good = as_json(signed(raw))
    objs: list[object] = [good, as_json(signed(raw, vt.OTHER_KEY))]
    muts = mutations(p, raw)
    for _ in range(6):
        objs.append(as_json(signed(data.draw(st.sampled_from(muts))(data))))
    got = assert_screen_same(objs + json_mutations(good))
    assert got[0] is not None and got[1] is None


def test_screening_refuses_every_schema_problem_and_keeps_item_order() -> None:
    good = as_json(signed(encode_proof(vt.make_proof())))
    bad = json_mutations(good)
    got = assert_screen_same([good, *bad, good])
    assert got[0] is not None and got[-1] == got[0]
    assert got[1:-1] == [None] * len(bad)
    assert fastlane.screen([], CFG) == []


def test_a_known_key_still_refuses_a_bad_signature() -> None:
    """Keys that verified once are kept decompressed across calls; that must not let a
    later bad signature by the same key pass."""
    raw = encode_proof(vt.make_proof())
    good = as_json(signed(raw))
    assert assert_screen_same([good])[0] is not None  # the key is now known
    forged = dict(good, receipt_signature=base64.b64encode(bytes(64)).decode())
    stale = as_json(signed(encode_proof(vt.make_proof(seq=2)), receipt_of=raw))
    assert assert_screen_same([forged, stale, good])[:2] == [None, None]
