"""``gpum job logs`` and ``gpum job status`` on jobs that ended: the logs the worker keeps are
printed whatever the job's state on chain (a closed job is signed with the hash of the spec
saved at creation), a 410 prints the worker's reason, and ``job status`` says why the job ended
and until when its logs are kept. Chain reads are answered locally; the worker is a stub HTTP
server that checks every request's signature."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from gpu_market.workload import RequestAuthError, WorkloadSpec, spec_hash, verify_request
from solders.pubkey import Pubkey
from test_cli import CHAIN_NOW, assert_one_line_error, fake_job, offline, run

SPEC = WorkloadSpec(image="docker.io/library/busybox:1.36", finish_on_exit=True)
HASH = spec_hash(SPEC)
JOB = Pubkey.new_unique()
PROVIDER = Pubkey.new_unique()
REASON = "the escrow ran dry: the deposit is spent"


class Worker:
    """The worker API of one job: ``answer`` is what the logs endpoint sends (status, body);
    each request's signature must be the user's over ``HASH``."""

    def __init__(self, user: Pubkey) -> None:
        self.user = user
        self.logs: tuple[int, bytes] = (200, b"step 9\nbye\n")
        self.status: dict = {"job": str(JOB), "workload_hash": HASH.hex(), "state": "exited",
                             "exit_code": 0, "error": None, "runtime": "podman", "ports": [],
                             "job_status": "completed", "ended": True, "end_reason": REASON,
                             "logs_kept_until": CHAIN_NOW + 23 * 3600}  # fmt: skip
        self.seen: list[str] = []
        worker = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a) -> None:
                pass

            def do_GET(self) -> None:
                action = "logs" if "/logs" in self.path else "status"
                worker.seen.append(self.path)
                try:
                    verify_request(dict(self.headers), action, bytes(JOB), HASH,
                                   expected_signer=bytes(worker.user), now=int(time.time()))
                except RequestAuthError as e:
                    return self.reply(e.status, json.dumps({"error": str(e)}).encode())
                if action == "logs":
                    return self.reply(*worker.logs)
                return self.reply(200, json.dumps(worker.status).encode())

            def reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def world(monkeypatch, user):
    """``world.job``: the job on chain (None once closed); ``world.closed``: its tombstone."""
    from gpu_market.client import GpuMarketClient

    offline(monkeypatch)
    worker = Worker(user[0].pubkey())
    job = replace(fake_job("completed", ended_at=CHAIN_NOW - 60), user=user[0].pubkey(),
                  provider=PROVIDER, workload_hash=HASH, address=JOB)  # fmt: skip
    w = SimpleNamespace(job=job, closed=None, worker=worker)
    monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self, a: w.job)
    monkeypatch.setattr(GpuMarketClient, "fetch_closed_job", lambda self, a: w.closed)
    monkeypatch.setattr(GpuMarketClient, "fetch_provider",
                        lambda self, p: SimpleNamespace(price_per_gpu_second=1_000,
                                                        endpoint=worker.url) if p == PROVIDER else None)
    monkeypatch.setattr(GpuMarketClient, "token_balance", lambda self, a: 0)
    yield w
    worker.close()


def logs(keyfile: str, *extra: str) -> tuple[int, str, str]:
    return run(["job", "logs", str(JOB), "-k", keyfile, *extra])


@pytest.mark.parametrize("state", ["completed", "failed", "finishing"])
def test_the_logs_of_an_ended_job_are_printed(world, user, state):
    world.job = replace(world.job, status=state)
    code, out, err = logs(user[1])
    assert (code, out, err) == (0, "step 9\nbye\n", "")


def test_the_logs_of_a_closed_job_are_signed_with_the_saved_spec(world, user):
    from gpu_market.cli.workload import save_spec
    from gpu_market.job_history import JobHistory, Receipt

    world.job, world.closed = None, SimpleNamespace(closed_at=CHAIN_NOW)
    code, _, err = logs(user[1])
    assert code == 1
    assert_one_line_error(err, f"job {JOB} is closed and no spec of it is saved at",
                          "GPUM_WORKLOADS_DIR")  # fmt: skip
    save_spec(JOB, SPEC)
    code, _, err = logs(user[1])
    assert code == 1
    assert_one_line_error(err, "does not name its provider: pass --provider PROVIDER")
    code, out, err = logs(user[1], "--provider", str(PROVIDER))
    assert (code, out, err) == (0, "step 9\nbye\n", "")
    closed = replace(fake_job("completed"), provider=PROVIDER, address=JOB)
    JobHistory().record_closed(closed, url="http://127.0.0.1:8899",
                               receipt=Receipt(1, 0, 0, 0, 0, 1), closed_at=CHAIN_NOW,
                               signature="SiG")  # fmt: skip
    code, out, err = logs(user[1], "--tail", "1")
    assert (code, out, err) == (0, "step 9\nbye\n", "")
    assert world.worker.seen[-1].endswith("/logs?follow=0&tail=1")


def test_a_job_that_never_existed_is_said(world, user):
    world.job = None
    code, _, err = logs(user[1])
    assert code == 1
    assert_one_line_error(err, f"job {JOB} does not exist")


def test_gone_logs_print_the_workers_reason(world, user):
    gone = (f"this job has ended ({REASON}); its workload's status and last logs are kept 24 h "
            "after it ended, and are gone now")
    world.worker.logs = (410, json.dumps({"error": gone}).encode())
    code, out, err = logs(user[1])
    assert (code, out) == (1, "")
    assert_one_line_error(err, f"the logs of job {JOB} are gone: {gone}")


def test_job_status_says_why_the_job_ended_and_until_when_its_logs_are_kept(world, user):
    code, out, err = run(["job", "status", str(JOB), "-k", user[1]])
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[1] == "status: completed"
    assert lines[2] == f"ended: completed - {REASON}"
    assert lines[3] == "logs_kept_until: 2023-11-15 21:13:20 UTC (in 23 h)"
    assert lines[4] == "rate_per_hour: 3.6"
    assert "rate_per_second" not in out
    code, out, err = run(["--output", "json", "job", "status", str(JOB), "-k", user[1]])
    d = json.loads(out)
    assert d["logs_kept_until"] == CHAIN_NOW + 23 * 3600
    assert d["workload"]["end_reason"] == REASON and d["workload"]["ended"] is True


def test_job_status_of_a_running_job_has_no_end(world, user):
    world.job = replace(world.job, status="running", ended_at=0)
    world.worker.status.update(job_status="running", ended=False, end_reason=None,
                               logs_kept_until=None)  # fmt: skip
    code, out, err = run(["job", "status", str(JOB), "-k", user[1]])
    assert (code, err) == (0, "")
    assert "ended:" not in out and "logs_kept_until" not in out


def test_job_status_gives_the_worker_a_short_deadline(world, user, monkeypatch):
    from gpu_market.cli import workload

    seen = {}

    def status(*a, timeout):
        seen["timeout"] = timeout
        return dict(world.worker.status)

    monkeypatch.setattr("gpu_market.workload_api.workload_status", status)
    code, _, _ = run(["job", "status", str(JOB), "-k", user[1]])
    assert code == 0 and seen["timeout"] == workload.STATUS_TIMEOUT <= 3
