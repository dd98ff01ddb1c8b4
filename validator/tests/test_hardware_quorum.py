"""Co-signing hardware verdicts: a member signs only a verdict it reached itself, recently,
and a leader gathers the signatures that verify."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gpu_market.challenge_messages import verify_digest
from gpum_validator.config import ChallengeConfig
from gpum_validator.hardware import Declared, HardwareVerdict
from gpum_validator.hardware_quorum import HardwareQuorum, args_of, request_body
from gpum_validator.peers import PeerAnswer
from gpum_validator.store_sqlite import SQLiteStore
from solders.pubkey import Pubkey
from vtestkit import MARKET, PROGRAM, VALIDATOR_KEYS, cfg

NOW = 1_800_000_000.0
PROVIDER = b"\x09" * 32
DECLARED = Declared(PROVIDER, b"\x05" * 32, "H100 80GB HBM3", 8, 81559)


def verdict(at: float = NOW - 60, passed: bool = True, **declared: Any) -> HardwareVerdict:
    return HardwareVerdict(PROVIDER, b"\x07" * 32, int(at), replace(DECLARED, **declared),
                           passed, () if passed else ("too_slow: slow",), {}, at)


class Chain:
    def __init__(self, quorum: int) -> None:
        self.params = SimpleNamespace(hardware_quorum=quorum,
                                      hardware_attestation_max_age_seconds=600)

    def fetch_market(self, market: Any) -> Any:
        return SimpleNamespace(params=self.params)

    def list_validators(self, market: Any, statuses: Any) -> list[Any]:
        assert set(statuses) == {"active"}
        return [SimpleNamespace(authority=k.pubkey()) for k in VALIDATOR_KEYS[:4]]


class Node:
    def __init__(self, tmp: Path, i: int, chain: Chain, peers: Any = None) -> None:
        self.key = VALIDATOR_KEYS[i]
        self.store = SQLiteStore(tmp / f"v{i}.sqlite")
        self.q = HardwareQuorum(chain, self.key, self.store, cfg(authority=bytes(
            self.key.pubkey())), ChallengeConfig(enabled=True), peers, clock=lambda: NOW)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Any]:
    made: list[Node] = []

    def make(i: int, quorum: int = 1, peers: Any = None) -> Node:
        n = Node(tmp_path, i, Chain(quorum), peers)
        made.append(n)
        return n

    yield make
    for n in made:
        n.store.close()


def test_a_member_signs_the_verdict_it_reached(nodes: Any) -> None:
    m = nodes(1)
    m.store.record_hardware_verdict(verdict())
    asked = verdict(at=NOW - 10)
    status, body = m.q.sign(request_body(asked))
    assert status == 200, body
    assert body["authority"] == str(m.key.pubkey())
    message = args_of(asked).message(PROGRAM, MARKET, PROVIDER)
    assert verify_digest(bytes(m.key.pubkey()), base64.b64decode(body["signature"]), message)


@pytest.mark.parametrize("case, status, code", [
    ("never challenged", 409, "no_verdict"),
    ("it failed here", 409, "disagree"),
    ("another model", 409, "disagree"),
    ("another worker key", 409, "disagree"),
    ("its own is old", 409, "stale"),
    ("the asked is old", 409, "stale"),
    ("the asked is in the future", 409, "stale"),
    ("a field too many", 400, "bad_request"),
    ("a model too long", 400, "bad_request"),
    ("a bad digest", 400, "bad_request"),
    ("passed as text", 400, "bad_request"),
])
def test_a_member_signs_nothing_else(nodes: Any, case: str, status: int, code: str) -> None:
    m = nodes(1)
    own, asked = verdict(), verdict(at=NOW - 10)
    body = request_body(asked)
    if case == "it failed here":
        own = verdict(passed=False)
    elif case == "another model":
        own = verdict(gpu_model="A100 80GB")
    elif case == "another worker key":
        own = verdict(worker_key=b"\x06" * 32)
    elif case == "its own is old":
        own = verdict(at=NOW - 601)
    elif case == "the asked is old":
        body["challenged_at"] = int(NOW - 601)
    elif case == "the asked is in the future":
        body["challenged_at"] = int(NOW + 301)
    elif case == "a field too many":
        body["extra"] = 1
    elif case == "a model too long":
        body["gpu_model"] = "x" * 33
    elif case == "a bad digest":
        body["challenge"] = "00"
    elif case == "passed as text":
        body["passed"] = "true"
    if case != "never challenged":
        m.store.record_hardware_verdict(own)
    got_status, got = m.q.sign(body)
    assert (got_status, got["error"]) == (status, code), got


class Peers:
    """Delivers a leader's requests to the members' ``sign`` (one forges its answer)."""

    def __init__(self, members: dict[bytes, Node], forger: bytes | None = None) -> None:
        self.members = members
        self.forger = forger
        self.asked: list[bytes] = []

    def post(self, member: bytes, path: str, body: dict[str, Any]) -> PeerAnswer | None:
        assert path == "/v1/hardware/sign"
        self.asked.append(member)
        node = self.members.get(member)
        if node is None:
            return None
        status, answer = node.q.sign(body)
        if member == self.forger and status == 200:
            answer = {**answer, "signature": base64.b64encode(b"\1" * 64).decode()}
        return PeerAnswer(status, answer)


def test_the_leader_gathers_a_quorum_of_signatures_that_verify(nodes: Any) -> None:
    agree, disagree, forger = nodes(1), nodes(2), nodes(3)
    for n in (agree, forger):
        n.store.record_hardware_verdict(verdict())
    disagree.store.record_hardware_verdict(verdict(passed=False))
    members = {bytes(n.key.pubkey()): n for n in (agree, disagree, forger)}
    leader = nodes(0, quorum=3, peers=Peers(members, forger=bytes(forger.key.pubkey())))
    v = verdict(at=NOW - 5)
    leader.store.record_hardware_verdict(v)
    got = leader.q.gather(v)
    assert set(got.attestations) == {str(leader.key.pubkey()), str(agree.key.pubkey())}
    message = args_of(v).message(PROGRAM, MARKET, PROVIDER)
    for who, sig in got.attestations.items():
        assert verify_digest(bytes(Pubkey.from_string(who)), base64.b64decode(sig), message)
    assert leader.store.latest_hardware_verdict(PROVIDER).attestations == got.attestations
    assert bytes(leader.key.pubkey()) not in leader.q.peers.asked  # never asks itself


def test_with_a_quorum_of_one_nobody_else_is_asked(nodes: Any) -> None:
    peers = Peers({})
    leader = nodes(0, quorum=1, peers=peers)
    v = verdict()
    leader.store.record_hardware_verdict(v)
    assert list(leader.q.gather(v).attestations) == [str(leader.key.pubkey())]
    assert peers.asked == []
