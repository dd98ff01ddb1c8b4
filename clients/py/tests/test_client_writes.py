"""The newer instructions of GpuMarketClient against the in-process fake RPC.

For each call: the instruction(s) it builds (program, account metas in IDL order with their
signer/writable flags, exact data bytes), and that one signed transaction was sent.
"""

from __future__ import annotations

import hashlib
import struct

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from gpu_market import pda, tokens
from gpu_market.constants import (
    ASSOCIATED_TOKEN_PROGRAM_ID,
    ED25519_PROGRAM_ID,
    INSTRUCTIONS_SYSVAR_ID,
    PROGRAM_ID,
    SYSTEM_PROGRAM_ID,
    TOKEN_PROGRAM_ID,
)
from gpu_market.errors import GpuMarketError, TransactionTooLarge
from gpu_market.receipt import receipt_digest, receipt_message, sign_receipt
from gpu_market.settle import SettleItem, parse_ed25519_signatures
from sdktestkit import JOB_STARTED_AT, validator_bytes
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from test_client import MARKET_PARAMS, fake_client, market_bytes

PARAMS = MARKET_PARAMS  # test_client's market_bytes: the params in force
STARTED_AT = JOB_STARTED_AT  # conftest's job_bytes
PARAM_FMT = "<HHQqIBIHHHQIHIHBII"  # MarketParams field types, in order (state/market.rs)


def disc(name: str) -> bytes:
    return hashlib.sha256(f"global:{name}".encode()).digest()[:8]


def params_bytes(p: dict) -> bytes:
    return struct.pack(PARAM_FMT, *(p[k] for k in PARAMS))


def provider_bytes(codec, market: Pubkey, owner: Pubkey, worker: Pubkey,
                   retired: list[tuple[Pubkey, int]] = (), last_equivocation_slash_at: int = 0,
                   price: int = 5, last_equivocation_slash_bps: int = 0) -> bytes:  # fmt: skip
    """A Provider account encoded by hand (state/provider.rs), status Active, 8 GPUs;
    ``retired``: (key, retired_at) pairs, newest first (at most 4)."""
    slots = b"".join(bytes(k) + struct.pack("<q", t) for k, t in retired)
    slots = slots.ljust(4 * 40, b"\0")
    spec = b"H100".ljust(32, b"\0") + struct.pack("<HI", 8, 81920) + b"eu".ljust(16, b"\0")
    raw = (hashlib.sha256(b"account:Provider").digest()[:8] + bytes(market) + bytes(owner)
           + bytes(worker) + bytes(8) + slots + struct.pack("<q", last_equivocation_slash_at)
           + spec + struct.pack("<Q", price) + b"\x00")  # fmt: skip
    # stake, unbonding, gpus_in_use, reputation, bump and endpoint (all zero), then the last
    # field, last_equivocation_slash_bps (u16); an Active status is one byte in borsh.
    raw += bytes(8 + 16 + 2 + 36 + 1 + 96) + struct.pack("<H", last_equivocation_slash_bps)
    return raw.ljust(codec.account_size("Provider"), b"\0")


