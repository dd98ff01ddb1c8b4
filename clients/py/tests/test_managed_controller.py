"""The managed-job controller's state machine against a fake chain, workers and committee
(``FakeWorld``): failover, crashes between every two steps, the budget, no offer, successors
that never start, an old provider coming back, health, exit codes, the user's stop and
migrate.

The fake keeps the program's rules that matter here: a job id is single-use (a create at a
used address fails, a closed job leaves a tombstone), billing stops at ``finish``, a
Finishing job settles only windows up to its end and closes after its grace, cancel refunds
the whole deposit, money is conserved. Every create checks the budget invariant
(``sum(deposited - refunded)`` over the managed job's jobs never above the budget).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from gpu_market import pda
from gpu_market.accounts import JobTerms, JobView, MarketParams
from gpu_market.errors import GpuMarketError, RpcUnavailable
from gpu_market.job_history import Receipt
from gpu_market.managed.controller import Controller
from gpu_market.managed.detect import Head
from gpu_market.managed.policy import RecoveryPolicy
from gpu_market.managed.store import ManagedStore
from gpu_market.managed.template import make_template
from gpu_market.managed.world import CommitteeView
from gpu_market.offers import Offer, rank_key
from gpu_market.proof import HEALTH_TEMP_CRITICAL, WORKLOAD_RUNNING
from gpu_market.workload_api import WorkerApiError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from solders.keypair import Keypair
from solders.pubkey import Pubkey

WINDOW = 10
GRACE = 30
MARKET = Pubkey.new_unique()
PROGRAM = Pubkey.new_unique()
VALIDATORS = [Pubkey.new_unique() for _ in range(3)]


class Crash(BaseException):
    """The controller's process killed (kill -9) at this point."""


@dataclass
class FakeProvider:
    address: Pubkey
    price: int
    endpoint: str
    owner: Pubkey = field(default_factory=Pubkey.new_unique)
    worker_key: Pubkey = field(default_factory=lambda: Keypair().pubkey())
    gpu_model: str = "NVIDIA H100 80GB HBM3"
    gpus: int = 8
    status: str = "active"
    region: str = "us-west"
    alive: bool = True
    """Its worker proves windows and answers."""
    accepts: bool = True
    declines: bool = False
    exit_code: int | None = None
    health_flags: int = 0
    refuse_spec: int | None = None
    """HTTP status its worker answers deliveries with (None: accepts them)."""


@dataclass
class FakeJob:
    address: Pubkey
    job_id: int
    provider: Pubkey
    gpus: int
    rate: int
    deposited: int
    committee: list[Pubkey]
    quorum: int
    workload_hash: bytes
    created_at: int
    status: str = "open"
    started_at: int = 0
    ended_at: int = 0
    paid_seconds: int = 0
    paid_provider: int = 0
    refunded: int = 0
    last_window_end: int = 0
    spec_delivered: int = 0
    container: str | None = None
    proved_until: int = 0


