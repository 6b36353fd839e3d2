"""The program's image and VM in the lab in a box: `download.File` and `VmLegacy`
(e2e/box/box_vm_program.py) under the real engine and proxmoxve plugin (pulumi-proxmoxve 8.3.0, wrapping
bpg/terraform-provider-proxmox v0.111.1), against the Proxmox VE API stand-in at the lab's address
in a network namespace of the test's own, the cloud image served by a box-local HTTPS server.
Every call the provider makes must be one the stand-in knows; selected with `pytest -m engine`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.box import scenarios
from e2e.engine.netns import in_new_netns

pytestmark = pytest.mark.engine

WRITES = ("POST", "PUT", "DELETE")
API = "/api2/json"
VM = f"{API}/nodes/pv1-1/qemu/201"
IMAGE_VOLUME = "local:import%2Fnoble-server-cloudimg-amd64-20260926.qcow2"
DOWNLOAD = ["checksum", "checksum-algorithm", "content", "filename", "node", "storage", "url", "verify-certificates"]
# The keys the call map (section 5.2) gives for the program's create body.
CREATE = sorted(
    (
        *("acpi", "agent", "balloon", "bios", "boot", "ciuser", "cores", "cpu", "description", "ide2", "ide3"),
        *("ipconfig0", "keyboard", "memory", "name", "nameserver", "net0", "numa", "onboot", "ostype"),
        *("protection", "scsi0", "scsihw", "serial0", "sockets", "sshkeys", "tablet", "template", "vga", "vmid"),
    )
)


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("vm-lifecycle")
    return in_new_netns("management.vm.vm_lifecycle", str(root), addresses=[scenarios.PROXMOX_ADDRESS], timeout=900)


def writes(run: dict[str, Any]) -> list[list[Any]]:
    return [call for call in run["calls"] if call[0] in WRITES]


def test_every_call_is_one_the_standin_knows(lifecycle: Any) -> None:
    for step in lifecycle["steps"]:
        assert step["rc"] == 0, step
    for name, run in lifecycle["runs"].items():
        assert run["rc"] == 0, (name, run["output"])
    assert lifecycle["unknown"] == []


def test_a_preview_asks_proxmox_nothing(lifecycle: Any) -> None:
    assert lifecycle["runs"]["preview"]["calls"] == []


def test_the_first_up_downloads_the_image_then_creates_resizes_and_starts_the_vm(lifecycle: Any) -> None:
    assert writes(lifecycle["runs"]["first up"]) == [
        ["POST", f"{API}/nodes/pv1-1/storage/local/download-url", DOWNLOAD],
        ["POST", f"{API}/nodes/pv1-1/qemu", CREATE],
        ["PUT", f"{VM}/resize", ["disk", "size"]],
        ["POST", f"{VM}/status/start", ["timeout"]],
    ]


def test_a_second_up_plans_and_sends_nothing(lifecycle: Any) -> None:
    """The provider reads a disk without speed limits back with no speed block, against its own
    default of zeros: components/management_vm.py keeps that block out of the diff, or every run
    would send scsi0 again."""
    assert "speed" not in lifecycle["runs"]["second preview"]["output"]
    assert lifecycle["runs"]["second preview"]["summary"] == {"read": 1, "same": 5}
    assert writes(lifecycle["runs"]["second up"]) == []


def test_more_cores_are_one_config_update_and_no_power_change(lifecycle: Any) -> None:
    assert writes(lifecycle["runs"]["cores"]) == [
        ["PUT", f"{VM}/config", ["cores", "cpu", "delete", "name", "numa", "sockets"]]
    ]


def test_destroy_after_the_protection_is_lifted_shuts_down_and_deletes_the_vm_then_the_image(lifecycle: Any) -> None:
    assert writes(lifecycle["runs"]["unprotect"]) == [["PUT", f"{VM}/config", ["name", "protection"]]]
    assert writes(lifecycle["runs"]["destroy"]) == [
        ["POST", f"{VM}/status/shutdown", ["forceStop", "timeout"]],
        ["DELETE", f"{VM}/", ["destroy-unreferenced-disks", "purge"]],
        ["DELETE", f"{API}/nodes/pv1-1/storage/local/content/{IMAGE_VOLUME}", []],
    ]
