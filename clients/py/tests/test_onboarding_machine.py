"""The machine's side of ``gpum provider init`` (``gpu_market.onboarding_machine``): the
published endpoint and the listen address, the worker configuration (checked by the worker's
own parser), the systemd units and the systemctl commands, the endpoint probe against a real
HTTP server, the auto-pricing file and the CLI's refusals of bad options before anything is
sent."""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib
from gpu_market.onboarding import AutoPrice, OnboardingError
from gpu_market.onboarding_machine import (
    WorkerSetup,
    _alive,
    enable_commands,
    enable_units,
    parse_endpoint,
    provider_data_dir,
    read_auto_price,
    simulated_seed,
    systemd_units,
    wait_endpoint,
    worker_config_text,
    write_auto_price,
    write_units,
)
from gpu_market.processes import JsonServer
from gpum_worker.config import resolve
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from test_cli import MARKET, assert_one_line_error, offline, run


def setup(tmp_path: Path, **kw) -> WorkerSetup:
    base = {"data_dir": tmp_path / "my data", "key_file": tmp_path / "my data" / "worker-key.json",
            "rpc_url": "http://127.0.0.1:8899", "program_id": str(Pubkey.new_unique()),
            "market": str(Pubkey.new_unique()), "provider": str(Pubkey.new_unique()),
            "listen": "0.0.0.0:8090", "simulate": (2, 1234)}
    base.update(kw)
    return WorkerSetup(**base)


def test_the_endpoint_is_published_as_a_url_and_listened_on_its_port():
    assert parse_endpoint("203.0.113.7:8090") == ("http://203.0.113.7:8090", "0.0.0.0:8090")
    assert parse_endpoint("https://gpu.example/", "127.0.0.1:8090") == \
        ("https://gpu.example", "127.0.0.1:8090")
    assert parse_endpoint("http://[2001:db8::1]:9000") == ("http://[2001:db8::1]:9000",
                                                          "0.0.0.0:9000")
    for bad, needle in (("gpu.example", "has no port"), ("ftp://h:1", "write HOST:PORT"),
                        ("h:99999", "not a number"), ("http://u@h:1", "write HOST:PORT"),
                        ("h:1?x=1", "write HOST:PORT")):
        with pytest.raises(ValueError, match=needle):
            parse_endpoint(bad)


def test_the_worker_configuration_is_one_the_worker_accepts(tmp_path):
    s = setup(tmp_path, containers_conf=tmp_path / 'c "q".conf', reaper=False)
    text = worker_config_text(s)
    cfg = resolve(tomllib.loads(text), {}, {})
    assert cfg.key_file == s.key_file and cfg.db == s.data_dir / "outbox.sqlite"
    assert cfg.api_listen == "0.0.0.0:8090" and cfg.reaper is False
    assert cfg.rpc_url == s.rpc_url and cfg.containers_conf == tmp_path / 'c "q".conf'
    assert "simulate" not in text  # a flag of `run`, not configuration
    assert s.argv("/bin/gpum-worker")[-5:] == ["--simulate", "--gpus", "2", "--seed", "1234"]
    with pytest.raises(OnboardingError, match="would be refused.*listen"):
        worker_config_text(setup(tmp_path, listen="nowhere"))


def test_systemd_units_run_the_worker_and_a_reaper_that_outlives_it(tmp_path):
    s = setup(tmp_path)
    units = systemd_units(s, "/opt/gpum/bin/gpum-worker", user="gpum")
    assert sorted(units) == ["gpum-worker-reaper.service", "gpum-worker.service"]
    worker = units["gpum-worker.service"]
    exec_line = next(line for line in worker.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_line.removeprefix("ExecStart="))
    assert argv == ["/opt/gpum/bin/gpum-worker", "run", "--config", str(s.config_file),
                    "--simulate", "--gpus", "2", "--seed", "1234"]
    assert "User=gpum" in worker and "Restart=always" in worker
    assert "WantedBy=multi-user.target" in worker
    reaper = units["gpum-worker-reaper.service"]
    assert "PartOf" not in reaper.replace("no PartOf=", "") and "BindsTo=gpum" not in \
        reaper.replace("/BindsTo=gpum", "")
    assert f"reaper --config '{s.config_file}'" in reaper
    with_reprice = systemd_units(s, "w", user="u", reprice=["gpum", "provider", "reprice"],
                                 reprice_every_s=300)
    assert "Type=oneshot" in with_reprice["gpum-provider-reprice.service"]
    assert "OnUnitActiveSec=300" in with_reprice["gpum-provider-reprice.timer"]


