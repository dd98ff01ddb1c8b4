"""``SQLStore``: every query of ``Store``, written once in SQLite's spelling.

The queries live in one module per concern, composed here: ``store_proofs`` (the intake's
proofs and job state), ``store_settle`` (chain facts, settle candidates, intents),
``store_evidence`` (attestations, evidence cases, slash reports), ``store_hardware``
(hardware challenges' verdicts, GPU claims, wrong answers); this module adds the meta
values, the counts of /health (``summary``) and retention (``prune``). ``sql_dialect``
translates each statement for PostgreSQL. Two engines run them: ``store_sqlite.SQLiteStore``
and ``store_pg.PostgresStore``, which provide the connections (``store_base.StoreBase``).

A method that returns has its effect on disk; each public method is one transaction, or
joins the calling thread's ``batch()``. Atomic across processes (PostgreSQL): the "job state
changed" check of ``record_accepted`` is a compare-and-set on the job row;
``record_given_attestation`` relies on the (job, seq) primary key; writes that read before
they decide (``record_equivocation``, ``record_received_attestation``, ``add_intent``, the
caps of ``record_rejected``) first take ``Conn.serialize`` on their key (a
transaction-scoped advisory lock; nothing on SQLite, whose writers are serial anyway).

Row counts for ``summary`` (/health) are kept in ``counters`` by triggers
(``store_schema``). ``prune`` deletes, in small transactions, what jobs closed on chain more
than a retention period ago no longer need; equivocation evidence and the attestations this
validator gave stay.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from .errors import StoreError
from .records import INTENT_STATUSES
from .sql_dialect import Conn, as_int
from .store_evidence import EvidenceQueries
from .store_hardware import HardwareQueries
from .store_proofs import ProofQueries
from .store_schema import SCHEMA_VERSION, TERMINAL_SQL, rebuild_derived
from .store_settle import SettleQueries


class SQLStore(ProofQueries, SettleQueries, EvidenceQueries, HardwareQueries):
    """Every query of ``Store`` (see the module docstring), for ``SQLiteStore`` and
    ``store_pg.PostgresStore``."""

    def rebuild_derived(self) -> None:
        """Recompute what the store derives from its rows (the jobs' ``covered_seq`` and
        ``paid_seq``); the counters are recounted too. For rows written around the store's
        methods (a bulk load); migrations do the same."""
        with self._tx() as db:
            self._rebuild_derived(db)

    def _rebuild_derived(self, db: Conn) -> None:
        rebuild_derived(db)

    # ------------------------------------------------------------------ meta

    def set_meta(self, key: str, value: str) -> None:
        if key == "schema_version":
            raise ValueError("schema_version is managed by the store")
        with self._tx() as db:
            db.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                       "value=excluded.value", (key, value))

    def get_meta(self, key: str) -> str | None:
        rows = self._q("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else None

    # ------------------------------------------------------------------ status

    def summary(self) -> dict[str, object]:
        """Counts for /health, /metrics and ``gpum-validator status``. Cheap whatever the
        database holds: row counts come from ``counters`` (kept by triggers), the last
        settlement from an index, ``pending_windows`` from the unpaid jobs only; only the
        evidence and report tables (rare events) are counted directly."""

        def grouped(db: Conn, sql: str) -> dict[str, int]:
            return {k: as_int(v) for k, v in db.execute(sql).fetchall()}

        with self._read() as db:
            counts = grouped(db, "SELECT name, SUM(value) FROM counters GROUP BY name")
            last = db.execute("SELECT MAX(updated_at) FROM intents "
                              "WHERE status='confirmed'").fetchone()[0]
            out: dict[str, object] = {
                "schema_version": SCHEMA_VERSION,
                "jobs": counts.get("jobs", 0),
                "proofs": {d: counts[f"proofs.{d}"] for d in ("accepted", "rejected")
                           if counts.get(f"proofs.{d}")},
                "intents": {s: counts.get(f"intents.{s}", 0) for s in INTENT_STATUSES},
                "missed_windows": counts.get("missed_windows", 0),
                "equivocations": as_int(db.execute(
                    "SELECT COUNT(*) FROM equivocations").fetchone()[0]),
                "equivocation_reports": grouped(
                    db, "SELECT status, COUNT(*) FROM equivocation_reports GROUP BY status"),
                "attestations_signed": counts.get("attestations_given", 0),
                "attestations_received": counts.get("attestations_received", 0),
                "validator_equivocations": grouped(
                    db, "SELECT COALESCE(status, 'new'), COUNT(*) FROM validator_equivocations "
                    "GROUP BY 1"),
                "downtime_reports": grouped(
                    db, "SELECT status, COUNT(*) FROM downtime_reports GROUP BY status"),
                "last_settlement_at": last,
                "pending_windows": self._pending_windows(db),
            }
            rewards = db.execute("SELECT value FROM meta WHERE key='rewards'").fetchone()
        out["rewards"] = json.loads(rewards[0] if rewards else "null")
        # The keys in their historical order.
        order = ("schema_version", "jobs", "proofs", "intents", "missed_windows",
                 "equivocations", "equivocation_reports", "attestations_signed",
                 "attestations_received", "validator_equivocations", "downtime_reports",
                 "rewards", "last_settlement_at", "pending_windows")
        return {k: out[k] for k in order}

    def pending_windows(self) -> int:
        """Accepted windows not yet covered by a confirmed settlement or the chain (above the
        job's ``paid_seq``); reads the unpaid jobs only (index ``jobs_unpaid``)."""
        with self._read() as db:
            return self._pending_windows(db)

    @staticmethod
    def _pending_windows(db: Conn) -> int:
        return as_int(db.execute(
            "SELECT COUNT(*) FROM jobs j CROSS JOIN proofs p WHERE p.job=j.job "
            "AND p.decision='accepted' AND p.seq>j.paid_seq AND j.unpaid=1"
            ).fetchone()[0])

    # ------------------------------------------------------------------ retention

    def mark_job_closed(self, job: bytes, now: float) -> None:
        """Record that the job's account is gone from the chain (status ``closed``): nothing
        of it settles any more, and ``prune`` may delete it after the retention period."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET chain_status='closed', chain_checked_at=? WHERE job=?",
                       (now, job))

    def stale_open_jobs(self, before: float, limit: int) -> list[bytes]:
        """Up to ``limit`` jobs not known to have ended on chain, with no proof accepted and
        no chain read since ``before``, least recently read first: the ones whose end (or
        closed account) nothing else would notice (``retention.Pruner`` re-reads them)."""
        return [r[0] for r in self._q(
            "SELECT job FROM jobs WHERE (chain_status IS NULL "
            f"OR chain_status NOT IN {TERMINAL_SQL}) AND updated_at<? AND chain_checked_at<? "
            "ORDER BY chain_checked_at LIMIT ?", (before, before, limit))]

    _PRUNABLE = (
        f"j.chain_status IN {TERMINAL_SQL} AND j.ended_at<? AND j.updated_at<? "
        "AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.job=j.job "
        "AND i.status IN ('intended','sent')) "
        "AND NOT EXISTS (SELECT 1 FROM equivocations e WHERE e.job=j.job AND NOT EXISTS "
        "(SELECT 1 FROM equivocation_reports r WHERE r.job=e.job AND r.seq=e.seq "
        "AND r.status IN ('done','failed'))) "
        "AND NOT EXISTS (SELECT 1 FROM validator_equivocations v WHERE v.job=j.job "
        "AND (v.status IS NULL OR v.status NOT IN ('done','failed'))) "
        "AND NOT EXISTS (SELECT 1 FROM downtime_reports d WHERE d.job=j.job "
        "AND d.status NOT IN ('done','failed'))")
    """A job ``prune`` may delete (parameters: ``before`` twice): ended on chain, ended and
    last written before the cutoff, no open intent and no report that is not finished."""

    _PRUNE_STEPS = (
        ("proofs",
         ("DELETE FROM proofs WHERE job=? AND (seq, hash) IN (SELECT seq, hash FROM proofs p "
          "WHERE p.job=? AND NOT EXISTS (SELECT 1 FROM equivocations e WHERE e.job=p.job "
          "AND e.seq=p.seq) LIMIT ?)")),
        ("missed_windows",
         ("DELETE FROM missed_windows WHERE job=? AND seq IN (SELECT seq FROM missed_windows "
          "WHERE job=? LIMIT ?)")),
        ("intents",
         ("DELETE FROM intents WHERE job=? AND id IN (SELECT id FROM intents WHERE job=? "
          "AND status IN ('confirmed','failed') LIMIT ?)")),
        ("attestations_received",
         ("DELETE FROM attestations_received WHERE job=? AND (seq, member, approved_seconds, "
          "proof_hash) IN (SELECT seq, member, approved_seconds, proof_hash FROM "
          "attestations_received a WHERE a.job=? AND NOT EXISTS (SELECT 1 FROM "
          "validator_equivocations v WHERE v.job=a.job AND v.seq=a.seq AND v.member=a.member) "
          "LIMIT ?)")),
        ("downtime_reports",
         ("DELETE FROM downtime_reports WHERE job=? AND last_proof_window_end IN (SELECT "
          "last_proof_window_end FROM downtime_reports WHERE job=? "
          "AND status IN ('done','failed') LIMIT ?)")),
    )
    """What ``prune`` deletes of a job, in this order (one statement each: parameters job,
    job, at most how many rows)."""

    def prune(self, before: float, *, batch_rows: int = 200,
              max_seconds: float | None = None,
              on_batch: Callable[[float], None] | None = None,
              pause: float = 0.002) -> dict[str, int]:
        """Delete what is no longer needed of the jobs that ended on chain
        (``TERMINAL_CHAIN_STATUSES``) before ``before`` and were last written before it, and
        that no open intent and no unfinished report (equivocation, validator equivocation,
        downtime) needs: their proofs, missed windows, intents, received attestations that
        are not evidence, finished downtime reports, then the job row.

        Kept: the proofs at every seq with equivocation evidence, the evidence rows and their
        reports, the attestations of validator-equivocation cases, and every attestation this
        validator gave (``attestations_given``, small: its guard against signing twice).

        Works in transactions of at most ``batch_rows`` deletions each (of one or several
        jobs, each re-checked as still prunable inside the transaction), so no other store
        call waits long, with ``pause`` seconds between them so waiting calls go first;
        ``on_batch`` gets each transaction's duration in ms. Stops after ``max_seconds``
        (None: when done). Returns the rows deleted per table."""
        if batch_rows < 1:
            raise ValueError("batch_rows must be at least 1")
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        deleted = dict.fromkeys(["jobs"] + [t for t, _ in self._PRUNE_STEPS], 0)
        seen: set[bytes] = set()
        while True:
            queue = [r[0] for r in self._q(
                f"SELECT j.job FROM jobs j WHERE {self._PRUNABLE} ORDER BY j.ended_at LIMIT ?",
                (before, before, len(seen) + 64)) if r[0] not in seen]
            if not queue:
                break
            while queue:
                if deadline is not None and time.monotonic() >= deadline:
                    return deleted
                t0 = time.perf_counter()
                room = batch_rows
                with self._tx() as db:
                    while queue and room > 0:
                        done, used = self._prune_some(db, queue[0], before, room, deleted)
                        room -= used
                        if done:
                            seen.add(queue.pop(0))
                if on_batch is not None:
                    on_batch((time.perf_counter() - t0) * 1000)
                time.sleep(pause)
        self._compact_counters()
        return deleted

    def _prune_some(self, db: Conn, job: bytes, before: float, room: int,
                    deleted: dict[str, int]) -> tuple[bool, int]:
        """Delete at most ``room`` rows of ``job`` in the open transaction: (whether the job
        is done with, rows deleted). A job no longer prunable is left as it is (done)."""
        if not db.execute(f"SELECT 1 FROM jobs j WHERE j.job=? AND {self._PRUNABLE}",
                          (job, before, before)).fetchone():
            return True, 0
        used = 0
        for table, delete in self._PRUNE_STEPS:
            left = room - used
            if left <= 0:
                return False, used
            n = max(0, db.execute(delete, (job, job, left)).rowcount)
            deleted[table] += n
            used += n
            if n == left:
                return False, used  # maybe more of this table: the next transaction
        cur = db.execute("DELETE FROM jobs WHERE job=?", (job,))
        deleted["jobs"] += max(0, cur.rowcount)
        return True, used + 1

    def _compact_counters(self) -> None:
        """Fold the counters' shards (PostgreSQL: one per connection); nothing on SQLite."""

    def ping(self) -> bool:
        try:
            self._q("SELECT 1")
            return True
        except StoreError:
            return False

    def write_probe(self, now: float) -> str | None:
        """Write and commit one small row (``meta.write_probe``, durably): None when the
        database takes writes, else why not (a full disk, a read-only file, a failed
        fsync)."""
        try:
            self.set_meta("write_probe", repr(float(now)))
            return None
        except StoreError as e:
            return str(e)

