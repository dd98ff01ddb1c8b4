"""gpum run and gpum job watch (gpu_market.cli.run, gpu_market.cli.watch) offline: the offer, deposit and committee a
dry run shows, every refusal as one actionable line before anything is sent, the wait for the
container, and the watch's status blocks and auto top-up against a chain answered locally."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from gpu_market import cli as cli_mod
from gpu_market.accounts import (
    GpuSpec,
    JobTerms,
    JobView,
    MarketParams,
    MarketTotals,
    MarketView,
    ProviderView,
    Reputation,
    Unbonding,
    ValidatorView,
)
from gpu_market.cli import run as cli_run
from gpu_market.cli import watch as cli_watch
from gpu_market.offers import Liveness
from gpu_market.runway import WindowsApiError
from solders.keypair import Keypair
from solders.pubkey import Pubkey

NOW = 1_700_000_000
MARKET = Pubkey.new_unique()
PARAMS = MarketParams(500, 5000, 0, 0, 60, 1, 10, 100, 5000, 1000, 0, 5, 95, 0, 1000)
MEMBERS = [Pubkey.new_unique() for _ in range(3)]
USER = Keypair()
ENDPOINT = "http://worker.example:9000"


def market() -> MarketView:
    k = Pubkey.new_unique()
    return MarketView(k, k, Pubkey.default(), 0, k, k, k, k, PARAMS, PARAMS, 0, False,
                      MarketTotals(0, 0, 0, 0, 0, 0, 0, 0), 255, 255, k, 254, address=MARKET)  # fmt: skip


def provider(n: int, *, model: str = "NVIDIA H100 80GB", gpus: int = 8, in_use: int = 0,
             price: int = 1_000, endpoint: str = ENDPOINT, status: str = "active",
             reputation: Reputation | None = None) -> ProviderView:  # fmt: skip
    return ProviderView(
        market=MARKET, owner=Pubkey(bytes([n + 100] * 32)), worker_key=Keypair().pubkey(),
        worker_key_expires_at=0, retired_keys=(), last_equivocation_slash_at=0,
        spec=GpuSpec(model, gpus, 81920, "eu-west"), price_per_gpu_second=price, status=status,
        stake=10**9, unbonding=Unbonding(0, 0), gpus_in_use=in_use,
        reputation=reputation or Reputation(0, 0, 0, 0, 0), bump=255, endpoint=endpoint,
        address=Pubkey(bytes([n] * 32)))  # fmt: skip


TERMS = JobTerms(2_000, 500, 5000, 2, 10, 24, 5, 1, 100, 5000, 1000, 95, 0, 1000)
JOB = Pubkey.new_unique()


def job(status: str = "running", *, deposited: int = 100_000, paid_seconds: int = 20,
        last_window_end: int = NOW - 3, user: Pubkey | None = None) -> JobView:  # fmt: skip
    return JobView(
        market=MARKET, user=user or USER.pubkey(), provider=Pubkey(bytes([1] * 32)), job_id=1,
        gpu_count=2, terms=TERMS, committee=MEMBERS[:2], committee_len=2, deposited=deposited,
        claimed_seconds=paid_seconds, paid_seconds=paid_seconds,
        paid_provider=paid_seconds * 2_000, paid_validators=0, paid_treasury=0, burned=0,
        refunded=0, status=status, created_at=NOW - 60, started_at=NOW - 30,
        ended_at=0 if status in ("open", "running") else NOW - 1, last_seq=5,
        last_receipt_hash=bytes(32), last_window_end=last_window_end, bump=255, escrow_bump=255,
        workload_hash=bytes([7] * 32), address=JOB)  # fmt: skip


WINDOWS = [{"seq": s, "window_start": NOW - 8 + 2 * s, "window_end": NOW - 6 + 2 * s,
            "billable_seconds": 2, "approved_seconds": 2, "decision": "accepted",
            "workload_state": "running",
            "gpus": [{"uuid": "GPU-a", "util_gpu_avg_bp": 9000, "temp_max_c": 70,
                      "power_avg_mw": None, "mem_used_max_mib": None},
                     {"uuid": "GPU-b", "util_gpu_avg_bp": 8000, "temp_max_c": 74,
                      "power_avg_mw": None, "mem_used_max_mib": None}]}
           for s in (1, 2)]  # fmt: skip


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(cli_run, "_sleep", lambda s: None)
    monkeypatch.setattr(cli_watch, "_sleep", lambda s: None)
    monkeypatch.setattr(cli_run, "_probe", lambda offers, left: {
        o.provider: Liveness(DOWN.get(o.provider) is None, NOW, DOWN.get(o.provider, ""))
        for o in offers})
    DOWN.clear()


DOWN: dict = {}
"""Providers whose worker fails its health probe in a test -> why."""


@pytest.fixture
def keyfile(tmp_path):
    path = tmp_path / "id.json"
    path.write_text(json.dumps(list(bytes(USER))))
    return str(path)


@pytest.fixture
def chain(monkeypatch):
    """Every chain read and write of run and watch, answered from ``state``; writes recorded
    in ``state.calls``."""
    from gpu_market.client import GpuMarketClient

    state = SimpleNamespace(
        providers=[provider(1, price=1_000), provider(2, price=900, endpoint=""),
                   provider(3, price=1_200), provider(4, model="RTX 4090", price=100)],
        balance=10**12, calls=[], jobs=[job()], windows={MEMBERS[0]: WindowsApiError("down"),
                                                         MEMBERS[1]: WINDOWS})  # fmt: skip

    def by_key() -> dict:
        return {p.address: p for p in state.providers}

    monkeypatch.setattr(GpuMarketClient, "fetch_market", lambda self, m: market())
    monkeypatch.setattr(GpuMarketClient, "mint_decimals", lambda self, m: 6)
    monkeypatch.setattr(GpuMarketClient, "chain_time", lambda self: NOW)
    monkeypatch.setattr(GpuMarketClient, "_program_accounts", lambda self, kind, memcmp: list(state.providers))
    monkeypatch.setattr(GpuMarketClient, "fetch_provider", lambda self, p: by_key().get(p))
    monkeypatch.setattr(GpuMarketClient, "token_balance", lambda self, a: state.balance)
    monkeypatch.setattr(GpuMarketClient, "default_committee",
                        lambda self, m, size, exclude: MEMBERS[:size])  # fmt: skip

    def fetch_job(self, key):
        return state.jobs.pop(0) if len(state.jobs) > 1 else state.jobs[0]

    monkeypatch.setattr(GpuMarketClient, "fetch_job", fetch_job)

    def create_job(self, user, m, p, job_id, gpus, deposit, **kw):
        state.calls.append(("create_job", p, gpus, deposit, kw))
        return "SiGcreate", JOB

    monkeypatch.setattr(GpuMarketClient, "create_job", create_job)

    def cancel_job(self, user, key):
        state.calls.append(("cancel_job", key))
        state.jobs = [replace(job("cancelled"), refunded=state.jobs[0].deposited)]
        return "SiGcancel"

    monkeypatch.setattr(GpuMarketClient, "cancel_job", cancel_job)

    def top_up(self, user, key, amount):
        state.calls.append(("top_up", key, amount))
        return "SiGtop"

    monkeypatch.setattr(GpuMarketClient, "top_up", top_up)
    monkeypatch.setattr(GpuMarketClient, "fetch_validator_by_authority", lambda self, m, a: ValidatorView(
        MARKET, a, 1, Unbonding(0, 0), "active", 0, 255, f"http://v{MEMBERS.index(a)}.example", 0, 0, 0))

    def windows(endpoint, key, limit):
        got = state.windows[MEMBERS[int(endpoint[len("http://v")])]]
        if isinstance(got, Exception):
            raise got
        return got[-limit:]

    monkeypatch.setattr(cli_watch, "fetch_windows", windows)
    return state


def run(args: list[str]) -> tuple[int, str, str]:
    runner = CliRunner()
    with runner.isolation() as (out, err, *_):
        code = cli_mod.main(args)
        return code, out.getvalue().decode(), err.getvalue().decode()


def one_line_error(err: str, *needles: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def gpum_run(keyfile: str, *args: str) -> tuple[int, str, str]:
    return run(["--output", "json", "run", "--market", str(MARKET), "-k", keyfile, *args])


def dry(keyfile: str, *args: str) -> tuple[int, str, str]:
    return gpum_run(keyfile, "--gpu", "H100:2", "--hours", "1.5", "--image", "busybox:1",
                    "--dry-run", *args)


# ----------------------------------------------------------------------------- run --dry-run


def test_dry_run_shows_the_best_offer_deposit_and_committee_and_sends_nothing(keyfile, chain) -> None:
    code, out, err = dry(keyfile)
    assert (code, err) == (0, "")
    data = json.loads(out)
    # Provider 2 is cheaper but runs no containers; the RTX 4090 does not match H100.
    assert data == {
        "dry_run": True, "provider": str(Pubkey(bytes([1] * 32))), "gpu_model": "NVIDIA H100 80GB",
        "gpus": 2, "region": "eu-west", "score": 0.3, "price_per_gpu_hour": "3.6",
        "cost_per_hour": "7.2", "hours": "1.5", "deposit": "10.8", "deposit_covers": "1h30m",
        "committee": [str(k) for k in MEMBERS], "quorum": 2, "image": "busybox:1",
        "balance": "1000000"}  # fmt: skip
    assert chain.calls == []


def test_dry_run_in_text_mode(keyfile, chain) -> None:
    code, out, _ = run(["run", "--market", str(MARKET), "-k", keyfile, "--gpu", "h100:1",
                        "--hours", "2", "--image", "busybox:1", "--dry-run"])
    assert code == 0
    assert "deposit: 7.2" in out and "cost_per_hour: 3.6" in out and "dry_run: True" in out


def test_dry_run_with_a_named_provider_committee_and_quorum(keyfile, chain) -> None:
    named = str(Pubkey(bytes([3] * 32)))
    code, out, _ = dry(keyfile, "--provider", named, "--committee", f"{MEMBERS[2]}", "--quorum", "1")
    data = json.loads(out)
    assert code == 0 and data["provider"] == named and data["price_per_gpu_hour"] == "4.32"
    assert data["committee"] == [str(MEMBERS[2])] and data["quorum"] == 1


def test_the_deposit_is_at_least_one_window(keyfile, chain) -> None:
    # 0.001 h = 3.6 s at 2 GPUs x 1000/s = 7200, under one 60 s window (120000).
    code, out, _ = gpum_run(keyfile, "--gpu", "H100:2", "--hours", "0.001", "--image", "b:1",
                            "--dry-run")
    assert code == 0 and json.loads(out)["deposit"] == "0.12"


def test_max_price_is_per_gpu_hour(keyfile, chain) -> None:
    code, out, _ = dry(keyfile, "--max-price", "3.6")
    assert code == 0 and json.loads(out)["price_per_gpu_hour"] == "3.6"


# ----------------------------------------------------------------------------- run refusals


@pytest.mark.parametrize("args, needles", [
    (["--gpu", "H100", "--hours", "1", "--image", "b:1"], ["'--gpu'", "MODEL:COUNT"]),
    (["--gpu", "H100:0", "--hours", "1", "--image", "b:1"], ["'--gpu'", "1..256"]),
    (["--gpu", "H100:x", "--hours", "1", "--image", "b:1"], ["'--gpu'", "not a whole number"]),
    (["--gpu", "H100:1", "--hours", "-1", "--image", "b:1"], ["'--hours'", "duration"]),
    (["--gpu", "H100:1", "--hours", "soon", "--image", "b:1"], ["'--hours'", "duration"]),
    (["--gpu", "H100:1", "--hours", "1"], ["needs --image IMAGE", "gpum job create"]),
    (["--gpu", "H100:1", "--hours", "1", "--port", "80"], ["pass --image too"]),
    (["--hours", "1", "--image", "b:1"], ["Missing option '--gpu'"]),
])  # fmt: skip
def test_bad_arguments_are_one_line_and_exit_2(keyfile, chain, args, needles) -> None:
    code, _, err = gpum_run(keyfile, *args)
    assert code == 2
    one_line_error(err, *needles)
    assert chain.calls == []


@pytest.mark.parametrize("args, needles", [
    (["--gpu", "A100:1"], ["no offer has a GPU model matching 'A100'", "'NVIDIA H100 80GB'"]),
    (["--gpu", "H100:9"], ["no H100 offer has 9 free GPU(s); the most any has is 8"]),
    (["--gpu", "H100:1", "--max-price", "3"],
     ["the cheapest matching offer costs 3.6 per GPU-hour, above your --max-price 3"]),
])  # fmt: skip
def test_no_offer_says_which_constraint(keyfile, chain, args, needles) -> None:
    code, _, err = gpum_run(keyfile, *args, "--hours", "1", "--image", "b:1", "--dry-run")
    assert code == 1
    one_line_error(err, *needles)


def test_no_offer_that_runs_containers(keyfile, chain) -> None:
    chain.providers = [provider(2, endpoint="")]
    code, _, err = gpum_run(keyfile, "--gpu", "H100:1", "--hours", "1", "--image", "b:1")
    assert code == 1
    one_line_error(err, "none runs containers", "gpum job create")


def test_no_offers_at_all(keyfile, chain) -> None:
    chain.providers = [provider(1, in_use=8)]
    code, _, err = gpum_run(keyfile, "--gpu", "H100:1", "--hours", "1", "--image", "b:1")
    assert code == 1
    one_line_error(err, "no offers in market", "gpum offers")


@pytest.mark.parametrize("n, args, needles", [
    (3, ["--max-price", "4"], ["charges 4.32 per GPU-hour, above your --max-price 4"]),
    (2, [], ["publishes no worker endpoint", "runs no containers"]),
    (4, [], ["offers 'RTX 4090', which does not match --gpu H100"]),
    (9, [], ["does not exist"]),
])  # fmt: skip
def test_a_named_provider_that_does_not_fit(keyfile, chain, n, args, needles) -> None:
    code, _, err = gpum_run(keyfile, "--gpu", "H100:1", "--hours", "1", "--image", "b:1",
                            "--provider", str(Pubkey(bytes([n] * 32))), *args)
    assert code == 1
    one_line_error(err, *needles)
    assert chain.calls == []


def test_a_paused_or_full_named_provider(keyfile, chain) -> None:
    chain.providers = [provider(1, status="paused"), provider(3, in_use=7)]
    for n, needle in ((1, "is paused and takes no jobs"), (3, "has 1 free GPU(s)")):
        code, _, err = gpum_run(keyfile, "--gpu", "H100:2", "--hours", "1", "--image", "b:1",
                                "--provider", str(Pubkey(bytes([n] * 32))))
        assert code == 1
        one_line_error(err, needle)


def test_not_enough_balance_is_checked_before_sending(keyfile, chain) -> None:
    chain.balance = 10_000_000
    code, _, err = gpum_run(keyfile, "--gpu", "H100:2", "--hours", "1.5", "--image", "b:1")
    assert code == 1
    one_line_error(err, "holds 10; the deposit for 1.5 h needs 10.8", "fewer --hours")
    assert chain.calls == []


def test_a_bad_workload_is_refused_before_sending(keyfile, chain) -> None:
    code, _, err = gpum_run(keyfile, "--gpu", "H100:1", "--hours", "1", "--image", "Bad Image!")
    assert code == 1
    one_line_error(err, "bad workload", "nothing was sent")
    assert chain.calls == []


# ----------------------------------------------------------------------------- run, waiting


@pytest.fixture
def worker(monkeypatch):
    """The provider's worker answered locally: deliveries recorded, status from ``states``."""
    from gpu_market import workload_api

    box = SimpleNamespace(delivered=[], states=[], deliveries=[])

    def deliver(endpoint, job_, spec, secret, timeout, retries):
        assert retries == 0 and timeout <= cli_run.DELIVER_ATTEMPT_S
        got = box.deliveries.pop(0) if box.deliveries else {"state": "pending"}
        if isinstance(got, Exception):
            raise got
        box.delivered.append((Pubkey.from_bytes(job_), spec))
        return got

    monkeypatch.setattr(workload_api, "deliver_workload", deliver)

    def status(endpoint, job_, workload_hash, secret, timeout=10.0):
        assert endpoint == ENDPOINT and bytes(job_) == bytes(JOB)
        got = box.states.pop(0) if len(box.states) > 1 else box.states[0]
        if isinstance(got, Exception):
            raise got
        return got

    monkeypatch.setattr(workload_api, "workload_status", status)
    return box


