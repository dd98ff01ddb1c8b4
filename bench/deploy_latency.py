#!/usr/bin/env python3
"""``gpu_market.deploy(...)`` -> container running, on the local chain, against a baseline.

Starts its own ``gpum-localnet`` (``$GPUM_LOCALNET_BIN``), a market with 2 s windows, provider
P with a real worker running podman (the busybox-static image built locally) and validator V,
the world of ``tests/test_e2e_deploy.py``. Then, ``--runs`` times each:

- baseline: the chain round trip of one ``create_job`` (sent and confirmed; a job on a second
  provider with no worker, so it stays Open and is cancelled after);
- deploy: ``gpu_market.deploy(gpu="H100:1", image=..., ports=[8080], hours="72s")`` until it
  returns (health probe, offer, committee, create, delivery, accept, container running); each
  deployment is then stopped (``Deployment.stop``, not timed).

Prints one line per run, then as its LAST line one JSON object:
{"deploy_to_running_s": median, "deploy_runs_s": [...], "baseline_create_job_s": median,
 "baseline_runs_s": [...], "runs": N, "readme_script_lines": L (not blank)}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    opts = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="deploy-latency-"))
    os.environ["GPUM_DATA_DIR"] = str(workdir / "data")  # the job history stays here

    import gpu_market
    from gpu_market.processes import Processes, start_localnet, tool
    from harness import create_market, remove_containers
    from solders.keypair import Keypair
    from test_e2e_deploy import IMAGE, README_SCRIPT, WORLD_FUNDS, WORLD_PARAMS, start_world

    procs = Processes(workdir)
    created: list = []
    net = None
    try:
        chain = start_localnet(procs)
        m = create_market(chain.url, workdir, ["owner", "idle", "user", "validator", "worker"],
                          WORLD_PARAMS, stake={**WORLD_FUNDS["stake"], "idle": 10_000 * 10**6},
                          payment=WORLD_FUNDS["payment"])  # fmt: skip
        net = start_world(workdir, m, procs, created)
        import subprocess

        for args in (["provider", "register", "--market", str(m.address), "--worker-key",
                      str(Keypair().pubkey()), "--gpu-model", "Simulated H100", "--gpu-count",
                      "1", "--vram-mib", "81920", "--price", "3.6"],
                     ["provider", "stake", "--market", str(m.address), "1000"]):  # fmt: skip
            subprocess.run([tool("gpum"), "--url", m.url, *args, "--keypair", str(m.keys["idle"])],
                           check=True, capture_output=True, timeout=120)  # fmt: skip
        from gpu_market import pda

        idle = pda.provider_pda(m.address, m.kps["idle"].pubkey())
        user = m.kps["user"]
        baseline, deploys = [], []
        for i in range(opts.runs):
            t0 = time.perf_counter()
            _, job = m.client.create_job(user, m.address, idle, 1_000 + i, 1, 10_000,
                                         committee=[m.kps["validator"].pubkey()], quorum=1)  # fmt: skip
            baseline.append(time.perf_counter() - t0)
            m.client.cancel_job(user, job)
            t0 = time.perf_counter()
            d = gpu_market.deploy(gpu="H100:1", image=IMAGE, ports=[8080], hours="72s",
                                  cmd=["/bin/sh", "-c"], args=["exec httpd -f -p 8080 -h /www"],
                                  url=m.url, keypair=user, market=m.address, timeout=120)  # fmt: skip
            deploys.append(time.perf_counter() - t0)
            created.append(d.job)
            print(f"run {i + 1}: create_job {baseline[-1]:.3f} s, deploy -> running "
                  f"{deploys[-1]:.3f} s ({d.endpoint})", flush=True)  # fmt: skip
            d.stop()
            d.close()
        print(json.dumps({
            "deploy_to_running_s": round(statistics.median(deploys), 3),
            "deploy_runs_s": [round(x, 3) for x in deploys],
            "baseline_create_job_s": round(statistics.median(baseline), 3),
            "baseline_runs_s": [round(x, 3) for x in baseline],
            "runs": opts.runs,
            "readme_script_lines": len([ln for ln in README_SCRIPT.splitlines() if ln.strip()]),
        }))
        return 0
    finally:
        procs.stop_all()
        if net is not None:
            remove_containers(created, net.podman_env)


if __name__ == "__main__":
    raise SystemExit(main())
