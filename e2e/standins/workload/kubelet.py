"""A stand-in for the kubelet of each worker VM CAPMOX provisioned: kubeadm joins it to its
workload cluster (whose control plane the KubeadmControlPlane stand-in runs), so it registers a
Node named after the VM with

- spec.providerID: the `provider-id` kubelet argument as the VM's boot hands it over (the
  user-data of CAPMOX's ISO rendered with the ISO's meta-data, the worker's `kubeadm join`
  discovery checked against its cluster: vm_guest.py, vm_boot.py), which must equal the
  ProxmoxMachine's spec.providerID (else the Machine never finds its Node: refused loudly);
- the labels a kubelet sets and the bootstrap data's `node-labels`, its `taints`;
- capacity and allocatable from what the VM has (sockets * cores cpu, memory, the boot disk, 110
  pods), its addresses as its network-config gives them, nodeInfo (the SMBIOS uuid; the kubelet
  version of the meta-data's `kubernetes-version`, the image's) and Ready;

then heartbeats through its Lease in kube-node-lease, and reports each Pod the real kube-scheduler
bound to it Running and Ready (no container runs). A kubelet argument it does not know is refused.
When the ProxmoxMachine goes, its kubelet stops; Cluster API deletes the Node.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from e2e.engine.control_plane import KUBELET_USER, ControlPlane
from e2e.standins.workload import vm_boot
from e2e.standins.workload.objects import (
    CONTROL_PLANE_MACHINE_LABEL,
    CORE,
    INFRASTRUCTURE,
    Client,
    Record,
    ident,
    need,
    need_true,
    now,
    owner,
)
from e2e.standins.workload.vm_guest import Boot, WorkloadGuests

KNOWN_KUBELET_ARGS = ("provider-id", "node-labels")
LEASE_SECONDS = 40
# The kubelet renews its Lease every quarter of its duration (nodeLeaseRenewIntervalFraction 0.25),
# not at each of the stand-ins' passes: a write a second per Node was most of lab1's API server's
# idle work.
RENEW_SECONDS = LEASE_SECONDS / 4


def reconcile(
    client: Client,
    record: Record,
    running: dict[str, ControlPlane],
    registered: set[str],
    guests: WorkloadGuests,
    *,
    renewed: dict[str, float],
) -> None:
    """Registers, heartbeats and runs pods for every provisioned ProxmoxMachine whose workload
    cluster runs and whose VM runs, from that VM's boot among `guests` (none runs for a machine
    CAPMOX reports provisioned with its VM stopped: no kubelet, no Node); `registered` holds
    `namespace/cluster/node` of each Node registered, `renewed` when each last renewed its Lease.
    A control-plane Machine's Node, which the KubeadmControlPlane stand-in registers through
    `register` (and puts in `registered`), heartbeats and runs its pods the same way."""
    nodes: dict[str, list[str]] = {}
    for item in client.items("proxmoxmachines", INFRASTRUCTURE):
        meta = item["metadata"]
        if "deletionTimestamp" in meta or not need_true(item, "status.initialization.provisioned"):
            continue
        machine = client.get("machines", CORE, meta["namespace"], owner(item, "Machine", "cluster.x-k8s.io") or "")
        if machine is None:
            raise KeyError(f"{ident(item)} is provisioned but its Machine is gone")
        key = f"{meta['namespace']}/{need(machine, 'spec.clusterName')}"
        boot = guests.boot_of(need(item, "spec.providerID"))
        if key not in running or boot is None:
            continue
        if CONTROL_PLANE_MACHINE_LABEL in machine["metadata"].get("labels", {}):
            # kubeadm's Node, which the KubeadmControlPlane stand-in registers.
            if f"{key}/{meta['name']}" in registered:
                nodes.setdefault(key, []).append(meta["name"])
            continue
        if f"{key}/{meta['name']}" not in registered:
            _register(Client(running[key], KUBELET_USER), item, boot)
            registered.add(f"{key}/{meta['name']}")
            record.did(f"Node registered in {key}", ident(item))
        nodes.setdefault(key, []).append(meta["name"])
    for key, names in nodes.items():
        lab = Client(running[key], KUBELET_USER)
        due = [name for name in names if time.monotonic() - renewed.get(f"{key}/{name}", -math.inf) >= RENEW_SECONDS]
        if due:
            _heartbeat(lab, due)
            renewed |= dict.fromkeys((f"{key}/{name}" for name in due), time.monotonic())
        for pod in _run_pods(lab, names):
            record.did(f"Pod running in {key}", pod)
        for pod in _remove_terminated(lab, names):
            record.did(f"Pod terminated in {key}", pod)


def forget(registered: set[str], boot: Boot) -> None:
    """The VM is stopped or gone, and with it its kubelet: its Lease is no longer renewed and its
    pods no longer run. The Node stays until Cluster API's Machine controller deletes it, as it
    does once the infrastructure is gone."""
    # A copy first: the Proxmox stand-in's thread calls this while the stand-ins' loop may add.
    for key in [entry for entry in list(registered) if entry.endswith(f"/{boot.name}")]:
        registered.discard(key)


def _register(lab: Client, item: dict[str, Any], boot: Boot) -> None:
    run = vm_boot.booted(boot)
    if run.phase != "join":
        raise ValueError(f"{ident(item)}: a worker's bootstrap data runs kubeadm {run.phase}, not join")
    vm_boot.discover(lab, run.configuration)
    register(lab, node_of(ident(item), item, run.configuration.get("nodeRegistration", {})), boot)


def node_of(
    owner_name: str,
    vm: dict[str, Any],
    registration: dict[str, Any],
    default_taints: Sequence[dict[str, str]] = (),
) -> dict[str, Any]:
    """The Node a kubelet started by kubeadm with `registration` (a Join- or InitConfiguration's
    nodeRegistration, rendered by the VM's cloud-init) registers on the VM of ProxmoxMachine `vm`:
    named after it, its providerID (which must be the ProxmoxMachine's, else the Machine never
    finds its Node), the labels a kubelet sets and the `node-labels` argument's, and the taints as
    kubeadm passes them: `taints` unset or null (as the bootstrap provider writes an unset list) is
    kubeadm's default, `default_taints` (none for a worker's join). A kubelet argument it does not
    know is refused, naming `owner_name`."""
    arguments = vm_boot.kubelet_arguments(registration)
    for argument in arguments:
        if argument not in KNOWN_KUBELET_ARGS:
            raise ValueError(f"{owner_name}: kubelet argument {argument}: the kubelet stand-in does not know it")
    provider_id = arguments.get("provider-id", "")
    if provider_id != need(vm, "spec.providerID"):
        raise ValueError(
            f"{owner_name}: the kubelet would register providerID {provider_id!r}, not {vm['spec']['providerID']!r}"
        )
    name = vm["metadata"]["name"]
    taints = registration.get("taints")
    labels = {
        "kubernetes.io/hostname": name,
        **{"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
        **{"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"},
    }
    for pair in filter(None, arguments.get("node-labels", "").split(",")):
        label, _, value = pair.partition("=")
        labels[label] = value
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": provider_id, "taints": list(default_taints) if taints is None else taints},
    }


def register(lab: Client, node: dict[str, Any], boot: Boot) -> None:
    """`node` (node_of's) created in the workload cluster `lab`, then its status as a kubelet on
    the VM of `boot` reports it: the VM's capacity as allocatable too, its addresses, the pressure
    conditions False, Ready True, nodeInfo with the VM's SMBIOS uuid and the image's kubelet
    version."""
    capacity = {
        **{"cpu": str(boot.cpu), "memory": f"{boot.memory_mib}Mi"},
        **{"ephemeral-storage": f"{boot.disk_gib}Gi", "pods": "110"},
    }
    addresses = [
        *({"type": "InternalIP", "address": address.split("/")[0]} for address in boot.addresses),
        {"type": "Hostname", "address": boot.name},
    ]
    vm_uuid, version = boot.meta["instance-id"], boot.meta["kubernetes-version"]
    lab.apply(node)
    stamp = now()
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
        "kubeletVersion": version,
    }
    status = {
        **{"capacity": capacity, "allocatable": capacity, "addresses": addresses},
        **{"conditions": node_conditions, "nodeInfo": node_info},
    }
    lab.patch(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node["metadata"]["name"]}},
        {"status": status},
        status=True,
    )


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


def _remove_terminated(lab: Client, names: list[str]) -> list[str]:
    """Each pod on these Nodes that is being deleted (a drain's eviction, a scale-down) is gone
    once its containers would have stopped: the kubelet's final delete, with no grace left."""
    removed = []
    for pod in lab.items("pods", "v1"):
        if pod["spec"].get("nodeName") in names and "deletionTimestamp" in pod["metadata"]:
            lab.delete(pod, grace_seconds=0)
            removed.append(ident(pod))
    return removed
