"""Where each workload cluster's workers are cloned from, proven at preview: its `sourceNode` and
every `allowedNodes` entry are nodes of the Proxmox VE cluster, its `templateVmId` is a template on
`sourceNode` that CAPMOX's token may clone, and a template cloned to another node has its disks on
shared storage.

CAPMOX checks none of it, and each would surface only when the autoscaler first adds a worker,
perhaps weeks later. Its scheduler asks each allowed node's memory and stops at the first
failure (internal/service/scheduler/vmscheduler.go), so one name that is not a node stops every
scale-up; Proxmox VE full-clones any VM, so a `templateVmId` naming an ordinary VM gives workers
whatever that VM's disk holds, a running VM's included; the clone needs VM.Clone on the template
itself, which the token check (components.credentials) proves only somewhere, a pool without the
template perhaps; and with `allowedNodes` set CAPMOX clones with `target` (v0.9.0
internal/service/vmservice/vm.go:473-476), which qemu-server refuses for a node other than the
source unless every volume of the template is on shared storage (8.3.12 PVE/API2/Qemu.pm clone_vm,
:3953-3955 and :4006, "can't clone VM to node '$target' (VM uses local storage)").

The calls are made with CAPMOX's own token, as CAPMOX will clone with it: one `GET
/cluster/status` (Sys.Audit on `/`, which components.credentials requires of it); per template one
`GET /nodes/{sourceNode}/qemu/{templateVmId}/config` (VM.Audit on the template, which CAPMOX needs
to read it before cloning it: go-proxmox's Node.VirtualMachine) and one `GET
/access/permissions?path=/vms/{templateVmId}` (the token's own privileges there, pool-derived ones
included, which any token may read); and, for a source node from which a cluster may clone to
another, one `GET /nodes/{sourceNode}/storage` (each storage's `shared` flag, listing those the
token holds Datastore.Audit or Datastore.AllocateSpace on, the latter of which the clone needs on
each disk's storage). They follow the token check, whose message comes first.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping

import pulumi

from components import proxmox_api
from components.credentials import SKIP_THE_CHECK
from components.settings import PROJECT, Settings, WorkloadCluster

# qemu-server's drive keys (8.3.12 PVE/QemuServer/Drive.pm valid_drive_names :650-658), the
# volumes a clone takes; `unusedN` it leaves behind.
_DRIVE = re.compile(r"(?:ide|sata|scsi|virtio)\d+|efidisk0|tpmstate0")
# pve-storage's volume ID, `<storage>:<volume>` (8.3.6 src/PVE/Storage/Plugin.pm parse_volume_id
# :396-404); `none` (an empty drive) and `cdrom` (the host's drive) name no storage.
_VOLUME = re.compile(r"([a-z][a-z0-9\-_.]*[a-z0-9]):.+", re.IGNORECASE)


class CloneSourceError(pulumi.RunError):
    """A workload cluster's node or template is not what CAPMOX can clone from."""


