"""The dashboard's JSON routes and pages on the real HTTP server (127.0.0.1, httpx), with the
store holding real proofs (stored through the intake) and a chain stand-in that returns the
SDK's own account views (``gpu_market.accounts``), so the SDK's offers and runway run on
them as they do against the chain."""

from __future__ import annotations

import re
import shutil
import threading
import time
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from gpu_market.accounts import (
    DEFAULT_MARKET_PARAMS,
    ClosedJobView,
    GpuSpec,
    JobTerms,
    JobView,
    MarketParams,
    MarketTotals,
    MarketView,
    ProviderView,
    Reputation,
    RetiredWorkerKey,
    Unbonding,
    ValidatorView,
)
from gpu_market.errors import RpcUnavailable
from gpu_market.httpfront import serve_in_thread
from gpu_market.proof import WORKLOAD_STATE_NAMES, WorkloadWindow
from gpum_validator.dashboard import (
    ASSETS,
    CONTENT_SECURITY_POLICY,
    MAX_WINDOWS,
    PAGES,
    ApiError,
    Dashboard,
    TTLCache,
    load_asset,
    parse_limit,
)
from gpum_validator.intake import Intake
from gpum_validator.server import ValidatorHTTPServer
from gpum_validator.store_sqlite import SQLiteStore
from solders.pubkey import Pubkey
from vtestkit import (
    JOB,
    MARKET,
    ME_PUB,
    PROVIDER,
    T0,
    WINDOW,
    FakeChain,
    b58,
    cfg,
    chain_of,
    make_proof,
    pk,
    signed_json,
)

SECRET_URL = "http://rpc-user:s3cret-api-key@rpc.example:8899"
"""The stand-in's RPC URL: an API key in it must never reach an answer."""
PAYMENT_MINT = pk(bytes([21] * 32))
STAKE_MINT = pk(bytes([22] * 32))
OWNER = pk(bytes([5] * 32))
USER = pk(bytes([3] * 32))
OTHER_MARKET = bytes([8] * 32)
PROVIDER2 = bytes([31] * 32)
PROVIDER_ELSEWHERE = bytes([32] * 32)
JOB_ELSEWHERE = bytes([33] * 32)
CLOSED_JOB = bytes([34] * 32)
NOW = T0 + 200 * WINDOW


def _market() -> MarketView:
    params = MarketParams(**DEFAULT_MARKET_PARAMS)
    return MarketView(
        authority=pk(bytes([1] * 32)), creator=pk(bytes([1] * 32)),
        pending_authority=Pubkey.default(), id=0, stake_mint=STAKE_MINT,
        payment_mint=PAYMENT_MINT, stake_vault=pk(bytes([23] * 32)),
        treasury=pk(bytes([24] * 32)), params=params, pending_params=params,
        params_effective_at=0, paused=False,
        totals=MarketTotals(staked=3_000_000, bonded=20_000, burned=1_500, fees=3_000, slashed=7,
                            jobs=4, rewards_unclaimed=250, rewards=300),
        bump=255, stake_vault_bump=254, fee_vault=pk(bytes([25] * 32)), fee_vault_bump=253,
        address=pk(MARKET))


def _provider(address: bytes, market: bytes = MARKET, **kw: Any) -> ProviderView:
    base = ProviderView(
        market=pk(market), owner=OWNER, worker_key=pk(bytes([6] * 32)), worker_key_expires_at=0,
        retired_keys=tuple(RetiredWorkerKey(Pubkey.default(), 0) for _ in range(4)),
        last_equivocation_slash_at=0,
        spec=GpuSpec(gpu_model="Simulated H100", gpu_count=4, vram_mib=81920, region="eu-west"),
        price_per_gpu_second=1_000, status="active", stake=2_000_000,
        unbonding=Unbonding(5_000, T0 + 86_400), gpus_in_use=2,
        reputation=Reputation(verified_seconds=7_200, windows_missed=1, jobs_completed=3,
                              jobs_failed=1, slashes=0),
        bump=255, endpoint="http://203.0.113.7:8080", address=pk(address))
    return replace(base, **kw)


def _job(address: bytes = JOB, market: bytes = MARKET, **kw: Any) -> JobView:
    terms = JobTerms(rate_per_second=2_000, fee_bps=500, burn_bps=5_000, window_seconds=WINDOW,
                     max_missed_windows=10, grace_seconds=720, max_skew_seconds=5, quorum=1,
                     downtime_slash_bps=100, equivocation_slash_bps=5_000,
                     reporter_reward_bps=1_000, temp_critical_c=95, ecc_uncorrected_max=0,
                     validator_reward_bps=1_000)
    base = JobView(
        market=pk(market), user=USER, provider=pk(PROVIDER), job_id=1, gpu_count=2, terms=terms,
        committee=[pk(ME_PUB)], committee_len=1, deposited=10_000_000, claimed_seconds=600,
        paid_seconds=540, paid_provider=1_026_000, paid_validators=5_400,
        paid_treasury=48_600, burned=0, refunded=0, status="running", created_at=T0 - 10,
        started_at=T0, ended_at=0, last_seq=10, last_receipt_hash=bytes(32),
        last_window_end=T0 + 600, bump=255, escrow_bump=254, address=pk(address))
    return replace(base, **kw)


