"""Where a job's proof chain stands outside this machine: validators' heads and the chain.

A worker that has no trustworthy local chain state for a running job (a lost or replaced
outbox database, a new machine, a restored backup) must not start again from seq 1: every
re-signed (job, seq) with other contents is an equivocation that slashes the provider. It
resumes instead after everything the job's validators and the chain hold:

    GET /v1/jobs/<job base58>/head  -> 200 {"job", "seq", "proof", "proof_signature",
                                            "receipt_signature", "worker_key", "decision"}
                                        (the stored proof with the highest seq, whatever
                                        its decision)
                                     -> 404 {"error": "job_unknown"} (nothing stored)

Guarantees:

* ``HttpHeadSource.heads`` asks the validators it is given: the job's committee members
  (their endpoints read from chain), or the static ``--validator`` override. It returns only
  when *every* one of them answered with a verified head or ``job_unknown``; anything else
  (down, timeout, 5xx, another 404, a head that does not verify), and an empty list, raise
  ``HeadsIncomplete`` and the caller signs nothing for the job.
  Billing of the time until the validators answer is lost, never billed twice.
* A head is trusted only if its proof decodes, is for this job and provider, and both its
  proof and receipt signatures verify under a worker key of this provider (current or
  retired). It was therefore really signed by this provider, so it proves that its seq is
  taken; a validator that serves an older head than it holds is covered by the others, one
  that serves a newer one only makes the worker skip seqs (safe).
* Every head request is a ``gpu_market.net.BoundedClient`` call: it ends within the
  source's deadline in total and reads at most ``MAX_HEAD_BYTES``, so a member that trickles
  its answer costs one deadline and counts as no answer. Members are asked in parallel.
* The agent runs the whole check (the provider's worker keys from chain, then the heads)
  in a thread per job (``background.Background``), so a job waiting for its committee
  waits alone: the sampler, window closing and every other job go on.
* ``resume_point`` (pure) starts after the highest seq any source holds, so no seq held
  anywhere is signed again, and continues the hash chain, cumulative total and window grid
  from the highest head.
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpu_market.net import BoundedResponse, NetError
from gpu_market.proof import (
    ZERO_HASH,
    ProofFormatError,
    WindowProof,
    decode_proof,
    proof_hash,
    receipt_for_proof,
)
from gpu_market.receipt import verify_receipt

from .keys import b58decode, b58encode

log = logging.getLogger("gpum_worker.heads")

MAX_HEAD_BYTES = 256 * 1024
"""The largest head answer read (one proof of a few KiB, base64, plus its signatures)."""


@dataclass(frozen=True)
class Head:
    """A verified head: the highest-seq proof one validator stores for a job."""

    validator: str
    proof: WindowProof
    hash: bytes
    decision: str


class BadHead(ValueError):
    """A head answer that cannot be trusted (malformed, not this job's, not our signature)."""


class HeadsIncomplete(Exception):
    """Not every validator gave a usable head; the worker must not sign for the job."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


class HeadsPending(HeadsIncomplete):
    """The committee is being asked in the background; the job waits for the answers."""


class HeadSource(Protocol):
    def heads(self, job: bytes, provider: bytes, keys: Collection[bytes],
              validators: Sequence[str]) -> list[Head]:
        """Verified heads of every one of ``validators`` (base URLs: the job's committee)
        that stores something for ``job``.

        Raises ``HeadsIncomplete`` unless every one answered usably (or none was given).
        """
        ...


def decode_signed_proof(body: Any) -> tuple[bytes, bytes, bytes, bytes, WindowProof]:
    """The SignedProof JSON fields decoded (nothing verified): proof bytes, proof signature,
    receipt signature, worker key and the decoded proof; ValueError saying what is malformed."""
    try:
        raw = base64.b64decode(body["proof"], validate=True)
        psig = base64.b64decode(body["proof_signature"], validate=True)
        rsig = base64.b64decode(body["receipt_signature"], validate=True)
        signer = b58decode(body["worker_key"])
        return raw, psig, rsig, signer, decode_proof(raw)
    except (KeyError, TypeError, ValueError, binascii.Error, ProofFormatError) as e:
        raise ValueError(str(e) or type(e).__name__) from None


def verify_head(validator: str, body: Any, job: bytes, provider: bytes,
                keys: Collection[bytes]) -> Head:
    """Check one 200 head answer (pure); ``BadHead`` saying what is wrong."""
    if not isinstance(body, dict):
        raise BadHead("the head answer is not a JSON object")
    try:
        raw, psig, rsig, signer, p = decode_signed_proof(body)
    except ValueError as e:
        raise BadHead(f"malformed head: {e}") from None
    if body.get("job") != b58encode(job) or p.job != job:
        raise BadHead("the head is for another job")
    if p.provider != provider:
        raise BadHead("the head proof names another provider")
    if body.get("seq") != p.seq:
        raise BadHead(f"the head says seq {body.get('seq')!r} but its proof has {p.seq}")
    if signer != p.worker_key or signer not in keys:
        raise BadHead(f"the head is signed by {b58encode(p.worker_key)}, not a worker key "
                         "of this provider")
    # The receipt signature alone authenticates the proof bytes (the receipt commits to their
    # sha256); validators do not check ``proof_signature``, so neither does this: a
    # relay that swapped it could otherwise make a good head unusable.
    del psig
    if not verify_receipt(signer, rsig, receipt_for_proof(p, raw)):
        raise BadHead("the head's receipt signature does not verify")
    return Head(validator=validator, proof=p, hash=proof_hash(raw),
                decision=str(body.get("decision", "")))


class HttpGetter(Protocol):
    """``gpu_market.net.BoundedClient``: raises ``NetError`` on any failure."""

    def get(self, url: str, **kw: Any) -> BoundedResponse: ...


class HttpHeadSource:
    """Asks each of a job's validators for its head, all at once (a thread per member),
    each call bounded by ``timeout_s`` in total and ``MAX_HEAD_BYTES``."""

    def __init__(self, client: HttpGetter, timeout_s: float = 10.0) -> None:
        self.client = client
        self.timeout_s = timeout_s

    def heads(self, job: bytes, provider: bytes, keys: Collection[bytes],
              validators: Sequence[str]) -> list[Head]:
        validators = tuple(dict.fromkeys(validators))
        if not validators:
            raise HeadsIncomplete(["no committee member with a usable endpoint to ask"])
        answers: list[Head | str | None] = [f"{v}: no answer" for v in validators]

        def ask(i: int, v: str) -> None:
            answers[i] = self._one(v, job, provider, keys)

        threads = [threading.Thread(target=ask, args=(i, v), daemon=True,
                                    name=f"head {v}"[:60]) for i, v in enumerate(validators)]
        for t in threads:
            t.start()
        for t in threads:  # each call ends within timeout_s; the join bound is a backstop
            t.join(self.timeout_s + 5)
        problems = [a for a in answers if isinstance(a, str)]
        if problems:
            raise HeadsIncomplete(problems)
        return [a for a in answers if isinstance(a, Head)]

    def _one(self, v: str, job: bytes, provider: bytes,
             keys: Collection[bytes]) -> Head | str | None:
        """A verified head, None (job_unknown), or the problem as text."""
        url = f"{v.rstrip('/')}/v1/jobs/{b58encode(job)}/head"
        try:
            r = self.client.get(url, deadline=self.timeout_s, max_bytes=MAX_HEAD_BYTES)
        except NetError as e:
            return f"{v}: {e}"
        body = r.json_object()
        if r.status == 404 and isinstance(body, dict) and body.get("error") == "job_unknown":
            return None
        if r.status != 200:
            return f"{v}: HTTP {r.status} {str(body)[:120]}"
        try:
            return verify_head(v, body, job, provider, keys)
        except BadHead as e:
            return f"{v}: {e}"


@dataclass(frozen=True)
class ResumePoint:
    """The chain state the next proof of a job extends (see ``outbox.JobChain``)."""

    last_seq: int
    last_hash: bytes
    cumulative: int
    last_window_end: int


def resume_point(*, started_at: int, chain_last_seq: int, chain_last_window_end: int,
                 chain_claimed_seconds: int, heads: Sequence[Head]) -> ResumePoint:
    """Where to continue a job after every seq the chain and the validators hold (pure).

    * next seq = max(chain ``last_seq``, every head's seq) + 1;
    * prev hash = sha256 of the highest head's proof (the hash chain continues). When the
      chain is ahead of every head (the validators lost proofs), no validator holds the
      proof the link would point at, so none can check it: zero hash;
    * cumulative = the highest head's ``cumulative_seconds`` (at least the chain's
      ``claimed_seconds``, the cumulative claim of the last settled receipt: settle refuses
      a receipt below it);
    * the next window starts at the latest of the highest head's ``window_end``, the chain's
      ``last_window_end`` and the job's start, so no time is claimed twice.
    """
    best = max(heads, key=lambda h: h.proof.seq, default=None)
    head_seq = best.proof.seq if best is not None else 0
    end = max(started_at, chain_last_window_end,
              max((h.proof.window_end for h in heads), default=started_at))
    if best is not None and head_seq >= chain_last_seq:
        return ResumePoint(head_seq, best.hash,
                           max(best.proof.cumulative_seconds, chain_claimed_seconds), end)
    if chain_last_seq > 0:
        cumulative = max(chain_claimed_seconds,
                         best.proof.cumulative_seconds if best is not None else 0)
        return ResumePoint(chain_last_seq, ZERO_HASH, cumulative, end)
    return ResumePoint(0, ZERO_HASH, 0, started_at)
