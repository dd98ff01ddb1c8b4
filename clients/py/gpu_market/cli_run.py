"""``gpum run`` and ``gpum job watch`` (issue 11): rent GPUs and run a container in one
command, then keep an eye on (and optionally feed) the job's escrow.

``gpum run --gpu MODEL:COUNT --hours H --image IMG ...`` picks the best offer that runs
containers (:func:`gpu_market.offers.best_offer`) or the ``--provider`` named, prices the
deposit for the hours asked, picks the committee, creates the job with its workload exactly as
``gpum job create --image`` does (spec saved, hash on chain, spec delivered), and waits until
the provider accepted and the container runs; it prints the job, the provider, the cost and
the container's published endpoints. Every check that needs no signature (offer, price,
committee, deposit, the user's balance, the workload) runs before anything is sent, and
``--dry-run`` stops there.

``gpum job watch JOB`` shows the job's spend rate, escrow, runway, settled and running seconds
(:mod:`gpu_market.runway`) and its latest windows' GPU figures from the first committee
validator that answers; with ``--auto-top-up-below`` it tops the job up from the user's wallet
(:class:`gpu_market.runway.AutoTopUp`) and never past ``--budget``, remembered across runs in
``~/.config/gpum/topups/<job>.json`` (``GPUM_TOPUPS_DIR`` overrides the folder).

:mod:`gpu_market.cli` attaches both commands; this module imports only
:mod:`gpu_market.cli_base` and the other ``cli_*`` helper modules of the CLI.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path
from typing import Any

import click
from solders.pubkey import Pubkey

from . import cli_committee, cli_workload
from .cli_base import PUBKEY, CliError, Env, common, job_view, market_option, market_view, now
from .cli_base import parse_amount as _amount
from .constants import MAX_QUORUM
from .errors import RpcUnavailable
from .runway import (
    MAX_WINDOWS,
    AutoTopUp,
    AutoTopUpPolicy,
    Runway,
    TopUpEvent,
    WindowsApiError,
    fetch_windows,
    format_duration,
    low_runway_warning,
    parse_duration,
    runway_of,
)
from .units import U64_MAX, format_ui_amount

__all__ = ["job_watch", "parse_gpu", "parse_hours", "run"]

SECONDS_PER_HOUR = 3600
TOPUPS_DIR = "~/.config/gpum/topups"
"""Where ``job watch --auto-top-up-below`` remembers what it spent per job;
``GPUM_TOPUPS_DIR`` overrides it."""
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


def _parsed(parse: Callable[[str], Any], hint: str) -> Callable[[Any, Any, Any], Any]:
    """A click callback applying ``parse``; its ValueError becomes BadParameter for ``hint``."""

    def callback(ctx: Any, param: Any, value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint=hint) from None

    return callback


# ----------------------------------------------------------------------------- gpum run


def _why_no_offer(offers: Sequence[Any], market: Pubkey, model: str, gpus: int,
                  limit: int | None, hour_limit_text: str | None, decimals: int) -> str:  # fmt: skip
    """One line naming the first constraint (model, GPU count, runs containers, price) that
    leaves no offer, in that order."""
    from .offers import best_offer

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
    from .offers import Offer, best_offer

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
    from .workload_api import WorkerApiError, workload_status

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
@click.option("--gpu", required=True, metavar="MODEL:COUNT", callback=_parsed(parse_gpu, "'--gpu'"),
              help="GPU model (a substring of the provider's, case-insensitive) and count, "
                   "e.g. H100:1.")  # fmt: skip
@click.option("--hours", required=True, metavar="H", callback=_parsed(parse_hours, "'--hours'"),
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
    from . import pda, tokens
    from .accounts import effective_params, min_deposit
    from .errors import AccountNotFound, GpuMarketError
    from .offers import best_offer, list_offers
    from .workload import spec_hash

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
    members, quorum = cli_committee.choose_committee(env, market, m, offer, committee, quorum)
    kp = env.keypair
    account = tokens.ata(kp.pubkey(), m.payment_mint)
    try:
        balance = env.client.token_balance(account)
    except AccountNotFound:
        balance = 0
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


# ----------------------------------------------------------------------------- gpum job watch


def _topups_path(job: Pubkey) -> Path:
    base = os.environ.get("GPUM_TOPUPS_DIR") or os.path.expanduser(TOPUPS_DIR)
    return Path(base) / f"{job}.json"


class _WindowSource:
    """The latest windows of a job from the first committee validator that answers; remembers
    which answered and asks it first next time."""

    def __init__(self, env: Env, market: Pubkey, limit: int) -> None:
        self.env = env
        self.market = market
        self.limit = limit
        self.endpoints: dict[Pubkey, str | None] = {}
        self.preferred: Pubkey | None = None

    def _endpoint(self, authority: Pubkey) -> str | None:
        if authority not in self.endpoints:
            v = self.env.client.fetch_validator_by_authority(self.market, authority)
            self.endpoints[authority] = None if v is None else v.endpoint
        return self.endpoints[authority]

    def latest(self, job: Pubkey, committee: Sequence[Pubkey]) -> dict[str, Any]:
        """``{"validator", "endpoint", "windows"}`` or ``{"error"}`` saying who failed how."""
        order = list(committee)
        if self.preferred in order:
            order.remove(self.preferred)
            order.insert(0, self.preferred)
        failures = []
        for authority in order:
            endpoint = self._endpoint(authority)
            if not endpoint:
                failures.append(f"{authority}: not a validator of this market any more")
                continue
            try:
                windows = fetch_windows(endpoint, job, self.limit)
            except WindowsApiError as e:
                failures.append(f"{authority}: {e}")
                continue
            self.preferred = authority
            return {"validator": str(authority), "endpoint": endpoint, "windows": windows}
        return {"error": f"none of the job's {len(order)} committee validator(s) answered: "
                         + "; ".join(failures)}  # fmt: skip


def _clock(ts: int | None) -> str:
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%H:%M:%S")


def _window_line(w: dict[str, Any]) -> str:
    gpus = [g for g in w.get("gpus") or () if isinstance(g, dict)]
    utils = [g["util_gpu_avg_bp"] for g in gpus if isinstance(g.get("util_gpu_avg_bp"), int)]
    temps = [g["temp_max_c"] for g in gpus if isinstance(g.get("temp_max_c"), int)]
    util = f"GPU util {sum(utils) / len(utils) / 100:.1f}%" if utils else "GPU util -"
    temp = f" max {max(temps)} C" if temps else ""
    return (f"  #{w.get('seq')}  {_clock(w.get('window_start'))}-{_clock(w.get('window_end'))}  "
            f"approved {w.get('approved_seconds')}/{w.get('billable_seconds')} s  "
            f"{w.get('decision')}  workload {w.get('workload_state')}  {util}{temp}")


def _watch_data(r: Runway, chain_now: int, decimals: int, windows: dict[str, Any],
                auto: dict[str, Any] | None, warning: str | None) -> dict[str, Any]:  # fmt: skip
    def ui(n: int) -> str:
        return format_ui_amount(n, decimals)

    return {
        "job": str(r.job), "status": r.status, "chain_time": chain_now, "gpu_count": r.gpu_count,
        "rate_per_second": ui(r.rate_per_second), "spend_per_hour": ui(r.spend_per_hour),
        "booked_escrow": ui(r.booked_escrow), "available": ui(r.available),
        "unsettled_seconds": r.unsettled_seconds, "runway_seconds": r.runway_seconds,
        "settled_seconds": r.settled_seconds, "running_seconds": r.running_seconds,
        "windows": windows, "auto_top_up": auto, "warning": warning,
    }  # fmt: skip


def _watch_lines(d: dict[str, Any]) -> list[str]:
    runway = d["runway_seconds"]
    stamp = datetime.fromtimestamp(d["chain_time"], timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    lines = [
        f"job {d['job']}  {d['status']}  (chain time {stamp} UTC)",
        (f"spend     {d['spend_per_hour']} per hour ({d['rate_per_second']} per second, "
         f"{d['gpu_count']} GPU(s))"),
        (f"escrow    {d['booked_escrow']} booked; {d['available']} available after "
         f"{d['unsettled_seconds']} s unsettled"),
        f"runway    {'-' if runway is None else format_duration(runway)}",
        f"seconds   settled {d['settled_seconds']}, running {d['running_seconds']}",
    ]
    w = d["windows"]
    if "error" in w:
        lines.append(f"windows   unavailable: {w['error']}")
    else:
        lines.append(f"windows   from validator {w['validator']} ({w['endpoint']})"
                     + ("" if w["windows"] else ": none yet"))  # fmt: skip
        lines.extend(_window_line(x) for x in w["windows"])
    auto = d["auto_top_up"]
    if auto is not None:
        done = "".join(f" +{t['amount']}" for t in auto["top_ups"])
        lines.append(f"top-up    below {format_duration(auto['below_seconds'])} to "
                     f"{format_duration(auto['target_seconds'])}; spent {auto['spent']} of "
                     f"budget {auto['budget']}" + (f"; now{done}" if done else ""))  # fmt: skip
        if auto["error"]:
            lines.append(f"top-up    error: {auto['error']}")
    if d["warning"]:
        lines.append(f"warning   {d['warning']}")
    return lines


class _Screen:
    """Text output of ``job watch``: each block replaces the previous one on a terminal, and
    follows it after a blank line otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.shown = 0

    def show(self, lines: list[str]) -> None:
        if self.shown and self.tty:
            click.echo(f"\x1b[{self.shown}F\x1b[J", nl=False)
        elif self.shown:
            click.echo("")
        for line in lines:
            click.echo(line)
        self.shown = len(lines)


