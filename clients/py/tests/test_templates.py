"""Templates (gpu_market.task_templates) and how ``gpum run`` takes a template or a task file
(gpu_market.cli.task_file): the built-in templates, a user's directory overriding them, a path,
the listing, every run flag having a task-file key, flags winning over the file, and the URL
printed from the published port."""

from __future__ import annotations

import inspect
import json
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import click
import pytest
import tomllib
from click.testing import CliRunner
from gpu_market import cli as cli_mod
from gpu_market.cli import run as cli_run
from gpu_market.cli import task_file
from gpu_market.task import PARAM_KEYS, TaskError, parse_task, render
from gpu_market.task_templates import BUILTIN_DIR, find_template, list_templates, load_template
from solders.pubkey import Pubkey

MARKET = str(Pubkey.new_unique())


def test_the_built_in_templates_load_and_say_what_to_print() -> None:
    names = {t.name for t in list_templates() if t.builtin}
    assert {"jupyter", "vllm", "comfyui", "ray"} <= names
    for name in names:
        t = render(load_template(name))
        assert t.description and t.params["image"] and t.url and t.health, name
        assert str(t.url["port"]) in t.params["ports"], name
    jupyter = render(load_template("jupyter"))
    token = jupyter.values["token"]
    assert len(token) == 48 and jupyter.params["secrets"] == [f"JUPYTER_TOKEN={token}"]
    assert jupyter.url["pattern"].endswith("?token={token}")
    vllm = load_template("vllm")
    assert vllm.url["pattern"] == "http://{host}:{port}/v1" and "api_key" in vllm.show
    assert load_template("ray").show == {"ray_address": "ray://{endpoint:10001}"}


def test_the_templates_ship_as_package_data() -> None:
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["gpu_market"]
    assert "templates/*.toml" in patterns
    assert sorted(BUILTIN_DIR.glob("*.toml"))


def test_a_users_template_overrides_and_adds_and_a_path_works(tmp_path, gpum_home) -> None:
    user = gpum_home / "config" / "gpum" / "templates"
    user.mkdir(parents=True)
    (user / "jupyter.toml").write_text('description = "my jupyter"\nimage = "mine"\n')
    (user / "mine.json").write_text(json.dumps({"description": "mine too", "image": "x"}))
    (user / "broken.toml").write_text("image = \n")
    infos = {t.name: t for t in list_templates()}
    assert infos["jupyter"].description == "my jupyter" and not infos["jupyter"].builtin
    assert infos["mine"].description == "mine too"
    assert infos["broken"].description.startswith("(broken: ")
    assert load_template("jupyter").params["image"] == "mine"
    elsewhere = tmp_path / "t.toml"
    elsewhere.write_text('image = "there"\n')
    assert load_template(str(elsewhere)).params["image"] == "there"
    assert find_template(str(elsewhere)) == elsewhere
    with pytest.raises(TaskError, match="no template named 'nope'; known: broken, comfyui"):
        load_template("nope")
    with pytest.raises(TaskError, match="does not exist"):
        load_template(str(tmp_path / "missing.toml"))


def test_gpum_templates_and_run_template_list_need_no_market() -> None:
    runner = CliRunner()
    r = runner.invoke(cli_mod.cli, ["run", "--template", "list"])
    assert r.exit_code == 0, r.output
    assert any(line.startswith("jupyter ") for line in r.output.splitlines())
    r = runner.invoke(cli_mod.cli, ["--output", "json", "templates"])
    assert r.exit_code == 0, r.output
    names = [t["name"] for t in json.loads(r.output)["templates"]]
    assert names == sorted(names) and "vllm" in names


def test_every_run_flag_has_a_task_file_key() -> None:
    """A new `gpum run` flag must get a key in gpu_market.task.PARAM_KEYS and
    cli.task_file.TASK_PARAMS (or a reason in NOT_IN_FILE)."""
    run_params = {p.name for p in cli_run.run.params}
    assert set(task_file.TASK_PARAMS) == set(PARAM_KEYS)
    covered = set(task_file.TASK_PARAMS.values()) | set(task_file.NOT_IN_FILE)
    assert run_params == covered, (f"without a key: {sorted(run_params - covered)}; "
                                   f"keys of no flag: {sorted(covered - run_params)}")


@pytest.fixture
def captured(monkeypatch):
    """What ``gpum run`` would run with: its parsed parameters by name (nothing is sent)."""
    calls: list[dict] = []
    sig = inspect.signature(cli_run._run)
    monkeypatch.setattr(cli_run, "_run",
                        lambda *a, **kw: calls.append(dict(sig.bind(*a, **kw).arguments)))
    return calls


def invoke(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli_mod.cli, ["run", "--market", MARKET, *args])


