"""``gpum job list``, ``job stop``, ``job close``, ``job cancel`` and ``job rate``: see your
jobs, end them with a receipt and rate them; and the job names of ``--name`` (``job create``,
``gpum run``).

A job's name and, once it is closed, its receipt (deposited, paid to the provider, fees,
refunded) live in the local history (:mod:`gpu_market.job_history`): the chain keeps only a
tombstone at a closed job's address. ``job close`` and ``job stop`` write the receipt;
``job list --all`` reads it back.

Text output shows token amounts of the payment mint and dates; ``--output json`` shows base
units and Unix seconds.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click
from solders.pubkey import Pubkey

from ..units import format_ui_amount, when
from .base import JOB, PUBKEY, CliError, Env, resolve_url
from .base import common as _common
from .base import job_view as _job_view
from .base import now as _now

__all__ = ["check_job_name", "job_cancel", "job_close", "job_list", "job_rate", "job_stop",
           "name_option", "remember_job", "require_settlement_over"]  # fmt: skip

_sleep = time.sleep
_monotonic = time.monotonic
PROGRESS_EVERY = 30.0
"""Seconds between ``job stop``'s progress lines when stderr is not a terminal."""
ENDPOINT_TIMEOUT = 3.0
"""Seconds ``job list`` gives each worker to report a running job's published ports."""


# ----------------------------------------------------------------------------- names


name_option = click.option(
    "--name", default=None, metavar="NAME",
    help="A name for the job, usable wherever its address is (1..32 letters, digits, '.', "
         "'_', '-'); kept in the local job history.")  # fmt: skip


def _history():
    from ..job_history import JobHistory

    return JobHistory()


def check_job_name(env: Env, name: str | None) -> None:
    """CliError, before any money moves, when ``name`` cannot name a new job on this cluster
    (invalid, or held by a job still on chain). Nothing for None."""
    from ..job_history import HistoryError

    if name is None:
        return
    try:
        _history().check_name_free(name, resolve_url(env.url),
                                   lambda keys: [j is not None for j in env.client.fetch_jobs(keys)])
    except HistoryError as e:
        raise click.BadParameter(str(e), param_hint="'--name'") from None


def remember_job(env: Env, address: Pubkey, market: Pubkey, job_id: int, name: str | None) -> None:
    """Record a job just created (and its ``name``) in the local history; a history that
    cannot be written is a warning on stderr (the job exists, only its name is lost)."""
    from ..job_history import HistoryError

    try:
        _history().record_created(address, url=resolve_url(env.url), market=market,
                                  user=env.keypair.pubkey(), job_id=job_id,
                                  created_at=int(time.time()), name=name)  # fmt: skip
    except HistoryError as e:
        click.echo(f"warning: {e}", err=True)


# ----------------------------------------------------------------------------- formatting


class _Decimals:
    """Payment-mint decimals by market, read once each."""

    def __init__(self, env: Env) -> None:
        self.env, self.cache = env, {}

    def __call__(self, market: Pubkey) -> int:
        if market not in self.cache:
            m = self.env.client.fetch_market(market)
            self.cache[market] = 6 if m is None else self.env.client.mint_decimals(m.payment_mint)
        return self.cache[market]


# ----------------------------------------------------------------------------- close


def require_settlement_over(env: Env, job_address: Pubkey, command: str) -> Any:
    """The job's view; CliError, before anything is sent, when ``command`` would fail on the
    job's state or grace (the chain's clock decides, as on chain)."""
    j = _job_view(env, job_address)
    if j.status in ("open", "running"):
        hint = "`gpum job cancel` or have the provider decline it" if j.status == "open" else (
            f"`gpum job finish` it first, or `gpum job stop {job_address}` finishes it, waits out "
            "the grace and closes it")
        raise CliError(f"job {job_address} is {j.status}: {command} needs a finished job; {hint}")
    if command == "complete" and j.status != "finishing":
        raise CliError(f"job {job_address} is {j.status}, not finishing: nothing to complete")
    grace_end = j.grace_ends_at
    if grace_end is not None:
        now = _now(env)
        if now <= grace_end:
            raise CliError(
                f"job {job_address} is in its settlement grace until {when(grace_end, now)}: run "
                f"`gpum job {command}` again in {grace_end - now + 1} s"
            )
    return j


