"""A stand-in for the kubelet of each worker VM the CAPMOX stand-in provisioned: kubeadm joins it to
its workload cluster (whose control plane the KubeadmControlPlane stand-in runs), so it registers
a Node named after the VM with

- spec.providerID: the bootstrap data's `provider-id` kubelet argument with cloud-init's
  `{{ ds.meta_data.instance_id }}` filled in with the VM's uuid, which must equal the
  ProxmoxMachine's spec.providerID (else the Machine never finds its Node: refused loudly);
- the labels a kubelet sets and the bootstrap data's `node-labels`, its `taints`;
- capacity and allocatable from the VM's sizing (numSockets * numCores cpu, memoryMiB, the boot
  volume, 110 pods), the addresses, nodeInfo (kubelet version = the Machine's) and Ready;

then heartbeats through its Lease in kube-node-lease, and reports each Pod the real kube-scheduler
bound to it Running and Ready (no container runs). A kubelet argument it does not know is refused.
When the ProxmoxMachine goes, its Node goes.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from e2e.engine.control_plane import KUBELET_USER, ControlPlane
from e2e.standins.workload.capmox import need_true, size
from e2e.standins.workload.kubeadm import join_configuration
from e2e.standins.workload.objects import CORE, INFRASTRUCTURE, Client, Record, ident, need, now, owner

KNOWN_KUBELET_ARGS = ("provider-id", "node-labels")
INSTANCE_ID = ("'{{ ds.meta_data.instance_id }}'", "{{ ds.meta_data.instance_id }}")
LEASE_SECONDS = 40


def reconcile(client: Client, record: Record, running: dict[str, ControlPlane], registered: set[str]) -> None:
    """Registers, heartbeats and runs pods for every provisioned ProxmoxMachine whose workload
    cluster runs; `registered` holds `namespace/cluster/node` of each Node registered."""
    nodes: dict[str, list[str]] = {}
    for item in client.items("proxmoxmachines", INFRASTRUCTURE):
        meta = item["metadata"]
        if "deletionTimestamp" in meta or not need_true(item, "status.initialization.provisioned"):
            continue
        machine = client.get("machines", CORE, meta["namespace"], owner(item, "Machine", "cluster.x-k8s.io") or "")
        if machine is None:
            raise KeyError(f"{ident(item)} is provisioned but its Machine is gone")
        key = f"{meta['namespace']}/{need(machine, 'spec.clusterName')}"
        if key not in running:
            continue
        lab = Client(running[key], KUBELET_USER)
        if f"{key}/{meta['name']}" not in registered:
            _register(client, lab, item, machine)
            registered.add(f"{key}/{meta['name']}")
            record.did(f"Node registered in {key}", ident(item))
        nodes.setdefault(key, []).append(meta["name"])
    for key, names in nodes.items():
        lab = Client(running[key], KUBELET_USER)
        _heartbeat(lab, names)
        for pod in _run_pods(lab, names):
            record.did(f"Pod running in {key}", pod)


def forget(running: dict[str, ControlPlane], registered: set[str], machine: dict[str, Any]) -> None:
    """The VM of a deleted ProxmoxMachine is gone: its Node (and with it its Lease) too."""
    name = machine["metadata"]["name"]
    for key in [entry for entry in registered if entry.endswith(f"/{name}")]:
        namespace_cluster = key.rsplit("/", 1)[0]
        if namespace_cluster in running:
            Client(running[namespace_cluster], KUBELET_USER).run(
                "delete", "node", name, "--ignore-not-found", "--wait=false"
            )
        registered.discard(key)


def _register(client: Client, lab: Client, item: dict[str, Any], machine: dict[str, Any]) -> None:
    meta, spec = item["metadata"], item["spec"]
    secret = client.get("secrets", "v1", meta["namespace"], need(machine, "spec.bootstrap.dataSecretName"))
    if secret is None:
        raise KeyError(f"{ident(machine)}'s bootstrap data Secret is gone")
    join = join_configuration(base64.b64decode(secret["data"]["value"]).decode())
    registration = join.get("nodeRegistration", {})
    arguments = {arg["name"]: arg["value"] for arg in registration.get("kubeletExtraArgs", [])}
    for name in arguments:
        if name not in KNOWN_KUBELET_ARGS:
            raise ValueError(f"{ident(machine)}: kubelet argument {name}: the kubelet stand-in does not know it")
    vm_uuid = need(item, "spec.providerID").removeprefix("proxmox://")
    provider_id = arguments.get("provider-id", "")
    for form in INSTANCE_ID:
        provider_id = provider_id.replace(form, vm_uuid)
    if provider_id != spec["providerID"]:
        raise ValueError(
            f"{ident(item)}: the kubelet would register providerID {provider_id!r}, not {spec['providerID']!r}"
        )
    labels = {
        "kubernetes.io/hostname": meta["name"],
        **{"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
        **{"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"},
    }
    for pair in filter(None, arguments.get("node-labels", "").split(",")):
        label, _, value = pair.partition("=")
        labels[label] = value
    lab.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": meta["name"], "labels": labels},
            "spec": {"providerID": provider_id, "taints": registration.get("taints", [])},
        }
    )
    capacity, stamp = size(item), now()
    addresses = [{"type": a["type"], "address": a["address"]} for a in need(item, "status.addresses")]
    pressure = {"MemoryPressure": "KubeletHasSufficientMemory", "DiskPressure": "KubeletHasNoDiskPressure"}
    pressure["PIDPressure"] = "KubeletHasSufficientPID"
    node_conditions = [
        {"type": kind, "status": "False", "reason": reason, "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
        for kind, reason in pressure.items()
    ] + [
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
    ]
    node_info = {
        **{"machineID": vm_uuid.replace("-", ""), "systemUUID": vm_uuid, "bootID": vm_uuid},
        **{"kernelVersion": "6.8.0", "osImage": "Ubuntu 24.04 (kubelet stand-in)", "operatingSystem": "linux"},
        **{"containerRuntimeVersion": "containerd://stand-in", "architecture": "amd64", "kubeProxyVersion": ""},
        "kubeletVersion": need(machine, "spec.version"),
    }
    status = {
        **{"capacity": capacity, "allocatable": capacity, "addresses": addresses},
        **{"conditions": node_conditions, "nodeInfo": node_info},
    }
    lab.patch({"apiVersion": "v1", "kind": "Node", "metadata": {"name": meta["name"]}}, {"status": status}, status=True)


def _heartbeat(lab: Client, names: list[str]) -> None:
    renewed = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    leases = [
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": renewed},
        }
        for name in names
    ]
    lab.apply({"apiVersion": "v1", "kind": "List", "items": leases})


def _run_pods(lab: Client, names: list[str]) -> list[str]:
    started = []
    for pod in lab.items("pods", "v1"):
        spec = pod["spec"]
        if spec.get("nodeName") not in names or pod["status"].get("phase") != "Pending":
            continue
        stamp = now()
        pod_conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": stamp}
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        containers = [
            {
                **{"name": container["name"], "image": container["image"], "imageID": ""},
                **{"ready": True, "started": True, "restartCount": 0, "state": {"running": {"startedAt": stamp}}},
            }
            for container in spec["containers"]
        ]
        status = {"phase": "Running", "startTime": stamp, "conditions": pod_conditions, "containerStatuses": containers}
        lab.patch(pod, {"status": status}, status=True)
        started.append(ident(pod))
    return started
