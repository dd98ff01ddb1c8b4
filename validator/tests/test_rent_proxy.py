"""The rent page's relay (``rent_proxy``) on the node's real HTTP server (127.0.0.1, httpx):
JSON-RPC forwarded to a real ``gpum-localnet``, workers that are real HTTP servers on
127.0.0.1, and one negative test per refusal (method, body size, batch, transaction, market,
provider, private worker address, deadlines, read budget)."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from gpu_market.constants import PROGRAM_ID
from gpu_market.httpfront import serve_in_thread
from gpu_market.processes import Processes, start_localnet
from gpum_validator.chain import ReadBudget
from gpum_validator.dashboard import (
    CONTENT_SECURITY_POLICY,
    RENT_CONTENT_SECURITY_POLICY,
    Dashboard,
    load_asset,
)
from gpum_validator.intake import Intake
from gpum_validator.rent_proxy import (
    LOGS_TAIL_MAX,
    RPC_BODY_MAX,
    WORKER_BODY_MAX,
    RentProxy,
    TxRefused,
    check_transaction,
    private_host,
)
from gpum_validator.server import ValidatorHTTPServer
from gpum_validator.store_sqlite import SQLiteStore
from solders.address_lookup_table_account import AddressLookupTableAccount
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import Message, MessageV0
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from solders.transaction import Transaction, VersionedTransaction
from vtestkit import MARKET, ME_PUB, FakeChain, cfg, pk

OTHER_MARKET = pk(bytes([8] * 32))
PAYMENT_MINT = pk(bytes([21] * 32))
PROVIDER = pk(bytes([31] * 32))
PROVIDER_ELSEWHERE = pk(bytes([32] * 32))
PROVIDER_DEAD = pk(bytes([33] * 32))
PROVIDER_SLOW = pk(bytes([34] * 32))
PROVIDER_NO_ENDPOINT = pk(bytes([35] * 32))
WORKER_KEY = Keypair().pubkey()
JOB = "11111111111111111111111111111112"
MEMO = Pubkey.from_string("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr")
AUTH = {"X-Gpum-Signer": str(Keypair().pubkey()), "X-Gpum-Timestamp": "1700000000",
        "X-Gpum-Signature": "5" * 88}


# ----------------------------------------------------------------------------- parties


class Worker:
    """A provider's worker API on 127.0.0.1: records each request and answers what
    ``answer(method, path, headers, body)`` returns ``(status, content_type, bytes, headers)``;
    ``delay`` seconds before answering."""

    def __init__(self, answer: Any, delay: float = 0.0) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append({"method": self.command, "path": self.path,
                                       "headers": {k.lower(): v for k, v in self.headers.items()},
                                       "body": body})
                time.sleep(delay)
                status, ctype, raw, extra = answer(self.command, self.path, self.headers, body)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(raw)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _worker_answer(method: str, path: str, headers: Any, body: bytes) -> tuple[int, str, bytes, dict[str, str]]:
    if path == "/v1/health":
        return 200, "application/json", json.dumps({"ok": True, "worker": str(WORKER_KEY)}).encode(), {}
    if path.startswith(f"/v1/jobs/{JOB}/logs"):
        return 200, "text/plain; charset=utf-8", b"line 1\nline 2\n", {}
    if path == f"/v1/jobs/{JOB}/workload" and method == "POST":
        return 404, "application/json", b'{"error": "job not seen yet"}', {"Retry-After": "2"}
    return 200, "application/json", json.dumps({"state": "running", "ports": [
        {"host": "203.0.113.7", "host_port": 31000, "port": 8000, "protocol": "tcp"}]}).encode(), {}


def _silent_port() -> tuple[socket.socket, int]:
    """A listening socket that accepts and never answers (an upstream that hangs)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s, s.getsockname()[1]


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Chain:
    """The reads the relay makes through the SDK client, answered with stand-in views."""

    program_id = PROGRAM_ID

    def __init__(self, endpoints: dict[Pubkey, str]) -> None:
        params = SimpleNamespace(min_quorum=1)
        self.market = SimpleNamespace(payment_mint=PAYMENT_MINT, params=params,
                                      pending_params=params, params_effective_at=0)
        self.providers = {
            k: SimpleNamespace(address=k, market=pk(MARKET), owner=pk(bytes([5] * 32)),
                               worker_key=WORKER_KEY, endpoint=e)
            for k, e in endpoints.items()}
        self.providers[PROVIDER_ELSEWHERE] = SimpleNamespace(
            address=PROVIDER_ELSEWHERE, market=OTHER_MARKET, owner=pk(bytes([6] * 32)),
            worker_key=WORKER_KEY, endpoint=endpoints[PROVIDER])
        self.committee_asked: list[Any] = []

    def fetch_provider(self, key: Pubkey) -> Any:
        return self.providers.get(key)

    def fetch_market(self, key: Pubkey) -> Any:
        return self.market if key == pk(MARKET) else None

    def mint_decimals(self, mint: Pubkey) -> int:
        assert mint == PAYMENT_MINT
        return 6

    def default_committee(self, market: Pubkey, size: int, exclude: Any) -> list[Pubkey]:
        self.committee_asked.append(list(exclude))
        return [pk(bytes([41] * 32)), pk(bytes([42] * 32)), pk(bytes([43] * 32))][:size]


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def localnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    procs = Processes(tmp_path_factory.mktemp("rent-localnet"))
    try:
        yield start_localnet(procs).url
    finally:
        procs.stop_all()


