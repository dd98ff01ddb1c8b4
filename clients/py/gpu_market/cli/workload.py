"""The workload side of ``gpum job``: the ``--image ...`` options ``job create`` and ``gpum run``
take and the spec they build, ``job deliver`` and ``job logs``, and ``workload_summary`` for
``job status``.

Flow (docs/protocol.md, "Workloads"): ``job create --image IMG ...`` builds the spec, seals
``--secret`` values to the provider's *current* worker key, puts the spec's sha256 on chain with
the job, then posts the spec to the provider's worker endpoint, signed by the user's wallet. The
spec is also saved (secrets sealed, never in clear) under ``~/.config/gpum/workloads/<job>.json``
so a failed delivery can be retried with ``gpum job deliver JOB``; while the job is Open the user
can also ``gpum job cancel JOB`` for a full refund. A worker never accepts a workload job before
it holds the spec, so the user pays nothing for GPUs that could not run it.

Bad input (image, ``--env``, ``--port``, limits, a provider without an endpoint) is refused
before any money moves.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from solders.pubkey import Pubkey

from .base import JOB, PUBKEY, CliError, Env, common, job_view

__all__ = ["build_spec", "deliver_saved", "job_deliver", "job_logs", "save_spec",
           "workload_options", "workload_summary"]

WORKLOADS_DIR = "~/.config/gpum/workloads"
"""Where ``job create`` keeps each job's spec (secrets sealed); ``GPUM_WORKLOADS_DIR``
overrides it."""


def workload_options(f: Callable) -> Callable:
    """The ``--image ...`` options of ``gpum job create``; they reach ``f`` as ``workload``
    (a dict, or None without ``--image``)."""
    opts = [
        click.option("--image", default=None,
                     help="Container image to run on the job's GPUs (reference or "
                          "name@sha256:digest). Without it the job rents the GPUs only."),
        click.option("--cmd", "command", default=None,
                     help="Entrypoint override, a JSON list (e.g. '[\"python\", \"-u\"]') or "
                          "one word."),
        click.option("--arg", "args", multiple=True, help="Argument after the entrypoint "
                     "(repeatable, in order)."),
        click.option("--env", "env_vars", multiple=True, metavar="K=V",
                     help="Environment variable (repeatable)."),
        click.option("--secret", "secrets", multiple=True, metavar="K=V",
                     help="Secret environment variable, sealed to the provider's worker key "
                          "(repeatable); only the container sees it in clear."),
        click.option("--port", "ports", multiple=True, metavar="PORT[/udp]",
                     help="Container port to publish on the provider's host (repeatable)."),
        click.option("--shm-size", "shm_size_mib", type=click.IntRange(1), default=None,
                     help="Shared memory, MiB."),
        click.option("--scratch", "scratch_mib", type=click.IntRange(1), default=None,
                     help="Writable scratch space at /scratch, MiB (the disk limit)."),
        click.option("--finish-on-exit", is_flag=True, default=False,
                     help="Finish the job (stop paying) when the container exits."),
    ]

    @functools.wraps(f)
    def wrapper(*a: Any, image=None, command=None, args=(), env_vars=(), secrets=(), ports=(),
                shm_size_mib=None, scratch_mib=None, finish_on_exit=False, **kw: Any) -> Any:
        workload = None
        if image is not None:
            workload = {"image": image, "command": command, "args": args, "env": env_vars,
                        "secrets": secrets, "ports": ports, "shm_size_mib": shm_size_mib,
                        "scratch_mib": scratch_mib, "finish_on_exit": finish_on_exit}
        elif any((command, args, env_vars, secrets, ports, shm_size_mib, scratch_mib,
                  finish_on_exit)):
            raise click.UsageError("--cmd, --arg, --env, --secret, --port, --shm-size, "
                                   "--scratch and --finish-on-exit describe a container: pass "
                                   "--image too")
        return f(*a, workload=workload, **kw)

    for opt in reversed(opts):
        wrapper = opt(wrapper)
    return wrapper


def _command(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    if text.lstrip().startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise click.BadParameter(f"not a JSON list of strings: {e}", param_hint="'--cmd'")
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise click.BadParameter("must be a JSON list of strings", param_hint="'--cmd'")
        return tuple(value)
    return (text,)


def build_spec(workload: dict[str, Any], provider: Any) -> Any:
    """The WorkloadSpec of ``job create``'s options for ``provider`` (a ProviderView):
    secrets sealed to its current worker key. CliError/BadParameter before anything is sent."""
    from ..workload import (
        WorkloadSpec,
        WorkloadSpecError,
        parse_env_arg,
        parse_port_arg,
        seal_secrets,
        spec_hash,
    )

    if not provider.endpoint:
        raise CliError(f"provider {provider.address} publishes no worker endpoint, so it runs no "
                       "workloads; choose another provider, or create the job without --image "
                       "to rent the GPUs only")  # fmt: skip

    def pairs(values: tuple[str, ...], hint: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for text in values:
            try:
                k, v = parse_env_arg(text)
            except WorkloadSpecError as e:
                raise click.BadParameter(str(e), param_hint=hint) from None
            if k in out:
                raise click.BadParameter(f"{k} is given twice", param_hint=hint)
            out[k] = v
        return out

    env_vars = pairs(workload["env"], "'--env'")
    secrets = pairs(workload["secrets"], "'--secret'")
    both = sorted(set(env_vars) & set(secrets))
    if both:
        raise click.BadParameter(f"{', '.join(both)} given both as --env and --secret",
                                 param_hint="'--secret'")  # fmt: skip
    ports = []
    for text in workload["ports"]:
        try:
            ports.append(parse_port_arg(text))
        except WorkloadSpecError as e:
            raise click.BadParameter(str(e), param_hint="'--port'") from None
    try:
        spec = WorkloadSpec(
            image=workload["image"], command=_command(workload["command"]),
            args=tuple(workload["args"]), env=tuple(env_vars.items()),
            secret_env=seal_secrets(bytes(provider.worker_key), secrets) if secrets else (),
            ports=tuple(ports), shm_size_mib=workload["shm_size_mib"],
            scratch_mib=workload["scratch_mib"], finish_on_exit=workload["finish_on_exit"],
        )
        spec_hash(spec)  # validates
    except WorkloadSpecError as e:
        raise CliError(f"bad workload: {e}; nothing was sent") from None
    return spec


def _spec_path(job: Pubkey) -> Path:
    base = os.environ.get("GPUM_WORKLOADS_DIR") or os.path.expanduser(WORKLOADS_DIR)
    return Path(base) / f"{job}.json"


def save_spec(job: Pubkey, spec: Any) -> Path:
    """Keep the spec for ``gpum job deliver`` (mode 0600; secrets stay sealed)."""
    from ..workload import canonical_bytes

    path = _spec_path(job)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(canonical_bytes(spec))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def _provider_endpoint(env: Env, provider: Pubkey) -> str:
    p = env.client.fetch_provider(provider)
    if p is None or not p.endpoint:
        raise CliError(f"provider {provider} publishes no worker endpoint (it may have removed "
                       "it); ask its operator, or cancel the job while it is Open")  # fmt: skip
    return p.endpoint


def deliver_saved(env: Env, job: Pubkey, spec: Any, provider: Pubkey) -> dict[str, Any]:
    """Post ``spec`` to the provider's worker, signed by the user's wallet; the worker's answer.
    CliError with what to do next when the worker cannot be reached or refuses."""
    from ..workload_api import WorkerApiError, deliver_workload

    endpoint = _provider_endpoint(env, provider)
    try:
        # A job created moments ago reaches the worker at its next poll: retry for a while.
        return deliver_workload(endpoint, bytes(job), spec, bytes(env.keypair), retries=20)
    except WorkerApiError as e:
        raise CliError(f"the workload was not delivered: {e}. The job is created and its spec "
                       f"saved at {_spec_path(job)}: retry with `gpum job deliver {job}`, or "
                       f"`gpum job cancel {job}` for a full refund while it is Open") from None


@click.command("deliver")
@common
@click.argument("job_address", metavar="JOB", type=JOB)
@click.option("--spec", "spec_file", type=click.Path(dir_okay=False), default=None,
              help="The spec JSON (default: the one `gpum job create` saved for JOB).")
def job_deliver(env: Env, job_address: Pubkey, spec_file: str | None) -> None:
    """(Re)send a job's workload spec to its provider's worker (your wallet signs)."""
    from ..workload import WorkloadSpecError, spec_from_json, spec_hash

    j = job_view(env, job_address)
    if j.workload_hash == bytes(32):
        raise CliError(f"job {job_address} has no workload (it was created without --image)")
    path = Path(spec_file) if spec_file else _spec_path(job_address)
    try:
        spec = spec_from_json(path.read_bytes())
    except FileNotFoundError:
        raise CliError(f"no spec at {path}: pass --spec FILE with the spec you created the job "
                       "with") from None  # fmt: skip
    except (OSError, WorkloadSpecError) as e:
        raise CliError(f"cannot read the spec at {path}: {e}") from None
    if spec_hash(spec) != j.workload_hash:
        raise CliError(f"the spec at {path} hashes to {spec_hash(spec).hex()}, not the job's "
                       f"workload_hash {j.workload_hash.hex()}: the worker would refuse it")
    answer = deliver_saved(env, job_address, spec, j.provider)
    env.emit({"job": str(job_address), "workload_hash": j.workload_hash.hex(),
              "state": answer.get("state")})


STATUS_TIMEOUT = 3.0
"""Seconds ``job status`` gives the provider's worker to report the workload (the chain stays
the source of truth for the job's state)."""


