"""Builders of the job instructions (the program's ``create_job.rs``, ``accept_job.rs``,
``finish_job.rs``, ``top_up.rs``, ``cancel_job.rs``, ``decline_job.rs``, ``expire_job.rs``,
``complete_job.rs``, ``close_job.rs``, ``replace_committee_member.rs`` and ``rate_job.rs``).

``decline_job``, ``expire_job`` and ``complete_job`` share the program's ``EndJob`` accounts
(signer, provider, job); ``cancel_job`` and ``close_job`` refund the escrow
(``pda.escrow_pda(job)``) to a payment-mint ATA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey

from .. import pda, tokens
from ..accounts import JobView, MarketParams, MarketView
from ..codec import Codec
from ..constants import SYSTEM_PROGRAM_ID, TOKEN_PROGRAM_ID
from ._views import address_of

__all__ = [
    "END_JOB_INSTRUCTIONS",
    "accept_job_ix",
    "cancel_job_ix",
    "close_job_ix",
    "complete_job_ix",
    "create_job_ix",
    "decline_job_ix",
    "expire_job_ix",
    "finish_job_ix",
    "rate_job_ix",
    "replace_committee_member_ix",
    "top_up_ix",
]

END_JOB_INSTRUCTIONS = ("decline_job", "expire_job", "complete_job")
"""Instructions with the program's ``EndJob`` accounts: signer, provider (mut), job (mut)."""


def create_job_ix(
    codec: Codec,
    user: Pubkey,
    market: MarketView,
    provider: Pubkey,
    job_id: int,
    gpu_count: int,
    deposit: int,
    *,
    committee: Sequence[Pubkey],
    quorum: int,
    max_price_per_gpu_second: int,
    workload_hash: bytes,
    expected_params: Mapping[str, int] | MarketParams,
) -> Instruction:
    """``create_job`` of job ``job_id`` of ``user`` (``pda.job_pda(market, user, job_id)``) on
    ``provider`` (the PDA) in ``market`` (a view with its address), escrowing ``deposit`` from
    the user's payment-mint ATA; the committee's Validator PDAs go as read-only remaining
    accounts, in order. ``expected_params``: the parameters the job must be created under
    (the program refuses with ``MarketParamsChanged`` otherwise)."""
    address = address_of(market, "create_job_ix")
    job = pda.job_pda(address, user, job_id, codec.program_id)
    pdas = [pda.validator_pda(address, a, codec.program_id) for a in committee]
    return codec.instruction(
        "create_job",
        {"job_id": job_id, "gpu_count": gpu_count, "deposit": deposit,
         "max_price_per_gpu_second": max_price_per_gpu_second, "committee": list(committee),
         "quorum": int(quorum), "workload_hash": list(workload_hash),
         "expected_params": expected_params},
        {
            "user": user,
            "market": address,
            "provider": provider,
            "job": job,
            "escrow": pda.escrow_pda(job, codec.program_id),
            "payment_mint": market.payment_mint,
            "user_payment_account": tokens.ata(user, market.payment_mint),
            "token_program": TOKEN_PROGRAM_ID,
            "system_program": SYSTEM_PROGRAM_ID,
        },
        remaining=[AccountMeta(k, False, False) for k in pdas],
    )  # fmt: skip


def accept_job_ix(codec: Codec, signer: Pubkey, provider: Pubkey, job: Pubkey) -> Instruction:
    """``accept_job``: the provider's worker key or owner starts an Open ``job``."""
    return codec.instruction("accept_job", {}, {"signer": signer, "provider": provider, "job": job})


def finish_job_ix(codec: Codec, signer: Pubkey, provider: Pubkey, job: Pubkey) -> Instruction:
    """``finish_job``: the user, the provider's owner or worker key stops billing ``job``."""
    return codec.instruction("finish_job", {}, {"signer": signer, "provider": provider, "job": job})


def top_up_ix(codec: Codec, user: Pubkey, job: JobView, market: MarketView, amount: int) -> Instruction:
    """``top_up``: ``amount`` from ``user``'s payment-mint ATA into the escrow of ``job`` (a
    view with its address) in ``market``."""
    address = address_of(job, "top_up_ix")
    return codec.instruction(
        "top_up",
        {"amount": int(amount)},
        {
            "user": user,
            "market": job.market,
            "job": address,
            "escrow": pda.escrow_pda(address, codec.program_id),
            "payment_mint": market.payment_mint,
            "user_payment_account": tokens.ata(user, market.payment_mint),
            "token_program": TOKEN_PROGRAM_ID,
        },
    )


