"""A fee payer without SOL: the cluster's preflight refusal (``AccountNotFound``,
``InsufficientFundsForFee``, ``InsufficientFundsForRent`` of account 0) becomes
``InsufficientSol`` saying "fund ADDRESS with SOL for fees", in the SDK and in ``gpum``."""

from __future__ import annotations

import pytest
from gpu_market.cli import main
from gpu_market.constants import PROGRAM_ID
from gpu_market.errors import ChainError, InsufficientSol, fee_payer_error
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from test_client import fake_client


def preflight(err: object) -> dict:
    return {"code": -32002, "message": "Transaction simulation failed: Attempt to debit an "
            "account but found no record of a prior credit.",
            "data": {"err": err, "logs": [], "accounts": None}}


@pytest.mark.parametrize("err, says", [
    ("AccountNotFound", "has no SOL"),
    ("InsufficientFundsForFee", "has too little SOL"),
    ({"InsufficientFundsForRent": {"account_index": 0}}, "has too little SOL"),
])  # fmt: skip
def test_send_names_the_fee_payer_to_fund(idl_path, job_bytes, err, says) -> None:
    rpc, client = fake_client(idl_path)
    job = Pubkey.new_unique()
    rpc.accounts[str(job)] = (str(PROGRAM_ID), job_bytes(Pubkey.new_unique(), Pubkey.new_unique(),
                                                         Pubkey.new_unique(), 0))
    rpc.send_error = preflight(err)
    signer = Keypair()
    with pytest.raises(InsufficientSol) as info:
        client.finish_job(signer, job)
    address = str(signer.pubkey())
    assert info.value.address == address
    assert str(info.value).startswith(f"fund {address} with SOL for fees") and says in str(info.value)
    assert isinstance(info.value, ChainError) and info.value.err == err


def test_other_refusals_stay_as_they_were() -> None:
    payer = Pubkey.new_unique()
    for err in ({"InsufficientFundsForRent": {"account_index": 2}}, "BlockhashNotFound",
                {"InstructionError": [0, {"Custom": 1}]}):
        e = ChainError("Transaction simulation failed", [], err)
        assert fee_payer_error(e, payer) is e


def test_gpum_says_fund_the_wallet(idl_path, job_bytes, tmp_path, monkeypatch, capsys) -> None:
    """``gpum job finish`` with a wallet that holds no SOL: one line naming the wallet."""
    import json

    rpc, client = fake_client(idl_path)
    job = Pubkey.new_unique()
    rpc.accounts[str(job)] = (str(PROGRAM_ID), job_bytes(Pubkey.new_unique(), Pubkey.new_unique(),
                                                         Pubkey.new_unique(), 0))
    rpc.send_error = preflight("AccountNotFound")
    wallet = Keypair()
    key = tmp_path / "wallet.json"
    key.write_text(json.dumps(list(bytes(wallet))))
    monkeypatch.setattr("gpu_market.cli.base.Env.client", property(lambda self: client))
    code = main(["job", "finish", str(job), "--keypair", str(key)])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"error: fund {wallet.pubkey()} with SOL for fees"), err
    assert "AccountNotFound" not in err
