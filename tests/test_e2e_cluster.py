"""Clusters end to end (``gpum cluster create|status|logs|down``): the local chain, two
providers whose real workers run podman and serve cluster meshes (WireGuard, wireguard-go), a
third provider whose worker never publishes a mesh key, and a validator node.

The module's world: a market with 2 s windows,

    P1  region "west", 1.8 per GPU-hour, 1 GPU   worker "worker_p1" (workdir/p1/), mesh UDP
    P2  region "west", 3.6 per GPU-hour, 1 GPU   worker "worker_p2" (workdir/p2/), mesh UDP
    P3  region "east", 0.9972 per GPU-hour, 1 GPU   a worker (in this process) that answers its
        health as cluster-capable and takes workloads, but never accepts a job on chain and
        never publishes a mesh key
    V   the validator node, the default committee

1. ``--dry-run`` shows the plan (one node on P1, one on P2, their prices and deposits) and
   sends nothing; ``--nodes 0``, more nodes than the offers hold and a balance short of every
   deposit are refused with no job created and no token moved.
2. Gang limit: a cluster placed on P3 and P1 (``--max-price 2``) never gets P3's key; after
   ``--timeout`` every job is released (P3's Open job cancelled, P1's finished before its
   container ran), the error names P3's node, and ``gpum cluster down`` closes P1's job with a
   full refund: the user's balance is back to the token.
3. Two nodes on P1 and P2 join one mesh: each container sees the environment contract, node 1
   fetches node 0's page over the mesh (``http://$MASTER_ADDR:8080/``), the cluster's endpoint
   (node 0's published port) serves, ``status`` says running and ``down`` closes both with
   receipts that conserve the user's tokens.
4. The README's Python script (``gpu_market.create_cluster``, ``cluster.endpoint``,
   ``cluster.down()``) does the same from a user's own process.
5. ``--template torchrun`` on P1 and P2 runs a 2-node ``torch.distributed`` all-reduce over gloo
   through the mesh (the node image from Debian's python3-torch,
   ``gpu_market.cluster_demo_image``); every rank prints the sum 3, and the tokens that left
   the user's wallet are exactly what the providers, the fee vault and the burn received.
6. ``--template ray``: node 0 runs the Ray head, node 1 joins it over the mesh (one token per
   cluster), and the user's driver on the head runs a task pinned to node 1, which answers
   with node 1's rank and mesh address (the image holds the pinned ``ray`` wheel: ``make
   ray``).
7. A UDP endpoint nobody can reach (P2's mesh ports dropped by the host's firewall): the
   containers run, but no WireGuard handshake completes; the cluster fails naming node 0,
   node 1 and node 1's endpoint, and ``down`` settles every token.
8. A node killed mid-run (P2's worker killed with SIGKILL, its container removed): ``status``
   says the cluster is degraded and names node 1 and why; ``down`` closes both jobs and the
   money is conserved. P2's worker is started again afterwards.

Both images are built once per content (``localhost/gpum-<name>:<digest>``) and kept.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from gpu_market import pda
from gpu_market.cluster_demo import COMMAND as ALLREDUCE_ARGS
from gpu_market.cluster_demo import allreduce_results
from gpu_market.cluster_demo_image import build_ray_image, build_torch_image
from gpu_market.processes import Processes, free_port, tool, wait_http
from gpum_worker.localimage import INDEX_HTML
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

pytestmark = pytest.mark.e2e

WINDOW = 2
IMAGE = "localhost/gpum-busybox:1"
UDP = {"p1": (52110, 52119), "p2": (52120, 52129)}
"""Each real worker's mesh UDP ports."""
CONTRACT = ("NODE_RANK", "NUM_NODES", "NODE_ADDR", "MASTER_ADDR", "MASTER_PORT", "GPUS_PER_NODE",
            "WORLD_SIZE", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
SCRIPT = (
    "env | grep -E '^(" + "|".join(CONTRACT) + ")='; echo \"NODE_IPS=$(echo $NODE_IPS)\"; "
    "if test \"$NODE_RANK\" = 0; then exec httpd -f -p 8080 -h /www; fi; i=0; "
    "until wget -qO- \"http://$MASTER_ADDR:8080/\"; do i=$((i+1)); "
    "if test $i -gt 90; then echo mesh-failed; exit 3; fi; sleep 1; done; "
    "echo mesh-ok; exec httpd -f -p 8080 -h /www"
)
"""Every node prints its contract; node 1 then reads node 0's page over the mesh."""
README_SCRIPT = '''\
cluster = gpu_market.create_cluster(gpu_type="A100", gpu_count=4, nodes=2, image="...", region="us-west")
print(cluster.endpoint)
cluster.down()
'''
"""The README's script (renter section, "Clusters"); the test runs it on this world."""
SCRIPT_RUN = (README_SCRIPT
              .replace('gpu_type="A100", gpu_count=4, nodes=2, image="...", region="us-west"',
                       f'gpu_type="h100", gpu_count=1, nodes=2, image="{IMAGE}", region="west",\n'
                       '                                    hours="0.05", ports=[8080], '
                       'command=["httpd", "-f", "-p", "8080", "-h", "/www"]')
              .replace("print(cluster.endpoint)", "print(cluster.endpoint, flush=True)\n"
                       "input()  # the test reads the endpoint meanwhile")
              .replace("cluster.down()", "receipts = cluster.down()\nprint(json.dumps("
                       "{r: rc.as_dict() for r, rc in receipts.items()}))"))
SCRIPT_RUN = "import json\n\nimport gpu_market\n\n" + SCRIPT_RUN


class FakeWorker(BaseHTTPRequestHandler):
    """P3's worker: cluster-capable by its health, takes any workload, never a mesh key."""

    worker_key = ""

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/health":
            self._answer(200, {"ok": True, "worker": self.worker_key, "runtime": "podman",
                               "cluster": {"udp_port": 51990, "free_ports": 4}})  # fmt: skip
        elif self.path.endswith("/mesh"):
            self._answer(503, {"error": "cluster_disabled", "message": "no mesh key yet"})
        else:
            self._answer(404, {"error": "unknown job"})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.endswith("/workload"):
            self._answer(200, {"state": "pending"})
        else:
            self._answer(503, {"error": "cluster_disabled", "message": "no mesh key yet"})


@dataclass
class World(CliNetwork):
    ENV = (("GPUM_WORKLOADS_DIR", "specs"),)
    FAILED = "gpum {args} failed:\n{stderr}"
    GPUM_TIMEOUT = 240
    KEYPAIR_AFTER = 0  # before the subcommand: what follows `--` is the nodes' command

    p1: Pubkey = field(kw_only=True)
    p2: Pubkey = field(kw_only=True)
    p3: Pubkey = field(kw_only=True)
    podman_env: dict[str, str] = field(kw_only=True)
    ports: dict[str, int] = field(kw_only=True, default_factory=dict)
    """Each real worker's API port, by provider name ("p1", "p2")."""

    def jobs_of(self, who: str) -> list[Any]:
        return self.client.list_jobs(user=self.kps[who].pubkey(), market=self.market)

    def diag(self) -> str:
        return "\n".join(f"--- {n}\n{self.procs.tail(n, 30)}" for n in ("worker_p1", "worker_p2"))

    def books(self) -> dict[str, int]:
        """Every payment-token balance a job's money can reach: the user's, the providers'
        owners', the market's fee vault, and the mint's supply (what was burned left it)."""
        mint = self.client.fetch_market(self.market).payment_mint
        return {"user": self.balance("user"),
                "providers": self.balance("owner_p1") + self.balance("owner_p2"),
                "fees": self.token_balance(pda.fee_vault_pda(self.market, self.client.program_id)),
                "supply": self.client.mint_supply(mint)}  # fmt: skip


def _assert_conserved(before: dict[str, int], after: dict[str, int], total: dict[str, int]) -> None:
    """The receipts add up, and the chain's balances moved by exactly what they say."""
    assert total["paid"] + total["refunded"] == total["deposited"], total
    assert before["user"] - after["user"] == total["paid"]
    received = (after["providers"] - before["providers"]) + (after["fees"] - before["fees"])
    assert received + (before["supply"] - after["supply"]) == total["paid"], (before, after, total)


def _register(w: World, owner: str, worker: str, region: str, price: str, endpoint: str) -> None:
    market = str(w.market)
    w.gpum(owner, "provider", "register", "--market", market, "--worker-key",
           str(w.kps[worker].pubkey()), "--gpu-model", "Simulated H100", "--gpu-count", "1",
           "--vram-mib", "81920", "--region", region, "--price", price, "--endpoint", endpoint)  # fmt: skip
    w.gpum(owner, "provider", "stake", "--market", market, "1000")


def _start_worker(w: World, name: str, provider: Pubkey, port: int, udp: tuple[int, int]) -> None:
    folder = w.workdir / name
    folder.mkdir(exist_ok=True)
    shutil.copy(w.workdir / "containers.conf", folder / "containers.conf")
    (folder / "worker.toml").write_text(
        f'[cluster]\nenabled = true\npublic_host = "127.0.0.1"\nudp_ports = "{udp[0]}-{udp[1]}"\n'
        'wireguard = "userspace"\n')  # fmt: skip
    w.procs.start(f"worker_{name}", [
        tool("gpum-worker"), "run", "--simulate", "--gpus", "1", "--seed", "1",
        "--config", str(folder / "worker.toml"), "--key", str(w.keys[f"worker_{name}"]),
        "--db", str(folder / "outbox.sqlite"), "--window-seconds", str(WINDOW),
        "--poll-seconds", "1", "--rpc-url", w.url, "--program-id", str(w.client.program_id),
        "--market", str(w.market), "--provider", str(provider),
        "--api-listen", f"127.0.0.1:{port}", "--runtime", "podman",
        "--containers-conf", str(folder / "containers.conf"), "--publish-host", "127.0.0.1"])
    wait_http(f"http://127.0.0.1:{port}/v1/health", timeout=60)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory,
          market_factory: Callable[..., Market]) -> Iterator[World]:  # fmt: skip
    workdir: Path = tmp_path_factory.mktemp("cluster")
    podman_env = podman_setup(workdir, IMAGE)
    names = ["owner_p1", "owner_p2", "owner_p3", "worker_p1", "worker_p2", "worker_p3", "user",
             "poor", "validator"]
    m = market_factory(workdir, names, {
        "window_seconds": WINDOW, "max_missed_windows": 2, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0},
        stake={"owner_p1": 10**10, "owner_p2": 10**10, "owner_p3": 10**10, "validator": 10**10},
        payment={"user": 1_000 * 10**6, "poor": 150_000})  # fmt: skip
    procs = Processes(workdir)
    key = lambda n: pda.provider_pda(m.address, m.kps[n].pubkey())
    w = World(workdir, procs, m.url, m.client, m.keys, m.kps, m.address, p1=key("owner_p1"),
              p2=key("owner_p2"), p3=key("owner_p3"), podman_env=podman_env)  # fmt: skip
    FakeWorker.worker_key = str(m.kps["worker_p3"].pubkey())
    fake = ThreadingHTTPServer(("127.0.0.1", 0), FakeWorker)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    ports = {"p1": free_port(), "p2": free_port()}
    try:
        _register(w, "owner_p1", "worker_p1", "west", "1.8", f"http://127.0.0.1:{ports['p1']}")
        _register(w, "owner_p2", "worker_p2", "west", "3.6", f"http://127.0.0.1:{ports['p2']}")
        _register(w, "owner_p3", "worker_p3", "east", "0.9972",
                  f"http://127.0.0.1:{fake.server_address[1]}")  # fmt: skip
        start_validator(w, free_port())
        w.ports.update(ports)
        _start_worker(w, "p1", w.p1, ports["p1"], UDP["p1"])
        _start_worker(w, "p2", w.p2, ports["p2"], UDP["p2"])
        yield w
    finally:
        fake.shutdown()
        fake.server_close()
        jobs = [j.address for who in ("user", "poor") for j in w.jobs_of(who)]
        procs.stop_all()
        for folder in (workdir / "p1", workdir / "p2"):
            stop_reapers(folder)
        remove_containers(jobs, podman_env)


