"""``gpum job watch``: keep an eye on (and optionally feed) a job's escrow.

``gpum job watch JOB`` shows the job's spend rate, escrow, runway, settled and running seconds
(:mod:`gpu_market.runway`) and its latest windows' GPU figures from the first committee
validator that answers; with ``--auto-top-up-below`` it tops the job up from the user's wallet
(:class:`gpu_market.runway.AutoTopUp`) and never past ``--budget``, remembered across runs in
``~/.config/gpum/topups/<job>.json`` (``GPUM_TOPUPS_DIR`` overrides the folder).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click
from solders.pubkey import Pubkey

from ..errors import RpcUnavailable
from ..runway import (
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
from ..units import format_ui_amount
from .base import (
    JOB,
    CliError,
    Duration,
    Env,
    common,
    job_view,
    market_view,
    parse_callback,
)
from .base import parse_amount as _amount

__all__ = ["job_watch"]

TOPUPS_DIR = "~/.config/gpum/topups"
"""Where ``job watch --auto-top-up-below`` remembers what it spent per job;
``GPUM_TOPUPS_DIR`` overrides it."""
_sleep = time.sleep  # tests replace it


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
        "price_per_gpu_hour": ui(r.rate_per_second * 3600 // max(r.gpu_count, 1)),
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
        (f"spend     {d['spend_per_hour']} per hour ({d['gpu_count']} GPU(s) at "
         f"{d['price_per_gpu_hour']} per GPU-hour)"),
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
@click.argument("job_address", metavar="JOB", type=JOB)
@click.option("--auto-top-up-below", "below", default=None, metavar="DURATION",
              callback=parse_callback(parse_duration, "'--auto-top-up-below'"),
              help="Top the job up from your wallet when its runway falls below this (e.g. "
                   "10m); needs --budget.")  # fmt: skip
@click.option("--top-up-to", "target", default=None, metavar="DURATION",
              callback=parse_callback(parse_duration, "'--top-up-to'"),
              help="Runway each top-up buys (default: twice --auto-top-up-below).")
@click.option("--budget", default=None, metavar="AMOUNT",
              help="Most the auto top-up may ever spend on this job, payment-mint UI units "
                   "(remembered across runs of watch).")  # fmt: skip
@click.option("--warn-below", "warn_below", default=None, metavar="DURATION",
              callback=parse_callback(parse_duration, "'--warn-below'"), help="Warn while the runway is below this.")
@click.option("--interval", type=Duration(whole=False, low=0.1), default=10, show_default=True,
              help="Seconds (or a duration: 30s, 1m) between refreshes.")
@click.option("--windows", "window_count", type=click.IntRange(1, MAX_WINDOWS), default=3,
              show_default=True, help="Latest windows to show.")
@click.option("--once", is_flag=True, default=False, help="Show one round and exit.")
@click.option("--managed", is_flag=True, default=False,
              help="Run the controller of managed job JOB here (in the foreground): it watches "
                   "the job and migrates it when its provider fails (`gpum run --managed`).")  # fmt: skip
def job_watch(env: Env, job_address: Pubkey, below: int | None, target: int | None,
              budget: str | None, warn_below: int | None, interval: float, window_count: int,
              once: bool, managed: bool) -> None:  # fmt: skip
    """Show JOB's spend rate, escrow left, runway, settled vs running seconds and its latest
    windows' GPU use (from its committee's validators), refreshed every --interval; with
    --auto-top-up-below, top it up from your wallet before it runs dry, never past --budget.
    Ends when the job is neither open nor running (or after one round with --once); a managed
    job is followed to its next attempt. With --managed, runs its controller instead."""
    from . import managed as cli_managed

    if managed:
        cli_managed.watch_managed(env, job_address)
        return
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
    try:
        j = job_view(env, job_address)
    except CliError:  # a managed job's closed attempt: watch its current one
        successor = cli_managed.successor_of(env, job_address)
        if successor is None:
            raise
        job_address = successor
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
                successor = None if auto is not None else cli_managed.successor_of(env, job_address)
                if successor is not None:
                    job_address = successor
                    continue
                env.emit({"job": str(job_address), "status": "closed"},
                         [f"job {job_address} no longer exists (closed): nothing to watch"])
                return
            if env.output == "json":
                env.emit(data)
            else:
                screen.show(_watch_lines(data))
            if once:
                return
            if data["status"] not in ("open", "running"):
                successor = cli_managed.successor_of(env, job_address)
                if successor is None or auto is not None:
                    return
                job_address = successor  # a managed job moved on: follow its attempt
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
