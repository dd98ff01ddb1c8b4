"""The controller's real world (gpu_market.managed.world.ChainWorld) over HTTP answered
locally (httpx.MockTransport through the BoundedClient): committee heads decoded, a rejected
head completed from the member's windows, members that fail counted apart, the worker's
status signed by the wallet and size-capped."""

from __future__ import annotations

import base64
import json
import time
from types import SimpleNamespace

import httpx
from gpu_market.managed.world import WORKER_STATUS_MAX_BYTES, ChainWorld
from gpu_market.net import BoundedClient
from gpu_market.proof import (
    HEALTH_TEMP_CRITICAL,
    WORKLOAD_EXITED,
    GpuWindow,
    WindowProof,
    WorkloadWindow,
    encode_proof,
)
from gpu_market.workload import verify_request
from gpu_market.workload_api import WorkerApiError
from solders.keypair import Keypair
from solders.pubkey import Pubkey

JOB = Pubkey.new_unique()
V1, V2, V3, V4 = (Pubkey.new_unique() for _ in range(4))
USER = Keypair()


def proof(seq: int, end: int, *, job: Pubkey = JOB, flags: int = 0) -> str:
    p = WindowProof(program_id=bytes(32), market=bytes(32), job=bytes(job), provider=bytes(32),
                    worker_key=bytes(32), seq=seq, window_start=end - 60, window_end=end,
                    sample_interval_ms=1000,
                    gpus=(GpuWindow("GPU-0", 60, 60, health_flags=flags),),
                    process_list_hash=bytes(32), prev_proof_hash=bytes(32), health_flags=flags,
                    billable_seconds=0 if flags else 60, cumulative_seconds=seq * 60,
                    workload=WorkloadWindow(state=WORKLOAD_EXITED, exit_code=137))  # fmt: skip
    return base64.b64encode(encode_proof(p)).decode()


def handler(request: httpx.Request) -> httpx.Response:
    host, path = request.url.host, request.url.path
    if host == "v1":
        return httpx.Response(200, json={"job": str(JOB), "seq": 9, "decision": "accepted",
                                         "proof": proof(9, 1_000, flags=HEALTH_TEMP_CRITICAL)})
    if host == "v2" and path.endswith("/head"):
        return httpx.Response(200, json={"seq": 10, "decision": "rejected", "proof": proof(10, 1_060)})
    if host == "v2" and path.endswith("/windows"):
        return httpx.Response(200, json={"windows": [
            {"window_end": 1_040, "decision": "accepted"}, {"window_end": 1_060, "decision": "rejected"}]})
    if host == "v3":
        raise httpx.ConnectError("refused")
    if host == "v4":
        return httpx.Response(404, json={"error": "job_unknown"})
    if host == "worker" and path == f"/v1/jobs/{JOB}/workload":
        verify_request(request.headers, "status", bytes(JOB), bytes([7] * 32),
                       expected_signer=bytes(USER.pubkey()), now=int(time.time()))
        return httpx.Response(200, json={"state": "running", "ports": []})
    if host == "big":
        return httpx.Response(200, content=b"{" + b" " * WORKER_STATUS_MAX_BYTES + b"}")
    return httpx.Response(500)


def world() -> ChainWorld:
    endpoints = {V1: "http://v1", V2: "http://v2", V3: "http://v3", V4: "http://v4"}
    client = SimpleNamespace(fetch_validator_by_authority=lambda market, a: SimpleNamespace(
        endpoint=endpoints[a], status="active"))
    return ChainWorld(client, USER, Pubkey.new_unique(),
                      http=BoundedClient(transport=httpx.MockTransport(handler)))  # fmt: skip


def test_the_committee_s_heads_newest_accepted_window_and_who_failed() -> None:
    cv = world().committee(JOB, [V1, V2, V3, V4])
    assert cv.answered == 3  # v4 holds nothing of the job: an answer, not an error
    assert [(h.validator, h.seq, h.decision) for h in cv.heads] == [
        (str(V1), 9, "accepted"), (str(V2), 10, "rejected")]
    assert cv.heads[0].health_flags == HEALTH_TEMP_CRITICAL and cv.heads[0].billable_seconds == 0
    assert cv.heads[1].exit_code == 137
    assert cv.newest_accepted_end == 1_040  # v2's newest accepted, not its rejected head
    assert len(cv.errors) == 1 and str(V3) in cv.errors[0]


def test_a_head_of_another_job_is_refused() -> None:
    other = Pubkey.new_unique()
    cv = world().committee(other, [V1])
    assert cv.heads == () and "a head of another job" in cv.errors[0]


def test_the_worker_status_is_signed_and_capped() -> None:
    w = world()
    assert w.workload_status("http://worker", JOB, bytes([7] * 32))["state"] == "running"
    try:
        w.workload_status("http://big", JOB, bytes([7] * 32))
    except WorkerApiError as e:
        assert "http://big" in str(e)
    else:
        raise AssertionError("an oversize answer was taken")
    try:
        w.workload_status("http://v3", JOB, bytes([7] * 32))
    except WorkerApiError as e:
        assert e.status is None and "cannot reach" in str(e)
    else:
        raise AssertionError("an unreachable worker answered")


def test_json_of_a_head_is_what_the_validator_serves() -> None:
    body = json.loads(handler(httpx.Request("GET", f"http://v1/v1/jobs/{JOB}/head")).content)
    assert set(body) >= {"seq", "decision", "proof"}
