"""When an attempt has failed (gpu_market.managed.detect, pure): each signal, its warning
first where there is one, and what is never a failure."""

from __future__ import annotations

from fractions import Fraction

from gpu_market.managed.detect import Head, Observation, assess
from gpu_market.managed.policy import RecoveryPolicy
from gpu_market.proof import (
    HEALTH_ECC_UNCORRECTED,
    HEALTH_POWER_OVER_LIMIT,
    HEALTH_TEMP_CRITICAL,
    WORKLOAD_EXITED,
    WORKLOAD_RUNNING,
)

NOW = 1_800_000_000
POLICY = RecoveryPolicy(gpu_model="H100", gpus=1, hours_seconds=Fraction(3600), budget=10**6,
                        recover_exit_codes=frozenset({137}), missed_windows=3,
                        health_grace_s=600)  # fmt: skip


def obs(**kw) -> Observation:
    head = Head("V", 10, NOW - 60, "accepted", 0, 60, WORKLOAD_RUNNING, None)
    base = dict(  # noqa: C408 - the fields by name, as the constructor takes them
        now=NOW, status="running", started_at=NOW - 3600, last_window_end=NOW - 300,
                window_seconds=60, booked_escrow=10**6, rate_per_second=10,
                heads=(head,), newest_accepted_end=NOW - 60, committee_answered=1,
                workload={"state": "running"})  # fmt: skip
    return Observation(**{**base, **kw})


def test_a_healthy_running_job_is_left_alone() -> None:
    v = assess(obs(), POLICY, health_since=None)
    assert v.failure is None and v.done is None and v.warnings == () and v.health_since is None


def test_silence_warns_from_the_second_window_and_fails_at_the_policy_s() -> None:
    two = assess(obs(newest_accepted_end=NOW - 120), POLICY, health_since=None)
    assert two.failure is None and [k for k, _ in two.warnings] == ["silence"]
    three = assess(obs(newest_accepted_end=NOW - 180), POLICY, health_since=None)
    assert "no window accepted by its committee for 3 windows" in three.failure
    assert three.failure_kind == "provider"
    # The chain's settled window counts too: a lagging validator is not a silent provider.
    assert assess(obs(newest_accepted_end=NOW - 900, last_window_end=NOW - 60), POLICY,
                  health_since=None).failure is None  # fmt: skip


def test_no_committee_answer_is_a_warning_never_a_failure() -> None:
    v = assess(obs(heads=(), newest_accepted_end=None, committee_answered=0,
                   committee_errors=("V: refused",)), POLICY, health_since=None)  # fmt: skip
    assert v.failure is None and v.warnings[0][0] == "committee" and "V: refused" in v.warnings[0][1]


def test_a_worker_api_that_does_not_answer_while_windows_arrive_only_warns() -> None:
    v = assess(obs(workload=None, workload_error="connection refused"), POLICY, health_since=None)
    assert v.failure is None and [k for k, _ in v.warnings] == ["worker_api"]


def test_chain_signals() -> None:
    assert "failed on chain" in assess(obs(status="failed"), POLICY, health_since=None).failure
    assert "jailed" in assess(obs(provider_status="jailed"), POLICY, health_since=None).failure
    assert assess(obs(status=None), POLICY, health_since=None).done is not None
    ran_dry = assess(obs(status="completed", booked_escrow=5), POLICY, health_since=None)
    assert ran_dry.failure is None and "escrow ran dry" in ran_dry.done


def test_exit_codes_from_the_worker_or_the_newest_proof() -> None:
    v = assess(obs(workload={"state": "exited", "exit_code": 137}), POLICY, health_since=None)
    assert "exited with code 137" in v.failure and v.failure_kind == "exit"
    head = Head("V", 11, NOW - 60, "accepted", 0, 60, WORKLOAD_EXITED, 137)
    v = assess(obs(status="finishing", workload=None, workload_error="down", heads=(head,)),
               POLICY, health_since=None)  # fmt: skip
    assert "exited with code 137" in v.failure
    other = assess(obs(status="finishing", workload={"state": "exited", "exit_code": 1}), POLICY,
                   health_since=None)  # fmt: skip
    assert other.failure is None and other.done == "the container exited with code 1"
    failed = assess(obs(status="finishing", workload={"state": "failed", "error": "no image"}),
                    POLICY, health_since=None)  # fmt: skip
    assert "could not run the container (no image)" in failed.failure


def test_unhealthy_gpus_warn_at_once_and_fail_after_the_grace() -> None:
    hot = Head("V", 12, NOW - 60, "accepted", HEALTH_TEMP_CRITICAL | HEALTH_ECC_UNCORRECTED, 60,
               WORKLOAD_RUNNING, None)  # fmt: skip
    first = assess(obs(heads=(hot,)), POLICY, health_since=None)
    assert first.failure is None and first.health_since == NOW
    assert "critical temperature, uncorrected ECC errors" in first.warnings[0][1]
    later = assess(obs(heads=(hot,)), POLICY, health_since=NOW - 599)
    assert later.failure is None and later.health_since == NOW - 599
    past = assess(obs(heads=(hot,)), POLICY, health_since=NOW - 600)
    assert "past the grace of 10 min" in past.failure
    # Throttling alone is not critical while the window still bills; billing 0 s for it is.
    throttled = Head("V", 12, NOW - 60, "accepted", HEALTH_POWER_OVER_LIMIT, 60, WORKLOAD_RUNNING, None)
    assert assess(obs(heads=(throttled,)), POLICY, health_since=None).health_since is None
    unpaid = Head("V", 12, NOW - 60, "accepted", HEALTH_POWER_OVER_LIMIT, 0, WORKLOAD_RUNNING, None)
    assert assess(obs(heads=(unpaid,)), POLICY, health_since=None).health_since == NOW
