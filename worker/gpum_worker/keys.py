"""Worker key file (Solana CLI format); base58 of keys (``gpu_market.base58``, re-exported
for the worker's modules).

File format: a JSON array of 64 integers, ``seed(32) || pubkey(32)``, mode 0600.
``load_worker_key`` refuses a file readable or writable by group/others, a malformed
file, or one whose pubkey half does not match its seed.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from gpu_market.base58 import b58decode, b58encode
from gpu_market.receipt import private_key_from_seed, public_key_bytes

from .errors import KeyFileError

__all__ = ["WorkerKey", "b58decode", "b58encode", "decode_pubkey", "generate_key_file", "load_worker_key"]


def decode_pubkey(text: str, what: str = "public key") -> bytes:
    """32 bytes from a base58 pubkey; ValueError naming ``what`` otherwise."""
    try:
        raw = b58decode(text.strip())
    except ValueError as e:
        raise ValueError(f"{what} {text!r} is not base58: {e}") from None
    if len(raw) != 32:
        raise ValueError(f"{what} {text!r} is not a 32-byte base58 public key")
    return raw


@dataclass(frozen=True)
class WorkerKey:
    private_key: Ed25519PrivateKey
    seed: bytes
    pubkey: bytes

    @property
    def pubkey_b58(self) -> str:
        return b58encode(self.pubkey)

    @property
    def secret_bytes(self) -> bytes:
        """The 64-byte Solana secret key (seed || pubkey)."""
        return self.seed + self.pubkey


def generate_key_file(path: Path, force: bool = False) -> WorkerKey:
    """Create a new key file with mode 0600 (atomically); refuse to overwrite unless force."""
    path = Path(path)
    if path.exists() and not force:
        raise KeyFileError(f"{path} already exists; refusing to overwrite it (use --force)")
    if not path.parent.exists():
        raise KeyFileError(f"directory {path.parent} does not exist")
    seed = os.urandom(32)
    sk = private_key_from_seed(seed)
    key = WorkerKey(sk, seed, public_key_bytes(sk))
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(list(key.secret_bytes), f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return key


def load_worker_key(path: Path) -> WorkerKey:
    """Load and check a worker key file; KeyFileError with the fix on any problem."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise KeyFileError(
            f"worker key file {path} not found; create one with `gpum-worker keygen --out {path}`"
        ) from None
    except OSError as e:
        raise KeyFileError(f"cannot read worker key file {path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise KeyFileError(f"worker key file {path} is not a regular file")
    if st.st_mode & 0o077:
        raise KeyFileError(
            f"worker key file {path} is accessible by group/others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); run: chmod 600 {path}"
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise KeyFileError(f"worker key file {path} is not valid JSON: {e}") from None
    if (not isinstance(data, list) or len(data) != 64
            or not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255
                       for b in data)):
        raise KeyFileError(
            f"worker key file {path} must be a JSON array of 64 bytes (Solana keypair format)"
        )
    raw = bytes(data)
    seed, pub = raw[:32], raw[32:]
    sk = private_key_from_seed(seed)
    if public_key_bytes(sk) != pub:
        raise KeyFileError(f"worker key file {path} is corrupt: its public key does not match "
                           "its secret key")
    return WorkerKey(sk, seed, pub)
