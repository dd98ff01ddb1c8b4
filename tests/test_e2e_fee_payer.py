"""A wallet or a worker key without SOL on the local chain: the refusal names the address to
fund ("fund ADDRESS with SOL for fees"), not the cluster's ``AccountNotFound``; nothing lands.

``gpum provider register`` from a wallet that never held SOL, and a provider's worker key that
never held SOL accepting an Open job (what ``gpum-worker`` does with its key)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from gpu_market import pda
from gpu_market.client import GpuMarketClient
from gpu_market.errors import InsufficientSol
from gpu_market.processes import tool, write_keypair
from harness import Market
from solders.keypair import Keypair

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory,
           market_factory: Callable[..., Market]) -> tuple[Market, Path]:
    workdir = tmp_path_factory.mktemp("fee-payer")
    m = market_factory(workdir, ["owner", "user", "validator"],
                       {"window_seconds": 2, "min_stake_per_gpu": 0, "validator_min_bond": 1},
                       stake={"validator": 10**6}, payment={"user": 10**9})
    m.client.register_validator(m.kps["validator"], m.address, 10**6, "http://127.0.0.1:9")
    return m, workdir


def test_gpum_from_a_wallet_without_sol_says_fund_it(market: tuple[Market, Path]) -> None:
    m, workdir = market
    poor = Keypair()
    key = write_keypair(workdir / "poor.json", poor)
    r = subprocess.run(
        [tool("gpum"), "--url", m.url, "--keypair", str(key), "provider", "register",
         "--market", str(m.address), "--worker-key", str(Keypair().pubkey()), "--gpu-model",
         "NVIDIA H100 80GB HBM3", "--gpu-count", "1", "--vram-mib", "81559", "--price", "3.6"],
        capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith(f"error: fund {poor.pubkey()} with SOL for fees"), r.stderr
    assert "AccountNotFound" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert m.client.fetch_provider(pda.provider_pda(m.address, poor.pubkey())) is None


def test_a_worker_key_without_sol_is_told_to_fund_itself(market: tuple[Market, Path]) -> None:
    m, _ = market
    owner, worker = m.kps["owner"], Keypair()
    m.client.register_provider(owner, worker.pubkey(), {"gpu_model": "NVIDIA L4",
                               "gpu_count": 1, "vram_mib": 23034, "region": "eu"}, 1, m.address)
    provider = pda.provider_pda(m.address, owner.pubkey())
    _, job = m.client.create_job(m.kps["user"], m.address, provider, 1, 1, 10_000,
                                 committee=[m.kps["validator"].pubkey()], quorum=1)
    worker_client = GpuMarketClient(m.url)  # as gpum-worker's: its key pays its fees
    try:
        with pytest.raises(InsufficientSol) as info:
            worker_client.accept_job(worker, job)
    finally:
        worker_client.close()
    assert info.value.address == str(worker.pubkey())
    assert str(info.value).startswith(f"fund {worker.pubkey()} with SOL for fees")
    assert m.client.fetch_job(job).status == "open"
