"""Checkpoints of a workload's directory in the user's S3-compatible store: the client used by
the user's side (``gpum run`` checks the store before money moves) and by the provider's
worker (which uploads and restores). The spec's ``checkpoint`` section is
``gpu_market.checkpoint_spec``; the manifest ``gpu_market.checkpoint_manifest``.

Store layout under ``s3://bucket/prefix``::

    <prefix>/blobs/<sha256 hex>           a file's content, or one CHUNK_BYTES piece of it
    <prefix>/manifests/<seq:016d>.json    a manifest, written after every blob it names

Guarantees of :class:`CheckpointStore`:

* **Complete or absent.** ``upload`` stores every blob first and the manifest last, in one
  PUT, so a manifest exists only when all its blobs do; an upload that stops half-way (store
  failure, deadline, a killed process) leaves blobs without a manifest, which no reader
  sees. A file that changes while it is read (size, mtime or ctime differ before and after)
  makes ``upload`` write no manifest and return None: the next sync retries.
* **One line of checkpoints, never hidden by an older one.** Every manifest names its
  parent (the manifest its writer built on: the one it restored, or its own previous one)
  and the job that wrote it. ``upload`` and ``claim`` write only when the store's newest
  manifest is the writer's parent (``checkpoint_manifest.may_write_after``: or the store is
  empty, or the newest is the same job's own), and write it as the next seq with
  ``If-None-Match: *``, so of two writers on the same parent exactly one wins and a
  manifest is never overwritten. Otherwise nothing is written and
  :class:`CheckpointSuperseded` names the job of the newer checkpoint: a writer that
  restored an older checkpoint (a worker back after its job moved on) never becomes the
  newest. ``claim`` (a manifest of the files just restored, written before the job's
  container starts) makes the restoring job the owner of the line at once.
* **Content-addressed and verified.** A blob is sent with its sha256 as the request's
  ``x-amz-checksum-sha256``, so a store that checks it never keeps other bytes under that
  name; ``restore`` checks every blob's length and sha256 and every file's sha256 anyway,
  and a mismatch is a :class:`CheckpointStoreError` (nothing restored).
* **Incremental.** Blobs named by the previous manifest (while the store holds manifests; a
  store that lost every manifest gets every blob again), or stored earlier by this store
  object, are not sent again; unchanged files are not read again (their size, mtime, ctime
  and inode are remembered). A sync whose files equal the previous manifest's writes
  nothing and returns the previous manifest. Each upload lists the manifests and reads the
  newest (the rule above).
* **Old data goes.** A writer deletes the manifest ``KEEP_MANIFESTS`` seqs older than the
  one it wrote, and after every ``SWEEP_EVERY`` manifests it sweeps the blobs that no manifest
  left in the store names and that are older than ``SWEEP_MIN_AGE_S`` (``sweep``): a
  long-running job's store holds its last checkpoints, not every version of every file. A
  sweep deletes nothing unless it read every manifest, and a failed sweep never fails the
  upload.
* **Bounded.** Every request has a connect and a read timeout and at most ``max_attempts``
  tries; every operation (``check``, ``latest``, ``upload``, ``restore``) ends by its
  ``deadline_s`` (checked before each request and between blob pieces); reads are capped
  (a manifest at ``MAX_MANIFEST_BYTES``, a blob at its length in the manifest); a
  checkpoint over the spec's ``max_mib`` is refused before anything is written
  (:class:`CheckpointTooLarge`).
* **Atomic restore.** ``restore`` writes into a temporary directory beside the target,
  verifies everything, then swaps it into place with one rename (``renameat2`` with
  ``RENAME_EXCHANGE`` when the target exists and is not empty): the target is the old
  directory or the complete new one, never a mix.
* **Secrets stay secret.** :class:`Credentials` never shows the secret key in its ``repr``;
  no message of this module contains either key; botocore's debug log (which prints request
  headers) is held at WARNING.

Only regular files are stored (with their permission bits); symlinks, devices, sockets,
FIFOs, other filesystems mounted inside and names that are not UTF-8 are skipped with a log
note, and a symlink is never followed. Empty directories are not kept.
"""

from __future__ import annotations

import base64
import configparser
import contextlib
import ctypes
import errno
import hashlib
import logging
import os
import re
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checkpoint_manifest import (
    CHUNK_BYTES,
    MAX_FILES,
    MAX_MANIFEST_BYTES,
    MAX_PATH_BYTES,
    FileEntry,
    Manifest,
    ManifestError,
    may_write_after,
    parse_manifest,
)
from .checkpoint_spec import CheckpointConfig, CheckpointSpec
from .spec_checks import MAX_ITEM_BYTES, WorkloadSpecError, check_secret_b64
from .workload import open_secret, seal_secret

