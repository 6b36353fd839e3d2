"""The real Cluster API core controllers and webhooks in the lab in a box (issue 30): the operator
stand-in installs each provider's real CRDs from the upstream archives, with their contract labels,
and the real cluster-api-manager v1.12.11 runs against the box's management API server
(e2e/box/cluster_api_core.py). Selected with `pytest -m engine`; needs `build-engine.sh workload`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.box import cluster_api_core, scenarios
from e2e.engine.control_plane import ADMIN_USER, CLUSTER_API_USER
from e2e.engine.netns import in_new_netns

pytestmark = pytest.mark.engine

CONTRACT = "cluster.x-k8s.io/v1beta2"


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("cluster-api-core")
    return in_new_netns("cluster_api_core.core_controllers", str(root), addresses=[scenarios.VM_ADDRESS], timeout=600)


def _writes(core: Any, user: str, verb: str, resource: str) -> list[dict[str, Any]]:
    return [w for w in core["writes"] if (w["user"], w["verb"], w["resource"]) == (user, verb, resource)]


def test_the_operator_installs_the_real_crds_with_their_contract_labels(core: Any) -> None:
    assert core["operator_errors"] == []
    applied = {entry["kind"]: entry["crds"] for entry in core["crds_applied"]}
    assert len(applied["CoreProvider"]) == 13
    assert "machinedeployments.cluster.x-k8s.io" in applied["CoreProvider"]
    assert applied["InfrastructureProvider"] == [
        f"{plural}.infrastructure.cluster.x-k8s.io"
        for plural in ("proxmoxclusters", "proxmoxclustertemplates", "proxmoxmachines", "proxmoxmachinetemplates")
    ]
    assert applied["IPAMProvider"] == []
    assert core["operator_notes"] == [
        "no archive of cluster-api-ipam-provider-in-cluster in ../shared/vendor: its CRDs "
        "(InClusterIPPool, GlobalInClusterIPPool) are not applied"
    ]
    labels = core["crd_labels"]
    assert labels["proxmoxmachinetemplates.infrastructure.cluster.x-k8s.io"][CONTRACT] == "v1alpha2"
    assert labels["kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io"][CONTRACT] == "v1beta2"
    # Upstream's core CRDs carry no contract label: core kinds are never resolved by contract.
    assert CONTRACT not in labels["machinedeployments.cluster.x-k8s.io"]


def test_the_real_webhook_defaults_replicas_to_the_min_size(core: Any) -> None:
    assert core["created"] == {"rc": 0, "stderr": ""}
    assert "replicas" not in cluster_api_core.lab_objects()[-1]["spec"]
    assert core["deployment"]["spec"]["replicas"] == int(cluster_api_core.MIN_SIZE)
    [create] = _writes(core, ADMIN_USER, "create", "machinedeployments")
    assert create["mutated_by"] == ["default.machinedeployment.cluster.x-k8s.io"]
    assert core["webhook_configurations"] == [
        "MutatingWebhookConfiguration/capi-mutating-webhook-configuration",
        "ValidatingWebhookConfiguration/capi-validating-webhook-configuration",
    ]


def test_the_real_controllers_resolve_the_references_by_contract(core: Any) -> None:
    [machine_set] = core["machine_sets"]
    assert [owner["kind"] for owner in machine_set["metadata"]["ownerReferences"]] == ["MachineDeployment"]
    assert _writes(core, CLUSTER_API_USER, "patch", "machinesets")[0]["code"] == 201
    conditions = {c["type"]: c for c in core["cluster"]["status"]["conditions"]}
    # The ProxmoxCluster was read at the version its CRD's contract label names.
    assert conditions["InfrastructureReady"]["reason"] == "NotReady"
    assert conditions["InfrastructureReady"]["message"] == "ProxmoxCluster status.initialization.provisioned is false"
    assert [c["message"] for c in conditions.values() if "contract" in c.get("message", "").lower()] == []
    assert _writes(core, CLUSTER_API_USER, "patch", "proxmoxclusters")
    assert core["v1beta1_requests"] == {}, "something asked for v1beta1: the CRDs need their conversion webhook"


def test_without_the_contract_label_the_infrastructure_cannot_be_resolved(core: Any) -> None:
    # The control: the same objects under another name, once the ProxmoxCluster CRD lost its labels.
    assert cluster_api_core.CONTRACT_ERROR in core["unlabelled"]["log"]
    assert "proxmoxclusters.infrastructure.cluster.x-k8s.io" in core["unlabelled"]["log"]
    assert "ProxmoxCluster" not in core["unlabelled"]["condition"]


def test_scaling_through_the_scale_subresource_makes_a_machine(core: Any) -> None:
    assert core["scaled"] == {"rc": 0, "stderr": ""}
    assert _writes(core, ADMIN_USER, "patch", "machinedeployments/scale")
    [machine] = core["machines"]
    assert machine["spec"]["infrastructureRef"]["kind"] == "ProxmoxMachine"
    assert machine["spec"]["bootstrap"]["configRef"]["kind"] == "KubeadmConfig"
    for resource in ("proxmoxmachines", "kubeadmconfigs", "machines"):
        assert _writes(core, CLUSTER_API_USER, "patch", resource)[0]["code"] == 201, resource


def test_how_long_it_takes(core: Any) -> None:
    print(
        f"manager ready {core['manager_ready_seconds']}s, providers with CRDs {core['providers_seconds']}s, "
        f"MachineSet {core['machine_set_seconds']}s, Machine {core['machine_seconds']}s, box {core['seconds']}s"
    )
    assert core["manager_ready_seconds"] < 60
