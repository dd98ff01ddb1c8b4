"""A managed cluster end to end (``gpum cluster create --managed``): a node whose provider dies
is replaced on another provider under the same rank and mesh address, and the surviving node
reaches the successor over the mesh without being restarted.

The module's world: a market with 2 s windows, a validator node (the default committee) and
three providers whose real workers run podman and serve cluster meshes (wireguard-go):

    P1  1.8 per GPU-hour   P2  3.6 per GPU-hour   P3  5.4 per GPU-hour (the spare)

The cluster takes the two cheapest (node 0 on P1, node 1 on P2). Every node serves a random
id of its own over the mesh (busybox httpd on port 8081) and node 0 prints, every second, the
id that node 1's mesh address answers. P2's worker is killed with SIGKILL; the controller
(running in the foreground of ``gpum cluster create --managed``) sees its committee accept no
window, finishes its job, rents node 1 again on P3 (same rank, same cluster section), collects
its mesh key and delivers peer list version 1 to both nodes: node 0's container keeps running
(its worker changes its WireGuard device in place) and soon prints the successor's id. ``gpum
cluster down`` then stops the controller and closes all three jobs, and the tokens that left
the user's wallet are exactly what the providers, the fee vault and the burn received.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from gpu_market import pda
from gpu_market.processes import Processes, free_port
from harness import (
    CliNetwork,
    Market,
    podman_setup,
    remove_containers,
    start_validator,
    stop_reapers,
    wait_until,
)
from solders.pubkey import Pubkey
from test_e2e_cluster import _register, _start_worker

pytestmark = pytest.mark.e2e

WINDOW = 2
IMAGE = "localhost/gpum-busybox:1"
UDP = {"p1": (52140, 52144), "p2": (52145, 52149), "p3": (52150, 52154)}
SCRIPT = (
    "id=$(cat /proc/sys/kernel/random/uuid); mkdir -p /tmp/w; echo \"$id\" > /tmp/w/id; "
    "echo \"me: $id\"; httpd -p 8081 -h /tmp/w; "
    "if test \"$NODE_RANK\" = 0; then set -- $NODE_IPS; while true; do rm -f /tmp/got; "
    "wget -qO /tmp/got \"http://$2:8081/id\" & p=$!; sleep 1; kill $p 2>/dev/null; "
    "test -s /tmp/got && echo \"peer: $(cat /tmp/got)\"; done; "
    "else exec sleep 100000; fi"
)
"""Every node serves its own random id; node 0 prints what node 1's address answers."""


@dataclass
class World(CliNetwork):
    ENV = (("GPUM_WORKLOADS_DIR", "specs"),)
    FAILED = "gpum {args} failed:\n{stderr}"
    GPUM_TIMEOUT = 240
    KEYPAIR_AFTER = 0

    providers: dict[str, Pubkey] = field(kw_only=True)
    podman_env: dict[str, str] = field(kw_only=True)
    ports: dict[str, int] = field(kw_only=True, default_factory=dict)

    def diag(self) -> str:
        return "\n".join(f"--- worker_{n}\n{self.procs.tail(f'worker_{n}', 30)}"
                         for n in self.providers)

    def books(self) -> dict[str, int]:
        mint = self.client.fetch_market(self.market).payment_mint
        return {"user": self.balance("user"),
                "providers": sum(self.balance(f"owner_{n}") for n in self.providers),
                "fees": self.token_balance(pda.fee_vault_pda(self.market, self.client.program_id)),
                "supply": self.client.mint_supply(mint)}  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory,
          market_factory: Callable[..., Market]) -> Iterator[World]:  # fmt: skip
    workdir: Path = tmp_path_factory.mktemp("cluster-managed")
    podman_env = podman_setup(workdir, IMAGE)
    names = ["owner_p1", "owner_p2", "owner_p3", "worker_p1", "worker_p2", "worker_p3", "user",
             "validator"]
    m = market_factory(workdir, names, {
        "window_seconds": WINDOW, "max_missed_windows": 2, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0},
        stake={f"owner_p{i}": 10**10 for i in (1, 2, 3)} | {"validator": 10**10},
        payment={"user": 1_000 * 10**6})  # fmt: skip
    procs = Processes(workdir)
    providers = {n: pda.provider_pda(m.address, m.kps[f"owner_{n}"].pubkey()) for n in UDP}
    w = World(workdir, procs, m.url, m.client, m.keys, m.kps, m.address, providers=providers,
              podman_env=podman_env)  # fmt: skip
    try:
        for n, price in (("p1", "1.8"), ("p2", "3.6"), ("p3", "5.4")):
            w.ports[n] = free_port()
            _register(w, f"owner_{n}", f"worker_{n}", "west", price, f"http://127.0.0.1:{w.ports[n]}")  # type: ignore[arg-type]
        start_validator(w, free_port())
        for n, udp in UDP.items():
            _start_worker(w, n, providers[n], w.ports[n], udp)  # type: ignore[arg-type]
        yield w
    finally:
        jobs = [j.address for j in w.client.list_jobs(user=m.kps["user"].pubkey(), market=m.address)]
        procs.stop_all()
        for n in UDP:
            stop_reapers(workdir / n)
        remove_containers(jobs, podman_env)


