"""A workload cluster that Cluster API runs from the management cluster, whole: its Cluster API
objects, its admin kubeconfig as Cluster API keeps it, and what goes with the cluster: Cilium
inside it, cluster-autoscaler beside its objects, a read-only account inside it."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from components.charts import WorkloadCharts
from components.cilium import Cilium
from components.cluster_autoscaler import ClusterAutoscaler
from components.cluster_template import ClusterObjects
from components.hand_made_clusters import refuse_hand_made
from components.readonly_access import ReadOnlyAccess
from components.settings import WorkloadCluster as ClusterSettings
from components.settings import WorkloadSettings

# pulumi-kubernetes (v4.25, pkg/metadata/annotations.go) holds the Cluster's step until this
# condition is True. Not Available: the nodes become Ready only once the CNI (Cilium, installed
# through the cluster's own API server) runs, and that waits for this step.
CONTROL_PLANE_INITIALIZED = "condition=ControlPlaneInitialized"


class WorkloadCluster(pulumi.ComponentResource):
    """The objects CAPMOX's default template renders for one workload cluster
    (components.cluster_template), as custom resources on the management cluster, once the
    Cluster API providers are Ready. Machine templates first, then what refers to them; the
    Cluster last, waited on until its control plane is initialized. None of them is sent before
    the Cluster is known not to be someone else's (components.hand_made_clusters).

    Then, through the admin kubeconfig Cluster API writes to `<namespace>/<name>-kubeconfig`:
    Cilium and the read-only account inside the cluster; and cluster-autoscaler on the management
    cluster, which reads the cluster through the same Secret."""

    name: str
    cluster: kubernetes.apiextensions.CustomResource
    machine_deployment: kubernetes.apiextensions.CustomResource
    kubeconfig_secret_id: pulumi.Output[str]
    """`<namespace>/<name>-kubeconfig`, the Secret Cluster API writes the admin kubeconfig to."""
    worker_template_name: str
    control_plane_template_name: str
    provider: kubernetes.Provider
    """The cluster's own API server, as its admin."""
    readonly_kubeconfig: pulumi.Output[str]
    """The read-only kubeconfig (secret), context `<name>-ro`."""

    def __init__(
        self,
        cluster: ClusterSettings,
        objects: ClusterObjects,
        management: kubernetes.Provider,
        *,
        management_kubeconfig: pulumi.Output[str],
        on_cluster: pulumi.ResourceOptions,
        charts: WorkloadCharts,
        workload: WorkloadSettings,
        providers: Sequence[pulumi.Resource],
        token_generation: int,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`management`, `management_kubeconfig` and `on_cluster`: the management cluster's
        provider, admin kubeconfig and object options (components.cluster_api.ClusterNode)."""
        self.name = name = cluster.name
        super().__init__("homelab:index:WorkloadCluster", name, None, opts)
        self._objects(
            cluster,
            objects,
            management_kubeconfig=management_kubeconfig,
            on_cluster=on_cluster,
            providers=providers,
            timeout_minutes=workload.control_plane_timeout_minutes,
        )
        admin_kubeconfig = self._admin_kubeconfig(cluster, management)
        self.provider = kubernetes.Provider(
            f"{name}-kubernetes",
            kubeconfig=admin_kubeconfig,
            cluster_identifier=f"{cluster.namespace}/{name}",
            opts=pulumi.ResourceOptions(parent=self),
        )
        Cilium(name, charts.cilium, workload=self.provider, opts=pulumi.ResourceOptions(parent=self))
        ClusterAutoscaler(
            cluster,
            charts.autoscaler,
            image_tag=workload.autoscaler_image_tag,
            workload_kubeconfig=admin_kubeconfig,
            on_management=on_cluster,
            after=[self.machine_deployment],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.readonly_kubeconfig = ReadOnlyAccess(
            f"{name}-readonly",
            pulumi.ResourceOptions(provider=self.provider),
            admin_kubeconfig,
            context_name=f"{name}-ro",
            token_generation=token_generation,
            opts=pulumi.ResourceOptions(parent=self),
        ).kubeconfig
        self.register_outputs(
            {
                "kubeconfigSecretId": self.kubeconfig_secret_id,
                "workerTemplateName": self.worker_template_name,
                "controlPlaneTemplateName": self.control_plane_template_name,
                "readonlyKubeconfig": self.readonly_kubeconfig,
            }
        )

    def _objects(
        self,
        cluster: ClusterSettings,
        objects: ClusterObjects,
        *,
        management_kubeconfig: pulumi.Output[str],
        on_cluster: pulumi.ResourceOptions,
        providers: Sequence[pulumi.Resource],
        timeout_minutes: int,
    ) -> None:
        name, namespace = cluster.name, cluster.namespace
        child = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=self), on_cluster)
        # What deleting would take machines with is protected; a machine template is not: another
        # sizing deletes the old one (found by the box: a protected one stopped the rollout's run).
        lasting = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=cluster.protected))
        # Every object's metadata waits on the check: a refusal fails the run before any is sent.
        # What it yields is nothing secret, though it comes from the admin kubeconfig.
        checked = pulumi.Output.unsecret(
            management_kubeconfig.apply(lambda kubeconfig: refuse_hand_made(namespace, name, kubeconfig))
        )

        def custom(resource_name: str, body: dict[str, Any], *after: pulumi.Resource) -> Any:
            return _custom_resource(resource_name, body, lasting, [*providers, *after], checked)

        def template(resource_name: str, body: dict[str, Any]) -> Any:
            return _custom_resource(resource_name, body, child, list(providers), checked)

        self.control_plane_template_name = objects.control_plane_template["metadata"]["name"]
        self.worker_template_name = objects.worker_template["metadata"]["name"]
        # Named after its spec (cluster_template.digested_name): another sizing is a new template,
        # created before its referrer is updated; the old one is deleted after that.
        control_plane_template = template(self.control_plane_template_name, objects.control_plane_template)
        worker_template = template(self.worker_template_name, objects.worker_template)
        worker_config = custom(f"{name}-worker-config", objects.worker_config)
        proxmox_cluster = custom(f"{name}-proxmox-cluster", objects.proxmox_cluster)
        control_plane = custom(f"{name}-control-plane", objects.control_plane, control_plane_template)
        self.machine_deployment = custom(f"{name}-workers", objects.machine_deployment, worker_template, worker_config)
        self.cluster = _cluster(
            name,
            objects,
            lasting,
            [*providers, proxmox_cluster, control_plane],
            timeout_minutes=timeout_minutes,
            checked=checked,
        )
        # From the Cluster's id, so that it is unknown in the preview of the run that creates the
        # cluster (a read of the Secret is skipped then: Cluster API has not written it yet) and
        # known, with the Cluster as its dependency, once the control plane is initialized.
        self.kubeconfig_secret_id = self.cluster.id.apply(lambda _: f"{namespace}/{name}-kubeconfig")

    def _admin_kubeconfig(self, cluster: ClusterSettings, management: kubernetes.Provider) -> pulumi.Output[str]:
        admin_secret = kubernetes.core.v1.Secret.get(
            f"{cluster.name}-admin-kubeconfig",
            self.kubeconfig_secret_id,
            opts=pulumi.ResourceOptions(parent=self, provider=management),
        )
        return pulumi.Output.secret(admin_secret.data.apply(lambda data: base64.b64decode(data["value"]).decode()))


def _cluster(
    name: str,
    objects: ClusterObjects,
    opts: pulumi.ResourceOptions,
    after: list[pulumi.Resource],
    *,
    timeout_minutes: int,
    checked: pulumi.Output[None],
) -> kubernetes.apiextensions.CustomResource:
    """The Cluster, done when its control plane is initialized (workloadControlPlaneTimeoutMinutes
    at most), so that what is installed into the cluster after it finds an API server."""
    body = dict(objects.cluster)
    metadata = dict(body["metadata"])
    metadata["annotations"] = {**metadata.get("annotations", {}), "pulumi.com/waitFor": CONTROL_PLANE_INITIALIZED}
    within = f"{timeout_minutes}m"
    return _custom_resource(
        f"{name}-cluster",
        {**body, "metadata": metadata},
        pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(custom_timeouts=pulumi.CustomTimeouts(create=within, update=within))
        ),
        after,
        checked,
    )


def _custom_resource(
    resource_name: str,
    body: dict[str, Any],
    opts: pulumi.ResourceOptions,
    after: list[pulumi.Resource],
    checked: pulumi.Output[None],
) -> kubernetes.apiextensions.CustomResource:
    metadata = body["metadata"]
    return kubernetes.apiextensions.CustomResource(
        resource_name,
        api_version=body["apiVersion"],
        kind=body["kind"],
        metadata=checked.apply(lambda _: metadata),
        spec=body["spec"],
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=after)),
    )
