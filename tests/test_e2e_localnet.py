"""End to end on the local chain: the real gpum-localnet, gpum CLI, gpum-worker (simulated
GPUs, explicit --simulate) and gpum-validator, as separate processes over real HTTP/RPC.

This is the demo's flow (gpu_market.demo): every figure it returns is read back from the chain.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpu_market.demo import run_demo

pytestmark = pytest.mark.e2e


def test_one_job_paid_end_to_end(tmp_path: Path) -> None:
    assert os.environ.get("GPUM_LOCALNET_BIN"), "run through `make test` (builds gpum-localnet)"
    lines: list[str] = []
    summary = run_demo(tmp_path, window_seconds=2, settle_every=2, settlements=3,
                       timeout=150, say=lines.append)
    assert summary["demo"] == "ok"
    assert summary["windows_settled"] >= 3, lines
    assert summary["windows_proved"] >= summary["windows_settled"]
    assert summary["burned"] > 0
    assert summary["provider_paid"] > summary["treasury"] > 0
    assert summary["refunded"] > 0
    assert summary["deposited"] == 50 * 10**6
    assert summary["conserved"] is True
    # Every process was stopped: their logs exist and the demo returned.
    for name in ("localnet", "validator", "worker"):
        assert (tmp_path / f"{name}.log").exists()
