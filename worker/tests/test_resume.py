"""Lost or replaced state never makes the worker sign a (job, seq) twice.

Validators are real HTTP servers on 127.0.0.1 (``StubValidator``) serving
``GET /v1/jobs/<job>/head``; the worker core is driven with explicit time. Each test checks
with the stubs' record of every proof they ever received that no (job, seq) got two
different proofs.
"""

from __future__ import annotations

import base64
import random
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from agentkit import run_seconds
from fakes import FakeBackend, FakeGpu
from gpu_market.net import BoundedClient
from gpu_market.proof import (
    ZERO_HASH,
    GpuWindow,
    WindowProof,
    encode_proof,
    proof_hash,
    receipt_for_proof,
    sign_proof,
    verify_proof,
)
from gpu_market.receipt import private_key_from_seed, public_key_bytes, sign_receipt
from gpum_worker.agent import Agent
from gpum_worker.heads import HttpHeadSource
from gpum_worker.jobs import AssignedJob, StaticJobSource
from gpum_worker.keys import WorkerKey, b58encode
from gpum_worker.outbox import Outbox
from gpum_worker.sender import RetryPolicy, Sender
from gpum_worker.stub_validator import StubValidator

T0 = 1_700_000_000
W = 10
JOB = AssignedJob(job=b"\x05" * 32, market=b"\x02" * 32, program_id=b"\x01" * 32,
                  provider=b"\x03" * 32, gpu_count=1, status="running", started_at=T0)


def make_key(n: int) -> WorkerKey:
    seed = bytes([n]) * 32
    sk = private_key_from_seed(seed)
    return WorkerKey(sk, seed, public_key_bytes(sk))


@pytest.fixture
def stubs() -> Iterator[list[StubValidator]]:
    s = [StubValidator().start(), StubValidator().start()]
    yield s
    for v in s:
        v.stop()


class Worker:
    """One incarnation of the worker: agent + sender over one outbox database."""

    def __init__(self, db: Path, key: WorkerKey, stubs: list[StubValidator],
                 job: AssignedJob = JOB, trusted: tuple[bytes, ...] = ()) -> None:
        self.outbox = Outbox(db, key.pubkey, [s.url for s in stubs])
        self.client = BoundedClient(2.0)
        self.source = StaticJobSource([job], clock=lambda: T0, worker_keys=trusted)
        self.agent = Agent(backend=FakeBackend([FakeGpu("GPU-0")]), job_source=self.source,
                           outbox=self.outbox, key=key, window_seconds=W,
                           heads=HttpHeadSource(self.client, 2.0))
        self.agent.start()
        self.outbox.sync_validators()  # as Agent.run does at start: pending proofs due now
        self.sender = Sender(self.outbox, self.client, RetryPolicy(base_s=0.01, cap_s=0.01),
                             random.Random(1), clock=lambda: 1e12)

    def run(self, start: int, end: int) -> list[WindowProof]:
        """Sample every second of [start, end), close due windows, deliver everything."""
        self.agent.poll_jobs(start)
        proofs = run_seconds(self.agent, start, end)
        self.sender.deliver_once()
        return proofs

    def close(self) -> None:
        self.outbox.close()
        self.client.close()


