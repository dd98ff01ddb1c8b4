"""Builders of the validator instructions (the program's ``register_validator.rs``,
``update_validator.rs``, ``claim_validator_rewards.rs``, ``request_validator_exit.rs`` and
``withdraw_validator_bond.rs``): all signed by the
validator's authority; the Validator account is ``pda.validator_pda(market, authority)``."""

from __future__ import annotations

from solders.instruction import Instruction
from solders.pubkey import Pubkey

from .. import pda, tokens
from ..accounts import MarketView, encode_endpoint
from ..codec import Codec
from ..constants import SYSTEM_PROGRAM_ID, TOKEN_PROGRAM_ID
from ._views import address_of

__all__ = [
    "claim_validator_rewards_ix",
    "register_validator_ix",
    "request_validator_exit_ix",
    "update_validator_ix",
    "withdraw_validator_bond_ix",
]


def register_validator_ix(
    codec: Codec, authority: Pubkey, market: MarketView, bond: int, endpoint: str
) -> Instruction:
    """``register_validator`` of ``authority`` in ``market`` (a view with its address):
    ``bond`` from its stake-mint ATA into the stake vault, reachable at ``endpoint``."""
    address = address_of(market, "register_validator_ix")
    return codec.instruction(
        "register_validator",
        {"bond": int(bond), "endpoint": endpoint},
        {
            "authority": authority,
            "market": address,
            "validator": pda.validator_pda(address, authority, codec.program_id),
            "stake_mint": market.stake_mint,
            "authority_stake_account": tokens.ata(authority, market.stake_mint),
            "stake_vault": market.stake_vault,
            "token_program": TOKEN_PROGRAM_ID,
            "system_program": SYSTEM_PROGRAM_ID,
        },
    )


def update_validator_ix(codec: Codec, authority: Pubkey, validator: Pubkey, endpoint: str) -> Instruction:
    """``update_validator``: ``validator`` (the PDA) gets ``endpoint``; ValueError if the URL
    is not one the program stores (:func:`gpu_market.accounts.encode_endpoint`)."""
    encode_endpoint(endpoint)
    return codec.instruction(
        "update_validator", {"endpoint": endpoint}, {"authority": authority, "validator": validator}
    )


def claim_validator_rewards_ix(
    codec: Codec, authority: Pubkey, market: MarketView, destination: Pubkey
) -> Instruction:
    """``claim_validator_rewards`` of ``authority`` in ``market`` (a view with its address):
    its unclaimed rewards from the fee vault to ``destination``, a payment-mint account it owns."""
    address = address_of(market, "claim_validator_rewards_ix")
    return codec.instruction(
        "claim_validator_rewards",
        {},
        {
            "authority": authority,
            "market": address,
            "validator": pda.validator_pda(address, authority, codec.program_id),
            "payment_mint": market.payment_mint,
            "fee_vault": market.fee_vault,
            "destination": destination,
            "token_program": TOKEN_PROGRAM_ID,
        },
    )


def request_validator_exit_ix(codec: Codec, authority: Pubkey, market: Pubkey) -> Instruction:
    """``request_validator_exit``: ``authority``'s validator in ``market`` leaves; its bond
    unbonds."""
    return codec.instruction(
        "request_validator_exit",
        {},
        {
            "authority": authority,
            "market": market,
            "validator": pda.validator_pda(market, authority, codec.program_id),
        },
    )


def withdraw_validator_bond_ix(codec: Codec, authority: Pubkey, market: MarketView) -> Instruction:
    """``withdraw_validator_bond``: an exited validator's released bond to ``authority``'s
    stake-mint ATA (which must exist), closing its Validator account."""
    address = address_of(market, "withdraw_validator_bond_ix")
    return codec.instruction(
        "withdraw_validator_bond",
        {},
        {
            "authority": authority,
            "market": address,
            "validator": pda.validator_pda(address, authority, codec.program_id),
            "stake_mint": market.stake_mint,
            "stake_vault": market.stake_vault,
            "authority_stake_account": tokens.ata(authority, market.stake_mint),
            "token_program": TOKEN_PROGRAM_ID,
        },
    )
