"""Phase 1's hand work on the owner's lab1 through the takeover (components.kept_fields): a field
set with `kubectl annotate`, `label` or `patch`, or added to the manifest before `kubectl apply`,
is kept by the entry's keptFields or named before the run that takes kubectl's fields would
remove it; the force of that run is its own; Cilium's values are compared until it."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import harness
import pytest
from test_cluster_takeover import (
    CLUSTER,
    KCP,
    MD,
    RELEASE,
    _with_cilium,
    _with_hand_autoscaler,
    cluster_objects,
    clusterctl_lab1,
    made_the_programs,
    record_of,
    taken_over_entry,
    workload_problems,
)

from components import cilium_values
from components.cluster_takeover import (
    CILIUM_RELEASE,
    LAST_APPLIED,
    RECORD_OUTPUT,
    CiliumValuesDroppedError,
    TakeoverMismatchError,
)
from components.cluster_template import ClusterTemplateError

MD_PATH = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machinedeployments/lab1-workers"
KCP_PATH = "/apis/controlplane.cluster.x-k8s.io/v1beta2/namespaces/default/kubeadmcontrolplanes/lab1-control-plane"
CLUSTER_PATH = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters/lab1"
LABELS_HINT = "capacity.cluster-autoscaler.kubernetes.io/labels"
AUDIT = {"name": "audit-log-maxage", "value": "30"}
# The admin kubeconfig where the README writes it: every kubectl line of a refusal names it.
ADMIN = "--kubeconfig ~/.kube/lab-mgmt.kubeconfig"


def annotated(live: dict[str, Any], path: str, manager: str, annotations: dict[str, str]) -> None:
    """`kubectl annotate` (or `label`, by the manager's name) of the object at `path`."""
    section = "labels" if manager == "kubectl-label" else "annotations"
    metadata = live[path]["metadata"]
    metadata.setdefault(section, {}).update(annotations)
    fields: dict[str, Any] = {f"f:{key}": {} for key in annotations}
    metadata["managedFields"].append(
        {"manager": manager, "operation": "Update", "fieldsV1": {"f:metadata": {f"f:{section}": fields}}}
    )


def patched_audit_flag(live: dict[str, Any]) -> None:
    """`kubectl patch kcp lab1-control-plane --type=merge` adding an API server flag."""
    control_plane = live[KCP_PATH]
    control_plane["spec"]["kubeadmConfigSpec"]["clusterConfiguration"] = {"apiServer": {"extraArgs": [AUDIT]}}
    control_plane["metadata"]["managedFields"].append(
        {
            "manager": "kubectl-patch",
            "operation": "Update",
            "fieldsV1": {
                "f:spec": {
                    "f:kubeadmConfigSpec": {
                        "f:clusterConfiguration": {
                            ".": {},
                            "f:apiServer": {
                                ".": {},
                                "f:extraArgs": {
                                    'k:{"name":"audit-log-maxage"}': {".": {}, "f:name": {}, "f:value": {}}
                                },
                            },
                        }
                    }
                }
            },
        }
    )


def refusal(entry: dict[str, Any], live: dict[str, Any], **kwargs: Any) -> list[str]:
    with pytest.raises(TakeoverMismatchError) as refused:
        harness.run_program({"workloadClusters": [entry]}, live_objects=live, **kwargs)
    # One difference a line, each way out of it on lines of its own indented further.
    return re.split(r"\n    (?=\S)", str(refused.value))[1:]


def test_an_annotation_set_with_kubectl_annotate_is_named_with_its_key_and_its_removal() -> None:
    entry = taken_over_entry(adopt=True)
    live = clusterctl_lab1(entry)
    annotated(live, MD_PATH, "kubectl-annotate", {LABELS_HINT: "disk=ssd"})
    [line] = refusal(entry, live)
    assert line.split("\n        ") == [
        f'MachineDeployment lab1-workers: metadata.annotations.{LABELS_HINT}: running "disk=ssd", set by '
        "kubectl-annotate, the settings render nothing",
        "keep it: pulumi config set --path "
        f"'workloadClusters[0].keptFields.machineDeployment.metadata.annotations[\"{LABELS_HINT}\"]' --type string "
        "-- disk=ssd",
        f"or take it off first: kubectl {ADMIN} annotate -n default machinedeployment lab1-workers {LABELS_HINT}-",
    ]


def test_a_label_set_with_kubectl_label_is_named_as_a_label() -> None:
    entry = taken_over_entry(adopt=True)
    live = clusterctl_lab1(entry)
    annotated(live, CLUSTER_PATH, "kubectl-label", {"site": "home"})
    [line] = refusal(entry, live)
    assert line.split("\n        ") == [
        'Cluster lab1: metadata.labels.site: running "home", set by kubectl-label, the settings render nothing',
        "keep it: pulumi config set --path 'workloadClusters[0].keptFields.cluster.metadata.labels.site' --type "
        "string -- home",
        f"or take it off first: kubectl {ADMIN} label -n default cluster lab1 site-",
    ]


def test_a_control_plane_field_set_with_kubectl_patch_is_named_before_it_would_roll_the_control_plane() -> None:
    entry = taken_over_entry(adopt=True)
    live = clusterctl_lab1(entry)
    patched_audit_flag(live)
    [line] = refusal(entry, live)
    key = "workloadClusters[0].keptFields.controlPlane.spec.kubeadmConfigSpec.clusterConfiguration"
    assert line.startswith(
        "KubeadmControlPlane lab1-control-plane: spec.kubeadmConfigSpec.clusterConfiguration: running "
        '{"apiServer": {"extraArgs": [{"name": "audit-log-maxage", "value": "30"}]}}, set by kubectl-patch'
    )
    assert f"pulumi config set --path '{key}.apiServer.extraArgs[0].name' --type string -- audit-log-maxage" in line
    assert f"pulumi config set --path '{key}.apiServer.extraArgs[0].value' --type string -- 30" in line
    assert line.endswith(
        f"kubectl {ADMIN} patch -n default kubeadmcontrolplane lab1-control-plane --type=json -p "
        """'[{"op": "remove", "path": "/spec/kubeadmConfigSpec/clusterConfiguration"}]'"""
    )


def test_kubectls_work_recorded_at_v1beta1_is_refused_at_adoption_and_w6_naming_the_entry_and_its_removal(
    kept_adoption: harness.Run,
) -> None:
    """Review 5, 10i: a lab made before Cluster API v1.11 holds kubectl's entries at v1beta1; the
    run that takes kubectl's fields would merge them into the program's at one version, so neither
    what it removes nor what the entry must keep can be read. Refused where the takeover compares
    (adopting, and W6 after the adoption run), with the JSON patch that takes the entry off the
    record checking it first; an entry at the version the object is read at is read as ever."""
    entry = kept_entry()
    live = hand_worked_lab1(entry)
    annotated(live, MD_PATH, "kubectl-annotate", {"owner": "me"})
    record = live[MD_PATH]["metadata"]["managedFields"][-1]
    record["apiVersion"] = "cluster.x-k8s.io/v1beta1"
    index = len(live[MD_PATH]["metadata"]["managedFields"]) - 1
    patch = (
        f'[{{"op": "test", "path": "/metadata/managedFields/{index}/manager", "value": "kubectl-annotate"}}, '
        f'{{"op": "test", "path": "/metadata/managedFields/{index}/apiVersion", "value": "cluster.x-k8s.io/v1beta1"}}, '
        f'{{"op": "remove", "path": "/metadata/managedFields/{index}"}}]'
    )
    expected = [
        f"MachineDeployment lab1-workers: metadata.managedFields[{index}]: kubectl-annotate (Update) holds its "
        "fields at cluster.x-k8s.io/v1beta1, and this run reads the object at cluster.x-k8s.io/v1beta2: the run "
        "that takes kubectl's fields would merge them into the program's at one version, so which of them it "
        "would remove cannot be told beforehand",
        "take the entry off the object's record first (its fields stay as they are, held by no one, so no run "
        "removes them; set again by hand what the program should name to keep): "
        f"kubectl {ADMIN} patch -n default machinedeployment lab1-workers --type=json -p '{patch}'",
    ]
    for previous in ({}, {RECORD_OUTPUT: record_of(kept_adoption)}):
        adopting = {"adopt": True} if not previous else {}
        [line] = refusal(kept_entry(**adopting), live, previous_outputs=previous)
        assert line.split("\n        ") == expected
    record["apiVersion"] = "cluster.x-k8s.io/v1beta2"
    [line] = refusal(entry, live, previous_outputs={RECORD_OUTPUT: record_of(kept_adoption)})
    assert line.startswith('MachineDeployment lab1-workers: metadata.annotations.owner: running "me"')


def kept_entry(**changes: Any) -> dict[str, Any]:
    return taken_over_entry(
        keptFields={
            "machineDeployment": {"metadata": {"annotations": {LABELS_HINT: "disk=ssd"}}},
            "controlPlane": {
                "spec": {"kubeadmConfigSpec": {"clusterConfiguration": {"apiServer": {"extraArgs": [AUDIT]}}}}
            },
        },
        **changes,
    )


def hand_worked_lab1(entry: dict[str, Any]) -> dict[str, Any]:
    live = clusterctl_lab1(entry)
    annotated(live, MD_PATH, "kubectl-annotate", {LABELS_HINT: "disk=ssd"})
    patched_audit_flag(live)
    return live


@pytest.fixture(scope="module")
def kept_adoption() -> harness.Run:
    entry = kept_entry(adopt=True)
    return harness.run_program({"workloadClusters": [entry]}, live_objects=hand_worked_lab1(entry))


def test_the_hand_work_kept_in_the_entry_passes_and_is_declared_from_then_on(kept_adoption: harness.Run) -> None:
    entry = kept_entry()
    w6 = harness.run_program(
        {"workloadClusters": [entry]},
        previous_outputs={RECORD_OUTPUT: record_of(kept_adoption)},
        live_objects=hand_worked_lab1(entry),
    )
    deployment = w6.get(MD, "lab1-workers").plain
    assert deployment["metadata"]["annotations"][LABELS_HINT] == "disk=ssd"
    control_plane = w6.get(KCP, "lab1-control-plane").plain
    assert control_plane["spec"]["kubeadmConfigSpec"]["clusterConfiguration"] == {"apiServer": {"extraArgs": [AUDIT]}}


def test_hand_work_since_the_adoption_run_is_named_before_the_run_that_takes_kubectls_fields(
    kept_adoption: harness.Run,
) -> None:
    entry = kept_entry()
    live = hand_worked_lab1(entry)
    annotated(live, MD_PATH, "kubectl-annotate", {"owner": "me"})
    [line] = refusal(entry, live, previous_outputs={RECORD_OUTPUT: record_of(kept_adoption)})
    assert line.startswith(
        'MachineDeployment lab1-workers: metadata.annotations.owner: running "me", set by kubectl-annotate'
    )


def test_after_the_takeover_nothing_is_forced_and_lab1s_api_is_not_needed(kept_adoption: harness.Run) -> None:
    """A hand edit of a declared field then stops the run as a conflict, as on a cluster the
    program made; and no read goes into lab1 (its kubeconfig Secret is not even asked for)."""
    entry = kept_entry()
    after = harness.run_program(
        {"workloadClusters": [entry]},
        previous_outputs={RECORD_OUTPUT: record_of(kept_adoption)},
        live_objects=made_the_programs(_with_cilium(hand_worked_lab1(entry), {"kubeProxyReplacement": True})),
    )
    for resource in cluster_objects(after):
        assert "pulumi.com/patchForce" not in resource.plain["metadata"].get("annotations", {}), resource.name
    assert not [path for path in after.cluster_reads if "kubeconfig" in path or path == CILIUM_RELEASE]


def test_a_kept_cilium_value_is_dropped_again_by_taking_it_out_of_the_entry(kept_adoption: harness.Run) -> None:
    """Kept at W6, so the running release holds it; out of the entry, the next run upgrades the
    release without it instead of refusing what the program itself set."""
    entry = kept_entry()
    values = {**cilium_values.PROGRAM, "kubeProxyReplacement": True}
    run = harness.run_program(
        {"workloadClusters": [entry]},
        previous_outputs={RECORD_OUTPUT: record_of(kept_adoption)},
        live_objects=made_the_programs(_with_cilium(hand_worked_lab1(entry), values)),
    )
    assert run.get(RELEASE, "lab1-cilium").plain["values"] == cilium_values.PROGRAM
    # Before that run, the same values are refused.
    live = _with_cilium(hand_worked_lab1(entry), values)
    with pytest.raises(CiliumValuesDroppedError):
        harness.run_program(
            {"workloadClusters": [entry]}, previous_outputs={RECORD_OUTPUT: record_of(kept_adoption)}, live_objects=live
        )


def test_the_operators_own_values_are_named_not_refused(caplog: pytest.LogCaptureFixture) -> None:
    entry = taken_over_entry(adopt=True)
    live = _with_cilium(clusterctl_lab1(entry), {"operator": {"replicas": 2}})
    with caplog.at_level(logging.WARNING):
        harness.run_program({"workloadClusters": [entry]}, live_objects=live)
    assert any("operator.replicas: running 2, the program sets 1" in r.getMessage() for r in caplog.records)


def applied_with(live: dict[str, Any], path: str, annotations: dict[str, str]) -> None:
    """The annotations were in the manifest `kubectl apply` sent: on the object and in its record."""
    metadata = live[path]["metadata"]
    applied = json.loads(metadata["annotations"][LAST_APPLIED])
    applied["metadata"]["annotations"] = annotations
    metadata["annotations"] = {**annotations, LAST_APPLIED: json.dumps(applied)}
    metadata["managedFields"][0]["fieldsV1"].setdefault("f:metadata", {})["f:annotations"] = {
        f"f:{key}": {} for key in (*annotations, LAST_APPLIED)
    }


NODE_GROUP = {
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "0",
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "3",
    "capacity.cluster-autoscaler.kubernetes.io/cpu": "8",
    "capacity.cluster-autoscaler.kubernetes.io/memory": "16Gi",
}


def test_node_group_annotations_applied_with_the_manifest_pass_when_the_settings_render_them() -> None:
    entry = taken_over_entry(adopt=True)
    live = clusterctl_lab1(entry)
    applied_with(live, MD_PATH, NODE_GROUP)
    harness.run_program({"workloadClusters": [entry]}, live_objects=live)


def test_annotations_applied_with_the_manifest_are_named_with_the_key_that_renders_them() -> None:
    entry = taken_over_entry(adopt=True)
    live = clusterctl_lab1(entry)
    applied_with(
        live,
        MD_PATH,
        {**NODE_GROUP, "capacity.cluster-autoscaler.kubernetes.io/memory": "14Gi", LABELS_HINT: "disk=ssd"},
    )
    lines = refusal(entry, live)
    assert len(lines) == 2
    assert lines[0].startswith(
        f'MachineDeployment lab1-workers: metadata.annotations.{LABELS_HINT}: running "disk=ssd"'
    )
    assert "keptFields.machineDeployment" in lines[0]
    assert lines[1].endswith(
        'memory: running "14Gi", the settings render "16384Mi" (set it with workers.capacity.memory)'
    )
    fixed = taken_over_entry(
        adopt=True,
        workers={"maxSize": 3, "capacity": {"memory": "14Gi"}},
        keptFields={"machineDeployment": {"metadata": {"annotations": {LABELS_HINT: "disk=ssd"}}}},
    )
    run = harness.run_program({"workloadClusters": [fixed]}, live_objects=live)
    annotations = run.get(MD, "lab1-workers").plain["metadata"]["annotations"]
    assert annotations["capacity.cluster-autoscaler.kubernetes.io/memory"] == "14Gi"


def test_kept_fields_the_program_owns_are_refused_naming_the_key_that_sets_them() -> None:
    entry = taken_over_entry(
        keptFields={
            "machineDeployment": {
                "metadata": {"annotations": {"cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "5"}}
            },
            "cluster": {"metadata": {"annotations": {"pulumi.com/patchForce": "true"}}, "status": {}},
        }
    )
    assert workload_problems(entry) == [
        'lab-mgmt:workloadClusters[0].keptFields.cluster.metadata.annotations["pulumi.com/patchForce"]: is not the '
        "owner's to keep: the program or kubectl writes it",
        "lab-mgmt:workloadClusters[0].keptFields.cluster.status: is not a setting this program knows; see "
        "docs/operations.md#workload-clusters",
        'lab-mgmt:workloadClusters[0].keptFields.machineDeployment.metadata.annotations["cluster.x-k8s.io/'
        "cluster-api-autoscaler-node-group-max-size\"]: is the program's own annotation: set workers.maxSize",
    ]


def test_a_kept_field_the_template_renders_is_refused_naming_it() -> None:
    entry = taken_over_entry(keptFields={"workerTemplate": {"spec": {"template": {"spec": {"numCores": 2}}}}})
    with pytest.raises(
        ClusterTemplateError, match=r"keptFields\.workerTemplate\.spec\.template\.spec\.numCores: the program renders"
    ):
        harness.run_program({"workloadClusters": [entry]})


def test_the_force_is_the_takeovers_alone_for_the_cluster_the_program_made() -> None:
    run = harness.run_program()
    for resource in cluster_objects(run):
        assert "pulumi.com/patchForce" not in resource.plain["metadata"].get("annotations", {}), resource.name
    assert CLUSTER in {r.type for r in cluster_objects(run)}


def test_every_value_of_the_hand_installed_autoscaler_the_programs_release_changes_is_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not only its flags: resources, a node selector, its image; and a release that names no
    cluster at all is read as lab1's too (it discovers every cluster of its namespace)."""
    entry = taken_over_entry(adopt=True)
    values = {"resources": {"limits": {"memory": "300Mi"}}, "image": {"tag": "v1.35.1"}, "autoDiscovery": {}}
    live = _with_hand_autoscaler(clusterctl_lab1(entry), values)
    with caplog.at_level(logging.WARNING):
        harness.run_program({"workloadClusters": [entry]}, live_objects=live)
    named = sorted(
        r.getMessage().split("sets otherwise: ", 1)[1] for r in caplog.records if "installed by hand" in r.getMessage()
    )
    assert named == [
        'autoDiscovery: running {}, the program sets {"clusterName": "lab1", "namespace": "default"}',
        'image.tag: running "v1.35.1", the program sets "v1.35.2"',
        'resources.limits.memory: running "300Mi", the program sets nothing',
    ]


def test_what_the_crd_defaulted_for_kubectl_apply_is_not_hand_work() -> None:
    """The API server gives the creator the fields the CRD's schema defaults (found by the box:
    the ProxmoxCluster's ipv4Config.metric and externalManagedControlPlane): kubectl's apply never
    sent them, its record lacks them, and they come back after W6's apply leaves them out."""
    entry = taken_over_entry(adopt=True)
    live = clusterctl_lab1(entry)
    path = "/apis/infrastructure.cluster.x-k8s.io/v1alpha2/namespaces/default/proxmoxclusters/lab1"
    live[path]["spec"]["ipv4Config"]["metric"] = 100
    live[path]["metadata"]["managedFields"][0]["fieldsV1"] = {
        "f:spec": {"f:ipv4Config": {"f:metric": {}, "f:prefix": {}}}
    }
    harness.run_program({"workloadClusters": [entry]}, live_objects=live)
