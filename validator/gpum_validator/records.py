"""What the validator stores, as plain records, and ``Store``, the interface to its storage.

Pure: no database here. The intake, the settler, the member endpoints, the reporters and the
dashboard import these types; the SQL engines that implement ``Store`` (``store_sqlite``,
``store_pg``, both on the shared queries of ``store_sql``) return them.

The three slash reports this validator submits (``ReportKind``: a provider's equivocation, a
committee member's equivocation, a job's downtime) share one state, ``SlashReport``, with
one status vocabulary, ``ReportStatus``, and one way to move it, ``Store.mark_report``: a
report's first submission records ``SENT`` before the transaction leaves, then ``RETRY`` (due
again at ``next_attempt_at``) or the terminal ``DONE`` / ``FAILED``, which are never left.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Any, ClassVar, Protocol

from .verify import Authenticated, JobState, Verdict

UPDATED_AT_GRAIN_SECONDS = 600.0
"""An accepted proof sets its job's ``updated_at`` only when the stored one is this much
older: ``jobs.updated_at`` is the time of the job's last write to within this grain. It is read
only against cutoffs days old (``stale_open_jobs``, ``prune``), and setting it at every window
moves the job's entry in ``jobs_open`` (one more random page written per proof)."""

INTENT_STATUSES = ("intended", "sent", "confirmed", "failed")
OPEN_INTENT_STATUSES = ("intended", "sent")
TERMINAL_CHAIN_STATUSES = ("completed", "cancelled", "failed", "declined", "closed")
"""Chain statuses after which nothing of a job settles any more (``closed``: its account is
gone, ``mark_job_closed``). Such jobs are never settle candidates and may be pruned."""


class ReportStatus(str, Enum):
    """Where a slash report stands, the same for every ``ReportKind``. None (no status) until
    a submission was attempted; then ``SENT`` (recorded before the transaction is sent: in
    flight, or unknown after a crash), ``RETRY``, or the terminal ``DONE`` / ``FAILED``.
    Compares equal to its value (``ReportStatus.DONE == "done"``), the text the database
    holds."""

    SENT = "sent"
    RETRY = "retry"
    DONE = "done"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        """A report in this status is never reopened nor resubmitted, across restarts."""
        return self in (ReportStatus.DONE, ReportStatus.FAILED)


class ReportKind(Enum):
    """The slash reports this validator submits, each keyed by what it is about (the key
    ``Store.mark_report`` takes)."""

    EQUIVOCATION = "equivocation"
    """``slash_equivocation`` of a provider that signed two proofs: key (job, seq)."""
    VALIDATOR_EQUIVOCATION = "validator_equivocation"
    """``slash_validator_equivocation`` of a member that signed two attestations: key (job,
    seq, member)."""
    DOWNTIME = "downtime"
    """``slash_downtime`` of a job whose proofs stopped: key (job, last_proof_window_end)."""


@dataclass(frozen=True, kw_only=True)
class SlashReport:
    """The state of one slash report, whatever its ``ReportKind``: its status (None until a
    submission was attempted), the transaction signature and outcome once done, the
    submissions counted so far, the last error and when it is due again."""

    kind: ClassVar[ReportKind]
    status: ReportStatus | None = None
    signature: str | None = None
    outcome: str | None = None
    attempts: int = 0
    last_error: str | None = None
    next_attempt_at: float = 0.0
    updated_at: float = 0.0

    @property
    def key(self) -> tuple:
        """What the report is about, as ``Store.mark_report`` takes it."""
        raise NotImplementedError


@dataclass(frozen=True)
class StoredProof:
    job: bytes
    seq: int
    hash: bytes
    proof: bytes
    proof_signature: bytes
    receipt_signature: bytes
    worker_key: bytes
    cumulative_seconds: int
    window_end: int
    received_at: float
    decision: str
    reason: str | None
    approved_seconds: int | None = None
    """Seconds of this window this validator approved (accepted proofs only)."""
    approved_total: int | None = None
    """This validator's approved total for the job up to this seq (accepted proofs only)."""


@dataclass(frozen=True)
class IntakeView:
    """What the intake reads to judge a proof of (job, seq): the job's state (``job_state``)
    and the stored proofs of ``seq`` and of ``seq - 1`` (``proofs_at``)."""

    state: JobState | None
    at_seq: list[StoredProof]
    before: list[StoredProof]


@dataclass(frozen=True)
class EquivocationCase(SlashReport):
    """One (job, seq) with two different signed proofs, and the state of its
    ``slash_equivocation`` report."""

    kind: ClassVar[ReportKind] = ReportKind.EQUIVOCATION
    job: bytes
    seq: int
    hash_a: bytes
    hash_b: bytes
    recorded_at: float

    @property
    def key(self) -> tuple[bytes, int]:
        return self.job, self.seq


