"""``gpum validator ...``: register your keypair as a validator of a market (bonding stake),
point it at a new endpoint, show a validator, claim its rewards, exit and withdraw the bond.

Which validators a job's committee names, and replacing one, belong to ``gpum job``
(:mod:`gpu_market.cli.job`).
"""

from __future__ import annotations

from typing import Any

import click
from solders.pubkey import Pubkey

from ..units import format_ui_amount
from .base import (
    PUBKEY,
    CliError,
    Env,
    common,
    emit_dated,
    market_option,
    market_view,
    now,
    parse_amount,
    token_holding,
    withdraw_released,
)

__all__ = ["validator"]


def _endpoint(url: str, hint: str = "'--endpoint'") -> str:
    from ..accounts import encode_endpoint

    try:
        encode_endpoint(url)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint=hint) from None
    return url


@click.group()
def validator() -> None:
    """Register validators, update their endpoint, claim rewards, exit and withdraw bonds."""


@validator.command("register")
@common
@market_option
@click.option("--endpoint", required=True,
              help="Public URL of your validator node (http:// or https://, <= 96 bytes); workers "
                   "and committee members reach you there.")  # fmt: skip
@click.option("--bond", default=None,
              help="Stake-mint UI units to bond (default: the market's validator_min_bond).")
def validator_register(env: Env, market: Pubkey, endpoint: str, bond: str | None) -> None:
    """Register your keypair as a validator of the market, bonding stake from your stake-mint ATA."""
    from .. import pda
    from ..accounts import effective_params

    _endpoint(endpoint)
    kp = env.keypair
    m = market_view(env, market)
    if env.client.fetch_validator_by_authority(market, kp.pubkey()) is not None:
        raise CliError(f"{kp.pubkey()} is already a validator of market {market}: change its "
                       "endpoint with `gpum validator update --endpoint URL`")  # fmt: skip
    decimals = env.client.mint_decimals(m.stake_mint)
    min_bond = effective_params(m, now(env)).validator_min_bond
    if bond is None:
        if min_bond == 0:
            raise click.UsageError("this market sets no minimum bond (validator_min_bond 0): choose "
                                   "your bond with --bond AMOUNT (stake-mint UI units)")  # fmt: skip
        base = min_bond
    else:
        base = parse_amount(bond, decimals, "'--bond'")
        if base < min_bond:
            raise click.BadParameter(f"{bond} is below the market's validator_min_bond "
                                     f"{format_ui_amount(min_bond, decimals)}", param_hint="'--bond'")  # fmt: skip
    account, held = token_holding(env, m.stake_mint)
    if held < base:
        raise CliError(f"your stake-mint account {account} holds {format_ui_amount(held, decimals)}; "
                       f"the bond needs {format_ui_amount(base, decimals)}")  # fmt: skip
    sig = env.client.register_validator(kp, market, base, endpoint)
    env.emit({"validator": str(pda.validator_pda(market, kp.pubkey(), env.client.program_id)),
              "bond": format_ui_amount(base, decimals), "endpoint": endpoint, "signature": str(sig)})  # fmt: skip


@validator.command("update")
@common
@market_option
@click.option("--endpoint", required=True, help="New public URL of your validator node.")
def validator_update(env: Env, market: Pubkey, endpoint: str) -> None:
    """Point your validator at a new endpoint URL."""
    _endpoint(endpoint)
    kp = env.keypair
    _validator(env, market, kp.pubkey())
    sig = env.client.update_validator(kp, market, endpoint)
    env.emit({"validator": str(kp.pubkey()), "endpoint": endpoint, "signature": str(sig)})


def _validator(env: Env, market: Pubkey, authority: Pubkey):
    v = env.client.fetch_validator_by_authority(market, authority)
    if v is None:
        raise CliError(f"{authority} is not a validator of market {market}; run `gpum validator register`")
    return v


@validator.command("status")
@common
@market_option
@click.argument("authority", metavar="[AUTHORITY]", type=PUBKEY, required=False)
def validator_status(env: Env, market: Pubkey, authority: Pubkey | None) -> None:
    """Show a validator's bond, status, endpoint, settlements, rewards and slashes (default: yours)."""
    authority = authority or env.keypair.pubkey()
    v = _validator(env, market, authority)
    m = market_view(env, market)
    sd = env.client.mint_decimals(m.stake_mint)
    pd_ = env.client.mint_decimals(m.payment_mint)
    data: dict[str, Any] = {
        "validator": str(v.address),
        "authority": str(v.authority),
        "status": v.status,
        "endpoint": v.endpoint,
        "bond": format_ui_amount(v.bond, sd),
        "unbonding": format_ui_amount(v.unbonding.amount, sd),
        "settlements": v.settlements,
        "rewards_earned": format_ui_amount(v.rewards_earned, pd_),
        "rewards_unclaimed": format_ui_amount(v.rewards_unclaimed, pd_),
        "slashes": v.slashes,
    }
    if v.unbonding.amount:
        data["unbonding_release_at"] = v.unbonding.release_at
    emit_dated(env, data, now(env) if v.unbonding.amount else 0, ("unbonding_release_at",))


@validator.command("claim-rewards")
@common
@market_option
def validator_claim_rewards(env: Env, market: Pubkey) -> None:
    """Move your unclaimed validator rewards from the market's fee vault to your payment-mint
    ATA (created if missing)."""
    from .. import tokens

    kp = env.keypair
    v = _validator(env, market, kp.pubkey())
    m = market_view(env, market)
    decimals = env.client.mint_decimals(m.payment_mint)
    if v.rewards_unclaimed == 0:
        raise CliError(f"you have no unclaimed rewards in market {market} (earned so far: "
                       f"{format_ui_amount(v.rewards_earned, decimals)})")  # fmt: skip
    sig = env.client.claim_validator_rewards(kp, market)
    env.emit({"claimed": format_ui_amount(v.rewards_unclaimed, decimals),
              "destination": str(tokens.ata(kp.pubkey(), m.payment_mint)), "signature": str(sig)})  # fmt: skip


@validator.command("exit")
@common
@market_option
def validator_exit(env: Env, market: Pubkey) -> None:
    """Leave: your whole bond unbonds for unbonding_seconds; keep settling your jobs until you withdraw."""
    sig = env.client.request_validator_exit(env.keypair, market)
    env.emit({"market": str(market), "signature": str(sig)})


@validator.command("withdraw")
@common
@market_option
def validator_withdraw(env: Env, market: Pubkey) -> None:
    """Withdraw your released bond to your stake-mint ATA and close the validator account."""
    v = _validator(env, market, env.keypair.pubkey())
    withdraw_released(env, market, v.unbonding.amount, env.client.withdraw_validator_bond)
