import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

# The program imports `components` from the repository root, as the Pulumi CLI runs it there.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The order in which the scenarios start, by xdist group (`make test-engine` runs them side by
# side; tests of no group listed here start last, in collection order). The suite is bound by the
# CPU of two cores, so what matters is that no core idles and that the heaviest scenarios do not
# all run at once: the fault scenario that waits out two one-minute bounds starts beside the
# longest ones (with four workers on a fresh clone on 2026-12-05: lab1 459 s with its faults and
# controls, the journey 426 s, the whole adoption 415 s, the lifecycle 374 s), and the many short
# tests, which keep the CPU busy, come last.
# Started longest first, the three heaviest together, the suite took 13 min 0 s against 12 min 36 s
# (2026-12-04).
STARTED_FIRST = (
    "conftest.whole_box_lifecycle",
    "test_box_faults.bounds",
    "test_box_takeover.takeover",
    "conftest.lab1_box-lab",
    "test_box_whole_adoption.adoption-other",
    "test_box_faults.ssh",
    "conftest.lab1_box-other",
    "test_box_adoption.adoption",
    "test_box_front_door.front_door",
    "test_box_faults.interrupted",
    "test_box_faults.pve",
    "test_box_faults.api_down",
)


@pytest.fixture(scope="session")
def whole_box_lifecycle(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The lab in a box from the README's first run through a lab's life (lifecycle.whole_box_lifecycle),
    paid for once: tests/test_box_whole.py reads its first part, tests/test_box_lifecycle.py the rest."""
    from e2e.box import scenarios  # noqa: PLC0415 - the mocks tests never import the box
    from e2e.engine.netns import in_new_netns  # noqa: PLC0415

    root: Path = tmp_path_factory.mktemp("box-lifecycle")
    return in_new_netns(
        "management.lifecycle.whole_box_lifecycle", str(root), addresses=[scenarios.PROXMOX_ADDRESS], timeout=2400
    )


# Where the program's lab1 scenario runs (e2e/box/workload/lab1_sites.py): the lab's own declaration;
# with LAB_MGMT_LAB1_SITES=lab,other also another site's, every name, address, network and size
# changed. That second box costs about 250 s of a worker, which `make test-engine`'s 12 minutes
# cannot pay for (a fresh clone took 13 min 52 s with it).
LAB1_SITES = tuple(os.environ.get("LAB_MGMT_LAB1_SITES", "lab").split(","))


@pytest.fixture(scope="session", params=LAB1_SITES)
def lab1_box(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The program's lab1 in the box (lab1_autoscaling.lab1_autoscaling) at a site, paid for once:
    the tests of its steps (tests/test_box_lab1_autoscaling.py), of the Cluster API core beneath
    them (tests/test_box_lab1_cluster_api.py) and of the autoscaler's process
    (tests/test_box_lab1_autoscaler.py)."""
    from e2e.box.workload import lab1_sites  # noqa: PLC0415 - the mocks tests never import the box
    from e2e.engine.netns import in_new_netns  # noqa: PLC0415

    site: str = request.param
    root: Path = tmp_path_factory.mktemp(f"lab1-autoscaling-{site}")
    return in_new_netns(
        "workload.lab1_autoscaling.lab1_autoscaling",
        str(root),
        site,
        addresses=lab1_sites.addresses(site),
        # About 600 s alone and 880-1000 s beside three other scenarios on two busy cores (CI's
        # run of 2026-12-07 was cut at 900 s with two steps to go): a bound, not an estimate.
        timeout=1500,
        longest=True,
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that read the same scenario share its run: each real-engine test that takes a
    scenario's result (a module- or session-scoped fixture of the tests' own) joins the xdist
    group of that fixture (with its parameter), so one worker runs the scenario once and every
    test of it there (ScenarioScheduling). The groups of STARTED_FIRST move to the front, in its order."""
    # Two scenario fixtures that one test takes (a module's view of a session-wide scenario) are
    # one scenario: each group is named after the first fixture of its connected set.
    joined: dict[str, str] = {}

    def group_of(name: str) -> str:
        while joined.setdefault(name, name) != name:
            name = joined[name]
        return name

    taken = {item.nodeid: sorted(_scenarios(item)) for item in items if item.get_closest_marker("engine")}
    for names in taken.values():
        for name in names[1:]:
            first, other = sorted((group_of(names[0]), group_of(name)))
            joined[other] = first
    for item in items:
        if taken.get(item.nodeid):
            item.add_marker(pytest.mark.xdist_group(group_of(taken[item.nodeid][0])))
    items.sort(key=_start_order)
    _tell_the_scheduler(config, items)


# pytest-xdist 3.8's own `--dist loadgroup` names a group by appending it to the test's node id
# (`item._nodeid`), which pytest 9 no longer reads: every test of a group would run alone, each
# worker running the scenario again. So each worker leaves the groups it collected in a folder
# that the controller names, and the controller's scheduler reads them from there.
GROUPS_FOLDER = pytest.StashKey[Path]()
GROUPS_INPUT = "lab_mgmt_scenario_groups"


def _tell_the_scheduler(config: pytest.Config, items: list[pytest.Item]) -> None:
    workerinput = getattr(config, "workerinput", {})
    if GROUPS_INPUT in workerinput:
        groups = {item.nodeid: marker.args[0] for item in items if (marker := item.get_closest_marker("xdist_group"))}
        folder = Path(workerinput[GROUPS_INPUT])
        (folder / f"{workerinput['workerid']}.json").write_text(json.dumps(groups))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    if GROUPS_FOLDER not in node.config.stash:
        node.config.stash[GROUPS_FOLDER] = Path(tempfile.mkdtemp(prefix="lab-mgmt-scenario-groups-"))
    node.workerinput[GROUPS_INPUT] = str(node.config.stash[GROUPS_FOLDER])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    if config.getvalue("dist") != "loadgroup":
        return None
    return ScenarioScheduling(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    if GROUPS_FOLDER in config.stash:
        shutil.rmtree(config.stash[GROUPS_FOLDER], ignore_errors=True)


class ScenarioScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's scheduling by scope, a scope being a scenario's group (or a test of none), as the
    workers wrote them down: each group goes whole to one worker, in the order collected."""

    def _split_scope(self, nodeid: str) -> str:
        groups: dict[str, str] = getattr(self, "_groups", {})
        if not groups:
            for written in self.config.stash[GROUPS_FOLDER].glob("*.json"):
                groups.update(json.loads(written.read_text()))
            self._groups = groups
        return groups.get(nodeid, nodeid)


def _scenarios(item: pytest.Item) -> set[str]:
    """The scenario fixtures `item` takes (module- or session-scoped, of the tests' own), each
    named with its module and parameter; pytest's and plugins' (tmp_path_factory, ...) are none."""
    info = getattr(item, "_fixtureinfo", None)
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    names = set()
    for name, definitions in info.name2fixturedefs.items() if info is not None else ():
        module = definitions[-1].func.__module__
        if definitions[-1].scope in {"module", "session"} and (module == "conftest" or module.startswith("test_")):
            # No brackets: xdist takes a node id ending in `]` for a parameter, not a group.
            suffix = f"-{params[name]}" if name in params else ""
            names.add(f"{module}.{name}{suffix}")
    return names


def _start_order(item: pytest.Item) -> int:
    marker = item.get_closest_marker("xdist_group")
    group = marker.args[0] if marker else None
    return STARTED_FIRST.index(group) if group in STARTED_FIRST else len(STARTED_FIRST)
