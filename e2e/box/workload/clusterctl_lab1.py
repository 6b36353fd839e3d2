"""lab1 as clusterctl left it (the owner's journey starts from it: e2e/box/takeover/owners_lab.py): on a
management cluster with the real Cluster API core and the providers Ready, the owner's steps with
the real tools (`left_by_the_owner`):

    clusterctl generate cluster lab1 --from cluster-template.yaml --kubernetes-version v1.35.9 \\
        --target-namespace default --config clusterctl.yaml > lab1.yaml
    kubectl apply -f lab1.yaml
    helm repo add cilium <repo> && helm install cilium cilium/cilium --version <v> \\
        --namespace kube-system --set ipam.mode=kubernetes

`clusterctl` is the real one built from the vendored Cluster API v1.12.11 tree, the template the
vendored CAPMOX v0.9.0's `templates/cluster-template.yaml` (what `--infrastructure proxmox:v0.9.1`
gives: chart_repo_standin serves v0.9.0's for v0.9.1), the variables the owner's
`configs/capi/clusterctl.yaml` holds, at one of SITES; `kubectl apply` is client-side, as the
admin of the management cluster; `helm` the real CLI (v3.20.2) against lab1 through the
`lab1-kubeconfig` Secret Cluster API keeps. Cluster API's real controllers and the stand-ins of
e2e/standins/workload/ bring up lab1's control plane and the site's workers (a MachineSet, a
Machine and a Node each). The result is what the takeover starts from, read from the live objects: the seven
objects with their field managers and last-applied annotation, the MachineSets, Machines, lab1's
Nodes and the Helm release record, with the times each part took.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from e2e.box.scenarios import LAB1_ADDRESS
from e2e.box.workload import lab1_state, workload_box
from e2e.box.workload.lab1_reads import built_tool, get, ran, until
from e2e.engine import vendor
from e2e.engine.control_plane import ControlPlane
from e2e.standins.cluster.chart_repo_standin import ChartRepoStandIn

NS, CLUSTER = lab1_state.NS, lab1_state.CLUSTER
KUBERNETES_VERSION = "v1.35.9"
CAPMOX_TEMPLATE = "templates/cluster-template.yaml"
TEMPLATE_RELEASE = "v0.9.1"
"""The release of `--infrastructure proxmox:v0.9.1`, which the owner's entry names (templateVersion)."""
OBJECTS = lab1_state.OBJECTS
CILIUM_VALUES = ("ipam.mode=kubernetes",)
# Cluster API goes on writing the Cluster's status for a while after the Nodes are Ready: the
# state a takeover must leave alone is read once no object has been rewritten for this long, so
# that what a later step finds rewritten is that step's doing.
SETTLED_SECONDS = 5
# Cilium's chart runs its operator at 2 replicas, besides an agent on each Node.
CILIUM_OPERATORS = 2


class ManagementCluster(Protocol):
    """Where the owner applies lab1: the workload box's management cluster, or the whole box's VM
    (e2e/box/takeover/owners_lab.py)."""

    base: Path
    mgmt: ControlPlane
    charts: ChartRepoStandIn

    def repo_url(self, repository: str) -> str: ...


@dataclass(frozen=True)
class Site:
    """What the owner's clusterctl.yaml says at one site (the variables of CAPMOX's template)."""

    endpoint: str
    node_ip_ranges: tuple[str, ...]
    gateway: str
    ip_prefix: int
    dns_servers: tuple[str, ...]
    source_node: str
    template_vmid: int
    bridge: str
    boot_volume_device: str
    boot_volume_gb: int
    sockets: int
    cores: int
    memory_mib: int
    vip_interface: str = "ens18"
    workers: int = 1
    deployment_annotations: tuple[tuple[str, str], ...] = ()
    """What the owner added to the MachineDeployment in the rendered manifest before applying it."""
    ssh_keys: tuple[str, ...] = (
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHhnI9tkG93j66SuHRKoLRSzSk70QX+hEMVq3CTkCXjc owner@laptop",
    )

    def clusterctl_yaml(self) -> str:
        """The owner's `configs/capi/clusterctl.yaml`: every variable as a string, lists in
        clusterctl's bracket form, as CAPMOX's docs write them."""
        variables = {
            "PROXMOX_SOURCENODE": self.source_node,
            "TEMPLATE_VMID": str(self.template_vmid),
            "ALLOWED_NODES": f"[{self.source_node}]",
            "BRIDGE": self.bridge,
            "CONTROL_PLANE_ENDPOINT_IP": self.endpoint,
            "VIP_NETWORK_INTERFACE": self.vip_interface,
            "NODE_IP_RANGES": "[" + ",".join(self.node_ip_ranges) + "]",
            "GATEWAY": self.gateway,
            "IP_PREFIX": str(self.ip_prefix),
            "DNS_SERVERS": "[" + ",".join(self.dns_servers) + "]",
            "VM_SSH_KEYS": ",".join(self.ssh_keys),
            "BOOT_VOLUME_DEVICE": self.boot_volume_device,
            "BOOT_VOLUME_SIZE": str(self.boot_volume_gb),
            "NUM_SOCKETS": str(self.sockets),
            "NUM_CORES": str(self.cores),
            "MEMORY_MIB": str(self.memory_mib),
            "CONTROL_PLANE_MACHINE_COUNT": "1",
            "WORKER_MACHINE_COUNT": str(self.workers),
        }
        return "".join(f"{key}: {json.dumps(value)}\n" for key, value in variables.items())


