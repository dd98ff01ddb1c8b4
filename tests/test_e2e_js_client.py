"""Clients that are not ours work against the local chain: the official JavaScript stack.

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
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from gpu_market import pda, tokens
from gpu_market.processes import LocalChain
from harness import Market

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
JS = ROOT / "tests" / "js"
PRICE = 1_000
SECONDS = 4


def test_the_official_js_stack_creates_settles_and_decodes_with_our_idl(
        tmp_path: Path, localnet: LocalChain, market_factory: Callable[..., Market]) -> None:
    node = shutil.which("node")
    assert node, "node (>= 18) is required: install Node.js"
    assert (JS / "node_modules" / "@coral-xyz" / "anchor").is_dir(), \
        "the JS packages are missing: run `make js-deps` (npm ci in tests/js)"
    assert f"pubsub={localnet.pubsub}" in localnet.ready, localnet.ready
    m = market_factory(tmp_path, ["owner", "user", "worker", "validator"], {
        "window_seconds": 2, "max_missed_windows": 2, "fee_bps": 1000, "burn_bps": 5000,
        "min_stake_per_gpu": 100, "validator_min_bond": 100, "unbonding_seconds": 0},
        stake={"owner": 1_000_000, "validator": 1_000_000}, payment={"user": 10_000_000})
    client, url, market, payment_mint = m.client, m.url, m.address, m.payment_mint
    owner, user, worker, validator = (m.kps[n] for n in ("owner", "user", "worker", "validator"))
    user_pay = m.payment_account("user")
    client.register_provider(owner, worker.pubkey(), {"gpu_model": "Simulated H100",
                             "gpu_count": 2, "vram_mib": 81920}, PRICE, market)
    client.stake(owner, market, 10_000)
    client.register_validator(validator, market, 500, "http://127.0.0.1:9")
    provider = pda.provider_pda(market, owner.pubkey())
    config = {
        "idl": str(ROOT / "idl" / "gpu_market.json"), "rpc": url, "ws": localnet.pubsub,
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
    assert run.returncode == 0, f"{run.stderr}\n{localnet.tail(30)}"
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
