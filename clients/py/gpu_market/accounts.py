"""Read-only views of gpu_market accounts, decoded from account bytes (pure).

Fields are named as in the IDL (snake_case). Pubkeys are ``solders.pubkey.Pubkey``; enums are
lower-case strings (``JobView.status`` in ``JOB_STATUSES``, ``ProviderView.status`` in
``PROVIDER_STATUSES``, ``ValidatorView.status`` in ``{"active", "exiting"}``); fixed-size
zero-padded byte strings (``gpu_model``, ``region``) are ``str``; ``[u8; 32]`` hashes are
``bytes``; fixed-size arrays of structs (``retired_keys``) are tuples. Every view also carries
``address`` (the account's key, None when decoded from bare bytes).

Pure helpers mirror the program's time rules, so clients can tell in advance what the chain
will accept: :func:`effective_params` (``Market::params_at``), :func:`announced_params`,
:func:`grace_seconds` (``MarketParams::grace_seconds``), ``JobView.settlement_over`` /
``grace_ends_at`` / ``expirable_after`` (``close_job``, ``complete_job``, ``expire_job``) and
``ProviderView.key_signs_window`` (``Provider::key_signs_window``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from solders.pubkey import Pubkey

from .codec import Codec, default_codec
from .constants import ENDPOINT_LEN

__all__ = [
    "CLOSED_JOB_DISCRIMINATOR",
    "DEFAULT_MARKET_PARAMS",
    "GPU_MODEL_LEN",
    "JOB_STATUSES",
    "PROVIDER_STATUSES",
    "REGION_LEN",
    "TERMINAL_JOB_STATUSES",
    "ClosedJobView",
    "EquivocationRecordView",
    "GpuSpec",
    "HardwareVerdict",
    "JobTerms",
    "JobView",
    "MarketParams",
    "MarketTotals",
    "MarketView",
    "ProviderView",
    "Ratings",
    "Reputation",
    "RetiredWorkerKey",
    "Unbonding",
    "ValidatorView",
    "WrongAnswerRecordView",
    "announced_params",
    "decode_account",
    "decode_equivocation_record",
    "decode_fixed_str",
    "decode_job",
    "decode_market",
    "decode_provider",
    "decode_validator",
    "decode_wrong_answer_record",
    "effective_params",
    "encode_endpoint",
    "encode_fixed_str",
    "encode_optional_endpoint",
    "grace_seconds",
    "min_deposit",
]

JOB_STATUSES = ("open", "running", "finishing", "completed", "cancelled", "failed", "declined")
TERMINAL_JOB_STATUSES = frozenset({"completed", "cancelled", "failed", "declined"})
"""Statuses in which a job holds no GPUs and ``close_job`` refunds at once."""
PROVIDER_STATUSES = ("active", "paused", "jailed")
GPU_MODEL_LEN = 32
REGION_LEN = 16


def encode_fixed_str(value: str, size: int, name: str = "value") -> bytes:
    """UTF-8 of ``value`` zero-padded to ``size`` bytes; ValueError if longer or has NUL."""
    raw = value.encode("utf-8")
    if b"\0" in raw:
        raise ValueError(f"{name} must not contain NUL characters")
    if len(raw) > size:
        raise ValueError(f"{name} {value!r} is {len(raw)} bytes in UTF-8; at most {size} allowed")
    return raw.ljust(size, b"\0")


def encode_optional_endpoint(url: str) -> bytes:
    """A provider's worker endpoint as stored on chain: like :func:`encode_endpoint`, or ""
    for none (all zeros)."""
    return bytes(ENDPOINT_LEN) if url == "" else encode_endpoint(url)


def encode_endpoint(url: str) -> bytes:
    """A validator endpoint as stored on chain (``state/validator.rs::encode_endpoint``):
    ``http://`` or ``https://`` followed by a host, at most ``ENDPOINT_LEN`` (96) bytes of
    printable ASCII without spaces, zero-padded. ValueError (saying what is wrong) otherwise,
    where the program would fail with ``InvalidEndpoint``."""
    raw = url.encode("utf-8", errors="replace")
    if not url.startswith(("http://", "https://")) or len(raw) <= len("https://"):
        raise ValueError(f"endpoint {url!r} must be an http:// or https:// URL, e.g. "
                         "http://203.0.113.7:8080")  # fmt: skip
    if len(raw) > ENDPOINT_LEN:
        raise ValueError(f"endpoint {url!r} is {len(raw)} bytes; at most {ENDPOINT_LEN} allowed")
    if not all(0x21 <= b <= 0x7E for b in raw):
        raise ValueError(f"endpoint {url!r} must be printable ASCII without spaces")
    return raw.ljust(ENDPOINT_LEN, b"\0")


def decode_fixed_str(raw: bytes) -> str:
    """Inverse of :func:`encode_fixed_str`: drop trailing NULs, decode UTF-8 (lossy)."""
    return bytes(raw).rstrip(b"\0").decode("utf-8", errors="replace")


@dataclass(frozen=True)
class MarketParams:
    fee_bps: int
    burn_bps: int
    min_stake_per_gpu: int
    unbonding_seconds: int
    window_seconds: int
    min_quorum: int
    max_missed_windows: int
    downtime_slash_bps: int
    equivocation_slash_bps: int
    reporter_reward_bps: int
    validator_min_bond: int
    max_skew_seconds: int
    temp_critical_c: int
    ecc_uncorrected_max: int
    validator_reward_bps: int
    hardware_quorum: int = 2
    """Distinct Active validators whose signatures a hardware verdict needs (1..=5)."""
    hardware_attestation_max_age_seconds: int = 3600
    """How old a challenge may be when its verdict is attested (60..=86400)."""
    verified_record_seconds: int = 30 * 86400
    """The clean record the badge asks for (:func:`gpu_market.reputation.badge`)."""


DEFAULT_MARKET_PARAMS: dict[str, int] = {
    "fee_bps": 500,  # 5% platform fee
    "burn_bps": 5_000,  # half of the fee is burned
    "min_stake_per_gpu": 0,
    "unbonding_seconds": 14 * 24 * 3600,
    "window_seconds": 60,
    "min_quorum": 1,
    "max_missed_windows": 10,
    "downtime_slash_bps": 100,
    "equivocation_slash_bps": 5_000,
    "reporter_reward_bps": 1_000,
    "validator_min_bond": 0,
    "max_skew_seconds": 5,
    "temp_critical_c": 95,
    "ecc_uncorrected_max": 0,
    "validator_reward_bps": 1_000,  # a tenth of the fee to the attesting committee members
    "hardware_quorum": 2,  # two validators sign a hardware verdict
    "hardware_attestation_max_age_seconds": 3600,
    "verified_record_seconds": 30 * 86400,  # the badge: 30 days without a slash
}
"""Market parameters used by ``initialize_market`` for every key the caller leaves out
(every ``MarketParams`` field, in its order)."""


def grace_seconds(params: MarketParams) -> int:
    """``window_seconds * (max_missed_windows + 2)``: how long after a job ends receipts up to
    its end still settle (``close_job`` and ``complete_job`` wait for it). A job created under
    ``params`` gets this as ``terms.grace_seconds``."""
    return params.window_seconds * (params.max_missed_windows + 2)


def min_deposit(params: MarketParams, price_per_gpu_second: int, gpu_count: int) -> int:
    """The smallest deposit ``create_job`` accepts: one window at the job's rate
    (``price_per_gpu_second * gpu_count * window_seconds``; ``math::min_deposit``)."""
    return price_per_gpu_second * gpu_count * params.window_seconds


@dataclass(frozen=True)
class MarketTotals:
    staked: int
    bonded: int
    burned: int
    fees: int
    slashed: int
    jobs: int
    rewards_unclaimed: int
    """Validator rewards credited and not yet claimed: the fee vault keeps them
    (``withdraw_fees`` moves only the balance above them)."""
    rewards: int
    """Validator rewards ever credited."""


@dataclass(frozen=True)
class MarketView:
    authority: Pubkey
    creator: Pubkey
    pending_authority: Pubkey
    id: int
    stake_mint: Pubkey
    payment_mint: Pubkey
    stake_vault: Pubkey
    treasury: Pubkey
    params: MarketParams
    pending_params: MarketParams
    params_effective_at: int
    paused: bool
    totals: MarketTotals
    bump: int
    stake_vault_bump: int
    fee_vault: Pubkey
    """``["fee_vault", market]``: ``settle`` pays the treasury share here; ``withdraw_fees``
    (anyone) moves the whole balance to ``treasury``."""
    fee_vault_bump: int
    address: Pubkey | None = None

    @property
    def booked_stake(self) -> int:
        """Provider stake and validator bonds (with their unbonding) the stake vault must hold;
        its balance may be larger (donations), and ``sweep_vault`` moves the difference."""
        return self.totals.staked + self.totals.bonded


def effective_params(market: MarketView, now: int) -> MarketParams:
    """The parameters in force at unix time ``now`` (``Market::params_at``): the announced
    ``pending_params`` once ``params_effective_at`` (non-zero) has come, else ``params``.
    Use it for anything priced or checked at ``now`` (a job created now gets these terms)."""
    if market.params_effective_at != 0 and now >= market.params_effective_at:
        return market.pending_params
    return market.params


def announced_params(market: MarketView) -> MarketParams:
    """The most recently announced parameters (in force now or from ``params_effective_at``):
    the base a partial ``update_params`` is merged onto, so it never undoes a pending change."""
    return market.pending_params if market.params_effective_at != 0 else market.params


@dataclass(frozen=True)
class GpuSpec:
    gpu_model: str
    gpu_count: int
    vram_mib: int
    region: str


@dataclass(frozen=True)
class Unbonding:
    amount: int
    release_at: int


@dataclass(frozen=True)
class Reputation:
    verified_seconds: int
    windows_missed: int
    jobs_completed: int
    jobs_failed: int
    slashes: int


@dataclass(frozen=True)
class HardwareVerdict:
    """The last hardware verdict validators attested (``attest_hardware``).
    ``challenged_at == 0``: never attested. ``verified``: the verdict passed and nothing
    (a spec change, a worker-key rotation, a wrong-answer slash) cleared it since; ``passed``:
    what the verdict said. ``gpu_model`` is text."""

    verified: bool = False
    passed: bool = False
    gpu_model: str = ""
    gpu_count: int = 0
    vram_mib: int = 0
    challenged_at: int = 0
    attested_at: int = 0
    challenge_digest: bytes = bytes(32)
    attesters: int = 0
    attesters_hash: bytes = bytes(32)

    @property
    def status(self) -> str:
        """``"verified"``, ``"failed"`` (the last verdict failed), or ``"unverified"`` (never
        attested, or a pass cleared since)."""
        if self.verified:
            return "verified"
        if self.challenged_at and not self.passed:
            return "failed"
        return "unverified"


@dataclass(frozen=True)
class Ratings:
    """Users' ratings of the provider's billed jobs (``rate_job``), 1..5 stars each."""

    count: int = 0
    sum: int = 0

    @property
    def average(self) -> float | None:
        """``sum / count``; None without ratings."""
        return self.sum / self.count if self.count else None


@dataclass(frozen=True)
class RetiredWorkerKey:
    """A worker key replaced by a rotation: it signs only windows that ended by
    ``retired_at``. ``key == Pubkey.default()`` marks an empty slot."""

    key: Pubkey
    retired_at: int

    @property
    def empty(self) -> bool:
        return self.key == Pubkey.default()


@dataclass(frozen=True)
class ProviderView:
    market: Pubkey
    owner: Pubkey
    worker_key: Pubkey
    worker_key_expires_at: int
    retired_keys: tuple[RetiredWorkerKey, ...]
    last_equivocation_slash_at: int
    spec: GpuSpec
    price_per_gpu_second: int
    status: str
    stake: int
    unbonding: Unbonding
    gpus_in_use: int
    reputation: Reputation
    bump: int
    endpoint: str = ""
    """The worker's public API (workload delivery, status, logs); "" when none."""
    jailed_until: int | None = None
    address: Pubkey | None = None
    last_equivocation_slash_bps: int = 0
    """The highest equivocation slash rate applied to the incident of
    ``last_equivocation_slash_at`` (later evidence of it under a higher rate slashes the
    difference)."""
    registered_at: int = 0
    """Chain time of ``register_provider``."""
    last_slash_at: int = 0
    """Chain time of the provider's last slash of any kind; 0 = never."""
    hardware: HardwareVerdict = HardwareVerdict()
    ratings: Ratings = Ratings()

    @property
    def free_gpus(self) -> int:
        """GPUs not held by Open/Running/Finishing jobs."""
        return max(0, self.spec.gpu_count - self.gpus_in_use)

    @property
    def retired_worker_keys(self) -> list[RetiredWorkerKey]:
        """The occupied retired-key slots, newest first."""
        return [r for r in self.retired_keys if not r.empty]

    def key_signs_window(self, key: Pubkey, window_end: int) -> bool:
        """Whether ``key`` signed a window ending at ``window_end`` for this provider
        (``Provider::key_signs_window``): the current key, unexpired then, or a retired key for
        a window that ended by its retirement."""
        current = key == self.worker_key and (
            self.worker_key_expires_at == 0 or window_end <= self.worker_key_expires_at
        )
        return current or any(
            r.key == key and window_end <= r.retired_at for r in self.retired_worker_keys
        )


