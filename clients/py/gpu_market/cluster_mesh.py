"""A cluster node's mesh key and peer list as the user's side handles them: the worker's
signed key (``GET /v1/jobs/<job>/mesh``), its verification, and the peer list posted to every
node (``POST /v1/jobs/<job>/mesh``). The bytes and the pure checks are
:mod:`gpu_market.mesh` (the worker uses the same); the format is docs/protocol.md,
"Workloads", "Clusters".

:func:`parse_mesh_key` accepts a worker's answer only when it names the job asked about, its
``worker_key`` is the provider's current worker key on chain, the signature over the mesh key
digest verifies, the key is 32 bytes of standard base64 and the endpoint is ``host:port`` that
someone can send to. Every failure is a :class:`MeshError` naming the node's worker and what
is wrong.

Both requests are signed by the job's user (:func:`gpu_market.workload.sign_request`, action
``"mesh"``): a GET over the job's workload hash, a POST over the sha256 of its exact body
(:func:`gpu_market.mesh.peers_digest`), so a signature authorizes exactly one peer list. They
go through a :class:`~gpu_market.net.BoundedClient` (total deadline, 64 KiB answer cap) and
raise nothing but :class:`MeshError`; its ``retry`` says whether asking again later may help
(no answer, 404, 503, or 409 ``spec_not_delivered`` while the worker has not seen the spec).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from solders.pubkey import Pubkey
from solders.signature import Signature

__all__ = ["NOT_REPORTED", "MeshError", "MeshKey", "check_udp_endpoint", "get_handshakes",
           "get_mesh_key", "parse_handshakes", "parse_mesh_key", "peer_list", "post_peers"]  # fmt: skip

NOT_REPORTED = "not reported"
""":func:`parse_handshakes` of a worker that does not report handshakes (it predates them)."""

MESH_MAX_BYTES = 64 * 1024
"""The largest answer of a mesh request read."""


class MeshError(Exception):
    """A mesh key or a peer list that cannot be used, or a mesh request that failed; the
    message names the node's worker and what went wrong. ``retry``: asking again later may
    help (the worker did not answer, or has not made the key yet)."""

    def __init__(self, message: str, *, retry: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.retry, self.status = retry, status


@dataclass(frozen=True)
class MeshKey:
    """A node's verified mesh key: the job, its WireGuard public key (base64), the UDP
    ``host:port`` its worker listens on, the worker key that signed it and the signature."""

    job: Pubkey
    public_key: str
    endpoint: str
    worker_key: Pubkey
    signature: str

    def peer(self, rank: int) -> dict[str, Any]:
        """This key as an entry of another node's peer list."""
        return {"rank": rank, "job": str(self.job), "public_key": self.public_key,
                "endpoint": self.endpoint, "worker_key": str(self.worker_key),
                "signature": self.signature}  # fmt: skip


def check_udp_endpoint(endpoint: object, who: str) -> str:
    """``endpoint`` if it is ``host:port`` (``[v6]:port`` for IPv6) a peer can send to
    (:func:`gpu_market.mesh.check_udp_endpoint`); MeshError naming ``who`` otherwise."""
    from .mesh import MeshKeyError
    from .mesh import check_udp_endpoint as check

    try:
        return check(endpoint, "the UDP endpoint")
    except MeshKeyError as e:
        raise MeshError(f"{who} published {e}") from None


def parse_mesh_key(body: object, job: Pubkey, worker_key: Pubkey, who: str) -> MeshKey:
    """The verified mesh key of ``job`` in the worker's answer ``body`` (a parsed JSON object);
    ``worker_key``: the provider's current worker key on chain; ``who`` names the node in
    errors. MeshError for anything but a key signed by that worker key for that job."""
    if not isinstance(body, dict):
        raise MeshError(f"{who} answered its mesh key with something else than a JSON object")
    if body.get("job") != str(job):
        raise MeshError(f"{who} answered the mesh key of job {body.get('job')!r}, not {job}")
    if body.get("worker_key") != str(worker_key):
        raise MeshError(f"{who} signed its mesh key with {body.get('worker_key')!r}, not the "
                        f"provider's current worker key {worker_key}")  # fmt: skip
    from .mesh import MeshKeyError, check_wg_key, verify_mesh_key

    text = body.get("public_key")
    try:
        key = check_wg_key(text, "the mesh public key")
    except MeshKeyError as e:
        raise MeshError(f"{who} published {e}") from None
    endpoint = check_udp_endpoint(body.get("endpoint"), who)
    try:
        sig = bytes(Signature.from_string(str(body.get("signature"))))
    except ValueError:
        raise MeshError(f"{who}'s mesh key signature is not a base58 ed25519 signature") from None
    if not verify_mesh_key(bytes(worker_key), sig, bytes(job), key, endpoint):
        raise MeshError(f"{who}'s mesh key signature does not verify with its worker key "
                        f"{worker_key}: the key is refused")  # fmt: skip
    return MeshKey(job, text, endpoint, worker_key, str(body["signature"]))


