"""Address lookup tables and v0 settle transactions (gpu_market.lookup_tables, pure parts):
the ALT program's instructions and accounts, usability of new entries, and the packing of
many settle items into as few v0 transactions as fit the packet."""

from __future__ import annotations

import struct

import pytest
from gpu_market.constants import (
    INSTRUCTIONS_SYSVAR_ID,
    PACKET_DATA_SIZE,
    SYSTEM_PROGRAM_ID,
    TOKEN_PROGRAM_ID,
)
from gpu_market.lookup_tables import (
    ADDRESS_LOOKUP_TABLE_PROGRAM_ID,
    LOOKUP_TABLE_META_SIZE,
    MAX_EXTEND_ADDRESSES_PER_TX,
    LookupTable,
    create_lookup_table_instruction,
    decode_lookup_table,
    decode_slot_hashes,
    derive_lookup_table_address,
    extend_lookup_table_instruction,
    pack_settle_items,
    prepare_settle,
    settle_v0_message,
)
from gpu_market.settle import (
    Attestation,
    SettleAccounts,
    SettleItem,
    max_settle_items_per_tx,
    max_settle_items_per_v0_tx,
    settle_table_addresses,
    transaction_size,
    v0_transaction_size,
)
from solders.address_lookup_table_account import AddressLookupTable, AddressLookupTableAccount
from solders.address_lookup_table_account import derive_lookup_table_address as solders_derive
from solders.hash import Hash
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import VersionedTransaction

U64_MAX = 2**64 - 1
AUTHORITY = Pubkey(bytes([30] * 32))
MARKET, VALIDATOR, FEE_VAULT, MINT = (Pubkey(bytes([i] * 32)) for i in (10, 11, 15, 16))


def table_bytes(addresses, *, authority=AUTHORITY, deactivation=U64_MAX, extended=0, start=0,
                state=1) -> bytes:
    meta = struct.pack("<IQQB", state, deactivation, extended, start)
    meta += (b"\x01" + bytes(authority)) if authority is not None else b"\x00" + bytes(32)
    meta += bytes(2)
    assert len(meta) == LOOKUP_TABLE_META_SIZE
    return meta + b"".join(bytes(a) for a in addresses)


def item_and_accounts(n: int, quorum: int = 1, provider: int | None = None) -> tuple[SettleItem, SettleAccounts]:
    """Job ``n``'s item; its own provider unless ``provider`` names a shared one."""
    p = 1000 + (n if provider is None else provider)
    atts = tuple(Attestation(Pubkey(bytes([200 - k] * 32)), bytes(64)) for k in range(quorum - 1))
    item = SettleItem(Pubkey(struct.pack("<Q", n) * 4), 3, 180, 1_700_000_180, bytes([5] * 32),
                      Pubkey(bytes([1] * 32)), bytes(64), 170, atts)  # fmt: skip
    accts = SettleAccounts(
        market=MARKET, validator=VALIDATOR, provider=Pubkey(struct.pack("<Q", p) * 4),
        escrow=Pubkey(struct.pack("<Q", n + 500_000) * 4),
        provider_payment_account=Pubkey(struct.pack("<Q", p + 500_000) * 4), fee_vault=FEE_VAULT,
        payment_mint=MINT,
        extra_validators=tuple(Pubkey(bytes([150 - k] * 32)) for k in range(quorum - 1)),
    )  # fmt: skip
    return item, accts


def prepared(codec, ns, quorum: int = 1, provider: int | None = None):
    return [prepare_settle(codec, AUTHORITY, *item_and_accounts(n, quorum, provider)) for n in ns]


def table_of(preps, own: bool = True) -> AddressLookupTableAccount:
    addrs: dict[Pubkey, None] = {}
    for p in preps:
        addrs.update(dict.fromkeys(p.shared))
        if own:
            addrs.update(dict.fromkeys(p.own))
    return AddressLookupTableAccount(Pubkey(bytes([99] * 32)), list(addrs))


# ------------------------------------------------------------------ the ALT program


def test_derived_address_matches_the_runtime():
    for slot in (0, 1, 123_456_789):
        assert derive_lookup_table_address(AUTHORITY, slot)[0] == solders_derive(AUTHORITY, slot)[0]


def test_create_instruction_layout():
    payer = Pubkey(bytes([31] * 32))
    ix, table = create_lookup_table_instruction(AUTHORITY, payer, 77)
    address, bump = derive_lookup_table_address(AUTHORITY, 77)
    assert table == address and ix.program_id == ADDRESS_LOOKUP_TABLE_PROGRAM_ID
    assert bytes(ix.data) == struct.pack("<IQB", 0, 77, bump)
    assert [(m.pubkey, m.is_signer, m.is_writable) for m in ix.accounts] == [
        (table, False, True), (AUTHORITY, True, False), (payer, True, True),
        (SYSTEM_PROGRAM_ID, False, False)]  # fmt: skip


