"""``ChainJobSource`` against SDK-shaped views (no RPC): terms, key history, status."""

from __future__ import annotations

import types

import pytest
from gpum_worker.errors import JobSourceError
from gpum_worker.jobs import AssignedJob, ChainJobSource, JobTerms, assign_gpus
from solders.pubkey import Pubkey

PROVIDER = b"\x03" * 32
PROGRAM = b"\x01" * 32


def _terms(**kw):
    base = {"rate_per_second": 7, "fee_bps": 100, "burn_bps": 10, "window_seconds": 30,
            "max_missed_windows": 10, "grace_seconds": 60, "max_skew_seconds": 4,
            "settle_quorum": 1, "downtime_slash_bps": 1, "equivocation_slash_bps": 1,
            "reporter_reward_bps": 1, "temp_critical_c": 88, "ecc_uncorrected_max": 2}
    base.update(kw)
    return types.SimpleNamespace(**base)


def _job_view(n: int, status: object = "running", terms: object = None, **kw):
    fields = {"address": Pubkey.from_bytes(bytes([n]) * 32),
              "market": Pubkey.from_bytes(b"\x02" * 32), "gpu_count": 2, "status": status,
              "started_at": 1000, "ended_at": 0, "last_seq": 4, "last_window_end": 1120,
              "settled_seconds": 100}
    fields.update(kw)
    if terms is not None:
        fields["terms"] = terms
    return types.SimpleNamespace(**fields)


class FakeClient:
    def __init__(self) -> None:
        self.jobs: dict[bytes, object] = {}
        self.provider: object = None
        self.fail = False
        self.closed: set[bytes] = set()

    def fetch_closed_job(self, job):
        return object() if bytes(job) in self.closed else None

    def list_jobs(self, provider, statuses):
        assert bytes(provider) == PROVIDER and set(statuses) == {"open", "running",
                                                                  "finishing"}
        if self.fail:
            raise RuntimeError("rpc down")
        return list(self.jobs.values())

    def fetch_job(self, job):
        if self.fail:
            raise RuntimeError("rpc down")
        return self.jobs.get(bytes(job))

    def fetch_provider(self, provider):
        return self.provider


def _source(client: FakeClient) -> ChainJobSource:
    return ChainJobSource(client, PROVIDER, PROGRAM, key=None)  # type: ignore[arg-type]


def test_job_terms_and_chain_state_are_read_from_the_job() -> None:
    c = FakeClient()
    c.jobs[b"\x05" * 32] = _job_view(5, terms=_terms())
    # anchorpy-style enum variant object (class named after the variant), dict-shaped terms
    running = type("Finishing", (), {})()
    c.jobs[b"\x06" * 32] = _job_view(6, status=running, ended_at=1500,
                                     terms=dict(vars(_terms(window_seconds=60))))
    j5, j6 = sorted(_source(c).assigned_jobs(), key=lambda j: j.job)
    assert j5.terms == JobTerms(window_seconds=30, max_skew_seconds=4, temp_critical_c=88,
                                ecc_uncorrected_max=2, grace_seconds=60)
    assert (j5.last_seq, j5.last_window_end, j5.claimed_seconds) == (4, 1120, 100)
    assert (j5.status, j5.started_at, j5.ended_at, j5.gpu_count) == ("running", 1000, None, 2)
    assert j5.program_id == PROGRAM and j5.provider == PROVIDER
    assert (j6.status, j6.ended_at, j6.terms.window_seconds) == ("finishing", 1500, 60)


def test_view_without_terms_falls_back_to_configuration() -> None:
    c = FakeClient()
    c.jobs[b"\x05" * 32] = _job_view(5)
    (j,) = _source(c).assigned_jobs()
    assert j.terms is None


def test_job_status_reads_the_account() -> None:
    c = FakeClient()
    c.jobs[b"\x05" * 32] = _job_view(5, status="Declined")
    s = _source(c)
    assert s.job_status(b"\x05" * 32) == "declined"
    assert s.job_status(b"\x09" * 32) is None  # no account: not known to have ended
    c.closed.add(b"\x09" * 32)
    assert s.job_status(b"\x09" * 32) == "closed"  # the user's close_job left its tombstone
    c.fail = True
    with pytest.raises(JobSourceError, match="rpc down"):
        s.job_status(b"\x05" * 32)
    with pytest.raises(JobSourceError, match="rpc down"):
        s.assigned_jobs()


def test_worker_keys_current_and_retired() -> None:
    c = FakeClient()
    slot = types.SimpleNamespace
    c.provider = types.SimpleNamespace(
        worker_key=Pubkey.from_bytes(b"\x0a" * 32),
        retired_keys=[slot(key=Pubkey.from_bytes(b"\x0b" * 32), retired_at=5),
                      slot(key=Pubkey.from_bytes(bytes(32)), retired_at=0),
                      slot(key=Pubkey.from_bytes(b"\x0c" * 32), retired_at=9),
                      slot(key=Pubkey.from_bytes(bytes(32)), retired_at=0)])
    assert _source(c).worker_keys() == {b"\x0a" * 32, b"\x0b" * 32, b"\x0c" * 32}
    c.provider = None
    with pytest.raises(JobSourceError, match="no Provider account"):
        _source(c).worker_keys()


def test_assign_gpus_never_hands_out_a_booked_gpu() -> None:
    def j(n: int, gpus: int) -> AssignedJob:
        return AssignedJob(job=bytes([n]) * 32, market=b"", program_id=b"", provider=b"",
                           gpu_count=gpus, status="running")

    # job 1 is not listed right now but still books A
    out, starved = assign_gpus([j(2, 1), j(3, 1)], ["A", "B"], {j(1, 1).job: ("A",)})
    assert out == {j(2, 1).job: ("B",)} and starved == [j(3, 1)]


def test_user_and_workload_hash_are_read_and_finish_uses_the_worker_key(key) -> None:
    from gpum_worker.jobs import NO_WORKLOAD_HASH, StaticJobSource

    c = FakeClient()
    user = Pubkey.from_bytes(b"\x0d" * 32)
    c.jobs[b"\x05" * 32] = _job_view(5, user=user, workload_hash=list(b"\xab" * 32))
    c.jobs[b"\x06" * 32] = _job_view(6, user=user)  # an SDK from before workloads
    finished = []
    c.finish_job = lambda signer, job: finished.append((bytes(signer.pubkey()), bytes(job)))
    s = ChainJobSource(c, PROVIDER, PROGRAM, key)
    j5, j6 = sorted(s.assigned_jobs(), key=lambda j: j.job)
    assert j5.user == b"\x0d" * 32 and j5.workload_hash == b"\xab" * 32 and j5.has_workload
    assert j6.workload_hash == NO_WORKLOAD_HASH and not j6.has_workload
    s.finish(j5)
    assert finished == [(key.pubkey, j5.job)]

    def boom(signer, job):
        raise RuntimeError("JobNotRunning")

    c.finish_job = boom
    with pytest.raises(JobSourceError, match="finishing job .* JobNotRunning"):
        s.finish(j5)
    # The fixed list: finish moves a running job to finishing at the clock's time.
    st = StaticJobSource([j5], clock=lambda: 2000)
    st.finish(j5)
    assert st.finished == [j5.job]
    assert (st.job_status(j5.job), st.fetch(j5.job).ended_at) == ("finishing", 2000)
    with pytest.raises(JobSourceError, match="not running"):
        st.finish(j5)
