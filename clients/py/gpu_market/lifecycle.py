"""Ending jobs: typed calls mixed into :class:`GpuMarketClient`.

How a job ends, and who may end it:

==============  ====================================  ====================  =================
call            who                                   from                  to
==============  ====================================  ====================  =================
cancel_job      the job's user                        Open                  Cancelled (+refund)
decline_job     the provider's owner or worker key    Open                  Declined
expire_job      anyone, once no receipt settled for   Running               Failed
                ``max_missed_windows`` windows plus
                the grace
complete_job    anyone, after ``ended_at +            Finishing             Completed
                terms.grace_seconds``
==============  ====================================  ====================  =================

``decline_job``, ``expire_job`` and ``complete_job`` share the program's ``EndJob`` accounts
(signer, provider, job): they move no tokens, free the provider's GPUs, and leave the refund
to the user's ``close_job``, which Declined, Failed and Completed jobs allow at once. Only
``cancel_job`` refunds in the same transaction. The ``*_ix`` builders are pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from . import pda, tokens
from .codec import Codec
from .constants import TOKEN_PROGRAM_ID

__all__ = ["END_JOB_INSTRUCTIONS", "JobEndings", "end_job_ix"]

END_JOB_INSTRUCTIONS = ("decline_job", "expire_job", "complete_job")
"""Instructions with the program's ``EndJob`` accounts: signer, provider (mut), job (mut)."""


def end_job_ix(codec: Codec, name: str, signer: Pubkey, provider: Pubkey, job: Pubkey) -> Instruction:
    """``decline_job`` / ``expire_job`` / ``complete_job`` of ``job`` (whose Provider account
    is ``provider``), signed by ``signer``."""
    if name not in END_JOB_INSTRUCTIONS:
        raise ValueError(f"{name!r} is not one of {END_JOB_INSTRUCTIONS}")
    return codec.instruction(name, {}, {"signer": signer, "provider": provider, "job": job})


class JobEndings:
    """The job-ending calls of :class:`gpu_market.client.GpuMarketClient`."""

    codec: Codec
    program_id: Pubkey

    if TYPE_CHECKING:  # provided by GpuMarketClient

        def _require(self, key: Pubkey, kind: str) -> Any: ...

        def send(self, instructions: Sequence[Instruction], signers: Sequence[Keypair]) -> Signature: ...

    def _end_job(self, name: str, signer: Keypair, job: Pubkey) -> Signature:
        j = self._require(job, "Job")
        return self.send([end_job_ix(self.codec, name, signer.pubkey(), j.provider, job)], [signer])

    def decline_job(self, signer: Keypair, job: Pubkey) -> Signature:
        """Refuse an Open job: Declined, GPUs freed, no tokens move; the user's ``close_job``
        then refunds the whole deposit. ``signer``: the provider's owner or its current
        (unexpired) worker key. Allowed while the market is paused."""
        return self._end_job("decline_job", signer, job)

    def expire_job(self, caller: Keypair, job: Pubkey) -> Signature:
        """Fail a Running job whose provider stopped proving (anyone), strictly after
        ``JobView.expirable_after`` (= ``last_window_end + window_seconds * max_missed_windows
        + grace_seconds`` of the job's terms). No tokens move and nothing is slashed; the
        user's ``close_job`` refunds the escrow at once."""
        return self._end_job("expire_job", caller, job)

    def complete_job(self, caller: Keypair, job: Pubkey) -> Signature:
        """Complete a Finishing job whose grace is over (anyone), strictly after
        ``JobView.grace_ends_at`` (= ``ended_at + terms.grace_seconds``): frees the provider's
        GPUs and stake; no tokens move (the user's ``close_job`` refunds the rest)."""
        return self._end_job("complete_job", caller, job)

    def cancel_job(self, user: Keypair, job: Pubkey) -> Signature:
        """Cancel an Open job: the whole escrow (donations included) back to ATA(job.user,
        payment_mint) in the same transaction; then ``close_job`` closes it at once."""
        j = self._require(job, "Job")
        m = self._require(j.market, "Market")
        ix = self.codec.instruction(
            "cancel_job",
            {},
            {
                "signer": user.pubkey(),
                "market": j.market,
                "provider": j.provider,
                "job": job,
                "escrow": pda.escrow_pda(job, self.program_id),
                "payment_mint": m.payment_mint,
                "user_payment_account": tokens.ata(j.user, m.payment_mint),
                "token_program": TOKEN_PROGRAM_ID,
            },
        )
        return self.send([ix], [user])
