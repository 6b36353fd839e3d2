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
The record also tells the hand-made guard that the cluster is the stack's own: until the run with
adopt off applies the program's Cluster, the live one carries no mark of the stack's
(hand_made_clusters.STACK_MARK).

A cluster that lab-mgmt made is taken over the same way by a new stack when the old one's state or
passphrase is lost (WorkloadCluster.recover, docs/operations.md "Lost state or passphrase"): its
objects are imported under the names the program gave them (a taken-over one's templates under
clusterctl's), its entry in the record is empty (the names are the digested ones) and says only
that the cluster is the stack's, and the check compares every declared field with the running
object: nothing but the lost state recorded what was applied.

pulumi-kubernetes imports a custom resource with only its identity among its inputs, so an
import diffs every declared field against nothing; adopting, the objects' `metadata` and `spec`
are kept as they run (components.adoption.OBJECT_INPUTS), and the comparison that the import
cannot make is made here, twice, before anything is sent, naming each field that differs:
- every field the settings declare must equal the live object's at the same path (what only the
  live object has, the API server's defaults and the controllers' fields, is not compared): a
  `kubectl edit` or `patch` since the last apply is found here, where the run with adopt off would
  write the old value back (a rollout, or a version downgrade);
- what `kubectl apply` recorded on each object (`kubectl.kubernetes.io/last-applied-configuration`)
  must be what the settings render: a field applied by kubectl that the settings do not declare
  would be dropped when the program's apply takes kubectl's fields.

And the one field the program leaves to the autoscaler: while kubectl's manager still holds the
MachineDeployment's `spec.replicas`, the run with adopt off hands kubectl's fields to the program
(pulumi-kubernetes' fixCSAFieldManagers takes every manager whose name starts with `kubectl`),
whose apply does not set it; server-side apply then drops the field and Cluster API's defaulting
webhook sets it anew, clamped into the entry's workers.minSize..maxSize (cluster-api v1.12
internal/webhooks/machinedeployment.go). A live count outside that range is refused instead.

And what the owner set by hand around the cluster: Cilium's values that the release's upgrade
with adopt off would drop (components.cilium_values), and the flags of a cluster-autoscaler
installed by hand that the owner uninstalls before the program's is installed
(components.autoscaler_flags). Each is named, with the entry's key that keeps it, from the
adoption run on.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pulumi

from components import (
    autoscaler_flags,
    cilium_values,
    cluster_autoscaler,
    field_manager,
    hand_made_clusters,
    kept_fields,
)
from components.cluster_template import ClusterObjects
from components.settings import PROJECT, WorkloadCluster
from components.settings.config import release as version_parts
from components.settings.workload import CAPACITY_ANNOTATION, NODE_GROUP_KEYS

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RECORD_OUTPUT = "adoptedWorkloadClusters"
"""`{"<namespace>/<name>": {"<machine template's Pulumi name>": "<its Kubernetes name>"}}`, one
entry per taken-over cluster."""
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# What the program leaves to others on purpose: the autoscaler owns the replicas
# (cluster_template._patch_machine_deployment), which clusterctl rendered from WORKER_MACHINE_COUNT.
# And the template's null `matchLabels`, which the program leaves out
# (cluster_template._patch_machine_deployment) and Cluster API's defaulting webhook fills in.
NOT_DECLARED = {"MachineDeployment": (("spec", "replicas"), ("spec", "selector", "matchLabels"))}


class AdoptedClusterMissingError(pulumi.RunError):
    """`adopt: true` on a cluster that does not run."""


class TakeoverMismatchError(pulumi.RunError):
    """The settings do not render what clusterctl applied: importing would change the cluster."""


class WorkerCountOutsideRangeError(pulumi.RunError):
    """Taking kubectl's fields would set the MachineDeployment's replicas anew, deleting or adding workers."""


class CiliumValuesDroppedError(pulumi.RunError):
    """Cilium runs with values the owner set by hand that the release's upgrade would drop."""


class KubernetesMinorSkippedError(pulumi.RunError):
    """A workload cluster's kubernetesVersion more than one minor after what its control plane runs."""


class KubernetesDowngradeError(pulumi.RunError):
    """A workload cluster's kubernetesVersion lower than what its control plane runs."""


class HandMadeAutoscalerFlagsError(pulumi.RunError):
    """An autoscaler installed by hand passes flags the program's would not."""


def record_key(cluster: WorkloadCluster) -> str:
    return f"{cluster.namespace}/{cluster.name}"


