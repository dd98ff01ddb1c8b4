"""``gpum validator ...`` and the committee side of ``gpum job`` (issue 8).

``validator register|update|status|claim-rewards|exit|withdraw``; ``job replace-member``; and
:func:`choose_committee`, the committee and quorum ``gpum job create`` proposes or checks.
:mod:`gpu_market.cli` attaches these to its command tree; this module imports only
:mod:`gpu_market.cli_base` of the CLI.
"""

from __future__ import annotations

from typing import Any

import click
from solders.pubkey import Pubkey

from .cli_base import (
    PUBKEY,
    CliError,
    Env,
    common,
    job_view,
    market_option,
    market_view,
    now,
    parse_amount,
)
from .constants import MAX_COMMITTEE, MAX_QUORUM
from .units import format_ui_amount

__all__ = ["DEFAULT_COMMITTEE_SIZE", "choose_committee", "job_replace_member", "validator"]

DEFAULT_COMMITTEE_SIZE = 3
"""Validators ``gpum job create`` proposes when no ``--committee`` is given (fewer if fewer
Active validators answer ``/health``)."""


def _endpoint(url: str, hint: str = "'--endpoint'") -> str:
    from .accounts import encode_endpoint

    try:
        encode_endpoint(url)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint=hint) from None
    return url


def _parse_committee(text: str) -> list[Pubkey]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    if not 1 <= len(keys) <= MAX_COMMITTEE:
        raise click.BadParameter(f"name 1..{MAX_COMMITTEE} validator authorities, comma-separated",
                                 param_hint="'--committee'")  # fmt: skip
    out = []
    for k in keys:
        try:
            out.append(Pubkey.from_string(k))
        except ValueError:
            raise click.BadParameter(f"{k!r} is not a valid base58 public key",
                                     param_hint="'--committee'") from None  # fmt: skip
    if len(set(out)) != len(out):
        raise click.BadParameter("a validator is named twice", param_hint="'--committee'")
    return out


def choose_committee(env: Env, market: Pubkey, market_view: Any, provider: Any, committee: str | None,
                     quorum: int | None) -> tuple[list[Pubkey], int]:  # fmt: skip
    """``(committee, quorum)`` for ``gpum job create``: ``--committee`` as given, else the
    default committee of up to three healthy Active validators (by bond, never the provider's
    owner or worker key); ``--quorum`` as given, else a majority of the committee, at least the
    market's ``min_quorum``. One actionable line when none is possible."""
    from .accounts import effective_params
    from .committee import default_quorum

    min_quorum = effective_params(market_view, now(env)).min_quorum
    if committee is not None:
        members = _parse_committee(committee)
    else:
        exclude = [k for k in (getattr(provider, "owner", None), getattr(provider, "worker_key", None)) if k]
        members = env.client.default_committee(market, size=DEFAULT_COMMITTEE_SIZE, exclude=exclude)
        if not members:
            raise CliError(
                f"no Active validator of market {market} answers on its endpoint's /health: "
                "name the committee with --committee AUTHORITY[,AUTHORITY...] (see `gpum validator "
                "status AUTHORITY`)"
            )
        if len(members) < min_quorum:
            raise CliError(
                f"only {len(members)} Active validator(s) answer /health but the market's min_quorum "
                f"is {min_quorum}: name at least {min_quorum} with --committee"
            )
    top = min(MAX_QUORUM, len(members))
    if quorum is None:
        try:
            return members, default_quorum(len(members), min_quorum)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--committee'") from None
    if not min_quorum <= quorum <= top:
        raise click.BadParameter(
            f"{quorum} is out of range for a committee of {len(members)}: between the market's "
            f"min_quorum {min_quorum} and {top}",
            param_hint="'--quorum'",
        )
    return members, quorum


# ----------------------------------------------------------------------------- validator group


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
    from . import pda, tokens
    from .accounts import effective_params
    from .errors import AccountNotFound

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
    account = tokens.ata(kp.pubkey(), m.stake_mint)
    try:
        held = env.client.token_balance(account)
    except AccountNotFound:
        held = 0
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
    env.emit(data)


@validator.command("claim-rewards")
@common
@market_option
def validator_claim_rewards(env: Env, market: Pubkey) -> None:
    """Move your unclaimed validator rewards from the market's fee vault to your payment-mint
    ATA (created if missing)."""
    from . import tokens

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
    kp = env.keypair
    v = _validator(env, market, kp.pubkey())
    m = market_view(env, market)
    amount = format_ui_amount(v.unbonding.amount, env.client.mint_decimals(m.stake_mint))
    sig = env.client.withdraw_validator_bond(kp, market)
    env.emit({"withdrawn": amount, "signature": str(sig)})


# ----------------------------------------------------------------------------- job committee


@click.command("replace-member")
@common
@click.argument("job_address", metavar="JOB", type=PUBKEY)
@click.argument("index", metavar="INDEX", type=click.IntRange(0, MAX_COMMITTEE - 1))
@click.argument("new_authority", metavar="NEW_AUTHORITY", type=PUBKEY)
def job_replace_member(env: Env, job_address: Pubkey, index: int, new_authority: Pubkey) -> None:
    """Replace committee member INDEX (0-based, see `gpum job status`) of JOB, which is no
    longer active, by the validator NEW_AUTHORITY (the job's user)."""
    j = job_view(env, job_address)
    if index >= len(j.committee):
        raise click.BadParameter(f"the job's committee has {len(j.committee)} member(s): 0.."
                                 f"{len(j.committee) - 1}", param_hint="'INDEX'")  # fmt: skip
    previous = j.committee[index]
    sig = env.client.replace_committee_member(env.keypair, job_address, index, new_authority)
    env.emit({"job": str(job_address), "index": index, "previous": str(previous),
              "member": str(new_authority), "signature": str(sig)})  # fmt: skip
