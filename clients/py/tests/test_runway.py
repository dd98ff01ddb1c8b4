"""gpu_market.runway: the runway math, durations, the auto top-up policy (with property tests),
AutoTopUp against a fake chain, and the validator windows client (httpx MockTransport)."""

from __future__ import annotations

import json
from dataclasses import replace

import httpx
import pytest
from gpu_market.accounts import JobTerms, JobView
from gpu_market.errors import ConfirmationTimeout, GpuMarketError, RpcUnavailable
from gpu_market.runway import (
    AutoTopUp,
    AutoTopUpPolicy,
    Runway,
    TopUpDecision,
    WindowsApiError,
    decide,
    fetch_windows,
    format_duration,
    low_runway_warning,
    parse_duration,
    runway_of,
)
from hypothesis import given
from hypothesis import strategies as st
from solders.keypair import Keypair
from solders.pubkey import Pubkey

NOW = 1_700_001_000
RATE = 1_000
TERMS = JobTerms(RATE, 500, 5000, 2, 10, 24, 5, 1, 100, 5000, 1000, 95, 0, 1000)
USER = Keypair()


def job(status: str = "running", *, deposited: int = 100_000, paid: int = 0, paid_seconds: int = 0,
        started_at: int = NOW - 100, ended_at: int = 0, last_window_end: int = NOW - 4,
        rate: int = RATE, user: Pubkey | None = None, address: Pubkey | None = None) -> JobView:
    """A job whose escrow paid ``paid`` base units to the provider (fees left at 0)."""
    return JobView(
        market=Pubkey.default(), user=user or USER.pubkey(), provider=Pubkey.default(), job_id=1,
        gpu_count=2, terms=replace(TERMS, rate_per_second=rate), committee=[], committee_len=0,
        deposited=deposited, claimed_seconds=paid_seconds, paid_seconds=paid_seconds,
        paid_provider=paid, paid_validators=0, paid_treasury=0, burned=0, refunded=0,
        status=status, created_at=started_at - 10, started_at=started_at, ended_at=ended_at,
        last_seq=3, last_receipt_hash=bytes(32), last_window_end=last_window_end, bump=255,
        escrow_bump=255, address=address or Pubkey.new_unique())  # fmt: skip


def running(available: int, rate: int = RATE, job_key: Pubkey | None = None) -> Runway:
    """A Running job's runway with ``available`` left and nothing unsettled."""
    return Runway(job_key or Pubkey.default(), "running", 1, rate, rate * 3600, available, 0,
                  available, available // rate, 0, 0)  # fmt: skip


# ----------------------------------------------------------------------------- runway_of


def test_runway_of_a_running_job_counts_unsettled_time() -> None:
    j = job(deposited=100_000, paid=30_000, paid_seconds=30, last_window_end=NOW - 4)
    r = runway_of(j, NOW)
    assert r == Runway(j.address, "running", 2, RATE, RATE * 3600, 70_000, 4, 66_000, 66, 30, 100)


def test_runway_of_never_negative() -> None:
    # More unsettled time than escrow: nothing available, runway 0 (the next settle ends it).
    r = runway_of(job(deposited=5_000, last_window_end=NOW - 60), NOW)
    assert (r.available, r.runway_seconds, r.unsettled_seconds) == (0, 0, 60)
    # A window ending after the clock (allowed skew): no negative unsettled time.
    r = runway_of(job(last_window_end=NOW + 3), NOW)
    assert r.unsettled_seconds == 0 and r.available == r.booked_escrow
    # A clock before started_at (another node's clock): running 0.
    assert runway_of(job(started_at=NOW + 5), NOW).running_seconds == 0


@pytest.mark.parametrize("status", ["open", "finishing", "completed", "failed"])
def test_runway_is_none_unless_running(status: str) -> None:
    ended = 0 if status == "open" else NOW - 40
    started = 0 if status == "open" else NOW - 100
    r = runway_of(job(status, started_at=started, ended_at=ended, last_window_end=NOW - 50), NOW)
    assert r.runway_seconds is None and r.unsettled_seconds == 0
    assert r.available == r.booked_escrow == 100_000
    assert r.running_seconds == (0 if status == "open" else 60)


def test_runway_of_a_free_job_is_none_and_an_unaddressed_view_is_default() -> None:
    j = replace(job(rate=0), address=None)
    r = runway_of(j, NOW)
    assert r.runway_seconds is None and r.spend_per_hour == 0 and r.job == Pubkey.default()


def test_runway_of_a_cancelled_job_never_ran() -> None:
    assert runway_of(job("cancelled", started_at=0, ended_at=NOW - 5), NOW).running_seconds == 0


# ----------------------------------------------------------------------------- durations


@pytest.mark.parametrize("text, seconds", [
    ("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86_400), ("1h30m", 5400), ("1d2h3m4s", 93_784),
    (" 2H ", 7200), ("0s", 0), ("1h5s", 3605),
])  # fmt: skip
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text, needle", [
    ("", "empty duration"), ("30", "has no unit; write 30s, 30m"), ("1x", "not a duration"),
    ("30m1h", "out of order"), ("1h1h", "repeats a unit"), ("h", "not a duration"),
    ("-5m", "not a duration"), ("1.5h", "not a duration"), ("1h 30m", "not a duration"),
    ("5m!", "not a duration"),
])  # fmt: skip
def test_parse_duration_errors_say_what_to_write(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle) as e:
        parse_duration(text)
    assert "\n" not in str(e.value) and ("e.g." in str(e.value) or "write" in str(e.value))


