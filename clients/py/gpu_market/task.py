"""Task files and templates for ``gpum run``: a file (TOML or JSON, YAML when PyYAML is
installed) -> the run's parameters, as the flags would give them. Pure: no chain, no network.

A task file (``gpum run -f task.toml``), in the spirit of SkyPilot's YAML::

    name = "train"                    # --name
    image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
    command = ["python", "-u"]        # --cmd (a list, or one word)
    args = ["train.py", "--epochs", "3"]
    # run = "pip install x && python train.py"   # instead of command/args: /bin/sh -c RUN
    env = { HF_HOME = "/scratch/hf" }
    secrets = ["HF_TOKEN"]            # from your environment; or { HF_TOKEN = "hf_..." }
    ports = [8888, "5000/udp"]
    shm_size = 1024                   # MiB
    scratch = 20480                   # MiB
    finish_on_exit = true
    timeout = "15m"                   # durations as the flags take them
    [resources]
    gpu = "H100:4"
    hours = "2h"                      # or 2, 0.5, "90m"
    max_price = "2.5"                 # per GPU-hour
    provider = "PROVIDER_ADDRESS"

plus ``committee``, ``quorum``, ``job_id``, ``dry_run`` and ``template`` (a template the file
builds on). ``nodes`` may only be 1 and ``checkpointing`` is refused: a workload runs one
container on one provider and has no checkpoint storage. Unknown keys are an error naming the
known ones.

A template is a task file with a ``description`` and what ``gpum run`` prints: ``[generate]``
(random values, e.g. ``token = "hex:24"``, usable as ``{token}`` in env, secrets, command, args
and the patterns below), ``[url]`` (``port``: the container port whose published ``host:port``
fills ``{host}`` and ``{port}``; ``pattern``), ``[show]`` (more ``name = "pattern"`` lines;
``{endpoint:PORT}`` is the published ``host:port`` of container port PORT) and ``[health]``
(``path``, ``port``, ``timeout``: what ``gpum run`` polls until it answers 2xx/3xx). Templates
ship in ``gpu_market/templates/``; files in ``$XDG_CONFIG_HOME/gpum/templates/`` (default
``~/.config/gpum/templates/``) add to and override them by name (:mod:`gpu_market.templates`).

Layering (:func:`merge`): template < task file < command-line flags. Scalars and ``command``/
``args`` are replaced; ``env`` and ``secrets`` merge by name (the later wins); ``ports`` add up.
"""

from __future__ import annotations

import json
import os
import re
import secrets as _secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .units import DurationError, parse_duration
from .workload import WorkloadSpecError, parse_env_arg, parse_port_arg

__all__ = ["PARAM_KEYS", "Task", "TaskError", "fill", "load_task", "merge", "merge_pairs",
           "merge_ports", "parse_task", "published", "read_file", "render", "wait_healthy"]

MAX_FILE_BYTES = 256 * 1024

PARAM_KEYS: dict[str, str] = {
    "gpu": "resources.gpu", "hours": "resources.hours", "max_price": "resources.max_price",
    "provider": "resources.provider", "image": "image", "command": "command", "args": "args",
    "env": "env", "secrets": "secrets", "ports": "ports", "shm_size": "shm_size",
    "scratch": "scratch", "finish_on_exit": "finish_on_exit", "committee": "committee",
    "quorum": "quorum", "job_id": "job_id", "timeout": "timeout", "dry_run": "dry_run",
    "name": "name",
}
"""Each run parameter a file can set -> where it sits in the file (``resources.gpu``)."""

_RESOURCES = ("gpu", "hours", "max_price", "provider")
_TEMPLATE_KEYS = ("description", "template", "run", "nodes", "checkpointing", "generate", "url",
                  "show", "health")
TOP_KEYS = tuple(sorted({k for k in PARAM_KEYS if k not in _RESOURCES} | {"resources"}
                        | set(_TEMPLATE_KEYS)))
_URL_KEYS = ("port", "pattern")
_HEALTH_KEYS = ("path", "port", "timeout")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)(?::([0-9]{1,5}))?\}")
_GENERATE = re.compile(r"(hex|urlsafe):([0-9]{1,3})")
_ENDPOINT_NAMES = ("host", "port", "endpoint")


