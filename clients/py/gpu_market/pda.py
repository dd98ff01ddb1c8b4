"""Program-derived addresses of gpu_market (pure).

Seeds mirror ``programs/gpu_market/src/seeds.rs`` exactly; integers are little-endian u64.
Every function returns the canonical (highest-bump) address, the one the program stores.
"""

from __future__ import annotations

from solders.pubkey import Pubkey

from .constants import PROGRAM_ID

__all__ = [
    "EQUIVOCATION_SEED",
    "ESCROW_SEED",
    "FEE_VAULT_SEED",
    "JOB_SEED",
    "MARKET_SEED",
    "PROVIDER_SEED",
    "STAKE_VAULT_SEED",
    "VALIDATOR_EQUIVOCATION_SEED",
    "VALIDATOR_SEED",
    "WRONG_ANSWER_SEED",
    "equivocation_pda",
    "equivocation_pda_and_bump",
    "escrow_pda",
    "escrow_pda_and_bump",
    "fee_vault_pda",
    "fee_vault_pda_and_bump",
    "job_pda",
    "job_pda_and_bump",
    "market_pda",
    "market_pda_and_bump",
    "provider_pda",
    "provider_pda_and_bump",
    "stake_vault_pda",
    "stake_vault_pda_and_bump",
    "validator_equivocation_pda",
    "validator_equivocation_pda_and_bump",
    "validator_pda",
    "validator_pda_and_bump",
    "wrong_answer_pda",
    "wrong_answer_pda_and_bump",
]

MARKET_SEED = b"market"
PROVIDER_SEED = b"provider"
VALIDATOR_SEED = b"validator"
JOB_SEED = b"job"
ESCROW_SEED = b"escrow"
STAKE_VAULT_SEED = b"stake_vault"
FEE_VAULT_SEED = b"fee_vault"
EQUIVOCATION_SEED = b"equivocation"
VALIDATOR_EQUIVOCATION_SEED = b"validator_equivocation"
WRONG_ANSWER_SEED = b"wrong_answer"

_U64_MAX = 2**64 - 1


def _u64(name: str, value: int) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _U64_MAX:
        raise ValueError(f"{name} must be an integer in [0, 2**64 - 1], got {value!r}")
    return value.to_bytes(8, "little")


def _i64(name: str, value: int) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise ValueError(f"{name} must be an i64, got {value!r}")
    return value.to_bytes(8, "little", signed=True)


def market_pda_and_bump(
    authority: Pubkey, market_id: int, program_id: Pubkey = PROGRAM_ID
) -> tuple[Pubkey, int]:
    """``["market", authority, id:u64le]``."""
    return Pubkey.find_program_address(
        [MARKET_SEED, bytes(authority), _u64("market_id", market_id)], program_id
    )


def stake_vault_pda_and_bump(market: Pubkey, program_id: Pubkey = PROGRAM_ID) -> tuple[Pubkey, int]:
    """``["stake_vault", market]``: the market's stake token account."""
    return Pubkey.find_program_address([STAKE_VAULT_SEED, bytes(market)], program_id)


def fee_vault_pda_and_bump(market: Pubkey, program_id: Pubkey = PROGRAM_ID) -> tuple[Pubkey, int]:
    """``["fee_vault", market]``: the market's fee vault (payment-mint token account, authority
    the market PDA), where ``settle`` pays the treasury share until ``withdraw_fees``."""
    return Pubkey.find_program_address([FEE_VAULT_SEED, bytes(market)], program_id)


def provider_pda_and_bump(
    market: Pubkey, owner: Pubkey, program_id: Pubkey = PROGRAM_ID
) -> tuple[Pubkey, int]:
    """``["provider", market, owner]``."""
    return Pubkey.find_program_address([PROVIDER_SEED, bytes(market), bytes(owner)], program_id)


def validator_pda_and_bump(
    market: Pubkey, authority: Pubkey, program_id: Pubkey = PROGRAM_ID
) -> tuple[Pubkey, int]:
    """``["validator", market, authority]``."""
    return Pubkey.find_program_address(
        [VALIDATOR_SEED, bytes(market), bytes(authority)], program_id
    )


def job_pda_and_bump(
    market: Pubkey, user: Pubkey, job_id: int, program_id: Pubkey = PROGRAM_ID
) -> tuple[Pubkey, int]:
    """``["job", market, user, job_id:u64le]``."""
    return Pubkey.find_program_address(
        [JOB_SEED, bytes(market), bytes(user), _u64("job_id", job_id)], program_id
    )


