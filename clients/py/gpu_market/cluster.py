"""Clusters: K nodes of N GPUs each, across providers, on one private network, in one call;
the flow of ``gpum cluster create|status|logs|down`` (:mod:`gpu_market.cli.cluster`)::

    import gpu_market
    cluster = gpu_market.create_cluster(gpu_type="A100", gpu_count=4, nodes=2, image="...",
                                        region="us-west")
    print(cluster.endpoint)   # "host:port" of node 0's first published port
    cluster.down()            # every node stopped and closed: its receipts by rank

Each node is one job, paid as any job (its own deposit, proofs and committee). Guarantees:

* **Nothing moves before every check passed**: the offers (:mod:`gpu_market.cluster_plan`:
  online, serving cluster nodes, price, region, room for every node), the committee, every
  node's workload, and a wallet that pays every node's deposit. ``dry_run`` stops there.
* **Gang start** (:mod:`gpu_market.cluster_gang`): the cluster runs only once every node's
  container runs; no container starts before every node's mesh key is known; when a node
  fails, or ``timeout`` passes first, every job is released (Open ones cancelled with a full
  refund, Running ones finished before any window billed) and the :class:`ClusterError`
  names the node and why.
* **One job per rank**: node R's job id is derived from the cluster id and R
  (:func:`gpu_market.cluster_spec.node_job_id`), and the cluster is recorded locally
  (:mod:`gpu_market.cluster_store`) with every rank's job address before the first create,
  so a retried create never makes a second job, and an interrupted cluster can be found and
  taken down (``gpum cluster down NAME``).
* A node that fails once the cluster ran is replaced only for a managed cluster
  (``managed=True``, :mod:`gpu_market.cluster_managed`: same rank, same mesh address, on
  another provider, the mesh updated on every node); otherwise :meth:`Cluster.status` says
  which node is not running and why, and :meth:`Cluster.down` stops and closes every node.
"""

from __future__ import annotations

import os
import secrets as _secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from .errors import SdkError
from .units import format_ui_amount

__all__ = ["DEFAULT_TIMEOUT_S", "Cluster", "ClusterError", "ClusterNode", "ClusterRequest",
           "Prepared", "create_cluster", "launch", "open_cluster", "prepare"]  # fmt: skip

SECONDS_PER_HOUR = 3600
DEFAULT_TIMEOUT_S = 600
"""The gang limit: how long every node has to be created, joined and running."""
LOGS_MAX_BYTES = 4 * 1024 * 1024


class ClusterError(SdkError):
    """A cluster that cannot be created, started or acted on; one line saying why and what to
    do. No money moved unless the message says what became of each job."""


@dataclass
class ClusterRequest:
    """What the user asked for (``seconds``: the hours prepaid per node)."""

    model: str
    gpus: int
    nodes: int
    seconds: Fraction
    image: str | None = None
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict)
    ports: tuple[str, ...] = ()
    template: Any = None
    """A :class:`~gpu_market.cluster_templates.ClusterTemplate`, or None."""
    region: str | None = None
    max_price: str | None = None
    """The highest price per GPU-hour accepted, in tokens."""
    shm_size_mib: int | None = None
    scratch_mib: int | None = None
    finish_on_exit: bool | None = None
    name: str | None = None
    committee: Sequence[Pubkey] | None = None
    quorum: int | None = None
    master_port: int = 29500


