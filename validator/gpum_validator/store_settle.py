"""A job's chain facts, the settle candidates and the settlement intents: the settler's
queries.

Scale: nothing here reads a whole table. Each ``jobs`` row carries ``covered_seq`` (the
highest seq settled on chain or named by any intent) and ``paid_seq`` (settled on chain or by
a confirmed intent), maintained by ``update_chain_info``, ``add_intent`` and ``mark_intent``,
and the flags ``unsettled`` / ``unpaid`` (the newest accepted seq is above them; kept by the
database, ``store_schema``); partial indexes on the flags hold only those jobs, so
``settle_candidates`` (and ``store_sql.SQLStore.pending_windows``) read the active jobs only.

An intent (``add_intent``, status ``intended``) is on disk before its settlement is sent;
``mark_intent`` moves it on, and ``confirmed`` and ``failed`` are terminal, never reopened.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .records import (
    INTENT_STATUSES,
    ChainJobInfo,
    Intent,
    JobRow,
    SettleCandidate,
    StoredProof,
)
from .store_base import StoreBase
from .store_schema import TERMINAL_SQL


class SettleQueries(StoreBase):
    """Chain facts, jobs, settle candidates and intents (see the module docstring)."""

    SETTLE_PAGE = 128
    """Jobs ``settle_candidates`` reads per statement."""

    def update_chain_info(self, job: bytes, info: ChainJobInfo, now: float) -> None:
        """Remember the job's chain facts (status, escrow, settled seq, terms, committee)
        read at ``now``; the chain's last seq also covers the job's windows up to it."""
        self.update_chain_infos([(job, info)], now)

    def update_chain_infos(self, items: Sequence[tuple[bytes, ChainJobInfo]],
                           now: float) -> None:
        """``update_chain_info`` of several jobs, in one statement."""
        with self._tx() as db:
            db.executemany(
                "UPDATE jobs SET chain_status=?, chain_last_seq=?, settled_seconds=?, "
                "rate_per_second=?, escrow_remaining=?, ended_at=?, window_seconds=?, "
                "chain_claimed_seconds=?, chain_last_window_end=?, started_at=?, committee=?, "
                "quorum=?, max_skew_seconds=?, max_missed_windows=?, chain_checked_at=?, "
                "covered_seq=MAX(covered_seq, ?), paid_seq=MAX(paid_seq, ?) "
                "WHERE job=?", [self._chain_params(info, now) + (job,) for job, info in items])

    def chain_info(self, job: bytes) -> tuple[ChainJobInfo | None, float]:
        """The job's chain facts as last stored and when they were read (None, 0: never)."""
        rows = self._q(f"SELECT {self._CHAIN_COLS} FROM jobs WHERE job=?", (job,))
        return self._chain(rows[0]) if rows else (None, 0.0)

    def jobs(self, *, open_only: bool = False) -> list[JobRow]:
        """Every job with accepted proofs, with its newest accepted window and chain facts;
        ``open_only``: only those not known to have ended on chain (not in
        ``TERMINAL_CHAIN_STATUSES``)."""
        where = (f" WHERE chain_status IS NULL OR chain_status NOT IN {TERMINAL_SQL}"
                 if open_only else "")
        rows = self._q(f"SELECT job, last_seq, cumulative_seconds, last_window_end, "
                       f"approved_total, {self._CHAIN_COLS} FROM jobs{where} ORDER BY job")
        out = []
        for r in rows:
            chain, checked = self._chain(r[5:])
            out.append(JobRow(r[0], r[1], r[2], r[3], r[4], chain, checked))
        return out

    def settle_candidates(self) -> list[SettleCandidate]:
        """Jobs whose newest accepted seq is above every intent's seq and the chain's last_seq
        (``covered_seq``), unless the chain says they ended (``TERMINAL_CHAIN_STATUSES``:
        nothing of them can settle any more).

        Read along the ``jobs_unsettled`` index, which holds only such jobs, in pages of
        ``SETTLE_PAGE`` jobs (one short statement each, so the intake never waits for a whole
        pass): the cost grows with the active jobs and their unsettled windows, never with
        finished ones."""
        # A failed intent also covers its receipt: a terminal failure is never retried with
        # the same receipt (only a newer accepted receipt makes a new intent).
        latest_cols = ", ".join(f"l.{c.strip()}" for c in self._PROOF_COLS.split(","))
        sql = ("SELECT j.cumulative_seconds, j.covered_seq, "
               "(SELECT COUNT(*) FROM proofs u WHERE u.job=j.job AND u.decision='accepted' "
               "AND u.seq>j.covered_seq), "
               "(SELECT u.window_end FROM proofs u WHERE u.job=j.job AND u.decision='accepted' "
               "AND u.seq>j.covered_seq ORDER BY u.seq LIMIT 1), "
               f"{self._CHAIN_COLS}, {latest_cols} "
               # CROSS JOIN: SQLite keeps jobs (its partial index) as the outer loop.
               "FROM jobs j CROSS JOIN proofs l WHERE l.job=j.job AND l.seq=j.last_seq "
               "AND l.decision='accepted' AND j.unsettled=1 AND (j.chain_status IS NULL "
               f"OR j.chain_status NOT IN {TERMINAL_SQL}) AND j.job>? ORDER BY j.job LIMIT ?")
        out: list[SettleCandidate] = []
        n_chain = self._CHAIN_COLS.count(",") + 1
        after = b""
        while True:
            rows = self._q(sql, (after, self.SETTLE_PAGE))
            for r in rows:
                cum, covered, unsettled, oldest_end = r[:4]
                chain, checked = self._chain(r[4:4 + n_chain])
                latest = StoredProof(*r[4 + n_chain:])
                out.append(SettleCandidate(latest.job, latest, int(covered), int(unsettled),
                                           int(oldest_end), cum, chain, checked,
                                           int(latest.approved_total or 0)))
            if len(rows) < self.SETTLE_PAGE:
                return out
            after = out[-1].job

    _INTENT_COLS = ("id, job, seq_from, seq_to, cumulative_seconds, window_end, proof_hash, "
                    "worker_key, receipt_signature, status, signature, attempts, last_error, "
                    "next_attempt_at, created_at, updated_at, approved_seconds, attestations")

    @staticmethod
    def _intent(row: Sequence) -> Intent:
        *head, approved, atts = row
        pairs = tuple((bytes.fromhex(a), bytes.fromhex(s)) for a, s in json.loads(atts or "[]"))
        return Intent(*head, approved_seconds=int(head[4] if approved is None else approved),
                      attestations=pairs)

    def add_intent(self, proof: StoredProof, seq_from: int, now: float,
                   approved_seconds: int | None = None,
                   attestations: Sequence[tuple[bytes, bytes]] = ()) -> Intent:
        """Durably record the intent to settle ``proof``'s receipt with ``approved_seconds``
        (default: this validator's total at it) and the other members' ``attestations``
        (status 'intended')."""
        approved = (int(proof.approved_total or 0) if approved_seconds is None
                    else int(approved_seconds))
        atts = json.dumps([[bytes(a).hex(), bytes(sig).hex()] for a, sig in attestations])
        with self._tx() as db:
            db.serialize("intents", proof.job)
            rows = db.execute(
                "INSERT INTO intents (job, seq_from, seq_to, cumulative_seconds, window_end, "
                "proof_hash, worker_key, receipt_signature, status, created_at, updated_at, "
                "approved_seconds, attestations) VALUES (?,?,?,?,?,?,?,?,'intended',?,?,?,?) "
                f"RETURNING {self._INTENT_COLS}",
                (proof.job, seq_from, proof.seq, proof.cumulative_seconds, proof.window_end,
                 proof.hash, proof.worker_key, proof.receipt_signature, now, now, approved,
                 atts)).fetchall()
            db.execute("UPDATE jobs SET covered_seq=MAX(covered_seq, ?) WHERE job=?",
                       (proof.seq, proof.job))
        return self._intent(rows[0])

    def open_intents(self) -> list[Intent]:
        return [self._intent(r) for r in self._q(
            f"SELECT {self._INTENT_COLS} FROM intents WHERE status IN ('intended','sent') "
            "ORDER BY id")]

    def intents(self, job: bytes | None = None) -> list[Intent]:
        if job is None:
            rows = self._q(f"SELECT {self._INTENT_COLS} FROM intents ORDER BY id")
        else:
            rows = self._q(f"SELECT {self._INTENT_COLS} FROM intents WHERE job=? ORDER BY id",
                           (job,))
        return [self._intent(r) for r in rows]

    def mark_intent(self, intent_id: int, status: str, now: float, *,
                    signature: str | None = None, error: str | None = None,
                    next_attempt_at: float | None = None,
                    count_attempt: bool = False) -> None:
        """Move an intent to ``status``; confirmed/failed are terminal and never reopened."""
        if status not in INTENT_STATUSES:
            raise ValueError(f"unknown intent status {status!r}")
        with self._tx() as db:
            cur = db.execute(
                "UPDATE intents SET status=?, signature=COALESCE(?, signature), "
                "last_error=COALESCE(?, last_error), next_attempt_at=COALESCE(?, next_attempt_at),"
                " attempts=attempts+?, updated_at=? "
                "WHERE id=? AND status IN ('intended','sent')",
                (status, signature, error, next_attempt_at, 1 if count_attempt else 0, now,
                 intent_id))
            if status == "confirmed" and cur.rowcount == 1:
                db.execute("UPDATE jobs SET paid_seq=MAX(paid_seq, (SELECT seq_to FROM intents "
                           "WHERE id=?)) WHERE job=(SELECT job FROM intents WHERE id=?)",
                           (intent_id, intent_id))


    def recent_intents(self, job: bytes | None, limit: int) -> list[Intent]:
        """The newest ``limit`` settlement intents (of ``job``, or of every job when None),
        newest first, whatever their status. ValueError unless ``limit >= 1``."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if job is None:
            rows = self._q(f"SELECT {self._INTENT_COLS} FROM intents ORDER BY id DESC LIMIT ?",
                           (limit,))
        else:
            rows = self._q(f"SELECT {self._INTENT_COLS} FROM intents WHERE job=? "
                           "ORDER BY id DESC LIMIT ?", (job, limit))
        return [self._intent(r) for r in rows]