def _cluster(w: World, *args: str, ok: bool = True, timeout: float | None = None) -> Any:
    r = w.run_gpum("user", "cluster", *args, ok=ok, output="json", timeout=timeout)
    return r if not ok else json.loads(r.stdout.strip().splitlines()[-1])


def test_a_dry_run_shows_the_plan_and_bad_input_moves_no_money(world: World) -> None:
    w = world
    before, poor = w.balance("user"), w.balance("poor")
    plan = _cluster(w, "create", "--market", str(w.market), "--gpu", "h100:1", "--nodes", "2",
                    "--hours", "0.05", "--image", IMAGE, "--region", "west", "--dry-run")  # fmt: skip
    assert plan["dry_run"] is True and plan["providers"] == 2
    assert [n["provider"] for n in plan["nodes"]] == [str(w.p1), str(w.p2)]
    assert [n["price_per_gpu_hour"] for n in plan["nodes"]] == ["1.8", "3.6"]
    assert [n["deposit"] for n in plan["nodes"]] == ["0.09", "0.18"]  # 0.05 h each
    assert plan["cost_per_hour"] == "5.4" and plan["deposit"] == "0.27"
    base = ["create", "--market", str(w.market), "--gpu", "h100:1", "--hours", "0.05", "--image",
            IMAGE]  # fmt: skip
    r = w.run_gpum("user", "cluster", *base, "--nodes", "0", ok=False)
    assert r.returncode == 2 and "a cluster has 2..64 nodes" in r.stderr
    r = w.run_gpum("user", "cluster", *base, "--nodes", "3", "--region", "west", ok=False)
    assert r.returncode == 1 and "only 2 node(s) of 1 GPU(s) fit" in r.stderr, r.stderr
    r = w.run_gpum("poor", "cluster", *base, "--nodes", "2", "--region", "west", ok=False)
    assert r.returncode == 1 and "(it covers 1 of them)" in r.stderr, r.stderr
    assert "nothing was sent" in r.stderr
    assert w.balance("user") == before and w.balance("poor") == poor
    assert w.jobs_of("user") == [] and w.jobs_of("poor") == []
    # `gpum offers` says who serves cluster nodes (each worker's health names a mesh UDP port)
    offers = {o["provider"]: o["cluster"] for o in w.gpum_json("user", "offers", "--market",
                                                              str(w.market), "cluster=true")}
    assert offers == {str(w.p1): True, str(w.p2): True, str(w.p3): True}


