"""Hardware verdicts, wrong-answer slashes and job ratings: typed calls mixed into
:class:`GpuMarketClient`.

==================  ===========================================  ============================
call                who                                          what
==================  ===========================================  ============================
attest_hardware     anyone submits; ``hardware_quorum`` distinct  records a verdict on the
                    Active validators sign the verdict            provider (passed or failed)
slash_wrong_answer  anyone; the worker signed the evidence        burns ``equivocation_slash_bps``
                                                                  of the provider's stake
rate_job            the job's user, once, if the job billed       1..5 stars on the provider
==================  ===========================================  ============================

Each method reads what it needs, checks what the program would refuse (raising
:class:`ValueError` with the reason, before anything is sent), builds with
:mod:`gpu_market.instructions.hardware` / :func:`~gpu_market.instructions.rate_job_ix` and the
Ed25519 layouts of :mod:`gpu_market.settle`, sends and confirms. This module does not import
``gpu_market.client`` (the client inherits from it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from .accounts import effective_params
from .codec import Codec
from .hardware import HardwareVerdictArgs, WrongAnswerEvidence
from .instructions import attest_hardware_ix, rate_job_ix, slash_wrong_answer_ix
from .receipt import verify
from .settle import ed25519_entries_instruction, ed25519_multi_instruction

__all__ = ["VerdictsAndRatings"]


class VerdictsAndRatings:
    """The hardware and rating calls of :class:`gpu_market.client.GpuMarketClient`."""

    codec: Codec
    program_id: Pubkey

    if TYPE_CHECKING:  # provided by GpuMarketClient

        def _require(self, key: Pubkey, kind: str) -> Any: ...

        def _fetch(self, key: Pubkey, kind: str) -> Any: ...

        def chain_time(self) -> int: ...

        def send(self, instructions: Sequence[Instruction], signers: Sequence[Keypair]) -> Signature: ...

    def attest_hardware_instructions(
        self,
        submitter: Pubkey,
        provider: Pubkey,
        verdict: HardwareVerdictArgs,
        signatures: Sequence[tuple[Pubkey, bytes]],
    ) -> list[Instruction]:
        """[Ed25519 (every ``(validator authority, signature)`` over the verdict digest),
        ``attest_hardware``] for ``provider`` (its Provider account). ValueError when a
        signature does not verify, or there are fewer than ``hardware_quorum`` of them."""
        p = self._require(provider, "Provider")
        m = self._require(p.market, "Market")
        digest = verdict.digest(self.program_id, p.market, provider)
        for authority, sig in signatures:
            if not verify(bytes(authority), bytes(sig), digest):
                raise ValueError(f"the signature of {authority} is not over this verdict")
        quorum = effective_params(m, self.chain_time()).hardware_quorum
        if len(signatures) < quorum:
            raise ValueError(f"a verdict needs {quorum} validators' signatures (hardware_quorum), "
                             f"got {len(signatures)}")  # fmt: skip
        ed = ed25519_multi_instruction([(bytes(a), bytes(s)) for a, s in signatures], digest)
        ix = attest_hardware_ix(self.codec, submitter, p.market, provider, verdict,
                                [a for a, _ in signatures])  # fmt: skip
        return [ed, ix]

    def attest_hardware(
        self,
        submitter: Keypair,
        provider: Pubkey,
        verdict: HardwareVerdictArgs,
        signatures: Sequence[tuple[Pubkey, bytes]],
    ) -> Signature:
        """Record ``verdict`` on ``provider`` with the validators' ``signatures`` (each
        ``(authority, Ed25519 signature over verdict.digest(...))``), submitted and paid by
        ``submitter``; see :meth:`attest_hardware_instructions`."""
        ixs = self.attest_hardware_instructions(submitter.pubkey(), provider, verdict, signatures)
        return self.send(ixs, [submitter])

    def slash_wrong_answer(
        self,
        reporter: Keypair,
        provider: Pubkey,
        evidence: WrongAnswerEvidence,
        answer: tuple[Pubkey, bytes],
        row: tuple[Pubkey, bytes],
    ) -> Signature:
        """Slash ``provider`` for ``evidence``: ``answer`` and ``row`` are ``(worker key,
        signature)`` over the answer and row digests. ValueError (nothing sent) when the path
        is consistent or malformed, or a signature does not verify. The slash is burned; the
        reporter pays the record's rent and earns nothing."""
        p = self._require(provider, "Provider")
        m = self._require(p.market, "Market")
        if not evidence.is_wrong:
            raise ValueError("the opened row's Merkle path leads to the signed root (or is "
                             "malformed): no wrong answer to slash")  # fmt: skip
        digests = (evidence.answer_digest(self.program_id, p.market, provider),
                   evidence.row_digest(self.program_id, p.market, provider))  # fmt: skip
        for (key, sig), digest, what in zip((answer, row), digests, ("answer", "row")):
            if not verify(bytes(key), bytes(sig), digest):
                raise ValueError(f"the {what} signature of {key} is not over this evidence")
        ed = ed25519_entries_instruction([(bytes(answer[0]), bytes(answer[1]), digests[0]),
                                          (bytes(row[0]), bytes(row[1]), digests[1])])  # fmt: skip
        ix = slash_wrong_answer_ix(self.codec, reporter.pubkey(), m, provider, evidence)
        return self.send([ed, ix], [reporter])

    def rate_job(self, user: Keypair, job: Pubkey, score: int) -> Signature:
        """Rate ``job`` ``score`` stars (1..5) as its user; the job (or, once closed, its
        tombstone) must have billed something and not be rated yet. ValueError naming the
        reason before anything is sent."""
        if isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= 5:
            raise ValueError(f"a rating is 1 to 5 stars, got {score!r}")
        j = self._fetch(job, "Job")
        if j is None:
            j = self._fetch(job, "ClosedJob")
            if j is None or j.user is None:
                raise ValueError(f"no job at {job}: nothing to rate")
        if j.user != user.pubkey():
            raise ValueError(f"only the job's user {j.user} may rate job {job}")
        if j.paid_seconds == 0:
            raise ValueError(f"job {job} billed nothing: only a job that billed can be rated")
        if j.rated:
            raise ValueError(f"job {job} is already rated (once per job)")
        return self.send([rate_job_ix(self.codec, user.pubkey(), j.provider, job, score)], [user])

