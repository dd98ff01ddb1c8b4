"""The worker core driven with explicit time: windows, chain, GPU failures, jobs."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
from agentkit import run_seconds
from fakes import FakeBackend, FakeGpu, NoHeads
from gpu_market.proof import (
    HEALTH_GPU_LOST,
    HEALTH_NVML_ERROR,
    HEALTH_SAMPLES_MISSING,
    HEALTH_TEMP_CRITICAL,
    ZERO_HASH,
    process_list_hash,
    proof_hash,
    receipt_for_proof,
    verify_proof,
)
from gpu_market.receipt import verify_receipt
from gpum_worker.agent import Agent
from gpum_worker.errors import NvmlUnavailable
from gpum_worker.jobs import AssignedJob, StaticJobSource, assign_gpus
from gpum_worker.keys import WorkerKey
from gpum_worker.outbox import Outbox

T0 = 1_700_000_000
W = 10


def job(n: int, gpus: int = 1, status: str = "running", started_at: int | None = T0,
        ended_at: int | None = None) -> AssignedJob:
    return AssignedJob(job=bytes([n]) * 32, market=b"\x02" * 32, program_id=b"\x01" * 32,
                       provider=b"\x03" * 32, gpu_count=gpus, status=status,
                       started_at=started_at, ended_at=ended_at)


def make(tmp_path: Path, key: WorkerKey, jobs: list[AssignedJob], n_gpus: int = 2,
         backend: FakeBackend | None = None) -> tuple[Agent, FakeBackend, StaticJobSource]:
    backend = backend or FakeBackend([FakeGpu(f"GPU-{i}") for i in range(n_gpus)])
    src = StaticJobSource(jobs, clock=lambda: T0)
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey, ["http://v"])
    a = Agent(backend=backend, job_source=src, outbox=ob, key=key, window_seconds=W,
              heads=NoHeads())
    a.start()
    return a, backend, src


def test_windows_chain_signatures(tmp_path: Path, key: WorkerKey) -> None:
    a, _, _ = make(tmp_path, key, [job(7, gpus=2)])
    a.poll_jobs(T0)
    proofs = run_seconds(a, T0, T0 + 3 * W)
    assert [p.seq for p in proofs] == [1, 2, 3]
    assert [p.window_start for p in proofs] == [T0, T0 + W, T0 + 2 * W]
    assert all(p.billable_seconds == W and p.health_flags == 0 for p in proofs)
    assert [p.cumulative_seconds for p in proofs] == [10, 20, 30]
    assert proofs[0].prev_proof_hash == ZERO_HASH
    rows = a.outbox.due("http://v", 1e12, 64)
    assert [r.seq for r in rows] == [1, 2, 3]
    for i, r in enumerate(rows):
        assert verify_proof(key.pubkey, r.proof_sig, r.proof)
        assert verify_receipt(key.pubkey, r.receipt_sig, receipt_for_proof(proofs[i], r.proof))
        if i:
            assert proofs[i].prev_proof_hash == proof_hash(rows[i - 1].proof)
    p = proofs[0]
    assert [g.uuid for g in p.gpus] == ["GPU-0", "GPU-1"]
    assert p.gpus[0].samples == W and p.gpus[0].temp_max_c == 60
    assert p.process_list_hash == process_list_hash(
        [("GPU-0", 4242, 900 * 2**20), ("GPU-1", 4242, 900 * 2**20)])


def test_gpu_lost_mid_window_other_gpus_continue(tmp_path: Path, key: WorkerKey,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    a, b, _ = make(tmp_path, key, [job(1, gpus=1), job(2, gpus=1)])
    a.poll_jobs(T0)

    def hook(t: int) -> None:
        if t == T0 + 4:
            b.lost.add(1)

    with caplog.at_level(logging.WARNING):
        proofs = run_seconds(a, T0, T0 + 2 * W, hook)
    by_job = {(p.job[0], p.seq): p for p in proofs}
    assert by_job[(1, 1)].billable_seconds == W and by_job[(1, 2)].billable_seconds == W
    lost = by_job[(2, 1)]
    assert lost.billable_seconds == 4 and lost.health_flags & HEALTH_GPU_LOST
    assert lost.gpus[0].samples == 4
    assert by_job[(2, 2)].billable_seconds == 0
    assert sum("LOST" in r.message for r in caplog.records) == 1  # logged once, not per tick


def test_unsupported_metric_absent_in_proof(tmp_path: Path, key: WorkerKey) -> None:
    backend = FakeBackend([FakeGpu("GPU-0")])
    backend.unsupported |= {(0, "fan"), (0, "ecc_uncorrected")}
    a, _, _ = make(tmp_path, key, [job(1)], backend=backend)
    a.poll_jobs(T0)
    (p,) = run_seconds(a, T0, T0 + W)
    assert p.gpus[0].fan_max_pct is None and p.gpus[0].ecc_uncorrected_delta is None
    assert p.billable_seconds == W and p.health_flags == 0


def test_failing_call_flagged_not_fatal(tmp_path: Path, key: WorkerKey,
                                        caplog: pytest.LogCaptureFixture) -> None:
    backend = FakeBackend([FakeGpu("GPU-0")])
    backend.failing[(0, "power")] = "NVMLError_Unknown: Unknown Error"
    a, _, _ = make(tmp_path, key, [job(1)], backend=backend)
    a.poll_jobs(T0)
    with caplog.at_level(logging.WARNING):
        (p,) = run_seconds(a, T0, T0 + W)
    assert p.gpus[0].power_avg_mw is None
    assert p.health_flags & HEALTH_NVML_ERROR
    assert p.billable_seconds == W
    assert sum("NVML call failed" in r.message for r in caplog.records) == 1  # rate-limited


def test_driver_not_loaded_is_fatal_at_start(tmp_path: Path, key: WorkerKey) -> None:
    backend = FakeBackend([], init_error="no usable NVIDIA driver: DriverNotLoaded")
    with pytest.raises(NvmlUnavailable, match="NVIDIA driver"):
        make(tmp_path, key, [job(1)], backend=backend)


def test_restart_resumes_chain_and_proves_missed_windows(tmp_path: Path, key: WorkerKey
                                                         ) -> None:
    a, _, _ = make(tmp_path, key, [job(1)])
    a.poll_jobs(T0)
    first = run_seconds(a, T0, T0 + 2 * W + 3)  # killed 3 s into window 3
    assert [p.seq for p in first] == [1, 2]
    a.outbox.close()
    # Restart 25 s later: windows 3 and 4 were (partly) not observed.
    a2, _, _ = make(tmp_path, key, [job(1)])
    a2.poll_jobs(T0 + 45)
    later = run_seconds(a2, T0 + 45, T0 + 6 * W)
    assert [p.seq for p in later] == [3, 4, 5, 6]
    assert later[0].prev_proof_hash == proof_hash(a2.outbox.due("http://v", 1e12, 64)[1].proof)
    assert [p.billable_seconds for p in later] == [0, 0, 5, 10]
    assert later[0].gpus[0].samples == 0 and later[0].health_flags & HEALTH_SAMPLES_MISSING
    assert later[-1].cumulative_seconds == 20 + 15


def test_gpu_assignment_first_free_and_stable(tmp_path: Path, key: WorkerKey) -> None:
    a, _, src = make(tmp_path, key, [job(1, gpus=1), job(2, gpus=2)], n_gpus=4)
    a.poll_jobs(T0)
    assert a.active[job(1).job].uuids == ("GPU-0",)
    assert a.active[job(2).job].uuids == ("GPU-1", "GPU-2")
    src.remove(job(1).job)
    a.poll_jobs(T0 + 1)
    assert job(1).job not in a.active
    src.set(job(3, gpus=2))
    a.poll_jobs(T0 + 2)
    assert a.active[job(3).job].uuids == ("GPU-0", "GPU-3")
    a.outbox.close()
    a2, _, _ = make(tmp_path, key, [job(3, gpus=2), job(2, gpus=2)], n_gpus=4)
    a2.poll_jobs(T0 + 3)
    assert a2.active[job(3).job].uuids == ("GPU-0", "GPU-3")
    assert a2.active[job(2).job].uuids == ("GPU-1", "GPU-2")


def test_assign_gpus_starved() -> None:
    out, starved = assign_gpus([job(1, gpus=2), job(2, gpus=1)], ["A", "B"], {})
    assert out == {job(1).job: ("A", "B")} and starved == [job(2, gpus=1)]


def test_open_job_is_accepted_then_proven(tmp_path: Path, key: WorkerKey) -> None:
    a, _, src = make(tmp_path, key, [job(1, status="open", started_at=None)])
    a.poll_jobs(T0)
    assert src.accepted == [job(1).job] and not a.active
    a.poll_jobs(T0)
    assert job(1).job in a.active
    assert len(run_seconds(a, T0, T0 + W)) == 1


def test_finishing_job_last_window_truncated(tmp_path: Path, key: WorkerKey) -> None:
    a, _, src = make(tmp_path, key, [job(1)])
    a.poll_jobs(T0)
    proofs = run_seconds(a, T0, T0 + 12)
    src.set(job(1, status="finishing", ended_at=T0 + 14))
    a.poll_jobs(T0 + 12)
    proofs += run_seconds(a, T0 + 12, T0 + 30)
    assert [(p.window_start, p.window_end, p.billable_seconds) for p in proofs] == [
        (T0, T0 + 10, 10), (T0 + 10, T0 + 14, 4)]
    assert a.active[job(1).job].done


def test_job_source_failure_keeps_jobs(tmp_path: Path, key: WorkerKey) -> None:
    from gpum_worker.errors import JobSourceError

    a, _, src = make(tmp_path, key, [job(1)])
    a.poll_jobs(T0)

    def boom() -> list:
        raise JobSourceError("rpc down")

    src.assigned_jobs = boom  # type: ignore[method-assign]
    a.poll_jobs(T0 + 1)
    assert job(1).job in a.active
    assert len(run_seconds(a, T0, T0 + W)) == 1


# ------------------------------------------------------ the chain decides when a job ended


class ChainLikeSource:
    """A job source whose listing and per-job status differ, as a flaky RPC's can."""

    def __init__(self, listing: list[AssignedJob]) -> None:
        self.listing = listing
        self.status: dict[bytes, str | None] = {j.job: j.status for j in listing}
        self.status_calls = 0

    def assigned_jobs(self) -> list[AssignedJob]:
        return list(self.listing)

    def job_status(self, job: bytes) -> str | None:
        self.status_calls += 1
        return self.status.get(job)

    def accept(self, job: AssignedJob) -> None:
        raise AssertionError("no open job here")

    def worker_keys(self) -> frozenset[bytes]:
        return frozenset()


