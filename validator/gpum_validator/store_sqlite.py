"""``Store`` on one SQLite file: the engine for a validator with a local disk.

``SQLiteStore`` runs the queries of ``store_sql.SQLStore`` on the stdlib ``sqlite3`` in WAL
mode, with an fsync of the WAL after every transaction (``make_durable``), so a method that
returns has its effect on disk. One connection is shared by the HTTP threads and the
settlement thread under a lock (SQLite serialises writers anyway); ``batch()`` is the group
commit of the intake, and excludes every other writer of the file until it ends
(``serial_writers``), which the intake's fast lane relies on. The file's schema is created
or upgraded on open (``store_schema.migrate_sqlite``). ``store_pg.PostgresStore`` is the
twin on PostgreSQL.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import StoreError
from .sql_dialect import SQLITE, STATEMENT_CACHE, Conn
from .store_schema import migrate_sqlite
from .store_sql import SQLStore
from .wal import WalCheckpointer


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
        migrate_sqlite(self._db, self._conn, f"database {self.path}")

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
