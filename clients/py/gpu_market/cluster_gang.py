"""Starting a cluster's K jobs as one: all of them run, or none is left billing.

Steps, each for every node, within one deadline (the gang limit)::

    create    the node's job at its fixed address (cluster_spec.node_job_id); a job already
              there (a retried create that landed) is taken as it is, never created twice
    deliver   the node's spec (secrets sealed to its worker) to its worker
    key       the worker's signed mesh key (cluster_mesh.parse_mesh_key verifies it)
    peers     every other node's key, posted to the node's worker
    run       the job Running and its container running (the worker starts it only once
              its mesh is configured, so no container starts before every key is known)
    mesh      a WireGuard handshake between every two nodes, as their workers report it,
              within HANDSHAKE_S of every container running: else the nodes cannot reach
              each other (a UDP port nobody can reach), and the error names a node, the peer
              it never heard from and that peer's endpoint (workers that do not report
              handshakes are taken as joined)

A request that may succeed later (no answer, 503, a job its worker has not seen yet, a key not
made yet) is retried until the deadline; a definite refusal (a spec refused, a declined job, a
bad or foreign key, a container that failed) ends the gang at once. Either way the gang is
**released** (:func:`release`): every job still Open is cancelled (its whole deposit back in
the same transaction), every Running one finished (billing stops; a window in which its
container never ran bills nothing, so its close refunds the deposit), and the
:class:`GangError` names the node that failed, why, and what became of every job. Ctrl-C
(KeyboardInterrupt) releases the gang the same way.

The world (chain, wallet, workers) is a :class:`~gpu_market.cluster_world.ClusterWorld`; the
clock, the sleep and the progress line are the :class:`~gpu_market.deployment.Hooks`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from solders.pubkey import Pubkey

from .errors import SdkError

__all__ = ["ATTEMPT_S", "HANDSHAKE_S", "GangError", "GangNode", "release", "start_gang"]

ATTEMPT_S = 10.0
"""The longest one request to a worker may take."""
POLL_S = 1.0
HANDSHAKE_S = 20.0
"""How long the mesh may take to complete once every container runs (WireGuard retries a
handshake every 5 s; the first one normally completes within a second)."""


class GangError(SdkError):
    """The cluster did not start and its jobs were released; the message names the node that
    failed, why, and what became of every job. ``rank``: that node (None: no single one)."""

    def __init__(self, message: str, rank: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank


class _Failed(Exception):
    def __init__(self, node: GangNode, why: str) -> None:
        super().__init__(why)
        self.node, self.why = node, why


class _Late(_Failed):
    """A step's nodes were not all through it by its deadline."""


@dataclass
class GangNode:
    """One node as the gang starts it: where its job lives and what it runs, and how far it
    got (``created``, ``delivered``, ``key``, ``configured``, ``status``: the worker's
    workload status once its container ran)."""

    rank: int
    job: Pubkey
    job_id: int
    provider: Pubkey
    worker_key: Pubkey
    endpoint: str
    spec: Any
    workload_hash: bytes
    gpus: int
    deposit: int
    max_price: int
    created: bool = False
    delivered: bool = False
    key: Any = None
    configured: bool = False
    status: dict[str, Any] = field(default_factory=dict)
    last_error: str = ""
    joined: bool = False
    missing: tuple[int, ...] = ()
    """The peer ranks this node had no handshake with when last asked."""

    @property
    def who(self) -> str:
        return f"node {self.rank} (job {self.job} on provider {self.provider})"

    @property
    def worker(self) -> str:
        return f"its worker at {self.endpoint}"


def _job_alive(world: Any, n: GangNode) -> Any:
    """The node's job; _Failed when it can no longer run."""
    j = world.job(n.job)
    if j is None:
        raise _Failed(n, "has no job on chain (closed, or never created)")
    if j.status == "declined":
        raise _Failed(n, "was declined by its provider")
    if j.status not in ("open", "running"):
        raise _Failed(n, f"is {j.status} before the cluster ran")
    return j


def _create(world: Any, n: GangNode, committee: Sequence[Pubkey], quorum: int) -> None:
    from .errors import GpuMarketError

    if world.job(n.job) is not None:  # a create that landed earlier: never a second job
        n.created = True
        return
    try:
        world.create_job(n.job_id, n.provider, n.gpus, n.deposit, committee, quorum, n.max_price,
                         n.workload_hash)  # fmt: skip
    except GpuMarketError as e:
        if e.name == "PriceAboveLimit":
            raise _Failed(n, "could not be created: its provider raised its price above your "
                             "limit before the job landed") from None  # fmt: skip
        raise _Failed(n, f"could not be created: program error {e.name}: {e.message}") from None
    except SdkError as e:
        if world.job(n.job) is None:  # it did not land
            raise _Failed(n, f"could not be created: {e}") from None
    n.created = True


