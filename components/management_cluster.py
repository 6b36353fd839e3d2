"""What the program puts on the management cluster once it answers: cert-manager, the operator
and its providers (ClusterApi), read-only access to it and to each workload cluster. __main__.py
wires this onto the k3s node it built; the lab in a box (e2e/box/box_program.py) wires the very same
onto its own API server, so that what the box proves is what the program does."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi

from components.charts import ClusterCharts
from components.cluster_api import ClusterApi, ClusterNode, last_deployed_versions, last_deployment
from components.readonly_access import ReadOnlyAccess
from components.settings import Settings
from components.workload_cluster import WorkloadClusterAccess


@dataclass(frozen=True)
class ManagementCluster:
    provider_versions: pulumi.Output[dict[str, str]]
    readonly_kubeconfig: pulumi.Output[str]
    workload_readonly_kubeconfigs: pulumi.Output[dict[str, str]]
    """Workload cluster name -> its read-only kubeconfig; secret as a whole."""


def manage_cluster(
    settings: Settings,
    node: ClusterNode,
    cluster_charts: ClusterCharts,
    deployment: pulumi.Output[Mapping[str, Any]] | None = None,
) -> ManagementCluster:
    """`cluster_charts`: components.charts.cluster_charts, which the caller makes sure of before
    it registers anything. `deployment`: the outputs of this stack's last deployment, when the
    caller reads them already (a stack reads them once); else they are read here."""
    cluster_api = ClusterApi(
        "mgmt",
        node,
        settings.cluster_api,
        cluster_charts,
        proxmox_url=settings.proxmox.endpoint,
        protected=settings.vm.protected,
        adopt=settings.adopt,
        deployed_versions=last_deployed_versions(deployment if deployment is not None else last_deployment()),
    )
    readonly = ReadOnlyAccess(
        "mgmt-readonly",
        node.on_cluster,
        node.kubeconfig,
        context_name=f"{settings.vm.name}-ro",
        token_generation=settings.access.readonly_token_generation,
    )
    workload_clusters = {
        cluster.name: WorkloadClusterAccess(
            cluster, node.provider, token_generation=settings.access.readonly_token_generation
        )
        for cluster in settings.access.workload_clusters
    }
    kubeconfigs = pulumi.Output.all(**{name: access.kubeconfig for name, access in workload_clusters.items()})
    return ManagementCluster(
        provider_versions=cluster_api.provider_versions,
        readonly_kubeconfig=readonly.kubeconfig,
        # all() of no outputs is an empty list, not a mapping: dict() makes it one either way.
        workload_readonly_kubeconfigs=pulumi.Output.secret(kubeconfigs.apply(dict)),
    )