def workload_summary(env: Env, j: Any) -> dict[str, Any] | None:
    """``job status``'s ``workload`` entry: the hash, and the container's state and published
    ports from the provider's worker (only the job's user may ask; errors become text); once the
    job is ending or ended, ``end_reason`` and ``logs_kept_until`` (Unix s) as the worker
    reports them."""
    from ..workload_api import WorkerApiError, workload_status

    if j.workload_hash == bytes(32):
        return None
    out: dict[str, Any] = {"workload_hash": j.workload_hash.hex()}
    if env.keypair.pubkey() != j.user:
        out["state"] = "unknown: only the job's user may ask the provider's worker"
        return out
    p = env.client.fetch_provider(j.provider)
    if p is None or not p.endpoint:
        out["state"] = "unknown: the provider publishes no worker endpoint"
        return out
    try:
        s = workload_status(p.endpoint, bytes(j.address), j.workload_hash, bytes(env.keypair),
                            timeout=STATUS_TIMEOUT)  # fmt: skip
    except WorkerApiError as e:
        out["state"] = "unknown"
        out["error"] = str(e)
        return out
    out.update({k: s.get(k) for k in ("state", "exit_code", "error", "runtime")})
    out["ports"] = [f"{pt['host']}:{pt['host_port']} -> {pt['port']}/{pt['protocol']}"
                    for pt in s.get("ports") or ()]
    for key in ("job_status", "ended", "end_reason", "logs_kept_until"):
        if s.get(key):
            out[key] = s[key]
    return out


