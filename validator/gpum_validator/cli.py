"""``gpum-validator``: ``run`` (intake, committee member endpoints, settle rounds, slash
reports) and ``status`` (reads the database).

Every configuration problem exits with status 2 and one line ``error: ...`` saying what to
fix; logs are one line per event: ``time level component message``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click
from gpu_market.units import DurationError, format_ui_amount, parse_seconds, when
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from .chain import JOB_READS_PER_SOURCE, ReadBudget
from .config import (
    DEFAULT_LISTEN,
    DEFAULT_SETTLE_EVERY,
    ChallengeConfig,
    HealthThresholds,
    SettlePolicy,
    VerifyConfig,
)
from .errors import ConfigError, StoreError, ValidatorError
from .retention import DEFAULT_RETENTION_DAYS
from .verify import field_of

log = logging.getLogger("gpum_validator")


def default_db() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpum-validator" / "validator.sqlite"


def open_db(db: str, serving: bool = False) -> Any:
    """The store ``--db`` names: a ``postgresql://`` URL (``store_pg.PostgresStore``) or an
    SQLite file (``store_sqlite.SQLiteStore``; its directory is created). ``serving``: for
    ``gpum-validator run`` (SQLite's WAL checkpoints on a thread of their own)."""
    from .store_pg import PostgresStore, is_postgres_url
    from .store_sqlite import SQLiteStore

    if is_postgres_url(db):
        return PostgresStore(db)
    path = Path(db)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--db {path}: cannot create its directory ({e})") from None
    return SQLiteStore(path, background_checkpoints=serving)


def describe_db(db: str) -> str:
    """``--db`` for a log line: a URL without its password."""
    from .store_pg import describe

    return describe(db)


LIBRARY_LOGGERS = ("httpx", "httpcore", "urllib3", "solana", "solders", "anchorpy",
                   "websockets", "asyncio", "hpack", "h2")
"""Loggers of the libraries the node uses: their INFO is a line per HTTP request of its own
client (``HTTP Request: POST ... 200 OK``), shown from ``-vv`` on."""


def setup_logging(level: str, verbose: int = 0) -> None:
    """One line per event: ``time level component message``. The node's own components log at
    ``level`` (DEBUG from ``-v``); the libraries' loggers stay at WARNING, INFO with ``-vv`` (a
    line per HTTP request), DEBUG with ``-vvv``."""
    own = logging.DEBUG if verbose >= 1 else getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(
        level=own, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%S%z")
    logging.getLogger().setLevel(own)
    libraries = {0: logging.WARNING, 1: logging.WARNING, 2: logging.INFO}.get(verbose,
                                                                             logging.DEBUG)
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(libraries)


def load_keypair(path: Path) -> Keypair:
    """Solana CLI key file (JSON array of 64 ints); ConfigError naming the problem."""
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"--keypair {path}: file not found; create one with "
                          "`solana-keygen new -o PATH`") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"--keypair {path}: cannot read a JSON key file ({e})") from None
    if (not isinstance(raw, list) or len(raw) != 64
            or not all(isinstance(b, int) and 0 <= b <= 255 for b in raw)):
        raise ConfigError(f"--keypair {path}: expected a JSON array of 64 bytes "
                          "(Solana CLI format)")
    try:
        kp = Keypair.from_bytes(bytes(raw))
    except ValueError as e:
        raise ConfigError(f"--keypair {path}: not a valid ed25519 keypair ({e})") from None
    if bytes(kp.pubkey()) != bytes(raw[32:]):
        raise ConfigError(f"--keypair {path}: the public half does not match the secret half")
    return kp


def parse_address(text: str, flag: str) -> Pubkey:
    try:
        pk = Pubkey.from_string(text)
    except ValueError:
        pk = None
    if pk is None or str(pk) != text:
        raise ConfigError(f"{flag} {text!r} is not a base58 Solana address")
    return pk


def _duration(ctx: Any, param: Any, value: Any, unit: str, low: float) -> float:
    """Seconds of a duration flag: a bare number in ``unit`` or ``90s``, ``15m``, ``1h30m``,
    ``2d`` (the syntax of every ``gpum`` duration flag)."""
    try:
        return float(parse_seconds(str(value), unit, whole=False, low=low))
    except DurationError as e:
        raise click.BadParameter(str(e), ctx, param) from None