def test_flags_given_win_over_the_task_file_and_the_file_over_its_template(tmp_path, captured) -> None:
    (tmp_path / "web.toml").write_text(
        'description = "web"\nimage = "tpl-image"\nports = [8888]\nenv = { A = "1", B = "1" }\n'
        'args = ["tpl"]\nshm_size = 64\n[generate]\ntoken = "hex:8"\n'
        '[url]\nport = 8888\npattern = "http://{host}:{port}/?t={token}"\n')
    task = tmp_path / "task.toml"
    task.write_text(f'template = "{tmp_path / "web.toml"}"\nenv = {{ B = "2" }}\n'
                    'timeout = "2m"\nname = "job-a"\n'
                    '[resources]\ngpu = "H100:2"\nhours = "90m"\nmax_price = "3"\n')
    r = invoke("-f", str(task), "--env", "A=9", "--port", "9000", "--hours", "2",
               "--shm-size", "128")
    assert r.exit_code == 0, r.output
    (got,) = captured
    assert (got["model"], got["gpus"]) == ("H100", 2)
    assert got["seconds"] == Fraction(7200)  # the flag
    assert got["max_price"] == "3" and got["wait_timeout"] == 120 and got["name"] == "job-a"
    w = got["workload"]
    assert w["image"] == "tpl-image" and w["args"] == ("tpl",) and w["shm_size_mib"] == 128
    assert sorted(w["env"]) == ["A=9", "B=2"] and list(w["ports"]) == ["8888", "9000"]


def test_a_template_by_name_fills_the_workload(captured) -> None:
    r = invoke("--template", "jupyter", "--gpu", "h100:1", "--hours", "1")
    assert r.exit_code == 0, r.output
    w = captured[0]["workload"]
    assert w["image"].startswith("quay.io/jupyter/") and w["ports"] == ("8888",)
    assert len(w["secrets"]) == 1 and w["secrets"][0].startswith("JUPYTER_TOKEN=")


@pytest.mark.parametrize("args, needles", [
    (["--template", "jupyter", "--hours", "1"], ["Missing option '--gpu'", "resources.gpu"]),
    (["--gpu", "h100:1", "--image", "x"], ["Missing option '--hours'"]),
    (["--template", "nope", "--gpu", "h100:1", "--hours", "1"], ["no template named 'nope'"]),
])
def test_what_is_missing_is_named(captured, args, needles) -> None:
    r = invoke(*args)
    assert r.exit_code == 2 and not captured
    for needle in needles:
        assert needle in r.output


@pytest.mark.parametrize("text, needles", [
    ('[resources]\ngpu = "H100"\nhours = 1\n', ["resources.gpu of", "not MODEL:COUNT"]),
    ('image = "x"\nquorum = 9\n[resources]\ngpu = "H100:1"\nhours = 1\n',
     ["quorum of", "9 is not in the range"]),
    ('image = "x"\n[resources]\ngpu = "H100:1"\nhours = 1\nprovider = "nope"\n',
     ["resources.provider of", "not a valid base58 public key"]),
    ('nodes = 4\n', ["multi-node tasks are not supported"]),
    ('colour = "red"\n', ["unknown key 'colour'", "known keys: args"]),
])
def test_file_values_are_checked_as_the_flags_are(tmp_path, captured, text, needles) -> None:
    path = tmp_path / "task.toml"
    path.write_text(text)
    r = invoke("-f", str(path))
    assert r.exit_code == 2 and not captured, r.output
    for needle in needles:
        assert needle in r.output


def test_the_url_and_health_are_added_to_the_result(monkeypatch) -> None:
    task = render(parse_task({
        "generate": {"token": "hex:8"}, "ports": [8888, 10001],
        "url": {"port": 8888, "pattern": "http://{host}:{port}/lab?token={token}"},
        "show": {"client": "ray://{endpoint:10001}", "state": "{token}"},
        "health": {"path": "/api", "timeout": "30s"}}, "t.toml"))
    probed = []
    monkeypatch.setattr(task_file, "wait_healthy",
                        lambda url, s: probed.append((url, s)) or (True, ""))
    env = SimpleNamespace(output="json")
    data = {"job": "J", "state": "running",
            "ports": ["10.0.0.1:4001 -> 8888/tcp", "10.0.0.1:4002 -> 10001/tcp"]}
    out = task_file._add_url(env, data, task, deadline=float("inf"))
    token = task.values["token"]
    assert out["url"] == f"http://10.0.0.1:4001/lab?token={token}"
    assert out["client"] == "ray://10.0.0.1:4002" and out["template_state"] == token
    assert out["health"].startswith("ok in ") and probed == [("http://10.0.0.1:4001/api", 30.0)]
    monkeypatch.setattr(task_file, "wait_healthy", lambda url, s: (False, "HTTP 502"))
    out = task_file._add_url(env, {**data, "ports": data["ports"][:1]}, task, float("inf"))
    assert "not answering after 30 s (HTTP 502)" in out["health"] and "gpum job logs J" in out["health"]
    assert out["client"] == "(container port 10001 is not published)"
