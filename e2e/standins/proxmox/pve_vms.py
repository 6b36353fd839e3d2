"""The Proxmox VE stand-in's QEMU VMs: create (a disk imported from a downloaded volume with
`import-from`, the cloud-init drive), config reads and updates, disk resize, start, shutdown, stop,
delete (refused while protected or running), `qm template`, and the guest agent's availability,
each as Proxmox VE stores and answers it (qemu-server PVE/API2/Qemu.pm), with the VM's guest told
of every power change.

The config keeps what the client sent, but for what Proxmox VE itself fills in or rewrites: a
drive's `file=` becomes its volume (`local-lvm:vm-201-disk-0`), a NIC gets PVE's own form with a
MAC (`virtio=BC:24:11:..,bridge=vmbr0`), tags are normalised, a boot order is checked, and numbers
and flags are JSON numbers, as clients read them. An update checks the token's privileges per
option, as Qemu.pm's check_vm_modify_config_perm does.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
import uuid
from typing import Any

from e2e.standins.proxmox.common import ROOT, ApiError, Ask, Faults, Guest, param_error, permitted, require
from e2e.standins.proxmox.pve_storage import Storage, check_volume_access
from e2e.standins.proxmox.pve_tasks import NodeState

INTEGER_KEYS = {"acpi", "balloon", "cores", "memory", "numa", "onboot", "protection", "sockets", "tablet", "template"}
DRIVES = ("ide", "sata", "scsi", "virtio")
CLOUDINIT_SIZE = 4 << 20
# Proxmox's own MAC prefix, which it gives every NIC created without a `macaddr`.
MAC_PREFIX = "BC:24:11"
AGENT_NOT_RUNNING = "QEMU guest agent is not running"
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# qemu-server PVE/QemuServer.pm $nic_model_list: a NIC's first item is `<model>[=<MAC>]`.
NIC_MODELS = {"e1000", "e1000-82540em", "e1000-82544gc", "e1000-82545em", "e1000e", "i82551", "i82557b"}
NIC_MODELS |= {"i82559er", "ne2k_isa", "ne2k_pci", "pcnet", "rtl8139", "virtio", "vmxnet3"}
# The privilege each option needs (Qemu.pm $cpuoptions, $memoryoptions, $hwtypeoptions,
# $generaloptions, $diskoptions, $cloudinitoptions); drives, tags and serial ports are checked apart.
OPTION_PRIVILEGES = {
    **dict.fromkeys(("cores", "cpu", "cpulimit", "cpuunits", "numa", "smp", "sockets", "vcpus"), "VM.Config.CPU"),
    **dict.fromkeys(("memory", "balloon", "shares"), "VM.Config.Memory"),
    **dict.fromkeys(("acpi", "hotplug", "kvm", "machine", "scsihw", "smbios1", "tablet", "vga"), "VM.Config.HWType"),
    **dict.fromkeys(("watchdog", "audio0", "rng0"), "VM.Config.HWType"),
    **dict.fromkeys(("agent", "autostart", "bios", "description", "keyboard", "localtime"), "VM.Config.Options"),
    **dict.fromkeys(("migrate_downtime", "migrate_speed", "name", "onboot", "ostype"), "VM.Config.Options"),
    **dict.fromkeys(("protection", "reboot", "startdate", "startup", "tdf", "template"), "VM.Config.Options"),
    **dict.fromkeys(("boot", "bootdisk", "vmstatestorage"), "VM.Config.Disk"),
}
# What an update of a VM's config needs one of (Qemu.pm $vm_config_perm_list).
CONFIG_PRIVILEGES: tuple[str, ...] = ("VM.Config.Disk", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Memory")
CONFIG_PRIVILEGES += ("VM.Config.Network", "VM.Config.HWType", "VM.Config.Options", "VM.Config.Cloudinit")
CLOUDINIT_OPTIONS = {"cicustom", "cipassword", "citype", "ciuser", "ciupgrade", "nameserver", "searchdomain", "sshkeys"}


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
        deleted = _split_list(params.pop("delete", ""))
        for key in deleted:
            self._check_option(ask, vmid, key, str(config.get(key, "")))
        for key, value in sorted(params.items()):
            self._check_option(ask, vmid, key, value)
        present = {key for key, value in {**config, **params}.items() if value} - set(deleted)
        order = _split_list(_boot_settings(str(config.get("boot", ""))).get("order", ""))
        for key in deleted:
            config.pop(key, None)
        for key, value in sorted(params.items()):
            if key == "boot":
                config[key] = _boot(value, present)
            elif key == "tags":
                config[key] = _tags(value)
            else:
                config[key] = self._value(vmid, key, value)
        # Qemu.pm update_vm_api: a CD drive an update names (not its cloud-init drive) joins the VM's
        # boot order, to be bootable, even the drive it has. Where the update sets `boot` too, Perl's
        # hash order decides which is written last; this writes the one the client did not ask for.
        if appended := [
            key for key, value in sorted(params.items()) if order and key not in order and _is_cd(key, value)
        ]:
            config["boot"] = f"order={';'.join(order + appended)}"

    def _check_option(self, ask: Ask, vmid: str, key: str, value: str) -> None:
        """Qemu.pm check_vm_modify_config_perm, its drive checks and assert_tag_permissions."""
        path = f"/vms/{vmid}"
        if is_drive(key):
            volid = value.split(",", 1)[0].removeprefix("file=")
            cdrom = "media=cdrom" in value.split(",")
            if volid.endswith("cloudinit"):
                require(ask, path, "VM.Config.Cloudinit", "VM.Config.CDROM")
            else:
                require(ask, path, "VM.Config.CDROM" if cdrom else "VM.Config.Disk")
            if cdrom and volid in self.storage.volumes:
                check_volume_access(ask, volid, self.storage.volumes[volid])
        elif key == "tags":
            require(ask, path, "VM.Config.Options")
        elif key in OPTION_PRIVILEGES:
            require(ask, path, OPTION_PRIVILEGES[key])
            if key == "startup":
                require(ask, "/", "Sys.Modify")
        elif re.fullmatch(r"net\d+", key):
            require(ask, path, "VM.Config.Network")
        elif key in CLOUDINIT_OPTIONS or re.fullmatch(r"ipconfig\d+", key):
            require(ask, path, "VM.Config.Cloudinit", "VM.Config.Network", any_of=True)
        elif not re.fullmatch(r"(unused|serial|usb|hostpci|virtiofs)\d+", key) and ask.user != ROOT:
            raise ApiError(500, f"only root can set '{key}' config")

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
        # QemuServer.pm vmstatus: `template` only on a template (go-proxmox takes any value for
        # one), `tags` only when set.
        status |= {"template": 1} if config.get("template") == 1 else {}
        status |= {"tags": config["tags"]} if "tags" in config else {}
        return {**status, "pid": 4000 + int(vmid)} if running else status

    def audited(self, ask: Ask) -> list[str]:
        """The VMIDs the token may see: those it holds VM.Audit on (Qemu.pm vmlist and pve-manager
        PVE/API2/Cluster.pm resources skip the others)."""
        return [vmid for vmid in sorted(self.vms, key=int) if permitted(ask, f"/vms/{vmid}", "VM.Audit")]

    def listing(self, ask: Ask, node: str) -> list[dict[str, Any]]:
        """`GET /nodes/{node}/qemu`."""
        self.state.check_node(node)
        return [self.status_of(vmid) for vmid in self.audited(ask)]

    def resources(self, ask: Ask) -> list[dict[str, Any]]:
        kind = ask.params["type"]
        if kind != "vm":
            raise ApiError(501, f"the stand-in lists only type=vm, not {kind!r}")
        listed = []
        for vmid in self.audited(ask):
            status = self.status_of(vmid)
            listed.append(
                {"id": f"qemu/{vmid}", "type": "qemu", "node": self.state.node, "maxcpu": float(status["cpus"])}
                | {key: status[key] for key in ("vmid", "name", "status", "maxmem", "maxdisk", "uptime")}
                | {"template": status.get("template", 0)}
                | ({"tags": status["tags"]} if "tags" in status else {})
            )
        return listed

    def start(self, ask: Ask, node: str, vmid: str) -> str:
        vm = self.vm(node, vmid)
        if vm["status"] == "running":
            raise ApiError(500, f"VM {vmid} already running")
        if vm["config"].get("template") == 1:
            raise ApiError(500, "you can't start a vm if it's a template")
        for key, value in vm["config"].items():
            volid = str(value).split(",", 1)[0]
            if is_drive(key) and ":iso/" in volid and volid not in self.storage.volumes:
                raise ApiError(500, f"volume '{volid}' does not exist")
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
        interfaces = self.agent_available(node, vmid).agent_interfaces(int(vmid))
        if interfaces is None:
            raise ApiError(500, AGENT_NOT_RUNNING)
        return {"result": interfaces}

    def agent_available(self, node: str, vmid: str) -> Guest:
        """The guest whose agent answers, but for the agent's own silence (None from the guest,
        which the caller turns into AGENT_NOT_RUNNING): qemu-server PVE/QemuServer/Agent.pm
        agent_available's checks, in its order."""
        vm = self.vm(node, vmid)
        if not _agent_enabled(vm["config"]):
            raise ApiError(500, "No QEMU guest agent configured")
        if vm["status"] != "running":
            raise ApiError(500, f"VM {vmid} is not running")
        if self.guest is None:
            raise ApiError(500, AGENT_NOT_RUNNING)
        return self.guest

    def make_template(self, vmid: str) -> None:
        """`qm template VMID` (qemu-server PVE/QemuConfig.pm template_create): each disk but the
        cloud-init drive becomes a base volume (`base-9000-disk-0`), and the VM a template."""
        config = self.vms[vmid]["config"]
        for key, value in list(config.items()):
            volid, _, options = str(value).partition(",")
            if is_drive(key) and f":vm-{vmid}-disk-" in volid:
                base = volid.replace(f":vm-{vmid}-disk-", f":base-{vmid}-disk-")
                self.storage.volumes[base] = self.storage.volumes.pop(volid)
                config[key] = ",".join(filter(None, [base, options]))
        config["template"] = 1

    def _value(self, vmid: str, key: str, value: str) -> str | int:
        if key in INTEGER_KEYS:
            return int(value)
        if is_drive(key):
            return self._drive(vmid, value)
        if key.rstrip("0123456789") == "net":
            return nic(value)
        return value

    def _drive(self, vmid: str, value: str) -> str:
        """The drive as Proxmox VE stores it, allocating the volume `file=<storage>:<GiB>` or
        `file=<storage>:cloudinit` asks for."""
        parts = [part for part in value.split(",") if part]
        file, options = (parts[0].removeprefix("file="), parts[1:]) if parts else ("", [])
        storage, _, spec = file.partition(":")
        if spec == "cloudinit":
            volid = f"{storage}:vm-{vmid}-cloudinit"
            self.allocate(volid, int(vmid), CLOUDINIT_SIZE)
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
        self.allocate(volid, int(vmid), size)
        # An LVM volume is raw by nature: Proxmox VE keeps no format for it.
        settings.pop("format", None)
        settings["size"] = _size(size)
        return ",".join([volid, *sorted(f"{key}={setting}" for key, setting in settings.items())])

    def allocate(self, volid: str, vmid: int, size: int) -> None:
        self.storage.check(self.state.node, volid.split(":", 1)[0], "images")
        self.storage.volumes[volid] = {"content": "images", "format": "raw", "size": size, "vmid": vmid}

    def _boot_disk_size(self, config: dict[str, Any]) -> int:
        volid = str(config.get("scsi0", "")).split(",", 1)[0]
        return int(self.storage.volumes.get(volid, {}).get("size", 0))


