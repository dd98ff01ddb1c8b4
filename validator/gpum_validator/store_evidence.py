"""Attestations, evidence cases and the slash reports built on them.

``EvidenceQueries`` keeps the attestations this validator signed as a committee member
(``attestations_given``: at most one value per (job, seq), on disk before the signature
leaves the process) and those it received as a leader (``attestations_received``, kept as
evidence: a member that signed two values for one (job, seq) becomes a
validator-equivocation case), and the state of the three slash reports (``ReportKind``).

One marking path for every report: ``mark_report`` moves a report's ``SlashReport`` state,
whatever its kind, with one statement shape; ``DONE`` and ``FAILED`` are terminal and never
reopened. A provider's equivocation report and a downtime report are rows of their own,
written by their first mark; a validator-equivocation case carries its report's state in
its own row (written with the evidence), so a mark of a case that does not exist changes
nothing. Each report table keeps its columns (``status``, ``signature``, ``outcome``,
``attempts``, ``last_error``, ``next_attempt_at``, ``updated_at``) as the schema has them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .records import (
    DowntimeReport,
    EquivocationCase,
    GivenAttestation,
    ReceivedAttestation,
    ReportKind,
    ReportStatus,
    ValidatorEquivocationCase,
)
from .store_base import StoreBase

_REPORT_COLS = "status, signature, outcome, attempts, last_error, next_attempt_at, updated_at"
"""The columns of a report's state (``SlashReport``), the same in every report table."""
_TERMINAL_REPORT_SQL = "(" + ", ".join(f"'{s.value}'" for s in ReportStatus if s.terminal) + ")"


@dataclass(frozen=True)
class _ReportTable:
    """Where the state of one ``ReportKind`` lives."""

    name: str
    key: tuple[str, ...]
    """The columns of the report's key, in the order ``mark_report`` takes them."""
    own_rows: bool
    """Whether the first mark writes the row (else the evidence wrote it: marks update it)."""


_REPORT_TABLES = {
    ReportKind.EQUIVOCATION: _ReportTable("equivocation_reports", ("job", "seq"), True),
    ReportKind.VALIDATOR_EQUIVOCATION: _ReportTable("validator_equivocations",
                                                    ("job", "seq", "member"), False),
    ReportKind.DOWNTIME: _ReportTable("downtime_reports", ("job", "last_proof_window_end"),
                                      True),
}


def _report_state(cols: Sequence[Any]) -> dict[str, Any]:
    """The ``SlashReport`` fields of ``_REPORT_COLS`` values."""
    status, signature, outcome, attempts, last_error, next_attempt_at, updated_at = cols
    return {"status": None if status is None else ReportStatus(status),
            "signature": signature, "outcome": outcome, "attempts": attempts,
            "last_error": last_error, "next_attempt_at": next_attempt_at,
            "updated_at": updated_at}


