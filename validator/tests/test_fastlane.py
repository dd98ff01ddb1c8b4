"""The intake's fast lane (gpum_validator.fastlane) decides exactly as the reference path.

Every test runs the same traffic through two intakes on two databases: one with the lane
(``SQLiteStore``), one without (``ReferenceStore``: ``serial_writers`` False, so every proof
takes the reference path, ``Intake._judge``), and compares every answer and every stored row.
The traffic is randomized and hostile: duplicates, equivocations, gaps, broken hash chains,
cumulative lies, windows from the future, unhealthy GPUs, changed GPU sets, settlements and
job ends on chain, key rotations, another process writing the database.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from gpu_market.proof import ZERO_HASH, encode_proof, proof_hash
from gpum_validator import fastlane
from gpum_validator.chain import job_info
from gpum_validator.errors import StoreError
from gpum_validator.intake import Intake
from gpum_validator.store_sqlite import SQLiteStore
from vtestkit import (
    JOB,
    OTHER_KEY,
    OTHER_PUB,
    PROVIDER,
    T0,
    WINDOW,
    WORKER_KEY,
    FakeChain,
    cfg,
    gpu,
    job_view,
    make_proof,
    pk,
    retired,
    signed_json,
)

JOBS = (JOB, bytes([21] * 32), bytes([22] * 32))


class ReferenceStore(SQLiteStore):
    """A SQLite store on which the intake never runs the fast lane."""

    serial_writers = False


class Worker:
    """One job's honest worker: its own hash chain of signed windows."""

    def __init__(self, job: bytes) -> None:
        self.job = job
        self.seq = 0
        self.prev = ZERO_HASH
        self.cumulative = 0
        self.sent: list[dict[str, str]] = []
        self.key = WORKER_KEY
        self.worker_pub = None
        self.before: dict[int, tuple[bytes, int, int]] = {}
        """Per seq signed: the prev hash, cumulative seconds and window end it followed."""
        self.window_end = T0

    def window(self, rng: random.Random, kind: str = "honest") -> dict[str, str]:
        """The worker's next window (it signs it, so its next one chains to it)."""
        seq = self.seq + 1
        billable = WINDOW
        gpus = None
        kw = {}
        if kind == "hot":
            gpus = (gpu("GPU-aaaa", temp_max_c=95), gpu("GPU-bbbb"))
        elif kind == "ecc":
            gpus = (gpu("GPU-aaaa", ecc_uncorrected_delta=3), gpu("GPU-bbbb"))
        elif kind == "idle":
            gpus = (gpu("GPU-aaaa", covered_seconds=rng.randrange(0, WINDOW)), gpu("GPU-bbbb"))
        elif kind == "swap":
            gpus = (gpu("GPU-aaaa"), gpu("GPU-cccc"))
        elif kind == "three":
            gpus = (gpu("GPU-aaaa"), gpu("GPU-bbbb"), gpu("GPU-cccc"))
        elif kind == "partial":
            billable = rng.randrange(0, WINDOW)
        elif kind == "bad_prev":
            kw["prev"] = bytes([5] * 32)
        if kind == "lie":
            cumulative = self.cumulative + billable + rng.choice((-1, 1, WINDOW))
        else:
            cumulative = self.cumulative + billable
        if self.worker_pub is not None:
            kw["worker_key"] = self.worker_pub
        p = make_proof(seq, prev=kw.pop("prev", self.prev), job=self.job, billable=billable,
                       cumulative=cumulative, gpus=gpus, **kw)
        if kind == "future":
            p = replace(p, window_start=T0 + 10**6, window_end=T0 + 10**6 + WINDOW)
        elif kind == "overlap":  # starts before the previous window ended
            start = self.window_end - rng.randrange(1, 30)
            p = replace(p, window_start=start, window_end=start + WINDOW)
        self.before[seq] = (self.prev, self.cumulative, self.window_end)
        self.seq, self.prev, self.cumulative = seq, proof_hash(encode_proof(p)), cumulative
        self.window_end = max(self.window_end, p.window_end)
        obj = signed_json(p, self.key)
        self.sent.append(obj)
        return obj

    def other_version(self, seq: int) -> dict[str, str]:
        """A second proof for a seq already signed, different but consistent with the windows
        before it (equivocation: valid on its own)."""
        prev, cumulative, _ = self.before[seq]
        p = make_proof(seq, prev=prev, job=self.job, billable=WINDOW - 1,
                       cumulative=cumulative + WINDOW - 1,
                       **({"worker_key": self.worker_pub} if self.worker_pub else {}))
        return signed_json(p, self.key)


