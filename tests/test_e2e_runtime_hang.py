"""A hung container runtime never delays a window proof, end to end.

One module-wide network, as in ``test_e2e_workload``: ``gpum-localnet`` with 2 s windows,
provider P (4 simulated GPUs, one simulated compute process on each) whose worker runs podman
and its API, one validator node V (every job's committee). The worker finds ``podman`` on a
``PATH`` whose first entry is a wrapper that hands every call to the real podman, until the
test creates the wrapper's flag file: from then on ``podman top`` and ``podman [container]
inspect`` sleep (the worker's own 30 s deadline kills them), as a hung podman service or a
stuck storage lock does. Everything else (``ps``, ``rm``, ``image``) still answers.

Two jobs run a container each; once proofs with the container running reach V, the runtime
hangs for ``HANG_S`` seconds. Every window of both jobs that ended in that time must be
recorded in the worker's outbox (its log line is written right after the record) within
``MAX_DELAY_S`` of its end, and reach V, as billable as before: the containers were seen
running, and the GPU processes the runtime could not attribute are counted neither as the
job's nor as foreign. The delays are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from gpu_market.proof import HEALTH_FOREIGN_PROCESS, WORKLOAD_RUNNING, decode_proof
from harness import Market, WorkerNetwork, worker_network
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

WINDOW = 2
IMAGE = "localhost/gpum-busybox:1"
HANG_S = 20
"""How long the runtime hangs: ten windows."""
MAX_DELAY_S = 1.5
"""Latest a window may be recorded after its end: the worker closes a window 0.4 s after it
ends (its last sample's time to arrive); the rest is slack for a loaded test machine."""
CATCH_UP_S = 150
"""How long the test waits, once the runtime answers again, for windows not recorded yet
(a worker that waits on the runtime catches up only as its calls time out)."""

WRAPPER = """#!/bin/sh
# podman, until {flag} exists: then `top` and `inspect` hang, as a hung podman does.
if [ -e {flag} ]; then
    case "$1 $2" in
        top\\ *|inspect\\ *|"container inspect") exec sleep 3600 ;;
    esac
fi
exec {podman} "$@"
"""

_PROOF_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ gpum_worker\.agent: job (\w+) seq (\d+) "
    r"\[(\d+), (\d+)\): billable (\d+)s")


@dataclass
class World(WorkerNetwork):
    KEYPAIR_AFTER = 2

    flag: Path | None = None

    def create(self, job_id: int) -> Pubkey:
        _, out, _ = self.gpum(
            "user", "job", "create", "--market", str(self.market), "--provider",
            str(self.provider), "--gpu-count", "1", "--deposit", "20", "--job-id", str(job_id),
            "--committee", str(self.validator), "--quorum", "1", "--image", IMAGE,
            "--cmd", '["/bin/sh", "-c"]', "--arg", "while true; do sleep 1; done")
        job = Pubkey.from_string(json.loads(out.strip().splitlines()[-1])["job"])
        self.jobs.append(job)
        return job

    def running(self, job: Pubkey) -> bool:
        r = subprocess.run(["podman", "ps", "--filter", f"label=gpum.job={job}", "--format",
                            "json"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, **self.podman_env}, check=False)
        return [c["State"] for c in json.loads(r.stdout or "[]")] == ["running"]

    def validator_proofs(self, job: Pubkey) -> dict[int, tuple[float, str, int | None, bytes]]:
        """seq -> (received_at, decision, approved seconds, proof) as V stores them."""
        con = sqlite3.connect(f"file:{self.workdir / 'validator.sqlite'}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT seq, received_at, decision, approved_seconds, proof "
                               "FROM proofs WHERE job = ?", (bytes(job),)).fetchall()
        finally:
            con.close()
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}

    def recorded(self) -> dict[tuple[str, int], tuple[float, int, int]]:
        """(job, window end) -> (when the worker recorded its proof, seq, billable seconds),
        from the worker's log (one line per proof, right after it was recorded)."""
        out = {}
        for line in (self.workdir / "worker.log").read_text(errors="replace").splitlines():
            m = _PROOF_LINE.match(line)
            if m:
                at = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                out[(m[2], int(m[5]))] = (at, int(m[3]), int(m[6]))
        return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory,
          market_factory: Callable[..., Market]) -> Iterator[World]:
    workdir: Path = tmp_path_factory.mktemp("runtime-hang")
    podman = shutil.which("podman")
    assert podman is not None, "these tests need podman"
    flag = workdir / "podman-hangs"
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    (bin_dir / "podman").write_text(WRAPPER.format(flag=flag, podman=podman))
    (bin_dir / "podman").chmod(0o755)
    m = market_factory(workdir, ["owner", "user", "validator", "worker"], {
        "window_seconds": WINDOW, "max_missed_windows": 2, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0},
        stake=dict.fromkeys(("owner", "validator"), 10_000 * 10**6),
        payment={"user": 1_000 * 10**6})
    with pytest.MonkeyPatch.context() as mp:  # the worker (and its reaper) find the wrapper
        mp.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
        with worker_network(World, workdir, m, IMAGE, window=WINDOW) as world:
            world.flag = flag
            try:
                yield world
            finally:
                flag.unlink(missing_ok=True)


