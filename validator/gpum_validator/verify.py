"""Proof verification: pure functions over decoded inputs and chain *views* (no I/O).

The intake (``intake.Intake``) calls them in this order, and every failure raises
``Rejection`` with a stable ``reason`` code (final, or retryable with ``retry_after``):

1. ``authenticate``: the bytes are a canonical proof for this program and market, signed
   (proof and receipt) by the key the request names;
2. ``check_assignment``: the job exists in this market and is assigned to ``proof.provider``;
3. ``check_committee``: the job's on-chain committee names this validator (403, final);
4. ``check_worker_key``: that key is the provider's current key (unexpired at window_end)
   or one of its retired keys for a window that ended by that key's retirement, as the
   chain's receipt-key rule;
5. (the intake resolves duplicates and equivocation against the store here; only proofs
   that passed 1-4 are ever stored or compared, so a stranger cannot occupy a (job, seq);)
6. ``check_window``: job status, sequence, window timing, GPU set, the worker's own
   consistency (hash chain, ``cumulative == previous cumulative + billable``) against the
   proofs this validator has, and the seconds it approves: ``min(billable, health_bound)``
   with the window length, skew and health thresholds of the job's own ``terms``
   (``job_rules``), tightened by the validator's own policy if it has one.

Approvals (docs/protocol.md, "Committees, approvals and rounds"). Every member keeps its own
approved total per job: the sum of the seconds it approved of the windows it accepted, starting
from the chain's ``paid_seconds`` when it has no history of the job (a late joiner, a lost
database). A window it rejects is simply not approved; the next window is still judged on its
own, so one bad window (or a gap of windows this validator never saw) never ends a job here.

Guarantee: for two accepted windows ``a < b`` of a job, ``approved(b) - approved(a) <=
cumulative(b) - cumulative(a)`` and ``approved(b) - approved(a) <= window_end(b) -
window_end(a)``, and the first approved second starts at or after ``started_at``: a settle
with this validator's total passes the program's claim and wall-time rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpu_market.proof import (
    HEALTH_ECC_UNCORRECTED,
    ZERO_HASH,
    ProofDecodeError,
    WindowProof,
    decode_proof,
    encode_proof,
    proof_hash,
    receipt_for_proof,
)
from gpu_market.receipt import receipt_digest
from solders.pubkey import Pubkey
from solders.signature import Signature

from .config import HealthThresholds, VerifyConfig
from .errors import Rejection
from .schema import SignedProof

CHAIN_LAG_RETRY_SECONDS = 5
"""Retry-After of rejections that heal when this validator's RPC catches up."""


def _pk(v: Any) -> bytes:
    """Raw 32 bytes of a solders Pubkey or bytes."""
    return bytes(v)


def field_of(obj: Any, name: str) -> Any:
    """Read ``name`` from an SDK view: attribute first, then mapping key."""
    if isinstance(obj, dict):
        return obj[name]
    return getattr(obj, name)


def status_of(view: Any) -> str:
    """A job's status as lower-case text, from a string, an enum or an anchorpy variant."""
    value = field_of(view, "status")
    if isinstance(value, str):
        return value.lower()
    name = getattr(value, "name", None)
    return str(name if isinstance(name, str) else type(value).__name__).lower()


@dataclass(frozen=True)
class JobRules:
    """How one job's windows are judged: fixed in ``job.terms`` at ``create_job``, so the
    market's later parameter changes never apply to a running job."""

    window_seconds: int
    max_skew_seconds: int
    health: HealthThresholds


def job_rules(job: Any, own_health: HealthThresholds | None = None) -> JobRules:
    """The ``JobRules`` of a Job view (``terms.window_seconds``, ``terms.max_skew_seconds``,
    ``terms.temp_critical_c``, ``terms.ecc_uncorrected_max``), the thresholds tightened by
    ``own_health`` (a validator's stricter policy) when given."""
    t = field_of(job, "terms")
    terms = HealthThresholds(temp_critical_c=int(field_of(t, "temp_critical_c")),
                             ecc_uncorrected_max=int(field_of(t, "ecc_uncorrected_max")))
    return JobRules(
        window_seconds=int(field_of(t, "window_seconds")),
        max_skew_seconds=int(field_of(t, "max_skew_seconds")),
        health=terms.stricter(own_health))


def committee_of(job: Any) -> list[bytes]:
    """The job's committee: validator authority keys, in order (empty slots dropped)."""
    members = field_of(job, "committee") or ()
    return [m for m in (_pk(x) for x in members) if m != ZERO_HASH]


def quorum_of(job: Any) -> int:
    """``terms.quorum``: how many committee members a settlement or a downtime report needs."""
    return int(field_of(field_of(job, "terms"), "quorum"))


