"""Test support: keys, a proof builder, and ``FakeChain`` (unit tests only).

``FakeChain`` implements the slice of ``GpuMarketClient`` the validator uses
(docs/sdk-api.md: committees, approved settle with attestations,
``fetch_validator_by_authority``, ``slash_validator_equivocation``, ``slash_downtime_message``
+ ``send_presigned``) with the SDK's error types, its views (``gpu_market.accounts``: built
by ``job_view``, ``provider_view``, ``validator_view``, ``market_view`` with test defaults)
and its ``SettleItem`` / ``Attestation`` (``gpu_market.settle``). It applies the program's
settle rules (seq, claims, approved bounds, the worker's and the attesters' Ed25519
signatures, quorum of distinct committee members) and its downtime rule, so a settlement the
real program would refuse fails here too.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import replace
from typing import Any

from gpu_market import accounts
from gpu_market.errors import GpuMarketError, RpcUnavailable
from gpu_market.pda import validator_pda
from gpu_market.proof import (
    ZERO_HASH,
    GpuWindow,
    WindowProof,
    encode_proof,
    proof_hash,
    receipt_for_proof,
    sign_proof,
)
from gpu_market.receipt import (
    private_key_from_seed,
    public_key_bytes,
    receipt_message,
    sign_receipt,
    verify,
    verify_receipt,
)
from gpu_market.settle import Attestation, SettleItem
from gpum_validator.attest import attestation_message
from gpum_validator.config import VerifyConfig
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import Message
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
VALIDATOR_KEYS = tuple(Keypair.from_seed(bytes([100 + i] * 32)) for i in range(5))
"""Validator authorities of the tests; the first is "this" validator of single-node tests."""
ME = VALIDATOR_KEYS[0]
ME_PUB = bytes(ME.pubkey())
DUMMY = Pubkey.from_bytes(bytes([77] * 32))

ERROR_CODES = {"StaleSequence": 6034, "CumulativeDecreased": 6035, "WindowNotAfterLast": 6036,
               "WindowEndInFuture": 6038, "InvalidJobStatus": 6024, "NotCommitteeMember": 6070,
               "QuorumNotMet": 6030, "ApprovedExceedsClaim": 6071, "ApprovedDecreased": 6072,
               "BilledSecondsExceedWallTime": 6073, "ReceiptMessageMismatch": 6031,
               "NotEnoughMissedWindows": 6040, "DuplicateValidator": 6074,
               "ValidatorNotActive": 6022, "AccountNotInitialized": 3012}

SETTLING_VALIDATOR_STATUSES = ("active", "exiting")
"""Validator statuses whose members attest and submit ``settle`` (``ValidatorStatus::settles``);
only ``active`` members count for ``slash_downtime``."""


def err(name: str) -> GpuMarketError:
    return GpuMarketError(ERROR_CODES.get(name, 6000), name, name, [])


def pk(b: bytes) -> Pubkey:
    return Pubkey.from_bytes(b)


def b58(b: bytes) -> str:
    return str(Pubkey.from_bytes(b))


def cfg(**kw: Any) -> VerifyConfig:
    return replace(VerifyConfig(program_id=PROGRAM, market=MARKET, authority=ME_PUB), **kw)


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
    rsig = sign_receipt(receipt_key or key, receipt_for_proof(p, raw))
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


TERMS = accounts.JobTerms(
    rate_per_second=10, fee_bps=500, burn_bps=5000, window_seconds=WINDOW, max_missed_windows=10,
    grace_seconds=3600, max_skew_seconds=5, quorum=1, downtime_slash_bps=100,
    equivocation_slash_bps=1000, reporter_reward_bps=1000, temp_critical_c=95,
    ecc_uncorrected_max=0, validator_reward_bps=1000)
"""``job.terms`` of the tests' jobs (``job_terms`` varies them)."""
EMPTY_SLOTS = tuple(accounts.RetiredWorkerKey(Pubkey.default(), 0) for _ in range(4))
NO_UNBONDING = accounts.Unbonding(0, 0)


