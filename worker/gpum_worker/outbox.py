"""Durable outbox and per-job chain state in SQLite (WAL, synchronous=FULL).

Guarantees:

* ``record`` writes a signed proof, one delivery row per destination of its job (see below)
  and the job's new chain state (last seq, last proof hash, cumulative seconds, last window
  end) in one transaction, and refuses a proof that does not extend the stored chain. A crash at any
  moment leaves either the old state or the new one, so after a restart the next proof of
  a job always has ``seq = last_seq + 1`` and ``prev_proof_hash = last_hash``: a (job, seq)
  is never signed twice with different contents.
* Destinations are per job: with a static validator list (``validators``, the
  ``--validator`` override) every job's proofs go to that list; otherwise to the job's
  *route*, the endpoints of its committee members read from chain, which the agent stores
  with ``set_destinations`` on every poll (kept across restarts). Acknowledgements are kept
  per (proof, destination) (state ``acked``) until the proof is deleted, so a restart never
  sends a proof again to a validator that acknowledged it.
* A proof is deleted only when it has at least one delivery row and every one is acked,
  i.e. every current destination of its job acknowledged it. A destination that leaves a
  job's route (a replaced committee member, a changed endpoint) drops its rows for that
  job's proofs: they are owed to the current destinations only. A proof whose job has no
  destination yet is kept.
* Each stored proof keeps the key that signed it and is delivered as signed. Opening the
  database with another worker key (after ``rotate_worker_key`` on chain) is allowed: the
  chains continue under the new key and the old key's pending proofs are still delivered.
  The keys that ever signed here are listed in ``worker_keys``.
* ``resume_job`` only ever moves a job's chain forward (higher ``last_seq``), never back.
* GPU assignments per job are stored here, so they survive restarts.

Each thread opens its own ``Outbox`` (sqlite3 connections are per thread).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpu_market.proof import ZERO_HASH, WindowProof

from .errors import OutboxError
from .heads import ResumePoint
from .keys import b58decode, b58encode

SCHEMA_VERSION = "3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs(
    job BLOB PRIMARY KEY,
    started_at INTEGER NOT NULL,
    window_seconds INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    last_hash BLOB NOT NULL,
    cumulative INTEGER NOT NULL,
    last_window_end INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS assignments(
    job BLOB NOT NULL, slot INTEGER NOT NULL, gpu_uuid TEXT NOT NULL,
    PRIMARY KEY(job, slot)
);
CREATE TABLE IF NOT EXISTS outbox(
    job BLOB NOT NULL, seq INTEGER NOT NULL,
    proof BLOB NOT NULL, proof_hash BLOB NOT NULL,
    proof_sig BLOB NOT NULL, receipt_sig BLOB NOT NULL,
    created_at REAL NOT NULL,
    worker_key BLOB NOT NULL,
    PRIMARY KEY(job, seq)
);
CREATE TABLE IF NOT EXISTS worker_keys(key BLOB PRIMARY KEY, first_used_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries(
    job BLOB NOT NULL, seq INTEGER NOT NULL, validator TEXT NOT NULL,
    state TEXT NOT NULL CHECK(state IN ('pending', 'rejected', 'equivocation', 'acked')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    last_error TEXT,
    PRIMARY KEY(job, seq, validator)
);
CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries(validator, state, next_attempt_at);
CREATE TABLE IF NOT EXISTS routes(
    job BLOB NOT NULL, validator TEXT NOT NULL, PRIMARY KEY(job, validator)
);
CREATE TABLE IF NOT EXISTS routed_jobs(job BLOB PRIMARY KEY, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS accepted_here(job BLOB PRIMARY KEY, accepted_at REAL NOT NULL);
"""

_DELIVERIES_V3 = _SCHEMA[_SCHEMA.index("CREATE TABLE IF NOT EXISTS deliveries("):
                         _SCHEMA.index("CREATE INDEX IF NOT EXISTS deliveries_due")]


@dataclass(frozen=True)
class JobChain:
    """Chain state of one job: what the next proof must extend."""

    job: bytes
    started_at: int
    window_seconds: int
    last_seq: int
    last_hash: bytes
    cumulative: int
    last_window_end: int


@dataclass(frozen=True)
class OutboxItem:
    job: bytes
    seq: int
    proof: bytes
    proof_hash: bytes
    proof_sig: bytes
    receipt_sig: bytes
    attempts: int
    state: str
    worker_key: bytes
    """The key that signed ``proof_sig`` and ``receipt_sig``."""


