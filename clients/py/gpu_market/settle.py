"""Settle transactions: one Ed25519-program instruction + ``settle`` per item (pure: no I/O).

How many items fit one transaction: :func:`max_settle_items_per_tx` (legacy) and
:func:`max_settle_items_per_v0_tx` (v0, non-program accounts from an address lookup table;
:func:`v0_transaction_size`; the tables themselves and the packing of many items live in
:mod:`gpu_market.lookup_tables`). The validator README's *Settlement cost* has the table.

For each :class:`SettleItem` the transaction carries, in order::

    Ed25519(worker key, attester 1, ..., attester q-1; ONE copy of the attestation message)
    settle(receipt, approved_seconds)   attesters' Validator PDAs as writable remaining accounts

The attestation message is ``sha256(receipt_message) || approved_seconds:u64le`` (40 bytes,
:func:`gpu_market.receipt.attestation_message`). The Ed25519 instruction holds it once; entry 0
is the worker's signature over its first 32 bytes (the receipt digest), entries 1..q-1 are
the other committee members' signatures over all 40 bytes (the submitter's transaction
signature is its own attestation). Every offset points inside that same instruction
(instruction index 0xFFFF), byte for byte
``program-tests/tests/common/mod.rs::ed25519_settle_ix``::

    [n, 0, n x (sig_off:u16, 0xFFFF, pk_off:u16, 0xFFFF, msg_off:u16, msg_len:u16, 0xFFFF)]
    + n x pubkey(32) + n x signature(64) + message

For ``n = 1`` this is also ``ed25519_ix_raw`` (``pk_off=16``, ``sig_off=48``, ``msg_off=112``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from solders.address_lookup_table_account import AddressLookupTableAccount
from solders.hash import Hash
from solders.instruction import Instruction
from solders.message import Message, MessageV0
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import Transaction, VersionedTransaction

from .constants import (
    ED25519_PROGRAM_ID,
    INSTRUCTIONS_SYSVAR_ID,
    PACKET_DATA_SIZE,
    TOKEN_PROGRAM_ID,
)
from .instructions.settle import settle_ix

__all__ = [
    "ED25519_DATA_START",
    "THIS_INSTRUCTION",
    "Attestation",
    "SettleAccounts",
    "SettleItem",
    "attestation_message_for",
    "ed25519_entries_instruction",
    "ed25519_instruction",
    "ed25519_multi_instruction",
    "ed25519_settle_instruction",
    "max_settle_items_per_tx",
    "max_settle_items_per_v0_tx",
    "parse_ed25519_instruction",
    "parse_ed25519_signatures",
    "receipt_args",
    "receipt_message_for",
    "settle_instructions",
    "settle_table_addresses",
    "transaction_size",
    "v0_transaction_size",
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
    """A committee member's Ed25519 signature over the attestation message of a settlement
    (``receipt_digest || approved_seconds``; :func:`gpu_market.receipt.attestation_signature`),
    by its validator ``authority``."""

    authority: Pubkey
    signature: bytes


@dataclass(frozen=True)
class SettleItem:
    """One signed window receipt of ``job`` and the cumulative seconds the committee approves
    for the job up to it.

    ``receipt_signature`` is the worker key's Ed25519 signature over the receipt digest, the
    sha256 of the receipt message (``gpu_market.receipt.sign_receipt``). ``approved_seconds`` is the job's approved
    cumulative total (the program pays ``approved_seconds - job.paid_seconds``; it must lie
    between ``job.paid_seconds`` and ``cumulative_seconds``, and within the wall-time bound).
    ``attestations`` are the
    ``terms.quorum - 1`` other committee members' signatures over the attestation message; they
    follow the worker's signature in the Ed25519 instruction, and their Validator PDAs are the
    remaining accounts, in this order.
    """

    job: Pubkey
    seq: int
    cumulative_seconds: int
    window_end: int
    proof_hash: bytes
    worker_key: Pubkey
    receipt_signature: bytes
    approved_seconds: int
    attestations: Sequence[Attestation] = field(default=())


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


def _shared_message_instruction(entries: Sequence[tuple[bytes, bytes, int]], message: bytes) -> Instruction:
    """``(pubkey, signature, signed_len)`` entries over prefixes of one copy of ``message``."""
    n = len(entries)
    if not 1 <= n <= MAX_ED25519_SIGNATURES:
        raise ValueError(f"an Ed25519 instruction here carries 1..{MAX_ED25519_SIGNATURES} "
                         f"signatures, got {n}")  # fmt: skip
    for i, (pk, sig, _) in enumerate(entries):
        if len(pk) != 32:
            raise ValueError(f"pubkey {i} must be 32 bytes, got {len(pk)}")
        if len(sig) != 64:
            raise ValueError(f"signature {i} must be 64 bytes, got {len(sig)}")
    header_len = _HEADER + _OFFSETS * n
    msg_off = header_len + _ENTRY * n
    if msg_off + len(message) > 0xFFFF:
        raise ValueError(f"message of {len(message)} bytes is too long")
    data = bytearray([n, 0])
    for i, (_, _, signed_len) in enumerate(entries):
        pk_off, sig_off = header_len + 32 * i, header_len + 32 * n + 64 * i
        data += struct.pack("<7H", sig_off, THIS_INSTRUCTION, pk_off, THIS_INSTRUCTION, msg_off,
                            signed_len, THIS_INSTRUCTION)  # fmt: skip
    data += b"".join(pk for pk, _, _ in entries) + b"".join(sig for _, sig, _ in entries)
    return Instruction(ED25519_PROGRAM_ID, bytes(data + message), [])


def ed25519_multi_instruction(
    signatures: Sequence[tuple[bytes | Pubkey, bytes]], message: bytes
) -> Instruction:
    """Ed25519-program instruction verifying every ``(pubkey, signature)`` over ``message``.

    One copy of ``message`` sits at the end, after all pubkeys and then all signatures; every
    entry's offsets point into this same instruction (``common/mod.rs::ed25519_multi_ix``).
    Raises ValueError on no signatures, more than ``MAX_ED25519_SIGNATURES``, a key that is not
    32 bytes, a signature that is not 64 bytes, or offsets beyond u16.
    """
    msg = bytes(message)
    return _shared_message_instruction([(bytes(pk), bytes(sig), len(msg)) for pk, sig in signatures], msg)


def ed25519_settle_instruction(
    worker_key: bytes | Pubkey,
    receipt_signature: bytes,
    attestations: Sequence[tuple[bytes | Pubkey, bytes]],
    attestation_message: bytes,
) -> Instruction:
    """The Ed25519 instruction before ``settle``: one copy of ``attestation_message`` (40
    bytes); entry 0 the worker's ``receipt_signature`` over its first 32 bytes (the receipt
    message), then one entry per ``(authority, signature)`` over all of it. ValueError on bad
    lengths (``common/mod.rs::ed25519_settle_ix``, byte for byte)."""
    from .receipt import ATTESTATION_MESSAGE_LEN, RECEIPT_DIGEST_LEN

    msg = bytes(attestation_message)
    if len(msg) != ATTESTATION_MESSAGE_LEN:
        raise ValueError(f"attestation_message must be {ATTESTATION_MESSAGE_LEN} bytes, got {len(msg)}")
    entries = [(bytes(worker_key), bytes(receipt_signature), RECEIPT_DIGEST_LEN)]
    entries += [(bytes(pk), bytes(sig), len(msg)) for pk, sig in attestations]
    return _shared_message_instruction(entries, msg)


def ed25519_entries_instruction(
    entries: Sequence[tuple[bytes | Pubkey, bytes, bytes]],
) -> Instruction:
    """Ed25519-program instruction verifying each ``(pubkey, signature, message)`` entry, each
    message stored with its entry, every offset pointing into this same instruction (the layout
    ``slash_equivocation`` and ``slash_validator_equivocation`` expect for their two pieces of
    evidence). A pubkey repeated by later entries is stored once (32 bytes saved per repeat,
    which keeps a validator-equivocation slash inside one packet). ValueError on bad lengths."""
    items = [(bytes(pk), bytes(sig), bytes(msg)) for pk, sig, msg in entries]
    n = len(items)
    if not 1 <= n <= MAX_ED25519_SIGNATURES:
        raise ValueError(f"an Ed25519 instruction here carries 1..{MAX_ED25519_SIGNATURES} "
                         f"signatures, got {n}")  # fmt: skip
    header = bytearray([n, 0])
    body = bytearray()
    base = _HEADER + _OFFSETS * n
    stored: dict[bytes, int] = {}
    for i, (pk, sig, msg) in enumerate(items):
        if len(pk) != 32 or len(sig) != 64:
            raise ValueError(f"entry {i}: pubkey must be 32 bytes and signature 64 bytes")
        if pk not in stored:
            stored[pk] = base + len(body)
            body += pk
        sig_off = base + len(body)
        body += sig + msg
        if base + len(body) > 0xFFFF:
            raise ValueError("Ed25519 instruction too long for u16 offsets")
        header += struct.pack(
            "<7H", sig_off, THIS_INSTRUCTION, stored[pk], THIS_INSTRUCTION, sig_off + 64,
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


_RECEIPT_FIELDS = ("seq", "cumulative_seconds", "window_end", "proof_hash")


def receipt_args(receipt: Any) -> dict[str, Any]:
    """The ``Receipt`` instruction argument of a receipt-like object (attributes) or mapping
    (keys) with ``seq``, ``cumulative_seconds``, ``window_end``, ``proof_hash`` (e.g. a
    SettleItem); ValueError naming what is missing or a proof_hash that is not 32 bytes."""
    get = receipt.__getitem__ if isinstance(receipt, Mapping) else lambda k: getattr(receipt, k)
    try:
        seq, cumulative, window_end, proof_hash = (get(k) for k in _RECEIPT_FIELDS)
    except (KeyError, AttributeError) as e:
        raise ValueError(f"a receipt needs {', '.join(_RECEIPT_FIELDS)} (missing {e})") from None
    proof_hash = bytes(proof_hash)
    if len(proof_hash) != 32:
        raise ValueError(f"proof_hash must be 32 bytes, got {len(proof_hash)}")
    return {
        "seq": int(seq),
        "cumulative_seconds": int(cumulative),
        "window_end": int(window_end),
        "proof_hash": list(proof_hash),
    }


def receipt_message_for(program_id: Pubkey, market: Pubkey, item: SettleItem) -> bytes:
    """The receipt bytes (docs/protocol.md, "Receipts and window proofs") that ``item``'s worker signature covers."""
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


