"""Builder of ``settle`` (the program's ``settle.rs``), the instruction alone.

A ``settle`` is only valid right after the Ed25519 instruction that verifies its receipt and
attestations; :func:`gpu_market.settle.settle_instructions` builds the pair. This module does
not import :mod:`gpu_market.settle` (which imports it): ``item`` and ``accounts`` are a
:class:`~gpu_market.settle.SettleItem` and a :class:`~gpu_market.settle.SettleAccounts`.
"""

from __future__ import annotations

from typing import Any

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey

from ..codec import Codec
from ..constants import INSTRUCTIONS_SYSVAR_ID, TOKEN_PROGRAM_ID

__all__ = ["settle_ix"]


def settle_ix(codec: Codec, validator_authority: Pubkey, item: Any, accounts: Any) -> Instruction:
    """``settle`` of ``item`` (a SettleItem) submitted by committee member
    ``validator_authority`` with ``accounts`` (a SettleAccounts): the receipt and
    ``approved_seconds`` as arguments, the attesters' Validator PDAs
    (``accounts.extra_validators``) as writable remaining accounts. ValueError unless the
    proof hash is 32 bytes."""
    receipt = {
        "seq": item.seq,
        "cumulative_seconds": item.cumulative_seconds,
        "window_end": item.window_end,
        "proof_hash": list(bytes(item.proof_hash)),
    }
    if len(receipt["proof_hash"]) != 32:
        raise ValueError("proof_hash must be 32 bytes")
    return codec.instruction(
        "settle",
        {"receipt": receipt, "approved_seconds": int(item.approved_seconds)},
        {
            "validator_authority": validator_authority,
            "market": accounts.market,
            "validator": accounts.validator,
            "provider": accounts.provider,
            "job": item.job,
            "escrow": accounts.escrow,
            "provider_payment_account": accounts.provider_payment_account,
            "fee_vault": accounts.fee_vault,
            "payment_mint": accounts.payment_mint,
            "instructions": INSTRUCTIONS_SYSVAR_ID,
            "token_program": TOKEN_PROGRAM_ID,
        },
        remaining=[AccountMeta(v, False, True) for v in accounts.extra_validators],
    )
