"""Test support: run the store tests against every backend, and a throwaway PostgreSQL server.

A test module that runs on both backends defines its own ``store_db`` fixture from this kit
(never through conftest, never by importing fixtures)::

    @pytest.fixture(params=storekit.BACKENDS)
    def store_db(request, tmp_path):
        yield from storekit.store_db(request, tmp_path)

``store_db.open()`` opens a store on one empty database of the test (again after a
``close()``: a restart); every store it opened is closed at the end. On PostgreSQL each test
gets a schema of its own on one server per test session (``pg_server``): a PostgreSQL of its
own, started with Debian's binaries (``/usr/lib/postgresql/<version>/bin`` or ``initdb`` on
PATH; ``GPUM_PG_BIN`` overrides) in a temporary directory, listening on a Unix socket there
only, without fsync; as root (initdb refuses root) it runs as the ``postgres`` user. When
PostgreSQL is missing the tests that need it FAIL saying how to install it: they are part of
the suite, never skipped.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

INSTALL_HINT = ("install Debian's PostgreSQL server: `apt-get install -y postgresql` "
                "(`make test` and .ci/run install it when missing), or point GPUM_PG_BIN at "
                "the directory holding initdb and pg_ctl")


class PostgresMissing(RuntimeError):
    pass


def pg_bin_dir() -> Path:
    """The directory of ``initdb`` / ``pg_ctl``: $GPUM_PG_BIN, Debian's newest
    /usr/lib/postgresql/<version>/bin, or PATH."""
    env = os.environ.get("GPUM_PG_BIN")
    candidates = [Path(env)] if env else []
    candidates += sorted((Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")),
                         key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
                         reverse=True)
    which = shutil.which("initdb")
    if which:
        candidates.append(Path(which).resolve().parent)
    for c in candidates:
        if (c / "initdb").is_file() and (c / "pg_ctl").is_file():
            return c
    raise PostgresMissing(f"PostgreSQL server binaries (initdb, pg_ctl) not found; "
                          f"{INSTALL_HINT}")


@dataclass
class PgServer:
    """A running throwaway server; ``url(schema)`` connects with that ``search_path``."""

    bin_dir: Path
    root: Path
    socket_dir: Path
    user: str = "gpum"
    port: int = 5432

    def url(self, schema: str | None = None, dbname: str = "postgres") -> str:
        q = f"host={quote(str(self.socket_dir), safe='')}&port={self.port}&user={self.user}"
        if schema:
            q += "&options=" + quote(f"-c search_path={schema}", safe="")
        return f"postgresql:///{dbname}?{q}"

    def execute(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as c:
            c.execute(sql)


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    if shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--", *cmd]
    return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(f"'{a}'" for a in cmd)]


def start_server() -> PgServer:
    """initdb + pg_ctl start in a new temporary directory (PostgresMissing when there is no
    PostgreSQL to start, RuntimeError with the server's log when it does not start)."""
    bin_dir = pg_bin_dir()
    root = Path(tempfile.mkdtemp(prefix="gpum-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        try:
            shutil.chown(root, user="postgres", group="postgres")
        except (LookupError, PermissionError) as e:
            raise PostgresMissing(f"running as root, the server must run as the 'postgres' "
                                  f"user, which is missing ({e}); {INSTALL_HINT}") from None
    server = PgServer(bin_dir, root, root)
    data, log = root / "data", root / "server.log"

    def run(cmd: list[str]) -> None:
        p = subprocess.run(_as_server_user(cmd), capture_output=True, text=True, timeout=120,
                           check=False)
        if p.returncode != 0:
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}"
                               f"\n{tail}")

    run([str(bin_dir / "initdb"), "-D", str(data), "-U", server.user, "-A", "trust",
         "-E", "UTF8", "--locale=C", "--no-sync"])
    opts = (f"-k {root} -p {server.port} -c listen_addresses='' -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
    run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
         "-o", opts, "start"])
    return server


def stop_server(server: PgServer) -> None:
    subprocess.run(_as_server_user([str(server.bin_dir / "pg_ctl"), "-D",
                                    str(server.root / "data"), "-m", "immediate", "stop"]),
                   capture_output=True, timeout=60, check=False)
    shutil.rmtree(server.root, ignore_errors=True)


_SERVER: list[PgServer] = []


def pg_server(request: pytest.FixtureRequest) -> PgServer:
    """The session's server, started on first use and stopped when the session ends."""
    if _SERVER:
        return _SERVER[0]
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.fail("the PostgreSQL store tests need psycopg: pip install 'psycopg[binary]' "
                    "(a dependency of gpum-validator)", pytrace=False)
    try:
        server = start_server()
    except PostgresMissing as e:
        pytest.fail(str(e), pytrace=False)
    _SERVER.append(server)

    def stop() -> None:
        _SERVER.clear()
        stop_server(server)

    request.config.add_cleanup(stop)
    return server


