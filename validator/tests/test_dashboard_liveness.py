"""The dashboard probes the providers' workers itself (``dashboard_liveness``): stub workers
(``gpu_market.processes.JsonServer``) that answer, are dead, or trickle; the offers page ranks
and hides the offline ones, the providers list filters on liveness, and the probes stay
bounded (one per worker per period whatever the request rate, a deadline per refresh)."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from gpu_market.httpfront import serve_in_thread
from gpu_market.processes import JsonServer
from gpum_validator.dashboard import Dashboard
from gpum_validator.dashboard_liveness import ProbeCache
from gpum_validator.intake import Intake
from gpum_validator.server import ValidatorHTTPServer
from gpum_validator.store_sqlite import SQLiteStore
from test_dashboard import PROVIDER2, DashChain, _job, _ok
from vtestkit import MARKET, ME_PUB, PROVIDER, T0, b58, cfg

JOB2 = bytes([51] * 32)


class Worker:
    """A stub worker's ``GET /v1/health``: ``{"ok": true}``, counted; ``stall`` holds each
    answer until released."""

    def __init__(self, stall: bool = False) -> None:
        self.hits = 0
        self.release = threading.Event()
        if not stall:
            self.release.set()
        self.server = JsonServer(lambda path, body: (404, {}), self._get)

    def _get(self, path: str) -> tuple[int, Any]:
        self.hits += 1
        self.release.wait(30)
        return (200, {"ok": True}) if path == "/v1/health" else (404, {"ok": False})

    def close(self) -> None:
        self.release.set()
        self.server.close()


def _dead_endpoint() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: connection refused
    return f"http://127.0.0.1:{port}"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def node(tmp_path: Path, chain):
    """A node whose dashboard probes: PROVIDER's worker answers, PROVIDER2's (cheaper: it
    ranks first when both are online) is whatever the test makes it."""
    store = SQLiteStore(tmp_path / "v.sqlite")
    dash_chain = DashChain()
    good = Worker()
    dash_chain.providers[PROVIDER] = replace(dash_chain.providers[PROVIDER],
                                             endpoint=good.server.url)
    # PROVIDER2's last settled window: what "last seen" says once its worker is gone.
    dash_chain.jobs[JOB2] = _job(JOB2, provider=dash_chain.providers[PROVIDER2].address,
                                 last_window_end=T0 + 900)
    mono = Clock()
    made: dict[str, Any] = {"chain": dash_chain, "good": good, "mono": mono, "store": store,
                            "workers": [good], "servers": [], "clients": []}

    def start(endpoint2: str, **probe_kw: Any) -> httpx.Client:
        dash_chain.providers[PROVIDER2] = replace(dash_chain.providers[PROVIDER2],
                                                  endpoint=endpoint2)
        probes = ProbeCache(monotonic=mono, **probe_kw)
        dashboard = Dashboard(dash_chain, store, MARKET, ME_PUB, ttl=3600, liveness=probes)
        server = ValidatorHTTPServer(("127.0.0.1", 0), Intake(cfg(), store, chain), store,
                                     lambda: True, dashboard=dashboard)
        serve_in_thread(server)
        made["servers"].append(server)
        made["probes"] = probes
        client = httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=30)
        made["clients"].append(client)
        return client

    made["start"] = start
    yield made
    for c in made["clients"]:
        c.close()
    for s in made["servers"]:
        s.shutdown()
        s.server_close()
    for w in made["workers"]:
        w.close()
    store.close()


def _settled(probes: ProbeCache, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while probes._running is not None and time.monotonic() < end:
        time.sleep(0.02)
    assert probes._running is None


def test_a_dead_worker_ranks_last_and_is_hidden_by_default(node) -> None:
    http = node["start"](_dead_endpoint(), wait=5.0)
    before = int(time.time())
    o = _ok(http.get("/v1/dashboard/offers"))
    # Only the live provider is offered, although the dead one is cheaper.
    assert (o["count"], o["offline"], o["all"]) == (1, 1, False)
    (live,) = o["offers"]
    assert (live["provider"], live["rank"], live["online"]) == (b58(PROVIDER), 1, True)
    assert live["last_seen"] == live["checked_at"] and live["last_seen"] >= before
    every = _ok(http.get("/v1/dashboard/offers?all=true"))
    assert [(x["provider"], x["rank"], x["online"]) for x in every["offers"]] == [
        (b58(PROVIDER), 1, True), (b58(PROVIDER2), 2, False)]
    assert every["offers"][1]["last_seen"] == T0 + 900  # its last settled window
    for bad in ("all=maybe", "show=all"):
        assert http.get(f"/v1/dashboard/offers?{bad}").status_code == 400
    pick = lambda q: [(r["provider"], r["online"]) for r in
                      _ok(http.get(f"/v1/dashboard/providers?{q}"))["providers"]]
    assert pick("online=true") == [(b58(PROVIDER), True)]
    assert pick("online=false") == [(b58(PROVIDER2), False)]
    assert pick("") == [(b58(PROVIDER), True), (b58(PROVIDER2), False)]  # offline last
    p = _ok(http.get(f"/v1/dashboard/providers/{b58(PROVIDER2)}"))
    assert (p["rank"], p["online"], p["last_seen"]) == (2, False, T0 + 900)


def test_a_worker_that_dies_is_last_seen_at_its_last_answer(node) -> None:
    second = Worker()
    node["workers"].append(second)
    http = node["start"](second.server.url, wait=5.0, period=30.0)
    first = _ok(http.get("/v1/dashboard/offers"))["offers"]
    assert [x["provider"] for x in first] == [b58(PROVIDER2), b58(PROVIDER)]  # both online
    seen = first[0]["last_seen"]
    second.close()
    node["mono"].t += 31  # the answers are stale: the next request refreshes them
    _ok(http.get("/v1/dashboard/offers"))
    _settled(node["probes"])
    o = _ok(http.get("/v1/dashboard/offers?all=true"))
    assert o["offers"][-1]["provider"] == b58(PROVIDER2) and o["offers"][-1]["online"] is False
    # Seen by its last probe, newer than its last settled window.
    assert o["offers"][-1]["last_seen"] == max(seen, T0 + 900)


def test_one_probe_per_worker_per_period_whatever_the_request_rate(node) -> None:
    second = Worker()
    node["workers"].append(second)
    http = node["start"](second.server.url, wait=5.0, period=30.0)
    good, probes = node["good"], node["probes"]
    for _ in range(10):
        _ok(http.get("/v1/dashboard/offers"))
        _ok(http.get("/v1/dashboard/providers"))
        _ok(http.get(f"/v1/dashboard/providers/{b58(PROVIDER)}"))
    _settled(probes)
    assert (good.hits, second.hits, probes.refreshes) == (1, 1, 1)
    node["mono"].t += 29
    for _ in range(5):
        _ok(http.get("/v1/dashboard/offers"))
    assert (good.hits, second.hits) == (1, 1)
    node["mono"].t += 2  # past the period: probed once more, in the background
    for _ in range(5):
        _ok(http.get("/v1/dashboard/offers"))
    _settled(probes)
    assert (good.hits, second.hits, probes.refreshes) == (2, 2, 2)


def test_a_trickling_worker_does_not_stall_the_page(node) -> None:
    slow = Worker(stall=True)
    node["workers"].append(slow)
    http = node["start"](slow.server.url, wait=0.3, deadline=1.0, total=1.0)
    t = time.monotonic()
    o = _ok(http.get("/v1/dashboard/offers"))
    assert time.monotonic() - t < 1.0  # waited for the probes at most `wait`
    rows = {x["provider"]: x["online"] for x in o["offers"]}
    assert rows[b58(PROVIDER2)] is None  # still being checked
    _settled(node["probes"])  # the refresh ends at its total deadline
    t = time.monotonic()
    o = _ok(http.get("/v1/dashboard/offers?all=true"))
    assert time.monotonic() - t < 1.0
    assert [(x["provider"], x["online"]) for x in o["offers"]] == [
        (b58(PROVIDER), True), (b58(PROVIDER2), False)]
    assert _ok(http.get("/v1/dashboard/offers"))["count"] == 1  # hidden by default
    assert slow.hits == 1


def test_a_refresh_never_runs_twice_at_once(node) -> None:
    slow = Worker(stall=True)
    node["workers"].append(slow)
    http = node["start"](slow.server.url, wait=0.0, deadline=2.0, total=2.0, period=0.0)
    for _ in range(20):  # every answer is stale at once (period 0): still one refresh
        _ok(http.get("/v1/dashboard/offers"))
    end = time.monotonic() + 5
    while slow.hits < 1 and time.monotonic() < end:
        time.sleep(0.02)
    for _ in range(5):
        _ok(http.get("/v1/dashboard/offers"))
    assert node["probes"].refreshes == 1 and slow.hits == 1
    slow.release.set()
    _settled(node["probes"])
