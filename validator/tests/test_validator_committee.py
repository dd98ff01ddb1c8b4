"""Committees of validators over real HTTP on 127.0.0.1, each with its own SQLite
file, one FakeChain (which applies the program's settle rules and checks every Ed25519
signature of a settlement).

What is proven here:

* rounds settle 1-of-1, 2-of-3 and 3-of-3, paying the q-th highest approved total, with
  ``q - 1`` attestations of distinct other members (the chain verifies them);
* a member down: 2-of-3 still settles, also when the down member leads (the next member
  takes over after the timeout); 3-of-3 waits and resumes when it is back;
* a member with a stricter health policy approves less, and the job still settles at the
  q-th highest total (in 3-of-3 at its lower one);
* a byzantine member claiming a higher total does not move the value; one that signs two
  values for one seq is reported once with ``slash_validator_equivocation``;
* non-members get nothing: proofs, queries and sign requests are refused (403);
* a member that lost its database catches up from the chain and attests again;
* downtime is reported when the worker stops, never when only settlement is late.
"""

from __future__ import annotations

import base64

import pytest
from gpu_market.errors import RpcUnavailable
from gpu_market.proof import encode_proof, proof_hash
from gpum_validator.attest import (
    attestation_message,
    leader_of,
    receipt_message_of,
    sign_request_message,
)
from gpum_validator.config import HealthThresholds, SettlePolicy
from gpum_validator.errors import StoreError
from solders.keypair import Keypair
from vnet import Byzantine, arrange
from vtestkit import JOB, T0, UUIDS, VALIDATOR_KEYS, WINDOW, b58, chain_of, gpu, pk, signed_json

K = list(VALIDATOR_KEYS[:3])


def settled(net):
    j = net.job()
    return j.last_seq, j.claimed_seconds, j.paid_seconds


def submitted(net):
    """(submitter, attesters, approved) of every settle the chain saw."""
    return [(sub, [bytes(a.authority) for a in it.attestations], it.approved_seconds)
            for sub, call in zip(net.chain.settle_submitters, net.chain.settle_calls)
            for it in call]


# ------------------------------------------------------------------ rounds


def test_one_of_one(nets):
    net = nets(K[:1], 1)
    net.deliver(chain_of(5))
    (r,) = net.settle_pass()
    assert r.confirmed == 1
    assert settled(net) == (5, 300, 300)
    assert submitted(net) == [(K[0].pubkey().__bytes__(), [], 300)]


@pytest.mark.parametrize("quorum", [2, 3])
def test_q_of_three_settles_with_q_minus_one_attestations(nets, quorum):
    net = nets(K, quorum)
    net.deliver(chain_of(5))
    reports = net.settle_pass()
    assert sum(r.confirmed for r in reports) == 1
    assert sum(r.not_leader for r in reports) == 2
    assert settled(net) == (5, 300, 300)
    ((sub, atts, approved),) = submitted(net)
    assert sub == net.leader(5).pub and approved == 300
    assert len(atts) == quorum - 1 and sub not in atts and len(set(atts)) == quorum - 1
    # Rewards were credited to the q attesting members; each one's /metrics shows its own.
    earned = {n.name: net.chain.validators[n.pub].rewards_earned for n in net.nodes}
    attesters = {n.name for n in net.nodes if n.pub in [sub, *atts]}
    assert all((earned[name] > 0) == (name in attesters) for name in earned)
    leader = net.leader(5)
    leader.rewards.refresh(force=True)
    import httpx

    text = httpx.get(leader.url + "/metrics").text
    assert f"gpum_validator_rewards_earned {earned[leader.name]}" in text
    assert 'gpum_validator_settle_rounds_total{outcome="led"} 1' in text
    # The next round settles only the new windows, paying the difference.
    net.deliver(chain_of(10)[5:])
    net.settle_pass()
    assert settled(net) == (10, 600, 600)


def test_every_member_keeps_its_own_total(nets):
    net = nets(K, 2)
    net.deliver(chain_of(3))
    assert [n.total(3) for n in net.nodes] == [180, 180, 180]
    r = net.nodes[1].post("/v1/attestations/query", {"job": b58(JOB), "seq": 3})
    assert r.status_code == 200
    body = r.json()
    assert body["approved_seconds"] == 180 and body["receipt"]["cumulative_seconds"] == 180
    assert body["receipt"]["proof_hash"] == proof_hash(encode_proof(chain_of(3)[2])).hex()
    assert net.nodes[1].post("/v1/attestations/query",
                             {"job": b58(JOB), "seq": 4}).json()["error"] == "seq_unknown"


