"""Where a cluster's nodes go and what they cost, before anything is sent (pure: no I/O).

Policy. A node is one job of ``gpus`` GPUs on one provider. The offers that may take nodes are
those ``gpum run`` would take (not jailed, a GPU model containing ``model``, running containers,
price at most the cap) whose worker answered its health probe (``online`` not False) and said
it serves cluster nodes (its health's ``cluster`` field, :func:`cluster_slots`), in the
region asked for if any. Nodes are placed cheapest first: offers sorted by price per
GPU-second, ties by :func:`gpu_market.offers.rank_key`; each takes as many nodes as its free,
stake-backed GPUs hold (``gpus_free // gpus``) and its free mesh ports allow, so several nodes
share one provider when it is the cheapest with room, and the plan's cost is the least any placement has. Node 0 (the one
whose published ports are the cluster's endpoint) is on the cheapest provider.

Every refusal is a :class:`PlanError` whose message names the first constraint that leaves too
few nodes (model, region, GPUs per node, containers, liveness, cluster support, price, then
room) and what to change; :func:`check_funds` refuses a wallet that cannot pay every node's
deposit, so no job is created unless all of them can be.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .offers import rank_key
from .units import U64_MAX, format_ui_amount

__all__ = ["SECONDS_PER_HOUR", "ClusterPlan", "NodePlan", "PlanError", "check_funds",
           "cluster_slots", "plan_cluster"]  # fmt: skip

SECONDS_PER_HOUR = 3600


class PlanError(ValueError):
    """No placement of the cluster fits; the message says why and what to change."""


@dataclass(frozen=True)
class NodePlan:
    """One node: its rank, the offer it takes (``offer.provider`` creates the job), its price
    per GPU-second, deposit (base units) and GPUs."""

    rank: int
    offer: Any
    price: int
    deposit: int
    gpus: int

    @property
    def rate(self) -> int:
        """Per second, the node's GPUs together."""
        return self.price * self.gpus


@dataclass(frozen=True)
class ClusterPlan:
    """Every node's placement, rank order; amounts in payment-mint base units."""

    nodes: tuple[NodePlan, ...]
    gpus_per_node: int
    seconds: Fraction

    @property
    def total_deposit(self) -> int:
        return sum(n.deposit for n in self.nodes)

    @property
    def rate(self) -> int:
        """What the whole cluster costs per second."""
        return sum(n.rate for n in self.nodes)

    @property
    def providers(self) -> list[Any]:
        """The distinct providers, in rank order of their first node."""
        out: list[Any] = []
        for n in self.nodes:
            if n.offer.provider not in out:
                out.append(n.offer.provider)
        return out


def cluster_slots(health: Mapping[str, Any] | None) -> int | None:
    """How many more cluster nodes a worker's ``GET /v1/health`` answer says it can serve
    (each takes one UDP port of its range): its ``cluster.free_ports``, or ``MAX_NODES`` when
    it names a ``udp_port`` but no count; None when it serves no cluster nodes
    (``"cluster": null``, absent, or malformed)."""
    from .cluster_spec import MAX_NODES

    c = (health or {}).get("cluster")
    if not isinstance(c, dict):
        return None
    port, free = c.get("udp_port"), c.get("free_ports")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        return None
    if free is None:
        return MAX_NODES
    if isinstance(free, bool) or not isinstance(free, int) or free < 0:
        return None
    return free


def _norm(text: str) -> str:
    return text.replace("_", " ").strip().casefold()


