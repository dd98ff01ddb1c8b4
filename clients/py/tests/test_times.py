"""Times a person reads are dates with their distance from now (``units.when``): ``gpum job
status``, ``gpum validator status``'s unbonding release; ``--output json`` keeps Unix seconds."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from gpu_market.accounts import Unbonding
from gpu_market.units import format_span, when
from solders.pubkey import Pubkey
from test_cli import CHAIN_NOW, MARKET, run
from test_cli_committee import chain, fake_validator, offline_chain  # noqa: F401


@pytest.mark.parametrize("delta, text", [
    (21, "(in 21 s)"), (-21, "(21 s ago)"), (0, "(now)"), (330, "(in 5 min 30 s)"),
    (9_000, "(in 2 h 30 min)"), (-97_200, "(1 d 3 h ago)"), (3_600, "(in 1 h)"),
])  # fmt: skip
def test_when(delta: int, text: str) -> None:
    assert when(1_795_000_000 + delta, 1_795_000_000).endswith(text)
    assert when(1_795_000_000, 1_795_000_000 - delta).startswith("2026-11-18 11:06:40 UTC (")


def test_format_span() -> None:
    assert [format_span(s) for s in (0, 59, 60, 61, 3_600, 86_401)] == [
        "0 s", "59 s", "1 min", "1 min 1 s", "1 h", "1 d"]


def test_validator_status_shows_the_unbonding_release_as_a_date(chain) -> None:  # noqa: F811
    authority = Pubkey.new_unique()
    chain.validator = replace(fake_validator(authority), unbonding=Unbonding(1_000, CHAIN_NOW + 21))
    code, out, _ = run(["validator", "status", "--market", MARKET, str(authority)])
    assert code == 0 and f"unbonding_release_at: {when(CHAIN_NOW + 21, CHAIN_NOW)}\n" in out
    assert "(in 21 s)" in out
    code, out, _ = run(["--output", "json", "validator", "status", "--market", MARKET,
                        str(authority)])
    assert json.loads(out)["unbonding_release_at"] == CHAIN_NOW + 21


def test_job_status_shows_dates_in_text_and_unix_seconds_in_json(monkeypatch,
                                                                 offline_chain) -> None:  # noqa: F811
    from gpu_market.client import GpuMarketClient
    from test_cli import JOB, fake_job

    job = fake_job("finishing", ended_at=CHAIN_NOW - 100)
    monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self, j: job)
    monkeypatch.setattr(GpuMarketClient, "token_balance", lambda self, a: 100_000)
    code, out, _ = run(["job", "status", JOB])
    assert code == 0
    lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert lines["grace_ends_at"] == when(CHAIN_NOW + 620, CHAIN_NOW)
    assert lines["grace_ends_at"].endswith("(in 10 min 20 s)")
    assert lines["ended_at"].endswith("(1 min 40 s ago)") and lines["started_at"] == "-"
    _, out, _ = run(["--output", "json", "job", "status", JOB])
    assert json.loads(out)["grace_ends_at"] == CHAIN_NOW + 620
