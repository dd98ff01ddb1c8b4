"""Every verification rule: one passing and one failing case, asserting the reason code."""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest
from gpu_market.proof import (
    HEALTH_ECC_UNCORRECTED,
    WORKLOAD_EXITED,
    WORKLOAD_FAILED,
    WORKLOAD_PENDING,
    WORKLOAD_RUNNING,
    ZERO_HASH,
    WorkloadWindow,
    encode_proof,
    proof_hash,
)
from gpum_validator import verify as verify_mod
from gpum_validator.config import HealthThresholds
from gpum_validator.errors import Rejection
from gpum_validator.schema import parse_signed_proof
from gpum_validator.verify import (
    JobRules,
    JobState,
    PrevProof,
    authenticate,
    check_committee,
    check_window,
    check_worker_key,
    health_bound,
    job_rules,
    status_of,
    worker_key_status,
)
from vtestkit import (
    OTHER_KEY,
    OTHER_PUB,
    T0,
    UUIDS,
    WINDOW,
    WORKER_PUB,
    cfg,
    chain_of,
    gpu,
    job_terms,
    job_view,
    make_proof,
    pk,
    provider_view,
    retired,
    signed_json,
)

NOW = T0 + 3600
FRESH = JobState(last_seq=0, cumulative_seconds=0, last_window_end=T0)


def auth_of(p, **kw):
    return authenticate(parse_signed_proof(signed_json(p, **kw)), cfg())


def reason(fn, *a, **kw) -> str:
    with pytest.raises(Rejection) as ei:
        fn(*a, **kw)
    return ei.value.reason


# ------------------------------------------------------------------ authenticate


def test_authenticate_accepts_a_well_signed_proof():
    p = make_proof()
    a = auth_of(p)
    assert a.proof == p and a.hash == proof_hash(encode_proof(p))


def test_proof_malformed():
    d = signed_json(make_proof())
    d["proof"] = base64.b64encode(base64.b64decode(d["proof"]) + b"\0").decode()
    assert reason(authenticate, parse_signed_proof(d), cfg()) == "proof_malformed"


def test_proof_not_canonical(monkeypatch):
    monkeypatch.setattr(verify_mod, "encode_proof", lambda p: b"other")
    assert reason(auth_of, make_proof()) == "proof_not_canonical"


def test_worker_key_mismatch():
    assert reason(auth_of, make_proof(), worker_key=OTHER_PUB) == "worker_key_mismatch"


def test_wrong_program():
    p = make_proof(program_id=bytes([2] * 32))
    assert reason(auth_of, p) == "wrong_program"


def test_wrong_market_in_proof():
    p = make_proof(market=bytes([8] * 32))
    assert reason(auth_of, p) == "wrong_market"


def test_the_proof_signature_is_not_relied_on_the_receipt_signature_authenticates():
    """One signature per proof: the receipt commits to sha256 of the proof bytes,
    so a proof is authenticated by its receipt signature alone; a garbage proof_signature
    changes nothing, and changed proof bytes under a valid receipt signature fail."""
    p = make_proof()
    d = signed_json(p)
    d["proof_signature"] = signed_json(make_proof(), OTHER_KEY)["proof_signature"]
    assert authenticate(parse_signed_proof(d), cfg()).proof == p
    other = signed_json(make_proof(billable=59, cumulative=59))
    other["receipt_signature"] = d["receipt_signature"]
    assert reason(authenticate, parse_signed_proof(other), cfg()) == "bad_receipt_signature"


def test_bad_receipt_signature():
    assert reason(auth_of, make_proof(), receipt_key=OTHER_KEY) == "bad_receipt_signature"


def test_receipt_signature_must_cover_this_proof_hash():
    p1, p2 = make_proof(), make_proof(billable=59, cumulative=59)
    d1, d2 = signed_json(p1), signed_json(p2)
    d1["receipt_signature"] = d2["receipt_signature"]
    assert reason(authenticate, parse_signed_proof(d1), cfg()) == "bad_receipt_signature"


# ------------------------------------------------------------------ worker key


def test_current_key_ok():
    check_worker_key(auth_of(make_proof()), provider_view(), cfg())


