"""``gpum-validator run``'s log against the local chain: a line per event by default, none per
HTTP request of its own chain client; ``-vv`` adds those. And ``status`` shows rewards in tokens
and times as dates."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpu_market import pda, tokens
from gpu_market.client import GpuMarketClient
from gpu_market.processes import (
    Processes,
    free_port,
    start_localnet,
    tool,
    wait_http,
    write_keypair,
)
from gpum_validator.cli import main
from gpum_validator.store_sqlite import SQLiteStore
from solders.keypair import Keypair
from solders.pubkey import Pubkey

REQUEST_LINE = "HTTP Request:"


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Pubkey, Path]]:
    """A local chain with one market whose validator (``validator.json``) is registered."""
    workdir = tmp_path_factory.mktemp("quiet-logs")
    procs = Processes(workdir)
    client = None
    try:
        url = start_localnet(procs).url
        admin, validator = Keypair(), Keypair()
        client = GpuMarketClient(url, payer=admin)
        for kp in (admin, validator):
            client.airdrop(kp.pubkey(), 10**10)
        stake_mint = tokens.create_mint(client, admin, 6)
        payment_mint = tokens.create_mint(client, admin, 6)
        treasury = tokens.create_ata(client, admin, admin.pubkey(), payment_mint)
        client.initialize_market(admin, 0, stake_mint, payment_mint, treasury, {})
        market = pda.market_pda(admin.pubkey(), 0)
        bond = tokens.create_ata(client, admin, validator.pubkey(), stake_mint)
        tokens.mint_to(client, stake_mint, bond, admin, 1_000_000)
        client.register_validator(validator, market, 1_000_000, "http://127.0.0.1:1")
        write_keypair(workdir / "validator.json", validator)
        yield url, market, workdir
    finally:
        if client is not None:
            client.close()
        procs.stop_all()


def _run_node(url: str, market: Pubkey, workdir: Path, name: str, *flags: str) -> list[str]:
    """The log lines of ``gpum-validator run`` serving for about 7 s (settle passes every
    second, the dashboard's and /health's chain reads)."""
    port = free_port()
    procs = Processes(workdir)
    try:
        procs.start(name, [tool("gpum-validator"), "run", "--url", url, "--keypair",
                           str(workdir / "validator.json"), "--market", str(market),
                           "--listen", f"127.0.0.1:{port}", "--db", str(workdir / f"{name}.db"),
                           "--settle-interval", "1s", *flags])
        wait_http(f"http://127.0.0.1:{port}/health", timeout=60)
        for _ in range(5):
            wait_http(f"http://127.0.0.1:{port}/health", timeout=10)
            time.sleep(1)
        procs.check_alive()
    finally:
        procs.stop_all()
    return (workdir / f"{name}.log").read_text().splitlines()


@pytest.mark.e2e
def test_quiet_by_default_requests_with_vv(chain: tuple[str, Pubkey, Path]) -> None:
    url, market, workdir = chain
    quiet = _run_node(url, market, workdir, "quiet")
    assert not [line for line in quiet if REQUEST_LINE in line], "\n".join(quiet)
    assert any("listening on http://" in line for line in quiet), "\n".join(quiet)
    assert len(quiet) <= 8, "\n".join(quiet)  # start, dashboard, subscriptions, warnings, stop

    loud = _run_node(url, market, workdir, "loud", "-vv")
    requests = [line for line in loud if REQUEST_LINE in line]
    assert len(requests) >= 3, "\n".join(loud)


def test_status_shows_tokens_and_dates(tmp_path: Path) -> None:
    db = tmp_path / "v.sqlite"
    store = SQLiteStore(db)
    now = int(time.time())
    store.set_meta("rewards", json.dumps({"earned": 1_500_000, "unclaimed": 250_000,
                                          "bond": 2_000_000_000, "slashes": 0,
                                          "status": "active", "read_at": now - 30}))
    store.close()
    text = CliRunner().invoke(main, ["status", "--db", str(db)]).output
    assert "1500000 base units" in text  # decimals unknown until `run` stored them
    store = SQLiteStore(db)
    store.set_meta("decimals", json.dumps({"payment": 6, "stake": 9}))
    store.close()
    text = CliRunner().invoke(main, ["status", "--db", str(db)]).output
    rewards = next(line for line in text.splitlines() if line.startswith("rewards:"))
    assert '"earned": "1.5"' in rewards and '"unclaimed": "0.25"' in rewards, rewards
    assert '"bond": "2"' in rewards and " UTC (" in rewards and "s ago)" in rewards, rewards
    as_json = json.loads(CliRunner().invoke(main, ["status", "--db", str(db), "--json"]).output)
    assert as_json["rewards"]["earned"] == 1_500_000  # base units in JSON


def test_duration_flags(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["run", "--url", "http://127.0.0.1:1", "--keypair",
                                  str(tmp_path / "k.json"), "--market", "x",
                                  "--retention-days", "12x"])
    assert r.exit_code == 2 and "--retention-days" in r.output and "2h" in r.output, r.output