@click.command("watch")
@common
@click.argument("job_address", metavar="JOB", type=PUBKEY)
@click.option("--auto-top-up-below", "below", default=None, metavar="DURATION",
              callback=_parsed(parse_duration, "'--auto-top-up-below'"),
              help="Top the job up from your wallet when its runway falls below this (e.g. "
                   "10m); needs --budget.")  # fmt: skip
@click.option("--top-up-to", "target", default=None, metavar="DURATION",
              callback=_parsed(parse_duration, "'--top-up-to'"),
              help="Runway each top-up buys (default: twice --auto-top-up-below).")
@click.option("--budget", default=None, metavar="AMOUNT",
              help="Most the auto top-up may ever spend on this job, payment-mint UI units "
                   "(remembered across runs of watch).")  # fmt: skip
@click.option("--warn-below", "warn_below", default=None, metavar="DURATION",
              callback=_parsed(parse_duration, "'--warn-below'"), help="Warn while the runway is below this.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds between refreshes.")
@click.option("--windows", "window_count", type=click.IntRange(1, MAX_WINDOWS), default=3,
              show_default=True, help="Latest windows to show.")
@click.option("--once", is_flag=True, default=False, help="Show one round and exit.")
def job_watch(env: Env, job_address: Pubkey, below: int | None, target: int | None,
              budget: str | None, warn_below: int | None, interval: float, window_count: int,
              once: bool) -> None:  # fmt: skip
    """Show JOB's spend rate, escrow left, runway, settled vs running seconds and its latest
    windows' GPU use (from its committee's validators), refreshed every --interval; with
    --auto-top-up-below, top it up from your wallet before it runs dry, never past --budget.
    Ends when the job is neither open nor running (or after one round with --once)."""
    if (below is None) != (budget is None):
        raise click.UsageError("--auto-top-up-below and --budget go together: the threshold and "
                               "the most the top-ups may spend on this job")  # fmt: skip
    if target is not None and below is None:
        raise click.UsageError("--top-up-to needs --auto-top-up-below DURATION --budget AMOUNT")
    if below is not None and below == 0:
        raise click.BadParameter("must be more than 0s", param_hint="'--auto-top-up-below'")
    if target is not None and below is not None and target < below:
        raise click.BadParameter(f"{format_duration(target)} is below --auto-top-up-below "
                                 f"{format_duration(below)}", param_hint="'--top-up-to'")  # fmt: skip
    j = job_view(env, job_address)
    m = market_view(env, j.market)
    decimals = env.client.mint_decimals(m.payment_mint)
    auto: AutoTopUp | None = None
    budget_base = 0
    if below is not None and budget is not None:
        budget_base = _amount(budget, decimals, "'--budget'")
        kp = env.keypair
        if kp.pubkey() != j.user:
            raise CliError(f"only the job's user ({j.user}) can top it up; pass --keypair with "
                           "that wallet, or watch without --auto-top-up-below")  # fmt: skip
        policy = AutoTopUpPolicy(below_seconds=below, budget=budget_base, target_seconds=target,
                                 warn_below_seconds=warn_below)  # fmt: skip
        try:
            auto = AutoTopUp(env.client, kp, policy, state_path=_topups_path(job_address))
        except ValueError as e:
            raise CliError(str(e)) from None
    source = _WindowSource(env, j.market, window_count)
    screen = _Screen()
    first = True
    try:
        while True:
            try:
                data = _watch_round(env, job_address, auto, source, decimals, warn_below,
                                    budget_base)  # fmt: skip
            except RpcUnavailable as e:
                if first:
                    raise
                click.echo(f"warning: {' '.join(str(e).split())}; retrying in {interval:g} s",
                           err=True)  # fmt: skip
                _sleep(interval)
                continue
            first = False
            if data is None:
                env.emit({"job": str(job_address), "status": "closed"},
                         [f"job {job_address} no longer exists (closed): nothing to watch"])
                return
            if env.output == "json":
                env.emit(data)
            else:
                screen.show(_watch_lines(data))
            if once or data["status"] not in ("open", "running"):
                return
            _sleep(interval)
    except KeyboardInterrupt:
        return