def kept_names(
    cluster: WorkloadCluster, objects: ClusterObjects, last: Mapping[str, str] | None
) -> dict[str, str] | None:
    """The record's entry for this run: the last run's (`last`), and, adopting, clusterctl's names
    of the templates declared now (none for a cluster lab-mgmt made: its entry only says it is the
    stack's). None for a cluster that was never taken over. Names of templates no longer declared
    stay: a sizing changed back finds its template's name again."""
    if cluster.adopt:
        return {**(last or {}), **_running_names(cluster, objects)}
    return dict(last) if last is not None else None


def as_running(cluster: WorkloadCluster, objects: ClusterObjects) -> ClusterObjects:
    """`objects` named as the running cluster names them, which an adoption imports: clusterctl's
    names for a cluster it made, the digested ones for a cluster lab-mgmt made, and those the entry
    gives a taken-over cluster being recovered whose templates rolled (templateNames)."""
    return named(objects, _running_names(cluster, objects)) if cluster.taken_over else objects


def _running_names(cluster: WorkloadCluster, objects: ClusterObjects) -> dict[str, str]:
    """Digested name -> running name of each machine template of a taken-over cluster whose
    running name is not its digested one (none for a cluster lab-mgmt made)."""
    if not cluster.taken_over:
        return {}
    names = dict(objects.made_names)
    for role, template in (("controlPlane", objects.control_plane_template), ("worker", objects.worker_template)):
        if role in cluster.template_names:
            names[template["metadata"]["name"]] = cluster.template_names[role]
    return {digested: name for digested, name in names.items() if name != digested}


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


