"""Equivocation evidence -> exactly one slash_equivocation, durable across restarts; on SQLite
and on PostgreSQL (``store_db``, storekit)."""

from __future__ import annotations

import base64
import time

import pytest
import storekit
from gpu_market.errors import GpuMarketError, RpcUnavailable, TransactionTooLarge
from gpu_market.proof import encode_proof, proof_hash
from gpu_market.receipt import receipt_message, verify_receipt
from gpum_validator.config import SettlePolicy
from gpum_validator.intake import Intake
from gpum_validator.metrics import Metrics
from gpum_validator.records import ReportKind
from gpum_validator.settlement import SettlementLoop
from gpum_validator.slashing import EquivocationReporter
from vtestkit import (
    JOB,
    MARKET,
    PROGRAM,
    WORKER_PUB,
    cfg,
    chain_of,
    make_proof,
    make_settler,
    signed_json,
)


@pytest.fixture(params=storekit.BACKENDS)
def store_db(request, tmp_path):
    yield from storekit.store_db(request, tmp_path)


class Node:
    """Store + intake + reporter as `gpum-validator run` wires them (one process life)."""

    def __init__(self, store_db, chain, clock, metrics=None):
        self.store = store_db.open()
        self.metrics = metrics or Metrics()
        self.reporter = EquivocationReporter(chain, "authority", self.store, PROGRAM,
                                             SettlePolicy(max_chain_error_attempts=3),
                                             self.metrics, clock=lambda: clock[0])
        self.intake = Intake(cfg(), self.store, chain, self.metrics, clock=lambda: clock[0],
                             on_equivocation=self.reporter.notify)

    def close(self):
        self.store.close()


def equivocate(node):
    honest = chain_of(1)[0]
    other = make_proof(1, billable=30, cumulative=30)
    a, b = signed_json(honest), signed_json(other)
    assert node.intake.submit(a)[1]["status"] == "accepted"
    status, body = node.intake.submit(b)
    assert (status, body["error"]) == (409, "equivocation")
    return {proof_hash(encode_proof(honest)): (honest, a), proof_hash(encode_proof(other)): (other, b)}


def test_exactly_one_submission_durable_across_restart(store_db, chain, clock):
    node = Node(store_db, chain, clock)
    sent = equivocate(node)
    assert node.reporter.wakeup.is_set()  # the hook only wakes the loop
    assert chain.slash_calls == []  # nothing was sent on the request thread
    summary = node.reporter.report_pending()
    assert summary.slashed == 1 and summary.signatures == ["slash1"]
    (call,) = chain.slash_calls
    assert bytes(call["job"]) == JOB
    for which in ("first", "second"):
        r, sig = call[which], call[f"{which}_signature"]
        proof, wire = sent[r.proof_hash]
        assert (r.seq, r.cumulative_seconds, r.window_end) == (
            proof.seq, proof.cumulative_seconds, proof.window_end)
        assert sig == base64.b64decode(wire["receipt_signature"])
        msg = receipt_message(PROGRAM, MARKET, JOB, r.seq, r.cumulative_seconds, r.window_end,
                              r.proof_hash)
        assert verify_receipt(WORKER_PUB, sig, msg)
    assert call["first"].proof_hash != call["second"].proof_hash
    assert node.reporter.report_pending().slashed == 0
    assert len(chain.slash_calls) == 1
    (case,) = node.store.equivocation_cases()
    assert (case.status, case.outcome, case.signature, case.attempts) == ("done", "slashed", "slash1", 1)
    assert node.store.equivocations()[0][5] == "slash1"
    assert 'gpum_validator_equivocation_reports_total{outcome="slashed"} 1' in node.metrics.render({})
    node.close()

    chain.records.clear()  # even if the chain forgot, a done report is never resubmitted
    node = Node(store_db, chain, clock)
    assert node.reporter.report_pending().slashed == 0
    assert len(chain.slash_calls) == 1
    assert node.store.summary()["equivocation_reports"] == {"done": 1}
    node.close()


def test_already_exists_error_means_done(store_db, chain, clock):
    node = Node(store_db, chain, clock)
    equivocate(node)
    chain.slash_error = GpuMarketError(0, "AccountAlreadyInUse", "already in use", [])
    summary = node.reporter.report_pending()
    assert (summary.slashed, summary.already_done) == (0, 1)
    assert node.reporter.report_pending(force=True).already_done == 0
    assert len(chain.slash_calls) == 1
    (case,) = node.store.equivocation_cases()
    assert (case.status, case.outcome) == ("done", "already_slashed")


def test_record_on_chain_after_a_crash_is_not_resent(store_db, chain, clock):
    node = Node(store_db, chain, clock)
    equivocate(node)
    node.store.mark_report(ReportKind.EQUIVOCATION, (JOB, 1), "sent", clock[0],
                           count_attempt=True)
    chain.records[(JOB, 1)] = "authority"  # the send before the crash landed
    node.close()
    node = Node(store_db, chain, clock)
    assert node.reporter.report_pending().already_done == 1
    assert chain.slash_calls == []


def test_job_gone_means_done(store_db, chain, clock):
    node = Node(store_db, chain, clock)
    equivocate(node)
    del chain.jobs[JOB]
    assert node.reporter.report_pending().already_done == 1
    assert chain.slash_calls == []
    assert node.store.equivocation_cases()[0].outcome == "job_gone"


def test_transport_failure_retries_with_backoff_then_succeeds(store_db, chain, clock):
    node = Node(store_db, chain, clock)
    equivocate(node)
    chain.slash_error = RpcUnavailable("connection refused (fake)")
    assert node.reporter.report_pending().retry_later == 1
    assert node.reporter.report_pending().retry_later == 1  # backing off: not even tried
    assert len(chain.slash_calls) == 1
    chain.slash_error = None
    clock[0] += 3600
    assert node.reporter.report_pending().slashed == 1
    assert len(chain.slash_calls) == 2 and len(chain.records) == 1


def test_unsendable_transaction_fails_after_bounded_attempts(store_db, chain, clock):
    node = Node(store_db, chain, clock)
    equivocate(node)
    chain.slash_error = TransactionTooLarge("the slash_equivocation transaction is 1329 bytes")
    for _ in range(5):
        node.reporter.report_pending(force=True)
    assert len(chain.slash_calls) == 3  # max_chain_error_attempts
    (case,) = node.store.equivocation_cases()
    assert (case.status, case.attempts) == ("failed", 3)
    assert "TransactionTooLarge" in case.last_error


def test_settlement_loop_runs_the_reporter_when_woken(store_db, chain, clock):
    node = Node(store_db, chain, clock)
    settler = make_settler(chain, node.store, clock)
    loop = SettlementLoop(settler, interval=3600, reporter=node.reporter)
    loop.start()
    try:
        equivocate(node)  # the hook wakes the loop long before its interval
        deadline = time.monotonic() + 10
        while not chain.slash_calls and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        loop.stop()
    assert len(chain.slash_calls) == 1


def test_three_proofs_one_report(store_db, chain, clock):
    node = Node(store_db, chain, clock)
    equivocate(node)
    third = make_proof(1, billable=10, cumulative=10)
    assert node.intake.submit(signed_json(third))[0] == 409
    assert node.reporter.report_pending().slashed == 1
    assert node.reporter.report_pending(force=True).slashed == 0
    assert len(chain.slash_calls) == 1