def test_a_rejected_window_is_not_approved_and_the_job_goes_on(nets):
    from vtestkit import make_proof

    net = nets(K, 2)
    ps = chain_of(2)
    prev = proof_hash(encode_proof(ps[-1]))
    bad = make_proof(3, prev=prev, gpus=(gpu(UUIDS[0]), gpu("GPU-zzzz")))  # other GPUs
    ps.append(bad)
    for s in (4, 5):
        ps.append(make_proof(s, prev=proof_hash(encode_proof(ps[-1]))))
    net.deliver(ps)
    assert [n.store.proofs_at(JOB, 3)[0].reason for n in net.nodes] == ["gpu_uuids_changed"] * 3
    assert [n.total(5) for n in net.nodes] == [240, 240, 240]
    net.settle_pass()
    assert settled(net) == (5, 300, 240)  # claimed 300, approved and paid 240


# ------------------------------------------------------------------ members down


def test_two_of_three_settles_with_a_member_down(nets):
    net = nets(K, 2)
    net.deliver(chain_of(5))
    leader = net.leader(5)
    other = next(n for n in net.nodes if n is not leader)
    other.stop()
    net.settle_pass()
    assert settled(net) == (5, 300, 300)
    ((_, atts, _),) = submitted(net)
    assert other.pub not in atts


def test_two_of_three_leader_down_next_member_leads_after_timeout(nets):
    net = nets(K, 2)
    net.deliver(chain_of(5))
    leader = net.leader(5)
    leader.stop()
    assert all(r.confirmed == 0 for r in net.settle_pass())  # the others wait for it
    net.tick(2 * WINDOW)  # the default timeout: 2 windows
    net.settle_pass()
    assert settled(net) == (5, 300, 300)
    ((sub, atts, _),) = submitted(net)
    assert sub == net.leader(5, timeouts=1).pub != leader.pub and leader.pub not in atts


def test_three_of_three_waits_for_a_member_and_resumes(nets):
    net = nets(K, 3)
    net.deliver(chain_of(5))
    leader = net.leader(5)
    other = next(n for n in net.nodes if n is not leader)
    other.stop()
    for _ in range(2):
        reports = net.settle_pass()
        assert sum(r.waiting for r in reports) == 1 and net.chain.settle_calls == []
    other.start()
    net.settle_pass()
    assert settled(net) == (5, 300, 300)


# ------------------------------------------------------------------ approvals differ


def warm_chain(n):
    """Proofs whose first GPU reached 90 C: full windows under the terms (95 C)."""
    return chain_of(n, gpus=(gpu(UUIDS[0], temp_max_c=90), gpu(UUIDS[1])))


STRICT = HealthThresholds(temp_critical_c=85, ecc_uncorrected_max=0)


def test_stricter_member_approves_less_two_of_three_settles_at_the_quorum_value(nets):
    strict_key = K[2]
    keys = arrange(K, strict_key, 5)  # the strict member leads: it cannot attest 300
    net = nets(keys, 2, own_health={keys.index(strict_key): STRICT})
    strict = net.nodes[keys.index(strict_key)]
    net.deliver(warm_chain(5))
    assert sorted(n.total(5) for n in net.nodes) == [295, 300, 300]
    reports = net.settle_pass()
    assert sum(r.deferred for r in reports) == 1 and net.chain.settle_calls == []
    net.tick(2 * WINDOW)
    net.settle_pass()
    assert settled(net) == (5, 300, 300)  # the q-th highest of 300, 300, 295
    ((sub, atts, _),) = submitted(net)
    assert strict.pub not in [sub, *atts]


def test_stricter_member_three_of_three_settles_at_its_total(nets):
    net = nets(K, 3, own_health={1: STRICT})
    net.deliver(warm_chain(5))
    net.tick(0)
    for _ in range(4):  # whoever leads, within a few timeouts
        net.settle_pass()
        net.tick(2 * WINDOW)
        if net.chain.settle_calls:
            break
    assert settled(net) == (5, 300, 295)
    # Later rounds pay from there: the unpaid 5 s stay unpaid, new seconds are paid.
    net.deliver(warm_chain(10)[5:])
    for _ in range(4):
        net.settle_pass()
        if net.job().last_seq == 10:
            break
        net.tick(2 * WINDOW)
    assert settled(net) == (10, 600, 590)


