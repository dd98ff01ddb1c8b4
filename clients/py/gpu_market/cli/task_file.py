"""``gpum run --template NAME`` and ``gpum run -f task.toml``, and ``gpum templates``.

:func:`task_options` adds ``--template`` and ``-f/--file`` to ``gpum run`` and, before the
command runs, puts the template's and the task file's values (:mod:`gpu_market.task`,
:mod:`gpu_market.task_templates`) under the flags given on the command line: a flag given (or
set through its environment variable) wins; ``--env``/``--secret`` merge by name and
``--port`` adds to the file's ports. Each value goes through the flag's own type and callback,
so a file is checked exactly as the flags are. When the template says what to print, the
command's result gains ``url`` (and the template's ``show`` lines) from the published
``host:port``, once ``[health]`` answered (or with why not, in ``health``), all within
``--timeout``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from ..task import (
    PARAM_KEYS,
    Task,
    TaskError,
    fill,
    load_task,
    merge,
    merge_pairs,
    merge_ports,
    published,
    render,
    wait_healthy,
)
from ..units import parse_duration
from .base import Env, common

__all__ = ["NOT_IN_FILE", "TASK_PARAMS", "task_options", "templates"]

TASK_PARAMS: dict[str, str] = {
    "gpu": "gpu", "hours": "hours", "max_price": "max_price", "provider": "provider_",
    "committee": "committee", "quorum": "quorum", "job_id": "job_id", "timeout": "wait_timeout",
    "dry_run": "dry_run", "name": "name", "image": "image", "command": "command",
    "args": "args", "env": "env_vars", "secrets": "secrets", "ports": "ports",
    "shm_size": "shm_size_mib", "scratch": "scratch_mib", "finish_on_exit": "finish_on_exit",
}
"""Task-file key (:data:`gpu_market.task.PARAM_KEYS`) -> ``gpum run``'s parameter name."""

NOT_IN_FILE = {
    "url": "which chain: per invocation, like the Solana CLI",
    "keypair_path": "which wallet signs: never in a file you share",
    "program_id": "which program: per invocation",
    "output": "how to print: per invocation",
    "market": "which market: --market or GPUM_MARKET",
    "template_ref": "the file's `template` key",
    "task_file": "the file itself",
    **{k: "a managed job's policy (`gpum run --managed`): per invocation" for k in (
        "managed", "max_restarts", "managed_budget", "min_score", "avoid", "regions",
        "recover_on_exit", "missed_windows", "health_grace", "start_timeout", "detach")},
    "checkpoint_store": "checkpoints: per invocation (with the keys in the environment)",
    **{f"checkpoint_{k}": "checkpoints: per invocation" for k in (
        "dir", "endpoint", "region", "interval", "max_size")},
}
"""``gpum run``'s parameters a task file does not set, and why."""

_GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT, ParameterSource.PROMPT)
_REQUIRED = (("gpu", "--gpu"), ("hours", "--hours"))