def attestation_message_for(program_id: Pubkey, market: Pubkey, item: SettleItem) -> bytes:
    """The attestation bytes (receipt message || approved_seconds) ``item``'s attestations cover."""
    from .receipt import attestation_message

    return attestation_message(receipt_message_for(program_id, market, item), item.approved_seconds)


def settle_instructions(
    codec,  # gpu_market.codec.Codec
    validator_authority: Pubkey,
    item: SettleItem,
    accounts: SettleAccounts,
) -> list[Instruction]:
    """``[Ed25519(worker, attesters...), settle]`` for one item (see the module docstring;
    the ``settle`` itself is :func:`gpu_market.instructions.settle_ix`)."""
    if len(item.attestations) != len(accounts.extra_validators):
        raise ValueError(
            f"{len(item.attestations)} attestations but {len(accounts.extra_validators)} "
            "extra Validator accounts"
        )
    message = attestation_message_for(codec.program_id, accounts.market, item)
    attesters = [(bytes(a.authority), bytes(a.signature)) for a in item.attestations]
    return [
        ed25519_settle_instruction(item.worker_key, item.receipt_signature, attesters, message),
        settle_ix(codec, validator_authority, item, accounts),
    ]


def transaction_size(instructions: Sequence[Instruction], payer: Pubkey) -> int:
    """Serialized size in bytes of a legacy transaction with these instructions."""
    msg = Message.new_with_blockhash(list(instructions), payer, Hash.default())
    return len(bytes(Transaction.new_unsigned(msg)))


