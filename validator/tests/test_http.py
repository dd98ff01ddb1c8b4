"""The real HTTP server on 127.0.0.1 with httpx (intake backed by SQLite and FakeChain)."""

from __future__ import annotations

import httpx
import pytest
from gpu_market.httpfront import serve_in_thread
from gpum_validator.errors import ConfigError
from gpum_validator.intake import Intake
from gpum_validator.server import ValidatorHTTPServer
from gpum_validator.store_sqlite import SQLiteStore
from gpum_validator.transport import parse_listen
from vtestkit import JOB, b58, cfg, chain_of, make_proof, signed_json


@pytest.fixture
def http(tmp_path, chain, clock):
    store = SQLiteStore(tmp_path / "v.sqlite")
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    server = ValidatorHTTPServer(("127.0.0.1", 0), intake, store, lambda: not chain.down,
                                 max_body=64 * 1024)
    serve_in_thread(server)
    with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=10) as c:
        yield c
    server.shutdown()
    server.server_close()
    store.close()


def test_single_then_duplicate(http):
    d = signed_json(chain_of(1)[0])
    r = http.post("/v1/proofs", json=d)
    assert r.status_code == 200 and r.json() == {"status": "accepted", "job": b58(JOB), "seq": 1,
                                                 "approved_seconds": 60, "approved_total": 60}
    r = http.post("/v1/proofs", json=d)
    assert r.status_code == 200 and r.json()["status"] == "duplicate"


def test_batch_in_order_with_per_item_errors(http):
    ps = chain_of(3)
    bad = signed_json(make_proof(9, market=bytes([8] * 32)))
    r = http.post("/v1/proofs/batch", json={"proofs": [signed_json(p) for p in ps] + [bad]})
    assert r.status_code == 200
    res = r.json()["results"]
    assert [x.get("status") for x in res[:3]] == ["accepted"] * 3
    assert res[3]["error"] == "wrong_market" and res[3]["message"]


def test_equivocation_is_409(http):
    http.post("/v1/proofs", json=signed_json(chain_of(1)[0]))
    r = http.post("/v1/proofs", json=signed_json(make_proof(1, billable=1, cumulative=1)))
    assert r.status_code == 409 and r.json()["error"] == "equivocation"


def test_oversize_is_413(http):
    r = http.post("/v1/proofs", content=b"{" + b" " * (64 * 1024) + b"}",
                  headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"] == "body_too_large"


def test_malformed_json_is_400(http):
    r = http.post("/v1/proofs", content=b"{not json",
                  headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "bad_json"


@pytest.mark.parametrize("mutate, fragment", [
    (lambda d: d.update(extra=1), "unknown field"),
    (lambda d: d.pop("worker_key"), "missing field"),
    (lambda d: d.update(proof="***"), "base64"),
    (lambda d: d.update(proof_signature="AAAA"), "64 bytes"),
    (lambda d: d.update(worker_key="0OIl"), "base58"),
])
def test_schema_errors_are_400_with_clear_message(http, mutate, fragment):
    d = signed_json(chain_of(1)[0])
    mutate(d)
    r = http.post("/v1/proofs", json=d)
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    assert fragment in r.json()["message"]


def test_batch_shape_errors(http):
    assert http.post("/v1/proofs/batch", json={"proofs": []}).status_code == 400
    assert http.post("/v1/proofs/batch", json={"proofs": [{}] * 65}).status_code == 400
    assert http.post("/v1/proofs/batch", json=[1]).status_code == 400


def test_verification_rejection_is_422(http):
    r = http.post("/v1/proofs", json=signed_json(make_proof(1, cumulative=61)))
    assert r.status_code == 422 and r.json()["error"] == "cumulative_mismatch"


def test_chain_down_is_503(http, chain):
    chain.down = True
    r = http.post("/v1/proofs", json=signed_json(chain_of(1)[0]))
    assert r.status_code == 503 and r.json()["error"] == "chain_unavailable"
    h = http.get("/health")
    assert h.status_code == 503 and h.json()["chain_ok"] is False


def test_health_and_metrics(http):
    http.post("/v1/proofs", json=signed_json(chain_of(1)[0]))
    http.post("/v1/proofs", json=signed_json(make_proof(2)))  # prev hash is not seq 1
    h = http.get("/health")
    assert h.status_code == 200
    assert h.json() | {"last_settlement_at": None} == {
        "ok": True, "db_ok": True, "db_writable": True, "chain_ok": True, "reason": None,
        "last_settlement_at": None, "pending_windows": 1, "open_intents": 0}
    m = http.get("/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    text = m.text
    assert 'gpum_validator_proofs_total{result="accepted",reason=""} 1' in text
    assert 'gpum_validator_proofs_total{result="rejected",reason="prev_hash_mismatch"} 1' in text
    assert 'gpum_validator_settlements_total{status="confirmed"} 0' in text
    assert "gpum_validator_pending_windows 1" in text
    # Every outcome a downtime pass can count is exported, also the ones that report nobody.
    for outcome in ("not_observed", "proof_elsewhere", "not_active"):
        assert f'gpum_validator_downtime_reports_total{{outcome="{outcome}"}} 0' in text


def test_unknown_route_and_media_type(http):
    assert http.get("/nope").status_code == 404
    assert http.post("/v1/nope", json={}).status_code == 404
    r = http.post("/v1/proofs", content=b"x", headers={"Content-Type": "text/plain"})
    assert r.status_code == 415


def test_listen_refuses_non_loopback_without_flag():
    assert parse_listen("127.0.0.1:8787") == ("127.0.0.1", 8787)
    assert parse_listen("[::1]:9") == ("::1", 9)
    with pytest.raises(ConfigError, match="--allow-remote"):
        parse_listen("0.0.0.0:8787")
    assert parse_listen("0.0.0.0:8787", allow_remote=True) == ("0.0.0.0", 8787)
    with pytest.raises(ConfigError, match="HOST:PORT"):
        parse_listen("8787")