def check_committee(job: Any, cfg: VerifyConfig) -> None:
    """The job's on-chain committee names this validator (``cfg.authority``); else
    ``not_in_committee`` (403, final): only committee members verify, approve and settle a
    job, so a proof sent to anyone else is refused and never stored."""
    if cfg.authority not in committee_of(job):
        raise Rejection("not_in_committee", "this validator is not on the job's committee; "
                        "send the proof only to the members the job names on chain", 403)


@dataclass(frozen=True)
class Authenticated:
    """A decoded proof whose signatures are valid for the key it names."""

    signed: SignedProof
    proof: WindowProof
    hash: bytes
    receipt_message: bytes

    @property
    def proof_bytes(self) -> bytes:
        return self.signed.proof


@dataclass(frozen=True)
class JobState:
    """The validator's view of a job's accepted windows (from the store, or the chain baseline).

    ``last_seq``/``cumulative_seconds``/``last_window_end`` are those of the last accepted
    proof and ``approved_total`` this validator's approved total up to it; for a job never
    seen (or seen only up to a seq the chain has settled past) they are the chain's
    ``last_seq``/``claimed_seconds``/``last_window_end`` (``started_at`` before the first
    settlement)/``paid_seconds``, and ``last_hash`` its ``last_receipt_hash``.
    """

    last_seq: int
    cumulative_seconds: int
    last_window_end: int
    gpu_uuids: tuple[str, ...] | None = None
    approved_total: int = 0
    last_hash: bytes | None = None


@dataclass(frozen=True)
class PrevProof:
    """The worker's proof (or the chain's settled receipt) right before the one judged: its
    ``proof_hash``, cumulative claim and window end. Rejected proofs count: the worker signed
    them, so its next window must chain to them."""

    hash: bytes
    cumulative_seconds: int
    window_end: int


@dataclass(frozen=True)
class Verdict:
    """What an accepted window changes: the seqs skipped before it, the health bound, the
    seconds approved of this window and the approved total up to it."""

    missed_seqs: tuple[int, ...] = field(default_factory=tuple)
    billable_bound: int = 0
    approved_seconds: int = 0
    approved_total: int = 0


def chain_verify(pubkey: bytes, sig: bytes, msg: bytes) -> bool:
    """The chain's signature rule: Solana's Ed25519 program (ed25519-dalek ``verify_strict``,
    here through solders), so the validator never approves a receipt the chain would refuse
    (OpenSSL's check, ``gpu_market.receipt.verify``, accepts e.g. the identity key with
    R = identity and S = 0 for any message)."""
    if len(pubkey) != 32 or len(sig) != 64:
        return False
    return Signature.from_bytes(sig).verify(Pubkey.from_bytes(pubkey), msg)


def authenticate(signed: SignedProof, cfg: VerifyConfig) -> Authenticated:
    """Decode and check the receipt signature; raises Rejection (proof_malformed,
    proof_not_canonical, worker_key_mismatch, wrong_program, wrong_market,
    bad_receipt_signature). The reference implementation: ``authenticate_all`` gives the same
    answers, faster."""
    try:
        proof = decode_proof(signed.proof)
    except ProofDecodeError as e:
        raise Rejection("proof_malformed", f"proof bytes do not decode: {e}", 400) from None
    if encode_proof(proof) != signed.proof:
        raise Rejection("proof_not_canonical", "proof bytes are not the canonical encoding", 400)
    if proof.worker_key != signed.worker_key:
        raise Rejection("worker_key_mismatch",
                        "worker_key in the request differs from the proof's worker_key", 400)
    if proof.program_id != cfg.program_id:
        raise Rejection("wrong_program", "proof.program_id is not this validator's program")
    if proof.market != cfg.market:
        raise Rejection("wrong_market", "proof.market is not this validator's market")
    # One signature per proof: the receipt commits to sha256 of these exact proof bytes (and
    # to seq, cumulative seconds, window end, job, market, program), so the worker's receipt
    # signature authenticates the whole proof. ``proof_signature`` is kept as sent and never
    # relied on: the chain and the equivocation slash use receipt signatures only.
    msg = receipt_for_proof(proof, signed.proof)
    if not chain_verify(proof.worker_key, signed.receipt_signature, receipt_digest(msg)):
        raise Rejection("bad_receipt_signature",
                        "receipt_signature is not the worker key's signature over the receipt "
                        "digest (sha256 of the receipt message) built from this proof")
    return Authenticated(signed, proof, proof_hash(signed.proof), msg)


