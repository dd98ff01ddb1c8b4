"""End to end on the local chain: the real gpum-localnet, gpum CLI, gpum-worker (simulated
GPUs, explicit --simulate) and gpum-validator, as separate processes over real HTTP/RPC.

This is the demo's flow (gpu_market.demo): every figure it returns is read back from the chain.
Two of its validators run the challenger (the market's hardware_quorum is 2), so the provider's
hardware verdict is attested on chain before the job is created.
The demo market has 2 s windows and max_missed_windows 2, so a finished job's settlement grace
(terms.grace_seconds) is 8 s; then the provider's worker completes the job, the user runs
`gpum job close`, and `gpum market withdraw-fees` moves the fees from the market's fee vault to its treasury.
Then a managed job migrates from the killed provider P1 to P2 and resumes from its checkpoint
in a real S3 server (SeaweedFS's weed, ``$GPUM_WEED_BIN``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
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
    # settle paid the treasury share into the fee vault; `gpum market withdraw-fees` moved all
    # of it to the treasury account (empty before), which is what the summary reads back
    assert summary["treasury"] == summary["fees_withdrawn"]
    assert any(line.startswith("fees withdrawn") for line in lines), lines
    assert summary["refunded"] > 0
    assert summary["deposited"] == 50 * 10**6
    assert summary["conserved"] is True
    # finish -> grace of (max_missed_windows + 2) windows -> the worker completes it -> close
    assert summary["gpus_in_use_after_complete"] == 0
    assert any(line.startswith("job completed") for line in lines), lines
    # Every process was stopped: their logs exist and the demo returned.
    # Three validators, a 2-of-3 committee; rewards read back from their Validator accounts.
    assert (summary["validators"], summary["quorum"]) == (3, 2)
    # Both challengers passed the provider's simulated GPUs and attested it on chain: its
    # Provider account shows it verified (as `gpum offers` does), before the job was created.
    assert summary["verified"] is True, lines
    said = [i for i, line in enumerate(lines) if line.startswith("  validator ")]
    assert len(said) == 2 and all(": passed (2 x Simulated H100)" in lines[i] for i in said), lines
    verified = next(i for i, line in enumerate(lines) if line.startswith("hardware "))
    assert "verified on chain: 2 validators attested" in lines[verified], lines
    assert verified < next(i for i, line in enumerate(lines) if line.startswith("job ")), lines
    assert summary["validator_rewards"] > 0
    assert summary["fee_vault_left"] == summary["validator_rewards"]  # credited, not yet claimed
    # The job ran a real container (podman + runc) that finished the job when it exited:
    # its output came back through `gpum job logs`, signed by the user's wallet.
    assert summary["workload"] == {"runtime": "podman", "exit_code": 0, "log_lines": 21}, lines
    assert any("done: model saved" in line for line in lines), lines
    assert any("by the worker (finish on exit)" in line for line in lines), lines
    # A managed job outlived its provider: P1's worker and container were killed, the
    # controller moved it to P2, whose container went on from the newest checkpoint and lost
    # at most one checkpoint interval of counting; `gpum job stop` closed both attempts.
    migration = summary["migration"]
    assert migration["from"] != migration["to"], migration
    assert migration["resumed_from_checkpoint"] is True, lines
    assert 0 <= migration["lost_seconds"] <= migration["checkpoint_interval_s"], migration
    assert migration["attempts_closed"] == 2, migration
    assert any(line.startswith("successor") for line in lines), lines
    for name in ("localnet", "validator0", "validator1", "validator2", "worker", "worker-p2",
                 "s3", "controller"):
        assert (tmp_path / f"{name}.log").exists()


def _processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line mentions ``text`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                pids.append(int(entry.name))
    return pids


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_demo_interrupted_stops_every_process(tmp_path: Path, sig: signal.Signals) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "gpu_market.demo", "--workdir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 90
    # The validators are the last processes the demo starts before its first job (the workers
    # before them); their command lines name the workdir.
    while not (tmp_path / "validator2.log").exists():
        assert demo.poll() is None, demo.communicate()
        assert time.monotonic() < deadline, "the demo did not start its validators in 90 s"
        time.sleep(0.2)
    assert len(_processes_mentioning(str(tmp_path))) >= 5  # 2 workers, 3 validators at least
    demo.send_signal(sig)
    _, err = demo.communicate(timeout=30)
    assert demo.returncode == 130, err
    assert "every process it started was stopped" in err
    assert _processes_mentioning(str(tmp_path)) == []
    # The local chain (started with --port only) no longer listens.
    ready = next(line for line in (tmp_path / "localnet.log").read_text().splitlines()
                 if "ready on" in line)
    port = int(ready.split("127.0.0.1:")[1].split()[0])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
