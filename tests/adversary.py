"""A byzantine committee member for the end-to-end tests: a hostile HTTP proxy in front of a
real ``gpum-validator run`` process, plus the member's operator acting with its key.

``HostileProxy`` listens on the endpoint the member registered on chain, so the worker's proof
deliveries and the other members' ``/v1/attestations/*`` calls reach it first. It forwards to
the real node behind it and misbehaves according to its current ``mode``:

* ``honest``   forwards and answers as the node does;
* ``trickle``  answers 1 byte per second (status line, headers and body), until the whole
               answer is out or ``release()`` is called;
* ``refuse``   answers 503 or resets the connection (chosen per request);
* ``late``     waits ``late_seconds`` (longer than a leader's per-request timeout), then
               forwards and answers;
* ``lie``      forwards; a query's ``approved_seconds`` is replaced by 0, half of it or a
               million more (chosen per request);
* ``replay``   forwards; a sign request from a leader is also sent, unchanged, to every other
               honest member of the job's committee, and their signatures are kept;
* ``crash``    forwards to a node that the test killed: every request is reset.

Whatever the mode, every attestation by an honest member that passes through (a leader's own
``leader_attestation`` in a sign request, a member's signature answering a replayed or forged
request) is verified and kept by ``Evidence``; two different values by one member for one
(job, seq) are submitted as ``slash_validator_equivocation`` with the byzantine member's key.

``Pinner`` is the operator forging sign requests with the byzantine member's key: for the
newest seq an honest member accepted it asks that member to attest one low value (between the
job's paid seconds and the member's own total), the leader's signature and attestation made
with the byzantine key, whoever leads the round (under round-bound requests it claims the
attempt that makes it leader, else attempt 0). Once ``quorum - 1`` honest members signed the
low value, it settles it on chain itself, as submitter, with the worker's receipt its node
stored. Its node's co-signature at a seq it pinned is refused by the proxy (409), so the
two do not contradict each other in front of an honest leader.

Bounds: every proxied request is forwarded with a timeout; a trickle ends when the answer is
out or at ``release()``; every wait is on an event; ``close()`` stops the server.
"""

from __future__ import annotations

import base64
import inspect
import json
import random
import socket
import sqlite3
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from gpu_market.client import GpuMarketClient
from gpu_market.receipt import attestation_message, attestation_signature, receipt_message, verify
from gpu_market.settle import Attestation, SettleItem
from gpum_validator.attest import leader_of, sign_request_message
from gpum_validator.slashing import Receipt
from solders.keypair import Keypair
from solders.pubkey import Pubkey

MODES = ("honest", "trickle", "refuse", "late", "lie", "replay", "crash")
QUERY = "/v1/attestations/query"
SIGN = "/v1/attestations/sign"
MAX_BODY = 4 << 20
FORWARD_TIMEOUT = 20.0  # seconds, per read and write of one forwarded request


def _b64(raw: bytes) -> str:
    return base64.b64encode(bytes(raw)).decode()


@dataclass
class Committees:
    """What the byzantine operator knows from chain: each job's committee (authorities, in
    order), the honest members' direct URLs, and the program/market the receipts bind."""

    program_id: Pubkey
    market: Pubkey
    jobs: dict[str, list[Pubkey]]  # job address (base58) -> committee
    honest_urls: dict[Pubkey, str]
    _receipts: dict[tuple[str, int], Receipt] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def query(self, member: Pubkey, job: str, seq: int) -> dict[str, Any] | None:
        """An honest member's query answer at (job, seq), or None."""
        try:
            r = httpx.post(self.honest_urls[member] + QUERY, json={"job": job, "seq": seq},
                           timeout=5)
            body = r.json()
            rc = body["receipt"] if r.status_code == 200 else None
            if rc is None:
                return None
            got = Receipt(seq, int(rc["cumulative_seconds"]), int(rc["window_end"]),
                          bytes.fromhex(rc["proof_hash"]))
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None
        with self._lock:
            self._receipts.setdefault((job, seq), got)
        return body

    def receipt(self, job: str, seq: int) -> Receipt | None:
        """The worker's receipt at (job, seq), as an honest member of the job holds it."""
        with self._lock:
            hit = self._receipts.get((job, seq))
        if hit is not None:
            return hit
        for member in self.jobs.get(job, []):
            if member in self.honest_urls and self.query(member, job, seq) is not None:
                with self._lock:
                    return self._receipts[(job, seq)]
        return None

    def receipt_message(self, job: str, r: Receipt) -> bytes:
        return receipt_message(bytes(self.program_id), bytes(self.market),
                               bytes(Pubkey.from_string(job)), r.seq, r.cumulative_seconds,
                               r.window_end, r.proof_hash)


