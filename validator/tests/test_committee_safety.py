"""No honest member of a committee can be slashed, pinned or stalled by one other party.

Real HTTP on 127.0.0.1 (``vnet``: every node its own SQLite file, intake, member endpoints and
settler), one FakeChain that checks every Ed25519 signature of a settlement.

* a node attests at most one value per (job, seq), in every role: a member that refuses and
  then lowers its total never gets a second leader attestation; a member that becomes the
  leader of a seq it co-signed proposes the value it signed;
* a sign request is bound to its target member and its round: replayed to another member,
  sent by a member that does not lead that round, or for an attempt that is over or has not
  begun, it is refused with a named error;
* a designated leader cannot lowball a committee with an honest quorum: a member co-signs
  nothing below the quorum value of the totals it can see;
* a member that trickles its answers delays only its own job's round: another job of the
  same leader settles within the pass; the reporters keep running while a pass is stuck;
* a node attests downtime only for silence it watched while up and reachable (after its own
  outage, or while the process behind its registered endpoint is dead), and never while
  another member holds a newer proof of the worker that it can verify;
* a silent provider that finishes its job first is still reported for the windows it missed
  before the finish; silence after the finish is no downtime;
* a member that requested its exit (or was forced out) still answers, co-signs and leads
  settle rounds of its committees, so its exit stalls no proved second; it neither reports
  nor co-signs downtime (the program counts only Active members), the Active members still
  do, and they ask it for its newest proof before reporting.
"""

from __future__ import annotations

import base64
import socket
import threading
import time
from dataclasses import replace

import pytest
from gpu_market.receipt import verify as verify_signature
from gpum_validator.attest import (
    attestation_message,
    leader_of,
    receipt_message_of,
    sign_request_message,
)
from gpum_validator.config import SettlePolicy
from gpum_validator.liveness import REJOIN_GRACE_SECONDS
from gpum_validator.settlement import SettlementLoop
from gpum_validator.signing import AttestationSigner, SignedOtherValue
from gpum_validator.store_sqlite import SQLiteStore
from solders.keypair import Keypair
from vnet import Byzantine, arrange
from vtestkit import JOB, T0, VALIDATOR_KEYS, WINDOW, b58, chain_of, signed_json

K = list(VALIDATOR_KEYS[:3])
JOB2 = bytes([12] * 32)


def attested_values(att_list, member_pub, stored):
    """The distinct values of ``member_pub``'s attestations over ``stored``'s receipt."""
    values = set()
    for seq, value, sig in att_list:
        msg = attestation_message(receipt_message_of(stored), value)
        if seq == stored.seq and verify_signature(member_pub, sig, msg):
            values.add(value)
    return values


def request(member, leader_key, seq, value, *, round_=None, attempt=0, target=None,
            attestation_over=None):
    """A sign request by ``leader_key`` to ``member`` (or naming ``target``)."""
    leader = bytes(leader_key.pubkey())
    round_ = seq // 5 if round_ is None else round_
    target = member.pub if target is None else target
    stored = (attestation_over or member).store.accepted_at(JOB, seq)
    att = leader_key.sign_message(attestation_message(receipt_message_of(stored), value))
    req = sign_request_message(JOB, seq, value, leader, target, round_, attempt)
    return {"job": b58(JOB), "seq": seq, "approved_seconds": value, "leader": b58(leader),
            "member": b58(target), "round": round_, "attempt": attempt,
            "leader_signature": base64.b64encode(bytes(leader_key.sign_message(req))).decode(),
            "leader_attestation": base64.b64encode(bytes(att)).decode()}


# ------------------------------------------------------------------ one value per seq


def test_leader_never_attests_two_values_when_a_member_refuses_then_lowers(nets, chain):
    """A member refuses the first sign request and reports a lower total on the next pass:
    the honest leader still proposes (and attests) only its first value for that seq."""
    liar = Keypair.from_seed(bytes([123] * 32))
    keys = arrange([K[0], liar, K[1]], K[0], 5)
    net = nets(keys, 2, stubs=(liar,))
    leader, other = net.node(K[0]), net.node(K[1])
    byz = Byzantine(chain, liar, [300, 290, 280], refuse=True)
    try:
        ps = chain_of(5)
        byz.give(ps)
        net.deliver(ps)
        other.stop()  # the only honest co-signer is away: the liar decides the rounds
        for _ in range(3):
            leader.settler.settle_now()
        stored = leader.store.accepted_at(JOB, 5)
        assert byz.leader_attestations, "the liar was asked at least once"
        assert attested_values(byz.leader_attestations, leader.pub, stored) == {300}
        assert leader.store.given_attestation(JOB, 5).approved_seconds == 300
        leader.restart()  # durable: the same value after a restart
        other.start()
        leader.settler.settle_now()
        assert attested_values(byz.leader_attestations, leader.pub, stored) == {300}
        assert net.job().paid_seconds == 300  # the honest member co-signed the one value
    finally:
        byz.close()