def nic(value: str) -> str:
    """qemu-server PVE/QemuServer.pm parse_net and print_net: `model=virtio,macaddr=..` (bpg's
    form) or `virtio[=<MAC>]` (PVE's own) in, PVE's own out with the other options sorted. A NIC
    given no MAC gets a new one, also on an update of a NIC that had one: parse_net makes it."""
    settings = {}
    for part in filter(None, value.split(",")):
        key, _, setting = part.partition("=")
        if key in NIC_MODELS:
            settings.update({"model": key} | ({"macaddr": setting} if setting else {}))
        else:
            settings[key] = setting
    if settings.get("model") not in NIC_MODELS:
        raise ApiError(501, f"the stand-in does not know the NIC {value!r}")
    model = settings.pop("model")
    mac = settings.pop("macaddr", None) or new_mac()
    return ",".join([f"{model}={mac}", *(f"{key}={setting}" for key, setting in sorted(settings.items()))])


def new_mac() -> str:
    """pve-common PVE/Tools.pm random_ether_addr with Proxmox's own prefix."""
    return ":".join([MAC_PREFIX, *(f"{b:02X}" for b in secrets.token_bytes(3))])


def is_drive(key: str) -> bool:
    return key.rstrip("0123456789") in DRIVES and key[-1].isdigit()


