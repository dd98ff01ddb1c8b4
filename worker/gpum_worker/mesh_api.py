"""``GET`` / ``POST /v1/jobs/<job>/mesh``: a cluster node's mesh key and its peer list.

The worker API (``api``) finds the job in the agent's latest poll and checks the request's
signature by the job's user (action "mesh" over :func:`signed_hash`: the job's workload hash
for a GET, the body's sha256 for a POST, so a signature authorizes exactly one peer list);
then :func:`serve` answers:

``GET``: the node's mesh key, signed by the worker key (``Mesh.publication``; the key pair
and the node's UDP port are made on first need), and ``handshakes``: each peer's latest
WireGuard handshake once the node's device is up (``Mesh.handshakes``; null before), which
the user's side waits for before it calls the cluster started. ``POST`` ``{"peers": [...]}``: the list is
parsed and its signatures checked (``gpu_market.mesh.parse_peer_list``), then the chain is
read (``PeerChain``): every peer job exists, is Open or Running, is the same user's job, and
its provider's current worker key signed its entry. The list is then kept durably
(``Mesh.accept``); the node's container starts with it (``workloads``: gpum0 comes up
between the container's init and its start). The same list again is 200 without a chain
read. Once a list is kept, another one is taken only as an **update** (a node of the cluster
was replaced): its ``version`` is higher than the kept one's (else 409 ``mesh_stale``: a
replayed old list never rolls the mesh back), it names this node's own entry exactly as this
worker publishes it (rank, job, key, endpoint, worker key; else 409 ``own_entry_changed``),
and only the other ranks' entries changed; those new entries pass the chain's checks, and
the device, when up, is changed in place (``Mesh.accept``): the container keeps running.

Answers are ``(status, JSON object)``; a refusal is ``{"error": "<code>", "message":
"<what to do>"}`` with the codes ``not_a_cluster_node``, ``spec_not_delivered``,
``bad_peer_list``, ``peer_refused``, ``mesh_configured``, ``mesh_stale``,
``own_entry_changed``, ``chain_unavailable``, ``cluster_disabled``.

The chain is read only for a POST signed by the job's user, through the worker's RPC client
(each call bounded in time and size, ``jobs.BoundedRpcSession``), at most
``CHAIN_DEADLINE_S`` for the whole list (no read starts after it): one
``getMultipleAccounts`` for the jobs and one read per distinct provider.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpu_market.mesh import MeshKeyError, parse_peer_doc, peers_digest
from gpu_market.spec_checks import WorkloadSpecError

from .jobs import AssignedJob
from .keys import b58encode
from .mesh import NO_MESH, MeshConflict, MeshError, MeshStale, cluster_of

__all__ = ["CHAIN_DEADLINE_S", "ChainPeers", "ChainUnavailable", "PeerChain", "PeerJob",
           "serve", "signed_hash"]

log = logging.getLogger("gpum_worker.mesh_api")

CHAIN_DEADLINE_S = 30.0
"""The chain reads of one peer list end by then (503 chain_unavailable otherwise)."""
PEER_STATUSES = ("open", "running")


class ChainUnavailable(Exception):
    """The chain could not be read (retry later)."""


@dataclass(frozen=True)
class PeerJob:
    """What the chain says about a peer job: its status (lower case), its user and its
    provider's current worker key."""

    status: str
    user: bytes
    worker_key: bytes | None


class PeerChain(Protocol):
    def peer_jobs(self, jobs: Sequence[bytes]) -> dict[bytes, PeerJob | None]:
        """Each job as the chain has it now (None: no such job); ChainUnavailable when the
        chain cannot be read."""
        ...