def _deliver(world: Any, n: GangNode, left: float) -> bool:
    from .workload_api import WorkerApiError

    try:
        world.deliver(n.endpoint, n.job, n.spec, max(0.1, min(ATTEMPT_S, left)))
    except WorkerApiError as e:
        n.last_error = str(e)
        if e.status not in (None, 404, 503):
            raise _Failed(n, f"refused its workload: {e}") from None
        return False
    n.delivered = True
    return True


def _key(world: Any, n: GangNode, left: float) -> bool:
    from .cluster_mesh import MeshError

    _job_alive(world, n)
    try:
        n.key = world.mesh_key(n.endpoint, n.job, n.workload_hash, n.worker_key,
                               max(0.1, min(ATTEMPT_S, left)), n.worker)  # fmt: skip
    except MeshError as e:
        n.last_error = str(e)
        if not e.retry:
            raise _Failed(n, f"gave no usable mesh key: {e}") from None
        return False
    return True


def _peers(world: Any, nodes: Sequence[GangNode], n: GangNode, left: float) -> bool:
    from .cluster_mesh import MeshError, peer_list

    try:
        world.post_peers(n.endpoint, n.job, n.workload_hash,
                         peer_list([m.key for m in nodes], n.rank),
                         max(0.1, min(ATTEMPT_S, left)), n.worker)  # fmt: skip
    except MeshError as e:
        n.last_error = str(e)
        if not e.retry:
            raise _Failed(n, f"refused the cluster's peer list: {e}") from None
        return False
    n.configured = True
    return True


def _running(world: Any, n: GangNode, left: float) -> bool:
    from .workload_api import WorkerApiError

    j = _job_alive(world, n)
    if j.status == "open":
        n.last_error = "its provider has not accepted the job"
        return False
    try:
        s = world.workload_status(n.endpoint, n.job, n.workload_hash, max(0.1, min(ATTEMPT_S, left)))
    except WorkerApiError as e:
        n.last_error = str(e)
        return False
    state = s.get("state")
    if state == "running" or (state == "exited" and s.get("exit_code") == 0):
        n.status = s
        return True
    if state == "exited":
        raise _Failed(n, f"ran its container, which exited with code {s.get('exit_code')}")
    if state in ("failed", "stopped"):
        raise _Failed(n, f"could not run its container: {s.get('error') or state}")
    reason = s.get("reason") or s.get("error")
    n.last_error = f"its container is {state or 'in an unknown state'}" + (f" ({reason})" if reason else "")
    return False


def _handshakes(world: Any, nodes: Sequence[GangNode], n: GangNode, left: float) -> bool:
    from .cluster_mesh import NOT_REPORTED, MeshError

    peers = tuple(m.rank for m in nodes if m is not n)
    try:
        seen = world.mesh_handshakes(n.endpoint, n.job, n.workload_hash,
                                     max(0.1, min(ATTEMPT_S, left)), n.worker)  # fmt: skip
    except MeshError as e:
        n.last_error, n.missing = str(e), peers
        return _finished(world, n, left)
    if seen == NOT_REPORTED:
        n.joined = True  # a worker that does not report handshakes: nothing to wait for
        return True
    if seen is None:
        n.last_error, n.missing = "its mesh device is not up", peers
        return _finished(world, n, left)
    n.missing = tuple(r for r in peers if not seen.get(r))  # type: ignore[union-attr]
    n.joined = not n.missing
    return n.joined


def _finished(world: Any, n: GangNode, left: float) -> bool:
    """For a node whose mesh is gone or not up: True (joined) when its container already ran
    to completion (exit code 0: its mesh went with it); _Failed when it failed."""
    from .workload_api import WorkerApiError

    try:
        s = world.workload_status(n.endpoint, n.job, n.workload_hash, max(0.1, min(ATTEMPT_S, left)))
    except WorkerApiError:
        return False
    if s.get("state") == "exited" and s.get("exit_code") == 0:
        n.joined = True
    elif s.get("state") in ("exited", "failed"):
        raise _Failed(n, f"ran its container, which ended ({s.get('state')}, exit code "
                         f"{s.get('exit_code')}) before the mesh was complete")  # fmt: skip
    return n.joined


def _await_mesh(world: Any, nodes: Sequence[GangNode], deadline: float, hooks: Any) -> None:
    """Every node has had a handshake with every other by ``deadline``; else _Failed naming
    a node and the peer it never heard from: the one most nodes miss (with two nodes either
    end may be the one nobody can reach)."""
    limit = max(0.0, deadline - hooks.monotonic())
    try:
        _step(nodes, lambda n: not n.joined, lambda n, left: _handshakes(world, nodes, n, left),
              "completing the mesh", deadline, hooks)  # fmt: skip
    except _Late:
        waiting = [n for n in nodes if not n.joined]
        misses = [r for n in waiting for r in n.missing]
        if not misses:
            raise
        peer = nodes[max(set(misses), key=lambda r: (misses.count(r), r))]
        node = next(n for n in waiting if peer.rank in n.missing)
        raise _Failed(node, f"had no WireGuard handshake with node {peer.rank} (provider "
                            f"{peer.provider}) at {peer.key.endpoint} within {limit:.0f} s: UDP "
                            "between them does not get through (each provider must let UDP "
                            "in on its [cluster] udp_ports, and nothing between them may drop "
                            "it)") from None  # fmt: skip


