"""Workers find their validators on chain: each job's proofs go to its committee.

Validators are real HTTP servers on 127.0.0.1 (``StubValidator``). The chain is an
SDK-shaped fake client (``list_jobs``, ``fetch_job``, ``fetch_provider``,
``fetch_validator_by_authority``) behind the real ``ChainJobSource``; the worker core is
driven with explicit time, as in test_resume.py.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentkit import run_seconds
from fakes import FakeBackend, FakeGpu
from gpu_market.net import BoundedClient
from gpu_market.proof import ZERO_HASH, GpuWindow, WindowProof, encode_proof, proof_hash
from gpum_worker.agent import Agent
from gpum_worker.committee import CommitteeRouter, endpoint_url
from gpum_worker.errors import JobSourceError
from gpum_worker.heads import HttpHeadSource
from gpum_worker.jobs import ChainJobSource, committee_of
from gpum_worker.keys import WorkerKey
from gpum_worker.outbox import Outbox
from gpum_worker.sender import RetryPolicy, Sender
from gpum_worker.stub_validator import StubValidator
from solders.pubkey import Pubkey

T0 = 1_700_000_000
W = 10
PROGRAM = b"\x01" * 32
MARKET = b"\x02" * 32
PROVIDER = b"\x03" * 32
JOB1, JOB2 = b"\x11" * 32, b"\x12" * 32


def auth(n: int) -> bytes:
    """A validator authority key."""
    return bytes([0x40 + n]) * 32


class FakeChain:
    """SDK-shaped client: jobs by address, Validator accounts by (market, authority)."""

    def __init__(self, worker_key: bytes) -> None:
        self.jobs: dict[bytes, types.SimpleNamespace] = {}
        self.validators: dict[tuple[bytes, bytes], types.SimpleNamespace] = {}
        self.worker_key = worker_key
        self.fail_validators = False
        self.validator_reads = 0

    # chain writes, as the programs' instructions would make them
    def add_job(self, job: bytes, committee: list[bytes]) -> None:
        terms = types.SimpleNamespace(window_seconds=W, max_skew_seconds=5, temp_critical_c=95,
                                      ecc_uncorrected_max=0, quorum=1)
        self.jobs[job] = types.SimpleNamespace(
            address=Pubkey.from_bytes(job), market=Pubkey.from_bytes(MARKET), gpu_count=1,
            status="running", started_at=T0, ended_at=0, terms=terms, last_seq=0,
            last_window_end=0, claimed_seconds=0, paid_seconds=0,
            committee=[Pubkey.from_bytes(a) for a in committee])

    def register_validator(self, authority: bytes, endpoint: str) -> None:
        self.validators[(MARKET, authority)] = types.SimpleNamespace(
            authority=Pubkey.from_bytes(authority), endpoint=endpoint, status="active")

    def replace_committee_member(self, job: bytes, index: int, new: bytes) -> None:
        self.jobs[job].committee[index] = Pubkey.from_bytes(new)

    # SDK reads
    def list_jobs(self, provider, statuses):
        return [v for v in self.jobs.values() if v.status in statuses]

    def fetch_job(self, job):
        return self.jobs.get(bytes(job))

    def fetch_provider(self, provider):
        return types.SimpleNamespace(worker_key=Pubkey.from_bytes(self.worker_key),
                                     retired_keys=[])

    def fetch_validator_by_authority(self, market, authority):
        self.validator_reads += 1
        if self.fail_validators:
            raise RuntimeError("rpc down")
        return self.validators.get((bytes(market), bytes(authority)))


class Clock:
    def __init__(self) -> None:
        self.t = 1e12

    def __call__(self) -> float:
        return self.t


class Worker:
    """One incarnation of the worker with chain discovery (no static validator list)."""

    def __init__(self, db: Path, key: WorkerKey, chain: FakeChain, n_gpus: int = 2,
                 static: tuple[str, ...] = ()) -> None:
        self.outbox = Outbox(db, key.pubkey, static)
        self.client = BoundedClient(2.0)
        self.source = ChainJobSource(chain, PROVIDER, PROGRAM, key)
        self.agent = Agent(backend=FakeBackend([FakeGpu(f"GPU-{i}") for i in range(n_gpus)]),
                           job_source=self.source, outbox=self.outbox, key=key,
                           window_seconds=W, heads=HttpHeadSource(self.client, 2.0),
                           router=CommitteeRouter(static))
        self.agent.start()
        self.outbox.sync_validators()  # as Agent.run does at start
        self.clock = Clock()
        self.sender = Sender(self.outbox, self.client, RetryPolicy(base_s=0.01, cap_s=0.01),
                             random.Random(1), clock=self.clock)

    def run(self, start: int, end: int) -> list[WindowProof]:
        """Poll the chain, sample every second of [start, end), close windows, deliver."""
        self.agent.poll_jobs(start)
        proofs = run_seconds(self.agent, start, end)
        self.deliver()
        return proofs

    def deliver(self) -> None:
        self.clock.t += 1
        self.sender.deliver_once()

    def close(self) -> None:
        self.outbox.close()
        self.client.close()


@pytest.fixture
def stubs() -> Iterator[list[StubValidator]]:
    s = [StubValidator().start() for _ in range(4)]
    yield s
    for v in s:
        v.stop()


def held(stub: StubValidator) -> dict[bytes, list[int]]:
    """job -> seqs the stub stores."""
    out: dict[bytes, list[int]] = {}
    for job, seq in sorted(stub.stored):
        out.setdefault(job, []).append(seq)
    return out


def test_two_jobs_with_different_committees(tmp_path: Path, key: WorkerKey,
                                            stubs: list[StubValidator]) -> None:
    a, b, c, outsider = stubs
    chain = FakeChain(key.pubkey)
    for i, s in enumerate(stubs):
        chain.register_validator(auth(i), s.url)
    chain.add_job(JOB1, [auth(0), auth(1)])
    chain.add_job(JOB2, [auth(1), auth(2)])
    w = Worker(tmp_path / "o.sqlite", key, chain)
    proofs = w.run(T0, T0 + 2 * W)
    assert sorted((p.job, p.seq) for p in proofs) == [(JOB1, 1), (JOB1, 2), (JOB2, 1), (JOB2, 2)]
    assert w.outbox.counts()["proofs"] == 0  # every member of each job acknowledged
    w.close()
    assert held(a) == {JOB1: [1, 2]}
    assert held(b) == {JOB1: [1, 2], JOB2: [1, 2]}
    assert held(c) == {JOB2: [1, 2]}
    assert outsider.requests == 0 and outsider.head_requests == 0
    # The heads check of a new job asked that job's members only.
    assert set(a.head_jobs) == {JOB1} and set(c.head_jobs) == {JOB2}
    assert set(b.head_jobs) == {JOB1, JOB2}


def test_committee_change_mid_job_moves_delivery(tmp_path: Path, key: WorkerKey,
                                                 stubs: list[StubValidator],
                                                 caplog: pytest.LogCaptureFixture) -> None:
    a, b, c, d = stubs
    chain = FakeChain(key.pubkey)
    for i, s in enumerate(stubs):
        chain.register_validator(auth(i), s.url)
    chain.add_job(JOB1, [auth(0), auth(1)])
    w = Worker(tmp_path / "o.sqlite", key, chain)
    w.run(T0, T0 + 2 * W)
    b.fail_status = 503  # member B goes down; seq 3 stays owed to it
    w.run(T0 + 2 * W, T0 + 3 * W)
    assert w.outbox.counts()["proofs"] == 1
    assert w.outbox.acked_by(JOB1, 3) == [a.url]
    # The user replaces B by C (replace_committee_member): within one poll, seq 3 (still
    # owed to B) is owed to C instead, and new windows go to A and C.
    chain.replace_committee_member(JOB1, 1, auth(2))
    with caplog.at_level(logging.INFO):
        w.run(T0 + 3 * W, T0 + 4 * W)
    assert w.outbox.counts()["proofs"] == 0  # nothing kept for the removed member
    assert any("added: " + c.url in r.message and "removed: " + b.url in r.message
               for r in caplog.records)
    assert held(b) == {JOB1: [1, 2]}
    assert held(c) == {JOB1: [3, 4]} and held(a) == {JOB1: [1, 2, 3, 4]}
    assert a.duplicates == 0  # A was not sent seq 3 again
    # A moves its endpoint (update_validator): the next poll sends to the new URL.
    chain.register_validator(auth(0), d.url)
    w.run(T0 + 4 * W, T0 + 5 * W)
    w.close()
    assert held(d) == {JOB1: [5]} and held(a) == {JOB1: [1, 2, 3, 4]}
    assert held(c) == {JOB1: [3, 4, 5]}


def test_restart_keeps_per_destination_acknowledgements(tmp_path: Path, key: WorkerKey,
                                                        stubs: list[StubValidator]) -> None:
    a, b, _, _ = stubs
    chain = FakeChain(key.pubkey)
    chain.register_validator(auth(0), a.url)
    chain.register_validator(auth(1), b.url)
    chain.add_job(JOB1, [auth(0), auth(1)])
    db = tmp_path / "o.sqlite"
    b.transient = [(503, {"error": "busy", "message": "later"})] * 100  # POSTs fail
    w = Worker(db, key, chain)
    w.run(T0, T0 + 3 * W)
    assert held(a) == {JOB1: [1, 2, 3]}
    assert [w.outbox.acked_by(JOB1, s) for s in (1, 2, 3)] == [[a.url]] * 3
    w.close()
    posts_to_a = a.requests
    b.transient = []
    w2 = Worker(db, key, chain)  # restart: the chain may not even be read yet ...
    w2.deliver()  # ... the stored route delivers what B is owed
    assert held(b) == {JOB1: [1, 2, 3]}
    assert a.requests == posts_to_a and a.duplicates == 0  # acked by A: never resent
    assert w2.outbox.counts()["proofs"] == 0
    later = w2.run(T0 + 3 * W, T0 + 4 * W)
    w2.close()
    assert [p.seq for p in later] == [4]
    assert held(a) == held(b) == {JOB1: [1, 2, 3, 4]}
    assert a.duplicates == 0 and b.duplicates == 0


def test_members_without_usable_endpoint_are_skipped(tmp_path: Path, key: WorkerKey,
                                                     stubs: list[StubValidator],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    a = stubs[0]
    chain = FakeChain(key.pubkey)
    chain.register_validator(auth(0), a.url)
    chain.register_validator(auth(2), "ftp://validator.example/")
    chain.register_validator(auth(3), "")
    chain.add_job(JOB1, [auth(0), auth(1), auth(2), auth(3)])  # auth(1): no account
    w = Worker(tmp_path / "o.sqlite", key, chain)
    # The outbox has local state for the job (an ordinary restart): members that cannot be
    # asked do not block it; a brand-new job cannot be started while one cannot be asked.
    w.outbox.ensure_job(JOB1, T0, W)
    with caplog.at_level(logging.WARNING):
        w.run(T0, T0 + 2 * W)
    assert w.outbox.counts()["proofs"] == 0  # A's acknowledgement is all that is owed
    w.close()
    assert held(a) == {JOB1: [1, 2]}
    text = "\n".join(r.message for r in caplog.records)
    assert "has no Validator account" in text and "is not an http(s) URL" in text
    assert "has no endpoint" in text


def test_new_job_waits_while_a_member_cannot_be_asked(tmp_path: Path, key: WorkerKey,
                                                      stubs: list[StubValidator]) -> None:
    a = stubs[0]
    chain = FakeChain(key.pubkey)
    chain.register_validator(auth(0), a.url)
    chain.add_job(JOB1, [auth(0), auth(1)])  # auth(1) has no Validator account (yet)
    w = Worker(tmp_path / "o.sqlite", key, chain)
    assert w.run(T0, T0 + W) == [] and JOB1 not in w.agent.active
    chain.register_validator(auth(1), stubs[1].url)
    later = w.run(T0 + W, T0 + 2 * W)
    w.close()
    assert [p.seq for p in later] == [1, 2]
    assert held(stubs[1]) == {JOB1: [1, 2]}


def test_heads_ask_the_committee_not_others(tmp_path: Path, key: WorkerKey,
                                            stubs: list[StubValidator]) -> None:
    """Lost database: resume asks the job's members; a non-member's failure is irrelevant,
    a member's blocks signing."""
    a, b, c, outsider = stubs
    chain = FakeChain(key.pubkey)
    for i, s in enumerate(stubs):
        chain.register_validator(auth(i), s.url)
    chain.add_job(JOB1, [auth(0), auth(1)])
    db = tmp_path / "o.sqlite"
    w = Worker(db, key, chain)
    w.run(T0, T0 + 2 * W)
    w.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    outsider.head_status = 503
    chain.replace_committee_member(JOB1, 1, auth(2))  # C holds nothing for the job
    c.head_status = 503
    w2 = Worker(db, key, chain)
    assert w2.run(T0 + 2 * W, T0 + 3 * W) == []  # member C cannot answer: nothing signed
    c.head_status = None
    later = w2.run(T0 + 3 * W, T0 + 4 * W)
    w2.close()
    assert [p.seq for p in later] == [3, 4]  # after A's head (seq 2)
    assert later[0].prev_proof_hash == a.stored[(JOB1, 2)]
    assert outsider.head_requests == 0 and a.equivocations == 0
    assert held(c) == {JOB1: [3, 4]} and held(b) == {JOB1: [1, 2]}


