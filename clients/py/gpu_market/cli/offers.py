"""``gpum offers``: the market's offers, filtered by a query, sorted and limited.

What an offer is, the reputation score, the ranking and the query language are defined in
:mod:`gpu_market.offers`; this module reads the chain once (market, clock, providers, mint
decimals) and prints a table (text) or a JSON list with every field (``--output json``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click
from solders.pubkey import Pubkey

from ..offers import (
    Offer,
    Query,
    QueryError,
    filter_offers,
    list_providers,
    offers_from_providers,
    parse_query,
    sort_offers,
)
from ..units import format_ui_amount
from .base import Env, common, market_option, market_view, now

__all__ = ["offer_row", "offers"]

DEFAULT_LIMIT = 20


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
        "verified_hours": o.verified_hours,
        "jobs_completed": o.jobs_completed,
        "jobs_failed": o.jobs_failed,
        "slashes": o.slashes,
        "jailed": o.jailed,
        "workloads": o.runs_workloads,
        "endpoint": o.endpoint,
    }


def _gib(mib: int) -> str:
    return f"{mib / 1024:.1f}".removesuffix(".0")


def _table(rows: Sequence[Offer], payment_decimals: int, stake_decimals: int) -> list[str]:
    """Aligned text lines: a header and one line per offer, in order."""
    header = ("PROVIDER", "GPU MODEL", "FREE/TOTAL", "VRAM GiB", "REGION", "PRICE/GPU-H",
              "STAKE", "SCORE", "WORKLOADS")  # fmt: skip
    cells = [header] + [
        (str(o.provider), o.gpu_model or "-", f"{o.gpus_free}/{o.gpus_total}", _gib(o.vram_mib),
         o.region or "-", format_ui_amount(o.price_per_gpu_hour(), payment_decimals),
         format_ui_amount(o.stake, stake_decimals), f"{o.score:.2f}",
         "yes" if o.runs_workloads else "no")
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
def offers(env: Env, market: Pubkey, query: tuple[str, ...], sort: str, limit: int) -> None:
    """List the providers a job can be created on now (Active, worker key unexpired, with free
    GPUs backed by stake), filtered by QUERY, cheapest effective price first.

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

    \b
    score, from the provider's on-chain reputation: 0 if jailed, else
      (jobs_completed + 2) / (jobs_completed + jobs_failed + 4)
        / (1 + slashes) / (1 + windows_missed / (verified_hours + 1))
    A new provider scores 0.5; one slash halves the score, two leave a third.
    rank (the default order): price / (0.5 + 0.5 * score) ascending; then higher score, more
    free GPUs, provider address.
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
    before = offers_from_providers(providers, now=now_, include_full=False,
                                   min_stake_per_gpu=effective_params(m, now_).min_stake_per_gpu)  # fmt: skip
    pdec = client.mint_decimals(m.payment_mint)
    sdec = client.mint_decimals(m.stake_mint)
    ordered = sort_offers(filter_offers(before, parsed, payment_decimals=pdec, stake_decimals=sdec), sort)
    shown = ordered[:limit] if limit else ordered
    if env.output == "json":
        click.echo(json.dumps([offer_row(o, pdec, sdec) for o in shown]))
        return
    if m.paused:
        click.echo(f"note: market {market} is paused: no job can be created until its authority "
                   "runs `gpum market unpause`", err=True)  # fmt: skip
    if not shown:
        click.echo(_why_none(market, providers, before, parsed, pdec, sdec, now_))
        return
    for line in _table(shown, pdec, sdec):
        click.echo(line)
    if len(shown) < len(ordered):
        click.echo(f"... {len(ordered) - len(shown)} more offer(s): raise --limit (0 = all)")
