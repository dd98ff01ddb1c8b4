"""Intake + store + settler against FakeChain: durability and crash safety, on SQLite and on
PostgreSQL (``store_db`` from storekit runs each test on both)."""

from __future__ import annotations

import pytest
import storekit
from gpu_market.errors import GpuMarketError, RpcUnavailable
from gpu_market.proof import encode_proof, proof_hash
from gpum_validator.config import SettlePolicy
from gpum_validator.errors import StoreError
from gpum_validator.intake import Intake
from gpum_validator.records import ChainJobInfo
from gpum_validator.settle_policy import due_reason
from gpum_validator.store_schema import SCHEMA_VERSION
from gpum_validator.store_sqlite import SQLiteStore
from vtestkit import (
    JOB,
    T0,
    UUIDS,
    WINDOW,
    cfg,
    chain_of,
    gpu,
    make_proof,
    make_settler,
    signed_json,
)


@pytest.fixture(params=storekit.BACKENDS)
def store_db(request, tmp_path):
    yield from storekit.store_db(request, tmp_path)


def setup(store_db, chain, clock, every=5):
    store = store_db.open()
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    settler = make_settler(chain, store, clock, SettlePolicy(settle_every_windows=every))
    return store, intake, settler


def feed(intake, proofs):
    return [intake.submit(signed_json(p)) for p in proofs]


def test_accept_duplicate_equivocation_persist(store_db, chain, clock):
    store, intake, _ = setup(store_db, chain, clock)
    p1 = chain_of(1)[0]
    assert intake.submit(signed_json(p1))[1]["status"] == "accepted"
    assert intake.submit(signed_json(p1))[1]["status"] == "duplicate"
    other = make_proof(1, billable=30, cumulative=30)
    status, body = intake.submit(signed_json(other))
    assert (status, body["error"]) == (409, "equivocation")
    store.close()
    store = store_db.open()  # survives a restart
    st = store.job_state(JOB)
    assert (st.last_seq, st.cumulative_seconds, st.last_window_end) == (1, 60, T0 + 60)
    rows = store.proofs_at(JOB, 1)
    assert {r.decision for r in rows} == {"accepted", "rejected"}
    ev = store.equivocations()
    assert len(ev) == 1 and {ev[0][2], ev[0][3]} == {
        proof_hash(encode_proof(p1)), proof_hash(encode_proof(other))}


def test_equivocation_hook_called(store_db, chain, clock):
    store = store_db.open()
    seen = []
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0],
                    on_equivocation=lambda a, s: seen.append((a.proof.seq, s.seq)))
    feed(intake, [chain_of(1)[0], make_proof(1, billable=1, cumulative=1)])
    assert seen == [(1, 1)]


def test_rejected_proof_is_reevaluated_on_retry(store_db, chain, clock):
    _store, intake, _ = setup(store_db, chain, clock)
    p = chain_of(1)[0]
    chain.set_job(status="open")
    assert intake.submit(signed_json(p))[1]["error"] == "job_not_started"
    chain.set_job(status="running")
    assert intake.submit(signed_json(p))[1]["status"] == "accepted"


def test_gap_records_missed_windows(store_db, chain, clock):
    store, intake, _ = setup(store_db, chain, clock)
    ps = chain_of(4)
    feed(intake, [ps[0]])
    p4 = make_proof(4, prev=proof_hash(encode_proof(ps[2])), cumulative=2 * WINDOW)
    assert intake.submit(signed_json(p4))[1]["status"] == "accepted"
    assert store.missed_windows(JOB) == [2, 3]


def test_chain_down_is_503_and_stores_nothing(store_db, chain, clock):
    store, intake, _ = setup(store_db, chain, clock)
    chain.down = True
    status, body = intake.submit(signed_json(chain_of(1)[0]))
    assert (status, body["error"]) == (503, "chain_unavailable")
    assert store.proofs_at(JOB, 1) == []


def test_provider_cache_refreshes_on_rotation(store_db, chain, clock):
    from dataclasses import replace

    from vtestkit import OTHER_KEY, OTHER_PUB, PROVIDER, pk
    _store, intake, _ = setup(store_db, chain, clock)
    ps = chain_of(2)
    feed(intake, [ps[0]])
    reads = chain.provider_reads
    chain.providers[PROVIDER] = replace(chain.providers[PROVIDER], worker_key=pk(OTHER_PUB))
    p2 = replace(ps[1], worker_key=OTHER_PUB)
    assert intake.submit(signed_json(p2, OTHER_KEY))[1]["status"] == "accepted"
    assert chain.provider_reads == reads + 1  # cached key mismatched -> one re-read


