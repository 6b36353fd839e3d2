"""The workload clusters declared in workloadClusters: their Cluster API objects on the management
cluster (WorkloadCluster), and read-only access into each, through its own Kubernetes provider
from CAPI's admin kubeconfig Secret."""

from __future__ import annotations

import harness
import pytest
from test_readonly_access import (
    ACCOUNT,
    BINDING,
    CLUSTER_ROLE,
    SECRET,
    parse_kubeconfig,
    secret_output,
    uses_provider,
)

COMPONENT = "homelab:index:WorkloadClusterAccess"
CLUSTER_COMPONENT = "homelab:index:WorkloadCluster"
CAPI = "kubernetes:cluster.x-k8s.io/v1beta2"
PMT = "kubernetes:infrastructure.cluster.x-k8s.io/v1alpha2:ProxmoxMachineTemplate"
K8S_PROVIDER = "pulumi:providers:kubernetes"
LAB1_RBAC = [
    (CLUSTER_ROLE, "lab1-readonly-role"),
    (ACCOUNT, "lab1-readonly-account"),
    (BINDING, "lab1-readonly-binding"),
    (SECRET, "lab1-readonly-token"),
]


@pytest.fixture(scope="module")
def without() -> harness.Run:
    return harness.run_program({"workloadClusters": []})


@pytest.fixture(scope="module")
def lab1() -> harness.Run:
    return harness.run_program()  # the lab stack declares lab1


def test_no_workload_clusters_by_default(without: harness.Run) -> None:
    assert without.of_type(COMPONENT) == []
    assert [name for _, name in without.names() if name.startswith("lab1")] == []
    assert {r.name for r in without.of_type(K8S_PROVIDER)} == {"mgmt-kubernetes"}
    assert secret_output(without, "workloadReadonlyKubeconfigs") == {}


def test_component(lab1: harness.Run) -> None:
    assert [r.name for r in lab1.of_type(COMPONENT)] == ["lab1"]
    assert [r.name for r in lab1.of_type(CLUSTER_COMPONENT)] == ["lab1"]


def test_provider_uses_the_clusters_admin_kubeconfig_as_a_secret(lab1: harness.Run) -> None:
    provider = lab1.get(K8S_PROVIDER, "lab1-kubernetes")
    assert set(provider.inputs["kubeconfig"]) == {harness.SECRET}
    # Read from the `value` key of CAPI's Secret, base64-decoded.
    assert provider.plain["kubeconfig"] == harness.WORKLOAD_KUBECONFIG
    assert provider.plain["clusterIdentifier"] == "default/lab1"
    assert provider.parent == lab1.get(COMPONENT, "lab1").urn


@pytest.mark.parametrize("key", LAB1_RBAC, ids=lambda key: key[1])
def test_rbac_objects_are_created_inside_the_workload_cluster(lab1: harness.Run, key: tuple[str, str]) -> None:
    resource = lab1.get(*key)
    assert uses_provider(lab1, resource, "lab1-kubernetes")
    assert "lab1-kubernetes" in resource.provider
    assert "mgmt-kubernetes" not in resource.provider


def test_same_account_as_on_the_management_cluster(lab1: harness.Run) -> None:
    for kind, name in LAB1_RBAC:
        mgmt = lab1.get(kind, name.replace("lab1-", "mgmt-", 1))
        assert lab1.get(kind, name).plain == mgmt.plain, name


def test_workload_kubeconfig_output(lab1: harness.Run) -> None:
    kubeconfigs = secret_output(lab1, "workloadReadonlyKubeconfigs")
    assert set(kubeconfigs) == {"lab1"}
    kubeconfig = parse_kubeconfig(kubeconfigs["lab1"])
    assert kubeconfig.current_context == "lab1-ro"
    assert kubeconfig.server == parse_kubeconfig(harness.WORKLOAD_KUBECONFIG).server == "https://192.168.4.40:6443"
    assert kubeconfig.user == {"token": harness.SA_TOKEN}
    assert "client-key-data" not in kubeconfigs["lab1"]


def test_adding_a_workload_cluster_only_adds(without: harness.Run, lab1: harness.Run) -> None:
    added = harness.changed(without, lab1)
    assert added
    assert added.isdisjoint(without.names())
    cluster_objects = {name for _, name in added if name.startswith("lab1-") and "-readonly" not in name}
    assert {name for _, name in added} == {
        "lab1",
        "lab1-kubernetes",
        "lab1-readonly",
        "lab1-admin-kubeconfig",  # a read of CAPI's Secret, which stays CAPI's
        *(name for _, name in LAB1_RBAC),
        *cluster_objects,
    }
    assert len(cluster_objects - {"lab1-kubernetes", "lab1-admin-kubeconfig"}) == 7


