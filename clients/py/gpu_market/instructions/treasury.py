"""Builders of the treasury instructions (the program's ``set_treasury.rs``, ``withdraw_fees.rs``
and ``sweep_vault.rs``): ``set_treasury`` (market authority), and the permissionless
``withdraw_fees`` and ``sweep_vault``, which name no signer (whoever sends them pays the fee)."""

from __future__ import annotations

from solders.instruction import Instruction
from solders.pubkey import Pubkey

from ..accounts import MarketView
from ..codec import Codec
from ..constants import TOKEN_PROGRAM_ID
from ._views import address_of

__all__ = ["set_treasury_ix", "sweep_vault_ix", "withdraw_fees_ix"]


def set_treasury_ix(codec: Codec, authority: Pubkey, market: Pubkey, treasury: Pubkey) -> Instruction:
    """``set_treasury``: ``treasury`` (a token account of the payment mint) receives fees."""
    return codec.instruction(
        "set_treasury", {}, {"authority": authority, "market": market, "treasury": treasury}
    )


def withdraw_fees_ix(codec: Codec, market: MarketView) -> Instruction:
    """``withdraw_fees`` of ``market`` (a view with its address): the fee vault's balance
    above the validators' unclaimed rewards to ``market.treasury``."""
    return codec.instruction(
        "withdraw_fees",
        {},
        {
            "market": address_of(market, "withdraw_fees_ix"),
            "payment_mint": market.payment_mint,
            "fee_vault": market.fee_vault,
            "treasury": market.treasury,
            "token_program": TOKEN_PROGRAM_ID,
        },
    )


def sweep_vault_ix(codec: Codec, market: MarketView, destination: Pubkey) -> Instruction:
    """``sweep_vault`` of ``market`` (a view with its address) to ``destination``, a
    stake-mint account owned by the owner of ``market.treasury``."""
    return codec.instruction(
        "sweep_vault",
        {},
        {
            "market": address_of(market, "sweep_vault_ix"),
            "stake_mint": market.stake_mint,
            "stake_vault": market.stake_vault,
            "treasury": market.treasury,
            "destination": destination,
            "token_program": TOKEN_PROGRAM_ID,
        },
    )
