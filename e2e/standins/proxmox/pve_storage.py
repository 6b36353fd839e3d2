"""The Proxmox VE stand-in's storages: `download-url` really fetches the URL it is given (a server
the test started) in a task and checks its checksum, as Proxmox VE does; `upload` (CAPMOX's
cloud-init ISO) keeps the file under the state directory, where `file` finds it; and the volumes
it holds (downloaded and uploaded files, VM disks) are listed, read and deleted as the provider's
`download.File` and `VmLegacy` and go-proxmox's ISO calls ask (pve-storage
src/PVE/API2/Storage/Status.pm, Content.pm).
"""

from __future__ import annotations

import hashlib
import re
import ssl
import threading
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Any

from e2e.standins.proxmox.common import ApiError, Ask, Faults, param_error, permitted, require
from e2e.standins.proxmox.pve_tasks import NodeState

# The lab's two storages (README: `local` with the `import` content type, `local-lvm` for disks),
# as (where a volume's file is, the content types it allows).
STORAGES = {
    "local": ("/var/lib/vz", {"iso", "vztmpl", "backup", "import"}),
    "local-lvm": ("/dev/pve", {"images", "rootdir"}),
}
# An NFS export for VM disks that every node of a cluster mounts (`pvesm add nfs nas --server ..
# --export .. --content images`), configured where a test asks for it.
NAS = "nas"
NAS_STORAGE = {NAS: ("/mnt/pve/nas", {"images"})}
# Each storage's type and size, as a fresh Proxmox VE 8.4 install on a 1 TB disk makes them, and
# the NAS's.
KINDS = {"local": ("dir", 100 << 30), "local-lvm": ("lvmthin", 800 << 30), NAS: ("nfs", 4 << 40)}
# The types pve-storage always marks shared, whatever the config says (src/PVE/Storage/Plugin.pm,
# 8.3.6, @SHARED_STORAGE :37-48 and parse_config :572-574); `local` and `local-lvm` are not, and
# LVM-thin has no `shared` option to set.
SHARED_TYPES = {"iscsi", "nfs", "cifs", "rbd", "cephfs", "iscsidirect", "glusterfs", "zfs", "drbd", "pbs"}
# Where a directory storage keeps each content type (pve-storage PVE/Storage/Plugin.pm get_subdir).
SUBDIRS = {"iso": "template/iso", "vztmpl": "template/cache"}
# pve-storage PVE/Storage.pm ISO_EXT_RE_0.
ISO_NAME = re.compile(r"[^/]+\.(?:iso|img)", re.IGNORECASE)
# Proxmox VE 8.4 takes these file types into `import` (and names the format after the extension).
IMPORT_FORMATS = {".qcow2": "qcow2", ".raw": "raw", ".vmdk": "vmdk", ".ova": "ova"}
FETCH_TIMEOUT_SECONDS = 60
CHUNK = 1 << 20

# A VM's disk names its owner (PVE::Storage::Plugin parse_name_dir: vm-<id>-disk-N, base-<id>-disk-N).
_OWNER = re.compile(r"^[^:]+:(?:\d+/)?(?:vm|base)-(\d+)-")


