"""The job-ending and market-administration calls (gpu_market.lifecycle, gpu_market.admin)
against the fake RPC.

For each call: the instruction(s) it builds, checked against the committed IDL (account order,
signer/writable flags) and by hand (exact metas and data bytes), and that one signed
transaction was sent; plus the client-side checks that read market parameters at chain time.
"""

from __future__ import annotations

import struct

import httpx
import pytest
from gpu_market import localchain, pda, tokens
from gpu_market.accounts import DEFAULT_MARKET_PARAMS
from gpu_market.constants import (
    ASSOCIATED_TOKEN_PROGRAM_ID,
    INSTRUCTIONS_SYSVAR_ID,
    PROGRAM_ID,
    SYSTEM_PROGRAM_ID,
    TOKEN_PROGRAM_ID,
)
from gpu_market.errors import AccountNotFound, RpcUnavailable, SdkError
from gpu_market.instructions import complete_job_ix, withdraw_fees_ix
from gpu_market.instructions.job import _end_job_ix
from gpu_market.settle import SettleItem
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from test_client import CHAIN_TIME, fake_client, market_bytes
from test_client_writes import (
    PARAMS,
    World,
    disc,
    metas,
    params_bytes,
    provider_bytes,
    signers_of,
)


def idl_metas(new_idl: dict, name: str, keys: dict[str, Pubkey]) -> list[tuple[Pubkey, bool, bool]]:
    """(key, signer, writable) per account of instruction ``name``, in the IDL's order."""
    ix = next(i for i in new_idl["instructions"] if i["name"] == name)
    return [(keys[a["name"]], bool(a.get("signer")), bool(a.get("writable"))) for a in ix["accounts"]]


def token_account_bytes(mint: Pubkey, owner: Pubkey, amount: int) -> bytes:
    """A classic Token account (165 bytes, state Initialized)."""
    return (bytes(mint) + bytes(owner) + struct.pack("<Q", amount) + bytes(36) + b"\x01"
            + bytes(165 - 109))  # fmt: skip


@pytest.fixture
def world(fake, codec, job_bytes):
    rpc, client = fake
    return World(rpc, client, codec, job_bytes)


@pytest.fixture
def fake(idl_path):
    return fake_client(idl_path)


# ----------------------------------------------------------------------------- job endings


@pytest.mark.parametrize("name", ["decline_job", "expire_job", "complete_job"])
def test_end_job_calls_match_the_idl(world, new_idl, name):
    caller = world.worker if name == "decline_job" else Keypair()  # decline: the provider side
    sig = getattr(world.client, name)(caller, world.job)
    (ix,), tx = world.last()
    assert tx.signatures[0] == sig and signers_of(tx) == {caller.pubkey()}
    assert ix.program_id == PROGRAM_ID
    keys = {"signer": caller.pubkey(), "provider": world.provider, "job": world.job}
    assert metas(ix) == idl_metas(new_idl, name, keys)
    assert metas(ix) == [(caller.pubkey(), True, False), (world.provider, False, True),
                         (world.job, False, True)]  # fmt: skip
    assert bytes(ix.data) == disc(name)


def test_end_job_ix_is_pure_and_strict(codec):
    signer, provider, job = Pubkey.new_unique(), Pubkey.new_unique(), Pubkey.new_unique()
    ix = complete_job_ix(codec, signer, provider, job)
    assert [m.pubkey for m in ix.accounts] == [signer, provider, job]
    with pytest.raises(ValueError, match="not one of"):
        _end_job_ix(codec, "close_job", signer, provider, job)


def test_end_job_of_a_missing_job_sends_nothing(world):
    with pytest.raises(AccountNotFound, match="does not exist"):
        world.client.complete_job(Keypair(), Pubkey.new_unique())
    assert world.rpc.sent == []


# ----------------------------------------------------------------------------- treasury