class ChainPeers:
    """``PeerChain`` over the SDK client (``fetch_jobs``, ``fetch_provider``) of the worker's
    job source, within ``deadline_s`` in all."""

    def __init__(self, client: Any, deadline_s: float = CHAIN_DEADLINE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self.deadline_s = deadline_s
        self._clock = clock

    def peer_jobs(self, jobs: Sequence[bytes]) -> dict[bytes, PeerJob | None]:
        from gpu_market.client import InvalidAccount
        from solders.pubkey import Pubkey

        end = self._clock() + self.deadline_s

        def in_time(what: str) -> None:
            if self._clock() > end:
                raise ChainUnavailable(f"reading {what} took over {self.deadline_s:g} s")

        try:
            keys_of = [Pubkey.from_bytes(k) for k in jobs]
            try:
                views = list(self._client.fetch_jobs(keys_of))
            except InvalidAccount:  # some address holds another account: one by one
                views = []
                for k in keys_of:
                    in_time("the peer jobs")
                    try:
                        views.append(self._client.fetch_job(k))
                    except InvalidAccount:
                        views.append(None)  # not a job: refused as "not on chain"
            keys: dict[bytes, bytes | None] = {}
            for v in views:
                if v is None or bytes(v.provider) in keys:
                    continue
                in_time("the peers' providers")
                p = self._client.fetch_provider(v.provider)
                keys[bytes(v.provider)] = None if p is None else bytes(p.worker_key)
        except ChainUnavailable:
            raise
        except Exception as e:  # noqa: BLE001 - RPC and decoding errors vary; one line
            raise ChainUnavailable(f"reading the peer jobs failed: {e}") from None
        out: dict[bytes, PeerJob | None] = {}
        for k, v in zip(jobs, views):
            out[k] = None if v is None else PeerJob(
                status=str(getattr(v.status, "name", v.status)).lower(), user=bytes(v.user),
                worker_key=keys.get(bytes(v.provider)))
        return out


def signed_hash(method: str, body: bytes, workload_hash: bytes) -> bytes:
    """What the user's "mesh" signature covers in place of the workload hash: the job's
    workload hash for a GET, the body's sha256 for a POST."""
    return workload_hash if method == "GET" else peers_digest(body)


def _refuse(status: int, code: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"error": code, "message": message}


def serve(method: str, j: AssignedJob, body: bytes, manager: Any,
          chain: PeerChain | None) -> tuple[int, dict[str, Any]]:
    """The answer to a mesh request of ``j``'s user (signature already checked)."""
    mesh = manager.mesh
    if mesh is None or mesh.health() is None:
        return _refuse(503, "cluster_disabled", NO_MESH)
    rec = manager.store.get(j.job)
    if rec is None or rec.workload_hash != j.workload_hash:
        return _refuse(409, "spec_not_delivered", "deliver this node's workload spec first "
                       "(POST /v1/jobs/<job>/workload), then ask again")
    try:
        cluster = cluster_of(rec.spec)
    except WorkloadSpecError as e:
        return _refuse(409, "not_a_cluster_node", f"this job's cluster section is unusable: {e}")
    if cluster is None:
        return _refuse(409, "not_a_cluster_node", "this job's spec has no cluster section, so "
                       "it has no mesh")
    if j.status not in PEER_STATUSES:
        return _refuse(409, "not_a_cluster_node", f"this job is {j.status}: its mesh is gone")
    if method == "GET":
        try:
            answer: dict[str, Any] = dict(mesh.publication(j.job))
        except MeshError as e:
            return _refuse(503, "cluster_disabled", str(e))
        answer["handshakes"] = mesh.handshakes(j.job)
        return 200, answer
    try:
        plist = parse_peer_doc(body, job=j.job, rank=cluster.rank, nodes=cluster.nodes)
    except MeshKeyError as e:
        return _refuse(400, "bad_peer_list", str(e))
    if plist.own is not None:
        refusal = _check_own(j, mesh, plist.own)
        if refusal is not None:
            return refusal
    try:
        kept = mesh.accepted(j.job)
        if kept is None:
            fresh = list(plist.peers)
        else:
            before = {int(p["rank"]): p for p in kept.get("peers", [])}
            fresh = [p for p in plist.peers if before.get(p.rank) != p.to_json()]
            if fresh and plist.version <= int(kept.get("version", 0)):
                fresh = []  # refused by accept() as stale: no chain read for it
        if fresh:
            refusal = _check_chain(j, fresh, chain)
            if refusal is not None:
                return refusal
        changed = mesh.accept(j.job, cluster, plist.peers, plist.version)
        if changed is not None and kept is None:
            manager.on_delivered()  # the agent polls early, and the container starts
    except MeshStale as e:
        return _refuse(409, "mesh_stale", str(e))
    except MeshConflict as e:
        return _refuse(409, "mesh_configured", str(e))
    except (MeshError, OSError) as e:
        log.error("job %s: keeping its peer list failed: %s", j.job_b58, e)
        return _refuse(503, "cluster_disabled", f"this worker cannot keep the peer list now "
                       f"({e}); retry later")
    if kept is None or changed is None:
        return 200, {"status": "configured", "version": plist.version}
    return 200, {"status": "updated", "version": plist.version, "ranks": changed}


def _check_own(j: AssignedJob, mesh: Any, own: Any) -> tuple[int, dict[str, Any]] | None:
    """None when the list's entry of this node is what this worker publishes for it."""
    try:
        pub = mesh.publication(j.job)
    except MeshError as e:
        return _refuse(503, "cluster_disabled", str(e))
    mine = own.to_json()
    diff = [k for k in ("public_key", "endpoint", "worker_key") if mine[k] != pub[k]]
    if not diff:
        return None
    return _refuse(409, "own_entry_changed", (
        f"the list's entry of rank {own.rank} is this node, but its {', '.join(diff)} "
        f"({', '.join(str(mine[k]) for k in diff)}) differ from what this node's worker "
        f"publishes ({', '.join(str(pub[k]) for k in diff)}): a node's own entry never changes "
        "while its job runs; ask its worker for its mesh key (GET .../mesh) again"))


def _check_chain(j: AssignedJob, peers: Sequence[Any], chain: PeerChain | None
                 ) -> tuple[int, dict[str, Any]] | None:
    """None when every peer passes the chain's checks, else the refusal."""
    if chain is None:
        return _refuse(503, "chain_unavailable", "this worker reads no chain, so it cannot "
                       "check the peers")
    try:
        found = chain.peer_jobs([p.job for p in peers])
    except ChainUnavailable as e:
        return _refuse(503, "chain_unavailable", f"{e}; retry later")
    for p in peers:
        who = f"the peer of rank {p.rank} (job {b58encode(p.job)})"
        v = found.get(p.job)
        if v is None:
            why = "is not on chain (closed, or never created)"
        elif v.status not in PEER_STATUSES:
            why = f"is {v.status}, not open or running"
        elif v.user != j.user:
            why = "is another user's job; a cluster's nodes are one user's jobs"
        elif v.worker_key != p.worker_key:
            why = (f"was signed by worker key {b58encode(p.worker_key)}, which is not its "
                   f"provider's current worker key "
                   f"({b58encode(v.worker_key) if v.worker_key else 'none'}); ask that node's "
                   "worker for its mesh key again")
        else:
            continue
        return _refuse(403, "peer_refused", f"{who} {why}")
    return None