@dataclass(frozen=True)
class StoreLimits:
    """How much the store keeps of proofs that were not accepted (accepted proofs are the
    job's paid history and are never dropped)."""

    max_rejected_per_job: int = 1024
    """Rejected proofs kept per job; beyond it the lowest seqs (never evidence) are evicted."""
    max_rejected_total: int = 100_000
    """Rejected proofs kept in all; beyond it new rejections are answered but not stored."""

    def __post_init__(self) -> None:
        if self.max_rejected_per_job < 1 or self.max_rejected_total < 1:
            raise ValueError("StoreLimits values must be at least 1")


DEFAULT_LIMITS = StoreLimits()


@dataclass(frozen=True)
class ChainJobInfo:
    """The chain facts the settlement policy needs, as last read (rate, window length and the
    other limits from the job's terms; ``window_seconds`` 0 = not read yet). ``committee``
    holds the members' authority keys in order."""

    status: str
    last_seq: int
    paid_seconds: int
    rate_per_second: int
    escrow_remaining: int
    ended_at: int
    window_seconds: int = 0
    claimed_seconds: int = 0
    last_window_end: int = 0
    started_at: int = 0
    committee: tuple[bytes, ...] = ()
    quorum: int = 1
    max_skew_seconds: int = 0
    max_missed_windows: int = 0

    @cached_property
    def committee_json(self) -> str:
        """``committee`` as ``jobs.committee`` stores it (computed once per object)."""
        return json.dumps([m.hex() for m in self.committee])


@dataclass(frozen=True)
class SettleCandidate:
    """A job with accepted windows not yet covered by a confirmed or open intent."""

    job: bytes
    latest: StoredProof
    covered_seq: int
    unsettled_windows: int
    oldest_unsettled_window_end: int
    accepted_cumulative: int
    chain: ChainJobInfo | None
    chain_checked_at: float
    approved_total: int = 0
    """This validator's approved total up to ``latest``."""


@dataclass(frozen=True)
class JobRow:
    """One job this validator holds proofs of: its newest accepted window and chain facts."""

    job: bytes
    last_seq: int
    cumulative_seconds: int
    last_window_end: int
    approved_total: int
    chain: ChainJobInfo | None
    chain_checked_at: float


@dataclass(frozen=True)
class Intent:
    id: int
    job: bytes
    seq_from: int
    seq_to: int
    cumulative_seconds: int
    window_end: int
    proof_hash: bytes
    worker_key: bytes
    receipt_signature: bytes
    status: str
    signature: str | None
    attempts: int
    last_error: str | None
    next_attempt_at: float
    created_at: float
    updated_at: float
    approved_seconds: int = 0
    attestations: tuple[tuple[bytes, bytes], ...] = ()
    """(member authority, signature over the attestation message), in settle order."""


@dataclass(frozen=True)
class GivenAttestation:
    """The one value this validator signed for a (job, seq) as a committee member."""

    job: bytes
    seq: int
    approved_seconds: int
    proof_hash: bytes
    signature: bytes
    requester: bytes | None
    signed_at: float


@dataclass(frozen=True)
class ReceivedAttestation:
    """A valid attestation another member gave this validator (as a leader): evidence."""

    job: bytes
    seq: int
    member: bytes
    approved_seconds: int
    cumulative_seconds: int
    window_end: int
    proof_hash: bytes
    signature: bytes
    received_at: float


@dataclass(frozen=True)
class ValidatorEquivocationCase(SlashReport):
    """A member that signed two different attestations for one (job, seq), and the state of
    its ``slash_validator_equivocation`` report."""

    kind: ClassVar[ReportKind] = ReportKind.VALIDATOR_EQUIVOCATION
    job: bytes
    seq: int
    member: bytes
    recorded_at: float

    @property
    def key(self) -> tuple[bytes, int, bytes]:
        return self.job, self.seq, self.member


@dataclass(frozen=True)
class DowntimeReport(SlashReport):
    """One ``slash_downtime`` submission for (job, last_proof_window_end) (its status is never
    None: the row is written by its first mark)."""

    kind: ClassVar[ReportKind] = ReportKind.DOWNTIME
    job: bytes
    last_proof_window_end: int

    @property
    def key(self) -> tuple[bytes, int]:
        return self.job, self.last_proof_window_end


