"""A Pulumi program for the lab in a box: cluster-autoscaler's official chart as the program
installs it for a workload cluster (issue 30): a Helm release `<cluster>-autoscaler` in the
cluster's namespace, with the values the program gives it, through the real engine and the
kubernetes plugin's Helm, from the box's chart repository. The box's engine runs this file as the
project's `__main__.py`; what it installs is in the JSON file LAB_MGMT_BOX_AUTOSCALERS names
(`{"repository": URL, "releases": [{"cluster", "namespace", "digest", "proxmox_rule", "lease"}]}`),
which a scenario rewrites between runs (a new digest: a rotated kubeconfig). `lease` names the
leader-election lease where it is not the default (two autoscalers whose workload cluster is one
stand-in API server would otherwise share one).
"""

# No `from __future__ import annotations`: run as the project's __main__.py (see box_program.py).
import json
import os
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

KUBECONFIG_VARIABLE = "LAB_MGMT_BOX_KUBECONFIG"
RELEASES_VARIABLE = "LAB_MGMT_BOX_AUTOSCALERS"
CHART_VERSION = "9.59.0"
IMAGE_TAG = "v1.35.2"
DIGEST_ANNOTATION = "lab-mgmt.homelab/workload-kubeconfig-sha256"
# The box's short scale-down timings, as the program's settings would give them.
EXTRA_ARGS = {
    "scan-interval": "5s",
    "scale-down-unneeded-time": "30s",
    "scale-down-delay-after-add": "30s",
    "max-node-provision-time": "5m",
}
PROXMOX_RULE = {
    "apiGroups": ["infrastructure.cluster.x-k8s.io"],
    "resources": ["proxmoxmachinetemplates"],
    "verbs": ["get", "list", "watch"],
}


def values(cluster: str, namespace: str, digest: str, proxmox_rule: bool, lease: str | None) -> dict[str, Any]:
    return {
        "cloudProvider": "clusterapi",
        "clusterAPIMode": "kubeconfig-incluster",
        "clusterAPIKubeconfigSecret": f"{cluster}-kubeconfig",
        "clusterAPIConfigMapsNamespace": "kube-system",
        "autoDiscovery": {"clusterName": cluster, "namespace": namespace},
        "fullnameOverride": f"{cluster}-autoscaler",
        "image": {"tag": IMAGE_TAG},
        "rbac": {"clusterScoped": False, "additionalRules": [PROXMOX_RULE] if proxmox_rule else []},
        "extraArgs": {**EXTRA_ARGS, **({"leader-elect-resource-name": lease} if lease else {})},
        "podAnnotations": {DIGEST_ANNOTATION: digest},
    }


def program(kubeconfig: str, wanted: dict[str, Any]) -> None:
    provider = kubernetes.Provider("mgmt-kubernetes", kubeconfig=pulumi.Output.secret(kubeconfig))
    for release in wanted["releases"]:
        cluster, namespace = release["cluster"], release["namespace"]
        kubernetes.helm.v3.Release(
            f"{cluster}-autoscaler",
            name=f"{cluster}-autoscaler",
            chart="cluster-autoscaler",
            version=CHART_VERSION,
            repository_opts=kubernetes.helm.v3.RepositoryOptsArgs(repo=wanted["repository"]),
            namespace=namespace,
            values=values(cluster, namespace, release["digest"], release["proxmox_rule"], release.get("lease")),
            timeout=300,
            opts=pulumi.ResourceOptions(provider=provider),
        )


if __name__ == "__main__":
    program(
        Path(os.environ[KUBECONFIG_VARIABLE]).read_text(), json.loads(Path(os.environ[RELEASES_VARIABLE]).read_text())
    )
