"""The inside of each workload VM that CAPMOX clones on the Proxmox VE stand-in, where no VM can
run here: what the VM's hardware and its image do between `qm start` and kubeadm.

At start, a VM with CAPMOX's NoCloud ISO on its CD drive (`ide0`, the ISO CAPMOX uploaded: a
`cidata` volume holding user-data, meta-data and network-config, made by go-proxmox's
makeCloudInitISO) boots with it: the ISO is read as cloud-init's NoCloud datasource reads it, and
kept as the VM's `Boot`:

- its meta-data (`instance-id`, the SMBIOS uuid CAPMOX read from the VM; `local-hostname`;
  `kubernetes-version`, the image's kubelet);
- its user-data, the bootstrap data the kubeadm bootstrap provider rendered, which kubeadm runs
  (vm_boot.py);
- net0's addresses from the network-config entry that matches net0's MAC, as netplan matches it
  (an entry for another MAC leaves the VM without an address: refused);
- the sockets, cores, memory and boot disk the VM was given.

Its guest agent answers once it runs: `get-osinfo` (Ubuntu 24.04) and one command, `cloud-init
status`, answered `status: done` (the bootstrap data's kubeadm run is what vm_boot.py checks, at
the Node's registration). Any other command is refused. A VM started without that ISO is no workload
VM: it goes to `others` (the management VM's guests, in the whole box), or is refused where none.

The kubelet stand-in (kubelet.py) registers a Node for each booted VM; `destroy` ends the VM's
boot, and with it its kubelet (`on_destroy`).
"""

from __future__ import annotations

import itertools
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.standins.proxmox.common import Guest

CLOUD_INIT_STATUS = ["cloud-init", "status"]
OS_INFO = {
    "id": "ubuntu",
    "name": "Ubuntu",
    "pretty-name": "Ubuntu 24.04.3 LTS",
    "version": "24.04.3 LTS (Noble Numbat)",
    "version-id": "24.04",
    "kernel-release": "6.8.0-88-generic",
    "kernel-version": "#89-Ubuntu SMP PREEMPT_DYNAMIC",
    "machine": "x86_64",
}
_ISO_DRIVE = re.compile(r"^(?P<volid>[^,]+:iso/[^,]+),media=cdrom")
_MAC = re.compile(r"^\w+=(?P<mac>[0-9A-Fa-f:]{17})(,|$)")
_UNITS = {"M": 1 / 1024, "G": 1, "T": 1024}
# ISO 9660's layout (ECMA-119): volume descriptors from sector 16 (primary 1, supplementary 2,
# terminator 255); Joliet is a supplementary descriptor with one of three UCS-2 escape sequences.
_SECTOR, _FIRST_DESCRIPTOR = 2048, 16
_PRIMARY, _SUPPLEMENTARY, _TERMINATOR = 1, 2, 255
_JOLIET = (b"%/@", b"%/C", b"%/E")
_DIRECTORY_FLAG = 2


@dataclass(frozen=True)
class Boot:
    """What a workload VM booted with."""

    vmid: int
    meta: dict[str, str]
    """The NoCloud meta-data."""
    user_data: str
    addresses: tuple[str, ...]
    """net0's addresses with their prefix, as the network-config gives them."""
    cpu: int
    memory_mib: int
    disk_gib: int

    @property
    def name(self) -> str:
        return self.meta["local-hostname"]

    @property
    def provider_id(self) -> str:
        return f"proxmox://{self.meta['instance-id']}"