def test_units_are_written_only_when_they_change(tmp_path):
    units = {"a.service": "x\n", "b.service": "y\n"}
    assert write_units(tmp_path / "u", units) == ["a.service", "b.service"]
    assert write_units(tmp_path / "u", units) == []
    assert write_units(tmp_path / "u", {**units, "b.service": "z\n"}) == ["b.service"]
    assert (tmp_path / "u" / "b.service").stat().st_mode & 0o777 == 0o644
    (tmp_path / "file").write_text("")
    with pytest.raises(OnboardingError, match="--systemd-dir DIR or --no-systemd"):
        write_units(tmp_path / "file" / "u", units)


def test_systemctl_enables_starts_and_on_a_change_restarts_the_services():
    names = ["gpum-provider-reprice.timer", "gpum-worker-reaper.service", "gpum-worker.service"]
    assert enable_commands(names, restart=False) == [
        ["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", *names]]
    assert enable_commands(names, restart=True)[-1] == [
        "systemctl", "restart", "gpum-worker-reaper.service", "gpum-worker.service"]
    ran = []
    enable_units(names, False, run=lambda cmd, **kw: ran.append(cmd) or SimpleNamespace(
        returncode=0, stdout="", stderr=""))
    assert ran == enable_commands(names, restart=False)

    def refuse(cmd, **kw):
        return SimpleNamespace(returncode=1, stdout="", stderr="Access denied\n")

    with pytest.raises(OnboardingError, match=r"`systemctl daemon-reload` failed \(1\): Access "
                                              "denied"):
        enable_units(names, False, run=refuse)


def test_the_endpoint_probe_waits_for_the_worker_and_checks_its_key():
    key = str(Keypair().pubkey())
    state = {"named": key, "up": False}
    server = JsonServer(lambda p, b: (404, {}), lambda p: (200, {"ok": True, "worker": state[
        "named"]}) if state["up"] and p == "/v1/health" else (503, {"error": "starting"}))
    try:
        clock = [0.0]

        def sleep(s):
            clock[0] += s
            state["up"] = clock[0] >= 2

        why, waited = wait_endpoint(server.url, key, 10, clock=lambda: clock[0], sleep=sleep)
        assert why == "" and 2 <= waited <= 3
        state["named"] = str(Keypair().pubkey())
        why, _ = wait_endpoint(server.url, key, 1, clock=lambda: clock[0], sleep=sleep)
        assert f"not the provider's current worker key {key}" in why
        why, waited = wait_endpoint(server.url, key, 60, clock=lambda: clock[0], sleep=sleep,
                                    problem=lambda: "the worker exited: boom")
        assert why.endswith("; the worker exited: boom") and waited == 0
    finally:
        server.server.shutdown()
        server.server.server_close()


def test_nobody_listening_is_unreachable_within_the_timeout():
    from gpu_market.processes import free_port

    why, waited = wait_endpoint(f"http://127.0.0.1:{free_port()}", str(Keypair().pubkey()), 1)
    assert "no answer from" in why and 1 <= waited < 6


def test_simulated_seeds_are_stable_and_differ_between_providers():
    a, b = bytes(Pubkey.new_unique()), bytes(Pubkey.new_unique())
    assert simulated_seed(a) == simulated_seed(a) != simulated_seed(b)
    assert 0 <= simulated_seed(a) < 2**32


def test_a_pid_is_a_worker_only_when_its_command_line_says_so(tmp_path):
    assert not _alive(os.getpid(), tmp_path / "worker.toml")
    assert not _alive(2**22 + 17, tmp_path / "worker.toml")


def test_the_auto_pricing_file_round_trips(tmp_path):
    with pytest.raises(OnboardingError, match="no auto-pricing configured"):
        read_auto_price(tmp_path)
    path = write_auto_price(tmp_path, AutoPrice(200, 750, 250))
    assert json.loads(path.read_text()) == {"min_per_second": 200, "max_per_second": 750,
                                            "threshold_bps": 250}
    assert read_auto_price(tmp_path) == AutoPrice(200, 750, 250)


def test_the_data_folder_follows_gpum_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUM_DATA_DIR", str(tmp_path))
    assert provider_data_dir("M", "O") == tmp_path / "providers" / "M" / "O"


# ----------------------------------------------------------------------------- the command


