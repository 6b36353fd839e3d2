"""A stand-in for CAPMOX v0.9 (cluster-api-provider-proxmox), whose VM lifecycle needs a Proxmox VE
cluster and VMs that boot. It implements the infrastructure provider contract (Cluster API v1beta2)
of its two kinds at infrastructure.cluster.x-k8s.io/v1alpha2:

- ProxmoxCluster: once its Cluster owns it (the Cluster controller sets the owner reference), with
  spec.controlPlaneEndpoint set and an ipv4Config, it adds CAPMOX's finalizer, makes the
  InClusterIPPool `<name>-v4-icip` from the ipv4Config as CAPMOX v0.9.0 does
  (pkg/kubernetes/ipam/ipam.go CreateOrUpdateInClusterIPPool: owned by the ProxmoxCluster, reuse
  grace 60 s) and keeps it so, names it in status.inClusterZoneRef, and reports
  status.initialization.provisioned=true with the conditions Ready and ProxmoxAvailable True.
- ProxmoxMachine: once its Machine owns it, the Cluster's infrastructure is provisioned and the
  Machine names its bootstrap data Secret (CAPMOX waits for the same three), it claims net0's
  address from that pool as CAPMOX does (internal/service/vmservice/ip.go: the IPAddressClaim
  `<machine>-net0-00-inet`, owned by the ProxmoxMachine, which the real IPAM provider answers,
  e2e/controllers/ipam.py), and once the claim names its IPAddress it "clones the VM": a VMID,
  spec.providerID `proxmox://<SMBIOS uuid>`, the claimed address, then
  status.initialization.provisioned=true, status.addresses (InternalIP and Hostname), vmStatus,
  proxmoxNode and the conditions Ready and VirtualMachineProvisioned. On deletion the VM is
  destroyed (its kubelet stand-in stops) and the finalizer is cleared; the claim goes with its
  owner (the management cluster's garbage collector), and the IPAM provider releases the address.
  A template the Proxmox node no longer has (`missing_templates`, a scenario's fault) fails the
  clone as CAPMOX reports it: VirtualMachineProvisioned False, reason CloningFailed, with the
  error its Proxmox client returns, and Ready summarising it; the Machine stays Provisioning, and
  the next pass after the template is back clones.

What it does not know it refuses, naming the field: IPv6, zones, a credentials reference, an
externally managed control plane, a machine without network devices, or without sockets, cores,
memory or boot disk size.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from typing import Any

from e2e.standins.workload.objects import (
    CLUSTER_NAME_LABEL,
    CORE,
    INFRASTRUCTURE,
    Client,
    Record,
    conditions,
    ident,
    need,
    now,
    owner,
    owner_ref,
)

CLUSTER_FINALIZER = "proxmoxcluster.infrastructure.cluster.x-k8s.io"
MACHINE_FINALIZER = "proxmoxmachine.infrastructure.cluster.x-k8s.io"
UNKNOWN_CLUSTER_FIELDS = ("ipv6Config", "zoneConfig", "credentialsRef", "externalManagedControlPlane")
UNKNOWN_MACHINE_FIELDS = ("ipv6Config", "templateSelector", "target")
FIRST_VMID = 100
PROVISIONED = "VirtualMachineProvisioned"
# The IPAM objects, as CAPMOX v0.9.0 makes them (pkg/kubernetes/ipam/ipam.go, api/v1alpha2/types.go).
IPAM = "ipam.cluster.x-k8s.io"
IPAM_CLAIMS = f"{IPAM}/v1beta2"
IN_CLUSTER_POOLS = f"{IPAM}/v1alpha2"
ZONE_LABEL = "topology.kubernetes.io/proxmox-zone"
CAPMOX_IPAM = "ipam.capmox.cluster.x-k8s.io"
POOL_ANNOTATIONS = {f"{CAPMOX_IPAM}/ip-family": "ipv4", f"{CAPMOX_IPAM}/gateway-metric": ""}
CLAIM_ANNOTATIONS = {f"{CAPMOX_IPAM}/pool-ref-counter": "0", f"{CAPMOX_IPAM}/default-gateway": "true"}
# "60s covers typical ARP cache expiry on switches during node replacement" (CAPMOX's own comment).
REUSE_GRACE_SECONDS = 60


def reconcile_clusters(client: Client, record: Record) -> None:
    for item in client.items("proxmoxclusters", INFRASTRUCTURE):
        meta, spec = item["metadata"], item["spec"]
        if "deletionTimestamp" in meta:
            _release(client, item, CLUSTER_FINALIZER)
            continue
        if owner(item, "Cluster", "cluster.x-k8s.io") is None:
            continue
        for key in UNKNOWN_CLUSTER_FIELDS:
            if spec.get(key):  # the CRD defaults externalManagedControlPlane to false
                raise ValueError(f"{ident(item)} spec.{key}: the CAPMOX stand-in does not know it")
        pool = _keep_pool(client, record, item)
        # Named at every reconcile, as CAPMOX's reconcileIPAM does: a cluster provisioned before
        # its pool existed (one taken over) gets the reference too.
        refs = {
            "inClusterIPPoolRef": [{"name": pool}],
            "inClusterZoneRef": [{"zone": "default", "inClusterIPPoolRefV4": {"name": pool}}],
        }
        if need_true(item, "status.initialization.provisioned"):
            if any(item["status"].get(key) != value for key, value in refs.items()):
                client.patch(item, {"status": refs}, status=True)
            continue
        need(item, "spec.controlPlaneEndpoint.host"), need(item, "spec.controlPlaneEndpoint.port")
        client.patch(item, {"metadata": {"finalizers": [*meta.get("finalizers", []), CLUSTER_FINALIZER]}})
        status = {
            **refs,
            "initialization": {"provisioned": True},
            "conditions": _conditions(item, {"Ready": "Ready", "ProxmoxAvailable": "ProxmoxAvailable"}),
        }
        client.patch(item, {"status": status}, status=True)
        record.did("provisioned", ident(item))


def _keep_pool(client: Client, record: Record, proxmox_cluster: dict[str, Any]) -> str:
    """The ProxmoxCluster's InClusterIPPool made, or brought back to its ipv4Config (CAPMOX's
    CreateOrUpdate at each reconcile; the IPAM provider's webhook may refuse it), by name."""
    name = f"{proxmox_cluster['metadata']['name']}-v4-icip"
    wanted = {
        "addresses": need(proxmox_cluster, "spec.ipv4Config.addresses"),
        "prefix": need(proxmox_cluster, "spec.ipv4Config.prefix"),
        "gateway": need(proxmox_cluster, "spec.ipv4Config.gateway"),
        "addressReuseGracePeriodSeconds": REUSE_GRACE_SECONDS,
    }
    live = client.get("inclusterippools", IN_CLUSTER_POOLS, proxmox_cluster["metadata"]["namespace"], name)
    if live is not None and {key: live["spec"].get(key) for key in wanted} == wanted:
        return name
    pool = {
        "apiVersion": IN_CLUSTER_POOLS,
        "kind": "InClusterIPPool",
        "metadata": {
            "name": name,
            "namespace": proxmox_cluster["metadata"]["namespace"],
            "annotations": POOL_ANNOTATIONS,
            "labels": {ZONE_LABEL: "default"},
            "ownerReferences": [owner_ref(proxmox_cluster)],
        },
        "spec": wanted,
    }
    client.apply(pool)
    record.did(f"{'made' if live is None else 'updated'} InClusterIPPool {name}", ident(proxmox_cluster))
    return name


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
        address = _claimed_address(client, record, item, proxmox_cluster, cluster["metadata"]["name"])
        if address is not None:
            _provision(client, record, item, proxmox_cluster, machines, address=address)


