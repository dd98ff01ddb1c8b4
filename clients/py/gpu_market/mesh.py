"""A cluster node's mesh key and peer list: the bytes a worker signs and the checks both sides
run (pure: no I/O). The user side (``cluster_mesh``) and the worker (``gpum_worker.mesh_api``)
use these functions, so they agree byte for byte. docs/protocol.md, "Workloads", "Clusters".

A node's worker makes the job's WireGuard key pair on its own host (the private key never
leaves it) and publishes the public key with the UDP endpoint it listens on, signed by its
worker key (ed25519) over the **mesh key digest**::

    sha256(b"gpu-market/mesh-key/v1" || job (32) || wg_public_key (32)
           || u16le len(endpoint) || endpoint (UTF-8))

``GET /v1/jobs/<job>/mesh`` answers ``{"job", "public_key", "endpoint", "worker_key",
"signature"}`` (the key standard base64, the others base58). The user collects every node's
answer and posts each node the others' as its peer list: ``{"version": N, "peers": [{"rank",
"job", "public_key", "endpoint", "worker_key", "signature"}, ...]}``, signed by the user over
:func:`peers_digest` of the body (``workload.sign_request`` action ``"mesh"``).

:func:`parse_peer_doc` is what a worker accepts: ``version`` an integer 0..2^53-1 (absent: 0),
and either exactly the ranks ``0..nodes-1`` but its own, or every rank, its own included
(then that entry must name its own job; a list with a version of 1 or more names every
node), each rank once, no job twice, every key 32 bytes of canonical base64, every endpoint
``host:port`` someone can send to, every signature valid for its ``worker_key``. A worker
keeps the newest version it accepted and takes a later list only with a higher version that
leaves its own entry as it is (``gpum_worker.mesh_api``), so a replayed old list never rolls
a replaced node back.
Whether each ``worker_key`` is its provider's current key, and whether each job is the user's
and live, the worker reads from chain (``gpum_worker.mesh_api``). Every refusal is a
:class:`MeshKeyError` whose message names the entry and what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
import struct
from dataclasses import dataclass
from typing import Any

from solders.pubkey import Pubkey
from solders.signature import Signature

from .receipt import sign, verify

__all__ = [
    "MAX_ENDPOINT_BYTES",
    "MAX_PEER_LIST_BYTES",
    "MAX_PEER_LIST_VERSION",
    "MESH_KEY_DOMAIN",
    "PEER_KEYS",
    "MeshKeyError",
    "MeshPeer",
    "PeerList",
    "check_udp_endpoint",
    "check_wg_key",
    "mesh_key_digest",
    "parse_peer_doc",
    "parse_peer_list",
    "peers_digest",
    "sign_mesh_key",
    "verify_mesh_key",
    "wg_public_key",
]

MESH_KEY_DOMAIN = b"gpu-market/mesh-key/v1"
MAX_ENDPOINT_BYTES = 255
MAX_PEER_LIST_BYTES = 64 * 1024
"""A peer list of 63 nodes is about 20 KiB."""
MAX_PEER_LIST_VERSION = 2**53 - 1
"""The largest peer list version (exact in every JSON reader)."""
PEER_KEYS = ("rank", "job", "public_key", "endpoint", "worker_key", "signature")


class MeshKeyError(ValueError):
    """A mesh key, endpoint or peer list that must not be used (the message says why)."""


def mesh_key_digest(job: bytes, wg_public_key: bytes, endpoint: str) -> bytes:
    """What a worker signs for a node's mesh key (module docstring); MeshKeyError on a job or
    key that is not 32 bytes or an endpoint over ``MAX_ENDPOINT_BYTES`` bytes."""
    job, key = bytes(job), bytes(wg_public_key)
    if len(job) != 32 or len(key) != 32:
        raise MeshKeyError("job and wg_public_key must be 32 bytes each")
    raw = endpoint.encode("utf-8")
    if len(raw) > MAX_ENDPOINT_BYTES:
        raise MeshKeyError(f"the endpoint is {len(raw)} bytes; at most {MAX_ENDPOINT_BYTES}")
    return hashlib.sha256(MESH_KEY_DOMAIN + job + key + struct.pack("<H", len(raw)) + raw
                          ).digest()


def sign_mesh_key(worker_seed: bytes, job: bytes, wg_public_key: bytes, endpoint: str) -> bytes:
    """The worker key's (32-byte ed25519 seed) signature of the mesh key digest."""
    digest = mesh_key_digest(job, wg_public_key, endpoint)
    return sign(bytes(worker_seed)[:32], digest)


