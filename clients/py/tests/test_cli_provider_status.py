"""``gpum provider status``: whether a new job can rent the provider and, when not, why (each
rule of ``create_job``, plus a worker that would never start one), its rentable GPUs, price per
GPU-hour, earnings and the unbonding release date. Chain reads are answered locally; the
worker's ``/v1/health`` by a stub HTTP server."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from gpu_market.accounts import GpuSpec, ProviderView, Reputation, RetiredWorkerKey, Unbonding
from gpu_market.processes import JsonServer, free_port
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from test_cli import CHAIN_NOW, MARKET, PARAMS, fake_job, fake_market, offline, run

TOKEN = 1_000_000  # 6 decimals
WORKER = Keypair().pubkey()


@pytest.fixture
def worker():
    """A worker answering /v1/health as ``WORKER`` (``named`` changes the key it names)."""
    state = {"named": str(WORKER)}
    server = JsonServer(lambda path, body: (404, {}),
                        lambda path: (200, {"ok": True, "worker": state["named"]}))
    server.state = state
    yield server
    server.close()


def provider(endpoint: str, **changes) -> ProviderView:
    empty = RetiredWorkerKey(Pubkey.default(), 0)
    view = ProviderView(
        market=Pubkey.from_string(MARKET), owner=Pubkey.new_unique(), worker_key=WORKER,
        worker_key_expires_at=0, retired_keys=(empty,) * 4, last_equivocation_slash_at=0,
        spec=GpuSpec("NVIDIA H100 80GB HBM3", 2, 81559, "eu-west"), price_per_gpu_second=500,
        status="active", stake=2 * TOKEN, unbonding=Unbonding(TOKEN, CHAIN_NOW + 3600),
        gpus_in_use=0, reputation=Reputation(7200, 0, 3, 1, 0), bump=255, endpoint=endpoint,
        address=Pubkey.new_unique())  # fmt: skip
    return replace(view, **changes)


@pytest.fixture
def chain(monkeypatch):
    """``chain["provider"]`` and ``chain["market"]`` are what the CLI reads."""
    from gpu_market.client import GpuMarketClient

    offline(monkeypatch)
    state = {"market": replace(fake_market(), params=replace(PARAMS, min_stake_per_gpu=TOKEN)),
             "jobs": [replace(fake_job(), paid_provider=1_800_000)]}  # fmt: skip
    monkeypatch.setattr(GpuMarketClient, "fetch_market", lambda self, m: state["market"])
    monkeypatch.setattr(GpuMarketClient, "fetch_provider", lambda self, p: state["provider"])
    monkeypatch.setattr(GpuMarketClient, "token_balance", lambda self, a: 5 * TOKEN)
    monkeypatch.setattr(GpuMarketClient, "list_jobs", lambda self, **kw: state["jobs"])
    return state


def status(output: str = "json") -> tuple[int, str, str]:
    owner = str(Pubkey.new_unique())
    return run(["--output", output, "provider", "status", "--market", MARKET, "--owner", owner])


def test_a_healthy_provider_is_rentable_with_its_earnings_and_unbonding_date(chain, worker):
    chain["provider"] = provider(worker.url)
    code, out, err = status()
    assert (code, err) == (0, "")
    d = json.loads(out)
    assert (d["rentable"], d["why_not_rentable"], d["rentable_gpus"]) == ("yes", [], 2)
    assert d["price_per_gpu_hour"] == "1.8" and d["price_per_gpu_second"] == 500
    assert d["worker"] == "online" and d["unbonding_release_at"] == CHAIN_NOW + 3600
    assert (d["earned_by_jobs_not_closed"], d["payment_account_balance"]) == (1_800_000, 5 * TOKEN)
    code, out, err = status("text")
    assert code == 0
    assert "rentable: yes" in out and "gpus: 2/2 rentable now, 0 in use" in out
    assert "price_per_gpu_hour: 1.8" in out and "per_gpu_second" not in out
    assert "unbonding_release_at: 2023-11-14 23:13:20 UTC (in 1 h)" in out
    assert "earned_by_jobs_not_closed: 1.8 (1 job(s); the chain keeps no total" in out
    assert "payment_account_balance: 5" in out


def _why(chain) -> list[str]:
    code, out, err = status()
    assert (code, err) == (0, "")
    d = json.loads(out)
    assert d["rentable"] == "no" and d["rentable_gpus"] == 0
    return d["why_not_rentable"]


def test_a_stake_slashed_below_one_gpus_minimum_says_how_much_to_stake(chain, worker):
    chain["provider"] = provider(worker.url, stake=TOKEN // 2)
    (why,) = _why(chain)
    assert "the stake 0.5 backs 0 GPU(s) at the market's min_stake_per_gpu 1" in why
    assert "`gpum provider stake 0.5` or more" in why


def test_a_stake_that_backs_only_some_gpus_limits_the_rentable_count(chain, worker):
    chain["provider"] = provider(worker.url, stake=TOKEN + TOKEN // 2)
    d = json.loads(status()[1])
    assert (d["rentable"], d["rentable_gpus"]) == ("yes", 1)
    assert "the stake 1.5 backs 1 of the 2 GPU(s)" in d["stake_note"]
    assert "`gpum provider stake 0.5`" in d["stake_note"]


def test_a_paused_market_is_said(chain, worker):
    chain["provider"] = provider(worker.url)
    chain["market"] = replace(chain["market"], paused=True)
    assert _why(chain) == ["the market is paused by its authority: no job can be created"]


def test_a_provider_not_accepting_jobs_is_told_how_to_resume(chain, worker):
    chain["provider"] = provider(worker.url, status="paused")
    (why,) = _why(chain)
    assert why == "you stopped taking jobs: `gpum provider update --accepting-jobs` resumes"


def test_a_jailed_provider_gets_the_date_it_may_return(chain, worker):
    chain["provider"] = provider(worker.url, status="jailed", jailed_until=CHAIN_NOW + 21)
    (why,) = _why(chain)
    assert "jailed after an equivocation slash until 2023-11-14 22:13:41 UTC (in 21 s)" in why
    d = json.loads(status()[1])
    assert d["jailed_until"] == CHAIN_NOW + 21
    chain["provider"] = provider(worker.url, status="jailed", jailed_until=CHAIN_NOW - 5)
    (why,) = _why(chain)
    assert "(5 s ago): `gpum provider update --accepting-jobs` returns it" in why


def test_all_gpus_in_use(chain, worker):
    chain["provider"] = provider(worker.url, gpus_in_use=2)
    assert _why(chain) == ["all 2 GPU(s) are in use"]


def test_an_expired_worker_key_accepts_no_job(chain, worker):
    chain["provider"] = provider(worker.url, worker_key_expires_at=CHAIN_NOW - 60)
    (why,) = _why(chain)
    assert "the worker key expired 2023-11-14 22:12:20 UTC (1 min ago)" in why
    assert "gpum provider rotate-key" in why


def test_a_worker_that_does_not_answer(chain):
    chain["provider"] = provider(f"http://127.0.0.1:{free_port()}")
    (why,) = _why(chain)
    assert why.startswith("the worker is offline: no answer from http://127.0.0.1:")
    assert why.endswith("a job would not start")


def test_a_worker_still_running_a_retired_key(chain, worker):
    retired = Keypair().pubkey()
    worker.state["named"] = str(retired)
    chain["provider"] = provider(worker.url)
    (why,) = _why(chain)
    assert f"is the worker {retired}, not the provider's current worker key {WORKER}" in why


def test_a_provider_without_endpoint_rents_bare_gpus(chain):
    chain["provider"] = provider("")
    d = json.loads(status()[1])
    assert d["rentable"] == "yes" and d["worker"].startswith("none (no endpoint")


def test_several_reasons_are_all_given(chain, worker):
    chain["provider"] = provider(worker.url, status="paused", gpus_in_use=2)
    chain["market"] = replace(chain["market"], paused=True)
    assert len(_why(chain)) == 3
    _, out, _ = status("text")
    assert ("why_not_rentable: the market is paused by its authority: no job can be created; "
            "you stopped taking jobs") in out