@dataclass
class Prepared:
    """A cluster checked and priced, nothing sent yet: its id and name, the plan, every node's
    job and spec (:class:`~gpu_market.cluster_gang.GangNode`), the committee, the wallet."""

    cluster_id: str
    name: str
    request: ClusterRequest
    plan: Any
    nodes: list[Any]
    committee: list[Pubkey]
    quorum: int
    decimals: int
    account: Pubkey
    balance: int
    image: str
    shared: dict[str, str] = field(default_factory=dict)
    """The template's per-cluster secret (plaintext, memory only: a managed cluster's
    controller seals it to a successor's worker)."""

    def summary(self) -> dict[str, Any]:
        """What the cluster will rent, in tokens and GPU-hours (``gpum cluster create``'s
        output, and its ``--dry-run``)."""
        t = lambda v: format_ui_amount(v, self.decimals)
        return {
            "cluster": self.cluster_id, "name": self.name, "image": self.image,
            "template": None if self.request.template is None else self.request.template.name,
            "nodes": [{"rank": n.rank, "provider": str(n.offer.provider),
                       "region": n.offer.region, "gpu_model": n.offer.gpu_model,
                       "gpus": n.gpus, "price_per_gpu_hour": t(n.price * SECONDS_PER_HOUR),
                       "deposit": t(n.deposit)} for n in self.plan.nodes],
            "providers": len(self.plan.providers),
            "gpus_per_node": self.plan.gpus_per_node,
            "hours": format(float(self.plan.seconds / SECONDS_PER_HOUR), "g"),
            "cost_per_hour": t(self.plan.rate * SECONDS_PER_HOUR),
            "deposit": t(self.plan.total_deposit),
            "committee": [str(k) for k in self.committee], "quorum": self.quorum,
        }  # fmt: skip


# ----------------------------------------------------------------------------- checks and plan


def _check_request(req: ClusterRequest, flag: Any) -> None:
    from .cluster_spec import MAX_NODES, MIN_NODES

    if isinstance(req.nodes, bool) or not isinstance(req.nodes, int) or not (
            MIN_NODES <= req.nodes <= MAX_NODES):
        raise ClusterError(f"{flag('nodes')} {req.nodes!r}: a cluster has {MIN_NODES}..{MAX_NODES} "
                           "nodes (for one node, use `gpum run` or gpu_market.deploy)")  # fmt: skip
    if req.image is None and (req.template is None or req.template.image is None):
        raise ClusterError(f"no image: pass {flag('image')} IMAGE")


def _limit(req: ClusterRequest, decimals: int, flag: Any) -> int | None:
    from .units import AmountError, parse_ui_amount

    if req.max_price is None:
        return None
    try:
        per_hour = parse_ui_amount(str(req.max_price), decimals, allow_zero=True)
    except AmountError as e:
        raise ClusterError(f"{flag('max_price')} {req.max_price!r}: {e}") from None
    return per_hour // SECONDS_PER_HOUR


def _node_spec(req: ClusterRequest, provider: Any, rank: int, cluster_id: str, image: str,
               shared: Mapping[str, str]) -> Any:  # fmt: skip
    """Node ``rank``'s spec: the user's workload (the template's line for this rank), its
    secrets (``shared``: the template's per-cluster secret, under the user's own) sealed to
    ``provider``'s worker key, and the cluster section."""
    from .cluster_spec import ClusterSpec
    from .cluster_templates import TemplateError, node_command
    from .deployment import DeployError, build_spec
    from .workload import WorkloadSpecError, spec_hash

    t = req.template
    try:
        command = node_command(t, rank, req.command)
    except TemplateError as e:
        raise ClusterError(str(e)) from None
    ports = list(req.ports) + (list(t.ports) if t is not None and rank == 0 else [])
    finish = req.finish_on_exit if req.finish_on_exit is not None else bool(
        t is not None and t.finish_on_exit)
    shm = req.shm_size_mib if req.shm_size_mib is not None else (t.shm_size if t else None)
    try:
        spec = build_spec(provider, image, ports=dict.fromkeys(ports), cmd=command,
                          env=req.env, secrets={**shared, **req.secrets}, shm_size_mib=shm,
                          scratch_mib=req.scratch_mib, finish_on_exit=finish)  # fmt: skip
        spec = replace(spec, cluster=ClusterSpec(cluster_id, rank, req.nodes, req.gpus,
                                                 req.master_port))  # fmt: skip
        spec_hash(spec)
    except DeployError as e:
        raise ClusterError(str(e)) from None
    except WorkloadSpecError as e:
        raise ClusterError(f"bad workload: {e}; nothing was sent") from None
    return spec