@dataclass
class WorkloadGuests:
    """A `Guest` (e2e/standins/proxmox/common.py) for the Proxmox VE stand-in: the workload VMs'
    boots, by VMID."""

    others: Guest | None = None
    volume_path: Callable[[str], Path] | None = None
    """Where the stand-in keeps a volume's file (set once it serves)."""
    on_destroy: Callable[[Boot], None] = lambda _boot: None
    booted: dict[int, Boot] = field(default_factory=dict)
    """The running workload VMs' boots."""
    owned: set[int] = field(default_factory=set)
    """Every workload VM started here, running or stopped, until destroyed: the rest are `others`'."""

    def boot_of(self, provider_id: str) -> Boot | None:
        """The running VM whose SMBIOS uuid the providerID names."""
        return next((boot for boot in self.booted.values() if boot.provider_id == provider_id), None)

    def start(self, vmid: int, config: dict[str, str]) -> None:
        drive = _ISO_DRIVE.match(str(config.get("ide0", "")))
        if drive is None:
            self._other("start").start(vmid, config)
            return
        if self.volume_path is None:
            raise RuntimeError("the workload guests were given no way to read a volume")
        files = read_cidata(self.volume_path(drive["volid"]))
        meta = {str(key): str(value) for key, value in yaml.safe_load(files["meta-data"]).items()}
        mac = _MAC.match(str(config.get("net0", "")))
        if mac is None:
            raise RuntimeError(f"VM {vmid}: net0 {config.get('net0')!r} has no MAC")
        self.owned.add(vmid)
        self.booted[vmid] = Boot(
            vmid,
            meta,
            files["user-data"],
            net0_addresses(yaml.safe_load(files["network-config"]), mac["mac"]),
            int(config.get("sockets", 1)) * int(config.get("cores", 1)),
            int(config["memory"]),
            _gib(str(config["scsi0"])),
        )

    # A VM that never started here (a template, a clone never powered on) and is not `others`'
    # has no inside: stopping or destroying it, or asking its agent, reaches nothing.

    def stop(self, vmid: int) -> None:
        if vmid in self.booted:
            self.on_destroy(self.booted.pop(vmid))
        elif vmid not in self.owned and self.others is not None:
            self.others.stop(vmid)

    def destroy(self, vmid: int) -> None:
        if vmid in self.owned:
            self.stop(vmid)
            self.owned.discard(vmid)
        elif self.others is not None:
            self.others.destroy(vmid)

    def agent_interfaces(self, vmid: int) -> list[dict[str, Any]] | None:
        if vmid in self.owned:
            raise RuntimeError(f"VM {vmid}: the workload guest's agent knows no network-get-interfaces")
        return self._other("agent network-get-interfaces").agent_interfaces(vmid)

    def agent_osinfo(self, vmid: int) -> dict[str, Any] | None:
        if vmid not in self.owned:
            return self.others.agent_osinfo(vmid) if self.others else None
        return dict(OS_INFO) if vmid in self.booted else None

    def agent_exec(self, vmid: int, command: list[str], input_data: str) -> dict[str, Any] | None:
        if vmid not in self.owned:
            return self.others.agent_exec(vmid, command, input_data) if self.others else None
        if vmid not in self.booted:
            return None
        if command != CLOUD_INIT_STATUS or input_data:
            raise RuntimeError(f"VM {vmid}: the workload guest's agent runs only `cloud-init status`, not {command}")
        return {"exitcode": 0, "out-data": "status: done\n"}

    def _other(self, what: str) -> Guest:
        if self.others is None:
            raise RuntimeError(f"{what}: no guest for a VM without CAPMOX's cloud-init ISO")
        return self.others


def read_cidata(iso: Path) -> dict[str, str]:
    """The files of a NoCloud `cidata` ISO, as cloud-init reads them from the mounted drive: by
    their Joliet names, which go-diskfs writes as it writes the Rock Ridge names Linux mounts by
    (pycdlib, stricter than the kernel, refuses go-diskfs's Rock Ridge PX entries)."""
    data = iso.read_bytes()
    label, root = None, None
    for number in itertools.count(_FIRST_DESCRIPTOR):
        descriptor = data[number * _SECTOR : (number + 1) * _SECTOR]
        if len(descriptor) < _SECTOR or descriptor[0] == _TERMINATOR:
            break
        if descriptor[0] == _PRIMARY:
            # Padded with spaces by the standard, with NULs by go-diskfs: blkid reads both as cidata.
            label = descriptor[40:72].decode().rstrip(" \x00")
        elif descriptor[0] == _SUPPLEMENTARY and descriptor[88:91] in _JOLIET:
            root = descriptor[156:190]
    if label != "cidata":
        raise RuntimeError(f"{iso.name}: volume {label!r}, not cidata: cloud-init's NoCloud would not read it")
    if root is None:
        raise RuntimeError(f"{iso.name}: no Joliet directory, which go-diskfs writes")
    files = {name: content.decode() for name, content in _directory(data, root).items()}
    missing = {"user-data", "meta-data", "network-config"} - set(files)
    if missing:
        raise RuntimeError(f"{iso.name}: no {', '.join(sorted(missing))}")
    return files


def _directory(data: bytes, record: bytes) -> dict[str, bytes]:
    """The files of the ISO 9660 directory whose record is `record`, by their Joliet names."""
    extent, size = struct.unpack_from("<I", record, 2)[0], struct.unpack_from("<I", record, 10)[0]
    listing, offset, files = data[extent * _SECTOR : extent * _SECTOR + size], 0, {}
    while offset < len(listing):
        length = listing[offset]
        if length == 0:  # records do not cross a sector: the rest of this one is padding
            offset = (offset // _SECTOR + 1) * _SECTOR
            continue
        entry = listing[offset : offset + length]
        start, size, flags, name = (
            struct.unpack_from("<I", entry, 2)[0],
            struct.unpack_from("<I", entry, 10)[0],
            entry[25],
            entry[33 : 33 + entry[32]],
        )
        if name not in (b"\x00", b"\x01") and not flags & _DIRECTORY_FLAG:
            files[name.decode("utf-16-be").split(";")[0]] = data[start * _SECTOR : start * _SECTOR + size]
        offset += length
    return files


def net0_addresses(network: Mapping[str, Any], mac: str) -> tuple[str, ...]:
    """The addresses netplan gives the NIC with `mac` from a version 2 network-config."""
    ethernets = network["network"]["ethernets"]
    matched = [e for e in ethernets.values() if str(e.get("match", {}).get("macaddress", "")).lower() == mac.lower()]
    if len(matched) != 1:
        raise RuntimeError(f"the network-config matches net0's MAC {mac} {len(matched)} times, not once")
    return tuple(matched[0].get("addresses", ()))


def _gib(drive: str) -> int:
    size = re.search(r"(?:^|,)size=(\d+)([MGT])", drive)
    if size is None:
        raise RuntimeError(f"the boot disk {drive!r} has no size")
    return int(int(size[1]) * _UNITS[size[2]])