def job_terms(**kw: Any) -> accounts.JobTerms:
    """``TERMS`` with the fields of ``kw`` changed."""
    return replace(TERMS, **kw)


def retired(*keys: tuple[bytes, int]) -> tuple[accounts.RetiredWorkerKey, ...]:
    """``retired_keys`` holding ``(key, retired_at)`` pairs, the other slots empty."""
    slots = [accounts.RetiredWorkerKey(pk(k), at) for k, at in keys]
    return tuple(slots) + EMPTY_SLOTS[len(slots):]


def job_view(committee: tuple[bytes, ...] = (ME_PUB,), **kw: Any) -> accounts.JobView:
    members = [pk(m) for m in committee]
    base = accounts.JobView(
        market=pk(MARKET), user=pk(bytes([3] * 32)), provider=pk(PROVIDER), job_id=1,
        gpu_count=2, terms=TERMS, committee=members, committee_len=len(members),
        deposited=10 * 2 * 3600, claimed_seconds=0, paid_seconds=0, paid_provider=0,
        paid_validators=0, paid_treasury=0, burned=0, refunded=0, status="running",
        created_at=T0 - 10, started_at=T0, ended_at=0, last_seq=0, last_receipt_hash=bytes(32),
        last_window_end=T0, bump=255, escrow_bump=254, address=pk(JOB))
    return replace(base, **kw)


def provider_view(**kw: Any) -> accounts.ProviderView:
    base = accounts.ProviderView(
        market=pk(MARKET), owner=pk(bytes([5] * 32)), worker_key=pk(WORKER_PUB),
        worker_key_expires_at=0, retired_keys=EMPTY_SLOTS, last_equivocation_slash_at=0,
        spec=accounts.GpuSpec(gpu_model="Simulated H100", gpu_count=2, vram_mib=81920,
                              region="test"),
        price_per_gpu_second=10, status="active", stake=10**9, unbonding=NO_UNBONDING,
        gpus_in_use=2, reputation=accounts.Reputation(0, 0, 0, 0, 0), bump=255,
        address=pk(PROVIDER))
    return replace(base, **kw)


def validator_view(authority: Pubkey, **kw: Any) -> accounts.ValidatorView:
    """An active member of ``MARKET`` with a bond and no endpoint."""
    base = accounts.ValidatorView(
        market=pk(MARKET), authority=authority, bond=10**9, unbonding=NO_UNBONDING,
        status="active", settlements=0, bump=255, endpoint="", rewards_earned=0,
        rewards_unclaimed=0, slashes=0)
    return replace(base, **kw)


def market_view() -> accounts.MarketView:
    params = accounts.MarketParams(**accounts.DEFAULT_MARKET_PARAMS)
    return accounts.MarketView(
        authority=Pubkey.default(), creator=Pubkey.default(), pending_authority=Pubkey.default(),
        id=0, stake_mint=DUMMY, payment_mint=DUMMY, stake_vault=DUMMY, treasury=DUMMY,
        params=params, pending_params=params, params_effective_at=0, paused=False,
        totals=accounts.MarketTotals(0, 0, 0, 0, 0, 0, 0, 0), bump=255, stake_vault_bump=254,
        fee_vault=DUMMY, fee_vault_bump=253, address=pk(MARKET))


DOWNTIME_DISCRIMINATOR = hashlib.sha256(b"global:slash_downtime").digest()[:8]


