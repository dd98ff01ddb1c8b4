"""``gpum provider ...``: register your keypair as a GPU provider, stake, change price, spec,
endpoint or availability, rotate the worker key, unstake and withdraw, and show a provider.
"""

from __future__ import annotations

import click
from solders.pubkey import Pubkey

from ..units import format_ui_amount
from .base import PUBKEY, CliError, Env, withdraw_released
from .base import common as _common
from .base import market_option as _market_option
from .base import market_view as _market
from .base import parse_amount as _amount

__all__ = ["provider"]


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
@click.option("--price", required=True, help="Price per GPU-second, payment-mint UI units.")
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
    price_base = _amount(price, env.client.mint_decimals(m.payment_mint), "'--price'")
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
    """Show a provider's spec, status, stake and reputation."""
    from .. import pda

    owner = owner or env.keypair.pubkey()
    address = pda.provider_pda(market, owner, env.client.program_id)
    p = env.client.fetch_provider(address)
    if p is None:
        raise CliError(f"{owner} is not a provider of market {market}; run `gpum provider register`")
    m = _market(env, market)
    sd = env.client.mint_decimals(m.stake_mint)
    pdec = env.client.mint_decimals(m.payment_mint)
    env.emit(
        {
            "provider": str(address),
            "owner": str(p.owner),
            "worker_key": str(p.worker_key),
            "worker_key_expires_at": p.worker_key_expires_at or "never",
            "retired_worker_keys": [f"{r.key} (retired at {r.retired_at})"
                                    for r in p.retired_worker_keys],
            "status": p.status if p.jailed_until is None else f"jailed until {p.jailed_until}",
            "gpu_model": p.spec.gpu_model,
            "gpus": f"{p.gpus_in_use}/{p.spec.gpu_count} in use",
            "vram_mib": p.spec.vram_mib,
            "region": p.spec.region,
            "price_per_gpu_second": format_ui_amount(p.price_per_gpu_second, pdec),
            "stake": format_ui_amount(p.stake, sd),
            "unbonding": format_ui_amount(p.unbonding.amount, sd),
            "verified_seconds": p.reputation.verified_seconds,
            "jobs_completed": p.reputation.jobs_completed,
        }
    )


@provider.command("update")
@_common
@_market_option
@click.option("--price", default=None, help="Price per GPU-second, payment-mint UI units.")
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
        price_base = _amount(price, env.client.mint_decimals(_market(env, market).payment_mint), "'--price'")
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
