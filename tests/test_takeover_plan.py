"""The takeover decided once (components.cluster_takeover.Takeover), on the paths a fifth review
found where the owner's lab would roll or lose a field without a word (review 5): W6 compares
every declared field with what runs, for each object that no apply of the program's has reached
yet, and forces only those; a recovery names what the lost stack applied that the stack file no
longer renders; an object still under a drawn manager name is forced once; a field of another
manager's inside a container is not taken for the hand field beside it; keep-it lines typed as
JSON types them; a downgrade is refused; a cluster made with `kubectl create` is weighed against
its CRDs' defaults; two clusters share one namespace."""

from __future__ import annotations

from typing import Any

import harness
import pytest
from test_cluster_takeover import MD, cluster_objects, clusterctl_lab1, made_the_programs, record_of, taken_over_entry
from test_hand_work import CLUSTER_PATH, KCP_PATH, MD_PATH, annotated, hand_worked_lab1, kept_entry, refusal
from test_recovery import RECOVER, running
from test_workload_cluster import CUSTOM_RESOURCE_TYPES

from components import field_manager, kept_fields
from components.cluster_takeover import LAST_APPLIED, RECORD_OUTPUT, KubernetesDowngradeError, TakeoverMismatchError
from components.hand_made_clusters import STACK_MARK, HandMadeClusterError
from components.rollouts import ROLLOUT_OUTPUT
from components.workload_cluster import PATCH_FORCE

MAX_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"


@pytest.fixture(scope="module")
def kept_record() -> Any:
    entry = kept_entry(adopt=True)
    adoption = harness.run_program({"workloadClusters": [entry]}, live_objects=hand_worked_lab1(entry))
    return {RECORD_OUTPUT: record_of(adoption)}


def w6(live: dict[str, Any], record: Any, **changes: Any) -> harness.Run:
    return harness.run_program(
        {"workloadClusters": [kept_entry(**changes)]}, previous_outputs=record, live_objects=live
    )


def forced(run: harness.Run) -> set[str]:
    return {r.name for r in cluster_objects(run) if PATCH_FORCE in r.plain["metadata"].get("annotations", {})}


def test_w6_names_a_node_group_size_set_by_hand_since_the_adoption_run(kept_record: Any) -> None:
    """`kubectl annotate --overwrite …max-size=5` after step 5: W6's forced apply would write 3 back."""
    live = hand_worked_lab1(kept_entry())
    annotated(live, MD_PATH, "kubectl-annotate", {MAX_SIZE: "5"})
    [line] = refusal(kept_entry(), live, previous_outputs=kept_record)
    assert line == (
        f'MachineDeployment lab1-workers: metadata.annotations.{MAX_SIZE}: running "5", the settings render "3" '
        "(set it with workers.maxSize)"
    )


def test_w6_names_a_control_plane_version_patched_by_hand_since_the_adoption_run(kept_record: Any) -> None:
    """A `kubectl patch` of spec.version: W6 would roll the control plane back to the entry's."""
    live = hand_worked_lab1(kept_entry())
    live[KCP_PATH]["spec"]["version"] = "v1.35.10"
    live[KCP_PATH]["metadata"]["managedFields"].append(
        {"manager": "kubectl-patch", "operation": "Update", "fieldsV1": {"f:spec": {"f:version": {}}}}
    )
    [line] = refusal(kept_entry(), live, previous_outputs=kept_record)
    assert line == (
        'KubeadmControlPlane lab1-control-plane: spec.version: running "v1.35.10", the settings render "v1.35.9"'
    )


def test_w6_forces_every_object_then_nothing(kept_record: Any) -> None:
    live = hand_worked_lab1(kept_entry())
    assert len(forced(w6(live, kept_record))) == 7
    assert forced(w6(made_the_programs(live), kept_record)) == set()


def test_a_w6_stopped_after_the_cluster_was_applied_forces_and_checks_the_rest(kept_record: Any) -> None:
    """The Cluster applied and marked, the MachineDeployment not: the retry forces what is left, or
    it stops on kubectl's `.spec.selector`, and checks it again, or a hand field added in between
    goes without a word."""
    live = hand_worked_lab1(kept_entry())
    halfway = {path: body for path, body in live.items() if body["kind"] == "Cluster"}
    made_the_programs(halfway)
    assert "lab1-workers" in forced(w6(live, kept_record))
    assert "lab1-cluster" not in forced(w6(live, kept_record))
    annotated(live, MD_PATH, "kubectl-annotate", {"owner": "me"})
    [line] = refusal(kept_entry(), live, previous_outputs=kept_record)
    assert line.startswith('MachineDeployment lab1-workers: metadata.annotations.owner: running "me"')


@pytest.fixture(scope="module")
def made() -> harness.Run:
    return harness.run_program()


