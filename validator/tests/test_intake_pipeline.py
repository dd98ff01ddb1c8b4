"""The intake's throughput pipeline: one signature per proof, job accounts cached
and refreshed, one store transaction per request (group commit) that is all-or-nothing."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import contextmanager

import pytest
from gpum_validator.errors import StoreError
from gpum_validator.intake import Intake
from gpum_validator.store_sqlite import SQLiteStore
from vtestkit import JOB, b58, cfg, chain_of, job_view, pk, signed_json


def batch(proofs):
    return {"proofs": [signed_json(p) for p in proofs]}


def counting_job_reads(chain):
    reads = []
    real = chain.fetch_job

    def fetch_job(address):
        reads.append(bytes(address))
        return real(address)

    chain.fetch_job = fetch_job
    return reads


def test_a_jobs_windows_read_its_account_once_not_once_per_proof(tmp_path, chain, clock):
    reads = counting_job_reads(chain)
    intake = Intake(cfg(), SQLiteStore(tmp_path / "v.sqlite"), chain, clock=lambda: clock[0])
    windows = chain_of(6)
    _, body = intake.submit_batch(batch(windows[:3]))
    assert [r["status"] for r in body["results"]] == ["accepted"] * 3
    for p in windows[3:]:
        assert intake.submit(signed_json(p))[1]["status"] == "accepted"
    assert reads == [JOB]


def test_a_subscription_seeing_the_job_change_makes_the_next_proof_read_it(tmp_path, chain, clock):
    reads = counting_job_reads(chain)
    intake = Intake(cfg(), SQLiteStore(tmp_path / "v.sqlite"), chain, clock=lambda: clock[0],
                    job_ttl=3600)
    p1, p2 = chain_of(2)
    intake.submit(signed_json(p1))
    chain.set_job(status="finishing", ended_at=p1.window_end)
    intake.jobs.forget(JOB)  # what the Job subscription does when the account changes
    _, body = intake.submit(signed_json(p2))
    assert body["error"] == "window_after_job_end" and len(reads) == 2


class FailingStore(SQLiteStore):
    """Fails the write of the n-th accepted proof of its life with a database error (by the
    reference path, or in the fast lane's rows)."""

    def __init__(self, path, fail_at: int) -> None:
        super().__init__(path)
        self.fail_at, self.writes = fail_at, 0

    def record_accepted(self, *a, **kw):
        self.writes += 1
        if self.writes == self.fail_at:
            raise StoreError("disk I/O error (injected)")
        return super().record_accepted(*a, **kw)

    def record_accepted_rows(self, new_job_rows, job_rows, proof_rows):
        super().record_accepted_rows(new_job_rows, job_rows, proof_rows)  # written, then lost
        self.writes += len(proof_rows)
        if self.writes >= self.fail_at > self.writes - len(proof_rows):
            raise StoreError("disk I/O error (injected)")


def test_a_database_failure_inside_a_batch_keeps_nothing_of_it_and_answers_503_to_all(
        tmp_path, chain, clock):
    store = FailingStore(tmp_path / "v.sqlite", fail_at=3)
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    windows = chain_of(4)
    status, body = intake.submit_batch(batch(windows))
    assert status == 200
    assert [(r["error"], r["retry"]) for r in body["results"]] == [
        ("store_unavailable", True)] * 4
    assert store.job_state(JOB) is None and store.proofs_at(JOB, 1) == []
    status, body = intake.submit_batch(batch(windows))  # the worker's retry
    assert [r["status"] for r in body["results"]] == ["accepted"] * 4
    assert store.job_state(JOB).last_seq == 4


def test_answers_of_a_batch_are_given_after_its_commit(tmp_path, chain, clock):
    store = SQLiteStore(tmp_path / "v.sqlite")
    batches = []
    real_batch = store.batch

    def counting_batch(durable=True):
        batches.append(1)
        return real_batch(durable)

    store.batch = counting_batch
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    _, body = intake.submit_batch(batch(chain_of(3)))
    assert [r["status"] for r in body["results"]] == ["accepted"] * 3
    assert batches == [1]  # one transaction for the request
    other = sqlite3.connect(tmp_path / "v.sqlite")  # another reader sees it: committed
    assert other.execute("SELECT COUNT(*) FROM proofs WHERE decision='accepted'"
                         ).fetchone() == (3,)
    other.close()


class SlowCommitStore(SQLiteStore):
    """Each transaction takes 50 ms longer to commit (a slow disk)."""

    @contextmanager
    def batch(self, durable=True):
        with super().batch(durable):
            yield
            time.sleep(0.05)


def test_concurrent_single_proofs_share_commits_and_all_are_durable(tmp_path, chain, clock):
    store = SlowCommitStore(tmp_path / "v.sqlite")
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    jobs = [bytes([200 + i] * 32) for i in range(16)]
    for j in jobs:
        chain.jobs[j] = job_view(address=pk(j))
    answers = []
    lock = threading.Lock()

    def worker(job):
        for p in chain_of(2, job=job):
            status, body = intake.submit(signed_json(p))
            with lock:
                answers.append((status, body.get("status")))

    threads = [threading.Thread(target=worker, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [(200, "accepted")] * 32
    assert intake._group.rounds < 32  # requests that arrived during a commit shared the next
    for j in jobs:
        assert store.job_state(j).last_seq == 2


def test_a_retry_of_an_accepted_proof_is_a_duplicate_while_the_chain_is_down(
        tmp_path, chain, clock):
    intake = Intake(cfg(), SQLiteStore(tmp_path / "v.sqlite"), chain, clock=lambda: clock[0])
    p1, p2 = chain_of(2)
    assert intake.submit(signed_json(p1))[1]["status"] == "accepted"
    chain.down = True
    intake.jobs.forget(JOB)  # the cached account expired: the next proof must read the chain
    assert intake.submit(signed_json(p1)) == (200, {"status": "duplicate", "job": b58(JOB),
                                                    "seq": 1})
    status, body = intake.submit(signed_json(p2))  # a new window does need the chain
    assert (status, body["error"]) == (503, "chain_unavailable")


class HeldSyncStore(SQLiteStore):
    """The first ``make_durable`` waits until ``go`` is set (a slow fsync)."""

    def __init__(self, path) -> None:
        self.go, self.waiting, self.held = threading.Event(), threading.Event(), False
        super().__init__(path)

    def make_durable(self) -> None:
        if not self.held and threading.current_thread().name == "first":
            self.held = True
            self.waiting.set()
            assert self.go.wait(10)
        super().make_durable()


def test_the_next_group_writes_while_a_groups_fsync_runs(tmp_path, chain, clock):
    """The group commit's leader releases the next group once its transaction is committed,
    and answers its own callers only once its fsync returns."""
    store = HeldSyncStore(tmp_path / "v.sqlite")
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    other = bytes([210] * 32)
    chain.jobs[other] = job_view(address=pk(other))
    first = []
    t = threading.Thread(target=lambda: first.append(intake.submit_batch(
        batch(chain_of(2)))), name="first")
    t.start()
    assert store.waiting.wait(10)  # the first group is committed, its fsync held
    _, body = intake.submit_batch(batch(chain_of(2, job=other)))  # not held up by it
    assert [r["status"] for r in body["results"]] == ["accepted"] * 2
    assert first == [] and t.is_alive()  # not answered before its fsync
    store.go.set()
    t.join(10)
    assert [r["status"] for r in first[0][1]["results"]] == ["accepted"] * 2


def test_a_failed_fsync_answers_503_and_the_store_refuses_writes_from_then_on(
        tmp_path, chain, clock, monkeypatch):
    store = SQLiteStore(tmp_path / "v.sqlite")
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    ps = chain_of(3)
    assert intake.submit(signed_json(ps[0]))[1]["status"] == "accepted"

    def broken(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("gpum_validator.store_sqlite.os.fdatasync", broken)
    status, body = intake.submit(signed_json(ps[1]))
    assert (status, body["error"]) == (503, "store_unavailable") and "fsync" in body["message"]
    monkeypatch.undo()  # the disk answers again: what was lost is unknown, so still refused
    status, body = intake.submit(signed_json(ps[2]))
    assert (status, body["error"]) == (503, "store_unavailable")
    with pytest.raises(StoreError, match="restart the validator"):
        store.set_meta("k", "v")


def test_one_fsync_per_committed_write_and_none_for_a_read(tmp_path, monkeypatch):
    store = SQLiteStore(tmp_path / "v.sqlite")
    calls = []
    real = os.fdatasync
    monkeypatch.setattr("gpum_validator.store_sqlite.os.fdatasync",
                        lambda fd: calls.append(fd) or real(fd))
    store.set_meta("a", "1")
    assert len(calls) == 1  # durable when it returns
    with store._tx():
        pass  # a transaction that changed nothing
    assert len(calls) == 1
    with store.batch(durable=False):
        store.set_meta("b", "2")
    with store.batch(durable=False):
        store.set_meta("c", "3")
    assert len(calls) == 1
    store.make_durable()  # one fsync covers both
    store.make_durable()
    assert len(calls) == 2
    store.close()
