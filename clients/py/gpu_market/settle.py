"""Settle transactions: Ed25519-program instructions + ``settle`` (pure: no I/O).

For each :class:`SettleItem` the transaction carries, in order::

    [Ed25519(attester k) ... Ed25519(attester 1)]   only when settle_quorum > 1
    Ed25519(worker key over the receipt message)
    settle(receipt)                                   extra Validator PDAs as remaining accounts

Each Ed25519 instruction holds exactly one signature with its pubkey, signature and message
inside that same instruction (all three instruction indexes 0xFFFF), laid out as
``program-tests/tests/common/mod.rs::ed25519_ix_raw`` builds it::

    [num=1, pad=0, sig_off:u16, 0xFFFF, pk_off:u16, 0xFFFF, msg_off:u16, msg_len:u16, 0xFFFF]
    + pubkey(32) + signature(64) + message

with ``pk_off=16``, ``sig_off=48``, ``msg_off=112``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction

from .constants import (
    ED25519_PROGRAM_ID,
    INSTRUCTIONS_SYSVAR_ID,
    PACKET_DATA_SIZE,
    TOKEN_PROGRAM_ID,
)

__all__ = [
    "ED25519_DATA_START",
    "THIS_INSTRUCTION",
    "Attestation",
    "SettleAccounts",
    "SettleItem",
    "ed25519_instruction",
    "max_settle_items_per_tx",
    "parse_ed25519_instruction",
    "receipt_message_for",
    "settle_instructions",
    "transaction_size",
]

THIS_INSTRUCTION = 0xFFFF
"""Ed25519 offsets' instruction index meaning "this same instruction"."""
ED25519_DATA_START = 16
_PK_OFF = 16
_SIG_OFF = _PK_OFF + 32
_MSG_OFF = _SIG_OFF + 64


@dataclass(frozen=True)
class Attestation:
    """An extra validator's Ed25519 signature over the same receipt (settle_quorum > 1)."""

    validator_authority: Pubkey
    signature: bytes


@dataclass(frozen=True)
class SettleItem:
    """One signed window receipt to settle for ``job``.

    ``receipt_signature`` is the worker key's Ed25519 signature over the receipt message
    (``gpu_market.receipt.receipt_message``). ``attestations`` (optional, nearest first) are
    needed only when the market's ``settle_quorum`` is above 1.
    """

    job: Pubkey
    seq: int
    cumulative_seconds: int
    window_end: int
    proof_hash: bytes
    worker_key: Pubkey
    receipt_signature: bytes
    attestations: tuple[Attestation, ...] = field(default=())


@dataclass(frozen=True)
class SettleAccounts:
    """The chain accounts a ``settle`` for one job needs (read from job, provider, market)."""

    market: Pubkey
    validator: Pubkey
    provider: Pubkey
    escrow: Pubkey
    provider_payment_account: Pubkey
    treasury: Pubkey
    payment_mint: Pubkey
    extra_validators: tuple[Pubkey, ...] = ()


def ed25519_instruction(pubkey: bytes, signature: bytes, message: bytes) -> Instruction:
    """Ed25519-program instruction verifying one ``signature`` of ``message`` by ``pubkey``.

    Raises ValueError on a key that is not 32 bytes, a signature that is not 64 bytes, or a
    message longer than the u16 offsets allow.
    """
    pk, sig, msg = bytes(pubkey), bytes(signature), bytes(message)
    if len(pk) != 32:
        raise ValueError(f"pubkey must be 32 bytes, got {len(pk)}")
    if len(sig) != 64:
        raise ValueError(f"signature must be 64 bytes, got {len(sig)}")
    if len(msg) > 0xFFFF - _MSG_OFF:
        raise ValueError(f"message of {len(msg)} bytes is too long")
    header = struct.pack(
        "<BBHHHHHHH",
        1,
        0,
        _SIG_OFF,
        THIS_INSTRUCTION,
        _PK_OFF,
        THIS_INSTRUCTION,
        _MSG_OFF,
        len(msg),
        THIS_INSTRUCTION,
    )
    return Instruction(ED25519_PROGRAM_ID, header + pk + sig + msg, [])


