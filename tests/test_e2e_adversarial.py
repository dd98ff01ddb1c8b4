"""A randomized byzantine committee member against an honest network, checked from chain state.

Real processes on 127.0.0.1: the local chain, a market with 2 s windows, one staked provider
with one ``gpum-worker run --simulate`` (3 GPUs), and three ``gpum-validator run`` nodes: V0
and V1 honest, VB byzantine. VB's node runs behind ``adversary.HostileProxy``, whose port is
VB's endpoint on chain, and the test holds VB's key (``adversary.Pinner``, ``Evidence``)::

    J1  committee [V0, V1, VB]  quorum 2   an honest quorum exists (V0, V1)
    J2  committee [V0, V1]      quorum 2   the adversary is not on it; it shares the worker
    J3  committee [V0, VB]      quorum 2   a stranger's job naming the adversary: no honest
                                           quorum, so no payment guarantee, only safety

First all three run honestly (the proxy forwards) and every claimed second is paid. Then, for
``PERIODS`` periods of ``PERIOD`` seconds, a seeded RNG (``GPUM_ADVERSARY_SEED``, printed)
gives VB one behaviour per period, each attack at least once: trickle (1 byte/s, the worker's
proof deliveries included), refuse (503 or reset), late (past a leader's request timeout),
lie about totals (0, half, a million more), replay (a leader's sign requests forwarded to the
other honest members; sign requests for one low value, forged with VB's key, sent to every
honest member at the newest seq whoever leads the round; a low value an honest quorum signed
settled with VB's key), crash (SIGKILL, restarted on its database at the period's end). Throughout, every attestation by an honest member that VB
sees is kept, and two values by one member for one seq are submitted as
``slash_validator_equivocation``. Then VB turns honest and the network quiesces.

Invariants, from chain state (all collected, then asserted together):

* no honest party slashed: the provider's stake and slash count unchanged, no job failed;
  V0's and V1's bonds and slash counts unchanged, both Active;
* every second the worker proved is paid where an honest quorum exists: after quiescence J1
  and J2 settle past the worker's newest seq at the quiescence mark with
  ``paid_seconds == claimed_seconds`` (the worker's signed cumulative claim);
* settlement of J1 and J2 never lags the chain clock by more than ``LAG_BOUND`` seconds;
* J3 never pays more than V0 approved; ``last_seq``, ``claimed_seconds`` and
  ``paid_seconds`` never decrease;
* conservation per job and over all accounts, and the stake vault covers stakes and bonds.

A quorum-1 committee naming the adversary is left out on purpose: there the adversary alone
is a quorum and may attest the provider's downtime (the program takes ``quorum`` members), the
trust the user chose and the provider accepted.

What failed on the code this was first run against (process logs: the module's tmp dir,
``adversarial*``):

* commit a11a6d6 (validator, worker and program of that commit), seed 1507528842: in the first
  ``replay`` period VB's forged requests pinned V0 and V1 to low values, which VB settled
  itself (J1 seq 9 at 15 of 17 s, J3 at 16 of 17 s, ...); V0, leading J1's seq 12, attested
  20 s in a sign request that reached VB after it had co-signed VB's 16 s, and
  ``slash_validator_equivocation`` took V0's whole bond (Exiting). J2, whose quorum needs V0,
  then never settled again (211 s); a ``trickle`` period later stalled the worker's deliveries
  and the provider was slashed for downtime on J1 (failed); J1 paid 32 of 39 claimed seconds.
* a11a6d6, seed 54 (``trickle`` first): one proof batch trickled to VB blocked the worker's
  only delivery loop; V0 and V1 saw no proof for 3 windows and slashed the provider for
  downtime on every job, J2 (VB not on it) included: stake 1,000,000 -> 970,299, all failed.
* a11a6d6's program with the validator's sign-once gate and round-bound requests and the
  worker's delivery lanes (uncommitted then), seeds 1606348784, 54 and 1507528842: no honest
  party slashed, no job failed, lags under 22 s; but VB, leader of some J1 rounds by the
  attempt it may claim, pinned V0 and V1 to a low value and settled it itself (e.g. seq 23 at
  42 of 46 s, ``approved == paid``), and the program's ``approved - paid <= cumulative -
  claimed`` (mirrored by the leaders' ``attest.settle_bound``) keeps skipped seconds
  unpayable: J1 ends at paid 220 < claimed 228 (213 < 227, 218 < 224). It passes once
  settlement is by totals on chain and in the leaders' bound.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from adversary import MODES, Committees, Evidence, HostileProxy, Pinner
from gpu_market import pda, tokens
from gpu_market.accounts import JobView
from gpu_market.processes import Processes, free_port, tool, wait_http
from harness import Market, Network
from solders.keypair import Keypair
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

WINDOW = 2  # seconds
MAX_MISSED = 3  # windows
SETTLE_EVERY = 2  # windows
PRICE = 1_000  # payment base units per GPU-second
DEPOSIT = 5_000_000
STAKE = 1_000_000
BOND = 10_000
PERIOD = 8.0  # seconds of one behaviour
PERIODS = int(os.environ.get("GPUM_ADVERSARY_PERIODS", "12"))
LATE = 6.0  # seconds: past a leader's 5 s request timeout
LAG_BOUND = 60  # seconds a job with an honest quorum may go unsettled
QUIESCE_TIMEOUT = 120.0
HONEST = ("V0", "V1")
WITH_HONEST_QUORUM = ("J1", "J2")


def _rows(db: Path, sql: str, *args: Any) -> list[tuple]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


@dataclass
class JobRecord:
    address: Pubkey
    user: str
    deposited: int


@dataclass
class World(Network):
    owner: Keypair
    users: dict[str, Keypair]
    user_start: dict[str, int]
    keys: dict[str, Keypair]  # V0, V1, VB
    ports: dict[str, int]  # the nodes' own ports
    market: Pubkey
    provider: Pubkey
    payment_mint: Pubkey
    supply_start: int
    proxy: HostileProxy
    evidence: Evidence
    pinner: Pinner
    known: Committees
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    vproc: dict[str, subprocess.Popen] = field(default_factory=dict)
    worker: subprocess.Popen | None = None
    restarts: int = 0
    seed: int = 0
    rng: random.Random = field(default_factory=random.Random)

    # -- processes ------------------------------------------------------------------------
    def log_name(self, v: str) -> str:
        return f"validator{v}-{self.restarts}" if v == "VB" else f"validator{v}"

    def start_validator(self, v: str) -> None:
        self.vproc[v] = self.procs.start(self.log_name(v), [
            tool("gpum-validator"), "run", "--url", self.url,
            "--keypair", str(self.workdir / f"{v}.json"), "--market", str(self.market),
            "--listen", f"127.0.0.1:{self.ports[v]}", "--db", str(self.workdir / f"{v}.sqlite"),
            "--settle-every", str(SETTLE_EVERY), "--settle-interval", "1"])

    def kill_vb(self) -> None:
        proc = self.vproc["VB"]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def restart_vb(self) -> None:
        if self.vproc["VB"].poll() is not None:
            self.restarts += 1
            self.start_validator("VB")

    def check_alive(self) -> None:
        """Every honest process still runs (VB's node may do as it likes)."""
        for name, proc in self.procs.children:
            if not name.startswith("validatorVB") and proc.poll() is not None:
                raise AssertionError(f"{name} exited with code {proc.returncode}:\n"
                                     f"{self.procs.tail(name, 40)}")

    def diag(self) -> str:
        """The last lines of each node's and the worker's log, HTTP client lines left out."""
        out = []
        for n in ["worker", "validatorV0", "validatorV1", self.log_name("VB")]:
            path = self.workdir / f"{n}.log"
            lines = [ln for ln in path.read_text(errors="replace").splitlines()
                     if " httpx " not in ln] if path.exists() else []
            out.append(f"--- {n}.log\n" + "\n".join(lines[-20:]))
        return "\n".join(out)

    # -- chain reads ----------------------------------------------------------------------
    def snapshot(self) -> tuple[dict[str, JobView], Any, dict[str, Any], int]:
        """Jobs, the provider and the validators in one read, and the chain's clock."""
        names = list(self.jobs)
        vpdas = [pda.validator_pda(self.market, self.keys[v].pubkey()) for v in self.keys]
        keys = [self.jobs[n].address for n in names] + [self.provider, *vpdas]
        infos = self.client._account_infos(keys)
        c = self.client
        jobs = {n: c._decode_info(k, i, "Job") for n, k, i in zip(names, keys, infos)}
        provider = c._decode_info(self.provider, infos[len(names)], "Provider")
        vals = {v: c._decode_info(k, i, "Validator")
                for v, k, i in zip(self.keys, vpdas, infos[len(names) + 1:])}
        return jobs, provider, vals, c.chain_time()

    def job(self, name: str) -> JobView:
        view = self.client.fetch_job(self.jobs[name].address)
        assert view is not None, name
        return view

    def balance(self, owner: Pubkey) -> int:
        return self.client.token_balance(tokens.ata(owner, self.payment_mint))

    def worker_head(self, name: str) -> tuple[int, int]:
        """(newest seq, cumulative seconds) the worker signed for the job, from its outbox."""
        rows = _rows(self.workdir / "worker-outbox.sqlite",
                     "SELECT last_seq, cumulative FROM jobs WHERE job = ?",
                     bytes(self.jobs[name].address))
        return rows[0] if rows else (0, 0)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory,
          market_factory: Callable[..., Market]) -> Iterator[World]:
    seed = int(os.environ.get("GPUM_ADVERSARY_SEED") or random.SystemRandom().randrange(2**32))
    print(f"\nadversary seed: GPUM_ADVERSARY_SEED={seed}")
    workdir: Path = tmp_path_factory.mktemp("adversarial")
    m = market_factory(workdir, ["owner", "worker", "user", "stranger", "V0", "V1", "VB"], {
        "window_seconds": WINDOW, "max_missed_windows": MAX_MISSED, "fee_bps": 1000,
        "burn_bps": 5000, "min_stake_per_gpu": 100, "validator_min_bond": 100,
        "unbonding_seconds": 0, "downtime_slash_bps": 100},
        stake=dict.fromkeys(("owner", "V0", "V1", "VB"), STAKE + BOND),
        payment=dict.fromkeys(("user", "stranger"), 10 * DEPOSIT))
    url, client, market, owner, worker = m.url, m.client, m.address, m.kps["owner"], m.kps["worker"]
    users = {u: m.kps[u] for u in ("user", "stranger")}
    keys = {v: m.kps[v] for v in ("V0", "V1", "VB")}
    payment_mint = m.payment_mint
    user_start = {u: client.token_balance(m.payment_account(u)) for u in users}
    procs = Processes(workdir)
    proxy = None
    try:
        client.register_provider(owner, worker.pubkey(), {
            "gpu_model": "Simulated H100", "gpu_count": 3, "vram_mib": 81920,
            "region": "localnet"}, PRICE, market)
        client.stake(owner, market, STAKE)
        provider = pda.provider_pda(market, owner.pubkey())

        ports = {v: free_port() for v in keys}
        honest_urls = {keys[v].pubkey(): f"http://127.0.0.1:{ports[v]}" for v in HONEST}
        known = Committees(client.program_id, market, {}, honest_urls)
        say = print
        rng = random.Random(seed)
        evidence = Evidence(client, keys["VB"], known, say)
        pinned: set[tuple[str, int]] = set()
        proxy_port = free_port()
        proxy = HostileProxy(proxy_port, f"http://127.0.0.1:{ports['VB']}", known, evidence,
                             keys["VB"].pubkey(), random.Random(rng.random()), LATE)
        proxy.pinned_seqs = pinned
        pinner = Pinner(keys["VB"], known, evidence, random.Random(rng.random()), pinned,
                        SETTLE_EVERY, client, workdir / "VB.sqlite", say)
        for v, kp in keys.items():
            endpoint = f"http://127.0.0.1:{proxy_port if v == 'VB' else ports[v]}"
            client.register_validator(kp, market, BOND, endpoint)

        w = World(workdir, procs, url, client, owner, users, user_start, keys, ports, market,
                  provider, payment_mint, client.mint_supply(payment_mint), proxy, evidence,
                  pinner, known)
        w.seed, w.rng = seed, rng
        for v in keys:
            w.start_validator(v)
        for v in keys:
            wait_http(f"http://127.0.0.1:{ports[v]}/health", timeout=60)
        v0, v1, vb = (keys[v].pubkey() for v in ("V0", "V1", "VB"))
        for job_id, (name, user, committee, quorum) in enumerate([
                ("J1", "user", [v0, v1, vb], 2), ("J2", "user", [v0, v1], 2),
                ("J3", "stranger", [v0, vb], 2)], start=1):
            before = w.balance(users[user].pubkey())
            _, job = client.create_job(users[user], market, provider, job_id, 1, DEPOSIT,
                                       committee=committee, quorum=quorum)
            w.jobs[name] = JobRecord(job, user, before - w.balance(users[user].pubkey()))
            known.jobs[str(job)] = committee
        w.worker = procs.start("worker", [
            tool("gpum-worker"), "run", "--simulate", "--gpus", "3", "--seed", "1",
            "--key", str(workdir / "worker.json"), "--db", str(workdir / "worker-outbox.sqlite"),
            "--window-seconds", str(WINDOW), "--poll-seconds", "1", "--rpc-url", url,
            "--program-id", str(client.program_id), "--market", str(market),
            "--provider", str(provider)])
        yield w
    finally:
        if proxy is not None:
            proxy.close()
        procs.stop_all()