@dataclass(frozen=True)
class ValidatorView:
    market: Pubkey
    authority: Pubkey
    bond: int
    unbonding: Unbonding
    status: str
    settlements: int
    bump: int
    endpoint: str
    """Public URL of the validator's node (``http://`` or ``https://``): workers deliver proofs
    and committee members ask for attestations there."""
    rewards_earned: int
    rewards_unclaimed: int
    slashes: int
    address: Pubkey | None = None


@dataclass(frozen=True)
class JobTerms:
    """A job's economic terms, fixed at ``create_job`` from the market parameters in force
    then and the provider's price; nothing changes them afterwards."""

    rate_per_second: int
    fee_bps: int
    burn_bps: int
    window_seconds: int
    max_missed_windows: int
    grace_seconds: int
    max_skew_seconds: int
    quorum: int
    """Committee members whose agreement a settlement needs (the user's choice at creation)."""
    downtime_slash_bps: int
    equivocation_slash_bps: int
    reporter_reward_bps: int
    temp_critical_c: int
    ecc_uncorrected_max: int
    validator_reward_bps: int

    @property
    def missed_windows_seconds(self) -> int:
        """``window_seconds * max_missed_windows``: the silence after which a Running job may
        be slashed for downtime; also how long a retired worker key's receipts still settle."""
        return self.window_seconds * self.max_missed_windows