def test_byzantine_member_claiming_more_is_not_counted(nets, chain):
    liar = Keypair.from_seed(bytes([120] * 32))
    net = nets(arrange([K[0], K[1], liar], K[0], 5), 2, stubs=(liar,))
    byz = Byzantine(chain, liar, [10**6])
    try:
        ps = chain_of(5)
        byz.give(ps)
        net.deliver(ps)
        net.settle_pass()
        assert settled(net) == (5, 300, 300)  # not 10**6: the 2nd highest of 10**6, 300, 300
    finally:
        byz.close()


def test_member_signing_two_values_for_one_seq_is_reported_once(nets, chain, monkeypatch):
    liar = Keypair.from_seed(bytes([121] * 32))
    keys = arrange([K[0], liar, K[1]], K[0], 5)
    net = nets(keys, 3, stubs=(liar,))
    leader, honest = net.node(K[0]), net.node(K[1])
    byz = Byzantine(chain, liar, [300, 290])
    try:
        ps = chain_of(5)
        byz.give(ps)
        net.deliver(ps)
        # Pass 1: the liar signs 300; the honest member's database fails: no quorum yet.
        real = honest.store.record_given_attestation
        calls = []

        def failing(att):
            calls.append(att)
            if len(calls) == 1:
                raise StoreError("disk full (test)")
            return real(att)

        monkeypatch.setattr(honest.store, "record_given_attestation", failing)
        assert next(m for m in net.committee if m != leader.pub) == byz.pub  # asked first
        r = leader.settler.settle_now()
        assert r.waiting == 1 and chain.settle_calls == [] and byz.signed == [300]
        # Pass 2: the liar now claims 290. The leader attested 300 for seq 5 and proposes
        # nothing else there (it never signs two values for one seq): no quorum, no ask.
        r = leader.settler.settle_now()
        assert r.waiting == 1 and byz.signed == [300]
        assert leader.store.given_attestation(JOB, 5).approved_seconds == 300
        # The liar's second value reaches the leader anyway, as the liar's own commitment in a
        # sign request of its own: evidence of two values for seq 5.
        r = leader.post("/v1/attestations/sign", sign_body(leader, _As(liar), 5, 290))
        assert r.status_code in (403, 409)
        assert {a.approved_seconds for a in leader.store.received_attestations(JOB, 5, byz.pub)} \
            == {300, 290}
        s = leader.vreporter.report_pending()
        assert s.slashed == 1
        (call,) = chain.validator_slash_calls
        assert bytes(call["validator"]) == byz.pub
        assert {call["first_approved"], call["second_approved"]} == {300, 290}
        assert chain.validators[byz.pub].slashes == 1
        assert leader.vreporter.report_pending(force=True).slashed == 0
        leader.restart()  # durable: never resubmitted after a restart
        assert leader.vreporter.report_pending(force=True).slashed == 0
        assert len(chain.validator_slash_calls) == 1
    finally:
        byz.close()


def test_a_member_asking_peers_to_cosign_more_than_it_attested_is_refused_and_slashed(nets, chain):
    liar = Keypair.from_seed(bytes([122] * 32))
    keys = arrange([K[0], liar, K[1]], K[0], 5)
    net = nets(keys, 2, stubs=(liar,))
    leader = net.node(K[0])
    byz = Byzantine(chain, liar, [300])
    try:
        ps = chain_of(5)
        byz.give(ps)
        net.deliver(ps)
        assert next(m for m in net.committee if m != leader.pub) == byz.pub  # asked first
        leader.settler.settle_now()
        assert settled(net) == (5, 300, 300) and byz.signed == [300]
        # The liar now leads a "round" of its own at seq 5 for 10**6 seconds, committing
        # first with its own attestation of that value: the honest member refuses ...
        r = leader.post("/v1/attestations/sign",
                        sign_body(leader, _As(liar), 5, 10**6))
        assert (r.status_code, r.json()["error"]) == (409, "above_own_total")
        # ... and holds two attestations by the liar for seq 5: its bond is slashed, once.
        assert {a.approved_seconds for a in leader.store.received_attestations(JOB, 5, byz.pub)} \
            == {300, 10**6}
        assert leader.vreporter.report_pending().slashed == 1
        (call,) = chain.validator_slash_calls
        assert bytes(call["validator"]) == byz.pub
        assert {call["first_approved"], call["second_approved"]} == {300, 10**6}
        assert chain.validators[byz.pub].slashes == 1
        # A request whose attestation is not the leader's (or not over this receipt) is refused
        # before anything is stored.
        r = leader.post("/v1/attestations/sign",
                        sign_body(leader, _As(liar), 5, 200, attestation_key=K[1]))
        assert (r.status_code, r.json()["error"]) == (403, "bad_leader_attestation")
        assert len(leader.store.received_attestations(JOB, 5, byz.pub)) == 2
    finally:
        byz.close()


