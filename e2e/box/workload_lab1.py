"""lab1 as a second real control plane in the box (tests/test_box_workload.py): the management
cluster with the real Cluster API and CAPMOX CRDs, lab1's objects as CAPMOX's cluster template
renders them, and the workload stand-ins (e2e/standins/workload/). Until the real Cluster API core
manager runs in the box, this scenario does by hand, in `_as_core_controllers`, the few writes of
the Cluster, MachineSet and Machine controllers that the stand-ins wait for; each is marked as
such, and goes when the manager runs.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from e2e.box.scenarios import LAB1_ADDRESS, VM_ADDRESS
from e2e.engine import control_plane
from e2e.engine.control_plane import ControlPlane
from e2e.standins.workload import providers, real_crds

NS = "default"
CLUSTER = "lab1"
VERSION = "v1.35.9"
WORKER = {"numSockets": 2, "numCores": 2, "memoryMiB": 4096, "disks": {"bootVolume": {"disk": "scsi0", "sizeGb": 30}}}
PROVIDER_ID = {"name": "provider-id", "value": "proxmox://'{{ ds.meta_data.instance_id }}'"}
BOUND = 90
# What the stand-ins refused so far, said with any wait that runs out.
REFUSED: list[str] = []


def lab1_objects() -> list[dict[str, Any]]:
    """What CAPMOX v0.9's cluster-template.yaml renders for lab1 (one control plane, workers from 0)."""
    meta = {"namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}}
    template_spec = {"sourceNode": "pv1-1", "templateID": 9000, "format": "qcow2", "full": True, **WORKER}
    template_spec["network"] = {"networkDevices": [{"bridge": "vmbr0", "model": "virtio", "name": "net0", "vlan": 4}]}
    ref = {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "ProxmoxMachineTemplate"}
    return [
        {
            **{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": CLUSTER, **meta}},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}},
                "infrastructureRef": {"apiGroup": ref["apiGroup"], "kind": "ProxmoxCluster", "name": CLUSTER},
                "controlPlaneRef": {
                    **{"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane"},
                    "name": f"{CLUSTER}-control-plane",
                },
            },
        },
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha2",
            **{"kind": "ProxmoxCluster", "metadata": {"name": CLUSTER, **meta}},
            "spec": {
                "controlPlaneEndpoint": {"host": LAB1_ADDRESS, "port": 6443},
                "ipv4Config": {"addresses": ["192.168.4.50-192.168.4.59"], "prefix": 24, "gateway": "192.168.4.8"},
                "dnsServers": ["8.8.8.8", "2.2.2.2"],
            },
        },
        {
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
            **{"kind": "KubeadmControlPlane", "metadata": {"name": f"{CLUSTER}-control-plane", **meta}},
            "spec": {
                "replicas": 1,
                "version": VERSION,
                "machineTemplate": {"spec": {"infrastructureRef": {**ref, "name": f"{CLUSTER}-control-plane"}}},
                "kubeadmConfigSpec": {
                    "initConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [PROVIDER_ID]}},
                    "joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [PROVIDER_ID]}},
                },
            },
        },
        *(
            {
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha2",
                **{"kind": "ProxmoxMachineTemplate", "metadata": {"name": f"{CLUSTER}-{role}", **meta}},
                "spec": {"template": {"spec": template_spec}},
            }
            for role in ("control-plane", "worker")
        ),
        {
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
            **{"kind": "KubeadmConfigTemplate", "metadata": {"name": f"{CLUSTER}-worker", **meta}},
            "spec": {
                "template": {"spec": {"joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [PROVIDER_ID]}}}}
            },
        },
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            **{"kind": "MachineDeployment", "metadata": {"name": f"{CLUSTER}-workers", **meta}},
            "spec": {
                "clusterName": CLUSTER,
                "replicas": 0,
                "selector": {"matchLabels": {}},
                "template": {
                    "metadata": {
                        "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER, "node-role.kubernetes.io/node": ""}
                    },
                    "spec": {
                        "clusterName": CLUSTER,
                        "version": VERSION,
                        "bootstrap": {
                            "configRef": {
                                **{"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate"},
                                "name": f"{CLUSTER}-worker",
                            }
                        },
                        "infrastructureRef": {**ref, "name": f"{CLUSTER}-worker"},
                    },
                },
            },
        },
    ]


def _json(cluster: ControlPlane, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def _until(what: str, check: Any, bound: float = BOUND) -> Any:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.5)
    raise AssertionError(f"not within {bound}s: {what}; the stand-ins refused: {REFUSED}")


def _owned(cluster: ControlPlane, resource: str, name: str, owner: dict[str, Any]) -> None:
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"]}
    ref |= {"uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    patch = json.dumps({"metadata": {"ownerReferences": [ref]}})
    cluster.kubectl("patch", resource, name, "-n", NS, "--type=merge", "-p", patch)


def _as_core_controllers(mgmt: ControlPlane) -> None:
    """BY HAND, what the real Cluster controller does before lab1's control plane starts: own the
    ProxmoxCluster and the KCP, copy the endpoint, mirror the infrastructure's provisioned."""
    cluster = _json(mgmt, "get", "clusters.v1beta2.cluster.x-k8s.io", CLUSTER, "-n", NS)
    for resource, name in (("proxmoxclusters", CLUSTER), ("kubeadmcontrolplanes", f"{CLUSTER}-control-plane")):
        _owned(mgmt, resource, name, cluster)
    proxmox = _until(
        "ProxmoxCluster provisioned",
        lambda: (
            (found := _json(mgmt, "get", "proxmoxclusters", CLUSTER, "-n", NS))
            .get("status", {})
            .get("initialization", {})
            .get("provisioned")
            and found
        ),
    )
    endpoint = json.dumps({"spec": {"controlPlaneEndpoint": proxmox["spec"]["controlPlaneEndpoint"]}})
    mgmt.kubectl("patch", "clusters.v1beta2.cluster.x-k8s.io", CLUSTER, "-n", NS, "--type=merge", "-p", endpoint)
    _cluster_status(mgmt, {"infrastructureProvisioned": True})


def _cluster_status(mgmt: ControlPlane, initialization: dict[str, bool]) -> None:
    body = json.dumps({"status": {"initialization": initialization}})
    mgmt.kubectl(
        *("patch", "clusters.v1beta2.cluster.x-k8s.io", CLUSTER, "-n", NS),
        *("--subresource=status", "--type=merge", "-p", body),
    )


def _a_worker_as_the_machineset_would(mgmt: ControlPlane, name: str) -> None:
    """BY HAND, what the MachineSet and Machine controllers do: a KubeadmConfig and a
    ProxmoxMachine from the templates, a Machine referring to both and owning them, then, once the
    bootstrap data exists, its name in the Machine."""
    labels = {"cluster.x-k8s.io/cluster-name": CLUSTER, "node-role.kubernetes.io/node": ""}
    bootstrap = _json(mgmt, "get", "kubeadmconfigtemplates", f"{CLUSTER}-worker", "-n", NS)["spec"]["template"]
    infrastructure = _json(mgmt, "get", "proxmoxmachinetemplates", f"{CLUSTER}-worker", "-n", NS)["spec"]["template"]
    meta = {"name": name, "namespace": NS, "labels": labels}
    machine = {
        **{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "metadata": meta},
        "spec": {
            **{"clusterName": CLUSTER, "version": VERSION},
            "bootstrap": {
                "configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}
            },
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "ProxmoxMachine",
                "name": name,
            },
        },
    }
    for obj in (
        {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig", "metadata": meta, **bootstrap},
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha2",
            "kind": "ProxmoxMachine",
            "metadata": meta,
            **infrastructure,
        },
        machine,
    ):
        mgmt.kubectl("create", "-f", "-", stdin=json.dumps(obj))
    made = _json(mgmt, "get", "machines.v1beta2.cluster.x-k8s.io", name, "-n", NS)
    _owned(mgmt, "kubeadmconfigs", name, made)
    _owned(mgmt, "proxmoxmachines", name, made)
    secret = _until(
        "bootstrap data",
        lambda: _json(mgmt, "get", "kubeadmconfigs", name, "-n", NS).get("status", {}).get("dataSecretName"),
    )
    patch = json.dumps({"spec": {"bootstrap": {"dataSecretName": secret}}})
    mgmt.kubectl("patch", "machines.v1beta2.cluster.x-k8s.io", name, "-n", NS, "--type=merge", "-p", patch)


def _unschedulable(text: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = json.loads(text)
    scheduled = [c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"]
    return pod if scheduled and scheduled[0].get("reason") == "Unschedulable" else None


def _pod(name: str, cpu: str) -> str:
    container = {
        "name": "app",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
    }
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [container]},
        }
    )