class FakeWorld:
    """The chain, the workers and the committee, in memory, with a clock; ``crash_at``: the
    side-effect point (counted over store commits and sends) at which the controller dies."""

    def __init__(self, user: Keypair, balance: int = 10**12) -> None:
        self.user = user
        self.clock = 1_700_000_000
        self.providers: dict[Pubkey, FakeProvider] = {}
        self.jobs: dict[Pubkey, FakeJob] = {}
        self.tombstones: set[Pubkey] = set()
        self.wallet = balance
        self.budget: int | None = None
        self.points = 0
        self.crash_at: int | None = None
        self.ambiguous_create = False
        self.max_committed = 0
        self.deliveries: list[Pubkey] = []
        self.finished: list[Pubkey] = []
        self.healthy = set(VALIDATORS)

    # -------------------------------------------------------------- test controls

    def point(self, what: str) -> None:
        self.points += 1
        if self.crash_at is not None and self.points == self.crash_at:
            self.crash_at = None
            raise Crash(what)

    def add_provider(self, name: str, price: int, **kw: Any) -> FakeProvider:
        p = FakeProvider(Pubkey.new_unique(), price, f"http://{name}:9000", **kw)
        self.providers[p.address] = p
        return p

    def advance(self, seconds: int) -> None:
        """Time passes: alive workers accept delivered jobs, prove and get paid."""
        for _ in range(seconds):
            self.clock += 1
            for j in self.jobs.values():
                p = self.providers[j.provider]
                if j.status == "open" and p.alive and j.spec_delivered and p.declines:
                    j.status = "declined"
                elif j.status == "open" and p.alive and j.spec_delivered and p.accepts:
                    j.status, j.started_at, j.proved_until = "running", self.clock, self.clock
                    j.container = "running" if p.exit_code is None else "exited"
                if j.container == "running" and p.exit_code is not None:
                    j.container = "exited"
                end = j.ended_at if j.status == "finishing" else self.clock
                if j.status in ("running", "finishing") and p.alive and j.container is not None \
                        and j.proved_until + WINDOW <= end:
                    j.proved_until += WINDOW
                    billable = 0 if p.health_flags else WINDOW
                    self._settle(j, j.paid_seconds + billable, j.proved_until)
                if j.status == "finishing" and not p.alive:
                    j.container = None
                if j.status != "running" and j.container == "running":
                    j.container = None  # a worker removes the container of a job that left Running

    def _settle(self, j: FakeJob, seconds: int, window_end: int) -> None:
        if j.status == "finishing":
            seconds = min(seconds, j.ended_at - j.started_at)
        affordable = (j.deposited - j.paid_provider - j.refunded) // j.rate
        billed = min(seconds - j.paid_seconds, affordable)
        j.paid_seconds += billed
        j.paid_provider += billed * j.rate
        j.last_window_end = window_end
        if j.deposited - j.paid_provider - j.refunded < j.rate:
            j.status = "completed"

    def committed(self) -> int:
        return sum(j.deposited - j.refunded for j in self.jobs.values())

    # -------------------------------------------------------------- World: reads

    def now(self) -> int:
        return self.clock

    def job(self, job: Pubkey) -> JobView | None:
        j = self.jobs.get(job)
        if j is None or job in self.tombstones:
            return None
        terms = JobTerms(rate_per_second=j.rate, fee_bps=0, burn_bps=0, window_seconds=WINDOW,
                         max_missed_windows=3, grace_seconds=GRACE, max_skew_seconds=5,
                         quorum=j.quorum, downtime_slash_bps=0, equivocation_slash_bps=0,
                         reporter_reward_bps=0, temp_critical_c=95, ecc_uncorrected_max=0,
                         validator_reward_bps=0)
        return JobView(market=MARKET, user=self.user.pubkey(), provider=j.provider,
                       job_id=j.job_id, gpu_count=j.gpus, terms=terms, committee=list(j.committee),
                       committee_len=len(j.committee), deposited=j.deposited,
                       claimed_seconds=j.paid_seconds, paid_seconds=j.paid_seconds,
                       paid_provider=j.paid_provider, paid_validators=0, paid_treasury=0,
                       burned=0, refunded=j.refunded, status=j.status, created_at=j.created_at,
                       started_at=j.started_at, ended_at=j.ended_at, last_seq=0,
                       last_receipt_hash=bytes(32), last_window_end=j.last_window_end, bump=0,
                       escrow_bump=0, workload_hash=j.workload_hash, address=job)

    def tombstone(self, job: Pubkey) -> bool:
        return job in self.tombstones

    def provider(self, provider: Pubkey) -> Any:
        p = self.providers.get(provider)
        if p is None:
            return None
        return _Obj(price_per_gpu_second=p.price, endpoint=p.endpoint, worker_key=p.worker_key,
                    status=p.status, owner=p.owner, address=p.address)

    def params(self) -> MarketParams:
        return MarketParams(fee_bps=0, burn_bps=0, min_stake_per_gpu=0, unbonding_seconds=0,
                            window_seconds=WINDOW, min_quorum=1, max_missed_windows=3,
                            downtime_slash_bps=0, equivocation_slash_bps=0,
                            reporter_reward_bps=0, validator_min_bond=0, max_skew_seconds=5,
                            temp_critical_c=95, ecc_uncorrected_max=0, validator_reward_bps=0)

    def offers(self) -> list[Offer]:
        out = []
        for p in self.providers.values():
            used = sum(j.gpus for j in self.jobs.values() if j.provider == p.address
                       and j.status in ("open", "running", "finishing") and j.address not in self.tombstones)
            if p.status != "active" or used >= p.gpus:
                continue
            out.append(Offer(p.address, p.owner, p.worker_key, p.gpu_model, p.gpus - used, p.gpus,
                             81920, p.region, p.price, 10**9, 0.0, 0, 0, 0, False, 0.5,
                             p.endpoint, online=p.alive))
        return sorted(out, key=rank_key)

    def healthy_validators(self, authorities: Any) -> list[Pubkey]:
        return [a for a in authorities if a in self.healthy]

    def default_committee(self, exclude: Any) -> list[Pubkey]:
        return [v for v in VALIDATORS if v in self.healthy and v not in set(exclude)][:3]

    def balance(self) -> int:
        return self.wallet

    def escrow(self, job: Pubkey) -> int:
        j = self.jobs[job]
        return 0 if job in self.tombstones else j.deposited - j.paid_provider - j.refunded

    # -------------------------------------------------------------- World: writes

    def create_job(self, job_id: int, provider: Pubkey, gpus: int, deposit: int, committee: Any,
                   quorum: int, max_price: int, workload_hash: bytes) -> str:
        self.point("create: before")
        address = pda.job_pda(MARKET, self.user.pubkey(), job_id, PROGRAM)
        if address in self.jobs:
            raise GpuMarketError(0, "AccountAlreadyInUse", "already in use")
        p = self.providers[provider]
        if p.price > max_price:
            raise GpuMarketError(6000, "PriceAboveLimit", "price above limit")
        self.wallet -= deposit
        self.jobs[address] = FakeJob(address, job_id, provider, gpus, p.price * gpus, deposit,
                                     list(committee), quorum, workload_hash, self.clock)
        self.max_committed = max(self.max_committed, self.committed())
        if self.budget is not None:
            assert self.committed() <= self.budget, "the budget was exceeded"
        self.point("create: landed")
        if self.ambiguous_create:
            self.ambiguous_create = False
            raise RpcUnavailable("the RPC went away after sending")
        return f"sig-create-{job_id}"

    def cancel_job(self, job: Pubkey) -> str:
        self.point("cancel: before")
        j = self.jobs[job]
        if j.status != "open":
            raise GpuMarketError(6001, "InvalidJobStatus", "not open")
        j.status, j.refunded = "cancelled", j.deposited
        self.wallet += j.deposited
        self.point("cancel: landed")
        return "sig-cancel"

    def finish_job(self, job: Pubkey) -> str:
        self.point("finish: before")
        j = self.jobs[job]
        if j.status != "running":
            raise GpuMarketError(6001, "InvalidJobStatus", "not running")
        j.status, j.ended_at = "finishing", self.clock
        self.finished.append(job)
        self.point("finish: landed")
        return "sig-finish"

    def close_job(self, job: Pubkey, view: Any) -> tuple[str, Receipt]:
        self.point("close: before")
        j = self.jobs[job]
        assert view.settlement_over(self.clock) and job not in self.tombstones
        if j.status == "finishing":
            j.status = "completed"
        refund = j.deposited - j.paid_provider - j.refunded
        j.refunded += refund
        self.wallet += refund
        self.tombstones.add(job)
        self.point("close: landed")
        return "sig-close", Receipt(j.deposited, j.paid_provider, 0, 0, 0, j.refunded)

    def remember(self, job: Pubkey, job_id: int, created_at: int) -> None:
        pass

    checkpoint_at: int | None = None
    """``created_at`` of the newest checkpoint in the user's store (None: none)."""

    def latest_checkpoint(self, config: Any, credentials: Any) -> int | None:
        assert credentials == ("AKIDEXAMPLE", "s3cr3t")
        return self.checkpoint_at

    # -------------------------------------------------------------- World: worker, committee

    def _worker(self, endpoint: str) -> FakeProvider:
        p = next(p for p in self.providers.values() if p.endpoint == endpoint)
        if not p.alive:
            raise WorkerApiError(f"cannot reach the provider's worker at {endpoint}")
        return p

    def deliver(self, endpoint: str, job: Pubkey, spec: Any) -> dict[str, Any]:
        p = self._worker(endpoint)
        if p.refuse_spec is not None:
            raise WorkerApiError("refused", status=p.refuse_spec)
        self.point("deliver: before")
        self.deliveries.append(job)
        self.jobs[job].spec_delivered += 1
        self.point("deliver: landed")
        return {"state": "pending"}

    def workload_status(self, endpoint: str, job: Pubkey, workload_hash: bytes) -> dict[str, Any]:
        p = self._worker(endpoint)
        j = self.jobs[job]
        if j.container == "exited":
            return {"state": "exited", "exit_code": p.exit_code, "ports": []}
        if j.container == "running":
            return {"state": "running", "ports": [{"host": p.endpoint[7:-5], "host_port": 30000,
                                                   "port": 8080, "protocol": "tcp"}]}
        return {"state": "starting"}

    def committee(self, job: Pubkey, members: Any) -> CommitteeView:
        j = self.jobs[job]
        p = self.providers[j.provider]
        answering = [m for m in members if m in self.healthy]
        if not answering:
            return CommitteeView(errors=("nobody home",))
        if not j.proved_until or j.proved_until == j.started_at:
            return CommitteeView(answered=len(answering))
        head = Head(str(answering[0]), j.proved_until // WINDOW, j.proved_until, "accepted",
                    p.health_flags, 0 if p.health_flags else WINDOW, WORKLOAD_RUNNING, None)
        return CommitteeView((head,), j.proved_until, len(answering))


