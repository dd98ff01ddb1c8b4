"""The validator network end to end: real processes on 127.0.0.1, figures read back
from the chain.

One module-wide network: the local chain (``gpum-localnet``), a market with 2 s windows and
``max_missed_windows`` 2, provider A (4 simulated GPUs, one ``gpum-worker --simulate`` that
finds each job's committee on chain) and four ``gpum-validator`` nodes: V0, V1, V2 with the
job's own health terms and V3 with a ``--temp-critical-c`` (30 C) below every temperature the
simulator produces. Provider A's owner also registers a validator of its own (no node: it is
never on a committee). Four jobs of one GPU each run at once on provider A::

    J1  committee [V0]            quorum 1
    J2  committee [V0, V1, V2]    quorum 2
    J3  committee [V0, V1, V2]    quorum 3
    J4  committee [V0, V3]        quorum 2   (V3 approves less)
    J5  committee [V0, VB]        quorum 2   (VB byzantine; created by its test)

VB is no node: its registered endpoint is a thread of the test that answers like a member
whose totals are inflated by a million seconds and that signs whatever it is asked; then, as
VB's operator, the test asks the leader that got VB's signature for a seq to co-sign a higher
value at that seq, handing it the conflicting attestation that gets VB's bond slashed.

The tests run in file order and share the network: V2 is killed and restarted with its
database, V1 is killed and restarted on a fresh database, V0 (J1's only member) is down for
six windows and comes back without blaming the provider, then provider B (its own worker)
gets a job whose worker stops, and last V3 requests its exit while J4 goes on settling with
it. After every step each job's books are checked against the token balances on chain
(``_assert_conserved``). The nodes settle every 3 windows, so
settlement lags the proofs by more than ``max_missed_windows`` windows all the time; no
provider may be slashed for that. Process logs are in the module's tmp dir (``network*``).
"""

from __future__ import annotations

import base64
import itertools
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from gpu_market import pda, tokens
from gpu_market.accounts import JobView
from gpu_market.errors import GpuMarketError
from gpu_market.processes import JsonServer, Processes, free_port, tool, wait_http
from gpu_market.receipt import attestation_signature, receipt_message, sign_receipt
from gpu_market.settle import Attestation, SettleAccounts, SettleItem, settle_instructions
from gpum_validator.attest import sign_request_message
from harness import Market, Network, wait_until
from solders.keypair import Keypair
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

WINDOW = 2  # seconds
MAX_MISSED = 2  # windows
SETTLE_EVERY = 3  # windows: settlement always lags more than MAX_MISSED windows
PRICE = 1_000  # payment base units per GPU-second
DEPOSIT = 5_000_000  # lasts far longer than the module
STAKE = 1_000_000
BOND = 10_000
DOWNTIME_SLASH_BPS = 100
STRICT = 3  # V3's index
STRICT_TEMP_C = 30  # the simulator's GPUs never cool below ~38 C (simulate.py)


@dataclass
class JobRecord:
    address: Pubkey
    provider: str  # "A" or "B"
    deposited: int  # the user's balance drop at create_job, read from chain
    closed: JobView | None = None  # the last view before close_job
    refunded_at_close: int = 0


