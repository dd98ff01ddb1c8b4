"""``gpum offers`` end to end: providers registered through the ``gpum`` CLI on the
local chain, listed, filtered and sorted by ``gpum offers --output json``, every figure checked
against the Provider accounts the chain holds.

One module-wide market (6-decimal mints, 100 stake units per GPU, 2 s windows) with six
providers, registered and staked through the CLI:

    A  NVIDIA H100 80GB HBM3  8 GPUs  us-west   0.001/s   stake 1000  endpoint      offer, 8 free
    B  NVIDIA A100-SXM4-40GB  4 GPUs  eu-west   0.0005/s  stake 250   (backs 2)     offer, 2 free
    C  GeForce RTX 4090       2 GPUs  us-east   0.0001/s  stake 1000  paused        no offer
    D  NVIDIA L40S            2 GPUs  eu-west   0.0002/s  stake 1000  a job holds 2 no offer
    E  NVIDIA H100 PCIe       4 GPUs  ap-south  0.0001/s  no stake                  no offer
    F  NVIDIA H100 NVL        2 GPUs  us-west   0.0004/s  stake 1000  expired job   offer, score < 0.3

A's endpoint is a stand-in worker that answers ``/v1/health`` (so A is online); the others
publish none (liveness unknown, listed as usual). F's job is accepted and then expired (the clock is warped past ``expirable_after``), so the
chain books a failed job and missed windows on F's reputation, and F's score drops below the
0.3 of the others (new, unverified, unrated). The validator V is only every job's committee (its endpoint is never
called).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from gpu_market import pda
from gpu_market.client import GpuMarketClient
from gpu_market.localchain import warp_time
from gpu_market.offers import best_offer, list_offers
from gpu_market.processes import JsonServer, tool
from gpu_market.reputation import offer_score
from gpu_market.units import format_ui_amount
from harness import Market
from solders.keypair import Keypair
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e
OWN_LOCALNET = "F's job expires by a warp of the clock, which never goes back (see conftest)"

WINDOW = 2
DECIMALS = 6
MIN_STAKE_PER_GPU = 100 * 10**DECIMALS

PROVIDERS: dict[str, dict[str, Any]] = {
    "A": {"model": "NVIDIA H100 80GB HBM3", "gpus": 8, "vram": 81920, "region": "us-west",
          "price": "3.6", "stake": "1000", "endpoint": "(the stand-in worker)"},
    "B": {"model": "NVIDIA A100-SXM4-40GB", "gpus": 4, "vram": 40960, "region": "eu-west",
          "price": "1.8", "stake": "250"},
    "C": {"model": "GeForce RTX 4090", "gpus": 2, "vram": 24564, "region": "us-east",
          "price": "0.36", "stake": "1000"},
    "D": {"model": "NVIDIA L40S", "gpus": 2, "vram": 49152, "region": "eu-west",
          "price": "0.72", "stake": "1000"},
    "E": {"model": "NVIDIA H100 PCIe", "gpus": 4, "vram": 81920, "region": "ap-south",
          "price": "0.36", "stake": None},
    "F": {"model": "NVIDIA H100 NVL", "gpus": 2, "vram": 95830, "region": "us-west",
          "price": "1.44", "stake": "1000"},
}  # fmt: skip


@dataclass
class World:
    url: str
    client: GpuMarketClient
    keys: dict[str, Path]
    market: Pubkey
    providers: dict[str, Pubkey]
    validator: Pubkey

    def gpum(self, who: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        argv = [tool("gpum"), "--url", self.url, "--keypair", str(self.keys[who]), *args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if ok and r.returncode != 0:
            raise AssertionError(f"gpum {' '.join(args)} failed:\n{r.stderr}")
        return r

    def offers(self, *args: str) -> list[dict[str, Any]]:
        r = self.gpum("user", "--output", "json", "offers", "--market", str(self.market),
                      "--limit", "0", *args)  # fmt: skip
        return json.loads(r.stdout)

    def names(self, rows: list[dict[str, Any]]) -> list[str]:
        by_key = {str(v): k for k, v in self.providers.items()}
        return [by_key[r["provider"]] for r in rows]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory,
          market_factory: Callable[..., Market]) -> Iterator[World]:
    health = JsonServer(lambda path, body: (404, {"error": "no such endpoint"}),
                        lambda path: (200, {"ok": True}) if path == "/v1/health"
                        else (404, {"error": "no such endpoint"}))  # fmt: skip
    try:
        yield _world(tmp_path_factory, market_factory, health.url)
    finally:
        health.close()


def _world(tmp_path_factory: pytest.TempPathFactory, market_factory: Callable[..., Market],
           worker_url: str) -> World:  # fmt: skip
    owners = [f"owner{n}" for n in PROVIDERS]
    m = market_factory(tmp_path_factory.mktemp("offers"), ["user", "validator", *owners], {
        "window_seconds": WINDOW, "max_missed_windows": 2, "unbonding_seconds": 0,
        "min_stake_per_gpu": MIN_STAKE_PER_GPU, "validator_min_bond": 100},
        stake={n: 10_000 * 10**DECIMALS for n in ["validator", *owners]},
        payment={"user": 1_000 * 10**DECIMALS})
    url, client, kps, keys, market = m.url, m.client, m.kps, m.keys, m.address
    world = World(url, client, keys, market, {}, kps["validator"].pubkey())
    world.gpum("validator", "validator", "register", "--market", str(market), "--endpoint",
               "http://127.0.0.1:9", "--bond", "500")
    for name, p in PROVIDERS.items():
        owner = f"owner{name}"
        extra = ["--endpoint", worker_url] if "endpoint" in p else []
        world.gpum(owner, "provider", "register", "--market", str(market), "--worker-key",
                   str(Keypair().pubkey()), "--gpu-model", p["model"], "--gpu-count",
                   str(p["gpus"]), "--vram-mib", str(p["vram"]), "--region", p["region"],
                   "--price", p["price"], *extra)  # fmt: skip
        if p["stake"] is not None:
            world.gpum(owner, "provider", "stake", "--market", str(market), p["stake"])
        world.providers[name] = pda.provider_pda(market, kps[owner].pubkey())
    world.gpum("ownerC", "provider", "update", "--market", str(market), "--not-accepting-jobs")
    # D: a job holds both GPUs (Open jobs hold theirs).
    _create_job(world, "D", 1, gpus=2)
    # F: a job it accepts and then stops proving: expired, it books a failure and missed windows.
    job = _create_job(world, "F", 2, gpus=1)
    world.gpum("ownerF", "job", "accept", str(job))
    j = client.fetch_job(job)
    warp_time(url, j.expirable_after - client.chain_time() + 1)
    world.gpum("user", "job", "expire", str(job))
    assert client.fetch_job(job).status == "failed"
    return world


def _create_job(world: World, name: str, job_id: int, gpus: int) -> Pubkey:
    r = world.gpum("user", "--output", "json", "job", "create", "--market", str(world.market),
                   "--provider", str(world.providers[name]), "--gpu-count", str(gpus),
                   "--deposit", "1", "--job-id", str(job_id), "--committee", str(world.validator),
                   "--quorum", "1")  # fmt: skip
    return Pubkey.from_string(json.loads(r.stdout.strip().splitlines()[-1])["job"])


def _effective_price(view: Any) -> Fraction:
    score = offer_score(view)
    return Fraction(view.price_per_gpu_second) / (Fraction(1, 2) + Fraction(score) / 2)


# ----------------------------------------------------------------------------- scenarios


def test_the_chain_is_as_the_table_says(world: World) -> None:
    c = world.client
    views = {n: c.fetch_provider(k) for n, k in world.providers.items()}
    assert views["C"].status == "paused"
    assert views["D"].gpus_in_use == 2 and views["D"].free_gpus == 0
    assert views["E"].stake == 0
    assert views["B"].stake == 250 * 10**DECIMALS  # backs 2 of its 4 GPUs
    rep = views["F"].reputation
    assert rep.jobs_failed == 1 and rep.windows_missed >= 6 and views["F"].gpus_in_use == 0


def test_offers_are_the_active_providers_with_gpus_a_job_can_take(world: World) -> None:
    rows = world.offers()
    assert sorted(world.names(rows)) == ["A", "B", "F"]
    c = world.client
    for row in rows:
        v = c.fetch_provider(Pubkey.from_string(row["provider"]))
        stake_backed = v.stake // MIN_STAKE_PER_GPU - v.gpus_in_use
        assert row == {
            "provider": str(v.address), "owner": str(v.owner), "worker_key": str(v.worker_key),
            "gpu_model": v.spec.gpu_model, "gpus_free": min(v.free_gpus, stake_backed),
            "gpus_total": v.spec.gpu_count, "vram_mib": v.spec.vram_mib,
            "vram_gib": v.spec.vram_mib / 1024, "region": v.spec.region,
            "price_per_gpu_second": format_ui_amount(v.price_per_gpu_second, DECIMALS),
            "price_per_gpu_hour": format_ui_amount(v.price_per_gpu_second * 3600, DECIMALS),
            "stake": format_ui_amount(v.stake, DECIMALS),
            "score": offer_score(v), "hardware": "unverified", "verified": False, "badge": False,
            "rating": None, "ratings": 0,
            "verified_hours": v.reputation.verified_seconds / 3600,
            "jobs_completed": v.reputation.jobs_completed,
            "jobs_failed": v.reputation.jobs_failed, "slashes": v.reputation.slashes,
            "jailed": False, "workloads": v.endpoint != "", "endpoint": v.endpoint,
            "online": True if v.endpoint else None, "checked_at": row["checked_at"],
            "cluster": False if v.endpoint else None,  # these workers serve no cluster nodes
            "last_seen": row["checked_at"] if v.endpoint else None, "liveness_error": "",
        }  # fmt: skip
        assert isinstance(row["checked_at"], int)
    by_name = dict(zip(world.names(rows), rows))
    assert by_name["A"]["gpus_free"] == 8 and by_name["A"]["price_per_gpu_hour"] == "3.6"
    assert by_name["B"]["gpus_free"] == 2 and by_name["B"]["gpus_total"] == 4
    assert by_name["A"]["score"] == by_name["B"]["score"] == 0.3  # unverified, unrated
    assert 0 < by_name["F"]["score"] < 0.3
    assert by_name["A"]["workloads"] is True and by_name["B"]["workloads"] is False
    # the default order is the rank: effective price ascending
    views = [c.fetch_provider(Pubkey.from_string(r["provider"])) for r in rows]
    assert [_effective_price(v) for v in views] == sorted(_effective_price(v) for v in views)
    assert world.names(rows) == ["B", "F", "A"]


@pytest.mark.parametrize("query, expected", [
    (["gpu_model=h100"], ["F", "A"]),
    (["gpu_model=H100", "gpus>=4"], ["A"]),
    (['gpu_model="h100 nvl"'], ["F"]),
    (["gpu_model=H100_80GB"], ["A"]),
    (["gpu_model", "notin", "[h100]"], ["B"]),
    (["region", "in", "us-west,eu-west"], ["B", "F", "A"]),
    (["region=eu-west"], ["B"]),
    (["region", "notin", "[us-west]"], ["B"]),
    (["price<=1.8"], ["B", "F"]),
    (["price=1.44"], ["F"]),
    (["price>1.8"], ["A"]),
    (["stake<1000"], ["B"]),
    (["stake>=1000", "gpus", "<", "8"], ["F"]),
    (["vram>=80"], ["F", "A"]),
    (["vram=40"], ["B"]),
    (["gpus_total>=4"], ["B", "A"]),
    (["gpus", "in", "[2]"], ["B", "F"]),
    (["score<0.3"], ["F"]),
    (["score>=0.3"], ["B", "A"]),
    (["verified=false", "rating!=5", "ratings=0"], ["B", "F", "A"]),
    (["verified"], []),
    (["jobs_failed>=1"], ["F"]),
    (["jobs_completed=0", "slashes=0"], ["B", "F", "A"]),
    (["verified_hours=0"], ["B", "F", "A"]),
    (["workloads=true"], ["A"]),
    (["workloads!=true", "region=us-west"], ["F"]),
])  # fmt: skip
def test_queries(world: World, query: list[str], expected: list[str]) -> None:
    assert world.names(world.offers(*query)) == expected


@pytest.mark.parametrize("sort, expected", [
    ("rank", ["B", "F", "A"]),
    ("rank-", ["A", "F", "B"]),
    ("price", ["F", "B", "A"]),
    ("price-", ["A", "B", "F"]),
    ("score-", ["B", "A", "F"]),  # A and B tie at 0.3: rank order
    ("score", ["F", "B", "A"]),
    ("gpus-", ["A", "B", "F"]),  # B and F tie at 2: rank order
    ("stake", ["B", "F", "A"]),
    ("region", ["B", "F", "A"]),
    ("vram-", ["F", "A", "B"]),
    ("workloads-", ["A", "B", "F"]),
])  # fmt: skip
def test_sorts(world: World, sort: str, expected: list[str]) -> None:
    assert world.names(world.offers("--sort", sort)) == expected


def test_limit_and_text_table(world: World) -> None:
    r = world.gpum("user", "--output", "json", "offers", "--market", str(world.market),
                   "--limit", "2", "--sort", "price")  # fmt: skip
    assert world.names(json.loads(r.stdout)) == ["F", "B"]
    r = world.gpum("user", "offers", "--market", str(world.market), "--limit", "2")
    lines = r.stdout.splitlines()
    assert lines[0].startswith("PROVIDER") and "PRICE/GPU-H" in lines[0]
    assert lines[0].split()[-4:] == ["ONLINE", "CLUSTER", "LAST", "SEEN"]
    assert lines[1].split()[0] == str(world.providers["B"])
    assert lines[1].split()[-10:] == ["eu-west", "1.8", "250", "0.30", "no", "-", "no", "-", "-",
                                      "-"]  # fmt: skip
    assert lines[2].split()[0] == str(world.providers["F"])
    assert lines[3] == "... 1 more offer(s): raise --limit (0 = all)"
    r = world.gpum("user", "offers", "--market", str(world.market), "online")
    (row,) = r.stdout.splitlines()[1:]
    assert row.split()[0] == str(world.providers["A"]) and row.split()[-3:] == ["yes", "no", "now"]


def test_no_offer_says_which_clause_removed_them(world: World) -> None:
    r = world.gpum("user", "offers", "--market", str(world.market), "gpus>=4", "region=eu-west")
    assert r.stdout.strip() == ("no offer matches `gpus>=4 region=eu-west`: 3 offer(s) before "
                                "filtering; gpus>=4 keeps 1; region=eu-west keeps 1")  # fmt: skip
    assert world.offers("gpus>=16") == []


def test_bad_query_is_one_line_and_exit_2(world: World) -> None:
    r = world.gpum("user", "offers", "--market", str(world.market), "gpu=H100", ok=False)
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: ") and "unknown field 'gpu'" in line and "did you mean gpus" in line


def test_sdk_list_offers_and_best_offer_agree_with_the_cli(world: World) -> None:
    offers = list_offers(world.client, world.market)
    assert [str(o.provider) for o in offers] == [r["provider"] for r in world.offers()]
    full = list_offers(world.client, world.market, include_full=True)
    by_key = {o.provider: o for o in full}
    assert set(by_key) == {world.providers[n] for n in "ABDEF"}  # C is paused
    assert by_key[world.providers["D"]].gpus_free == 0
    assert by_key[world.providers["E"]].gpus_free == 0
    assert best_offer(offers, gpus=1).provider == world.providers["B"]
    assert best_offer(offers, gpus=3).provider == world.providers["A"]
    assert best_offer(offers, gpus=1, gpu_model="h100").provider == world.providers["F"]
    assert best_offer(offers, gpus=1, needs_workloads=True).provider == world.providers["A"]
    assert best_offer(offers, gpus=1, max_price_per_gpu_second=450).provider == world.providers["F"]
    assert best_offer(offers, gpus=1, max_price_per_gpu_second=399) is None
    assert best_offer(offers, gpus=9) is None
