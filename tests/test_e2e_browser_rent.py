"""Renting from the browser, tested as a user would: headless Chromium (Debian's ``chromium``)
driven by puppeteer-core (``tests/js/browser/rent_flow.mjs``) on a validator node's rent page
(``/dashboard/rent``), with a Wallet Standard wallet made from a local keypair
(``tests/js/browser/test_wallet.js``, signing with the browser's WebCrypto Ed25519).

One module-wide network: ``gpum-localnet``, a market with 2 s windows, provider P (4 simulated
GPUs at 3.6 tokens per GPU-hour; its worker runs podman and the local busybox image), provider
Q (1 GPU; its worker, without containers, is killed by the dead-provider scenario), and one
validator node V serving the dashboard and the rent page (the default committee).

* **rent**: the user connects, chooses P, rents one GPU for 0.02 h running busybox's httpd; the
  test fetches the published port the page shows and gets the container's page; the page shows
  the container's log line, tops up 0.01 h, stops the job and shows the receipt, which must
  match the chain: what left the user's token account, what reached the provider's owner, the
  fee vault and the burn, the escrow account closed, the deposit and the seconds paid.
* **reject-delivery**: the wallet signs the job's transaction, then rejects the workload's
  delivery: the page says so and how to get the deposit back; Stop cancels and closes the job,
  the receipt and the chain agree that everything was refunded.
* **reject** (the wallet rejects the job's transaction), **no-sol** (tokens, no SOL for fees),
  **no-tokens** (SOL, no token account), **dead-provider** (Q chosen, then its worker killed):
  each gets a clear message on the page, and no money moves (the wallet's SOL and tokens, the
  market's job count unchanged, no job of the wallet on chain, no transaction sent).

Every scenario fails on a console error of the page and on any request carrying the wallet's
secret key. A PNG of every step goes to ``test-artifacts/rent/<scenario>/`` (gitignored);
``GPUM_UPDATE_SCREENSHOTS=1`` also rewrites ``docs/rent-page.png`` (the running job) for the
README. Needs Debian's ``chromium``, ``node`` and ``make js-deps`` (puppeteer-core); without
them the test fails saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from gpu_market import pda, tokens
from gpu_market.errors import AccountNotFound
from gpu_market.processes import free_port, tool, wait_http, write_keypair
from gpum_worker.localimage import INDEX_HTML
from harness import Market, WorkerNetwork, chromium, register_provider, worker_network
from solders.keypair import Keypair
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
BROWSER_JS = REPO / "tests" / "js" / "browser"
ARTIFACTS = REPO / "test-artifacts" / "rent"
DOCS_SCREENSHOT = REPO / "docs" / "rent-page.png"
WINDOW = 2
IMAGE = "localhost/gpum-busybox:1"
PRICE = "3.6"  # tokens per GPU-hour: 1000 base units per GPU-second
RATE = 1_000
HOURS = "0.02"  # 72 s: 0.072 tokens
TOP_UP_HOURS = "0.01"
MARKER = "gpum-rent-page-ok"
COMMAND = f"sh -c 'echo {MARKER}; exec httpd -f -p 8080 -h /www'"
TOKENS = 1_000 * 10**6
DRIVER_TIMEOUT = 150  # seconds, the driver's own limit for one scenario


def _base(ui: str) -> int:
    return int(Decimal(ui).scaleb(6))


def _chromium() -> str:
    return chromium("the browser test renders the rent page")


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("the browser test drives Chromium from node: install Debian's `nodejs`",
                    pytrace=False)
    _chromium()
    if not (REPO / "tests" / "js" / "node_modules" / "puppeteer-core").is_dir():
        pytest.fail("puppeteer-core is not installed in tests/js: run `make js-deps`",
                    pytrace=False)
    return node


# ----------------------------------------------------------------------------- the network


@dataclass
class Wallet:
    """What a scenario may not change: SOL, tokens, jobs on chain."""

    lamports: int
    tokens: int
    jobs: list[str]
    market_jobs: int


@dataclass
class Net(WorkerNetwork):
    vport: int = field(default=0, kw_only=True)
    dead: Pubkey | None = field(default=None, kw_only=True)
    dead_worker: subprocess.Popen | None = field(default=None, kw_only=True)
    dead_port: int = field(default=0, kw_only=True)

    @property
    def rent_url(self) -> str:
        return f"http://127.0.0.1:{self.vport}/dashboard/rent"

    @property
    def mint(self) -> Pubkey:
        return self.client.fetch_market(self.market).payment_mint

    def tokens_of(self, account: Pubkey) -> int:
        try:
            return self.client.token_balance(account)
        except AccountNotFound:
            return 0

    def wallet(self, who: str) -> Wallet:
        key = self.kps[who].pubkey()
        return Wallet(self.client.rpc.get_balance(key).value,
                      self.tokens_of(tokens.ata(key, self.mint)),
                      [str(j.address) for j in self.client.list_jobs(user=key, market=self.market)],
                      self.client.fetch_market(self.market).totals.jobs)

    def drive(self, scenario: str, who: str, provider: Pubkey, *extra: str,
              on_hold: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """``rent_flow.mjs --scenario`` as ``who``; ``on_hold`` answers its holds. Its result."""
        out = ARTIFACTS / scenario
        shutil.rmtree(out, ignore_errors=True)
        argv = [_node(), str(BROWSER_JS / "rent_flow.mjs"), "--scenario", scenario,
                "--url", self.rent_url, "--keypair", str(self.keys[who]), "--out", str(out),
                "--provider", str(provider), "--image", IMAGE, "--command", COMMAND,
                "--hours", HOURS, "--timeout", str(DRIVER_TIMEOUT), *extra,
                *(["--hold"] if on_hold else [])]
        last, log = "", self.workdir / f"driver-{scenario}.log"
        failed: BaseException | None = None
        with log.open("w") as err, subprocess.Popen(
                argv, cwd=BROWSER_JS, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                text=True, env={**os.environ, "GPUM_CHROMIUM": _chromium()}) as proc:
            watchdog = threading.Timer(DRIVER_TIMEOUT + 30, proc.kill)
            watchdog.start()
            try:
                assert proc.stdout is not None and proc.stdin is not None
                for line in proc.stdout:
                    last = line
                    msg = json.loads(line) if line.startswith("{") else {}
                    if "hold" in msg and on_hold is not None:
                        # A failed check still lets the driver finish (and stop the job).
                        try:
                            on_hold(msg)
                        except BaseException as e:  # noqa: BLE001 - raised once it ends
                            failed = failed or e
                        proc.stdin.write("go\n")
                        proc.stdin.flush()
                proc.wait(timeout=30)
            finally:
                watchdog.cancel()
                if proc.poll() is None:
                    proc.kill()
        stderr = log.read_text(errors="replace")
        if failed is not None:
            raise failed
        assert last.startswith("{"), f"the driver printed no result ({proc.returncode}):\n{stderr}"
        result = json.loads(last)
        result["_stderr"] = stderr[-3000:]
        return result


def _start_worker_q(net: Net, provider: Pubkey, port: int) -> subprocess.Popen:
    """Q's worker: the chain's jobs of ``provider`` and its API on 127.0.0.1:``port``."""
    p = net.procs.start("worker-q", [
        tool("gpum-worker"), "run", "--simulate", "--gpus", "1", "--seed", "2",
        "--key", str(net.keys["worker_q"]), "--db", str(net.workdir / "outbox-q.sqlite"),
        "--window-seconds", str(WINDOW), "--poll-seconds", "1", "--rpc-url", net.url,
        "--program-id", str(net.client.program_id), "--market", str(net.market),
        "--provider", str(provider), "--api-listen", f"127.0.0.1:{port}", "--runtime", "podman",
        "--containers-conf", str(net.workdir / "containers.conf"), "--no-reaper"])
    wait_http(f"http://127.0.0.1:{port}/v1/health", timeout=60)
    return p


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory,
        market_factory: Callable[..., Market]) -> Iterator[Net]:
    _node()
    workdir: Path = tmp_path_factory.mktemp("browser-rent")
    m = market_factory(workdir, ["owner", "user", "validator", "worker", "owner_q", "worker_q",
                                 "rejecter", "undecided", "late", "tokenless", "shopper"], {
        "window_seconds": WINDOW, "max_missed_windows": 2, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0},
        stake={"owner": 10_000 * 10**6, "owner_q": 10_000 * 10**6, "validator": 10_000 * 10**6},
        payment={"user": TOKENS, "rejecter": TOKENS, "undecided": TOKENS, "late": TOKENS,
                 "shopper": TOKENS})
    # A wallet with tokens and not one lamport: the admin pays for its token account.
    solless = Keypair()
    m.kps["solless"], m.keys["solless"] = solless, write_keypair(workdir / "solless.json", solless)
    tokens.mint_to(m.client, m.payment_mint,
                   tokens.create_ata(m.client, m.admin, solless.pubkey(), m.payment_mint),
                   m.admin, TOKENS)
    with worker_network(Net, workdir, m, IMAGE, window=WINDOW, price=PRICE) as n:
        v = n.client.fetch_validator_by_authority(n.market, n.validator)
        assert v is not None
        n.vport = int(v.endpoint.rsplit(":", 1)[1])
        n.dead_port = free_port()
        n.dead = register_provider(n, "owner_q", n.kps["worker_q"].pubkey(), gpus=1, price=PRICE,
                                   endpoint=f"http://127.0.0.1:{n.dead_port}")
        n.dead_worker = _start_worker_q(n, n.dead, n.dead_port)
        wait_http(n.rent_url, timeout=30)
        yield n


def _artifacts_ok(r: dict[str, Any], steps: int) -> None:
    assert len(r["screenshots"]) >= steps, r["screenshots"]
    for path in r["screenshots"]:
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path


def _clean(r: dict[str, Any]) -> None:
    """No console error, uncaught exception or failed request; no key in any request."""
    assert r["leaks"] == [], f"requests carrying the wallet's secret key: {r['leaks']}"
    assert r["problems"] == [], f"the page's console errors: {r['problems']}"


def _nothing_moved(net: Net, who: str, before: Wallet, r: dict[str, Any]) -> None:
    after = net.wallet(who)
    assert after == before, f"money or jobs moved: before {before}, after {after}"
    assert after.jobs == []
    assert "sendTransaction" not in r["rpc_methods"], r["rpc_methods"]


def _ran(r: dict[str, Any]) -> None:
    assert r["ok"], (f"the {r['scenario']} scenario did not finish: {r['failure']}\n"
                     f"page error: {r['error']}\nstatus: {r['status']}\nproblems: {r['problems']}"
                     f"\n{r['_stderr']}")


# ----------------------------------------------------------------------------- the wallet


def test_the_test_wallet_speaks_the_wallet_standard_and_signs_what_solana_verifies() -> None:
    node = _node()
    r = subprocess.run([node, str(BROWSER_JS / "wallet_check.mjs")], cwd=BROWSER_JS,
                       capture_output=True, text=True, timeout=120, check=False,
                       env={**os.environ, "GPUM_CHROMIUM": _chromium()})
    lines = r.stdout.strip().splitlines()
    assert lines, f"wallet_check.mjs printed nothing ({r.returncode}):\n{r.stderr[-3000:]}"
    out = json.loads(lines[-1])
    assert out["ok"] and r.returncode == 0, out.get("error") or r.stderr[-3000:]
    assert len(out["checks"]) == 11, out["checks"]


# ----------------------------------------------------------------------------- refusals


def test_a_wallet_without_sol_is_told_so_and_nothing_is_sent(net: Net) -> None:
    before = net.wallet("solless")
    assert before.lamports == 0 and before.tokens == TOKENS
    r = net.drive("no-sol", "solless", net.provider)
    _ran(r)
    assert "SOL" in r["error"], r["error"]
    assert r["wallet_requests"] == [], "the wallet was asked to sign"
    assert r["figures"]["wallet-sol"] == "0" and r["figures"]["wallet-tokens"] == str(TOKENS)
    _nothing_moved(net, "solless", before, r)
    _clean(r)
    _artifacts_ok(r, 5)


def test_a_wallet_without_tokens_is_told_so_and_nothing_is_sent(net: Net) -> None:
    before = net.wallet("tokenless")
    assert before.lamports > 0 and before.tokens == 0
    r = net.drive("no-tokens", "tokenless", net.provider)
    _ran(r)
    assert "token" in r["error"].lower(), r["error"]
    assert r["wallet_requests"] == [], "the wallet was asked to sign"
    assert r["figures"]["wallet-tokens"] == "0"
    _nothing_moved(net, "tokenless", before, r)
    _clean(r)
    _artifacts_ok(r, 5)


def test_a_rejected_signature_is_said_and_nothing_is_sent(net: Net) -> None:
    before = net.wallet("rejecter")
    r = net.drive("reject", "rejecter", net.provider)
    _ran(r)
    assert "rejected" in r["error"] and "nothing was sent" in r["error"], r["error"]
    assert [(q["kind"], q["approved"]) for q in r["wallet_requests"]] == [("transaction", False)]
    _nothing_moved(net, "rejecter", before, r)
    _clean(r)
    _artifacts_ok(r, 5)


def test_a_delivery_rejected_after_the_deposit_is_cancelled_with_a_full_refund(net: Net) -> None:
    before = net.wallet("undecided")
    mint = net.mint
    r = net.drive("reject-delivery", "undecided", net.provider)
    _ran(r)
    assert "rejected the workload delivery" in r["error"] and "Stop" in r["error"], r["error"]
    job = Pubkey.from_string(r["job"])
    net.jobs.append(job)
    # The job existed with the deposit; stop cancelled it (never accepted) and closed it.
    assert [(q["kind"], q["approved"]) for q in r["wallet_requests"]] == [
        ("transaction", True), ("message", False), ("transaction", True), ("transaction", True)]
    receipt = {k: int(v) for k, v in r["receipt"].items()}
    cost = int(r["figures"]["cost"])
    assert receipt == {"deposited": cost, "paid": 0, "refunded": cost}, receipt
    assert net.client.fetch_job(job) is None and net.client.fetch_closed_job(job) is not None
    assert net.client.account_info(pda.escrow_pda(job)) is None, "the escrow is not closed"
    after = net.wallet("undecided")
    assert after.tokens == before.tokens and after.jobs == [], (before, after)
    assert after.lamports < before.lamports  # the fees of three transactions, nothing more
    assert net.tokens_of(tokens.ata(net.kps["undecided"].pubkey(), mint)) == TOKENS
    _clean(r)
    _artifacts_ok(r, 7)


def test_a_dead_provider_is_said_before_any_money_moves(net: Net) -> None:
    before = net.wallet("late")
    assert net.dead is not None and net.dead_worker is not None

    def kill_worker(hold: dict[str, Any]) -> None:
        assert hold["hold"] == "chosen" and hold["provider"] == str(net.dead)
        os.killpg(net.dead_worker.pid, signal.SIGKILL)
        net.dead_worker.wait(timeout=10)
        net.procs.children = [(n, p) for n, p in net.procs.children if p is not net.dead_worker]
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", net.dead_port), timeout=2).close()

    r = net.drive("dead-provider", "late", net.dead, on_hold=kill_worker)
    _ran(r)
    assert "offline" in r["error"] and "choose another" in r["error"], r["error"]
    assert r["wallet_requests"] == [], "the wallet was asked to sign"
    _nothing_moved(net, "late", before, r)
    # The worker's API is gone, so the page's requests to it fail: that is the scenario.
    _clean({**r, "problems": [p for p in r["problems"] if "/v1/rent/workers/" not in p]})
    _artifacts_ok(r, 5)


def test_a_price_raised_after_the_offers_loaded_is_said_before_any_money_moves(net: Net
                                                                              ) -> None:
    """The page never pays more than the price it showed: a provider that raises its price
    between the offers' load and the click is refused before the wallet is asked."""
    before = net.wallet("shopper")

    def raise_price(hold: dict[str, Any]) -> None:
        assert hold["hold"] == "chosen" and hold["provider"] == str(net.provider)
        net.client.update_provider(net.kps["owner"], net.provider, price_per_gpu_second=2 * RATE)

    try:
        r = net.drive("price-raised", "shopper", net.provider, on_hold=raise_price)
    finally:
        net.client.update_provider(net.kps["owner"], net.provider, price_per_gpu_second=RATE)
    _ran(r)
    assert "raised its price" in r["error"] and "nothing was sent" in r["error"], r["error"]
    assert r["wallet_requests"] == [], "the wallet was asked to sign"
    _nothing_moved(net, "shopper", before, r)
    _clean(r)
    _artifacts_ok(r, 5)


