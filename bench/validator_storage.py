#!/usr/bin/env python3
"""The validator's storage at scale: the settle pass, /health and pruning with a million proofs.

Fills a fresh database straight through SQL (bulk inserts, for speed) with ``--finished``
finished jobs (completed on chain, fully settled: ``--proofs-per-finished`` proofs each, one
of them rejected, a confirmed intent every 10 windows, two missed windows) and ``--active``
running jobs (``--proofs-per-active`` accepted proofs, the last 5 not settled yet), half of the
finished jobs ended ``--retention-days`` + 10 days ago and half 10 days ago, a few with
equivocation evidence. Then, through the real ``Store`` methods only, it measures:

* ``settle_candidates()`` (what the settle pass reads from the store);
* the /health path: ``ping()`` + ``summary()``, and ``pending_windows()`` (/metrics);
* ``record_accepted()`` of an active job while a settle pass runs in another thread (the
  intake must not wait for the pass);
* ``prune()`` of the jobs past retention (when the store has it): total time and the longest
  single batch (the longest the intake can wait for it), and ``record_accepted()`` meanwhile;
* the database size per million stored proofs.

The same calls on an empty database (same run, same machine) are the baseline. Prints a
table, then as its LAST line one JSON object with every timing in milliseconds.

    .venv/bin/python bench/validator_storage.py                 # SQLite, 20k jobs, ~1M proofs
    .venv/bin/python bench/validator_storage.py --postgres      # a throwaway PostgreSQL server
    .venv/bin/python bench/validator_storage.py --db postgresql://user@host/db \
        --baseline-db postgresql://user@host/db2                # two EMPTY databases
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_market.proof import GpuWindow, WindowProof, encode_proof
from gpum_validator.schema import SignedProof
from gpum_validator.verify import Authenticated, Verdict

DAY = 86_400
WINDOW = 60
NOW = 1_800_000_000.0
PROGRAM = bytes(range(1, 33))
MARKET = bytes([7] * 32)
PROVIDER = bytes([9] * 32)
WORKER = bytes([42] * 32)
MEMBER = bytes([100] * 32)


def job_key(kind: int, i: int) -> bytes:
    return hashlib.sha256(b"bench-job" + bytes([kind]) + i.to_bytes(8, "little")).digest()


def proof_of(job: bytes, seq: int, started: int) -> WindowProof:
    gpus = tuple(GpuWindow(uuid=u, samples=WINDOW, covered_seconds=WINDOW, util_gpu_avg_bp=9000,
                           util_gpu_max_bp=10000, temp_max_c=70, ecc_uncorrected_delta=0)
                 for u in ("GPU-aaaa", "GPU-bbbb"))
    return WindowProof(program_id=PROGRAM, market=MARKET, job=job, provider=PROVIDER,
                       worker_key=WORKER, seq=seq, window_start=started + (seq - 1) * WINDOW,
                       window_end=started + seq * WINDOW, sample_interval_ms=1000, gpus=gpus,
                       process_list_hash=bytes(32), prev_proof_hash=bytes(32), health_flags=0,
                       billable_seconds=WINDOW, cumulative_seconds=seq * WINDOW)


def authenticated(p: WindowProof) -> Authenticated:
    raw = encode_proof(p)
    return Authenticated(SignedProof(raw, bytes(64), bytes(64), p.worker_key), p,
                         hashlib.sha256(raw).digest(), b"")


def open_store(db: str) -> Any:
    if db.startswith(("postgresql://", "postgres://")):
        from gpum_validator.store_pg import PostgresStore

        return PostgresStore(db)
    from gpum_validator.store_sqlite import SQLiteStore

    return SQLiteStore(db)


# ---------------------------------------------------------------------------- fill


class Filler:
    """Bulk rows straight through the store's connection (SQL, not Store methods)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.pg = type(store).__name__ == "PostgresStore"

    def insert(self, table: str, cols: str, rows: list[tuple]) -> None:
        if not rows:
            return
        if self.pg:
            with self.store._tx() as db, db.raw.cursor().copy(
                    f"COPY {table} ({cols}) FROM STDIN") as cp:
                for r in rows:
                    cp.write_row(r)
            return
        marks = ",".join("?" * len(cols.split(",")))
        with self.store._tx() as db:
            db.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", rows)


PROOF_COLS = ("job, seq, hash, proof, proof_signature, receipt_signature, worker_key, "
              "cumulative_seconds, window_end, received_at, decision, reason, approved_seconds, "
              "approved_total")
