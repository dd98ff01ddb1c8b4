"""The intake's throughput pipeline (issue 9): one signature per proof, job accounts cached
and refreshed, one store transaction per request (group commit) that is all-or-nothing."""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager

from gpum_validator.errors import StoreError
from gpum_validator.service import Intake
from gpum_validator.store import SQLiteStore
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

    def counting_batch():
        batches.append(1)
        return real_batch()

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
    def batch(self):
        with super().batch():
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
