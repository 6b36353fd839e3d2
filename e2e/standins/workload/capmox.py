"""A stand-in for CAPMOX v0.9 (cluster-api-provider-proxmox), whose VM lifecycle needs a Proxmox VE
cluster and VMs that boot. It implements the infrastructure provider contract (Cluster API v1beta2)
of its two kinds at infrastructure.cluster.x-k8s.io/v1alpha2:

- ProxmoxCluster: once its Cluster owns it (the Cluster controller sets the owner reference), with
  spec.controlPlaneEndpoint set and an ipv4Config, it adds CAPMOX's finalizer and reports
  status.initialization.provisioned=true with the conditions Ready and ProxmoxAvailable True.
- ProxmoxMachine: once its Machine owns it, the Cluster's infrastructure is provisioned and the
  Machine names its bootstrap data Secret (CAPMOX waits for the same three), it "clones the VM": a
  VMID, spec.providerID `proxmox://<SMBIOS uuid>`, an address from the ProxmoxCluster's
  ipv4Config, then status.initialization.provisioned=true, status.addresses (InternalIP and
  Hostname), vmStatus, proxmoxNode and the conditions Ready and VirtualMachineProvisioned. On
  deletion the VM is destroyed (its kubelet stand-in stops) and the finalizer is cleared.
  A template the Proxmox node no longer has (`missing_templates`, a scenario's fault) fails the
  clone as CAPMOX reports it: VirtualMachineProvisioned False, reason CloningFailed, with the
  error its Proxmox client returns, and Ready summarising it; the Machine stays Provisioning, and
  the next pass after the template is back clones.

What it does not know it refuses, naming the field: IPv6, zones, a credentials reference, an
externally managed control plane, a machine without sockets, cores, memory or boot disk size.
"""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Callable, Collection
from typing import Any

from e2e.standins.workload.objects import CORE, INFRASTRUCTURE, Client, Record, conditions, ident, need, now, owner

CLUSTER_FINALIZER = "proxmoxcluster.infrastructure.cluster.x-k8s.io"
MACHINE_FINALIZER = "proxmoxmachine.infrastructure.cluster.x-k8s.io"
UNKNOWN_CLUSTER_FIELDS = ("ipv6Config", "zoneConfig", "credentialsRef", "externalManagedControlPlane")
UNKNOWN_MACHINE_FIELDS = ("ipv6Config", "templateSelector", "target")
FIRST_VMID = 100
PROVISIONED = "VirtualMachineProvisioned"


def reconcile_clusters(client: Client, record: Record) -> None:
    for item in client.items("proxmoxclusters", INFRASTRUCTURE):
        meta, spec = item["metadata"], item["spec"]
        if "deletionTimestamp" in meta:
            _release(client, item, CLUSTER_FINALIZER)
            continue
        if need_true(item, "status.initialization.provisioned") or owner(item, "Cluster", "cluster.x-k8s.io") is None:
            continue
        for key in UNKNOWN_CLUSTER_FIELDS:
            if spec.get(key):  # the CRD defaults externalManagedControlPlane to false
                raise ValueError(f"{ident(item)} spec.{key}: the CAPMOX stand-in does not know it")
        need(item, "spec.controlPlaneEndpoint.host"), need(item, "spec.controlPlaneEndpoint.port")
        _pool(item)
        client.patch(item, {"metadata": {"finalizers": [*meta.get("finalizers", []), CLUSTER_FINALIZER]}})
        status = {
            "initialization": {"provisioned": True},
            "conditions": _conditions(item, {"Ready": "Ready", "ProxmoxAvailable": "ProxmoxAvailable"}),
        }
        client.patch(item, {"status": status}, status=True)
        record.did("provisioned", ident(item))


def reconcile_machines(
    client: Client, record: Record, destroy: Callable[[dict[str, Any]], None], missing_templates: Collection[int]
) -> None:
    """`destroy(machine)` takes a deleted ProxmoxMachine's VM away (its kubelet, in the workload cluster);
    a clone from one of `missing_templates` fails."""
    machines = client.items("proxmoxmachines", INFRASTRUCTURE)
    for item in machines:
        meta = item["metadata"]
        if "deletionTimestamp" in meta:
            if MACHINE_FINALIZER in meta.get("finalizers", []):
                destroy(item)
                _release(client, item, MACHINE_FINALIZER)
                record.did("destroyed", ident(item))
            continue
        if need_true(item, "status.initialization.provisioned"):
            continue
        machine_name = owner(item, "Machine", "cluster.x-k8s.io")
        if machine_name is None:
            continue
        machine = client.get("machines", CORE, meta["namespace"], machine_name)
        if machine is None or not machine["spec"]["bootstrap"].get("dataSecretName"):
            continue
        cluster = client.get("clusters", CORE, meta["namespace"], need(machine, "spec.clusterName"))
        if cluster is None or not need_true(cluster, "status.initialization.infrastructureProvisioned"):
            continue
        proxmox_cluster = client.get(
            "proxmoxclusters", INFRASTRUCTURE, meta["namespace"], need(cluster, "spec.infrastructureRef.name")
        )
        if proxmox_cluster is None:
            raise KeyError(f"{ident(cluster)}'s ProxmoxCluster is gone")
        template = int(need(item, "spec.templateID"))
        if template in missing_templates:
            _clone_failed(client, record, item, template)
            continue
        _provision(client, record, item, proxmox_cluster, machines)