JOB_COLS = ("job, last_seq, cumulative_seconds, last_window_end, gpu_uuids, accepted_windows, "
            "chain_status, chain_last_seq, settled_seconds, rate_per_second, escrow_remaining, "
            "ended_at, chain_checked_at, updated_at, window_seconds, approved_total, "
            "chain_claimed_seconds, chain_last_window_end, started_at, committee, quorum, "
            "max_skew_seconds, max_missed_windows")
INTENT_COLS = ("job, seq_from, seq_to, cumulative_seconds, window_end, proof_hash, worker_key, "
               "receipt_signature, status, signature, attempts, created_at, updated_at, "
               "approved_seconds, attestations")


def fill(store: Any, args: argparse.Namespace) -> dict[str, int]:
    f = Filler(store)
    blob = encode_proof(proof_of(bytes(32), 1, 0))
    sig = bytes(range(64))
    uuids = json.dumps(["GPU-aaaa", "GPU-bbbb"])
    committee = json.dumps([MEMBER.hex()])
    counts = {"proofs": 0, "jobs": 0, "intents": 0, "equivocations": 0}
    old_end = NOW - (args.retention_days + 10) * DAY
    new_end = NOW - 10 * DAY

    def job_rows(kind: int, n: int, per: int) -> None:
        for lo in range(0, n, 1000):
            proofs, jobs, intents, missed, equiv = [], [], [], [], []
            for i in range(lo, min(n, lo + 1000)):
                job = job_key(kind, i)
                finished = kind == 0
                ended = (old_end if i % 2 == 0 else new_end) if finished else 0
                started = int((ended or NOW) - per * WINDOW - 3600)
                last = per - 1 if finished else per  # finished: one of its proofs is rejected
                settled = last if finished else last - 5
                for s in range(1, last + 1):
                    h = hashlib.sha256(job + s.to_bytes(8, "little")).digest()
                    proofs.append((job, s, h, blob, sig, sig, WORKER, s * WINDOW,
                                   started + s * WINDOW, started + s * WINDOW + 1.0, "accepted",
                                   None, WINDOW, s * WINDOW))
                if finished:
                    h = hashlib.sha256(job + b"rejected").digest()
                    proofs.append((job, last + 1, h, blob, sig, sig, WORKER, 0, started, NOW,
                                   "rejected", "window_not_after_last", None, None))
                    missed += [(job, 3, started + 1.0), (job, 4, started + 2.0)]
                    if i % 200 == 0:  # evidence: a second proof at seq 2
                        h2 = hashlib.sha256(job + b"equivocation").digest()
                        proofs.append((job, 2, h2, blob, sig, sig, WORKER, 1, started, NOW,
                                       "rejected", "equivocation", None, None))
                        h1 = hashlib.sha256(job + (2).to_bytes(8, "little")).digest()
                        equiv.append((job, 2, min(h1, h2), max(h1, h2), NOW - 20 * DAY))
                for to in list(range(10, settled + 1, 10)) + ([settled] if settled % 10 else []):
                    h = hashlib.sha256(job + to.to_bytes(8, "little")).digest()
                    intents.append((job, max(1, to - 9), to, to * WINDOW, started + to * WINDOW,
                                    h, WORKER, sig, "confirmed", "sig", 1,
                                    started + to * WINDOW + 5.0, started + to * WINDOW + 9.0,
                                    to * WINDOW, "[]"))
                jobs.append((job, last, last * WINDOW, started + last * WINDOW, uuids, last,
                             "completed" if finished else "running", settled,
                             settled * WINDOW, 20, 10**9, int(ended), NOW - 60.0,
                             started + last * WINDOW + 1.0, WINDOW, last * WINDOW,
                             settled * WINDOW, started + settled * WINDOW, started, committee,
                             1, 5, 10))
            f.insert("proofs", PROOF_COLS, proofs)
            f.insert("jobs", JOB_COLS, jobs)
            f.insert("intents", INTENT_COLS, intents)
            f.insert("missed_windows", "job, seq, recorded_at", missed)
            f.insert("equivocations", "job, seq, hash_a, hash_b, recorded_at", equiv)
            counts["proofs"] += len(proofs)
            counts["jobs"] += len(jobs)
            counts["intents"] += len(intents)
            counts["equivocations"] += len(equiv)

    job_rows(0, args.finished, args.proofs_per_finished)
    job_rows(1, args.active, args.proofs_per_active)
    rebuild = getattr(store, "rebuild_derived", None)
    if rebuild is not None:  # the store's own counters and markers, as a migration does
        rebuild()
    return counts


