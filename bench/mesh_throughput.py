#!/usr/bin/env python3
"""Throughput of a cluster's mesh against the same path without it (needs root).

Builds the two-provider world of worker/tests/test_mesh.py (network namespaces: the
internet, two providers' hosts with NAT, a node's container on each), configures a two-node
mesh with the worker's own code (``gpum_worker.mesh``: wireguard-go, or the kernel's
WireGuard with ``--wireguard kernel``), then streams ``--mib`` MiB over one TCP connection:

* plain: node 0's container -> provider 1's host address (NAT, the internet bridge);
* mesh:  node 0's container -> node 1's mesh address over gpum0 (the same wires, WireGuard
  on both hosts).

Prints one line per run, then as its LAST line one JSON object:
{"plain_mib_s": X, "mesh_mib_s": Y, "ratio": Y / X, "wireguard": "...", "cpus": N}
(medians of ``--runs`` runs; MiB = 2**20 bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "worker" / "tests"))

import test_mesh as world_kit  # the test module builds the world


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--wireguard", choices=("auto", "kernel", "userspace"), default="auto")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: it makes network namespaces and WireGuard devices")
    plain: list[float] = []
    mesh: list[float] = []
    with world_kit.netns_world() as w, tempfile.TemporaryDirectory() as tmp, \
            world_kit.two_node_cluster(w, Path(tmp), wireguard=args.wireguard) as c:
        backend = (c.meshes[0]._recorded(c.jobs[0]) or {}).get("backend", "?")
        for i in range(args.runs):
            plain.append(w.throughput(w.nodes[0], w.hosts[1], w.public[1], 7200 + i,
                                      args.mib))
            mesh.append(w.throughput(w.nodes[0], w.nodes[1], c.address(1), 7300 + i,
                                     args.mib))
            print(f"run {i + 1}: plain {plain[-1]:8.0f} MiB/s   mesh {mesh[-1]:8.0f} MiB/s",
                  flush=True)
    p, m = statistics.median(plain), statistics.median(mesh)
    print(json.dumps({"plain_mib_s": round(p), "mesh_mib_s": round(m),
                      "ratio": round(m / p, 3), "wireguard": backend,
                      "cpus": len(os.sched_getaffinity(0))}))


if __name__ == "__main__":
    main()
