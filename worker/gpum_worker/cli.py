"""``gpum-worker``: run | reaper | keygen | probe | local-image.

Errors that an operator can fix (``WorkerError``) are printed as one line
``error: <message>`` on stderr with exit code 1, never as a traceback.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from .errors import ConfigError, NvmlUnavailable, WorkerError
from .gpu import GpuBackend, NvmlBackend, discover, read_sample

log = logging.getLogger("gpum_worker")


def _fail(msg: str) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(1)


def _make_backend(simulate: bool, gpus: int | None, seed: int) -> GpuBackend:
    if simulate:
        from .simulate import SimulatedBackend

        try:
            return SimulatedBackend(gpus or 1, seed)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if gpus is not None:
        raise ConfigError("--gpus only applies with --simulate")
    return NvmlBackend()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpum-worker")
def cli() -> None:
    """gpu-market worker agent: samples GPUs, signs window proofs, delivers them."""


@cli.command()
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the key file (Solana CLI format, mode 0600).")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def keygen(out: Path, force: bool) -> None:
    """Create a worker key and print its base58 public key (register it on chain)."""
    from .keys import generate_key_file

    try:
        key = generate_key_file(out, force=force)
    except WorkerError as e:
        _fail(str(e))
    click.echo(key.pubkey_b58)
    click.echo(f"wrote {out} (mode 0600); register this public key as the provider's worker "
               "key (`gpum provider register --worker-key KEY`, or `gpum provider rotate-key` "
               "to replace one)", err=True)


@cli.command("local-image")
@click.option("--tag", default="localhost/gpum-busybox:1", show_default=True)
@click.option("--runtime", "runtime_bin", type=click.Choice(["podman", "docker"]),
              default="podman", show_default=True)
@click.option("--containers-conf", type=click.Path(dir_okay=False), default=None,
              help="containers.conf for podman, passed as CONTAINERS_CONF.")
def local_image(tag: str, runtime_bin: str, containers_conf: str | None) -> None:
    """Build a tiny test image from the host's busybox-static, with no registry and no
    network (a workload to try the worker with); prints its tag."""
    from .localimage import build_busybox_image

    extra = {"CONTAINERS_CONF": containers_conf} if containers_conf else None
    try:
        click.echo(build_busybox_image(tag, runtime_bin=runtime_bin, extra_env=extra))
    except WorkerError as e:
        _fail(str(e))


@cli.command()
@click.option("--simulate", is_flag=True, help="Probe simulated GPUs instead of NVML.")
@click.option("--gpus", type=int, default=None, help="Simulated GPU count (with --simulate).")
@click.option("--seed", type=int, default=0, show_default=True, help="Simulation seed.")
def probe(simulate: bool, gpus: int | None, seed: int) -> None:
    """Print what NVML sees: per GPU its metrics, and which are unsupported.

    Exit code 1 when no NVIDIA driver is present.
    """
    try:
        backend = _make_backend(simulate, gpus, seed)
        backend.init()
    except NvmlUnavailable as e:
        click.echo(f"no NVIDIA GPU available: {e}", err=True)
        sys.exit(1)
    except WorkerError as e:
        _fail(str(e))
    try:
        found = discover(backend)
        click.echo(f"backend: {backend.kind}; driver: {backend.driver_version() or 'unknown'}; "
                   f"{len(found)} GPU(s)")
        for g in found:
            s = read_sample(backend, g, time.time())
            click.echo(f"GPU {g.index}: {g.name} {g.uuid}")
            if not s.ok:
                click.echo(f"  LOST: {s.lost_reason}")
                continue
            rows = [
                ("utilization", f"gpu {s.util_gpu_pct}% / memory {s.util_mem_pct}%"
                 if s.util_gpu_pct is not None else None),
                ("memory", f"{s.mem_used_mib} / {s.mem_total_mib} MiB"
                 if s.mem_used_mib is not None else None),
                ("temperature", f"{s.temp_c} C" if s.temp_c is not None else None),
                ("power", f"{s.power_mw} mW" if s.power_mw is not None else None),
                ("power_limit", f"{s.power_limit_mw} mW" if s.power_limit_mw is not None
                 else None),
                ("fan", f"{s.fan_pct}%" if s.fan_pct is not None else None),
                ("ecc_uncorrected", str(s.ecc_uncorrected_total)
                 if s.ecc_uncorrected_total is not None else None),
                ("processes", ", ".join(f"pid {p} ({'?' if u is None else u // 2**20} MiB)"
                                        for p, u in s.processes) or "none"
                 if s.processes is not None else None),
            ]
            errs = dict(s.errors)
            for name, text in rows:
                if name in s.unsupported:
                    text = "not supported (recorded as absent)"
                elif name in errs:
                    text = f"call failed: {errs[name]}"
                click.echo(f"  {name:16} {text}")
    finally:
        backend.shutdown()


def _parse_job(spec: str) -> tuple[str, int]:
    job, _, n = spec.partition(":")
    try:
        count = int(n) if n else 1
    except ValueError:
        raise ConfigError(f"--job {spec!r}: expected PUBKEY or PUBKEY:GPU_COUNT") from None
    if count < 1:
        raise ConfigError(f"--job {spec!r}: GPU count must be >= 1")
    return job, count


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              envvar="GPUM_WORKER_CONFIG", help="TOML config file [env GPUM_WORKER_CONFIG].")
@click.option("--key", "key_file", help="Worker key file [GPUM_WORKER_KEY_FILE].")
@click.option("--db", help="Outbox SQLite path [GPUM_WORKER_DB].")
@click.option("--validator", "validators", multiple=True,
              help="Validator base URL, repeatable [GPUM_WORKER_VALIDATORS, comma-separated]. "
                   "Overrides discovery: by default each job's proofs go to its committee, "
                   "endpoints read from chain. Required with --job.")
@click.option("--window-seconds", type=int,
              help="Window length of --job jobs, 1..3600 (default 60); chain jobs use their "
                   "terms.")
@click.option("--sample-interval-ms", type=int, help="Sample interval (default 1000).")
@click.option("--poll-seconds", type=float, help="Job list refresh period (default 10).")
@click.option("--rpc-url", help="Solana RPC URL for the chain job source.")
@click.option("--program-id", help="gpu_market program id (base58).")
@click.option("--market", help="Market address (base58).")
@click.option("--provider", help="Provider PDA (base58).")
@click.option("--job", "jobs", multiple=True, metavar="PUBKEY[:GPUS]",
              help="Prove this job instead of reading jobs from chain (repeatable).")
@click.option("--job-started-at", type=int,
              help="With --job: the job's start (unix seconds; default: first run's time).")
@click.option("--previous-worker-key", "previous_keys", multiple=True, metavar="B58",
              help="With --job: an earlier worker key of this provider (repeatable); proofs "
                   "it signed are trusted when resuming a job (with chain jobs, the "
                   "provider's retired keys are read from chain).")
@click.option("--simulate", is_flag=True, help="Use simulated GPUs (never implicit).")
@click.option("--gpus", type=int, default=None, help="Simulated GPU count (with --simulate).")
@click.option("--seed", type=int, default=0, show_default=True, help="Simulation seed.")
@click.option("--run-seconds", type=float, help="Stop after this many seconds.")
@click.option("--log-level", help="debug | info | warning | error [GPUM_WORKER_LOG_LEVEL].")
@click.option("--api-listen", metavar="HOST:PORT",
              help="Serve the worker API (workload delivery, status, logs) here "
                   "[GPUM_WORKER_API_LISTEN]; default: off, and then no job with a "
                   "workload is accepted.")
@click.option("--runtime", help="Container runtime for workloads: auto | podman | docker "
                                "(default auto) [GPUM_WORKER_RUNTIME].")
@click.option("--containers-conf", help="containers.conf for podman, passed as "
                                        "CONTAINERS_CONF [GPUM_WORKER_CONTAINERS_CONF].")
@click.option("--publish-host", help="Host address the workloads' ports are published on "
                                     "(default 0.0.0.0) [GPUM_WORKER_PUBLISH_HOST].")
@click.option("--committee-allow", "committee_allow", multiple=True, metavar="B58",
              help="Serve only jobs whose every committee member is one of these validator "
                   "authorities (repeatable) [GPUM_WORKER_COMMITTEE_ALLOW]; default: any.")
@click.option("--committee-deny", "committee_deny", multiple=True, metavar="B58",
              help="Decline every job whose committee names one of these validator "
                   "authorities (repeatable) [GPUM_WORKER_COMMITTEE_DENY].")
@click.option("--committee-min-bond", "committee_min_bond", type=int,
              help="Decline a job with a member bonded below this (base units; never below "
                   "the market's validator_min_bond, the default) "
                   "[GPUM_WORKER_COMMITTEE_MIN_BOND].")
@click.option("--committee-require-health/--no-committee-require-health",
              "committee_require_health", default=None,
              help="Accept a job only when every member answers GET /health with 200 "
                   "(default: on).")
@click.option("--reaper/--no-reaper", "reaper", default=None,
              help="Start `gpum-worker reaper` for this database unless one runs (default: "
                   "on; off when it runs as a service of its own) [GPUM_WORKER_REAPER].")
@click.option("--reaper-poll-seconds", type=float,
              help="How often the reaper compares containers with the chain (default 15) "
                   "[GPUM_WORKER_REAPER_POLL_SECONDS].")
def run(config_path: Path | None, jobs: tuple[str, ...], job_started_at: int | None,
        previous_keys: tuple[str, ...], simulate: bool, gpus: int | None, seed: int,
        run_seconds: float | None, **flags: Any) -> None:
    """Sample GPUs, prove each assigned job's windows and deliver the proofs."""
    try:
        _run(config_path, jobs, job_started_at, previous_keys, simulate, gpus, seed,
             run_seconds, flags)
    except WorkerError as e:
        _fail(str(e))