def _refund_accounts(codec: Codec, job: JobView, market: MarketView, refund_to: Pubkey, builder: str) -> dict:
    """The accounts ``cancel_job`` and ``close_job`` share, the escrow refunded to
    ``refund_to``'s payment-mint ATA."""
    address = address_of(job, builder)
    return {
        "market": job.market,
        "provider": job.provider,
        "job": address,
        "escrow": pda.escrow_pda(address, codec.program_id),
        "payment_mint": market.payment_mint,
        "user_payment_account": tokens.ata(refund_to, market.payment_mint),
        "token_program": TOKEN_PROGRAM_ID,
    }


def cancel_job_ix(codec: Codec, signer: Pubkey, job: JobView, market: MarketView) -> Instruction:
    """``cancel_job`` of an Open ``job`` (a view with its address) by its user ``signer``:
    the whole escrow back to ATA(job.user, payment mint)."""
    accounts = _refund_accounts(codec, job, market, job.user, "cancel_job_ix")
    return codec.instruction("cancel_job", {}, {"signer": signer, **accounts})


def close_job_ix(codec: Codec, user: Pubkey, job: JobView, market: MarketView) -> Instruction:
    """``close_job`` of ``job`` (a view with its address): what is left in escrow to
    ``user``'s payment-mint ATA; the job and escrow close."""
    accounts = _refund_accounts(codec, job, market, user, "close_job_ix")
    return codec.instruction("close_job", {}, {"user": user, **accounts})


def _end_job_ix(codec: Codec, name: str, signer: Pubkey, provider: Pubkey, job: Pubkey) -> Instruction:
    """``decline_job`` / ``expire_job`` / ``complete_job`` of ``job`` (whose Provider account
    is ``provider``), signed by ``signer``."""
    if name not in END_JOB_INSTRUCTIONS:
        raise ValueError(f"{name!r} is not one of {END_JOB_INSTRUCTIONS}")
    return codec.instruction(name, {}, {"signer": signer, "provider": provider, "job": job})


def decline_job_ix(codec: Codec, signer: Pubkey, provider: Pubkey, job: Pubkey) -> Instruction:
    """``decline_job``: the provider's owner or worker key refuses an Open ``job``."""
    return _end_job_ix(codec, "decline_job", signer, provider, job)


def expire_job_ix(codec: Codec, signer: Pubkey, provider: Pubkey, job: Pubkey) -> Instruction:
    """``expire_job``: anyone fails a Running ``job`` whose provider stopped proving."""
    return _end_job_ix(codec, "expire_job", signer, provider, job)


def complete_job_ix(codec: Codec, signer: Pubkey, provider: Pubkey, job: Pubkey) -> Instruction:
    """``complete_job``: anyone completes a Finishing ``job`` whose grace is over."""
    return _end_job_ix(codec, "complete_job", signer, provider, job)


def replace_committee_member_ix(
    codec: Codec, user: Pubkey, job: JobView, index: int, new_authority: Pubkey
) -> Instruction:
    """``replace_committee_member`` of ``job`` (a view with its address): member ``index``
    gives way to ``new_authority``. ValueError if ``index`` is not a member's position."""
    address = address_of(job, "replace_committee_member_ix")
    if not 0 <= index < len(job.committee):
        raise ValueError(
            f"index {index} is not a committee position: the job has {len(job.committee)} "
            f"member(s), 0..{len(job.committee) - 1}"
        )
    program_id = codec.program_id
    return codec.instruction(
        "replace_committee_member",
        {"index": index},
        {
            "user": user,
            "market": job.market,
            "provider": job.provider,
            "job": address,
            "previous_validator": pda.validator_pda(job.market, job.committee[index], program_id),
            "new_validator": pda.validator_pda(job.market, new_authority, program_id),
        },
    )


def rate_job_ix(codec: Codec, user: Pubkey, provider: Pubkey, job: Pubkey, score: int) -> Instruction:
    """``rate_job``: ``user`` gives ``job`` (a Job account, or its tombstone once closed) of
    ``provider`` (its Provider account) ``score`` stars, 1..5."""
    return codec.instruction("rate_job", {"score": int(score)},
                             {"user": user, "provider": provider, "job": job})  # fmt: skip
