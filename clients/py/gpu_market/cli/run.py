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
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

import click
from solders.pubkey import Pubkey

from ..constants import MAX_QUORUM
from ..runway import format_duration
from ..units import U64_MAX, format_ui_amount, parse_duration
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

__all__ = ["parse_gpu", "parse_hours", "run"]

SECONDS_PER_HOUR = 3600
POLL_SECONDS = 1.0
"""How often ``gpum run`` looks at the job and its container while waiting."""
WAITING_STATES = ("pending", "starting", "restarting")
"""Workload states ``gpum run`` keeps waiting through."""
CANCEL_RESERVE_S = 5.0
"""The part of ``--timeout`` (at most a quarter of it) kept for cancelling the job."""
DELIVER_ATTEMPT_S = 10.0
"""The longest one delivery attempt or status read may take."""
_sleep = time.sleep  # tests replace it
_monotonic = time.monotonic


def _probe(offers: Sequence[Any], deadline: float) -> dict[Any, Any]:
    """Liveness of ``offers``' workers within ``deadline`` seconds in all (tests replace it)."""
    from ..offers import PROBE_DEADLINE_S, PROBE_TOTAL_S, probe_liveness

    left = max(0.1, deadline)
    return probe_liveness(offers, deadline=min(PROBE_DEADLINE_S, left),
                          total=min(PROBE_TOTAL_S, left))  # fmt: skip


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
    """``"1.5"`` (hours) or a duration (``"90m"``, ``"1h30m"``, ``"2d"``) -> seconds, exact.
    ValueError for anything but a positive duration."""
    seconds = parse_duration(text, "h")
    if seconds <= 0:
        raise ValueError(f"{text!r}: give a positive number of hours or a duration, e.g. 2, "
                         "0.5, 90m or 1h30m")
    return seconds


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


def _alive_offer(offers: Sequence[Any], left: float, *, gpus: int, gpu_model: str,
                 limit: int | None) -> Any:  # fmt: skip
    """The best offer among ``offers`` that fits and whose worker answers ``/v1/health`` (all
    that fit are probed in parallel within ``left`` seconds); None when none fits at all;
    CliError naming the providers and what failed when every one that fits is down."""
    from ..offers import best_offer, with_liveness

    def fits(o: Any) -> bool:
        return best_offer([o], gpus=gpus, gpu_model=gpu_model, max_price_per_gpu_second=limit,
                          needs_workloads=True) is not None  # fmt: skip

    candidates = [o for o in offers if fits(o)]
    if not candidates:
        return None
    live = with_liveness(candidates, _probe(candidates, left))
    up = [o for o in live if o.online is not False]
    if up:
        return best_offer(up, gpus=gpus, gpu_model=gpu_model, max_price_per_gpu_second=limit,
                          needs_workloads=True)  # fmt: skip
    down = "; ".join(f"{o.provider} at {o.endpoint}: {o.liveness_error}" for o in live[:3])
    raise CliError(f"{len(live)} offer(s) fit, but no provider's worker answers its health check "
                   f"({down}); nothing was sent and no money moved: try later, or see `gpum "
                   "offers --all`")  # fmt: skip


def _require_alive(offer: Any, left: float) -> None:
    """CliError naming the provider, its endpoint and what failed unless its worker answers
    ``/v1/health`` within ``left`` seconds."""
    live = _probe([offer], left).get(offer.provider)
    if live is not None and live.online is False:
        raise CliError(f"provider {offer.provider}'s worker at {offer.endpoint} failed its health "
                       f"check: {live.error}; nothing was sent and no money moved: choose "
                       "another provider (`gpum offers`) or try later")  # fmt: skip


class _Abandon(CliError):
    """The job was created but will not run as asked: cancel it while it is Open."""


def _deliver(env: Env, job: Pubkey, spec: Any, endpoint: str, deadline: float) -> dict[str, Any]:
    """Post the spec to the worker, retrying an unreachable worker, 503 and 404 (it has not
    seen a job created moments ago yet) with backoff until ``deadline`` (monotonic); _Abandon
    with the last error when it is not delivered by then or the worker refuses it."""
    from ..workload_api import WorkerApiError, deliver_workload

    attempt = 0
    while True:
        left = deadline - _monotonic()
        try:
            return deliver_workload(endpoint, bytes(job), spec, bytes(env.keypair),
                                    timeout=max(0.1, min(DELIVER_ATTEMPT_S, left)),
                                    retries=0)  # fmt: skip
        except WorkerApiError as e:
            wait = min(0.5 * 2**attempt, 5.0, deadline - _monotonic())
            if e.status not in (None, 404, 503) or wait <= 0:
                raise _Abandon(f"the workload was not delivered to {endpoint} "
                               f"({attempt + 1} attempt(s) within --timeout): {e}") from None  # fmt: skip
        _sleep(wait)
        attempt += 1