def test_a_recovery_names_what_the_lost_stack_applied_that_the_stack_file_lacks(made: harness.Run) -> None:
    """The recovering stack applies under the lost one's manager name, so the fields only that name
    holds go when its rendering lacks them: an uncommitted keptFields, a kubeadm field that rolls."""
    live = running(made)
    deployment = live[MD_PATH]
    deployment["metadata"]["labels"] = {**deployment["metadata"].get("labels", {}), "team": "infra"}
    deployment["metadata"]["managedFields"] = [
        {
            "manager": field_manager.NAME,
            "operation": "Apply",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}},
        }
    ]
    with pytest.raises(TakeoverMismatchError) as refused:
        harness.run_program(RECOVER, live_objects=live)
    assert str(refused.value).split("\n    ")[1].split("\n        ")[0] == (
        f'MachineDeployment lab1-workers: metadata.labels.team: running "infra", set by {field_manager.NAME}, '
        "the settings render nothing"
    )


def test_an_object_a_drawn_manager_name_applied_is_forced_until_the_programs_name_has_it(made: harness.Run) -> None:
    """A stack from before the program named its field manager updated the control plane under
    pulumi-kubernetes's drawn name: the first apply under the program's name that changes a value
    (a pin moved in the same pull) conflicts with it, unforced; once applied, the drawn name is
    relinquished and nothing is forced."""
    live = running(made)
    live[KCP_PATH]["metadata"]["managedFields"] = [
        {"manager": "pulumi-kubernetes-3c9a1b7e", "operation": "Apply", "fieldsV1": {"f:spec": {"f:version": {}}}}
    ]
    declared = {key: value for key, (value, _) in made.outputs.items() if key == ROLLOUT_OUTPUT}
    assert forced(harness.run_program(live_objects=live, previous_outputs=declared)) == {"lab1-control-plane"}
    live[KCP_PATH]["metadata"]["managedFields"][0]["manager"] = field_manager.NAME
    assert forced(harness.run_program(live_objects=live, previous_outputs=declared)) == set()


def test_a_field_of_another_manager_inside_a_container_leaves_the_hand_field_beside_it_named() -> None:
    """Server-side apply removes per field: kubectl's `b` goes although Cluster API's manager holds
    `a` in the same list, which the rendering lacks whole."""
    extra_args = [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}]
    live = {
        "metadata": {
            "managedFields": [
                {"manager": "manager", "operation": "Update", "fieldsV1": _extra_args_fields("a", "1")},
                {"manager": "kubectl-patch", "operation": "Update", "fieldsV1": _extra_args_fields("b", "2")},
            ]
        },
        "spec": {"kubeadmConfigSpec": {"clusterConfiguration": {"apiServer": {"extraArgs": extra_args}}}},
    }
    [found] = kept_fields.held(live, {"spec": {"kubeadmConfigSpec": {}}}, skipped=())
    assert (found.shown, found.value, found.managers) == (
        "spec.kubeadmConfigSpec.clusterConfiguration.apiServer.extraArgs[1]",
        {"name": "b", "value": "2"},
        ("kubectl-patch",),
    )


def _extra_args_fields(name: str, value: str) -> dict[str, Any]:
    item: dict[str, Any] = {f'k:{{"name":"{name}","value":"{value}"}}': {".": {}, "f:name": {}, "f:value": {}}}
    return {
        "f:spec": {
            "f:kubeadmConfigSpec": {"f:clusterConfiguration": {"f:apiServer": {"f:extraArgs": item}}},
        }
    }


@pytest.mark.parametrize(
    ("value", "line"),
    [
        (1.5, "keep it: pulumi config set --path lab.keptFields.cluster.spec.x --type float -- 1.5"),
        (-1, "keep it: pulumi config set --path lab.keptFields.cluster.spec.x --type int -- -1"),
        ("-v", "keep it: pulumi config set --path lab.keptFields.cluster.spec.x --type string -- -v"),
        (False, "keep it: pulumi config set --path lab.keptFields.cluster.spec.x --type bool -- false"),
        ({}, "keep it by hand: write {} at lab.keptFields.cluster.spec.x in the stack's file"),
        (None, "keep it by hand: write null at lab.keptFields.cluster.spec.x in the stack's file"),
        ([], "keep it by hand: write [] at lab.keptFields.cluster.spec.x in the stack's file"),
    ],
    ids=["float", "negative", "dash", "bool", "empty-map", "null", "empty-list"],
)
def test_keep_it_lines_type_each_value_as_json_does(value: Any, line: str) -> None:
    found = kept_fields.HandSet(("spec", "x"), value, ("kubectl-patch",))
    where = {"role": "cluster", "kind": "Cluster", "name": "lab1", "namespace": "default"}
    lines = kept_fields.advice(found, entry="lab", kubeconfig="~/k", **where).split("\n        ")
    assert lines[1].startswith(line)
    assert lines[2].startswith("or take it off first: kubectl --kubeconfig ~/k patch -n default cluster lab1")


def test_a_kubernetes_version_below_the_running_one_is_refused() -> None:
    """Cluster API's webhook lets a downgrade through; kubeadm does not support one."""
    live = {
        CLUSTER_PATH: {"kind": "Cluster", "metadata": {"annotations": {STACK_MARK: "organization/lab-mgmt/lab"}}},
        KCP_PATH: {"kind": "KubeadmControlPlane", "metadata": {}, "spec": {"version": "v1.35.10"}},
    }
    with pytest.raises(KubernetesDowngradeError, match=r"v1\.35\.9 is lower than v1\.35\.10, which default/lab1"):
        harness.run_program(live_objects=live)