class Storage:
    def __init__(self, state: NodeState, faults: Faults, trusted_certificates: Path | None, *, nas: bool) -> None:
        self.state = state
        self.faults = faults
        self.trusted_certificates = trusted_certificates
        self.fetches: list[threading.Thread] = []
        self.storages = STORAGES | (NAS_STORAGE if nas else {})
        """The node's storages: where a volume's file is, the content types it allows."""

    @property
    def volumes(self) -> dict[str, dict[str, Any]]:
        volumes: dict[str, dict[str, Any]] = self.state.data["volumes"]
        return volumes

    def check(self, node: str, storage: str, content: str | None = None) -> None:
        self.state.check_node(node)
        if storage not in self.storages:
            raise ApiError(500, f"storage '{storage}' does not exist")
        if content is not None and content not in self.storages[storage][1]:
            raise ApiError(500, f"storage '{storage}' does not support content-type '{content}'")

    def url_metadata(self, ask: Ask, node: str) -> dict[str, Any]:
        """What Proxmox VE learns from a HEAD request to the URL."""
        self.state.check_node(node)
        url, verify = ask.params["url"], ask.params.get("verify-certificates", "1") == "1"
        request = urllib.request.Request(url, method="HEAD")  # noqa: S310 - a URL the test serves
        try:
            with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_SECONDS, context=self._tls(verify)) as answer:  # noqa: S310
                size, mimetype = answer.headers.get("Content-Length"), answer.headers.get_content_type()
        except (urllib.error.URLError, OSError) as error:
            raise ApiError(500, f"invalid server response: '{error}'") from error
        metadata: dict[str, Any] = {"filename": PurePosixPath(url.split("?", 1)[0]).name, "mimetype": mimetype}
        return {**metadata, "size": int(size)} if size else metadata

    def download(self, ask: Ask, node: str, storage: str) -> str:
        """The task's UPID; the fetch runs in a thread while the task runs."""
        params = ask.params
        content, name = params["content"], params["filename"]
        if (params["node"], params["storage"]) != (node, storage):
            raise ApiError(400, "node and storage differ from the path's")
        self.check(node, storage, content)
        if content == "import" and PurePosixPath(name).suffix not in IMPORT_FORMATS:
            raise ApiError(400, f"invalid filename or wrong extension '{name}'")
        volid = f"{storage}:{content}/{name}"
        if volid in self.volumes:
            raise ApiError(500, f"refusing to override existing file '{self.path(volid)}'")
        try:
            digest = hashlib.new(params["checksum-algorithm"])
        except ValueError as error:
            raise ApiError(400, f"checksum-algorithm: {error}") from error
        log = [f"downloading {params['url']} to {self.path(volid)}"]
        upid = self.state.start_task("download", storage, ask.user, log)
        fetch = threading.Thread(target=self._fetch, args=(upid, params, digest, volid))
        self.fetches.append(fetch)
        fetch.start()
        return upid

    def _fetch(self, upid: str, params: dict[str, str], digest: Any, volid: str) -> None:
        url, verify, checksum = params["url"], params["verify-certificates"] == "1", params["checksum"]
        if self.faults.download is not None:
            self.state.finish_task(upid, self.faults.download)
            return
        size = 0
        try:
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_SECONDS, context=self._tls(verify)) as answer:  # noqa: S310
                while chunk := answer.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
        except (urllib.error.URLError, OSError) as error:
            self.state.finish_task(upid, f"download failed: {error}")
            return
        if digest.hexdigest() != checksum.lower():
            self.state.finish_task(upid, f"checksum mismatch: got '{digest.hexdigest()}' != expect '{checksum}'")
            return
        content = volid.split(":", 1)[1].split("/", 1)[0]
        file_format = IMPORT_FORMATS.get(PurePosixPath(volid).suffix, "raw")
        with self.state.lock:
            self.volumes[volid] = {"content": content, "format": file_format, "size": size}
            self.state.finish_task(upid)

    def _tls(self, verify: bool) -> ssl.SSLContext:
        if verify:
            return ssl.create_default_context(cafile=self.trusted_certificates)
        return ssl._create_unverified_context()  # noqa: S323 - what verify-certificates=0 asks for

    def path(self, volid: str) -> str:
        storage, volume = volid.split(":", 1)
        content, _, name = volume.partition("/")
        return f"{self.storages[storage][0]}/{SUBDIRS.get(content, content)}/{name}"

    def file(self, volid: str) -> Path:
        """Where the stand-in keeps an uploaded volume's bytes: under the state directory, as the
        node keeps them under the storage's path."""
        storage, volume = volid.split(":", 1)
        return self.state.directory / "storage" / storage / volume

    def index(self, ask: Ask, node: str) -> list[dict[str, Any]]:
        """The storages the token may see (Datastore.Audit or Datastore.AllocateSpace), as
        Status.pm's index lists them, each `shared` as its type is (PVE/Storage.pm storage_info,
        8.3.6, :1323); `content` keeps those holding any of the listed types, a `target` other
        than the node the shared ones (Status.pm index, :171-175 and :197-204)."""
        self.state.check_node(node)
        wanted = set(filter(None, ask.params.get("content", "").split(",")))
        across = ask.params.get("target") not in (None, node, "localhost")
        listed = []
        for storage, (_, contents) in sorted(self.storages.items()):
            path = f"/storage/{storage}"
            if not any(permitted(ask, path, p) for p in ("Datastore.Audit", "Datastore.AllocateSpace")):
                continue
            if wanted and not wanted & contents:
                continue
            kind, total = KINDS[storage]
            if across and kind not in SHARED_TYPES:
                continue
            used = sum(v["size"] for volid, v in self.volumes.items() if volid.startswith(f"{storage}:"))
            listed.append(
                {"storage": storage, "type": kind, "content": ",".join(sorted(contents)), "enabled": 1}
                | {"active": 1, "shared": int(kind in SHARED_TYPES), "total": total, "used": used}
                | {"avail": total - used}
                | {"used_fraction": used / total}
            )
        return listed

    def upload(self, ask: Ask, node: str, storage: str) -> str:
        """Status.pm's upload: the file lands in the storage's directory in an `imgcopy` task."""
        self.check(node, storage)
        content, name = ask.params["content"], ask.params.get("filename", "")
        if ask.file is None:
            raise ApiError(500, "missing temporary file name")
        if self.storages[storage][0].startswith("/dev/"):
            raise ApiError(500, f"can't upload to storage type '{KINDS[storage][0]}'")
        if content != "iso":
            raise ApiError(501, f"the stand-in uploads only content iso, not {content!r}")
        if not ISO_NAME.fullmatch(name):
            raise param_error("filename", "wrong file extension")
        if content not in self.storages[storage][1]:
            raise ApiError(500, f"storage '{storage}' does not support '{content}' content")
        volid = f"{storage}:{content}/{name}"
        self.file(volid).parent.mkdir(parents=True, exist_ok=True)
        self.file(volid).write_bytes(ask.file)
        self.volumes[volid] = {"content": content, "format": content, "size": len(ask.file)}
        log = [f"target node: {node}", f"target file: {self.path(volid)}", f"file size is: {len(ask.file)}"]
        return self.state.done_task("imgcopy", "", ask.user, [*log, "finished file import successfully"])

    def listing(self, ask: Ask, node: str, storage: str) -> list[dict[str, Any]]:
        content = ask.params.get("content")
        self.check(node, storage, content)
        return [
            {"volid": volid, **volume}
            for volid, volume in sorted(self.volumes.items())
            if volid.startswith(f"{storage}:") and content in (None, volume["content"])
        ]

    def volume(self, ask: Ask, node: str, storage: str, volid: str) -> dict[str, Any]:
        volume = self._existing(node, storage, volid)
        check_volume_access(ask, volid, volume)
        return {"path": self.path(volid), "format": volume["format"], "size": volume["size"], "used": volume["size"]}

    def delete(self, ask: Ask, node: str, storage: str, volid: str) -> str:
        self._existing(node, storage, volid)
        # pve-storage PVE/API2/Storage/Content.pm delete: no backups here, so Datastore.Allocate.
        require(ask, f"/storage/{storage}", "Datastore.Allocate")
        del self.volumes[volid]
        self.file(volid).unlink(missing_ok=True)
        # The task's id is the storage, after the owning VM of a VM's disk (Content.pm's `$id`),
        # never the volume: a volume's `/` would split the UPID a client puts in a task's path.
        owner = _OWNER.match(volid)
        subject = f"{owner[1]}@{storage}" if owner else storage
        return self.state.done_task("imgdel", subject, ask.user, [f"Removed volume '{volid}'"])

    def _existing(self, node: str, storage: str, volid: str) -> dict[str, Any]:
        self.check(node, storage)
        volume = self.volumes.get(volid) if volid.startswith(f"{storage}:") else None
        if volume is None:
            raise ApiError(500, f"volume '{volid}' does not exist")
        return volume


def check_volume_access(ask: Ask, volid: str, volume: dict[str, Any]) -> None:
    """pve-storage PVE/Storage.pm check_volume_access, for a volume with no VM of the caller's."""
    path = f"/storage/{volid.split(':', 1)[0]}"
    if permitted(ask, path, "Datastore.Allocate"):
        return
    if volume["content"] in ("iso", "vztmpl", "import"):
        require(ask, path, "Datastore.AllocateSpace", "Datastore.Audit", any_of=True)
    elif "vmid" in volume:
        require(ask, path, "Datastore.Audit")
        require(ask, f"/vms/{volume['vmid']}", "VM.Config.Disk")
    else:
        raise ApiError(500, f"missing privileges to access {volid}")
