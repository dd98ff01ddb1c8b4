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
``cancel_job`` refunds in the same transaction. The instructions are built by the pure
builders of :mod:`gpu_market.instructions.job`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from .codec import Codec
from .instructions import cancel_job_ix, complete_job_ix, decline_job_ix, expire_job_ix

__all__ = ["JobEndings"]

class JobEndings:
    """The job-ending calls of :class:`gpu_market.client.GpuMarketClient`."""

    codec: Codec
    program_id: Pubkey

    if TYPE_CHECKING:  # provided by GpuMarketClient

        def _require(self, key: Pubkey, kind: str) -> Any: ...

        def send(self, instructions: Sequence[Instruction], signers: Sequence[Keypair]) -> Signature: ...

    def _end_job(self, build: Callable[..., Instruction], signer: Keypair, job: Pubkey) -> Signature:
        j = self._require(job, "Job")
        return self.send([build(self.codec, signer.pubkey(), j.provider, job)], [signer])

    def decline_job(self, signer: Keypair, job: Pubkey) -> Signature:
        """Refuse an Open job: Declined, GPUs freed, no tokens move; the user's ``close_job``
        then refunds the whole deposit. ``signer``: the provider's owner or its current
        (unexpired) worker key. Allowed while the market is paused."""
        return self._end_job(decline_job_ix, signer, job)

    def expire_job(self, caller: Keypair, job: Pubkey) -> Signature:
        """Fail a Running job whose provider stopped proving (anyone), strictly after
        ``JobView.expirable_after`` (= ``last_window_end + window_seconds * max_missed_windows
        + grace_seconds`` of the job's terms). No tokens move and nothing is slashed; the
        user's ``close_job`` refunds the escrow at once."""
        return self._end_job(expire_job_ix, caller, job)

    def complete_job(self, caller: Keypair, job: Pubkey) -> Signature:
        """Complete a Finishing job whose grace is over (anyone), strictly after
        ``JobView.grace_ends_at`` (= ``ended_at + terms.grace_seconds``): frees the provider's
        GPUs and stake; no tokens move (the user's ``close_job`` refunds the rest)."""
        return self._end_job(complete_job_ix, caller, job)

    def cancel_job(self, user: Keypair, job: Pubkey) -> Signature:
        """Cancel an Open job: the whole escrow (donations included) back to ATA(job.user,
        payment_mint) in the same transaction; then ``close_job`` closes it at once."""
        j = self._require(job, "Job")
        m = self._require(j.market, "Market")
        return self.send([cancel_job_ix(self.codec, user.pubkey(), j, m)], [user])
