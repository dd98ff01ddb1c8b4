"""Batched settlement end to end: address lookup tables and v0 settle transactions
on the local chain (``gpum-localnet``) against the real program.

One module-wide chain: a market with 2 s windows, two providers (one GPU-owner each, their own
worker keys) and two validators. The first test drives the SDK by hand: a lookup table is
created and extended, and two jobs of different providers are settled in one v0
transaction. The second runs a real ``gpum-validator run`` node: the test signs each job's
window proofs as the worker and posts them to the node's HTTP intake, and the node settles
several jobs per transaction with a table of its own. After each, every job's books are
checked against the token balances on chain (conservation).
"""

from __future__ import annotations

import base64
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from gpu_market import pda, tokens
from gpu_market.lookup_tables import LookupTable
from gpu_market.processes import (
    Processes,
    free_port,
    tool,
    wait_http,
    write_keypair,
)
from gpu_market.proof import (
    ZERO_HASH,
    GpuWindow,
    WindowProof,
    encode_proof,
    proof_hash,
    receipt_for_proof,
    sign_proof,
)
from gpu_market.receipt import receipt_message, sign_receipt
from gpu_market.settle import SettleItem
from harness import Market, Network, wait_until
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

pytestmark = pytest.mark.e2e
OWN_LOCALNET = "the last test warps the clock, which never goes back (see conftest)"

WINDOW = 2  # seconds
PRICE = 10  # payment base units per GPU-second
DEPOSIT = 1_000_000
STAKE = 100_000
BOND = 10_000


@dataclass
class Chain(Network):
    admin: Keypair
    user: Keypair
    owners: list[Keypair]
    workers: list[Keypair]
    providers: list[Pubkey]
    validators: list[Keypair]
    market: Pubkey
    payment_mint: Pubkey
    user_start: int
    supply_start: int
    jobs: list[Pubkey] = field(default_factory=list)
    next_id: int = 1

    def create_jobs(self, n: int, validator: Keypair) -> list[Pubkey]:
        """``n`` running 1-GPU jobs, alternating providers, committee ``validator``, q 1."""
        out = []
        for i in range(n):
            p = i % len(self.providers)
            _, job = self.client.create_job(self.user, self.market, self.providers[p], self.next_id,
                                            1, DEPOSIT, committee=[validator.pubkey()], quorum=1)
            self.next_id += 1
            self.client.accept_job(self.workers[p], job)
            out.append(job)
        self.jobs += out
        return out

    def provider_index(self, job: Pubkey) -> int:
        view = self.client.fetch_job(job)
        return self.providers.index(view.provider)


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory,
          market_factory: Callable[..., Market]) -> Iterator[Chain]:
    workdir: Path = tmp_path_factory.mktemp("batched")
    staked = ["owner0", "owner1", "validator0", "validator1"]
    m = market_factory(workdir, ["user", "worker0", "worker1", *staked], {
        "window_seconds": WINDOW, "fee_bps": 1000, "burn_bps": 5000,
        "min_stake_per_gpu": 100, "validator_min_bond": 100, "unbonding_seconds": 0},
        stake=dict.fromkeys(staked, STAKE + BOND), payment={"user": 100 * DEPOSIT})
    client, market = m.client, m.address
    owners = [m.kps["owner0"], m.kps["owner1"]]
    workers = [m.kps["worker0"], m.kps["worker1"]]
    validators = [m.kps["validator0"], m.kps["validator1"]]
    procs = Processes(workdir)
    try:
        providers = []
        for owner, worker in zip(owners, workers):
            spec = {"gpu_model": "Simulated H100", "gpu_count": 8, "vram_mib": 81920,
                    "region": "localnet"}
            client.register_provider(owner, worker.pubkey(), spec, PRICE, market)
            client.stake(owner, market, STAKE)
            providers.append(pda.provider_pda(market, owner.pubkey()))
        for kp in validators:
            client.register_validator(kp, market, BOND, "http://127.0.0.1:9")
        yield Chain(workdir, procs, m.url, client, m.admin, m.kps["user"], owners, workers,
                    providers, validators, market, m.payment_mint,
                    client.token_balance(m.payment_account("user")),
                    client.mint_supply(m.payment_mint))
    finally:
        procs.stop_all()