def test_member_that_becomes_leader_proposes_the_value_it_cosigned(nets):
    """A node co-signed 250 for seq 5 as a member (when it could see no other total); when it
    leads seq 5 after a timeout it proposes 250, never its own 300: no second attestation of
    it exists anywhere. (The third member, seeing 300 twice, refuses 250: seq 5 stays
    unsettled and the next seq pays everything.)"""
    net = nets(K, 2)
    net.deliver(chain_of(5))
    first, second = net.leader(5, 0), net.leader(5, 1)
    third = next(n for n in net.nodes if n not in (first, second))
    with net.alone(second):  # it sees no other member's total: no floor
        r = second.post("/v1/attestations/sign", request(second, first.key, 5, 250))
    assert r.status_code == 200, r.text
    first.stop()  # the round's first leader vanishes after collecting one signature
    net.settle_pass()  # attempt 0: led by the absent node, nothing happens
    net.tick(net.policy.leader_timeout_windows * 60 + 1)
    net.settle_pass()  # attempt 1: ``second`` leads
    seen = {a.approved_seconds for a in third.store.received_attestations(JOB, 5, second.pub)}
    assert seen == {250}
    assert second.store.given_attestation(JOB, 5).approved_seconds == 250
    assert net.job().last_seq == 0
    net.deliver(chain_of(10)[5:])
    for _ in range(4):
        net.settle_pass()
        net.tick(net.policy.leader_timeout_windows * 60 + 1)
    assert (net.job().last_seq, net.job().paid_seconds) == (10, 600)
    seen = {a.approved_seconds for a in third.store.received_attestations(JOB, 5, second.pub)}
    assert seen == {250}


