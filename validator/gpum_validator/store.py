"""Durable storage of proofs, job state, settlement intents and evidence.

``Store`` is the interface the rest of the validator uses. ``SQLStore`` holds every query,
written once in SQLite's spelling (``store_sql.Dialect`` translates it for PostgreSQL), on
top of two backends: ``SQLiteStore`` (below: the stdlib ``sqlite3`` in WAL mode with
an fsync of the WAL after every transaction, ``make_durable``; one connection shared by the
HTTP threads and the settlement thread under a lock) and ``store_pg.PostgresStore``
(psycopg 3, a small pool; several validator processes may share one database). A method that
returns has its effect on disk; each public method is one transaction, or joins the calling
thread's ``batch()``.

Schema version ``SCHEMA_VERSION`` is kept in ``meta``; an older database is migrated in
place, opening one written by a newer version raises ``StoreError`` instead of guessing.

Scale (issue 9): nothing on a hot path reads a whole table. Each ``jobs`` row carries
``covered_seq`` (the highest seq settled on chain or named by any intent) and ``paid_seq``
(settled on chain or by a confirmed intent), maintained by ``update_chain_info``,
``add_intent`` and ``mark_intent``, and the flags ``unsettled`` / ``unpaid`` (the newest
accepted seq is above them; kept by the database, ``_SQLITE_MARKS``); partial indexes on
the flags hold only those jobs, so ``settle_candidates`` and ``pending_windows`` read the
active jobs only.
Row counts for ``summary`` (/health) are kept in ``counters`` by triggers. ``prune`` deletes,
in small transactions, what jobs closed on chain more than a retention period ago no longer
need (see ``prune``); equivocation evidence and the attestations this validator gave stay.

Approvals (issue 8): every accepted proof row carries the seconds this validator approved of
its window and its approved total for the job up to that seq (``approved_at``); the
attestations it signed as a committee member (``attestations_given``: at most one value per
(job, seq), written before the signature leaves the process), the attestations it received
as a leader (``attestations_received``, kept as evidence), validator-equivocation cases and
downtime reports are tables of their own.

Bounds (``StoreLimits``): rejected proofs are capped per job (the lowest seqs that are not
equivocation evidence are evicted first, so a job's newest proofs, which its head and a
retry need, stay) and in total (beyond it new rejections are answered but not stored); a
(job, seq) holds at most ``MAX_PROOFS_PER_SEQ`` different proofs (one evidence pair). The
intake only stores proofs that passed authentication, the job-assignment check and the
worker-key check, so what is stored for a job was signed by that job's provider.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from .errors import StoreError
from .store_sql import (
    ROWS_PER_STATEMENT,
    SQLITE,
    STATEMENT_CACHE,
    Conn,
    Dialect,
    as_int,
    values_list,
)
from .verify import Authenticated, JobState, Verdict
from .wal import WalCheckpointer

SCHEMA_VERSION = 4
UPDATED_AT_GRAIN_SECONDS = 600.0
"""An accepted proof sets its job's ``updated_at`` only when the stored one is this much
older: ``jobs.updated_at`` is the time of the job's last write to within this grain. It is read
only against cutoffs days old (``stale_open_jobs``, ``prune``), and setting it at every window
moves the job's entry in ``jobs_open`` (one more random page written per proof)."""
MAX_PROOFS_PER_SEQ = 2
"""Different proofs kept for one (job, seq): the first and one conflicting (the evidence)."""

INTENT_STATUSES = ("intended", "sent", "confirmed", "failed")
OPEN_INTENT_STATUSES = ("intended", "sent")
TERMINAL_CHAIN_STATUSES = ("completed", "cancelled", "failed", "declined", "closed")
"""Chain statuses after which nothing of a job settles any more (``closed``: its account is
gone, ``mark_job_closed``). Such jobs are never settle candidates and may be pruned."""
_TERMINAL_SQL = "('completed', 'cancelled', 'failed', 'declined', 'closed')"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS proofs (
    job BLOB NOT NULL,
    seq INTEGER NOT NULL,
    hash BLOB NOT NULL,
    proof BLOB NOT NULL,
    proof_signature BLOB NOT NULL,
    receipt_signature BLOB NOT NULL,
    worker_key BLOB NOT NULL,
    cumulative_seconds INTEGER NOT NULL,
    window_end INTEGER NOT NULL,
    received_at REAL NOT NULL,
    decision TEXT NOT NULL CHECK (decision IN ('accepted', 'rejected')),
    reason TEXT,
    approved_seconds INTEGER,
    approved_total INTEGER,
    PRIMARY KEY (job, seq, hash)
);
CREATE TABLE IF NOT EXISTS jobs (
    job BLOB PRIMARY KEY,
    last_seq INTEGER NOT NULL,
    cumulative_seconds INTEGER NOT NULL,
    last_window_end INTEGER NOT NULL,
    gpu_uuids TEXT,
    accepted_windows INTEGER NOT NULL DEFAULT 0,
    chain_status TEXT,
    chain_last_seq INTEGER NOT NULL DEFAULT 0,
    settled_seconds INTEGER NOT NULL DEFAULT 0,  -- the chain's paid_seconds
    rate_per_second INTEGER NOT NULL DEFAULT 0,
    escrow_remaining INTEGER NOT NULL DEFAULT 0,
    ended_at INTEGER NOT NULL DEFAULT 0,
    chain_checked_at REAL NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    window_seconds INTEGER NOT NULL DEFAULT 0,
    approved_total INTEGER NOT NULL DEFAULT 0,
    chain_claimed_seconds INTEGER NOT NULL DEFAULT 0,
    chain_last_window_end INTEGER NOT NULL DEFAULT 0,
    started_at INTEGER NOT NULL DEFAULT 0,
    committee TEXT NOT NULL DEFAULT '[]',
    quorum INTEGER NOT NULL DEFAULT 1,
    max_skew_seconds INTEGER NOT NULL DEFAULT 0,
    max_missed_windows INTEGER NOT NULL DEFAULT 0,
    covered_seq INTEGER NOT NULL DEFAULT 0,  -- chain_last_seq or the seq_to of any intent
    paid_seq INTEGER NOT NULL DEFAULT 0,  -- chain_last_seq or the seq_to of a confirmed intent
    unsettled INTEGER GENERATED ALWAYS AS (CASE WHEN last_seq > covered_seq THEN 1 ELSE 0 END)
        VIRTUAL,
    unpaid INTEGER GENERATED ALWAYS AS (CASE WHEN last_seq > paid_seq THEN 1 ELSE 0 END)
        VIRTUAL
);
CREATE TABLE IF NOT EXISTS intents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job BLOB NOT NULL,
    seq_from INTEGER NOT NULL,
    seq_to INTEGER NOT NULL,
    cumulative_seconds INTEGER NOT NULL,
    window_end INTEGER NOT NULL,
    proof_hash BLOB NOT NULL,
    worker_key BLOB NOT NULL,
    receipt_signature BLOB NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('intended', 'sent', 'confirmed', 'failed')),
    signature TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    next_attempt_at REAL NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    approved_seconds INTEGER,
    attestations TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS intents_open ON intents (status, job);
CREATE TABLE IF NOT EXISTS missed_windows (
    job BLOB NOT NULL,
    seq INTEGER NOT NULL,
    recorded_at REAL NOT NULL,
    PRIMARY KEY (job, seq)
);
CREATE TABLE IF NOT EXISTS equivocations (
    job BLOB NOT NULL,
    seq INTEGER NOT NULL,
    hash_a BLOB NOT NULL,
    hash_b BLOB NOT NULL,
    recorded_at REAL NOT NULL,
    reported_signature TEXT,
    PRIMARY KEY (job, seq, hash_a, hash_b)
);
CREATE TABLE IF NOT EXISTS equivocation_reports (
    job BLOB NOT NULL,
    seq INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('sent', 'retry', 'done', 'failed')),
    signature TEXT,
    outcome TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    next_attempt_at REAL NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    PRIMARY KEY (job, seq)
);
"""

_SCHEMA_V3 = """
CREATE TABLE IF NOT EXISTS attestations_given (
    job BLOB NOT NULL,
    seq INTEGER NOT NULL,
    approved_seconds INTEGER NOT NULL,
    proof_hash BLOB NOT NULL,
    signature BLOB NOT NULL,
    requester BLOB,
    signed_at REAL NOT NULL,
    PRIMARY KEY (job, seq)
);
CREATE TABLE IF NOT EXISTS attestations_received (
    job BLOB NOT NULL,
    seq INTEGER NOT NULL,
    member BLOB NOT NULL,
    approved_seconds INTEGER NOT NULL,
    cumulative_seconds INTEGER NOT NULL,
    window_end INTEGER NOT NULL,
    proof_hash BLOB NOT NULL,
    signature BLOB NOT NULL,
    received_at REAL NOT NULL,
    PRIMARY KEY (job, seq, member, approved_seconds, proof_hash)
);
CREATE TABLE IF NOT EXISTS validator_equivocations (
    job BLOB NOT NULL,
    seq INTEGER NOT NULL,
    member BLOB NOT NULL,
    recorded_at REAL NOT NULL,
    status TEXT CHECK (status IN ('sent', 'retry', 'done', 'failed')),
    signature TEXT,
    outcome TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    next_attempt_at REAL NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    PRIMARY KEY (job, seq, member)
);
CREATE TABLE IF NOT EXISTS downtime_reports (
    job BLOB NOT NULL,
    last_proof_window_end INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('sent', 'retry', 'done', 'failed')),
    signature TEXT,
    outcome TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    next_attempt_at REAL NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    PRIMARY KEY (job, last_proof_window_end)
);
"""

_V3_COLUMNS = (
    ("proofs", "approved_seconds INTEGER"),
    ("proofs", "approved_total INTEGER"),
    ("jobs", "approved_total INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "chain_claimed_seconds INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "chain_last_window_end INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "started_at INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "committee TEXT NOT NULL DEFAULT '[]'"),
    ("jobs", "quorum INTEGER NOT NULL DEFAULT 1"),
    ("jobs", "max_skew_seconds INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "max_missed_windows INTEGER NOT NULL DEFAULT 0"),
    ("intents", "approved_seconds INTEGER"),
    ("intents", "attestations TEXT NOT NULL DEFAULT '[]'"),
)

_READ_INDEXES = """
CREATE INDEX IF NOT EXISTS intents_by_job ON intents (job, id);
"""
"""Indexes of the read-only dashboard queries (``recent_intents``); no schema change, so
they are created on every open without a version bump."""

_V4_COLUMNS = (
    ("jobs", "covered_seq INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "paid_seq INTEGER NOT NULL DEFAULT 0"),
)
"""v4 columns of ``jobs`` (SQLite upgrades): the seqs covered and paid. The flags whether the
newest accepted seq is above them, ``unsettled`` and ``unpaid``, are kept by the database so
that no write can forget them: generated columns in ``_SCHEMA`` (PostgreSQL stores them and
has statistics of them, so its planner knows how few jobs are active), stored columns kept by
triggers on SQLite (``_SQLITE_MARKS``)."""

_MARKS = "unsettled = (last_seq > covered_seq), unpaid = (last_seq > paid_seq)"
"""The rule of the settle flags, as an ``UPDATE``'s ``SET`` of one ``jobs`` row."""

