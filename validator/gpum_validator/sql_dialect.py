"""The SQL dialect layer shared by ``SQLiteStore`` (store_sqlite.py) and ``PostgresStore``
(store_pg.py).

Every query of the store is written once (``store_sql.SQLStore``), in SQLite's spelling, plus an
optional trailing ``FOR UPDATE`` (a row lock; SQLite has one writer at a time, so the
dialect drops it). ``Dialect.translate`` turns such a statement into the server's spelling:

=============================  ==========================================
SQLite (as written)            PostgreSQL
=============================  ==========================================
``?`` placeholders             ``%s`` (a literal ``%`` becomes ``%%``)
``INSERT OR IGNORE INTO ...``  ``INSERT INTO ... ON CONFLICT DO NOTHING``
scalar ``MAX(a, b)``           ``GREATEST(a, b)`` (``MIN`` -> ``LEAST``)
``... FOR UPDATE``             kept (SQLite: dropped)
=============================  ==========================================

and ``Dialect.ddl`` a schema script: ``BLOB`` -> ``BYTEA``, ``INTEGER`` -> ``BIGINT``,
``REAL`` -> ``DOUBLE PRECISION``, ``INTEGER PRIMARY KEY AUTOINCREMENT`` -> ``BIGSERIAL PRIMARY
KEY``, a ``VIRTUAL`` generated column -> ``STORED`` (the only kind PostgreSQL has). New ids come back with ``RETURNING`` (both servers have it), never ``lastrowid``.
Aggregates are read through ``as_int`` (PostgreSQL's ``SUM`` of integers is a ``Decimal``).

``Conn`` is the handle the store's methods get from ``_tx()`` / ``_read()``: ``execute``,
``executemany`` and ``executescript`` with translation (cached per statement text), on an
sqlite3 connection or a psycopg one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["POSTGRES", "ROWS_PER_STATEMENT", "SQLITE", "STATEMENT_CACHE", "Conn", "Dialect",
           "as_int", "values_list"]

_INSERT_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", re.IGNORECASE)
_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)
_FOR_UPDATE = re.compile(r"\s+FOR\s+UPDATE\s*$", re.IGNORECASE)
_SCALAR_FN = re.compile(r"\b(MAX|MIN)\s*\(", re.IGNORECASE)


def _scalar_max_min(sql: str) -> str:
    """``MAX(a, b, ...)`` / ``MIN(...)`` with more than one argument -> GREATEST / LEAST;
    the one-argument aggregates are left alone."""
    out, pos = [], 0
    for m in _SCALAR_FN.finditer(sql):
        if m.start() < pos:
            continue
        depth, i, comma = 0, m.end(), False
        while i < len(sql):
            c = sql[i]
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            elif c == "," and depth == 0:
                comma = True
            elif c == "'":
                i = sql.find("'", i + 1)
                if i < 0:
                    break
            i += 1
        if comma:
            out.append(sql[pos:m.start()])
            out.append("GREATEST(" if m.group(1).upper() == "MAX" else "LEAST(")
            pos = m.end()
    out.append(sql[pos:])
    return "".join(out)


def _placeholders(sql: str) -> str:
    """``?`` -> ``%s`` outside string literals; a literal ``%`` is doubled for psycopg."""
    out, quoted = [], False
    for c in sql:
        if c == "'":
            quoted = not quoted
        if c == "%":
            out.append("%%")
        elif c == "?" and not quoted:
            out.append("%s")
        else:
            out.append(c)
    return "".join(out)


class Dialect:
    """How one server spells the store's SQL (see the module docstring)."""

    def __init__(self, name: str) -> None:
        if name not in ("sqlite", "postgresql"):
            raise ValueError(f"unknown SQL dialect {name!r}")
        self.name = name
        self._cache: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"Dialect({self.name!r})"

    def translate(self, sql: str) -> str:
        hit = self._cache.get(sql)
        if hit is not None:
            return hit
        if self.name == "sqlite":
            out = _FOR_UPDATE.sub("", sql)
        else:
            out = sql
            if _INSERT_OR_IGNORE.match(out):
                out = _INSERT_OR_IGNORE.sub("INSERT INTO", out, count=1)
                m = _RETURNING.search(out)
                out = (out + " ON CONFLICT DO NOTHING" if m is None else
                       out[:m.start()] + "ON CONFLICT DO NOTHING " + out[m.start():])
            out = _placeholders(_scalar_max_min(out))
        if len(self._cache) < 4096:
            self._cache[sql] = out
        return out

    def ddl(self, script: str) -> str:
        """A schema script in this server's types (statements separated by ``;``)."""
        if self.name == "sqlite":
            return script
        out = re.sub(r"\bINTEGER\s+PRIMARY\s+KEY\s+AUTOINCREMENT\b", "BIGSERIAL PRIMARY KEY",
                     script, flags=re.IGNORECASE)
        out = re.sub(r"\bBLOB\b", "BYTEA", out)
        out = re.sub(r"\bINTEGER\b", "BIGINT", out)
        out = re.sub(r"\bREAL\b", "DOUBLE PRECISION", out)
        return re.sub(r"\)\s*VIRTUAL\b", ") STORED", out)


