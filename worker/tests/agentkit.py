"""Driving the worker's agent with explicit time in tests (import: ``from agentkit import
...``; this is not a conftest)."""

from __future__ import annotations

from collections.abc import Callable

from gpu_market.proof import WindowProof
from gpum_worker.agent import Agent


def run_seconds(a: Agent, start: int, end: int,
                hook: Callable[[int], object] | None = None) -> list[WindowProof]:
    """Sample at every half second mark in [start, end) and close due windows; ``hook(t)``
    runs before each second's sample."""
    proofs = []
    for t in range(start, end):
        if hook:
            hook(t)
        a.sample_tick(t + 0.5)
        proofs += a.close_windows(t + 1.45)
    return proofs
