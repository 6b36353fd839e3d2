"""Read-only access to a workload cluster that Cluster API runs from the management cluster."""

from __future__ import annotations

import base64

import pulumi
import pulumi_kubernetes as kubernetes

from components.readonly_access import ReadOnlyAccess
from components.settings import WorkloadCluster


class WorkloadClusterAccess(pulumi.ComponentResource):
    """Reads the cluster's admin kubeconfig from the Secret `<namespace>/<name>-kubeconfig` that
    CAPI keeps on the management cluster, and makes the read-only account inside the cluster."""

    kubeconfig: pulumi.Output[str]
    """The read-only kubeconfig (secret), context `<name>-ro`."""

    def __init__(
        self,
        cluster: WorkloadCluster,
        management: kubernetes.Provider,
        *,
        token_generation: int,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        name = cluster.name
        super().__init__("homelab:index:WorkloadClusterAccess", name, None, opts)
        admin_secret = kubernetes.core.v1.Secret.get(
            f"{name}-admin-kubeconfig",
            f"{cluster.namespace}/{name}-kubeconfig",
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
