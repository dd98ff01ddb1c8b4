"""A managed cluster's controller: a failed node is replaced and rejoins the mesh under the
same rank (``gpum cluster create --managed``, ``gpu_market.create_cluster(managed=True)``,
``gpum cluster watch``).

It runs as the user (their wallet signs everything) and keeps its state in the cluster's
record (:mod:`gpu_market.cluster_store`: one locked, atomic JSON update per step). Each step is
recorded **before** its side effect and is idempotent when run again from the record, so a
controller killed between any two steps resumes where it stopped::

    node states (one record per rank; a replaced one moves to ``retired``)

    running --a failure decided (managed.detect)--> the old one retired "stopping",
                                                    its successor "pending"
    stopping --finish (Running) | cancel (Open) | nothing (Failed...)--> stopped
    pending --offer, deposit (budget), committee, spec fixed--> planned
    planned --create_job, or find the job at its derived address--> created
    created --deliver the spec (secrets sealed to that worker)--> delivered
    delivered --its worker's signed mesh key--> keyed
    keyed --mesh_version + 1 recorded--> joining
    joining --the peer list of that version on every node--> joined
    joined --its job Running and its container running--> running

Guarantees:

* **Same rank, same address, same contract.** The successor of node R is a new job (its id
  ``cluster_spec.node_job_id(id, R, attempt)``, fixed before it is created) whose spec has
  the same cluster section (id, rank, nodes, GPUs per node, master port, subnet), so its
  mesh address and its ``NODE_RANK``... are R's; its image, command, env and ports are R's,
  its secrets sealed to its own worker. Its offer has the cluster's GPU model and count,
  serves cluster nodes, answers now, fits the price cap and region, and is not a provider
  this cluster left for a failure.
* **The mesh follows.** Every node gets the peer list of the new ``mesh_version`` (every
  node's entry, its own included); each worker takes it only as newer than what it keeps,
  and changes its running device in place, so the surviving containers keep running and
  traffic to R's address reaches the successor. The successor's container starts only once
  its own list is configured (the worker's gang hold).
* **The failed job stops paying first.** It is finished (Running) or cancelled (Open) before
  its successor is planned; ``gpum cluster down`` closes it with the others (its receipt
  under its job address), so the money over every job of the cluster adds up.
* **Budget and restarts.** A successor is planned only while the deposits of every job the
  cluster ever had, its own included, stay within ``budget``, and at most
  ``max_replacements`` times; else the controller gives up and says so (``status`` names the
  failed node; ``down`` ends the cluster). A successor not running within
  ``start_timeout_s`` is retired like a failed node, and the next one planned.

The chain, workers and validators are :class:`gpu_market.managed.world.ChainWorld` (watching,
committee heads, offers) and :class:`gpu_market.cluster_world.ChainClusterWorld` (deliveries,
mesh keys, peer lists, worker health); the failure verdict is :func:`gpu_market.managed.
detect.assess`, the policy a :class:`gpu_market.managed.policy.RecoveryPolicy`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from fractions import Fraction
from typing import Any

from solders.pubkey import Pubkey

__all__ = ["DEFAULT_MAX_REPLACEMENTS", "ClusterController", "managed_policy"]

DEFAULT_MAX_REPLACEMENTS = 3
MAX_EVENTS = 100
POLL_S = 2.0
BUILDING = ("pending", "planned", "created", "delivered", "keyed", "joining", "joined")


def _key(text: str) -> Pubkey:
    return Pubkey.from_string(text)


def managed_policy(req: Any, prepared: Any, *, max_replacements: int = DEFAULT_MAX_REPLACEMENTS,
                   budget: int | None = None, missed_windows: int = 3,
                   start_timeout_s: int = 600) -> dict[str, Any]:  # fmt: skip
    """The record's ``managed`` section for a cluster about to start: every rank's workload
    template (no secret values), the price cap and region, and the recovery limits. Default
    budget: the gang's deposits plus ``max_replacements`` times its largest one."""
    from .cluster_templates import node_command
    from .managed.template import make_template

    t = req.template
    templates = []
    for n in prepared.nodes:
        ports = list(req.ports) + (list(t.ports) if t is not None and n.rank == 0 else [])
        finish = req.finish_on_exit if req.finish_on_exit is not None else bool(
            t is not None and t.finish_on_exit)
        shm = req.shm_size_mib if req.shm_size_mib is not None else (t.shm_size if t else None)
        names = sorted(set(req.secrets) | ({t.shared_secret} if t is not None and t.shared_secret
                                           else set()))  # fmt: skip
        templates.append(make_template(prepared.image, command=node_command(t, n.rank, req.command),
                                       env=req.env, secrets=names, ports=[str(p) for p in ports],
                                       shm_size_mib=shm, scratch_mib=req.scratch_mib,
                                       finish_on_exit=finish))  # fmt: skip
    deposits = [n.deposit for n in prepared.nodes]
    return {"max_replacements": max_replacements,
            "budget": budget if budget is not None else sum(deposits) + max_replacements * max(deposits),
            "missed_windows": missed_windows, "start_timeout_s": start_timeout_s,
            "max_price": None if req.max_price is None else max(n.max_price for n in prepared.nodes),
            "region": req.region,
            "master_port": req.master_port, "templates": templates, "gave_up": None}  # fmt: skip