def _run(config_path: Path | None, job_specs: tuple[str, ...], job_started_at: int | None,
         previous_keys: tuple[str, ...], simulate: bool, gpus: int | None, seed: int,
         run_seconds: float | None, flags: dict[str, Any]) -> None:
    from .config import load_toml, resolve
    from .keys import decode_pubkey, load_worker_key
    from .limits import protect_worker_from_oom
    from .reaper import ReaperPaths, hold_worker_lock

    file = load_toml(config_path) if config_path else {}
    cfg = resolve(file, os.environ, flags)
    logging.basicConfig(level=cfg.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if cfg.log_level != "debug":
        logging.getLogger("httpx").setLevel(logging.WARNING)
    key = load_worker_key(cfg.key_file)
    protect_worker_from_oom()  # a container exhausting memory is killed before the worker
    backend = _make_backend(simulate, gpus, seed)
    if run_seconds is not None and run_seconds <= 0:
        raise ConfigError("--run-seconds must be positive")

    missing = [n for n, v in (("--program-id", cfg.program_id), ("--market", cfg.market),
                              ("--provider", cfg.provider)) if v is None]
    if job_specs and missing:
        raise ConfigError(f"--job needs {', '.join(missing)}")
    if job_specs and not cfg.validators:
        raise ConfigError("--job needs --validator URL (repeatable), GPUM_WORKER_VALIDATORS or "
                          "`validators = [...]`: a job without a chain account has no committee "
                          "to read endpoints from")
    if previous_keys and not job_specs:
        raise ConfigError("--previous-worker-key only applies with --job (chain jobs read the "
                          "provider's retired keys from chain)")
    try:
        trusted = [decode_pubkey(k, "--previous-worker-key") for k in previous_keys]
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not job_specs and (missing or not cfg.rpc_url):
        need = missing + ([] if cfg.rpc_url else ["--rpc-url"])
        raise ConfigError(f"reading jobs from chain needs {', '.join(need)} (or pass --job)")
    if not cfg.db.parent.exists():
        cfg.db.parent.mkdir(parents=True, exist_ok=True)
    paths = ReaperPaths.of(cfg.db)
    worker_lock = hold_worker_lock(paths.worker_lock)  # released when this worker ends
    try:
        _run_worker(cfg, paths, config_path, key, backend, job_specs, job_started_at,
                    trusted, simulate, run_seconds)
    finally:
        os.close(worker_lock)


def _run_worker(cfg: Any, paths: Any, config_path: Path | None, key: Any, backend: GpuBackend,
                job_specs: tuple[str, ...], job_started_at: int | None, trusted: list[bytes],
                simulate: bool, run_seconds: float | None) -> None:
    """The worker itself, once its configuration was checked (``_run``)."""
    from gpu_market.net import BoundedClient

    from .agent import Agent
    from .api import WorkerApi
    from .committee import CommitteeGate, CommitteeRouter
    from .heads import HttpHeadSource
    from .jobs import AssignedJob, ChainJobSource, JobSource, StaticJobSource
    from .keys import decode_pubkey
    from .limits import machine_from_host
    from .outbox import Outbox
    from .reaper import ReaperKeeper
    from .workload_store import WorkloadStore
    from .workloads import WorkloadManager

    outbox = Outbox(cfg.db, key.pubkey, cfg.validators)
    source: JobSource
    if job_specs:
        static = []
        for spec in job_specs:
            pk, count = _parse_job(spec)
            try:
                job = decode_pubkey(pk, "--job")
            except ValueError as e:
                raise ConfigError(str(e)) from None
            chain = outbox.job_chain(job)
            started = (chain.started_at if chain else
                       job_started_at if job_started_at is not None else int(time.time()))
            static.append(AssignedJob(job=job, market=cfg.market, program_id=cfg.program_id,
                                      provider=cfg.provider, gpu_count=count, status="running",
                                      started_at=started))
        source = StaticJobSource(static, worker_keys=trusted)
    else:
        source = ChainJobSource.connect(cfg.rpc_url, cfg.program_id, cfg.provider, key)

    if job_specs:  # no chain account: no user, no workload; leave containers alone
        runtime = None
        log.info("--job jobs carry no workload: no container runtime is used")
    else:
        runtime = _detect_runtime(cfg)
    mesh = None
    if cfg.cluster.enabled and runtime is not None:
        from .mesh import Mesh, MeshError
        try:
            mesh = Mesh(cfg.db.parent, cfg.cluster, key.seed)
            mesh.preflight(runtime.name)
        except MeshError as e:
            raise ConfigError(f"[cluster] enabled, but {e}") from None
    store = WorkloadStore(paths.store, ended_logs_s=cfg.ended_logs_seconds)
    keeper = None
    if runtime is not None and cfg.reaper:
        keeper = ReaperKeeper(paths, _reaper_args(cfg, runtime.name, config_path),
                              cfg.reaper_poll_seconds).start()
    workloads = WorkloadManager(runtime, store, key.seed, publish_host=cfg.publish_host,
                                attach_gpus=not simulate, provider=cfg.provider)
    workloads.mesh = mesh
    if simulate and runtime is not None:
        log.warning("simulated GPUs: workload containers get no GPU devices")
    api: WorkerApi | None = None
    watcher: Any = None
    head_client = BoundedClient(cfg.retry.timeout_s)
    try:
        agent = Agent(backend=backend, job_source=source, outbox=outbox, key=key,
                      window_seconds=cfg.window_seconds,
                      sample_interval_ms=cfg.sample_interval_ms, thresholds=cfg.thresholds,
                      poll_seconds=cfg.poll_seconds,
                      heads=HttpHeadSource(head_client, cfg.retry.timeout_s),
                      router=CommitteeRouter(cfg.validators), workloads=workloads,
                      workload_thread=True, background_checks=True,
                      committee_gate=None if cfg.validators else CommitteeGate(
                          source, cfg.committee, head_client))
        agent.start()
        # Jobs share this machine by GPU: limits follow the GPUs found.
        workloads.machine = machine_from_host(
            len(agent.gpus), workloads.scratch_dir, memory_mib=cfg.memory_mib, cpus=cfg.cpus,
            scratch_mib=cfg.scratch_mib)
        log.info("workload limits: %s (worker headroom: %d MiB, %g CPU)", workloads.machine,
                 workloads.machine.reserved_memory_mib, workloads.machine.reserved_cpus)
        if cfg.api_listen:
            challenges = None
            if cfg.challenges and isinstance(source, ChainJobSource):
                from .challenge_api import challenge_service
                challenges = challenge_service(cfg, key, lambda: agent.gpus, simulate)
            from .mesh_api import ChainPeers
            api = WorkerApi(workloads, cfg.api_listen, worker=key.pubkey_b58,
                            challenges=challenges, peer_chain=ChainPeers(
                                source._client) if isinstance(source, ChainJobSource) else None)
            api.start()
            workloads.api_url = api.url
        else:
            log.warning("worker API off (set [api] listen or --api-listen): users cannot "
                        "deliver workload specs, so jobs with a workload are not accepted")
        log.info("worker %s started: %s backend, %d GPU(s), window %ds, validators: %s; "
                 "API: %s; container runtime: %s",
                 key.pubkey_b58, backend.kind, len(agent.gpus), cfg.window_seconds,
                 ("static override " + ", ".join(cfg.validators)) if cfg.validators
                 else "each job's committee, endpoints read from chain",
                 api.url if api is not None else "off",
                 runtime.name if runtime is not None else "none (workloads refused)")
        stop = threading.Event()

        def _on_signal(signum: int, _frame: Any) -> None:
            log.info("signal %d received; stopping", signum)
            stop.set()

        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)
        watcher = _watch_jobs(cfg, agent) if isinstance(source, ChainJobSource) else None
        agent.run(validators_client=lambda: BoundedClient(cfg.retry.timeout_s),
                  policy=cfg.retry,
                  outbox_factory=lambda: Outbox(cfg.db, key.pubkey, cfg.validators),
                  stop=stop, run_seconds=run_seconds)
    finally:
        if keeper is not None:
            keeper.stop()  # the reaper itself keeps running: that is its point
        if watcher is not None:
            watcher.stop()
        if api is not None:
            api.close()
        store.close()
        head_client.close()
        counts = outbox.counts()
        outbox.close()
        log.info("stopped; outbox: %s", counts)