class DashChain:
    """The reads the dashboard and the SDK's ``list_offers`` make, answered with the SDK's
    views; counts every read; ``down`` makes each one fail like the SDK does."""

    url = SECRET_URL

    def __init__(self) -> None:
        self.market = _market()
        self.providers = {PROVIDER: _provider(PROVIDER),
                          PROVIDER2: _provider(PROVIDER2, price_per_gpu_second=800, gpus_in_use=4,
                                               spec=GpuSpec("RTX 4090", 4, 24_576, "us-east")),
                          PROVIDER_ELSEWHERE: _provider(PROVIDER_ELSEWHERE, OTHER_MARKET)}
        self.jobs = {JOB: _job(), JOB_ELSEWHERE: _job(JOB_ELSEWHERE, OTHER_MARKET)}
        self.validator = ValidatorView(
            market=pk(MARKET), authority=pk(ME_PUB), bond=10_000,
            unbonding=Unbonding(0, 0), status="active", settlements=12, bump=255,
            endpoint="http://127.0.0.1:8787", rewards_earned=300, rewards_unclaimed=250,
            slashes=0, address=pk(bytes([26] * 32)))
        self.now = NOW
        self.down = False
        self.reads: dict[str, int] = {}
        self.closed: dict[bytes, int] = {}
        """Closed jobs' tombstones: job -> closed_at."""
        self.history: dict[bytes, list[tuple[str, list[tuple[str, dict[str, Any]]]]]] = {}
        """An address's transactions, newest first: (signature, its gpu_market events)."""
        self.rpc = SimpleNamespace(get_signatures_for_address=self._signatures)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    def _signatures(self, key: Pubkey, limit: int) -> Any:
        self._io("signatures")
        return SimpleNamespace(value=[SimpleNamespace(signature=sig, err=None, block_time=None)
                                      for sig, _ in self.history.get(bytes(key), [])[:limit]])

    def events(self, signature: str) -> list[tuple[str, dict[str, Any]]]:
        self._io("transaction")
        return next(ev for txs in self.history.values() for sig, ev in txs if sig == signature)

    def fetch_closed_job(self, job: Pubkey) -> ClosedJobView | None:
        self._io("closed_job")
        at = self.closed.get(bytes(job))
        return None if at is None else ClosedJobView(closed_at=at, address=job)

    def _io(self, what: str) -> None:
        self.reads[what] = self.reads.get(what, 0) + 1
        if self.down:
            raise RpcUnavailable(f"cannot reach the RPC endpoint {self.url} (refused); check "
                                 "--url and that the node is running")

    def fetch_market(self, market: Pubkey) -> MarketView | None:
        self._io("market")
        return self.market if market == self.market.address else None

    def fetch_job(self, job: Pubkey) -> JobView | None:
        self._io("job")
        return self.jobs.get(bytes(job))

    def fetch_provider(self, provider: Pubkey) -> ProviderView | None:
        self._io("provider")
        return self.providers.get(bytes(provider))

    def fetch_validator_by_authority(self, market: Pubkey, authority: Pubkey) -> Any:
        self._io("validator")
        return self.validator if (market, authority) == (pk(MARKET), pk(ME_PUB)) else None

    def chain_time(self) -> int:
        self._io("clock")
        return self.now

    def mint_decimals(self, mint: Pubkey) -> int:
        self._io("decimals")
        return {PAYMENT_MINT: 6, STAKE_MINT: 9}[mint]

    def list_validators(self, market: Pubkey, statuses: Any = None) -> list[ValidatorView]:
        self._io("validators")
        return [self.validator] if statuses is None or "active" in statuses else []

    def list_jobs(self, provider: Pubkey | None = None, market: Pubkey | None = None,
                  **_: Any) -> list[JobView]:
        self._io("jobs")
        return [j for j in self.jobs.values()
                if (provider is None or j.provider == provider)
                and (market is None or j.market == market)]

    def _program_accounts(self, kind: str, memcmp: dict[str, bytes]) -> list[Any]:
        self._io("program_accounts")
        assert kind == "Provider"
        return [p for p in self.providers.values() if bytes(p.market) == memcmp["market"]]