def test_run_creates_delivers_and_waits_for_the_container(keyfile, chain, worker) -> None:
    from gpu_market.workload_api import WorkerApiError

    chain.jobs = [job("open"), job("open"), job("running")]
    worker.states = [WorkerApiError("busy"), {"state": "starting", "ports": []},
                     {"state": "running", "ports": [{"host": "203.0.113.5", "host_port": 40123,
                                                     "port": 8080, "protocol": "tcp"}]}]  # fmt: skip
    code, out, err = gpum_run(keyfile, "--gpu", "H100:2", "--hours", "1.5", "--image", "b:1",
                              "--port", "8080", "--job-id", "77")
    assert code == 0, err
    data = json.loads(out)
    assert data["job"] == str(JOB) and data["job_id"] == 77 and data["state"] == "running"
    assert data["endpoints"] == ["203.0.113.5:40123"]
    assert data["ports"] == ["203.0.113.5:40123 -> 8080/tcp"] and data["cost_per_hour"] == "7.2"
    (name, p, gpus, deposit, kw), = chain.calls
    assert (name, p, gpus, deposit) == ("create_job", Pubkey(bytes([1] * 32)), 2, 10_800_000)
    assert kw["max_price_per_gpu_second"] == 1_000 and kw["quorum"] == 2
    assert kw["workload_hash"].hex() == data["workload_hash"]
    assert [j for j, _ in worker.delivered] == [JOB]
    assert err == ""  # json mode: no progress line