def _close(env: Env, job_address: Pubkey, j: Any) -> None:
    """Close ``j`` (settlement over), keep its receipt in the history and print it."""
    from ..deployment import close_with_receipt

    closed = close_with_receipt(env.client, env.keypair, job_address, j)
    for warning in closed.warnings:
        click.echo(f"warning: {warning}", err=True)
    receipt, sig, name, closed_at = closed.receipt, closed.signature, closed.name, closed.closed_at
    d = _Decimals(env)(j.market)
    if env.output == "json":
        env.emit({"job": str(job_address), "name": name, "status": "closed",
                  "closed_at": closed_at, "receipt": receipt.as_dict(), "signature": str(sig)})  # fmt: skip
        return
    t = lambda v: format_ui_amount(v, d)
    lines = [f"job {job_address}{f' ({name})' if name else ''} closed",
             f"  deposited: {t(receipt.deposited)}",
             (f"  paid:      {t(receipt.paid)} (provider {t(receipt.paid_provider)}, fees "
              f"{t(receipt.fees)}: validators {t(receipt.paid_validators)}, treasury "
              f"{t(receipt.paid_treasury)}, burned {t(receipt.burned)})"),
             f"  refunded:  {t(receipt.refunded)}"
             + (f" (with {t(receipt.donations)} donated to the escrow)" if receipt.donations else ""),
             f"  signature: {sig}"]  # fmt: skip
    env.emit({}, lines)


@click.command("close")
@_common
@click.argument("job_address", metavar="JOB", type=JOB)
def job_close(env: Env, job_address: Pubkey) -> None:
    """Refund the rest and close a job (user): at once when completed, cancelled, declined or
    failed; after its grace when finishing. Prints the receipt (deposited, paid, fees,
    refunded) and keeps it in the local history (`gpum job list --all`)."""
    env.keypair  # noqa: B018 - a missing keypair fails before any read
    _close(env, job_address, require_settlement_over(env, job_address, "close"))


@click.command("cancel")
@_common
@click.argument("job_address", metavar="JOB", type=JOB)
def job_cancel(env: Env, job_address: Pubkey) -> None:
    """Cancel an Open job (not accepted yet) with a full refund (user)."""
    kp = env.keypair
    j = _job_view(env, job_address)
    if j.status != "open":
        hint = (f"`gpum job stop {job_address}` finishes it, waits out the grace and refunds the "
                f"rest (or `gpum job finish {job_address}` to stop billing now)") if j.status == "running" else (
                f"`gpum job stop {job_address}` closes it and refunds the rest")  # fmt: skip
        raise CliError(f"job {job_address} is {j.status}: only an Open job can be cancelled; {hint}")
    sig = env.client.cancel_job(kp, job_address)
    env.emit({"job": str(job_address), "signature": str(sig)})


@click.command("rate")
@_common
@click.argument("job_address", metavar="JOB", type=JOB)
@click.argument("stars", type=click.IntRange(1, 5), metavar="1..5")
def job_rate(env: Env, job_address: Pubkey, stars: int) -> None:
    """Rate a job 1 to 5 stars (user), once, if it billed something: also after `gpum job
    close` (the closed job's record keeps what the rating needs). Ratings show in `gpum
    offers` (RATING) and count in the provider's score."""
    kp = env.keypair
    try:
        sig = env.client.rate_job(kp, job_address, stars)
    except ValueError as e:
        raise CliError(str(e)) from None
    env.emit({"job": str(job_address), "stars": stars, "signature": str(sig)},
             [f"job {job_address} rated {stars} of 5 stars", f"  signature: {sig}"])  # fmt: skip


# ----------------------------------------------------------------------------- stop


@click.command("stop")
@_common
@click.argument("job_address", metavar="JOB", type=JOB)
@click.option("--timeout", "timeout", default=None, metavar="DURATION",
              help="Give up waiting for the grace after this long (e.g. 90s, 15m; default: the "
                   "job's grace plus 2m); the job stays finished, `gpum job stop` again closes it.")  # fmt: skip