class Evidence:
    """Attestations by honest members that reached the byzantine operator; two different
    values by one member for one (job, seq) are submitted as a validator-equivocation slash."""

    def __init__(self, client: GpuMarketClient, key: Keypair, known: Committees,
                 say: Callable[[str], None]) -> None:
        self.client, self.key, self.known, self.say = client, key, known, say
        self.seen: dict[tuple[str, int, Pubkey], dict[int, tuple[Receipt, bytes]]] = {}
        self.submitted: dict[tuple[str, int, Pubkey], str] = {}  # -> outcome
        self._lock = threading.Lock()

    def add(self, job: str, seq: int, member: Pubkey, approved: int, sig: bytes) -> None:
        """Keeps ``sig`` if it is ``member``'s attestation of ``approved`` at (job, seq)."""
        if member not in self.known.honest_urls or len(sig) != 64:
            return
        r = self.known.receipt(job, seq)
        if r is None:
            return
        msg = attestation_message(self.known.receipt_message(job, r), approved)
        if not verify(bytes(member), bytes(sig), msg):
            return
        with self._lock:
            self.seen.setdefault((job, seq, member), {}).setdefault(approved, (r, bytes(sig)))

    def cases(self) -> list[tuple[str, int, Pubkey]]:
        with self._lock:
            return [k for k, v in self.seen.items() if len(v) > 1 and k not in self.submitted]

    def submit_all(self) -> None:
        """One ``slash_validator_equivocation`` attempt per case (bounded by the cases)."""
        for key in self.cases():
            job, seq, member = key
            with self._lock:
                (a1, (r1, s1)), (a2, (r2, s2)) = list(self.seen[key].items())[:2]
            try:
                sig = self.client.slash_validator_equivocation(
                    self.key, Pubkey.from_string(job), member, r1, a1, s1, r2, a2,
                    s2)
                outcome = f"slashed ({sig})"
            except Exception as e:  # noqa: BLE001 - the program's refusal is the outcome
                outcome = f"refused: {type(e).__name__}: {e}"[:300]
            self.submitted[key] = outcome
            self.say(f"adversary: {member} attested {a1} and {a2} for job {job} seq {seq}; "
                     f"slash_validator_equivocation {outcome}")


