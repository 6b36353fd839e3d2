"""Cilium, the workload cluster's CNI, as a Helm release installed through the cluster's own API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from components import adoption, cilium_values
from components.charts import LocalChart

NAMESPACE = "kube-system"
RELEASE_TIMEOUT_SECONDS = 900


class Cilium(pulumi.ComponentResource):
    """The release, named `cilium` in kube-system as `cilium install` and the Helm docs name it.

    It is installed once the cluster's control plane answers (the caller makes it wait on the
    Cluster's ControlPlaneInitialized condition): not on the cluster being Available, which needs
    Ready nodes, which need the CNI first.

    Adopting (`adopt`), the release that Helm installed from the laptop is imported as
    `kube-system/cilium` with chart, version and values as they run (components.adoption); the
    first run after it upgrades the release to its values where they differ (docs/adoption.md): the
    program's and those the entry keeps (`kept`, components.cilium_values)."""

    release: kubernetes.helm.v3.Release

    def __init__(
        self,
        name: str,
        chart: LocalChart,
        *,
        workload: kubernetes.Provider,
        kept: Mapping[str, Any],
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
            values=cilium_values.declared(kept),
            timeout=RELEASE_TIMEOUT_SECONDS,
            opts=pulumi.ResourceOptions.merge(
                pulumi.ResourceOptions(parent=self, provider=workload),
                adoption.imported(f"{NAMESPACE}/{chart.chart}", adoption.RELEASE_INPUTS, adopt=adopt),
            ),
        )
        self.register_outputs({"status": self.release.status})