_SQLITE_MARKS = "\n".join(
    f"CREATE TRIGGER IF NOT EXISTS jobs_marks_{name} AFTER {event} ON jobs "
    "WHEN NEW.unsettled IS NOT (NEW.last_seq > NEW.covered_seq) "
    "OR NEW.unpaid IS NOT (NEW.last_seq > NEW.paid_seq) "
    f"BEGIN UPDATE jobs SET {_MARKS} WHERE rowid = NEW.rowid; END;"
    for name, event in (("ins", "INSERT"),
                        ("upd", "UPDATE OF last_seq, covered_seq, paid_seq, unsettled, unpaid")))
"""SQLite's ``jobs.unsettled`` / ``jobs.unpaid``: stored columns that these triggers set
whenever a write leaves either of them different from ``last_seq > covered_seq`` /
``last_seq > paid_seq`` (a write of the flags themselves included), so they always equal what
the generated columns of ``_SCHEMA`` would hold. Why not generated: SQLite rewrites the
entries of every index whose columns (a partial index's ``WHERE`` included) depend on a column
an ``UPDATE`` sets, so with generated flags every accepted window (which sets ``last_seq``)
rewrote the job's entries in ``jobs_unsettled`` and ``jobs_unpaid``: about a quarter of the
pages the intake wrote (validator/README.md *Throughput*). Stored flags change, and move their
index entries, only when a job goes from settled to unsettled or back. Recursive triggers are
off (SQLite's default), so the triggers' own ``UPDATE`` does not fire them again."""

_SCHEMA_V4 = f"""
CREATE TABLE IF NOT EXISTS counters (
    name TEXT NOT NULL,
    shard INTEGER NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (name, shard)
);
CREATE INDEX IF NOT EXISTS jobs_unsettled ON jobs (job) WHERE unsettled = 1;
CREATE INDEX IF NOT EXISTS jobs_unpaid ON jobs (job) WHERE unpaid = 1;
CREATE INDEX IF NOT EXISTS jobs_closed ON jobs (ended_at) WHERE chain_status IN {_TERMINAL_SQL};
CREATE INDEX IF NOT EXISTS jobs_open ON jobs (updated_at)
    WHERE chain_status IS NULL OR chain_status NOT IN {_TERMINAL_SQL};
CREATE INDEX IF NOT EXISTS intents_by_status_time ON intents (status, updated_at);
DROP INDEX IF EXISTS proofs_by_decision;
DROP INDEX IF EXISTS proofs_accepted;
CREATE INDEX IF NOT EXISTS proofs_rejected ON proofs (job, seq) WHERE decision = 'rejected';
"""
"""Schema v4 (issue 9): the counters of ``summary`` and the indexes of the settle pass,
/health and pruning (the ``jobs`` columns they use are in ``_V4_COLUMNS``). The v1-v3 index
``proofs_by_decision`` (decision, job) served whole-table counts that ``counters`` replaced,
so it is dropped. Per-job lookups of accepted proofs read the primary key (job, seq, hash):
they are ranges of a few seqs. The index ``proofs_accepted`` (job, decision, seq) that served
them until the intake's fast lane cost one more random page per accepted proof written (a
fifth of the intake's throughput, validator/README.md *Throughput*), so it is dropped too;
only rejected proofs, which the per-job caps count whatever their seqs, keep an index of
their own, ``proofs_rejected`` (the intake writes accepted proofs, which never enter it)."""

COUNTED = (("proofs", "decision"), ("intents", "status"), ("jobs", None),
           ("missed_windows", None), ("attestations_given", None),
           ("attestations_received", None))
"""Tables whose rows ``counters`` counts (per value of the column, when one is named), kept
by triggers: counter ``proofs.accepted`` is the number of accepted proofs, ``jobs`` of jobs."""


def _sqlite_count_triggers() -> str:
    """The SQLite triggers that keep ``counters`` (one shard, 0)."""

    def bump(key: str, delta: int) -> str:
        return (f"INSERT INTO counters (name, shard, value) VALUES ({key}, 0, {delta}) "
                f"ON CONFLICT (name, shard) DO UPDATE SET value = value + ({delta});")

    out = []
    for table, col in COUNTED:
        new = f"'{table}.' || NEW.{col}" if col else f"'{table}'"
        old = f"'{table}.' || OLD.{col}" if col else f"'{table}'"
        out.append(f"CREATE TRIGGER IF NOT EXISTS count_{table}_ins AFTER INSERT ON {table} "
                   f"BEGIN {bump(new, 1)} END;")
        out.append(f"CREATE TRIGGER IF NOT EXISTS count_{table}_del AFTER DELETE ON {table} "
                   f"BEGIN {bump(old, -1)} END;")
        if col:
            out.append(f"CREATE TRIGGER IF NOT EXISTS count_{table}_upd AFTER UPDATE OF {col} "
                       f"ON {table} WHEN OLD.{col} IS NOT NEW.{col} "
                       f"BEGIN {bump(old, -1)} {bump(new, 1)} END;")
    return "\n".join(out)


def _collapse_moves(job_rows: Sequence[tuple]) -> list[tuple]:
    """The moves of ``record_accepted_rows`` (``last_seq, cumulative_seconds,
    last_window_end, approved_total, updated_at, job, previous last_seq``, in order) as one
    move per job: ``(job, first previous last_seq, last_seq, cumulative_seconds,
    last_window_end, approved_total, windows, updated_at)`` with the job's last values, the
    number of its windows and its last ``updated_at`` that is not None (None if all are),
    which is what applying them one after the other leaves. A job's moves must chain (each
    from the seq the one before moved to): else StoreError, as a failed compare-and-set."""
    out: dict[bytes, list] = {}
    for seq, cum, end, total, stamp, job, prev in job_rows:
        m = out.get(job)
        if m is None:
            out[job] = [job, prev, seq, cum, end, total, 1, stamp]
            continue
        if prev != m[2]:
            raise StoreError("job state changed during verification; resubmit")
        m[2:7] = seq, cum, end, total, m[6] + 1
        if stamp is not None:
            m[7] = stamp
    return [tuple(m) for m in out.values()]


REPORT_STATUSES = ("sent", "retry", "done", "failed")
TERMINAL_REPORT_STATUSES = ("done", "failed")


@dataclass(frozen=True)
class StoredProof:
    job: bytes
    seq: int
    hash: bytes
    proof: bytes
    proof_signature: bytes
    receipt_signature: bytes
    worker_key: bytes
    cumulative_seconds: int
    window_end: int
    received_at: float
    decision: str
    reason: str | None
    approved_seconds: int | None = None
    """Seconds of this window this validator approved (accepted proofs only)."""
    approved_total: int | None = None
    """This validator's approved total for the job up to this seq (accepted proofs only)."""


@dataclass(frozen=True)
class IntakeView:
    """What the intake reads to judge a proof of (job, seq): the job's state (``job_state``)
    and the stored proofs of ``seq`` and of ``seq - 1`` (``proofs_at``)."""

    state: JobState | None
    at_seq: list[StoredProof]
    before: list[StoredProof]


@dataclass(frozen=True)
class EquivocationCase:
    """One (job, seq) with two different signed proofs, and the state of its slash report.

    ``status`` is None until a submission was attempted; then ``sent`` (in flight or
    unknown after a crash), ``retry``, or the terminal ``done`` / ``failed``.
    """

    job: bytes
    seq: int
    hash_a: bytes
    hash_b: bytes
    recorded_at: float
    status: str | None = None
    signature: str | None = None
    outcome: str | None = None
    attempts: int = 0
    last_error: str | None = None
    next_attempt_at: float = 0.0


@dataclass(frozen=True)
class StoreLimits:
    """How much the store keeps of proofs that were not accepted (accepted proofs are the
    job's paid history and are never dropped)."""

    max_rejected_per_job: int = 1024
    """Rejected proofs kept per job; beyond it the lowest seqs (never evidence) are evicted."""
    max_rejected_total: int = 100_000
    """Rejected proofs kept in all; beyond it new rejections are answered but not stored."""

    def __post_init__(self) -> None:
        if self.max_rejected_per_job < 1 or self.max_rejected_total < 1:
            raise ValueError("StoreLimits values must be at least 1")


DEFAULT_LIMITS = StoreLimits()


@dataclass(frozen=True)
class ChainJobInfo:
    """The chain facts the settlement policy needs, as last read (rate, window length and the
    other limits from the job's terms; ``window_seconds`` 0 = not read yet). ``committee``
    holds the members' authority keys in order."""

    status: str
    last_seq: int
    paid_seconds: int
    rate_per_second: int
    escrow_remaining: int
    ended_at: int
    window_seconds: int = 0
    claimed_seconds: int = 0
    last_window_end: int = 0
    started_at: int = 0
    committee: tuple[bytes, ...] = ()
    quorum: int = 1
    max_skew_seconds: int = 0
    max_missed_windows: int = 0

    @cached_property
    def committee_json(self) -> str:
        """``committee`` as ``jobs.committee`` stores it (computed once per object)."""
        return json.dumps([m.hex() for m in self.committee])


@dataclass(frozen=True)
class SettleCandidate:
    """A job with accepted windows not yet covered by a confirmed or open intent."""

    job: bytes
    latest: StoredProof
    covered_seq: int
    unsettled_windows: int
    oldest_unsettled_window_end: int
    accepted_cumulative: int
    chain: ChainJobInfo | None
    chain_checked_at: float
    approved_total: int = 0
    """This validator's approved total up to ``latest``."""


@dataclass(frozen=True)
class JobRow:
    """One job this validator holds proofs of: its newest accepted window and chain facts."""

    job: bytes
    last_seq: int
    cumulative_seconds: int
    last_window_end: int
    approved_total: int
    chain: ChainJobInfo | None
    chain_checked_at: float


@dataclass(frozen=True)
class Intent:
    id: int
    job: bytes
    seq_from: int
    seq_to: int
    cumulative_seconds: int
    window_end: int
    proof_hash: bytes
    worker_key: bytes
    receipt_signature: bytes
    status: str
    signature: str | None
    attempts: int
    last_error: str | None
    next_attempt_at: float
    created_at: float
    updated_at: float
    approved_seconds: int = 0
    attestations: tuple[tuple[bytes, bytes], ...] = ()
    """(member authority, signature over the attestation message), in settle order."""


@dataclass(frozen=True)
class GivenAttestation:
    """The one value this validator signed for a (job, seq) as a committee member."""

    job: bytes
    seq: int
    approved_seconds: int
    proof_hash: bytes
    signature: bytes
    requester: bytes | None
    signed_at: float


@dataclass(frozen=True)
class ReceivedAttestation:
    """A valid attestation another member gave this validator (as a leader): evidence."""

    job: bytes
    seq: int
    member: bytes
    approved_seconds: int
    cumulative_seconds: int
    window_end: int
    proof_hash: bytes
    signature: bytes
    received_at: float


