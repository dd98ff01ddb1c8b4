"""Outbox durability rules and delivery over HTTP (httpx.MockTransport)."""

from __future__ import annotations

import base64
import json
import random
import sqlite3
import time
from pathlib import Path

import httpx
import pytest
from gpu_market.net import BoundedClient
from gpu_market.proof import (
    ZERO_HASH,
    GpuWindow,
    WindowProof,
    decode_proof,
    encode_proof,
    proof_hash,
)
from gpum_worker.errors import OutboxError
from gpum_worker.keys import WorkerKey
from gpum_worker.outbox import Outbox
from gpum_worker.sender import Outcome, RetryPolicy, Sender, classify, classify_item

V1, V2 = "http://v1.test", "http://v2.test"
JOB = b"\x07" * 32


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _proof(key: WorkerKey, seq: int, prev: bytes, cumulative: int, start: int) -> WindowProof:
    return WindowProof(
        program_id=b"\x01" * 32, market=b"\x02" * 32, job=JOB, provider=b"\x03" * 32,
        worker_key=key.pubkey, seq=seq, window_start=start, window_end=start + 60,
        sample_interval_ms=1000, gpus=(GpuWindow("GPU-a", 60, 60),),
        process_list_hash=ZERO_HASH, prev_proof_hash=prev, health_flags=0,
        billable_seconds=60, cumulative_seconds=cumulative)


def _record_n(ob: Outbox, key: WorkerKey, n: int) -> list[bytes]:
    chain = ob.ensure_job(JOB, 0, 60)
    out = []
    for _ in range(n):
        p = _proof(key, chain.last_seq + 1, chain.last_hash, chain.cumulative + 60,
                   chain.last_window_end)
        b = encode_proof(p)
        chain = ob.record(p, b, proof_hash(b), b"s" * 64, b"r" * 64)
        out.append(b)
    return out


def test_record_advances_chain_and_survives_reopen(tmp_path: Path, key: WorkerKey) -> None:
    db = tmp_path / "o.sqlite"
    ob = Outbox(db, key.pubkey, [V1])
    proofs = _record_n(ob, key, 3)
    ob.close()
    ob = Outbox(db, key.pubkey, [V1])
    c = ob.job_chain(JOB)
    assert (c.last_seq, c.cumulative, c.last_window_end) == (3, 180, 180)
    assert c.last_hash == proof_hash(proofs[-1])
    assert ob.counts()["proofs"] == 3
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_record_refuses_a_proof_that_does_not_extend_chain(tmp_path: Path, key: WorkerKey
                                                           ) -> None:
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey, [V1])
    _record_n(ob, key, 1)
    c = ob.job_chain(JOB)
    bad = [
        _proof(key, 1, ZERO_HASH, 120, 60),                    # seq reused
        _proof(key, 2, ZERO_HASH, 120, 60),                    # wrong prev hash
        _proof(key, 2, c.last_hash, 120, 120),                 # gap in windows
        _proof(key, 2, c.last_hash, 999, 60),                  # wrong cumulative
    ]
    for p in bad:
        b = encode_proof(p)
        with pytest.raises(OutboxError, match="does not extend"):
            ob.record(p, b, proof_hash(b), b"s" * 64, b"r" * 64)
    assert ob.job_chain(JOB) == c
    assert ob.counts()["proofs"] == 1


def test_outbox_follows_a_rotated_key(tmp_path: Path, key: WorkerKey) -> None:
    """Reopening with another key keeps the chain and each proof's signer."""
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey, [V1])
    _record_n(ob, key, 2)
    assert ob.rotated_from is None
    ob.close()
    new = b"\x09" * 32
    ob = Outbox(tmp_path / "o.sqlite", new, [V1])
    assert ob.rotated_from == key.pubkey
    assert ob.worker_keys() == [key.pubkey, new]
    assert ob.pending_by_key() == {key.pubkey: 2}
    assert [it.worker_key for it in ob.due(V1, 1e12, 64)] == [key.pubkey] * 2
    assert ob.job_chain(JOB).last_seq == 2  # the chain continues under the new key
    ob.close()
    assert Outbox(tmp_path / "o.sqlite", new, [V1]).rotated_from is None


