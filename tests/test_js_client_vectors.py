"""The TypeScript client's hand-written layer (``clients/js/src``) matches the Python SDK byte for
byte: the three Ed25519-program layouts (settle with attestations, shared message, entries with
a repeated key), the receipt and attestation messages, the workload spec's canonical bytes and
hash (Unicode and control characters escaped as Python's ``json.dumps(ensure_ascii=True)``),
the worker API request messages; secrets sealed by either side open on the other; specs the
SDK rejects, the client rejects.

``clients/js/test/vectors.cjs`` computes the client's side from the inputs this test writes
(``make test`` builds the client: ``make js-client``).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from gpu_market import receipt, settle, workload
from gpu_market.workload import PortSpec, WorkloadSpec
from solders.keypair import Keypair
from solders.pubkey import Pubkey

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "clients" / "js"


def key(i: int) -> Keypair:
    return Keypair.from_seed(bytes([i]) * 32)


def sig(i: int) -> bytes:
    return bytes((i + k) % 256 for k in range(64))


SPECS: list[tuple[dict[str, Any], WorkloadSpec]] = [
    ({"image": "busybox"}, WorkloadSpec(image="busybox")),
    ({"image": "registry.example.com:5000/team/train:v2@sha256:" + "ab" * 32,
      "command": ["python", "-u"], "args": ["train.py", "--lr", "3e-4", "é 😀 \u2028"],
      "env": {"B": "2", "A": "1", "_z": "tab\tnl\ndel\x7fctl\x01quote\"back\\slash/</script>",
              "UNICODE": "naïve – 東京 😀"},
      "ports": [{"port": 8888}, {"port": 53, "protocol": "udp"}, {"port": 53, "protocol": "tcp"}],
      "shmSizeMib": 1024, "scratchMib": 10240, "finishOnExit": True},
     WorkloadSpec(image="registry.example.com:5000/team/train:v2@sha256:" + "ab" * 32,
                  command=["python", "-u"], args=["train.py", "--lr", "3e-4", "é 😀 \u2028"],
                  env={"B": "2", "A": "1", "_z": "tab\tnl\ndel\x7fctl\x01quote\"back\\slash/</script>",
                       "UNICODE": "naïve – 東京 😀"},
                  ports=[PortSpec(8888), PortSpec(53, "udp"), PortSpec(53, "tcp")],
                  shm_size_mib=1024, scratch_mib=10240, finish_on_exit=True)),
]
INVALID_SPECS = [
    {"image": "Docker.io/UPPER"}, {"image": ""}, {"image": "busybox", "command": ["-x"]},
    {"image": "busybox", "env": {"1BAD": "x"}}, {"image": "busybox", "env": {"A": "nul\x00"}},
    {"image": "busybox", "ports": [{"port": 80}, {"port": 80}]},
    {"image": "busybox", "ports": [{"port": 70000}]}, {"image": "busybox", "shmSizeMib": 0},
    {"image": "busybox", "secretEnv": {"S": "not base64!"}},
    {"image": "busybox", "env": {"A": "x"}, "secretEnv": {"A": base64.b64encode(bytes(48)).decode()}},
    {"image": "busybox", "args": ["x"] * 65},
    {"image": "busybox", "env": {f"E{i}": "v" * 4096 for i in range(17)}},
]


def test_the_typescript_client_matches_the_python_sdk(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node, "node (>= 20) is required: install Node.js"
    assert (CLIENT / "dist" / "index.js").is_file(), "the TypeScript client is not built: run `make js-client`"
    worker = key(1)
    program, market, job = Pubkey.new_unique(), Pubkey.new_unique(), Pubkey.new_unique()
    message = receipt.receipt_message(bytes(program), bytes(market), bytes(job), 2**64 - 1, 3600,
                                      -(2**63), bytes(range(32)))
    attestation = receipt.attestation_message(message, 1800)
    settle_ix = settle.ed25519_settle_instruction(
        worker.pubkey(), sig(1), [(key(2).pubkey(), sig(2)), (key(3).pubkey(), sig(3))], attestation)
    multi_ix = settle.ed25519_multi_instruction([(key(i).pubkey(), sig(i)) for i in (4, 5, 6)], bytes(48))
    entries = [(key(7).pubkey(), sig(7), b"first"), (key(8).pubkey(), sig(8), bytes(100)),
               (key(7).pubkey(), sig(9), b"")]
    entries_ix = settle.ed25519_entries_instruction(entries)
    requests = [{"action": a, "job": str(job), "workloadHash": bytes([i]) * 32, "timestamp": t}
                for i, (a, t) in enumerate(zip(workload.ACTIONS, [0, 1, -1, 2**63 - 1, -(2**63), 1_700_000_000]))]
    sealed = workload.seal_secret(bytes(worker.pubkey()), "sealed in Python ✓".encode())
    specs = [(js, spec) for js, spec in SPECS]
    secret_env = workload.seal_secrets(bytes(worker.pubkey()), {"TOKEN": "s3cret"})
    specs.append(({"image": "busybox", "secretEnv": dict(secret_env)},
                  WorkloadSpec(image="busybox", secret_env=secret_env)))
    inp = {
        "settle": {"workerKey": str(worker.pubkey()), "receiptSignature": sig(1).hex(),
                   "attestations": [{"authority": str(key(i).pubkey()), "signature": sig(i).hex()} for i in (2, 3)],
                   "attestationMessage": attestation.hex()},
        "multi": {"signatures": [{"publicKey": str(key(i).pubkey()), "signature": sig(i).hex()} for i in (4, 5, 6)],
                  "message": bytes(48).hex()},
        "entries": [{"publicKey": str(k), "signature": s.hex(), "message": m.hex()} for k, s, m in entries],
        "parse": bytes(entries_ix.data).hex(),
        "receipt": {"programAddress": str(program), "market": str(market), "job": str(job),
                    "seq": str(2**64 - 1), "cumulativeSeconds": "3600", "windowEnd": str(-(2**63)),
                    "proofHash": bytes(range(32)).hex(), "approvedSeconds": "1800"},
        "specs": [js for js, _ in specs], "invalid_specs": INVALID_SPECS,
        "requests": [{**q, "workloadHash": q["workloadHash"].hex(), "timestamp": str(q["timestamp"])} for q in requests],
        "worker_seed": bytes(worker)[:32].hex(), "worker_key": str(worker.pubkey()),
        "sealed_by_python": base64.b64encode(sealed).decode(),
    }
    (tmp_path / "in.json").write_text(json.dumps(inp))
    run = subprocess.run([node, str(CLIENT / "test" / "vectors.cjs"), str(tmp_path / "in.json")],
                         capture_output=True, text=True, timeout=60, check=False,
                         env={**os.environ, "NODE_OPTIONS": ""})
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)

    assert out["settle"] == bytes(settle_ix.data).hex()
    assert out["multi"] == bytes(multi_ix.data).hex()
    assert out["entries"] == bytes(entries_ix.data).hex()
    assert out["parsed_entries"] == [[bytes(k).hex(), s.hex(), m.hex()] for k, s, m in entries]
    assert out["receipt_message"] == message.hex()
    assert out["receipt_digest"] == receipt.receipt_digest(message).hex()
    assert out["attestation_message"] == attestation.hex()
    for got, (_, spec) in zip(out["specs"], specs, strict=True):
        assert got["canonical"].encode() == workload.canonical_bytes(spec)
        assert got["hash"] == workload.spec_hash(spec).hex()
    for spec in INVALID_SPECS:
        with pytest.raises(workload.WorkloadSpecError):
            workload.spec_from_json({_snake(k): v for k, v in spec.items()})
    assert out["rejected"] == ["WorkloadSpecError"] * len(INVALID_SPECS)
    assert out["requests"] == [
        workload.request_message(q["action"], bytes(job), q["workloadHash"], q["timestamp"]).hex() for q in requests]
    assert out["opened"] == "sealed in Python ✓"
    (name, b64), = out["sealed_by_js"].items()
    assert name == "FROM_JS"
    assert workload.open_secret(bytes(worker)[:32], base64.b64decode(b64)) == "sealed in TypeScript ✓".encode()


def _snake(name: str) -> str:
    return {"secretEnv": "secret_env", "shmSizeMib": "shm_size_mib", "scratchMib": "scratch_mib",
            "finishOnExit": "finish_on_exit"}.get(name, name)
