"""Validator configuration (pure data; the CLI fills it from flags and the chain)."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_market.proof import DEFAULT_ECC_UNCORRECTED_MAX, DEFAULT_TEMP_CRITICAL_C

from .errors import ConfigError

DEFAULT_LISTEN = "127.0.0.1:8787"
DEFAULT_SETTLE_EVERY = 5
MAX_BODY_BYTES = 256 * 1024
MAX_BATCH = 64
MAX_PEER_RESPONSE_BYTES = 16 * 1024
"""The most a committee member's answer may hold (they are a few hundred bytes)."""


@dataclass(frozen=True)
class HealthThresholds:
    """Thresholds that decide billable time. For a job they are the job's
    ``terms.temp_critical_c`` / ``terms.ecc_uncorrected_max`` (``verify.job_rules``); the
    defaults, shared with the worker (gpu_market.proof), are only for pure tests.

    A GPU whose uncorrected-ECC delta in a window exceeds ``ecc_uncorrected_max`` makes the
    whole window non-billable; a GPU whose ``temp_max_c`` reached ``temp_critical_c`` had at
    least one critical one-second slot, so at most ``length - 1`` seconds can be billable.
    """

    temp_critical_c: int = DEFAULT_TEMP_CRITICAL_C
    ecc_uncorrected_max: int = DEFAULT_ECC_UNCORRECTED_MAX

    def validate(self) -> None:
        if not 0 < self.temp_critical_c <= 200:
            raise ConfigError("temp_critical_c must be in 1..200")
        if self.ecc_uncorrected_max < 0:
            raise ConfigError("ecc_uncorrected_max must be >= 0")

    def stricter(self, own: HealthThresholds | None) -> HealthThresholds:
        """These thresholds (a job's terms) tightened by a validator's ``own`` policy: the
        lower critical temperature and the lower ECC allowance. ``own`` can only make a
        validator approve less than the terms allow, never more."""
        if own is None:
            return self
        return HealthThresholds(min(self.temp_critical_c, own.temp_critical_c),
                                min(self.ecc_uncorrected_max, own.ecc_uncorrected_max))


@dataclass(frozen=True)
class VerifyConfig:
    """What every proof is checked against: this validator's program, market and authority.

    Window length, skew allowance and health thresholds come from the job: they are fixed in
    ``job.terms`` at ``create_job`` (``verify.job_rules``), so a change of the market's params
    never changes how an existing job's windows are judged. ``own_health`` is this
    validator's own, optional, stricter policy (``HealthThresholds.stricter``): with it the
    validator approves fewer seconds of a hot or erroring GPU than the terms would.

    ``authority`` is this validator's authority key: only proofs of jobs whose on-chain
    committee names it are accepted (``verify.check_committee``).
    """

    program_id: bytes
    market: bytes
    authority: bytes
    own_health: HealthThresholds | None = None

    def validate(self) -> None:
        for name in ("program_id", "market", "authority"):
            v = getattr(self, name)
            if not isinstance(v, bytes) or len(v) != 32:
                raise ConfigError(f"{name} must be a 32-byte public key")
        if self.own_health is not None:
            self.own_health.validate()


