"""One duration syntax for every flag that takes one: a bare number in the flag's unit, or
``30s``, ``30m``, ``1h``, ``1h30m``, ``2d`` (:func:`gpu_market.units.parse_duration`); bad
input is one line saying what to write."""

from __future__ import annotations

from fractions import Fraction

import click
import pytest
from gpu_market.cli import market as cli_market
from gpu_market.cli import run as cli_run
from gpu_market.cli import watch as cli_watch
from gpu_market.cli.base import Duration
from gpu_market.units import DurationError, parse_duration, parse_seconds
from solders.pubkey import Pubkey

MARKET = str(Pubkey.new_unique())


@pytest.mark.parametrize("text, unit, seconds", [
    ("30s", None, 30), ("30m", None, 1800), ("1h", None, 3600), ("1h30m", None, 5400),
    ("2d", None, 172_800), (" 1H30M ", None, 5400), ("1d2h3m4s", None, 93_784),
    ("2", "h", 7200), ("0.5", "h", 1800), ("1.5", "d", 129_600), ("90", "s", 90),
    ("1h", "h", 3600), ("45m", "h", 2700), ("1_000", "s", 1000), ("1", "m", 60),
])  # fmt: skip
def test_parse(text: str, unit: str | None, seconds: int) -> None:
    assert parse_duration(text, unit) == seconds


def test_a_fraction_of_an_hour_stays_exact() -> None:
    assert parse_duration("0.0001", "h") == Fraction(9, 25)


@pytest.mark.parametrize("text, unit, needle", [
    ("", "h", "empty duration"), ("30", None, "has no unit; write 30s, 30m"),
    ("1x", "h", "write a number of hours or e.g. 90s"), ("-1", "h", "not a duration"),
    ("1.5h", "h", "not a duration"), ("30m1h", "s", "out of order"), ("1h1h", "s", "repeats"),
    ("inf", "h", "not a duration"), ("nan", "s", "not a duration"), ("1h 30m", "s", "not a"),
])  # fmt: skip
def test_bad_input_says_what_to_write(text: str, unit: str | None, needle: str) -> None:
    with pytest.raises(DurationError, match=needle) as e:
        parse_duration(text, unit)
    assert "\n" not in str(e.value)


def test_bounds_and_whole_seconds() -> None:
    assert parse_seconds("2m", low=1, high=600) == 120
    with pytest.raises(DurationError, match="at most 600 s"):
        parse_seconds("1h", high=600)
    with pytest.raises(DurationError, match=r"at least 1 s"):
        parse_seconds("0", low=1)
    with pytest.raises(DurationError, match=r"at most 86400 s \(1 day\)"):
        parse_seconds("2d", "d", high=86_400)
    with pytest.raises(DurationError, match="not a whole number of seconds"):
        parse_seconds("1.5")
    assert parse_seconds("1.5", whole=False) == Fraction(3, 2)


def test_the_param_type_takes_numbers_as_defaults() -> None:
    assert Duration("h").convert(2, None, None) == 7200
    assert Duration(whole=False).convert(0.5, None, None) == 0.5
    with pytest.raises(click.BadParameter, match="at least 1 s"):
        Duration(low=1).convert("0s", None, None)


def params(command: click.Command, *args: str) -> dict:
    """What ``command`` makes of ``args`` (conversions and callbacks run; nothing is sent)."""
    return command.make_context(command.name, list(args)).params


@pytest.mark.parametrize("hours, seconds", [("2", 7200), ("0.5", 1800), ("1h", 3600),
                                            ("1h30m", 5400), ("90m", 5400), ("2d", 172_800)])
def test_gpum_run_hours_takes_a_duration(hours: str, seconds: int) -> None:
    got = params(cli_run.run, "--market", MARKET, "--gpu", "H100:1", "--hours", hours,
                 "--image", "busybox", "--timeout", "2m")
    assert (got["hours"], got["wait_timeout"]) == (seconds, 120)


def test_gpum_run_bad_hours_is_one_line() -> None:
    with pytest.raises(click.BadParameter, match="write a number of hours or e.g. 90s") as e:
        params(cli_run.run, "--market", MARKET, "--gpu", "H100:1", "--hours", "1 hour")
    assert "'--hours'" in e.value.format_message() or e.value.param_hint == "'--hours'"
    with pytest.raises(click.BadParameter, match="positive"):
        params(cli_run.run, "--market", MARKET, "--gpu", "H100:1", "--hours", "0m")


def test_job_watch_takes_durations() -> None:
    job = str(Pubkey.new_unique())
    got = params(cli_watch.job_watch, job, "--interval", "1m", "--warn-below", "1h30m")
    assert (got["interval"], got["warn_below"]) == (60.0, 5400)
    assert params(cli_watch.job_watch, job, "--interval", "2.5")["interval"] == 2.5
    assert params(cli_watch.job_watch, job)["interval"] == 10.0


def test_market_init_seconds_flags_take_durations() -> None:
    got = params(cli_market.market.commands["init"], "--stake-mint", MARKET, "--payment-mint",
                 MARKET, "--unbonding-seconds", "7d", "--window-seconds", "1m",
                 "--max-skew-seconds", "5")
    assert (got["unbonding_seconds"], got["window_seconds"], got["max_skew_seconds"]) == (
        604_800, 60, 5)


def test_a_bound_given_as_a_float_is_its_decimal() -> None:
    assert parse_seconds("0.1", whole=False, low=0.1) == Fraction(1, 10)
    with pytest.raises(DurationError, match="at least 0.1 s"):
        parse_seconds("0.09", whole=False, low=0.1)
