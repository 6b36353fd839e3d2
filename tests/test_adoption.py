"""Taking over the lab the playbook built (`adopt`): what is imported under which id, that the
import forces nothing on the running objects, what is never created, and the guards that hold in
every mode (no reboot by the provider, nothing on the cluster uninstalled by Pulumi)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import harness
import pytest

from components.adoption import PROVIDER_DEFAULTED, VM_INPUTS
from components.host_script import script_command
from components.k3s_node import render_k3s_config
from components.settings import SettingsError
from tools import adoption_check

# lab1 was made by hand: taking its Cluster API objects over is issue 31, so adopting the lab
# declares no workload cluster yet (declared, its objects would be creates, which the adoption
# check refuses: test_adopting_with_a_workload_cluster_declared_is_refused_by_the_check).
ADOPT = {"adopt": True, "capmoxExistingSecret": "capmox-variables", "workloadClusters": []}
VM = ("proxmoxve:index/vmLegacy:VmLegacy", "mgmt-vm")
IMAGE = ("proxmoxve:download/file:File", "mgmt-image")
RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"
OPERATOR_API = "kubernetes:operator.cluster.x-k8s.io/v1alpha2"
CREDENTIALS = ("kubernetes:core/v1:Secret", "mgmt-capmox-credentials")
# What the program puts on the cluster, beside the Kubernetes resources themselves.
CLUSTER_COMPONENTS = {"homelab:index:ClusterApi", "homelab:index:ReadOnlyAccess"}

# The playbook's objects, by the ids Pulumi imports them under.
IMPORTED = {
    VM: "pv1-1/201",
    (RELEASE, "mgmt-cert-manager"): "cert-manager/cert-manager",
    (RELEASE, "mgmt-cluster-api-operator"): "capi-operator-system/cluster-api-operator",
    (NAMESPACE, "mgmt-ns-capi-system"): "capi-system",
    (NAMESPACE, "mgmt-ns-capi-kubeadm-bootstrap-system"): "capi-kubeadm-bootstrap-system",
    (NAMESPACE, "mgmt-ns-capi-kubeadm-control-plane-system"): "capi-kubeadm-control-plane-system",
    (NAMESPACE, "mgmt-ns-capmox-system"): "capmox-system",
    (NAMESPACE, "mgmt-ns-capi-ipam-in-cluster-system"): "capi-ipam-in-cluster-system",
    (f"{OPERATOR_API}:CoreProvider", "mgmt-core-cluster-api"): "capi-system/cluster-api",
    (f"{OPERATOR_API}:BootstrapProvider", "mgmt-bootstrap-kubeadm"): "capi-kubeadm-bootstrap-system/kubeadm",
    (f"{OPERATOR_API}:ControlPlaneProvider", "mgmt-controlplane-kubeadm"): (
        "capi-kubeadm-control-plane-system/kubeadm"
    ),
    (f"{OPERATOR_API}:InfrastructureProvider", "mgmt-infrastructure-proxmox"): "capmox-system/proxmox",
    (f"{OPERATOR_API}:IPAMProvider", "mgmt-ipam-in-cluster"): "capi-ipam-in-cluster-system/in-cluster",
}
KEPT = [key for key in IMPORTED if key != VM]
ADOPTION_DOC = (Path(__file__).resolve().parent.parent / "docs" / "adoption.md").read_text()


@pytest.fixture(scope="module")
def adopted() -> harness.Run:
    return harness.run_program(ADOPT)


@pytest.fixture(scope="module")
def lab() -> harness.Run:
    return harness.run_program()


def test_exactly_the_playbooks_objects_are_imported_under_their_live_ids(adopted: harness.Run) -> None:
    imports = {key: r.import_id for key, r in adopted.resources.items() if r.import_id}
    assert imports == IMPORTED


def test_nothing_is_imported_outside_adoption(lab: harness.Run) -> None:
    assert [key for key, r in lab.resources.items() if r.import_id] == []


def test_the_vm_is_taken_as_it_is(adopted: harness.Run, lab: harness.Run) -> None:
    vm = adopted.get(*VM)
    assert vm.ignore_changes == VM_INPUTS
    assert vm.protect is True
    assert "importFrom" not in vm.plain["disks"][0]


def test_adoption_ignores_every_input_the_program_sets_on_the_vm(lab: harness.Run) -> None:
    """A new VM input not listed would be forced on the adopted VM, perhaps with a reboot; so
    would the provider's defaults for those the program leaves out (the box's adoption showed an
    added cdrom and watchdog rebooting the playbook's VM)."""
    assert set(VM_INPUTS) == set(lab.get(*VM).plain) - {"nodeName", "vmId"} | set(PROVIDER_DEFAULTED)
    assert not set(PROVIDER_DEFAULTED) & set(lab.get(*VM).plain)


def test_adoption_downloads_no_image(adopted: harness.Run) -> None:
    assert IMAGE not in adopted.names()


@pytest.mark.parametrize("key", KEPT, ids=lambda key: key[1])
def test_adopted_cluster_objects_force_nothing(adopted: harness.Run, key: tuple[str, str]) -> None:
    resource = adopted.get(*key)
    set_by_program = set(resource.plain) - {"apiVersion", "kind"}
    assert set_by_program <= set(resource.ignore_changes), set_by_program - set(resource.ignore_changes)