def job_stop(env: Env, job_address: Pubkey, timeout: str | None) -> None:
    """Stop a job and get your money back: an Open job is cancelled (full refund); a Running
    one is finished (billing stops), its settlement grace waited out (progress on stderr),
    then it is closed. Prints the receipt: deposited, paid, fees, refunded. For a managed job
    (JOB its name or an attempt), every attempt, and its controller stops migrating."""
    from ..runway import parse_duration

    limit = None
    if timeout is not None:
        try:
            limit = parse_duration(timeout)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="'--timeout'") from None
    from ..deployment import DeployError, Hooks, cli_flag, stop_job

    kp = env.keypair
    from . import managed as cli_managed

    if cli_managed.stop_managed(env, job_address, limit):
        return
    _job_view(env, job_address)
    say = _Progress(env.output == "text")
    hooks = Hooks(sleep=lambda s: _sleep(s), monotonic=lambda: _monotonic(), flag=cli_flag)
    try:
        j = stop_job(env.client, kp, job_address, limit=limit, hooks=hooks, say=say,
                     tick=say.tick)  # fmt: skip
    except DeployError as e:
        raise CliError(str(e)) from None
    except KeyboardInterrupt:
        raise CliError(f"interrupted: job {job_address} is {_job_view(env, job_address).status}; "
                       f"`gpum job stop {job_address}` again closes it once its grace is over "
                       "and refunds the rest") from None  # fmt: skip
    finally:
        say.done()
    _close(env, job_address, j)


