"""Managed jobs from Python: :func:`launch` creates one (its first attempt chosen by the
policy, planned before anything is sent) and runs its controller until the first attempt's
container runs; :func:`attach` finds one again by name (in another process, after a restart);
:class:`ManagedJob` is the handle: :meth:`~ManagedJob.status`, :attr:`~ManagedJob.attempts`,
:meth:`~ManagedJob.events`, :meth:`~ManagedJob.run_controller`, :meth:`~ManagedJob.migrate`,
:meth:`~ManagedJob.stop`::

    from gpu_market import managed

    job = managed.launch(gpu="H100:1", image="docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
                         hours=2, name="train", max_restarts=3, budget="20",
                         recover_exit_codes="137")
    print(job.status()["endpoints"])
    job.run_controller()        # watch and migrate until it ends (Ctrl-C: resume later)

Only one controller runs a managed job at a time (:class:`~.store.ControllerLock`);
:meth:`ManagedJob.run_controller` raises :class:`~.store.ControllerBusy` naming the pid
holding it. Secrets (``secrets=``) and the checkpoint store's credentials are kept in this
process's memory only; :func:`attach` takes them again (default: from the environment, by
the names the job was created with).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from ..errors import SdkError
from .controller import Controller
from .policy import PolicyError, RecoveryPolicy, parse_exit_codes
from .store import ControllerLock, Event, ManagedStore, StoreError
from .store import ManagedJob as _Row
from .template import TemplateError, make_template, secret_names

__all__ = ["LaunchError", "ManagedJob", "attach", "describe", "launch", "secrets_from_env"]

_sleep = time.sleep  # tests replace it


class LaunchError(SdkError):
    """A managed job that cannot be created or found; the message says why and what to do."""


def secrets_from_env(template: Mapping[str, Any], environ: Mapping[str, str] | None = None,
                     ) -> dict[str, str]:  # fmt: skip
    """The template's secrets from the environment (by name); missing ones are left out (the
    controller says which when it needs them)."""
    environ = os.environ if environ is None else environ
    return {n: environ[n] for n in secret_names(template) if n in environ}


def checkpoint_credentials_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    environ = os.environ if environ is None else environ
    key, secret = environ.get("AWS_ACCESS_KEY_ID"), environ.get("AWS_SECRET_ACCESS_KEY")
    return (key, secret) if key and secret else None


def describe(store: ManagedStore, m: _Row) -> dict[str, Any]:
    """A managed job as ``gpum job status`` and ``status()`` show it: base units, Unix
    seconds; ``attempts`` oldest first (provider, start, end, why it ended, seconds paid)."""
    policy = RecoveryPolicy.from_json(m.policy)
    atts = store.attempts(m.id)
    current = next((a for a in reversed(atts) if a.state != "abandoned"), None)
    spent = sum(a.committed for a in atts)
    return {
        "name": m.name, "phase": m.phase, "reason": m.phase_reason,
        "next_try_at": m.next_try_at,
        "current_job": current.job if current else None,
        "provider": current.provider if current else None,
        "endpoints": current.endpoints if current and current.state == "running" else [],
        "restarts": max(0, (current.idx if current else 0)),
        "max_restarts": policy.max_restarts, "budget": policy.budget, "committed": spent,
        "gpu_model": policy.model, "gpus": policy.gpus,
        "attempts": [{"attempt": a.idx, "job": a.job, "provider": a.provider, "state": a.state,
                      "created_at": a.created_at, "started_at": a.started_at,
                      "ended_at": a.ended_at, "end_reason": a.end_reason,
                      "end_kind": a.end_kind, "deposited": a.deposited or a.deposit,
                      "paid": a.paid, "paid_seconds": a.paid_seconds, "refunded": a.refunded,
                      "endpoints": a.endpoints} for a in atts],
        "created_at": m.created_at,
    }  # fmt: skip


class ManagedJob:
    """A managed job (see the module docstring). ``world`` acts for the user's wallet."""

    def __init__(self, store: ManagedStore, managed_id: int, world: Any, *,
                 secrets: Mapping[str, str] | None = None,
                 checkpoint_credentials: tuple[str, str] | None = None,
                 say: Callable[[Event], None] | None = None,
                 sleep: Callable[[float], None] | None = None) -> None:  # fmt: skip
        self.store, self.id, self.world = store, managed_id, world
        self.secrets = dict(secrets or {})
        self.checkpoint_credentials = checkpoint_credentials
        self.say = say or (lambda e: None)
        self.sleep = sleep or (lambda s: _sleep(s))

    @property
    def name(self) -> str:
        return self.store.managed(self.id).name

    @property
    def attempts(self) -> list[Any]:
        """Its attempts, oldest first (:class:`~.store.Attempt`)."""
        return self.store.attempts(self.id)

    def status(self) -> dict[str, Any]:
        """:func:`describe` of it now (as recorded by its controller)."""
        return describe(self.store, self.store.managed(self.id))

    def events(self, after: int = 0) -> list[Event]:
        return self.store.events(self.id, after=after)

    def controller(self) -> Controller:
        return Controller(self.store, self.id, self.world, secrets=self.secrets,
                          checkpoint_credentials=self.checkpoint_credentials, say=self.say,
                          sleep=self.sleep)  # fmt: skip

    def lock(self) -> ControllerLock:
        return ControllerLock(self.store.path.parent, self.id, self.name)

    def run_controller(self, until: Callable[[Controller], bool] | None = None,
                       timeout: float | None = None) -> dict[str, Any]:  # fmt: skip
        """Run the controller here (holding the lock) until ``until(controller)``, the job
        ended with every attempt closed, or ``timeout`` seconds; :meth:`status` then."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def done(c: Controller) -> bool:
            return (until is not None and until(c)) or (deadline is not None
                                                        and time.monotonic() >= deadline)  # fmt: skip

        with self.lock():
            c = self.controller()
            c.flush()
            c.run(until=done)
        return self.status()

    def _drive(self, until: Callable[[Controller], bool], timeout: float | None) -> dict[str, Any]:
        """Run the controller until ``until`` when no other one runs; else wait for the one
        that does (reading the database) until ``until`` or ``timeout``."""
        if self.lock().holder() is None:
            return self.run_controller(until=until, timeout=timeout)
        probe = self.controller()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not until(probe):
            probe.flush()
            if deadline is not None and time.monotonic() >= deadline:
                break
            self.sleep(1.0)
        probe.flush()
        return self.status()

    def migrate(self, to: Pubkey | str | None = None, timeout: float | None = 900) -> dict[str, Any]:
        """Leave the current provider now (for ``to``, or the best offer by the policy) and
        return once the successor runs (or ``timeout``)."""
        before = self.attempts
        current = before[-1].idx if before else -1
        self.store.request_migrate(self.id, self.world.now(), None if to is None else str(to))

        def moved(c: Controller) -> bool:
            m = c.managed()
            atts = c.attempts()
            return m.ended or (m.phase == "running" and atts[-1].idx > current)

        return self._drive(moved, timeout)

    def stop(self, timeout: float | None = None) -> dict[str, Any]:
        """Stop the managed job: every attempt finished or cancelled, its grace waited out and
        closed with its receipt; :meth:`status` then."""
        self.store.request_stop(self.id, self.world.now())
        return self._drive(lambda c: c.finished(), timeout)

    def close(self) -> None:
        close = getattr(self.world, "close", None)
        if close is not None:
            close()
        client = getattr(self.world, "client", None)
        if client is not None:
            client.close()
        self.store.close()


def _world(url: str | None, keypair: Any, market: Pubkey, program_id: Any) -> Any:
    from ..client import GpuMarketClient
    from ..constants import PROGRAM_ID
    from ..deployment import _keypair, _pubkey, _url
    from .world import ChainWorld

    kp = _keypair(keypair)
    client = GpuMarketClient(_url(url), payer=None,
                             program_id=_pubkey(program_id, "program_id") or PROGRAM_ID)  # fmt: skip
    return ChainWorld(client, kp, market), kp


def launch(gpu: str, image: str, ports: Sequence[int | str] = (), hours: float | str = 1, *,
           name: str, cmd: str | Sequence[str] | None = None, args: Sequence[str] = (),
           env: Mapping[str, str] | None = None, secrets: Mapping[str, str] | None = None,
           shm_size_mib: int | None = None, scratch_mib: int | None = None,
           finish_on_exit: bool = False, url: str | None = None,
           keypair: Keypair | str | os.PathLike | None = None,
           market: Pubkey | str | None = None, provider: Pubkey | str | None = None,
           committee: Sequence[Pubkey | str] | None = None, quorum: int | None = None,
           max_price: str | float | None = None, budget: str | float | None = None,
           max_restarts: int = 3, min_score: float = 0.0, regions: Sequence[str] = (),
           avoid: Sequence[Pubkey | str] = (), recover_exit_codes: str | Sequence[int] = (),
           missed_windows: int = 3, health_grace: str | int = "10m",
           start_timeout: str | int = "10m", checkpoint: Mapping[str, Any] | None = None,
           wait: bool = True, timeout: float = 600, program_id: Pubkey | str | None = None,
           store: ManagedStore | None = None, world: Any = None,
           say: Callable[[Event], None] | None = None) -> ManagedJob:  # fmt: skip
    """Create managed job ``name`` renting ``gpu`` ("MODEL:COUNT") for ``hours`` per attempt
    (as :func:`gpu_market.deploy`), with its recovery policy: ``max_restarts``, ``budget``
    (tokens over every attempt; default ``(max_restarts + 1)`` times the first deposit),
    ``max_price`` (tokens per GPU-hour), ``min_score``, ``regions``, ``avoid`` (providers),
    ``recover_exit_codes`` ("1,137" or ints), ``missed_windows``, ``health_grace`` and
    ``start_timeout`` (durations). ``provider``: the first attempt's provider. ``checkpoint``:
    the fields of a :class:`~gpu_market.checkpoint_spec.CheckpointConfig` (``store`` at
    least); the store's keys come from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` and the
    store must take a write before anything is sent. Every attempt restores its newest
    checkpoint before its container starts.

    Every check that needs no signature runs first (the name, the policy, the workload, an
    offer that fits and whose worker answers, the wallet's balance): a LaunchError then means
    no money moved. With ``wait`` the controller runs here until the first attempt's
    container runs (``timeout`` seconds at most); it may already migrate meanwhile (a provider
    that declines or never starts it is cancelled with a full refund)."""
    from ..deployment import DeployError, _pubkey, parse_gpu, parse_hours
    from ..job_history import HistoryError, JobHistory
    from ..units import AmountError, parse_duration, parse_price_per_hour, parse_ui_amount

    try:
        model, gpus = parse_gpu(gpu)
        seconds = parse_hours(str(hours))
        grace = int(parse_duration(str(health_grace), "s"))
        start = int(parse_duration(str(start_timeout), "s"))
    except (ValueError, DeployError) as e:
        raise LaunchError(str(e)) from None
    market_key = _pubkey(market or os.environ.get("GPUM_MARKET"), "market")
    if market_key is None:
        raise LaunchError("no market: pass market=ADDRESS or set GPUM_MARKET")
    if world is None:
        world, kp = _world(url, keypair, market_key, program_id)
    else:
        kp = world.keypair
    client = world.client
    m = client.fetch_market(market_key)
    if m is None:
        raise LaunchError(f"market {market_key} does not exist on {client.url}")
    decimals = client.mint_decimals(m.payment_mint)
    try:
        codes = parse_exit_codes(recover_exit_codes) if isinstance(recover_exit_codes, str) \
            else frozenset(int(c) for c in recover_exit_codes)
        cap = None if max_price is None else parse_price_per_hour(str(max_price), decimals)
        total = None if budget is None else parse_ui_amount(str(budget), decimals)
        policy = RecoveryPolicy(gpu_model=model, gpus=gpus, hours_seconds=Fraction(seconds),
                                budget=total, max_restarts=max_restarts,
                                max_price_per_gpu_second=cap, min_score=float(min_score),
                                regions=tuple(regions), avoid=tuple(str(a) for a in avoid),
                                recover_exit_codes=codes, missed_windows=missed_windows,
                                health_grace_s=grace, start_timeout_s=start)  # fmt: skip
        import shlex

        command = shlex.split(cmd) if isinstance(cmd, str) else list(cmd or ())
        template = make_template(image, command=command, args=args, env=env,
                                 secrets=sorted((secrets or {}).keys()),
                                 ports=[str(p) for p in ports], shm_size_mib=shm_size_mib,
                                 scratch_mib=scratch_mib, finish_on_exit=finish_on_exit,
                                 checkpoint=checkpoint)  # fmt: skip
    except (PolicyError, AmountError, TemplateError, ValueError) as e:
        raise LaunchError(str(e)) from None
    try:
        JobHistory().check_name_free(name, client.url,
                                     lambda keys: [j is not None for j in client.fetch_jobs(keys)])  # fmt: skip
    except HistoryError as e:
        raise LaunchError(str(e)) from None
    store = store or ManagedStore()
    creds = checkpoint_credentials_from_env()
    if checkpoint is not None:
        _check_store(checkpoint, creds)
    now = world.now()
    try:
        mid = store.create(name=name, url=client.url, uid=os.urandom(16), market=str(market_key),
                           user=str(kp.pubkey()), program_id=str(client.program_id),
                           decimals=decimals, policy=policy.to_json(), template=template, now=now,
                           events=[("info", f"managed job {name!r} created")])  # fmt: skip
    except StoreError as e:
        raise LaunchError(str(e)) from None
    job = ManagedJob(store, mid, world, secrets=secrets, checkpoint_credentials=creds, say=say)
    _plan_first(job, provider, committee, quorum)
    if wait:
        def first_runs(c: Controller) -> bool:
            r = c.managed()
            return r.phase == "running" or r.ended

        job.run_controller(until=first_runs, timeout=timeout)
        r = store.managed(mid)
        if r.ended:
            raise LaunchError(f"managed job {name!r} {r.phase.replace('_', ' ')}: {r.phase_reason}")
        if r.phase != "running":
            raise LaunchError(f"managed job {name!r} is not running after {timeout:g} s "
                              f"({r.phase}: {r.phase_reason or 'starting'}); its state is kept: "
                              f"`gpum job watch --managed {name}` (or attach()) resumes it")  # fmt: skip
    return job


def _check_store(config: Mapping[str, Any], creds: tuple[str, str] | None) -> None:
    """LaunchError unless the checkpoint store takes a write and a delete with ``creds``."""
    from ..checkpoint import CheckpointError, CheckpointStore, Credentials
    from ..checkpoint_spec import CheckpointConfig

    if creds is None:
        raise LaunchError("the checkpoint store needs AWS_ACCESS_KEY_ID and "
                          "AWS_SECRET_ACCESS_KEY in the environment; nothing was sent")  # fmt: skip
    try:
        store = CheckpointStore(CheckpointConfig(**dict(config)), Credentials(*creds))
        try:
            store.check()
        finally:
            store.close()
    except CheckpointError as e:
        raise LaunchError(f"checkpoints: {e}; nothing was sent and no money moved") from None


def _plan_first(job: ManagedJob, provider: Pubkey | str | None,
                committee: Sequence[Pubkey | str] | None, quorum: int | None) -> None:
    """Plan slot 0 (nothing sent): the policy's best offer, or ``provider``; LaunchError
    (and the managed job ended, nothing created) when none can be planned."""
    c = job.controller()
    now = job.world.now()
    if provider is not None:
        job.store.commit(job.id, now, managed={"migrate_to": str(provider)})
    c.plan_slot(c.managed(), [], 0, now)
    m = c.managed()
    atts = c.attempts()
    if not atts or m.phase in ("waiting", "gave_up"):
        why = m.phase_reason or "no offer"
        job.store.commit(job.id, now, managed={"phase": "done", "phase_reason": f"not started: {why}"})
        raise LaunchError(f"{why}; nothing was sent and no money moved")
    first = atts[0]
    if provider is not None and first.provider != str(provider):
        why = next((e.text for e in reversed(job.events()) if "asked for" in e.text), "")
        job.store.commit(job.id, now, attempt=(0, {"state": "abandoned"}),
                         managed={"phase": "done", "phase_reason": "not started"})  # fmt: skip
        raise LaunchError(f"{why or f'provider {provider} cannot take the job'}; nothing was "
                          "sent and no money moved")  # fmt: skip
    if committee is not None:
        from ..committee import default_quorum

        members = [str(Pubkey.from_string(str(k))) for k in committee]
        p = job.world.provider(Pubkey.from_string(first.provider))
        banned = {str(p.owner), str(p.worker_key)} if p is not None else set()
        if not members or banned & set(members):
            job.store.commit(job.id, now, attempt=(0, {"state": "abandoned"}),
                             managed={"phase": "done", "phase_reason": "not started"})  # fmt: skip
            raise LaunchError("the committee must name 1..5 validators, never the provider's "
                              "owner or worker key; nothing was sent")  # fmt: skip
        q = quorum if quorum is not None else default_quorum(len(members), 1)
        job.store.commit(job.id, now, attempt=(0, {"committee": members, "quorum": q}))


def attach(name: str, *, url: str | None = None,
           keypair: Keypair | str | os.PathLike | None = None,
           secrets: Mapping[str, str] | None = None, program_id: Pubkey | str | None = None,
           store: ManagedStore | None = None, world: Any = None,
           say: Callable[[Event], None] | None = None) -> ManagedJob:  # fmt: skip
    """The managed job ``name`` on cluster ``url`` (default: the Solana CLI config's), with the
    wallet ``keypair`` that created it; ``secrets`` default to the environment's values of
    its secret names. LaunchError when there is none or the wallet differs."""
    from ..deployment import _url

    store = store or ManagedStore()
    cluster = world.client.url if world is not None else _url(url)
    m = store.find(name, cluster)
    if m is None:
        raise LaunchError(f"no managed job named {name!r} on {cluster} in {store.path}")
    if world is None:
        world, _ = _world(cluster, keypair, Pubkey.from_string(m.market),
                          program_id or m.program_id)  # fmt: skip
    if str(world.keypair.pubkey()) != m.user:
        raise LaunchError(f"managed job {name!r} belongs to wallet {m.user}, not "
                          f"{world.keypair.pubkey()}: pass its keypair")  # fmt: skip
    return ManagedJob(store, m.id, world,
                      secrets=secrets if secrets is not None else secrets_from_env(m.template),
                      checkpoint_credentials=checkpoint_credentials_from_env(), say=say)  # fmt: skip
