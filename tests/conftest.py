import sys
from pathlib import Path

import pytest

# The program imports `components` from the repository root, as the Pulumi CLI runs it there.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The real-engine modules whose scenarios take longest, longest first: `make test-engine` runs the
# scenarios side by side (pytest-xdist), and a long one started last would finish last alone.
LONGEST_FIRST = (
    "test_box_whole_adoption",
    "test_box_faults",
    "test_box_lifecycle",
    "test_box_adoption",
    "test_box_whole",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that read the same scenario share its run: each real-engine test that takes a
    module-scoped fixture (a scenario's result) joins the xdist group of that fixture (with its
    parameter), so one worker runs the scenario once and every test of it there. Before xdist
    reads the groups (`--dist loadgroup`), the longest modules move to the front."""
    for item in items:
        if item.get_closest_marker("engine") is None:
            continue
        groups = sorted(_scenarios(item))
        if groups:
            item.add_marker(pytest.mark.xdist_group("+".join(groups)))
    items.sort(key=_start_order)


def _scenarios(item: pytest.Item) -> set[str]:
    """The module-scoped fixtures `item` takes, each named with its module and parameter."""
    info = getattr(item, "_fixtureinfo", None)
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    names = set()
    for name, definitions in info.name2fixturedefs.items() if info is not None else ():
        if definitions[-1].scope == "module":
            suffix = f"[{params[name]}]" if name in params else ""
            names.add(f"{item.module.__name__}.{name}{suffix}")  # type: ignore[attr-defined]
    return names


def _start_order(item: pytest.Item) -> int:
    module: str = item.module.__name__ if hasattr(item, "module") else ""
    return LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)
