"""A tiny in-process validator stand-in for tests, benchmarks and demos (not a validator).

It speaks the worker -> validator HTTP format of docs/wire-formats.md: it decodes each
proof, checks both signatures, deduplicates by (job, seq, hash) ("duplicate"), answers
409 "equivocation" to a different proof for a stored (job, seq), and records what it
accepted. It answers ``GET /health`` with 200 and serves ``GET /v1/jobs/<job base58>/head``: 200 with the stored proof of
the job's highest seq, whatever its decision, or 404 ``{"error": "job_unknown"}``.

Fault injection: ``delay_s`` before answering a POST, ``drop_every`` (close every n-th POST
connection without an answer, after storing the proof, as a crash between storing and
answering would), ``fail_status`` (answer every request with that status), ``head_status``
(answer only head requests with that status), ``head_override`` (serve this body as a job's
head: a lying validator), ``transient`` (answers given to the next POSTs before looking at
them, e.g. ``(425, {...})``), ``reject_if(proof) -> error code or None`` (store the proof
with decision "rejected" and answer 400 with that code).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpu_market.proof import (
    WindowProof,
    proof_hash,
    receipt_for_proof,
    verify_proof,
)
from gpu_market.receipt import verify_receipt

from .heads import decode_signed_proof
from .keys import b58decode, b58encode


class StubValidator:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, delay_s: float = 0.0,
                 drop_every: int = 0, fail_status: int | None = None) -> None:
        self.delay_s = delay_s
        self.drop_every = drop_every
        self.fail_status = fail_status
        self.head_status: int | None = None
        self.head_override: dict[bytes, tuple[int, Any]] = {}
        self.transient: list[tuple[int, Any]] = []
        self.reject_if: Callable[[WindowProof], str | None] | None = None
        self.lock = threading.Lock()
        self.stored: dict[tuple[bytes, int], bytes] = {}
        """(job, seq) -> proof hash of the first proof stored for it."""
        self.proofs: dict[tuple[bytes, int], Any] = {}
        self.signed: dict[tuple[bytes, int], dict[str, Any]] = {}
        """(job, seq) -> the SignedProof JSON stored, plus its "decision"."""
        self.arrived: dict[tuple[bytes, int], float] = {}
        """(job, seq) -> when (monotonic) it was first stored."""
        self.seen: dict[tuple[bytes, int], set[bytes]] = {}
        """(job, seq) -> every distinct proof hash ever received for it (equivocations too)."""
        self.accepted = 0
        self.duplicates = 0
        self.equivocations = 0
        self.requests = 0
        self.head_requests = 0
        self.head_jobs: list[bytes] = []
        """Every job whose head was asked for, in order."""
        self.request_seen = threading.Event()
        """Set when a POST arrives (before the injected delay); tests clear it."""
        self._stop = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/health":
                    return self._reply(200, {"ok": True})
                with stub.lock:
                    stub.head_requests += 1
                status = stub.fail_status or stub.head_status
                if status is not None:
                    return self._reply(status, {"error": "injected", "message": "x"})
                parts = self.path.split("/")
                if len(parts) != 5 or parts[:3] != ["", "v1", "jobs"] or parts[4] != "head":
                    return self._reply(404, {"error": "not_found", "message": self.path})
                try:
                    job = b58decode(parts[3])
                except ValueError:
                    return self._reply(400, {"error": "bad_job", "message": "base58"})
                with stub.lock:
                    stub.head_jobs.append(job)
                self._reply(*stub.head(job))

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                with stub.lock:
                    stub.requests += 1
                    count = stub.requests
                    canned = stub.transient.pop(0) if stub.transient else None
                stub.request_seen.set()
                if stub.fail_status is not None:
                    return self._reply(stub.fail_status, {"error": "injected", "message": "x"})
                if canned is not None:
                    return self._reply(*canned)
                try:
                    payload = json.loads(body)
                except ValueError:
                    return self._reply(400, {"error": "bad_json", "message": "send JSON"})
                if self.path == "/v1/proofs":
                    status, out = stub.handle(payload)
                elif self.path == "/v1/proofs/batch":
                    items = payload.get("proofs") if isinstance(payload, dict) else None
                    if not isinstance(items, list) or len(items) > 64:
                        return self._reply(400, {"error": "bad_batch", "message": "<= 64"})
                    status, out = 200, {"results": [stub.handle(p)[1] for p in items]}
                else:
                    return self._reply(404, {"error": "not_found", "message": self.path})
                if stub._stop.wait(stub.delay_s):
                    return
                if stub.drop_every and count % stub.drop_every == 0:
                    self.close_connection = True
                    return
                self._reply(status, out)

            def _reply(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                try:
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the worker was killed while waiting: expected here
                    self.close_connection = True

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> StubValidator:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    def head(self, job: bytes) -> tuple[int, Any]:
        """The head answer for ``job``: (status, JSON body)."""
        with self.lock:
            if job in self.head_override:
                return self.head_override[job]
            seqs = [s for (j, s) in self.signed if j == job]
            if not seqs:
                return 404, {"error": "job_unknown", "message": "no proof stored for this job"}
            sp = self.signed[(job, max(seqs))]
        return 200, {"job": b58encode(job), "seq": max(seqs), **sp}

    def handle(self, sp: Any) -> tuple[int, dict[str, Any]]:
        """Verify and store one SignedProof JSON object."""
        try:
            raw, psig, rsig, wk, p = decode_signed_proof(sp)
        except ValueError as e:
            return 400, {"error": "bad_proof", "message": str(e)}
        if p.worker_key != wk or not verify_proof(wk, psig, raw):
            return 400, {"error": "bad_signature", "message": "proof signature invalid"}
        if not verify_receipt(wk, rsig, receipt_for_proof(p, raw)):
            return 400, {"error": "bad_signature", "message": "receipt signature invalid"}
        h = proof_hash(raw)
        key = (p.job, p.seq)
        rejection = self.reject_if(p) if self.reject_if is not None else None
        with self.lock:
            self.seen.setdefault(key, set()).add(h)
            have = self.stored.get(key)
            if have is None:
                self.stored[key] = h
                self.arrived[key] = time.monotonic()
                self.proofs[key] = p
                self.signed[key] = {
                    "proof": sp["proof"], "proof_signature": sp["proof_signature"],
                    "receipt_signature": sp["receipt_signature"],
                    "worker_key": sp["worker_key"],
                    "decision": "rejected" if rejection else "accepted"}
                if rejection:
                    return 400, {"error": rejection, "message": "rejected by the stub"}
                self.accepted += 1
                status = "accepted"
            elif have == h:
                self.duplicates += 1
                status = "duplicate"
            else:
                self.equivocations += 1
                return 409, {"error": "equivocation", "message": "different proof stored"}
        return 200, {"status": status, "job": b58encode(p.job), "seq": p.seq}