def test_the_playbooks_capmox_secret_stays_in_use(adopted: harness.Run) -> None:
    assert CREDENTIALS not in adopted.names()
    infrastructure = adopted.get(f"{OPERATOR_API}:InfrastructureProvider", "mgmt-infrastructure-proxmox")
    assert infrastructure.plain["spec"]["configSecret"] == {"name": "capmox-variables"}
    # Nor is CAPMOX's manager rolled for it (components/cluster_api.py `credentials_rollout`).
    assert "deployment" not in infrastructure.plain["spec"]


def test_the_program_keeps_its_own_readonly_objects_apart_from_the_inspectors(adopted: harness.Run) -> None:
    names = {
        r.plain["metadata"]["name"]
        for r in adopted.resources.values()
        if r.type.startswith("kubernetes:rbac.authorization.k8s.io/") or r.type == "kubernetes:core/v1:ServiceAccount"
    }
    assert names == {"lab-mgmt-readonly"}
    assert not any(r.import_id for r in adopted.resources.values() if "readonly" in r.name)


def test_the_adoption_preview_passes_the_adoption_check(adopted: harness.Run) -> None:
    """What tools/adoption_check.py lets through: imports, and creates only of what is new to
    the lab (host steps, providers, the program's own read-only access)."""
    steps = [{"op": "import" if r.import_id else "create", "urn": r.urn} for r in adopted.resources.values()]
    assert adoption_check.problems(steps) == []
    assert {r.plain["metadata"]["name"] for r in adopted.of_type("kubernetes:core/v1:Secret")} == {
        "lab-mgmt-readonly-token-1"
    }


def test_the_adoption_preview_with_a_kubeconfig_file_passes_the_adoption_check(tmp_path: Path) -> None:
    """The admin kubeconfig file that `kubeconfigPath` names is on this machine, not in the lab:
    its writer is new, as the host steps are."""
    run = harness.run_program({**ADOPT, "kubeconfigPath": str(tmp_path / "lab-mgmt.yaml")})
    steps = [{"op": "import" if r.import_id else "create", "urn": r.urn} for r in run.resources.values()]
    assert ("command:local:Command", "mgmt-kubeconfig-file") in run.names()
    assert adoption_check.problems(steps) == []


def test_adopting_with_a_workload_cluster_declared_is_refused_by_the_check() -> None:
    run = harness.run_program({**ADOPT, "workloadClusters": harness.stack_workload_clusters()})
    steps = [{"op": "import" if r.import_id else "create", "urn": r.urn} for r in run.resources.values()]
    refused = {problem.rsplit("::", 1)[1] for problem in adoption_check.problems(steps)}
    # Its seven Cluster API objects and Cilium's release exist in the lab: never created while adopting.
    assert {
        "lab1-cluster",
        "lab1-proxmox-cluster",
        "lab1-control-plane",
        "lab1-workers",
        "lab1-worker-config",
    } < refused
    assert "lab1-cilium" in refused
    templates = {name for name in refused if name.startswith(("lab1-worker-", "lab1-control-plane-"))}
    assert len(templates - {"lab1-worker-config"}) == 2


def test_the_adoption_check_catches_a_lab_object_left_without_its_import(adopted: harness.Run) -> None:
    steps = [{"op": "create", "urn": r.urn} for r in adopted.resources.values()]
    assert len(adoption_check.problems(steps)) == len(IMPORTED)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"adopt": True}, "lab-mgmt:adopt: true needs capmoxExistingSecret"),
        ({**ADOPT, "vmProtected": False}, "lab-mgmt:adopt: true needs vmProtected=true"),
        (
            {**ADOPT, "vmProtected": False, "vmRebuildFromImage": True},
            "lab-mgmt:adopt: true cannot go with vmRebuildFromImage=true",
        ),
        ({"capmoxExistingSecret": "Not_A_Name"}, "lab-mgmt:capmoxExistingSecret: 'Not_A_Name' is not"),
        ({"adoptClusterObjects": False}, "lab-mgmt:adoptClusterObjects: false needs adopt=true"),
    ],
    ids=["no-existing-secret", "unprotected", "rebuild", "bad-secret-name", "cluster-objects-without-adopt"],
)
def test_settings_that_would_change_an_adopted_lab_are_refused(overrides: dict[str, object], expected: str) -> None:
    with pytest.raises(SettingsError, match=expected):
        harness.run_program(overrides)


# --- guards in every mode ------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [{}, ADOPT], ids=["built", "adopted"])
def test_the_provider_never_reboots_the_vm_by_itself(overrides: dict[str, object]) -> None:
    assert harness.run_program(overrides).get(*VM).plain["rebootAfterUpdate"] is False


@pytest.mark.parametrize("key", KEPT, ids=lambda key: key[1])
def test_no_pulumi_action_uninstalls_what_runs_on_the_cluster(lab: harness.Run, key: tuple[str, str]) -> None:
    resource = lab.get(*key)
    assert resource.retain_on_delete is True
    assert resource.protect is True


