"""The CAPMOX stand-in (e2e/standins/workload/capmox.py) makes the ProxmoxCluster's InClusterIPPool
and each machine's IPAddressClaim as CAPMOX v0.9.0 makes them, and gives each machine a VM of its
own: in one reconcile pass over several new ProxmoxMachines (a 1 -> 3 scale-up), each gets its own
VMID, providerID and the address the IPAM provider answered its claim with (here the test answers
as the real one, e2e/controllers/ipam.py, does in the box: lowest free first). A
clone from a template the Proxmox node no longer has fails as CAPMOX reports it, once, and the
pass after the template is back clones. The machine it provisions for a workload cluster's control
plane is the KubeadmControlPlane stand-in's (e2e/standins/workload/kubeadm_control_plane.py), made once as KCP
makes one: without it Cluster API neither drains nor deletes a worker's Node."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from e2e.standins.workload import capmox, kubeadm_control_plane
from e2e.standins.workload.objects import BOOTSTRAP, CONTROL_PLANE, CORE, INFRASTRUCTURE, Record

NAMESPACE = "default"
TEMPLATE = 9000
# A KubeadmControlPlane's kubeadmConfigSpec, as the cluster template has its parts.
KUBEADM_CONFIG_SPEC = {
    "initConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [{"name": "provider-id", "value": "proxmox://x"}]}},
    "joinConfiguration": {"nodeRegistration": {"kubeletExtraArgs": [{"name": "provider-id", "value": "proxmox://x"}]}},
    "users": [{"name": "root", "sshAuthorizedKeys": ["ssh-ed25519 AAAA owner@laptop"]}],
}
# As the cluster template has it, with the program's VLAN.
NETWORK = {"networkDevices": [{"name": "net0", "bridge": "vmbr0", "model": "virtio", "vlan": 4}]}
IPV4 = {"addresses": ["192.168.4.41", "192.168.4.42-192.168.4.45"], "prefix": 24, "gateway": "192.168.4.8"}
POOL = "lab1-v4-icip"


class Objects:
    """An API server's objects in memory: what `capmox` reads, and its merge patches applied."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects

    def items(self, resource: str, api_version: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for o in self.objects if (_plural(o), o["apiVersion"]) == (resource, api_version)]

    def get(self, resource: str, api_version: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = [o for o in self.items(resource, api_version) if o["metadata"]["name"] == name]
        return found[0] if found else None

    def patch(self, obj: dict[str, Any], body: dict[str, Any], *, status: bool = False) -> None:
        [live] = [
            o for o in self.objects if o["kind"] == obj["kind"] and o["metadata"]["name"] == obj["metadata"]["name"]
        ]
        _merge(live, body)

    def apply(self, obj: dict[str, Any]) -> None:
        for item in obj["items"] if obj["kind"] == "List" else [obj]:
            if any(
                o["kind"] == item["kind"] and o["metadata"]["name"] == item["metadata"]["name"] for o in self.objects
            ):
                self.patch(item, item)
            else:  # as the API server creates it, at generation 1
                created = copy.deepcopy(item)
                created["metadata"] |= {
                    "generation": 1,
                    "uid": f"uid-{item['metadata']['name']}",
                    "creationTimestamp": f"2026-12-05T09:00:{len(self.objects):02}Z",
                }
                self.objects.append(created)

    def delete(self, obj: dict[str, Any]) -> None:
        """As the API server deletes an object with finalizers: marked, left to its controllers."""
        self.patch(obj, {"metadata": {"deletionTimestamp": "2026-12-05T10:00:00Z"}})


def _plural(obj: dict[str, Any]) -> str:
    kind = obj["kind"].lower()
    return f"{kind}es" if kind.endswith("s") else f"{kind}s"


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:  # a JSON merge patch's null takes the key away
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _object(kind: str, api_version: str, name: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE, "generation": 1, "uid": f"uid-{name}", **metadata},
        "spec": spec,
    }