@pytest.mark.parametrize("args,needle", [
    (["--simulate", "0"], "--simulate '0': write N or N:MODEL"),
    (["--simulate", "1", "--price", "1.0000001"], "more decimal places"),
    (["--simulate", "1", "--price", "1.0001"], "use 0.9972 or 1.0008"),
    (["--simulate", "1", "--auto-price"], "--auto-price needs --min-price and --max-price"),
    (["--simulate", "1", "--auto-price", "--min-price", "3.6", "--max-price", "1.8"],
     "--min-price must be positive and at most --max-price"),
    (["--simulate", "1", "--reprice-threshold", "150%"], "a percentage 0..100"),
    (["--simulate", "1", "--auto-price", "--min-price", "1.8", "--max-price", "3.6",
      "--price", "7.2"], "Invalid value for '--price': outside --min-price..--max-price"),
    (["--simulate", "1", "--endpoint", "nowhere"], "has no port"),
    (["--simulate", "1", "--until", "nowhere"], "'nowhere' is not one of"),
])
def test_bad_options_are_refused_before_anything_is_sent(monkeypatch, tmp_path, keyfile, args,
                                                         needle):
    from gpu_market.client import GpuMarketClient

    offline(monkeypatch)
    sent = []
    monkeypatch.setattr(GpuMarketClient, "register_provider", lambda *a, **k: sent.append(a))
    monkeypatch.setattr("gpu_market.offers.list_offers", lambda *a, **k: [])
    argv = ["provider", "init", "--market", MARKET, "-k", keyfile, "--data-dir",
            str(tmp_path / "d"), "--endpoint", "127.0.0.1:8090", *args, "--until", "price"]
    if "--until" in args:
        argv = argv[:-2]
    code, _out, err = run(argv)
    assert code == 2, err
    assert_one_line_error(err, needle)
    assert sent == []


def test_reprice_without_auto_pricing_says_how_to_set_it_up(monkeypatch, tmp_path, keyfile):
    offline(monkeypatch)
    code, _out, err = run(["provider", "reprice", "--market", MARKET, "-k", keyfile,
                           "--data-dir", str(tmp_path)])
    assert code == 1
    assert_one_line_error(err, "no auto-pricing configured", "--auto-price --min-price X")


def test_init_without_the_worker_installed_names_the_package(monkeypatch, tmp_path, keyfile):
    """A machine with the SDK but not gpum-worker: the first step says what to install."""
    import builtins

    offline(monkeypatch)
    real_import = builtins.__import__

    def no_worker(name, *a, **k):
        if name.startswith("gpum_worker"):
            raise ImportError(f"No module named {name!r}", name=name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_worker)
    code, _out, err = run(["--output", "json", "provider", "init", "--market", MARKET, "-k",
                           keyfile, "--data-dir", str(tmp_path / "d"), "--endpoint", "h:1",
                           "--simulate", "1"])
    assert code == 1
    assert_one_line_error(err, "gpus: the gpum-worker package is not installed",
                          "pip install ./worker")
    state = json.loads((tmp_path / "d" / "init-state.json").read_text())
    assert state["steps"]["gpus"]["status"] == "failed"


def test_the_worker_is_started_detached_and_found_again(tmp_path):
    """``start_worker`` with a stand-in executable named gpum-worker that just sleeps (a
    Python script, as the real console script is): the pid it returns runs in a session of
    its own, is found by ``started_worker`` and stopped."""
    import sys

    from gpu_market.onboarding_machine import start_worker, started_worker, stop_worker

    fake = tmp_path / "bin" / "gpum-worker"
    fake.parent.mkdir()
    fake.write_text(f"#!{sys.executable}\nimport sys, time\nprint('started', *sys.argv[1:], "
                    "flush=True)\ntime.sleep(60)\n")
    fake.chmod(0o755)
    s = setup(tmp_path)
    s.data_dir.mkdir()
    pid = start_worker(s, str(fake), "abc")
    try:
        rec = started_worker(s)
        assert rec is not None and rec["pid"] == pid and rec["config_sha256"] == "abc"
        assert os.getsid(pid) != os.getsid(0)
        deadline = time.monotonic() + 20
        while "started" not in s.log_file.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop_worker(pid, s.config_file, timeout=5)
    assert started_worker(s) is None
    assert "started run --config" in s.log_file.read_text()
    with pytest.raises(OnboardingError, match="did not start: .*not found"):
        start_worker(s, str(tmp_path / "nowhere" / "gpum-worker"), "abc")
