"""Rent GPUs and run a container in one call: ``deploy(...) -> Deployment``; the flow of
``gpum run`` (:mod:`gpu_market.cli.run`) and of ``gpum job stop`` (:mod:`gpu_market.cli.job_control`),
which call the functions here::

    import gpu_market
    d = gpu_market.deploy(gpu="H100:1", image="jupyter/base-notebook", ports=[8888], hours=2)
    print(d.endpoint)       # "host:port" of the first published port
    print(d.logs(tail=20))  # the container's output
    receipt = d.stop()      # finish, wait out the grace, close: deposited, paid, refunded

Guarantees (the same as ``gpum run``'s): every check that needs no signature (offer, price,
committee, deposit, the wallet's balance, the workload, and the chosen provider's worker
answering ``GET /v1/health``) runs before anything is sent, so no money moves for a provider
whose worker is down. ``timeout`` bounds the whole call (health probe, delivery and its
retries, the wait for the container), with ``CANCEL_RESERVE_S`` of it kept for the cancel; when
the delivery fails, the time runs out while the job is still Open, or the caller is interrupted
(KeyboardInterrupt), the Open job is cancelled (the whole deposit back in the same transaction)
and the :class:`DeployError` says so; a job already Running is left running and the error names
how to stop it. Every failure is a :class:`DeployError` (an ``SdkError``) with one actionable
line.

The clock, the sleep, the worker probe and the progress display are :class:`Hooks`, so callers
(the CLI, tests) can replace them.
"""

from __future__ import annotations

import math
import os
import shlex
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from .errors import SdkError
from .solana_cli import DEFAULT_KEYPAIR
from .solana_cli import MONIKERS as _MONIKERS
from .solana_cli import solana_config as _solana_config
from .units import U64_MAX, format_ui_amount, parse_duration

__all__ = ["CANCEL_RESERVE_S", "DELIVER_ATTEMPT_S", "DeployError", "Deployment", "Hooks",
           "abandon", "deploy", "parse_gpu", "parse_hours", "stop_job"]  # fmt: skip

SECONDS_PER_HOUR = 3600
POLL_SECONDS = 1.0
"""How often the flow looks at the job and its container while waiting."""
CANCEL_RESERVE_S = 5.0
"""The part of the timeout (at most a quarter of it) kept for cancelling the job."""
DELIVER_ATTEMPT_S = 10.0
"""The longest one delivery attempt or status read may take."""
STOP_POLL_SECONDS = 2.0
STOP_MARGIN_SECONDS = 120
"""Stopping without a limit waits the job's grace and this much more."""
LOGS_TIMEOUT_S = 10.0
LOGS_MAX_BYTES = 4 * 1024 * 1024
"""``Deployment.logs`` keeps at most the last this many bytes."""


class DeployError(SdkError):
    """A deployment (or a stop) that cannot go on; the message says why and what to do."""

    @property
    def message(self) -> str:
        return str(self)


class Abandoned(DeployError):
    """The job was created but will not run as asked: cancel it while it is Open."""


def cli_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def sdk_flag(name: str) -> str:
    return name


class _NoProgress:
    def show(self, text: str) -> None:
        pass

    def done(self) -> None:
        pass


def probe_workers(offers: Sequence[Any], deadline: float) -> dict[Any, Any]:
    """Liveness of ``offers``' workers within ``deadline`` seconds in all."""
    from .offers import PROBE_DEADLINE_S, PROBE_TOTAL_S, probe_liveness

    left = max(0.1, deadline)
    return probe_liveness(offers, deadline=min(PROBE_DEADLINE_S, left),
                          total=min(PROBE_TOTAL_S, left))  # fmt: skip


@dataclass
class Hooks:
    """What the flow waits and probes with, and where it shows progress. ``flag`` names a
    parameter in messages (``--max-price`` for the CLI, ``max_price`` for the SDK)."""

    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    probe: Callable[[Sequence[Any], float], dict[Any, Any]] = probe_workers
    progress: Any = field(default_factory=_NoProgress)
    flag: Callable[[str], str] = sdk_flag


# ----------------------------------------------------------------------------- argument parsing


def parse_gpu(text: str) -> tuple[str, int]:
    """``"H100:2"`` -> ``("H100", 2)``: the GPU model (matched as a case-insensitive substring
    of the provider's model, ``_`` = space) and how many GPUs, 1..256. ValueError otherwise."""
    model, sep, count = str(text).rpartition(":")
    model = model.strip()
    if not sep or not model:
        raise ValueError(f"{text!r} is not MODEL:COUNT, e.g. H100:1 or 'RTX 4090:2'")
    try:
        n = int(count.strip())
    except ValueError:
        raise ValueError(f"the GPU count {count.strip()!r} in {text!r} is not a whole number") from None
    if not 1 <= n <= 256:
        raise ValueError(f"the GPU count in {text!r} must be 1..256")
    return model, n


def parse_hours(text: str) -> Fraction:
    """``"1.5"`` (hours) or a duration (``"90m"``, ``"1h30m"``, ``"2d"``) -> seconds, exact.
    ValueError for anything but a positive duration."""
    seconds = parse_duration(text, "h")
    if seconds <= 0:
        raise ValueError(f"{text!r}: give a positive number of hours or a duration, e.g. 2, "
                         "0.5, 90m or 1h30m")
    return seconds