def test_a_node_whose_key_never_comes_releases_the_cluster_and_refunds_every_token(
        world: World) -> None:  # fmt: skip
    w = world
    before = w.balance("user")
    r = w.run_gpum("user", "cluster", "create", "--market", str(w.market), "--gpu", "h100:1",
                   "--nodes", "2", "--hours", "0.05", "--image", IMAGE, "--max-price", "2",
                   "--timeout", "40s", "--name", "stuck", "--", "/bin/sh", "-c", "sleep 600",
                   ok=False)  # fmt: skip
    assert r.returncode == 1, r.stderr
    err = r.stderr
    assert "cluster stuck did not start: node 0 (job" in err and f"on provider {w.p3}" in err
    assert "'collecting the mesh keys'" in err and "no mesh key yet" in err, err
    jobs = {j.provider: j for j in w.jobs_of("user")}
    assert set(jobs) == {w.p3, w.p1}
    assert jobs[w.p3].status == "cancelled"  # never accepted: its deposit came back at once
    assert jobs[w.p1].status in ("finishing", "failed")  # accepted, stopped before it ran
    listed = _cluster(w, "list")["clusters"]
    assert [(c["name"], c["state"]) for c in listed] == [("stuck", "failed")]
    down = _cluster(w, "down", "stuck")
    assert down["total"]["paid"] == 0 and down["total"]["refunded"] == down["total"]["deposited"]
    assert w.jobs_of("user") == [] and w.balance("user") == before


