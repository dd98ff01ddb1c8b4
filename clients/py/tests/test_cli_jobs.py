"""gpum job list / stop / close / cancel and job names (gpu_market.cli.job_control,
gpu_market.job_history): a small chain of jobs answered locally, the history in a temporary
folder."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from gpu_market.job_history import HistoryError, JobHistory, Receipt, check_name
from solders.pubkey import Pubkey
from test_cli import CHAIN_NOW, MARKET, MEMBERS, assert_one_line_error, fake_job, offline, run

M = Pubkey.from_string(MARKET)
URL = "http://127.0.0.1:8899"


class Chain:
    """Jobs, their escrows and the clock, with the user's writes applied as the program would."""

    def __init__(self) -> None:
        self.jobs: dict[Pubkey, object] = {}
        self.escrow: dict[Pubkey, int] = {}
        self.now = CHAIN_NOW
        self.sent: list[tuple[str, Pubkey]] = []
        self.events_fail = False
        self.mono = 0.0

    def add(self, owner: Pubkey, status: str, **kw) -> Pubkey:
        address = Pubkey.new_unique()
        j = replace(fake_job(status), market=M, user=owner, address=address, deposited=100_000,
                    workload_hash=bytes(32), **kw)  # fmt: skip
        self.jobs[address] = j
        self.escrow[address] = j.booked_escrow
        return address

    def patch(self, monkeypatch) -> None:
        from gpu_market import pda
        from gpu_market.client import GpuMarketClient

        escrows = {}

        def escrow_of(job):
            escrows[pda.escrow_pda(job)] = job
            return pda.escrow_pda(job)

        def token_balance(self_, account):
            for job in self.jobs:
                if escrow_of(job) == account:
                    return self.escrow[job]
            raise AssertionError(account)

        def end(status, refund=False):
            def write(self_, kp, job):
                j = self.jobs[job]
                self.sent.append((status, job))
                if refund:  # cancel: the whole escrow back at once
                    self.jobs[job] = replace(j, status=status, refunded=j.refunded + self.escrow[job])
                    self.escrow[job] = 0
                else:
                    self.jobs[job] = replace(j, status=status, ended_at=self.now)
                return f"sig-{status}"
            return write

        def close(self_, kp, job):
            self.sent.append(("closed", job))
            self.closed = (job, self.escrow.pop(job))
            del self.jobs[job]
            return "sig-close"

        def events(self_, sig):
            if self.events_fail:
                raise RuntimeError("logs pruned")
            job, refunded = self.closed
            return [("JobClosed", {"job": job, "refunded": refunded, "surplus_returned": 0})]

        def sleep(seconds):
            self.mono += seconds
            self.now += int(seconds + 0.5)

        from gpu_market.cli import job_control

        monkeypatch.setattr(job_control, "_sleep", sleep)
        monkeypatch.setattr(job_control, "_monotonic", lambda: self.mono)
        monkeypatch.setattr(GpuMarketClient, "chain_time", lambda self_: self.now)
        monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self_, j: self.jobs.get(j))
        monkeypatch.setattr(GpuMarketClient, "fetch_jobs", lambda self_, ks: [self.jobs.get(k) for k in ks])
        monkeypatch.setattr(GpuMarketClient, "list_jobs",
                            lambda self_, user=None, market=None, **kw: [j for j in self.jobs.values()
                                                                          if j.user == user])  # fmt: skip
        monkeypatch.setattr(GpuMarketClient, "token_balance", token_balance)
        monkeypatch.setattr(GpuMarketClient, "cancel_job", end("cancelled", refund=True))
        monkeypatch.setattr(GpuMarketClient, "finish_job", end("finishing"))
        monkeypatch.setattr(GpuMarketClient, "close_job", close)
        monkeypatch.setattr(GpuMarketClient, "events", events)


@pytest.fixture
def chain(monkeypatch):
    offline(monkeypatch)
    c = Chain()
    c.patch(monkeypatch)
    return c


def _name(address: Pubkey, owner: Pubkey, name: str) -> None:
    JobHistory().record_created(address, url=URL, market=M, user=owner, job_id=1,
                                created_at=CHAIN_NOW, name=name)  # fmt: skip


# ----------------------------------------------------------------------------- names