class Live:
    """The seven objects as the management cluster runs them, each read at most once in a run
    (None where it does not exist), under the names this run gives them; `kubeconfig_file`: where
    the owner's laptop keeps the admin kubeconfig, which every kubectl line of a refusal names."""

    def __init__(self, kubeconfig: str, declared: ClusterObjects, kubeconfig_file: str) -> None:
        self.kubeconfig, self.kubeconfig_file = kubeconfig, kubeconfig_file
        self._paths = {role: object_path(body) for role, body in declared.roles().items()}
        self._read: dict[str, dict[str, Any] | None] = {}

    def __getitem__(self, role: str) -> dict[str, Any] | None:
        return self._object(self._paths[role])

    def schema(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """The openAPIV3Schema of `body`'s kind at its version, as its CRD on the management cluster
        has it (None where there is none): what the API server defaults on every write."""
        group, version = body["apiVersion"].split("/")
        crd = self._object(f"{CRDS}/{body['kind'].lower()}s.{group}") or {}
        for served in (crd.get("spec") or {}).get("versions") or []:
            if served.get("name") == version:
                schema: dict[str, Any] | None = (served.get("schema") or {}).get("openAPIV3Schema")
                return schema
        return None

    def _object(self, path: str) -> dict[str, Any] | None:
        if path not in self._read:
            self._read[path] = hand_made_clusters.read_object(self.kubeconfig, path)
        return self._read[path]


@dataclass(frozen=True)
class TakeoverPlan:
    """What the live cluster decided for this run, read once before any object is sent."""

    forced: frozenset[str]
    """The roles (ClusterObjects.roles) whose apply in this run takes the fields it sets from
    every other manager: each object of a taken-over cluster that no apply of the program's has
    reached yet (_becoming: W6, or a W6 stopped halfway), whose values the adoption run checked and
    this run checks again; and each object a stack from before the program named its field
    manager applied under pulumi-kubernetes's drawn name (_drawn_manager), whose first change under
    the program's name would stop at a conflict with that name. Once the object has been applied,
    a hand edit of a declared field stops the run as a conflict, as on a cluster the program made
    (docs/troubleshooting.md)."""


class Takeover:
    """One workload cluster's takeover as WorkloadCluster enters it, once: the names its objects
    keep (the record's entry, `kept_names`), the objects named so (`declared`) and as they run,
    which an adoption imports (`imported`), and the plan that the live cluster decides
    (`plan`, TakeoverPlan), every refusal made before it is known."""

    def __init__(
        self,
        cluster: WorkloadCluster,
        objects: ClusterObjects,
        kubeconfig: pulumi.Output[str],
        *,
        last_names: pulumi.Output[Mapping[str, str] | None],
        held: pulumi.Output[bool],
        stack: str,
        autoscaler_image_tag: str,
        kubeconfig_file: str,
    ) -> None:
        """`kubeconfig`: the management cluster's admin kubeconfig (`kubeconfig_file` on the
        owner's laptop). `last_names`: the last run's record of a taken-over cluster; `held`: the
        last run declared it."""
        self.record_key, self.stack = record_key(cluster), stack
        self.kept_names = last_names.apply(lambda last: kept_names(cluster, objects, last))
        self.declared = self.kept_names.apply(lambda names: named(objects, names))
        self.imported = as_running(cluster, objects)
        # What the plan holds is nothing secret, though it is read with the admin kubeconfig.
        self.plan: pulumi.Output[TakeoverPlan] = pulumi.Output.unsecret(
            pulumi.Output.all(kubeconfig, last_names, held, self.declared).apply(
                lambda args: decide(
                    cluster,
                    args[3],
                    Live(args[0], args[3], kubeconfig_file),
                    taken_over=args[1] is not None,
                    held=bool(args[2]),
                    stack=stack,
                    autoscaler_image_tag=autoscaler_image_tag,
                )
            )
        )


def decide(
    cluster: WorkloadCluster,
    declared: ClusterObjects,
    live: Live,
    *,
    taken_over: bool,
    held: bool,
    stack: str,
    autoscaler_image_tag: str,
) -> TakeoverPlan:
    """Before any of the cluster's objects is sent: adopting, the running cluster must be exactly
    what the settings render (`declared`, named as it runs them); else a cluster this stack took
    over (`taken_over`: the record names it) is its own, one it declared before (`held`) is its
    own while it carries a stack's mark (a `pulumi stack rename` keeps the state, not the name in
    the mark; a cluster deleted and made again by hand under its name carries none), and any
    other must carry the mark of this stack (`stack`); `autoscaler_image_tag`: the program's
    autoscaler's, against a hand-installed one's. Each object of a taken-over cluster that no
    apply of the program's has reached is becoming the program's in this run (W6): every declared
    field must still run as declared and nothing be set by hand since the adoption run that the
    settings do not keep; and Cilium's values are checked again, which this run's upgrade of the
    release replaces."""
    if cluster.recover:
        refuse_unlike_running(cluster, declared, live)
    elif cluster.adopt:
        refuse_unlike_applied(cluster, declared, live)
    elif not (taken_over or (held and _marked(live["cluster"]))):
        hand_made_clusters.refuse_hand_made(
            cluster.namespace, cluster.name, live["cluster"], stack=stack, kubeconfig_file=live.kubeconfig_file
        )
    becoming = _becoming(cluster, declared, live)
    if becoming:
        refuse_hand_set(cluster, declared, live, becoming)
    if cluster.taken_over:
        refuse_replicas_outside_range(cluster, declared, live)
        if cluster.adopt or becoming:
            refuse_dropped_cilium_values(cluster, live.kubeconfig)
        refuse_dropped_autoscaler_flags(cluster, live.kubeconfig, autoscaler_image_tag)
    if not (cluster.adopt or cluster.recover):
        refuse_version_change(cluster, live)
    drawn = {role for role in declared.roles() if _drawn_manager(live, role)}
    return TakeoverPlan(forced=frozenset(becoming | drawn))


def _marked(running: Mapping[str, Any] | None) -> bool:
    """Whether the running Cluster carries a stack's mark, whichever stack's (review 5, 10a)."""
    return bool(((running or {}).get("metadata", {}).get("annotations") or {}).get(hand_made_clusters.STACK_MARK))


def _becoming(cluster: WorkloadCluster, declared: ClusterObjects, live: Live) -> set[str]:
    """The roles of a taken-over cluster, out of adopt mode, whose running object no apply or
    create of pulumi-kubernetes has touched: they are as clusterctl and the owner left them, and
    this run makes them the program's. Decided for each object, never by one object's mark: a
    run stopped halfway leaves some applied and others not."""
    if not cluster.taken_over or cluster.adopt:
        return set()
    return {role for role in declared.roles() if (running := live[role]) is not None and not _program_managers(running)}


def _program_managers(live: Mapping[str, Any]) -> set[str]:
    """The managers of pulumi-kubernetes on `live`: its create's, a drawn name's, the program's."""
    return {
        str(entry.get("manager"))
        for entry in live.get("metadata", {}).get("managedFields") or []
        if str(entry.get("manager", "")).startswith(field_manager.CREATE)
    }


def _drawn_manager(live: Live, role: str) -> bool:
    """Whether a stack from before the program named its field manager applied the object under
    the name pulumi-kubernetes drew (`pulumi-kubernetes-<suffix>`): the program's name applies
    without force, so any value it changes in its first run conflicts with that name
    (provider.go `Update` relinquishes the old name only after a successful apply)."""
    running = live[role]
    return running is not None and bool(_program_managers(running) - {field_manager.CREATE, field_manager.NAME})


def refuse_version_change(cluster: WorkloadCluster, live: Live) -> None:
    """Raises where kubernetesVersion is lower than the version the running control plane has, or
    more than one minor after it: Cluster API's KubeadmControlPlane webhook refuses the skip
    (v1.12 controlplane/kubeadm/internal/webhooks/kubeadmcontrolplane.go, "Skipping a minor
    version is not allowed"), only once the run has made the new machine templates it would roll
    to, and lets a downgrade through, which kubeadm does not support."""
    running = ((live["controlPlane"] or {}).get("spec") or {}).get("version")
    runs = version_parts(running) if isinstance(running, str) else ()
    wanted = version_parts(cluster.kubernetes_version)
    where = (
        f"{PROJECT}:{cluster.key}.kubernetesVersion: {cluster.kubernetes_version} is {{}} {running}, which "
        f"{cluster.namespace}/{cluster.name}'s control plane runs"
    )
    if len(runs) < 3 or len(wanted) < 3:
        return
    if wanted < runs:
        raise KubernetesDowngradeError(
            where.format("lower than")
            + ": Cluster API would roll every control-plane machine to the older version, which kubeadm does "
            f"not support. Set it to {running} (a hand edit of the control plane's spec.version is named so too)"
        )
    if wanted[:2] >= (runs[0], runs[1] + 2):
        raise KubernetesMinorSkippedError(
            where.format("more than one minor after")
            + ": Cluster API upgrades one minor at a time and refuses the skip, after this run would have made "
            f"the new machine templates. Upgrade to a v{runs[0]}.{runs[1] + 1} release first (docs/operations.md, "
            '"Upgrading a workload cluster\'s Kubernetes")'
        )


# Helm keeps each revision of a release in a Secret of the release's namespace, labelled so; the
# deployed one holds the values given at install or upgrade (`config`), as `helm get values` prints them.
DEPLOYED_RELEASES = "/api/v1/{namespaces}secrets?labelSelector=owner%3Dhelm%2Cstatus%3Ddeployed{name}"
CILIUM_RELEASE = DEPLOYED_RELEASES.format(namespaces="namespaces/kube-system/", name="%2Cname%3Dcilium")
EVERY_RELEASE = DEPLOYED_RELEASES.format(namespaces="", name="")


def release_record(secret: dict[str, Any]) -> dict[str, Any]:
    """The release record a Helm release Secret keeps: Helm stores it as base64 of its gzipped
    JSON, and the Secret's data is base64 again."""
    record: dict[str, Any] = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(secret["data"]["release"]))))
    return record


