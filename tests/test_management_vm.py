"""The cloud image and the management VM: the spec's `qm create` line, protection, and what an
image bump touches."""

from __future__ import annotations

from typing import Any

import pytest
from harness import DUMMY_SECRETS, SECRET, Resource, Run, changed, contains_plain, replaced, run_program

from components.management_vm import REACH, RebuildRefusedError

VM = ("proxmoxve:index/vmLegacy:VmLegacy", "mgmt-vm")
IMAGE = ("proxmoxve:download/file:File", "mgmt-image")
PROXMOX = ("pulumi:providers:proxmoxve", "mgmt-proxmox")
IMAGE_FILE_ID = "local:import/noble-server-cloudimg-amd64-20260926.qcow2"
NEXT_IMAGE = {
    "imageUrl": "https://cloud-images.ubuntu.com/noble/20261020/noble-server-cloudimg-amd64.img",
    "imageSha256": "0123456789abcdef" * 4,
}
UNPROTECTED = {"vmProtected": False}
# A rebuild is refused while workload clusters are declared (tests/test_settings.py).
REBUILD = {"vmProtected": False, "vmRebuildFromImage": True, "workloadClusters": []}


@pytest.fixture(scope="module")
def lab() -> Run:
    return run_program()


def test_image_is_downloaded_for_import_with_its_checksum(lab: Run) -> None:
    assert lab.get(*IMAGE).plain == {
        "nodeName": "pv1-1",
        "datastoreId": "local",
        "contentType": "import",
        "url": "https://cloud-images.ubuntu.com/noble/20260926/noble-server-cloudimg-amd64.img",
        # Proxmox imports only *.qcow2 names; the serial keeps two image builds apart.
        "fileName": "noble-server-cloudimg-amd64-20260926.qcow2",
        "checksum": "6a81c37564db9b1ee84e141922625e1d7c5b389b99bb3c572e0243607d5bb4d2",
        "checksumAlgorithm": "sha256",
        # No size checks, which would re-download a pinned image behind the user's back; and a
        # file the stack did not download is an error, never deleted (bpg provider docs,
        # download_file: `overwrite`, `overwrite_unmanaged`).
        "overwrite": False,
        "overwriteUnmanaged": False,
        "uploadTimeout": 1800,
    }


def test_vm_matches_the_qm_create_line(lab: Run) -> None:
    assert lab.get(*VM).plain == {
        "nodeName": "pv1-1",
        "vmId": 201,  # qm create 201
        "name": "lab-mgmt",  # --name lab-mgmt
        "description": "Kubernetes management cluster (k3s), managed by the lab-mgmt Pulumi program.",
        "onBoot": True,
        "started": True,  # then started
        "protection": True,
        # A change that needs a reboot only warns; the owner reboots in a window.
        "rebootAfterUpdate": False,
        "operatingSystem": {"type": "l26"},
        "cpu": {"cores": 2, "type": "x86-64-v2-AES"},  # --cores 2
        "memory": {"dedicated": 4096},  # --memory 4096
        "networkDevices": [{"bridge": "vmbr0", "model": "virtio", "vlanId": 4}],  # --net0 virtio,bridge=vmbr0,tag=4
        "scsiHardware": "virtio-scsi-pci",  # --scsihw virtio-scsi-pci
        # --scsi0 local-lvm:0,import-from=<image>, then resized to 30G
        "disks": [
            {
                "interface": "scsi0",
                "datastoreId": "local-lvm",
                "importFrom": IMAGE_FILE_ID,
                "fileFormat": "raw",
                "size": 30,
            }
        ],
        "bootOrders": ["scsi0"],  # --boot order=scsi0
        "serialDevices": [{"device": "socket"}],  # --serial0 socket
        "vga": {"type": "serial0"},  # --vga serial0
        # --agent 1, without waiting for an agent the image does not have yet
        "agent": {"enabled": True, "timeout": "1m", "waitForIp": {"disabled": True}},
        "initialization": {
            "datastoreId": "local-lvm",  # --ide2 local-lvm:cloudinit
            "interface": "ide2",
            "userAccount": {  # --ciuser ubuntu --sshkeys <key>
                "username": "ubuntu",
                "keys": [lab.get(*VM).plain["initialization"]["userAccount"]["keys"][0]],
            },
            "ipConfigs": [{"ipv4": {"address": "192.168.4.21/24", "gateway": "192.168.4.8"}}],  # --ipconfig0
            "dns": {"servers": ["8.8.8.8", "2.2.2.2"]},  # --nameserver, a list end to end
        },
    }
    assert lab.get(*VM).plain["initialization"]["userAccount"]["keys"][0].startswith("ssh-ed25519 AAAA")


