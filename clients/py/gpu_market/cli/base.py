"""What every ``gpum`` command shares: the common options (``--url``, ``--keypair``,
``--program-id``, ``--output``) and the :class:`Env` they resolve to, keypair and URL
resolution, the argument types (public keys, token amounts, parsed callbacks), the ``--output``
formatting, and the small chain reads every command group uses (market, job, clock, your token
balance). Command modules import this one and each other's helpers, never the package
:mod:`gpu_market.cli` (which imports them to assemble the command tree).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from ..solana_cli import DEFAULT_KEYPAIR, MONIKERS
from ..solana_cli import solana_config as _solana_config
from ..units import (
    AmountError,
    DurationError,
    format_ui_amount,
    parse_seconds,
    parse_ui_amount,
    when,
)

__all__ = [
    "DEFAULT_KEYPAIR",
    "DURATION",
    "JOB",
    "MONIKERS",
    "PUBKEY",
    "CliError",
    "Duration",
    "Env",
    "JobName",
    "PubkeyType",
    "common",
    "emit_dated",
    "job_view",
    "load_keypair",
    "market_option",
    "market_view",
    "now",
    "one_line",
    "params_dict",
    "parse_amount",
    "parse_callback",
    "resolve_job",
    "resolve_url",
    "token_holding",
    "when",
    "withdraw_released",
]



class CliError(click.ClickException):
    """A one-line, actionable failure (exit code 1)."""

    exit_code = 1


# ----------------------------------------------------------------------------- pure helpers


def resolve_url(value: str | None) -> str:
    """A moniker or URL -> URL (default: Solana CLI config, else localnet)."""
    if value is None:
        value = _solana_config().get("json_rpc_url", "localnet")
    if value in MONIKERS:
        return MONIKERS[value]
    if value.startswith(("http://", "https://")):
        return value
    raise click.BadParameter(
        f"{value!r} is not a URL or one of localnet, devnet, testnet, mainnet-beta",
        param_hint="'--url'",
    )


def load_keypair(path: str) -> Keypair:
    """Read a Solana JSON keypair file (array of 64 bytes); CliError says how to fix it."""
    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise CliError(
            f"keypair file {p} not found: create one with `solana-keygen new -o {p}` "
            "or pass --keypair PATH"
        ) from None
    except OSError as e:
        raise CliError(f"cannot read keypair file {p}: {e.strerror}") from None
    try:
        raw = json.loads(text)
        if not (isinstance(raw, list) and len(raw) == 64 and all(isinstance(b, int) for b in raw)):
            raise ValueError
        return Keypair.from_bytes(bytes(raw))
    except ValueError:
        raise CliError(
            f"keypair file {p} is not a Solana keypair (expected a JSON array of 64 bytes, "
            "as written by `solana-keygen new`)"
        ) from None


class PubkeyType(click.ParamType):
    """A base58 public key."""

    name = "PUBKEY"

    def convert(self, value: Any, param: Any, ctx: Any) -> Pubkey:
        if isinstance(value, Pubkey):
            return value
        try:
            return Pubkey.from_string(str(value).strip())
        except ValueError:
            self.fail(f"{value!r} is not a valid base58 public key", param, ctx)


PUBKEY = PubkeyType()


class Duration(click.ParamType):
    """A duration, one syntax for every flag that takes one: a bare number in the flag's
    ``unit`` (s, m, h, d) or ``30s``, ``30m``, ``1h``, ``1h30m``, ``2d``
    (:func:`gpu_market.units.parse_duration`). Converts to seconds: an ``int`` when ``whole``,
    else a ``float``; ``low``/``high`` bound it in seconds."""

    name = "DURATION"

    def __init__(self, unit: str = "s", *, whole: bool = True, low: float | None = None,
                 high: float | None = None) -> None:
        self.unit, self.whole, self.low, self.high = unit, whole, low, high

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)  # a default: a number in the flag's unit
        try:
            seconds = parse_seconds(value, self.unit, whole=self.whole, low=self.low,
                                    high=self.high)
        except DurationError as e:
            self.fail(str(e), param, ctx)
        return int(seconds) if self.whole else float(seconds)


DURATION = Duration()
"""Whole seconds: a bare number of seconds or ``90s``, ``15m``, ``2h``, ``1h30m``, ``2d``."""


class JobName(str):
    """A job's human name (``--name`` at ``job create`` / ``gpum run``), resolved to its address
    by :func:`common` once ``--url`` is known."""


class JobRefType(click.ParamType):
    """A job's address, or the name you gave it: a :class:`Pubkey`, or a :class:`JobName` that
    the ``common`` wrapper turns into one (:func:`resolve_job`)."""

    name = "JOB"

    def convert(self, value: Any, param: Any, ctx: Any) -> Pubkey | JobName:
        from ..job_history import HistoryError, check_name, parse_job_address

        if isinstance(value, Pubkey):
            return value
        address = parse_job_address(str(value))
        if address is not None:
            return address
        try:
            return JobName(check_name(str(value).strip()))
        except HistoryError:
            self.fail(f"{value!r} is neither a job address (base58) nor a job name", param, ctx)


JOB = JobRefType()


# ----------------------------------------------------------------------------- context


class Env:
    """Resolved common options, and the lazily built client."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.keypair_path: str | None = None
        self.program_id: Pubkey | None = None
        self.output = "text"
        self._client = None
        self._keypair: Keypair | None = None

    @property
    def keypair(self) -> Keypair:
        if self._keypair is None:
            path = self.keypair_path or _solana_config().get("keypair_path", DEFAULT_KEYPAIR)
            self._keypair = load_keypair(path)
        return self._keypair

    @property
    def client(self):
        if self._client is None:
            from ..client import GpuMarketClient
            from ..constants import PROGRAM_ID

            self._client = GpuMarketClient(
                resolve_url(self.url), payer=None, program_id=self.program_id or PROGRAM_ID
            )
        return self._client

    def emit(self, data: dict[str, Any], text_lines: list[str] | None = None) -> None:
        if self.output == "json":
            click.echo(json.dumps(data, default=str, sort_keys=False))
        else:
            for line in text_lines if text_lines is not None else _text_lines(data):
                click.echo(line)