def _deployed(kubeconfig: str, path: str, cluster: str = "the management cluster") -> list[dict[str, Any]]:
    """The deployed releases that `path` lists, decoded (release_record)."""
    listed = hand_made_clusters.read_object(kubeconfig, path, cluster=cluster) or {}
    return [release_record(item) for item in listed.get("items") or []]


def refuse_dropped_cilium_values(cluster: WorkloadCluster, kubeconfig: str) -> None:
    """Raises while Cilium's running release holds a value the owner set that the entry does not
    keep: the run with adopt off would drop it (components.cilium_values). Read through the
    cluster's own admin kubeconfig, which Cluster API keeps on the management cluster; only until
    that run has upgraded the release, so that a value kept is dropped again by taking it out of
    the entry, and a later run does not need the cluster's API."""
    secret = hand_made_clusters.read_object(
        kubeconfig, f"/api/v1/namespaces/{cluster.namespace}/secrets/{cluster.name}-kubeconfig"
    )
    if secret is None:
        return
    workload = base64.b64decode(secret["data"]["value"]).decode()
    for release in _deployed(workload, CILIUM_RELEASE, cluster.name):
        # Both as the running chart renders them (W2 sets ciliumVersion to the running one): a
        # default the program changes is dropped too, one both run alike is not.
        changed = cilium_values.dropped(
            cilium_values.running(release),
            cilium_values.running(release, cilium_values.declared(cluster.cilium_values)),
        )
        # The operator's values are the program's to set (no entry may keep another): named, not refused.
        for path, line in changed:
            if path in cilium_values.SET_OVER_RUNNING:
                pulumi.log.warn(
                    f"{PROJECT}:workloadClusters: {cluster.name}'s Cilium runs with a value of the program's own, "
                    f"which the run with adopt off sets: {line}"
                )
        dropped = [line for path, line in changed if path not in cilium_values.SET_OVER_RUNNING]
        if dropped:
            raise CiliumValuesDroppedError(
                f"{PROJECT}:workloadClusters: {cluster.name}'s Cilium runs with values the program does not set, "
                "which the run with adopt off would drop when it upgrades the release. Keep each under the entry's "
                "ciliumValues (ciliumValues.<path>), or take it out of the release by hand first (docs/adoption.md, "
                "W1):\n    " + "\n    ".join(dropped)
            )


