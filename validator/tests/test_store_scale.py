"""Scale: with 20,000 finished jobs and 200,000 proofs stored, the settle pass and
/health read what the active jobs need, not the finished ones. No timing: the work is
counted, as SQLite virtual-machine steps (a progress handler) or as the rows and index
entries PostgreSQL reads in the transaction (``pg_stat_get_xact_tuples_returned``), first
with the active jobs alone, then with the finished jobs added: it must not grow with them.
bench/validator_storage.py measures the times at 1,000,000 proofs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
import storekit
from gpum_validator.store_sqlite import SQLiteStore
from storekit import bulk_insert

FINISHED = 20_000
PROOFS_PER_FINISHED = 10
ACTIVE = 40
UNSETTLED = 3
"""Each active job's last windows not settled yet (the others are, by confirmed intents)."""
ENDED_UNPAID = 25
"""Finished jobs that ended with windows nobody settled: never candidates, still pending."""
NOW = 1_800_000_000.0

PROOF_COLS = ("job", "seq", "hash", "proof", "proof_signature", "receipt_signature",
              "worker_key", "cumulative_seconds", "window_end", "received_at", "decision",
              "reason", "approved_seconds", "approved_total")
JOB_COLS = ("job", "last_seq", "cumulative_seconds", "last_window_end", "gpu_uuids",
            "accepted_windows", "chain_status", "chain_last_seq", "settled_seconds",
            "rate_per_second", "escrow_remaining", "ended_at", "chain_checked_at", "updated_at",
            "window_seconds", "approved_total", "committee")
INTENT_COLS = ("job", "seq_from", "seq_to", "cumulative_seconds", "window_end", "proof_hash",
               "worker_key", "receipt_signature", "status", "created_at", "updated_at",
               "approved_seconds")


@pytest.fixture(params=storekit.BACKENDS)
def store_db(request, tmp_path):
    yield from storekit.store_db(request, tmp_path)


def fill(store: Any, kind: int, n: int, per: int, settled: Callable[[int], int],
         status: str) -> None:
    """``n`` jobs of ``per`` accepted proofs each, settled (chain and a confirmed intent)
    up to ``settled(i)``, straight through SQL."""
    blob, sig, worker = bytes(64), bytes(64), bytes(32)
    for lo in range(0, n, 2000):
        proofs, jobs, intents = [], [], []
        for i in range(lo, min(n, lo + 2000)):
            job = hashlib.sha256(bytes([kind]) + i.to_bytes(4, "little")).digest()
            top = settled(i)
            for s in range(1, per + 1):
                digest = hashlib.sha256(job + s.to_bytes(4, "little")).digest()
                proofs.append((job, s, digest, blob, sig, sig, worker, 60 * s, 60 * s, NOW,
                               "accepted", None, 60, 60 * s))
            jobs.append((job, per, 60 * per, 60 * per, "[]", per, status, top, 60 * top, 10,
                         10**9, int(NOW) if status == "completed" else 0, NOW, NOW, 60,
                         60 * per, "[]"))
            if top:
                intents.append((job, 1, top, 60 * top, 60 * top, bytes(32), worker, sig,
                                "confirmed", NOW, NOW, 60 * top))
        bulk_insert(store, "proofs", PROOF_COLS, proofs)
        bulk_insert(store, "jobs", JOB_COLS, jobs)
        bulk_insert(store, "intents", INTENT_COLS, intents)
    store.rebuild_derived()
    if store.dialect.name == "postgresql":  # what autovacuum does after a bulk load
        raw = store._pool.get()
        try:
            raw.execute("VACUUM ANALYZE")  # outside a transaction
        finally:
            store._pool.put(raw)


def work(store: Any, fn: Callable[[], Any]) -> tuple[int, Any]:
    """How much the database did for ``fn()``, and its result."""
    if isinstance(store, SQLiteStore):
        steps = [0]

        def tick() -> int:
            steps[0] += 1
            return 0

        store._db.set_progress_handler(tick, 100)
        try:
            out = fn()
        finally:
            store._db.set_progress_handler(None, 100)
        return steps[0] * 100, out
    read = ("SELECT COALESCE(SUM(pg_stat_get_xact_tuples_returned(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i')")
    with store.batch():  # one transaction: its own table statistics
        before = int(store._q(read)[0][0])
        out = fn()
        return int(store._q(read)[0][0]) - before, out


