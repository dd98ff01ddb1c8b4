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
from harness import Market, Network, chromium, start_validator_node, wait_until
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
    return chromium("the dashboard test renders pages")


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
        self.texts: dict[str, str] = {}
        """data-role -> the text of that element (shown or hidden), for roles in TEXT_ROLES."""
        self.shown: set[str] = set()
        """data-roles of elements not hidden."""
        self.empty_rows: list[str] = []
        """The text of every table's placeholder row ("loading…", "No job ...")."""
        self._role: str | None = None
        self._depth = 0
        self._in_empty = False
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
        if a.get("data-role") and "hidden" not in a:
            self.shown.add(str(a["data-role"]))
        if a.get("data-role") in TEXT_ROLES and self._role is None:
            self._role, self._depth = str(a["data-role"]), 0
            self.texts[self._role] = ""
        if self._role is not None:
            self._depth += 1
        if tag == "tr" and a.get("class") == "empty":
            self._in_empty = True
            self.empty_rows.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "p":
            self._in_error = False
        if tag == "tr":
            self._in_empty = False
        if self._role is not None:
            self._depth -= 1
            if self._depth <= 0:
                self._role = None

    def handle_data(self, data: str) -> None:
        if self._in_error:
            self._error_text.append(data)
        if self._role is not None:
            self.texts[self._role] += data
        if self._in_empty:
            self.empty_rows[-1] += data

    def number(self, name: str) -> int:
        assert name in self.fields, f"the page shows no {name!r}: {sorted(self.fields)}"
        return int(self.fields[name])


TEXT_ROLES = ("page-error", "notfound-message")

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

    def render(self, path: str, ok: bool = True) -> Page:
        """The page's DOM after its script ran; it must refer to nothing but this node, and
        (``ok``) show no error; no table is left "loading…"."""
        page = Page(self._chromium("--dump-dom", self.base + path).stdout)
        if ok:
            assert page.error is None, f"{path} shows an error: {page.error}\n{self.diag()}"
        assert "loading…" not in page.empty_rows, (path, page.empty_rows)
        assert all(ref.startswith("/") and not ref.startswith("//") for ref in page.refs), \
            page.refs
        return page

    def phone(self, path: str, name: str, width: int = 390, height: int = 844) -> dict[str, int]:
        """Load ``path`` in a phone-sized viewport (Chromium's device emulation over the
        DevTools protocol), save a PNG of the whole page as ``name`` and answer the page's
        ``scrollWidth`` and ``innerWidth`` once its script ran."""
        import base64
        import json
        import urllib.request

        from websockets.sync.client import connect

        profile = self.workdir / f"chromium-phone-{time.monotonic_ns()}"
        proc = subprocess.Popen([
            self.chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--no-first-run", f"--user-data-dir={profile}",
            "--remote-debugging-port=0", "--hide-scrollbars", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port_file = profile / "DevToolsActivePort"
            wait_until("chromium's DevTools port", port_file.exists, 30)
            port = int(port_file.read_text().split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                target = next(t for t in json.load(r) if t["type"] == "page")
            with connect(target["webSocketDebuggerUrl"], max_size=64 << 20,
                         open_timeout=10) as ws:
                ids = iter(range(1, 1000))

                def cdp(method: str, **params: Any) -> dict[str, Any]:
                    n = next(ids)
                    ws.send(json.dumps({"id": n, "method": method, "params": params}))
                    while True:
                        msg = json.loads(ws.recv(timeout=30))
                        if msg.get("id") == n:
                            assert "error" not in msg, msg
                            return msg["result"]

                cdp("Emulation.setDeviceMetricsOverride", width=width, height=height,
                    deviceScaleFactor=1, mobile=True)
                cdp("Page.navigate", url=self.base + path)
                wait_until(f"{path} loaded its figures", lambda: cdp(
                    "Runtime.evaluate", expression="(document.querySelector("
                    "'[data-field=updated]') || {}).textContent === undefined ? false : "
                    "document.querySelector('[data-field=updated]').textContent !== 'never'",
                    returnByValue=True)["result"].get("value"), 30)
                dims = cdp("Runtime.evaluate", expression="JSON.stringify({scroll: "
                           "document.documentElement.scrollWidth, inner: window.innerWidth, "
                           "height: document.documentElement.scrollHeight})",
                           returnByValue=True)["result"]["value"]
                dims = json.loads(dims)
                shot = cdp("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                           clip={"x": 0, "y": 0, "width": width,
                                 "height": min(int(dims["height"]), 4000), "scale": 1})
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            (ARTIFACTS / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))
            return dims
        finally:
            proc.terminate()
            proc.wait(timeout=20)
            shutil.rmtree(profile, ignore_errors=True)

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
        wport = free_port()  # the worker's API: the dashboard probes its /v1/health
        client.register_provider(owner, worker.pubkey(), {
            "gpu_model": "Simulated H100", "gpu_count": GPUS, "vram_mib": 81920,
            "region": "localnet"}, PRICE, market, endpoint=f"http://127.0.0.1:{wport}")
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
            "--provider", str(provider), "--api-listen", f"127.0.0.1:{wport}"])
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
    # The node probed the worker's /v1/health: online, seen just now.
    assert page.fields[f"{row}.online"] == "true", page.fields
    assert abs(page.number(f"{row}.last_seen") - time.time()) < 120
    assert page.number("offline") == 0


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
    assert max(2, settled_before - 2) <= page.number("settled_here") <= len(confirmed)
    assert page.number("settled_by_others") == 0  # the only member: nobody settles first
    assert v_before.rewards_earned <= page.number("account.rewards_earned") <= v_after.rewards_earned
    assert page.number("account.bond") == v_after.bond == BOND
    assert page.fields["last_settlement.signature"] in confirmed.values()