# ---------------------------------------------------------------------------- measure


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall time of ``repeat`` calls in ms, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def health(store: Any) -> dict[str, Any]:
    """What ``GET /health`` reads from the store (server.ValidatorHTTPServer.health)."""
    ok = store.ping()
    s = store.summary() if ok else {}
    return {"pending_windows": s.get("pending_windows"),
            "open_intents": s["intents"]["intended"] + s["intents"]["sent"]}


class Accepter:
    """``record_accepted`` of consecutive windows of one running job."""

    def __init__(self, store: Any, job: bytes, started: int) -> None:
        self.store, self.job, self.started = store, job, started
        st = store.job_state(job)
        self.last = st.last_seq if st is not None else None
        self.total = st.approved_total if st is not None else 0

    def one(self) -> float:
        seq = (self.last or 0) + 1
        auth = authenticated(proof_of(self.job, seq, self.started))
        self.total += WINDOW
        t = time.perf_counter()
        self.store.record_accepted(auth, Verdict((), WINDOW, WINDOW, self.total), self.last,
                                   NOW)
        ms = (time.perf_counter() - t) * 1000
        self.last = seq
        return ms


def accept_during(store: Any, accepter: Accepter, background: Callable[[], Any],
                  repeat: int) -> tuple[float, float]:
    """Latency of one ``record_accepted`` started while ``background`` runs in another
    thread (it is started first; the accept waits 5 ms so the pass is under way). Median and
    max over ``repeat`` tries."""
    lat = []
    for _ in range(repeat):
        started = threading.Event()

        def run(started: threading.Event = started) -> None:
            started.set()
            background()

        th = threading.Thread(target=run)
        th.start()
        started.wait()
        time.sleep(0.005)
        lat.append(accepter.one())
        th.join()
    return statistics.median(lat), max(lat)


