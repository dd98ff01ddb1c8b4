"""Managed jobs in the CLI (:mod:`gpu_market.managed`): ``gpum run --managed`` (its options,
:func:`managed_options`, and its flow, :func:`run_managed`), ``gpum run``'s checkpoint options
(:func:`checkpoint_options`, the store checked before money moves: :func:`check_checkpoint`), ``gpum job watch --managed NAME``
(:func:`watch_managed`: the controller in the foreground), ``gpum job migrate NAME [--to
PROVIDER]``, and what ``job status``, ``job list``, ``job stop`` and ``job watch`` show or do
for a managed job (:func:`status_of`, :func:`status_lines`, :func:`list_section`,
:func:`stop_managed`, :func:`successor_of`).

A managed job's name resolves, wherever a JOB is taken, to its current attempt
(:func:`gpu_market.managed.store.current_job`). Text output shows tokens and dates;
``--output json`` base units and Unix seconds, one JSON object per event while a controller
runs in the foreground.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import click
from solders.pubkey import Pubkey

from ..units import format_span, format_ui_amount, when
from .base import JOB, PUBKEY, CliError, Duration, Env, common, resolve_url

__all__ = ["check_checkpoint", "checkpoint_options", "job_migrate", "list_section",
           "managed_options", "run_managed", "status_lines", "status_of", "stop_managed",
           "successor_of", "watch_managed"]  # fmt: skip


def managed_options(f: Callable) -> Callable:
    """``gpum run``'s managed-job options; they reach ``f`` as ``managed`` (a dict, or None
    without ``--managed``)."""
    opts = [
        click.option("--managed", is_flag=True, default=False,
                     help="Run as a managed job: a controller (in the foreground, or with "
                          "--detach in the background) migrates it to another provider when "
                          "its provider fails, within the policy below."),
        click.option("--max-restarts", type=click.IntRange(0, 100), default=3, show_default=True,
                     help="Successor jobs the controller may create."),
        click.option("--budget", "managed_budget", default=None, metavar="TOKENS",
                     help="Most the managed job may hold out of your wallet over every attempt "
                          "(default: (max restarts + 1) x the first deposit)."),
        click.option("--min-score", type=click.FloatRange(0, 1), default=0.0, show_default=True,
                     help="Lowest provider score (`gpum offers`) a successor may have."),
        click.option("--avoid", multiple=True, type=PUBKEY, metavar="PROVIDER",
                     help="A provider never chosen (repeatable)."),
        click.option("--region", "regions", multiple=True, metavar="REGION",
                     help="Regions a successor may be in (repeatable; default: any)."),
        click.option("--recover-on-exit", default=None, metavar="CODES",
                     help="Container exit codes that count as failures to recover from, e.g. "
                          "1,137 or 128-143 (default: none)."),
        click.option("--missed-windows", type=click.IntRange(1, 1000), default=3,
                     show_default=True,
                     help="Windows without one accepted by the committee before migrating."),
        click.option("--health-grace", type=Duration(), default="10m", show_default=True,
                     help="How long GPUs may report critical health before migrating."),
        click.option("--start-timeout", type=Duration(low=10), default="10m", show_default=True,
                     help="A successor not running within this is cancelled (full refund) and "
                          "the next offer tried."),
        click.option("--detach", is_flag=True, default=False,
                     help="Once the first attempt runs, leave the controller running in the "
                          "background (its log in the data folder)."),
    ]

    @functools.wraps(f)
    def wrapper(*a: Any, managed: bool = False, max_restarts: int = 3,
                managed_budget: str | None = None, min_score: float = 0.0,
                avoid: tuple = (), regions: tuple = (), recover_on_exit: str | None = None,
                missed_windows: int = 3, health_grace: int = 600, start_timeout: int = 600,
                detach: bool = False, **kw: Any) -> Any:  # fmt: skip
        given = {"max_restarts": max_restarts != 3, "budget": managed_budget is not None,
                 "min_score": min_score != 0.0, "avoid": bool(avoid), "region": bool(regions),
                 "recover_on_exit": recover_on_exit is not None,
                 "missed_windows": missed_windows != 3, "health_grace": health_grace != 600,
                 "start_timeout": start_timeout != 600, "detach": detach}  # fmt: skip
        if not managed:
            extra = [k for k, v in given.items() if v]
            if extra:
                raise click.UsageError(f"--{extra[0].replace('_', '-')} is a managed-job option: "
                                       "add --managed")  # fmt: skip
            return f(*a, managed=None, **kw)
        policy = {"max_restarts": max_restarts, "budget": managed_budget, "min_score": min_score,
                  "avoid": [str(p) for p in avoid], "regions": list(regions),
                  "recover_exit_codes": recover_on_exit or (), "missed_windows": missed_windows,
                  "health_grace": health_grace, "start_timeout": start_timeout, "detach": detach}  # fmt: skip
        return f(*a, managed=policy, **kw)

    for opt in reversed(opts):
        wrapper = opt(wrapper)
    return wrapper


def _size_mib(text: str) -> int:
    """``"1GiB"``, ``"512MiB"``, ``"2TiB"`` or a bare number of MiB -> MiB (whole, >= 1)."""
    import re

    m = re.fullmatch(r"\s*(\d+)\s*(MiB|GiB|TiB|M|G|T)?\s*", str(text), re.IGNORECASE)
    if m is None:
        raise ValueError(f"{text!r} is not a size; write e.g. 512MiB, 1GiB or 2TiB")
    unit = (m.group(2) or "MiB")[0].upper()
    mib = int(m.group(1)) * {"M": 1, "G": 1024, "T": 1024 * 1024}[unit]
    if mib < 1:
        raise ValueError("the size must be at least 1MiB")
    return mib


def checkpoint_options(f: Callable) -> Callable:
    """``gpum run``'s checkpoint options; they reach ``f`` as ``checkpoint`` (the config's
    fields, or None without ``--checkpoint-store``). The store's keys come from
    ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``."""
    from ..checkpoint_spec import DEFAULT_DIR, DEFAULT_INTERVAL_S, DEFAULT_REGION

    opts = [
        click.option("--checkpoint-store", default=None, metavar="s3://BUCKET[/PREFIX]",
                     help="Keep the container's --checkpoint-dir in this S3 store (keys from "
                          "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, sealed to the provider's "
                          "worker): synced every --checkpoint-interval and when it stops, "
                          "restored before a job (or a managed job's successor) starts."),
        click.option("--checkpoint-dir", default=None, metavar="PATH",
                     help=f"The container's directory to keep (default {DEFAULT_DIR})."),
        click.option("--checkpoint-endpoint", default=None, metavar="URL",
                     help="The S3 API's http(s)://host[:port] (default: AWS S3)."),
        click.option("--checkpoint-region", default=None, metavar="REGION",
                     help=f"The store's region (default {DEFAULT_REGION})."),
        click.option("--checkpoint-interval", type=Duration(low=1), default=None,
                     help=f"Seconds between syncs (default {DEFAULT_INTERVAL_S}s)."),
        click.option("--checkpoint-max-size", default=None, metavar="SIZE",
                     callback=lambda ctx, p, v: None if v is None else _checked(_size_mib, v, p),
                     help="The largest checkpoint, e.g. 1GiB (default 10GiB)."),
    ]

    @functools.wraps(f)
    def wrapper(*a: Any, checkpoint_store: str | None = None, checkpoint_dir: str | None = None,
                checkpoint_endpoint: str | None = None, checkpoint_region: str | None = None,
                checkpoint_interval: int | None = None, checkpoint_max_size: int | None = None,
                **kw: Any) -> Any:  # fmt: skip
        rest = {"dir": checkpoint_dir, "endpoint": checkpoint_endpoint,
                "region": checkpoint_region, "interval_s": checkpoint_interval,
                "max_mib": checkpoint_max_size}  # fmt: skip
        if checkpoint_store is None:
            given = [k for k, v in rest.items() if v is not None]
            if given:
                raise click.UsageError("--checkpoint-dir, -endpoint, -region, -interval and "
                                       "-max-size need --checkpoint-store s3://BUCKET[/PREFIX]")  # fmt: skip
            return f(*a, checkpoint=None, **kw)
        config = {"store": checkpoint_store, **{k: v for k, v in rest.items() if v is not None}}
        return f(*a, checkpoint=config, **kw)

    for opt in reversed(opts):
        wrapper = opt(wrapper)
    return wrapper


def _checked(parse: Callable[[str], Any], value: str, param: Any) -> Any:
    try:
        return parse(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param=param) from None


def check_checkpoint(config: dict[str, Any]) -> tuple[Any, Any]:
    """``(CheckpointConfig, Credentials)`` once the store answered a write and a delete with
    the keys of the environment; CliError (nothing sent, no money moved) otherwise."""
    from ..checkpoint import CheckpointError, CheckpointStore, Credentials
    from ..checkpoint_spec import CheckpointConfig
    from ..workload import WorkloadSpecError

    try:
        cfg = CheckpointConfig(**config)
        cfg.validate()
        creds = Credentials.from_env()
        store = CheckpointStore(cfg, creds)
        try:
            store.check()
        finally:
            store.close()
    except (CheckpointError, WorkloadSpecError) as e:
        raise CliError(f"checkpoints: {e}; nothing was sent and no money moved") from None
    return cfg, creds


# ----------------------------------------------------------------------------- printing events


def _printer(env: Env, name: str) -> Callable[[Any], None]:
    """Shows each controller event: a dated line (text), one JSON object (json)."""
    import json

    def say(e: Any) -> None:
        if env.output == "json":
            click.echo(json.dumps({"managed": name, "event": e.level, "at": e.at, "text": e.text}))
        else:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(e.at))
            click.echo(f"{stamp}  {e.level}: {e.text}")
        sys.stdout.flush()

    return say


def _sdk(fn: Callable[[], Any]) -> Any:
    from ..managed import ControllerBusy, LaunchError, StoreError

    try:
        return fn()
    except (LaunchError, StoreError, ControllerBusy) as e:
        raise CliError(str(e)) from None


# ----------------------------------------------------------------------------- gpum run --managed


def run_managed(env: Env, market: Pubkey, gpu: tuple[str, int], hours: Fraction,
                max_price: str | None, provider: Pubkey | None, committee: str | None,
                quorum: int | None, wait_timeout: int, dry_run: bool, name: str | None,
                workload: dict[str, Any], policy: dict[str, Any],
                checkpoint: dict[str, Any] | None = None) -> None:  # fmt: skip
    """``gpum run --managed``: the first attempt chosen and started by the controller, then
    the controller in the foreground (or in the background with ``--detach``)."""
    from ..managed import ManagedStore, launch
    from ..managed.world import ChainWorld
    from ..workload import WorkloadSpecError, parse_env_arg
    from .workload import _command

    name = name or f"managed-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"

    def pairs(values: tuple[str, ...], hint: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for text in values:
            try:
                k, v = parse_env_arg(text)
            except WorkloadSpecError as e:
                raise click.BadParameter(str(e), param_hint=hint) from None
            out[k] = v
        return out

    world = ChainWorld(env.client, env.keypair, market)
    say = _printer(env, name)
    kw = {"name": name, "cmd": list(_command(workload["command"])), "args": workload["args"],
          "env": pairs(workload["env"], "'--env'"), "secrets": pairs(workload["secrets"], "'--secret'"),
          "shm_size_mib": workload["shm_size_mib"], "scratch_mib": workload["scratch_mib"],
          "finish_on_exit": workload["finish_on_exit"], "market": market, "provider": provider,
          "committee": None if committee is None else [k.strip() for k in committee.split(",")],
          "quorum": quorum, "max_price": max_price, "budget": policy["budget"],
          "max_restarts": policy["max_restarts"], "min_score": policy["min_score"],
          "regions": policy["regions"], "avoid": policy["avoid"],
          "recover_exit_codes": policy["recover_exit_codes"],
          "missed_windows": policy["missed_windows"], "health_grace": policy["health_grace"],
          "start_timeout": policy["start_timeout"], "timeout": wait_timeout, "world": world,
          "checkpoint": checkpoint}  # fmt: skip
    model, count = gpu
    hours_text = f"{hours.numerator}s" if hours.denominator == 1 else str(float(hours / 3600))
    gpu_text = f"{model}:{count}"
    if dry_run:
        job = _sdk(lambda: launch(gpu_text, workload["image"], workload["ports"], hours_text,
                                  wait=False, store=ManagedStore(":memory:"), **kw))  # fmt: skip
        data = _plan_data(job, env)
        env.emit({"dry_run": True, **data})
        return
    job = _sdk(lambda: launch(gpu_text, workload["image"], workload["ports"], hours_text,
                              wait=False, say=say, **kw))  # fmt: skip
    _first_running(env, job, wait_timeout)
    if policy["detach"]:
        _detach(env, job)
        return
    _foreground(env, job)


def _plan_data(job: Any, env: Env) -> dict[str, Any]:
    """The first attempt as planned (nothing sent), for --dry-run."""
    from ..managed.policy import RecoveryPolicy

    m = job.store.managed(job.id)
    a = job.attempts[0]
    policy = RecoveryPolicy.from_json(m.policy)
    d = m.decimals
    rate = a.price * policy.gpus
    return {"name": m.name, "provider": a.provider, "gpu_model": a.gpu_model, "gpus": policy.gpus,
            "price_per_gpu_hour": format_ui_amount(a.price * 3600, d),
            "cost_per_hour": format_ui_amount(rate * 3600, d),
            "deposit": format_ui_amount(a.deposit, d),
            "budget": format_ui_amount(policy.budget or 0, d),
            "max_restarts": policy.max_restarts, "committee": a.committee, "quorum": a.quorum}  # fmt: skip


def _first_running(env: Env, job: Any, wait_timeout: int) -> None:
    """Run the controller until the first attempt runs (it may migrate meanwhile); print the
    job, provider and endpoints. CliError when it ended or did not run in time."""

    def first_runs(c: Any) -> bool:
        m = c.managed()
        return m.phase == "running" or m.ended

    try:
        status = _sdk(lambda: job.run_controller(until=first_runs, timeout=wait_timeout))
    except KeyboardInterrupt:
        raise CliError(f"interrupted: the managed job {job.name!r} keeps its state; `gpum job "
                       f"watch --managed {job.name}` resumes it, `gpum job stop {job.name}` "
                       "stops it") from None  # fmt: skip
    if status["phase"] != "running":
        why = status["reason"] or status["phase"]
        raise CliError(f"managed job {job.name!r} is not running ({status['phase']}: {why}); "
                       f"`gpum job watch --managed {job.name}` resumes it, `gpum job stop "
                       f"{job.name}` stops it")  # fmt: skip
    m = job.store.managed(job.id)
    d = m.decimals
    env.emit({"managed": m.name, "job": status["current_job"], "provider": status["provider"],
              "endpoints": status["endpoints"], "phase": status["phase"],
              "budget": status["budget"] if env.output == "json" else format_ui_amount(status["budget"] or 0, d),
              "max_restarts": status["max_restarts"]})  # fmt: skip


def _foreground(env: Env, job: Any) -> None:
    if env.output != "json":
        click.echo(f"controller of {job.name!r} running (Ctrl-C stops it; the job runs on, and "
                   f"`gpum job watch --managed {job.name}` resumes it)", err=True)  # fmt: skip
    try:
        _sdk(job.run_controller)
    except KeyboardInterrupt:
        click.echo(f"controller stopped; the job runs on: `gpum job watch --managed {job.name}` "
                   "resumes it", err=True)  # fmt: skip
        return
    status = job.status()
    env.emit({"managed": job.name, "phase": status["phase"], "reason": status["reason"]},
             [f"managed job {job.name!r} {status['phase'].replace('_', ' ')}: {status['reason']}"])


def _detach(env: Env, job: Any) -> None:
    """Start ``gpum job watch --managed NAME`` in the background (a new session, its output
    in ``managed-<id>.log`` beside the database; the secrets in its environment only)."""
    m = job.store.managed(job.id)
    log = job.store.path.parent / f"managed-{m.id}.log"
    argv = [sys.executable, "-m", "gpu_market.cli", "--url", m.url, "--program-id", m.program_id]
    if env.keypair_path:
        argv += ["--keypair", env.keypair_path]
    argv += ["job", "watch", "--managed", m.name]
    child_env = {**os.environ, **job.secrets}
    if job.checkpoint_credentials:
        child_env["AWS_ACCESS_KEY_ID"], child_env["AWS_SECRET_ACCESS_KEY"] = job.checkpoint_credentials
    with open(log, "ab") as out:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                             env=child_env, start_new_session=True)  # fmt: skip
    env.emit({"managed": m.name, "controller_pid": p.pid, "log": str(log)},
             [(f"controller of {m.name!r} running in the background (pid {p.pid}); its log: {log}; "
              f"`gpum job status {m.name}` follows it")])  # fmt: skip


# ----------------------------------------------------------------------------- the managed job of a JOB


def _store() -> Any:
    from ..managed.store import open_existing

    return open_existing()


def _managed_of(env: Env, job: Pubkey) -> tuple[Any, Any] | None:
    """``(store, managed job)`` whose attempt is ``job`` on this cluster, or None."""
    store = _store()
    if store is None:
        return None
    found = store.by_job(str(job), resolve_url(env.url))
    return None if found is None else (store, found[0])


def _attach(env: Env, job: Pubkey) -> Any:
    from ..managed import attach
    from ..managed.world import ChainWorld

    found = _managed_of(env, job)
    if found is None:
        raise CliError(f"job {job} is not an attempt of a managed job on this machine (see "
                       "`gpum job list`)")  # fmt: skip
    store, m = found
    world = ChainWorld(env.client, env.keypair, Pubkey.from_string(m.market))
    return _sdk(lambda: attach(m.name, store=store, world=world, say=_printer(env, m.name)))


def watch_managed(env: Env, job: Pubkey) -> None:
    """``gpum job watch --managed NAME``: (re)start the controller in the foreground."""
    handle = _attach(env, job)
    if env.output != "json":
        s = handle.status()
        click.echo(f"controller of {handle.name!r}: {s['phase']}, attempt {s['restarts']} on "
                   f"provider {s['provider']} (Ctrl-C stops the controller, not the job)", err=True)  # fmt: skip
    _foreground(env, handle)


@click.command("migrate")
@common
@click.argument("job_address", metavar="NAME", type=JOB)
@click.option("--to", "to", type=PUBKEY, default=None, metavar="PROVIDER",
              help="Move to this provider (it must fit the job: model, GPUs, price cap, "
                   "online); default: the best offer by the policy.")  # fmt: skip
@click.option("--timeout", "timeout", type=Duration(low=1), default="15m", show_default=True,
              help="How long to wait for the successor to run.")
def job_migrate(env: Env, job_address: Pubkey, to: Pubkey | None, timeout: int) -> None:
    """Move managed job NAME to another provider now (e.g. a cheaper offer): the current
    attempt is finished (billing stops), the successor created, its spec delivered and its
    container started; prints the new endpoints. The running controller does it, or this
    command when none runs."""
    handle = _attach(env, job_address)
    if to is not None:
        from ..managed.policy import RecoveryPolicy

        m = handle.store.managed(handle.id)
        offers = [o for o in handle.world.offers() if o.provider == to]
        why = "it has no free GPU now" if not offers else (
            "its worker does not answer" if offers[0].online is False else
            RecoveryPolicy.from_json(m.policy).offer_refusal(offers[0]))  # fmt: skip
        if why is not None and why not in ("on the avoid list", "failed this job before"):
            raise CliError(f"provider {to} cannot take managed job {m.name!r}: {why}")
    before = handle.status()
    try:
        status = _sdk(lambda: handle.migrate(to=to, timeout=timeout))
    except KeyboardInterrupt:
        raise CliError("interrupted: the migration goes on in the controller; `gpum job watch "
                       f"--managed {handle.name}` resumes it") from None  # fmt: skip
    moved = status["current_job"] != before["current_job"] and status["phase"] == "running"
    env.emit({"managed": handle.name, "job": status["current_job"], "provider": status["provider"],
              "endpoints": status["endpoints"], "phase": status["phase"], "migrated": moved},
             [f"managed job {handle.name!r} " + (
                 f"runs on provider {status['provider']} (job {status['current_job']}): "
                 f"{', '.join(status['endpoints']) or 'no published port'}" if moved else
                 f"is {status['phase']} ({status['reason']}): `gpum job status {handle.name}`")])  # fmt: skip


def successor_of(env: Env, job: Pubkey) -> Pubkey | None:
    """The managed job's current attempt when ``job`` is an earlier one, else None."""
    found = _managed_of(env, job)
    if found is None:
        return None
    store, m = found
    atts = [a for a in store.attempts(m.id) if a.state != "abandoned"]
    if not atts or atts[-1].job == str(job):
        return None
    return Pubkey.from_string(atts[-1].job)


