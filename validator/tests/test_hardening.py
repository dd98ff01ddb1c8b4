"""The intake's hardening (off-chain part), over the real HTTP server on 127.0.0.1 with real
SQLite.

* squatting: only the job's own provider key may occupy a (job, seq); strangers store nothing;
* far-ahead proofs never reserve a slot of the honest sequence;
* bounded caches and stored rejections;
* transient rejections are retryable (425/503, ``"retry": true``, Retry-After);
* window length, skew and health thresholds come from the job's terms;
* ``GET /v1/jobs/<job>/head`` for worker crash recovery.
"""

from __future__ import annotations

import base64
from dataclasses import replace

import httpx
import pytest
from gpu_market.httpfront import serve_in_thread
from gpu_market.proof import encode_proof, proof_hash
from gpu_market.receipt import private_key_from_seed, public_key_bytes
from gpum_validator.intake import Intake
from gpum_validator.server import ValidatorHTTPServer
from gpum_validator.store_sqlite import SQLiteStore
from vtestkit import (
    JOB,
    T0,
    UUIDS,
    WINDOW,
    WORKER_PUB,
    b58,
    cfg,
    chain_of,
    gpu,
    make_proof,
    pk,
    provider_view,
    signed_json,
)

ATTACKER = bytes([13] * 32)  # a registered provider of the same market
ATTACKER_KEY = private_key_from_seed(bytes([44] * 32))
ATTACKER_PUB = public_key_bytes(ATTACKER_KEY)


class Node:
    """Intake + SQLite + the real HTTP server, and an httpx client to it."""

    def __init__(self, tmp_path, chain, clock, **intake_kw):
        self.store = SQLiteStore(tmp_path / "v.sqlite")
        self.intake = Intake(cfg(), self.store, chain, clock=lambda: clock[0], **intake_kw)
        self.server = ValidatorHTTPServer(("127.0.0.1", 0), self.intake, self.store,
                                          lambda: not chain.down)
        serve_in_thread(self.server)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.server.server_port}",
                                 timeout=10)

    def post(self, p, key=None):
        return self.http.post("/v1/proofs", json=signed_json(p) if key is None
                              else signed_json(p, key))

    def head(self, job=JOB):
        return self.http.get(f"/v1/jobs/{b58(job)}/head")

    def close(self):
        self.http.close()
        self.server.shutdown()
        self.server.server_close()
        self.store.close()


@pytest.fixture
def node(tmp_path, chain, clock):
    n = Node(tmp_path, chain, clock)
    yield n
    n.close()


def add_attacker(chain):
    chain.providers[ATTACKER] = provider_view(worker_key=pk(ATTACKER_PUB), address=pk(ATTACKER))


def squat(seq, **kw):
    """A proof for the victim's JOB, claimed by the attacker's own provider and key."""
    return make_proof(seq, provider=ATTACKER, worker_key=ATTACKER_PUB, **kw)


# ------------------------------------------------------------------ 1. squatting


def test_squatter_cannot_occupy_a_victims_seqs(node, chain):
    add_attacker(chain)
    answers = [node.post(squat(s, billable=0, cumulative=0), ATTACKER_KEY) for s in (1, 2, 3)]
    for p in chain_of(3):  # the victim's real proofs are unaffected
        r = node.post(p)
        assert r.status_code == 200 and r.json()["status"] == "accepted", r.json()
    assert [len(node.store.proofs_at(JOB, s)) for s in (1, 2, 3)] == [1, 1, 1]
    for r in answers:  # the stranger was told no, finally, and nothing of it was stored
        assert (r.status_code, r.json()["error"], r.json()["retry"]) == \
            (422, "wrong_provider", False)


def test_proofs_for_jobs_that_do_not_exist_are_not_stored(node, chain):
    r = node.post(make_proof(1, job=bytes([99] * 32)))
    assert r.json()["error"] == "job_not_found"
    assert node.store.proofs_at(bytes([99] * 32), 1) == []
    assert node.store.summary()["proofs"] == {}
    assert r.json()["retry"] is True  # this validator's RPC may lag behind the worker's


def test_far_ahead_rejected_proof_does_not_reserve_its_slot(node, chain):
    honest = chain_of(5)
    assert node.post(honest[0]).json()["status"] == "accepted"
    junk = make_proof(5, billable=0, cumulative=7)  # provider's own key, but rejected
    assert node.post(junk).json()["error"] == "cumulative_mismatch"
    assert node.store.proofs_at(JOB, 5) == []
    for p in honest[1:]:
        assert node.post(p).json()["status"] == "accepted"