def verify_mesh_key(worker_key: bytes, signature: bytes, job: bytes, wg_public_key: bytes,
                    endpoint: str) -> bool:
    """True when ``signature`` is ``worker_key``'s over the mesh key digest; never raises."""
    try:
        digest = mesh_key_digest(job, wg_public_key, endpoint)
    except (MeshKeyError, UnicodeEncodeError, TypeError):
        return False
    return verify(bytes(worker_key), bytes(signature), digest)


def peers_digest(body: bytes) -> bytes:
    """What the user signs for a posted peer list, in place of the workload hash: the sha256
    of the exact body bytes (so a signature authorizes exactly that list)."""
    return hashlib.sha256(bytes(body)).digest()


def check_wg_key(text: object, what: str = "the mesh public key") -> bytes:
    """The 32 bytes of a WireGuard key in canonical standard base64; MeshKeyError otherwise."""
    try:
        key = base64.b64decode(str(text).encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        key = b""
    if not isinstance(text, str) or len(key) != 32 or base64.b64encode(key).decode() != text:
        raise MeshKeyError(f"{what} {str(text)[:60]!r} is not 32 bytes of standard base64")
    return key


def wg_public_key(private_key: bytes) -> bytes:
    """The WireGuard (X25519) public key of a 32-byte private key."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    sk = X25519PrivateKey.from_private_bytes(bytes(private_key))
    return sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def check_udp_endpoint(endpoint: object, what: str = "the endpoint") -> str:
    """``endpoint`` if it is ``host:port`` (``[v6]:port`` for IPv6; a name or an address)
    that a peer can send to: port 1..65535, not an unspecified address; MeshKeyError
    otherwise."""
    if not isinstance(endpoint, str) or not endpoint \
            or len(endpoint.encode("utf-8", "replace")) > MAX_ENDPOINT_BYTES:
        raise MeshKeyError(f"{what} {str(endpoint)[:60]!r} is not a UDP host:port")
    host, sep, port = endpoint.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535 \
            or port != str(int(port)):
        raise MeshKeyError(f"{what} {endpoint!r} is not host:port with a port 1..65535")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is None and (bracketed or not _is_hostname(host)):
        raise MeshKeyError(f"{what} {endpoint!r} is not host:port (the host is neither an "
                           "address nor a DNS name)")
    if ip is not None and (ip.version == 6) != bracketed:
        raise MeshKeyError(f"{what} {endpoint!r}: write an IPv6 address in brackets, "
                           "[addr]:port, and an IPv4 address without")
    if ip is not None and ip.is_unspecified:
        raise MeshKeyError(f"{what} {endpoint!r}: nobody can send to an unspecified address; "
                           "the provider sets its public address in the worker's [cluster] "
                           "public_host")
    return endpoint


def _is_hostname(host: str) -> bool:
    if len(host) > 253 or not host.isascii():
        return False
    labels = host.rstrip(".").split(".")
    return all(0 < len(label) <= 63 and label[0] != "-" and label[-1] != "-"
               and all(c.isalnum() or c == "-" for c in label) for label in labels)


@dataclass(frozen=True)
class MeshPeer:
    """One accepted entry of a peer list (raw bytes; ``endpoint`` as published)."""

    rank: int
    job: bytes
    public_key: bytes
    endpoint: str
    worker_key: bytes
    signature: bytes

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "job": str(Pubkey.from_bytes(self.job)),
                "public_key": base64.b64encode(self.public_key).decode(),
                "endpoint": self.endpoint,
                "worker_key": str(Pubkey.from_bytes(self.worker_key)),
                "signature": str(Signature.from_bytes(self.signature))}


def _b58_key(value: object) -> bytes:
    """The 32 bytes of a base58 key, or b"" when ``value`` is none."""
    try:
        return bytes(Pubkey.from_string(value)) if isinstance(value, str) else b""
    except ValueError:
        return b""


def _peer(entry: object, i: int) -> MeshPeer:
    where = f"peer entry {i}"
    if not isinstance(entry, dict) or set(entry) != set(PEER_KEYS):
        raise MeshKeyError(f"{where} must be an object with exactly the keys "
                           f"{', '.join(PEER_KEYS)}")
    rank = entry["rank"]
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise MeshKeyError(f"{where}: rank must be an integer")
    where = f"the peer of rank {rank}"
    job = _b58_key(entry["job"])
    worker_key = _b58_key(entry["worker_key"])
    if len(job) != 32:
        raise MeshKeyError(f"{where}: job {str(entry['job'])[:60]!r} is not a base58 address")
    if len(worker_key) != 32:
        raise MeshKeyError(f"{where}: worker_key {str(entry['worker_key'])[:60]!r} is not a "
                           "base58 public key")
    public_key = check_wg_key(entry["public_key"], f"{where}: public_key")
    endpoint = check_udp_endpoint(entry["endpoint"], f"{where}: endpoint")
    try:
        signature = bytes(Signature.from_string(entry["signature"])) \
            if isinstance(entry["signature"], str) else b""
    except ValueError:
        signature = b""
    if len(signature) != 64:
        raise MeshKeyError(f"{where}: signature is not a base58 ed25519 signature")
    if not verify_mesh_key(worker_key, signature, job, public_key, endpoint):
        raise MeshKeyError(f"{where}: the signature does not verify with worker_key "
                           f"{Pubkey.from_bytes(worker_key)} for job "
                           f"{Pubkey.from_bytes(job)}, its public key and endpoint (ask its "
                           "worker for its mesh key again)")
    return MeshPeer(rank, job, public_key, endpoint, worker_key, signature)


@dataclass(frozen=True)
class PeerList:
    """An accepted peer list: its ``version``, every other node's entry (rank order) and, when
    the list names it, this node's own entry."""

    version: int
    peers: tuple[MeshPeer, ...]
    own: MeshPeer | None = None


def parse_peer_doc(body: bytes | str | dict[str, Any], *, job: bytes, rank: int,
                   nodes: int) -> PeerList:
    """The peer list of node ``rank`` (job ``job``) of a cluster of ``nodes``; MeshKeyError
    naming the first problem (module docstring). Signatures are checked; whether the own
    entry is this node's current key, and the chain checks, are the caller's."""
    if isinstance(body, (bytes, str)):
        raw = body.encode() if isinstance(body, str) else body
        if len(raw) > MAX_PEER_LIST_BYTES:
            raise MeshKeyError(f"the peer list is {len(raw)} bytes; at most "
                               f"{MAX_PEER_LIST_BYTES}")
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise MeshKeyError("the peer list is not JSON") from None
    else:
        doc = body
    if not isinstance(doc, dict) or "peers" not in doc or not set(doc) <= {"peers", "version"} \
            or not isinstance(doc["peers"], list):
        raise MeshKeyError('send {"version": N, "peers": [...]}: every other node of the '
                           "cluster (or every node), each with rank, job, public_key, "
                           "endpoint, worker_key and signature")
    version = doc.get("version", 0)
    if isinstance(version, bool) or not isinstance(version, int) \
            or not 0 <= version <= MAX_PEER_LIST_VERSION:
        raise MeshKeyError(f"the peer list's version {str(version)[:30]!r} is not an integer "
                           f"0..{MAX_PEER_LIST_VERSION}")
    entries = doc["peers"]
    if len(entries) > nodes:
        raise MeshKeyError(f"the peer list has {len(entries)} entries; this cluster has "
                           f"{nodes} nodes")
    full = len(entries) == nodes
    if version > 0 and not full:
        raise MeshKeyError(f"a peer list with a version names every node, this one included "
                           f"({nodes} entries, not {len(entries)})")
    peers = [_peer(e, i) for i, e in enumerate(entries)]
    seen: dict[int, MeshPeer] = {}
    own: MeshPeer | None = None
    for p in peers:
        if not 0 <= p.rank < nodes:
            raise MeshKeyError(f"the peer list names rank {p.rank}; this cluster's ranks are "
                               f"0..{nodes - 1}")
        if p.rank in seen or (own is not None and p.rank == rank):
            raise MeshKeyError(f"the peer list names rank {p.rank} twice")
        if p.rank == rank:
            if not full:
                raise MeshKeyError(f"the peer list names rank {rank}, which is this node itself")
            if p.job != job:
                raise MeshKeyError(f"the peer list's entry of rank {rank}, this node, names job "
                                   f"{Pubkey.from_bytes(p.job)}, not this node's job "
                                   f"{Pubkey.from_bytes(bytes(job))}")
            own = p
            continue
        seen[p.rank] = p
    jobs = [p.job for p in seen.values()]
    if job in jobs:
        raise MeshKeyError("the peer list names this node's own job as a peer")
    if len(set(jobs)) != len(jobs):
        raise MeshKeyError("the peer list names one job under two ranks")
    missing = [r for r in range(nodes) if r != rank and r not in seen]
    if missing:
        raise MeshKeyError(f"the peer list lacks rank {missing[0]} (every node but this one, "
                           f"{nodes - 1} entries)")
    return PeerList(version, tuple(seen[r] for r in sorted(seen)), own)


def parse_peer_list(body: bytes | str | dict[str, Any], *, job: bytes, rank: int,
                    nodes: int) -> tuple[MeshPeer, ...]:
    """The other nodes' entries of :func:`parse_peer_doc`, in rank order."""
    return parse_peer_doc(body, job=job, rank=rank, nodes=nodes).peers