# ----------------------------------------------------------------------------- choosing the offer


def why_no_offer(offers: Sequence[Any], market: Pubkey, model: str, gpus: int, limit: int | None,
                 hour_limit_text: str | None, decimals: int, flag: Callable[[str], str]) -> str:  # fmt: skip
    """One line naming the first constraint (model, GPU count, runs containers, price) that
    leaves no offer, in that order."""
    from .offers import best_offer

    if not offers:
        return (f"no offers in market {market}: no Active provider has a free GPU now (see "
                "`gpum offers`)")
    matching = [o for o in offers if best_offer([o], gpus=1, gpu_model=model) is not None]
    if not matching:
        models = sorted({o.gpu_model for o in offers})
        return (f"no offer has a GPU model matching {model!r}; models offered: "
                f"{', '.join(repr(m) for m in models)} (see `gpum offers`)")
    roomy = [o for o in matching if o.gpus_free >= gpus]
    if not roomy:
        most = max(o.gpus_free for o in matching)
        return (f"no {model} offer has {gpus} free GPU(s); the most any has is {most}: ask "
                f"for fewer with {flag('gpu')} {model}:{most}, or try later")
    runs = [o for o in roomy if o.runs_workloads]
    if not runs:
        return (f"{len(roomy)} {model} offer(s) have {gpus} free GPU(s) but none runs "
                "containers (publishes a worker endpoint); rent bare GPUs with `gpum job "
                "create` instead")
    if limit is None:  # only a jailed provider could be left out: list_offers drops those
        return f"no offer fits {flag('gpu')} {model}:{gpus} (see `gpum offers`)"
    cheapest = min(o.price_per_gpu_second for o in runs)
    return (f"the cheapest matching offer costs "
            f"{format_ui_amount(cheapest * SECONDS_PER_HOUR, decimals)} per GPU-hour, above "
            f"your {flag('max_price')} {hour_limit_text}; raise {flag('max_price')} or try later")


def named_offer(client: Any, provider: Pubkey, params: Any, chain_now: int, model: str, gpus: int,
                limit: int | None, hour_limit_text: str | None, decimals: int,
                flag: Callable[[str], str]) -> Any:  # fmt: skip
    """The Offer of the provider asked for; DeployError naming what rules it out."""
    from .offers import Offer, best_offer

    p = client.fetch_provider(provider)
    if p is None:
        raise DeployError(f"provider {provider} does not exist on {client.url}; pass a provider "
                          "account address (see `gpum offers`)")  # fmt: skip
    if p.status != "active":
        raise DeployError(f"provider {provider} is {p.status} and takes no jobs; choose another "
                          "(see `gpum offers`)")  # fmt: skip
    if p.worker_key_expires_at != 0 and chain_now > p.worker_key_expires_at:
        raise DeployError(f"provider {provider}'s worker key expired at "
                          f"{p.worker_key_expires_at}; it takes no jobs until it rotates it")  # fmt: skip
    offer = Offer.from_provider(p, min_stake_per_gpu=params.min_stake_per_gpu)
    if best_offer([offer], gpus=1, gpu_model=model) is None:
        raise DeployError(f"provider {provider} offers {offer.gpu_model!r}, which does not match "
                          f"{flag('gpu')} {model}")  # fmt: skip
    if offer.gpus_free < gpus:
        raise DeployError(f"provider {provider} has {offer.gpus_free} free GPU(s) backed by "
                          f"stake; you asked for {gpus}")  # fmt: skip
    if not offer.runs_workloads:
        raise DeployError(f"provider {provider} publishes no worker endpoint, so it runs no "
                          "containers; choose another (see `gpum offers workloads=true`)")  # fmt: skip
    if limit is not None and offer.price_per_gpu_second > limit:
        raise DeployError(f"provider {provider} charges "
                          f"{format_ui_amount(offer.price_per_gpu_hour(), decimals)} per "
                          f"GPU-hour, above your {flag('max_price')} {hour_limit_text}; raise "
                          f"{flag('max_price')} or choose another provider")  # fmt: skip
    return offer


def alive_offer(offers: Sequence[Any], left: float, *, gpus: int, gpu_model: str,
                limit: int | None, hooks: Hooks) -> Any:  # fmt: skip
    """The best offer among ``offers`` that fits and whose worker answers ``/v1/health`` (all
    that fit are probed in parallel within ``left`` seconds); None when none fits at all;
    DeployError naming the providers and what failed when every one that fits is down."""
    from .offers import best_offer, with_liveness

    def fits(o: Any) -> bool:
        return best_offer([o], gpus=gpus, gpu_model=gpu_model, max_price_per_gpu_second=limit,
                          needs_workloads=True) is not None  # fmt: skip

    candidates = [o for o in offers if fits(o)]
    if not candidates:
        return None
    live = with_liveness(candidates, hooks.probe(candidates, left))
    up = [o for o in live if o.online is not False]
    if up:
        return best_offer(up, gpus=gpus, gpu_model=gpu_model, max_price_per_gpu_second=limit,
                          needs_workloads=True)  # fmt: skip
    down = "; ".join(f"{o.provider} at {o.endpoint}: {o.liveness_error}" for o in live[:3])
    raise DeployError(f"{len(live)} offer(s) fit, but no provider's worker answers its health "
                      f"check ({down}); nothing was sent and no money moved: try later, or see "
                      "`gpum offers --all`")  # fmt: skip