def refuse_dropped_autoscaler_flags(cluster: WorkloadCluster, kubeconfig: str, image_tag: str) -> None:
    """Raises while a cluster-autoscaler installed by hand for this cluster (or for no cluster in
    particular) passes a flag that the program's release would not: uninstalled before the
    program's is installed (docs/adoption.md step 5), it would go without a word
    (components.autoscaler_flags). Every other value of it that the program's release sets
    otherwise is named too, as a warning: no key keeps those."""
    flags = cluster.autoscaler.flags()
    program = cluster_autoscaler.release_values(cluster, image_tag, "")
    for release in _deployed(kubeconfig, EVERY_RELEASE):
        config = release.get("config") or {}
        if (
            release.get("chart", {}).get("metadata", {}).get("name") != "cluster-autoscaler"
            or release.get("name") == f"{cluster.name}-autoscaler"
            or (config.get("autoDiscovery") or {}).get("clusterName") not in (cluster.name, None)
        ):
            continue
        where = f"{release.get('namespace')}/{release.get('name')}"
        for line in autoscaler_flags.changed_values(config, program):
            pulumi.log.warn(
                f"{PROJECT}:workloadClusters: the cluster-autoscaler installed by hand for {cluster.name} ({where}) "
                f"runs with a value the program's release sets otherwise: {line}"
            )
        dropped = list(autoscaler_flags.dropped(config, flags))
        if dropped:
            raise HandMadeAutoscalerFlagsError(
                f"{PROJECT}:workloadClusters: the cluster-autoscaler installed by hand for {cluster.name} "
                f"({release.get('namespace')}/{release.get('name')}) passes flags the program's release does not: "
                "uninstalled before the program installs its own (docs/adoption.md, step 5), they would be lost. "
                "Keep each in the entry, or take it out of that release first:\n    " + "\n    ".join(dropped)
            )


def refuse_replicas_outside_range(cluster: WorkloadCluster, declared: ClusterObjects, running: Live) -> None:
    """Raises while kubectl's manager holds the MachineDeployment's spec.replicas at a count
    outside workers.minSize..maxSize (the module's docstring says what the run would do)."""
    deployment = declared.machine_deployment
    live = running["machineDeployment"]
    if live is None or not _held_by_kubectl(live, ("f:spec", "f:replicas")):
        return
    replicas, workers = live.get("spec", {}).get("replicas"), cluster.workers
    if not isinstance(replicas, int) or workers.min_size <= replicas <= workers.max_size:
        return
    bound, key = (workers.max_size, "maxSize") if replicas > workers.max_size else (workers.min_size, "minSize")
    raise WorkerCountOutsideRangeError(
        f"{PROJECT}:workloadClusters: {cluster.name}'s MachineDeployment {cluster.namespace}/"
        f"{deployment['metadata']['name']} runs {replicas} workers (spec.replicas, held by kubectl), outside "
        f"workers.minSize..maxSize {workers.min_size}..{workers.max_size}: the run that hands kubectl's fields to "
        f"the program has Cluster API set it to {bound}, {'deleting' if replicas > bound else 'adding'} "
        f"{abs(replicas - bound)} workers. Set workers.{key} to {replicas} (docs/adoption.md, W6)"
    )


def _held_by_kubectl(live: Mapping[str, Any], field: tuple[str, ...]) -> bool:
    """Whether a field manager whose name starts with `kubectl` holds `field` (managedFields' fieldsV1 keys)
    on the object itself: fixCSAFieldManagers leaves a subresource's entry (`kubectl scale`) alone."""
    for entry in live.get("metadata", {}).get("managedFields") or []:
        if entry.get("subresource"):
            continue
        fields: Any = entry.get("fieldsV1") or {}
        for key in field:
            fields = fields.get(key) if isinstance(fields, dict) else None
        if str(entry.get("manager", "")).startswith("kubectl") and fields is not None:
            return True
    return False