class _As:
    """A key in the shape ``sign_body`` takes for a leader (``key``, ``pub``)."""

    def __init__(self, key: Keypair) -> None:
        self.key, self.pub = key, bytes(key.pubkey())


# ------------------------------------------------------------------ non-members


def test_non_members_are_refused(nets, chain):
    net = nets(K[:2], 2)
    outsider_key = VALIDATOR_KEYS[3]
    o = net.outsider(outsider_key)
    r = o.post("/v1/proofs", signed_json(chain_of(1)[0]))
    assert (r.status_code, r.json()["error"], r.json()["retry"]) == \
        (403, "not_in_committee", False)
    assert o.store.summary()["proofs"] == {}
    net.deliver(chain_of(5))
    member = net.nodes[1]
    # A member answers nothing about a job whose committee does not name it ...
    for path, body in (("/v1/attestations/query", {"job": b58(JOB), "seq": 5}),
                       ("/v1/downtime/sign", {"job": b58(JOB), "last_proof_window_end": 0,
                                              "message": "AA=="})):
        r = o.post(path, body)
        assert (r.status_code, r.json()["error"]) == (403, "not_in_committee")
    # ... and signs only for another member of the job's committee.
    req = sign_request_message(JOB, 5, 300, o.pub, member.pub, 1, 0)
    body = {"job": b58(JOB), "seq": 5, "approved_seconds": 300, "leader": b58(o.pub),
            "member": b58(member.pub), "round": 1, "attempt": 0,
            "leader_signature": base64.b64encode(bytes(outsider_key.sign_message(req))).decode(),
            "leader_attestation": base64.b64encode(bytes(64)).decode()}
    r = member.post("/v1/attestations/sign", body)
    assert (r.status_code, r.json()["error"]) == (403, "requester_not_member")
    body["leader"] = b58(net.nodes[0].pub)  # a member's name, signed by someone else
    r = member.post("/v1/attestations/sign", body)
    assert (r.status_code, r.json()["error"]) == (403, "bad_request_signature")
    assert member.store.given_attestation(JOB, 5) is None
    # An outsider leading a "round" gets nothing signed, so it cannot settle anything.
    o.settler.settle_now(force=True)
    assert net.chain.settle_calls == []


