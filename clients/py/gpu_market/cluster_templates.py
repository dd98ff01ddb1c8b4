"""Cluster templates (``gpum cluster create --template NAME``): what each node of a cluster runs,
by rank, built on the environment contract (:data:`gpu_market.cluster_spec.CONTRACT_ENV`).

The files ship in ``gpu_market/templates/cluster/`` (``ray``, ``torchrun``); files in
``$XDG_CONFIG_HOME/gpum/templates/cluster/`` add to and override them by name; a reference with
a ``/`` or a ``.toml`` suffix is a path. A template is TOML::

    description = "..."
    image = "..."                       the default image (--image wins)
    ports = [8265]                      published on node 0 only (the cluster's endpoint)
    shm_size = 8192                     MiB, the default of --shm-size
    finish_on_exit = true               a node's job finishes when its container exits
    default_command = ["sleep", "infinity"]   when you give no command (absent: one is required)
    shared_secret = "RAY_AUTH_TOKEN"    a secret variable every node gets, one random value
                                        (64 hex digits) per cluster (--secret NAME=... wins)
    run = '''...'''                     the shell line every node runs, or:
    head = '''...'''                    node 0's line, and
    worker = '''...'''                  every other node's line

A line runs as ``/bin/sh -c LINE`` with ``{command}`` replaced by your command, each word
shell-quoted (so ``$VAR`` in the line is the node's environment, and your words are passed as
they are). Pure but for reading the files.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .task import TaskError, read_file
from .task_templates import BUILTIN_DIR as _TEMPLATES
from .task_templates import user_dir as _user_templates

__all__ = ["BUILTIN_DIR", "ClusterTemplate", "TemplateError", "find_cluster_template",
           "list_cluster_templates", "load_cluster_template", "node_command"]  # fmt: skip

BUILTIN_DIR = _TEMPLATES / "cluster"
PLACEHOLDER = "{command}"
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYS = ("description", "image", "ports", "shm_size", "finish_on_exit", "default_command",
         "shared_secret", "run", "head", "worker")


class TemplateError(ValueError):
    """A cluster template that cannot be found or used; the message says which and why."""


@dataclass(frozen=True)
class ClusterTemplate:
    name: str
    description: str
    image: str | None
    ports: tuple[str, ...]
    shm_size: int | None
    finish_on_exit: bool | None
    default_command: tuple[str, ...] | None
    head: str
    worker: str
    shared_secret: str | None = None
    """The secret variable every node gets with one random value per cluster, or None."""

    def command(self, rank: int, user_command: Sequence[str]) -> tuple[str, ...]:
        """The container command of node ``rank`` running ``user_command`` (the template's
        ``default_command`` when empty); TemplateError when the template needs one."""
        words = tuple(user_command) or self.default_command
        if words is None:
            raise TemplateError(f"the {self.name} template runs your command on every node: "
                                "give it after --, e.g. `gpum cluster create ... --template "
                                f"{self.name} -- train.py --epochs 3`")  # fmt: skip
        line = self.head if rank == 0 else self.worker
        return ("/bin/sh", "-c", line.replace(PLACEHOLDER, shlex.join(words)))


def user_dir() -> Path:
    return _user_templates() / "cluster"


def _files(directory: Path) -> dict[str, Path]:
    try:
        return {p.stem: p for p in sorted(directory.iterdir())
                if p.suffix.lower() == ".toml" and p.is_file()}  # fmt: skip
    except OSError:
        return {}


def find_cluster_template(ref: str) -> Path:
    """The file of template ``ref`` (a name or a path); TemplateError naming the known ones."""
    if "/" in ref or os.sep in ref or ref.lower().endswith(".toml"):
        path = Path(ref).expanduser()
        if not path.is_file():
            raise TemplateError(f"cluster template file {path} does not exist")
        return path
    known = {**_files(BUILTIN_DIR), **_files(user_dir())}
    if ref not in known:
        raise TemplateError(f"no cluster template named {ref!r}; known: "
                            f"{', '.join(sorted(known)) or 'none'} (add your own as "
                            f"{user_dir()}/{ref}.toml, or pass a path)")  # fmt: skip
    return known[ref]


def _parse(data: dict, name: str, source: str) -> ClusterTemplate:
    for k in data:
        if k not in _KEYS:
            raise TemplateError(f"{source}: unknown key {k!r}; known keys: {', '.join(_KEYS)}")

    def text(key: str) -> str | None:
        v = data.get(key)
        if v is not None and not (isinstance(v, str) and v.strip()):
            raise TemplateError(f"{source}: {key} must be a non-empty string")
        return v

    run, head, worker = text("run"), text("head"), text("worker")
    shared = text("shared_secret")
    if shared is not None and not _NAME_RE.fullmatch(shared):
        raise TemplateError(f"{source}: shared_secret must be a variable name, e.g. "
                            "\"RAY_AUTH_TOKEN\"")
    if run is not None and (head is not None or worker is not None):
        raise TemplateError(f"{source}: give either run (every node) or head and worker")
    if run is None and (head is None or worker is None):
        raise TemplateError(f"{source}: give run (every node's line), or both head and worker")
    ports = data.get("ports", [])
    if not isinstance(ports, list) or not all(isinstance(p, int | str) and not isinstance(p, bool)
                                              for p in ports):
        raise TemplateError(f"{source}: ports must be a list of ports, e.g. [8265]")
    shm = data.get("shm_size")
    if shm is not None and (isinstance(shm, bool) or not isinstance(shm, int) or shm < 1):
        raise TemplateError(f"{source}: shm_size must be a whole number of MiB >= 1")
    finish = data.get("finish_on_exit")
    if finish is not None and not isinstance(finish, bool):
        raise TemplateError(f"{source}: finish_on_exit must be true or false")
    default = data.get("default_command")
    if default is not None and not (isinstance(default, list) and default
                                    and all(isinstance(w, str) for w in default)):
        raise TemplateError(f"{source}: default_command must be a non-empty list of strings")
    return ClusterTemplate(name=name, description=text("description") or "(no description)",
                           image=text("image"), ports=tuple(str(p) for p in ports),
                           shm_size=shm, finish_on_exit=finish,
                           default_command=None if default is None else tuple(default),
                           head=head or run, worker=worker or run,  # type: ignore[arg-type]
                           shared_secret=shared)


def load_cluster_template(ref: str) -> ClusterTemplate:
    """Template ``ref`` (a name or a path), checked; TemplateError otherwise."""
    path = find_cluster_template(ref)
    try:
        data = read_file(path)
    except TaskError as e:
        raise TemplateError(str(e)) from None
    return _parse(data, path.stem, str(path))


def list_cluster_templates() -> list[ClusterTemplate]:
    """Every template that loads, by name (a user's file hides a built-in one)."""
    out = []
    for name in sorted({**_files(BUILTIN_DIR), **_files(user_dir())}):
        try:
            out.append(load_cluster_template(name))
        except TemplateError:
            continue
    return out


def node_command(template: ClusterTemplate | None, rank: int,
                 user_command: Sequence[str]) -> tuple[str, ...]:  # fmt: skip
    """Node ``rank``'s container command: the template's line for it, or without a template
    ``user_command`` itself (empty: the image's own)."""
    if template is None:
        return tuple(user_command)
    return template.command(rank, user_command)
