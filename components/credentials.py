"""Both Proxmox API tokens proven at preview: accepted, and holding the privileges they need.

The CAPMOX token is used by nothing until the first workload cluster is built, so a typo or a
missing privilege would otherwise surface weeks later. The proxmoxve provider has no data source
or function that reports a token's permissions, so this asks the API itself: one
`GET /access/permissions` per token, bounded in time, honouring `proxmoxInsecure`. No message
ever contains a token secret.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pulumi

from components import proxmox_api
from components.settings import PROJECT, Settings

ROOT_PATH = "/"
# What every check made at preview against the Proxmox API says when it cannot ask it.
SKIP_THE_CHECK = f"set {PROJECT}:skipCredentialsCheck true to skip this check"

Permissions = Mapping[str, Mapping[str, int]]
"""Path -> privilege -> propagate flag, as `GET /access/permissions` answers for the caller."""
PermissionsReader = Callable[..., Permissions]

# What this program's token needs: the role the README creates, less VM.Monitor, which Proxmox
# VE 9 dropped (its agent privileges are VM.GuestAgent.*), so neither is required here. Each is
# required on the path where Proxmox checks it, so that a role granted on `/` without propagation,
# which holds on `/` alone, is caught here and not by a 403 halfway through a run.
VM_PRIVILEGES = (
    *("VM.Allocate", "VM.Audit", "VM.Clone", "VM.Config.CDROM", "VM.Config.Cloudinit", "VM.Config.CPU"),
    *("VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options"),
    *("VM.Console", "VM.Migrate", "VM.PowerMgmt"),
)
# The disk and the cloud-init drive are allocated on the disk storage; the image is downloaded to,
# listed on and removed from the image storage.
DISK_STORAGE_PRIVILEGES = ("Datastore.AllocateSpace", "Datastore.Audit")
IMAGE_STORAGE_PRIVILEGES = ("Datastore.Allocate", "Datastore.AllocateTemplate", "Datastore.Audit")
NODE_PRIVILEGES = ("Sys.Audit", "Sys.Console", "Sys.Modify")
# Proxmox checks a URL download (query-url-metadata, download-url) against Sys.Audit and
# Sys.Modify on `/` itself.
ROOT_PRIVILEGES = ("Pool.Audit", "Sys.Audit", "Sys.Modify")
BRIDGE_PRIVILEGES = ("SDN.Use",)
PROGRAM_PRIVILEGES = tuple(
    sorted(
        {
            *VM_PRIVILEGES,
            *DISK_STORAGE_PRIVILEGES,
            *IMAGE_STORAGE_PRIVILEGES,
            *NODE_PRIVILEGES,
            *ROOT_PRIVILEGES,
            *BRIDGE_PRIVILEGES,
        }
    )
)

# CAPMOX's "Proxmox RBAC with least privileges" (cluster-api-provider-proxmox,
# docs/advanced-setups.md): Sys.Audit on `/`; PVEVMAdmin on its VM pool, PVETemplateUser on its
# template pool, PVESDNUser on its bridge, PVEDatastoreAdmin on the cloud-init ISO storage and
# Datastore.AllocateSpace on the disk storage. Those paths are the owner's choice, so the
# privileges of those roles that CAPMOX uses are required on some path, Sys.Audit on `/`; where a
# workload cluster's template decides the path, components.clone_sources asks with the token
# itself: VM.Clone on `/vms/<templateVmId>`, and the shared flag of the template's storages, which
# the storage listing shows where the token holds Datastore.Audit or Datastore.AllocateSpace.
# Datastore.Allocate: CAPMOX deletes each VM's cloud-init ISO from its storage once the VM has
# booted (pkg/proxmox/goproxmox/api_client.go UnmountCloudInitISO; pve-storage's content DELETE).
CAPMOX_ROOT_PRIVILEGES = ("Sys.Audit",)
CAPMOX_PRIVILEGES = (
    *("VM.Allocate", "VM.Audit", "VM.Clone", "VM.PowerMgmt", "VM.Config.CDROM", "VM.Config.Cloudinit"),
    *("VM.Config.CPU", "VM.Config.Disk", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options"),
    *("SDN.Use", "Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit"),
)
# CAPMOX waits for each new VM's guest agent and asks it for cloud-init's status (the agent's
# get-osinfo, exec and exec-status; internal/service/vmservice/vm.go checkCloudInitStatus, with
# the cluster template's default checks): VM.Monitor on Proxmox VE 8; on 9, which has no
# VM.Monitor, VM.GuestAgent.Unrestricted (exec; qemu-server src/PVE/API2/Qemu/Agent.pm). Either
# holds; without one, every Machine waits on its VM for ever.
CAPMOX_GUEST_AGENT = ("VM.Monitor", "VM.GuestAgent.Unrestricted")


class CredentialsError(pulumi.RunError):
    """A token is rejected, lacks privileges, or cannot be checked (a RunError: the CLI shows the
    message alone, with no traceback)."""


class TokenRejectedError(CredentialsError):
    """The API answered 401: unknown token id, wrong secret, or an expired or disabled token."""


@dataclass(frozen=True)
class TokenCheck:
    """One token and what it must hold."""

    secret_key: str
    """The config key of its secret: what the user fixes."""
    token_id: str
    token_secret: str
    on_paths: Mapping[str, tuple[str, ...]]
    """Path -> the privileges that must hold there."""
    anywhere: tuple[str, ...] = ()
    any_of_anywhere: tuple[tuple[str, ...], ...] = ()
    """Groups of privileges of which one must hold on some path: a privilege that Proxmox VE 9
    renamed, by its names on each version."""


def read_permissions(endpoint: str, token_id: str, token_secret: str, *, insecure: bool) -> Permissions:
    """The token's effective permissions on every path, from the API at `endpoint`."""
    try:
        data = proxmox_api.get(proxmox_api.Token(endpoint, token_id, token_secret, insecure), "access/permissions")
    except proxmox_api.ApiCallError as error:
        if error.status == 401:
            raise TokenRejectedError(f"{endpoint} rejected token {token_id}") from None
        if error.status is not None:
            raise CredentialsError(
                f"{endpoint} answered HTTP {error.status} to the permissions call for {token_id}"
            ) from None
        raise CredentialsError(f"cannot check token {token_id} at {endpoint}: {error.message}") from None
    if not isinstance(data, dict):
        raise CredentialsError(f"{endpoint} answered the permissions call for {token_id} without a data object")
    return data