def test_a_hung_container_runtime_never_delays_or_skips_a_window_proof(world: World) -> None:
    jobs = [world.create(1), world.create(2)]
    for job in jobs:
        world.wait(f"job {job}'s container running", lambda job=job: world.running(job))
        world.wait(f"a proof of job {job} with its container running at V", lambda job=job: any(
            decode_proof(p).workload.state == WORKLOAD_RUNNING
            for _, _, _, p in world.validator_proofs(job).values()))
    assert world.flag is not None
    world.flag.touch()
    hang_from = time.time()
    time.sleep(HANG_S)
    world.flag.unlink()
    hang_to = time.time()
    # Every window of both jobs that ended while the runtime hung, with a full window of it
    # before (the window the hang began in may have been attributed before it). A job's
    # windows follow its own start, so each job has its own grid.
    before = world.recorded()
    phase = {job: next(end for j, end in before if j == str(job)) % WINDOW for job in jobs}
    first = {job: (int(hang_from) // WINDOW + 2) * WINDOW + phase[job] for job in jobs}
    due = {(str(job), end) for job in jobs for end in range(first[job], int(hang_to), WINDOW)}
    assert len(due) >= 2 * (HANG_S // WINDOW - 2)
    deadline = time.monotonic() + CATCH_UP_S
    while not due <= set(world.recorded()) and time.monotonic() < deadline:
        world.procs.check_alive()
        time.sleep(1)
    recorded = world.recorded()
    delays = {k: recorded[k][0] - k[1] for k in due if k in recorded}
    missing = sorted(due - set(recorded))
    print(f"\nruntime hung for {hang_to - hang_from:.1f} s; {len(due)} windows due, "
          f"{len(delays)} recorded, {len(missing)} not recorded within {CATCH_UP_S} s after")
    for job in jobs:
        mine = sorted((end, d) for (j, end), d in delays.items() if j == str(job))
        print(f"job {job} ({world.client.fetch_job(job).status} on chain): delay from window "
              "end to proof recorded, by window: "
              + ", ".join(f"{end - first[job]:+d}s:{d:.2f}" for end, d in mine))
    if delays:
        ds = sorted(delays.values())
        print(f"delay: min {ds[0]:.2f} s, median {ds[len(ds) // 2]:.2f} s, max {ds[-1]:.2f} s")
    assert not missing, f"windows never proven: {missing}"
    late = {k: round(d, 2) for k, d in delays.items() if d > MAX_DELAY_S}
    assert not late, f"windows proven more than {MAX_DELAY_S} s after their end: {late}"
    # Each reached the committee and bills in full: the containers were seen running, and
    # the simulated GPU processes the runtime could not attribute are not foreign.
    for job in jobs:
        seqs = {recorded[(str(job), end)][1] for end in range(first[job], int(hang_to), WINDOW)}
        world.wait(f"job {job}'s windows at V",
                   lambda job=job, seqs=seqs: seqs <= set(world.validator_proofs(job)))
        at_v = world.validator_proofs(job)
        assert world.client.fetch_job(job).status == "running", job
        for end in range(first[job], int(hang_to), WINDOW):
            _, seq, billable = recorded[(str(job), end)]
            received_at, decision, approved, data = at_v[seq]
            p = decode_proof(data)
            assert billable == WINDOW and p.billable_seconds == WINDOW, (job, end, p)
            assert p.workload.state == WORKLOAD_RUNNING, (job, end, p.workload)
            assert p.workload.foreign_processes == 0 and not p.health_flags & \
                HEALTH_FOREIGN_PROCESS, (job, end, p)
            assert decision == "accepted" and approved == WINDOW, (job, end, decision, approved)
            assert received_at - end < MAX_DELAY_S + 1, (job, end, received_at - end)
