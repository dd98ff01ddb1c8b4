"""Why a job ended, in the user's words (``job_end.end_reason``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from gpum_worker.job_end import end_reason
from gpum_worker.jobs import AssignedJob
from gpum_worker.workload_store import WorkloadRecord

JOB = AssignedJob(job=b"\1" * 32, market=bytes(32), program_id=bytes(32), provider=bytes(32),
                  gpu_count=1, status="running")
REC = WorkloadRecord(job=b"\1" * 32, workload_hash=b"\2" * 32, spec=b"{}", state="stopped",
                     exit_code=None, error=None, finish_requested=False, delivered_at=0.0,
                     updated_at=0.0, running_at=0.0)


@pytest.mark.parametrize(("status", "rec", "view", "reason"), [
    ("completed", REC, replace(JOB, escrow_dry=True), "the escrow ran dry: the deposit is spent"),
    ("completed", REC, JOB, "finished by the user (or the provider's owner)"),
    ("finishing", replace(REC, state="exited", exit_code=3, finish_requested=True), None,
     "the container exited 3 (finish_on_exit): the provider's worker finished the job"),
    ("completed", replace(REC, state="failed", error="no such image", finish_requested=True),
     None, ("the provider's worker finished it: the container could not be started "
           "(no such image)")),
    ("failed", REC, None, ("the provider failed: its worker stopped proving the job's GPUs (the "
                          "job expired, or the provider was slashed for it)")),
    ("closed", replace(REC, exit_code=0), None, "closed by the user; the container had exited 0"),
    ("cancelled", None, None, "cancelled by the user before it started"),
    ("declined", None, None, "declined by the provider"),
])
def test_end_reason(status: str, rec: WorkloadRecord | None, view: AssignedJob | None,
                    reason: str) -> None:
    assert end_reason(status, rec, view) == reason