def _abandon(env: Env, job: Pubkey, decimals: int) -> str:
    """Cancel ``job`` if it is still Open (the whole deposit back to the user); a sentence
    saying what happened to it and, for a Running job, the command that stops it."""
    from ..errors import GpuMarketError, SdkError

    j = env.client.fetch_job(job)
    if j is None:
        return f"job {job} does not exist (never created, or closed): no deposit is held"
    if j.status == "open":
        try:
            sig = env.client.cancel_job(env.keypair, job)
        except (GpuMarketError, SdkError) as e:
            j = env.client.fetch_job(job)
            if j is None or j.status != "running":
                return (f"cancelling job {job} failed ({e}): run `gpum job cancel {job}` for a "
                        "full refund")  # fmt: skip
        else:
            after = env.client.fetch_job(job)
            refunded = after.refunded if after is not None and after.refunded else j.deposited
            return (f"job {job} cancelled: {format_ui_amount(refunded, decimals)} refunded in "
                    f"full (transaction {sig}); `gpum job close {job}` returns its rent")  # fmt: skip
    if j.status == "running":
        return f"job {job} is running and billing: stop it with `gpum job stop {job}`"
    return f"job {job} is {j.status}: see `gpum job status {job}`"


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
                  progress: _Progress, deadline: float) -> dict[str, Any]:  # fmt: skip
    """The worker's workload status once the job is Running and its container runs (or exited
    cleanly); CliError when the job or the container fails, or at ``deadline`` (monotonic;
    _Abandon while the job is still Open)."""
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
                    left = max(0.1, deadline - _monotonic())
                    status = workload_status(endpoint, bytes(job), j.workload_hash,
                                             bytes(env.keypair),
                                             timeout=min(DELIVER_ATTEMPT_S, left))  # fmt: skip
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
                                   f"its output with `gpum job logs {job}`; `gpum job stop "
                                   f"{job}` stops paying")  # fmt: skip
                if state in ("failed", "stopped"):
                    raise CliError(f"the provider's worker could not run the container of job "
                                   f"{job}: {status.get('error') or state}; failed windows bill "
                                   f"nothing, and the worker retries: `gpum job status {job}` "
                                   f"to follow it, `gpum job stop {job}` to stop")  # fmt: skip
                shown = state or "status unknown"
                progress.show(f"job {job} is running; container {shown} ({waited} s)")
            if _monotonic() >= deadline:
                tail = f" (last answer from the worker: {last_error})" if last_error else ""
                if j.status == "open":
                    raise _Abandon(f"provider {provider} did not accept job {job} within "
                                   f"--timeout {timeout} s{tail}")  # fmt: skip
                raise CliError(f"job {job} is {j.status} but its container is not running after "
                               f"{timeout} s{tail}; follow it with `gpum job status {job}`, or "
                               f"stop paying with `gpum job stop {job}`")  # fmt: skip
            _sleep(max(0.0, min(POLL_SECONDS, deadline - _monotonic())))
    finally:
        progress.done()


@click.command("run")
@common
@market_option
@click.option("--gpu", required=True, metavar="MODEL:COUNT", callback=parse_callback(parse_gpu, "'--gpu'"),
              help="GPU model (a substring of the provider's, case-insensitive) and count, "
                   "e.g. H100:1.")  # fmt: skip
@click.option("--hours", required=True, metavar="HOURS", callback=parse_callback(parse_hours, "'--hours'"),
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
@cli_workload.workload_options
def run(env: Env, market: Pubkey, gpu: tuple[str, int], hours: Fraction, max_price: str | None,
        provider_: Pubkey | None, committee: str | None, quorum: int | None, job_id: int | None,
        wait_timeout: int, dry_run: bool, name: str | None,
        workload: dict[str, Any] | None) -> None:  # fmt: skip
    """Rent GPUs and run a container on them: pick the best offer that runs containers (or
    --provider), escrow the price of --hours, create the job with its workload and wait until
    the container runs. Prints the job, the provider, the cost and the container's published
    endpoints (host:port).

    Nothing is sent unless the provider's worker answers its health check. If the workload
    cannot be delivered, the provider does not accept within --timeout, or you press Ctrl-C,
    the job (still Open) is cancelled and the whole deposit refunded; a job already running is
    left running and the error says how to stop it (`gpum job stop JOB`)."""
    from .. import pda
    from ..accounts import effective_params, min_deposit
    from ..errors import GpuMarketError
    from ..offers import list_offers
    from ..workload import spec_hash

    if workload is None:
        raise click.UsageError("gpum run needs --image IMAGE (to rent GPUs without a container, "
                               "use `gpum job create`)")  # fmt: skip
    model, gpus = gpu
    seconds = hours
    deadline = _monotonic() + wait_timeout
    work_deadline = deadline - min(CANCEL_RESERVE_S, wait_timeout / 4)
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
        _require_alive(offer, work_deadline - _monotonic())
    else:
        offers = list_offers(env.client, market)
        offer = _alive_offer(offers, work_deadline - _monotonic(), gpus=gpus, gpu_model=model,
                             limit=limit)  # fmt: skip
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
    check_job_name(env, name)
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
    except KeyboardInterrupt:
        raise CliError(f"interrupted while creating the job; {_abandon(env, address, decimals)}"
                       ) from None  # fmt: skip
    remember_job(env, address, market, job_id, name)
    progress = _Progress(env.output == "text")
    try:
        progress.show(f"job {address} created; delivering the workload to {p.endpoint}")
        _deliver(env, address, spec, p.endpoint, work_deadline)
        status = _wait_running(env, address, offer.provider, p.endpoint, wait_timeout, progress,
                               work_deadline)  # fmt: skip
    except _Abandon as e:
        progress.done()
        raise CliError(f"{e.message}; {_abandon(env, address, decimals)}") from None
    except KeyboardInterrupt:
        progress.done()
        raise CliError(f"interrupted; {_abandon(env, address, decimals)}") from None
    endpoints, mappings = _ports(status)
    env.emit({"job": str(address), "job_id": job_id, "name": name, **data, "signature": str(sig),
              "workload_hash": workload_hash.hex(), "state": status.get("state"),
              "endpoints": endpoints, "ports": mappings})  # fmt: skip


def _hours_text(seconds: Fraction) -> str:
    hours = seconds / SECONDS_PER_HOUR
    if hours.denominator == 1:
        return str(hours.numerator)
    return format(Decimal(hours.numerator) / Decimal(hours.denominator), "f").rstrip("0")