@pytest.fixture
def workers() -> Iterator[dict[str, Worker]]:
    made = {"ok": Worker(_worker_answer), "slow": Worker(_worker_answer, delay=3.0)}
    yield made
    for w in made.values():
        w.close()


def _serve(tmp_path: Path, rent: RentProxy) -> tuple[ValidatorHTTPServer, SQLiteStore]:
    store = SQLiteStore(tmp_path / "v.sqlite")
    intake = Intake(cfg(), store, FakeChain())
    dashboard = Dashboard(rent.client, store, MARKET, ME_PUB, probe=False)
    server = ValidatorHTTPServer(("127.0.0.1", 0), intake, store, lambda: True,
                                 dashboard=dashboard, rent=rent)
    serve_in_thread(server)
    return server, store


@pytest.fixture
def node(tmp_path: Path, localnet: str, workers: dict[str, Worker]) -> Iterator[dict[str, Any]]:
    """A node relaying to the real localnet, its providers' workers on 127.0.0.1."""
    chain = Chain({PROVIDER: workers["ok"].url, PROVIDER_SLOW: workers["slow"].url,
                   PROVIDER_DEAD: f"http://127.0.0.1:{_closed_port()}",
                   PROVIDER_NO_ENDPOINT: ""})
    rent = RentProxy(chain, localnet, MARKET, ME_PUB, worker_deadline=1.0, probe_deadline=1.0)
    server, store = _serve(tmp_path, rent)
    with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=15) as c:
        yield {"http": c, "chain": chain, "rent": rent, "workers": workers, "url": localnet}
    server.shutdown()
    server.server_close()
    store.close()
    rent.close()


def _rpc(http: httpx.Client, method: str, params: list[Any] | None = None) -> httpx.Response:
    return http.post("/v1/rent/rpc", json={"jsonrpc": "2.0", "id": 7, "method": method,
                                           "params": params or []})


