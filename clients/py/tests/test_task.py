"""Task files (gpu_market.task): a file -> the run's parameters in the flags' form, every key
checked (unknown keys name the known ones, values parsed as the flags parse them), nodes > 1
and checkpointing refused, and the template layering and placeholders."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from gpu_market.task import (
    PARAM_KEYS,
    TaskError,
    fill,
    load_task,
    merge,
    parse_task,
    published,
    read_file,
    render,
    wait_healthy,
)

FULL = """
name = "train"
image = "pytorch/pytorch:2.4.0"
command = ["python", "-u"]
args = ["train.py", "--epochs", "3"]
env = { HF_HOME = "/scratch/hf", MODE = "a=b" }
secrets = { WANDB_KEY = "s3cret" }
ports = [8888, "5000/udp"]
shm_size = 1024
scratch = 20480
finish_on_exit = true
timeout = "15m"
committee = "A,B"
quorum = 1
job_id = 7
dry_run = true
nodes = 1
[resources]
gpu = "H100:4"
hours = "1h30m"
max_price = "2.5"
provider = "11111111111111111111111111111111"
"""


def write(tmp_path, text: str, name: str = "task.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_full_task_file_gives_every_parameter_in_the_flags_form(tmp_path) -> None:
    task = load_task(write(tmp_path, FULL))
    assert task.params == {
        "name": "train", "image": "pytorch/pytorch:2.4.0", "command": '["python", "-u"]',
        "args": ["train.py", "--epochs", "3"], "env": ["HF_HOME=/scratch/hf", "MODE=a=b"],
        "secrets": ["WANDB_KEY=s3cret"], "ports": ["8888", "5000/udp"], "shm_size": 1024,
        "scratch": 20480, "finish_on_exit": True, "timeout": "15m", "committee": "A,B",
        "quorum": 1, "job_id": 7, "dry_run": True, "gpu": "H100:4", "hours": "1h30m",
        "max_price": "2.5", "provider": "11111111111111111111111111111111"}
    assert set(task.params) == set(PARAM_KEYS)  # the example covers every key


def test_json_is_read_the_same_and_yaml_needs_pyyaml(tmp_path) -> None:
    data = {"image": "busybox", "resources": {"gpu": "A100:1", "hours": 2}}
    task = load_task(write(tmp_path, json.dumps(data), "t.json"))
    assert task.params == {"image": "busybox", "gpu": "A100:1", "hours": "2"}
    try:
        import yaml  # noqa: F401
    except ImportError:
        with pytest.raises(TaskError, match="PyYAML.*TOML.*JSON"):
            read_file(write(tmp_path, "image: busybox\n", "t.yaml"))
    with pytest.raises(TaskError, match=r"ends in \.toml, \.json"):
        read_file(write(tmp_path, "x", "t.txt"))
    with pytest.raises(TaskError, match="not valid TOML"):
        read_file(write(tmp_path, "image = ", "bad.toml"))
    with pytest.raises(TaskError, match="cannot read"):
        read_file(tmp_path / "missing.toml")
    with pytest.raises(TaskError, match="table of keys"):
        read_file(write(tmp_path, "[1, 2]", "list.json"))


@pytest.mark.parametrize("data, needles", [
    ({"imgae": "x"}, ["unknown key 'imgae'", "known keys: args, checkpointing", "image"]),
    ({"gpu": "H100:1"}, ["unknown key 'gpu'", "did you mean resources.gpu"]),
    ({"resources": {"gpus": 1}}, ["unknown key 'resources.gpus'", "in resources: gpu, hours"]),
    ({"resources": {"image": "x"}}, ["did you mean the top-level key image"]),
    ({"nodes": 2}, ["nodes = 2", "multi-node tasks are not supported", "MODEL:COUNT"]),
    ({"nodes": 0}, ["nodes must be a whole number >= 1"]),
    ({"checkpointing": {"path": "/ckpt"}}, ["checkpointing is not supported"]),
    ({"resources": {"hours": "2x"}}, ["resources.hours", "not a duration"]),
    ({"resources": {"hours": 0}}, ["resources.hours", "must be positive"]),
    ({"timeout": "10"}, []),  # a bare number is seconds, as --timeout takes it
    ({"timeout": "1h1h"}, ["timeout", "repeats a unit"]),
    ({"env": ["A=1"]}, ["env must be a table of NAME = value"]),
    ({"env": {"1BAD": "x"}}, ["env:", "'1BAD' is not allowed"]),
    ({"ports": [70000]}, ["ports[0]", "out of range"]),
    ({"ports": "8888"}, ["ports must be a list"]),
    ({"ports": ["http"]}, ["ports[0]", "not PORT"]),
    ({"command": "python train.py"}, ["not one word", "run ="]),
    ({"command": ["a", 3]}, []),  # numbers become strings
    ({"run": "x", "args": ["y"]}, ["either run", "not both"]),
    ({"quorum": 0}, ["quorum must be a whole number >= 1"]),
    ({"finish_on_exit": "yes"}, ["finish_on_exit must be true or false"]),
    ({"shm_size": True}, ["shm_size must be a whole number"]),
    ({"resources": []}, ["resources must be a table"]),
    ({"generate": {"t": "hex:2"}}, ["hex:N", "8..128"]),
    ({"generate": {"port": "hex:16"}}, ["not host, port or endpoint"]),
    ({"env": {"A": "{tok}"}}, ["env[0]", "unknown placeholder {tok}", "add a [generate]"]),
    ({"url": {"port": 80}}, ["url needs both port"]),
    ({"url": {"port": 80, "pattern": "http://{host}:{prot}/"}}, ["{prot}", "host, port"]),
    ({"url": {"port": 80, "pattern": "x", "extra": 1}}, ["unknown key 'url.extra'"]),
    ({"health": {"path": "api"}}, ["health.path must start with /"]),
    ({"health": {"path": "/api"}}, ["health needs port"]),
])
def test_bad_keys_and_values_name_the_key_and_what_is_allowed(data, needles) -> None:
    if not needles:
        parse_task(data, "t.toml")
        return
    with pytest.raises(TaskError) as e:
        parse_task(data, "t.toml")
    assert str(e.value).startswith("t.toml: ")
    for needle in needles:
        assert needle in str(e.value)


def test_run_is_a_shell_line_and_secrets_can_come_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_abc")
    monkeypatch.delenv("NOPE", raising=False)
    task = parse_task({"run": "pip install x && python t.py", "secrets": ["HF_TOKEN"]})
    assert task.params["command"] == '["/bin/sh", "-c"]'
    assert task.params["args"] == ["pip install x && python t.py"]
    assert task.params["secrets"] == ["HF_TOKEN=hf_abc"]
    with pytest.raises(TaskError, match="NOPE, which is not set in your environment"):
        parse_task({"secrets": ["NOPE"]})


TEMPLATE = {
    "description": "web", "image": "img", "ports": [8888], "env": {"A": "1", "T": "{token}"},
    "secrets": {"S": "{token}"}, "args": ["--token={token}"], "generate": {"token": "hex:16"},
    "url": {"port": 8888, "pattern": "http://{host}:{port}/?token={token}&x={{y}}"},
    "show": {"admin": "http://{endpoint:9000}/admin"}, "health": {"path": "/api"},
}


def test_a_task_over_its_template_and_the_generated_values() -> None:
    base = parse_task(TEMPLATE, "web.toml")
    assert base.health == {"path": "/api", "port": 8888, "timeout": "5m"}
    over = parse_task({"template": "web", "env": {"A": "2", "B": "3"}, "ports": [8888, 9000],
                       "args": ["--other"], "resources": {"gpu": "H100:1"}}, "task.toml")
    task = render(merge(base, over), SimpleNamespace(token_hex=lambda n: "f" * (2 * n)))
    token = "f" * 32
    assert task.values == {"token": token}
    assert task.params["env"] == ["A=2", f"T={token}", "B=3"]  # merged by name, the task wins
    assert task.params["secrets"] == [f"S={token}"]
    assert task.params["ports"] == ["8888", "9000"]  # each once
    assert task.params["args"] == ["--other"]  # replaced
    assert task.params["gpu"] == "H100:1" and task.params["image"] == "img"
    assert task.description == "web" and task.template == "web.toml"
    endpoints = published(["127.0.0.1:32001 -> 8888/tcp", "127.0.0.1:32002 -> 9000/tcp",
                           "127.0.0.1:32003 -> 53/udp"])
    assert endpoints == {8888: "127.0.0.1:32001", 9000: "127.0.0.1:32002"}
    assert (fill(task.url["pattern"], task.values, endpoints, 8888)
            == f"http://127.0.0.1:32001/?token={token}&x={{y}}")
    assert fill(task.show["admin"], task.values, endpoints) == "http://127.0.0.1:32002/admin"
    with pytest.raises(KeyError):
        fill("{endpoint:7000}", {}, endpoints)


def test_each_render_draws_a_fresh_token() -> None:
    base = parse_task(TEMPLATE, "web.toml")
    a, b = render(base), render(base)
    assert len(a.values["token"]) == 32 and a.values["token"] != b.values["token"]


class _Http:
    def __init__(self, answers) -> None:
        self.answers = list(answers)
        self.urls: list[str] = []

    def request(self, method, url, deadline=None):
        from gpu_market.net import Unreachable

        self.urls.append(url)
        answer = self.answers.pop(0) if self.answers else 503
        if answer is None:
            raise Unreachable(f"{url}: connection refused")
        return SimpleNamespace(status=answer)


def test_wait_healthy_polls_until_2xx_or_3xx_within_the_time() -> None:
    http = _Http([None, 503, 302])
    assert wait_healthy("http://h:1/api", 30, sleep=lambda s: None, client=http) == (True, "")
    assert len(http.urls) == 3
    ok, last = wait_healthy("http://h:1/api", 0.05, sleep=lambda s: None, client=_Http([]))
    assert not ok and last == "HTTP 503"
