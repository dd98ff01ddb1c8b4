"""``gpu_market.deploy(...)`` end to end: the README's few-line script on the local chain, a
real worker with podman + runc and a real validator node.

One module-wide network: ``gpum-localnet``, a market with 2 s windows (a grace of 8 s),
provider P (4 simulated GPUs, price 0.001 per GPU-second; its worker serves its API and runs
podman), one validator node V (the default committee). The script runs as a user would run
it: its own Python process, the RPC URL and keypair from the Solana CLI config
(``GPUM_SOLANA_CONFIG``), the market from ``GPUM_MARKET``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from gpu_market.processes import Processes
from gpum_worker.localimage import INDEX_HTML
from harness import Market, WorkerNetwork, start_worker_network, wait_until, worker_network
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

WINDOW = 2
IMAGE = "localhost/gpum-busybox:1"
README_SCRIPT = '''\
import gpu_market

d = gpu_market.deploy(gpu="H100:1", image="jupyter/base-notebook", ports=[8888], hours=2)
print(d.endpoint)
print(d.logs(tail=20))
print(d.stop())
'''
"""The README's script (renter section); the test runs it with this network's image."""
SCRIPT = (README_SCRIPT
          .replace('image="jupyter/base-notebook", ports=[8888], hours=2',
                   f'image="{IMAGE}", ports=[8080], hours="72s",\n'
                   '                      cmd=["/bin/sh", "-c"], args=["echo hello from the '
                   'container; exec httpd -f -p 8080 -h /www"]')
          .replace("print(d.endpoint)", "print(d.job)\nprint(d.endpoint, flush=True)\n"
                   "input()  # the test reads the published port meanwhile")
          .replace("print(d.stop())", "print(json.dumps(d.stop().as_dict()))")
          .replace("import gpu_market\n", "import json\n\nimport gpu_market\n"))  # fmt: skip


@dataclass
class Net(WorkerNetwork):
    OUTPUT = ""

    def script_env(self) -> dict[str, str]:
        config = self.workdir / "solana-config.yml"
        config.write_text(f"json_rpc_url: {self.url}\nkeypair_path: {self.keys['user']}\n")
        return {**os.environ, "GPUM_SOLANA_CONFIG": str(config), "GPUM_MARKET": str(self.market)}


def start_world(workdir: Path, m: Market, procs: Processes, created: list[Pubkey]) -> Net:
    """Provider P with a podman worker, validator V: the network of this module (and of
    ``bench/deploy_latency.py``)."""
    return start_worker_network(Net, workdir, m, procs, created, IMAGE, window=WINDOW)


WORLD_PARAMS = {"window_seconds": WINDOW, "max_missed_windows": 2, "min_stake_per_gpu": 100,
                "validator_min_bond": 100, "unbonding_seconds": 0}  # fmt: skip
WORLD_FUNDS = {"stake": {"owner": 10_000 * 10**6, "validator": 10_000 * 10**6},
               "payment": {"user": 1_000 * 10**6}}  # fmt: skip


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory,
        market_factory: Callable[..., Market]) -> Iterator[Net]:  # fmt: skip
    workdir: Path = tmp_path_factory.mktemp("deploy")
    m = market_factory(workdir, ["owner", "user", "validator", "worker"], WORLD_PARAMS,
                       **WORLD_FUNDS)  # fmt: skip
    with worker_network(Net, workdir, m, IMAGE, window=WINDOW) as net:
        yield net


def test_the_readme_script_rents_prints_the_endpoint_reads_logs_and_stops(net: Net) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert f"```python\n{README_SCRIPT}```" in readme
    assert len([line for line in README_SCRIPT.splitlines() if line.strip()]) == 5
    before = net.balance("user")
    p = subprocess.Popen([sys.executable, "-c", SCRIPT], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=net.script_env())  # fmt: skip
    try:
        job = Pubkey.from_string(p.stdout.readline().strip())
        net.jobs.append(job)
        endpoint = p.stdout.readline().strip()
        assert endpoint.startswith("127.0.0.1:"), endpoint
        view = net.client.fetch_job(job)
        assert view.status == "running" and view.user == net.kps["user"].pubkey()
        assert view.provider == net.provider and view.deposited == 72_000  # 72 s at 0.001/s
        assert net.balance("user") == before - 72_000
        with httpx.Client(timeout=10) as h:
            assert h.get(f"http://{endpoint}/").content == INDEX_HTML
        wait_until("a settled window", lambda: net.client.fetch_job(job).paid_seconds > 0, 60,
                   check=net.procs.check_alive, diag=lambda: net.procs.tail("worker", 40))  # fmt: skip
        out, err = p.communicate("\n", timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    lines = out.strip().splitlines()
    assert "hello from the container" in "\n".join(lines[:-1])
    receipt = json.loads(lines[-1])
    # The receipt against the chain: the job is closed, the wallet got the refund back, and
    # every base unit of the deposit was paid or refunded.
    assert net.client.fetch_job(job) is None and net.client.fetch_closed_job(job) is not None
    assert receipt["deposited"] == 72_000 and receipt["donations"] == 0
    assert receipt["paid"] + receipt["refunded"] == receipt["deposited"]
    assert receipt["paid"] > 0 and receipt["paid"] == receipt["paid_provider"] + receipt["fees"]
    assert net.balance("user") == before - receipt["paid"]


def test_deploy_refuses_before_any_money_moves(net: Net) -> None:
    import gpu_market

    before = net.balance("user")
    kw = {"url": net.url, "keypair": net.kps["user"], "market": net.market, "timeout": 30}
    with pytest.raises(gpu_market.DeployError, match="no offer has a GPU model matching 'A100'"):
        gpu_market.deploy(gpu="A100:1", image=IMAGE, ports=[8080], hours=1, **kw)
    with pytest.raises(gpu_market.DeployError, match="the deposit needs 7200: fund it"):
        gpu_market.deploy(gpu="H100:2", image=IMAGE, hours=1000, **kw)
    with pytest.raises(gpu_market.DeployError, match="is not MODEL:COUNT"):
        gpu_market.deploy(gpu="H100", image=IMAGE, **kw)
    assert net.balance("user") == before