SQLITE = Dialect("sqlite")
POSTGRES = Dialect("postgresql")


def as_int(v: Any) -> int:
    """An aggregate's value as an int (None -> 0; PostgreSQL's SUM is a Decimal)."""
    return 0 if v is None else int(v)


ROWS_PER_STATEMENT = 256
"""Rows per statement of ``Conn.execute_values`` (256 x 26 parameters stay below SQLite's
32,766 and PostgreSQL's 65,535)."""
STATEMENT_CACHE = 1024
"""Prepared statements an SQLite connection keeps (Python's default, 128, would not hold the
row counts of ``Conn.execute_values`` beside the store's other statements)."""


def values_list(rows: int, width: int) -> str:
    """The placeholders of a ``VALUES`` list of ``rows`` rows of ``width`` values each."""
    return ",".join(["(" + ",".join("?" * width) + ")"] * rows)


class Conn:
    """A connection as the store's methods see it: statements in SQLite's spelling,
    translated for the server. ``raw`` is the driver's connection."""

    __slots__ = ("dialect", "raw")

    def __init__(self, raw: Any, dialect: Dialect) -> None:
        self.raw = raw
        self.dialect = dialect

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """Run one statement; the driver's cursor (``fetchone``, ``fetchall``, ``rowcount``)."""
        return self.raw.execute(self.dialect.translate(sql), tuple(args))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        rows = [tuple(r) for r in rows]
        if self.dialect.name == "sqlite":
            return self.raw.executemany(self.dialect.translate(sql), rows)
        cur = self.raw.cursor()
        if rows:
            cur.executemany(self.dialect.translate(sql), rows)
        return cur

    def execute_values(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run ``sql``, whose ``{values}`` stands for a ``VALUES`` list, for every row of
        ``rows`` (all of one width); the rows the statements changed. Up to
        ``ROWS_PER_STATEMENT`` rows go in one statement, so the driver steps (and Python's
        sqlite3 releases and takes back the GIL) once per statement instead of once per row
        as ``executemany`` does: under a busy GIL each take-back waits for other threads
        (measured: a third of the intake's write time). Each row count is its own statement
        text, prepared once and then cached by the driver (``STATEMENT_CACHE``)."""
        changed = 0
        for i in range(0, len(rows), ROWS_PER_STATEMENT):
            chunk = rows[i:i + ROWS_PER_STATEMENT]
            cur = self.execute(sql.replace("{values}", values_list(len(chunk), len(chunk[0]))),
                               [v for r in chunk for v in r])
            changed += cur.rowcount
        return changed

    def serialize(self, *key: object) -> None:
        """Serialise the rest of this transaction with every other transaction (of any
        process) that takes the same key, until it ends: a PostgreSQL transaction-scoped
        advisory lock. Nothing on SQLite, whose writers are serial anyway."""
        if self.dialect.name == "sqlite":
            return
        h = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
        self.raw.execute("SELECT pg_advisory_xact_lock(%s)",
                         (int.from_bytes(h, "big", signed=True),))

    def executescript(self, script: str) -> None:
        """Run a schema script (DDL; no parameters) in this server's types."""
        ddl = self.dialect.ddl(script)
        if self.dialect.name == "sqlite":
            self.raw.executescript(ddl)
            return
        for stmt in split_statements(ddl):
            self.raw.execute(stmt)


def split_statements(script: str) -> list[str]:
    """Split a DDL script on ``;`` outside quotes, ``$$`` bodies and ``--`` comments."""
    out, cur, i, n = [], [], 0, len(script)
    quote: str | None = None
    while i < n:
        c = script[i]
        if quote is None and script.startswith("--", i):
            j = script.find("\n", i)
            i = n if j < 0 else j
            continue
        if quote is None and script.startswith("$$", i):
            quote = "$$"
            cur.append("$$")
            i += 2
            continue
        if quote == "$$" and script.startswith("$$", i):
            quote = None
            cur.append("$$")
            i += 2
            continue
        if quote is None and c == "'":
            quote = "'"
        elif quote == "'" and c == "'":
            quote = None
        if quote is None and c == ";":
            stmt = "".join(cur).strip()
            if stmt:
                out.append(stmt)
            cur = []
        else:
            cur.append(c)
        i += 1
    stmt = "".join(cur).strip()
    if stmt:
        out.append(stmt)
    return out
