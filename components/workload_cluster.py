"""A workload cluster that Cluster API runs from the management cluster: its Cluster API objects
(WorkloadCluster), and read-only access into it (WorkloadClusterAccess)."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from components.cluster_template import ClusterObjects
from components.readonly_access import ReadOnlyAccess
from components.settings import WorkloadCluster as ClusterSettings

# pulumi-kubernetes (v4.25, pkg/metadata/annotations.go) holds the Cluster's step until this
# condition is True. Not Available: the nodes become Ready only once the CNI (Cilium, installed
# through the cluster's own API server) runs, and that waits for this step.
CONTROL_PLANE_INITIALIZED = "condition=ControlPlaneInitialized"


class WorkloadCluster(pulumi.ComponentResource):
    """The objects CAPMOX's default template renders for one workload cluster
    (components.cluster_template), as custom resources on the management cluster, once the
    Cluster API providers are Ready. Machine templates first, then what refers to them; the
    Cluster last, waited on until its control plane is initialized."""

    cluster: kubernetes.apiextensions.CustomResource
    machine_deployment: kubernetes.apiextensions.CustomResource
    kubeconfig_secret_id: pulumi.Output[str]
    """`<namespace>/<name>-kubeconfig`, the Secret Cluster API writes the admin kubeconfig to."""
    worker_template_name: str
    control_plane_template_name: str

    def __init__(
        self,
        cluster: ClusterSettings,
        objects: ClusterObjects,
        on_cluster: pulumi.ResourceOptions,
        *,
        providers: Sequence[pulumi.Resource],
        control_plane_timeout_minutes: int,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        name = cluster.name
        super().__init__("homelab:index:WorkloadCluster", name, None, opts)
        child = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=self), on_cluster)

        def custom(resource_name: str, body: dict[str, Any], *after: pulumi.Resource) -> Any:
            return _custom_resource(resource_name, body, child, [*providers, *after])

        self.control_plane_template_name = objects.control_plane_template["metadata"]["name"]
        self.worker_template_name = objects.worker_template["metadata"]["name"]
        # Named after its spec (cluster_template.digested_name): another sizing is a new template,
        # created before its referrer is updated; the old one is deleted after that.
        control_plane_template = custom(self.control_plane_template_name, objects.control_plane_template)
        worker_template = custom(self.worker_template_name, objects.worker_template)
        worker_config = custom(f"{name}-worker-config", objects.worker_config)
        proxmox_cluster = custom(f"{name}-proxmox-cluster", objects.proxmox_cluster)
        control_plane = custom(f"{name}-control-plane", objects.control_plane, control_plane_template)
        self.machine_deployment = custom(f"{name}-workers", objects.machine_deployment, worker_template, worker_config)
        self.cluster = _cluster(
            name, objects, child, [*providers, proxmox_cluster, control_plane], control_plane_timeout_minutes
        )
        # From the Cluster's id, so that it is unknown in the preview of the run that creates the
        # cluster (a read of the Secret is skipped then: Cluster API has not written it yet) and
        # known, with the Cluster as its dependency, once the control plane is initialized.
        namespace = cluster.namespace
        self.kubeconfig_secret_id = self.cluster.id.apply(lambda _: f"{namespace}/{name}-kubeconfig")
        self.register_outputs(
            {
                "kubeconfigSecretId": self.kubeconfig_secret_id,
                "workerTemplateName": self.worker_template_name,
                "controlPlaneTemplateName": self.control_plane_template_name,
            }
        )


def _cluster(
    name: str,
    objects: ClusterObjects,
    opts: pulumi.ResourceOptions,
    after: list[pulumi.Resource],
    timeout_minutes: int,
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
    )


def _custom_resource(
    resource_name: str, body: dict[str, Any], opts: pulumi.ResourceOptions, after: list[pulumi.Resource]
) -> kubernetes.apiextensions.CustomResource:
    return kubernetes.apiextensions.CustomResource(
        resource_name,
        api_version=body["apiVersion"],
        kind=body["kind"],
        metadata=body["metadata"],
        spec=body["spec"],
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=after)),
    )


class WorkloadClusterAccess(pulumi.ComponentResource):
    """Reads the cluster's admin kubeconfig from the Secret `<namespace>/<name>-kubeconfig` that
    CAPI keeps on the management cluster, and makes the read-only account inside the cluster."""

    kubeconfig: pulumi.Output[str]
    """The read-only kubeconfig (secret), context `<name>-ro`."""

    def __init__(
        self,
        cluster: ClusterSettings,
        kubeconfig_secret_id: pulumi.Input[str],
        management: kubernetes.Provider,
        *,
        token_generation: int,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`kubeconfig_secret_id`: WorkloadCluster.kubeconfig_secret_id, so that the Secret is
        read only once the Cluster is there (one path to it)."""
        name = cluster.name
        super().__init__("homelab:index:WorkloadClusterAccess", name, None, opts)
        admin_secret = kubernetes.core.v1.Secret.get(
            f"{name}-admin-kubeconfig",
            kubeconfig_secret_id,
            opts=pulumi.ResourceOptions(parent=self, provider=management),
        )
        admin_kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            admin_secret.data.apply(lambda data: base64.b64decode(data["value"]).decode())
        )
        provider = kubernetes.Provider(
            f"{name}-kubernetes",
            kubeconfig=admin_kubeconfig,
            cluster_identifier=f"{cluster.namespace}/{name}",
            opts=pulumi.ResourceOptions(parent=self),
        )
        access = ReadOnlyAccess(
            f"{name}-readonly",
            pulumi.ResourceOptions(provider=provider),
            admin_kubeconfig,
            context_name=f"{name}-ro",
            token_generation=token_generation,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.kubeconfig = access.kubeconfig
        self.register_outputs({"kubeconfig": self.kubeconfig})