@dataclass
class Net(Network):
    admin: Keypair
    user: Keypair
    owners: dict[str, Keypair]
    workers: dict[str, Keypair]
    providers: dict[str, Pubkey]
    validators: list[Keypair]
    vports: list[int]
    market: Pubkey
    payment_mint: Pubkey
    user_start: int
    supply_start: int
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    vproc: dict[int, subprocess.Popen] = field(default_factory=dict)
    vname: dict[int, str] = field(default_factory=dict)
    vdb: dict[int, Path] = field(default_factory=dict)
    wproc: dict[str, subprocess.Popen] = field(default_factory=dict)
    stopped: set[str] = field(default_factory=set)  # log names of processes stopped on purpose
    max_lag: dict[str, int] = field(default_factory=dict)  # chain time - last_window_end, Running
    byzantine: Keypair | None = None  # VB, once its test registered it

    # -- processes ------------------------------------------------------------------------
    def start_validator(self, i: int, tag: str = "", db: Path | None = None) -> None:
        self.vdb[i] = db or self.vdb.get(i) or self.workdir / f"validator{i}.sqlite"
        argv = [tool("gpum-validator"), "run", "--url", self.url,
                "--keypair", str(self.workdir / f"validator{i}.json"),
                "--market", str(self.market), "--listen", f"127.0.0.1:{self.vports[i]}",
                "--db", str(self.vdb[i]), "--settle-every", str(SETTLE_EVERY),
                "--settle-interval", "1"]
        if i == STRICT:
            argv += ["--temp-critical-c", str(STRICT_TEMP_C)]
        self.vname[i] = f"validator{i}{tag}"
        self.vproc[i] = self.procs.start(self.vname[i], argv)

    def start_worker(self, p: str, gpus: int) -> None:
        self.wproc[p] = self.procs.start(f"worker{p}", [
            tool("gpum-worker"), "run", "--simulate", "--gpus", str(gpus), "--seed", "1",
            "--key", str(self.workdir / f"worker{p}.json"),
            "--db", str(self.workdir / f"worker{p}-outbox.sqlite"),
            "--window-seconds", str(WINDOW), "--poll-seconds", "1", "--rpc-url", self.url,
            "--program-id", str(self.client.program_id), "--market", str(self.market),
            "--provider", str(self.providers[p])])

    def kill(self, proc: subprocess.Popen, name: str) -> None:
        """SIGKILL the process group (no clean shutdown), reaped at once."""
        self.stopped.add(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def check_alive(self) -> None:
        for name, proc in self.procs.children:
            if name not in self.stopped and proc.poll() is not None:
                raise AssertionError(f"{name} exited with code {proc.returncode}:\n"
                                     f"{self.procs.tail(name, 40)}")

    def diag(self) -> str:
        names = ["workerA", "workerB", *self.vname.values()]
        return "\n".join(f"--- {n}.log\n{self.procs.tail(n, 25)}" for n in names
                         if (self.workdir / f"{n}.log").exists())

    # -- chain reads ----------------------------------------------------------------------
    def job(self, name: str) -> JobView:
        view = self.client.fetch_job(self.jobs[name].address)
        assert view is not None, f"job {name} is gone"
        return view

    def jobs_now(self) -> dict[str, JobView]:
        """Every open job account, one RPC call; samples how late settlement is."""
        names = [n for n, r in self.jobs.items() if r.closed is None]
        keys = [self.jobs[n].address for n in names]
        infos = self.client._account_infos(keys)
        views = {n: self.client._decode_info(k, i, "Job") for n, k, i in zip(names, keys, infos)}
        now = self.client.chain_time()
        for n, j in views.items():
            if j is not None and j.status == "running" and j.last_seq > 0:
                self.max_lag[n] = max(self.max_lag.get(n, 0), now - j.last_window_end)
        return views

    def wait(self, what: str, cond: Callable[[dict[str, JobView]], Any], timeout: float) -> Any:
        return self.wait_for(lambda: cond(self.jobs_now()), what, timeout)

    def wait_settlements(self, names: list[str], n: int, timeout: float) -> dict[str, list[int]]:
        """Until each job in ``names`` got ``n`` more settlements (``last_seq`` moved on and
        ``paid_seconds`` grew); returns each job's paid_seconds after each of them."""
        start = self.jobs_now()
        seen = {k: [start[k].last_seq] for k in names}
        paid = {k: [start[k].paid_seconds] for k in names}

        def step(views: dict[str, JobView]) -> bool:
            for k in names:
                if views[k].last_seq != seen[k][-1]:
                    seen[k].append(views[k].last_seq)
                    paid[k].append(views[k].paid_seconds)
            return all(len(seen[k]) > n for k in names)

        self.wait(f"{n} settlement(s) of {names}", step, timeout)
        for k in names:
            assert paid[k][-1] > paid[k][0], (k, paid[k], self.diag())
        return paid

    def wait_for(self, fn: Callable[[], Any], what: str, timeout: float) -> Any:
        return wait_until(what, fn, timeout, check=self.check_alive, diag=self.diag)

    def balance(self, owner: Pubkey) -> int:
        return self.client.token_balance(tokens.ata(owner, self.payment_mint))

    def validator_view(self, authority: Pubkey) -> Any:
        return self.client.fetch_validator(pda.validator_pda(self.market, authority))


def _metric(port: int, name: str, labels: str = "") -> float:
    """A counter of a node's /metrics (0 when absent)."""
    with httpx.Client(timeout=5) as h:
        text = h.get(f"http://127.0.0.1:{port}/metrics").text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and labels in line and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _db_rows(db: Path, sql: str, *args: Any) -> list[tuple]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def _assert_conserved(net: Net) -> None:
    """``_check_conserved`` on a quiet snapshot: the nodes keep settling while the test reads
    account after account, so a check whose reads straddled a settlement (some job's
    ``last_seq`` or ``paid_seconds`` moved meanwhile) is read again; one that saw no change
    must hold."""
    def marks() -> dict[str, tuple[int, int, str]]:
        return {n: (j.last_seq, j.paid_seconds, j.status) for n, j in net.jobs_now().items()
                if j is not None}

    for _ in range(20):
        before = marks()
        try:
            _check_conserved(net)
            return
        except AssertionError:
            if marks() == before:
                raise
        time.sleep(0.2)
    _check_conserved(net)


def _check_conserved(net: Net) -> None:
    """Every token of every deposit is where the books say, read back from chain balances:
    deposited == paid_provider + paid_validators + paid_treasury + burned + refunded +
    booked escrow per job (the escrow holds exactly the booked part), and the sums of those
    are the providers' payment accounts, the fee vault (treasury share and unclaimed
    validator rewards), the mint's burned supply and the user's refunds."""
    c = net.client
    sums = {"A": 0, "B": 0, "fees": 0, "validators": 0, "burned": 0, "deposited": 0,
            "refunded": 0}
    for name, rec in net.jobs.items():
        j = rec.closed or net.job(name)
        escrow = 0 if rec.closed else c.token_balance(pda.escrow_pda(rec.address))
        refunded = j.refunded + rec.refunded_at_close
        booked = j.booked_escrow - rec.refunded_at_close
        moved = j.paid_provider + j.paid_validators + j.paid_treasury + j.burned
        assert j.deposited == rec.deposited, name
        assert escrow == booked >= 0, (name, escrow, booked)
        assert rec.deposited == moved + refunded + booked, name
        # what left the escrow is exactly the paid seconds at the job's rate
        assert moved == j.paid_seconds * j.terms.rate_per_second, (name, moved, j.paid_seconds)
        assert j.paid_seconds <= j.claimed_seconds, name
        sums[rec.provider] += j.paid_provider
        sums["fees"] += j.paid_treasury + j.paid_validators
        sums["validators"] += j.paid_validators
        sums["burned"] += j.burned
        sums["deposited"] += j.deposited
        sums["refunded"] += refunded
    for p, owner in net.owners.items():
        assert net.balance(owner.pubkey()) == sums[p], p
    assert c.token_balance(pda.fee_vault_pda(net.market)) == sums["fees"]
    assert net.supply_start - c.mint_supply(net.payment_mint) == sums["burned"]
    assert net.user_start - net.balance(net.user.pubkey()) == sums["deposited"] - sums["refunded"]
    extra = [net.byzantine] if net.byzantine else []
    earned = sum(net.validator_view(k.pubkey()).rewards_earned
                 for k in [*net.validators, net.owners["A"], *extra])
    assert earned == sums["validators"]


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory,
        market_factory: Callable[..., Market]) -> Iterator[Net]:
    workdir: Path = tmp_path_factory.mktemp("network")
    staked = ["ownerA", "ownerB", *(f"validator{i}" for i in range(4))]
    m = market_factory(workdir, ["user", "workerA", "workerB", *staked], {
        "window_seconds": WINDOW, "max_missed_windows": MAX_MISSED, "fee_bps": 1000,
        "burn_bps": 5000, "min_stake_per_gpu": 100, "validator_min_bond": 100,
        "unbonding_seconds": 0, "downtime_slash_bps": DOWNTIME_SLASH_BPS},
        stake=dict.fromkeys(staked, STAKE + BOND), payment={"user": 10 * DEPOSIT})
    url, client, admin, user, market = m.url, m.client, m.admin, m.kps["user"], m.address
    owners = {p: m.kps[f"owner{p}"] for p in "AB"}
    workers = {p: m.kps[f"worker{p}"] for p in "AB"}
    validators = [m.kps[f"validator{i}"] for i in range(4)]
    payment_mint, user_pay = m.payment_mint, m.payment_account("user")
    procs = Processes(workdir)
    try:
        providers = {}
        for p, gpus in (("A", 5), ("B", 1)):
            spec = {"gpu_model": "Simulated H100", "gpu_count": gpus, "vram_mib": 81920,
                    "region": "localnet"}
            client.register_provider(owners[p], workers[p].pubkey(), spec, PRICE, market)
            client.stake(owners[p], market, STAKE)
            providers[p] = pda.provider_pda(market, owners[p].pubkey())
        vports = [free_port() for _ in validators]
        for kp, vport in zip(validators, vports):
            client.register_validator(kp, market, BOND, f"http://127.0.0.1:{vport}")
        # The provider's own validator: bonded and Active, never on a committee (no node).
        client.register_validator(owners["A"], market, BOND, "http://127.0.0.1:9")

        net = Net(workdir, procs, url, client, admin, user, owners, workers, providers,
                  validators, vports, market, payment_mint, client.token_balance(user_pay),
                  client.mint_supply(payment_mint))
        for i in range(len(validators)):
            net.start_validator(i)
        for vport in vports:
            wait_http(f"http://127.0.0.1:{vport}/health", timeout=60)
        v = [k.pubkey() for k in validators]
        for job_id, (name, committee, quorum) in enumerate([
                ("J1", [v[0]], 1), ("J2", v[:3], 2), ("J3", v[:3], 3), ("J4", [v[0], v[3]], 2)],
                start=1):
            _create_job(net, name, "A", job_id, committee, quorum)
        net.start_worker("A", gpus=5)
        yield net
    finally:
        procs.stop_all()


