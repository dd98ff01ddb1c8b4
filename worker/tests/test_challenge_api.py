"""The worker's hardware-challenge endpoints over real HTTP on 127.0.0.1 (``WorkerApi`` with
a ``ChallengeService`` on the numpy backend): who may ask, renters first, one at a time, and
answers the validator's own verifier accepts."""

from __future__ import annotations

import base64
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gpu_market.challenge import Answer, Challenge, Openings, row_leaf
from gpu_market.challenge_messages import (
    answer_message,
    gpu_challenge,
    open_message,
    request_message,
    row_message,
    sign_digest,
    verify_digest,
)
from gpu_market.challenge_verdict import judge, load_bounds
from gpum_worker.api import WorkerApi
from gpum_worker.challenge_api import (
    ChallengeService,
    ValidatorDirectory,
    assigned_gpus,
    nvml_library,
    preload_signals,
)
from gpum_worker.challenge_compute import NumpyBackend
from gpum_worker.config import resolve
from gpum_worker.errors import ConfigError
from gpum_worker.gpu import GpuInfo
from gpum_worker.keys import WorkerKey, b58encode
from gpum_worker.outbox import Outbox
from gpum_worker.workload_store import WorkloadStore
from gpum_worker.workloads import WorkloadManager
from solders.keypair import Keypair

PROGRAM, MARKET, PROVIDER = b"\x01" * 32, b"\x02" * 32, b"\x03" * 32
V1, V2, STRANGER = Keypair(), Keypair(), Keypair()
GPUS = [GpuInfo(0, "GPU-aaaa", "Simulated H100 80GB"), GpuInfo(1, "GPU-bbbb", "Simulated H100")]
TABLE = load_bounds()


class Env:
    def __init__(self, key: WorkerKey, backend: Any = None) -> None:
        self.now = [float(time.time())]
        self.mono = [1000.0]
        self.busy: set[str] = set()
        self.active: dict[bytes, bool | None] = {bytes(V1.pubkey()): True,
                                                 bytes(V2.pubkey()): True}
        self.svc = ChallengeService(
            key=key, program_id=PROGRAM, market=MARKET, provider=PROVIDER,
            gpus=lambda: GPUS, busy=lambda: self.busy,
            validators=lambda v: self.active.get(v, False),
            backend=backend or NumpyBackend(), nvml=nvml_library(True),
            clock=lambda: self.now[0], monotonic=lambda: self.mono[0])
        self.api = WorkerApi(WorkloadManager(None, WorkloadStore(":memory:"), key.seed),
                             "127.0.0.1:0", worker=key.pubkey_b58, challenges=self.svc)
        self.api.start()
        self.http = httpx.Client(base_url=self.api.url, timeout=30)

    def close(self) -> None:
        self.http.close()
        self.api.close()

    def challenge(self, n: int = 512, rounds: int = 2, **kw: Any) -> Challenge:
        fields = {"rows_to_open": 4, "issued_at": int(self.now[0]), **kw}
        return Challenge(seed=os.urandom(32), n=n, rounds=rounds, **fields)

    def ask(self, ch: Challenge, signer: Keypair = V1, *, ts: int | None = None,
            claimed: Keypair | None = None) -> httpx.Response:
        ts = int(self.now[0]) if ts is None else ts
        sig = sign_digest(signer, request_message(PROGRAM, MARKET, PROVIDER, ch.challenge_id,
                                                  ts))
        return self.http.post("/v1/challenges", json={
            "challenge": base64.b64encode(ch.encode()).decode(),
            "validator": str((claimed or signer).pubkey()), "timestamp": ts,
            "signature": base64.b64encode(sig).decode()})

    def open(self, ch: Challenge, nonce: bytes, signer: Keypair = V1) -> httpx.Response:
        ts = int(self.now[0])
        sig = sign_digest(signer, open_message(PROGRAM, MARKET, PROVIDER, ch.challenge_id,
                                               nonce, ts))
        return self.http.post(f"/v1/challenges/{ch.challenge_id.hex()}/open", json={
            "validator": str(signer.pubkey()), "nonce": nonce.hex(), "timestamp": ts,
            "signature": base64.b64encode(sig).decode()})