def test_one_signer_gate_between_two_stores_on_one_database(tmp_path):
    """Two processes' signers on one database, different values at the same moment: one
    value is signed, the other caller gets ``SignedOtherValue`` or the same signature."""
    from storekit import accept
    from vtestkit import make_proof

    key = K[0]
    a, b = SQLiteStore(tmp_path / "v.sqlite"), SQLiteStore(tmp_path / "v.sqlite")
    try:
        accept(a, make_proof(1), float(T0 + 3600))
        stored = a.accepted_at(JOB, 1)
        out: list[object] = [None, None]
        barrier = threading.Barrier(2)

        def sign(i, store, value):
            barrier.wait()
            try:
                out[i] = AttestationSigner(key, store).sign(stored, value, None)
            except SignedOtherValue as e:
                out[i] = e

        ts = [threading.Thread(target=sign, args=(0, a, 60)),
              threading.Thread(target=sign, args=(1, b, 59))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        signed = [o for o in out if not isinstance(o, SignedOtherValue)]
        assert len(signed) == 1
        value = signed[0].approved_seconds
        assert a.given_attestation(JOB, 1).approved_seconds == value
        other = next(o for o in out if isinstance(o, SignedOtherValue))
        assert other.given.approved_seconds == value
    finally:
        a.close()
        b.close()


# ------------------------------------------------------------------ requests bound


def test_sign_request_is_bound_to_its_target_member(nets):
    net = nets(K, 2)
    net.deliver(chain_of(5))
    leader = net.leader(5)
    a, b = [n for n in net.nodes if n is not leader]
    body = request(a, leader.key, 5, 300)
    assert a.post("/v1/attestations/sign", body).status_code == 200
    r = b.post("/v1/attestations/sign", body)  # the same bytes, replayed to another member
    assert (r.status_code, r.json()["error"]) == (403, "request_not_for_this_member")
    assert b.store.given_attestation(JOB, 5) is None


def test_only_the_rounds_leader_gets_a_cosignature(nets):
    net = nets(K, 2)
    net.deliver(chain_of(5))
    leader, later = net.leader(5, 0), net.leader(5, 1)
    member = next(n for n in net.nodes if n not in (leader, later))
    # ``later`` leads attempt 1, not attempt 0: it cannot claim to lead now ...
    r = member.post("/v1/attestations/sign", request(member, later.key, 5, 10, attempt=0))
    assert (r.status_code, r.json()["error"]) == (403, "not_round_leader")
    # ... nor claim an attempt that has not begun (2 timeouts ahead) ...
    k = next(k for k in range(2, 2 + 3) if leader_of(JOB, 1, net.committee, k) == later.pub)
    r = member.post("/v1/attestations/sign", request(member, later.key, 5, 10, attempt=k))
    assert (r.status_code, r.json()["error"]) == (409, "round_not_current")
    # ... nor a round that is not the seq's.
    k0 = next(k for k in range(3) if leader_of(JOB, 2, net.committee, k) == later.pub)
    r = member.post("/v1/attestations/sign", request(member, later.key, 5, 10, round_=2,
                                                     attempt=k0))
    assert (r.status_code, r.json()["error"]) == (409, "round_not_current")
    assert member.store.given_attestation(JOB, 5) is None
    # Once attempt 1 was asked, a request of attempt 0 is over.
    net.tick(net.policy.leader_timeout_windows * 60 + 1)
    r = member.post("/v1/attestations/sign", request(member, later.key, 5, 300, attempt=1))
    assert r.status_code == 200, r.text
    r = member.post("/v1/attestations/sign", request(member, leader.key, 5, 300, attempt=0))
    assert (r.status_code, r.json()["error"]) == (409, "round_not_current")


def test_a_designated_leader_cannot_lowball_a_committee_with_an_honest_quorum(nets, chain):
    """The liar leads the round (it is its turn) and asks for a tenth of the total: the
    honest member sees its own 300 and the other honest member's 300 and refuses. Alone
    (no other total visible) it would have had no floor."""
    liar = Keypair.from_seed(bytes([125] * 32))
    keys = arrange([liar, K[0], K[1]], liar, 5)
    net = nets(keys, 2, stubs=(liar,))
    byz = Byzantine(chain, liar, [30])
    try:
        ps = chain_of(5)
        byz.give(ps)
        net.deliver(ps)
        honest = net.node(K[0])
        r = honest.post("/v1/attestations/sign", request(honest, liar, 5, 30))
        assert (r.status_code, r.json()["error"]) == (409, "below_quorum_value")
        assert honest.store.given_attestation(JOB, 5) is None
        # The honest value is signed when the next leader (after the liar's timeout) asks.
        net.settle_pass()
        net.tick(net.policy.leader_timeout_windows * 60 + 1)
        net.settle_pass()
        assert net.job().paid_seconds == 300
    finally:
        byz.close()


# ------------------------------------------------------------------ stalls


class Trickler:
    """A committee member's endpoint that answers every request one byte per second."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._trickle, args=(c,), daemon=True).start()

    def _trickle(self, c: socket.socket) -> None:
        answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 4000\r\n\r\n" + b" " * 4000)
        try:
            c.recv(65536)
            for i in range(len(answer)):
                if self.stop.wait(0.5):
                    return
                c.sendall(answer[i:i + 1])
        except OSError:
            return

    def close(self) -> None:
        self.stop.set()
        for c in self.conns:
            c.close()
        self.sock.close()


def test_a_trickling_member_delays_only_its_own_jobs_round(nets, chain):
    """Job 1's committee has a member that trickles its answers; job 2 (same leader, other
    committee) settles in the same pass, within the pass's own bound."""
    trickler_key = Keypair.from_seed(bytes([124] * 32))
    keys = arrange([K[0], trickler_key, K[1]], K[0], 5)
    policy = SettlePolicy(settle_every_windows=5, peer_timeout_seconds=2.0,
                          round_wait_seconds=1.0)
    net = nets(keys, 3, stubs=(trickler_key,), policy=policy)
    leader = net.node(K[0])
    t = Trickler()
    v = chain.validators[bytes(trickler_key.pubkey())]
    chain.validators[bytes(trickler_key.pubkey())] = replace(
        v, endpoint=f"http://127.0.0.1:{t.port}")
    chain.jobs[JOB2] = chain.jobs[JOB]
    chain.set_committee([leader.pub], 1, job=JOB2)
    try:
        net.deliver(chain_of(5))
        for p in chain_of(5, job=JOB2):
            assert leader.post("/v1/proofs", signed_json(p)).status_code == 200
        done = threading.Event()
        started = time.monotonic()
        threading.Thread(target=lambda: (leader.settler.settle_now(), done.set()),
                         daemon=True).start()
        assert done.wait(4 * policy.peer_timeout_seconds), "the pass is stuck on the trickler"
        assert chain.jobs[JOB2].last_seq == 5  # the unrelated job settled in this pass
        assert time.monotonic() - started < 4 * policy.peer_timeout_seconds
    finally:
        t.close()


