"""``gpum job ...``: create a job on a provider with its validator committee, show it, top it
up, and end it (accept, finish, decline, expire, complete); replace a committee member; and
:func:`choose_committee`, the committee and quorum ``job create`` and ``gpum run`` propose or
check.

``job list``, ``job stop``, ``job close``, ``job cancel`` and job names (``--name``) live in
:mod:`gpu_market.cli.job_control`.

The group's workload commands (``job deliver``, ``job logs``) live in
:mod:`gpu_market.cli.workload` and ``job watch`` in :mod:`gpu_market.cli.watch`; this module
attaches them.
"""

from __future__ import annotations

import time
from typing import Any

import click
from solders.pubkey import Pubkey

from ..constants import MAX_COMMITTEE, MAX_QUORUM
from ..units import SECONDS_PER_HOUR, format_price_per_hour, format_ui_amount
from . import exec as cli_exec
from . import job_control
from . import managed as cli_managed
from . import workload as cli_workload
from .base import JOB, PUBKEY, CliError, Env, emit_dated
from .base import common as _common
from .base import job_view as _job_view
from .base import market_option as _market_option
from .base import market_view as _market
from .base import now as _now
from .base import params_dict as _params_dict
from .base import parse_amount as _amount
from .job_control import check_job_name, name_option, remember_job, require_settlement_over
from .watch import job_watch

__all__ = ["DEFAULT_COMMITTEE_SIZE", "choose_committee", "job"]

DEFAULT_COMMITTEE_SIZE = 3
"""Validators ``gpum job create`` proposes when no ``--committee`` is given (fewer if fewer
Active validators answer ``/health``)."""


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
    from ..accounts import effective_params
    from ..committee import default_quorum

    min_quorum = effective_params(market_view, _now(env)).min_quorum
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


@click.group()
def job() -> None:
    """Create, list, inspect, top up, stop, finish, cancel, decline, expire, complete, close
    and rate jobs, and replace committee members. JOB is a job's address or the --name you
    gave it."""


job.add_command(cli_workload.job_deliver)
job.add_command(cli_workload.job_logs)
job.add_command(job_watch)
job.add_command(cli_exec.job_exec)
job.add_command(cli_exec.job_cp)
job.add_command(cli_managed.job_migrate)
for _command in (job_control.job_list, job_control.job_stop, job_control.job_close,
                 job_control.job_cancel, job_control.job_rate):  # fmt: skip
    job.add_command(_command)


@job.command("create")
@_common
@_market_option
@click.option("--provider", "provider_", type=PUBKEY, required=True,
              help="Provider account address (see `gpum provider status`).")  # fmt: skip