def test_a_killed_node_is_replaced_and_node_0_reaches_its_successor_over_the_mesh(
        world: World) -> None:  # fmt: skip
    w = world
    before = w.books()
    argv = w.argv("user", "cluster", "create", "--market", str(w.market), "--gpu", "h100:1",
                  "--nodes", "2", "--hours", "0.1", "--image", IMAGE, "--region", "west",
                  "--name", "kept", "--timeout", "150s", "--managed", "--", "/bin/sh", "-c",
                  SCRIPT, output="json")  # fmt: skip
    ctl = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=w.env())  # fmt: skip
    lines: list[dict[str, Any]] = []

    def read() -> None:
        assert ctl.stdout is not None
        for line in ctl.stdout:
            lines.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    killed: list[subprocess.Popen] = []
    try:
        def started() -> dict[str, Any] | None:
            found = next((x for x in lines if "nodes" in x), None)
            assert found is not None or ctl.poll() is None, ctl.stderr.read()  # type: ignore[union-attr]
            return found

        created = wait_until("the cluster running", started, 200, diag=w.diag)
        assert created["managed"] is True and [n["provider"] for n in created["nodes"]] == [
            str(w.providers["p1"]), str(w.providers["p2"])]
        old1 = Pubkey.from_string(created["nodes"][1]["job"])

        def logs() -> dict[str, str]:
            return w.gpum_json("user", "cluster", "logs", "kept")["logs"]

        def ids(text: str, tag: str) -> list[str]:
            return [ln.split(": ", 1)[1] for ln in text.splitlines() if ln.startswith(tag)]

        def node0_reads(want: Callable[[str], bool]) -> Callable[[], dict[str, str] | None]:
            def check() -> dict[str, str] | None:
                g = logs()
                peer, me = ids(g["0"], "peer: "), ids(g["1"], "me: ")
                return g if peer and me and want(peer[-1]) and peer[-1] == me[0] else None
            return check

        first = wait_until("node 0 reading node 1's id over the mesh",
                           node0_reads(lambda _: True), 90,
                           diag=lambda: w.diag() + "\n" + json.dumps(logs())[-3000:])
        old_id = ids(first["1"], "me: ")[0]
        assert ids(first["0"], "peer: ")[-1] == old_id
        wait_until("node 1's first settled window", lambda: w.client.fetch_job(old1).last_window_end,
                   60, diag=w.diag)  # fmt: skip
        (proc,) = [p for n, p in w.procs.children if n == "worker_p2" and p.poll() is None]
        proc.kill()  # SIGKILL: its node's container and mesh live on, unproven
        proc.wait(30)
        killed.append(proc)

        def replaced() -> dict[str, Any] | None:
            s = w.gpum_json("user", "cluster", "status", "kept")
            return s if s["state"] == "running" and s["nodes"][1]["job"] != str(old1) else None

        status = wait_until("node 1 replaced and running", replaced, 150,
                            diag=lambda: w.diag() + "\n" + json.dumps(lines[-8:]))
        new1 = status["nodes"][1]
        assert new1["provider"] == str(w.providers["p3"]) and new1["state"] == "running"
        assert status["managed"]["mesh_version"] == 1
        (gone,) = status["managed"]["replaced"]
        assert (gone["rank"], gone["job"], gone["provider"]) == (1, str(old1), str(w.providers["p2"]))
        # Node 0's container was never restarted: its first id still leads its log, and what
        # node 1's address answers now is the successor's id.
        got = wait_until("node 0 reading the successor's id",
                         node0_reads(lambda seen: seen != old_id), 60, diag=w.diag)
        new_id = ids(got["1"], "me: ")[0]
        assert new_id != old_id and old_id in ids(got["0"], "peer: ")
        assert len(ids(got["0"], "me: ")) == 1
        events = [x["text"] for x in lines if "event" in x]
        assert any(t.startswith(f"node 1 (job {old1} on provider") and ") failed: " in t
                   for t in events), events
        assert any(t.startswith("node 1 runs again") for t in events), events
        down = w.gpum_json("user", "cluster", "down", "kept")
        assert ctl.wait(60) == 0  # `down` stopped the controller
        assert sorted(down["receipts"]) == ["0", "1"] and list(down["replaced"]) == [str(old1)]
        total = down["total"]
        assert total["paid"] + total["refunded"] == total["deposited"]
        after = w.books()
        assert before["user"] - after["user"] == total["paid"]
        received = (after["providers"] - before["providers"]) + (after["fees"] - before["fees"])
        assert received + (before["supply"] - after["supply"]) == total["paid"]
        assert w.client.list_jobs(user=w.kps["user"].pubkey(), market=w.market) == []
    finally:
        if ctl.poll() is None:
            ctl.kill()
        ctl.wait(30)
        reader.join(10)
        for pipe in (ctl.stdout, ctl.stderr):
            if pipe is not None:
                pipe.close()
        if killed:
            remove_containers([old1], w.podman_env)
