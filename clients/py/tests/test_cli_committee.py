"""gpum validator ... and the committee side of gpum job (gpu_market.cli.validator,
gpu_market.cli.job): arguments, one-line errors, and the SDK calls they make (client writes
answered locally)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from gpu_market.accounts import MarketTotals, Unbonding, ValidatorView
from gpu_market.errors import AccountNotFound, GpuMarketError
from solders.pubkey import Pubkey
from test_cli import (
    MARKET,
    MEMBERS,
    PRICE,
    assert_one_line_error,
    fake_job,
    fake_market,
    offline,
    run,
)

ENDPOINT = "https://validator.example:8443"
M = Pubkey.from_string(MARKET)


def fake_validator(authority: Pubkey, status: str = "active", unclaimed: int = 250_000) -> ValidatorView:
    return ValidatorView(M, authority, 500_000_000, Unbonding(0, 0), status, 12, 254, ENDPOINT,
                         1_000_000, unclaimed, 1, Pubkey.new_unique())  # fmt: skip


@pytest.fixture
def offline_chain(monkeypatch):
    return offline(monkeypatch)


@pytest.fixture
def chain(monkeypatch, offline_chain):
    """offline_chain plus validator reads and writes answered locally; returns the state the
    fakes read (validator, balance, min_bond, min_quorum, healthy) and the write calls."""
    from gpu_market.client import GpuMarketClient

    calls: list[tuple] = []
    state = SimpleNamespace(validator=None, balance=10**12, min_bond=0, min_quorum=1)

    def record(name):
        return lambda self, *a, **kw: calls.append((name, a[1:], kw)) or "SiG"

    for name in ("register_validator", "update_validator", "claim_validator_rewards",
                 "replace_committee_member"):  # fmt: skip
        monkeypatch.setattr(GpuMarketClient, name, record(name))
    monkeypatch.setattr(GpuMarketClient, "create_job",
                        lambda self, *a, **kw: calls.append(("create_job", a[1:], kw)) or ("SiG", Pubkey.default()))  # fmt: skip
    monkeypatch.setattr(GpuMarketClient, "fetch_validator_by_authority", lambda self, m, a: state.validator)
    monkeypatch.setattr(GpuMarketClient, "token_balance", lambda self, a: state.balance)
    # the params in force (announced for unix time 1): validator_min_bond, min_quorum as set
    monkeypatch.setattr(GpuMarketClient, "fetch_market", lambda self, m: fake_market(
        {"validator_min_bond": state.min_bond, "min_quorum": state.min_quorum}, effective_at=1))
    monkeypatch.setattr(GpuMarketClient, "min_deposit", lambda self, m, p, n: 60_000)
    monkeypatch.setattr(GpuMarketClient, "fetch_provider", lambda self, p: SimpleNamespace(
        price_per_gpu_second=PRICE, owner=Pubkey.default(), worker_key=Pubkey.default()))
    state.healthy = list(MEMBERS)
    monkeypatch.setattr(GpuMarketClient, "default_committee",
                        lambda self, m, size=3, health_timeout=2.0, exclude=(): state.healthy[:size])  # fmt: skip
    state.calls = calls
    return state


# ----------------------------------------------------------------------------- validator


def test_register_bonds_the_markets_minimum_by_default(keyfile, chain):
    chain.min_bond = 250_000_000
    code, out, err = run(["--output", "json", "validator", "register", "--market", MARKET,
                          "--endpoint", ENDPOINT, "-k", keyfile])  # fmt: skip
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert (data["bond"], data["endpoint"], data["signature"]) == ("250", ENDPOINT, "SiG")
    assert chain.calls == [("register_validator", (M, 250_000_000, ENDPOINT), {})]


def test_register_with_a_bond(keyfile, chain):
    chain.min_bond = 1_000_000
    code, _, err = run(["validator", "register", "--market", MARKET, "--endpoint", ENDPOINT,
                        "--bond", "2.5", "-k", keyfile])  # fmt: skip
    assert (code, err) == (0, "")
    assert chain.calls[0][1] == (M, 2_500_000, ENDPOINT)


@pytest.mark.parametrize("args, needle, code", [
    ([], "Missing option '--endpoint'", 2),
    (["--endpoint", "ftp://x"], "'--endpoint'", 2),
    (["--endpoint", "http://" + "x" * 90], "at most 96", 2),
    (["--endpoint", ENDPOINT], "sets no minimum bond", 2),
    (["--endpoint", ENDPOINT, "--bond", "0"], "greater than zero", 2),
    (["--endpoint", ENDPOINT, "--bond", "abc"], "not a number", 2),
])  # fmt: skip
def test_register_refuses_bad_input(keyfile, chain, args, needle, code):
    got, _, err = run(["validator", "register", "--market", MARKET, *args, "-k", keyfile])
    assert got == code
    assert_one_line_error(err, needle)
    assert chain.calls == []


def test_register_below_the_minimum_or_without_the_tokens(keyfile, chain):
    chain.min_bond = 100_000_000
    code, _, err = run(["validator", "register", "--market", MARKET, "--endpoint", ENDPOINT,
                        "--bond", "99", "-k", keyfile])  # fmt: skip
    assert code == 2
    assert_one_line_error(err, "'--bond'", "below the market's validator_min_bond 100")
    chain.balance = 5_000_000
    code, _, err = run(["validator", "register", "--market", MARKET, "--endpoint", ENDPOINT, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "holds 5", "the bond needs 100")
    assert chain.calls == []


def test_register_twice(keyfile, chain):
    chain.validator = fake_validator(Pubkey.new_unique())
    code, _, err = run(["validator", "register", "--market", MARKET, "--endpoint", ENDPOINT,
                        "--bond", "1", "-k", keyfile])  # fmt: skip
    assert code == 1
    assert_one_line_error(err, "already a validator", "gpum validator update --endpoint")
    assert chain.calls == []


def test_register_without_a_stake_account(monkeypatch, keyfile, chain):
    from gpu_market.client import GpuMarketClient

    def missing(self, a):
        raise AccountNotFound("no")

    monkeypatch.setattr(GpuMarketClient, "token_balance", missing)
    code, _, err = run(["validator", "register", "--market", MARKET, "--endpoint", ENDPOINT,
                        "--bond", "1", "-k", keyfile])  # fmt: skip
    assert code == 1
    assert_one_line_error(err, "holds 0", "the bond needs 1")


def test_update_endpoint(keyfile, chain):
    chain.validator = fake_validator(Pubkey.new_unique())
    code, out, err = run(["--output", "json", "validator", "update", "--market", MARKET,
                          "--endpoint", "http://10.0.0.9:9000", "-k", keyfile])  # fmt: skip
    assert (code, err) == (0, "") and json.loads(out)["endpoint"] == "http://10.0.0.9:9000"
    assert chain.calls == [("update_validator", (M, "http://10.0.0.9:9000"), {})]
    code, _, err = run(["validator", "update", "--market", MARKET, "--endpoint", "nope", "-k", keyfile])
    assert code == 2
    assert_one_line_error(err, "'--endpoint'", "http:// or https://")


def test_update_or_status_of_a_non_validator(keyfile, chain):
    for args in (["update", "--endpoint", ENDPOINT], ["status"], ["claim-rewards"], ["withdraw"]):
        code, _, err = run(["validator", *args, "--market", MARKET, "-k", keyfile])
        assert code == 1
        assert_one_line_error(err, "is not a validator of market", "gpum validator register")
    assert chain.calls == []


def test_status(keyfile, chain):
    authority = Pubkey.new_unique()
    chain.validator = fake_validator(authority)
    code, out, err = run(["--output", "json", "validator", "status", "--market", MARKET, str(authority)])
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["authority"] == str(authority) and data["status"] == "active"
    assert (data["endpoint"], data["bond"], data["settlements"], data["slashes"]) == (ENDPOINT, "500", 12, 1)
    assert (data["rewards_earned"], data["rewards_unclaimed"]) == ("1", "0.25")
    code, out, _ = run(["validator", "status", "--market", MARKET, str(authority)])  # text
    assert code == 0 and f"endpoint: {ENDPOINT}\n" in out


def test_claim_rewards(keyfile, chain):
    chain.validator = fake_validator(Pubkey.new_unique())
    code, out, err = run(["--output", "json", "validator", "claim-rewards", "--market", MARKET, "-k", keyfile])
    assert (code, err) == (0, "") and json.loads(out)["claimed"] == "0.25"
    assert chain.calls == [("claim_validator_rewards", (M,), {})]
    chain.calls.clear()
    chain.validator = fake_validator(Pubkey.new_unique(), unclaimed=0)
    code, _, err = run(["validator", "claim-rewards", "--market", MARKET, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "no unclaimed rewards", "earned so far: 1")
    assert chain.calls == []


def test_nothing_to_claim_race_gets_the_hint(monkeypatch, keyfile, chain):
    from gpu_market.client import GpuMarketClient

    def raced(self, kp, m):
        raise GpuMarketError(6079, "NothingToClaim", "no validator rewards to claim", [])

    chain.validator = fake_validator(Pubkey.new_unique())
    monkeypatch.setattr(GpuMarketClient, "claim_validator_rewards", raced)
    code, _, err = run(["validator", "claim-rewards", "--market", MARKET, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "NothingToClaim (6079)", "since your last claim")


def test_help_lists_validator_commands():
    code, out, _ = run(["validator", "--help"])
    assert code == 0
    for sub in ("register", "update", "status", "claim-rewards", "exit", "withdraw"):
        assert sub in out


# ----------------------------------------------------------------------------- job committee

CREATE = ["--output", "json", "job", "create", "--market", MARKET, "--provider", MARKET,
          "--deposit", "1", "--job-id", "3"]  # fmt: skip


def test_create_with_a_named_committee(keyfile, chain):
    named = [Pubkey.new_unique() for _ in range(4)]
    code, out, err = run([*CREATE, "--committee", ",".join(map(str, named)), "-k", keyfile])
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["committee"] == [str(k) for k in named] and data["quorum"] == 3  # majority of 4
    ((name, _, kw),) = chain.calls
    assert name == "create_job" and kw["committee"] == named and kw["quorum"] == 3
    chain.calls.clear()
    code, out, _ = run([*CREATE, "--committee", f" {named[0]} , {named[1]}", "--quorum", "1", "-k", keyfile])
    assert code == 0 and json.loads(out)["quorum"] == 1 and chain.calls[0][2]["committee"] == named[:2]


@pytest.mark.parametrize("healthy, quorum", [(1, 1), (2, 2), (3, 2)])
def test_create_default_committee_and_quorum(keyfile, chain, healthy, quorum):
    chain.healthy = MEMBERS[:healthy]
    code, out, err = run([*CREATE, "-k", keyfile])
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["committee"] == [str(k) for k in MEMBERS[:healthy]] and data["quorum"] == quorum


def test_create_default_quorum_respects_min_quorum(keyfile, chain):
    chain.min_quorum = 3
    code, out, err = run([*CREATE, "-k", keyfile])
    assert (code, err) == (0, "") and json.loads(out)["quorum"] == 3
    chain.healthy = MEMBERS[:2]
    code, _, err = run([*CREATE, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "only 2 Active validator(s) answer /health", "min_quorum is 3", "--committee")


@pytest.mark.parametrize("args, needle, code", [
    (["--committee", "nope"], "not a valid base58", 2),
    (["--committee", ","], "name 1..5 validator authorities", 2),
    (["--committee", ",".join([str(Pubkey.new_unique()) for _ in range(6)])], "1..5", 2),
    (["--committee", f"{MARKET},{MARKET}"], "named twice", 2),
    (["--committee", MARKET, "--quorum", "2"], "'--quorum'", 2),
    (["--quorum", "4"], "'--quorum'", 2),
    (["--quorum", "0"], "'--quorum'", 2),
])  # fmt: skip
def test_create_refuses_a_bad_committee(keyfile, chain, args, needle, code):
    got, _, err = run([*CREATE, *args, "-k", keyfile])
    assert got == code
    assert_one_line_error(err, needle)
    assert chain.calls == []


def test_create_without_a_healthy_validator(keyfile, chain):
    chain.healthy = []
    code, _, err = run([*CREATE, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "no Active validator", "answers on its endpoint's /health", "--committee")
    assert chain.calls == []


def test_program_committee_errors_get_a_hint(monkeypatch, keyfile, chain):
    from gpu_market.client import GpuMarketClient

    def refused(*a, **kw):
        raise GpuMarketError(6073, "InvalidCommittee", "a committee names 1 to 5 distinct Active validators", [])

    monkeypatch.setattr(GpuMarketClient, "create_job", refused)
    code, _, err = run([*CREATE, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "InvalidCommittee (6073)", "gpum validator status")


def test_status_shows_committee_and_quorum(monkeypatch, chain):
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self, j: fake_job(committee=MEMBERS))
    code, out, err = run(["job", "status", MARKET])
    assert (code, err) == (0, "")
    assert f"committee: {', '.join(map(str, MEMBERS))}\n" in out and "quorum: 1\n" in out


def test_replace_member(monkeypatch, keyfile, chain):
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self, j: fake_job(committee=MEMBERS))
    new = Pubkey.new_unique()
    code, out, err = run(["--output", "json", "job", "replace-member", MARKET, "2", str(new), "-k", keyfile])
    assert (code, err) == (0, "")
    assert json.loads(out) == {"job": MARKET, "index": 2, "previous": str(MEMBERS[2]), "member": str(new),
                               "signature": "SiG"}  # fmt: skip
    assert chain.calls == [("replace_committee_member", (M, 2, new), {})]


@pytest.mark.parametrize("args, needle", [
    (["1", MARKET], "the job's committee has 1 member(s): 0..0"),
    (["5", MARKET], "'INDEX'"),
    (["0", "nope"], "not a valid base58"),
    (["0"], "Missing argument 'NEW_AUTHORITY'"),
])  # fmt: skip
def test_replace_member_bad_input(monkeypatch, keyfile, chain, args, needle):
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self, j: fake_job())
    code, _, err = run(["job", "replace-member", MARKET, *args, "-k", keyfile])
    assert code == 2
    assert_one_line_error(err, needle)
    assert chain.calls == []


def test_replace_member_still_active_is_one_line(monkeypatch, keyfile, chain):
    from gpu_market.client import GpuMarketClient

    def active(self, kp, job, index, new):
        raise ValueError("committee member 0 (X) is still active: only a member that exited or closed "
                         "can be replaced (MemberStillActive)")

    monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self, j: fake_job())
    monkeypatch.setattr(GpuMarketClient, "replace_committee_member", active)
    code, _, err = run(["job", "replace-member", MARKET, "0", MARKET, "-k", keyfile])
    assert code == 2
    assert_one_line_error(err, "still active", "MemberStillActive")


# ----------------------------------------------------------------------------- market


def test_market_init_has_quorum_and_reward_options(monkeypatch, keyfile, offline_chain):
    from gpu_market.client import GpuMarketClient

    seen = []
    monkeypatch.setattr(GpuMarketClient, "initialize_market",
                        lambda self, kp, i, s, p, t, params: seen.append(params) or "SiG")  # fmt: skip
    base = ["market", "init", "--stake-mint", MARKET, "--payment-mint", MARKET, "--treasury", MARKET,
            "-k", keyfile]  # fmt: skip
    code, _, err = run(base)
    assert (code, err) == (0, "")
    assert (seen[0]["min_quorum"], seen[0]["validator_reward_bps"]) == (1, 1000)
    code, _, err = run([*base, "--min-quorum", "2", "--validator-reward-bps", "2500"])
    assert (code, err) == (0, "")
    assert (seen[1]["min_quorum"], seen[1]["validator_reward_bps"]) == (2, 2500)
    code, _, err = run([*base, "--min-quorum", "4"])
    assert code == 2
    assert_one_line_error(err, "'--min-quorum'")


def test_market_status_shows_validator_rewards(monkeypatch, offline_chain):
    from gpu_market.client import GpuMarketClient

    market = fake_market(totals=MarketTotals(0, 0, 0, 0, 0, 0, 400_000, 900_000))
    monkeypatch.setattr(GpuMarketClient, "fetch_market", lambda self, m: market)
    code, out, _ = run(["--output", "json", "market", "status", "--market", MARKET])
    data = json.loads(out)
    assert code == 0 and data["params"]["min_quorum"] == 1 and data["params"]["validator_reward_bps"] == 1000
    assert (data["totals"]["validator_rewards"], data["totals"]["validator_rewards_unclaimed"]) == ("0.9", "0.4")
