"""The store's schema on both servers: tables, indexes, triggers, and the migrations.

One schema, written in SQLite's spelling (``sql_dialect.Dialect.ddl`` turns it into
PostgreSQL's), at version ``SCHEMA_VERSION``, kept in ``meta``. ``migrate_sqlite`` creates it
or upgrades an older SQLite file in place (v1 onwards), in one transaction;
``migrate_postgres`` creates it in an empty PostgreSQL database (PostgreSQL support starts
at v4) under an advisory lock, so processes starting together do not race. Either refuses a
database written by a newer version (``StoreError``) instead of guessing.

What the database derives from its rows is kept by the database itself, so no write can
forget it: the settle flags ``jobs.unsettled`` / ``jobs.unpaid`` (generated columns on
PostgreSQL, stored columns kept by triggers on SQLite, ``_SQLITE_MARKS``) and the row
``counters`` of ``summary`` (``COUNTED``, kept by triggers on both). ``rebuild_derived``
recomputes what is derived from other tables (``jobs.covered_seq`` / ``paid_seq``) and the
counters.
"""

from __future__ import annotations

import sqlite3

from .errors import StoreError
from .records import TERMINAL_CHAIN_STATUSES
from .sql_dialect import Conn

SCHEMA_VERSION = 4
TERMINAL_SQL = "(" + ", ".join(f"'{s}'" for s in TERMINAL_CHAIN_STATUSES) + ")"
"""``TERMINAL_CHAIN_STATUSES`` as an SQL list, for ``chain_status IN ...``."""
_MIGRATION_LOCK = 0x67_70_75_6D_2D_64_62  # "gpum-db": the schema lock's advisory key

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

HARDWARE_TABLES = """
CREATE TABLE IF NOT EXISTS hardware_verdicts (
    provider BLOB NOT NULL,
    challenge BLOB NOT NULL,
    challenged_at INTEGER NOT NULL,
    worker_key BLOB NOT NULL,
    gpu_model TEXT NOT NULL,
    gpu_count INTEGER NOT NULL,
    vram_mib INTEGER NOT NULL,
    passed INTEGER NOT NULL,
    reasons TEXT NOT NULL,
    detail TEXT NOT NULL,
    attestations TEXT NOT NULL DEFAULT '{}',
    recorded_at REAL NOT NULL,
    attested_tx TEXT,
    attest_error TEXT,
    PRIMARY KEY (provider, challenge)
);
CREATE INDEX IF NOT EXISTS hardware_verdicts_latest ON hardware_verdicts (provider, recorded_at);
CREATE TABLE IF NOT EXISTS gpu_claims (
    uuid TEXT NOT NULL,
    provider BLOB NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('verdict', 'proof')),
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    PRIMARY KEY (uuid, provider, source)
);
CREATE TABLE IF NOT EXISTS wrong_answers (
    provider BLOB NOT NULL,
    challenge BLOB NOT NULL,
    row_index INTEGER NOT NULL,
    worker_key BLOB NOT NULL,
    gpu_index INTEGER NOT NULL,
    challenged_at INTEGER NOT NULL,
    root BLOB NOT NULL,
    leaf_count INTEGER NOT NULL,
    leaf_hash BLOB NOT NULL,
    siblings BLOB NOT NULL,
    row_bytes BLOB NOT NULL,
    answer_signature BLOB NOT NULL,
    row_signature BLOB NOT NULL,
    recorded_at REAL NOT NULL,
    status TEXT CHECK (status IN ('sent', 'retry', 'done', 'failed')),
    signature TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (provider, challenge, row_index)
);
"""
"""Hardware challenges (``store_hardware``): tables of their own that no other query reads,
so they are created on every open of either server, without a version bump (a validator
from before them ignores them)."""

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
CREATE INDEX IF NOT EXISTS jobs_closed ON jobs (ended_at) WHERE chain_status IN {TERMINAL_SQL};
CREATE INDEX IF NOT EXISTS jobs_open ON jobs (updated_at)
    WHERE chain_status IS NULL OR chain_status NOT IN {TERMINAL_SQL};