# ----------------------------------------------------------------------------- invariants


def _conservation_problems(w: World) -> list[str]:
    """Every token of every deposit is where the books say, read back from chain balances
    (see ``test_e2e_network._check_conserved``), and the stake vault covers every stake and
    bond. Reads straddling a settlement are read again; a quiet read that fails is reported."""
    def marks() -> dict[str, tuple[int, int, str]]:
        return {n: (j.last_seq, j.paid_seconds, j.status) for n, j in w.snapshot()[0].items()}

    for _ in range(20):
        before = marks()
        problems = _conservation_once(w)
        if not problems or marks() == before:
            return problems
        time.sleep(0.2)
    return _conservation_once(w)


def _conservation_once(w: World) -> list[str]:
    c = w.client
    out: list[str] = []
    sums = {"provider": 0, "fees": 0, "validators": 0, "burned": 0}
    by_user = {u: 0 for u in w.users}
    for name, rec in w.jobs.items():
        j = w.job(name)
        escrow = c.token_balance(pda.escrow_pda(rec.address))
        moved = j.paid_provider + j.paid_validators + j.paid_treasury + j.burned
        if not (j.deposited == rec.deposited == moved + j.refunded + j.booked_escrow):
            out.append(f"{name}: deposited {rec.deposited} (chain {j.deposited}) != moved "
                       f"{moved} + refunded {j.refunded} + escrow {j.booked_escrow}")
        if escrow != j.booked_escrow:
            out.append(f"{name}: escrow balance {escrow} != booked {j.booked_escrow}")
        if moved != j.paid_seconds * j.terms.rate_per_second:
            out.append(f"{name}: {moved} left the escrow for {j.paid_seconds} paid seconds")
        if j.paid_seconds > j.claimed_seconds:
            out.append(f"{name}: paid {j.paid_seconds} > claimed {j.claimed_seconds}")
        sums["provider"] += j.paid_provider
        sums["fees"] += j.paid_treasury + j.paid_validators
        sums["validators"] += j.paid_validators
        sums["burned"] += j.burned
        by_user[rec.user] += j.deposited - j.refunded
    if w.balance(w.owner.pubkey()) != sums["provider"]:
        out.append(f"provider owner holds {w.balance(w.owner.pubkey())}, jobs paid it "
                   f"{sums['provider']}")
    if c.token_balance(pda.fee_vault_pda(w.market)) != sums["fees"]:
        out.append("fee vault != treasury + validator shares")
    if w.supply_start - c.mint_supply(w.payment_mint) != sums["burned"]:
        out.append("burned supply != burned by the jobs")
    for u, kp in w.users.items():
        if w.user_start[u] - w.balance(kp.pubkey()) != by_user[u]:
            out.append(f"{u}'s balance is not its deposits less refunds")
    vals = {v: c.fetch_validator(pda.validator_pda(w.market, k.pubkey()))
            for v, k in w.keys.items()}
    if sum(v.rewards_earned for v in vals.values()) != sums["validators"]:
        out.append("validators' rewards_earned != the jobs' validator shares")
    p = c.fetch_provider(w.provider)
    m = c.fetch_market(w.market)
    owed = p.stake + p.unbonding.amount + sum(v.bond + v.unbonding.amount for v in vals.values())
    vault = c.token_balance(m.stake_vault)
    if vault < owed:
        out.append(f"stake vault {vault} < stakes and bonds {owed}")
    return out


