"""A checkpoint's manifest: the list of files it holds and their content digests, and the
line of checkpoints it continues (pure: no I/O). ``gpu_market.checkpoint`` writes and reads
them; the store's layout is there.

JSON form (canonical bytes: ``json.dumps(obj, sort_keys=True, separators=(",", ":"),
ensure_ascii=True)``; ``digest`` = sha256 of them)::

    {"version": 2,
     "seq": 7,                              1, 2, 3, ... per store prefix
     "created_at": 1767225600,              unix seconds: when the checkpoint was complete
     "parent": "<64 hex>" | null,           the digest of the manifest this one was built on
                                            (the one its writer restored, or its own previous
                                            one); null: built on an empty store
     "job": "<base58>" | null,              the job (account address) whose worker wrote it;
                                            null: a writer that is no job
     "files": [{"path": "model/step.pt",    relative, "/"-separated, no "." or ".." parts
                "size": 123,                bytes
                "sha256": "<64 hex>",       of the whole file
                "mode": 420,                permission bits (0..0o777)
                "chunks": ["<64 hex>", ...] only when size > CHUNK_BYTES: the sha256 of each
               }, ...],                     CHUNK_BYTES piece, in order
     "total_bytes": 123}                    the sum of the sizes

A file's content is stored as blobs named by their sha256: the whole file when it is at most
``CHUNK_BYTES`` (none when empty), else one blob per piece. ``files`` is sorted by path, each
path once, and no path is a directory of another. :func:`parse_manifest` accepts exactly the
canonical bytes of a valid manifest, so a manifest's digest names one list of files and one
parent.

Version 1 manifests (written before the line of checkpoints was recorded) have neither
``parent`` nor ``job``; they stay readable, with the digest they always had, and are read as
parentless and written by no known job. Only version 2 is written.

**Who may write next** (:func:`may_write_after`): a writer writes the next manifest only when
the store's newest manifest is its parent, so a writer holding an older line (a worker that
comes back after its job moved to another provider) never hides a newer checkpoint. Two
exceptions lose nothing: an empty store (nothing newer to hide), and a newest manifest written
by the writer's own job (its own write whose local record was lost: one job's checkpoint
directory is on one machine, so its data is at least as new).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from .proof import CheckpointRecord

__all__ = [
    "CHUNK_BYTES",
    "MANIFEST_VERSION",
    "MAX_FILES",
    "MAX_MANIFEST_BYTES",
    "MAX_PATH_BYTES",
    "FileEntry",
    "Manifest",
    "ManifestError",
    "may_write_after",
    "parse_manifest",
]

MANIFEST_VERSION = 2
"""The version written. Version 1 (no ``parent``, no ``job``) is still read."""
READ_VERSIONS = (1, 2)
CHUNK_BYTES = 32 << 20
"""A file larger than this is stored in pieces of this size (the last one shorter)."""
MAX_FILES = 100_000
MAX_PATH_BYTES = 4096
MAX_MANIFEST_BYTES = 32 << 20
"""A longer manifest is neither written nor read."""
MAX_SEQ = 2**63 - 1
_HEX64 = re.compile(r"[0-9a-f]{64}")
_JOB = re.compile(r"[1-9A-HJ-NP-Za-km-z]{32,44}")
_KEYS_V1 = frozenset({"version", "seq", "created_at", "files", "total_bytes"})
_KEYS = {1: _KEYS_V1, 2: _KEYS_V1 | {"parent", "job"}}
_FILE_KEYS = frozenset({"path", "size", "sha256", "mode", "chunks"})


class ManifestError(ValueError):
    """Bytes or values that are not a valid manifest (the message says which part)."""


def _int(name: str, v: object, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ManifestError(f"{name} must be an integer {lo}..{hi}, got {v!r}")
    return v


def _check_path(path: object) -> str:
    if not isinstance(path, str) or not path:
        raise ManifestError(f"a file path must be a non-empty string, got {path!r}")
    try:
        n = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise ManifestError(f"file path {path!r} is not valid Unicode") from None
    if n > MAX_PATH_BYTES or "\x00" in path:
        raise ManifestError(f"file path {path[:80]!r} is over {MAX_PATH_BYTES} bytes or has NUL")
    if any(p in ("", ".", "..") for p in path.split("/")):
        raise ManifestError(f"file path {path!r} must be relative without '', '.' or '..' parts")
    return path


def chunk_count(size: int) -> int:
    """Pieces a file of ``size`` bytes is stored in (0 for an empty file)."""
    return -(-size // CHUNK_BYTES)


@dataclass(frozen=True)
class FileEntry:
    """One regular file of a checkpoint (see the module docstring)."""

    path: str
    size: int
    sha256: str
    mode: int = 0o644
    chunks: tuple[str, ...] = ()

    def validate(self) -> None:
        _check_path(self.path)
        _int(f"{self.path}: size", self.size, 0, 2**63 - 1)
        _int(f"{self.path}: mode", self.mode, 0, 0o777)
        if not isinstance(self.sha256, str) or not _HEX64.fullmatch(self.sha256):
            raise ManifestError(f"{self.path}: sha256 must be 64 lowercase hex digits")
        if not isinstance(self.chunks, tuple):
            raise ManifestError(f"{self.path}: chunks must be a tuple")
        want = chunk_count(self.size) if self.size > CHUNK_BYTES else 0
        if len(self.chunks) != want:
            raise ManifestError(
                f"{self.path}: a file of {self.size} bytes has {want} chunk digests, "
                f"got {len(self.chunks)}")
        for c in self.chunks:
            if not isinstance(c, str) or not _HEX64.fullmatch(c):
                raise ManifestError(f"{self.path}: chunk digests must be 64 lowercase hex digits")
        if self.size == 0 and self.sha256 != hashlib.sha256(b"").hexdigest():
            raise ManifestError(f"{self.path}: an empty file's sha256 is that of no bytes")

    @property
    def blobs(self) -> tuple[str, ...]:
        """The blob digests holding the file's content, in order."""
        if self.size == 0:
            return ()
        return self.chunks or (self.sha256,)

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"path": self.path, "size": self.size, "sha256": self.sha256,
                               "mode": self.mode}
        if self.chunks:
            obj["chunks"] = list(self.chunks)
        return obj


