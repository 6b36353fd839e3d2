"""cluster-autoscaler for one workload cluster, on the management cluster (the official chart).

It runs in the workload cluster's namespace in kubeconfig-incluster mode: it reads the workload
cluster's nodes and pods with the admin kubeconfig Cluster API keeps in `<name>-kubeconfig` (the
chart mounts that Secret, which must be in the release's namespace), and changes the replicas of
the cluster's MachineDeployments on the management cluster with its own ServiceAccount, through
the `/scale` subresource. It finds them by namespace and cluster name, and sizes a group scaled to
zero from the MachineDeployment's capacity annotations (components.workload_cluster).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as kubernetes

from components import adoption
from components.charts import LocalChart
from components.settings import WorkloadCluster

RELEASE_TIMEOUT_SECONDS = 600
# What the chart's namespaced Role lacks: the autoscaler reads the MachineDeployment's
# infrastructure template to size a group from zero, and without the rule its informer never
# syncs, so scale-from-zero hangs (kubernetes/autoscaler #5912, #6490).
MACHINE_TEMPLATE_RULE = {
    "apiGroups": ["infrastructure.cluster.x-k8s.io"],
    "resources": ["proxmoxmachinetemplates"],
    "verbs": ["get", "list", "watch"],
}
KUBECONFIG_DIGEST_ANNOTATION = "lab-mgmt.homelab/workload-kubeconfig-sha256"
"""On the pod template: a new workload kubeconfig restarts the autoscaler, which otherwise keeps
the one it started with (kubernetes/autoscaler #4784, #8456)."""


def kubeconfig_digest(kubeconfig: str) -> str:
    return hashlib.sha256(kubeconfig.encode()).hexdigest()


class ClusterAutoscaler(pulumi.ComponentResource):
    """The release `<cluster>-autoscaler` in the cluster's namespace."""

    release: kubernetes.helm.v3.Release

    def __init__(
        self,
        cluster: WorkloadCluster,
        chart: LocalChart,
        *,
        image_tag: str,
        workload_kubeconfig: pulumi.Output[str],
        on_management: pulumi.ResourceOptions,
        after: Sequence[pulumi.Resource],
        adopt: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`on_management`: the options of an object on the management cluster
        (components.cluster_api.ClusterNode.on_cluster); `after`: the MachineDeployments it
        scales, which it should find when it starts. `adopt`: the release runs already, installed
        by a stack whose state is lost (WorkloadCluster.recover), and is imported as it runs."""
        super().__init__("homelab:index:ClusterAutoscaler", cluster.name, None, opts)
        self.release = kubernetes.helm.v3.Release(
            f"{cluster.name}-autoscaler",
            name=f"{cluster.name}-autoscaler",
            chart=chart.file_name,
            version=chart.version,
            namespace=cluster.namespace,
            # A digest reveals nothing of the kubeconfig: unsecret, the preview shows it change.
            values=release_values(
                cluster, image_tag, pulumi.Output.unsecret(workload_kubeconfig.apply(kubeconfig_digest))
            ),
            timeout=RELEASE_TIMEOUT_SECONDS,
            opts=pulumi.ResourceOptions.merge(
                pulumi.ResourceOptions.merge(
                    pulumi.ResourceOptions(parent=self, depends_on=list(after)), on_management
                ),
                adoption.imported(
                    f"{cluster.namespace}/{cluster.name}-autoscaler", adoption.RELEASE_INPUTS, adopt=adopt
                ),
            ),
        )
        self.register_outputs({"status": self.release.status})


def release_values(cluster: WorkloadCluster, image_tag: str, digest: pulumi.Input[str]) -> dict[str, object]:
    """The release's values; `digest`: the workload kubeconfig's (KUBECONFIG_DIGEST_ANNOTATION)."""
    return {
        "cloudProvider": "clusterapi",
        "clusterAPIMode": "kubeconfig-incluster",
        "clusterAPIKubeconfigSecret": f"{cluster.name}-kubeconfig",
        # Its leader-election lease and status ConfigMap, in the workload cluster.
        "clusterAPIConfigMapsNamespace": "kube-system",
        "autoDiscovery": {"clusterName": cluster.name, "namespace": cluster.namespace},
        # Each release's objects named after it: two clusters in one namespace do not collide.
        "fullnameOverride": f"{cluster.name}-autoscaler",
        # The chart's default, v1.35.0, guesses the infrastructure API version wrong (#9439).
        "image": {"tag": image_tag},
        # A Role, not a ClusterRole: with one namespace to discover in, it watches only that one.
        "rbac": {"clusterScoped": False, "additionalRules": [MACHINE_TEMPLATE_RULE]},
        "extraArgs": cluster.autoscaler.flags(),
        "podAnnotations": {KUBECONFIG_DIGEST_ANNOTATION: digest},
    }
