"""The workload clusters declared in workloadClusters (WorkloadCluster): their Cluster API objects
on the management cluster, checked first not to be someone else's; and, through the cluster's own
Kubernetes provider from CAPI's admin kubeconfig Secret, Cilium and read-only access inside it;
cluster-autoscaler beside its objects."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

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

from components.cluster_takeover import object_path
from components.cluster_template import ClusterTemplateError
from components.hand_made_clusters import STACK_MARK, HandMadeClusterError

CLUSTER_COMPONENT = "homelab:index:WorkloadCluster"
CAPI = "kubernetes:cluster.x-k8s.io/v1beta2"
PMT = "kubernetes:infrastructure.cluster.x-k8s.io/v1alpha2:ProxmoxMachineTemplate"
K8S_PROVIDER = "pulumi:providers:kubernetes"
CUSTOM_RESOURCE_TYPES = tuple(
    f"kubernetes:{prefix}cluster.x-k8s.io/" for prefix in ("", "controlplane.", "bootstrap.", "infrastructure.")
)
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
    assert without.of_type(CLUSTER_COMPONENT) == []
    assert [name for _, name in without.names() if name.startswith("lab1")] == []
    assert {r.name for r in without.of_type(K8S_PROVIDER)} == {"mgmt-kubernetes"}
    assert secret_output(without, "workloadReadonlyKubeconfigs") == {}


def test_component(lab1: harness.Run) -> None:
    component = lab1.get(CLUSTER_COMPONENT, "lab1")
    for part in ("homelab:index:Cilium", "homelab:index:ClusterAutoscaler", "homelab:index:ReadOnlyAccess"):
        assert [r.parent for r in lab1.of_type(part) if r.name.startswith("lab1")] == [component.urn], part


def test_provider_uses_the_clusters_admin_kubeconfig_as_a_secret(lab1: harness.Run) -> None:
    provider = lab1.get(K8S_PROVIDER, "lab1-kubernetes")
    assert set(provider.inputs["kubeconfig"]) == {harness.SECRET}
    # Read from the `value` key of CAPI's Secret, base64-decoded.
    assert provider.plain["kubeconfig"] == harness.WORKLOAD_KUBECONFIG
    assert provider.plain["clusterIdentifier"] == "default/lab1"
    assert provider.parent == lab1.get(CLUSTER_COMPONENT, "lab1").urn


def test_what_runs_inside_the_cluster_is_deleted_before_its_cluster(lab1: harness.Run) -> None:
    """The provider comes from a read of the kubeconfig Secret, whose dependencies the SDK drops:
    without its own on the Cluster, removing a cluster raced Cilium's uninstall against the
    Cluster's deletion."""
    provider = lab1.get(K8S_PROVIDER, "lab1-kubernetes")
    assert lab1.get(f"{CAPI}:Cluster", "lab1-cluster").urn in provider.dependencies


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
    assert len(cluster_objects - {"lab1-kubernetes", "lab1-admin-kubeconfig", "lab1-cilium", "lab1-autoscaler"}) == 7


def custom_resources(run: harness.Run) -> list[harness.Resource]:
    component = run.get(CLUSTER_COMPONENT, "lab1").urn
    return [r for r in run.resources.values() if r.parent == component and r.type.startswith(CUSTOM_RESOURCE_TYPES)]


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
        **harness.MANAGED,
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


def test_the_cluster_is_done_when_its_control_plane_is_initialized_and_marked_as_this_stack_s(
    lab1: harness.Run,
) -> None:
    cluster = lab1.get(f"{CAPI}:Cluster", "lab1-cluster")
    assert cluster.plain["metadata"]["annotations"] == {
        "pulumi.com/waitFor": harness.waits_for("condition=ControlPlaneInitialized"),
        STACK_MARK: "organization/lab-mgmt/lab",
        **harness.MANAGED,
    }
    assert cluster.custom_timeouts == {"create": "30m", "update": "30m"}
    assert cluster.plain["spec"]["clusterNetwork"]["pods"] == {"cidrBlocks": ["10.244.0.0/16"]}
    assert cluster.plain["spec"]["clusterNetwork"]["services"] == {"cidrBlocks": ["10.96.0.0/12"]}


