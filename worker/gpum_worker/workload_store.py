"""The worker's durable record of each job's workload: ``WorkloadStore``.

``WorkloadStore`` (SQLite, WAL, ``synchronous=FULL``) keeps per job: the spec as delivered
(its canonical JSON, secrets still sealed to the worker key: they are never decrypted on
disk), its user, state, exit code and last error, whether ``finish_job`` was sent, and
the tail of its logs once its container is removed; plus a tombstone per job the worker saw
end, with its final status and why it ended. An ended job's record (and its log tail) is
kept for ``ended_logs_s`` after the worker saw it end (``purge``), so its user can still read
the last logs and the reason; then only the tombstone stays (the API answers 410).

Every write is committed before its method returns; a failing database reads as
``WorkloadUnavailable`` (the API answers 503, the agent retries next poll).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import WorkerError

__all__ = [
    "API_STATES",
    "EndedJob",
    "WorkloadRecord",
    "WorkloadStore",
    "WorkloadUnavailable",
]

API_STATES = ("pending", "starting", "running", "exited", "restarting", "failed", "stopped")
"""Workload states the API reports (``state`` of ``GET /v1/jobs/<job>/workload``)."""
LOG_TAIL_BYTES = 1 << 20
"""At most this much of a container's log is kept after the container is removed."""
ENDED_KEEP_S = 30 * 86400
"""Tombstones of ended jobs (410 in the API) are kept this long."""
ENDED_LOGS_S = 86400
"""An ended job's record and log tail are kept this long (``[workload] ended_logs_seconds``)."""


class WorkloadUnavailable(WorkerError):
    """This worker cannot take workloads now (no container runtime, store failing)."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workloads(
    job BLOB PRIMARY KEY,
    workload_hash BLOB NOT NULL,
    spec BLOB NOT NULL,
    state TEXT NOT NULL,
    exit_code INTEGER,
    error TEXT,
    finish_requested INTEGER NOT NULL DEFAULT 0,
    delivered_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    running_at REAL,
    logs BLOB
);
CREATE TABLE IF NOT EXISTS ended(job BLOB PRIMARY KEY, ended_at REAL NOT NULL);
"""
_ADDED_COLUMNS = (("workloads", "user", "BLOB"), ("ended", "status", "TEXT"),
                  ("ended", "reason", "TEXT"))
"""Columns added since schema 1 (a database from before gets them when opened)."""
SCHEMA_VERSION = "2"


@dataclass(frozen=True)
class WorkloadRecord:
    """One job's workload as stored. ``spec`` is the canonical JSON as delivered (secrets
    sealed); ``running_at`` is when the worker last saw its container start running."""

    job: bytes
    workload_hash: bytes
    spec: bytes
    state: str
    exit_code: int | None
    error: str | None
    finish_requested: bool
    delivered_at: float
    updated_at: float
    running_at: float | None
    user: bytes | None = None
    """The job's user wallet (who may read an ended job's logs); None in old records."""


@dataclass(frozen=True)
class EndedJob:
    """A job the worker saw end: when (worker's clock), its final status on chain
    ("completed", "failed", "closed", ...) and why it ended, for its user."""

    ended_at: float
    status: str | None
    reason: str | None


