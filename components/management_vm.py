"""The management VM on Proxmox VE, created from the Ubuntu cloud image."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_proxmoxve as proxmoxve

from components import adoption
from components.next_boot import ADDRESS_OUTPUT, CLOUD_INIT_OUTPUT, SIZE_OUTPUT, held_cloud_init, held_size
from components.run_records import RunRecords
from components.settings import PROJECT, ImageSettings, ProxmoxSettings, VmSettings

# The image has no qemu-guest-agent until the k3s component installs it, so the provider must not
# wait for the agent to report an address (15 minutes by default); the bound caps any other
# agent call.
AGENT_TIMEOUT = "1m"
IMAGE_DOWNLOAD_TIMEOUT_SECONDS = 1800
# Import needs the `import` content type on the image storage and Proxmox VE 8.4 or newer.
IMPORT_CONTENT_TYPE = "import"
IMPORT_SOURCE = "disks[0].importFrom"
# The provider's schema defaults a disk's speed limits to a block of zeros, which the bridge puts
# into the inputs, but it reads a disk back with a speed block only when Proxmox holds a limit
# (iops_rd, mbps_wr, ...), and it never sends a zero one: with no limits set, every run would plan
# the zeros again and send the disk anew. The program sets no limits, so the block is not its to
# compare.
DISK_SPEED = "disks[0].speed"
# The CD drive the provider gives each VM it creates (ide3), never written again: Proxmox VE
# appends a CD drive that a config update names to the VM's boot order (qemu-server
# PVE/API2/Qemu.pm update_vm_api), and the provider names it whenever its state's drive is not
# the default, as after an import (a lost state's recovery) or on a VM made without one (the
# playbook's). The next preview would plan the boot order back: one more run, for a VM that
# nobody changed. Nothing of the program's uses the drive.
CD_DRIVE = "cdrom"
# Where the host steps reach the VM: its address and cloud-init user. With a rebuild allowed, a
# change to either replaces the VM (next_boot lets it through only then); sent in place, the VM
# would take it at a reboot the program never does, and every step would dial it before then.
REACH = ["initialization.ipConfigs[0].ipv4.address", "initialization.userAccount.username"]
# The stack output that records the VM's protection as deployed, which the rebuild guard reads.
PROTECTED_OUTPUT = "vmProtected"


class RebuildRefusedError(pulumi.RunError):
    """vmRebuildFromImage without vmProtected=false applied in an earlier run."""


def rebuild_protection(deployment: Mapping[str, Any]) -> bool:
    """The VM's protection in a run that may rebuild it: off, once the last deployment shows it
    lifted. A stack never deployed has no VM to rebuild."""
    if deployment and deployment.get(PROTECTED_OUTPUT) is not False:
        raise RebuildRefusedError(
            f"{PROJECT}:vmRebuildFromImage: true needs vmProtected=false applied in an earlier `pulumi up`, "
            "and the last deployment has the VM protected: run `pulumi up` with vmProtected=false and "
            "vmRebuildFromImage=false first (docs/operations.md)"
        )
    return False


class ManagementVm(pulumi.ComponentResource):
    """The cloud image on the node's image storage, and the VM imported from it.

    The VM holds the management cluster's only state: it is protected (by Pulumi and by Proxmox's
    own delete lock), and a new cloud image changes the download only. Rebuilding from a new
    image is deliberate (docs/operations.md): with the locks lifted and `vmRebuildFromImage` on,
    a new image replaces the VM.
    """

    vm_id: int
    name: str
    protection: pulumi.Output[bool]
    """Proxmox's delete lock as deployed, or Pulumi's protect (vmProtected) in this run; exported as
    PROTECTED_OUTPUT for the next run's guard."""
    address: str
    image: proxmoxve.download.File | None
    """The cloud image on the node; none while adopting a VM that exists."""
    vm: proxmoxve.VmLegacy
    instance_key: pulumi.Output[str]
    """Changes exactly when the VM is re-created, so host steps re-run on a new machine."""

    def __init__(
        self,
        name: str,
        proxmox: ProxmoxSettings,
        vm: VmSettings,
        image: ImageSettings,
        *,
        adopt: bool,
        records: RunRecords,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`records`: the last deployment's outputs, and where the VM's own go for the next run."""
        super().__init__("homelab:index:ManagementVm", name, None, opts)
        deployment = records.last
        provider = proxmoxve.Provider(
            f"{name}-proxmox",
            endpoint=proxmox.endpoint,
            api_token=pulumi.Output.secret(f"{proxmox.api_token_id}={proxmox.api_token_secret}"),
            insecure=proxmox.insecure,
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        self.image = (
            _cloud_image(f"{name}-image", proxmox.node, image, child) if adoption.needs_image(adopt=adopt) else None
        )
        self.vm = _vm(
            f"{name}-vm",
            proxmox.node,
            vm,
            self.image,
            protection=_protection(vm, deployment),
            opts=_vm_options(child, proxmox, vm, adopt=adopt),
        )
        self.vm_id = vm.vm_id
        self.name = vm.name
        self.address = str(vm.address.ip)
        # The guard must see the VM protected while either lock is on: Pulumi's protect alone is
        # on for an adopted VM, which keeps the playbook's missing Proxmox lock until its owner
        # sets one, and the record would otherwise let one run lift protect and rebuild.
        self.protection = self.vm.protection.apply(lambda locked: bool(locked) or vm.protected)
        # Proxmox assigns a random MAC when it creates the VM; the VMID alone survives a rebuild.
        self.instance_key = pulumi.Output.all(self.vm.id, self.vm.network_devices).apply(
            lambda args: _instance_key(args[0], args[1])
        )
        self.register_outputs(
            {
                "vmId": self.vm_id,
                "address": self.address,
                "instanceKey": self.instance_key,
                "protection": self.protection,
            }
        )
        # What the next run checks its settings against (components.next_boot, rebuild_protection).
        records.keep(ADDRESS_OUTPUT, self.address)
        records.keep(PROTECTED_OUTPUT, self.protection)
        records.keep(CLOUD_INIT_OUTPUT, held_cloud_init(self.vm, adopt=adopt))
        records.keep(SIZE_OUTPUT, held_size(self.vm, adopt=adopt))


def _vm(
    name: str,
    node: str,
    vm: VmSettings,
    image: proxmoxve.download.File | None,
    *,
    protection: pulumi.Input[bool],
    opts: pulumi.ResourceOptions,
) -> proxmoxve.VmLegacy:
    return proxmoxve.VmLegacy(
        name,
        node_name=node,
        vm_id=vm.vm_id,
        name=vm.name,
        description="Kubernetes management cluster (k3s), managed by the lab-mgmt Pulumi program.",
        on_boot=True,
        started=True,
        protection=protection,
        operating_system=proxmoxve.VmLegacyOperatingSystemArgs(type="l26"),
        cpu=proxmoxve.VmLegacyCpuArgs(cores=vm.cores, type="x86-64-v2-AES"),
        memory=proxmoxve.VmLegacyMemoryArgs(dedicated=vm.memory_mib),
        network_devices=[proxmoxve.VmLegacyNetworkDeviceArgs(bridge=vm.bridge, model="virtio", vlan_id=vm.vlan_tag)],
        scsi_hardware="virtio-scsi-pci",
        disks=[_system_disk(vm, image)],
        boot_orders=["scsi0"],
        serial_devices=[proxmoxve.VmLegacySerialDeviceArgs(device="socket")],
        vga=proxmoxve.VmLegacyVgaArgs(type="serial0"),
        agent=proxmoxve.VmLegacyAgentArgs(
            enabled=True,
            timeout=AGENT_TIMEOUT,
            wait_for_ip=proxmoxve.VmLegacyAgentWaitForIpArgs(disabled=True),
        ),
        initialization=_cloud_init(vm),
        # A change to cpu, operating system, agent or cloud-init needs a reboot, which the
        # provider would otherwise do by itself; it now only warns, and the owner reboots in
        # a window of their choosing (docs/operations.md).
        reboot_after_update=False,
        opts=opts,
    )


def _protection(vm: VmSettings, deployment: pulumi.Output[Mapping[str, Any]]) -> pulumi.Input[bool]:
    """A rebuild deletes the VM: the VM is sent only once the last deployment shows its locks
    lifted, so a run that lifts them and rebuilds at once stops at preview."""
    if vm.rebuild_from_image:
        return pulumi.Output.unsecret(deployment.apply(rebuild_protection))
    return vm.protected


def _cloud_image(name: str, node: str, image: ImageSettings, opts: pulumi.ResourceOptions) -> proxmoxve.download.File:
    return proxmoxve.download.File(
        name,
        node_name=node,
        datastore_id=image.storage,
        content_type=IMPORT_CONTENT_TYPE,
        url=image.url,
        file_name=image.file_name,
        checksum=image.sha256,
        checksum_algorithm="sha256",
        # The URL names a dated serial whose checksum is pinned, so the provider's size checks
        # (on by default) could only re-download behind the user's back: off, the file is never
        # replaced unless its URL, name or checksum changes.
        overwrite=False,
        # A file of the same name that the program did not download (left by an earlier
        # attempt, say) stops the download with an error instead of being deleted.
        overwrite_unmanaged=False,
        upload_timeout=IMAGE_DOWNLOAD_TIMEOUT_SECONDS,
        opts=opts,
    )


def _system_disk(vm: VmSettings, image: proxmoxve.download.File | None) -> proxmoxve.VmLegacyDiskArgs:
    return proxmoxve.VmLegacyDiskArgs(
        interface="scsi0",
        datastore_id=vm.disk_storage,
        import_from=image.id if image else None,
        file_format="raw",
        size=vm.disk_gib,
    )


def _cloud_init(vm: VmSettings) -> proxmoxve.VmLegacyInitializationArgs:
    return proxmoxve.VmLegacyInitializationArgs(
        datastore_id=vm.disk_storage,
        interface="ide2",
        user_account=proxmoxve.VmLegacyInitializationUserAccountArgs(
            username=vm.ci_user,
            keys=list(vm.ssh_public_keys),
        ),
        ip_configs=[
            proxmoxve.VmLegacyInitializationIpConfigArgs(
                ipv4=proxmoxve.VmLegacyInitializationIpConfigIpv4Args(
                    address=str(vm.address),
                    gateway=str(vm.gateway),
                )
            )
        ],
        dns=proxmoxve.VmLegacyInitializationDnsArgs(servers=list(vm.dns_servers)),
    )


def _vm_options(
    child: pulumi.ResourceOptions, proxmox: ProxmoxSettings, vm: VmSettings, *, adopt: bool
) -> pulumi.ResourceOptions:
    # The provider reads a disk's import source only when it creates the VM: a changed source is
    # an in-place update that sends Proxmox nothing (bpg provider PR #2568). So a new image is for
    # future builds only, unless a rebuild is allowed, and then the new source must replace the
    # VM to take effect at all.
    ignored = [CD_DRIVE, DISK_SPEED] if vm.rebuild_from_image else [CD_DRIVE, IMPORT_SOURCE, DISK_SPEED]
    own = pulumi.ResourceOptions(
        protect=vm.protected,
        # The VMID is fixed, so a replacement must delete the old VM before creating the new.
        delete_before_replace=True,
        replace_on_changes=[IMPORT_SOURCE, *REACH] if vm.rebuild_from_image else [],
    )
    imported = adoption.imported(
        f"{proxmox.node}/{vm.vm_id}", adoption.VM_INPUTS, adopt=adopt, otherwise_ignored=ignored
    )
    return pulumi.ResourceOptions.merge(pulumi.ResourceOptions.merge(child, own), imported)


def _instance_key(vm_id: str, network_devices: list[dict[str, Any]] | None) -> str:
    # Output types are dicts keyed by the Python property names.
    mac = (network_devices or [{}])[0].get("mac_address")
    return f"{vm_id}/{mac or ''}"
