"""Fixtures of the validator unit tests (helpers live in vtestkit.py)."""

from __future__ import annotations

import pytest
from vnet import Net
from vtestkit import T0, FakeChain


@pytest.fixture
def chain() -> FakeChain:
    return FakeChain()


@pytest.fixture
def clock() -> list[float]:
    """A settable clock: ``clock[0]`` is the time; pass ``lambda: clock[0]``."""
    return [float(T0 + 3600)]



@pytest.fixture
def nets(tmp_path, chain, clock):
    """Makes committees of real validator nodes on 127.0.0.1 (``vnet.Net``) at T0 + 1 h;
    every one is closed after the test."""
    made: list[Net] = []

    def make(keys, quorum, **kw):
        net = Net(tmp_path, chain, clock, keys, quorum, **kw)
        net.at(T0 + 3600)
        made.append(net)
        return net

    yield make
    for net in made:
        net.close()