def test_run_shows_progress_on_stderr_in_text_mode(keyfile, chain, worker) -> None:
    chain.jobs = [job("open"), job("running")]
    worker.states = [{"state": "running", "ports": []}]
    code, out, err = run(["run", "--market", str(MARKET), "-k", keyfile, "--gpu", "H100:1",
                          "--hours", "1", "--image", "b:1"])
    assert code == 0
    assert "waiting for provider" in err and "to accept job" in err
    assert f"job: {JOB}" in out and "endpoints: none" in out


@pytest.mark.parametrize("jobs, states, needles", [
    (["declined"], [{"state": "pending"}], ["declined job", "gpum job close"]),
    (["running"], [{"state": "failed", "error": "image not found"}],
     ["could not run the container", "image not found", "gpum job stop"]),
    (["running"], [{"state": "exited", "exit_code": 3}], ["exited with code 3", "gpum job logs"]),
    (["completed"], [{"state": "pending"}], ["is completed before its container ran"]),
    (["open"], [{"state": "pending"}], ["did not accept job", "within --timeout 40 s",
                                        "cancelled: 0.1 refunded in full"]),
    (["running"], [{"state": "starting"}], ["is running but its container is not running after",
                                            "gpum job stop"]),
])  # fmt: skip
def test_run_reports_why_the_container_does_not_run(monkeypatch, keyfile, chain, worker, jobs,
                                                    states, needles) -> None:  # fmt: skip
    ticks = iter(range(0, 1000, 2))
    monkeypatch.setattr(cli_run, "_monotonic", lambda: next(ticks))
    chain.jobs = [job(s) for s in jobs]
    worker.states = states
    code, _, err = gpum_run(keyfile, "--gpu", "H100:1", "--hours", "1", "--image", "b:1",
                            "--timeout", "40")
    assert code == 1
    one_line_error(err, *needles)