def test_a_worker_count_set_through_kubectl_scale_is_the_autoscalers(kept_record: Any) -> None:
    """fixCSAFieldManagers leaves the /scale subresource's entry alone: W6 does not touch the count."""
    live = hand_worked_lab1(kept_entry())
    deployment = live[MD_PATH]
    deployment["spec"]["replicas"] = 7
    [applied] = [e for e in deployment["metadata"]["managedFields"] if e["manager"] == "kubectl-client-side-apply"]
    applied["fieldsV1"]["f:spec"].pop("f:replicas")
    scaled: dict[str, Any] = {"f:spec": {"f:replicas": {}}}
    deployment["metadata"]["managedFields"].append(
        {"manager": "kubectl-scale", "operation": "Update", "subresource": "scale", "fieldsV1": scaled}
    )
    assert "replicas" not in w6(live, kept_record).get(MD, "lab1-workers").plain["spec"]


def test_two_clusters_in_one_namespace_declare_it_once() -> None:
    """A second Namespace resource for the same namespace would fail its create as AlreadyExists."""
    [lab1] = harness.stack_workload_clusters()
    second = {
        **lab1,
        "name": "lab2",
        "controlPlaneEndpoint": "192.168.4.80",
        "nodeIpRanges": ["192.168.4.81-192.168.4.90"],
    }
    run = harness.run_program({"workloadClusters": [{**lab1, "namespace": "edge"}, {**second, "namespace": "edge"}]})
    [namespace] = [r for r in run.of_type("kubernetes:core/v1:Namespace") if r.plain["metadata"]["name"] == "edge"]
    for resource in (r for r in run.resources.values() if r.type.startswith(CUSTOM_RESOURCE_TYPES)):
        assert run.depends_on(resource, namespace), resource.name


def created_lab1(entry: dict[str, Any]) -> dict[str, Any]:
    """lab1 as `kubectl create -f` of clusterctl's manifest leaves it: no record of what was sent,
    and the creator holding every field, the ProxmoxCluster's defaulted route metric among them."""
    live = clusterctl_lab1(entry)
    for body in live.values():
        body["metadata"]["annotations"].pop(LAST_APPLIED)
        body["metadata"]["managedFields"] = [
            {"manager": "kubectl-create", "operation": "Update", "fieldsV1": _every_field(body["spec"], "f:spec")}
        ]
    [proxmox_cluster] = [body for body in live.values() if body["kind"] == "ProxmoxCluster"]
    proxmox_cluster["spec"]["ipv4Config"]["metric"] = 100
    proxmox_cluster["metadata"]["managedFields"][0]["fieldsV1"] = _every_field(proxmox_cluster["spec"], "f:spec")
    return live


def _every_field(value: Any, key: str) -> dict[str, Any]:
    if isinstance(value, dict):
        return {key: {f"f:{k}": _every_field(v, f"f:{k}")[f"f:{k}"] for k, v in value.items()}}
    return {key: {}}


PROXMOX_CLUSTERS_CRD = (
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/proxmoxclusters.infrastructure.cluster.x-k8s.io"
)
# The route metric's default as CAPMOX v0.9.0's CRD has it (config/crd/bases, ipv4Config.metric).
METRIC_DEFAULT = {"properties": {"ipv4Config": {"properties": {"metric": {"default": 100, "type": "integer"}}}}}


def test_a_lab1_made_with_kubectl_create_is_taken_over_with_what_its_crds_default() -> None:
    """No last-applied record: the creator holds what the API server defaulted too, which comes back."""
    entry = taken_over_entry(adopt=True)
    live = created_lab1(entry)
    [line] = refusal(entry, live)
    assert line.startswith("ProxmoxCluster lab1: spec.ipv4Config.metric: running 100, set by kubectl-create")
    live[PROXMOX_CLUSTERS_CRD] = {
        "spec": {
            "versions": [{"name": "v1alpha2", "schema": {"openAPIV3Schema": {"properties": {"spec": METRIC_DEFAULT}}}}]
        }
    }
    adopted = harness.run_program({"workloadClusters": [entry]}, live_objects=live)
    assert record_of(adopted)


def test_a_cluster_the_last_run_declared_made_again_by_hand_is_refused(made: harness.Run) -> None:
    """Deleted and re-made under its name (`kubectl apply` of clusterctl's manifest): no stack's mark."""
    declared = {key: value for key, (value, _) in made.outputs.items() if key == ROLLOUT_OUTPUT}
    live = running(made)
    live[CLUSTER_PATH]["metadata"]["annotations"].pop(STACK_MARK)
    live[CLUSTER_PATH]["metadata"]["managedFields"] = [{"manager": "kubectl-client-side-apply", "operation": "Update"}]
    with pytest.raises(HandMadeClusterError, match="made by kubectl-client-side-apply, not by this stack"):
        harness.run_program(live_objects=live, previous_outputs=declared)