def v0_transaction_size(
    instructions: Sequence[Instruction],
    payer: Pubkey,
    tables: Sequence[AddressLookupTableAccount] = (),
) -> int:
    """Serialized size in bytes of a signed v0 transaction with these instructions, every
    account found in ``tables`` (that is neither a signer nor an invoked program) loaded from
    them (``MessageV0.try_compile``)."""
    msg = MessageV0.try_compile(payer, list(instructions), list(tables), Hash.default())
    sigs = [Signature.default()] * msg.header.num_required_signatures
    return len(bytes(VersionedTransaction.populate(msg, sigs)))


def settle_table_addresses(
    item: SettleItem, accounts: SettleAccounts
) -> tuple[tuple[Pubkey, ...], tuple[Pubkey, ...]]:
    """``(shared, own)``: the accounts of ``item``'s ``settle`` a lookup table can hold.

    ``shared`` are those other settlements of the market reuse (market, the submitter's
    Validator PDA, fee vault, payment mint, the Instructions sysvar, the Token program, the
    provider and its payment account, the attesters' Validator PDAs); ``own`` are the job's
    (job, escrow). Signers and invoked programs (gpu_market, Ed25519) can never come from a
    table and are not listed."""
    shared = (
        accounts.market,
        accounts.validator,
        accounts.fee_vault,
        accounts.payment_mint,
        INSTRUCTIONS_SYSVAR_ID,
        TOKEN_PROGRAM_ID,
        accounts.provider,
        accounts.provider_payment_account,
        *accounts.extra_validators,
    )
    return shared, (item.job, accounts.escrow)


