"""The worker API over real HTTP on 127.0.0.1 (``WorkerApi``), with a fake container runtime:
delivery, authentication, lookups that never reach the chain, status and logs."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from fakes import FakeBackend, FakeGpu, FakeRuntime, NoHeads
from gpu_market.workload import (
    MAX_SPEC_BYTES,
    WorkloadSpec,
    canonical_bytes,
    seal_secrets,
    sign_request,
    spec_hash,
)
from gpum_worker.agent import Agent
from gpum_worker.api import WorkerApi
from gpum_worker.errors import ConfigError
from gpum_worker.jobs import AssignedJob, StaticJobSource
from gpum_worker.keys import WorkerKey, b58encode
from gpum_worker.outbox import Outbox
from gpum_worker.runtime import container_name
from gpum_worker.workload_store import WorkloadStore
from gpum_worker.workloads import WorkloadManager
from solders.keypair import Keypair

T0 = 1_700_000_000
USER = Keypair()
OTHER = Keypair()


class CountingSource(StaticJobSource):
    """Counts every call the agent makes; requests to the API must add none."""

    def __init__(self, jobs: list[AssignedJob]) -> None:
        super().__init__(jobs, clock=lambda: T0)
        self.calls = 0

    def __getattribute__(self, name: str):
        if name in ("assigned_jobs", "job_status", "fetch", "accept", "finish",
                    "worker_keys", "validator_endpoint"):
            object.__setattr__(self, "calls", object.__getattribute__(self, "calls") + 1)
        return object.__getattribute__(self, name)


def job(n: int, spec: WorkloadSpec | None, status: str = "open") -> AssignedJob:
    return AssignedJob(job=bytes([n]) * 32, market=b"\x02" * 32, program_id=b"\x01" * 32,
                       provider=b"\x03" * 32, gpu_count=1, status=status,
                       started_at=T0 if status != "open" else None, user=bytes(USER.pubkey()),
                       workload_hash=spec_hash(spec) if spec is not None else bytes(32))


class Env:
    def __init__(self, tmp_path: Path, key: WorkerKey) -> None:
        self.key = key
        self.rt = FakeRuntime()
        self.spec = WorkloadSpec(image="docker.io/library/busybox:1.36",
                                 args=("sh", "-c", "echo hi"),
                                 secret_env=seal_secrets(key.pubkey, {"TOKEN": "s3cret"}))
        self.open = job(1, self.spec)
        self.running_spec = replace(self.spec, env=(("MODE", "run"),))
        self.running = job(2, self.running_spec, status="running")
        self.plain = job(3, None, status="running")
        self.src = CountingSource([self.open, self.running, self.plain])
        self.store = WorkloadStore(tmp_path / "w.sqlite")
        self.manager = WorkloadManager(self.rt, self.store, key.seed, publish_host="127.0.0.1",
                                       process_alive=lambda pid: True, background_starts=False)
        self.agent = Agent(backend=FakeBackend([FakeGpu(f"GPU-{i}") for i in range(3)]),
                           job_source=self.src,
                           outbox=Outbox(tmp_path / "o.sqlite", key.pubkey, ["http://v"]),
                           key=key, window_seconds=10, heads=NoHeads(), workloads=self.manager)
        self.agent.start()
        self.api = WorkerApi(self.manager, "127.0.0.1:0", worker=key.pubkey_b58)
        self.api.start()
        self.manager.api_url = self.api.url
        self.http = httpx.Client(base_url=self.api.url, timeout=10)

    def signed(self, action: str, j: AssignedJob, workload_hash: bytes | None = None,
               signer: Keypair = USER, ts: int | None = None) -> dict[str, str]:
        h = j.workload_hash if workload_hash is None else workload_hash
        return sign_request(signer.to_bytes(), action, j.job, h,
                            int(time.time()) if ts is None else ts)

    def deliver(self, j: AssignedJob, spec: WorkloadSpec, **kw) -> httpx.Response:
        body = canonical_bytes(spec)
        return self.http.post(f"/v1/jobs/{j.job_b58}/workload", content=body,
                              headers=self.signed("deliver", j, spec_hash(spec), **kw))

    def close(self) -> None:
        self.http.close()
        self.api.close()
        self.agent.outbox.close()
        self.store.close()


@pytest.fixture
def env(tmp_path: Path, key: WorkerKey) -> Iterator[Env]:
    e = Env(tmp_path, key)
    e.agent.poll_jobs(T0)
    try:
        yield e
    finally:
        e.close()


def test_deliver_then_the_job_is_accepted_and_redeliver_is_idempotent(env: Env) -> None:
    r = env.deliver(env.open, env.spec)
    assert r.status_code == 200, r.text
    assert r.json() == {"job": env.open.job_b58, "workload_hash": env.open.workload_hash.hex(),
                        "state": "pending"}
    rec = env.store.get(env.open.job)
    assert rec.spec == canonical_bytes(env.spec)
    r2 = env.deliver(env.open, env.spec)
    assert r2.status_code == 200 and r2.json()["state"] == "pending"
    assert env.store.get(env.open.job).delivered_at == rec.delivered_at
    env.agent.poll_jobs(T0 + 1)
    assert env.open.job in env.src.accepted


def test_delivery_refusals(env: Env) -> None:
    other_spec = replace(env.spec, args=("sh", "-c", "echo evil"))
    r = env.deliver(env.open, other_spec)  # correctly signed, but not the job's spec
    assert r.status_code == 409 and "workload_hash" in r.json()["error"]
    r = env.deliver(env.open, env.spec, signer=OTHER)
    assert r.status_code == 403 and "not this job's user" in r.json()["error"]
    headers = env.signed("deliver", env.open, spec_hash(env.spec))
    headers["X-Gpum-Signature"] = "garbage"
    r = env.http.post(f"/v1/jobs/{env.open.job_b58}/workload",
                      content=canonical_bytes(env.spec), headers=headers)
    assert r.status_code == 401 and "X-Gpum-Signature" in r.json()["error"]
    r = env.deliver(env.open, env.spec, ts=int(time.time()) - 301)  # outside the replay window
    assert r.status_code == 401 and "clock" in r.json()["error"]
    r = env.http.post(f"/v1/jobs/{env.open.job_b58}/workload",
                      content=canonical_bytes(env.spec))
    assert r.status_code == 401 and "missing" in r.json()["error"]
    r = env.deliver(env.plain, env.spec)  # a job without a workload
    assert r.status_code == 409 and "no workload" in r.json()["error"]
    assert env.store.get(env.open.job) is None and env.store.records() == []


def test_malformed_and_oversize_bodies(env: Env) -> None:
    url = f"/v1/jobs/{env.open.job_b58}/workload"
    h = env.signed("deliver", env.open)
    r = env.http.post(url, content=b'{"image": ', headers=h)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
    r = env.http.post(url, content=b'{"image": "x", "bogus": 1}', headers=h)
    assert r.status_code == 400 and "bogus" in r.json()["error"]
    r = env.http.post(url, content=b"x" * (MAX_SPEC_BYTES + 1), headers=h)
    assert r.status_code == 413 and str(MAX_SPEC_BYTES) in r.json()["error"]
    r = env.http.post("/v1/jobs/not-base58!/workload", content=b"{}", headers=h)
    assert r.status_code == 400
    r = env.http.put(url, content=b"{}")
    assert r.status_code == 405
    assert env.http.get("/v1/nothing").status_code == 404
    assert env.store.records() == []


def test_unknown_and_ended_jobs_cost_no_chain_read(env: Env) -> None:
    env.src.calls = 0
    pokes: list[int] = []
    env.manager.on_delivered = lambda: pokes.append(1)
    unknown = job(9, env.spec)
    r = env.deliver(unknown, env.spec)
    assert r.status_code == 404 and "not a live job" in r.json()["error"]
    # "not seen yet": retry after a second; the agent is asked to poll early (once per turn)
    assert r.headers["Retry-After"] == "1" and pokes == [1]
    r = env.http.get(f"/v1/jobs/{unknown.job_b58}/workload",
                     headers=env.signed("status", unknown))
    assert r.status_code == 404
    r = env.http.get(f"/v1/jobs/{unknown.job_b58}/logs", headers=env.signed("logs", unknown))
    assert r.status_code == 404
    assert env.src.calls == 0 and env.store.records() == []
    env.src.remove(env.open.job)
    env.agent.poll_jobs(T0 + 1)  # the worker sees it end
    r = env.deliver(env.open, env.spec)
    assert r.status_code == 410


def test_before_the_first_poll_answers_retry_later(tmp_path: Path, key: WorkerKey) -> None:
    e = Env(tmp_path, key)
    try:
        r = e.deliver(e.open, e.spec)
        assert r.status_code == 503 and "retry" in r.json()["error"]
        assert r.headers["Retry-After"]
    finally:
        e.close()


def test_no_runtime_answers_503(tmp_path: Path, key: WorkerKey) -> None:
    e = Env(tmp_path, key)
    e.manager.runtime = None
    e.agent.poll_jobs(T0)
    try:
        r = e.deliver(e.open, e.spec)
        assert r.status_code == 503 and "no container runtime" in r.json()["error"]
        assert e.store.records() == []
    finally:
        e.close()


def _running(env: Env) -> str:
    assert env.deliver(env.running, env.running_spec).status_code == 200
    env.agent.poll_jobs(T0 + 1)
    name = container_name(env.running.job)
    assert name in env.rt.containers
    return name


def test_status_for_the_user_only(env: Env) -> None:
    _running(env)
    url = f"/v1/jobs/{env.running.job_b58}/workload"
    r = env.http.get(url, headers=env.signed("status", env.running))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body == {"job": env.running.job_b58,
                    "workload_hash": env.running.workload_hash.hex(), "state": "running",
                    "exit_code": None, "error": None, "runtime": "fake", "ports": [],
                    "job_status": "running", "ended": False, "end_reason": None,
                    "logs_kept_until": None, "checkpoint": None}
    assert env.http.get(url, headers=env.signed("status", env.running, signer=OTHER)
                        ).status_code == 403
    assert env.http.get(url).status_code == 401
    # Signed for another action: not valid for this one.
    assert env.http.get(url, headers=env.signed("logs", env.running)).status_code == 401
    env.rt.exit(container_name(env.running.job), 4)
    body = env.http.get(url, headers=env.signed("status", env.running)).json()
    assert (body["state"], body["exit_code"]) == ("exited", 4)
    r = env.http.get(f"/v1/jobs/{env.plain.job_b58}/workload",
                     headers=env.signed("status", env.plain))
    assert r.status_code == 409
    r = env.http.get(f"/v1/jobs/{env.open.job_b58}/workload",
                     headers=env.signed("status", env.open))
    assert r.status_code == 200 and r.json()["state"] == "pending"


def test_logs_tail_and_refusals(env: Env) -> None:
    name = _running(env)
    env.rt.write(name, b"one\ntwo\nthree\n")
    url = f"/v1/jobs/{env.running.job_b58}/logs"
    r = env.http.get(url, params={"tail": 2}, headers=env.signed("logs", env.running))
    assert r.status_code == 200 and r.text == "two\nthree\n"
    assert r.headers["content-type"].startswith("text/plain")
    r = env.http.get(url, headers=env.signed("logs", env.running))
    assert r.text == "one\ntwo\nthree\n"
    assert env.http.get(url, headers=env.signed("logs", env.running, signer=OTHER)
                        ).status_code == 403
    assert env.http.get(url).status_code == 401
    h = env.signed("logs", env.running)
    assert env.http.get(url, params={"tail": "x"}, headers=h).status_code == 400
    assert env.http.get(url, params={"follow": "2"}, headers=h).status_code == 400
    assert env.http.get(url, params={"since": "1"}, headers=h).status_code == 400
    # An exited container's log is served until it is removed, then its saved tail.
    env.rt.exit(name, 0)
    assert env.http.get(url, headers=h).text == "one\ntwo\nthree\n"
    env.src.set(replace(env.src.fetch(env.running.job), status="finishing", ended_at=T0 + 5))
    env.agent.poll_jobs(T0 + 6)
    assert name not in env.rt.containers
    assert env.http.get(url, params={"tail": 1}, headers=h).text == "three\n"
    r = env.http.get(url, params={"follow": 1}, headers=h)  # nothing to follow: what is kept
    assert r.status_code == 200 and r.text == "one\ntwo\nthree\n"


def test_an_ended_jobs_last_logs_and_why_it_ended_stay_for_its_user(env: Env) -> None:
    name = _running(env)
    env.rt.write(name, b"epoch 1\nepoch 2\n")
    # The chain fails the job (its provider was slashed) while the container still runs.
    env.src.set(replace(env.src.fetch(env.running.job), status="failed"))
    env.agent.poll_jobs(T0 + 2)
    assert name not in env.rt.containers  # stopped and removed, its log tail saved
    logs = f"/v1/jobs/{env.running.job_b58}/logs"
    r = env.http.get(logs, headers=env.signed("logs", env.running))
    assert r.status_code == 200 and r.text == "epoch 1\nepoch 2\n"
    status = f"/v1/jobs/{env.running.job_b58}/workload"
    body = env.http.get(status, headers=env.signed("status", env.running)).json()
    assert body["ended"] and body["job_status"] == "failed" and body["state"] == "stopped"
    assert body["end_reason"].startswith("the provider failed")
    assert body["logs_kept_until"] >= int(time.time()) + 86400 - 60
    # The same signature rules: another wallet gets nothing; a new spec is refused.
    assert env.http.get(logs, headers=env.signed("logs", env.running, signer=OTHER)
                        ).status_code == 403
    assert env.deliver(env.running, env.running_spec).status_code == 410
    # Past the retention period only the reason is left.
    env.store.ended_logs_s = 0
    env.store.purge()
    r = env.http.get(logs, headers=env.signed("logs", env.running))
    assert r.status_code == 410 and "the provider failed" in r.json()["error"]


def test_logs_follow_streams_until_the_container_stops(env: Env) -> None:
    name = _running(env)
    env.rt.write(name, b"first\n")
    url = f"/v1/jobs/{env.running.job_b58}/logs"
    got: list[bytes] = []
    with env.http.stream("GET", url, params={"follow": 1, "tail": 10},
                         headers=env.signed("logs", env.running)) as r:
        assert r.status_code == 200 and r.headers["transfer-encoding"] == "chunked"
        it = r.iter_raw()
        got.append(next(it))
        assert b"".join(got) == b"first\n"
        env.rt.write(name, b"second\n")
        got.append(next(it))
        assert b"".join(got) == b"first\nsecond\n"
        threading.Timer(0.2, env.rt.exit, (name, 0)).start()
        got.extend(it)  # ends when the container stops
    assert b"".join(got) == b"first\nsecond\n"
    _wait_closed(env.rt)


def _wait_closed(rt: FakeRuntime) -> None:
    deadline = time.time() + 5
    while not (rt.streams and all(st.closed for st in rt.streams)):
        assert time.time() < deadline, "the log stream was not closed"
        time.sleep(0.05)


def test_logs_follow_ends_when_the_client_goes_away(env: Env) -> None:
    _running(env)
    job_b58 = env.running.job_b58
    h = env.signed("logs", env.running)
    host, port = env.api.address
    with socket.create_connection((host, port), timeout=5) as s:
        req = (f"GET /v1/jobs/{job_b58}/logs?follow=1 HTTP/1.1\r\nHost: x\r\n"
               + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n")
        s.sendall(req.encode())
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
    _wait_closed(env.rt)


def test_health_and_listen_errors(env: Env, key: WorkerKey) -> None:
    r = env.http.get("/v1/health")
    assert r.json() == {"ok": True, "worker": key.pubkey_b58, "runtime": "fake",
                        "cluster": None}
    host, port = env.api.address
    with pytest.raises(ConfigError, match="cannot listen"):
        WorkerApi(env.manager, f"{host}:{port}").start()
    with pytest.raises(ConfigError, match="HOST:PORT"):
        WorkerApi(env.manager, "nonsense")


def test_errors_are_json_with_a_message(env: Env) -> None:
    r = env.http.get(f"/v1/jobs/{b58encode(bytes(32))}/workload")
    assert r.headers["content-type"] == "application/json"
    assert json.loads(r.text)["error"]


def test_real_podman_through_the_api(tmp_path: Path, key: WorkerKey,
                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    """Deliver over HTTP, accept, run with real podman, follow its log, finish: stream ends."""
    import os

    from runtimetestkit import real_podman

    real = real_podman(tmp_path_factory.mktemp("podman"))
    script = "trap 'exit 0' TERM; echo started; while true; do echo tick; sleep 1; done"
    spec = WorkloadSpec(image=real.image, command=("sh", "-c"), args=(script,))
    j = replace(job(1, spec), job=os.urandom(32))
    src = StaticJobSource([j], clock=lambda: T0)
    store = WorkloadStore(tmp_path / "w.sqlite")
    m = WorkloadManager(real.runtime, store, key.seed, publish_host="127.0.0.1",
                        attach_gpus=False)
    a = Agent(backend=FakeBackend([FakeGpu("GPU-0")]), job_source=src,
              outbox=Outbox(tmp_path / "o.sqlite", key.pubkey, ["http://v"]), key=key,
              window_seconds=10, heads=NoHeads(), workloads=m)
    a.start()
    api = WorkerApi(m, "127.0.0.1:0")
    api.start()
    http = httpx.Client(base_url=api.url, timeout=30)
    name = container_name(j.job)
    try:
        a.poll_jobs(T0)
        assert src.accepted == []
        r = http.post(f"/v1/jobs/{j.job_b58}/workload", content=canonical_bytes(spec),
                      headers=sign_request(USER.to_bytes(), "deliver", j.job, spec_hash(spec),
                                           int(time.time())))
        assert r.status_code == 200, r.text
        a.poll_jobs(T0 + 1)  # starts the check of the job's image, in the background
        assert m.wait_for_starts(120)
        a.poll_jobs(T0 + 1)
        assert src.accepted == [j.job]
        a.poll_jobs(T0 + 2)
        assert m.wait_for_starts(120)
        assert real.runtime.state(name).status == "running"
        r = http.get(f"/v1/jobs/{j.job_b58}/workload",
                     headers=sign_request(USER.to_bytes(), "status", j.job, j.workload_hash,
                                          int(time.time())))
        assert r.json()["state"] == "running" and r.json()["runtime"] == "podman"
        logs_h = sign_request(USER.to_bytes(), "logs", j.job, j.workload_hash,
                              int(time.time()))
        got = b""
        with http.stream("GET", f"/v1/jobs/{j.job_b58}/logs", params={"follow": 1},
                         headers=logs_h) as s:
            it = s.iter_raw()
            while b"tick" not in got:
                got += next(it)
            assert got.startswith(b"started\n")
            src.set(replace(src.fetch(j.job), status="finishing", ended_at=T0 + 3))
            a.poll_jobs(T0 + 4)  # the job left Running: its container goes, the stream ends
            got += b"".join(it)
        assert real.runtime.state(name).status == "missing"
        r = http.get(f"/v1/jobs/{j.job_b58}/logs", params={"tail": 1000}, headers=logs_h)
        assert r.status_code == 200 and r.content.startswith(b"started\ntick\n")
    finally:
        http.close()
        api.close()
        real.runtime.remove(name, timeout_s=0)
        a.outbox.close()
        store.close()


def test_the_sdk_client_speaks_this_api(env: Env) -> None:
    """``gpu_market.workload_api`` (the user's client) against this server."""
    from gpu_market.workload_api import (
        WorkerApiError,
        deliver_workload,
        stream_logs,
        workload_status,
    )

    secret = USER.to_bytes()
    j = env.running
    assert deliver_workload(env.api.url, j.job, env.running_spec, secret)["state"] in (
        "pending", "running")
    env.agent.poll_jobs(T0 + 1)
    name = container_name(j.job)
    env.rt.write(name, b"a\nb\n")
    st = workload_status(env.api.url, j.job, j.workload_hash, secret)
    assert st["state"] == "running" and st["runtime"] == "fake"
    assert b"".join(stream_logs(env.api.url, j.job, j.workload_hash, secret, tail=1)) == b"b\n"
    threading.Timer(0.3, env.rt.exit, (name, 0)).start()
    assert b"".join(stream_logs(env.api.url, j.job, j.workload_hash, secret,
                                follow=True)) == b"a\nb\n"
    with pytest.raises(WorkerApiError) as e:
        deliver_workload(env.api.url, j.job, env.spec, secret)
    assert e.value.status == 409
    with pytest.raises(WorkerApiError) as e:
        workload_status(env.api.url, j.job, j.workload_hash, OTHER.to_bytes())
    assert e.value.status == 403


def test_one_log_request_per_job_at_a_time(env: Env) -> None:
    name = _running(env)
    env.rt.write(name, b"first\n")
    url = f"/v1/jobs/{env.running.job_b58}/logs"
    h = env.signed("logs", env.running)
    with env.http.stream("GET", url, params={"follow": 1}, headers=h) as r:
        assert r.status_code == 200
        chunks = r.iter_raw()
        assert next(chunks) == b"first\n"
        second = env.http.get(url, headers=h)  # the same job's log, while one streams
        assert second.status_code == 429 and "already running" in second.json()["error"]
        assert second.headers["retry-after"] == "1"
    _wait_closed(env.rt)
    deadline = time.time() + 5
    while (r := env.http.get(url, headers=h)).status_code == 429:  # the stream's end frees it
        assert time.time() < deadline
        time.sleep(0.05)
    assert r.status_code == 200 and r.text == "first\n"
