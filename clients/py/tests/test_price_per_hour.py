"""Prices a person types and reads are tokens per GPU-hour; the chain keeps whole base units
per GPU-second, so a typed price is converted exactly or refused with its exact neighbours."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from gpu_market.units import AmountError, format_price_per_hour, parse_price_per_hour
from hypothesis import given
from hypothesis import strategies as st
from solders.pubkey import Pubkey
from test_cli import MARKET, assert_one_line_error, run


def test_the_issue_example_is_refused_with_both_neighbours():
    with pytest.raises(AmountError) as e:
        parse_price_per_hour("1.20", 6)
    assert str(e.value) == ("1.20 per GPU-hour is 333.33 base units per second, which the chain "
                            "cannot hold exactly (it keeps whole base units per GPU-second); "
                            "use 1.1988 or 1.2024")  # fmt: skip
    assert parse_price_per_hour("1.1988", 6) == 333 and parse_price_per_hour("1.2024", 6) == 334


def test_a_price_below_one_base_unit_per_second_offers_only_the_smallest():
    with pytest.raises(AmountError, match=r"use 0\.0036$"):
        parse_price_per_hour("0.001", 6)


@pytest.mark.parametrize("text, message", [("abc", "not a number"), ("0", "greater than zero"),
                                           ("-1", "negative"), ("1.0000001", "decimal places")])
def test_bad_prices_are_refused(text, message):
    with pytest.raises(AmountError, match=message):
        parse_price_per_hour(text, 6)


@given(st.integers(1, 10**12), st.integers(0, 9))
def test_exact_prices_round_trip(per_second, decimals):
    shown = format_price_per_hour(per_second, decimals)
    assert parse_price_per_hour(shown, decimals) == per_second
    assert Decimal(shown) == Decimal(per_second * 3600).scaleb(-decimals)


@given(st.integers(1, 10**12), st.integers(1, 3599), st.integers(0, 9))
def test_inexact_prices_are_refused_with_the_nearest_exact_ones(per_second, off, decimals):
    per_hour = per_second * 3600 + off
    text = format(Decimal(per_hour).scaleb(-decimals), "f")
    with pytest.raises(AmountError) as e:
        parse_price_per_hour(text, decimals)
    lower, upper = re.search(r"use (\S+) or (\S+)$", str(e.value)).groups()
    assert parse_price_per_hour(lower, decimals) == per_second
    assert parse_price_per_hour(upper, decimals) == per_second + 1
    assert Decimal(lower) < Decimal(text) < Decimal(upper)


# ----------------------------------------------------------------------------- the CLI flags


@pytest.fixture
def sent(monkeypatch, idl_path, tmp_path):
    """The prices ``provider register`` and ``provider update`` send (chain reads faked)."""
    from gpu_market.client import GpuMarketClient
    from test_cli import offline

    monkeypatch.setenv("GPU_MARKET_IDL", str(idl_path))
    monkeypatch.setenv("GPUM_SOLANA_CONFIG", str(tmp_path / "no-config.yml"))
    offline(monkeypatch)
    calls: list[int | None] = []
    monkeypatch.setattr(GpuMarketClient, "register_provider",
                        lambda self, kp, wk, spec, price, *a, **kw: calls.append(price) or "SiG")
    monkeypatch.setattr(GpuMarketClient, "update_provider",
                        lambda self, kp, addr, price, *a, **kw: calls.append(price) or "SiG")
    return calls


def register(keyfile: str, price: str) -> tuple[int, str, str]:
    return run(["--output", "json", "provider", "register", "--market", MARKET, "-k", keyfile,
                "--worker-key", str(Pubkey.new_unique()), "--gpu-model", "H100", "--gpu-count",
                "1", "--vram-mib", "81559", "--price", price])  # fmt: skip


def test_register_and_update_take_the_price_per_gpu_hour(keyfile, sent):
    assert register(keyfile, "1.8")[0] == 0  # 1.8 tokens per GPU-hour = 500 base units per s
    code, _, err = run(["provider", "update", "--market", MARKET, "-k", keyfile, "--price", "3.6"])
    assert (code, err) == (0, "")
    assert sent == [500, 1000]


def test_register_and_update_refuse_an_inexact_price_naming_the_neighbours(keyfile, sent):
    code, _, err = register(keyfile, "1.2")
    assert code == 2
    assert_one_line_error(err, "'--price'", "1.2 per GPU-hour is 333.33 base units per second",
                          "use 1.1988 or 1.2024")  # fmt: skip
    code, _, err = run(["provider", "update", "--market", MARKET, "-k", keyfile, "--price", "1.2"])
    assert code == 2
    assert_one_line_error(err, "'--price'", "use 1.1988 or 1.2024")
    assert sent == []


def test_the_help_says_per_gpu_hour():
    for command in ("register", "update"):
        code, out, _ = run(["provider", command, "--help"])
        assert code == 0 and "Price per GPU-hour" in " ".join(out.split())