def tables(path: Path) -> dict[str, list[tuple]]:
    db = sqlite3.connect(path)
    try:
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3").fetchall()
                for t in ("proofs", "jobs", "missed_windows", "equivocations")}
    finally:
        db.close()


class Twin:
    """The same traffic into an intake with the lane and one without."""

    def __init__(self, tmp: Path, chain: FakeChain, clock: list[float]) -> None:
        self.chain, self.clock = chain, clock
        self.paths = (tmp / "lane.sqlite", tmp / "reference.sqlite")
        self.stores = (SQLiteStore(self.paths[0]), ReferenceStore(self.paths[1]))
        self.intakes = tuple(Intake(cfg(), s, chain, clock=lambda: clock[0], job_ttl=0)
                             for s in self.stores)
        self.reference_calls = [0, 0]
        for i, intake in enumerate(self.intakes):
            real = intake._judge

            def counted(*a, _real=real, _i=i, **kw):
                self.reference_calls[_i] += 1
                return _real(*a, **kw)

            intake._judge = counted
        self.proofs = 0

    def send(self, objs: list[object]) -> list[dict]:
        self.proofs += len(objs)
        if len(objs) == 1:
            answers = [i.submit(objs[0]) for i in self.intakes]
            assert answers[0] == answers[1], objs
            return [answers[0][1]]
        answers = [i.submit_batch({"proofs": objs}) for i in self.intakes]
        assert answers[0] == answers[1], objs
        return answers[0][1]["results"]

    def assert_same_rows(self) -> None:
        lane, reference = (tables(p) for p in self.paths)
        for t in lane:
            assert lane[t] == reference[t], t


MOVES = ("honest",) * 12 + ("batch",) * 4 + (
    "duplicate", "equivocation", "gap", "hot", "ecc", "idle", "partial", "swap", "three",
    "bad_prev", "lie", "future", "overlap", "settle", "finish", "rotate", "clock", "foreign")


@pytest.mark.parametrize("seed", range(12))
def test_randomized_hostile_traffic_is_decided_and_stored_as_the_reference_does(
        tmp_path, seed):
    rng = random.Random(seed)
    chain = FakeChain()
    for j in JOBS:
        chain.jobs[j] = job_view(address=pk(j), deposited=10**12)
    clock = [float(T0 + 10**5)]
    twin = Twin(tmp_path, chain, clock)
    workers = {j: Worker(j) for j in JOBS}
    accepted = 0
    for _ in range(120):
        move = rng.choice(MOVES)
        w = workers[rng.choice(JOBS)]
        if move == "honest":
            objs = [w.window(rng)]
        elif move == "batch":
            objs = [workers[rng.choice(JOBS)].window(rng) for _ in range(rng.randrange(2, 9))]
            if rng.random() < 0.3:  # a retry of something already sent, inside the batch
                objs.insert(rng.randrange(len(objs)), rng.choice(objs))
        elif move == "duplicate" and w.sent:
            objs = [rng.choice(w.sent)]
        elif move == "equivocation" and w.seq:
            objs = [w.other_version(rng.randrange(1, w.seq + 1))]
        elif move == "gap":
            w.window(rng)  # signed, never delivered
            objs = [w.window(rng)]
        elif move in ("hot", "ecc", "idle", "partial", "swap", "three", "bad_prev", "lie",
                      "future", "overlap"):
            objs = [w.window(rng, move)]
        elif move == "settle" and w.seq:
            # The committee settled up to some seq this worker signed (as the chain saw it).
            seq = rng.randrange(1, w.seq + 1)
            chain.jobs[w.job] = replace(chain.jobs[w.job], last_seq=seq,
                                        claimed_seconds=seq * WINDOW, paid_seconds=seq * 50,
                                        last_receipt_hash=bytes([seq % 256] * 32),
                                        last_window_end=T0 + seq * WINDOW)
            continue
        elif move == "finish":
            end = T0 + (w.seq + rng.randrange(0, 3)) * WINDOW
            chain.jobs[w.job] = replace(chain.jobs[w.job], status="finishing", ended_at=end)
            continue
        elif move == "rotate":
            # The provider rotates to a new key: the old one is retired now (its windows up
            # to now still count) and the workers sign with the new one.
            chain.providers[PROVIDER] = replace(
                chain.providers[PROVIDER], worker_key=pk(OTHER_PUB),
                retired_keys=retired((bytes(chain.providers[PROVIDER].worker_key),
                                      int(clock[0]))))
            for x in workers.values():
                x.key, x.worker_pub = OTHER_KEY, OTHER_PUB
            continue
        elif move == "clock":
            clock[0] += rng.choice((1, 30, 600))
            continue
        elif move == "foreign":
            # Another process writes the databases: the lane's memo must not be trusted.
            for path in twin.paths:
                other = SQLiteStore(path)
                other.update_chain_info(w.job, job_info(chain.jobs[w.job]), clock[0])
                other.close()
            continue
        else:
            continue
        results = twin.send(objs)
        accepted += sum(r.get("status") == "accepted" for r in results)
    twin.assert_same_rows()
    assert accepted > 20, "the traffic should be mostly honest"
    assert twin.reference_calls[1] >= accepted
    assert twin.reference_calls[0] < twin.reference_calls[1]  # the lane decided some itself