@dataclass(frozen=True)
class JobView:
    market: Pubkey
    user: Pubkey
    provider: Pubkey
    job_id: int
    gpu_count: int
    terms: JobTerms
    committee: list[Pubkey]
    """The validator authorities the user named (``committee_len`` of them, in order)."""
    committee_len: int
    deposited: int
    claimed_seconds: int
    """``cumulative_seconds`` of the last settled receipt: what the worker claimed so far."""
    paid_seconds: int
    """Seconds paid: the committee's approved total at the last settlement (<= claimed)."""
    paid_provider: int
    paid_validators: int
    paid_treasury: int
    burned: int
    refunded: int
    status: str
    created_at: int
    started_at: int
    ended_at: int
    last_seq: int
    last_receipt_hash: bytes
    last_window_end: int
    bump: int
    escrow_bump: int
    workload_hash: bytes = bytes(32)
    """sha256 of the workload spec fixed at create_job (``gpu_market.workload.spec_hash``);
    all zeros for a job without a workload."""
    address: Pubkey | None = None
    rated: bool = False
    """The user rated the job (``rate_job``; once per job)."""

    @property
    def booked_escrow(self) -> int:
        """``deposited - paid_provider - paid_validators - paid_treasury - burned - refunded``:
        what the books say is still in escrow. The escrow's token balance may be larger
        (donations); settle pays only from the booked part, and the refund returns all of it
        to the user."""
        return (self.deposited - self.paid_provider - self.paid_validators - self.paid_treasury
                - self.burned - self.refunded)  # fmt: skip

    def member_index(self, authority: Pubkey) -> int | None:
        """Position of validator ``authority`` in the committee, None if not a member."""
        try:
            return self.committee.index(authority)
        except ValueError:
            return None

    @property
    def grace_ends_at(self) -> int | None:
        """For a Finishing job, ``ended_at + terms.grace_seconds``: receipts up to ``ended_at``
        settle until then, and ``close_job`` / ``complete_job`` succeed only strictly after it.
        None for other statuses."""
        if self.status != "finishing":
            return None
        return self.ended_at + self.terms.grace_seconds

    def settlement_over(self, now: int) -> bool:
        """Whether no settlement is possible any more at unix time ``now``
        (``Job::settlement_over``): ``close_job`` may refund, and a Finishing job may be
        completed. Open and Running jobs: False; Completed, Cancelled, Failed, Declined: True."""
        if self.status in TERMINAL_JOB_STATUSES:
            return True
        grace_end = self.grace_ends_at
        return grace_end is not None and now > grace_end

    @property
    def expirable_after(self) -> int | None:
        """For a Running job, the unix time after which anyone may ``expire_job`` it if no
        receipt settles meanwhile: ``last_window_end + missed_windows_seconds + grace_seconds``
        (strictly after). None for other statuses."""
        if self.status != "running":
            return None
        return self.last_window_end + self.terms.missed_windows_seconds + self.terms.grace_seconds