def _refused(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == code and body["message"], body
    return body["message"]


def _blockhash(http: httpx.Client) -> Hash:
    r = _rpc(http, "getLatestBlockhash")
    assert r.status_code == 200, r.text
    return Hash.from_string(r.json()["result"]["value"]["blockhash"])


def _b64(tx: Any) -> str:
    return base64.b64encode(bytes(tx)).decode()


# ----------------------------------------------------------------------------- config, committee


def test_config_names_the_chain_market_and_mint_never_the_rpc(node) -> None:
    r = node["http"].get("/v1/rent/config")
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    body = r.json()
    assert body == {"chain": "solana:localnet", "market": str(pk(MARKET)),
                    "program": str(PROGRAM_ID), "mint": str(PAYMENT_MINT), "decimals": 6,
                    "node_validator": str(pk(ME_PUB))}
    assert node["url"] not in r.text


def test_committee_is_the_cli_default_without_the_providers_keys(node) -> None:
    r = node["http"].get(f"/v1/rent/committee?provider={PROVIDER}")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["committee"] == [str(pk(bytes([k] * 32))) for k in (41, 42, 43)]
    assert body["quorum"] == 2 and body["min_quorum"] == 1
    assert node["chain"].committee_asked == [[pk(bytes([5] * 32)), WORKER_KEY]]
    _refused(node["http"].get("/v1/rent/committee"), 400, "bad_request")
    _refused(node["http"].get(f"/v1/rent/committee?provider={PROVIDER_ELSEWHERE}"), 404,
             "provider_not_found")


# ----------------------------------------------------------------------------- the RPC relay


def test_rpc_forwards_an_allowed_read_to_the_nodes_rpc(node) -> None:
    payer = Keypair()
    r = _rpc(node["http"], "getBalance", [str(payer.pubkey())])
    assert r.status_code == 200, r.text
    assert r.json()["id"] == 7 and r.json()["result"]["value"] == 0
    assert _blockhash(node["http"]) != Hash.default()


@pytest.mark.parametrize("method", ["getProgramAccounts", "requestAirdrop", "getTransaction",
                                    "getSignaturesForAddress"])
def test_rpc_refuses_a_method_not_allowed(node, method: str) -> None:
    message = _refused(_rpc(node["http"], method, [str(PROVIDER)]), 403, "method_not_allowed")
    assert method in message and "getLatestBlockhash" in message


def test_rpc_refuses_a_batch_and_bad_json(node) -> None:
    http = node["http"]
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "getEpochInfo"}] * 2
    _refused(http.post("/v1/rent/rpc", json=batch), 400, "bad_request")
    _refused(http.post("/v1/rent/rpc", content=b"{not json",
                       headers={"content-type": "application/json"}), 400, "bad_json")
    _refused(http.post("/v1/rent/rpc", json={"method": "getEpochInfo"}), 400, "bad_request")


def test_rpc_refuses_an_oversized_body_before_reading_it(node) -> None:
    big = {"jsonrpc": "2.0", "id": 1, "method": "getEpochInfo", "params": ["x" * RPC_BODY_MAX]}
    _refused(node["http"].post("/v1/rent/rpc", json=big), 413, "body_too_large")


def test_send_refuses_a_transaction_that_does_not_call_the_market(node) -> None:
    http = node["http"]
    payer = Keypair()
    blockhash = _blockhash(http)
    only_system = Transaction.new_signed_with_payer(
        [transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=Keypair().pubkey(),
                                 lamports=1))], payer.pubkey(), [payer], blockhash)
    message = _refused(_rpc(http, "sendTransaction", [_b64(only_system), {"encoding": "base64"}]),
                       403, "transaction_refused")
    assert str(PROGRAM_ID) in message
    market_ix = Instruction(PROGRAM_ID, b"\x00" * 8, [AccountMeta(payer.pubkey(), True, True)])
    memo = Instruction(MEMO, b"hi", [])
    with_memo = Transaction.new_signed_with_payer([market_ix, memo], payer.pubkey(), [payer],
                                                  blockhash)
    message = _refused(_rpc(http, "simulateTransaction", [_b64(with_memo), {"encoding": "base64"}]),
                       403, "transaction_refused")
    assert str(MEMO) in message
    _refused(_rpc(http, "sendTransaction", [_b64(with_memo)]), 400, "bad_request")  # base58


def test_send_forwards_a_market_transaction_and_relays_the_rpcs_answer(node) -> None:
    http = node["http"]
    payer = Keypair()
    ix = Instruction(PROGRAM_ID, b"\x00" * 8, [AccountMeta(payer.pubkey(), True, True)])
    tx = Transaction.new_signed_with_payer([ix], payer.pubkey(), [payer], _blockhash(http))
    r = _rpc(http, "simulateTransaction", [_b64(tx), {"encoding": "base64"}])
    assert r.status_code == 200, r.text
    body = r.json()  # the chain's own verdict: the payer has no SOL, the data no instruction
    assert body["id"] == 7 and ("error" in body or body["result"]["value"]["err"] is not None)