def stop_managed(env: Env, job: Pubkey, limit: float | None) -> bool:
    """``gpum job stop`` of a managed job's attempt: stop the whole managed job (every attempt
    finished or cancelled, closed after its grace; receipts printed). False when ``job`` is not
    managed."""
    if _managed_of(env, job) is None:
        return False
    handle = _attach(env, job)
    try:
        status = _sdk(lambda: handle.stop(timeout=limit))
    except KeyboardInterrupt:
        raise CliError(f"interrupted: the stop is recorded; `gpum job stop {handle.name}` "
                       "again waits for the closes") from None  # fmt: skip
    m = handle.store.managed(handle.id)
    if env.output == "json":
        env.emit({"managed": m.name, "phase": status["phase"], "attempts": status["attempts"]})
        return True
    env.emit({}, status_lines(status, m.decimals, int(time.time())))
    return True


# ----------------------------------------------------------------------------- status and list


def status_of(env: Env, job: Pubkey) -> dict[str, Any] | None:
    """:func:`gpu_market.managed.describe` of the managed job whose attempt is ``job``."""
    from ..managed import describe

    found = _managed_of(env, job)
    return None if found is None else {**describe(*found), "decimals": found[1].decimals}


def status_lines(s: dict[str, Any], decimals: int, now: int) -> list[str]:
    """A managed job's phase and its attempts' history, for a person."""
    t = lambda v: format_ui_amount(v, decimals)
    lines = [f"managed job {s['name']!r}: {s['phase'].replace('_', ' ')}"
             + (f" ({s['reason']})" if s["reason"] else ""),
             (f"  restarts {s['restarts']} of {s['max_restarts']}; budget {t(s['budget'] or 0)}, "
             f"committed {t(s['committed'])}")]  # fmt: skip
    if s.get("next_try_at") and s["phase"] == "waiting":
        lines.append(f"  next try {when(s['next_try_at'], now)}")
    for a in s["attempts"]:
        start = when(a["started_at"], now) if a["started_at"] else "never ran"
        end = when(a["ended_at"], now) if a["ended_at"] else "-"
        lines.append(f"  #{a['attempt']} {a['state']:<9} provider {a['provider']}  job {a['job']}")
        lines.append(f"     started {start}; ended {end}"
                     + (f": {a['end_reason']}" if a["end_reason"] else ""))
        lines.append(f"     paid {t(a['paid'])} for {format_span(a['paid_seconds'])}, deposited "
                     f"{t(a['deposited'])}, refunded {t(a['refunded'])}"
                     + (f"; {', '.join(a['endpoints'])}" if a["endpoints"] and a["state"] == "running" else ""))  # fmt: skip
    return lines


def list_section(env: Env, user: Pubkey, rows: list[dict[str, Any]]) -> tuple[list[dict], list[str]]:
    """For ``gpum job list``: names ``NAME#k`` on the rows of managed attempts; the managed
    jobs of this wallet and cluster (JSON objects, and text lines)."""
    from ..managed import describe

    store = _store()
    if store is None:
        return [], []
    url = resolve_url(env.url)
    labels: dict[str, str] = {}
    out, lines = [], []
    now = int(time.time())
    for m in store.all(url, str(user)):
        s = describe(store, m)
        for a in s["attempts"]:
            labels[a["job"]] = f"{m.name}#{a['attempt']}"
        if m.ended and all(a["state"] in ("closed", "abandoned") for a in s["attempts"]):
            continue
        out.append(s)
        lines += status_lines(s, m.decimals, now)
    for r in rows:
        if not r.get("name") and r.get("job") in labels:
            r["name"] = labels[r["job"]]
    return out, lines
