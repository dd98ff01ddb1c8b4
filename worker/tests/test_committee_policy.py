"""A provider serves only committees it can trust (``CommitteePolicy``).

The verdict is pure (``judge_committee``) and tested exhaustively here; the agent applies
it before accepting an Open job, reading Validator accounts through the real
``ChainJobSource`` over an SDK-shaped fake chain and asking each member's ``GET /health``
over real HTTP on 127.0.0.1 (``StubValidator``, ``hostile.TrickleServer``).
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from fakes import FakeBackend, FakeGpu
from gpu_market.net import BoundedClient
from gpum_worker.agent import Agent
from gpum_worker.committee import (
    CommitteeGate,
    CommitteePolicy,
    CommitteeRouter,
    judge_committee,
)
from gpum_worker.config import resolve
from gpum_worker.errors import ConfigError
from gpum_worker.heads import HttpHeadSource
from gpum_worker.jobs import ChainJobSource, ValidatorInfo
from gpum_worker.keys import WorkerKey, b58encode
from gpum_worker.outbox import Outbox
from gpum_worker.stub_validator import StubValidator
from hostile import TrickleServer
from solders.pubkey import Pubkey
from test_worker_committee import JOB1, JOB2, MARKET, PROGRAM, PROVIDER, FakeChain, auth

A, B, C = auth(1), auth(2), auth(3)
OK = ValidatorInfo("http://v.example", "active", 100)


def verdict(committee, infos=None, healthy=None, market_min=50, **policy):
    infos = infos if infos is not None else {m: OK for m in committee}
    healthy = healthy if healthy is not None else {m: "" for m in committee}
    return judge_committee(CommitteePolicy(**policy), committee, infos, market_min, healthy)


def test_a_committee_of_active_bonded_answering_members_is_accepted() -> None:
    assert verdict([A, B]).accept


@pytest.mark.parametrize("case, kw, says", [
    ("denied", {"deny": frozenset({B})}, "deny list"),
    ("not allowed", {"allow": frozenset({A})}, "not on the allow list"),
    ("no account", {"infos": {A: OK, B: None}}, "no Validator account"),
    ("unbonding", {"infos": {A: OK, B: ValidatorInfo("http://v", "unbonding", 100)}},
     "unbonding, not active"),
    # An exiting member still settles the jobs it already serves, but a new job is declined.
    ("exiting", {"infos": {A: OK, B: ValidatorInfo("http://v", "exiting", 100)}},
     "exiting, not active"),
    ("under the market's bond", {"infos": {A: OK, B: ValidatorInfo("http://v", "active", 49)}},
     "below the minimum 50"),
    ("under the provider's bond", {"min_bond": 101}, "below the minimum 101"),
    ("no endpoint", {"infos": {A: OK, B: ValidatorInfo("", "active", 100)}}, "no endpoint"),
    ("bad endpoint", {"infos": {A: OK, B: ValidatorInfo("ftp://v", "active", 100)}},
     "not an http(s) URL"),
])
def test_what_the_chain_shows_declines_at_once(case: str, kw: dict, says: str) -> None:
    v = verdict([A, B], **kw)
    assert not v.accept and v.final, case
    assert says in v.reason and b58encode(B) in v.reason


def test_a_member_below_the_market_minimum_is_declined_whatever_the_provider_sets() -> None:
    v = verdict([A], infos={A: ValidatorInfo("http://v", "active", 10)}, min_bond=0)
    assert v.final and "below the minimum 50" in v.reason


def test_a_silent_member_makes_the_job_wait_not_decline() -> None:
    v = verdict([A, B], healthy={A: "", B: "DeadlineExceeded"})
    assert not v.accept and not v.final and "DeadlineExceeded" in v.reason
    assert verdict([A, B], healthy={A: ""}, require_health=False).accept


def test_an_empty_committee_is_declined() -> None:
    assert verdict([]).final


def test_config_flags_env_and_file() -> None:
    base = {"key_file": "k", "db": "d"}
    file = {**base, "committee": {"deny": [b58encode(A)], "min_bond": 7,
                                  "require_health": False}}
    p = resolve(file, {}, {}).committee
    assert p.deny == {A} and p.min_bond == 7 and not p.require_health
    p = resolve(file, {"GPUM_WORKER_COMMITTEE_DENY": b58encode(B)},
                {"committee_min_bond": 9, "committee_require_health": True,
                 "committee_allow": (b58encode(C),)}).committee
    assert p.deny == {B} and p.allow == {C} and p.min_bond == 9 and p.require_health
    assert resolve(base, {}, {}).committee == CommitteePolicy()  # the safe default
    with pytest.raises(ConfigError, match="both the allow and the deny"):
        resolve({**base, "committee": {"allow": [b58encode(A)], "deny": [b58encode(A)]}},
                {}, {})
    with pytest.raises(ConfigError, match="accepts only"):
        resolve({**base, "committee": {"bond": 1}}, {}, {})


# ---------------------------------------------------------------- the agent applies it


class PolicyChain(FakeChain):
    """``FakeChain`` plus what acceptance reads and writes: bonds, the market's minimum,
    ``accept_job`` and ``decline_job``."""

    def __init__(self, worker_key: bytes, min_bond: int = 50) -> None:
        super().__init__(worker_key)
        self.min_bond = min_bond

    def open_job(self, job: bytes, committee: list[bytes]) -> None:
        self.add_job(job, committee)
        self.jobs[job].status = "open"
        self.jobs[job].started_at = 0

    def register_validator(self, authority: bytes, endpoint: str, bond: int = 100,
                           status: str = "active") -> None:
        super().register_validator(authority, endpoint)
        self.validators[(MARKET, authority)].bond = bond
        self.validators[(MARKET, authority)].status = status

    def fetch_market(self, market):
        return types.SimpleNamespace(params=types.SimpleNamespace(
            validator_min_bond=self.min_bond))

    def accept_job(self, signer, job):
        self.jobs[bytes(job)].status = "running"
        self.jobs[bytes(job)].started_at = 1_700_000_000

    def decline_job(self, signer, job):
        self.jobs[bytes(job)].status = "declined"


def _agent(tmp_path: Path, key: WorkerKey, chain: PolicyChain, policy: CommitteePolicy
           ) -> tuple[Agent, Outbox, BoundedClient]:
    outbox = Outbox(tmp_path / "o.sqlite", key.pubkey)
    client = BoundedClient(2.0)
    source = ChainJobSource(chain, PROVIDER, PROGRAM, key)
    agent = Agent(backend=FakeBackend([FakeGpu(f"GPU-{i}") for i in range(3)]),
                  job_source=source, outbox=outbox, key=key, window_seconds=10,
                  heads=HttpHeadSource(client, 2.0), router=CommitteeRouter(),
                  committee_gate=CommitteeGate(source, policy, client))
    agent.start()
    return agent, outbox, client


def test_open_jobs_are_accepted_or_declined_by_their_committee(tmp_path: Path,
                                                              key: WorkerKey) -> None:
    honest = StubValidator().start()
    silent = TrickleServer(get="trickle", post="trickle")
    chain = PolicyChain(key.pubkey)
    chain.register_validator(A, honest.url)
    chain.register_validator(B, silent.url)
    chain.register_validator(C, honest.url, bond=10)
    chain.open_job(JOB1, [A])  # an honest committee
    chain.open_job(JOB2, [A, B])  # a member that never answers /health
    job3 = b"\x13" * 32
    chain.open_job(job3, [A, C])  # a member bonded below the market's minimum
    agent, outbox, client = _agent(tmp_path, key, chain,
                                   CommitteePolicy(health_timeout_s=0.5, health_grace_s=60))
    try:
        agent.poll_jobs(1000.0)
        assert chain.jobs[JOB1].status == "running"
        assert chain.jobs[job3].status == "declined"
        assert chain.jobs[JOB2].status == "open"  # waits: the member may be restarting
        agent.poll_jobs(1030.0)
        assert chain.jobs[JOB2].status == "open"
        agent.poll_jobs(1061.0)  # silent for longer than the grace: declined
        assert chain.jobs[JOB2].status == "declined"
        agent.poll_jobs(1062.0)  # the declined jobs' GPUs go back to the pool
        assert set(outbox.assignments()) == {JOB1}
    finally:
        outbox.close()
        client.close()
        honest.stop()
        silent.stop()


def test_a_denied_validator_is_never_served(tmp_path: Path, key: WorkerKey) -> None:
    honest = StubValidator().start()
    chain = PolicyChain(key.pubkey)
    chain.register_validator(A, honest.url)
    chain.register_validator(B, honest.url)
    chain.open_job(JOB1, [A, B])
    agent, outbox, client = _agent(tmp_path, key, chain, CommitteePolicy(deny=frozenset({B})))
    try:
        agent.poll_jobs(1000.0)
        assert chain.jobs[JOB1].status == "declined"
    finally:
        outbox.close()
        client.close()
        honest.stop()


assert Pubkey  # FakeChain's accounts use solders keys


def test_a_job_accepted_in_the_background_starts_though_a_member_is_down(
        tmp_path: Path, key: WorkerKey) -> None:
    """Accepted here, nothing signed anywhere: a member that cannot say so must not keep the
    job from starting, also when the acceptance ran in the background and the next poll
    already lists the job Running."""
    import time

    honest = StubValidator().start()
    chain = PolicyChain(key.pubkey)
    chain.register_validator(A, honest.url)
    chain.register_validator(B, "http://127.0.0.1:9")  # nothing listens: down
    chain.open_job(JOB1, [A, B])
    outbox = Outbox(tmp_path / "o.sqlite", key.pubkey)
    client = BoundedClient(2.0)
    source = ChainJobSource(chain, PROVIDER, PROGRAM, key)
    agent = Agent(backend=FakeBackend([FakeGpu("GPU-0")]), job_source=source, outbox=outbox,
                  key=key, window_seconds=10, heads=HttpHeadSource(client, 2.0),
                  router=CommitteeRouter(), background_checks=True,
                  committee_gate=CommitteeGate(source, CommitteePolicy(require_health=False),
                                               client))
    agent.start()
    try:
        deadline = time.monotonic() + 15
        while JOB1 not in agent.active:
            assert time.monotonic() < deadline, "the accepted job never started"
            agent.poll_jobs(time.time())
            time.sleep(0.1)
        assert chain.jobs[JOB1].status == "running" and outbox.accepted_here(JOB1)
    finally:
        outbox.close()
        client.close()
        honest.stop()