PROOFS = chain_of(130)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database holding job JOB's windows 1..130 (seq 2 has an equivocating second proof),
    a rejected window 131 and three settlement intents, all stored through the intake (built
    once; each test gets a copy)."""
    path = tmp_path_factory.mktemp("dashboard-db") / "v.sqlite"
    store = SQLiteStore(path)
    intake = Intake(cfg(), store, FakeChain(), clock=lambda: float(NOW))
    proofs = PROOFS
    assert intake.submit_batch({"proofs": [signed_json(p) for p in proofs[:64]]})[0] == 200
    assert intake.submit_batch({"proofs": [signed_json(p) for p in proofs[64:128]]})[0] == 200
    for p in proofs[128:]:
        assert intake.submit(signed_json(p))[1]["status"] == "accepted"
    status, body = intake.submit(signed_json(make_proof(2, billable=1, cumulative=61,
                                                        prev=proofs[1].prev_proof_hash)))
    assert status == 409, body
    status, body = intake.submit(signed_json(make_proof(131, prev=bytes(32))))
    assert status == 422, body
    for seq, outcome in ((40, "confirmed"), (80, "failed"), (120, "confirmed")):
        intent = store.add_intent(store.accepted_at(JOB, seq), seq - 39, float(NOW - 100))
        store.mark_intent(intent.id, outcome, float(NOW - 90), signature=f"5igSeq{seq}",
                          error=f"RpcUnavailable: cannot reach {SECRET_URL}")
    store.close()
    return path


@pytest.fixture
def world(tmp_path: Path, stored: Path, chain: FakeChain):
    """A server with the dashboard over a copy of ``stored``."""
    shutil.copyfile(stored, tmp_path / "v.sqlite")
    store = SQLiteStore(tmp_path / "v.sqlite")
    intake = Intake(cfg(), store, chain, clock=lambda: float(NOW))
    dash_chain = DashChain()
    # No probe: its workers' endpoints are not served (test_dashboard_liveness.py probes).
    dashboard = Dashboard(dash_chain, store, MARKET, ME_PUB, ttl=3600, probe=False)
    chain_up = [True]
    server = ValidatorHTTPServer(("127.0.0.1", 0), intake, store, lambda: chain_up[0],
                                 dashboard=dashboard)
    serve_in_thread(server)
    with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=10) as c:
        yield {"http": c, "chain": dash_chain, "store": store, "dashboard": dashboard,
               "chain_up": chain_up, "proofs": PROOFS, "path": tmp_path / "v.sqlite"}
    server.shutdown()
    server.server_close()
    store.close()


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.headers["cache-control"] == "no-store"
    return r.json()


def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == code and body["message"] and set(body) >= {"retry"}, body
    return body


# ----------------------------------------------------------------------------- windows


def test_windows_shape_is_exact_and_oldest_first(world) -> None:
    body = _ok(world["http"].get(f"/v1/jobs/{b58(JOB)}/windows?limit=3"))
    assert set(body) == {"job", "windows"} and body["job"] == b58(JOB)
    ws = body["windows"]
    assert [w["seq"] for w in ws] == [129, 130, 131]
    for w in ws:
        assert set(w) == {"seq", "window_start", "window_end", "billable_seconds",
                          "approved_seconds", "decision", "workload_state", "gpus"}
        assert w["workload_state"] in WORKLOAD_STATE_NAMES
        for g in w["gpus"]:
            assert set(g) == {"uuid", "util_gpu_avg_bp", "temp_max_c", "power_avg_mw",
                              "mem_used_max_mib"}
    first = ws[0]
    p = world["proofs"][128]
    assert first == {
        "seq": 129, "window_start": p.window_start, "window_end": p.window_end,
        "billable_seconds": WINDOW, "approved_seconds": WINDOW, "decision": "accepted",
        "workload_state": "none",
        "gpus": [{"uuid": g.uuid, "util_gpu_avg_bp": 9000, "temp_max_c": 70,
                  "power_avg_mw": None, "mem_used_max_mib": None} for g in p.gpus]}
    # A rejected window is shown, with nothing approved.
    assert ws[2]["decision"] == "rejected" and ws[2]["approved_seconds"] == 0


def test_windows_default_limit_and_bounds(world) -> None:
    http = world["http"]
    ws = _ok(http.get(f"/v1/jobs/{b58(JOB)}/windows"))["windows"]
    assert len(ws) == 120 and ws[-1]["seq"] == 131 and ws[0]["seq"] == 12
    assert [w["seq"] for w in ws] == sorted(w["seq"] for w in ws)
    everything = _ok(http.get(f"/v1/jobs/{b58(JOB)}/windows?limit={MAX_WINDOWS}"))["windows"]
    assert [w["seq"] for w in everything] == list(range(1, 132))


def test_windows_at_an_equivocated_seq_shows_the_accepted_proof(world) -> None:
    ws = _ok(world["http"].get(f"/v1/jobs/{b58(JOB)}/windows?limit=500"))["windows"]
    (two,) = [w for w in ws if w["seq"] == 2]
    assert two["decision"] == "accepted" and two["billable_seconds"] == WINDOW


def test_windows_show_the_workload_state(tmp_path: Path, chain: FakeChain) -> None:
    store = SQLiteStore(tmp_path / "w.sqlite")
    intake = Intake(cfg(), store, chain, clock=lambda: float(NOW))
    p = make_proof(1, workload=WorkloadWindow(state=2, job_processes=1))
    assert intake.submit(signed_json(p))[0] == 200
    status, body = Dashboard(DashChain(), store, MARKET, ME_PUB).windows(b58(JOB))
    assert status == 200 and body["windows"][0]["workload_state"] == "running"
    store.close()


@pytest.mark.parametrize("query", ["limit=0", "limit=501", "limit=-1", "limit=abc", "limit=",
                                   "limit=1&limit=2", "limt=5", "limit=5&x=1", "limit=1.5",
                                   "%ZZ"])
def test_windows_bad_query_is_400(world, query: str) -> None:
    body = _error(world["http"].get(f"/v1/jobs/{b58(JOB)}/windows?{query}"), 400, "bad_request")
    assert body["retry"] is False


def test_windows_bad_address_is_400_and_unknown_job_404(world) -> None:
    http = world["http"]
    _error(http.get("/v1/jobs/not-base58!/windows"), 400, "bad_request")
    _error(http.get(f"/v1/jobs/{b58(bytes([99] * 32))}/windows"), 404, "job_unknown")


def test_windows_need_no_chain_read(world) -> None:
    world["chain"].down = True
    _ok(world["http"].get(f"/v1/jobs/{b58(JOB)}/windows?limit=1"))
    assert world["chain"].reads == {}


def test_parse_limit() -> None:
    assert parse_limit("") == 120 and parse_limit("limit=500") == 500
    assert parse_limit("limit=7", default=3, maximum=7) == 7
    for q in ("limit=8", "a=b", "limit=1&limit=1"):
        with pytest.raises(ApiError):
            parse_limit(q, maximum=7)


# ----------------------------------------------------------------------------- market, offers


def test_market(world) -> None:
    m = _ok(world["http"].get("/v1/dashboard/market"))
    assert m["market"] == b58(MARKET) and m["read_at"] == NOW and m["paused"] is False
    assert m["decimals"] == {"payment": 6, "stake": 9}
    assert m["totals"] == {"staked": 3_000_000, "bonded": 20_000, "fees": 3_000,
                           "burned": 1_500, "slashed": 7, "jobs": 4, "rewards": 300,
                           "rewards_unclaimed": 250}
    assert m["params"] == DEFAULT_MARKET_PARAMS and m["params_change_at"] is None
    # Both providers of this market are Active: 8 GPUs, 2 of them free.
    assert (m["providers"], m["gpus_total"], m["gpus_free"]) == (2, 8, 2)
    assert m["validators_active"] == 1
    assert (m["payment_mint"], m["stake_mint"]) == (str(PAYMENT_MINT), str(STAKE_MINT))


def test_offers_best_rank_first_with_every_field(world) -> None:
    o = _ok(world["http"].get("/v1/dashboard/offers"))
    assert (o["count"], o["truncated"], o["decimals"]) == (2, False, {"payment": 6, "stake": 9})
    first, second = o["offers"]
    assert set(first) == {"provider", "owner", "gpu_model", "gpus_free", "gpus_total",
                          "vram_mib", "region", "price_per_gpu_second", "stake",
                          "verified_hours", "jobs_completed", "jobs_failed", "slashes",
                          "jailed", "score", "endpoint", "price_per_gpu_hour", "rank",
                          "online", "checked_at", "last_seen"}
    # The cheaper provider ranks first although it has no GPU free (full ones are listed).
    assert (first["provider"], first["rank"], first["gpus_free"]) == (b58(PROVIDER2), 1, 0)
    assert (second["provider"], second["rank"], second["gpus_free"]) == (b58(PROVIDER), 2, 2)
    assert second["price_per_gpu_hour"] == 3_600_000 and second["verified_hours"] == 2.0
    assert second["owner"] == str(OWNER) and second["region"] == "eu-west"
    assert 0 < second["score"] < 1 and second["jailed"] is False


def test_chain_reads_are_cached_and_shared(world) -> None:
    http, chain = world["http"], world["chain"]
    for _ in range(5):
        _ok(http.get("/v1/dashboard/market"))
        _ok(http.get("/v1/dashboard/offers"))
    # list_offers reads the market itself; the dashboard's own market read is one more.
    assert chain.reads["market"] == 2 and chain.reads["program_accounts"] == 1
    assert chain.reads["decimals"] == 2 and chain.reads["validators"] == 1


def test_chain_down_is_503_without_the_rpc_url(world) -> None:
    world["chain"].down = True
    for path in ("/v1/dashboard/market", "/v1/dashboard/offers", f"/v1/dashboard/jobs/{b58(JOB)}",
                 f"/v1/dashboard/providers/{b58(PROVIDER)}"):
        r = world["http"].get(path)
        body = _error(r, 503, "chain_unavailable")
        assert body["retry"] is True and r.headers["retry-after"] == str(body["retry_after"])
        assert "s3cret" not in r.text and "rpc.example" not in r.text


# ----------------------------------------------------------------------------- job


def test_job(world) -> None:
    j = _ok(world["http"].get(f"/v1/dashboard/jobs/{b58(JOB)}"))
    assert (j["job"], j["on_chain"], j["read_at"], j["in_committee"]) == (b58(JOB), True, NOW,
                                                                          True)
    c = j["chain"]
    assert c["status"] == "running" and c["provider"] == b58(PROVIDER) and c["user"] == str(USER)
    assert (c["paid_seconds"], c["claimed_seconds"], c["deposited"]) == (540, 600, 10_000_000)
    assert c["cost"] == 540 * 2_000 == c["paid_provider"] + c["paid_validators"] + \
        c["paid_treasury"] + c["burned"]
    assert c["escrow"] == 10_000_000 - 540 * 2_000
    assert c["committee"] == [b58(ME_PUB)] and c["quorum"] == 1 and c["workload"] is False
    assert set(j["runway"]) == {"rate_per_second", "spend_per_hour", "booked_escrow",
                                "unsettled_seconds", "available", "runway_seconds",
                                "settled_seconds", "running_seconds"}
    assert j["runway"]["rate_per_second"] == 2_000 and j["runway"]["runway_seconds"] is not None
    assert j["runway"]["booked_escrow"] == c["escrow"]
    assert j["node"] == {"last_seq": 130, "claimed_seconds": 130 * WINDOW,
                         "approved_total": 130 * WINDOW,
                         "last_window_end": world["proofs"][-1].window_end}
    # Settlements newest first, with their transactions and no error text.
    s = j["settlements"]
    assert [(x["seq"], x["status"], x["signature"]) for x in s] == [
        (120, "confirmed", "5igSeq120"), (80, "failed", "5igSeq80"), (40, "confirmed", "5igSeq40")]
    assert set(s[0]) == {"seq", "cumulative_seconds", "approved_seconds", "window_end", "status",
                         "signature", "attempts", "created_at", "updated_at"}
    assert s[0]["approved_seconds"] == 120 * WINDOW


def test_job_runway_is_none_unless_running(world) -> None:
    world["chain"].jobs[JOB] = _job(status="finishing", ended_at=T0 + 700)
    j = _ok(world["http"].get(f"/v1/dashboard/jobs/{b58(JOB)}"))
    assert j["chain"]["status"] == "finishing" and j["runway"]["runway_seconds"] is None
    assert j["chain"]["grace_ends_at"] == T0 + 700 + 720


def test_job_not_found_other_market_and_closed(world, chain: FakeChain) -> None:
    http = world["http"]
    _error(http.get(f"/v1/dashboard/jobs/{b58(bytes([99] * 32))}"), 404, "job_not_found")
    _error(http.get(f"/v1/dashboard/jobs/{b58(JOB_ELSEWHERE)}"), 404, "job_not_found")
    _error(http.get("/v1/dashboard/jobs/0OIl"), 400, "bad_request")
    # A closed job (no account) this node holds windows of: its history still shows.
    del world["chain"].jobs[JOB]
    world["dashboard"].cache = TTLCache(0)
    j = _ok(http.get(f"/v1/dashboard/jobs/{b58(JOB)}"))
    assert j["on_chain"] is False and j["chain"] is None and j["runway"] is None
    assert j["node"]["last_seq"] == 130 and len(j["settlements"]) == 3


CLOSE_SIG = "5closeTx"


def _closed_world(world: dict[str, Any], *, with_event: bool = True) -> None:
    """JOB closed: no account, a tombstone, and (``with_event``) its close transaction among
    the address's newest, after two settlements."""
    chain = world["chain"]
    del chain.jobs[JOB]
    chain.closed[JOB] = T0 + 900
    closed = {"job": pk(JOB), "user": USER, "refunded": 8_920_000, "surplus_returned": 5,
              "deposited": 10_000_000, "paid_provider": 1_026_000, "paid_treasury": 48_600,
              "burned": 0}
    txs = [("5settle2", [("Settled", {"job": pk(JOB)})]),
           ("5settle1", [("Settled", {"job": pk(JOB)})])]
    chain.history[JOB] = ([(CLOSE_SIG, [("JobClosed", closed)])] if with_event else []) + txs
    world["dashboard"].cache = TTLCache(3600)