__all__ = [
    "DEFAULT_DEADLINE_S",
    "KEEP_MANIFESTS",
    "SWEEP_EVERY",
    "CheckpointConfig",
    "CheckpointError",
    "CheckpointSpec",
    "CheckpointStore",
    "CheckpointStoreError",
    "CheckpointSuperseded",
    "CheckpointTooLarge",
    "Credentials",
    "Manifest",
    "open_checkpoint_credentials",
    "operation_deadline_s",
    "seal_checkpoint",
]

log = logging.getLogger("gpu_market.checkpoint")
# botocore's debug log prints every request's headers, the access key id among them.
for _name in ("botocore", "boto3", "s3transfer", "urllib3"):
    _logger = logging.getLogger(_name)
    _logger.setLevel(max(_logger.level, logging.WARNING))

DEFAULT_DEADLINE_S = 600.0
"""The total time of one ``check``/``latest``/``upload``/``restore`` unless told otherwise."""
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
MAX_ATTEMPTS = 3
KEEP_MANIFESTS = 16
"""An upload deletes the manifest this many seqs older than the one it wrote."""
MAX_MANIFEST_TRIES = 8
"""``latest`` reads at most this many of the newest manifests looking for one that verifies."""
MAX_LIST_PAGES = 200
SWEEP_EVERY = 16
"""A writer sweeps unreferenced blobs after every this many manifests it writes."""
SWEEP_MIN_AGE_S = 3 * 3600
"""A blob younger than this is never swept: it may belong to a manifest being written (an
upload stores its blobs first and may take up to its deadline, ``DEFAULT_DEADLINE_S``)."""
MAX_SWEEP_MANIFESTS = 64
"""A sweep reads every manifest in the store; with more than this (old ones that failed to be
deleted) it deletes nothing and says so."""
_MANIFEST_NAME = re.compile(r"([0-9]{16})\.json")
_KEY_CHARS = re.compile(r"[!-~]+")  # printable ASCII, no space
_RENAME_EXCHANGE = 2


class CheckpointError(Exception):
    """A checkpoint cannot be taken or restored; the message says why and what to do."""


class CheckpointStoreError(CheckpointError):
    """The store failed or refused. ``kind``: "unreachable", "credentials", "bucket",
    "permission", "corrupt" (a manifest or blob is missing or does not verify), "conflict"
    (a manifest seq is taken; ``upload`` and ``claim`` raise CheckpointSuperseded for it),
    "deadline" or "other"."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class CheckpointSuperseded(CheckpointError):
    """The store's newest checkpoint is not the one this writer built on (another job wrote
    after it, or raced it to the same seq); nothing was written. ``newest``: that manifest
    (None when it could not be read); ``job``: the job that wrote it (None: unknown)."""

    def __init__(self, newest: Manifest | None) -> None:
        self.newest = newest
        self.job = None if newest is None else newest.job
        who = f"job {self.job}" if self.job else "a writer that names no job"
        super().__init__(f"the store moved on (newer checkpoint by {who})")


class CheckpointTooLarge(CheckpointError):
    """The directory holds more than the spec's ``max_mib`` (or more than ``MAX_FILES``
    files); nothing was written."""


# ----------------------------------------------------------------------------- credentials


@dataclass(frozen=True)
class Credentials:
    """An S3 access key: ``access_key_id`` and ``secret_access_key`` (printable ASCII without
    spaces, at most 4096 bytes each). Its ``repr`` shows neither."""

    access_key_id: str = field(repr=False)
    secret_access_key: str = field(repr=False)

    def __post_init__(self) -> None:
        for name in ("access_key_id", "secret_access_key"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _KEY_CHARS.fullmatch(value) \
                    or len(value) > MAX_ITEM_BYTES:
                raise CheckpointError(
                    f"the store's {name.replace('_', ' ')} must be 1..{MAX_ITEM_BYTES} "
                    "printable ASCII characters without spaces")

    def __repr__(self) -> str:
        return "Credentials(<hidden>)"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials:
        """From ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``."""
        env = os.environ if env is None else env
        key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
        if not key or not secret:
            raise CheckpointError(
                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to the checkpoint store's "
                "access key (they are sealed to the provider's worker key, never sent in the "
                "clear)")
        return cls(key.strip(), secret.strip())

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], profile: str = "default") -> Credentials:
        """From an AWS shared credentials file (``[profile]`` with ``aws_access_key_id`` and
        ``aws_secret_access_key``)."""
        parser = configparser.ConfigParser(interpolation=None)
        try:
            with open(path, encoding="utf-8") as f:
                parser.read_file(f)
        except (OSError, UnicodeDecodeError, configparser.Error) as e:
            raise CheckpointError(f"cannot read the credentials file {path}: {e}") from None
        if not parser.has_section(profile):
            raise CheckpointError(f"the credentials file {path} has no [{profile}] profile")
        section = parser[profile]
        key = section.get("aws_access_key_id")
        secret = section.get("aws_secret_access_key")
        if not key or not secret:
            raise CheckpointError(f"[{profile}] of {path} needs aws_access_key_id and "
                                  "aws_secret_access_key")
        return cls(key.strip(), secret.strip())


def seal_checkpoint(config: CheckpointConfig, creds: Credentials,
                    worker_key: bytes) -> CheckpointSpec:
    """The spec's ``checkpoint`` value: ``config`` (validated) with both keys sealed to the
    provider's ed25519 ``worker_key`` (32 bytes or a solders Pubkey), like ``secret_env``."""
    config.validate()
    if not isinstance(creds, Credentials):
        raise TypeError("creds must be Credentials")

    def seal(text: str) -> str:
        return base64.b64encode(seal_secret(worker_key, text.encode("ascii"))).decode("ascii")

    spec = CheckpointSpec(config, seal(creds.access_key_id), seal(creds.secret_access_key))
    spec.validate()
    return spec