def test_vm_is_imported_from_the_download(lab: Run) -> None:
    vm, image = lab.get(*VM), lab.get(*IMAGE)
    assert image.urn in vm.dependencies
    assert vm.plain["disks"][0]["importFrom"] == IMAGE_FILE_ID


def test_everything_proxmox_goes_through_the_explicit_provider(lab: Run) -> None:
    provider = lab.get(*PROXMOX)
    assert provider.plain == {
        "endpoint": "https://192.168.0.8:8006/",
        "insecure": "true",  # provider settings travel as strings
        "apiToken": f"pulumi@pve!lab-mgmt={DUMMY_SECRETS['proxmoxApiTokenSecret']}",
    }
    for key in (VM, IMAGE):
        assert lab.get(*key).provider.startswith(provider.urn + "::")


def test_api_token_is_secret_wherever_it_appears(lab: Run) -> None:
    assert set(lab.get(*PROXMOX).inputs["apiToken"]) == {SECRET}
    for resource in lab.resources.values():
        assert not contains_plain(resource.inputs, DUMMY_SECRETS["proxmoxApiTokenSecret"]), resource.name
    for value, secret in lab.outputs.values():
        assert secret or DUMMY_SECRETS["proxmoxApiTokenSecret"] not in str(value)


def test_vm_is_protected_and_ignores_a_new_image(lab: Run) -> None:
    vm = lab.get(*VM)
    assert vm.protect is True
    assert vm.plain["protection"] is True
    assert vm.ignore_changes == ["cdrom", "disks[0].importFrom", "disks[0].speed"]
    # The VMID is fixed: a deliberate rebuild must delete the old VM first.
    assert vm.delete_before_replace is True


def test_the_disk_sets_no_speed_limits_and_leaves_the_providers_zero_default_uncompared(lab: Run) -> None:
    """The provider defaults a disk's speed to a block of zeros but reads a disk without limits
    back with none: compared, that block would send the disk to Proxmox on every run (found by
    tests/test_box_vm.py); whatever the run, the program keeps it out of the diff."""
    assert "speed" not in lab.get(*VM).plain["disks"][0]
    for config in ({}, UNPROTECTED, {**REBUILD, **NEXT_IMAGE}):
        assert "disks[0].speed" in run_program(config).get(*VM).ignore_changes


def test_a_second_run_registers_identical_inputs(lab: Run) -> None:
    assert changed(lab, run_program()) == set()


def test_bumping_the_image_changes_the_download_only(lab: Run) -> None:
    bumped = run_program(NEXT_IMAGE)
    assert changed(lab, bumped) == {IMAGE}
    assert bumped.get(*IMAGE).plain["fileName"] == "noble-server-cloudimg-amd64-20261020.qcow2"


def test_lifting_protection_touches_the_vm_in_place_and_unlocks_the_cluster_objects() -> None:
    """The same switch unlocks what lives on the VM (releases, namespaces, provider CRs), so that
    a deliberate rebuild can replace them; they stay retained on delete. (A workload cluster's
    objects keep their own `protected`: test_workload_cluster.py.)"""
    alone: dict[str, object] = {"workloadClusters": []}
    before, after = run_program(alone), run_program({**UNPROTECTED, **alone})
    unlocked = {key for key, resource in before.resources.items() if resource.protect} - {VM}
    assert unlocked
    assert changed(before, after) == {VM} | unlocked
    for key in unlocked:
        assert after.get(*key).protect is False
        assert after.get(*key).inputs == before.get(*key).inputs
        assert after.get(*key).retain_on_delete is True
    vm = after.get(*VM)
    assert (vm.protect, vm.plain["protection"]) == (False, False)
    assert vm.ignore_changes == ["cdrom", "disks[0].importFrom", "disks[0].speed"]


