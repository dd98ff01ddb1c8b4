"""Everything a cluster's creation reads and sends, behind one small interface
(:class:`ClusterWorld`), and its real implementation (:class:`ChainClusterWorld`): the chain
through a :class:`~gpu_market.client.GpuMarketClient` and the user's wallet, and the providers'
worker APIs (signed by the wallet). Unit tests replace it with a fake world.

Failure contract: chain reads raise ``SdkError``; a refused transaction raises
``GpuMarketError``; the worker API raises ``WorkerApiError`` (workload) or
:class:`~gpu_market.cluster_mesh.MeshError` (mesh). :meth:`ChainClusterWorld.probe` never
raises: a worker that did not answer is offline with the reason. Every HTTP call has a total
deadline and a size cap.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import dataclass
from typing import Any, Protocol

from solders.keypair import Keypair
from solders.pubkey import Pubkey

__all__ = ["PROBE_TOTAL_S", "ChainClusterWorld", "ClusterWorld", "Probe", "probe_workers"]

PROBE_DEADLINE_S = 3.0
"""Total deadline of one worker's health probe."""
PROBE_TOTAL_S = 5.0
"""All the probes of one plan together."""
HEALTH_MAX_BYTES = 4096
MESH_DEADLINE_S = 10.0


@dataclass(frozen=True)
class Probe:
    """A worker's health as one probe saw it: ``online``, why not (``error``) and how many
    more cluster nodes it can serve (``cluster_plan.cluster_slots``; None: none at all, or
    offline)."""

    online: bool
    error: str = ""
    slots: int | None = None
    subnets_used: frozenset[int] = frozenset()
    """X of every mesh subnet 10.77.X.0/24 its cluster nodes use (its health's
    ``cluster.subnets_used``)."""


class ClusterWorld(Protocol):
    """The chain, the wallet and the workers, as a cluster's creation sees them."""

    url: str
    user: Pubkey
    market_key: Pubkey
    program_id: Pubkey

    def market(self) -> Any: ...
    def chain_time(self) -> int: ...
    def decimals(self, mint: Pubkey) -> int: ...
    def offers(self) -> list[Any]: ...
    def probe(self, offers: Sequence[Any], left: float) -> dict[Pubkey, Probe]: ...
    def provider(self, provider: Pubkey) -> Any: ...
    def balance(self) -> tuple[Pubkey, int]: ...
    def default_committee(self, exclude: Sequence[Pubkey]) -> list[Pubkey]: ...
    def job(self, job: Pubkey) -> Any: ...
    def create_job(self, job_id: int, provider: Pubkey, gpus: int, deposit: int,
                   committee: Sequence[Pubkey], quorum: int, max_price: int,
                   workload_hash: bytes) -> str: ...  # fmt: skip
    def cancel_job(self, job: Pubkey) -> str: ...
    def finish_job(self, job: Pubkey) -> str: ...
    def deliver(self, endpoint: str, job: Pubkey, spec: Any, timeout: float) -> dict[str, Any]: ...
    def workload_status(self, endpoint: str, job: Pubkey, workload_hash: bytes,
                        timeout: float) -> dict[str, Any]: ...  # fmt: skip
    def mesh_key(self, endpoint: str, job: Pubkey, workload_hash: bytes, worker_key: Pubkey,
                 timeout: float, who: str) -> Any: ...  # fmt: skip
    def post_peers(self, endpoint: str, job: Pubkey, workload_hash: bytes, peers: dict[str, Any],
                   timeout: float, who: str) -> dict[str, Any]: ...  # fmt: skip
    def mesh_handshakes(self, endpoint: str, job: Pubkey, workload_hash: bytes, timeout: float,
                        who: str) -> dict[int, int] | None | str: ...  # fmt: skip


def _probe_one(http: Any, offer: Any, deadline: float) -> Probe:
    from .cluster_plan import cluster_slots
    from .net import NetError
    from .offers import HEALTH_PATH
    from .workload_api import WorkerApiError, normalize_endpoint

    try:
        url = normalize_endpoint(offer.endpoint) + HEALTH_PATH
    except WorkerApiError as e:
        return Probe(False, str(e))
    try:
        r = http.get(url, deadline=deadline, max_bytes=HEALTH_MAX_BYTES)
    except NetError as e:
        return Probe(False, f"no answer from {url}: {e}")
    body = r.json_object()
    if r.status != 200 or body is None or body.get("ok") is not True:
        return Probe(False, f"{url} answered HTTP {r.status} without {{\"ok\": true}}")
    named = body.get("worker")
    if isinstance(named, str) and named != str(offer.worker_key):
        return Probe(False, f"{url} is the worker {named}, not the provider's current worker "
                            f"key {offer.worker_key}")  # fmt: skip
    return Probe(True, "", cluster_slots(body), subnets_used(body))


def subnets_used(health: dict[str, Any]) -> frozenset[int]:
    """``cluster.subnets_used`` of a health answer (only its entries 0..255)."""
    c = health.get("cluster")
    used = c.get("subnets_used") if isinstance(c, dict) else None
    return frozenset(x for x in used if isinstance(x, int) and not isinstance(x, bool)
                     and 0 <= x <= 255) if isinstance(used, list) else frozenset()  # fmt: skip