@dataclass
class StoreDB:
    """One empty database of a test on one backend; ``open()`` a store on it."""

    kind: str
    target: str
    opened: list[Any] = field(default_factory=list)

    def open(self) -> Any:
        if self.kind == "sqlite":
            from gpum_validator.store_sqlite import SQLiteStore

            s: Any = SQLiteStore(self.target)
        else:
            from gpum_validator.store_pg import PostgresStore

            s = PostgresStore(self.target)
        self.opened.append(s)
        return s

    def close_all(self) -> None:
        for s in self.opened:
            s.close()


BACKENDS = ("sqlite", "postgresql")


def store_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreDB]:
    """The body of a ``store_db`` fixture parametrized over ``BACKENDS``."""
    if request.param == "sqlite":
        db = StoreDB("sqlite", str(tmp_path / "v.sqlite"))
        try:
            yield db
        finally:
            db.close_all()
        return
    server = pg_server(request)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    server.execute(f"CREATE SCHEMA {schema}")
    db = StoreDB("postgresql", server.url(schema))
    try:
        yield db
    finally:
        db.close_all()
        server.execute(f"DROP SCHEMA {schema} CASCADE")


# ---------------------------------------------------------------------------- store data


def auth_of(p: Any) -> Any:
    """An ``Authenticated`` for a ``WindowProof`` (unsigned: the store checks no signature)."""
    from gpu_market.proof import encode_proof, proof_hash
    from gpum_validator.schema import SignedProof
    from gpum_validator.verify import Authenticated

    raw = encode_proof(p)
    return Authenticated(SignedProof(raw, bytes(64), bytes(64), p.worker_key), p,
                         proof_hash(raw), b"")


def accept(store: Any, p: Any, now: float, *, missed: tuple[int, ...] = ()) -> Any:
    """``record_accepted`` of proof ``p`` on top of what the store holds of its job (each
    window approves its billable seconds); the stored proof."""
    from gpum_validator.verify import Verdict

    st = store.job_state(p.job)
    total = (st.approved_total if st else 0) + p.billable_seconds
    store.record_accepted(auth_of(p), Verdict(missed, p.billable_seconds, p.billable_seconds,
                                              total), st.last_seq if st else None, now)
    return store.accepted_at(p.job, p.seq)


def table_counts(store: Any) -> dict[str, int]:
    """COUNT(*) of every table ``summary`` reports (to check the counters against)."""
    out = {}
    for table in ("jobs", "proofs", "intents", "missed_windows", "attestations_given",
                  "attestations_received", "equivocations"):
        out[table] = int(store._q(f"SELECT COUNT(*) FROM {table}")[0][0])
    return out


def summary_counts(store: Any) -> dict[str, int]:
    """The same counts as ``summary`` reports them."""
    s = store.summary()
    return {"jobs": s["jobs"], "proofs": sum(s["proofs"].values()),
            "intents": sum(s["intents"].values()), "missed_windows": s["missed_windows"],
            "attestations_given": s["attestations_signed"],
            "attestations_received": s["attestations_received"],
            "equivocations": s["equivocations"]}


def bulk_insert(store: Any, table: str, cols: tuple[str, ...], rows: list[tuple]) -> None:
    """Rows straight into a table (COPY on PostgreSQL), around the store's methods: for
    filling big databases fast. The store's derived columns need ``rebuild_derived()`` after."""
    if not rows:
        return
    names = ", ".join(cols)
    with store._tx() as db:
        if store.dialect.name == "postgresql":
            with db.raw.cursor().copy(f"COPY {table} ({names}) FROM STDIN") as cp:
                for r in rows:
                    cp.write_row(r)
        else:
            db.executemany(f"INSERT INTO {table} ({names}) VALUES "
                           f"({', '.join('?' * len(cols))})", rows)


def generated_marks(db: Any) -> None:
    """Put ``jobs.unsettled`` / ``unpaid`` back into schema v4's layout of before they were
    stored: generated columns, no triggers."""
    db.execute("DROP TRIGGER jobs_marks_ins")
    db.execute("DROP TRIGGER jobs_marks_upd")
    for col, seq in (("unsettled", "covered_seq"), ("unpaid", "paid_seq")):
        db.execute(f"DROP INDEX jobs_{col}")
        db.execute(f"ALTER TABLE jobs DROP COLUMN {col}")
        db.execute(f"ALTER TABLE jobs ADD COLUMN {col} INTEGER GENERATED ALWAYS AS "
                   f"(CASE WHEN last_seq > {seq} THEN 1 ELSE 0 END) VIRTUAL")
        db.execute(f"CREATE INDEX jobs_{col} ON jobs (job) WHERE {col} = 1")