def test_jobs_page_lists_and_filters_the_markets_jobs(net: Net) -> None:
    j = net.job_view()
    page = net.render(f"/dashboard/jobs?state=running&user={net.user.pubkey()}")
    net.screenshot(f"/dashboard/jobs?state=running&user={net.user.pubkey()}", "jobs-filtered")
    row = f"jobs.{net.job}"
    assert page.number("count") == 1 and page.fields[f"{row}.status"] == "running"
    assert page.fields[f"{row}.provider"] == str(net.provider)
    assert page.fields[f"{row}.user"] == str(net.user.pubkey())
    assert page.number(f"{row}.gpu_count") == j.gpu_count == 1
    assert page.number(f"{row}.spent") >= j.deposited - j.booked_escrow - j.refunded
    none = net.render(f"/dashboard/jobs?state=completed&provider={net.provider}")
    assert none.number("count") == 0 and none.number("total") == 1
    assert none.empty_rows == ["No job matches these filters."]


def test_providers_page_lists_and_filters(net: Net) -> None:
    page = net.render("/dashboard/providers?model=h100&region=local")
    net.screenshot("/dashboard/providers?model=h100&region=local", "providers-filtered")
    row = f"providers.{net.provider}"
    assert page.number("count") == 1 and page.fields[f"{row}.status"] == "active"
    assert page.number(f"{row}.price_per_gpu_hour") == PRICE * 3600
    assert page.number(f"{row}.gpus_free") == GPUS - 1
    assert net.render("/dashboard/providers?model=a100").number("count") == 0
    assert page.fields[f"{row}.online"] == "true"
    assert net.render("/dashboard/providers?online=true").number("count") == 1
    assert net.render("/dashboard/providers?online=false").number("count") == 0


def test_offers_page_fits_a_phone(net: Net) -> None:
    dims = net.phone("/dashboard/offers", "offers-phone")
    assert dims["inner"] == 390 and dims["scroll"] <= 390, dims  # no horizontal scrolling
    job = net.phone(f"/dashboard/job/{net.job}", "job-phone")
    assert job["scroll"] <= 390, job


