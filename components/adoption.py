"""Adoption (`adopt`, docs/adoption.md): the lab that the playbook built taken into the stack as it
runs, with nothing the program sets forced on it in that run. What each kind of adopted object
keeps as it is, the id it is imported under, and the mode that makes a host step report a
difference instead of changing the host: the components ask here, so a change to adoption is a
change to this file.
"""

from __future__ import annotations

import pulumi

# What the provider fills in when a program leaves it out (its schema's DefaultFunc): a VM the
# program creates gets the default cdrom (ide3) and watchdog, which the playbook's VM has not.
# Unless kept, the adoption run adds them, and the imported VM, whose rebootAfterUpdate is the
# provider's default (on), is rebooted for it: found by the box (tests/test_box_whole_adoption.py).
PROVIDER_DEFAULTED = ["cdrom", "watchdog"]
# Every input the program sets on the VM, and those; the provider-only rebootAfterUpdate is among
# them, so the import plans no update at all.
VM_INPUTS = [
    *("name", "description", "onBoot", "started", "protection", "operatingSystem", "cpu", "memory"),
    *("networkDevices", "scsiHardware", "disks", "bootOrders", "serialDevices", "vga", "agent"),
    *("initialization", "rebootAfterUpdate", *PROVIDER_DEFAULTED),
]
# Every input a Helm release gets (`compat` from the SDK itself): none of them is forced on the
# live release (an import reads back no createNamespace or timeout).
RELEASE_INPUTS = [
    *("name", "chart", "namespace", "createNamespace", "values", "timeout", "version"),
    "compat",
]
# A namespace or a provider CR: an imported object brings its live spec among its inputs (a
# namespace's `kubernetes` finalizer, say), which would otherwise plan an update of it.
OBJECT_INPUTS = ["metadata", "spec"]


def imported(
    import_id: str, kept: list[str], *, adopt: bool, otherwise_ignored: list[str] | None = None
) -> pulumi.ResourceOptions:
    """Adopted, the object is imported under `import_id` and every input in `kept` stays as it
    runs; else it is created, and only `otherwise_ignored` (the component's own) is ignored."""
    return pulumi.ResourceOptions(
        import_=import_id if adopt else None,
        ignore_changes=kept if adopt else otherwise_ignored,
    )


def needs_image(*, adopt: bool) -> bool:
    """An adopted VM's disk exists, and a disk's import source is read only when a VM is created:
    adopting downloads no image."""
    return not adopt


def script_mode(*, adopt: bool) -> list[str]:
    """The last arguments of a host script that would rewrite a file, restart or upgrade: adopted,
    `adopt` makes it report the difference and change nothing."""
    return ["adopt"] if adopt else []


# What a run records of the VM's settings (components.next_boot) when adopting: the playbook's,
# which the program does not compare with (every one of its settings is announced the next run).
ADOPTED_RECORD = "adopted: as the playbook left it"
