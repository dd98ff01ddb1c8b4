"""GpuMarketClient against an in-process fake JSON-RPC endpoint (httpx.MockTransport).

Only the wire protocol is faked; encoding, signing, error parsing and event parsing are real.
End-to-end tests against the local chain live elsewhere.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from pathlib import Path

import httpx
import pytest
from gpu_market import pda
from gpu_market.client import GpuMarketClient
from gpu_market.constants import CLOCK_SYSVAR_ID, PROGRAM_ID
from gpu_market.errors import GpuMarketError, RpcUnavailable, TransactionTooLarge
from gpu_market.settle import SettleItem
from sdktestkit import validator_bytes
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.transaction import Transaction

PREFLIGHT_STALE_SEQUENCE = json.loads(
    (Path(__file__).parent / "fixtures" / "preflight_stale_sequence.json").read_text()
)


SYSVAR_OWNER = "Sysvar1111111111111111111111111111111111111"
CHAIN_TIME = 1_700_000_500


def clock_bytes(unix_timestamp: int) -> bytes:
    """Clock sysvar data: slot, epoch_start_timestamp, epoch, leader_schedule_epoch, unix_timestamp."""
    return struct.pack("<QqQQq", 1_000, unix_timestamp - 100, 1, 2, unix_timestamp)


class FakeRpc:
    def __init__(self) -> None:
        self.accounts: dict[str, tuple[str, bytes]] = {}
        self.sent: list[Transaction] = []
        self.send_error: dict | None = None
        self.logs: list[str] = []
        self.set_chain_time(CHAIN_TIME)

    def set_chain_time(self, unix_timestamp: int) -> None:
        self.accounts[str(CLOCK_SYSVAR_ID)] = (SYSVAR_OWNER, clock_bytes(unix_timestamp))

    def account_json(self, key: str):
        if key not in self.accounts:
            return None
        owner, data = self.accounts[key]
        return {"data": [base64.b64encode(data).decode(), "base64"], "executable": False,
                "lamports": 1_000_000, "owner": owner, "rentEpoch": 0, "space": len(data)}  # fmt: skip

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        method, params = body["method"], body.get("params", [])
        ctx = {"slot": 1}
        if method == "getMultipleAccounts":
            result = {"context": ctx, "value": [self.account_json(k) for k in params[0]]}
        elif method == "requestAirdrop":
            result = str(Keypair().sign_message(b"airdrop"))
        elif method == "getProgramAccounts":
            self.gpa_params = params
            result = [{"pubkey": k, "account": self.account_json(k)} for k, (owner, _) in
                      self.accounts.items() if owner == str(PROGRAM_ID)]  # fmt: skip
        elif method == "getLatestBlockhash":
            result = {"context": ctx, "value": {"blockhash": str(Pubkey.new_unique()), "lastValidBlockHeight": 100}}
        elif method == "sendTransaction":
            if self.send_error:
                return httpx.Response(200, json={"jsonrpc": "2.0", "id": body["id"], "error": self.send_error})
            tx = Transaction.from_bytes(base64.b64decode(params[0]))
            self.sent.append(tx)
            result = str(tx.signatures[0])
        elif method == "getSignatureStatuses":
            result = {"context": ctx, "value": [{"slot": 1, "confirmations": None, "err": None,
                                                 "status": {"Ok": None}, "confirmationStatus": "confirmed"}]}  # fmt: skip
        elif method == "getTransaction":
            result = {"slot": 1, "blockTime": None, "transaction": {
                "signatures": [params[0]],
                "message": {"accountKeys": [str(PROGRAM_ID)], "header": {"numRequiredSignatures": 1,
                            "numReadonlySignedAccounts": 0, "numReadonlyUnsignedAccounts": 0},
                            "instructions": [], "recentBlockhash": str(Pubkey.default())}},
                "meta": {"err": None, "fee": 5000, "preBalances": [], "postBalances": [],
                         "logMessages": self.logs, "innerInstructions": [], "preTokenBalances": [],
                         "postTokenBalances": [], "rewards": [], "status": {"Ok": None}}}  # fmt: skip
        else:
            raise AssertionError(f"unexpected RPC method {method}")
        return httpx.Response(200, json={"jsonrpc": "2.0", "id": body["id"], "result": result})


def fake_client(idl_path) -> tuple[FakeRpc, GpuMarketClient]:
    """A client whose RPC endpoint is a fresh ``FakeRpc`` (through httpx's MockTransport):
    ``(rpc, client)``, what the ``fake`` fixtures of the SDK tests return."""
    rpc = FakeRpc()
    client = GpuMarketClient("http://fake.invalid", idl_path=str(idl_path))
    client.rpc._provider.session = httpx.Client(transport=httpx.MockTransport(rpc))
    return rpc, client


@pytest.fixture
def fake(idl_path):
    return fake_client(idl_path)


def test_fetch_job_and_absent(fake, job_bytes):
    rpc, client = fake
    job = Pubkey.new_unique()
    rpc.accounts[str(job)] = (str(PROGRAM_ID), job_bytes(Pubkey.new_unique(), Pubkey.new_unique(), Pubkey.new_unique(), 1))
    view = client.fetch_job(job)
    assert view.status == "running" and view.address == job
    assert client.fetch_job(Pubkey.new_unique()) is None
    with pytest.raises(ValueError, match="not a Market"):
        client.fetch_market(job)


def test_a_closed_job_is_a_tombstone_that_fetch_job_reads_as_none(fake, job_bytes):
    """``close_job`` leaves a ``ClosedJob`` (discriminator pinned to the program's:
    sha256("account:ClosedJob")[:8]) at the job's address for good."""
    from gpu_market.accounts import CLOSED_JOB_DISCRIMINATOR, ClosedJobView, decode_account

    assert CLOSED_JOB_DISCRIMINATOR.hex() == "0b24094c59a786ab"
    rpc, client = fake
    job = Pubkey.new_unique()
    data = CLOSED_JOB_DISCRIMINATOR + (1_751_300_001).to_bytes(8, "little")
    rpc.accounts[str(job)] = (str(PROGRAM_ID), data)
    assert decode_account(data, job) == ClosedJobView(1_751_300_001, job)
    assert client.fetch_job(job) is None
    assert client.fetch_jobs([job]) == [None]
    assert client.fetch_closed_job(job) == ClosedJobView(1_751_300_001, job)
    with pytest.raises(ValueError, match="not a Market"):
        client.fetch_market(job)
    with pytest.raises(ValueError, match="expected 16"):
        decode_account(CLOSED_JOB_DISCRIMINATOR + bytes(7))


def test_list_jobs_filters(fake, job_bytes, codec):
    rpc, client = fake
    market, user, provider = (Pubkey.new_unique() for _ in range(3))
    jobs = {Pubkey.new_unique(): tag for tag in (0, 1, 1)}
    for key, tag in jobs.items():
        rpc.accounts[str(key)] = (str(PROGRAM_ID), job_bytes(market, user, provider, tag))
    got = client.list_jobs(provider=provider, statuses=["running"], market=market)
    assert sorted(bytes(j.address) for j in got) == sorted(bytes(k) for k, t in jobs.items() if t == 1)
    filters = rpc.gpa_params[1]["filters"]
    assert {"dataSize": codec.account_size("Job")} in filters
    offsets = sorted(f["memcmp"]["offset"] for f in filters if "memcmp" in f)
    # discriminator, market, provider, status (after job_id, gpu_count, 47 bytes of terms, the
    # committee of 5 keys and its length, 8 u64)
    status_at = 8 + 96 + 10 + 47 + 161 + 64
    assert offsets == [0, 8, 72, status_at]
    status = next(f["memcmp"] for f in filters if "memcmp" in f and f["memcmp"]["offset"] == status_at)
    assert status["bytes"] == "2"  # base58 of the Running tag (1)
    assert len(client.list_jobs(statuses=["open", "running"])) == 3
    with pytest.raises(ValueError, match="unknown job status"):
        client.list_jobs(statuses=["paused"])
    rpc.accounts[str(Pubkey.new_unique())] = (str(PROGRAM_ID), job_bytes(market, user, provider, 6))
    (declined,) = client.list_jobs(statuses=["declined"])
    assert declined.status == "declined"


def test_accept_job_builds_signs_and_sends(fake, job_bytes):
    rpc, client = fake
    market, user, provider, job = (Pubkey.new_unique() for _ in range(4))
    rpc.accounts[str(job)] = (str(PROGRAM_ID), job_bytes(market, user, provider, 0))
    worker = Keypair()
    sig = client.accept_job(worker, job)
    (tx,) = rpc.sent
    assert tx.signatures[0] == sig
    tx.verify()
    ix = tx.message.instructions[0]
    keys = [tx.message.account_keys[i] for i in ix.accounts]
    assert keys == [worker.pubkey(), provider, job]
    assert tx.message.account_keys[ix.program_id_index] == PROGRAM_ID


def test_program_error_is_typed(fake, job_bytes):
    rpc, client = fake
    job = Pubkey.new_unique()
    rpc.accounts[str(job)] = (str(PROGRAM_ID), job_bytes(Pubkey.new_unique(), Pubkey.new_unique(), Pubkey.new_unique(), 0))
    rpc.send_error = PREFLIGHT_STALE_SEQUENCE
    with pytest.raises(GpuMarketError) as info:
        client.finish_job(Keypair(), job)
    assert info.value.name == "StaleSequence" and info.value.code == 6032
    assert any("AnchorError" in line for line in info.value.logs)


def test_events_from_logs(fake):
    rpc, client = fake
    job, by = Pubkey.new_unique(), Pubkey.new_unique()
    data = hashlib.sha256(b"event:JobFinished").digest()[:8] + bytes(job) + bytes(by) + struct.pack("<q", 1_700_000_000)
    other = str(Pubkey.new_unique())
    rpc.logs = [
        f"Program {other} invoke [1]",
        f"Program data: {base64.b64encode(data).decode()}",  # another program: ignored
        f"Program {other} success",
        f"Program {PROGRAM_ID} invoke [1]",
        "Program log: Instruction: FinishJob",
        f"Program data: {base64.b64encode(data).decode()}",
        "Program data: not-base64!",
        f"Program {PROGRAM_ID} success",
    ]
    events = client.events(str(Keypair().sign_message(b"x")))
    assert events == [("JobFinished", {"job": job, "by": by, "ended_at": 1_700_000_000})]


def test_settle_too_large_is_refused_before_sending(fake, monkeypatch):
    rpc, client = fake
    n = client.max_settle_items_per_tx()
    items = []
    for _ in range(n + 1):
        job = Pubkey.new_unique()
        items.append(SettleItem(job, 1, 60, 1_700_000_060, bytes(32), Pubkey.new_unique(), bytes(64), 60))
    big = [Pubkey.new_unique() for _ in items]
    monkeypatch.setattr(client, "settle_instructions", lambda a, its: _fake_settle_ixs(client, a, its, big))
    with pytest.raises(TransactionTooLarge, match="1232"):
        client.settle(Keypair(), items)
    assert rpc.sent == []


def _fake_settle_ixs(client, authority, items, providers):
    from gpu_market.settle import SettleAccounts, settle_instructions

    out = []
    market = Pubkey.new_unique()
    for item, prov in zip(items, providers):
        acc = SettleAccounts(market, pda.validator_pda(market, authority), prov, pda.escrow_pda(item.job),
                             Pubkey.new_unique(), Pubkey.new_unique(), Pubkey.new_unique())  # fmt: skip
        out += settle_instructions(client.codec, authority, item, acc)
    return out


def test_airdrop_waits_for_confirmation(fake):
    _, client = fake
    assert client.airdrop(Pubkey.new_unique(), 10**9) is not None


def test_unreachable_rpc_is_rpc_unavailable(idl_path):
    client = GpuMarketClient("http://127.0.0.1:9", idl_path=str(idl_path), timeout=2)
    with pytest.raises(RpcUnavailable, match="check --url"):
        client.fetch_market(Pubkey.new_unique())


MARKET_PARAMS = {"fee_bps": 500, "burn_bps": 5000, "min_stake_per_gpu": 0, "unbonding_seconds": 0,
                 "window_seconds": 60, "min_quorum": 1, "max_missed_windows": 10,
                 "downtime_slash_bps": 0, "equivocation_slash_bps": 0, "reporter_reward_bps": 0,
                 "validator_min_bond": 0, "max_skew_seconds": 5, "temp_critical_c": 95,
                 "ecc_uncorrected_max": 0, "validator_reward_bps": 1000, "hardware_quorum": 2,
                 "hardware_attestation_max_age_seconds": 3600,
                 "verified_record_seconds": 2_592_000}  # fmt: skip


def market_bytes(codec, payment_mint: Pubkey, stake_mint: Pubkey, treasury: Pubkey,
                 pending: dict | None = None, effective_at: int = 0,
                 totals: dict | None = None) -> bytes:  # fmt: skip
    """A Market account (encoded with the codec): MARKET_PARAMS in force, ``pending`` (changes
    onto them) announced for ``effective_at``."""
    totals = {"staked": 0, "bonded": 0, "burned": 0, "fees": 0, "slashed": 0, "jobs": 0,
              "rewards_unclaimed": 0, "rewards": 0, **(totals or {})}  # fmt: skip
    k = Pubkey.new_unique()
    return codec.encode_account("Market", {
        "authority": k, "creator": k, "pending_authority": Pubkey.default(), "id": 0, "stake_mint": stake_mint,
        "payment_mint": payment_mint, "stake_vault": pda.stake_vault_pda(k), "treasury": treasury,
        "params": MARKET_PARAMS, "pending_params": {**MARKET_PARAMS, **(pending or {})},
        "params_effective_at": effective_at, "paused": False, "totals": totals, "bump": 255,
        "stake_vault_bump": 255, "fee_vault": pda.fee_vault_pda(k), "fee_vault_bump": 254,
    })  # fmt: skip


def test_every_write_builds_against_the_idl(fake, job_bytes, codec):
    """Each write resolves its accounts by IDL name and sends one signed transaction."""
    rpc, client = fake
    pay_mint, stake_mint, treasury = (Pubkey.new_unique() for _ in range(3))
    market = Pubkey.new_unique()
    rpc.accounts[str(market)] = (str(PROGRAM_ID), market_bytes(codec, pay_mint, stake_mint, treasury))
    owner, user, validator, worker = Keypair(), Keypair(), Keypair(), Keypair()
    provider = pda.provider_pda(market, owner.pubkey())
    # Provider bytes by hand (state/provider.rs): 4 empty retired keys, spec gpu_count 1,
    # price 1, status Active.
    provider_raw = (
        hashlib.sha256(b"account:Provider").digest()[:8] + bytes(market) + bytes(owner.pubkey())
        + bytes(worker.pubkey()) + bytes(8) + bytes(40 * 4) + bytes(8) + bytes(32) + b"\x01\x00"
        + bytes(4) + bytes(16) + struct.pack("<Q", 1) + b"\x00" + bytes(8 + 16 + 2 + 36 + 1)
    ).ljust(codec.account_size("Provider"), b"\0")  # fmt: skip
    rpc.accounts[str(provider)] = (str(PROGRAM_ID), provider_raw)

    client.initialize_market(owner, 0, stake_mint, pay_mint, treasury, {"fee_bps": 100})
    client.register_provider(owner, worker.pubkey(), {"gpu_model": "H100", "gpu_count": 1,
                             "vram_mib": 1, "region": "eu"}, 5, market)  # fmt: skip
    client.stake(owner, market, 10)
    client.register_validator(validator, market, 10, "http://127.0.0.1:8080")
    rpc.accounts[str(pda.validator_pda(market, validator.pubkey()))] = (
        str(PROGRAM_ID), validator_bytes(market, validator.pubkey()))
    _, job = client.create_job(user, market, provider, 1, 1, 600, committee=[validator.pubkey()], quorum=1)
    rpc.accounts[str(job)] = (str(PROGRAM_ID), job_bytes(market, user.pubkey(), provider, 1,
                                                         committee=[validator.pubkey()]))  # fmt: skip
    client.accept_job(worker, job)
    client.finish_job(user, job)
    client.close_job(user, job)
    item = SettleItem(job, 1, 60, 1_700_000_060, bytes(32), worker.pubkey(), bytes(64), 60)
    client.settle(validator, [item])
    assert len(rpc.sent) == 9
    for tx in rpc.sent:
        tx.verify()
    # register_provider carries the idempotent ATA creation first
    reg = rpc.sent[1].message
    assert str(reg.account_keys[reg.instructions[0].program_id_index]).startswith("ATokenGP")
    # the settle transaction is [Ed25519, settle]
    st = rpc.sent[-1].message
    programs = [str(st.account_keys[ix.program_id_index]) for ix in st.instructions]
    assert programs == ["Ed25519SigVerify111111111111111111111111111", str(PROGRAM_ID)]
