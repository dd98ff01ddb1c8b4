"""The cluster section of a workload spec, and what follows from it (pure: no I/O); the format
is docs/protocol.md, "Workloads", and docs/wire-formats.md.

A job whose spec has a ``cluster`` key is one node of a cluster: K jobs of one user, one per
rank, each on some provider, joined by their workers into one private WireGuard network. JSON
form, the value of the spec's ``cluster`` key (omitted when the job is no cluster node, so
such specs encode and hash as before the key existed)::

    {"id": "<16 lowercase hex>",   the cluster's id, the same in every node's spec
     "rank": 0,                    0..nodes-1, this node's place
     "nodes": 2,                   2..64 (MAX_NODES)
     "gpus_per_node": 4,           1..256, the GPUs of every node's job
     "master_port": 29500,         1..65535, MASTER_PORT of the environment contract
     "subnet": "10.77.<x>.0/24"}   the mesh's addresses: node R is host R+1

Every key is required; parsing is strict (unknown keys, bools or floats for integers, a rank
outside ``0..nodes-1``, any other subnet form are :class:`WorkloadSpecError`). A node's mesh
address is the subnet's host ``rank + 1`` (:meth:`ClusterSpec.node_address`); the user side
picks the subnet from the cluster id (:func:`subnet_for`), so the nodes of one cluster agree on
it without talking to each other, and draws the id so that its subnet is none its nodes' hosts
already use (:func:`new_cluster_id`).

**Environment contract.** The worker sets, in every node's container, the variables of
:data:`CONTRACT_ENV` (values: :func:`contract_env`); a spec of a cluster node may not set any
of them itself (in ``env`` or ``secret_env``).

**Job ids.** Node ``rank`` of cluster ``id`` is the job with id :func:`node_job_id` (``id``
and ``rank`` hashed), so its address (``job_pda(market, user, job_id)``) is known before it is
created: a create retried after an ambiguous error lands at the same address or fails, and
never makes a second job for one rank.
"""

from __future__ import annotations

import hashlib
import re
import secrets as _secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from .spec_checks import WorkloadSpecError, check_int, json_type

__all__ = [
    "CLUSTER_KEYS",
    "CONTRACT_ENV",
    "DEFAULT_MASTER_PORT",
    "MAX_GPUS_PER_NODE",
    "MAX_NODES",
    "MESH_INTERFACE",
    "MIN_NODES",
    "ClusterSpec",
    "check_cluster_id",
    "cluster_from_json",
    "cluster_to_json",
    "contract_env",
    "new_cluster_id",
    "node_job_id",
    "subnet_for",
]