def test_extend_instruction_layout_and_packet_limit():
    table = Pubkey(bytes([99] * 32))
    addrs = [Pubkey(bytes([i] * 32)) for i in range(1, 4)]
    ix = extend_lookup_table_instruction(table, AUTHORITY, AUTHORITY, addrs)
    assert bytes(ix.data) == struct.pack("<IQ", 2, 3) + b"".join(bytes(a) for a in addrs)
    assert [(m.pubkey, m.is_signer, m.is_writable) for m in ix.accounts] == [
        (table, False, True), (AUTHORITY, True, False), (AUTHORITY, True, True),
        (SYSTEM_PROGRAM_ID, False, False)]  # fmt: skip
    with pytest.raises(ValueError):
        extend_lookup_table_instruction(table, AUTHORITY, AUTHORITY, [])

    def size(n: int) -> int:
        many = [Pubkey.new_unique() for _ in range(n)]
        return transaction_size([extend_lookup_table_instruction(table, AUTHORITY, AUTHORITY, many)],
                                AUTHORITY)  # fmt: skip

    assert size(MAX_EXTEND_ADDRESSES_PER_TX) <= PACKET_DATA_SIZE < size(MAX_EXTEND_ADDRESSES_PER_TX + 1)


def test_decode_table_matches_solders():
    addrs = [Pubkey(bytes([i] * 32)) for i in range(1, 6)]
    table = Pubkey(bytes([99] * 32))
    data = table_bytes(addrs, extended=40, start=3)
    t = decode_lookup_table(table, data)
    ref = AddressLookupTable.deserialize(data)
    assert t.addresses == tuple(ref.addresses) == tuple(addrs)
    assert (t.authority, t.deactivation_slot, t.last_extended_slot, t.last_extended_slot_start_index) \
        == (ref.meta.authority, ref.meta.deactivation_slot, ref.meta.last_extended_slot,
            ref.meta.last_extended_slot_start_index) == (AUTHORITY, U64_MAX, 40, 3)  # fmt: skip
    assert t.is_active and t.room == 251
    frozen = decode_lookup_table(table, table_bytes(addrs, authority=None))
    assert frozen.authority is None


@pytest.mark.parametrize("data, why", [
    (bytes(10), "shorter"),
    (table_bytes([], state=0), "not an initialized"),
    (table_bytes([Pubkey.default()]) + b"\x01", "multiple of 32"),
    (table_bytes([])[:21] + b"\x02" + table_bytes([])[22:], "authority tag"),
])  # fmt: skip
def test_decode_table_refuses_garbage(data, why):
    with pytest.raises(ValueError, match=why):
        decode_lookup_table(Pubkey.default(), data)


def test_new_entries_are_usable_one_slot_later_and_never_after_deactivation():
    addrs = tuple(Pubkey(bytes([i] * 32)) for i in range(1, 6))
    t = LookupTable(Pubkey.default(), AUTHORITY, U64_MAX, 40, 3, addrs)
    assert t.usable(39) == t.usable(40) == addrs[:3]
    assert t.usable(41) == addrs
    assert list(t.account(40).addresses) == list(addrs[:3])
    gone = LookupTable(Pubkey.default(), AUTHORITY, 50, 40, 3, addrs)
    assert not gone.is_active and gone.usable(100) == ()


def test_decode_slot_hashes():
    data = struct.pack("<Q", 2) + struct.pack("<Q", 9) + bytes([1] * 32) + struct.pack("<Q", 8) + bytes(32)
    assert decode_slot_hashes(data) == [(9, bytes([1] * 32)), (8, bytes(32))]
    with pytest.raises(ValueError):
        decode_slot_hashes(data[:-1])
    with pytest.raises(ValueError):
        decode_slot_hashes(b"\x00")


# ------------------------------------------------------------------ v0 settle transactions


def test_measured_items_per_transaction(codec):
    """The figures of validator/README.md, "Settlement cost" (worst case: nothing shared)."""
    assert [max_settle_items_per_tx(codec, q) for q in (1, 2, 3)] == [2, 1, 1]
    assert [max_settle_items_per_v0_tx(codec, q) for q in (1, 2, 3)] == [4, 2, 2]
    assert [max_settle_items_per_v0_tx(codec, q, own_accounts_in_table=False)
            for q in (1, 2, 3)] == [3, 2, 1]  # fmt: skip


