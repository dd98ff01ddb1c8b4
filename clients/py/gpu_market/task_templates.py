"""Where ``gpum run --template NAME`` finds its templates (the format is in
:mod:`gpu_market.task`): the files shipped in ``gpu_market/templates/``, overridden and added to
by the user's ``$XDG_CONFIG_HOME/gpum/templates/`` (default ``~/.config/gpum/templates/``);
``--template ./file.toml`` (anything with a ``/`` or a task-file suffix) is a path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .task import Task, TaskError, load_task

__all__ = ["BUILTIN_DIR", "TemplateInfo", "find_template", "list_templates", "load_template",
           "user_dir"]

BUILTIN_DIR = Path(__file__).parent / "templates"
SUFFIXES = (".toml", ".json", ".yaml", ".yml")


@dataclass(frozen=True)
class TemplateInfo:
    name: str
    description: str
    path: Path
    builtin: bool


def user_dir() -> Path:
    """``$XDG_CONFIG_HOME/gpum/templates`` (default ``~/.config/gpum/templates``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "gpum" / "templates"


def _files(directory: Path) -> dict[str, Path]:
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return {}
    return {p.stem: p for p in entries if p.suffix.lower() in SUFFIXES and p.is_file()}


def _all() -> dict[str, tuple[Path, bool]]:
    found = {name: (p, True) for name, p in _files(BUILTIN_DIR).items()}
    found.update({name: (p, False) for name, p in _files(user_dir()).items()})
    return dict(sorted(found.items()))


def list_templates() -> list[TemplateInfo]:
    """Every template by name (a user's file hides a built-in one of the same name); one that
    does not load shows its error as the description."""
    out = []
    for name, (path, builtin) in _all().items():
        try:
            description = load_task(path).description or "(no description)"
        except TaskError as e:
            description = f"(broken: {e})"
        out.append(TemplateInfo(name, description, path, builtin))
    return out


def _is_path(ref: str) -> bool:
    return "/" in ref or os.sep in ref or ref.lower().endswith(SUFFIXES)


def find_template(ref: str) -> Path:
    """The file of template ``ref`` (a name or a path); TaskError naming the known ones."""
    if _is_path(ref):
        path = Path(ref).expanduser()
        if not path.is_file():
            raise TaskError(f"template file {path} does not exist")
        return path
    found = _all().get(ref)
    if found is None:
        names = ", ".join(_all()) or "none"
        raise TaskError(f"no template named {ref!r}; known: {names} (add your own as "
                        f"{user_dir()}/{ref}.toml, or pass a path)")
    return found[0]


def load_template(ref: str) -> Task:
    """Template ``ref``, checked (:func:`gpu_market.task.parse_task`)."""
    return load_task(find_template(ref))