def require_alive(offer: Any, left: float, hooks: Hooks) -> None:
    """DeployError naming the provider, its endpoint and what failed unless its worker answers
    ``/v1/health`` within ``left`` seconds."""
    live = hooks.probe([offer], left).get(offer.provider)
    if live is not None and live.online is False:
        raise DeployError(f"provider {offer.provider}'s worker at {offer.endpoint} failed its "
                          f"health check: {live.error}; nothing was sent and no money moved: "
                          "choose another provider (`gpum offers`) or try later")  # fmt: skip


@dataclass
class Plan:
    """What a deployment will rent, before anything is sent (amounts in base units)."""

    offer: Any
    provider: Any
    """The ProviderView read just before pricing."""
    price: int
    """Per GPU-second."""
    rate: int
    """Per second, all GPUs."""
    deposit: int
    limit: int | None
    """The highest price per GPU-second accepted (None: no limit)."""


def plan_offer(client: Any, market: Pubkey, params: Any, chain_now: int, *, model: str, gpus: int,
               seconds: Fraction, limit: int | None, hour_limit_text: str | None, decimals: int,
               provider: Pubkey | None, left: float, hooks: Hooks) -> Plan:  # fmt: skip
    """The offer (``provider``'s, or the best live one), its price and the deposit for
    ``seconds``; DeployError when none fits or its worker is down."""
    from .accounts import min_deposit
    from .offers import list_offers

    flag = hooks.flag
    if provider is not None:
        offer = named_offer(client, provider, params, chain_now, model, gpus, limit,
                            hour_limit_text, decimals, flag)  # fmt: skip
        require_alive(offer, left, hooks)
    else:
        offers = list_offers(client, market)
        offer = alive_offer(offers, left, gpus=gpus, gpu_model=model, limit=limit, hooks=hooks)
        if offer is None:
            raise DeployError(why_no_offer(offers, market, model, gpus, limit, hour_limit_text,
                                           decimals, flag))  # fmt: skip
    p = client.fetch_provider(offer.provider)
    if p is None:
        raise DeployError(f"provider {offer.provider} disappeared while choosing it; run again")
    price = p.price_per_gpu_second
    if limit is not None and price > limit:
        raise DeployError(f"provider {offer.provider} just raised its price to "
                          f"{format_ui_amount(price * SECONDS_PER_HOUR, decimals)} per GPU-hour, "
                          f"above your {flag('max_price')} {hour_limit_text}; nothing was sent: "
                          "run again")  # fmt: skip
    rate = price * gpus
    deposit = max(math.ceil(rate * seconds), min_deposit(params, price, gpus))
    if deposit > U64_MAX:
        raise DeployError(f"{float(seconds / SECONDS_PER_HOUR):g} hours at this price is more "
                          f"than a token amount can hold; ask for fewer {flag('hours')}")  # fmt: skip
    return Plan(offer, p, price, rate, deposit, limit)


def holding(client: Any, owner: Pubkey, mint: Pubkey) -> tuple[Pubkey, int]:
    """``owner``'s associated token account of ``mint`` and what it holds (0 while absent)."""
    from . import tokens
    from .errors import AccountNotFound

    account = tokens.ata(owner, mint)
    try:
        return account, client.token_balance(account)
    except AccountNotFound:
        return account, 0


# ----------------------------------------------------------------------------- creating and starting


def create(client: Any, keypair: Keypair, market: Pubkey, plan: Plan, job_id: int, gpus: int,
           members: Sequence[Pubkey], quorum: int, workload_hash: bytes, decimals: int,
           flag: Callable[[str], str]) -> tuple[Any, Pubkey]:  # fmt: skip
    """``(signature, job address)`` of the job created for ``plan``; DeployError when the
    provider raised its price before it landed (nothing created) or on an interrupt (the job
    cancelled if it was created)."""
    from . import pda
    from .errors import GpuMarketError

    address = pda.job_pda(market, keypair.pubkey(), job_id, client.program_id)
    try:
        return client.create_job(keypair, market, plan.offer.provider, job_id, gpus, plan.deposit,
                                 committee=list(members), quorum=quorum,
                                 max_price_per_gpu_second=plan.price if plan.limit is None else plan.limit,
                                 workload_hash=workload_hash)  # fmt: skip
    except GpuMarketError as e:
        if e.name != "PriceAboveLimit":
            raise
        raise DeployError(f"provider {plan.offer.provider} raised its price before the job "
                          "landed; no job was created and nothing was charged: run again (with "
                          f"a higher {flag('max_price')} if needed)") from None  # fmt: skip
    except KeyboardInterrupt:
        raise DeployError(f"interrupted while creating the job; "
                          f"{abandon(client, keypair, address, decimals)}") from None  # fmt: skip


