"""The slash reports' one marking path (``Store.mark_report``), for the three kinds alike:
the first mark of a provider's equivocation or a downtime report writes its row, a
validator-equivocation case is only updated (its row comes with the evidence), attempts are
counted, a None keeps what is stored, and a done or failed report is never reopened. On
SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest
import storekit
from gpum_validator.records import (
    DowntimeReport,
    EquivocationCase,
    ReceivedAttestation,
    ReportKind,
    ReportStatus,
    ValidatorEquivocationCase,
)
from storekit import accept, auth_of
from vtestkit import JOB, T0, chain_of, make_proof

NOW = float(T0 + 10_000)
MEMBER = bytes([102] * 32)


@pytest.fixture(params=storekit.BACKENDS)
def store_db(request, tmp_path):
    yield from storekit.store_db(request, tmp_path)


def cases(store) -> dict[ReportKind, object]:
    """One open report of each kind: equivocation evidence at seq 2, a member's two
    attestations for seq 3, a downtime report not attempted yet (no row)."""
    stored = [accept(store, p, NOW) for p in chain_of(3)]
    other = make_proof(2, billable=1, cumulative=stored[0].cumulative_seconds + 1)
    assert store.record_equivocation(auth_of(other), stored[1].hash, NOW)
    p3 = stored[2]
    for approved in (180, 170):
        store.record_received_attestation(ReceivedAttestation(
            JOB, 3, MEMBER, approved, p3.cumulative_seconds, p3.window_end, p3.hash,
            bytes(64), NOW))
    (eq,) = store.equivocation_cases()
    (veq,) = store.validator_equivocation_cases()
    assert store.downtime_report(JOB, 5000) is None
    return {ReportKind.EQUIVOCATION: eq, ReportKind.VALIDATOR_EQUIVOCATION: veq,
            ReportKind.DOWNTIME: DowntimeReport(JOB, 5000)}


def state(store, kind: ReportKind, key: tuple):
    if kind is ReportKind.EQUIVOCATION:
        return next(c for c in store.equivocation_cases() if c.key == key)
    if kind is ReportKind.VALIDATOR_EQUIVOCATION:
        return next(c for c in store.validator_equivocation_cases() if c.key == key)
    return store.downtime_report(*key)


@pytest.mark.parametrize("kind", list(ReportKind))
def test_one_marking_path_for_every_kind(store_db, kind):
    store = store_db.open()
    case = cases(store)[kind]
    assert case.kind is kind and case.status is None
    store.mark_report(kind, case.key, ReportStatus.SENT, NOW, count_attempt=True)
    s = state(store, kind, case.key)
    assert (s.status, s.attempts, s.updated_at) == (ReportStatus.SENT, 1, NOW)
    assert s.status == "sent"  # the text the database holds
    store.mark_report(kind, case.key, "retry", NOW + 1, error="rpc down",
                      next_attempt_at=NOW + 60)
    s = state(store, kind, case.key)
    assert (s.status, s.attempts, s.last_error, s.next_attempt_at) == \
        (ReportStatus.RETRY, 1, "rpc down", NOW + 60)
    store.mark_report(kind, case.key, ReportStatus.DONE, NOW + 2, signature="sig",
                      outcome="slashed")
    s = state(store, kind, case.key)
    assert (s.status, s.signature, s.outcome, s.last_error, s.next_attempt_at) == \
        (ReportStatus.DONE, "sig", "slashed", "rpc down", NOW + 60)
    assert s.status.terminal
    # Terminal: never reopened.
    store.mark_report(kind, case.key, ReportStatus.RETRY, NOW + 3, error="late",
                      count_attempt=True)
    assert state(store, kind, case.key) == s
    if kind is ReportKind.EQUIVOCATION:
        assert store.equivocations()[0][5] == "sig"
        assert store.equivocation_cases(open_only=True) == []
    if kind is ReportKind.VALIDATOR_EQUIVOCATION:
        assert store.validator_equivocation_cases(open_only=True) == []
    # What survives a restart (the state is durable, read back as the same records).
    store.close()
    assert state(store_db.open(), kind, case.key) == s


def test_failed_is_terminal_and_open_only_leaves_it_out(store_db):
    store = store_db.open()
    c = cases(store)
    for kind, case in c.items():
        store.mark_report(kind, case.key, ReportStatus.FAILED, NOW, outcome="failed",
                          error="gave up")
        store.mark_report(kind, case.key, ReportStatus.SENT, NOW + 1, count_attempt=True)
        s = state(store, kind, case.key)
        assert (s.status, s.attempts, s.outcome) == (ReportStatus.FAILED, 0, "failed")
    assert store.equivocation_cases(open_only=True) == []
    assert store.validator_equivocation_cases(open_only=True) == []
    assert isinstance(store.equivocation_cases()[0], EquivocationCase)
    assert isinstance(store.validator_equivocation_cases()[0], ValidatorEquivocationCase)


def test_a_validator_equivocation_mark_without_its_case_changes_nothing(store_db):
    store = store_db.open()
    store.mark_report(ReportKind.VALIDATOR_EQUIVOCATION, (JOB, 9, MEMBER), ReportStatus.SENT,
                      NOW, count_attempt=True)
    assert store.validator_equivocation_cases() == []


def test_mark_report_refuses_an_unknown_status_or_key(store_db):
    store = store_db.open()
    with pytest.raises(ValueError, match="unknown report status"):
        store.mark_report(ReportKind.DOWNTIME, (JOB, 5000), "confirmed", NOW)
    with pytest.raises(ValueError, match="keyed by job, seq, member"):
        store.mark_report(ReportKind.VALIDATOR_EQUIVOCATION, (JOB, 3), ReportStatus.SENT, NOW)
    assert store.downtime_report(JOB, 5000) is None