def test_validator_read_failure_keeps_last_route(tmp_path: Path, key: WorkerKey,
                                                 stubs: list[StubValidator]) -> None:
    a, b = stubs[:2]
    chain = FakeChain(key.pubkey)
    chain.register_validator(auth(0), a.url)
    chain.register_validator(auth(1), b.url)
    chain.add_job(JOB1, [auth(0), auth(1)])
    w = Worker(tmp_path / "o.sqlite", key, chain)
    w.run(T0, T0 + W)
    chain.fail_validators = True  # RPC fails: known endpoints are kept, nothing is dropped
    w.run(T0 + W, T0 + 2 * W)
    w.close()
    assert held(a) == held(b) == {JOB1: [1, 2]}


def test_static_validator_list_overrides_discovery(tmp_path: Path, key: WorkerKey,
                                                   stubs: list[StubValidator]) -> None:
    a, b, c, _ = stubs
    chain = FakeChain(key.pubkey)
    chain.register_validator(auth(0), a.url)
    chain.add_job(JOB1, [auth(0)])
    w = Worker(tmp_path / "o.sqlite", key, chain, static=(b.url, c.url))
    w.run(T0, T0 + W)
    w.close()
    assert held(a) == {} and held(b) == held(c) == {JOB1: [1]}
    assert chain.validator_reads == 0


