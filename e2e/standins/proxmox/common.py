"""What the Proxmox VE API stand-in's modules share: a request as a handler gets it (`Ask`), an
answer other than 2xx (`ApiError`), Proxmox VE's privilege checks on a request's token
(`require`, `permitted`), the faults a test injects and the VM's guest told of power changes. It
imports none of them, so each of pve_tasks, pve_storage, pve_vms, pve_clone, pve_node and
pve_api_standin imports only what is below it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

ROOT = "root@pam"


@dataclass(frozen=True)
class Ask:
    user: str
    permissions: Mapping[str, Mapping[str, int]]
    """The token's effective ACL as `GET /access/permissions` gives it: path -> privilege ->
    propagate (1: the privilege holds below the path too)."""
    params: dict[str, Any]
    """Query and body parameters as Proxmox VE takes them: strings (a JSON body's numbers and
    booleans as their text, `1`/`0` for booleans), but an array parameter (agent exec's
    `command`) as a list of strings."""
    file: bytes | None = None
    """An upload's file part; its name is the `filename` parameter."""


class ApiError(Exception):
    """An answer other than 2xx, as Proxmox VE gives it: the message is the reason phrase;
    `errors` (a 400's per-parameter messages) goes in the body as PVE::Exception's raise_param_exc
    puts it."""

    def __init__(self, status: int, message: str, errors: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = dict(errors) if errors else None


def param_error(name: str, message: str) -> ApiError:
    """pve-common's raise_param_exc: 400 "Parameter verification failed." naming the parameter."""
    return ApiError(400, "Parameter verification failed.", {name: message})


def permitted(ask: Ask, path: str, privilege: str) -> bool:
    """Whether the token holds `privilege` on `path`: granted there, or on an ancestor with
    propagate set (pve-access-control's PVE::AccessControl::permission); root@pam holds all."""
    if ask.user == ROOT:
        return True
    for granted, privileges in ask.permissions.items():
        if privilege not in privileges:
            continue
        below = granted == "/" or path.startswith(granted.rstrip("/") + "/")
        if path == granted or (below and privileges[privilege]):
            return True
    return False


def permissions_on(ask: Ask, path: str) -> dict[str, int]:
    """pve-access-control's RPCEnvironment::permissions for one path (src/PVE/RPCEnvironment.pm,
    8.2.2, :135-175): each privilege that holds there with its propagate flag, which is the one
    granted on the path itself or 1 when it comes down from an ancestor. The lab has no resource
    pools, so a privilege granted on `/pool/...` reaches no VM or storage."""
    held = {privilege for privileges in ask.permissions.values() for privilege in privileges}
    return {
        privilege: int(ask.permissions.get(path, {}).get(privilege, 1))
        for privilege in sorted(held)
        if permitted(ask, path, privilege)
    }


def require(ask: Ask, path: str, *privileges: str, any_of: bool = False) -> None:
    """RPCEnvironment's `check` (every privilege, naming the first missing) or `check_any` (one of
    them, naming all): 403 "Permission check failed (/vms/101, VM.Clone)" as PVE::Exception's
    raise_perm_exc words it."""
    held = [privilege for privilege in privileges if permitted(ask, path, privilege)]
    if any_of and not held:
        raise ApiError(403, f"Permission check failed ({path}, {'|'.join(privileges)})")
    missing = [privilege for privilege in privileges if privilege not in held]
    if not any_of and missing:
        raise ApiError(403, f"Permission check failed ({path}, {missing[0]})")


class Guest(Protocol):
    """The VM's inside, told of each power change by the stand-in (e2e/standins/guest/guest.py)."""

    def start(self, vmid: int, config: dict[str, str]) -> None:
        """The VM starts; `config` is its Proxmox VE config as strings (`ciuser`, `sshkeys` as
        stored: URL-encoded, keys separated by `\\n`; `ipconfig0`, `nameserver`, `net0` with its
        MAC as `virtio=BC:24:11:..,bridge=..`; `ide0` as `local:iso/user-data-101.iso,media=cdrom`
        once CAPMOX mounted its ISO, whose file `PveApiStandIn.volume_path` gives)."""

    def stop(self, vmid: int) -> None:
        """The VM is shut down or stopped."""

    def destroy(self, vmid: int) -> None:
        """The VM is deleted."""

    def agent_interfaces(self, vmid: int) -> list[dict[str, Any]] | None:
        """`network-get-interfaces` as the guest agent answers it, or None when no agent runs."""

    def agent_osinfo(self, vmid: int) -> dict[str, Any] | None:
        """`get-osinfo` as the guest agent answers it (`id`, `name`, `pretty-name`, `version-id`,
        `kernel-release`, ...), or None when no agent runs."""

    def agent_exec(self, vmid: int, command: list[str], input_data: str) -> dict[str, Any] | None:
        """Runs `command` (program and arguments) with `input_data` on its stdin, as `guest-exec`
        does, and answers how it ended as `guest-exec-status` does once it has, its output
        decoded as Proxmox VE decodes it: `exitcode`, `out-data`, and `err-data` or `signal` if
        any (`{"exitcode": 0, "out-data": "status: done\\n"}`); None when no agent runs."""


@dataclass
class Faults:
    """What a test makes go wrong, as Proxmox VE can."""

    vm_create: str | None = None
    """VM create answers 500 with this message."""
    download: str | None = None
    """A download task ends in error with this exit status."""
    clone_answers_lost: int = 0
    """This many clones are made, their answers lost on the way (a dropped link, a proxy's
    timeout): the connection closes with nothing said, the new VM there."""

    def answer_lost(self, pattern: str) -> bool:
        """Whether the answer to a call of the route `pattern`, done, is lost."""
        lost = pattern.endswith("/clone") and self.clone_answers_lost > 0
        self.clone_answers_lost -= lost
        return lost


def own_permissions(ask: Ask) -> Mapping[str, Mapping[str, int]]:
    """The caller's own effective permissions, which every user and token may read
    (pve-access-control src/PVE/API2/AccessControl.pm, 8.2.2, `permissions` :462-521): the
    whole tree, or with a `path` that path alone, keyed as given and there even when nothing
    holds on it (:510-516)."""
    if path := ask.params.get("path"):
        return {path: permissions_on(ask, path)}
    return ask.permissions