def test_reporters_run_while_a_settlement_pass_is_stuck():
    release = threading.Event()
    ran = threading.Event()

    class StuckSettler:
        def settle_now(self):
            release.wait(30)

        def close(self):
            pass

    loop = SettlementLoop(StuckSettler(), interval=0.05, tasks=(ran.set,))  # type: ignore[arg-type]
    loop.start()
    try:
        assert ran.wait(5), "a background task waited for the settlement pass"
    finally:
        release.set()
        loop.stop(5)


# ------------------------------------------------------------------ own outage


def test_a_validator_back_from_an_outage_does_not_report_the_providers_downtime(nets, chain):
    """1-of-1: the node was down for 12 windows (the worker kept its proofs). Back up, it
    reports nothing until it has itself watched ``max_missed_windows`` windows of silence;
    the backlog arrives first, so the job never fails."""
    net = nets(K[:1], 1, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    (node,) = net.nodes
    ps = chain_of(20)
    net.at(ps[4].window_end + 1)
    net.deliver(ps[:5])
    node.stop()  # the validator's outage
    net.at(ps[16].window_end + 1)  # 12 windows later
    node.start()
    assert node.downtime.report_pending() == []  # at once after the restart
    net.tick(5 * WINDOW)
    assert node.downtime.report_pending() == []  # half the allowance after the restart
    assert node.member.downtime_sign({"job": b58(JOB), "last_proof_window_end": 0,
                                      "message": "AA=="})[0] in (400, 409)
    net.deliver(ps[5:])  # the worker's backoff delivers the backlog
    net.tick(4 * WINDOW)
    assert node.downtime.report_pending() == []
    assert chain.downtime_calls == [] and net.job().status == "running"


def test_a_validator_back_from_an_outage_reports_once_it_watched_the_allowance(nets, chain):
    net = nets(K[:1], 1, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    (node,) = net.nodes
    ps = chain_of(5)
    net.at(ps[-1].window_end + 1)
    net.deliver(ps)
    node.stop()
    net.at(ps[-1].window_end + 12 * WINDOW)
    node.start()
    net.tick(10 * WINDOW + REJOIN_GRACE_SECONDS - 1)
    assert node.downtime.report_pending() == []
    net.tick(2)  # ten windows and the rejoin grace watched after the restart, still no proof
    assert node.downtime.report_pending() == ["downtime1"]


def test_a_returning_validator_gives_the_worker_a_rejoin_grace(nets, chain):
    """The allowance alone has passed since the node came back, but a worker finds a
    returning validator only at its next /health probe: no report within the grace; the
    backlog delivered in it clears the job."""
    net = nets(K[:1], 1, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    (node,) = net.nodes
    ps = chain_of(27)
    net.at(ps[4].window_end + 1)
    net.deliver(ps[:5])
    node.stop()
    net.at(ps[4].window_end + 12 * WINDOW)
    node.start()
    net.tick(10 * WINDOW + 1)  # the allowance, watched; the worker has not found us yet
    assert node.downtime.report_pending() == []
    net.deliver(ps[5:])  # the backlog and the windows since, within the grace
    net.tick(REJOIN_GRACE_SECONDS)
    assert node.downtime.report_pending() == []
    assert chain.downtime_calls == []


def test_a_member_back_from_an_outage_refuses_to_cosign_downtime(nets, chain):
    """2-of-2: whichever of the two leads, the returning one neither reports nor co-signs."""
    net = nets(K[:2], 2, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    ps = chain_of(5)
    net.at(ps[-1].window_end + 1)
    net.deliver(ps)
    returning = net.nodes[1]
    returning.stop()
    net.at(ps[-1].window_end + 11 * WINDOW)
    returning.start()
    for _ in range(3):
        net.tick(WINDOW)
        for n in net.nodes:
            n.downtime.report_pending()
    assert chain.downtime_calls == []
    assert returning.metrics.member_requests[("downtime_sign", "not_observed")] \
        + returning.metrics.downtime_reports["not_observed"] >= 1


def test_a_process_sharing_the_database_with_a_dead_one_sees_the_gap(nets, chain, tmp_path):
    """Two processes, one database, one key: the one behind the registered endpoint dies.
    The other cannot reach the registered endpoint, so it does not beat: the node's span
    ends, and silence after it is not attested by either process."""
    from gpum_validator.downtime import DowntimeReporter
    from gpum_validator.liveness import EndpointProbe, Liveness
    from gpum_validator.peers import Peers
    from vtestkit import MARKET

    net = nets(K[:1], 1, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    (registered,) = net.nodes
    ps = chain_of(5)
    net.at(ps[-1].window_end + 1)
    net.deliver(ps)
    second_store = SQLiteStore(registered.db)  # the second process, same database
    peers = Peers(chain, MARKET, timeout=2, endpoint_ttl=0)
    probe = EndpointProbe(peers, registered.pub, deadline=2)
    clock = net.clock
    liveness = Liveness(second_store, probe, clock=lambda: clock[0])
    reporter = DowntimeReporter(chain, registered.key, second_store, peers, net.policy,
                                clock=lambda: clock[0], liveness=liveness)
    try:
        assert liveness.beat()  # the registered process answers: the node is up
        registered.stop()  # it dies
        for _ in range(12):  # 12 windows: the second process probes and reports each one
            clock[0] += WINDOW
            chain.now = int(clock[0])
            assert not liveness.beat()
            assert reporter.report_pending() == []
        assert liveness.observed_from() is None and chain.downtime_calls == []
    finally:
        probe.close()
        peers.close()
        second_store.close()


def test_no_downtime_when_the_worker_delivered_to_another_member(nets, chain):
    """2-of-3: the worker's newest windows reached only one member. The other two saw
    silence, but the leader asks every member for its newest proof first, verifies it through
    its own intake and reports nothing."""
    net = nets(K, 2, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    ps = chain_of(8)
    net.at(ps[-1].window_end + 1)
    net.deliver(ps[:5])
    reached = net.nodes[2]
    net.deliver(ps[5:], to=[reached])
    for _ in range(9):  # 12 windows after seq 5, 9 after seq 8
        net.tick(WINDOW)
        for n in net.nodes:
            n.downtime.report_pending()
    assert chain.downtime_calls == []
    caught_up = [n for n in net.nodes if n.metrics.downtime_reports["proof_elsewhere"]]
    assert caught_up and all(n.store.newest_accepted(JOB).seq == 8 for n in caught_up)


def test_a_silent_provider_that_finishes_first_is_still_reported(nets, chain):
    """2-of-2: the worker goes silent, its owner finishes the job after the allowance ran
    out; both members still attest the windows missed before ``ended_at``."""
    net = nets(K[:2], 2, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    ps = chain_of(5)
    net.at(ps[-1].window_end + 1)
    net.deliver(ps)
    finished_at = ps[-1].window_end + 11 * WINDOW
    net.at(finished_at)
    chain.set_job(status="finishing", ended_at=finished_at)
    reported: list[str] = []
    for _ in range(3):
        net.tick(WINDOW)
        for n in net.nodes:
            reported += n.downtime.report_pending()
    assert reported == ["downtime1"], chain.downtime_calls
    assert net.job().status == "failed"


def test_silence_after_the_finish_is_no_downtime(nets, chain):
    """The provider finished before its allowance ran out: the silence that follows is the
    grace, not downtime, however long the members wait."""
    net = nets(K[:2], 2, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    ps = chain_of(5)
    net.at(ps[-1].window_end + 1)
    net.deliver(ps)
    chain.set_job(status="finishing", ended_at=ps[-1].window_end + 3 * WINDOW)
    for _ in range(15):
        net.tick(WINDOW)
        for n in net.nodes:
            assert n.downtime.report_pending() == []
    assert chain.downtime_calls == []


# ------------------------------------------------------------------ a member that exits


def exiting(chain, key) -> None:
    """``key``'s validator requested its exit (its bond unbonds; the account stays)."""
    v = chain.validators[bytes(key.pubkey())]
    chain.validators[bytes(key.pubkey())] = replace(v, status="exiting", bond=0)


@pytest.mark.parametrize("exiting_leads", [False, True])
def test_an_exiting_member_still_settles_the_proved_seconds(nets, chain, exiting_leads):
    """2-of-2 [A, B]: B requests its exit after the worker proved five windows. B still
    answers queries, co-signs and leads; the round pays every proved second, whoever leads."""
    leaver = K[1]
    keys = arrange(K[:2], leaver if exiting_leads else K[0], 5)
    net = nets(keys, 2)
    net.deliver(chain_of(5))
    exiting(chain, leaver)
    net.settle_pass()
    assert (net.job().last_seq, net.job().paid_seconds) == (5, 300)
    assert chain.settle_submitters == [bytes((leaver if exiting_leads else K[0]).pubkey())]


def silent_for(net, windows: int) -> None:
    """``windows`` windows pass without a proof; every node runs its downtime reporter."""
    for _ in range(windows):
        net.tick(WINDOW)
        for n in net.nodes:
            n.downtime.report_pending()


def test_an_exiting_member_neither_reports_nor_cosigns_downtime(nets, chain):
    """2-of-2 [A, B], B exiting: the worker falls silent for good. The program counts only
    Active members for downtime, so B neither leads a report nor co-signs A's: nothing is
    sent (fewer slashes is the safe side; ``expire_job`` ends the job)."""
    net = nets(K[:2], 2, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    ps = chain_of(5)
    net.at(ps[-1].window_end + 1)
    net.deliver(ps)
    exiting(chain, K[1])
    silent_for(net, 20)
    assert chain.downtime_calls == [] and net.job().status == "running"
    leaver = net.node(K[1])
    assert leaver.metrics.downtime_reports["not_active"] >= 1
    status, body = leaver.member.downtime_sign({"job": b58(JOB), "last_proof_window_end": 0,
                                                "message": "AA=="})
    assert (status, body["error"]) == (409, "not_active")


def test_downtime_is_reported_by_the_active_members_when_one_exits(nets, chain):
    """2-of-3 with one member exiting: the two Active ones still report a silent worker."""
    net = nets(K, 2, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    ps = chain_of(5)
    net.at(ps[-1].window_end + 1)
    net.deliver(ps)
    exiting(chain, K[1])
    silent_for(net, 20)
    assert len(chain.downtime_calls) == 1, chain.downtime_calls
    assert bytes(K[1].pubkey()) not in chain.downtime_calls[0]["signers"]
    assert net.job().status == "failed"


def test_no_downtime_when_the_worker_delivered_only_to_an_exiting_member(nets, chain):
    """2-of-3: the worker's newest windows reached only the member that is exiting. The
    Active members still ask it for its newest proof, verify it and report nothing."""
    net = nets(K, 2, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    ps = chain_of(8)
    net.at(ps[-1].window_end + 1)
    net.deliver(ps[:5])
    exiting(chain, K[2])
    net.deliver(ps[5:], to=[net.node(K[2])])
    silent_for(net, 9)
    assert chain.downtime_calls == []
    assert net.job().status == "running"


def test_peers_reach_active_and_exiting_members_and_tell_them_apart(chain):
    """``Peers``: an exiting member is reachable for settlement but not Active (no downtime);
    a member whose account closed (bond withdrawn) is neither."""
    from gpum_validator.peers import Peers
    from vtestkit import MARKET

    for k in K:
        chain.add_validator(k)
        v = chain.validators[bytes(k.pubkey())]
        chain.validators[bytes(k.pubkey())] = replace(v, endpoint=f"http://127.0.0.1:1/{k}")
    exiting(chain, K[1])
    del chain.validators[bytes(K[2].pubkey())]
    peers = Peers(chain, MARKET, timeout=1, endpoint_ttl=0)
    try:
        a, b, c = (bytes(k.pubkey()) for k in K)
        assert (peers.endpoint(a), peers.active(a)) == (f"http://127.0.0.1:1/{K[0]}", True)
        assert (peers.endpoint(b), peers.active(b)) == (f"http://127.0.0.1:1/{K[1]}", False)
        assert (peers.endpoint(c), peers.active(c)) == (None, False)
        chain.down = True  # a failed read: unknown, so neither reachable nor Active
        assert (peers.endpoint(a), peers.active(a)) == (None, False)
    finally:
        peers.close()
