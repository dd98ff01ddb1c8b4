"""One slow, silent or returning validator costs the provider nothing elsewhere.

Each test runs the real ``gpum-worker run`` process (simulated GPUs, ``--job`` jobs, a
static ``--validator`` list) against real HTTP servers on 127.0.0.1: ``StubValidator`` (an
honest validator) and ``hostile.TrickleServer`` (a member that reads each request and then
answers one byte every half second, forever). Bounds are stated against the worker's own
deadlines, with generous margins; nothing here measures speed.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path

from gpum_worker.keys import b58encode, generate_key_file
from gpum_worker.stub_validator import StubValidator
from hostile import TrickleServer, wait_for

IDS = [b58encode(bytes([i]) * 32) for i in (1, 2, 3)]
JOB_A, JOB_B = bytes([0x0A]) * 32, bytes([0x0B]) * 32


@contextmanager
def worker(tmp_path: Path, validators: list[str], jobs: list[bytes], *, sender: str = "",
           name: str = "worker", api: str | None = None) -> Iterator[subprocess.Popen]:
    """A real ``gpum-worker run`` with 1-second windows, stopped (SIGTERM) on exit."""
    key_path = tmp_path / "worker.json"
    if not key_path.exists():
        generate_key_file(key_path)
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text("[sender]\n" + sender)
    args = [sys.executable, "-m", "gpum_worker.cli", "run", "--config", str(cfg),
            "--key", str(key_path), "--db", str(tmp_path / "outbox.sqlite"),
            "--window-seconds", "1", "--poll-seconds", "0.5", "--simulate", "--gpus", "2",
            "--program-id", IDS[0], "--market", IDS[1], "--provider", IDS[2],
            "--job-started-at", str(int(time.time()))]
    for v in validators:
        args += ["--validator", v]
    for j in jobs:
        args += ["--job", f"{b58encode(j)}:1"]
    if api is not None:
        args += ["--api-listen", api]
    log = tmp_path / f"{name}.log"
    with open(log, "ab") as err:
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
    try:
        yield p
        assert p.poll() is None, log.read_text()[-3000:]
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def seqs(stub: StubValidator, job: bytes) -> list[int]:
    with stub.lock:
        return sorted(s for (j, s) in stub.stored if j == job)


def test_a_member_that_trickles_its_answers_delays_no_other_member(tmp_path: Path) -> None:
    # The trickler sorts first (127.0.0.1 < 127.0.0.2): a sender that goes through the
    # destinations one after another reaches it first and waits on it.
    trickler = TrickleServer("127.0.0.1", get="job_unknown", post="trickle")
    honest = StubValidator("127.0.0.2").start()
    try:
        with worker(tmp_path, [trickler.url, honest.url], [JOB_A], sender="timeout_seconds = 3\n"):
            wait_for("the honest member receiving proofs while the other one trickles",
                     lambda: len(seqs(honest, JOB_A)) >= 3, timeout=15)
            wait_for("the trickler being asked again once its deadline passed",
                     lambda: trickler.count("POST") >= 2, timeout=15)
    finally:
        trickler.stop()
        honest.stop()


def test_a_job_whose_committee_trickles_its_heads_stalls_no_other_job(tmp_path: Path) -> None:
    honest = StubValidator("127.0.0.2").start()
    try:  # job A has local state: it ran before against the honest member alone
        with worker(tmp_path, [honest.url], [JOB_A], name="first"):
            wait_for("job A proven", lambda: len(seqs(honest, JOB_A)) >= 2, timeout=20)
    finally:
        honest.stop()
    honest = StubValidator("127.0.0.2").start()
    # Now a member that trickles every head answer (and accepts proofs) joins, and job B
    # arrives without local state: B must wait for that member's head; A must not.
    trickler = TrickleServer("127.0.0.1", get="trickle", post="accept")
    head_deadline = 6.0
    try:
        with worker(tmp_path, [trickler.url, honest.url], [JOB_A, JOB_B],
                    sender=f"timeout_seconds = {head_deadline}\n", name="second"):
            t0 = time.monotonic()
            wait_for("job A proving again", lambda: len(seqs(honest, JOB_A)) >= 1,
                     timeout=2 * head_deadline + 10)
            first = len(seqs(honest, JOB_A))
            time.sleep(2 * head_deadline)  # job B's head checks time out again and again
            with honest.lock:
                got = sorted((s, honest.arrived[(JOB_A, s)]) for (j, s) in honest.stored
                             if j == JOB_A)
            assert len(got) - first >= head_deadline, (
                "job A stopped being proven while job B waited for a trickling member")
            times = [t for _, t in got if t >= t0]
            gaps = [b - a for a, b in pairwise(times)]
            # A's 1-second windows keep coming; a main loop that waited on B's head check
            # would leave a gap as long as the head deadline.
            assert max(gaps) < head_deadline * 0.75, gaps
            assert seqs(honest, JOB_B) == []  # B signs nothing while a member is silent
    finally:
        trickler.stop()
        honest.stop()


def test_a_validator_that_comes_back_gets_the_backlog_within_seconds(tmp_path: Path) -> None:
    stub = StubValidator("127.0.0.1").start()
    port = stub.server.server_address[1]
    try:  # the job has local state, so a restart proves it while its member is down
        with worker(tmp_path, [stub.url], [JOB_A], name="first"):
            wait_for("job A proven", lambda: len(seqs(stub, JOB_A)) >= 2, timeout=20)
    finally:
        stub.stop()
    done = seqs(stub, JOB_A)[-1]
    # A long backoff: without a liveness probe the first retry would come 15-30 s after
    # the first failure; the probe (every 3 s by default) finds the validator back.
    with worker(tmp_path, [stub.url], [JOB_A], name="second", sender="backoff_base_seconds "
                "= 30\nbackoff_cap_seconds = 60\n"):
        time.sleep(4)  # the validator is down: proofs pile up, all in backoff
        stub = StubValidator("127.0.0.1", port).start()
        try:
            wait_for("the backlog delivered within seconds of the validator's return",
                     lambda: len(seqs(stub, JOB_A)) >= 3, timeout=8)
            assert seqs(stub, JOB_A)[0] == done + 1  # from the first proof it missed
        finally:
            stub.stop()


def _trickling_connection(src: str, port: int) -> socket.socket:
    """A connection from ``src`` that sends the first bytes of a request, then nothing."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(src, 0))
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: w")
    return s


