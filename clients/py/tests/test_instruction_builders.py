"""``gpu_market.instructions`` holds exactly one pure builder per instruction of the IDL, and
each builds the IDL's accounts (order, signer and writable flags) and discriminator.

No chain: the builders get hand-made keys and views; the expected keys are written out here
per instruction, so a builder that puts the right key under the wrong account name fails.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import gpu_market.instructions as builders
import pytest
from gpu_market import pda, tokens
from gpu_market.accounts import DEFAULT_MARKET_PARAMS, decode_job, decode_market
from gpu_market.constants import INSTRUCTIONS_SYSVAR_ID, SYSTEM_PROGRAM_ID, TOKEN_PROGRAM_ID
from gpu_market.hardware import HardwareVerdictArgs, WrongAnswerEvidence
from gpu_market.settle import Attestation, SettleAccounts, SettleItem
from sdktestkit import JOB_STARTED_AT, job_bytes
from solders.pubkey import Pubkey
from test_client import market_bytes

SIGNER = Pubkey.new_unique()
OTHER = Pubkey.new_unique()
MARKET = Pubkey.new_unique()
PROVIDER = Pubkey.new_unique()
JOB = Pubkey.new_unique()
USER = Pubkey.new_unique()
MEMBERS = [Pubkey.new_unique() for _ in range(3)]
RECEIPT = {"seq": 3, "cumulative_seconds": 180, "window_end": JOB_STARTED_AT + 180, "proof_hash": [7] * 32}
TOKEN, SYSTEM, IXS = TOKEN_PROGRAM_ID, SYSTEM_PROGRAM_ID, INSTRUCTIONS_SYSVAR_ID


def idl_flat_accounts(ix: dict) -> list[dict]:
    """The IDL's accounts of ``ix`` in order, composite groups flattened to ``group.name``."""
    out = []
    for a in ix["accounts"]:
        if "accounts" in a:
            out += [{**b, "name": f"{a['name']}.{b['name']}"} for b in idl_flat_accounts(a)]
        else:
            out.append(a)
    return out


@pytest.fixture(scope="module")
def market(codec):
    raw = market_bytes(codec, Pubkey.new_unique(), Pubkey.new_unique(), Pubkey.new_unique())
    return decode_market(raw, MARKET, codec)


@pytest.fixture(scope="module")
def job(codec):
    return decode_job(job_bytes(MARKET, USER, PROVIDER, 1, committee=MEMBERS, quorum=2), JOB, codec)