def open_checkpoint_credentials(worker_seed: bytes, spec: CheckpointSpec) -> Credentials:
    """Worker side: the store's keys opened with the worker key's seed (in memory only).
    WorkloadSpecError when they were sealed to another key or are not a valid key pair."""
    out = []
    for name in ("access_key_id", "secret_access_key"):
        field_name = f"checkpoint.{name}"
        raw = check_secret_b64(field_name, getattr(spec, name))
        try:
            out.append(open_secret(worker_seed, raw).decode("ascii"))
        except WorkloadSpecError as e:
            raise WorkloadSpecError(f"{field_name}: {e}") from None
        except UnicodeDecodeError:
            raise WorkloadSpecError(f"{field_name} does not decrypt to ASCII text") from None
    try:
        return Credentials(*out)
    except CheckpointError as e:
        raise WorkloadSpecError(str(e)) from None


def operation_deadline_s(config: CheckpointConfig) -> float:
    """A deadline for one upload or restore of a checkpoint of up to ``config.max_mib``:
    10 minutes plus the time to move that much at 8 MiB/s, at most a day."""
    return min(86_400.0, DEFAULT_DEADLINE_S + config.max_mib / 8)


# ----------------------------------------------------------------------------- the store


class _Deadline:
    def __init__(self, seconds: float, what: str) -> None:
        self.end = time.monotonic() + seconds
        self.seconds = seconds
        self.what = what

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise CheckpointStoreError(
                "deadline", f"{self.what} did not finish within {self.seconds:.0f} s (the "
                "store is slow or the checkpoint large); it is retried at the next sync")


_StatKey = tuple[int, int, int, int, int]


