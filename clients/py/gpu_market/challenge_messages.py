"""The signed messages of hardware challenges (pure: no I/O, no clock); the layouts are
docs/wire-formats.md, "Hardware challenges", and the program's ``challenge.rs`` spells the same
bytes (``attest_hardware``, ``slash_wrong_answer``). Shared vectors:
``docs/vectors/challenge.json``.

Every message is signed as its sha256 digest (``digest``), like receipts
(``gpu_market.receipt``): a 32-byte digest of a domain-separated message, so no signature
over one kind of message reads as a signature over another unless sha256 collides.

Worker key (the prover), chain-checked::

    answer = b"gpu-market/challenge-answer/v1" || program_id || market || provider ||
             challenge_digest(32) || challenged_at:i64 || root(32)
    row    = b"gpu-market/challenge-row/v1" || program_id || market || provider ||
             challenge_digest(32) || root(32) || leaf_count:u32 || row_index:u32 ||
             leaf_hash(32) || sha256(siblings concatenated)

``challenge_digest`` is ``Challenge.challenge_id`` (sha256 of the canonical bytes) of the
challenge the GPU computed (``gpu_challenge``), ``challenged_at`` its ``issued_at``,
``leaf_hash`` is ``challenge.row_leaf`` of the opened row and ``siblings`` its Merkle path:
the row message binds the path the worker sent, so nobody but the worker can make a path
that misses its root (``slash_wrong_answer`` slashes one that does).

Validator authority (the verdict a quorum signs, chain-checked by ``attest_hardware``)::

    hardware = b"gpu-market/hardware/v1" || program_id || market || provider || worker_key ||
               gpu_model[32] (UTF-8, zero-padded) || gpu_count:u16 || vram_mib:u32 ||
               passed:u8 || challenged_at:i64 || challenge_digest(32)

Validator to worker (HTTP only, never on chain): a challenge request and the request to
open it, each bound to this program, market and provider so it cannot be replayed to
another worker::

    request = b"gpu-market/challenge-request/v1" || program_id || market || provider ||
              challenge_digest(32) || timestamp:i64
    open    = b"gpu-market/challenge-open/v1" || program_id || market || provider ||
              challenge_digest(32) || nonce(32) || timestamp:i64

Integers are little-endian. Every builder returns exactly these bytes or raises
``ValueError`` naming the bad argument; ``verify`` never raises, it returns False.

**One challenge, many GPUs.** A validator sends one ``Challenge``; GPU ``i`` of the worker
computes ``gpu_challenge(challenge, i)``, the same challenge with the seed
``sha256(GPU_SEED_DOMAIN || seed || u8 i)``, so each GPU's result is different and copying
one GPU's root to another does not answer for it. Answers and row openings name the GPU's
challenge; the verdict names the challenge the validator sent.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .challenge import Challenge
from .receipt import I64_MAX, I64_MIN, sign, verify

__all__ = [
    "ANSWER_DOMAIN",
    "GPU_SEED_DOMAIN",
    "HARDWARE_DOMAIN",
    "MAX_GPUS",
    "OPEN_DOMAIN",
    "REQUEST_DOMAIN",
    "ROW_DOMAIN",
    "HardwareVerdictArgs",
    "answer_message",
    "digest",
    "encode_gpu_model",
    "gpu_challenge",
    "hardware_message",
    "open_message",
    "request_message",
    "row_message",
    "sign_digest",
    "verify_digest",
]

ANSWER_DOMAIN = b"gpu-market/challenge-answer/v1"
ROW_DOMAIN = b"gpu-market/challenge-row/v1"
HARDWARE_DOMAIN = b"gpu-market/hardware/v1"
REQUEST_DOMAIN = b"gpu-market/challenge-request/v1"
OPEN_DOMAIN = b"gpu-market/challenge-open/v1"
GPU_SEED_DOMAIN = b"gpu-market/challenge/gpu/v1"
GPU_MODEL_LEN = 32
MAX_GPUS = 256
"""A provider declares at most 256 GPUs (``MAX_GPUS_PER_PROVIDER``)."""
MAX_LEAF_COUNT = 1 << 15
"""The program's bound on a result's rows (``challenge.rs::MAX_LEAF_COUNT``)."""


def _b32(name: str, value: object) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ValueError(f"{name} must be 32 bytes, got {type(value).__name__}")  # noqa: TRY004
    b = bytes(value)
    if len(b) != 32:
        raise ValueError(f"{name} must be exactly 32 bytes, got {len(b)}")
    return b


def _int(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")  # noqa: TRY004
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value} is out of range [{lo}, {hi}]")
    return value


def _keys(program_id: object, market: object, provider: object) -> bytes:
    return (_b32("program_id", program_id) + _b32("market", market)
            + _b32("provider", provider))


def encode_gpu_model(model: str | bytes) -> bytes:
    """The on-chain ``gpu_model``: UTF-8 zero-padded to 32 bytes (bytes: taken as they are,
    32 of them). ValueError when longer, or with a NUL inside the text."""
    if isinstance(model, (bytes, bytearray)):
        return _b32("gpu_model", model)
    if not isinstance(model, str):
        raise ValueError(f"gpu_model must be str or 32 bytes, got {type(model).__name__}")  # noqa: TRY004
    raw = model.encode("utf-8")
    if b"\0" in raw or len(raw) > GPU_MODEL_LEN:
        raise ValueError(f"gpu_model {model!r} must be at most {GPU_MODEL_LEN} UTF-8 bytes "
                         "without NUL")
    return raw.ljust(GPU_MODEL_LEN, b"\0")


def answer_message(program_id: bytes, market: bytes, provider: bytes, challenge_digest: bytes,
                   challenged_at: int, root: bytes) -> bytes:
    """The worker's commitment for one GPU (module docstring): 198 bytes."""
    return b"".join((ANSWER_DOMAIN, _keys(program_id, market, provider),
                     _b32("challenge_digest", challenge_digest),
                     struct.pack("<q", _int("challenged_at", challenged_at, I64_MIN, I64_MAX)),
                     _b32("root", root)))


