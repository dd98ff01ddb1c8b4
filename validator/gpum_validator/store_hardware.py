"""Hardware challenges in the store: verdicts, GPU UUID claims, wrong-answer evidence.

``hardware_verdicts``: one row per challenge this validator judged (``hardware.HardwareVerdict``;
reasons and detail as JSON, the quorum's signatures as ``attestations``); the latest per
provider is what ``GET /v1/providers/<provider>/hardware`` serves and what a peer's verdict is
compared with (``hardware_quorum``). ``gpu_claims``: which providers claimed a GPU UUID, in a
verdict (``source`` 'verdict') or in an accepted window proof ('proof'), with when it was
first and last seen. ``wrong_answers``: rows a worker opened whose signed path misses its
signed root (``hardware.WrongAnswer``), kept for ``slash_wrong_answer`` with the report's
state columns of the other slash reports. The tables are ``store_schema.HARDWARE_TABLES``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .hardware import Declared, HardwareVerdict, WrongAnswer
from .store_base import StoreBase

_VERDICT_COLS = ("provider, challenge, challenged_at, worker_key, gpu_model, gpu_count, "
                 "vram_mib, passed, reasons, detail, attestations, recorded_at, attested_tx, "
                 "attest_error")
_WRONG_COLS = ("provider, worker_key, gpu_index, challenge, challenged_at, root, leaf_count, "
               "row_index, leaf_hash, siblings, row_bytes, answer_signature, row_signature")


def _verdict(row: Sequence[Any]) -> HardwareVerdict:
    (provider, challenge, at, worker_key, model, count, vram, passed, reasons, detail,
     attestations, recorded_at, tx, error) = row
    extra = {k: v for k, v in (("attested_tx", tx), ("attest_error", error)) if v is not None}
    return HardwareVerdict(bytes(provider), bytes(challenge), int(at),
                           Declared(bytes(provider), bytes(worker_key), model, int(count),
                                    int(vram)),
                           bool(passed), tuple(json.loads(reasons)),
                           {**json.loads(detail), **extra}, float(recorded_at),
                           json.loads(attestations))


def _wrong(row: Sequence[Any]) -> WrongAnswer:
    (provider, worker_key, gpu, challenge, at, root, count, index, leaf, siblings, data,
     answer_sig, row_sig) = row
    s = bytes(siblings)
    return WrongAnswer(bytes(provider), bytes(worker_key), int(gpu), bytes(challenge), int(at),
                       bytes(root), int(count), int(index), bytes(leaf),
                       tuple(s[i:i + 32] for i in range(0, len(s), 32)), bytes(data),
                       bytes(answer_sig), bytes(row_sig))


class HardwareQueries(StoreBase):
    """Verdicts, claims and evidence of hardware challenges (see the module docstring)."""

    def record_hardware_verdict(self, v: HardwareVerdict) -> None:
        d = v.declared
        with self._tx() as db:
            db.execute(f"INSERT OR IGNORE INTO hardware_verdicts ({_VERDICT_COLS}) "
                       "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       (v.provider, v.challenge, v.challenged_at, d.worker_key, d.gpu_model,
                        d.gpu_count, d.vram_mib, int(v.passed), json.dumps(list(v.reasons)),
                        json.dumps(v.detail), json.dumps(v.attestations), v.recorded_at,
                        v.detail.get("attested_tx"), v.detail.get("attest_error")))

    def set_hardware_attestations(self, provider: bytes, challenge: bytes,
                                  attestations: dict[str, str]) -> None:
        """The signatures over a verdict (``HardwareVerdict.attestations``), replaced whole."""
        with self._tx() as db:
            db.execute("UPDATE hardware_verdicts SET attestations=? WHERE provider=? AND "
                       "challenge=?", (json.dumps(attestations), provider, challenge))

    def set_hardware_submission(self, provider: bytes, challenge: bytes, tx: str | None,
                                error: str | None) -> None:
        """The ``attest_hardware`` transaction of a verdict, or why it was not sent."""
        with self._tx() as db:
            db.execute("UPDATE hardware_verdicts SET attested_tx=?, attest_error=? WHERE "
                       "provider=? AND challenge=?", (tx, error, provider, challenge))

    def latest_hardware_verdict(self, provider: bytes) -> HardwareVerdict | None:
        rows = self._q(f"SELECT {_VERDICT_COLS} FROM hardware_verdicts WHERE provider=? "
                       "ORDER BY recorded_at DESC LIMIT 1", (provider,))
        return _verdict(rows[0]) if rows else None

    def latest_hardware_verdicts(self) -> dict[bytes, HardwareVerdict]:
        """The latest verdict of every provider judged here (the challenger's schedule
        after a restart)."""
        rows = self._q(f"SELECT {_VERDICT_COLS} FROM hardware_verdicts v WHERE recorded_at = "
                       "(SELECT MAX(recorded_at) FROM hardware_verdicts w "
                       "WHERE w.provider = v.provider)")
        return {bytes(r[0]): _verdict(r) for r in rows}

    # ------------------------------------------------------------------ GPU claims

    def record_gpu_claims(self, provider: bytes, uuids: Iterable[str], source: str,
                          now: float) -> None:
        rows = [(u, provider, source, now, now) for u in dict.fromkeys(uuids)]
        if not rows:
            return
        with self._tx() as db:
            db.executemany("INSERT INTO gpu_claims (uuid, provider, source, first_seen, "
                           "last_seen) VALUES (?,?,?,?,?) ON CONFLICT (uuid, provider, source) "
                           "DO UPDATE SET last_seen=excluded.last_seen", rows)

    def gpu_claimants(self, uuids: Iterable[str]) -> dict[str, set[bytes]]:
        """For each of ``uuids`` claimed by anyone: the providers that claimed it."""
        wanted = list(dict.fromkeys(uuids))
        out: dict[str, set[bytes]] = {}
        for i in range(0, len(wanted), 256):
            part = wanted[i:i + 256]
            for uuid, provider in self._q(
                    "SELECT uuid, provider FROM gpu_claims WHERE uuid IN ("
                    + ",".join("?" * len(part)) + ")", part):
                out.setdefault(uuid, set()).add(bytes(provider))
        return out

    def jobs_updated_since(self, since: float, limit: int = 1000) -> list[tuple[bytes, float]]:
        """(job, updated_at) of jobs whose row changed after ``since`` (an accepted proof),
        oldest first: where the challenger finds the UUIDs of new proofs."""
        return [(bytes(j), float(t)) for j, t in self._q(
            "SELECT job, updated_at FROM jobs WHERE updated_at > ? ORDER BY updated_at "
            "LIMIT ?", (since, limit))]

    # ------------------------------------------------------------------ evidence

    def record_wrong_answer(self, e: WrongAnswer, now: float) -> bool:
        """Keep the evidence; True when it is new."""
        with self._tx() as db:
            cur = db.execute(
                f"INSERT OR IGNORE INTO wrong_answers ({_WRONG_COLS}, recorded_at, updated_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (e.provider, e.worker_key, e.gpu_index, e.challenge_digest, e.challenged_at,
                 e.root, e.leaf_count, e.row_index, e.leaf_hash, b"".join(e.siblings), e.row,
                 e.answer_signature, e.row_signature, now, now))
            return cur.rowcount == 1

    def wrong_answers(self, provider: bytes | None = None,
                      unreported: bool = False) -> list[WrongAnswer]:
        """The evidence kept (of ``provider``; ``unreported``: whose report is not done or
        failed), oldest first."""
        where, args = [], []
        if provider is not None:
            where.append("provider=?")
            args.append(provider)
        if unreported:
            where.append("(status IS NULL OR status NOT IN ('done', 'failed'))")
        sql = (f"SELECT {_WRONG_COLS} FROM wrong_answers"
               + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY recorded_at")
        return [_wrong(r) for r in self._q(sql, args)]

    def mark_wrong_answer(self, e: WrongAnswer, status: str, now: float, *,
                          signature: str | None = None, error: str | None = None) -> None:
        """The state of the evidence's report: 'sent', 'retry', 'done' or 'failed'."""
        with self._tx() as db:
            db.execute("UPDATE wrong_answers SET status=?, signature=COALESCE(?, signature), "
                       "last_error=?, attempts=attempts+1, updated_at=? WHERE provider=? AND "
                       "challenge=? AND row_index=?",
                       (status, signature, error, now, e.provider, e.challenge_digest,
                        e.row_index))
