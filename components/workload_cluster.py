"""A workload cluster that Cluster API runs from the management cluster, whole: its Cluster API
objects, its admin kubeconfig as Cluster API keeps it, and what goes with the cluster: Cilium
inside it, cluster-autoscaler beside its objects, a read-only account inside it."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from components import adoption, cluster_takeover, field_manager, hand_made_clusters, rollouts, waits
from components.charts import WorkloadCharts
from components.cilium import Cilium
from components.cluster_autoscaler import ClusterAutoscaler
from components.cluster_template import ClusterObjects
from components.readonly_access import ReadOnlyAccess
from components.settings import WorkloadCluster as ClusterSettings
from components.settings import WorkloadSettings

# pulumi-kubernetes (pkg/metadata/annotations.go) holds the Cluster's step until this
# condition is True. Not Available: the nodes become Ready only once the CNI (Cilium, installed
# through the cluster's own API server) runs, and that waits for this step.
CONTROL_PLANE_INITIALIZED = "condition=ControlPlaneInitialized"


class WorkloadCluster(pulumi.ComponentResource):
    """The objects CAPMOX's default template renders for one workload cluster
    (components.cluster_template), as custom resources on the management cluster, once the
    Cluster API providers are Ready. Machine templates first, then what refers to them; the
    Cluster last, waited on until its control plane is initialized. None of them is sent before
    the Cluster is known not to be someone else's (components.hand_made_clusters) or, adopting,
    to run exactly as the settings render it (components.cluster_takeover).

    Then, through the admin kubeconfig Cluster API writes to `<namespace>/<name>-kubeconfig`:
    Cilium and the read-only account inside the cluster; and cluster-autoscaler on the management
    cluster, which reads the cluster through the same Secret."""

    name: str
    record_key: str
    """`<namespace>/<name>`, its key in cluster_takeover.RECORD_OUTPUT."""
    cluster: kubernetes.apiextensions.CustomResource
    machine_deployment: kubernetes.apiextensions.CustomResource
    namespace: pulumi.Resource | None
    """The Namespace the cluster's objects are in, where it is not `default`: its own, or the one
    an earlier cluster in the same namespace declared."""
    kubeconfig_secret_id: pulumi.Output[str]
    """`<namespace>/<name>-kubeconfig`, the Secret Cluster API writes the admin kubeconfig to."""
    machine_specs: pulumi.Output[dict[str, str]]
    """What rolls each part of the cluster, as digests (components.rollouts)."""
    runs_declared: pulumi.Output[dict[str, bool]]
    """Whether each of those parts runs as declared once the run has been (rollouts.runs_declared)."""
    kept_names: pulumi.Output[dict[str, str] | None]
    """The record of a taken-over cluster's template names (cluster_takeover.RECORD_OUTPUT), None
    for a cluster the program made."""
    provider: kubernetes.Provider
    """The cluster's own API server, as its admin."""
    readonly_kubeconfig: pulumi.Output[str]
    """The read-only kubeconfig (secret), context `<name>-ro`."""

    def __init__(
        self,
        cluster: ClusterSettings,
        objects: ClusterObjects,
        management: kubernetes.Provider,
        takeover: cluster_takeover.Takeover,
        *,
        on_cluster: pulumi.ResourceOptions,
        charts: WorkloadCharts,
        workload: WorkloadSettings,
        providers: Sequence[pulumi.Resource],
        token_generation: int,
        namespace: pulumi.Resource | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`management`, `on_cluster`: the management cluster's (ClusterNode). `takeover`: what the
        live cluster decided for `objects` (cluster_takeover.Takeover), which every object follows.
        `namespace`: the cluster's Namespace where another cluster declared it already: one
        Namespace resource for each, or the second one's create fails as AlreadyExists."""
        self.name = name = cluster.name
        super().__init__("homelab:index:WorkloadCluster", name, None, opts)
        self.record_key, self.kept_names = takeover.record_key, takeover.kept_names
        self.namespace = namespace
        self._objects(cluster, objects, takeover, on_cluster=on_cluster, providers=providers, workload=workload)
        admin_kubeconfig = self._admin_access(cluster, management)
        child = pulumi.ResourceOptions(parent=self)
        Cilium(name, charts.cilium, workload=self.provider, kept=cluster.cilium_values, adopt=cluster.adopt, opts=child)
        ClusterAutoscaler(
            cluster,
            charts.autoscaler,
            image_tag=workload.autoscaler_image_tag,
            workload_kubeconfig=admin_kubeconfig,
            on_management=on_cluster,
            after=[self.machine_deployment],
            adopt=cluster.recover,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.readonly_kubeconfig = ReadOnlyAccess(
            f"{name}-readonly",
            pulumi.ResourceOptions(provider=self.provider),
            admin_kubeconfig,
            context_name=f"{name}-ro",
            token_generation=token_generation,
            adopt=cluster.recover,
            opts=pulumi.ResourceOptions(parent=self),
        ).kubeconfig
        self.register_outputs(
            {
                "kubeconfigSecretId": self.kubeconfig_secret_id,
                "keptNames": self.kept_names,
                "machineSpecs": self.machine_specs,
                "readonlyKubeconfig": self.readonly_kubeconfig,
            }
        )

    def _objects(
        self,
        cluster: ClusterSettings,
        objects: ClusterObjects,
        takeover: cluster_takeover.Takeover,
        *,
        on_cluster: pulumi.ResourceOptions,
        providers: Sequence[pulumi.Resource],
        workload: WorkloadSettings,
    ) -> None:
        name, namespace = cluster.name, cluster.namespace
        child = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=self), on_cluster)
        # What deleting would take machines with is protected; a machine template is not: another
        # sizing deletes the old one (found by the box: a protected one stopped the rollout's run).
        lasting = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=cluster.protected))
        parts = _Parts(cluster, takeover)
        self.machine_specs = takeover.declared.apply(rollouts.machine_specs)
        if self.namespace is None:
            self.namespace = _namespace(cluster, lasting)
        before = [*providers, *([self.namespace] if self.namespace is not None else [])]

        def custom(resource_name: str, role: str, *after: pulumi.Resource) -> Any:
            return parts.resource(resource_name, role, lasting, [*before, *after])

        def template(role: str) -> Any:
            return parts.resource(objects.roles()[role]["metadata"]["name"], role, child, before)

        # Named after its spec (cluster_template.digested_name): another sizing is a new template,
        # created before its referrer is updated; the old one is deleted after that.
        control_plane_template = template("controlPlaneTemplate")
        worker_template = template("workerTemplate")
        worker_config = custom(f"{name}-worker-config", "workerConfig")
        proxmox_cluster = custom(f"{name}-proxmox-cluster", "proxmoxCluster")
        control_plane = custom(f"{name}-control-plane", "controlPlane", control_plane_template)
        self.machine_deployment = custom(f"{name}-workers", "machineDeployment", worker_template, worker_config)
        self.runs_declared = pulumi.Output.all(
            takeover.declared, _spec(control_plane), _spec(self.machine_deployment)
        ).apply(lambda args: rollouts.runs_declared(*args))
        within = f"{workload.control_plane_timeout_minutes}m"
        self.cluster = parts.resource(
            f"{name}-cluster",
            "cluster",
            pulumi.ResourceOptions.merge(
                lasting, pulumi.ResourceOptions(custom_timeouts=pulumi.CustomTimeouts(create=within, update=within))
            ),
            [*before, proxmox_cluster, control_plane],
        )
        # From the Cluster's id, so that it is unknown in the preview of the run that creates the
        # cluster (a read of the Secret is skipped then: Cluster API has not written it yet) and
        # known, with the Cluster as its dependency, once the control plane is initialized.
        self.kubeconfig_secret_id = self.cluster.id.apply(lambda _: f"{namespace}/{name}-kubeconfig")

    def _admin_access(self, cluster: ClusterSettings, management: kubernetes.Provider) -> pulumi.Output[str]:
        """The admin kubeconfig that Cluster API keeps, and the cluster's provider (`provider`) with it."""
        admin_secret = kubernetes.core.v1.Secret.get(
            f"{cluster.name}-admin-kubeconfig",
            self.kubeconfig_secret_id,
            opts=pulumi.ResourceOptions(parent=self, provider=management),
        )
        kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            admin_secret.data.apply(lambda data: base64.b64decode(data["value"]).decode())
        )
        # On the Cluster in the state too (a read's dependencies are dropped by the SDK): what is
        # deleted inside the cluster (Cilium, the read-only account) goes before the provider, and
        # the provider before the Cluster, whose deletion takes the cluster's API server away.
        self.provider = kubernetes.Provider(
            f"{cluster.name}-kubernetes",
            kubeconfig=kubeconfig,
            cluster_identifier=f"{cluster.namespace}/{cluster.name}",
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.cluster]),
        )
        return kubeconfig


