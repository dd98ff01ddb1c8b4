"""The one place where this validator signs an attestation (I/O: the store).

Guarantee: for one (job, seq) this node signs at most one attestation message, whatever role
it plays (the leader committing to the value it asks its peers to co-sign, or a member
co-signing a leader's value), across restarts and across every process that shares the
store (two processes on one PostgreSQL database). ``slash_validator_equivocation`` takes two
attestations of one validator for one seq that differ in receipt or approved seconds, so
this gate is what keeps the node's bond safe from its own behaviour.

How: ``AttestationSigner.sign`` writes ``(job, seq, receipt digest, approved_seconds,
signature)`` to ``attestations_given`` with an insert that keeps the first row for the key,
reads back what is stored, and commits it durably before it returns; only the stored row
leaves the process. Ed25519 signatures are deterministic, so a retry of the same value
returns the same bytes. A different value (or another receipt at that seq) raises
``SignedOtherValue`` carrying what was signed; callers then propose or answer that value, or
nothing. The signature computed for a value that loses the race is discarded unseen.

Nothing else in the validator may call ``authority.sign_message`` on an attestation message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .attest import attestation_message, receipt_message_of
from .errors import ValidatorError
from .records import GivenAttestation, Store, StoredProof


class SignedOtherValue(ValidatorError):
    """This node already signed another value (or another receipt) for that (job, seq)."""

    def __init__(self, given: GivenAttestation) -> None:
        super().__init__(f"already attested {given.approved_seconds} seconds for seq "
                         f"{given.seq}; a node never signs two values for one seq")
        self.given = given


class AttestationSigner:
    """Signs attestations of ``authority`` (a Keypair), at most one value per (job, seq)."""

    def __init__(self, authority: Any, store: Store,
                 clock: Callable[[], float] = time.time) -> None:
        self.authority = authority
        self.store = store
        self.clock = clock

    def signed(self, job: bytes, seq: int) -> GivenAttestation | None:
        """What this node signed for (job, seq), if anything."""
        return self.store.given_attestation(job, seq)

    def sign(self, stored: StoredProof, approved_seconds: int,
             requester: bytes | None) -> GivenAttestation:
        """The attestation of ``approved_seconds`` over ``stored``'s receipt, stored durably
        before it is returned. Raises ``SignedOtherValue`` when another value or receipt was
        signed for that (job, seq); ``StoreError`` when the store cannot record it (nothing
        was signed that may leave the process)."""
        given = self.store.given_attestation(stored.job, stored.seq)
        if given is None:
            msg = attestation_message(receipt_message_of(stored), approved_seconds)
            sig = bytes(self.authority.sign_message(msg))
            given = self.store.record_given_attestation(GivenAttestation(
                stored.job, stored.seq, approved_seconds, stored.hash, sig, requester,
                self.clock()))
        if given.approved_seconds != approved_seconds or given.proof_hash != stored.hash:
            raise SignedOtherValue(given)
        return given