MIN_NODES = 2
MAX_NODES = 64
"""A /24 mesh has room for far more; 64 bounds the peer lists a worker configures."""
MAX_GPUS_PER_NODE = 256
DEFAULT_MASTER_PORT = 29500
MESH_INTERFACE = "gpum0"
"""The mesh's network interface inside every node's container."""
CLUSTER_KEYS = ("id", "rank", "nodes", "gpus_per_node", "master_port", "subnet")
CONTRACT_ENV = ("NODE_RANK", "NUM_NODES", "NODE_ADDR", "NODE_IPS", "MASTER_ADDR", "MASTER_PORT",
                "GPUS_PER_NODE", "WORLD_SIZE", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
"""The variables the worker sets in every node's container (the environment contract)."""

_ID_RE = re.compile(r"[0-9a-f]{16}")
_SUBNET_RE = re.compile(r"10\.77\.(0|[1-9][0-9]{0,2})\.0/24")
_JOB_ID_DOMAIN = b"gpum-cluster-node-v1"


def check_cluster_id(value: object, field: str = "cluster.id") -> str:
    """``value`` if it is a cluster id (16 lowercase hex digits); WorkloadSpecError otherwise."""
    if not isinstance(value, str) or not _ID_RE.fullmatch(value):
        shown = value if isinstance(value, str) else json_type(value)
        raise WorkloadSpecError(f"{field} must be 16 lowercase hex digits, got {shown!r}")
    return value


def new_cluster_id(avoid: Collection[int] = ()) -> str:
    """A fresh random cluster id (8 random bytes, hex) whose mesh subnet (its first byte,
    :func:`subnet_for`) is none of ``avoid`` while one is left: the subnets the nodes' hosts
    already use (each mesh lives in its own container's network, so a shared subnet would
    still work; distinct ones keep every host's meshes apart in its logs and tools)."""
    raw = bytearray(_secrets.token_bytes(8))
    taken = set(avoid)
    if raw[0] in taken:
        free = [x for x in range(256) if x not in taken]
        if free:
            raw[0] = _secrets.choice(free)
    return raw.hex()


def subnet_for(cluster_id: str) -> str:
    """The mesh subnet of cluster ``cluster_id``: ``10.77.<x>.0/24``, ``x`` its first byte."""
    check_cluster_id(cluster_id, "cluster id")
    return f"10.77.{int(cluster_id[:2], 16)}.0/24"


def node_job_id(cluster_id: str, rank: int, attempt: int = 0) -> int:
    """The job id (u64) of node ``rank`` of cluster ``cluster_id``: the first 8 bytes (little
    endian) of ``sha256(b"gpum-cluster-node-v1" || id (8 bytes) || rank u32 le)``; the
    ``attempt``-th successor of a failed node (a managed cluster's, attempt >= 1) appends
    ``attempt u32 le``, so every successor's address is fixed before it is created."""
    check_cluster_id(cluster_id, "cluster id")
    check_int("rank", rank, 0, MAX_NODES - 1)
    check_int("attempt", attempt, 0, 2**32 - 1)
    tail = attempt.to_bytes(4, "little") if attempt else b""
    digest = hashlib.sha256(_JOB_ID_DOMAIN + bytes.fromhex(cluster_id)
                            + rank.to_bytes(4, "little") + tail).digest()  # fmt: skip
    return int.from_bytes(digest[:8], "little")


@dataclass(frozen=True)
class ClusterSpec:
    """One node's cluster section (see the module docstring); built unchecked, checked by
    :meth:`validate` (which the spec's validation calls)."""

    id: str
    rank: int
    nodes: int
    gpus_per_node: int
    master_port: int = DEFAULT_MASTER_PORT
    subnet: str = ""
    """Empty: :func:`subnet_for` ``id`` (filled in when built)."""

    def __post_init__(self) -> None:
        if self.subnet == "" and isinstance(self.id, str) and _ID_RE.fullmatch(self.id):
            object.__setattr__(self, "subnet", subnet_for(self.id))

    def validate(self) -> None:
        """WorkloadSpecError naming the first field outside its limits."""
        check_cluster_id(self.id)
        check_int("cluster.nodes", self.nodes, MIN_NODES, MAX_NODES)
        check_int("cluster.rank", self.rank, 0, self.nodes - 1)
        check_int("cluster.gpus_per_node", self.gpus_per_node, 1, MAX_GPUS_PER_NODE)
        check_int("cluster.master_port", self.master_port, 1, 65535)
        m = _SUBNET_RE.fullmatch(self.subnet) if isinstance(self.subnet, str) else None
        if m is None or int(m.group(1)) > 255:
            raise WorkloadSpecError(f"cluster.subnet must be 10.77.X.0/24 with X 0..255, got "
                                    f"{self.subnet!r}")  # fmt: skip

    @property
    def world_size(self) -> int:
        """Every GPU of the cluster: ``nodes * gpus_per_node``."""
        return self.nodes * self.gpus_per_node

    def node_address(self, rank: int | None = None) -> str:
        """The mesh address of node ``rank`` (default: this node): the subnet's host rank+1."""
        r = self.rank if rank is None else rank
        check_int("rank", r, 0, self.nodes - 1)
        prefix = self.subnet.rsplit(".", 1)[0]
        return f"{prefix}.{r + 1}"

    def at_rank(self, rank: int) -> ClusterSpec:
        """The same cluster's section for node ``rank``."""
        return ClusterSpec(self.id, rank, self.nodes, self.gpus_per_node, self.master_port,
                           self.subnet)  # fmt: skip


def cluster_to_json(c: ClusterSpec) -> dict[str, Any]:
    """The JSON object of a valid section (every key)."""
    c.validate()
    return {"id": c.id, "rank": c.rank, "nodes": c.nodes, "gpus_per_node": c.gpus_per_node,
            "master_port": c.master_port, "subnet": c.subnet}  # fmt: skip


def cluster_from_json(obj: object) -> ClusterSpec:
    """The section of the JSON object ``obj``, checked; WorkloadSpecError naming the key."""
    if not isinstance(obj, dict):
        raise WorkloadSpecError(f"cluster must be a JSON object, got {json_type(obj)}")
    unknown = sorted(set(obj) - set(CLUSTER_KEYS))
    if unknown:
        raise WorkloadSpecError(f"cluster has the unknown key {unknown[0]!r}; allowed: "
                                f"{', '.join(CLUSTER_KEYS)}")  # fmt: skip
    missing = [k for k in CLUSTER_KEYS if k not in obj]
    if missing:
        raise WorkloadSpecError(f'cluster is missing "{missing[0]}"')
    if not isinstance(obj["subnet"], str):
        raise WorkloadSpecError(f"cluster.subnet must be a string, got {json_type(obj['subnet'])}")
    c = ClusterSpec(id=obj["id"], rank=obj["rank"], nodes=obj["nodes"],
                    gpus_per_node=obj["gpus_per_node"], master_port=obj["master_port"],
                    subnet=obj["subnet"])  # fmt: skip
    c.validate()
    return c


def contract_env(c: ClusterSpec) -> dict[str, str]:
    """The environment contract of node ``c.rank`` (every name of :data:`CONTRACT_ENV`)."""
    c.validate()
    ips: Sequence[str] = [c.node_address(r) for r in range(c.nodes)]
    return {"NODE_RANK": str(c.rank), "NUM_NODES": str(c.nodes), "NODE_ADDR": ips[c.rank],
            "NODE_IPS": "\n".join(ips), "MASTER_ADDR": ips[0],
            "MASTER_PORT": str(c.master_port), "GPUS_PER_NODE": str(c.gpus_per_node),
            "WORLD_SIZE": str(c.world_size), "NCCL_SOCKET_IFNAME": MESH_INTERFACE,
            "GLOO_SOCKET_IFNAME": MESH_INTERFACE}  # fmt: skip
