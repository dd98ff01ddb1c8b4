"""Window proof: dataclasses and canonical borsh codec (pure, no I/O); the format is
docs/protocol.md, "Receipts and window proofs".

Shared unchanged by the worker (encoder, signer) and the validator (decoder, verifier).

Encoding (borsh: integers little-endian, ``[u8;32]`` raw, ``Option<T>`` = u8 tag 0/1 then
the value, ``Vec<T>`` and ``String`` = u32 length then the items / UTF-8 bytes); field
order is encoding order::

    WindowProof {
        version: u8                 (PROOF_VERSION = 3 is written; 1 and 2 are still read)
        program_id: [u8;32]
        market: [u8;32]
        job: [u8;32]
        provider: [u8;32]           (the Provider PDA)
        worker_key: [u8;32]         (the ed25519 key that signs proof and receipt)
        seq: u64                    (1, 2, 3, ... per job)
        window_start: i64           (unix seconds, inclusive)
        window_end: i64             (unix seconds, exclusive; > window_start)
        sample_interval_ms: u32     (1..=60000)
        gpus: Vec<GpuWindow>        (1..=MAX_GPUS, distinct uuids)
        process_list_hash: [u8;32]  (see ``process_list_hash``)
        prev_proof_hash: [u8;32]    (sha256 of the previous proof of this job; zeros for seq 1)
        health_flags: u32           (OR of the gpus' flags plus window-level bits)
        billable_seconds: u64       (<= window_end - window_start)
        cumulative_seconds: u64     (>= billable_seconds; sum of billable claims so far)
        workload: WorkloadWindow    (versions 2 and 3; a version-1 proof has none: state NONE)
    }
    WorkloadWindow {
        state: u8                   (WORKLOAD_NONE..=WORKLOAD_FAILED, see below)
        exit_code: Option<i32>      (the container's exit code, when it exited in the window)
        job_processes: u16          (GPU compute processes on the job's GPUs in its container)
        foreign_processes: u16      (GPU compute processes on the job's GPUs that are not)
        checkpoint: Option<CheckpointRecord>   (version 3 only: the workload's last complete
                                    checkpoint as of window_end; None in versions 1 and 2)
    }
    CheckpointRecord {
        seq: u64                    (the manifest's seq in the user's store, >= 1)
        manifest_digest: [u8;32]    (sha256 of the manifest's canonical bytes)
        total_bytes: u64            (the checkpoint's size)
        created_at: i64             (unix seconds: when it was complete)
    }
    GpuWindow {
        uuid: String                (1..=MAX_UUID_BYTES UTF-8 bytes, e.g. "GPU-8f0c...")
        samples: u32                (successful samples in the window)
        covered_seconds: u32        (one-second slots with a healthy sample; <= window length)
        util_gpu_avg_bp: Option<u16>   (basis points 0..=10000)
        util_gpu_max_bp: Option<u16>   (basis points 0..=10000)
        util_mem_avg_bp: Option<u16>   (basis points 0..=10000)
        mem_used_max_mib: Option<u32>
        mem_total_mib: Option<u32>
        temp_max_c: Option<u16>
        power_avg_mw: Option<u32>
        fan_max_pct: Option<u16>
        ecc_uncorrected_delta: Option<u64>
        health_flags: u32
    }

A metric the GPU does not report is ``None`` (tag 0), never 0. ``encode_proof`` and
``decode_proof`` apply the same checks (``WindowProof.validate``), so every accepted byte
string re-encodes to itself: ``encode_proof(decode_proof(b)) == b``. Decoding rejects
trailing bytes, option tags other than 0/1, vectors/strings over the limits, invalid
UTF-8 and unknown versions with ``ProofDecodeError``.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from .receipt import (
    I64_MAX,
    I64_MIN,
    PROOF_DOMAIN,
    U64_MAX,
    receipt_message,
    sign,
    verify,
)

__all__ = [
    "BP_MAX",
    "HEALTH_CRITICAL_MASK",
    "HEALTH_ECC_UNCORRECTED",
    "HEALTH_FAN_HIGH",
    "HEALTH_FOREIGN_PROCESS",
    "HEALTH_GPU_LOST",
    "HEALTH_NVML_ERROR",
    "HEALTH_POWER_OVER_LIMIT",
    "HEALTH_SAMPLES_MISSING",
    "HEALTH_TEMP_CRITICAL",
    "HEALTH_TEMP_WARN",
    "MAX_GPUS",
    "MAX_PROOF_BYTES",
    "MAX_UUID_BYTES",
    "PROOF_VERSION",
    "PROOF_VERSIONS",
    "WORKLOAD_EXITED",
    "WORKLOAD_FAILED",
    "WORKLOAD_NONE",
    "WORKLOAD_PENDING",
    "WORKLOAD_RESTARTING",
    "WORKLOAD_RUNNING",
    "WORKLOAD_STATE_NAMES",
    "ZERO_HASH",
    "CheckpointRecord",
    "GpuWindow",
    "ProofDecodeError",
    "ProofEncodeError",
    "ProofFormatError",
    "WindowProof",
    "WorkloadWindow",
    "decode_proof",
    "encode_proof",
    "process_list_hash",
    "proof_hash",
    "proof_signing_message",
    "receipt_for_proof",
    "sign_proof",
    "verify_proof",
]

PROOF_VERSION = 3
PROOF_VERSIONS = (1, 2, 3)
"""Versions ``decode_proof`` reads. Version 1 (before workloads) has no ``workload`` trailer;
version 2's workload has no ``checkpoint``."""
MAX_GPUS = 64
MAX_UUID_BYTES = 96
BP_MAX = 10_000
MAX_SAMPLE_INTERVAL_MS = 60_000
# Fixed part of WindowProof + MAX_GPUS * largest GpuWindow; a decoder may reject bigger input
# before parsing.
_PROOF_FIXED = (1 + 5 * 32 + 8 + 8 + 8 + 4 + 4 + 32 + 32 + 4 + 8 + 8 + (1 + 5 + 2 + 2)
                + (1 + 8 + 32 + 8 + 8))  # workload.checkpoint (version 3)
