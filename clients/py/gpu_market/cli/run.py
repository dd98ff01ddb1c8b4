"""``gpum run``: rent GPUs and run a container in one command.

``gpum run --gpu MODEL:COUNT --hours H --image IMG ...`` picks the best offer that runs
containers (:func:`gpu_market.offers.best_offer`) or the ``--provider`` named, prices the
deposit for the hours asked, picks the committee, creates the job with its workload exactly as
``gpum job create --image`` does (spec saved, hash on chain, spec delivered), and waits until
the provider accepted and the container runs; it prints the job, the provider, the cost and
the container's published endpoints. Every check that needs no signature (offer, price,
committee, deposit, the user's balance, the workload, and the provider's worker answering
``GET /v1/health``) runs before anything is sent, and ``--dry-run`` stops there: no money moves
for a provider whose worker is down. ``gpum job watch`` (:mod:`gpu_market.cli.watch`) then
keeps an eye on the job's escrow.

Guarantees once the job is created: ``--timeout`` bounds the whole command (health probe,
delivery with its retries, the wait for the container), with ``CANCEL_RESERVE_S`` of it kept
for the cancel; when the delivery fails, the time runs out while the job is still Open, or the
user presses Ctrl-C, the Open job is cancelled (the whole deposit back in the same
transaction) and the refund printed; a job already Running is left running and the error names
the command that stops it (``gpum job stop JOB``).

The flow itself (offer, liveness, deposit, create, delivery, wait, cancel) is the SDK's
:mod:`gpu_market.deployment`, which ``gpu_market.deploy(...)`` runs too; this module adds the
options, the committee and job-name choices, the progress line and the output.
"""

from __future__ import annotations

import sys
import time
from decimal import Decimal
from fractions import Fraction
from typing import Any

import click
from solders.pubkey import Pubkey

from .. import deployment as sdk
from ..constants import MAX_QUORUM
from ..deployment import CANCEL_RESERVE_S, DELIVER_ATTEMPT_S, DeployError, parse_gpu, parse_hours
from ..runway import format_duration
from ..units import format_ui_amount
from . import managed as cli_managed
from . import workload as cli_workload
from .base import (
    PUBKEY,
    CliError,
    Duration,
    Env,
    common,
    market_option,
    market_view,
    now,
    parse_callback,
    token_holding,
)
from .base import parse_amount as _amount
from .job import choose_committee
from .job_control import check_job_name, name_option, remember_job
from .task_file import task_options

__all__ = ["CANCEL_RESERVE_S", "DELIVER_ATTEMPT_S", "parse_gpu", "parse_hours", "run"]

SECONDS_PER_HOUR = 3600
_sleep = time.sleep  # tests replace it
_monotonic = time.monotonic


def _probe(offers: Any, deadline: float) -> dict[Any, Any]:
    """Liveness of ``offers``' workers within ``deadline`` seconds in all (tests replace it)."""
    return sdk.probe_workers(offers, deadline)


def _hooks(progress: Any) -> sdk.Hooks:
    """The SDK flow's clock, sleep, probe and progress: this module's (replaceable) ones, and
    messages naming the command's options."""
    return sdk.Hooks(sleep=lambda s: _sleep(s), monotonic=lambda: _monotonic(),
                     probe=lambda offers, left: _probe(offers, left), progress=progress,
                     flag=sdk.cli_flag)  # fmt: skip


