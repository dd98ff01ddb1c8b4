"""Builders of the provider instructions (the program's ``register_provider.rs``,
``update_provider.rs``, ``rotate_worker_key.rs``, ``stake.rs``, ``request_unstake.rs`` and
``withdraw_unstaked.rs``): all
signed by the provider's owner; the Provider account is ``pda.provider_pda(market, owner)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from solders.instruction import Instruction
from solders.pubkey import Pubkey

from .. import pda, tokens
from ..accounts import GPU_MODEL_LEN, REGION_LEN, MarketView, encode_fixed_str
from ..codec import Codec
from ..constants import SYSTEM_PROGRAM_ID, TOKEN_PROGRAM_ID
from ._views import address_of

__all__ = [
    "register_provider_ix",
    "request_unstake_ix",
    "rotate_worker_key_ix",
    "spec_args",
    "stake_ix",
    "update_provider_ix",
    "withdraw_unstaked_ix",
]


def spec_args(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The ``GpuSpec`` argument of ``spec`` (``gpu_model`` str <= 32 UTF-8 bytes,
    ``gpu_count``, ``vram_mib``, ``region`` str <= 16 bytes, "" when missing); ValueError on
    a string too long."""
    return {
        "gpu_model": list(encode_fixed_str(spec["gpu_model"], GPU_MODEL_LEN, "gpu_model")),
        "gpu_count": int(spec["gpu_count"]),
        "vram_mib": int(spec["vram_mib"]),
        "region": list(encode_fixed_str(spec.get("region", ""), REGION_LEN, "region")),
    }


def register_provider_ix(
    codec: Codec,
    owner: Pubkey,
    market: Pubkey,
    worker_key: Pubkey,
    spec: Mapping[str, Any],
    price_per_gpu_second: int,
    worker_key_expires_at: int = 0,
    endpoint: str = "",
) -> Instruction:
    """``register_provider`` of ``owner`` in ``market`` (``spec`` as :func:`spec_args`;
    ``endpoint`` "" = none)."""
    return codec.instruction(
        "register_provider",
        {
            "args": {
                "worker_key": worker_key,
                "worker_key_expires_at": worker_key_expires_at,
                "spec": spec_args(spec),
                "price_per_gpu_second": price_per_gpu_second,
                "endpoint": endpoint,
            }
        },
        {
            "owner": owner,
            "market": market,
            "provider": pda.provider_pda(market, owner, codec.program_id),
            "system_program": SYSTEM_PROGRAM_ID,
        },
    )


def update_provider_ix(
    codec: Codec,
    owner: Pubkey,
    provider: Pubkey,
    price_per_gpu_second: int | None = None,
    spec: Mapping[str, Any] | None = None,
    accepting_jobs: bool | None = None,
    endpoint: str | None = None,
) -> Instruction:
    """``update_provider`` of ``provider`` (the PDA): None leaves a field unchanged; ``spec``
    is a whole spec (:func:`spec_args`), ``endpoint=""`` removes the endpoint."""
    args = {
        "price_per_gpu_second": None if price_per_gpu_second is None else int(price_per_gpu_second),
        "spec": None if spec is None else spec_args(spec),
        "accepting_jobs": None if accepting_jobs is None else bool(accepting_jobs),
        "endpoint": endpoint,
    }
    return codec.instruction("update_provider", {"args": args}, {"owner": owner, "provider": provider})


def rotate_worker_key_ix(
    codec: Codec, owner: Pubkey, market: Pubkey, new_worker_key: Pubkey, expires_at: int = 0
) -> Instruction:
    """``rotate_worker_key``: ``owner``'s provider in ``market`` signs with ``new_worker_key``
    from now (``expires_at`` unix time, 0 = never)."""
    return codec.instruction(
        "rotate_worker_key",
        {"new_worker_key": new_worker_key, "expires_at": int(expires_at)},
        {
            "owner": owner,
            "market": market,
            "provider": pda.provider_pda(market, owner, codec.program_id),
        },
    )


def stake_ix(codec: Codec, owner: Pubkey, market: MarketView, amount: int) -> Instruction:
    """``stake``: ``amount`` from ``owner``'s stake-mint ATA into the stake vault of
    ``market`` (a view with its address)."""
    address = address_of(market, "stake_ix")
    return codec.instruction(
        "stake",
        {"amount": amount},
        {
            "owner": owner,
            "market": address,
            "provider": pda.provider_pda(address, owner, codec.program_id),
            "stake_mint": market.stake_mint,
            "owner_stake_account": tokens.ata(owner, market.stake_mint),
            "stake_vault": market.stake_vault,
            "token_program": TOKEN_PROGRAM_ID,
        },
    )


def request_unstake_ix(codec: Codec, owner: Pubkey, market: Pubkey, amount: int) -> Instruction:
    """``request_unstake``: start unbonding ``amount`` of ``owner``'s stake in ``market``."""
    return codec.instruction(
        "request_unstake",
        {"amount": int(amount)},
        {
            "owner": owner,
            "market": market,
            "provider": pda.provider_pda(market, owner, codec.program_id),
        },
    )


def withdraw_unstaked_ix(codec: Codec, owner: Pubkey, market: MarketView) -> Instruction:
    """``withdraw_unstaked``: the released unbonding stake to ``owner``'s stake-mint ATA
    (which must exist: ``tokens.create_ata_idempotent_ix`` first)."""
    address = address_of(market, "withdraw_unstaked_ix")
    return codec.instruction(
        "withdraw_unstaked",
        {},
        {
            "owner": owner,
            "market": address,
            "provider": pda.provider_pda(address, owner, codec.program_id),
            "stake_mint": market.stake_mint,
            "stake_vault": market.stake_vault,
            "owner_stake_account": tokens.ata(owner, market.stake_mint),
            "token_program": TOKEN_PROGRAM_ID,
        },
    )