def test_a_closed_job_keeps_its_receipt(world) -> None:
    _closed_world(world)
    j = _ok(world["http"].get(f"/v1/dashboard/jobs/{b58(JOB)}"))
    assert j["on_chain"] is False and j["chain"] is None
    r = j["closed"]
    # deposited = provider + treasury + validators + burned + refunded
    assert r == {"closed_at": T0 + 900, "signature": CLOSE_SIG, "deposited": 10_000_000,
                 "paid_provider": 1_026_000, "paid_treasury": 48_600, "paid_validators": 5_400,
                 "burned": 0, "refunded": 8_920_000, "surplus_returned": 5,
                 "fees": 48_600 + 5_400, "paid": 1_026_000 + 48_600 + 5_400,
                 "user": str(USER)}
    # Found once, kept: a closed job's receipt never changes.
    reads = dict(world["chain"].reads)
    world["dashboard"].cache.ttl = 0
    assert _ok(world["http"].get(f"/v1/dashboard/jobs/{b58(JOB)}"))["closed"] == r
    assert world["chain"].reads["signatures"] == reads["signatures"] == 1


def test_a_closed_job_whose_close_is_out_of_history_says_when_only(world) -> None:
    _closed_world(world, with_event=False)
    r = _ok(world["http"].get(f"/v1/dashboard/jobs/{b58(JOB)}"))["closed"]
    assert r["closed_at"] == T0 + 900 and r["signature"] is None and r["paid"] is None
    # Looked for again later (not cached as missing).
    _ok(world["http"].get(f"/v1/dashboard/jobs/{b58(JOB)}"))
    assert world["chain"].reads["signatures"] == 2