def emit_dated(env: Env, data: dict[str, Any], now: int, keys: Any) -> None:
    """``env.emit(data)`` where the text shows the Unix times under ``keys`` as :func:`when`
    from ``now`` (``-`` for 0, not yet) and ``--output json`` keeps them Unix seconds."""
    shown = {k: ((when(v, now) if v else "-") if k in keys and isinstance(v, int) else v)
             for k, v in data.items()}
    env.emit(data, None if env.output == "json" else _text_lines(shown))


def _text_lines(data: dict[str, Any], indent: str = "") -> list[str]:
    """``key: value`` lines; nested dicts indented under their key."""
    lines = []
    for k, v in data.items():
        if isinstance(v, dict) and v:
            lines.append(f"{indent}{k}:")
            lines.extend(_text_lines(v, indent + "  "))
        elif isinstance(v, list):
            lines.append(f"{indent}{k}: {', '.join(map(str, v)) or 'none'}")
        else:
            lines.append(f"{indent}{k}: {v}")
    return lines


def common(f: Callable) -> Callable:
    """Common options, accepted on the group and on every command."""

    @click.option("--url", "-u", default=None, help="RPC URL or moniker (localnet, devnet, ...).")
    @click.option("--keypair", "-k", "keypair_path", default=None, help="Signer keypair file.")
    @click.option("--program-id", type=PUBKEY, default=None, help="gpu_market program id.")
    @click.option(
        "--output", type=click.Choice(["text", "json"]), default=None, help="Output format."
    )
    @functools.wraps(f)
    def wrapper(*args: Any, url=None, keypair_path=None, program_id=None, output=None, **kw: Any):
        env = click.get_current_context().ensure_object(Env)
        if url is not None:
            env.url = url
        if keypair_path is not None:
            env.keypair_path = keypair_path
        if program_id is not None:
            env.program_id = program_id
        if output is not None:
            env.output = output
        if env.url is not None:
            resolve_url(env.url)  # fail early on a bad moniker
        kw = {k: resolve_job(env, v) if isinstance(v, JobName) else v for k, v in kw.items()}
        return f(env, *args, **kw)

    return wrapper


def market_option(f: Callable) -> Callable:
    return click.option(
        "--market",
        type=PUBKEY,
        required=True,
        envvar="GPUM_MARKET",
        help="Market address (or set GPUM_MARKET).",
    )(f)


def parse_amount(text: str, decimals: int, what: str, allow_zero: bool = False) -> int:
    try:
        return parse_ui_amount(text, decimals, allow_zero=allow_zero)
    except AmountError as e:
        raise click.BadParameter(str(e), param_hint=what) from None


def parse_callback(parse: Callable[[str], Any], hint: str) -> Callable[[Any, Any, Any], Any]:
    """A click callback applying ``parse``; its ValueError becomes BadParameter for ``hint``."""

    def callback(ctx: Any, param: Any, value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint=hint) from None

    return callback


def market_view(env: Env, market: Pubkey):
    m = env.client.fetch_market(market)
    if m is None:
        raise CliError(f"market {market} does not exist on {env.client.url}; check --market and --url")
    return m


def now(env: Env) -> int:
    """The chain's clock (what the program's deadlines are measured by)."""
    return env.client.chain_time()


def params_dict(params: Any) -> dict[str, Any]:
    return dict(vars(params))


def job_view(env: Env, address: Pubkey):
    j = env.client.fetch_job(address)
    if j is None:
        raise CliError(f"job {address} does not exist (closed, or wrong --url)")
    return j


def resolve_job(env: Env, ref: str | Pubkey) -> Pubkey:
    """The job address ``ref`` names: an address as is, else the current attempt of the managed
    job of that name (:mod:`gpu_market.managed`), else the job of that name on this cluster in
    the local history (:mod:`gpu_market.job_history`); CliError for an unknown or ambiguous
    name."""
    from ..job_history import HistoryError, JobHistory

    if isinstance(ref, Pubkey):
        return ref
    from ..managed.store import StoreError, current_job

    try:
        managed = current_job(str(ref), resolve_url(env.url))
    except StoreError as e:
        raise CliError(str(e)) from None
    if managed is not None:
        return managed
    try:
        return JobHistory().resolve(str(ref), resolve_url(env.url))
    except HistoryError as e:
        raise CliError(str(e)) from None


def one_line(message: str) -> str:
    return " ".join(str(message).split())


def token_holding(env: Env, mint: Pubkey) -> tuple[Pubkey, int]:
    """Your keypair's associated token account of ``mint`` and what it holds (0 while the
    account does not exist)."""
    from .. import tokens
    from ..errors import AccountNotFound

    account = tokens.ata(env.keypair.pubkey(), mint)
    try:
        held = env.client.token_balance(account)
    except AccountNotFound:
        held = 0
    return account, held


def withdraw_released(env: Env, market: Pubkey, amount: int, withdraw: Callable[..., Any]) -> None:
    """Send ``withdraw(keypair, market)`` (a provider's or a validator's withdrawal of released
    unbonding stake) and print ``amount``, what it moves, in stake-mint UI units."""
    m = market_view(env, market)
    released = format_ui_amount(amount, env.client.mint_decimals(m.stake_mint))
    sig = withdraw(env.keypair, market)
    env.emit({"withdrawn": released, "signature": str(sig)})