def samples(codec, m, j):
    """name -> (built instruction, expected key per IDL account name, expected remaining keys)."""
    pid = codec.program_id
    own_provider = pda.provider_pda(MARKET, SIGNER, pid)
    own_validator = pda.validator_pda(MARKET, SIGNER, pid)
    escrow = pda.escrow_pda(JOB, pid)
    new_job = pda.job_pda(MARKET, SIGNER, 9, pid)
    vaults = {"stake_mint": m.stake_mint, "stake_vault": m.stake_vault}
    fees = {"payment_mint": m.payment_mint, "fee_vault": m.fee_vault}
    refund = {"market": MARKET, "provider": PROVIDER, "job": JOB, "escrow": escrow,
              "payment_mint": m.payment_mint, "token_program": TOKEN}  # fmt: skip
    targets = {"targets.market": MARKET, "targets.provider": PROVIDER, "targets.job": JOB,
               "targets.stake_mint": m.stake_mint, "targets.stake_vault": m.stake_vault,
               "targets.reporter_stake_account": tokens.ata(SIGNER, m.stake_mint),
               "targets.token_program": TOKEN}  # fmt: skip
    spec = {"gpu_model": "H100", "gpu_count": 8, "vram_mib": 81920, "region": "eu"}
    other_receipt = {**RECEIPT, "cumulative_seconds": 181}
    item = SettleItem(JOB, 3, 180, JOB_STARTED_AT + 180, bytes(32), OTHER, bytes(64), 170,
                      (Attestation(MEMBERS[1], bytes(64)),))  # fmt: skip
    settle_accounts = SettleAccounts(MARKET, own_validator, PROVIDER, escrow, OTHER, m.fee_vault,
                                     m.payment_mint, (pda.validator_pda(MARKET, MEMBERS[1], pid),))  # fmt: skip
    validator_record = pda.validator_equivocation_pda(
        pda.validator_pda(MARKET, MEMBERS[0], pid), JOB, JOB_STARTED_AT, 3, pid
    )
    verdict = HardwareVerdictArgs(OTHER, "H100", 8, 81920, True, JOB_STARTED_AT, bytes([4]) * 32)
    evidence = WrongAnswerEvidence(bytes([4]) * 32, JOB_STARTED_AT, bytes([5]) * 32, 5, 2,
                                   bytes([6]) * 32, (bytes([7]) * 32,) * 3)  # fmt: skip
    return {
        # market
        "initialize_market": (
            builders.initialize_market_ix(codec, SIGNER, 4, m.stake_mint, m.payment_mint, m.treasury,
                                          DEFAULT_MARKET_PARAMS),
            {"authority": SIGNER, "market": pda.market_pda(SIGNER, 4, pid), **vaults,
             "payment_mint": m.payment_mint,
             "stake_vault": pda.stake_vault_pda(pda.market_pda(SIGNER, 4, pid), pid),
             "fee_vault": pda.fee_vault_pda(pda.market_pda(SIGNER, 4, pid), pid),
             "treasury": m.treasury, "token_program": TOKEN, "system_program": SYSTEM}, []),
        "update_params": (builders.update_params_ix(codec, SIGNER, MARKET, DEFAULT_MARKET_PARAMS),
                          {"authority": SIGNER, "market": MARKET}, []),
        "set_paused": (builders.set_paused_ix(codec, SIGNER, MARKET, True),
                       {"authority": SIGNER, "market": MARKET}, []),
        "propose_authority": (builders.propose_authority_ix(codec, SIGNER, MARKET, OTHER),
                              {"authority": SIGNER, "market": MARKET}, []),
        "accept_authority": (builders.accept_authority_ix(codec, SIGNER, MARKET),
                             {"new_authority": SIGNER, "market": MARKET}, []),
        # treasury
        "set_treasury": (builders.set_treasury_ix(codec, SIGNER, MARKET, OTHER),
                         {"authority": SIGNER, "market": MARKET, "treasury": OTHER}, []),
        "withdraw_fees": (builders.withdraw_fees_ix(codec, m),
                          {"market": MARKET, **fees, "treasury": m.treasury, "token_program": TOKEN}, []),
        "sweep_vault": (builders.sweep_vault_ix(codec, m, OTHER),
                        {"market": MARKET, **vaults, "treasury": m.treasury, "destination": OTHER,
                         "token_program": TOKEN}, []),
        # provider
        "register_provider": (
            builders.register_provider_ix(codec, SIGNER, MARKET, OTHER, spec, 5, 0, "https://w.example"),
            {"owner": SIGNER, "market": MARKET, "provider": own_provider, "system_program": SYSTEM}, []),
        "update_provider": (builders.update_provider_ix(codec, SIGNER, PROVIDER, 6, spec, True, ""),
                            {"owner": SIGNER, "provider": PROVIDER}, []),
        "rotate_worker_key": (builders.rotate_worker_key_ix(codec, SIGNER, MARKET, OTHER, 0),
                              {"owner": SIGNER, "market": MARKET, "provider": own_provider}, []),
        "stake": (builders.stake_ix(codec, SIGNER, m, 100),
                  {"owner": SIGNER, "market": MARKET, "provider": own_provider, **vaults,
                   "owner_stake_account": tokens.ata(SIGNER, m.stake_mint), "token_program": TOKEN}, []),
        "request_unstake": (builders.request_unstake_ix(codec, SIGNER, MARKET, 100),
                            {"owner": SIGNER, "market": MARKET, "provider": own_provider}, []),
        "withdraw_unstaked": (builders.withdraw_unstaked_ix(codec, SIGNER, m),
                              {"owner": SIGNER, "market": MARKET, "provider": own_provider, **vaults,
                               "owner_stake_account": tokens.ata(SIGNER, m.stake_mint),
                               "token_program": TOKEN}, []),
        # validator
        "register_validator": (
            builders.register_validator_ix(codec, SIGNER, m, 500, "https://v.example"),
            {"authority": SIGNER, "market": MARKET, "validator": own_validator, **vaults,
             "authority_stake_account": tokens.ata(SIGNER, m.stake_mint), "token_program": TOKEN,
             "system_program": SYSTEM}, []),
        "update_validator": (builders.update_validator_ix(codec, SIGNER, own_validator, "https://v.example"),
                             {"authority": SIGNER, "validator": own_validator}, []),
        "claim_validator_rewards": (
            builders.claim_validator_rewards_ix(codec, SIGNER, m, OTHER),
            {"authority": SIGNER, "market": MARKET, "validator": own_validator, **fees,
             "destination": OTHER, "token_program": TOKEN}, []),
        "request_validator_exit": (builders.request_validator_exit_ix(codec, SIGNER, MARKET),
                                   {"authority": SIGNER, "market": MARKET, "validator": own_validator}, []),
        "withdraw_validator_bond": (
            builders.withdraw_validator_bond_ix(codec, SIGNER, m),
            {"authority": SIGNER, "market": MARKET, "validator": own_validator, **vaults,
             "authority_stake_account": tokens.ata(SIGNER, m.stake_mint), "token_program": TOKEN}, []),
        # job
        "create_job": (
            builders.create_job_ix(codec, SIGNER, m, PROVIDER, 9, 2, 10_000, committee=MEMBERS[:2],
                                   quorum=2, max_price_per_gpu_second=5, workload_hash=bytes(32),
                                   expected_params=DEFAULT_MARKET_PARAMS),
            {"user": SIGNER, "market": MARKET, "provider": PROVIDER, "job": new_job,
             "escrow": pda.escrow_pda(new_job, pid), "payment_mint": m.payment_mint,
             "user_payment_account": tokens.ata(SIGNER, m.payment_mint), "token_program": TOKEN,
             "system_program": SYSTEM},
            [pda.validator_pda(MARKET, a, pid) for a in MEMBERS[:2]]),
        "accept_job": (builders.accept_job_ix(codec, SIGNER, PROVIDER, JOB),
                       {"signer": SIGNER, "provider": PROVIDER, "job": JOB}, []),
        "finish_job": (builders.finish_job_ix(codec, SIGNER, PROVIDER, JOB),
                       {"signer": SIGNER, "provider": PROVIDER, "job": JOB}, []),
        "top_up": (builders.top_up_ix(codec, SIGNER, j, m, 50),
                   {"user": SIGNER, "market": MARKET, "job": JOB, "escrow": escrow,
                    "payment_mint": m.payment_mint,
                    "user_payment_account": tokens.ata(SIGNER, m.payment_mint), "token_program": TOKEN}, []),
        "cancel_job": (builders.cancel_job_ix(codec, SIGNER, j, m),
                       {"signer": SIGNER, **refund, "user_payment_account": tokens.ata(USER, m.payment_mint)}, []),
        "close_job": (builders.close_job_ix(codec, SIGNER, j, m),
                      {"user": SIGNER, **refund, "user_payment_account": tokens.ata(SIGNER, m.payment_mint)}, []),
        "decline_job": (builders.decline_job_ix(codec, SIGNER, PROVIDER, JOB),
                        {"signer": SIGNER, "provider": PROVIDER, "job": JOB}, []),
        "expire_job": (builders.expire_job_ix(codec, SIGNER, PROVIDER, JOB),
                       {"signer": SIGNER, "provider": PROVIDER, "job": JOB}, []),
        "complete_job": (builders.complete_job_ix(codec, SIGNER, PROVIDER, JOB),
                         {"signer": SIGNER, "provider": PROVIDER, "job": JOB}, []),
        "replace_committee_member": (
            builders.replace_committee_member_ix(codec, SIGNER, j, 1, OTHER),
            {"user": SIGNER, "market": MARKET, "provider": PROVIDER, "job": JOB,
             "previous_validator": pda.validator_pda(MARKET, MEMBERS[1], pid),
             "new_validator": pda.validator_pda(MARKET, OTHER, pid)}, []),
        # settle
        "settle": (builders.settle_ix(codec, SIGNER, item, settle_accounts),
                   {"validator_authority": SIGNER, "market": MARKET, "validator": own_validator,
                    "provider": PROVIDER, "job": JOB, "escrow": escrow, "provider_payment_account": OTHER,
                    **fees, "instructions": IXS, "token_program": TOKEN},
                   [pda.validator_pda(MARKET, MEMBERS[1], pid)]),
        # slash
        "slash_equivocation": (
            builders.slash_equivocation_ix(codec, SIGNER, j, m, RECEIPT, other_receipt),
            {"reporter": SIGNER, **targets, "record": pda.equivocation_pda(JOB, JOB_STARTED_AT, 3, pid),
             "instructions": IXS, "system_program": SYSTEM}, []),
        "slash_downtime": (
            builders.slash_downtime_ix(codec, SIGNER, j, m, [MEMBERS[1]], JOB_STARTED_AT),
            {"validator_authority": SIGNER, "validator": own_validator, **targets},
            [pda.validator_pda(MARKET, MEMBERS[1], pid), MEMBERS[1]]),
        "slash_validator_equivocation": (
            builders.slash_validator_equivocation_ix(codec, SIGNER, j, m, MEMBERS[0], RECEIPT, 170,
                                                     RECEIPT, 171, OTHER),
            {"reporter": SIGNER, "market": MARKET, "job": JOB,
             "validator": pda.validator_pda(MARKET, MEMBERS[0], pid), **vaults,
             "reporter_stake_account": OTHER, "record": validator_record, "instructions": IXS,
             "token_program": TOKEN, "system_program": SYSTEM}, []),
        # hardware, ratings
        "attest_hardware": (
            builders.attest_hardware_ix(codec, SIGNER, MARKET, PROVIDER, verdict, MEMBERS[:2]),
            {"submitter": SIGNER, "market": MARKET, "provider": PROVIDER, "instructions": IXS},
            [pda.validator_pda(MARKET, a, pid) for a in MEMBERS[:2]]),
        "slash_wrong_answer": (
            builders.slash_wrong_answer_ix(codec, SIGNER, m, PROVIDER, evidence),
            {"reporter": SIGNER, "market": MARKET, "provider": PROVIDER, **vaults,
             "record": pda.wrong_answer_pda(PROVIDER, bytes([4]) * 32, pid), "instructions": IXS,
             "token_program": TOKEN, "system_program": SYSTEM}, []),
        "rate_job": (builders.rate_job_ix(codec, SIGNER, PROVIDER, JOB, 4),
                     {"user": SIGNER, "provider": PROVIDER, "job": JOB}, []),
    }  # fmt: skip