@dataclass(frozen=True)
class Manifest:
    """A complete checkpoint: every blob it names was stored before it was written.
    ``parent``: the 32-byte digest of the manifest it was built on (None: none); ``job``: the
    base58 address of the job that wrote it (None: none). Both are None in version 1."""

    seq: int
    created_at: int
    files: tuple[FileEntry, ...]
    version: int = MANIFEST_VERSION
    parent: bytes | None = None
    job: str | None = None

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def validate(self) -> None:
        if isinstance(self.version, bool) or self.version not in READ_VERSIONS:
            raise ManifestError(f"manifest version {self.version!r} is not one of "
                                f"{', '.join(map(str, READ_VERSIONS))}")
        if self.version == 1 and (self.parent is not None or self.job is not None):
            raise ManifestError("a version 1 manifest names no parent and no job")
        if self.parent is not None and (not isinstance(self.parent, bytes)
                                        or len(self.parent) != 32):
            raise ManifestError("parent must be a 32-byte manifest digest or None")
        if self.job is not None and (not isinstance(self.job, str)
                                     or not _JOB.fullmatch(self.job)):
            raise ManifestError(f"job must be a base58 account address or None, got "
                                f"{self.job!r:.60}")
        _int("seq", self.seq, 1, MAX_SEQ)
        _int("created_at", self.created_at, 0, 2**63 - 1)
        if not isinstance(self.files, tuple) or len(self.files) > MAX_FILES:
            raise ManifestError(f"files must be a tuple of at most {MAX_FILES} FileEntry")
        dirs: set[str] = set()
        prev = None
        for f in self.files:
            if not isinstance(f, FileEntry):
                raise ManifestError("files must hold FileEntry items")
            f.validate()
            if prev is not None and f.path <= prev:
                raise ManifestError(f"files must be sorted by path, each once ({f.path!r})")
            prev = f.path
            parts = f.path.split("/")
            dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
        clash = sorted(dirs & {f.path for f in self.files})
        if clash:
            raise ManifestError(f"{clash[0]!r} is both a file and a directory")

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"version": self.version, "seq": self.seq,
                               "created_at": self.created_at,
                               "files": [f.to_json() for f in self.files],
                               "total_bytes": self.total_bytes}
        if self.version >= 2:
            obj["parent"] = None if self.parent is None else self.parent.hex()
            obj["job"] = self.job
        return obj

    def canonical_bytes(self) -> bytes:
        self.validate()
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=True).encode()

    @property
    def digest(self) -> bytes:
        """sha256 of the canonical bytes (32 bytes): the manifest's name in window proofs and
        in its children's ``parent``."""
        return hashlib.sha256(self.canonical_bytes()).digest()

    def record(self) -> CheckpointRecord:
        """What a window proof states about this checkpoint."""
        return CheckpointRecord(seq=self.seq, manifest_digest=self.digest,
                                total_bytes=self.total_bytes, created_at=self.created_at)

    def same_files(self, other: Manifest | None) -> bool:
        return other is not None and other.files == self.files