def refuse_unlike_applied(cluster: WorkloadCluster, declared: ClusterObjects, running: Live) -> None:
    """Raises unless each object runs and was applied exactly as `declared`, runs with every
    declared field as declared, and holds no field set by hand that the settings do not keep,
    naming every field that differs and the object it is on."""

    def unlike(role: str, body: dict[str, Any], live: dict[str, Any]) -> list[str]:
        if LAST_APPLIED not in (live.get("metadata", {}).get("annotations") or {}):
            # Made with `kubectl create` or `replace`: nothing recorded what was sent, so its
            # creator's fields are weighed one by one (kept_fields.held, the CRD's defaults aside).
            return list(_unlike_declared(body, live))
        rendered = _compared(body["kind"], _with_running_annotations(body, live))
        return [*_unlike_declared(body, live), *_differences(_compared(body["kind"], _as_applied(live)), rendered)]

    differences = _unlike(cluster, declared, running, unlike)
    if differences:
        raise TakeoverMismatchError(
            f"{PROJECT}:workloadClusters: {cluster.name}'s settings do not render what clusterctl applied and the "
            "owner set by hand, so the adoption would change the running cluster (a machine field rolls every node, "
            "a control-plane field the control plane). Set the keys these fields come from (docs/adoption.md, the "
            'table in "A workload cluster made with clusterctl") to the running values:\n    '
            + "\n    ".join(differences)
        )


def refuse_unlike_running(cluster: WorkloadCluster, declared: ClusterObjects, running: Live) -> None:
    """Raises unless each object of a cluster lab-mgmt made runs with every field the settings
    declare as declared (what the program applied is what runs, and nothing recorded it but the lost
    state), and holds no field set by hand that the settings do not keep. Only declared fields are
    compared, so not the stack's mark, which the objects as rendered do not carry: the run with
    adopt off puts this stack's on. What the lost stack applied and the settings no longer render
    is named like a hand field: the program's apply is the manager that would drop it."""

    def unlike(role: str, body: dict[str, Any], live: dict[str, Any]) -> list[str]:
        return list(unlike_live(_compared(body["kind"], live), _compared(body["kind"], body)))

    if cluster.taken_over:
        _refuse_rolled_templates(cluster, declared, running)
    differences = _unlike(cluster, declared, running, unlike, taken=kept_fields.PROGRAM_APPLIES)
    if differences:
        raise TakeoverMismatchError(
            f"{PROJECT}:workloadClusters: {cluster.name}'s settings do not render the cluster as it runs, so the run "
            "with adopt off would change it (a machine field rolls every node). Set the keys these fields come from "
            'to the values the lost stack had (docs/operations.md, "Lost state or passphrase"):\n    '
            + "\n    ".join(differences)
        )


def _refuse_rolled_templates(cluster: WorkloadCluster, declared: ClusterObjects, running: Live) -> None:
    """Raises where the running control plane or workers use another machine template than the
    recovery would import: a taken-over cluster keeps clusterctl's names only until its first
    rollout (a Kubernetes upgrade, a sizing), and only the lost state recorded which ones rolled.
    The lines that name them as they run are given (templateNames)."""
    lines = []
    for role, referrer, ref in (
        ("controlPlane", declared.control_plane, ("spec", "machineTemplate", "spec", "infrastructureRef", "name")),
        ("worker", declared.machine_deployment, ("spec", "template", "spec", "infrastructureRef", "name")),
    ):
        live: Any = running["controlPlane" if role == "controlPlane" else "machineDeployment"]
        for key in ref:
            live = live.get(key) if isinstance(live, dict) else None
        wanted: Any = referrer
        for key in ref:
            wanted = wanted[key]
        if isinstance(live, str) and live != wanted:
            lines.append(f"pulumi config set --path '{cluster.key}.templateNames.{role}' {live}")
    if lines:
        raise TakeoverMismatchError(
            f"{PROJECT}:workloadClusters: {cluster.name}'s machine templates rolled since its takeover: it runs them "
            "under other names than clusterctl's, which only the lost state recorded. Name them as they run "
            '(docs/operations.md, "Lost state or passphrase"), then preview again:\n    ' + "\n    ".join(lines)
        )


def refuse_hand_set(cluster: WorkloadCluster, declared: ClusterObjects, running: Live, roles: set[str]) -> None:
    """Raises while an object of `roles`, which this run makes the program's, holds a field set
    by hand since the adoption run that the settings do not keep, which this run (taking kubectl's
    fields) would remove, or runs a declared field otherwise than declared, which its forced apply
    would write back: a `kubectl annotate --overwrite` of the node group's size, a `kubectl patch`
    of the control plane's version (a rollout, or a downgrade the webhook lets through)."""
    differences = _unlike(
        cluster, declared, running, lambda role, body, live: list(_unlike_declared(body, live)), roles=roles
    )
    if differences:
        raise TakeoverMismatchError(
            f"{PROJECT}:workloadClusters: {cluster.name}'s objects were changed by hand since the adoption run: this "
            "run makes them the program's (docs/adoption.md, W6), taking kubectl's fields and the fields it sets from "
            "any other manager, so it would remove or write back each of these. Set the entry's key to the running "
            "value, or keep the field, or take it back by hand first:\n    " + "\n    ".join(differences)
        )


