"""Workload spec: canonical encoding, hash, sealed secrets and the wallet-signed requests to a
provider's worker API (pure: no I/O, no anchorpy); the format is docs/protocol.md, "Workloads".

A job may carry one workload. ``create_job`` fixes ``job.workload_hash`` on chain: the
sha256 of the spec's canonical bytes (:data:`NO_WORKLOAD`, 32 zero bytes, means none). The
user later posts the spec to the provider's worker, which recomputes the hash and runs the
spec only if it matches.

Canonical bytes (what :func:`spec_hash` hashes)::

    json.dumps(spec_to_json(spec), sort_keys=True, separators=(",", ":"),
               ensure_ascii=True).encode()

with the JSON object form (keys in this order here, sorted in the bytes)::

    {"version": 1,                                   always
     "image": "docker.io/library/x:tag",             always
     "command": ["python"], "args": ["-u", "a.py"],  always (possibly empty lists)
     "env": {"NAME": "value"},                       always (possibly {})
     "secret_env": {"NAME": "<base64 sealed box>"},  always (possibly {})
     "ports": [{"port": 8888, "protocol": "tcp"}],   always, sorted by (port, protocol)
     "shm_size_mib": 1024, "scratch_mib": 10240,     omitted when None
     "finish_on_exit": false,                        always
     "checkpoint": {...},                            omitted when None (checkpoint_spec)
     "cluster": {...}}                               omitted when None (cluster_spec)

Limits (``WorkloadSpec.validate`` enforces every one; each error names the field and what
is allowed):

* ``version`` is :data:`WORKLOAD_VERSION` (1).
* ``image``: 1..255 bytes, ``[domain[:port]/]path[:tag][@sha256:<64 lowercase hex>]`` in
  the grammar of the OCI distribution reference (domain components ``[A-Za-z0-9-]``, path
  components lowercase ``[a-z0-9]`` joined by ``.``, ``_``, ``__`` or ``-``; tag
  ``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}``). So no whitespace, control characters, uppercase
  paths or a leading ``-``. IPv6 registry addresses are not supported.
* ``command`` + ``args``: at most 64 items together, each at most 4096 UTF-8 bytes;
  ``command[0]`` (the entrypoint, passed as a runtime option value) is non-empty and does
  not start with ``-``. ``args`` and later ``command`` items follow the image on the
  runtime's command line, where they are never parsed as runtime options, so they may.
* ``env`` + ``secret_env``: at most 64 entries together; names match
  ``[A-Za-z_][A-Za-z0-9_]{0,127}``, are unique within each and disjoint between them;
  ``env`` values are at most 4096 UTF-8 bytes; ``secret_env`` values are canonical
  standard base64 (padded) of a sealed box of 48..4144 bytes (a secret of at most 4096
  bytes), at most 8192 characters.
* No NUL character and no lone surrogate in any string (they cannot reach a process).
* ``ports``: at most 16, port 1..65535, protocol ``"tcp"`` or ``"udp"``, unique pairs.
* ``shm_size_mib``: None or 1..1_048_576; ``scratch_mib`` (writable space at
  ``/scratch``, the spec's disk limit): None or 1..16_777_216. Integers are never bools.
* ``finish_on_exit``: a bool (the job finishes when the container exits).
* ``checkpoint``: None or a :class:`~gpu_market.checkpoint_spec.CheckpointSpec` (a
  directory the worker keeps in the user's S3 store; its form and limits are in
  ``checkpoint_spec``). Specs without one encode and hash as before it existed.
* ``cluster``: None or a :class:`~gpu_market.cluster_spec.ClusterSpec` (the job is node
  ``rank`` of a cluster; its form and limits are in ``cluster_spec``). A cluster node's
  ``env`` and ``secret_env`` may not set a name of the environment contract
  (``cluster_spec.CONTRACT_ENV``: the worker sets those). Specs without one encode and hash
  as before it existed.
* The canonical bytes are at most 65536 bytes (64 KiB).

``WorkloadSpec`` sorts ``env``, ``secret_env`` and ``ports`` (and turns lists into tuples)
when it is built, so specs that differ only in order compare equal and hash the same.
:func:`spec_from_json` is strict: unknown keys, missing ``image``, wrong JSON types, bools
or floats where integers belong, duplicate object keys and duplicate ports all raise
:class:`WorkloadSpecError`; every spec it returns is valid and
``spec_from_json(canonical_bytes(s)) == s``.

Secrets are libsodium sealed boxes (``crypto_box_seal``) to the X25519 key converted from
the provider's ed25519 worker key: only that worker can open them, and two sealings of one
secret differ (fresh ephemeral key) yet open to the same plaintext.

Worker API requests are signed by the job's user wallet (ed25519) over::

    REQUEST_DOMAIN || u8 len(action) || action (ASCII) || job(32) || workload_hash(32)
        || timestamp:i64le

sent as headers ``X-Gpum-Signer`` (base58 pubkey), ``X-Gpum-Timestamp`` (decimal unix
seconds) and ``X-Gpum-Signature`` (base58, 64 bytes). The worker accepts a request whose
timestamp is within :data:`REQUEST_MAX_SKEW_S` of its clock. A captured request can be
replayed inside that window; every action is idempotent (deliver of the same spec) or
read-only, so a replay gains nothing.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nacl import bindings as _sodium
from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, PublicKey, SealedBox
from solders.pubkey import Pubkey
from solders.signature import Signature

from .checkpoint_spec import CheckpointSpec, checkpoint_from_json, checkpoint_to_json
from .cluster_spec import CONTRACT_ENV, ClusterSpec, cluster_from_json, cluster_to_json
from .receipt import I64_MAX, I64_MIN, private_key_from_seed, public_key_bytes, sign, verify
from .spec_checks import (
    MAX_ITEM_BYTES,
    MAX_SECRET_B64_CHARS,
    SEALED_BOX_OVERHEAD,
    WorkloadSpecError,
)
from .spec_checks import check_int as _check_int
from .spec_checks import check_secret_b64 as _check_secret_b64
from .spec_checks import check_str as _check_str
from .spec_checks import json_type as _json_type
from .spec_checks import no_duplicate_keys as _no_duplicate_keys
from .spec_checks import reject_constant as _reject_constant
from .spec_checks import reject_float as _reject_float

__all__ = [
    "ACTIONS",
    "MAX_ARGV_ITEMS",
    "MAX_ENV_ENTRIES",
    "MAX_IMAGE_BYTES",
    "MAX_ITEM_BYTES",
    "MAX_PORTS",
    "MAX_SCRATCH_MIB",
    "MAX_SECRET_B64_CHARS",
    "MAX_SHM_MIB",
    "MAX_SPEC_BYTES",
    "NO_WORKLOAD",
    "REQUEST_DOMAIN",
    "REQUEST_MAX_SKEW_S",
    "SEALED_BOX_OVERHEAD",
    "WORKLOAD_VERSION",
    "PortSpec",
    "RequestAuthError",
    "WorkloadSpec",
    "WorkloadSpecError",
    "canonical_bytes",
    "open_secret",
    "open_secrets",
    "parse_env_arg",
    "parse_port_arg",
    "request_message",
    "seal_secret",
    "seal_secrets",
    "sign_request",
    "spec_from_json",
    "spec_hash",
    "spec_to_json",
    "verify_request",
]

WORKLOAD_VERSION = 1
NO_WORKLOAD = bytes(32)
"""``job.workload_hash`` of a job without a workload."""

MAX_IMAGE_BYTES = 255
MAX_ARGV_ITEMS = 64
"""``command`` and ``args`` together."""
MAX_ENV_ENTRIES = 64
"""``env`` and ``secret_env`` together."""
MAX_PORTS = 16
MAX_SHM_MIB = 1_048_576
MAX_SCRATCH_MIB = 16_777_216
MAX_SPEC_BYTES = 65_536
"""Largest canonical encoding."""
_MAX_JSON_INPUT_BYTES = 16 * MAX_SPEC_BYTES
""":func:`spec_from_json` refuses larger text before parsing it (whitespace, escapes)."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# OCI distribution reference grammar (github.com/distribution/reference), minus IPv6 hosts.
_DOMAIN_COMPONENT = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REF = re.compile(
    rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@sha256:[0-9a-f]{64})?"
)
_SPEC_KEYS = frozenset({
    "version", "image", "command", "args", "env", "secret_env", "ports", "shm_size_mib",
    "scratch_mib", "finish_on_exit", "checkpoint", "cluster",
})  # fmt: skip
_PORT_KEYS = frozenset({"port", "protocol"})
_PROTOCOLS = ("tcp", "udp")


