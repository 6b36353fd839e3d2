"""lab1 in the box with the real Cluster API core (e2e/box/workload_lab1.py, on
e2e/box/workload_box.py): the operator stand-in installs each provider's real CRDs from the upstream
archives with their contract labels and starts the real cluster-api-manager v1.12.11; lab1's
objects as CAPMOX's template renders them; the real webhook defaulting the replicas, the real
Cluster, MachineDeployment, MachineSet and Machine controllers scaling lab1's workers 0 -> 1 -> 0
through /scale; the stand-ins of e2e/standins/workload/ for what cannot run here; lab1 a second
real control plane with its real scheduler. Selected with `pytest -m engine`; needs
`e2e/engine/build-engine.sh control-plane workload`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.box import scenarios, workload_box, workload_lab1
from e2e.engine.control_plane import ADMIN_USER, CLUSTER_API_USER, PROVIDERS_USER
from e2e.engine.netns import in_new_netns

pytestmark = pytest.mark.engine

CONTRACT = "cluster.x-k8s.io/v1beta2"


@pytest.fixture(scope="module")
def lab1(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("workload-lab1")
    return in_new_netns("workload_lab1.lab1_scaled", str(root), addresses=list(workload_box.ADDRESSES), timeout=600)


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


def _writes(lab1: Any, user: str, verb: str, resource: str) -> list[dict[str, Any]]:
    return [w for w in lab1["writes"] if (w["user"], w["verb"], w["resource"]) == (user, verb, resource)]


def test_nothing_was_refused_and_only_the_unknown_capmox_version_missed(lab1: Any) -> None:
    assert lab1["problems"] == {
        "operator": [],
        "workload": [],
        "webhook_unknown": [],
        "injector": [],
        "charts_unknown": ["GET /capmox/v0.9.2/cluster-template.yaml"],
    }


def test_the_operator_installs_the_real_crds_with_their_contract_labels(lab1: Any) -> None:
    applied = {entry["kind"]: entry["crds"] for entry in lab1["crds_applied"]}
    assert len(applied["CoreProvider"]) == 13
    assert "machinedeployments.cluster.x-k8s.io" in applied["CoreProvider"]
    assert applied["InfrastructureProvider"] == [
        f"{plural}.infrastructure.cluster.x-k8s.io"
        for plural in ("proxmoxclusters", "proxmoxclustertemplates", "proxmoxmachines", "proxmoxmachinetemplates")
    ]
    assert applied["IPAMProvider"] == []
    assert lab1["operator_notes"] == [
        "no archive of cluster-api-ipam-provider-in-cluster in ../shared/vendor: its CRDs "
        "(InClusterIPPool, GlobalInClusterIPPool) are not applied"
    ]
    labels = lab1["crd_labels"]
    assert labels["kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io"][CONTRACT] == "v1beta2"
    # Upstream's core CRDs carry no contract label: core kinds are never resolved by contract.
    assert CONTRACT not in labels["machinedeployments.cluster.x-k8s.io"]


def test_the_real_webhook_defaults_replicas_to_the_min_size(lab1: Any) -> None:
    assert lab1["created"] == {"rc": 0, "stderr": ""}
    assert "replicas" not in workload_lab1.lab1_objects()[-1]["spec"]
    assert lab1["deployment"]["spec"]["replicas"] == int(workload_lab1.MIN_SIZE)
    [create] = _writes(lab1, ADMIN_USER, "create", "machinedeployments")
    assert create["mutated_by"] == ["default.machinedeployment.cluster.x-k8s.io"]
    assert lab1["webhook_configurations"] == [
        "MutatingWebhookConfiguration/capi-mutating-webhook-configuration",
        "ValidatingWebhookConfiguration/capi-validating-webhook-configuration",
    ]
    assert lab1["v1beta1_requests"] == {}, "something asked for v1beta1: the CRDs need their conversion webhook"


def test_the_real_cluster_controller_does_its_part_and_the_stand_ins_theirs(lab1: Any) -> None:
    # Owner references and the endpoint are the manager's writes, the providers' status theirs.
    for resource in ("proxmoxclusters", "kubeadmcontrolplanes", "clusters"):
        assert _writes(lab1, CLUSTER_API_USER, "patch", resource), resource
    for resource in ("proxmoxclusters/status", "kubeadmcontrolplanes/status"):
        assert [w["user"] for w in lab1["writes"] if w["resource"] == resource] == [PROVIDERS_USER], resource
    cluster = lab1["cluster"]
    assert cluster["spec"]["controlPlaneEndpoint"] == {"host": scenarios.LAB1_ADDRESS, "port": 6443}
    assert cluster["status"]["initialization"] == {"infrastructureProvisioned": True, "controlPlaneInitialized": True}
    assert _condition(cluster, "ControlPlaneInitialized")["status"] == "True"
    [machine_set] = lab1["machine_sets"]
    assert [owner["kind"] for owner in machine_set["metadata"]["ownerReferences"]] == ["MachineDeployment"]


def test_lab1_kubeconfig_is_written_where_cluster_api_reads_it_and_works(lab1: Any) -> None:
    secret = lab1["secret"]
    assert secret["type"] == "cluster.x-k8s.io/secret"
    assert secret["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": "lab1"}
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "KubeadmControlPlane"
    assert secret["keys"] == ["value"]
    assert lab1["readyz"] == "ok"


def test_the_control_plane_node_takes_what_tolerates_it(lab1: Any) -> None:
    node = lab1["control_node"]
    assert node["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] == ""
    assert node["spec"]["taints"] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert node["spec"]["providerID"].startswith("proxmox://")
    # The control-plane ProxmoxMachineTemplate's sizing.
    assert node["status"]["capacity"] == {"cpu": "4", "memory": "4Gi", "ephemeral-storage": "30Gi", "pods": "110"}
    # Cilium's agent and operator (the stand-in chart, the operator at one replica) and CoreDNS.
    placed = sorted(
        (pod["metadata"]["labels"].get("name") or pod["metadata"]["labels"]["k8s-app"], pod["spec"]["nodeName"])
        for pod in lab1["system_pods"]
    )
    control = node["metadata"]["name"]
    assert placed == [("cilium", control), ("cilium-operator", control), ("kube-dns", control), ("kube-dns", control)]


def test_scaling_to_one_makes_a_machine_whose_node_the_real_controller_finds(lab1: Any) -> None:
    assert lab1["scaled_up"] == {"rc": 0, "stderr": ""}
    machine, proxmox, node = lab1["machine"], lab1["proxmox_machine"], lab1["node"]
    assert machine["status"]["phase"] == "Running"
    assert machine["status"]["nodeRef"]["name"] == node["metadata"]["name"]
    assert machine["spec"]["providerID"] == proxmox["spec"]["providerID"] == node["spec"]["providerID"]
    assert [o["kind"] for o in proxmox["metadata"]["ownerReferences"]] == ["Machine"]
    assert [o["kind"] for o in lab1["kubeadm_config"]["metadata"]["ownerReferences"]] == ["Machine"]
    for resource in ("proxmoxmachines", "kubeadmconfigs", "machines"):
        assert _writes(lab1, CLUSTER_API_USER, "patch", resource)[0]["code"] == 201, resource
    # The real Machine controller synced the Node and dropped Cluster API's uninitialized taint.
    assert node["metadata"]["annotations"]["cluster.x-k8s.io/machine"] == machine["metadata"]["name"]
    assert "taints" not in node["spec"] or node["spec"]["taints"] == []
    # 2 sockets * 2 cores, 4096 MiB (which the API server writes as 4Gi), the 30 GB boot volume.
    assert node["status"]["capacity"] == {"cpu": "4", "memory": "4Gi", "ephemeral-storage": "30Gi", "pods": "110"}
    assert node["status"]["nodeInfo"]["kubeletVersion"] == workload_lab1.VERSION
    first, later = lab1["lease_renewed"]
    assert later > first


def test_the_real_scheduler_places_what_fits_and_leaves_the_rest_unschedulable(lab1: Any) -> None:
    assert lab1["running"]["spec"]["nodeName"] == lab1["node"]["metadata"]["name"]
    assert lab1["running"]["status"]["phase"] == "Running"
    scheduled = _condition(lab1["pending"], "PodScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert "Insufficient cpu" in scheduled["message"]


def test_scaling_to_zero_takes_the_machine_its_vm_and_its_node(lab1: Any) -> None:
    assert lab1["scaled_down"] == {"rc": 0, "stderr": ""}
    assert len(_writes(lab1, ADMIN_USER, "patch", "machinedeployments/scale")) == 2
    assert lab1["nodes_after"] == [lab1["control_node"]["metadata"]["name"]]
    worker = lab1["proxmox_machine"]["metadata"]["name"]
    done = [entry["what"] for entry in lab1["timeline"] if entry["object"].endswith(f"/{worker}")]
    assert done[-1] == "destroyed"


def test_the_capmox_template_is_served_for_v0_9_0_and_v0_9_1_only(lab1: Any) -> None:
    assets = lab1["capmox_assets"]
    assert assets["v0.9.0"] == assets["v0.9.1"]
    assert assets["v0.9.1"][0] == 200
    assert "kind: ProxmoxMachineTemplate" in assets["v0.9.1"][1]
    assert assets["v0.9.2"][0] == 404


def test_without_the_contract_label_the_infrastructure_cannot_be_resolved(lab1: Any) -> None:
    # The control: a second Cluster, once the ProxmoxCluster CRD lost its labels.
    assert workload_lab1.CONTRACT_ERROR in lab1["unlabelled"]["log"]
    assert "proxmoxclusters.infrastructure.cluster.x-k8s.io" in lab1["unlabelled"]["log"]
    assert "ProxmoxCluster" not in lab1["unlabelled"]["condition"]


def test_how_long_it_takes(lab1: Any) -> None:
    print("times:", lab1["times"], "lab1 up in", lab1["started_in"], "manager ready", lab1["manager_ready_seconds"])
    assert lab1["manager_ready_seconds"] < 60
