"""The upstream archives the box reads at run time (../shared/vendor/README.md): files out of them,
never unpacked into the repository, each archive checked first against the sha256 that
e2e/engine/build-engine.sh checks it against (both read e2e/engine/vendor-archives.sha256, the one
table of digests). The archives are where LAB_MGMT_VENDOR says, by default the shared folder
beside the clone, as for the build.

    members("cluster-api-v1.12.11.tar.gz", "config/crd/bases/") -> {"config/crd/bases/x.yaml": "...", ...}

Only YAML files are read (what the box needs: CRDs, kustomizations, webhook manifests). A
missing archive, or one whose digest is not the pinned one, raises with one line saying which
and where to put it.

The IPAM in-cluster provider has no archive: build-engine.sh builds its manager from the module
the Go module proxy serves and copies that module's config/ beside the manager's bin/
(`ipam_config`), which the box reads the same way.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tarfile
from pathlib import Path

from e2e.engine.cli import REPO, built_bin

DIGESTS_FILE = Path(__file__).with_name("vendor-archives.sha256")
CLUSTER_API_ARCHIVE = "cluster-api-v1.12.11.tar.gz"
CAPMOX_ARCHIVE = "cluster-api-provider-proxmox-v0.9.0.tar.gz"
IPAM_BIN_VARIABLE = "LAB_MGMT_IPAM_BIN"
IPAM_BINARY = "cluster-api-ipam-in-cluster-manager"
# The IPAM module version build-engine.sh builds (its IPAM_VERSION; tests/test_vendor_archives.py
# holds the two together): served as itself beside the pin, which it stands for.
IPAM_VERSION = "v1.1.0"


class VendorError(RuntimeError):
    """An archive that is missing or not the pinned one."""


def vendor_dir() -> Path:
    return Path(os.environ.get("LAB_MGMT_VENDOR") or REPO.parent / "shared" / "vendor")


@functools.cache
def digests() -> dict[str, str]:
    """archive name -> its pinned sha256, from the table build-engine.sh reads."""
    pinned = {}
    for line in DIGESTS_FILE.read_text().splitlines():
        if line.strip():
            digest, name = line.split()
            pinned[name] = digest
    return pinned


def checked(archive: str) -> Path:
    """The archive's path, once its sha256 is the pinned one (checked once per process)."""
    return _checked(vendor_dir(), archive)


@functools.cache
def _checked(directory: Path, archive: str) -> Path:
    if archive not in digests():
        raise VendorError(f"{archive} has no pinned sha256 in {DIGESTS_FILE}")
    path = directory / archive
    if not path.is_file():
        raise VendorError(f"missing {archive}: put it in {directory} or set LAB_MGMT_VENDOR")
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if actual != digests()[archive]:
        raise VendorError(f"{path} has sha256 {actual}, expected {digests()[archive]}: refusing to read it")
    return path


def members(archive: str, under: str, suffix: str = ".yaml") -> dict[str, str]:
    """The text of each file of the archive under the folder `under` (not below its subfolders)
    whose name ends in `suffix`, by its path in the tree (the archive's top folder left out),
    sorted by path."""
    return {
        path: text
        for path, text in _tree(checked(archive)).items()
        if path.startswith(under) and "/" not in path[len(under) :] and path.endswith(suffix)
    }


@functools.cache
def _tree(archive: Path) -> dict[str, str]:
    """Every YAML file of the archive, by its path in the tree: read once per process (a box reads
    several folders of one archive)."""
    found = {}
    with tarfile.open(archive, "r:gz") as tar:
        for entry in tar.getmembers():
            path = entry.name.split("/", 1)[1] if "/" in entry.name else ""
            if entry.isfile() and path.endswith((".yaml", ".yml")):
                extracted = tar.extractfile(entry)
                if extracted is not None:
                    found[path] = extracted.read().decode()
    return dict(sorted(found.items()))


def member(archive: str, path: str) -> str:
    """The text of one file of the archive, by its path in the tree."""
    directory, _, name = path.rpartition("/")
    found = members(archive, f"{directory}/" if directory else "", name)
    if path not in found:
        raise VendorError(f"{archive} has no {path}")
    return found[path]


def ipam_config() -> Path:
    """The IPAM in-cluster provider module's config/ and metadata.yaml, as build-engine.sh copied them."""
    return built_bin(IPAM_BIN_VARIABLE, IPAM_BINARY).parent / "config"