def _worst_case_items(quorum: int) -> Iterator[tuple[SettleItem, SettleAccounts]]:
    """Items of one market that share nothing but the market's accounts: a different job,
    provider, payment account and attesters each."""
    if quorum < 1:
        raise ValueError("quorum must be at least 1")
    market, validator, fee_vault, mint = (Pubkey.new_unique() for _ in range(4))
    while True:
        attesters = tuple(Attestation(Pubkey.new_unique(), bytes(64)) for _ in range(quorum - 1))
        item = SettleItem(Pubkey.new_unique(), 1, 1, 1, bytes(32), Pubkey.new_unique(), bytes(64), 1,
                          attesters)  # fmt: skip
        yield item, SettleAccounts(
            market=market,
            validator=validator,
            provider=Pubkey.new_unique(),
            escrow=Pubkey.new_unique(),
            provider_payment_account=Pubkey.new_unique(),
            fee_vault=fee_vault,
            payment_mint=mint,
            extra_validators=tuple(Pubkey.new_unique() for _ in attesters),
        )


def max_settle_items_per_tx(codec, quorum: int = 1) -> int:
    """How many SettleItems of one market always fit in one transaction, for jobs of this
    ``quorum`` (``terms.quorum``).

    Worst case within a market: every item has a different job, provider and payment account,
    and distinct attesters; the validator authority is the only signer (it pays the fee).
    """
    authority = Pubkey.new_unique()
    n = 0
    ixs: list[Instruction] = []
    for item, accts in _worst_case_items(quorum):
        candidate = ixs + settle_instructions(codec, authority, item, accts)
        if transaction_size(candidate, authority) > PACKET_DATA_SIZE:
            return n
        ixs, n = candidate, n + 1
    raise AssertionError("unreachable")  # pragma: no cover


def max_settle_items_per_v0_tx(codec, quorum: int = 1, *, own_accounts_in_table: bool = True) -> int:
    """How many SettleItems of one market always fit in one v0 transaction whose lookup table
    holds every item's shared accounts (:func:`settle_table_addresses`) and, with
    ``own_accounts_in_table``, each job's own (job, escrow) too.

    Same worst case as :func:`max_settle_items_per_tx`. Measured (validator/README.md,
    "Settlement cost"): 4 / 2 / 2 for quorum 1 / 2 / 3 with the jobs' own accounts in the
    table, 3 / 2 / 1 without; the Ed25519 instruction (152 bytes at quorum 1) and the two own
    accounts (64 bytes as static keys) dominate an item.
    """
    authority = Pubkey.new_unique()
    n = 0
    ixs: list[Instruction] = []
    addresses: list[Pubkey] = []
    table = Pubkey.new_unique()
    for item, accts in _worst_case_items(quorum):
        shared, own = settle_table_addresses(item, accts)
        more = [*addresses, *shared, *(own if own_accounts_in_table else ())]
        candidate = ixs + settle_instructions(codec, authority, item, accts)
        tables = [AddressLookupTableAccount(table, list(dict.fromkeys(more)))]
        if v0_transaction_size(candidate, authority, tables) > PACKET_DATA_SIZE:
            return n
        ixs, addresses, n = candidate, more, n + 1
    raise AssertionError("unreachable")  # pragma: no cover