class _Site:
    """What CAPMOX's token reads of the Proxmox VE cluster, each read once however many clusters
    share it; a read that fails is a problem, named under the setting it was made for."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.token = proxmox_api.Token(
            settings.proxmox.endpoint,
            settings.cluster_api.capmox_token_id,
            settings.cluster_api.capmox_token_secret,
            settings.proxmox.insecure,
        )
        self._templates: dict[tuple[str, int], Mapping[str, object] | str] = {}
        self._clone_refusals: dict[int, str | None] = {}
        self._shared: dict[str, Mapping[str, bool] | str] = {}

    def template(self, node: str, vmid: int) -> Mapping[str, object] | str:
        """The template's config, or why it cannot be cloned."""
        if (node, vmid) not in self._templates:
            self._templates[(node, vmid)] = self._template(node, vmid)
        return self._templates[(node, vmid)]

    def clone_refusal(self, vmid: int) -> str | None:
        if vmid not in self._clone_refusals:
            self._clone_refusals[vmid] = self._clone_refusal(vmid)
        return self._clone_refusals[vmid]

    def shared(self, node: str) -> Mapping[str, bool] | str:
        """Whether each storage the token sees from `node` is shared, or why it is not known."""
        if node not in self._shared:
            self._shared[node] = self._storages(node)
        return self._shared[node]

    def _template(self, node: str, vmid: int) -> Mapping[str, object] | str:
        path = f"nodes/{proxmox_api.segment(node)}/qemu/{vmid}/config"
        try:
            config = proxmox_api.get(self.token, path)
        except proxmox_api.ApiCallError as error:
            if error.status == 500 and "does not exist" in error.message:
                return f"there is no VM {vmid} on node {node}"
            if error.status == 403:
                return (
                    f"{PROJECT}:capmoxTokenId {self.token.token_id} may not read VM {vmid} "
                    f"(VM.Audit on /vms/{vmid}), which CAPMOX reads before it clones it"
                )
            return _unanswered(self.settings, path, error)
        if isinstance(config, Mapping) and _is_template(config):
            return config
        name = config.get("name", "") if isinstance(config, Mapping) else ""
        return (
            f"VM {vmid}{f' ({name})' if name else ''} on node {node} is not a template, and CAPMOX would clone it "
            "as it is: name the template's VMID"
        )

    def _clone_refusal(self, vmid: int) -> str | None:
        """pve-access-control 8.2.2 src/PVE/API2/AccessControl.pm `permissions` (:462-521): with
        `path`, `{path: {privilege: propagate}}` for the caller itself (`user => 'all'`), the path
        present even when nothing holds there (:510-516); what holds is what
        RPCEnvironment::permissions computes for a check on that path, a pool's ACL included for the
        pool's members (src/PVE/RPCEnvironment.pm :135-175, :37-80)."""
        acl_path = f"/vms/{vmid}"
        path = "access/permissions?" + urllib.parse.urlencode({"path": acl_path})
        try:
            answer = proxmox_api.get(self.token, path)
        except proxmox_api.ApiCallError as error:
            return _unanswered(self.settings, path, error)
        held = answer.get(acl_path) if isinstance(answer, Mapping) else None
        if isinstance(held, Mapping) and "VM.Clone" in held:
            return None
        return (
            f"{PROJECT}:capmoxTokenId {self.token.token_id} lacks VM.Clone on {acl_path}, which CAPMOX clones "
            "every worker from (held on a pool, it reaches only the pool's VMs)"
        )

    def _storages(self, node: str) -> Mapping[str, bool] | str:
        """pve-storage 8.3.6 src/PVE/API2/Storage/Status.pm `index` (:62-214): every storage the
        token holds Datastore.Audit or Datastore.AllocateSpace on, `shared` as configured or
        implied by its type (src/PVE/Storage.pm storage_info :1323)."""
        path = f"nodes/{proxmox_api.segment(node)}/storage"
        try:
            listed = proxmox_api.get(self.token, path)
        except proxmox_api.ApiCallError as error:
            return _unanswered(self.settings, path, error)
        entries = listed if isinstance(listed, list) else []
        return {
            str(entry["storage"]): bool(entry.get("shared"))
            for entry in entries
            if isinstance(entry, dict) and "storage" in entry
        }


def verify_clone_sources(settings: Settings) -> None:
    """Every problem of every workload cluster in one message; an offline node is a warning, as
    a node down for maintenance is not a setting to fix. No call without a workload cluster, or
    with skipCredentialsCheck (a laptop that cannot reach the API at preview)."""
    clusters = settings.workload.clusters
    if not clusters or settings.proxmox.skip_credentials_check:
        return
    site = _Site(settings)
    try:
        online = _nodes(proxmox_api.get(site.token, "cluster/status"))
    except proxmox_api.ApiCallError as error:
        raise CloneSourceError(_unanswered(settings, "cluster/status", error)) from None
    listed = f"its nodes: {', '.join(sorted(online))}" if online else "it lists no node"
    problems: list[str] = []
    for cluster in clusters:
        where = f"{PROJECT}:{cluster.key}"
        named = [("sourceNode", cluster.source_node), *(("allowedNodes", name) for name in cluster.allowed_nodes)]
        for key, name in named:
            if name not in online:
                problems.append(f"{where}.{key}: {name} is not a node of the Proxmox VE cluster ({listed})")
            elif not online[name]:
                pulumi.log.warn(f"{where}.{key}: node {name} is offline; CAPMOX adds no worker until it is back")
        if online.get(cluster.source_node):
            problems += _template_problems(cluster, where, site, online)
    if problems:
        raise CloneSourceError("workload clusters cannot be cloned as declared:\n  " + "\n  ".join(problems))