class Outbox:
    """``validators``: the static destination list for every job (``--validator``); empty
    means each job's destinations come from ``set_destinations`` (its committee)."""

    def __init__(self, path: Path | str, worker_key: bytes, validators: Sequence[str] = (),
                 clock=time.time) -> None:
        self.path = str(path)
        self.validators = tuple(validators)
        self._clock = clock
        self.rotated_from: bytes | None = None
        """The key this database was used with before, when this open switched keys."""
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
            self._db.execute("PRAGMA busy_timeout=30000")
            _retry_locked(lambda: self._db.execute("PRAGMA journal_mode=WAL"))
            self._db.execute("PRAGMA synchronous=FULL")
            _retry_locked(lambda: self._db.executescript(_SCHEMA))
            _retry_locked(lambda: self._check_owner(worker_key))
        except sqlite3.Error as e:
            raise OutboxError(f"cannot open outbox database {self.path}: {e}") from None

    def close(self) -> None:
        self._db.close()

    # ------------------------------------------------------------------ transactions

    def _tx(self) -> _Tx:
        return _Tx(self._db)

    def _check_owner(self, worker_key: bytes) -> None:
        """Record ``worker_key`` as the current signer; migrate schema-1/2 databases."""
        with self._tx():
            sql = self._db.execute(
                "SELECT sql FROM sqlite_master WHERE type='table' AND name='deliveries'"
            ).fetchone()[0]
            if "'acked'" not in sql:  # schema <= 2: acked rows were deleted, no 'acked' state
                self._db.execute("ALTER TABLE deliveries RENAME TO deliveries_v2")
                self._db.execute(_DELIVERIES_V3)
                self._db.execute("INSERT INTO deliveries SELECT job, seq, validator, state, "
                                 "attempts, next_attempt_at, last_error FROM deliveries_v2")
                self._db.execute("DROP TABLE deliveries_v2")
                self._db.execute("CREATE INDEX IF NOT EXISTS deliveries_due ON "
                                 "deliveries(validator, state, next_attempt_at)")
            row = self._db.execute("SELECT value FROM meta WHERE key='worker_key'").fetchone()
            before = None if row is None else b58decode(row[0])
            cols = [r[1] for r in self._db.execute("PRAGMA table_info(outbox)")]
            if "worker_key" not in cols:  # schema 1: every stored proof is the old key's
                self._db.execute("ALTER TABLE outbox ADD COLUMN worker_key BLOB")
                self._db.execute("UPDATE outbox SET worker_key=?", (before or worker_key,))
            self._db.execute("INSERT OR REPLACE INTO meta VALUES('schema', ?)",
                             (SCHEMA_VERSION,))
            if before is not None:
                self._db.execute("INSERT OR IGNORE INTO worker_keys VALUES(?, 0)", (before,))
            self._db.execute("INSERT OR IGNORE INTO worker_keys VALUES(?, ?)",
                             (worker_key, self._clock()))
            if before != worker_key:
                self._db.execute("INSERT OR REPLACE INTO meta VALUES('worker_key', ?)",
                                 (b58encode(worker_key),))
                self.rotated_from = before

    def worker_keys(self) -> list[bytes]:
        """Every key that was this database's signer, oldest first."""
        return [r[0] for r in self._db.execute(
            "SELECT key FROM worker_keys ORDER BY first_used_at, key")]

    def pending_by_key(self) -> dict[bytes, int]:
        """Undelivered proofs per signing key."""
        return dict(self._db.execute(
            "SELECT worker_key, COUNT(*) FROM outbox GROUP BY worker_key").fetchall())

    # ------------------------------------------------------------------ chain state

    def job_chain(self, job: bytes) -> JobChain | None:
        row = self._db.execute(
            "SELECT job, started_at, window_seconds, last_seq, last_hash, cumulative, "
            "last_window_end FROM jobs WHERE job=?", (job,)).fetchone()
        return None if row is None else JobChain(*row)

    def ensure_job(self, job: bytes, started_at: int, window_seconds: int) -> JobChain:
        """Chain state of ``job``, creating it (seq 0, zero hash, window start = started_at)."""
        with self._tx():
            self._db.execute(
                "INSERT OR IGNORE INTO jobs VALUES(?, ?, ?, 0, ?, 0, ?)",
                (job, started_at, window_seconds, ZERO_HASH, started_at))
        chain = self.job_chain(job)
        assert chain is not None
        return chain

    def resume_job(self, job: bytes, started_at: int, window_seconds: int,
                   point: ResumePoint) -> JobChain:
        """Set ``job``'s chain to ``point`` if that is ahead of what is stored (or nothing is).

        Used when the validators or the chain hold more of the job than this database: the
        chain state only ever moves to a higher ``last_seq``, so a seq once stored here or
        seen elsewhere is never handed out again.
        """
        with self._tx():
            self._db.execute(
                "INSERT INTO jobs VALUES(?, ?, ?, ?, ?, ?, ?) ON CONFLICT(job) DO UPDATE SET "
                "last_seq=excluded.last_seq, last_hash=excluded.last_hash, "
                "cumulative=excluded.cumulative, last_window_end=excluded.last_window_end "
                "WHERE excluded.last_seq > jobs.last_seq",
                (job, started_at, window_seconds, point.last_seq, point.last_hash,
                 point.cumulative, point.last_window_end))
        chain = self.job_chain(job)
        assert chain is not None
        return chain

    def record(self, proof: WindowProof, proof_bytes: bytes, proof_hash: bytes,
               proof_sig: bytes, receipt_sig: bytes) -> JobChain:
        """Store a signed proof and advance the job's chain atomically (see module doc)."""
        now = self._clock()
        with self._tx():
            row = self._db.execute(
                "SELECT last_seq, last_hash, cumulative, last_window_end FROM jobs WHERE job=?",
                (proof.job,)).fetchone()
            if row is None:
                raise OutboxError("record(): unknown job; call ensure_job first")
            last_seq, last_hash, cumulative, last_end = row
            if (proof.seq != last_seq + 1 or proof.prev_proof_hash != last_hash
                    or proof.window_start != last_end
                    or proof.cumulative_seconds != cumulative + proof.billable_seconds):
                raise OutboxError(
                    f"proof seq {proof.seq} does not extend the stored chain of job "
                    f"{b58encode(proof.job)} (last seq {last_seq}); refusing to store it")
            self._db.execute(
                "INSERT INTO outbox(job, seq, proof, proof_hash, proof_sig, receipt_sig, "
                "created_at, worker_key) VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                (proof.job, proof.seq, proof_bytes, proof_hash, proof_sig, receipt_sig, now,
                 proof.worker_key))
            self._db.executemany(
                "INSERT INTO deliveries(job, seq, validator, state, next_attempt_at) "
                "VALUES(?, ?, ?, 'pending', ?)",
                [(proof.job, proof.seq, v, now) for v in self._destinations_of(proof.job)])
            self._db.execute(
                "UPDATE jobs SET last_seq=?, last_hash=?, cumulative=?, last_window_end=? "
                "WHERE job=?",
                (proof.seq, proof_hash, proof.cumulative_seconds, proof.window_end, proof.job))
        chain = self.job_chain(proof.job)
        assert chain is not None
        return chain

    # ------------------------------------------------------------------ destinations

    def _destinations_of(self, job: bytes) -> tuple[str, ...]:
        return self.validators or self._route_rows(job)

    def stored_route(self, job: bytes) -> tuple[str, ...] | None:
        """The destinations stored for ``job`` by ``set_destinations``, or None if never set."""
        if self._db.execute("SELECT 1 FROM routed_jobs WHERE job=?", (job,)).fetchone() is None:
            return None
        return self._route_rows(job)

    def _route_rows(self, job: bytes) -> tuple[str, ...]:
        return tuple(r[0] for r in self._db.execute(
            "SELECT validator FROM routes WHERE job=? ORDER BY validator", (job,)))

    def set_destinations(self, job: bytes, destinations: Iterable[str]
                         ) -> tuple[list[str], list[str]]:
        """Store ``job``'s destinations (its committee's endpoints) and make its undelivered
        proofs owed to exactly these: new destinations get a pending row for each of them,
        rows of destinations that left are dropped (and proofs every remaining destination
        acknowledged are deleted). Returns (added, removed) against the stored route."""
        want = sorted(set(destinations))
        before = self.stored_route(job)
        if before is not None and list(before) == want:
            return [], []
        now = self._clock()
        with self._tx():
            self._db.execute("DELETE FROM routes WHERE job=?", (job,))
            self._db.executemany("INSERT INTO routes VALUES(?, ?)", [(job, v) for v in want])
            self._db.execute("INSERT OR REPLACE INTO routed_jobs VALUES(?, ?)", (job, now))
            if not self.validators:
                self._sync_job(job, want, now)
        old = set(before or ())
        return [v for v in want if v not in old], sorted(old - set(want))

    def _sync_job(self, job: bytes, destinations: Sequence[str], now: float) -> list[str]:
        """Make the delivery rows of ``job``'s proofs match ``destinations`` (in a tx)."""
        marks = ",".join("?" * len(destinations))
        dropped = [r[0] for r in self._db.execute(
            f"SELECT DISTINCT validator FROM deliveries WHERE job=? AND validator NOT IN "
            f"({marks})", (job, *destinations))]
        self._db.execute(f"DELETE FROM deliveries WHERE job=? AND validator NOT IN ({marks})",
                         (job, *destinations))
        self._db.executemany(
            "INSERT OR IGNORE INTO deliveries(job, seq, validator, state, next_attempt_at) "
            "SELECT job, seq, ?, 'pending', ? FROM outbox WHERE job=?",
            [(v, now, job) for v in destinations])
        self._delete_delivered()
        return dropped

    def jobs_with_proofs(self) -> list[bytes]:
        """Jobs that still have undelivered proofs here."""
        return [r[0] for r in self._db.execute("SELECT DISTINCT job FROM outbox ORDER BY job")]

    def destinations(self) -> list[str]:
        """Every destination that is still owed a proof (pending or rejected)."""
        return [r[0] for r in self._db.execute(
            "SELECT DISTINCT validator FROM deliveries WHERE state IN ('pending', 'rejected') "
            "ORDER BY validator")]

    # ------------------------------------------------------------------ deliveries

    def sync_validators(self) -> list[str]:
        """At start: make every stored proof owed to its job's destinations; make them due.

        With a static list every job's destinations are that list; otherwise each job's
        stored route (jobs without one keep their rows until the agent sets it). Acked rows
        stay acked. Returns the validators whose undelivered proofs were dropped because
        they are no longer destinations.
        """
        now = self._clock()
        dropped: set[str] = set()
        with self._tx():
            for job in self.jobs_with_proofs():
                dest = self.validators or self.stored_route(job)
                if dest is not None:
                    dropped.update(self._sync_job(job, dest, now))
            self._db.execute("UPDATE deliveries SET next_attempt_at=? WHERE state='pending'",
                             (now,))
            self._delete_delivered()
        return sorted(dropped)

    def due(self, validator: str, now: float, limit: int) -> list[OutboxItem]:
        """Deliveries to ``validator`` due at ``now`` (pending or rejected), oldest first.

        Guarantee: a validator receives each job's proofs in seq order. A delivery is not due
        while an earlier seq of the same job to the same validator is still pending and waiting
        out a backoff (it would overtake it, and a validator that sees seq n + k first records
        n..n+k-1 as missed and rejects them for good when they arrive). Earlier pending seqs that
        are due come first in the same batch."""
        rows = self._db.execute(
            "SELECT o.job, o.seq, o.proof, o.proof_hash, o.proof_sig, o.receipt_sig, "
            "d.attempts, d.state, o.worker_key FROM deliveries d JOIN outbox o USING(job, seq) "
            "WHERE d.validator=? AND d.state IN ('pending', 'rejected') "
            "AND d.next_attempt_at<=? AND NOT EXISTS (SELECT 1 FROM deliveries e "
            "WHERE e.validator=d.validator AND e.job=d.job AND e.seq<d.seq "
            "AND e.state='pending' AND e.next_attempt_at>?) "
            "ORDER BY o.job, o.seq, o.created_at LIMIT ?",
            (validator, now, now, limit)).fetchall()
        return [OutboxItem(*r) for r in rows]

    def ack(self, validator: str, keys: Iterable[tuple[bytes, int]]) -> None:
        """The validator acknowledged these proofs; delete proofs every destination acked."""
        with self._tx():
            self._db.executemany(
                "UPDATE deliveries SET state='acked', last_error=NULL "
                "WHERE job=? AND seq=? AND validator=?", [(j, s, validator) for j, s in keys])
            self._delete_delivered()

    def retry_at(self, validator: str, key: tuple[bytes, int], when: float, error: str) -> None:
        with self._tx():
            self._db.execute(
                "UPDATE deliveries SET attempts=attempts+1, next_attempt_at=?, last_error=? "
                "WHERE job=? AND seq=? AND validator=? AND state!='acked'",
                (when, error, key[0], key[1], validator))

    def reject(self, validator: str, key: tuple[bytes, int], error: str,
               retry_at: float | None) -> None:
        """Keep the proof for an operator; ``retry_at=None`` marks an equivocation (no retry)."""
        state = "equivocation" if retry_at is None else "rejected"
        with self._tx():
            self._db.execute(
                "UPDATE deliveries SET state=?, attempts=attempts+1, next_attempt_at=?, "
                "last_error=? WHERE job=? AND seq=? AND validator=? AND state!='acked'",
                (state, retry_at if retry_at is not None else 1e18, error, key[0], key[1],
                 validator))

    def next_due_at(self, validator: str | None = None) -> float | None:
        """When the next delivery (to ``validator``, or to anyone) is due; None: none owed."""
        if validator is None:
            row = self._db.execute(
                "SELECT MIN(next_attempt_at) FROM deliveries "
                "WHERE state IN ('pending', 'rejected')").fetchone()
        else:  # a row waiting behind an earlier seq of its job is due when that one is
            row = self._db.execute(
                "SELECT MIN(d.next_attempt_at) FROM deliveries d "
                "WHERE d.validator=? AND d.state IN ('pending', 'rejected') "
                "AND NOT EXISTS (SELECT 1 FROM deliveries e WHERE e.validator=d.validator "
                "AND e.job=d.job AND e.seq<d.seq AND e.state='pending' "
                "AND e.next_attempt_at>d.next_attempt_at)", (validator,)).fetchone()
        return row[0]

    def make_due(self, validator: str, now: float) -> int:
        """Make every pending delivery to ``validator`` due at ``now`` (it answers again);
        rejected and equivocation rows keep their schedule. Returns how many."""
        with self._tx():
            cur = self._db.execute(
                "UPDATE deliveries SET next_attempt_at=? "
                "WHERE validator=? AND state='pending' AND next_attempt_at>?",
                (now, validator, now))
            return cur.rowcount

    def counts(self) -> dict[str, int]:
        """Number of undelivered (proof, validator) pairs by state, plus stored proofs."""
        out = {"pending": 0, "rejected": 0, "equivocation": 0}
        for state, n in self._db.execute(
                "SELECT state, COUNT(*) FROM deliveries WHERE state!='acked' GROUP BY state"):
            out[state] = n
        out["proofs"] = self._db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
        return out

    def acked_by(self, job: bytes, seq: int) -> list[str]:
        """Destinations that acknowledged a proof still held here."""
        return [r[0] for r in self._db.execute(
            "SELECT validator FROM deliveries WHERE job=? AND seq=? AND state='acked' "
            "ORDER BY validator", (job, seq))]

    def _delete_delivered(self) -> None:
        """Delete proofs that have delivery rows and only acked ones, then their rows."""
        self._db.execute(
            "DELETE FROM outbox WHERE EXISTS (SELECT 1 FROM deliveries d "
            "WHERE d.job=outbox.job AND d.seq=outbox.seq) AND NOT EXISTS (SELECT 1 FROM "
            "deliveries d WHERE d.job=outbox.job AND d.seq=outbox.seq AND d.state!='acked')")
        self._db.execute(
            "DELETE FROM deliveries WHERE NOT EXISTS (SELECT 1 FROM outbox o "
            "WHERE o.job=deliveries.job AND o.seq=deliveries.seq)")

    # ------------------------------------------------------------------ GPU assignments

    def assignments(self) -> dict[bytes, tuple[str, ...]]:
        out: dict[bytes, list[str]] = {}
        for job, _slot, uuid in self._db.execute(
                "SELECT job, slot, gpu_uuid FROM assignments ORDER BY job, slot"):
            out.setdefault(job, []).append(uuid)
        return {j: tuple(u) for j, u in out.items()}

    def set_assignment(self, job: bytes, uuids: Sequence[str]) -> None:
        with self._tx():
            self._db.execute("DELETE FROM assignments WHERE job=?", (job,))
            self._db.executemany("INSERT INTO assignments VALUES(?, ?, ?)",
                                 [(job, i, u) for i, u in enumerate(uuids)])

    def release(self, job: bytes) -> None:
        with self._tx():
            self._db.execute("DELETE FROM assignments WHERE job=?", (job,))

    def mark_accepted(self, job: bytes) -> None:
        """This worker's ``accept_job`` of ``job`` landed (recorded after it did). Every proof
        of the job this worker signs goes through this database from then on, so an accepted
        job with no chain state here has no signed proof anywhere (``accepted_here``)."""
        with self._tx():
            self._db.execute("INSERT OR IGNORE INTO accepted_here VALUES(?, ?)",
                             (job, self._clock()))

    def accepted_here(self, job: bytes) -> bool:
        return self._db.execute("SELECT 1 FROM accepted_here WHERE job=?",
                                (job,)).fetchone() is not None


def _retry_locked(step: Callable[[], object], within_s: float = 30.0) -> None:
    """Run ``step``, again while SQLite answers "database is locked" without waiting (the
    switch to WAL and a schema change racing another connection's first open do), for at
    most ``within_s`` seconds: the worker's threads open their connections at once."""
    end = time.monotonic() + within_s
    while True:
        try:
            step()
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= end:
                raise
            time.sleep(0.05)


class _Tx:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._db.execute("COMMIT")
        else:
            self._db.execute("ROLLBACK")