# The lab's values (Pulumi.lab.yaml's lab1 entry; the template's own defaults for the sizes).
SITES = {
    "lab": Site(
        endpoint=LAB1_ADDRESS,
        node_ip_ranges=("192.168.4.41-192.168.4.60",),
        gateway="192.168.4.8",
        ip_prefix=24,
        dns_servers=("8.8.8.8", "2.2.2.2"),
        source_node="pv1-1",
        template_vmid=9000,
        bridge="vmbr0",
        boot_volume_device="scsi0",
        boot_volume_gb=100,
        sockets=2,
        cores=4,
        memory_mib=16384,
    ),
}


def _conditions(obj: dict[str, Any] | None) -> dict[str, str]:
    return {c["type"]: c["status"] for c in ((obj or {}).get("status") or {}).get("conditions", [])}


def generate(base: Path, site: Site) -> tuple[dict[str, Any], Path]:
    """`clusterctl generate cluster lab1` as the owner ran it: (what it did, the rendered file)."""
    template = base / "cluster-template.yaml"
    template.write_text(vendor.member(vendor.CAPMOX_ARCHIVE, CAPMOX_TEMPLATE))
    config = base / "clusterctl.yaml"
    config.write_text(site.clusterctl_yaml())
    done = built_tool(
        "LAB_MGMT_CLUSTER_API_BIN",
        "clusterctl",
        base,
        *("generate", "cluster", CLUSTER, "--from", str(template)),
        *("--kubernetes-version", KUBERNETES_VERSION, "--target-namespace", NS, "--config", str(config)),
    )
    rendered = base / f"{CLUSTER}.yaml"
    rendered.write_text(_edited(done.stdout, site) if site.deployment_annotations else done.stdout)
    return {**ran(done), "stdout": done.stdout, "config": config.read_text()}, rendered


def _edited(manifest: str, site: Site) -> str:
    """The rendered manifest with the owner's edits: the MachineDeployment's annotations."""
    objects = [o for o in yaml.safe_load_all(manifest) if o]
    for body in objects:
        if body["kind"] == "MachineDeployment":
            body["metadata"].setdefault("annotations", {}).update(dict(site.deployment_annotations))
    return yaml.safe_dump_all(objects)