# uuid, samples, covered, 3 x Option<u16> util, Option<u32> x3 (mem used/total, power),
# Option<u16> x2 (temp, fan), Option<u64> ecc, flags.
_GPU_MAX = (4 + MAX_UUID_BYTES) + 4 + 4 + 3 * 3 + 3 * 5 + 2 * 3 + 9 + 4
MAX_PROOF_BYTES = _PROOF_FIXED + MAX_GPUS * _GPU_MAX

# health_flags bits (per GPU and, OR-ed, per window).
HEALTH_TEMP_WARN = 1 << 0
HEALTH_TEMP_CRITICAL = 1 << 1
HEALTH_FAN_HIGH = 1 << 2
HEALTH_POWER_OVER_LIMIT = 1 << 3
HEALTH_ECC_UNCORRECTED = 1 << 4
HEALTH_GPU_LOST = 1 << 5
HEALTH_SAMPLES_MISSING = 1 << 6
HEALTH_NVML_ERROR = 1 << 7
HEALTH_FOREIGN_PROCESS = 1 << 8
"""Window-level: a compute process outside the job's container ran on the job's GPUs."""

# Workload states of a window (the worst seen in it; see worker/README.md, billable policy).
WORKLOAD_NONE = 0
"""The job has no workload (GPUs only)."""
WORKLOAD_PENDING = 1
"""The spec is awaited or the container is starting."""
WORKLOAD_RUNNING = 2
WORKLOAD_EXITED = 3
WORKLOAD_RESTARTING = 4
WORKLOAD_FAILED = 5
"""The container runtime could not start the workload: the window is not billable."""
WORKLOAD_STATE_NAMES = ("none", "pending", "running", "exited", "restarting", "failed")
HEALTH_CRITICAL_MASK = HEALTH_TEMP_CRITICAL | HEALTH_ECC_UNCORRECTED | HEALTH_GPU_LOST

