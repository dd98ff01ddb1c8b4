"""gpu_market.cluster_plan: where a cluster's nodes go (cheapest first, several per provider
when it has room), which offers may take them, and the wallet check before any money moves."""

from __future__ import annotations

from fractions import Fraction

import pytest
from gpu_market.cluster_plan import PlanError, check_funds, cluster_slots, plan_cluster
from gpu_market.offers import Offer
from solders.pubkey import Pubkey

HOUR = Fraction(3600)


def offer(price: int, free: int = 4, *, region: str = "us-west", model: str = "Simulated H100",
          score: float = 0.3, endpoint: str = "http://w", online: bool | None = True,
          jailed: bool = False) -> Offer:  # fmt: skip
    return Offer(provider=Pubkey.new_unique(), owner=Pubkey.new_unique(),
                 worker_key=Pubkey.new_unique(), gpu_model=model, gpus_free=free, gpus_total=8,
                 vram_mib=81920, region=region, price_per_gpu_second=price, stake=0,
                 verified_hours=0, jobs_completed=0, jobs_failed=0, slashes=0, jailed=jailed,
                 score=score, endpoint=endpoint, online=online)  # fmt: skip


def plan(offers, *, nodes=2, gpus=2, limit=None, region=None, capable=None, seconds=HOUR):
    capable = {o.provider: 64 for o in offers} if capable is None else capable
    return plan_cluster(offers, nodes=nodes, gpus=gpus, model="h100", seconds=seconds, limit=limit,
                        region=region, capable=capable,
                        min_deposit=lambda price, gpus: price * gpus * 2, decimals=6)  # fmt: skip


def test_nodes_fill_the_cheapest_provider_first_then_the_next():
    a, b, c = offer(100, free=4), offer(200, free=8), offer(300, free=8)
    p = plan([c, b, a], nodes=3, gpus=2)
    assert [n.offer.provider for n in p.nodes] == [a.provider, a.provider, b.provider]
    assert [n.rank for n in p.nodes] == [0, 1, 2]
    assert [n.deposit for n in p.nodes] == [100 * 2 * 3600, 100 * 2 * 3600, 200 * 2 * 3600]
    assert p.total_deposit == 2_880_000 and p.rate == (100 + 100 + 200) * 2
    assert p.providers == [a.provider, b.provider]
    # Room counts whole nodes: 3 free GPUs hold one node of 2.
    odd = offer(50, free=3)
    assert [n.offer.provider for n in plan([odd, b], nodes=2).nodes] == [odd.provider, b.provider]


def test_equal_prices_go_to_the_better_ranked_provider_and_the_deposit_has_a_floor():
    worse, better = offer(100, score=0.1), offer(100, score=0.9)
    assert plan([worse, better], nodes=2, gpus=4).nodes[0].offer.provider == better.provider
    short = plan([offer(100)], nodes=2, gpus=1, seconds=Fraction(1))
    assert [n.deposit for n in short.nodes] == [200, 200]  # one window, not 1 s


def test_only_providers_serving_cluster_nodes_take_nodes():
    cheap, able = offer(10), offer(500)
    p = plan([cheap, able], nodes=2, gpus=2, capable={cheap.provider: None, able.provider: 51820})
    assert {n.offer.provider for n in p.nodes} == {able.provider}
    with pytest.raises(PlanError, match=r"none serves cluster nodes .*\"cluster\": null"):
        plan([cheap], capable={cheap.provider: None})


@pytest.mark.parametrize(("offers", "kw", "message"), [
    ([], {}, r"no offers: no Active provider"),
    ([offer(1, model="A100")], {}, r"no offer has a GPU model matching 'h100'; models offered: 'A100'"),
    ([offer(1, region="eu")], {"region": "us-west"},
     r"no h100 offer is in region 'us-west'; regions offered: eu"),
    ([offer(1, free=1)], {}, r"no h100 offer has 2 free GPU\(s\) for one node; the most any has is 1"),
    ([offer(1, endpoint="")], {}, r"none runs containers"),
    ([offer(1, online=False)], {}, r"no provider's worker answers its health check"),
    ([offer(1, jailed=True)], {}, r"no offer has a GPU model"),
    ([offer(1000)], {"limit": 999},
     r"the cheapest cluster-capable offer costs 3.6 per GPU-hour, above your max_price"),
    ([offer(1, free=2), offer(2, free=3)], {"nodes": 3},
     r"only 2 node\(s\) of 2 GPU\(s\) fit on the 2 cluster-capable offer\(s\)"),
])  # fmt: skip
def test_the_first_constraint_that_leaves_too_few_nodes_is_named(offers, kw, message):
    with pytest.raises(PlanError, match=message):
        plan(offers, **kw)


def test_region_matches_case_and_underscore_insensitively():
    o = offer(1, region="US West")
    assert plan([o], region="us_west").nodes[0].offer is o


def test_the_wallet_must_pay_every_nodes_deposit():
    p = plan([offer(100, free=8)], nodes=3, gpus=2)
    check_funds(p, p.total_deposit, "ACC", 6)
    with pytest.raises(PlanError, match=r"holds 1.44; the 3 nodes' deposits need 2.16 in all "
                                        r"\(it covers 2 of them\).*nothing was sent"):  # fmt: skip
        check_funds(p, p.total_deposit - 720_000, "ACC", 6)
    with pytest.raises(PlanError, match=r"covers 0 of them"):
        check_funds(p, 0, "ACC", 6)


@pytest.mark.parametrize(("health", "slots"), [
    ({"ok": True, "cluster": {"udp_port": 51820}}, 64),
    ({"ok": True, "cluster": {"udp_port": 51820, "udp_ports": [51820, 51829], "free_ports": 3,
                              "host": "203.0.113.7"}}, 3),
    ({"ok": True, "cluster": {"udp_port": 51820, "free_ports": 0}}, 0),
    ({"ok": True, "cluster": {"udp_port": 51820, "free_ports": -1}}, None),
    ({"ok": True, "cluster": None}, None),
    ({"ok": True}, None),
    ({"ok": True, "cluster": {"udp_port": 0}}, None),
    ({"ok": True, "cluster": {"udp_port": True}}, None),
    ({"ok": True, "cluster": {"udp_port": "51820"}}, None),
    ({"ok": True, "cluster": [51820]}, None),
    (None, None),
])  # fmt: skip
def test_a_worker_serves_cluster_nodes_only_when_its_health_names_a_udp_port(health, slots):
    assert cluster_slots(health) == slots


def test_a_provider_takes_no_more_nodes_than_it_has_free_mesh_ports():
    a, b = offer(100, free=8), offer(200, free=8)
    p = plan([a, b], nodes=3, gpus=2, capable={a.provider: 1, b.provider: 64})
    assert [n.offer.provider for n in p.nodes] == [a.provider, b.provider, b.provider]
    with pytest.raises(PlanError, match="none serves cluster nodes now"):
        plan([a], capable={a.provider: 0})