def _variant(value: Any) -> tuple[str, Any]:
    """(lower-case variant name, the variant object) of a decoded borsh enum."""
    return type(value).__name__.lower(), value


def _fields(obj: Any, names: list[str]) -> dict[str, Any]:
    return {n: getattr(obj, n) for n in names}


def _params(d: Any) -> MarketParams:
    return MarketParams(**_fields(d, list(MarketParams.__dataclass_fields__)))


def _market(d: Any, address: Pubkey | None) -> MarketView:
    totals = MarketTotals(**_fields(d.totals, list(MarketTotals.__dataclass_fields__)))
    return MarketView(
        authority=d.authority,
        creator=d.creator,
        pending_authority=d.pending_authority,
        id=d.id,
        stake_mint=d.stake_mint,
        payment_mint=d.payment_mint,
        stake_vault=d.stake_vault,
        treasury=d.treasury,
        params=_params(d.params),
        pending_params=_params(d.pending_params),
        params_effective_at=d.params_effective_at,
        paused=bool(d.paused),
        totals=totals,
        bump=d.bump,
        stake_vault_bump=d.stake_vault_bump,
        fee_vault=d.fee_vault,
        fee_vault_bump=d.fee_vault_bump,
        address=address,
    )


def _provider(d: Any, address: Pubkey | None) -> ProviderView:
    status, variant = _variant(d.status)
    return ProviderView(
        market=d.market,
        owner=d.owner,
        worker_key=d.worker_key,
        worker_key_expires_at=d.worker_key_expires_at,
        retired_keys=tuple(RetiredWorkerKey(r.key, r.retired_at) for r in d.retired_keys),
        last_equivocation_slash_at=d.last_equivocation_slash_at,
        spec=GpuSpec(
            gpu_model=decode_fixed_str(bytes(d.spec.gpu_model)),
            gpu_count=d.spec.gpu_count,
            vram_mib=d.spec.vram_mib,
            region=decode_fixed_str(bytes(d.spec.region)),
        ),
        price_per_gpu_second=d.price_per_gpu_second,
        status=status,
        stake=d.stake,
        unbonding=Unbonding(d.unbonding.amount, d.unbonding.release_at),
        gpus_in_use=d.gpus_in_use,
        reputation=Reputation(**_fields(d.reputation, list(Reputation.__dataclass_fields__))),
        bump=d.bump,
        endpoint=decode_fixed_str(bytes(d.endpoint)),
        jailed_until=getattr(variant, "until", None) if status == "jailed" else None,
        address=address,
        last_equivocation_slash_bps=d.last_equivocation_slash_bps,
        registered_at=d.registered_at,
        last_slash_at=d.last_slash_at,
        hardware=HardwareVerdict(
            verified=bool(d.hardware.verified),
            passed=bool(d.hardware.passed),
            gpu_model=decode_fixed_str(bytes(d.hardware.gpu_model)),
            gpu_count=d.hardware.gpu_count,
            vram_mib=d.hardware.vram_mib,
            challenged_at=d.hardware.challenged_at,
            attested_at=d.hardware.attested_at,
            challenge_digest=bytes(d.hardware.challenge_digest),
            attesters=d.hardware.attesters,
            attesters_hash=bytes(d.hardware.attesters_hash),
        ),
        ratings=Ratings(d.ratings.count, d.ratings.sum),
    )