@pytest.fixture
def env(key: WorkerKey) -> Iterator[Env]:
    e = Env(key)
    yield e
    e.close()


def test_an_answer_the_validators_verifier_accepts(env: Env, key: WorkerKey) -> None:
    ch = env.challenge()
    r = env.ask(ch)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["backend"] == "numpy" and doc["worker_key"] == key.pubkey_b58
    assert doc["challenge"] == ch.challenge_id.hex()
    assert doc["signals"]["nvml"] == {"path": "simulated", "sha256": "simulated"}
    assert doc["signals"]["gpu_uuids"] == ["GPU-aaaa", "GPU-bbbb"]
    assert set(doc["signals"]) >= {"ld_preload", "ld_so_preload"}
    answers = {}
    for g in doc["gpus"]:
        gch = gpu_challenge(ch, g["gpu_index"])
        a = Answer.from_dict(g["answer"])
        assert a.challenge_id == gch.challenge_id and a.device == "simulated"
        assert verify_digest(key.pubkey, base64.b64decode(g["signature"]), answer_message(
            PROGRAM, MARKET, PROVIDER, gch.challenge_id, ch.issued_at, a.root))
        answers[g["gpu_index"]] = (gch, a)
    assert answers[0][1].root != answers[1][1].root  # each GPU its own challenge
    nonce = os.urandom(32)
    r = env.open(ch, nonce)
    assert r.status_code == 200, r.text
    for g in r.json()["gpus"]:
        gch, a = answers[g["gpu_index"]]
        o = Openings.from_dict(g["openings"], gch)
        assert len(o.rows) == ch.rows_to_open == len(g["row_signatures"])
        for row, sig in zip(o.rows, g["row_signatures"]):
            assert verify_digest(key.pubkey, base64.b64decode(sig), row_message(
                PROGRAM, MARKET, PROVIDER, gch.challenge_id, a.root, gch.n, row.index,
                row_leaf(row.index, row.row), row.proof))
        v = judge(gch, a, o, nonce=nonce, table=TABLE, gpu=TABLE.for_model("simulated"),
                  answer_elapsed_s=1.0, open_elapsed_s=1.0)
        assert v.ok, v.failures
    assert env.open(ch, nonce).json()["error"] == "replay"  # the same signed request
    env.now[0] += 1
    assert env.open(ch, nonce).json()["error"] == "already_opened"  # signed anew


def test_a_memory_challenge_is_answered_from_the_filled_memory(env: Env) -> None:
    ch = env.challenge(memory_mib=3, chunks_to_open=2)
    doc = env.ask(ch).json()
    nonce = os.urandom(32)
    opened = env.open(ch, nonce).json()["gpus"]
    for g, o in zip(doc["gpus"], opened):
        gch = gpu_challenge(ch, g["gpu_index"])
        v = judge(gch, Answer.from_dict(g["answer"]), Openings.from_dict(o["openings"], gch),
                  nonce=nonce, table=TABLE, gpu=TABLE.for_model("simulated"),
                  answer_elapsed_s=1.0, open_elapsed_s=1.0)
        assert v.ok and v.chunks_checked == 2, v.failures


@pytest.mark.parametrize("case, status, code", [
    ("forged", 401, "bad_signature"),
    ("claims another signer", 401, "bad_signature"),
    ("stale timestamp", 401, "stale_request"),
    ("stale challenge", 400, "stale_challenge"),
    ("not a validator", 403, "not_a_validator"),
    ("chain unreadable", 503, "chain_unavailable"),
    ("too large for the CPU", 400, "too_large"),
])
def test_who_may_ask(env: Env, case: str, status: int, code: str) -> None:
    ch = env.challenge()
    if case == "forged":
        r = env.ask(ch, STRANGER, claimed=V1)
    elif case == "claims another signer":
        r = env.ask(ch, V1, claimed=V2)
    elif case == "stale timestamp":
        r = env.ask(ch, ts=int(env.now[0]) - 301)
    elif case == "stale challenge":
        r = env.ask(env.challenge(issued_at=int(env.now[0]) - 301))
    elif case == "not a validator":
        r = env.ask(ch, STRANGER)
    elif case == "chain unreadable":
        env.active[bytes(V1.pubkey())] = None
        r = env.ask(ch)
    else:
        r = env.ask(env.challenge(n=8192, rounds=64))
    assert (r.status_code, r.json()["error"]) == (status, code), r.text
    if status == 503:
        assert r.headers["retry-after"] == "30"


