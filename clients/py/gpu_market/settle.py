"""Settle transactions: one Ed25519-program instruction + ``settle`` per item (pure: no I/O).

For each :class:`SettleItem` the transaction carries, in order::

    Ed25519(worker key, attester 1, ..., attester q-1; all over ONE copy of the receipt)
    settle(receipt)          extra Validator PDAs as remaining accounts, attester order

The Ed25519 instruction holds ``n`` signatures whose pubkey, signature and message all lie
inside that same instruction (every instruction index 0xFFFF); all ``n`` entries point at the
single copy of the message at the end (``programs/gpu_market/src/receipt.rs::ed25519_signers``)::

    [num=n, pad=0, n x (sig_off:u16, 0xFFFF, pk_off:u16, 0xFFFF, msg_off:u16, msg_len:u16, 0xFFFF)]
    + n x (pubkey(32) + signature(64)) + message

For ``n = 1`` this is byte for byte ``program-tests/tests/common/mod.rs::ed25519_ix_raw``
(``pk_off=16``, ``sig_off=48``, ``msg_off=112``).
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
    "ed25519_multi_instruction",
    "max_settle_items_per_tx",
    "parse_ed25519_instruction",
    "parse_ed25519_signatures",
    "receipt_message_for",
    "settle_instructions",
    "transaction_size",
]

THIS_INSTRUCTION = 0xFFFF
"""Ed25519 offsets' instruction index meaning "this same instruction"."""
ED25519_DATA_START = 16
"""Where the payload starts in a one-signature Ed25519 instruction (2 + 14)."""
MAX_ED25519_SIGNATURES = 16
"""The most signatures ``settle`` accepts in its Ed25519 instruction (receipt.rs MAX_SIGNATURES)."""
_HEADER = 2
_OFFSETS = 14
_ENTRY = 32 + 64


@dataclass(frozen=True)
class Attestation:
    """An extra validator's Ed25519 signature over the same receipt (settle_quorum > 1)."""

    validator_authority: Pubkey
    signature: bytes


