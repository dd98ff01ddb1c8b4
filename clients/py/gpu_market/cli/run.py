"""``gpum run``: rent GPUs and run a container in one command.

``gpum run --gpu MODEL:COUNT --hours H --image IMG ...`` picks the best offer that runs
containers (:func:`gpu_market.offers.best_offer`) or the ``--provider`` named, prices the
deposit for the hours asked, picks the committee, creates the job with its workload exactly as
``gpum job create --image`` does (spec saved, hash on chain, spec delivered), and waits until
the provider accepted and the container runs; it prints the job, the provider, the cost and
the container's published endpoints. Every check that needs no signature (offer, price,
committee, deposit, the user's balance, the workload) runs before anything is sent, and
``--dry-run`` stops there. ``gpum job watch`` (:mod:`gpu_market.cli.watch`) then keeps an eye on
the job's escrow.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import click
from solders.pubkey import Pubkey

from ..constants import MAX_QUORUM
from ..runway import format_duration
from ..units import U64_MAX, format_ui_amount
from . import workload as cli_workload
from .base import (
    PUBKEY,
    CliError,
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

__all__ = ["parse_gpu", "parse_hours", "run"]

SECONDS_PER_HOUR = 3600
POLL_SECONDS = 1.0
"""How often ``gpum run`` looks at the job and its container while waiting."""
WAITING_STATES = ("pending", "starting", "restarting")
"""Workload states ``gpum run`` keeps waiting through."""
_sleep = time.sleep  # tests replace it
_monotonic = time.monotonic


# ----------------------------------------------------------------------------- argument parsing


def parse_gpu(text: str) -> tuple[str, int]:
    """``"H100:2"`` -> ``("H100", 2)``: the GPU model (matched as a case-insensitive substring
    of the provider's model, ``_`` = space) and how many GPUs, 1..256. ValueError otherwise."""
    model, sep, count = str(text).rpartition(":")
    model = model.strip()
    if not sep or not model:
        raise ValueError(f"{text!r} is not MODEL:COUNT, e.g. H100:1 or 'RTX 4090:2'")
    try:
        n = int(count.strip())
    except ValueError:
        raise ValueError(f"the GPU count {count.strip()!r} in {text!r} is not a whole number") from None
    if not 1 <= n <= 256:
        raise ValueError(f"the GPU count in {text!r} must be 1..256")
    return model, n


def parse_hours(text: str) -> Fraction:
    """``"1.5"`` -> 5400 (seconds, exact). ValueError for anything but a positive number."""
    try:
        hours = Decimal(str(text).strip())
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a number of hours, e.g. 2 or 0.5") from None
    if not hours.is_finite() or hours <= 0:
        raise ValueError(f"{text!r} hours: give a positive number, e.g. 2 or 0.5")
    return Fraction(hours) * SECONDS_PER_HOUR


# ----------------------------------------------------------------------------- gpum run


def _why_no_offer(offers: Sequence[Any], market: Pubkey, model: str, gpus: int,
                  limit: int | None, hour_limit_text: str | None, decimals: int) -> str:  # fmt: skip
    """One line naming the first constraint (model, GPU count, runs containers, price) that
    leaves no offer, in that order."""
    from ..offers import best_offer

    if not offers:
        return (f"no offers in market {market}: no Active provider has a free GPU now (see "
                "`gpum offers`)")
    matching = [o for o in offers if best_offer([o], gpus=1, gpu_model=model) is not None]
    if not matching:
        models = sorted({o.gpu_model for o in offers})
        return (f"no offer has a GPU model matching {model!r}; models offered: "
                f"{', '.join(repr(m) for m in models)} (see `gpum offers`)")
    roomy = [o for o in matching if o.gpus_free >= gpus]
    if not roomy:
        most = max(o.gpus_free for o in matching)
        return (f"no {model} offer has {gpus} free GPU(s); the most any has is {most}: ask "
                f"for fewer with --gpu {model}:{most}, or try later")
    runs = [o for o in roomy if o.runs_workloads]
    if not runs:
        return (f"{len(roomy)} {model} offer(s) have {gpus} free GPU(s) but none runs "
                "containers (publishes a worker endpoint); rent bare GPUs with `gpum job "
                "create` instead")
    if limit is None:  # only a jailed provider could be left out: list_offers drops those
        return f"no offer fits --gpu {model}:{gpus} (see `gpum offers`)"
    cheapest = min(o.price_per_gpu_second for o in runs)
    return (f"the cheapest matching offer costs "
            f"{format_ui_amount(cheapest * SECONDS_PER_HOUR, decimals)} per GPU-hour, above "
            f"your --max-price {hour_limit_text}; raise --max-price or try later")


def _named_offer(env: Env, provider: Pubkey, params: Any, chain_now: int, model: str, gpus: int,
                 limit: int | None, hour_limit_text: str | None, decimals: int) -> Any:  # fmt: skip
    """The Offer of ``--provider``; CliError naming what rules it out."""
    from ..offers import Offer, best_offer

    p = env.client.fetch_provider(provider)
    if p is None:
        raise CliError(f"provider {provider} does not exist on {env.client.url}; pass a provider "
                       "account address (see `gpum offers`)")  # fmt: skip
    if p.status != "active":
        raise CliError(f"provider {provider} is {p.status} and takes no jobs; choose another "
                       "(see `gpum offers`)")  # fmt: skip
    if p.worker_key_expires_at != 0 and chain_now > p.worker_key_expires_at:
        raise CliError(f"provider {provider}'s worker key expired at {p.worker_key_expires_at}; "
                       "it takes no jobs until it rotates it")  # fmt: skip
    offer = Offer.from_provider(p, min_stake_per_gpu=params.min_stake_per_gpu)
    if best_offer([offer], gpus=1, gpu_model=model) is None:
        raise CliError(f"provider {provider} offers {offer.gpu_model!r}, which does not match "
                       f"--gpu {model}")  # fmt: skip
    if offer.gpus_free < gpus:
        raise CliError(f"provider {provider} has {offer.gpus_free} free GPU(s) backed by stake; "
                       f"you asked for {gpus}")  # fmt: skip
    if not offer.runs_workloads:
        raise CliError(f"provider {provider} publishes no worker endpoint, so it runs no "
                       "containers; choose another (see `gpum offers workloads=true`)")  # fmt: skip
    if limit is not None and offer.price_per_gpu_second > limit:
        raise CliError(f"provider {provider} charges "
                       f"{format_ui_amount(offer.price_per_gpu_hour(), decimals)} per GPU-hour, "
                       f"above your --max-price {hour_limit_text}; raise --max-price or choose "
                       "another provider")  # fmt: skip
    return offer


def _ports(status: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(endpoints "host:port", mappings "host:port -> port/proto")`` of a worker's status."""
    endpoints, mappings = [], []
    for pt in status.get("ports") or ():
        hostport = f"{pt.get('host')}:{pt.get('host_port')}"
        endpoints.append(hostport)
        mappings.append(f"{hostport} -> {pt.get('port')}/{pt.get('protocol')}")
    return endpoints, mappings


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


def _wait_running(env: Env, job: Pubkey, provider: Pubkey, endpoint: str, timeout: int,
                  progress: _Progress) -> dict[str, Any]:  # fmt: skip
    """The worker's workload status once the job is Running and its container runs (or exited
    cleanly); CliError when the job or the container fails, or at ``timeout``."""
    from ..workload_api import WorkerApiError, workload_status

    start = _monotonic()
    last_error = ""
    status: dict[str, Any] = {}
    try:
        while True:
            waited = int(_monotonic() - start)
            j = env.client.fetch_job(job)
            if j is None:
                raise CliError(f"job {job} no longer exists (closed); nothing runs")
            if j.status == "declined":
                raise CliError(f"provider {provider} declined job {job}; `gpum job close {job}` "
                               "refunds the whole deposit")  # fmt: skip
            if j.status not in ("open", "running"):
                raise CliError(f"job {job} is {j.status} before its container ran; see `gpum job "
                               f"status {job}`")  # fmt: skip
            if j.status == "open":
                progress.show(f"waiting for provider {provider} to accept job {job} ({waited} s)")
            else:
                try:
                    status = workload_status(endpoint, bytes(job), j.workload_hash,
                                             bytes(env.keypair))  # fmt: skip
                    last_error = ""
                except WorkerApiError as e:
                    status, last_error = {}, str(e)
                state = status.get("state")
                if state == "running":
                    return status
                if state == "exited" and status.get("exit_code") == 0:
                    return status
                if state == "exited":
                    raise CliError(f"the container of job {job} exited with code "
                                   f"{status.get('exit_code')} before it was seen running; read "
                                   f"its output with `gpum job logs {job}`; `gpum job finish "
                                   f"{job}` stops paying")  # fmt: skip
                if state in ("failed", "stopped"):
                    raise CliError(f"the provider's worker could not run the container of job "
                                   f"{job}: {status.get('error') or state}; failed windows bill "
                                   f"nothing, and the worker retries: `gpum job status {job}` "
                                   f"to follow it, `gpum job finish {job}` to stop")  # fmt: skip
                shown = state or "status unknown"
                progress.show(f"job {job} is running; container {shown} ({waited} s)")
            if waited >= timeout:
                tail = f" (last answer from the worker: {last_error})" if last_error else ""
                raise CliError(f"job {job} is {j.status} but its container is not running after "
                               f"{timeout} s{tail}; follow it with `gpum job status {job}`"
                               + (f", or `gpum job cancel {job}` for a full refund"
                                  if j.status == "open" else
                                  f", or `gpum job finish {job}` to stop paying"))  # fmt: skip
            _sleep(POLL_SECONDS)
    finally:
        progress.done()


@click.command("run")
@common
@market_option
@click.option("--gpu", required=True, metavar="MODEL:COUNT", callback=parse_callback(parse_gpu, "'--gpu'"),
              help="GPU model (a substring of the provider's, case-insensitive) and count, "
                   "e.g. H100:1.")  # fmt: skip
@click.option("--hours", required=True, metavar="H", callback=parse_callback(parse_hours, "'--hours'"),
              help="Hours to prepay: the deposit is price x GPUs x hours (at least one window); "
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
@click.option("--timeout", "wait_timeout", type=click.IntRange(1), default=600, show_default=True,
              help="Seconds to wait for the provider to accept and the container to run.")
@click.option("--dry-run", is_flag=True, default=False,
              help="Show the offer, committee, deposit and cost per hour; send nothing.")
@cli_workload.workload_options
def run(env: Env, market: Pubkey, gpu: tuple[str, int], hours: Fraction, max_price: str | None,
        provider_: Pubkey | None, committee: str | None, quorum: int | None, job_id: int | None,
        wait_timeout: int, dry_run: bool, workload: dict[str, Any] | None) -> None:  # fmt: skip
    """Rent GPUs and run a container on them: pick the best offer that runs containers (or
    --provider), escrow the price of --hours, create the job with its workload and wait until
    the container runs. Prints the job, the provider, the cost and the container's published
    endpoints (host:port)."""
    from .. import pda
    from ..accounts import effective_params, min_deposit
    from ..errors import GpuMarketError
    from ..offers import best_offer, list_offers
    from ..workload import spec_hash

    if workload is None:
        raise click.UsageError("gpum run needs --image IMAGE (to rent GPUs without a container, "
                               "use `gpum job create`)")  # fmt: skip
    model, gpus = gpu
    seconds = hours
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
    if provider_ is not None:
        offer = _named_offer(env, provider_, params, chain_now, model, gpus, limit,
                             hour_limit_text, decimals)  # fmt: skip
    else:
        offers = list_offers(env.client, market)
        offer = best_offer(offers, gpus=gpus, gpu_model=model, max_price_per_gpu_second=limit,
                           needs_workloads=True)  # fmt: skip
        if offer is None:
            raise CliError(_why_no_offer(offers, market, model, gpus, limit, hour_limit_text,
                                         decimals))  # fmt: skip
    p = env.client.fetch_provider(offer.provider)
    if p is None:
        raise CliError(f"provider {offer.provider} disappeared while choosing it; run again")
    price = p.price_per_gpu_second
    if limit is not None and price > limit:
        raise CliError(f"provider {offer.provider} just raised its price to "
                       f"{format_ui_amount(price * SECONDS_PER_HOUR, decimals)} per GPU-hour, "
                       f"above your --max-price {hour_limit_text}; nothing was sent: run again")  # fmt: skip
    rate = price * gpus
    deposit = max(math.ceil(rate * seconds), min_deposit(params, price, gpus))
    if deposit > U64_MAX:
        raise click.BadParameter(f"{float(seconds / SECONDS_PER_HOUR):g} hours at this price is "
                                 "more than a token amount can hold; ask for fewer",
                                 param_hint="'--hours'")  # fmt: skip
    spec = cli_workload.build_spec(workload, p)
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
    if dry_run:
        env.emit({"dry_run": True, **data, "balance": format_ui_amount(balance, decimals)})
        return
    job_id = int(time.time() * 1000) if job_id is None else job_id
    address = pda.job_pda(market, kp.pubkey(), job_id, env.client.program_id)
    workload_hash = spec_hash(spec)
    cli_workload.save_spec(address, spec)
    max_price_per_second = price if limit is None else limit
    try:
        sig, address = env.client.create_job(kp, market, offer.provider, job_id, gpus, deposit,
                                             committee=members, quorum=quorum,
                                             max_price_per_gpu_second=max_price_per_second,
                                             workload_hash=workload_hash)  # fmt: skip
    except GpuMarketError as e:
        if e.name != "PriceAboveLimit":
            raise
        raise CliError(f"provider {offer.provider} raised its price before the job landed; no "
                       "job was created and nothing was charged: run again (with a higher "
                       "--max-price if needed)") from None  # fmt: skip
    progress = _Progress(env.output == "text")
    progress.show(f"job {address} created; delivering the workload to {p.endpoint}")
    cli_workload.deliver_saved(env, address, spec, offer.provider)
    status = _wait_running(env, address, offer.provider, p.endpoint, wait_timeout, progress)
    endpoints, mappings = _ports(status)
    env.emit({"job": str(address), "job_id": job_id, **data, "signature": str(sig),
              "workload_hash": workload_hash.hex(), "state": status.get("state"),
              "endpoints": endpoints, "ports": mappings})  # fmt: skip


def _hours_text(seconds: Fraction) -> str:
    hours = seconds / SECONDS_PER_HOUR
    if hours.denominator == 1:
        return str(hours.numerator)
    return format(Decimal(hours.numerator) / Decimal(hours.denominator), "f").rstrip("0")