def test_provider_not_found():
    assert reason(check_worker_key, auth_of(make_proof()), None, cfg()) == "provider_not_found"


def test_provider_of_other_market():
    pv = provider_view(market=pk(bytes([8] * 32)))
    assert reason(check_worker_key, auth_of(make_proof()), pv, cfg()) == "wrong_market"


def test_unknown_worker_key():
    pv = provider_view(worker_key=pk(OTHER_PUB))
    assert reason(check_worker_key, auth_of(make_proof()), pv, cfg()) == "unknown_worker_key"


def test_current_key_expired_before_window_end():
    p = make_proof()
    ok = provider_view(worker_key_expires_at=p.window_end)
    check_worker_key(auth_of(p), ok, cfg())
    bad = provider_view(worker_key_expires_at=p.window_end - 1)
    assert reason(check_worker_key, auth_of(p), bad, cfg()) == "worker_key_expired"


def test_retired_key_only_for_windows_ended_by_its_retirement():
    p = make_proof()
    for slot in range(4):  # any of the four slots
        keys = [(bytes([60 + i] * 32), 2**40) for i in range(slot)] + [(WORKER_PUB, p.window_end)]
        ok = provider_view(worker_key=pk(OTHER_PUB), retired_keys=retired(*keys))
        check_worker_key(auth_of(p), ok, cfg())
    late = provider_view(worker_key=pk(OTHER_PUB),
                         retired_keys=retired((WORKER_PUB, p.window_end - 1)))
    assert reason(check_worker_key, auth_of(p), late, cfg()) == "worker_key_expired"


def test_empty_retired_slot_never_matches():
    pv = provider_view(worker_key=pk(OTHER_PUB), retired_keys=retired((bytes(32), 2**62)))
    assert worker_key_status(pv, bytes(32), T0) == "unknown"


def test_expired_current_key_still_valid_through_a_retired_slot():
    p = make_proof()
    pv = provider_view(worker_key_expires_at=p.window_end - 1,
                       retired_keys=retired((WORKER_PUB, p.window_end)))
    assert worker_key_status(pv, WORKER_PUB, p.window_end) == "ok"


def test_unknown_worker_key_is_retryable():
    pv = provider_view(worker_key=pk(OTHER_PUB))
    with pytest.raises(Rejection) as ei:
        check_worker_key(auth_of(make_proof()), pv, cfg())
    assert ei.value.retryable and ei.value.http_status == 425


# ------------------------------------------------------------------ window checks


def win(p, job=None, state=FRESH, now=NOW, prev=None, **cfg_kw):
    return check_window(auth_of(p), job_view() if job is None else job, state, cfg(**cfg_kw),
                        now, prev)



def test_first_window_accepted():
    v = win(make_proof())
    assert v.missed_seqs == () and v.billable_bound == WINDOW


def test_job_not_found():
    assert reason(check_window, auth_of(make_proof()), None, FRESH, cfg(), NOW,
                  None) == "job_not_found"


def test_job_of_other_market():
    assert reason(win, make_proof(), job_view(market=pk(bytes([8] * 32)))) == "wrong_market"


def test_wrong_provider():
    assert reason(win, make_proof(), job_view(provider=pk(bytes([1] * 32)))) == "wrong_provider"


@pytest.mark.parametrize("status", ["completed", "cancelled", "failed", "declined"])
def test_job_not_running_is_final(status):
    with pytest.raises(Rejection) as ei:
        win(make_proof(), job_view(status=status))
    assert ei.value.reason == "job_not_running" and not ei.value.retryable


def test_open_job_is_not_started_and_retryable():
    with pytest.raises(Rejection) as ei:
        win(make_proof(), job_view(status="open"))
    assert ei.value.reason == "job_not_started" and ei.value.retry_after > 0


def test_job_not_found_is_retryable():
    with pytest.raises(Rejection) as ei:
        check_window(auth_of(make_proof()), None, FRESH, cfg(), NOW, None)
    assert ei.value.reason == "job_not_found" and ei.value.retryable


