"""How long a job's escrow lasts, and the policy that tops it up before it runs dry.

Pure except :meth:`AutoTopUp.tick` (reads the chain, sends ``top_up``, writes its state file)
and :func:`fetch_windows` (HTTP to a validator node).

Money and time, all in integers (payment-mint base units, seconds, the chain's clock):

* ``rate``: ``terms.rate_per_second`` of the job, for all its GPUs (fixed at ``create_job``).
* ``booked_escrow``: what the job's books say is left in escrow (``JobView.booked_escrow``).
* ``unsettled_seconds``: of a Running job, ``now - last_window_end`` (never negative): time
  the provider has worked that no settlement has paid yet; it will be paid from the escrow.
* ``available = max(0, booked_escrow - unsettled_seconds * rate)``: what is left to spend.
* ``runway_seconds = available // rate`` (rounded down) while Running with a non-zero rate;
  None otherwise (an Open job spends nothing yet, an ended one never will, a free one never
  runs dry). The chain completes a job once a settlement leaves less than ``rate`` in escrow,
  so a runway of 0 means the next settlement ends the job.

The auto top-up policy (:func:`decide`) never lets the total topped up on a job exceed the
budget, whatever sequence of runways it sees; once the runway falls below ``below_seconds`` it
tops up to ``target_seconds`` (default twice ``below_seconds``), or as far as the budget
allows, and says so. :class:`AutoTopUp` applies it to many jobs, counting every top-up that
may have landed against the budget before it is sent (in memory and, with ``state_path``, in a
file), so neither a failure nor a restart makes it spend more than the budget.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from solders.pubkey import Pubkey

from . import units

if TYPE_CHECKING:  # the views pull in the codec (anchorpy): loaded only where used
    from solders.keypair import Keypair

    from .accounts import JobView

__all__ = [
    "MAX_WINDOWS",
    "AutoTopUp",
    "AutoTopUpPolicy",
    "Runway",
    "TopUpDecision",
    "TopUpEvent",
    "WindowsApiError",
    "decide",
    "fetch_windows",
    "format_duration",
    "low_runway_warning",
    "parse_duration",
    "runway_of",
]

SECONDS_PER_HOUR = 3600
MAX_WINDOWS = 500
"""The most windows a validator node returns per request (``?limit=``)."""
STATE_VERSION = 1


# ----------------------------------------------------------------------------- runway


@dataclass(frozen=True)
class Runway:
    """A job's spend and what is left of its escrow at one instant (see the module docstring
    for each quantity). Amounts in payment-mint base units, times in seconds."""

    job: Pubkey
    status: str
    gpu_count: int
    rate_per_second: int
    """Base units per second for the whole job (``terms.rate_per_second``)."""
    spend_per_hour: int
    """``rate_per_second * 3600``."""
    booked_escrow: int
    unsettled_seconds: int
    """Running: ``now - last_window_end`` (>= 0); 0 for any other status."""
    available: int
    """``booked_escrow - unsettled_seconds * rate_per_second``, at least 0."""
    runway_seconds: int | None
    """``available // rate_per_second`` while Running with a non-zero rate, else None."""
    settled_seconds: int
    """Seconds paid so far (``paid_seconds``)."""
    running_seconds: int
    """Running: ``now - started_at``; ended: ``ended_at - started_at``; never started: 0."""


def runway_of(job: JobView, now: int) -> Runway:
    """The runway of ``job`` at unix time ``now`` (use the chain's clock: settlements are
    measured by it). Pure; never negative anywhere."""
    rate = job.terms.rate_per_second
    booked = job.booked_escrow
    running = job.status == "running"
    unsettled = max(0, now - job.last_window_end) if running else 0
    available = max(0, booked - unsettled * rate)
    if job.started_at == 0:
        ran = 0
    elif running:
        ran = max(0, now - job.started_at)
    else:
        ran = max(0, job.ended_at - job.started_at)
    address = job.address if job.address is not None else Pubkey.default()
    return Runway(
        job=address,
        status=job.status,
        gpu_count=job.gpu_count,
        rate_per_second=rate,
        spend_per_hour=rate * SECONDS_PER_HOUR,
        booked_escrow=booked,
        unsettled_seconds=unsettled,
        available=available,
        runway_seconds=available // rate if running and rate > 0 else None,
        settled_seconds=job.paid_seconds,
        running_seconds=ran,
    )


# ----------------------------------------------------------------------------- durations

_UNITS = units.DURATION_UNITS