def prepare(world: Any, req: ClusterRequest, *, hooks: Any, deadline: float,
            cluster_id: str | None = None, store: Any = None) -> Prepared:  # fmt: skip
    """Every check that needs no signature, and the plan: :class:`Prepared`; ClusterError
    (nothing sent, no money moved) when the cluster cannot be had as asked. ``store``: the
    local record (a :class:`~gpu_market.cluster_store.ClusterStore`) where the name must be
    free."""
    from .accounts import effective_params, min_deposit
    from .cluster_gang import GangNode
    from .cluster_plan import PlanError, check_funds, plan_cluster
    from .cluster_spec import new_cluster_id, node_job_id
    from .cluster_store import ClusterStore, StoreError
    from .committee import default_quorum
    from .offers import best_offer, with_liveness
    from .pda import job_pda
    from .workload import spec_hash

    flag = hooks.flag
    _check_request(req, flag)
    if req.name is not None:
        try:
            (store or ClusterStore()).check_name_free(req.name, world.url)
        except StoreError as e:
            raise ClusterError(str(e)) from None
    m = world.market()
    decimals = world.decimals(m.payment_mint)
    params = effective_params(m, world.chain_time())
    limit = _limit(req, decimals, flag)
    offers = world.offers()
    fits = [o for o in offers if best_offer([o], gpus=req.gpus, gpu_model=req.model,
                                            needs_workloads=True) is not None]  # fmt: skip
    probes = world.probe(fits, max(0.1, deadline - hooks.monotonic())) if fits else {}
    from .offers import Liveness

    now = int(time.time())
    offers = with_liveness(offers, {p: Liveness(r.online, now, r.error) for p, r in probes.items()})
    capable = {p: r.slots for p, r in probes.items() if r.online}
    try:
        plan = plan_cluster(offers, nodes=req.nodes, gpus=req.gpus, model=req.model,
                            seconds=req.seconds, limit=limit, region=req.region, capable=capable,
                            min_deposit=lambda price, gpus: min_deposit(params, price, gpus),
                            decimals=decimals, flag=flag)  # fmt: skip
    except PlanError as e:
        raise ClusterError(f"{e}; nothing was sent") from None
    used = [probes[p].subnets_used for p in plan.providers if p in probes]
    cid = cluster_id or new_cluster_id(avoid=frozenset().union(*used))
    name = req.name or f"cluster-{cid[:8]}"
    image = req.image or req.template.image
    t = req.template
    shared = {t.shared_secret: _secrets.token_hex(32)} if t is not None and t.shared_secret else {}
    nodes = []
    owners: list[Pubkey] = []
    for n in plan.nodes:
        p = world.provider(n.offer.provider)
        if p is None or p.status != "active" or p.worker_key != n.offer.worker_key:
            raise ClusterError(f"provider {n.offer.provider} changed while planning (gone, "
                               "paused or a new worker key); nothing was sent: run again")  # fmt: skip
        spec = _node_spec(req, p, n.rank, cid, image, shared)
        job_id = node_job_id(cid, n.rank)
        owners += [n.offer.owner, p.worker_key]
        nodes.append(GangNode(
            rank=n.rank, job=job_pda(world.market_key, world.user, job_id, world.program_id),
            job_id=job_id, provider=n.offer.provider, worker_key=p.worker_key,
            endpoint=p.endpoint, spec=spec, workload_hash=spec_hash(spec), gpus=req.gpus,
            deposit=n.deposit, max_price=n.price if limit is None else limit))  # fmt: skip
    committee = list(req.committee) if req.committee is not None else world.default_committee(owners)
    try:
        quorum = default_quorum(len(committee), params.min_quorum) if req.quorum is None else req.quorum
    except ValueError as e:
        raise ClusterError(f"no committee possible ({e}): pass a committee of healthy "
                           "validators (see `gpum validator status`); nothing was sent") from None  # fmt: skip
    account, balance = world.balance()
    try:
        check_funds(plan, balance, account, decimals, flag)
    except PlanError as e:
        raise ClusterError(str(e)) from None
    return Prepared(cid, name, req, plan, nodes, committee, quorum, decimals, account, balance,
                    image, shared)  # fmt: skip