class WorkloadStore:
    """Durable workload specs and states (see the module docstring). Thread-safe: one
    connection behind a lock, shared by the agent's main loop and the API's threads. Every
    write is committed (WAL, ``synchronous=FULL``) before the method returns."""

    def __init__(self, path: Path | str, clock: Callable[[], float] = time.time, *,
                 ended_logs_s: float = ENDED_LOGS_S) -> None:
        self.path = str(path)
        self._clock = clock
        self.ended_logs_s = ended_logs_s
        self._lock = threading.Lock()
        fresh = self.path != ":memory:" and not os.path.exists(self.path)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0,
                                       check_same_thread=False)
            if fresh:  # specs may hold env values the user considers private
                os.chmod(self.path, 0o600)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._db.executescript(_SCHEMA)
            for table, column, kind in _ADDED_COLUMNS:
                have = {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}
                if column not in have:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            self._db.execute("INSERT OR REPLACE INTO meta VALUES('schema', ?)",
                             (SCHEMA_VERSION,))
            self._db.execute("DELETE FROM ended WHERE ended_at < ?",
                             (self._clock() - ENDED_KEEP_S,))
            self._purge()
        except (sqlite3.Error, OSError) as e:
            raise WorkerError(f"cannot open the workload database {self.path}: {e}") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _exec(self, sql: str, args: tuple = ()) -> int:
        """Run one statement (committed at once); the number of rows it changed."""
        with self._lock:
            try:
                return self._db.execute(sql, args).rowcount
            except sqlite3.Error as e:
                raise WorkloadUnavailable(f"workload database {self.path}: {e}") from None

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as e:
                raise WorkloadUnavailable(f"workload database {self.path}: {e}") from None

    def put_spec(self, job: bytes, workload_hash: bytes, spec: bytes,
                 user: bytes | None = None) -> bool:
        """Store ``spec`` (canonical bytes whose sha256 is ``workload_hash``) for ``job`` of
        ``user``; True when new, False when that very spec was stored already (idempotent)."""
        if hashlib.sha256(spec).digest() != workload_hash:
            raise ValueError("spec bytes do not hash to workload_hash")
        now = self._clock()
        if self._exec(
                "INSERT INTO workloads(job, workload_hash, spec, state, delivered_at, "
                "updated_at, user) VALUES(?, ?, ?, 'pending', ?, ?, ?) "
                "ON CONFLICT(job) DO NOTHING",
                (job, workload_hash, spec, now, now, user)):
            return True
        rec = self.get(job)
        if rec is not None and rec.workload_hash != workload_hash:
            raise ValueError("another spec is stored for this job")
        return False

    def get(self, job: bytes) -> WorkloadRecord | None:
        rows = self._query(
            "SELECT job, workload_hash, spec, state, exit_code, error, finish_requested, "
            "delivered_at, updated_at, running_at, user FROM workloads WHERE job = ?", (job,))
        if not rows:
            return None
        row = rows[0]
        return WorkloadRecord(bytes(row[0]), bytes(row[1]), bytes(row[2]), row[3], row[4],
                              row[5], bool(row[6]), row[7], row[8], row[9],
                              None if row[10] is None else bytes(row[10]))

    def records(self) -> list[WorkloadRecord]:
        keys = [bytes(r[0]) for r in self._query("SELECT job FROM workloads ORDER BY job")]
        return [r for r in (self.get(k) for k in keys) if r is not None]

    def set_state(self, job: bytes, state: str, *, exit_code: int | None = None,
                  error: str | None = None, running_at: float | None = None) -> bool:
        """Record ``state`` (one of ``API_STATES``); writes only when state, exit code or
        error changed. ``running_at`` is stored when the state becomes "running". True when
        the row changed."""
        if state not in API_STATES:
            raise ValueError(f"unknown workload state {state!r}")
        return bool(self._exec(
            "UPDATE workloads SET running_at = CASE WHEN ? = 'running' AND state != 'running' "
            "THEN COALESCE(?, running_at) ELSE running_at END, state = ?, exit_code = ?, "
            "error = ?, updated_at = ? "
            "WHERE job = ? AND NOT (state = ? AND exit_code IS ? AND error IS ?)",
            (state, running_at, state, exit_code, error, self._clock(), job, state, exit_code,
             error)))

    def mark_finish_requested(self, job: bytes) -> None:
        self._exec("UPDATE workloads SET finish_requested = 1 WHERE job = ?", (job,))

    def save_logs(self, job: bytes, data: bytes) -> None:
        """Keep the last ``LOG_TAIL_BYTES`` of a removed container's log."""
        self._exec("UPDATE workloads SET logs = ? WHERE job = ?",
                   (bytes(data[-LOG_TAIL_BYTES:]), job))

    def logs(self, job: bytes) -> bytes | None:
        rows = self._query("SELECT logs FROM workloads WHERE job = ?", (job,))
        return None if not rows or rows[0][0] is None else bytes(rows[0][0])

    def mark_ended(self, job: bytes, status: str | None = None,
                   reason: str | None = None) -> None:
        """The job ended (final ``status`` on chain, ``reason`` for its user): remember it;
        its record and log tail stay for ``ended_logs_s`` (``purge``). Marking it again
        updates status and reason, never the time it ended."""
        self._exec("INSERT INTO ended(job, ended_at, status, reason) VALUES(?, ?, ?, ?) "
                   "ON CONFLICT(job) DO UPDATE SET status = COALESCE(excluded.status, status), "
                   "reason = COALESCE(excluded.reason, reason)",
                   (job, self._clock(), status, reason))

    def is_ended(self, job: bytes) -> bool:
        return bool(self._query("SELECT 1 FROM ended WHERE job = ?", (job,)))

    def ended(self, job: bytes) -> EndedJob | None:
        rows = self._query("SELECT ended_at, status, reason FROM ended WHERE job = ?", (job,))
        return EndedJob(*rows[0]) if rows else None

    def purge(self) -> int:
        """Forget the records (spec, state, log tail) of jobs that ended more than
        ``ended_logs_s`` ago; the number forgotten."""
        with self._lock:
            try:
                return self._purge()
            except sqlite3.Error as e:
                raise WorkloadUnavailable(f"workload database {self.path}: {e}") from None

    def _purge(self) -> int:
        return int(self._db.execute(
            "DELETE FROM workloads WHERE job IN (SELECT job FROM ended WHERE ended_at < ?)",
            (self._clock() - self.ended_logs_s,)).rowcount)