def peer_list(keys: Sequence[MeshKey], rank: int) -> dict[str, Any]:
    """The body posted to node ``rank``: every other node's key with its rank (``keys`` in
    rank order)."""
    return {"peers": [k.peer(r) for r, k in enumerate(keys) if r != rank]}


# ----------------------------------------------------------------------------- requests


def _request(http: Any, method: str, endpoint: str, job: Pubkey, workload_hash: bytes,
             keypair: Any, deadline: float, who: str, body: bytes | None = None) -> dict[str, Any]:  # fmt: skip
    from .net import NetError
    from .workload import sign_request
    from .workload_api import WorkerApiError, normalize_endpoint

    try:
        url = f"{normalize_endpoint(endpoint)}/v1/jobs/{job}/mesh"
    except WorkerApiError as e:
        raise MeshError(f"{who}: {e}") from None
    from .mesh import peers_digest

    signed = workload_hash if body is None else peers_digest(body)
    headers = sign_request(bytes(keypair), "mesh", bytes(job), signed, int(time.time()))
    if body is not None:
        headers["Content-Type"] = "application/json"
    try:
        r = http.request(method, url, content=body, headers=headers, deadline=deadline,
                         max_bytes=MESH_MAX_BYTES)  # fmt: skip
    except NetError as e:
        raise MeshError(f"{who} did not answer {method} {url}: {e}", retry=True) from None
    answer = r.json_object()
    if r.status == 200 and answer is not None:
        return answer
    error = (answer or {}).get("error") or r.body[:200].decode("utf-8", "replace").strip()
    message = (answer or {}).get("message")
    retry = r.status in (404, 503) or error == "spec_not_delivered"
    text = f"{who} answered {method} {url} with HTTP {r.status}: {error}"
    raise MeshError(text + (f" ({message})" if message else ""), retry=retry, status=r.status)


def get_mesh_key(http: Any, endpoint: str, job: Pubkey, workload_hash: bytes, keypair: Any,
                 worker_key: Pubkey, *, deadline: float, who: str) -> MeshKey:  # fmt: skip
    """Node ``job``'s verified mesh key from its worker at ``endpoint`` (one request within
    ``deadline`` seconds); MeshError otherwise."""
    body = _request(http, "GET", endpoint, job, workload_hash, keypair, deadline, who)
    return parse_mesh_key(body, job, worker_key, who)


def parse_handshakes(body: dict[str, Any], who: str) -> dict[int, int] | None | str:
    """The ``handshakes`` of a worker's ``GET .../mesh`` answer: each peer rank's latest
    WireGuard handshake (unix seconds, 0: none yet); None while the node's device is not up;
    :data:`NOT_REPORTED` when the answer has no such key. MeshError when it is malformed."""
    if "handshakes" not in body:
        return NOT_REPORTED
    items = body["handshakes"]
    if items is None:
        return None
    out: dict[int, int] = {}
    for item in items if isinstance(items, list) else [None]:
        rank = item.get("rank") if isinstance(item, dict) else None
        at = item.get("latest_handshake") if isinstance(item, dict) else None
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (rank, at)):
            raise MeshError(f"{who} answered malformed handshakes: {str(items)[:200]}")
        out[rank] = at  # type: ignore[index]
    return out


def get_handshakes(http: Any, endpoint: str, job: Pubkey, workload_hash: bytes, keypair: Any,
                   *, deadline: float, who: str) -> dict[int, int] | None | str:  # fmt: skip
    """Node ``job``'s latest WireGuard handshakes as its worker reports them
    (:func:`parse_handshakes`; one request within ``deadline`` seconds); MeshError otherwise."""
    body = _request(http, "GET", endpoint, job, workload_hash, keypair, deadline, who)
    return parse_handshakes(body, who)


def post_peers(http: Any, endpoint: str, job: Pubkey, workload_hash: bytes, keypair: Any,
               peers: dict[str, Any], *, deadline: float, who: str) -> dict[str, Any]:  # fmt: skip
    """Deliver node ``job``'s peer list (:func:`peer_list`) to its worker (one request within
    ``deadline`` seconds): the worker's answer; MeshError otherwise."""
    data = json.dumps(peers, sort_keys=True, separators=(",", ":")).encode()
    return _request(http, "POST", endpoint, job, workload_hash, keypair, deadline, who, data)