def launch(world: Any, prepared: Prepared, *, hooks: Any, deadline: float,
           store: Any = None, history: Any = None,
           managed: dict[str, Any] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Record the cluster (``store``: a :class:`~gpu_market.cluster_store.ClusterStore`;
    ``managed``: its controller's policy, :func:`gpu_market.cluster_managed.managed_policy`)
    and start it as a gang: every node's workload status. ClusterError (every job released,
    the record marked failed) when it did not start by ``deadline`` (monotonic)."""
    from .cluster_gang import GangError, start_gang
    from .cluster_store import ClusterRecord, ClusterStore, NodeRecord, StoreError

    store = store or ClusterStore()
    req = prepared.request
    record = ClusterRecord(
        id=prepared.cluster_id, name=prepared.name, url=world.url, market=str(world.market_key),
        user=str(world.user), created_at=int(time.time()), gpu_model=req.model,
        gpus_per_node=req.gpus, seconds=int(req.seconds),
        template=None if req.template is None else req.template.name,
        nodes=tuple(NodeRecord(n.rank, str(n.job), n.job_id, str(n.provider), n.endpoint,
                               n.workload_hash.hex(), n.deposit) for n in prepared.nodes),
        managed=managed)  # fmt: skip
    try:
        store.check_name_free(prepared.name, world.url)
        store.save(record)
    except StoreError as e:
        raise ClusterError(f"{e}; nothing was sent") from None
    amount = lambda v: format_ui_amount(v, prepared.decimals)
    try:
        statuses = start_gang(world, prepared.nodes, committee=prepared.committee,
                              quorum=prepared.quorum, deadline=deadline, hooks=hooks,
                              cluster=prepared.name, amount=amount)  # fmt: skip
    except GangError as e:
        _mark(store, record.id, state="failed", error=str(e))
        raise ClusterError(str(e)) from None
    except BaseException as e:
        _mark(store, record.id, state="failed", error=f"{type(e).__name__}: {e}")
        raise
    finally:
        _remember(world, prepared, history)
    _mark(store, record.id, state="running")
    return statuses


def _mark(store: Any, cluster_id: str, **fields: Any) -> None:
    from .cluster_store import StoreError

    try:
        store.update(cluster_id, **fields)
    except StoreError:
        pass  # the jobs are on chain; only the record's state is stale


def _remember(world: Any, prepared: Prepared, history: Any) -> None:
    """Every node's job that was created in the local job history (``gpum job list``,
    receipts)."""
    from .job_history import HistoryError, JobHistory

    try:
        h = history or JobHistory()
        for n in (n for n in prepared.nodes if n.created):
            h.record_created(n.job, url=world.url, market=world.market_key, user=world.user,
                             job_id=n.job_id, created_at=int(time.time()))  # fmt: skip
    except HistoryError:
        pass  # the cluster record keeps every job


# ----------------------------------------------------------------------------- a running cluster


@dataclass(frozen=True)
class ClusterNode:
    """One node: its rank, job, provider, worker endpoint and published ``host:port``s (as
    last seen)."""

    rank: int
    job: Pubkey | None
    """None while a managed cluster's successor of a failed node is not planned yet."""
    provider: Pubkey | None
    worker_endpoint: str
    workload_hash: bytes
    endpoints: tuple[str, ...] = ()


_WHY = {
    "failed": ": its provider stopped proving it (its worker or machine went away, and its "
              "committee reported the downtime or the job expired); what it did not earn "
              "comes back at `gpum cluster down`",
    "finishing": ": it was stopped (its container exited, or someone finished it)",
}
"""Why a node's job left Running, as far as its status on chain says."""


