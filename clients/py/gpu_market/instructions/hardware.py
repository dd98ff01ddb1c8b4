"""Builders of the hardware instructions (the program's ``attest_hardware.rs`` and
``slash_wrong_answer.rs``).

Both are only valid right after the Ed25519 instruction carrying their signatures:
``attest_hardware`` after :func:`gpu_market.settle.ed25519_multi_instruction` of every
attesting validator over the verdict digest (:meth:`gpu_market.hardware.HardwareVerdictArgs.digest`),
their Validator accounts passed as remaining accounts in the same order;
``slash_wrong_answer`` after :func:`gpu_market.settle.ed25519_entries_instruction` of the
worker's answer and row signatures (:class:`gpu_market.hardware.WrongAnswerEvidence`).
"""

from __future__ import annotations

from collections.abc import Sequence

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey

from .. import pda
from ..accounts import MarketView
from ..codec import Codec
from ..constants import INSTRUCTIONS_SYSVAR_ID, SYSTEM_PROGRAM_ID, TOKEN_PROGRAM_ID
from ..hardware import HardwareVerdictArgs, WrongAnswerEvidence
from ._views import address_of

__all__ = ["attest_hardware_ix", "slash_wrong_answer_ix"]


def attest_hardware_ix(
    codec: Codec,
    submitter: Pubkey,
    market: Pubkey,
    provider: Pubkey,
    verdict: HardwareVerdictArgs,
    attesters: Sequence[Pubkey],
) -> Instruction:
    """``attest_hardware`` of ``verdict`` on ``provider`` (a Provider account), submitted (and
    paid) by ``submitter``; ``attesters`` are the validators' authorities in the order of their
    signatures (their Validator PDAs go in as read-only remaining accounts)."""
    remaining = [AccountMeta(pda.validator_pda(market, a, codec.program_id), False, False)
                 for a in attesters]  # fmt: skip
    accounts = {"submitter": submitter, "market": market, "provider": provider,
                "instructions": INSTRUCTIONS_SYSVAR_ID}  # fmt: skip
    return codec.instruction("attest_hardware", {"verdict": verdict.args()}, accounts,
                             remaining=remaining)  # fmt: skip


def slash_wrong_answer_ix(
    codec: Codec,
    reporter: Pubkey,
    market: MarketView,
    provider: Pubkey,
    evidence: WrongAnswerEvidence,
) -> Instruction:
    """``slash_wrong_answer`` of ``provider`` (a Provider account of ``market``, a view with its
    address) for ``evidence``; ``reporter`` signs and pays the record
    (``pda.wrong_answer_pda(provider, challenge_digest)``). The whole slash is burned."""
    accounts = {
        "reporter": reporter,
        "market": address_of(market, "slash_wrong_answer_ix"),
        "provider": provider,
        "stake_mint": market.stake_mint,
        "stake_vault": market.stake_vault,
        "record": pda.wrong_answer_pda(provider, evidence.challenge_digest, codec.program_id),
        "instructions": INSTRUCTIONS_SYSVAR_ID,
        "token_program": TOKEN_PROGRAM_ID,
        "system_program": SYSTEM_PROGRAM_ID,
    }
    return codec.instruction("slash_wrong_answer", {"evidence": evidence.args()}, accounts)