def _unlike(
    cluster: WorkloadCluster,
    declared: ClusterObjects,
    running: Live,
    unlike: Callable[[str, dict[str, Any], dict[str, Any]], list[str]],
    *,
    roles: set[str] | None = None,
    taken: tuple[tuple[str, tuple[str, ...]], ...] = (),
) -> list[str]:
    """`kind name: field…` for each field set by hand that the settings do not render
    (components.kept_fields; `taken`: managers counted as hand work beside kubectl's), then each
    other field that `unlike` finds between a live object and its rendering. Adopting (no
    `roles`), each object that does not run too, and a missing Cluster raises; else only the
    objects of `roles` that run."""
    differences: list[str] = []
    for role, body in declared.roles().items():
        kind, name = body["kind"], body["metadata"]["name"]
        live = running[role]
        if roles is not None and (role not in roles or live is None):
            continue
        if live is None and kind == "Cluster":
            raise AdoptedClusterMissingError(
                f"{PROJECT}:workloadClusters: {cluster.name} has adopt: true, but its Cluster "
                f"{cluster.namespace}/{name} does not exist on the management cluster; adopt imports a running "
                "cluster: set it to false to have the program create the cluster instead"
            )
        if live is None:
            differences.append(f"{kind} {name}: does not exist")
            continue
        differences += [
            f"{kind} {name}: {line}"
            for line in _said_of(cluster, role, body, live, running, unlike=unlike, taken=taken)
        ]
    return differences


def _said_of(
    cluster: WorkloadCluster,
    role: str,
    body: dict[str, Any],
    live: dict[str, Any],
    running: Live,
    *,
    unlike: Callable[[str, dict[str, Any], dict[str, Any]], list[str]],
    taken: tuple[tuple[str, tuple[str, ...]], ...],
) -> list[str]:
    """What _unlike says of one running object: each hand-set field with its ways out, then each
    other field `unlike` finds; or, where kubectl's work on it is recorded at another version than
    it is read at, each such record alone, for none of its hand work can be read until then."""
    kind, name = body["kind"], body["metadata"]["name"]
    elsewhere = kept_fields.at_other_versions(live)
    if elsewhere:
        return [
            kept_fields.version_advice(
                index,
                entry,
                read_at=live["apiVersion"],
                kind=kind,
                name=name,
                namespace=cluster.namespace,
                kubeconfig=running.kubeconfig_file,
            )
            for index, entry in elsewhere
        ]
    recorded = (live.get("metadata", {}).get("annotations") or {}).get(LAST_APPLIED)
    hand_set = kept_fields.held(
        live,
        _walked(body, live),
        skipped=NOT_DECLARED.get(kind, ()),
        applied=json.loads(recorded) if recorded else None,
        taken=taken,
    )
    if hand_set:
        # What the API server defaults comes back when the program's apply drops it: a
        # creator's field only because the API server gave it the defaults with its create.
        schema = running.schema(body)
        hand_set = [field for field in hand_set if not kept_fields.defaulted(schema, field.path, field.value)]
    where = {
        **{"entry": cluster.key, "role": role, "kind": kind, "name": name, "namespace": cluster.namespace},
        "kubeconfig": running.kubeconfig_file,
    }
    found = [kept_fields.advice(field, **where) for field in hand_set]
    found += [
        _with_key(line)
        for line in unlike(role, body, live)
        if not any(_within(line, field.shown) for field in hand_set)
    ]
    return list(dict.fromkeys(found))


def _walked(body: Mapping[str, Any], live: Mapping[str, Any]) -> dict[str, Any]:
    """The rendering as components.kept_fields.held walks it: labels and annotations always maps,
    so that each is looked at on its own; the program's own annotations as _with_running_annotations
    leaves them."""
    metadata = _with_running_annotations(body, live)["metadata"]
    return {
        "metadata": {"labels": metadata.get("labels") or {}, "annotations": metadata.get("annotations") or {}},
        "spec": body.get("spec") or {},
    }


def _within(line: str, path: str) -> bool:
    field = line.split(": ", 1)[0]
    return field == path or field.startswith((f"{path}.", f"{path}["))


