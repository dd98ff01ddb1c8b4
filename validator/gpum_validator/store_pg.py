"""``Store`` on PostgreSQL (``gpum-validator run --db postgresql://user@host/db``).

``PostgresStore`` runs the queries of ``store_sql.SQLStore`` (translated by
``sql_dialect.POSTGRES``) over psycopg 3, with a small pool of connections so the HTTP threads
and the background loops do not wait for each other. Several validator processes may share
one database:

* the schema is created or checked under a transaction-scoped advisory lock, so processes
  starting together do not race (``store_schema.migrate_postgres``);
* every write method is one transaction (READ COMMITTED); the ones whose decision depends
  on what they read are atomic across processes (see ``store_sql``): a compare-and-set
  on the job row for ``record_accepted``, the (job, seq) primary key for
  ``record_given_attestation`` (a member never signs two values for one seq, whichever
  process asks), advisory locks per key for the others;
* ``batch()`` holds one connection and transaction for the calling thread only (other
  threads keep their own connections); each store call inside it runs in a savepoint, so a
  failed statement does not poison the batch. A batch that conflicts with another process's
  may be aborted by the server's deadlock detection: that is a ``StoreError`` (503, retry);
* the row counters of ``summary`` are sharded per server connection (``pg_backend_pid()``),
  so concurrent writers never wait on one counter row; ``prune`` folds the shards of
  connections that are gone.

Needs ``psycopg`` (``pip install 'psycopg[binary]'``), imported when a store is opened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .errors import StoreError
from .sql_dialect import POSTGRES, Conn
from .store_schema import COUNTED, migrate_postgres
from .store_sql import SQLStore

__all__ = ["PostgresStore", "describe", "is_postgres_url"]


def is_postgres_url(text: str) -> bool:
    """Whether ``--db`` names a PostgreSQL database rather than an SQLite file."""
    return str(text).startswith(("postgresql://", "postgres://"))


def describe(db: str) -> str:
    """``--db`` for logs and messages: an SQLite path as is, a URL without its password."""
    return _redacted(db) if is_postgres_url(db) else str(db)


class _Pool:
    """At most ``size`` open connections; ``get`` waits when all are in use."""

    def __init__(self, connect: Callable[[], Any], size: int) -> None:
        if size < 1:
            raise ValueError("pool size must be at least 1")
        self._connect = connect
        self._size = size
        self._idle: list[Any] = []
        self._open = 0
        self._closed = False
        self._cond = threading.Condition()

    def get(self) -> Any:
        with self._cond:
            while True:
                if self._closed:
                    raise StoreError("the store is closed")
                if self._idle:
                    return self._idle.pop()
                if self._open < self._size:
                    self._open += 1
                    break
                self._cond.wait()
        try:
            return self._connect()
        except BaseException:
            with self._cond:
                self._open -= 1
                self._cond.notify()
            raise

    def put(self, conn: Any) -> None:
        from psycopg.pq import TransactionStatus

        with self._cond:
            reusable = (not self._closed and not conn.closed and not conn.broken
                        and conn.info.transaction_status == TransactionStatus.IDLE)
            if reusable:
                self._idle.append(conn)
            else:
                self._open -= 1
            self._cond.notify()
        if not reusable:
            conn.close()  # psycopg's close() does not raise, also on a broken connection

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._cond.notify_all()
        for conn in idle:
            conn.close()


class PostgresStore(SQLStore):
    """``Store`` on one PostgreSQL database (``url``: ``postgresql://user@host/db``, any
    libpq connection URL). Tables live in the connection's first ``search_path`` schema.
    ``pool_size`` bounds the connections this process opens."""

    dialect = POSTGRES

    def __init__(self, url: str, *, pool_size: int = 8, connect_timeout: int = 10) -> None:
        try:
            import psycopg
        except ImportError:
            raise StoreError("a postgresql:// --db needs the psycopg package: "
                             "pip install 'psycopg[binary]'") from None
        self._psycopg = psycopg
        self.url = url
        self.where = f"database {_redacted(url)}"

        def connect() -> Any:
            try:
                return psycopg.connect(url, autocommit=True, connect_timeout=connect_timeout,
                                       application_name="gpum-validator")
            except psycopg.Error as e:
                raise StoreError(f"cannot connect to {self.where}: {_first_line(e)}; check "
                                 "the URL, that the server runs and accepts this user "
                                 "(--db)") from None

        self._pool = _Pool(connect, pool_size)
        self._local = threading.local()
        try:
            self._migrate()
        except BaseException:
            self._pool.close()
            raise

    # ------------------------------------------------------------------ connections

    def _error(self, e: Exception) -> StoreError:
        return StoreError(f"{self.where}: {_first_line(e)}")

    def _batch_conn(self) -> Conn | None:
        return getattr(self._local, "conn", None)

    @contextmanager
    def _tx(self) -> Iterator[Conn]:
        inner = self._batch_conn()
        if inner is not None:
            try:
                with inner.raw.transaction():  # a savepoint inside the batch
                    yield inner
            except self._psycopg.Error as e:
                raise self._error(e) from None
            return
        raw = self._pool.get()
        try:
            with raw.transaction():
                yield Conn(raw, POSTGRES)
        except self._psycopg.Error as e:
            raise self._error(e) from None
        finally:
            self._pool.put(raw)

    _read = _tx
    """Several reads on one connection, in one transaction."""

    def _q(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        inner = self._batch_conn()
        raw = inner.raw if inner is not None else self._pool.get()
        try:
            return raw.execute(POSTGRES.translate(sql), tuple(args)).fetchall()
        except self._psycopg.Error as e:
            if inner is not None and raw.info.transaction_status == \
                    self._psycopg.pq.TransactionStatus.INERROR:
                raise StoreError(f"{self.where}: {_first_line(e)} (the batch is aborted)"
                                 ) from None
            raise self._error(e) from None
        finally:
            if inner is None:
                self._pool.put(raw)

    @contextmanager
    def batch(self, durable: bool = True) -> Iterator[None]:
        """Group commit: every store call this thread makes inside the block joins one
        transaction on one connection, committed when the block exits and rolled back if it
        raises; nothing written inside is visible to others or durable before the block ends,
        so answer no one before then. Other threads are not held up. Nested use joins the
        outer batch. A commit is durable when it returns (the server's
        ``synchronous_commit``), whatever ``durable`` says (``SQLiteStore.batch``)."""
        st = self._local
        if getattr(st, "conn", None) is not None:
            st.depth += 1
            try:
                yield
            finally:
                st.depth -= 1
            return
        raw = self._pool.get()
        try:
            with raw.transaction():
                st.conn, st.depth = Conn(raw, POSTGRES), 1
                try:
                    yield
                finally:
                    st.conn, st.depth = None, 0
        except self._psycopg.Error as e:
            raise self._error(e) from None
        finally:
            self._pool.put(raw)

    def make_durable(self) -> None:
        """Nothing to do: every commit returned durable (``SQLiteStore.make_durable``)."""

    def close(self) -> None:
        self._pool.close()

    # ------------------------------------------------------------------ schema

    def _migrate(self) -> None:
        with self._tx() as db:
            migrate_postgres(db, self.where)

    def _rebuild_derived(self, db: Conn) -> None:
        tables = ", ".join(["counters", "intents"] + [t for t, _ in COUNTED if t != "intents"])
        db.raw.execute(f"LOCK TABLE {tables} IN EXCLUSIVE MODE")
        super()._rebuild_derived(db)

    def _compact_counters(self) -> None:
        """Fold the counter rows of server connections that are gone into shard 0."""
        with self._tx() as db:
            db.raw.execute(
                "WITH gone AS (DELETE FROM counters WHERE shard <> 0 AND shard NOT IN "
                "(SELECT pid FROM pg_stat_activity) RETURNING name, value) "
                "INSERT INTO counters (name, shard, value) "
                "SELECT name, 0, SUM(value) FROM gone GROUP BY name "
                "ON CONFLICT (name, shard) DO UPDATE SET value = counters.value + "
                "EXCLUDED.value")


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _redacted(url: str) -> str:
    """The URL without its password (it may end up in logs and error messages)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        d = conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - unparsable: say nothing of it
        return "(unparsable PostgreSQL URL)"
    return f"postgresql {d.get('dbname') or '(default)'} on {d.get('host') or 'localhost'}"