@pytest.mark.parametrize("how_it_ends", ["completed", "account-closed"])
def test_gpus_stay_booked_until_the_chain_shows_the_job_ended(
        tmp_path: Path, key: WorkerKey, how_it_ends: str) -> None:
    a, _, _ = make(tmp_path, key, [], n_gpus=2)
    src = ChainLikeSource([job(1, gpus=2)])
    a.job_source = src
    a.poll_jobs(T0)
    assert a.active[job(1).job].uuids == ("GPU-0", "GPU-1")
    src.listing = []  # the RPC momentarily lists nothing; the job is still Running
    a.poll_jobs(T0 + 1)
    src.listing = [job(2, gpus=1)]
    src.status[job(2).job] = "running"
    a.poll_jobs(T0 + 2)
    assert job(1).job in a.active and job(2).job not in a.active  # no GPU taken from job 1
    assert a.outbox.assignments() == {job(1).job: ("GPU-0", "GPU-1")}
    assert len(run_seconds(a, T0, T0 + W)) == 1  # job 1 is still proven
    # A restart while the listing is still incomplete keeps the booking too.
    a.outbox.close()
    a, _, _ = make(tmp_path, key, [], n_gpus=2)
    a.job_source = src
    a.poll_jobs(T0 + W)
    assert job(2).job not in a.active
    assert a.outbox.assignments()[job(1).job] == ("GPU-0", "GPU-1")
    # The chain shows the end: only then are the GPUs given to another job.
    if how_it_ends == "completed":
        src.status[job(1).job] = "completed"
        a.poll_jobs(T0 + W + 1)
    else:  # closed accounts read as None; a lagging RPC node can say so once or twice
        src.status[job(1).job] = None
        for t in range(3):
            assert job(2).job not in a.active
            a.poll_jobs(T0 + W + 1 + t)
    assert job(1).job not in a.active
    assert a.active[job(2).job].uuids == ("GPU-0",)


def test_window_and_health_thresholds_come_from_the_job_terms(tmp_path: Path,
                                                              key: WorkerKey) -> None:
    """The agent is configured with W=10 and 95 C; the job's terms say 5 s and 60 C."""
    from gpum_worker.jobs import JobTerms

    terms = JobTerms(window_seconds=5, max_skew_seconds=2, temp_critical_c=60,
                     ecc_uncorrected_max=0)
    hot = replace(job(1), terms=terms)
    cool = replace(job(2), terms=replace(terms, temp_critical_c=61))
    a, _, _ = make(tmp_path, key, [hot, cool], n_gpus=2)  # both GPUs read 60 C
    a.poll_jobs(T0)
    proofs = run_seconds(a, T0, T0 + 10)
    by_job = {(p.job[0], p.seq): p for p in proofs}
    assert sorted(by_job) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(p.window_end - p.window_start == 5 for p in proofs)
    assert by_job[(1, 1)].billable_seconds == 0  # 60 C is critical for this job
    assert by_job[(1, 1)].health_flags & HEALTH_TEMP_CRITICAL
    assert by_job[(2, 1)].billable_seconds == 5
