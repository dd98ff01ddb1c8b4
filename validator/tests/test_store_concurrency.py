"""Several store objects on one database, from threads and from processes (several
validator processes may share one PostgreSQL database). The same tests run on SQLite, where
two processes on one file must be just as safe."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from typing import Any

import pytest
import storekit
from gpum_validator.errors import StoreError
from gpum_validator.records import GivenAttestation, ReceivedAttestation
from gpum_validator.verify import Verdict
from storekit import accept, auth_of, summary_counts, table_counts
from vtestkit import T0, chain_of, make_proof

NOW = float(T0 + 3600)
MEMBER = bytes([101] * 32)
LEADER = bytes([102] * 32)


@pytest.fixture(params=storekit.BACKENDS)
def store_db(request, tmp_path):
    yield from storekit.store_db(request, tmp_path)


def job_key(i: int) -> bytes:
    return bytes([40 + i % 200]) * 31 + bytes([i // 200])


def race(*fns: Callable[[], Any]) -> list[Any]:
    """Run the callables at the same moment on threads; each one's result or exception."""
    barrier = threading.Barrier(len(fns))
    out: list[Any] = [None] * len(fns)

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = fns[i]()
        except Exception as e:  # noqa: BLE001 - returned for the test to judge
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_concurrent_accepts_of_one_job_one_wins(store_db):
    """Two processes verified different proofs of one job against the same stored state:
    exactly one is accepted, the other gets "job state changed" and changes nothing."""
    a, b = store_db.open(), store_db.open()
    for i in range(8):
        job = job_key(i)
        mine = make_proof(1, job=job)
        theirs = make_proof(1, job=job, billable=59, cumulative=59)
        out = race(lambda s=a, p=mine: s.record_accepted(auth_of(p), Verdict((), 60, 60, 60),
                                                           None, NOW),
                   lambda s=b, p=theirs: s.record_accepted(auth_of(p),
                                                           Verdict((), 59, 59, 59), None, NOW))
        errors = [r for r in out if isinstance(r, StoreError)]
        assert len(errors) == 1 and "job state changed" in str(errors[0]), out
        winner = mine if out[0] is None else theirs
        assert [p.hash for p in a.proofs_at(job, 1)] == [auth_of(winner).hash]
        assert b.job_state(job).approved_total == winner.billable_seconds
        # The next window, again from both at once, against last_seq 1.
        p2 = chain_of(2, job=job)[1]
        out = race(*(lambda s=s, p=p2: s.record_accepted(auth_of(p), Verdict((), 60, 60, 120),
                                                         1, NOW) for s in (a, b)))
        assert sum(isinstance(r, StoreError) for r in out) == 1, out
        assert a.job_state(job).last_seq == 2
    assert summary_counts(a) == table_counts(a)


def test_one_value_per_seq_between_threads(store_db):
    a, b = store_db.open(), store_db.open()
    job = job_key(1)
    for seq in range(1, 21):
        out = race(*(lambda s=s, v=v, seq=seq: s.record_given_attestation(GivenAttestation(
            job, seq, v, bytes(32), bytes([v % 256]) * 64, LEADER, NOW))
            for s, v in ((a, 100 + seq), (b, 200 + seq))))
        assert not any(isinstance(r, Exception) for r in out), out
        assert out[0] == out[1] == a.given_attestation(job, seq)
    assert a.summary()["attestations_signed"] == 20


def _sign_in_process(kind: str, target: str, value: int, seqs: int,
                     barrier: Any, results: Any) -> None:
    """A validator process: for each seq, sign ``value`` unless a value is stored."""
    if kind == "sqlite":
        from gpum_validator.store_sqlite import SQLiteStore

        store: Any = SQLiteStore(target)
    else:
        from gpum_validator.store_pg import PostgresStore

        store = PostgresStore(target)
    try:
        for seq in range(1, seqs + 1):
            barrier.wait(60)
            given = store.given_attestation(bytes([9] * 32), seq)
            if given is None:
                given = store.record_given_attestation(GivenAttestation(
                    bytes([9] * 32), seq, value, bytes(32), bytes([value]) * 64, None, NOW))
            results.put((value, seq, given.approved_seconds))
    finally:
        store.close()


def test_one_value_per_seq_between_processes(store_db):
    """Two validator processes asked to sign (job, seq) at the same moment with different
    values: both end up with the one value stored first, never two."""
    store_db.open().close()  # the schema exists before they start
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    seqs = 15
    procs = [ctx.Process(target=_sign_in_process,
                         args=(store_db.kind, store_db.target, v, seqs, barrier, results))
             for v in (7, 8)]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in range(2 * seqs)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = store_db.open()
    for seq in range(1, seqs + 1):
        seen = {v for _, s, v in got if s == seq}
        stored = store.given_attestation(bytes([9] * 32), seq)
        assert seen == {stored.approved_seconds}, (seq, got)
    assert store.summary()["attestations_signed"] == seqs


