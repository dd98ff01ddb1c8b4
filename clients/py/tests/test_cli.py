"""gpum argument handling: every bad input is one actionable line, never a traceback."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from gpu_market import cli as cli_mod
from gpu_market.accounts import JobTerms, JobView, MarketParams, MarketTotals, MarketView
from gpu_market.errors import GpuMarketError
from solders.pubkey import Pubkey

MARKET = str(Pubkey.new_unique())


def run(args: list[str]) -> tuple[int, str, str]:
    runner = CliRunner()
    with runner.isolation() as (out, err, *_):
        code = cli_mod.main(args)
        return code, out.getvalue().decode(), err.getvalue().decode()


def assert_one_line_error(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]


PRICE = 1_000  # the fake provider's price per GPU-second, base units (0.001 UI)
PARAMS = MarketParams(500, 5000, 0, 0, 60, 1, 10, 100, 5000, 1000, 0, 5, 95, 0, 1000)
CHAIN_NOW = 1_700_000_000


def fake_market(pending: dict | None = None, effective_at: int = 0,
                totals: MarketTotals | None = None) -> MarketView:  # fmt: skip
    from dataclasses import replace

    k = Pubkey.new_unique()
    return MarketView(k, k, Pubkey.default(), 0, k, k, k, k, PARAMS,
                      replace(PARAMS, **(pending or {})), effective_at, False,
                      totals or MarketTotals(0, 0, 0, 0, 0, 0, 0, 0), 255, 255, k, 254)  # fmt: skip


TERMS = JobTerms(1_000, 500, 5000, 60, 10, 720, 5, 1, 100, 5000, 1000, 95, 0, 1000)
MEMBERS = [Pubkey.new_unique() for _ in range(3)]


def fake_job(status: str = "running", ended_at: int = 0, committee: list | None = None) -> JobView:
    k = Pubkey.new_unique()
    members = MEMBERS[:1] if committee is None else committee
    return JobView(k, k, k, 1, 1, TERMS, members, len(members), 100_000, 0, 0, 0, 0, 0, 0, 0,
                   status, 0, 0, ended_at, 0, bytes(32), CHAIN_NOW - 10, 255, 255)  # fmt: skip


@pytest.fixture
def offline_chain(monkeypatch):
    """Chain reads answered locally: one market, mints with 6 decimals."""
    return offline(monkeypatch)


def offline(monkeypatch) -> list:
    """What ``offline_chain`` patches (for other test modules); returns the stake calls."""
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "fetch_market", lambda self, m: fake_market())
    monkeypatch.setattr(GpuMarketClient, "mint_decimals", lambda self, m: 6)
    monkeypatch.setattr(GpuMarketClient, "chain_time", lambda self: CHAIN_NOW)
    monkeypatch.setattr(GpuMarketClient, "fees_to_withdraw", lambda self, m: 1_500_000)
    monkeypatch.setattr(GpuMarketClient, "fetch_provider",
                        lambda self, p: SimpleNamespace(price_per_gpu_second=PRICE))  # fmt: skip
    calls = []
    monkeypatch.setattr(GpuMarketClient, "stake", lambda self, kp, m, amount: calls.append(amount) or "SiG")
    return calls


def test_bad_pubkey():
    code, _, err = run(["job", "status", "not a key"])
    assert code == 2
    assert_one_line_error(err, "neither a job address (base58) nor a job name", "--help")
    code, _, err = run(["job", "replace-member", JOB, "0", "not-a-key"])
    assert code == 2
    assert_one_line_error(err, "not a valid base58 public key", "--help")


def test_bad_market_option(keyfile):
    code, _, err = run(["provider", "stake", "--market", "xyz", "-k", keyfile, "1"])
    assert code == 2
    assert_one_line_error(err, "'--market'", "xyz")


def test_missing_keypair(tmp_path, offline_chain):
    missing = tmp_path / "nope.json"
    code, _, err = run(["provider", "stake", "--market", MARKET, "-k", str(missing), "1"])
    assert code == 1
    assert_one_line_error(err, str(missing), "solana-keygen new")


@pytest.mark.parametrize("content", ["[1, 2", "[1, 2, 3]", '{"a": 1}', json.dumps([300] * 64)])
def test_malformed_keypair(tmp_path, content, offline_chain):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, _, err = run(["provider", "stake", "--market", MARKET, "-k", str(path), "1"])
    assert code == 1
    assert_one_line_error(err, "not a Solana keypair")


@pytest.mark.parametrize(
    "amount, needle",
    [("1.0000001", "more decimal places than the mint's 6 decimals"), ("abc", "not a number"),
     ("-1", "negative"), ("0", "greater than zero")],
)  # fmt: skip
def test_bad_amount(keyfile, offline_chain, amount, needle):
    code, _, err = run(["provider", "stake", "--market", MARKET, "-k", keyfile, "--", amount])
    assert code == 2
    assert_one_line_error(err, needle)
    assert offline_chain == []


def test_good_amount_in_ui_units(keyfile, offline_chain):
    code, out, err = run(["--output", "json", "provider", "stake", "--market", MARKET, "-k", keyfile, "1.5"])
    assert (code, err) == (0, "")
    assert offline_chain == [1_500_000]
    assert json.loads(out) == {"staked": "1.5", "signature": "SiG"}


def test_market_from_env(monkeypatch, keyfile, offline_chain):
    monkeypatch.setenv("GPUM_MARKET", MARKET)
    code, _, _ = run(["provider", "stake", "-k", keyfile, "2"])
    assert code == 0 and offline_chain == [2_000_000]


def test_bad_url():
    code, _, err = run(["-u", "mainnet", "job", "status", MARKET])
    assert code == 2
    assert_one_line_error(err, "'--url'", "localnet, devnet, testnet, mainnet-beta")


def test_unreachable_rpc():
    code, _, err = run(["job", "status", "-u", "http://127.0.0.1:9", MARKET])
    assert code == 1
    assert_one_line_error(err, "cannot reach the RPC endpoint http://127.0.0.1:9", "--url")


def test_program_error_is_one_line(monkeypatch, keyfile, offline_chain):
    from gpu_market.client import GpuMarketClient

    def boom(self, kp, m, amount):
        raise GpuMarketError(6017, "InsufficientStake", "the provider's stake does not cover it", ["l1", "l2"])

    monkeypatch.setattr(GpuMarketClient, "stake", boom)
    code, _, err = run(["provider", "stake", "--market", MARKET, "-k", keyfile, "1"])
    assert code == 1
    assert_one_line_error(err, "InsufficientStake (6017)")


def test_unexpected_error_has_no_traceback(monkeypatch, keyfile, offline_chain):
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "stake", lambda *a: 1 / 0)
    code, _, err = run(["provider", "stake", "--market", MARKET, "-k", keyfile, "1"])
    assert code == 1
    assert_one_line_error(err, "ZeroDivisionError", "GPUM_DEBUG=1")


def test_gpu_model_too_long(keyfile, offline_chain):
    args = ["provider", "register", "--market", MARKET, "-k", keyfile, "--worker-key", MARKET,
            "--gpu-model", "x" * 33, "--gpu-count", "1", "--vram-mib", "1", "--price", "1"]  # fmt: skip
    code, _, err = run(args)
    assert code == 2
    assert_one_line_error(err, "at most 32")


def test_monikers():
    assert cli_mod.resolve_url("localnet") == "http://127.0.0.1:8899"
    assert cli_mod.resolve_url("devnet") == "https://api.devnet.solana.com"
    assert cli_mod.resolve_url("http://host:1234") == "http://host:1234"


def test_help_lists_commands():
    code, out, _ = run(["job", "--help"])
    assert code == 0
    for sub in ("create", "status", "accept", "finish", "close"):
        assert sub in out


# ----------------------------------------------------------------------------- newer commands

JOB = str(Pubkey.new_unique())


@pytest.fixture
def recorder(monkeypatch, offline_chain):
    """Every newer client write answered locally; returns the (method, args) calls."""
    from gpu_market.client import GpuMarketClient

    calls: list[tuple[str, tuple]] = []
    for name in ("set_paused", "update_params", "propose_authority", "accept_authority",
                 "update_provider", "rotate_worker_key", "request_unstake", "withdraw_unstaked",
                 "request_validator_exit", "withdraw_validator_bond", "top_up", "cancel_job",
                 "expire_job", "decline_job", "complete_job", "close_job", "set_treasury",
                 "sweep_vault"):  # fmt: skip
        monkeypatch.setattr(GpuMarketClient, name,
                            lambda self, *a, _n=name, **kw: calls.append(
                                (_n, a[1:] + ((kw,) if kw else ()))) or "SiG")  # fmt: skip

    monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self, j: fake_job())
    return calls


@pytest.mark.parametrize(
    "args, needle",
    [
        (["market", "update-params", "--market", MARKET], "nothing to update"),
        (["market", "update-params", "--market", MARKET, "--fee-bps", "3000"], "'--fee-bps'"),
        (["market", "update-params", "--market", MARKET, "--min-stake-per-gpu", "0.0000001"],
         "more decimal places"),
        (["market", "pause"], "Missing option '--market'"),
        (["market", "propose-authority", "--market", MARKET, "nope"], "not a valid base58"),
        (["market", "propose-authority", "--market", MARKET], "Missing argument 'NEW_AUTHORITY'"),
        (["provider", "update", "--market", MARKET], "nothing to update"),
        (["provider", "update", "--market", MARKET, "--gpu-model", "x" * 33], "at most 32"),
        (["provider", "update", "--market", MARKET, "--gpu-count", "0"], "'--gpu-count'"),
        (["provider", "update", "--market", MARKET, "--price", "abc"], "not a number"),
        (["provider", "rotate-key", "--market", MARKET, "xyz"], "not a valid base58"),
        (["provider", "rotate-key", "--market", MARKET, MARKET, "--expires-at", "-5"],
         "'--expires-at'"),
        (["provider", "unstake", "--market", MARKET, "--", "-1"], "negative"),
        (["provider", "unstake", "--market", MARKET, "0"], "greater than zero"),
        (["provider", "withdraw"], "Missing option '--market'"),
        (["validator", "exit"], "Missing option '--market'"),
        (["validator", "withdraw", "--market", "xyz"], "'--market'"),
        (["job", "top-up", JOB], "Missing argument 'AMOUNT'"),
        (["job", "top-up", JOB, "1.0000001"], "more decimal places"),
        (["job", "top-up", "no/pe", "1"], "nor a job name"),
        (["job", "cancel"], "Missing argument 'JOB'"),
        (["job", "expire", "no pe"], "nor a job name"),
        (["job", "decline", "-nope"], "No such option"),
        (["job", "complete"], "Missing argument 'JOB'"),
        (["market", "set-treasury", "--market", MARKET], "Missing argument 'ACCOUNT'"),
        (["market", "set-treasury", "--market", MARKET, "nope"], "not a valid base58"),
        (["market", "sweep-vault"], "Missing option '--market'"),
        (["market", "withdraw-fees"], "Missing option '--market'"),
        (["market", "withdraw-fees", "--market", "xyz"], "'--market'"),
        (["market", "update-params", "--market", MARKET, "--min-quorum", "4"], "'--min-quorum'"),
        (["market", "update-params", "--market", MARKET, "--validator-reward-bps", "10001"],
         "'--validator-reward-bps'"),
        (["market", "update-params", "--market", MARKET, "--max-missed-windows", "1441"],
         "'--max-missed-windows'"),
        (["market", "update-params", "--market", MARKET, "--reporter-reward-bps", "5001"],
         "'--reporter-reward-bps'"),
        (["market", "update-params", "--market", MARKET, "--temp-critical-c", "49"],
         "'--temp-critical-c'"),
        (["market", "update-params", "--market", MARKET, "--ecc-uncorrected-max", "1000001"],
         "'--ecc-uncorrected-max'"),
        (["market", "init", "--stake-mint", MARKET, "--payment-mint", MARKET,
          "--temp-critical-c", "151"], "'--temp-critical-c'"),
    ],
)  # fmt: skip
def test_newer_commands_reject_bad_arguments(keyfile, recorder, args, needle):
    code, _, err = run([*args[:2], "-k", keyfile, *args[2:]])
    assert code == 2, err
    assert_one_line_error(err, needle)
    assert recorder == []


def test_newer_commands_call_the_sdk(keyfile, recorder):
    new = str(Pubkey.new_unique())
    for args in (["market", "pause", "--market", MARKET],
                 ["market", "unpause", "--market", MARKET],
                 ["market", "update-params", "--market", MARKET, "--fee-bps", "100",
                  "--validator-min-bond", "2.5"],
                 ["market", "propose-authority", "--market", MARKET, new],
                 ["market", "accept-authority", "--market", MARKET],
                 ["provider", "update", "--market", MARKET, "--price", "0.0072", "--gpu-count",
                  "4", "--not-accepting-jobs"],
                 ["provider", "rotate-key", "--market", MARKET, new, "--expires-at", "9"],
                 ["provider", "unstake", "--market", MARKET, "1.5"],
                 ["validator", "exit", "--market", MARKET],
                 ["job", "top-up", JOB, "2"],
                 ["job", "expire", JOB],
                 ["job", "decline", JOB]):  # fmt: skip
        code, out, err = run(["--output", "json", *args, "-k", keyfile])
        assert (code, err) == (0, ""), (args, err)
        assert json.loads(out)["signature"] == "SiG"
    got = [(n, a) for n, a in recorder]
    market = Pubkey.from_string(MARKET)
    assert got[0] == ("set_paused", (market, True)) and got[1] == ("set_paused", (market, False))
    assert got[2] == ("update_params", (market, {"fee_bps": 100, "validator_min_bond": 2_500_000}))
    assert got[3] == ("propose_authority", (market, Pubkey.from_string(new)))
    assert got[5][0] == "update_provider"
    assert got[5][1][1:] == (2, {"gpu_count": 4}, False, {"endpoint": None})
    assert got[6] == ("rotate_worker_key", (market, Pubkey.from_string(new), 9))
    assert got[7] == ("request_unstake", (market, 1_500_000))
    assert got[9] == ("top_up", (Pubkey.from_string(JOB), 2_000_000))
    assert [n for n, _ in got[10:]] == ["expire_job", "decline_job"]
    assert got[11] == ("decline_job", (Pubkey.from_string(JOB),))


def test_newer_command_program_error_is_one_line(monkeypatch, keyfile, offline_chain):
    from gpu_market.client import GpuMarketClient

    def boom(self, kp, job):
        raise GpuMarketError(6040, "JobNotExpired", "the job has not missed enough windows", ["l"])

    monkeypatch.setattr(GpuMarketClient, "expire_job", boom)
    code, _, err = run(["job", "expire", JOB, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "JobNotExpired (6040)")


def test_help_lists_newer_commands():
    for group, subs in (("market", ("pause", "unpause", "update-params", "propose-authority",
                                    "accept-authority")),
                        ("provider", ("update", "rotate-key", "unstake", "withdraw")),
                        ("validator", ("exit", "withdraw")),
                        ("market", ("set-treasury", "sweep-vault", "withdraw-fees")),
                        ("job", ("top-up", "cancel", "expire", "decline", "complete"))):  # fmt: skip
        code, out, _ = run([group, "--help"])
        assert code == 0
        for sub in subs:
            assert sub in out


# ----------------------------------------------------------------------------- hardening commands


def test_market_status_shows_pending_params_and_when(monkeypatch, keyfile, offline_chain):
    from gpu_market.client import GpuMarketClient

    market = fake_market(pending={"fee_bps": 700, "temp_critical_c": 90}, effective_at=CHAIN_NOW + 3600)
    monkeypatch.setattr(GpuMarketClient, "fetch_market", lambda self, m: market)
    code, out, err = run(["--output", "json", "market", "status", "--market", MARKET])
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["params"]["fee_bps"] == 500 and data["params"]["temp_critical_c"] == 95
    assert data["chain_time"] == CHAIN_NOW
    assert (data["fee_vault"], data["fees_to_withdraw"]) == (str(market.fee_vault), "1.5")
    assert data["pending_params"] == {
        "effective_at": CHAIN_NOW + 3600, "effective_in_seconds": 3600,
        "changes": {"fee_bps": "500 -> 700", "temp_critical_c": "95 -> 90"}}  # fmt: skip
    code, out, _ = run(["market", "status", "--market", MARKET])  # text: nested, indented
    assert code == 0 and "pending_params:\n  effective_at: 1700003600\n" in out
    assert "  changes:\n    fee_bps: 500 -> 700\n" in out


def test_market_status_once_the_change_is_in_force(monkeypatch, offline_chain):
    from gpu_market.client import GpuMarketClient

    market = fake_market(pending={"fee_bps": 700}, effective_at=CHAIN_NOW)  # now: in force
    monkeypatch.setattr(GpuMarketClient, "fetch_market", lambda self, m: market)
    code, out, _ = run(["--output", "json", "market", "status", "--market", MARKET])
    data = json.loads(out)
    assert code == 0 and data["params"]["fee_bps"] == 700 and data["pending_params"] is None
    code, out, _ = run(["market", "status", "--market", MARKET])
    assert "pending_params: none" in out


def test_update_params_prints_when_it_takes_effect(monkeypatch, keyfile, recorder):
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "fetch_market",
                        lambda self, m: fake_market({"fee_bps": 1}, CHAIN_NOW + 60))  # fmt: skip
    code, out, err = run(["--output", "json", "market", "update-params", "--market", MARKET,
                          "--fee-bps", "1", "--temp-critical-c", "90", "-k", keyfile])  # fmt: skip
    assert (code, err) == (0, "")
    assert json.loads(out) == {"market": MARKET, "announced": {"fee_bps": 1, "temp_critical_c": 90},
                               "effective_at": CHAIN_NOW + 60, "signature": "SiG"}  # fmt: skip


def test_job_status_shows_terms_and_deadlines(monkeypatch, offline_chain):
    from gpu_market.client import GpuMarketClient

    job = fake_job("finishing", ended_at=CHAIN_NOW - 100)
    monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self, j: job)
    monkeypatch.setattr(GpuMarketClient, "token_balance", lambda self, a: 100_005)  # a donation
    code, out, err = run(["--output", "json", "job", "status", JOB])
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["terms"] == {
        "rate_per_second": "0.001", "fee_bps": 500, "burn_bps": 5000, "window_seconds": 60,
        "max_missed_windows": 10, "grace_seconds": 720, "max_skew_seconds": 5, "quorum": 1,
        "downtime_slash_bps": 100, "equivocation_slash_bps": 5000, "reporter_reward_bps": 1000,
        "temp_critical_c": 95, "ecc_uncorrected_max": 0, "validator_reward_bps": 1000}  # fmt: skip
    assert data["committee"] == [str(MEMBERS[0])] and data["quorum"] == 1
    assert (data["claimed_seconds"], data["paid_seconds"], data["paid_validators"]) == (0, 0, "0")
    assert data["grace_ends_at"] == CHAIN_NOW - 100 + 720 and "expirable_after" not in data
    assert (data["booked_escrow"], data["escrow"], data["escrow_surplus"]) == ("0.1", "0.100005", "0.000005")
    monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self, j: fake_job("running"))
    _, out, _ = run(["--output", "json", "job", "status", JOB])
    assert json.loads(out)["expirable_after"] == CHAIN_NOW - 10 + 600 + 720


@pytest.mark.parametrize("command", ["complete", "close"])
def test_complete_and_close_wait_for_the_grace(monkeypatch, keyfile, recorder, command):
    from gpu_market.client import GpuMarketClient

    ended = CHAIN_NOW - 720  # grace ends at CHAIN_NOW: not over yet (strictly after)
    monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self, j: fake_job("finishing", ended))
    code, _, err = run(["job", command, JOB, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "grace until 2023-11-14 22:13:20 UTC (now)",
                          f"`gpum job {command}` again in 1 s")
    assert recorder == []
    monkeypatch.setattr(GpuMarketClient, "chain_time", lambda self: CHAIN_NOW + 1)
    monkeypatch.setattr(GpuMarketClient, "token_balance", lambda self, a: 0)
    monkeypatch.setattr(GpuMarketClient, "events", lambda self, sig: [])
    code, _, err = run(["--output", "json", "job", command, JOB, "-k", keyfile])
    assert (code, err) == (0, "")
    assert recorder == [(f"{command}_job", (Pubkey.from_string(JOB),))]


@pytest.mark.parametrize("status, command, needle", [
    ("running", "close", "`gpum job finish` it first"),
    ("open", "close", "`gpum job cancel`"),
    ("running", "complete", "`gpum job finish` it first"),
    ("declined", "complete", "not finishing: nothing to complete"),
])  # fmt: skip
def test_complete_and_close_refuse_early(monkeypatch, keyfile, recorder, status, command, needle):
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self, j: fake_job(status))
    code, _, err = run(["job", command, JOB, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, needle)
    assert recorder == []


@pytest.mark.parametrize("status", ["declined", "failed", "completed", "cancelled"])
def test_close_at_once_when_terminal(monkeypatch, keyfile, recorder, status):
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "fetch_job", lambda self, j: fake_job(status))
    monkeypatch.setattr(GpuMarketClient, "token_balance", lambda self, a: 0)
    monkeypatch.setattr(GpuMarketClient, "events", lambda self, sig: [])
    code, _, err = run(["job", "close", JOB, "-k", keyfile])
    assert (code, err) == (0, "")
    assert [n for n, _ in recorder] == ["close_job"]


def _token_account(mint: Pubkey, owner: Pubkey) -> tuple[Pubkey, bytes]:
    from gpu_market.constants import TOKEN_PROGRAM_ID

    return TOKEN_PROGRAM_ID, bytes(mint) + bytes(owner) + bytes(8) + bytes(165 - 72)


def test_set_treasury(monkeypatch, keyfile, recorder):
    from gpu_market.client import GpuMarketClient

    market = fake_market()
    monkeypatch.setattr(GpuMarketClient, "fetch_market", lambda self, m: market)
    account = Pubkey.new_unique()
    monkeypatch.setattr(GpuMarketClient, "account_info",
                        lambda self, k: _token_account(market.payment_mint, Pubkey.new_unique()))  # fmt: skip
    code, out, err = run(["--output", "json", "market", "set-treasury", "--market", MARKET,
                          str(account), "-k", keyfile])  # fmt: skip
    assert (code, err) == (0, "")
    assert json.loads(out)["treasury"] == str(account)
    assert recorder == [("set_treasury", (Pubkey.from_string(MARKET), account))]


@pytest.mark.parametrize("info", [None, "other-mint", "not-a-token-account"])
def test_set_treasury_refuses_other_accounts(monkeypatch, keyfile, recorder, info):
    from gpu_market.client import GpuMarketClient

    if info == "other-mint":
        info = _token_account(Pubkey.new_unique(), Pubkey.new_unique())
    elif info == "not-a-token-account":
        info = (Pubkey.default(), b"")
    monkeypatch.setattr(GpuMarketClient, "account_info", lambda self, k: info)
    code, _, err = run(["market", "set-treasury", "--market", MARKET, MARKET, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "is not a token account of the payment mint", "spl-token create-account")
    assert recorder == []


def test_sweep_vault(monkeypatch, keyfile, recorder):
    from gpu_market import tokens
    from gpu_market.client import GpuMarketClient

    market = fake_market(totals=MarketTotals(600, 100, 0, 0, 0, 0, 0, 0))
    owner = Pubkey.new_unique()
    monkeypatch.setattr(GpuMarketClient, "fetch_market", lambda self, m: market)
    monkeypatch.setattr(GpuMarketClient, "treasury_owner", lambda self, m: owner)
    monkeypatch.setattr(GpuMarketClient, "vault_surplus", lambda self, m: 0)
    code, _, err = run(["market", "sweep-vault", "--market", MARKET, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "no more than the booked stake and bonds (0.0007)", "nothing to sweep")
    assert recorder == []
    monkeypatch.setattr(GpuMarketClient, "vault_surplus", lambda self, m: 2_500_000)
    code, out, err = run(["--output", "json", "market", "sweep-vault", "--market", MARKET, "-k", keyfile])
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["swept"] == "2.5" and data["destination"] == str(tokens.ata(owner, market.stake_mint))
    assert recorder == [("sweep_vault", (Pubkey.from_string(MARKET),))]


def _creating(monkeypatch, healthy: list | None = None) -> list[tuple]:
    """create_job answered locally (calls recorded as positional args + the keyword dict);
    ``healthy``: what default_committee finds (default: MEMBERS)."""
    from gpu_market.client import GpuMarketClient

    created: list[tuple] = []
    monkeypatch.setattr(GpuMarketClient, "create_job",
                        lambda *a, **kw: created.append((*a[1:], kw)) or ("SiG", MARKET))  # fmt: skip
    found = MEMBERS if healthy is None else healthy
    monkeypatch.setattr(GpuMarketClient, "default_committee",
                        lambda self, m, size=3, health_timeout=2.0, exclude=(): found[:size])  # fmt: skip
    return created


CREATE = ["job", "create", "--market", MARKET, "--provider", MARKET]


def test_job_create_below_one_window(monkeypatch, keyfile, offline_chain):
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "min_deposit", lambda self, m, p, n: 120_000)
    created = _creating(monkeypatch)
    args = [*CREATE, "--gpu-count", "2", "-k", keyfile]
    code, _, err = run([*args, "--deposit", "0.1"])
    assert code == 2
    assert_one_line_error(err, "'--deposit'", "for 2 GPU(s)", "deposit at least 0.12")
    assert created == []
    code, out, err = run(["--output", "json", *args, "--deposit", "0.12", "--job-id", "5"])
    assert (code, err) == (0, "") and json.loads(out)["job_id"] == 5
    # no --max-price: the limit the program checks is the provider's price read now
    assert json.loads(out)["max_price_per_gpu_second"] == "0.001"
    market = Pubkey.from_string(MARKET)
    # (kp, market, provider, job_id, gpus, deposit, keywords); the default committee: 3 healthy
    # validators, a majority of them as quorum
    assert created[0][1:] == (market, market, 5, 2, 120_000,
                              {"committee": MEMBERS, "quorum": 2, "max_price_per_gpu_second": PRICE,
                               "workload_hash": None})  # fmt: skip
    assert json.loads(out)["committee"] == [str(k) for k in MEMBERS] and json.loads(out)["quorum"] == 2


def test_job_create_max_price(monkeypatch, keyfile, offline_chain):
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "min_deposit", lambda self, m, p, n: 60_000)
    created = _creating(monkeypatch)
    args = ["--output", "json", *CREATE, "--deposit", "1", "--job-id", "7", "-k", keyfile]
    code, out, err = run([*args, "--max-price", "5.4"])  # UI units per GPU-hour, as offers shows
    assert (code, err) == (0, "")
    assert json.loads(out)["max_price_per_gpu_second"] == "0.0015"
    assert json.loads(out)["max_price_per_gpu_hour"] == "5.4"
    assert created[-1][-1]["max_price_per_gpu_second"] == 1_500
    code, _, err = run([*args, "--max-price", "abc"])
    assert code == 2
    assert_one_line_error(err, "'--max-price'", "not a number")
    created.clear()
    code, _, err = run([*args, "--max-price", "3.24"])  # the provider asks more already
    assert code == 1
    assert_one_line_error(err, "per GPU-hour is now 3.6, above your --max-price 3.24",
                          "nothing was charged", "--max-price 3.6 or more")  # fmt: skip
    assert created == []


def test_job_create_price_raised_before_it_landed(monkeypatch, keyfile, offline_chain):
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "min_deposit", lambda self, m, p, n: 60_000)
    prices = iter([PRICE, 2 * PRICE])  # read before sending, then after the refusal

    def fetch_provider(self, p):
        return SimpleNamespace(price_per_gpu_second=next(prices))

    def front_run(*a, **kw):
        raise GpuMarketError(6070, "PriceAboveLimit", "the provider's price is above the "
                             "max_price_per_gpu_second the user signed", ["l"])  # fmt: skip

    monkeypatch.setattr(GpuMarketClient, "fetch_provider", fetch_provider)
    _creating(monkeypatch)
    monkeypatch.setattr(GpuMarketClient, "create_job", front_run)
    code, _, err = run([*CREATE, "--deposit", "1", "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "is now 7.2, above your --max-price 3.6", "no job was created",
                          "`gpum provider status`", "--max-price 7.2 or more")  # fmt: skip


def test_job_create_unknown_provider(monkeypatch, keyfile, offline_chain):
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "fetch_provider", lambda self, p: None)
    created = _creating(monkeypatch)
    code, _, err = run([*CREATE, "--deposit", "1", "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, f"provider {MARKET} does not exist", "gpum provider status")
    assert created == []


def test_price_above_limit_elsewhere_gets_the_hint(monkeypatch, keyfile, offline_chain):
    """A PriceAboveLimit no command answers itself still says what to do."""
    from gpu_market.client import GpuMarketClient

    def boom(self, kp, m, amount):
        raise GpuMarketError(6070, "PriceAboveLimit", "the provider's price is above the limit", [])

    monkeypatch.setattr(GpuMarketClient, "stake", boom)
    code, _, err = run(["provider", "stake", "--market", MARKET, "-k", keyfile, "1"])
    assert code == 1
    assert_one_line_error(err, "PriceAboveLimit (6070)", "retry with a higher --max-price")


def test_withdraw_fees(monkeypatch, keyfile, recorder):
    from gpu_market.client import GpuMarketClient

    market = fake_market()
    monkeypatch.setattr(GpuMarketClient, "fetch_market", lambda self, m: market)
    monkeypatch.setattr(GpuMarketClient, "withdraw_fees",
                        lambda self, kp, m: recorder.append(("withdraw_fees", (m,))) or "SiG")  # fmt: skip
    monkeypatch.setattr(GpuMarketClient, "events", lambda self, sig: [
        ("FeesWithdrawn", {"market": market.address, "treasury": market.treasury, "amount": 1_750_000})])
    code, out, err = run(["--output", "json", "market", "withdraw-fees", "--market", MARKET, "-k", keyfile])
    assert (code, err) == (0, "")
    # the amount the program moved (its event), not the balance read before sending
    assert json.loads(out) == {"market": MARKET, "withdrawn": "1.75", "treasury": str(market.treasury),
                               "signature": "SiG"}  # fmt: skip
    assert recorder == [("withdraw_fees", (Pubkey.from_string(MARKET),))]


def test_withdraw_fees_refuses_an_empty_vault(monkeypatch, keyfile, recorder):
    from gpu_market.client import GpuMarketClient

    monkeypatch.setattr(GpuMarketClient, "fees_to_withdraw", lambda self, m: 0)
    code, _, err = run(["market", "withdraw-fees", "--market", MARKET, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "holds nothing", "no fees to withdraw")
    assert recorder == []


def test_withdraw_fees_without_a_treasury_account_says_what_to_do(monkeypatch, keyfile, offline_chain):
    from gpu_market.client import GpuMarketClient

    market = fake_market()
    monkeypatch.setattr(GpuMarketClient, "_require", lambda self, k, kind: market)
    monkeypatch.setattr(GpuMarketClient, "account_info", lambda self, k: None)  # treasury closed
    code, _, err = run(["market", "withdraw-fees", "--market", MARKET, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "does not exist", "`gpum market set-treasury`")


def test_withdraw_fees_race_gets_the_hint(monkeypatch, keyfile, offline_chain):
    from gpu_market.client import GpuMarketClient

    def emptied(self, kp, m):  # someone else withdrew between the read and the send
        raise GpuMarketError(6071, "NothingToWithdrawFees", "the fee vault holds nothing to withdraw", [])

    monkeypatch.setattr(GpuMarketClient, "withdraw_fees", emptied)
    code, _, err = run(["market", "withdraw-fees", "--market", MARKET, "-k", keyfile])
    assert code == 1
    assert_one_line_error(err, "NothingToWithdrawFees (6071)", "since the last withdrawal")


def test_market_status_without_a_fee_vault(monkeypatch, offline_chain):
    from gpu_market.client import GpuMarketClient
    from gpu_market.errors import AccountNotFound

    def missing(self, m):
        raise AccountNotFound("token account does not exist")

    monkeypatch.setattr(GpuMarketClient, "fees_to_withdraw", missing)
    code, out, _ = run(["--output", "json", "market", "status", "--market", MARKET])
    assert code == 0 and json.loads(out)["fees_to_withdraw"] is None