class EvidenceQueries(StoreBase):
    """Attestations given and received, evidence cases, slash reports (see the module
    docstring)."""

    # ------------------------------------------------------------------ attestations

    _GIVEN_COLS = "job, seq, approved_seconds, proof_hash, signature, requester, signed_at"

    def given_attestation(self, job: bytes, seq: int) -> GivenAttestation | None:
        """The value this validator signed for (job, seq), if any."""
        rows = self._q(f"SELECT {self._GIVEN_COLS} FROM attestations_given WHERE job=? AND seq=?",
                       (job, seq))
        return GivenAttestation(*rows[0]) if rows else None

    def record_given_attestation(self, att: GivenAttestation) -> GivenAttestation:
        """Store ``att`` unless (job, seq) already holds one; returns what is stored (the
        earlier one if there was one). On disk before it returns, so a signature that leaves
        the process is never followed by a different value for the same (job, seq), also
        after a crash."""
        with self._tx() as db:
            db.execute(f"INSERT OR IGNORE INTO attestations_given ({self._GIVEN_COLS}) "
                       "VALUES (?,?,?,?,?,?,?)",
                       (att.job, att.seq, att.approved_seconds, att.proof_hash, att.signature,
                        att.requester, att.signed_at))
            row = db.execute(f"SELECT {self._GIVEN_COLS} FROM attestations_given "
                             "WHERE job=? AND seq=?", (att.job, att.seq)).fetchone()
        return GivenAttestation(*row)

    _RECEIVED_COLS = ("job, seq, member, approved_seconds, cumulative_seconds, window_end, "
                      "proof_hash, signature, received_at")

    def record_received_attestation(self, att: ReceivedAttestation) -> bool:
        """Keep a valid attestation of another member (evidence). True when it makes a new
        validator-equivocation case: the member had signed a different (receipt, approved)
        for the same (job, seq)."""
        with self._tx() as db:
            db.serialize("attestations_received", att.job, att.seq, att.member)
            db.execute(f"INSERT OR IGNORE INTO attestations_received ({self._RECEIVED_COLS}) "
                       "VALUES (?,?,?,?,?,?,?,?,?)",
                       (att.job, att.seq, att.member, att.approved_seconds,
                        att.cumulative_seconds, att.window_end, att.proof_hash, att.signature,
                        att.received_at))
            n = db.execute("SELECT COUNT(*) FROM attestations_received WHERE job=? AND seq=? "
                           "AND member=?", (att.job, att.seq, att.member)).fetchone()[0]
            if n < 2:
                return False
            cur = db.execute("INSERT OR IGNORE INTO validator_equivocations (job, seq, member, "
                             "recorded_at, updated_at) VALUES (?,?,?,?,?)",
                             (att.job, att.seq, att.member, att.received_at, att.received_at))
            return cur.rowcount == 1

    def received_attestations(self, job: bytes, seq: int,
                              member: bytes | None = None) -> list[ReceivedAttestation]:
        """Attestations received for (job, seq) (of ``member`` only, if given), oldest first."""
        sql = f"SELECT {self._RECEIVED_COLS} FROM attestations_received WHERE job=? AND seq=?"
        args: tuple = (job, seq)
        if member is not None:
            sql += " AND member=?"
            args += (member,)
        return [ReceivedAttestation(*r) for r in self._q(sql + " ORDER BY received_at, "
                                                         "approved_seconds", args)]

    # ------------------------------------------------------------------ slash reports

    def equivocation_cases(self, *, open_only: bool = False) -> list[EquivocationCase]:
        """One case per (job, seq) with evidence (its first recorded pair), with the state of
        its slash report; ``open_only`` leaves out cases whose report is done or failed."""
        rows = self._q(
            "SELECT e.job, e.seq, e.hash_a, e.hash_b, e.recorded_at, r.status, r.signature, "
            "r.outcome, COALESCE(r.attempts, 0), r.last_error, COALESCE(r.next_attempt_at, 0), "
            "COALESCE(r.updated_at, 0) "
            "FROM equivocations e LEFT JOIN equivocation_reports r "
            "ON r.job = e.job AND r.seq = e.seq "
            "ORDER BY e.recorded_at, e.hash_a, e.hash_b")
        out: dict[tuple[bytes, int], EquivocationCase] = {}
        for r in rows:
            case = EquivocationCase(*r[:5], **_report_state(r[5:]))
            if open_only and case.status is not None and case.status.terminal:
                continue
            out.setdefault((case.job, case.seq), case)
        return list(out.values())

    def validator_equivocation_cases(self, *, open_only: bool = False
                                     ) -> list[ValidatorEquivocationCase]:
        """Members caught signing two values for one (job, seq), with their report state."""
        sql = (f"SELECT job, seq, member, recorded_at, {_REPORT_COLS} "
               "FROM validator_equivocations")
        if open_only:
            sql += f" WHERE status IS NULL OR status NOT IN {_TERMINAL_REPORT_SQL}"
        return [ValidatorEquivocationCase(*r[:4], **_report_state(r[4:]))
                for r in self._q(sql + " ORDER BY recorded_at")]

    def downtime_report(self, job: bytes, last_proof_window_end: int) -> DowntimeReport | None:
        rows = self._q(f"SELECT job, last_proof_window_end, {_REPORT_COLS} "
                       "FROM downtime_reports WHERE job=? AND last_proof_window_end=?",
                       (job, last_proof_window_end))
        return DowntimeReport(*rows[0][:2], **_report_state(rows[0][2:])) if rows else None

    def downtime_reports(self) -> list[DowntimeReport]:
        return [DowntimeReport(*r[:2], **_report_state(r[2:])) for r in self._q(
            f"SELECT job, last_proof_window_end, {_REPORT_COLS} FROM downtime_reports "
            "ORDER BY updated_at")]

    def mark_report(self, kind: ReportKind, key: tuple, status: ReportStatus | str,
                    now: float, *, signature: str | None = None, outcome: str | None = None,
                    error: str | None = None, next_attempt_at: float | None = None,
                    count_attempt: bool = False) -> None:
        """Record the state of the ``kind`` report of ``key`` (``SlashReport.key``: (job, seq),
        (job, seq, member) or (job, last_proof_window_end)): the new ``status``; the
        ``signature``, ``outcome``, ``error`` and ``next_attempt_at`` given (None keeps the
        stored one); one more attempt if ``count_attempt``. A report that is done or failed is
        never reopened (the mark changes nothing). ``DONE`` with a signature of a provider's
        equivocation also stamps its evidence rows (``reported_signature``)."""
        try:
            status = ReportStatus(status)
        except ValueError:
            raise ValueError(f"unknown report status {status!r}") from None
        table = _REPORT_TABLES[kind]
        if len(key) != len(table.key):
            raise ValueError(f"a {kind.value} report is keyed by {', '.join(table.key)}")
        t = table.name
        n = 1 if count_attempt else 0
        update = (f"status=?, signature=COALESCE(?, {t}.signature), "
                  f"outcome=COALESCE(?, {t}.outcome), attempts={t}.attempts+?, "
                  f"last_error=COALESCE(?, {t}.last_error), "
                  f"next_attempt_at=COALESCE(?, {t}.next_attempt_at), updated_at=?")
        values = (status.value, signature, outcome, n, error, next_attempt_at, now)
        still_open = f"({t}.status IS NULL OR {t}.status NOT IN {_TERMINAL_REPORT_SQL})"
        keys = ", ".join(table.key)
        with self._tx() as db:
            if table.own_rows:
                db.execute(
                    f"INSERT INTO {t} ({keys}, {_REPORT_COLS}) VALUES "
                    f"({', '.join('?' * (len(key) + 7))}) "
                    f"ON CONFLICT ({keys}) DO UPDATE SET {update} WHERE {still_open}",
                    tuple(key) + (status.value, signature, outcome, n, error,
                                  next_attempt_at or 0.0, now) + values)
            else:
                db.execute(f"UPDATE {t} SET {update} WHERE "
                           + " AND ".join(f"{k}=?" for k in table.key) + f" AND {still_open}",
                           values + tuple(key))
            if (kind is ReportKind.EQUIVOCATION and status is ReportStatus.DONE
                    and signature is not None):
                db.execute("UPDATE equivocations SET reported_signature=? WHERE job=? AND seq=?",
                           (signature, *key))
