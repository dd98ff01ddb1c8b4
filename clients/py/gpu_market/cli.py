"""``gpum``: command-line client of gpu-market.

Solana CLI conventions: ``--url/-u`` (``localnet``, ``devnet``, ``testnet``, ``mainnet-beta``
or a URL), ``--keypair/-k`` (Solana JSON keypair file, default ``~/.config/solana/id.json``);
both default to the Solana CLI config file when it exists. Common options work before or
after the subcommand. Token amounts are in UI units of the mint (``1.5`` = 1.5 tokens),
parsed exactly. ``--output json`` prints one JSON object per command.

Every expected failure prints one line ``error: ...`` saying what to do, and exits with 2
(bad input) or 1 (chain, RPC or file problems); never a traceback (set ``GPUM_DEBUG=1`` to
see one for unexpected errors).

Shared plumbing lives in :mod:`gpu_market.cli_base`; the ``validator`` group and the committee
commands of ``job`` (``replace-member``, the committee choice of ``create``) in
:mod:`gpu_market.cli_committee`. This module assembles the command tree and runs it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import click
from solders.pubkey import Pubkey

from . import cli_committee, cli_offers, cli_run, cli_workload
from .cli_base import PUBKEY, CliError, Env, load_keypair, resolve_url
from .cli_base import common as _common
from .cli_base import job_view as _job_view
from .cli_base import market_option as _market_option
from .cli_base import market_view as _market
from .cli_base import now as _now
from .cli_base import one_line as _one_line
from .cli_base import params_dict as _params_dict
from .cli_base import parse_amount as _amount
from .constants import (
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
from .units import format_ui_amount

__all__ = ["cli", "load_keypair", "main", "resolve_url"]


def _param_options(defaults: bool) -> Callable[[Callable], Callable]:
    """One option per market parameter, bounded as the program bounds it (``state/market.rs``).
    ``defaults``: show and use DEFAULT_MARKET_PARAMS (market init); else None = unchanged."""
    from .accounts import DEFAULT_MARKET_PARAMS as D

    options = [
        ("--fee-bps", click.IntRange(0, MAX_FEE_BPS), None),
        ("--burn-bps", click.IntRange(0, 10_000), None),
        ("--min-stake-per-gpu", None, "Stake-mint UI units."),
        ("--unbonding-seconds", click.IntRange(0, MAX_UNBONDING_SECONDS),
         "Also the delay before a parameter change takes effect."),
        ("--window-seconds", click.IntRange(1, MAX_WINDOW_SECONDS), None),
        ("--min-quorum", click.IntRange(1, MAX_QUORUM),
         "Fewest committee members a job may require to agree on a settlement."),
        ("--max-missed-windows", click.IntRange(1, MAX_MISSED_WINDOWS),
         "A job's grace after it ends is (this + 2) windows."),
        ("--downtime-slash-bps", click.IntRange(0, 10_000), None),
        ("--equivocation-slash-bps", click.IntRange(0, 10_000), None),
        ("--reporter-reward-bps", click.IntRange(0, MAX_REPORTER_REWARD_BPS), None),
        ("--validator-min-bond", None, "Stake-mint UI units."),
        ("--max-skew-seconds", click.IntRange(0, MAX_SKEW_SECONDS), None),
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


# ----------------------------------------------------------------------------- commands


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@_common
def cli(env: Env) -> None:
    """gpu-market: rent out and rent GPUs, paid from on-chain escrow."""


@cli.group()
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
    from . import pda, tokens

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
    from .accounts import effective_params
    from .errors import AccountNotFound

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


@cli.group()
def provider() -> None:
    """Register, stake, update, unstake and inspect GPU providers."""


@provider.command("register")
@_common
@_market_option
@click.option("--worker-key", type=PUBKEY, required=True, help="Hot key on the GPU machine.")
@click.option("--gpu-model", required=True, help="e.g. 'NVIDIA H100 80GB HBM3' (<= 32 bytes).")
@click.option("--gpu-count", type=click.IntRange(1, 256), required=True)
@click.option("--vram-mib", type=click.IntRange(0, 2**32 - 1), required=True)
@click.option("--region", default="", help="e.g. 'eu-west' (<= 16 bytes).")
@click.option("--price", required=True, help="Price per GPU-second, payment-mint UI units.")
@click.option("--worker-key-expires-at", type=click.IntRange(0), default=0, help="Unix time; 0 = never.")
@click.option("--endpoint", default="", help="Your worker's public API URL (gpum-worker "
              "--api-listen), where users deliver workloads and read logs; without it you "
              "run no workloads.")
def provider_register(env: Env, market: Pubkey, worker_key: Pubkey, gpu_model: str,
                      gpu_count: int, vram_mib: int, region: str, price: str,
                      worker_key_expires_at: int, endpoint: str) -> None:  # fmt: skip
    """Register your keypair as a provider (creates your payment ATA if missing)."""
    from . import pda, tokens
    from .accounts import GPU_MODEL_LEN, REGION_LEN, encode_fixed_str, encode_optional_endpoint

    try:
        encode_optional_endpoint(endpoint)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--endpoint'") from None

    for value, size, hint in ((gpu_model, GPU_MODEL_LEN, "'--gpu-model'"), (region, REGION_LEN, "'--region'")):
        try:
            encode_fixed_str(value, size, hint.strip("'-"))
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint=hint) from None
    kp = env.keypair
    m = _market(env, market)
    price_base = _amount(price, env.client.mint_decimals(m.payment_mint), "'--price'")
    spec = {"gpu_model": gpu_model, "gpu_count": gpu_count, "vram_mib": vram_mib, "region": region}
    sig = env.client.register_provider(kp, worker_key, spec, price_base, market,
                                       worker_key_expires_at, endpoint=endpoint)
    address = pda.provider_pda(market, kp.pubkey(), env.client.program_id)
    env.emit(
        {
            "provider": str(address),
            "payment_account": str(tokens.ata(kp.pubkey(), m.payment_mint)),
            "signature": str(sig),
        }
    )


@provider.command("stake")
@_common
@_market_option
@click.argument("amount")
def provider_stake(env: Env, market: Pubkey, amount: str) -> None:
    """Stake AMOUNT (stake-mint UI units) from your stake-mint ATA."""
    kp = env.keypair
    m = _market(env, market)
    base = _amount(amount, env.client.mint_decimals(m.stake_mint), "'AMOUNT'")
    sig = env.client.stake(kp, market, base)
    env.emit({"staked": amount, "signature": str(sig)})


@provider.command("status")
@_common
@_market_option
@click.option("--owner", type=PUBKEY, default=None, help="Provider owner (default: your keypair).")
def provider_status(env: Env, market: Pubkey, owner: Pubkey | None) -> None:
    """Show a provider's spec, status, stake and reputation."""
    from . import pda

    owner = owner or env.keypair.pubkey()
    address = pda.provider_pda(market, owner, env.client.program_id)
    p = env.client.fetch_provider(address)
    if p is None:
        raise CliError(f"{owner} is not a provider of market {market}; run `gpum provider register`")
    m = _market(env, market)
    sd = env.client.mint_decimals(m.stake_mint)
    pdec = env.client.mint_decimals(m.payment_mint)
    env.emit(
        {
            "provider": str(address),
            "owner": str(p.owner),
            "worker_key": str(p.worker_key),
            "worker_key_expires_at": p.worker_key_expires_at or "never",
            "retired_worker_keys": [f"{r.key} (retired at {r.retired_at})"
                                    for r in p.retired_worker_keys],
            "status": p.status if p.jailed_until is None else f"jailed until {p.jailed_until}",
            "gpu_model": p.spec.gpu_model,
            "gpus": f"{p.gpus_in_use}/{p.spec.gpu_count} in use",
            "vram_mib": p.spec.vram_mib,
            "region": p.spec.region,
            "price_per_gpu_second": format_ui_amount(p.price_per_gpu_second, pdec),
            "stake": format_ui_amount(p.stake, sd),
            "unbonding": format_ui_amount(p.unbonding.amount, sd),
            "verified_seconds": p.reputation.verified_seconds,
            "jobs_completed": p.reputation.jobs_completed,
        }
    )