def test_schema_version_newer_is_refused(store_db):
    s = store_db.open()
    with s._tx() as db:
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                   (str(SCHEMA_VERSION + 1),))
    s.close()
    with pytest.raises(StoreError, match="newer"):
        store_db.open()


def test_v1_database_is_migrated_in_place(tmp_path, chain, clock):
    store = SQLiteStore(tmp_path / "v.sqlite")  # SQLite only: PostgreSQL starts at v4
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    feed(intake, chain_of(1))
    store._db.execute("ALTER TABLE jobs DROP COLUMN window_seconds")  # the v1 layout
    store._db.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    store.close()
    store = SQLiteStore(tmp_path / "v.sqlite")
    assert store.summary()["schema_version"] == SCHEMA_VERSION == 4
    (c,) = store.settle_candidates()
    assert (c.chain.window_seconds, c.chain_checked_at) == (0, 0)  # re-read on the next pass
    settler = make_settler(chain, store, clock, SettlePolicy(settle_every_windows=1))
    assert settler.settle_now().confirmed == 1
    assert store.settle_candidates() == [] and store.intents()[0].status == "confirmed"
    store.close()


def test_generated_marks_become_stored_and_stay_right(tmp_path, chain, clock):
    """A v4 database with generated ``unsettled`` / ``unpaid`` (SQLite only) is converted on
    open, keeping what the settle pass and /health read; from then on every write keeps the
    stored flags equal to what the generated ones would hold, a write of a flag included."""
    store = SQLiteStore(tmp_path / "v.sqlite")
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    feed(intake, chain_of(2))
    storekit.generated_marks(store._db)
    before = (store.settle_candidates(), store.pending_windows())
    assert before[1] == 2
    store.close()
    store = SQLiteStore(tmp_path / "v.sqlite")
    hidden = {r[1]: r[6] for r in store._db.execute("PRAGMA table_xinfo(jobs)")}
    assert (hidden["unsettled"], hidden["unpaid"]) == (0, 0)  # stored, not generated
    assert (store.settle_candidates(), store.pending_windows()) == before
    assert store.summary()["schema_version"] == SCHEMA_VERSION

    def flags() -> tuple[int, int]:
        return store._db.execute("SELECT unsettled, unpaid FROM jobs").fetchone()

    assert flags() == (1, 1)
    settler = make_settler(chain, store, clock, SettlePolicy(settle_every_windows=1))
    assert settler.settle_now().confirmed == 1
    assert flags() == (0, 0) and store.settle_candidates() == [] and store.pending_windows() == 0
    store._db.execute("UPDATE jobs SET unsettled=1, unpaid=1")  # a stray write of the flags
    assert flags() == (0, 0)
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    feed(intake, chain_of(3)[2:])
    assert flags() == (1, 1) and store.pending_windows() == 1
    (c,) = store.settle_candidates()
    assert c.unsettled_windows == 1
    store.close()


def test_unwritable_db_is_store_error(tmp_path):
    with pytest.raises(StoreError, match="cannot open"):
        SQLiteStore(tmp_path / "missing-dir" / "v.sqlite")


def test_unreachable_postgres_is_store_error(tmp_path):
    from gpum_validator.store_pg import PostgresStore

    url = f"postgresql://u:secret@/db?host={tmp_path}&connect_timeout=2"
    with pytest.raises(StoreError, match="cannot connect") as e:
        PostgresStore(url)
    assert "secret" not in str(e.value)


# ------------------------------------------------------------------ policy (pure)


def test_due_every_n_windows(store_db, chain, clock):
    store, intake, _ = setup(store_db, chain, clock)
    pol = SettlePolicy(settle_every_windows=5)
    feed(intake, chain_of(4))
    (c,) = store.settle_candidates()
    assert due_reason(c, pol, T0 + 300) is None
    feed(intake, chain_of(5)[4:])
    (c,) = store.settle_candidates()
    assert due_reason(c, pol, T0 + 300) == "every_n_windows"