def test_table_addresses_split_shared_and_own():
    item, accts = item_and_accounts(1, quorum=2)
    shared, own = settle_table_addresses(item, accts)
    assert own == (item.job, accts.escrow)
    assert shared == (MARKET, VALIDATOR, FEE_VAULT, MINT, INSTRUCTIONS_SYSVAR_ID, TOKEN_PROGRAM_ID,
                      accts.provider, accts.provider_payment_account, *accts.extra_validators)  # fmt: skip


def test_v0_message_loads_table_accounts_with_their_flags(codec):
    preps = prepared(codec, [1, 2])
    table = table_of(preps)
    msg = settle_v0_message(AUTHORITY, preps, [table], Hash.default())
    # only the payer and the two invoked programs stay static
    assert len(msg.account_keys) == 3 and msg.account_keys[0] == AUTHORITY
    (lookup,) = msg.address_table_lookups
    writable = {table.addresses[i] for i in bytes(lookup.writable_indexes)}
    readonly = {table.addresses[i] for i in bytes(lookup.readonly_indexes)}
    assert readonly == {INSTRUCTIONS_SYSVAR_ID, TOKEN_PROGRAM_ID}
    assert writable == set(table.addresses) - readonly
    size = len(bytes(VersionedTransaction.populate(msg, [Signature.default()])))
    assert size == v0_transaction_size([ix for p in preps for ix in p.instructions], AUTHORITY, [table])
    assert size <= PACKET_DATA_SIZE


def test_v0_message_refuses_a_job_twice(codec):
    preps = prepared(codec, [1, 1])
    with pytest.raises(ValueError, match="at most once"):
        settle_v0_message(AUTHORITY, preps, [], Hash.default())


def test_pack_four_quorum_one_items_per_transaction_with_a_table(codec):
    preps = prepared(codec, range(1, 6))
    groups = pack_settle_items(AUTHORITY, preps, [table_of(preps)])
    assert groups == [[0, 1, 2, 3], [4]]
    # shared accounts only (jobs and escrows static): three
    assert pack_settle_items(AUTHORITY, preps, [table_of(preps, own=False)]) == [[0, 1, 2], [3, 4]]
    # without a table: what a legacy transaction carries, two
    assert pack_settle_items(AUTHORITY, preps, []) == [[0, 1], [2, 3], [4]]
    for g in groups:
        ixs = [ix for i in g for ix in preps[i].instructions]
        assert v0_transaction_size(ixs, AUTHORITY, [table_of(preps)]) <= PACKET_DATA_SIZE


def test_pack_uses_only_usable_entries(codec):
    preps = prepared(codec, range(1, 5))
    full = table_of(preps)
    t = LookupTable(full.key, AUTHORITY, U64_MAX, 40, 0, tuple(full.addresses))  # all added at 40
    assert pack_settle_items(AUTHORITY, preps, [t.account(40)]) == [[0, 1], [2, 3]]
    assert pack_settle_items(AUTHORITY, preps, [t.account(41)]) == [[0, 1, 2, 3]]


def test_pack_keeps_a_job_once_per_transaction_and_in_order(codec):
    preps = prepared(codec, [1, 2, 1, 3, 1])
    groups = pack_settle_items(AUTHORITY, preps, [table_of(preps)])
    for g in groups:
        jobs = [bytes(preps[i].job) for i in g]
        assert len(jobs) == len(set(jobs))
    where = {i: n for n, g in enumerate(groups) for i in g}
    assert where[0] < where[2] < where[4]  # job 1's receipts go in their order
    assert sorted(i for g in groups for i in g) == list(range(5))


def test_pack_mixed_quorums_share_transactions(codec):
    """A quorum-1 item fits next to a quorum-2 item once their provider is shared."""
    q2 = prepared(codec, [1], quorum=2, provider=7)
    q1 = prepared(codec, [2], quorum=1, provider=7)
    preps = q2 + q1
    groups = pack_settle_items(AUTHORITY, preps, [table_of(preps)])
    ixs = [ix for p in preps for ix in p.instructions]
    fits = v0_transaction_size(ixs, AUTHORITY, [table_of(preps)]) <= PACKET_DATA_SIZE
    assert groups == ([[0, 1]] if fits else [[0], [1]])


def test_pack_gives_an_oversized_item_its_own_group(codec):
    preps = prepared(codec, [1, 2])
    assert pack_settle_items(AUTHORITY, preps, [], limit=100) == [[0], [1]]


def test_compiled_v0_roundtrips(codec):
    preps = prepared(codec, [1, 2])
    msg = settle_v0_message(AUTHORITY, preps, [table_of(preps)], Hash.default())
    assert MessageV0.from_bytes(bytes(msg)) == msg
