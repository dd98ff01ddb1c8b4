"""When a managed job's attempt has failed (pure: no clock, no I/O; the controller observes,
this module judges).

The signals, all already in the system:

* the chain: the job Failed (expired, or slashed for downtime or equivocation), Cancelled or
  Declined; its provider Jailed;
* the committee: the newest window its validators accepted (``GET /v1/jobs/<job>/head`` on
  each member): a Running job whose newest accepted window ended ``missed_windows`` windows
  ago or more has failed. Silence is measured from ``max(newest accepted window_end, the
  chain's last settled window_end, started_at)``; a warning comes from the second missed
  window on. When no member answers, silence is not judged (the controller cannot tell a dead
  provider from its own lost network) and the user is warned;
* health: the newest proof's ``health_flags`` with a critical bit (critical temperature,
  uncorrected ECC errors, a lost GPU), or a window billing 0 seconds with any health flag:
  warned at once, a failure once it lasted ``health_grace_s`` (``health_since`` is kept by the
  controller, durably, so a restart does not reset the grace);
* the container: an exit code in ``recover_exit_codes`` (from the worker's workload status, or
  from the newest proof when the worker does not answer) is a failure.

A job that left Running without the controller deciding it ended *normally* (``done``) when
its escrow ran dry, its container exited with another code, or it was finished or closed
outside the controller (``gpum job stop`` by address, the provider's owner); it *failed*
when the exit code is a recover-on one, or the worker could not run the container. When the
worker's API does not answer but windows still arrive, the only outcome is a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..proof import (
    HEALTH_CRITICAL_MASK,
    HEALTH_ECC_UNCORRECTED,
    HEALTH_GPU_LOST,
    HEALTH_NVML_ERROR,
    HEALTH_POWER_OVER_LIMIT,
    HEALTH_SAMPLES_MISSING,
    HEALTH_TEMP_CRITICAL,
    HEALTH_TEMP_WARN,
    WORKLOAD_EXITED,
    WORKLOAD_FAILED,
)
from ..units import format_span, when
from .policy import RecoveryPolicy

__all__ = ["Head", "Observation", "Verdict", "assess", "health_problem"]

_FLAG_NAMES = ((HEALTH_TEMP_CRITICAL, "critical temperature"),
               (HEALTH_ECC_UNCORRECTED, "uncorrected ECC errors"),
               (HEALTH_GPU_LOST, "a GPU lost"), (HEALTH_TEMP_WARN, "high temperature"),
               (HEALTH_POWER_OVER_LIMIT, "power over its limit (throttling)"),
               (HEALTH_SAMPLES_MISSING, "samples missing"), (HEALTH_NVML_ERROR, "NVML errors"))  # fmt: skip


@dataclass(frozen=True)
class Head:
    """The newest proof one committee member holds for the job (decoded)."""

    validator: str
    seq: int
    window_end: int
    decision: str
    """The member's decision on it: ``accepted`` or ``rejected``."""
    health_flags: int = 0
    billable_seconds: int = 0
    workload_state: int = 0
    exit_code: int | None = None


@dataclass(frozen=True)
class Observation:
    """One look at an attempt. ``status`` None: the job account is gone (closed)."""

    now: int
    """Chain time."""
    status: str | None
    started_at: int = 0
    last_window_end: int = 0
    window_seconds: int = 60
    booked_escrow: int = 0
    rate_per_second: int = 0
    provider_status: str | None = "active"
    heads: tuple[Head, ...] = ()
    newest_accepted_end: int | None = None
    """The newest window_end any member accepted (from the heads, or its windows list)."""
    committee_answered: int = 0
    committee_errors: tuple[str, ...] = ()
    workload: Mapping[str, Any] | None = None
    """The worker's workload status (``state``, ``exit_code``, ``error``, ...); None when it
    did not answer (``workload_error`` says why)."""
    workload_error: str | None = None


@dataclass(frozen=True)
class Verdict:
    failure: str | None = None
    """Why the attempt failed (migrate), or None."""
    failure_kind: str = "provider"
    """``provider`` (the provider failed: it is not chosen again) or ``exit`` (the container
    exited with a recover-on code)."""
    done: str | None = None
    """Why the managed job ended normally, or None."""
    warnings: tuple[tuple[str, str], ...] = ()
    """``(kind, text)``: shown to the user once per kind while it lasts."""
    health_since: int | None = None
    """When the GPUs were first seen unhealthy in the current spell (None: healthy)."""


def health_problem(head: Head | None) -> str | None:
    """What is wrong with the GPUs by ``head``'s proof, None when nothing critical: a critical
    flag, or a window billing 0 seconds with any flag."""
    if head is None:
        return None
    flags = head.health_flags
    if flags & HEALTH_CRITICAL_MASK or (head.billable_seconds == 0 and flags):
        names = [name for bit, name in _FLAG_NAMES if flags & bit] or [f"flags {flags:#x}"]
        tail = " (window billed 0 s)" if head.billable_seconds == 0 else ""
        return ", ".join(names) + tail
    return None