@click.option("--gpu-count", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--deposit", required=True, help="Escrow deposit, payment-mint UI units.")
@click.option("--max-price", default=None,
              help="Highest price per GPU-hour you accept, payment-mint UI units, as `gpum "
                   "offers` shows it (default: the provider's price now); the job is refused if "
                   "the provider's price is above it when the transaction lands.")  # fmt: skip
@click.option("--job-id", type=click.IntRange(0, 2**64 - 1), default=None,
              help="Default: current unix time in milliseconds.")  # fmt: skip
@click.option("--committee", default=None, metavar="AUTHORITY[,AUTHORITY...]",
              help="1..5 validator authorities that approve and settle your job (default: up to "
                   "3 Active validators by bond whose endpoint answers /health).")  # fmt: skip
@click.option("--quorum", type=click.IntRange(1, MAX_QUORUM), default=None,
              help="Committee members that must agree on each settlement (default: a majority "
                   "of the committee, at least the market's min_quorum).")  # fmt: skip
@name_option
@cli_workload.workload_options
def job_create(env: Env, market: Pubkey, provider_: Pubkey, gpu_count: int, deposit: str,
               max_price: str | None, job_id: int | None, committee: str | None,
               quorum: int | None, name: str | None, workload: dict[str, Any] | None) -> None:  # fmt: skip
    """Open a job on a provider, with its validator committee, and escrow the deposit from your
    payment ATA. Prints the committee and quorum chosen. With --image, the job runs that
    container on its GPUs: the spec's hash goes on chain with the job and the spec to the
    provider's worker, signed by your wallet."""
    from ..errors import GpuMarketError

    kp = env.keypair
    m = _market(env, market)
    decimals = env.client.mint_decimals(m.payment_mint)
    base = _amount(deposit, decimals, "'--deposit'")
    p = env.client.fetch_provider(provider_)
    if p is None:
        raise CliError(f"provider {provider_} does not exist on {env.client.url}; pass the "
                       "provider account address (see `gpum provider status`)")  # fmt: skip
    price = p.price_per_gpu_second
    limit = price  # the highest whole price per GPU-second within --max-price per GPU-hour:
    if max_price is not None:
        limit = _amount(max_price, decimals, "'--max-price'", True) // SECONDS_PER_HOUR
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
    members, quorum = choose_committee(env, market, m, p, committee, quorum)
    check_job_name(env, name)
    job_id = int(time.time() * 1000) if job_id is None else job_id
    workload_hash = None
    if spec is not None:
        from ..pda import job_pda
        from ..workload import spec_hash

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
    remember_job(env, address, market, job_id, name)
    data = {"job": str(address), **({"name": name} if name else {}), "job_id": job_id,
            "max_price_per_gpu_hour": format_price_per_hour(limit, decimals),
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
    now = "above" if price is None else f"{format_price_per_hour(price, decimals)}, above"
    accept = "" if price is None else f" {format_price_per_hour(price, decimals)}"
    return (f"the provider's price per GPU-hour is now {now} your --max-price "
            f"{format_price_per_hour(limit, decimals)}; no job was created and nothing was charged: "
            f"check it with `gpum provider status` and pass --max-price{accept} or more to "
            "accept it")


@job.command("status")
@_common
@click.argument("job_address", metavar="JOB", type=JOB)
def job_status(env: Env, job_address: Pubkey) -> None:
    """Show a job's state, its terms (fixed at creation) and money flows; for a managed job
    (JOB its name), its current attempt and the history of its attempts."""
    from .. import pda
    from ..errors import AccountNotFound

    j = _job_view(env, job_address)
    m = _market(env, j.market)
    d = env.client.mint_decimals(m.payment_mint)
    try:
        escrow: int | None = env.client.token_balance(pda.escrow_pda(job_address, env.client.program_id))
    except AccountNotFound:
        escrow = None
    terms = _params_dict(j.terms)
    terms["rate_per_second"] = format_ui_amount(j.terms.rate_per_second, d)
    if env.output != "json":
        del terms["rate_per_second"]  # a person reads rate_per_hour
    workload = cli_workload.workload_summary(env, j)
    ended: dict[str, Any] = {}
    if workload is not None and workload.get("end_reason"):
        ended["ended"] = f"{j.status} - {workload['end_reason']}"
    if workload is not None and workload.get("logs_kept_until"):
        ended["logs_kept_until"] = workload.pop("logs_kept_until")
    data: dict[str, Any] = {
        "job": str(job_address),
        "status": j.status,
        **ended,
        "rate_per_hour": format_price_per_hour(j.terms.rate_per_second, d),
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
    if workload is not None:
        data["workload"] = workload
    managed = cli_managed.status_of(env, job_address)
    if managed is not None and env.output == "json":
        data["managed"] = managed
    emit_dated(env, data, _now(env), ("last_window_end", "created_at", "started_at", "ended_at",
                                      "grace_ends_at", "expirable_after", "logs_kept_until"))
    if managed is not None and env.output != "json":
        env.emit({}, cli_managed.status_lines(managed, d, _now(env)))


def _job_action(name: str, method: str, doc: str, precheck: bool = False) -> None:
    @job.command(name, help=doc)
    @_common
    @click.argument("job_address", metavar="JOB", type=JOB)
    def command(env: Env, job_address: Pubkey) -> None:
        kp = env.keypair
        if precheck:
            require_settlement_over(env, job_address, name)
        sig = getattr(env.client, method)(kp, job_address)
        env.emit({"job": str(job_address), "signature": str(sig)})


_job_action("accept", "accept_job", "Start an Open job (worker key or provider owner).")
_job_action("finish", "finish_job",
            "Stop billing a Running job (user or provider owner); receipts up to now still "
            "settle during the job's grace (terms.grace_seconds).")  # fmt: skip
_job_action("decline", "decline_job",
            "Refuse an Open job (provider owner or worker key); the user's close refunds it.")
_job_action("complete", "complete_job",
            "Complete a finishing job whose grace is over, freeing the provider's GPUs "
            "(anyone); the user's close refunds the rest.", precheck=True)  # fmt: skip


@job.command("top-up")
@_common
@click.argument("job_address", metavar="JOB", type=JOB)
@click.argument("amount")
def job_top_up(env: Env, job_address: Pubkey, amount: str) -> None:
    """Add AMOUNT (payment-mint UI units) to an Open or Running job's escrow (user)."""
    j = _job_view(env, job_address)
    m = _market(env, j.market)
    base = _amount(amount, env.client.mint_decimals(m.payment_mint), "'AMOUNT'")
    sig = env.client.top_up(env.keypair, job_address, base)
    env.emit({"job": str(job_address), "topped_up": amount, "signature": str(sig)})


_job_action("expire", "expire_job",
            "Fail a Running job whose provider stopped proving (anyone; see `job status` "
            "expirable_after); the user's close then refunds it.")  # fmt: skip


@job.command("replace-member")
@_common
@click.argument("job_address", metavar="JOB", type=JOB)
@click.argument("index", metavar="INDEX", type=click.IntRange(0, MAX_COMMITTEE - 1))
@click.argument("new_authority", metavar="NEW_AUTHORITY", type=PUBKEY)
def job_replace_member(env: Env, job_address: Pubkey, index: int, new_authority: Pubkey) -> None:
    """Replace committee member INDEX (0-based, see `gpum job status`) of JOB, which is no
    longer active, by the validator NEW_AUTHORITY (the job's user)."""
    j = _job_view(env, job_address)
    if index >= len(j.committee):
        raise click.BadParameter(f"the job's committee has {len(j.committee)} member(s): 0.."
                                 f"{len(j.committee) - 1}", param_hint="'INDEX'")  # fmt: skip
    previous = j.committee[index]
    sig = env.client.replace_committee_member(env.keypair, job_address, index, new_authority)
    env.emit({"job": str(job_address), "index": index, "previous": str(previous),
              "member": str(new_authority), "signature": str(sig)})  # fmt: skip
