"""A stand-in for where cluster-api-operator fetches a provider's release on the owner's lab: for the
providers clusterctl knows, clusterctl's GitHub repository client, which lists the versions through
the Go module proxy by the repository's path (`proxy.golang.org/github.com/<owner>/<repo>/@v/list`),
takes the newest of the provider's contract as `latest` (its `metadata.yaml`), and downloads the
asked release's files from `github.com/<owner>/<repo>/releases/download/<tag>/`, falling back to
the GitHub API (`api.github.com`) where those fail. The files are rendered here from the vendored
source as the project's release makes them (`kustomize build config/default` with the release's
image and pull policy set, as Cluster API's `release-manifests` does), which is a reconstruction:
the real list names every tag, and the box's names the pinned release alone, so that is `latest`.

So far the core's release alone: Cluster API's, at the version of its archive.

    assets = provider_releases.core(work_dir)  # path -> bytes, for chart_repo_standin.serve
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

from e2e.engine import vendor
from e2e.engine.cli import built_bin

# The hosts the client asks, which the box's Pods resolve to the stand-in.
HOSTS = ("github.com", "api.github.com", "proxy.golang.org")
CORE_REPOSITORY = "kubernetes-sigs/cluster-api"
CORE_VERSION = vendor.CLUSTER_API_ARCHIVE.removeprefix("cluster-api-").removesuffix(".tar.gz")
CORE_IMAGE = "registry.k8s.io/cluster-api/cluster-api-controller"
# What config/default's patches hold in the tree, and what the release sets in their place.
STAGING_IMAGE = "gcr.io/k8s-staging-cluster-api/cluster-api-controller:main"
RELEASE_PULL_POLICY = ("imagePullPolicy: Always", "imagePullPolicy: IfNotPresent")


def core(work: Path) -> dict[str, bytes]:
    """The version list and the release files of Cluster API at CORE_VERSION, by request path."""
    tree = work / "cluster-api"
    with tarfile.open(vendor.checked(vendor.CLUSTER_API_ARCHIVE)) as archive:
        top = archive.getnames()[0].split("/", 1)[0]
        wanted = [m for m in archive.getmembers() if m.name.startswith((f"{top}/config/", f"{top}/metadata.yaml"))]
        archive.extractall(work, members=wanted, filter="data")
    (work / top).rename(tree)
    default = tree / "config" / "default"
    for name, old, new in (
        ("manager_image_patch.yaml", STAGING_IMAGE, f"{CORE_IMAGE}:{CORE_VERSION}"),
        ("manager_pull_policy.yaml", *RELEASE_PULL_POLICY),
    ):
        patch = default / name
        text = patch.read_text()
        if old not in text:
            raise ValueError(f"{patch} no longer holds {old!r}: the release's rendering must be read again")
        patch.write_text(text.replace(old, new))
    kubectl = built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl") / "kubectl"
    components = subprocess.run(
        [str(kubectl), "kustomize", str(default)], capture_output=True, check=True, timeout=120
    ).stdout
    download = f"/{CORE_REPOSITORY}/releases/download/{CORE_VERSION}"
    return {
        f"/github.com/{CORE_REPOSITORY}/@v/list": f"{CORE_VERSION}\n".encode(),
        f"{download}/metadata.yaml": (tree / "metadata.yaml").read_bytes(),
        f"{download}/core-components.yaml": components,
    }