def test_status_of_enum_like_values():
    class Running:  # an anchorpy enum variant: the type name is the status
        pass

    class Named:
        name = "Declined"

    assert status_of({"status": Running()}) == "running"
    assert status_of({"status": Named()}) == "declined"
    assert status_of(job_view(status="Finishing")) == "finishing"


def test_job_rules_come_from_terms():
    j = job_view(terms=job_terms(window_seconds=30, max_skew_seconds=2, temp_critical_c=80,
                                ecc_uncorrected_max=3))
    assert job_rules(j) == JobRules(30, 2, HealthThresholds(80, 3))


def test_finishing_job_accepts_windows_up_to_ended_at():
    p = make_proof()
    win(p, job_view(status="finishing", ended_at=p.window_end))
    assert reason(win, p, job_view(status="finishing", ended_at=p.window_end - 1)) == \
        "window_after_job_end"


def test_stale_seq():
    ps = chain_of(2)
    st = JobState(2, 2 * WINDOW, T0 + 2 * WINDOW, UUIDS)
    assert reason(win, ps[1], state=st) == "stale_seq"
    assert reason(win, make_proof(0, window_start=T0, window_end=T0 + 60, cumulative=60)) \
        == "stale_seq"


def test_seq_gap_needs_the_time_it_skips():
    st = JobState(1, WINDOW, T0 + WINDOW, tuple(sorted(UUIDS)))
    # seq 4 skips 2 windows: they need >= 2 s between the last window and this one
    ok = make_proof(4, prev=bytes([1] * 32), window_start=T0 + WINDOW + 2,
                    window_end=T0 + 2 * WINDOW, billable=10, cumulative=WINDOW + 10,
                    gpus=tuple(gpu(u, WINDOW - 2) for u in UUIDS))
    assert win(ok, state=st).missed_seqs == (2, 3)
    bad = make_proof(4, prev=bytes([1] * 32), window_start=T0 + WINDOW + 1,
                     window_end=T0 + 2 * WINDOW, billable=10, cumulative=WINDOW + 10,
                     gpus=tuple(gpu(u, WINDOW - 1) for u in UUIDS))
    assert reason(win, bad, state=st) == "seq_gap"


def test_gap_is_reported_as_missed_windows():
    # seq 4 after seq 1: windows 2 and 3 never arrived (their seconds were not claimed).
    st = JobState(1, WINDOW, T0 + WINDOW, tuple(sorted(UUIDS)))
    p = make_proof(4, prev=bytes([1] * 32), cumulative=2 * WINDOW)
    assert win(p, state=st).missed_seqs == (2, 3)


def test_hash_chain():
    ps = chain_of(2)
    st = JobState(1, WINDOW, T0 + WINDOW, tuple(sorted(UUIDS)))
    win(ps[1], state=st, prev=prev_of(ps[0]))
    wrong = PrevProof(bytes([5] * 32), WINDOW, T0 + WINDOW)
    assert reason(win, ps[1], state=st, prev=wrong) == "prev_hash_mismatch"
    assert reason(win, make_proof(1, prev=bytes([1] * 32))) == "prev_hash_mismatch"


def test_window_length_bounds():
    win(make_proof(window_end=T0 + WINDOW + 5))  # window + skew is allowed
    p = make_proof(window_end=T0 + WINDOW + 6)
    assert reason(win, p) == "window_length"


def test_window_length_and_skew_are_the_job_terms():
    short = job_view(terms=job_terms(window_seconds=30, max_skew_seconds=0))
    p = make_proof(window_end=T0 + 30, billable=30, cumulative=30,
                   gpus=tuple(gpu(u, 30) for u in UUIDS))
    win(p, short)
    assert reason(win, make_proof(), short) == "window_length"


def test_window_overlap():
    st = JobState(1, WINDOW, T0 + WINDOW, tuple(sorted(UUIDS)))
    p = make_proof(2, prev=ZERO_HASH, window_start=T0 + WINDOW - 1)
    assert reason(win, p, state=st) == "window_overlap"
    # first window may not start before the job started (chain last_window_end = started_at)
    assert reason(win, make_proof(window_start=T0 - 1, window_end=T0 + 59, billable=10,
                                  cumulative=10)) == "window_overlap"