def test_a_closed_job_no_node_knows_still_has_its_receipt(world) -> None:
    other = bytes([77] * 32)
    chain = world["chain"]
    chain.closed[other] = T0 + 5
    chain.history[other] = [("5c", [("JobClosed", {
        "job": pk(other), "user": USER, "refunded": 0, "surplus_returned": 0,
        "deposited": 100, "paid_provider": 0, "paid_treasury": 0, "burned": 0})]),
        ("5x", [("JobCancelled", {"job": pk(other), "refunded": 100, "surplus_returned": 0})])]
    j = _ok(world["http"].get(f"/v1/dashboard/jobs/{b58(other)}"))
    # A cancelled job: everything came back, by the cancel; nothing went to validators.
    assert j["node"] is None and j["closed"]["refunded"] == 100
    assert j["closed"]["paid_validators"] == 0 and j["closed"]["paid"] == 0


def test_an_unknown_job_says_so_in_words(world) -> None:
    key = b58(bytes([99] * 32))
    body = _error(world["http"].get(f"/v1/dashboard/jobs/{key}"), 404, "job_not_found")
    assert body["message"] == f"no job at {key} on this market"


def test_the_job_shows_its_containers_state_from_the_newest_proof(world) -> None:
    j = _ok(world["http"].get(f"/v1/dashboard/jobs/{b58(JOB)}"))
    newest = world["proofs"][129]  # 131 was rejected
    assert j["container"] == {"state": "none", "window_end": newest.window_end, "seq": 130,
                              "source": "window proof"}


