"""lab1 as a second real control plane in the box (e2e/box/workload_lab1.py): the management
cluster with the real Cluster API v1.12.11 and CAPMOX v0.9.0 CRDs, lab1's objects as CAPMOX's
template renders them, and the stand-ins of e2e/standins/workload/ for what cannot run here.
Selected with `pytest -m engine`; needs `e2e/engine/build-engine.sh control-plane workload`
(kube-scheduler).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.box import scenarios
from e2e.engine.netns import in_new_netns

pytestmark = pytest.mark.engine

WORKER = "lab1-workers-a1"


@pytest.fixture(scope="module")
def lab1(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("workload-lab1")
    return in_new_netns(
        "workload_lab1.lab1_nodes_and_pods",
        str(root),
        addresses=[scenarios.VM_ADDRESS, scenarios.LAB1_ADDRESS],
        timeout=600,
    )


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


def test_the_stand_ins_refused_nothing(lab1: Any) -> None:
    assert lab1["errors"] == []
    assert "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io" in lab1["crds"]
    assert "proxmoxmachines.infrastructure.cluster.x-k8s.io" in lab1["crds"]


def test_lab1_control_plane_is_initialized_per_the_contract(lab1: Any) -> None:
    status = lab1["kcp_status"]
    assert status["initialization"] == {"controlPlaneInitialized": True}
    assert (status["replicas"], status["readyReplicas"], status["availableReplicas"], status["upToDateReplicas"]) == (
        1,
        1,
        1,
        1,
    )
    assert status["version"] == "v1.35.9"
    assert _condition({"status": status}, "Available")["status"] == "True"


def test_lab1_kubeconfig_is_written_where_cluster_api_writes_it_and_works(lab1: Any) -> None:
    secret = lab1["secret"]
    assert secret["type"] == "cluster.x-k8s.io/secret"
    assert secret["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": "lab1"}
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "KubeadmControlPlane"
    assert secret["keys"] == ["value"]
    assert lab1["readyz"] == "ok"


def test_a_worker_registers_with_the_providerid_and_capacity_of_its_template(lab1: Any) -> None:
    node, machine = lab1["node"], lab1["proxmox_machine"]
    assert machine["spec"]["providerID"].startswith("proxmox://")
    assert node["spec"]["providerID"] == machine["spec"]["providerID"]
    assert machine["status"]["initialization"] == {"provisioned": True}
    assert {"type": "InternalIP", "address": "192.168.4.50"} in machine["status"]["addresses"]
    # 2 sockets * 2 cores, 4096 MiB (which the API server writes as 4Gi), the 30 GB boot volume.
    assert node["status"]["capacity"] == {"cpu": "4", "memory": "4Gi", "ephemeral-storage": "30Gi", "pods": "110"}
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.35.9"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == WORKER
    first, later = lab1["lease_renewed"]
    assert later > first


def test_the_real_scheduler_places_what_fits_and_leaves_the_rest_unschedulable(lab1: Any) -> None:
    assert lab1["running"]["spec"]["nodeName"] == WORKER
    assert lab1["running"]["status"]["phase"] == "Running"
    pending = lab1["pending"]
    assert pending["status"]["phase"] == "Pending"
    scheduled = _condition(pending, "PodScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert "Insufficient cpu" in scheduled["message"]


def test_the_node_goes_with_its_proxmoxmachine(lab1: Any) -> None:
    assert [entry["what"] for entry in lab1["timeline"] if entry["object"].endswith(WORKER)][-1] == "destroyed"
    print("times:", lab1["times"], "lab1 control plane up in", lab1["started_in"])