def row_message(program_id: bytes, market: bytes, provider: bytes, challenge_digest: bytes,
                root: bytes, leaf_count: int, row_index: int, leaf_hash: bytes,
                siblings: Sequence[bytes]) -> bytes:
    """One opened row as the worker signs it (module docstring): 259 bytes. ``leaf_count`` is
    the challenge's ``n``; ``siblings`` the row's Merkle path, each 32 bytes."""
    path = hashlib.sha256(b"".join(_b32("sibling", s) for s in siblings)).digest()
    return b"".join((ROW_DOMAIN, _keys(program_id, market, provider),
                     _b32("challenge_digest", challenge_digest), _b32("root", root),
                     struct.pack("<II", _int("leaf_count", leaf_count, 1, MAX_LEAF_COUNT),
                                 _int("row_index", row_index, 0, leaf_count - 1)),
                     _b32("leaf_hash", leaf_hash), path))


@dataclass(frozen=True)
class HardwareVerdictArgs:
    """A verdict as ``attest_hardware`` takes it (``challenge.rs::HardwareVerdictArgs``)."""

    worker_key: bytes
    gpu_model: str
    gpu_count: int
    vram_mib: int
    passed: bool
    challenged_at: int
    challenge_digest: bytes

    def message(self, program_id: bytes, market: bytes, provider: bytes) -> bytes:
        return hardware_message(program_id, market, provider, self.worker_key, self.gpu_model,
                                self.gpu_count, self.vram_mib, self.passed,
                                self.challenged_at, self.challenge_digest)


def hardware_message(program_id: bytes, market: bytes, provider: bytes, worker_key: bytes,
                     gpu_model: str | bytes, gpu_count: int, vram_mib: int, passed: bool,
                     challenged_at: int, challenge_digest: bytes) -> bytes:
    """The verdict validators sign (module docstring): 229 bytes."""
    if not isinstance(passed, bool):
        raise ValueError(f"passed must be a bool, got {type(passed).__name__}")  # noqa: TRY004
    return b"".join((HARDWARE_DOMAIN, _keys(program_id, market, provider),
                     _b32("worker_key", worker_key), encode_gpu_model(gpu_model),
                     struct.pack("<HIBq", _int("gpu_count", gpu_count, 0, 0xFFFF),
                                 _int("vram_mib", vram_mib, 0, 0xFFFF_FFFF), int(passed),
                                 _int("challenged_at", challenged_at, I64_MIN, I64_MAX)),
                     _b32("challenge_digest", challenge_digest)))


def request_message(program_id: bytes, market: bytes, provider: bytes,
                    challenge_digest: bytes, timestamp: int) -> bytes:
    """A validator's request that a worker compute the challenge (module docstring)."""
    return b"".join((REQUEST_DOMAIN, _keys(program_id, market, provider),
                     _b32("challenge_digest", challenge_digest),
                     struct.pack("<q", _int("timestamp", timestamp, I64_MIN, I64_MAX))))


def open_message(program_id: bytes, market: bytes, provider: bytes, challenge_digest: bytes,
                 nonce: bytes, timestamp: int) -> bytes:
    """A validator's request that a worker open the rows ``nonce`` names (module docstring)."""
    return b"".join((OPEN_DOMAIN, _keys(program_id, market, provider),
                     _b32("challenge_digest", challenge_digest), _b32("nonce", nonce),
                     struct.pack("<q", _int("timestamp", timestamp, I64_MIN, I64_MAX))))


def digest(message: bytes) -> bytes:
    """``sha256(message)``: the 32 bytes a key signs."""
    return hashlib.sha256(bytes(message)).digest()


def sign_digest(signer: object, message: bytes) -> bytes:
    """Ed25519 over ``digest(message)`` by ``signer``: a 32-byte seed, an
    ``Ed25519PrivateKey`` or anything with ``sign_message`` (a solders Keypair)."""
    d = digest(message)
    sign_message = getattr(signer, "sign_message", None)
    if sign_message is not None:
        return bytes(sign_message(d))
    return sign(signer, d)  # type: ignore[arg-type]


def verify_digest(pubkey: bytes, signature: bytes, message: bytes) -> bool:
    """True iff ``signature`` is ``pubkey``'s signature of ``digest(message)``; False (never an
    exception) for anything malformed."""
    try:
        return verify(bytes(pubkey), bytes(signature), digest(message))
    except (TypeError, ValueError):
        return False


def gpu_challenge(challenge: Challenge, gpu_index: int) -> Challenge:
    """The challenge GPU ``gpu_index`` computes: ``challenge`` with the seed
    ``sha256(GPU_SEED_DOMAIN || seed || u8 gpu_index)`` (module docstring)."""
    _int("gpu_index", gpu_index, 0, MAX_GPUS - 1)
    seed = hashlib.sha256(GPU_SEED_DOMAIN + challenge.seed + bytes([gpu_index])).digest()
    return replace(challenge, seed=seed)
