"""``gpum provider ...``: register your keypair as a GPU provider, stake, change price, spec,
endpoint or availability, rotate the worker key, unstake and withdraw, and show a provider.
"""

from __future__ import annotations

from typing import Any

import click
from solders.pubkey import Pubkey

from ..units import format_price_per_hour, format_ui_amount, when
from .base import PUBKEY, CliError, Env, emit_dated, withdraw_released
from .base import common as _common
from .base import market_option as _market_option
from .base import market_view as _market
from .base import now as _now
from .base import parse_amount as _amount

__all__ = ["provider"]

PRICE_HELP = ("Price per GPU-hour, in payment-mint tokens (e.g. 1.8). It must come to a whole "
              "number of base units per GPU-second, the unit the chain keeps; another price is "
              "refused, naming the two nearest that do.")


def _price(text: str, decimals: int) -> int:
    """``--price`` (tokens per GPU-hour) as the chain keeps it, base units per GPU-second."""
    from ..units import AmountError, parse_price_per_hour

    try:
        return parse_price_per_hour(text, decimals)
    except AmountError as e:
        raise click.BadParameter(str(e), param_hint="'--price'") from None


@click.group()
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
@click.option("--price", required=True, help=PRICE_HELP)
@click.option("--worker-key-expires-at", type=click.IntRange(0), default=0, help="Unix time; 0 = never.")
@click.option("--endpoint", default="", help="Your worker's public API URL (gpum-worker "
              "--api-listen), where users deliver workloads and read logs; without it you "
              "run no workloads.")
def provider_register(env: Env, market: Pubkey, worker_key: Pubkey, gpu_model: str,
                      gpu_count: int, vram_mib: int, region: str, price: str,
                      worker_key_expires_at: int, endpoint: str) -> None:  # fmt: skip
    """Register your keypair as a provider (creates your payment ATA if missing)."""
    from .. import pda, tokens
    from ..accounts import GPU_MODEL_LEN, REGION_LEN, encode_fixed_str, encode_optional_endpoint

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
    price_base = _price(price, env.client.mint_decimals(m.payment_mint))
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
    """Show a provider: whether a new job can rent it and if not why, its rentable GPUs,
    price per GPU-hour, stake, unbonding and its release date, earnings and reputation. Its
    worker is asked GET /v1/health (3 s at most)."""
    from .. import pda, tokens
    from ..accounts import effective_params
    from ..errors import AccountNotFound

    owner = owner or env.keypair.pubkey()
    address = pda.provider_pda(market, owner, env.client.program_id)
    p = env.client.fetch_provider(address)
    if p is None:
        raise CliError(f"{owner} is not a provider of market {market}; run `gpum provider register`")
    m = _market(env, market)
    sd = env.client.mint_decimals(m.stake_mint)
    pdec = env.client.mint_decimals(m.payment_mint)
    now = _now(env)
    min_stake = effective_params(m, now).min_stake_per_gpu
    worker = _worker_health(p)
    why = not_rentable_reasons(p, market_paused=m.paused, min_stake_per_gpu=min_stake, now=now,
                               stake_decimals=sd, worker_problem=worker)
    backed = p.free_gpus if min_stake <= 0 else p.stake // min_stake - p.gpus_in_use
    rentable = 0 if why else max(0, min(p.free_gpus, backed))
    payment_account = tokens.ata(p.owner, m.payment_mint)
    try:
        balance: int | None = env.client.token_balance(payment_account)
    except AccountNotFound:
        balance = None
    live = env.client.list_jobs(provider=address)
    earned_live = sum(j.paid_provider for j in live)
    data: dict[str, Any] = {
        "provider": str(address),
        "owner": str(p.owner),
        "rentable": "yes" if not why else "no",
        "why_not_rentable": why if env.output == "json" else "; ".join(why) or "-",
        "gpus": f"{rentable}/{p.spec.gpu_count} rentable now, {p.gpus_in_use} in use",
        "status": p.status,
        "worker": worker or ("online" if p.endpoint else "none (no endpoint: rents bare GPUs "
                                                         "only, runs no workloads)"),
        "endpoint": p.endpoint or "-",
        "worker_key": str(p.worker_key),
        "worker_key_expires_at": p.worker_key_expires_at or "never",
        "retired_worker_keys": [f"{r.key} (retired {when(r.retired_at, now)})"
                                for r in p.retired_worker_keys],
        "gpu_model": p.spec.gpu_model,
        "vram_mib": p.spec.vram_mib,
        "region": p.spec.region,
        "price_per_gpu_hour": format_price_per_hour(p.price_per_gpu_second, pdec),
        "stake": format_ui_amount(p.stake, sd),
        "stake_needed_for_all_gpus": format_ui_amount(min_stake * p.spec.gpu_count, sd),
        "unbonding": format_ui_amount(p.unbonding.amount, sd),
        "unbonding_release_at": p.unbonding.release_at if p.unbonding.amount else 0,
        "earned_by_jobs_not_closed": f"{format_ui_amount(earned_live, pdec)} "
                                     f"({len(live)} job(s); the chain keeps no total for closed "
                                     "jobs)",
        "payment_account": str(payment_account),
        "payment_account_balance": "-" if balance is None else format_ui_amount(balance, pdec),
        "verified_job_hours": f"{p.reputation.verified_seconds / 3600:.2f}",
        "jobs_completed": p.reputation.jobs_completed,
        "jobs_failed": p.reputation.jobs_failed,
        "slashes": p.reputation.slashes,
    }
    if p.jailed_until is not None:
        data["jailed_until"] = p.jailed_until
    if not why and rentable < p.free_gpus:
        need = min_stake * (p.gpus_in_use + p.free_gpus) - p.stake
        data["stake_note"] = (f"the stake {format_ui_amount(p.stake, sd)} backs {rentable} of the "
                              f"{p.free_gpus} GPU(s) not in use: `gpum provider stake "
                              f"{format_ui_amount(need, sd)}` to rent them all")
    if env.output == "json":
        data.update(price_per_gpu_second=p.price_per_gpu_second, rentable_gpus=rentable,
                    gpus_total=p.spec.gpu_count, gpus_in_use=p.gpus_in_use,
                    earned_by_jobs_not_closed=earned_live,
                    payment_account_balance=balance)  # fmt: skip
    emit_dated(env, data, now, ("jailed_until", "worker_key_expires_at", "unbonding_release_at"))


