"""The cluster demo: a 2-node torchrun all-reduce over gloo across two providers, paid end to
end on the local chain (``make demo-cluster``; ``python -m gpu_market.cluster_demo``).

Starts the local chain, creates the mints and the market, two staked providers P1 and P2 (one
simulated GPU each; their workers serve cluster nodes: WireGuard through wireguard-go, UDP
ports on 127.0.0.1) and one validator node, and builds the node image from this machine's
Debian ``python3-torch`` (:mod:`gpu_market.cluster_demo_image`). Then, as a user would:

    gpum cluster create --gpu h100:1 --nodes 2 --template torchrun
        --image localhost/gpum-torch:<digest> -- --redirects 2 --tee 1 /opt/gpum/allreduce.py
    gpum cluster logs NAME      every rank's sum of (rank + 1) over gloo, through the mesh
    gpum cluster down NAME      both jobs closed, receipts

(``--redirects 2 --tee 1``: Debian's torch 1.13 on Python 3.11 cannot parse torchrun's
default of ``0`` for either, so the demo names values it can.) The torchrun template sets
``finish_on_exit``: each node's job finishes when its torchrun exits. The last line printed is
one JSON object: ``{"cluster": {"nodes": 2, "providers": 2, "allreduce_ok": true,
"world_size", "sums", "seconds_to_running", "deposited", "paid", "refunded", "conserved"}}``,
every amount read back from the chain (``conserved``: what left the user's wallet is what the
two jobs paid).

Guarantees: every process it starts is stopped when it returns, on failure and on Ctrl-C; all
state lives in a fresh temporary directory (``--workdir`` keeps it). The world (chain, market,
validator, providers) is :func:`start_local_world`, which ``bench/cluster.py`` uses too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .demo import CONTAINERS_CONF
from .processes import (
    ProcessError,
    Processes,
    free_port,
    start_localnet,
    tool,
    wait_http,
    write_keypair,
)

__all__ = ["COMMAND", "ClusterDemoError", "LocalWorld", "allreduce_results", "main", "run_cluster_demo",
           "start_local_world"]

DECIMALS = 6
UNIT = 10**DECIMALS
WINDOW = 2
COMMAND = ("--redirects", "2", "--tee", "1", "/opt/gpum/allreduce.py")


class ClusterDemoError(RuntimeError):
    """The demo could not complete; the message says which step and why."""


def _run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                       env={**os.environ, **(env or {})})  # fmt: skip
    if r.returncode != 0:
        raise ClusterDemoError(f"`{' '.join(argv[:6])} ...` failed: {r.stderr.strip()[-1500:]}")
    return r.stdout


def allreduce_results(logs: dict[str, str]) -> list[dict[str, Any]]:
    """The ``allreduce`` objects the ranks printed (torchrun prefixes each line)."""
    found = []
    for text in logs.values():
        for line in text.splitlines():
            start = line.find('{"allreduce"')
            if start >= 0:
                try:
                    found.append(json.loads(line[start:])["allreduce"])
                except (ValueError, KeyError):
                    continue
    return sorted(found, key=lambda r: r["rank"])


@dataclass
class LocalWorld:
    """The local chain with a market, a validator node and providers whose workers serve
    cluster nodes (:func:`start_local_world`); ``cli(who, *args)`` runs ``gpum --output
    json`` as party ``who`` and returns its last line's object."""

    workdir: Path
    procs: Processes
    url: str
    client: Any
    market: str
    keys: dict[str, Path]
    kps: dict[str, Any]
    env: dict[str, str]
    containers_conf: Path
    providers: list[str] = field(default_factory=list)
    user_account: Any = None

    def cli(self, who: str, *args: str, timeout: float = 600) -> Any:
        out = _run([tool("gpum"), "--url", self.url, "--output", "json", "--keypair",
                    str(self.keys[who]), *args], self.env, timeout)  # fmt: skip
        return json.loads(out.strip().splitlines()[-1])

    def close(self) -> None:
        """Stop every process it started (the workers' reapers too) and the RPC client."""
        self.procs.stop_all()
        for i in range(1, len(self.providers) + 1):
            _stop_reaper(self.workdir / f"p{i}")
        self.client.close()