CREATE INDEX IF NOT EXISTS intents_by_status_time ON intents (status, updated_at);
DROP INDEX IF EXISTS proofs_by_decision;
DROP INDEX IF EXISTS proofs_accepted;
CREATE INDEX IF NOT EXISTS proofs_rejected ON proofs (job, seq) WHERE decision = 'rejected';
"""
"""Schema v4 (the store at scale): the counters of ``summary`` and the indexes of the settle pass,
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


def rebuild_derived(db: Conn) -> None:
    """Recompute the jobs' ``covered_seq`` and ``paid_seq`` from the chain's last seq and the
    intents, and recount ``counters`` (for rows written around the store's methods: a bulk
    load, a migration)."""
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


# ---------------------------------------------------------------------- SQLite

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


def migrate_sqlite(raw: sqlite3.Connection, db: Conn, where: str) -> None:
    """Create the schema in the SQLite database of connection ``raw`` (``db``: the same
    connection as the store's methods see it), or upgrade an older one in place; ``where``
    names the database in errors."""
    raw.executescript(_SCHEMA + _SCHEMA_V3 + _READ_INDEXES + HARDWARE_TABLES)  # idempotent
    raw.execute("BEGIN IMMEDIATE")
    try:
        row = raw.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        rebuild = False
        if row is None:
            raw.execute("INSERT INTO meta VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise StoreError(f"{where} has schema version {row[0]}, newer "
                             f"than this validator ({SCHEMA_VERSION}); upgrade gpum-validator")
        elif int(row[0]) < SCHEMA_VERSION:
            _upgrade_sqlite(raw, int(row[0]))
            raw.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                        (str(SCHEMA_VERSION),))
            rebuild = int(row[0]) < 4
        _store_marks(raw)
        for stmt in _sqlite_statements(_SCHEMA_V4 + _sqlite_count_triggers()
                                       + _SQLITE_MARKS):
            raw.execute(stmt)
        if rebuild:  # v3 -> v4: the jobs' covered/paid seqs and the counters
            rebuild_derived(db)
        raw.execute("COMMIT")
    except BaseException:
        if raw.in_transaction:
            raw.execute("ROLLBACK")
        raise


def _store_marks(raw: sqlite3.Connection) -> None:
    """``jobs.unsettled`` / ``jobs.unpaid`` as stored columns (``_SQLITE_MARKS``; their
    triggers are created right after): the generated ones of ``_SCHEMA`` (a new
    database) or of schema v4 are replaced, with their partial indexes, which
    ``_SCHEMA_V4`` creates again; a database of v3 or older gets them. Values are
    computed once here; from then on the triggers keep them. No schema bump: the
    triggers live in the database, so a validator of before this change keeps them
    right too."""
    hidden = {r[1]: r[6] for r in raw.execute("PRAGMA table_xinfo(jobs)")}
    if hidden.get("unsettled") == 0 and hidden.get("unpaid") == 0:
        return  # stored already
    raw.execute("DROP INDEX IF EXISTS jobs_unsettled")
    raw.execute("DROP INDEX IF EXISTS jobs_unpaid")
    for col in ("unsettled", "unpaid"):
        if col in hidden:
            raw.execute(f"ALTER TABLE jobs DROP COLUMN {col}")
        raw.execute(f"ALTER TABLE jobs ADD COLUMN {col} INTEGER NOT NULL DEFAULT 0")
    raw.execute(f"UPDATE jobs SET {_MARKS}")


def _add_column(raw: sqlite3.Connection, table: str, column: str) -> None:
    name = column.split()[0]
    have = {r[1] for r in raw.execute(f"PRAGMA table_xinfo({table})")}
    if name not in have:
        raw.execute(f"ALTER TABLE {table} ADD COLUMN {column}")