def test_schema_1_database_is_migrated(tmp_path: Path, key: WorkerKey) -> None:
    """An outbox written before proofs kept their signer: its rows are the old key's."""
    db = tmp_path / "o.sqlite"
    ob = Outbox(db, key.pubkey, [V1])
    _record_n(ob, key, 1)
    ob.close()
    raw = sqlite3.connect(db)
    raw.executescript("DROP TABLE worker_keys; ALTER TABLE outbox DROP COLUMN worker_key; "
                      "UPDATE meta SET value='1' WHERE key='schema';")
    raw.close()
    ob = Outbox(db, b"\x09" * 32, [V1])
    assert [it.worker_key for it in ob.due(V1, 1e12, 64)] == [key.pubkey]
    assert ob.rotated_from == key.pubkey


def test_many_threads_open_one_new_database_at_once(tmp_path: Path, key: WorkerKey) -> None:
    """The worker's prover and delivery lanes open their connections at start, at once: no
    open may fail because another one is switching the new database to WAL."""
    import threading

    for attempt in range(30):
        db = tmp_path / f"o{attempt}.sqlite"
        errors: list[BaseException] = []
        go = threading.Barrier(8)

        def open_one(db: Path = db, errors: list[BaseException] = errors,
                     go: threading.Barrier = go) -> None:
            go.wait()
            try:
                Outbox(db, key.pubkey, ["http://v"]).close()
            except BaseException as e:  # noqa: BLE001 - the test reports it
                errors.append(e)

        threads = [threading.Thread(target=open_one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []


def test_resume_job_only_moves_forward(tmp_path: Path, key: WorkerKey) -> None:
    from gpum_worker.heads import ResumePoint

    ob = Outbox(tmp_path / "o.sqlite", key.pubkey, [V1])
    _record_n(ob, key, 3)
    before = ob.job_chain(JOB)
    assert ob.resume_job(JOB, 0, 60, ResumePoint(2, b"\x01" * 32, 1, 1)) == before
    assert ob.resume_job(JOB, 0, 60, ResumePoint(3, b"\x01" * 32, 1, 1)) == before
    after = ob.resume_job(JOB, 0, 60, ResumePoint(9, b"\x01" * 32, 500, 600))
    assert (after.last_seq, after.last_hash, after.cumulative, after.last_window_end) == (
        9, b"\x01" * 32, 500, 600)


def test_unusable_db_path_is_clear_error(tmp_path: Path, key: WorkerKey) -> None:
    with pytest.raises(OutboxError, match="cannot open outbox"):
        Outbox(tmp_path / "missing-dir" / "o.sqlite", key.pubkey, [V1])


def test_assignments_persist(tmp_path: Path, key: WorkerKey) -> None:
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey, [V1])
    ob.set_assignment(JOB, ["GPU-b", "GPU-a"])
    ob.close()
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey, [V1])
    assert ob.assignments() == {JOB: ("GPU-b", "GPU-a")}
    ob.release(JOB)
    assert ob.assignments() == {}


def test_sync_validators_adds_and_drops(tmp_path: Path, key: WorkerKey) -> None:
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey, [V1])
    _record_n(ob, key, 2)
    ob.close()
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey, [V2])
    assert ob.sync_validators() == [V1]
    assert len(ob.due(V2, 1e12, 64)) == 2 and ob.due(V1, 1e12, 64) == []


# ---------------------------------------------------------------------------- sender


