"""The managed-job controller's durable state: one SQLite file, ``managed.sqlite`` in the data
folder of :mod:`gpu_market.job_history` (``$GPUM_DATA_DIR``, else ``$XDG_DATA_HOME/gpum``, else
``~/.local/share/gpum``), WAL with ``synchronous=FULL``: a transaction the controller saw
commit survives a kill -9 and a power cut.

Tables: ``managed_jobs`` (name, cluster, wallet, policy, workload template, phase, the user's
requests), ``attempts`` (one row per slot ``idx``: the job address derived from the managed
job's ``uid`` and ``idx``, provider, deposit, spec, state, start, end, why it ended, deposited,
paid, refunded, receipt) and ``events`` (what the controller told the user, with its level).

Guarantees. Every change is one transaction (:meth:`ManagedStore.commit`: the managed job's
fields, one attempt's fields, events), so a decision and the message that explains it are
written together or not at all. Plaintext secrets are never stored: the template holds secret
names, an attempt's spec holds them sealed to its worker's key. Amounts are payment-mint base
units and times Unix seconds (chain time).

``ControllerLock``: one controller per managed job (an exclusive ``flock`` on
``managed-<id>.lock`` beside the database, holding the owner's pid); the kernel releases it
when its process dies, so a killed controller never blocks its successor.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ATTEMPT_STATES", "DB_FILE", "PHASES", "Attempt", "ControllerBusy", "ControllerLock",
           "Event", "ManagedJob", "ManagedStore", "StoreError", "current_job", "data_dir",
           "open_existing"]  # fmt: skip

DB_FILE = "managed.sqlite"
PHASES = ("starting", "running", "migrating", "waiting", "stopping", "done", "gave_up")
"""starting: the first attempt is not running yet; running: watching the current attempt;
migrating: a failure was decided, the old job is being stopped and a successor started;
waiting: no offer fits the policy (or the budget waits for a refund), retried at
``next_try_at``; stopping: the user asked to stop; done / gave_up: nothing left to run (the
ended attempts are still closed, in the background)."""
ENDED_PHASES = ("done", "gave_up")
ATTEMPT_STATES = ("planned", "created", "delivered", "running", "stopping", "stopped",
                  "closing", "closed", "abandoned")  # fmt: skip
"""planned: the slot's job is about to be created (its address is fixed); created: the job is
on chain; delivered: its spec reached the worker; running: its container runs; stopping: the
controller decided to end it; stopped: it no longer bills (finished, cancelled, or ended by
itself); closing: its settlement is over and the close is being sent; closed: refunded, its
receipt kept; abandoned: a planned slot never created (the managed job stopped first)."""
LIVE_STATES = ("planned", "created", "delivered", "running", "stopping")
"""States of an attempt that may still bill or be created."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS managed_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    url TEXT NOT NULL,
    uid BLOB NOT NULL,
    market TEXT NOT NULL,
    user TEXT NOT NULL,
    program_id TEXT NOT NULL,
    decimals INTEGER NOT NULL,
    policy TEXT NOT NULL,
    template TEXT NOT NULL,
    phase TEXT NOT NULL,
    phase_reason TEXT,
    next_try_at INTEGER,
    backoff_s INTEGER NOT NULL DEFAULT 0,
    migrate_requested_at INTEGER,
    migrate_to TEXT,
    stop_requested_at INTEGER,
    health_since INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS managed_by_name ON managed_jobs (url, name);