# ---------------------------------------------------------------------------- units


def test_endpoint_url() -> None:
    assert endpoint_url("https://v.example:8443/gpum/") == ("https://v.example:8443/gpum", "")
    assert endpoint_url(" http://127.0.0.1:9000 ")[0] == "http://127.0.0.1:9000"
    for bad in ("", "   ", "ftp://v.example", "v.example:80", "http://", "http://v:99999",
                "http://v.example/?x=1", "http://u:p@v.example", "http://v.example/a b",
                "javascript:alert(1)"):
        url, why = endpoint_url(bad)
        assert url is None and why, bad


def test_committee_of_views_and_raw_accounts() -> None:
    k = [Pubkey.from_bytes(auth(i)) for i in range(3)]
    assert committee_of(types.SimpleNamespace(committee=k[:2])) == (auth(0), auth(1))
    raw = types.SimpleNamespace(committee=[k[0], k[2], Pubkey.default(), Pubkey.default(),
                                           Pubkey.default()], committee_len=2)
    assert committee_of(raw) == (auth(0), auth(2))
    assert committee_of({"committee": [k[1], Pubkey.default()]}) == (auth(1),)
    assert committee_of(types.SimpleNamespace()) is None


def test_chain_source_reads_endpoints_by_pda_without_the_helper(key: WorkerKey) -> None:
    from gpu_market.pda import validator_pda

    class OldClient:
        def __init__(self) -> None:
            self.accounts = {}

        def fetch_validator(self, address):
            return self.accounts.get(address)

    c = OldClient()
    pda = validator_pda(Pubkey.from_bytes(MARKET), Pubkey.from_bytes(auth(0)),
                        Pubkey.from_bytes(PROGRAM))
    c.accounts[pda] = {"endpoint": list(b"http://v.example:1" + bytes(78))}  # raw [u8; 96]
    src = ChainJobSource(c, PROVIDER, PROGRAM, key)
    assert src.validator_endpoint(MARKET, auth(0)) == "http://v.example:1"
    assert src.validator_endpoint(MARKET, auth(1)) is None
    c.fetch_validator = lambda address: (_ for _ in ()).throw(RuntimeError("429"))
    with pytest.raises(JobSourceError, match="429"):
        src.validator_endpoint(MARKET, auth(0))