@dataclass(frozen=True)
class SettlePolicy:
    """When a job's newest accepted receipt is settled (see settle_policy.due_reason)."""

    settle_every_windows: int = DEFAULT_SETTLE_EVERY
    low_escrow_windows: int = 2
    """Settle at once when the escrow covers fewer than this many more windows."""
    max_unsettled_age_windows: int = 10
    """Settle anyway when the oldest unsettled accepted window is this many windows old."""
    chain_refresh_seconds: float = 30.0
    """How often a job with unsettled windows is re-read from chain (status, escrow)."""
    retry_base_seconds: float = 2.0
    retry_cap_seconds: float = 120.0
    max_chain_error_attempts: int = 5
    """Attempts for retryable chain errors (e.g. WindowEndInFuture) before giving up."""
    leader_timeout_windows: float = 2.0
    """How long a round's leader has before the next committee member leads it (in the job's
    windows; ``--leader-timeout``)."""
    peer_timeout_seconds: float = 5.0
    """Total deadline of one HTTP request to another committee member (connect, send,
    every byte of the answer)."""
    round_workers: int = 8
    """Settle rounds (of different jobs) run at once; each asks its members in parallel."""
    round_wait_seconds: float = 5.0
    """How long a settlement pass waits for its rounds before it sends the intents written
    so far; a round still running goes on in the background."""
    endpoint_ttl_seconds: float = 60.0
    """How long a member's endpoint (from its Validator account) is cached."""
    lookup_table: bool = True
    """Settle several jobs per transaction: v0 transactions loading accounts from this
    validator's address lookup table (``settlement.Settler``). False: one legacy transaction
    per settlement, as before batching. Used only with a client that has ``lookup_tables``."""
    lookup_table_job_accounts: bool = True
    """Also put each job's own accounts (job, escrow) in the tables, not only the shared ones
    (market, fee vault, mint, providers, attesters): four quorum-1 settlements per
    transaction instead of three (validator/README.md, "Settlement cost"), for two table
    entries (about 445,000 lamports of rent) per job, held until the table is retired."""
    lookup_table_compact_live_fraction: float = 0.1
    """A full table is retired once at most this fraction of its jobs still run; their
    accounts move to the newest table (about a dozen entries each) by their next settlement.
    0: only tables whose jobs all ended."""
    lookup_table_retire_seconds: float = 60.0
    """How often the settler looks for full tables whose jobs all ended, to deactivate them
    and, 513 slots later, close them, the rent back to this validator
    (``settle_tables.SettleTables.retire``)."""
    batch_hold_windows: float = 0.25
    """The fresh settlements of a transaction that has room for another (fewer than
    ``max_settle_items_per_v0_tx`` of their quorum, worst case; validator/README.md,
    "Settlement cost") wait up to this many of their jobs' windows (from each intent's
    creation) for more to share it with; 0: never. Intents already sent once and
    ``settle_now(force=True)`` never wait. It adds at most that much to the payout lag
    (5 windows' budget at the default cadence)."""
    lookup_table_wait_seconds: float = 2.0
    """How long a pass waits for entries it just added to the table to become usable (one
    slot); past it the pass packs with the entries usable then (larger transactions)."""

    def validate(self) -> None:
        if self.settle_every_windows < 1:
            raise ConfigError("--settle-every must be at least 1")
        if self.low_escrow_windows < 0 or self.max_unsettled_age_windows < 1:
            raise ConfigError("low_escrow_windows >= 0 and max_unsettled_age_windows >= 1")
        if not self.leader_timeout_windows > 0:
            raise ConfigError("--leader-timeout must be more than 0 windows")
        if not self.peer_timeout_seconds > 0:
            raise ConfigError("peer_timeout_seconds must be more than 0")
        if self.round_workers < 1 or not self.round_wait_seconds >= 0:
            raise ConfigError("round_workers must be >= 1 and round_wait_seconds >= 0")
        if self.lookup_table_wait_seconds < 0 or self.batch_hold_windows < 0:
            raise ConfigError("lookup_table_wait_seconds and batch_hold_windows must be >= 0")
        if not self.lookup_table_retire_seconds >= 0:
            raise ConfigError("lookup_table_retire_seconds must be >= 0")
        if not 0 <= self.lookup_table_compact_live_fraction < 1:
            raise ConfigError("lookup_table_compact_live_fraction must be in [0, 1)")


@dataclass(frozen=True)
class ChallengeConfig:
    """Hardware challenges this validator sends (``challenger``; ``gpum-validator run
    --challenges`` and the ``--challenge-*`` flags). Off by default: verifying the standard
    challenge holds the n x n ``B`` (256 MiB at n = 8192) and takes seconds of CPU per GPU."""

    enabled: bool = False
    interval_seconds: float = 6 * 3600.0
    """Mean time between two random challenges of one provider (exponential, clipped to a
    tenth and three times it); registration and a spec change challenge at once."""
    deadline_seconds: float = 600.0
    """Total deadline of one challenge: the answer and the opening together."""
    retry_seconds: float = 600.0
    """When to ask again a worker that was busy (a job, another challenge) or rate-limited."""
    pass_seconds: float = 30.0
    """How often the challenger looks for providers that are due."""
    n: int = 8192
    rounds: int = 64
    rows: int = 16
    """The standard challenge (``gpu_market.challenge.Challenge.standard``)."""
    memory_fraction: float = 0.9
    """Of each GPU's declared VRAM, the part the memory challenge fills (0: none)."""
    max_memory_mib: int = 1 << 20
    chunks: int = 16
    max_age_seconds: float = 3600.0
    """A verdict this node co-signs for a peer is at most this old (the market's
    ``hardware_attestation_max_age_seconds`` when the chain has it)."""
    known_nvml_sha256: frozenset[str] | None = None
    """Digests of NVML libraries of known driver builds; None: digests are only reported."""
    seed: int | None = None
    """Seeds the schedule's random draws (tests); None: the OS's randomness."""

    def validate(self) -> None:
        from gpu_market.challenge import Challenge, ChallengeError

        if not (self.interval_seconds > 0 and self.deadline_seconds > 0
                and self.retry_seconds > 0 and self.pass_seconds > 0
                and self.max_age_seconds > 0):
            raise ConfigError("challenge intervals, deadline, retry and pass must be positive")
        if not 0 <= self.memory_fraction <= 1 or self.max_memory_mib < 0:
            raise ConfigError("--challenge-memory-fraction is 0..1 and "
                              "--challenge-max-memory-mib at least 0")
        try:
            Challenge(seed=bytes(32), n=self.n, rounds=self.rounds, rows_to_open=self.rows)
        except ChallengeError as e:
            raise ConfigError(f"--challenge-n/--challenge-rounds/--challenge-rows: {e}") \
                from None
        if not 1 <= self.chunks <= 256:
            raise ConfigError("the memory challenge opens 1..256 chunks")
