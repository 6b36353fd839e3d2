"""Taking over a workload cluster that clusterctl made from the same template (docs/adoption.md,
"A workload cluster made with clusterctl"): the names its objects keep, the record that carries
them from run to run, and the check that the settings render what clusterctl applied.

clusterctl names the machine templates `<cluster>-control-plane` and `<cluster>-worker`; the
program names its own after their spec (cluster_template.digested_name), as Cluster API's machine
templates are immutable. A taken-over template keeps clusterctl's name for as long as its spec
stays the same: the adoption run records digested name -> clusterctl's name in the stack output
RECORD_OUTPUT, every later run reads it back (before anything is registered, as a
StackReference's outputs are known at preview) and writes it again. A spec the record does not
name is a new template under its digested name: a rollout, as for any cluster the program made.
The record also tells the hand-made guard that the cluster is the stack's own: after an import
that wrote nothing, the live Cluster has no field manager of Pulumi's.

pulumi-kubernetes imports a custom resource with only its identity among its inputs, so an
import diffs every declared field against nothing; adopting, the objects' `metadata` and `spec`
are kept as they run (components.adoption.OBJECT_INPUTS), and the comparison that the import
cannot make is made here, against what `kubectl apply` recorded on each object
(`kubectl.kubernetes.io/last-applied-configuration`): a run whose settings do not render exactly
that stops before anything is sent, naming each field.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pulumi

from components import hand_made_clusters
from components.cluster_template import ClusterObjects
from components.settings import PROJECT, WorkloadCluster

RECORD_OUTPUT = "adoptedWorkloadClusters"
"""`{"<namespace>/<name>": {"<machine template's Pulumi name>": "<its Kubernetes name>"}}`, one
entry per taken-over cluster."""
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# What the program leaves to others on purpose: the autoscaler owns the replicas
# (cluster_template._patch_machine_deployment), which clusterctl rendered from WORKER_MACHINE_COUNT.
NOT_DECLARED = {"MachineDeployment": ("spec", "replicas")}


class AdoptedClusterMissingError(pulumi.RunError):
    """`adopt: true` on a cluster that does not run."""


class TakeoverMismatchError(pulumi.RunError):
    """The settings do not render what clusterctl applied: importing would change the cluster."""


def record_key(cluster: WorkloadCluster) -> str:
    return f"{cluster.namespace}/{cluster.name}"


def kept_names(
    cluster: WorkloadCluster, objects: ClusterObjects, last: Mapping[str, str] | None
) -> dict[str, str] | None:
    """The record's entry for this run: the last run's (`last`), and, adopting, clusterctl's names
    of the templates declared now. None for a cluster that was never taken over. Names of
    templates no longer declared stay: a sizing changed back finds its template's name again."""
    if cluster.adopt:
        return {**(last or {}), **objects.made_names}
    return dict(last) if last is not None else None


def record(
    last: Mapping[str, Mapping[str, str]] | None, kept: Mapping[str, Mapping[str, str] | None], declared: list[str]
) -> dict[str, dict[str, str]]:
    """This run's RECORD_OUTPUT: each declared cluster's entry as its component kept it (`kept`,
    by record_key), or as the last run left it for one this run leaves out (a best-effort run
    without the template: its names must survive until the next run declares it)."""
    carried = {key: dict(names) for key, names in (last or {}).items() if key in declared}
    return {**carried, **{key: dict(names) for key, names in dict(kept).items() if names is not None}}


def named(objects: ClusterObjects, names: Mapping[str, str] | None) -> ClusterObjects:
    """`objects` with each machine template, and its referrer's reference, under its name in
    `names` (the record), else under its digested name."""
    named_objects = copy.deepcopy(objects)
    for template, ref in (
        (named_objects.control_plane_template, named_objects.control_plane["spec"]["machineTemplate"]["spec"]),
        (named_objects.worker_template, named_objects.machine_deployment["spec"]["template"]["spec"]),
    ):
        name = (names or {}).get(template["metadata"]["name"], template["metadata"]["name"])
        template["metadata"]["name"] = name
        ref["infrastructureRef"]["name"] = name
    return named_objects