class _Obj:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


class CrashingStore(ManagedStore):
    """The store whose every commit is a point at which the process may die (after it)."""

    world: FakeWorld | None = None

    def commit(self, *a: Any, **kw: Any) -> None:
        super().commit(*a, **kw)
        if self.world is not None:
            self.world.point("commit")


# ----------------------------------------------------------------------------- the scenario


@dataclass
class Setup:
    world: FakeWorld
    store: CrashingStore
    mid: int
    p1: FakeProvider
    p2: FakeProvider
    events: list[str] = field(default_factory=list)

    def controller(self) -> Controller:
        return Controller(self.store, self.mid, self.world, say=lambda e: self.events.append(
            f"{e.level}: {e.text}"), sleep=lambda s: None, poll_s=1,
            checkpoint_credentials=("AKIDEXAMPLE", "s3cr3t"))

    def run(self, seconds: int, step: int = 2) -> None:
        """Ticks of a controller every ``step`` s for ``seconds``; a crash kills it and a new
        one takes over on the same database."""
        c = self.controller()
        for _ in range(0, seconds, step):
            try:
                c.tick()
            except Crash:
                c = self.controller()
            self.world.advance(step)

    def attempts(self) -> list[Any]:
        return self.store.attempts(self.mid)

    def managed(self) -> Any:
        return self.store.managed(self.mid)


