"""Clients that are not ours work against the local chain (issue 11, part 5).

``tests/js/settle_flow.mjs`` drives ``gpum-localnet`` with the official JavaScript stack from
npm (``@solana/web3.js`` 1.x, ``@coral-xyz/anchor`` 0.32) reading ``idl/gpu_market.json``
unmodified: it creates a job, has the worker accept it, settles a receipt whose Ed25519
instruction web3.js's ``Ed25519Program`` built, and decodes the accounts and events; every
transaction is confirmed through ``sendAndConfirmTransaction``, i.e. the chain's PubSub
(``signatureSubscribe`` on the RPC port + 1). This test sets up the market with the Python SDK,
runs the script (``make test`` installs its packages with ``npm ci``) and checks what it
printed against the chain as the Python SDK reads it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from gpu_market import pda, tokens
from gpu_market.client import GpuMarketClient
from gpu_market.demo import Processes, free_port_pair, localnet_binary, wait_for_line
from solders.keypair import Keypair

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
JS = ROOT / "tests" / "js"
PRICE = 1_000
SECONDS = 4



def test_the_official_js_stack_creates_settles_and_decodes_with_our_idl(tmp_path: Path) -> None:
    assert os.environ.get("GPUM_LOCALNET_BIN"), "run through `make test` (builds gpum-localnet)"
    node = shutil.which("node")
    assert node, "node (>= 18) is required: install Node.js"
    assert (JS / "node_modules" / "@coral-xyz" / "anchor").is_dir(), \
        "the JS packages are missing: run `make js-deps` (npm ci in tests/js)"
    procs = Processes(tmp_path)
    client = None
    try:
        port = free_port_pair()
        chain = procs.start("localnet", [localnet_binary(), "--port", str(port)])
        ready = wait_for_line(chain, tmp_path / "localnet.log", "ready on", timeout=60)
        assert f"pubsub=ws://127.0.0.1:{port + 1}" in ready, ready
        url = f"http://127.0.0.1:{port}"
        admin, owner, user, worker, validator = (Keypair() for _ in range(5))
        client = GpuMarketClient(url, payer=admin)
        for kp in (admin, owner, user, worker, validator):
            client.airdrop(kp.pubkey(), 10 * 10**9)
        stake_mint = tokens.create_mint(client, admin, 6)
        payment_mint = tokens.create_mint(client, admin, 6)
        for kp in (owner, validator):
            tokens.mint_to(client, stake_mint, tokens.create_ata(client, admin, kp.pubkey(), stake_mint),
                           admin, 1_000_000)
        user_pay = tokens.create_ata(client, admin, user.pubkey(), payment_mint)
        tokens.mint_to(client, payment_mint, user_pay, admin, 10_000_000)
        treasury = tokens.create_ata(client, admin, admin.pubkey(), payment_mint)
        client.initialize_market(admin, 0, stake_mint, payment_mint, treasury, {
            "window_seconds": 2, "max_missed_windows": 2, "fee_bps": 1000, "burn_bps": 5000,
            "min_stake_per_gpu": 100, "validator_min_bond": 100, "unbonding_seconds": 0})
        market = pda.market_pda(admin.pubkey(), 0)
        client.register_provider(owner, worker.pubkey(), {"gpu_model": "Simulated H100",
                                 "gpu_count": 2, "vram_mib": 81920}, PRICE, market)
        client.stake(owner, market, 10_000)
        client.register_validator(validator, market, 500, "http://127.0.0.1:9")
        provider = pda.provider_pda(market, owner.pubkey())
        config = {
            "idl": str(ROOT / "idl" / "gpu_market.json"), "rpc": url, "ws": f"ws://127.0.0.1:{port + 1}",
            "programId": str(client.program_id), "market": str(market), "provider": str(provider),
            "paymentMint": str(payment_mint), "userPayment": str(user_pay),
            "providerPayment": str(tokens.ata(owner.pubkey(), payment_mint)),
            "feeVault": str(client.fetch_market(market).fee_vault),
            "user": list(bytes(user)), "worker": list(bytes(worker)), "validator": list(bytes(validator)),
            "jobId": 7, "deposit": 1_000_000, "maxPrice": PRICE, "billSeconds": SECONDS,
        }
        (tmp_path / "config.json").write_text(json.dumps(config))
        run = subprocess.run([node, str(JS / "settle_flow.mjs"), str(tmp_path / "config.json")],
                             capture_output=True, text=True, timeout=180, cwd=JS, check=False)
        assert run.returncode == 0, f"{run.stderr}\n{procs.tail('localnet', 30)}"
        out = json.loads(run.stdout.strip().splitlines()[-1])

        # What the JS stack decoded is what the Python SDK reads from the chain.
        job = pda.job_pda(market, user.pubkey(), 7)
        assert out["job"] == str(job)
        j = client.fetch_job(job)
        assert (j.status, j.paid_seconds, j.claimed_seconds, j.last_seq) == ("running", SECONDS, SECONDS, 1)
        assert out["job_account"] == {
            "status": "running", "paid_seconds": SECONDS, "claimed_seconds": SECONDS, "last_seq": 1,
            "paid_provider": str(j.paid_provider), "deposited": "1000000", "committee_len": 1,
            "workload_hash": "00" * 32}
        assert out["started_at"] == j.started_at
        totals = client.fetch_market(market).totals
        assert out["market_account"] == {"fees": str(totals.fees), "burned": str(totals.burned)}
        # Events decoded with the IDL's event layouts.
        (created,) = out["events"]["create_job"]
        assert created["name"] == "JobCreated"
        assert created["data"]["job"] == str(job) and created["data"]["deposit"] == "1000000"
        (accepted,) = out["events"]["accept_job"]
        assert accepted["data"]["signer"] == str(worker.pubkey())
        (settled,) = out["events"]["settle"]
        assert settled["data"]["approved_seconds"] == str(SECONDS)
        assert settled["data"]["amount"] == str(SECONDS * PRICE)
        assert settled["data"]["validator"] == str(pda.validator_pda(market, validator.pubkey()))
        # The settle the script confirmed over PubSub is on chain: the SDK decodes its events too.
        ours = client.events(out["signatures"]["settle"])
        assert [n for n, _ in ours] == ["Settled"] and ours[0][1]["approved_seconds"] == SECONDS
    finally:
        if client is not None:
            client.close()
        procs.stop_all()
