"""Attacks against the real HTTP server on 127.0.0.1 (validator/README.md, "Hostile traffic").

Each attack runs in a child process (this file run as a script, asyncio) so the attackers
never share the server's interpreter lock, at a lower CPU priority (its own CPU stands for
other machines'), and binds its sockets to 127.0.0.2 .. 127.0.0.9: the per-source limits
tell them apart from the honest workers, which run in a child process of their own and
submit valid proofs from 127.0.0.1 (half of them on a fresh connection per request, so the
accept path is measured too, half on one keep-alive connection). While the attack runs,
every honest proof must be answered ``accepted`` and stored (nothing lost), with the 99th
percentile of the honest latencies under ``HONEST_P99_S``. Run with ``-s`` to see them.

The attacks: slowloris (1,500 idle connections that trickle a header line), a burst of 300
connections each sending a request on a fresh connection, junk proofs for random providers
and jobs, /health spam, oversized bodies and headers, deeply nested JSON bodies, and all of
them at once. Then the per-source and global limits one by one, with events (a chain read
that blocks until released) instead of timing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from gpu_market import httpfront
from gpu_market.receipt import private_key_from_seed, public_key_bytes
from gpum_validator import server as server_mod
from gpum_validator import transport
from gpum_validator.intake import Intake
from gpum_validator.members import Member
from gpum_validator.store_sqlite import SQLiteStore
from vtestkit import (
    JOB,
    ME,
    T0,
    VALIDATOR_KEYS,
    FakeChain,
    b58,
    cfg,
    chain_of,
    job_view,
    make_proof,
    pk,
    signed_json,
)

HERE = Path(__file__).resolve().parent
ATTACKERS = tuple(f"127.0.0.{i}" for i in range(2, 10))
HONEST_P99_S = 1.0


# ============================================================== the attacker (child process)


async def _read_response(r: asyncio.StreamReader) -> tuple[int, bool]:
    head = await r.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in lines[1:] if line)}
    await r.readexactly(int(headers.get("content-length", "0")))
    return status, headers.get("connection", "").lower() == "close"


async def _attack(spec: dict[str, Any]) -> dict[str, int]:
    """Run ``spec["mode"]`` over ``spec["conns"]`` connections until stdin closes; print
    ``ready`` once every connection made its first attempt."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)),
                     daemon=True).start()
    port, sources, n = spec["port"], spec["sources"], spec["conns"]
    requests = [base64.b64decode(r) for r in spec.get("requests", [])]
    stats: Counter[str] = Counter()
    pending = [n]

    def first_attempt() -> None:
        pending[0] -= 1
        if pending[0] == 0:
            print("ready", flush=True)

    if spec.get("ready_after_s"):  # measuring a server that cannot take them all
        loop.call_later(spec["ready_after_s"], lambda: pending[0] > 0 and (
            pending.__setitem__(0, 1), first_attempt()))

    async def connect(i: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        try:
            return await asyncio.open_connection("127.0.0.1", port,
                                                 local_addr=(sources[i % len(sources)], 0))
        except OSError as e:
            stats[f"connect_error:{type(e).__name__}"] += 1
            return None

    async def idle(i: int) -> None:  # slowloris: half a request, then a header line now and then
        first = True
        while not stop.is_set():
            conn = await connect(i)
            if conn is None:
                if first:
                    first = False
                    first_attempt()
                await asyncio.sleep(0.1)
                continue
            r, w = conn
            w.write(b"POST /v1/proofs HTTP/1.1\r\nHost: victim\r\n")
            stats["opened"] += 1
            if first:
                first = False
                first_attempt()
            while not stop.is_set():
                try:
                    data = await asyncio.wait_for(r.read(4096), spec.get("trickle_s", 1.0))
                except asyncio.TimeoutError:
                    w.write(b"X-Slow: 1\r\n")
                    continue
                except OSError:
                    data = b""
                if not data:
                    stats["closed_by_server"] += 1
                    break
                stats["answered"] += 1
            w.close()
            if not spec.get("reconnect", True):
                await stop.wait()

    async def flood(i: int) -> None:
        conn = None
        k, first = i, True
        while not stop.is_set():
            if conn is None:
                conn = await connect(i)
                if conn is None:
                    if first:
                        first = False
                        first_attempt()
                    await asyncio.sleep(0.05)
                    continue
            r, w = conn
            close = True
            try:
                w.write(requests[k % len(requests)])
                k += 1
                await w.drain()
                status, close = await asyncio.wait_for(_read_response(r), 60)
                stats[str(status)] += 1
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    asyncio.TimeoutError, ValueError, IndexError) as e:
                stats[f"error:{type(e).__name__}"] += 1
            if first:
                first = False
                first_attempt()
            if close or spec.get("fresh", False):
                w.close()
                conn = None
        if conn is not None:
            conn[1].close()

    run = {"idle": idle, "flood": flood}[spec["mode"]]
    tasks = [asyncio.ensure_future(run(i)) for i in range(n)]
    await stop.wait()
    _done, late = await asyncio.wait(tasks, timeout=10)
    for t in late:
        t.cancel()
    return dict(stats)