def _step(nodes: Sequence[GangNode], todo: Callable[[GangNode], bool],
          attempt: Callable[[GangNode, float], bool], what: str, deadline: float, hooks: Any) -> None:  # fmt: skip
    """``attempt`` every node that still needs it (``todo``) in rounds until all succeeded;
    _Failed naming the first node left at ``deadline``."""
    while True:
        pending = [n for n in nodes if todo(n)]
        for n in pending:
            attempt(n, deadline - hooks.monotonic())
        pending = [n for n in nodes if todo(n)]
        if not pending:
            return
        waiting = ", ".join(str(n.rank) for n in pending)
        hooks.progress.show(f"{what}: waiting for node(s) {waiting}")
        if hooks.monotonic() >= deadline:
            n = pending[0]
            tail = f": {n.last_error}" if n.last_error else ""
            raise _Late(n, f"did not get through '{what}' within the cluster's start limit{tail}")
        hooks.sleep(max(0.0, min(POLL_S, deadline - hooks.monotonic())))


def start_gang(world: Any, nodes: Sequence[GangNode], *, committee: Sequence[Pubkey], quorum: int,
               deadline: float, hooks: Any, cluster: str,
               amount: Callable[[int], str]) -> list[dict[str, Any]]:  # fmt: skip
    """Create, deliver, join and start every node (module docstring) by ``deadline``
    (monotonic): each node's workload status once every container runs. GangError (every job
    released) otherwise; ``cluster`` names the cluster in messages, ``amount`` formats base
    units."""
    progress = hooks.progress
    try:
        for n in nodes:
            progress.show(f"creating the job of node {n.rank} on provider {n.provider}")
            _create(world, n, committee, quorum)
        _step(nodes, lambda n: not n.delivered, lambda n, left: _deliver(world, n, left),
              "delivering the workloads", deadline, hooks)  # fmt: skip
        _step(nodes, lambda n: n.key is None, lambda n, left: _key(world, n, left),
              "collecting the mesh keys", deadline, hooks)  # fmt: skip
        keys = {}
        for n in nodes:
            other = keys.setdefault(n.key.public_key, n)
            if other is not n:
                raise _Failed(n, f"published the same mesh key as node {other.rank}")
        _step(nodes, lambda n: not n.configured, lambda n, left: _peers(world, nodes, n, left),
              "joining the mesh", deadline, hooks)  # fmt: skip
        _step(nodes, lambda n: not n.status, lambda n, left: _running(world, n, left),
              "starting the containers", deadline, hooks)  # fmt: skip
        _await_mesh(world, nodes, min(deadline, hooks.monotonic() + HANDSHAKE_S), hooks)
        return [n.status for n in nodes]
    except _Failed as f:
        progress.done()
        lines = release(world, nodes, cluster, amount)
        raise GangError(f"cluster {cluster} did not start: {f.node.who} {f.why}. Every node "
                        f"was released: {' '.join(lines)}", f.node.rank) from None  # fmt: skip
    except KeyboardInterrupt:
        progress.done()
        lines = release(world, nodes, cluster, amount)
        raise GangError(f"interrupted; every node of cluster {cluster} was released: "
                        f"{' '.join(lines)}") from None  # fmt: skip
    finally:
        progress.done()


def release(world: Any, nodes: Sequence[GangNode], cluster: str,
            amount: Callable[[int], str]) -> list[str]:  # fmt: skip
    """Stop every node's job from costing anything: cancel the Open ones (full refund now),
    finish the Running ones (their close refunds what no window billed); one sentence per
    node. Never raises for one node's failure: the sentence says what to run instead."""
    from .errors import GpuMarketError

    lines = []
    for n in nodes:
        try:
            j = world.job(n.job)
            if j is None:
                lines.append(f"node {n.rank}: no job was created.")
                continue
            if j.status == "open":
                try:
                    world.cancel_job(n.job)
                    lines.append(f"node {n.rank}: job {n.job} cancelled, {amount(j.deposited)} "
                                 "refunded in full.")  # fmt: skip
                    continue
                except GpuMarketError:
                    j = world.job(n.job)  # accepted meanwhile: finish it below
                    if j is None or j.status != "running":
                        raise
            if j.status == "running":
                world.finish_job(n.job)
                lines.append(f"node {n.rank}: job {n.job} finished (billing stopped); `gpum "
                             f"cluster down {cluster}` closes it after its settlement grace and "
                             "refunds what it did not spend.")  # fmt: skip
            else:
                lines.append(f"node {n.rank}: job {n.job} is {j.status}; `gpum cluster down "
                             f"{cluster}` closes it.")  # fmt: skip
        except (GpuMarketError, SdkError) as e:
            lines.append(f"node {n.rank}: releasing job {n.job} failed ({e}); run `gpum job stop "
                         f"{n.job}`.")  # fmt: skip
    return lines