def _create_job(net: Net, name: str, p: str, job_id: int, committee: list[Pubkey],
                quorum: int) -> Pubkey:
    before = net.balance(net.user.pubkey())
    _, job = net.client.create_job(net.user, net.market, net.providers[p], job_id, 1, DEPOSIT,
                                   committee=committee, quorum=quorum)
    net.jobs[name] = JobRecord(job, p, before - net.balance(net.user.pubkey()))
    j = net.client.fetch_job(job)
    assert (j.committee, j.terms.quorum, j.status) == (committee, quorum, "open")
    return job


def _error(fn: Callable[..., Any], *args: Any) -> str:
    with pytest.raises(GpuMarketError) as info:
        fn(*args)
    return info.value.name


# ----------------------------------------------------------------------------- scenarios


def test_committees_of_one_two_of_three_and_three_of_three_all_settle(net: Net) -> None:
    paid = net.wait_settlements(["J1", "J2", "J3"], 2, timeout=90)
    for name in ("J1", "J2", "J3"):
        j = net.job(name)
        assert j.status == "running" and j.deposited == DEPOSIT, name
        assert paid[name] == sorted(paid[name]), paid  # paid_seconds only grows
        assert j.claimed_seconds >= j.paid_seconds > 0
    # Four jobs with four committees run at once on provider A's one worker.
    assert net.client.fetch_provider(net.providers["A"]).gpus_in_use == 4
    # The attesters of each settlement were credited: J3 needs all three signatures.
    for i in range(3):
        view = net.validator_view(net.validators[i].pubkey())
        assert view.rewards_earned > 0, (i, net.diag())
    # Only members lead: V1 and V2 never submit J1's settlements; V0 submits some.
    assert net.validator_view(net.validators[0].pubkey()).settlements > 0
    accepted = {i: _db_rows(net.vdb[i], "SELECT COUNT(*) FROM proofs WHERE job = ? AND "
                            "decision = 'accepted'", bytes(net.jobs["J1"].address))[0][0]
                for i in range(4)}
    assert accepted[0] >= net.job("J1").last_seq and accepted[1] == accepted[2] == accepted[3] == 0
    _assert_conserved(net)