def _upgrade_sqlite(raw: sqlite3.Connection, version: int) -> None:
    """Migrate a database of schema ``version`` in place (inside the open transaction)."""
    if version < 2:
        # v1 -> v2: the job's window length (from its terms) is kept for the policy.
        _add_column(raw, "jobs", "window_seconds INTEGER NOT NULL DEFAULT 0")
    if version < 3:
        # v2 -> v3 (approvals): a validator of v2 accepted only an unbroken cumulative
        # chain, so its approved total at a seq was the cumulative claim.
        for table, column in _V3_COLUMNS:
            _add_column(raw, table, column)
        raw.execute("UPDATE proofs SET approved_total=cumulative_seconds "
                    "WHERE decision='accepted' AND approved_total IS NULL")
        raw.execute("UPDATE jobs SET approved_total=cumulative_seconds")
        raw.execute("UPDATE intents SET approved_seconds=cumulative_seconds "
                    "WHERE approved_seconds IS NULL")
    if version < 4:
        # v3 -> v4 (the store at scale): markers of the settle pass; filled by
        # rebuild_derived.
        for table, column in _V4_COLUMNS:
            _add_column(raw, table, column)
    # The next settlement pass re-reads every job's chain facts (terms, committee).
    raw.execute("UPDATE jobs SET chain_checked_at=0")


# ---------------------------------------------------------------------- PostgreSQL

def _postgres_count_triggers() -> str:
    """PL/pgSQL triggers keeping ``counters``: one row per (counter, server connection).
    Statement-level with transition tables, so a bulk insert or delete bumps each counter
    once, not once per row."""
    out = []
    for table, col in COUNTED:
        key = f"'{table}.' || {col}" if col else f"'{table}'"
        out.append(f"""
CREATE OR REPLACE FUNCTION gpum_count_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO counters (name, shard, value)
        SELECT {key}, pg_backend_pid(), COUNT(*) FROM new_rows GROUP BY 1
        ON CONFLICT (name, shard) DO UPDATE SET value = counters.value + EXCLUDED.value;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO counters (name, shard, value)
        SELECT {key}, pg_backend_pid(), -COUNT(*) FROM old_rows GROUP BY 1
        ON CONFLICT (name, shard) DO UPDATE SET value = counters.value + EXCLUDED.value;
    ELSE
        INSERT INTO counters (name, shard, value)
        SELECT k, pg_backend_pid(), SUM(d) FROM (
            SELECT {key} AS k, -1 AS d FROM old_rows UNION ALL
            SELECT {key} AS k, 1 AS d FROM new_rows) x GROUP BY k HAVING SUM(d) <> 0
        ON CONFLICT (name, shard) DO UPDATE SET value = counters.value + EXCLUDED.value;
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS count_{table}_ins ON {table};
CREATE TRIGGER count_{table}_ins AFTER INSERT ON {table} REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION gpum_count_{table}();
DROP TRIGGER IF EXISTS count_{table}_del ON {table};
CREATE TRIGGER count_{table}_del AFTER DELETE ON {table} REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION gpum_count_{table}();
""")
        if col:
            out.append(f"""
DROP TRIGGER IF EXISTS count_{table}_upd ON {table};
CREATE TRIGGER count_{table}_upd AFTER UPDATE ON {table}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION gpum_count_{table}();
""")
    return "".join(out)


def migrate_postgres(db: Conn, where: str) -> None:
    """Create the schema in an empty PostgreSQL database, or check the version of an
    existing one (``where`` names it in errors), inside ``db``'s open transaction under a
    transaction-scoped advisory lock."""
    db.raw.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
    if db.raw.execute("SELECT to_regclass('meta')").fetchone()[0] is None:
        db.executescript(_SCHEMA + _SCHEMA_V3 + _READ_INDEXES + _SCHEMA_V4 + HARDWARE_TABLES)
        db.executescript(_postgres_count_triggers())
        db.execute("INSERT INTO meta VALUES ('schema_version', ?)",
                   (str(SCHEMA_VERSION),))
        return
    row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    version = int(row[0]) if row else 0
    if version > SCHEMA_VERSION:
        raise StoreError(f"{where} has schema version {version}, newer than "
                         f"this validator ({SCHEMA_VERSION}); upgrade gpum-validator")
    if version < 4:  # PostgreSQL support starts at schema version 4
        raise StoreError(f"{where} has schema version {version}, which no "
                         "gpum-validator wrote to PostgreSQL; use an empty database")
    db.executescript(_READ_INDEXES + _SCHEMA_V4 + HARDWARE_TABLES)  # added without a bump
