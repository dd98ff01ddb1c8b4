"""gpu_market.base58: the one base58 of the SDK and the worker."""

from __future__ import annotations

import pytest
from gpu_market.base58 import b58decode, b58encode
from hypothesis import given
from hypothesis import strategies as st
from solders.pubkey import Pubkey


@given(st.binary(max_size=80))
def test_round_trip_keeps_leading_zero_bytes(data: bytes) -> None:
    assert b58decode(b58encode(data)) == data


@given(st.binary(min_size=32, max_size=32))
def test_a_pubkey_reads_as_solders_writes_it(raw: bytes) -> None:
    assert b58encode(raw) == str(Pubkey.from_bytes(raw))


def test_a_character_outside_the_alphabet_is_named() -> None:
    with pytest.raises(ValueError, match="invalid base58 character '0'"):
        b58decode("1110")