def test_job_create_with_a_name_then_every_job_command_takes_it(monkeypatch, user, chain):
    from gpu_market.client import GpuMarketClient

    kp, keyfile = user
    address = chain.add(kp.pubkey(), "open")
    monkeypatch.setattr(GpuMarketClient, "min_deposit", lambda self, m, p, n: 1)
    monkeypatch.setattr(GpuMarketClient, "create_job", lambda *a, **kw: ("SiG", address))
    monkeypatch.setattr(GpuMarketClient, "default_committee",
                        lambda self, m, size=3, health_timeout=2.0, exclude=(): MEMBERS[:size])  # fmt: skip
    create = ["--output", "json", "job", "create", "--market", MARKET, "--provider", MARKET,
              "--deposit", "0.1", "-k", keyfile]  # fmt: skip
    code, out, err = run([*create, "--name", "train"])
    assert (code, err) == (0, "") and json.loads(out)["name"] == "train"
    # the name is taken while its job is on chain: refused before any money moves
    monkeypatch.setattr(GpuMarketClient, "create_job", lambda *a, **kw: pytest.fail("sent"))
    code, _, err = run([*create, "--name", "train"])
    assert code == 2
    assert_one_line_error(err, "'--name'", f"taken by job {address}", "pick another --name")
    code, _, err = run([*create, "--name", "bad name"])
    assert code == 2
    assert_one_line_error(err, "'--name'", "not valid")
    code, out, err = run(["--output", "json", "job", "status", "train", "-k", keyfile])
    assert (code, err) == (0, "") and json.loads(out)["job"] == str(address)
    code, out, err = run(["--output", "json", "job", "cancel", "train", "-k", keyfile])
    assert (code, err) == (0, "") and chain.sent == [("cancelled", address)]