def _namespace(cluster: ClusterSettings, lasting: pulumi.ResourceOptions) -> pulumi.Resource | None:
    """The cluster's namespace, where it is not `default`: clusterctl's `--target-namespace` and
    `kubectl apply` expect it to exist, a program that starts from an empty management cluster
    makes it. Never deleted with the cluster (it may hold what is not the cluster's); taken over
    as it is."""
    if cluster.namespace == "default":
        return None
    return kubernetes.core.v1.Namespace(
        f"{cluster.name}-namespace",
        metadata=field_manager.managed({"name": cluster.namespace}),
        opts=pulumi.ResourceOptions.merge(
            lasting,
            pulumi.ResourceOptions.merge(
                pulumi.ResourceOptions(retain_on_delete=True),
                adoption.imported(cluster.namespace, adoption.OBJECT_INPUTS, adopt=cluster.adopt),
            ),
        ),
    )


def _owned_cluster(cluster: dict[str, Any], stack: str) -> dict[str, Any]:
    """The Cluster marked as `stack`'s (hand_made_clusters.STACK_MARK: every later run's guard
    reads it), done when its control plane is initialized (workloadControlPlaneTimeoutMinutes at
    most), so that what is installed into the cluster after it finds an API server. Not while
    adopting: clusterctl rendered neither annotation, and the cluster is not yet the stack's."""
    body = dict(cluster)
    metadata = hand_made_clusters.marked(body["metadata"], stack)
    metadata["annotations"] |= waits.wait_for(CONTROL_PLANE_INITIALIZED)
    return {**body, "metadata": metadata}