def test_far_ahead_seq_cannot_be_accepted_without_the_time_it_skips(node, chain):
    honest = chain_of(2)
    assert node.post(honest[0]).json()["status"] == "accepted"
    jump = make_proof(1000, prev=proof_hash(encode_proof(honest[0])),
                      window_start=T0 + WINDOW, window_end=T0 + 2 * WINDOW,
                      cumulative=2 * WINDOW)
    r = node.post(jump)
    assert r.status_code == 422 and r.json()["error"] == "seq_gap"
    assert node.post(honest[1]).json()["status"] == "accepted"


def test_stored_rejections_are_capped_per_job_and_in_total(tmp_path, chain, clock):
    from gpum_validator.records import StoreLimits

    n = Node(tmp_path, chain, clock, limits=StoreLimits(max_rejected_per_job=3,
                                                        max_rejected_total=4))
    try:
        chain.set_job(status="open")
        for p in chain_of(5):
            assert n.post(p).json()["error"] == "job_not_started"
        kept = [s for s in range(1, 6) if n.store.proofs_at(JOB, s)]
        assert kept == [3, 4, 5]  # the newest are kept: the head stays right
        assert n.head().json()["seq"] == 5
        other = bytes([21] * 32)
        chain.jobs[other] = chain.jobs[JOB]
        for p in chain_of(3, job=other):
            n.post(p)
        assert n.store.summary()["proofs"] == {"rejected": 4}
    finally:
        n.close()


def test_eviction_never_touches_evidence_or_accepted_proofs(tmp_path, chain, clock):
    from gpum_validator.records import StoreLimits

    n = Node(tmp_path, chain, clock, limits=StoreLimits(max_rejected_per_job=2))
    try:
        ps = chain_of(1)
        assert n.post(ps[0]).json()["status"] == "accepted"
        assert n.post(make_proof(1, billable=1, cumulative=1)).status_code == 409  # evidence
        prev = proof_hash(encode_proof(ps[0]))
        for s in (2, 3, 4):  # rejected in sequence (other GPUs than the job's)
            bad = make_proof(s, prev=prev, gpus=(gpu(UUIDS[0]), gpu("GPU-zzzz")))
            assert n.post(bad).json()["error"] == "gpu_uuids_changed"
            prev = proof_hash(encode_proof(bad))
        assert [len(n.store.proofs_at(JOB, s)) for s in (1, 2, 3, 4)] == [2, 0, 0, 1]
        assert len(n.store.equivocation_cases()) == 1
        assert n.head().json()["seq"] == 4
    finally:
        n.close()


def test_provider_cache_is_a_bounded_lru(chain):
    from gpum_validator.chain import ProviderKeys

    keys = ProviderKeys(chain, ttl=3600, max_entries=2)
    for b in (1, 2, 3, 1):
        keys.get(bytes([b] * 32))
    assert len(keys) == 2


def test_a_cache_hit_takes_no_lock(chain):
    """Every proof asks the caches twice, from many request threads: a fresh entry is
    answered without the cache's lock (held here by another thread), an LRU touch
    included; a miss still waits for it."""
    import threading

    from gpum_validator.chain import ProviderKeys

    keys = ProviderKeys(chain, ttl=3600, max_entries=2)
    a, b = bytes([1] * 32), bytes([2] * 32)
    keys.get(a)
    keys.get(b)
    out = []
    with keys._lock:
        t = threading.Thread(target=lambda: out.append(keys.get(a)))
        t.start()
        t.join(10)
        assert not t.is_alive() and out == [chain.providers.get(a)]
        miss = threading.Thread(target=lambda: keys.get(bytes([3] * 32)))
        miss.start()
        miss.join(0.2)
        assert miss.is_alive()  # a read waits for the lock
    miss.join(10)
    assert a in keys._cache and b not in keys._cache  # the hit moved a to the LRU's end


def test_provider_cache_forget_rereads_at_once(chain):
    # A subscription saw the provider's account change: the next read goes to the chain
    # instead of waiting out the TTL.
    from gpum_validator.chain import ProviderKeys

    reads = []
    real = chain.fetch_provider
    chain.fetch_provider = lambda p: reads.append(p) or real(p)
    keys = ProviderKeys(chain, ttl=3600)
    k = bytes([1] * 32)
    keys.get(k)
    keys.get(k)
    assert len(reads) == 1
    keys.forget(k)
    keys.forget(bytes([9] * 32))  # unknown: nothing happens
    keys.get(k)
    assert len(reads) == 2