def ask(net, member, leader, seq, value):
    """``leader`` asks ``member`` at the first attempt of the round that it leads."""
    attempt = next(k for k in range(len(net.committee))
                   if leader_of(JOB, seq // 5, net.committee, k) == leader.pub)
    return member.post("/v1/attestations/sign",
                       sign_body(member, leader, seq, value, attempt=attempt))


def sign_body(member, leader, seq, value, attestation_key=None, round_=None, attempt=0,
              target=None):
    """A leader's sign request to ``member`` (or names ``target``): signed by ``leader``,
    carrying its own attestation of ``value`` over ``member``'s stored receipt at ``seq``
    (signed by ``attestation_key`` if given), for ``round_`` (default: the seq's) and
    ``attempt``."""
    round_ = seq // 5 if round_ is None else round_
    target = member.pub if target is None else target
    req = sign_request_message(JOB, seq, value, leader.pub, target, round_, attempt)
    stored = member.store.accepted_at(JOB, seq)
    att = (attestation_key or leader.key).sign_message(
        attestation_message(receipt_message_of(stored), value)) if stored else bytes(64)
    return {"job": b58(JOB), "seq": seq, "approved_seconds": value, "leader": b58(leader.pub),
            "member": b58(target), "round": round_, "attempt": attempt,
            "leader_signature": base64.b64encode(bytes(leader.key.sign_message(req))).decode(),
            "leader_attestation": base64.b64encode(bytes(att)).decode()}


def test_member_signs_one_value_per_seq_never_above_its_total(nets):
    net = nets(K, 2)
    net.deliver(chain_of(5))
    leader, second = net.leader(5), net.leader(5, 1)
    member = next(n for n in net.nodes if n not in (leader, second))
    r = ask(net, member, leader, 5, 301)
    assert (r.status_code, r.json()["error"]) == (409, "above_own_total")
    # Below the quorum value of the totals it sees (its own 300 and the others' 300): refused.
    r = ask(net, member, leader, 5, 250)
    assert (r.status_code, r.json()["error"]) == (409, "below_quorum_value")
    with net.alone(member):  # it sees no other total: no floor
        first = ask(net, member, leader, 5, 250)
    assert first.status_code == 200 and first.json()["authority"] == b58(member.pub)
    assert ask(net, member, leader, 5, 250).json() == first.json()  # the same value again
    r = ask(net, member, second, 5, 300)
    assert (r.status_code, r.json()["error"], r.json()["signed_approved_seconds"]) == \
        (409, "already_signed_other_value", 250)
    member.restart()  # durable
    r = ask(net, member, leader, 5, 300)
    assert (r.status_code, r.json()["error"]) == (409, "already_signed_other_value")
    q = member.post("/v1/attestations/query", {"job": b58(JOB), "seq": 5}).json()
    assert q["signed_approved_seconds"] == 250
    r = member.post("/v1/attestations/sign", {"job": b58(JOB), "seq": 5})
    assert (r.status_code, r.json()["error"]) == (400, "bad_request")


def test_leader_falls_back_to_a_value_members_already_signed(nets):
    net = nets(K, 2)
    net.deliver(chain_of(5))
    leader = net.leader(5)
    others = [n for n in net.nodes if n is not leader]
    for n in others:  # an earlier leader collected 250 from both, then vanished (while
        with net.alone(n):  # neither saw another member's total, so none had a floor)
            assert ask(net, n, leader, 5, 250).status_code == 200
    net.settle_pass()
    assert settled(net) == (5, 300, 250)


# ------------------------------------------------------------------ late joiner


def test_member_that_lost_its_database_catches_up_from_the_chain(nets):
    net = nets(K, 3)
    net.deliver(chain_of(5))
    net.settle_pass()
    assert settled(net) == (5, 300, 300)
    lost = next(n for n in net.nodes if n is not net.leader(10))
    lost.wipe()
    assert lost.store.newest_accepted(JOB) is None
    net.deliver(chain_of(10)[5:])
    assert lost.total(10) == 600  # the chain's paid 300 + the 5 windows it verified
    assert lost.store.missed_windows(JOB) == []
    net.settle_pass()
    assert settled(net) == (10, 600, 600)


# ------------------------------------------------------------------ downtime


def test_downtime_only_when_the_worker_stopped_not_when_settlement_is_late(nets, chain):
    net = nets(K, 2, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    ps = chain_of(30)
    net.at(T0 + WINDOW + 1)
    chain.settle_error = RpcUnavailable("the RPC drops every settle (test)")
    for p in ps:  # 30 windows, 3x max_missed_windows, and nothing settles on chain
        net.at(p.window_end + 1)
        net.deliver([p])
        net.settle_pass()
        for n in net.nodes:
            assert n.downtime.report_pending() == []
    assert net.job().last_seq == 0 and chain.downtime_calls == []
    # The worker stops. Nine windows later still nothing; at ten the leader reports.
    net.at(ps[-1].window_end + 9 * WINDOW)
    assert [n.downtime.report_pending() for n in net.nodes] == [[], [], []]
    net.at(ps[-1].window_end + 10 * WINDOW)
    sent = [s for n in net.nodes for s in n.downtime.report_pending()]
    assert sent == ["downtime1"]
    (call,) = chain.downtime_calls
    assert call["last_proof_window_end"] == ps[-1].window_end and len(call["signers"]) == 2
    assert net.job().status == "failed"
    assert [n.downtime.report_pending() for n in net.nodes] == [[], [], []]


def test_downtime_member_that_saw_a_later_proof_does_not_sign(nets, chain):
    net = nets(K, 3, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    ps = chain_of(6)
    net.at(ps[-1].window_end + 1)
    net.deliver(ps[:5])
    late = net.nodes[2]
    net.deliver(ps[5:], to=[late])  # only one member got the last window
    # Ten windows after seq 5 the other two are due, but the third saw seq 6: no quorum.
    net.at(ps[4].window_end + 10 * WINDOW)
    for n in net.nodes:
        assert n.downtime.report_pending() == []
    assert chain.downtime_calls == []
    # From ten windows after seq 6 on, a leader gets all three signatures.
    sent = []
    for _ in range(8):
        net.tick(WINDOW)
        sent += [s for n in net.nodes for s in n.downtime.report_pending()]
        if sent:
            break
    assert sent == ["downtime1"]
    (call,) = chain.downtime_calls
    assert call["last_proof_window_end"] == ps[5].window_end and len(call["signers"]) == 3


# ------------------------------------------------------------------ crash safety


def test_open_intent_is_resent_with_its_attestations_after_a_restart(nets, chain):
    net = nets(K, 3)
    net.deliver(chain_of(5))
    leader = net.leader(5)
    chain.settle_error = RpcUnavailable("timeout (test)")
    r = leader.settler.settle_now()
    assert (r.intended, r.retry_later) == (1, 1)
    (it,) = leader.store.open_intents()
    assert it.status == "sent" and it.approved_seconds == 300 and len(it.attestations) == 2
    for n in net.nodes:  # the other members vanish; the leader restarts
        if n is not leader:
            n.stop()
    leader.restart()
    chain.settle_error = None
    net.tick(3600)
    r = leader.settler.settle_now()
    assert r.confirmed == 1 and settled(net) == (5, 300, 300)
    assert [len(c[0].attestations) for c in chain.settle_calls] == [2, 2]
    assert chain.settle_calls[0] == chain.settle_calls[1]  # the very same attestations


def test_downtime_reporter_retries_when_the_chain_clock_lags(
        nets, chain):
    net = nets(K[:1], 1, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    ps = chain_of(3)
    net.at(ps[-1].window_end + 1)
    net.deliver(ps)
    (node,) = net.nodes
    net.at(ps[-1].window_end + 10 * WINDOW)  # our clock; the chain's is a minute behind
    chain.now = int(net.clock[0]) - WINDOW
    assert node.downtime.report_pending() == []
    (rep,) = node.store.downtime_reports()
    assert (rep.status, rep.attempts) == ("retry", 1) and "NotEnoughMissedWindows" in rep.last_error
    net.at(rep.next_attempt_at)
    assert node.downtime.report_pending() == ["downtime2"]
    assert node.store.downtime_reports()[0].status == "done"
    assert node.downtime.report_pending() == []  # done is never resubmitted
    assert len(chain.downtime_calls) == 2


def test_member_downtime_signature_rules(nets, chain):
    net = nets(K[:2], 2, policy=SettlePolicy(settle_every_windows=5, chain_refresh_seconds=0))
    ps = chain_of(3)
    net.at(ps[-1].window_end + 1)
    net.deliver(ps)
    leader, member = net.nodes

    def ask_downtime(lpwe, message=None):
        msg = message if message is not None else bytes(chain.slash_downtime_message(
            leader.key.pubkey(), pk(JOB), [member.key.pubkey()], lpwe))
        return member.post("/v1/downtime/sign", {
            "job": b58(JOB), "last_proof_window_end": lpwe,
            "message": base64.b64encode(msg).decode()})

    end = ps[-1].window_end
    net.at(end + 10 * WINDOW - 1)
    assert ask_downtime(end).json()["error"] == "not_enough_missed_windows"
    net.at(end + 10 * WINDOW)
    assert ask_downtime(end - WINDOW).json()["error"] == "saw_later_proof"
    assert ask_downtime(end, b"not a message").json()["error"] == "bad_downtime_message"
    other = bytes(chain.slash_downtime_message(member.key.pubkey(), pk(JOB),
                                               [leader.key.pubkey()], end))
    assert ask_downtime(end, other).json()["error"] == "bad_downtime_message"  # we submit
    r = ask_downtime(end)
    assert r.status_code == 200 and r.json()["authority"] == b58(member.pub)
    chain.set_job(status="finishing", ended_at=end)  # finished before it missed any
    assert ask_downtime(end).json()["error"] == "not_enough_missed_windows"
    chain.set_job(status="finishing", ended_at=end + 10 * WINDOW)  # missed them, then
    assert ask_downtime(end).status_code == 200                    # finished
    chain.set_job(status="completed", ended_at=end + 10 * WINDOW)
    assert ask_downtime(end).json()["error"] == "job_not_running"