def custom_resources(run: harness.Run) -> list[harness.Resource]:
    component = run.get(CLUSTER_COMPONENT, "lab1").urn
    return [r for r in run.resources.values() if r.parent == component]


def test_the_seven_objects_are_on_the_management_cluster_in_lab1s_namespace(lab1: harness.Run) -> None:
    objects = custom_resources(lab1)
    assert sorted(r.plain["kind"] for r in objects) == sorted(
        [
            "Cluster",
            "ProxmoxCluster",
            "KubeadmControlPlane",
            "ProxmoxMachineTemplate",
            "ProxmoxMachineTemplate",
            "MachineDeployment",
            "KubeadmConfigTemplate",
        ]
    )
    mgmt = lab1.get(K8S_PROVIDER, "mgmt-kubernetes").urn
    for resource in objects:
        assert resource.plain["metadata"]["namespace"] == "default", resource.name
        assert resource.provider.startswith(mgmt + "::"), resource.name


def test_every_object_waits_for_the_providers(lab1: harness.Run) -> None:
    providers = [r for r in lab1.resources.values() if r.type.startswith("kubernetes:operator.cluster.x-k8s.io")]
    assert len(providers) == 5
    for resource in custom_resources(lab1):
        for provider in providers:
            assert provider.urn in resource.dependencies, (resource.name, provider.name)


def test_the_machine_deployment_leaves_replicas_to_the_autoscaler(lab1: harness.Run) -> None:
    deployment = lab1.get(f"{CAPI}:MachineDeployment", "lab1-workers")
    assert "replicas" not in deployment.plain["spec"]
    assert deployment.ignore_changes == []
    assert deployment.plain["spec"]["selector"] == {}
    assert deployment.plain["metadata"]["annotations"] == {
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "0",
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "3",
        "capacity.cluster-autoscaler.kubernetes.io/cpu": "8",
        "capacity.cluster-autoscaler.kubernetes.io/memory": "16384Mi",
        "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk": "100Gi",
        "capacity.cluster-autoscaler.kubernetes.io/maxPods": "110",
    }


def test_the_machine_templates_carry_a_digest_and_come_before_their_referrers(lab1: harness.Run) -> None:
    templates = {r.plain["metadata"]["name"]: r for r in lab1.of_type(PMT)}
    worker = next(name for name in templates if name.startswith("lab1-worker-"))
    control_plane = next(name for name in templates if name.startswith("lab1-control-plane-"))
    assert templates[worker].name == worker
    deployment = lab1.get(f"{CAPI}:MachineDeployment", "lab1-workers")
    assert deployment.plain["spec"]["template"]["spec"]["infrastructureRef"]["name"] == worker
    assert templates[worker].urn in deployment.dependencies
    kcp = lab1.get("kubernetes:controlplane.cluster.x-k8s.io/v1beta2:KubeadmControlPlane", "lab1-control-plane")
    assert kcp.plain["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["name"] == control_plane
    assert templates[control_plane].urn in kcp.dependencies


def test_a_worker_sizing_change_is_a_new_worker_template_only(lab1: harness.Run) -> None:
    [cluster] = harness.stack_workload_clusters()
    bigger = harness.run_program({"workloadClusters": [{**cluster, "workers": {"maxSize": 3, "memoryMib": 32768}}]})
    changed = {name for _, name in harness.changed(lab1, bigger)}
    old_worker = next(r.name for r in lab1.of_type(PMT) if r.name.startswith("lab1-worker-"))
    new_worker = next(r.name for r in bigger.of_type(PMT) if r.name.startswith("lab1-worker-"))
    assert old_worker != new_worker
    assert changed == {old_worker, new_worker, "lab1-workers"}


def test_the_cluster_is_done_when_its_control_plane_is_initialized(lab1: harness.Run) -> None:
    cluster = lab1.get(f"{CAPI}:Cluster", "lab1-cluster")
    assert cluster.plain["metadata"]["annotations"] == {"pulumi.com/waitFor": "condition=ControlPlaneInitialized"}
    assert cluster.custom_timeouts == {"create": "30m", "update": "30m"}
    assert cluster.plain["spec"]["clusterNetwork"]["pods"] == {"cidrBlocks": ["10.244.0.0/16"]}
    assert cluster.plain["spec"]["clusterNetwork"]["services"] == {"cidrBlocks": ["10.96.0.0/12"]}
