"""The lab in a box through a lab's life (e2e/box/management/lifecycle.py,
`management.lifecycle.whole_box_lifecycle`, whose first part tests/test_box_whole.py reads): after
the first run and the no-op second one, each bump of docs/graph.md's table previewed and applied
alone, touching only what the table lists; the CAPMOX token rotated as docs/operations.md says; a
new vmCores, written and announced but never rebooted into; a deliberate rebuild from a new image
(a new VM with a new host key, pinned anew, and k3s back); and a `pulumi destroy` the locks
refuse. In a network namespace of its own; selected with `pytest -m engine`.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.box import box as box_module
from e2e.box import scenarios
from e2e.box.observed import STANDIN_RECORDS

pytestmark = pytest.mark.engine

UNCHANGED = {"same", "read"}
PVE = "/api2/json/nodes/pv1-1"
# docs/graph.md's "What each settings change touches", row by row.
TOUCHES = {
    "k3s": {"mgmt-k3s-install", "mgmt-node-ready", "mgmt-read-kubeconfig"},
    "cert_manager": {"mgmt-cert-manager"},
    "capmox": {"mgmt-infrastructure-proxmox"},
    "capmox_token": {"mgmt-capmox-credentials", "mgmt-infrastructure-proxmox"},
}
# Beyond the table: a k3s bump reads the kubeconfig again and updates the Kubernetes provider in
# place with it (as docs/operations.md says under "Admin kubeconfig after k3s renewed its
# certificates"); the mocks that docs/graph.md's table comes from read the same kubeconfig again.
BEYOND_THE_TABLE = {"k3s": {"mgmt-kubernetes"}}
REBUILD_TOUCHES = {
    *("mgmt-guest-agent", "mgmt-host-ready", "mgmt-image", "mgmt-k3s-config", "mgmt-k3s-install"),
    *("mgmt-keep-host-keys", "mgmt-kubernetes", "mgmt-node-ready"),
    *("mgmt-read-kubeconfig", "mgmt-vm"),
}
# Everything created through mgmt-kubernetes (docs/graph.md's dotted arrows), which a rebuild
# creates again on the new cluster.
ON_THE_CLUSTER = {
    *("mgmt-cert-manager", "mgmt-cluster-api-operator", "mgmt-capmox-credentials"),
    *("mgmt-operator-webhook-validating", "mgmt-operator-webhook-mutating"),
    *(f"mgmt-ns-{name}" for name in ("capi-system", "capi-kubeadm-bootstrap-system")),
    *(f"mgmt-ns-{name}" for name in ("capi-kubeadm-control-plane-system", "capmox-system")),
    "mgmt-ns-capi-ipam-in-cluster-system",
    *scenarios.PROVIDER_CR_RESOURCES,
    *("mgmt-readonly-token", "mgmt-readonly-account", "mgmt-readonly-role", "mgmt-readonly-binding"),
}


@pytest.fixture(scope="module")
def box(whole_box_lifecycle: Any) -> Any:
    """The box's life (conftest.py), past the first run and the no-op second one."""
    assert whole_box_lifecycle["second_up"]["rc"] == 0, "the first part (tests/test_box_whole.py) failed"
    return whole_box_lifecycle


def touched(run: dict[str, Any]) -> set[str]:
    """The resources the engine created, updated, replaced or deleted in the run."""
    return {step["urn"].rsplit("::", 1)[1] for step in run["steps"] if step["op"] not in UNCHANGED}


def applied(change: dict[str, Any]) -> dict[str, Any]:
    """The change's `pulumi up`, once its config steps, preview and up succeeded."""
    for step in change["steps"]:
        assert step["rc"] == 0, step
    for run in ("preview", "up"):
        assert change[run]["rc"] == 0, change[run]["output"][-6000:]
    up: dict[str, Any] = change["up"]
    return up


@pytest.mark.parametrize("bump", sorted(TOUCHES))
def test_a_bump_applies_exactly_what_the_table_lists(box: Any, bump: str) -> None:
    """Exactly: a bump that left a difference behind would show in the next change's preview and
    up too (e2e/box/management/lifecycle.py `_change`), so each change is also the check that the one before
    it settled."""
    change = box["bumps"][bump]
    assert touched(applied(change)) == TOUCHES[bump] | BEYOND_THE_TABLE.get(bump, set())


