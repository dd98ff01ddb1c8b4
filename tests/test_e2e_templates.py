"""``gpum run -f task.toml`` with a template end to end: the local chain, a real worker with
podman + runc, a real validator node, and the user's own template in
``$XDG_CONFIG_HOME/gpum/templates/``.

The template runs the locally built busybox image's web server, draws a random token, passes
it to the container and prints the URL (``http://HOST:PORT/?token=...``) from the endpoint the
worker published, once the health check answered; the task file names the template and the
resources.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from gpu_market import pda
from gpu_market.processes import Processes, free_port, tool, wait_http
from gpum_worker.localimage import INDEX_HTML
from harness import Market, Network, podman_setup, remove_containers, start_validator_node
from solders.keypair import Keypair
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

IMAGE = "localhost/gpum-busybox:1"
TEMPLATE = f"""
description = "busybox's web server behind a random token"
image = "{IMAGE}"
command = ["/bin/sh", "-c"]
args = ["exec httpd -f -p 8080 -h /www"]
ports = [8080]
env = {{ WEB_TOKEN = "{{token}}" }}

[generate]
token = "hex:16"

[url]
port = 8080
pattern = "http://{{host}}:{{port}}/?token={{token}}"

[health]
path = "/"
timeout = "60s"
"""


@dataclass
class Net(Network):
    keys: dict[str, Path]
    kps: dict[str, Keypair]
    market: Pubkey
    provider: Pubkey
    podman_env: dict[str, str]
    jobs: list[Pubkey]

    def env(self) -> dict[str, str]:
        return {**os.environ, "GPUM_WORKLOADS_DIR": str(self.workdir / "saved-specs"),
                "XDG_CONFIG_HOME": str(self.workdir / "config")}

    def gpum(self, who: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        argv = [tool("gpum"), "--url", self.url, *args, "--keypair", str(self.keys[who])]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=self.env(), check=False)

    def gpum_json(self, who: str, *args: str) -> dict[str, Any]:
        r = self.gpum(who, "--output", "json", *args)
        assert r.returncode == 0, f"gpum {' '.join(args)}:\n{r.stderr}\n{self.procs.tail('worker', 30)}"
        return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory,
        market_factory: Callable[..., Market]) -> Iterator[Net]:
    workdir: Path = tmp_path_factory.mktemp("templates")
    podman_env = podman_setup(workdir, IMAGE)
    m = market_factory(workdir, ["owner", "user", "validator", "worker"], {
        "window_seconds": 2, "max_missed_windows": 2, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0},
        stake={"owner": 10_000 * 10**6, "validator": 10_000 * 10**6},
        payment={"user": 1_000 * 10**6})
    procs = Processes(workdir)
    created: list[Pubkey] = []
    try:
        worker_port, vport = free_port(), free_port()
        net = Net(workdir, procs, m.url, m.client, m.keys, m.kps, m.address,
                  pda.provider_pda(m.address, m.kps["owner"].pubkey()), podman_env, created)
        for who, args in [
            ("owner", ["provider", "register", "--market", str(m.address), "--worker-key",
                       str(m.kps["worker"].pubkey()), "--gpu-model", "Simulated H100",
                       "--gpu-count", "2", "--vram-mib", "81920", "--price", "3.6",
                       "--endpoint", f"http://127.0.0.1:{worker_port}"]),
            ("owner", ["provider", "stake", "--market", str(m.address), "1000"]),
            ("validator", ["validator", "register", "--market", str(m.address), "--endpoint",
                           f"http://127.0.0.1:{vport}", "--bond", "500"]),
        ]:
            r = net.gpum(who, *args)
            assert r.returncode == 0, r.stderr
        start_validator_node(procs, m.url, m.keys["validator"], m.address, vport,
                             workdir / "validator.sqlite", "--settle-every", "2")
        procs.start("worker", [
            tool("gpum-worker"), "run", "--simulate", "--gpus", "2", "--seed", "1",
            "--key", str(m.keys["worker"]), "--db", str(workdir / "outbox.sqlite"),
            "--window-seconds", "2", "--poll-seconds", "1", "--rpc-url", m.url,
            "--program-id", str(m.client.program_id), "--market", str(m.address),
            "--provider", str(net.provider),
            "--api-listen", f"127.0.0.1:{worker_port}", "--runtime", "podman",
            "--containers-conf", str(workdir / "containers.conf"), "--publish-host", "127.0.0.1"])
        wait_http(f"http://127.0.0.1:{worker_port}/v1/health", timeout=60)
        yield net
    finally:
        procs.stop_all()
        remove_containers(created, podman_env)


def test_run_with_a_task_file_and_a_users_template_prints_the_url_with_its_token(net: Net) -> None:
    templates = net.workdir / "config" / "gpum" / "templates"
    templates.mkdir(parents=True, exist_ok=True)
    (templates / "web.toml").write_text(TEMPLATE)
    task = net.workdir / "task.toml"
    task.write_text('template = "web"\ntimeout = "150s"\nname = "web-1"\n'
                    '[resources]\ngpu = "h100:1"\nhours = "1m"\n')
    # The user's template is listed with its description.
    listing = net.gpum("user", "templates")
    assert re.search(r"^web +busybox's web server behind a random token", listing.stdout, re.MULTILINE)
    # A dry run resolves the file and the template against the chain and sends nothing.
    plan = net.gpum_json("user", "run", "--market", str(net.market), "-f", str(task), "--dry-run")
    assert plan["dry_run"] is True and plan["image"] == IMAGE
    assert "url" not in plan
    # The real run: a flag (--hours) wins over the file's resources.hours.
    out = net.gpum_json("user", "run", "--market", str(net.market), "-f", str(task),
                        "--hours", "2m")
    job = Pubkey.from_string(out["job"])
    net.jobs.append(job)
    assert out["state"] == "running" and out["name"] == "web-1"
    assert Decimal(out["deposit"]) > Decimal(plan["deposit"])  # 2 minutes, not the file's 1
    (endpoint,) = out["endpoints"]
    m = re.fullmatch(rf"http://{re.escape(endpoint)}/\?token=([0-9a-f]{{32}})", out["url"])
    assert m, out["url"]
    token = m.group(1)
    assert out["health"].startswith("ok in "), out["health"]
    # The token the URL carries is the one the container was given.
    spec = json.loads((net.workdir / "saved-specs" / f"{job}.json").read_text())
    assert spec["env"] == {"WEB_TOKEN": token}
    with httpx.Client(timeout=10) as h:
        assert h.get(out["url"]).content == INDEX_HTML
    net.gpum_json("user", "job", "finish", str(job))