def _claimed_address(
    client: Client, record: Record, item: dict[str, Any], proxmox_cluster: dict[str, Any], cluster_name: str
) -> str | None:
    """net0's address from the IPAM provider, or None while its claim is made or not yet answered
    (handleDevices and CreateIPAddressClaim, CAPMOX v0.9.0)."""
    devices = need(item, "spec.network.networkDevices")
    # CAPMOX's ProxmoxMachine webhook sets defaultIPv4 on net0 where no device has it.
    named = [device["name"] for device in devices]
    default = [device["name"] for device in devices if device.get("defaultIPv4")] or [n for n in named if n == "net0"]
    if default != ["net0"]:
        raise ValueError(f"{ident(item)} spec.network.networkDevices: the CAPMOX stand-in knows only net0 as default")
    zones = {zone.get("zone"): zone for zone in (proxmox_cluster.get("status") or {}).get("inClusterZoneRef", [])}
    if "default" not in zones:
        return None  # CAPMOX: "zone default not found", until the ProxmoxCluster names its pool
    pool = zones["default"]["inClusterIPPoolRefV4"]["name"]
    namespace, name = item["metadata"]["namespace"], f"{item['metadata']['name']}-net0-00-inet"
    claim = client.get("ipaddressclaims", IPAM_CLAIMS, namespace, name)
    if claim is None:
        client.apply(
            {
                "apiVersion": IPAM_CLAIMS,
                "kind": "IPAddressClaim",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {CLUSTER_NAME_LABEL: cluster_name, ZONE_LABEL: "default"},
                    "annotations": CLAIM_ANNOTATIONS,
                    "ownerReferences": [owner_ref(item)],
                },
                "spec": {"poolRef": {"apiGroup": IPAM, "kind": "InClusterIPPool", "name": pool}},
            }
        )
        record.did(f"claimed an address from {pool}", ident(item))
        return None
    owned = any(ref.get("uid") == item["metadata"]["uid"] for ref in claim["metadata"].get("ownerReferences", []))
    if claim["spec"]["poolRef"]["name"] != pool or not owned:
        raise ValueError(f"{ident(claim)} is not {ident(item)}'s claim on {pool} (CAPMOX: ClaimConflict)")
    answered = ((claim.get("status") or {}).get("addressRef") or {}).get("name")
    if not answered:
        return None
    address = client.get("ipaddresses", IPAM_CLAIMS, namespace, answered)
    if address is None:
        raise ValueError(f"{ident(claim)} names IPAddress {answered}, which does not exist (CAPMOX: AddressMissing)")
    found: str = need(address, "spec.address")
    return found


def _provision(
    client: Client,
    record: Record,
    item: dict[str, Any],
    proxmox_cluster: dict[str, Any],
    machines: list[dict[str, Any]],
    *,
    address: str,
) -> None:
    spec = item["spec"]
    for key in UNKNOWN_MACHINE_FIELDS:
        if key in spec:
            raise ValueError(f"{ident(item)} spec.{key}: the CAPMOX stand-in does not know it")
    size(item)  # refused here, before a VM is "cloned", when the sizing is not all there
    nodes = spec.get("allowedNodes") or proxmox_cluster["spec"].get("allowedNodes") or [need(item, "spec.sourceNode")]
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
    # machine of the same pass finds its VMID taken (CAPMOX asks Proxmox VE for a free one at each clone).
    spec |= {"providerID": provider_id, "virtualMachineID": vmid}
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