CREATE TABLE IF NOT EXISTS attempts (
    managed_id INTEGER NOT NULL REFERENCES managed_jobs (id),
    idx INTEGER NOT NULL,
    job_id TEXT NOT NULL,
    job TEXT NOT NULL,
    provider TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    gpu_model TEXT NOT NULL,
    price TEXT NOT NULL,
    deposit TEXT NOT NULL,
    committee TEXT NOT NULL,
    quorum INTEGER NOT NULL,
    spec BLOB NOT NULL,
    workload_hash TEXT NOT NULL,
    state TEXT NOT NULL,
    needs_offer INTEGER NOT NULL DEFAULT 0,
    planned_at INTEGER NOT NULL,
    created_at INTEGER,
    started_at INTEGER,
    ended_at INTEGER,
    end_reason TEXT,
    end_kind TEXT,
    deposited TEXT NOT NULL DEFAULT '0',
    refunded TEXT NOT NULL DEFAULT '0',
    paid TEXT NOT NULL DEFAULT '0',
    paid_seconds INTEGER NOT NULL DEFAULT 0,
    receipt TEXT,
    close_intent TEXT,
    endpoints TEXT NOT NULL DEFAULT '[]',
    last_error TEXT,
    PRIMARY KEY (managed_id, idx)
);
CREATE INDEX IF NOT EXISTS attempts_by_job ON attempts (job);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    managed_id INTEGER NOT NULL REFERENCES managed_jobs (id),
    at INTEGER NOT NULL,
    level TEXT NOT NULL,
    text TEXT NOT NULL,
    data TEXT
);
CREATE INDEX IF NOT EXISTS events_by_job ON events (managed_id, id);
"""

_MANAGED_FIELDS = frozenset({"phase", "phase_reason", "next_try_at", "backoff_s", "policy",
                             "migrate_requested_at", "migrate_to", "stop_requested_at",
                             "health_since"})  # fmt: skip
_ATTEMPT_FIELDS = frozenset({"job_id", "job", "provider", "endpoint", "gpu_model", "price",
                             "deposit", "committee", "quorum", "spec", "workload_hash", "state",
                             "needs_offer", "created_at", "started_at", "ended_at", "end_reason",
                             "end_kind", "deposited", "refunded", "paid", "paid_seconds",
                             "receipt", "close_intent", "endpoints", "last_error"})  # fmt: skip
_JSON_ATTEMPT = ("committee", "receipt", "close_intent", "endpoints")
_U64_ATTEMPT = ("job_id", "price", "deposit", "deposited", "refunded", "paid")
"""Columns of u64 values, kept as decimal text (SQLite integers stop at 2^63 - 1)."""


class StoreError(Exception):
    """The database cannot be opened, read or written; the message says where and what to do."""


class ControllerBusy(StoreError):
    """Another controller holds the managed job (``pid``)."""

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


def data_dir() -> Path:
    """The folder of the local job history (and of this database)."""
    from ..job_history import history_path

    return history_path().parent


@dataclass(frozen=True)
class ManagedJob:
    id: int
    name: str
    url: str
    uid: bytes
    market: str
    user: str
    program_id: str
    decimals: int
    policy: str
    """RecoveryPolicy JSON (:meth:`RecoveryPolicy.from_json`)."""
    template: dict[str, Any]
    phase: str
    phase_reason: str | None
    next_try_at: int | None
    backoff_s: int
    migrate_requested_at: int | None
    migrate_to: str | None
    stop_requested_at: int | None
    health_since: int | None
    created_at: int
    updated_at: int

    @property
    def ended(self) -> bool:
        return self.phase in ENDED_PHASES


@dataclass(frozen=True)
class Attempt:
    managed_id: int
    idx: int
    job_id: int
    job: str
    provider: str
    endpoint: str
    gpu_model: str
    price: int
    """Per GPU-second."""
    deposit: int
    """The deposit planned (the chain's ``deposited`` once created)."""
    committee: list[str]
    quorum: int
    spec: bytes
    workload_hash: str
    state: str
    needs_offer: int
    planned_at: int
    created_at: int | None
    started_at: int | None
    ended_at: int | None
    end_reason: str | None
    end_kind: str | None
    """failure | user_migrate | done | user_stop | never_started."""
    deposited: int
    refunded: int
    paid: int
    paid_seconds: int
    receipt: dict[str, int] | None
    close_intent: dict[str, Any] | None
    endpoints: list[str] = field(default_factory=list)
    last_error: str | None = None

    @property
    def committed(self) -> int:
        """What this attempt holds out of the wallet, for the budget: a planned slot its whole
        planned deposit (it may be created), else ``deposited - refunded`` (a closed one: what
        it paid)."""
        if self.state == "abandoned":
            return 0
        if self.state == "planned":
            return self.deposit
        return max(self.deposited, self.deposit) - self.refunded

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


@dataclass(frozen=True)
class Event:
    id: int
    managed_id: int
    at: int
    level: str
    """info | warning | decision | error."""
    text: str
    data: dict[str, Any] | None


class ManagedStore:
    """The database at ``path`` (default ``data_dir() / DB_FILE``); one connection, used by one
    thread at a time."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else data_dir() / DB_FILE
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot open the managed-jobs database {self.path} ({e}): set "
                             "GPUM_DATA_DIR to a writable folder") from None  # fmt: skip
        self._db.row_factory = sqlite3.Row

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.Error as e:
            raise StoreError(f"the managed-jobs database {self.path} failed: {e}") from None

    def _read(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"the managed-jobs database {self.path} failed: {e}") from None

    # ------------------------------------------------------------------ reads

    def managed(self, managed_id: int) -> ManagedJob:
        rows = self._read("SELECT * FROM managed_jobs WHERE id = ?", (managed_id,))
        if not rows:
            raise StoreError(f"no managed job {managed_id} in {self.path}")
        return _managed(rows[0])

    def find(self, name: str, url: str) -> ManagedJob | None:
        """The managed job named ``name`` on cluster ``url``: the one not ended, else the
        newest."""
        rows = self._read("SELECT * FROM managed_jobs WHERE url = ? AND name = ? "
                          "ORDER BY (phase IN ('done', 'gave_up')), id DESC LIMIT 1", (url, name))  # fmt: skip
        return _managed(rows[0]) if rows else None

    def all(self, url: str | None = None, user: str | None = None) -> list[ManagedJob]:
        rows = self._read("SELECT * FROM managed_jobs WHERE (? IS NULL OR url = ?) AND "
                          "(? IS NULL OR user = ?) ORDER BY id", (url, url, user, user))  # fmt: skip
        return [_managed(r) for r in rows]

    def attempts(self, managed_id: int) -> list[Attempt]:
        rows = self._read("SELECT * FROM attempts WHERE managed_id = ? ORDER BY idx", (managed_id,))
        return [_attempt(r) for r in rows]

    def attempt(self, managed_id: int, idx: int) -> Attempt | None:
        rows = self._read("SELECT * FROM attempts WHERE managed_id = ? AND idx = ?",
                          (managed_id, idx))  # fmt: skip
        return _attempt(rows[0]) if rows else None

    def by_job(self, job: str, url: str | None = None) -> tuple[ManagedJob, Attempt] | None:
        """The managed job and attempt whose job address is ``job`` (on cluster ``url``)."""
        rows = self._read("SELECT a.managed_id, a.idx FROM attempts a JOIN managed_jobs m ON "
                          "m.id = a.managed_id WHERE a.job = ? AND (? IS NULL OR m.url = ?)",
                          (job, url, url))  # fmt: skip
        if not rows:
            return None
        m = self.managed(rows[0]["managed_id"])
        a = self.attempt(m.id, rows[0]["idx"])
        return (m, a) if a is not None else None

    def events(self, managed_id: int, after: int = 0, limit: int = 1000) -> list[Event]:
        rows = self._read("SELECT * FROM events WHERE managed_id = ? AND id > ? ORDER BY id "
                          "LIMIT ?", (managed_id, after, limit))  # fmt: skip
        return [Event(r["id"], r["managed_id"], r["at"], r["level"], r["text"],
                      json.loads(r["data"]) if r["data"] else None) for r in rows]  # fmt: skip

    def last_event_id(self, managed_id: int) -> int:
        rows = self._read("SELECT MAX(id) FROM events WHERE managed_id = ?", (managed_id,))
        return int(rows[0][0] or 0)

    # ------------------------------------------------------------------ writes

    def create(self, *, name: str, url: str, uid: bytes, market: str, user: str,
               program_id: str, decimals: int, policy: str, template: Mapping[str, Any],
               now: int, first: Mapping[str, Any] | None = None,
               events: list[tuple[str, str]] = ()) -> int:  # fmt: skip
        """A new managed job in phase ``starting`` (with its first slot planned when ``first``,
        the attempt's fields, is given); StoreError when a managed job of that name has not
        ended."""
        with self._tx() as db:
            held = db.execute("SELECT id FROM managed_jobs WHERE url = ? AND name = ? AND phase "
                              "NOT IN ('done', 'gave_up')", (url, name)).fetchone()  # fmt: skip
            if held is not None:
                raise StoreError(f"the name {name!r} is taken by a managed job that has not "
                                 f"ended: stop it with `gpum job stop {name}` or pick another "
                                 "--name")  # fmt: skip
            cur = db.execute(
                "INSERT INTO managed_jobs (name, url, uid, market, user, program_id, decimals, "
                "policy, template, phase, created_at, updated_at) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, 'starting', ?, ?)",
                (name, url, uid, market, user, program_id, decimals, policy,
                 json.dumps(dict(template), sort_keys=True), now, now))  # fmt: skip
            mid = int(cur.lastrowid)
            if first is not None:
                _insert_attempt(db, mid, 0, first, now)
            for level, text in events:
                _event(db, mid, now, level, text, None)
        return mid

    def commit(self, managed_id: int, now: int, *, managed: Mapping[str, Any] | None = None,
               attempt: tuple[int, Mapping[str, Any]] | None = None,
               new_attempt: tuple[int, Mapping[str, Any]] | None = None,
               events: list[tuple[str, str] | tuple[str, str, dict]] = ()) -> None:  # fmt: skip
        """One transaction: the managed job's ``managed`` fields, attempt ``attempt[0]``'s
        fields, a new (or re-planned) attempt row, and ``events`` ``(level, text[, data])``."""
        with self._tx() as db:
            if managed:
                bad = set(managed) - _MANAGED_FIELDS
                if bad:
                    raise ValueError(f"not managed-job fields: {sorted(bad)}")
                cols = ", ".join(f"{k} = ?" for k in managed)
                db.execute(f"UPDATE managed_jobs SET {cols}, updated_at = ? WHERE id = ?",
                           (*managed.values(), now, managed_id))  # fmt: skip
            if new_attempt is not None:
                idx, fields = new_attempt
                db.execute("DELETE FROM attempts WHERE managed_id = ? AND idx = ? AND state = "
                           "'planned'", (managed_id, idx))  # fmt: skip
                _insert_attempt(db, managed_id, idx, fields, now)
            if attempt is not None:
                idx, fields = attempt
                bad = set(fields) - _ATTEMPT_FIELDS
                if bad:
                    raise ValueError(f"not attempt fields: {sorted(bad)}")
                values = [json.dumps(v, sort_keys=True) if k in _JSON_ATTEMPT and v is not None
                          else str(int(v)) if k in _U64_ATTEMPT else v
                          for k, v in fields.items()]  # fmt: skip
                cols = ", ".join(f"{k} = ?" for k in fields)
                db.execute(f"UPDATE attempts SET {cols} WHERE managed_id = ? AND idx = ?",
                           (*values, managed_id, idx))  # fmt: skip
            for ev in events:
                level, text = ev[0], ev[1]
                _event(db, managed_id, now, level, text, ev[2] if len(ev) > 2 else None)  # type: ignore[misc]

    def request_stop(self, managed_id: int, now: int) -> None:
        self.commit(managed_id, now, managed={"stop_requested_at": now},
                    events=[("info", "stop asked by the user")])  # fmt: skip

    def request_migrate(self, managed_id: int, now: int, to: str | None) -> None:
        whither = f" to provider {to}" if to else ""
        self.commit(managed_id, now, managed={"migrate_requested_at": now, "migrate_to": to},
                    events=[("info", f"migration{whither} asked by the user")])  # fmt: skip


def _insert_attempt(db: sqlite3.Connection, mid: int, idx: int, f: Mapping[str, Any], now: int) -> None:
    db.execute(
        "INSERT INTO attempts (managed_id, idx, job_id, job, provider, endpoint, gpu_model, "
        "price, deposit, committee, quorum, spec, workload_hash, state, planned_at) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'planned', ?)",
        (mid, idx, str(f["job_id"]), f["job"], f["provider"], f["endpoint"], f["gpu_model"],
         str(f["price"]), str(f["deposit"]), json.dumps(list(f["committee"])), f["quorum"], f["spec"],
         f["workload_hash"], now))  # fmt: skip


def _event(db: sqlite3.Connection, mid: int, now: int, level: str, text: str, data: Any) -> None:
    db.execute("INSERT INTO events (managed_id, at, level, text, data) VALUES (?, ?, ?, ?, ?)",
               (mid, now, level, text, None if data is None else json.dumps(data, sort_keys=True)))


def _managed(r: sqlite3.Row) -> ManagedJob:
    d = dict(r)
    d["uid"] = bytes(d["uid"])
    d["template"] = json.loads(d["template"])
    return ManagedJob(**d)


def _attempt(r: sqlite3.Row) -> Attempt:
    d = dict(r)
    d["spec"] = bytes(d["spec"])
    for k in _JSON_ATTEMPT:
        d[k] = json.loads(d[k]) if d[k] is not None else None
    for k in _U64_ATTEMPT:
        d[k] = int(d[k])
    d["endpoints"] = d["endpoints"] or []
    return Attempt(**d)


class ControllerLock:
    """The exclusive right to run managed job ``managed_id``'s controller (see the module
    docstring). ``acquire()`` raises ControllerBusy naming the holder's pid."""

    def __init__(self, folder: Path, managed_id: int, name: str) -> None:
        self.path = Path(folder) / f"managed-{managed_id}.lock"
        self.name = name
        self._fd: int | None = None

    def holder(self) -> int | None:
        """The pid written by the controller holding the lock, None when none holds it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        return None

    def acquire(self) -> ControllerLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            pid = int(text) if text.isdigit() else None
            raise ControllerBusy(f"the controller of managed job {self.name!r} already runs "
                                 f"(pid {pid if pid is not None else 'unknown'}); stop it "
                                 "first, or let it work", pid) from None  # fmt: skip
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ControllerLock:  # noqa: PYI034 - py3.10 has no typing.Self
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def open_existing() -> ManagedStore | None:
    """The store in the data folder, or None when this machine never created a managed job
    (nothing is created by asking)."""
    path = data_dir() / DB_FILE
    return ManagedStore(path) if path.exists() else None


def current_job(name: str, url: str) -> Any:
    """The job address (Pubkey) of managed job ``name``'s current attempt on cluster ``url``,
    None when there is no such managed job (or it has no attempt yet)."""
    from solders.pubkey import Pubkey

    store = open_existing()
    if store is None:
        return None
    try:
        m = store.find(name, url)
        atts = [] if m is None else [a for a in store.attempts(m.id) if a.state != "abandoned"]
    finally:
        store.close()
    return Pubkey.from_string(atts[-1].job) if atts else None