def _reaper_args(cfg: Any, runtime: str, config_path: Path | None) -> list[str]:
    """``gpum-worker reaper`` arguments for the worker's resolved configuration ``cfg`` (its
    file too, for the settings the flags do not carry; the environment is inherited)."""
    from .keys import b58encode

    args = [*(["--config", str(config_path)] if config_path else []),
            "--db", str(cfg.db), "--key", str(cfg.key_file), "--rpc-url", cfg.rpc_url,
            "--program-id", b58encode(cfg.program_id), "--provider", b58encode(cfg.provider),
            "--runtime", runtime, "--reaper-poll-seconds", str(cfg.reaper_poll_seconds),
            "--log-level", cfg.log_level, "--exit-when-idle"]
    if cfg.containers_conf is not None:
        args += ["--containers-conf", str(cfg.containers_conf)]
    return args


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              envvar="GPUM_WORKER_CONFIG", help="TOML config file [env GPUM_WORKER_CONFIG].")
@click.option("--key", "key_file", help="Worker key file [GPUM_WORKER_KEY_FILE].")
@click.option("--db", help="The worker's outbox SQLite path [GPUM_WORKER_DB]; the reaper "
                           "uses the workload store beside it.")
@click.option("--rpc-url", help="Solana RPC URL [GPUM_WORKER_RPC_URL].")
@click.option("--program-id", help="gpu_market program id (base58).")
@click.option("--provider", help="Provider PDA (base58).")
@click.option("--runtime", help="auto | podman | docker (default auto) [GPUM_WORKER_RUNTIME].")
@click.option("--containers-conf", help="containers.conf for podman "
                                        "[GPUM_WORKER_CONTAINERS_CONF].")