def setup(tmp_path: Path, *, price1: int = 100, price2: int = 150, budget: int | None = None,
          hours: int = 600, max_restarts: int = 3, checkpoint: dict | None = None,
          **policy_kw: Any) -> Setup:  # fmt: skip
    user = Keypair()
    world = FakeWorld(user)
    p1 = world.add_provider("p1", price1)
    p2 = world.add_provider("p2", price2)
    store = CrashingStore(tmp_path / "managed.sqlite")
    policy = RecoveryPolicy(gpu_model="H100", gpus=1, hours_seconds=Fraction(hours),
                            budget=budget, max_restarts=max_restarts, start_timeout_s=60,
                            health_grace_s=60, **policy_kw)
    template = make_template("docker.io/library/busybox:1", ports=["8080"], checkpoint=checkpoint)
    mid = store.create(name="train", url="http://chain", uid=b"u" * 16, market=str(MARKET),
                       user=str(user.pubkey()), program_id=str(PROGRAM), decimals=6,
                       policy=policy.to_json(), template=template, now=world.clock)
    s = Setup(world, store, mid, p1, p2)
    store.world = world
    return s


def slot_jobs(s: Setup) -> dict[int, list[Pubkey]]:
    """The jobs on the fake chain by the slot whose address they have."""
    from gpu_market.managed.template import attempt_job_id

    out: dict[int, list[Pubkey]] = {}
    m = s.managed()
    for idx in range(20):
        address = pda.job_pda(MARKET, s.world.user.pubkey(), attempt_job_id(m.uid, idx), PROGRAM)
        if address in s.world.jobs:
            out.setdefault(idx, []).append(address)
    return out