def lab1_nodes_and_pods(root: str) -> dict[str, Any]:
    base, times, began = Path(root), {}, time.monotonic()

    def mark(what: str) -> None:
        times[what] = round(time.monotonic() - began, 1)

    with control_plane.running(base / "mgmt", VM_ADDRESS) as mgmt:
        mark("management control plane")
        crds = real_crds.apply(mgmt)
        mark("real CRDs applied")
        with providers.running(mgmt, base / "workload", interval=1.0) as standins:
            REFUSED[:] = []
            standins.record.errors = REFUSED
            mgmt.kubectl(
                "create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": lab1_objects()})
            )
            _as_core_controllers(mgmt)
            mark("infrastructure provisioned")
            kcp = _until(
                "KCP initialized",
                lambda: (
                    (found := _json(mgmt, "get", "kubeadmcontrolplanes", f"{CLUSTER}-control-plane", "-n", NS))
                    .get("status", {})
                    .get("initialization", {})
                    .get("controlPlaneInitialized")
                    and found
                ),
            )
            mark("control plane initialized")
            _cluster_status(mgmt, {"infrastructureProvisioned": True, "controlPlaneInitialized": True})  # BY HAND
            secret = _json(mgmt, "get", "secret", f"{CLUSTER}-kubeconfig", "-n", NS)
            kubeconfig = base / "lab1-kubeconfig"
            kubeconfig.write_bytes(base64.b64decode(secret["data"]["value"]))

            def lab1(*args: str) -> subprocess.CompletedProcess[str]:
                return mgmt.kubectl_as(kubeconfig, *args)

            readyz = lab1("get", "--raw", "/readyz").stdout
            _until("lab1's default ServiceAccount", lambda: lab1("get", "serviceaccount", "default").returncode == 0)
            _a_worker_as_the_machineset_would(mgmt, f"{CLUSTER}-workers-a1")
            node = _until(
                "a Ready Node in lab1",
                lambda: (
                    (done := lab1("get", "node", f"{CLUSTER}-workers-a1", "-o", "json")).returncode == 0
                    and any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in json.loads(done.stdout)["status"].get("conditions", [])
                    )
                    and json.loads(done.stdout)
                ),
            )
            mark("worker Node Ready")
            proxmox_machine = _json(mgmt, "get", "proxmoxmachines", f"{CLUSTER}-workers-a1", "-n", NS)
            for name, cpu in (("fits", "1"), ("fits-nowhere", "64")):
                mgmt.kubectl_as(kubeconfig, "create", "-f", "-", stdin=_pod(name, cpu)).check_returncode()
            running = _until(
                "the pod that fits Running",
                lambda: (
                    (pod := json.loads(lab1("get", "pod", "fits", "-o", "json").stdout))["status"].get("phase")
                    == "Running"
                    and pod
                ),
            )
            mark("pod Running")
            pending = _until(
                "the pod that fits nowhere Unschedulable",
                lambda: _unschedulable(lab1("get", "pod", "fits-nowhere", "-o", "json").stdout),
            )
            lease = json.loads(
                lab1("get", "lease", "-n", "kube-node-lease", f"{CLUSTER}-workers-a1", "-o", "json").stdout
            )
            time.sleep(3)
            renewed = json.loads(
                lab1("get", "lease", "-n", "kube-node-lease", f"{CLUSTER}-workers-a1", "-o", "json").stdout
            )
            mgmt.kubectl("delete", "proxmoxmachine", f"{CLUSTER}-workers-a1", "-n", NS, "--wait=false")
            _until("the Node gone", lambda: lab1("get", "node", f"{CLUSTER}-workers-a1").returncode != 0)
            _until(
                "the ProxmoxMachine gone",
                lambda: (
                    mgmt.kubectl_as(
                        mgmt.kubeconfig, "get", "proxmoxmachine", f"{CLUSTER}-workers-a1", "-n", NS
                    ).returncode
                    != 0
                ),
            )
            mark("Node removed with its ProxmoxMachine")
            return {
                "times": times,
                "crds": crds,
                "kcp_status": kcp["status"],
                "secret": {key: secret[key] for key in ("type", "metadata")} | {"keys": sorted(secret["data"])},
                "readyz": readyz,
                "node": node,
                "proxmox_machine": proxmox_machine,
                "running": running,
                "pending": pending,
                "lease_renewed": [lease["spec"]["renewTime"], renewed["spec"]["renewTime"]],
                "errors": standins.record.errors,
                "timeline": standins.record.timeline,
                "started_in": standins.started_in,
            }