class RequestAuthError(ValueError):
    """A worker API request is not authorized; ``status`` is the HTTP status to answer with
    (401: missing/malformed headers, bad signature or stale timestamp; 403: a valid
    signature by someone other than the job's user)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# ----------------------------------------------------------------------------- checks


def _check_env_name(field: str, name: object) -> str:
    if not isinstance(name, str):
        raise WorkloadSpecError(f"{field} name must be a string, got {type(name).__name__}")
    if not _ENV_NAME.fullmatch(name):
        raise WorkloadSpecError(
            f"{field} name {name!r} is not allowed; names match [A-Za-z_][A-Za-z0-9_]{{0,127}}"
        )
    return name


def _check_image(image: object) -> None:
    _check_str("image", image, MAX_IMAGE_BYTES)
    assert isinstance(image, str)
    if not image:
        raise WorkloadSpecError("image must not be empty")
    if not image.isascii() or not _IMAGE_REF.fullmatch(image):
        raise WorkloadSpecError(
            f"image {image!r} is not a valid image reference; expected "
            "[registry[:port]/]name[:tag][@sha256:<64 hex>] with a lowercase name and no "
            "whitespace, e.g. docker.io/library/python:3.12"
        )


def _check_pairs(field: str, pairs: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(pairs, tuple):
        raise WorkloadSpecError(f"{field} must be a tuple of (name, value) pairs")
    for item in pairs:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise WorkloadSpecError(f"{field} must be a tuple of (name, value) pairs, got {item!r}")
    names = [_check_env_name(field, name) for name, _ in pairs]
    for a, b in itertools.pairwise(names):
        if a == b:
            raise WorkloadSpecError(f"{field} has {a!r} twice; names must be unique")
        if a > b:
            raise WorkloadSpecError(f"{field} must be sorted by name ({a!r} before {b!r})")
    return pairs  # type: ignore[return-value]


def _sorted_if_possible(items: tuple[Any, ...], key: Any) -> tuple[Any, ...]:
    try:
        return tuple(sorted(items, key=key))
    except (TypeError, IndexError, AttributeError):  # wrong shapes: validate() reports them
        return items


def _as_tuple(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def _as_bytes(name: str, value: object, length: int | tuple[int, ...]) -> bytes:
    """``bytes`` of a bytes-like value or of an object with ``__bytes__`` (a solders Pubkey
    or Keypair); ValueError unless its length is ``length`` (one of them)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        b = bytes(value)
    elif hasattr(type(value), "__bytes__") and not isinstance(value, (int, str)):
        b = bytes(value)  # type: ignore[call-overload]
    else:
        raise ValueError(f"{name} must be bytes, got {type(value).__name__}")
    lengths = (length,) if isinstance(length, int) else length
    if len(b) not in lengths:
        want = " or ".join(str(n) for n in lengths)
        raise ValueError(f"{name} must be {want} bytes, got {len(b)}")
    return b


