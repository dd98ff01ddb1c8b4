"""WAL checkpoints off the intake's path (``wal.WalCheckpointer``): the store's own
connection never checkpoints inside a commit, the checkpointer restarts the WAL only
between two transactions, and a failed checkpoint is logged and tried again."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from contextlib import contextmanager

from gpum_validator.store_sqlite import SQLiteStore
from gpum_validator.wal import WalCheckpointer


def write(store: SQLiteStore, n: int, size: int = 3000) -> None:
    """``n`` committed transactions of one meta row each (about one page of WAL each)."""
    for i in range(n):
        store.set_meta(f"k{i}", "x" * size)


def wal_bytes(path) -> int:
    """The WAL file's size: it grows while transactions append to it and stays as it is once
    they write from its start again (a restarted WAL is overwritten, not truncated)."""
    return (path.parent / (path.name + "-wal")).stat().st_size


@contextmanager
def checkpointed(tmp_path, restart_frames: int):
    """A store whose connection does not checkpoint, and a checkpointer not started."""
    path = tmp_path / "v.sqlite"
    store = SQLiteStore(path)
    store._db.execute("PRAGMA wal_autocheckpoint=0")
    ck = WalCheckpointer(path, lambda: store._lock, restart_frames=restart_frames)
    try:
        yield path, store, ck
    finally:
        ck.close()
        store.close()


def test_a_serving_store_leaves_checkpoints_to_its_thread(tmp_path):
    plain = SQLiteStore(tmp_path / "plain.sqlite")
    serving = SQLiteStore(tmp_path / "serving.sqlite", background_checkpoints=True)
    try:
        assert plain._db.execute("PRAGMA wal_autocheckpoint").fetchone() == (1000,)
        assert serving._db.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
        assert serving._checkpointer is not None and serving._checkpointer._thread.is_alive()
        write(serving, 50)
        deadline = time.monotonic() + 10
        while serving._checkpointer.passes == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert serving._checkpointer.passes > 0
    finally:
        plain.close()
        serving.close()
    assert not serving._checkpointer._thread.is_alive()


def test_the_wal_restarts_only_between_transactions(tmp_path):
    """Under writes that never pause, a checkpoint running beside them never lets the WAL
    restart; ``run_once`` copies the rest holding the writers' lock, waiting for an open
    transaction to end, and the next transaction writes from the WAL's start."""
    with checkpointed(tmp_path, 40) as (path, store, ck):
        write(store, 60)
        with store.batch():
            store.set_meta("open", "y" * 3000)  # a transaction in progress
            done = threading.Event()
            t = threading.Thread(target=lambda: (ck.run_once(), done.set()))
            t.start()
            assert not done.wait(0.3)  # the restart pass waits for the transaction
            assert ck.passes == 1 and ck.restarts == 0
        t.join(10)
        assert done.is_set() and ck.restarts == 1
        size = wal_bytes(path)
        assert size >= 60 * 4096
        write(store, 3)
        assert wal_bytes(path) == size  # restarted: written over from the start
        assert store.get_meta("open") == "y" * 3000 and store.get_meta("k59") == "x" * 3000


def test_a_small_wal_is_copied_without_the_writers_lock(tmp_path):
    with checkpointed(tmp_path, 1000) as (_path, store, ck):
        write(store, 10)
        with store.batch():  # held by a writer: the pass must not wait for it
            ck.run_once()
        assert (ck.passes, ck.restarts) == (1, 0)


def test_a_failed_checkpoint_is_logged_and_tried_again(tmp_path, caplog):
    path = tmp_path / "v.sqlite"
    store = SQLiteStore(path)
    ck = WalCheckpointer(path, lambda: store._lock, interval=0.01)
    real, calls = ck._passive, []

    def flaky() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise sqlite3.OperationalError("disk I/O error")
        return real()

    ck._passive = flaky
    try:
        with caplog.at_level(logging.WARNING, logger="gpum_validator.wal"):
            ck.start()
            deadline = time.monotonic() + 10
            while len(calls) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
        assert len(calls) >= 3
        assert any("WAL checkpoint" in r.getMessage() and "disk I/O error" in r.getMessage()
                   for r in caplog.records)
    finally:
        ck.close()
        store.close()