class TaskError(ValueError):
    """A task file or template is not acceptable; the message names the file and the key."""


@dataclass(frozen=True)
class Task:
    """A task file or template, checked: ``params`` maps :data:`PARAM_KEYS` names to values in
    the form the flags take (``"H100:4"``, ``"2h"``, ``["K=V"]``, the ``--cmd`` JSON list)."""

    source: str
    params: dict[str, Any] = field(default_factory=dict)
    description: str | None = None
    template: str | None = None
    generate: dict[str, str] = field(default_factory=dict)
    url: dict[str, Any] = field(default_factory=dict)
    show: dict[str, str] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)
    """The generated values (after :func:`render`)."""


# ----------------------------------------------------------------------------- reading


def read_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The table in a ``.toml``, ``.json`` or ``.yaml``/``.yml`` file (by its suffix; YAML only
    when PyYAML is installed). TaskError naming the file on any problem."""
    p = Path(path).expanduser()
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise TaskError(f"cannot read {p}: {e.strerror or e}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise TaskError(f"{p} is over {MAX_FILE_BYTES // 1024} KiB; a task file is small")
    suffix = p.suffix.lower()
    try:
        text = raw.decode("utf-8")
        if suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        elif suffix in (".yaml", ".yml"):
            try:
                import yaml  # type: ignore[import-untyped]
            except ImportError:
                raise TaskError(f"{p}: reading YAML needs PyYAML (`pip install pyyaml`); or "
                                "write the same keys as TOML (.toml) or JSON (.json)") from None
            data = yaml.safe_load(text)
        else:
            raise TaskError(f"{p}: a task file ends in .toml, .json, .yaml or .yml")
    except TaskError:
        raise
    except Exception as e:  # noqa: BLE001 - each parser has its own error type
        raise TaskError(f"{p} is not valid {suffix[1:].upper()}: {e}") from None
    if not isinstance(data, dict):
        raise TaskError(f"{p}: the file must hold a table of keys, not {type(data).__name__}")
    return data


def load_task(path: str | os.PathLike[str]) -> Task:
    """:func:`parse_task` of the file at ``path``."""
    return parse_task(read_file(path), str(path))


# ----------------------------------------------------------------------------- checking


def _type_name(value: object) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)


def _unknown(where: str, key: str, known: tuple[str, ...], source: str) -> TaskError:
    hint = ""
    if where == "" and key in _RESOURCES:
        hint = f" (did you mean resources.{key}?)"
    if where == "resources" and key in PARAM_KEYS and key not in _RESOURCES:
        hint = f" (did you mean the top-level key {key}?)"
    at = f"{where}.{key}" if where else key
    return TaskError(f"{source}: unknown key {at!r}{hint}; known keys"
                     f"{' in ' + where if where else ''}: {', '.join(known)}")


def _table(value: object, key: str, known: tuple[str, ...] | None, source: str) -> dict[str, Any]:
    """``value``, a table whose keys are all ``known`` (any key when None)."""
    if not isinstance(value, dict):
        raise TaskError(f"{source}: {key} must be a table, got {_type_name(value)}")
    for k in value:
        if known is not None and k not in known:
            raise _unknown(key, str(k), known, source)
    return value


def _str(value: object, key: str, source: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TaskError(f"{source}: {key} must be a string, got {_type_name(value)}")
    return str(value)


def _int(value: object, key: str, source: str, lo: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise TaskError(f"{source}: {key} must be a whole number >= {lo}, got {value!r}")
    return value


def _bool(value: object, key: str, source: str) -> bool:
    if not isinstance(value, bool):
        raise TaskError(f"{source}: {key} must be true or false, got {value!r}")
    return value


def _duration(value: object, key: str, source: str, unit: str) -> str:
    text = _str(value, key, source)
    try:
        if parse_duration(text, unit) <= 0:
            raise DurationError(f"{text!r} must be positive")
    except DurationError as e:
        raise TaskError(f"{source}: {key}: {e}") from None
    return text


def _str_list(value: object, key: str, source: str) -> list[str]:
    if not isinstance(value, list):
        raise TaskError(f"{source}: {key} must be a list of strings, got {_type_name(value)}")
    return [_str(v, f"{key}[{i}]", source) for i, v in enumerate(value)]


def _pairs(value: object, key: str, source: str, from_environ: bool) -> list[str]:
    """``{K = "V"}`` (or, for secrets, a list of names read from the environment) -> K=V."""
    if from_environ and isinstance(value, list):
        out = []
        for name in _str_list(value, key, source):
            if name not in os.environ:
                raise TaskError(f"{source}: {key} names {name}, which is not set in your "
                                f"environment: export {name}=... or give {key} as a table")
            out.append(f"{name}={os.environ[name]}")
    elif isinstance(value, dict):
        out = [f"{k}={_str(v, f'{key}.{k}', source)}" for k, v in value.items()]
    else:
        what = "a table of NAME = value" + (" or a list of names" if from_environ else "")
        raise TaskError(f"{source}: {key} must be {what}, got {_type_name(value)}")
    for text in out:
        try:
            parse_env_arg(text)
        except WorkloadSpecError as e:
            raise TaskError(f"{source}: {key}: {e}") from None
    return out


def _ports(value: object, source: str) -> list[str]:
    if not isinstance(value, list):
        raise TaskError(f"{source}: ports must be a list (e.g. [8888, \"5000/udp\"]), got "
                        f"{_type_name(value)}")
    out = []
    for i, v in enumerate(value):
        text = str(_int(v, f"ports[{i}]", source, 1) if isinstance(v, int) else
                   _str(v, f"ports[{i}]", source))
        try:
            parse_port_arg(text)
        except WorkloadSpecError as e:
            raise TaskError(f"{source}: ports[{i}]: {e}") from None
        out.append(text)
    return out


def _command(value: object, source: str) -> str:
    if isinstance(value, str):
        if not value.strip() or any(c.isspace() for c in value):
            raise TaskError(f"{source}: command {value!r} is not one word: give a list, e.g. "
                            "[\"python\", \"train.py\"], or run = \"...\" for a shell line")
        return json.dumps([value])
    return json.dumps(_str_list(value, "command", source))


def _check_patterns(task: Task) -> None:
    """Every ``{name}`` is a generated value (or, in url/show, host/port/endpoint:PORT)."""

    def check(text: str, key: str, endpoint_ok: bool) -> None:
        for m in _PLACEHOLDER.finditer(text):
            name = m.group(1)
            if name is None or name in task.generate:
                continue
            if endpoint_ok and name in _ENDPOINT_NAMES and (m.group(2) is None) == (name != "endpoint"):
                continue
            known = sorted(task.generate) + (["host", "port", "endpoint:PORT"] if endpoint_ok else [])
            raise TaskError(f"{task.source}: {key}: unknown placeholder {m.group(0)}; known: "
                            f"{', '.join(known) or 'none (add a [generate] table)'} ({{{{ and "
                            "}} are literal braces)")

    for key in ("env", "secrets", "args"):
        for i, text in enumerate(task.params.get(key, ())):
            check(text, f"{key}[{i}]", False)
    if "command" in task.params:
        check(task.params["command"], "command", False)
    for key, text in [("url.pattern", task.url.get("pattern", ""))] + [
            (f"show.{k}", v) for k, v in task.show.items()]:
        check(text, key, True)


def parse_task(data: Mapping[str, Any], source: str = "task") -> Task:
    """Check a task file's table (:func:`read_file`) -> :class:`Task`. TaskError names the
    file, the key and what is allowed (unknown keys name the known ones)."""
    for k in data:
        if k not in TOP_KEYS:
            raise _unknown("", str(k), TOP_KEYS, source)
    params: dict[str, Any] = {}
    res = _table(data.get("resources", {}), "resources", _RESOURCES, source)
    if "gpu" in res:
        params["gpu"] = _str(res["gpu"], "resources.gpu", source)
    if "hours" in res:
        params["hours"] = _duration(res["hours"], "resources.hours", source, "h")
    if "max_price" in res:
        params["max_price"] = _str(res["max_price"], "resources.max_price", source)
    if "provider" in res:
        params["provider"] = _str(res["provider"], "resources.provider", source)
    nodes = data.get("nodes", 1)
    if _int(nodes, "nodes", source, 1) != 1:
        raise TaskError(f"{source}: nodes = {nodes}: a job runs on one provider's machine; "
                        "multi-node tasks are not supported yet (ask for more GPUs on one node "
                        "with resources.gpu = \"MODEL:COUNT\")")
    if "checkpointing" in data:
        raise TaskError(f"{source}: checkpointing is not supported: a workload has no "
                        "checkpoint storage that outlives its job; save checkpoints from your "
                        "container to storage you own (and remove the key)")
    for key in ("image", "name", "committee"):
        if key in data:
            params[key] = _str(data[key], key, source)
    if "run" in data:
        if "command" in data or "args" in data:
            raise TaskError(f"{source}: give either run (a shell line) or command/args, not both")
        params["command"] = json.dumps(["/bin/sh", "-c"])
        params["args"] = [_str(data["run"], "run", source)]
    if "command" in data:
        params["command"] = _command(data["command"], source)
    if "args" in data:
        params["args"] = _str_list(data["args"], "args", source)
    if "env" in data:
        params["env"] = _pairs(data["env"], "env", source, False)
    if "secrets" in data:
        params["secrets"] = _pairs(data["secrets"], "secrets", source, True)
    if "ports" in data:
        params["ports"] = _ports(data["ports"], source)
    for key in ("shm_size", "scratch", "quorum"):
        if key in data:
            params[key] = _int(data[key], key, source, 1)
    if "job_id" in data:
        params["job_id"] = _int(data["job_id"], "job_id", source)
    for key in ("finish_on_exit", "dry_run"):
        if key in data:
            params[key] = _bool(data[key], key, source)
    if "timeout" in data:
        params["timeout"] = _duration(data["timeout"], "timeout", source, "s")
    generate = {}
    for k, v in _table(data.get("generate", {}), "generate", None, source).items():
        text = _str(v, f"generate.{k}", source)
        m = _GENERATE.fullmatch(text)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(k)) or str(k) in _ENDPOINT_NAMES:
            raise TaskError(f"{source}: generate.{k}: a name is letters, digits and _, not "
                            "host, port or endpoint")
        if m is None or not 8 <= int(m.group(2)) <= 128:
            raise TaskError(f"{source}: generate.{k} = {text!r}: write \"hex:N\" or "
                            "\"urlsafe:N\" (N random bytes, 8..128)")
        generate[str(k)] = text
    url = dict(_table(data.get("url", {}), "url", _URL_KEYS, source))
    if url:
        if "pattern" not in url or "port" not in url:
            raise TaskError(f"{source}: url needs both port (the container port) and pattern "
                            "(e.g. \"http://{host}:{port}/\")")
        url["port"] = _int(url["port"], "url.port", source, 1)
        url["pattern"] = _str(url["pattern"], "url.pattern", source)
    show = {str(k): _str(v, f"show.{k}", source)
            for k, v in _table(data.get("show", {}), "show", None, source).items()}
    health = dict(_table(data.get("health", {}), "health", _HEALTH_KEYS, source))
    if health:
        health["path"] = _str(health.get("path", "/"), "health.path", source)
        if not health["path"].startswith("/"):
            raise TaskError(f"{source}: health.path must start with /, got {health['path']!r}")
        if "port" in health:
            health["port"] = _int(health["port"], "health.port", source, 1)
        elif url:
            health["port"] = url["port"]
        else:
            raise TaskError(f"{source}: health needs port (or a url table naming one)")
        health["timeout"] = _duration(health.get("timeout", "5m"), "health.timeout", source, "s")
    description = data.get("description")
    template = data.get("template")
    task = Task(source=source, params=params,
                description=None if description is None else _str(description, "description", source),
                template=None if template is None else _str(template, "template", source),
                generate=generate, url=url, show=show, health=health)  # fmt: skip
    _check_patterns(task)
    return task


# ----------------------------------------------------------------------------- layering


def _key(pair: str) -> str:
    return pair.partition("=")[0]


def merge_pairs(base: list[str] | tuple[str, ...], over: list[str] | tuple[str, ...]) -> list[str]:
    """``K=V`` lists merged by name; ``over`` wins."""
    out = {_key(p): p for p in base}
    out.update({_key(p): p for p in over})
    return list(out.values())


def merge_ports(base: list[str] | tuple[str, ...], over: list[str] | tuple[str, ...]) -> list[str]:
    """Both lists' ports, each once."""
    seen, out = set(), []
    for text in [*base, *over]:
        port = parse_port_arg(text)
        if (port.port, port.protocol) not in seen:
            seen.add((port.port, port.protocol))
            out.append(text)
    return out