@pytest.mark.parametrize("bump", sorted(set(TOUCHES) - {"k3s"}))
def test_a_bump_previews_what_it_applies(box: Any, bump: str) -> None:
    change = box["bumps"][bump]
    assert touched(change["preview"]) == touched(applied(change))


def test_the_k3s_preview_also_lists_every_object_on_the_cluster(box: Any) -> None:
    """The new kubeconfig is unknown until mgmt-read-kubeconfig runs, so the preview cannot tell
    that the objects on the provider stay as they are (and warns so for each); `up` leaves them."""
    change = box["bumps"]["k3s"]
    assert touched(change["preview"]) == touched(applied(change)) | ON_THE_CLUSTER


@pytest.mark.parametrize("bump", sorted(TOUCHES))
def test_no_bump_writes_to_proxmox(box: Any, bump: str) -> None:
    assert box["bumps"][bump]["up"]["pve_writes"] == []


def test_the_k3s_bump_reruns_three_host_steps_and_the_installer_once(box: Any) -> None:
    up = applied(box["bumps"]["k3s"])
    assert len(up["ssh_sessions"]) == 3, up["ssh_sessions"]
    assert [line.split(" ", 1)[1] for line in up["installs"]] == [f"{box_module.K3S_BUMP} installed; k3s restarted"]
    nodes = box["bumps"]["k3s"]["node_versions"]
    assert (nodes["rc"], nodes["stdout"]) == (0, box_module.K3S_BUMP), nodes["stderr"]


def test_the_cert_manager_bump_upgrades_one_release_and_nothing_else(box: Any) -> None:
    up = applied(box["bumps"]["cert_manager"])
    # The operator's webhooks keep their CA bundle: nothing waits again, nothing runs on the VM.
    assert up["ssh_sessions"] == []
    assert up["installs"] == []
    releases = [write for write in up["k8s_writes"] if write[1] == "secrets" and ".helm.release." in write[2]]
    assert ["create", "secrets", "sh.helm.release.v1.cert-manager.v2"] in releases, up["k8s_writes"]
    assert {name.rsplit(".", 1)[0] for _, _, name in releases} == {"sh.helm.release.v1.cert-manager"}


def test_the_cert_manager_bump_downloads_the_new_chart_alone_once(box: Any) -> None:
    """Its preview fetches the new chart into the project's folder (index and archive), and its
    up and the next change's preview read the archive there."""
    change = box["bumps"]["cert_manager"]
    new_chart = f"/jetstack/cert-manager-{box_module.CERT_MANAGER_BUMP}.tgz"
    assert change["preview"]["chart_requests"] == ["/jetstack/index.yaml", new_chart]
    assert change["up"]["chart_requests"] == []
    assert box["bumps"]["capmox"]["preview"]["chart_requests"] == []


def test_the_capmox_bump_updates_one_cr_that_the_operator_reconciles(box: Any) -> None:
    change = box["bumps"]["capmox"]
    up = applied(change)
    assert up["ssh_sessions"] == []
    # The kubernetes plugin updates a CR by two patches: its field managers put right, then the apply.
    assert [write[:2] for write in up["k8s_writes"]] == [["patch", "infrastructureproviders"]] * 2
    assert change["reconciled"] == [f"InfrastructureProvider/proxmox@{box_module.CAPMOX_BUMP}"]
    assert change["provider_versions"]["capmoxVersion"] == box_module.CAPMOX_BUMP


def test_the_capmox_token_rotation_repoints_the_provider_at_a_new_secret(box: Any) -> None:
    change = box["bumps"]["capmox_token"]
    up = applied(change)
    before, after = change["config_before"], change["config_after"]
    assert before["errors"] == after["errors"] == []
    assert up["ssh_sessions"] == []
    old, new = before["config_secret"], after["config_secret"]
    assert old != new
    # The new Secret is there and the old one gone: the provider never reads a stale one.
    assert f"secret/{new}" in after["secrets"]
    assert f"secret/{old}" in before["secrets"]
    assert f"secret/{old}" not in after["secrets"]
    # pulumi-kubernetes (4.29 and later) creates the new Secret with a POST, and updates with
    # server-side apply's patch.
    assert up["k8s_writes"] == [
        ["create", "secrets", new],
        *[["patch", "infrastructureproviders", "proxmox"]] * 2,
        ["delete", "secrets", old],
    ]