def may_write_after(newest: Manifest | None, parent: bytes | None, job: str | None) -> bool:
    """Whether a writer that built on the manifest whose digest is ``parent`` (None: on
    nothing), for ``job`` (None: no job), may write the next manifest of a store whose newest
    manifest is ``newest`` (None: the store has none). See the module docstring."""
    if newest is None:
        return True
    if parent is not None and newest.digest == parent:
        return True
    return job is not None and newest.job == job


def _no_dup(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ManifestError(f"the manifest has the key {k!r} twice in one object")
        out[k] = v
    return out


def _no_float(text: str) -> Any:
    raise ManifestError(f"the manifest has the number {text}; only integers are allowed")


def parse_manifest(data: bytes) -> Manifest:
    """The manifest whose canonical bytes are ``data``; ManifestError for anything else
    (over ``MAX_MANIFEST_BYTES``, not JSON, unknown or missing keys, invalid values, or valid
    but not canonical)."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"the manifest is over {MAX_MANIFEST_BYTES} bytes")
    try:
        obj = json.loads(data.decode("utf-8"), object_pairs_hook=_no_dup,
                         parse_float=_no_float, parse_constant=_no_float)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ManifestError(f"the manifest is not JSON: {e}") from None
    version = obj.get("version") if isinstance(obj, dict) else None
    keys = _KEYS.get(version) if isinstance(version, int) and not isinstance(version, bool) \
        else None
    if keys is None:
        raise ManifestError(f"a manifest is an object whose version is one of "
                            f"{', '.join(map(str, READ_VERSIONS))}, got {version!r:.40}")
    if set(obj) != keys:
        raise ManifestError(f"a version {version} manifest is an object with exactly the keys "
                            f"{sorted(keys)}")
    parent = obj.get("parent")
    if parent is not None and (not isinstance(parent, str) or not _HEX64.fullmatch(parent)):
        raise ManifestError("parent must be 64 lowercase hex digits or null")
    files_json = obj["files"]
    if not isinstance(files_json, list) or len(files_json) > MAX_FILES:
        raise ManifestError(f"files must be an array of at most {MAX_FILES} objects")
    files = []
    for item in files_json:
        if not isinstance(item, dict) or not {"path", "size", "sha256", "mode"} <= set(item) \
                or not set(item) <= _FILE_KEYS:
            raise ManifestError(f"each file is an object with the keys {sorted(_FILE_KEYS)} "
                                "(chunks only for large files)")
        chunks = item.get("chunks", [])
        if not isinstance(chunks, list) or ("chunks" in item and not chunks):
            raise ManifestError("chunks must be a non-empty array when present")
        files.append(FileEntry(path=item["path"], size=item["size"], sha256=item["sha256"],
                               mode=item["mode"], chunks=tuple(chunks)))
    m = Manifest(seq=obj["seq"], created_at=obj["created_at"], files=tuple(files),
                 version=version, parent=None if parent is None else bytes.fromhex(parent),
                 job=obj.get("job"))
    m.validate()
    if obj["total_bytes"] != m.total_bytes or isinstance(obj["total_bytes"], bool):
        raise ManifestError(f"total_bytes {obj['total_bytes']!r} is not the sum of the sizes "
                            f"({m.total_bytes})")
    if m.canonical_bytes() != data:
        raise ManifestError("the manifest is valid JSON but not in canonical form")
    return m
