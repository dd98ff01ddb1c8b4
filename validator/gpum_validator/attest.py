"""Committee rounds, pure: who leads, which value a round settles, what members sign.

Nothing here does I/O; ``settlement``, ``downtime`` and ``members`` use it.

* ``leader_of``: the member that leads a job's settle round. ``round`` is the newest
  accepted seq ``// settle_every``; the base position is
  ``int.from_bytes(sha256(job || round:u64le)[:8], "little") % n`` and every elapsed timeout
  (``timeouts``) moves the lead to the next member, so a member that is down delays a round
  by one timeout, never stalls it.
* ``quorum_value``: the highest total at least ``q`` members reached, the leader's own
  included: the q-th highest of all totals. A byzantine member claiming more than it
  approved changes nothing (it is one of the totals *above* the q-th); one claiming less can
  only lower the value to what an honest quorum would also accept in a q-of-q committee.
* ``settle_bound``: the program's limits on a settle's approved total, applied to a value
  (never more than the receipt's cumulative claim, nor the wall-time bound; None below
  ``paid_seconds``).
* ``member_total``: a member's query answer, read against the receipt it must hold.
* ``attestation_message``: the 40 bytes a member signs, ``sha256(receipt_message) ||
  approved_seconds:u64le`` (the SDK's and the program's); ``receipt_message_of`` rebuilds the
  receipt from stored proof bytes.
* ``sign_request_message``: what a leader signs to ask a member for an attestation, bound to
  the target member, the round and the attempt (the elapsed timeouts that made it leader), so
  only the designated leader of a round can make a member commit to a value for a (job, seq),
  and a request cannot be replayed to another member or in a later round.
* ``attempt_bound``: the highest attempt a member accepts for a round it holds the receipt
  of, so a member cannot make itself leader by claiming timeouts that have not passed.
* ``check_downtime_message``: a member's check that a message it is asked to sign is exactly
  a ``slash_downtime`` of one job by committee members (layout of the program's
  ``SlashDowntime`` accounts in ``idl/gpu_market.json``).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpu_market.proof import decode_proof, receipt_for_proof

from .records import ChainJobInfo, StoredProof

ATTEST_REQUEST_DOMAIN = b"gpu-market/attest-request/v2"
"""Prefix of the message a leader signs to ask a member for an attestation."""
U64_MAX = 2**64 - 1


def attestation_message(receipt_message: bytes, approved_seconds: int) -> bytes:
    """``sha256(receipt_message) || approved_seconds:u64le`` (40 bytes), the SDK's
    ``gpu_market.receipt.attestation_message`` (the program's ``attestation_message``)."""
    from gpu_market.receipt import attestation_message as sdk

    return sdk(receipt_message, approved_seconds)


def receipt_message_of(stored: StoredProof) -> bytes:
    """The receipt message whose digest the worker signed for ``stored`` (program, market and job come
    from the proof bytes, which ``authenticate`` bound to this validator's config)."""
    return receipt_for_proof(decode_proof(stored.proof), stored.proof)


# ----------------------------------------------------------------------------- leaders


def leader_position(job: bytes, round_: int, n: int, timeouts: int = 0) -> int:
    """Index in the committee (of ``n`` members) of the leader of ``round_`` after
    ``timeouts`` elapsed timeouts."""
    if n < 1:
        raise ValueError("a committee has at least one member")
    h = hashlib.sha256(bytes(job) + struct.pack("<Q", round_ & U64_MAX)).digest()
    return (int.from_bytes(h[:8], "little") + max(0, timeouts)) % n


def leader_of(job: bytes, round_: int, committee: Sequence[bytes], timeouts: int = 0) -> bytes:
    """The authority that leads ``round_`` of ``job`` after ``timeouts`` timeouts."""
    return committee[leader_position(job, round_, len(committee), timeouts)]


def timeouts_elapsed(since: float, now: float, timeout_seconds: float) -> int:
    """Whole timeouts between ``since`` and ``now`` (0 before ``since``)."""
    if timeout_seconds <= 0 or now <= since:
        return 0
    return int((now - since) // timeout_seconds)


# ----------------------------------------------------------------------------- values


def quorum_value(totals: Sequence[int], quorum: int) -> int | None:
    """The highest value at least ``quorum`` of ``totals`` reach (the q-th highest), or None
    when fewer than ``quorum`` totals are known."""
    if quorum < 1 or len(totals) < quorum:
        return None
    return sorted(totals, reverse=True)[quorum - 1]


def settle_bound(value: int, chain: ChainJobInfo, cumulative_seconds: int,
                 window_end: int) -> int | None:
    """``value`` lowered to what ``settle`` accepts for a receipt (``cumulative_seconds``,
    ``window_end``) of a job in state ``chain``: settlement is by totals, so at most the
    receipt's cumulative claim (the committee never pays a second the worker did not claim,
    and seconds an earlier settle left unapproved stay payable) and the wall-time bound
    ``window_end - started_at + skew`` (``ended_at - started_at`` once Finishing). None when
    that is below ``paid_seconds`` (nothing can be settled with this receipt)."""
    bound = min(value, cumulative_seconds,
                window_end - chain.started_at + chain.max_skew_seconds)
    if chain.status == "finishing" and chain.ended_at > 0:
        bound = min(bound, chain.ended_at - chain.started_at)
    return bound if bound >= chain.paid_seconds else None


def member_total(body: Any, seq: int, cumulative_seconds: int, window_end: int,
                 proof_hash: bytes) -> tuple[int, int | None] | None:
    """``(approved total, value signed or None)`` from a member's answer to
    ``/v1/attestations/query`` when it holds the same receipt at ``seq``; None otherwise
    (another receipt, or an answer that is not well formed)."""
    try:
        r = body["receipt"]
        same = (r["seq"] == seq and r["cumulative_seconds"] == cumulative_seconds
                and r["window_end"] == window_end and bytes.fromhex(r["proof_hash"]) == proof_hash)
        total, signed = body["approved_seconds"], body.get("signed_approved_seconds")
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not same or not _is_u64(total) or not (signed is None or _is_u64(signed)):
        return None
    return int(total), None if signed is None else int(signed)


def _is_u64(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= U64_MAX


def sign_request_message(job: bytes, seq: int, approved_seconds: int, leader: bytes,
                         member: bytes, round_: int, attempt: int) -> bytes:
    """What a leader signs to ask ``member`` for an attestation of (job, seq,
    approved_seconds) in ``round_`` after ``attempt`` timeouts:
    ``domain || job || seq:u64le || approved:u64le || leader || member || round:u64le ||
    attempt:u64le``."""
    return (ATTEST_REQUEST_DOMAIN + bytes(job) + struct.pack("<QQ", seq, approved_seconds)
            + bytes(leader) + bytes(member)
            + struct.pack("<QQ", round_ & U64_MAX, attempt & U64_MAX))


def attempt_bound(received_at: float, now: float, timeout_seconds: float) -> int:
    """The highest attempt a member accepts for a round whose receipt it received at
    ``received_at``: the timeouts elapsed since then, plus one for the leader's clock and
    delivery running ahead of this member's."""
    return timeouts_elapsed(received_at, now, timeout_seconds) + 1


# ----------------------------------------------------------------------------- downtime

SLASH_DOWNTIME_DISCRIMINATOR = hashlib.sha256(b"global:slash_downtime").digest()[:8]
SLASH_DOWNTIME_FIXED_ACCOUNTS = 9
"""validator_authority, validator, targets.{market, provider, job, stake_mint, stake_vault,
reporter_stake_account, token_program}; then (Validator PDA, authority signer) pairs."""
_JOB_ACCOUNT = 4


@dataclass(frozen=True)
class DowntimeRequest:
    """What a ``slash_downtime`` message asks its signers to attest."""

    job: bytes
    submitter: bytes
    others: tuple[bytes, ...]
    last_proof_window_end: int


def check_downtime_message(message: Any, program_id: bytes, job: bytes,
                           last_proof_window_end: int, me: bytes,
                           committee: Sequence[bytes]) -> DowntimeRequest:
    """ValueError unless ``message`` (a solders ``Message``) is exactly one ``slash_downtime``
    instruction of this program for ``job`` with ``last_proof_window_end``, submitted and
    paid for by another committee member, whose co-signers are committee members, ``me``
    among them, and whose only signers are those members (so the signature authorises this
    slash and nothing else)."""
    if len(message.instructions) != 1:
        raise ValueError(f"expected exactly one instruction, got {len(message.instructions)}")
    ix = message.instructions[0]
    keys = [bytes(k) for k in message.account_keys]
    if keys[ix.program_id_index] != bytes(program_id):
        raise ValueError("the instruction is not one of this gpu_market program")
    data = bytes(ix.data)
    if len(data) != 16 or data[:8] != SLASH_DOWNTIME_DISCRIMINATOR:
        raise ValueError("the instruction is not a slash_downtime")
    lpwe = struct.unpack("<q", data[8:])[0]
    if lpwe != last_proof_window_end:
        raise ValueError(f"the message says last_proof_window_end={lpwe}, the request "
                         f"{last_proof_window_end}")
    accounts = [keys[i] for i in bytes(ix.accounts)]
    rest = accounts[SLASH_DOWNTIME_FIXED_ACCOUNTS:]
    if len(accounts) < SLASH_DOWNTIME_FIXED_ACCOUNTS or len(rest) % 2:
        raise ValueError("the accounts are not slash_downtime's plus (validator, authority) "
                         "pairs")
    if accounts[_JOB_ACCOUNT] != bytes(job):
        raise ValueError("the slash_downtime is for another job")
    submitter = accounts[0]
    others = tuple(rest[1::2])
    members = set(committee)
    if submitter not in members or not set(others) <= members:
        raise ValueError("a signer of the slash is not on the job's committee")
    if submitter == me or me not in others:
        raise ValueError("this validator is not one of the co-signers of the slash")
    if keys[0] != submitter:
        raise ValueError("the fee payer must be the submitting member")
    signers = set(keys[:message.header.num_required_signatures])
    if not signers <= {submitter, *others}:
        raise ValueError("the transaction needs signers other than the attesting members")
    return DowntimeRequest(bytes(job), submitter, others, lpwe)
