"""The CAPMOX stand-in (e2e/standins/workload/capmox.py) gives each machine a VM of its own: in one
reconcile pass over several new ProxmoxMachines (a 1 -> 3 scale-up), each gets its own VMID,
providerID and address from the pool, lowest free first, as the IPAM provider hands them out. A
clone from a template the Proxmox node no longer has fails as CAPMOX reports it, once, and the
pass after the template is back clones. The machine it provisions for a workload cluster's control
plane is the KubeadmControlPlane stand-in's (e2e/standins/workload/kubeadm_control_plane.py), made once as KCP
makes one: without it Cluster API neither drains nor deletes a worker's Node."""

from __future__ import annotations

import base64
import copy
import hashlib
from typing import Any

from e2e.standins.workload import capmox, kubeadm, kubeadm_control_plane, vm_boot
from e2e.standins.workload.objects import CONTROL_PLANE, CORE, INFRASTRUCTURE, Record

NAMESPACE = "default"
TEMPLATE = 9000


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
                    "creationTimestamp": f"2026-12-05T09:00:{len(self.objects):02}Z",
                }
                self.objects.append(created)

    def delete(self, obj: dict[str, Any]) -> None:
        """As the API server deletes an object with finalizers: marked, left to its controllers."""
        self.patch(obj, {"metadata": {"deletionTimestamp": "2026-12-05T10:00:00Z"}})


def _plural(obj: dict[str, Any]) -> str:
    return f"{obj['kind'].lower()}s"


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
        "metadata": {"name": name, "namespace": NAMESPACE, "generation": 1, **metadata},
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
        {"sourceNode": "pv1-1", "templateID": TEMPLATE, **sizing},
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
    proxmox_cluster = _object(
        "ProxmoxCluster",
        INFRASTRUCTURE,
        "lab1",
        {"ipv4Config": {"addresses": ["192.168.4.41", "192.168.4.42-192.168.4.45"]}},
    )
    return Objects([cluster, proxmox_cluster, *(o for name in workers for o in _worker(name))])


def test_machines_provisioned_in_one_pass_get_a_vm_and_an_address_each() -> None:
    api = _lab1("lab1-workers-a", "lab1-workers-b", "lab1-workers-c")

    capmox.reconcile_machines(api, Record(), lambda _: None, missing_templates=())  # type: ignore[arg-type]

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
        capmox.reconcile_machines(api, record, lambda _: None, missing_templates={TEMPLATE})  # type: ignore[arg-type]

    [machine] = api.items("proxmoxmachines", INFRASTRUCTURE)
    said = {c["type"]: (c["status"], c["reason"], c["message"]) for c in machine["status"]["conditions"]}
    message = "unable to find vm template: 500 Configuration file 'nodes/pv1-1/qemu-server/9000.conf' does not exist"
    assert said["VirtualMachineProvisioned"] == ("False", "CloningFailed", message)
    assert said["Ready"] == ("False", "CloningFailed", f"* VirtualMachineProvisioned: {message}")
    assert "virtualMachineID" not in machine["spec"]
    assert "initialization" not in machine["status"]
    assert [entry["what"] for entry in record.timeline] == [f"clone failed: {message}"]

    capmox.reconcile_machines(api, record, lambda _: None, missing_templates=())  # type: ignore[arg-type]

    [machine] = api.items("proxmoxmachines", INFRASTRUCTURE)
    assert machine["status"]["initialization"] == {"provisioned": True}
    assert {c["type"]: c["status"] for c in machine["status"]["conditions"]}["Ready"] == "True"


def test_the_control_plane_machine_is_made_once_as_kcp_makes_one_and_provisioned_first() -> None:
    sizing = {"numSockets": 2, "numCores": 4, "memoryMiB": 16384, "disks": {"bootVolume": {"sizeGb": 100}}}
    template_spec = {"sourceNode": "pv1-1", "templateID": TEMPLATE, **sizing}
    kcp = _object(
        "KubeadmControlPlane",
        CONTROL_PLANE,
        "lab1-control-plane",
        {
            "version": "v1.35.9",
            "machineTemplate": {"spec": {"infrastructureRef": {"name": "lab1-control-plane"}}},
            "kubeadmConfigSpec": {},
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
    assert machine["spec"]["bootstrap"] == {"dataSecretName": name}
    assert machine["spec"]["infrastructureRef"] == {
        "apiGroup": "infrastructure.cluster.x-k8s.io",
        "kind": "ProxmoxMachine",
        "name": name,
    }
    assert [s["metadata"]["name"] for s in api.items("secrets", "v1")] == [name]
    [vm] = api.items("proxmoxmachines", INFRASTRUCTURE)
    assert vm["spec"] == template_spec
    assert vm["metadata"]["annotations"] == {
        "cluster.x-k8s.io/cloned-from-name": "lab1-control-plane",
        "cluster.x-k8s.io/cloned-from-groupkind": "ProxmoxMachineTemplate.infrastructure.cluster.x-k8s.io",
    }
    assert "kubeadm init" in base64.b64decode(api.items("secrets", "v1")[0]["data"]["value"]).decode()
    assert len(record.timeline) == 1

    # The real Machine controller takes it over (its owner reference), then CAPMOX clones it.
    api.patch(vm, {"metadata": {"ownerReferences": [{"kind": "Machine", "apiVersion": CORE, "name": name}]}})
    capmox.reconcile_machines(api, record, lambda _: None, missing_templates=())  # type: ignore[arg-type]
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
    [bootstrap] = [s for s in api.items("secrets", "v1") if s["metadata"]["name"] == new["metadata"]["name"]]
    assert "kubeadm join" in base64.b64decode(bootstrap["data"]["value"]).decode()
    joining = kubeadm.kubeadm_configuration(api, new, vm_boot.meta_data("uuid", "lab1-cp-b"))  # type: ignore[arg-type]
    assert (joining["kind"], joining["controlPlane"]) == ("JoinConfiguration", {})
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