def test_jobs_list_and_its_filters(world) -> None:
    chain = world["chain"]
    other_job = bytes([41] * 32)
    wallet = pk(bytes([42] * 32))
    chain.jobs[other_job] = _job(other_job, user=wallet, provider=pk(PROVIDER2),
                                 status="finishing", created_at=T0 + 50, gpu_count=1)
    http = world["http"]
    body = _ok(http.get("/v1/dashboard/jobs"))
    assert [r["job"] for r in body["jobs"]] == [b58(other_job), b58(JOB)]  # newest first
    assert (body["count"], body["total"], body["truncated"]) == (2, 2, False)
    row = body["jobs"][1]
    assert row == {"job": b58(JOB), "status": "running", "provider": b58(PROVIDER),
                   "user": str(USER), "gpu_count": 2, "spent": 540 * 2_000,
                   "escrow": 10_000_000 - 540 * 2_000, "deposited": 10_000_000,
                   "paid_seconds": 540, "created_at": T0 - 10}
    pick = lambda q: [r["job"] for r in _ok(http.get(f"/v1/dashboard/jobs?{q}"))["jobs"]]
    assert pick("state=running") == [b58(JOB)]
    assert pick("state=finishing") == [b58(other_job)]
    assert pick(f"provider={b58(PROVIDER2)}") == [b58(other_job)]
    assert pick(f"user={USER}") == [b58(JOB)]
    assert pick(f"user={USER}&state=finishing") == []
    assert pick("state=&provider=&user=") == [b58(other_job), b58(JOB)]  # blank: no filter
    for q in ("state=lost", "provider=xyz", "user=0OIl", "colour=red", "state=a&state=b"):
        _error(http.get(f"/v1/dashboard/jobs?{q}"), 400, "bad_request")


def test_providers_list_and_its_filters(world) -> None:
    chain = world["chain"]
    jailed = bytes([43] * 32)
    chain.providers[jailed] = _provider(jailed, status="jailed", jailed_until=NOW + 600,
                                        spec=GpuSpec("H100 SXM", 8, 81_920, "us-west"))
    http = world["http"]
    body = _ok(http.get("/v1/dashboard/providers"))
    rows = body["providers"]
    assert (body["count"], body["total"]) == (3, 3)  # the other market's is not listed
    assert rows[-1]["provider"] == b58(jailed) and rows[-1]["rentable"] is False
    assert {r["provider"] for r in rows[:2]} == {b58(PROVIDER), b58(PROVIDER2)}
    assert all(r["rentable"] and r["online"] is None for r in rows[:2])  # never probed here
    assert body["models"] == ["H100 SXM", "RTX 4090", "Simulated H100"]
    assert body["regions"] == ["eu-west", "us-east", "us-west"]
    r = next(x for x in rows if x["provider"] == b58(PROVIDER))
    assert (r["price_per_gpu_hour"], r["gpus_free"], r["gpus_total"]) == (3_600_000, 2, 4)
    pick = lambda q: sorted(x["provider"] for x in
                            _ok(http.get(f"/v1/dashboard/providers?{q}"))["providers"])
    assert pick("model=h100") == sorted([b58(PROVIDER), b58(jailed)])
    assert pick("region=US") == sorted([b58(PROVIDER2), b58(jailed)])
    assert pick("status=jailed") == [b58(jailed)]
    assert pick("model=h100&region=eu") == [b58(PROVIDER)]
    assert pick("online=true") == [] and pick("online=false") == []  # unknown matches neither
    for q in ("status=gone", "online=maybe", "gpu=h100"):
        _error(http.get(f"/v1/dashboard/providers?{q}"), 400, "bad_request")


# ----------------------------------------------------------------------------- provider


def test_provider(world) -> None:
    p = _ok(world["http"].get(f"/v1/dashboard/providers/{b58(PROVIDER)}"))
    assert (p["provider"], p["status"], p["owner"]) == (b58(PROVIDER), "active", str(OWNER))
    assert (p["stake"], p["unbonding"]) == (2_000_000, {"amount": 5_000,
                                                        "release_at": T0 + 86_400})
    assert (p["price_per_gpu_second"], p["price_per_gpu_hour"]) == (1_000, 3_600_000)
    assert (p["gpus_total"], p["gpus_in_use"], p["gpus_free"]) == (4, 2, 2)
    assert p["reputation"] == {"verified_seconds": 7_200, "windows_missed": 1,
                               "jobs_completed": 3, "jobs_failed": 1, "slashes": 0}
    assert (p["rank"], p["offers_count"]) == (2, 2) and 0 < p["score"] < 1
    assert p["gpu_model"] == "Simulated H100" and p["endpoint"] == "http://203.0.113.7:8080"
    # Its jobs on chain in this market (not the one of the other market).
    assert p["jobs_listed"] == 1 and p["paid_provider_listed"] == 1_026_000
    assert p["jobs"] == [{"job": b58(JOB), "status": "running", "gpu_count": 2,
                          "deposited": 10_000_000, "paid_seconds": 540,
                          "paid_provider": 1_026_000, "created_at": T0 - 10}]


def test_provider_not_found_and_other_market(world) -> None:
    http = world["http"]
    _error(http.get(f"/v1/dashboard/providers/{b58(bytes([98] * 32))}"), 404,
           "provider_not_found")
    _error(http.get(f"/v1/dashboard/providers/{b58(PROVIDER_ELSEWHERE)}"), 404,
           "provider_not_found")
    _error(http.get("/v1/dashboard/providers/xyz"), 400, "bad_request")


