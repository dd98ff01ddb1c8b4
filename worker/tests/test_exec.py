"""``gpum job exec`` / ``gpum job cp`` on the worker side: the API's exec and files
endpoints over real HTTP, against a real podman container of a Running job."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from fakes import FakeBackend, FakeGpu, NoHeads
from gpu_market.exec_api import (
    download,
    exec_stream,
    frame,
    open_exec_tunnel,
    read_frames,
    request_digest,
    upload,
)
from gpu_market.receipt import private_key_from_seed, public_key_bytes
from gpu_market.workload import WorkloadSpec, canonical_bytes, sign_request, spec_hash
from gpu_market.workload_api import WorkerApiError
from gpum_worker.agent import Agent
from gpum_worker.api import WorkerApi
from gpum_worker.exec import ReplayGuard, check_tar
from gpum_worker.jobs import AssignedJob, StaticJobSource
from gpum_worker.keys import WorkerKey
from gpum_worker.outbox import Outbox
from gpum_worker.runtime import container_name
from gpum_worker.workload_store import WorkloadStore
from gpum_worker.workloads import WorkloadManager
from solders.keypair import Keypair

T0 = 1_700_000_000
USER = Keypair()
OTHER = Keypair()


@dataclass
class World:
    api: WorkerApi
    job: AssignedJob
    http: httpx.Client

    @property
    def url(self) -> str:
        return self.api.url


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from runtimetestkit import real_podman

    tmp = tmp_path_factory.mktemp("exec")
    real = real_podman(tmp_path_factory.mktemp("podman"))
    seed = bytes(range(32))
    sk = private_key_from_seed(seed)
    key = WorkerKey(sk, seed, public_key_bytes(sk))
    spec = WorkloadSpec(image=real.image, command=("sh", "-c"),
                        args=("trap 'exit 0' TERM; while true; do sleep 1; done",))
    j = AssignedJob(job=os.urandom(32), market=b"\x02" * 32, program_id=b"\x01" * 32,
                    provider=b"\x03" * 32, gpu_count=1, status="open", started_at=None,
                    user=bytes(USER.pubkey()), workload_hash=spec_hash(spec))
    src = StaticJobSource([j], clock=lambda: T0)
    store = WorkloadStore(tmp / "w.sqlite")
    m = WorkloadManager(real.runtime, store, key.seed, publish_host="127.0.0.1",
                        attach_gpus=False)
    a = Agent(backend=FakeBackend([FakeGpu("GPU-0")]), job_source=src,
              outbox=Outbox(tmp / "o.sqlite", key.pubkey, ["http://v"]), key=key,
              window_seconds=10, heads=NoHeads(), workloads=m)
    a.start()
    api = WorkerApi(m, "127.0.0.1:0", exec_deadline_s=30)
    api.start()
    http = httpx.Client(base_url=api.url, timeout=30)
    name = container_name(j.job)
    try:
        a.poll_jobs(T0)
        r = http.post(f"/v1/jobs/{j.job_b58}/workload", content=canonical_bytes(spec),
                      headers=sign_request(USER.to_bytes(), "deliver", j.job, spec_hash(spec),
                                           int(time.time())))
        assert r.status_code == 200, r.text
        a.poll_jobs(T0 + 1)
        assert m.wait_for_starts(120)
        a.poll_jobs(T0 + 1)
        a.poll_jobs(T0 + 2)
        assert m.wait_for_starts(120)
        assert real.runtime.state(name).status == "running"
        w = World(api, src.fetch(j.job), http)
        assert _run(w, ["mkdir", "-p", "/scratch"])[2] == 0
        yield w
    finally:
        http.close()
        api.close()
        real.runtime.remove(name, timeout_s=0)
        a.outbox.close()
        store.close()


def _run(w: World, cmd: list[str]) -> tuple[bytes, bytes, int]:
    out, err, code = b"", b"", None
    for kind, payload in exec_stream(w.url, w.job.job, cmd, USER.to_bytes()):
        if kind == b"o":
            out += payload
        elif kind == b"e":
            err += payload
        elif kind == b"x":
            code = int(payload)
    assert code is not None
    return out, err, code


def test_exec_output_and_exit_code(world: World) -> None:
    assert _run(world, ["echo", "hi"]) == (b"hi\n", b"", 0)
    out, err, code = _run(world, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (out, err, code) == (b"out\n", b"err\n", 3)
    _, _, code = _run(world, ["no-such-command"])
    assert code == 127


def _exec_request(w: World, cmd: list[str], signer: Keypair = USER) -> tuple[bytes, dict]:
    body = json.dumps({"cmd": cmd, "tty": False, "stdin": False,
                       "nonce": os.urandom(8).hex()}).encode()
    nonce = json.loads(body)["nonce"]
    headers = sign_request(signer.to_bytes(), "exec", w.job.job,
                           request_digest("POST", "exec", "", nonce, body), int(time.time()))
    return body, headers


def test_a_replayed_exec_is_refused(world: World) -> None:
    body, headers = _exec_request(world, ["echo", "once"])
    url = f"/v1/jobs/{world.job.job_b58}/exec"
    r = world.http.post(url, content=body, headers=headers)
    assert r.status_code == 200 and b"once" in r.content
    again = world.http.post(url, content=body, headers=headers)
    assert again.status_code == 401 and "replay" in again.json()["error"]
    # A changed body under the same signature does not verify.
    tampered = body.replace(b"\"once\"", b"\"twice\"")
    r = world.http.post(url, content=tampered, headers=headers)
    assert r.status_code == 401


def test_another_wallet_is_refused(world: World) -> None:
    body, headers = _exec_request(world, ["echo", "x"], signer=OTHER)
    r = world.http.post(f"/v1/jobs/{world.job.job_b58}/exec", content=body, headers=headers)
    assert r.status_code == 403
    with pytest.raises(WorkerApiError) as e:
        list(exec_stream(world.url, world.job.job, ["id"], OTHER.to_bytes()))
    assert e.value.status == 403


def test_an_interactive_exec_without_upgrade_is_refused(world: World) -> None:
    body = json.dumps({"cmd": ["sh"], "tty": True, "stdin": True, "nonce": "a" * 16}).encode()
    headers = sign_request(USER.to_bytes(), "exec", world.job.job,
                           request_digest("POST", "exec", "", "a" * 16, body), int(time.time()))
    r = world.http.post(f"/v1/jobs/{world.job.job_b58}/exec", content=body, headers=headers)
    assert r.status_code == 400 and "Upgrade" in r.json()["error"]


def test_tty_session_over_the_upgraded_connection(world: World) -> None:
    t = open_exec_tunnel(world.url, world.job.job, ["sh"], USER.to_bytes(), tty=True,
                         winsize=(40, 120))
    try:
        t.send_input(b"stty size; echo $((6*7))\n")
        got = b""
        deadline = time.monotonic() + 20
        while b"42" not in got.replace(b"$((6*7))", b"") and time.monotonic() < deadline:
            for kind, payload in t.receive():
                if kind == b"o":
                    got += payload
        assert b"40 120" in got and b"42" in got.replace(b"$((6*7))", b"")
        t.send_input(b"exit 5\n")
        code = None
        while code is None and time.monotonic() < deadline:
            frames = t.receive()
            if not frames:
                break
            for kind, payload in frames:
                if kind == b"x":
                    code = int(payload)
        assert code == 5
    finally:
        t.close()


def test_stdin_without_tty(world: World) -> None:
    t = open_exec_tunnel(world.url, world.job.job, ["wc", "-c"], USER.to_bytes(), tty=False)
    try:
        t.send_input(b"hello world")
        t.send_eof()
        out, code = b"", None
        deadline = time.monotonic() + 20
        while code is None and time.monotonic() < deadline:
            for kind, payload in t.receive():
                if kind == b"o":
                    out += payload
                elif kind == b"x":
                    code = int(payload)
        assert out.strip() == b"11" and code == 0
    finally:
        t.close()


def test_copy_round_trip(world: World, tmp_path: Path) -> None:
    src = tmp_path / "data"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub" / "b.bin").write_bytes(bytes(range(256)) * 100)
    up = upload(world.url, world.job.job, src, "/scratch/data", USER.to_bytes())
    assert up["path"] == "/scratch/data"
    assert _run(world, ["cat", "/scratch/data/a.txt"])[0] == b"alpha\n"
    single = tmp_path / "one.txt"
    single.write_text("one\n")
    upload(world.url, world.job.job, single, "/scratch/", USER.to_bytes())
    assert _run(world, ["cat", "/scratch/one.txt"])[0] == b"one\n"

    out = tmp_path / "back"
    got = download(world.url, world.job.job, "/scratch/data", out, USER.to_bytes())
    assert Path(got) == out
    assert (out / "a.txt").read_text() == "alpha\n"
    assert (out / "sub" / "b.bin").read_bytes() == bytes(range(256)) * 100
    into = tmp_path / "dir"
    into.mkdir()
    got = download(world.url, world.job.job, "/scratch/one.txt", into, USER.to_bytes())
    assert Path(got) == into / "one.txt" and (into / "one.txt").read_text() == "one\n"


def test_copy_refusals(world: World, tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ValueError, match=r"\.\."):
        upload(world.url, world.job.job, f, "/scratch/../../etc/x", USER.to_bytes())
    with pytest.raises(ValueError, match="absolute"):
        download(world.url, world.job.job, "etc/passwd", tmp_path / "p", USER.to_bytes())
    # The worker refuses them too, whatever a client sends.
    nonce = "b" * 16
    for path in ("/scratch/../../../etc", "relative", "/a\nb"):
        h = sign_request(USER.to_bytes(), "files", world.job.job,
                         request_digest("GET", "files", path, nonce, b""), int(time.time()))
        r = world.http.get(f"/v1/jobs/{world.job.job_b58}/files",
                           params={"path": path, "nonce": nonce}, headers=h)
        assert r.status_code == 400, (path, r.text)
    with pytest.raises(WorkerApiError) as e:
        download(world.url, world.job.job, "/no/such/file", tmp_path / "n", USER.to_bytes())
    assert e.value.status == 404
    with pytest.raises(WorkerApiError) as e:
        download(world.url, world.job.job, "/etc/hostname", tmp_path / "o", OTHER.to_bytes())
    assert e.value.status == 403
    # A tar entry that climbs out of its directory is refused before podman sees it.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../evil")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    body = buf.getvalue()
    h = sign_request(USER.to_bytes(), "files", world.job.job,
                     request_digest("PUT", "files", "/scratch", nonce, body), int(time.time()))
    r = world.http.put(f"/v1/jobs/{world.job.job_b58}/files",
                       params={"path": "/scratch", "nonce": nonce}, content=body, headers=h)
    assert r.status_code == 400 and "leaves" in r.json()["error"]
    # The same signed upload, replayed, is refused before anything runs.
    r = world.http.put(f"/v1/jobs/{world.job.job_b58}/files",
                       params={"path": "/scratch", "nonce": nonce}, content=body, headers=h)
    assert r.status_code == 401 and "replay" in r.json()["error"]


def test_only_running_jobs(world: World) -> None:
    ended = replace(world.job, job=os.urandom(32))
    with pytest.raises(WorkerApiError) as e:
        list(exec_stream(world.url, ended.job, ["id"], USER.to_bytes()))
    assert e.value.status == 404


def test_replay_guard_and_tar_check() -> None:
    now = [1000.0]
    g = ReplayGuard(max_per_signer=2, clock=lambda: now[0])
    assert g.admit("u", "a", 1000) is True
    assert g.admit("u", "a", 1000) is False
    assert g.admit("u", "b", 1000) is True
    assert g.admit("u", "c", 1000) is None  # this signer is full of live entries
    assert g.admit("v", "c", 1000) is True  # another is not affected
    now[0] += 1000  # all out of the window
    assert g.admit("u", "a", 2000) is True
    with pytest.raises(ValueError, match="not a tar"):
        check_tar(b"nope" * 200)


def test_frames_split_anywhere() -> None:
    data = frame(b"o", b"hello") + frame(b"x", b"0")
    buf = bytearray()
    got = []
    for i in range(len(data)):
        buf.extend(data[i:i + 1])
        got += list(read_frames(buf))
    assert got == [(b"o", b"hello"), (b"x", b"0")]



def test_exec_needs_a_running_job_and_a_runtime_that_can_exec(tmp_path: Path) -> None:
    """With the fake runtime of test_worker_api: an Open job is 409, a Running one on a
    runtime without exec is 503, and neither runs anything."""
    from test_worker_api import T0 as API_T0
    from test_worker_api import USER as API_USER
    from test_worker_api import Env

    seed = bytes(range(32))
    sk = private_key_from_seed(seed)
    env = Env(tmp_path, WorkerKey(sk, seed, public_key_bytes(sk)))
    try:
        env.agent.poll_jobs(API_T0)
        for j, status, words in ((env.open, 409, "this job is open"),
                                 (env.running, 503, "cannot run commands")):
            with pytest.raises(WorkerApiError) as e:
                list(exec_stream(env.api.url, j.job, ["id"], API_USER.to_bytes()))
            assert e.value.status == status and words in str(e.value), e.value
        r = env.http.get(f"/v1/jobs/{env.running.job_b58}/exec")
        assert r.status_code == 405
    finally:
        env.close()