# ----------------------------------------------------------------------------- the rent


def _endpoints(raw: list[Any]) -> list[str]:
    return [e if isinstance(e, str) else f"{e['host']}:{e['port']}" for e in raw]


def test_renting_from_the_browser_serves_the_container_and_the_receipt_matches_the_chain(
        net: Net) -> None:
    mint = net.mint
    owner_account = tokens.ata(net.kps["owner"].pubkey(), mint)
    fee_vault = net.client.fetch_market(net.market).fee_vault
    user = net.wallet("user")
    owner_before, vault_before = net.tokens_of(owner_account), net.tokens_of(fee_vault)
    supply_before = net.client.mint_supply(mint)
    seen: dict[str, Any] = {}

    def while_running(hold: dict[str, Any]) -> None:
        assert hold["hold"] == "running"
        job = Pubkey.from_string(hold["job"])
        net.jobs.append(job)
        (endpoint,) = _endpoints(hold["endpoint"])
        with httpx.Client(timeout=5) as h:
            page = net.wait("the container's published port", lambda: (
                r := h.get(f"http://{endpoint}/")).status_code == 200 and r, timeout=30)
        seen["page"] = page.content
        view = net.client.fetch_job(job)
        assert view is not None and view.status == "running"
        assert view.user == net.kps["user"].pubkey() and view.provider == net.provider
        assert view.committee == [net.validator] and view.workload_hash != bytes(32)
        seen["deposit"] = view.deposited
        seen["user_running"] = net.tokens_of(tokens.ata(view.user, mint))

    t0 = time.monotonic()
    r = net.drive("rent", "user", net.provider, "--top-up-hours", TOP_UP_HOURS, "--expect-log",
                  MARKER, on_hold=while_running)
    _ran(r)
    seen["seconds"] = time.monotonic() - t0
    job = Pubkey.from_string(r["job"])
    # The container answered on the endpoint the page showed.
    assert seen["page"] == INDEX_HTML
    assert r["endpoint"] and all(e in r["endpoint"] for e in _endpoints(r["endpoint_raw"]))
    # The page priced the deposit as the chain took it: 0.02 h at 3.6 per GPU-hour.
    cost = int(r["figures"]["cost"])
    assert cost == seen["deposit"] == _base(HOURS) * 3600 * RATE // 10**6 == 72 * RATE
    assert seen["user_running"] == user.tokens - cost
    assert int(r["figures"]["top_up"]) == 36 * RATE
    # The receipt against the chain.
    receipt = {k: int(v) for k, v in r["receipt"].items()}
    assert receipt["deposited"] == cost + 36 * RATE, receipt
    assert receipt["paid"] + receipt["refunded"] == receipt["deposited"], receipt
    assert net.client.fetch_job(job) is None, "the job is not closed"
    closed = net.client.fetch_closed_job(job)
    assert closed is not None and closed.paid_seconds > 0
    assert receipt["paid"] == closed.paid_seconds * RATE, (receipt, closed)
    after = net.wallet("user")
    assert after.tokens == user.tokens - receipt["paid"], (user, after, receipt)
    assert int(r["figures"]["wallet-tokens"]) == after.tokens
    assert net.client.account_info(pda.escrow_pda(job)) is None, "the escrow is not closed"
    owner_gain = net.tokens_of(owner_account) - owner_before
    vault_gain = net.tokens_of(fee_vault) - vault_before
    burned = supply_before - net.client.mint_supply(mint)
    assert owner_gain > 0 and owner_gain + vault_gain + burned == receipt["paid"], \
        (owner_gain, vault_gain, burned, receipt)
    assert r["figures"]["state"] == "closed"
    assert int(r["figures"]["phone_scroll_width"]) <= 390, "the job's page scrolls sideways on a phone"
    # Every signature was the wallet's, asked of it: the job's transaction, then the spec's
    # delivery (a message); the top-up, the finish and the close (transactions); the worker's
    # status and logs (messages). The page sent exactly the wallet's 4 transactions.
    kinds = [q["kind"] for q in r["wallet_requests"]]
    assert all(q["approved"] for q in r["wallet_requests"]), r["wallet_requests"]
    assert kinds[:2] == ["transaction", "message"] and kinds.count("transaction") == 4, kinds
    assert r["rpc_methods"].get("sendTransaction") == 4, r["rpc_methods"]
    _clean(r)
    _artifacts_ok(r, 9)
    running = next(p for p in r["screenshots"] if p.endswith("-running.png"))
    if os.environ.get("GPUM_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(running, DOCS_SCREENSHOT)
    # Stopped means stopped: the worker removes the container.
    net.wait("the container removed", lambda: subprocess.run(
        ["podman", "ps", "-aq", "--filter", f"label=gpum.job={job}"], capture_output=True,
        check=False, text=True, timeout=30, env={**os.environ, **net.podman_env}).stdout.strip() == "",
        timeout=30)
