"""gpum job exec / job cp (gpu_market.cli.exec) and the client side of the exec API
(gpu_market.exec_api): argument handling, exit statuses and paths, with the worker replaced
(the worker's side runs for real in worker/tests/test_exec.py and tests/test_e2e_exec.py)."""

from __future__ import annotations

import json

import pytest
from gpu_market import exec_api
from gpu_market.cli import exec as cli_exec
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from test_cli import assert_one_line_error, run

JOB = Pubkey.new_unique()


@pytest.fixture
def user(tmp_path, monkeypatch):
    kp = Keypair()
    path = tmp_path / "id.json"
    path.write_text(json.dumps(list(bytes(kp))))
    monkeypatch.setattr(cli_exec, "_target", lambda env, job: ("http://127.0.0.1:1", None))
    return str(path)


def _exec(args: list[str]) -> tuple[int, str, str]:
    try:
        return run(args)
    except SystemExit as e:  # the command's own exit status
        return int(e.code or 0), "", ""


def test_exec_runs_the_command_after_the_separator_and_exits_with_its_status(user, monkeypatch):
    seen = []

    def fake_stream(endpoint, job, cmd, secret, timeout=10.0):
        seen.append((job, cmd))
        yield b"o", b"hi\n"
        yield b"x", b"3"

    monkeypatch.setattr(exec_api, "exec_stream", fake_stream)
    code, _, _ = _exec(["job", "exec", "--keypair", user, str(JOB), "--", "sh", "-c", "exit 3"])
    assert code == 3
    assert seen == [(bytes(JOB), ["sh", "-c", "exit 3"])]
    code, _, err = _exec(["job", "exec", "--keypair", user, str(JOB), "--"])
    assert code == 2 and "name the command" in err


def test_exec_with_a_terminal_needs_one(user, monkeypatch):
    monkeypatch.setattr("os.isatty", lambda fd: False)
    code, _, err = _exec(["job", "exec", "-it", "--keypair", user, str(JOB), "--", "sh"])
    assert code == 1
    assert_one_line_error(err, "-t needs a terminal")


def test_cp_needs_exactly_one_container_side(user):
    for args in (["./a", "./b"], [f"{JOB}:/a", f"{JOB}:/b"]):
        code, _, err = run(["job", "cp", "--keypair", user, *args])
        assert code == 1
        assert_one_line_error(err, "JOB:/path on exactly one side")


def test_cp_refuses_a_path_that_climbs_out(user, tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    code, _, err = run(["job", "cp", "--keypair", user, str(f), f"{JOB}:/scratch/../../etc"])
    assert code == 1
    assert_one_line_error(err, "'..'")


def test_container_paths() -> None:
    assert exec_api.check_container_path("/scratch//x/./y") == "/scratch/x/y"
    assert exec_api.check_container_path("/") == "/"
    for bad, why in (("scratch/x", "absolute"), ("/a/../b", r"\.\."), ("/a\nb", "control"),
                     ("", "required")):
        with pytest.raises(ValueError, match=why):
            exec_api.check_container_path(bad)


def test_the_digest_binds_every_part_of_the_request() -> None:
    base = exec_api.request_digest("PUT", "files", "/x", "n" * 16, b"body")
    for other in (("GET", "files", "/x", "n" * 16, b"body"),
                  ("PUT", "exec", "/x", "n" * 16, b"body"),
                  ("PUT", "files", "/y", "n" * 16, b"body"),
                  ("PUT", "files", "/x", "m" * 16, b"body"),
                  ("PUT", "files", "/x", "n" * 16, b"bodY")):
        assert exec_api.request_digest(*other) != base
