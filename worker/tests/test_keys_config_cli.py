"""Key files, configuration layering and the CLI's one-line errors."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpum_worker import cli as cli_mod
from gpum_worker.config import resolve
from gpum_worker.errors import ConfigError, KeyFileError
from gpum_worker.keys import b58decode, b58encode, generate_key_file, load_worker_key
from solders.keypair import Keypair
from solders.pubkey import Pubkey


def test_keygen_writes_0600_solana_format(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    r = CliRunner().invoke(cli_mod.cli, ["keygen", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    data = json.loads(out.read_text())
    assert len(data) == 64
    kp = Keypair.from_bytes(bytes(data))
    assert r.stdout.splitlines()[0] == str(kp.pubkey())
    assert load_worker_key(out).pubkey_b58 == str(kp.pubkey())


def test_keygen_refuses_overwrite_unless_force(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    generate_key_file(out)
    before = out.read_text()
    r = CliRunner().invoke(cli_mod.cli, ["keygen", "--out", str(out)])
    assert r.exit_code == 1 and "already exists" in r.output and "--force" in r.output
    assert "Traceback" not in r.output and out.read_text() == before
    r = CliRunner().invoke(cli_mod.cli, ["keygen", "--out", str(out), "--force"])
    assert r.exit_code == 0 and out.read_text() != before


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_key_readable_by_others_refused(tmp_path: Path, mode: int) -> None:
    out = tmp_path / "k.json"
    generate_key_file(out)
    os.chmod(out, mode)
    with pytest.raises(KeyFileError, match=f"chmod 600 {out}"):
        load_worker_key(out)


@pytest.mark.parametrize(
    ("content", "needle"),
    [("not json", "not valid JSON"), ("[1,2,3]", "64 bytes"), (json.dumps([256] * 64),
                                                                 "64 bytes")],
)
def test_malformed_key_file(tmp_path: Path, content: str, needle: str) -> None:
    p = tmp_path / "k.json"
    p.write_text(content)
    os.chmod(p, 0o600)
    with pytest.raises(KeyFileError, match=needle):
        load_worker_key(p)


def test_key_pubkey_mismatch(tmp_path: Path) -> None:
    p = tmp_path / "k.json"
    p.write_text(json.dumps(list(bytes(range(32)) + bytes(32))))
    os.chmod(p, 0o600)
    with pytest.raises(KeyFileError, match="does not match"):
        load_worker_key(p)


def test_missing_key_file_message(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="gpum-worker keygen --out"):
        load_worker_key(tmp_path / "nope.json")


def test_base58_matches_solders() -> None:
    for raw in (bytes(32), b"\x00\x01" + bytes(range(30)), bytes(range(200, 232)), b"\xff" * 32):
        assert b58encode(raw) == str(Pubkey.from_bytes(raw))
        assert b58decode(b58encode(raw)) == raw
    with pytest.raises(ValueError):
        b58decode("0OIl")


# ---------------------------------------------------------------------------- config


def test_config_precedence_flags_over_env_over_file() -> None:
    file = {"validators": ["http://file:1"], "window_seconds": 30, "db": "/f.db",
            "health": {"temp_warn_c": 80}, "sender": {"backoff_cap_seconds": 30}}
    env = {"GPUM_WORKER_WINDOW_SECONDS": "20", "GPUM_WORKER_VALIDATORS": "http://e:1,http://e:2"}
    c = resolve(file, env, {"window_seconds": None, "db": "/flag.db"})
    assert c.window_seconds == 20 and str(c.db) == "/flag.db"
    assert c.validators == ("http://e:1", "http://e:2")
    assert c.thresholds.temp_warn_c == 80 and c.retry.cap_s == 30
    c = resolve(file, env, {"window_seconds": 5, "validators": ("http://f/",)})
    assert c.window_seconds == 5 and c.validators == ("http://f",)
    assert resolve(file, {}, {}).window_seconds == 30


@pytest.mark.parametrize(
    ("file", "env", "flags", "needle"),
    [
        ({"validators": ["ftp://x"]}, {}, {}, "bad validator URL"),
        ({}, {"GPUM_WORKER_VALIDATORS": "localhost:8080"}, {}, "bad validator URL"),
        ({"validators": ["http://x"], "window_seconds": 0}, {}, {}, "window_seconds"),
        ({"validators": ["http://x"]}, {"GPUM_WORKER_WINDOW_SECONDS": "abc"}, {},
         "GPUM_WORKER_WINDOW_SECONDS must be a number"),
        ({"validators": ["http://x"], "sample_interval_ms": 300}, {}, {}, "divide 1000"),
        ({"validators": ["http://x"], "bogus": 1}, {}, {}, "unknown config key"),
        ({"validators": ["http://x"], "health": {"temp_warn_c": 99, "temp_critical_c": 90}},
         {}, {}, r"\[health\]"),
        ({"validators": ["http://x"], "health": {"nope": 1}}, {}, {}, "unknown key"),
        ({"validators": ["http://x"], "chain": {"market": "xyz0"}}, {}, {}, "market"),
    ],
)
def test_config_errors(file: dict, env: dict, flags: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        resolve(file, env, flags)


# ---------------------------------------------------------------------------- CLI errors


def _key(tmp_path: Path) -> Path:
    p = tmp_path / "k.json"
    generate_key_file(p)
    return p


def test_run_bad_toml_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("validators = [")
    r = CliRunner().invoke(cli_mod.cli, ["run", "--config", str(cfg)])
    assert r.exit_code == 1 and r.output.startswith("error: config file") and \
        "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_run_missing_key_is_one_line(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli_mod.cli, ["run", "--key", str(tmp_path / "none.json"),
                                         "--validator", "http://127.0.0.1:1", "--simulate"])
    assert r.exit_code == 1 and "keygen" in r.output and "Traceback" not in r.output


def test_run_open_key_refused(tmp_path: Path) -> None:
    k = _key(tmp_path)
    os.chmod(k, 0o644)
    r = CliRunner().invoke(cli_mod.cli, ["run", "--key", str(k), "--validator",
                                         "http://127.0.0.1:1", "--simulate"])
    assert r.exit_code == 1 and f"chmod 600 {k}" in r.output


def test_run_driver_not_loaded_is_clear_error(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml
    from gpum_worker.gpu import NvmlBackend
    from test_gpu import _fake_nvml, _raiser

    monkeypatch.setattr(cli_mod, "NvmlBackend", lambda: NvmlBackend(_fake_nvml(
        nvmlInit=_raiser(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))))
    k = _key(tmp_path)
    pk = "11111111111111111111111111111112"
    r = CliRunner().invoke(cli_mod.cli, [
        "run", "--key", str(k), "--db", str(tmp_path / "o.db"), "--validator", "http://h:1",
        "--job", pk, "--program-id", pk, "--market", pk, "--provider", pk])
    assert r.exit_code == 1
    assert "DriverNotLoaded" in r.output and "--simulate" in r.output
    assert "Traceback" not in r.output


def test_probe_driver_not_loaded_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    from fakes import FakeBackend

    monkeypatch.setattr(cli_mod, "NvmlBackend", lambda: FakeBackend(
        [], init_error="no usable NVIDIA driver: NVMLError_LibraryNotFound"))
    r = CliRunner().invoke(cli_mod.cli, ["probe"])
    assert r.exit_code == 1 and "no NVIDIA GPU available" in r.output


def test_probe_lists_unsupported_and_failing(monkeypatch: pytest.MonkeyPatch) -> None:
    from fakes import FakeBackend, FakeGpu

    b = FakeBackend([FakeGpu("GPU-0"), FakeGpu("GPU-1")])
    b.unsupported.add((0, "fan"))
    b.failing[(0, "power")] = "Timeout"
    b.lost.add(1)
    monkeypatch.setattr(cli_mod, "NvmlBackend", lambda: b)
    r = CliRunner().invoke(cli_mod.cli, ["probe"])
    assert r.exit_code == 0, r.output
    assert "fan              not supported (recorded as absent)" in r.output
    assert "power            call failed" in r.output
    assert "GPU-1" not in r.output or "LOST" in r.output
    assert b.shut


def test_probe_simulate() -> None:
    r = CliRunner().invoke(cli_mod.cli, ["probe", "--simulate", "--gpus", "2", "--seed", "3"])
    assert r.exit_code == 0 and r.output.count("Simulated H100") == 2


def test_run_job_needs_chain_ids(tmp_path: Path) -> None:
    k = _key(tmp_path)
    r = CliRunner().invoke(cli_mod.cli, ["run", "--key", str(k), "--validator", "http://h:1",
                                         "--simulate", "--job",
                                         "11111111111111111111111111111112"])
    assert r.exit_code == 1 and "--job needs --program-id" in r.output


def test_validators_are_optional_but_required_with_job(tmp_path: Path) -> None:
    """Chain jobs find their validators on chain; ``--job`` jobs have no committee."""
    assert resolve({}, {}, {}).validators == ()
    k = _key(tmp_path)
    pk = "11111111111111111111111111111112"
    r = CliRunner().invoke(cli_mod.cli, ["run", "--key", str(k), "--db", str(tmp_path / "o.db"),
                                         "--simulate", "--job", pk, "--program-id", pk,
                                         "--market", pk, "--provider", pk])
    assert r.exit_code == 1 and "--job needs --validator" in r.output
    assert "Traceback" not in r.output


def test_run_previous_worker_key_only_with_job(tmp_path: Path) -> None:
    k = _key(tmp_path)
    pk = "11111111111111111111111111111112"
    base = ["run", "--key", str(k), "--db", str(tmp_path / "o.db"), "--validator",
            "http://h:1", "--simulate", "--program-id", pk, "--market", pk, "--provider", pk]
    r = CliRunner().invoke(cli_mod.cli, [*base, "--rpc-url", "http://h:2",
                                         "--previous-worker-key", pk])
    assert r.exit_code == 1 and "only applies with --job" in r.output
    r = CliRunner().invoke(cli_mod.cli, [*base, "--job", pk, "--previous-worker-key", "nope!"])
    assert r.exit_code == 1 and "--previous-worker-key" in r.output
    assert "Traceback" not in r.output


# ---------------------------------------------------------------------------- workloads


def test_workload_and_api_config() -> None:
    c = resolve({}, {}, {})
    assert (c.runtime, c.containers_conf, c.publish_host, c.api_listen) == (
        "auto", None, "0.0.0.0", None)
    file = {"workload": {"runtime": "docker", "containers_conf": "/etc/c.conf",
                         "publish_host": "127.0.0.1"}, "api": {"listen": "0.0.0.0:8090"}}
    c = resolve(file, {}, {})
    assert (c.runtime, str(c.containers_conf), c.publish_host, c.api_listen) == (
        "docker", "/etc/c.conf", "127.0.0.1", "0.0.0.0:8090")
    env = {"GPUM_WORKER_RUNTIME": "podman", "GPUM_WORKER_API_LISTEN": "127.0.0.1:1"}
    c = resolve(file, env, {"api_listen": "[::1]:0"})
    assert c.runtime == "podman" and c.api_listen == "[::1]:0"


@pytest.mark.parametrize(
    ("file", "flags", "needle"),
    [
        ({"workload": {"runtime": "lxc"}}, {}, "runtime must be one of"),
        ({"workload": {"publish_host": "example.com"}}, {}, "publish_host must be an IP"),
        ({"workload": {"nope": 1}}, {}, r"\[workload\] accepts only"),
        ({"api": {"port": 1}}, {}, r"\[api\] accepts only"),
        ({}, {"api_listen": "8090"}, "HOST:PORT"),
        ({}, {"api_listen": "127.0.0.1:70000"}, "HOST:PORT"),
    ],
)
def test_workload_config_errors(file: dict, flags: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        resolve(file, {}, flags)


def test_run_starts_the_api_and_the_runtime(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """``gpum-worker run`` wires the API and the container runtime; the chain is down."""
    import logging

    from runtimetestkit import write_containers_conf

    k = _key(tmp_path)
    pk = "11111111111111111111111111111112"
    conf = write_containers_conf(tmp_path)
    with caplog.at_level(logging.INFO, logger="gpum_worker"):
        r = CliRunner().invoke(cli_mod.cli, [
            "run", "--key", str(k), "--db", str(tmp_path / "o.db"), "--simulate",
            "--program-id", pk, "--market", pk, "--provider", pk,
            "--rpc-url", "http://127.0.0.1:1", "--api-listen", "127.0.0.1:0",
            "--runtime", "podman", "--containers-conf", str(conf), "--run-seconds", "0.5"])
    assert r.exit_code == 0, r.output
    started = [m for m in caplog.messages if "started:" in m]
    assert len(started) == 1
    assert "API: http://127.0.0.1:" in started[0] and "container runtime: podman" in started[0]
    assert (tmp_path / "o.workloads.sqlite").exists()
    r = CliRunner().invoke(cli_mod.cli, [
        "run", "--key", str(k), "--db", str(tmp_path / "o.db"), "--simulate",
        "--program-id", pk, "--market", pk, "--provider", pk,
        "--rpc-url", "http://127.0.0.1:1", "--containers-conf", str(tmp_path / "none.conf")])
    assert r.exit_code == 1 and "containers_conf" in r.output and "Traceback" not in r.output


def test_run_without_api_says_workloads_are_refused(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from runtimetestkit import write_containers_conf

    k = _key(tmp_path)
    pk = "11111111111111111111111111111112"
    with caplog.at_level(logging.INFO, logger="gpum_worker"):
        r = CliRunner().invoke(cli_mod.cli, [
            "run", "--key", str(k), "--db", str(tmp_path / "o.db"), "--simulate",
            "--program-id", pk, "--market", pk, "--provider", pk,
            "--rpc-url", "http://127.0.0.1:1", "--run-seconds", "0.3"],
            env={"GPUM_WORKER_CONTAINERS_CONF": str(write_containers_conf(tmp_path))})
    assert r.exit_code == 0, r.output
    assert any("worker API off" in m for m in caplog.messages)
    assert any("API: off" in m for m in caplog.messages)


def test_run_explicit_runtime_that_does_not_work_is_fatal(tmp_path: Path) -> None:
    k = _key(tmp_path)
    pk = "11111111111111111111111111111112"
    r = CliRunner().invoke(cli_mod.cli, [
        "run", "--key", str(k), "--db", str(tmp_path / "o.db"), "--simulate",
        "--program-id", pk, "--market", pk, "--provider", pk,
        "--rpc-url", "http://127.0.0.1:1", "--runtime", "docker"],
        env={"PATH": str(tmp_path)})  # no docker on this PATH
    assert r.exit_code == 1 and "docker" in r.output and "Traceback" not in r.output