def _assert_conserved(chain: Chain) -> None:
    """Every token of every deposit is where the books say (read back from chain balances):
    deposited == paid_provider + paid_validators + paid_treasury + burned + refunded +
    escrow per job; the providers' payment accounts, the fee vault, the burned supply and the
    user's balance add up to the sums; validators earned exactly what jobs paid them."""
    c = chain.client
    paid = [0] * len(chain.providers)
    fees = burned = deposited = earned = 0
    for job in chain.jobs:
        j = c.fetch_job(job)
        escrow = c.token_balance(pda.escrow_pda(job))
        moved = j.paid_provider + j.paid_validators + j.paid_treasury + j.burned
        assert escrow == j.booked_escrow >= 0, job
        assert j.deposited == moved + j.refunded + escrow, job
        assert moved == j.paid_seconds * j.terms.rate_per_second, job
        assert j.paid_seconds <= j.claimed_seconds
        paid[chain.providers.index(j.provider)] += j.paid_provider
        fees += j.paid_treasury + j.paid_validators
        burned += j.burned
        deposited += j.deposited
        earned += j.paid_validators
    for i, owner in enumerate(chain.owners):
        assert c.token_balance(tokens.ata(owner.pubkey(), chain.payment_mint)) == paid[i]
    assert c.token_balance(pda.fee_vault_pda(chain.market)) == fees
    assert chain.supply_start - c.mint_supply(chain.payment_mint) == burned
    user_now = c.token_balance(tokens.ata(chain.user.pubkey(), chain.payment_mint))
    assert chain.user_start - user_now == deposited
    assert sum(c.fetch_validator(pda.validator_pda(chain.market, v.pubkey())).rewards_earned
               for v in chain.validators) == earned


def _tx_version_and_settles(chain: Chain, sig: str) -> tuple[object, int]:
    resp = chain.client.rpc.get_transaction(Signature.from_string(sig), encoding="json",
                                            max_supported_transaction_version=0)
    raw = json.loads(resp.to_json())["result"]
    settles = sum(1 for name, _ in chain.client.events(sig) if name == "Settled")
    return raw["version"], settles


# ----------------------------------------------------------------------------- SDK


def test_sdk_table_and_two_jobs_in_one_v0_transaction(chain: Chain) -> None:
    c, v = chain.client, chain.validators[0]
    jobs = chain.create_jobs(2, v)
    assert {chain.provider_index(j) for j in jobs} == {0, 1}
    lt = c.lookup_tables
    recent, address = lt.free_recent_slot(v.pubkey())
    lt.create(v, recent)
    empty = lt.fetch(address)
    assert isinstance(empty, LookupTable) and empty.addresses == () and empty.authority == v.pubkey()

    def receipts(seq: int) -> list[SettleItem]:
        out = []
        for job in jobs:
            j = c.fetch_job(job)
            worker = chain.workers[chain.provider_index(job)]
            end = j.started_at + seq * WINDOW
            ph = bytes([seq] * 32)
            msg = receipt_message(bytes(c.program_id), bytes(chain.market), bytes(job), seq,
                                  seq * WINDOW, end, ph)
            out.append(SettleItem(job, seq, seq * WINDOW, end, ph, worker.pubkey(),
                                  sign_receipt(bytes(worker)[:32], msg), seq * WINDOW))
        return out

    items = receipts(1)
    prepared = lt.prepare(v.pubkey(), items)
    shared = list(dict.fromkeys(a for p in prepared for a in p.shared))
    sigs = lt.extend(v, address, shared)
    assert len(sigs) == 1 and lt.extend(v, address, shared) == []  # never appended twice
    table = lt.wait_usable(address)
    assert table.addresses == tuple(shared) and table.usable(lt.slot()) == table.addresses
    # both jobs pack into one transaction with the table
    assert lt.pack(v.pubkey(), prepared, [table], lt.slot()) == [[0, 1]]
    # without a table two quorum-1 items still fit (the 32-byte receipt digest), not three
    assert lt.pack(v.pubkey(), prepared, [], lt.slot()) == [[0, 1]]
    wait_until("the windows end on chain", lambda: c.chain_time() >= items[-1].window_end, 30,
               interval=0.2)
    sig = lt.send_settle(v, prepared, [table])
    assert _tx_version_and_settles(chain, str(sig)) == (0, 2)
    views = c.fetch_jobs([*jobs, Keypair().pubkey()])  # one RPC call; None where no account
    assert [v.address for v in views[:2]] == jobs and views[2] is None
    for j in views[:2]:
        assert (j.last_seq, j.paid_seconds, j.claimed_seconds) == (1, WINDOW, WINDOW)
    # the client's one-call form, the table read back from chain
    items = receipts(2)
    wait_until("window 2 ends on chain", lambda: c.chain_time() >= items[-1].window_end, 30,
               interval=0.2)
    sig = c.settle_v0(v, items, [lt.fetch(address)])
    assert _tx_version_and_settles(chain, str(sig)) == (0, 2)
    assert [j.last_seq for j in c.fetch_jobs(jobs)] == [2, 2]
    _assert_conserved(chain)