def parse_ed25519_instruction(data: bytes) -> tuple[bytes, bytes, bytes]:
    """``(pubkey, signature, message)`` of a one-signature Ed25519 instruction whose offsets
    all point into itself; ValueError otherwise (the checks ``settle`` makes on chain)."""
    data = bytes(data)
    if len(data) < ED25519_DATA_START or data[0] != 1:
        raise ValueError("not a one-signature Ed25519 instruction")
    sig_off, sig_ix, pk_off, pk_ix, msg_off, msg_len, msg_ix = struct.unpack_from("<7H", data, 2)
    if {sig_ix, pk_ix, msg_ix} != {THIS_INSTRUCTION}:
        raise ValueError("Ed25519 offsets point at another instruction")

    def take(off: int, n: int) -> bytes:
        if off + n > len(data):
            raise ValueError("Ed25519 offset out of bounds")
        return data[off : off + n]

    return take(pk_off, 32), take(sig_off, 64), take(msg_off, msg_len)


def receipt_message_for(program_id: Pubkey, market: Pubkey, item: SettleItem) -> bytes:
    """The receipt bytes of DESIGN section 4 that ``item``'s signatures must cover."""
    from .receipt import receipt_message

    return receipt_message(
        bytes(program_id),
        bytes(market),
        bytes(item.job),
        item.seq,
        item.cumulative_seconds,
        item.window_end,
        bytes(item.proof_hash),
    )


def settle_instructions(
    codec,  # gpu_market.codec.Codec
    validator_authority: Pubkey,
    item: SettleItem,
    accounts: SettleAccounts,
) -> list[Instruction]:
    """The Ed25519 instruction(s) and the ``settle`` instruction for one item, in order."""
    if len(item.attestations) != len(accounts.extra_validators):
        raise ValueError(
            f"{len(item.attestations)} attestations but {len(accounts.extra_validators)} "
            "extra Validator accounts"
        )
    message = receipt_message_for(codec.program_id, accounts.market, item)
    ixs = [
        ed25519_instruction(bytes(a.validator_authority), a.signature, message)
        for a in reversed(item.attestations)
    ]
    ixs.append(ed25519_instruction(bytes(item.worker_key), item.receipt_signature, message))
    receipt = {
        "seq": item.seq,
        "cumulative_seconds": item.cumulative_seconds,
        "window_end": item.window_end,
        "proof_hash": list(bytes(item.proof_hash)),
    }
    if len(receipt["proof_hash"]) != 32:
        raise ValueError("proof_hash must be 32 bytes")
    ixs.append(
        codec.instruction(
            "settle",
            {"receipt": receipt},
            {
                "validator_authority": validator_authority,
                "market": accounts.market,
                "validator": accounts.validator,
                "provider": accounts.provider,
                "job": item.job,
                "escrow": accounts.escrow,
                "provider_payment_account": accounts.provider_payment_account,
                "treasury": accounts.treasury,
                "payment_mint": accounts.payment_mint,
                "instructions": INSTRUCTIONS_SYSVAR_ID,
                "token_program": TOKEN_PROGRAM_ID,
            },
            remaining=[AccountMeta(v, False, False) for v in accounts.extra_validators],
        )
    )
    return ixs


def transaction_size(instructions: Sequence[Instruction], payer: Pubkey) -> int:
    """Serialized size in bytes of a legacy transaction with these instructions."""
    msg = Message.new_with_blockhash(list(instructions), payer, Hash.default())
    return len(bytes(Transaction.new_unsigned(msg)))


def max_settle_items_per_tx(codec, settle_quorum: int = 1) -> int:
    """How many SettleItems of one market always fit in one transaction.

    Worst case within a market: every item has a different job, provider and payment account,
    and distinct attesters; the validator authority is the only signer (it pays the fee).
    """
    if settle_quorum < 1:
        raise ValueError("settle_quorum must be at least 1")
    authority = Pubkey.new_unique()
    market, validator, treasury, mint = (Pubkey.new_unique() for _ in range(4))
    n = 0
    ixs: list[Instruction] = []
    while True:
        attesters = tuple(
            Attestation(Pubkey.new_unique(), bytes(64)) for _ in range(settle_quorum - 1)
        )
        item = SettleItem(
            Pubkey.new_unique(), 1, 1, 1, bytes(32), Pubkey.new_unique(), bytes(64), attesters
        )
        accts = SettleAccounts(
            market=market,
            validator=validator,
            provider=Pubkey.new_unique(),
            escrow=Pubkey.new_unique(),
            provider_payment_account=Pubkey.new_unique(),
            treasury=treasury,
            payment_mint=mint,
            extra_validators=tuple(Pubkey.new_unique() for _ in attesters),
        )
        candidate = ixs + settle_instructions(codec, authority, item, accts)
        if transaction_size(candidate, authority) > PACKET_DATA_SIZE:
            return n
        ixs, n = candidate, n + 1
