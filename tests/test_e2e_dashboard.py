"""The validator node's dashboard end to end: real processes on 127.0.0.1, every
page rendered by a real headless Chromium, every figure it shows compared with the chain.

One module-wide network: the local chain (``gpum-localnet``), a market with 2 s windows, one
provider (4 simulated GPUs, ``gpum-worker run --simulate``), one validator node (``gpum-validator
run``, the committee of one of a 1-GPU job that it settles every 2 windows). Each page is loaded
with ``chromium --headless=new --dump-dom`` after its script ran (``--virtual-time-budget``);
figures are read from the ``data-raw`` of their ``data-field`` elements. While the job runs,
moving figures are bracketed by chain reads taken just before and just after the page loaded
(paid seconds only grow, the escrow only shrinks); once the job is finished and settled they
must match exactly. A PNG of every page goes to ``test-artifacts/dashboard/`` (gitignored);
``GPUM_UPDATE_SCREENSHOTS=1`` also rewrites ``docs/dashboard-job.png`` for the README.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``); without it the test
fails saying so.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from gpu_market import pda
from gpu_market.accounts import JobView
from gpu_market.processes import Processes, free_port, tool
from harness import Market, Network, start_validator_node, wait_until
from solders.keypair import Keypair
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts" / "dashboard"
DOCS_SCREENSHOT = REPO / "docs" / "dashboard-job.png"
WINDOW = 2  # seconds
SETTLE_EVERY = 2  # windows
PRICE = 1_000  # payment base units per GPU-second
DEPOSIT = 50_000_000
STAKE = 1_000_000
BOND = 10_000
GPUS = 4


def _chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("the dashboard test renders pages in a real browser: install Debian's "
                    "`chromium` package (apt-get install -y chromium)", pytrace=False)
    return path


# ----------------------------------------------------------------------------- page reading


@dataclass
class Chart:
    kind: str
    windows: int
    series: list[tuple[str, int]] = field(default_factory=list)  # (GPU uuid, points drawn)


class Page(HTMLParser):
    """A rendered DOM: ``fields`` (data-field -> data-raw, first occurrence), the charts, the
    error banner, and every URL the document refers to."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self.charts: list[Chart] = []
        self.error: str | None = None
        self.refs: list[str] = []
        self._in_error = False
        self._error_text: list[str] = []
        self.feed(html)
        self.close()
        if self.error is not None:
            self.error = "".join(self._error_text).strip()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for k in ("src", "href", "action"):
            if a.get(k):
                self.refs.append(str(a[k]))
        name = a.get("data-field")
        if name is not None and "data-raw" in a:
            self.fields.setdefault(name, a["data-raw"] or "")
        if tag == "svg" and (name or "").startswith("chart."):
            self.charts.append(Chart(name.split(".", 1)[1], int(a.get("data-raw") or 0)))
        if tag == "path" and a.get("data-gpu") and self.charts:
            self.charts[-1].series.append((str(a["data-gpu"]), int(a.get("data-points") or 0)))
        if a.get("data-role") == "error" and "hidden" not in a:
            self.error = ""
            self._in_error = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "p":
            self._in_error = False

    def handle_data(self, data: str) -> None:
        if self._in_error:
            self._error_text.append(data)

    def number(self, name: str) -> int:
        assert name in self.fields, f"the page shows no {name!r}: {sorted(self.fields)}"
        return int(self.fields[name])


# ----------------------------------------------------------------------------- the network


