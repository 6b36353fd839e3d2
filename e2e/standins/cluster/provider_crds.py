"""Each provider's real CRDs, as cluster-api-operator installs them with the provider: read at run
time out of the upstream archives (e2e/engine/vendor.py checks their sha256), with the labels the
provider's `config/crd/kustomization.yaml` adds to them upstream, read from that same file. Those
labels carry the contract (`cluster.x-k8s.io/v1beta2: v1alpha2` on CAPMOX's CRDs, `... : v1beta2`
on the kubeadm providers'); Cluster API resolves a reference's apiVersion through them. Cluster
API's core CRDs carry none upstream (their kustomization adds no label: core kinds are never
resolved by contract), so none are added here either.

    crds("InfrastructureProvider", "proxmox") -> [CRD, ...]

The IPAM in-cluster provider has no archive in ../shared/vendor: its CRDs are read, the same way,
from its module's config/ that e2e/engine/build-engine.sh copies beside the manager it builds
(vendor.ipam_config), the module the proxy serves.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from e2e.engine import vendor

CAPI_ARCHIVE, CAPMOX_ARCHIVE = vendor.CLUSTER_API_ARCHIVE, vendor.CAPMOX_ARCHIVE
# Provider CR (kind, name) -> the archive and the folder of its `crd/` kustomization.
SOURCES = {
    ("CoreProvider", "cluster-api"): (CAPI_ARCHIVE, "config/crd"),
    ("BootstrapProvider", "kubeadm"): (CAPI_ARCHIVE, "bootstrap/kubeadm/config/crd"),
    ("ControlPlaneProvider", "kubeadm"): (CAPI_ARCHIVE, "controlplane/kubeadm/config/crd"),
    ("InfrastructureProvider", "proxmox"): (CAPMOX_ARCHIVE, "config/crd"),
}
# Provider CR (kind, name) -> its built module's config/ (which holds its `crd/` kustomization).
BUILT: dict[tuple[str, str], Callable[[], Path]] = {("IPAMProvider", "in-cluster"): vendor.ipam_config}
CONTRACT_LABEL_PREFIX = "cluster.x-k8s.io/"
# libyaml's loader where PyYAML has it: Cluster API's CRDs are 3 MB of YAML.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def kustomize_labels(kustomization: dict[str, Any]) -> dict[str, str]:
    """The labels a kustomization adds to its resources: `labels[].pairs` and the older
    `commonLabels`."""
    added: dict[str, str] = dict(kustomization.get("commonLabels") or {})
    for entry in kustomization.get("labels") or []:
        added.update(entry["pairs"])
    return added


def crds(kind: str, name: str) -> list[dict[str, Any]]:
    """The provider's CRDs with their upstream labels; a provider in neither SOURCES nor BUILT is an
    error (KeyError), never skipped in silence."""
    if (kind, name) in BUILT:
        config = BUILT[(kind, name)]()
        bases = {f"crd/bases/{path.name}": path.read_text() for path in sorted((config / "crd/bases").glob("*.yaml"))}
        return _kustomized(f"{config}:crd", (config / "crd/kustomization.yaml").read_text(), bases, "crd")
    archive, folder = SOURCES[(kind, name)]
    kustomization = vendor.member(archive, f"{folder}/kustomization.yaml")
    return _kustomized(f"{archive}:{folder}", kustomization, vendor.members(archive, f"{folder}/bases/"), folder)


def _kustomized(where: str, kustomization_text: str, bases: dict[str, str], folder: str) -> list[dict[str, Any]]:
    """The CRDs `bases` (path -> YAML) with the labels the kustomization adds, once it lists them all."""
    kustomization = yaml.load(kustomization_text, Loader=_LOADER)  # noqa: S506 - a safe loader
    labels = kustomize_labels(kustomization)
    unexpected = [key for key in labels if not key.startswith(CONTRACT_LABEL_PREFIX)]
    if unexpected:
        raise ValueError(f"{where}/kustomization.yaml adds labels the box does not know: {unexpected}")
    listed = [f"{folder}/{resource}" for resource in kustomization["resources"]]
    if sorted(listed) != sorted(bases):
        raise ValueError(f"{where}: the kustomization lists {listed}, the bases are {sorted(bases)}")
    found = []
    for path in listed:
        crd = yaml.load(bases[path], Loader=_LOADER)  # noqa: S506 - a safe loader
        crd["metadata"].setdefault("labels", {}).update(labels)
        found.append(crd)
    return found