def _watch_round(env: Env, job: Pubkey, auto: AutoTopUp | None, source: _WindowSource,
                 decimals: int, warn_below: int | None, budget: int) -> dict[str, Any] | None:  # fmt: skip
    """One refresh: the auto top-up's tick (if any), then the job as it stands; None once the
    job account is gone."""
    events: list[TopUpEvent] = auto.tick([job]) if auto is not None else []
    j = env.client.fetch_job(job)
    if j is None:
        return None
    chain_now = env.client.chain_time()
    r = runway_of(j, chain_now)
    warning = low_runway_warning(r, warn_below)
    auto_data = None
    if auto is not None:
        budget_warn = next((e.decision.warn for e in events if e.decision is not None
                            and e.decision.warn and "budget" in e.decision.warn), None)  # fmt: skip
        warning = budget_warn or warning
        auto_data = {
            "below_seconds": auto.policy.below_seconds, "target_seconds": auto.policy.target,
            "budget": format_ui_amount(budget, decimals),
            "spent": format_ui_amount(auto.spent(job), decimals),
            "top_ups": [{"amount": format_ui_amount(e.amount, decimals), "signature": e.signature}
                        for e in events if e.amount],
            "error": next((e.error for e in events if e.error), None),
        }  # fmt: skip
    windows = source.latest(job, j.committee)
    return _watch_data(r, chain_now, decimals, windows, auto_data, warning)