def test_a_silent_provider_is_left_for_the_next_offer_and_its_job_closed_with_a_receipt(
        tmp_path: Path) -> None:  # fmt: skip
    s = setup(tmp_path)
    s.run(40)
    (a0,) = s.attempts()
    assert a0.state == "running" and a0.provider == str(s.p1.address)
    assert s.managed().phase == "running" and a0.endpoints == ["p1:30000"]
    policy = RecoveryPolicy.from_json(s.managed().policy)
    assert policy.budget == 4 * 100 * 600 and policy.fixed_model == "NVIDIA H100 80GB HBM3"
    s.p1.alive = False  # its worker dies: no more windows
    killed_at = s.world.clock
    s.run(60)
    a0, a1 = s.attempts()
    assert a1.state == "running" and a1.provider == str(s.p2.address)
    assert a0.end_kind == "failure" and "no window accepted" in a0.end_reason
    old = s.world.jobs[Pubkey.from_string(a0.job)]
    assert old.status in ("finishing", "completed") and old.ended_at <= killed_at + 4 * WINDOW
    assert a1.committee == a0.committee  # the same healthy committee
    s.run(GRACE + 10)
    a0 = s.attempts()[0]
    assert a0.state == "closed" and a0.receipt["paid"] + a0.receipt["refunded"] == a0.deposited
    assert a0.paid == old.paid_seconds * 100 and a0.paid_seconds == old.paid_seconds
    assert old.paid_seconds <= killed_at - old.started_at  # nothing paid after it went silent
    text = "\n".join(s.events)
    assert "decision: attempt 0 on provider" in text and "no window accepted by its committee" in text
    assert f"attempt 1 runs on provider {s.p2.address}" in text and "p2:30000" in text
    assert "warning: attempt 0" in text and "no window accepted for" in text  # warned first


def _crash_run(tmp_path: Path, crash_points: list[int], *, price2: int = 150,
               budget: int | None = None) -> Setup:  # fmt: skip
    s = setup(tmp_path, price2=price2, budget=budget)
    s.world.budget = budget if budget is not None else 4 * 100 * 600
    pending = sorted(crash_points)
    c = s.controller()
    for t in range(0, 200, 2):
        if t == 40:
            s.p1.alive = False
        if s.world.crash_at is None and pending:
            s.world.crash_at = s.world.points + pending.pop(0)
        try:
            c.tick()
        except Crash:
            c = s.controller()
        s.world.advance(2)
    return s