def db_bytes(store: Any) -> int:
    if type(store).__name__ == "PostgresStore":  # this schema's tables, indexes and TOAST
        return int(store._q(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r'")[0][0])
    page = store._q("PRAGMA page_size")[0][0]
    used = store._q("PRAGMA page_count")[0][0] - store._q("PRAGMA freelist_count")[0][0]
    return int(page * used)


def measure(store: Any, label: str, repeat: int, active_job: bytes, prune: bool,
            retention_days: int) -> dict[str, Any]:
    r: dict[str, Any] = {}
    if type(store).__name__ == "PostgresStore":  # autovacuum's work after the bulk load
        raw = store._pool.get()
        try:
            raw.execute("VACUUM ANALYZE")
        finally:
            store._pool.put(raw)
    r["settle_ms"], cands = timed(store.settle_candidates, repeat)
    r["settle_candidates"] = len(cands)
    r["health_ms"], h = timed(lambda: health(store), repeat)
    r["pending_windows"] = h["pending_windows"]
    r["pending_windows_ms"], _ = timed(store.pending_windows, repeat)
    acc = Accepter(store, active_job, int(NOW) - 10**6)
    r["accept_ms"], _ = timed(acc.one, repeat)
    r["accept_during_settle_ms"], r["accept_during_settle_max_ms"] = accept_during(
        store, acc, store.settle_candidates, repeat)
    r["db_bytes"] = db_bytes(store)
    if prune and hasattr(store, "prune"):
        batches: list[float] = []
        before = NOW - retention_days * DAY
        done = threading.Event()
        result: dict[str, Any] = {}

        def run_prune() -> None:
            t = time.perf_counter()
            result["deleted"] = store.prune(before, on_batch=batches.append)
            result["ms"] = (time.perf_counter() - t) * 1000
            done.set()

        th = threading.Thread(target=run_prune)
        th.start()
        lat = []
        while not done.wait(0.02):  # the intake goes on meanwhile
            lat.append(acc.one())
        th.join()
        deleted = result["deleted"]
        r["prune_ms"] = result["ms"]
        r["accept_during_prune_ms"] = statistics.median(lat) if lat else 0.0
        r["accept_during_prune_max_ms"] = max(lat, default=0.0)
        r["prune_batches"] = len(batches)
        r["prune_max_batch_ms"] = max(batches, default=0.0)
        r["prune_deleted"] = deleted
        r["db_bytes_after_prune"] = db_bytes(store)
        r["settle_after_prune_ms"], _ = timed(store.settle_candidates, repeat)
        r["health_after_prune_ms"], _ = timed(lambda: health(store), repeat)
    print(f"  measured {label}", file=sys.stderr)
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", default=None,
                    help="SQLite file or postgresql:// URL of an EMPTY database "
                         "(default: a temporary SQLite file)")
    ap.add_argument("--baseline-db", default=None,
                    help="another EMPTY database for the baseline (default: temporary SQLite, "
                         "or the same server's URL with --db postgresql)")
    ap.add_argument("--finished", type=int, default=20_000)
    ap.add_argument("--proofs-per-finished", type=int, default=49)
    ap.add_argument("--active", type=int, default=200)
    ap.add_argument("--proofs-per-active", type=int, default=100)
    ap.add_argument("--postgres", action="store_true",
                    help="start a throwaway PostgreSQL server (Debian's, as the tests do) for "
                         "both databases")
    ap.add_argument("--retention-days", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=5, help="calls per timing (median)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="gpum-bench-"))
    server = None
    if args.postgres:
        # The tests' throwaway server (validator/tests/storekit.py), not a copy of it.
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validator" / "tests"))
        import storekit

        server = storekit.start_server()
        for schema in ("bench_full", "bench_empty"):
            server.execute(f"CREATE SCHEMA {schema}")
        args.db, args.baseline_db = server.url("bench_full"), server.url("bench_empty")
    db = args.db or str(tmp / "full.sqlite")
    base_db = args.baseline_db or str(tmp / "empty.sqlite")
    store, empty = open_store(db), open_store(base_db)
    t = time.perf_counter()
    counts = fill(store, args)
    fill_s = time.perf_counter() - t
    print(f"filled {counts} in {fill_s:.1f}s", file=sys.stderr)
    active = job_key(1, 0)
    base = measure(empty, "baseline (empty database)", args.repeat, active, False,
                   args.retention_days)
    full = measure(store, "full database", args.repeat, active, True, args.retention_days)
    store.close()
    empty.close()
    per_million = full["db_bytes"] / counts["proofs"] * 1_000_000

    print(f"validator storage: {type(store).__name__}, {counts['proofs']:,} proofs, "
          f"{args.finished:,} finished jobs, {args.active} active, {counts['intents']:,} "
          f"intents (filled in {fill_s:.0f}s)")
    print(f"{'measure':<44}{'empty db':>12}{'full db':>12}")
    rows = [("settle_candidates() ms", "settle_ms"),
            ("/health: ping() + summary() ms", "health_ms"),
            ("pending_windows() ms (/metrics)", "pending_windows_ms"),
            ("record_accepted() ms", "accept_ms"),
            ("record_accepted() during a settle pass ms", "accept_during_settle_ms"),
            ("  worst of those ms", "accept_during_settle_max_ms")]
    for name, key in rows:
        print(f"{name:<44}{base[key]:>12.2f}{full[key]:>12.2f}")
    print(f"{'settle candidates':<44}{base['settle_candidates']:>12}"
          f"{full['settle_candidates']:>12}")
    print(f"{'database MiB':<44}{base['db_bytes'] / 2**20:>12.1f}"
          f"{full['db_bytes'] / 2**20:>12.1f}")
    print(f"{'database MiB per million proofs':<44}{'':>12}{per_million / 2**20:>12.1f}")
    if "prune_ms" in full:
        print(f"prune (retention {args.retention_days} days): {full['prune_ms']:.0f} ms in "
              f"{full['prune_batches']} batches, longest batch {full['prune_max_batch_ms']:.1f}"
              f" ms, deleted {full['prune_deleted']}; database "
              f"{full['db_bytes_after_prune'] / 2**20:.1f} MiB in use after; settle "
              f"{full['settle_after_prune_ms']:.2f} ms, /health "
              f"{full['health_after_prune_ms']:.2f} ms; record_accepted() meanwhile "
              f"{full['accept_during_prune_ms']:.2f} ms median, "
              f"{full['accept_during_prune_max_ms']:.2f} ms worst")
    else:
        print("prune: not available in this store")
    result = {"backend": type(store).__name__, "proofs": counts["proofs"],
              "finished_jobs": args.finished, "active_jobs": args.active,
              **{k: round(v, 3) if isinstance(v, float) else v for k, v in full.items()},
              "db_mib_per_million_proofs": round(per_million / 2**20, 1),
              **{f"baseline_{k}": round(v, 3) if isinstance(v, float) else v
                 for k, v in base.items()}}
    for p in tmp.iterdir():
        p.unlink()
    os.rmdir(tmp)
    if server is not None:
        storekit.stop_server(server)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