# ----------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class PortSpec:
    """A container port to publish: ``port`` 1..65535, ``protocol`` "tcp" or "udp"."""

    port: int
    protocol: str = "tcp"

    def validate(self, field: str = "port") -> None:
        _check_int(f"{field}.port", self.port, 1, 65535)
        if self.protocol not in _PROTOCOLS:
            raise WorkloadSpecError(
                f'{field}.protocol {self.protocol!r} is not allowed; use "tcp" or "udp"'
            )

    def __str__(self) -> str:
        return f"{self.port}/{self.protocol}"


@dataclass(frozen=True)
class WorkloadSpec:
    """What the worker runs for a job (see the module docstring for every limit).

    Building one sorts ``env``, ``secret_env`` and ``ports`` and turns lists (and, for the
    env fields, mappings) into tuples; it does not validate: :meth:`validate`,
    :func:`canonical_bytes` and :func:`spec_hash` do.
    """

    image: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[tuple[str, str], ...] = ()
    ports: tuple[PortSpec, ...] = ()
    shm_size_mib: int | None = None
    scratch_mib: int | None = None
    finish_on_exit: bool = False
    version: int = WORKLOAD_VERSION
    checkpoint: CheckpointSpec | None = None
    cluster: ClusterSpec | None = None

    def __post_init__(self) -> None:
        for name in ("command", "args"):
            object.__setattr__(self, name, _as_tuple(getattr(self, name)))
        for name in ("env", "secret_env"):
            pairs = getattr(self, name)
            pairs = tuple(pairs.items()) if isinstance(pairs, Mapping) else _as_tuple(pairs)
            if isinstance(pairs, tuple):
                pairs = tuple(_as_tuple(p) for p in pairs)
                pairs = _sorted_if_possible(pairs, key=lambda p: p[0])
            object.__setattr__(self, name, pairs)
        ports = _as_tuple(self.ports)
        if isinstance(ports, tuple):
            ports = _sorted_if_possible(ports, key=lambda p: (p.port, p.protocol))
        object.__setattr__(self, "ports", ports)

    def validate(self) -> None:
        """Raise :class:`WorkloadSpecError` naming the first field outside the limits."""
        _validate_fields(self)
        n = len(_dumps(_to_json_unchecked(self)))
        if n > MAX_SPEC_BYTES:
            raise WorkloadSpecError(
                f"the canonical spec is {n} bytes; at most {MAX_SPEC_BYTES} allowed "
                "(shorten env values, args or secrets)"
            )