class ClusterController:
    """The controller of cluster ``cluster_id`` in ``store`` (a
    :class:`~gpu_market.cluster_store.ClusterStore`). ``chain``: a managed-job
    :class:`~gpu_market.managed.world.ChainWorld`; ``nodes``: a
    :class:`~gpu_market.cluster_world.ChainClusterWorld`; ``secrets``: the plaintext values of
    the templates' secret names (memory only); ``say(level, text)`` shows each event."""

    def __init__(self, store: Any, cluster_id: str, chain: Any, nodes: Any, *,
                 secrets: Mapping[str, str] | None = None,
                 say: Callable[[str, str], None] = lambda level, text: None,
                 sleep: Callable[[float], None] = time.sleep, poll_s: float = POLL_S) -> None:  # fmt: skip
        self.store, self.id, self.chain, self.nodes = store, cluster_id, chain, nodes
        self.secrets = dict(secrets or {})
        self.say, self.sleep, self.poll_s = say, sleep, poll_s
        self.shown: set[str] = set()
        self.delivered: dict[tuple[int, int], set[int]] = {}
        """Per (version, rank being joined): the ranks whose worker took that list (memory:
        posting it again is idempotent)."""

    # ------------------------------------------------------------------ plumbing

    def record(self) -> Any:
        return self.store.get(self.id)

    def _commit(self, now: int, events: list[tuple[str, str]] = (), **fields: Any) -> Any:  # type: ignore[assignment]
        def change(r: Any) -> Any:
            evs = (*r.events, *((now, level, text) for level, text in events))[-MAX_EVENTS:]
            return replace(r, events=evs, **fields)

        r = self.store.change(self.id, change)
        for level, text in events:
            self.say(level, text)
        return r

    def _node(self, now: int, rank: int, events: list[tuple[str, str]] = (), **fields: Any) -> Any:  # type: ignore[assignment]
        r = self.record()
        nodes = tuple(replace(n, **fields) if n.rank == rank else n for n in r.nodes)
        return self._commit(now, events, nodes=nodes)

    def _warn(self, now: int, kind: str, text: str) -> None:
        if kind not in self.shown:
            self.shown.add(kind)
            self._commit(now, [("warning", text)])

    def _policy(self, r: Any) -> Any:
        from .managed.policy import RecoveryPolicy

        m = r.managed
        return RecoveryPolicy(gpu_model=r.gpu_model, gpus=r.gpus_per_node,
                              hours_seconds=Fraction(r.seconds), budget=m["budget"],
                              max_restarts=m["max_replacements"],
                              max_price_per_gpu_second=m.get("max_price") or None,
                              regions=(m["region"],) if m.get("region") else (),
                              missed_windows=m["missed_windows"],
                              start_timeout_s=m["start_timeout_s"])  # fmt: skip

    # ------------------------------------------------------------------ the loop

    def run(self, until: Callable[[ClusterController], bool] | None = None) -> Any:
        """Tick until ``until(self)``, the cluster is down or asked to stop, or the
        controller gave up. Chain, network and worker errors are shown and retried; a kill
        stops it anywhere (the next run resumes)."""
        from .errors import SdkError
        from .net import NetError
        from .workload_api import WorkerApiError

        while True:
            r = self.record()
            if r.state == "down" or r.stop_requested or (r.managed or {}).get("gave_up"):
                return r
            try:
                self.tick()
                self.shown.discard("round")
            except (SdkError, NetError, WorkerApiError, OSError) as e:
                self._warn(int(time.time()), "round", f"a round failed ({' '.join(str(e).split())}); "
                                                      "retrying")  # fmt: skip
            if until is not None and until(self):
                return self.record()
            self.sleep(self.poll_s)

    def tick(self) -> None:
        """One round: stop retired nodes, move a successor one step, else watch every node."""
        now = self.chain.now()
        for _ in range(8):
            r = self.record()
            if not self._step(r, now):
                return

    def _step(self, r: Any, now: int) -> bool:
        for n in r.retired:
            if n.state == "stopping":
                return self._stop(n, now)
        for n in r.nodes:
            if n.state in BUILDING:
                return self._advance(r, n, now)
        for n in r.nodes:
            if self._watch(r, n, now):
                return True
        return False

    # ------------------------------------------------------------------ watching

    def _watch(self, r: Any, n: Any, now: int) -> bool:
        from .managed.detect import Observation, assess
        from .workload_api import WorkerApiError

        job = _key(n.job)
        j = self.chain.job(job)
        if j is None:
            return False  # closed: ``down`` ran, or the user closed it by hand
        if j.status in ("finishing", "completed"):
            return False  # ended normally (finished, or its escrow ran dry): not a failure
        p = self.chain.provider(j.provider)
        cv = self.chain.committee(job, j.committee)
        workload, error = None, None
        try:
            workload = self.chain.workload_status(n.worker_endpoint, job, j.workload_hash)
        except WorkerApiError as e:
            error = str(e)
        obs = Observation(now=now, status=j.status, started_at=j.started_at,
                          last_window_end=j.last_window_end, window_seconds=j.terms.window_seconds,
                          booked_escrow=j.booked_escrow, rate_per_second=j.terms.rate_per_second,
                          provider_status=None if p is None else p.status, heads=cv.heads,
                          newest_accepted_end=cv.newest_accepted_end,
                          committee_answered=cv.answered, committee_errors=cv.errors,
                          workload=workload, workload_error=error)  # fmt: skip
        verdict = assess(obs, self._policy(r), health_since=None)
        for kind, text in verdict.warnings:
            self._warn(now, f"{kind}-{n.rank}", f"node {n.rank} (job {n.job} on provider "
                                                f"{n.provider}): {text}")  # fmt: skip
        if verdict.failure is None:
            return False
        return self._retire(r, n, now, verdict.failure, failed=True)

    def _retire(self, r: Any, n: Any, now: int, why: str, *, failed: bool) -> bool:
        """Record node ``n``'s end (retired, stopping) and its successor (pending), or that the
        controller gives up, before anything is sent."""
        m = r.managed
        used = len(r.retired)
        kind = "failed" if failed else "did not start"
        if used >= m["max_replacements"]:
            text = (f"node {n.rank} (job {n.job} on provider {n.provider}) {kind}: {why}; the "
                    f"{m['max_replacements']} replacement(s) the policy allows are used: giving "
                    f"up (`gpum cluster down {r.name}` ends the cluster)")  # fmt: skip
            self._commit(now, [("decision", text)], managed={**m, "gave_up": text})
            return False
        old = replace(n, state="stopping", since=now, end_reason=why if failed else f"not started: {why}")
        nxt = replace(n, job="", job_id=0, provider="", worker_endpoint="", workload_hash="",
                      deposit=0, attempt=n.attempt + 1, state="pending", since=now,
                      end_reason=None, spec="", committee=(), quorum=0, mesh_key=None)  # fmt: skip
        text = (f"node {n.rank} (job {n.job} on provider {n.provider}) {kind}: {why}; stopping "
                f"it and replacing it (replacement {used + 1} of {m['max_replacements']})")  # fmt: skip
        self._commit(now, [("decision", text)], retired=(*r.retired, old),
                     nodes=tuple(nxt if x.rank == n.rank else x for x in r.nodes))  # fmt: skip
        self.shown = {k for k in self.shown if not k.endswith(f"-{n.rank}")}
        return True

    def _stop(self, n: Any, now: int) -> bool:
        """End the billing of retired node ``n``: finish a Running job, cancel an Open one,
        nothing for one that ended; then record it stopped."""
        from .errors import GpuMarketError

        def mark(text: str) -> bool:
            r = self.record()
            retired = tuple(replace(x, state="stopped", since=now) if x.job == n.job else x
                            for x in r.retired)  # fmt: skip
            self._commit(now, [("info", text)], retired=retired)
            return True

        if not n.job:
            return mark(f"node {n.rank}'s successor was never created")
        job = _key(n.job)
        j = self.chain.job(job)
        if j is None:
            return mark(f"job {n.job} is closed")
        try:
            if j.status == "running":
                self.chain.finish_job(job)
            elif j.status == "open":
                self.chain.cancel_job(job)
        except GpuMarketError:
            pass  # its status changed meanwhile: read it again
        j = self.chain.job(job)
        if j is not None and j.status in ("open", "running"):
            return False
        return mark(f"job {n.job} {'is closed' if j is None else f'is {j.status}'}: it bills no "
                    f"more; `gpum cluster down` closes it with the others")  # fmt: skip

    # ------------------------------------------------------------------ a successor

    def _advance(self, r: Any, n: Any, now: int) -> bool:
        timeout = r.managed["start_timeout_s"]
        if n.state not in ("pending", "planned") and now > n.since + timeout:
            return self._retire(r, n, now, f"its successor did not run within {timeout} s",
                                failed=False)  # fmt: skip
        try:
            return {"pending": self._plan, "planned": self._create, "created": self._deliver,
                    "delivered": self._mesh_key, "keyed": self._version,
                    "joining": self._join, "joined": self._running}[n.state](r, n, now)  # fmt: skip
        except _Refused as e:
            return self._retire(self.record(), n, now, str(e), failed=False)

    def _plan(self, r: Any, n: Any, now: int) -> bool:
        from .accounts import min_deposit
        from .cluster_spec import ClusterSpec, node_job_id
        from .committee import default_quorum
        from .managed.template import TemplateError, attempt_spec
        from .pda import job_pda
        from .workload import canonical_bytes, spec_hash

        m = r.managed
        policy = self._policy(r)
        failed = frozenset(x.provider for x in r.retired if x.end_reason
                           and not x.end_reason.startswith("not started"))  # fmt: skip
        offers = self.chain.offers()
        fit = [o for o in offers if policy.offer_refusal(o, excluded=failed) is None
               and o.online is not False]  # fmt: skip
        slots = self.nodes.probe(fit, 5.0) if fit else {}
        fit = [o for o in fit if (slots.get(o.provider) is not None and slots[o.provider].online
                                  and (slots[o.provider].slots or 0) >= 1)]  # fmt: skip
        if not fit:
            self._warn(now, f"offer-{n.rank}", f"no offer can take node {n.rank} now ({len(offers)} "
                                               "offer(s); none live, serving cluster nodes, with "
                                               f"{r.gpus_per_node} free {r.gpu_model} GPU(s), "
                                               "within the cap and not failed before); retrying")  # fmt: skip
            return False
        offer = fit[0]
        p = self.chain.provider(offer.provider)
        if p is None or not p.endpoint:
            return False
        params = self.chain.params()
        price = p.price_per_gpu_second
        want = max(math.ceil(price * r.gpus_per_node * r.seconds),
                   min_deposit(params, price, r.gpus_per_node))  # fmt: skip
        spent = sum(x.deposit for x in (*r.nodes, *r.retired) if x.job)
        if spent + want > m["budget"]:
            text = (f"node {n.rank}'s successor needs a deposit of {want} base units; the budget "
                    f"of {m['budget']} has {m['budget'] - spent} left: giving up (`gpum cluster "
                    f"down {r.name}` ends the cluster)")  # fmt: skip
            self._commit(now, [("decision", text)], managed={**m, "gave_up": text})
            return False
        try:
            spec = attempt_spec(m["templates"][n.rank], bytes(p.worker_key), self.secrets)
        except TemplateError as e:
            self._warn(now, f"spec-{n.rank}", f"node {n.rank}'s successor cannot be built: {e}")
            return False
        spec = replace(spec, cluster=ClusterSpec(r.id, n.rank, len(r.nodes), r.gpus_per_node,
                                                 m["master_port"]))  # fmt: skip
        committee = self.chain.default_committee([offer.owner, p.worker_key])
        quorum = default_quorum(len(committee), params.min_quorum)
        job_id = node_job_id(r.id, n.rank, n.attempt)
        job = job_pda(_key(r.market), _key(r.user), job_id, self.chain.client.program_id)
        text = (f"node {n.rank}: successor {n.attempt} is job {job} on provider {offer.provider} "
                f"({offer.gpu_model}), deposit {want} base units")  # fmt: skip
        self._node(now, n.rank, [("decision", text)], state="planned", since=now, job=str(job),
                   job_id=job_id, provider=str(offer.provider), worker_endpoint=p.endpoint,
                   workload_hash=spec_hash(spec).hex(), deposit=want, spec=canonical_bytes(spec).hex(),
                   committee=tuple(str(k) for k in committee), quorum=quorum)  # fmt: skip
        return True

    def _create(self, r: Any, n: Any, now: int) -> bool:
        from .errors import GpuMarketError, SdkError

        job = _key(n.job)
        if self.chain.job(job) is None:
            try:
                self.chain.create_job(n.job_id, _key(n.provider), r.gpus_per_node, n.deposit,
                                      [_key(k) for k in n.committee], n.quorum,
                                      r.managed.get("max_price") or self.chain.provider(
                                          _key(n.provider)).price_per_gpu_second,
                                      bytes.fromhex(n.workload_hash))  # fmt: skip
            except GpuMarketError as e:
                self._node(now, n.rank, [("warning", (f"job {n.job} could not be created ({e.name}); "
                                                     "choosing again"))], state="pending")  # fmt: skip
                return True
            except SdkError:
                if self.chain.job(job) is None:
                    return False  # it may land: read again next round
            self.chain.remember(job, n.job_id, now)
        self._node(now, n.rank, [("info", f"job {n.job} created")], state="created", since=now)
        return True

    def _deliver(self, r: Any, n: Any, now: int) -> bool:
        from .workload import spec_from_json
        from .workload_api import WorkerApiError

        self._alive(n)
        try:
            self.chain.deliver(n.worker_endpoint, _key(n.job),
                               spec_from_json(bytes.fromhex(n.spec)))  # fmt: skip
        except WorkerApiError as e:
            if e.status in (None, 404, 503):
                return False
            raise _Refused(f"its worker refused the spec: {e}") from None
        self._node(now, n.rank, state="delivered")
        return True

    def _alive(self, n: Any) -> Any:
        j = self.chain.job(_key(n.job))
        if j is None or j.status not in ("open", "running"):
            raise _Refused(f"its job is {'closed' if j is None else j.status}")
        return j

    def _mesh_key(self, r: Any, n: Any, now: int) -> bool:
        """The successor's key, and every other node's (asked once, then kept)."""
        from .cluster_mesh import MeshError

        for x in sorted(r.nodes, key=lambda x: x is not n):
            if x.mesh_key is not None:
                continue
            if x is n:
                self._alive(n)
            p = self.chain.provider(_key(x.provider))
            try:
                key = self.nodes.mesh_key(x.worker_endpoint, _key(x.job),
                                          bytes.fromhex(x.workload_hash), p.worker_key, 10.0,
                                          f"node {x.rank}'s worker at {x.worker_endpoint}")  # fmt: skip
            except MeshError as e:
                if x is n and not e.retry:
                    raise _Refused(f"gave no usable mesh key: {e}") from None
                self._warn(now, f"key-{x.rank}", f"node {x.rank}'s mesh key: {e}; retrying")
                return False
            self._node(now, x.rank, mesh_key=key.peer(x.rank))
        self._node(now, n.rank, state="keyed")
        return True

    def _version(self, r: Any, n: Any, now: int) -> bool:
        """The intent: the next peer list's version, recorded before any node sees it."""
        self._commit(now, mesh_version=r.mesh_version + 1,
                     nodes=tuple(replace(x, state="joining") if x.rank == n.rank else x
                                 for x in r.nodes))  # fmt: skip
        return True

    def _join(self, r: Any, n: Any, now: int) -> bool:
        """Deliver the peer list of ``mesh_version`` (every node's entry) to every node."""
        from .cluster_mesh import MeshError

        self._alive(n)
        body = {"version": r.mesh_version, "peers": [x.mesh_key for x in r.nodes]}
        done = self.delivered.setdefault((r.mesh_version, n.rank), set())
        for x in r.nodes:
            if x.rank in done:
                continue
            try:
                self.nodes.post_peers(x.worker_endpoint, _key(x.job), bytes.fromhex(x.workload_hash),
                                      body, 10.0, f"node {x.rank}'s worker")  # fmt: skip
                done.add(x.rank)
            except MeshError as e:
                if x is n and not e.retry:
                    raise _Refused(f"refused the cluster's peer list: {e}") from None
                if e.status == 409 and "mesh_stale" in str(e):
                    done.add(x.rank)  # it keeps a newer list already (a later run sent it)
                    continue
                self._warn(now, f"join-{x.rank}", f"node {x.rank} did not take peer list "
                                                  f"version {r.mesh_version}: {e}; retrying")  # fmt: skip
        if len(done) < len(r.nodes):
            return False
        self._node(now, n.rank, [("info", (f"peer list version {r.mesh_version} is on every "
                                          f"node: node {n.rank}'s address now leads to job "
                                          f"{n.job}"))], state="joined")  # fmt: skip
        return True

    def _running(self, r: Any, n: Any, now: int) -> bool:
        from .workload_api import WorkerApiError

        j = self._alive(n)
        if j.status != "running":
            return False
        try:
            s = self.chain.workload_status(n.worker_endpoint, _key(n.job), j.workload_hash)
        except WorkerApiError:
            return False
        state = s.get("state")
        if state in ("failed", "stopped") or (state == "exited" and s.get("exit_code") != 0):
            raise _Refused(f"its container is {state}: {s.get('error') or s.get('exit_code')}")
        if state not in ("running", "exited"):
            return False
        self._node(now, n.rank, [("decision", (f"node {n.rank} runs again: job {n.job} on provider "
                                              f"{n.provider}, same rank and mesh address"))],
                   state="running", since=now)  # fmt: skip
        return True