def test_trickling_connections_do_not_stop_the_worker_api(tmp_path: Path) -> None:
    stub = StubValidator("127.0.0.2").start()
    port = _free_port()
    socks: list[socket.socket] = []
    try:
        with worker(tmp_path, [stub.url], [JOB_A], api=f"127.0.0.1:{port}"):
            wait_for("the worker API up", lambda: _health(port), timeout=20)
            for _ in range(200):  # from one host, far past any connection cap
                try:
                    socks.append(_trickling_connection("127.0.0.4", port))
                except OSError:
                    break  # refused at the per-source cap: fine
            assert len(socks) >= 64
            # A legitimate client on another host is answered at once, every time.
            for _ in range(5):
                assert _health(port, src="127.0.0.5") == 200
            for s in socks:  # the tricklers keep trickling (those over the cap were reset)
                try:
                    s.sendall(b"x")
                except OSError:
                    pass
            assert _health(port, src="127.0.0.5") == 200
    finally:
        for s in socks:
            s.close()
        stub.stop()


def _health(port: int, src: str = "127.0.0.1") -> int | None:
    """``GET /v1/health`` from ``src``: the status, or None when there was no answer."""
    import httpx

    transport = httpx.HTTPTransport(local_address=src)
    try:
        with httpx.Client(transport=transport, timeout=5) as c:
            return c.get(f"http://127.0.0.1:{port}/v1/health").status_code
    except httpx.HTTPError:
        return None


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_stalled_chain_read_delays_no_window(tmp_path: Path, key) -> None:
    """The RPC node answers the first listing, then hangs on every read: windows are still
    closed, signed and recorded on time (here in-process: the job source is the fake)."""
    import threading

    from fakes import FakeBackend, FakeGpu
    from gpu_market.net import BoundedClient
    from gpum_worker.agent import Agent
    from gpum_worker.committee import CommitteeRouter
    from gpum_worker.jobs import AssignedJob, StaticJobSource
    from gpum_worker.outbox import Outbox
    from gpum_worker.sender import RetryPolicy

    release = threading.Event()

    class NoHeads:  # every member stores nothing for the job
        def heads(self, job, provider, keys, validators):
            return []

    class StallingSource(StaticJobSource):
        calls = 0

        def assigned_jobs(self):
            self.calls += 1
            if self.calls > 1:
                release.wait(30)  # a node that never answers
            return super().assigned_jobs()

    stub = StubValidator().start()
    db = tmp_path / "o.sqlite"
    job = AssignedJob(job=JOB_A, market=bytes(32), program_id=bytes(32), provider=bytes(32),
                      gpu_count=1, status="running", started_at=int(time.time()))
    stop = threading.Event()

    def serve() -> None:  # the agent's thread owns its outbox connection, as in the CLI
        outbox = Outbox(db, key.pubkey, [stub.url])
        agent = Agent(backend=FakeBackend([FakeGpu("GPU-0")]),
                      job_source=StallingSource([job]), outbox=outbox, key=key,
                      window_seconds=1, poll_seconds=0.2, heads=NoHeads(),
                      router=CommitteeRouter([stub.url]))
        agent.start()
        try:
            agent.run(validators_client=lambda: BoundedClient(2.0), policy=RetryPolicy(),
                      outbox_factory=lambda: Outbox(db, key.pubkey, [stub.url]), stop=stop)
        finally:
            outbox.close()

    runner = threading.Thread(target=serve, daemon=True)
    runner.start()
    reader = Outbox(db, key.pubkey, [stub.url])
    try:
        wait_for("the job proven", lambda: reader.job_chain(JOB_A), timeout=10)
        start_seq = reader.job_chain(JOB_A).last_seq
        time.sleep(4)  # every chain read hangs meanwhile
        assert reader.job_chain(JOB_A).last_seq - start_seq >= 2
    finally:
        release.set()
        stop.set()
        runner.join(30)
        reader.close()
        stub.stop()


