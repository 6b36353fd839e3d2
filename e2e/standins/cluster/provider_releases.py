"""A stand-in for where cluster-api-operator fetches a provider's release on the owner's lab: for the
providers clusterctl knows, clusterctl's GitHub repository client, which lists the versions through
the Go module proxy by the repository's path (`proxy.golang.org/github.com/<owner>/<repo>/@v/list`),
takes the newest of the provider's contract as `latest` (its `metadata.yaml`), and downloads the
asked release's files from `github.com/<owner>/<repo>/releases/download/<tag>/`, falling back to
the GitHub API (`api.github.com`) where those fail. The files are rendered here from the vendored
source as the project's release makes them (`kustomize build config/default` with the release's
image and pull policy set, as Cluster API's `release-manifests` does), which is a reconstruction:
the real list names every tag, and the box's names the pinned release alone, so that is `latest`.

So far Cluster API's release (the core, the kubeadm bootstrap and control-plane providers), at the
version of its archive, and the IPAM in-cluster provider's.

    assets = provider_releases.cluster_api(work_dir) | provider_releases.ipam(work_dir)
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

from e2e.engine import pins, vendor
from e2e.engine.cli import built_bin

# The hosts the client asks, which the box's Pods resolve to the stand-in.
HOSTS = ("github.com", "api.github.com", "proxy.golang.org")
CLUSTER_API_REPOSITORY = "kubernetes-sigs/cluster-api"
CLUSTER_API_VERSION = vendor.CLUSTER_API_ARCHIVE.removeprefix("cluster-api-").removesuffix(".tar.gz")
IMAGES = "registry.k8s.io/cluster-api"
# Cluster API's release-manifests: each provider's file, built from its config/default, the
# manager's image (gcr.io/k8s-staging-cluster-api/<image>:main in the tree) and the binary
# build-engine.sh builds for it.
CLUSTER_API_PROVIDERS = {
    "core-components.yaml": ("config/default", "cluster-api-controller", "cluster-api-manager"),
    "bootstrap-components.yaml": (
        "bootstrap/kubeadm/config/default",
        "kubeadm-bootstrap-controller",
        "kubeadm-bootstrap-manager",
    ),
    "control-plane-components.yaml": (
        "controlplane/kubeadm/config/default",
        "kubeadm-control-plane-controller",
        "kubeadm-control-plane-manager",
    ),
}
STAGING = "gcr.io/k8s-staging-cluster-api"
RELEASE_PULL_POLICY = ("imagePullPolicy: Always", "imagePullPolicy: IfNotPresent")


def cluster_api(work: Path) -> dict[str, bytes]:
    """The version list and the release files of Cluster API at CLUSTER_API_VERSION (the core, the
    kubeadm bootstrap and control-plane providers), by request path."""
    tree = _release_tree(vendor.CLUSTER_API_ARCHIVE, work / "cluster-api")
    download = f"/{CLUSTER_API_REPOSITORY}/releases/download/{CLUSTER_API_VERSION}"
    files = {
        f"/github.com/{CLUSTER_API_REPOSITORY}/@v/list": f"{CLUSTER_API_VERSION}\n".encode(),
        f"{download}/metadata.yaml": (tree / "metadata.yaml").read_bytes(),
    }
    for name, (config, image, _binary) in CLUSTER_API_PROVIDERS.items():
        default = tree / config
        _released(
            default / "manager_image_patch.yaml", f"{STAGING}/{image}:main", f"{IMAGES}/{image}:{CLUSTER_API_VERSION}"
        )
        _released(default / "manager_pull_policy.yaml", *RELEASE_PULL_POLICY)
        files[f"{download}/{name}"] = _kustomized(default)
    return files


# The IPAM in-cluster provider's release, from its module's config/ (build-engine.sh copies it): the
# v1.1.0 module for the lab's v1.1.1 pin (docs/testing.md's versions), its release-manifests
# (kustomize of config/default, the image its Makefile's PROD_REGISTRY names at the tag).
IPAM_REPOSITORY = "kubernetes-sigs/cluster-api-ipam-provider-in-cluster"
IPAM_SERVED_AS = pins.IPAM_VERSION
IPAM_IMAGE = "registry.k8s.io/capi-ipam-ic/cluster-api-ipam-in-cluster-controller"
IPAM_STAGING_IMAGE = "gcr.io/k8s-staging-capi-ipam-ic/cluster-api-ipam-in-cluster-controller:dev"


def ipam(work: Path) -> dict[str, bytes]:
    """The version list and the release files of the IPAM in-cluster provider, served as its
    module's own version and as IPAM_SERVED_AS (the pin, a bump from it), by request path."""
    versions = (vendor.IPAM_VERSION, IPAM_SERVED_AS)
    files = {f"/github.com/{IPAM_REPOSITORY}/@v/list": "".join(f"{v}\n" for v in versions).encode()}
    for version in versions:
        tree = work / f"ipam-{version}"
        shutil.copytree(vendor.ipam_config(), tree / "config")
        _released(
            tree / "config" / "default" / "manager_image_patch.yaml", IPAM_STAGING_IMAGE, f"{IPAM_IMAGE}:{version}"
        )
        download = f"/{IPAM_REPOSITORY}/releases/download/{version}"
        files[f"{download}/metadata.yaml"] = (tree / "config" / "metadata.yaml").read_bytes()
        files[f"{download}/ipam-components.yaml"] = _kustomized(tree / "config" / "default")
    return files