class World:
    """A market, a provider, a Running job, as account bytes in the fake RPC."""

    def __init__(self, rpc, client, codec, job_bytes, previous_worker: Keypair | None = None,
                 members: int = 1, quorum: int = 1, **provider_fields):  # fmt: skip
        self.rpc, self.client, self.codec = rpc, client, codec
        self.pay_mint, self.stake_mint, self.treasury = (Pubkey.new_unique() for _ in range(3))
        self.market = Pubkey.new_unique()
        rpc.accounts[str(self.market)] = (str(PROGRAM_ID), market_bytes(codec, self.pay_mint, self.stake_mint, self.treasury))
        self.view = client.fetch_market(self.market)
        self.owner, self.user, self.worker = Keypair(), Keypair(), Keypair()
        self.previous_worker = previous_worker
        self.provider = pda.provider_pda(self.market, self.owner.pubkey())
        # The previous worker key retired after every receipt of the tests (window_end <= 2e9).
        retired = [(previous_worker.pubkey(), 2_000_000_000)] if previous_worker else []
        rpc.accounts[str(self.provider)] = (str(PROGRAM_ID), provider_bytes(
            codec, self.market, self.owner.pubkey(), self.worker.pubkey(), retired, **provider_fields))
        # The job's committee: ``members`` validators (Active, with endpoints), quorum ``quorum``.
        self.members = [Keypair() for _ in range(members)]
        for i, m in enumerate(self.members):
            self.add_validator(m, bond=1_000 - i)
        self.job = pda.job_pda(self.market, self.user.pubkey(), 1)
        rpc.accounts[str(self.job)] = (str(PROGRAM_ID), job_bytes(
            self.market, self.user.pubkey(), self.provider, 1,
            committee=[m.pubkey() for m in self.members], quorum=quorum))  # fmt: skip
        self.captured: list[list] = []
        real_send = client.send

        def send(ixs, signers):
            self.captured.append(list(ixs))
            return real_send(ixs, signers)

        client.send = send

    def add_validator(self, authority: Keypair, **fields) -> Pubkey:
        """A Validator account of ``authority`` in this market (sdktestkit.validator_bytes)."""
        address = pda.validator_pda(self.market, authority.pubkey())
        self.rpc.accounts[str(address)] = (str(PROGRAM_ID), validator_bytes(
            self.market, authority.pubkey(), **fields))  # fmt: skip
        return address

    def committee(self, quorum: int = 1) -> dict:
        """``create_job`` keyword arguments naming this world's members."""
        return {"committee": [m.pubkey() for m in self.members], "quorum": quorum}

    def last(self):
        """(instructions, transaction) of the last send."""
        ixs = self.captured[-1]
        tx = self.rpc.sent[-1]
        tx.verify()
        return ixs, tx


def metas(ix) -> list[tuple[Pubkey, bool, bool]]:
    return [(m.pubkey, m.is_signer, m.is_writable) for m in ix.accounts]


def signers_of(tx) -> set[Pubkey]:
    return set(tx.message.account_keys[: tx.message.header.num_required_signatures])


@pytest.fixture
def fake(idl_path):
    return fake_client(idl_path)


@pytest.fixture
def world(fake, codec, job_bytes):
    rpc, client = fake
    return World(rpc, client, codec, job_bytes)


# ----------------------------------------------------------------------------- governance


def test_update_params_merges_partial_dict(world):
    auth = Keypair()
    sig = world.client.update_params(auth, world.market, {"fee_bps": 700, "min_quorum": 2})
    (ix,), tx = world.last()
    assert tx.signatures[0] == sig and signers_of(tx) == {auth.pubkey()}
    assert ix.program_id == PROGRAM_ID
    assert metas(ix) == [(auth.pubkey(), True, False), (world.market, False, True)]
    assert bytes(ix.data) == disc("update_params") + params_bytes({**PARAMS, "fee_bps": 700, "min_quorum": 2})
    with pytest.raises(ValueError, match="unknown market params"):
        world.client.update_params(auth, world.market, {"fee": 1})


def test_update_params_accepts_market_params(world):
    from dataclasses import replace

    auth = Keypair()
    world.client.update_params(auth, world.market, replace(world.view.params, burn_bps=1))
    (ix,), _ = world.last()
    assert bytes(ix.data) == disc("update_params") + params_bytes({**PARAMS, "burn_bps": 1})


@pytest.mark.parametrize("paused", [True, False])
def test_set_paused(world, paused):
    auth = Keypair()
    world.client.set_paused(auth, world.market, paused)
    (ix,), _ = world.last()
    assert metas(ix) == [(auth.pubkey(), True, False), (world.market, False, True)]
    assert bytes(ix.data) == disc("set_paused") + bytes([int(paused)])


def test_propose_and_accept_authority(world):
    auth, new = Keypair(), Keypair()
    world.client.propose_authority(auth, world.market, new.pubkey())
    (ix,), _ = world.last()
    assert metas(ix) == [(auth.pubkey(), True, False), (world.market, False, True)]
    assert bytes(ix.data) == disc("propose_authority") + bytes(new.pubkey())
    world.client.accept_authority(new, world.market)
    (ix,), tx = world.last()
    assert signers_of(tx) == {new.pubkey()}
    assert metas(ix) == [(new.pubkey(), True, False), (world.market, False, True)]
    assert bytes(ix.data) == disc("accept_authority")


# ----------------------------------------------------------------------------- providers