def _validator(d: Any, address: Pubkey | None) -> ValidatorView:
    return ValidatorView(
        market=d.market,
        authority=d.authority,
        bond=d.bond,
        unbonding=Unbonding(d.unbonding.amount, d.unbonding.release_at),
        status=_variant(d.status)[0],
        settlements=d.settlements,
        bump=d.bump,
        endpoint=decode_fixed_str(bytes(d.endpoint)),
        rewards_earned=d.rewards_earned,
        rewards_unclaimed=d.rewards_unclaimed,
        slashes=d.slashes,
        address=address,
    )


def _job(d: Any, address: Pubkey | None) -> JobView:
    special = ("status", "address", "last_receipt_hash", "terms", "committee", "workload_hash",
               "rated")  # fmt: skip
    names = [n for n in JobView.__dataclass_fields__ if n not in special]
    return JobView(
        **_fields(d, names),
        terms=JobTerms(**_fields(d.terms, list(JobTerms.__dataclass_fields__))),
        committee=list(d.committee[: d.committee_len]),
        status=_variant(d.status)[0],
        last_receipt_hash=bytes(d.last_receipt_hash),
        workload_hash=bytes(d.workload_hash),
        address=address,
        rated=bool(d.rated),
    )


@dataclass(frozen=True)
class ClosedJobView:
    """What ``close_job`` leaves at a job's address: a program-owned tombstone, so the address
    never holds a Job again (one job id, one job). ``fetch_job`` reads it as None. It keeps
    what ``rate_job`` needs: the user, the Provider account, the seconds paid and whether the
    job was rated (a 16-byte tombstone of an older program has only ``closed_at``)."""

    closed_at: int
    address: Pubkey | None = None
    user: Pubkey | None = None
    provider: Pubkey | None = None
    paid_seconds: int = 0
    rated: bool = False