class HostileProxy:
    """The byzantine member's public endpoint (see the module docstring)."""

    def __init__(self, port: int, upstream: str, known: Committees, evidence: Evidence,
                 me: Pubkey, rng: random.Random, late_seconds: float) -> None:
        self.upstream, self.known, self.evidence, self.me = upstream, known, evidence, me
        self.rng, self.late_seconds = rng, late_seconds
        self.mode = "honest"
        self.pinned_seqs: set[tuple[str, int]] = set()  # the operator attested a value here
        self.released = threading.Event()  # ends trickles and waits at once
        self.counts: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.serve(self, b"")

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                outer.serve(self, self.rfile.read(min(n, MAX_BODY)))

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    # -- control ----------------------------------------------------------------------------
    def set_mode(self, mode: str) -> None:
        assert mode in MODES, mode
        self.mode = mode

    def release(self) -> None:
        """Honest from now on; every trickle and wait in progress ends now."""
        self.mode = "honest"
        self.released.set()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    def _count(self, mode: str, path: str) -> None:
        with self._lock:
            self.counts[(mode, path)] = self.counts.get((mode, path), 0) + 1

    # -- one request ------------------------------------------------------------------------
    def serve(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        mode, path = self.mode, h.path
        self._count(mode, path)
        h.close_connection = True
        obj = self._json(body)
        if path == SIGN and obj is not None:
            self._observe_sign_request(obj, replay=mode == "replay")
        try:
            if path == SIGN and obj is not None and (obj.get("job"), obj.get("seq")) in \
                    self.pinned_seqs:
                # the node would sign a second value where its operator attested one
                self._write(h, 409, {"error": "already_signed_other_value", "message": "",
                                     "retry": False}, trickle=False)
                return
            if mode == "refuse":
                if self.rng.random() < 0.5:
                    self._reset(h)
                else:
                    self._write(h, 503, {"error": "unavailable", "message": "byzantine",
                                         "retry": True}, trickle=False)
                return
            if mode == "late":
                self.released.wait(self.late_seconds)
            got = self._forward(path, body, h.command, h.client_address[0])
            if got is None:
                self._reset(h)
                return
            status, answer = got
            if mode == "lie" and path == QUERY and status == 200 and isinstance(answer, dict):
                total = int(answer.get("approved_seconds") or 0)
                answer["approved_seconds"] = self.rng.choice([0, total // 2, total + 10**6])
            self._write(h, status, answer, trickle=mode == "trickle")
        except OSError:
            pass  # the client went away

    def _json(self, body: bytes) -> dict[str, Any] | None:
        try:
            obj = json.loads(body) if body else None
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None

    def _forward(self, path: str, body: bytes, method: str,
                 client: str) -> tuple[int, Any] | None:
        try:
            r = httpx.request(method, self.upstream + path, content=body or None,
                              headers={"Content-Type": "application/json",
                                       "X-Forwarded-For": client},
                              timeout=httpx.Timeout(FORWARD_TIMEOUT))
        except httpx.HTTPError:
            return None
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, r.text

    def _write(self, h: BaseHTTPRequestHandler, status: int, answer: Any,
               trickle: bool) -> None:
        raw = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
        head = (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n").encode()
        out = head + raw
        if not trickle:
            h.wfile.write(out)
            return
        for i in range(len(out)):
            if self.released.is_set():
                h.wfile.write(out[i:])
                return
            h.wfile.write(out[i:i + 1])
            self.released.wait(1.0)

    @staticmethod
    def _reset(h: BaseHTTPRequestHandler) -> None:
        """Closes the connection with a TCP reset."""
        h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        h.connection.close()

    # -- evidence and replays ---------------------------------------------------------------
    def _observe_sign_request(self, obj: dict[str, Any], replay: bool) -> None:
        try:
            job, seq = str(obj["job"]), int(obj["seq"])
            value, leader = int(obj["approved_seconds"]), Pubkey.from_string(obj["leader"])
            att = base64.b64decode(obj["leader_attestation"])
        except (KeyError, TypeError, ValueError):
            return
        self.evidence.add(job, seq, leader, value, att)
        if not replay:
            return
        for member in self.known.jobs.get(job, []):
            url = self.known.honest_urls.get(member)
            if member in (leader, self.me) or url is None:
                continue
            try:
                r = httpx.post(url + SIGN, json=obj, timeout=5)
                sig = base64.b64decode(r.json()["signature"]) if r.status_code == 200 else b""
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                continue
            self.evidence.add(job, seq, member, value, sig)


class Pinner:
    """The byzantine operator's forged sign requests (see the module docstring)."""

    def __init__(self, key: Keypair, known: Committees, evidence: Evidence,
                 rng: random.Random, pinned_seqs: set[tuple[str, int]],
                 settle_every: int, client: GpuMarketClient, own_db: Path,
                 say: Callable[[str], None]) -> None:
        self.key, self.known, self.evidence, self.rng = key, known, evidence, rng
        self.pinned_seqs, self.settle_every = pinned_seqs, settle_every
        self.client, self.own_db, self.say = client, own_db, say
        self.got: dict[tuple[str, int], list[Attestation]] = {}  # honest signatures of low
        self.settled: dict[tuple[str, int], str] = {}  # -> outcome of the low settle
        self.pinned: dict[tuple[str, int, Pubkey], tuple[int, int]] = {}  # -> (value, status)
        self.low: dict[tuple[str, int], int] = {}

    def request(self, job: str, seq: int, value: int, member: Pubkey,
                receipt_msg: bytes) -> dict[str, Any]:
        """A sign request for ``value`` signed with the byzantine key: as the validators'
        protocol has it, either unbound (any member may ask) or bound to the target member
        and the round, with the byzantine member claiming the attempt (the elapsed leader
        timeouts, 0 or 1 always accepted) that makes it the round's leader, or attempt 0 when
        none does (a round it does not lead)."""
        me, jb = self.key.pubkey(), bytes(Pubkey.from_string(job))
        body: dict[str, Any] = {"job": job, "seq": seq, "approved_seconds": value,
                                "leader": str(me)}
        if "member" in inspect.signature(sign_request_message).parameters:
            round_ = seq // self.settle_every
            committee = [bytes(k) for k in self.known.jobs[job]]
            # the attempt that makes it leader, else a false claim of attempt 0
            attempt = next((a for a in (0, 1) if leader_of(jb, round_, committee, a)
                            == bytes(me)), 0)
            message = sign_request_message(jb, seq, value, bytes(me), bytes(member), round_,
                                           attempt)
            body.update(member=str(member), round=round_, attempt=attempt)
        else:
            message = sign_request_message(jb, seq, value, bytes(me))
        body["leader_signature"] = _b64(bytes(self.key.sign_message(message)))
        body["leader_attestation"] = _b64(attestation_signature(self.key, receipt_msg, value))
        return body

    def pin(self, job: str, seq: int, paid: int) -> None:
        """Asks each honest member of ``job`` that accepted ``seq`` and signed nothing there
        yet to attest a value below its own total."""
        for member in self.known.jobs[job]:
            if member not in self.known.honest_urls or (job, seq, member) in self.pinned:
                continue
            q = self.known.query(member, job, seq)
            if q is None or q.get("signed_approved_seconds") is not None:
                continue
            total = int(q["approved_seconds"])
            if total <= paid:
                continue
            # one low value per seq, so the pinned members agree on it
            low = min(self.low.setdefault((job, seq), self.rng.randint(paid, total - 1)),
                      total - 1)
            r = self.known.receipt(job, seq)
            assert r is not None
            body = self.request(job, seq, low, member, self.known.receipt_message(job, r))
            self.pinned_seqs.add((job, seq))
            try:
                a = httpx.post(self.known.honest_urls[member] + SIGN, json=body, timeout=5)
                status = a.status_code
                sig = base64.b64decode(a.json()["signature"]) if status == 200 else b""
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                status, sig = 0, b""
            self.pinned[(job, seq, member)] = (low, status)
            self.evidence.add(job, seq, member, low, sig)
            if status == 200:
                self.got.setdefault((job, seq), []).append(Attestation(member, sig))

    def settle_low(self, job: str, seq: int, quorum: int) -> None:
        """Settles (job, seq) at the pinned low value with the byzantine key as submitter,
        once ``quorum - 1`` honest members attested it, using the worker's receipt as the
        byzantine node stored it."""
        atts = self.got.get((job, seq), [])
        if (job, seq) in self.settled or len(atts) < quorum - 1:
            return
        rows = _rows(self.own_db, "SELECT cumulative_seconds, window_end, hash, worker_key, "
                     "receipt_signature FROM proofs WHERE job = ? AND seq = ? AND "
                     "decision = 'accepted'", bytes(Pubkey.from_string(job)), seq)
        if not rows:
            return
        cumulative, window_end, proof_hash, worker_key, receipt_sig = rows[0]
        low = self.low[(job, seq)]
        item = SettleItem(Pubkey.from_string(job), seq, cumulative, window_end,
                          bytes(proof_hash), Pubkey.from_bytes(bytes(worker_key)),
                          bytes(receipt_sig), low, atts[:quorum - 1])
        try:
            outcome = f"settled ({self.client.settle(self.key, [item])})"
        except Exception as e:  # noqa: BLE001 - the program's refusal is the outcome
            outcome = f"refused: {type(e).__name__}: {e}"[:200]
        self.settled[(job, seq)] = outcome
        self.say(f"adversary: settle of job {job} seq {seq} at {low} of {cumulative} s "
                 f"{outcome}")


def _rows(db: Path, sql: str, *args: Any) -> list[tuple]:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return []
    try:
        return con.execute(sql, args).fetchall()
    except sqlite3.Error:
        return []
    finally:
        con.close()
