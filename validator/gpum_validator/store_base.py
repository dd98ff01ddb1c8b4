"""What every query module of the SQL store stands on: the connections and the shared rows.

``StoreBase`` is the contract between the shared queries (``store_proofs``, ``store_settle``,
``store_evidence``, composed into ``store_sql.SQLStore``) and the engines that run them
(``store_sqlite.SQLiteStore``, ``store_pg.PostgresStore``). An engine provides the
connections: ``_tx()`` (one write transaction, or the calling thread's ``batch()``),
``_read()`` (several reads that see one state), ``_q()`` (one read statement), ``batch()``
and ``close()``; every database error leaves them as ``StoreError``. The column lists and
row decoders here are those more than one query module reads (proofs, a job's chain facts).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from .records import ChainJobInfo
from .sql_dialect import SQLITE, Conn, Dialect


class StoreBase:
    """The connections an engine provides (see the module docstring) and the rows the query
    modules share."""

    dialect: Dialect = SQLITE

    _stored_marks = False
    """Whether ``jobs.unsettled`` / ``unpaid`` are stored columns (SQLite,
    ``store_schema._SQLITE_MARKS``) rather than generated ones."""

    serial_writers = False
    """Whether ``batch()`` excludes every other writer of the database, of any process, until
    it ends (SQLite's ``BEGIN IMMEDIATE``), so what it reads stays true until it commits: the
    intake's fast lane runs only then (not on PostgreSQL, whose processes write together)."""

    def _tx(self) -> AbstractContextManager[Conn]:
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[Conn]:
        raise NotImplementedError

    def _q(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        raise NotImplementedError

    def batch(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    _PROOF_COLS = ("job, seq, hash, proof, proof_signature, receipt_signature, worker_key, "
                   "cumulative_seconds, window_end, received_at, decision, reason, "
                   "approved_seconds, approved_total")
    """The columns of a ``StoredProof``, in its fields' order."""

    @staticmethod
    def _chain_params(info: ChainJobInfo, now: float) -> tuple:
        """The values of ``jobs.chain_status`` .. ``chain_checked_at`` (``_CHAIN_COLS``)
        for ``info`` read at ``now``, then the chain's last seq twice (it covers and pays the
        job's windows up to it: ``covered_seq``, ``paid_seq``)."""
        return (info.status, info.last_seq, info.paid_seconds, info.rate_per_second,
                info.escrow_remaining, info.ended_at, info.window_seconds,
                info.claimed_seconds, info.last_window_end, info.started_at,
                info.committee_json, info.quorum,
                info.max_skew_seconds, info.max_missed_windows, now, info.last_seq,
                info.last_seq)

    _CHAIN_COLS = ("chain_status, chain_last_seq, settled_seconds, rate_per_second, "
                   "escrow_remaining, ended_at, window_seconds, chain_claimed_seconds, "
                   "chain_last_window_end, started_at, committee, quorum, max_skew_seconds, "
                   "max_missed_windows, chain_checked_at")

    @staticmethod
    def _chain(cols: Sequence) -> tuple[ChainJobInfo | None, float]:
        (st, cls, paid, rate, esc, ended, ws, claimed, lwe, started, committee, quorum, skew,
         missed, checked) = cols
        if st is None:
            return None, float(checked)
        members = tuple(bytes.fromhex(m) for m in json.loads(committee or "[]"))
        return ChainJobInfo(st, cls, paid, rate, esc, ended, ws, claimed, lwe, started,
                            members, quorum, skew, missed), float(checked)
