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
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from ..units import AmountError, format_ui_amount, parse_ui_amount

__all__ = [
    "DEFAULT_KEYPAIR",
    "MONIKERS",
    "PUBKEY",
    "CliError",
    "Env",
    "PubkeyType",
    "common",
    "job_view",
    "load_keypair",
    "market_option",
    "market_view",
    "now",
    "one_line",
    "params_dict",
    "parse_amount",
    "parse_callback",
    "resolve_url",
    "token_holding",
    "withdraw_released",
]

MONIKERS = {
    "localnet": "http://127.0.0.1:8899",
    "localhost": "http://127.0.0.1:8899",
    "devnet": "https://api.devnet.solana.com",
    "testnet": "https://api.testnet.solana.com",
    "mainnet-beta": "https://api.mainnet-beta.solana.com",
    "l": "http://127.0.0.1:8899",
    "d": "https://api.devnet.solana.com",
    "t": "https://api.testnet.solana.com",
    "m": "https://api.mainnet-beta.solana.com",
}
DEFAULT_KEYPAIR = "~/.config/solana/id.json"
SOLANA_CONFIG = "~/.config/solana/cli/config.yml"


class CliError(click.ClickException):
    """A one-line, actionable failure (exit code 1)."""

    exit_code = 1


# ----------------------------------------------------------------------------- pure helpers


def _solana_config() -> dict[str, str]:
    """``json_rpc_url`` and ``keypair_path`` from the Solana CLI config, if readable."""
    path = Path(os.environ.get("GPUM_SOLANA_CONFIG", SOLANA_CONFIG)).expanduser()
    out: dict[str, str] = {}
    try:
        for line in path.read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() in ("json_rpc_url", "keypair_path"):
                out[key.strip()] = value.strip().strip("'\"")
    except OSError:
        pass
    return out


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
