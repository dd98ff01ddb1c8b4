"""``/health`` tells the truth about the database: a node whose disk is full answers 503 with
a reason, not ``ok`` while every write it needs fails. The disk is a real, small tmpfs
filled to the last byte (mounting needs root, which the CI runs as)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest
from gpu_market.httpfront import serve_in_thread
from gpum_validator import server as server_module
from gpum_validator.intake import Intake
from gpum_validator.server import ValidatorHTTPServer
from gpum_validator.store_sqlite import SQLiteStore
from vtestkit import T0, FakeChain, cfg


@pytest.fixture
def small_disk(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.fail("mounting a tmpfs needs root (the CI runs the suite as root)")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    try:
        while True:
            os.write(fd, b"\0")
    except OSError:
        pass
    finally:
        os.close(fd)


def test_health_is_503_while_the_disk_is_full(small_disk: Path, monkeypatch) -> None:
    monkeypatch.setattr(server_module, "WRITE_PROBE_S", 0.0)
    monkeypatch.setattr(server_module, "HEALTH_CACHE_S", 0.0)
    store = SQLiteStore(small_disk / "v.sqlite")
    intake = Intake(cfg(), store, FakeChain(), clock=lambda: float(T0))
    server = ValidatorHTTPServer(("127.0.0.1", 0), intake, store, lambda: True)
    serve_in_thread(server)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}",
                          timeout=10) as c:
            r = c.get("/health")
            assert r.status_code == 200 and r.json()["ok"] is True, r.text
            fill(small_disk / "filler")
            r = c.get("/health")
            body = r.json()
            assert r.status_code == 503, r.text
            assert (body["ok"], body["db_writable"], body["reason"]) == \
                (False, False, "database_refuses_writes")
            assert str(small_disk) not in r.text  # no file path is served
            (small_disk / "filler").unlink()
            r = c.get("/health")
            assert r.status_code == 200 and r.json()["reason"] is None, r.text
    finally:
        server.shutdown()
        server.server_close()
        store.close()