CLOSED_JOB_DISCRIMINATOR = hashlib.sha256(b"account:ClosedJob").digest()[:8]
"""Anchor's discriminator of ``ClosedJob`` (not in the IDL: no instruction takes an account
of that type by name)."""
CLOSED_JOB_LEN = 8 + 8 + 32 + 32 + 8 + 1
"""``ClosedJob``: discriminator, closed_at, user, provider, paid_seconds, rated."""


def _closed_job(data: bytes, address: Pubkey | None) -> ClosedJobView:
    data = bytes(data)
    if len(data) < 16:
        raise ValueError(f"ClosedJob account data is {len(data)} bytes, expected 16 or {CLOSED_JOB_LEN}")
    closed_at = int.from_bytes(data[8:16], "little", signed=True)
    if len(data) < CLOSED_JOB_LEN:
        return ClosedJobView(closed_at, address)
    return ClosedJobView(closed_at, address, user=Pubkey.from_bytes(data[16:48]),
                         provider=Pubkey.from_bytes(data[48:80]),
                         paid_seconds=int.from_bytes(data[80:88], "little"),
                         rated=data[88] != 0)  # fmt: skip


@dataclass(frozen=True)
class EquivocationRecordView:
    """A slashed equivocation: ``["equivocation", job, started_at, seq]`` for a provider's two
    receipts (``offender`` = the Provider account), ``["validator_equivocation", validator, job,
    started_at, seq]`` for a validator's two attestations (``offender`` = the Validator
    account)."""

    job: Pubkey
    seq: int
    offender: Pubkey
    reporter: Pubkey
    slashed: int
    bump: int
    address: Pubkey | None = None


