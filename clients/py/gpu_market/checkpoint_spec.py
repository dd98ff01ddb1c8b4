"""The checkpoint section of a workload spec (pure: no I/O); the format is docs/protocol.md,
"Workloads", and the store's layout ``gpu_market.checkpoint``.

A workload may name a directory of its container that the provider's worker copies to an
S3-compatible store every ``interval_s`` seconds and when the container stops, and restores
from the store's newest complete checkpoint before the container first starts (so a job can
go on where an earlier job, on any provider, left off). JSON form, the value of the spec's
``checkpoint`` key (omitted when the spec has none)::

    {"dir": "/checkpoint",                  absolute container path, not "/", no "." or "..",
                                            letters, digits and "._-/" only
     "store": "s3://bucket/prefix",         an S3 bucket name, then an optional key prefix
     "endpoint": "https://s3.example:9000", http(s)://host[:port]; omitted: AWS S3
     "region": "us-east-1",
     "interval_s": 30,                      10..3600
     "max_mib": 10240,                      1..1_048_576: the directory's size limit
     "access_key_id": "<base64 sealed box>",     sealed to the provider's worker key,
     "secret_access_key": "<base64 sealed box>"} like secret_env values

Only ``store`` and the two credentials are required when parsing; the canonical form has
every key (``endpoint`` only when set). The credentials are sealed exactly like ``secret_env``
values (``gpu_market.workload.seal_secret``): only the provider's worker can open them, and
it opens them in memory only.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from .spec_checks import (
    WorkloadSpecError,
    check_int,
    check_secret_b64,
    check_str,
    json_type,
)

__all__ = [
    "CHECKPOINT_KEYS",
    "DEFAULT_DIR",
    "DEFAULT_INTERVAL_S",
    "DEFAULT_MAX_MIB",
    "DEFAULT_REGION",
    "MAX_CHECKPOINT_MIB",
    "MAX_INTERVAL_S",
    "MIN_INTERVAL_S",
    "CheckpointConfig",
    "CheckpointSpec",
    "checkpoint_from_json",
    "checkpoint_to_json",
]

DEFAULT_DIR = "/checkpoint"
DEFAULT_REGION = "us-east-1"
DEFAULT_INTERVAL_S = 30
DEFAULT_MAX_MIB = 10_240
MIN_INTERVAL_S = 10
MAX_INTERVAL_S = 3600
MAX_CHECKPOINT_MIB = 1_048_576
MAX_DIR_BYTES = 255
MAX_PREFIX_BYTES = 512
MAX_ENDPOINT_BYTES = 255

CHECKPOINT_KEYS = frozenset({
    "dir", "store", "endpoint", "region", "interval_s", "max_mib", "access_key_id",
    "secret_access_key",
})  # fmt: skip

_DIR_RE = re.compile(r"/[A-Za-z0-9._/-]+")
# Trees the runtime owns or mounts itself (the checkpoint may not be inside them), and
# system directories it may not replace as a whole.
_RESERVED_TREES = ("/proc", "/sys", "/dev", "/scratch")
_RESERVED_DIRS = ("/bin", "/boot", "/etc", "/lib", "/lib64", "/run", "/sbin", "/tmp", "/usr",
                  "/var")
# S3 bucket naming rules (general purpose buckets): 3..63 characters, lowercase letters,
# digits, dots and hyphens, starting and ending with a letter or digit, no "..".
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_PREFIX_PART_RE = re.compile(r"[A-Za-z0-9!_.*'()=-]+")
_HOST_RE = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
    r"[A-Za-z0-9])?)*"
)
_ENDPOINT_RE = re.compile(r"(https?)://(\[[0-9A-Fa-f:.]+\]|[^/:\[\]]+)(?::([0-9]{1,5}))?/?")
_REGION_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _check_dir(value: object) -> str:
    check_str("checkpoint.dir", value, MAX_DIR_BYTES)
    assert isinstance(value, str)
    if not _DIR_RE.fullmatch(value):
        raise WorkloadSpecError(
            f"checkpoint.dir {value!r} is not allowed; use an absolute container path of "
            "letters, digits and ._-/ such as /checkpoint"
        )
    parts = value.split("/")[1:]
    if value == "/" or posixpath.normpath(value) != value or any(
        p in ("", ".", "..") for p in parts
    ):
        raise WorkloadSpecError(
            f"checkpoint.dir {value!r} must be a normalized absolute path other than / "
            "(no '.', '..', '//' or trailing '/'), e.g. /checkpoint"
        )
    for reserved in _RESERVED_TREES:
        if value == reserved or value.startswith(reserved + "/"):
            raise WorkloadSpecError(
                f"checkpoint.dir {value!r} is inside {reserved}, which the container runtime "
                "owns; use a directory of its own such as /checkpoint"
            )
    if value in _RESERVED_DIRS:
        raise WorkloadSpecError(
            f"checkpoint.dir {value!r} would replace a system directory of the image; use a "
            "directory of its own such as /checkpoint"
        )
    return value


def parse_store(value: object) -> tuple[str, str]:
    """``(bucket, prefix)`` of an ``s3://bucket[/prefix]`` store URL (prefix without a
    leading or trailing ``/``, possibly empty); WorkloadSpecError naming what is wrong."""
    check_str("checkpoint.store", value, 5 + 63 + 1 + MAX_PREFIX_BYTES)
    assert isinstance(value, str)
    if not value.startswith("s3://"):
        raise WorkloadSpecError(
            f"checkpoint.store {value!r} must be an s3://bucket/prefix URL (the endpoint is "
            "given on its own)"
        )
    bucket, _, prefix = value[5:].partition("/")
    if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket or _is_ip(bucket):
        raise WorkloadSpecError(
            f"checkpoint.store bucket {bucket!r} is not a valid S3 bucket name (3..63 "
            "lowercase letters, digits, '.' and '-', starting and ending with a letter or "
            "digit, not an IP address)"
        )
    if prefix:
        parts = prefix.split("/")
        if len(prefix.encode()) > MAX_PREFIX_BYTES or any(
            p in ("", ".", "..") or not _PREFIX_PART_RE.fullmatch(p) for p in parts
        ):
            raise WorkloadSpecError(
                f"checkpoint.store prefix {prefix!r} is not allowed; use at most "
                f"{MAX_PREFIX_BYTES} bytes of parts made of letters, digits and !_.*'()=- "
                "joined by single '/', without a trailing '/'"
            )
    return bucket, prefix


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _check_endpoint(value: object) -> str | None:
    if value is None:
        return None
    check_str("checkpoint.endpoint", value, MAX_ENDPOINT_BYTES)
    assert isinstance(value, str)
    m = _ENDPOINT_RE.fullmatch(value)
    host = m.group(2) if m else ""
    ok = m is not None and not value.endswith("/")
    if ok and host.startswith("["):
        try:
            ok = ipaddress.ip_address(host[1:-1]).version == 6
        except ValueError:
            ok = False
    elif ok:
        ok = _HOST_RE.fullmatch(host) is not None
    if ok and m is not None and m.group(3) is not None:
        ok = 1 <= int(m.group(3)) <= 65535
    if not ok:
        raise WorkloadSpecError(
            f"checkpoint.endpoint {value!r} is not allowed; use http(s)://host[:port] with "
            "no path, e.g. https://s3.eu-central-1.amazonaws.com or http://10.0.0.5:8333, "
            "or leave it out for AWS S3"
        )
    return value


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    """Where and how often a workload's checkpoint directory is stored (no credentials).

    ``dir`` is the container path, ``store`` ``s3://bucket[/prefix]``, ``endpoint`` the S3
    API's ``http(s)://host[:port]`` (None: AWS S3 in ``region``), ``interval_s`` the seconds
    between syncs (10..3600) and ``max_mib`` the largest checkpoint (1..1_048_576 MiB).
    Building one does not validate: :meth:`validate` does.
    """

    dir: str = DEFAULT_DIR
    store: str
    endpoint: str | None = None
    region: str = DEFAULT_REGION
    interval_s: int = DEFAULT_INTERVAL_S
    max_mib: int = DEFAULT_MAX_MIB

    def validate(self) -> None:
        """Raise :class:`WorkloadSpecError` naming the first field outside the limits."""
        _check_dir(self.dir)
        parse_store(self.store)
        _check_endpoint(self.endpoint)
        check_str("checkpoint.region", self.region, 64)
        if not _REGION_RE.fullmatch(self.region):
            raise WorkloadSpecError(
                f"checkpoint.region {self.region!r} is not allowed; use letters, digits, '-' "
                "and '_' such as us-east-1"
            )
        check_int("checkpoint.interval_s", self.interval_s, MIN_INTERVAL_S, MAX_INTERVAL_S)
        check_int("checkpoint.max_mib", self.max_mib, 1, MAX_CHECKPOINT_MIB)

    @property
    def bucket(self) -> str:
        return parse_store(self.store)[0]

    @property
    def prefix(self) -> str:
        """The key prefix without a trailing ``/`` ("" for the bucket's root)."""
        return parse_store(self.store)[1]

    @property
    def max_bytes(self) -> int:
        return self.max_mib << 20


@dataclass(frozen=True)
class CheckpointSpec:
    """The spec's ``checkpoint`` value: a :class:`CheckpointConfig` and the store's access
    key id and secret access key, each the base64 of a sealed box to the provider's worker
    key (``gpu_market.checkpoint.seal_checkpoint`` builds one)."""

    config: CheckpointConfig
    access_key_id: str = field(repr=False)
    secret_access_key: str = field(repr=False)

    def validate(self) -> None:
        if not isinstance(self.config, CheckpointConfig):
            raise WorkloadSpecError("checkpoint.config must be a CheckpointConfig")
        self.config.validate()
        check_secret_b64("checkpoint.access_key_id", self.access_key_id)
        check_secret_b64("checkpoint.secret_access_key", self.secret_access_key)


def checkpoint_to_json(spec: CheckpointSpec) -> dict[str, Any]:
    """The JSON object form of ``spec`` (not validated here: the workload spec's
    ``validate`` validates it)."""
    c = spec.config
    obj: dict[str, Any] = {"dir": c.dir, "store": c.store}
    if c.endpoint is not None:
        obj["endpoint"] = c.endpoint
    obj.update(region=c.region, interval_s=c.interval_s, max_mib=c.max_mib,
               access_key_id=spec.access_key_id, secret_access_key=spec.secret_access_key)
    return obj


def checkpoint_from_json(obj: object) -> CheckpointSpec:
    """Parse the JSON form strictly (unknown keys, wrong types, bools or floats where
    integers belong all raise :class:`WorkloadSpecError`) into a valid spec."""
    if not isinstance(obj, dict):
        raise WorkloadSpecError(f"checkpoint must be a JSON object, got {json_type(obj)}")
    unknown = sorted(set(obj) - CHECKPOINT_KEYS)
    if unknown:
        raise WorkloadSpecError(
            f"checkpoint has the unknown key {unknown[0]!r}; allowed: "
            f"{', '.join(sorted(CHECKPOINT_KEYS))}"
        )
    for key in ("store", "access_key_id", "secret_access_key"):
        if key not in obj:
            raise WorkloadSpecError(f'checkpoint is missing "{key}"')
    for key in ("dir", "store", "region", "access_key_id", "secret_access_key"):
        if key in obj and not isinstance(obj[key], str):
            raise WorkloadSpecError(f"checkpoint.{key} must be a string, got {json_type(obj[key])}")
    endpoint = obj.get("endpoint")
    if endpoint is not None and not isinstance(endpoint, str):
        raise WorkloadSpecError(f"checkpoint.endpoint must be a string, got {json_type(endpoint)}")
    config = CheckpointConfig(
        dir=obj.get("dir", DEFAULT_DIR), store=obj["store"], endpoint=endpoint,
        region=obj.get("region", DEFAULT_REGION),
        interval_s=obj.get("interval_s", DEFAULT_INTERVAL_S),
        max_mib=obj.get("max_mib", DEFAULT_MAX_MIB),
    )
    spec = CheckpointSpec(config, obj["access_key_id"], obj["secret_access_key"])
    spec.validate()
    return spec