def _validate_fields(spec: WorkloadSpec) -> None:
    if type(spec.version) is not int or spec.version != WORKLOAD_VERSION:
        raise WorkloadSpecError(
            f"version {spec.version!r} is not supported; this SDK knows version {WORKLOAD_VERSION}"
        )
    _check_image(spec.image)
    for field in ("command", "args"):
        items = getattr(spec, field)
        if not isinstance(items, tuple):
            raise WorkloadSpecError(f"{field} must be a tuple of strings")
        for i, item in enumerate(items):
            _check_str(f"{field}[{i}]", item, MAX_ITEM_BYTES)
    n_argv = len(spec.command) + len(spec.args)
    if n_argv > MAX_ARGV_ITEMS:
        raise WorkloadSpecError(
            f"command and args have {n_argv} items together; at most {MAX_ARGV_ITEMS} allowed"
        )
    if spec.command and (spec.command[0] == "" or spec.command[0].startswith("-")):
        raise WorkloadSpecError(
            f"command[0] {spec.command[0]!r} is not allowed; the entrypoint must be non-empty "
            "and must not start with '-'"
        )
    env = _check_pairs("env", spec.env)
    secret_env = _check_pairs("secret_env", spec.secret_env)
    n_env = len(env) + len(secret_env)
    if n_env > MAX_ENV_ENTRIES:
        raise WorkloadSpecError(
            f"env and secret_env have {n_env} entries together; at most {MAX_ENV_ENTRIES} allowed"
        )
    for name, value in env:
        _check_str(f"env[{name!r}]", value, MAX_ITEM_BYTES)
    for name, value in secret_env:
        _check_secret_b64(f"secret_env[{name!r}]", value)
    both = sorted({n for n, _ in env} & {n for n, _ in secret_env})
    if both:
        raise WorkloadSpecError(
            f"{both[0]!r} is in both env and secret_env; a name may be set only once"
        )
    if not isinstance(spec.ports, tuple):
        raise WorkloadSpecError("ports must be a tuple of PortSpec")
    if len(spec.ports) > MAX_PORTS:
        raise WorkloadSpecError(f"ports has {len(spec.ports)} entries; at most {MAX_PORTS} allowed")
    for i, port in enumerate(spec.ports):
        if not isinstance(port, PortSpec):
            raise WorkloadSpecError(f"ports[{i}] must be a PortSpec, got {type(port).__name__}")
        port.validate(f"ports[{i}]")
    for a, b in itertools.pairwise(spec.ports):
        if a == b:
            raise WorkloadSpecError(f"ports has {a} twice; each port/protocol once")
        if (a.port, a.protocol) > (b.port, b.protocol):
            raise WorkloadSpecError(f"ports must be sorted ({a} before {b})")
    if spec.shm_size_mib is not None:
        _check_int("shm_size_mib", spec.shm_size_mib, 1, MAX_SHM_MIB)
    if spec.scratch_mib is not None:
        _check_int("scratch_mib", spec.scratch_mib, 1, MAX_SCRATCH_MIB)
    if not isinstance(spec.finish_on_exit, bool):
        raise WorkloadSpecError(
            f"finish_on_exit must be true or false, got {type(spec.finish_on_exit).__name__}"
        )
    if spec.checkpoint is not None:
        if not isinstance(spec.checkpoint, CheckpointSpec):
            raise WorkloadSpecError("checkpoint must be a CheckpointSpec or None")
        spec.checkpoint.validate()
    if spec.cluster is not None:
        if not isinstance(spec.cluster, ClusterSpec):
            raise WorkloadSpecError("cluster must be a ClusterSpec or None")
        spec.cluster.validate()
        taken = sorted({n for n, _ in (*env, *secret_env)} & set(CONTRACT_ENV))
        if taken:
            raise WorkloadSpecError(
                f"{taken[0]} is set by the cluster's environment contract on every node; "
                "remove it from env and secrets"
            )


def _to_json_unchecked(spec: WorkloadSpec) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "version": spec.version,
        "image": spec.image,
        "command": list(spec.command),
        "args": list(spec.args),
        "env": dict(spec.env),
        "secret_env": dict(spec.secret_env),
        "ports": [{"port": p.port, "protocol": p.protocol} for p in spec.ports],
    }
    if spec.shm_size_mib is not None:
        obj["shm_size_mib"] = spec.shm_size_mib
    if spec.scratch_mib is not None:
        obj["scratch_mib"] = spec.scratch_mib
    obj["finish_on_exit"] = spec.finish_on_exit
    if spec.checkpoint is not None:
        obj["checkpoint"] = checkpoint_to_json(spec.checkpoint)
    if spec.cluster is not None:
        obj["cluster"] = cluster_to_json(spec.cluster)
    return obj