def test_unknown_and_ambiguous_names(user, chain):
    kp, keyfile = user
    code, _, err = run(["job", "status", "nosuch", "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "no job named 'nosuch'", "`gpum job list --all`")
    a, b = chain.add(kp.pubkey(), "running"), chain.add(kp.pubkey(), "running")
    _name(a, kp.pubkey(), "twin")
    _name(b, kp.pubkey(), "twin")
    code, _, err = run(["job", "stop", "twin", "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "2 jobs are named 'twin'", str(a), str(b), "pass the job's address")
    assert chain.sent == []
    # a name on another cluster does not answer here
    code, _, err = run(["job", "status", "twin", "-u", "devnet", "-k", keyfile])
    assert_one_line_error(err, "no job named 'twin' on https://api.devnet.solana.com")


def test_check_name():
    assert check_name("llama-70b_v2.1") == "llama-70b_v2.1"
    for bad in ("", "-x", "a b", "x" * 33, str(Pubkey.new_unique())):
        with pytest.raises(HistoryError):
            check_name(bad)


def test_a_corrupt_history_is_one_line(user, chain, gpum_home):
    _kp, keyfile = user
    (gpum_home / "data").mkdir(parents=True)
    (gpum_home / "data" / "jobs.json").write_text("{not json")
    code, _, err = run(["job", "status", "train", "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "cannot read the job history", "move it away")


# ----------------------------------------------------------------------------- cancel


def test_cancel_a_running_job_says_stop_or_finish(user, chain):
    kp, keyfile = user
    address = chain.add(kp.pubkey(), "running")
    code, _, err = run(["job", "cancel", str(address), "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "only an Open job can be cancelled", f"`gpum job stop {address}`",
                          f"`gpum job finish {address}`")  # fmt: skip
    assert chain.sent == []


# ----------------------------------------------------------------------------- stop / close


def test_stop_a_running_job_waits_the_grace_then_prints_the_receipt(user, chain, capfd):
    kp, keyfile = user
    address = chain.add(kp.pubkey(), "running", paid_provider=30_000, paid_validators=3_000,
                        paid_treasury=1_000, burned=1_000)  # fmt: skip
    _name(address, kp.pubkey(), "train")
    code, out, err = run(["job", "stop", "train", "-k", keyfile])
    assert code == 0, err
    assert [s for s, _ in chain.sent] == ["finishing", "closed"]
    assert "billing stopped" in err and "waiting for the settlement grace to end at" in err
    assert 1 < err.count("waiting for") <= 720 // 30 + 1  # a line every 30 s, not every poll
    assert chain.now > CHAIN_NOW + 720  # it closed only after the grace (720 s), by the chain's clock
    assert f"job {address} (train) closed" in out
    assert "deposited: 0.1" in out and "refunded:  0.065" in out
    assert "paid:      0.035 (provider 0.03, fees 0.005: validators 0.003, treasury 0.001, burned 0.001)" in out
    r = JobHistory().records()[str(address)]
    assert r["receipt"]["paid"] + r["receipt"]["refunded"] == r["receipt"]["deposited"] == 100_000
    assert r["name"] == "train" and r["status"] == "finishing"


def test_stop_an_open_job_cancels_it_with_a_full_refund(user, chain):
    kp, keyfile = user
    address = chain.add(kp.pubkey(), "open")
    code, out, err = run(["--output", "json", "job", "stop", str(address), "-k", keyfile])
    assert code == 0, err
    assert [s for s, _ in chain.sent] == ["cancelled", "closed"]
    data = json.loads(out)
    assert data["receipt"]["refunded"] == data["receipt"]["deposited"] == 100_000
    assert data["receipt"]["paid"] == 0 and data["status"] == "closed"


def test_stop_gives_up_at_the_timeout_and_says_what_next(user, chain):
    kp, keyfile = user
    address = chain.add(kp.pubkey(), "running")
    code, _, err = run(["job", "stop", str(address), "--timeout", "1m", "-k", keyfile])
    assert code == 1
    assert "billing stopped" in err
    assert_one_line_error(err.splitlines()[-1], "finished (billing stopped)", "grace ends at",
                          f"`gpum job stop {address}` again")  # fmt: skip
    assert [s for s, _ in chain.sent] == ["finishing"]
    code, _, err = run(["job", "stop", str(address), "--timeout", "5", "-k", keyfile])
    assert code == 2
    assert_one_line_error(err, "'--timeout'", "no unit")


def test_stop_interrupted_says_how_to_finish(monkeypatch, user, chain):
    from gpu_market.cli import job_control

    kp, keyfile = user
    address = chain.add(kp.pubkey(), "running")

    def interrupt(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(job_control, "_sleep", interrupt)
    code, _, err = run(["job", "stop", str(address), "-k", keyfile])
    assert code == 1
    assert_one_line_error(err.splitlines()[-1], "interrupted", "is finishing",
                          f"`gpum job stop {address}` again")  # fmt: skip


def test_stop_someone_elses_job_is_refused(user, chain):
    _kp, keyfile = user
    address = chain.add(Pubkey.new_unique(), "running")
    code, _, err = run(["job", "stop", str(address), "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "not to your keypair", "--keypair")
    assert chain.sent == []


def test_close_uses_the_escrow_balance_when_events_are_unreadable(user, chain):
    kp, keyfile = user
    address = chain.add(kp.pubkey(), "completed", paid_provider=40_000)
    chain.escrow[address] += 7  # a donation: returned with the refund
    chain.events_fail = True
    code, out, err = run(["--output", "json", "job", "close", str(address), "-k", keyfile])
    assert code == 0
    assert "cannot read the close's events" in err
    rc = json.loads(out)["receipt"]
    assert (rc["paid"], rc["refunded"], rc["donations"]) == (40_000, 60_007, 7)
    assert rc["paid"] + rc["refunded"] == rc["deposited"] + rc["donations"]


# ----------------------------------------------------------------------------- list


def test_list_shows_open_jobs_and_with_all_the_closed_receipts(user, chain):
    kp, keyfile = user
    running = chain.add(kp.pubkey(), "running", paid_provider=10_000,
                        last_window_end=CHAIN_NOW - 10)  # fmt: skip
    chain.add(Pubkey.new_unique(), "running")  # someone else's
    done = chain.add(kp.pubkey(), "completed", paid_provider=25_000)
    _name(running, kp.pubkey(), "train")
    _name(done, kp.pubkey(), "eval")
    code, out, err = run(["--output", "json", "job", "list", "-k", keyfile])
    assert (code, err) == (0, "")
    rows = {r["job"]: r for r in json.loads(out)["jobs"]}
    assert set(rows) == {str(running), str(done)}
    r = rows[str(running)]
    # 10 s unsettled at 1,000/s: spent 10,000 settled + 10,000 accrued; 80,000 left, 80 s of runway
    assert (r["name"], r["status"], r["gpu_count"], r["spent"], r["escrow_left"]) == (
        "train", "running", 1, 20_000, 80_000)
    assert (r["runway_seconds"], r["runs_dry_at"]) == (80, CHAIN_NOW + 80)
    code, out, _ = run(["job", "list", "-k", keyfile])
    assert "NAME" in out and "train" in out and "until 2023-11-14 22:14:40 UTC (in 1 min 20 s)" in out
    assert run(["job", "close", "eval", "-k", keyfile])[0] == 0
    code, out, _ = run(["job", "list", "-k", keyfile])
    assert "1 closed job(s) in the local history: `gpum job list --all`" in out
    code, out, _ = run(["--output", "json", "job", "list", "--all", "-k", keyfile])
    rows = {r["job"]: r for r in json.loads(out)["jobs"]}
    assert rows[str(done)]["status"] == "closed" and rows[str(done)]["name"] == "eval"
    assert rows[str(done)]["receipt"] == Receipt(100_000, 25_000, 0, 0, 0, 75_000).as_dict()
    code, out, _ = run(["job", "list", "--all", "-k", keyfile])
    closed = [line for line in out.splitlines() if line.startswith("eval")]
    assert closed and "0.1" in closed[0] and "0.025" in closed[0] and "0.075" in closed[0]


def test_list_without_jobs(user, chain):
    _, keyfile = user
    code, out, _ = run(["job", "list", "--all", "-k", keyfile])
    assert code == 0
    assert "no open jobs on chain" in out and "no closed jobs in the local history" in out


def test_close_with_an_unwritable_history_still_closes_and_warns(monkeypatch, user, chain, tmp_path):
    kp, keyfile = user
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("GPUM_DATA_DIR", str(tmp_path / "a-file" / "data"))
    address = chain.add(kp.pubkey(), "completed")
    code, out, err = run(["job", "close", str(address), "-k", keyfile])
    assert code == 0 and f"job {address} closed" in out
    assert "warning: the receipt is not kept: cannot write the job history" in err
    assert "GPUM_DATA_DIR" in err
