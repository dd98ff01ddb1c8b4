"""Pruning: what a job closed on chain long ago loses, and everything that stays:
equivocation evidence, open intents, unfinished reports, active and recent jobs. On SQLite
and on PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

import pytest
import storekit
from gpum_validator.records import (
    ChainJobInfo,
    GivenAttestation,
    ReceivedAttestation,
    ReportKind,
    ReportStatus,
)
from gpum_validator.retention import DAY_SECONDS, Pruner
from storekit import accept, auth_of, summary_counts, table_counts
from vtestkit import T0, WINDOW, FakeChain, chain_of, make_proof

NOW = float(T0 + 100 * DAY_SECONDS)
BEFORE = NOW - 30 * DAY_SECONDS
OLD_END = int(NOW - 40 * DAY_SECONDS)
MEMBER = bytes([101] * 32)
OTHER_MEMBER = bytes([102] * 32)


@pytest.fixture(params=storekit.BACKENDS)
def store_db(request, tmp_path):
    yield from storekit.store_db(request, tmp_path)


def job_key(i: int) -> bytes:
    return bytes([60 + i] * 32)


def info(status: str, last_seq: int, ended_at: int = 0) -> ChainJobInfo:
    return ChainJobInfo(status=status, last_seq=last_seq, paid_seconds=last_seq * WINDOW,
                        rate_per_second=10, escrow_remaining=0, ended_at=ended_at,
                        window_seconds=WINDOW, committee=(MEMBER,))


def run_job(store, job: bytes, n: int, written_at: float, *, settle_every: int = 3) -> list:
    """Accept windows 1..n of ``job`` (a gap before the last: missed windows), each third
    settled by a confirmed intent; the stored proofs."""
    ps = chain_of(n, job=job)
    stored = []
    for p in ps[:-2]:
        stored.append(accept(store, p, written_at))
        if p.seq % settle_every == 0:
            it = store.add_intent(stored[-1], p.seq - settle_every + 1, written_at)
            store.mark_intent(it.id, "confirmed", written_at, signature=f"sig{p.seq}")
    stored.append(accept(store, ps[-1], written_at, missed=(n - 1,)))
    return stored


def snapshot(store, job: bytes) -> dict:
    return {"state": store.job_state(job), "proofs": store.recent_windows(job, 500),
            "intents": store.intents(job), "missed": store.missed_windows(job),
            "chain": store.chain_info(job)[0]}


def world(store):
    """Six jobs: A closed long ago and prunable, with evidence; B closed long ago with an
    open intent; C running; D closed recently; E closed long ago with an unfinished downtime
    report; F closed long ago with an unreported equivocation."""
    old = NOW - 45 * DAY_SECONDS
    jobs = {k: job_key(i) for i, k in enumerate("ABCDEF")}
    for k, job in jobs.items():
        run_job(store, job, 8, old if k != "D" else NOW - 5 * DAY_SECONDS)
    a = jobs["A"]
    # Evidence at seq 2 of A: a second signed proof, reported (done).
    other = make_proof(2, job=a, billable=1, cumulative=61)
    assert store.record_equivocation(auth_of(other), store.accepted_at(a, 2).hash, old)
    store.mark_report(ReportKind.EQUIVOCATION, (a, 2), ReportStatus.DONE, old,
                      signature="slash-sig")
    # A rejected proof, received attestations (one pair is a validator-equivocation case,
    # reported) and a given attestation.
    assert store.record_rejected(auth_of(make_proof(9, job=a, billable=7)), "ahead", old) \
        is None
    p3, p6 = store.accepted_at(a, 3), store.accepted_at(a, 6)
    for approved in (180, 170):
        store.record_received_attestation(ReceivedAttestation(
            a, 3, OTHER_MEMBER, approved, p3.cumulative_seconds, p3.window_end, p3.hash,
            bytes(64), old))
    store.mark_report(ReportKind.VALIDATOR_EQUIVOCATION, (a, 3, OTHER_MEMBER), ReportStatus.DONE,
                      old, signature="v-sig")
    store.record_received_attestation(ReceivedAttestation(
        a, 6, OTHER_MEMBER, 360, p6.cumulative_seconds, p6.window_end, p6.hash, bytes(64), old))
    store.record_given_attestation(GivenAttestation(a, 6, 360, p6.hash, bytes(64), MEMBER, old))
    store.mark_report(ReportKind.DOWNTIME, (a, T0), ReportStatus.DONE, old, outcome="slashed")
    # B: an intent still open (sent) although the job ended.
    b = jobs["B"]
    store.add_intent(store.accepted_at(b, 8), 7, old)
    it = store.open_intents()[-1]
    store.mark_intent(it.id, "sent", old, count_attempt=True)
    # E: an unfinished downtime report. F: evidence not reported yet.
    store.mark_report(ReportKind.DOWNTIME, (jobs["E"], T0), ReportStatus.RETRY, old,
                      error="rpc down")
    f_other = make_proof(4, job=jobs["F"], billable=2, cumulative=182)
    assert store.record_equivocation(auth_of(f_other), store.accepted_at(jobs["F"], 4).hash,
                                     old)
    for k, job in jobs.items():
        status = "running" if k == "C" else "completed"
        ended = 0 if k == "C" else (int(NOW - 5 * DAY_SECONDS) if k == "D" else OLD_END)
        store.update_chain_info(job, info(status, 6, ended), old)
    return jobs


def test_prune_deletes_closed_jobs_and_keeps_evidence(store_db):
    store = store_db.open()
    jobs = world(store)
    kept = {k: snapshot(store, jobs[k]) for k in "BCDEF"}
    a = jobs["A"]
    given_before = store.given_attestation(a, 6)
    batches: list[float] = []
    deleted = store.prune(BEFORE, batch_rows=3, on_batch=batches.append)
    assert len(batches) >= 5 and all(ms >= 0 for ms in batches)  # many small transactions
    # A: only the evidence seq is left of its proofs; the job row, intents, missed windows,
    # non-evidence attestations and the finished downtime report are gone.
    assert deleted == {"jobs": 1, "proofs": 7, "missed_windows": 1, "intents": 2,
                       "attestations_received": 1, "downtime_reports": 1}
    assert store.job_state(a) is None and store.chain_info(a) == (None, 0.0)
    assert [p.seq for p in store.recent_windows(a, 100)] == [2]
    assert {p.decision for p in store.proofs_at(a, 2)} == {"accepted", "rejected"}
    assert store.intents(a) == [] and store.missed_windows(a) == []
    assert store.downtime_report(a, T0) is None
    # The evidence stays, and its report stays done (never resubmitted).
    (case,) = [c for c in store.equivocation_cases() if c.job == a]
    assert (case.seq, case.status) == (2, "done")
    assert all(c.job != a for c in store.equivocation_cases(open_only=True))
    (vcase,) = store.validator_equivocation_cases()
    assert (vcase.job, vcase.seq, vcase.status) == (a, 3, "done")
    assert sorted(r.approved_seconds for r in store.received_attestations(a, 3)) == [170, 180]
    assert store.received_attestations(a, 6) == []
    assert store.given_attestation(a, 6) == given_before  # the guard against signing twice
    # B (open intent), C (running), D (recent), E (unfinished report), F (unreported
    # evidence): untouched.
    for k, snap in kept.items():
        assert snapshot(store, jobs[k]) == snap, k
    assert store.downtime_report(jobs["E"], T0).status == "retry"
    # The counters followed every delete.
    assert summary_counts(store) == table_counts(store)
    # Nothing more to do.
    assert not any(store.prune(BEFORE).values())


def test_prune_resumes_after_its_time_budget(store_db):
    store = store_db.open()
    jobs = world(store)
    assert not any(store.prune(BEFORE, max_seconds=0).values())
    assert store.job_state(jobs["A"]) is not None
    first = store.prune(BEFORE, batch_rows=2, max_seconds=1e-9)
    assert sum(first.values()) <= 2  # one small transaction at most
    rest = store.prune(BEFORE, batch_rows=2)
    assert first["proofs"] + rest["proofs"] == 7 and rest["jobs"] == 1


def test_prune_once_the_open_intent_ends(store_db):
    store = store_db.open()
    jobs = world(store)
    store.prune(BEFORE)
    b = jobs["B"]
    assert store.job_state(b) is not None
    (it,) = store.open_intents()
    store.mark_intent(it.id, "failed", NOW, error="InvalidJobStatus")
    assert store.prune(BEFORE)["jobs"] == 1 and store.job_state(b) is None
    assert store.intents(b) == []


def test_closed_jobs_are_not_settle_candidates(store_db):
    store = store_db.open()
    job = job_key(9)
    stored = run_job(store, job, 4, NOW)
    assert [c.job for c in store.settle_candidates()] == [job]
    store.update_chain_info(job, info("finishing", 3), NOW)
    assert [c.latest.seq for c in store.settle_candidates()] == [4]
    store.update_chain_info(job, info("completed", 3, int(NOW)), NOW)
    assert store.settle_candidates() == []
    assert stored[-1].seq == 4


def test_pruner_marks_closed_accounts_and_prunes_after_retention(store_db):
    store = store_db.open()
    chain = FakeChain()
    gone, running = job_key(20), job_key(21)
    for job in (gone, running):
        chain.jobs[job] = replace(chain.jobs[next(iter(chain.jobs))], address=None)
        run_job(store, job, 4, NOW - 40 * DAY_SECONDS)
        store.update_chain_info(job, info("running", 3), NOW - 40 * DAY_SECONDS)
    del chain.jobs[gone]  # its account was closed while nobody looked
    pruner = Pruner(store, 30, chain, clock=lambda: NOW)
    deleted = pruner.run_once()
    assert store.chain_info(running)[0].status == "running"
    assert deleted["jobs"] == 1 and store.job_state(gone) is None
    assert store.job_state(running) is not None
    assert pruner.run_once() == {}  # not again before its interval
    with pytest.raises(ValueError):
        Pruner(store, 0)


def test_counters_match_the_tables(store_db):
    """``summary`` counts from counters kept by triggers: they follow inserts, upgrades of a
    rejected proof to accepted, evictions at the cap, intents changing status, pruning."""
    from gpum_validator.records import StoreLimits

    store = store_db.open()
    job = job_key(30)
    ps = chain_of(6, job=job)
    accept(store, ps[0], NOW)
    assert store.record_rejected(auth_of(ps[1]), "job_not_started", NOW) is None
    accept(store, ps[1], NOW)  # the same bytes, now accepted
    limits = StoreLimits(max_rejected_per_job=2, max_rejected_total=3)
    for s in (3, 4, 5, 6):
        store.record_rejected(auth_of(make_proof(s, job=job, billable=9)), "ahead", NOW,
                              limits)
    it = store.add_intent(store.accepted_at(job, 2), 1, NOW)
    store.mark_intent(it.id, "sent", NOW)
    assert summary_counts(store) == table_counts(store)
    s = store.summary()
    assert s["proofs"] == {"accepted": 2, "rejected": 2}
    assert s["intents"] == {"intended": 0, "sent": 1, "confirmed": 0, "failed": 0}
    store.mark_intent(it.id, "confirmed", NOW)
    assert store.summary()["intents"]["confirmed"] == 1 and store.pending_windows() == 0
    store.close()
    store = store_db.open()  # and survive a restart
    assert summary_counts(store) == table_counts(store)


def test_an_accept_moves_updated_at_only_once_it_is_a_grain_old(store_db):
    """``jobs.updated_at`` is the last write to within ``UPDATED_AT_GRAIN_SECONDS`` (so most
    accepts leave ``jobs_open`` alone); a job accepting windows again is not stale."""
    from gpum_validator.records import UPDATED_AT_GRAIN_SECONDS as GRAIN

    store = store_db.open()
    job = job_key(31)
    ps = chain_of(4, job=job)
    start = BEFORE - GRAIN - 10

    def updated_at() -> float:
        return store._q("SELECT updated_at FROM jobs WHERE job=?", (job,))[0][0]

    accept(store, ps[0], start)
    assert updated_at() == start  # the first row
    accept(store, ps[1], start + GRAIN - 1)
    assert updated_at() == start  # within the grain: left as it is
    store.update_chain_info(job, info("running", 0), start)
    assert store.stale_open_jobs(BEFORE, 10) == [job]  # no write since before the cutoff
    accept(store, ps[2], BEFORE + 10)
    assert updated_at() == BEFORE + 10  # a grain old: moved
    assert store.stale_open_jobs(BEFORE, 10) == []
    accept(store, ps[3], BEFORE + 11)
    assert updated_at() == BEFORE + 10
    assert store.job_state(job).last_seq == 4