class FakeValidators:
    """MockTransport handler: per-host scripted answers, records requests."""

    def __init__(self) -> None:
        self.script: dict[str, list] = {}
        self.default: dict[str, tuple[int, dict] | None] = {}
        self.requests: list[tuple[str, str, dict]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        host = f"http://{request.url.host}"
        self.requests.append((host, request.url.path, body))
        queue = self.script.get(host)
        answer = queue.pop(0) if queue else self.default.get(host)
        if answer is None or isinstance(answer, Exception):
            raise answer or httpx.ConnectError("connection refused", request=request)
        if answer == "auto":
            return self._auto(request.url.path, body)
        status, obj = answer
        return httpx.Response(status, json=obj)

    @staticmethod
    def _auto(path: str, body: dict) -> httpx.Response:
        if path.endswith("/batch"):
            return httpx.Response(200, json={"results": [{"status": "accepted"}
                                                         for _ in body["proofs"]]})
        return httpx.Response(200, json={"status": "accepted"})


def _queued(tmp_path: Path, key: WorkerKey, n: int, validators: tuple[str, ...] = (V1,)
            ) -> tuple[Clock, Outbox, list[bytes], FakeValidators]:
    """An outbox for ``validators`` holding ``n`` recorded proofs (returned), its clock, and
    fake validators that answer nothing yet."""
    clock = Clock()
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey, list(validators), clock)
    proofs = _record_n(ob, key, n)
    return clock, ob, proofs, FakeValidators()


def _sender(ob: Outbox, key: WorkerKey, fv: FakeValidators, clock: Clock, **kw) -> Sender:
    client = BoundedClient(transport=httpx.MockTransport(fv))
    return Sender(ob, client, RetryPolicy(**kw), random.Random(1), clock)


def test_delete_only_after_every_validator_acked(tmp_path: Path, key: WorkerKey) -> None:
    clock, ob, proofs, fv = _queued(tmp_path, key, 1, (V1, V2))
    fv.default[V1] = (200, {"status": "accepted", "job": "x", "seq": 1})
    fv.default[V2] = None  # down
    s = _sender(ob, key, fv, clock)
    assert s.deliver_once() == 1
    assert ob.counts()["proofs"] == 1  # V2 still owes an ack
    body = fv.requests[0][2]
    assert decode_proof(base64.b64decode(body["proof"])).seq == 1
    assert base64.b64decode(body["proof"]) == proofs[0]
    assert body["worker_key"] == key.pubkey_b58
    fv.default[V2] = (200, {"status": "duplicate"})
    clock.t += 1000
    assert s.deliver_once() == 1
    assert ob.counts() == {"pending": 0, "rejected": 0, "equivocation": 0, "proofs": 0}


def test_backoff_exponential_capped_jittered(tmp_path: Path, key: WorkerKey) -> None:
    clock, ob, _, fv = _queued(tmp_path, key, 1)
    fv.default[V1] = (503, {"error": "busy", "message": "later"})
    s = _sender(ob, key, fv, clock, base_s=1, cap_s=8)
    delays = []
    for _ in range(7):
        s.deliver_once()
        nxt = ob.next_due_at()
        delays.append(nxt - clock.t)
        assert s.deliver_once() == 0  # nothing due before the backoff elapses
        clock.t = nxt
    assert len(fv.requests) == 7  # exactly one attempt per backoff period
    nominal = [1, 2, 4, 8, 8, 8, 8]
    for d, n in zip(delays, nominal):
        assert 0.5 * n <= d <= n
    assert len(set(delays)) > 1
    fv.default[V1] = (200, {"status": "accepted"})
    assert s.deliver_once() == 1


def test_transport_errors_retry(tmp_path: Path, key: WorkerKey) -> None:
    clock, ob, _, fv = _queued(tmp_path, key, 1)
    req = httpx.Request("POST", V1)
    fv.script[V1] = [httpx.ReadTimeout("slow", request=req),
                     httpx.RemoteProtocolError("dropped", request=req),
                     (200, {"unexpected": True}), (200, {"status": "accepted"})]
    s = _sender(ob, key, fv, clock)
    for _ in range(4):
        s.deliver_once()
        clock.t += 100
    assert ob.counts()["proofs"] == 0
    assert len(fv.requests) == 4


