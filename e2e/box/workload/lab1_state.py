"""What a takeover of lab1 must leave alone, read from the live clusters (issue 31): the objects
clusterctl rendered and kubectl applied, what Cluster API made from them (MachineSets, Machines,
their KubeadmConfigs and ProxmoxMachines), lab1's Nodes and the Helm release records there.

    before = snapshot(mgmt, lab1)          # identities and versions, as JSON
    ... a pulumi up ...
    changed(before, snapshot(mgmt, lab1))  # what appeared, went or was rewritten
    writes(mgmt, mark, names)              # who wrote which of them after the audit log's mark

and `settings_from_live(objects)`: the values clusterctl used, read back from the live objects into
a `workloadClusters` entry, key by key as docs/adoption.md's table maps them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e.box.scenarios import WRITES
from e2e.box.workload.lab1_reads import LAB1, get
from e2e.engine.control_plane import ControlPlane

NS, CLUSTER = LAB1.namespace, LAB1.name
# The seven objects clusterctl renders from CAPMOX's default template, as `kubectl get` names them.
OBJECTS = (
    ("cluster", CLUSTER),
    ("proxmoxcluster", CLUSTER),
    ("kubeadmcontrolplane", f"{CLUSTER}-control-plane"),
    ("proxmoxmachinetemplate", f"{CLUSTER}-control-plane"),
    ("machinedeployment", f"{CLUSTER}-workers"),
    ("proxmoxmachinetemplate", f"{CLUSTER}-worker"),
    ("kubeadmconfigtemplate", f"{CLUSTER}-worker"),
)
# What Cluster API and the providers made from them, on the management cluster.
MADE = ("machinesets", "machines", "kubeadmconfigs", "proxmoxmachines")


def objects(mgmt: ControlPlane) -> dict[str, Any]:
    """The seven objects as they are, by `kind/name`."""
    return {f"{kind}/{name}": get(mgmt, kind, name) for kind, name in OBJECTS}


def identity(item: dict[str, Any]) -> dict[str, Any]:
    meta = item["metadata"]
    return {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"], "generation": meta.get("generation")}


def snapshot(mgmt: ControlPlane, lab1: Path) -> dict[str, dict[str, Any]]:
    """Every object a takeover must leave alone, by `what/name`: its uid, resourceVersion and
    generation (the seven; what was made from them; lab1's Nodes; Helm's release records)."""
    found: dict[str, dict[str, Any]] = {}
    for name, item in objects(mgmt).items():
        if item is not None:
            found[name] = identity(item)
    for kind in MADE:
        for item in (get(mgmt, kind) or {}).get("items", []):
            found[f"{kind}/{item['metadata']['name']}"] = identity(item)
    for item in (get(mgmt, "nodes", kubeconfig=lab1) or {}).get("items", []):
        # A Node's resourceVersion moves with every status the kubelet posts: its uid says whether
        # it is the same Node.
        found[f"nodes/{item['metadata']['name']}"] = {"uid": item["metadata"]["uid"]}
    for item in (get(mgmt, "secrets", namespace="kube-system", selector="owner=helm", kubeconfig=lab1) or {}).get(
        "items", []
    ):
        found[f"helm-releases/{item['metadata']['name']}"] = identity(item)
    return found


def changed(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """What appeared, what went (or came back as another uid), and what was rewritten (a new
    resourceVersion; `generation` says whether its spec changed: `name generation a->b`)."""
    rewritten = []
    for name in sorted(set(before) & set(after)):
        old, new = before[name], after[name]
        if old["uid"] != new["uid"]:
            continue
        if old.get("resourceVersion") != new.get("resourceVersion"):
            rewritten.append(f"{name} generation {old.get('generation')}->{new.get('generation')}")
    return {
        "appeared": sorted(set(after) - set(before)),
        "gone": sorted(n for n in before if n not in after or after[n]["uid"] != before[n]["uid"]),
        "rewritten": rewritten,
    }


def writes(
    cluster: ControlPlane, mark: int, resources: tuple[str, ...] | None = None, *, until: int | None = None
) -> list[dict[str, Any]]:
    """Each write after the audit log's `mark` (and before `until`; server-side dry runs left out) to objects of
    `resources` (plural names; None: to the seven objects and what was made from them): who, verb,
    resource, name, the patch sent, and the managed fields' owner it came as."""
    kinds = resources or tuple({f"{kind}s" for kind, _ in OBJECTS} | set(MADE))
    found = []
    for event in cluster.audit()[mark:until]:
        ref = event.get("objectRef", {})
        if (
            event["verb"] not in WRITES
            or ref.get("resource") not in kinds
            or "dryRun=All" in event.get("requestURI", "")
        ):
            continue
        found.append(
            {
                "user": event["user"]["username"],
                "verb": event["verb"],
                "resource": ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else ""),
                "name": ref.get("name", ""),
                "code": event.get("responseStatus", {}).get("code"),
                "sent": event.get("requestObject") if event["verb"] == "patch" else None,
                "uri": event.get("requestURI", ""),
            }
        )
    return found