# Default critical thresholds of the billable policy, shared by the worker (which applies them
# to raw samples) and the validator (which re-checks a proof's aggregates against them).
DEFAULT_TEMP_CRITICAL_C = 95
"""A GPU at or above this temperature makes that second non-billable."""
DEFAULT_ECC_UNCORRECTED_MAX = 0
"""More new uncorrected ECC errors than this in a window make the whole window non-billable."""
"""Bits that make (part of) a window non-billable; see worker/README.md, billable policy."""

ZERO_HASH = bytes(32)

U16_MAX = 2**16 - 1
U32_MAX = 2**32 - 1


class ProofFormatError(ValueError):
    """A window proof violates the format (base class)."""


class ProofEncodeError(ProofFormatError):
    """A WindowProof/GpuWindow value cannot be encoded (out of range, too long, ...)."""


class ProofDecodeError(ProofFormatError):
    """Bytes are not a canonical window proof (truncated, trailing bytes, bad tag, ...)."""


def _int(err: type[ProofFormatError], name: str, v: object, lo: int, hi: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise err(f"{name} must be an int, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise err(f"{name}={v} out of range [{lo}, {hi}]")


def _opt(err: type[ProofFormatError], name: str, v: object, lo: int, hi: int) -> None:
    if v is not None:
        _int(err, name, v, lo, hi)


def _b32(err: type[ProofFormatError], name: str, v: object) -> None:
    if not isinstance(v, bytes) or len(v) != 32:
        raise err(f"{name} must be 32 bytes")


@dataclass(frozen=True)
class GpuWindow:
    """Aggregated metrics of one GPU over one window; absent metrics are None."""

    uuid: str
    samples: int
    covered_seconds: int
    util_gpu_avg_bp: int | None = None
    util_gpu_max_bp: int | None = None
    util_mem_avg_bp: int | None = None
    mem_used_max_mib: int | None = None
    mem_total_mib: int | None = None
    temp_max_c: int | None = None
    power_avg_mw: int | None = None
    fan_max_pct: int | None = None
    ecc_uncorrected_delta: int | None = None
    health_flags: int = 0

    def validate(self, err: type[ProofFormatError] = ProofEncodeError) -> None:
        """Raise ``err`` if a field is outside the format's ranges."""
        if not isinstance(self.uuid, str):
            raise err("uuid must be a str")
        n = len(self.uuid.encode("utf-8"))
        if not 1 <= n <= MAX_UUID_BYTES:
            raise err(f"uuid must be 1..{MAX_UUID_BYTES} UTF-8 bytes, got {n}")
        _int(err, "samples", self.samples, 0, U32_MAX)
        _int(err, "covered_seconds", self.covered_seconds, 0, U32_MAX)
        _opt(err, "util_gpu_avg_bp", self.util_gpu_avg_bp, 0, BP_MAX)
        _opt(err, "util_gpu_max_bp", self.util_gpu_max_bp, 0, BP_MAX)
        _opt(err, "util_mem_avg_bp", self.util_mem_avg_bp, 0, BP_MAX)
        _opt(err, "mem_used_max_mib", self.mem_used_max_mib, 0, U32_MAX)
        _opt(err, "mem_total_mib", self.mem_total_mib, 0, U32_MAX)
        _opt(err, "temp_max_c", self.temp_max_c, 0, U16_MAX)
        _opt(err, "power_avg_mw", self.power_avg_mw, 0, U32_MAX)
        _opt(err, "fan_max_pct", self.fan_max_pct, 0, U16_MAX)
        _opt(err, "ecc_uncorrected_delta", self.ecc_uncorrected_delta, 0, U64_MAX)
        _int(err, "health_flags", self.health_flags, 0, U32_MAX)


@dataclass(frozen=True)
class CheckpointRecord:
    """The last complete checkpoint of a workload as of a window's end (version-3 proofs):
    its manifest's seq and digest (``gpu_market.checkpoint_manifest``), size and time."""

    seq: int
    manifest_digest: bytes
    total_bytes: int
    created_at: int

    def validate(self, err: type[ProofFormatError] = ProofEncodeError) -> None:
        _int(err, "workload.checkpoint.seq", self.seq, 1, U64_MAX)
        _b32(err, "workload.checkpoint.manifest_digest", self.manifest_digest)
        _int(err, "workload.checkpoint.total_bytes", self.total_bytes, 0, U64_MAX)
        _int(err, "workload.checkpoint.created_at", self.created_at, I64_MIN, I64_MAX)


@dataclass(frozen=True)
class WorkloadWindow:
    """What the job's container did in a window (version-2 and -3 proofs)."""

    state: int = WORKLOAD_NONE
    exit_code: int | None = None
    job_processes: int = 0
    foreign_processes: int = 0
    checkpoint: CheckpointRecord | None = None

    def validate(self, err: type[ProofFormatError] = ProofEncodeError) -> None:
        _int(err, "workload.state", self.state, WORKLOAD_NONE, WORKLOAD_FAILED)
        _opt(err, "workload.exit_code", self.exit_code, -(2**31), 2**31 - 1)
        _int(err, "workload.job_processes", self.job_processes, 0, U16_MAX)
        _int(err, "workload.foreign_processes", self.foreign_processes, 0, U16_MAX)
        if self.checkpoint is not None:
            if not isinstance(self.checkpoint, CheckpointRecord):
                raise err("workload.checkpoint must be a CheckpointRecord or None")
            self.checkpoint.validate(err)

    @property
    def state_name(self) -> str:
        return WORKLOAD_STATE_NAMES[self.state]

    @property
    def billable(self) -> bool:
        """False for a window the billable policy pays nothing for (failed, foreign use)."""
        return self.state != WORKLOAD_FAILED and self.foreign_processes == 0


NO_WORKLOAD_WINDOW = WorkloadWindow()


@dataclass(frozen=True)
class WindowProof:
    """One signed-usage window of one job (see module docstring for the wire layout)."""

    program_id: bytes
    market: bytes
    job: bytes
    provider: bytes
    worker_key: bytes
    seq: int
    window_start: int
    window_end: int
    sample_interval_ms: int
    gpus: tuple[GpuWindow, ...]
    process_list_hash: bytes
    prev_proof_hash: bytes
    health_flags: int
    billable_seconds: int
    cumulative_seconds: int
    version: int = field(default=PROOF_VERSION)
    workload: WorkloadWindow = NO_WORKLOAD_WINDOW

    @property
    def window_seconds(self) -> int:
        return self.window_end - self.window_start

    def validate(self, err: type[ProofFormatError] = ProofEncodeError) -> None:
        """Raise ``err`` unless every field is in range and the window is consistent."""
        if self.version not in PROOF_VERSIONS:
            raise err(f"unsupported proof version {self.version!r} (expected one of "
                      f"{PROOF_VERSIONS})")
        if not isinstance(self.workload, WorkloadWindow):
            raise err("workload must be a WorkloadWindow")
        self.workload.validate(err)
        if self.version == 1 and self.workload != NO_WORKLOAD_WINDOW:
            raise err("a version-1 proof cannot carry a workload")
        if self.version == 2 and self.workload.checkpoint is not None:
            raise err("a version-2 proof cannot carry a checkpoint")
        for name in ("program_id", "market", "job", "provider", "worker_key",
                     "process_list_hash", "prev_proof_hash"):
            _b32(err, name, getattr(self, name))
        _int(err, "seq", self.seq, 0, U64_MAX)
        _int(err, "window_start", self.window_start, I64_MIN, I64_MAX)
        _int(err, "window_end", self.window_end, I64_MIN, I64_MAX)
        if self.window_end <= self.window_start:
            raise err("window_end must be after window_start")
        _int(err, "sample_interval_ms", self.sample_interval_ms, 1, MAX_SAMPLE_INTERVAL_MS)
        if not isinstance(self.gpus, tuple):
            raise err("gpus must be a tuple of GpuWindow")
        if not 1 <= len(self.gpus) <= MAX_GPUS:
            raise err(f"a proof covers 1..{MAX_GPUS} GPUs, got {len(self.gpus)}")
        seen: set[str] = set()
        length = self.window_end - self.window_start
        for g in self.gpus:
            if not isinstance(g, GpuWindow):
                raise err("gpus items must be GpuWindow")
            g.validate(err)
            if g.uuid in seen:
                raise err(f"duplicate GPU uuid {g.uuid!r}")
            seen.add(g.uuid)
            if g.covered_seconds > length:
                raise err(f"covered_seconds of {g.uuid} exceeds the window length {length}")
        _int(err, "health_flags", self.health_flags, 0, U32_MAX)
        _int(err, "billable_seconds", self.billable_seconds, 0, U64_MAX)
        _int(err, "cumulative_seconds", self.cumulative_seconds, 0, U64_MAX)
        if self.billable_seconds > length:
            raise err(f"billable_seconds {self.billable_seconds} exceeds window length {length}")
        if self.cumulative_seconds < self.billable_seconds:
            raise err("cumulative_seconds must be >= billable_seconds")


# ---------------------------------------------------------------------------- encoding


def _opt_bytes(fmt: str, v: int | None) -> bytes:
    return b"\x00" if v is None else b"\x01" + struct.pack(fmt, v)


def _encode_gpu(g: GpuWindow) -> bytes:
    u = g.uuid.encode("utf-8")
    return b"".join((
        struct.pack("<I", len(u)), u,
        struct.pack("<II", g.samples, g.covered_seconds),
        _opt_bytes("<H", g.util_gpu_avg_bp),
        _opt_bytes("<H", g.util_gpu_max_bp),
        _opt_bytes("<H", g.util_mem_avg_bp),
        _opt_bytes("<I", g.mem_used_max_mib),
        _opt_bytes("<I", g.mem_total_mib),
        _opt_bytes("<H", g.temp_max_c),
        _opt_bytes("<I", g.power_avg_mw),
        _opt_bytes("<H", g.fan_max_pct),
        _opt_bytes("<Q", g.ecc_uncorrected_delta),
        struct.pack("<I", g.health_flags),
    ))


def _encode_workload(w: WorkloadWindow, version: int) -> bytes:
    out = b"".join((struct.pack("<B", w.state), _opt_bytes("<i", w.exit_code),
                    struct.pack("<HH", w.job_processes, w.foreign_processes)))
    if version < 3:
        return out
    c = w.checkpoint
    if c is None:
        return out + b"\x00"
    return out + b"\x01" + struct.pack("<Q", c.seq) + c.manifest_digest + struct.pack(
        "<Qq", c.total_bytes, c.created_at)


def encode_proof(p: WindowProof) -> bytes:
    """Canonical borsh bytes of ``p``; raises ProofEncodeError if ``p`` is invalid."""
    p.validate(ProofEncodeError)
    out = b"".join((
        struct.pack("<B", p.version),
        p.program_id, p.market, p.job, p.provider, p.worker_key,
        struct.pack("<Qqq", p.seq, p.window_start, p.window_end),
        struct.pack("<I", p.sample_interval_ms),
        struct.pack("<I", len(p.gpus)),
        *(_encode_gpu(g) for g in p.gpus),
        p.process_list_hash, p.prev_proof_hash,
        struct.pack("<IQQ", p.health_flags, p.billable_seconds, p.cumulative_seconds),
        _encode_workload(p.workload, p.version) if p.version >= 2 else b"",
    ))
    assert len(out) <= MAX_PROOF_BYTES
    return out


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise ProofDecodeError(f"truncated proof: {what} needs {n} bytes at offset {self.pos}")
        b = self.data[self.pos:end]
        self.pos = end
        return b

    def num(self, fmt: str, what: str) -> int:
        (v,) = struct.unpack(fmt, self.take(struct.calcsize(fmt), what))
        return int(v)

    def b32(self, what: str) -> bytes:
        return self.take(32, what)

    def opt(self, fmt: str, what: str) -> int | None:
        tag = self.take(1, what)[0]
        if tag == 0:
            return None
        if tag != 1:
            raise ProofDecodeError(f"bad Option tag {tag} for {what} at offset {self.pos - 1}")
        return self.num(fmt, what)

    def string(self, what: str, max_len: int) -> str:
        n = self.num("<I", what + " length")
        if n > max_len:
            raise ProofDecodeError(f"{what} is {n} bytes, more than the limit {max_len}")
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProofDecodeError(f"{what} is not valid UTF-8") from e


def _decode_gpu(r: _Reader, i: int) -> GpuWindow:
    w = f"gpus[{i}]"
    return GpuWindow(
        uuid=r.string(w + ".uuid", MAX_UUID_BYTES),
        samples=r.num("<I", w + ".samples"),
        covered_seconds=r.num("<I", w + ".covered_seconds"),
        util_gpu_avg_bp=r.opt("<H", w + ".util_gpu_avg_bp"),
        util_gpu_max_bp=r.opt("<H", w + ".util_gpu_max_bp"),
        util_mem_avg_bp=r.opt("<H", w + ".util_mem_avg_bp"),
        mem_used_max_mib=r.opt("<I", w + ".mem_used_max_mib"),
        mem_total_mib=r.opt("<I", w + ".mem_total_mib"),
        temp_max_c=r.opt("<H", w + ".temp_max_c"),
        power_avg_mw=r.opt("<I", w + ".power_avg_mw"),
        fan_max_pct=r.opt("<H", w + ".fan_max_pct"),
        ecc_uncorrected_delta=r.opt("<Q", w + ".ecc_uncorrected_delta"),
        health_flags=r.num("<I", w + ".health_flags"),
    )


def _decode_checkpoint(r: _Reader) -> CheckpointRecord | None:
    what = "workload.checkpoint"
    tag = r.take(1, what)[0]
    if tag == 0:
        return None
    if tag != 1:
        raise ProofDecodeError(f"bad Option tag {tag} for {what} at offset {r.pos - 1}")
    return CheckpointRecord(seq=r.num("<Q", what + ".seq"),
                            manifest_digest=r.b32(what + ".manifest_digest"),
                            total_bytes=r.num("<Q", what + ".total_bytes"),
                            created_at=r.num("<q", what + ".created_at"))


def decode_proof(data: bytes) -> WindowProof:
    """Parse canonical proof bytes; raises ProofDecodeError on anything non-canonical."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProofDecodeError(f"proof must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_PROOF_BYTES:
        raise ProofDecodeError(f"proof is {len(data)} bytes, more than {MAX_PROOF_BYTES}")
    r = _Reader(data)
    version = r.num("<B", "version")
    if version not in PROOF_VERSIONS:
        raise ProofDecodeError(f"unsupported proof version {version} (expected one of "
                               f"{PROOF_VERSIONS})")
    program_id, market, job = r.b32("program_id"), r.b32("market"), r.b32("job")
    provider, worker_key = r.b32("provider"), r.b32("worker_key")
    seq = r.num("<Q", "seq")
    window_start = r.num("<q", "window_start")
    window_end = r.num("<q", "window_end")
    sample_interval_ms = r.num("<I", "sample_interval_ms")
    n = r.num("<I", "gpus length")
    if n > MAX_GPUS:
        raise ProofDecodeError(f"proof lists {n} GPUs, more than the limit {MAX_GPUS}")
    gpus = tuple(_decode_gpu(r, i) for i in range(n))
    process_hash, prev_hash = r.b32("process_list_hash"), r.b32("prev_proof_hash")
    health_flags = r.num("<I", "health_flags")
    billable = r.num("<Q", "billable_seconds")
    cumulative = r.num("<Q", "cumulative_seconds")
    workload = NO_WORKLOAD_WINDOW
    if version >= 2:
        workload = WorkloadWindow(
            state=r.num("<B", "workload.state"),
            exit_code=r.opt("<i", "workload.exit_code"),
            job_processes=r.num("<H", "workload.job_processes"),
            foreign_processes=r.num("<H", "workload.foreign_processes"),
            checkpoint=_decode_checkpoint(r) if version >= 3 else None,
        )
    if r.pos != len(data):
        raise ProofDecodeError(f"{len(data) - r.pos} trailing bytes after the proof")
    p = WindowProof(
        program_id=program_id, market=market, job=job, provider=provider,
        worker_key=worker_key, seq=seq, window_start=window_start, window_end=window_end,
        sample_interval_ms=sample_interval_ms, gpus=gpus, process_list_hash=process_hash,
        prev_proof_hash=prev_hash, health_flags=health_flags, billable_seconds=billable,
        cumulative_seconds=cumulative, version=version, workload=workload,
    )
    p.validate(ProofDecodeError)
    return p


# ---------------------------------------------------------------------------- hashing, signing


def proof_hash(proof_bytes: bytes) -> bytes:
    """sha256 of the canonical proof bytes (the chain link and the receipt's proof_hash)."""
    return hashlib.sha256(bytes(proof_bytes)).digest()


def process_list_hash(entries: Iterable[tuple[str, int, int | None]]) -> bytes:
    """sha256 of the canonical process list of a window.

    ``entries`` are (gpu_uuid, pid, used_gpu_memory_bytes or None). Duplicates of a
    (uuid, pid) keep the largest known memory. Encoding: u32 count, then per entry sorted
    by (uuid, pid): String uuid, u32 pid, Option<u64> used bytes. An empty list hashes
    the 4 zero bytes of its count.
    """
    best: dict[tuple[str, int], int | None] = {}
    for uuid, pid, used in entries:
        key = (uuid, pid)
        prev = best.get(key)
        if key not in best or (used is not None and (prev is None or used > prev)):
            best[key] = used
    parts = [struct.pack("<I", len(best))]
    for (uuid, pid), used in sorted(best.items()):
        u = uuid.encode("utf-8")
        parts.append(struct.pack("<I", len(u)) + u + struct.pack("<I", pid & U32_MAX))
        parts.append(_opt_bytes("<Q", None if used is None else min(used, U64_MAX)))
    return hashlib.sha256(b"".join(parts)).digest()


def proof_signing_message(proof_bytes: bytes) -> bytes:
    """The bytes the worker key signs for a proof: PROOF_DOMAIN || proof_bytes."""
    return PROOF_DOMAIN + bytes(proof_bytes)


def sign_proof(private_key, proof_bytes: bytes) -> bytes:
    """Ed25519 signature over PROOF_DOMAIN || proof_bytes (key or 32-byte seed)."""
    return sign(private_key, proof_signing_message(proof_bytes))


def verify_proof(pubkey32: bytes, sig64: bytes, proof_bytes: bytes) -> bool:
    """True iff ``sig64`` signs PROOF_DOMAIN || proof_bytes under ``pubkey32``."""
    return verify(pubkey32, sig64, proof_signing_message(proof_bytes))


def receipt_for_proof(p: WindowProof, proof_bytes: bytes) -> bytes:
    """Receipt message (receipt.receipt_message) for the window proven by ``proof_bytes``."""
    return receipt_message(
        p.program_id, p.market, p.job, p.seq, p.cumulative_seconds, p.window_end,
        proof_hash(proof_bytes),
    )