def test_a_container_that_finished_cleanly_is_a_success(keyfile, chain, worker) -> None:
    worker.states = [{"state": "exited", "exit_code": 0, "ports": []}]
    code, out, _ = gpum_run(keyfile, "--gpu", "H100:1", "--hours", "1", "--image", "b:1")
    assert code == 0 and json.loads(out)["state"] == "exited"


# ----------------------------------------------------------------------------- dead providers


def test_a_named_provider_whose_worker_is_down_is_refused_before_any_transaction(keyfile, chain,
                                                                                  worker) -> None:
    named = Pubkey(bytes([3] * 32))
    DOWN[named] = "no answer from http://worker.example:9000/v1/health: connection refused"
    code, _, err = gpum_run(keyfile, "--gpu", "H100:1", "--hours", "1", "--image", "b:1",
                            "--provider", str(named))
    assert code == 1
    one_line_error(err, f"provider {named}'s worker at {ENDPOINT} failed its health check",
                   "connection refused", "no money moved")
    assert chain.calls == [] and worker.delivered == []


def test_the_best_live_offer_is_chosen_and_none_live_is_refused(keyfile, chain) -> None:
    DOWN[Pubkey(bytes([1] * 32))] = "HTTP 502"
    code, out, _ = dry(keyfile)
    assert code == 0 and json.loads(out)["provider"] == str(Pubkey(bytes([3] * 32)))
    DOWN[Pubkey(bytes([3] * 32))] = "no answer within 5 s"
    code, _, err = dry(keyfile)
    assert code == 1
    one_line_error(err, "2 offer(s) fit, but no provider's worker answers its health check",
                   "HTTP 502", "no answer within 5 s", "no money moved", "gpum offers --all")
    assert chain.calls == []