def test_a_size_change_is_written_and_announced_and_reboots_nothing(box: Any) -> None:
    """The VM takes a new size only at its next boot, which the owner chooses (docs/decisions.md):
    the preview says so, the run writes the config once, and the guest runs on, never stopped."""
    change = box["bumps"]["size"]
    up = applied(change)
    assert touched(change["preview"]) == touched(up) == {"mgmt-vm"}
    for run in (change["preview"], up):
        (size,) = [warning for warning in run["warnings"] if "vmCores" in warning]
        assert "lab-mgmt:vmCores changed: Proxmox holds the new size as a pending change" in size
        assert "reboot it (qm reboot 201)" in size
    assert [call[:2] for call in up["pve_writes"]] == [["PUT", f"{PVE}/qemu/201/config"]]
    assert up["ssh_sessions"] == up["k8s_writes"] == []


def test_lifting_the_locks_updates_only_the_vm(box: Any) -> None:
    unlock = box["rebuild"]["unlock"]
    up = applied(unlock)
    assert touched(unlock["preview"]) == touched(up) == {"mgmt-vm"}
    assert [call[:2] for call in up["pve_writes"]] == [["PUT", f"{PVE}/qemu/201/config"]]
    assert up["ssh_sessions"] == up["k8s_writes"] == []


def test_the_rebuild_replaces_the_vm_and_creates_the_cluster_objects_again(box: Any) -> None:
    rebuild = box["rebuild"]["rebuild"]
    up = applied(rebuild)
    for run in (rebuild["preview"], up):
        assert touched(run) >= REBUILD_TOUCHES
        assert touched(run) - REBUILD_TOUCHES <= ON_THE_CLUSTER
    replaced = {step["urn"].rsplit("::", 1)[1] for step in up["steps"] if step["op"] == "replace"}
    assert {"mgmt-vm", "mgmt-image", "mgmt-host-ready", "mgmt-kubernetes"} <= replaced
    # The old cluster's objects went with the old VM: not one delete reached an API server.
    assert [write for write in up["k8s_writes"] if write[0] == "delete"] == []


def test_the_rebuild_deletes_the_vm_before_it_creates_the_new_one(box: Any) -> None:
    writes = [call[:2] for call in box["rebuild"]["rebuild"]["up"]["pve_writes"]]
    vm = f"{PVE}/qemu/201"
    expected_order = [
        ["POST", f"{PVE}/storage/local/download-url"],
        ["POST", f"{vm}/status/shutdown"],
        # The provider's path for the VM itself ends in a slash.
        ["DELETE", f"{vm}/"],
        ["POST", f"{PVE}/qemu"],
        ["POST", f"{vm}/status/start"],
    ]
    assert [write for write in writes if write in expected_order] == expected_order, writes


def test_the_new_vm_has_a_new_host_key_that_the_stack_pins(box: Any) -> None:
    rebuild = box["rebuild"]
    assert rebuild["pinned_before"] == rebuild["host_key_before"]
    assert rebuild["host_key_after"] != rebuild["host_key_before"]
    assert rebuild["pinned_after"] == rebuild["host_key_after"]


def test_k3s_comes_back_on_the_new_vm(box: Any) -> None:
    rebuild = box["rebuild"]
    up = applied(rebuild["rebuild"])
    assert [line.split(" ", 1)[1] for line in up["installs"]] == [f"{box_module.K3S_BUMP} installed; k3s restarted"]
    namespaces = rebuild["kubeconfig_use"]["namespaces"]
    assert namespaces["rc"] == 0, namespaces["stderr"]
    assert {"namespace/cert-manager", "namespace/capmox-system"} <= set(namespaces["stdout"].split())
    assert len(rebuild["pods_run"]) == 1
    assert len(rebuild["providers_reconciled"]) == len(scenarios.PROVIDER_CR_RESOURCES)