def _template(live: dict[str, Any], role: str) -> dict[str, Any]:
    spec: dict[str, Any] = live[f"proxmoxmachinetemplate/{CLUSTER}-{role}"]["spec"]["template"]["spec"]
    return spec


def _sizing(spec: dict[str, Any]) -> dict[str, int]:
    return {
        "sockets": spec["numSockets"],
        "cores": spec["numCores"],
        "memoryMib": spec["memoryMiB"],
        "diskGib": spec["disks"]["bootVolume"]["sizeGb"],
    }


def _vip_interface(kcp: dict[str, Any]) -> str:
    """kube-vip's `vip_interface` in the control plane's static pod file (VIP_NETWORK_INTERFACE)."""
    for file in kcp["spec"]["kubeadmConfigSpec"].get("files", []):
        if file["path"] == "/etc/kubernetes/manifests/kube-vip.yaml":
            lines = file["content"].splitlines()
            for index, line in enumerate(lines):
                if line.strip() == "- name: vip_interface":
                    value: str = lines[index + 1].split("value:", 1)[1]
                    return value.strip().strip('"')
    raise KeyError("the KubeadmControlPlane has no kube-vip manifest with a vip_interface")


def settings_from_live(live: dict[str, Any]) -> dict[str, Any]:
    """The `workloadClusters` entry the live objects (`objects(mgmt)`) say, key by key as
    docs/adoption.md's table maps them; `vlan` only where the machines have one. The workers'
    min and max are the owner's choice: not in the objects (clusterctl's template has no
    autoscaler annotations)."""
    cluster, proxmox = live[f"cluster/{CLUSTER}"], live[f"proxmoxcluster/{CLUSTER}"]["spec"]
    kcp = live[f"kubeadmcontrolplane/{CLUSTER}-control-plane"]
    worker, control_plane = _template(live, "worker"), _template(live, "control-plane")
    devices = worker["network"]["networkDevices"]
    entry: dict[str, Any] = {
        "name": cluster["metadata"]["name"],
        "namespace": cluster["metadata"]["namespace"],
        "kubernetesVersion": kcp["spec"]["version"],
        "controlPlaneEndpoint": proxmox["controlPlaneEndpoint"]["host"],
        "nodeIpRanges": proxmox["ipv4Config"]["addresses"],
        "ipPrefix": proxmox["ipv4Config"]["prefix"],
        "gateway": proxmox["ipv4Config"]["gateway"],
        "dnsServers": proxmox["dnsServers"],
        "allowedNodes": proxmox.get("allowedNodes", []),
        "sshPublicKeys": kcp["spec"]["kubeadmConfigSpec"]["users"][0]["sshAuthorizedKeys"],
        "sourceNode": worker["sourceNode"],
        "templateVmId": worker["templateID"],
        "bootVolumeDevice": worker["disks"]["bootVolume"]["disk"],
        "bridge": devices[0]["bridge"],
        "vipInterface": _vip_interface(kcp),
        "podCidr": cluster["spec"]["clusterNetwork"]["pods"]["cidrBlocks"][0],
        "controlPlane": {"replicas": kcp["spec"]["replicas"], **_sizing(control_plane)},
        "workers": _sizing(worker),
    }
    if "vlan" in devices[0]:
        entry["vlan"] = devices[0]["vlan"]
    return entry
