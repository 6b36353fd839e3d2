"""The settings a running VM takes only at its next boot, between runs: its cloud-init data and
its size. Proxmox writes a change to them at once (the cloud-init drive, the pending config), but
the VM takes it only when it boots again, which the program never does by itself
(rebootAfterUpdate is off): the cluster goes down only when its owner chooses. So a run says what
such a change means, and refuses one that would make the host steps reach the VM at an address,
or as a user, it does not have yet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_proxmoxve as proxmoxve
from pulumi_proxmoxve.outputs import VmLegacyInitialization

from components import adoption
from components.settings import PROJECT, VmSettings

# The stack output that records the cloud-init settings as the VM holds them, for the next run.
CLOUD_INIT_OUTPUT = "vmCloudInit"
# The stack output that records the VM's size as Proxmox holds it, for the next run.
SIZE_OUTPUT = "vmSize"
# The existing output with the address the last deployment's host steps dialed.
ADDRESS_OUTPUT = "vmAddress"


class ReachChangedError(pulumi.RunError):
    """vmAddress or ciUser differs from the last deployment, outside a rebuild."""


def cloud_init_settings(vm: VmSettings) -> dict[str, Any]:
    """Every setting that Proxmox puts into the cloud-init user-data or network config, whose
    digest is the instance-id (the VM's name is its host name there), by config key."""
    return {
        "vmName": vm.name,
        "ciUser": vm.ci_user,
        "sshPublicKeys": list(vm.ssh_public_keys),
        "vmAddress": str(vm.address),
        "vmGateway": str(vm.gateway),
        "vmDnsServers": list(vm.dns_servers),
    }


def size_settings(vm: VmSettings) -> dict[str, Any]:
    """The VM's size, by config key: Proxmox applies a change to either at the next boot."""
    return {"vmCores": vm.cores, "vmMemoryMib": vm.memory_mib}


def held_cloud_init(resource: proxmoxve.VmLegacy, *, adopt: bool) -> pulumi.Output[Any]:
    """cloud_init_settings as the VM resource holds them, for the next run to compare with: the
    old ones after a run that left the VM out (`pulumi up --target`). Read field by field inside
    an apply of `initialization` alone, as plain values: the SDK cannot lift the user account's
    output object (Output.all, or an apply that returns it), whose property `keys` hides the dict
    method that Output.from_input calls ('list' object is not callable)."""
    if adopt:
        return pulumi.Output.from_input(adoption.ADOPTED_RECORD)
    # The provider's user account holds a password, sensitive, which makes the whole output
    # secret; the record leaves it out.
    return pulumi.Output.unsecret(
        resource.name.apply(lambda name: resource.initialization.apply(lambda held: _cloud_init_of(name, held)))
    )


def _cloud_init_of(name: str, held: VmLegacyInitialization | None) -> dict[str, Any]:
    """What the resource holds, by config key; a key it holds nothing for is left out, and the
    next run compares nothing for it."""
    account = held.user_account if held else None
    ipv4 = held.ip_configs[0].ipv4 if held and held.ip_configs else None
    servers = held.dns.servers if held and held.dns else None
    record = {
        "vmName": name,
        "ciUser": account.username if account else None,
        "sshPublicKeys": list(account.keys) if account and account.keys is not None else None,
        "vmAddress": ipv4.address if ipv4 else None,
        "vmGateway": ipv4.gateway if ipv4 else None,
        "vmDnsServers": list(servers) if servers is not None else None,
    }
    return {key: value for key, value in record.items() if value is not None}


def held_size(resource: proxmoxve.VmLegacy, *, adopt: bool) -> pulumi.Output[Any]:
    """size_settings as the VM resource holds them (cpu.cores, memory.dedicated), for the next
    run to compare with; left out where it holds nothing, as in _cloud_init_of."""
    if adopt:
        return pulumi.Output.from_input(adoption.ADOPTED_RECORD)
    # Nested applies, not Output.all, which would turn the output objects into plain dicts.
    return resource.cpu.apply(
        lambda cpu: resource.memory.apply(
            lambda memory: {
                key: int(value)
                for key, value in (
                    ("vmCores", cpu.cores if cpu else None),
                    ("vmMemoryMib", memory.dedicated if memory else None),
                )
                if value is not None
            }
        )
    )


def dialed_address(vm: VmSettings, deployment: pulumi.Output[Mapping[str, Any]], *, adopt: bool) -> pulumi.Output[str]:
    """The address the host steps dial: the VM's, once the last deployment shows that they reach
    it there and as the same user. Every other cloud-init change is announced with what it means."""
    return pulumi.Output.unsecret(deployment.apply(lambda outputs: _checked(vm, outputs, adopt=adopt)))


def _checked(vm: VmSettings, deployment: Mapping[str, Any], *, adopt: bool) -> str:
    address = str(vm.address.ip)
    recorded = deployment.get(CLOUD_INIT_OUTPUT)
    deployed = recorded if isinstance(recorded, Mapping) else {}
    reach = (("vmAddress", deployment.get(ADDRESS_OUTPUT), address), ("ciUser", deployed.get("ciUser"), vm.ci_user))
    moved = [(key, before, now) for key, before, now in reach if before is not None and before != now]
    # With a rebuild allowed, a new address or user replaces the VM (management_vm.REACH): a new
    # instance, whose first step meets it anew, wherever and as whoever.
    if moved and not vm.rebuild_from_image:
        raise ReachChangedError(
            "\n".join(
                f"{PROJECT}:{key}: the last deployment has {before!r}, and the VM takes {now!r} only at a "
                "reboot, which the program never does: every host step would dial it before then, and the "
                "first would trust whatever answers. Change it with a rebuild "
                "(docs/operations.md, 'Changing the VM's address or user')"
                for key, before, now in moved
            )
        )
    # Adopting ignores the VM's inputs: nothing reaches Proxmox in that run.
    if not adopt:
        _announce_cloud_init(vm, recorded)
        _announce_size(vm, deployment.get(SIZE_OUTPUT))
    return address


def _changed(wanted: Mapping[str, Any], recorded: Any) -> list[str]:
    """The keys of `wanted` that differ from the last deployment's record of them; all of them
    after an adoption; none for a stack that recorded nothing yet."""
    if recorded == adoption.ADOPTED_RECORD:
        return list(wanted)
    deployed_values = recorded if isinstance(recorded, Mapping) else {}
    return [key for key in wanted if key in deployed_values and deployed_values[key] != wanted[key]]


def _announce(wanted: Mapping[str, Any], recorded: Any, consequence: str) -> None:
    """Warns of the keys of `wanted` that changed since the last deployment, and what follows."""
    if changed := _changed(wanted, recorded):
        what = "become the adopted VM's" if recorded == adoption.ADOPTED_RECORD else "changed"
        pulumi.log.warn(f"{', '.join(f'{PROJECT}:{key}' for key in changed)} {what}: {consequence}")


def _announce_cloud_init(vm: VmSettings, recorded: Any) -> None:
    _announce(
        cloud_init_settings(vm),
        recorded,
        "Proxmox writes the VM's cloud-init drive in this run, and the running VM takes it only at its next "
        f"reboot, which this program never does by itself: reboot it (qm reboot {vm.vm_id}) in a window of "
        "your choosing. cloud-init then sees a new instance and keeps the SSH host key (mgmt-keep-host-keys), "
        "so the host steps go on pinning it (docs/operations.md, 'Cloud-init changes')",
    )


def _announce_size(vm: VmSettings, recorded: Any) -> None:
    _announce(
        size_settings(vm),
        recorded,
        "Proxmox holds the new size as a pending change in this run, and the VM takes it only at its next "
        f"boot, which this program never does by itself: reboot it (qm reboot {vm.vm_id}) in a window when "
        "the cluster may be down for a minute (docs/troubleshooting.md, 'A new vmCores or vmMemoryMib is "
        "applied')",
    )