class Store(Protocol):
    """What the intake, the settler, the member endpoints and the reporters need from
    durable storage."""

    def batch(self, durable: bool = True) -> AbstractContextManager[None]: ...
    def make_durable(self) -> None: ...
    def job_state(self, job: bytes) -> JobState | None: ...
    def proofs_at(self, job: bytes, seq: int) -> list[StoredProof]: ...
    def intake_view(self, job: bytes, seq: int) -> IntakeView: ...
    def accepted_at(self, job: bytes, seq: int) -> StoredProof | None: ...
    def newest_accepted(self, job: bytes) -> StoredProof | None: ...
    def decision_of(self, job: bytes, seq: int, hash: bytes) -> str | None: ...
    def max_seq(self, job: bytes) -> int: ...
    def head(self, job: bytes) -> StoredProof | None: ...
    def record_rejected(self, auth: Authenticated, reason: str, now: float,
                        limits: StoreLimits = DEFAULT_LIMITS) -> str | None: ...
    def record_accepted(self, auth: Authenticated, verdict: Verdict,
                        stored_last_seq: int | None, now: float) -> None: ...
    def record_accepted_rows(self, new_job_rows: list[tuple], job_rows: list[tuple],
                             proof_rows: list[tuple]) -> None: ...
    def intake_memo(self, job: bytes) -> tuple[int, JobState | None, float]: ...
    def intake_memos(self, jobs: Sequence[bytes]
                     ) -> dict[bytes, tuple[int, JobState | None, float]]: ...
    def intake_memo_valid(self) -> bool: ...
    serial_writers: bool
    lane_memo: dict[bytes, Any]
    def record_equivocation(self, auth: Authenticated, other_hash: bytes, now: float) -> bool: ...
    def update_chain_info(self, job: bytes, info: ChainJobInfo, now: float) -> None: ...
    def update_chain_infos(self, items: Sequence[tuple[bytes, ChainJobInfo]],
                           now: float) -> None: ...
    def chain_info(self, job: bytes) -> tuple[ChainJobInfo | None, float]: ...
    def jobs(self, *, open_only: bool = False) -> list[JobRow]: ...
    def equivocation_cases(self, *, open_only: bool = False) -> list[EquivocationCase]: ...
    def settle_candidates(self) -> list[SettleCandidate]: ...
    def add_intent(self, proof: StoredProof, seq_from: int, now: float,
                   approved_seconds: int | None = None,
                   attestations: Sequence[tuple[bytes, bytes]] = ()) -> Intent: ...
    def open_intents(self) -> list[Intent]: ...
    def mark_intent(self, intent_id: int, status: str, now: float, *,
                    signature: str | None = None, error: str | None = None,
                    next_attempt_at: float | None = None,
                    count_attempt: bool = False) -> None: ...
    def intents(self, job: bytes | None = None) -> list[Intent]: ...
    def given_attestation(self, job: bytes, seq: int) -> GivenAttestation | None: ...
    def record_given_attestation(self, att: GivenAttestation) -> GivenAttestation: ...
    def record_received_attestation(self, att: ReceivedAttestation) -> bool: ...
    def received_attestations(self, job: bytes, seq: int,
                              member: bytes | None = None) -> list[ReceivedAttestation]: ...
    def validator_equivocation_cases(self, *, open_only: bool = False
                                     ) -> list[ValidatorEquivocationCase]: ...
    def downtime_report(self, job: bytes, last_proof_window_end: int) -> DowntimeReport | None: ...
    def mark_report(self, kind: ReportKind, key: tuple, status: ReportStatus, now: float, *,
                    signature: str | None = None, outcome: str | None = None,
                    error: str | None = None, next_attempt_at: float | None = None,
                    count_attempt: bool = False) -> None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def get_meta(self, key: str) -> str | None: ...
    # Read-only queries of the dashboard (bounded by their ``limit``).
    def recent_windows(self, job: bytes, limit: int) -> list[StoredProof]: ...
    def recent_intents(self, job: bytes | None, limit: int) -> list[Intent]: ...
    def summary(self) -> dict[str, object]: ...
    def pending_windows(self) -> int: ...
    # Retention: what jobs closed on chain long ago no longer need.
    def mark_job_closed(self, job: bytes, now: float) -> None: ...
    def stale_open_jobs(self, before: float, limit: int) -> list[bytes]: ...
    def prune(self, before: float, *, batch_rows: int = 200,
              max_seconds: float | None = None,
              on_batch: Callable[[float], None] | None = None,
              pause: float = 0.002) -> dict[str, int]: ...
    def ping(self) -> bool: ...
    def write_probe(self, now: float) -> str | None: ...
    def close(self) -> None: ...