@given(st.integers(min_value=0, max_value=10**9))
def test_format_duration_round_trips(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


def test_format_duration() -> None:
    assert format_duration(5430) == "1h30m30s" and format_duration(0) == "0s"
    assert format_duration(86_400) == "1d"
    with pytest.raises(ValueError, match="negative"):
        format_duration(-1)


# ----------------------------------------------------------------------------- policy


@pytest.mark.parametrize("kwargs, needle", [
    ({"below_seconds": 0, "budget": 1}, "below_seconds must be positive"),
    ({"below_seconds": 10, "budget": -1}, "budget must not be negative"),
    ({"below_seconds": 10, "budget": 1, "target_seconds": 9}, "at least below_seconds"),
    ({"below_seconds": 10, "budget": 1, "warn_below_seconds": -1}, "must not be negative"),
])  # fmt: skip
def test_policy_bounds(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        AutoTopUpPolicy(**kwargs)


def test_policy_target_defaults_to_twice_the_threshold() -> None:
    assert AutoTopUpPolicy(60, 1).target == 120
    assert AutoTopUpPolicy(60, 1, target_seconds=60).target == 60


def test_decide_tops_up_to_the_target() -> None:
    d = decide(AutoTopUpPolicy(60, 10**9), running(30 * RATE + 500), 0)
    assert d.amount == 120 * RATE - (30 * RATE + 500) and d.warn is None
    assert "below 1m" in d.reason and "to 2m" in d.reason


def test_decide_waits_while_the_runway_is_long_enough() -> None:
    d = decide(AutoTopUpPolicy(60, 10**9), running(60 * RATE), 0)
    assert d == TopUpDecision(0, None, d.reason) and "not below" in d.reason


def test_decide_stops_at_the_budget_and_warns() -> None:
    policy = AutoTopUpPolicy(60, 50 * RATE)
    partial = decide(policy, running(10 * RATE), 20 * RATE)
    assert partial.amount == 30 * RATE
    assert partial.warn is not None and "budget" in partial.warn and "runs dry" in partial.warn
    spent = decide(policy, running(10 * RATE), 50 * RATE)
    assert spent.amount == 0 and "budget" in (spent.warn or "") and "budget is spent" in spent.reason


def test_decide_warns_below_the_warning_threshold() -> None:
    policy = AutoTopUpPolicy(10, 10**9, target_seconds=20, warn_below_seconds=30)
    # Topped up to 20 s, still below the 30 s warning threshold.
    d = decide(policy, running(5 * RATE), 0)
    assert d.amount == 15 * RATE and "after this top-up" in (d.warn or "")
    # No top-up needed (25 s >= 10 s), but below 30 s: warned.
    d = decide(policy, running(25 * RATE), 0)
    assert d.amount == 0 and "25s of runway left" in (d.warn or "")


def test_decide_never_tops_up_a_job_that_is_not_running() -> None:
    r = replace(running(0), status="open", runway_seconds=None)
    d = decide(AutoTopUpPolicy(60, 10**9), r, 0)
    assert d.amount == 0 and "open" in d.reason
    free = replace(running(0), rate_per_second=0, runway_seconds=None)
    assert decide(AutoTopUpPolicy(60, 10**9), free, 0).amount == 0


def test_low_runway_warning() -> None:
    assert low_runway_warning(running(5 * RATE), None) is None
    assert low_runway_warning(running(5 * RATE), 5) is None
    assert "4s of runway left, below 5s" in (low_runway_warning(running(4 * RATE), 5) or "")
    assert low_runway_warning(replace(running(0), runway_seconds=None), 5) is None


rates = st.integers(min_value=1, max_value=10**6)
policies = st.builds(
    lambda below, extra, budget, warn: AutoTopUpPolicy(below, budget, below + extra, warn),
    st.integers(1, 10**5), st.integers(0, 10**5), st.integers(0, 10**12),
    st.none() | st.integers(0, 10**5))  # fmt: skip


@given(policies, rates, st.lists(st.integers(0, 10**11), max_size=40))
def test_total_topped_up_never_exceeds_the_budget(policy, rate, availables) -> None:
    spent = 0
    for available in availables:
        d = decide(policy, running(available, rate), spent)
        assert d.amount >= 0
        spent += d.amount
        assert spent <= policy.budget


@given(policies, rates, st.integers(0, 10**11), st.integers(0, 10**12))
def test_a_top_up_reaches_the_target_when_the_budget_allows(policy, rate, available, spent) -> None:
    r = running(available, rate)
    d = decide(policy, r, spent)
    if r.runway_seconds is not None and r.runway_seconds < policy.below_seconds:
        need = policy.target * rate - available
        if spent + need <= policy.budget:
            assert d.amount == need  # the least that reaches the target
            assert (available + d.amount) // rate >= policy.target
            assert (available + d.amount - 1) // rate < policy.target
        else:
            assert d.amount == max(0, policy.budget - spent) and d.warn is not None


@given(policies, rates, st.integers(0, 10**11), st.integers(0, 10**12))
def test_no_top_up_while_the_runway_is_at_least_the_threshold(policy, rate, available, spent) -> None:
    r = running(available, rate)
    if r.runway_seconds is not None and r.runway_seconds >= policy.below_seconds:
        assert decide(policy, r, spent).amount == 0


# ----------------------------------------------------------------------------- AutoTopUp


class FakeChain:
    """fetch_job / chain_time / top_up over in-memory JobViews; ``fail`` makes top_up raise."""

    def __init__(self, *jobs: JobView) -> None:
        self.jobs = {j.address: j for j in jobs}
        self.now = NOW
        self.sent: list[tuple[Pubkey, int]] = []
        self.fail: Exception | None = None

    def fetch_job(self, key: Pubkey) -> JobView | None:
        return self.jobs.get(key)

    def chain_time(self) -> int:
        return self.now

    def top_up(self, user: Keypair, key: Pubkey, amount: int) -> str:
        assert user.pubkey() == self.jobs[key].user
        if self.fail is not None:
            raise self.fail
        self.sent.append((key, amount))
        j = self.jobs[key]
        self.jobs[key] = replace(j, deposited=j.deposited + amount)
        return f"SiG{len(self.sent)}"

    def settle(self, key: Pubkey, seconds: int) -> None:
        """``seconds`` pass and are settled (capped by the escrow, as the program does)."""
        self.now += seconds
        j = self.jobs[key]
        billed = min(seconds, j.booked_escrow // j.terms.rate_per_second)
        status = j.status
        if j.booked_escrow - billed * j.terms.rate_per_second < j.terms.rate_per_second:
            status = "completed"
        self.jobs[key] = replace(j, paid_provider=j.paid_provider + billed * j.terms.rate_per_second,
                                 paid_seconds=j.paid_seconds + billed, last_window_end=self.now,
                                 status=status, ended_at=self.now if status != "running" else 0)


def test_tick_tops_up_a_short_job_and_leaves_a_long_one() -> None:
    short = job(deposited=10 * RATE, last_window_end=NOW)
    long = job(deposited=1_000 * RATE, last_window_end=NOW)
    chain = FakeChain(short, long)
    seen = []
    auto = AutoTopUp(chain, USER, AutoTopUpPolicy(30, 10**9), on_event=seen.append)
    events = auto.tick([short.address, long.address])
    assert [e.amount for e in events] == [50 * RATE, 0]
    assert events[0].signature == "SiG1" and events[0].spent == 50 * RATE and events[0].error is None
    assert events[1].decision is not None and "not below" in events[1].decision.reason
    assert seen == events and chain.sent == [(short.address, 50 * RATE)]
    assert auto.spent(short.address) == 50 * RATE and auto.spent(long.address) == 0


def test_a_draining_job_gets_exactly_its_budget_then_runs_dry(tmp_path) -> None:
    j = job(deposited=10 * RATE, last_window_end=NOW)
    chain = FakeChain(j)
    budget = 45 * RATE + 123
    auto = AutoTopUp(chain, USER, AutoTopUpPolicy(8, budget), state_path=tmp_path / "s.json")
    warnings = []
    for _ in range(100):
        for e in auto.tick([j.address]):
            if e.decision and e.decision.warn:
                warnings.append(e.decision.warn)
        if chain.jobs[j.address].status != "running":
            break
        chain.settle(j.address, 3)
    final = chain.jobs[j.address]
    assert final.status == "completed" and final.booked_escrow < RATE
    assert sum(a for _, a in chain.sent) == budget == auto.spent(j.address)
    assert final.deposited == 10 * RATE + budget
    assert any("budget" in w for w in warnings)


def test_a_restart_never_spends_the_budget_again(tmp_path) -> None:
    path = tmp_path / "topups" / "state.json"
    j = job(deposited=5 * RATE, last_window_end=NOW)
    chain = FakeChain(j)
    policy = AutoTopUpPolicy(10, 12 * RATE)
    AutoTopUp(chain, USER, policy, state_path=path).tick([j.address])
    assert chain.sent == [(j.address, 12 * RATE)]
    assert json.loads(path.read_text()) == {"version": 1, "spent": {str(j.address): 12 * RATE}}
    chain.jobs[j.address] = replace(chain.jobs[j.address], deposited=5 * RATE)  # drained again
    again = AutoTopUp(chain, USER, policy, state_path=path)
    assert again.spent(j.address) == 12 * RATE
    (e,) = again.tick([j.address])
    assert e.amount == 0 and "budget" in (e.decision.warn or "") and len(chain.sent) == 1


def test_a_refused_top_up_is_not_counted_an_unknown_one_is(tmp_path) -> None:
    j = job(deposited=RATE, last_window_end=NOW)
    chain = FakeChain(j)
    path = tmp_path / "s.json"
    auto = AutoTopUp(chain, USER, AutoTopUpPolicy(10, 100 * RATE), state_path=path)
    chain.fail = GpuMarketError(6000, "InvalidJobStatus", "the job is not open or running")
    (e,) = auto.tick([j.address])
    assert e.amount == 0 and e.spent == 0 and "refused" in (e.error or "")
    assert auto.spent(j.address) == 0 and json.loads(path.read_text())["spent"][str(j.address)] == 0
    for failure in (ConfirmationTimeout("not confirmed"), RpcUnavailable("cannot reach")):
        chain.fail = failure
        (e,) = AutoTopUp(chain, USER, AutoTopUpPolicy(10, 100 * RATE), state_path=path).tick([j.address])
        assert e.amount == 0 and "stays counted" in (e.error or "")
    # Both unknown outcomes count (19 s each), the budget bounds them all the same.
    assert AutoTopUp(chain, USER, AutoTopUpPolicy(10, 100 * RATE), state_path=path).spent(
        j.address) == 38 * RATE


def test_tick_reports_a_missing_job_and_another_users_job() -> None:
    mine = job(deposited=RATE, last_window_end=NOW)
    theirs = job(deposited=RATE, last_window_end=NOW, user=Pubkey.new_unique())
    chain = FakeChain(mine, theirs)
    ghost = Pubkey.new_unique()
    events = AutoTopUp(chain, USER, AutoTopUpPolicy(10, 10**9)).tick([ghost, theirs.address,
                                                                       mine.address])
    assert "does not exist" in (events[0].error or "") and events[0].runway is None
    assert "only its user can top it up" in (events[1].error or "") and events[1].amount == 0
    assert events[2].amount == 19 * RATE and chain.sent == [(mine.address, 19 * RATE)]


@pytest.mark.parametrize("content", ["{", '{"version": 2, "spent": {}}', '{"spent": []}',
                                     '{"version": 1, "spent": {"nope": 1}}',
                                     '{"version": 1, "spent": {"11111111111111111111111111111111": -1}}'])
def test_a_damaged_state_file_is_refused(tmp_path, content: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="damaged"):
        AutoTopUp(FakeChain(), USER, AutoTopUpPolicy(10, 1), state_path=path)


def test_the_clock_is_injectable() -> None:
    j = job(deposited=100 * RATE, last_window_end=NOW)
    chain = FakeChain(j)
    (e,) = AutoTopUp(chain, USER, AutoTopUpPolicy(10, 10**9), clock=lambda: NOW + 95).tick([j.address])
    assert e.runway is not None and e.runway.runway_seconds == 5 and e.amount == 15 * RATE


# ----------------------------------------------------------------------------- fetch_windows

WINDOW = {"seq": 4, "window_start": NOW - 2, "window_end": NOW, "billable_seconds": 2,
          "approved_seconds": 2, "decision": "accepted", "workload_state": "running",
          "gpus": [{"uuid": "GPU-1", "util_gpu_avg_bp": 9000, "temp_max_c": 70,
                    "power_avg_mw": None, "mem_used_max_mib": None}]}  # fmt: skip


def transport(status: int, body, seen: list | None = None) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if isinstance(body, Exception):
            raise body
        if isinstance(body, bytes):
            return httpx.Response(status, content=body)
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handler)


def test_fetch_windows() -> None:
    key = Pubkey.new_unique()
    seen: list[httpx.Request] = []
    got = fetch_windows("http://v.example:8080/", key, 3,
                        transport=transport(200, {"job": str(key), "windows": [WINDOW]}, seen))
    assert got == [WINDOW]
    assert str(seen[0].url) == f"http://v.example:8080/v1/jobs/{key}/windows?limit=3"


@pytest.mark.parametrize("status, body, needle", [
    (404, {"error": "job_unknown", "message": "no window of job is stored here"},
     "answered HTTP 404: job_unknown no window"),
    (503, b"busy", "answered HTTP 503"),
    (200, {"job": "x"}, "without a windows list"),
    (200, b"not json", "without a windows list"),
    (0, httpx.ConnectError("connection refused"), "cannot reach validator http://v.example"),
    (0, httpx.ReadTimeout("slow"), "timed out"),
])  # fmt: skip
def test_fetch_windows_errors_name_the_node(status: int, body, needle: str) -> None:
    with pytest.raises(WindowsApiError, match=needle) as e:
        fetch_windows("http://v.example", Pubkey.new_unique(), transport=transport(status, body))
    assert e.value.endpoint == "http://v.example"
    assert e.value.status == (status or None)


def test_fetch_windows_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="limit must be 1..500"):
        fetch_windows("http://v.example", Pubkey.new_unique(), 0)
    with pytest.raises(WindowsApiError, match="not an http"):
        fetch_windows("ftp://v.example", Pubkey.new_unique())