# --- Cilium, cluster-autoscaler and the guard ------------------------------------------------------

RELEASE = "kubernetes:helm.sh/v3:Release"
CLUSTER_PATH = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters/lab1"


def test_cilium_is_installed_inside_the_cluster_once_its_control_plane_is_initialized(lab1: harness.Run) -> None:
    cilium = lab1.get(RELEASE, "lab1-cilium")
    assert uses_provider(lab1, cilium, "lab1-kubernetes")
    assert (cilium.plain["chart"], cilium.plain["namespace"], cilium.plain["name"]) == (
        "cilium-1.19.8.tgz",
        "kube-system",
        "cilium",
    )
    assert cilium.plain["values"] == {
        "ipam": {"mode": "kubernetes"},
        "operator": {"replicas": 1, "podDisruptionBudget": {"enabled": True}},
    }
    # Its provider's kubeconfig is read from the Secret whose id waits on the Cluster, which the
    # engine holds until ControlPlaneInitialized (test_the_cluster_is_done_when_...).
    assert lab1.get(K8S_PROVIDER, "lab1-kubernetes").plain["kubeconfig"] == harness.WORKLOAD_KUBECONFIG


def test_the_autoscaler_runs_on_the_management_cluster_in_the_clusters_namespace(lab1: harness.Run) -> None:
    autoscaler = lab1.get(RELEASE, "lab1-autoscaler")
    mgmt = lab1.get(K8S_PROVIDER, "mgmt-kubernetes").urn
    assert autoscaler.provider.startswith(mgmt + "::")
    assert autoscaler.deleted_with == lab1.get("proxmoxve:index/vmLegacy:VmLegacy", "mgmt-vm").urn
    assert (autoscaler.plain["chart"], autoscaler.plain["namespace"], autoscaler.plain["name"]) == (
        "cluster-autoscaler-9.59.0.tgz",
        "default",
        "lab1-autoscaler",
    )
    assert lab1.get(f"{CAPI}:MachineDeployment", "lab1-workers").urn in autoscaler.dependencies


def test_the_autoscaler_reads_lab1_through_its_kubeconfig_secret_with_the_rule_the_chart_lacks(
    lab1: harness.Run,
) -> None:
    values = lab1.get(RELEASE, "lab1-autoscaler").plain["values"]
    assert values["cloudProvider"] == "clusterapi"
    assert values["clusterAPIMode"] == "kubeconfig-incluster"
    assert values["clusterAPIKubeconfigSecret"] == "lab1-kubeconfig"
    assert values["autoDiscovery"] == {"clusterName": "lab1", "namespace": "default"}
    assert values["image"] == {"tag": "v1.35.2"}
    assert values["rbac"] == {
        "clusterScoped": False,
        "additionalRules": [
            {
                "apiGroups": ["infrastructure.cluster.x-k8s.io"],
                "resources": ["proxmoxmachinetemplates"],
                "verbs": ["get", "list", "watch"],
            }
        ],
    }
    assert values["extraArgs"] == {
        "scan-interval": "10s",
        "scale-down-unneeded-time": "10m",
        "scale-down-delay-after-add": "10m",
        "max-node-provision-time": "15m",
        # Not client-go's 5 a second, which throttled each main loop for seconds (#6333).
        "kube-client-qps": "30",
        "kube-client-burst": "60",
        # kube-system's pods (kubeadm's CoreDNS) do not keep a worker for an hour.
        "skip-nodes-with-system-pods": "false",
        # A node still uninitialized is not one the pending pod fits on yet (#7268).
        "startup-taint_1": "node.cluster.x-k8s.io/uninitialized",
    }


def test_a_new_workload_kubeconfig_restarts_the_autoscaler_and_nothing_else(lab1: harness.Run) -> None:
    digest = hashlib.sha256(harness.WORKLOAD_KUBECONFIG.encode()).hexdigest()
    annotations = lab1.get(RELEASE, "lab1-autoscaler").plain["values"]["podAnnotations"]
    assert annotations == {"lab-mgmt.homelab/workload-kubeconfig-sha256": digest}
    # The digest is in the release's values as plain text: it reveals nothing of the kubeconfig.
    assert not harness.contains_plain(lab1.get(RELEASE, "lab1-autoscaler").inputs, "client-key-data")