@dataclass(frozen=True)
class ValidatorEquivocationCase:
    """A member that signed two different attestations for one (job, seq), and the state of
    its ``slash_validator_equivocation`` report (None until attempted, then like
    ``EquivocationCase``)."""

    job: bytes
    seq: int
    member: bytes
    recorded_at: float
    status: str | None = None
    signature: str | None = None
    outcome: str | None = None
    attempts: int = 0
    last_error: str | None = None
    next_attempt_at: float = 0.0


@dataclass(frozen=True)
class DowntimeReport:
    """One ``slash_downtime`` submission for (job, last_proof_window_end)."""

    job: bytes
    last_proof_window_end: int
    status: str
    signature: str | None
    outcome: str | None
    attempts: int
    last_error: str | None
    next_attempt_at: float
    updated_at: float


class Store(Protocol):
    """What the intake, the settler, the member endpoints and the reporters need from
    durable storage."""

    def batch(self, durable: bool = True) -> AbstractContextManager[None]: ...
    def make_durable(self) -> None: ...
    def job_state(self, job: bytes) -> JobState | None: ...
    def proofs_at(self, job: bytes, seq: int) -> list[StoredProof]: ...
    def intake_view(self, job: bytes, seq: int) -> IntakeView: ...
    def accepted_at(self, job: bytes, seq: int) -> StoredProof | None: ...
    def newest_accepted(self, job: bytes) -> StoredProof | None: ...
    def decision_of(self, job: bytes, seq: int, hash: bytes) -> str | None: ...
    def max_seq(self, job: bytes) -> int: ...
    def head(self, job: bytes) -> StoredProof | None: ...
    def record_rejected(self, auth: Authenticated, reason: str, now: float,
                        limits: StoreLimits = DEFAULT_LIMITS) -> str | None: ...
    def record_accepted(self, auth: Authenticated, verdict: Verdict,
                        stored_last_seq: int | None, now: float) -> None: ...
    def record_accepted_rows(self, new_job_rows: list[tuple], job_rows: list[tuple],
                             proof_rows: list[tuple]) -> None: ...
    def intake_memo(self, job: bytes) -> tuple[int, JobState | None, float]: ...
    def intake_memos(self, jobs: Sequence[bytes]
                     ) -> dict[bytes, tuple[int, JobState | None, float]]: ...
    def intake_memo_valid(self) -> bool: ...
    serial_writers: bool
    lane_memo: dict[bytes, Any]
    def record_equivocation(self, auth: Authenticated, other_hash: bytes, now: float) -> bool: ...
    def update_chain_info(self, job: bytes, info: ChainJobInfo, now: float) -> None: ...
    def update_chain_infos(self, items: Sequence[tuple[bytes, ChainJobInfo]],
                           now: float) -> None: ...
    def chain_info(self, job: bytes) -> tuple[ChainJobInfo | None, float]: ...
    def jobs(self, *, open_only: bool = False) -> list[JobRow]: ...
    def equivocation_cases(self, *, open_only: bool = False) -> list[EquivocationCase]: ...
    def mark_equivocation_report(self, job: bytes, seq: int, status: str, now: float, *,
                                 signature: str | None = None, outcome: str | None = None,
                                 error: str | None = None,
                                 next_attempt_at: float | None = None,
                                 count_attempt: bool = False) -> None: ...
    def settle_candidates(self) -> list[SettleCandidate]: ...
    def add_intent(self, proof: StoredProof, seq_from: int, now: float,
                   approved_seconds: int | None = None,
                   attestations: Sequence[tuple[bytes, bytes]] = ()) -> Intent: ...
    def open_intents(self) -> list[Intent]: ...
    def mark_intent(self, intent_id: int, status: str, now: float, *,
                    signature: str | None = None, error: str | None = None,
                    next_attempt_at: float | None = None,
                    count_attempt: bool = False) -> None: ...
    def intents(self, job: bytes | None = None) -> list[Intent]: ...
    def given_attestation(self, job: bytes, seq: int) -> GivenAttestation | None: ...
    def record_given_attestation(self, att: GivenAttestation) -> GivenAttestation: ...
    def record_received_attestation(self, att: ReceivedAttestation) -> bool: ...
    def received_attestations(self, job: bytes, seq: int,
                              member: bytes | None = None) -> list[ReceivedAttestation]: ...
    def validator_equivocation_cases(self, *, open_only: bool = False
                                     ) -> list[ValidatorEquivocationCase]: ...
    def mark_validator_equivocation(self, job: bytes, seq: int, member: bytes, status: str,
                                    now: float, *, signature: str | None = None,
                                    outcome: str | None = None, error: str | None = None,
                                    next_attempt_at: float | None = None,
                                    count_attempt: bool = False) -> None: ...
    def downtime_report(self, job: bytes, last_proof_window_end: int) -> DowntimeReport | None: ...
    def mark_downtime_report(self, job: bytes, last_proof_window_end: int, status: str,
                             now: float, *, signature: str | None = None,
                             outcome: str | None = None, error: str | None = None,
                             next_attempt_at: float | None = None,
                             count_attempt: bool = False) -> None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def get_meta(self, key: str) -> str | None: ...
    # Read-only queries of the dashboard (bounded by their ``limit``).
    def recent_windows(self, job: bytes, limit: int) -> list[StoredProof]: ...
    def recent_intents(self, job: bytes | None, limit: int) -> list[Intent]: ...
    def summary(self) -> dict[str, object]: ...
    def pending_windows(self) -> int: ...
    # Retention (issue 9): what jobs closed on chain long ago no longer need.
    def mark_job_closed(self, job: bytes, now: float) -> None: ...
    def stale_open_jobs(self, before: float, limit: int) -> list[bytes]: ...
    def prune(self, before: float, *, batch_rows: int = 200,
              max_seconds: float | None = None,
              on_batch: Callable[[float], None] | None = None,
              pause: float = 0.002) -> dict[str, int]: ...
    def ping(self) -> bool: ...
    def write_probe(self, now: float) -> str | None: ...
    def close(self) -> None: ...


