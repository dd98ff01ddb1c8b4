"""Chain errors -> typed exceptions, from captured RPC payloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpu_market.errors import (
    ChainError,
    GpuMarketError,
    chain_error_from_rpc_error,
    chain_error_from_transaction_err,
    program_error_table,
)

PID = "9mfnJ96kQ4APyqVvPKsBwVLCnwWwrSrGtkXZMyDspnkg"
TOKEN = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"

# A sendTransaction preflight failure (JSON-RPC error object) as a validator returns it.
PREFLIGHT_STALE_SEQUENCE = json.loads(
    (Path(__file__).parent / "fixtures" / "preflight_stale_sequence.json").read_text()
)


def test_program_error_from_preflight(new_idl):
    table = program_error_table(new_idl)
    err = chain_error_from_rpc_error(PREFLIGHT_STALE_SEQUENCE, table, PID)
    assert isinstance(err, GpuMarketError)
    assert (err.code, err.name) == (6032, "StaleSequence")
    assert err.message == "receipt seq must be greater than the last settled seq"
    assert err.instruction_index == 1 and err.program == PID
    assert err.logs == PREFLIGHT_STALE_SEQUENCE["data"]["logs"]
    assert str(err) == "StaleSequence (6032): receipt seq must be greater than the last settled seq"


def test_every_idl_error_resolves(new_idl):
    table = program_error_table(new_idl)
    for e in new_idl["errors"]:
        got = chain_error_from_transaction_err({"InstructionError": [0, {"Custom": e["code"]}]}, [], table, PID)
        assert (got.code, got.name, got.message) == (e["code"], e["name"], e["msg"])


def test_anchor_framework_error(new_idl):
    logs = [
        f"Program {PID} invoke [1]",
        (
            "Program log: AnchorError caused by account: job. Error Code: AccountNotInitialized. "
            "Error Number: 3012. Error Message: The program expected this account to be already "
            "initialized."
        ),
        f"Program {PID} failed: custom program error: 0xbc4",
    ]
    err = chain_error_from_transaction_err(
        {"InstructionError": [0, {"Custom": 3012}]}, logs, program_error_table(new_idl), PID
    )
    assert err.name == "AccountNotInitialized"
    assert "already initialized" in err.message


def test_token_program_error_in_cpi(new_idl):
    logs = [
        f"Program {PID} invoke [1]",
        f"Program {TOKEN} invoke [2]",
        "Program log: Error: insufficient funds",
        f"Program {TOKEN} failed: custom program error: 0x1",
        f"Program {PID} failed: custom program error: 0x1",
    ]
    err = chain_error_from_transaction_err(
        {"InstructionError": [0, {"Custom": 1}]}, logs, program_error_table(new_idl), PID
    )
    assert (err.code, err.name, err.program) == (1, "InsufficientFunds", TOKEN)


@pytest.mark.parametrize(
    "err, text",
    [
        ("AccountNotFound", "AccountNotFound"),
        ({"InstructionError": [2, "InvalidAccountData"]}, "instruction 2: InvalidAccountData"),
        ({"InsufficientFundsForRent": {"account_index": 1}}, "InsufficientFundsForRent"),
    ],
)
def test_non_custom_errors(err, text):
    got = chain_error_from_transaction_err(err, ["log"])
    assert type(got) is ChainError and text in got.message and got.logs == ["log"]


def test_other_rpc_errors():
    got = chain_error_from_rpc_error({"code": -32602, "message": "invalid transaction: bad"})
    assert type(got) is ChainError and got.message == "invalid transaction: bad"