def _points_of_a_clean_run(tmp_path: Path) -> int:
    s = _crash_run(tmp_path / "clean", [])
    return s.world.points


def test_a_controller_killed_between_any_two_steps_resumes_with_one_successor(tmp_path: Path) -> None:
    total = _points_of_a_clean_run(tmp_path)
    assert total > 15
    for point in range(1, total + 1):
        s = _crash_run(tmp_path / f"crash-{point}", [point])
        jobs = slot_jobs(s)
        assert sorted(jobs) == [0, 1] and all(len(v) == 1 for v in jobs.values()), (point, s.events)
        assert len(s.world.jobs) == 2, point
        a0, a1 = s.attempts()
        assert (a0.state, a1.state) == ("closed", "running"), (point, s.events)
        assert a1.provider == str(s.p2.address)
        assert s.world.max_committed <= 4 * 100 * 600
        assert a0.receipt is not None and a0.receipt["paid"] + a0.receipt["refunded"] == a0.deposited


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(price2=st.integers(50, 400), budget=st.one_of(st.none(), st.integers(70_000, 400_000)),
       crashes=st.lists(st.integers(1, 12), max_size=4), seed=st.integers(0, 10**6))
def test_crashes_at_random_points_never_make_two_successors_or_pass_the_budget(
        tmp_path_factory: pytest.TempPathFactory, price2: int, budget: int | None,
        crashes: list[int], seed: int) -> None:  # fmt: skip
    random.seed(seed)
    s = _crash_run(tmp_path_factory.mktemp("prop"), crashes, price2=price2, budget=budget)
    limit = budget if budget is not None else 4 * 100 * 600
    assert s.world.max_committed <= limit
    jobs = slot_jobs(s)
    assert all(len(v) == 1 for v in jobs.values()) and len(s.world.jobs) == len(jobs) <= 2
    # User money is conserved: what left the wallet is what the jobs hold or paid.
    spent = 10**12 - s.world.wallet
    assert spent == sum(j.deposited - j.refunded for j in s.world.jobs.values())
    atts = s.attempts()
    if len(atts) == 2 and atts[1].state not in ("planned",):
        assert atts[1].deposit <= limit - atts[0].committed


def test_no_offer_waits_with_backoff_and_says_why_then_takes_one_that_appears(tmp_path: Path) -> None:
    s = setup(tmp_path, max_price_per_gpu_second=120)  # p2 (150) is above the cap
    s.run(30)
    s.p1.alive = False
    s.run(60)
    m = s.managed()
    assert m.phase == "waiting" and "no offer satisfies the policy" in m.phase_reason
    waits = [e for e in s.events if "no offer satisfies the policy" in e]
    assert waits and "above the price cap" in waits[0] and "retrying at" in waits[0]
    assert m.backoff_s > 10  # doubled at least once
    assert len(s.world.jobs) == 1
    p3 = s.world.add_provider("p3", 110)
    s.run(400)
    a1 = s.attempts()[1]
    assert a1.provider == str(p3.address) and a1.state == "running"
    assert s.managed().phase == "running"


def test_a_successor_that_never_accepts_is_cancelled_in_full_and_the_next_offer_tried(
        tmp_path: Path) -> None:  # fmt: skip
    s = setup(tmp_path)
    s.p2.accepts = False
    p3 = s.world.add_provider("p3", 200)
    s.run(30)
    s.p1.alive = False
    s.run(200)
    _, a1, a2 = s.attempts()
    assert a1.provider == str(s.p2.address) and a1.end_kind == "failure"
    assert "not accepted within" in a1.end_reason
    j1 = s.world.jobs[Pubkey.from_string(a1.job)]
    assert j1.status == "cancelled" and j1.refunded == j1.deposited
    assert a2.provider == str(p3.address) and a2.state == "running"