def test_hardware_builders_encode_their_arguments(codec, market):
    """The argument bytes are the program's borsh layout, field by field."""
    import struct

    verdict = HardwareVerdictArgs(OTHER, "H100", 8, 81920, False, -5, bytes([4]) * 32)
    ix = builders.attest_hardware_ix(codec, SIGNER, MARKET, PROVIDER, verdict, [MEMBERS[0]])
    assert bytes(ix.data)[8:] == (bytes(OTHER) + b"H100".ljust(32, b"\0")
                                  + struct.pack("<HIBq", 8, 81920, 0, -5) + bytes([4]) * 32)  # fmt: skip
    assert [(a.is_signer, a.is_writable) for a in ix.accounts[4:]] == [(False, False)]
    evidence = WrongAnswerEvidence(bytes([4]) * 32, 7, bytes([5]) * 32, 5, 2, bytes([6]) * 32,
                                   (bytes([7]) * 32, bytes([8]) * 32))  # fmt: skip
    ix = builders.slash_wrong_answer_ix(codec, SIGNER, market, PROVIDER, evidence)
    assert bytes(ix.data)[8:] == (bytes([4]) * 32 + struct.pack("<q", 7) + bytes([5]) * 32
                                  + struct.pack("<III", 5, 2, 0)[:8] + bytes([6]) * 32
                                  + struct.pack("<I", 2) + bytes([7]) * 32 + bytes([8]) * 32)  # fmt: skip
    assert bytes(builders.rate_job_ix(codec, SIGNER, PROVIDER, JOB, 5).data)[8:] == b"\x05"


