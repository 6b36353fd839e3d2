"""The workload VMs' insides (e2e/standins/workload/vm_guest.py): a VM boots with CAPMOX's NoCloud
ISO as cloud-init reads it, and refuses what such a VM would not do."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pycdlib
import pytest

from e2e.standins.workload import vm_guest
from e2e.standins.workload.vm_guest import WorkloadGuests

UUID = "6b0fbd2c-3b4a-4f0e-9a53-3c1c3c0b6e11"
MAC = "BC:24:11:2A:3B:4C"
META = (
    f"instance-id: {UUID}\nlocal-hostname: lab1-workers-abc\nhostname: lab1-workers-abc\nkubernetes-version: v1.35.9\n"
)
NETWORK = f"""network:
  version: 2
  renderer: networkd
  ethernets:
    eth0:
      match:
        macaddress: {MAC.lower()}
      dhcp4: false
      addresses:
        - '192.168.4.41/24'
"""
CONFIG = {
    "name": "lab1-workers-abc",
    "sockets": "2",
    "cores": "4",
    "memory": "8192",
    "scsi0": "local-lvm:vm-101-disk-0,size=40G",
    "net0": f"virtio={MAC},bridge=vmbr0,tag=4",
    "ide0": "local:iso/user-data-101.iso,media=cdrom",
}


def _iso(path: Path, files: dict[str, str], label: str = "cidata") -> Path:
    """An ISO as go-proxmox's makeCloudInitISO writes one: Rock Ridge and Joliet names, volume `label`."""
    image = pycdlib.PyCdlib()
    image.new(rock_ridge="1.09", joliet=3, vol_ident=label)
    for number, (name, content) in enumerate(files.items()):
        data = content.encode()
        image.add_fp(io.BytesIO(data), len(data), f"/F{number}.;1", rr_name=name, joliet_path=f"/{name}")
    image.write(str(path))
    image.close()
    return path


def _guests(tmp_path: Path, files: dict[str, str] | None = None, label: str = "cidata") -> WorkloadGuests:
    iso = _iso(
        tmp_path / "user-data-101.iso",
        files or {"user-data": "#cloud-config\n", "meta-data": META, "network-config": NETWORK},
        label,
    )
    volumes = {"local:iso/user-data-101.iso": iso}
    return WorkloadGuests(volume_path=volumes.__getitem__)


def test_a_vm_boots_with_what_capmox_put_on_its_iso(tmp_path: Path) -> None:
    guests = _guests(tmp_path)
    guests.start(101, dict(CONFIG))
    boot = guests.boot_of(f"proxmox://{UUID}")
    assert boot is not None
    assert (boot.name, boot.user_data, boot.addresses) == ("lab1-workers-abc", "#cloud-config\n", ("192.168.4.41/24",))
    assert (boot.cpu, boot.memory_mib, boot.disk_gib) == (8, 8192, 40)
    assert boot.meta["kubernetes-version"] == "v1.35.9"
    # Its agent answers CAPMOX's two questions, and nothing else.
    assert guests.agent_osinfo(101) == vm_guest.OS_INFO
    assert guests.agent_exec(101, ["cloud-init", "status"], "") == {"exitcode": 0, "out-data": "status: done\n"}
    with pytest.raises(RuntimeError, match="only `cloud-init status`"):
        guests.agent_exec(101, ["rm", "-rf", "/"], "")


def test_stopping_or_destroying_a_vm_ends_its_boot_and_tells_the_kubelet(tmp_path: Path) -> None:
    ended: list[str] = []
    guests = _guests(tmp_path)
    guests.on_destroy = lambda boot: ended.append(boot.name)
    guests.start(101, dict(CONFIG))
    guests.destroy(101)
    assert ended == ["lab1-workers-abc"]
    assert guests.boot_of(f"proxmox://{UUID}") is None
    assert guests.agent_osinfo(101) is None


def test_a_network_config_for_another_mac_leaves_the_vm_without_an_address(tmp_path: Path) -> None:
    files = {"user-data": "", "meta-data": META, "network-config": NETWORK.replace(MAC.lower(), "bc:24:11:00:00:01")}
    with pytest.raises(RuntimeError, match="matches net0's MAC BC:24:11:2A:3B:4C 0 times"):
        _guests(tmp_path, files).start(101, dict(CONFIG))


def test_a_label_padded_with_nuls_as_go_diskfs_pads_it_is_still_cidata(tmp_path: Path) -> None:
    iso = _iso(tmp_path / "user-data-101.iso", {"user-data": "", "meta-data": META, "network-config": NETWORK})
    image = bytearray(iso.read_bytes())
    label = 16 * 2048 + 40  # the primary volume descriptor's volume identifier (ECMA-119)
    image[label : label + 32] = b"cidata".ljust(32, b"\0")
    iso.write_bytes(bytes(image))
    assert vm_guest.read_cidata(iso)["meta-data"] == META


def test_an_iso_that_is_not_cidata_is_no_datasource(tmp_path: Path) -> None:
    files = {"user-data": "", "meta-data": META, "network-config": NETWORK}
    with pytest.raises(RuntimeError, match="not cidata"):
        _guests(tmp_path, files, label="config-2").start(101, dict(CONFIG))


class _ManagementGuest:
    def __init__(self) -> None:
        self.started: list[int] = []
        self.destroyed: list[int] = []

    def start(self, vmid: int, config: dict[str, str]) -> None:
        self.started.append(vmid)

    def stop(self, vmid: int) -> None: ...

    def destroy(self, vmid: int) -> None:
        self.destroyed.append(vmid)

    def agent_interfaces(self, vmid: int) -> list[dict[str, Any]] | None:
        return []

    def agent_osinfo(self, vmid: int) -> dict[str, Any] | None:
        return None

    def agent_exec(self, vmid: int, command: list[str], input_data: str) -> dict[str, Any] | None:
        return None


def test_a_vm_without_the_iso_is_the_management_vm_or_refused(tmp_path: Path) -> None:
    config = {key: value for key, value in CONFIG.items() if key != "ide0"}
    with pytest.raises(RuntimeError, match="no guest for a VM without CAPMOX's cloud-init ISO"):
        _guests(tmp_path).start(201, dict(config))
    management = _ManagementGuest()
    guests = _guests(tmp_path)
    guests.others = management
    guests.start(201, dict(config))
    assert management.started == [201]
    assert guests.booted == {}
    # A workload VM stopped, then destroyed, as CAPMOX deletes one, stays the workload guests'.
    guests.start(101, dict(CONFIG))
    guests.stop(101)
    guests.destroy(101)
    guests.destroy(201)
    assert management.destroyed == [201]
