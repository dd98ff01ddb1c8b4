"""kill -9 the real worker process while it is sending; nothing is lost or counted twice.

A stub validator on 127.0.0.1 is slow (each answer delayed) and drops every third
connection after storing the proof. The worker runs as a real subprocess with 1-second
windows; it is killed with SIGKILL while a request is in flight, several times, restarted
each time, and finally stopped with SIGTERM. The stub must then hold exactly the seqs
1..last_seq of the outbox's chain, each once, with one hash each, linked into one chain.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpu_market.proof import ZERO_HASH, proof_hash
from gpum_worker.keys import b58encode, generate_key_file
from gpum_worker.outbox import Outbox
from gpum_worker.stub_validator import StubValidator

KILLS = 5
DEADLINE_S = 45


def _start(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as err:  # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "gpum_worker.cli", "run", *args],
                                stdout=subprocess.DEVNULL, stderr=err)


def test_kill_9_during_sending_loses_nothing_and_counts_once(tmp_path: Path) -> None:
    t_end = time.monotonic() + DEADLINE_S
    key_path = tmp_path / "worker.json"
    key = generate_key_file(key_path)
    db = tmp_path / "outbox.sqlite"
    cfg = tmp_path / "worker.toml"
    cfg.write_text("[sender]\ntimeout_seconds = 3\nbackoff_base_seconds = 0.1\n"
                   "backoff_cap_seconds = 0.5\n")
    ids = [b58encode(bytes([i]) * 32) for i in (1, 2, 3, 4)]
    job = bytes([4]) * 32
    stub = StubValidator(delay_s=0.3, drop_every=3).start()
    log = tmp_path / "worker.log"
    args = ["--config", str(cfg), "--key", str(key_path), "--db", str(db),
            "--validator", stub.url, "--window-seconds", "1", "--poll-seconds", "0.5",
            "--simulate", "--gpus", "2", "--seed", "5",
            "--program-id", ids[0], "--market", ids[1], "--provider", ids[2],
            "--job", f"{ids[3]}:2", "--job-started-at", str(int(time.time()))]
    try:
        kills_in_flight = 0
        for _ in range(KILLS):
            p = _start(args, log)
            time.sleep(1.2)
            stub.request_seen.clear()
            in_flight = stub.request_seen.wait(timeout=max(0.1, min(5, t_end - time.monotonic())))
            os.kill(p.pid, signal.SIGKILL)  # while the stub sits on the request
            p.wait(timeout=10)
            kills_in_flight += in_flight
        # Final run: validator healthy again; graceful stop after a few windows.
        stub.delay_s, stub.drop_every = 0.0, 0
        p = _start(args, log)
        time.sleep(3.5)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=20) == 0, log.read_text()[-3000:]
        assert time.monotonic() < t_end
    finally:
        stub.stop()
        if p.poll() is None:
            p.kill()

    assert kills_in_flight == KILLS  # every kill hit a request in flight
    ob = Outbox(db, key.pubkey, [stub.url])
    chain = ob.job_chain(job)
    counts = ob.counts()
    ob.close()
    assert chain is not None and chain.last_seq >= 8
    assert counts["proofs"] == 0, counts  # all delivered and acknowledged
    seqs = sorted(s for (j, s) in stub.stored if j == job)
    assert seqs == list(range(1, chain.last_seq + 1))  # no gaps, nothing extra
    assert stub.equivocations == 0  # never two hashes for one (job, seq)
    assert stub.accepted == chain.last_seq  # each window counted once
    assert stub.duplicates > 0  # resends happened and were deduplicated
    prev, prev_end, total = ZERO_HASH, None, 0
    for s in seqs:
        p_ = stub.proofs[(job, s)]
        assert p_.prev_proof_hash == prev
        assert prev_end is None or p_.window_start == prev_end
        total += p_.billable_seconds
        assert p_.cumulative_seconds == total
        prev, prev_end = stub.stored[(job, s)], p_.window_end
    assert prev == chain.last_hash == proof_hash_of_last(stub, job, seqs[-1])


def proof_hash_of_last(stub: StubValidator, job: bytes, seq: int) -> bytes:
    return stub.stored[(job, seq)]


assert proof_hash  # the stub stores proof_hash(bytes); imported for readers
