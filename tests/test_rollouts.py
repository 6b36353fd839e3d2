"""A change that rolls a workload cluster's machines is named at preview (components/rollouts.py):
each run records what rolls the control plane and the workers, and a run that changes either
warns, naming the cluster and the part; a change that rolls nothing (the worker counts) is silent."""

from __future__ import annotations

from typing import Any

import harness
import pytest

from components.rollouts import ROLLOUT_OUTPUT

ROLLS = "lab-mgmt:workloadClusters: default/lab1: this run rolls its "


def _rollout_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.getMessage().startswith(ROLLS)]


@pytest.fixture(scope="module")
def deployed() -> dict[str, Any]:
    specs, secret = harness.run_program().outputs[ROLLOUT_OUTPUT]
    assert not secret
    return {ROLLOUT_OUTPUT: specs}


def _entry(**changes: Any) -> dict[str, Any]:
    [lab1] = harness.stack_workload_clusters()
    return {**lab1, **changes}


def test_each_run_records_both_parts_of_each_cluster(deployed: dict[str, Any]) -> None:
    assert set(deployed[ROLLOUT_OUTPUT]) == {"default/lab1"}
    assert set(deployed[ROLLOUT_OUTPUT]["default/lab1"]) == {"control plane", "workers"}


@pytest.mark.parametrize(
    ("changes", "rolled"),
    [
        ({"workers": {"maxSize": 3, "memoryMib": 32768}}, "workers"),
        ({"controlPlane": {"cores": 8}}, "control plane"),
        ({"kubernetesVersion": "v1.35.10"}, "control plane and its workers"),
    ],
    ids=["worker-sizing", "control-plane-sizing", "kubernetes-upgrade"],
)
def test_a_change_that_rolls_machines_is_named_at_preview(
    deployed: dict[str, Any], caplog: pytest.LogCaptureFixture, changes: dict[str, Any], rolled: str
) -> None:
    harness.run_program({"workloadClusters": [_entry(**changes)]}, previous_outputs=deployed, preview=True)
    [warning] = _rollout_warnings(caplog)
    assert warning.startswith(ROLLS + rolled + ":"), warning


def test_nothing_is_said_for_what_rolls_nothing(deployed: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    harness.run_program(
        {"workloadClusters": [_entry(workers={"minSize": 1, "maxSize": 5})]}, previous_outputs=deployed, preview=True
    )
    harness.run_program(previous_outputs=deployed, preview=True)
    assert _rollout_warnings(caplog) == []


def test_a_new_cluster_rolls_nothing(caplog: pytest.LogCaptureFixture) -> None:
    harness.run_program(previous_outputs={}, preview=True)
    assert _rollout_warnings(caplog) == []


def test_a_run_that_passes_a_part_by_keeps_its_warning_for_the_run_that_rolls_it(
    deployed: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Review 4, 9c: a `pulumi up --target` that leaves the KubeadmControlPlane and the
    MachineDeployment as they were (the engine hands the program their earlier outputs) still
    writes the stack outputs; recorded from the settings, the record took the upgrade as done and
    the full run after it rolled both parts without a word."""
    before = harness.run_program(previous_outputs=deployed)
    earlier = {
        name: {"spec": before.get(f"kubernetes:{api_version}:{kind}", name).inputs["spec"]}
        for name, api_version, kind in [
            ("lab1-control-plane", "controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane"),
            ("lab1-workers", "cluster.x-k8s.io/v1beta2", "MachineDeployment"),
        ]
    }
    upgrade = {"workloadClusters": [_entry(kubernetesVersion="v1.35.10")]}
    passed_by = harness.run_program(upgrade, previous_outputs=deployed, live_outputs=earlier)
    record = {ROLLOUT_OUTPUT: passed_by.outputs[ROLLOUT_OUTPUT][0]}
    assert record == deployed
    caplog.clear()
    harness.run_program(upgrade, previous_outputs=record, preview=True)
    [warning] = _rollout_warnings(caplog)
    assert warning.startswith(ROLLS + "control plane and its workers:"), warning
    applied = harness.run_program(upgrade, previous_outputs=record)
    assert applied.outputs[ROLLOUT_OUTPUT][0] != deployed[ROLLOUT_OUTPUT]