def test_due_finishing_low_escrow_stale(store_db, chain, clock):
    store, intake, _ = setup(store_db, chain, clock)
    pol = SettlePolicy(settle_every_windows=5)
    feed(intake, chain_of(1))
    (c,) = store.settle_candidates()
    from dataclasses import replace
    info = c.chain
    assert due_reason(c, pol, T0 + 120) is None
    assert due_reason(replace(c, chain=replace(info, status="finishing")), pol,
                      T0 + 120) == "job_finishing"
    # 2 GPUs * 10/s: after paying 60 s, less than 2 windows left -> settle now
    low = replace(info, escrow_remaining=(60 + 119) * 10)
    assert due_reason(replace(c, chain=low), pol, T0 + 120) == "escrow_low"
    ok = replace(info, escrow_remaining=(60 + 120) * 10)
    assert due_reason(replace(c, chain=ok), pol, T0 + 120) is None
    assert due_reason(c, pol, T0 + 60 + 10 * WINDOW) == "stale"
    done = replace(info, status="completed")
    assert due_reason(replace(c, chain=done), pol, T0 + 10**6) is None
    assert isinstance(info, ChainJobInfo)
    assert due_reason(replace(c, chain=None), pol, T0 + 10**6) is None  # window unknown


def test_policy_windows_are_the_job_terms_window(store_db, chain, clock):
    chain.set_terms(window_seconds=30, max_skew_seconds=0)
    store, intake, _ = setup(store_db, chain, clock)
    p = make_proof(1, window_end=T0 + 30, billable=30, cumulative=30,
                   gpus=tuple(gpu(u, 30) for u in UUIDS))
    assert intake.submit(signed_json(p))[1]["status"] == "accepted"
    (c,) = store.settle_candidates()
    assert c.chain.window_seconds == 30 and c.chain.rate_per_second == 10
    pol = SettlePolicy(settle_every_windows=5)
    assert due_reason(c, pol, T0 + 30 + 10 * 30 - 1) is None
    assert due_reason(c, pol, T0 + 30 + 10 * 30) == "stale"


# ------------------------------------------------------------------ settler


def test_settles_newest_receipt_once(store_db, chain, clock):
    clock[0] = T0 + 3 * WINDOW  # fresh windows: only the every-N rule applies
    store, intake, settler = setup(store_db, chain, clock, every=3)
    feed(intake, chain_of(2))
    assert settler.settle_now().intended == 0 and chain.settle_calls == []
    feed(intake, chain_of(3)[2:])
    r = settler.settle_now()
    assert (r.intended, r.confirmed) == (1, 1)
    (call,) = chain.settle_calls
    assert [(i.seq, i.cumulative_seconds) for i in call] == [(3, 180)]
    assert chain.jobs[JOB].last_seq == 3
    assert settler.settle_now().intended == 0
    (intent,) = store.intents()
    assert (intent.status, intent.seq_from, intent.seq_to, intent.signature) == \
        ("confirmed", 1, 3, "sig1")
    assert store.pending_windows() == 0


def test_batches_jobs_up_to_max_items(store_db, chain, clock):
    from dataclasses import replace
    _store, intake, settler = setup(store_db, chain, clock, every=1)
    jobs = [bytes([20 + i] * 32) for i in range(3)]
    for j in jobs:
        chain.jobs[j] = replace(chain.jobs[JOB], address=None)
        feed(intake, chain_of(1, job=j))
    chain.max_items = 2
    r = settler.settle_now()
    assert r.confirmed == 3
    assert [len(c) for c in chain.settle_calls] == [2, 1]


def test_crash_after_intent_before_send_resends(store_db, chain, clock):
    store, intake, _settler = setup(store_db, chain, clock, every=1)
    feed(intake, chain_of(1))
    (c,) = store.settle_candidates()
    store.add_intent(c.latest, 1, clock[0])  # recorded, then the process "dies"
    store.close()
    store2 = store_db.open()
    settler2 = make_settler(chain, store2, clock)
    r = settler2.settle_now()
    assert (r.intended, r.confirmed) == (0, 1)
    assert len(chain.settle_calls) == 1 and chain.jobs[JOB].last_seq == 1