class Cluster:
    """A cluster of the local record: ``name``, ``id``, ``nodes`` (rank order), ``endpoint``
    (node 0's first published ``host:port``); :meth:`status`, :meth:`logs`, :meth:`down`."""

    def __init__(self, record: Any, client: Any, keypair: Keypair,
                 statuses: Sequence[Mapping[str, Any]] | None = None, store: Any = None) -> None:  # fmt: skip
        from .deployment import ports

        self.record, self.client, self.keypair, self._store = record, client, keypair, store
        self.name: str = record.name
        self.id: str = record.id
        found = [ports(dict(s))[0] for s in statuses] if statuses else [[] for _ in record.nodes]
        self.nodes = [ClusterNode(n.rank, Pubkey.from_string(n.job) if n.job else None,
                                  Pubkey.from_string(n.provider) if n.provider else None,
                                  n.worker_endpoint, bytes.fromhex(n.workload_hash), tuple(e))
                      for n, e in zip(record.nodes, found)]  # fmt: skip
        self.controller: Any = None
        """The thread running a managed cluster's controller in this process (or None)."""
        self.retired_receipts: dict[str, Any] = {}
        """Receipts of the replaced nodes' jobs closed by :meth:`down`, by job address."""

    def __repr__(self) -> str:
        return f"Cluster(name={self.name!r}, nodes={len(self.nodes)}, endpoint={self.endpoint!r})"

    def close(self) -> None:
        """Close the RPC connection (the cluster runs on; :meth:`down` ends it)."""
        self.client.close()

    @property
    def endpoints(self) -> list[str]:
        """Node 0's published ``host:port``s."""
        return list(self.nodes[0].endpoints)

    @property
    def endpoint(self) -> str | None:
        """Node 0's first published ``host:port`` (None when it publishes none)."""
        return self.endpoints[0] if self.endpoints else None

    def status(self) -> dict[str, Any]:
        """``{"cluster", "name", "state"`` (running: every node's job Running and its container
        running; degraded: some not, see its ``problem``; ended: no job Running any more; down;
        failed; starting),
        ``"endpoint", "nodes": [{"rank", "job", "provider", "status"`` (on chain), ``"state"``
        (the container's), ``"endpoints", "problem"}]}``."""
        from .cluster_store import ClusterStore
        from .workload_api import WorkerApiError, workload_status

        record = (self._store or ClusterStore()).get(self.id) if self.record.managed else self.record
        if record is not self.record:
            self._reload(record)
        rows = []
        built = [n for n in self.nodes if n.job is not None]
        found = dict(zip([n.rank for n in built], self.client.fetch_jobs([n.job for n in built])))
        states = {n.rank: n.state for n in record.nodes}
        for n in self.nodes:
            j = found.get(n.rank)
            row: dict[str, Any] = {"rank": n.rank, "job": None if n.job is None else str(n.job),
                                   "provider": None if n.job is None else str(n.provider),
                                   "status": "closed" if j is None else j.status, "state": None,
                                   "endpoints": [], "problem": None}  # fmt: skip
            if states.get(n.rank, "running") != "running":
                row["status"] = "none" if j is None else j.status
                row["problem"] = f"being replaced ({states[n.rank]})"
            elif j is not None and j.status == "running":
                try:
                    s = workload_status(n.worker_endpoint, bytes(n.job), n.workload_hash,
                                        bytes(self.keypair), timeout=10.0)  # fmt: skip
                    from .deployment import ports

                    row.update(state=s.get("state"), endpoints=ports(s)[0])
                    if s.get("state") != "running":
                        why = s.get("reason") or s.get("error") or ""
                        row["problem"] = f"its container is {s.get('state')}" + (f": {why}" if why else "")
                except WorkerApiError as e:
                    row["problem"] = f"its worker does not answer: {e}"
            elif self.record.state == "running":
                row["problem"] = f"its job is {row['status']}" + _WHY.get(row["status"], "")
            rows.append(row)
        state = self.record.state
        if state == "running" and all(r["status"] != "running" for r in rows):
            state = "ended"  # every job left Running: finished (e.g. on exit), or ended
        elif state == "running" and any(r["problem"] for r in rows):
            state = "degraded"
        if rows and rows[0]["endpoints"]:
            self.nodes[0] = replace(self.nodes[0], endpoints=tuple(rows[0]["endpoints"]))
        out = {"cluster": self.id, "name": self.name, "state": state, "endpoint": self.endpoint,
               "nodes": rows}  # fmt: skip
        if record.managed:
            out["managed"] = {"gave_up": record.managed.get("gave_up"),
                              "mesh_version": record.mesh_version,
                              "replaced": [{"rank": n.rank, "job": n.job, "provider": n.provider,
                                            "state": n.state, "why": n.end_reason}
                                           for n in record.retired],
                              "events": [{"at": at, "level": lv, "text": tx}
                                         for at, lv, tx in record.events[-10:]]}  # fmt: skip
        return out

    def start_controller(self, secrets: Mapping[str, str], *, url: str, program_id: Any) -> None:
        """Run this managed cluster's controller in a background thread (its own RPC client)
        until :meth:`down`; its events go to the record (``status()["managed"]["events"]``)."""
        import threading

        from .cluster_managed import watch
        from .cluster_store import ClusterStore

        store = self._store or ClusterStore()
        client = _client(url, program_id)

        def run() -> None:
            try:
                watch(store, self.record, client, self.keypair, secrets=secrets)
            finally:
                client.close()

        self.controller = threading.Thread(target=run, name=f"gpum-cluster-{self.id}", daemon=True)
        self.controller.start()

    def _reload(self, record: Any) -> None:
        """Take a newer record (a managed cluster's controller replaced nodes)."""
        old = {n.rank: n for n in self.nodes}
        self.record = record
        self.nodes = [ClusterNode(n.rank, Pubkey.from_string(n.job) if n.job else None,
                                  Pubkey.from_string(n.provider) if n.provider else None,
                                  n.worker_endpoint, bytes.fromhex(n.workload_hash),
                                  old[n.rank].endpoints if old.get(n.rank) and
                                  str(old[n.rank].job) == n.job else ())
                      for n in record.nodes]  # fmt: skip

    def logs(self, rank: int | None = None, tail: int | None = None) -> Any:
        """Node ``rank``'s container output (its last ``tail`` lines; at most the last 4 MiB),
        or, without ``rank``, every node's by rank (a node whose worker does not answer maps to
        the error)."""
        from .workload_api import WorkerApiError, stream_logs

        def one(n: ClusterNode) -> str:
            buf = bytearray()
            for chunk in stream_logs(n.worker_endpoint, bytes(n.job), n.workload_hash,
                                     bytes(self.keypair), tail=tail, timeout=10.0):  # fmt: skip
                buf += chunk
                del buf[:-LOGS_MAX_BYTES]
            return buf.decode("utf-8", "replace")

        if rank is not None:
            if not 0 <= rank < len(self.nodes):
                raise ClusterError(f"cluster {self.name} has nodes 0..{len(self.nodes) - 1}")
            try:
                return one(self.nodes[rank])
            except WorkerApiError as e:
                raise ClusterError(f"cannot read node {rank}'s logs: {e}") from None
        out: dict[int, str] = {}
        for n in self.nodes:
            try:
                out[n.rank] = one(n)
            except WorkerApiError as e:
                out[n.rank] = f"(cannot read the logs: {e})"
        return out

    def down(self, timeout: float | None = None, *, hooks: Any = None,
             say: Any = lambda text: None) -> dict[int, Any]:  # fmt: skip
        """Stop every node (Open: cancelled, full refund; Running: finished, billing stops),
        wait out their settlement graces, close them: the receipts by rank (a node whose job
        was never created or is already closed has none). ``timeout``: seconds to wait for each
        grace (default: the grace plus 2 minutes)."""
        from .cluster_store import ClusterStore
        from .deployment import DeployError, close_with_receipt, stop_job

        store = self._store or ClusterStore()
        if self.record.managed:  # its controller stops first: nothing is replaced meanwhile
            from .cluster_managed import stop_controller

            stop_controller(store, self.record)
            if self.controller is not None:
                self.controller.join(60)
            self._reload(store.get(self.id))
        say_ = say
        retired = [(f"{n.rank} (replaced, job {n.job})", Pubkey.from_string(n.job))
                   for n in self.record.retired if n.job]  # fmt: skip
        current = [(str(n.rank), n.job) for n in self.nodes if n.job is not None]
        for what, job in current + retired:  # every job stops billing first; graces overlap
            j = self.client.fetch_job(job)
            if j is not None and j.status == "open":
                self.client.cancel_job(self.keypair, job)
                say_(f"node {what}: job {job} cancelled (full refund)")
            elif j is not None and j.status == "running":
                self.client.finish_job(self.keypair, job)
                say_(f"node {what}: job {job} finished: billing stopped")
        receipts: dict[int, Any] = {}
        for what, job in current + retired:
            if self.client.fetch_job(job) is None:
                continue
            try:
                j = stop_job(self.client, self.keypair, job, limit=timeout, hooks=hooks)
            except DeployError as e:
                raise ClusterError(f"node {what}: {e}; `gpum cluster down {self.name}` again "
                                   "closes the rest") from None  # fmt: skip
            receipt = close_with_receipt(self.client, self.keypair, job, j).receipt
            if what.isdigit():
                receipts[int(what)] = receipt
            else:
                self.retired_receipts[str(job)] = receipt
            say_(f"node {what}: job {job} closed")
        _mark(store, self.id, state="down",
              receipts={**self.record.receipts,
                        **{str(r): rc.as_dict() for r, rc in receipts.items()},
                        **{k: rc.as_dict() for k, rc in self.retired_receipts.items()}})  # fmt: skip
        return receipts


