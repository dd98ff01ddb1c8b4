"""The shape of the tree a newcomer relies on: no import circle in any Python package or Rust
crate, and no Python module outside tests over ``MAX_MODULE_LINES``.

Python: every import of the three packages (SDK ``gpu_market``, ``gpum_worker``,
``gpum_validator``), relative or absolute, ``TYPE_CHECKING`` ones included, is an edge between
modules; importing ``a.b`` runs ``a/__init__`` first, so it is an edge to both, except from
inside ``a`` (whose ``__init__`` is already running). Rust: in each crate, a file that names
``crate::x::...`` or ``super::...`` depends on the file that defines the longest module prefix
of that path; a module's edges to its own submodules (``mod``/``pub use`` re-exports) are its
structure, not dependencies, and unit-test modules (after ``#[cfg(test)]``) are left out.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON_PACKAGES = {
    "gpu_market": ROOT / "clients/py/gpu_market",
    "gpum_worker": ROOT / "worker/gpum_worker",
    "gpum_validator": ROOT / "validator/gpum_validator",
}
RUST_CRATES = [
    ROOT / "programs/gpu_market/src",
    ROOT / "localnet/src",
    ROOT / "validator/fastpath/src",
    ROOT / "idl/generator/src",
]
MAX_MODULE_LINES = 900


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node, or with a self edge (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def python_modules() -> dict[str, Path]:
    modules = {}
    for package, folder in PYTHON_PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            modules[".".join((package, *parts))] = path
    return modules


def python_import_graph() -> dict[str, set[str]]:
    modules = python_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: list[list[str]] = []
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets += [alias.name.split(".") for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - (node.level - 1)] if node.level else []
                target = [*base, *(node.module.split(".") if node.module else [])]
                targets.append(target)
                targets += [[*target, alias.name] for alias in node.names]
        edges = set()
        for target in targets:
            for i in range(1, len(target) + 1):
                prefix = ".".join(target[:i])
                if prefix in modules and prefix != name and not name.startswith(prefix + "."):
                    edges.add(prefix)
        graph[name] = edges
    return graph


def _rust_module_of(target: list[str], files: dict[str, Path]) -> str:
    """The module that defines the longest prefix of a path (the crate root at worst)."""
    for i in range(len(target), -1, -1):
        candidate = "::".join(target[:i])
        if candidate in files:
            return candidate
    return ""


def _rust_path(here: list[str], head: str, segments: list[str]) -> list[str]:
    """``crate::a::b`` or ``super::...::a::b`` named from module ``here``, as a path from the root."""
    if head == "crate":
        return segments
    base = here[:-1]  # `super` of module a::b is a
    while segments and segments[0] == "super":
        base, segments = base[:-1], segments[1:]
    return [*base, *segments]


def rust_module_graph(src: Path) -> dict[str, set[str]]:
    """Module path (``a::b``, ``""`` for the crate root) -> the modules it depends on."""
    files: dict[str, Path] = {}
    for path in src.rglob("*.rs"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts in (["lib"], ["main"]):
            parts = []
        elif parts[-1] == "mod":
            parts = parts[:-1]
        files["::".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        text = path.read_text().split("#[cfg(test)]", 1)[0]
        text = re.sub(r"//[^\n]*", "", text)
        here = module.split("::") if module else []
        edges: set[str] = set()
        for match in re.finditer(r"\b(crate|super)((?:::\w+)*)(::\{([^}]*)\})?", text):
            segments = match.group(2).strip(":").split("::") if match.group(2) else []
            items = match.group(4).split(",") if match.group(3) else [""]
            for item in items:
                tail = [part for part in item.strip().split("::") if part and part != "self"]
                target = _rust_module_of(_rust_path(here, match.group(1), [*segments, *tail]), files)
                if module and not (target == module or target.startswith(module + "::")):
                    edges.add(target)
        graph[module] = edges
    return graph


def test_no_python_import_circle():
    assert cycles(python_import_graph()) == []


def test_no_rust_module_circle():
    for src in RUST_CRATES:
        assert src.is_dir(), src
        assert cycles(rust_module_graph(src)) == [], src.relative_to(ROOT)


def test_the_checks_see_a_circle():
    """The cycle finder and the Rust reader find the circles they exist for."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_rust_reader_finds_a_sibling_circle(tmp_path):
    src = tmp_path / "src"
    (src / "state").mkdir(parents=True)
    (src / "lib.rs").write_text("pub mod ledger;\npub mod token;\npub mod state;\n")
    (src / "ledger.rs").write_text("use crate::token::parse;\n")
    (src / "token.rs").write_text("use crate::{ledger::TOKEN, state};\n")
    (src / "state" / "mod.rs").write_text("pub mod job;\npub use job::Job;\n")
    (src / "state" / "job.rs").write_text("use super::super::ledger::X;\n#[cfg(test)]\nmod t { use crate::token; }\n")
    graph = rust_module_graph(src)
    assert graph["ledger"] == {"token"}
    assert graph["token"] == {"ledger", "state"}
    assert graph["state::job"] == {"ledger"}
    assert graph[""] == set()
    assert graph["state"] == set()
    assert cycles(graph) == [["ledger", "token"]]


def test_no_python_module_over_the_size_limit():
    big = {
        str(path.relative_to(ROOT)): lines
        for path in python_modules().values()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert big == {}, f"split these along their seams (limit {MAX_MODULE_LINES} lines): {big}"