@click.option("--reaper-poll-seconds", type=float,
              help="Pass period (default 15) [GPUM_WORKER_REAPER_POLL_SECONDS].")
@click.option("--log-level", help="debug | info | warning | error [GPUM_WORKER_LOG_LEVEL].")
@click.option("--exit-when-idle", is_flag=True,
              help="Exit once no worker runs on this database and no container of this "
                   "provider is left (how `gpum-worker run` starts it).")
def reaper(config_path: Path | None, exit_when_idle: bool, **flags: Any) -> None:
    """Stop the containers of jobs the chain ended, also while the worker is down.

    One per worker database: a second one exits at once (status 0).
    """
    try:
        _reaper(config_path, exit_when_idle, flags)
    except WorkerError as e:
        _fail(str(e))


def _reaper(config_path: Path | None, exit_when_idle: bool, flags: dict[str, Any]) -> None:
    from .config import load_toml, resolve
    from .jobs import ChainJobSource
    from .keys import b58encode, load_worker_key
    from .reaper import (
        REAPER_RPC_DEADLINE_S,
        REAPER_RPC_MAX_BYTES,
        Reaper,
        ReaperLock,
        ReaperPaths,
        run_reaper,
    )
    from .workload_store import WorkloadStore

    file = load_toml(config_path) if config_path else {}
    cfg = resolve(file, os.environ, flags)
    logging.basicConfig(level=cfg.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if cfg.log_level != "debug":
        logging.getLogger("httpx").setLevel(logging.WARNING)
    paths = ReaperPaths.of(cfg.db)
    lock = ReaperLock(paths.lock)
    try:
        if not lock.acquire():
            return  # one reaper per database: that one does the work
    except OSError as e:
        raise ConfigError(f"cannot lock {paths.lock}: {e.strerror}") from None
    try:
        missing = [n for n, v in (("--rpc-url", cfg.rpc_url), ("--program-id", cfg.program_id),
                                  ("--provider", cfg.provider)) if v is None]
        if missing:
            raise ConfigError(f"the reaper reads jobs from chain: it needs {', '.join(missing)}")
        if not paths.store.exists():
            log.info("no workload store at %s: nothing to reap", paths.store)
            return
        runtime = _detect_runtime(cfg)
        if runtime is None:
            raise ConfigError("the reaper needs the container runtime the worker uses")
        key = load_worker_key(cfg.key_file)
        source = ChainJobSource.connect(cfg.rpc_url, cfg.program_id, cfg.provider, key,
                                        rpc_deadline_s=REAPER_RPC_DEADLINE_S,
                                        rpc_max_bytes=REAPER_RPC_MAX_BYTES)
        store = WorkloadStore(paths.store, ended_logs_s=cfg.ended_logs_seconds)
        stop = threading.Event()

        def _on_signal(signum: int, _frame: Any) -> None:
            log.info("signal %d received; stopping after this pass", signum)
            stop.set()

        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)
        log.info("reaper %d started for provider %s: every %gs, this provider's containers of "
                 "jobs no longer running on chain are stopped and removed (store %s, runtime "
                 "%s)", os.getpid(), b58encode(cfg.provider), cfg.reaper_poll_seconds, paths.store,
                 runtime.name)
        try:
            why = run_reaper(Reaper(runtime, store, source, cfg.provider, paths=paths), paths,
                             lock, cfg.reaper_poll_seconds, stop, exit_when_idle=exit_when_idle)
        finally:
            store.close()
        log.info("reaper stopped: %s", why)
    finally:
        lock.release()


