"""SQLite WAL checkpoints on a thread of their own, off the intake's path.

With SQLite's default (``wal_autocheckpoint``), the connection whose commit takes the WAL
past 1,000 pages copies them into the database file and fsyncs it inside that commit: the
group commit's leader, every fourth round or so at the validator's rate, 10-15 ms more on
the answers of everything in that round (measured, validator/README.md *Throughput*).
``WalCheckpointer`` moves that work to a thread with its own connection:

* every ``interval`` seconds it runs a ``PASSIVE`` checkpoint, which copies the frames
  committed so far into the database file and fsyncs it while writers go on (no lock of the
  store, no SQLite lock a writer waits for);
* a WAL only starts again from its beginning when a write transaction begins with every
  frame copied, which under steady writes never happens by itself (the writers append
  while the copy runs: the WAL grew to the whole database, 100 MB, in a 2 s bench). So once
  the WAL holds ``restart_frames`` frames it runs one more ``PASSIVE`` holding the store's
  lock, between two transactions: it copies the few frames committed since the first pass,
  and the next transaction restarts the WAL. The WAL stays within about
  ``restart_frames`` plus what is committed during one ``interval``.

Durability is unchanged: a commit is on disk once its frames are fsynced into the WAL
(``SQLiteStore.make_durable``); a checkpoint only moves committed pages into the database
file, and this connection (``synchronous=FULL``) fsyncs the WAL before and the database file
after it.
A checkpoint that fails (disk full, I/O error) is logged and tried again at the next
interval; the WAL grows meanwhile, as it would with SQLite's own checkpoints failing.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

log = logging.getLogger("gpum_validator.wal")

RESTART_FRAMES = 1000
"""WAL frames after which the WAL is made to restart (SQLite's own autocheckpoint size)."""
INTERVAL_SECONDS = 0.05


class WalCheckpointer:
    """Checkpoints the WAL of the SQLite database at ``path`` on its own thread (``start``)
    or when called (``run_once``). ``writers_lock`` is what every writer of this process
    holds for the length of a transaction (``SQLiteStore``'s lock)."""

    def __init__(self, path: Path, writers_lock: Callable[[], AbstractContextManager[object]],
                 restart_frames: int = RESTART_FRAMES,
                 interval: float = INTERVAL_SECONDS) -> None:
        self.path = path
        self.writers_lock = writers_lock
        self.restart_frames = restart_frames
        self.interval = interval
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False,
                                   timeout=30)
        self._db.execute("PRAGMA synchronous=FULL")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        """Checkpoints run so far (for tests)."""
        self.restarts = 0
        """Of them, the passes run holding the writers' lock (the WAL restarts after each)."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="wal-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.run_once()
            except sqlite3.Error as e:
                log.warning("WAL checkpoint of %s failed (tried again in %.2f s): %s",
                            self.path, self.interval, e)

    def _passive(self) -> int:
        """One PASSIVE checkpoint; the frames in the WAL (-1 when the file is not in WAL
        mode)."""
        self.passes += 1
        return int(self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])

    def run_once(self) -> None:
        """Copy what is committed into the database file; once the WAL holds
        ``restart_frames`` frames, copy the rest between two transactions so that the next
        one restarts the WAL."""
        if self._passive() >= self.restart_frames:
            with self.writers_lock():
                self._passive()
                self.restarts += 1

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._db.close()