def test_a_stricter_validator_approves_fewer_seconds_and_the_job_still_settles(net: Net) -> None:
    net.wait_settlements(["J4"], 2, timeout=60)
    j = net.job("J4")
    # V3 refuses the critical temperature's second in every window (at most 1 s of 2); a
    # 2-of-2 committee pays what both approved, i.e. V3's total.
    assert 0 < j.paid_seconds <= j.last_seq < j.claimed_seconds, (j, net.diag())
    strict = _db_rows(net.vdb[STRICT], "SELECT seq, approved_seconds, approved_total FROM proofs "
                      "WHERE job = ? AND decision = 'accepted' ORDER BY seq",
                      bytes(net.jobs["J4"].address))
    normal = dict(_db_rows(net.vdb[0], "SELECT seq, approved_seconds FROM proofs WHERE job = ? "
                           "AND decision = 'accepted'", bytes(net.jobs["J4"].address)))
    assert strict and all(a <= 1 for _, a, _ in strict)
    assert sum(normal[s] for s, _, _ in strict if s in normal) > sum(a for _, a, _ in strict)
    totals = {s: t for s, _, t in strict}
    assert totals[j.last_seq] == j.paid_seconds  # the value paid is V3's own total there
    # the same worker's other jobs are paid every claimed second by their normal committees
    j1 = net.job("J1")
    assert j1.paid_seconds > j1.last_seq
    _assert_conserved(net)


