"""Each provider's real CRDs, as cluster-api-operator installs them with the provider: read at run
time out of the upstream archives (e2e/engine/vendor.py checks their sha256), with the labels the
provider's `config/crd/kustomization.yaml` adds to them upstream, read from that same file. Those
labels carry the contract (`cluster.x-k8s.io/v1beta2: v1alpha2` on CAPMOX's CRDs, `... : v1beta2`
on the kubeadm providers'); Cluster API resolves a reference's apiVersion through them. Cluster
API's core CRDs carry none upstream (their kustomization adds no label: core kinds are never
resolved by contract), so none are added here either.

    crds("InfrastructureProvider", "proxmox") -> [CRD, ...]

The IPAM in-cluster provider has no archive in ../shared/vendor: `MISSING` says so, and `crds` gives
nothing for it; the operator stand-in records that line.
"""

from __future__ import annotations

from typing import Any

import yaml

from e2e.engine import vendor

CAPI_ARCHIVE = "cluster-api-v1.12.11.tar.gz"
CAPMOX_ARCHIVE = "cluster-api-provider-proxmox-v0.9.0.tar.gz"
# Provider CR (kind, name) -> the archive and the folder of its `crd/` kustomization.
SOURCES = {
    ("CoreProvider", "cluster-api"): (CAPI_ARCHIVE, "config/crd"),
    ("BootstrapProvider", "kubeadm"): (CAPI_ARCHIVE, "bootstrap/kubeadm/config/crd"),
    ("ControlPlaneProvider", "kubeadm"): (CAPI_ARCHIVE, "controlplane/kubeadm/config/crd"),
    ("InfrastructureProvider", "proxmox"): (CAPMOX_ARCHIVE, "config/crd"),
}
MISSING = {
    ("IPAMProvider", "in-cluster"): (
        "no archive of cluster-api-ipam-provider-in-cluster in ../shared/vendor: its CRDs "
        "(InClusterIPPool, GlobalInClusterIPPool) are not applied"
    ),
}
CONTRACT_LABEL_PREFIX = "cluster.x-k8s.io/"


def kustomize_labels(kustomization: dict[str, Any]) -> dict[str, str]:
    """The labels a kustomization adds to its resources: `labels[].pairs` and the older
    `commonLabels`."""
    added: dict[str, str] = dict(kustomization.get("commonLabels") or {})
    for entry in kustomization.get("labels") or []:
        added.update(entry["pairs"])
    return added


def crds(kind: str, name: str) -> list[dict[str, Any]]:
    """The provider's CRDs with their upstream labels; nothing for a provider in MISSING; a
    provider in neither is an error (KeyError), never skipped in silence."""
    if (kind, name) in MISSING:
        return []
    archive, folder = SOURCES[(kind, name)]
    kustomization = yaml.safe_load(vendor.member(archive, f"{folder}/kustomization.yaml"))
    labels = kustomize_labels(kustomization)
    unexpected = [key for key in labels if not key.startswith(CONTRACT_LABEL_PREFIX)]
    if unexpected:
        raise ValueError(f"{archive}:{folder}/kustomization.yaml adds labels the box does not know: {unexpected}")
    bases = vendor.members(archive, f"{folder}/bases/")
    listed = [f"{folder}/{resource}" for resource in kustomization["resources"]]
    if sorted(listed) != sorted(bases):
        raise ValueError(f"{archive}:{folder}: the kustomization lists {listed}, the bases are {sorted(bases)}")
    found = []
    for path in listed:
        crd = yaml.safe_load(bases[path])
        crd["metadata"].setdefault("labels", {}).update(labels)
        found.append(crd)
    return found