def test_chain_source_job_fields_new_and_old_sdk(key: WorkerKey) -> None:
    chain = FakeChain(key.pubkey)
    chain.add_job(JOB1, [auth(0), auth(1)])
    chain.jobs[JOB1].claimed_seconds = 70
    chain.jobs[JOB1].paid_seconds = 60
    src = ChainJobSource(chain, PROVIDER, PROGRAM, key)
    (j,) = src.assigned_jobs()
    assert j.committee == (auth(0), auth(1)) and j.claimed_seconds == 70
    assert src.fetch(JOB1) == j and src.fetch(JOB2) is None
    old = vars(chain.jobs[JOB1]).copy()
    for name in ("committee", "claimed_seconds", "paid_seconds"):
        del old[name]
    chain.jobs[JOB1] = types.SimpleNamespace(**old, settled_seconds=50)
    (j,) = src.assigned_jobs()
    assert j.committee is None and j.claimed_seconds == 50


def _proof(key: WorkerKey, job: bytes, seq: int, prev: bytes) -> WindowProof:
    return WindowProof(
        program_id=PROGRAM, market=MARKET, job=job, provider=PROVIDER, worker_key=key.pubkey,
        seq=seq, window_start=T0 + (seq - 1) * W, window_end=T0 + seq * W,
        sample_interval_ms=1000, gpus=(GpuWindow("GPU-0", W, W),),
        process_list_hash=ZERO_HASH, prev_proof_hash=prev, health_flags=0,
        billable_seconds=W, cumulative_seconds=seq * W)


