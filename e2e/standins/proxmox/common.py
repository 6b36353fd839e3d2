"""What the Proxmox VE API stand-in's modules share: a request as a handler gets it (`Ask`), an
answer other than 2xx (`ApiError`), the faults a test injects and the VM's guest told of power
changes. It imports none of them, so each of pve_tasks, pve_storage, pve_vms and pve_api_standin
imports only what is below it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Ask:
    user: str
    permissions: Mapping[str, Mapping[str, int]]
    params: dict[str, str]


class ApiError(Exception):
    """An answer other than 2xx, as Proxmox VE gives it: the message is the reason phrase."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Guest(Protocol):
    """The VM's inside, told of each power change by the stand-in (e2e/standins/guest/guest.py)."""

    def start(self, vmid: int, config: dict[str, str]) -> None:
        """The VM starts; `config` is its Proxmox VE config as strings (`ciuser`, `sshkeys` as
        stored: URL-encoded, keys separated by `\\n`; `ipconfig0`, `nameserver`, `net0` with its
        MAC as `virtio=BC:24:11:..,bridge=..`)."""

    def stop(self, vmid: int) -> None:
        """The VM is shut down or stopped."""

    def destroy(self, vmid: int) -> None:
        """The VM is deleted."""

    def agent_interfaces(self, vmid: int) -> list[dict[str, Any]] | None:
        """`network-get-interfaces` as the guest agent answers it, or None when no agent runs."""


@dataclass
class Faults:
    """What a test makes go wrong, as Proxmox VE can."""

    vm_create: str | None = None
    """VM create answers 500 with this message."""
    download: str | None = None
    """A download task ends in error with this exit status."""
