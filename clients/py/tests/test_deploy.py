"""``gpu_market.deploy`` and ``Deployment`` (gpu_market.deployment) offline, against the chain and
worker that test_cli_run answers locally: the one call rents the best live offer and returns
the endpoint; every refusal is a DeployError naming the SDK's parameters; a job that cannot
run is cancelled; the defaults (market, keypair, url) resolve as the CLI's do."""

from __future__ import annotations

import json
from dataclasses import replace

import gpu_market
import pytest
from gpu_market.deployment import Hooks, parse_gpu
from gpu_market.offers import Liveness
from gpu_market.workload_api import WorkerApiError
from solders.pubkey import Pubkey
from test_cli_run import (
    DOWN,
    JOB,
    MARKET,
    MEMBERS,
    NOW,
    USER,
    chain,
    job,
    no_waiting,
    worker,
)

__all__ = ["chain", "no_waiting", "worker"]  # fixtures used here


def probe(offers, left):
    return {o.provider: Liveness(DOWN.get(o.provider) is None, NOW, DOWN.get(o.provider, ""))
            for o in offers}  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.t, self.sleeps = 0.0, []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s


def deploy(**kw):
    clock = Clock()
    args = {"gpu": "H100:2", "image": "b:1", "ports": [8080], "hours": 1.5, "keypair": USER,
            "market": MARKET, "url": "localnet", "timeout": 40,
            "hooks": Hooks(sleep=clock.sleep, monotonic=lambda: clock.t, probe=probe), **kw}  # fmt: skip
    return gpu_market.deploy(**args)


RUNNING = {"state": "running", "ports": [{"host": "203.0.113.5", "host_port": 40123,
                                          "port": 8080, "protocol": "tcp"}]}  # fmt: skip


def test_deploy_rents_the_best_live_offer_and_returns_its_endpoint(chain, worker) -> None:
    chain.jobs = [job("open"), job("running")]
    worker.states = [{"state": "starting"}, RUNNING]
    d = deploy()
    assert isinstance(d, gpu_market.Deployment)
    assert d.job == JOB and d.endpoint == "203.0.113.5:40123"
    assert d.endpoints == ["203.0.113.5:40123"] and d.ports == ["203.0.113.5:40123 -> 8080/tcp"]
    (name, p, gpus, deposit, kw), = chain.calls
    # provider 1 (1,000 per GPU-second, alive), 2 GPUs, 1.5 h; the default committee, a majority
    assert (name, p, gpus, deposit) == ("create_job", Pubkey(bytes([1] * 32)), 2, 10_800_000)
    assert kw["committee"] == MEMBERS[:3] and kw["quorum"] == 2
    assert kw["max_price_per_gpu_second"] == 1_000
    (delivered, spec), = worker.delivered
    assert delivered == JOB and spec.image == "b:1" and [p.port for p in spec.ports] == [8080]
    d.close()


def test_deploy_and_gpum_run_share_one_flow(chain, worker) -> None:
    """The CLI's run module holds no copy of the flow: its pieces are the SDK's."""
    from gpu_market import deployment
    from gpu_market.cli import run

    assert run.parse_gpu is deployment.parse_gpu and run.parse_hours is deployment.parse_hours
    assert run.DELIVER_ATTEMPT_S is deployment.DELIVER_ATTEMPT_S
    for name in ("_deliver", "_abandon", "_wait_running", "_alive_offer", "_named_offer"):
        assert not hasattr(run, name)


@pytest.mark.parametrize("kw, needles", [
    ({"gpu": "H100"}, ["is not MODEL:COUNT"]),
    ({"gpu": "A100:1"}, ["no offer has a GPU model matching 'A100'"]),
    ({"gpu": "H100:9"}, ["the most any has is 2", "with gpu H100:2"]),
    ({"max_price": "1"}, ["above your max_price 1", "raise max_price"]),
    ({"hours": "0"}, ["positive number of hours"]),
    ({"env": {"A": "1"}, "secrets": {"A": "2"}}, ["A given both in env= and secrets="]),
    ({"timeout": 0}, ["timeout=0"]),
    ({"market": "nope"}, ["market='nope' is not a base58 account address"]),
])  # fmt: skip
def test_deploy_refuses_before_anything_is_sent(chain, worker, kw, needles) -> None:
    if kw.get("gpu") == "H100:9":
        chain.providers = [p for p in chain.providers if p.address == Pubkey(bytes([1] * 32))]
        chain.providers[0] = replace(chain.providers[0], gpus_in_use=6)
    with pytest.raises(gpu_market.DeployError) as e:
        deploy(**kw)
    for n in needles:
        assert n in str(e.value), str(e.value)
    assert "\n" not in str(e.value)
    assert chain.calls == [] and worker.delivered == []


def test_a_dead_provider_is_refused_and_no_money_moves(chain, worker) -> None:
    for p in chain.providers:
        DOWN[p.address] = "connection refused"
    with pytest.raises(gpu_market.DeployError, match="no money moved"):
        deploy()
    assert chain.calls == []


def test_an_undelivered_workload_cancels_the_job(chain, worker) -> None:
    chain.jobs = [job("open")]
    worker.deliveries = [WorkerApiError("cannot reach the provider's worker")] * 100
    with pytest.raises(gpu_market.DeployError) as e:
        deploy()
    assert "the workload was not delivered" in str(e.value) and "within timeout)" in str(e.value)
    assert f"job {JOB} cancelled: 0.1 refunded in full" in str(e.value)
    assert [c[0] for c in chain.calls] == ["create_job", "cancel_job"]


def test_the_defaults_come_from_the_environment_and_the_solana_config(monkeypatch, tmp_path, chain,
                                                                      worker) -> None:  # fmt: skip
    key = tmp_path / "me.json"
    key.write_text(json.dumps(list(bytes(USER))))
    config = tmp_path / "config.yml"
    config.write_text(f"json_rpc_url: http://127.0.0.1:1\nkeypair_path: {key}\n")
    monkeypatch.setenv("GPUM_SOLANA_CONFIG", str(config))
    with pytest.raises(gpu_market.DeployError, match="pass market=ADDRESS or set GPUM_MARKET"):
        deploy(market=None, keypair=None, url=None)
    monkeypatch.setenv("GPUM_MARKET", str(MARKET))
    chain.jobs = [job("running")]
    worker.states = [RUNNING]
    d = deploy(market=None, keypair=None, url=None)
    assert d.client.url == "http://127.0.0.1:1" and d.keypair.pubkey() == USER.pubkey()
    d.close()
    with pytest.raises(gpu_market.DeployError, match="keypair file .* not found"):
        deploy(keypair=str(tmp_path / "missing.json"))


def test_cancel_refuses_a_running_job(chain, worker) -> None:
    chain.jobs = [job("running")]
    worker.states = [RUNNING]
    d = deploy()
    with pytest.raises(gpu_market.DeployError, match="use stop"):
        d.cancel()
    d.close()


def test_parse_gpu() -> None:
    assert parse_gpu("RTX 4090:2") == ("RTX 4090", 2)
    with pytest.raises(ValueError, match="1..256"):
        parse_gpu("H100:0")