def probe_workers(offers: Sequence[Any], total: float, http: Any = None) -> dict[Pubkey, Probe]:
    """Every offer's worker health (``GET /v1/health``), in parallel, each within
    ``PROBE_DEADLINE_S`` and all within ``total`` seconds (one not done by then is offline)."""
    import time

    from .net import BoundedClient

    todo = [o for o in offers if o.endpoint]
    out = {o.provider: Probe(False, "publishes no worker endpoint") for o in offers if not o.endpoint}
    if not todo:
        return out
    start = time.monotonic()
    own = http is None
    client = BoundedClient(deadline=PROBE_DEADLINE_S, max_bytes=HEALTH_MAX_BYTES) if own else http
    pool = ThreadPoolExecutor(max_workers=min(16, len(todo)), thread_name_prefix="gpum-cluster")
    try:
        each = max(0.05, min(PROBE_DEADLINE_S, total))
        futures = {o.provider: pool.submit(_probe_one, client, o, each) for o in todo}
        wait_all(futures.values(), timeout=max(0.0, total - (time.monotonic() - start)))
        for provider, f in futures.items():
            if f.done() and f.exception() is None:
                out[provider] = f.result()
            else:
                out[provider] = Probe(False, f"no answer within {total:g} s")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        if own:
            client.close()
    return out


class ChainClusterWorld:
    """:class:`ClusterWorld` on a chain: ``client``, the user's ``keypair`` (signs every
    transaction and worker request) and ``market``."""

    def __init__(self, client: Any, keypair: Keypair, market: Pubkey, *, http: Any = None) -> None:
        from .net import BoundedClient

        self.client, self.keypair, self.market_key = client, keypair, market
        self.url: str = client.url
        self.user: Pubkey = keypair.pubkey()
        self.program_id: Pubkey = client.program_id
        self._own_http = http is None
        self.http = http or BoundedClient(deadline=MESH_DEADLINE_S, max_bytes=64 * 1024)

    def close(self) -> None:
        if self._own_http:
            self.http.close()

    def market(self) -> Any:
        from .errors import AccountNotFound

        m = self.client.fetch_market(self.market_key)
        if m is None:
            raise AccountNotFound(f"market {self.market_key} does not exist on {self.url}; check "
                                  "the market and the URL")  # fmt: skip
        return m

    def chain_time(self) -> int:
        return self.client.chain_time()

    def decimals(self, mint: Pubkey) -> int:
        return self.client.mint_decimals(mint)

    def offers(self) -> list[Any]:
        from .offers import list_offers

        return list_offers(self.client, self.market_key)

    def probe(self, offers: Sequence[Any], left: float) -> dict[Pubkey, Probe]:
        return probe_workers(offers, max(0.1, min(PROBE_TOTAL_S, left)))

    def provider(self, provider: Pubkey) -> Any:
        return self.client.fetch_provider(provider)

    def balance(self) -> tuple[Pubkey, int]:
        from .deployment import holding

        return holding(self.client, self.user, self.market().payment_mint)

    def default_committee(self, exclude: Sequence[Pubkey]) -> list[Pubkey]:
        return self.client.default_committee(self.market_key, size=3, exclude=list(exclude))

    def job(self, job: Pubkey) -> Any:
        return self.client.fetch_job(job)

    def create_job(self, job_id: int, provider: Pubkey, gpus: int, deposit: int,
                   committee: Sequence[Pubkey], quorum: int, max_price: int,
                   workload_hash: bytes) -> str:  # fmt: skip
        sig, _ = self.client.create_job(self.keypair, self.market_key, provider, job_id, gpus,
                                        deposit, committee=list(committee), quorum=quorum,
                                        max_price_per_gpu_second=max_price,
                                        workload_hash=workload_hash)  # fmt: skip
        return str(sig)

    def cancel_job(self, job: Pubkey) -> str:
        return str(self.client.cancel_job(self.keypair, job))

    def finish_job(self, job: Pubkey) -> str:
        return str(self.client.finish_job(self.keypair, job))

    def deliver(self, endpoint: str, job: Pubkey, spec: Any, timeout: float) -> dict[str, Any]:
        from .workload_api import deliver_workload

        return deliver_workload(endpoint, bytes(job), spec, bytes(self.keypair), timeout=timeout,
                                retries=0)  # fmt: skip

    def workload_status(self, endpoint: str, job: Pubkey, workload_hash: bytes,
                        timeout: float) -> dict[str, Any]:  # fmt: skip
        from .workload_api import workload_status

        return workload_status(endpoint, bytes(job), workload_hash, bytes(self.keypair),
                               timeout=timeout)  # fmt: skip

    def mesh_key(self, endpoint: str, job: Pubkey, workload_hash: bytes, worker_key: Pubkey,
                 timeout: float, who: str) -> Any:  # fmt: skip
        from .cluster_mesh import get_mesh_key

        return get_mesh_key(self.http, endpoint, job, workload_hash, self.keypair, worker_key,
                            deadline=timeout, who=who)  # fmt: skip

    def post_peers(self, endpoint: str, job: Pubkey, workload_hash: bytes, peers: dict[str, Any],
                   timeout: float, who: str) -> dict[str, Any]:  # fmt: skip
        from .cluster_mesh import post_peers

        return post_peers(self.http, endpoint, job, workload_hash, self.keypair, peers,
                          deadline=timeout, who=who)  # fmt: skip

    def mesh_handshakes(self, endpoint: str, job: Pubkey, workload_hash: bytes, timeout: float,
                        who: str) -> dict[int, int] | None | str:  # fmt: skip
        from .cluster_mesh import get_handshakes

        return get_handshakes(self.http, endpoint, job, workload_hash, self.keypair,
                              deadline=timeout, who=who)  # fmt: skip