def test_set_treasury_matches_the_idl(world, new_idl):
    auth, treasury = Keypair(), Pubkey.new_unique()
    sig = world.client.set_treasury(auth, world.market, treasury)
    (ix,), tx = world.last()
    assert tx.signatures[0] == sig and signers_of(tx) == {auth.pubkey()}
    keys = {"authority": auth.pubkey(), "market": world.market, "treasury": treasury}
    assert metas(ix) == idl_metas(new_idl, "set_treasury", keys)
    assert metas(ix) == [(auth.pubkey(), True, False), (world.market, False, True),
                         (treasury, False, False)]  # fmt: skip
    assert bytes(ix.data) == disc("set_treasury")


def _with_treasury(world, owner: Pubkey) -> None:
    world.rpc.accounts[str(world.treasury)] = (
        str(TOKEN_PROGRAM_ID), token_account_bytes(world.pay_mint, owner, 0))


def test_sweep_vault_to_the_treasury_owners_ata(world, new_idl):
    caller, treasury_owner = Keypair(), Pubkey.new_unique()
    _with_treasury(world, treasury_owner)
    assert world.client.treasury_owner(world.market) == treasury_owner
    sig = world.client.sweep_vault(caller, world.market)
    (ata_ix, ix), tx = world.last()
    assert tx.signatures[0] == sig and signers_of(tx) == {caller.pubkey()}
    destination = tokens.ata(treasury_owner, world.stake_mint)
    assert ata_ix.program_id == ASSOCIATED_TOKEN_PROGRAM_ID and bytes(ata_ix.data) == b"\x01"
    assert [m.pubkey for m in ata_ix.accounts[:4]] == [caller.pubkey(), destination, treasury_owner,
                                                       world.stake_mint]  # fmt: skip
    keys = {"market": world.market, "stake_mint": world.stake_mint,
            "stake_vault": world.view.stake_vault, "treasury": world.treasury,
            "destination": destination, "token_program": TOKEN_PROGRAM_ID}  # fmt: skip
    assert metas(ix) == idl_metas(new_idl, "sweep_vault", keys)
    assert metas(ix) == [
        (world.market, False, False),
        (world.stake_mint, False, False),
        (world.view.stake_vault, False, True),
        (world.treasury, False, False),
        (destination, False, True),
        (TOKEN_PROGRAM_ID, False, False),
    ]
    assert bytes(ix.data) == disc("sweep_vault")


def test_withdraw_fees_matches_the_idl(world, new_idl):
    caller = Keypair()
    _with_treasury(world, Pubkey.new_unique())
    sig = world.client.withdraw_fees(caller, world.market)
    (ix,), tx = world.last()
    assert tx.signatures[0] == sig and signers_of(tx) == {caller.pubkey()}
    assert ix.program_id == PROGRAM_ID
    keys = {"market": world.market, "payment_mint": world.pay_mint, "fee_vault": world.view.fee_vault,
            "treasury": world.treasury, "token_program": TOKEN_PROGRAM_ID}  # fmt: skip
    assert metas(ix) == idl_metas(new_idl, "withdraw_fees", keys)
    assert metas(ix) == [
        (world.market, False, False),
        (world.pay_mint, False, False),
        (world.view.fee_vault, False, True),
        (world.treasury, False, True),
        (TOKEN_PROGRAM_ID, False, False),
    ]
    assert bytes(ix.data) == disc("withdraw_fees")


def test_withdraw_fees_without_a_treasury_account_says_what_to_do(world):
    with pytest.raises(AccountNotFound, match="set-treasury"):
        world.client.withdraw_fees(Keypair(), world.market)
    assert world.rpc.sent == []


def test_withdraw_fees_ix_is_pure(codec, world):
    from dataclasses import replace

    assert withdraw_fees_ix(codec, world.view).accounts[2].pubkey == world.view.fee_vault
    with pytest.raises(ValueError, match="address"):
        withdraw_fees_ix(codec, replace(world.view, address=None))