def test_check_transaction_refuses_lookup_tables_garbage_and_oversize() -> None:
    payer = Keypair()
    ix = Instruction(PROGRAM_ID, b"\x01", [AccountMeta(Keypair().pubkey(), False, True)])
    table = AddressLookupTableAccount(Keypair().pubkey(), [ix.accounts[0].pubkey])
    v0 = VersionedTransaction(MessageV0.try_compile(payer.pubkey(), [ix], [table], Hash.default()),
                              [payer])
    with pytest.raises(TxRefused, match="lookup tables"):
        check_transaction(_b64(v0), PROGRAM_ID)
    plain = VersionedTransaction(MessageV0.try_compile(payer.pubkey(), [ix], [], Hash.default()),
                                 [payer])
    check_transaction(_b64(plain), PROGRAM_ID)  # the same without a table passes
    legacy = Transaction.new_unsigned(Message([ix], payer.pubkey()))
    check_transaction(_b64(legacy), PROGRAM_ID)
    with pytest.raises(TxRefused, match="truncated"):
        check_transaction(_b64(plain)[:-12], PROGRAM_ID)
    with pytest.raises(TxRefused, match="trailing"):
        check_transaction(base64.b64encode(bytes(plain) + b"\0").decode(), PROGRAM_ID)
    with pytest.raises(TxRefused, match="at most"):
        check_transaction(base64.b64encode(bytes(1300)).decode(), PROGRAM_ID)
    with pytest.raises(TxRefused, match="base64"):
        check_transaction("not base64!", PROGRAM_ID)


def test_rpc_upstream_that_hangs_answers_504_without_the_url(tmp_path: Path) -> None:
    hang, port = _silent_port()
    url = f"http://127.0.0.1:{port}/secret-key-path"
    rent = RentProxy(Chain({PROVIDER: ""}), url, MARKET, ME_PUB, chain="solana:localnet",
                     rpc_deadline=0.5)
    server, store = _serve(tmp_path, rent)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=10) as c:
            t0 = time.monotonic()
            r = _rpc(c, "getEpochInfo")
            assert time.monotonic() - t0 < 3
            _refused(r, 504, "rpc_timeout")
            assert "secret-key-path" not in r.text and str(port) not in r.text
    finally:
        server.shutdown()
        server.server_close()
        store.close()
        rent.close()
        hang.close()


def test_rpc_unreachable_answers_502_without_the_url(tmp_path: Path) -> None:
    port = _closed_port()
    rent = RentProxy(Chain({PROVIDER: ""}), f"http://127.0.0.1:{port}/k", MARKET, ME_PUB)
    server, store = _serve(tmp_path, rent)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=10) as c:
            r = _rpc(c, "getEpochInfo")
            _refused(r, 502, "rpc_unavailable")
            assert str(port) not in r.text
            r = c.get("/v1/rent/config")  # the genesis read fails the same way
            assert r.status_code == 503 and str(port) not in r.text
    finally:
        server.shutdown()
        server.server_close()
        store.close()
        rent.close()


def test_each_forwarded_call_is_charged_to_its_source(tmp_path: Path, localnet: str) -> None:
    rent = RentProxy(Chain({PROVIDER: ""}), localnet, MARKET, ME_PUB, chain="solana:localnet",
                     reads=ReadBudget(rate=0.001, burst=3))
    server, store = _serve(tmp_path, rent)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=10) as c:
            assert [_rpc(c, "getEpochInfo").status_code for _ in range(3)] == [200] * 3
            r = _rpc(c, "getEpochInfo")
            _refused(r, 429, "chain_read_budget")
            _refused(c.get(f"/v1/rent/workers/{PROVIDER}/health"), 429, "chain_read_budget")
    finally:
        server.shutdown()
        server.server_close()
        store.close()
        rent.close()


# ----------------------------------------------------------------------------- the worker relay


def test_status_is_relayed_with_the_wallets_headers_only(node) -> None:
    r = node["http"].get(f"/v1/rent/workers/{PROVIDER}/jobs/{JOB}/workload",
                         headers={**AUTH, "Cookie": "session=1", "X-Other": "x"})
    assert r.status_code == 200, r.text
    assert r.json()["ports"][0]["host_port"] == 31000
    assert r.headers["cache-control"] == "no-store"
    sent = node["workers"]["ok"].requests[-1]
    assert sent["method"] == "GET" and sent["path"] == f"/v1/jobs/{JOB}/workload"
    for k, v in AUTH.items():
        assert sent["headers"][k.lower()] == v
    assert "cookie" not in sent["headers"] and "x-other" not in sent["headers"]