def test_every_instruction_has_exactly_one_builder(new_idl):
    names = sorted(ix["name"] for ix in new_idl["instructions"])
    exported = sorted(builders.__all__)
    assert all(n.endswith("_ix") for n in exported), "builders are named <instruction>_ix"
    assert [n[: -len("_ix")] for n in exported] == names
    for name in exported:
        fn = getattr(builders, name)
        assert inspect.isfunction(fn) and fn.__module__.startswith("gpu_market.instructions.")
        assert next(iter(inspect.signature(fn).parameters)) == "codec"


def test_instructions_are_built_only_in_the_builders():
    """No SDK module outside ``gpu_market.instructions`` calls ``Codec.instruction``."""
    pkg = Path(builders.__file__).resolve().parents[1]
    offenders = []
    for path in pkg.rglob("*.py"):
        if "instructions" in path.relative_to(pkg).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "instruction"):  # fmt: skip
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_builders_emit_the_idl_accounts_and_discriminator(codec, new_idl, market, job):
    built = samples(codec, market, job)
    assert sorted(built) == sorted(ix["name"] for ix in new_idl["instructions"])
    for ix_idl in new_idl["instructions"]:
        name = ix_idl["name"]
        ix, expected, remaining = built[name]
        accounts = idl_flat_accounts(ix_idl)
        assert ix.program_id == codec.program_id, name
        assert bytes(ix.data)[:8] == bytes(ix_idl["discriminator"]), name
        assert sorted(expected) == sorted(a["name"] for a in accounts), name
        fixed = ix.accounts[: len(accounts)]
        assert [m.pubkey for m in fixed] == [expected[a["name"]] for a in accounts], name
        assert [(m.is_signer, m.is_writable) for m in fixed] == [
            (bool(a.get("signer")), bool(a.get("writable"))) for a in accounts
        ], name
        assert [m.pubkey for m in ix.accounts[len(accounts) :]] == remaining, name


def test_builders_refuse_views_without_an_address(codec, market, job):
    from dataclasses import replace

    bare_market, bare_job = replace(market, address=None), replace(job, address=None)
    with pytest.raises(ValueError, match="stake_ix needs a MarketView with its address"):
        builders.stake_ix(codec, SIGNER, bare_market, 1)
    with pytest.raises(ValueError, match="close_job_ix needs a JobView with its address"):
        builders.close_job_ix(codec, SIGNER, bare_job, market)