def _child_main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    if spec["mode"] != "honest":
        # The attack's own CPU stands for other machines': on this one it must not take the
        # cores the server (and the honest workers' clients) need.
        os.nice(spec.get("nice", 10))
    result = _honest_run(spec) if spec["mode"] == "honest" else asyncio.run(_attack(spec))
    print(json.dumps(result), flush=True)




# ============================================================== the tests


NOW = T0 + 30 * 86400  # far after every window the honest workers send
HONEST_JOBS = tuple(bytes([60 + i] * 32) for i in range(4))


def need_fds(need: int) -> None:
    """The attacks hold thousands of sockets (both ends live in this machine): raise the soft
    limit as ``gpum-validator run`` does (``server.raise_fd_limit``), and fail, naming the fix,
    where the hard limit is too low."""
    have = httpfront.raise_fd_limit()
    if have is not None and have < need:
        pytest.fail(f"the attack suite needs {need} file descriptors, the hard limit allows "
                    f"{have}: raise it (ulimit -Hn, or LimitNOFILE for a service)")


def request(method: str, path: str, body: bytes = b"", *, ctype: str = "application/json",
            extra: str = "", length: int | None = None) -> bytes:
    head = (f"{method} {path} HTTP/1.1\r\nHost: victim\r\n"
            + (f"Content-Type: {ctype}\r\nContent-Length: "
               f"{len(body) if length is None else length}\r\n" if method == "POST" else "")
            + extra + "\r\n")
    return head.encode("latin-1") + body