def _record(ob: Outbox, key: WorkerKey, job: bytes, n: int) -> None:
    chain = ob.ensure_job(job, T0, W)
    for _ in range(n):
        p = _proof(key, job, chain.last_seq + 1, chain.last_hash)
        b = encode_proof(p)
        chain = ob.record(p, b, proof_hash(b), b"s" * 64, b"r" * 64)


def test_outbox_routes_per_job(tmp_path: Path, key: WorkerKey) -> None:
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey)
    _record(ob, key, JOB1, 1)  # no route yet: kept, owed to nobody so far
    assert ob.counts() == {"pending": 0, "rejected": 0, "equivocation": 0, "proofs": 1}
    assert ob.set_destinations(JOB1, ["http://a", "http://b"]) == (["http://a", "http://b"], [])
    assert ob.set_destinations(JOB1, ["http://b", "http://a"]) == ([], [])
    ob.set_destinations(JOB2, ["http://c"])
    _record(ob, key, JOB1, 1)
    _record(ob, key, JOB2, 1)
    assert [(i.job, i.seq) for i in ob.due("http://a", 1e12, 64)] == [(JOB1, 1), (JOB1, 2)]
    assert [(i.job, i.seq) for i in ob.due("http://c", 1e12, 64)] == [(JOB2, 1)]
    assert ob.destinations() == ["http://a", "http://b", "http://c"]
    ob.ack("http://a", [(JOB1, 1), (JOB1, 2)])
    assert ob.counts()["proofs"] == 3
    # b is replaced by d: seq 1 and 2 are owed to d now; an empty route keeps proofs.
    assert ob.set_destinations(JOB1, ["http://a", "http://d"]) == (["http://d"], ["http://b"])
    ob.ack("http://d", [(JOB1, 1)])
    assert ob.counts()["proofs"] == 2
    ob.set_destinations(JOB2, [])
    assert ob.counts()["proofs"] == 2 and ob.due("http://c", 1e12, 64) == []
    ob.close()
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey)
    assert ob.sync_validators() == []
    assert ob.stored_route(JOB1) == ("http://a", "http://d") and ob.stored_route(JOB2) == ()
    assert ob.due("http://a", 1e12, 64) == []  # acked before the restart: stays acked
    assert [(i.job, i.seq) for i in ob.due("http://d", 1e12, 64)] == [(JOB1, 2)]


def test_schema_2_database_is_migrated(tmp_path: Path, key: WorkerKey) -> None:
    db = tmp_path / "o.sqlite"
    ob = Outbox(db, key.pubkey, ["http://a", "http://b"])
    _record(ob, key, JOB1, 2)
    ob.close()
    raw = sqlite3.connect(db)
    raw.executescript("""
        DROP INDEX deliveries_due;
        ALTER TABLE deliveries RENAME TO d3;
        CREATE TABLE deliveries(
            job BLOB NOT NULL, seq INTEGER NOT NULL, validator TEXT NOT NULL,
            state TEXT NOT NULL CHECK(state IN ('pending', 'rejected', 'equivocation')),
            attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at REAL NOT NULL,
            last_error TEXT, PRIMARY KEY(job, seq, validator));
        CREATE INDEX deliveries_due ON deliveries(validator, state, next_attempt_at);
        INSERT INTO deliveries SELECT * FROM d3 WHERE NOT (validator='http://a' AND seq=1);
        DROP TABLE d3; DROP TABLE routes; DROP TABLE routed_jobs;
        UPDATE meta SET value='2' WHERE key='schema';""")
    raw.close()
    ob = Outbox(db, key.pubkey, ["http://a", "http://b"])
    assert [i.seq for i in ob.due("http://a", 1e12, 64)] == [2]  # a acked seq 1 before
    assert [i.seq for i in ob.due("http://b", 1e12, 64)] == [1, 2]
    ob.ack("http://b", [(JOB1, 1), (JOB1, 2)])
    assert ob.counts()["proofs"] == 1 and ob.acked_by(JOB1, 2) == ["http://b"]
    ob.ack("http://a", [(JOB1, 2)])
    assert ob.counts() == {"pending": 0, "rejected": 0, "equivocation": 0, "proofs": 0}