def _fail(e: Exception) -> None:
    click.echo(f"error: {e}", err=True)
    sys.exit(2)


@click.group()
def main() -> None:
    """gpu-market validator node: verifies worker proofs and settles them on chain."""


@main.command()
@click.option("--url", required=True, help="Solana JSON-RPC URL, e.g. http://127.0.0.1:8899")
@click.option("--keypair", "keypair_path", required=True, type=click.Path(path_type=Path),
              help="validator authority key file (Solana CLI JSON)")
@click.option("--market", required=True, help="Market account address")
@click.option("--program-id", default=None, help="gpu_market program id (default: the SDK's)")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, help="HOST:PORT for HTTP")
@click.option("--allow-remote", is_flag=True, help="allow a non-loopback --listen address")
@click.option("--db", "db_path", default=None,
              help="SQLite file or postgresql://user@host/db URL "
                   "[default: $XDG_STATE_HOME/gpum-validator/validator.sqlite]")
@click.option("--retention-days", default=DEFAULT_RETENTION_DAYS, show_default=True,
              type=str, metavar="DURATION", callback=lambda c, p, v: _duration(c, p, v, "d", 0) / 86_400,
              help="days (or a duration: 12h, 30d) after a job ended on chain before its "
                   "proofs are pruned (equivocation evidence is kept); 0 keeps everything")
@click.option("--settle-every", default=DEFAULT_SETTLE_EVERY, show_default=True, type=int,
              help="settle a job every N accepted windows")
@click.option("--settle-interval", default=5, show_default=True,
              type=str, metavar="DURATION", callback=lambda c, p, v: _duration(c, p, v, "s", 0.01),
              help="seconds (or a duration: 5s, 1m) between settlement passes")
@click.option("--leader-timeout", default=2.0, show_default=True, type=float,
              help="windows a round's leader has before the next committee member leads")
@click.option("--temp-critical-c", default=None, type=int,
              help="own stricter critical GPU temperature (the lower of it and the job's "
                   "terms applies)")
@click.option("--ecc-uncorrected-max", default=None, type=int,
              help="own stricter allowance of uncorrected ECC errors per window")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]),
              help="level of the node's own log lines")
@click.option("-v", "--verbose", count=True,
              help="more log lines: -v the node's debug lines, -vv also a line per HTTP "
                   "request of its chain client, -vvv the libraries' debug lines")
@click.option("--max-connections", default=4096, show_default=True, type=int,
              help="open HTTP connections at most (lowered to fit the file-descriptor limit); "
                   "at the cap the longest idle one is closed")
@click.option("--max-connections-per-source", default=256, show_default=True, type=int,
              help="open connections per client IP (IPv6: per /64); more are closed at once")
@click.option("--max-in-flight-per-source", default=32, show_default=True, type=int,
              help="requests per client IP handled or queued for a handler at once; the "
                   "next ones wait their turn")
@click.option("--job-reads-per-source", default=JOB_READS_PER_SOURCE, show_default=True,
              type=float,
              help="chain reads of jobs not read yet that one client IP's proofs may cause per "
                   "second (bursts of ten times as many); past it: 429 chain_read_budget")
@click.option("--trusted-proxy", "trusted_proxies", multiple=True,
              default=("127.0.0.1", "::1"), show_default=True,
              help="the TLS proxy's IP: no connection cap, its requests count per client of "
                   "its X-Forwarded-For (which it must append); repeatable, 'none' for none")
@click.option("--challenges/--no-challenges", "challenge_enabled", default=False,
              show_default=True, help="challenge the market's providers' GPUs (challenger.py)")
@click.option("--challenge-interval", default="6h", show_default=True, metavar="DURATION",
              callback=lambda c, p, v: _duration(c, p, v, "s", 1),
              help="mean time between random challenges of one provider")
@click.option("--challenge-deadline", default="10m", show_default=True, metavar="DURATION",
              callback=lambda c, p, v: _duration(c, p, v, "s", 0.1),
              help="total deadline of one challenge (the answer and the opening)")