def test_a_declined_successor_and_a_refused_spec_count_as_failed_attempts(tmp_path: Path) -> None:
    s = setup(tmp_path)
    s.p2.declines = True
    p3 = s.world.add_provider("p3", 200, refuse_spec=400)
    p4 = s.world.add_provider("p4", 300)
    s.run(30)
    s.p1.alive = False
    s.run(200)
    reasons = [(a.provider, a.end_reason) for a in s.attempts()]
    assert reasons[1] == (str(s.p2.address), "its job is declined by the provider")
    assert reasons[2][0] == str(p3.address) and "refused the spec" in reasons[2][1]
    assert s.attempts()[3].provider == str(p4.address) and s.attempts()[3].state == "running"


def test_the_old_provider_coming_back_is_not_paid_after_the_finish_and_restarts_nothing(
        tmp_path: Path) -> None:  # fmt: skip
    s = setup(tmp_path)
    s.run(30)
    s.p1.alive = False
    s.run(50)
    a0, a1 = s.attempts()
    old = s.world.jobs[Pubkey.from_string(a0.job)]
    assert old.status == "finishing"
    delivered = list(s.world.deliveries)
    s.p1.alive = True  # it comes back
    s.run(GRACE + 20)
    assert old.status == "completed" and old.container is None
    assert old.paid_seconds <= old.ended_at - old.started_at
    assert s.world.deliveries == delivered  # nothing sent to it again
    a0, a1 = s.attempts()
    assert a0.state == "closed" and a1.state == "running" and len(s.attempts()) == 2


def test_an_ambiguous_create_is_retried_at_the_same_address(tmp_path: Path) -> None:
    s = setup(tmp_path)
    s.world.ambiguous_create = True  # the first create lands but the answer is lost
    s.run(30)
    assert len(s.world.jobs) == 1 and s.attempts()[0].state == "running"
    assert any("created at most once" in e for e in s.events)


def test_a_recover_on_exit_code_migrates_and_another_exit_ends_the_job(tmp_path: Path) -> None:
    s = setup(tmp_path, recover_exit_codes=frozenset({137}))
    s.run(30)
    s.p1.exit_code = 137
    s.run(4)
    a0 = s.attempts()[0]
    assert a0.end_kind == "exit" and "exited with code 137" in a0.end_reason
    s.p1.exit_code = None
    s.run(40)
    a1 = s.attempts()[1]
    # An exit for the container's own reasons does not exclude the provider.
    assert a1.state == "running" and a1.provider == str(s.p1.address)
    s.p1.exit_code = 1
    s.run(20)
    assert len(s.attempts()) == 2
    assert any("exited with code 1 (not a recover-on code)" in e for e in s.events)


def test_unhealthy_gpus_warn_at_once_and_migrate_after_the_grace(tmp_path: Path) -> None:
    s = setup(tmp_path)
    s.run(30)
    s.p1.health_flags = HEALTH_TEMP_CRITICAL
    s.run(20)
    assert s.managed().phase == "running" and s.managed().health_since is not None
    assert any("critical temperature" in e and "migrating at" in e for e in s.events)
    s.p1.health_flags = 0
    s.run(20)
    assert s.managed().health_since is None
    assert any("healthy again" in e for e in s.events)
    s.p1.health_flags = HEALTH_TEMP_CRITICAL
    s.run(90)
    a0 = s.attempts()[0]
    assert a0.end_kind == "failure" and "critical temperature" in a0.end_reason
    assert "past the grace of 1 min" in a0.end_reason


