"""Read-only views of gpu_market accounts, decoded from account bytes (pure).

Fields are named as in the IDL (snake_case). Pubkeys are ``solders.pubkey.Pubkey``; enums are
lower-case strings (``JobView.status`` in ``JOB_STATUSES``, ``ProviderView.status`` in
``PROVIDER_STATUSES``, ``ValidatorView.status`` in ``{"active", "exiting"}``); fixed-size
zero-padded byte strings (``gpu_model``, ``region``) are ``str``; ``[u8; 32]`` hashes are
``bytes``. Every view also carries ``address`` (the account's key, None when decoded from bare
bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from solders.pubkey import Pubkey

from .codec import Codec, default_codec

__all__ = [
    "GPU_MODEL_LEN",
    "JOB_STATUSES",
    "PROVIDER_STATUSES",
    "REGION_LEN",
    "EquivocationRecordView",
    "GpuSpec",
    "JobView",
    "MarketParams",
    "MarketTotals",
    "MarketView",
    "ProviderView",
    "Reputation",
    "Unbonding",
    "ValidatorView",
    "decode_account",
    "decode_equivocation_record",
    "decode_fixed_str",
    "decode_job",
    "decode_market",
    "decode_provider",
    "decode_validator",
    "encode_fixed_str",
]

JOB_STATUSES = ("open", "running", "finishing", "completed", "cancelled", "failed")
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
    settle_quorum: int
    max_missed_windows: int
    downtime_slash_bps: int
    equivocation_slash_bps: int
    reporter_reward_bps: int
    validator_min_bond: int
    max_skew_seconds: int


@dataclass(frozen=True)
class MarketTotals:
    staked: int
    bonded: int
    burned: int
    fees: int
    slashed: int
    jobs: int


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
    paused: bool
    totals: MarketTotals
    bump: int
    stake_vault_bump: int
    address: Pubkey | None = None


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
class ProviderView:
    market: Pubkey
    owner: Pubkey
    worker_key: Pubkey
    worker_key_expires_at: int
    previous_worker_key: Pubkey
    previous_key_retired_at: int
    spec: GpuSpec
    price_per_gpu_second: int
    status: str
    stake: int
    unbonding: Unbonding
    gpus_in_use: int
    reputation: Reputation
    bump: int
    jailed_until: int | None = None
    address: Pubkey | None = None

    @property
    def free_gpus(self) -> int:
        """GPUs not held by Open/Running/Finishing jobs."""
        return max(0, self.spec.gpu_count - self.gpus_in_use)


@dataclass(frozen=True)
class ValidatorView:
    market: Pubkey
    authority: Pubkey
    bond: int
    unbonding: Unbonding
    status: str
    settlements: int
    bump: int
    address: Pubkey | None = None


@dataclass(frozen=True)
class JobView:
    market: Pubkey
    user: Pubkey
    provider: Pubkey
    job_id: int
    gpu_count: int
    rate_per_second: int
    deposited: int
    settled_seconds: int
    paid_provider: int
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
    address: Pubkey | None = None


def _variant(value: Any) -> tuple[str, Any]:
    """(lower-case variant name, the variant object) of a decoded borsh enum."""
    return type(value).__name__.lower(), value


def _fields(obj: Any, names: list[str]) -> dict[str, Any]:
    return {n: getattr(obj, n) for n in names}


def _market(d: Any, address: Pubkey | None) -> MarketView:
    params = MarketParams(**_fields(d.params, list(MarketParams.__dataclass_fields__)))
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
        params=params,
        paused=bool(d.paused),
        totals=totals,
        bump=d.bump,
        stake_vault_bump=d.stake_vault_bump,
        address=address,
    )


def _provider(d: Any, address: Pubkey | None) -> ProviderView:
    status, variant = _variant(d.status)
    return ProviderView(
        market=d.market,
        owner=d.owner,
        worker_key=d.worker_key,
        worker_key_expires_at=d.worker_key_expires_at,
        previous_worker_key=d.previous_worker_key,
        previous_key_retired_at=d.previous_key_retired_at,
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
        jailed_until=getattr(variant, "until", None) if status == "jailed" else None,
        address=address,
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
        address=address,
    )


def _job(d: Any, address: Pubkey | None) -> JobView:
    names = [n for n in JobView.__dataclass_fields__ if n not in ("status", "address", "last_receipt_hash")]
    return JobView(
        **_fields(d, names),
        status=_variant(d.status)[0],
        last_receipt_hash=bytes(d.last_receipt_hash),
        address=address,
    )


@dataclass(frozen=True)
class EquivocationRecordView:
    """``["equivocation", job, seq]``: (job, seq) was slashed for equivocation."""

    job: Pubkey
    seq: int
    provider: Pubkey
    reporter: Pubkey
    slashed: int
    bump: int
    address: Pubkey | None = None


def _equivocation_record(d: Any, address: Pubkey | None) -> EquivocationRecordView:
    names = [n for n in EquivocationRecordView.__dataclass_fields__ if n != "address"]
    return EquivocationRecordView(**_fields(d, names), address=address)


_BUILDERS = {
    "Market": _market,
    "Provider": _provider,
    "Validator": _validator,
    "Job": _job,
    "EquivocationRecord": _equivocation_record,
}


def decode_account(
    data: bytes, address: Pubkey | None = None, codec: Codec | None = None
) -> MarketView | ProviderView | ValidatorView | JobView | EquivocationRecordView:
    """Decode any gpu_market account into its view; ValueError if ``data`` is not one."""
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
