"""The repository's Python stays layered (issue 32): no import circle among the program's and the
test machinery's modules, the program never imports the test machinery, and each e2e package
imports only from the packages below it (e2e/__init__.py): the engine, then the stand-ins (the
HTTPS server they share, then one package for each thing they stand in for, none importing
another, then the workload cluster's stand-ins, which run on the management cluster's), then the
box and its scenarios. And no e2e module grows past about 400 lines: one that
does holds more than one topic."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Each e2e module's layer, lowest first; modules of one tuple share a layer but import nothing of
# each other.
LAYERS = (
    ("e2e.engine",),
    ("e2e.standins.https_server",),
    ("e2e.standins.proxmox", "e2e.standins.guest", "e2e.standins.cluster"),
    # A workload cluster's providers and kubelets act on the management cluster, with its loop.
    ("e2e.standins.workload",),
    ("e2e.box",),
)
LONGEST_MODULE_LINES = 420


def _modules() -> dict[str, Path]:
    """Every module of components/ and e2e/ by its dotted name (a package by its own)."""
    found = {}
    for root in ("components", "e2e"):
        for path in (REPO / root).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(node: ast.AST, modules: dict[str, Path]) -> Iterator[str]:
    """The repository's modules an import statement loads: `from package import module` loads the
    module, `from module import name` the module."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if alias.name in modules)
    elif isinstance(node, ast.ImportFrom) and node.module in modules:
        for alias in node.names:
            yield submodule if (submodule := f"{node.module}.{alias.name}") in modules else node.module


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    # Every import counts, those inside functions and under TYPE_CHECKING too: a circle there is a
    # circle in the design, whether or not Python trips on it.
    return {
        name: {
            imported
            for node in ast.walk(ast.parse(path.read_text()))
            for imported in _imported(node, modules)
            if imported != name
        }
        for name, path in modules.items()
    }


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules of each import circle: every strongly connected set of more than one module
    (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            members = [stack.pop()]
            while members[-1] != module:
                members.append(stack.pop())
            if len(members) > 1:
                circles.append(sorted(members))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def _layer(module: str) -> tuple[int, str] | None:
    """The layer of an e2e module and the package it is in there, or None outside the layers."""
    for rank, packages in enumerate(LAYERS):
        for package in packages:
            if module == package or module.startswith(f"{package}."):
                return rank, package
    return None


def test_no_import_circle() -> None:
    assert _circles(_graph()) == []


def test_a_circle_is_found() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_program_never_imports_the_test_machinery() -> None:
    graph = _graph()
    imports = (f"{module} imports {imported}" for module in graph for imported in graph[module])
    assert [line for line in imports if line.startswith("components") and " imports e2e" in line] == []


def test_each_e2e_package_imports_only_from_below() -> None:
    upward = []
    for module, imports in sorted(_graph().items()):
        if (own := _layer(module)) is None:
            continue
        for imported in sorted(imports):
            other = _layer(imported)
            if other is not None and other[1] != own[1] and other[0] >= own[0]:
                upward.append(f"{module} imports {imported}")
    assert upward == []


def test_every_e2e_module_has_a_layer() -> None:
    # A package's own __init__ holds only what the package is for, and imports nothing.
    modules = [name for name, path in _modules().items() if name.startswith("e2e.") and path.name != "__init__.py"]
    assert [module for module in modules if _layer(module) is None] == []


def test_no_e2e_module_is_longer_than_about_400_lines() -> None:
    lengths = {str(path.relative_to(REPO)): len(path.read_text().splitlines()) for path in (REPO / "e2e").rglob("*.py")}
    assert {path: lines for path, lines in lengths.items() if lines > LONGEST_MODULE_LINES} == {}
