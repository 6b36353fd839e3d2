"""The Proxmox VE stand-in's QEMU VMs: create (a disk imported from a downloaded volume with
`import-from`, the cloud-init drive), config reads and updates, disk resize, start, shutdown, stop,
delete (refused while protected or running), and the guest agent, each as Proxmox VE stores and
answers it, with the VM's guest told of every power change.

The config keeps what the client sent after one form-decode, but for what Proxmox VE itself fills
in: a drive's `file=` becomes its volume (`local-lvm:vm-201-disk-0`), a NIC's `model=` gets a MAC
(`virtio=BC:24:11:..`), and numbers and flags are JSON numbers, as the provider reads them.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import uuid
from typing import Any

from e2e.standins.proxmox.common import ApiError, Ask, Faults, Guest
from e2e.standins.proxmox.pve_storage import Storage
from e2e.standins.proxmox.pve_tasks import NodeState

INTEGER_KEYS = {"acpi", "balloon", "cores", "memory", "numa", "onboot", "protection", "sockets", "tablet", "template"}
DRIVES = ("ide", "sata", "scsi", "virtio")
CLOUDINIT_SIZE = 4 << 20
# Proxmox's own MAC prefix, which it gives every NIC created without a `macaddr`.
MAC_PREFIX = "BC:24:11"
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class Vms:
    def __init__(self, state: NodeState, storage: Storage, guest: Guest | None, faults: Faults) -> None:
        self.state = state
        self.storage = storage
        self.guest = guest
        self.faults = faults

    @property
    def vms(self) -> dict[str, dict[str, Any]]:
        vms: dict[str, dict[str, Any]] = self.state.data["vms"]
        return vms

    def vm(self, node: str, vmid: str) -> dict[str, Any]:
        self.state.check_node(node)
        vm = self.vms.get(vmid)
        if vm is None:
            raise ApiError(500, f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
        return vm

    def create(self, ask: Ask, node: str) -> str:
        self.state.check_node(node)
        params = dict(ask.params)
        if self.faults.vm_create is not None:
            raise ApiError(500, self.faults.vm_create)
        vmid = params.pop("vmid")
        if vmid in self.vms:
            raise ApiError(500, f"unable to create VM {vmid} - VM {vmid} already exists on node '{node}'")
        config = {key: self._value(vmid, key, value) for key, value in params.items()}
        config.update(smbios1=f"uuid={uuid.uuid4()}", vmgenid=str(uuid.uuid4()))
        self.vms[vmid] = {"config": config, "status": "stopped", "started": 0}
        return self.state.done_task("qmcreate", vmid, ask.user, [f"created VM {vmid}"])

    def config(self, ask: Ask, node: str, vmid: str) -> dict[str, Any]:
        config = self.vm(node, vmid)["config"]
        # Proxmox VE's digest is the SHA1 of the config file: it changes exactly when the config does.
        digest = hashlib.sha1(json.dumps(config, sort_keys=True).encode(), usedforsecurity=False).hexdigest()
        return {**config, "digest": digest}

    def update(self, ask: Ask, node: str, vmid: str) -> None:
        """Applied at once: Proxmox VE keeps a running VM's change pending, but `GET config` shows
        pending values, and the provider reads nothing else."""
        config, params = self.vm(node, vmid)["config"], dict(ask.params)
        for key in filter(None, params.pop("delete", "").split(",")):
            config.pop(key, None)
        config.update({key: self._value(vmid, key, value) for key, value in params.items()})

    def update_async(self, ask: Ask, node: str, vmid: str) -> str:
        self.update(ask, node, vmid)
        return self.state.done_task("qmconfig", vmid, ask.user, [f"updated VM {vmid}"])

    def regenerate_cloudinit(self, ask: Ask, node: str, vmid: str) -> None:
        """Nothing to write: the guest is given the config itself when it starts."""
        self.vm(node, vmid)

    def resize(self, ask: Ask, node: str, vmid: str) -> str:
        disk, size = ask.params["disk"], ask.params["size"]
        drive = self.vm(node, vmid)["config"].get(disk)
        if drive is None:
            raise ApiError(500, f"disk '{disk}' does not exist")
        volid, *options = drive.split(",")
        new_size = _bytes(size)
        volume = self.storage.volumes.get(volid)
        if volume is None:
            raise ApiError(500, f"disk '{disk}' has no volume to resize")
        if new_size < volume["size"]:
            raise ApiError(500, "shrinking disks is not supported")
        volume["size"] = new_size
        options = [option for option in options if not option.startswith("size=")]
        self.vms[vmid]["config"][disk] = ",".join([volid, *sorted([*options, f"size={_size(new_size)}"])])
        return self.state.done_task("resize", vmid, ask.user, [f"resized {disk} to {new_size} bytes"])

    def status(self, ask: Ask, node: str, vmid: str) -> dict[str, Any]:
        self.vm(node, vmid)
        return self.status_of(vmid)

    def status_of(self, vmid: str) -> dict[str, Any]:
        vm = self.vms[vmid]
        config, running = vm["config"], vm["status"] == "running"
        status: dict[str, Any] = {
            **{"vmid": int(vmid), "name": config.get("name", f"VM {vmid}"), "status": vm["status"]},
            **{"qmpstatus": vm["status"], "cpus": config.get("cores", 1) * config.get("sockets", 1)},
            **{"maxmem": int(config.get("memory", 512)) << 20, "maxdisk": self._boot_disk_size(config)},
            **{"uptime": int(time.time()) - vm["started"] if running else 0},
            **{"agent": int(_agent_enabled(config))},
        }
        return {**status, "pid": 4000 + int(vmid)} if running else status

    def resources(self, kind: str) -> list[dict[str, Any]]:
        if kind != "vm":
            raise ApiError(501, f"the stand-in lists only type=vm, not {kind!r}")
        listed = []
        for vmid in sorted(self.vms, key=int):
            status = self.status_of(vmid)
            listed.append(
                {"id": f"qemu/{vmid}", "type": "qemu", "node": self.state.node, "maxcpu": float(status["cpus"])}
                | {key: status[key] for key in ("vmid", "name", "status", "maxmem", "maxdisk", "uptime")}
            )
        return listed

    def start(self, ask: Ask, node: str, vmid: str) -> str:
        vm = self.vm(node, vmid)
        if vm["status"] == "running":
            raise ApiError(500, f"VM {vmid} already running")
        if self.guest is not None:
            self.guest.start(int(vmid), {key: str(value) for key, value in vm["config"].items()})
        vm.update(status="running", started=int(time.time()))
        return self.state.done_task("qmstart", vmid, ask.user, [f"started VM {vmid}"])

    def shutdown(self, ask: Ask, node: str, vmid: str) -> str:
        """As stop: forceStop ends a shutdown that times out, and a guest stand-in has nothing to
        shut down gracefully."""
        return self._power_off(ask, node, vmid, "qmshutdown")

    def stop(self, ask: Ask, node: str, vmid: str) -> str:
        return self._power_off(ask, node, vmid, "qmstop")

    def _power_off(self, ask: Ask, node: str, vmid: str, kind: str) -> str:
        vm = self.vm(node, vmid)
        if vm["status"] != "running":
            raise ApiError(500, f"VM {vmid} not running")
        if self.guest is not None:
            self.guest.stop(int(vmid))
        vm["status"] = "stopped"
        return self.state.done_task(kind, vmid, ask.user, [f"stopped VM {vmid}"])

    def delete(self, ask: Ask, node: str, vmid: str) -> str:
        vm = self.vm(node, vmid)
        if vm["config"].get("protection") == 1:
            raise ApiError(500, f"can't remove VM {vmid} - protection mode enabled")
        if vm["status"] == "running":
            raise ApiError(500, f"VM {vmid} is running - destroy failed")
        for volid in [volid for volid, volume in self.storage.volumes.items() if volume.get("vmid") == int(vmid)]:
            del self.storage.volumes[volid]
        del self.vms[vmid]
        if self.guest is not None:
            self.guest.destroy(int(vmid))
        return self.state.done_task("qmdestroy", vmid, ask.user, [f"destroyed VM {vmid}"])

    def agent_interfaces(self, ask: Ask, node: str, vmid: str) -> dict[str, Any]:
        vm = self.vm(node, vmid)
        if vm["status"] != "running":
            raise ApiError(500, f"VM {vmid} is not running")
        if not _agent_enabled(vm["config"]):
            raise ApiError(500, "No QEMU guest agent configured")
        interfaces = self.guest.agent_interfaces(int(vmid)) if self.guest is not None else None
        if interfaces is None:
            raise ApiError(500, "QEMU guest agent is not running")
        return {"result": interfaces}

    def _value(self, vmid: str, key: str, value: str) -> str | int:
        if key in INTEGER_KEYS:
            return int(value)
        if key.rstrip("0123456789") in DRIVES and key[-1].isdigit():
            return self._drive(vmid, value)
        if key.rstrip("0123456789") == "net":
            return _nic(value)
        return value

    def _drive(self, vmid: str, value: str) -> str:
        """The drive as Proxmox VE stores it, allocating the volume `file=<storage>:<GiB>` or
        `file=<storage>:cloudinit` asks for."""
        parts = [part for part in value.split(",") if part]
        file, options = (parts[0].removeprefix("file="), parts[1:]) if parts else ("", [])
        storage, _, spec = file.partition(":")
        if spec == "cloudinit":
            volid = f"{storage}:vm-{vmid}-cloudinit"
            self._allocate(volid, int(vmid), CLOUDINIT_SIZE)
            return ",".join([volid, *options, "media=cdrom"])
        if not spec.isdigit():
            return ",".join([file, *options])
        settings = dict(option.partition("=")[::2] for option in options)
        source = settings.pop("import-from", None)
        if source is not None and source not in self.storage.volumes:
            raise ApiError(500, f"import-from: volume '{source}' does not exist")
        size = self.storage.volumes[source]["size"] if source else int(spec) * UNITS["G"]
        disks = sum(volid.startswith(f"{storage}:vm-{vmid}-disk-") for volid in self.storage.volumes)
        volid = f"{storage}:vm-{vmid}-disk-{disks}"
        self._allocate(volid, int(vmid), size)
        # An LVM volume is raw by nature: Proxmox VE keeps no format for it.
        settings.pop("format", None)
        settings["size"] = _size(size)
        return ",".join([volid, *sorted(f"{key}={setting}" for key, setting in settings.items())])

    def _allocate(self, volid: str, vmid: int, size: int) -> None:
        self.storage.check(self.state.node, volid.split(":", 1)[0], "images")
        self.storage.volumes[volid] = {"content": "images", "format": "raw", "size": size, "vmid": vmid}

    def _boot_disk_size(self, config: dict[str, Any]) -> int:
        volid = str(config.get("scsi0", "")).split(",", 1)[0]
        return int(self.storage.volumes.get(volid, {}).get("size", 0))


def _nic(value: str) -> str:
    settings = dict(part.partition("=")[::2] for part in value.split(",") if part)
    if "model" not in settings:
        return value
    model = settings.pop("model")
    mac = settings.pop("macaddr", None) or ":".join([MAC_PREFIX, *(f"{b:02X}" for b in secrets.token_bytes(3))])
    return ",".join([f"{model}={mac}", *(f"{key}={setting}" for key, setting in settings.items())])


def _agent_enabled(config: dict[str, Any]) -> bool:
    agent = str(config.get("agent", "0"))
    return agent.split(",", 1)[0] in ("1", "enabled=1")


def _bytes(size: str) -> int:
    if size[-1:] in UNITS:
        return int(size[:-1]) * UNITS[size[-1]]
    return int(size)


def _size(size: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if size % UNITS[unit] == 0:
            return f"{size // UNITS[unit]}{unit}"
    return str(size)