def _equivocation_record(d: Any, address: Pubkey | None) -> EquivocationRecordView:
    names = [n for n in EquivocationRecordView.__dataclass_fields__ if n != "address"]
    return EquivocationRecordView(**_fields(d, names), address=address)


@dataclass(frozen=True)
class WrongAnswerRecordView:
    """``["wrong_answer", provider, challenge_digest]``: the provider was slashed once for a
    wrong answer to that challenge (``slash_wrong_answer``)."""

    provider: Pubkey
    challenge_digest: bytes
    reporter: Pubkey
    slashed: int
    bump: int
    address: Pubkey | None = None


def _wrong_answer_record(d: Any, address: Pubkey | None) -> WrongAnswerRecordView:
    return WrongAnswerRecordView(d.provider, bytes(d.challenge_digest), d.reporter, d.slashed,
                                 d.bump, address)  # fmt: skip


_BUILDERS = {
    "Market": _market,
    "Provider": _provider,
    "Validator": _validator,
    "Job": _job,
    "EquivocationRecord": _equivocation_record,
    "WrongAnswerRecord": _wrong_answer_record,
}


def decode_account(
    data: bytes, address: Pubkey | None = None, codec: Codec | None = None
) -> (MarketView | ProviderView | ValidatorView | JobView | EquivocationRecordView
      | WrongAnswerRecordView | ClosedJobView):  # fmt: skip
    """Decode any gpu_market account into its view; ValueError if ``data`` is not one."""
    if bytes(data[:8]) == CLOSED_JOB_DISCRIMINATOR:
        return _closed_job(data, address)
    codec = codec or default_codec()
    name, decoded = codec.decode_account(data)
    return _BUILDERS[name](decoded, address)


def _decode_as(kind: str, data: bytes, address: Pubkey | None, codec: Codec | None) -> Any:
    codec = codec or default_codec()
    name = codec.account_name(data)
    if name != kind:
        raise ValueError(f"expected a {kind} account, got {name or 'an unknown account'}")
    return decode_account(data, address, codec)


def decode_market(data: bytes, address: Pubkey | None = None, codec: Codec | None = None) -> MarketView:
    """Decode a Market account; ValueError if ``data`` is not one."""
    return _decode_as("Market", data, address, codec)


def decode_provider(
    data: bytes, address: Pubkey | None = None, codec: Codec | None = None
) -> ProviderView:
    """Decode a Provider account; ValueError if ``data`` is not one."""
    return _decode_as("Provider", data, address, codec)


def decode_validator(
    data: bytes, address: Pubkey | None = None, codec: Codec | None = None
) -> ValidatorView:
    """Decode a Validator account; ValueError if ``data`` is not one."""
    return _decode_as("Validator", data, address, codec)


def decode_job(data: bytes, address: Pubkey | None = None, codec: Codec | None = None) -> JobView:
    """Decode a Job account; ValueError if ``data`` is not one."""
    return _decode_as("Job", data, address, codec)


def decode_equivocation_record(
    data: bytes, address: Pubkey | None = None, codec: Codec | None = None
) -> EquivocationRecordView:
    """Decode an EquivocationRecord account; ValueError if ``data`` is not one."""
    return _decode_as("EquivocationRecord", data, address, codec)


def decode_wrong_answer_record(
    data: bytes, address: Pubkey | None = None, codec: Codec | None = None
) -> WrongAnswerRecordView:
    """Decode a WrongAnswerRecord account; ValueError if ``data`` is not one."""
    return _decode_as("WrongAnswerRecord", data, address, codec)
