"""Test support: keys, a proof builder, and ``FakeChain`` (unit tests only).

``FakeChain`` implements the slice of ``GpuMarketClient`` the validator uses
(docs/sdk-api.md) with the SDK's error types and its own view dataclasses in the account
shapes of docs/.hardening-contract.md (``job.terms``, ``provider.retired_keys``, status
``declined``); the validator reads views only through ``field_of``, so these stand in for
the SDK's views and anchorpy objects alike. It applies the program's settle rules 3-4 (seq,
cumulative, window_end) so duplicate settlement is caught.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field, replace
from typing import Any

from gpu_market.errors import GpuMarketError, RpcUnavailable
from gpu_market.proof import (
    ZERO_HASH,
    GpuWindow,
    WindowProof,
    encode_proof,
    proof_hash,
    receipt_for_proof,
    sign_proof,
)
from gpu_market.receipt import private_key_from_seed, public_key_bytes, sign
from gpu_market.settle import SettleItem
from gpum_validator.config import VerifyConfig
from solders.pubkey import Pubkey

T0 = 1_700_000_000
WINDOW = 60
PROGRAM = bytes(range(1, 33))
MARKET = bytes([7] * 32)
PROVIDER = bytes([9] * 32)
JOB = bytes([11] * 32)
WORKER_SEED = bytes([42] * 32)
WORKER_KEY = private_key_from_seed(WORKER_SEED)
WORKER_PUB = public_key_bytes(WORKER_KEY)
OTHER_KEY = private_key_from_seed(bytes([43] * 32))
OTHER_PUB = public_key_bytes(OTHER_KEY)
UUIDS = ("GPU-aaaa", "GPU-bbbb")

ERROR_CODES = {"StaleSequence": 6034, "CumulativeDecreased": 6035, "WindowNotAfterLast": 6036,
               "WindowEndInFuture": 6038, "InvalidJobStatus": 6024}


def pk(b: bytes) -> Pubkey:
    return Pubkey.from_bytes(b)


def b58(b: bytes) -> str:
    return str(Pubkey.from_bytes(b))


def cfg(**kw: Any) -> VerifyConfig:
    return replace(VerifyConfig(program_id=PROGRAM, market=MARKET), **kw)


def gpu(uuid: str, length: int = WINDOW, **kw: Any) -> GpuWindow:
    return replace(GpuWindow(uuid=uuid, samples=length, covered_seconds=length,
                             util_gpu_avg_bp=9000, util_gpu_max_bp=10000, temp_max_c=70,
                             ecc_uncorrected_delta=0), **kw)


def make_proof(seq: int = 1, *, prev: bytes = ZERO_HASH, started_at: int = T0,
               cumulative: int | None = None, billable: int | None = None,
               gpus: tuple[GpuWindow, ...] | None = None, **kw: Any) -> WindowProof:
    start = started_at + (seq - 1) * WINDOW
    end = start + WINDOW
    billable = WINDOW if billable is None else billable
    base = WindowProof(
        program_id=PROGRAM, market=MARKET, job=JOB, provider=PROVIDER, worker_key=WORKER_PUB,
        seq=seq, window_start=start, window_end=end, sample_interval_ms=1000,
        gpus=gpus if gpus is not None else tuple(gpu(u) for u in UUIDS),
        process_list_hash=bytes(32), prev_proof_hash=prev, health_flags=0,
        billable_seconds=billable,
        cumulative_seconds=seq * WINDOW if cumulative is None else cumulative,
    )
    return replace(base, **kw)


def signed_json(p: WindowProof, key=WORKER_KEY, *, proof_bytes: bytes | None = None,
                worker_key: bytes | None = None, receipt_key=None) -> dict[str, str]:
    raw = encode_proof(p) if proof_bytes is None else proof_bytes
    rsig = sign(receipt_key or key, receipt_for_proof(p, raw))
    return {
        "proof": base64.b64encode(raw).decode(),
        "proof_signature": base64.b64encode(sign_proof(key, raw)).decode(),
        "receipt_signature": base64.b64encode(rsig).decode(),
        "worker_key": b58(worker_key or p.worker_key),
    }


def chain_of(n: int, **kw: Any) -> list[WindowProof]:
    """Proofs seq 1..n of one job, hash-chained, each billing the full window."""
    out, prev = [], ZERO_HASH
    for s in range(1, n + 1):
        p = make_proof(s, prev=prev, **kw)
        out.append(p)
        prev = proof_hash(encode_proof(p))
    return out


@dataclass(frozen=True)
class JobTerms:
    """``job.terms``: fixed at create_job."""

    rate_per_second: int = 10
    fee_bps: int = 500
    burn_bps: int = 5000
    window_seconds: int = WINDOW
    max_missed_windows: int = 10
    grace_seconds: int = 3600
    max_skew_seconds: int = 5
    settle_quorum: int = 1
    downtime_slash_bps: int = 100
    equivocation_slash_bps: int = 1000
    reporter_reward_bps: int = 1000
    temp_critical_c: int = 95
    ecc_uncorrected_max: int = 0


@dataclass(frozen=True)
class JobView:
    market: Pubkey
    user: Pubkey
    provider: Pubkey
    job_id: int
    gpu_count: int
    terms: JobTerms
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
    bump: int = 255
    escrow_bump: int = 254
    address: Pubkey | None = None


@dataclass(frozen=True)
class RetiredWorkerKey:
    key: Pubkey
    retired_at: int


EMPTY_SLOTS = tuple(RetiredWorkerKey(Pubkey.default(), 0) for _ in range(4))


@dataclass(frozen=True)
class ProviderView:
    market: Pubkey
    owner: Pubkey
    worker_key: Pubkey
    worker_key_expires_at: int
    retired_keys: tuple[RetiredWorkerKey, ...] = EMPTY_SLOTS
    status: str = "active"
    stake: int = 10**9
    gpus_in_use: int = 2
    last_equivocation_slash_at: int = 0
    address: Pubkey | None = None


@dataclass(frozen=True)
class MarketView:
    authority: Pubkey
    params: dict[str, int] = field(default_factory=dict)
    address: Pubkey | None = None


def retired(*keys: tuple[bytes, int]) -> tuple[RetiredWorkerKey, ...]:
    """``retired_keys`` holding ``(key, retired_at)`` pairs, the other slots empty."""
    slots = [RetiredWorkerKey(pk(k), at) for k, at in keys]
    return tuple(slots) + EMPTY_SLOTS[len(slots):]


def job_view(**kw: Any) -> JobView:
    base = JobView(market=pk(MARKET), user=pk(bytes([3] * 32)), provider=pk(PROVIDER), job_id=1,
                   gpu_count=2, terms=JobTerms(), deposited=10 * 2 * 3600, settled_seconds=0,
                   paid_provider=0, paid_treasury=0, burned=0, refunded=0, status="running",
                   created_at=T0 - 10, started_at=T0, ended_at=0, last_seq=0,
                   last_receipt_hash=bytes(32), last_window_end=T0, address=pk(JOB))
    return replace(base, **kw)


def provider_view(**kw: Any) -> ProviderView:
    base = ProviderView(market=pk(MARKET), owner=pk(bytes([5] * 32)), worker_key=pk(WORKER_PUB),
                        worker_key_expires_at=0, address=pk(PROVIDER))
    return replace(base, **kw)


def market_view() -> MarketView:
    return MarketView(authority=Pubkey.default(), address=pk(MARKET))


class FakeChain:
    """In-memory stand-in for GpuMarketClient (reads, settle, max items per tx,
    slash_equivocation and the EquivocationRecord read)."""

    def __init__(self) -> None:
        self.market = market_view()
        self.providers: dict[bytes, ProviderView] = {PROVIDER: provider_view()}
        self.jobs: dict[bytes, JobView] = {JOB: job_view()}
        self.settle_calls: list[list[SettleItem]] = []
        self.provider_reads = 0
        self.down = False
        self.settle_error: Exception | None = None
        self.max_items = 4
        self.now = T0 + 3600
        self.slash_calls: list[dict[str, Any]] = []
        self.slash_error: Exception | None = None
        self.records: dict[tuple[bytes, int], str] = {}

    def _io(self) -> None:
        if self.down:
            raise RpcUnavailable("connection refused (fake)")

    def fetch_market(self, market: Pubkey) -> MarketView | None:
        self._io()
        return self.market if bytes(market) == MARKET else None

    def fetch_provider(self, provider: Pubkey) -> ProviderView | None:
        self._io()
        self.provider_reads += 1
        return self.providers.get(bytes(provider))

    def fetch_job(self, job: Pubkey) -> JobView | None:
        self._io()
        return self.jobs.get(bytes(job))

    def max_settle_items_per_tx(self) -> int:
        return self.max_items

    def settle(self, validator_authority: Any, items: list[SettleItem]) -> str:
        self._io()
        self.settle_calls.append(list(items))
        if self.settle_error is not None:
            raise self.settle_error
        updated = dict(self.jobs)
        for it in items:  # all-or-nothing, as one transaction
            j = updated[bytes(it.job)]
            for name, bad in (("StaleSequence", it.seq <= j.last_seq),
                              ("CumulativeDecreased", it.cumulative_seconds < j.settled_seconds),
                              ("WindowNotAfterLast", it.window_end <= j.last_window_end)):
                if bad:
                    raise GpuMarketError(ERROR_CODES[name], name, name, [])
            billed = it.cumulative_seconds - j.settled_seconds
            pay = billed * j.terms.rate_per_second
            updated[bytes(it.job)] = replace(j, last_seq=it.seq,
                                             settled_seconds=it.cumulative_seconds,
                                             last_window_end=it.window_end,
                                             last_receipt_hash=it.proof_hash,
                                             paid_provider=j.paid_provider + pay)
        self.jobs = updated
        return f"sig{len(self.settle_calls)}"

    def fetch_equivocation_record(self, record: Pubkey) -> dict[str, Any] | None:
        self._io()
        from gpu_market.pda import equivocation_pda

        for (job, seq), reporter in self.records.items():
            started_at = self.jobs[job].started_at if job in self.jobs else T0
            if equivocation_pda(pk(job), started_at, seq, pk(PROGRAM)) == record:
                return {"job": pk(job), "seq": seq, "reporter": reporter}
        return None

    def slash_equivocation(self, reporter: Any, job: Pubkey, first: Any, first_signature: bytes,
                           second: Any, second_signature: bytes,
                           reporter_stake_account: Pubkey | None = None) -> str:
        """The program's checks that matter to the validator: once per (job, seq) (the
        record's ``init`` fails with the System program's AccountAlreadyInUse), the job must
        exist, and the receipts must differ in content but not in seq."""
        self._io()
        self.slash_calls.append({"job": job, "first": first, "first_signature": first_signature,
                                 "second": second, "second_signature": second_signature})
        if self.slash_error is not None:
            raise self.slash_error
        if bytes(job) not in self.jobs:
            raise GpuMarketError(3012, "AccountNotInitialized", "not initialized", [])
        if first.seq != second.seq or first == second:
            raise GpuMarketError(6050, "NotEquivocation", "not equivocation", [])
        key = (bytes(job), first.seq)
        if key in self.records:
            raise GpuMarketError(0, "AccountAlreadyInUse", "already in use", [])
        self.records[key] = str(reporter)
        self.jobs[bytes(job)] = replace(self.jobs[bytes(job)], status="failed")
        return f"slash{len(self.slash_calls)}"

    def set_job(self, **kw: Any) -> None:
        self.jobs[JOB] = replace(self.jobs[JOB], **kw)

    def set_terms(self, job: bytes = JOB, **kw: Any) -> None:
        """Change fields of a job's terms (as if it had been created with them)."""
        self.jobs[job] = replace(self.jobs[job], terms=replace(self.jobs[job].terms, **kw))


