"""``gpum job list``, job names and ``gpum job stop`` end to end: the local chain, a real
worker with podman + runc, a real validator node, and the user driving the ``gpum`` CLI.

One module-wide network: ``gpum-localnet``, a market with 2 s windows (a grace of 14 s: the validator settles a finished job's last
windows within it even on a loaded machine),
provider P (4 simulated GPUs, price 0.001 per GPU-second; its worker serves its API and runs
podman), one validator node V (the default committee). The user's job history lives in the
module's tmp dir (``GPUM_DATA_DIR``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gpu_market import pda
from harness import Market, WorkerNetwork, register_provider, worker_network
from solders.keypair import Keypair
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

WINDOW = 2
IMAGE = "localhost/gpum-busybox:1"


@dataclass
class Net(WorkerNetwork):
    ENV = (*WorkerNetwork.ENV, ("GPUM_DATA_DIR", "data"))

    def books(self) -> tuple[int, int, int]:
        """(provider owner's payment balance, the market's fee vault, payment-mint supply)."""
        m = self.client.fetch_market(self.market)
        return (self.balance("owner"), self.token_balance(m.fee_vault),
                self.client.mint_supply(m.payment_mint))


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory,
        market_factory: Callable[..., Market]) -> Iterator[Net]:  # fmt: skip
    workdir: Path = tmp_path_factory.mktemp("job-list")
    m = market_factory(workdir, ["owner", "idle", "user", "validator", "worker"], {
        "window_seconds": WINDOW, "max_missed_windows": 5, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0},
        stake={"owner": 10_000 * 10**6, "idle": 10_000 * 10**6, "validator": 10_000 * 10**6},
        payment={"user": 1_000 * 10**6})  # fmt: skip
    with worker_network(Net, workdir, m, IMAGE, window=WINDOW) as net:
        # a provider without a worker: its jobs stay Open
        register_provider(net, "idle", Keypair().pubkey(), gpus=1)
        yield net


def _create(net: Net, deposit: str, *extra: str, provider: Pubkey | None = None) -> Pubkey:
    out = net.gpum_json("user", "job", "create", "--market", str(net.market), "--provider",
                        str(provider or net.provider), "--deposit", deposit, *extra)  # fmt: skip
    job = Pubkey.from_string(out["job"])
    net.jobs.append(job)
    return job


def _listed(net: Net, *flags: str) -> dict[str, dict[str, Any]]:
    return {r["job"]: r for r in net.gpum_json("user", "job", "list", *flags)["jobs"]}


def test_list_names_and_stop_with_a_receipt_that_matches_the_chain(net: Net) -> None:
    start, books = net.balance("user"), net.books()
    # Two jobs: "web" runs a container serving on a published port, the other has no workload.
    web = _create(net, "1", "--name", "web", "--image", IMAGE, "--cmd", '["/bin/sh", "-c"]',
                  "--arg", "exec httpd -f -p 8080 -h /www", "--port", "8080")  # fmt: skip
    plain = _create(net, "0.5")
    assert net.balance("user") == start - 1_500_000
    net.wait("both jobs running", lambda: all(
        (j := net.client.fetch_job(a)) is not None and j.status == "running" for a in (web, plain)))

    listing = net.wait("the container's published port in `job list`", lambda: (
        (got := net.gpum_json("user", "job", "list")) and any(r["endpoints"] for r in got["jobs"])
        and got), timeout=90)
    rows = {r["job"]: r for r in listing["jobs"]}
    assert set(rows) == {str(web), str(plain)}
    w, p = rows[str(web)], rows[str(plain)]
    assert (w["name"], w["status"], w["gpu_count"], w["provider"]) == ("web", "running", 1, str(net.provider))
    assert p["name"] is None and p["endpoints"] == []
    assert w["endpoints"][0].startswith("127.0.0.1:")
    for r, deposit in ((w, 1_000_000), (p, 500_000)):  # every base unit is spent or left
        assert r["deposited"] == deposit and r["spent"] + r["escrow_left"] == deposit
        assert r["runs_dry_at"] == listing["chain_time"] + r["runway_seconds"]
    _, text, _ = net.gpum("user", "job", "list", output="")
    assert "web" in text and str(plain) in text and "RUNWAY" in text

    # A name is usable wherever an address is; stop finishes, waits out the grace, closes.
    assert net.gpum_json("user", "job", "status", "web")["job"] == str(web)
    before_stop = net.balance("user")
    _, out, err = net.gpum("user", "job", "stop", "web", "--timeout", "2m", timeout=180)
    receipt = json.loads(out)["receipt"]
    assert "waiting for the settlement grace" not in err  # json mode: no progress text
    assert net.client.fetch_job(web) is None and net.client.fetch_closed_job(web) is not None
    # The receipt against the chain's token balances: the refund is what the wallet got back,
    # and deposit = paid + refund (money conserved).
    assert receipt["deposited"] == 1_000_000 and receipt["donations"] == 0
    assert net.balance("user") - before_stop == receipt["refunded"]
    assert receipt["paid"] + receipt["refunded"] == receipt["deposited"]
    assert receipt["paid"] == receipt["paid_provider"] + receipt["fees"] and receipt["paid"] > 0
    assert receipt["fees"] == receipt["paid_validators"] + receipt["paid_treasury"] + receipt["burned"]

    # The other job stops in text mode: progress on stderr, the receipt in tokens on stdout.
    before_stop = net.balance("user")
    _, text, err = net.gpum("user", "job", "stop", str(plain), output="", timeout=180)
    assert "billing stopped" in err and "waiting for the settlement grace to end at" in err
    assert f"job {plain} closed" in text and "refunded:" in text and "fees" in text

    # list: nothing open; --all: both closed with their receipts.
    assert _listed(net) == {}
    closed = _listed(net, "--all")
    assert closed[str(web)]["status"] == "closed" and closed[str(web)]["name"] == "web"
    assert closed[str(web)]["receipt"] == receipt
    plain_receipt = closed[str(plain)]["receipt"]
    assert net.balance("user") - before_stop == plain_receipt["refunded"]
    assert plain_receipt["paid"] + plain_receipt["refunded"] == 500_000
    # Over both jobs, the wallet paid exactly the receipts' totals: to the provider's owner,
    # to the fee vault (validators and treasury), and burned from the supply.
    assert start - net.balance("user") == receipt["paid"] + plain_receipt["paid"]
    owner, vault, supply = net.books()
    both = {k: receipt[k] + plain_receipt[k] for k in receipt}
    assert owner - books[0] == both["paid_provider"] > 0
    assert vault - books[1] == both["paid_validators"] + both["paid_treasury"]
    assert books[2] - supply == both["burned"]
    _, text, _ = net.gpum("user", "job", "list", "--all", output="")
    assert any(line.startswith("web") and "1" in line for line in text.splitlines())


def test_stop_of_an_open_job_cancels_it_with_a_full_refund(net: Net) -> None:
    idle = pda.provider_pda(net.market, net.kps["idle"].pubkey())
    before = net.balance("user")
    job = _create(net, "0.2", "--name", "short", provider=idle)
    assert net.client.fetch_job(job).status == "open"
    assert _listed(net)[str(job)]["status"] == "open"
    receipt = net.gpum_json("user", "job", "stop", "short", timeout=60)["receipt"]
    assert receipt["paid"] == 0 and receipt["refunded"] == receipt["deposited"] == 200_000
    assert net.balance("user") == before
    assert net.client.fetch_job(job) is None
    assert _listed(net, "--all")[str(job)]["receipt"] == receipt