def test_update_provider_price_only(world):
    world.client.update_provider(world.owner, world.provider, price_per_gpu_second=9)
    (ix,), _ = world.last()
    assert metas(ix) == [(world.owner.pubkey(), True, False), (world.provider, False, True)]
    # Option<u64> Some(9), Option<GpuSpec> None, Option<bool> None, Option<String> None
    assert bytes(ix.data) == disc("update_provider") + b"\x01" + struct.pack("<Q", 9) + b"\x00\x00\x00"
    world.client.update_provider(world.owner, world.provider, endpoint="http://10.0.0.9:7070")
    (ix,), _ = world.last()
    url = b"http://10.0.0.9:7070"
    assert bytes(ix.data) == (disc("update_provider") + b"\x00\x00\x00\x01"
                              + struct.pack("<I", len(url)) + url)
    with pytest.raises(ValueError, match="http:// or https://"):
        world.client.update_provider(world.owner, world.provider, endpoint="ftp://x")


def test_update_provider_partial_spec_and_availability(world):
    world.client.update_provider(world.owner, world.provider, spec={"gpu_count": 4}, accepting_jobs=False)
    (ix,), _ = world.last()
    spec = b"H100".ljust(32, b"\0") + struct.pack("<HI", 4, 81920) + b"eu".ljust(16, b"\0")
    assert bytes(ix.data) == disc("update_provider") + b"\x00" + b"\x01" + spec + b"\x01\x00\x00"
    with pytest.raises(ValueError, match="needs"):
        world.client.update_provider(world.owner, world.provider)
    with pytest.raises(ValueError, match="unknown spec keys"):
        world.client.update_provider(world.owner, world.provider, spec={"gpus": 1})


def test_rotate_worker_key(world):
    new = Pubkey.new_unique()
    world.client.rotate_worker_key(world.owner, world.market, new, 1_800_000_000)
    (ix,), _ = world.last()
    assert metas(ix) == [(world.owner.pubkey(), True, False), (world.market, False, False),
                         (world.provider, False, True)]  # fmt: skip
    assert bytes(ix.data) == disc("rotate_worker_key") + bytes(new) + struct.pack("<q", 1_800_000_000)


def test_request_unstake(world):
    world.client.request_unstake(world.owner, world.market, 123)
    (ix,), _ = world.last()
    assert metas(ix) == [(world.owner.pubkey(), True, False), (world.market, False, False),
                         (world.provider, False, True)]  # fmt: skip
    assert bytes(ix.data) == disc("request_unstake") + struct.pack("<Q", 123)


def test_withdraw_unstaked_creates_ata_first(world):
    owner = world.owner.pubkey()
    world.client.withdraw_unstaked(world.owner, world.market)
    (ata_ix, ix), tx = world.last()
    assert signers_of(tx) == {owner}
    assert ata_ix.program_id == ASSOCIATED_TOKEN_PROGRAM_ID and bytes(ata_ix.data) == b"\x01"
    assert ata_ix.accounts[1].pubkey == tokens.ata(owner, world.stake_mint)
    assert metas(ix) == [
        (owner, True, False),
        (world.market, False, True),
        (world.provider, False, True),
        (world.stake_mint, False, False),
        (world.view.stake_vault, False, True),
        (tokens.ata(owner, world.stake_mint), False, True),
        (TOKEN_PROGRAM_ID, False, False),
    ]
    assert bytes(ix.data) == disc("withdraw_unstaked")


# ----------------------------------------------------------------------------- validators


def test_request_validator_exit(world):
    v = Keypair()
    world.client.request_validator_exit(v, world.market)
    (ix,), _ = world.last()
    assert metas(ix) == [(v.pubkey(), True, False), (world.market, False, False),
                         (pda.validator_pda(world.market, v.pubkey()), False, True)]  # fmt: skip
    assert bytes(ix.data) == disc("request_validator_exit")


def test_withdraw_validator_bond(world):
    v = Keypair()
    world.client.withdraw_validator_bond(v, world.market)
    (ata_ix, ix), _ = world.last()
    assert ata_ix.program_id == ASSOCIATED_TOKEN_PROGRAM_ID
    assert metas(ix) == [
        (v.pubkey(), True, True),
        (world.market, False, True),
        (pda.validator_pda(world.market, v.pubkey()), False, True),
        (world.stake_mint, False, False),
        (world.view.stake_vault, False, True),
        (tokens.ata(v.pubkey(), world.stake_mint), False, True),
        (TOKEN_PROGRAM_ID, False, False),
    ]
    assert bytes(ix.data) == disc("withdraw_validator_bond")


# ----------------------------------------------------------------------------- jobs