def test_the_providers_own_validator_outside_the_committee_settles_nothing(net: Net) -> None:
    c = net.client
    owner, worker = net.owners["A"], net.workers["A"]
    mine = net.validator_view(owner.pubkey())
    assert mine.status == "active" and mine.bond == BOND
    market = c.fetch_market(net.market)

    def forged(name: str, approved_extra: int, attesters: list[Keypair]) -> SettleItem:
        """A receipt the provider signs with its own worker key for the next seq."""
        j = net.job(name)
        seq, cumulative, window_end = j.last_seq + 1, j.claimed_seconds + 2, j.last_window_end + 2
        proof_hash = bytes([7]) * 32
        msg = receipt_message(bytes(c.program_id), bytes(net.market), bytes(net.jobs[name].address),
                              seq, cumulative, window_end, proof_hash)
        approved = j.paid_seconds + approved_extra
        return SettleItem(net.jobs[name].address, seq, cumulative, window_end, proof_hash,
                          worker.pubkey(), sign_receipt(worker, msg), approved,
                          [Attestation(a.pubkey(), attestation_signature(a, msg, approved))
                           for a in attesters])

    def accounts(name: str, submitter: Pubkey, extra: list[Keypair]) -> SettleAccounts:
        return SettleAccounts(
            market=net.market, validator=pda.validator_pda(net.market, submitter),
            provider=net.providers["A"], escrow=pda.escrow_pda(net.jobs[name].address),
            provider_payment_account=tokens.ata(owner.pubkey(), net.payment_mint),
            fee_vault=market.fee_vault, payment_mint=net.payment_mint,
            extra_validators=tuple(pda.validator_pda(net.market, a.pubkey()) for a in extra))

    # The SDK refuses before sending anything ...
    with pytest.raises(ValueError, match="not on the committee"):
        c.settle(owner, [forged("J1", 2, [])])
    # ... and the program refuses the same transaction built by hand: as the submitter of the
    # committee-of-one job, and as the second attester beside a real member of the 2-of-3 job.
    item = forged("J1", 2, [])
    assert _error(c.send, settle_instructions(c.codec, owner.pubkey(), item,
                                              accounts("J1", owner.pubkey(), [])), [owner]) \
        == "NotCommitteeMember"
    v0 = net.validators[0]
    item = forged("J2", 2, [owner])
    acc = accounts("J2", v0.pubkey(), [owner])
    assert _error(c.send, settle_instructions(c.codec, v0.pubkey(), item, acc), [v0]) \
        == "NotCommitteeMember"
    mine = net.validator_view(owner.pubkey())
    assert (mine.settlements, mine.rewards_earned) == (0, 0)

    # Off chain, a node outside a job's committee serves it nothing: V3 is not on J2's.
    job_b = bytes(net.jobs["J2"].address)
    proof, psig, rsig, wkey = _db_rows(
        net.vdb[0], "SELECT proof, proof_signature, receipt_signature, worker_key FROM proofs "
        "WHERE job = ? AND decision = 'accepted' ORDER BY seq DESC LIMIT 1", job_b)[0]
    b64 = lambda b: base64.b64encode(b).decode()
    base = f"http://127.0.0.1:{net.vports[STRICT]}"
    with httpx.Client(timeout=10) as h:
        r = h.post(f"{base}/v1/proofs", json={"proof": b64(proof), "proof_signature": b64(psig),
                                              "receipt_signature": b64(rsig),
                                              "worker_key": str(Pubkey.from_bytes(wkey))})
        assert (r.status_code, r.json()["error"]) == (403, "not_in_committee")
        r = h.post(f"{base}/v1/attestations/query",
                   json={"job": str(net.jobs["J2"].address), "seq": 1})
        assert (r.status_code, r.json()["error"]) == (403, "not_in_committee")
    _assert_conserved(net)