def test_bad_addresses_and_unknown_jobs_get_a_readable_page(net: Net) -> None:
    page = net.render("/dashboard/job/not-an-address", ok=False)
    net.screenshot("/dashboard/job/not-an-address", "error-bad-address")
    assert page.texts["page-error"].startswith("not an address: not-an-address"), page.texts
    unknown = Pubkey.from_bytes(os.urandom(32))
    page = net.render(f"/dashboard/job/{unknown}")  # said in its panel, not as a failure
    net.screenshot(f"/dashboard/job/{unknown}", "error-unknown-job")
    assert page.texts["notfound-message"] == f"no job at {unknown} on this market", page.texts
    assert "notfound" in page.shown and "job-body" not in page.shown
    assert page.fields["job"] == str(unknown)


def test_job_charts_have_time_on_x_and_padded_y(net: Net) -> None:
    page = net.render(f"/dashboard/job/{net.job}")
    html = net._chromium("--dump-dom", f"{net.base}/dashboard/job/{net.job}").stdout
    import re
    spans = {m[0]: (float(m[1]), float(m[2])) for m in re.findall(
        r'data-field="chart\.(\w+)"[^>]*data-lo="([-\d.]+)" data-hi="([-\d.]+)"', html)}
    assert spans["util"] == (0, 100), spans
    lo, hi = spans["temp"]
    assert hi - lo >= 20, spans  # a flat temperature is a line, not a cliff
    ticks = re.findall(r'class="axis-label x-label"[^>]*>([^<]+)<', html)
    assert ticks and all(re.fullmatch(r"(\w{3} \d+ )?\d\d:\d\d(:\d\d)?", t) for t in ticks), ticks
    assert page.fields["container.state"] in ("running", "none"), page.fields


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
        return (j.status == "completed" and open_ == 0 and len(marks) >= 8
                and len(set(marks[-8:])) == 1)

    # Nobody comes back for it: the provider's worker completes it once the grace is over.
    net.wait("the finished job settled, completed by the worker and quiet", settled, timeout=90)
    j = net.job_view()
    time.sleep(6)  # past the dashboard's cache of the job
    page = net.render(f"/dashboard/job/{net.job}")
    net.screenshot(f"/dashboard/job/{net.job}", "job-finished")
    assert net.job_view() == j
    assert page.fields["chain.status"] == "completed"
    assert page.number("chain.paid_seconds") == j.paid_seconds > 0
    assert page.number("chain.claimed_seconds") == j.claimed_seconds
    assert page.number("chain.escrow") == j.booked_escrow
    assert page.number("chain.cost") == j.deposited - j.booked_escrow - j.refunded
    assert page.number("chain.last_seq") == j.last_seq
    assert page.fields["runway.runway_seconds"] == ""  # no runway once not running
    assert page.number("chain.ended_at") == j.ended_at > 0
    # The validator page's two counts of receipts agree once nothing is in flight.
    v = net.client.fetch_validator_by_authority(net.market, net.validator.pubkey())
    vpage = net.render("/dashboard/validator")
    assert vpage.number("settled_here") == vpage.number("account.settlements") == v.settlements


def test_a_closed_job_keeps_its_receipt(net: Net) -> None:
    j = net.job_view()
    assert j.status == "completed", j.status
    refund = j.booked_escrow
    net.client.close_job(net.user, net.job)
    assert net.client.fetch_job(net.job) is None
    closed = net.client.fetch_closed_job(net.job)
    time.sleep(6)  # past the dashboard's cache of the job
    page = net.render(f"/dashboard/job/{net.job}")
    net.screenshot(f"/dashboard/job/{net.job}", "job-closed")
    assert page.fields["chain.status"] == "closed"
    assert page.number("closed.closed_at") == closed.closed_at > 0
    assert page.number("closed.paid_provider") == j.paid_provider > 0
    assert page.number("closed.fees") == j.paid_treasury + j.paid_validators > 0
    assert page.number("closed.burned") == j.burned
    assert page.number("closed.refunded") == refund + j.refunded
    assert page.number("closed.paid") == j.deposited - refund - j.refunded
    assert page.fields["closed.signature"]
    assert "receipt" in page.shown and "live" not in page.shown  # no "—" figures