def _worker(name: str) -> list[dict[str, Any]]:
    """A Machine with its bootstrap data, and its ProxmoxMachine, not yet provisioned."""
    machine = _object(
        "Machine", CORE, name, {"clusterName": "lab1", "bootstrap": {"dataSecretName": f"{name}-bootstrap"}}
    )
    sizing = {"numSockets": 1, "numCores": 2, "memoryMiB": 2048, "disks": {"bootVolume": {"sizeGb": 20}}}
    proxmox_machine = _object(
        "ProxmoxMachine",
        INFRASTRUCTURE,
        name,
        {"sourceNode": "pv1-1", "templateID": TEMPLATE, "network": NETWORK, **sizing},
        ownerReferences=[{"kind": "Machine", "apiVersion": CORE, "name": name}],
    )
    return [machine, proxmox_machine]


def _lab1(*workers: str) -> Objects:
    cluster = _object(
        "Cluster",
        CORE,
        "lab1",
        {"infrastructureRef": {"name": "lab1"}},
    )
    cluster["status"] = {"initialization": {"infrastructureProvisioned": True}}
    proxmox_cluster = _object("ProxmoxCluster", INFRASTRUCTURE, "lab1", {"ipv4Config": IPV4})
    proxmox_cluster["status"] = {"inClusterZoneRef": [{"zone": "default", "inClusterIPPoolRefV4": {"name": POOL}}]}
    return Objects([cluster, proxmox_cluster, *(o for name in workers for o in _worker(name))])


def _ipam_answers(api: Objects, free: list[str]) -> None:
    """What the IPAM provider does with each new claim: an IPAddress (named as the claim) with the
    lowest free address, named in the claim's status."""
    for claim in api.items("ipaddressclaims", capmox.IPAM_CLAIMS):
        if (claim.get("status") or {}).get("addressRef"):
            continue
        name = claim["metadata"]["name"]
        api.apply(
            _object(
                "IPAddress", capmox.IPAM_CLAIMS, name, {"address": free.pop(0), "poolRef": claim["spec"]["poolRef"]}
            )
        )
        api.patch(claim, {"status": {"addressRef": {"name": name}}})


def _reconcile(api: Objects, record: Record, missing_templates: Any = ()) -> None:
    capmox.reconcile_machines(api, record, lambda _: None, missing_templates=missing_templates)  # type: ignore[arg-type]


def test_the_pool_is_made_from_the_ipv4_config_as_capmox_makes_it_and_follows_it() -> None:
    api, record = _lab1(), Record()
    [proxmox_cluster] = api.items("proxmoxclusters", INFRASTRUCTURE)
    api.patch(proxmox_cluster, {"spec": {"controlPlaneEndpoint": {"host": "192.168.4.40", "port": 6443}}})
    api.patch(
        proxmox_cluster, {"metadata": {"ownerReferences": [{"kind": "Cluster", "apiVersion": CORE, "name": "lab1"}]}}
    )

    for _ in range(2):
        capmox.reconcile_clusters(api, record)  # type: ignore[arg-type]

    [pool] = api.items("inclusterippools", capmox.IN_CLUSTER_POOLS)
    assert pool["metadata"]["name"] == POOL
    assert [(o["kind"], o["uid"], o["controller"]) for o in pool["metadata"]["ownerReferences"]] == [
        ("ProxmoxCluster", "uid-lab1", True)
    ]
    assert pool["spec"] == {**IPV4, "addressReuseGracePeriodSeconds": 60}
    assert pool["metadata"]["labels"] == {"topology.kubernetes.io/proxmox-zone": "default"}
    assert pool["metadata"]["annotations"]["ipam.capmox.cluster.x-k8s.io/ip-family"] == "ipv4"
    [proxmox_cluster] = api.items("proxmoxclusters", INFRASTRUCTURE)
    assert proxmox_cluster["status"]["inClusterIPPoolRef"] == [{"name": POOL}]
    assert proxmox_cluster["status"]["initialization"] == {"provisioned": True}
    # Made once; a pass that finds it as wanted writes nothing.
    assert [entry["what"] for entry in record.timeline] == [f"made InClusterIPPool {POOL}", "provisioned"]

    api.patch(proxmox_cluster, {"spec": {"ipv4Config": {"addresses": ["192.168.4.41-192.168.4.50"]}}})
    capmox.reconcile_clusters(api, record)  # type: ignore[arg-type]
    [pool] = api.items("inclusterippools", capmox.IN_CLUSTER_POOLS)
    assert pool["spec"]["addresses"] == ["192.168.4.41-192.168.4.50"]
    assert record.timeline[-1]["what"] == f"updated InClusterIPPool {POOL}"


