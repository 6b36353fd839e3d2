"""The Proxmox VE stand-in's VM clone (`POST /nodes/{node}/qemu/{vmid}/clone`, CAPMOX's way to
make each worker VM from a template), as qemu-server PVE/API2/Qemu.pm clone_vm checks and does
it: a full clone copies each disk to `vm-<newid>-disk-N` on the target storage, a linked clone
(of a template's base volumes only, as LVM-thin's clone feature allows) makes the same names, the
cloud-init drive is always copied and CD drives are kept as they are; the new VM gets a new
SMBIOS uuid, a new vmgenid if the source had one, a new MAC on each NIC, the given name and
description, and is no template.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from e2e.standins.proxmox.common import ApiError, Ask, param_error, require
from e2e.standins.proxmox.pve_storage import KINDS, SHARED_TYPES
from e2e.standins.proxmox.pve_vms import Vms, is_drive, nic

# Snapshot and pending state a clone does not take (Qemu.pm clone_vm's loop).
NOT_COPIED = {"snapshots", "parent", "snaptime", "vmstate", "snapstate", "lock", "template"}


def clone_permission(ask: Ask, found: Mapping[str, Any]) -> None:
    """clone_vm's `permissions`: VM.Clone on the source and VM.Allocate on the new VM or on the
    pool it joins; a failed `or` names nothing (pve-access-control RPCEnvironment.pm)."""
    require(ask, f"/vms/{found['vmid']}", "VM.Clone")
    for path in (f"/vms/{found.get('newid')}", *([f"/pool/{found['pool']}"] if "pool" in found else [])):
        try:
            require(ask, path, "VM.Allocate")
            return
        except ApiError:
            continue
    raise ApiError(403, "Permission check failed")


class Clones:
    def __init__(self, vms: Vms) -> None:
        self.vms = vms

    def clone(self, ask: Ask, node: str, vmid: str) -> str:
        source, full = self._checked(ask, node, vmid)
        params, newid, storage = ask.params, str(ask.params["newid"]), ask.params.get("storage")
        drives = {key: str(value) for key, value in source.items() if _has_volume(key, value)}
        log = []
        for key, value in sorted(drives.items()):
            volid = value.split(",", 1)[0]
            if not full and "cloudinit" not in volid and ":base-" not in volid:
                raise ApiError(500, f"Linked clone feature is not supported for '{volid}' ({key})")
            kind = "full" if full or "cloudinit" in volid else "linked"
            log.append(f"create {kind} clone of drive {key} ({volid})")
        config = {key: value for key, value in source.items() if key not in NOT_COPIED}
        config |= {key: self._copy(value, newid, storage) for key, value in drives.items()}
        # "always change MAC! address"
        config |= {
            key: nic(str(value).split("=", 1)[0] + "," + str(value).partition(",")[2])
            for key, value in config.items()
            if re.fullmatch(r"net\d+", key)
        }
        smbios = [part for part in str(config.get("smbios1", "")).split(",") if part and not part.startswith("uuid=")]
        config["smbios1"] = ",".join([f"uuid={uuid.uuid4()}", *smbios])
        if config.get("vmgenid"):
            config["vmgenid"] = str(uuid.uuid4())
        config["name"] = params.get("name") or f"Copy-of-VM-{source.get('name', vmid)}"
        if params.get("description"):
            config["description"] = params["description"]
        self.vms.vms[newid] = {"config": config, "status": "stopped", "started": 0}
        return self.vms.state.done_task("qmclone", vmid, ask.user, log)

    def _checked(self, ask: Ask, node: str, vmid: str) -> tuple[dict[str, Any], bool]:
        """clone_vm's $load_and_check, in its order: the source's config and whether the clone is
        full (the default for a VM that is no template). A clone to a peer (`target`, which
        CAPMOX sends for every allowed node) is refused as Proxmox VE refuses it from local
        storage (qemu-server 8.3.12 PVE/API2/Qemu.pm :3953-3955, :3975, :4006), or else
        as the stand-in's unknown: it has no peer to make the VM on."""
        params, storage = ask.params, ask.params.get("storage")
        target = params.get("target")
        target = None if target in (node, "localhost") else target
        if "pool" in params:
            # The lab has no resource pools (GET /pools answers none): RPCEnvironment.pm check_pool_exist.
            raise ApiError(403, f"Permission check failed (pool '{params['pool']}' does not exist)")
        if target is not None and target not in self.vms.state.peers:
            self.vms.state.check_node(str(target))
        if storage is not None:
            self.vms.storage.check(node, storage)
            if "images" not in self.vms.storage.storages[storage][1]:
                raise param_error("storage", f"storage '{storage}' does not support vm images")
            if target is not None and not _shared(storage):
                raise ApiError(500, f"can't clone to non-shared storage '{storage}'")
        source: dict[str, Any] = self.vms.vm(node, vmid)["config"]
        if "snapname" in params:
            raise ApiError(500, f"snapshot '{params['snapname']}' does not exist")
        full = params["full"] == "1" if "full" in params else source.get("template") != 1
        for option in ("storage", "format"):
            if option in params and not full:
                raise ApiError(500, f"parameter '{option}' not allowed for linked clones")
        if not _storage_access(ask, source, storage) and target is not None:
            raise ApiError(500, f"can't clone VM to node '{target}' (VM uses local storage)")
        if target is not None:
            self.vms.state.check_node(str(target))
        if str(params["newid"]) in self.vms.vms:
            raise ApiError(500, f"unable to create VM {params['newid']}: config file already exists")
        return source, full

    def _copy(self, drive: str, newid: str, storage: str | None) -> str:
        """The drive on the new VM: its volume copied (or cloned: the same on LVM-thin) under the
        new VM's name, raw on LVM whatever `format` asked (Qemu.pm resolve_dst_disk_format)."""
        volid, *options = drive.split(",")
        sid = storage or volid.split(":", 1)[0]
        size = self.vms.storage.volumes[volid]["size"]
        if "cloudinit" in volid:
            name = f"{sid}:vm-{newid}-cloudinit"
        else:
            disks = sum(other.startswith(f"{sid}:vm-{newid}-disk-") for other in self.vms.storage.volumes)
            name = f"{sid}:vm-{newid}-disk-{disks}"
        self.vms.allocate(name, int(newid), size)
        return ",".join([name, *options])


def _storage_access(ask: Ask, source: Mapping[str, Any], storage: str | None) -> bool:
    """$check_storage_access_clone (Qemu.pm :221-259): space on the storage each disk lands on,
    and whether every volume, a CD's too, is on shared storage."""
    shared = True
    for key, value in source.items():
        volid = str(value).split(",", 1)[0].removeprefix("file=")
        if not is_drive(key) or volid in ("", "none", "cdrom"):
            continue
        shared = shared and _shared(volid.split(":", 1)[0])
        if _has_volume(key, value):
            require(ask, f"/storage/{storage or volid.split(':', 1)[0]}", "Datastore.AllocateSpace")
    return shared


def _shared(storage: str) -> bool:
    return KINDS[storage][0] in SHARED_TYPES


def _has_volume(key: str, value: Any) -> bool:
    """A drive with a volume of its own to copy: no CD drive (clone_vm keeps those as they are)
    but the cloud-init drive, which it always copies."""
    drive = str(value)
    return is_drive(key) and ("media=cdrom" not in drive.split(",") or "cloudinit" in drive)