@click.option("--challenge-retry", default="10m", show_default=True, metavar="DURATION",
              callback=lambda c, p, v: _duration(c, p, v, "s", 0.1),
              help="when to ask again a worker whose GPUs were busy")
@click.option("--challenge-pass", default="30s", show_default=True, metavar="DURATION",
              callback=lambda c, p, v: _duration(c, p, v, "s", 0.1),
              help="how often the challenger looks for due providers")
@click.option("--challenge-n", default=8192, show_default=True, type=int,
              help="matrix size (a multiple of 256, 256..16384)")
@click.option("--challenge-rounds", default=64, show_default=True, type=int)
@click.option("--challenge-rows", default=16, show_default=True, type=int,
              help="rows opened and recomputed per GPU")
@click.option("--challenge-memory-fraction", default=0.9, show_default=True, type=float,
              help="part of each GPU's declared VRAM the memory challenge fills (0: none)")
@click.option("--challenge-max-memory-mib", default=1 << 20, show_default=True, type=int)
@click.option("--challenge-known-nvml", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="file of sha256 digests (one a line) of known NVML builds")
@click.option("--challenge-seed", type=int, default=None, hidden=True)
def run(url: str, keypair_path: Path, market: str, program_id: str | None, listen: str,
        allow_remote: bool, db_path: str | None, settle_every: int,
        settle_interval: float, leader_timeout: float, temp_critical_c: int | None,
        ecc_uncorrected_max: int | None, log_level: str,
        retention_days: float = DEFAULT_RETENTION_DAYS, max_connections: int = 4096,
        max_connections_per_source: int = 256, max_in_flight_per_source: int = 32,
        job_reads_per_source: float = JOB_READS_PER_SOURCE,
        trusted_proxies: tuple[str, ...] = ("127.0.0.1", "::1"), verbose: int = 0,
        **challenge: Any) -> None:
    """Serve the proof intake and the committee endpoints, lead settle rounds and report
    equivocation and downtime, until SIGINT/SIGTERM."""
    setup_logging(log_level, verbose)
    own: HealthThresholds | None = None
    if temp_critical_c is not None or ecc_uncorrected_max is not None:
        base = HealthThresholds(temp_critical_c=200, ecc_uncorrected_max=2**31)
        own = HealthThresholds(
            base.temp_critical_c if temp_critical_c is None else temp_critical_c,
            base.ecc_uncorrected_max if ecc_uncorrected_max is None else ecc_uncorrected_max)
    try:
        if own is not None:
            own.validate()
        policy = SettlePolicy(settle_every_windows=settle_every,
                              leader_timeout_windows=leader_timeout)
        policy.validate()
        if retention_days < 0:
            raise ConfigError("--retention-days must be 0 (keep everything) or more")
        if not job_reads_per_source > 0:
            raise ConfigError("--job-reads-per-source must be more than 0 (a source that may "
                              "cause no job read could never send a new job's first proof)")
        from .transport import HttpLimits

        limits = HttpLimits(max_connections=max_connections,
                            max_connections_per_source=max_connections_per_source,
                            max_in_flight_per_source=max_in_flight_per_source,
                            trusted_proxies=tuple(p for p in trusted_proxies if p != "none"))
        limits.validate()
        _run(url, keypair_path, market, program_id, listen, allow_remote,
             db_path or str(default_db()), policy, settle_interval, own,
             retention_days=retention_days, http_limits=limits,
             job_reads_per_source=job_reads_per_source,
             challenges=challenge_config(challenge))
    except ValidatorError as e:
        _fail(e)


