"""``gpum market ...``: create a market, show its state, and govern it (pause, parameters,
treasury, fee withdrawal, vault sweep, authority hand-over).

``init`` and ``update-params`` take one option per market parameter, bounded as the program
bounds it (:func:`_param_options`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from solders.pubkey import Pubkey

from ..constants import (
    MAX_BPS,
    MAX_ECC_UNCORRECTED,
    MAX_FEE_BPS,
    MAX_MISSED_WINDOWS,
    MAX_QUORUM,
    MAX_REPORTER_REWARD_BPS,
    MAX_SKEW_SECONDS,
    MAX_UNBONDING_SECONDS,
    MAX_WINDOW_SECONDS,
    TEMP_CRITICAL_RANGE_C,
)
from ..units import format_ui_amount
from .base import PUBKEY, CliError, Duration, Env
from .base import common as _common
from .base import market_option as _market_option
from .base import market_view as _market
from .base import now as _now
from .base import params_dict as _params_dict
from .base import parse_amount as _amount

__all__ = ["market"]


def _param_options(defaults: bool) -> Callable[[Callable], Callable]:
    """One option per market parameter, bounded as the program bounds it (``state/market.rs``).
    ``defaults``: show and use DEFAULT_MARKET_PARAMS (market init); else None = unchanged."""
    from ..accounts import DEFAULT_MARKET_PARAMS as D

    options = [
        ("--fee-bps", click.IntRange(0, MAX_FEE_BPS), None),
        ("--burn-bps", click.IntRange(0, 10_000), None),
        ("--min-stake-per-gpu", None, "Stake-mint UI units."),
        ("--unbonding-seconds", Duration(low=0, high=MAX_UNBONDING_SECONDS),
         "Also the delay before a parameter change takes effect."),
        ("--window-seconds", Duration(low=1, high=MAX_WINDOW_SECONDS), None),
        ("--min-quorum", click.IntRange(1, MAX_QUORUM),
         "Fewest committee members a job may require to agree on a settlement."),
        ("--max-missed-windows", click.IntRange(1, MAX_MISSED_WINDOWS),
         "A job's grace after it ends is (this + 2) windows."),
        ("--downtime-slash-bps", click.IntRange(0, 10_000), None),
        ("--equivocation-slash-bps", click.IntRange(0, 10_000), None),
        ("--reporter-reward-bps", click.IntRange(0, MAX_REPORTER_REWARD_BPS), None),
        ("--validator-min-bond", None, "Stake-mint UI units."),
        ("--max-skew-seconds", Duration(low=0, high=MAX_SKEW_SECONDS), None),
        ("--temp-critical-c", click.IntRange(*TEMP_CRITICAL_RANGE_C),
         "A window in which a GPU reached this temperature bills at most length - 1 seconds."),
        ("--ecc-uncorrected-max", click.IntRange(0, MAX_ECC_UNCORRECTED),
         "Uncorrected ECC errors a GPU may report in a window and still bill."),
        ("--validator-reward-bps", click.IntRange(0, MAX_BPS),
         "Share of the fee credited to the committee members attesting a settlement."),
    ]  # fmt: skip

    def decorate(f: Callable) -> Callable:
        for flag, kind, help_ in reversed(options):
            key = flag[2:].replace("-", "_")
            default: Any = None
            if defaults:
                default = str(D[key]) if kind is None else D[key]
            f = click.option(flag, type=kind, default=default, show_default=defaults, help=help_)(f)
        return f

    return decorate


@click.group()
def market() -> None:
    """Create, inspect and govern markets."""


@market.command("init")
@_common
@click.option("--id", "market_id", type=click.IntRange(0, 2**64 - 1), default=0, show_default=True)
@click.option("--stake-mint", type=PUBKEY, required=True, help="Mint providers stake.")
@click.option("--payment-mint", type=PUBKEY, required=True, help="Mint users pay in.")
@click.option(
    "--treasury",
    type=PUBKEY,
    default=None,
    help="Payment-mint token account for fees (default: your ATA, created if missing).",
)
@_param_options(defaults=True)
def market_init(env: Env, market_id: int, stake_mint: Pubkey, payment_mint: Pubkey,
                treasury: Pubkey | None, min_stake_per_gpu: str, validator_min_bond: str,
                **params: int) -> None:  # fmt: skip
    """Create a market and its stake and fee vaults; prints the market address."""
    from .. import pda, tokens

    kp = env.keypair
    client = env.client
    decimals = client.mint_decimals(stake_mint)
    client.mint_decimals(payment_mint)  # fails clearly if it is not a mint
    params["min_stake_per_gpu"] = _amount(min_stake_per_gpu, decimals, "'--min-stake-per-gpu'", True)
    params["validator_min_bond"] = _amount(validator_min_bond, decimals, "'--validator-min-bond'", True)
    if treasury is None:
        treasury = tokens.create_ata(client, kp, kp.pubkey(), payment_mint)
    address = pda.market_pda(kp.pubkey(), market_id, client.program_id)
    sig = client.initialize_market(kp, market_id, stake_mint, payment_mint, treasury, params)
    env.emit(
        {"market": str(address), "treasury": str(treasury), "signature": str(sig)},
        [f"market: {address}", f"treasury: {treasury}", f"signature: {sig}"],
    )


@market.command("status")
@_common
@_market_option
def market_status(env: Env, market: Pubkey) -> None:
    """Show a market's parameters in force, announced changes and when they take effect, its
    totals, and the fees in its fee vault waiting for `gpum market withdraw-fees`."""
    from ..accounts import effective_params
    from ..errors import AccountNotFound

    m = _market(env, market)
    now = _now(env)
    sd = env.client.mint_decimals(m.stake_mint)
    pd_ = env.client.mint_decimals(m.payment_mint)
    in_force = effective_params(m, now)
    pending = None
    if m.params_effective_at != 0 and now < m.params_effective_at:
        current, new = _params_dict(in_force), _params_dict(m.pending_params)
        pending = {
            "effective_at": m.params_effective_at,
            "effective_in_seconds": m.params_effective_at - now,
            "changes": {k: f"{current[k]} -> {new[k]}" for k in new if new[k] != current[k]},
        }
    try:
        fees_waiting: str | None = format_ui_amount(env.client.fees_to_withdraw(m), pd_)
    except AccountNotFound:
        fees_waiting = None
    data = {
        "market": str(market),
        "authority": str(m.authority),
        "id": m.id,
        "stake_mint": str(m.stake_mint),
        "payment_mint": str(m.payment_mint),
        "treasury": str(m.treasury),
        "fee_vault": str(m.fee_vault),
        "fees_to_withdraw": fees_waiting,
        "paused": m.paused,
        "chain_time": now,
        "params": _params_dict(in_force),
        "pending_params": pending,
        "totals": {
            "staked": format_ui_amount(m.totals.staked, sd),
            "bonded": format_ui_amount(m.totals.bonded, sd),
            "burned": format_ui_amount(m.totals.burned, pd_),
            "fees": format_ui_amount(m.totals.fees, pd_),
            "validator_rewards": format_ui_amount(m.totals.rewards, pd_),
            "validator_rewards_unclaimed": format_ui_amount(m.totals.rewards_unclaimed, pd_),
            "jobs": m.totals.jobs,
        },
    }
    if env.output != "json" and pending is None:
        data["pending_params"] = "none"
    env.emit(data)


# ----------------------------------------------------------------------------- governance


def _market_flag(name: str, paused: bool, doc: str) -> None:
    @market.command(name, help=doc)
    @_common
    @_market_option
    def command(env: Env, market: Pubkey) -> None:
        sig = env.client.set_paused(env.keypair, market, paused)
        env.emit({"market": str(market), "paused": paused, "signature": str(sig)})


_market_flag("pause", True, "Pause new registrations and jobs (market authority).")
_market_flag("unpause", False, "Resume new registrations and jobs (market authority).")


@market.command("update-params")
@_common
@_market_option
@_param_options(defaults=False)
def market_update_params(env: Env, market: Pubkey, min_stake_per_gpu: str | None,
                         validator_min_bond: str | None, **params: int | None) -> None:  # fmt: skip
    """Announce new values for the given market parameters; the others keep their announced
    values. They take effect unbonding_seconds (of the parameters in force) after the
    announcement, at once when that is 0; jobs already created keep their terms (market
    authority)."""
    changes: dict[str, int] = {k: v for k, v in params.items() if v is not None}
    if not changes and min_stake_per_gpu is None and validator_min_bond is None:
        raise click.UsageError("nothing to update: pass at least one parameter option")
    if min_stake_per_gpu is not None or validator_min_bond is not None:
        decimals = env.client.mint_decimals(_market(env, market).stake_mint)
        if min_stake_per_gpu is not None:
            changes["min_stake_per_gpu"] = _amount(min_stake_per_gpu, decimals, "'--min-stake-per-gpu'", True)
        if validator_min_bond is not None:
            changes["validator_min_bond"] = _amount(validator_min_bond, decimals, "'--validator-min-bond'", True)
    sig = env.client.update_params(env.keypair, market, changes)
    m = _market(env, market)
    effective_at = m.params_effective_at or "now"
    env.emit({"market": str(market), "announced": changes, "effective_at": effective_at,
              "signature": str(sig)})  # fmt: skip


@market.command("set-treasury")
@_common
@_market_option
@click.argument("account", metavar="ACCOUNT", type=PUBKEY)
def market_set_treasury(env: Env, market: Pubkey, account: Pubkey) -> None:
    """Make ACCOUNT (a token account of the market's payment mint) the treasury that
    `gpum market withdraw-fees` pays, at once (market authority)."""
    from .. import tokens
    from ..constants import TOKEN_PROGRAM_ID

    m = _market(env, market)
    info = env.client.account_info(account)
    parsed = None
    if info is not None and info[0] == TOKEN_PROGRAM_ID:
        try:
            parsed = tokens.parse_token_account(info[1])
        except ValueError:
            parsed = None
    if parsed is None or parsed.mint != m.payment_mint:
        raise CliError(
            f"{account} is not a token account of the payment mint {m.payment_mint}; create one "
            f"with `spl-token create-account {m.payment_mint} --owner OWNER` and pass its address"
        )
    sig = env.client.set_treasury(env.keypair, market, account)
    env.emit({"market": str(market), "previous_treasury": str(m.treasury),
              "treasury": str(account), "signature": str(sig)})  # fmt: skip


@market.command("sweep-vault")
@_common
@_market_option
def market_sweep_vault(env: Env, market: Pubkey) -> None:
    """Move tokens sent straight to the stake vault (its balance above the booked stake and
    bonds) to the treasury owner's stake-mint ATA, created if missing (anyone; you pay)."""
    from .. import tokens

    m = _market(env, market)
    surplus = env.client.vault_surplus(market)
    decimals = env.client.mint_decimals(m.stake_mint)
    if surplus == 0:
        raise CliError(
            f"the stake vault holds no more than the booked stake and bonds "
            f"({format_ui_amount(m.booked_stake, decimals)}): nothing to sweep"
        )
    destination = tokens.ata(env.client.treasury_owner(m), m.stake_mint)
    sig = env.client.sweep_vault(env.keypair, market)
    env.emit({"market": str(market), "swept": format_ui_amount(surplus, decimals),
              "destination": str(destination), "signature": str(sig)})  # fmt: skip


@market.command("withdraw-fees")
@_common
@_market_option
def market_withdraw_fees(env: Env, market: Pubkey) -> None:
    """Move the fees waiting in the market's fee vault (the treasury share of every
    settlement) to its treasury account (anyone; you pay the transaction fee)."""
    m = _market(env, market)
    decimals = env.client.mint_decimals(m.payment_mint)
    waiting = env.client.fees_to_withdraw(m)
    if waiting == 0:
        raise CliError(f"the fee vault {m.fee_vault} holds nothing: no fees to withdraw yet")
    sig = env.client.withdraw_fees(env.keypair, market)
    moved = next((d["amount"] for name, d in env.client.events(sig) if name == "FeesWithdrawn"), waiting)
    env.emit({"market": str(market), "withdrawn": format_ui_amount(moved, decimals),
              "treasury": str(m.treasury), "signature": str(sig)})  # fmt: skip


@market.command("propose-authority")
@_common
@_market_option
@click.argument("new_authority", metavar="NEW_AUTHORITY", type=PUBKEY)
def market_propose_authority(env: Env, market: Pubkey, new_authority: Pubkey) -> None:
    """Name NEW_AUTHORITY as the next market authority; it must run accept-authority
    (11111111111111111111111111111111 cancels a proposal)."""
    sig = env.client.propose_authority(env.keypair, market, new_authority)
    env.emit({"market": str(market), "proposed_authority": str(new_authority), "signature": str(sig)})


@market.command("accept-authority")
@_common
@_market_option
def market_accept_authority(env: Env, market: Pubkey) -> None:
    """Become the market authority (your keypair must be the proposed one)."""
    kp = env.keypair
    sig = env.client.accept_authority(kp, market)
    env.emit({"market": str(market), "authority": str(kp.pubkey()), "signature": str(sig)})