class _Progress:
    """The waiting line on stderr (text mode only): rewritten in place on a terminal, one line
    per change otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()
        self.last = ""

    def show(self, text: str) -> None:
        if not self.enabled:
            return
        if self.tty:
            click.echo("\r\x1b[K" + text, err=True, nl=False)
        elif text.split(" (")[0] != self.last.split(" (")[0]:
            click.echo(text, err=True)
        self.last = text

    def done(self) -> None:
        if self.tty and self.last:
            click.echo("", err=True)


@click.command("run")
@common
@market_option
@click.option("--gpu", metavar="MODEL:COUNT", callback=parse_callback(parse_gpu, "'--gpu'"),
              help="GPU model (a substring of the provider's, case-insensitive) and count, "
                   "e.g. H100:1.")  # fmt: skip
@click.option("--hours", metavar="HOURS", callback=parse_callback(parse_hours, "'--hours'"),
              help="Time to prepay, hours or a duration (2, 0.5, 90m, 1h30m, 2d): the deposit "
                   "is price x GPUs x hours (at least one window); "
                   "top it up later with `gpum job top-up` or `gpum job watch`.")  # fmt: skip
@click.option("--max-price", default=None, metavar="PRICE",
              help="Highest price per GPU-hour you accept, payment-mint UI units (as `gpum "
                   "offers` shows it); the job is refused if the provider's price is above it "
                   "when the transaction lands.")  # fmt: skip
@click.option("--provider", "provider_", type=PUBKEY, default=None,
              help="Use this provider account instead of the best offer.")
@click.option("--committee", default=None, metavar="AUTHORITY[,AUTHORITY...]",
              help="1..5 validator authorities that approve and settle your job (default: up to "
                   "3 Active validators by bond whose endpoint answers /health).")  # fmt: skip
@click.option("--quorum", type=click.IntRange(1, MAX_QUORUM), default=None,
              help="Committee members that must agree on each settlement (default: a majority).")
@click.option("--job-id", type=click.IntRange(0, 2**64 - 1), default=None,
              help="Default: current unix time in milliseconds.")  # fmt: skip
@click.option("--timeout", "wait_timeout", type=Duration(low=1), default=600, show_default=True,
              help="Seconds (or a duration: 90s, 15m) the whole command may take: health "
                   "check, delivery and its retries, the provider accepting and the container "
                   "starting. At the end of it, or on Ctrl-C, a job still Open is cancelled "
                   "with a full refund.")
@click.option("--dry-run", is_flag=True, default=False,
              help="Show the offer, committee, deposit and cost per hour; send nothing.")
@name_option
@task_options
@cli_workload.workload_options
@cli_managed.managed_options
@cli_managed.checkpoint_options
def run(env: Env, market: Pubkey, gpu: tuple[str, int], hours: Fraction, max_price: str | None,
        provider_: Pubkey | None, committee: str | None, quorum: int | None, job_id: int | None,
        wait_timeout: int, dry_run: bool, name: str | None,
        workload: dict[str, Any] | None, managed: dict[str, Any] | None,
        checkpoint: dict[str, Any] | None) -> None:  # fmt: skip
    """Rent GPUs and run a container on them: pick the best offer that runs containers (or
    --provider), escrow the price of --hours, create the job with its workload and wait until
    the container runs. Prints the job, the provider, the cost and the container's published
    endpoints (host:port).

    Nothing is sent unless the provider's worker answers its health check. If the workload
    cannot be delivered, the provider does not accept within --timeout, or you press Ctrl-C,
    the job (still Open) is cancelled and the whole deposit refunded; a job already running is
    left running and the error says how to stop it (`gpum job stop JOB`).

    With --managed, a controller keeps the job alive across provider failures within its
    policy (--max-restarts, --budget, ...): see `gpum job watch --managed` and `gpum job
    migrate`."""
    if workload is None:
        raise click.UsageError("gpum run needs --image IMAGE (to rent GPUs without a container, "
                               "use `gpum job create`)")  # fmt: skip
    if managed is not None:
        if job_id is not None:
            raise click.UsageError("--job-id cannot be given with --managed: each attempt's job "
                                   "id is derived from the managed job")  # fmt: skip
        cli_managed.run_managed(env, market, gpu, hours, max_price, provider_, committee, quorum,
                                wait_timeout, dry_run, name, workload, managed, checkpoint)  # fmt: skip
        return
    model, gpus = gpu
    seconds = hours
    try:
        _run(env, market, model, gpus, seconds, max_price, provider_, committee, quorum, job_id,
             wait_timeout, dry_run, name, workload, checkpoint)  # fmt: skip
    except DeployError as e:
        raise CliError(str(e)) from None


def _run(env: Env, market: Pubkey, model: str, gpus: int, seconds: Fraction, max_price: str | None,
         provider_: Pubkey | None, committee: str | None, quorum: int | None, job_id: int | None,
         wait_timeout: int, dry_run: bool, name: str | None, workload: dict[str, Any],
         checkpoint: dict[str, Any] | None = None) -> None:  # fmt: skip
    """``gpum run`` once its options are parsed: the SDK's flow (:mod:`gpu_market.deployment`)
    with the CLI's workload options, committee choice, job names, output and progress; with
    ``checkpoint``, the store is checked first and its section sealed into the spec."""
    from ..accounts import effective_params
    from ..workload import spec_hash

    stored = None if checkpoint is None else cli_managed.check_checkpoint(checkpoint)
    deadline = _monotonic() + wait_timeout
    work_deadline = deadline - min(CANCEL_RESERVE_S, wait_timeout / 4)
    progress = _Progress(env.output == "text")
    hooks = _hooks(progress)
    m = market_view(env, market)
    decimals = env.client.mint_decimals(m.payment_mint)
    chain_now = now(env)
    params = effective_params(m, chain_now)
    limit: int | None = None
    hour_limit_text = None
    if max_price is not None:
        per_hour = _amount(max_price, decimals, "'--max-price'", True)
        limit = per_hour // SECONDS_PER_HOUR  # the highest whole price per GPU-second within it
        hour_limit_text = format_ui_amount(per_hour, decimals)
    plan = sdk.plan_offer(env.client, market, params, chain_now, model=model, gpus=gpus,
                          seconds=seconds, limit=limit, hour_limit_text=hour_limit_text,
                          decimals=decimals, provider=provider_,
                          left=work_deadline - _monotonic(), hooks=hooks)  # fmt: skip
    offer, p, price, rate, deposit = plan.offer, plan.provider, plan.price, plan.rate, plan.deposit
    spec = cli_workload.build_spec(workload, p)
    if stored is not None:
        from dataclasses import replace

        from ..checkpoint import seal_checkpoint

        spec = replace(spec, checkpoint=seal_checkpoint(*stored, p.worker_key))
    members, quorum = choose_committee(env, market, m, offer, committee, quorum)
    kp = env.keypair
    account, balance = token_holding(env, m.payment_mint)
    if balance < deposit:
        raise CliError(f"your payment account {account} holds {format_ui_amount(balance, decimals)}"
                       f"; the deposit for {_hours_text(seconds)} h needs "
                       f"{format_ui_amount(deposit, decimals)}: fund it, or ask for fewer "
                       "--hours")  # fmt: skip
    covers = deposit // rate if rate else None
    data: dict[str, Any] = {
        "provider": str(offer.provider),
        "gpu_model": offer.gpu_model,
        "gpus": gpus,
        "region": offer.region,
        "score": round(offer.score, 4),
        "price_per_gpu_hour": format_ui_amount(price * SECONDS_PER_HOUR, decimals),
        "cost_per_hour": format_ui_amount(rate * SECONDS_PER_HOUR, decimals),
        "hours": _hours_text(seconds),
        "deposit": format_ui_amount(deposit, decimals),
        "deposit_covers": "forever (free)" if covers is None else format_duration(covers),
        "committee": [str(k) for k in members],
        "quorum": quorum,
        "image": spec.image,
    }
    check_job_name(env, name)
    if dry_run:
        env.emit({"dry_run": True, **data, "balance": format_ui_amount(balance, decimals)})
        return
    from .. import pda

    job_id = int(time.time() * 1000) if job_id is None else job_id
    workload_hash = spec_hash(spec)
    cli_workload.save_spec(pda.job_pda(market, kp.pubkey(), job_id, env.client.program_id), spec)
    sig, address = sdk.create(env.client, kp, market, plan, job_id, gpus, members, quorum,
                              workload_hash, decimals, hooks.flag)  # fmt: skip
    remember_job(env, address, market, job_id, name)
    status = sdk.start(env.client, kp, address, spec, offer.provider, p.endpoint, wait_timeout,
                       work_deadline, decimals, hooks)  # fmt: skip
    endpoints, mappings = sdk.ports(status)
    env.emit({"job": str(address), "job_id": job_id, "name": name, **data, "signature": str(sig),
              "workload_hash": workload_hash.hex(), "state": status.get("state"),
              "endpoints": endpoints, "ports": mappings})  # fmt: skip


def _hours_text(seconds: Fraction) -> str:
    hours = seconds / SECONDS_PER_HOUR
    if hours.denominator == 1:
        return str(hours.numerator)
    return format(Decimal(hours.numerator) / Decimal(hours.denominator), "f").rstrip("0")