def delete_db(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def proved_then_lost(tmp_path: Path, key: WorkerKey, stubs: list[StubValidator],
                     end: int) -> Path:
    """A worker proved and delivered [T0, ``end``), then its outbox database was lost; the
    database's path."""
    db = tmp_path / "outbox.sqlite"
    w = Worker(db, key, stubs)
    w.run(T0, end)
    w.close()
    delete_db(db)
    return db


def assert_never_equivocated(stubs: list[StubValidator], last_seq: int) -> None:
    for s in stubs:
        assert s.equivocations == 0
        assert all(len(h) == 1 for h in s.seen.values()), "a (job, seq) got two proofs"
        assert sorted(seq for (_, seq) in s.stored) == list(range(1, last_seq + 1))
    # Every validator holds the same bytes for every (job, seq).
    assert stubs[0].stored == stubs[1].stored


def signed_head(key: WorkerKey, seq: int, prev: bytes, start: int, cumulative: int,
                job: AssignedJob = JOB) -> dict:
    """A head answer carrying a proof really signed by ``key``."""
    p = WindowProof(program_id=job.program_id, market=job.market, job=job.job,
                    provider=job.provider, worker_key=key.pubkey, seq=seq, window_start=start,
                    window_end=start + W, sample_interval_ms=1000,
                    gpus=(GpuWindow("GPU-0", W, W),), process_list_hash=ZERO_HASH,
                    prev_proof_hash=prev, health_flags=0, billable_seconds=W,
                    cumulative_seconds=cumulative)
    raw = encode_proof(p)
    return {"job": b58encode(job.job), "seq": seq, "decision": "accepted",
            "proof": base64.b64encode(raw).decode(),
            "proof_signature": base64.b64encode(sign_proof(key.private_key, raw)).decode(),
            "receipt_signature": base64.b64encode(
                sign_receipt(key.private_key, receipt_for_proof(p, raw))).decode(),
            "worker_key": key.pubkey_b58}


# ---------------------------------------------------------------------------- lost database


@pytest.mark.parametrize("new_key", [False, True], ids=["same-key", "new-key"])
def test_lost_database_resumes_after_the_validators_head(tmp_path: Path, key: WorkerKey,
                                                         stubs: list[StubValidator],
                                                         new_key: bool) -> None:
    db = tmp_path / "outbox.sqlite"
    w = Worker(db, key, stubs)
    first = w.run(T0, T0 + 3 * W)
    assert [p.seq for p in first] == [1, 2, 3]
    w.close()
    delete_db(db)  # the disk is gone

    key2 = make_key(77) if new_key else key
    w2 = Worker(db, key2, stubs, trusted=(key.pubkey,))
    later = w2.run(T0 + 3 * W + 5, T0 + 6 * W)
    w2.close()
    assert [p.seq for p in later] == [4, 5, 6]
    assert later[0].prev_proof_hash == stubs[0].stored[(JOB.job, 3)]  # hash chain continues
    assert later[0].window_start == T0 + 3 * W  # right after the head's window
    assert later[0].cumulative_seconds == 30 + later[0].billable_seconds
    assert later[0].billable_seconds == 5  # the 5 s nobody observed are lost, not re-billed
    assert all(p.worker_key == key2.pubkey for p in later)
    assert_never_equivocated(stubs, 6)


@pytest.mark.parametrize("fault", ["503", "down", "route-missing", "stranger-key",
                                   "seq-mismatch", "garbage"])
def test_no_signing_while_any_validator_gives_no_usable_head(
        tmp_path: Path, key: WorkerKey, stubs: list[StubValidator], fault: str) -> None:
    db = proved_then_lost(tmp_path, key, stubs, T0 + 2 * W)

    bad = stubs[1]
    if fault == "503":
        bad.head_status = 503
    elif fault == "down":
        bad.server.shutdown()
        bad.server.server_close()  # connection refused
    elif fault == "route-missing":
        bad.head_override[JOB.job] = (404, {"error": "not_found", "message": "no route"})
    elif fault == "stranger-key":
        bad.head_override[JOB.job] = (200, signed_head(make_key(99), 7, ZERO_HASH, T0, 70))
    elif fault == "seq-mismatch":
        body = signed_head(key, 2, stubs[0].stored[(JOB.job, 1)], T0 + W, 20)
        bad.head_override[JOB.job] = (200, {**body, "seq": 1})
    else:
        bad.head_override[JOB.job] = (200, {"job": b58encode(JOB.job), "seq": 5,
                                            "proof": "AAAA", "proof_signature": "",
                                            "receipt_signature": "", "worker_key": "x"})
    w2 = Worker(db, key, stubs)
    assert w2.run(T0 + 2 * W, T0 + 4 * W) == []  # nothing signed ...
    assert JOB.job not in w2.agent.active and w2.outbox.counts()["proofs"] == 0
    assert len(w2.agent.buffer) > 0  # ... while sampling goes on
    assert w2.outbox.assignments() == {JOB.job: ("GPU-0",)}  # and the GPU stays booked
    w2.close()
    if fault == "down":
        return
    bad.head_status = None
    bad.head_override.clear()
    w3 = Worker(db, key, stubs)
    later = w3.run(T0 + 4 * W, T0 + 5 * W)
    w3.close()
    assert [p.seq for p in later] == [3, 4, 5]  # the unobserved windows are proven at 0
    assert later[0].prev_proof_hash == stubs[0].stored[(JOB.job, 2)]
    assert [p.billable_seconds for p in later] == [0, 0, W]
    assert_never_equivocated(stubs, 5)


def test_a_job_this_database_accepted_starts_with_a_member_down(
        tmp_path: Path, key: WorkerKey, stubs: list[StubValidator]) -> None:
    # A 2-of-3 committee with one member down must not keep a brand-new job from starting:
    # the job was accepted by this worker with this database, so it signed nothing before.
    stubs[1].server.shutdown()
    stubs[1].server.server_close()
    db = tmp_path / "outbox.sqlite"
    open_job = replace(JOB, status="open", started_at=None)
    w = Worker(db, key, stubs, job=open_job)
    w.agent.poll_jobs(T0)  # accepts: the source moves it to running at T0
    assert w.outbox.accepted_here(JOB.job) and w.source.job_status(JOB.job) == "running"
    proofs = w.run(T0, T0 + 2 * W)
    assert [p.seq for p in proofs] == [1, 2]
    w.close()
    # A lost database forgets that it accepted the job: it waits for every member again.
    delete_db(db)
    w2 = Worker(db, key, stubs)
    assert w2.run(T0 + 2 * W, T0 + 3 * W) == []
    w2.close()


def test_higher_head_from_one_validator_only_skips_seqs(tmp_path: Path, key: WorkerKey,
                                                        stubs: list[StubValidator]) -> None:
    db = proved_then_lost(tmp_path, key, stubs, T0 + 2 * W)
    # One validator holds (or claims, with a proof we really signed) seq 9.
    head = signed_head(key, 9, b"\x11" * 32, T0 + 8 * W, 90)
    stubs[1].head_override[JOB.job] = (200, head)
    w2 = Worker(db, key, stubs)
    later = w2.run(T0 + 9 * W, T0 + 10 * W)
    w2.close()
    assert [p.seq for p in later] == [10]
    assert later[0].prev_proof_hash == proof_hash(base64.b64decode(head["proof"]))
    assert later[0].window_start == T0 + 9 * W and later[0].cumulative_seconds == 90 + W
    for s in stubs:
        assert s.equivocations == 0 and all(len(h) == 1 for h in s.seen.values())


def test_rejected_head_counts_as_signed(tmp_path: Path, key: WorkerKey,
                                        stubs: list[StubValidator]) -> None:
    for s in stubs:
        s.reject_if = lambda p: "window_in_future" if p.seq == 3 else None
    db = proved_then_lost(tmp_path, key, stubs, T0 + 3 * W)
    for s in stubs:
        s.reject_if = None
    w2 = Worker(db, key, stubs)
    later = w2.run(T0 + 3 * W, T0 + 4 * W)
    w2.close()
    assert [p.seq for p in later] == [4]
    assert later[0].prev_proof_hash == stubs[0].stored[(JOB.job, 3)]
    assert_never_equivocated(stubs, 4)


def test_chain_ahead_of_every_validator(tmp_path: Path, key: WorkerKey,
                                        stubs: list[StubValidator]) -> None:
    """The chain settled seq 5 (validators since lost data): resume after the chain."""
    db = proved_then_lost(tmp_path, key, stubs, T0 + 3 * W)
    job = replace(JOB, last_seq=5, last_window_end=T0 + 5 * W, claimed_seconds=50)
    w2 = Worker(db, key, stubs, job=job)
    later = w2.run(T0 + 5 * W, T0 + 6 * W)
    w2.close()
    assert [(p.seq, p.window_start, p.cumulative_seconds) for p in later] == [
        (6, T0 + 5 * W, 50 + W)]
    for s in stubs:
        assert s.equivocations == 0 and all(len(h) == 1 for h in s.seen.values())


def test_restored_backup_of_the_database_does_not_rewind(tmp_path: Path, key: WorkerKey,
                                                         stubs: list[StubValidator]) -> None:
    db = tmp_path / "outbox.sqlite"
    w = Worker(db, key, stubs)
    w.run(T0, T0 + W)
    w.close()
    shutil.copy(db, tmp_path / "backup.sqlite")  # closed cleanly: no -wal to copy
    w = Worker(db, key, stubs)
    w.run(T0 + W, T0 + 3 * W)
    w.close()
    delete_db(db)
    shutil.copy(tmp_path / "backup.sqlite", db)  # knows seq 1 only; validators hold 3
    w2 = Worker(db, key, stubs)
    later = w2.run(T0 + 3 * W, T0 + 4 * W)
    w2.close()
    assert [p.seq for p in later] == [4]
    assert_never_equivocated(stubs, 4)


# ---------------------------------------------------------------------------- key rotation


def test_outbox_moves_to_a_rotated_key(tmp_path: Path, key: WorkerKey,
                                       stubs: list[StubValidator]) -> None:
    """Old-key proofs still pending are delivered as signed; new windows use the new key."""
    db = tmp_path / "outbox.sqlite"
    for s in stubs:  # proofs are refused for now: they pile up in the outbox
        s.transient = [(503, {"error": "busy", "message": "later"})] * 100
    w = Worker(db, key, stubs)
    assert [p.seq for p in w.run(T0, T0 + 2 * W)] == [1, 2]
    assert w.outbox.counts()["proofs"] == 2
    w.close()
    for s in stubs:
        s.transient = []
    new = make_key(42)  # rotate_worker_key on chain, restart with the new key file
    w2 = Worker(db, new, stubs, trusted=(key.pubkey,))
    later = w2.run(T0 + 2 * W, T0 + 3 * W)
    counts = w2.outbox.counts()
    w2.close()
    assert [p.seq for p in later] == [3] and later[0].worker_key == new.pubkey
    assert counts["proofs"] == 0  # everything delivered, old-key proofs included
    assert_never_equivocated(stubs, 3)
    for seq, signer in ((1, key), (2, key), (3, new)):
        sp = stubs[0].signed[(JOB.job, seq)]
        assert sp["worker_key"] == signer.pubkey_b58
        assert verify_proof(signer.pubkey, base64.b64decode(sp["proof_signature"]),
                            base64.b64decode(sp["proof"]))


# ---------------------------------------------------------------------------- the real CLI


def test_cli_new_disk_and_new_key_continue_the_chain(tmp_path: Path) -> None:
    """``gpum-worker run`` as a process: lose the database, come back with a new key."""
    import subprocess
    import sys
    import time

    from gpum_worker.keys import generate_key_file

    ids = [b58encode(bytes([i]) * 32) for i in (1, 2, 3, 6)]
    job = bytes([6]) * 32
    stub = StubValidator().start()
    db = tmp_path / "outbox.sqlite"
    started = int(time.time())

    def run(key_path: Path, *extra: str) -> None:
        args = ["--key", str(key_path), "--db", str(db), "--validator", stub.url,
                "--window-seconds", "1", "--poll-seconds", "0.2", "--simulate", "--gpus", "1",
                "--program-id", ids[0], "--market", ids[1], "--provider", ids[2],
                "--job", f"{ids[3]}:1", "--job-started-at", str(started),
                "--run-seconds", "3", *extra]
        p = subprocess.run([sys.executable, "-m", "gpum_worker.cli", "run", *args],
                           check=False, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr[-3000:]

    try:
        old = generate_key_file(tmp_path / "old.json")
        run(tmp_path / "old.json")
        first = max(s for (_, s) in stub.stored)
        assert first >= 2
        delete_db(db)
        new = generate_key_file(tmp_path / "new.json")
        run(tmp_path / "new.json", "--previous-worker-key", old.pubkey_b58)
    finally:
        stub.stop()
    seqs = sorted(s for (j, s) in stub.stored if j == job)
    assert seqs == list(range(1, seqs[-1] + 1)) and seqs[-1] > first
    assert stub.equivocations == 0 and all(len(h) == 1 for h in stub.seen.values())
    nxt = stub.proofs[(job, first + 1)]
    assert nxt.worker_key == new.pubkey and nxt.prev_proof_hash == stub.stored[(job, first)]
    assert all(stub.proofs[(job, s)].worker_key == old.pubkey for s in range(1, first + 1))