cli.add_command(cli_committee.validator)
cli.add_command(cli_offers.offers)
cli.add_command(cli_run.run)


@cli.group()
def job() -> None:
    """Create, inspect, top up, finish, cancel, decline, expire, complete, close jobs and
    replace committee members."""


job.add_command(cli_committee.job_replace_member)
job.add_command(cli_workload.job_deliver)
job.add_command(cli_workload.job_logs)
job.add_command(cli_run.job_watch)


@job.command("create")
@_common
@_market_option
@click.option("--provider", "provider_", type=PUBKEY, required=True,
              help="Provider account address (see `gpum provider status`).")  # fmt: skip
@click.option("--gpu-count", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--deposit", required=True, help="Escrow deposit, payment-mint UI units.")
@click.option("--max-price", default=None,
              help="Highest price per GPU-second you accept, payment-mint UI units (default: "
                   "the provider's price now); the job is refused if the provider's price is "
                   "above it when the transaction lands.")  # fmt: skip
@click.option("--job-id", type=click.IntRange(0, 2**64 - 1), default=None,
              help="Default: current unix time in milliseconds.")  # fmt: skip
@click.option("--committee", default=None, metavar="AUTHORITY[,AUTHORITY...]",
              help="1..5 validator authorities that approve and settle your job (default: up to "
                   "3 Active validators by bond whose endpoint answers /health).")  # fmt: skip
@click.option("--quorum", type=click.IntRange(1, MAX_QUORUM), default=None,
              help="Committee members that must agree on each settlement (default: a majority "
                   "of the committee, at least the market's min_quorum).")  # fmt: skip
@cli_workload.workload_options
def job_create(env: Env, market: Pubkey, provider_: Pubkey, gpu_count: int, deposit: str,
               max_price: str | None, job_id: int | None, committee: str | None,
               quorum: int | None, workload: dict[str, Any] | None) -> None:  # fmt: skip
    """Open a job on a provider, with its validator committee, and escrow the deposit from your
    payment ATA. Prints the committee and quorum chosen. With --image, the job runs that
    container on its GPUs: the spec's hash goes on chain with the job and the spec to the
    provider's worker, signed by your wallet."""
    from .errors import GpuMarketError

    kp = env.keypair
    m = _market(env, market)
    decimals = env.client.mint_decimals(m.payment_mint)
    base = _amount(deposit, decimals, "'--deposit'")
    p = env.client.fetch_provider(provider_)
    if p is None:
        raise CliError(f"provider {provider_} does not exist on {env.client.url}; pass the "
                       "provider account address (see `gpum provider status`)")  # fmt: skip
    price = p.price_per_gpu_second
    limit = price if max_price is None else _amount(max_price, decimals, "'--max-price'", True)
    if price > limit:
        raise CliError(_price_above_limit(price, limit, decimals))
    need = env.client.min_deposit(market, provider_, gpu_count)
    if base < need:
        raise click.BadParameter(
            f"{deposit} is less than one window at this provider's rate for {gpu_count} GPU(s): "
            f"deposit at least {format_ui_amount(need, decimals)}",
            param_hint="'--deposit'",
        )
    spec = None if workload is None else cli_workload.build_spec(workload, p)
    members, quorum = cli_committee.choose_committee(env, market, m, p, committee, quorum)
    job_id = int(time.time() * 1000) if job_id is None else job_id
    workload_hash = None
    if spec is not None:
        from .pda import job_pda
        from .workload import spec_hash

        workload_hash = spec_hash(spec)
        cli_workload.save_spec(job_pda(market, kp.pubkey(), job_id, env.client.program_id), spec)
    try:
        sig, address = env.client.create_job(kp, market, provider_, job_id, gpu_count, base,
                                             committee=members, quorum=quorum,
                                             max_price_per_gpu_second=limit,
                                             workload_hash=workload_hash)  # fmt: skip
    except GpuMarketError as e:
        if e.name != "PriceAboveLimit":
            raise
        now = env.client.fetch_provider(provider_)
        raise CliError(_price_above_limit(now.price_per_gpu_second if now else None, limit,
                                          decimals)) from None  # fmt: skip
    data = {"job": str(address), "job_id": job_id,
            "max_price_per_gpu_second": format_ui_amount(limit, decimals),
            "committee": [str(k) for k in members], "quorum": quorum,
            "signature": str(sig)}  # fmt: skip
    if spec is not None:
        answer = cli_workload.deliver_saved(env, address, spec, provider_)
        data["workload"] = {"workload_hash": workload_hash.hex(), "image": spec.image,
                            "delivered_to": p.endpoint, "state": answer.get("state")}
    env.emit(data)


def _price_above_limit(price: int | None, limit: int, decimals: int) -> str:
    """The one-line answer to ``PriceAboveLimit`` (checked before sending, or on chain)."""
    now = "above" if price is None else f"{format_ui_amount(price, decimals)}, above"
    accept = "" if price is None else f" {format_ui_amount(price, decimals)}"
    return (f"the provider's price per GPU-second is now {now} your --max-price "
            f"{format_ui_amount(limit, decimals)}; no job was created and nothing was charged: "
            f"check it with `gpum provider status` and pass --max-price{accept} or more to "
            "accept it")


@job.command("status")
@_common
@click.argument("job_address", metavar="JOB", type=PUBKEY)
def job_status(env: Env, job_address: Pubkey) -> None:
    """Show a job's state, its terms (fixed at creation) and money flows."""
    from . import pda
    from .errors import AccountNotFound

    j = _job_view(env, job_address)
    m = _market(env, j.market)
    d = env.client.mint_decimals(m.payment_mint)
    try:
        escrow: int | None = env.client.token_balance(pda.escrow_pda(job_address, env.client.program_id))
    except AccountNotFound:
        escrow = None
    terms = _params_dict(j.terms)
    terms["rate_per_second"] = format_ui_amount(j.terms.rate_per_second, d)
    data: dict[str, Any] = {
        "job": str(job_address),
        "status": j.status,
        "user": str(j.user),
        "provider": str(j.provider),
        "gpu_count": j.gpu_count,
        "committee": [str(k) for k in j.committee],
        "quorum": j.terms.quorum,
        "terms": terms,
        "deposited": format_ui_amount(j.deposited, d),
        "claimed_seconds": j.claimed_seconds,
        "paid_seconds": j.paid_seconds,
        "paid_provider": format_ui_amount(j.paid_provider, d),
        "paid_validators": format_ui_amount(j.paid_validators, d),
        "paid_treasury": format_ui_amount(j.paid_treasury, d),
        "burned": format_ui_amount(j.burned, d),
        "refunded": format_ui_amount(j.refunded, d),
        "booked_escrow": format_ui_amount(j.booked_escrow, d),
        "escrow": None if escrow is None else format_ui_amount(escrow, d),
        "last_seq": j.last_seq,
        "last_window_end": j.last_window_end,
        "created_at": j.created_at,
        "started_at": j.started_at,
        "ended_at": j.ended_at,
    }
    if escrow is not None and escrow > j.booked_escrow:
        data["escrow_surplus"] = format_ui_amount(escrow - j.booked_escrow, d)
    if j.grace_ends_at is not None:
        data["grace_ends_at"] = j.grace_ends_at  # close / complete strictly after
    if j.expirable_after is not None:
        data["expirable_after"] = j.expirable_after  # expire strictly after
    workload = cli_workload.workload_summary(env, j)
    if workload is not None:
        data["workload"] = workload
    env.emit(data)


def _require_settlement_over(env: Env, job_address: Pubkey, command: str) -> None:
    """CliError, before anything is sent, when ``command`` would fail on the job's state or
    grace (the chain's clock decides, as on chain)."""
    j = _job_view(env, job_address)
    if j.status in ("open", "running"):
        hint = "`gpum job cancel` or have the provider decline it" if j.status == "open" else (
            "`gpum job finish` it first")
        raise CliError(f"job {job_address} is {j.status}: {command} needs a finished job; {hint}")
    if command == "complete" and j.status != "finishing":
        raise CliError(f"job {job_address} is {j.status}, not finishing: nothing to complete")
    grace_end = j.grace_ends_at
    if grace_end is not None:
        now = _now(env)
        if now <= grace_end:
            raise CliError(
                f"job {job_address} is in its settlement grace until {grace_end} (chain time "
                f"{now}): run `gpum job {command}` again in {grace_end - now + 1} s"
            )


def _job_action(name: str, method: str, doc: str, precheck: bool = False) -> None:
    @job.command(name, help=doc)
    @_common
    @click.argument("job_address", metavar="JOB", type=PUBKEY)
    def command(env: Env, job_address: Pubkey) -> None:
        kp = env.keypair
        if precheck:
            _require_settlement_over(env, job_address, name)
        sig = getattr(env.client, method)(kp, job_address)
        env.emit({"job": str(job_address), "signature": str(sig)})


_job_action("accept", "accept_job", "Start an Open job (worker key or provider owner).")
_job_action("finish", "finish_job",
            "Stop billing a Running job (user or provider owner); receipts up to now still "
            "settle during the job's grace (terms.grace_seconds).")  # fmt: skip
_job_action("close", "close_job",
            "Refund the rest and close a job (user): at once when completed, cancelled, "
            "declined or failed; after its grace when finishing.", precheck=True)  # fmt: skip
_job_action("decline", "decline_job",
            "Refuse an Open job (provider owner or worker key); the user's close refunds it.")
_job_action("complete", "complete_job",
            "Complete a finishing job whose grace is over, freeing the provider's GPUs "
            "(anyone); the user's close refunds the rest.", precheck=True)  # fmt: skip


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
    from . import tokens
    from .constants import TOKEN_PROGRAM_ID

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
    from . import tokens

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


# ----------------------------------------------------------------------------- provider upkeep


@provider.command("update")
@_common
@_market_option
@click.option("--price", default=None, help="Price per GPU-second, payment-mint UI units.")
@click.option("--gpu-model", default=None, help="<= 32 bytes.")
@click.option("--gpu-count", type=click.IntRange(1, 256), default=None)
@click.option("--vram-mib", type=click.IntRange(0, 2**32 - 1), default=None)
@click.option("--region", default=None, help="<= 16 bytes.")
@click.option("--accepting-jobs/--not-accepting-jobs", "accepting_jobs", default=None,
              help="Take new jobs (Active) or stop taking them (Paused).")  # fmt: skip
@click.option("--endpoint", default=None, help="Your worker's public API URL; '' removes it.")
def provider_update(env: Env, market: Pubkey, price: str | None, gpu_model: str | None,
                    gpu_count: int | None, vram_mib: int | None, region: str | None,
                    accepting_jobs: bool | None, endpoint: str | None) -> None:  # fmt: skip
    """Change your provider's price, spec or availability (running jobs keep their rate)."""
    from . import pda
    from .accounts import GPU_MODEL_LEN, REGION_LEN, encode_fixed_str

    spec = {k: v for k, v in (("gpu_model", gpu_model), ("gpu_count", gpu_count),
                               ("vram_mib", vram_mib), ("region", region)) if v is not None}  # fmt: skip
    if price is None and not spec and accepting_jobs is None and endpoint is None:
        raise click.UsageError("nothing to update: pass --price, a spec option, --endpoint or "
                               "--accepting-jobs/--not-accepting-jobs")  # fmt: skip
    if endpoint is not None:
        from .accounts import encode_optional_endpoint

        try:
            encode_optional_endpoint(endpoint)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--endpoint'") from None
    for key, size in (("gpu_model", GPU_MODEL_LEN), ("region", REGION_LEN)):
        if key in spec:
            try:
                encode_fixed_str(spec[key], size, key)
            except ValueError as e:
                raise click.BadParameter(str(e), param_hint=f"'--{key.replace('_', '-')}'") from None
    kp = env.keypair
    price_base = None
    if price is not None:
        price_base = _amount(price, env.client.mint_decimals(_market(env, market).payment_mint), "'--price'")
    address = pda.provider_pda(market, kp.pubkey(), env.client.program_id)
    sig = env.client.update_provider(kp, address, price_base, spec or None, accepting_jobs,
                                     endpoint=endpoint)
    env.emit({"provider": str(address), "signature": str(sig)})


@provider.command("rotate-key")
@_common
@_market_option
@click.argument("new_worker_key", metavar="NEW_WORKER_KEY", type=PUBKEY)
@click.option("--expires-at", type=click.IntRange(0), default=0, help="Unix time; 0 = never.")
def provider_rotate_key(env: Env, market: Pubkey, new_worker_key: Pubkey, expires_at: int) -> None:
    """Replace your worker key now; receipts the old key signed for earlier windows still
    settle for max_missed_windows windows."""
    sig = env.client.rotate_worker_key(env.keypair, market, new_worker_key, expires_at)
    env.emit({"worker_key": str(new_worker_key), "signature": str(sig)})


@provider.command("unstake")
@_common
@_market_option
@click.argument("amount")
def provider_unstake(env: Env, market: Pubkey, amount: str) -> None:
    """Start unbonding AMOUNT (stake-mint UI units) of your stake."""
    m = _market(env, market)
    base = _amount(amount, env.client.mint_decimals(m.stake_mint), "'AMOUNT'")
    sig = env.client.request_unstake(env.keypair, market, base)
    env.emit({"unstaking": amount, "signature": str(sig)})


@provider.command("withdraw")
@_common
@_market_option
def provider_withdraw(env: Env, market: Pubkey) -> None:
    """Withdraw released unbonding stake to your stake-mint ATA."""
    from . import pda

    kp = env.keypair
    address = pda.provider_pda(market, kp.pubkey(), env.client.program_id)
    p = env.client.fetch_provider(address)
    if p is None:
        raise CliError(f"{kp.pubkey()} is not a provider of market {market}")
    m = _market(env, market)
    amount = format_ui_amount(p.unbonding.amount, env.client.mint_decimals(m.stake_mint))
    sig = env.client.withdraw_unstaked(kp, market)
    env.emit({"withdrawn": amount, "signature": str(sig)})


# ----------------------------------------------------------------------------- job upkeep


@job.command("top-up")
@_common
@click.argument("job_address", metavar="JOB", type=PUBKEY)
@click.argument("amount")
def job_top_up(env: Env, job_address: Pubkey, amount: str) -> None:
    """Add AMOUNT (payment-mint UI units) to an Open or Running job's escrow (user)."""
    j = _job_view(env, job_address)
    m = _market(env, j.market)
    base = _amount(amount, env.client.mint_decimals(m.payment_mint), "'AMOUNT'")
    sig = env.client.top_up(env.keypair, job_address, base)
    env.emit({"job": str(job_address), "topped_up": amount, "signature": str(sig)})


_job_action("cancel", "cancel_job", "Cancel an Open job with a full refund (user).")
_job_action("expire", "expire_job",
            "Fail a Running job whose provider stopped proving (anyone; see `job status` "
            "expirable_after); the user's close then refunds it.")  # fmt: skip


# ----------------------------------------------------------------------------- entry point


PROGRAM_ERROR_HINTS = {
    "PriceAboveLimit": "the provider raised its price before your job landed; nothing was "
                       "charged: check `gpum provider status` and retry with a higher --max-price",
    "NothingToWithdrawFees": "no settlement has paid fees since the last withdrawal",
    "InvalidFeeVault": "pass the market's fee_vault (see `gpum market status`)",
    "InvalidCommittee": "name 1..5 distinct active validators of this market, not the provider "
                        "(see `gpum validator status AUTHORITY`)",
    "InvalidJobQuorum": "pass --quorum between the market's min_quorum (`gpum market status`) "
                        "and min(3, committee size)",
    "MemberStillActive": "only a member that exited or closed can be replaced",
    "NothingToClaim": "no settlement you attested has credited rewards since your last claim",
    "BondTooSmall": "bond at least the market's validator_min_bond (`gpum market status`)",
}
"""What to do next, appended to the program's message for errors a command does not answer
itself."""


def main(argv: list[str] | None = None) -> int:
    """Run ``gpum``; returns (and, as a script, exits with) the exit code."""
    from .errors import GpuMarketError, SdkError
    from .idl import IdlConversionError, IdlNotFound

    prog = "gpum"
    try:
        cli.main(args=argv, prog_name=prog, standalone_mode=False)
        return 0
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.Abort:
        click.echo("error: aborted", err=True)
        return 1
    except click.UsageError as e:
        cmd = e.ctx.command_path if e.ctx else prog
        click.echo(f"error: {_one_line(e.format_message())} (see `{cmd} --help`)", err=True)
        return 2
    except click.ClickException as e:
        click.echo(f"error: {_one_line(e.format_message())}", err=True)
        return e.exit_code
    except GpuMarketError as e:
        hint = PROGRAM_ERROR_HINTS.get(e.name)
        tail = f"; {hint}" if hint else ""
        click.echo(f"error: program error {e.name} ({e.code}): {_one_line(e.message)}{tail}", err=True)
        return 1
    except (SdkError, IdlNotFound, IdlConversionError) as e:
        click.echo(f"error: {_one_line(str(e))}", err=True)
        return 1
    except ValueError as e:
        click.echo(f"error: {_one_line(str(e))}", err=True)
        return 2
    except Exception as e:
        if os.environ.get("GPUM_DEBUG"):
            raise
        click.echo(
            f"error: unexpected {type(e).__name__}: {_one_line(str(e))} "
            "(set GPUM_DEBUG=1 for a traceback)",
            err=True,
        )
        return 1


def _entry() -> None:  # pragma: no cover
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    _entry()