class ByzantineMember:
    """VB's endpoint: answers a query with an honest member's receipt and that member's total
    plus ``INFLATE`` seconds, and signs any value any leader asks for (recorded)."""

    INFLATE = 10**6

    def __init__(self, net: Net, key: Keypair, honest_port: int) -> None:
        self.net, self.key, self.honest = net, key, f"http://127.0.0.1:{honest_port}"
        self.signed: list[tuple[int, int, str]] = []  # (seq, value, leader)
        self.receipts: dict[int, dict[str, Any]] = {}
        self.server = JsonServer(self.handle, self.get)
        self.url = self.server.url

    def get(self, path: str) -> tuple[int, Any]:
        """A worker checks the members' health and heads: answered as the honest member does
        (its head relayed)."""
        if path == "/health":
            return 200, {"ok": True}
        if path.startswith("/v1/jobs/") and path.endswith("/head"):
            with httpx.Client(timeout=5) as h:
                r = h.get(self.honest + path)
            return r.status_code, r.json()
        return 404, {"error": "not_found", "message": "", "retry": False}

    def receipt_msg(self, job: str, seq: int) -> bytes | None:
        r = self.receipts.get(seq)
        if r is None:
            with httpx.Client(timeout=5) as h:
                a = h.post(f"{self.honest}/v1/attestations/query", json={"job": job, "seq": seq})
            if a.status_code != 200:
                return None
            r = self.receipts[seq] = a.json()
        rc = r["receipt"]
        return receipt_message(bytes(self.net.client.program_id), bytes(self.net.market),
                               bytes(Pubkey.from_string(job)), seq, rc["cumulative_seconds"],
                               rc["window_end"], bytes.fromhex(rc["proof_hash"]))

    def handle(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        job, seq = body["job"], body["seq"]
        msg = self.receipt_msg(job, seq)
        if msg is None:
            return 404, {"error": "seq_unknown", "message": "", "retry": False}
        if path == "/v1/attestations/query":
            answer = dict(self.receipts[seq])
            answer["approved_seconds"] += self.INFLATE
            answer["signed_approved_seconds"] = None
            return 200, answer
        if path == "/v1/attestations/sign":
            value = body["approved_seconds"]
            self.signed.append((seq, value, body["leader"]))
            sig = attestation_signature(self.key, msg, value)
            return 200, {"authority": str(self.key.pubkey()),
                         "signature": base64.b64encode(sig).decode()}
        return 404, {"error": "not_found", "message": "", "retry": False}

    def close(self) -> None:
        self.server.close()


def test_a_byzantine_member_is_not_counted_and_its_conflicting_attestations_are_slashed(
        net: Net) -> None:
    c = net.client
    vb = Keypair()
    c.airdrop(vb.pubkey(), 10 * 10**9)
    stake_mint = c.fetch_market(net.market).stake_mint
    tokens.mint_to(c, stake_mint, tokens.create_ata(c, net.admin, vb.pubkey(), stake_mint),
                   net.admin, BOND)
    byz = ByzantineMember(net, vb, net.vports[0])
    try:
        c.register_validator(vb, net.market, BOND, byz.url)
        net.byzantine = vb
        v = [k.pubkey() for k in net.validators]
        _create_job(net, "J5", "A", 9, [v[0], vb.pubkey()], 2)
        paid = net.wait_settlements(["J5"], 3, timeout=120)["J5"]
        j = net.job("J5")
        # Not counted: every settled total is the one the honest member reached (the 2nd
        # highest of {V0, VB + 10**6}), never VB's inflated claim.
        honest = dict(_db_rows(net.vdb[0], "SELECT seq, approved_total FROM proofs WHERE "
                               "job = ? AND decision = 'accepted'", bytes(net.jobs["J5"].address)))
        assert j.paid_seconds == honest[j.last_seq], (j, honest)
        assert all(b - a <= 10 * WINDOW for a, b in itertools.pairwise(paid)), paid
        assert j.paid_seconds <= j.claimed_seconds
        assert byz.signed, "V0 never asked the byzantine member to sign"
        # VB attested a value for a seq; as its operator, ask that leader to co-sign a much
        # higher value at the same seq, committing first with VB's own attestation.
        seq, value, leader = byz.signed[-1]
        port = net.vports[[str(k) for k in v].index(leader)]
        msg = byz.receipt_msg(str(net.jobs["J5"].address), seq)
        assert msg is not None
        high = value + ByzantineMember.INFLATE
        round_ = seq // SETTLE_EVERY
        req = sign_request_message(bytes(net.jobs["J5"].address), seq, high, bytes(vb.pubkey()),
                                   bytes(Pubkey.from_string(leader)), round_, 0)
        b64 = lambda b: base64.b64encode(bytes(b)).decode()
        with httpx.Client(timeout=10) as h:
            r = h.post(f"http://127.0.0.1:{port}/v1/attestations/sign", json={
                "job": str(net.jobs["J5"].address), "seq": seq, "approved_seconds": high,
                "leader": str(vb.pubkey()), "member": str(leader), "round": round_,
                "attempt": 0, "leader_signature": b64(vb.sign_message(req)),
                "leader_attestation": b64(attestation_signature(vb, msg, high))})
        assert (r.status_code, r.json()["error"]) == (409, "above_own_total"), r.text
        # The leader holds two attestations by VB for one seq: its reporter slashes VB's bond.
        net.wait_for(lambda: net.validator_view(vb.pubkey()).bond < BOND, "VB's bond slashed",
                     timeout=60)
        view = net.validator_view(vb.pubkey())
        assert view.status == "exiting", view
        assert _metric(port, "gpum_validator_validator_equivocation_reports_total",
                       'outcome="slashed"') == 1
        assert net.job("J5").paid_seconds <= net.job("J5").claimed_seconds
    finally:
        byz.close()
    _assert_conserved(net)


def test_a_killed_member_stops_a_three_of_three_job_until_it_returns(net: Net) -> None:
    v2 = 2
    net.kill(net.vproc[v2], net.vname[v2])
    # A settlement V2 had already signed may still land; after that J3 has no quorum.
    net.wait_settlements(["J2"], 1, timeout=60)
    frozen = net.job("J3")
    paid = net.wait_settlements(["J2"], 2, timeout=60)
    assert paid["J2"][-1] > paid["J2"][0]
    j3 = net.job("J3")
    assert (j3.last_seq, j3.paid_seconds) == (frozen.last_seq, frozen.paid_seconds), net.diag()
    assert j3.status == "running"
    # The 1-of-1 job does not notice.
    assert net.job("J1").paid_seconds > 0

    net.start_validator(v2, tag="-restarted")  # same key, port and database
    wait_http(f"http://127.0.0.1:{net.vports[v2]}/health", timeout=60)
    paid = net.wait_settlements(["J3"], 1, timeout=90)
    assert paid["J3"][-1] > frozen.paid_seconds
    # V2 kept its history: what it accepted before the kill is still in its database.
    before_kill = _db_rows(net.vdb[v2], "SELECT COUNT(*) FROM proofs WHERE job = ? AND seq <= ? "
                           "AND decision = 'accepted'", bytes(net.jobs["J3"].address),
                           frozen.last_seq)[0][0]
    assert before_kill >= 1
    _assert_conserved(net)


def test_a_member_started_on_a_fresh_database_catches_up(net: Net) -> None:
    v1 = 1
    net.kill(net.vproc[v1], net.vname[v1])
    time.sleep(3 * WINDOW)  # J3 misses windows at V1
    at_restart = net.job("J3")
    fresh = net.workdir / "validator1-fresh.sqlite"
    net.start_validator(v1, tag="-fresh", db=fresh)
    wait_http(f"http://127.0.0.1:{net.vports[v1]}/health", timeout=60)
    # The 3-of-3 job needs V1's attestation: it settles twice more, so V1 took the chain's
    # state as its start and approved the windows it verified since.
    paid = net.wait_settlements(["J3", "J2"], 2, timeout=120)
    assert paid["J3"][-1] > at_restart.paid_seconds
    rows = _db_rows(fresh, "SELECT seq FROM proofs WHERE job = ? AND decision = 'accepted'",
                    bytes(net.jobs["J3"].address))
    # it holds nothing of the job before the chain's state at its start
    assert rows and min(s for (s,) in rows) > at_restart.last_seq
    j3 = net.job("J3")
    (approved_total,) = _db_rows(fresh, "SELECT approved_total FROM jobs WHERE job = ?",
                                 bytes(net.jobs["J3"].address))[0]
    assert approved_total >= j3.paid_seconds
    _assert_conserved(net)


def test_a_validator_back_from_an_outage_does_not_blame_the_provider(net: Net) -> None:
    """V0, J1's only member (quorum 1), is down for 6 windows: the worker keeps J1's proofs.
    Back up on its database, V0 attests no downtime for silence it did not watch; the
    worker's backlog arrives and J1 goes on being paid."""
    v0 = 0
    before = net.job("J1")
    net.kill(net.vproc[v0], net.vname[v0])
    time.sleep(6 * WINDOW)
    net.start_validator(v0, tag="-back")
    wait_http(f"http://127.0.0.1:{net.vports[v0]}/health", timeout=60)
    # Settlements with everything the worker proved while V0 was down.
    net.wait_settlements(["J1"], 2, timeout=120)
    j1 = net.job("J1")
    assert j1.status == "running", net.diag()
    assert j1.paid_seconds > before.paid_seconds + 6 * WINDOW, (before, j1)
    assert _metric(net.vports[v0], "gpum_validator_downtime_reports_total",
                   'outcome="slashed"') == 0
    provider_a = net.client.fetch_provider(net.providers["A"])
    assert provider_a.stake == STAKE and provider_a.reputation.slashes == 0
    _assert_conserved(net)


def test_downtime_is_slashed_when_the_worker_stops_and_not_for_late_settlement(net: Net) -> None:
    c = net.client
    v = [k.pubkey() for k in net.validators]
    _create_job(net, "JB", "B", 5, v[:3], 2)
    net.start_worker("B", gpus=1)
    net.wait_settlements(["JB"], 2, timeout=90)
    provider_b = c.fetch_provider(net.providers["B"])
    assert provider_b.stake == STAKE and provider_b.reputation.slashes == 0

    # Settlement lagged the proofs by more than max_missed_windows windows on JB and on most
    # other jobs (settle every 3 windows, and J3 stood still while V2 and V1 were down; the lag
    # is sampled, so one short-lived lag may go unseen), yet no provider was slashed and no job
    # failed: downtime is measured from proofs seen.
    late = WINDOW * MAX_MISSED
    assert net.max_lag["JB"] > late, net.max_lag
    assert sum(net.max_lag[n] > late for n in ("J1", "J2", "J3", "J4")) >= 3, net.max_lag
    provider_a = c.fetch_provider(net.providers["A"])
    assert provider_a.stake == STAKE and provider_a.reputation.slashes == 0
    assert all(net.job(n).status == "running" for n in ("J1", "J2", "J3", "J4", "JB"))

    # The worker stops (a crash): the committee attests it saw no proof and slashes.
    net.kill(net.wproc["B"], "workerB")
    net.wait("JB failed for downtime", lambda views: views["JB"].status == "failed", timeout=60)
    provider_b = c.fetch_provider(net.providers["B"])
    assert provider_b.stake == STAKE - STAKE * DOWNTIME_SLASH_BPS // 10_000
    assert provider_b.reputation.windows_missed >= MAX_MISSED
    assert provider_b.reputation.slashes >= 1 and provider_b.gpus_in_use == 0
    slashed = sum(_metric(port, "gpum_validator_downtime_reports_total", 'outcome="slashed"')
                  for port in net.vports[:3])
    assert slashed == 1
    # Provider A's worker kept delivering: nothing happened to it.
    assert c.fetch_provider(net.providers["A"]).stake == STAKE
    _assert_conserved(net)

    # The user's close refunds what the books hold in escrow.
    jb = net.job("JB")
    before = net.balance(net.user.pubkey())
    c.close_job(net.user, net.jobs["JB"].address)
    assert net.balance(net.user.pubkey()) - before == jb.booked_escrow > 0
    net.jobs["JB"].closed, net.jobs["JB"].refunded_at_close = jb, jb.booked_escrow
    _assert_conserved(net)


def test_a_member_that_exits_still_settles_the_jobs_it_serves(net: Net) -> None:
    """V3, J4's second member (quorum 2), requests its exit: it joins no new committee, but
    until it withdraws its bond it still answers, co-signs and leads J4's rounds, so its exit
    stalls no second the worker proved."""
    v3 = net.validators[STRICT]
    net.client.request_validator_exit(v3, net.market)
    assert net.validator_view(v3.pubkey()).status == "exiting"
    before = net.job("J4")
    net.wait_settlements(["J4"], 2, timeout=90)
    j4 = net.job("J4")
    assert j4.status == "running" and j4.paid_seconds > before.paid_seconds, (before, j4,
                                                                             net.diag())
    assert j4.paid_seconds <= j4.claimed_seconds
    _assert_conserved(net)
