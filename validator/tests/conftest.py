"""Fixtures of the validator unit tests (helpers live in vtestkit.py)."""

from __future__ import annotations

import pytest
from vtestkit import T0, FakeChain


@pytest.fixture
def chain() -> FakeChain:
    return FakeChain()


@pytest.fixture
def clock() -> list[float]:
    """A settable clock: ``clock[0]`` is the time; pass ``lambda: clock[0]``."""
    return [float(T0 + 3600)]