def test_the_budget_bounds_every_deposit_and_waits_for_the_refund(tmp_path: Path) -> None:
    budget = 100 * 600 + 500  # one full attempt, and less than a window more
    s = setup(tmp_path, price2=100, budget=budget)
    s.world.budget = budget
    s.run(30)
    s.p1.alive = False
    s.run(80)
    a0, a1 = s.attempts()
    # Slot 1 waited for the refund of slot 0 (closed after its grace), then got what is left.
    assert any("waiting for the refund of job" in e for e in s.events)
    assert a0.state == "closed" and a1.deposit == budget - a0.paid
    assert s.world.max_committed <= budget


def test_max_restarts_then_giving_up(tmp_path: Path) -> None:
    s = setup(tmp_path, max_restarts=1)
    s.run(30)
    s.p1.alive = False
    s.run(60)
    s.p2.alive = False
    s.run(80)
    m = s.managed()
    assert m.phase == "gave_up" and "1 restart(s) used" in m.phase_reason
    s.run(GRACE + 10)
    assert all(a.state == "closed" for a in s.attempts())


def test_stop_by_the_user_finishes_and_closes_everything(tmp_path: Path) -> None:
    s = setup(tmp_path)
    s.run(30)
    s.store.request_stop(s.mid, s.world.clock)
    s.run(GRACE + 20)
    m = s.managed()
    (a0,) = s.attempts()
    assert m.phase == "done" and a0.state == "closed" and a0.end_kind == "user_stop"
    c = s.controller()
    assert c.finished()


def test_a_user_migration_to_a_named_provider(tmp_path: Path) -> None:
    s = setup(tmp_path)
    p3 = s.world.add_provider("p3", 300)
    s.run(30)
    s.store.request_migrate(s.mid, s.world.clock, str(p3.address))
    s.run(40)
    a0, a1 = s.attempts()
    assert a0.end_kind == "user_migrate" and a1.provider == str(p3.address)
    assert a1.state == "running"
    assert s.managed().migrate_to is None and s.managed().migrate_requested_at is None


def test_a_user_migration_waits_for_the_final_checkpoint_and_reseals_the_store_keys(
        tmp_path: Path) -> None:  # fmt: skip
    from gpu_market.checkpoint import open_checkpoint_credentials
    from gpu_market.workload import spec_from_json

    s = setup(tmp_path, checkpoint={"store": "s3://bucket/run", "interval_s": 30})
    worker2 = Keypair()
    s.p2.worker_key = worker2.pubkey()
    s.run(30)
    s.world.checkpoint_at = s.world.clock - 20  # an older checkpoint: not the final one
    s.store.request_migrate(s.mid, s.world.clock, str(s.p2.address))
    s.run(6)
    a0 = s.attempts()[0]
    assert a0.end_kind == "user_migrate" and len(s.attempts()) == 1
    assert s.managed().phase == "waiting" and "waiting for the final checkpoint" in s.managed().phase_reason
    s.world.checkpoint_at = a0.ended_at + 1  # the old worker's sync on stop
    s.run(30)
    a1 = s.attempts()[1]
    assert a1.provider == str(s.p2.address) and a1.state == "running"
    assert any("the final checkpoint of job" in e and "is stored" in e for e in s.events)
    spec = spec_from_json(a1.spec)
    assert spec.checkpoint.config.store == "s3://bucket/run" and "s3cr3t" not in a1.spec.decode()
    creds = open_checkpoint_credentials(worker2.secret(), spec.checkpoint)
    assert (creds.access_key_id, creds.secret_access_key) == ("AKIDEXAMPLE", "s3cr3t")


def test_a_final_checkpoint_that_never_comes_holds_the_successor_two_minutes_at_most(
        tmp_path: Path) -> None:  # fmt: skip
    s = setup(tmp_path, checkpoint={"store": "s3://bucket/run"})
    s.run(30)
    s.store.request_migrate(s.mid, s.world.clock, None)
    s.run(100)
    assert len(s.attempts()) == 1
    s.run(100)
    assert s.attempts()[1].state == "running"
    assert any("no checkpoint of job" in e and "the newest one the store holds" in e for e in s.events)