class _Parts:
    """How each of the seven objects is registered, as the takeover decided: its fields from this
    run's objects, named as the record says (Takeover.declared); its metadata only once the plan
    is made (Takeover.plan: a refusal fails the run before any object is sent), forced where the
    plan says; adopting, imported under the name it runs under, with what it runs kept (the
    import alone cannot tell a difference: components.cluster_takeover)."""

    def __init__(self, cluster: ClusterSettings, takeover: cluster_takeover.Takeover) -> None:
        self.takeover = takeover
        self.adopt = cluster.adopt
        self.stack = takeover.stack

    def _metadata(self, role: str, objects: ClusterObjects) -> dict[str, Any]:
        """The Cluster marked as the stack's and waited on (_owned_cluster), but while adopting."""
        body = objects.roles()[role]
        owned = _owned_cluster(body, self.stack) if role == "cluster" and not self.adopt else body
        metadata: dict[str, Any] = owned["metadata"]
        return metadata

    def resource(
        self, resource_name: str, role: str, opts: pulumi.ResourceOptions, after: list[pulumi.Resource]
    ) -> kubernetes.apiextensions.CustomResource:
        plain = self.takeover.imported.roles()[role]
        metadata = plain["metadata"]
        imported = adoption.imported(
            f"{metadata['namespace']}/{metadata['name']}", adoption.OBJECT_INPUTS, adopt=self.adopt
        )
        declared = self.takeover.declared
        return kubernetes.apiextensions.CustomResource(
            resource_name,
            api_version=plain["apiVersion"],
            kind=plain["kind"],
            metadata=pulumi.Output.all(self.takeover.plan, declared).apply(
                lambda args: field_manager.managed(
                    _forced(self._metadata(role, args[1])) if role in args[0].forced else self._metadata(role, args[1])
                )
            ),
            spec=declared.apply(lambda objects: objects.roles()[role]["spec"]),
            opts=pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions.merge(imported, pulumi.ResourceOptions(depends_on=after))
            ),
        )


def _spec(resource: kubernetes.apiextensions.CustomResource) -> pulumi.Output[Any]:
    """The object's spec as the run leaves it: an output the SDK makes of the `spec` it was given,
    which CustomResource's type does not declare."""
    spec: pulumi.Output[Any] = resource.spec  # type: ignore[attr-defined]
    return spec


PATCH_FORCE = "pulumi.com/patchForce"
"""pulumi-kubernetes's annotation (pkg/metadata/annotations.go) for an apply that takes the fields
it sets from any other field manager. Only the run that makes a taken-over cluster's objects the
program's carries it, on the objects the plan names (cluster_takeover.TakeoverPlan.forced): that
run's `up` takes kubectl's fields, but its
preview's dry run forces only over pulumi-kubernetes's own managers (await.go patchForce) and
stopped on a conflict with kubectl-client-side-apply over the MachineDeployment's .spec.selector
(found by the box)."""


def _forced(metadata: dict[str, Any]) -> dict[str, Any]:
    return {**metadata, "annotations": {**metadata.get("annotations", {}), PATCH_FORCE: "true"}}