def _list_now(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """``--template list``: print the templates and exit before any other option is needed."""
    if value != "list" or ctx.resilient_parsing:
        return value
    for line in _template_lines():
        click.echo(line)
    ctx.exit(0)


def _template_lines() -> list[str]:
    from ..task_templates import list_templates, user_dir

    infos = list_templates()
    width = max((len(t.name) for t in infos), default=0)
    lines = [f"{t.name:<{width}}  {t.description}" + ("" if t.builtin else f"  ({t.path})")
             for t in infos]  # fmt: skip
    lines.append(f"(add your own as {user_dir()}/NAME.toml; `gpum run --template NAME`)")
    return lines


def resolve(template_ref: str | None, task_file: str | None) -> Task:
    """The template (named, or the file's ``template`` key) under the task file, rendered
    (fresh generated values). TaskError on any problem."""
    from ..task_templates import load_template

    task = load_task(task_file) if task_file is not None else None
    ref = template_ref or (task.template if task is not None else None)
    base = load_template(ref) if ref is not None else None
    if base is not None and task is not None:
        task = merge(base, task)
    return render(task or base)  # type: ignore[arg-type]


def _apply(ctx: click.Context, task: Task, kw: dict[str, Any]) -> None:
    """``kw`` (the run's parameters) with the file's values where no flag was given."""
    params = {p.name: p for p in ctx.command.params}
    for key, value in task.params.items():
        name = TASK_PARAMS[key]
        given = ctx.get_parameter_source(name) in _GIVEN
        if given and key in ("env", "secrets"):
            value = merge_pairs(value, kw[name])
        elif given and key == "ports":
            value = merge_ports(value, kw[name])
        elif given:
            continue
        try:
            kw[name] = params[name].process_value(ctx, value)
        except click.BadParameter as e:
            raise click.BadParameter(e.message, ctx=ctx,
                                     param_hint=f"{PARAM_KEYS[key]} of {task.source}") from None


def _add_url(env: Env, data: dict[str, Any], task: Task, deadline: float) -> dict[str, Any]:
    """The run's result with the template's ``url``, ``show`` lines and ``health``."""
    endpoints = published(data.get("ports") or ())
    out = dict(data)
    if task.url:
        port = task.url["port"]
        out["url"] = (fill(task.url["pattern"], task.values, endpoints, port) if port in endpoints
                      else f"(container port {port} is not published)")  # fmt: skip
    for key, pattern in task.show.items():
        try:
            text = fill(pattern, task.values, endpoints)
        except KeyError as e:
            text = f"(container port {e.args[0]} is not published)"
        out[key if key not in out else f"template_{key}"] = text
    health = task.health
    if health and data.get("state") == "running" and health["port"] in endpoints:
        url = f"http://{endpoints[health['port']]}{health['path']}"
        seconds = max(2.0, min(float(parse_duration(health["timeout"], "s")),
                               deadline - time.monotonic()))
        if env.output == "text":
            click.echo(f"waiting for {url} to answer (up to {seconds:.0f} s)", err=True)
        started = time.monotonic()
        ok, last = wait_healthy(url, seconds)
        out["health"] = (f"ok in {time.monotonic() - started:.0f} s" if ok else
                         f"not answering after {seconds:.0f} s ({last}); the job is running: "
                         f"`gpum job logs {data.get('job')}` shows why")  # fmt: skip
    return out


def task_options(f: Callable) -> Callable:
    """``--template`` and ``-f/--file`` for ``gpum run`` (above its workload options, which
    must see the merged values): see the module docstring."""

    @click.option("--template", "template_ref", default=None, metavar="NAME|FILE",
                  is_eager=True, callback=_list_now,
                  help="Fill image, ports, command, env and the printed URL from a template "
                       "(jupyter, vllm, comfyui, ray, your own in ~/.config/gpum/templates, or "
                       "a file path); flags you give win. `--template list` lists them.")
    @click.option("-f", "--file", "task_file", default=None, metavar="FILE",
                  type=click.Path(dir_okay=False),
                  help="Task file (.toml or .json; .yaml with PyYAML): resources, image, "
                       "command, env, secrets, ports...; flags you give win.")
    @functools.wraps(f)
    def wrapper(env: Env, *a: Any, template_ref: str | None = None,
                task_file: str | None = None, **kw: Any) -> Any:  # fmt: skip
        ctx = click.get_current_context()
        task = None
        if template_ref is not None or task_file is not None:
            try:
                task = resolve(template_ref, task_file)
            except TaskError as e:
                raise click.UsageError(str(e)) from None
            _apply(ctx, task, kw)
        for name, flag in _REQUIRED:
            if kw.get(name) is None:
                raise click.UsageError(f"Missing option '{flag}' (or resources.{name} in a "
                                       "task file)")  # fmt: skip
        if task is not None and (task.url or task.show or task.health):
            deadline = time.monotonic() + float(kw.get("wait_timeout") or 0)
            emit = env.emit

            def emit_with_url(data: dict[str, Any], text_lines: list[str] | None = None) -> None:
                if "ports" in data and not data.get("dry_run"):
                    data = _add_url(env, data, task, deadline)
                    text_lines = None
                emit(data, text_lines)

            env.emit = emit_with_url  # type: ignore[method-assign]
        return f(env, *a, **kw)

    return wrapper


@click.command("templates")
@common
def templates(env: Env) -> None:
    """List the templates of `gpum run --template` (built in, and yours in
    ~/.config/gpum/templates), one line each."""
    from ..task_templates import list_templates

    infos = list_templates()
    data = {"templates": [{"name": t.name, "description": t.description, "path": str(t.path),
                           "builtin": t.builtin} for t in infos]}  # fmt: skip
    env.emit(data, _template_lines())