def test_two_nodes_join_one_mesh_with_the_environment_contract(world: World) -> None:
    w = world
    before = w.balance("user")
    out = _cluster(w, "create", "--market", str(w.market), "--gpu", "h100:1", "--nodes", "2",
                   "--hours", "0.05", "--image", IMAGE, "--region", "west", "--port", "8080",
                   "--name", "pair", "--timeout", "150s", "--", "/bin/sh", "-c", SCRIPT,
                   timeout=240)  # fmt: skip
    assert out["state"] == "running" and out["providers"] == 2
    assert [n["provider"] for n in out["nodes"]] == [str(w.p1), str(w.p2)]
    endpoint = out["endpoint"]
    assert endpoint == out["nodes"][0]["endpoints"][0] and endpoint.startswith("127.0.0.1:")
    with httpx.Client(timeout=10) as h:
        assert h.get(f"http://{endpoint}/").content == INDEX_HTML

    def logs() -> dict[str, str] | None:
        got = _cluster(w, "logs", "pair")["logs"]
        return got if "mesh-ok" in got["1"] or "mesh-failed" in got["1"] else None

    got = wait_until("node 1 reading node 0's page over the mesh", logs, 120, diag=w.diag)
    assert "mesh-ok" in got["1"] and INDEX_HTML.decode().strip() in got["1"], got["1"]
    env = [dict(re.findall(r"^([A-Z_]+)=(.*)$", got[r], re.MULTILINE)) for r in ("0", "1")]
    subnet = env[0]["MASTER_ADDR"].rsplit(".", 1)[0]
    assert re.fullmatch(r"10\.77\.\d{1,3}", subnet)
    for rank, e in enumerate(env):
        assert e["NODE_RANK"] == str(rank) and e["NUM_NODES"] == "2" and e["WORLD_SIZE"] == "2"
        assert e["GPUS_PER_NODE"] == "1" and e["MASTER_PORT"] == "29500"
        assert e["MASTER_ADDR"] == f"{subnet}.1" and e["NODE_ADDR"] == f"{subnet}.{rank + 1}"
        assert e["NODE_IPS"] == f"{subnet}.1 {subnet}.2"
        assert e["NCCL_SOCKET_IFNAME"] == e["GLOO_SOCKET_IFNAME"] == "gpum0"
    status = _cluster(w, "status", "pair")
    assert status["state"] == "running", status
    for name in ("p1", "p2"):  # the next cluster on these hosts takes another subnet
        health = httpx.get(f"http://127.0.0.1:{w.ports[name]}/v1/health", timeout=10).json()
        assert health["cluster"]["subnets_used"] == [int(subnet.rsplit(".", 1)[1])]
    assert [n["state"] for n in status["nodes"]] == ["running", "running"]
    down = _cluster(w, "down", "pair")
    total = down["total"]
    assert total["deposited"] == 90_000 + 180_000
    assert total["paid"] + total["refunded"] == total["deposited"]
    assert w.jobs_of("user") == [] and w.balance("user") == before - total["paid"]
    assert _cluster(w, "status", "pair")["state"] == "down"


