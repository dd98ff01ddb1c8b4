"""``gpum offers``: the market's offers, filtered by a query, sorted and limited.

What an offer is, the reputation score, the ranking, liveness and the query language are
defined in :mod:`gpu_market.offers`; this module reads the chain once (market, clock,
providers, mint decimals), probes every offer's worker ``/v1/health`` in parallel (at most
``PROBE_TOTAL_S`` in all), hides offline providers unless ``--all``, and prints a table (text)
or a JSON list with every field (``--output json``; times in unix seconds).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import click
from solders.pubkey import Pubkey

from ..offers import (
    Offer,
    Query,
    QueryError,
    filter_offers,
    last_settled_window,
    list_providers,
    offers_from_providers,
    parse_query,
    probe_liveness,
    sort_offers,
    with_liveness,
)
from ..units import format_ui_amount
from .base import Env, common, market_option, market_view, now

__all__ = ["offer_row", "offers"]

DEFAULT_LIMIT = 20
_probe = probe_liveness  # tests replace it


def offer_row(o: Offer, payment_decimals: int, stake_decimals: int) -> dict[str, Any]:
    """Every field of ``o`` as ``--output json`` prints it: amounts in UI units (strings, exact),
    keys base58, ``workloads`` = whether the provider publishes a worker endpoint."""
    return {
        "provider": str(o.provider),
        "owner": str(o.owner),
        "worker_key": str(o.worker_key),
        "gpu_model": o.gpu_model,
        "gpus_free": o.gpus_free,
        "gpus_total": o.gpus_total,
        "vram_mib": o.vram_mib,
        "vram_gib": o.vram_mib / 1024,
        "region": o.region,
        "price_per_gpu_second": format_ui_amount(o.price_per_gpu_second, payment_decimals),
        "price_per_gpu_hour": format_ui_amount(o.price_per_gpu_hour(), payment_decimals),
        "stake": format_ui_amount(o.stake, stake_decimals),
        "score": o.score,
        "hardware": o.hardware,
        "verified": o.verified,
        "badge": o.badge,
        "rating": o.rating,
        "ratings": o.ratings,
        "verified_hours": o.verified_hours,
        "jobs_completed": o.jobs_completed,
        "jobs_failed": o.jobs_failed,
        "slashes": o.slashes,
        "jailed": o.jailed,
        "workloads": o.runs_workloads,
        "endpoint": o.endpoint,
        "online": o.online,
        "cluster": o.cluster,
        "checked_at": o.checked_at,
        "last_seen": o.last_seen,
        "liveness_error": o.liveness_error,
    }


def seen_text(o: Offer, now_: float) -> str:
    """``"now"`` (online), ``"2026-11-27 13:40 UTC (12 min ago)"``, ``"never"`` (offline and
    no settled window on chain) or ``"-"`` (no worker endpoint, or not probed)."""
    if o.online:
        return "now"
    if o.online is None:
        return "-"
    if o.last_seen is None:
        return "never"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(o.last_seen))
    ago = max(0, int(now_) - o.last_seen)
    if ago < 60:
        rel = f"{ago} s ago"
    elif ago < 2 * 86400:
        rel = f"{ago // 60} min ago"
    else:
        rel = f"{ago // 86400} days ago"
    return f"{stamp} ({rel})"


def verified_text(o: Offer) -> str:
    """``badge`` (verified hardware and a long clean record), ``yes`` (verified hardware),
    ``failed`` (the last hardware verdict failed) or ``no``."""
    if o.badge:
        return "badge"
    return {"verified": "yes", "failed": "failed"}.get(o.hardware, "no")


def rating_text(o: Offer) -> str:
    """``4.5 (12)``: average stars and how many ratings; ``-`` without ratings."""
    return "-" if o.rating is None else f"{o.rating:.1f} ({o.ratings})"


def _yes_no(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "no")


def _gib(mib: int) -> str:
    return f"{mib / 1024:.1f}".removesuffix(".0")


def _table(rows: Sequence[Offer], payment_decimals: int, stake_decimals: int,
           now_: float | None = None) -> list[str]:  # fmt: skip
    """Aligned text lines: a header and one line per offer, in order."""
    now_ = time.time() if now_ is None else now_
    header = ("PROVIDER", "GPU MODEL", "FREE/TOTAL", "VRAM GiB", "REGION", "PRICE/GPU-H",
              "STAKE", "SCORE", "VERIFIED", "RATING", "WORKLOADS", "ONLINE", "CLUSTER", "LAST SEEN")  # fmt: skip
    cells = [header] + [
        (str(o.provider), o.gpu_model or "-", f"{o.gpus_free}/{o.gpus_total}", _gib(o.vram_mib),
         o.region or "-", format_ui_amount(o.price_per_gpu_hour(), payment_decimals),
         format_ui_amount(o.stake, stake_decimals), f"{o.score:.2f}", verified_text(o),
         rating_text(o), "yes" if o.runs_workloads else "no",
         _yes_no(o.online), _yes_no(o.cluster), seen_text(o, now_))
        for o in rows
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    right = {2, 3, 5, 6, 7}
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w)
                      for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in cells]  # fmt: skip


def _why_none(market: Pubkey, providers: Sequence[Any], before: Sequence[Offer], query: Query,
              payment_decimals: int, stake_decimals: int, now_: int) -> str:  # fmt: skip
    """One line saying why no offer is shown: what the chain lacks, or what each clause keeps."""
    if before:
        decimals = {"payment_decimals": payment_decimals, "stake_decimals": stake_decimals}
        kept = "; ".join(f"{c} keeps {len(filter_offers(before, Query((c,)), **decimals))}"
                         for c in query.clauses)  # fmt: skip
        return f"no offer matches `{query}`: {len(before)} offer(s) before filtering; {kept}"
    if not providers:
        return f"no offers in market {market}: no provider is registered"
    counts = {"paused": 0, "jailed": 0, "with an expired worker key": 0,
              "with no GPU a job can take (all in use or not backed by stake)": 0}  # fmt: skip
    for p in providers:
        if p.status in ("paused", "jailed"):
            counts[p.status] += 1
        elif p.worker_key_expires_at != 0 and now_ > p.worker_key_expires_at:
            counts["with an expired worker key"] += 1
        else:
            counts["with no GPU a job can take (all in use or not backed by stake)"] += 1
    parts = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    return f"no offers in market {market}: {len(providers)} provider(s) registered: {parts}"


@click.command("offers")
@common
@market_option
@click.argument("query", nargs=-1)
@click.option("--sort", default="rank", show_default=True, metavar="FIELD[-]",
              help="rank, or a query field (gpus, price, score, region, ...); a trailing - "
                   "sorts descending (score-). Ties keep the rank order.")  # fmt: skip
@click.option("--limit", type=click.IntRange(0), default=DEFAULT_LIMIT, show_default=True,
              help="Rows to show, 0 = all.")  # fmt: skip
@click.option("--all", "show_all", is_flag=True, default=False,
              help="Also show providers whose worker does not answer its health probe "
                   "(ranked last).")  # fmt: skip
def offers(env: Env, market: Pubkey, query: tuple[str, ...], sort: str, limit: int,
           show_all: bool) -> None:  # fmt: skip
    """List the providers a job can be created on now (Active, worker key unexpired, with free
    GPUs backed by stake, worker online), filtered by QUERY, cheapest effective price first.

    Every provider's worker is asked GET /v1/health (3 s each, 5 s in all, in parallel):
    one that does not answer is offline, hidden unless --all, and ranked last. ONLINE is
    yes / no / - (no worker endpoint: rents bare GPUs); CLUSTER is yes / no / - (not
    known: the worker did not answer) for serving cluster nodes; LAST SEEN is "now", the end of the
    last window its committee settled on chain ("2026-11-27 13:40 UTC (12 min ago)"), or
    "never".

    \b
    QUERY: space-separated clauses `field op value`; all must hold. Quote clauses with < or >
    for the shell, and values with spaces:
      gpum offers gpu_model=H100 'gpus>=2' 'price<=2.5' region in us-west,eu-west
      gpum offers 'gpu_model="RTX 4090"' workloads=true --sort score-
    Operators: = != < <= > >= in notin; lists [a,b] or a,b.
    Fields:
      gpu_model       text; = and in match a substring (case-insensitive, _ = space)
      region          text; the whole region (case-insensitive)
      gpus            free GPUs a job can take;  gpus_total: all GPUs
      vram            GiB per GPU
      price           payment-mint UI units per GPU-hour
      stake           stake-mint UI units
      score           reputation score, 0..1 (below)
      verified_hours  hours of work verified on chain
      jobs_completed, jobs_failed, slashes   whole numbers
      workloads       true/false: publishes a worker endpoint (runs containers)
      online          true/false: the worker answered its health probe; alone = true
      cluster         true/false: the worker serves cluster nodes (`gpum cluster
                      create`: it has a UDP port for the mesh); alone = true
      verified        true/false: a quorum of validators verified the GPUs (model,
                      count, VRAM) and nothing changed since; alone = true
      badge           true/false: verified and no slash for the market's
                      verified_record_seconds (30 days by default), missed windows
                      at most 1 % of the verified time; alone = true
      rating          users' average stars, 1..5 (unrated providers match only != and
                      notin);  ratings: how many users rated a job

    \b
    VERIFIED: badge / yes / failed (the last hardware challenge failed) / no.
    RATING: average stars (ratings); users rate billed jobs: gpum job rate JOB 1..5.

    \b
    score, from the provider's on-chain facts: 0 if jailed, else record * hw * stars
      record = (jobs_completed + 2) / (jobs_completed + jobs_failed + 4)
               / (1 + slashes) / (1 + windows_missed / (verified_hours + 1))
      hw     = 1 verified, 0.75 no verdict, 0.5 the last verdict failed
      stars  = (ratings_sum + 4 * 5) / (5 * (ratings + 5)): the average smoothed by
               five 4-star prior ratings, so one 5-star rating never beats a long record
    A new provider scores 0.3 (0.4 verified); one slash halves the score.
    rank (the default order): offline providers last; then price / (0.5 + 0.5 * score)
    ascending; then higher score, more free GPUs, provider address.
    """
    try:
        parsed = parse_query(query)
    except QueryError as e:
        raise click.BadParameter(str(e), param_hint="'QUERY'") from None
    try:
        sort_offers([], sort)
    except QueryError as e:
        raise click.BadParameter(str(e), param_hint="'--sort'") from None
    from ..accounts import effective_params

    client = env.client
    m = market_view(env, market)
    now_ = now(env)
    providers = list_providers(client, market)
    params = effective_params(m, now_)
    before = offers_from_providers(providers, now=now_, include_full=False, params=params,
                                   min_stake_per_gpu=params.min_stake_per_gpu)  # fmt: skip
    before = with_liveness(before, _probe(before))
    pdec = client.mint_decimals(m.payment_mint)
    sdec = client.mint_decimals(m.stake_mint)
    matched = filter_offers(before, parsed, payment_decimals=pdec, stake_decimals=sdec)
    offline = [o for o in matched if o.online is False]
    if not show_all:
        matched = [o for o in matched if o.online is not False]
    ordered = sort_offers(matched, sort)
    shown = ordered[:limit] if limit else ordered
    shown = [replace(o, last_seen=last_settled_window(client, o.provider, market))
             if o.online is False else o for o in shown]  # fmt: skip
    if env.output == "json":
        click.echo(json.dumps([offer_row(o, pdec, sdec) for o in shown]))
        return
    if m.paused:
        click.echo(f"note: market {market} is paused: no job can be created until its authority "
                   "runs `gpum market unpause`", err=True)  # fmt: skip
    hidden = "" if show_all or not offline else (
        f"{len(offline)} offline provider(s) hidden (their worker does not answer "
        "/v1/health): --all shows them")  # fmt: skip
    if not shown:
        click.echo(hidden or _why_none(market, providers, before, parsed, pdec, sdec, now_))
        return
    for line in _table(shown, pdec, sdec, time.time()):
        click.echo(line)
    if len(shown) < len(ordered):
        click.echo(f"... {len(ordered) - len(shown)} more offer(s): raise --limit (0 = all)")
    if hidden:
        click.echo(hidden)