def test_leaving_adoption_keeps_every_object_and_drops_only_the_import_ids(
    adopted: harness.Run,
) -> None:
    """Turning `adopt` off replaces nothing: the resources keep their names and types; their
    inputs become the program's own, which the converging runs in docs/adoption.md apply."""
    converged = harness.run_program({"capmoxExistingSecret": "capmox-variables", "workloadClusters": []})
    assert adopted.names() - converged.names() == set()
    assert converged.names() - adopted.names() == {IMAGE}
    assert not any(r.import_id for r in converged.resources.values())


def test_the_host_steps_report_a_difference_instead_of_changing_the_adopted_host(
    adopted: harness.Run, lab: harness.Run
) -> None:
    config = base64.b64encode(render_k3s_config("192.168.4.21").encode()).decode()
    steps = {
        "mgmt-k3s-config": ("k3s_config.sh", config),
        "mgmt-k3s-install": ("k3s_install.sh", "v1.35.8+k3s1"),
    }
    for name, (script, argument) in steps.items():
        assert adopted.get("command:remote:Command", name).plain["create"] == script_command(script, argument, "adopt")
        assert lab.get("command:remote:Command", name).plain["create"] == script_command(script, argument)


def test_every_object_that_leaving_adoption_changes_has_its_convergence_run(adopted: harness.Run) -> None:
    """docs/adoption.md step 8 promises that after its runs a preview without --target finds
    nothing to change: each object that turning `adopt` off (and dropping capmoxExistingSecret)
    changes must be the target of one of them."""
    converged = harness.run_program({"workloadClusters": []})
    step_8 = ADOPTION_DOC.split("## 8.", 1)[1].split("\n## ", 1)[0]
    targeted = set(re.findall(r"`(mgmt-[a-z0-9-]+)`", step_8))
    # Named as groups: "the five CR URNs", "the five `mgmt-ns-…` URNs".
    if "the five CR URNs" in step_8:
        targeted |= {name for type_, name in KEPT if type_.startswith(OPERATOR_API)}
    if "the five `mgmt-ns-…` URNs" in step_8:
        targeted |= {name for type_, name in KEPT if type_ == NAMESPACE}
    assert {name for _, name in harness.changed(adopted, converged)} - targeted == set()


def test_the_host_steps_change_only_their_mode_when_adoption_ends(adopted: harness.Run) -> None:
    converged = harness.run_program()
    changed_steps = {key[1] for key in harness.changed(adopted, converged) if key[0] == "command:remote:Command"}
    assert changed_steps == {"mgmt-k3s-config", "mgmt-k3s-install"}
    for name in changed_steps:
        before, after = (
            adopted.get("command:remote:Command", name).plain,
            converged.get("command:remote:Command", name).plain,
        )
        assert {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)} == {"create"}


@pytest.mark.parametrize(
    ("row", "what"),
    [("`PROXMOX_URL` form", "capmoxExistingSecret"), ("Proxmox VE version", "mgmt-image")],
    ids=["proxmox-url", "pve-version"],
)
def test_a_step_the_table_refers_to_is_the_one_that_does_it(row: str, what: str) -> None:
    (line,) = [line for line in ADOPTION_DOC.splitlines() if line.startswith(f"| {row}")]
    (reference,) = re.findall(r"step (\d+)\.(\d+)", line)
    section, item = reference
    items = ADOPTION_DOC.split(f"## {section}.", 1)[1].split("\n## ", 1)[0]
    (text,) = re.findall(rf"^{item}\. (.*?)(?=^\d+\. |^\S|\Z)", items, re.MULTILINE | re.DOTALL)
    assert what in text


# --- the first adoption run: the VM and the k3s node, not the cluster's objects ------------------


def test_the_first_adoption_run_registers_nothing_on_the_cluster(adopted: harness.Run) -> None:
    """docs/adoption.md step 4's first run: the Kubernetes provider's kubeconfig is read in this
    run, so it plans no Kubernetes object; the VM is imported and the node's steps run."""
    first = harness.run_program({**ADOPT, "adoptClusterObjects": False})
    assert not [r.name for r in first.resources.values() if r.type.startswith("kubernetes:")]
    assert not [r.name for r in first.resources.values() if r.type in CLUSTER_COMPONENTS]
    assert first.get(*VM).import_id == IMPORTED[VM]
    assert [r.name for r in first.resources.values() if r.import_id] == ["mgmt-vm"]
    assert first.get("pulumi:providers:kubernetes", "mgmt-kubernetes")
    # It registers no release, so it needs no chart.
    assert first.chart_requests == []
    assert not {"readonlyKubeconfig", "workloadReadonlyKubeconfigs", "providerVersions"} & set(first.outputs)
    # Everything it registers, the second run registers the same; that run adds the cluster part.
    assert first.names() < adopted.names()
    assert {r.type for r in adopted.resources.values()} >= CLUSTER_COMPONENTS


def test_the_default_takes_the_cluster_objects_in_the_same_adoption_run(adopted: harness.Run) -> None:
    assert harness.run_program({**ADOPT, "adoptClusterObjects": True}).names() == adopted.names()
