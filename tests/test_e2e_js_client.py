"""Clients that are not ours work against the local chain: the official JavaScript stack, and the
TypeScript client generated from our IDL.

The scripts in ``tests/js`` (``make test`` installs their packages with ``npm ci`` and builds
``clients/js``) drive ``gpum-localnet``; each test sets the market up with the Python SDK, runs
one script and checks what it printed against the chain as the Python SDK reads it:

* ``settle_flow.mjs``: ``@solana/web3.js`` 1.x and ``@coral-xyz/anchor`` 0.32 reading
  ``idl/gpu_market.json`` unmodified create a job, have the worker accept it, settle a receipt
  whose Ed25519 instruction web3.js's ``Ed25519Program`` built, and decode accounts and events;
  every transaction is confirmed through the chain's PubSub (``signatureSubscribe``).
* ``anchor_resolution.mjs``: the same stack with Anchor's account resolution: each instruction
  gets only the accounts a user chooses, the IDL's ``pda``/``relations``/``address`` give the
  rest; a failed ``has_one`` is Anchor's named error with both keys; web3.js's
  ``getParsedTransaction`` shows System and SPL Token instructions parsed.
* ``client_flow.cjs``: the generated client (Codama, ``@solana/kit``) creates a job
  with a workload and a sealed secret, names a program error, and kit reads ``jsonParsed``.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from gpu_market import pda, tokens, workload
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


def _world(tmp_path: Path, localnet: LocalChain, market_factory: Callable[..., Market]) -> tuple[Market, dict]:
    """A market with a registered, staked provider (2 GPUs) and one validator, and the config
    every script reads (the chain, the accounts, the parties' keypairs)."""
    node = shutil.which("node")
    assert node, "node (>= 20) is required: install Node.js"
    assert (JS / "node_modules" / "@solana" / "kit").is_dir(), \
        "the JS packages are missing: run `make js-deps` (npm ci in tests/js)"
    m = market_factory(tmp_path, ["owner", "user", "worker", "validator", "validator2"], {
        "window_seconds": 2, "max_missed_windows": 2, "fee_bps": 1000, "burn_bps": 5000,
        "min_stake_per_gpu": 100, "validator_min_bond": 100, "unbonding_seconds": 0},
        stake={"owner": 1_000_000, "validator": 1_000_000, "validator2": 1_000_000},
        payment={"user": 10_000_000})
    owner, worker, validator = (m.kps[n] for n in ("owner", "worker", "validator"))
    m.client.register_provider(owner, worker.pubkey(), {"gpu_model": "Simulated H100",
                               "gpu_count": 2, "vram_mib": 81920}, PRICE, m.address)
    m.client.stake(owner, m.address, 10_000)
    m.client.register_validator(validator, m.address, 500, "http://127.0.0.1:9")
    m.client.register_validator(m.kps["validator2"], m.address, 500, "http://127.0.0.1:9")
    return m, {
        "idl": str(ROOT / "idl" / "gpu_market.json"), "rpc": m.url, "ws": localnet.pubsub,
        "market": str(m.address), "provider": str(pda.provider_pda(m.address, owner.pubkey())),
        "userPayment": str(m.payment_account("user")),
        "providerPayment": str(tokens.ata(owner.pubkey(), m.payment_mint)),
        "workerKey": str(worker.pubkey()), "validatorAuthority": str(validator.pubkey()),
        **{n: list(bytes(m.kps[n])) for n in ("user", "worker", "validator", "validator2")},
        "deposit": 1_000_000, "maxPrice": PRICE, "billSeconds": SECONDS,
    }


def _run(tmp_path: Path, script: str, config: dict, localnet: LocalChain) -> dict:
    (tmp_path / "config.json").write_text(json.dumps(config))
    run = subprocess.run([shutil.which("node") or "node", str(JS / script), str(tmp_path / "config.json")],
                         capture_output=True, text=True, timeout=180, cwd=JS, check=False)
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}\n{localnet.tail(30)}"
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_anchor_ts_derives_every_account_a_user_does_not_choose(
        tmp_path: Path, localnet: LocalChain, market_factory: Callable[..., Market]) -> None:
    m, config = _world(tmp_path, localnet, market_factory)
    user, worker, validator = (m.kps[n] for n in ("user", "worker", "validator"))
    out = _run(tmp_path, "anchor_resolution.mjs", {**config, "jobId": 11, "topUp": 5_000}, localnet)

    job = pda.job_pda(m.address, user.pubkey(), 11)
    market = m.client.fetch_market(m.address)
    provider = config["provider"]
    # What Anchor derived from the IDL is what the SDK derives.
    assert out["resolved"]["create_job"] == {
        "user": str(user.pubkey()), "market": str(m.address), "provider": provider, "job": str(job),
        "escrow": str(pda.escrow_pda(job)), "paymentMint": str(m.payment_mint),
        "userPaymentAccount": config["userPayment"],
        "tokenProgram": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA",
        "systemProgram": "11111111111111111111111111111111"}
    assert out["resolved"]["top_up"]["user"] == str(user.pubkey())
    assert out["resolved"]["top_up"]["market"] == str(m.address)
    assert out["resolved"]["settle"] == {
        "validatorAuthority": str(validator.pubkey()), "market": str(m.address),
        "validator": str(pda.validator_pda(m.address, validator.pubkey())), "provider": provider,
        "job": str(job), "escrow": str(pda.escrow_pda(job)),
        "providerPaymentAccount": config["providerPayment"], "feeVault": str(market.fee_vault),
        "paymentMint": str(m.payment_mint), "instructions": "Sysvar1nstructions1111111111111111111111111",
        "tokenProgram": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"}
    # ... and the instructions it built landed.
    j = m.client.fetch_job(job)
    assert (j.status, j.paid_seconds, j.deposited) == ("running", SECONDS, 1_005_000)
    assert out["job_account"] == {"paid_seconds": SECONDS, "deposited": "1005000"}

    # The failed has_one is Anchor's named error with the two keys it compared (the chain logs
    # them; Anchor's parser throws a TypeError where they are missing).
    has_one = out["has_one"]
    assert has_one["error"] == "AnchorError", has_one
    assert (has_one["code"], has_one["origin"], has_one["compared"]) == (
        "NotMarketAuthority", "market", [str(m.admin.pubkey()), str(user.pubkey())])
    assert has_one["number"] >= 6000

    # web3.js's getParsedTransaction: System and SPL Token instructions parsed, as from Agave.
    assert out["parsed_transfer"] == {"program": "system", "type": "transfer", "info": {
        "source": str(user.pubkey()), "destination": str(worker.pubkey()), "lamports": 12345}}
    assert "system:createAccount" in out["parsed_create_inner"]
    assert "spl-token:initializeAccount3" in out["parsed_create_inner"]
    assert any(i in out["parsed_create_inner"] for i in ("spl-token:transferChecked", "spl-token:transfer"))


def test_the_generated_client_creates_a_job_with_a_workload(
        tmp_path: Path, localnet: LocalChain, market_factory: Callable[..., Market]) -> None:
    assert (ROOT / "clients" / "js" / "dist" / "index.js").is_file(), \
        "the TypeScript client is not built: run `make js-client`"
    m, config = _world(tmp_path, localnet, market_factory)
    user, owner, worker = (m.kps[n] for n in ("user", "owner", "worker"))
    out = _run(tmp_path, "client_flow.cjs", {**config, "jobId": 21}, localnet)

    job = pda.job_pda(m.address, user.pubkey(), 21)
    assert out["job"] == str(job)
    j = m.client.fetch_job(job)
    # The workload hash the TS client computed is the Python SDK's for the same spec, and the
    # secret it sealed opens with the worker's key.
    spec = workload.spec_from_json(out["spec_json"])
    assert j.workload_hash == workload.spec_hash(spec)
    (_, sealed), = spec.secret_env
    assert workload.open_secret(bytes(worker)[:32], base64.b64decode(sealed)) == b"hf_secret"
    assert out["job_account"] == {
        "status": "Open", "deposited": "1000000", "committee_len": 2,
        "workload_hash": j.workload_hash.hex(), "user": str(user.pubkey()),
        "provider": str(pda.provider_pda(m.address, owner.pubkey()))}
    # The quorum settle: the worker's receipt signature (over the 32-byte digest) and the second
    # member's attestation (all 40 bytes) in one Ed25519 instruction the client built.
    assert out["ed25519_entries"] == [32, 40]
    assert out["settled"] == {"paid_seconds": str(SECONDS), "last_seq": "1"}
    assert (j.status, j.paid_seconds, j.last_seq, j.deposited) == ("running", SECONDS, 1, 1_000_000)
    assert [n for n, _ in m.client.events(out["settle_signature"])] == ["Settled"]
    # The program's error, named by the generated client.
    assert out["price_error"]["is_price_above_limit"] is True
    assert "price" in out["price_error"]["message"].lower()
    # kit's jsonParsed reads.
    assert "system:createAccount" in out["parsed_inner"]
    assert "spl-token:initializeAccount3" in out["parsed_inner"]
    assert out["parsed_account"] == {"program": "spl-token", "type": "account", "owner": str(user.pubkey())}