def statements(store: Any, fn: Callable[[], Any]) -> int:
    """SQL statements ``fn()`` runs (SQLite's trace callback)."""
    seen: list[str] = []
    store._db.set_trace_callback(seen.append)
    try:
        fn()
    finally:
        store._db.set_trace_callback(None)
    return len(seen)


def health(store: Any) -> Any:
    s = store.summary()  # what GET /health reads (server.health)
    return s["pending_windows"], s["intents"], s["jobs"], s["proofs"]


def test_settle_pass_and_health_read_only_active_jobs(store_db):
    store = store_db.open()
    active_per = 20
    fill(store, 1, ACTIVE, active_per, lambda i: active_per - UNSETTLED, "running")
    settle_small, cands = work(store, store.settle_candidates)
    health_small, h_small = work(store, lambda: health(store))
    pending_small, _ = work(store, store.pending_windows)
    assert len(cands) == ACTIVE and {c.unsettled_windows for c in cands} == {UNSETTLED}
    assert h_small[0] == ACTIVE * UNSETTLED

    fill(store, 2, FINISHED - ENDED_UNPAID, PROOFS_PER_FINISHED,
         lambda i: PROOFS_PER_FINISHED, "completed")
    fill(store, 3, ENDED_UNPAID, PROOFS_PER_FINISHED, lambda i: PROOFS_PER_FINISHED - 2,
         "completed")
    stored = ACTIVE * active_per + FINISHED * PROOFS_PER_FINISHED
    assert store.summary()["proofs"] == {"accepted": stored} and stored >= 200_000

    settle_big, cands_big = work(store, store.settle_candidates)
    health_big, h_big = work(store, lambda: health(store))
    pending_big, pending = work(store, store.pending_windows)
    # Same answers (the ended jobs' unpaid windows are pending, never candidates) ...
    assert [c.job for c in cands_big] == [c.job for c in cands]
    assert pending == h_big[0] == ACTIVE * UNSETTLED + ENDED_UNPAID * 2
    assert h_big[2] == ACTIVE + FINISHED
    # ... for about the same work, whatever the finished jobs hold.
    assert settle_big <= 1.5 * settle_small + 2_000, (settle_small, settle_big)
    assert health_big <= 1.5 * health_small + 2_000 + 20 * ENDED_UNPAID, (health_small,
                                                                          health_big)
    assert pending_big <= 1.5 * pending_small + 2_000 + 20 * ENDED_UNPAID
    # The measure does see a whole-table read (what the settle pass did before).
    whole, _ = work(store, lambda: store._q("SELECT COUNT(*) FROM proofs WHERE job > ?",
                                            (bytes(1),)))
    assert whole > 20 * settle_big
    if isinstance(store, SQLiteStore):
        assert statements(store, store.settle_candidates) == 1  # not one per job
    json.dumps(h_big)  # /health's numbers are plain JSON


def test_a_rejected_proof_costs_the_same_whatever_its_job_has_accepted(store_db):
    """The per-job caps of ``record_rejected`` count the job's rejected proofs through their
    own index (``proofs_rejected``), not by reading every proof of the job: a stranger's junk
    for a long-running job costs what it costs for a new one."""
    from storekit import auth_of
    from vtestkit import make_proof

    store = store_db.open()

    def job_of(kind: int) -> bytes:
        return hashlib.sha256(bytes([kind]) + (0).to_bytes(4, "little")).digest()

    def reject(kind: int, seq: int) -> int:
        p = make_proof(seq, job=job_of(kind), billable=7)
        cost, out = work(store, lambda: store.record_rejected(auth_of(p), "ahead", NOW))
        assert out is None
        return cost

    fill(store, 4, 1, 20, lambda i: 20, "running")
    fill(store, 5, 1, 5_000, lambda i: 5_000, "running")
    small = [reject(4, s) for s in (30, 31, 32)][-1]
    big = [reject(5, s) for s in (5_010, 5_011, 5_012)][-1]
    assert big <= 1.5 * small + 2_000, (small, big)
    # The measure does see a read of the job's proofs.
    whole, _ = work(store, lambda: store._q("SELECT COUNT(*) FROM proofs WHERE job=? "
                                            "AND reason IS NULL", (job_of(5),)))
    assert whole > 3 * big