def test_the_autoscaler_timings_are_settings(lab1: harness.Run) -> None:
    [cluster] = harness.stack_workload_clusters()
    quick = {"scanInterval": "2s", "scaleDownUnneededTime": "20s", "scaleDownDelayAfterAdd": "5s"}
    run = harness.run_program({"workloadClusters": [{**cluster, "autoscaler": quick}]})
    assert run.get(RELEASE, "lab1-autoscaler").plain["values"]["extraArgs"] == {
        "scan-interval": "2s",
        "scale-down-unneeded-time": "20s",
        "scale-down-delay-after-add": "5s",
        "max-node-provision-time": "15m",
        "kube-client-qps": "30",
        "kube-client-burst": "60",
        "skip-nodes-with-system-pods": "false",
        "startup-taint_1": "node.cluster.x-k8s.io/uninitialized",
    }
    assert {name for _, name in harness.changed(lab1, run)} == {"lab1-autoscaler"}

    kept = {**cluster, "autoscaler": {"extraArgs": {"skip-nodes-with-system-pods": "true"}}}
    upstream = harness.run_program({"workloadClusters": [kept]})
    flags = upstream.get(RELEASE, "lab1-autoscaler").plain["values"]["extraArgs"]
    assert flags["skip-nodes-with-system-pods"] == "true"


def test_the_cluster_is_looked_for_on_the_management_cluster_first(lab1: harness.Run) -> None:
    """Its Cluster (whose it is), then each of its objects once (cluster_takeover.Live: the
    managers that applied it, the version its control plane runs)."""
    assert lab1.cluster_reads[0] == CLUSTER_PATH
    assert sorted(lab1.cluster_reads) == sorted(object_path(r.plain) for r in custom_resources(lab1))


def _live_cluster(*managers: str, annotations: Mapping[str, str] | None = None) -> dict[str, dict[str, object]]:
    metadata = {"name": "lab1", "managedFields": [{"manager": m, "operation": "Update"} for m in managers]}
    return {CLUSTER_PATH: {"metadata": {**metadata, "annotations": dict(annotations or {})}}}


def test_a_cluster_made_by_hand_is_refused_and_none_of_its_objects_is_sent() -> None:
    record = harness.Run()
    with pytest.raises(HandMadeClusterError, match="the Cluster default/lab1 exists on the management cluster"):
        harness.run_program(live_objects=_live_cluster("kubectl-client-side-apply"), record=record)
    assert not [r for r in record.resources.values() if r.type.startswith(CUSTOM_RESOURCE_TYPES)]


def test_a_cluster_this_stack_created_is_declared_as_before(lab1: harness.Run) -> None:
    """As pulumi-kubernetes 4.29+ leaves it: its static create manager and Cluster API's, and the mark."""
    live = _live_cluster("pulumi-kubernetes", "manager", annotations={STACK_MARK: "organization/lab-mgmt/lab"})
    again = harness.run_program(live_objects=live)
    assert harness.changed(lab1, again) == set()


def test_a_cluster_another_stack_created_is_refused() -> None:
    live = _live_cluster("pulumi-kubernetes", "manager", annotations={STACK_MARK: "organization/lab-mgmt/lab"})
    with pytest.raises(HandMadeClusterError, match=r"not of this one \(team/lab-mgmt/lab\)"):
        harness.run_program(live_objects=live, organization="team")


# --- protection, and a run that cannot fetch the template --------------------------------------------


def test_the_cluster_api_objects_are_protected_by_default_but_the_machine_templates(lab1: harness.Run) -> None:
    """Deleting the Cluster deletes every VM of the cluster: never as a side effect of a run. A
    machine template is deleted by design, once another sizing replaced it."""
    objects = custom_resources(lab1)
    assert len(objects) == 7
    assert {r.name for r in objects if not r.protect} == {r.name for r in lab1.of_type(PMT)}


