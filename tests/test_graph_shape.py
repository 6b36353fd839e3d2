"""The graph's shape, pinned: every resource of the lab stack, and of the lab being adopted, with
its parent, provider, dependencies, options and the names of its inputs, as a snapshot committed
under tests/data. A change to how the components are written must leave it exactly as it is; a
change to the graph itself shows here as a diff to review, then a new snapshot:
`.venv/bin/python tests/test_graph_shape.py` writes it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# Run as a script, neither the program's packages nor the harness are on the path yet.
sys.path[:0] = [entry for entry in (str(REPO), str(REPO / "tests")) if entry not in sys.path]

import harness  # noqa: E402
import pytest  # noqa: E402

SNAPSHOT = REPO / "tests" / "data" / "graph_shape.json"
STACKS: dict[str, dict[str, Any]] = {
    "lab": {},
    "lab adopted": {"adopt": True, "capmoxExistingSecret": "capmox-variables"},
}


def _ref(urn: str) -> str:
    """`type::name` of a URN, or of a provider reference (`URN::id`); a URN's type is its last."""
    if not urn:
        return ""
    _, _, types, name, *_ = urn.split("::")
    return f"{types.rsplit('$', 1)[-1]}::{name}"


def shape(run: harness.Run) -> list[dict[str, Any]]:
    return [
        {
            "resource": f"{r.type}::{r.name}",
            "parent": _ref(r.parent),
            "provider": _ref(r.provider),
            "dependencies": sorted(_ref(urn) for urn in r.dependencies),
            "inputs": sorted(r.inputs),
            "protect": r.protect,
            "retain_on_delete": r.retain_on_delete,
            "import_id": r.import_id,
            "ignore_changes": r.ignore_changes,
            "replace_on_changes": r.replace_on_changes,
            "delete_before_replace": r.delete_before_replace,
            "deleted_with": _ref(r.deleted_with),
            "custom_timeouts": r.custom_timeouts,
            "additional_secret_outputs": sorted(r.additional_secret_outputs),
        }
        for r in sorted(run.resources.values(), key=lambda r: (r.type, r.name))
    ]


def shapes() -> dict[str, list[dict[str, Any]]]:
    return {stack: shape(harness.run_program(overrides)) for stack, overrides in STACKS.items()}


@pytest.mark.parametrize("stack", STACKS)
def test_the_graph_keeps_its_shape(stack: str) -> None:
    expected = json.loads(SNAPSHOT.read_text())[stack]
    assert shape(harness.run_program(STACKS[stack])) == expected


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(shapes(), indent=1) + "\n")