def test_job_cache_keeps_reads_a_live_subscription_covers(chain):
    """While a subscription is live, a job read after it was confirmed is kept for the
    subscribed TTL (one read per five windows, not one per window); a read from before it,
    or once it dropped or came back, or during which a change was notified, keeps only the
    short TTL."""
    from gpum_validator.chain import JobAccounts

    now = [1000.0]
    reads = []
    real = chain.fetch_job

    def fetch(address):
        reads.append(address)
        for hook in during_read:
            hook()
        return real(address)

    during_read: list = []
    chain.fetch_job = fetch
    jobs = JobAccounts(chain, ttl=2.0, clock=lambda: now[0])
    live: list = [None]
    jobs.follow(lambda: live[0], 300.0)

    def read_after(seconds: float) -> int:
        now[0] += seconds
        before = len(reads)
        jobs.get(JOB)
        return len(reads) - before

    assert read_after(0) == 1 and read_after(1) == 0 and read_after(2) == 1  # no subscription
    live[0] = now[0] + 0.5  # confirmed after that read: it stays short
    assert read_after(1) == 0 and read_after(2) == 1  # read at live_since + 2.5: covered
    assert [read_after(60) for _ in range(5)] == [0, 0, 0, 0, 1]  # 300 s later: read again
    assert read_after(60) == 0
    jobs.forget(JOB)  # a notification
    assert read_after(0) == 1
    live[0] = None  # the subscription dropped: back to the short TTL
    assert read_after(3) == 1
    live[0] = now[0] + 1  # and came back: the read before it is not covered
    assert read_after(2) == 1
    assert read_after(60) == 0  # that one is
    during_read.append(lambda: jobs.forget(bytes([7] * 32)))  # another account changed
    jobs.forget(JOB)
    assert read_after(0) == 1
    assert read_after(60) == 0  # still covered: only the job's own notifications count
    during_read[:] = [lambda: jobs.forget(JOB)]  # this job changed while it was being read
    jobs.forget(JOB)
    assert read_after(0) == 1
    during_read.clear()
    assert read_after(2) == 1  # that read was not covered: only the short TTL
    assert jobs._reading == {}


def test_equivocation_stores_one_pair_per_seq(node, chain):
    node.post(chain_of(1)[0])
    for b in range(1, 6):
        assert node.post(make_proof(1, billable=b, cumulative=b)).status_code == 409
    assert len(node.store.proofs_at(JOB, 1)) == 2


# ------------------------------------------------------------------ 2. retryable answers


def test_job_not_yet_running_is_retryable_and_heals(node, chain):
    p = chain_of(1)[0]
    chain.set_job(status="open")
    r = node.post(p)
    assert r.status_code == 425 and r.json()["error"] == "job_not_started"
    assert r.json()["retry"] is True and int(r.headers["Retry-After"]) > 0
    chain.set_job(status="running")
    assert node.post(p).json()["status"] == "accepted"  # the same bytes, re-evaluated


@pytest.mark.parametrize("status", ["completed", "cancelled", "failed", "declined"])
def test_terminal_job_is_final(node, chain, status):
    chain.set_job(status=status)
    r = node.post(chain_of(1)[0])
    assert r.status_code == 422 and r.json()["error"] == "job_not_running"
    assert r.json()["retry"] is False and "Retry-After" not in r.headers


def test_window_slightly_in_future_is_retryable(node, chain, clock):
    p = chain_of(1)[0]
    clock[0] = p.window_end - 5 - 20  # the validator's clock is 20 s behind
    r = node.post(p)
    assert r.status_code == 425 and r.json()["error"] == "window_in_future"
    assert r.json()["retry"] is True and r.headers["Retry-After"] == "20"
    clock[0] += 20
    assert node.post(p).json()["status"] == "accepted"


def test_window_far_in_future_is_final(node, chain, clock):
    p = chain_of(1)[0]
    clock[0] = p.window_end - 5 - 3600
    r = node.post(p)
    assert r.status_code == 422 and r.json()["error"] == "window_far_in_future"
    assert r.json()["retry"] is False


def test_chain_down_is_retryable_with_retry_after(node, chain):
    chain.down = True
    r = node.post(chain_of(1)[0])
    assert r.status_code == 503 and r.json()["error"] == "chain_unavailable"
    assert r.json()["retry"] is True and int(r.headers["Retry-After"]) > 0


