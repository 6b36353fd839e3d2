"""lab1 in the box with the real Cluster API core (tests/test_box_workload.py), on the workload box
(e2e/box/workload_box.py): the operator stand-in installs the providers' real CRDs and starts the
real Cluster API manager; as the admin, with kubectl, the scenario applies lab1's objects as
CAPMOX v0.9's cluster-template.yaml renders them (a MachineDeployment with the autoscaler's min 0
and max 3 annotations and no replicas), then scales the MachineDeployment through its /scale
subresource to 1 and back to 0, as the autoscaler would. Every write of the core controllers is the
real manager's: owner references, the endpoint copied, the Cluster's status, the MachineSet, the
Machine, its KubeadmConfig and ProxmoxMachine. The stand-ins do only what their providers and the
kubelets would (e2e/standins/workload/).

At the end, the control: with the contract labels taken off the ProxmoxCluster CRD, a second
Cluster's infrastructure cannot be resolved, and the manager says why. It reports what happened,
read from the objects, the audit log and the manager's log, and how long each part took.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.box import workload_box
from e2e.box.scenarios import LAB1_ADDRESS
from e2e.controllers import cluster_api
from e2e.engine.control_plane import ControlPlane
from e2e.standins.cluster import chart_repo_standin

NS, CLUSTER = "default", "lab1"
WORKERS = f"{CLUSTER}-workers"
VERSION = "v1.35.9"
MIN_SIZE, MAX_SIZE = "0", "3"
SIZE_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-{}-size"
WORKER = {"numSockets": 2, "numCores": 2, "memoryMiB": 4096, "disks": {"bootVolume": {"disk": "scsi0", "sizeGb": 30}}}
PROVIDER_ID = {"name": "provider-id", "value": "proxmox://'{{ ds.meta_data.instance_id }}'"}
BOUND = 120.0
POLL = 0.5
# The control's second cluster, and what Cluster API says of a CRD without its contract label.
UNLABELLED = "lab2"
CONTRACT_ERROR = "cannot find any versions matching contract versions"
CORE = "cluster.x-k8s.io/v1beta2"
INFRA, BOOTSTRAP, CONTROL_PLANE = (
    "infrastructure.cluster.x-k8s.io",
    "bootstrap.cluster.x-k8s.io",
    "controlplane.cluster.x-k8s.io",
)


def lab1_objects(name: str = CLUSTER, endpoint: str = LAB1_ADDRESS, *, whole: bool = True) -> list[dict[str, Any]]:
    """What CAPMOX v0.9's cluster-template.yaml renders for lab1 (one control plane; the workers'
    MachineDeployment without `replicas`, with the autoscaler's size annotations). Not `whole`:
    the Cluster (without its control plane) and the ProxmoxCluster alone."""
    meta = {"namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": name}}
    template_spec = {"sourceNode": "pv1-1", "templateID": 9000, "format": "qcow2", "full": True, **WORKER}
    template_spec["network"] = {"networkDevices": [{"bridge": "vmbr0", "model": "virtio", "name": "net0", "vlan": 4}]}
    ref = {"apiGroup": INFRA, "kind": "ProxmoxMachineTemplate"}
    cluster: dict[str, Any] = {
        **{"apiVersion": CORE, "kind": "Cluster", "metadata": {"name": name, **meta}},
        "spec": {
            "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}},
            "infrastructureRef": {"apiGroup": INFRA, "kind": "ProxmoxCluster", "name": name},
        },
    }
    proxmox_cluster = {
        **{"apiVersion": f"{INFRA}/v1alpha2", "kind": "ProxmoxCluster", "metadata": {"name": name, **meta}},
        "spec": {
            "controlPlaneEndpoint": {"host": endpoint, "port": 6443},
            "ipv4Config": {"addresses": ["192.168.4.50-192.168.4.59"], "prefix": 24, "gateway": "192.168.4.8"},
            "dnsServers": ["8.8.8.8", "2.2.2.2"],
            "allowedNodes": [],
        },
    }
    if not whole:
        return [cluster, proxmox_cluster]
    cluster["spec"]["controlPlaneRef"] = {
        "apiGroup": CONTROL_PLANE,
        "kind": "KubeadmControlPlane",
        "name": f"{name}-control-plane",
    }
    return [
        cluster,
        proxmox_cluster,
        {
            **{"apiVersion": f"{CONTROL_PLANE}/v1beta2", "kind": "KubeadmControlPlane"},
            "metadata": {"name": f"{name}-control-plane", **meta},
            "spec": {
                "replicas": 1,
                "version": VERSION,
                "machineTemplate": {"spec": {"infrastructureRef": {**ref, "name": f"{name}-control-plane"}}},
                "kubeadmConfigSpec": {
                    "initConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [PROVIDER_ID]}},
                    "joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [PROVIDER_ID]}},
                },
            },
        },
        *(
            {
                **{"apiVersion": f"{INFRA}/v1alpha2", "kind": "ProxmoxMachineTemplate"},
                "metadata": {"name": f"{name}-{role}", **meta},
                "spec": {"template": {"spec": template_spec}},
            }
            for role in ("control-plane", "worker")
        ),
        {
            **{"apiVersion": f"{BOOTSTRAP}/v1beta2", "kind": "KubeadmConfigTemplate"},
            "metadata": {"name": f"{name}-worker", **meta},
            "spec": {
                "template": {"spec": {"joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [PROVIDER_ID]}}}}
            },
        },
        {
            "apiVersion": CORE,
            "kind": "MachineDeployment",
            "metadata": {
                **{"name": f"{name}-workers", **meta},
                "annotations": {SIZE_ANNOTATION.format("min"): MIN_SIZE, SIZE_ANNOTATION.format("max"): MAX_SIZE},
            },
            "spec": {
                "clusterName": name,
                "selector": {"matchLabels": {}},
                "template": {
                    "metadata": {"labels": {"cluster.x-k8s.io/cluster-name": name, "node-role.kubernetes.io/node": ""}},
                    "spec": {
                        **{"clusterName": name, "version": VERSION},
                        "bootstrap": {
                            "configRef": {
                                "apiGroup": BOOTSTRAP,
                                "kind": "KubeadmConfigTemplate",
                                "name": f"{name}-worker",
                            }
                        },
                        "infrastructureRef": {**ref, "name": f"{name}-worker"},
                    },
                },
            },
        },
    ]


def _get(cluster: ControlPlane, *args: str, kubeconfig: Path | None = None) -> Any:
    """The object(s) as JSON, or None (not found, or not yet served)."""
    done = cluster.kubectl_as(kubeconfig or cluster.kubeconfig, "get", *args, "-o", "json")
    return json.loads(done.stdout) if done.returncode == 0 else None


def _conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions", [])}


def _writes(cluster: ControlPlane, mark: int) -> list[dict[str, Any]]:
    """Each write to a cluster.x-k8s.io group after the audit log's `mark`: who, verb, resource,
    name, and which mutating webhooks changed it."""
    writes = []
    for event in cluster.audit()[mark:]:
        ref = event.get("objectRef", {})
        if not ref.get("apiGroup", "").endswith("cluster.x-k8s.io") or event["verb"] not in {
            "create",
            "update",
            "patch",
        }:
            continue
        mutated = [
            json.loads(value)["webhook"]
            for key, value in (event.get("annotations") or {}).items()
            if key.startswith("mutation.webhook.admission.k8s.io/") and json.loads(value).get("mutated")
        ]
        writes.append(
            {
                "user": event["user"]["username"],
                "verb": event["verb"],
                "resource": ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else ""),
                "name": ref.get("name", ""),
                "code": event.get("responseStatus", {}).get("code"),
                "mutated_by": mutated,
            }
        )
    return writes


def _fetch(box: workload_box.WorkloadBox, path: str) -> tuple[int, bytes]:
    """A GET of the chart repository stand-in, trusting its certificate: (status, body)."""
    context = ssl.create_default_context(cafile=str(box.charts.certificate))
    try:
        with urllib.request.urlopen(f"{box.charts.url}{path}", timeout=10, context=context) as answer:  # noqa: S310
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, b""


def _cilium_in_lab1(lab1: Callable[..., Any]) -> None:
    """Cilium's chart as the stand-in serves it, its templates filled in as `helm install` with
    `operator.replicas=1` would (the program's value), applied to lab1 in kube-system."""
    chart = chart_repo_standin.cilium_chart(workload_box.CILIUM_VERSION)
    for template in chart.templates:
        text = (
            template.replace("{{ .Release.Namespace }}", "kube-system")
            .replace("{{ .Chart.AppVersion }}", chart.version)
            .replace("{{ .Values.operator.replicas }}", "1")
        )
        lab1("apply", "-f", "-", stdin=text).check_returncode()


def lab1_scaled(root: str) -> dict[str, Any]:  # noqa: PLR0915 - one scenario, step by step
    base, times, began = Path(root), {}, time.monotonic()
    refused: list[str] = []

    def mark(what: str) -> None:
        times[what] = round(time.monotonic() - began, 1)

    def until(what: str, found: Callable[[], Any], bound: float = BOUND) -> Any:
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            if answer := found():
                return answer
            time.sleep(POLL)
        raise AssertionError(f"not within {bound}s: {what}; the stand-ins refused: {refused}")

    with workload_box.running(base, operator_install_seconds=0.0) as box:
        refused = box.standins.record.errors
        mgmt = box.mgmt
        mark("box up")
        providers_seconds = box.install_providers()
        manager = box.manager
        mark("providers Ready, manager running")
        audited = len(mgmt.audit())
        created = mgmt.kubectl_as(
            mgmt.kubeconfig,
            "create",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": lab1_objects()}),
        )
        machine_sets = until("a MachineSet", lambda: (_get(mgmt, "machinesets", "-n", NS) or {}).get("items"))
        deployment = _get(mgmt, "machinedeployment", WORKERS, "-n", NS)
        mark("MachineSet")
        cluster = until(
            "the Cluster ControlPlaneInitialized",
            lambda: (
                (found := _get(mgmt, "cluster", CLUSTER, "-n", NS))
                and _conditions(found).get("ControlPlaneInitialized", {}).get("status") == "True"
                and found
            ),
        )
        mark("Cluster ControlPlaneInitialized")
        secret = _get(mgmt, "secret", f"{CLUSTER}-kubeconfig", "-n", NS)
        kubeconfig = base / "lab1-kubeconfig"
        kubeconfig.write_bytes(base64.b64decode(secret["data"]["value"]))

        def lab1(*args: str, stdin: str | None = None) -> Any:
            return mgmt.kubectl_as(kubeconfig, *args, stdin=stdin)

        def lab1_get(*args: str) -> Any:
            return _get(mgmt, *args, kubeconfig=kubeconfig)

        control_node_name = until(
            "the control-plane Node", lambda: box.standins.control_plane_nodes.get(f"{NS}/{CLUSTER}")
        )
        until("lab1's default ServiceAccount", lambda: lab1("get", "serviceaccount", "default").returncode == 0)
        _cilium_in_lab1(lab1)
        system_pods = until(
            "CoreDNS and Cilium's operator Running on the control plane",
            lambda: (
                (pods := (lab1_get("pods", "-n", "kube-system") or {}).get("items", []))
                and len([p for p in pods if p["status"].get("phase") == "Running"])
                >= 4  # CoreDNS twice, the operator, the agent
                and pods
            ),
        )
        control_node = lab1_get("node", control_node_name)
        mark("control-plane Node, system pods Running")

        scaled_up = mgmt.kubectl_as(mgmt.kubeconfig, "scale", "-n", NS, f"machinedeployment/{WORKERS}", "--replicas=1")
        machine = until(
            "a Machine Running with its nodeRef",
            lambda: next(
                (
                    m
                    for m in (_get(mgmt, "machines", "-n", NS) or {}).get("items", [])
                    if m.get("status", {}).get("phase") == "Running" and m["status"].get("nodeRef")
                ),
                None,
            ),
        )
        mark("Machine Running with nodeRef")
        worker = machine["metadata"]["name"]
        proxmox_machine = _get(mgmt, "proxmoxmachine", machine["spec"]["infrastructureRef"]["name"], "-n", NS)
        kubeadm_config = _get(mgmt, "kubeadmconfig", machine["spec"]["bootstrap"]["configRef"]["name"], "-n", NS)
        node = until(
            "the worker Node without Cluster API's uninitialized taint",
            lambda: (
                (found := lab1_get("node", machine["status"]["nodeRef"]["name"]))
                and not any(t["key"].startswith("node.cluster.x-k8s.io/") for t in found["spec"].get("taints", []))
                and found
            ),
        )
        for name, cpu in (("fits", "1"), ("fits-nowhere", "64")):
            pod = {
                **{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
                        }
                    ]
                },
            }
            lab1("create", "-f", "-", stdin=json.dumps(pod)).check_returncode()
        running = until(
            "the pod that fits Running",
            lambda: (found := lab1_get("pod", "fits")) and found["status"].get("phase") == "Running" and found,
        )
        pending = until(
            "the pod that fits nowhere Unschedulable",
            lambda: (
                (found := lab1_get("pod", "fits-nowhere"))
                and _conditions(found).get("PodScheduled", {}).get("reason") == "Unschedulable"
                and found
            ),
        )
        mark("pods placed")
        lease = lab1_get("lease", "-n", "kube-node-lease", node["metadata"]["name"])
        time.sleep(3)
        renewed = lab1_get("lease", "-n", "kube-node-lease", node["metadata"]["name"])

        scaled_down = mgmt.kubectl_as(
            mgmt.kubeconfig, "scale", "-n", NS, f"machinedeployment/{WORKERS}", "--replicas=0"
        )
        until("the Machine gone", lambda: _get(mgmt, "machine", worker, "-n", NS) is None)
        until(
            "the ProxmoxMachine gone",
            lambda: _get(mgmt, "proxmoxmachine", proxmox_machine["metadata"]["name"], "-n", NS) is None,
        )
        until("the worker Node gone", lambda: lab1("get", "node", node["metadata"]["name"]).returncode != 0)
        mark("scaled to 0: Machine, ProxmoxMachine, Node gone")
        nodes_after = [n["metadata"]["name"] for n in (lab1_get("nodes") or {}).get("items", [])]
        assets = {
            version: _fetch(box, f"/capmox/{version}/cluster-template.yaml")
            for version in ("v0.9.0", "v0.9.1", "v0.9.2")
        }
        writes = _writes(mgmt, audited)
        cluster_final = _get(mgmt, "cluster", CLUSTER, "-n", NS)
        unlabelled = _without_contract_labels(mgmt, manager)
        mark("control")
        return {
            "times": times,
            "providers_seconds": providers_seconds,
            "manager_ready_seconds": manager.started_seconds,
            "webhook_configurations": list(manager.configurations),
            "crds_applied": box.operator.crds_applied,
            "operator_notes": box.operator.notes,
            "problems": box.problems(),
            "crd_labels": {
                crd["metadata"]["name"]: crd["metadata"].get("labels", {}) for crd in _get(mgmt, "crd")["items"]
            },
            "created": {"rc": created.returncode, "stderr": created.stderr},
            "deployment": deployment,
            "machine_sets": machine_sets,
            "cluster": cluster,
            "cluster_final": cluster_final,
            "secret": {key: secret[key] for key in ("type", "metadata")} | {"keys": sorted(secret["data"])},
            "readyz": lab1("get", "--raw", "/readyz").stdout,
            "control_node": control_node,
            "system_pods": system_pods,
            "scaled_up": {"rc": scaled_up.returncode, "stderr": scaled_up.stderr},
            "scaled_down": {"rc": scaled_down.returncode, "stderr": scaled_down.stderr},
            "machine": machine,
            "proxmox_machine": proxmox_machine,
            "kubeadm_config": kubeadm_config,
            "node": node,
            "running": running,
            "pending": pending,
            "lease_renewed": [lease["spec"]["renewTime"], renewed["spec"]["renewTime"]],
            "nodes_after": nodes_after,
            "capmox_assets": {version: [status, body.decode()] for version, (status, body) in assets.items()},
            "writes": writes,
            "unlabelled": unlabelled,
            "v1beta1_requests": cluster_api.v1beta1_requests(mgmt),
            "timeline": box.standins.record.timeline,
            "started_in": box.standins.started_in,
            "manager_log_tail": manager.log_tail(60),
        }


def _without_contract_labels(mgmt: ControlPlane, manager: cluster_api.ClusterApiManager) -> dict[str, Any]:
    """The control: with the contract labels taken off the ProxmoxCluster CRD, a second Cluster's
    infrastructure cannot be resolved, and the manager says why."""
    crd = "crd/proxmoxclusters.infrastructure.cluster.x-k8s.io"
    mgmt.kubectl("label", crd, "cluster.x-k8s.io/v1beta1-", "cluster.x-k8s.io/v1beta2-")
    second = lab1_objects(UNLABELLED, "192.168.4.41", whole=False)
    mgmt.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": second}))
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        said = [line for line in manager.log.read_text().splitlines() if CONTRACT_ERROR in line and UNLABELLED in line]
        if said:
            infra = _conditions(_get(mgmt, "cluster", UNLABELLED, "-n", NS)).get("InfrastructureReady", {})
            return {"log": said[0], "condition": f"{infra.get('reason', '')}: {infra.get('message', '')}"}
        time.sleep(POLL)
    raise AssertionError(f"the manager did not refuse an unlabelled CRD within {BOUND}s")
