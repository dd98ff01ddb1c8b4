"""A committee of in-process validators on 127.0.0.1: each its own SQLite file, intake,
member endpoints, settler, reporters and real HTTP server; one FakeChain and one clock.

The endpoint of every node is written into its Validator account on the FakeChain, so the
nodes find each other the way they do in production (``Peers`` reads the chain).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import httpx
from gpu_market.httpfront import serve_in_thread
from gpu_market.processes import JsonServer
from gpu_market.proof import WindowProof, encode_proof, receipt_for_proof
from gpum_validator.attest import attestation_message, leader_of
from gpum_validator.config import HealthThresholds, SettlePolicy
from gpum_validator.downtime import DowntimeReporter
from gpum_validator.intake import Intake
from gpum_validator.liveness import LIVENESS_META, Liveness
from gpum_validator.members import Member
from gpum_validator.metrics import Metrics
from gpum_validator.peers import Peers
from gpum_validator.rewards import RewardsProbe
from gpum_validator.server import ValidatorHTTPServer
from gpum_validator.slashing import ValidatorEquivocationReporter
from gpum_validator.store_sqlite import SQLiteStore
from solders.keypair import Keypair
from vtestkit import JOB, MARKET, FakeChain, b58, cfg, make_settler, pk, signed_json


class Node:
    """One validator process (``start``/``stop`` its HTTP server; ``restart`` reopens the
    database; ``wipe`` starts it on an empty database)."""

    def __init__(self, net: Net, key: Keypair, name: str,
                 own_health: HealthThresholds | None = None) -> None:
        self.net = net
        self.key = key
        self.pub = bytes(key.pubkey())
        self.name = name
        self.own_health = own_health
        self.db = net.tmp_path / f"{name}.sqlite"
        self.server: ValidatorHTTPServer | None = None
        self._open()
        self.start()

    def _open(self) -> None:
        net = self.net
        clock = net.clock
        self.store = SQLiteStore(self.db)
        self.metrics = Metrics()
        c = cfg(authority=self.pub, own_health=self.own_health)
        self.intake = Intake(c, self.store, net.chain, self.metrics, clock=lambda: clock[0])
        self.liveness = Liveness(self.store, clock=lambda: clock[0])
        self.peers = Peers(net.chain, MARKET, timeout=3, endpoint_ttl=0)
        self.member = Member(c, self.key, self.store, net.chain, self.metrics,
                             clock=lambda: clock[0], policy=net.policy, liveness=self.liveness,
                             peers=self.peers, deliver=self.intake.submit)
        self.settler = make_settler(net.chain, self.store, clock, net.policy, authority=self.key,
                                    peers=self.peers, metrics=self.metrics)
        self.downtime = DowntimeReporter(net.chain, self.key, self.store, self.peers, net.policy,
                                         self.metrics, clock=lambda: clock[0],
                                         liveness=self.liveness, deliver=self.intake.submit)
        self.vreporter = ValidatorEquivocationReporter(net.chain, self.key, self.store,
                                                       net.policy, self.metrics,
                                                       clock=lambda: clock[0])
        self.rewards = RewardsProbe(net.chain, MARKET, self.pub, self.store,
                                    clock=lambda: clock[0])

    @property
    def up(self) -> bool:
        return self.server is not None

    def start(self) -> None:
        self.server = ValidatorHTTPServer(("127.0.0.1", 0), self.intake, self.store,
                                          lambda: True, member=self.member)
        serve_in_thread(self.server, 0.01)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.liveness.beat()  # a new span unless the last beat is recent
        v = self.net.chain.validators[self.pub]
        self.net.chain.validators[self.pub] = replace(v, endpoint=self.url)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def close(self) -> None:
        self.stop()
        self.settler.close()
        self.peers.close()
        self.store.close()

    def restart(self) -> None:
        self.close()
        self._open()
        self.start()

    def wipe(self) -> None:
        """The operator lost the database: start again on an empty one."""
        self.close()
        for suffix in ("", "-wal", "-shm"):
            p = self.db.with_name(self.db.name + suffix)
            if p.exists():
                p.unlink()
        self._open()
        self.start()

    def post(self, path: str, body: Any) -> httpx.Response:
        return httpx.post(self.url + path, json=body, timeout=10)

    def total(self, seq: int, job: bytes = JOB) -> int:
        stored = self.store.accepted_at(job, seq)
        assert stored is not None
        return int(stored.approved_total or 0)


class Net:
    """The committee of one job (``JOB``) with quorum ``q``; nodes in committee order."""

    def __init__(self, tmp_path: Any, chain: FakeChain, clock: list[float], keys: list[Keypair],
                 quorum: int, policy: SettlePolicy | None = None,
                 own_health: dict[int, HealthThresholds] | None = None,
                 stubs: tuple[Keypair, ...] = ()) -> None:
        """``stubs``: committee members that run no real node here (a test server plays
        them)."""
        self.tmp_path = tmp_path
        self.chain = chain
        self.clock = clock
        self.policy = policy or SettlePolicy(settle_every_windows=5)
        for k in keys:
            chain.add_validator(k)
        self.committee = [bytes(k.pubkey()) for k in keys]
        chain.set_committee(self.committee, quorum)
        self.extra: list[Node] = []
        self.nodes: list[Node] = []
        self.nodes = [Node(self, k, f"v{i}", (own_health or {}).get(i))
                      for i, k in enumerate(keys) if k not in stubs]
        for n in self.nodes:  # up and reachable since before the job's first window
            n.store.set_meta(LIVENESS_META, json.dumps({"since": 0.0, "last": clock[0]}))

    def outsider(self, key: Keypair) -> Node:
        """A registered validator of the market that is not on the job's committee."""
        self.chain.add_validator(key)
        node = Node(self, key, f"outsider{len(self.extra)}")
        self.extra.append(node)
        return node

    def node(self, key: Keypair) -> Node:
        return next(n for n in self.nodes if n.pub == bytes(key.pubkey()))

    def close(self) -> None:
        for n in self.nodes + self.extra:
            n.close()

    def tick(self, seconds: float) -> None:
        self.at(self.clock[0] + seconds)

    def at(self, t: float) -> None:
        """Move the clock to ``t``; every node that is up beat all along (its span goes on)."""
        self.clock[0] = t
        self.chain.now = int(t)
        for n in self.nodes + self.extra:
            if n.up:
                span = n.liveness.span()
                since = min(span.since, t) if span is not None else t
                n.store.set_meta(LIVENESS_META, json.dumps({"since": since, "last": t}))

    def deliver(self, proofs: list[WindowProof], to: list[Node] | None = None) -> None:
        """The worker: every proof to every member that is up (or to ``to``)."""
        for p in proofs:
            for n in to if to is not None else self.nodes:
                if n.up:
                    r = n.post("/v1/proofs", signed_json(p))
                    assert r.status_code in (200, 403, 409, 422, 425), r.text

    def settle_pass(self) -> list[Any]:
        """One settlement pass on every node that is up (leaders act, the rest wait)."""
        return [n.settler.settle_now() for n in self.nodes if n.up]

    @contextmanager
    def alone(self, node: Node) -> Iterator[None]:
        """Every other node down while the block runs (``node`` then sees no other member's
        total), back up after."""
        others = [n for n in self.nodes if n is not node and n.up]
        for n in others:
            n.stop()
        try:
            yield
        finally:
            for n in others:
                n.start()

    def leader(self, seq: int, timeouts: int = 0) -> Node:
        who = leader_of(JOB, seq // self.policy.settle_every_windows, self.committee, timeouts)
        return next(n for n in self.nodes if n.pub == who)

    def job(self) -> Any:
        return self.chain.jobs[JOB]


def arrange(keys: list[Keypair], leader: Keypair, seq: int, every: int = 5) -> list[Keypair]:
    """``keys`` in an order in which ``leader`` leads round ``seq // every`` of ``JOB`` (the
    leader's position depends only on the job, the round and the committee size)."""
    from gpum_validator.attest import leader_position

    order = [k for k in keys if k is not leader]
    order.insert(leader_position(JOB, seq // every, len(keys)), leader)
    return order


class Byzantine:
    """A committee member that lies: its query answers ``claims`` (one per call, the last
    repeated) for the proofs it was given, and it signs any value it is asked to (or, with
    ``refuse``, refuses every sign request). Every sign request's leader attestation is kept
    (``leader_attestations``: (seq, approved, signature)): what it could use as evidence."""

    def __init__(self, chain: FakeChain, key: Keypair, claims: list[int],
                 refuse: bool = False) -> None:
        self.key = key
        self.pub = bytes(key.pubkey())
        self.claims = list(claims)
        self.refuse = refuse
        self.proofs: dict[int, bytes] = {}
        self.signed: list[int] = []
        self.leader_attestations: list[tuple[int, int, bytes]] = []
        self.server = JsonServer(self.handle, poll_interval=0.01)
        v = chain.validators[self.pub]
        chain.validators[self.pub] = replace(v, endpoint=self.server.url)

    def give(self, proofs: list[WindowProof]) -> None:
        for p in proofs:
            self.proofs[p.seq] = encode_proof(p)

    def handle(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        seq = body["seq"]
        raw = self.proofs.get(seq)
        if raw is None:
            return 404, {"error": "seq_unknown"}
        from gpu_market.proof import decode_proof, proof_hash

        p = decode_proof(raw)
        if path == "/v1/attestations/query":
            claim = self.claims.pop(0) if len(self.claims) > 1 else self.claims[0]
            return 200, {"job": body["job"], "seq": seq, "approved_seconds": claim,
                         "receipt": {"seq": seq, "cumulative_seconds": p.cumulative_seconds,
                                     "window_end": p.window_end,
                                     "proof_hash": proof_hash(raw).hex()},
                         "signed_approved_seconds": None}
        if path == "/v1/attestations/sign":
            value = body["approved_seconds"]
            self.leader_attestations.append(
                (seq, value, base64.b64decode(body["leader_attestation"])))
            if self.refuse:
                return 409, {"error": "above_own_total"}
            self.signed.append(value)
            msg = attestation_message(receipt_for_proof(p, raw), value)
            return 200, {"authority": b58(self.pub),
                         "signature": base64.b64encode(bytes(self.key.sign_message(msg))).decode()}
        return 404, {"error": "not_found"}

    def close(self) -> None:
        self.server.close()


__all__ = ["Byzantine", "Net", "Node", "arrange", "pk"]