JOB_PROVIDER_OFFSET = 8 + 32 + 32
"""Byte offset of ``provider`` in a Job account (discriminator, market, user)."""


def _watch_jobs(cfg: Any, agent: Any) -> Any:
    """A PubSub subscription to this provider's Job accounts: any change (a new job, an
    acceptance, a finish) makes the agent poll at once. Polling every ``poll_seconds`` stays
    the fallback when the node has no PubSub or the connection drops."""
    from gpu_market.pubsub import ProgramWatcher, pubsub_url
    from solders.pubkey import Pubkey

    try:
        url = pubsub_url(cfg.rpc_url)
    except ValueError as e:
        log.warning("no job subscriptions (%s); polling every %ss", e, cfg.poll_seconds)
        return None
    from .keys import b58encode

    flt = [{"memcmp": {"offset": JOB_PROVIDER_OFFSET, "bytes": b58encode(cfg.provider)}}]
    log.info("job subscriptions at %s (polling every %ss stays the fallback)", url,
             cfg.poll_seconds)
    return ProgramWatcher(url, Pubkey.from_bytes(cfg.program_id), flt,
                          lambda _address, _data: agent.poke(), name="job-watch").start()


def _detect_runtime(cfg: Any) -> Any:
    """The configured container runtime; None (logged) when "auto" finds none. An explicit
    choice that is missing or broken is fatal."""
    from .errors import ContainerRuntimeError
    from .runtime_cli import detect_runtime

    extra_env = None
    if cfg.containers_conf is not None:
        if not cfg.containers_conf.is_file():
            raise ConfigError(f"containers_conf {cfg.containers_conf} is not a file")
        extra_env = {"CONTAINERS_CONF": str(cfg.containers_conf)}
    try:
        return detect_runtime(cfg.runtime, extra_env=extra_env,
                              scratch_dir=cfg.db.with_name(cfg.db.stem + ".scratch"))
    except ContainerRuntimeError as e:
        if cfg.runtime != "auto":
            raise
        log.error("no container runtime (%s): jobs with a workload will not be accepted; "
                  "install podman (or docker) and restart the worker", e)
        return None


def main() -> None:
    cli(prog_name="gpum-worker")


if __name__ == "__main__":  # pragma: no cover
    main()