def merge(base: Task, over: Task) -> Task:
    """``over`` (a task file) on top of ``base`` (its template): see the module docstring."""
    params = {**base.params, **over.params}
    for key in ("env", "secrets"):
        if key in base.params and key in over.params:
            params[key] = merge_pairs(base.params[key], over.params[key])
    if "ports" in base.params and "ports" in over.params:
        params["ports"] = merge_ports(base.params["ports"], over.params["ports"])
    return Task(source=over.source, params=params,
                description=over.description or base.description, template=base.source,
                generate={**base.generate, **over.generate}, url=over.url or base.url,
                show={**base.show, **over.show}, health=over.health or base.health)  # fmt: skip


def fill(text: str, values: Mapping[str, str], endpoints: Mapping[int, str] | None = None,
         port: int | None = None) -> str:
    """``text`` with ``{name}`` from ``values`` and, given ``endpoints`` (container port ->
    published ``host:port``), ``{host}``/``{port}`` of ``port`` and ``{endpoint:PORT}``;
    ``{{``/``}}`` are literal braces. KeyError names a placeholder with no value."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) in ("{{", "}}"):
            return m.group(0)[0]
        name, arg = m.group(1), m.group(2)
        if name in values:
            return values[name]
        if endpoints is not None and name in _ENDPOINT_NAMES:
            hostport = endpoints[int(arg) if arg else port]  # type: ignore[index]
            host, _, published = hostport.rpartition(":")
            return {"host": host, "port": published}.get(name, hostport)
        raise KeyError(m.group(0))

    return _PLACEHOLDER.sub(one, text)


def render(task: Task, token: Any = _secrets) -> Task:
    """``task`` with fresh ``[generate]`` values (from ``token``, the ``secrets`` module by
    default) filled into env, secrets, command and args."""
    values = {}
    for name, how in task.generate.items():
        kind, n = _GENERATE.fullmatch(how).groups()  # type: ignore[union-attr]
        values[name] = token.token_hex(int(n)) if kind == "hex" else token.token_urlsafe(int(n))
    params = dict(task.params)
    for key in ("env", "secrets", "args"):
        if key in params:
            params[key] = [fill(t, values) for t in params[key]]
    if "command" in params:
        params["command"] = json.dumps([fill(t, values) for t in json.loads(params["command"])])
    return replace(task, params=params, values=values)


def published(mappings: list[str] | tuple[str, ...]) -> dict[int, str]:
    """``gpum run``'s ``ports`` lines (``"host:port -> 8888/tcp"``) -> {8888: "host:port"}
    (TCP only)."""
    out = {}
    for line in mappings:
        hostport, _, target = str(line).partition(" -> ")
        port, _, proto = target.partition("/")
        if port.isdigit() and proto in ("tcp", ""):
            out[int(port)] = hostport.strip()
    return out


def wait_healthy(url: str, seconds: float, *, sleep: Any = None, client: Any = None) -> tuple[bool, str]:
    """Poll ``GET url`` until it answers 2xx/3xx, within ``seconds`` in all: ``(True, "")``,
    or ``(False, the last failure)``."""
    import time

    from .net import BoundedClient, NetError

    sleep = sleep or time.sleep
    end = time.monotonic() + seconds
    last = "no answer yet"
    http = client or BoundedClient(deadline=5.0, max_bytes=64 * 1024)
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return False, last
            try:
                r = http.request("GET", url, deadline=min(5.0, left))
                if 200 <= r.status < 400:
                    return True, ""
                last = f"HTTP {r.status}"
            except NetError as e:
                last = str(e)
            sleep(max(0.0, min(1.0, end - time.monotonic())))
    finally:
        if client is None:
            http.close()
