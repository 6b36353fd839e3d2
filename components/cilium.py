"""Cilium, the workload cluster's CNI, as a Helm release installed through the cluster's own API."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as kubernetes

from components import adoption
from components.charts import LocalChart

NAMESPACE = "kube-system"
RELEASE_TIMEOUT_SECONDS = 900
VALUES: dict[str, object] = {
    # Pod addresses come from each Node's podCIDR, which kube-controller-manager carves out of the
    # Cluster's pod CIDR (clusterNetwork.pods): the one setting that says which range pods use.
    "ipam": {"mode": "kubernetes"},
    # The chart's two replicas are kept on different nodes: on a cluster whose only node is its
    # control plane, the second one stays Pending, and cluster-autoscaler adds a worker for it,
    # forever (spec, "Phase 1 continued").
    "operator": {"replicas": 1},
}


class Cilium(pulumi.ComponentResource):
    """The release, named `cilium` in kube-system as `cilium install` and the Helm docs name it.

    It is installed once the cluster's control plane answers (the caller makes it wait on the
    Cluster's ControlPlaneInitialized condition): not on the cluster being Available, which needs
    Ready nodes, which need the CNI first.

    Adopting (`adopt`), the release that Helm installed from the laptop is imported as
    `kube-system/cilium` with chart, version and values as they run (components.adoption); the
    first run after it upgrades the release to these values where they differ (docs/adoption.md)."""

    release: kubernetes.helm.v3.Release

    def __init__(
        self,
        name: str,
        chart: LocalChart,
        *,
        workload: kubernetes.Provider,
        adopt: bool,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("homelab:index:Cilium", name, None, opts)
        self.release = kubernetes.helm.v3.Release(
            f"{name}-cilium",
            name=chart.chart,
            chart=chart.file_name,
            version=chart.version,
            namespace=NAMESPACE,
            values=VALUES,
            timeout=RELEASE_TIMEOUT_SECONDS,
            opts=pulumi.ResourceOptions.merge(
                pulumi.ResourceOptions(parent=self, provider=workload),
                adoption.imported(f"{NAMESPACE}/{chart.chart}", adoption.RELEASE_INPUTS, adopt=adopt),
            ),
        )
        self.register_outputs({"status": self.release.status})