def _safety_problems(w: World) -> list[str]:
    """No honest party slashed; nothing failed for downtime."""
    jobs, provider, vals, _ = w.snapshot()
    out = []
    if provider.stake != STAKE or provider.reputation.slashes != 0:
        out.append(f"honest provider slashed: stake {provider.stake}, slashes "
                   f"{provider.reputation.slashes}, windows_missed "
                   f"{provider.reputation.windows_missed}")
    for name, j in jobs.items():
        if j.status not in ("running", "finishing", "completed"):
            out.append(f"{name} is {j.status}")
    for v in HONEST:
        view = vals[v]
        if (view.bond, view.slashes, view.status) != (BOND, 0, "active"):
            out.append(f"honest validator {v} slashed: bond {view.bond}, slashes "
                       f"{view.slashes}, status {view.status}")
    return out


# ----------------------------------------------------------------------------- scenarios


def _settled_twice(w: World, timeout: float) -> dict[str, JobView]:
    deadline = time.monotonic() + timeout
    first: dict[str, int] = {}
    while True:
        w.check_alive()
        jobs = w.snapshot()[0]
        for n, j in jobs.items():
            if j.last_seq > 0:
                first.setdefault(n, j.last_seq)
        if all(n in first and j.last_seq > first[n] for n, j in jobs.items()):
            return jobs
        if time.monotonic() > deadline:
            raise AssertionError(f"not every job settled twice within {timeout:.0f}s: "
                                 f"{ {n: (j.status, j.last_seq) for n, j in jobs.items()} }\n"
                                 f"{w.diag()}")
        time.sleep(0.5)