def test_fees_to_withdraw_reads_the_fee_vault(world):
    world.rpc.accounts[str(world.view.fee_vault)] = (
        str(TOKEN_PROGRAM_ID), token_account_bytes(world.pay_mint, world.market, 1_234))
    assert world.client.fees_to_withdraw(world.market) == 1_234
    assert world.client.fees_to_withdraw(world.view) == 1_234
    del world.rpc.accounts[str(world.view.fee_vault)]
    with pytest.raises(AccountNotFound):
        world.client.fees_to_withdraw(world.view)


def test_settle_pays_the_fee_vault_not_the_treasury(world, new_idl):
    validator = world.members[0]
    item = SettleItem(world.job, 3, 180, 1_700_000_180, bytes(32), world.worker.pubkey(), bytes(64), 170)
    world.client.settle(validator, [item])
    (_, ix), _ = world.last()
    keys = {"validator_authority": validator.pubkey(), "market": world.market,
            "validator": pda.validator_pda(world.market, validator.pubkey()), "provider": world.provider,
            "job": world.job, "escrow": pda.escrow_pda(world.job),
            "provider_payment_account": tokens.ata(world.owner.pubkey(), world.pay_mint),
            "fee_vault": world.view.fee_vault, "payment_mint": world.pay_mint,
            "instructions": INSTRUCTIONS_SYSVAR_ID, "token_program": TOKEN_PROGRAM_ID}  # fmt: skip
    assert metas(ix) == idl_metas(new_idl, "settle", keys)
    assert world.treasury not in [m.pubkey for m in ix.accounts]


def test_sweep_vault_to_a_given_destination(world):
    dest = Pubkey.new_unique()
    world.client.sweep_vault(Keypair(), world.market, destination=dest)
    (ix,), _ = world.last()  # no ATA creation, no treasury read
    assert ix.accounts[4].pubkey == dest


def test_sweep_vault_without_a_treasury_account_says_what_to_do(world):
    with pytest.raises(AccountNotFound, match="set-treasury"):
        world.client.sweep_vault(Keypair(), world.market)
    assert world.rpc.sent == []


@pytest.mark.parametrize("balance, surplus", [(1_000, 300), (700, 0), (650, 0)])
def test_vault_surplus(fake, codec, balance, surplus):
    rpc, client = fake
    market, stake_mint = Pubkey.new_unique(), Pubkey.new_unique()
    raw = market_bytes(codec, Pubkey.new_unique(), stake_mint, Pubkey.new_unique(),
                       totals={"staked": 600, "bonded": 100})  # fmt: skip
    rpc.accounts[str(market)] = (str(PROGRAM_ID), raw)
    vault = client.fetch_market(market).stake_vault
    rpc.accounts[str(vault)] = (str(TOKEN_PROGRAM_ID), token_account_bytes(stake_mint, market, balance))
    assert client.vault_surplus(market) == surplus


# ----------------------------------------------------------------------------- parameters


def test_initialize_market_creates_the_fee_vault(fake, new_idl):
    rpc, client = fake
    sent: list = []
    real_send = client.send
    client.send = lambda ixs, signers: sent.append(list(ixs)) or real_send(ixs, signers)
    auth, stake_mint, pay_mint, treasury = Keypair(), Pubkey.new_unique(), Pubkey.new_unique(), Pubkey.new_unique()
    client.initialize_market(auth, 3, stake_mint, pay_mint, treasury)
    rpc.sent[-1].verify()
    ((ix,),) = sent
    got = metas(ix)
    market = pda.market_pda(auth.pubkey(), 3)
    keys = {"authority": auth.pubkey(), "market": market, "stake_mint": stake_mint,
            "payment_mint": pay_mint, "stake_vault": pda.stake_vault_pda(market),
            "fee_vault": pda.fee_vault_pda(market), "treasury": treasury,
            "token_program": TOKEN_PROGRAM_ID, "system_program": SYSTEM_PROGRAM_ID}  # fmt: skip
    assert got == idl_metas(new_idl, "initialize_market", keys)
    assert got[4:7] == [(pda.stake_vault_pda(market), False, True), (pda.fee_vault_pda(market), False, True),
                        (treasury, False, False)]  # fmt: skip


