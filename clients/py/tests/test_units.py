"""UI amounts <-> base units: exact, never float."""

from __future__ import annotations

import pytest
from gpu_market.units import AmountError, format_ui_amount, parse_ui_amount
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    "text, decimals, base",
    [("1", 6, 1_000_000), ("1.5", 6, 1_500_000), ("0.000001", 6, 1), ("1_000", 0, 1000),
     ("18446744073709.551615", 6, 2**64 - 1), ("2.50", 1, 25)],
)  # fmt: skip
def test_parse(text, decimals, base):
    assert parse_ui_amount(text, decimals) == base


@pytest.mark.parametrize("text", ["0.0000001", "1e-7", "x", "", "-1", "inf", "nan", "18446744073709.551616"])
def test_reject(text):
    with pytest.raises(AmountError):
        parse_ui_amount(text, 6)


def test_zero_only_when_allowed():
    with pytest.raises(AmountError):
        parse_ui_amount("0", 6)
    assert parse_ui_amount("0", 6, allow_zero=True) == 0


@given(st.integers(min_value=1, max_value=2**64 - 1), st.integers(min_value=0, max_value=12))
def test_round_trip(base, decimals):
    assert parse_ui_amount(format_ui_amount(base, decimals), decimals) == base