def test_machines_provisioned_in_one_pass_get_a_vm_and_an_address_each() -> None:
    api, record = _lab1("lab1-workers-a", "lab1-workers-b", "lab1-workers-c"), Record()

    _reconcile(api, record)

    claims = api.items("ipaddressclaims", capmox.IPAM_CLAIMS)
    assert [c["metadata"]["name"] for c in claims] == [f"lab1-workers-{x}-net0-00-inet" for x in "abc"]
    assert [[o["uid"] for o in c["metadata"]["ownerReferences"]] for c in claims] == [
        [f"uid-lab1-workers-{x}"] for x in "abc"
    ]
    assert {c["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] for c in claims} == {"lab1"}
    assert {c["spec"]["poolRef"]["name"] for c in claims} == {POOL}
    # Nothing is cloned before the IPAM provider answers.
    assert all("virtualMachineID" not in o["spec"] for o in api.items("proxmoxmachines", INFRASTRUCTURE))
    _reconcile(api, record)
    assert len(api.items("ipaddressclaims", capmox.IPAM_CLAIMS)) == 3

    _ipam_answers(api, ["192.168.4.41", "192.168.4.42", "192.168.4.43"])
    _reconcile(api, record)

    vms = [
        (o["spec"]["virtualMachineID"], o["spec"]["providerID"], o["status"]["addresses"][0]["address"])
        for o in api.items("proxmoxmachines", INFRASTRUCTURE)
    ]
    assert [vmid for vmid, _, _ in vms] == [100, 101, 102]
    assert [address for _, _, address in vms] == ["192.168.4.41", "192.168.4.42", "192.168.4.43"]
    assert len({provider_id for _, provider_id, _ in vms}) == 3


def test_a_clone_from_a_missing_template_fails_as_capmox_says_until_the_template_is_back() -> None:
    api, record = _lab1("lab1-workers-a"), Record()

    for _ in range(2):
        _reconcile(api, record, missing_templates={TEMPLATE})

    [machine] = api.items("proxmoxmachines", INFRASTRUCTURE)
    said = {c["type"]: (c["status"], c["reason"], c["message"]) for c in machine["status"]["conditions"]}
    message = "unable to find vm template: 500 Configuration file 'nodes/pv1-1/qemu-server/9000.conf' does not exist"
    assert said["VirtualMachineProvisioned"] == ("False", "CloningFailed", message)
    assert said["Ready"] == ("False", "CloningFailed", f"* VirtualMachineProvisioned: {message}")
    assert "virtualMachineID" not in machine["spec"]
    assert "initialization" not in machine["status"]
    assert [entry["what"] for entry in record.timeline] == [f"clone failed: {message}"]

    _reconcile(api, record)
    _ipam_answers(api, ["192.168.4.41"])
    _reconcile(api, record)

    [machine] = api.items("proxmoxmachines", INFRASTRUCTURE)
    assert machine["status"]["initialization"] == {"provisioned": True}
    assert {c["type"]: c["status"] for c in machine["status"]["conditions"]}["Ready"] == "True"


def test_the_control_plane_machine_is_made_once_as_kcp_makes_one_and_provisioned_first() -> None:
    sizing = {"numSockets": 2, "numCores": 4, "memoryMiB": 16384, "disks": {"bootVolume": {"sizeGb": 100}}}
    template_spec = {"sourceNode": "pv1-1", "templateID": TEMPLATE, "network": NETWORK, **sizing}
    kcp = _object(
        "KubeadmControlPlane",
        CONTROL_PLANE,
        "lab1-control-plane",
        {
            "version": "v1.35.9",
            "machineTemplate": {"spec": {"infrastructureRef": {"name": "lab1-control-plane"}}},
            "kubeadmConfigSpec": KUBEADM_CONFIG_SPEC,
        },
        uid="d0682c4e-0000-4000-8000-000000000000",
    )
    kcp["apiVersion"] = CONTROL_PLANE
    template = _object(
        "ProxmoxMachineTemplate", INFRASTRUCTURE, "lab1-control-plane", {"template": {"spec": template_spec}}
    )
    api, record = _lab1(), Record()
    api.objects += [kcp, template]

    made = [kubeadm_control_plane._control_plane_machine(api, record, kcp, "lab1") for _ in range(2)]  # type: ignore[arg-type]

    digest = hashlib.sha256(b"d0682c4e-0000-4000-8000-000000000000/v1.35.9/lab1-control-plane").hexdigest()
    name = f"lab1-control-plane-{digest[:5]}"
    assert [m["metadata"]["name"] for m in made] == [name, name]
    [machine] = api.items("machines", CORE)
    assert machine["metadata"]["labels"] == {
        "cluster.x-k8s.io/cluster-name": "lab1",
        "cluster.x-k8s.io/control-plane": "",
        "cluster.x-k8s.io/control-plane-name": "lab1-control-plane",
    }
    assert [o["kind"] for o in machine["metadata"]["ownerReferences"]] == ["KubeadmControlPlane"]
    # Without KCP's hook, the Machine controller would delete it without draining its Node.
    assert machine["metadata"]["annotations"] == {kubeadm_control_plane.PRE_TERMINATE_HOOK: ""}
    # Its bootstrap data is the real bootstrap provider's, rendered from this KubeadmConfig.
    assert machine["spec"]["bootstrap"] == {
        "configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}
    }
    assert machine["spec"]["infrastructureRef"] == {
        "apiGroup": "infrastructure.cluster.x-k8s.io",
        "kind": "ProxmoxMachine",
        "name": name,
    }
    [config] = api.items("kubeadmconfigs", BOOTSTRAP)
    assert (config["metadata"]["name"], config["metadata"]["labels"]) == (name, machine["metadata"]["labels"])
    # kubeadm init's: no joinConfiguration, and the gate KCP turns on for v1.31 to v1.35.
    assert config["spec"] == {
        **{key: value for key, value in KUBEADM_CONFIG_SPEC.items() if key != "joinConfiguration"},
        "clusterConfiguration": {"featureGates": {"ControlPlaneKubeletLocalMode": True}},
    }
    assert api.items("secrets", "v1") == []
    [vm] = api.items("proxmoxmachines", INFRASTRUCTURE)
    assert vm["spec"] == template_spec
    assert vm["metadata"]["annotations"] == {
        "cluster.x-k8s.io/cloned-from-name": "lab1-control-plane",
        "cluster.x-k8s.io/cloned-from-groupkind": "ProxmoxMachineTemplate.infrastructure.cluster.x-k8s.io",
    }
    assert len(record.timeline) == 1

    # The real Machine controller takes it over (its owner reference) and names the data the real
    # bootstrap provider rendered; then CAPMOX clones it.
    api.patch(vm, {"metadata": {"ownerReferences": [{"kind": "Machine", "apiVersion": CORE, "name": name}]}})
    api.patch(machine, {"spec": {"bootstrap": {"dataSecretName": name}}})
    _reconcile(api, record)
    _ipam_answers(api, ["192.168.4.41"])
    _reconcile(api, record)
    [vm] = api.items("proxmoxmachines", INFRASTRUCTURE)
    assert (vm["spec"]["virtualMachineID"], vm["status"]["addresses"][0]["address"]) == (100, "192.168.4.41")


def _kcp(version: str, template: str) -> dict[str, Any]:
    kcp = _object(
        "KubeadmControlPlane",
        CONTROL_PLANE,
        "lab1-control-plane",
        {
            **{"replicas": 1, "version": version, "kubeadmConfigSpec": {"joinConfiguration": {}}},
            "machineTemplate": {"spec": {"infrastructureRef": {"name": template}}},
        },
        uid="d0682c4e-0000-4000-8000-000000000000",
    )
    kcp["status"] = {"initialization": {"controlPlaneInitialized": True}}
    return kcp


def test_a_version_and_template_bump_rolls_the_control_plane_one_machine_more_first_then_the_old_one_out() -> None:
    """KCP's rollingUpdate with maxSurge 1: a new Machine joins first; once both have a Node, the
    old one is deleted (the real Machine controller then drains it)."""
    spec = {"sourceNode": "pv1-1", "templateID": TEMPLATE, "numSockets": 1, "numCores": 2, "memoryMiB": 4096}
    api, record = _lab1(), Record()
    api.objects += [
        _object("ProxmoxMachineTemplate", INFRASTRUCTURE, name, {"template": {"spec": spec}})
        for name in ("lab1-control-plane-old", "lab1-control-plane-new")
    ]
    old_kcp = _kcp("v1.35.9", "lab1-control-plane-old")
    old = kubeadm_control_plane._control_plane_machine(api, record, old_kcp, "lab1")  # type: ignore[arg-type]
    api.patch(old, {"status": {"nodeRef": {"name": "lab1-cp-a"}}})
    kcp = _kcp("v1.35.10", "lab1-control-plane-new")

    def roll() -> list[dict[str, Any]]:
        machines = kubeadm_control_plane._machines(api, kcp)  # type: ignore[arg-type]
        current = [m for m in machines if kubeadm_control_plane._up_to_date(api, kcp, m)]  # type: ignore[arg-type]
        kubeadm_control_plane._Rollout(api, record, kcp, "lab1", machines, current).step()  # type: ignore[arg-type]
        return kubeadm_control_plane._machines(api, kcp)  # type: ignore[arg-type]

    assert not kubeadm_control_plane._up_to_date(api, kcp, old)  # type: ignore[arg-type]
    surged = roll()
    assert [m["spec"]["version"] for m in surged] == ["v1.35.9", "v1.35.10"]
    new = surged[1]
    assert kubeadm_control_plane._up_to_date(api, kcp, new)  # type: ignore[arg-type]
    [joining] = [c for c in api.items("kubeadmconfigs", BOOTSTRAP) if c["metadata"]["name"] == new["metadata"]["name"]]
    # A control-plane join's (KCP marks it so), without kubeadm init's configuration.
    assert joining["spec"]["joinConfiguration"] == {"controlPlane": {}}
    assert "initConfiguration" not in joining["spec"]
    # Until the new Machine has its Node, nothing is deleted, and no third Machine is made.
    assert [m["metadata"].get("deletionTimestamp") for m in roll()] == [None, None]
    api.patch(new, {"status": {"nodeRef": {"name": "lab1-cp-b"}}})
    rolled = roll()
    assert [(m["spec"]["version"], "deletionTimestamp" in m["metadata"]) for m in rolled] == [
        ("v1.35.9", True),
        ("v1.35.10", False),
    ]
    # While the old one is being deleted, the rollout waits for it to go.
    assert len(roll()) == 2
    assert [entry["what"] for entry in record.timeline][-1] == "out-of-date control-plane Machine deleted"


def test_the_pre_terminate_hook_comes_off_once_the_machine_controller_waits_for_it_or_the_kcp_goes() -> None:
    api, record = _lab1(), Record()
    kcp = _kcp("v1.35.10", "lab1-control-plane-new")
    api.objects.append(kcp)
    hooked = {
        "annotations": {kubeadm_control_plane.PRE_TERMINATE_HOOK: ""},
        "deletionTimestamp": "2026-12-05T10:00:00Z",
    }
    owned = [{"kind": "KubeadmControlPlane", "apiVersion": CONTROL_PLANE, "name": "lab1-control-plane"}]

    def deleting(name: str, reason: str, owners: list[dict[str, str]]) -> dict[str, Any]:
        machine = _object("Machine", CORE, name, {}, ownerReferences=owners, **copy.deepcopy(hooked))
        machine["status"] = {"conditions": [{"type": "Deleting", "status": "True", "reason": reason}]}
        return machine

    api.objects += [
        deleting("draining", "DrainingNode", owned),
        deleting("drained", kubeadm_control_plane.WAITING_FOR_HOOK, owned),
        deleting("orphaned", "DrainingNode", []),
    ]
    kubeadm_control_plane._pre_terminate_hooks(api, record)  # type: ignore[arg-type]

    hooks = {m["metadata"]["name"]: m["metadata"]["annotations"] for m in api.items("machines", CORE)}
    assert hooks == {"draining": {kubeadm_control_plane.PRE_TERMINATE_HOOK: ""}, "drained": {}, "orphaned": {}}
    assert [entry["what"] for entry in record.timeline] == ["pre-terminate hook taken off"] * 2