def test_crash_after_send_does_not_resend(store_db, chain, clock):
    store, intake, _settler = setup(store_db, chain, clock, every=1)
    feed(intake, chain_of(1))
    (c,) = store.settle_candidates()
    it = store.add_intent(c.latest, 1, clock[0])
    store.mark_intent(it.id, "sent", clock[0], count_attempt=True)
    chain.set_job(last_seq=1, claimed_seconds=60, paid_seconds=60,
                  last_window_end=T0 + 60)  # it landed
    store.close()
    store2 = store_db.open()
    r = make_settler(chain, store2, clock).settle_now()
    assert (r.already_settled, chain.settle_calls) == (1, [])
    assert store2.intents()[0].status == "confirmed"


def test_stale_sequence_marks_done_without_loop(store_db, chain, clock):
    store, intake, settler = setup(store_db, chain, clock, every=1)
    feed(intake, chain_of(1))
    chain.settle_error = GpuMarketError(6034, "StaleSequence", "stale", [])
    r = settler.settle_now()
    assert r.already_settled == 1 and len(chain.settle_calls) == 1
    assert store.intents()[0].status == "confirmed"
    settler.settle_now()
    assert len(chain.settle_calls) == 1  # never again


def test_terminal_chain_error_fails_once(store_db, chain, clock):
    store, intake, settler = setup(store_db, chain, clock, every=1)
    feed(intake, chain_of(1))
    chain.settle_error = GpuMarketError(6020, "NotAValidator", "not a validator", [])
    assert settler.settle_now().failed == 1
    settler.settle_now()
    assert len(chain.settle_calls) == 1 and store.intents()[0].status == "failed"


def test_transport_error_retries_with_backoff(store_db, chain, clock):
    store, intake, settler = setup(store_db, chain, clock, every=1)
    feed(intake, chain_of(1))
    chain.settle_error = RpcUnavailable("timeout")
    assert settler.settle_now().retry_later == 1
    (it,) = store.open_intents()
    assert it.status == "sent" and it.next_attempt_at > clock[0]
    assert settler.settle_now().retry_later == 1 and len(chain.settle_calls) == 1  # backing off
    chain.settle_error = None
    clock[0] = it.next_attempt_at
    assert settler.settle_now().confirmed == 1


def test_batch_failure_resolves_items_singly(store_db, chain, clock):
    from dataclasses import replace
    _store, intake, settler = setup(store_db, chain, clock, every=1)
    j2 = bytes([30] * 32)
    chain.jobs[j2] = chain.jobs[JOB]
    feed(intake, chain_of(1))
    feed(intake, chain_of(1, job=j2))
    real_settle = chain.settle

    def settle(auth, items):
        if len(items) > 1:
            raise GpuMarketError(6034, "StaleSequence", "stale", [])
        return real_settle(auth, items)

    chain.settle = settle
    r = settler.settle_now()
    assert r.confirmed == 2
    assert replace(chain.jobs[j2]).last_seq == 1


def test_settlement_loop_runs_in_background(store_db, chain, clock):
    import time

    from gpum_validator.settlement import SettlementLoop
    store, intake, settler = setup(store_db, chain, clock, every=1)
    feed(intake, chain_of(1))
    loop = SettlementLoop(settler, interval=0.01)
    loop.start()
    deadline = time.monotonic() + 5
    while not chain.settle_calls and time.monotonic() < deadline:
        time.sleep(0.01)
    loop.stop()
    assert len(chain.settle_calls) == 1 and store.intents()[0].status == "confirmed"


def test_v2_database_is_migrated_to_approved_totals(tmp_path, chain, clock):
    store = SQLiteStore(tmp_path / "v.sqlite")  # SQLite only: PostgreSQL starts at v4
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    feed(intake, chain_of(2))
    db = store._db
    for table, column in (("proofs", "approved_seconds"), ("proofs", "approved_total"),
                          ("jobs", "approved_total"), ("jobs", "committee"),
                          ("intents", "approved_seconds"), ("intents", "attestations")):
        db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")  # the v2 layout
    db.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    store.close()
    store = SQLiteStore(tmp_path / "v.sqlite")
    assert store.summary()["schema_version"] == SCHEMA_VERSION
    assert store.accepted_at(JOB, 2).approved_total == 120  # v2 accepted an unbroken chain
    assert store.job_state(JOB).approved_total == 120
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    feed(intake, chain_of(3)[2:])
    assert store.accepted_at(JOB, 3).approved_total == 180
    store.close()