def test_equivocation_kept_and_never_retried(tmp_path: Path, key: WorkerKey,
                                             caplog: pytest.LogCaptureFixture) -> None:
    clock, ob, _, fv = _queued(tmp_path, key, 1)
    fv.default[V1] = (409, {"error": "equivocation"})
    s = _sender(ob, key, fv, clock)
    s.deliver_once()
    for _ in range(5):
        clock.t += 10**7
        s.deliver_once()
    assert len(fv.requests) == 1
    assert ob.counts()["equivocation"] == 1 and ob.counts()["proofs"] == 1
    assert any("EQUIVOCATION" in r.message and r.levelname == "CRITICAL" for r in caplog.records)


def test_4xx_kept_and_retried_only_slowly(tmp_path: Path, key: WorkerKey,
                                          caplog: pytest.LogCaptureFixture) -> None:
    clock, ob, _, fv = _queued(tmp_path, key, 1)
    fv.default[V1] = (400, {"error": "job_not_running", "message": "job is not Running"})
    s = _sender(ob, key, fv, clock, rejected_retry_s=600)
    s.deliver_once()
    for _ in range(50):
        clock.t += 10
        s.deliver_once()
    assert len(fv.requests) == 1  # no hot loop
    assert ob.counts()["rejected"] == 1
    assert any("REJECTED" in r.message and "job_not_running" in r.message
               for r in caplog.records)
    clock.t += 600
    fv.default[V1] = (200, {"status": "accepted"})
    assert s.deliver_once() == 1
    assert ob.counts()["proofs"] == 0


def test_batch_per_item_results(tmp_path: Path, key: WorkerKey) -> None:
    clock, ob, _, fv = _queued(tmp_path, key, 3)
    fv.script[V1] = [(200, {"results": [{"status": "accepted"}, {"status": "duplicate"},
                                        {"error": "equivocation", "message": "x"}]})]
    s = _sender(ob, key, fv, clock)
    assert s.deliver_once() == 2
    assert fv.requests[0][1] == "/v1/proofs/batch"
    assert len(fv.requests[0][2]["proofs"]) == 3
    assert ob.counts() == {"pending": 0, "rejected": 0, "equivocation": 1, "proofs": 1}


def test_batch_route_missing_falls_back_to_single(tmp_path: Path, key: WorkerKey) -> None:
    clock, ob, _, fv = _queued(tmp_path, key, 3)
    fv.script[V1] = [(404, {"error": "not_found"})]
    fv.default[V1] = "auto"
    s = _sender(ob, key, fv, clock)
    assert s.deliver_once() == 3
    assert [r[1] for r in fv.requests] == ["/v1/proofs/batch"] + ["/v1/proofs"] * 3


def test_more_than_64_are_sent_in_batches(tmp_path: Path, key: WorkerKey) -> None:
    clock, ob, _, fv = _queued(tmp_path, key, 70)
    fv.default[V1] = "auto"
    s = _sender(ob, key, fv, clock)
    assert s.deliver_once() == 70
    assert [len(r[2]["proofs"]) if "proofs" in r[2] else 1 for r in fv.requests] == [64, 6]


def test_classify_table() -> None:
    assert classify(200, {"status": "accepted"}).kind == "ack"
    assert classify(200, {"status": "duplicate"}).kind == "ack"
    assert classify(200, {"status": "weird"}).kind == "retry"
    assert classify(409, {"error": "equivocation"}).kind == "equivocation"
    assert classify(400, {"error": "bad_proof"}).kind == "reject"
    assert classify(403, "forbidden").kind == "reject"
    assert classify(429, {}).kind == "retry"
    assert classify(408, {}).kind == "retry"
    assert classify(500, {}).kind == "retry"
    assert classify_item({"error": "stale"}).kind == "reject"
    # A validator that accepted a later seq (caught up from another member's head) never
    # takes this one: done for that destination, not retried every hour for ever.
    assert classify(422, {"error": "stale_seq", "message": "seq 3 is not after 7"}) \
        == Outcome("ack", "superseded")
    assert classify_item({"error": "stale_seq"}) == Outcome("ack", "superseded")
    assert classify_item("junk").kind == "retry"


