"""Hostile workers for hardware challenges (tests only): the worker API's challenge endpoints
answering as a cheating or broken worker would. The production service
(``gpum_worker.challenge_api.ChallengeService``) never does any of this.

Modes of ``HostileChallenges``:

* ``made_up_root``: computes honestly, then signs a random root in place of each GPU's; the
  rows it opens (with their true Merkle paths, signed) lead to the true root: evidence for
  ``slash_wrong_answer`` (the validator's ``bad_proof``);
* ``wrong_rows``: commits to a result with one column off by one, consistently (paths lead to
  the signed root, the rows are not the seed's product: ``wrong_row``);
* ``late``: answers the challenge only after ``delay_s`` (past the validator's deadline);
* ``never``: takes the challenge and never answers it.

Run as a process (the end-to-end tests), it serves the worker API's ``/v1/health`` and
``/v1/challenges`` for a provider of simulated GPUs (``--gpus``, ``--seed``: the simulation's
UUIDs), the validators read from chain as the real worker does::

    python worker/tests/hostile_challenges.py --mode made_up_root --key K --rpc-url U \\
        --program-id P --market M --provider X --listen 127.0.0.1:PORT --gpus 1 --seed 1
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpu_market.challenge import Challenge, commit_rows
from gpum_worker.challenge_api import ChallengeRefused, ChallengeService
from gpum_worker.challenge_compute import ChallengeRun
from gpum_worker.gpu import GpuInfo

MODES = ("made_up_root", "wrong_rows", "late", "never")


@dataclass
class HostileChallenges(ChallengeService):
    mode: str = "made_up_root"
    delay_s: float = 30.0
    closed: threading.Event = field(default_factory=threading.Event)

    def challenge(self, doc: dict[str, Any]) -> dict[str, Any]:
        if self.mode == "never":
            self.closed.wait()
            raise ChallengeRefused(503, "closing", "shutting down")
        if self.mode == "late":
            self.closed.wait(self.delay_s)
        return super().challenge(doc)

    def _compute(self, ch: Challenge, gpus: list[GpuInfo]
                 ) -> list[tuple[GpuInfo, Challenge, ChallengeRun]]:
        runs = super()._compute(ch, gpus)
        for _g, _gch, run in runs:
            if self.mode == "made_up_root":
                run.answer = replace(run.answer, root=os.urandom(32))
            elif self.mode == "wrong_rows":
                rows = run.rows.copy()
                rows[:, 0] += 1
                run.rows, run.tree = rows, commit_rows(rows)
                run.answer = replace(run.answer, root=run.tree.root)
        return runs


def simulated_gpus(count: int, seed: int) -> list[GpuInfo]:
    """The GPUs ``gpum-worker run --simulate --gpus count --seed seed`` reports."""
    from gpum_worker.simulate import SimulatedBackend

    b = SimulatedBackend(count, seed)
    b.init()
    return [GpuInfo(i, b.uuid(i), b.name(i)) for i in range(count)]


def main(argv: Sequence[str] | None = None) -> None:
    from gpum_worker.api import WorkerApi
    from gpum_worker.challenge_api import connect_directory, nvml_library
    from gpum_worker.challenge_compute import NumpyBackend
    from gpum_worker.keys import decode_pubkey, load_worker_key
    from gpum_worker.workload_store import WorkloadStore
    from gpum_worker.workloads import WorkloadManager

    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--delay", type=float, default=30.0)
    for name in ("--key", "--rpc-url", "--program-id", "--market", "--provider", "--listen"):
        p.add_argument(name, required=True)
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    key = load_worker_key(Path(a.key))
    program, market = decode_pubkey(a.program_id), decode_pubkey(a.market)
    gpus = simulated_gpus(a.gpus, a.seed)
    svc = HostileChallenges(
        key=key, program_id=program, market=market, provider=decode_pubkey(a.provider),
        gpus=lambda: gpus, busy=set, validators=connect_directory(a.rpc_url, program, market),
        backend=NumpyBackend(), nvml=nvml_library(True), min_interval_s=0, mode=a.mode,
        delay_s=a.delay)
    api = WorkerApi(WorkloadManager(None, WorkloadStore(":memory:"), key.seed), a.listen,
                    worker=key.pubkey_b58, challenges=svc)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    api.start()
    print(f"hostile worker ({a.mode}) on {api.url}", flush=True)
    stop.wait()
    svc.closed.set()
    api.close()


if __name__ == "__main__":
    main()