def _boot_settings(value: str) -> dict[str, str]:
    """A `pve-qm-boot` property string's keys and values (`order=scsi0;ide3`)."""
    return dict(part.partition("=")[::2] for part in value.split(",") if part)


def _split_list(value: str) -> list[str]:
    """PVE::Tools::split_list: the items of a list parameter (`delete`, a boot order)."""
    return list(filter(None, re.split(r"[\s,;]+", value)))


def _is_cd(key: str, value: str) -> bool:
    """PVE/QemuServer/Drive.pm drive_is_cdrom with its cloud-init drives excluded
    (drive_is_cloudinit: a volume named `cloudinit` or `vm-<id>-cloudinit`)."""
    parts = value.split(",")
    cloud_init = re.search(r"[:/](?:vm-\d+-)?cloudinit(?:\.\w+)?$", parts[0].removeprefix("file="))
    return is_drive(key) and "media=cdrom" in parts and not cloud_init


def _boot(value: str, present: set[str]) -> str:
    """The `pve-qm-boot` property string: `order=<dev>[;<dev>...]` with each device in the config
    (Qemu.pm update_vm_api, its message's stray quote included), or the legacy `[acdn]{1,4}`; a
    legacy order with a device appended (`cdn;ide0`, CAPMOX issue #225) is refused as
    pve-common's JSONSchema.pm refuses it."""
    if re.fullmatch("[acdn]{1,4}", value):
        return value
    settings = _boot_settings(value)
    if set(settings) != {"order"}:
        message = "invalid format - format error\nboot.legacy: value does not match the regex pattern"
        raise param_error("boot", message)
    devices = _split_list(settings["order"])
    for device in devices:
        if device not in present:
            raise ApiError(500, f"invalid bootorder: device '{device}' does not exist'")
    return f"order={';'.join(devices)}"


def _tags(value: str) -> str:
    """pve-guest-common PVE/GuestHelpers.pm get_unique_tags with the datacenter's defaults:
    lower-cased, each once, sorted, joined by `;`."""
    return ";".join(sorted({tag.lower() for tag in _split_list(value)}))


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