# ----------------------------------------------------------------------------- validator


def _proof(chain: Chain, job: Pubkey, seq: int, started_at: int, prev: bytes) -> WindowProof:
    p = chain.provider_index(job)
    return WindowProof(
        program_id=bytes(chain.client.program_id), market=bytes(chain.market), job=bytes(job),
        provider=bytes(chain.providers[p]), worker_key=bytes(chain.workers[p].pubkey()), seq=seq,
        window_start=started_at + (seq - 1) * WINDOW, window_end=started_at + seq * WINDOW,
        sample_interval_ms=1000,
        gpus=(GpuWindow(uuid=f"GPU-{job}", samples=WINDOW, covered_seconds=WINDOW,
                        util_gpu_avg_bp=9000, util_gpu_max_bp=10000, temp_max_c=60,
                        ecc_uncorrected_delta=0),),
        process_list_hash=bytes(32), prev_proof_hash=prev, health_flags=0,
        billable_seconds=WINDOW, cumulative_seconds=seq * WINDOW)


def _signed(chain: Chain, p: WindowProof) -> dict[str, str]:
    worker = chain.workers[chain.providers.index(Pubkey.from_bytes(p.provider))]
    seed = bytes(worker)[:32]
    raw = encode_proof(p)
    return {"proof": base64.b64encode(raw).decode(),
            "proof_signature": base64.b64encode(sign_proof(seed, raw)).decode(),
            "receipt_signature": base64.b64encode(sign_receipt(seed, receipt_for_proof(p, raw))).decode(),
            "worker_key": str(worker.pubkey())}


