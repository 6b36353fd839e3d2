"""The upstream archives the box reads at run time (../shared/vendor/README.md): files out of them,
never unpacked into the repository, each archive checked first against the sha256 that
e2e/engine/build-engine.sh checks it against (both read e2e/engine/vendor-archives.sha256, the one
table of digests). The archives are where LAB_MGMT_VENDOR says, by default the shared folder
beside the clone, as for the build.

    members("cluster-api-v1.12.11.tar.gz", "config/crd/bases/") -> {"config/crd/bases/x.yaml": "...", ...}

A missing archive, or one whose digest is not the pinned one, raises with one line saying which
and where to put it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tarfile
from pathlib import Path

from e2e.engine.cli import REPO

DIGESTS_FILE = Path(__file__).with_name("vendor-archives.sha256")


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


@functools.cache
def checked(archive: str) -> Path:
    """The archive's path, once its sha256 is the pinned one (checked once per process)."""
    if archive not in digests():
        raise VendorError(f"{archive} has no pinned sha256 in {DIGESTS_FILE}")
    path = vendor_dir() / archive
    if not path.is_file():
        raise VendorError(f"missing {archive}: put it in {vendor_dir()} or set LAB_MGMT_VENDOR")
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if actual != digests()[archive]:
        raise VendorError(f"{path} has sha256 {actual}, expected {digests()[archive]}: refusing to read it")
    return path


def members(archive: str, under: str, suffix: str = ".yaml") -> dict[str, str]:
    """The text of each file of the archive under the folder `under` (not below its subfolders)
    whose name ends in `suffix`, by its path in the tree (the archive's top folder left out),
    sorted by path."""
    found = {}
    with tarfile.open(checked(archive), "r:gz") as tar:
        for member in tar.getmembers():
            path = member.name.split("/", 1)[1] if "/" in member.name else ""
            if member.isfile() and path.startswith(under) and "/" not in path[len(under) :] and path.endswith(suffix):
                extracted = tar.extractfile(member)
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
