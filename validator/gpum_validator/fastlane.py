"""The intake's fast lane: the common proof (the next window of a job this process has been
accepting, from the provider's current key) decided without the reference path's objects,
reads or per-proof statements.

``intake.Intake`` runs every proof through ``screen`` (the Rust extension: the schema
rules, decoding, ``verify_strict``; no dataclasses) and ``JobFacts``/``ProviderFacts``
(the chain checks of ``check_assignment``, ``check_committee`` and ``check_worker_key``,
computed once per cached account). Under the group commit, ``FastLane.try_accept`` then
decides a proof from ``Memo``, a copy of the job's stored state, and queues its two
rows; ``FastLane.flush`` writes the queued rows with one ``executemany`` per table.

Guarantees (validator/tests/test_fastlane.py checks them against the reference path):

* the lane only ever *accepts*, and only a proof the reference path (``Intake._judge``)
  would accept with the same approved seconds and total and the same rows; whatever it
  does not accept goes to the reference path unchanged (so every rejection, duplicate and
  equivocation keeps its reason, message and evidence);
* ``Memo`` holds a job only while the job's stored state is known exactly: loaded from the
  store inside the group's transaction (``Store.intake_memo``) or set by the lane's own
  accepted rows, dropped when the reference path decides anything for the job, and cleared
  when a group fails or another connection wrote the database since
  (``Store.intake_memo_valid``: SQLite's ``data_version``). It lives with the store's
  connection (``Store.lane_memo``), so intakes sharing a store share it. The lane runs only
  on stores whose transactions exclude every other writer (``Store.serial_writers``:
  SQLite, not PostgreSQL). Its invariant: the stored job row is (``last_seq``, ...), the
  accepted proof at ``last_seq`` has ``last_hash``, and nothing is stored above
  ``last_seq`` (or, for a job with nothing stored, its state is the chain's);
* the rows are written with the reference path's compare-and-set: the job row moves only
  from the ``last_seq`` the proof was judged against, and the proof row is a plain insert,
  so a state changed behind the memo fails the whole group (503, retryable, nothing kept)
  instead of storing a wrong decision.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from gpu_market.proof import ZERO_HASH
from solders.pubkey import Pubkey

from .chain import baseline_state, job_info
from .config import VerifyConfig
from .records import UPDATED_AT_GRAIN_SECONDS, ChainJobInfo, Store
from .verify import JobState, _pk, committee_of, field_of, job_rules, status_of

try:
    import gpum_fastpath as _ext
except ImportError:  # pragma: no cover - exercised only where the extension is not built
    _ext = None

AVAILABLE = _ext is not None and hasattr(_ext, "screen_many")
"""Whether the Rust extension with ``screen_many`` is installed (``make venv``)."""

# The layout of a screened item (validator/fastpath/README.md, ``screen_many``).
JOB, SEQ, PROVIDER, WORKER_KEY, WINDOW_START, WINDOW_END, CUMULATIVE, BILLABLE, PREV_HASH, \
    HASH, UUIDS, HEALTH, PROOF, PROOF_SIGNATURE, RECEIPT_SIGNATURE = range(15)


def screen(objs: list[object], cfg: VerifyConfig) -> list[tuple | None]:
    """Per raw SignedProof JSON object: its screened tuple when ``parse_signed_proof`` and
    ``authenticate`` both accept it (with equal bytes and fields), else None (the reference
    path decides it). All None when the extension is not installed."""
    if not AVAILABLE:
        return [None] * len(objs)
    return _ext.screen_many(cfg.program_id, cfg.market, objs)


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the lane needs of one Job view, computed once per view. ``eligible``: in this
    market, this validator on its committee, running (or finishing, with ``ended_at``)."""

    eligible: bool
    provider: bytes
    ended_at: int | None
    window_seconds: int
    max_skew_seconds: int
    temp_critical_c: int
    ecc_uncorrected_max: int
    gpu_count: int
    baseline: JobState
    """The chain's state of the job (``chain.baseline_state``)."""
    info: ChainJobInfo
    """The job's chain facts as the store keeps them (``chain.job_info``)."""

    @classmethod
    def of(cls, job: Any, cfg: VerifyConfig) -> JobFacts:
        status = status_of(job)
        rules = job_rules(job, cfg.own_health)
        eligible = (status in ("running", "finishing")
                    and _pk(field_of(job, "market")) == cfg.market
                    and cfg.authority in committee_of(job))
        return cls(eligible, _pk(field_of(job, "provider")),
                   int(field_of(job, "ended_at")) if status == "finishing" else None,
                   rules.window_seconds, rules.max_skew_seconds,
                   rules.health.temp_critical_c, rules.health.ecc_uncorrected_max,
                   int(field_of(job, "gpu_count")), baseline_state(job), job_info(job))