@pytest.mark.parametrize("answer", [
    (425, {"error": "too_early", "message": "the job is not Running on chain yet"}),
    (503, {"error": "busy"}),
    (429, {"error": "rate_limited"}),
    (400, {"error": "chain_lag", "message": "retry", "retry": True}),
    (422, {"error": "job_not_running", "retry": True}),
], ids=["425", "503", "429", "400-retry", "422-retry"])
def test_transient_rejections_retried_within_the_window(tmp_path: Path, key: WorkerKey,
                                                        answer: tuple) -> None:
    """Retryable answers back off (1 s doubling, 60 s cap = one window), never 1 h."""
    clock, ob, _, fv = _queued(tmp_path, key, 1)
    fv.script[V1] = [answer] * 4 + [(200, {"status": "accepted"})]
    s = _sender(ob, key, fv, clock)
    t0 = clock.t
    while ob.counts()["proofs"]:
        s.deliver_once()
        assert ob.counts()["rejected"] == 0
        nxt = ob.next_due_at()
        if nxt is not None:
            clock.t = nxt
    assert len(fv.requests) == 5
    assert clock.t - t0 <= 1 + 2 + 4 + 8  # four backoffs, well inside one 60 s window


def test_transient_batch_item_retried(tmp_path: Path, key: WorkerKey) -> None:
    clock, ob, _, fv = _queued(tmp_path, key, 2)
    fv.script[V1] = [(200, {"results": [{"status": "accepted"},
                                        {"error": "chain_lag", "retry": True}]})]
    fv.default[V1] = "auto"
    s = _sender(ob, key, fv, clock)
    assert s.deliver_once() == 1
    assert ob.counts()["rejected"] == 0 and ob.next_due_at() - clock.t <= 1
    clock.t += 1
    assert s.deliver_once() == 1 and ob.counts()["proofs"] == 0


def test_classify_retryable_answers() -> None:
    assert classify(425, {"error": "too_early"}).kind == "retry"
    assert classify(400, {"error": "x", "retry": True}).kind == "retry"
    assert classify(400, {"error": "x", "retry": False}).kind == "reject"
    assert classify(409, {"error": "equivocation", "retry": True}).kind == "equivocation"
    assert classify_item({"error": "x", "retry": True}).kind == "retry"
    assert classify_item({"error": "equivocation", "retry": True}).kind == "equivocation"


def test_a_validator_gets_each_jobs_proofs_in_seq_order(tmp_path: Path, key: WorkerKey) -> None:
    """Found on a real 3-validator network: after an outage, a newly signed proof overtook older
    ones still in backoff; the returning validator recorded the older seqs as missed and then
    rejected them for good (stale_seq), so a 3-of-3 job never paid that proven time."""
    now = time.time()
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey, [V1])
    _record_n(ob, key, 2)
    ob.retry_at(V1, (JOB, 1), now + 200, "validator down")  # seq 1 and 2 back off, 2 less so
    ob.retry_at(V1, (JOB, 2), now + 100, "validator down")
    _record_n(ob, key, 1)  # seq 3: new, due at once
    assert [it.seq for it in ob.due(V1, now + 10, 64)] == []  # seq 3 must not overtake 1 and 2
    assert [it.seq for it in ob.due(V1, now + 150, 64)] == []  # nor may seq 2 overtake seq 1
    assert [it.seq for it in ob.due(V1, now + 200, 64)] == [1, 2, 3]  # then all, in order
    ob.reject(V1, (JOB, 1), "window_length", now + 1e9)  # a final rejection blocks nothing after it
    assert [it.seq for it in ob.due(V1, now + 200, 64)] == [2, 3]