def _wal_frames_of_windows(store: SQLiteStore, jobs: list[bytes]) -> int:
    """WAL frames one transaction writes that moves every job of ``jobs`` one window on."""
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with store._tx() as db:
        db.executemany("UPDATE jobs SET last_seq=last_seq+1 WHERE job=?",
                       [(j,) for j in jobs])
    return store._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]


def test_a_window_of_an_unsettled_job_leaves_the_settle_indexes_alone(tmp_path):
    """An accepted window of a job that is unsettled already does not move its entries in
    ``jobs_unsettled`` / ``jobs_unpaid`` (stored flags, ``store_schema._SQLITE_MARKS``): the same
    transaction writes fewer pages than with the generated flags of before, whose partial
    indexes SQLite rewrote at every ``last_seq`` set."""
    frames = []
    for generated in (False, True):
        store = SQLiteStore(tmp_path / f"{generated}.sqlite")
        fill(store, 3, 2000, 2, lambda i: 1, "running")  # every job one window unsettled
        if generated:
            storekit.generated_marks(store._db)
        jobs = [r[0] for r in store._q("SELECT job FROM jobs")]
        frames.append(_wal_frames_of_windows(store, jobs))
        assert store._q("SELECT COUNT(*) FROM jobs WHERE unsettled=1 AND unpaid=1") == [(2000,)]
        store.close()
    stored, generated = frames
    assert stored * 4 < generated * 3, frames  # the two indexes: ~2/5 of the pages


@pytest.mark.parametrize("seed", range(4))
def test_settle_marks_follow_every_write(store_db, seed):
    """Randomized writes of every kind that moves ``last_seq``, ``covered_seq`` or
    ``paid_seq`` (accepts by the reference path and by the fast lane's rows, first windows,
    intents sent, confirmed and failed, the chain's settled seq going up and down): after
    each, every job's ``unsettled`` / ``unpaid`` equal ``last_seq > covered_seq`` /
    ``last_seq > paid_seq``."""
    import random

    from gpum_validator.records import ChainJobInfo
    from storekit import accept, auth_of
    from vtestkit import chain_of

    rng = random.Random(seed)
    store = store_db.open()
    jobs = [hashlib.sha256(bytes([seed, i])).digest() for i in range(4)]
    chains = {j: chain_of(40, job=j) for j in jobs}
    check = ("SELECT COUNT(*) FROM jobs WHERE unsettled <> (CASE WHEN last_seq > covered_seq "
             "THEN 1 ELSE 0 END) OR unpaid <> (CASE WHEN last_seq > paid_seq THEN 1 ELSE 0 END)")
    for _ in range(120):
        job = rng.choice(jobs)
        st = store.job_state(job)
        seq = st.last_seq if st else 0
        move = rng.choice(("accept", "accept", "lane", "lane", "intent", "chain"))
        if move in ("accept", "lane") and seq < 40:
            p = chains[job][seq]
            if move == "accept":
                accept(store, p, NOW)
            else:
                a = auth_of(p)
                total = (st.approved_total if st else 0) + p.billable_seconds
                proof = (job, p.seq, a.hash, a.proof_bytes, bytes(64), bytes(64), p.worker_key,
                         p.cumulative_seconds, p.window_end, NOW, "accepted", None,
                         p.billable_seconds, total)
                if st is None:
                    new = [(job, p.seq, p.cumulative_seconds, p.window_end, "[]", NOW, total,
                            ChainJobInfo("running", 0, 0, 1, 10**9, 0), NOW)]
                    store.record_accepted_rows(new, [], [proof])
                else:
                    moved = [(p.seq, p.cumulative_seconds, p.window_end, total, None, job, seq)]
                    store.record_accepted_rows([], moved, [proof])
        elif move == "intent" and seq:
            it = store.add_intent(store.accepted_at(job, rng.randint(1, seq)), 1, NOW)
            for status in rng.choice((("sent",), ("sent", "confirmed"), ("confirmed",),
                                      ("failed",), ())):
                store.mark_intent(it.id, status, NOW)
        elif move == "chain":
            last = rng.randint(0, seq)  # the chain's settled seq, also below what it was
            store.update_chain_info(job, ChainJobInfo(
                status="running", last_seq=last, paid_seconds=60 * last, rate_per_second=1,
                escrow_remaining=10**9, ended_at=0, window_seconds=60, committee=()), NOW)
        assert store._q(check)[0][0] == 0, move
    store.close()