def test_an_undelivered_workload_cancels_the_job_within_the_timeout(monkeypatch, keyfile, chain,
                                                                   worker) -> None:
    from gpu_market.workload_api import WorkerApiError

    clock, sleeps = [0.0], []

    def sleep(seconds):
        sleeps.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(cli_run, "_monotonic", lambda: clock[0])
    monkeypatch.setattr(cli_run, "_sleep", sleep)
    chain.jobs = [job("open")]
    worker.deliveries = [WorkerApiError("cannot reach the provider's worker")] * 100
    code, _, err = gpum_run(keyfile, "--gpu", "H100:1", "--hours", "1", "--image", "b:1",
                            "--timeout", "40")
    assert code == 1
    one_line_error(err, "the workload was not delivered", "cannot reach",
                   f"job {JOB} cancelled: 0.1 refunded in full (transaction SiGcancel)")
    assert [c[0] for c in chain.calls] == ["create_job", "cancel_job"]
    # backoff 0.5, 1, 2, 4, 5, 5, ... until 40 s less the 5 s kept for the cancel
    assert sum(sleeps) == pytest.approx(35) and max(sleeps) <= 5


def test_a_refused_workload_cancels_at_once(keyfile, chain, worker) -> None:
    from gpu_market.workload_api import WorkerApiError

    chain.jobs = [job("open")]
    worker.deliveries = [WorkerApiError("HTTP 400: bad spec", status=400)]
    code, _, err = gpum_run(keyfile, "--gpu", "H100:1", "--hours", "1", "--image", "b:1")
    assert code == 1
    one_line_error(err, "(1 attempt(s) within --timeout)", "HTTP 400", "cancelled", "refunded in full")