@dataclass
class Net(Network):
    user: Keypair
    validator: Keypair
    market: Pubkey
    provider: Pubkey
    job: Pubkey
    vport: int
    db: Path
    chromium: str

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.vport}"

    def diag(self) -> str:
        return "\n".join(f"--- {n}.log\n{self.procs.tail(n, 25)}"
                         for n in ("worker", "validator"))

    def wait(self, what: str, fn: Callable[[], Any], timeout: float) -> Any:
        return wait_until(what, fn, timeout, check=self.procs.check_alive, diag=self.diag)

    def job_view(self) -> JobView:
        view = self.client.fetch_job(self.job)
        assert view is not None, "the job account is gone"
        return view

    def rows(self, sql: str, *args: Any) -> list[tuple]:
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()

    def confirmed(self) -> dict[int, str]:
        """The node's confirmed settlements of the job: seq -> transaction signature."""
        return {seq: sig for seq, (status, sig) in self.intents().items()
                if status == "confirmed"}

    def intents(self) -> dict[int, tuple[str, str | None]]:
        """Every settlement intent of the job in the node's database: seq -> (status,
        transaction signature)."""
        return {seq: (status, sig) for seq, status, sig in self.rows(
            "SELECT seq_to, status, signature FROM intents WHERE job = ?", bytes(self.job))}

    def _chromium(self, *args: str) -> subprocess.CompletedProcess[str]:
        profile = self.workdir / f"chromium-profile-{time.monotonic_ns()}"
        argv = [self.chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", f"--user-data-dir={profile}",
                "--virtual-time-budget=8000", *args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        shutil.rmtree(profile, ignore_errors=True)
        assert r.returncode == 0, f"chromium {args[-1]} failed ({r.returncode}):\n{r.stderr[-3000:]}"
        return r

    def render(self, path: str) -> Page:
        """The page's DOM after its script ran; it must show no error and refer to nothing
        but this node."""
        page = Page(self._chromium("--dump-dom", self.base + path).stdout)
        assert page.error is None, f"{path} shows an error: {page.error}\n{self.diag()}"
        assert all(ref.startswith("/") and not ref.startswith("//") for ref in page.refs), \
            page.refs
        return page

    def screenshot(self, path: str, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        out = ARTIFACTS / f"{name}.png"
        out.unlink(missing_ok=True)
        self._chromium(f"--screenshot={out}", "--window-size=1280,900", "--hide-scrollbars",
                       self.base + path)
        assert out.exists() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", out
        return out


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory,
        market_factory: Callable[..., Market]) -> Iterator[Net]:
    chromium = _chromium()
    workdir: Path = tmp_path_factory.mktemp("dashboard")
    m = market_factory(workdir, ["user", "owner", "worker", "validator"], {
        "window_seconds": WINDOW, "max_missed_windows": 2, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0, "fee_bps": 1000},
        stake={"owner": STAKE + BOND, "validator": STAKE + BOND}, payment={"user": 2 * DEPOSIT})
    url, client, market = m.url, m.client, m.address
    user, owner, worker, validator = (m.kps[n] for n in ("user", "owner", "worker", "validator"))
    procs = Processes(workdir)
    try:
        client.register_provider(owner, worker.pubkey(), {
            "gpu_model": "Simulated H100", "gpu_count": GPUS, "vram_mib": 81920,
            "region": "localnet"}, PRICE, market)
        client.stake(owner, market, STAKE)
        provider = pda.provider_pda(market, owner.pubkey())
        vport = free_port()
        client.register_validator(validator, market, BOND, f"http://127.0.0.1:{vport}")
        db = workdir / "validator.sqlite"
        start_validator_node(procs, url, workdir / "validator.json", market, vport, db,
                             "--settle-every", str(SETTLE_EVERY), "--settle-interval", "1")
        _, job = client.create_job(user, market, provider, 1, 1, DEPOSIT,
                                   committee=[validator.pubkey()], quorum=1)
        procs.start("worker", [
            tool("gpum-worker"), "run", "--simulate", "--gpus", str(GPUS), "--seed", "1",
            "--key", str(workdir / "worker.json"), "--db", str(workdir / "outbox.sqlite"),
            "--window-seconds", str(WINDOW), "--poll-seconds", "1", "--rpc-url", url,
            "--program-id", str(client.program_id), "--market", str(market),
            "--provider", str(provider)])
        n = Net(workdir, procs, url, client, user, validator, market, provider, job, vport, db,
                chromium)
        n.wait("two settlements of the job", lambda: len(n.confirmed()) >= 2
               and n.job_view().paid_seconds > 0, timeout=120)
        yield n
    finally:
        procs.stop_all()


# ----------------------------------------------------------------------------- pages


def test_market_page_shows_the_chains_totals(net: Net) -> None:
    before = net.client.fetch_market(net.market)
    page = net.render("/dashboard/")
    after = net.client.fetch_market(net.market)
    net.screenshot("/dashboard/", "market")
    assert page.fields["market"] == str(net.market)
    assert page.number("totals.staked") == after.totals.staked == before.totals.staked == STAKE
    assert page.number("totals.bonded") == after.totals.bonded == BOND
    assert page.number("totals.jobs") == after.totals.jobs == 1
    for name in ("fees", "burned", "rewards"):
        lo, hi = getattr(before.totals, name), getattr(after.totals, name)
        assert lo <= page.number(f"totals.{name}") <= hi, (name, lo, page.fields, hi)
    assert page.number("totals.fees") > 0 and page.number("totals.rewards") > 0
    assert (page.number("providers"), page.number("gpus_total"), page.number("gpus_free")) == (1, GPUS,
                                                                                      GPUS - 1)
    assert page.number("validators_active") == 1
    assert page.number("params.window_seconds") == WINDOW and page.number("params.fee_bps") == 1000


def test_offers_page_lists_the_provider(net: Net) -> None:
    page = net.render("/dashboard/offers")
    net.screenshot("/dashboard/offers", "offers")
    p = net.client.fetch_provider(net.provider)
    row = f"offers.{net.provider}"
    assert page.number("count") == 1 and page.number(f"{row}.rank") == 1
    assert page.number(f"{row}.stake") == p.stake == STAKE
    assert page.number(f"{row}.gpus_free") == p.free_gpus == GPUS - 1
    assert page.number(f"{row}.price_per_gpu_hour") == PRICE * 3600
    assert page.fields[f"{row}.gpu_model"] == "Simulated H100"
    assert page.fields[f"{row}.status"] == "active"


def test_job_page_shows_status_cost_runway_charts_and_settlements(net: Net) -> None:
    before = net.job_view()
    page = net.render(f"/dashboard/job/{net.job}")
    after = net.job_view()
    intents = net.intents()
    net.screenshot(f"/dashboard/job/{net.job}", "job")
    assert page.fields["chain.status"] == before.status == after.status == "running"
    paid = page.number("chain.paid_seconds")
    assert before.paid_seconds <= paid <= after.paid_seconds
    assert after.booked_escrow <= page.number("chain.escrow") <= before.booked_escrow
    assert page.number("chain.deposited") == after.deposited == DEPOSIT
    assert page.number("chain.cost") == paid * after.terms.rate_per_second
    assert page.number("chain.rate_per_second") == after.terms.rate_per_second == PRICE
    assert page.fields["chain.provider"] == str(net.provider)
    assert page.number("runway.runway_seconds") > 0 and page.number("runway.spend_per_hour") == \
        PRICE * 3600
    assert page.fields["in_committee"] == "true"
    # Per-window charts of the job's one GPU, drawn from the windows API.
    n = page.number("windows.count")
    assert n >= 2
    assert sorted(c.kind for c in page.charts) == ["power", "temp", "util"]
    for chart in page.charts:
        assert chart.windows == n and len(chart.series) == 1, chart
        uuid, points = chart.series[0]
        assert uuid.startswith("GPU-") and points == n, chart
    # The settlement history: the node's settlements with their transactions, real ones.
    shown = {int(k.split(".")[1]): v for k, v in page.fields.items()
             if k.startswith("settlements.") and k.endswith(".signature")}
    assert set(shown) <= set(intents), (shown, intents)
    confirmed = {seq: sig for seq, sig in shown.items()
                 if page.fields[f"settlements.{seq}.status"] == "confirmed"}
    assert len(confirmed) >= 2, page.fields
    for seq, sig in confirmed.items():
        assert intents[seq] == ("confirmed", sig) and seq <= after.last_seq
    logs = net.client.transaction_logs(confirmed[max(confirmed)])
    assert any(str(net.client.program_id) in line for line in logs), logs


def test_provider_page_shows_stake_price_and_reputation(net: Net) -> None:
    before = net.client.fetch_provider(net.provider)
    page = net.render(f"/dashboard/provider/{net.provider}")
    after = net.client.fetch_provider(net.provider)
    net.screenshot(f"/dashboard/provider/{net.provider}", "provider")
    assert page.fields["status"] == after.status == "active"
    assert page.number("stake") == after.stake == STAKE
    assert page.number("unbonding.amount") == after.unbonding.amount == 0
    assert page.number("price_per_gpu_hour") == PRICE * 3600
    assert (page.number("gpus_total"), page.number("gpus_in_use")) == (GPUS, after.gpus_in_use) == \
        (GPUS, 1)
    lo, hi = before.reputation.verified_seconds, after.reputation.verified_seconds
    assert lo <= page.number("reputation.verified_seconds") <= hi
    assert page.fields[f"jobs.{net.job}.status"] == "running"
    assert page.number("rank") == 1


def test_validator_page_shows_the_nodes_health(net: Net) -> None:
    authority = net.validator.pubkey()
    count = "SELECT COUNT(*) FROM proofs WHERE decision = 'accepted'"
    v_before = net.client.fetch_validator_by_authority(net.market, authority)
    accepted_before = net.rows(count)[0][0]
    settled_before = len(net.confirmed())
    page = net.render("/dashboard/validator")
    v_after = net.client.fetch_validator_by_authority(net.market, authority)
    accepted_after = net.rows(count)[0][0]
    confirmed = net.confirmed()
    net.screenshot("/dashboard/validator", "validator")
    assert (page.fields["ok"], page.fields["chain_ok"], page.fields["db_ok"]) == \
        ("true", "true", "true")
    assert page.fields["authority"] == str(authority)
    # The node caches its summary for 5 s (2.5 windows): it may trail the database a little.
    assert accepted_before - 3 <= page.number("proofs.accepted") <= accepted_after
    assert max(2, settled_before - 2) <= page.number("intents.confirmed") <= len(confirmed)
    assert v_before.rewards_earned <= page.number("account.rewards_earned") <= v_after.rewards_earned
    assert page.number("account.bond") == v_after.bond == BOND
    assert page.fields["last_settlement.signature"] in confirmed.values()


def test_a_finished_and_settled_job_matches_the_chain_exactly(net: Net) -> None:
    # The README's picture: the running job with a few dozen seconds of windows.
    windows = "SELECT COUNT(DISTINCT seq) FROM proofs WHERE job = ?"
    net.wait("15 windows stored", lambda: net.rows(windows, bytes(net.job))[0][0] >= 15, 60)
    shot = net.screenshot(f"/dashboard/job/{net.job}", "job-running")
    if os.environ.get("GPUM_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, DOCS_SCREENSHOT)
    net.client.finish_job(net.user, net.job)
    marks: list[tuple[int, int, str]] = []

    def settled() -> bool:
        j = net.job_view()
        marks.append((j.last_seq, j.paid_seconds, j.status))
        open_ = net.rows("SELECT COUNT(*) FROM intents WHERE job = ? AND status IN "
                         "('intended', 'sent')", bytes(net.job))[0][0]
        return (j.status == "finishing" and open_ == 0 and len(marks) >= 8
                and len(set(marks[-8:])) == 1)

    net.wait("the finished job settled and quiet", settled, timeout=90)
    j = net.job_view()
    time.sleep(6)  # past the dashboard's cache of the job
    page = net.render(f"/dashboard/job/{net.job}")
    net.screenshot(f"/dashboard/job/{net.job}", "job-finished")
    assert net.job_view() == j
    assert page.fields["chain.status"] == "finishing"
    assert page.number("chain.paid_seconds") == j.paid_seconds > 0
    assert page.number("chain.claimed_seconds") == j.claimed_seconds
    assert page.number("chain.escrow") == j.booked_escrow
    assert page.number("chain.cost") == j.deposited - j.booked_escrow - j.refunded
    assert page.number("chain.last_seq") == j.last_seq
    assert page.fields["runway.runway_seconds"] == ""  # no runway once not running
    assert page.number("chain.ended_at") == j.ended_at > 0