def test_window_in_future():
    p = make_proof()
    win(p, now=p.window_end - 5)
    with pytest.raises(Rejection) as ei:
        win(p, now=p.window_end - 6)
    assert (ei.value.reason, ei.value.retry_after) == ("window_in_future", 1)
    with pytest.raises(Rejection) as ei:  # one whole window early: still retryable
        win(p, now=p.window_end - 5 - WINDOW)
    assert (ei.value.reason, ei.value.retry_after) == ("window_in_future", WINDOW)
    with pytest.raises(Rejection) as ei:  # more than that: the worker's clock is wrong
        win(p, now=p.window_end - 6 - WINDOW)
    assert (ei.value.reason, ei.value.retryable) == ("window_far_in_future", False)


def test_gpu_count_mismatch():
    assert reason(win, make_proof(), job_view(gpu_count=3)) == "gpu_count_mismatch"


def test_gpu_uuids_stable():
    st = JobState(1, WINDOW, T0 + WINDOW, tuple(sorted(UUIDS)))
    ok = make_proof(2, gpus=(gpu(UUIDS[1]), gpu(UUIDS[0])))  # order does not matter
    win(ok, state=st)
    bad = make_proof(2, gpus=(gpu(UUIDS[0]), gpu("GPU-cccc")))
    assert reason(win, bad, state=st) == "gpu_uuids_changed"


def test_claim_above_health_is_approved_only_up_to_the_bound():
    hot = (gpu(UUIDS[0], covered_seconds=50, samples=50), gpu(UUIDS[1]))
    v = win(make_proof(gpus=hot, billable=50, cumulative=50))
    assert (v.billable_bound, v.approved_seconds, v.approved_total) == (50, 50, 50)
    v = win(make_proof(gpus=hot, billable=60, cumulative=60))  # claims more: not refused
    assert (v.approved_seconds, v.approved_total) == (50, 50)


def test_approved_total_adds_to_the_state_total():
    st = JobState(1, WINDOW, T0 + WINDOW, tuple(sorted(UUIDS)), approved_total=41)
    v = win(make_proof(2, cumulative=2 * WINDOW), state=st)
    assert (v.approved_seconds, v.approved_total) == (WINDOW, 41 + WINDOW)


def test_own_stricter_health_policy_approves_less():
    warm = make_proof(gpus=(gpu(UUIDS[0], temp_max_c=90), gpu(UUIDS[1])))
    assert win(warm).approved_seconds == WINDOW  # the terms' critical temperature is 95
    strict = HealthThresholds(temp_critical_c=85, ecc_uncorrected_max=0)
    assert win(warm, own_health=strict).approved_seconds == WINDOW - 1
    loose = HealthThresholds(temp_critical_c=150, ecc_uncorrected_max=9)  # never looser
    assert job_rules(job_view(), loose).health == HealthThresholds(95, 0)


def prev_of(p):
    return PrevProof(proof_hash(encode_proof(p)), p.cumulative_seconds, p.window_end)


def test_cumulative_mismatch_against_the_previous_proof():
    st = JobState(1, WINDOW, T0 + WINDOW, tuple(sorted(UUIDS)))
    p1 = chain_of(1)[0]
    p2 = make_proof(2, prev=prev_of(p1).hash, cumulative=2 * WINDOW)
    win(p2, state=st, prev=prev_of(p1))
    bad = make_proof(2, prev=prev_of(p1).hash, cumulative=2 * WINDOW + 1)
    assert reason(win, bad, state=st, prev=prev_of(p1)) == "cumulative_mismatch"


def test_after_a_rejected_window_the_next_chains_to_it():
    # seq 2 was rejected (stored) with a claim the validator did not accept; seq 3 chains to
    # it and is accepted: one bad window does not end the job.
    st = JobState(1, WINDOW, T0 + WINDOW, tuple(sorted(UUIDS)), approved_total=WINDOW)
    rejected = make_proof(2, cumulative=2 * WINDOW + 7)
    p3 = make_proof(3, prev=prev_of(rejected).hash, cumulative=3 * WINDOW + 7)
    v = win(p3, state=st, prev=prev_of(rejected))
    assert (v.missed_seqs, v.approved_total) == ((2,), 2 * WINDOW)


