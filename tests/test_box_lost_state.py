"""The state and its passphrase lost, on the whole box (e2e/box/management/lost_state.py, a step of
`management.lifecycle.whole_box_lifecycle`, after the key rotation): a new stack on an empty backend with a
new passphrase types docs/operations.md "Lost state or passphrase" as it stands (lab1's lines
aside: the box runs no workload cluster) and takes over the lab the lost stack made: the VM is
imported and nothing is written to Proxmox, the host steps change nothing on the host, the
cluster's objects are imported writing only the webhooks' annotations, the node's `pvesm free`
lets the run with adopt off download the image again, the VM is neither changed nor rebooted, and
the zero-change preview passes. The stack whose destroy the locks then refuse is the new one.
Selected with `pytest -m engine`."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.box.takeover import lost_state_page

pytestmark = pytest.mark.engine

WEBHOOK_ANNOTATIONS = [
    ["patch", "validatingwebhookconfigurations", "capi-operator-validating-webhook-configuration"],
    ["patch", "mutatingwebhookconfigurations", "capi-operator-mutating-webhook-configuration"],
]


@pytest.fixture(scope="module")
def recovery(whole_box_lifecycle: Any) -> dict[str, Any]:
    found: dict[str, Any] = whole_box_lifecycle["recovery"]
    return found


def _typed(recovery: dict[str, Any], line: str, nth: int = 0) -> dict[str, Any]:
    found: dict[str, Any] = [t for t in recovery["typed"] if t["line"] == line][nth]
    return found


def _ops(run: dict[str, Any]) -> dict[str, set[str]]:
    ops: dict[str, set[str]] = {}
    for step in run["steps"]:
        ops.setdefault(step["op"], set()).add(step["urn"].rsplit("::", 1)[-1])
    return ops


def test_every_line_but_lab1s_is_typed_and_succeeds(recovery: dict[str, Any]) -> None:
    values = {"<image file>": recovery["image_file"]}
    assert [t["line"] for t in recovery["typed"]] == [
        line.filled(values) for line in lost_state_page.for_the_whole_box()
    ]
    for typed in recovery["typed"]:
        assert typed["rc"] == 0, typed
    assert recovery["node_unknown"] == []


def test_the_vms_run_imports_the_vm_and_changes_nothing_on_the_host(recovery: dict[str, Any]) -> None:
    up = _typed(recovery, "pulumi up --stack lab")
    ops = _ops(up)
    assert ops["import"] == {"mgmt-vm"}
    assert set(ops) == {"create", "import", "read"}
    assert "mgmt-image" not in ops["create"]
    assert (up["pve_writes"], up["k8s_writes"], up["k3s_restarts"], up["installs"]) == ([], [], [], [])
    # The host steps ran, over SSH, and found a host that matches.
    assert up["ssh_sessions"]


def test_the_clusters_run_imports_every_object_and_writes_only_the_webhooks_annotations(
    recovery: dict[str, Any],
) -> None:
    up = _typed(recovery, "pulumi up")
    ops = _ops(up)
    assert ops["create"] == {
        "mgmt",
        "mgmt-readonly",
        "mgmt-operator-webhook-validating",
        "mgmt-operator-webhook-mutating",
    }
    assert {"mgmt-cert-manager", "mgmt-cluster-api-operator", "mgmt-capmox-credentials", "mgmt-readonly-token"} <= (
        ops["import"]
    )
    assert sorted(up["k8s_writes"]) == sorted(WEBHOOK_ANNOTATIONS)
    assert (up["pve_writes"], up["ssh_sessions"]) == ([], [])


def test_with_adopt_off_the_image_comes_back_and_the_vm_is_neither_changed_nor_rebooted(
    recovery: dict[str, Any],
) -> None:
    up = _typed(recovery, "pulumi up", 1)
    ops = _ops(up)
    assert ops["create"] == {"mgmt-image"}
    assert set(ops) == {"create", "update", "read", "same"}
    assert {"mgmt-vm", "mgmt-k3s-config", "mgmt-k3s-install", "mgmt-readonly-token"} <= ops["update"]
    assert [w[:2] for w in up["pve_writes"]] == [
        ["POST", "/api2/json/nodes/pv1-1/storage/local/download-url"],
        ["PUT", "/api2/json/nodes/pv1-1/qemu/201/config"],
    ]
    # The VM's config is written as it is (the settings an import cannot read): nothing changes,
    # nothing reboots, and the host steps change nothing.
    assert recovery["vm_config_after"] == recovery["vm_config_before"]
    assert recovery["boots"][0] == recovery["boots"][1]
    assert (up["k3s_restarts"], up["installs"]) == ([], [])
    assert f"local:import/{recovery['image_file']}" in recovery["volumes_after"]
    last = recovery["typed"][-1]
    assert (last["line"], last["rc"], set(_ops(last))) == ("pulumi preview --expect-no-changes", 0, {"same", "read"})