def left_by_the_owner(
    box: ManagementCluster,
    base: Path,
    site: Site,
    out: dict[str, Any],
    *,
    mark: Callable[[str], None],
) -> None:
    """The owner's steps on a box whose providers are Ready (the module's docstring), then the
    state they left, into `out`; `mark` times each part."""
    mgmt = box.mgmt
    out["site"] = asdict(site)
    out["generate"], rendered = generate(base, site)
    if out["generate"]["rc"]:
        raise AssertionError(f"clusterctl generate cluster failed: {out['generate']['stderr']}")
    audited = mgmt.audit_mark()
    out["apply"] = ran(mgmt.kubectl_as(mgmt.kubeconfig, "apply", "-f", str(rendered)))
    mark("clusterctl generate, kubectl apply")
    until(
        "the Cluster ControlPlaneInitialized",
        lambda: _conditions(get(mgmt, "cluster", CLUSTER)).get("ControlPlaneInitialized") == "True",
    )
    secret = get(mgmt, "secret", f"{CLUSTER}-kubeconfig")
    lab1 = base / "lab1.kubeconfig"
    lab1.write_bytes(base64.b64decode(secret["data"]["value"]))
    mark("lab1's control plane initialized")
    until("lab1's kube-system", lambda: get(mgmt, "namespace", "kube-system", kubeconfig=lab1))
    out["helm"] = _cilium(box, base, lab1)
    mark("helm install cilium")

    # The control plane's Machine and the workers'.
    machines = nodes = 1 + site.workers

    def running() -> Any:
        items = (get(mgmt, "machines") or {}).get("items", [])
        with_nodes = [m for m in items if m.get("status", {}).get("nodeRef")]
        all_running = all(m.get("status", {}).get("phase") == "Running" for m in items)
        return with_nodes if len(with_nodes) == machines and all_running else None

    until(f"{machines} Machines Running with their Nodes", running)

    def nodes_ready() -> Any:
        found = (get(mgmt, "nodes", kubeconfig=lab1) or {}).get("items", [])
        ready = [n for n in found if _conditions(n).get("Ready") == "True"]
        return found if len(found) == nodes and len(ready) == nodes else None

    out["nodes"] = until("every Node Ready", nodes_ready)

    def cilium_running() -> Any:
        pods = (
            get(mgmt, "pods", namespace="kube-system", selector="app.kubernetes.io/part-of=cilium", kubeconfig=lab1)
            or {}
        ).get("items", [])
        expected = nodes + CILIUM_OPERATORS
        return pods if len(pods) == expected and all(p["status"].get("phase") == "Running" for p in pods) else None

    out["cilium_pods"] = [
        [p["metadata"]["name"], p["spec"].get("nodeName")] for p in until("Cilium Running", cilium_running)
    ]
    mark("the Machines Running, Nodes Ready, Cilium Running")

    def settled() -> bool:
        before = lab1_state.snapshot(mgmt, lab1)
        time.sleep(SETTLED_SECONDS)
        return lab1_state.snapshot(mgmt, lab1) == before

    until(f"lab1 settled: nothing rewritten for {SETTLED_SECONDS} s", settled)
    mark("lab1 settled")
    _read_state(box, lab1, out)
    out["cluster_api_writes_by"] = sorted(
        {
            event["user"]["username"]
            for event in mgmt.audit()[audited:]
            if event.get("objectRef", {}).get("apiGroup", "").endswith("cluster.x-k8s.io")
            and event["verb"] in ("create", "update", "patch")
        }
    )
    mark("state read")


def _cilium(box: ManagementCluster, base: Path, lab1: Path) -> list[dict[str, Any]]:
    """`helm repo add` and `helm install` of Cilium into lab1, as the owner ran them."""
    helm = [
        built_tool(
            "LAB_MGMT_HELM_BIN",
            "helm",
            base,
            *("repo", "add", "cilium", box.repo_url("cilium"), "--ca-file", str(box.charts.certificate)),
        ),
        built_tool(
            "LAB_MGMT_HELM_BIN",
            "helm",
            base,
            *("install", "cilium", "cilium/cilium", "--version", workload_box.CILIUM_VERSION),
            *("--namespace", "kube-system", "--kubeconfig", str(lab1)),
            *(arg for value in CILIUM_VALUES for arg in ("--set", value)),
        ),
    ]
    for done in helm:
        if done.returncode:
            raise AssertionError(f"{done.args[1:3]} failed: {done.stderr}")
    return [ran(done) for done in helm]


def _read_state(box: ManagementCluster, lab1: Path, out: dict[str, Any]) -> None:
    """The state the takeover starts from, as the live objects have it."""
    mgmt = box.mgmt
    out["objects"] = lab1_state.objects(mgmt)
    out["snapshot"] = lab1_state.snapshot(mgmt, lab1)
    out["settings_from_live"] = lab1_state.settings_from_live(out["objects"])
    for kind in ("machinesets", "machines", "kubeadmconfigs", "proxmoxmachines"):
        out[kind] = [item["metadata"]["name"] for item in (get(mgmt, kind) or {})["items"]]
    releases = get(mgmt, "secrets", namespace="kube-system", selector="owner=helm", kubeconfig=lab1)
    out["release_secrets"] = [
        {"name": item["metadata"]["name"], "labels": item["metadata"]["labels"], "type": item["type"]}
        for item in (releases or {}).get("items", [])
    ]
    listed = built_tool(
        "LAB_MGMT_HELM_BIN", "helm", box.base, "list", "-n", "kube-system", "-o", "json", "--kubeconfig", str(lab1)
    )
    out["helm_list"] = json.loads(listed.stdout) if listed.returncode == 0 else ran(listed)
    values = built_tool(
        "LAB_MGMT_HELM_BIN",
        "helm",
        box.base,
        "get",
        "values",
        "cilium",
        "-n",
        "kube-system",
        "-o",
        "json",
        "--kubeconfig",
        str(lab1),
    )
    out["helm_values"] = json.loads(values.stdout) if values.returncode == 0 else ran(values)
    out["chart_requests"] = box.charts.requests
    out["charts_unknown"] = box.charts.unknown
