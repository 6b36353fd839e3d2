"""A scenario's processes end with it (e2e/engine/netns.py): each runs in a PID namespace of its
own, so what it leaves running (the CLI leaves its language host when it refuses a stack's config;
a failed scenario, its API servers) cannot go on taking the suite's cores. Selected with
`pytest -m engine` (it needs what the box's namespaces need)."""

from __future__ import annotations

import subprocess
import time

import pytest

from e2e.engine.netns import netns_command

pytestmark = pytest.mark.engine

# A process that the command leaves behind when it returns: an orphan, found by its unique argv.
LEFT_BEHIND = "sleep 3017"


def _left_behind() -> list[str]:
    found = subprocess.run(["pgrep", "-f", f"^{LEFT_BEHIND}$"], capture_output=True, text=True, check=False)
    return found.stdout.split()


def _run_leaving_one_behind(*, own_processes: bool) -> list[str]:
    """What is still running of what the command left, once its namespace had a second to end."""
    command = netns_command(["sh", "-c", f"{LEFT_BEHIND} >/dev/null 2>&1 & echo started"], own_processes=own_processes)
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout) == (0, "started\n"), done.stderr
    deadline = time.monotonic() + 1
    while _left_behind() and time.monotonic() < deadline:
        time.sleep(0.1)
    return _left_behind()


@pytest.fixture(scope="module")
def left_running() -> dict[str, list[str]]:
    """In a PID namespace of its own (as in_new_netns runs a scenario), then in a network
    namespace alone (as `make box` runs the box, which `make box-down` stops)."""
    assert _left_behind() == [], f"{LEFT_BEHIND} runs already"
    try:
        return {
            "own_processes": _run_leaving_one_behind(own_processes=True),
            "network_alone": _run_leaving_one_behind(own_processes=False),
        }
    finally:
        subprocess.run(["pkill", "-f", f"^{LEFT_BEHIND}$"], check=False)


def test_what_a_scenario_leaves_running_ends_with_it(left_running: dict[str, list[str]]) -> None:
    assert left_running["own_processes"] == []


def test_without_a_pid_namespace_it_would_outlive_the_scenario(left_running: dict[str, list[str]]) -> None:
    """The control: the same command in a network namespace alone leaves the process running."""
    assert len(left_running["network_alone"]) == 1
