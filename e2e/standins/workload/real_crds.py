"""The real CRDs of Cluster API v1.12.11 (core, kubeadm bootstrap, kubeadm control plane) and CAPMOX
v0.9.0, read from the upstream archives (`../shared/vendor`, or where LAB_MGMT_VENDOR points) and
applied with the contract labels kustomize adds upstream (`cluster.x-k8s.io/v1beta2: <version>`,
which Cluster API reads to know a provider's contract).

A test helper until the operator stand-in applies them when it installs a provider (the work of
another branch): then the two are to be merged into that one place.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import yaml

from e2e.engine.cli import REPO
from e2e.engine.control_plane import ControlPlane

CLUSTER_API = "cluster-api-v1.12.11"
CAPMOX = "cluster-api-provider-proxmox-v0.9.0"
# Each archive's CRD folders and the contract labels its kustomization gives them.
CRDS = {
    CLUSTER_API: {
        "config/crd/bases": {},
        "bootstrap/kubeadm/config/crd/bases": {
            "cluster.x-k8s.io/v1beta1": "v1beta1",
            "cluster.x-k8s.io/v1beta2": "v1beta2",
        },
        "controlplane/kubeadm/config/crd/bases": {
            "cluster.x-k8s.io/v1beta1": "v1beta1",
            "cluster.x-k8s.io/v1beta2": "v1beta2",
        },
    },
    CAPMOX: {"config/crd/bases": {"cluster.x-k8s.io/v1beta1": "v1alpha2", "cluster.x-k8s.io/v1beta2": "v1alpha2"}},
}


def vendor() -> Path:
    return Path(os.environ.get("LAB_MGMT_VENDOR") or REPO.parent / "shared" / "vendor")


def read(archive: str) -> list[dict[str, object]]:
    """The CRDs of `archive`, labelled; a missing archive or folder stops the test, naming it."""
    path = vendor() / f"{archive}.tar.gz"
    if not path.is_file():
        raise FileNotFoundError(f"missing {path} (put it there or set LAB_MGMT_VENDOR)")
    found: list[dict[str, object]] = []
    with tarfile.open(path) as tar:
        for folder, labels in CRDS[archive].items():
            members = [m for m in tar.getmembers() if m.isfile() and f"{archive}/{folder}/" in m.name]
            if not members:
                raise FileNotFoundError(f"{path} has no {folder}")
            for member in sorted(members, key=lambda m: m.name):
                extracted = tar.extractfile(member)
                assert extracted is not None
                crd = yaml.safe_load(extracted.read())
                crd["metadata"].setdefault("labels", {}).update(labels)
                found.append(crd)
    return found


def apply(cluster: ControlPlane) -> list[str]:
    """Every CRD applied (server-side: the biggest are over client-side apply's annotation limit)
    and established; their names."""
    crds = [crd for archive in CRDS for crd in read(archive)]
    cluster.kubectl(
        "apply", "--server-side", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": crds})
    )
    names = [str(crd["metadata"]["name"]) for crd in crds]  # type: ignore[index]
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{name}" for name in names))
    return names