class _Progress:
    """Progress lines on stderr (text output only): rewritten in place on a terminal, else
    one line when the wait starts and one every ``PROGRESS_EVERY`` seconds."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.tty = enabled, enabled and sys.stderr.isatty()
        self.last_line = -PROGRESS_EVERY
        self.open = False

    def __call__(self, text: str) -> None:
        if self.enabled:
            self.done()
            click.echo(text, err=True)

    def tick(self, text: str) -> None:
        if not self.enabled:
            return
        if self.tty:
            click.echo("\r\x1b[K" + text, err=True, nl=False)
            self.open = True
        elif _monotonic() - self.last_line >= PROGRESS_EVERY:
            click.echo(text, err=True)
            self.last_line = _monotonic()

    def done(self) -> None:
        if self.open:
            click.echo("", err=True)
            self.open = False


# ----------------------------------------------------------------------------- list


def _endpoints(env: Env, j: Any) -> list[str]:
    """``host:port`` of each published port of ``j``'s running container (empty when the job
    has no workload, is not running, or its worker does not answer in ENDPOINT_TIMEOUT s)."""
    from ..workload_api import WorkerApiError, workload_status

    if j.status != "running" or j.workload_hash == bytes(32):
        return []
    p = env.client.fetch_provider(j.provider)
    if p is None or not getattr(p, "endpoint", None):
        return []
    try:
        s = workload_status(p.endpoint, bytes(j.address), j.workload_hash, bytes(env.keypair),
                            timeout=ENDPOINT_TIMEOUT)  # fmt: skip
    except WorkerApiError:
        return []
    return [f"{pt.get('host')}:{pt.get('host_port')}" for pt in s.get("ports") or ()]


def _settled_paid(j: Any) -> int:
    return j.paid_provider + j.paid_validators + j.paid_treasury + j.burned


def _open_row(env: Env, j: Any, name: str | None, now: int) -> dict[str, Any]:
    from ..runway import runway_of

    rw = runway_of(j, now)
    return {"job": str(j.address), "name": name, "status": j.status, "market": str(j.market),
            "provider": str(j.provider), "gpu_count": j.gpu_count,
            "rate_per_second": j.terms.rate_per_second, "deposited": j.deposited,
            "spent": _settled_paid(j) + rw.booked_escrow - rw.available,
            "escrow_left": rw.available, "runway_seconds": rw.runway_seconds,
            "runs_dry_at": None if rw.runway_seconds is None else now + rw.runway_seconds,
            "grace_ends_at": j.grace_ends_at, "created_at": j.created_at,
            "endpoints": _endpoints(env, j)}  # fmt: skip


@click.command("list")
@_common
@click.option("--all", "show_all", is_flag=True,
              help="Also your closed jobs, with their receipts, from the local history.")
@click.option("--market", type=PUBKEY, default=None, envvar="GPUM_MARKET",
              help="Only this market's jobs (default: every market).")  # fmt: skip
def job_list(env: Env, show_all: bool, market: Pubkey | None) -> None:
    """Your wallet's jobs on chain (open, running, finishing, ended but not closed): state,
    provider, GPUs, spent, escrow left, runway and endpoints. With --all, also the closed
    ones this machine's history knows, with their receipts (paid, fees, refunded). Managed
    jobs' attempts are named NAME#k, and each managed job still at work is shown with the
    history of its attempts."""
    from ..job_history import HistoryError

    user = env.keypair.pubkey()
    url = resolve_url(env.url)
    try:
        records = _history().records(url, user)
    except HistoryError as e:
        click.echo(f"warning: {e}", err=True)
        records = {}
    jobs = env.client.list_jobs(user=user, market=market)
    now = _now(env)
    live = [_open_row(env, j, records.get(str(j.address), {}).get("name"), now)
            for j in sorted(jobs, key=lambda j: (j.created_at, str(j.address)))]  # fmt: skip
    on_chain = {str(j.address) for j in jobs}
    closed = [_closed_row(a, r) for a, r in records.items()
              if a not in on_chain and (market is None or r.get("market") == str(market))]  # fmt: skip
    closed.sort(key=lambda r: (r["closed_at"] or 0, r["job"]))
    from . import managed as cli_managed

    managed, managed_lines = cli_managed.list_section(env, user, live + closed)
    if env.output == "json":
        env.emit({"user": str(user), "chain_time": now, "jobs": live + (closed if show_all else []),
                  "managed": managed})  # fmt: skip
        return
    env.emit({}, _list_lines(env, live, closed, now, show_all)
             + (["", *managed_lines] if managed_lines else []))  # fmt: skip


def _closed_row(address: str, r: dict[str, Any]) -> dict[str, Any]:
    """A history record of a job no longer on chain (its receipt None when it was closed by
    something else than ``gpum``)."""
    from ..job_history import Receipt

    receipt = r.get("receipt")
    return {"job": address, "name": r.get("name"), "status": "closed", "market": r.get("market"),
            "provider": r.get("provider"), "gpu_count": r.get("gpu_count"),
            "created_at": r.get("created_at"), "closed_at": r.get("closed_at"),
            "receipt": None if receipt is None else Receipt.from_dict(receipt).as_dict()}  # fmt: skip


def _short(key: str | None) -> str:
    return "-" if not key else f"{key[:4]}…{key[-4:]}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _list_lines(env: Env, live: list[dict], closed: list[dict], now: int, show_all: bool) -> list[str]:
    decimals = _Decimals(env)
    lines: list[str] = []
    if live:
        rows = [["NAME", "JOB", "STATUS", "PROVIDER", "GPUS", "SPENT", "ESCROW LEFT", "RUNWAY",
                 "ENDPOINTS"]]  # fmt: skip
        for r in live:
            d = decimals(Pubkey.from_string(r["market"]))
            if r["runway_seconds"] is not None:
                runway = f"until {when(r['runs_dry_at'], now)}"
            elif r["grace_ends_at"] is not None:
                runway = f"grace ends {when(r['grace_ends_at'], now)}"
            else:
                runway = "-"
            rows.append([r["name"] or "-", r["job"], r["status"], _short(r["provider"]),
                         str(r["gpu_count"]), format_ui_amount(r["spent"], d),
                         format_ui_amount(r["escrow_left"], d), runway,
                         ", ".join(r["endpoints"]) or "-"])  # fmt: skip
        lines += _table(rows)
    else:
        lines.append("no open jobs on chain for this wallet")
    if not show_all and closed:
        lines.append(f"{len(closed)} closed job(s) in the local history: `gpum job list --all` "
                     "shows them with their receipts")  # fmt: skip
    if show_all:
        lines.append("")
        if not closed:
            lines.append("no closed jobs in the local history")
            return lines
        rows = [["NAME", "JOB", "CLOSED", "GPUS", "DEPOSITED", "PAID", "FEES", "REFUNDED"]]
        for r in closed:
            d = decimals(Pubkey.from_string(r["market"])) if r["market"] else 6
            rc = r["receipt"]
            money = [format_ui_amount(rc[k], d) if rc else "?"
                     for k in ("deposited", "paid", "fees", "refunded")]  # fmt: skip
            rows.append([r["name"] or "-", r["job"],
                         when(r["closed_at"], int(time.time())) if r["closed_at"] else "closed elsewhere",
                         str(r["gpu_count"] or "-"), *money])  # fmt: skip
        lines += _table(rows)
    return lines