def worker_key_status(provider: Any, key: bytes, at: int) -> str:
    """'ok', 'expired' or 'unknown' for ``key`` signing a window that ends at ``at``, by the
    program's receipt-key rule: the current key unexpired at ``at`` (expiry 0 = never), or a
    key in ``retired_keys`` (all-zero key = empty slot) for a window that ended by its
    ``retired_at``. The chain also bounds how long a retired key's receipt may still
    *settle*; that is the settler's business, not the intake's."""
    matched = False
    if key == _pk(field_of(provider, "worker_key")):
        expires = int(field_of(provider, "worker_key_expires_at"))
        if expires == 0 or at <= expires:
            return "ok"
        matched = True
    for slot in field_of(provider, "retired_keys") or ():
        retired = _pk(field_of(slot, "key"))
        if retired == ZERO_HASH or retired != key:
            continue
        if at <= int(field_of(slot, "retired_at")):
            return "ok"
        matched = True
    return "expired" if matched else "unknown"


def check_worker_key(auth: Authenticated, provider: Any | None, cfg: VerifyConfig) -> None:
    """The signing key belongs to the proof's provider; raises Rejection (provider_not_found,
    wrong_market, unknown_worker_key [retryable: a rotation this validator's RPC has not
    seen yet], worker_key_expired)."""
    p = auth.proof
    if provider is None:
        raise Rejection("provider_not_found", "no Provider account at proof.provider")
    if _pk(field_of(provider, "market")) != cfg.market:
        raise Rejection("wrong_market", "the provider belongs to another market")
    status = worker_key_status(provider, p.worker_key, p.window_end)
    if status == "unknown":
        raise Rejection("unknown_worker_key",
                        "worker_key is neither the provider's current nor a retired key on "
                        "chain; if it was just rotated, retry once the chain shows it",
                        retry_after=CHAIN_LAG_RETRY_SECONDS)
    if status == "expired":
        raise Rejection("worker_key_expired",
                        "worker_key expired (or was rotated out) before window_end; "
                        "sign with the provider's current worker key")


def check_assignment(auth: Authenticated, job: Any | None, cfg: VerifyConfig) -> None:
    """The proof's job exists in this market and is assigned to ``proof.provider``.

    Raises Rejection: ``job_not_found`` (retryable: the worker saw the job on its RPC, this
    validator's RPC may lag), ``wrong_market``, ``wrong_provider``. Together with
    ``check_worker_key`` this guarantees that only the job's own provider key can make the
    intake store or compare anything for that job.
    """
    if job is None:
        raise Rejection("job_not_found", "no Job account at proof.job (yet); retry once the "
                        "validator's RPC has caught up", retry_after=CHAIN_LAG_RETRY_SECONDS)
    if _pk(field_of(job, "market")) != cfg.market:
        raise Rejection("wrong_market", "the job belongs to another market")
    if _pk(field_of(job, "provider")) != auth.proof.provider:
        raise Rejection("wrong_provider", "the job is assigned to another provider")


def health_bound(proof: WindowProof, th: HealthThresholds) -> int:
    """Most seconds of ``proof``'s window that the health policy allows to bill.

    Mirrors the worker's policy (worker/gpum_worker/window.py): 0 when any GPU has no
    samples or an uncorrected-ECC delta above the allowance (or flags it); otherwise the
    minimum over GPUs of its healthy one-second slots (``covered_seconds``, which cannot
    exceed its sample count), and at most ``length - 1`` for a GPU that reached the critical
    temperature (that slot was unhealthy). 0 as well when the window's workload (proof v2)
    failed to start or shared the job's GPUs with a foreign compute process
    (``WorkloadWindow.billable``).
    """
    length = proof.window_end - proof.window_start
    if not proof.workload.billable:  # the workload failed to start, or foreign processes
        return 0
    bound = length
    for g in proof.gpus:
        if g.samples == 0:
            return 0
        ecc = g.ecc_uncorrected_delta
        if (ecc is not None and ecc > th.ecc_uncorrected_max) or (
                g.health_flags & HEALTH_ECC_UNCORRECTED):
            return 0
        gpu_bound = min(g.covered_seconds, g.samples, length)
        if g.temp_max_c is not None and g.temp_max_c >= th.temp_critical_c:
            gpu_bound = min(gpu_bound, length - 1)
        bound = min(bound, gpu_bound)
    return max(0, bound)