def _db(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_one_validator_settles_several_jobs_per_transaction(chain: Chain) -> None:
    c, v = chain.client, chain.validators[1]
    vport = free_port()
    keyfile = write_keypair(chain.workdir / "validator1.json", v)
    db = chain.workdir / "validator1.sqlite"
    c.update_validator(v, chain.market, f"http://127.0.0.1:{vport}")
    node = chain.procs.start("validator1", [
        tool("gpum-validator"), "run", "--url", chain.url,
        "--keypair", str(keyfile), "--market", str(chain.market),
        "--listen", f"127.0.0.1:{vport}", "--db", str(db), "--settle-every", "1",
        "--settle-interval", "0.5"])
    wait_http(f"http://127.0.0.1:{vport}/health", timeout=60)

    def diag() -> str:
        return chain.procs.tail("validator1", 40)

    jobs = chain.create_jobs(4, v)
    started = {job: c.fetch_job(job).started_at for job in jobs}
    prev = dict.fromkeys(jobs, ZERO_HASH)
    with httpx.Client(timeout=10) as h:
        for seq in (1, 2):
            end = max(started.values()) + seq * WINDOW
            wait_until(f"window {seq} ends", lambda end=end: time.time() >= end + 0.2, 30,
                       interval=0.2)
            batch = []
            for job in jobs:
                p = _proof(chain, job, seq, started[job], prev[job])
                prev[job] = proof_hash(encode_proof(p))
                batch.append(_signed(chain, p))
            resp = h.post(f"http://127.0.0.1:{vport}/v1/proofs/batch", json={"proofs": batch})
            assert resp.status_code == 200, resp.text
            assert [r.get("status") for r in resp.json()["results"]] == ["accepted"] * 4, resp.text
            wait_until(f"seq {seq} settled", lambda seq=seq: all(
                c.fetch_job(j).last_seq >= seq for j in jobs), 60, diag=diag, interval=0.2)
    assert node.poll() is None, diag()

    rows = _db(db, "SELECT job, seq_to, status, signature FROM intents ORDER BY id")
    assert {r[2] for r in rows} == {"confirmed"} and len(rows) == 8, rows
    by_sig: dict[str, list[bytes]] = {}
    for job, _, _, sig in rows:
        by_sig.setdefault(sig, []).append(job)
    assert max(len(v) for v in by_sig.values()) >= 2, by_sig  # several jobs in one transaction
    assert all(len(set(v)) == len(v) for v in by_sig.values())  # each job once per transaction
    assert len(by_sig) < len(rows)
    shared_sig = next(s for s, js in by_sig.items() if len(js) >= 2)
    assert _tx_version_and_settles(chain, shared_sig) == (0, len(by_sig[shared_sig]))
    # one table, kept in the node's database
    (meta,) = _db(db, "SELECT value FROM meta WHERE key = 'settle_lookup_tables'")
    tables = json.loads(meta[0])
    assert len(tables["tables"]) == 1 and tables["pending"] is None
    table = c.lookup_tables.fetch(Pubkey.from_string(tables["tables"][0]))
    assert table is not None and table.authority == v.pubkey()
    for job in jobs:
        j = c.fetch_job(job)
        assert (j.last_seq, j.paid_seconds) == (2, 2 * WINDOW)
    _assert_conserved(chain)


def test_lookup_table_lifecycle_follows_the_cluster_rules(chain: Chain) -> None:
    """The local chain's SlotHashes advances as a cluster's does (the last 512 slots): one
    authority creates a table per recent slot, and a deactivated table can be closed only
    once its deactivation slot left SlotHashes, its rent then refunded. Runs last in this
    module: it warps the chain's clock."""
    from gpu_market.localchain import warp_time

    c, owner = chain.client, chain.owners[0]

    def lamports(key: Pubkey) -> int:
        return c.rpc.get_balance(key).value

    lt = c.lookup_tables
    first_slot, first = lt.free_recent_slot(owner.pubkey())
    lt.create(owner, first_slot)
    wait_until("a later slot", lambda: lt.slot() > first_slot, 10, interval=0.2)
    second_slot, second = lt.free_recent_slot(owner.pubkey())
    assert second_slot > first_slot and second != first  # a second table, same authority
    lt.create(owner, second_slot)
    assert lt.fetch(first) is not None and lt.fetch(second) is not None

    lt.deactivate(owner, first)
    wait_until("the deactivation slot passed",
               lambda: lt.slot() > lt.fetch(first).deactivation_slot, 10, interval=0.2)
    assert not lt.fetch(first).is_active and lt.fetch(first).usable(lt.slot()) == ()
    with pytest.raises(Exception, match="(?i)deactivat|invalid|custom"):
        lt.close(owner, first)  # still deactivating: its slot is in SlotHashes
    assert lt.fetch(first) is not None
    rent = lamports(first)
    before = lamports(owner.pubkey())
    warp_time(chain.url, 215)  # 512 slots of 0.4 s and a few more
    lt.close(owner, first)
    assert lt.fetch(first) is None and lamports(first) == 0
    assert lamports(owner.pubkey()) == before + rent  # the rent back (the client's payer paid the fee)
    assert lt.fetch(second).is_active