def test_initialize_market_defaults_include_health_thresholds(fake):
    rpc, client = fake
    auth = Keypair()
    client.initialize_market(auth, 7, Pubkey.new_unique(), Pubkey.new_unique(), Pubkey.new_unique())
    tx = rpc.sent[-1]
    data = bytes(tx.message.instructions[0].data)
    assert data == disc("initialize_market") + struct.pack("<Q", 7) + params_bytes(DEFAULT_MARKET_PARAMS)
    assert (DEFAULT_MARKET_PARAMS["temp_critical_c"], DEFAULT_MARKET_PARAMS["ecc_uncorrected_max"]) == (95, 0)
    with pytest.raises(ValueError, match="unknown market params"):
        client.initialize_market(auth, 7, Pubkey.new_unique(), Pubkey.new_unique(),
                                 Pubkey.new_unique(), {"temp_c": 90})  # fmt: skip


def test_update_params_merges_onto_the_pending_announcement(fake, codec, job_bytes):
    rpc, client = fake
    world = World(rpc, client, codec, job_bytes)
    rpc.accounts[str(world.market)] = (str(PROGRAM_ID), market_bytes(
        codec, world.pay_mint, world.stake_mint, world.treasury, pending={"fee_bps": 700},
        effective_at=CHAIN_TIME + 100))  # fmt: skip
    auth = Keypair()
    client.update_params(auth, world.market, {"burn_bps": 1, "temp_critical_c": 90})
    (ix,), _ = world.last()
    # the pending fee change is kept; the params in force (fee 500) are not the base
    want = {**PARAMS, "fee_bps": 700, "burn_bps": 1, "temp_critical_c": 90}
    assert bytes(ix.data) == disc("update_params") + params_bytes(want)


def _priced_world(fake, codec, job_bytes, pending: dict, effective_at: int, members: int = 1) -> World:
    rpc, client = fake
    world = World(rpc, client, codec, job_bytes, members=members)
    rpc.accounts[str(world.market)] = (str(PROGRAM_ID), market_bytes(
        codec, world.pay_mint, world.stake_mint, world.treasury, pending=pending,
        effective_at=effective_at))  # fmt: skip
    rpc.accounts[str(world.provider)] = (str(PROGRAM_ID), provider_bytes(
        codec, world.market, world.owner.pubkey(), world.worker.pubkey(), price=5))  # fmt: skip
    return world


def test_create_job_min_deposit_uses_the_params_in_force_at_chain_time(fake, codec, job_bytes):
    # 2 GPUs at 5 per GPU-second = 10 per second. In force: 60 s windows; announced: 30 s.
    world = _priced_world(fake, codec, job_bytes, {"window_seconds": 30}, CHAIN_TIME + 1)
    user = Keypair()
    assert world.client.min_deposit(world.market, world.provider, 2) == 600
    with pytest.raises(ValueError, match="at least 600 base units"):
        world.client.create_job(user, world.market, world.provider, 1, 2, 599, **world.committee())
    assert world.rpc.sent == []
    world.rpc.set_chain_time(CHAIN_TIME + 1)  # the announcement's time has come
    assert world.client.min_deposit(world.market, world.provider, 2) == 300
    _, job = world.client.create_job(user, world.market, world.provider, 1, 2, 300, **world.committee())
    (ix,), _ = world.last()
    # no max_price_per_gpu_second: the provider's price read before building (5), never u64::MAX
    assert bytes(ix.data)[:34] == disc("create_job") + struct.pack("<QHQQ", 1, 2, 300, 5)
    # the user signs for the parameters in force at chain time: the announced ones now
    assert bytes(ix.data).endswith(params_bytes({**PARAMS, "window_seconds": 30}))
    assert job == pda.job_pda(world.market, user.pubkey(), 1)