def test_received_attestations_race_records_one_case(store_db):
    a, b = store_db.open(), store_db.open()
    job = job_key(2)
    for seq in range(1, 11):
        out = race(*(lambda s=s, v=v, seq=seq: s.record_received_attestation(
            ReceivedAttestation(job, seq, LEADER, v, 60 * seq, T0 + 60 * seq, bytes(32),
                                bytes(64), NOW))
            for s, v in ((a, 60 * seq), (b, 60 * seq - 1))))
        assert sorted(out) == [False, True], out  # the second of the two makes the case
    cases = a.validator_equivocation_cases()
    assert sorted(c.seq for c in cases) == list(range(1, 11))


def test_intents_of_two_processes_cover_the_highest_seq(store_db):
    a, b = store_db.open(), store_db.open()
    job = job_key(3)
    stored = [accept(a, p, NOW) for p in chain_of(6, job=job)]
    out = race(lambda: a.add_intent(stored[3], 1, NOW), lambda: b.add_intent(stored[5], 1, NOW))
    assert not any(isinstance(r, Exception) for r in out)
    assert a.settle_candidates() == [] and len(b.intents(job)) == 2
    out = race(lambda: a.mark_intent(out[0].id, "confirmed", NOW),
               lambda: b.mark_intent(out[1].id, "confirmed", NOW))
    assert a.pending_windows() == 0


def test_counters_with_concurrent_writers(store_db):
    stores = [store_db.open(), store_db.open()]

    def writer(k: int) -> None:
        s = stores[k % 2]
        for i in range(12):
            for p in chain_of(3, job=job_key(100 + 20 * k + i)):
                accept(s, p, NOW)

    out = race(*(lambda k=k: writer(k) for k in range(4)))
    assert out == [None] * 4
    assert summary_counts(stores[0]) == table_counts(stores[0])
    assert stores[1].summary()["proofs"] == {"accepted": 4 * 12 * 3}
    stores[0]._compact_counters()
    assert summary_counts(stores[1]) == table_counts(stores[1])


def test_batch_is_one_transaction(store_db):
    a, b = store_db.open(), store_db.open()
    job = job_key(4)
    p1, p2, p3 = chain_of(3, job=job)
    inside, release = threading.Event(), threading.Event()

    def batched() -> None:
        with a.batch():
            accept(a, p1, NOW)
            with a.batch():  # nested: joins
                accept(a, p2, NOW)
            inside.set()
            release.wait(30)

    t = threading.Thread(target=batched)
    t.start()
    assert inside.wait(30)
    assert b.job_state(job) is None  # nothing visible before the batch ends
    release.set()
    t.join(30)
    assert b.job_state(job).last_seq == 2
    # An exception rolls everything back.
    with pytest.raises(RuntimeError), a.batch():
        accept(a, p3, NOW)
        raise RuntimeError("boom")
    assert b.job_state(job).last_seq == 2 and a.proofs_at(job, 3) == []
    # A failed call inside a batch leaves the rest of the batch intact.
    with a.batch():
        with pytest.raises(StoreError, match="job state changed"):
            a.record_accepted(auth_of(p3), Verdict((), 60, 60, 180), 1, NOW)
        with pytest.raises(StoreError), a._tx() as db:
            db.execute("SELECT no_such_column FROM jobs")
        accept(a, p3, NOW)
    assert b.job_state(job).last_seq == 3
    assert summary_counts(b) == table_counts(b)


def test_stores_opening_together_share_one_schema(store_db):
    out = race(*(store_db.open for _ in range(3)))
    assert not any(isinstance(r, Exception) for r in out), out
    store_db.opened.extend(r for r in out if r not in store_db.opened)
    assert all(s.summary()["schema_version"] == out[0].summary()["schema_version"]
               for s in out)


def test_one_attestation_per_seq_through_the_signing_gate(store_db):
    """Two processes' ``AttestationSigner``s on one database sign different values for one
    (job, seq) at the same moment: one value is signed; the other caller gets that value's
    stored signature refused (``SignedOtherValue``), never a signature of its own value."""
    from gpu_market.receipt import verify
    from gpum_validator.attest import attestation_message, receipt_message_of
    from gpum_validator.signing import AttestationSigner, SignedOtherValue
    from vtestkit import VALIDATOR_KEYS

    key = VALIDATOR_KEYS[0]
    a, b = store_db.open(), store_db.open()
    for seq in range(1, 9):
        job = job_key(100 + seq)
        stored = accept(a, make_proof(1, job=job), NOW)
        out = race(*(lambda s=s, v=v, p=stored: AttestationSigner(key, s).sign(p, v, None)
                     for s, v in ((a, 60), (b, 59))))
        signed = [o for o in out if not isinstance(o, SignedOtherValue)]
        assert len(signed) == 1, out
        refused = next(o for o in out if isinstance(o, SignedOtherValue))
        value = signed[0].approved_seconds
        assert refused.given.approved_seconds == value
        assert verify(bytes(key.pubkey()), signed[0].signature,
                      attestation_message(receipt_message_of(stored), value))
        assert b.given_attestation(job, 1).signature == signed[0].signature