class _Refused(Exception):
    """A successor that cannot run (its job ended, a refusal that will not change)."""


def controller_lock(store: Any, record: Any) -> Any:
    """The exclusive right to run this cluster's controller (an ``flock`` beside the record;
    the kernel releases it when its process dies)."""
    from .managed.store import ControllerLock

    return ControllerLock(store.path.parent, f"cluster-{record.id}", f"cluster {record.name}")


def watch(store: Any, record: Any, client: Any, keypair: Any, *,
          secrets: Mapping[str, str] | None = None,
          say: Callable[[str, str], None] = lambda level, text: None,
          until: Callable[[ClusterController], bool] | None = None,
          sleep: Callable[[float], None] = time.sleep, poll_s: float = POLL_S) -> Any:  # fmt: skip
    """Run managed cluster ``record``'s controller here (holding its lock; ControllerBusy when
    another runs it) until ``until``, a stop request, ``down`` or giving up: the record then."""
    from .cluster_world import ChainClusterWorld
    from .managed.world import ChainWorld

    market = _key(record.market)
    chain = ChainWorld(client, keypair, market)
    nodes = ChainClusterWorld(client, keypair, market)
    lock = controller_lock(store, record)
    lock.acquire()
    try:
        c = ClusterController(store, record.id, chain, nodes, secrets=secrets, say=say,
                              sleep=sleep, poll_s=poll_s)  # fmt: skip
        return c.run(until)
    finally:
        lock.release()
        nodes.close()
        close = getattr(chain, "close", None)
        if close is not None:
            close()


def stop_controller(store: Any, record: Any, *, wait_s: float = 60.0,
                    sleep: Callable[[float], None] = time.sleep) -> None:
    """Ask the controller of ``record`` to stop (``stop_requested`` in the record) and wait
    up to ``wait_s`` for it to let go of its lock (it stops between two steps)."""
    store.update(record.id, stop_requested=True)
    lock = controller_lock(store, record)
    end = time.monotonic() + wait_s
    while lock.holder() is not None and time.monotonic() < end:
        sleep(0.2)
