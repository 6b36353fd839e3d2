"""Every scenario name the tests and the box hand to `in_new_netns` names a function that
e2e.engine.netns finds (issue 32): a wrong one would only fail in the slow real-engine tier, after
the engine's build. The names are read from the code, not imported from the tests."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.engine import netns

REPO = Path(__file__).resolve().parent.parent


def _calls(tree: ast.AST, name: str) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if called == name:
                yield node


def _template_names(tree: ast.AST, call: ast.Call, template: ast.JoinedStr) -> Iterator[str]:
    """A name built in a helper (`f"management.box_faults.{name}"`, `name` a parameter of the function around
    the call): the template filled with each string literal the file passes that parameter."""
    parts = template.values
    assert len(parts) == 2, ast.unparse(template)
    assert isinstance(parts[0], ast.Constant), ast.unparse(template)
    prefix = parts[0].value
    assert isinstance(prefix, str), ast.unparse(template)
    assert isinstance(parts[1], ast.FormattedValue), ast.unparse(template)
    assert isinstance(parts[1].value, ast.Name), ast.unparse(template)
    parameter = parts[1].value.id
    helper = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and any(inner is call for inner in ast.walk(node))
    )
    position = [argument.arg for argument in helper.args.args].index(parameter)
    filled = []
    for use in _calls(tree, helper.name):
        given = use.args[position] if len(use.args) > position else None
        if isinstance(given, ast.Constant) and isinstance(given.value, str):
            filled.append(prefix + given.value)
    assert filled, f"{helper.name} is never called with a literal {parameter}"
    yield from filled


def _scenario_names() -> dict[str, list[str]]:
    """Each name passed to `in_new_netns` in tests/ and e2e/, with where it is passed."""
    found: dict[str, list[str]] = {}
    for path in sorted([*(REPO / "tests").glob("*.py"), *(REPO / "e2e").rglob("*.py")]):
        tree = ast.parse(path.read_text())
        for call in _calls(tree, "in_new_netns"):
            first = call.args[0] if call.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names: list[str] = [first.value]
            elif isinstance(first, ast.JoinedStr):
                names = list(_template_names(tree, call, first))
            else:
                raise AssertionError(f"{path.relative_to(REPO)}:{call.lineno}: a scenario name not written out")
            for name in names:
                found.setdefault(name, []).append(f"{path.relative_to(REPO)}:{call.lineno}")
    return found


def _unresolved(names: dict[str, list[str]]) -> dict[str, list[str]]:
    missing = {}
    for name, where in names.items():
        try:
            assert callable(netns.scenario(name))
        except (ImportError, AttributeError):
            missing[name] = where
    return missing


def test_every_scenario_name_names_a_function() -> None:
    names = _scenario_names()
    # The session's box lifecycle, a module's own scenarios and a bare one of e2e.box.scenarios.
    assert {"management.lifecycle.whole_box_lifecycle", "management.box_faults.pve_faults", "mistakes"} <= set(names)
    assert _unresolved(names) == {}


@pytest.mark.parametrize("name", ["box.whole_box", "scenarios.no_such_scenario", "no_such_module.run"])
def test_a_wrong_name_is_found(name: str) -> None:
    assert _unresolved({name: ["here"]}) == {name: ["here"]}