def _logs_source(env: Env, job: Pubkey, provider: Pubkey | None) -> tuple[Pubkey, bytes]:
    """``(provider, workload_hash)`` to sign ``job logs`` with: the job's own while it is on
    chain, whatever its state; for a closed job (the chain keeps only a tombstone) the hash of
    the spec saved at creation and the provider named by ``--provider`` or the local history."""
    from ..workload import WorkloadSpecError, spec_from_json, spec_hash

    j = env.client.fetch_job(job)
    if j is not None:
        if j.workload_hash == bytes(32):
            raise CliError(f"job {job} has no workload (it was created without --image)")
        if env.keypair.pubkey() != j.user:
            raise CliError(f"only the job's user ({j.user}) may read its logs; pass --keypair "
                           "with that wallet")  # fmt: skip
        return provider or j.provider, j.workload_hash
    if env.client.fetch_closed_job(job) is None:
        raise CliError(f"job {job} does not exist (wrong --url?)")
    path = _spec_path(job)
    try:
        workload_hash = spec_hash(spec_from_json(path.read_bytes()))
    except FileNotFoundError:
        raise CliError(f"job {job} is closed and no spec of it is saved at {path} (set "
                       "GPUM_WORKLOADS_DIR to where `gpum job create` saved it): its logs "
                       "cannot be asked for") from None  # fmt: skip
    except (OSError, WorkloadSpecError) as e:
        raise CliError(f"job {job} is closed and its saved spec at {path} is unreadable: {e}") from None
    if provider is None:
        provider = _history_provider(env, job)
    if provider is None:
        raise CliError(f"job {job} is closed and the local job history does not name its "
                       "provider: pass --provider PROVIDER")  # fmt: skip
    return provider, workload_hash


def _history_provider(env: Env, job: Pubkey) -> Pubkey | None:
    from ..job_history import HistoryError, JobHistory
    from .base import resolve_url

    try:
        record = JobHistory().records(resolve_url(env.url)).get(str(job)) or {}
    except HistoryError:
        return None
    try:
        return Pubkey.from_string(record["provider"])
    except (KeyError, TypeError, ValueError):
        return None


@click.command("logs")
@common
@click.argument("job_address", metavar="JOB", type=JOB)
@click.option("--follow", "-f", is_flag=True, help="Keep streaming until the container stops.")
@click.option("--tail", type=click.IntRange(0), default=None, help="Only the last N lines.")
@click.option("--provider", "provider_", type=PUBKEY, default=None,
              help="The job's provider account, for a closed job the local history does not "
                   "know.")  # fmt: skip
def job_logs(env: Env, job_address: Pubkey, follow: bool, tail: int | None,
             provider_: Pubkey | None) -> None:
    """Print the job container's output, from the provider's worker (your wallet signs).

    A job that ended (escrow ran dry, finished, failed, closed) keeps its last logs on the
    worker for a while; after that the worker's reason is printed."""
    from ..workload_api import WorkerApiError, stream_logs

    provider, workload_hash = _logs_source(env, job_address, provider_)
    endpoint = _provider_endpoint(env, provider)
    out = sys.stdout.buffer
    try:
        for chunk in stream_logs(endpoint, bytes(job_address), workload_hash,
                                 bytes(env.keypair), tail=tail, follow=follow):  # fmt: skip
            out.write(chunk)
            out.flush()
    except WorkerApiError as e:
        if e.status == 410:
            raise CliError(f"the logs of job {job_address} are gone: "
                           f"{e.server_error or 'the job has ended'}") from None
        raise CliError(str(e)) from None