def _exit_code(obs: Observation) -> tuple[int | None, str | None]:
    """The container's exit code and, when the runtime could not run it, the worker's error
    (``"failed"``), from the worker's status, else the newest proof."""
    w = obs.workload
    if w is not None:
        state = w.get("state")
        if state == "exited" and isinstance(w.get("exit_code"), int):
            return w["exit_code"], None
        if state == "failed":
            return None, str(w.get("error") or "the runtime could not start it")
        return None, None
    newest = max(obs.heads, key=lambda h: h.seq, default=None)
    if newest is not None and newest.workload_state == WORKLOAD_EXITED:
        return newest.exit_code, None
    if newest is not None and newest.workload_state == WORKLOAD_FAILED:
        return None, "the runtime could not start it"
    return None, None


def assess(obs: Observation, policy: RecoveryPolicy, *, health_since: int | None,
           finish_on_exit: bool = False) -> Verdict:  # fmt: skip
    """The verdict on a running attempt (see the module docstring)."""
    code, run_error = _exit_code(obs)
    if obs.status is None:
        return Verdict(done="its job was closed outside the controller")
    if obs.status == "failed":
        return Verdict(failure="its job failed on chain: expired or slashed, its provider "
                               "stopped proving")  # fmt: skip
    if obs.status in ("cancelled", "declined"):
        return Verdict(failure=f"its job was {obs.status} on chain")
    if obs.status in ("finishing", "completed"):
        if code is not None and code in policy.recover_exit_codes:
            return Verdict(failure=f"the container exited with code {code}, a recover-on code",
                           failure_kind="exit")
        if run_error is not None:
            return Verdict(failure=f"the provider's worker could not run the container "
                                   f"({run_error}) and ended the job")  # fmt: skip
        if obs.status == "completed" and obs.booked_escrow < max(1, obs.rate_per_second):
            return Verdict(done="the escrow ran dry: the hours prepaid are used up")
        if code is not None:
            return Verdict(done=f"the container exited with code {code}")
        return Verdict(done=f"its job was {'finished' if obs.status == 'finishing' else 'completed'} "
                            "outside the controller (by you or the provider)")  # fmt: skip
    if obs.provider_status == "jailed":
        return Verdict(failure="its provider was jailed on chain")
    if code is not None and code in policy.recover_exit_codes:
        return Verdict(failure=f"the container exited with code {code}, a recover-on code",
                       failure_kind="exit")
    warnings: list[tuple[str, str]] = []
    # Silence: judged only from what the committee answered.
    window = max(1, obs.window_seconds)
    arriving = False
    if obs.committee_answered == 0:
        why = "; ".join(obs.committee_errors[:3]) or "no member to ask"
        warnings.append(("committee", (f"no committee validator answers ({why}): cannot tell "
                                      "whether the provider still proves windows")))  # fmt: skip
    else:
        last = max(obs.newest_accepted_end or 0, obs.last_window_end, obs.started_at)
        behind = max(0, obs.now - last)
        missed = behind // window
        if missed >= policy.missed_windows:
            return Verdict(failure=f"no window accepted by its committee for {missed} windows "
                                   f"({format_span(behind)}; the last ended "
                                   f"{when(last, obs.now)})")  # fmt: skip
        arriving = missed < 2
        if not arriving:
            warnings.append(("silence", (f"no window accepted for {format_span(behind)} "
                                        f"({missed} windows); migrating at "
                                        f"{policy.missed_windows} unless one arrives")))  # fmt: skip
    # Health: warned at once, a failure after the grace.
    newest = max(obs.heads, key=lambda h: h.seq, default=None)
    problem = health_problem(newest)
    since = None
    if problem is not None:
        since = health_since if health_since is not None else obs.now
        deadline = since + policy.health_grace_s
        if obs.now >= deadline:
            return Verdict(failure=f"its GPUs reported {problem} since {when(since, obs.now)}, "
                                   f"past the grace of {format_span(policy.health_grace_s)}",
                           health_since=since)  # fmt: skip
        warnings.append(("health", (f"its GPUs report {problem} (since {when(since, obs.now)}): "
                                   f"migrating at {when(deadline, obs.now)} unless they "
                                   "recover")))  # fmt: skip
    if obs.workload is None and obs.workload_error and arriving:
        warnings.append(("worker_api", (f"the provider's worker API does not answer "
                                       f"({obs.workload_error}); windows still arrive, so "
                                       "nothing is done")))  # fmt: skip
    if code is not None and not finish_on_exit:
        warnings.append(("exited", (f"the container exited with code {code} (not a recover-on "
                                   "code); the job keeps its GPUs and bills until you stop it")))  # fmt: skip
    return Verdict(warnings=tuple(warnings), health_since=since)