def test_bad_bodies_are_400(env: Env) -> None:
    ch = env.challenge()
    good = {"challenge": base64.b64encode(ch.encode()).decode(), "validator": str(V1.pubkey()),
            "timestamp": int(env.now[0]), "signature": base64.b64encode(b"\0" * 64).decode()}
    for body in ({**good, "extra": 1}, {**good, "challenge": "AAAA"},
                 {**good, "timestamp": "now"}, {**good, "signature": "!!"},
                 {**good, "validator": "not-base58"}):
        r = env.http.post("/v1/challenges", json=body)
        assert r.status_code == 400, (body, r.text)
    assert env.http.post("/v1/challenges", content=b"[1]",
                         headers={"content-type": "application/json"}).status_code == 400
    assert env.http.get("/v1/challenges").status_code == 405
    assert env.http.post("/v1/challenges/x/y/z", json={}).status_code == 404


def test_a_replayed_request_is_refused(env: Env) -> None:
    ch = env.challenge()
    assert env.ask(ch).status_code == 200
    r = env.ask(ch)  # byte for byte the same request
    assert (r.status_code, r.json()["error"]) == (401, "replay")


def test_one_challenge_per_validator_per_interval(env: Env) -> None:
    assert env.ask(env.challenge()).status_code == 200
    env.now[0] += 1
    r = env.ask(env.challenge())
    assert (r.status_code, r.json()["error"]) == (429, "rate_limited")
    assert 1 <= int(r.headers["retry-after"]) <= 60
    assert env.ask(env.challenge(), V2).status_code == 200  # another validator is not held up
    env.mono[0] += 61
    assert env.ask(env.challenge()).status_code == 200


@pytest.mark.parametrize("busy", [{"GPU-bbbb"}, {"*"}])
def test_gpus_with_a_job_are_never_challenged(env: Env, busy: set[str]) -> None:
    env.busy |= busy
    r = env.ask(env.challenge())
    assert (r.status_code, r.json()["error"]) == (409, "busy"), r.text
    assert "0 s" in r.json()["message"]
    env.busy.clear()
    env.now[0] += 1
    assert env.ask(env.challenge()).status_code == 200  # the refusal did not count


class _SlowBackend(NumpyBackend):
    def __init__(self) -> None:
        self.entered, self.go = threading.Event(), threading.Event()

    def multiply(self, challenge: Challenge, gpu_index: int) -> Any:
        self.entered.set()
        assert self.go.wait(20)
        return super().multiply(challenge, gpu_index)


def test_one_challenge_at_a_time(key: WorkerKey) -> None:
    slow = _SlowBackend()
    e = Env(key, slow)
    try:
        first: list[httpx.Response] = []
        t = threading.Thread(target=lambda: first.append(e.ask(e.challenge())))
        t.start()
        assert slow.entered.wait(20)
        r = e.ask(e.challenge(), V2)
        assert (r.status_code, r.json()["error"]) == (503, "challenge_running")
        slow.go.set()
        t.join(30)
        assert first[0].status_code == 200
    finally:
        slow.go.set()
        e.close()


def test_only_the_asking_validator_opens_and_only_in_time(env: Env) -> None:
    ch = env.challenge()
    assert env.ask(ch).status_code == 200
    nonce = os.urandom(32)
    r = env.open(ch, nonce, V2)
    assert (r.status_code, r.json()["error"]) == (403, "not_yours")
    r = env.open(ch, nonce, STRANGER)
    assert r.status_code == 403
    other = env.challenge()
    assert env.open(other, nonce).json()["error"] == "unknown_challenge"
    env.mono[0] += 121
    r = env.open(ch, os.urandom(32))
    assert (r.status_code, r.json()["error"]) == (404, "unknown_challenge")