@pytest.mark.parametrize("status, needles", [
    ("open", ["interrupted; job", "cancelled: 0.1 refunded in full"]),
    ("running", ["interrupted; job", "is running and billing: stop it with `gpum job stop"]),
])  # fmt: skip
def test_ctrl_c_cancels_an_open_job_or_says_how_to_stop_a_running_one(monkeypatch, keyfile, chain,
                                                                      worker, status, needles):
    def interrupt(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_run, "_sleep", interrupt)
    chain.jobs = [job(status)]
    worker.states = [{"state": "starting"}]
    code, _, err = gpum_run(keyfile, "--gpu", "H100:1", "--hours", "1", "--image", "b:1")
    assert code == 1
    one_line_error(err, *needles)
    assert ("cancel_job" in [c[0] for c in chain.calls]) == (status == "open")


# ----------------------------------------------------------------------------- job watch


def watch(*args: str, output: str = "json") -> tuple[int, str, str]:
    return run(["--output", output, "job", "watch", str(JOB), *args])


def test_watch_once_shows_runway_and_the_windows_of_the_first_member_that_answers(chain) -> None:
    code, out, err = watch("--once", "--windows", "1")
    assert (code, err) == (0, "")
    d = json.loads(out)
    assert d["status"] == "running" and d["rate_per_second"] == "0.002"
    assert d["spend_per_hour"] == "7.2" and d["booked_escrow"] == "0.06"
    assert (d["unsettled_seconds"], d["available"], d["runway_seconds"]) == (3, "0.054", 27)
    assert (d["settled_seconds"], d["running_seconds"]) == (20, 30)
    assert d["windows"] == {"validator": str(MEMBERS[1]), "endpoint": "http://v1.example",
                            "windows": WINDOWS[-1:]}
    assert d["auto_top_up"] is None and d["warning"] is None