def _with_running_annotations(body: Mapping[str, Any], live: Mapping[str, Any]) -> dict[str, Any]:
    """`body` with the node group's annotations (cluster_template.program_annotations) as they are
    to be compared with the running object: one it lacks, and kubectl never applied, is the
    program's to add at W6; a capacity of the same quantity in another form (16Gi for 16384Mi)
    is the same capacity."""
    if body["kind"] != "MachineDeployment":
        return dict(body)
    running = {**(_as_applied(live).get("metadata", {}).get("annotations") or {})}
    running |= live.get("metadata", {}).get("annotations") or {}
    annotations = dict(body["metadata"].get("annotations") or {})
    for key in NODE_GROUP_KEYS:
        if key not in annotations:
            continue
        if key not in running:
            del annotations[key]
        elif key.startswith(CAPACITY_ANNOTATION) and same_quantity(running[key], annotations[key]):
            annotations[key] = running[key]
    return {**body, "metadata": {**body["metadata"], "annotations": annotations}}


def _unlike_declared(body: Mapping[str, Any], live: Mapping[str, Any]) -> Iterator[str]:
    """Each field the settings declare that runs otherwise (unlike_live), the node group's
    annotations as _with_running_annotations compares them."""
    return unlike_live(_compared(body["kind"], live), _compared(body["kind"], _with_running_annotations(body, live)))


def _with_key(line: str) -> str:
    """A difference in one of the program's own annotations, with the entry's key that sets it."""
    field = line.split(": ", 1)[0].removeprefix("metadata.annotations.")
    key = NODE_GROUP_KEYS.get(field)
    return f"{line} (set it with workers.{key})" if key else line


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


def same_quantity(a: str, b: str) -> bool:
    """Whether two Kubernetes quantities are equal (resource.Quantity's suffixes)."""
    return _quantity(a) is not None and _quantity(a) == _quantity(b)


_SUFFIXES: dict[str, int | Fraction] = {
    **{"": 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18},
    **{"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60},
}


def _quantity(text: str) -> Fraction | None:
    number = text.rstrip("kMGTPEimu")
    suffix = text[len(number) :]
    if suffix not in _SUFFIXES:
        return None
    try:
        return Fraction(number) * _SUFFIXES[suffix]
    except (ValueError, ZeroDivisionError):
        return None


def _compared(kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields that the settings decide: labels, annotations but kubectl's own, the spec;
    nulls dropped (the template's empty `matchLabels:`, which the program leaves out)."""
    metadata = body.get("metadata", {})
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k != LAST_APPLIED}
    compared: dict[str, Any] = _without_nulls(
        {"metadata": {"labels": metadata.get("labels"), "annotations": annotations}, "spec": body.get("spec")}
    )
    for *parents, key in NOT_DECLARED.get(kind, ()):
        node = compared
        for parent in parents:
            node = node.get(parent) or {}
        node.pop(key, None)
    return compared


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: _without_nulls(v) for k, v in value.items() if v is not None}
        return {k: v for k, v in kept.items() if v != {}}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def unlike_live(live: Any, declared: Any, path: str = "") -> Iterator[str]:
    """`path: running <value>, the settings render <value>` for each field the settings declare
    whose live value differs; a field only the live object has is not compared."""
    if isinstance(declared, dict) and isinstance(live, dict):
        for key in sorted(declared):
            yield from unlike_live(live.get(key, _ABSENT), declared[key], f"{path}.{key}".lstrip("."))
    elif isinstance(declared, list) and isinstance(live, list) and len(live) == len(declared):
        for index, (running, wanted) in enumerate(zip(live, declared, strict=True)):
            yield from unlike_live(running, wanted, f"{path}[{index}]")
    elif live != declared:
        yield f"{path}: running {_shown(live)}, the settings render {_shown(declared)}"


def _differences(applied: Any, declared: Any, path: str = "") -> Iterator[str]:
    """`path: running <value>, the settings render <value>` for each field kubectl applied that
    the settings render otherwise or not at all. One they render that kubectl did not apply is
    compared with the live object (unlike_live): the owner may have set it by hand since."""
    if isinstance(applied, dict) and isinstance(declared, dict):
        for key in sorted(applied):
            yield from _differences(applied[key], declared.get(key, _ABSENT), f"{path}.{key}".lstrip("."))
    elif isinstance(applied, list) and isinstance(declared, list) and len(applied) == len(declared):
        for index, (a, d) in enumerate(zip(applied, declared, strict=True)):
            yield from _differences(a, d, f"{path}[{index}]")
    elif applied != declared:
        yield f"{path}: running {_shown(applied)}, the settings render {_shown(declared)}"


_ABSENT = object()


def _shown(value: Any) -> str:
    return "nothing" if value is _ABSENT else json.dumps(value)