class FakeChain:
    """In-memory stand-in for GpuMarketClient (reads, settle with attestations, max items per
    tx, slash_equivocation and its record, validators with endpoints, slash of validators,
    slash_downtime built for co-signing)."""

    def __init__(self) -> None:
        self.market = market_view()
        self.providers: dict[bytes, accounts.ProviderView] = {PROVIDER: provider_view()}
        self.jobs: dict[bytes, accounts.JobView] = {JOB: job_view()}
        self.validators: dict[bytes, accounts.ValidatorView] = {
            bytes(k.pubkey()): validator_view(k.pubkey()) for k in VALIDATOR_KEYS}
        self.settle_calls: list[list[SettleItem]] = []
        self.settle_submitters: list[bytes] = []
        self.provider_reads = 0
        self.down = False
        self.settle_error: Exception | None = None
        self.max_items = 4
        self.now = T0 + 3600
        self.slash_calls: list[dict[str, Any]] = []
        self.slash_error: Exception | None = None
        self.records: dict[tuple[bytes, int], str] = {}
        self.validator_slash_calls: list[dict[str, Any]] = []
        self.validator_records: set[tuple[bytes, bytes, int]] = set()
        self.downtime_calls: list[dict[str, Any]] = []

    def _io(self) -> None:
        if self.down:
            raise RpcUnavailable("connection refused (fake)")

    def fetch_market(self, market: Pubkey) -> accounts.MarketView | None:
        self._io()
        return self.market if bytes(market) == MARKET else None

    def fetch_provider(self, provider: Pubkey) -> accounts.ProviderView | None:
        self._io()
        self.provider_reads += 1
        return self.providers.get(bytes(provider))

    def fetch_job(self, job: Pubkey) -> accounts.JobView | None:
        self._io()
        return self.jobs.get(bytes(job))

    def fetch_validator_by_authority(self, market: Pubkey, authority: Pubkey
                                     ) -> accounts.ValidatorView | None:
        self._io()
        v = self.validators.get(bytes(authority))
        return v if v is not None and bytes(market) == MARKET else None

    def max_settle_items_per_tx(self, quorum: int = 1) -> int:
        return self.max_items

    def settle(self, validator_authority: Any, items: list[Any]) -> str:
        self._io()
        self.settle_calls.append(list(items))
        self.settle_submitters.append(bytes(validator_authority.pubkey()))
        if self.settle_error is not None:
            raise self.settle_error
        updated = dict(self.jobs)
        validators = dict(self.validators)
        me = bytes(validator_authority.pubkey())
        self._settling_validator(me)
        for it in items:  # all-or-nothing, as one transaction
            j = updated[bytes(it.job)]
            committee = [bytes(m) for m in j.committee]
            approved = it.approved_seconds
            wall = it.window_end - j.started_at + j.terms.max_skew_seconds
            if j.status == "finishing":
                wall = min(wall, j.ended_at - j.started_at)
            for name, bad in (
                    ("InvalidJobStatus", j.status not in ("running", "finishing")),
                    ("NotCommitteeMember", me not in committee),
                    ("StaleSequence", it.seq <= j.last_seq),
                    ("CumulativeDecreased", it.cumulative_seconds < j.claimed_seconds),
                    ("WindowNotAfterLast", it.window_end <= j.last_window_end),
                    ("ApprovedDecreased", approved < j.paid_seconds),
                    ("ApprovedExceedsClaim",
                     approved - j.paid_seconds > it.cumulative_seconds - j.claimed_seconds),
                    ("BilledSecondsExceedWallTime", approved > wall),
                    ("WindowEndInFuture", it.window_end > self.now + j.terms.max_skew_seconds)):
                if bad:
                    raise err(name)
            msg = receipt_message(PROGRAM, MARKET, bytes(it.job), it.seq, it.cumulative_seconds,
                                  it.window_end, it.proof_hash)
            if not verify_receipt(bytes(it.worker_key), it.receipt_signature, msg):
                raise err("ReceiptMessageMismatch")
            atts = list(it.attestations)
            if len(atts) != j.terms.quorum - 1:
                raise err("QuorumNotMet")
            seen = [me]
            for a in atts:
                who = bytes(a.authority)
                if who in seen:
                    raise err("DuplicateValidator")
                self._settling_validator(who)
                if who not in committee:
                    raise err("NotCommitteeMember")
                if not verify(who, a.signature, attestation_message(msg, approved)):
                    raise err("ReceiptMessageMismatch")
                seen.append(who)
            billed = approved - j.paid_seconds
            pay = billed * j.terms.rate_per_second
            fee = -(-pay * j.terms.fee_bps // 10_000)
            reward = fee * j.terms.validator_reward_bps // 10_000
            share, rest = divmod(reward, len(seen))
            for i, who in enumerate(seen):
                v = validators[who]
                got = share + (rest if i == 0 else 0)
                validators[who] = replace(v, rewards_earned=v.rewards_earned + got,
                                          rewards_unclaimed=v.rewards_unclaimed + got)
            updated[bytes(it.job)] = replace(j, last_seq=it.seq,
                                             claimed_seconds=it.cumulative_seconds,
                                             paid_seconds=approved,
                                             last_window_end=it.window_end,
                                             last_receipt_hash=it.proof_hash,
                                             paid_provider=j.paid_provider + pay - fee,
                                             paid_validators=j.paid_validators + reward,
                                             paid_treasury=j.paid_treasury + fee - reward)
        self.jobs = updated
        self.validators = validators
        return f"sig{len(self.settle_calls)}"

    def _settling_validator(self, who: bytes) -> None:
        """``settle``'s check of the submitter and every attester: a Validator account of the
        market (a withdrawn one is closed) whose status settles (Active or Exiting)."""
        v = self.validators.get(who)
        if v is None:
            raise err("AccountNotInitialized")
        if v.status not in SETTLING_VALIDATOR_STATUSES:
            raise err("ValidatorNotActive")

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

    def slash_validator_equivocation(self, reporter: Any, job: Pubkey, validator_authority: Pubkey,
                                     first: Any, first_approved: int, first_signature: bytes,
                                     second: Any, second_approved: int, second_signature: bytes,
                                     reporter_stake_account: Pubkey | None = None) -> str:
        """Both attestations must verify under the member's key for one seq and differ;
        once per (validator, job, seq)."""
        self._io()
        self.validator_slash_calls.append({
            "job": job, "validator": validator_authority, "first": first,
            "first_approved": first_approved, "second": second,
            "second_approved": second_approved})
        j = self.jobs.get(bytes(job))
        if j is None:
            raise GpuMarketError(3012, "AccountNotInitialized", "not initialized", [])
        who = bytes(validator_authority)
        if who not in [bytes(m) for m in j.committee] or first.seq != second.seq or (
                (first, first_approved) == (second, second_approved)):
            raise GpuMarketError(6075, "NotValidatorEquivocation", "not equivocation", [])
        for r, approved, sig in ((first, first_approved, first_signature),
                                 (second, second_approved, second_signature)):
            msg = receipt_message(PROGRAM, MARKET, bytes(job), r.seq, r.cumulative_seconds,
                                  r.window_end, r.proof_hash)
            if not verify(who, sig, attestation_message(msg, approved)):
                raise err("ReceiptMessageMismatch")
        key = (who, bytes(job), first.seq)
        if key in self.validator_records:
            raise GpuMarketError(0, "AccountAlreadyInUse", "already in use", [])
        self.validator_records.add(key)
        v = self.validators[who]
        # Forced out: Exiting (its rest unbonds), still settling for its committees.
        self.validators[who] = replace(v, slashes=v.slashes + 1, bond=v.bond // 2,
                                       status="exiting")
        return f"vslash{len(self.validator_slash_calls)}"

    def slash_downtime_message(self, validator_authority: Pubkey, job: Pubkey,
                               others: list[Pubkey], last_proof_window_end: int = 0,
                               reporter_stake_account: Pubkey | None = None) -> Message:
        """The one-instruction message of the real layout (9 fixed accounts, then (Validator
        PDA, authority signer) pairs), fee payer the submitter."""
        self._io()
        program = pk(PROGRAM)
        market = pk(MARKET)
        j = self.jobs[bytes(job)]
        metas = [AccountMeta(validator_authority, True, False),
                 AccountMeta(validator_pda(market, validator_authority, program), False, False),
                 AccountMeta(market, False, True), AccountMeta(j.provider, False, True),
                 AccountMeta(job, False, True), AccountMeta(DUMMY, False, True),
                 AccountMeta(pk(bytes([78] * 32)), False, True),
                 AccountMeta(reporter_stake_account or pk(bytes([79] * 32)), False, True),
                 AccountMeta(pk(bytes([80] * 32)), False, False)]
        for o in others:
            metas += [AccountMeta(validator_pda(market, o, program), False, False),
                      AccountMeta(o, True, False)]
        data = DOWNTIME_DISCRIMINATOR + struct.pack("<q", last_proof_window_end)
        return Message.new_with_blockhash([Instruction(program, data, metas)],
                                          validator_authority, Hash.default())

    def send_presigned(self, tx: Any) -> str:
        """Runs a slash_downtime the way the program does: every signature valid, the signers
        ``quorum`` distinct committee members, each an Active validator (an exiting one
        reports no downtime), the job Running, and ``max_missed_windows`` windows since
        max(last_proof_window_end, last_window_end)."""
        self._io()
        tx.verify()  # raises on a bad signature
        msg = tx.message
        ix = msg.instructions[0]
        keys = msg.account_keys
        accounts = [keys[i] for i in bytes(ix.accounts)]
        job = bytes(accounts[4])
        lpwe = struct.unpack("<q", bytes(ix.data)[8:16])[0]
        signers = [bytes(k) for k in keys[:msg.header.num_required_signatures]]
        self.downtime_calls.append({"job": job, "last_proof_window_end": lpwe,
                                    "signers": signers})
        j = self.jobs[job]
        committee = [bytes(m) for m in j.committee]
        for who in signers:
            v = self.validators.get(who)
            if v is None:
                raise err("AccountNotInitialized")
            if v.status != "active":
                raise err("ValidatorNotActive")
        if len(set(signers)) != j.terms.quorum or not set(signers) <= set(committee):
            raise err("QuorumNotMet")
        if j.status not in ("running", "finishing"):
            raise err("InvalidJobStatus")
        until = self.now if j.status == "running" else j.ended_at
        missed = (until - max(lpwe, j.last_window_end)) // j.terms.window_seconds
        if missed < j.terms.max_missed_windows:
            raise err("NotEnoughMissedWindows")
        self.jobs[job] = replace(j, status="failed")
        return f"downtime{len(self.downtime_calls)}"

    def set_job(self, **kw: Any) -> None:
        self.jobs[JOB] = replace(self.jobs[JOB], **kw)

    def set_terms(self, job: bytes = JOB, **kw: Any) -> None:
        """Change fields of a job's terms (as if it had been created with them)."""
        self.jobs[job] = replace(self.jobs[job], terms=replace(self.jobs[job].terms, **kw))

    def add_validator(self, key: Keypair) -> None:
        """Register ``key`` as an Active validator of the market (no endpoint yet)."""
        self.validators.setdefault(bytes(key.pubkey()), validator_view(key.pubkey()))

    def set_committee(self, members: list[bytes], quorum: int, job: bytes = JOB) -> None:
        self.jobs[job] = replace(self.jobs[job], committee=[pk(m) for m in members],
                                 committee_len=len(members))
        self.set_terms(job, quorum=quorum)


def make_settler(chain: FakeChain, store: Any, clock: list[float], policy: Any = None,
                 authority: Keypair = ME, **kw: Any) -> Any:
    """A Settler as ``gpum-validator run`` wires it, with the SDK's SettleItem/Attestation."""
    from gpum_validator.settlement import Settler

    return Settler(chain, authority, store, policy, clock=lambda: clock[0],
                   item_factory=SettleItem, attestation_factory=Attestation, **kw)