def test_create_job_matches_the_idl(fake, codec, job_bytes, new_idl):
    world = _priced_world(fake, codec, job_bytes, {}, 0, members=3)
    user = Keypair()
    members = [m.pubkey() for m in world.members]
    sig, job = world.client.create_job(user, world.market, world.provider, 9, 1, 600,
                                       committee=members, quorum=2, max_price_per_gpu_second=7)  # fmt: skip
    (ix,), tx = world.last()
    assert tx.signatures[0] == sig and signers_of(tx) == {user.pubkey()}
    keys = {"user": user.pubkey(), "market": world.market, "provider": world.provider, "job": job,
            "escrow": pda.escrow_pda(job), "payment_mint": world.pay_mint,
            "user_payment_account": tokens.ata(user.pubkey(), world.pay_mint),
            "token_program": TOKEN_PROGRAM_ID, "system_program": SYSTEM_PROGRAM_ID}  # fmt: skip
    # the committee's Validator accounts follow, read-only, in the committee's order
    assert metas(ix) == idl_metas(new_idl, "create_job", keys) + [
        (pda.validator_pda(world.market, k), False, False) for k in members]
    args = next(i for i in new_idl["instructions"] if i["name"] == "create_job")["args"]
    assert [(a["name"], a["type"]) for a in args] == [
        ("job_id", "u64"), ("gpu_count", "u16"), ("deposit", "u64"), ("max_price_per_gpu_second", "u64"),
        ("committee", {"vec": "pubkey"}), ("quorum", "u8"), ("workload_hash", {"array": ["u8", 32]}),
        ("expected_params", {"defined": {"name": "MarketParams"}})]  # fmt: skip
    assert bytes(ix.data) == (disc("create_job") + struct.pack("<QHQQ", 9, 1, 600, 7)
                              + struct.pack("<I", 3) + b"".join(bytes(k) for k in members) + b"\x02"
                              + bytes(32) + params_bytes(PARAMS))  # fmt: skip
    world.client.create_job(user, world.market, world.provider, 10, 1, 600, **world.committee(),
                            max_price_per_gpu_second=5)  # = the price  # fmt: skip
    (ix,), _ = world.last()
    assert bytes(ix.data)[26:34] == struct.pack("<Q", 5)


@pytest.mark.parametrize("limit, match", [(4, "above your max_price_per_gpu_second 4"),
                                          (-1, "must be a u64"), (2**64, "must be a u64")])  # fmt: skip
def test_create_job_refuses_a_price_above_the_limit_before_sending(fake, codec, job_bytes, limit, match):
    world = _priced_world(fake, codec, job_bytes, {}, 0)  # the provider asks 5 per GPU-second
    with pytest.raises(ValueError, match=match):
        world.client.create_job(Keypair(), world.market, world.provider, 1, 1, 600, **world.committee(),
                                max_price_per_gpu_second=limit)  # fmt: skip
    assert world.rpc.sent == []


def test_create_job_names_a_missing_provider(world):
    with pytest.raises(AccountNotFound, match="Provider account"):
        world.client.create_job(Keypair(), world.market, Pubkey.new_unique(), 1, 1, 10**9, **world.committee())


def test_chain_time_reads_the_clock_sysvar(fake):
    rpc, client = fake
    assert client.chain_time() == CHAIN_TIME
    rpc.set_chain_time(CHAIN_TIME + 3600)
    assert client.chain_time() == CHAIN_TIME + 3600
    del rpc.accounts["SysvarC1ock11111111111111111111111111111111"]
    with pytest.raises(SdkError, match="no Clock sysvar"):
        client.chain_time()


# ----------------------------------------------------------------------------- evidence


def _signed(world, key: Keypair, seq: int, window_end: int, tag: int):
    from gpu_market.receipt import receipt_message, sign_receipt

    receipt = {"seq": seq, "cumulative_seconds": 60 * seq, "window_end": window_end,
               "proof_hash": bytes([tag]) * 32}  # fmt: skip
    msg = receipt_message(bytes(PROGRAM_ID), bytes(world.market), bytes(world.job), seq,
                          60 * seq, window_end, receipt["proof_hash"])  # fmt: skip
    return receipt, sign_receipt(key, msg)


