#!/usr/bin/env python3
"""Proof intake throughput of the validator: the real HTTP server, the real Intake, a real
SQLite database (WAL, synchronous=FULL: every accepted proof is on disk before its answer),
against a load generator on the same machine.

The validator runs in a child process (its own GIL and CPU accounting); the chain is the unit
tests' zero-latency ``FakeChain`` holding ``--jobs`` running jobs of ``--providers`` providers,
each job renting ``--gpus`` GPUs, every job's committee being this validator. The parent signs
``--windows`` hash-chained windows per job *before* the clock starts (signing is the
workers' cost, not the validator's), then sends them over ``--connections`` keep-alive HTTP
connections, each owning a slice of the jobs and sending its jobs' windows in seq order,
``--batch`` proofs per ``POST /v1/proofs/batch`` (``--batch 1`` uses ``POST /v1/proofs``,
one proof per request, as a worker with one job does). Latency is per request, from the
first byte sent to the whole answer read.

The default run is 2,000 jobs x 30 windows (60,000 proofs, about 6 s of load): the rate a
validator sustains. A job's first window costs the intake more than its next ones (the job's
account read and facts computed, its stored state loaded, its row inserted), and a run of 10
windows (2 s) spent a tenth of its proofs, and its slowest requests, on that start; on a
shared 2-core VM a 2 s run also swings with the neighbours' load. ``--windows 10`` runs the
shorter measurement (validator/README.md *Throughput* gives both).

Baseline, measured in the same run on the same machine: the raw rate of one ed25519 verify
(``gpu_market.receipt.verify``, OpenSSL through ``cryptography``, single-threaded), the cost
the intake would pay twice per proof if it checked the proof signature too.

Prints a table, then as its LAST line one JSON object:
{"proofs_per_s":N,"p50_ms":X,"p99_ms":Y,"verify_per_s_baseline":B,"gpus_per_proof":8, ...}
with, among the rest, ``validator_cpu_us_per_proof`` (user + system CPU of the validator
process while the load ran, per proof) and ``load_cpu_us_per_proof`` (the load generator's).
Target: proofs_per_s >= 10,000 and p99_ms < 100 on the project's 2-core machine.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validator" / "tests"))  # vtestkit: FakeChain, proof builders

WINDOW = 60


def job_key(i: int) -> bytes:
    return hashlib.sha256(b"bench-job-%d" % i).digest()


def provider_key(p: int) -> bytes:
    return hashlib.sha256(b"bench-provider-%d" % p).digest()


def worker_seed(p: int) -> bytes:
    return hashlib.sha256(b"bench-worker-%d" % p).digest()


def uuids(i: int, gpus: int) -> tuple[str, ...]:
    return tuple(f"GPU-{i:06d}-{g:02d}-0000-0000-000000000000" for g in range(gpus))


# ------------------------------------------------------------------ the validator (child)


def serve(args: argparse.Namespace) -> None:
    import vtestkit as vt
    from gpu_market.httpfront import serve_in_thread
    from gpu_market.receipt import private_key_from_seed, public_key_bytes
    from gpum_validator.chain import ReadBudget
    from gpum_validator.intake import Intake
    from gpum_validator.server import ValidatorHTTPServer
    from gpum_validator.store_sqlite import SQLiteStore

    chain = vt.FakeChain()
    chain.jobs.clear()
    chain.providers.clear()
    for p in range(args.providers):
        pub = public_key_bytes(private_key_from_seed(worker_seed(p)))
        chain.providers[provider_key(p)] = vt.provider_view(
            worker_key=vt.pk(pub), address=vt.pk(provider_key(p)))
    for i in range(args.jobs):
        chain.jobs[job_key(i)] = vt.job_view(
            address=vt.pk(job_key(i)), provider=vt.pk(provider_key(i % args.providers)),
            gpu_count=args.gpus, started_at=args.started_at, last_window_end=args.started_at,
            created_at=args.started_at - 10, deposited=10**15)
    store = SQLiteStore(Path(args.db), background_checkpoints=True)  # as `gpum-validator run`
    # The load generator stands for thousands of workers but is one source (127.0.0.1):
    # the per-source budget of job reads (``--job-reads-per-source``) is not what this
    # measures, so it is lifted.
    intake = Intake(vt.cfg(), store, chain, job_reads=ReadBudget(1e9))
    server = ValidatorHTTPServer(("127.0.0.1", 0), intake, store, lambda: True)
    serve_in_thread(server)
    print(server.server_port, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    server.shutdown()
    store.close()


# ------------------------------------------------------------------ the load (parent)


def make_bodies(args: argparse.Namespace, started_at: int) -> list[list[bytes]]:
    """Per connection, its request bodies in send order."""
    import vtestkit as vt
    from gpu_market.proof import ZERO_HASH, encode_proof, proof_hash
    from gpu_market.receipt import private_key_from_seed, public_key_bytes

    keys = [private_key_from_seed(worker_seed(p)) for p in range(args.providers)]
    items: list[list[dict[str, str]]] = [[] for _ in range(args.connections)]
    for i in range(args.jobs):
        p = i % args.providers
        key, pub = keys[p], public_key_bytes(keys[p])
        gpus = tuple(vt.gpu(u) for u in uuids(i, args.gpus))
        prev = ZERO_HASH
        windows = []
        for seq in range(1, args.windows + 1):
            proof = vt.make_proof(seq, prev=prev, started_at=started_at, gpus=gpus,
                                  job=job_key(i), provider=provider_key(p), worker_key=pub)
            windows.append(vt.signed_json(proof, key))
            prev = proof_hash(encode_proof(proof))
        items[i % args.connections].append(windows)  # type: ignore[arg-type]
    bodies: list[list[bytes]] = []
    for per_conn in items:
        # Round-robin over the connection's jobs, seq by seq: a job's windows stay in order.
        flat = [w[s] for s in range(args.windows) for w in per_conn]  # type: ignore[index]
        if args.batch == 1:
            bodies.append([json.dumps(x).encode() for x in flat])
        else:
            bodies.append([json.dumps({"proofs": flat[k:k + args.batch]}).encode()
                           for k in range(0, len(flat), args.batch)])
    return bodies


def drive(port: int, bodies: list[list[bytes]], batch: int) -> tuple[list[float], int, int]:
    """Send every connection's bodies; (latencies_s, accepted, other)."""
    path = "/v1/proofs" if batch == 1 else "/v1/proofs/batch"
    lat: list[float] = []
    counts = {"accepted": 0, "other": 0}
    lock = threading.Lock()
    others: list[str] = []

    def one(conn_bodies: list[bytes]) -> None:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        mine: list[float] = []
        acc = oth = 0
        for body in conn_bodies:
            t = time.perf_counter()
            c.request("POST", path, body, {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            mine.append(time.perf_counter() - t)
            answer = json.loads(data)
            for res in (answer["results"] if batch != 1 else [answer]):
                if res.get("status") == "accepted":
                    acc += 1
                else:
                    oth += 1
                    if len(others) < 5:
                        others.append(json.dumps(res)[:200])
        c.close()
        with lock:
            lat.extend(mine)
            counts["accepted"] += acc
            counts["other"] += oth

    threads = [threading.Thread(target=one, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in others:
        print("  not accepted:", o, file=sys.stderr)
    return lat, counts["accepted"], counts["other"]


def verify_baseline(seconds: float = 1.0) -> float:
    from gpu_market.receipt import private_key_from_seed, public_key_bytes, sign, verify

    key = private_key_from_seed(bytes(32))
    pub, msg = public_key_bytes(key), os.urandom(173)
    sig = sign(key, msg)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(200):
            verify(pub, sig, msg)
        n += 200
    return n / (time.perf_counter() - t0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--providers", type=int, default=200)
    ap.add_argument("--windows", type=int, default=30, help="windows per job")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per job (per proof)")
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64,
                    help="proofs per request (1: single; at most the intake's MAX_BATCH, 64)")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    ap.add_argument("--started-at", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args)
        return
    started_at = int(time.time()) - (args.windows + 2) * WINDOW
    t = time.perf_counter()
    bodies = make_bodies(args, started_at)
    total = args.jobs * args.windows
    print(f"signed {total} proofs in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    baseline = verify_baseline()
    with tempfile.TemporaryDirectory() as d:
        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", "--db", str(Path(d) / "v.sqlite"),
             "--started-at", str(started_at), "--jobs", str(args.jobs),
             "--providers", str(args.providers), "--gpus", str(args.gpus)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None
            port = int(child.stdout.readline())
            cpu0, own0 = cpu_seconds(child.pid), time.process_time()
            t0 = time.perf_counter()
            lat, accepted, other = drive(port, bodies, args.batch)
            elapsed = time.perf_counter() - t0
            cpu_validator = cpu_seconds(child.pid) - cpu0
            cpu_load = time.process_time() - own0
        finally:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(timeout=60)
        db_mb = sum(f.stat().st_size for f in Path(d).iterdir()) / 2**20
    out = {
        "proofs_per_s": round(accepted / elapsed),
        "p50_ms": round(statistics.median(lat) * 1000, 2),
        "p99_ms": round(pct(lat, 0.99) * 1000, 2),
        "verify_per_s_baseline": round(baseline),
        "gpus_per_proof": args.gpus,
        "ratio_to_verify_baseline": round(accepted / elapsed / baseline, 2),
        "batch": args.batch,
        "connections": args.connections,
        "proofs": total,
        "accepted": accepted,
        "not_accepted": other,
        "db_mb": round(db_mb, 1),
        "validator_cpu_us_per_proof": round(cpu_validator / total * 1e6, 1),
        "load_cpu_us_per_proof": round(cpu_load / total * 1e6, 1),
    }
    print(f"{'proofs':>8} {'accepted':>9} {'seconds':>8} {'proofs/s':>9} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'verify/s':>9}")
    print(f"{total:>8} {accepted:>9} {elapsed:>8.2f} {out['proofs_per_s']:>9} "
          f"{out['p50_ms']:>8} {out['p99_ms']:>8} {out['verify_per_s_baseline']:>9}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
