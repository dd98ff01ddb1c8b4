"""Address lookup tables and v0 settle transactions: several jobs settled in one transaction.

A legacy ``settle`` transaction carries two quorum-1 items (one of quorum 2 or 3): each
item's Ed25519 instruction and its eleven-plus accounts at 32 bytes each fill the 1232-byte
packet. A v0 transaction names accounts held in an address lookup table (ALT) by a one-byte
index instead, so three quorum-1 items fit with the shared accounts in the table and four with
every account (``settle.max_settle_items_per_v0_tx``; validator/README.md, "Settlement cost",
has every measured variant).

Pure part (no I/O): the ALT program's ``create`` and ``extend`` instructions
(:func:`create_lookup_table_instruction`, :func:`extend_lookup_table_instruction`), the table
account and the SlotHashes sysvar decoded (:func:`decode_lookup_table`,
:func:`decode_slot_hashes`), settle items prepared once (:class:`PreparedSettle`) and packed into
as few v0 transactions as fit (:func:`pack_settle_items`, :func:`settle_v0_message`).

I/O part: :class:`LookupTables` over a :class:`gpu_market.client.GpuMarketClient`
(``client.lookup_tables``): fetch, create and extend a table, wait until new entries are
usable, prepare, pack and send v0 settle transactions.

Rules of the ALT program this module keeps (Agave ``address-lookup-table`` program):

* A table's address is derived from its authority and a *recent slot*, one present in the
  SlotHashes sysvar; one (authority, slot) pair makes one table.
* At most 256 addresses per table (:data:`LOOKUP_TABLE_MAX_ADDRESSES`); ``extend`` appends
  without removing duplicates, so callers extend only with addresses not yet in the table.
* Addresses appended in slot ``S`` are usable by transactions of slots ``> S`` only
  (:meth:`LookupTable.usable`); a transaction naming a newer entry fails to load.
* Invoked programs and signers are never loaded from a table: they stay static keys.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from solders.address_lookup_table_account import AddressLookupTableAccount
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction

from . import pda
from .constants import PACKET_DATA_SIZE, SYSTEM_PROGRAM_ID
from .errors import SdkError, TransactionTooLarge
from .settle import (
    SettleAccounts,
    SettleItem,
    max_settle_items_per_v0_tx,
    settle_table_addresses,
    v0_transaction_size,
)

__all__ = [
    "ADDRESS_LOOKUP_TABLE_PROGRAM_ID",
    "LOOKUP_TABLE_MAX_ADDRESSES",
    "LOOKUP_TABLE_META_SIZE",
    "MAX_EXTEND_ADDRESSES_PER_TX",
    "SLOT_HASHES_SYSVAR_ID",
    "LookupTable",
    "LookupTables",
    "PreparedSettle",
    "close_lookup_table_instruction",
    "create_lookup_table_instruction",
    "deactivate_lookup_table_instruction",
    "decode_lookup_table",
    "decode_slot_hashes",
    "derive_lookup_table_address",
    "extend_lookup_table_instruction",
    "pack_settle_items",
    "prepare_settle",
    "settle_v0_message",
]

ADDRESS_LOOKUP_TABLE_PROGRAM_ID = Pubkey.from_string("AddressLookupTab1e1111111111111111111111111")
SLOT_HASHES_SYSVAR_ID = Pubkey.from_string("SysvarS1otHashes111111111111111111111111111")
LOOKUP_TABLE_META_SIZE = 56
"""Bytes before the first address of a table account."""
LOOKUP_TABLE_MAX_ADDRESSES = 256
MAX_EXTEND_ADDRESSES_PER_TX = 30
"""Addresses one ``extend`` transaction carries (authority = payer, one signature); 31 would
exceed the packet (pinned by the tests)."""
_U64_MAX = 2**64 - 1
_OPEN_GROUPS = 4
_CREATE, _EXTEND, _DEACTIVATE, _CLOSE = 0, 2, 3, 4
_LOOKUP_TABLE_STATE = 1


def derive_lookup_table_address(authority: Pubkey, recent_slot: int) -> tuple[Pubkey, int]:
    """``(address, bump)`` of the table ``authority`` creates with ``recent_slot``."""
    return Pubkey.find_program_address(
        [bytes(authority), struct.pack("<Q", recent_slot)], ADDRESS_LOOKUP_TABLE_PROGRAM_ID
    )


def create_lookup_table_instruction(
    authority: Pubkey, payer: Pubkey, recent_slot: int
) -> tuple[Instruction, Pubkey]:
    """``(CreateLookupTable instruction, table address)``. ``recent_slot`` must be in the
    SlotHashes sysvar when it executes; ``payer`` funds the table's rent. The authority is
    marked a signer (older program versions require it; it is the payer here anyway)."""
    table, bump = derive_lookup_table_address(authority, recent_slot)
    data = struct.pack("<IQB", _CREATE, recent_slot, bump)
    metas = [
        AccountMeta(table, False, True),
        AccountMeta(authority, True, False),
        AccountMeta(payer, True, True),
        AccountMeta(SYSTEM_PROGRAM_ID, False, False),
    ]
    return Instruction(ADDRESS_LOOKUP_TABLE_PROGRAM_ID, data, metas), table


def extend_lookup_table_instruction(
    table: Pubkey, authority: Pubkey, payer: Pubkey, addresses: Sequence[Pubkey]
) -> Instruction:
    """ExtendLookupTable appending ``addresses`` (1..``MAX_EXTEND_ADDRESSES_PER_TX`` in one
    transaction; ValueError on none), ``payer`` funding the extra rent."""
    if not addresses:
        raise ValueError("extend needs at least one address")
    data = struct.pack("<IQ", _EXTEND, len(addresses)) + b"".join(bytes(a) for a in addresses)
    metas = [
        AccountMeta(table, False, True),
        AccountMeta(authority, True, False),
        AccountMeta(payer, True, True),
        AccountMeta(SYSTEM_PROGRAM_ID, False, False),
    ]
    return Instruction(ADDRESS_LOOKUP_TABLE_PROGRAM_ID, data, metas)


def deactivate_lookup_table_instruction(table: Pubkey, authority: Pubkey) -> Instruction:
    """DeactivateLookupTable: no transaction can load ``table`` from the next slot on; it
    can be closed once the deactivation slot has left the SlotHashes sysvar (512 slots)."""
    metas = [AccountMeta(table, False, True), AccountMeta(authority, True, False)]
    return Instruction(ADDRESS_LOOKUP_TABLE_PROGRAM_ID, struct.pack("<I", _DEACTIVATE), metas)


def close_lookup_table_instruction(table: Pubkey, authority: Pubkey, recipient: Pubkey) -> Instruction:
    """CloseLookupTable: the deactivated ``table``'s rent goes to ``recipient``. Fails while
    the table is active or still deactivating."""
    metas = [AccountMeta(table, False, True), AccountMeta(authority, True, False),
             AccountMeta(recipient, False, True)]
    return Instruction(ADDRESS_LOOKUP_TABLE_PROGRAM_ID, struct.pack("<I", _CLOSE), metas)


@dataclass(frozen=True)
class LookupTable:
    """A decoded table account. ``deactivation_slot`` is ``2**64 - 1`` while active;
    ``addresses[last_extended_slot_start_index:]`` were appended in ``last_extended_slot``."""

    address: Pubkey
    authority: Pubkey | None
    deactivation_slot: int
    last_extended_slot: int
    last_extended_slot_start_index: int
    addresses: tuple[Pubkey, ...]

    @property
    def is_active(self) -> bool:
        return self.deactivation_slot == _U64_MAX

    @property
    def room(self) -> int:
        """How many more addresses the table can take."""
        return max(0, LOOKUP_TABLE_MAX_ADDRESSES - len(self.addresses))

    def usable(self, slot: int) -> tuple[Pubkey, ...]:
        """The addresses a transaction executing in ``slot`` can load: all of them once
        ``slot > last_extended_slot``, else those appended before that slot; none when the
        table is deactivated."""
        if not self.is_active:
            return ()
        if slot > self.last_extended_slot:
            return self.addresses
        return self.addresses[: self.last_extended_slot_start_index]

    def account(self, slot: int) -> AddressLookupTableAccount:
        """The table as ``MessageV0.try_compile`` takes it, limited to :meth:`usable` (a
        prefix, so every index stays the table's own)."""
        return AddressLookupTableAccount(self.address, list(self.usable(slot)))


def decode_lookup_table(address: Pubkey, data: bytes) -> LookupTable:
    """The table at ``address`` from its account ``data``; ValueError if it is not an
    initialized lookup table (wrong state tag, truncated meta, or a partial address)."""
    data = bytes(data)
    if len(data) < LOOKUP_TABLE_META_SIZE:
        raise ValueError(f"{address}: {len(data)} bytes is shorter than a lookup table's meta")
    state, deactivation, extended, start, has_authority = struct.unpack_from("<IQQBB", data)
    if state != _LOOKUP_TABLE_STATE:
        raise ValueError(f"{address} is not an initialized lookup table (state {state})")
    if has_authority not in (0, 1):
        raise ValueError(f"{address}: bad authority tag {has_authority}")
    authority = Pubkey.from_bytes(data[22:54]) if has_authority else None
    body = data[LOOKUP_TABLE_META_SIZE:]
    if len(body) % 32:
        raise ValueError(f"{address}: {len(body)} address bytes is not a multiple of 32")
    addresses = tuple(Pubkey.from_bytes(body[i : i + 32]) for i in range(0, len(body), 32))
    return LookupTable(address, authority, deactivation, extended, start, addresses)


def decode_slot_hashes(data: bytes) -> list[tuple[int, bytes]]:
    """``[(slot, hash), ...]`` of the SlotHashes sysvar's data, newest first as stored;
    ValueError when truncated."""
    data = bytes(data)
    if len(data) < 8:
        raise ValueError("SlotHashes data shorter than its length prefix")
    (n,) = struct.unpack_from("<Q", data)
    if len(data) < 8 + 40 * n:
        raise ValueError(f"SlotHashes claims {n} entries but holds {(len(data) - 8) // 40}")
    return [(struct.unpack_from("<Q", data, 8 + 40 * i)[0], data[16 + 40 * i : 48 + 40 * i])
            for i in range(n)]  # fmt: skip


@dataclass(frozen=True)
class PreparedSettle:
    """One SettleItem with its two instructions ``[Ed25519, settle]`` built once, and the
    accounts a lookup table can hold for it (``settle.settle_table_addresses``): ``shared``
    (market-wide, provider, attesters) and ``own`` (job, escrow)."""

    item: SettleItem
    instructions: tuple[Instruction, Instruction]
    shared: tuple[Pubkey, ...]
    own: tuple[Pubkey, ...]

    @property
    def job(self) -> Pubkey:
        return self.item.job


def prepare_settle(
    codec: Any, validator_authority: Pubkey, item: SettleItem, accounts: SettleAccounts
) -> PreparedSettle:
    """:class:`PreparedSettle` of ``item`` (pure; ``accounts`` read by the caller)."""
    from .settle import settle_instructions

    ed, settle = settle_instructions(codec, validator_authority, item, accounts)
    shared, own = settle_table_addresses(item, accounts)
    return PreparedSettle(item, (ed, settle), shared, own)


def settle_v0_message(
    payer: Pubkey,
    prepared: Sequence[PreparedSettle],
    tables: Sequence[AddressLookupTableAccount],
    blockhash: Hash,
) -> MessageV0:
    """The v0 message settling ``prepared`` in order (``[Ed25519, settle]`` per item), every
    account found in ``tables`` loaded from them. ValueError when a job appears twice: each
    job is settled at most once per transaction."""
    jobs = [bytes(p.job) for p in prepared]
    if len(set(jobs)) != len(jobs):
        raise ValueError("a job appears twice: settle each job at most once per transaction")
    ixs = [ix for p in prepared for ix in p.instructions]
    return MessageV0.try_compile(payer, ixs, list(tables), blockhash)


def pack_settle_items(
    payer: Pubkey,
    prepared: Sequence[PreparedSettle],
    tables: Sequence[AddressLookupTableAccount],
    limit: int = PACKET_DATA_SIZE,
) -> list[list[int]]:
    """Indices of ``prepared`` grouped into v0 transactions, in order: each group's signed
    transaction is at most ``limit`` bytes (measured, not estimated) and names each job at
    most once, and an item of a job that appeared earlier in ``prepared`` goes into a later
    group than that one (sent in group order, a job's receipts land in their order). An item
    goes into the first of the last ``_OPEN_GROUPS`` groups it may join and fits (first fit
    over a bounded window, so mixed quorums share transactions and packing stays linear in
    the number of items). An item too large even alone gets a group of its own (sending it
    raises TransactionTooLarge). Groups keep the order of ``prepared`` inside them."""
    groups: list[list[int]] = []
    contents: list[list[Instruction]] = []
    last_group: dict[bytes, int] = {}
    for i, p in enumerate(prepared):
        job = bytes(p.job)
        first = max(len(groups) - _OPEN_GROUPS, last_group.get(job, -1) + 1, 0)
        for g in range(first, len(groups)):
            candidate = contents[g] + list(p.instructions)
            if v0_transaction_size(candidate, payer, tables) <= limit:
                groups[g].append(i)
                contents[g] = candidate
                last_group[job] = g
                break
        else:
            groups.append([i])
            contents.append(list(p.instructions))
            last_group[job] = len(groups) - 1
    return groups


class LookupTables:
    """Lookup tables and v0 settle transactions through ``client`` (a GpuMarketClient).

    Every write waits for the client's commitment and raises what ``client.send`` raises
    (``GpuMarketError`` / ``ChainError`` / ``RpcUnavailable`` / ``TransactionTooLarge``).
    """

    def __init__(self, client: Any) -> None:  # a GpuMarketClient (no import: no cycle)
        self.client = client
        self._capacity: dict[tuple[int, bool], int] = {}

    # ------------------------------------------------------------------ reads

    def slot(self) -> int:
        """The node's current slot at the client's commitment."""
        return int(self.client._call(self.client.rpc.get_slot).value)

    def fetch(self, table: Pubkey) -> LookupTable | None:
        """The table at ``table``, or None when no account is there. ValueError when the
        account is not a lookup table (another owner, or not initialized)."""
        info = self.client.account_info(table)
        if info is None:
            return None
        owner, data = info
        if owner != ADDRESS_LOOKUP_TABLE_PROGRAM_ID:
            raise ValueError(f"{table} is not a lookup table (owner {owner})")
        return decode_lookup_table(table, data)

    def free_recent_slot(self, authority: Pubkey) -> tuple[int, Pubkey]:
        """``(recent_slot, table address)``: the newest slot of the SlotHashes sysvar for
        which ``authority`` has no table yet. SdkError when every listed slot is taken (the
        sysvar lists the last 512 slots; gpum-localnet keeps it as a cluster does)."""
        info = self.client.account_info(SLOT_HASHES_SYSVAR_ID)
        if info is None:
            raise SdkError("the node has no SlotHashes sysvar; cannot create a lookup table")
        entries = decode_slot_hashes(info[1])
        candidates = [(slot, derive_lookup_table_address(authority, slot)[0]) for slot, _ in entries]
        taken = self.client._account_infos([addr for _, addr in candidates])
        for (slot, addr), existing in zip(candidates, taken):
            if existing is None:
                return slot, addr
        raise SdkError(
            f"{authority} already has a lookup table for every recent slot "
            f"({len(entries)} listed in SlotHashes); try again after the next slot"
        )

    # ------------------------------------------------------------------ writes

    def create(self, authority: Keypair, recent_slot: int) -> Signature:
        """Create ``authority``'s table for ``recent_slot`` (address:
        :func:`derive_lookup_table_address`), ``authority`` paying the rent and the fee."""
        ix, _ = create_lookup_table_instruction(authority.pubkey(), authority.pubkey(), recent_slot)
        return self.client.send([ix], [authority])

    def deactivate(self, authority: Keypair, table: Pubkey) -> Signature:
        """Deactivate ``authority``'s ``table`` (:func:`deactivate_lookup_table_instruction`)."""
        return self.client.send([deactivate_lookup_table_instruction(table, authority.pubkey())],
                                [authority])

    def close(self, authority: Keypair, table: Pubkey) -> Signature:
        """Close ``authority``'s deactivated ``table``, its rent back to ``authority``
        (:func:`close_lookup_table_instruction`); a program error while it is deactivating."""
        ix = close_lookup_table_instruction(table, authority.pubkey(), authority.pubkey())
        return self.client.send([ix], [authority])

    def extend(self, authority: Keypair, table: Pubkey, addresses: Iterable[Pubkey]) -> list[Signature]:
        """Append those of ``addresses`` the table does not hold yet (read first, so a repeat
        after a crash adds nothing twice), ``MAX_EXTEND_ADDRESSES_PER_TX`` per transaction,
        ``authority`` paying. Returns the signatures (empty when nothing was missing).
        ValueError when the table does not exist or the new addresses exceed its room."""
        current = self.fetch(table)
        if current is None:
            raise ValueError(f"lookup table {table} does not exist")
        have = set(current.addresses)
        new = [a for a in dict.fromkeys(addresses) if a not in have]
        if len(new) > current.room:
            raise ValueError(f"{len(new)} new addresses but table {table} has room for {current.room}")
        sigs = []
        for i in range(0, len(new), MAX_EXTEND_ADDRESSES_PER_TX):
            chunk = new[i : i + MAX_EXTEND_ADDRESSES_PER_TX]
            ix = extend_lookup_table_instruction(table, authority.pubkey(), authority.pubkey(), chunk)
            sigs.append(self.client.send([ix], [authority]))
        return sigs

    def wait_usable(self, table: Pubkey, timeout: float = 5.0, poll: float = 0.1) -> LookupTable:
        """The table once every address in it is usable (the node's slot passed its
        ``last_extended_slot``), or as it is after ``timeout`` seconds (check
        :meth:`LookupTable.usable`). ValueError when it does not exist."""
        deadline = time.monotonic() + timeout
        while True:
            current = self.fetch(table)
            if current is None:
                raise ValueError(f"lookup table {table} does not exist")
            if self.slot() > current.last_extended_slot or time.monotonic() >= deadline:
                return current
            time.sleep(poll)

    # ------------------------------------------------------------------ settle

    def prepare(self, validator_authority: Pubkey, items: Sequence[SettleItem]) -> list[PreparedSettle]:
        """Each item's instructions and table accounts, reading jobs, providers and markets
        once for all (``client.settle_instructions``, with its ValueError for a submitter or
        attester off the committee or a wrong number of attestations; AccountNotFound for a
        closed job)."""
        if not items:
            return []
        ixs = self.client.settle_instructions(validator_authority, items)
        out = []
        for n, item in enumerate(items):
            ed, settle = ixs[2 * n], ixs[2 * n + 1]
            # settle's accounts: authority, market, validator, provider, job, escrow,
            # provider_payment_account, fee_vault, payment_mint, instructions, token, extras...
            keys = [m.pubkey for m in settle.accounts]
            accounts = SettleAccounts(
                market=keys[1], validator=keys[2], provider=keys[3], escrow=keys[5],
                provider_payment_account=keys[6], fee_vault=keys[7], payment_mint=keys[8],
                extra_validators=tuple(keys[11:]),
            )  # fmt: skip
            if keys[4] != item.job or keys[5] != pda.escrow_pda(item.job, self.client.program_id):
                raise ValueError("the settle accounts are not in the layout lookup_tables.prepare "
                                 "reads (job 5th, escrow 6th); update it with the IDL")
            shared, own = settle_table_addresses(item, accounts)
            out.append(PreparedSettle(item, (ed, settle), shared, own))
        return out

    def max_items_per_tx(self, quorum: int, own_accounts_in_table: bool) -> int:
        """How many settlements of jobs with this ``quorum`` always fit one v0 transaction
        whose tables hold the shared accounts (and the jobs' own, if
        ``own_accounts_in_table``): :func:`gpu_market.settle.max_settle_items_per_v0_tx`,
        worst case. A packed group smaller than this has room for another such item."""
        key = (quorum, own_accounts_in_table)
        if key not in self._capacity:
            self._capacity[key] = max_settle_items_per_v0_tx(
                self.client.codec, quorum, own_accounts_in_table=own_accounts_in_table)
        return self._capacity[key]

    def pack(
        self, payer: Pubkey, prepared: Sequence[PreparedSettle], tables: Sequence[LookupTable], slot: int
    ) -> list[list[int]]:
        """:func:`pack_settle_items` with the entries of ``tables`` usable in ``slot``."""
        return pack_settle_items(payer, prepared, [t.account(slot) for t in tables])

    def send_settle(
        self,
        validator_authority: Keypair,
        prepared: Sequence[PreparedSettle],
        tables: Sequence[LookupTable],
        slot: int | None = None,
    ) -> Signature:
        """Settle ``prepared`` in one v0 transaction, loading every account the ``tables``
        hold usable at ``slot`` (default: the node's current slot; a later execution slot
        only makes more entries usable). TransactionTooLarge (nothing sent) if it exceeds
        the packet; ValueError if a job appears twice or ``prepared`` is empty."""
        if not prepared:
            raise ValueError("send_settle needs at least one prepared item")
        payer = validator_authority.pubkey()
        at = self.slot() if slot is None else slot
        accounts = [t.account(at) for t in tables]
        msg = settle_v0_message(payer, prepared, accounts, Hash.default())
        size = len(bytes(VersionedTransaction.populate(msg, [Signature.default()])))
        if size > PACKET_DATA_SIZE:
            raise TransactionTooLarge(
                f"v0 settle of {len(prepared)} item(s) is {size} bytes, over the "
                f"{PACKET_DATA_SIZE}-byte packet; send fewer items (pack_settle_items)"
            )
        msg = settle_v0_message(payer, prepared, accounts, self.client._latest_blockhash())
        return self.client._send_raw(VersionedTransaction(msg, [validator_authority]))

    def settle(
        self, validator_authority: Keypair, items: Sequence[SettleItem], tables: Sequence[LookupTable]
    ) -> Signature:
        """:meth:`prepare` then :meth:`send_settle`: ``items`` in one v0 transaction."""
        return self.send_settle(validator_authority, self.prepare(validator_authority.pubkey(), items), tables)
