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
# The graph as it was before the design pass (issue 20), which was to change nothing but where the
# program waits for the operator's webhooks.
BEFORE_DESIGN_PASS = REPO / "tests" / "data" / "graph_shape_before_design_pass.json"
# That wait: a command over SSH on the VM before, two patches of the operator's webhook
# configurations on the Kubernetes side after.
OPERATOR_WAIT_BEFORE = {"command:remote:Command::mgmt-operator-ready"}
OPERATOR_WAIT_AFTER = {
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfigurationPatch::mgmt-operator-webhook-validating",
    "kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfigurationPatch::mgmt-operator-webhook-mutating",
}
# Since issue 29 a release's chart is an archive in the project's folder, with no repository:
# its `repositoryOpts` input is gone, and with it from what an adopted release keeps.
RELEASES = {
    "kubernetes:helm.sh/v3:Release::mgmt-cert-manager",
    "kubernetes:helm.sh/v3:Release::mgmt-cluster-api-operator",
}
# Since issue 41 (the recovery of a lost state) the read-only token's data, which the token
# controller writes, stays out of every diff.
TOKEN = "kubernetes:core/v1:Secret::mgmt-readonly-token"
# Since issue 57 the VM's CD drive is never written after its create (Proxmox VE would append it to
# the boot order); an adopted VM ignored it already.
VM = "proxmoxve:index/vmLegacy:VmLegacy::mgmt-vm"
STACKS: dict[str, dict[str, Any]] = {
    "lab": {},
    # As test_adoption.py adopts it: lab1's objects are taken over only in issue 31.
    "lab adopted": {"adopt": True, "capmoxExistingSecret": "capmox-variables", "workloadClusters": []},
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


def _with_later_changes(graph: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The graph with issue 29's change to the releases, issue 41's to the token and issue 57's to
    the VM made."""

    def without_repository(names: list[str] | None) -> list[str] | None:
        return None if names is None else [name for name in names if name != "repositoryOpts"]

    return [
        {
            **resource,
            "inputs": without_repository(resource["inputs"]),
            "ignore_changes": without_repository(resource["ignore_changes"]),
        }
        if resource["resource"] in RELEASES
        else {**resource, "ignore_changes": [*(resource["ignore_changes"] or []), "data"]}
        if resource["resource"] == TOKEN
        else {**resource, "ignore_changes": ["cdrom", *resource["ignore_changes"]]}
        if resource["resource"] == VM and "cdrom" not in resource["ignore_changes"]
        else resource
        for resource in graph
    ]


def _without_operator_wait(graph: list[dict[str, Any]], wait: set[str]) -> list[dict[str, Any]]:
    """The graph with the operator wait `wait` left out, and with it every dependency on it."""
    return [
        {**resource, "dependencies": [dependency for dependency in resource["dependencies"] if dependency not in wait]}
        for resource in graph
        if resource["resource"] not in wait
    ]


@pytest.mark.parametrize("stack", STACKS)
def test_the_design_pass_moved_only_the_operator_wait(stack: str) -> None:
    before = _with_later_changes(json.loads(BEFORE_DESIGN_PASS.read_text())[stack])
    # That graph had no workload cluster: lab1's objects came later (issue 30).
    after = shape(harness.run_program({**STACKS[stack], "workloadClusters": []}))
    assert _without_operator_wait(after, OPERATOR_WAIT_AFTER) == _without_operator_wait(before, OPERATOR_WAIT_BEFORE)
    waited_on = {
        resource["resource"]: set(resource["dependencies"]) & (OPERATOR_WAIT_BEFORE | OPERATOR_WAIT_AFTER)
        for resource in after
        if resource["resource"] not in OPERATOR_WAIT_AFTER
    }
    # The same resources wait as before (the five provider CRs), now on both webhooks, the releases
    # before them; and the wait itself no longer needs the VM's connection, only its cluster.
    assert {name for name, wait in waited_on.items() if wait} == {
        resource["resource"] for resource in before if OPERATOR_WAIT_BEFORE & set(resource["dependencies"])
    }
    assert all(wait in (set(), OPERATOR_WAIT_AFTER) for wait in waited_on.values())
    for wait in (resource for resource in after if resource["resource"] in OPERATOR_WAIT_AFTER):
        assert wait["dependencies"] == ["kubernetes:helm.sh/v3:Release::mgmt-cluster-api-operator"]
        assert wait["provider"] == "pulumi:providers:kubernetes::mgmt-kubernetes"


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(shapes(), indent=1) + "\n")