def one_job(tmp_path: Path, seed: int) -> tuple[Twin, Worker, random.Random]:
    """A twin on a fresh chain with one job, that job's worker, a seeded random source."""
    chain = FakeChain()
    clock = [float(T0 + 10**5)]
    return Twin(tmp_path, chain, clock), Worker(JOB), random.Random(seed)


def test_the_lane_decides_a_jobs_steady_windows_without_the_reference_path(tmp_path):
    twin, w, rng = one_job(tmp_path, seed=1)
    for _ in range(5):
        assert twin.send([w.window(rng)])[0]["status"] == "accepted"
    assert twin.send([w.window(rng) for _ in range(6)]) and twin.reference_calls[0] == 0
    twin.assert_same_rows()
    # A new intake on the same database (a restart) loads the job's state from the store.
    again = Intake(cfg(), SQLiteStore(twin.paths[0]), twin.chain, clock=lambda: twin.clock[0])
    again._judge = None  # the reference path is never needed for the next window
    assert again.submit(w.window(rng))[1]["status"] == "accepted"


def test_lane_accepts_are_logged_at_debug_as_the_reference_logs_them(tmp_path, caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="gpum_validator")
    twin, w, rng = one_job(tmp_path, seed=2)
    for _ in range(3):  # each goes to the lane's intake, then to the reference's
        twin.send([w.window(rng)])
    assert twin.reference_calls[0] == 0 and twin.reference_calls[1] == 3
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("accepted ")]
    assert len(lines) == 6 and lines[0::2] == lines[1::2]
    assert "seq=3 " in lines[-1]


def test_another_process_storing_a_rejected_window_is_seen_before_the_next_accept(tmp_path):
    """The lane's memo says nothing is stored above the job's last seq; another process
    sharing the SQLite file may store a (rejected) window there. The honest window for that
    seq is then an equivocation, as the reference path answers, not a second accept."""
    chain = FakeChain()
    clock = [float(T0 + 10**5)]
    path = tmp_path / "v.sqlite"
    mine = Intake(cfg(), SQLiteStore(path), chain, clock=lambda: clock[0])
    w = Worker(JOB)
    rng = random.Random(2)
    for _ in range(3):
        assert mine.submit(w.window(rng))[1]["status"] == "accepted"
    honest = make_proof(4, prev=w.prev, cumulative=4 * WINDOW)
    lie = replace(honest, cumulative_seconds=4 * WINDOW + 1)  # stored, rejected
    theirs = Intake(cfg(), SQLiteStore(path), chain, clock=lambda: clock[0])
    status, body = theirs.submit(signed_json(lie))
    assert (status, body["error"]) == (422, "cumulative_mismatch")
    status, body = mine.submit(signed_json(honest))
    assert (status, body["error"]) == (409, "equivocation")