def start_local_world(workdir: Path, providers: Sequence[tuple[str, int]], *, gpus: int = 1,
                      user_tokens: int = 100, say: Any = print) -> LocalWorld:  # fmt: skip
    """Start the local chain and build the world (module docstring) in ``workdir``: one
    provider per ``(price per GPU-hour, first mesh UDP port)`` of ``providers`` (P1, P2, ...,
    ``gpus`` simulated GPUs each, region "localnet", 10 UDP ports each) and a user holding
    ``user_tokens``. ``close()`` it; on failure everything started is stopped."""
    from solders.keypair import Keypair

    from . import tokens
    from .client import GpuMarketClient

    procs = Processes(workdir)
    client = None
    try:
        url = start_localnet(procs).url
        say(f"local chain       {url}")
        owners = [f"owner{i}" for i in range(1, len(providers) + 1)]
        names = ("admin", *owners, *(f"worker{i}" for i in range(1, len(providers) + 1)),
                 "user", "validator")
        kps = {n: Keypair() for n in names}
        keys = {n: write_keypair(workdir / f"{n}.json", k) for n, k in kps.items()}
        client = GpuMarketClient(url, payer=kps["admin"])
        for kp in kps.values():
            client.airdrop(kp.pubkey(), 10 * 10**9)
        admin = kps["admin"]
        stake_mint = tokens.create_mint(client, admin, DECIMALS)
        payment_mint = tokens.create_mint(client, admin, DECIMALS)
        for n, mint, amount in ([(o, stake_mint, 10_000) for o in owners]
                                + [("validator", stake_mint, 1_000),
                                   ("user", payment_mint, user_tokens)]):  # fmt: skip
            acct = tokens.create_ata(client, admin, kps[n].pubkey(), mint)
            tokens.mint_to(client, mint, acct, admin, amount * UNIT)
        env = {"GPUM_DATA_DIR": str(workdir / "gpum-data"),
               "GPUM_WORKLOADS_DIR": str(workdir / "specs")}  # fmt: skip
        conf = workdir / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        w = LocalWorld(workdir, procs, url, client, "", keys, kps, env, conf,
                       user_account=tokens.ata(kps["user"].pubkey(), payment_mint))  # fmt: skip
        w.market = w.cli("admin", "market", "init", "--stake-mint", str(stake_mint),
                         "--payment-mint", str(payment_mint), "--window-seconds", str(WINDOW),
                         "--max-missed-windows", "2", "--min-stake-per-gpu", "100",
                         "--validator-min-bond", "100")["market"]  # fmt: skip
        say(f"market            {w.market}")
        vport = free_port()
        w.cli("validator", "validator", "register", "--market", w.market, "--endpoint",
              f"http://127.0.0.1:{vport}", "--bond", "500")  # fmt: skip
        procs.start("validator", [tool("gpum-validator"), "run", "--url", url, "--keypair",
                                  str(keys["validator"]), "--market", w.market, "--listen",
                                  f"127.0.0.1:{vport}", "--db", str(workdir / "validator.sqlite"),
                                  "--settle-every", "2"])  # fmt: skip
        wait_http(f"http://127.0.0.1:{vport}/health", timeout=60)
        for i, (price, udp) in enumerate(providers, start=1):
            w.providers.append(_start_provider(w, i, price, udp, gpus, say))
        return w
    except BaseException:
        procs.stop_all()
        for i in range(1, len(providers) + 1):
            _stop_reaper(workdir / f"p{i}")
        if client is not None:
            client.close()
        raise


def _start_provider(w: LocalWorld, i: int, price: str, udp: int, gpus: int, say: Any) -> str:
    """Register, stake and start provider P``i``'s worker (mesh UDP ``udp``..``udp+9``)."""
    from solders.pubkey import Pubkey

    from . import pda

    port = free_port()
    w.cli(f"owner{i}", "provider", "register", "--market", w.market, "--worker-key",
          str(w.kps[f"worker{i}"].pubkey()), "--gpu-model", "Simulated H100", "--gpu-count",
          str(gpus), "--vram-mib", "81920", "--region", "localnet", "--price", price,
          "--endpoint", f"http://127.0.0.1:{port}")  # fmt: skip
    w.cli(f"owner{i}", "provider", "stake", "--market", w.market, str(1000 * gpus))
    folder = w.workdir / f"p{i}"
    folder.mkdir(exist_ok=True)
    (folder / "worker.toml").write_text(
        f'[cluster]\nenabled = true\npublic_host = "127.0.0.1"\n'
        f'udp_ports = "{udp}-{udp + 9}"\nwireguard = "userspace"\n')  # fmt: skip
    provider = pda.provider_pda(Pubkey.from_string(w.market), w.kps[f"owner{i}"].pubkey())
    w.procs.start(f"worker{i}", [
        tool("gpum-worker"), "run", "--simulate", "--gpus", str(gpus), "--seed", str(i),
        "--config", str(folder / "worker.toml"), "--key", str(w.keys[f"worker{i}"]),
        "--db", str(folder / "outbox.sqlite"), "--window-seconds", str(WINDOW),
        "--poll-seconds", "1", "--rpc-url", w.url, "--program-id", str(w.client.program_id),
        "--market", w.market, "--provider", str(provider), "--api-listen",
        f"127.0.0.1:{port}", "--runtime", "podman", "--containers-conf", str(w.containers_conf),
        "--publish-host", "127.0.0.1"])  # fmt: skip
    wait_http(f"http://127.0.0.1:{port}/v1/health", timeout=60)
    say(f"provider P{i}       {provider} (price {price} per GPU-hour, {gpus} GPU(s), mesh UDP "
        f"{udp}+)")
    return str(provider)