def test_the_readme_script_creates_a_cluster_and_takes_it_down(world: World) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert f"```python\n{README_SCRIPT}```" in readme
    w = world
    before = w.balance("user")
    config = w.workdir / "solana-config.yml"
    config.write_text(f"json_rpc_url: {w.url}\nkeypair_path: {w.keys['user']}\n")
    env = {**w.env(), "GPUM_SOLANA_CONFIG": str(config), "GPUM_MARKET": str(w.market)}
    p = subprocess.Popen([sys.executable, "-c", SCRIPT_RUN], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        endpoint = p.stdout.readline().strip()
        assert endpoint.startswith("127.0.0.1:"), p.stderr.read() if p.poll() is not None else endpoint
        with httpx.Client(timeout=10) as h:
            assert h.get(f"http://{endpoint}/").content == INDEX_HTML
        jobs = w.jobs_of("user")
        assert sorted(str(j.provider) for j in jobs) == sorted([str(w.p1), str(w.p2)])
        assert all(j.status == "running" for j in jobs)
        out, err = p.communicate("\n", timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    receipts = json.loads(out.strip().splitlines()[-1])
    assert sorted(receipts) == ["0", "1"]
    paid = sum(r["paid"] for r in receipts.values())
    assert all(r["paid"] + r["refunded"] == r["deposited"] for r in receipts.values())
    assert w.jobs_of("user") == [] and w.balance("user") == before - paid


@pytest.fixture(scope="module")
def torch_image(world: World) -> str:
    """The node image with Debian's python3-torch (built once per content, then kept)."""
    return build_torch_image(env=world.podman_env)


@pytest.fixture(scope="module")
def ray_image(world: World) -> str:
    """The node image with the pinned Ray (``make ray`` installs it once)."""
    return build_ray_image(env=world.podman_env)


def _node_lines(w: World, name: str, needle: str, count: int, what: str) -> list[dict[str, Any]]:
    """The JSON objects whose first key is ``needle`` that the nodes printed, once ``count``
    of them are there (torchrun prefixes each line)."""
    def found() -> list[dict[str, Any]] | None:
        got = []
        for text in _cluster(w, "logs", name)["logs"].values():
            for line in text.splitlines():
                at = line.find('{"' + needle + '"')
                if at >= 0:
                    got.append(json.loads(line[at:])[needle])
        return got if len(got) >= count else None

    return wait_until(what, found, 150, diag=lambda: w.diag() + "\n" + json.dumps(
        _cluster(w, "logs", name)["logs"])[-3000:])


def test_a_torchrun_all_reduce_runs_across_two_providers(world: World, torch_image: str) -> None:
    w = world
    before = w.books()
    out = _cluster(w, "create", "--market", str(w.market), "--gpu", "h100:1", "--nodes", "2",
                   "--hours", "0.05", "--template", "torchrun", "--image", torch_image,
                   "--region", "west", "--name", "allreduce", "--timeout", "150s", "--",
                   *ALLREDUCE_ARGS, timeout=240)  # fmt: skip
    assert out["template"] == "torchrun" and out["providers"] == 2
    assert [n["provider"] for n in out["nodes"]] == [str(w.p1), str(w.p2)]
    _node_lines(w, "allreduce", "allreduce", 2, "both ranks' all-reduce")
    results = allreduce_results(_cluster(w, "logs", "allreduce")["logs"])
    assert [(r["rank"], r["node_rank"]) for r in results] == [(0, 0), (1, 1)]
    assert all(r["world_size"] == 2 and r["sum"] == r["expected"] == 3.0 and r["ok"]
               for r in results), results  # 1 + 2, summed over gloo through the mesh
    down = _cluster(w, "down", "allreduce")
    assert down["total"]["deposited"] == 90_000 + 180_000
    _assert_conserved(before, w.books(), down["total"])
    assert w.jobs_of("user") == []


def test_a_ray_head_and_worker_run_a_task_across_nodes(world: World, ray_image: str) -> None:
    w = world
    before = w.books()
    out = _cluster(w, "create", "--market", str(w.market), "--gpu", "h100:1", "--nodes", "2",
                   "--hours", "0.05", "--template", "ray", "--image", ray_image, "--region",
                   "west", "--name", "ray", "--env", "RAY_START_ARGS=--num-cpus=1",
                   "--timeout", "150s", "--", "python3", "/opt/gpum/ray_task.py",
                   timeout=240)  # fmt: skip
    assert out["template"] == "ray" and out["providers"] == 2
    (ray,) = _node_lines(w, "ray", "ray", 1, "the Ray driver's answer")
    assert ray["driver_rank"] == 0 and ray["nodes"] == 2, ray
    (task,) = ray["tasks"]
    assert task["node_rank"] == 1, ray  # it ran on the other node, the worker of P2
    subnet = task["node_addr"].rsplit(".", 1)[0]
    assert re.fullmatch(r"10\.77\.\d{1,3}", subnet) and task["node_addr"] == f"{subnet}.2"
    logs = _cluster(w, "logs", "ray")["logs"]
    assert "Ray runtime started" in logs["0"], logs["0"][-2000:]
    down = _cluster(w, "down", "ray")
    _assert_conserved(before, w.books(), down["total"])
    assert w.jobs_of("user") == []


BLOCK_TABLE = "gpum_test_unreachable"


def test_a_udp_endpoint_nobody_reaches_fails_the_cluster_naming_the_node(world: World) -> None:
    w = world
    before = w.books()
    lo, hi = UDP["p2"]
    rules = (f"table inet {BLOCK_TABLE} {{\n  chain input {{\n    type filter hook input "
             f"priority -10; policy accept;\n    udp dport {lo}-{hi} drop\n  }}\n}}\n")
    subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True, timeout=30)
    try:
        r = w.run_gpum("user", "cluster", "create", "--market", str(w.market), "--gpu",
                       "h100:1", "--nodes", "2", "--hours", "0.05", "--image", IMAGE, "--region",
                       "west", "--name", "walled", "--timeout", "120s", "--", "/bin/sh", "-c",
                       "exec sleep 600", ok=False, timeout=240)  # fmt: skip
    finally:
        subprocess.run(["nft", "delete", "table", "inet", BLOCK_TABLE], check=False, timeout=30)
    assert r.returncode == 1, r.stderr
    err = " ".join(r.stderr.split())
    assert "cluster walled did not start: node 0 (job" in err and f"on provider {w.p1})" in err
    assert re.search(rf"had no WireGuard handshake with node 1 \(provider {w.p2}\) at "
                     rf"127\.0\.0\.1:({'|'.join(str(p) for p in range(lo, hi + 1))}) within "
                     r"\d+ s: UDP between them does not get through", err), err
    assert "finished (billing stopped)" in err
    assert {j.status for j in w.jobs_of("user")} <= {"finishing", "failed"}
    down = _cluster(w, "down", "walled")
    _assert_conserved(before, w.books(), down["total"])
    assert w.jobs_of("user") == []


def test_a_node_killed_mid_run_is_named_and_down_releases_everything(world: World) -> None:
    w = world
    before = w.books()
    out = _cluster(w, "create", "--market", str(w.market), "--gpu", "h100:1", "--nodes", "2",
                   "--hours", "0.05", "--image", IMAGE, "--region", "west", "--name", "crash",
                   "--timeout", "120s", "--", "/bin/sh", "-c", "exec sleep 600",
                   timeout=240)  # fmt: skip
    node1 = out["nodes"][1]
    assert node1["provider"] == str(w.p2)
    job1 = Pubkey.from_string(node1["job"])
    # Its committee has seen it proven (a settled window), so it watches for its downtime.
    wait_until("node 1's first settled window", lambda: w.client.fetch_job(job1).last_window_end,
               60, diag=w.diag)  # fmt: skip
    (proc,) = [p for n, p in w.procs.children if n == "worker_p2" and p.poll() is None]
    try:
        proc.kill()  # SIGKILL: no goodbye, no cleanup
        proc.wait(30)
        remove_containers([job1], w.podman_env)
        status = _cluster(w, "status", "crash")
        assert status["state"] == "degraded", status
        n0, n1 = status["nodes"]
        assert (n0["state"], n0["problem"]) == ("running", None)
        assert n1["state"] is None and n1["problem"].startswith(
            ("its worker does not answer", "its job is failed")), n1  # before, after downtime

        def failed() -> dict[str, Any] | None:
            # The committee slashes the missed windows, or anyone expires the silent job once
            # the chain allows it: either way the chain fails node 1's job.
            if w.client.fetch_job(job1).status == "running":
                try:
                    w.client.expire_job(w.kps["user"], job1)
                except Exception:  # noqa: BLE001, S110 - not expirable yet
                    pass
            s = _cluster(w, "status", "crash")
            return s if s["nodes"][1]["status"] == "failed" else None

        status = wait_until("node 1's job failed on chain", failed, 180, diag=w.diag)
        assert status["state"] == "degraded" and status["nodes"][0]["problem"] is None
        assert status["nodes"][1]["problem"].startswith(
            "its job is failed: its provider stopped proving it"), status
        text = w.run_gpum("user", "cluster", "status", "crash", output="text").stdout
        assert f"node 1: job {node1['job']} failed, container -, -; its job is failed: its " \
               "provider stopped proving it" in text, text
        assert "`gpum cluster down crash` stops the cluster" in text, text
        down = _cluster(w, "down", "crash")
        assert sorted(down["receipts"]) == ["0", "1"]
        _assert_conserved(before, w.books(), down["total"])
        assert w.jobs_of("user") == []
    finally:
        if proc.poll() is not None:
            _start_worker(w, "p2", w.p2, w.ports["p2"], UDP["p2"])