def check_owner(cluster: WorkloadCluster, objects: ClusterObjects, kubeconfig: str, *, recorded: bool) -> None:
    """Before any of the cluster's objects is sent: adopting, the running cluster must be exactly
    what the settings render (`objects`, named as clusterctl named them); else a cluster this stack
    took over (`recorded`) is its own, and any other must not be someone else's."""
    if cluster.adopt:
        refuse_unlike_applied(cluster, named(objects, objects.made_names), kubeconfig)
    elif not recorded:
        hand_made_clusters.refuse_hand_made(cluster.namespace, cluster.name, kubeconfig)


def refuse_unlike_applied(cluster: WorkloadCluster, declared: ClusterObjects, kubeconfig: str) -> None:
    """Raises unless each object runs and was applied exactly as `declared`, naming every field
    that differs and the object it is on."""
    differences: list[str] = []
    for body in declared.resources():
        kind, name = body["kind"], body["metadata"]["name"]
        live = hand_made_clusters.read_object(kubeconfig, object_path(body))
        if live is None and kind == "Cluster":
            raise AdoptedClusterMissingError(
                f"{PROJECT}:workloadClusters: {cluster.name} has adopt: true, but its Cluster "
                f"{cluster.namespace}/{name} does not exist on the management cluster; adopt imports a running "
                "cluster: set it to false to have the program create the cluster instead"
            )
        if live is None:
            differences.append(f"{kind} {name}: does not exist")
            continue
        applied = _as_applied(live)
        differences += [
            f"{kind} {name}: {line}" for line in _differences(_compared(kind, applied), _compared(kind, body))
        ]
    if differences:
        raise TakeoverMismatchError(
            f"{PROJECT}:workloadClusters: {cluster.name}'s settings do not render what clusterctl applied, so "
            "the adoption would change the running cluster (a machine field rolls every node). Set the keys "
            'these fields come from (docs/adoption.md, the table in "A workload cluster made with clusterctl") '
            "to the running values:\n    " + "\n    ".join(differences)
        )


def object_path(body: Mapping[str, Any]) -> str:
    """The API path of one of the template's objects (each kind's plural is its name and `s`)."""
    metadata = body["metadata"]
    plural = f"{body['kind'].lower()}s"
    return f"/apis/{body['apiVersion']}/namespaces/{metadata['namespace']}/{plural}/{metadata['name']}"


def _as_applied(live: Mapping[str, Any]) -> dict[str, Any]:
    """What was applied: kubectl's record of it where there is one (the live object also holds
    what the API server and the controllers filled in), else the live object."""
    recorded = (live.get("metadata", {}).get("annotations") or {}).get(LAST_APPLIED)
    applied: dict[str, Any] = json.loads(recorded) if recorded else dict(live)
    return applied


def _compared(kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields that the settings decide: labels, annotations but kubectl's own, the spec;
    nulls dropped (the template's empty `matchLabels:`, which the program leaves out)."""
    metadata = body.get("metadata", {})
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k != LAST_APPLIED}
    compared: dict[str, Any] = _without_nulls(
        {"metadata": {"labels": metadata.get("labels"), "annotations": annotations}, "spec": body.get("spec")}
    )
    if kind in NOT_DECLARED:
        section, key = NOT_DECLARED[kind]
        compared.get(section, {}).pop(key, None)
    return compared


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: _without_nulls(v) for k, v in value.items() if v is not None}
        return {k: v for k, v in kept.items() if v != {}}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _differences(applied: Any, declared: Any, path: str = "") -> Iterator[str]:
    """`path: running <value>, the settings render <value>` for each field that differs."""
    if isinstance(applied, dict) and isinstance(declared, dict):
        for key in sorted(set(applied) | set(declared)):
            yield from _differences(applied.get(key, _ABSENT), declared.get(key, _ABSENT), f"{path}.{key}".lstrip("."))
    elif isinstance(applied, list) and isinstance(declared, list) and len(applied) == len(declared):
        for index, (a, d) in enumerate(zip(applied, declared, strict=True)):
            yield from _differences(a, d, f"{path}[{index}]")
    elif applied != declared:
        yield f"{path}: running {_shown(applied)}, the settings render {_shown(declared)}"


_ABSENT = object()


def _shown(value: Any) -> str:
    return "nothing" if value is _ABSENT else json.dumps(value)