@dataclass(frozen=True, slots=True)
class ProviderFacts:
    """A Provider view's current worker key: ``check_worker_key`` passes for ``key`` at
    ``window_end`` when ``key == worker_key`` and ``expires_at`` is 0 or not before it (a
    retired key is left to the reference path)."""

    market_ok: bool
    worker_key: bytes
    expires_at: int

    @classmethod
    def of(cls, provider: Any, cfg: VerifyConfig) -> ProviderFacts:
        return cls(_pk(field_of(provider, "market")) == cfg.market,
                   _pk(field_of(provider, "worker_key")),
                   int(field_of(provider, "worker_key_expires_at")))

    def signs(self, key: bytes, window_end: int) -> bool:
        return (self.market_ok and key == self.worker_key
                and (self.expires_at == 0 or window_end <= self.expires_at))


class FactsCache:
    """``make(view)`` per address, recomputed when the cached view object changes; at most
    ``max_entries`` (oldest dropped). Thread-safe (the request threads share it)."""

    def __init__(self, make: Callable[[Any], Any], max_entries: int) -> None:
        self.make = make
        self.max_entries = max_entries
        self._map: dict[bytes, tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def get(self, address: bytes, view: Any) -> Any:
        hit = self._map.get(address)
        if hit is not None and hit[0] is view:
            return hit[1]
        facts = self.make(view)
        with self._lock:
            self._map.pop(address, None)
            self._map[address] = (view, facts)
            while len(self._map) > self.max_entries:
                self._map.pop(next(iter(self._map)))
        return facts


class Memo(NamedTuple):
    """A job's stored state as the store holds it (see the module's invariant); ``row``:
    whether the job has a row yet (False: nothing is stored for the job, and its state is
    the chain's, ``baseline_state``)."""

    last_seq: int
    cumulative_seconds: int
    last_window_end: int
    gpu_uuids: tuple[str, ...] | None
    approved_total: int
    last_hash: bytes
    updated_at: float = 0.0
    """The row's ``updated_at`` (``records.UPDATED_AT_GRAIN_SECONDS``)."""
    row: bool = True


def health_bound(h: tuple, length: int, facts: JobFacts) -> int:
    """``verify.health_bound`` from the screened health summary (``screen_many``)."""
    billable, zero_samples, max_ecc, ecc_flag, min_covered, max_temp = h
    if (not billable or zero_samples or ecc_flag
            or (max_ecc is not None and max_ecc > facts.ecc_uncorrected_max)):
        return 0
    bound = length if min_covered is None else min(length, min_covered)
    if max_temp is not None and max_temp >= facts.temp_critical_c:
        bound = min(bound, length - 1)
    return max(0, bound)


_FRESH = Memo(-1, 0, 0, None, 0, b"", row=False)
"""Memo mark: nothing is stored for the job (its state is the chain's at the time)."""


class FastLane:
    """One group commit's use of the memo (``Intake._commit_group``): decisions and rows of
    this group overlay ``memo`` until ``committed`` (the caller clears the memo if the group
    fails). A job missing from both is loaded from the store (``preload``: one query for
    all of a group's jobs; else one query when first needed, ``Store.intake_memos``)."""

    def __init__(self, memo: dict[bytes, Memo], store: Store, enabled: bool,
                 clock: Callable[[], float] = time.time, max_entries: int = 32_768) -> None:
        self.memo = memo
        self.store = store
        self.enabled = enabled
        self.clock = clock
        self.max_entries = max_entries
        self.overlay: dict[bytes, Memo | None] = {}
        self.new_job_rows: list[tuple] = []
        self.job_rows: list[tuple] = []
        self.proof_rows: list[tuple] = []
        self.inserted: dict[bytes, JobFacts] = {}
        """Jobs whose first row the lane queued since the caller last took this, with the
        facts whose chain facts (``JobFacts.info``) the row carries."""
        self.accepted = 0

    def state(self, job: bytes, facts: JobFacts) -> Memo | None:
        """The job's stored state, or None when the lane cannot know it exactly (a rejected
        proof stored above the last accepted one, ...)."""
        if job in self.overlay:
            m = self.overlay[job]
        elif job in self.memo:
            m = self.memo[job]
        else:
            m = self._load(job)
            self.overlay[job] = m
        if m is _FRESH:
            b = facts.baseline
            return Memo(b.last_seq, b.cumulative_seconds, b.last_window_end, None,
                        b.approved_total, b.last_hash or ZERO_HASH, row=False)
        return m

    def preload(self, jobs: Iterable[bytes]) -> None:
        """Load, in one query, the stored state of every job of ``jobs`` the lane does not
        know yet. The same as loading each when first needed (``state``): until then, no
        write of the group can change a job's rows without the lane knowing (its own rows
        update the overlay, the reference path's ``forget`` the job, and no other writer
        runs during the group's transaction)."""
        if not self.enabled:
            return
        missing = [j for j in jobs if j not in self.overlay and j not in self.memo]
        if missing:
            for job, loaded in self.store.intake_memos(missing).items():
                self.overlay[job] = self._memo_of(*loaded)

    def _load(self, job: bytes) -> Memo | None:
        return self._memo_of(*self.store.intake_memo(job))

    @staticmethod
    def _memo_of(max_seq: int, state: JobState | None, updated_at: float) -> Memo | None:
        """The memo of what ``Store.intake_memos`` loaded for a job."""
        if state is None:
            return _FRESH if max_seq == 0 else None
        if max_seq != state.last_seq or state.last_hash is None or state.gpu_uuids is None:
            return None
        return Memo(state.last_seq, state.cumulative_seconds, state.last_window_end,
                    state.gpu_uuids, state.approved_total, state.last_hash, updated_at)

    def try_accept(self, s: tuple, facts: JobFacts) -> dict[str, Any] | None:
        """The accepted answer for screened proof ``s`` when the reference path would give
        exactly it (``start_state``, ``_prev`` and ``check_window`` against the stored state
        and its previous proof), its rows queued; None when the reference path must
        decide."""
        if not self.enabled:
            return None
        job, seq = s[JOB], s[SEQ]
        m = self.state(job, facts)
        if m is None or seq != m.last_seq + 1:
            # An unknown state, a gap or a duplicate. (With seq == last_seq + 1 the chain's
            # state never takes over: ``start_state`` does so only for a seq above a chain
            # last_seq that is itself above the stored one.)
            return None
        start, end = s[WINDOW_START], s[WINDOW_END]
        length = end - start
        now = self.clock()
        uuids = s[UUIDS]
        if (s[PREV_HASH] != m.last_hash
                or (facts.ended_at is not None and end > facts.ended_at)
                or not 1 <= length <= facts.window_seconds + facts.max_skew_seconds
                or start < m.last_window_end
                or end - (int(now) + facts.max_skew_seconds) > 0
                or len(uuids) != facts.gpu_count
                or (m.gpu_uuids is not None and uuids != m.gpu_uuids)
                or s[CUMULATIVE] != m.cumulative_seconds + s[BILLABLE]):
            return None
        approved = max(0, min(s[BILLABLE], health_bound(s[HEALTH], length, facts)))
        total = m.approved_total + approved
        if m.row:
            # ``record_accepted``'s rule: updated_at only when the stored one is a grain old.
            stamp = now if m.updated_at <= now - UPDATED_AT_GRAIN_SECONDS else None
            self.job_rows.append((seq, s[CUMULATIVE], end, total, stamp, job, m.last_seq))
            updated_at = m.updated_at if stamp is None else now
        else:
            self.new_job_rows.append((job, seq, s[CUMULATIVE], end, json.dumps(list(uuids)),
                                      now, total, facts.info, now))
            self.inserted[job] = facts
            updated_at = now
        self.proof_rows.append((job, seq, s[HASH], s[PROOF], s[PROOF_SIGNATURE],
                                s[RECEIPT_SIGNATURE], s[WORKER_KEY], s[CUMULATIVE], end, now,
                                "accepted", None, approved, total))
        self.overlay[job] = Memo(seq, s[CUMULATIVE], end, uuids, total, s[HASH], updated_at)
        self.accepted += 1
        return {"status": "accepted", "job": str(Pubkey.from_bytes(job)), "seq": seq,
                "approved_seconds": approved, "approved_total": total}

    def flush(self) -> None:
        """Write the queued rows (inside the group's transaction): before the reference path
        reads the store, and at the end of the group. StoreError propagates."""
        if self.proof_rows:
            self.store.record_accepted_rows(self.new_job_rows, self.job_rows, self.proof_rows)
            self.new_job_rows, self.job_rows, self.proof_rows = [], [], []

    def forget(self, job: bytes) -> None:
        """The reference path wrote (or may have written) for ``job``: its state is loaded
        again from the store at its next proof."""
        self.overlay.pop(job, None)
        self.memo.pop(job, None)

    def committed(self) -> None:
        """The group's rows are all written (its transaction about to commit): its overlay
        becomes the memo. If the commit fails, the caller clears the memo (nothing of it, nor
        the memo, can be trusted then)."""
        for job, m in self.overlay.items():
            self.memo.pop(job, None)
            if m is not None and m is not _FRESH:
                self.memo[job] = m
        while len(self.memo) > self.max_entries:
            self.memo.pop(next(iter(self.memo)))