def test_slash_evidence_from_a_retired_key_must_predate_its_retirement(fake, codec, job_bytes):
    rpc, client = fake
    world = World(rpc, client, codec, job_bytes)
    old = Keypair()
    retired_at = 1_700_000_300
    rpc.accounts[str(world.provider)] = (str(PROGRAM_ID), provider_bytes(
        codec, world.market, world.owner.pubkey(), world.worker.pubkey(), [(old.pubkey(), retired_at)]))
    r1, s1 = _signed(world, world.worker, 5, retired_at, 1)
    r2, s2 = _signed(world, old, 5, retired_at, 2)  # ended by the retirement: evidence
    assert len(client.slash_equivocation_instructions(Keypair().pubkey(), world.job, r1, s1, r2, s2)) == 2
    r3, s3 = _signed(world, old, 5, retired_at + 1, 3)  # after it: the old key signs nothing
    with pytest.raises(ValueError, match="does not sign a window"):
        client.slash_equivocation(Keypair(), world.job, r1, s1, r3, s3)
    assert rpc.sent == []


def test_slash_evidence_of_an_incident_already_punished_is_refused(fake, codec, job_bytes):
    rpc, client = fake
    # Slashed at the job's own rate (5000 bps): nothing higher applies to the incident.
    world = World(rpc, client, codec, job_bytes, last_equivocation_slash_at=1_700_000_200,
                  last_equivocation_slash_bps=5_000)  # fmt: skip
    r1, s1 = _signed(world, world.worker, 5, 1_700_000_200 + 300, 1)  # within the 300 s margin
    r2, s2 = _signed(world, world.worker, 5, 1_700_000_200 + 300, 2)
    with pytest.raises(ValueError, match="EquivocationAlreadyPunished"):
        client.slash_equivocation(Keypair(), world.job, r1, s1, r2, s2)
    # Slashed at 100 bps elsewhere: this job's 5000 bps tops the same incident up.
    lower = World(rpc, client, codec, job_bytes, last_equivocation_slash_at=1_700_000_200,
                  last_equivocation_slash_bps=100)  # fmt: skip
    r1, s1 = _signed(lower, lower.worker, 5, 1_700_000_200 + 300, 1)
    r2, s2 = _signed(lower, lower.worker, 5, 1_700_000_200 + 300, 2)
    assert len(client.slash_equivocation_instructions(Keypair().pubkey(), lower.job, r1, s1, r2, s2)) == 2
    r1, s1 = _signed(world, world.worker, 6, 1_700_000_200 + 301, 1)  # a new incident
    r2, s2 = _signed(world, world.worker, 6, 1_700_000_200 + 301, 2)
    assert len(client.slash_equivocation_instructions(Keypair().pubkey(), world.job, r1, s1, r2, s2)) == 2
    assert rpc.sent == []


# ----------------------------------------------------------------------------- localnet clock


def test_warp_time(monkeypatch):
    seen = []

    def post(url, json, timeout):
        seen.append((url, json["method"], json["params"]))
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": json["id"],
                                         "result": {"slot": 900, "unixTimestamp": 1_700_003_600}})  # fmt: skip

    monkeypatch.setattr(httpx, "post", post)
    assert localchain.warp_time("http://127.0.0.1:1", 3600) == (900, 1_700_003_600)
    assert seen == [("http://127.0.0.1:1", "gpum_warpTime", [3600])]
    with pytest.raises(ValueError, match="forward"):
        localchain.warp_time("http://127.0.0.1:1", -1)

    def refused(url, json, timeout):
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": 1,
                                         "error": {"code": -32601, "message": "Method not found"}})

    monkeypatch.setattr(httpx, "post", refused)
    with pytest.raises(SdkError, match="only gpum-localnet"):
        localchain.warp_time("http://127.0.0.1:1", 1)


def test_warp_time_unreachable():
    with pytest.raises(RpcUnavailable, match="cannot reach"):
        localchain.warp_time("http://127.0.0.1:9", 1, timeout=2)