def _stat_key(st: os.stat_result) -> _StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _human(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


class CheckpointStore:
    """One checkpoint store (``config.store`` at ``config.endpoint``) with ``credentials``
    (see the module docstring for what it guarantees). ``deadline_s`` bounds each operation;
    ``clock`` gives manifests their ``created_at``. Not thread-safe: one user at a time."""

    def __init__(self, config: CheckpointConfig, credentials: Credentials, *,
                 deadline_s: float = DEFAULT_DEADLINE_S,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 read_timeout_s: float = READ_TIMEOUT_S, max_attempts: int = MAX_ATTEMPTS,
                 clock: Callable[[], float] = time.time) -> None:
        config.validate()
        if not isinstance(credentials, Credentials):
            raise TypeError("credentials must be Credentials")
        self.config = config
        self.bucket, self.prefix = config.bucket, config.prefix
        self.deadline_s = deadline_s
        self._clock = clock
        self._secrets = (credentials.access_key_id, credentials.secret_access_key)
        self._stored: set[str] = set()
        self._hashed: dict[str, tuple[_StatKey, FileEntry]] = {}
        self.where = (config.endpoint or f"AWS S3 ({config.region})") + f", {config.store}"
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError

        try:
            session = boto3.session.Session(
                aws_access_key_id=credentials.access_key_id,
                aws_secret_access_key=credentials.secret_access_key,
                region_name=config.region)
            self._client = session.client("s3", endpoint_url=config.endpoint, config=Config(
                connect_timeout=connect_timeout_s, read_timeout=read_timeout_s,
                retries={"max_attempts": max_attempts, "mode": "standard"},
                s3={"addressing_style": "path" if config.endpoint else "auto"},
                signature_version="s3v4", ignore_configured_endpoint_urls=True,
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required", tcp_keepalive=True))
        except (BotoCoreError, ValueError) as e:  # botocore's profile and config errors
            raise CheckpointStoreError("other", "cannot set up the S3 client: "
                                       f"{self._redact(str(e))}") from None

    @property
    def client(self) -> Any:
        """The boto3 S3 client (tests count its requests through its event hooks)."""
        return self._client

    def close(self) -> None:
        self._client.close()

    # -------------------------------------------------------------- requests and errors

    def _key(self, *parts: str) -> str:
        return "/".join((self.prefix, *parts) if self.prefix else parts)

    def _redact(self, text: str) -> str:
        for s in self._secrets if hasattr(self, "_secrets") else ():
            text = text.replace(s, "***")
        return text

    def _call(self, dl: _Deadline, action: str, op: str, **kw: Any) -> Any:
        """``client.<op>(Bucket=..., **kw)`` within ``dl``; every failure is a
        CheckpointStoreError saying what to do (``action`` is what was being done)."""
        from botocore.exceptions import BotoCoreError, ClientError

        dl.check()
        try:
            return getattr(self._client, op)(Bucket=self.bucket, **kw)
        except ClientError as e:
            raise self._client_error(e, action) from None
        except BotoCoreError as e:
            raise self._transport_error(e, action) from None

    def _transport_error(self, e: Exception, action: str) -> CheckpointStoreError:
        from botocore.exceptions import (
            ConnectionError as BotoConnectionError,
        )
        from botocore.exceptions import (
            HTTPClientError,
            NoCredentialsError,
            ReadTimeoutError,
        )

        text = self._redact(str(e))
        if isinstance(e, NoCredentialsError):
            return CheckpointStoreError("credentials", f"no credentials for the store: {text}")
        if isinstance(e, (BotoConnectionError, HTTPClientError, ReadTimeoutError)):
            return CheckpointStoreError(
                "unreachable", f"cannot reach the checkpoint store ({self.where}) to {action}: "
                f"{text}; check checkpoint.endpoint and that this machine can reach it")
        return CheckpointStoreError("other", f"the checkpoint store failed to {action}: {text}")

    def _client_error(self, e: Any, action: str) -> CheckpointStoreError:
        err = e.response.get("Error", {})
        code = str(err.get("Code") or "")
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        detail = self._redact(str(err.get("Message") or code or status))
        if code == "InvalidAccessKeyId":
            return CheckpointStoreError(
                "credentials", f"the checkpoint store ({self.where}) does not know this access "
                "key id (InvalidAccessKeyId): check AWS_ACCESS_KEY_ID")
        if code == "SignatureDoesNotMatch":
            return CheckpointStoreError(
                "credentials", f"the checkpoint store ({self.where}) refused the secret key "
                "(SignatureDoesNotMatch): check AWS_SECRET_ACCESS_KEY for this access key id")
        if code in ("NoSuchKey", "404"):
            return CheckpointStoreError(
                "corrupt", f"cannot {action}: it is missing from the store ({self.where}); the "
                "checkpoint is damaged")
        if code == "PreconditionFailed":
            return CheckpointStoreError("conflict", f"cannot {action}: it exists already")
        if code == "NoSuchBucket":
            return CheckpointStoreError(
                "bucket", f"the bucket {self.bucket!r} does not exist at "
                f"{self.config.endpoint or 'AWS S3'}: create it, or fix checkpoint.store")
        if code in ("AccessDenied", "AllAccessDisabled", "403") or status == 403:
            return CheckpointStoreError(
                "permission", f"the checkpoint store ({self.where}) refused to {action} with "
                f"these credentials ({code or status}: {detail}); grant them read, write, list "
                "and delete under the prefix")
        return CheckpointStoreError(
            "other", f"the checkpoint store ({self.where}) failed to {action}: {code or status}"
            f" {detail}")

    def _read_body(self, resp: Any, cap: int, what: str) -> bytes:
        """At most ``cap`` bytes of a GET's body; CheckpointStoreError("corrupt") when the
        object is longer."""
        from botocore.exceptions import BotoCoreError

        body = resp["Body"]
        try:
            data = body.read(cap + 1)
        except BotoCoreError as e:
            raise self._transport_error(e, f"read {what}") from None
        finally:
            body.close()
        if len(data) > cap:
            raise CheckpointStoreError("corrupt", f"{what} is longer than {cap} bytes")
        return data

    # -------------------------------------------------------------- check

    def check(self) -> None:
        """That the store can keep checkpoints: reachable, the keys valid, the bucket there,
        listing, writing and deleting allowed (a probe object under the prefix is written
        and deleted). CheckpointStoreError saying what is wrong and what to do."""
        dl = _Deadline(self.deadline_s, "checking the checkpoint store")
        self._call(dl, "list the prefix", "list_objects_v2",
                   Prefix=self._key("manifests") + "/", MaxKeys=1)
        probe = self._key(f".gpum-probe-{uuid.uuid4().hex}")
        self._call(dl, "write a probe object", "put_object", Key=probe, Body=b"gpum probe")
        self._call(dl, "delete a probe object", "delete_object", Key=probe)

    # -------------------------------------------------------------- manifests

    def _listing(self, dl: _Deadline, folder: str, action: str) -> Iterator[tuple[str, Any]]:
        """``(name, object)`` of every object under ``<prefix>/<folder>/`` (at most
        ``MAX_LIST_PAGES`` pages)."""
        token: str | None = None
        prefix = self._key(folder) + "/"
        for _ in range(MAX_LIST_PAGES):
            kw: dict[str, Any] = {"Prefix": prefix, "MaxKeys": 1000}
            if token:
                kw["ContinuationToken"] = token
            resp = self._call(dl, action, "list_objects_v2", **kw)
            for obj in resp.get("Contents", []):
                yield str(obj.get("Key", ""))[len(prefix):], obj
            token = resp.get("NextContinuationToken") if resp.get("IsTruncated") else None
            if not token:
                break

    def _manifest_seqs(self, dl: _Deadline) -> list[int]:
        """Every manifest seq in the store, ascending."""
        seqs: list[int] = []
        for name, _ in self._listing(dl, "manifests", "list the manifests"):
            m = _MANIFEST_NAME.fullmatch(name)
            if m:
                seqs.append(int(m.group(1)))
        return sorted(seqs)

    def _read_manifest(self, seq: int, dl: _Deadline) -> Manifest:
        key = self._key("manifests", f"{seq:016d}.json")
        resp = self._call(dl, f"read manifest {seq}", "get_object", Key=key)
        data = self._read_body(resp, MAX_MANIFEST_BYTES, f"manifest {seq}")
        try:
            m = parse_manifest(data)
        except ManifestError as e:
            raise CheckpointStoreError("corrupt", f"manifest {seq} does not verify: {e}"
                                       ) from None
        if m.seq != seq:
            raise CheckpointStoreError("corrupt", f"manifest {seq} names seq {m.seq}")
        return m

    def latest(self) -> Manifest | None:
        """The newest complete checkpoint: the highest-seq manifest that parses and verifies;
        None when the store has no manifest. When manifests exist but none of the newest
        ``MAX_MANIFEST_TRIES`` verifies: CheckpointStoreError("corrupt"), never None."""
        dl = _Deadline(self.deadline_s, "finding the newest checkpoint")
        return self._newest(dl)[0]

    def _newest(self, dl: _Deadline) -> tuple[Manifest | None, int]:
        """``latest()`` and the highest manifest seq in the store (0: none), which may be
        higher than the newest's when a newer manifest does not verify."""
        seqs = self._manifest_seqs(dl)
        errors: list[str] = []
        for seq in reversed(seqs[-MAX_MANIFEST_TRIES:]):
            try:
                return self._read_manifest(seq, dl), seqs[-1]
            except CheckpointStoreError as e:
                if e.kind != "corrupt":
                    raise
                log.warning("checkpoint store %s: %s; trying an older one", self.where, e)
                errors.append(str(e))
        if not seqs:
            return None, 0
        raise CheckpointStoreError(
            "corrupt", f"the store has {len(seqs)} manifest(s) but none of the newest "
            f"{len(errors)} verifies ({errors[0]}); it was altered or damaged")

    # -------------------------------------------------------------- upload

    def _scan(self, directory: Path) -> list[tuple[str, str, os.stat_result]]:
        """Regular files under ``directory`` as (relative path, path, lstat), sorted by
        relative path; skips (with a note) what the module docstring says is not stored."""
        out: list[tuple[str, str, os.stat_result]] = []
        try:
            top = os.lstat(directory)
        except OSError as e:
            raise CheckpointError(f"cannot read the checkpoint directory {directory}: {e}"
                                  ) from None
        if not stat.S_ISDIR(top.st_mode):
            raise CheckpointError(f"{directory} is not a directory")
        stack = [("", str(directory))]
        while stack:
            rel_dir, path = stack.pop()
            try:
                with os.scandir(path) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as e:
                raise CheckpointError(f"cannot list {path}: {e}") from None
            for entry in entries:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                try:
                    rel.encode("utf-8")
                    st = entry.stat(follow_symlinks=False)
                except UnicodeEncodeError:
                    log.info("checkpoint: skipping %r: its name is not UTF-8", rel)
                    continue
                except OSError:
                    continue  # gone since it was listed
                if stat.S_ISDIR(st.st_mode):
                    if st.st_dev != top.st_dev:
                        log.info("checkpoint: skipping %s: another filesystem", rel)
                    else:
                        stack.append((rel, entry.path))
                elif not stat.S_ISREG(st.st_mode):
                    log.info("checkpoint: skipping %s: not a regular file (symlinks, devices, "
                             "sockets and FIFOs are not stored)", rel)
                elif len(rel.encode()) > MAX_PATH_BYTES:
                    log.info("checkpoint: skipping %s...: path over %d bytes", rel[:80],
                             MAX_PATH_BYTES)
                else:
                    out.append((rel, entry.path, st))
                    if len(out) > MAX_FILES:
                        raise CheckpointTooLarge(
                            f"the checkpoint directory holds more than {MAX_FILES} files; "
                            "pack small files into archives")
        out.sort(key=lambda t: t[0])
        return out

    def _put_blob(self, digest: str, data: bytes, dl: _Deadline) -> None:
        self._call(dl, "store a blob", "put_object", Key=self._key("blobs", digest), Body=data,
                   ChecksumSHA256=base64.b64encode(bytes.fromhex(digest)).decode("ascii"))
        self._stored.add(digest)

    def _store_file(self, rel: str, path: str, st: os.stat_result, known: set[str],
                    dl: _Deadline) -> FileEntry | None:
        """Hash ``path`` and store its blobs that are not ``known``; None when it changed
        while it was read (or since it was listed)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ELOOP):
                return None
            raise CheckpointError(f"cannot read {rel}: {e}") from None
        whole, chunks, size = hashlib.sha256(), [], 0
        with os.fdopen(fd, "rb") as f:
            if _stat_key(os.fstat(fd)) != _stat_key(st):
                return None
            while True:
                dl.check()
                data = f.read(CHUNK_BYTES)
                if not data:
                    break
                size += len(data)
                whole.update(data)
                digest = hashlib.sha256(data).hexdigest()
                chunks.append(digest)
                if digest not in known and digest not in self._stored:
                    self._put_blob(digest, data, dl)
            end = os.fstat(fd)
        if _stat_key(end) != _stat_key(st) or size != st.st_size:
            return None
        entry = FileEntry(path=rel, size=size, sha256=whole.hexdigest(),
                          mode=stat.S_IMODE(st.st_mode) & 0o777,
                          chunks=tuple(chunks) if size > CHUNK_BYTES else ())
        self._hashed[rel] = (_stat_key(st), entry)
        return entry

    def upload(self, directory: str | os.PathLike[str], previous: Manifest | None = None, *,
               force: bool = False, job: str | None = None) -> Manifest | None:
        """Store ``directory`` as the next checkpoint after ``previous`` (the manifest this
        writer built on: the one it restored or last wrote; None: none, the store was empty)
        for ``job`` (the writing job's base58 address; None: no job) and return its manifest;
        the previous manifest when nothing changed, unless ``force`` (then a new manifest of
        the same files, with a new seq and time, marks that the directory was taken as it is
        now); None when a file changed while it was read (nothing written but blobs; retry
        later). CheckpointSuperseded when the store's newest manifest is not ``previous``
        (module docstring; checked before any blob is sent and again by the conditional
        write); CheckpointTooLarge over ``max_mib``; CheckpointStoreError when the store
        fails (no manifest is written then)."""
        dl = _Deadline(self.deadline_s, "uploading the checkpoint")
        files = self._scan(Path(directory))
        total = sum(st.st_size for _, _, st in files)
        if total > self.config.max_bytes:
            raise CheckpointTooLarge(
                f"the checkpoint directory {self.config.dir} holds {_human(total)} in "
                f"{len(files)} file(s), over the spec's limit of {self.config.max_mib} MiB; "
                "nothing was stored: delete old files there or raise checkpoint.max_mib")
        newest, top = self._newest(dl)
        parent = None if previous is None else previous.digest
        if not may_write_after(newest, parent, job):
            raise CheckpointSuperseded(newest)
        if newest is None and previous is not None:
            log.warning("checkpoint store %s lost every manifest (the bucket was emptied or "
                        "replaced?): storing every blob again", self.where)
            self._stored.clear()
        elif newest is not None and newest.digest != parent:
            previous = newest  # this job's own write whose local record was lost
        known = set(self._stored)
        if previous is not None and newest is not None:
            known.update(b for f in previous.files for b in f.blobs)
        entries: list[FileEntry] = []
        for rel, path, st in files:
            cached = self._hashed.get(rel)
            if cached is not None and cached[0] == _stat_key(st) \
                    and all(b in known for b in cached[1].blobs):
                entries.append(cached[1])
                continue
            entry = self._store_file(rel, path, st, known, dl)
            if entry is None:
                log.info("checkpoint: %s changed while it was read; no checkpoint this time "
                         "(the next sync retries)", rel)
                return None
            known.update(entry.blobs)
            entries.append(entry)
        if previous is not None and newest is not None and tuple(entries) == previous.files \
                and not force:
            return previous
        base = previous if newest is not None else None
        return self._write_manifest(tuple(entries), base, top, job, dl)

    def claim(self, restored: Manifest, *, job: str | None) -> Manifest:
        """Write a manifest of ``restored``'s files (just restored by ``job``) as its child,
        so the store's newest checkpoint names ``job`` before its container runs: a writer
        that built on ``restored`` or on anything older is refused from then on. Its blobs
        are ``restored``'s, so none is sent. CheckpointSuperseded when ``restored`` is not
        the newest any more (restore the newest and claim again); CheckpointStoreError when
        the store fails."""
        restored.validate()
        dl = _Deadline(self.deadline_s, f"claiming checkpoint {restored.seq}")
        newest, top = self._newest(dl)
        if newest is None or newest.digest != restored.digest:
            raise CheckpointSuperseded(newest)
        return self._write_manifest(restored.files, restored, top, job, dl)

    def _write_manifest(self, files: tuple[FileEntry, ...], parent: Manifest | None, top: int,
                        job: str | None, dl: _Deadline) -> Manifest:
        """Write the manifest of ``files`` whose parent is ``parent`` as seq ``top + 1``
        (``top``: the store's highest seq when ``parent`` was found newest), only if that
        seq is still free; CheckpointSuperseded when another writer took it."""
        seq = top + 1
        manifest = Manifest(seq=seq, created_at=int(self._clock()), files=files,
                            parent=None if parent is None else parent.digest, job=job)
        data = manifest.canonical_bytes()
        if len(data) > MAX_MANIFEST_BYTES:
            raise CheckpointTooLarge(f"the checkpoint's manifest would be {_human(len(data))}, "
                                     f"over {_human(MAX_MANIFEST_BYTES)}: fewer files")
        try:
            self._call(dl, "write the manifest", "put_object",
                       Key=self._key("manifests", f"{seq:016d}.json"), Body=data,
                       IfNoneMatch="*", ContentType="application/json")
        except CheckpointStoreError as e:
            if e.kind != "conflict":
                raise
            newest = None
            with contextlib.suppress(CheckpointStoreError):
                newest = self._newest(dl)[0]
            raise CheckpointSuperseded(newest) from None
        self._prune(seq, dl)
        if seq % SWEEP_EVERY == 0:
            try:
                self.sweep(SWEEP_MIN_AGE_S)
            except CheckpointError as e:
                log.warning("checkpoint store %s: unreferenced blobs not swept this time: %s",
                            self.where, e)
        return manifest

    def _prune(self, seq: int, dl: _Deadline) -> None:
        old = seq - KEEP_MANIFESTS
        if old < 1:
            return
        try:
            self._call(dl, "delete an old manifest", "delete_object",
                       Key=self._key("manifests", f"{old:016d}.json"))
        except CheckpointStoreError as e:
            log.info("checkpoint store %s: old manifest %d kept: %s", self.where, old, e)

    def sweep(self, min_age_s: float = SWEEP_MIN_AGE_S) -> int:
        """Delete the blobs no manifest in the store names and that are older than
        ``min_age_s`` (by the store's LastModified and this machine's clock); returns how
        many. Every manifest is read first, and a manifest that cannot be read or does not
        verify stops the sweep before anything is deleted: a blob is only ever deleted when
        every manifest that could name it was read. A writer forgets the blobs it swept
        (``_stored``), so content that comes back is sent again (a file's cached hash is
        reused only while all its blobs are known to be stored)."""
        dl = _Deadline(self.deadline_s, "sweeping unreferenced blobs")
        seqs = self._manifest_seqs(dl)
        if len(seqs) > MAX_SWEEP_MANIFESTS:
            raise CheckpointStoreError(
                "other", f"the store holds {len(seqs)} manifests, over {MAX_SWEEP_MANIFESTS}: "
                "old manifests were not deleted; nothing swept")
        named: set[str] = set()
        for seq in seqs:
            named.update(b for f in self._read_manifest(seq, dl).files for b in f.blobs)
        cutoff = self._clock() - min_age_s
        doomed = [digest for digest, obj in self._listing(dl, "blobs", "list the blobs")
                  if digest not in named and obj.get("LastModified") is not None
                  and obj["LastModified"].timestamp() <= cutoff]
        for digest in doomed:
            self._call(dl, f"delete blob {digest}", "delete_object",
                       Key=self._key("blobs", digest))
            self._stored.discard(digest)
        if doomed:
            log.info("checkpoint store %s: swept %d unreferenced blob(s)", self.where,
                     len(doomed))
        return len(doomed)

    # -------------------------------------------------------------- restore

    def _get_blob(self, digest: str, length: int, dl: _Deadline) -> bytes:
        resp = self._call(dl, f"read blob {digest}", "get_object", Key=self._key("blobs", digest))
        data = self._read_body(resp, length, f"blob {digest}")
        if len(data) != length or hashlib.sha256(data).hexdigest() != digest:
            raise CheckpointStoreError(
                "corrupt", f"blob {digest} in the store does not match its digest (altered or "
                "damaged); the checkpoint is not restored")
        return data

    def restore(self, manifest: Manifest, directory: str | os.PathLike[str], *,
                dir_mode: int = 0o755) -> None:
        """Make ``directory`` hold exactly the files of ``manifest``, verified, swapped into
        place atomically (module docstring); ``directory``'s parent must exist. On any error
        ``directory`` is as it was and the temporary copy is removed."""
        manifest.validate()
        dl = _Deadline(self.deadline_s, f"restoring checkpoint {manifest.seq}")
        target = Path(directory).absolute()
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.restore-", dir=target.parent))
        try:
            for f in manifest.files:
                dest = tmp / f.path
                dest.parent.mkdir(parents=True, exist_ok=True)
                whole = hashlib.sha256()
                fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "wb") as out:
                    for i, digest in enumerate(f.blobs):
                        length = min(CHUNK_BYTES, f.size - i * CHUNK_BYTES)
                        data = self._get_blob(digest, length, dl)
                        whole.update(data)
                        out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
                if whole.hexdigest() != f.sha256:
                    raise CheckpointStoreError(
                        "corrupt", f"{f.path} does not match its sha256 in manifest "
                        f"{manifest.seq}; the checkpoint is not restored")
                os.chmod(dest, f.mode)
            for d in _dirs_bottom_up(tmp):
                os.chmod(d, 0o755)
            os.chmod(tmp, dir_mode)
            _swap(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _dirs_bottom_up(root: Path) -> Iterator[Path]:
    for path, dirs, _ in os.walk(root, topdown=False):
        for d in dirs:
            yield Path(path) / d


def _renameat2_exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False when this
    system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap(new: Path, target: Path) -> None:
    """Put directory ``new`` at ``target`` in one step; the old content is deleted after."""
    if not os.path.lexists(target):
        os.rename(new, target)
        return
    if target.is_dir() and not target.is_symlink():
        with contextlib.suppress(OSError):
            os.rename(new, target)  # replaces an empty directory in one step
            return
    if target.is_dir() and not target.is_symlink() and _renameat2_exchange(new, target):
        shutil.rmtree(new, ignore_errors=True)  # ``new`` now holds the old content
        return
    old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(target, old)
    os.rename(new, target)
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink()