def deliver(keypair: Keypair, job: Pubkey, spec: Any, endpoint: str, deadline: float,
            hooks: Hooks) -> dict[str, Any]:  # fmt: skip
    """Post the spec to the worker, retrying an unreachable worker, 503 and 404 (it has not
    seen a job created moments ago yet) with backoff until ``deadline`` (monotonic); Abandoned
    with the last error when it is not delivered by then or the worker refuses it."""
    from . import workload_api

    attempt = 0
    while True:
        left = deadline - hooks.monotonic()
        try:
            return workload_api.deliver_workload(endpoint, bytes(job), spec, bytes(keypair),
                                                 timeout=max(0.1, min(DELIVER_ATTEMPT_S, left)),
                                                 retries=0)  # fmt: skip
        except workload_api.WorkerApiError as e:
            wait = min(0.5 * 2**attempt, 5.0, deadline - hooks.monotonic())
            if e.status not in (None, 404, 503) or wait <= 0:
                raise Abandoned(f"the workload was not delivered to {endpoint} ({attempt + 1} "
                                f"attempt(s) within {hooks.flag('timeout')}): {e}") from None  # fmt: skip
        hooks.sleep(wait)
        attempt += 1


def abandon(client: Any, keypair: Keypair, job: Pubkey, decimals: int) -> str:
    """Cancel ``job`` if it is still Open (the whole deposit back to the user); a sentence
    saying what happened to it and, for a Running job, the command that stops it."""
    from .errors import GpuMarketError

    j = client.fetch_job(job)
    if j is None:
        return f"job {job} does not exist (never created, or closed): no deposit is held"
    if j.status == "open":
        try:
            sig = client.cancel_job(keypair, job)
        except (GpuMarketError, SdkError) as e:
            j = client.fetch_job(job)
            if j is None or j.status != "running":
                return (f"cancelling job {job} failed ({e}): run `gpum job cancel {job}` for a "
                        "full refund")  # fmt: skip
        else:
            after = client.fetch_job(job)
            refunded = after.refunded if after is not None and after.refunded else j.deposited
            return (f"job {job} cancelled: {format_ui_amount(refunded, decimals)} refunded in "
                    f"full (transaction {sig}); `gpum job close {job}` returns its rent")  # fmt: skip
    if j.status == "running":
        return f"job {job} is running and billing: stop it with `gpum job stop {job}`"
    return f"job {job} is {j.status}: see `gpum job status {job}`"