def challenge_config(o: dict[str, Any]) -> ChallengeConfig:
    """The ``--challenge*`` flags as a ``ChallengeConfig`` (ConfigError when invalid)."""
    known = None
    if o.get("challenge_known_nvml") is not None:
        try:
            text = Path(o["challenge_known_nvml"]).read_text()
        except OSError as e:
            raise ConfigError(f"--challenge-known-nvml: {e}") from None
        words = [line.split("#", 1)[0].strip().lower() for line in text.splitlines()]
        known = frozenset(w for w in words if w)
        bad = [w for w in known if len(w) != 64 or any(c not in "0123456789abcdef" for c in w)]
        if bad:
            raise ConfigError(f"--challenge-known-nvml: {bad[0][:80]!r} is not a sha256 (64 "
                              "hex digits; one a line, # starts a comment)")
    c = ChallengeConfig(
        enabled=bool(o.get("challenge_enabled")), interval_seconds=o["challenge_interval"],
        deadline_seconds=o["challenge_deadline"], retry_seconds=o["challenge_retry"],
        pass_seconds=o["challenge_pass"], n=o["challenge_n"], rounds=o["challenge_rounds"],
        rows=o["challenge_rows"], memory_fraction=o["challenge_memory_fraction"],
        max_memory_mib=o["challenge_max_memory_mib"], known_nvml_sha256=known,
        seed=o.get("challenge_seed"))
    c.validate()
    return c


def _connect(url: str, payer: Keypair, program_id: Pubkey | None) -> Any:
    try:
        from gpu_market.client import GpuMarketClient
    except ImportError as e:
        raise ConfigError(f"the gpu_market SDK client is not installed ({e}); "
                          "pip install -e clients/py") from None
    kwargs: dict[str, Any] = {"payer": payer}
    if program_id is not None:
        kwargs["program_id"] = program_id
    try:
        return GpuMarketClient(url, **kwargs)
    except Exception as e:  # noqa: BLE001 - e.g. IdlNotFound; reported as one line
        raise ConfigError(f"cannot create the SDK client: {e}") from None


def _run(url: str, keypair_path: Path, market_s: str, program_id_s: str | None, listen: str,
         allow_remote: bool, db_path: str, policy: SettlePolicy, settle_interval: float,
         own_health: HealthThresholds | None, *,
         retention_days: float = DEFAULT_RETENTION_DAYS, http_limits: Any = None,
         job_reads_per_source: float = JOB_READS_PER_SOURCE,
         challenges: ChallengeConfig | None = None) -> None:
    from gpu_market import PROGRAM_ID
    from gpu_market.httpfront import raise_fd_limit, serve_in_thread

    from .dashboard import Dashboard
    from .downtime import DowntimeReporter
    from .intake import Intake
    from .liveness import EndpointProbe, Liveness
    from .members import Member
    from .metrics import Metrics
    from .peers import Peers
    from .rent_proxy import RentProxy
    from .retention import Pruner
    from .rewards import RewardsProbe
    from .server import HealthProbe, ValidatorHTTPServer
    from .settlement import SettlementLoop, Settler
    from .slashing import EquivocationReporter, ValidatorEquivocationReporter
    from .transport import parse_listen

    authority = load_keypair(keypair_path)
    market = parse_address(market_s, "--market")
    program_id = parse_address(program_id_s, "--program-id") if program_id_s else None
    host, port = parse_listen(listen, allow_remote)
    client = _connect(url, authority, program_id)
    try:
        market_view = client.fetch_market(market)
    except Exception as e:  # noqa: BLE001 - any failure here means "cannot use this RPC"
        raise ConfigError(f"cannot reach the RPC at {url}: {type(e).__name__}: {e}") from None
    if market_view is None:
        raise ConfigError(f"no Market account at {market} on {url}; check --market and "
                          "--program-id")
    # Window length, skew and health thresholds are per job (job.terms), read per proof.
    cfg = VerifyConfig(
        program_id=bytes(getattr(client, "program_id", None) or program_id or PROGRAM_ID),
        market=bytes(market), authority=bytes(authority.pubkey()), own_health=own_health)
    cfg.validate()
    store = open_db(db_path, serving=True)
    _remember_decimals(client, market_view, store)
    metrics = Metrics()
    peers = Peers(client, cfg.market, policy.peer_timeout_seconds, policy.endpoint_ttl_seconds)
    reporter = EquivocationReporter(client, authority, store, cfg.program_id, policy, metrics)
    intake = Intake(cfg, store, client, metrics, on_equivocation=reporter.notify,
                    job_reads=ReadBudget(job_reads_per_source))
    settler = Settler(client, authority, store, policy, metrics, peers=peers)
    own_endpoint = EndpointProbe(peers, cfg.authority)
    liveness = Liveness(store, own_endpoint)
    member = Member(cfg, authority, store, client, metrics, jobs=intake.jobs,
                    job_reads=intake.job_reads, policy=policy, liveness=liveness,
                    peers=peers, deliver=intake.submit)
    tasks = (ValidatorEquivocationReporter(client, authority, store, policy,
                                           metrics).report_pending,
             DowntimeReporter(client, authority, store, peers, policy, metrics,
                              liveness=liveness, deliver=intake.submit).report_pending,
             RewardsProbe(client, cfg.market, cfg.authority, store).refresh)
    if retention_days > 0:
        tasks += (Pruner(store, retention_days, client).run_once,)
    challenger = hardware = None
    if challenges is not None and challenges.enabled:
        from .challenger import Challenger
        from .hardware_quorum import HardwareQuorum

        hardware = HardwareQuorum(client, authority, store, cfg, challenges, peers)
        challenger = Challenger(client, authority, store, cfg, challenges, quorum=hardware)
    raise_fd_limit()  # idle connections cost a descriptor each, not a thread
    try:
        server = ValidatorHTTPServer((host, port), intake, store,
                                     HealthProbe(client, cfg.market), member=member,
                                     dashboard=Dashboard(client, store, cfg.market,
                                                         cfg.authority,
                                                         reads=intake.job_reads),
                                     limits=http_limits, hardware=hardware,
                                     rent=RentProxy(client, url, cfg.market, cfg.authority,
                                                    reads=intake.job_reads))
    except OSError as e:
        raise ConfigError(f"--listen {listen}: cannot bind ({e})") from None
    _warn_if_not_validator(client, market, authority.pubkey())
    loop = SettlementLoop(settler, settle_interval, reporter=reporter, tasks=tasks)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    serve_in_thread(server)
    liveness.start()
    loop.start()
    if challenger is not None:
        challenger.start()
    watchers = _watch_accounts(url, cfg.program_id, intake)
    log.info("listening on http://%s:%d market=%s authority=%s settle_every=%d db=%s",
             host, server.server_port, market, authority.pubkey(),
             policy.settle_every_windows, describe_db(db_path))
    log.info("dashboard on http://%s:%d/dashboard/", host, server.server_port)
    stop.wait()
    log.info("shutting down")
    for watcher in watchers:
        watcher.stop()
    server.shutdown()
    liveness.stop()
    loop.stop()
    if challenger is not None:
        challenger.stop()
    own_endpoint.close()
    peers.close()
    store.close()


