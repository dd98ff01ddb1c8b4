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
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from gpum_worker.localimage import INDEX_HTML
from harness import Market, WorkerNetwork, worker_network
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
class Net(WorkerNetwork):
    ENV = (*WorkerNetwork.ENV, ("XDG_CONFIG_HOME", "config"))
    OUTPUT = ""
    GPUM_TIMEOUT = 180
    FAILED = "gpum {args}:\n{stderr}\n{log}"


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory,
        market_factory: Callable[..., Market]) -> Iterator[Net]:
    workdir: Path = tmp_path_factory.mktemp("templates")
    m = market_factory(workdir, ["owner", "user", "validator", "worker"], {
        "window_seconds": 2, "max_missed_windows": 2, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0},
        stake={"owner": 10_000 * 10**6, "validator": 10_000 * 10**6},
        payment={"user": 1_000 * 10**6})
    with worker_network(Net, workdir, m, IMAGE, gpus=2, window=2) as net:
        yield net


def test_run_with_a_task_file_and_a_users_template_prints_the_url_with_its_token(net: Net) -> None:
    templates = net.workdir / "config" / "gpum" / "templates"
    templates.mkdir(parents=True, exist_ok=True)
    (templates / "web.toml").write_text(TEMPLATE)
    task = net.workdir / "task.toml"
    task.write_text('template = "web"\ntimeout = "150s"\nname = "web-1"\n'
                    '[resources]\ngpu = "h100:1"\nhours = "1m"\n')
    # The user's template is listed with its description.
    listing = net.run_gpum("user", "templates", ok=False)
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