def _template_problems(cluster: WorkloadCluster, where: str, site: _Site, online: Mapping[str, bool]) -> list[str]:
    """What stops CAPMOX cloning the template: no template, no VM.Clone on it, and for each allowed
    node other than the source (offline ones too: they come back) a volume on local storage."""
    source, vmid = cluster.source_node, cluster.template_vm_id
    config = site.template(source, vmid)
    if isinstance(config, str):
        return [f"{where}.templateVmId: {config}"]
    refusal = site.clone_refusal(vmid)
    problems = [f"{where}.templateVmId: {refusal}"] if refusal else []
    # qemu-server drops a `target` that is the source node itself (Qemu.pm :3953-3955).
    targets = sorted({node for node in cluster.allowed_nodes if node != source and node in online})
    storages = _storages_of(config)
    if not targets or not storages:
        return problems
    shared = site.shared(source)
    if isinstance(shared, str):
        return [*problems, f"{where}.allowedNodes: {shared}"]
    local = [storage for storage in storages if shared.get(storage) is False]
    refused = "can't clone VM to node '{}' (VM uses local storage)"
    problems += [
        f"{where}.allowedNodes: CAPMOX clones to node {node} from {source}, which Proxmox VE refuses while template "
        f"{vmid} has volumes on local storage {', '.join(local)} ({refused.format(node)}): move them to shared "
        f"storage, or leave {node} out"
        for node in targets
        if local
    ]
    problems += [
        f"{where}.allowedNodes: {PROJECT}:capmoxTokenId {site.token.token_id} may not see storage {storage} of "
        f"template {vmid} (Datastore.Audit or Datastore.AllocateSpace on /storage/{storage}; the clone needs the "
        "latter on a disk's storage), so whether a clone to another node may take it is unknown"
        for storage in storages
        if storage not in shared
    ]
    return problems


def _nodes(status: object) -> dict[str, bool]:
    """Each node's name and whether it is online, from `GET /cluster/status` (pve-manager
    PVE/API2/Cluster.pm get_status: one `node` entry per member, a node in no cluster its own)."""
    entries = status if isinstance(status, list) else []
    return {
        str(entry["name"]): bool(entry.get("online"))
        for entry in entries
        if isinstance(entry, dict) and entry.get("type") == "node" and "name" in entry
    }


def _is_template(config: Mapping[str, object]) -> bool:
    """qemu-server's config answers `template: 1` for a template and leaves the key out otherwise."""
    return str(config.get("template", "0")) == "1"


def _storages_of(config: Mapping[str, object]) -> list[str]:
    """The storages of the template's volumes, a CD's and the cloud-init drive's included: each
    counts in clone_vm's shared-storage check (Qemu.pm $check_storage_access_clone, :221-259)."""
    storages = set()
    for key, value in config.items():
        volume = str(value).split(",", 1)[0].removeprefix("file=")
        if _DRIVE.fullmatch(key) and (found := _VOLUME.fullmatch(volume)):
            storages.add(found[1])
    return sorted(storages)


def _unanswered(settings: Settings, path: str, error: proxmox_api.ApiCallError) -> str:
    answer = f"HTTP {error.status} {error.message}" if error.status is not None else error.message
    return (
        f"cannot check the workload clusters' nodes and templates at {settings.proxmox.endpoint} "
        f"(GET {path}: {answer}); {SKIP_THE_CHECK}"
    )