def test_delivery_is_relayed_with_the_workers_status_and_retry_after(node) -> None:
    spec = b'{"image":"busybox","version":1}'
    r = node["http"].post(f"/v1/rent/workers/{PROVIDER}/jobs/{JOB}/workload", content=spec,
                          headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 404 and r.headers["retry-after"] == "2"
    assert r.json() == {"error": "job not seen yet"}
    sent = node["workers"]["ok"].requests[-1]
    assert sent["method"] == "POST" and sent["body"] == spec
    assert sent["headers"]["content-type"] == "application/json"


def test_a_delivery_the_worker_has_not_seen_yet_is_retried_within_the_deadline(
        tmp_path: Path) -> None:
    seen: list[int] = []

    def answer(method: str, path: str, headers: Any, body: bytes) -> Any:
        seen.append(1)
        if len(seen) < 3:  # the worker's chain poll has not picked the job up yet
            return 404, "application/json", b'{"error": "unknown job"}', {"Retry-After": "1"}
        return 200, "application/json", b'{"state": "pulling"}', {}

    w = Worker(answer)
    rent = RentProxy(Chain({PROVIDER: w.url}), "http://127.0.0.1:9", MARKET, ME_PUB,
                     chain="solana:localnet", worker_deadline=6.0)
    server, store = _serve(tmp_path, rent)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=10) as c:
            r = c.post(f"/v1/rent/workers/{PROVIDER}/jobs/{JOB}/workload", content=b"{}",
                       headers={**AUTH, "Content-Type": "application/json"})
            assert r.status_code == 200 and r.json() == {"state": "pulling"}
            assert len(seen) == 3
            seen.clear()  # a status read (GET) is never retried
            r = c.get(f"/v1/rent/workers/{PROVIDER}/jobs/{JOB}/workload", headers=AUTH)
            assert r.status_code == 404 and len(seen) == 1
    finally:
        server.shutdown()
        server.server_close()
        store.close()
        rent.close()
        w.close()


def test_logs_are_a_bounded_tail_never_followed(node) -> None:
    http = node["http"]
    r = http.get(f"/v1/rent/workers/{PROVIDER}/jobs/{JOB}/logs?tail=50", headers=AUTH)
    assert r.status_code == 200 and r.text == "line 1\nline 2\n"
    assert r.headers["content-type"].startswith("text/plain")
    assert node["workers"]["ok"].requests[-1]["path"] == f"/v1/jobs/{JOB}/logs?follow=0&tail=50"
    http.get(f"/v1/rent/workers/{PROVIDER}/jobs/{JOB}/logs", headers=AUTH)
    assert node["workers"]["ok"].requests[-1]["path"].endswith("tail=200")
    _refused(http.get(f"/v1/rent/workers/{PROVIDER}/jobs/{JOB}/logs?tail={LOGS_TAIL_MAX + 1}"),
             400, "bad_request")
    _refused(http.get(f"/v1/rent/workers/{PROVIDER}/jobs/{JOB}/logs?follow=1"), 400,
             "bad_request")


def test_a_provider_of_another_market_or_none_is_not_relayed(node) -> None:
    http = node["http"]
    before = len(node["workers"]["ok"].requests)
    message = _refused(http.get(f"/v1/rent/workers/{PROVIDER_ELSEWHERE}/jobs/{JOB}/workload",
                                headers=AUTH), 404, "provider_not_found")
    assert str(pk(MARKET)) in message
    _refused(http.get(f"/v1/rent/workers/{pk(bytes([99] * 32))}/jobs/{JOB}/workload"), 404,
             "provider_not_found")
    _refused(http.get(f"/v1/rent/workers/{PROVIDER_ELSEWHERE}/health"), 404, "provider_not_found")
    _refused(http.get(f"/v1/rent/workers/nope/jobs/{JOB}/workload"), 400, "bad_request")
    _refused(http.get(f"/v1/rent/workers/{PROVIDER}/jobs/nope/workload"), 400, "bad_request")
    _refused(http.get(f"/v1/rent/workers/{PROVIDER_NO_ENDPOINT}/jobs/{JOB}/workload"), 409,
             "no_worker_endpoint")
    _refused(http.get(f"/v1/rent/workers/{PROVIDER}/jobs/{JOB}/exec"), 405, "method_not_allowed")
    assert len(node["workers"]["ok"].requests) == before