# ----------------------------------------------------------------------------- validator


def test_validator(world) -> None:
    v = _ok(world["http"].get("/v1/dashboard/validator"))
    assert (v["ok"], v["chain_ok"], v["db_ok"]) == (True, True, True)
    assert v["authority"] == b58(ME_PUB) and v["market"] == b58(MARKET)
    assert v["proofs"] == {"accepted": 130, "rejected": 2} and v["jobs"] == 1
    assert v["intents"] == {"intended": 0, "sent": 0, "confirmed": 2, "failed": 1}
    assert (v["settled_here"], v["settled_by_others"]) == (2, 0)
    assert v["open_intents"] == 0 and v["pending_windows"] == 130 - 120
    assert v["last_settlement"]["signature"] == "5igSeq120"
    assert v["last_settlement"]["job"] == b58(JOB)
    assert [s["seq"] for s in v["recent_settlements"]] == [120, 80, 40]
    assert v["account"]["rewards_earned"] == 300 and v["account"]["settlements"] == 12
    assert v["account"]["status"] == "active" and v["decimals"] == {"payment": 6, "stake": 9}
    assert v["equivocations"] == 1


def test_validator_counts_receipts_as_the_chain_does(world) -> None:
    """The account's ``settlements`` counts receipts landed in this node's transactions; a
    receipt another member settled first is confirmed here without one and is counted apart."""
    store = world["store"]
    intent = store.add_intent(store.accepted_at(JOB, 125), 121, float(NOW - 50))
    store.mark_intent(intent.id, "confirmed", float(NOW - 40),
                      error="already settled on chain (last_seq=125)")
    v = _ok(world["http"].get("/v1/dashboard/validator"))
    assert v["intents"]["confirmed"] == 3
    assert (v["settled_here"], v["settled_by_others"]) == (2, 1)


def test_validator_page_data_while_the_chain_is_down(world) -> None:
    world["chain"].down = True
    world["chain_up"][0] = False
    v = _ok(world["http"].get("/v1/dashboard/validator"))
    assert (v["ok"], v["chain_ok"], v["db_ok"]) == (False, False, True)
    assert v["account"] is None and v["decimals"] is None
    assert v["proofs"]["accepted"] == 130


def test_no_answer_carries_a_secret(world) -> None:
    """No RPC URL (API key), database path, error text or key material in any answer."""
    http = world["http"]
    paths = ["/v1/dashboard/market", "/v1/dashboard/offers", "/v1/dashboard/validator",
             f"/v1/dashboard/jobs/{b58(JOB)}", f"/v1/dashboard/providers/{b58(PROVIDER)}",
             f"/v1/jobs/{b58(JOB)}/windows?limit=500"]
    texts = [http.get(p).text for p in paths]
    world["chain"].down = True
    world["dashboard"].cache = TTLCache(0)
    texts += [http.get(p).text for p in paths]
    for text in texts:
        for secret in ("s3cret", "rpc.example", str(world["path"]), "RpcUnavailable",
                       "last_error", '"attestations"'):
            assert secret not in text, (secret, text[:300])


def test_bugs_answer_500_without_detail(world) -> None:
    world["chain"].market = replace(_market(), totals=None)  # a view the code cannot read
    r = world["http"].get("/v1/dashboard/market")
    _error(r, 500, "internal_error")
    assert "NoneType" not in r.text


# ----------------------------------------------------------------------------- pages


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.inline_handlers: list[str] = []
        self.styles = 0
        self.fields: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for k, v in attrs:
            if k in ("src", "href", "action") and v is not None:
                self.refs.append(v)
            if k.startswith("on"):
                self.inline_handlers.append(k)
            if k == "style":
                self.styles += 1
            if k == "data-field" and v:
                self.fields.append(v)
        if tag == "style":
            self.styles += 1


@pytest.mark.parametrize("path, page", [
    ("/dashboard/", "market"), ("/dashboard/offers", "offers"),
    (f"/dashboard/job/{b58(JOB)}", "job"), (f"/dashboard/provider/{b58(PROVIDER)}", "provider"),
    ("/dashboard/validator", "validator"), ("/dashboard/jobs", "jobs"),
    ("/dashboard/providers", "providers")])
def test_pages_load_only_the_nodes_own_files(world, path: str, page: str) -> None:
    r = world["http"].get(path)
    assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert r.headers["x-content-type-options"] == "nosniff"
    assert f'data-page="{page}"' in r.text
    refs = _Refs()
    refs.feed(r.text)
    assert refs.refs and all(ref.startswith("/") and not ref.startswith("//")
                             for ref in refs.refs), refs.refs
    assert not refs.inline_handlers and refs.styles == 0  # the CSP would block them
    assert refs.fields  # figures are tagged for scripts and tests
    for ref in refs.refs:
        assert world["http"].get(ref).status_code == 200, ref


def test_assets_are_served_with_their_types(world) -> None:
    http = world["http"]
    for name, ctype in ASSETS.items():
        r = http.get(f"/dashboard/assets/{name}")
        assert r.status_code == 200 and r.headers["content-type"] == ctype
        assert r.content == load_asset(name)
    js = load_asset("dashboard.js").decode()
    # Same-origin fetches only, and nothing parsed as HTML.
    assert re.findall(r"fetch\(([^,)]*)", js) == ["url"]
    assert "innerHTML" not in js and "eval(" not in js and "document.write" not in js
    css = load_asset("dashboard.css").decode()
    assert "url(" not in css and "@import" not in css
    for page, name in PAGES.items():
        html = load_asset(name).decode()
        assert f'data-page="{page}"' in html and html.startswith("<!doctype html>")
        assert "__" not in html and html.count("<main>") == html.count("</main>") == 1
    _error(http.get("/dashboard/assets/layout.html"), 404, "not_found")  # the frame alone
    _error(http.get("/dashboard/assets/../dashboard.py"), 404, "not_found")
    _error(http.get("/dashboard/assets/missing.js"), 404, "not_found")


