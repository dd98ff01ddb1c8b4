"""The public API of ``gpu_market`` is pinned: changing it is a docs/sdk-api.md change."""

from __future__ import annotations

import inspect

import gpu_market
from gpu_market import client, pda

EXPECTED = [
    "PROGRAM_ID", "DEFAULT_MARKET_PARAMS", "AccountNotFound", "Attestation", "ChainError",
    "ConfirmationTimeout", "GpuMarketClient", "GpuMarketError", "InvalidAccount", "JobView",
    "MarketView", "ProviderView", "RpcUnavailable", "SdkError", "SettleItem",
    "TransactionTooLarge", "ValidatorView", "deploy", "Deployment", "DeployError",
    "create_cluster", "open_cluster", "Cluster", "ClusterError",
]  # fmt: skip


def test_all_is_pinned():
    assert sorted(gpu_market.__all__) == sorted(EXPECTED)
    for name in EXPECTED:
        assert getattr(gpu_market, name) is not None


def test_program_id():
    assert str(gpu_market.PROGRAM_ID) == "9mfnJ96kQ4APyqVvPKsBwVLCnwWwrSrGtkXZMyDspnkg"


def test_documented_client_signatures():
    """Names and parameter order of docs/sdk-api.md."""
    sig = {n: list(inspect.signature(getattr(client.GpuMarketClient, n)).parameters)[1:]
           for n in dir(client.GpuMarketClient) if not n.startswith("_")}  # fmt: skip
    assert list(inspect.signature(client.GpuMarketClient).parameters)[:4] == [
        "url", "payer", "program_id", "commitment"
    ]  # fmt: skip
    assert sig["fetch_market"] == ["market"] and sig["fetch_job"] == ["job"]
    assert sig["fetch_provider"] == ["provider"] and sig["fetch_validator"] == ["validator"]
    assert sig["list_jobs"][:3] == ["provider", "user", "statuses"]
    assert sig["token_balance"] == ["account"] and sig["mint_supply"] == ["mint"]
    assert sig["mint_decimals"] == ["mint"] and sig["events"] == ["signature"]
    assert sig["initialize_market"] == ["authority", "market_id", "stake_mint", "payment_mint",
                                        "treasury", "params"]  # fmt: skip
    assert sig["register_provider"] == ["owner", "worker_key", "spec", "price_per_gpu_second",
                                        "market", "worker_key_expires_at", "endpoint"]  # fmt: skip
    assert sig["stake"] == ["owner", "market", "amount"]
    assert sig["register_validator"] == ["authority", "market", "bond", "endpoint"]
    assert sig["create_job"] == ["user", "market", "provider", "job_id", "gpu_count", "deposit",
                                 "committee", "quorum", "max_price_per_gpu_second",
                                 "workload_hash"]  # fmt: skip
    create = inspect.signature(client.GpuMarketClient.create_job).parameters
    assert all(create[n].kind is inspect.Parameter.KEYWORD_ONLY
               for n in ("committee", "quorum", "max_price_per_gpu_second"))  # fmt: skip
    assert sig["accept_job"] == ["signer", "job"] and sig["finish_job"] == ["signer", "job"]
    assert sig["close_job"] == ["user", "job"]
    assert sig["settle"] == ["validator_authority", "items"]
    # docs/sdk-api.md, "Job terms, job endings, treasury and parameter announcements"
    assert sig["decline_job"] == ["signer", "job"] and sig["cancel_job"] == ["user", "job"]
    assert sig["expire_job"] == ["caller", "job"] and sig["complete_job"] == ["caller", "job"]
    assert sig["set_treasury"] == ["authority", "market", "treasury"]
    assert sig["sweep_vault"] == ["caller", "market", "destination"]
    assert sig["vault_surplus"] == ["market"] and sig["treasury_owner"] == ["market"]
    # the fee vault (docs/sdk-api.md, "Fee vault and price limit")
    assert sig["withdraw_fees"] == ["caller", "market"] and sig["fees_to_withdraw"] == ["market"]
    assert sig["update_params"] == ["authority", "market", "params"]
    assert sig["chain_time"] == [] and sig["min_deposit"] == ["market", "provider", "gpu_count"]
    assert sig["max_settle_items_per_tx"] == ["quorum"]
    fields = list(inspect.signature(client.SettleItem).parameters)
    assert fields == ["job", "seq", "cumulative_seconds", "window_end", "proof_hash",
                      "worker_key", "receipt_signature", "approved_seconds", "attestations"]  # fmt: skip
    assert list(inspect.signature(client.Attestation).parameters) == ["authority", "signature"]
    # the validator network (docs/sdk-api.md, "Validator network"; shared with validator/worker)
    assert sig["update_validator"] == ["authority", "market", "endpoint"]
    assert sig["claim_validator_rewards"] == ["authority", "market"]
    assert sig["replace_committee_member"] == ["user", "job", "index", "new_authority"]
    assert sig["slash_downtime"] == ["validator_authority", "job", "reporter_stake_account",
                                     "others", "last_proof_window_end"]  # fmt: skip
    assert sig["build_slash_downtime_tx"][:4] == ["validator_authority", "job", "others",
                                                 "last_proof_window_end"]  # fmt: skip
    assert sig["slash_downtime_message"][:4] == sig["build_slash_downtime_tx"][:4]
    assert sig["send_presigned"] == ["tx"]
    assert sig["slash_validator_equivocation"] == [
        "reporter", "job", "validator_authority", "first", "first_approved", "first_signature",
        "second", "second_approved", "second_signature", "reporter_stake_account"]  # fmt: skip
    assert sig["default_committee"][:3] == ["market", "size", "health_timeout"]
    assert sig["fetch_validator_by_authority"] == ["market", "authority"]
    assert sig["list_validators"] == ["market", "statuses"]
    from gpu_market import receipt

    assert list(inspect.signature(receipt.attestation_message).parameters) == [
        "receipt_message", "approved_seconds"]  # fmt: skip
    assert callable(receipt.attestation_signature)
    for name in ("market_pda", "stake_vault_pda", "provider_pda", "validator_pda", "job_pda",
                 "escrow_pda", "fee_vault_pda", "market_pda_and_bump", "job_pda_and_bump",
                 "validator_equivocation_pda"):  # fmt: skip
        assert callable(getattr(pda, name))


def test_import_is_lazy():
    import subprocess
    import sys

    code = "import sys, gpu_market, gpu_market.receipt; print('anchorpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