# ----------------------------------------------------------------------------- the SDK's calls


def _client(url: str | None, program_id: Any) -> Any:
    from .client import GpuMarketClient
    from .constants import PROGRAM_ID
    from .deployment import DeployError, _pubkey, _url

    try:
        return GpuMarketClient(_url(url), payer=None,
                               program_id=_pubkey(program_id, "program_id") or PROGRAM_ID)  # fmt: skip
    except DeployError as e:
        raise ClusterError(str(e)) from None


def _wallet(keypair: Any) -> Keypair:
    from .deployment import DeployError, _keypair

    try:
        return _keypair(keypair)
    except DeployError as e:
        raise ClusterError(str(e)) from None


def create_cluster(gpu_type: str, gpu_count: int = 1, nodes: int = 2, image: str | None = None,
                   hours: float | str = 1, *, region: str | None = None,
                   ports: Sequence[int | str] = (), command: Sequence[str] = (),
                   env: Mapping[str, str] | None = None, secrets: Mapping[str, str] | None = None,
                   template: str | None = None, max_price: str | float | None = None,
                   shm_size_mib: int | None = None, finish_on_exit: bool | None = None,
                   name: str | None = None, url: str | None = None,
                   keypair: Keypair | str | os.PathLike | None = None,
                   market: Pubkey | str | None = None, committee: Sequence[Pubkey | str] | None = None,
                   quorum: int | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                   program_id: Pubkey | str | None = None, hooks: Any = None,
                   managed: bool = False, max_replacements: int = 3) -> Cluster:  # fmt: skip
    """Rent ``nodes`` nodes of ``gpu_count`` GPUs of model ``gpu_type`` (a substring of the
    provider's model) for ``hours`` each, run ``image`` on every node (``command``: its
    command; with ``template`` "ray" or "torchrun", the words the template runs), join them in
    one private network and return once every node's container runs.

    ``ports``: published on every node (node 0's are the cluster's ``endpoint``); ``region``:
    only providers of that region; ``max_price``: the highest price per GPU-hour, in tokens;
    ``url``, ``keypair``, ``market``, ``committee``, ``quorum`` as for
    :func:`gpu_market.deploy`; ``timeout``: seconds every node has to run (the gang limit).
    ``managed``: a node that fails is replaced (up to ``max_replacements`` times) by a
    controller in a background thread of this process while the cluster is open
    (:mod:`gpu_market.cluster_managed`; ``gpum cluster watch NAME`` runs it elsewhere).
    Raises ClusterError: before anything is sent, or with every job released."""
    from .cluster_templates import TemplateError, load_cluster_template
    from .cluster_world import ChainClusterWorld
    from .deployment import DeployError, Hooks, _pubkey, parse_gpu, parse_hours

    hooks = hooks or Hooks()
    try:
        model, _ = parse_gpu(f"{gpu_type}:1")
        seconds = parse_hours(str(hours))
        tmpl = None if template is None else load_cluster_template(template)
        market_key = _pubkey(market or os.environ.get("GPUM_MARKET"), "market")
        members = None if committee is None else [_pubkey(k, "committee") for k in committee]
    except (ValueError, TemplateError, DeployError) as e:
        raise ClusterError(str(e)) from None
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or not 1 <= gpu_count <= 256:
        raise ClusterError(f"gpu_count={gpu_count!r}: give 1..256 GPUs per node")
    if market_key is None:
        raise ClusterError("no market: pass market=ADDRESS or set GPUM_MARKET")
    req = ClusterRequest(model=model, gpus=gpu_count, nodes=nodes, seconds=seconds, image=image,
                         command=tuple(command), env=dict(env or {}), secrets=dict(secrets or {}),
                         ports=tuple(str(p) for p in ports), template=tmpl, region=region,
                         max_price=None if max_price is None else str(max_price),
                         shm_size_mib=shm_size_mib, finish_on_exit=finish_on_exit, name=name,
                         committee=members, quorum=quorum)  # fmt: skip
    kp = _wallet(keypair)
    client = _client(url, program_id)
    world = ChainClusterWorld(client, kp, market_key)
    deadline = hooks.monotonic() + timeout
    try:
        prepared = prepare(world, req, hooks=hooks, deadline=deadline)
        policy = None
        if managed:
            from .cluster_managed import managed_policy

            policy = managed_policy(req, prepared, max_replacements=max_replacements)
        statuses = launch(world, prepared, hooks=hooks, deadline=deadline, managed=policy)
    except BaseException:
        world.close()
        client.close()
        raise
    world.close()
    from .cluster_store import ClusterStore

    cluster = Cluster(ClusterStore().find(prepared.cluster_id, client.url), client, kp, statuses)
    if managed:
        cluster.start_controller({**req.secrets, **_shared(prepared)}, url=client.url,
                                 program_id=client.program_id)  # fmt: skip
    return cluster


def _shared(prepared: Prepared) -> dict[str, str]:
    """The template's per-cluster secret as the nodes got it (memory only)."""
    return dict(getattr(prepared, "shared", {}) or {})


def open_cluster(ref: str, *, url: str | None = None,
                 keypair: Keypair | str | os.PathLike | None = None,
                 program_id: Pubkey | str | None = None) -> Cluster:  # fmt: skip
    """The cluster named ``ref`` (its name, or its id) in the local record of ``url``'s
    chain; ClusterError when there is none."""
    from .cluster_store import ClusterStore, StoreError

    client = _client(url, program_id)
    try:
        record = ClusterStore().find(ref, client.url)
    except StoreError as e:
        client.close()
        raise ClusterError(str(e)) from None
    return Cluster(record, client, _wallet(keypair))