def _dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def spec_to_json(spec: WorkloadSpec) -> dict[str, Any]:
    """The JSON object form of a valid ``spec`` (module docstring); WorkloadSpecError if
    ``spec`` is not valid."""
    spec.validate()
    return _to_json_unchecked(spec)


def canonical_bytes(spec: WorkloadSpec) -> bytes:
    """The canonical encoding of a valid ``spec`` (at most 64 KiB, ASCII only)."""
    spec.validate()
    return _dumps(_to_json_unchecked(spec))


def spec_hash(spec: WorkloadSpec) -> bytes:
    """sha256 of :func:`canonical_bytes` (32 bytes): the ``workload_hash`` for create_job."""
    return hashlib.sha256(canonical_bytes(spec)).digest()


# ----------------------------------------------------------------------------- JSON input


def _json_list_of_str(field: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise WorkloadSpecError(f"{field} must be a JSON array of strings")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise WorkloadSpecError(f"{field}[{i}] must be a string, got {_json_type(item)}")
    return tuple(value)


def _json_object_of_str(field: str, value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise WorkloadSpecError(f"{field} must be a JSON object of name: string")
    for name, item in value.items():
        if not isinstance(item, str):
            raise WorkloadSpecError(f"{field}[{name!r}] must be a string, got {_json_type(item)}")
    return tuple(value.items())


def _json_ports(value: object) -> tuple[PortSpec, ...]:
    if not isinstance(value, list):
        raise WorkloadSpecError('ports must be a JSON array of {"port": int, "protocol": str}')
    ports = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise WorkloadSpecError(
                f'ports[{i}] must be an object {{"port": int, "protocol": "tcp"|"udp"}}'
            )
        unknown = sorted(set(item) - _PORT_KEYS)
        if unknown:
            raise WorkloadSpecError(
                f"ports[{i}] has the unknown key {unknown[0]!r}; allowed: port, protocol"
            )
        if "port" not in item:
            raise WorkloadSpecError(f'ports[{i}] is missing "port"')
        protocol = item.get("protocol", "tcp")
        if not isinstance(protocol, str):
            raise WorkloadSpecError(f'ports[{i}].protocol must be "tcp" or "udp"')
        port = PortSpec(_check_int(f"ports[{i}].port", item["port"], 1, 65535), protocol)
        port.validate(f"ports[{i}]")
        ports.append(port)
    return tuple(ports)


def spec_from_json(obj: dict[str, Any] | str | bytes) -> WorkloadSpec:
    """Parse the JSON form (a parsed object, JSON text or UTF-8 bytes) into a valid spec.

    Only ``image`` is required; missing fields take their defaults and ``null`` means
    "omitted" for ``shm_size_mib``, ``scratch_mib``, ``checkpoint`` and ``cluster``. Raises
    :class:`WorkloadSpecError` on anything else that is not exactly the documented form;
    ordering is normalized.
    """
    if isinstance(obj, (bytes, bytearray, memoryview)):
        if len(obj) > _MAX_JSON_INPUT_BYTES:
            raise WorkloadSpecError(
                f"the spec JSON is {len(obj)} bytes; at most {_MAX_JSON_INPUT_BYTES} accepted"
            )
        try:
            obj = bytes(obj).decode("utf-8")
        except UnicodeDecodeError as e:
            raise WorkloadSpecError(f"the spec JSON is not UTF-8: {e}") from None
    if isinstance(obj, str):
        if len(obj) > _MAX_JSON_INPUT_BYTES:
            raise WorkloadSpecError(
                f"the spec JSON is {len(obj)} characters; at most {_MAX_JSON_INPUT_BYTES} accepted"
            )
        try:
            obj = json.loads(
                obj,
                object_pairs_hook=_no_duplicate_keys,
                parse_float=_reject_float,
                parse_constant=_reject_constant,
            )
        except json.JSONDecodeError as e:
            raise WorkloadSpecError(f"the spec is not valid JSON: {e}") from None
        except RecursionError:
            raise WorkloadSpecError("the spec JSON is nested too deeply") from None
    if not isinstance(obj, dict):
        raise WorkloadSpecError(f"the spec must be a JSON object, got {_json_type(obj)}")
    unknown = sorted(set(obj) - _SPEC_KEYS)
    if unknown:
        raise WorkloadSpecError(
            f"the spec has the unknown key {unknown[0]!r}; allowed: {', '.join(sorted(_SPEC_KEYS))}"
        )
    if "image" not in obj:
        raise WorkloadSpecError('the spec is missing "image"')
    version = obj.get("version", WORKLOAD_VERSION)
    if isinstance(version, bool) or not isinstance(version, int):
        raise WorkloadSpecError(f"version must be the integer {WORKLOAD_VERSION}")
    image = obj["image"]
    if not isinstance(image, str):
        raise WorkloadSpecError(f"image must be a string, got {_json_type(image)}")
    optional_ints: dict[str, int | None] = {}
    for field, hi in (("shm_size_mib", MAX_SHM_MIB), ("scratch_mib", MAX_SCRATCH_MIB)):
        value = obj.get(field)
        optional_ints[field] = None if value is None else _check_int(field, value, 1, hi)
    finish = obj.get("finish_on_exit", False)
    if not isinstance(finish, bool):
        raise WorkloadSpecError(f"finish_on_exit must be true or false, got {_json_type(finish)}")
    spec = WorkloadSpec(
        image=image,
        command=_json_list_of_str("command", obj.get("command", [])),
        args=_json_list_of_str("args", obj.get("args", [])),
        env=_json_object_of_str("env", obj.get("env", {})),
        secret_env=_json_object_of_str("secret_env", obj.get("secret_env", {})),
        ports=_json_ports(obj.get("ports", [])),
        shm_size_mib=optional_ints["shm_size_mib"],
        scratch_mib=optional_ints["scratch_mib"],
        finish_on_exit=finish,
        version=version,
        checkpoint=None if obj.get("checkpoint") is None else checkpoint_from_json(
            obj["checkpoint"]),
        cluster=None if obj.get("cluster") is None else cluster_from_json(obj["cluster"]),
    )
    spec.validate()
    return spec


# ----------------------------------------------------------------------------- CLI arguments


def parse_env_arg(text: str) -> tuple[str, str]:
    """``"NAME=value"`` (``--env``/``--secret``) -> ``(NAME, value)``; the value may be
    empty and may contain ``=``. WorkloadSpecError on a bad name, NUL or an oversize value."""
    name, sep, value = text.partition("=")
    if not sep:
        raise WorkloadSpecError(f"{text!r} is not NAME=VALUE (e.g. --env HF_HOME=/scratch/hf)")
    _check_env_name("env", name)
    _check_str(f"env[{name!r}]", value, MAX_ITEM_BYTES)
    return name, value


def parse_port_arg(text: str) -> PortSpec:
    """``"8888"`` or ``"8888/udp"`` (``--port``) -> PortSpec; WorkloadSpecError otherwise."""
    m = re.fullmatch(r"([0-9]{1,5})(?:/(tcp|udp))?", text.strip())
    if m is None:
        raise WorkloadSpecError(f"{text!r} is not PORT or PORT/PROTOCOL (e.g. 8888 or 5000/udp)")
    port = PortSpec(int(m.group(1)), m.group(2) or "tcp")
    port.validate("port")
    return port


# ----------------------------------------------------------------------------- sealed secrets


def _curve_public_key(worker_key: object) -> bytes:
    pk = _as_bytes("worker_key", worker_key, 32)
    try:
        return _sodium.crypto_sign_ed25519_pk_to_curve25519(pk)
    except CryptoError:  # nacl's RuntimeError: not a point, or of small order
        raise WorkloadSpecError(
            "worker_key is not a valid ed25519 public key (use the provider's worker key)"
        ) from None


def seal_secret(worker_key: bytes, plaintext: bytes) -> bytes:
    """Sealed box (``crypto_box_seal``) of ``plaintext`` (at most 4096 bytes) to the
    provider's ed25519 ``worker_key`` (32 bytes or a solders Pubkey); 48 bytes longer than
    ``plaintext`` and different on every call."""
    if not isinstance(plaintext, (bytes, bytearray, memoryview)):
        raise ValueError(f"plaintext must be bytes, got {type(plaintext).__name__}")  # noqa: TRY004
    pt = bytes(plaintext)
    if len(pt) > MAX_ITEM_BYTES:
        raise WorkloadSpecError(
            f"a secret is {len(pt)} bytes; at most {MAX_ITEM_BYTES} bytes allowed"
        )
    return SealedBox(PublicKey(_curve_public_key(worker_key))).encrypt(pt)


def open_secret(worker_seed: bytes, sealed: bytes) -> bytes:
    """Worker side: open a sealed box with the worker key's 32-byte ed25519 seed (or its
    64-byte seed||pubkey keypair). WorkloadSpecError if it was sealed to another key or is
    damaged."""
    raw = _as_bytes("worker_seed", worker_seed, (32, 64))
    pk, sk = _sodium.crypto_sign_seed_keypair(raw[:32])
    if len(raw) == 64 and raw[32:] != pk:
        raise ValueError("worker_seed is 64 bytes but its last 32 are not the seed's public key")
    box = SealedBox(PrivateKey(_sodium.crypto_sign_ed25519_sk_to_curve25519(sk)))
    sealed = bytes(sealed)
    if len(sealed) < SEALED_BOX_OVERHEAD:
        raise WorkloadSpecError(
            f"a sealed secret is at least {SEALED_BOX_OVERHEAD} bytes, got {len(sealed)}"
        )
    try:
        return box.decrypt(sealed)
    except CryptoError:
        raise WorkloadSpecError(
            "cannot open the sealed secret: it was sealed to a different worker key or is "
            "damaged (seal it again to this provider's worker key)"
        ) from None


def seal_secrets(worker_key: bytes, secrets: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``secret_env`` entries for ``secrets`` (name -> plaintext): sorted ``(name, base64
    of seal_secret(worker_key, UTF-8 value))``. Names and values follow the ``env`` rules."""
    out = []
    for name, value in secrets.items():
        _check_env_name("secret_env", name)
        _check_str(f"secret_env[{name!r}]", value, MAX_ITEM_BYTES)
        sealed = seal_secret(worker_key, value.encode("utf-8"))
        out.append((name, base64.b64encode(sealed).decode("ascii")))
    return tuple(sorted(out))


def open_secrets(worker_seed: bytes, spec: WorkloadSpec) -> tuple[tuple[str, str], ...]:
    """Worker side: every ``secret_env`` entry of ``spec`` decrypted to ``(name, text)``,
    sorted by name. WorkloadSpecError naming the secret that cannot be opened or is not
    UTF-8 text without NUL."""
    out = []
    for name, b64 in spec.secret_env:
        field = f"secret_env[{name!r}]"
        _check_secret_b64(field, b64)
        try:
            plaintext = open_secret(worker_seed, base64.b64decode(b64))
        except WorkloadSpecError as e:
            raise WorkloadSpecError(f"{field}: {e}") from None
        try:
            text = plaintext.decode("utf-8")
        except UnicodeDecodeError:
            raise WorkloadSpecError(f"{field} does not decrypt to UTF-8 text") from None
        _check_str(field, text, MAX_ITEM_BYTES)
        out.append((name, text))
    return tuple(sorted(out))


# ----------------------------------------------------------------------------- requests

REQUEST_DOMAIN = b"gpum-workload-request-v1\x00"
REQUEST_MAX_SKEW_S = 300
ACTIONS = ("deliver", "status", "logs", "exec", "files", "mesh")
"""``exec`` and ``files`` sign ``gpu_market.exec_api.request_digest`` in place of the
workload hash (the request's own content, with a nonce: each is accepted once). ``mesh``
(a cluster node's ``/v1/jobs/<job>/mesh``) signs the job's workload hash for a ``GET`` and
the sha256 of the body (``gpu_market.mesh.peers_digest``) for a ``POST``, so a signature
authorizes exactly one peer list."""
_H_SIGNER = "X-Gpum-Signer"
_H_TIMESTAMP = "X-Gpum-Timestamp"
_H_SIGNATURE = "X-Gpum-Signature"
_TIMESTAMP_RE = re.compile(r"0|-?[1-9][0-9]{0,18}")


def request_message(action: str, job: bytes, workload_hash: bytes, timestamp: int) -> bytes:
    """``REQUEST_DOMAIN || u8 len(action) || action || job(32) || workload_hash(32) ||
    timestamp:i64le``; ValueError on an unknown action, a key/hash that is not 32 bytes
    or a timestamp outside i64."""
    if action not in ACTIONS:
        raise ValueError(f"action {action!r} is not one of {', '.join(ACTIONS)}")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise ValueError(f"timestamp must be an int, got {type(timestamp).__name__}")  # noqa: TRY004
    if not I64_MIN <= timestamp <= I64_MAX:
        raise ValueError(f"timestamp={timestamp} is out of i64 range")
    a = action.encode("ascii")
    return b"".join((
        REQUEST_DOMAIN, bytes([len(a)]), a,
        _as_bytes("job", job, 32), _as_bytes("workload_hash", workload_hash, 32),
        struct.pack("<q", timestamp),
    ))  # fmt: skip


def _keypair_seed(signer_secret: object) -> tuple[bytes, bytes]:
    raw = _as_bytes("signer_secret", signer_secret, 64)
    seed, pubkey = raw[:32], raw[32:]
    if public_key_bytes(private_key_from_seed(seed)) != pubkey:
        raise ValueError(
            "signer_secret is not a Solana keypair: its last 32 bytes are not the public key "
            "of its first 32 (pass Keypair.to_bytes() or the 64 numbers of a key file)"
        )
    return seed, pubkey


def sign_request(
    signer_secret: bytes, action: str, job: bytes, workload_hash: bytes, timestamp: int
) -> dict[str, str]:
    """HTTP headers that authorize ``action`` on ``job`` as the wallet ``signer_secret``
    (64-byte seed||pubkey, a solders Keypair's ``to_bytes()`` or a CLI key file)."""
    seed, pubkey = _keypair_seed(signer_secret)
    sig = sign(seed, request_message(action, job, workload_hash, timestamp))
    return {
        _H_SIGNER: str(Pubkey.from_bytes(pubkey)),
        _H_TIMESTAMP: str(timestamp),
        _H_SIGNATURE: str(Signature.from_bytes(sig)),
    }


def _header_values(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    items = headers.items() if hasattr(headers, "items") else headers
    wanted = {h.lower() for h in (_H_SIGNER, _H_TIMESTAMP, _H_SIGNATURE)}
    out: dict[str, str] = {}
    for name, value in items:
        key = str(name).lower()
        if key not in wanted:
            continue
        if key in out:
            raise RequestAuthError(401, f"the request has the {name} header twice")
        out[key] = str(value)
    return out


def verify_request(
    headers: Mapping[str, str],
    action: str,
    job: bytes,
    workload_hash: bytes,
    *,
    expected_signer: bytes,
    now: int,
) -> None:
    """Worker side: return if ``headers`` carry a valid signature by ``expected_signer``
    (the job's user, 32 bytes or a Pubkey) of ``action`` on ``job`` with ``workload_hash``,
    timestamped within ``REQUEST_MAX_SKEW_S`` of ``now``; raise :class:`RequestAuthError`
    otherwise (401 before 403: a stale or forged request is 401 whoever claims to sign it).

    ``headers`` is any mapping (names case-insensitive; http.client, httpx and dicts work).
    """
    request_message(action, job, workload_hash, _check_now(now))  # the caller's arguments
    expected = _as_bytes("expected_signer", expected_signer, 32)
    values = _header_values(headers)
    for name in (_H_SIGNER, _H_TIMESTAMP, _H_SIGNATURE):
        if name.lower() not in values:
            raise RequestAuthError(
                401,
                f"missing {name} header: sign the request with the job's user wallet "
                "(gpu_market.workload.sign_request)",
            )
    signer_text = values[_H_SIGNER.lower()].strip()
    ts_text = values[_H_TIMESTAMP.lower()].strip()
    sig_text = values[_H_SIGNATURE.lower()].strip()
    try:
        signer = bytes(Pubkey.from_string(signer_text))
    except ValueError:
        raise RequestAuthError(
            401, f"{_H_SIGNER} {signer_text[:64]!r} is not a base58 public key"
        ) from None
    if not _TIMESTAMP_RE.fullmatch(ts_text) or not I64_MIN <= int(ts_text) <= I64_MAX:
        raise RequestAuthError(
            401, f"{_H_TIMESTAMP} {ts_text[:32]!r} is not unix seconds as a decimal integer"
        )
    timestamp = int(ts_text)
    try:
        sig = bytes(Signature.from_string(sig_text))
    except ValueError:
        raise RequestAuthError(
            401, f"{_H_SIGNATURE} is not a base58 64-byte ed25519 signature"
        ) from None
    message = request_message(action, job, workload_hash, timestamp)
    if not verify(signer, sig, message):
        raise RequestAuthError(
            401,
            f"the request signature does not verify for {action} on this job and workload "
            "hash (signed for another job, hash, action or timestamp, or by another key)",
        )
    skew = timestamp - now
    if abs(skew) > REQUEST_MAX_SKEW_S:
        raise RequestAuthError(
            401,
            f"the request timestamp is {skew:+d} s from the worker's clock; at most "
            f"±{REQUEST_MAX_SKEW_S} s allowed (check this machine's clock, then retry)",
        )
    if signer != expected:
        raise RequestAuthError(
            403,
            f"{Pubkey.from_bytes(signer)} is not this job's user "
            f"({Pubkey.from_bytes(expected)}); sign with the wallet that created the job",
        )


def _check_now(now: object) -> int:
    if isinstance(now, bool) or not isinstance(now, int):
        raise ValueError(f"now must be an int (unix seconds), got {type(now).__name__}")  # noqa: TRY004
    return now
