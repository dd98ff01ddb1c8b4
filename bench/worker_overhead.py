#!/usr/bin/env python3
"""CPU and memory overhead of the worker agent, against an idle Python baseline.

Runs ``gpum-worker run`` as a subprocess sampling 8 simulated GPUs at 1 Hz (or, with
``--real-nvml``, every GPU NVML sees) for one job using all of them, proving windows of
``--window-seconds`` and delivering them to an in-process stub validator on 127.0.0.1.
Beside it, in the same run, an idle Python process that imports the same modules and
sleeps. CPU time comes from /proc/<pid>/stat (utime + stime) between the end of a warm-up
and the end of the run; RSS from /proc/<pid>/status (VmRSS) at the end.

Prints a table, then as its LAST line one JSON object:
{"cpu_pct_of_core": X, "rss_mb": Y, "baseline_cpu_pct_of_core": X0, "baseline_rss_mb": Y0}
Target: cpu_pct_of_core <= 1.0 and rss_mb <= 80 (MB = 2**20 bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMPORTS = ("import gpum_worker.cli, gpum_worker.agent, gpum_worker.outbox, gpum_worker.sender, "
           "gpum_worker.simulate, gpu_market.proof, httpx, cryptography, sqlite3, pynvml")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime/stime are fields 14/15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def count_real_gpus() -> int:
    from gpum_worker.gpu import NvmlBackend, discover

    b = NvmlBackend()
    b.init()  # raises NvmlUnavailable with a clear message when there is no driver
    try:
        return len(discover(b))
    finally:
        b.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="measured time (default 30)")
    ap.add_argument("--warmup", type=float, default=3.0, help="unmeasured start-up time")
    ap.add_argument("--gpus", type=int, default=8, help="simulated GPUs (default 8)")
    ap.add_argument("--window-seconds", type=int, default=10,
                    help="window length, so proofs are signed and sent during the run")
    ap.add_argument("--real-nvml", action="store_true", help="use NVML and its real GPUs")
    args = ap.parse_args()

    from gpum_worker.keys import b58encode, generate_key_file
    from gpum_worker.stub_validator import StubValidator

    gpus = count_real_gpus() if args.real_nvml else args.gpus
    tmp = Path(tempfile.mkdtemp(prefix="gpum-bench-"))
    key = tmp / "worker.json"
    generate_key_file(key)
    ids = [b58encode(bytes([i]) * 32) for i in (1, 2, 3, 4)]
    stub = StubValidator().start()
    cmd = [sys.executable, "-m", "gpum_worker.cli", "run", "--key", str(key),
           "--db", str(tmp / "outbox.sqlite"), "--validator", stub.url,
           "--window-seconds", str(args.window_seconds), "--log-level", "warning",
           "--program-id", ids[0], "--market", ids[1], "--provider", ids[2],
           "--job", f"{ids[3]}:{gpus}"]
    if not args.real_nvml:
        cmd += ["--simulate", "--gpus", str(gpus), "--seed", "1"]
    total = args.warmup + args.seconds + 30
    base_cmd = [sys.executable, "-c", f"{IMPORTS}; import time; time.sleep({total})"]
    log = open(tmp / "worker.log", "wb")  # noqa: SIM115 - closed in the finally below
    worker = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    base = subprocess.Popen(base_cmd)
    try:
        time.sleep(args.warmup)
        for p in (worker, base):
            if p.poll() is not None:
                raise SystemExit(f"process exited early: {p.args!r}; see {tmp / 'worker.log'}")
        t0 = time.monotonic()
        c0 = {p.pid: cpu_seconds(p.pid) for p in (worker, base)}
        time.sleep(args.seconds)
        elapsed = time.monotonic() - t0
        cpu = {p.pid: (cpu_seconds(p.pid) - c0[p.pid]) / elapsed * 100 for p in (worker, base)}
        rss = {p.pid: rss_mb(p.pid) for p in (worker, base)}
    finally:
        for p in (worker, base):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (worker, base):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
        stub.stop()

    result = {
        "cpu_pct_of_core": round(cpu[worker.pid], 3),
        "rss_mb": round(rss[worker.pid], 1),
        "baseline_cpu_pct_of_core": round(cpu[base.pid], 3),
        "baseline_rss_mb": round(rss[base.pid], 1),
    }
    mode = "NVML" if args.real_nvml else "simulated"
    print(f"worker overhead: {gpus} {mode} GPU(s) at 1 Hz, window {args.window_seconds}s, "
          f"measured {elapsed:.1f}s after {args.warmup:.0f}s warm-up; "
          f"{stub.accepted} proofs accepted by the stub validator")
    print(f"{'process':<22}{'CPU % of one core':>20}{'RSS (MiB)':>12}")
    print(f"{'gpum-worker run':<22}{result['cpu_pct_of_core']:>20.3f}{result['rss_mb']:>12.1f}")
    print(f"{'idle python baseline':<22}{result['baseline_cpu_pct_of_core']:>20.3f}"
          f"{result['baseline_rss_mb']:>12.1f}")
    print(f"{'difference':<22}"
          f"{result['cpu_pct_of_core'] - result['baseline_cpu_pct_of_core']:>20.3f}"
          f"{result['rss_mb'] - result['baseline_rss_mb']:>12.1f}")
    ok = result["cpu_pct_of_core"] <= 1.0 and result["rss_mb"] <= 80
    print(f"target (<= 1% of a core, <= 80 MiB): {'met' if ok else 'NOT met'}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