def check_window(
    auth: Authenticated,
    job: Any | None,
    state: JobState,
    cfg: VerifyConfig,
    now: int,
    prev: PrevProof | None,
) -> Verdict:
    """Check one authenticated proof against the job, its terms and the history this
    validator has, and compute the seconds it approves.

    ``prev`` is the worker's proof for ``seq - 1`` as stored here (accepted or rejected), or
    the chain's settled receipt when that is ``seq - 1``; None when this validator has
    neither (a gap). ``cumulative == prev cumulative + billable`` is required when ``prev``
    is known, and ``cumulative >= last accepted cumulative + billable`` always. Raises Rejection with one of: the ``check_assignment`` reasons,
    job_not_started (retryable), job_not_running, window_after_job_end, stale_seq, seq_gap,
    prev_hash_mismatch, window_length, window_overlap (window_start before the last accepted
    window_end or the previous proof's), window_in_future (retryable: at most one window
    early), window_far_in_future, gpu_count_mismatch, gpu_uuids_changed, cumulative_mismatch.
    A claim above the health bound is not a rejection: only the bound is approved.
    """
    check_assignment(auth, job, cfg)
    p = auth.proof
    rules = job_rules(job, cfg.own_health)
    status = status_of(job)
    if status == "finishing":
        ended_at = int(field_of(job, "ended_at"))
        if p.window_end > ended_at:
            raise Rejection("window_after_job_end",
                            f"window_end {p.window_end} is after the job ended at {ended_at}")
    elif status == "open":
        raise Rejection("job_not_started", "the job is not Running on this validator's RPC "
                        "yet; retry once the chain shows it accepted",
                        retry_after=CHAIN_LAG_RETRY_SECONDS)
    elif status != "running":
        raise Rejection("job_not_running", f"the job is {status}, not running or finishing")
    if p.seq <= state.last_seq:
        raise Rejection("stale_seq",
                        f"seq {p.seq} is not after the last accepted seq {state.last_seq}")
    skipped = p.seq - state.last_seq - 1
    if skipped > 0 and skipped > p.window_start - state.last_window_end:
        # Windows are contiguous and at least 1 s long, so k skipped windows need at least
        # k seconds between the last accepted window and this one: a seq far ahead of the
        # time it covers can never take the place of the honest sequence.
        raise Rejection("seq_gap", f"seq {p.seq} skips {skipped} windows but starts "
                        f"{p.window_start - state.last_window_end}s after the last accepted "
                        "window")
    if p.seq == 1 and p.prev_proof_hash != ZERO_HASH:
        raise Rejection("prev_hash_mismatch", "the first proof of a job must have a zero "
                        "prev_proof_hash")
    if prev is not None and p.prev_proof_hash != prev.hash:
        raise Rejection("prev_hash_mismatch",
                        f"prev_proof_hash does not match the proof of seq {p.seq - 1}")
    length = p.window_end - p.window_start
    max_len = rules.window_seconds + rules.max_skew_seconds
    if not 1 <= length <= max_len:
        raise Rejection("window_length", f"window length {length}s is outside [1, {max_len}] "
                        "(the job's terms.window_seconds + max_skew_seconds)")
    floor = max(state.last_window_end, prev.window_end if prev is not None else state.last_window_end)
    if p.window_start < floor:
        raise Rejection("window_overlap", f"window_start {p.window_start} is before the "
                        f"previous window_end {floor}")
    early = p.window_end - (now + rules.max_skew_seconds)
    if early > rules.window_seconds:
        raise Rejection("window_far_in_future", f"window_end {p.window_end} is {early}s beyond "
                        f"the {rules.max_skew_seconds}s skew allowed ahead of the validator "
                        f"clock ({now}); check the worker's clock (NTP)")
    if early > 0:
        raise Rejection("window_in_future", f"window_end {p.window_end} is {early}s beyond the "
                        f"{rules.max_skew_seconds}s skew allowed ahead of the validator clock "
                        f"({now}); retry in {early}s", retry_after=early)
    gpu_count = int(field_of(job, "gpu_count"))
    if len(p.gpus) != gpu_count:
        raise Rejection("gpu_count_mismatch",
                        f"proof covers {len(p.gpus)} GPUs, the job rents {gpu_count}")
    uuids = tuple(sorted(g.uuid for g in p.gpus))
    if state.gpu_uuids is not None and uuids != state.gpu_uuids:
        raise Rejection("gpu_uuids_changed",
                        "the GPU UUIDs differ from the job's earlier windows")
    if prev is not None and p.cumulative_seconds != prev.cumulative_seconds + p.billable_seconds:
        raise Rejection("cumulative_mismatch",
                        f"cumulative_seconds {p.cumulative_seconds} != the previous proof's "
                        f"{prev.cumulative_seconds} + billable {p.billable_seconds}")
    if p.cumulative_seconds < state.cumulative_seconds + p.billable_seconds:
        # Also across rejected windows and gaps: the claim never falls behind what this
        # validator already accepted, so approvals never outgrow claims.
        raise Rejection("cumulative_mismatch",
                        f"cumulative_seconds {p.cumulative_seconds} < the last accepted total "
                        f"{state.cumulative_seconds} + billable {p.billable_seconds}")
    bound = health_bound(p, rules.health)
    approved = max(0, min(p.billable_seconds, bound))
    return Verdict(tuple(range(state.last_seq + 1, p.seq)), bound, approved,
                   state.approved_total + approved)