class CountingChain(FakeChain):
    """FakeChain that counts job reads; a job in ``blocked`` waits for ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.job_reads = 0
        self.blocked: set[bytes] = set()
        self.waiting = 0
        self.release = threading.Event()
        self.cond = threading.Condition()

    def fetch_job(self, job: Any) -> Any:
        with self.cond:
            self.job_reads += 1
        if bytes(job) in self.blocked:
            with self.cond:
                self.waiting += 1
                self.cond.notify_all()
            self.release.wait(60)
            with self.cond:
                self.waiting -= 1
        return super().fetch_job(job)

    def wait_for_waiting(self, n: int, timeout: float = 60) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.waiting >= n, timeout), self.waiting


class Target:
    """Intake + SQLite + the real server on 127.0.0.1."""

    def __init__(self, tmp_path: Path, server_cls: Any = None, member: bool = False,
                 **server_kw: Any) -> None:
        self.chain = CountingChain()
        for jb in HONEST_JOBS:
            self.chain.jobs[jb] = job_view(address=pk(jb))
        self.store = SQLiteStore(tmp_path / "v.sqlite")
        self.intake = Intake(cfg(), self.store, self.chain, clock=lambda: NOW)
        if member:
            server_kw["member"] = Member(cfg(), ME, self.store, self.chain, clock=lambda: NOW)
        cls = server_cls or server_mod.ValidatorHTTPServer
        self.server = cls(("127.0.0.1", 0), self.intake, self.store, lambda: True, **server_kw)
        httpfront.serve_in_thread(self.server)
        self.port = self.server.server_port
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = tmp_path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.store.close()


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Target]:
    need_fds(4096)
    t = Target(tmp_path)
    yield t
    t.close()


class Attack:
    """One attack in a child process; ``with`` waits until it is under way, and stops it."""

    def __init__(self, target: Target, mode: str, conns: int, requests: list[bytes] = (),
                 sources: tuple[str, ...] = ATTACKERS, **opts: Any) -> None:
        self.target = target
        spec = {"port": target.port, "mode": mode, "conns": conns, "sources": list(sources),
                "requests": [base64.b64encode(r).decode() for r in requests], **opts}
        n = len(list(target.tmp.glob("attack-*.json")))
        path = target.tmp / f"attack-{n}.json"
        path.write_text(json.dumps(spec))
        self.err = open(target.tmp / f"attack-{n}.stderr", "w+")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, __file__, str(path)], cwd=HERE,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True)
        self.stats: dict[str, int] = {}

    def __enter__(self) -> Attack:  # noqa: PYI034
        self.wait_ready()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_ready(self, timeout: float = 120) -> None:
        out = self.proc.stdout
        assert out is not None
        ready, _, _ = select.select([out], [], [], timeout)
        line = out.readline() if ready else ""
        if line.strip() != "ready":
            self.proc.kill()
            self.err.seek(0)
            err = self.err.read()[-2000:]
            self.stop()
            raise AssertionError(f"attacker not ready: {line!r} {err}")

    def stop(self) -> dict[str, int]:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        assert self.proc.stdout is not None
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        out = self.proc.stdout.read()
        self.proc.stdout.close()
        self.err.close()
        lines = [x for x in (out or "").splitlines() if x.startswith("{")]
        self.stats = json.loads(lines[-1]) if lines else {}
        return self.stats


@dataclass
class Honest:
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    sent: list[tuple[bytes, int]] = field(default_factory=list)
    fresh: list[bool] = field(default_factory=list)
    """Per latency: sent on a fresh connection (else on a kept-alive one)."""

    def p(self, q: float) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, max(0, int(q * len(xs) + 0.999999) - 1))]

    def summary(self) -> str:
        fresh = Honest([x for x, f in zip(self.latencies, self.fresh) if f])
        kept = Honest([x for x, f in zip(self.latencies, self.fresh) if not f])
        return (f"honest n={len(self.latencies)} p50={self.p(0.5) * 1000:.0f}ms "
                f"p99={self.p(0.99) * 1000:.0f}ms max={max(self.latencies) * 1000:.0f}ms "
                f"mean={statistics.mean(self.latencies) * 1000:.0f}ms"
                + (f" (fresh connections p50={fresh.p(0.5) * 1000:.0f}ms "
                   f"p99={fresh.p(0.99) * 1000:.0f}ms, keep-alive p50={kept.p(0.5) * 1000:.0f}ms "
                   f"p99={kept.p(0.99) * 1000:.0f}ms)" if fresh.latencies and kept.latencies
                   else ""))


def _honest_run(spec: dict[str, Any]) -> dict[str, Any]:
    """The honest workers (child process): one thread per job, each posting its proofs in
    order; workers marked ``fresh`` open a new connection per proof."""
    out: dict[str, Any] = {"latencies": [], "fresh": [], "failures": [], "sent": []}
    lock = threading.Lock()

    def worker(w: dict[str, Any]) -> None:
        limits = httpx.Limits(max_keepalive_connections=0 if w["fresh"] else 1)
        with httpx.Client(base_url=spec["url"], timeout=60, limits=limits) as c:
            for seq, body in w["proofs"]:
                t0 = time.perf_counter()
                try:
                    r = c.post("/v1/proofs", content=body.encode(),
                               headers={"Content-Type": "application/json"})
                    ok = r.status_code == 200 and r.json().get("status") == "accepted"
                    why = "" if ok else f"{r.status_code} {r.text[:200]}"
                except httpx.HTTPError as e:
                    why = f"{type(e).__name__}: {e}"
                dt = time.perf_counter() - t0
                with lock:
                    out["latencies"].append(dt)
                    out["fresh"].append(w["fresh"])
                    out["sent"].append((w["job"], seq))
                    if why:
                        out["failures"].append(f"job {w['job'][:4]} seq {seq}: {why}")
                time.sleep(spec["pace_s"])  # pacing, not synchronization

    threads = [threading.Thread(target=worker, args=(w,)) for w in spec["workers"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def honest_workers(target: Target, per_job: int = 40, pace_s: float = 0.02) -> Honest:
    """One worker per job in ``HONEST_JOBS`` (in a child process of its own, like a real
    worker: the client's work never competes with the server's), each submitting ``per_job``
    valid proofs in order; the first two open a fresh connection per proof, the others keep
    one alive."""
    workers = [{"job": jb.hex(), "fresh": i < 2,
                "proofs": [(p.seq, json.dumps(signed_json(p))) for p in chain_of(per_job, job=jb)]}
               for i, jb in enumerate(HONEST_JOBS)]
    path = target.tmp / f"honest-{time.monotonic_ns()}.json"
    path.write_text(json.dumps({"mode": "honest", "url": target.url, "pace_s": pace_s,
                                "workers": workers}))
    proc = subprocess.run([sys.executable, __file__, str(path)], cwd=HERE, capture_output=True,
                          check=False,
                          text=True, timeout=900)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    res = json.loads(lines[-1])
    return Honest(res["latencies"], res["failures"],
                  [(bytes.fromhex(j), seq) for j, seq in res["sent"]], res["fresh"])


def assert_honest_served(target: Target, honest: Honest, what: str) -> None:
    print(f"\n[{what}] {honest.summary()}")
    assert not honest.failures, honest.failures[:5]
    for jb, seq in honest.sent:  # nothing lost: every answer is on disk, accepted
        assert [s.decision for s in target.store.proofs_at(jb, seq)] == ["accepted"], (jb, seq)
    assert honest.p(0.99) < HONEST_P99_S, honest.summary()


def junk_requests(n: int = 40) -> list[bytes]:
    """Junk proofs for random providers and jobs: bad signatures, self-signed by random keys
    (random job; the real job with a random provider; the real job and provider with a random
    key), and schema junk."""
    out = []
    for i in range(n):
        rnd = os.urandom(32)
        key = private_key_from_seed(os.urandom(32))
        kind = i % 5
        if kind == 0:  # bad signatures
            p = make_proof(1 + i, job=rnd, provider=os.urandom(32))
            d = signed_json(p)
            d["proof_signature"] = base64.b64encode(os.urandom(64)).decode()
            d["receipt_signature"] = base64.b64encode(os.urandom(64)).decode()
        elif kind == 1:  # self-signed, random job and provider
            p = make_proof(1 + i, job=rnd, provider=os.urandom(32),
                           worker_key=public_key_bytes(key))
            d = signed_json(p, key)
        elif kind == 2:  # the real job, a random provider
            p = make_proof(1 + i, provider=rnd, worker_key=public_key_bytes(key))
            d = signed_json(p, key)
        elif kind == 3:  # the real job and provider, a key nobody registered
            p = make_proof(1 + i, worker_key=public_key_bytes(key))
            d = signed_json(p, key)
        else:  # schema junk
            d = {"proof": base64.b64encode(os.urandom(200)).decode(), "x": [1, 2, 3]}
        out.append(request("POST", "/v1/proofs", json.dumps(d).encode()))
    return out


NESTED = b"[" * 100_000 + b"]" * 100_000
NESTED_OBJECTS = b'{"a":' * 40_000 + b"1" + b"}" * 40_000


def nested_requests() -> list[bytes]:
    return [request("POST", "/v1/proofs", NESTED),
            request("POST", "/v1/proofs/batch", b'{"proofs":' + NESTED[:150_000]
                    + NESTED[:150_000].replace(b"[", b"]") + b"}"),
            request("POST", "/v1/proofs", NESTED_OBJECTS)]


def oversized_requests() -> list[bytes]:
    return [request("POST", "/v1/proofs", b"{" + b" " * 65_536, length=50_000_000),
            request("POST", "/v1/proofs/batch", b"[" + b"0," * 100_000 + b"0]"),  # 200 KB
            request("POST", "/v1/proofs", b"", extra="Transfer-Encoding: chunked\r\n"),
            request("GET", "/health", extra="X-Big: " + "a" * 60_000 + "\r\n"),
            request("GET", "/health", extra="".join(f"X-{i}: {i}\r\n" for i in range(500)))]


# ============================================================== the attacks


@pytest.mark.slow
def test_slowloris_1500_idle_connections(target):
    with Attack(target, "idle", 1500, trickle_s=1.0) as a:
        honest = honest_workers(target)
    assert a.stats.get("opened", 0) >= 1500, a.stats
    assert_honest_served(target, honest, "slowloris 1500")


@pytest.mark.slow
def test_burst_of_300_connections(target):
    reqs = [request("GET", "/health")] + junk_requests(20)
    with Attack(target, "flood", 300, reqs, fresh=True) as a:
        honest = honest_workers(target)
    answered = sum(v for k, v in a.stats.items() if k.isdigit())
    assert answered >= 300, a.stats
    assert_honest_served(target, honest, "burst 300")


@pytest.mark.slow
def test_junk_proofs_for_random_providers_and_jobs(target):
    with Attack(target, "flood", 64, junk_requests()) as a:
        honest = honest_workers(target)
    assert set(a.stats) <= {"400", "403", "422", "425", "429"} | {
        k for k in a.stats if k.startswith("error:")}, a.stats
    assert_honest_served(target, honest, "junk proofs")
    honest_seqs = {(jb, s) for jb, s in honest.sent}
    stored = {(jb, s) for jb in HONEST_JOBS + (JOB,) for s in range(1, 200)
              if target.store.proofs_at(jb, s)}
    assert stored == honest_seqs  # junk stores nothing


@pytest.mark.slow
def test_health_spam(target):
    with Attack(target, "flood", 64, [request("GET", "/health")]) as a:
        honest = honest_workers(target)
    assert a.stats.get("200", 0) > 100, a.stats
    assert_honest_served(target, honest, "health spam")


@pytest.mark.slow
def test_oversized_bodies_and_headers(target):
    with Attack(target, "flood", 64, oversized_requests()) as a:
        honest = honest_workers(target)
    assert a.stats.get("413", 0) > 0 and a.stats.get("411", 0) > 0, a.stats
    assert_honest_served(target, honest, "oversized")


@pytest.mark.slow
def test_deeply_nested_bodies(target):
    with Attack(target, "flood", 32, nested_requests()) as a:
        honest = honest_workers(target)
    assert a.stats.get("400", 0) > 0 and "500" not in a.stats, a.stats
    assert_honest_served(target, honest, "nested json")


@pytest.mark.slow
def test_everything_at_once(target):
    attacks = [Attack(target, "idle", 1000, trickle_s=1.0),
               Attack(target, "flood", 100, [request("GET", "/health")] + junk_requests(20),
                      fresh=True),
               Attack(target, "flood", 16, junk_requests()),
               Attack(target, "flood", 16, [request("GET", "/health")]),
               Attack(target, "flood", 16, oversized_requests() + nested_requests())]
    try:
        for a in attacks:
            a.wait_ready()
        honest = honest_workers(target)
    finally:
        for a in attacks:
            a.stop()
    assert_honest_served(target, honest, "everything at once")


# ============================================================== the limits, one by one


def connect_from(source: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def closed_by_server(socks: list[socket.socket], expect: int, timeout: float = 30) -> int:
    """Wait until ``expect`` of ``socks`` see the server close them; how many did."""
    closed: set[socket.socket] = set()
    deadline = time.monotonic() + timeout
    while len(closed) < expect and time.monotonic() < deadline:
        ready, _, _ = select.select([s for s in socks if s not in closed], [], [],
                                    max(0.0, deadline - time.monotonic()))
        for s in ready:
            try:
                data = s.recv(4096)
            except ConnectionError:
                data = b""
            if not data:
                closed.add(s)
    return len(closed)


def wait_until(cond: Callable[[], bool], timeout: float = 30) -> None:
    """Poll server-side state that has no event to wait on (the event loop's counters)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def exchange(sock: socket.socket, data: bytes, timeout: float = 30) -> tuple[int, dict, bytes]:
    """Send ``data``, read one answer: (status, headers, body)."""
    sock.settimeout(timeout)
    sock.sendall(data)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, f"closed without an answer after {buf!r}"
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        chunk = sock.recv(65536)
        assert chunk, "closed in the middle of the body"
        rest += chunk
    return int(lines[0].split()[1]), headers, rest[:n]


def limited(tmp_path: Path, **limits: Any) -> Target:
    need_fds(4096)
    return Target(tmp_path, limits=transport.HttpLimits(**limits))


def test_connections_over_the_per_source_cap_are_closed_at_once(tmp_path):
    t = limited(tmp_path, max_connections_per_source=50)
    socks: list[socket.socket] = []
    try:
        socks += [connect_from("127.0.0.2", t.port) for _ in range(80)]
        assert closed_by_server(socks, 30) == 30
        wait_until(lambda: t.server.open_connections().get("127.0.0.2") == 50)
        assert t.server.stats["refused_source_cap"] == 30
        others = [connect_from("127.0.0.3", t.port) for _ in range(50)]  # a source of its own
        socks += others
        wait_until(lambda: t.server.open_connections().get("127.0.0.3") == 50)
        r = httpx.post(t.url + "/v1/proofs", json=signed_json(chain_of(1, job=HONEST_JOBS[0])[0]))
        assert r.status_code == 200 and r.json()["status"] == "accepted"
        assert t.server.stats["refused_source_cap"] == 30
        assert "refused_source_cap\"} 30" in httpx.get(t.url + "/metrics").text
    finally:
        for s in socks:
            s.close()
        t.close()


def test_a_trusted_proxy_is_not_capped_and_its_clients_are_told_apart(tmp_path):
    t = limited(tmp_path, max_connections_per_source=10, max_in_flight_per_source=2,
                trusted_proxies=("127.0.0.2",))
    slow = bytes([77] * 32)
    t.chain.jobs[slow] = job_view(address=pk(slow))
    t.chain.blocked.add(slow)
    bodies = [json.dumps(signed_json(p)).encode() for p in chain_of(8, job=slow)]
    socks: list[socket.socket] = []
    try:
        proxied = [connect_from("127.0.0.2", t.port) for _ in range(30)]
        socks += proxied
        capped = [connect_from("127.0.0.3", t.port) for _ in range(15)]
        socks += capped
        assert closed_by_server(capped, 5) == 5
        wait_until(lambda: t.server.open_connections() == {"127.0.0.2": 30, "127.0.0.3": 10})
        # Two clients behind the proxy, 4 requests each, each client its own 2 places; the
        # X-Forwarded-For a client sends itself comes before the proxy's and is not believed.
        for i, body in enumerate(bodies):
            xff = "10.0.0.1" if i % 2 else "192.0.2.66, 10.0.0.2"
            proxied[i].sendall(request("POST", "/v1/proofs", body,
                                       extra=f"X-Forwarded-For: {xff}\r\n"))
        t.chain.wait_for_waiting(4)
        wait_until(lambda: (t.server.in_flight(), t.server.waiting()) == (4, 4))
        t.chain.release.set()
        assert all(200 <= exchange(s, b"")[0] < 500 for s in proxied[:8])
    finally:
        t.chain.release.set()
        for s in socks:
            s.close()
        t.close()


def self_signed_for_a_random_job(seq: int = 1) -> dict[str, str]:
    """A proof that authenticates (signed by its own key) for a job address nobody has read."""
    key = private_key_from_seed(os.urandom(32))
    return signed_json(make_proof(seq, job=os.urandom(32), provider=os.urandom(32),
                                  worker_key=public_key_bytes(key)), key)


def test_job_reads_a_source_causes_are_budgeted(tmp_path):
    """Proofs for fresh random job addresses cost one chain read each before anything can be
    refused: past its budget a source gets 429 ``chain_read_budget`` (retryable) and no read,
    single proofs or batches alike, while other sources and already-read jobs are served."""
    from gpum_validator.chain import ReadBudget

    t = limited(tmp_path)
    t.intake.job_reads = ReadBudget(1.0, 5.0, clock=lambda: 1000.0)  # no refill: exact counts
    try:
        s = connect_from("127.0.0.2", t.port)
        honest = chain_of(2, job=HONEST_JOBS[0])
        assert httpx.post(t.url + "/v1/proofs", json=signed_json(honest[0])).json()[
            "status"] == "accepted"  # from 127.0.0.1: reads the honest job
        before = t.chain.job_reads
        answers = [exchange(s, request("POST", "/v1/proofs", json.dumps(
            self_signed_for_a_random_job()).encode())) for _ in range(12)]
        assert t.chain.job_reads - before == 5
        refused = [json.loads(a[2]) for a in answers if a[0] == 429]
        assert len(refused) == 7 and {r["error"] for r in refused} == {"chain_read_budget"}
        assert all(r["retry"] is True for r in refused)
        assert all(a[1].get("retry-after") == "1" for a in answers if a[0] == 429)
        # A batch from another source: its own budget, five reads.
        other = connect_from("127.0.0.3", t.port)
        body = json.dumps({"proofs": [self_signed_for_a_random_job(i) for i in range(1, 11)]})
        status, _, raw = exchange(other, request("POST", "/v1/proofs/batch", body.encode()))
        results = json.loads(raw)["results"]
        assert status == 200 and t.chain.job_reads - before == 10
        assert [r.get("error") for r in results[5:]] == ["chain_read_budget"] * 5
        # The exhausted source is still served for a job already read (no read needed).
        status, _, raw = exchange(s, request("POST", "/v1/proofs",
                                             json.dumps(signed_json(honest[1])).encode()))
        assert status == 200 and json.loads(raw)["status"] == "accepted"
        assert t.chain.job_reads - before == 10
        s.close()
        other.close()
    finally:
        t.close()


def test_requests_over_the_per_source_in_flight_cap_wait_their_turn(tmp_path):
    t = limited(tmp_path, handler_threads=16, max_in_flight_per_source=4)
    slow = bytes([77] * 32)
    t.chain.jobs[slow] = job_view(address=pk(slow))
    t.chain.blocked.add(slow)
    slow_proofs = [request("POST", "/v1/proofs", json.dumps(signed_json(p)).encode())
                   for p in chain_of(12, job=slow)]
    socks: list[socket.socket] = []
    try:
        for src, reqs in (("127.0.0.2", slow_proofs[:10]), ("127.0.0.3", slow_proofs[10:])):
            for req in reqs:
                s = connect_from(src, t.port)
                s.sendall(req)
                socks.append(s)
        t.chain.wait_for_waiting(6)  # 4 of 127.0.0.2, 2 of 127.0.0.3: each its own share
        wait_until(lambda: (t.server.in_flight(), t.server.waiting()) == (6, 6))
        # 127.0.0.2's other 6 wait, unread, for its turn; other sources are not delayed.
        t0 = time.monotonic()
        r = httpx.post(t.url + "/v1/proofs", json=signed_json(chain_of(1, job=HONEST_JOBS[0])[0]))
        assert r.status_code == 200 and r.json()["status"] == "accepted"
        assert time.monotonic() - t0 < 10
        assert t.chain.waiting == 6  # 127.0.0.2 still holds exactly its 4 handlers
        t.chain.release.set()
        statuses = [exchange(s, b"")[0] for s in socks]
        assert len(statuses) == 12 and all(200 <= c < 500 for c in statuses), statuses
    finally:
        t.chain.release.set()
        for s in socks:
            s.close()
        t.close()


def test_at_the_global_cap_the_longest_idle_connection_makes_room(tmp_path):
    t = limited(tmp_path, max_connections=64)
    socks: list[socket.socket] = []
    try:
        for i in range(64):
            s = connect_from(ATTACKERS[i % len(ATTACKERS)], t.port)
            s.sendall(b"GET /health HTTP/1.1\r\n")  # half a head, then nothing
            socks.append(s)
        wait_until(lambda: sum(t.server.open_connections().values()) == 64)
        r = httpx.post(t.url + "/v1/proofs", json=signed_json(chain_of(1, job=HONEST_JOBS[0])[0]))
        assert r.status_code == 200 and r.json()["status"] == "accepted"
        assert t.server.stats["evicted"] >= 1
        assert closed_by_server(socks[:1], 1) == 1  # the oldest went first
    finally:
        for s in socks:
            s.close()
        t.close()


def test_a_trickling_slowloris_is_closed_at_the_request_deadline(target):
    target.server.read_timeout_s = 0.5
    s = connect_from("127.0.0.2", target.port)
    try:
        s.sendall(b"POST /v1/proofs HTTP/1.1\r\n")
        t0 = time.monotonic()
        s.setblocking(False)
        closed = False
        while time.monotonic() - t0 < 10 and not closed:
            try:
                s.sendall(b"X-Slow: 1\r\n")  # a header line every 50 ms: never idle
            except OSError:
                closed = True
                break
            ready, _, _ = select.select([s], [], [], 0.05)
            if ready:
                try:
                    closed = s.recv(4096) == b""
                except ConnectionError:
                    closed = True
        assert closed and time.monotonic() - t0 < 5
    finally:
        s.close()


def test_idle_connections_cost_no_thread(target):
    before = threading.active_count()
    socks = [connect_from(ATTACKERS[i % 8], target.port) for i in range(300)]
    try:
        for s in socks:
            s.sendall(b"POST /v1/proofs HTTP/1.1\r\n")
        wait_until(lambda: sum(target.server.open_connections().values()) == 300)
        assert threading.active_count() - before <= 2
        r = httpx.get(target.url + "/health")
        assert r.status_code == 200
    finally:
        for s in socks:
            s.close()


def test_answers_go_out_with_tcp_nodelay(target):
    with httpx.Client(base_url=target.url) as c:
        assert c.get("/health").status_code == 200
        front = target.server._front
        wait_until(lambda: len(front.idle) == 1)
        conn = next(iter(front.idle))
        sock = conn.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


# ============================================================== malformed requests, one each


@pytest.mark.parametrize("data, status, error", [
    (request("POST", "/v1/proofs", NESTED), 400, "bad_json"),
    (request("POST", "/v1/proofs/batch", b'{"proofs":' + b"[" * 120_000 + b"]" * 120_000
             + b"}"), 400, "bad_json"),
    (request("POST", "/v1/proofs", NESTED_OBJECTS), 400, "bad_json"),
    (request("POST", "/v1/proofs", b'{"proof": 1e999999}'), 400, "bad_request"),
    (request("POST", "/v1/proofs", b"", length=50_000_000), 413, "body_too_large"),
    (request("POST", "/v1/proofs", b"", extra="Transfer-Encoding: chunked\r\n"), 411,
     "length_required"),
    (b"POST /v1/proofs HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400,
     "bad_request"),
    (request("GET", "/health", extra="X-Big: " + "a" * 20_000 + "\r\n"), 431,
     "header_too_large"),
    (request("GET", "/health", extra="".join(f"X-{i}: {i}\r\n" for i in range(150))), 431,
     "header_too_large"),
    (b"GARBAGE\r\n\r\n", 400, "bad_request"),
    (b"GET /health HTTP/2.0\r\n\r\n", 505, "http_version_not_supported"),
    (b"PUT /v1/proofs HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 501, "not_implemented"),
    (b"GET /health HTTP/1.1\r\n bad folding\r\n\r\n", 400, "bad_request"),
])
def test_malformed_requests_get_a_clear_4xx(target, caplog, data, status, error):
    caplog.set_level(logging.ERROR, logger="gpum_validator")
    s = connect_from("127.0.0.2", target.port)
    try:
        got, _headers, body = exchange(s, data)
    finally:
        s.close()
    assert (got, json.loads(body)["error"]) == (status, error), body[:300]
    assert json.loads(body)["message"]
    assert not caplog.records and target.server.stats["handler_errors"] == 0
    r = httpx.post(target.url + "/v1/proofs",
                   json=signed_json(chain_of(1, job=HONEST_JOBS[0])[0]))
    assert r.status_code == 200  # and the node goes on


@pytest.mark.parametrize("depth", [100_000, 2_000])
def test_a_nested_body_says_so(target, caplog, depth):
    # 100,000 deep is refused before parsing; 2,000 deep is parsed until the interpreter's
    # recursion limit, which is a 400 as well, never a RecursionError traceback.
    caplog.set_level(logging.ERROR, logger="gpum_validator")
    s = connect_from("127.0.0.2", target.port)
    try:
        status, _headers, body = exchange(
            s, request("POST", "/v1/proofs", b"[" * depth + b"]" * depth))
    finally:
        s.close()
    assert status == 400 and "nested" in json.loads(body)["message"], body
    assert not caplog.records and target.server.stats["handler_errors"] == 0


def test_a_full_batch_is_well_under_the_json_limit(target):
    proofs = [signed_json(p) for p in chain_of(64, job=HONEST_JOBS[2])]
    body = json.dumps({"proofs": proofs}).encode()
    assert sum(body.count(c) for c in (b",", b":", b"[", b"{")) < transport.MAX_JSON_TOKENS / 4
    r = httpx.post(target.url + "/v1/proofs/batch", content=body,
                   headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 200
    assert [x["status"] for x in r.json()["results"]] == ["accepted"] * 64


def test_keep_alive_pipelining_and_expect_continue(target):
    s = connect_from("127.0.0.1", target.port)
    try:
        p1, p2 = (json.dumps(signed_json(p)).encode() for p in chain_of(2, job=HONEST_JOBS[1]))
        s.sendall(request("POST", "/v1/proofs", p1) + request("GET", "/health"))
        assert exchange(s, b"")[0] == 200  # both answered on one connection, in order
        assert exchange(s, b"")[0] == 200
        status, headers, _ = exchange(s, request("POST", "/v1/proofs", b"",
                                                 extra="Expect: 100-continue\r\n",
                                                 length=len(p2)))
        assert status == 100
        status, headers, body = exchange(s, p2)
        assert status == 200 and json.loads(body)["status"] == "accepted"
        assert "connection" not in headers  # still open
        status, headers, _ = exchange(s, request("GET", "/health", extra="Connection: close\r\n"))
        assert status == 200 and headers["connection"] == "close"
        assert s.recv(1) == b""
    finally:
        s.close()


# ============================================================== what junk costs


def test_junk_with_bad_signatures_costs_no_chain_read_and_stores_nothing(target):
    reqs = [r for i, r in enumerate(junk_requests(50)) if i % 5 in (0, 4)]
    s = connect_from("127.0.0.2", target.port)
    try:
        for req in reqs:
            status, _headers, body = exchange(s, req)
            assert (status, json.loads(body)["error"]) in (
                (422, "bad_receipt_signature"), (400, "bad_request")), body
    finally:
        s.close()
    assert (target.chain.job_reads, target.chain.provider_reads) == (0, 0)
    assert target.store.summary()["proofs"] == {}


def test_junk_signed_by_unknown_keys_costs_bounded_provider_reads(target):
    # Self-signed proofs for the real job and provider, each with a key nobody registered:
    # the first makes the cached provider be re-read (a rotation may be new), the rest must
    # not make one chain read each.
    reqs = [r for i, r in enumerate(junk_requests(100)) if i % 5 == 3]
    s = connect_from("127.0.0.2", target.port)
    try:
        for req in reqs:
            assert exchange(s, req)[0] == 425  # unknown_worker_key, retryable
    finally:
        s.close()
    assert target.chain.provider_reads <= 3, target.chain.provider_reads
    assert target.store.summary()["proofs"] == {}


def test_a_sign_request_with_a_bad_signature_costs_no_chain_read(tmp_path):
    t = Target(tmp_path, member=True)
    try:
        body = {"job": b58(os.urandom(32)), "seq": 1, "approved_seconds": 60,
                "leader": b58(bytes(VALIDATOR_KEYS[1].pubkey())),
                "member": b58(bytes(VALIDATOR_KEYS[0].pubkey())), "round": 0, "attempt": 0,
                "leader_signature": base64.b64encode(os.urandom(64)).decode(),
                "leader_attestation": base64.b64encode(os.urandom(64)).decode()}
        r = httpx.post(t.url + "/v1/attestations/sign", json=body)
        assert (r.status_code, r.json()["error"]) == (403, "bad_request_signature")
        assert t.chain.job_reads == 0
    finally:
        t.close()



def test_member_queries_share_the_intakes_job_reads_and_its_budget(tmp_path):
    """``/v1/attestations/query`` and ``/v1/downtime/sign`` name a job anyone may pick: under
    ``run`` they read it through the intake's cache (a job asked about again costs nothing)
    and within the asking source's budget (fresh random jobs: 429 past it, no read)."""
    from gpum_validator.chain import ReadBudget

    t = Target(tmp_path, member=True)
    member = t.server.member
    member.jobs, member.job_reads = t.intake.jobs, ReadBudget(1.0, 3.0, clock=lambda: 1000.0)
    try:
        s = connect_from("127.0.0.2", t.port)

        def query(job: bytes) -> tuple[int, dict]:
            body = json.dumps({"job": b58(job), "seq": 1}).encode()
            status, _, raw = exchange(s, request("POST", "/v1/attestations/query", body))
            return status, json.loads(raw)

        assert [query(HONEST_JOBS[0])[1]["error"] for _ in range(5)] == ["job_unknown"] * 5
        assert t.chain.job_reads == 1  # read once, then from the cache
        answers = [query(os.urandom(32)) for _ in range(4)]
        assert [a[1]["error"] for a in answers] == ["job_not_found"] * 2 + [
            "chain_read_budget"] * 2
        assert {a[0] for a in answers[2:]} == {429} and t.chain.job_reads == 3
        body = json.dumps({"job": b58(os.urandom(32)), "last_proof_window_end": 0,
                           "message": "AA=="}).encode()
        status, _, raw = exchange(s, request("POST", "/v1/downtime/sign", body))
        assert (status, json.loads(raw)["error"]) == (429, "chain_read_budget")
        assert t.chain.job_reads == 3
        s.close()
    finally:
        t.close()


if __name__ == "__main__":
    _child_main(sys.argv[1])
    sys.exit(0)