def test_page_routes_refuse_bad_addresses_and_redirect(world) -> None:
    http = world["http"]
    for path, shown in (("/dashboard/job/nope", "not an address: nope"),
                        ("/dashboard/provider/", "not an address: "),
                        ("/dashboard/job/%3Cb%3Ex", "not an address: &lt;b&gt;x")):
        r = http.get(path)  # a readable page, not JSON; the input escaped
        assert r.status_code == 400 and r.headers["content-type"] == "text/html; charset=utf-8"
        assert r.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert 'data-page="error"' in r.text and shown in r.text, r.text
        assert "<b>" not in r.text
    _error(http.get("/v1/dashboard/jobs/nope"), 400, "bad_request")  # the API keeps its codes
    _error(http.get("/dashboard/unknown"), 404, "not_found")
    r = http.get("/dashboard")
    assert r.status_code == 308 and r.headers["location"] == "/dashboard/"


def test_without_a_dashboard_only_the_windows_route_is_served(tmp_path: Path,
                                                              chain: FakeChain) -> None:
    store = SQLiteStore(tmp_path / "n.sqlite")
    intake = Intake(cfg(), store, chain, clock=lambda: float(NOW))
    assert intake.submit(signed_json(chain_of(1)[0]))[0] == 200
    server = ValidatorHTTPServer(("127.0.0.1", 0), intake, store, lambda: True)
    serve_in_thread(server)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=10) as c:
            assert len(_ok(c.get(f"/v1/jobs/{b58(JOB)}/windows"))["windows"]) == 1
            for path in ("/v1/dashboard/market", "/dashboard/", "/dashboard/assets/dashboard.js"):
                _error(c.get(path), 404, "not_found")
    finally:
        server.shutdown()
        server.server_close()
        store.close()


# ----------------------------------------------------------------------------- cache, store


def test_ttl_cache_single_flight_expiry_errors_and_bound() -> None:
    now = [0.0]
    cache = TTLCache(ttl=5, max_entries=3, clock=lambda: now[0])
    calls: list[str] = []
    gate = threading.Event()

    def slow() -> str:
        calls.append("slow")
        gate.wait(5)
        return "v"

    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("k", slow)))
               for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join(5)
    assert results == ["v"] * 8 and calls == ["slow"]
    now[0] = 4.9
    assert cache.get("k", lambda: "new") == "v"
    now[0] = 5.0
    assert cache.get("k", lambda: "new") == "new"

    def boom() -> str:
        raise RuntimeError("down")

    with pytest.raises(RuntimeError):
        cache.get("e", boom)
    assert cache.get("e", lambda: "healed") == "healed"  # errors are not cached
    for k in range(10):
        cache.get(("n", k), lambda k=k: k)
    assert len(cache) == 3


def test_store_recent_windows_and_intents_are_bounded(world) -> None:
    store: SQLiteStore = world["store"]
    assert [p.seq for p in store.recent_windows(JOB, 4)] == [128, 129, 130, 131]
    assert store.recent_windows(bytes(32), 4) == []
    assert [i.seq_to for i in store.recent_intents(JOB, 2)] == [120, 80]
    assert [i.seq_to for i in store.recent_intents(None, 5)] == [120, 80, 40]
    with pytest.raises(ValueError):
        store.recent_windows(JOB, 0)
    plan = store._q("EXPLAIN QUERY PLAN SELECT id FROM intents WHERE job=? ORDER BY id DESC "
                    "LIMIT 5", (JOB,))
    assert "intents_by_job" in " ".join(str(r) for r in plan)


def test_chain_reads_are_charged_to_the_asking_source(tmp_path: Path, stored: Path,
                                                       chain: FakeChain) -> None:
    """One source naming fresh job addresses spends its own read budget, not the node's RPC
    quota: past the budget the answer is 429 and nothing more is read."""
    import os

    from gpum_validator.chain import ReadBudget

    shutil.copyfile(stored, tmp_path / "v.sqlite")
    store = SQLiteStore(tmp_path / "v.sqlite")
    intake = Intake(cfg(), store, chain, clock=lambda: float(NOW))
    dash_chain = DashChain()
    budget = ReadBudget(rate=0.001, burst=5)
    server = ValidatorHTTPServer(("127.0.0.1", 0), intake, store, lambda: True,
                                 dashboard=Dashboard(dash_chain, store, MARKET, ME_PUB,
                                                     reads=budget))
    serve_in_thread(server)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}",
                          timeout=10) as c:
            codes = [c.get(f"/v1/dashboard/jobs/{b58(os.urandom(32))}").status_code
                     for _ in range(40)]
        # An unknown job costs two reads: its account, then a closed job's tombstone.
        assert codes[:2] == [404] * 2 and set(codes[2:]) == {429}, codes
        assert dash_chain.reads["job"] == 3 and dash_chain.reads["closed_job"] == 2
    finally:
        server.shutdown()
        server.server_close()
        store.close()