@dataclass(frozen=True)
class SettleItem:
    """One signed window receipt to settle for ``job``.

    ``receipt_signature`` is the worker key's Ed25519 signature over the receipt message
    (``gpu_market.receipt.receipt_message``). ``attestations`` (``settle_quorum - 1`` of them
    when the market's quorum is above 1) follow the worker's signature in the Ed25519
    instruction, and their Validator PDAs are the remaining accounts, in this order.
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
    """The chain accounts a ``settle`` for one job needs (read from job, provider, market).

    ``fee_vault`` is the market's fee vault (``MarketView.fee_vault``): settle pays the
    treasury share there, never to the treasury account itself (``withdraw_fees`` forwards it).
    """

    market: Pubkey
    validator: Pubkey
    provider: Pubkey
    escrow: Pubkey
    provider_payment_account: Pubkey
    fee_vault: Pubkey
    payment_mint: Pubkey
    extra_validators: tuple[Pubkey, ...] = ()


def ed25519_multi_instruction(
    signatures: Sequence[tuple[bytes | Pubkey, bytes]], message: bytes
) -> Instruction:
    """Ed25519-program instruction verifying every ``(pubkey, signature)`` over ``message``.

    One copy of ``message`` sits at the end; every entry's offsets point into this same
    instruction. Raises ValueError on no signatures, more than ``MAX_ED25519_SIGNATURES``, a key
    that is not 32 bytes, a signature that is not 64 bytes, or offsets beyond u16.
    """
    pairs = [(bytes(pk), bytes(sig)) for pk, sig in signatures]
    msg = bytes(message)
    n = len(pairs)
    if not 1 <= n <= MAX_ED25519_SIGNATURES:
        raise ValueError(f"an Ed25519 instruction here carries 1..{MAX_ED25519_SIGNATURES} "
                         f"signatures, got {n}")  # fmt: skip
    for i, (pk, sig) in enumerate(pairs):
        if len(pk) != 32:
            raise ValueError(f"pubkey {i} must be 32 bytes, got {len(pk)}")
        if len(sig) != 64:
            raise ValueError(f"signature {i} must be 64 bytes, got {len(sig)}")
    base = _HEADER + _OFFSETS * n
    msg_off = base + _ENTRY * n
    if msg_off + len(msg) > 0xFFFF:
        raise ValueError(f"message of {len(msg)} bytes is too long")
    header = bytearray([n, 0])
    body = bytearray()
    for i, (pk, sig) in enumerate(pairs):
        pk_off = base + _ENTRY * i
        header += struct.pack(
            "<7H", pk_off + 32, THIS_INSTRUCTION, pk_off, THIS_INSTRUCTION, msg_off, len(msg),
            THIS_INSTRUCTION,
        )  # fmt: skip
        body += pk + sig
    return Instruction(ED25519_PROGRAM_ID, bytes(header + body) + msg, [])


def ed25519_entries_instruction(
    entries: Sequence[tuple[bytes | Pubkey, bytes, bytes]],
) -> Instruction:
    """Ed25519-program instruction verifying each ``(pubkey, signature, message)`` entry, each
    message stored with its entry, every offset pointing into this same instruction (the layout
    ``slash_equivocation`` expects for its two receipts). ValueError on bad lengths."""
    items = [(bytes(pk), bytes(sig), bytes(msg)) for pk, sig, msg in entries]
    n = len(items)
    if not 1 <= n <= MAX_ED25519_SIGNATURES:
        raise ValueError(f"an Ed25519 instruction here carries 1..{MAX_ED25519_SIGNATURES} "
                         f"signatures, got {n}")  # fmt: skip
    header = bytearray([n, 0])
    body = bytearray()
    base = _HEADER + _OFFSETS * n
    for i, (pk, sig, msg) in enumerate(items):
        if len(pk) != 32 or len(sig) != 64:
            raise ValueError(f"entry {i}: pubkey must be 32 bytes and signature 64 bytes")
        pk_off = base + len(body)
        body += pk + sig + msg
        if base + len(body) > 0xFFFF:
            raise ValueError("Ed25519 instruction too long for u16 offsets")
        header += struct.pack(
            "<7H", pk_off + 32, THIS_INSTRUCTION, pk_off, THIS_INSTRUCTION, pk_off + _ENTRY,
            len(msg), THIS_INSTRUCTION,
        )  # fmt: skip
    return Instruction(ED25519_PROGRAM_ID, bytes(header + body), [])


def ed25519_instruction(pubkey: bytes, signature: bytes, message: bytes) -> Instruction:
    """Ed25519-program instruction verifying one ``signature`` of ``message`` by ``pubkey``
    (:func:`ed25519_multi_instruction` with one pair). ValueError on bad lengths."""
    return ed25519_multi_instruction([(pubkey, signature)], message)


def parse_ed25519_signatures(data: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """``[(pubkey, signature, message), ...]`` of an Ed25519 instruction whose offsets all
    point into itself, in entry order; ValueError otherwise (the checks the program makes)."""
    data = bytes(data)
    if len(data) < _HEADER or not 1 <= data[0] <= MAX_ED25519_SIGNATURES:
        raise ValueError("not an Ed25519 instruction with 1..16 signatures")
    n = data[0]
    if len(data) < _HEADER + _OFFSETS * n:
        raise ValueError("Ed25519 instruction shorter than its offsets")

    def take(off: int, size: int) -> bytes:
        if off + size > len(data):
            raise ValueError("Ed25519 offset out of bounds")
        return data[off : off + size]

    out = []
    for i in range(n):
        sig_off, sig_ix, pk_off, pk_ix, msg_off, msg_len, msg_ix = struct.unpack_from(
            "<7H", data, _HEADER + _OFFSETS * i
        )
        if {sig_ix, pk_ix, msg_ix} != {THIS_INSTRUCTION}:
            raise ValueError("Ed25519 offsets point at another instruction")
        out.append((take(pk_off, 32), take(sig_off, 64), take(msg_off, msg_len)))
    return out


def parse_ed25519_instruction(data: bytes) -> tuple[bytes, bytes, bytes]:
    """``(pubkey, signature, message)`` of a one-signature Ed25519 instruction whose offsets
    all point into itself; ValueError otherwise."""
    data = bytes(data)
    if len(data) < ED25519_DATA_START or data[0] != 1:
        raise ValueError("not a one-signature Ed25519 instruction")
    return parse_ed25519_signatures(data)[0]


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
    """``[Ed25519(worker, attesters...), settle]`` for one item (see the module docstring)."""
    if len(item.attestations) != len(accounts.extra_validators):
        raise ValueError(
            f"{len(item.attestations)} attestations but {len(accounts.extra_validators)} "
            "extra Validator accounts"
        )
    message = receipt_message_for(codec.program_id, accounts.market, item)
    signatures = [(bytes(item.worker_key), item.receipt_signature)]
    signatures += [(bytes(a.validator_authority), a.signature) for a in item.attestations]
    ixs = [ed25519_multi_instruction(signatures, message)]
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
                "fee_vault": accounts.fee_vault,
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
    market, validator, fee_vault, mint = (Pubkey.new_unique() for _ in range(4))
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
            fee_vault=fee_vault,
            payment_mint=mint,
            extra_validators=tuple(Pubkey.new_unique() for _ in attesters),
        )
        candidate = ixs + settle_instructions(codec, authority, item, accts)
        if transaction_size(candidate, authority) > PACKET_DATA_SIZE:
            return n
        ixs, n = candidate, n + 1