def test_an_oversized_spec_is_refused_before_reading_it(node) -> None:
    r = node["http"].post(f"/v1/rent/workers/{PROVIDER}/jobs/{JOB}/workload",
                          content=b"x" * (WORKER_BODY_MAX + 1),
                          headers={**AUTH, "Content-Type": "application/json"})
    _refused(r, 413, "body_too_large")


def test_a_worker_that_hangs_answers_504_and_a_dead_one_502(node) -> None:
    http = node["http"]
    t0 = time.monotonic()
    r = http.get(f"/v1/rent/workers/{PROVIDER_SLOW}/jobs/{JOB}/workload", headers=AUTH)
    assert time.monotonic() - t0 < 2.5
    _refused(r, 504, "worker_timeout")
    _refused(http.get(f"/v1/rent/workers/{PROVIDER_DEAD}/jobs/{JOB}/workload", headers=AUTH),
             502, "worker_unreachable")


def test_health_probes_the_worker_now(node) -> None:
    http = node["http"]
    r = http.get(f"/v1/rent/workers/{PROVIDER}/health")
    assert r.status_code == 200 and r.json()["online"] is True and r.json()["error"] == ""
    assert node["workers"]["ok"].requests[-1]["path"] == "/v1/health"
    dead = http.get(f"/v1/rent/workers/{PROVIDER_DEAD}/health").json()
    assert dead["online"] is False and "no answer" in dead["error"]
    slow = http.get(f"/v1/rent/workers/{PROVIDER_SLOW}/health").json()
    assert slow["online"] is False


def test_private_worker_addresses_are_refused_off_localnet(tmp_path: Path,
                                                          workers: dict[str, Worker]) -> None:
    rent = RentProxy(Chain({PROVIDER: workers["ok"].url}), "http://127.0.0.1:9", MARKET, ME_PUB,
                     chain="solana:devnet")
    server, store = _serve(tmp_path, rent)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=10) as c:
            _refused(c.get(f"/v1/rent/workers/{PROVIDER}/jobs/{JOB}/workload", headers=AUTH),
                     403, "worker_address_refused")
            _refused(c.get(f"/v1/rent/workers/{PROVIDER}/health"), 403, "worker_address_refused")
        assert workers["ok"].requests == []
    finally:
        server.shutdown()
        server.server_close()
        store.close()
        rent.close()


def test_private_host() -> None:
    for host in ("http://127.0.0.1:1", "http://localhost:80", "http://10.1.2.3", "http://[::1]:8",
                 "http://169.254.169.254", "http://192.168.0.1:9", "http://0.0.0.0:1"):
        assert private_host(host), host
    for host in ("http://93.184.216.34:1", "https://worker.example.com", "http://8.8.8.8"):
        assert not private_host(host), host


# ----------------------------------------------------------------------------- the page


def test_the_rent_page_loads_its_own_script_under_the_csp(node) -> None:
    http = node["http"]
    r = http.get("/dashboard/rent")
    assert r.status_code == 200
    assert r.headers["content-security-policy"] == RENT_CONTENT_SECURITY_POLICY == (
        CONTENT_SECURITY_POLICY.replace("script-src 'self'", "script-src 'self' 'wasm-unsafe-eval'"))
    assert 'data-page="rent"' in r.text and "/dashboard/assets/rent.js" in r.text
    assert "/dashboard/assets/dashboard.js" not in r.text
    assert 'href="/dashboard/rent"' in http.get("/dashboard/offers").text  # in every page's nav
    js = http.get("/dashboard/assets/rent.js")
    assert js.status_code == 200 and js.headers["content-type"] == "text/javascript; charset=utf-8"
    assert js.content == load_asset("rent.js") and js.content.startswith(b"// Built by")
    for hook in ('data-action="connect"', 'data-role="wallets"', 'data-role="filters"',
                 'data-role="rent-form"', 'data-role="job"', 'data-role="receipt"',
                 'data-field="receipt-refunded"', 'data-action="stop"'):
        assert hook in r.text, hook