def _worker_health(p: Any) -> str:
    """Why the provider's worker is not healthy ("" when it answers as its current key, or
    when there is no endpoint to ask)."""
    if not p.endpoint:
        return ""
    from ..net import BoundedClient
    from ..offers import probe_worker

    with BoundedClient() as http:
        why = probe_worker(http, p.endpoint, p.worker_key)
    return f"offline: {why}" if why else ""


def not_rentable_reasons(p: Any, *, market_paused: bool, min_stake_per_gpu: int, now: int,
                         stake_decimals: int, worker_problem: str = "") -> list[str]:
    """Why ``create_job`` would refuse a new one-GPU job on provider ``p`` now, or a job would
    never start (an expired worker key accepts none; an offline worker runs none), each with
    what to do; [] when it is rentable."""
    out = []
    if market_paused:
        out.append("the market is paused by its authority: no job can be created")
    if p.status == "paused":
        out.append("you stopped taking jobs: `gpum provider update --accepting-jobs` resumes")
    elif p.status == "jailed":
        until = p.jailed_until or 0
        if until > now:
            out.append(f"jailed after an equivocation slash until {when(until, now)}; then "
                       "`gpum provider update --accepting-jobs`")
        else:
            out.append(f"jailed until {when(until, now)}: `gpum provider update "
                       "--accepting-jobs` returns it to the market")
    if p.free_gpus == 0:
        out.append(f"all {p.spec.gpu_count} GPU(s) are in use")
    elif min_stake_per_gpu > 0 and p.stake < min_stake_per_gpu * (p.gpus_in_use + 1):
        need = min_stake_per_gpu * (p.gpus_in_use + 1) - p.stake
        out.append(f"the stake {format_ui_amount(p.stake, stake_decimals)} backs "
                   f"{p.stake // min_stake_per_gpu} GPU(s) at the market's min_stake_per_gpu "
                   f"{format_ui_amount(min_stake_per_gpu, stake_decimals)} and "
                   f"{p.gpus_in_use} are in use: `gpum provider stake "
                   f"{format_ui_amount(need, stake_decimals)}` or more")
    if p.worker_key_expires_at and now > p.worker_key_expires_at:
        out.append(f"the worker key expired {when(p.worker_key_expires_at, now)} and accepts no "
                   "job: `gpum provider rotate-key NEW_WORKER_KEY`")
    if worker_problem:
        out.append(f"the worker is {worker_problem}: a job would not start")
    return out


@provider.command("update")
@_common
@_market_option
@click.option("--price", default=None, help=PRICE_HELP)
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
    from .. import pda
    from ..accounts import GPU_MODEL_LEN, REGION_LEN, encode_fixed_str

    spec = {k: v for k, v in (("gpu_model", gpu_model), ("gpu_count", gpu_count),
                               ("vram_mib", vram_mib), ("region", region)) if v is not None}  # fmt: skip
    if price is None and not spec and accepting_jobs is None and endpoint is None:
        raise click.UsageError("nothing to update: pass --price, a spec option, --endpoint or "
                               "--accepting-jobs/--not-accepting-jobs")  # fmt: skip
    if endpoint is not None:
        from ..accounts import encode_optional_endpoint

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
        price_base = _price(price, env.client.mint_decimals(_market(env, market).payment_mint))
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
    from .. import pda

    kp = env.keypair
    address = pda.provider_pda(market, kp.pubkey(), env.client.program_id)
    p = env.client.fetch_provider(address)
    if p is None:
        raise CliError(f"{kp.pubkey()} is not a provider of market {market}")
    withdraw_released(env, market, p.unbonding.amount, env.client.withdraw_unstaked)