def escrow_pda_and_bump(job: Pubkey, program_id: Pubkey = PROGRAM_ID) -> tuple[Pubkey, int]:
    """``["escrow", job]``: the job's escrow token account."""
    return Pubkey.find_program_address([ESCROW_SEED, bytes(job)], program_id)


def equivocation_pda_and_bump(
    job: Pubkey, started_at: int, seq: int, program_id: Pubkey = PROGRAM_ID
) -> tuple[Pubkey, int]:
    """``["equivocation", job, started_at:i64le, seq:u64le]``: the record of a slashed
    (job incarnation, seq); ``started_at`` is the job's (a closed job's address can be reused)."""
    return Pubkey.find_program_address(
        [EQUIVOCATION_SEED, bytes(job), _i64("started_at", started_at), _u64("seq", seq)], program_id
    )


def validator_equivocation_pda_and_bump(
    validator: Pubkey, job: Pubkey, started_at: int, seq: int, program_id: Pubkey = PROGRAM_ID
) -> tuple[Pubkey, int]:
    """``["validator_equivocation", validator, job, started_at:i64le, seq:u64le]``: the record
    of a validator (its Validator PDA, not its authority) slashed for two attestations of one
    (job incarnation, seq)."""
    return Pubkey.find_program_address(
        [VALIDATOR_EQUIVOCATION_SEED, bytes(validator), bytes(job), _i64("started_at", started_at),
         _u64("seq", seq)],
        program_id,
    )  # fmt: skip


def wrong_answer_pda_and_bump(
    provider: Pubkey, challenge_digest: bytes, program_id: Pubkey = PROGRAM_ID
) -> tuple[Pubkey, int]:
    """``["wrong_answer", provider, challenge_digest]``: the record of a provider (its Provider
    PDA) slashed for a wrong answer to one challenge."""
    digest = bytes(challenge_digest)
    if len(digest) != 32:
        raise ValueError(f"challenge_digest must be 32 bytes, got {len(digest)}")
    return Pubkey.find_program_address([WRONG_ANSWER_SEED, bytes(provider), digest], program_id)


def wrong_answer_pda(provider: Pubkey, challenge_digest: bytes, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """Address of the wrong-answer record of ``provider`` for one challenge."""
    return wrong_answer_pda_and_bump(provider, challenge_digest, program_id)[0]


def market_pda(authority: Pubkey, market_id: int, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """Address of market ``market_id`` of ``authority``."""
    return market_pda_and_bump(authority, market_id, program_id)[0]


def stake_vault_pda(market: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """Address of ``market``'s stake vault."""
    return stake_vault_pda_and_bump(market, program_id)[0]


def fee_vault_pda(market: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """Address of ``market``'s fee vault (``MarketView.fee_vault`` of an existing market)."""
    return fee_vault_pda_and_bump(market, program_id)[0]


def provider_pda(market: Pubkey, owner: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """Address of ``owner``'s provider account in ``market``."""
    return provider_pda_and_bump(market, owner, program_id)[0]


def validator_pda(market: Pubkey, authority: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """Address of ``authority``'s validator account in ``market``."""
    return validator_pda_and_bump(market, authority, program_id)[0]


def job_pda(market: Pubkey, user: Pubkey, job_id: int, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """Address of ``user``'s job ``job_id`` in ``market``."""
    return job_pda_and_bump(market, user, job_id, program_id)[0]


def escrow_pda(job: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """Address of ``job``'s escrow token account."""
    return escrow_pda_and_bump(job, program_id)[0]


def equivocation_pda(
    job: Pubkey, started_at: int, seq: int, program_id: Pubkey = PROGRAM_ID
) -> Pubkey:
    """Address of the EquivocationRecord of ``job`` (the incarnation that started at
    ``started_at``) at ``seq``; it exists once that pair was slashed."""
    return equivocation_pda_and_bump(job, started_at, seq, program_id)[0]


def validator_equivocation_pda(
    validator: Pubkey, job: Pubkey, started_at: int, seq: int, program_id: Pubkey = PROGRAM_ID
) -> Pubkey:
    """Address of the EquivocationRecord of ``validator`` (the Validator PDA) for ``job`` (the
    incarnation that started at ``started_at``) at ``seq``; it exists once that was slashed."""
    return validator_equivocation_pda_and_bump(validator, job, started_at, seq, program_id)[0]