def test_an_rpc_node_that_trickles_fails_the_call_within_its_deadline(key) -> None:
    """Every chain read of the worker has a total deadline: a node that answers one byte at
    a time makes the read fail (the worker keeps its jobs and retries), never hang."""
    import threading

    from gpum_worker.errors import JobSourceError
    from gpum_worker.jobs import ChainJobSource

    node = TrickleServer(post="trickle", get="trickle")
    outcome: list[BaseException | None] = []
    try:
        source = ChainJobSource.connect(node.url, bytes([1]) * 32, bytes([2]) * 32, key,
                                        rpc_deadline_s=1.0)

        def read() -> None:
            try:
                source.assigned_jobs()
                outcome.append(None)
            except BaseException as e:  # noqa: BLE001 - the test inspects it
                outcome.append(e)

        t = threading.Thread(target=read, daemon=True)
        t0 = time.monotonic()
        t.start()
        t.join(10)
        assert outcome, "the listing still hangs on a trickling RPC node"
        assert time.monotonic() - t0 < 2 * 1.0 + 1.0  # within about its deadline
        assert isinstance(outcome[0], JobSourceError)
    finally:
        node.stop()


def test_a_member_whose_health_answers_but_takes_no_proof_is_probed_less_and_less(
        tmp_path: Path, key) -> None:
    """The liveness probe makes a backlog due at once; a member whose ``/health`` says 200
    while every proof POST is reset must not turn that into a resend every probe."""
    import threading

    from gpu_market.net import BoundedClient
    from gpum_worker.outbox import Outbox
    from gpum_worker.sender import DeliveryLanes, RetryPolicy
    from test_outbox import _record_n

    liar = TrickleServer(get="health", post="reset")
    db = tmp_path / "o.sqlite"
    ob = Outbox(db, key.pubkey, [liar.url])
    _record_n(ob, key, 3)
    ob.close()
    lanes = DeliveryLanes(lambda: Outbox(db, key.pubkey, [liar.url]),
                          lambda: BoundedClient(1.0),
                          RetryPolicy(base_s=30, cap_s=60, timeout_s=1.0, probe_s=0.2,
                                      probe_timeout_s=1.0))
    stop, wake, done = threading.Event(), threading.Event(), threading.Event()
    t = threading.Thread(target=lanes.run, args=(stop, wake, done), daemon=True)
    try:
        t.start()
        time.sleep(4)  # 20 probe periods
        # Probing every 0.2 s with a resend each time would be ~20 POSTs; doubling the
        # interval after each false alarm leaves a handful.
        assert 2 <= liar.count("POST") <= 7, liar.requests
    finally:
        stop.set()
        done.set()
        t.join(10)
        liar.stop()