def test_watch_text_block(chain) -> None:
    code, out, _ = watch("--once", "--warn-below", "1m", output="text")
    assert code == 0
    assert f"job {JOB}  running" in out and "runway    27s" in out
    assert "spend     7.2 per hour (2 GPU(s) at 3.6 per GPU-hour)" in out
    assert "escrow    0.06 booked; 0.054 available after 3 s unsettled" in out
    assert "settled 20, running 30" in out and f"from validator {MEMBERS[1]}" in out
    assert "#2" in out and "GPU util 85.0% max 74 C" in out
    assert "warning   job" in out and "27s of runway left, below 1m" in out


def test_watch_says_when_no_member_answers(chain) -> None:
    chain.windows[MEMBERS[1]] = WindowsApiError("validator http://v1.example answered HTTP 404")
    code, out, _ = watch("--once")
    assert code == 0
    error = json.loads(out)["windows"]["error"]
    assert error.startswith("none of the job's 2 committee validator(s) answered")
    assert str(MEMBERS[0]) in error and "HTTP 404" in error
    code, out, _ = watch("--once", output="text")
    assert "windows   unavailable: none of the job's 2" in out


def test_watch_runs_until_the_job_ends(chain) -> None:
    # (the first read checks the job exists; each round reads it again)
    chain.jobs = [job(), job(), job(paid_seconds=25), job("completed", paid_seconds=30)]
    code, out, _ = watch("--interval", "0.1")
    assert code == 0
    rounds = [json.loads(line) for line in out.strip().splitlines()]
    assert [r["status"] for r in rounds] == ["running", "running", "completed"]
    assert rounds[-1]["runway_seconds"] is None and rounds[-1]["running_seconds"] == 29


