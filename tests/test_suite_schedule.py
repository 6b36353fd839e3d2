"""How `make test-engine` shares the machine (tests/conftest.py): every real-engine test that reads a
scenario is in that scenario's one xdist group, so the scenario runs once, on one worker; tests of
different scenarios, or of one scenario's two parameters, may run side by side; the scenarios
start in conftest's STARTED_FIRST order, the short tests last. Checked on the real collection,
in a pytest of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import LAB1_SITES

REPO = Path(__file__).resolve().parent.parent
# Writes, for each selected test, its module, the xdist group it was given and the fixtures it takes.
RECORDER = """
import json, os

def pytest_collection_finish(session):
    rows = []
    for item in session.items:
        marker = item.get_closest_marker("xdist_group")
        rows.append({
            "module": item.module.__name__,
            "nodeid": item.nodeid,
            "group": marker.args[0] if marker else None,
            "fixtures": list(item.fixturenames),
        })
    with open(os.environ["SCHEDULE_RECORD"], "w") as out:
        json.dump(rows, out)
"""


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    where = tmp_path_factory.mktemp("schedule")
    (where / "schedule_recorder.py").write_text(RECORDER)
    record = where / "record.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "engine", "--collect-only", "-q", "-p", "schedule_recorder"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(where), "SCHEDULE_RECORD": str(record)}
        | {name: os.environ[name] for name in ("LAB_MGMT_LAB1_SITES",) if name in os.environ},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows: list[dict[str, Any]] = json.loads(record.read_text())
    return rows


def test_the_tests_of_one_box_scenario_share_one_group(collected: list[dict[str, Any]]) -> None:
    groups: dict[str, set[str]] = {}
    for row in collected:
        for fixture in ("adoption", "takeover", "ssh", "bounds", "whole_box_lifecycle", "lab1_box"):
            if fixture in row["fixtures"] and row["group"] is not None:
                groups.setdefault(f"{row['module']}.{fixture}", set()).add(row["group"])
    # One group each; the site-parametrized adoption's is named after its one site.
    assert groups["test_box_faults.ssh"] == {"test_box_faults.ssh"}
    assert groups["test_box_faults.bounds"] == {"test_box_faults.bounds"}
    assert groups["test_box_takeover.takeover"] == {"test_box_takeover.takeover"}
    assert groups["test_box_whole_adoption.adoption"] == {"test_box_whole_adoption.adoption-other"}
    # xdist reads a node id ending in `]` as a parameter, not a group: every name ends otherwise.
    assert all(not group.endswith("]") for names in groups.values() for group in names)
    # The first part of the box's life and the rest are one scenario run, in one group.
    assert groups["test_box_whole.whole_box_lifecycle"] == groups["test_box_lifecycle.whole_box_lifecycle"]
    assert len(groups["test_box_whole.whole_box_lifecycle"]) == 1
    # The program's lab1: its steps, the Cluster API core beneath and the autoscaler's process.
    lab1 = [
        f"{module}.lab1_box"
        for module in ("test_box_lab1_autoscaling", "test_box_lab1_cluster_api", "test_box_lab1_autoscaler")
    ]
    assert {group for name in lab1 for group in groups[name]} == {f"conftest.lab1_box-{site}" for site in LAB1_SITES}


def test_a_test_with_a_box_of_its_own_is_in_no_group(collected: list[dict[str, Any]]) -> None:
    alone = [row for row in collected if row["module"] == "test_real_engine"]
    assert alone
    assert all(row["group"] is None for row in alone)


def test_the_scenarios_start_in_the_order_that_keeps_the_cores_busy(collected: list[dict[str, Any]]) -> None:
    groups = [group for group in dict.fromkeys(row["group"] for row in collected) if group is not None]
    assert groups[:3] == [
        "conftest.whole_box_lifecycle",
        "test_box_faults.bounds",
        "test_box_takeover.takeover",
    ]
    last_fault = max(index for index, row in enumerate(collected) if row["module"] == "test_box_faults")
    first_short = min(index for index, row in enumerate(collected) if row["module"] == "test_real_engine")
    assert first_short > last_fault