def test_top_up(world):
    world.client.top_up(world.user, world.job, 600)
    (ix,), _ = world.last()
    assert metas(ix) == [
        (world.user.pubkey(), True, False),
        (world.market, False, False),
        (world.job, False, True),
        (pda.escrow_pda(world.job), False, True),
        (world.pay_mint, False, False),
        (tokens.ata(world.user.pubkey(), world.pay_mint), False, True),
        (TOKEN_PROGRAM_ID, False, False),
    ]
    assert bytes(ix.data) == disc("top_up") + struct.pack("<Q", 600)


def test_cancel_refunds_to_the_users_ata(world):
    caller = world.user
    world.client.cancel_job(caller, world.job)
    (ix,), tx = world.last()
    assert signers_of(tx) == {caller.pubkey()}
    assert metas(ix) == [
        (caller.pubkey(), True, False),
        (world.market, False, False),
        (world.provider, False, True),
        (world.job, False, True),
        (pda.escrow_pda(world.job), False, True),
        (world.pay_mint, False, False),
        (tokens.ata(world.user.pubkey(), world.pay_mint), False, True),
        (TOKEN_PROGRAM_ID, False, False),
    ]
    assert bytes(ix.data) == disc("cancel_job")


def test_program_error_carries_the_idl_name(world):
    from test_client import PREFLIGHT_STALE_SEQUENCE

    world.rpc.send_error = PREFLIGHT_STALE_SEQUENCE
    with pytest.raises(GpuMarketError) as info:
        world.client.top_up(world.user, world.job, 1)
    assert info.value.name == "StaleSequence"


# ----------------------------------------------------------------------------- slashing


def _targets(world, reporter_stake: Pubkey) -> list[tuple[Pubkey, bool, bool]]:
    return [
        (world.market, False, True),
        (world.provider, False, True),
        (world.job, False, True),
        (world.stake_mint, False, True),
        (world.view.stake_vault, False, True),
        (reporter_stake, False, True),
        (TOKEN_PROGRAM_ID, False, False),
    ]


def _signed(world, key: Keypair, seq: int, cumulative: int, tag: int):
    receipt = {"seq": seq, "cumulative_seconds": cumulative, "window_end": 1_700_000_000 + 60 * seq,
               "proof_hash": bytes([tag]) * 32}  # fmt: skip
    msg = receipt_message(bytes(PROGRAM_ID), bytes(world.market), bytes(world.job), seq, cumulative,
                          receipt["window_end"], receipt["proof_hash"])  # fmt: skip
    return receipt, sign_receipt(key, msg), receipt_digest(msg)  # what the key signed


def _receipt_bytes(r) -> bytes:
    return struct.pack("<QQq", r["seq"], r["cumulative_seconds"], r["window_end"]) + r["proof_hash"]


def test_slash_equivocation_layout(fake, codec, job_bytes):
    rpc, client = fake
    prev = Keypair()
    world = World(rpc, client, codec, job_bytes, previous_worker=prev)
    reporter = Keypair()
    r1, s1, m1 = _signed(world, world.worker, 7, 420, 1)
    r2, s2, m2 = _signed(world, prev, 7, 400, 2)  # a retired key counts too
    ixs = client.slash_equivocation_instructions(reporter.pubkey(), world.job, r1, s1, r2, s2)
    assert [ix.program_id for ix in ixs] == [ED25519_PROGRAM_ID, PROGRAM_ID]
    entries = parse_ed25519_signatures(ixs[0].data)
    assert entries == [(bytes(world.worker.pubkey()), s1, m1), (bytes(prev.pubkey()), s2, m2)]
    for pk, got_sig, got_msg in entries:
        Ed25519PublicKey.from_public_bytes(pk).verify(got_sig, got_msg)
    slash = ixs[1]
    reporter_ata = tokens.ata(reporter.pubkey(), world.stake_mint)
    assert metas(slash) == [
        (reporter.pubkey(), True, True),
        *_targets(world, reporter_ata),
        (pda.equivocation_pda(world.job, STARTED_AT, 7), False, True),
        (INSTRUCTIONS_SYSVAR_ID, False, False),
        (SYSTEM_PROGRAM_ID, False, False),
    ]
    assert bytes(slash.data) == disc("slash_equivocation") + _receipt_bytes(r1) + _receipt_bytes(r2)
    assert pda.equivocation_pda(world.job, STARTED_AT, 7) == Pubkey.find_program_address(
        [b"equivocation", bytes(world.job), struct.pack("<q", STARTED_AT), struct.pack("<Q", 7)],
        PROGRAM_ID)[0]  # fmt: skip