def test_locking_again_updates_only_the_vm(box: Any) -> None:
    lock = box["rebuild"]["lock"]
    up = applied(lock)
    assert touched(lock["preview"]) == touched(up) == {"mgmt-vm"}
    assert [call[:2] for call in up["pve_writes"]] == [["PUT", f"{PVE}/qemu/201/config"]]


def test_destroy_is_refused_while_the_vm_is_protected_and_deletes_nothing(box: Any) -> None:
    destroy = box["destroy"]
    assert destroy["rc"] != 0
    assert "protected" in destroy["output"]
    assert destroy["pve_writes"] == []
    assert destroy["k8s_writes"] == []
    assert destroy["ssh_sessions"] == []
    assert box["vm_running_after_destroy"] is True


def test_the_stand_ins_knew_every_request(box: Any) -> None:
    for key in STANDIN_RECORDS:
        assert box[key] == [], key


HOST_STEPS = {
    *("mgmt-host-ready", "mgmt-keep-host-keys", "mgmt-guest-agent", "mgmt-k3s-config"),
    *("mgmt-k3s-install", "mgmt-node-ready", "mgmt-read-kubeconfig"),
}
# The host key algorithm a connection asks for (sshd's log): the pinned key's type alone when the
# provider checks the host key, else Go's default list, which puts ECDSA first.
PINNED_DIAL = "ssh-ed25519"
UNPINNED_DIAL = "ecdsa-sha2-nistp256"


def test_sshd_tells_a_dial_that_pins_the_host_key_from_one_that_checks_none(box: Any) -> None:
    """The control of the key rotation's proof: the first contact with a VM the stack has not met
    (the first run's, the rebuild's) checks no host key, and every later step pins it."""
    for up in (box["first_up"], box["rebuild"]["rebuild"]["up"]):
        dials = up["host_key_algorithms"]
        assert dials[0] == UNPINNED_DIAL, dials
        assert set(dials[1:]) == {PINNED_DIAL}, dials
        assert len(dials) == len(up["ssh_connections"])


def test_a_new_ssh_key_reruns_the_host_steps_pinned_and_changes_nothing_on_the_host(box: Any) -> None:
    """The program's SSH key rotated on the same VM (issue 28): the seven host steps run once
    more, over the new key, every one dialing with the pinned host key, first contact included;
    on a host that matches they install nothing, restart nothing and write no file."""
    rotation = box["key_rotation"]
    assert rotation["authorized"]["rc"] == 0, rotation["authorized"]["stderr"]
    up = applied(rotation)
    assert touched(up) == HOST_STEPS
    # As with a k3s bump, the kubeconfig mgmt-read-kubeconfig reads is unknown until it runs, so
    # the preview lists every object on the cluster too; `up` leaves them.
    assert touched(rotation["preview"]) == HOST_STEPS | {"mgmt-kubernetes"} | ON_THE_CLUSTER
    assert {step["op"] for step in up["steps"] if step["op"] not in UNCHANGED} == {"update"}
    assert len(up["ssh_sessions"]) == len(HOST_STEPS), up["ssh_sessions"]
    for session in up["ssh_sessions"]:
        assert session.endswith(f"ssh2: ED25519 {rotation['new_fingerprint']}"), session
    assert up["host_key_algorithms"] == [PINNED_DIAL] * len(up["ssh_connections"])
    assert rotation["pinned"].startswith(f"{PINNED_DIAL} ")
    assert rotation["pinned_after"] == rotation["pinned"]
    assert rotation["recorded"]["pinned"] is True
    assert up["installs"] == []
    assert up["k3s_restarts"] == []
    assert rotation["host_files"] > 0
    assert rotation["written"] == []
    assert up["pve_writes"] == up["k8s_writes"] == []

    # The life's last change, and so the one a zero-change preview follows.
    assert rotation["no_changes_preview"]["rc"] == 0, rotation["no_changes_preview"]["output"][-6000:]
    assert rotation["no_changes_preview"]["ssh_connections"] == []