def test_an_open_with_a_forged_signature_is_refused(env: Env) -> None:
    ch = env.challenge()
    assert env.ask(ch).status_code == 200
    nonce = os.urandom(32)
    sig = sign_digest(V1, open_message(PROGRAM, MARKET, PROVIDER, ch.challenge_id, b"\0" * 32,
                                       int(env.now[0])))
    r = env.http.post(f"/v1/challenges/{ch.challenge_id.hex()}/open", json={
        "validator": str(V1.pubkey()), "nonce": nonce.hex(), "timestamp": int(env.now[0]),
        "signature": base64.b64encode(sig).decode()})
    assert (r.status_code, r.json()["error"]) == (401, "bad_signature")
    assert env.open(ch, nonce).status_code == 200  # the genuine open still works


def test_without_a_service_there_are_no_challenge_routes(key: WorkerKey) -> None:
    api = WorkerApi(WorkloadManager(None, WorkloadStore(":memory:"), key.seed), "127.0.0.1:0")
    api.start()
    try:
        assert httpx.post(api.url + "/v1/challenges", json={}).status_code == 404
    finally:
        api.close()


class _Client:
    def __init__(self, answers: dict[bytes, Any]) -> None:
        self.answers = answers
        self.reads = 0

    def fetch_validator_by_authority(self, market: Any, authority: Any) -> Any:
        self.reads += 1
        a = self.answers[bytes(authority)]
        if isinstance(a, Exception):
            raise a
        return a


class _View:
    def __init__(self, status: str) -> None:
        self.status = status


def test_the_validator_directory_reads_the_chain_sparingly() -> None:
    now = [0.0]
    a, b, c, d = (bytes([i]) * 32 for i in range(1, 5))
    client = _Client({a: _View("active"), b: _View("exiting"), c: None,
                      d: RuntimeError("rpc down")})
    directory = ValidatorDirectory(client, MARKET, ttl_s=60, reads_per_minute=5,
                                   clock=lambda: now[0])
    assert [directory(k) for k in (a, b, c, d)] == [True, False, False, None]
    assert directory(a) is True and directory(c) is False and client.reads == 4  # cached
    assert directory(d) is None and client.reads == 5  # a failure is not cached
    assert directory(d) is None and client.reads == 5  # the read budget is spent
    now[0] = 61
    assert directory(a) is True and client.reads == 6


def test_busy_gpus_are_the_outboxs_assignments(tmp_path: Path, key: WorkerKey) -> None:
    ob = Outbox(tmp_path / "o.sqlite", key.pubkey)
    try:
        assert assigned_gpus(tmp_path / "o.sqlite") == set()
        ob.set_assignment(b"\x09" * 32, ["GPU-1", "GPU-2"])
        assert assigned_gpus(tmp_path / "o.sqlite") == {"GPU-1", "GPU-2"}
    finally:
        ob.close()
    assert assigned_gpus(tmp_path / "missing.sqlite") == {"*"}


def test_signals(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/opt/fake/libcuda-shim.so")
    preload = tmp_path / "ld.so.preload"
    preload.write_text("/usr/lib/libhook.so\n")
    monkeypatch.setattr("gpum_worker.challenge_api.PRELOAD_FILE", preload)
    assert preload_signals() == {"ld_preload": "/opt/fake/libcuda-shim.so",
                                 "ld_so_preload": "/usr/lib/libhook.so\n"}
    lib = tmp_path / "libnvidia-ml.so.1"
    lib.write_bytes(b"\x7fELF fake")
    monkeypatch.setattr("gpum_worker.challenge_api._nvml_path", lambda: str(lib))
    import hashlib
    assert nvml_library(False) == {"path": str(lib),
                                   "sha256": hashlib.sha256(b"\x7fELF fake").hexdigest()}
    monkeypatch.setattr("gpum_worker.challenge_api._nvml_path", lambda: None)
    assert nvml_library(False)["sha256"] is None


def test_config() -> None:
    base = {"chain": {}}
    cfg = resolve(base, {}, {})
    assert cfg.challenges is True and cfg.challenge_min_interval_seconds == 60
    cfg = resolve({"challenges": {"enabled": False, "min_interval_seconds": 5}}, {}, {})
    assert cfg.challenges is False and cfg.challenge_min_interval_seconds == 5
    for bad in ({"enabled": "yes"}, {"min_interval_seconds": -1}, {"other": 1}):
        with pytest.raises(ConfigError):
            resolve({"challenges": bad}, {}, {})
    assert b58encode(PROVIDER)