def test_a_failed_commit_drops_the_memo_and_the_retry_is_accepted(tmp_path):
    chain = FakeChain()
    clock = [float(T0 + 10**5)]
    store = SQLiteStore(tmp_path / "v.sqlite")
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    w = Worker(JOB)
    rng = random.Random(3)
    first = [w.window(rng) for _ in range(3)]
    assert [r["status"] for r in intake.submit_batch({"proofs": first})[1]["results"]] == [
        "accepted"] * 3
    nxt = [w.window(rng) for _ in range(2)]
    real = store.record_accepted_rows

    def broken(*a):
        real(*a)
        raise StoreError("disk I/O error (injected)")

    store.record_accepted_rows = broken
    results = intake.submit_batch({"proofs": nxt})[1]["results"]
    assert [r["error"] for r in results] == ["store_unavailable"] * 2
    assert intake._memo == {} and store.job_state(JOB).last_seq == 3
    store.record_accepted_rows = real
    results = intake.submit_batch({"proofs": nxt})[1]["results"]
    assert [r["status"] for r in results] == ["accepted"] * 2


def test_rows_whose_job_moved_behind_the_memo_fail_the_group(tmp_path):
    """The compare-and-set: a job row not at the last_seq the lane judged against is never
    overwritten (StoreError, the transaction rolled back)."""
    store = SQLiteStore(tmp_path / "v.sqlite")
    info = job_info(job_view(address=pk(JOB)))
    with pytest.raises(StoreError, match="job state changed"), store.batch():
        store.record_accepted_rows([], [(2, 120, T0 + 120, 1.0, 120, JOB, 1)], [])
    with store.batch():
        store.record_accepted_rows([(JOB, 1, 60, T0 + 60, '["GPU-aaaa"]', 1.0, 60, info, 1.0)],
                                   [], [])
    with pytest.raises(StoreError), store.batch():
        store.record_accepted_rows([(JOB, 1, 60, T0 + 60, '["GPU-aaaa"]', 1.0, 60, info, 1.0)],
                                   [], [])
    assert store.intake_memo(JOB)[:2] == (0, store.job_state(JOB))
    assert store.intake_memo(bytes(32)) == (0, None, 0.0)


def test_a_first_window_stored_as_rejected_is_seen_by_the_lane(tmp_path):
    """A job with no state row but a rejected first window stored: the honest first window is
    then an equivocation (the reference's answer), not the job's fresh start."""
    twin, w, rng = one_job(tmp_path, seed=4)
    assert twin.send([w.window(rng, "three")])[0]["error"] == "gpu_count_mismatch"
    assert twin.send([w.other_version(1)])[0]["error"] == "equivocation"
    twin.assert_same_rows()


def test_a_window_overlapping_the_last_accepted_one_is_left_to_the_reference(tmp_path):
    twin, w, rng = one_job(tmp_path, seed=5)
    assert twin.send([w.window(rng) for _ in range(3)])[-1]["status"] == "accepted"
    assert twin.send([w.window(rng, "overlap")])[0]["error"] == "window_overlap"
    twin.assert_same_rows()


def test_facts_are_computed_once_per_view_and_bounded():
    made = []
    cache = fastlane.FactsCache(lambda v: made.append(v) or len(made), max_entries=2)
    a, b = object(), object()
    assert cache.get(b"x", a) == 1 and cache.get(b"x", a) == 1
    assert cache.get(b"x", b) == 2  # the account was read again: new view, new facts
    cache.get(b"y", a)
    cache.get(b"z", a)
    assert len(cache._map) == 2 and b"x" not in cache._map


def test_two_intakes_on_one_store_share_what_the_lane_knows(tmp_path):
    """Two intakes on one store object (one connection: ``data_version`` never moves
    between them): a rejected window the second one stores is seen by the first."""
    chain = FakeChain()
    clock = [float(T0 + 10**5)]
    store = SQLiteStore(tmp_path / "v.sqlite")
    mine, theirs = (Intake(cfg(), store, chain, clock=lambda: clock[0]) for _ in range(2))
    w = Worker(JOB)
    rng = random.Random(6)
    for _ in range(3):
        assert mine.submit(w.window(rng))[1]["status"] == "accepted"
    honest = make_proof(4, prev=w.prev, cumulative=4 * WINDOW)
    status, body = theirs.submit(signed_json(replace(honest, cumulative_seconds=4 * WINDOW + 1)))
    assert (status, body["error"]) == (422, "cumulative_mismatch")
    status, body = mine.submit(signed_json(honest))
    assert (status, body["error"]) == (409, "equivocation")