def test_batch_retryable_item_holds_back_later_items_of_its_job_only(node, chain, clock):
    other = bytes([22] * 32)
    chain.jobs[other] = replace(chain.jobs[JOB], started_at=T0 - 600, last_window_end=T0 - 600)
    mine = chain_of(2)
    clock[0] = mine[0].window_end - 5 - 10  # seq 1 of JOB is 10 s early
    theirs = chain_of(1, job=other, started_at=T0 - 600)
    r = node.http.post("/v1/proofs/batch",
                       json={"proofs": [signed_json(p) for p in (*mine, *theirs)]})
    res = r.json()["results"]
    assert [x.get("error") for x in res[:2]] == ["window_in_future"] * 2
    assert all(x["retry"] is True for x in res[:2])
    assert res[2]["status"] == "accepted"


# ------------------------------------------------------------------ 3. terms of the job


def test_window_length_comes_from_the_job_terms(node, chain):
    chain.set_terms(window_seconds=120)
    long_window = make_proof(1, window_end=T0 + 120, billable=120, cumulative=120,
                             gpus=tuple(gpu(u, 120) for u in UUIDS))
    assert node.post(long_window).json()["status"] == "accepted"


def test_critical_temperature_comes_from_the_job_terms(node, chain):
    chain.set_terms(temp_critical_c=80)
    hot = make_proof(1, gpus=(gpu(UUIDS[0], temp_max_c=85), gpu(UUIDS[1])))
    r = node.post(hot)  # the claim of 60 s is accepted; 59 s of it are approved
    assert (r.json()["status"], r.json()["approved_total"]) == ("accepted", 59)


def test_ecc_allowance_comes_from_the_job_terms(node, chain):
    chain.set_terms(ecc_uncorrected_max=2)
    ecc = make_proof(1, gpus=(gpu(UUIDS[0], ecc_uncorrected_delta=2), gpu(UUIDS[1])))
    assert node.post(ecc).json()["status"] == "accepted"


# ------------------------------------------------------------------ 4. head endpoint


def test_head_unknown_job_is_404(node):
    r = node.head()
    assert r.status_code == 404 and r.json()["error"] == "job_unknown" and r.json()["message"]


def test_head_is_the_highest_stored_seq_accepted_or_rejected(node, chain):
    ps = chain_of(3)
    wire = [signed_json(p) for p in ps]
    for w in wire[:2]:
        node.http.post("/v1/proofs", json=w)
    r = node.head()
    assert r.status_code == 200
    assert r.json() == {"job": b58(JOB), "seq": 2, "proof": wire[1]["proof"],
                        "proof_signature": wire[1]["proof_signature"],
                        "receipt_signature": wire[1]["receipt_signature"],
                        "worker_key": wire[1]["worker_key"], "decision": "accepted"}
    bad = make_proof(3, prev=proof_hash(encode_proof(ps[1])), billable=0, cumulative=1)
    assert node.post(bad).json()["error"] == "cumulative_mismatch"
    h = node.head().json()
    assert (h["seq"], h["decision"]) == (3, "rejected")
    assert base64.b64decode(h["proof"]) == encode_proof(bad)


def test_head_at_an_equivocated_seq_is_the_accepted_proof(node, chain):
    wire = signed_json(chain_of(1)[0])
    node.http.post("/v1/proofs", json=wire)
    assert node.post(make_proof(1, billable=1, cumulative=1)).status_code == 409
    h = node.head().json()
    assert (h["seq"], h["decision"], h["proof"]) == (1, "accepted", wire["proof"])


def test_head_cannot_be_polluted_by_strangers(node, chain):
    add_attacker(chain)
    node.post(chain_of(1)[0])
    for s in (2, 3, 50):
        node.post(squat(s), ATTACKER_KEY)
    h = node.head().json()
    assert (h["seq"], h["worker_key"]) == (1, b58(WORKER_PUB))


def test_head_bad_job_address_is_400(node):
    r = node.http.get("/v1/jobs/not-base58!/head")
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    assert node.http.get("/v1/jobs/x/y/head").status_code == 404


def test_read_budget_is_a_bounded_token_bucket_per_source():
    from gpum_validator.chain import ReadBudget

    now = [0.0]
    b = ReadBudget(2.0, 3.0, clock=lambda: now[0], max_sources=2)
    assert [b.take("a") for _ in range(4)] == [True, True, True, False]
    assert b.take("b")  # another source has its own
    now[0] += 1.0  # two reads back, never more than the burst
    assert [b.take("a") for _ in range(3)] == [True, True, False]
    now[0] += 100.0
    assert [b.take("a") for _ in range(4)] == [True, True, True, False]
    b.take("c")  # a third source: the least recently used ("b") is dropped
    assert set(b._buckets) == {"a", "c"} and b.refused == 3
    with pytest.raises(ValueError):
        ReadBudget(0, 1)
