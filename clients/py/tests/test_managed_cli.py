"""``gpum run --managed`` and the managed job in ``gpum job list`` (gpu_market.cli.managed)
against the fake chain of test_managed_controller: the options refused before anything is
sent, the dry run's plan, a managed job run in the foreground to its end with every event
shown (dates, tokens), and the attempts' history shown by name."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
from click.testing import CliRunner
from gpu_market import cli as cli_mod
from gpu_market.client import GpuMarketClient
from gpu_market.managed import world as managed_world
from gpu_market.managed.store import DB_FILE, ManagedStore, data_dir
from solders.keypair import Keypair
from test_managed_controller import MARKET, PROGRAM, FakeWorld


class _Client:
    url = "http://fake-chain"
    program_id = PROGRAM

    def fetch_market(self, market: Any) -> Any:
        return type("M", (), {"payment_mint": MARKET})()

    def mint_decimals(self, mint: Any) -> int:
        return 6

    def fetch_jobs(self, keys: Any) -> list[None]:
        return [None for _ in keys]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, user: tuple[Keypair, str]) -> FakeWorld:
    """The fake chain as the CLI's world; time passes only while the controller sleeps."""
    world = FakeWorld(user[0])
    world.client = _Client()  # type: ignore[attr-defined]
    world.keypair = user[0]  # type: ignore[attr-defined]
    world.add_provider("p1", 100)
    world.add_provider("p2", 150)
    world.on_sleep = lambda: None  # type: ignore[attr-defined]

    def sleep(seconds: float) -> None:
        world.advance(max(1, int(seconds)))
        world.on_sleep()  # type: ignore[attr-defined]

    monkeypatch.setattr(managed_world, "ChainWorld", lambda client, kp, market: world)
    # the module, not the package's function of the same name
    monkeypatch.setattr(importlib.import_module("gpu_market.managed.launch"), "_sleep", sleep)
    return world


def gpum(keyfile: str, *args: str) -> Any:
    return CliRunner().invoke(cli_mod.cli, ["--url", "http://fake-chain", "--keypair", keyfile,
                                            *args], catch_exceptions=False)  # fmt: skip


RUN = ("run", "--market", str(MARKET), "--gpu", "h100:1", "--hours", "10m",
       "--image", "docker.io/library/busybox:1", "--port", "8080")  # fmt: skip


def test_managed_options_need_managed_and_bad_values_are_refused_first(keyfile: str) -> None:
    r = gpum(keyfile, *RUN, "--max-restarts", "2")
    assert r.exit_code == 2 and "--max-restarts is a managed-job option: add --managed" in r.output
    r = gpum(keyfile, *RUN, "--managed", "--job-id", "7")
    assert r.exit_code == 2 and "--job-id cannot be given with --managed" in r.output
    r = gpum(keyfile, *RUN, "--managed", "--min-score", "2")
    assert r.exit_code == 2 and "--min-score" in r.output


def test_bad_policy_values_cost_nothing(keyfile: str, fake: FakeWorld) -> None:
    r = gpum(keyfile, *RUN, "--managed", "--recover-on-exit", "0,1")
    assert r.exit_code == 1 and "0 is a clean exit" in r.output
    r = gpum(keyfile, *RUN, "--managed", "--max-price", "1.23456")
    assert r.exit_code == 1 and "cannot hold exactly" in r.output
    r = gpum(keyfile, *RUN, "--managed", "--max-price", "0.0036")  # below every offer
    assert r.exit_code == 1 and "no offer satisfies the policy" in r.output
    assert "no money moved" in r.output
    assert fake.jobs == {} and fake.wallet == 10**12


def test_a_dry_run_shows_the_first_attempt_and_records_nothing(keyfile: str, fake: FakeWorld) -> None:
    r = gpum(keyfile, "--output", "json", *RUN, "--managed", "--dry-run", "--name", "m1",
             "--max-restarts", "2")  # fmt: skip
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output.strip().splitlines()[-1])
    p1 = next(p for p in fake.providers.values() if p.price == 100)
    assert plan["dry_run"] is True and plan["provider"] == str(p1.address)
    assert plan["deposit"] == "0.06" and plan["budget"] == "0.18" and plan["max_restarts"] == 2
    assert plan["price_per_gpu_hour"] == "0.36"
    assert fake.jobs == {} and not (data_dir() / DB_FILE).exists()


def test_a_managed_run_in_the_foreground_until_its_container_exits(keyfile: str,
                                                                    fake: FakeWorld) -> None:
    def exit_after_a_while() -> None:
        for j in fake.jobs.values():
            if j.status == "running" and fake.clock - j.started_at > 30:
                fake.providers[j.provider].exit_code, j.container = 0, "exited"
                j.status, j.ended_at = "finishing", fake.clock  # the worker finishes it

    fake.on_sleep = exit_after_a_while  # type: ignore[attr-defined]
    r = gpum(keyfile, *RUN, "--managed", "--name", "m1", "--finish-on-exit")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert any(" UTC  decision: attempt 0: job " in line and "0.36 per GPU-hour" in line
               and "deposit 0.06" in line for line in lines), lines  # fmt: skip
    assert any("runs on provider" in line and "p1:30000" in line for line in lines)
    assert any("decision: the managed job ended: the container exited with code 0" in line
               for line in lines), lines  # fmt: skip
    assert "managed job 'm1' done: the container exited with code 0" in lines[-1]
    store = ManagedStore(data_dir() / DB_FILE)
    m = store.find("m1", "http://fake-chain")
    (a,) = store.attempts(m.id)
    assert m.phase == "done" and a.state == "closed" and a.receipt["paid"] == a.paid > 0
    # The history of the ended managed job reads back by name.
    from gpu_market.cli.managed import status_lines
    from gpu_market.managed import describe

    text = "\n".join(status_lines(describe(store, m), 6, fake.clock))
    assert "managed job 'm1': done (the container exited with code 0)" in text
    assert f"#0 closed    provider {a.provider}" in text and "paid 0.00" in text
    assert "ended 2023-11-14" in text and ": the container exited with code 0" in text


def test_job_list_shows_a_managed_job_at_work_with_its_attempts(
        keyfile: str, fake: FakeWorld, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from gpu_market.managed import launch

    job = launch("H100:1", "docker.io/library/busybox:1", hours="10m", name="m2",
                 market=MARKET, world=fake)  # fmt: skip
    assert job.status()["phase"] == "running"
    monkeypatch.setattr(GpuMarketClient, "list_jobs", lambda self, user, market=None: [])
    monkeypatch.setattr(GpuMarketClient, "chain_time", lambda self: fake.clock)
    r = gpum(keyfile, "--output", "json", "job", "list")
    assert r.exit_code == 0, r.output
    (m,) = json.loads(r.output)["managed"]
    assert m["name"] == "m2" and m["phase"] == "running" and len(m["attempts"]) == 1
    assert m["attempts"][0]["endpoints"] == ["p1:30000"] and m["budget"] == 4 * 100 * 600
    r = gpum(keyfile, "job", "list")
    assert "managed job 'm2': running" in r.output and "restarts 0 of 3" in r.output
