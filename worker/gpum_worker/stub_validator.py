"""A tiny in-process validator stand-in for tests, benchmarks and demos (not a validator).

It speaks the worker -> validator HTTP format of docs/wire-formats.md: it decodes each
proof, checks both signatures, deduplicates by (job, seq, hash) ("duplicate"), answers
409 "equivocation" to a different proof for a stored (job, seq), and records what it
accepted. Fault injection: ``delay_s`` before answering, ``drop_every`` (close every n-th
connection without an answer, after storing the proof, as a crash between storing and
answering would) and ``fail_status`` (answer every request with that status).
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpu_market.proof import (
    ProofFormatError,
    decode_proof,
    proof_hash,
    receipt_for_proof,
    verify_proof,
)
from gpu_market.receipt import verify

from .keys import b58decode


class StubValidator:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, delay_s: float = 0.0,
                 drop_every: int = 0, fail_status: int | None = None) -> None:
        self.delay_s = delay_s
        self.drop_every = drop_every
        self.fail_status = fail_status
        self.lock = threading.Lock()
        self.stored: dict[tuple[bytes, int], bytes] = {}
        self.proofs: dict[tuple[bytes, int], Any] = {}
        self.accepted = 0
        self.duplicates = 0
        self.equivocations = 0
        self.requests = 0
        self.request_seen = threading.Event()
        """Set when a request arrives (before the injected delay); tests clear it."""
        self._stop = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                with stub.lock:
                    stub.requests += 1
                    count = stub.requests
                stub.request_seen.set()
                if stub.fail_status is not None:
                    return self._reply(stub.fail_status, {"error": "injected", "message": "x"})
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

    def handle(self, sp: Any) -> tuple[int, dict[str, Any]]:
        """Verify and store one SignedProof JSON object."""
        try:
            raw = base64.b64decode(sp["proof"], validate=True)
            psig = base64.b64decode(sp["proof_signature"], validate=True)
            rsig = base64.b64decode(sp["receipt_signature"], validate=True)
            wk = b58decode(sp["worker_key"])
            p = decode_proof(raw)
        except (KeyError, TypeError, ValueError, ProofFormatError) as e:
            return 400, {"error": "bad_proof", "message": str(e)}
        if p.worker_key != wk or not verify_proof(wk, psig, raw):
            return 400, {"error": "bad_signature", "message": "proof signature invalid"}
        if not verify(wk, rsig, receipt_for_proof(p, raw)):
            return 400, {"error": "bad_signature", "message": "receipt signature invalid"}
        h = proof_hash(raw)
        key = (p.job, p.seq)
        with self.lock:
            have = self.stored.get(key)
            if have is None:
                self.stored[key] = h
                self.proofs[key] = p
                self.accepted += 1
                status = "accepted"
            elif have == h:
                self.duplicates += 1
                status = "duplicate"
            else:
                self.equivocations += 1
                return 409, {"error": "equivocation", "message": "different proof stored"}
        return 200, {"status": status, "job": sp["worker_key"], "seq": p.seq}