def _provision(
    client: Client,
    record: Record,
    item: dict[str, Any],
    proxmox_cluster: dict[str, Any],
    machines: list[dict[str, Any]],
) -> None:
    spec = item["spec"]
    for key in UNKNOWN_MACHINE_FIELDS:
        if key in spec:
            raise ValueError(f"{ident(item)} spec.{key}: the CAPMOX stand-in does not know it")
    size(item)  # refused here, before a VM is "cloned", when the sizing is not all there
    nodes = spec.get("allowedNodes") or proxmox_cluster["spec"].get("allowedNodes") or [need(item, "spec.sourceNode")]
    taken = {address["address"] for other in machines for address in (other.get("status") or {}).get("addresses", [])}
    address = next((str(ip) for ip in _pool(proxmox_cluster) if str(ip) not in taken), None)
    if address is None:
        raise ValueError(f"{ident(proxmox_cluster)}: no address left in spec.ipv4Config.addresses for {ident(item)}")
    vmids = [other["spec"].get("virtualMachineID", 0) for other in machines]
    vmid = spec.get("virtualMachineID") or max([FIRST_VMID - 1, *vmids]) + 1
    provider_id = spec.get("providerID") or f"proxmox://{uuid.uuid4()}"
    finalizers = [*item["metadata"].get("finalizers", []), MACHINE_FINALIZER]
    client.patch(
        item, {"metadata": {"finalizers": finalizers}, "spec": {"providerID": provider_id, "virtualMachineID": vmid}}
    )
    status = {
        "initialization": {"provisioned": True},
        "addresses": [
            {"type": "InternalIP", "address": address},
            {"type": "Hostname", "address": item["metadata"]["name"]},
        ],
        "ipAddresses": [{"net": "default", "ipv4": [address]}],
        "vmStatus": "ready",
        "bootstrapDataProvided": True,
        "proxmoxNode": nodes[0],
        "conditions": _conditions(item, {"Ready": "Ready", PROVISIONED: PROVISIONED}),
    }
    client.patch(item, {"status": status}, status=True)
    # The pass read the machines once: what this one took goes into that list too, so that the next
    # machine of the same pass finds its VMID and address taken (CAPMOX asks Proxmox VE for a free
    # VMID, and the IPAM provider for a free address, at each clone).
    spec |= {"providerID": provider_id, "virtualMachineID": vmid}
    item["status"] = {**(item.get("status") or {}), "addresses": status["addresses"]}
    record.did(f"provisioned VM {vmid} on {nodes[0]} at {address} as {provider_id}", ident(item))


def _clone_failed(client: Client, record: Record, item: dict[str, Any], template: int) -> None:
    """What CAPMOX v0.9.0 reports when the clone's template is gone: its Proxmox client (go-proxmox
    v0.6.0) reads the template's status, Proxmox VE answers 500 with the reason in the status line,
    which the client returns as the error (proxmox.go handleResponse), wrapped by CloneVM
    (pkg/proxmox/goproxmox/api_client.go) and set on the condition by reconcileVirtualMachine
    (internal/service/vmservice/vm.go); Ready is the summary of that one condition (pkg/scope/machine.go)."""
    config = f"nodes/{need(item, 'spec.sourceNode')}/qemu-server/{template}.conf"
    message = f"unable to find vm template: 500 Configuration file '{config}' does not exist"
    said = {c["type"]: c for c in (item.get("status") or {}).get("conditions", [])}
    if said.get(PROVISIONED, {}).get("message") == message:
        return  # CAPMOX keeps the condition's time while it retries
    failed = {
        "status": "False",
        "reason": "CloningFailed",
        "observedGeneration": item["metadata"]["generation"],
        "lastTransitionTime": now(),
    }
    status = {
        "conditions": [
            {"type": PROVISIONED, "message": message, **failed},
            {"type": "Ready", "message": f"* {PROVISIONED}: {message}", **failed},
            *conditions(item["metadata"]["generation"], {"Paused": "NotPaused"}),
        ]
    }
    client.patch(item, {"status": status}, status=True)
    record.did(f"clone failed: {message}", ident(item))


def size(item: dict[str, Any]) -> dict[str, str]:
    """The capacity a VM of this ProxmoxMachine (or its template's spec) has, as a kubelet reports
    it: cpu = sockets * cores, memory, ephemeral-storage = the boot volume."""
    cpu = int(need(item, "spec.numSockets")) * int(need(item, "spec.numCores"))
    memory, disk = int(need(item, "spec.memoryMiB")), int(need(item, "spec.disks.bootVolume.sizeGb"))
    return {"cpu": str(cpu), "memory": f"{memory}Mi", "ephemeral-storage": f"{disk}Gi", "pods": "110"}


def _pool(proxmox_cluster: dict[str, Any]) -> list[ipaddress.IPv4Address]:
    """The addresses of spec.ipv4Config.addresses: `a-b` ranges, CIDRs and single addresses."""
    found: list[ipaddress.IPv4Address] = []
    for entry in need(proxmox_cluster, "spec.ipv4Config.addresses"):
        if "-" in entry:
            first, last = (ipaddress.IPv4Address(end.strip()) for end in entry.split("-"))
            found += [ipaddress.IPv4Address(n) for n in range(int(first), int(last) + 1)]
        elif "/" in entry:
            found += list(ipaddress.IPv4Network(entry, strict=False).hosts())
        else:
            found.append(ipaddress.IPv4Address(entry))
    return found


def need_true(obj: dict[str, Any], path: str) -> bool:
    """Whether the boolean at `path` is set and true (absent is false, as the contract reads it)."""
    try:
        return need(obj, path) is True
    except KeyError:
        return False


def _conditions(item: dict[str, Any], reasons: dict[str, str]) -> list[dict[str, Any]]:
    return conditions(item["metadata"]["generation"], {**reasons, "Paused": "NotPaused"})


def _release(client: Client, item: dict[str, Any], finalizer: str) -> None:
    finalizers = item["metadata"].get("finalizers", [])
    if finalizer in finalizers:
        client.patch(item, {"metadata": {"finalizers": [f for f in finalizers if f != finalizer] or None}})