def _stage(offers: Sequence[Any], *, nodes: int, gpus: int, model: str, region: str | None,
           limit: int | None, capable: Mapping[Any, int | None],
           flag: Callable[[str], str], decimals: int) -> list[Any]:  # fmt: skip
    """The offers passing every constraint; PlanError naming the first that leaves none."""
    def need(kept: list[Any], why: str) -> list[Any]:
        if not kept:
            raise PlanError(why)
        return kept

    if not offers:
        raise PlanError("no offers: no Active provider has a free GPU now (see `gpum offers`)")
    kept = [o for o in offers if not o.jailed and _norm(model) in _norm(o.gpu_model)]
    kept = need(kept, f"no offer has a GPU model matching {model!r}; models offered: "
                      f"{', '.join(sorted({repr(o.gpu_model) for o in offers}))}")
    if region is not None:
        regions = sorted({o.region for o in kept})
        kept = need([o for o in kept if _norm(o.region) == _norm(region)],
                    f"no {model} offer is in region {region!r}; regions offered: "
                    f"{', '.join(regions) or 'none'} (or leave out {flag('region')})")
    most = max(o.gpus_free for o in kept)
    kept = need([o for o in kept if o.gpus_free >= gpus],
                f"no {model} offer has {gpus} free GPU(s) for one node; the most any has is "
                f"{most}: ask for fewer GPUs per node with {flag('gpu')} {model}:{max(most, 1)}")
    kept = need([o for o in kept if o.runs_workloads],
                f"{len(kept)} offer(s) fit but none runs containers (publishes a worker endpoint)")
    down = [o for o in kept if o.online is False]
    kept = need([o for o in kept if o.online is not False],
                f"{len(down)} offer(s) fit but no provider's worker answers its health check "
                f"({'; '.join(f'{o.provider}: {o.liveness_error}' for o in down[:3])}); nothing "
                "was sent and no money moved: try later")
    kept = need([o for o in kept if capable.get(o.provider)],
                f"{len(kept)} offer(s) fit but none serves cluster nodes now (its worker's "
                "health says \"cluster\": null, or no free UDP port for the mesh); see `gpum "
                "offers`")
    if limit is not None:
        cheapest = min(o.price_per_gpu_second for o in kept)
        kept = need([o for o in kept if o.price_per_gpu_second <= limit],
                    f"the cheapest cluster-capable offer costs "
                    f"{format_ui_amount(cheapest * SECONDS_PER_HOUR, decimals)} per GPU-hour, "
                    f"above your {flag('max_price')}; raise it or try later")
    return kept


def plan_cluster(offers: Sequence[Any], *, nodes: int, gpus: int, model: str,
                 seconds: Fraction, limit: int | None, region: str | None,
                 capable: Mapping[Any, int | None], min_deposit: Callable[[int, int], int],
                 decimals: int, flag: Callable[[str], str] = lambda n: n) -> ClusterPlan:  # fmt: skip
    """The cheapest placement of ``nodes`` nodes of ``gpus`` GPUs each for ``seconds`` (module
    docstring). ``capable``: provider -> how many nodes its mesh can still take
    (:func:`cluster_slots`; None: it serves no cluster nodes);
    ``min_deposit(price, gpus)``: the market's smallest deposit; ``limit``: the highest price
    per GPU-second (None: any). PlanError when it does not fit."""
    kept = _stage(offers, nodes=nodes, gpus=gpus, model=model, region=region, limit=limit,
                  capable=capable, flag=flag, decimals=decimals)  # fmt: skip
    kept.sort(key=lambda o: (o.price_per_gpu_second, rank_key(o)))
    placed: list[NodePlan] = []
    for o in kept:
        for _ in range(min(o.gpus_free // gpus, capable[o.provider] or 0)):
            if len(placed) == nodes:
                break
            deposit = max(math.ceil(o.price_per_gpu_second * gpus * seconds),
                          min_deposit(o.price_per_gpu_second, gpus))  # fmt: skip
            if deposit > U64_MAX:
                raise PlanError(f"{float(seconds / SECONDS_PER_HOUR):g} hours at this price is "
                                f"more than a token amount can hold; ask for fewer "
                                f"{flag('hours')}")  # fmt: skip
            placed.append(NodePlan(len(placed), o, o.price_per_gpu_second, deposit, gpus))
    if len(placed) < nodes:
        room = ", ".join(f"{o.provider} {min(o.gpus_free // gpus, capable[o.provider] or 0)}"
                         for o in kept[:5])  # fmt: skip
        raise PlanError(f"only {len(placed)} node(s) of {gpus} GPU(s) fit on the "
                        f"{len(kept)} cluster-capable offer(s) that match (nodes per provider: "
                        f"{room}); ask for fewer {flag('nodes')} or fewer GPUs per node")  # fmt: skip
    return ClusterPlan(tuple(placed), gpus, seconds)


def check_funds(plan: ClusterPlan, balance: int, account: Any, decimals: int,
                flag: Callable[[str], str] = lambda n: n) -> None:  # fmt: skip
    """PlanError, before any money moves, unless ``balance`` pays every node's deposit."""
    need = plan.total_deposit
    if balance >= need:
        return
    fit, total = 0, 0
    for n in plan.nodes:
        if total + n.deposit > balance:
            break
        fit, total = fit + 1, total + n.deposit
    raise PlanError(f"your payment account {account} holds {format_ui_amount(balance, decimals)}; "
                    f"the {len(plan.nodes)} nodes' deposits need {format_ui_amount(need, decimals)} "
                    f"in all (it covers {fit} of them): fund it, or ask for fewer "
                    f"{flag('hours')} or {flag('nodes')}; nothing was sent")  # fmt: skip
