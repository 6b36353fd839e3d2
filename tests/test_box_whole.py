"""The lab in a box, whole (e2e/box.py): the program's own __main__.py through the real CLI and its
three provider plugins, from the README's first run to `pulumi up` on an empty box (the Proxmox VE
API stand-in, VM 201 as a real host installing k3s over real ssh, the chart repositories, the
operator), then a second run that must do nothing at all. In a network namespace of the test's
own; selected with `pytest -m engine`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e import scenarios
from e2e.engine import KUBERNETES_PLUGIN_WARNING
from e2e.netns import in_new_netns

pytestmark = pytest.mark.engine

PROVIDER_NAMESPACES = (
    "capi-system",
    "capi-kubeadm-bootstrap-system",
    "capi-kubeadm-control-plane-system",
    "capmox-system",
    "capi-ipam-in-cluster-system",
)


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("whole-box")
    return in_new_netns("box.whole_box", str(root), addresses=[scenarios.PROXMOX_ADDRESS], timeout=1800)


def test_the_readme_first_run_and_the_box_settings_are_accepted(box: Any) -> None:
    for step in box["steps"]:
        assert step["rc"] == 0, step


def test_the_first_up_creates_everything_on_the_empty_box(box: Any) -> None:
    first = box["first_up"]
    assert first["rc"] == 0, first["output"][-6000:]
    assert set(first["summary"]) == {"create"}, first["summary"]
    # The provider CRs say so while the operator has not yet reported on them.
    assert set(first["warnings"]) == {KUBERNETES_PLUGIN_WARNING, "Has no .status.conditions"}
    created = {step["urn"].rsplit("::", 1)[1] for step in first["steps"] if step["op"] == "create"}
    assert {"mgmt-image", "mgmt-vm", "mgmt-host-ready", "mgmt-operator-ready", "mgmt-cert-manager"} <= created
    assert [call[:2] for call in first["pve_writes"]] == [
        ["POST", "/api2/json/nodes/pv1-1/storage/local/download-url"],
        ["POST", "/api2/json/nodes/pv1-1/qemu"],
        ["PUT", "/api2/json/nodes/pv1-1/qemu/201/resize"],
        ["POST", "/api2/json/nodes/pv1-1/qemu/201/status/start"],
    ]
    assert first["ssh_sessions"], "the host steps ran over ssh"
    assert first["k8s_writes"], "the engine and the host scripts wrote to the new cluster"


def test_the_stand_ins_knew_every_request_and_the_operator_ran(box: Any) -> None:
    for key in ("pve_unknown", "chart_unknown", "release_unknown", "operator_errors"):
        assert box[key] == [], key
    assert len(box["pods_run"]) == 1
    assert box["pods_run"][0].startswith("capi-operator-system/cluster-api-operator-")
    assert sorted(box["providers_reconciled"]) == sorted(
        [
            "CoreProvider/cluster-api",
            "BootstrapProvider/kubeadm",
            "ControlPlaneProvider/kubeadm",
            "InfrastructureProvider/proxmox",
            "IPAMProvider/in-cluster",
        ]
    )


def test_the_outputs_name_the_vm_and_keep_the_kubeconfigs_secret(box: Any) -> None:
    assert box["outputs"]["vmAddress"] == scenarios.VM_ADDRESS
    assert box["outputs"]["vmProtected"] is True
    assert {"kubeconfig", "readonlyKubeconfig"} <= set(box["secret_outputs"])


def test_the_admin_kubeconfig_lists_the_namespaces_the_program_made(box: Any) -> None:
    namespaces = box["kubeconfig_use"]["namespaces"]
    assert namespaces["rc"] == 0, namespaces["stderr"]
    listed = set(namespaces["stdout"].split())
    assert {f"namespace/{name}" for name in ("cert-manager", "capi-operator-system", *PROVIDER_NAMESPACES)} <= listed


def test_the_readonly_kubeconfig_lists_pods_but_reads_no_secret_and_deletes_nothing(box: Any) -> None:
    use = box["kubeconfig_use"]
    assert use["readonly_pods"]["rc"] == 0, use["readonly_pods"]["stderr"]
    assert "pod/cluster-api-operator-" in use["readonly_pods"]["stdout"]
    for question in ("readonly_can_get_secrets", "readonly_can_delete_namespaces", "readonly_can_delete_pods"):
        assert (use[question]["rc"], use[question]["stdout"].strip()) == (1, "no"), question


def test_a_preview_expecting_no_changes_passes(box: Any) -> None:
    preview = box["no_changes_preview"]
    assert preview["rc"] == 0, preview["output"][-6000:]
    assert set(preview["summary"]) <= {"same", "read"}, preview["summary"]


def test_the_second_up_opens_no_ssh_session_and_writes_nothing(box: Any) -> None:
    second = box["second_up"]
    assert second["rc"] == 0, second["output"][-6000:]
    assert set(second["summary"]) <= {"same", "read"}, second["summary"]
    assert second["ssh_connections"] == []
    assert second["ssh_sessions"] == []
    assert second["pve_writes"] == []
    assert second["k8s_writes"] == []
