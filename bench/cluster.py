#!/usr/bin/env python3
"""A cluster's start on the local chain, and its mesh's throughput (needs root).

Starts its own ``gpum-localnet`` (``$GPUM_LOCALNET_BIN``), a market with 2 s windows, one
validator node and ``--providers`` providers (one simulated GPU each, prices rising from P1;
real workers with podman serving cluster nodes over wireguard-go, 10 UDP ports each on
127.0.0.1), built by :func:`gpu_market.cluster_demo.start_local_world`. The node image is the
local busybox-static one, built before anything is timed (images present). Then, for every
size in ``--nodes`` (each ``--runs`` times):

    gpum cluster create --nodes K --gpu h100:1 ... -- sleep    timed: from the command's start
                                                              to its exit, i.e. every node's
                                                              job created, its container
                                                              running and a WireGuard
                                                              handshake between every two nodes
    gpum cluster down                                         not timed

Then ``bench/mesh_throughput.py`` (the netns world of ``worker/tests/test_mesh.py``: one TCP
stream node 0 -> node 1 over gpum0 against node 0 -> provider 1's host without the mesh, the
same wires) gives the mesh's throughput as a ratio of the same path without it.

Prints one line per run, then as its LAST line one JSON object:
{"create_to_joined_s": {"2": median, "4": median}, "runs_s": {"2": [...], ...},
 "target_4_nodes_s": 60, "providers": N, "mesh": {"plain_mib_s", "mesh_mib_s", "ratio",
 "wireguard"}, "cpus": N}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpu_market.cluster_demo import start_local_world
from gpum_worker.localimage import build_busybox_image

ROOT = Path(__file__).resolve().parents[1]

IMAGE = "localhost/gpum-busybox:1"
TARGET_4_NODES_S = 60


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--providers", type=int, default=4)
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--mib", type=int, default=128, help="MiB per throughput run")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: workers that serve cluster nodes make WireGuard devices")
    if max(args.nodes) > args.providers:
        sys.exit("--nodes may not exceed --providers (one GPU each)")
    with tempfile.TemporaryDirectory(prefix="gpum-bench-cluster-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        providers = [(format(1.8 + 0.36 * i, ".2f"), 52310 + 10 * i) for i in range(args.providers)]
        w = start_local_world(workdir, providers, user_tokens=1000)
        try:
            build_busybox_image(IMAGE, extra_env={"CONTAINERS_CONF": str(w.containers_conf)})
            runs: dict[str, list[float]] = {}
            for k in args.nodes:
                for i in range(args.runs):
                    name = f"bench-{k}-{i}"
                    start = time.monotonic()
                    out = w.cli("user", "cluster", "create", "--market", w.market, "--gpu",
                                "h100:1", "--nodes", str(k), "--hours", "0.05", "--image",
                                IMAGE, "--name", name, "--timeout", "300s", "--", "/bin/sh",
                                "-c", "exec sleep 600")  # fmt: skip
                    took = time.monotonic() - start
                    assert out["state"] == "running" and len(out["nodes"]) == k, out
                    runs.setdefault(str(k), []).append(round(took, 2))
                    print(f"{k} nodes on {out['providers']} providers: joined {took:.2f} s "
                          "after `gpum cluster create`", flush=True)
                    w.cli("user", "cluster", "down", name)
        finally:
            w.close()
    mesh = _mesh_throughput(args.mib)
    print(json.dumps({
        "create_to_joined_s": {k: round(statistics.median(v), 2) for k, v in runs.items()},
        "runs_s": runs, "target_4_nodes_s": TARGET_4_NODES_S, "providers": args.providers,
        "mesh": mesh, "cpus": len(os.sched_getaffinity(0))}))


def _mesh_throughput(mib: int) -> dict[str, object]:
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "mesh_throughput.py"), "--mib",
                        str(mib)], capture_output=True, text=True, timeout=900, check=False)
    if r.returncode != 0:
        sys.exit(f"bench/mesh_throughput.py failed: {r.stderr.strip()[-1500:]}")
    for line in r.stdout.splitlines():
        print(line, flush=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