def test_claim_never_falls_behind_the_last_accepted_total():
    # The previous (rejected) proof claimed less than this validator accepted already: the
    # next window, consistent with it, is still refused until claims catch up.
    st = JobState(1, WINDOW, T0 + WINDOW, tuple(sorted(UUIDS)))
    low = make_proof(2, cumulative=0, billable=0)
    p3 = make_proof(3, prev=prev_of(low).hash, cumulative=WINDOW)
    assert reason(win, p3, state=st, prev=prev_of(low)) == "cumulative_mismatch"


def test_a_gap_needs_only_a_claim_that_does_not_fall_behind():
    st = JobState(1, WINDOW, T0 + WINDOW, tuple(sorted(UUIDS)))
    win(make_proof(4, prev=bytes([1] * 32), cumulative=10 * WINDOW), state=st)
    assert reason(win, make_proof(4, prev=bytes([1] * 32), cumulative=WINDOW + 59),
                  state=st) == "cumulative_mismatch"


def test_not_in_committee_is_final_403():
    from vtestkit import VALIDATOR_KEYS

    other = bytes(VALIDATOR_KEYS[1].pubkey())
    check_committee(job_view(), cfg())
    with pytest.raises(Rejection) as ei:
        check_committee(job_view(committee=(other,)), cfg())
    assert (ei.value.reason, ei.value.http_status, ei.value.retryable) == \
        ("not_in_committee", 403, False)


# ------------------------------------------------------------------ health policy

TH = HealthThresholds()


def test_health_full_window_when_healthy():
    assert health_bound(make_proof(), TH) == WINDOW


def test_health_ecc_makes_window_unbillable():
    p = make_proof(gpus=(gpu(UUIDS[0], ecc_uncorrected_delta=1), gpu(UUIDS[1])))
    assert health_bound(p, TH) == 0
    p = make_proof(gpus=(gpu(UUIDS[0], health_flags=HEALTH_ECC_UNCORRECTED), gpu(UUIDS[1])))
    assert health_bound(p, TH) == 0
    p = make_proof(gpus=(gpu(UUIDS[0], ecc_uncorrected_delta=2), gpu(UUIDS[1])))
    assert health_bound(p, replace(TH, ecc_uncorrected_max=2)) == WINDOW


def test_health_workload_failed_or_foreign_processes_unbillable():
    assert health_bound(make_proof(workload=WorkloadWindow(WORKLOAD_FAILED)), TH) == 0
    shared = WorkloadWindow(WORKLOAD_RUNNING, job_processes=1, foreign_processes=1)
    assert health_bound(make_proof(workload=shared), TH) == 0
    for ok in (WorkloadWindow(WORKLOAD_RUNNING, job_processes=2), WorkloadWindow(WORKLOAD_PENDING),
               WorkloadWindow(WORKLOAD_EXITED, exit_code=0)):
        assert health_bound(make_proof(workload=ok), TH) == WINDOW


def test_health_zero_samples_unbillable():
    p = make_proof(gpus=(gpu(UUIDS[0], samples=0, covered_seconds=0), gpu(UUIDS[1])))
    assert health_bound(p, TH) == 0


def test_health_critical_temperature_loses_at_least_a_second():
    p = make_proof(gpus=(gpu(UUIDS[0], temp_max_c=95), gpu(UUIDS[1])))
    assert health_bound(p, TH) == WINDOW - 1
    p = make_proof(gpus=(gpu(UUIDS[0], temp_max_c=94), gpu(UUIDS[1])))
    assert health_bound(p, TH) == WINDOW


def test_health_bound_is_min_covered_and_samples():
    p = make_proof(gpus=(gpu(UUIDS[0], covered_seconds=40), gpu(UUIDS[1], samples=30)))
    assert health_bound(p, TH) == 30
    p = make_proof(gpus=(gpu(UUIDS[0], temp_max_c=None, ecc_uncorrected_delta=None),
                         gpu(UUIDS[1])))
    assert health_bound(p, TH) == WINDOW
