"""``verify_head``: a head is trusted on its receipt signature, which commits to sha256 of the
proof bytes (validators verify one signature per proof and keep ``proof_signature``
as sent, so the worker must not depend on it either)."""

from __future__ import annotations

import base64

import pytest
from gpu_market.proof import GpuWindow, WindowProof, encode_proof, receipt_for_proof, sign_proof
from gpu_market.receipt import private_key_from_seed, public_key_bytes, sign_receipt
from gpum_worker.heads import BadHead, verify_head
from gpum_worker.keys import b58encode

KEY = private_key_from_seed(bytes([5] * 32))
PUB = public_key_bytes(KEY)
JOB, PROVIDER = bytes([11] * 32), bytes([9] * 32)


def head_body(proof_signature: bytes | None = None, receipt_key=KEY) -> dict:
    p = WindowProof(program_id=bytes(range(32)), market=bytes([7] * 32), job=JOB,
                    provider=PROVIDER, worker_key=PUB, seq=3, window_start=100, window_end=160,
                    sample_interval_ms=1000, gpus=(GpuWindow("GPU-a", 60, 60),),
                    process_list_hash=bytes(32), prev_proof_hash=bytes([1] * 32),
                    health_flags=0, billable_seconds=60, cumulative_seconds=180)
    raw = encode_proof(p)
    psig = sign_proof(KEY, raw) if proof_signature is None else proof_signature
    return {"job": b58encode(JOB), "seq": 3, "proof": base64.b64encode(raw).decode(),
            "proof_signature": base64.b64encode(psig).decode(),
            "receipt_signature": base64.b64encode(sign_receipt(receipt_key, receipt_for_proof(p, raw))
                                                  ).decode(),
            "worker_key": b58encode(PUB), "decision": "accepted"}


def test_a_head_with_a_swapped_proof_signature_is_still_the_workers_head():
    head = verify_head("v", head_body(proof_signature=bytes(64)), JOB, PROVIDER, {PUB})
    assert head.proof.seq == 3 and head.decision == "accepted"


def test_a_head_whose_receipt_signature_is_not_the_workers_is_refused():
    other = private_key_from_seed(bytes([6] * 32))
    with pytest.raises(BadHead, match="receipt signature does not verify"):
        verify_head("v", head_body(receipt_key=other), JOB, PROVIDER, {PUB})