def test_slash_equivocation_accepts_receipt_objects_and_custom_reward_account(world):
    reporter, dest = Keypair(), Pubkey.new_unique()
    r1, s1, _ = _signed(world, world.worker, 3, 180, 1)
    r2, s2, _ = _signed(world, world.worker, 3, 170, 2)
    item = SettleItem(world.job, r1["seq"], r1["cumulative_seconds"], r1["window_end"],
                      r1["proof_hash"], world.worker.pubkey(), s1, 150)  # fmt: skip
    ixs = world.client.slash_equivocation_instructions(reporter.pubkey(), world.job, item, s1, r2, s2, dest)
    assert ixs[1].accounts[6].pubkey == dest


def test_slash_equivocation_rejects_bad_evidence(world):
    reporter = Keypair()
    r1, s1, _ = _signed(world, world.worker, 3, 180, 1)
    r2, s2, _ = _signed(world, world.worker, 4, 170, 2)
    with pytest.raises(ValueError, match="different seqs"):
        world.client.slash_equivocation(reporter, world.job, r1, s1, r2, s2)
    with pytest.raises(ValueError, match="identical"):
        world.client.slash_equivocation(reporter, world.job, r1, s1, r1, s1)
    early, s_early, _ = _signed(world, world.worker, 0, 0, 3)  # window_end before started_at
    r0, s0, _ = _signed(world, world.worker, 0, 10, 4)
    with pytest.raises(ValueError, match="not evidence about this job"):
        world.client.slash_equivocation(reporter, world.job, early, s_early, r0, s0)
    r3, s3, _ = _signed(world, Keypair(), 3, 170, 2)  # a stranger's key
    with pytest.raises(ValueError, match="second_signature"):
        world.client.slash_equivocation(reporter, world.job, r1, s1, r3, s3)
    assert world.rpc.sent == []


def test_slash_equivocation_over_the_packet_limit_sends_nothing(world, monkeypatch):
    import gpu_market.client as client_mod

    monkeypatch.setattr(client_mod, "PACKET_DATA_SIZE", 100)  # as if the packet limit were lower
    r1, s1, _ = _signed(world, world.worker, 3, 180, 1)
    r2, s2, _ = _signed(world, world.worker, 3, 170, 2)
    with pytest.raises(TransactionTooLarge, match="100-byte"):
        world.client.slash_equivocation(Keypair(), world.job, r1, s1, r2, s2)
    assert world.rpc.sent == []


def test_slash_equivocation_fits_one_packet_and_sends(world):
    """One Ed25519 instruction with both receipts plus 13 accounts fits in 1232 bytes."""
    reporter = Keypair()
    r1, s1, _ = _signed(world, world.worker, 3, 180, 1)
    r2, s2, _ = _signed(world, world.worker, 3, 170, 2)
    sig = world.client.slash_equivocation(reporter, world.job, r1, s1, r2, s2)
    _, tx = world.last()
    assert tx.signatures[0] == sig and signers_of(tx) == {reporter.pubkey()}
    assert [tx.message.account_keys[i.program_id_index] for i in tx.message.instructions] == [
        ED25519_PROGRAM_ID, PROGRAM_ID]
    assert len(bytes(tx)) <= 1232


def test_fetch_equivocation_record(world, codec):
    record = pda.equivocation_pda(world.job, STARTED_AT, 7)
    assert world.client.fetch_equivocation_record(record) is None
    raw = codec.encode_account("EquivocationRecord", {
        "job": world.job, "seq": 7, "offender": world.provider, "reporter": world.owner.pubkey(),
        "slashed": 99, "bump": 254})  # fmt: skip
    world.rpc.accounts[str(record)] = (str(PROGRAM_ID), raw)
    view = world.client.fetch_equivocation_record(record)
    assert (view.job, view.seq, view.slashed, view.address) == (world.job, 7, 99, record)


def test_already_in_use_is_named():
    from gpu_market.errors import chain_error_from_transaction_err

    logs = ["Program 11111111111111111111111111111111 invoke [2]",
            "Allocate: account Address { address: X, base: None } already in use",
            "Program 11111111111111111111111111111111 failed: custom program error: 0x0"]  # fmt: skip
    err = chain_error_from_transaction_err({"InstructionError": [2, {"Custom": 0}]}, logs, {}, str(PROGRAM_ID))
    assert isinstance(err, GpuMarketError) and err.name == "AccountAlreadyInUse"