def _remember_decimals(client: Any, market_view: Any, store: Any) -> None:
    """Store the market's mints' decimals (meta ``decimals``) for ``status``, which reads the
    database only and shows rewards and bond in tokens."""
    try:
        decimals = {"payment": client.mint_decimals(market_view.payment_mint),
                    "stake": client.mint_decimals(market_view.stake_mint)}
    except Exception as e:  # noqa: BLE001 - advisory: status then shows base units
        log.debug("cannot read the mints' decimals: %s", e)
        return
    store.set_meta("decimals", json.dumps(decimals))


def _watch_accounts(url: str, program_id: bytes, intake: Any) -> list[Any]:
    """PubSub subscriptions to the program's Provider and Job accounts: a change (a key
    rotation, a slash; a job finishing, settled, topped up) drops that account from the
    intake's cache (``ProviderKeys``, ``JobAccounts``), so the next proof sees it at once
    instead of after the cache TTL, which stays the fallback without PubSub. While a
    subscription is live, what it covers is kept ``SUBSCRIBED_TTL`` (``AccountCache.follow``):
    the intake no longer reads a job's account at every window."""
    import base64
    import hashlib

    from gpu_market.pubsub import ProgramWatcher, pubsub_url
    from solders.pubkey import Pubkey as _Pk

    from .chain import SUBSCRIBED_TTL

    try:
        ws = pubsub_url(url)
    except ValueError as e:
        log.warning("no account subscriptions (%s)", e)
        return []
    watchers = []
    for kind, cache in (("Provider", intake.providers), ("Job", intake.jobs)):
        disc = hashlib.sha256(b"account:" + kind.encode()).digest()[:8]
        flt = [{"memcmp": {"offset": 0, "bytes": base64.b64encode(disc).decode(),
                           "encoding": "base64"}}]
        watcher = ProgramWatcher(
            ws, _Pk.from_bytes(program_id), flt,
            lambda address, _data, cache=cache: cache.forget(bytes(address)),
            name=f"{kind.lower()}-watch")
        cache.follow(lambda w=watcher: w.live_since, SUBSCRIBED_TTL)  # both time.monotonic
        watchers.append(watcher.start())
    return watchers