def test_watch_tops_up_within_the_budget_and_remembers_it(chain, keyfile, gpum_home) -> None:
    # 27 s of runway, below 30 s: top up to 60 s = 120000 - 54000 = 66000, budget 0.1.
    code, out, err = watch("--once", "-k", keyfile, "--auto-top-up-below", "30s",
                           "--budget", "0.1")
    assert code == 0, err
    d = json.loads(out)
    assert d["auto_top_up"] == {"below_seconds": 30, "target_seconds": 60, "budget": "0.1",
                                "spent": "0.066", "top_ups": [{"amount": "0.066",
                                                               "signature": "SiGtop"}],
                                "error": None}  # fmt: skip
    assert chain.calls == [("top_up", JOB, 66_000)]
    state = json.loads((gpum_home / "topups" / f"{JOB}.json").read_text())
    assert state == {"version": 1, "spent": {str(JOB): 66_000}}
    # A second run of watch remembers what was spent: only 0.034 is left of the budget.
    code, out, _ = watch("--once", "-k", keyfile, "--auto-top-up-below", "30s", "--budget", "0.1")
    d = json.loads(out)
    assert d["auto_top_up"]["spent"] == "0.1" and chain.calls[-1] == ("top_up", JOB, 34_000)
    assert "budget" in d["warning"] and "runs dry" in d["warning"]


def test_watch_auto_top_up_needs_the_jobs_user(chain, tmp_path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps(list(bytes(Keypair()))))
    code, _, err = watch("--once", "-k", str(other), "--auto-top-up-below", "30s", "--budget", "1")
    assert code == 1
    one_line_error(err, "only the job's user", "--keypair")
    assert chain.calls == []


def test_watch_of_a_closed_job(chain) -> None:
    chain.jobs = [None]
    code, _, err = watch("--once")
    assert code == 1
    one_line_error(err, "does not exist")


@pytest.mark.parametrize("args, needles", [
    (["--budget", "1"], ["--auto-top-up-below and --budget go together"]),
    (["--auto-top-up-below", "5m"], ["--auto-top-up-below and --budget go together"]),
    (["--auto-top-up-below", "5", "--budget", "1"], ["'--auto-top-up-below'", "has no unit"]),
    (["--auto-top-up-below", "0s", "--budget", "1"], ["'--auto-top-up-below'", "more than 0s"]),
    (["--auto-top-up-below", "5m", "--budget", "1", "--top-up-to", "1m"],
     ["'--top-up-to'", "1m is below --auto-top-up-below 5m"]),
    (["--top-up-to", "1h"], ["--top-up-to needs --auto-top-up-below"]),
    (["--warn-below", "soon"], ["'--warn-below'", "not a duration"]),
    (["--interval", "0"], ["'--interval'"]),
    (["--auto-top-up-below", "5m", "--budget", "-1"], ["'--budget'", "negative"]),
])  # fmt: skip
def test_watch_argument_errors(chain, keyfile, args, needles) -> None:
    code, _, err = watch("--once", "-k", keyfile, *args)
    assert code == 2
    one_line_error(err, *needles)
    assert chain.calls == []


def test_parse_gpu_and_hours() -> None:
    assert cli_run.parse_gpu("RTX 4090:2") == ("RTX 4090", 2)
    assert cli_run.parse_gpu("a:b:3") == ("a:b", 3)
    assert cli_run.parse_hours("0.5") == 1800 and cli_run.parse_hours("1") == 3600
    for bad in ("inf", "nan", "0"):
        with pytest.raises(ValueError):
            cli_run.parse_hours(bad)


def test_replace_keeps_job_views_frozen() -> None:
    # the fixtures' jobs are immutable views: a watch never mutates what it read
    j = job()
    assert replace(j, deposited=1).deposited == 1 and j.deposited == 100_000
