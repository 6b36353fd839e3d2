"""The components stay readable: each function says what it makes, in a screenful (issue 20:
a part that grows past that is two ideas in one place)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

COMPONENTS = Path(__file__).resolve().parent.parent / "components"
LONGEST_FUNCTION_LINES = 60


# Every module at any depth (the settings package's too), named by its path under components/.
@pytest.mark.parametrize("module", sorted(COMPONENTS.rglob("*.py")), ids=lambda path: str(path.relative_to(COMPONENTS)))
def test_no_function_is_longer_than_a_screenful(module: Path) -> None:
    functions = [
        node
        for node in ast.walk(ast.parse(module.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    lengths = {f"{f.name} (line {f.lineno})": f.end_lineno - f.lineno + 1 for f in functions if f.end_lineno}
    assert {name: lines for name, lines in lengths.items() if lines > LONGEST_FUNCTION_LINES} == {}