class SQLStore:
    """Every query of ``Store``, written once in SQLite's spelling (``store_sql``), for
    ``SQLiteStore`` and ``store_pg.PostgresStore``. A subclass provides the connections:
    ``_tx()`` (one write transaction, or the calling thread's ``batch()``), ``_read()``
    (several reads that see one state), ``_q()`` (one read statement), ``batch()`` and
    ``close()``; every database error leaves them as ``StoreError``.

    Atomic across processes (PostgreSQL): the "job state changed" check of
    ``record_accepted`` is a compare-and-set on the job row; ``record_given_attestation``
    relies on the (job, seq) primary key; writes that read before they decide
    (``record_equivocation``, ``record_received_attestation``, ``add_intent``, the caps of
    ``record_rejected``) first take ``Conn.serialize`` on their key (a transaction-scoped
    advisory lock; nothing on SQLite, whose writers are serial anyway)."""

    dialect: Dialect = SQLITE
    SETTLE_PAGE = 128
    """Jobs ``settle_candidates`` reads per statement."""

    def _tx(self) -> AbstractContextManager[Conn]:
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[Conn]:
        raise NotImplementedError

    def _q(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        raise NotImplementedError

    def batch(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def rebuild_derived(self) -> None:
        """Recompute what the store derives from its rows (the jobs' ``covered_seq`` and
        ``paid_seq``); the counters are recounted too. For rows written around the store's
        methods (a bulk load); migrations do the same."""
        with self._tx() as db:
            self._rebuild_derived(db)

    def _rebuild_derived(self, db: Conn) -> None:
        db.execute(
            "UPDATE jobs SET covered_seq=MAX(chain_last_seq, COALESCE((SELECT MAX(seq_to) "
            "FROM intents i WHERE i.job=jobs.job), 0)), paid_seq=MAX(chain_last_seq, "
            "COALESCE((SELECT MAX(seq_to) FROM intents i WHERE i.job=jobs.job "
            "AND i.status='confirmed'), 0))")
        db.execute("DELETE FROM counters")
        for table, col in COUNTED:
            key = f"'{table}.' || {col}" if col else f"'{table}'"
            db.execute(f"INSERT INTO counters (name, shard, value) SELECT {key}, 0, COUNT(*) "
                       f"FROM {table}" + (f" GROUP BY {col}" if col else ""))

    # ------------------------------------------------------------------ proofs, job state

    _JOB_STATE_COLS = ("j.last_seq, j.cumulative_seconds, j.last_window_end, j.gpu_uuids, "
                       "j.approved_total, (SELECT hash FROM proofs p WHERE p.job=j.job "
                       "AND p.seq=j.last_seq AND p.decision='accepted')")
    """The columns of a ``JobState`` of the ``jobs`` row ``j`` (``_job_state``)."""

    @staticmethod
    def _job_state(row: Sequence[Any]) -> JobState | None:
        """The ``JobState`` of ``_JOB_STATE_COLS`` values (None when the row is all NULL: an
        outer join found no job)."""
        s, c, w, u, a, h = row
        if s is None:
            return None
        return JobState(s, c, w, tuple(json.loads(u)) if u else None, int(a), h)

    def job_state(self, job: bytes) -> JobState | None:
        rows = self._q(f"SELECT {self._JOB_STATE_COLS} FROM jobs j WHERE j.job=?", (job,))
        return self._job_state(rows[0]) if rows else None

    _PROOF_COLS = ("job, seq, hash, proof, proof_signature, receipt_signature, worker_key, "
                   "cumulative_seconds, window_end, received_at, decision, reason, "
                   "approved_seconds, approved_total")

    def proofs_at(self, job: bytes, seq: int) -> list[StoredProof]:
        rows = self._q(f"SELECT {self._PROOF_COLS} FROM proofs WHERE job=? AND seq=? "
                       "ORDER BY received_at", (job, seq))
        return [StoredProof(*r) for r in rows]

    def intake_view(self, job: bytes, seq: int) -> IntakeView:
        """``job_state(job)``, ``proofs_at(job, seq)`` and ``proofs_at(job, seq - 1)`` in two
        queries (the intake's hot path)."""
        rows = self._q(f"SELECT {self._PROOF_COLS} FROM proofs WHERE job=? AND seq IN (?, ?) "
                       "ORDER BY received_at", (job, seq, seq - 1))
        proofs = [StoredProof(*r) for r in rows]
        state = self.job_state(job)
        return IntakeView(state, [x for x in proofs if x.seq == seq],
                          [x for x in proofs if x.seq == seq - 1])

    def accepted_at(self, job: bytes, seq: int) -> StoredProof | None:
        """The accepted proof of (job, seq) (at most one), with its approved total."""
        rows = self._q(f"SELECT {self._PROOF_COLS} FROM proofs WHERE job=? AND seq=? "
                       "AND decision='accepted'", (job, seq))
        return StoredProof(*rows[0]) if rows else None

    def newest_accepted(self, job: bytes) -> StoredProof | None:
        """The accepted proof of ``job`` with the highest seq, or None."""
        rows = self._q(f"SELECT {self._PROOF_COLS} FROM proofs WHERE job=? "
                       "AND decision='accepted' ORDER BY seq DESC LIMIT 1", (job,))
        return StoredProof(*rows[0]) if rows else None

    def _upsert_proof(self, db: Conn, auth: Authenticated, decision: str,
                      reason: str | None, now: float, approved: int | None = None,
                      total: int | None = None) -> None:
        p, s = auth.proof, auth.signed
        db.execute(
            f"INSERT INTO proofs ({self._PROOF_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (job, seq, hash) DO UPDATE SET decision=excluded.decision, "
            "reason=excluded.reason, received_at=excluded.received_at, "
            "approved_seconds=excluded.approved_seconds, approved_total=excluded.approved_total "
            "WHERE proofs.decision != 'accepted'",
            (p.job, p.seq, auth.hash, s.proof, s.proof_signature, s.receipt_signature,
             p.worker_key, p.cumulative_seconds, p.window_end, now, decision, reason,
             approved, total))

    def decision_of(self, job: bytes, seq: int, hash: bytes) -> str | None:
        """The stored decision of exactly these proof bytes, or None."""
        rows = self._q("SELECT decision FROM proofs WHERE job=? AND seq=? AND hash=?",
                       (job, seq, hash))
        return rows[0][0] if rows else None

    def max_seq(self, job: bytes) -> int:
        """The highest seq stored for ``job`` (accepted or rejected), 0 if none."""
        return int(self._q("SELECT COALESCE(MAX(seq), 0) FROM proofs WHERE job=?",
                           (job,))[0][0])

    def head(self, job: bytes) -> StoredProof | None:
        """The stored proof with the highest seq of ``job``, whatever its decision (at an
        equivocated seq the accepted one, else the first received); None if none."""
        rows = self._q(f"SELECT {self._PROOF_COLS} FROM proofs WHERE job=? "
                       "ORDER BY seq DESC, decision='accepted' DESC, received_at, hash LIMIT 1",
                       (job,))
        return StoredProof(*rows[0]) if rows else None

    def record_rejected(self, auth: Authenticated, reason: str, now: float,
                        limits: StoreLimits = DEFAULT_LIMITS) -> str | None:
        """Store an authenticated proof with decision 'rejected' (never downgrades
        'accepted'; the same bytes again only update reason and time), within ``limits``.

        Returns None when stored, else why not: ``"job_cap"`` (the job holds its maximum of
        rejected proofs and none below this seq can be evicted: all are evidence or higher)
        or ``"total_cap"``.
        """
        p = auth.proof
        with self._tx() as db:
            db.serialize("proofs", p.job)
            if db.execute("SELECT 1 FROM proofs WHERE job=? AND seq=? AND hash=?",
                          (p.job, p.seq, auth.hash)).fetchone():
                self._upsert_proof(db, auth, "rejected", reason, now)
                return None
            total = as_int(db.execute("SELECT SUM(value) FROM counters "
                                      "WHERE name='proofs.rejected'").fetchone()[0])
            if total >= limits.max_rejected_total:
                return "total_cap"
            n = db.execute("SELECT COUNT(*) FROM proofs WHERE decision='rejected' AND job=?",
                           (p.job,)).fetchone()[0]
            excess = n - limits.max_rejected_per_job + 1
            if excess > 0:
                victims = db.execute(
                    "SELECT seq, hash FROM proofs p WHERE decision='rejected' AND job=? "
                    "AND seq<? AND NOT EXISTS (SELECT 1 FROM equivocations e "
                    "WHERE e.job=p.job AND e.seq=p.seq) ORDER BY seq, received_at LIMIT ?",
                    (p.job, p.seq, excess)).fetchall()
                if len(victims) < excess:
                    return "job_cap"
                db.executemany("DELETE FROM proofs WHERE job=? AND seq=? AND hash=?",
                               [(p.job, seq, h) for seq, h in victims])
            self._upsert_proof(db, auth, "rejected", reason, now)
        return None

    def record_accepted(self, auth: Authenticated, verdict: Verdict,
                        stored_last_seq: int | None, now: float) -> None:
        """Atomically store the accepted proof with its approved seconds and total, advance
        the job state, record missed seqs.

        ``stored_last_seq`` is the job's stored last accepted seq the proof was verified
        against (None: none stored); if it moved since (a concurrent accept), StoreError is
        raised and nothing changes. The check is a compare-and-set on the job row (its
        first insert, or an update conditioned on ``last_seq``), so it holds between
        processes sharing one PostgreSQL database too.
        """
        p = auth.proof
        uuids = json.dumps(sorted(g.uuid for g in p.gpus))
        with self._tx() as db:
            if stored_last_seq is None:
                cur = db.execute(
                    "INSERT OR IGNORE INTO jobs (job, last_seq, cumulative_seconds, "
                    "last_window_end, gpu_uuids, accepted_windows, updated_at, approved_total) "
                    "VALUES (?,?,?,?,?,1,?,?)",
                    (p.job, p.seq, p.cumulative_seconds, p.window_end, uuids, now,
                     verdict.approved_total))
            else:
                cur = db.execute(
                    "UPDATE jobs SET last_seq=?, cumulative_seconds=?, last_window_end=?, "
                    "gpu_uuids=?, accepted_windows=accepted_windows+1, "
                    "approved_total=? WHERE job=? AND last_seq=?",
                    (p.seq, p.cumulative_seconds, p.window_end, uuids,
                     verdict.approved_total, p.job, stored_last_seq))
            if cur.rowcount != 1:
                raise StoreError("job state changed during verification; resubmit")
            if stored_last_seq is not None:
                db.execute("UPDATE jobs SET updated_at=? WHERE job=? AND updated_at<=?",
                           (now, p.job, now - UPDATED_AT_GRAIN_SECONDS))
            self._upsert_proof(db, auth, "accepted", None, now, verdict.approved_seconds,
                               verdict.approved_total)
            db.executemany("INSERT OR IGNORE INTO missed_windows VALUES (?,?,?)",
                           [(p.job, s, now) for s in verdict.missed_seqs])

    def record_accepted_rows(self, new_job_rows: list[tuple], job_rows: list[tuple],
                             proof_rows: list[tuple]) -> None:
        """``record_accepted`` of several proofs, each the next seq of its job with the GPU set
        stored (the fast lane, ``fastlane.FastLane``), in this order: the first rows of jobs
        (``job, last_seq, cumulative_seconds, last_window_end, gpu_uuids, updated_at,
        approved_total, info, read_at``: the row is written with the chain facts ``info``
        read at ``read_at`` as ``update_chain_info`` stores them, so a new job costs no
        second write), the moves of job rows (``last_seq, cumulative_seconds,
        last_window_end, approved_total, updated_at, job, previous last_seq``;
        ``updated_at`` None where the stored one is within ``UPDATED_AT_GRAIN_SECONDS``, so
        it is left as it is), the proofs (in ``_PROOF_COLS`` order). The same
        compare-and-set as ``record_accepted``: a job row that exists already or is not at
        its previous ``last_seq``, or a proof row stored already, raises StoreError (the
        caller's transaction is rolled back)."""
        firsts = []
        for r in new_job_rows:
            chain = self._chain_params(r[7], r[8])
            # The flags as ``_SQLITE_MARKS`` would set them (a second write of the row if
            # left to the trigger; PostgreSQL generates them).
            marks = (int(r[1] > chain[-2]), int(r[1] > chain[-1])) if self._stored_marks else ()
            firsts.append(r[:7] + (1,) + chain + marks)
        marked = ", unsettled, unpaid" if self._stored_marks else ""
        moves = _collapse_moves(job_rows)
        with self._tx() as db:
            # Multi-row statements (``Conn.execute_values``), not ``executemany``.
            db.execute_values(
                "INSERT INTO jobs (job, last_seq, cumulative_seconds, last_window_end, "
                "gpu_uuids, updated_at, approved_total, accepted_windows, "
                f"{self._CHAIN_COLS}, covered_seq, paid_seq{marked}) VALUES {{values}}", firsts)
            moved = 0
            # Never ``SET updated_at`` when it stays: SQLite rewrites the index entries of
            # every column set, changed or not (``jobs_open``: one more page per proof).
            for sql, rows in ((", updated_at=v.column8", [m for m in moves if m[7] is not None]),
                              ("", [m[:7] for m in moves if m[7] is None])):
                if rows:
                    moved += db.execute_values(
                        "UPDATE jobs SET last_seq=v.column3, cumulative_seconds=v.column4, "
                        "last_window_end=v.column5, approved_total=v.column6, "
                        f"accepted_windows=accepted_windows+v.column7{sql} "
                        "FROM (VALUES {values}) AS v "
                        "WHERE jobs.job=v.column1 AND jobs.last_seq=v.column2", rows)
            if moved != len(moves):
                raise StoreError("job state changed during verification; resubmit")
            db.execute_values(f"INSERT INTO proofs ({self._PROOF_COLS}) VALUES {{values}}",
                              proof_rows)

    def intake_memo(self, job: bytes) -> tuple[int, JobState | None, float]:
        """``intake_memos`` of one job."""
        return self.intake_memos([job])[job]

    def intake_memos(self, jobs: Sequence[bytes]
                     ) -> dict[bytes, tuple[int, JobState | None, float]]:
        """Per job: the highest seq stored for it (any decision; 0 if none), its stored state
        (``job_state``; None without a row) and its row's ``updated_at`` (0 without one), in
        one query per ``ROWS_PER_STATEMENT`` jobs: what the fast lane's memo is loaded from."""
        out: dict[bytes, tuple[int, JobState | None, float]] = {}
        unique = list(dict.fromkeys(jobs))
        for lo in range(0, len(unique), ROWS_PER_STATEMENT):
            chunk = unique[lo:lo + ROWS_PER_STATEMENT]
            rows = self._q(
                f"WITH k (job) AS (VALUES {values_list(len(chunk), 1)}) "
                "SELECT k.job, (SELECT COALESCE(MAX(seq), 0) FROM proofs WHERE job=k.job), "
                f"j.updated_at, {self._JOB_STATE_COLS} FROM k LEFT JOIN jobs j ON j.job=k.job",
                chunk)
            for r in rows:
                out[bytes(r[0])] = (int(r[1]), self._job_state(r[3:]), float(r[2] or 0))
        return out

    _stored_marks = False
    """Whether ``jobs.unsettled`` / ``unpaid`` are stored columns (SQLite, ``_SQLITE_MARKS``)
    rather than generated ones."""

    serial_writers = False
    """Whether ``batch()`` excludes every other writer of the database, of any process, until
    it ends (SQLite's ``BEGIN IMMEDIATE``), so what it reads stays true until it commits: the
    intake's fast lane runs only then (not on PostgreSQL, whose processes write together)."""

    def intake_memo_valid(self) -> bool:
        """Inside ``batch()``: True when no other connection has written the database since
        the previous call, so the intake's copies of job states (``fastlane.Memo``) still
        hold. False here; SQLite answers from ``PRAGMA data_version``."""
        return False

    def record_equivocation(self, auth: Authenticated, other_hash: bytes, now: float) -> bool:
        """Store the conflicting proof (rejected, reason 'equivocation') and the evidence pair
        with ``other_hash``, unless (job, seq) already holds ``MAX_PROOFS_PER_SEQ`` other
        proofs (one pair is all the slash needs). True when a new evidence pair was stored."""
        p = auth.proof
        a, b = sorted((auth.hash, other_hash))
        with self._tx() as db:
            db.serialize("proofs", p.job)
            hashes = {r[0] for r in db.execute("SELECT hash FROM proofs WHERE job=? AND seq=?",
                                               (p.job, p.seq))}
            if auth.hash not in hashes and len(hashes) >= MAX_PROOFS_PER_SEQ:
                return False
            self._upsert_proof(db, auth, "rejected", "equivocation", now)
            cur = db.execute("INSERT OR IGNORE INTO equivocations VALUES (?,?,?,?,?,NULL)",
                             (p.job, p.seq, a, b, now))
            return cur.rowcount == 1

    def equivocations(self) -> list[tuple[bytes, int, bytes, bytes, float, str | None]]:
        """Evidence pairs (job, seq, hash_a, hash_b, recorded_at, reported_signature)."""
        return [tuple(r) for r in self._q("SELECT * FROM equivocations ORDER BY recorded_at")]

    def equivocation_cases(self, *, open_only: bool = False) -> list[EquivocationCase]:
        """One case per (job, seq) with evidence (its first recorded pair), with the state of
        its slash report; ``open_only`` leaves out cases whose report is done or failed."""
        rows = self._q(
            "SELECT e.job, e.seq, e.hash_a, e.hash_b, e.recorded_at, r.status, r.signature, "
            "r.outcome, COALESCE(r.attempts, 0), r.last_error, COALESCE(r.next_attempt_at, 0) "
            "FROM equivocations e LEFT JOIN equivocation_reports r "
            "ON r.job = e.job AND r.seq = e.seq "
            "ORDER BY e.recorded_at, e.hash_a, e.hash_b")
        out: dict[tuple[bytes, int], EquivocationCase] = {}
        for r in rows:
            case = EquivocationCase(*r)
            if open_only and case.status in TERMINAL_REPORT_STATUSES:
                continue
            out.setdefault((case.job, case.seq), case)
        return list(out.values())

    def mark_equivocation_report(self, job: bytes, seq: int, status: str, now: float, *,
                                 signature: str | None = None, outcome: str | None = None,
                                 error: str | None = None,
                                 next_attempt_at: float | None = None,
                                 count_attempt: bool = False) -> None:
        """Record the slash report of (job, seq); done/failed are terminal, never reopened.
        ``done`` with a signature also stamps the evidence rows (``reported_signature``)."""
        if status not in REPORT_STATUSES:
            raise ValueError(f"unknown report status {status!r}")
        with self._tx() as db:
            db.execute(
                "INSERT INTO equivocation_reports (job, seq, status, signature, outcome, "
                "attempts, last_error, next_attempt_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT (job, seq) DO UPDATE SET status=excluded.status, "
                "signature=COALESCE(excluded.signature, equivocation_reports.signature), "
                "outcome=COALESCE(excluded.outcome, equivocation_reports.outcome), "
                "attempts=equivocation_reports.attempts+?, "
                "last_error=COALESCE(excluded.last_error, equivocation_reports.last_error), "
                "next_attempt_at=COALESCE(?, equivocation_reports.next_attempt_at), "
                "updated_at=excluded.updated_at "
                "WHERE equivocation_reports.status NOT IN ('done', 'failed')",
                (job, seq, status, signature, outcome, 1 if count_attempt else 0, error,
                 next_attempt_at or 0.0, now, 1 if count_attempt else 0, next_attempt_at))
            if status == "done" and signature is not None:
                db.execute("UPDATE equivocations SET reported_signature=? WHERE job=? AND seq=?",
                           (signature, job, seq))

    def missed_windows(self, job: bytes) -> list[int]:
        return [r[0] for r in self._q("SELECT seq FROM missed_windows WHERE job=? ORDER BY seq",
                                      (job,))]

    def update_chain_info(self, job: bytes, info: ChainJobInfo, now: float) -> None:
        """Remember the job's chain facts (status, escrow, settled seq, terms, committee)
        read at ``now``; the chain's last seq also covers the job's windows up to it."""
        self.update_chain_infos([(job, info)], now)

    def update_chain_infos(self, items: Sequence[tuple[bytes, ChainJobInfo]],
                           now: float) -> None:
        """``update_chain_info`` of several jobs, in one statement."""
        with self._tx() as db:
            db.executemany(
                "UPDATE jobs SET chain_status=?, chain_last_seq=?, settled_seconds=?, "
                "rate_per_second=?, escrow_remaining=?, ended_at=?, window_seconds=?, "
                "chain_claimed_seconds=?, chain_last_window_end=?, started_at=?, committee=?, "
                "quorum=?, max_skew_seconds=?, max_missed_windows=?, chain_checked_at=?, "
                "covered_seq=MAX(covered_seq, ?), paid_seq=MAX(paid_seq, ?) "
                "WHERE job=?", [self._chain_params(info, now) + (job,) for job, info in items])

    @staticmethod
    def _chain_params(info: ChainJobInfo, now: float) -> tuple:
        """The values of ``jobs.chain_status`` .. ``chain_checked_at`` (``_CHAIN_COLS``)
        for ``info`` read at ``now``, then the chain's last seq twice (it covers and pays the
        job's windows up to it: ``covered_seq``, ``paid_seq``)."""
        return (info.status, info.last_seq, info.paid_seconds, info.rate_per_second,
                info.escrow_remaining, info.ended_at, info.window_seconds,
                info.claimed_seconds, info.last_window_end, info.started_at,
                info.committee_json, info.quorum,
                info.max_skew_seconds, info.max_missed_windows, now, info.last_seq,
                info.last_seq)

    _CHAIN_COLS = ("chain_status, chain_last_seq, settled_seconds, rate_per_second, "
                   "escrow_remaining, ended_at, window_seconds, chain_claimed_seconds, "
                   "chain_last_window_end, started_at, committee, quorum, max_skew_seconds, "
                   "max_missed_windows, chain_checked_at")

    @staticmethod
    def _chain(cols: Sequence) -> tuple[ChainJobInfo | None, float]:
        (st, cls, paid, rate, esc, ended, ws, claimed, lwe, started, committee, quorum, skew,
         missed, checked) = cols
        if st is None:
            return None, float(checked)
        members = tuple(bytes.fromhex(m) for m in json.loads(committee or "[]"))
        return ChainJobInfo(st, cls, paid, rate, esc, ended, ws, claimed, lwe, started,
                            members, quorum, skew, missed), float(checked)

    def chain_info(self, job: bytes) -> tuple[ChainJobInfo | None, float]:
        """The job's chain facts as last stored and when they were read (None, 0: never)."""
        rows = self._q(f"SELECT {self._CHAIN_COLS} FROM jobs WHERE job=?", (job,))
        return self._chain(rows[0]) if rows else (None, 0.0)

    def jobs(self, *, open_only: bool = False) -> list[JobRow]:
        """Every job with accepted proofs, with its newest accepted window and chain facts;
        ``open_only``: only those not known to have ended on chain (not in
        ``TERMINAL_CHAIN_STATUSES``)."""
        where = (f" WHERE chain_status IS NULL OR chain_status NOT IN {_TERMINAL_SQL}"
                 if open_only else "")
        rows = self._q(f"SELECT job, last_seq, cumulative_seconds, last_window_end, "
                       f"approved_total, {self._CHAIN_COLS} FROM jobs{where} ORDER BY job")
        out = []
        for r in rows:
            chain, checked = self._chain(r[5:])
            out.append(JobRow(r[0], r[1], r[2], r[3], r[4], chain, checked))
        return out

    # ------------------------------------------------------------------ settlement

    def settle_candidates(self) -> list[SettleCandidate]:
        """Jobs whose newest accepted seq is above every intent's seq and the chain's last_seq
        (``covered_seq``), unless the chain says they ended (``TERMINAL_CHAIN_STATUSES``:
        nothing of them can settle any more).

        Read along the ``jobs_unsettled`` index, which holds only such jobs, in pages of
        ``SETTLE_PAGE`` jobs (one short statement each, so the intake never waits for a whole
        pass): the cost grows with the active jobs and their unsettled windows, never with
        finished ones."""
        # A failed intent also covers its receipt: a terminal failure is never retried with
        # the same receipt (only a newer accepted receipt makes a new intent).
        latest_cols = ", ".join(f"l.{c.strip()}" for c in self._PROOF_COLS.split(","))
        sql = ("SELECT j.cumulative_seconds, j.covered_seq, "
               "(SELECT COUNT(*) FROM proofs u WHERE u.job=j.job AND u.decision='accepted' "
               "AND u.seq>j.covered_seq), "
               "(SELECT u.window_end FROM proofs u WHERE u.job=j.job AND u.decision='accepted' "
               "AND u.seq>j.covered_seq ORDER BY u.seq LIMIT 1), "
               f"{self._CHAIN_COLS}, {latest_cols} "
               # CROSS JOIN: SQLite keeps jobs (its partial index) as the outer loop.
               "FROM jobs j CROSS JOIN proofs l WHERE l.job=j.job AND l.seq=j.last_seq "
               "AND l.decision='accepted' AND j.unsettled=1 AND (j.chain_status IS NULL "
               f"OR j.chain_status NOT IN {_TERMINAL_SQL}) AND j.job>? ORDER BY j.job LIMIT ?")
        out: list[SettleCandidate] = []
        n_chain = self._CHAIN_COLS.count(",") + 1
        after = b""
        while True:
            rows = self._q(sql, (after, self.SETTLE_PAGE))
            for r in rows:
                cum, covered, unsettled, oldest_end = r[:4]
                chain, checked = self._chain(r[4:4 + n_chain])
                latest = StoredProof(*r[4 + n_chain:])
                out.append(SettleCandidate(latest.job, latest, int(covered), int(unsettled),
                                           int(oldest_end), cum, chain, checked,
                                           int(latest.approved_total or 0)))
            if len(rows) < self.SETTLE_PAGE:
                return out
            after = out[-1].job

    _INTENT_COLS = ("id, job, seq_from, seq_to, cumulative_seconds, window_end, proof_hash, "
                    "worker_key, receipt_signature, status, signature, attempts, last_error, "
                    "next_attempt_at, created_at, updated_at, approved_seconds, attestations")

    @staticmethod
    def _intent(row: Sequence) -> Intent:
        *head, approved, atts = row
        pairs = tuple((bytes.fromhex(a), bytes.fromhex(s)) for a, s in json.loads(atts or "[]"))
        return Intent(*head, approved_seconds=int(head[4] if approved is None else approved),
                      attestations=pairs)

    def add_intent(self, proof: StoredProof, seq_from: int, now: float,
                   approved_seconds: int | None = None,
                   attestations: Sequence[tuple[bytes, bytes]] = ()) -> Intent:
        """Durably record the intent to settle ``proof``'s receipt with ``approved_seconds``
        (default: this validator's total at it) and the other members' ``attestations``
        (status 'intended')."""
        approved = (int(proof.approved_total or 0) if approved_seconds is None
                    else int(approved_seconds))
        atts = json.dumps([[bytes(a).hex(), bytes(sig).hex()] for a, sig in attestations])
        with self._tx() as db:
            db.serialize("intents", proof.job)
            rows = db.execute(
                "INSERT INTO intents (job, seq_from, seq_to, cumulative_seconds, window_end, "
                "proof_hash, worker_key, receipt_signature, status, created_at, updated_at, "
                "approved_seconds, attestations) VALUES (?,?,?,?,?,?,?,?,'intended',?,?,?,?) "
                f"RETURNING {self._INTENT_COLS}",
                (proof.job, seq_from, proof.seq, proof.cumulative_seconds, proof.window_end,
                 proof.hash, proof.worker_key, proof.receipt_signature, now, now, approved,
                 atts)).fetchall()
            db.execute("UPDATE jobs SET covered_seq=MAX(covered_seq, ?) WHERE job=?",
                       (proof.seq, proof.job))
        return self._intent(rows[0])

    def open_intents(self) -> list[Intent]:
        return [self._intent(r) for r in self._q(
            f"SELECT {self._INTENT_COLS} FROM intents WHERE status IN ('intended','sent') "
            "ORDER BY id")]

    def intents(self, job: bytes | None = None) -> list[Intent]:
        if job is None:
            rows = self._q(f"SELECT {self._INTENT_COLS} FROM intents ORDER BY id")
        else:
            rows = self._q(f"SELECT {self._INTENT_COLS} FROM intents WHERE job=? ORDER BY id",
                           (job,))
        return [self._intent(r) for r in rows]

    def mark_intent(self, intent_id: int, status: str, now: float, *,
                    signature: str | None = None, error: str | None = None,
                    next_attempt_at: float | None = None,
                    count_attempt: bool = False) -> None:
        """Move an intent to ``status``; confirmed/failed are terminal and never reopened."""
        if status not in INTENT_STATUSES:
            raise ValueError(f"unknown intent status {status!r}")
        with self._tx() as db:
            cur = db.execute(
                "UPDATE intents SET status=?, signature=COALESCE(?, signature), "
                "last_error=COALESCE(?, last_error), next_attempt_at=COALESCE(?, next_attempt_at),"
                " attempts=attempts+?, updated_at=? "
                "WHERE id=? AND status IN ('intended','sent')",
                (status, signature, error, next_attempt_at, 1 if count_attempt else 0, now,
                 intent_id))
            if status == "confirmed" and cur.rowcount == 1:
                db.execute("UPDATE jobs SET paid_seq=MAX(paid_seq, (SELECT seq_to FROM intents "
                           "WHERE id=?)) WHERE job=(SELECT job FROM intents WHERE id=?)",
                           (intent_id, intent_id))

    # ------------------------------------------------------------------ dashboard reads

    def recent_windows(self, job: bytes, limit: int) -> list[StoredProof]:
        """The stored proofs of ``job``'s newest ``limit`` seqs, oldest first, one per seq:
        at an equivocated seq the accepted one, else the first received (as ``head``).
        Accepted and rejected proofs alike; ``[]`` when nothing of the job is stored. Reads
        at most ``MAX_PROOFS_PER_SEQ * limit`` rows along the primary key, whatever the
        job's length. ValueError unless ``limit >= 1``."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        rows = self._q(f"SELECT {self._PROOF_COLS} FROM proofs WHERE job=? "
                       "ORDER BY seq DESC, decision='accepted' DESC, received_at, hash LIMIT ?",
                       (job, MAX_PROOFS_PER_SEQ * limit))
        out: list[StoredProof] = []
        for r in rows:
            sp = StoredProof(*r)
            if out and out[-1].seq == sp.seq:
                continue
            out.append(sp)
            if len(out) == limit:
                break
        out.reverse()
        return out

    def recent_intents(self, job: bytes | None, limit: int) -> list[Intent]:
        """The newest ``limit`` settlement intents (of ``job``, or of every job when None),
        newest first, whatever their status. ValueError unless ``limit >= 1``."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if job is None:
            rows = self._q(f"SELECT {self._INTENT_COLS} FROM intents ORDER BY id DESC LIMIT ?",
                           (limit,))
        else:
            rows = self._q(f"SELECT {self._INTENT_COLS} FROM intents WHERE job=? "
                           "ORDER BY id DESC LIMIT ?", (job, limit))
        return [self._intent(r) for r in rows]

    # ------------------------------------------------------------------ attestations

    _GIVEN_COLS = "job, seq, approved_seconds, proof_hash, signature, requester, signed_at"

    def given_attestation(self, job: bytes, seq: int) -> GivenAttestation | None:
        """The value this validator signed for (job, seq), if any."""
        rows = self._q(f"SELECT {self._GIVEN_COLS} FROM attestations_given WHERE job=? AND seq=?",
                       (job, seq))
        return GivenAttestation(*rows[0]) if rows else None

    def record_given_attestation(self, att: GivenAttestation) -> GivenAttestation:
        """Store ``att`` unless (job, seq) already holds one; returns what is stored (the
        earlier one if there was one). On disk before it returns, so a signature that leaves
        the process is never followed by a different value for the same (job, seq), also
        after a crash."""
        with self._tx() as db:
            db.execute(f"INSERT OR IGNORE INTO attestations_given ({self._GIVEN_COLS}) "
                       "VALUES (?,?,?,?,?,?,?)",
                       (att.job, att.seq, att.approved_seconds, att.proof_hash, att.signature,
                        att.requester, att.signed_at))
            row = db.execute(f"SELECT {self._GIVEN_COLS} FROM attestations_given "
                             "WHERE job=? AND seq=?", (att.job, att.seq)).fetchone()
        return GivenAttestation(*row)

    _RECEIVED_COLS = ("job, seq, member, approved_seconds, cumulative_seconds, window_end, "
                      "proof_hash, signature, received_at")

    def record_received_attestation(self, att: ReceivedAttestation) -> bool:
        """Keep a valid attestation of another member (evidence). True when it makes a new
        validator-equivocation case: the member had signed a different (receipt, approved)
        for the same (job, seq)."""
        with self._tx() as db:
            db.serialize("attestations_received", att.job, att.seq, att.member)
            db.execute(f"INSERT OR IGNORE INTO attestations_received ({self._RECEIVED_COLS}) "
                       "VALUES (?,?,?,?,?,?,?,?,?)",
                       (att.job, att.seq, att.member, att.approved_seconds,
                        att.cumulative_seconds, att.window_end, att.proof_hash, att.signature,
                        att.received_at))
            n = db.execute("SELECT COUNT(*) FROM attestations_received WHERE job=? AND seq=? "
                           "AND member=?", (att.job, att.seq, att.member)).fetchone()[0]
            if n < 2:
                return False
            cur = db.execute("INSERT OR IGNORE INTO validator_equivocations (job, seq, member, "
                             "recorded_at, updated_at) VALUES (?,?,?,?,?)",
                             (att.job, att.seq, att.member, att.received_at, att.received_at))
            return cur.rowcount == 1

    def received_attestations(self, job: bytes, seq: int,
                              member: bytes | None = None) -> list[ReceivedAttestation]:
        """Attestations received for (job, seq) (of ``member`` only, if given), oldest first."""
        sql = f"SELECT {self._RECEIVED_COLS} FROM attestations_received WHERE job=? AND seq=?"
        args: tuple = (job, seq)
        if member is not None:
            sql += " AND member=?"
            args += (member,)
        return [ReceivedAttestation(*r) for r in self._q(sql + " ORDER BY received_at, "
                                                         "approved_seconds", args)]

    def validator_equivocation_cases(self, *, open_only: bool = False
                                     ) -> list[ValidatorEquivocationCase]:
        """Members caught signing two values for one (job, seq), with their report state."""
        sql = ("SELECT job, seq, member, recorded_at, status, signature, outcome, attempts, "
               "last_error, next_attempt_at FROM validator_equivocations")
        if open_only:
            sql += " WHERE status IS NULL OR status NOT IN ('done', 'failed')"
        return [ValidatorEquivocationCase(*r) for r in self._q(sql + " ORDER BY recorded_at")]

    def mark_validator_equivocation(self, job: bytes, seq: int, member: bytes, status: str,
                                    now: float, *, signature: str | None = None,
                                    outcome: str | None = None, error: str | None = None,
                                    next_attempt_at: float | None = None,
                                    count_attempt: bool = False) -> None:
        """Record the report of (job, seq, member); done/failed are terminal."""
        if status not in REPORT_STATUSES:
            raise ValueError(f"unknown report status {status!r}")
        with self._tx() as db:
            db.execute(
                "UPDATE validator_equivocations SET status=?, "
                "signature=COALESCE(?, signature), outcome=COALESCE(?, outcome), "
                "attempts=attempts+?, last_error=COALESCE(?, last_error), "
                "next_attempt_at=COALESCE(?, next_attempt_at), updated_at=? "
                "WHERE job=? AND seq=? AND member=? "
                "AND (status IS NULL OR status NOT IN ('done', 'failed'))",
                (status, signature, outcome, 1 if count_attempt else 0, error, next_attempt_at,
                 now, job, seq, member))

    # ------------------------------------------------------------------ downtime

    _DOWNTIME_COLS = ("job, last_proof_window_end, status, signature, outcome, attempts, "
                      "last_error, next_attempt_at, updated_at")

    def downtime_report(self, job: bytes, last_proof_window_end: int) -> DowntimeReport | None:
        rows = self._q(f"SELECT {self._DOWNTIME_COLS} FROM downtime_reports WHERE job=? "
                       "AND last_proof_window_end=?", (job, last_proof_window_end))
        return DowntimeReport(*rows[0]) if rows else None

    def downtime_reports(self) -> list[DowntimeReport]:
        return [DowntimeReport(*r) for r in self._q(
            f"SELECT {self._DOWNTIME_COLS} FROM downtime_reports ORDER BY updated_at")]

    def mark_downtime_report(self, job: bytes, last_proof_window_end: int, status: str,
                             now: float, *, signature: str | None = None,
                             outcome: str | None = None, error: str | None = None,
                             next_attempt_at: float | None = None,
                             count_attempt: bool = False) -> None:
        """Record the downtime report of (job, last_proof_window_end); done/failed are
        terminal, never reopened."""
        if status not in REPORT_STATUSES:
            raise ValueError(f"unknown report status {status!r}")
        n = 1 if count_attempt else 0
        with self._tx() as db:
            db.execute(
                f"INSERT INTO downtime_reports ({self._DOWNTIME_COLS}) VALUES (?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT (job, last_proof_window_end) DO UPDATE SET status=excluded.status, "
                "signature=COALESCE(excluded.signature, downtime_reports.signature), "
                "outcome=COALESCE(excluded.outcome, downtime_reports.outcome), "
                "attempts=downtime_reports.attempts+?, "
                "last_error=COALESCE(excluded.last_error, downtime_reports.last_error), "
                "next_attempt_at=COALESCE(?, downtime_reports.next_attempt_at), "
                "updated_at=excluded.updated_at "
                "WHERE downtime_reports.status NOT IN ('done', 'failed')",
                (job, last_proof_window_end, status, signature, outcome, n, error,
                 next_attempt_at or 0.0, now, n, next_attempt_at))

    # ------------------------------------------------------------------ meta

    def set_meta(self, key: str, value: str) -> None:
        if key == "schema_version":
            raise ValueError("schema_version is managed by the store")
        with self._tx() as db:
            db.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                       "value=excluded.value", (key, value))

    def get_meta(self, key: str) -> str | None:
        rows = self._q("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else None

    # ------------------------------------------------------------------ status

    def summary(self) -> dict[str, object]:
        """Counts for /health, /metrics and ``gpum-validator status``. Cheap whatever the
        database holds: row counts come from ``counters`` (kept by triggers), the last
        settlement from an index, ``pending_windows`` from the unpaid jobs only; only the
        evidence and report tables (rare events) are counted directly."""

        def grouped(db: Conn, sql: str) -> dict[str, int]:
            return {k: as_int(v) for k, v in db.execute(sql).fetchall()}

        with self._read() as db:
            counts = grouped(db, "SELECT name, SUM(value) FROM counters GROUP BY name")
            last = db.execute("SELECT MAX(updated_at) FROM intents "
                              "WHERE status='confirmed'").fetchone()[0]
            out: dict[str, object] = {
                "schema_version": SCHEMA_VERSION,
                "jobs": counts.get("jobs", 0),
                "proofs": {d: counts[f"proofs.{d}"] for d in ("accepted", "rejected")
                           if counts.get(f"proofs.{d}")},
                "intents": {s: counts.get(f"intents.{s}", 0) for s in INTENT_STATUSES},
                "missed_windows": counts.get("missed_windows", 0),
                "equivocations": as_int(db.execute(
                    "SELECT COUNT(*) FROM equivocations").fetchone()[0]),
                "equivocation_reports": grouped(
                    db, "SELECT status, COUNT(*) FROM equivocation_reports GROUP BY status"),
                "attestations_signed": counts.get("attestations_given", 0),
                "attestations_received": counts.get("attestations_received", 0),
                "validator_equivocations": grouped(
                    db, "SELECT COALESCE(status, 'new'), COUNT(*) FROM validator_equivocations "
                    "GROUP BY 1"),
                "downtime_reports": grouped(
                    db, "SELECT status, COUNT(*) FROM downtime_reports GROUP BY status"),
                "last_settlement_at": last,
                "pending_windows": self._pending_windows(db),
            }
            rewards = db.execute("SELECT value FROM meta WHERE key='rewards'").fetchone()
        out["rewards"] = json.loads(rewards[0] if rewards else "null")
        # The keys in their historical order.
        order = ("schema_version", "jobs", "proofs", "intents", "missed_windows",
                 "equivocations", "equivocation_reports", "attestations_signed",
                 "attestations_received", "validator_equivocations", "downtime_reports",
                 "rewards", "last_settlement_at", "pending_windows")
        return {k: out[k] for k in order}

    def pending_windows(self) -> int:
        """Accepted windows not yet covered by a confirmed settlement or the chain (above the
        job's ``paid_seq``); reads the unpaid jobs only (index ``jobs_unpaid``)."""
        with self._read() as db:
            return self._pending_windows(db)

    @staticmethod
    def _pending_windows(db: Conn) -> int:
        return as_int(db.execute(
            "SELECT COUNT(*) FROM jobs j CROSS JOIN proofs p WHERE p.job=j.job "
            "AND p.decision='accepted' AND p.seq>j.paid_seq AND j.unpaid=1"
            ).fetchone()[0])

    # ------------------------------------------------------------------ retention

    def mark_job_closed(self, job: bytes, now: float) -> None:
        """Record that the job's account is gone from the chain (status ``closed``): nothing
        of it settles any more, and ``prune`` may delete it after the retention period."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET chain_status='closed', chain_checked_at=? WHERE job=?",
                       (now, job))

    def stale_open_jobs(self, before: float, limit: int) -> list[bytes]:
        """Up to ``limit`` jobs not known to have ended on chain, with no proof accepted and
        no chain read since ``before``, least recently read first: the ones whose end (or
        closed account) nothing else would notice (``retention.Pruner`` re-reads them)."""
        return [r[0] for r in self._q(
            "SELECT job FROM jobs WHERE (chain_status IS NULL "
            f"OR chain_status NOT IN {_TERMINAL_SQL}) AND updated_at<? AND chain_checked_at<? "
            "ORDER BY chain_checked_at LIMIT ?", (before, before, limit))]

    _PRUNABLE = (
        f"j.chain_status IN {_TERMINAL_SQL} AND j.ended_at<? AND j.updated_at<? "
        "AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.job=j.job "
        "AND i.status IN ('intended','sent')) "
        "AND NOT EXISTS (SELECT 1 FROM equivocations e WHERE e.job=j.job AND NOT EXISTS "
        "(SELECT 1 FROM equivocation_reports r WHERE r.job=e.job AND r.seq=e.seq "
        "AND r.status IN ('done','failed'))) "
        "AND NOT EXISTS (SELECT 1 FROM validator_equivocations v WHERE v.job=j.job "
        "AND (v.status IS NULL OR v.status NOT IN ('done','failed'))) "
        "AND NOT EXISTS (SELECT 1 FROM downtime_reports d WHERE d.job=j.job "
        "AND d.status NOT IN ('done','failed'))")
    """A job ``prune`` may delete (parameters: ``before`` twice): ended on chain, ended and
    last written before the cutoff, no open intent and no report that is not finished."""

    _PRUNE_STEPS = (
        ("proofs",
         ("DELETE FROM proofs WHERE job=? AND (seq, hash) IN (SELECT seq, hash FROM proofs p "
          "WHERE p.job=? AND NOT EXISTS (SELECT 1 FROM equivocations e WHERE e.job=p.job "
          "AND e.seq=p.seq) LIMIT ?)")),
        ("missed_windows",
         ("DELETE FROM missed_windows WHERE job=? AND seq IN (SELECT seq FROM missed_windows "
          "WHERE job=? LIMIT ?)")),
        ("intents",
         ("DELETE FROM intents WHERE job=? AND id IN (SELECT id FROM intents WHERE job=? "
          "AND status IN ('confirmed','failed') LIMIT ?)")),
        ("attestations_received",
         ("DELETE FROM attestations_received WHERE job=? AND (seq, member, approved_seconds, "
          "proof_hash) IN (SELECT seq, member, approved_seconds, proof_hash FROM "
          "attestations_received a WHERE a.job=? AND NOT EXISTS (SELECT 1 FROM "
          "validator_equivocations v WHERE v.job=a.job AND v.seq=a.seq AND v.member=a.member) "
          "LIMIT ?)")),
        ("downtime_reports",
         ("DELETE FROM downtime_reports WHERE job=? AND last_proof_window_end IN (SELECT "
          "last_proof_window_end FROM downtime_reports WHERE job=? "
          "AND status IN ('done','failed') LIMIT ?)")),
    )
    """What ``prune`` deletes of a job, in this order (one statement each: parameters job,
    job, at most how many rows)."""

    def prune(self, before: float, *, batch_rows: int = 200,
              max_seconds: float | None = None,
              on_batch: Callable[[float], None] | None = None,
              pause: float = 0.002) -> dict[str, int]:
        """Delete what is no longer needed of the jobs that ended on chain
        (``TERMINAL_CHAIN_STATUSES``) before ``before`` and were last written before it, and
        that no open intent and no unfinished report (equivocation, validator equivocation,
        downtime) needs: their proofs, missed windows, intents, received attestations that
        are not evidence, finished downtime reports, then the job row.

        Kept: the proofs at every seq with equivocation evidence, the evidence rows and their
        reports, the attestations of validator-equivocation cases, and every attestation this
        validator gave (``attestations_given``, small: its guard against signing twice).

        Works in transactions of at most ``batch_rows`` deletions each (of one or several
        jobs, each re-checked as still prunable inside the transaction), so no other store
        call waits long, with ``pause`` seconds between them so waiting calls go first;
        ``on_batch`` gets each transaction's duration in ms. Stops after ``max_seconds``
        (None: when done). Returns the rows deleted per table."""
        if batch_rows < 1:
            raise ValueError("batch_rows must be at least 1")
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        deleted = dict.fromkeys(["jobs"] + [t for t, _ in self._PRUNE_STEPS], 0)
        seen: set[bytes] = set()
        while True:
            queue = [r[0] for r in self._q(
                f"SELECT j.job FROM jobs j WHERE {self._PRUNABLE} ORDER BY j.ended_at LIMIT ?",
                (before, before, len(seen) + 64)) if r[0] not in seen]
            if not queue:
                break
            while queue:
                if deadline is not None and time.monotonic() >= deadline:
                    return deleted
                t0 = time.perf_counter()
                room = batch_rows
                with self._tx() as db:
                    while queue and room > 0:
                        done, used = self._prune_some(db, queue[0], before, room, deleted)
                        room -= used
                        if done:
                            seen.add(queue.pop(0))
                if on_batch is not None:
                    on_batch((time.perf_counter() - t0) * 1000)
                time.sleep(pause)
        self._compact_counters()
        return deleted

    def _prune_some(self, db: Conn, job: bytes, before: float, room: int,
                    deleted: dict[str, int]) -> tuple[bool, int]:
        """Delete at most ``room`` rows of ``job`` in the open transaction: (whether the job
        is done with, rows deleted). A job no longer prunable is left as it is (done)."""
        if not db.execute(f"SELECT 1 FROM jobs j WHERE j.job=? AND {self._PRUNABLE}",
                          (job, before, before)).fetchone():
            return True, 0
        used = 0
        for table, delete in self._PRUNE_STEPS:
            left = room - used
            if left <= 0:
                return False, used
            n = max(0, db.execute(delete, (job, job, left)).rowcount)
            deleted[table] += n
            used += n
            if n == left:
                return False, used  # maybe more of this table: the next transaction
        cur = db.execute("DELETE FROM jobs WHERE job=?", (job,))
        deleted["jobs"] += max(0, cur.rowcount)
        return True, used + 1

    def _compact_counters(self) -> None:
        """Fold the counters' shards (PostgreSQL: one per connection); nothing on SQLite."""

    def ping(self) -> bool:
        try:
            self._q("SELECT 1")
            return True
        except StoreError:
            return False

    def write_probe(self, now: float) -> str | None:
        """Write and commit one small row (``meta.write_probe``, durably): None when the
        database takes writes, else why not (a full disk, a read-only file, a failed
        fsync)."""
        try:
            self.set_meta("write_probe", repr(float(now)))
            return None
        except StoreError as e:
            return str(e)



def _enter_wal(db: sqlite3.Connection, timeout: float = 30.0) -> None:
    """``PRAGMA journal_mode=WAL``, retried while another connection holds the file: SQLite
    answers this pragma "database is locked" at once, without the busy handler, when several
    processes open a new database together (the first one switching it to WAL). Raises the
    last sqlite3 error after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _sqlite_statements(script: str) -> list[str]:
    """The statements of a script (a trigger's ``BEGIN ... END`` stays whole)."""
    out, buf = [], ""
    for piece in script.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n;"):
                out.append(buf.strip())
            buf = ""
    return out


SQLITE_CACHE_KIB = 65_536
"""Page cache of the SQLite store's connection (``PRAGMA cache_size``), in KiB."""


class SQLiteStore(SQLStore):
    """``Store`` on one SQLite file (WAL; every transaction fsynced, ``make_durable``). One
    connection is shared by the HTTP threads and the settlement thread under a lock (SQLite
    serialises writers anyway)."""

    dialect = SQLITE
    serial_writers = True
    _stored_marks = True

    def __init__(self, path: str | Path, *, background_checkpoints: bool = False) -> None:
        """``background_checkpoints``: WAL checkpoints run on a thread of their own
        (``wal.WalCheckpointer``) instead of inside the commit that fills the WAL; for the
        long-running validator (``gpum-validator run``)."""
        self.path = Path(path)
        self._wal_fd: int | None = None
        """The WAL file, opened at the first ``make_durable`` (it exists from the first write on,
        and SQLite removes it only once every connection to the file is closed)."""
        self._sync_failed: str | None = None
        self._sync_lock = threading.Lock()
        self._committed = 0
        """Transactions committed that changed a row (``make_durable``)."""
        self._synced = 0
        """Of them, how many an fsync has made durable."""
        try:
            self._db = sqlite3.connect(str(self.path), isolation_level=None,
                                       check_same_thread=False, timeout=30,
                                       cached_statements=STATEMENT_CACHE)
            _enter_wal(self._db)
            # NORMAL: COMMIT does not fsync the WAL; ``make_durable`` does after every
            # transaction (the durability of FULL, see there).
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            # 64 MiB of page cache instead of 2 MiB: the proofs' indexes are keyed by job, so
            # a round's inserts touch pages all over them (measured: ~15 us less CPU a proof).
            self._db.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
            self._conn = Conn(self._db, SQLITE)
            self._migrate()
            self._committed += 1  # the migration's statements commit on their own
            self.make_durable()
        except sqlite3.Error as e:
            raise StoreError(f"cannot open database {self.path}: {e}; check the path exists "
                             "and is writable (--db)") from None
        self._lock = threading.RLock()
        self._checkpointer: WalCheckpointer | None = None
        if background_checkpoints:
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._checkpointer = WalCheckpointer(self.path, lambda: self._lock)
            self._checkpointer.start()
        self._batch_depth = 0
        """> 0 while the thread holding ``_lock`` is inside ``batch()``."""
        self._data_version: int | None = None
        """``PRAGMA data_version`` at the previous ``intake_memo_valid``."""
        self.lane_memo: dict[bytes, Any] = {}
        """The intake's fast-lane copies of stored job states (``fastlane.Memo``), kept with
        the connection whose writes they follow: every intake on this store shares them."""

    def intake_memo_valid(self) -> bool:
        """``PRAGMA data_version`` changes exactly when another connection (another
        process, or another ``SQLiteStore`` on the file) commits; this connection's own
        writes, the settlement thread's included, never change it. Inside ``batch()`` (``BEGIN
        IMMEDIATE``) no other writer can commit until the batch ends."""
        with self._tx() as db:
            version = db.execute("PRAGMA data_version").fetchone()[0]
        valid, self._data_version = version == self._data_version, version
        return valid

    def _migrate(self) -> None:
        self._db.executescript(_SCHEMA + _SCHEMA_V3 + _READ_INDEXES)  # idempotent; commits
        self._db.execute("BEGIN IMMEDIATE")
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            rebuild = False
            if row is None:
                self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)",
                                 (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise StoreError(f"database {self.path} has schema version {row[0]}, newer "
                                 f"than this validator ({SCHEMA_VERSION}); upgrade gpum-validator")
            elif int(row[0]) < SCHEMA_VERSION:
                self._upgrade(int(row[0]))
                self._db.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                                 (str(SCHEMA_VERSION),))
                rebuild = int(row[0]) < 4
            self._store_marks()
            for stmt in _sqlite_statements(_SCHEMA_V4 + _sqlite_count_triggers()
                                           + _SQLITE_MARKS):
                self._db.execute(stmt)
            if rebuild:  # v3 -> v4: the jobs' covered/paid seqs and the counters
                self._rebuild_derived(self._conn)
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def _store_marks(self) -> None:
        """``jobs.unsettled`` / ``jobs.unpaid`` as stored columns (``_SQLITE_MARKS``; their
        triggers are created right after): the generated ones of ``_SCHEMA`` (a new
        database) or of schema v4 are replaced, with their partial indexes, which
        ``_SCHEMA_V4`` creates again; a database of v3 or older gets them. Values are
        computed once here; from then on the triggers keep them. No schema bump: the
        triggers live in the database, so a validator of before this change keeps them
        right too."""
        hidden = {r[1]: r[6] for r in self._db.execute("PRAGMA table_xinfo(jobs)")}
        if hidden.get("unsettled") == 0 and hidden.get("unpaid") == 0:
            return  # stored already
        self._db.execute("DROP INDEX IF EXISTS jobs_unsettled")
        self._db.execute("DROP INDEX IF EXISTS jobs_unpaid")
        for col in ("unsettled", "unpaid"):
            if col in hidden:
                self._db.execute(f"ALTER TABLE jobs DROP COLUMN {col}")
            self._db.execute(f"ALTER TABLE jobs ADD COLUMN {col} INTEGER NOT NULL DEFAULT 0")
        self._db.execute(f"UPDATE jobs SET {_MARKS}")

    def _add_column(self, table: str, column: str) -> None:
        name = column.split()[0]
        have = {r[1] for r in self._db.execute(f"PRAGMA table_xinfo({table})")}
        if name not in have:
            self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")

    def _upgrade(self, version: int) -> None:
        """Migrate a database of schema ``version`` in place (inside the open transaction)."""
        if version < 2:
            # v1 -> v2: the job's window length (from its terms) is kept for the policy.
            self._add_column("jobs", "window_seconds INTEGER NOT NULL DEFAULT 0")
        if version < 3:
            # v2 -> v3 (approvals): before issue 8 a validator accepted only an unbroken
            # cumulative chain, so its approved total at a seq was the cumulative claim.
            for table, column in _V3_COLUMNS:
                self._add_column(table, column)
            self._db.execute("UPDATE proofs SET approved_total=cumulative_seconds "
                             "WHERE decision='accepted' AND approved_total IS NULL")
            self._db.execute("UPDATE jobs SET approved_total=cumulative_seconds")
            self._db.execute("UPDATE intents SET approved_seconds=cumulative_seconds "
                             "WHERE approved_seconds IS NULL")
        if version < 4:
            # v3 -> v4 (issue 9): markers of the settle pass; filled by _rebuild_derived.
            for table, column in _V4_COLUMNS:
                self._add_column(table, column)
        # The next settlement pass re-reads every job's chain facts (terms, committee).
        self._db.execute("UPDATE jobs SET chain_checked_at=0")

    @contextmanager
    def batch(self, durable: bool = True) -> Iterator[None]:
        """Group commit: every write this thread makes inside the block joins one transaction,
        committed when the block exits and rolled back if it raises. With ``durable`` the
        block returns once the transaction is on disk (``make_durable``); without, once it
        is committed, and the caller calls ``make_durable`` before answering anyone for it
        (the intake's group commit lets the next group start in between). Other threads'
        store calls wait until the COMMIT, not the fsync. Nested use joins the outer batch."""
        with self._lock:
            if self._batch_depth:
                self._batch_depth += 1
                try:
                    yield
                finally:
                    self._batch_depth -= 1
                return
            with self._transaction(durable=False):
                self._batch_depth = 1
                try:
                    yield
                finally:
                    self._batch_depth = 0
        if durable:
            self.make_durable()

    @contextmanager
    def _transaction(self, durable: bool = True) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` .. ``COMMIT``, then (``durable``) ``make_durable``, rolled back
        if the block raises; a database error becomes StoreError. The caller holds
        ``_lock``."""
        if self._sync_failed is not None:
            raise StoreError(self._sync_failed)
        before = self._db.total_changes
        try:
            self._db.execute("BEGIN IMMEDIATE")
            yield
            self._db.execute("COMMIT")
            if self._db.total_changes != before:
                self._committed += 1
        except sqlite3.Error as e:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise StoreError(f"database {self.path}: {e}") from None
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        if durable:
            self.make_durable()

    def make_durable(self) -> None:
        """Return once every transaction committed so far is on disk: one fsync of the WAL,
        or none when a call that began after them already made one.

        The connection runs ``synchronous=NORMAL``, under which SQLite's COMMIT does not
        fsync the WAL (its checkpoints still fsync it before copying, and the database file
        after), and every transaction of this store is followed by this call: the
        durability of ``synchronous=FULL``, with the fsync out of the COMMIT, so that the
        intake's next group writes while this one's frames reach the disk. An fsync of the
        file flushes what any writer wrote to it. Meanwhile other threads may read what is
        committed and not yet flushed; none of them answers a worker for it (the intake
        answers after this call), and what they write is flushed by their own call.

        Calls are serial. If an fsync fails, what it should have flushed may be lost (Linux
        may drop the dirty pages and report the error to one caller only), so the store
        refuses every transaction and every later call from then on: restart the validator
        once the disk is fixed (SQLite's recovery keeps what did reach it)."""
        with self._sync_lock:
            if self._sync_failed is not None:
                raise StoreError(self._sync_failed)
            target = self._committed
            if self._synced >= target:
                return
            try:
                fd = self._wal_fd
                if fd is None:
                    fd = self._wal_fd = os.open(str(self.path) + "-wal", os.O_RDONLY)
                os.fdatasync(fd)
            except OSError as e:
                self._sync_failed = (f"database {self.path}: fsync of the WAL failed ({e}); "
                                     "what was written since the last fsync may be lost, so "
                                     "this store refuses writes: fix the disk and restart "
                                     "the validator")
                raise StoreError(self._sync_failed) from None
            self._synced = target

    @contextmanager
    def _tx(self) -> Iterator[Conn]:
        with self._lock:
            if self._batch_depth:
                # Inside batch(): the write joins the batch's transaction. A database error
                # aborts the whole batch (batch() rolls it back).
                try:
                    yield self._conn
                except sqlite3.Error as e:
                    raise StoreError(f"database {self.path}: {e}") from None
                return
            with self._transaction():
                yield self._conn

    @contextmanager
    def _read(self) -> Iterator[Conn]:
        with self._lock:  # no write of this process interleaves
            try:
                yield self._conn
            except sqlite3.Error as e:
                raise StoreError(f"database {self.path}: {e}") from None

    def _q(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._db.execute(SQLITE.translate(sql), tuple(args)).fetchall()
            except sqlite3.Error as e:
                raise StoreError(f"database {self.path}: {e}") from None

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.close()
        with self._lock:
            self._db.close()
            if self._wal_fd is not None:
                os.close(self._wal_fd)
                self._wal_fd = None


def now_s() -> float:
    return time.time()
