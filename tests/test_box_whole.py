"""The lab in a box, whole (e2e/box/box.py): the program's own __main__.py through the real CLI and its
three provider plugins, from the README's first run to `pulumi up` on an empty box (the Proxmox VE
API stand-in, VM 201 as a real host installing k3s over real ssh, the chart repositories, the
operator), then a second run that must do nothing at all, with the chart repositories down. In
a network namespace of the test's own; selected with `pytest -m engine`.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.box import scenarios
from e2e.box.observed import PROGRAM_USER, STANDIN_RECORDS
from e2e.engine.control_plane import INJECTOR_USER
from e2e.standins.cluster import admission_webhook_standin, playbook_lab

pytestmark = pytest.mark.engine

PROVIDER_NAMESPACES = (
    "capi-system",
    "capi-kubeadm-bootstrap-system",
    "capi-kubeadm-control-plane-system",
    "capmox-system",
    "capi-ipam-in-cluster-system",
)
WEBHOOK_WAITS = {"mgmt-operator-webhook-validating", "mgmt-operator-webhook-mutating"}
# The host steps over SSH: the k3s node's, and nothing after them.
HOST_STEPS = {
    *("mgmt-host-ready", "mgmt-keep-host-keys", "mgmt-guest-agent", "mgmt-k3s-config", "mgmt-k3s-install"),
    *("mgmt-node-ready", "mgmt-read-kubeconfig"),
}
WEBHOOK_CONFIGURATIONS = {
    "validatingwebhookconfigurations": admission_webhook_standin.CONFIGURATION_NAMES["ValidatingWebhookConfiguration"],
    "mutatingwebhookconfigurations": admission_webhook_standin.CONFIGURATION_NAMES["MutatingWebhookConfiguration"],
}
PROVIDER_CRS = sorted((f"{kind.lower()}s", name) for kind, (_, name, _) in playbook_lab.PROVIDERS.items())


@pytest.fixture(scope="module")
def box(whole_box_lifecycle: Any) -> Any:
    """The first part of the box's life (conftest.py), whose first run and no-op second one this
    module reads."""
    return whole_box_lifecycle


def test_the_readme_first_run_and_the_box_settings_are_accepted(box: Any) -> None:
    for step in box["steps"]:
        assert step["rc"] == 0, step


def test_the_first_up_creates_everything_on_the_empty_box(box: Any) -> None:
    first = box["first_up"]
    assert first["rc"] == 0, first["output"][-6000:]
    assert set(first["summary"]) == {"create"}, first["summary"]
    # The provider CRs say so while the operator has not yet reported on them.
    assert set(first["warnings"]) == {"Has no .status.conditions"}
    created = {step["urn"].rsplit("::", 1)[1] for step in first["steps"] if step["op"] == "create"}
    assert {"mgmt-image", "mgmt-vm", "mgmt-host-ready", "mgmt-cert-manager", *WEBHOOK_WAITS} <= created
    assert [call[:2] for call in first["pve_writes"]] == [
        ["POST", "/api2/json/nodes/pv1-1/storage/local/download-url"],
        ["POST", "/api2/json/nodes/pv1-1/qemu"],
        ["PUT", "/api2/json/nodes/pv1-1/qemu/201/resize"],
        ["POST", "/api2/json/nodes/pv1-1/qemu/201/status/start"],
    ]
    assert first["ssh_sessions"], "the host steps ran over ssh"
    assert first["k8s_writes"], "the engine and the host scripts wrote to the new cluster"
    # Each chart fetched once, into the project's folder, where the provider reads it.
    assert first["chart_requests"] == [
        "/jetstack/index.yaml",
        "/jetstack/cert-manager-v1.21.2.tgz",
        "/capi-operator/index.yaml",
        "/capi-operator/cluster-api-operator-0.28.0.tgz",
    ]


def test_the_stand_ins_knew_every_request_and_the_operator_ran(box: Any) -> None:
    for key in STANDIN_RECORDS:
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


def test_the_host_steps_are_the_k3s_node_s_alone_one_ssh_session_each(box: Any) -> None:
    first = box["first_up"]
    remote = {step["urn"].rsplit("::", 1)[1] for step in first["steps"] if "$command:remote:Command::" in step["urn"]}
    assert remote == HOST_STEPS
    assert len(first["ssh_sessions"]) == len(HOST_STEPS), first["ssh_sessions"]


def _admission(box: Any, user: str, resource: set[str] | str) -> list[dict[str, Any]]:
    return [write for write in box["admission"] if write["user"] == user and write["resource"] in resource]


def test_no_provider_cr_is_sent_before_the_injector_filled_in_both_webhook_configurations(box: Any) -> None:
    injected = _admission(box, INJECTOR_USER, set(WEBHOOK_CONFIGURATIONS))
    assert sorted((write["resource"], write["name"], write["code"]) for write in injected) == sorted(
        (resource, name, 200) for resource, name in WEBHOOK_CONFIGURATIONS.items()
    )
    sent = _admission(box, PROGRAM_USER, {resource for resource, _ in PROVIDER_CRS})
    # Server-side apply creates each CR by a patch, answered 201.
    created = [(write["resource"], write["name"]) for write in sent if write["code"] == 201 and not write["dry_run"]]
    assert sorted(created) == PROVIDER_CRS
    # Whatever the program sent a provider CR, dry run or not, was received after both bundles
    # were written, and none was refused.
    filled_in = max(write["answered"] for write in injected)
    for write in sent:
        assert write["received"] > filled_in, (write, injected)
        assert write["code"] in {200, 201}, write


def test_the_program_waited_on_each_webhook_configuration_before_it_was_filled_in(box: Any) -> None:
    """The injector's delay is longer than the operator's release takes to be ready: the program's
    wait on each configuration began before its bundle was there, so it really waited."""
    for resource, name in WEBHOOK_CONFIGURATIONS.items():
        waited = [
            write
            for write in _admission(box, PROGRAM_USER, resource)
            if write["name"] == name and write["verb"] == "patch" and not write["dry_run"]
        ]
        [injected] = [write for write in _admission(box, INJECTOR_USER, resource) if write["name"] == name]
        assert waited, box["admission"]
        assert waited[0]["answered"] < injected["received"], (waited, injected)


def test_the_webhook_reviewed_each_provider_cr_create(box: Any) -> None:
    reviewed = sorted(
        (review["webhook"], review["kind"], review["namespace"], review["name"])
        for review in box["webhook_reviews"]
        if review["operation"] == "CREATE" and not review["dry_run"]
    )
    assert reviewed == sorted(
        (webhook, kind, namespace, name)
        for kind, (namespace, name, _) in playbook_lab.PROVIDERS.items()
        for webhook in ("mutate", "validate")
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


def test_a_preview_expecting_no_changes_passes_with_the_chart_repositories_down(box: Any) -> None:
    preview = box["no_changes_preview"]
    assert preview["rc"] == 0, preview["output"][-6000:]
    assert set(preview["summary"]) <= {"same", "read"}, preview["summary"]
    assert preview["chart_requests"] == []


def test_the_second_up_opens_no_ssh_session_writes_nothing_and_needs_no_chart_repository(box: Any) -> None:
    """The chart repositories are down since the first up (lifecycle.whole_box_lifecycle)."""
    second = box["second_up"]
    assert second["rc"] == 0, second["output"][-6000:]
    assert set(second["summary"]) <= {"same", "read"}, second["summary"]
    assert second["ssh_connections"] == []
    assert second["ssh_sessions"] == []
    assert second["chart_requests"] == []
    assert second["pve_writes"] == []
    assert second["k8s_writes"] == []