def parse_duration(text: str) -> int:
    """``"90s"``, ``"15m"``, ``"2h"``, ``"1d"``, ``"1h30m"`` -> seconds: the grammar of
    :func:`gpu_market.units.parse_duration` without a bare number (ValueError, one line saying
    what to write, for anything else)."""
    return int(units.parse_duration(text))


def format_duration(seconds: int) -> str:
    """Seconds as :func:`parse_duration` reads them back: ``5430`` -> ``"1h30m30s"``,
    ``0`` -> ``"0s"``. ValueError for a negative number."""
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative, got {seconds}")
    if seconds == 0:
        return "0s"
    out, left = [], int(seconds)
    for unit, size in _UNITS.items():
        n, left = divmod(left, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


# ----------------------------------------------------------------------------- policy


@dataclass(frozen=True)
class AutoTopUpPolicy:
    """When and how much to top up one job. ``below_seconds``: top up when the runway is
    below it (> 0); ``budget``: base units the policy may ever spend on one job, all top-ups
    together; ``target_seconds``: the runway a top-up buys (default ``2 * below_seconds``, at
    least ``below_seconds``); ``warn_below_seconds``: warn while the runway, after any top-up,
    is below it. ValueError on construction for values outside these bounds."""

    below_seconds: int
    budget: int
    target_seconds: int | None = None
    warn_below_seconds: int | None = None

    def __post_init__(self) -> None:
        if self.below_seconds <= 0:
            raise ValueError(f"below_seconds must be positive, got {self.below_seconds}")
        if self.budget < 0:
            raise ValueError(f"budget must not be negative, got {self.budget}")
        if self.target_seconds is not None and self.target_seconds < self.below_seconds:
            raise ValueError(f"target_seconds ({self.target_seconds}) must be at least "
                             f"below_seconds ({self.below_seconds})")  # fmt: skip
        if self.warn_below_seconds is not None and self.warn_below_seconds < 0:
            raise ValueError(f"warn_below_seconds must not be negative, got "
                             f"{self.warn_below_seconds}")  # fmt: skip

    @property
    def target(self) -> int:
        """The runway a top-up aims for: ``target_seconds`` or ``2 * below_seconds``."""
        return self.target_seconds if self.target_seconds is not None else 2 * self.below_seconds


@dataclass(frozen=True)
class TopUpDecision:
    """``amount``: base units to top up now (0: none); ``warn``: one line for the user, or
    None; ``reason``: why, in words."""

    amount: int
    warn: str | None
    reason: str


def low_runway_warning(runway: Runway, warn_below_seconds: int | None) -> str | None:
    """One line when ``runway`` is Running with fewer than ``warn_below_seconds`` seconds left;
    None otherwise (or when no threshold is given)."""
    left = runway.runway_seconds
    if warn_below_seconds is None or left is None or left >= warn_below_seconds:
        return None
    return (f"job {runway.job} has {format_duration(left)} of runway left, below "
            f"{format_duration(warn_below_seconds)}: top it up or it runs dry")


def decide(policy: AutoTopUpPolicy, runway: Runway, spent_so_far: int) -> TopUpDecision:
    """What ``policy`` does for ``runway`` after ``spent_so_far`` base units already went to
    this job. Guarantees: ``amount`` is 0 unless the job is Running with a non-zero rate and
    its runway is below ``below_seconds``; ``spent_so_far + amount <= budget`` always; when
    the budget allows, ``amount`` is the least that brings the runway to at least the target
    (``(available + amount) // rate >= target``). ``warn`` is set when the budget cannot
    reach the target while the runway is short, and when the runway after this top-up is
    below ``warn_below_seconds``."""
    left_in_budget = max(0, policy.budget - max(0, spent_so_far))
    seconds = runway.runway_seconds
    if seconds is None:
        why = "its rate is 0" if runway.status == "running" else f"it is {runway.status}"
        return TopUpDecision(0, None, f"no top-up: {why}, so it spends nothing from escrow")
    if seconds >= policy.below_seconds:
        return TopUpDecision(0, low_runway_warning(runway, policy.warn_below_seconds),
                             f"no top-up: runway {format_duration(seconds)} is not below "
                             f"{format_duration(policy.below_seconds)}")  # fmt: skip
    rate = runway.rate_per_second
    need = policy.target * rate - runway.available  # > 0: available < below * rate <= target * rate
    amount = min(need, left_in_budget)
    after = (runway.available + amount) // rate
    warn = None
    if amount < need:
        spent = max(0, spent_so_far) + amount
        warn = (f"the auto top-up budget of job {runway.job} is used up ({spent} of "
                f"{policy.budget} base units spent): its runway is {format_duration(after)} and "
                "it runs dry unless you top it up")  # fmt: skip
    elif policy.warn_below_seconds is not None and after < policy.warn_below_seconds:
        warn = (f"job {runway.job} has {format_duration(after)} of runway after this top-up, "
                f"below {format_duration(policy.warn_below_seconds)}")  # fmt: skip
    if amount == 0:
        return TopUpDecision(0, warn, f"no top-up: runway {format_duration(seconds)} is below "
                             f"{format_duration(policy.below_seconds)} but the budget is spent")  # fmt: skip
    how = "to" if amount == need else "towards"
    return TopUpDecision(amount, warn, f"top up {amount}: runway {format_duration(seconds)} is "
                         f"below {format_duration(policy.below_seconds)}; {how} "
                         f"{format_duration(policy.target)}")  # fmt: skip


# ----------------------------------------------------------------------------- auto top-up


@dataclass(frozen=True)
class TopUpEvent:
    """What :meth:`AutoTopUp.tick` did for one job. ``runway``/``decision``: None when the job
    could not be read; ``amount``: base units topped up in this tick (0 when none, or when the
    top-up failed); ``signature``: of the top-up transaction; ``spent``: the total counted
    against the budget for this job after this tick; ``error``: one line, or None."""

    job: Pubkey
    runway: Runway | None
    decision: TopUpDecision | None
    amount: int
    signature: str | None
    spent: int
    error: str | None = None


class AutoTopUp:
    """Keeps jobs of ``user`` from running dry under ``policy``, for programs that manage
    many jobs: call :meth:`tick` periodically with the jobs to look after.

    ``client``: a :class:`~gpu_market.client.GpuMarketClient` (``fetch_job``, ``chain_time``,
    ``top_up``); ``clock``: unix time now (default: the chain's clock, which settlements are
    measured by); ``on_event``: called with every :class:`TopUpEvent` as it happens;
    ``state_path``: a JSON file with what was spent per job, read at start and rewritten
    (atomically) before every top-up is sent, so a restart never spends a job's budget again.

    Guarantee: for each job, the top-ups sent by this object (and by earlier ones with the
    same ``state_path``) never add up to more than ``policy.budget``. A top-up is counted
    before it is sent and un-counted only when the chain refused it (nothing moved); one whose
    fate is unknown (RPC unreachable, not confirmed in time) stays counted. Not thread-safe,
    and one state file serves one process at a time.
    """

    def __init__(self, client: Any, user: Keypair, policy: AutoTopUpPolicy, *,
                 clock: Callable[[], int] | None = None,
                 on_event: Callable[[TopUpEvent], None] | None = None,
                 state_path: str | os.PathLike[str] | None = None) -> None:  # fmt: skip
        self.client = client
        self.user = user
        self.policy = policy
        self.clock = clock or client.chain_time
        self.on_event = on_event
        self.state_path = None if state_path is None else Path(state_path)
        self._spent: dict[str, int] = self._load()

    def spent(self, job: Pubkey) -> int:
        """Base units counted against the budget for ``job`` so far."""
        return self._spent.get(str(job), 0)

    def _load(self) -> dict[str, int]:
        if self.state_path is None:
            return {}
        try:
            text = self.state_path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise ValueError(f"cannot read the auto top-up state {self.state_path}: "
                             f"{e.strerror}") from None  # fmt: skip
        try:
            data = json.loads(text)
            spent = data["spent"]
            if data.get("version") != STATE_VERSION or not isinstance(spent, dict):
                raise ValueError
            out = {str(Pubkey.from_string(k)): int(v) for k, v in spent.items()}
            if any(v < 0 for v in out.values()):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"the auto top-up state {self.state_path} is damaged; it records "
                             "what was spent per job, so fix or remove it knowingly (removing "
                             "it lets the budget be spent again)") from None  # fmt: skip
        return out

    def _save(self) -> None:
        if self.state_path is None:
            return
        path = self.state_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        body = json.dumps({"version": STATE_VERSION, "spent": self._spent}, sort_keys=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _record(self, job: Pubkey, spent: int) -> None:
        self._spent[str(job)] = spent
        self._save()

    def _emit(self, event: TopUpEvent) -> TopUpEvent:
        if self.on_event is not None:
            self.on_event(event)
        return event

    def tick(self, jobs: Sequence[Pubkey]) -> list[TopUpEvent]:
        """Read each job (in order), top up those :func:`decide` says need it, and return one
        event per job. A job that does not exist, belongs to another user, or whose top-up
        fails gets an event with ``error`` and does not stop the others. RpcUnavailable from
        reading the clock propagates (nothing was done)."""
        from .errors import (
            AccountNotFound,
            ChainError,
            ConfirmationTimeout,
            SdkError,
            TransactionTooLarge,
        )

        now = int(self.clock())
        out = []
        for job in jobs:
            spent = self.spent(job)
            try:
                view = self.client.fetch_job(job)
            except SdkError as e:
                out.append(self._emit(TopUpEvent(job, None, None, 0, None, spent,
                                                 f"cannot read job {job}: {e}")))  # fmt: skip
                continue
            if view is None:
                out.append(self._emit(TopUpEvent(job, None, None, 0, None, spent,
                                                 f"job {job} does not exist (closed?)")))  # fmt: skip
                continue
            runway = runway_of(view, now)
            decision = decide(self.policy, runway, spent)
            if decision.amount == 0:
                out.append(self._emit(TopUpEvent(job, runway, decision, 0, None, spent)))
                continue
            if view.user != self.user.pubkey():
                out.append(self._emit(TopUpEvent(
                    job, runway, decision, 0, None, spent,
                    f"job {job} belongs to {view.user}; only its user can top it up")))
                continue
            self._record(job, spent + decision.amount)  # counted before it is sent
            try:
                sig = self.client.top_up(self.user, job, decision.amount)
            except ConfirmationTimeout as e:
                error = (f"top-up of {decision.amount} to job {job} may have landed ({e}); it "
                         "stays counted against the budget")  # fmt: skip
                out.append(self._emit(TopUpEvent(job, runway, decision, 0, None,
                                                 spent + decision.amount, error)))  # fmt: skip
                continue
            except (ChainError, AccountNotFound, TransactionTooLarge) as e:  # nothing moved
                self._record(job, spent)
                out.append(self._emit(TopUpEvent(job, runway, decision, 0, None, spent,
                                                 f"top-up of job {job} refused: {e}")))  # fmt: skip
                continue
            except SdkError as e:
                error = (f"top-up of {decision.amount} to job {job} may have been sent ({e}); "
                         "it stays counted against the budget")  # fmt: skip
                out.append(self._emit(TopUpEvent(job, runway, decision, 0, None,
                                                 spent + decision.amount, error)))  # fmt: skip
                continue
            out.append(self._emit(TopUpEvent(job, runway, decision, decision.amount, str(sig),
                                             spent + decision.amount)))  # fmt: skip
        return out


# ----------------------------------------------------------------------------- windows


class WindowsApiError(Exception):
    """A validator node did not return a job's windows. ``status``: the HTTP status, or None
    when no answer came; ``endpoint``: the node asked."""

    def __init__(self, message: str, *, status: int | None = None, endpoint: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.endpoint = endpoint


def fetch_windows(endpoint: str, job: Pubkey, limit: int = 10, *, timeout: float = 5.0,
                  transport: httpx.BaseTransport | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The newest ``limit`` (1..500) windows of ``job`` a validator node at ``endpoint`` holds,
    oldest first, as it serves them (``GET /v1/jobs/<job>/windows?limit=N``: ``seq``,
    ``window_start``, ``window_end``, ``billable_seconds``, ``approved_seconds``,
    ``decision``, ``workload_state``, ``gpus``). One attempt; WindowsApiError naming the node
    and its answer otherwise (404: the node holds no window of the job)."""
    if not 1 <= limit <= MAX_WINDOWS:
        raise ValueError(f"limit must be 1..{MAX_WINDOWS}, got {limit}")
    base = str(endpoint).strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise WindowsApiError(f"validator endpoint {endpoint!r} is not an http(s) URL",
                              endpoint=base)  # fmt: skip
    url = f"{base}/v1/jobs/{job}/windows"
    try:
        with httpx.Client(timeout=timeout, transport=transport) as http:
            r = http.get(url, params={"limit": str(limit)})
    except httpx.TransportError as e:
        why = "timed out" if isinstance(e, httpx.TimeoutException) else (str(e) or type(e).__name__)
        raise WindowsApiError(f"cannot reach validator {base}: {why}", endpoint=base) from None
    try:
        body = r.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    if not r.is_success:
        detail = ""
        if isinstance(body, Mapping):
            detail = ": " + " ".join(str(body.get(k)) for k in ("error", "message") if body.get(k))
        raise WindowsApiError(f"validator {base} answered HTTP {r.status_code}{detail}",
                              status=r.status_code, endpoint=base)  # fmt: skip
    if not isinstance(body, Mapping) or not isinstance(body.get("windows"), list):
        raise WindowsApiError(f"validator {base} answered without a windows list",
                              status=r.status_code, endpoint=base)  # fmt: skip
    return [w for w in body["windows"] if isinstance(w, dict)]