def run_cluster_demo(workdir: Path, *, timeout: float = 300, say: Any = print) -> dict[str, Any]:
    """Runs the whole flow in ``workdir``; returns the summary read back from the chain."""
    from .cluster_demo_image import build_torch_image

    w = start_local_world(workdir, [("1.8", 52210), ("3.6", 52220)], say=say)
    try:
        say("node image        building from this machine's python3-torch (podman import)")
        image = build_torch_image(env={"CONTAINERS_CONF": str(w.containers_conf)})
        before = w.client.token_balance(w.user_account)
        started = time.monotonic()
        out = w.cli("user", "cluster", "create", "--market", w.market, "--gpu", "h100:1",
                    "--nodes", "2", "--hours", "0.05", "--template", "torchrun", "--image",
                    image, "--name", "allreduce", "--timeout", str(int(timeout)), "--",
                    *COMMAND)  # fmt: skip
        seconds = round(time.monotonic() - started, 1)
        say(f"cluster           {out['cluster']} running on {out['providers']} providers after "
            f"{seconds} s: {', '.join(n['job'] for n in out['nodes'])}")
        results: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(results) < 2 and time.monotonic() < deadline:
            results = allreduce_results(w.cli("user", "cluster", "logs", "allreduce")["logs"])
            if len(results) < 2:
                time.sleep(1)
        if len(results) < 2:
            logs = w.cli("user", "cluster", "logs", "allreduce")["logs"]
            raise ClusterDemoError(f"the all-reduce did not report from both ranks within "
                                   f"{timeout:g} s; logs: {json.dumps(logs)[-2000:]}")  # fmt: skip
        for r in results:
            say(f"rank {r['rank']} (node {r['node_rank']})  all_reduce(rank + 1) = {r['sum']:g}"
                f" (expected {r['expected']:g})")
        down = w.cli("user", "cluster", "down", "allreduce")
        after = w.client.token_balance(w.user_account)
        total = down["total"]
        return {"cluster": {
            "nodes": 2, "providers": len({n["provider"] for n in out["nodes"]}),
            "allreduce_ok": all(r["ok"] for r in results) and len(results) == 2,
            "world_size": results[0]["world_size"], "sums": [r["sum"] for r in results],
            "seconds_to_running": seconds, "deposited": total["deposited"],
            "paid": total["paid"], "refunded": total["refunded"],
            "conserved": before - after == total["paid"]
            and total["paid"] + total["refunded"] == total["deposited"]}}  # fmt: skip
    finally:
        w.close()


def _stop_reaper(folder: Path) -> None:
    """Stop the reaper a worker started (detached) for its database in ``folder``: the
    process holding the lock ``outbox.reaper.lock``, whose pid is written in it."""
    import fcntl
    import signal

    try:
        fd = os.open(folder / "outbox.reaper.lock", os.O_RDONLY)
    except OSError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return  # nobody holds it: no reaper runs
        except BlockingIOError:
            text = os.read(fd, 32).decode().strip()
        if text.isdigit():
            try:
                os.kill(int(text), signal.SIGTERM)
            except ProcessLookupError:
                pass
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_market.cluster_demo",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep all state here (default: a fresh temporary directory)")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds the cluster has to start, and the all-reduce to report")
    args = parser.parse_args(argv)
    try:
        if args.workdir is not None:
            args.workdir.mkdir(parents=True, exist_ok=True)
            summary = run_cluster_demo(args.workdir, timeout=args.timeout)
        else:
            with tempfile.TemporaryDirectory(prefix="gpum-cluster-demo-") as tmp:
                summary = run_cluster_demo(Path(tmp), timeout=args.timeout)
    except (ClusterDemoError, ProcessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    ok = summary["cluster"]["allreduce_ok"] and summary["cluster"]["conserved"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