def ports(status: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(endpoints "host:port", mappings "host:port -> port/proto")`` of a worker's status."""
    endpoints, mappings = [], []
    for pt in status.get("ports") or ():
        hostport = f"{pt.get('host')}:{pt.get('host_port')}"
        endpoints.append(hostport)
        mappings.append(f"{hostport} -> {pt.get('port')}/{pt.get('protocol')}")
    return endpoints, mappings


def wait_running(client: Any, keypair: Keypair, job: Pubkey, provider: Pubkey, endpoint: str,
                 timeout: float, deadline: float, hooks: Hooks) -> dict[str, Any]:  # fmt: skip
    """The worker's workload status once the job is Running and its container runs (or exited
    cleanly); DeployError when the job or the container fails, or at ``deadline`` (monotonic;
    Abandoned while the job is still Open)."""
    from .workload_api import WorkerApiError, workload_status

    progress = hooks.progress
    start = hooks.monotonic()
    last_error = ""
    status: dict[str, Any] = {}
    try:
        while True:
            waited = int(hooks.monotonic() - start)
            j = client.fetch_job(job)
            if j is None:
                raise DeployError(f"job {job} no longer exists (closed); nothing runs")
            if j.status == "declined":
                raise DeployError(f"provider {provider} declined job {job}; `gpum job close "
                                  f"{job}` refunds the whole deposit")  # fmt: skip
            if j.status not in ("open", "running"):
                raise DeployError(f"job {job} is {j.status} before its container ran; see `gpum "
                                  f"job status {job}`")  # fmt: skip
            if j.status == "open":
                progress.show(f"waiting for provider {provider} to accept job {job} ({waited} s)")
            else:
                try:
                    left = max(0.1, deadline - hooks.monotonic())
                    status = workload_status(endpoint, bytes(job), j.workload_hash, bytes(keypair),
                                             timeout=min(DELIVER_ATTEMPT_S, left))  # fmt: skip
                    last_error = ""
                except WorkerApiError as e:
                    status, last_error = {}, str(e)
                state = status.get("state")
                if state == "running" or (state == "exited" and status.get("exit_code") == 0):
                    return status
                if state == "exited":
                    raise DeployError(f"the container of job {job} exited with code "
                                      f"{status.get('exit_code')} before it was seen running; "
                                      f"read its output with `gpum job logs {job}`; `gpum job "
                                      f"stop {job}` stops paying")  # fmt: skip
                if state in ("failed", "stopped"):
                    raise DeployError(f"the provider's worker could not run the container of job "
                                      f"{job}: {status.get('error') or state}; failed windows "
                                      f"bill nothing, and the worker retries: `gpum job status "
                                      f"{job}` to follow it, `gpum job stop {job}` to stop")  # fmt: skip
                shown = state or "status unknown"
                progress.show(f"job {job} is running; container {shown} ({waited} s)")
            if hooks.monotonic() >= deadline:
                tail = f" (last answer from the worker: {last_error})" if last_error else ""
                if j.status == "open":
                    raise Abandoned(f"provider {provider} did not accept job {job} within "
                                    f"{hooks.flag('timeout')} {timeout:g} s{tail}")  # fmt: skip
                raise DeployError(f"job {job} is {j.status} but its container is not running "
                                  f"after {timeout:g} s{tail}; follow it with `gpum job status "
                                  f"{job}`, or stop paying with `gpum job stop {job}`")  # fmt: skip
            hooks.sleep(max(0.0, min(POLL_SECONDS, deadline - hooks.monotonic())))
    finally:
        progress.done()


def start(client: Any, keypair: Keypair, job: Pubkey, spec: Any, provider: Pubkey, endpoint: str,
          timeout: float, deadline: float, decimals: int, hooks: Hooks) -> dict[str, Any]:  # fmt: skip
    """Deliver ``spec`` for the job just created and wait until its container runs: the
    worker's status. When that fails while the job is Open (or on KeyboardInterrupt) the job
    is cancelled and the DeployError says so."""
    progress = hooks.progress
    try:
        progress.show(f"job {job} created; delivering the workload to {endpoint}")
        deliver(keypair, job, spec, endpoint, deadline, hooks)
        return wait_running(client, keypair, job, provider, endpoint, timeout, deadline, hooks)
    except Abandoned as e:
        progress.done()
        raise DeployError(f"{e}; {abandon(client, keypair, job, decimals)}") from None
    except KeyboardInterrupt:
        progress.done()
        raise DeployError(f"interrupted; {abandon(client, keypair, job, decimals)}") from None


# ----------------------------------------------------------------------------- stopping


def stop_job(client: Any, keypair: Keypair, job: Pubkey, *, limit: float | None = None,
             hooks: Hooks | None = None, say: Callable[[str], None] = lambda text: None,
             tick: Callable[[str], None] = lambda text: None) -> Any:  # fmt: skip
    """End ``job`` for its user: cancel it while Open (full refund), finish it while Running
    (billing stops), then wait until no settlement is possible (its grace over, by the chain's
    clock); the JobView then, ready to close. ``say`` gets one line per step, ``tick`` the
    waiting line. DeployError when it is not ``keypair``'s job, or at ``limit`` seconds
    (default: the grace plus ``STOP_MARGIN_SECONDS``)."""
    from .units import when

    hooks = hooks or Hooks()
    j = _job(client, job)
    if j.user != keypair.pubkey():
        raise DeployError(f"job {job} belongs to {j.user}, not to your keypair "
                          f"{keypair.pubkey()}: pass its user's --keypair")  # fmt: skip
    if j.status == "open":
        client.cancel_job(keypair, job)
        say(f"job {job} was not accepted yet: cancelled (full refund)")
    elif j.status == "running":
        client.finish_job(keypair, job)
        say(f"job {job} finished: billing stopped")
    begin = hooks.monotonic()
    while True:
        j = _job(client, job)
        now = client.chain_time()
        if j.settlement_over(now):
            return j
        grace_end = j.grace_ends_at
        if grace_end is None:  # open or running: the cancel or finish above did not take
            raise DeployError(f"job {job} is {j.status}: it cannot be closed yet; run `gpum job "
                              f"stop {job}` again")  # fmt: skip
        if limit is None:
            limit = j.terms.grace_seconds + STOP_MARGIN_SECONDS
        waited = hooks.monotonic() - begin
        if waited >= limit:
            raise DeployError(f"job {job} is finished (billing stopped) but its settlement grace "
                              f"ends at {when(grace_end, now)}: run `gpum job stop {job}` again "
                              "then to close it and get the refund")  # fmt: skip
        tick(f"waiting for the settlement grace to end at {when(grace_end, now)} "
             "(receipts up to the finish still settle)")  # fmt: skip
        hooks.sleep(max(0.1, min(STOP_POLL_SECONDS, limit - waited, grace_end - now + 1)))


@dataclass
class Closed:
    """A closed job: its receipt (:class:`gpu_market.job_history.Receipt`), the close's
    signature, its name in the local history, and warnings worth showing."""

    receipt: Any
    signature: Any
    closed_at: int
    name: str | None
    warnings: list[str]


def close_with_receipt(client: Any, keypair: Keypair, job: Pubkey, j: Any) -> Closed:
    """Close ``j`` (its settlement over) and keep its receipt in the local history."""
    from . import pda
    from .errors import AccountNotFound
    from .job_history import HistoryError, JobHistory, receipt_of

    warnings: list[str] = []
    try:
        escrow = client.token_balance(pda.escrow_pda(job, client.program_id))
    except AccountNotFound:
        escrow = 0
    sig = client.close_job(keypair, job)
    refunded_now = escrow
    try:  # the chain's own account of the refund, when the transaction's logs are readable
        for name, fields in client.events(sig):
            if name == "JobClosed":
                refunded_now = fields["refunded"] + fields["surplus_returned"]
    except Exception as e:  # noqa: BLE001 - the pre-close escrow balance is the refund too
        warnings.append(f"cannot read the close's events ({' '.join(str(e).split())}); the "
                        "refund shown is the escrow's balance before the close")  # fmt: skip
    receipt = receipt_of(j, refunded_now)
    closed_at = int(time.time())
    history = JobHistory()
    try:
        name = history.name_of(job, client.url)
        history.record_closed(j, url=client.url, receipt=receipt, closed_at=closed_at,
                              signature=str(sig))  # fmt: skip
    except HistoryError as e:
        name = None
        warnings.append(f"the receipt is not kept: {e}")
    return Closed(receipt, sig, closed_at, name, warnings)


def _job(client: Any, job: Pubkey) -> Any:
    j = client.fetch_job(job)
    if j is None:
        raise DeployError(f"job {job} does not exist (closed, or wrong url)")
    return j


# ----------------------------------------------------------------------------- the SDK's one call


def _url(url: str | None) -> str:
    value = url or _solana_config().get("json_rpc_url", "localnet")
    value = _MONIKERS.get(value, value)
    if not value.startswith(("http://", "https://")):
        raise DeployError(f"url {value!r} is not an http(s) URL or one of "
                          f"{', '.join(_MONIKERS)}")  # fmt: skip
    return value


def _keypair(keypair: Keypair | str | os.PathLike | None) -> Keypair:
    import json

    if isinstance(keypair, Keypair):
        return keypair
    p = Path(keypair or _solana_config().get("keypair_path", DEFAULT_KEYPAIR)).expanduser()
    try:
        raw = json.loads(p.read_text())
        if not (isinstance(raw, list) and len(raw) == 64 and all(isinstance(b, int) for b in raw)):
            raise ValueError
        return Keypair.from_bytes(bytes(raw))
    except FileNotFoundError:
        raise DeployError(f"keypair file {p} not found: create one with `solana-keygen new -o "
                          f"{p}` or pass keypair=PATH or a Keypair") from None  # fmt: skip
    except (OSError, ValueError):
        raise DeployError(f"keypair file {p} is not a readable Solana keypair (a JSON array of "
                          "64 bytes, as written by `solana-keygen new`)") from None  # fmt: skip


def _pubkey(value: Pubkey | str | None, what: str) -> Pubkey | None:
    if value is None or isinstance(value, Pubkey):
        return value
    try:
        return Pubkey.from_string(str(value).strip())
    except ValueError:
        raise DeployError(f"{what}={value!r} is not a base58 account address") from None


def build_spec(provider: Any, image: str, *, ports: Iterable[int | str] = (),
               cmd: str | Sequence[str] | None = None, args: Sequence[str] = (),
               env: Mapping[str, str] | None = None, secrets: Mapping[str, str] | None = None,
               shm_size_mib: int | None = None, scratch_mib: int | None = None,
               finish_on_exit: bool = False, checkpoint: Any = None) -> Any:  # fmt: skip
    """The WorkloadSpec for ``provider`` (secrets sealed to its worker key); DeployError for a
    bad workload. ``cmd``: the entrypoint, a list or a shell-like string split into words.
    ``checkpoint``: ``(CheckpointConfig, Credentials)`` of the user's store, sealed here to the
    worker key (:func:`gpu_market.checkpoint.seal_checkpoint`), or None."""
    from .workload import WorkloadSpec, WorkloadSpecError, parse_port_arg, seal_secrets, spec_hash

    env, secrets = dict(env or {}), dict(secrets or {})
    both = sorted(set(env) & set(secrets))
    if both:
        raise DeployError(f"{', '.join(both)} given both in env= and secrets=")
    command = tuple(shlex.split(cmd) if isinstance(cmd, str) else cmd or ())
    try:
        spec = WorkloadSpec(image=image, command=command, args=tuple(args),
                            env=tuple((str(k), str(v)) for k, v in env.items()),
                            secret_env=seal_secrets(bytes(provider.worker_key), secrets) if secrets else (),
                            ports=tuple(parse_port_arg(str(p)) for p in ports),
                            shm_size_mib=shm_size_mib, scratch_mib=scratch_mib,
                            finish_on_exit=finish_on_exit,
                            checkpoint=None if checkpoint is None else _seal_checkpoint(
                                checkpoint, provider))  # fmt: skip
        spec_hash(spec)  # validates
    except WorkloadSpecError as e:
        raise DeployError(f"bad workload: {e}; nothing was sent") from None
    return spec


def _seal_checkpoint(checkpoint: Any, provider: Any) -> Any:
    from .checkpoint import CheckpointError, seal_checkpoint

    config, creds = checkpoint
    try:
        return seal_checkpoint(config, creds, bytes(provider.worker_key))
    except CheckpointError as e:
        raise DeployError(f"checkpoints: {e}; nothing was sent") from None


def deploy(gpu: str, image: str, ports: Iterable[int | str] = (), hours: float | str = 1, *,
           cmd: str | Sequence[str] | None = None, args: Sequence[str] = (),
           env: Mapping[str, str] | None = None, secrets: Mapping[str, str] | None = None,
           url: str | None = None, keypair: Keypair | str | os.PathLike | None = None,
           market: Pubkey | str | None = None, max_price: str | float | None = None,
           provider: Pubkey | str | None = None, committee: Sequence[Pubkey | str] | None = None,
           quorum: int | None = None, name: str | None = None, timeout: float = 600,
           program_id: Pubkey | str | None = None, hooks: Hooks | None = None) -> Deployment:  # fmt: skip
    """Rent ``gpu`` ("MODEL:COUNT") for ``hours`` (a number or a duration such as "90m"), run
    ``image`` publishing ``ports`` (ints, or "53/udp"), and return once its container runs.

    ``url``: RPC URL or moniker (default: the Solana CLI config, else localnet); ``keypair``:
    a Keypair or a keypair file (default: the Solana CLI config's, else
    ``~/.config/solana/id.json``); ``market``: default ``$GPUM_MARKET``; ``max_price``: the
    highest price per GPU-hour accepted, in tokens; ``provider``: skip the choice of the best
    live offer; ``committee``/``quorum``: default up to 3 healthy validators, a majority;
    ``name``: a job name for the gpum CLI; ``timeout``: seconds the whole call may take.
    Raises DeployError (nothing left to pay for: an Open job is cancelled on failure)."""
    from .client import GpuMarketClient
    from .constants import PROGRAM_ID

    hooks = hooks or Hooks()
    try:
        model, gpus = parse_gpu(gpu)
        seconds = parse_hours(str(hours))
    except ValueError as e:
        raise DeployError(str(e)) from None
    if not (isinstance(timeout, int | float) and timeout >= 1):
        raise DeployError(f"timeout={timeout!r}: give at least 1 second")
    market_key = _pubkey(market or os.environ.get("GPUM_MARKET"), "market")
    if market_key is None:
        raise DeployError("no market: pass market=ADDRESS or set GPUM_MARKET (see `gpum market "
                          "status`)")  # fmt: skip
    kp = _keypair(keypair)
    client = GpuMarketClient(_url(url), payer=None,
                             program_id=_pubkey(program_id, "program_id") or PROGRAM_ID)  # fmt: skip
    try:
        return _deploy(client, kp, market_key, model, gpus, seconds, image, ports, cmd, args, env,
                       secrets, max_price, provider, committee, quorum, name, timeout, hooks)  # fmt: skip
    except BaseException:
        client.close()
        raise


def _deploy(client: Any, kp: Keypair, market_key: Pubkey, model: str, gpus: int,
            seconds: Fraction, image: str, ports: Iterable[int | str], cmd: Any,
            args: Sequence[str], env: Any, secrets: Any, max_price: Any, provider: Any,
            committee: Any, quorum: int | None, name: str | None, timeout: float,
            hooks: Hooks) -> Deployment:  # fmt: skip
    from .accounts import effective_params
    from .committee import default_quorum
    from .job_history import HistoryError, JobHistory
    from .units import AmountError, parse_ui_amount
    from .workload import spec_hash

    deadline = hooks.monotonic() + timeout
    work_deadline = deadline - min(CANCEL_RESERVE_S, timeout / 4)
    m = client.fetch_market(market_key)
    if m is None:
        raise DeployError(f"market {market_key} does not exist on {client.url}; check market= "
                          "and url=")  # fmt: skip
    decimals = client.mint_decimals(m.payment_mint)
    chain_now = client.chain_time()
    params = effective_params(m, chain_now)
    limit = hour_limit_text = None
    if max_price is not None:
        try:
            per_hour = parse_ui_amount(str(max_price), decimals, allow_zero=True)
        except AmountError as e:
            raise DeployError(f"max_price={max_price!r}: {e}") from None
        limit = per_hour // SECONDS_PER_HOUR
        hour_limit_text = format_ui_amount(per_hour, decimals)
    history = JobHistory()
    if name is not None:
        try:
            history.check_name_free(name, client.url,
                                    lambda keys: [j is not None for j in client.fetch_jobs(keys)])
        except HistoryError as e:
            raise DeployError(str(e)) from None
    plan = plan_offer(client, market_key, params, chain_now, model=model, gpus=gpus,
                      seconds=seconds, limit=limit, hour_limit_text=hour_limit_text,
                      decimals=decimals, provider=_pubkey(provider, "provider"),
                      left=work_deadline - hooks.monotonic(), hooks=hooks)  # fmt: skip
    spec = build_spec(plan.provider, image, ports=ports, cmd=cmd, args=args, env=env,
                      secrets=secrets)  # fmt: skip
    if committee is not None:
        members = [_pubkey(k, "committee") for k in committee]
    else:
        exclude = [k for k in (plan.offer.owner, plan.provider.worker_key) if k]
        members = client.default_committee(market_key, size=3, exclude=exclude)
    try:
        quorum = default_quorum(len(members), params.min_quorum) if quorum is None else quorum
    except ValueError as e:
        raise DeployError(f"no committee possible ({e}): pass committee=[AUTHORITY, ...] of "
                          "healthy validators (see `gpum validator status`)") from None  # fmt: skip
    account, balance = holding(client, kp.pubkey(), m.payment_mint)
    if balance < plan.deposit:
        raise DeployError(f"your payment account {account} holds "
                          f"{format_ui_amount(balance, decimals)}; the deposit needs "
                          f"{format_ui_amount(plan.deposit, decimals)}: fund it, or ask for "
                          "fewer hours")  # fmt: skip
    job_id = int(time.time() * 1000)
    workload_hash = spec_hash(spec)
    sig, address = create(client, kp, market_key, plan, job_id, gpus, members, quorum,
                          workload_hash, decimals, hooks.flag)  # fmt: skip
    try:
        history.record_created(address, url=client.url, market=market_key, user=kp.pubkey(),
                               job_id=job_id, created_at=int(time.time()), name=name)  # fmt: skip
    except HistoryError:
        pass  # the job exists; only its name is lost
    status = start(client, kp, address, spec, plan.offer.provider, plan.provider.endpoint,
                   timeout, work_deadline, decimals, hooks)  # fmt: skip
    return Deployment(client, kp, address, plan, status, sig, name, decimals)


class Deployment:
    """A job whose container runs: ``job`` (its address), ``endpoint`` / ``endpoints``
    (published ``host:port``), ``provider``, ``deposit`` (base units), ``signature`` (of the
    create); :meth:`status`, :meth:`logs`, :meth:`stop`, :meth:`cancel`."""

    def __init__(self, client: Any, keypair: Keypair, job: Pubkey, plan: Plan,
                 status: dict[str, Any], signature: Any, name: str | None, decimals: int) -> None:  # fmt: skip
        self.client, self.keypair, self.job, self.name = client, keypair, job, name
        self.provider: Pubkey = plan.offer.provider
        self.worker_endpoint: str = plan.provider.endpoint
        self.deposit: int = plan.deposit
        self.price_per_gpu_second: int = plan.price
        self.signature = signature
        self.decimals = decimals
        self.endpoints, self.ports = ports(status)
        self.state = status.get("state")

    def close(self) -> None:
        """Close the RPC connection (the job runs on; :meth:`stop` ends it)."""
        self.client.close()

    def __repr__(self) -> str:
        return f"Deployment(job={self.job}, endpoint={self.endpoint!r}, state={self.state!r})"

    @property
    def endpoint(self) -> str | None:
        """``host:port`` of the first published port (None when none is published)."""
        return self.endpoints[0] if self.endpoints else None

    def status(self) -> dict[str, Any]:
        """``{"job", "status"`` (on chain), ``"state"`` (the container's, None when the worker
        does not answer), ``"endpoints", "worker"`` (the worker's whole answer, or its error)}."""
        from .workload_api import WorkerApiError, workload_status

        j = _job(self.client, self.job)
        out: dict[str, Any] = {"job": str(self.job), "status": j.status, "state": None,
                               "endpoints": [], "worker": None}  # fmt: skip
        try:
            s = workload_status(self.worker_endpoint, bytes(self.job), j.workload_hash,
                                bytes(self.keypair), timeout=DELIVER_ATTEMPT_S)  # fmt: skip
        except WorkerApiError as e:
            out["worker"] = {"error": str(e)}
            return out
        out.update(state=s.get("state"), endpoints=ports(s)[0], worker=s)
        return out

    def logs(self, tail: int | None = None) -> str:
        """The container's output so far (its last ``tail`` lines; at most the last
        ``LOGS_MAX_BYTES``), decoded as UTF-8."""
        from .workload_api import WorkerApiError, stream_logs

        j = _job(self.client, self.job)
        buf = bytearray()
        try:
            for chunk in stream_logs(self.worker_endpoint, bytes(self.job), j.workload_hash,
                                     bytes(self.keypair), tail=tail, timeout=LOGS_TIMEOUT_S):  # fmt: skip
                buf += chunk
                del buf[:-LOGS_MAX_BYTES]
        except WorkerApiError as e:
            raise DeployError(f"cannot read the logs of job {self.job}: {e}") from None
        return buf.decode("utf-8", "replace")

    def stop(self, timeout: float | None = None) -> Any:
        """Finish the job (billing stops), wait out its settlement grace, close it: the
        :class:`~gpu_market.job_history.Receipt` (``paid + refunded == deposited``). An Open
        job is cancelled instead. ``timeout``: seconds to wait for the grace (default: the
        grace plus 2 minutes)."""
        j = stop_job(self.client, self.keypair, self.job, limit=timeout)
        return close_with_receipt(self.client, self.keypair, self.job, j).receipt

    def cancel(self) -> Any:
        """Cancel the job while it is still Open (a full refund); its signature. DeployError
        for a job already running: use :meth:`stop`."""
        j = _job(self.client, self.job)
        if j.status != "open":
            raise DeployError(f"job {self.job} is {j.status}: only an Open job can be cancelled; "
                              "use stop() to finish it, wait out the grace and get the refund")  # fmt: skip
        return self.client.cancel_job(self.keypair, self.job)
