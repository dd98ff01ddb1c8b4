"""Hardware challenges in the store, on SQLite and PostgreSQL: verdicts (latest per provider,
their signatures), GPU UUID claims, wrong-answer evidence and its report state, and a
database written before these tables (they are added on open)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import storekit
from gpum_validator.hardware import Declared, HardwareVerdict, WrongAnswer
from storekit import accept
from vtestkit import make_proof


@pytest.fixture(params=storekit.BACKENDS)
def store_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[storekit.StoreDB]:
    yield from storekit.store_db(request, tmp_path)


P1, P2 = b"\x01" * 32, b"\x02" * 32
KEY = b"\x05" * 32


def verdict(provider: bytes, n: int, at: float, passed: bool = True) -> HardwareVerdict:
    return HardwareVerdict(provider, bytes([n]) * 32, 1_800_000_000 + n,
                           Declared(provider, KEY, "H100 80GB HBM3", 8, 81559), passed,
                           () if passed else ("too_slow: GPU 0: slow",),
                           {"why": "random", "gpus": [{"uuid": "GPU-x"}]}, at)


def evidence(row: int) -> WrongAnswer:
    return WrongAnswer(P1, KEY, 3, b"\x07" * 32, 1_800_000_000, b"\x08" * 32, 8192, row,
                       b"\x09" * 32, (b"\x0a" * 32, b"\x0b" * 32), b"\x00\x01" * 8, b"\x0c" * 64,
                       b"\x0d" * 64)


def test_verdicts(store_db: storekit.StoreDB) -> None:
    s = store_db.open()
    assert s.latest_hardware_verdict(P1) is None and s.latest_hardware_verdicts() == {}
    a, b = verdict(P1, 1, 100.0), verdict(P1, 2, 200.0, passed=False)
    c = verdict(P2, 3, 150.0)
    for v in (a, b, c):
        s.record_hardware_verdict(v)
    s.record_hardware_verdict(replace(a, passed=False))  # one verdict per challenge
    assert s.latest_hardware_verdict(P1) == b
    assert s.latest_hardware_verdicts() == {P1: b, P2: c}
    s.set_hardware_attestations(P1, b.challenge, {"me": "c2ln"})
    store_db.close_all()
    s = store_db.open()  # a restart
    got = s.latest_hardware_verdict(P1)
    assert got.attestations == {"me": "c2ln"} and got.codes == ("too_slow",)
    assert got.declared == b.declared and got.detail == b.detail


def test_gpu_claims(store_db: storekit.StoreDB) -> None:
    s = store_db.open()
    s.record_gpu_claims(P1, ["GPU-a", "GPU-b", "GPU-a"], "verdict", 10.0)
    s.record_gpu_claims(P1, ["GPU-a"], "verdict", 20.0)  # seen again
    s.record_gpu_claims(P2, ["GPU-b"], "proof", 30.0)
    s.record_gpu_claims(P2, [], "proof", 30.0)
    assert s.gpu_claimants(["GPU-a", "GPU-b", "GPU-c"]) == {"GPU-a": {P1}, "GPU-b": {P1, P2}}
    many = [f"GPU-{i}" for i in range(600)]
    s.record_gpu_claims(P2, many, "proof", 40.0)
    assert len(s.gpu_claimants(many)) == 600


def test_wrong_answers(store_db: storekit.StoreDB) -> None:
    s = store_db.open()
    assert s.record_wrong_answer(evidence(4), 1.0)
    assert not s.record_wrong_answer(evidence(4), 2.0)  # kept once
    assert s.record_wrong_answer(evidence(9), 3.0)
    assert s.wrong_answers(P1) == [evidence(4), evidence(9)]
    assert s.wrong_answers(P2) == []
    s.mark_wrong_answer(evidence(4), "done", 5.0, signature="sig")
    assert s.wrong_answers(unreported=True) == [evidence(9)]
    s.mark_wrong_answer(evidence(9), "retry", 6.0, error="rpc down")
    assert s.wrong_answers(unreported=True) == [evidence(9)]


def test_jobs_updated_since(store_db: storekit.StoreDB) -> None:
    s = store_db.open()
    assert s.jobs_updated_since(0) == []
    accept(s, make_proof(), 100.0)
    assert s.jobs_updated_since(0) == [(make_proof().job, 100.0)]
    assert s.jobs_updated_since(100.0) == []


def test_a_database_from_before_the_hardware_tables_gets_them(tmp_path: Path) -> None:
    from gpum_validator.store_sqlite import SQLiteStore

    path = tmp_path / "old.sqlite"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    for table in ("hardware_verdicts", "gpu_claims", "wrong_answers"):
        db.execute(f"DROP TABLE {table}")
    db.commit()
    db.close()
    s = SQLiteStore(path)
    try:
        s.record_hardware_verdict(verdict(P1, 1, 1.0))
        assert s.latest_hardware_verdict(P1) is not None
    finally:
        s.close()