def holds(permissions: Permissions, path: str, privilege: str) -> bool:
    """Whether `privilege` holds on `path`. The answer lists the effective privileges on `/`, a
    few top-level paths and every path with an ACL, each with its propagate flag; the deepest of
    them at or above `path` decides, and above `path` only a propagated privilege reaches it."""
    parts = path.strip("/").split("/") if path != ROOT_PATH else []
    for depth in range(len(parts), -1, -1):
        ancestor = "/" + "/".join(parts[:depth])
        if ancestor in permissions:
            flag = permissions[ancestor].get(privilege)
            return flag is not None and (ancestor == path or bool(flag))
    return False


def missing_privileges(permissions: Permissions, check: TokenCheck) -> list[str]:
    anywhere = {privilege for privileges in permissions.values() for privilege in privileges}
    missing = [
        f"{privilege} on {path}"
        for path, privileges in check.on_paths.items()
        for privilege in privileges
        if not holds(permissions, path, privilege)
    ]
    missing += [privilege for privilege in check.anywhere if privilege not in anywhere]
    missing += [
        f"{' or '.join(group)} (by its name on Proxmox VE 8 or 9)"
        for group in check.any_of_anywhere
        if not anywhere.intersection(group)
    ]
    return missing


def program_paths(settings: Settings) -> dict[str, tuple[str, ...]]:
    """Where Proxmox checks each privilege of this program's token, for these settings."""
    bridge = f"/sdn/zones/localnetwork/{settings.vm.bridge}"
    if settings.vm.vlan_tag is not None:
        bridge += f"/{settings.vm.vlan_tag}"
    paths: dict[str, tuple[str, ...]] = {}
    for path, privileges in (
        (ROOT_PATH, ROOT_PRIVILEGES),
        (f"/nodes/{settings.proxmox.node}", NODE_PRIVILEGES),
        (f"/vms/{settings.vm.vm_id}", VM_PRIVILEGES),
        (f"/storage/{settings.vm.disk_storage}", DISK_STORAGE_PRIVILEGES),
        (f"/storage/{settings.image.storage}", IMAGE_STORAGE_PRIVILEGES),
        (bridge, BRIDGE_PRIVILEGES),
    ):
        # One storage can be both: it then needs both sets.
        paths[path] = tuple(dict.fromkeys((*paths.get(path, ()), *privileges)))
    return paths


def token_checks(settings: Settings) -> tuple[TokenCheck, TokenCheck]:
    return (
        TokenCheck(
            "proxmoxApiTokenSecret",
            settings.proxmox.api_token_id,
            settings.proxmox.api_token_secret,
            on_paths=program_paths(settings),
        ),
        TokenCheck(
            "capmoxTokenSecret",
            settings.cluster_api.capmox_token_id,
            settings.cluster_api.capmox_token_secret,
            on_paths={ROOT_PATH: CAPMOX_ROOT_PRIVILEGES},
            anywhere=CAPMOX_PRIVILEGES,
            any_of_anywhere=(CAPMOX_GUEST_AGENT,),
        ),
    )


def verify_tokens(settings: Settings) -> None:
    """One API call per token, both at once (each is a round trip to the API that the run waits
    on before it registers anything); every problem of both tokens in one message, in token order."""
    checks = token_checks(settings)
    with ThreadPoolExecutor(max_workers=len(checks)) as pool:
        found = list(pool.map(lambda check: _problem(settings, check), checks))
    problems = [problem for problem in found if problem is not None]
    if problems:
        raise CredentialsError("Proxmox API tokens not usable:\n  " + "\n  ".join(problems))


def _problem(settings: Settings, check: TokenCheck) -> str | None:
    """What is wrong with one token, or None."""
    where = f"{PROJECT}:{check.secret_key} (token {check.token_id})"
    try:
        permissions = read_permissions(
            settings.proxmox.endpoint, check.token_id, check.token_secret, insecure=settings.proxmox.insecure
        )
    except TokenRejectedError:
        return f"{where}: rejected by {settings.proxmox.endpoint}; check the token id and its secret"
    except CredentialsError as error:
        return f"{where}: {error} ({SKIP_THE_CHECK})"
    missing = missing_privileges(permissions, check)
    return f"{where}: lacks {', '.join(missing)}" if missing else None
