"""Where each workload cluster's workers are cloned from, proven at preview: its `sourceNode` and
every `allowedNodes` entry are nodes of the Proxmox VE cluster, and its `templateVmId` is a
template on `sourceNode`.

CAPMOX checks neither, and both would surface only when the autoscaler first adds a worker,
perhaps weeks later. Its scheduler asks each allowed node's memory and stops at the first
failure (internal/service/scheduler/vmscheduler.go), so one name that is not a node stops every
scale-up; and Proxmox VE full-clones any VM, so a `templateVmId` naming an ordinary VM gives
workers whatever that VM's disk holds, a running VM's included. The calls are made with CAPMOX's
own token, as CAPMOX will clone with it: one `GET /cluster/status` (Sys.Audit on `/`, which
components.credentials requires of it) and one `GET /nodes/{sourceNode}/qemu/{templateVmId}/config`
per template (VM.Audit on the template, which CAPMOX needs to read it before cloning it:
go-proxmox's Node.VirtualMachine). They follow the token check, whose message comes first.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from components import proxmox_api
from components.credentials import SKIP_THE_CHECK
from components.settings import PROJECT, Settings


class CloneSourceError(pulumi.RunError):
    """A workload cluster's node or template is not what CAPMOX can clone from."""


def verify_clone_sources(settings: Settings) -> None:
    """Every problem of every workload cluster in one message; an offline node is a warning, as
    a node down for maintenance is not a setting to fix. No call without a workload cluster, or
    with skipCredentialsCheck (a laptop that cannot reach the API at preview)."""
    clusters = settings.workload.clusters
    if not clusters or settings.proxmox.skip_credentials_check:
        return
    token = proxmox_api.Token(
        settings.proxmox.endpoint,
        settings.cluster_api.capmox_token_id,
        settings.cluster_api.capmox_token_secret,
        settings.proxmox.insecure,
    )
    try:
        online = _nodes(proxmox_api.get(token, "cluster/status"))
    except proxmox_api.ApiCallError as error:
        raise CloneSourceError(_unanswered(settings, "cluster/status", error)) from None
    listed = f"its nodes: {', '.join(sorted(online))}" if online else "it lists no node"
    problems: list[str] = []
    offline: list[str] = []
    templates: dict[tuple[str, int], str | None] = {}
    for cluster in clusters:
        where = f"{PROJECT}:{cluster.key}"
        named = [("sourceNode", cluster.source_node), *(("allowedNodes", name) for name in cluster.allowed_nodes)]
        for key, name in named:
            if name not in online:
                problems.append(f"{where}.{key}: {name} is not a node of the Proxmox VE cluster ({listed})")
            elif not online[name]:
                offline.append(f"{where}.{key}: node {name} is offline; CAPMOX adds no worker until it is back")
        if not online.get(cluster.source_node):
            continue  # named above: no template can be read there
        source = (cluster.source_node, cluster.template_vm_id)
        if source not in templates:
            templates[source] = _not_a_template(settings, token, *source)
        if templates[source] is not None:
            problems.append(f"{where}.templateVmId: {templates[source]}")
    for warning in offline:
        pulumi.log.warn(warning)
    if problems:
        raise CloneSourceError("workload clusters cannot be cloned as declared:\n  " + "\n  ".join(problems))


def _nodes(status: object) -> dict[str, bool]:
    """Each node's name and whether it is online, from `GET /cluster/status` (pve-manager
    PVE/API2/Cluster.pm get_status: one `node` entry per member, a node in no cluster its own)."""
    entries = status if isinstance(status, list) else []
    return {
        str(entry["name"]): bool(entry.get("online"))
        for entry in entries
        if isinstance(entry, dict) and entry.get("type") == "node" and "name" in entry
    }


def _not_a_template(settings: Settings, token: proxmox_api.Token, node: str, vmid: int) -> str | None:
    path = f"nodes/{proxmox_api.segment(node)}/qemu/{vmid}/config"
    try:
        config = proxmox_api.get(token, path)
    except proxmox_api.ApiCallError as error:
        if error.status == 500 and "does not exist" in error.message:
            return f"there is no VM {vmid} on node {node}"
        if error.status == 403:
            return (
                f"{PROJECT}:capmoxTokenId {token.token_id} may not read VM {vmid} (VM.Audit on /vms/{vmid}), "
                "which CAPMOX reads before it clones it"
            )
        return _unanswered(settings, path, error)
    if not _is_template(config):
        name = config.get("name", "") if isinstance(config, Mapping) else ""
        return (
            f"VM {vmid}{f' ({name})' if name else ''} on node {node} is not a template, and CAPMOX would clone it "
            "as it is: name the template's VMID"
        )
    return None


def _is_template(config: object) -> bool:
    """qemu-server's config answers `template: 1` for a template and leaves the key out otherwise."""
    return isinstance(config, Mapping) and str(config.get("template", "0")) == "1"


def _unanswered(settings: Settings, path: str, error: proxmox_api.ApiCallError) -> str:
    answer = f"HTTP {error.status} {error.message}" if error.status is not None else error.message
    return (
        f"cannot check the workload clusters' nodes and templates at {settings.proxmox.endpoint} "
        f"(GET {path}: {answer}); {SKIP_THE_CHECK}"
    )