def test_protected_false_lifts_it_for_a_deliberate_removal() -> None:
    [cluster] = harness.stack_workload_clusters()
    run = harness.run_program({"workloadClusters": [{**cluster, "protected": False}]})
    assert not any(r.protect for r in custom_resources(run))


def test_a_best_effort_run_without_the_template_leaves_a_protected_cluster_out_saying_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The probe's case, and a preview from a laptop off the internet: nothing of lab1 is planned,
    and the engine would refuse to delete its protected objects, so nothing can be lost."""
    run = harness.run_program({"skipCredentialsCheck": True}, charts_served={})
    assert not [name for _, name in run.names() if name.startswith("lab1")]
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert any("lab-mgmt:workloadClusters: lab1 is left out of this run" in warning for warning in warnings)


def test_an_unprotected_cluster_without_its_template_stops_the_run() -> None:
    [cluster] = harness.stack_workload_clusters()
    with pytest.raises(ClusterTemplateError, match=r"CAPMOX's cluster template v0\.9\.1 \(templateVersion\)"):
        harness.run_program(
            {"skipCredentialsCheck": True, "workloadClusters": [{**cluster, "protected": False}]}, charts_served={}
        )


# --- the template's release, apart from the provider's --------------------------------------------------


def test_a_capmox_bump_fetches_no_template_and_changes_only_the_provider(lab1: harness.Run) -> None:
    """A cluster clusterctl made keeps the objects it was made with, whatever CAPMOX runs."""
    bumped = harness.run_program({"capmoxVersion": "v0.9.2"})
    templates = [url.split("/")[-2] for url in bumped.chart_requests if url.endswith("/cluster-template.yaml")]
    assert templates == ["v0.9.1"]  # lab1's templateVersion, into a new project folder
    assert harness.changed(lab1, bumped) == {
        ("kubernetes:operator.cluster.x-k8s.io/v1alpha2:InfrastructureProvider", "mgmt-infrastructure-proxmox")
    }


def test_a_cluster_follows_another_template_only_when_its_entry_names_it(lab1: harness.Run) -> None:
    [cluster] = harness.stack_workload_clusters()
    moved = {**cluster, "templateVersion": "v0.9.0"}
    config = harness.stack_config({"workloadClusters": [moved]})
    served = harness.chart_repositories(config)
    [url] = [url for url in served if url.endswith("/v0.9.0/cluster-template.yaml")]
    served[url] = served[url].replace(b"stand-in for the kube-vip static pod", b"the next release's kube-vip")
    run = harness.run_program({"workloadClusters": [moved]}, charts_served=served)
    assert [name for _, name in harness.changed(lab1, run)] == ["lab1-control-plane"]
    assert [request for request in run.chart_requests if request.endswith("/cluster-template.yaml")] == [url]


def test_a_namespace_other_than_default_is_made_first_and_never_deleted() -> None:
    entry = {**harness.stack_workload_clusters()[0], "name": "edge1", "namespace": "edge"}
    run = harness.run_program({"workloadClusters": [entry]})
    namespace = run.get("kubernetes:core/v1:Namespace", "edge1-namespace")
    assert namespace.plain["metadata"] == {"name": "edge", "annotations": harness.MANAGED}
    assert (namespace.protect, namespace.retain_on_delete, namespace.import_id) == (True, True, "")
    assert namespace.parent == run.get(CLUSTER_COMPONENT, "edge1").urn
    in_it = [r for r in run.resources.values() if r.type.startswith(CUSTOM_RESOURCE_TYPES)]
    assert len(in_it) == 7
    for resource in in_it:
        assert resource.plain["metadata"]["namespace"] == "edge", resource.name
        assert run.depends_on(resource, namespace), resource.name
    assert run.depends_on(run.get("kubernetes:helm.sh/v3:Release", "edge1-autoscaler"), namespace)


def test_the_default_namespace_is_not_the_program_s(lab1: harness.Run) -> None:
    namespaces = lab1.of_type("kubernetes:core/v1:Namespace")
    assert namespaces
    assert [r.name for r in namespaces if r.name.startswith("lab1") or r.plain["metadata"]["name"] == "default"] == []