def test_a_new_image_never_replaces_the_vm_unless_a_rebuild_is_allowed(lab: Run) -> None:
    assert lab.get(*VM).replace_on_changes == []
    assert replaced(lab, run_program(NEXT_IMAGE)) == set()
    assert replaced(run_program(UNPROTECTED), run_program({**UNPROTECTED, **NEXT_IMAGE})) == set()


def test_a_deliberate_rebuild_replaces_the_vm_from_the_new_image() -> None:
    """The provider reads a disk's import source only at creation; changing it in place would
    send Proxmox nothing. The rebuild must therefore be a replacement."""
    unprotected = run_program(UNPROTECTED)
    rebuilt = run_program({**REBUILD, **NEXT_IMAGE})
    vm = rebuilt.get(*VM)
    assert vm.ignore_changes == ["cdrom", "disks[0].speed"]
    assert vm.replace_on_changes == ["disks[0].importFrom", *REACH]
    assert vm.protect is False
    assert vm.plain["disks"][0]["importFrom"] == "local:import/noble-server-cloudimg-amd64-20261020.qcow2"
    assert replaced(unprotected, rebuilt) == {VM}
    assert {VM, IMAGE} <= changed(unprotected, rebuilt)


# What the last deployment of a lab left, as the next run reads it back.
DEPLOYED = {"vmAddress": "192.168.4.21", "kubeconfig": "..."}


@pytest.mark.parametrize(
    "deployed",
    [{**DEPLOYED, "vmProtected": True}, DEPLOYED],
    ids=["deployed-protected", "deployed-before-the-output-existed"],
)
def test_a_rebuild_is_refused_unless_an_earlier_run_lifted_the_locks(deployed: dict[str, Any]) -> None:
    """components.settings sees one config; the guard needs what was deployed: vmProtected=false and
    vmRebuildFromImage=true set together, on a protected VM, must not replace it."""
    record = Run()
    with pytest.raises(RebuildRefusedError, match="lab-mgmt:vmRebuildFromImage: true needs vmProtected=false applied"):
        run_program({**REBUILD, **NEXT_IMAGE}, previous_outputs=deployed, record=record)
    assert VM not in record.names()


def test_a_rebuild_goes_ahead_after_a_run_that_lifted_the_locks() -> None:
    lifted = run_program(UNPROTECTED)
    assert lifted.outputs["vmProtected"] == (False, False)
    rebuilt = run_program({**REBUILD, **NEXT_IMAGE}, previous_outputs={**DEPLOYED, "vmProtected": False})
    assert rebuilt.get(*VM).plain["protection"] is False
    assert replaced(lifted, rebuilt) == {VM}


def test_the_deployed_protection_is_a_stack_output(lab: Run) -> None:
    assert lab.outputs["vmProtected"] == (True, False)


def test_an_adopted_vm_without_proxmoxs_lock_is_recorded_protected_so_one_run_cannot_rebuild_it() -> None:
    """The playbook's VM has no delete lock, and adoption keeps it so (until adoption.md step 8
    sets it): the record is the lock or the setting, so the guard still needs two runs."""
    adopted = run_program(
        {"adopt": True, "capmoxExistingSecret": "capmox-variables"}, live_outputs={"mgmt-vm": {"protection": False}}
    )
    assert adopted.outputs["vmProtected"] == (True, False)
    with pytest.raises(RebuildRefusedError, match="lab-mgmt:vmRebuildFromImage: true needs vmProtected=false applied"):
        run_program(
            {**REBUILD, **NEXT_IMAGE}, previous_outputs={**DEPLOYED, "vmProtected": adopted.outputs["vmProtected"][0]}
        )


def test_allowing_a_rebuild_without_a_new_image_replaces_nothing() -> None:
    assert replaced(run_program(UNPROTECTED), run_program(REBUILD)) == set()


def _host_command_triggers(run: Run) -> list[Any]:
    host_ready: Resource = run.get("command:remote:Command", "mgmt-host-ready")
    return list(host_ready.plain["triggers"])


def test_instance_key_names_this_vm_instance(lab: Run) -> None:
    assert _host_command_triggers(lab) == ["201/BC:24:11:4A:00:01"]
    assert _host_command_triggers(run_program(vm_mac="BC:24:11:4A:00:02")) == ["201/BC:24:11:4A:00:02"]