def _warn_if_not_validator(client: Any, market: Pubkey, authority: Pubkey) -> None:
    try:
        v = client.fetch_validator_by_authority(market, authority)
    except Exception as e:  # noqa: BLE001 - advisory only
        log.debug("could not check the validator registration: %s", e)
        return
    if v is None:
        log.warning("%s is not a registered validator of market %s: no job can name it and "
                    "settle will fail until it registers (register_validator with a bond and "
                    "this node's public URL)", authority, market)
        return
    if str(field_of(v, "status")).lower() != "active":
        log.warning("validator %s is %s, not active: it joins no new committee and reports no "
                    "downtime; it still settles for the committees it is in until it withdraws "
                    "its bond", authority, field_of(v, "status"))
    if not str(field_of(v, "endpoint") or ""):
        log.warning("validator %s has no endpoint on chain: workers and other committee "
                    "members cannot reach it (update_validator with this node's public URL)",
                    authority)


@main.command()
@click.option("--db", "db_path", default=None,
              help="SQLite file or postgresql://user@host/db URL "
                   "[default: $XDG_STATE_HOME/gpum-validator/validator.sqlite]")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def status(db_path: str | None, as_json: bool) -> None:
    """Summarise the database: proofs, jobs, settlement intents, evidence."""
    from .store_pg import is_postgres_url

    path = db_path or str(default_db())
    if not is_postgres_url(path) and not Path(path).exists():
        _fail(ConfigError(f"--db {path}: no such database; has `gpum-validator run` used it?"))
    try:
        store = open_db(path)
        summary = store.summary()
        open_intents = store.open_intents()
        failed = [i for i in store.intents() if i.status == "failed"][-10:]
    except StoreError as e:
        _fail(e)
        return
    summary["open_intents"] = [
        {"id": i.id, "job": str(Pubkey.from_bytes(i.job)), "seq": i.seq_to, "status": i.status,
         "attempts": i.attempts, "last_error": i.last_error} for i in open_intents]
    summary["recent_failed_intents"] = [
        {"id": i.id, "job": str(Pubkey.from_bytes(i.job)), "seq": i.seq_to,
         "last_error": i.last_error} for i in failed]
    if summary.get("rewards") is None:
        summary["rewards"] = ("not read yet: `gpum-validator run` reads the Validator account "
                              "every minute")
    decimals = json.loads(store.get_meta("decimals") or "null")
    store.close()
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    for k, v in _readable(summary, decimals, int(time.time())).items():
        click.echo(f"{k}: {v if isinstance(v, str) else json.dumps(v)}")


def _readable(summary: dict[str, Any], decimals: dict[str, int] | None,
              now: int) -> dict[str, Any]:
    """``status``'s text: rewards in payment-mint tokens and the bond in stake-mint tokens
    (base units, so labelled, while ``run`` has not stored the mints' decimals), times as
    dates with their distance from ``now``."""
    out = dict(summary)
    rewards = out.get("rewards")
    if isinstance(rewards, dict):
        shown = dict(rewards)
        for key, mint in (("earned", "payment"), ("unclaimed", "payment"), ("bond", "stake")):
            if isinstance(shown.get(key), int):
                shown[key] = (format_ui_amount(shown[key], decimals[mint]) if decimals
                              else f"{shown[key]} base units")
        if isinstance(shown.get("read_at"), (int, float)):
            shown["read_at"] = when(int(shown["read_at"]), now)
        out["rewards"] = shown
    if isinstance(out.get("last_settlement_at"), (int, float)):
        out["last_settlement_at"] = when(int(out["last_settlement_at"]), now)
    return out