def _release_tree(archive_name: str, tree: Path) -> Path:
    """What a release is made from, out of the vendored archive into `tree`: every config/ folder
    and metadata.yaml."""
    with tarfile.open(vendor.checked(archive_name)) as archive:
        top = archive.getnames()[0].split("/", 1)[0]
        wanted = [m for m in archive.getmembers() if "/config/" in m.name or m.name == f"{top}/metadata.yaml"]
        archive.extractall(tree.parent, members=wanted, filter="data")
    (tree.parent / top).rename(tree)
    return tree


def _released(patch: Path, old: str, new: str) -> None:
    """What a release's make target sets in `patch` in place of what the tree holds."""
    text = patch.read_text()
    if old not in text:
        raise ValueError(f"{patch} no longer holds {old!r}: read the release's rendering again")
    patch.write_text(text.replace(old, new))


def _kustomized(default: Path) -> bytes:
    kubectl = built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl") / "kubectl"
    return subprocess.run(
        [str(kubectl), "kustomize", str(default)], capture_output=True, check=True, timeout=120
    ).stdout


# CAPMOX's release as its Makefile's release-manifests makes it: `kustomize edit set image` of its
# REPOSITORY at the release's tag in config/default, built; beside it, metadata.yaml. The v0.9.0
# archive's tree for the lab's v0.9.1 pin (docs/testing.md's versions), its image at the pin.
CAPMOX_REPOSITORY = "ionos-cloud/cluster-api-provider-proxmox"
CAPMOX_SERVED_AS = pins.CAPMOX_VERSION
CAPMOX_IMAGE = "ghcr.io/ionos-cloud/cluster-api-provider-proxmox"


def capmox(work: Path) -> dict[str, bytes]:
    """The version list and the release files of CAPMOX, served as CAPMOX_SERVED_AS, by request path."""
    tree = _release_tree(vendor.CAPMOX_ARCHIVE, work / "capmox")
    default = tree / "config" / "default"
    with (default / "kustomization.yaml").open("a") as kustomization:
        kustomization.write(f"images:\n- name: {CAPMOX_IMAGE}\n  newTag: {CAPMOX_SERVED_AS}\n")
    download = f"/{CAPMOX_REPOSITORY}/releases/download/{CAPMOX_SERVED_AS}"
    return {
        f"/github.com/{CAPMOX_REPOSITORY}/@v/list": f"{CAPMOX_SERVED_AS}\n".encode(),
        f"{download}/metadata.yaml": (tree / "metadata.yaml").read_bytes(),
        f"{download}/infrastructure-components.yaml": _kustomized(default),
    }
