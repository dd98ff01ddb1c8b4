"""Settle transaction layout: Ed25519 instructions, settle accounts, packet limit."""

from __future__ import annotations

import struct

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from gpu_market.constants import (
    ED25519_PROGRAM_ID,
    INSTRUCTIONS_SYSVAR_ID,
    PACKET_DATA_SIZE,
    PROGRAM_ID,
    TOKEN_PROGRAM_ID,
)
from gpu_market.receipt import (
    attestation_message,
    attestation_signature,
    receipt_digest,
    receipt_message,
    sign_receipt,
)
from gpu_market.settle import (
    Attestation,
    SettleAccounts,
    SettleItem,
    ed25519_instruction,
    ed25519_multi_instruction,
    ed25519_settle_instruction,
    max_settle_items_per_tx,
    parse_ed25519_instruction,
    parse_ed25519_signatures,
    settle_instructions,
    transaction_size,
)
from solders.pubkey import Pubkey


def keypair(seed: int) -> tuple[Ed25519PrivateKey, Pubkey]:
    sk = Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)
    return sk, Pubkey(sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def accounts(extra: tuple[Pubkey, ...] = ()) -> SettleAccounts:
    return SettleAccounts(
        market=Pubkey(bytes([10] * 32)),
        validator=Pubkey(bytes([11] * 32)),
        provider=Pubkey(bytes([12] * 32)),
        escrow=Pubkey(bytes([13] * 32)),
        provider_payment_account=Pubkey(bytes([14] * 32)),
        fee_vault=Pubkey(bytes([15] * 32)),
        payment_mint=Pubkey(bytes([16] * 32)),
        extra_validators=extra,
    )


APPROVED = 170


def signed_item(market: Pubkey, attesters=()) -> SettleItem:
    sk, pk = keypair(1)
    job = Pubkey(bytes([20] * 32))
    msg = receipt_message(bytes(PROGRAM_ID), bytes(market), bytes(job), 3, 180, 1_700_000_180, bytes([5] * 32))
    atts = tuple(Attestation(apk, attestation_signature(ask, msg, APPROVED)) for ask, apk in attesters)
    return SettleItem(job, 3, 180, 1_700_000_180, bytes([5] * 32), pk, sign_receipt(sk, msg), APPROVED, atts)


def test_ed25519_layout_matches_program_tests_helper():
    """Byte-for-byte what program-tests/tests/common/mod.rs::ed25519_ix_raw builds."""
    pk, sig, msg = bytes(range(32)), bytes(range(64)), b"hello receipt"
    ix = ed25519_instruction(pk, sig, msg)
    expected = bytes([1, 0]) + struct.pack("<7H", 48, 0xFFFF, 16, 0xFFFF, 112, len(msg), 0xFFFF)
    expected += pk + sig + msg
    assert ix.program_id == ED25519_PROGRAM_ID
    assert ix.accounts == []
    assert bytes(ix.data) == expected
    assert parse_ed25519_instruction(ix.data) == (pk, sig, msg)


def test_ed25519_signature_verifies():
    sk, pk = keypair(4)
    msg = b"gpu-market/receipt/v1" + bytes(152)
    ix = ed25519_instruction(bytes(pk), sk.sign(msg), msg)
    got_pk, got_sig, got_msg = parse_ed25519_instruction(ix.data)
    Ed25519PublicKey.from_public_bytes(got_pk).verify(got_sig, got_msg)  # raises if bad


@pytest.mark.parametrize("pk, sig", [(bytes(31), bytes(64)), (bytes(32), bytes(63))])
def test_ed25519_rejects_bad_lengths(pk, sig):
    with pytest.raises(ValueError):
        ed25519_instruction(pk, sig, b"m")


def test_parse_rejects_foreign_offsets():
    data = bytearray(ed25519_instruction(bytes(32), bytes(64), b"m").data)
    data[4:6] = (0).to_bytes(2, "little")  # signature instruction index -> 0
    with pytest.raises(ValueError, match="another instruction"):
        parse_ed25519_instruction(bytes(data))


def test_settle_item_is_ed25519_then_settle(codec):
    acc = accounts()
    item = signed_item(acc.market)
    authority = Pubkey(bytes([30] * 32))
    ed, settle = settle_instructions(codec, authority, item, acc)
    pk, sig, msg = parse_ed25519_instruction(ed.data)
    assert pk == bytes(item.worker_key) and sig == item.receipt_signature
    # the worker's key signed the digest of the receipt message, not the message
    assert msg == receipt_digest(receipt_message(bytes(PROGRAM_ID), bytes(acc.market), bytes(item.job),
                                                 3, 180, 1_700_000_180, bytes([5] * 32)))  # fmt: skip
    Ed25519PublicKey.from_public_bytes(pk).verify(sig, msg)

    assert settle.program_id == PROGRAM_ID
    metas = [(m.pubkey, m.is_signer, m.is_writable) for m in settle.accounts]
    assert metas == [
        (authority, True, False),
        (acc.market, False, True),
        (acc.validator, False, True),
        (acc.provider, False, True),
        (item.job, False, True),
        (acc.escrow, False, True),
        (acc.provider_payment_account, False, True),
        (acc.fee_vault, False, True),
        (acc.payment_mint, False, True),
        (INSTRUCTIONS_SYSVAR_ID, False, False),
        (TOKEN_PROGRAM_ID, False, False),
    ]
    assert codec.instruction_accounts("settle") == [
        "validator_authority", "market", "validator", "provider", "job", "escrow",
        "provider_payment_account", "fee_vault", "payment_mint", "instructions", "token_program",
    ]  # fmt: skip
    assert bytes(settle.data)[8:] == (struct.pack("<QQq", 3, 180, 1_700_000_180) + bytes([5] * 32)
                                      + struct.pack("<Q", APPROVED))  # fmt: skip


def test_quorum_is_one_ed25519_instruction_worker_first(codec):
    attesters = [keypair(7), keypair(8)]
    extra = (Pubkey(bytes([40] * 32)), Pubkey(bytes([41] * 32)))
    acc = accounts(extra)
    item = signed_item(acc.market, attesters)
    ed, settle = settle_instructions(codec, Pubkey(bytes([30] * 32)), item, acc)
    assert ed.program_id == ED25519_PROGRAM_ID
    entries = parse_ed25519_signatures(ed.data)
    assert [e[0] for e in entries] == [bytes(item.worker_key), bytes(attesters[0][1]),
                                       bytes(attesters[1][1])]  # fmt: skip
    msg = receipt_message(bytes(PROGRAM_ID), bytes(acc.market), bytes(item.job), 3, 180,
                          1_700_000_180, bytes([5] * 32))  # fmt: skip
    # the worker signs the receipt digest (the first 32 bytes), attesters digest || approved
    assert [m for _, _, m in entries] == [receipt_digest(msg)] + [attestation_message(msg, APPROVED)] * 2
    for pk, sig, m in entries:
        Ed25519PublicKey.from_public_bytes(pk).verify(sig, m)  # raises if bad
    assert len(bytes(ed.data)) == 2 + 14 * 3 + 96 * 3 + 40  # one copy of the 40 bytes
    assert [m.pubkey for m in settle.accounts[-2:]] == list(extra)  # same order as signatures
    assert all(m.is_writable and not m.is_signer for m in settle.accounts[-2:])  # rewards credited
    with pytest.raises(ValueError, match="attestations"):
        settle_instructions(codec, Pubkey(bytes([30] * 32)), item, accounts())


def test_settle_signatures_match_program_tests_helper():
    """Byte for byte ``common/mod.rs::ed25519_settle_ix``: pubkeys, then signatures, then one
    copy of the attestation message; entry 0 (the worker) covers its first 32 bytes."""
    msg = attestation_message(b"gpu-market/receipt/v1" + bytes(range(152)), 99)
    worker, att1, att2 = (bytes([i]) * 32 for i in (1, 2, 3))
    s0, s1, s2 = (bytes([i]) * 64 for i in (4, 5, 6))
    ix = ed25519_settle_instruction(worker, s0, [(att1, s1), (att2, s2)], msg)
    header = 2 + 14 * 3
    expected = bytes([3, 0])
    for i, length in enumerate((32, 40, 40)):
        expected += struct.pack("<7H", header + 96 + 64 * i, 0xFFFF, header + 32 * i, 0xFFFF,
                                header + 288, length, 0xFFFF)  # fmt: skip
    expected += worker + att1 + att2 + s0 + s1 + s2 + msg
    assert bytes(ix.data) == expected and ix.program_id == ED25519_PROGRAM_ID
    one = ed25519_settle_instruction(worker, s0, [], msg)  # quorum 1: ed25519_ix_raw's offsets
    assert struct.unpack_from("<7H", bytes(one.data), 2) == (48, 0xFFFF, 16, 0xFFFF, 112, 32, 0xFFFF)
    with pytest.raises(ValueError, match="40 bytes"):
        ed25519_settle_instruction(worker, s0, [], msg[:32])


def test_multi_signature_layout_shares_one_message():
    """common/mod.rs ed25519_multi_ix: n offsets records, all at 0xFFFF, pubkeys, signatures,
    one message copy."""
    keys = [keypair(s) for s in (1, 2, 3)]
    msg = b"gpu-market/receipt/v1" + bytes(range(152))
    ix = ed25519_multi_instruction([(bytes(pk), sk.sign(msg)) for sk, pk in keys], msg)
    data = bytes(ix.data)
    n = 3
    assert data[:2] == bytes([n, 0])
    offsets = [struct.unpack_from("<7H", data, 2 + 14 * i) for i in range(n)]
    base = 2 + 14 * n
    msg_off = base + 96 * n
    for i, (sig_off, sig_ix, pk_off, pk_ix, m_off, m_len, m_ix) in enumerate(offsets):
        assert (sig_ix, pk_ix, m_ix) == (0xFFFF, 0xFFFF, 0xFFFF)
        assert pk_off == base + 32 * i and sig_off == base + 32 * n + 64 * i
        assert (m_off, m_len) == (msg_off, len(msg))
        assert data[pk_off:pk_off + 32] == bytes(keys[i][1])
        Ed25519PublicKey.from_public_bytes(data[pk_off:pk_off + 32]).verify(
            data[sig_off:sig_off + 64], data[m_off:m_off + m_len])
    assert len(data) == msg_off + len(msg)  # exactly one copy of the message
    with pytest.raises(ValueError, match="one-signature"):
        parse_ed25519_instruction(data)
    with pytest.raises(ValueError, match="1..16"):
        ed25519_multi_instruction([], msg)
    with pytest.raises(ValueError, match="signature 1"):
        ed25519_multi_instruction([(bytes(32), bytes(64)), (bytes(32), bytes(63))], msg)


def test_max_items_per_tx_by_quorum(codec):
    """Legacy transactions: two quorum-1 settles (the 40-byte digest form), one of quorum 2 or
    3; a quorum-3 settle fits one packet thanks to the shared attestation-message copy."""
    assert [max_settle_items_per_tx(codec, q) for q in (1, 2, 3)] == [2, 1, 1]
    authority = Pubkey(bytes([30] * 32))
    extra = tuple(Pubkey.new_unique() for _ in range(2))
    ixs = settle_instructions(codec, authority, signed_item(accounts().market, [keypair(7), keypair(8)]),
                              accounts(extra))  # fmt: skip
    assert transaction_size(ixs, authority) <= PACKET_DATA_SIZE


def test_max_items_per_tx_respects_packet_limit(codec):
    n = max_settle_items_per_tx(codec)
    assert n >= 1
    authority = Pubkey(bytes([30] * 32))
    base = accounts()

    def items(k: int):
        out = []
        for i in range(k):
            acc = SettleAccounts(base.market, base.validator, Pubkey.new_unique(), Pubkey.new_unique(),
                                 Pubkey.new_unique(), base.fee_vault, base.payment_mint)  # fmt: skip
            out += settle_instructions(codec, authority, signed_item(base.market), acc)
        return out

    assert transaction_size(items(n), authority) <= PACKET_DATA_SIZE
    assert transaction_size(items(n + 1), authority) > PACKET_DATA_SIZE
    assert max_settle_items_per_tx(codec, 2) <= n
    with pytest.raises(ValueError):
        max_settle_items_per_tx(codec, 0)
