"""The proofs a validator holds and the job state they advance: the intake's queries.

``ProofQueries`` stores what the intake decided: accepted proofs with their approved seconds
and total, advancing the job row by a compare-and-set on its ``last_seq`` (so a concurrent
accept of the same job, in this process or another sharing a PostgreSQL database, fails with
``StoreError`` instead of overwriting), rejected proofs within ``StoreLimits``, equivocation
evidence and missed seqs; and reads them back for the intake, the fast lane
(``intake_memos``) and the dashboard (``recent_windows``).

Bounds: rejected proofs are capped per job (the lowest seqs that are not equivocation
evidence are evicted first, so a job's newest proofs, which its head and a retry need, stay)
and in total (beyond it new rejections are answered but not stored); a (job, seq) holds at
most ``MAX_PROOFS_PER_SEQ`` different proofs (one evidence pair). The intake only stores
proofs that passed authentication, the job-assignment check and the worker-key check, so
what is stored for a job was signed by that job's provider.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .errors import StoreError
from .records import (
    DEFAULT_LIMITS,
    UPDATED_AT_GRAIN_SECONDS,
    IntakeView,
    StoredProof,
    StoreLimits,
)
from .sql_dialect import ROWS_PER_STATEMENT, Conn, as_int, values_list
from .store_base import StoreBase
from .verify import Authenticated, JobState, Verdict

MAX_PROOFS_PER_SEQ = 2
"""Different proofs kept for one (job, seq): the first and one conflicting (the evidence)."""


def _collapse_moves(job_rows: Sequence[tuple]) -> list[tuple]:
    """The moves of ``record_accepted_rows`` (``last_seq, cumulative_seconds,
    last_window_end, approved_total, updated_at, job, previous last_seq``, in order) as one
    move per job: ``(job, first previous last_seq, last_seq, cumulative_seconds,
    last_window_end, approved_total, windows, updated_at)`` with the job's last values, the
    number of its windows and its last ``updated_at`` that is not None (None if all are),
    which is what applying them one after the other leaves. A job's moves must chain (each
    from the seq the one before moved to): else StoreError, as a failed compare-and-set."""
    out: dict[bytes, list] = {}
    for seq, cum, end, total, stamp, job, prev in job_rows:
        m = out.get(job)
        if m is None:
            out[job] = [job, prev, seq, cum, end, total, 1, stamp]
            continue
        if prev != m[2]:
            raise StoreError("job state changed during verification; resubmit")
        m[2:7] = seq, cum, end, total, m[6] + 1
        if stamp is not None:
            m[7] = stamp
    return [tuple(m) for m in out.values()]


class ProofQueries(StoreBase):
    """Proofs, job state, equivocation evidence and missed windows (see the module
    docstring)."""

    _JOB_STATE_COLS = ("j.last_seq, j.cumulative_seconds, j.last_window_end, j.gpu_uuids, "
                       "j.approved_total, (SELECT hash FROM proofs p WHERE p.job=j.job "
                       "AND p.seq=j.last_seq AND p.decision='accepted')")
    """The columns of a ``JobState`` of the ``jobs`` row ``j`` (``_job_state``)."""

    @staticmethod
    def _job_state(row: Sequence[Any]) -> JobState | None:
        """The ``JobState`` of ``_JOB_STATE_COLS`` values (None when the row is all NULL: an
        outer join found no job)."""
        s, c, w, u, a, h = row
        if s is None:
            return None
        return JobState(s, c, w, tuple(json.loads(u)) if u else None, int(a), h)

    def job_state(self, job: bytes) -> JobState | None:
        rows = self._q(f"SELECT {self._JOB_STATE_COLS} FROM jobs j WHERE j.job=?", (job,))
        return self._job_state(rows[0]) if rows else None

    def proofs_at(self, job: bytes, seq: int) -> list[StoredProof]:
        rows = self._q(f"SELECT {self._PROOF_COLS} FROM proofs WHERE job=? AND seq=? "
                       "ORDER BY received_at", (job, seq))
        return [StoredProof(*r) for r in rows]

    def intake_view(self, job: bytes, seq: int) -> IntakeView:
        """``job_state(job)``, ``proofs_at(job, seq)`` and ``proofs_at(job, seq - 1)`` in two
        queries (the intake's hot path)."""
        rows = self._q(f"SELECT {self._PROOF_COLS} FROM proofs WHERE job=? AND seq IN (?, ?) "
                       "ORDER BY received_at", (job, seq, seq - 1))
        proofs = [StoredProof(*r) for r in rows]
        state = self.job_state(job)
        return IntakeView(state, [x for x in proofs if x.seq == seq],
                          [x for x in proofs if x.seq == seq - 1])

    def accepted_at(self, job: bytes, seq: int) -> StoredProof | None:
        """The accepted proof of (job, seq) (at most one), with its approved total."""
        rows = self._q(f"SELECT {self._PROOF_COLS} FROM proofs WHERE job=? AND seq=? "
                       "AND decision='accepted'", (job, seq))
        return StoredProof(*rows[0]) if rows else None

    def newest_accepted(self, job: bytes) -> StoredProof | None:
        """The accepted proof of ``job`` with the highest seq, or None."""
        rows = self._q(f"SELECT {self._PROOF_COLS} FROM proofs WHERE job=? "
                       "AND decision='accepted' ORDER BY seq DESC LIMIT 1", (job,))
        return StoredProof(*rows[0]) if rows else None

    def _upsert_proof(self, db: Conn, auth: Authenticated, decision: str,
                      reason: str | None, now: float, approved: int | None = None,
                      total: int | None = None) -> None:
        p, s = auth.proof, auth.signed
        db.execute(
            f"INSERT INTO proofs ({self._PROOF_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT (job, seq, hash) DO UPDATE SET decision=excluded.decision, "
            "reason=excluded.reason, received_at=excluded.received_at, "
            "approved_seconds=excluded.approved_seconds, approved_total=excluded.approved_total "
            "WHERE proofs.decision != 'accepted'",
            (p.job, p.seq, auth.hash, s.proof, s.proof_signature, s.receipt_signature,
             p.worker_key, p.cumulative_seconds, p.window_end, now, decision, reason,
             approved, total))

    def decision_of(self, job: bytes, seq: int, hash: bytes) -> str | None:
        """The stored decision of exactly these proof bytes, or None."""
        rows = self._q("SELECT decision FROM proofs WHERE job=? AND seq=? AND hash=?",
                       (job, seq, hash))
        return rows[0][0] if rows else None

    def max_seq(self, job: bytes) -> int:
        """The highest seq stored for ``job`` (accepted or rejected), 0 if none."""
        return int(self._q("SELECT COALESCE(MAX(seq), 0) FROM proofs WHERE job=?",
                           (job,))[0][0])

    def head(self, job: bytes) -> StoredProof | None:
        """The stored proof with the highest seq of ``job``, whatever its decision (at an
        equivocated seq the accepted one, else the first received); None if none."""
        rows = self._q(f"SELECT {self._PROOF_COLS} FROM proofs WHERE job=? "
                       "ORDER BY seq DESC, decision='accepted' DESC, received_at, hash LIMIT 1",
                       (job,))
        return StoredProof(*rows[0]) if rows else None

    def record_rejected(self, auth: Authenticated, reason: str, now: float,
                        limits: StoreLimits = DEFAULT_LIMITS) -> str | None:
        """Store an authenticated proof with decision 'rejected' (never downgrades
        'accepted'; the same bytes again only update reason and time), within ``limits``.

        Returns None when stored, else why not: ``"job_cap"`` (the job holds its maximum of
        rejected proofs and none below this seq can be evicted: all are evidence or higher)
        or ``"total_cap"``.
        """
        p = auth.proof
        with self._tx() as db:
            db.serialize("proofs", p.job)
            if db.execute("SELECT 1 FROM proofs WHERE job=? AND seq=? AND hash=?",
                          (p.job, p.seq, auth.hash)).fetchone():
                self._upsert_proof(db, auth, "rejected", reason, now)
                return None
            total = as_int(db.execute("SELECT SUM(value) FROM counters "
                                      "WHERE name='proofs.rejected'").fetchone()[0])
            if total >= limits.max_rejected_total:
                return "total_cap"
            n = db.execute("SELECT COUNT(*) FROM proofs WHERE decision='rejected' AND job=?",
                           (p.job,)).fetchone()[0]
            excess = n - limits.max_rejected_per_job + 1
            if excess > 0:
                victims = db.execute(
                    "SELECT seq, hash FROM proofs p WHERE decision='rejected' AND job=? "
                    "AND seq<? AND NOT EXISTS (SELECT 1 FROM equivocations e "
                    "WHERE e.job=p.job AND e.seq=p.seq) ORDER BY seq, received_at LIMIT ?",
                    (p.job, p.seq, excess)).fetchall()
                if len(victims) < excess:
                    return "job_cap"
                db.executemany("DELETE FROM proofs WHERE job=? AND seq=? AND hash=?",
                               [(p.job, seq, h) for seq, h in victims])
            self._upsert_proof(db, auth, "rejected", reason, now)
        return None

    def record_accepted(self, auth: Authenticated, verdict: Verdict,
                        stored_last_seq: int | None, now: float) -> None:
        """Atomically store the accepted proof with its approved seconds and total, advance
        the job state, record missed seqs.

        ``stored_last_seq`` is the job's stored last accepted seq the proof was verified
        against (None: none stored); if it moved since (a concurrent accept), StoreError is
        raised and nothing changes. The check is a compare-and-set on the job row (its
        first insert, or an update conditioned on ``last_seq``), so it holds between
        processes sharing one PostgreSQL database too.
        """
        p = auth.proof
        uuids = json.dumps(sorted(g.uuid for g in p.gpus))
        with self._tx() as db:
            if stored_last_seq is None:
                cur = db.execute(
                    "INSERT OR IGNORE INTO jobs (job, last_seq, cumulative_seconds, "
                    "last_window_end, gpu_uuids, accepted_windows, updated_at, approved_total) "
                    "VALUES (?,?,?,?,?,1,?,?)",
                    (p.job, p.seq, p.cumulative_seconds, p.window_end, uuids, now,
                     verdict.approved_total))
            else:
                cur = db.execute(
                    "UPDATE jobs SET last_seq=?, cumulative_seconds=?, last_window_end=?, "
                    "gpu_uuids=?, accepted_windows=accepted_windows+1, "
                    "approved_total=? WHERE job=? AND last_seq=?",
                    (p.seq, p.cumulative_seconds, p.window_end, uuids,
                     verdict.approved_total, p.job, stored_last_seq))
            if cur.rowcount != 1:
                raise StoreError("job state changed during verification; resubmit")
            if stored_last_seq is not None:
                db.execute("UPDATE jobs SET updated_at=? WHERE job=? AND updated_at<=?",
                           (now, p.job, now - UPDATED_AT_GRAIN_SECONDS))
            self._upsert_proof(db, auth, "accepted", None, now, verdict.approved_seconds,
                               verdict.approved_total)
            db.executemany("INSERT OR IGNORE INTO missed_windows VALUES (?,?,?)",
                           [(p.job, s, now) for s in verdict.missed_seqs])

    def record_accepted_rows(self, new_job_rows: list[tuple], job_rows: list[tuple],
                             proof_rows: list[tuple]) -> None:
        """``record_accepted`` of several proofs, each the next seq of its job with the GPU set
        stored (the fast lane, ``fastlane.FastLane``), in this order: the first rows of jobs
        (``job, last_seq, cumulative_seconds, last_window_end, gpu_uuids, updated_at,
        approved_total, info, read_at``: the row is written with the chain facts ``info``
        read at ``read_at`` as ``update_chain_info`` stores them, so a new job costs no
        second write), the moves of job rows (``last_seq, cumulative_seconds,
        last_window_end, approved_total, updated_at, job, previous last_seq``;
        ``updated_at`` None where the stored one is within ``UPDATED_AT_GRAIN_SECONDS``, so
        it is left as it is), the proofs (in ``_PROOF_COLS`` order). The same
        compare-and-set as ``record_accepted``: a job row that exists already or is not at
        its previous ``last_seq``, or a proof row stored already, raises StoreError (the
        caller's transaction is rolled back)."""
        firsts = []
        for r in new_job_rows:
            chain = self._chain_params(r[7], r[8])
            # The flags as ``store_schema._SQLITE_MARKS`` would set them (a second write of
            # the row if left to the trigger; PostgreSQL generates them).
            marks = (int(r[1] > chain[-2]), int(r[1] > chain[-1])) if self._stored_marks else ()
            firsts.append(r[:7] + (1,) + chain + marks)
        marked = ", unsettled, unpaid" if self._stored_marks else ""
        moves = _collapse_moves(job_rows)
        with self._tx() as db:
            # Multi-row statements (``Conn.execute_values``), not ``executemany``.
            db.execute_values(
                "INSERT INTO jobs (job, last_seq, cumulative_seconds, last_window_end, "
                "gpu_uuids, updated_at, approved_total, accepted_windows, "
                f"{self._CHAIN_COLS}, covered_seq, paid_seq{marked}) VALUES {{values}}", firsts)
            moved = 0
            # Never ``SET updated_at`` when it stays: SQLite rewrites the index entries of
            # every column set, changed or not (``jobs_open``: one more page per proof).
            for sql, rows in ((", updated_at=v.column8", [m for m in moves if m[7] is not None]),
                              ("", [m[:7] for m in moves if m[7] is None])):
                if rows:
                    moved += db.execute_values(
                        "UPDATE jobs SET last_seq=v.column3, cumulative_seconds=v.column4, "
                        "last_window_end=v.column5, approved_total=v.column6, "
                        f"accepted_windows=accepted_windows+v.column7{sql} "
                        "FROM (VALUES {values}) AS v "
                        "WHERE jobs.job=v.column1 AND jobs.last_seq=v.column2", rows)
            if moved != len(moves):
                raise StoreError("job state changed during verification; resubmit")
            db.execute_values(f"INSERT INTO proofs ({self._PROOF_COLS}) VALUES {{values}}",
                              proof_rows)

    def intake_memo(self, job: bytes) -> tuple[int, JobState | None, float]:
        """``intake_memos`` of one job."""
        return self.intake_memos([job])[job]

    def intake_memos(self, jobs: Sequence[bytes]
                     ) -> dict[bytes, tuple[int, JobState | None, float]]:
        """Per job: the highest seq stored for it (any decision; 0 if none), its stored state
        (``job_state``; None without a row) and its row's ``updated_at`` (0 without one), in
        one query per ``ROWS_PER_STATEMENT`` jobs: what the fast lane's memo is loaded from."""
        out: dict[bytes, tuple[int, JobState | None, float]] = {}
        unique = list(dict.fromkeys(jobs))
        for lo in range(0, len(unique), ROWS_PER_STATEMENT):
            chunk = unique[lo:lo + ROWS_PER_STATEMENT]
            rows = self._q(
                f"WITH k (job) AS (VALUES {values_list(len(chunk), 1)}) "
                "SELECT k.job, (SELECT COALESCE(MAX(seq), 0) FROM proofs WHERE job=k.job), "
                f"j.updated_at, {self._JOB_STATE_COLS} FROM k LEFT JOIN jobs j ON j.job=k.job",
                chunk)
            for r in rows:
                out[bytes(r[0])] = (int(r[1]), self._job_state(r[3:]), float(r[2] or 0))
        return out

    def intake_memo_valid(self) -> bool:
        """Inside ``batch()``: True when no other connection has written the database since
        the previous call, so the intake's copies of job states (``fastlane.Memo``) still
        hold. False here; SQLite answers from ``PRAGMA data_version``."""
        return False

    def record_equivocation(self, auth: Authenticated, other_hash: bytes, now: float) -> bool:
        """Store the conflicting proof (rejected, reason 'equivocation') and the evidence pair
        with ``other_hash``, unless (job, seq) already holds ``MAX_PROOFS_PER_SEQ`` other
        proofs (one pair is all the slash needs). True when a new evidence pair was stored."""
        p = auth.proof
        a, b = sorted((auth.hash, other_hash))
        with self._tx() as db:
            db.serialize("proofs", p.job)
            hashes = {r[0] for r in db.execute("SELECT hash FROM proofs WHERE job=? AND seq=?",
                                               (p.job, p.seq))}
            if auth.hash not in hashes and len(hashes) >= MAX_PROOFS_PER_SEQ:
                return False
            self._upsert_proof(db, auth, "rejected", "equivocation", now)
            cur = db.execute("INSERT OR IGNORE INTO equivocations VALUES (?,?,?,?,?,NULL)",
                             (p.job, p.seq, a, b, now))
            return cur.rowcount == 1

    def equivocations(self) -> list[tuple[bytes, int, bytes, bytes, float, str | None]]:
        """Evidence pairs (job, seq, hash_a, hash_b, recorded_at, reported_signature)."""
        return [tuple(r) for r in self._q("SELECT * FROM equivocations ORDER BY recorded_at")]

    def missed_windows(self, job: bytes) -> list[int]:
        return [r[0] for r in self._q("SELECT seq FROM missed_windows WHERE job=? ORDER BY seq",
                                      (job,))]

    def recent_windows(self, job: bytes, limit: int) -> list[StoredProof]:
        """The stored proofs of ``job``'s newest ``limit`` seqs, oldest first, one per seq:
        at an equivocated seq the accepted one, else the first received (as ``head``).
        Accepted and rejected proofs alike; ``[]`` when nothing of the job is stored. Reads
        at most ``MAX_PROOFS_PER_SEQ * limit`` rows along the primary key, whatever the
        job's length. ValueError unless ``limit >= 1``."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        rows = self._q(f"SELECT {self._PROOF_COLS} FROM proofs WHERE job=? "
                       "ORDER BY seq DESC, decision='accepted' DESC, received_at, hash LIMIT ?",
                       (job, MAX_PROOFS_PER_SEQ * limit))
        out: list[StoredProof] = []
        for r in rows:
            sp = StoredProof(*r)
            if out and out[-1].seq == sp.seq:
                continue
            out.append(sp)
            if len(out) == limit:
                break
        out.reverse()
        return out
