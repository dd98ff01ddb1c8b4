"""Builders of the slashing instructions (the program's ``slash_equivocation.rs``,
``slash_downtime.rs`` and ``slash_validator_equivocation.rs``).

``slash_equivocation`` and ``slash_downtime`` punish a job's provider and share the program's
``SlashTargets`` accounts (``targets.*``: market, provider, job, stake mint and vault, the
reporter's stake account); ``slash_validator_equivocation`` punishes a committee member.
Both equivocation slashes are only valid right after the Ed25519 instruction carrying their
evidence (:func:`gpu_market.settle.ed25519_entries_instruction`); the client checks the
evidence and builds that instruction. ``first``/``second`` are ``Receipt`` arguments
(:func:`gpu_market.settle.receipt_args`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey

from .. import pda, tokens
from ..accounts import JobView, MarketView
from ..codec import Codec
from ..constants import INSTRUCTIONS_SYSVAR_ID, SYSTEM_PROGRAM_ID, TOKEN_PROGRAM_ID
from ._views import address_of

__all__ = ["slash_downtime_ix", "slash_equivocation_ix", "slash_validator_equivocation_ix"]


def slash_targets(
    job: JobView, market: MarketView, reporter: Pubkey, reporter_stake_account: Pubkey | None, builder: str
) -> dict[str, Pubkey]:
    """The ``targets.*`` accounts of a provider slash over ``job`` (a view with its address);
    the reward goes to ``reporter_stake_account`` (default: ``reporter``'s stake-mint ATA)."""
    return {
        "targets.market": job.market,
        "targets.provider": job.provider,
        "targets.job": address_of(job, builder),
        "targets.stake_mint": market.stake_mint,
        "targets.stake_vault": market.stake_vault,
        "targets.reporter_stake_account": reporter_stake_account
        or tokens.ata(reporter, market.stake_mint),
        "targets.token_program": TOKEN_PROGRAM_ID,
    }


def slash_equivocation_ix(
    codec: Codec,
    reporter: Pubkey,
    job: JobView,
    market: MarketView,
    first: Mapping[str, Any],
    second: Mapping[str, Any],
    reporter_stake_account: Pubkey | None = None,
) -> Instruction:
    """``slash_equivocation`` of ``job``'s provider for the receipts ``first`` and ``second``
    (one seq); the record is ``pda.equivocation_pda(job, job.started_at, seq)``."""
    accounts = slash_targets(job, market, reporter, reporter_stake_account, "slash_equivocation_ix")
    accounts.update(
        {
            "reporter": reporter,
            "record": pda.equivocation_pda(
                accounts["targets.job"], job.started_at, first["seq"], codec.program_id
            ),
            "instructions": INSTRUCTIONS_SYSVAR_ID,
            "system_program": SYSTEM_PROGRAM_ID,
        }
    )
    return codec.instruction("slash_equivocation", {"first": first, "second": second}, accounts)


def slash_downtime_ix(
    codec: Codec,
    validator_authority: Pubkey,
    job: JobView,
    market: MarketView,
    others: Sequence[Pubkey],
    last_proof_window_end: int = 0,
    reporter_stake_account: Pubkey | None = None,
) -> Instruction:
    """``slash_downtime`` of ``job``'s provider submitted by member ``validator_authority``
    with ``others`` as remaining (Validator PDA, authority as signer) pairs; the reward goes
    to ``reporter_stake_account`` (default: the submitter's stake-mint ATA)."""
    accounts = slash_targets(job, market, validator_authority, reporter_stake_account, "slash_downtime_ix")
    accounts["validator_authority"] = validator_authority
    accounts["validator"] = pda.validator_pda(job.market, validator_authority, codec.program_id)
    remaining = []
    for authority in others:
        remaining.append(AccountMeta(pda.validator_pda(job.market, authority, codec.program_id), False, False))
        remaining.append(AccountMeta(authority, True, False))
    return codec.instruction(
        "slash_downtime", {"last_proof_window_end": int(last_proof_window_end)}, accounts,
        remaining=remaining,
    )  # fmt: skip


def slash_validator_equivocation_ix(
    codec: Codec,
    reporter: Pubkey,
    job: JobView,
    market: MarketView,
    validator_authority: Pubkey,
    first: Mapping[str, Any],
    first_approved: int,
    second: Mapping[str, Any],
    second_approved: int,
    reporter_stake_account: Pubkey | None = None,
) -> Instruction:
    """``slash_validator_equivocation`` of committee member ``validator_authority`` of ``job``
    (a view with its address) for two attestations of one seq; the record is
    ``pda.validator_equivocation_pda(validator PDA, job, job.started_at, seq)``."""
    address = address_of(job, "slash_validator_equivocation_ix")
    program_id = codec.program_id
    validator = pda.validator_pda(job.market, validator_authority, program_id)
    accounts = {
        "reporter": reporter,
        "market": job.market,
        "job": address,
        "validator": validator,
        "stake_mint": market.stake_mint,
        "stake_vault": market.stake_vault,
        "reporter_stake_account": reporter_stake_account or tokens.ata(reporter, market.stake_mint),
        "record": pda.validator_equivocation_pda(validator, address, job.started_at, first["seq"], program_id),
        "instructions": INSTRUCTIONS_SYSVAR_ID,
        "token_program": TOKEN_PROGRAM_ID,
        "system_program": SYSTEM_PROGRAM_ID,
    }
    args = {"first": first, "first_approved": int(first_approved), "second": second,
            "second_approved": int(second_approved)}  # fmt: skip
    return codec.instruction("slash_validator_equivocation", args, accounts)