def test_an_honest_network_pays_every_claimed_second(world: World) -> None:
    w = world
    jobs = _settled_twice(w, timeout=120)
    for name, j in jobs.items():
        assert j.status == "running", name
        assert 0 < j.paid_seconds == j.claimed_seconds, (name, j.paid_seconds, j.claimed_seconds)
    assert _safety_problems(w) == []
    assert _conservation_problems(w) == []


def _schedule(rng: random.Random) -> list[str]:
    """Every attack once, in random order, then random behaviours, ``PERIODS`` in all."""
    attacks = [m for m in MODES if m != "honest"]
    rng.shuffle(attacks)
    return (attacks + [rng.choice(MODES) for _ in range(PERIODS)])[:max(PERIODS, len(attacks))]


def test_a_random_byzantine_member_cannot_slash_honest_parties_or_keep_seconds_unpaid(
        world: World) -> None:
    w = world
    schedule = _schedule(w.rng)
    print(f"adversary schedule ({PERIOD:.0f} s each): {schedule}")
    problems: list[str] = []
    history: dict[str, tuple[int, int, int]] = {}
    max_lag: dict[str, int] = {n: 0 for n in WITH_HONEST_QUORUM}
    quorum = {n: w.job(n).terms.quorum for n in w.jobs}
    pin_jobs = [n for n in w.jobs if quorum[n] > 1 and w.keys["VB"].pubkey() in w.job(n).committee]

    def sample() -> None:
        w.check_alive()
        jobs, _, _, now = w.snapshot()
        for n, j in jobs.items():
            mark = (j.last_seq, j.claimed_seconds, j.paid_seconds)
            prev = history.get(n)
            if prev is not None and any(a < b for a, b in zip(mark, prev)):
                problems.append(f"{n} went back: (last_seq, claimed, paid) {prev} -> {mark}")
            history[n] = mark
            if n in max_lag and j.status == "running" and j.last_seq > 0:
                max_lag[n] = max(max_lag[n], now - j.last_window_end)

    started = time.monotonic()
    try:
        for i, mode in enumerate(schedule):
            print(f"[{time.monotonic() - started:5.0f}s] period {i}: VB {mode}")
            w.proxy.set_mode(mode)
            if mode == "crash":
                w.kill_vb()
            end = time.monotonic() + PERIOD
            next_sample = 0.0
            while time.monotonic() < end:
                if time.monotonic() >= next_sample:
                    sample()
                    next_sample = time.monotonic() + 1.0
                if mode == "replay":
                    for n in pin_jobs:
                        seq, _ = w.worker_head(n)
                        if seq > 0:
                            job = str(w.jobs[n].address)
                            w.pinner.pin(job, seq, history[n][2])
                            w.pinner.settle_low(job, seq, quorum[n])
                w.evidence.submit_all()
                time.sleep(0.2)
            if mode == "crash":
                w.restart_vb()
    finally:
        # VB turns honest: trickles and waits end, its node runs again.
        w.proxy.release()
        w.restart_vb()
    print(f"[{time.monotonic() - started:5.0f}s] VB honest; quiescing")
    time.sleep(2 * WINDOW)
    w.evidence.submit_all()
    marks = {n: w.worker_head(n) for n in WITH_HONEST_QUORUM}
    deadline = time.monotonic() + QUIESCE_TIMEOUT
    caught_up: dict[str, JobView] = {}
    while len(caught_up) < len(marks) and time.monotonic() < deadline:
        sample()
        jobs = w.snapshot()[0]
        for n, (seq, cumulative) in marks.items():
            j = jobs[n]
            ended = j.status not in ("running", "finishing")
            if ended or (j.last_seq >= seq and j.paid_seconds == j.claimed_seconds
                         and j.paid_seconds >= cumulative):
                caught_up.setdefault(n, j)
        time.sleep(1.0)
    print(f"[{time.monotonic() - started:5.0f}s] quiesced: {sorted(caught_up)}")

    # -- the invariants ---------------------------------------------------------------------
    problems += _safety_problems(w)
    jobs = w.snapshot()[0]
    for n, (seq, cumulative) in marks.items():
        j = caught_up.get(n, jobs[n])
        if not (j.last_seq >= seq and j.paid_seconds == j.claimed_seconds >= cumulative):
            problems.append(
                f"{n} (honest quorum): worker proved seq {seq} / {cumulative} s at the mark; "
                f"chain after {QUIESCE_TIMEOUT:.0f}s: last_seq {j.last_seq}, claimed "
                f"{j.claimed_seconds}, paid {j.paid_seconds} ({j.status})")
        if max_lag[n] > LAG_BOUND:
            problems.append(f"{n} (honest quorum) went {max_lag[n]} s unsettled (bound "
                            f"{LAG_BOUND} s)")
    j3 = jobs["J3"]
    if j3.last_seq > 0:
        approved = _rows(w.workdir / "V0.sqlite", "SELECT approved_total FROM proofs WHERE "
                         "job = ? AND seq = ? AND decision = 'accepted'",
                         bytes(w.jobs["J3"].address), j3.last_seq)
        if approved and j3.paid_seconds > approved[0][0]:
            problems.append(f"J3 paid {j3.paid_seconds} s, V0 approved {approved[0][0]}")
    problems += _conservation_problems(w)

    vb = w.client.fetch_validator(pda.validator_pda(w.market, w.keys["VB"].pubkey()))
    print(f"proxy requests by (mode, path): {dict(sorted(w.proxy.counts.items()))}")
    print(f"pins: {len(w.pinner.pinned)} "
          f"(signed: {sum(s == 200 for _, s in w.pinner.pinned.values())}); "
          f"equivocation cases: {w.evidence.submitted}")
    final = [(n, j.status, j.last_seq, j.claimed_seconds, j.paid_seconds)
             for n, j in jobs.items()]
    print(f"VB: bond {vb.bond}, status {vb.status}, slashes {vb.slashes}; max lag {max_lag}; "
          f"final (status, last_seq, claimed, paid) {final}")
    assert not problems, (f"GPUM_ADVERSARY_SEED={w.seed}, "
                          f"schedule {schedule}:\n" + "\n".join(problems) + "\n" + w.diag())
