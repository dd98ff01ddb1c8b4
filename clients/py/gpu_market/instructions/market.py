"""Builders of the market governance instructions (the program's ``initialize_market.rs``,
``update_params.rs``, ``set_paused.rs``, ``propose_authority.rs`` and ``accept_authority.rs``):
all signed by the market
authority, except ``accept_authority``, signed by the proposed one."""

from __future__ import annotations

from collections.abc import Mapping

from solders.instruction import Instruction
from solders.pubkey import Pubkey

from .. import pda
from ..accounts import MarketParams
from ..codec import Codec
from ..constants import SYSTEM_PROGRAM_ID, TOKEN_PROGRAM_ID

__all__ = [
    "accept_authority_ix",
    "initialize_market_ix",
    "propose_authority_ix",
    "set_paused_ix",
    "update_params_ix",
]


def initialize_market_ix(
    codec: Codec,
    authority: Pubkey,
    market_id: int,
    stake_mint: Pubkey,
    payment_mint: Pubkey,
    treasury: Pubkey,
    params: Mapping[str, int] | MarketParams,
) -> Instruction:
    """``initialize_market`` of market ``market_id`` of ``authority``
    (``pda.market_pda(authority, market_id)``) with its stake and fee vaults and every
    parameter in ``params`` (all of ``MarketParams``; ``gpu_market.admin.params_args`` fills a
    partial mapping)."""
    market = pda.market_pda(authority, market_id, codec.program_id)
    return codec.instruction(
        "initialize_market",
        {"id": market_id, "params": params},
        {
            "authority": authority,
            "market": market,
            "stake_mint": stake_mint,
            "payment_mint": payment_mint,
            "stake_vault": pda.stake_vault_pda(market, codec.program_id),
            "fee_vault": pda.fee_vault_pda(market, codec.program_id),
            "treasury": treasury,
            "token_program": TOKEN_PROGRAM_ID,
            "system_program": SYSTEM_PROGRAM_ID,
        },
    )


def update_params_ix(
    codec: Codec, authority: Pubkey, market: Pubkey, params: Mapping[str, int] | MarketParams
) -> Instruction:
    """``update_params``: announce ``params`` (all of ``MarketParams``) for ``market``."""
    return codec.instruction(
        "update_params", {"params": params}, {"authority": authority, "market": market}
    )


def set_paused_ix(codec: Codec, authority: Pubkey, market: Pubkey, paused: bool) -> Instruction:
    """``set_paused``: pause (True) or resume (False) new business in ``market``."""
    return codec.instruction(
        "set_paused", {"paused": bool(paused)}, {"authority": authority, "market": market}
    )


def propose_authority_ix(codec: Codec, authority: Pubkey, market: Pubkey, new_authority: Pubkey) -> Instruction:
    """``propose_authority``: name ``new_authority`` as the next authority of ``market``
    (``Pubkey.default()`` cancels a proposal)."""
    return codec.instruction(
        "propose_authority",
        {"new_authority": new_authority},
        {"authority": authority, "market": market},
    )


def accept_authority_ix(codec: Codec, new_authority: Pubkey, market: Pubkey) -> Instruction:
    """``accept_authority``: the proposed ``new_authority`` takes over ``market``."""
    return codec.instruction(
        "accept_authority", {}, {"new_authority": new_authority, "market": market}
    )
