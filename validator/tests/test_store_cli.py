"""``--db`` picks the backend (a path is SQLite, a postgresql:// URL PostgreSQL) and
``--retention-days`` the pruning; ``status`` reads either."""

from __future__ import annotations

import json

import pytest
import storekit
from click.testing import CliRunner
from gpum_validator.cli import main, open_db
from gpum_validator.intake import Intake
from gpum_validator.store_pg import PostgresStore, describe
from gpum_validator.store_sqlite import SQLiteStore
from vtestkit import FakeChain, cfg, chain_of, signed_json


@pytest.fixture(params=storekit.BACKENDS)
def store_db(request, tmp_path):
    yield from storekit.store_db(request, tmp_path)


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_status_reads_either_backend(store_db):
    store = store_db.open()
    assert isinstance(store, SQLiteStore if store_db.kind == "sqlite" else PostgresStore)
    Intake(cfg(), store, FakeChain(), clock=lambda: 1_700_003_600).submit(
        signed_json(chain_of(1)[0]))
    store.close()
    r = run("status", "--db", store_db.target, "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["proofs"] == {"accepted": 1} and s["pending_windows"] == 1
    assert s["schema_version"] == 4


def test_open_db_picks_the_backend(tmp_path):
    s = open_db(str(tmp_path / "new" / "dir" / "v.sqlite"))  # the directory is created
    assert isinstance(s, SQLiteStore)
    s.close()
    assert describe("postgresql://u:hunter2@db.example/gpum") == "postgresql gpum on db.example"
    assert "hunter2" not in describe("postgresql://u:hunter2@db.example/gpum")
    assert describe("/var/lib/v.sqlite") == "/var/lib/v.sqlite"


def test_negative_retention_is_refused(tmp_path):
    r = run("run", "--url", "http://127.0.0.1:1", "--market", "1" * 32, "--keypair",
            str(tmp_path / "k.json"), "--retention-days", "-1")
    assert r.exit_code == 2 and "--retention-days" in r.output


def test_unreachable_postgres_status_is_one_line(tmp_path):
    r = run("status", "--db", f"postgresql://u:pw@/db?host={tmp_path}&connect_timeout=2")
    assert r.exit_code == 2 and r.output.startswith("error: cannot connect")
    assert "pw" not in r.output.replace("postgresql", "")
