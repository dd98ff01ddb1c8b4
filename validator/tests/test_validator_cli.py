"""CLI: one-line errors for bad inputs; ``status`` reads the database."""

from __future__ import annotations

import json

from click.testing import CliRunner
from gpum_validator.cli import main
from gpum_validator.intake import Intake
from gpum_validator.store_sqlite import SQLiteStore
from solders.keypair import Keypair
from vtestkit import FakeChain, cfg, chain_of, signed_json


def run(*args):
    return CliRunner().invoke(main, list(args))


def keyfile(tmp_path, content):
    p = tmp_path / "k.json"
    p.write_text(content)
    return str(p)


BASE = ["run", "--url", "http://127.0.0.1:1", "--market", "11111111111111111111111111111111"]


def test_missing_keypair(tmp_path):
    r = run(*BASE, "--keypair", str(tmp_path / "nope.json"))
    assert r.exit_code == 2 and "file not found" in r.output and r.output.count("\n") == 1


def test_malformed_keypair(tmp_path):
    r = run(*BASE, "--keypair", keyfile(tmp_path, "[1,2,3]"))
    assert r.exit_code == 2 and "64 bytes" in r.output


def test_bad_address(tmp_path):
    kp = keyfile(tmp_path, json.dumps(list(bytes(Keypair()))))
    r = run("run", "--url", "http://x", "--market", "not-an-address", "--keypair", kp)
    assert r.exit_code == 2 and "--market 'not-an-address' is not a base58" in r.output


def test_non_loopback_listen_refused(tmp_path):
    kp = keyfile(tmp_path, json.dumps(list(bytes(Keypair()))))
    r = run(*BASE, "--keypair", kp, "--listen", "0.0.0.0:8787")
    assert r.exit_code == 2 and "--allow-remote" in r.output


def test_status_reads_db(tmp_path):
    db = tmp_path / "v.sqlite"
    store = SQLiteStore(db)
    Intake(cfg(), store, FakeChain(), clock=lambda: 1_700_003_600).submit(
        signed_json(chain_of(1)[0]))
    store.close()
    r = run("status", "--db", str(db), "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["proofs"] == {"accepted": 1} and s["pending_windows"] == 1


def test_status_missing_db(tmp_path):
    r = run("status", "--db", str(tmp_path / "none.sqlite"))
    assert r.exit_code == 2 and "no such database" in r.output


def test_status_shows_rewards(tmp_path):
    from gpum_validator.rewards import RewardsProbe
    from vtestkit import MARKET, ME_PUB

    db = tmp_path / "v.sqlite"
    store = SQLiteStore(db)
    chain = FakeChain()
    r = run("status", "--db", str(db), "--json")
    assert "not read yet" in json.loads(r.output)["rewards"]
    from dataclasses import replace
    chain.validators[ME_PUB] = replace(chain.validators[ME_PUB], rewards_earned=42,
                                       rewards_unclaimed=40)
    assert RewardsProbe(chain, MARKET, ME_PUB, store).refresh()["earned"] == 42
    store.close()
    s = json.loads(run("status", "--db", str(db), "--json").output)
    assert (s["rewards"]["earned"], s["rewards"]["unclaimed"], s["rewards"]["slashes"]) == \
        (42, 40, 0)
