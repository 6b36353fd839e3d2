"""The CAPMOX stand-in (e2e/standins/workload/capmox.py) gives each machine a VM of its own: in one
reconcile pass over several new ProxmoxMachines (a 1 -> 3 scale-up), each gets its own VMID,
providerID and address from the pool, lowest free first, as the IPAM provider hands them out. A
clone from a template the Proxmox node no longer has fails as CAPMOX reports it, once, and the
pass after the template is back clones. The machine it provisions for a workload cluster's control
plane is the KubeadmControlPlane stand-in's (e2e/standins/workload/kubeadm.py), made once as KCP
makes one: without it Cluster API neither drains nor deletes a worker's Node."""

from __future__ import annotations

import copy
from typing import Any

from e2e.standins.workload import capmox, kubeadm
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
                created["metadata"]["generation"] = 1
                self.objects.append(created)


def _plural(obj: dict[str, Any]) -> str:
    return f"{obj['kind'].lower()}s"


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
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

    made = [kubeadm._control_plane_machine(api, record, kcp, "lab1") for _ in range(2)]  # type: ignore[arg-type]

    name = "lab1-control-plane-d0682"
    assert [m["metadata"]["name"] for m in made] == [name, name]
    [machine] = api.items("machines", CORE)
    assert machine["metadata"]["labels"] == {
        "cluster.x-k8s.io/cluster-name": "lab1",
        "cluster.x-k8s.io/control-plane": "",
        "cluster.x-k8s.io/control-plane-name": "lab1-control-plane",
    }
    assert [o["kind"] for o in machine["metadata"]["ownerReferences"]] == ["KubeadmControlPlane"]
    assert machine["spec"]["bootstrap"] == {"dataSecretName": name}
    assert machine["spec"]["infrastructureRef"] == {
        "apiGroup": "infrastructure.cluster.x-k8s.io",
        "kind": "ProxmoxMachine",
        "name": name,
    }
    assert [s["metadata"]["name"] for s in api.items("secrets", "v1")] == [name]
    [vm] = api.items("proxmoxmachines", INFRASTRUCTURE)
    assert vm["spec"] == template_spec
    assert len(record.timeline) == 1

    # The real Machine controller takes it over (its owner reference), then CAPMOX clones it.
    api.patch(vm, {"metadata": {"ownerReferences": [{"kind": "Machine", "apiVersion": CORE, "name": name}]}})
    capmox.reconcile_machines(api, record, lambda _: None, missing_templates=())  # type: ignore[arg-type]
    [vm] = api.items("proxmoxmachines", INFRASTRUCTURE)
    assert (vm["spec"]["virtualMachineID"], vm["status"]["addresses"][0]["address"]) == (100, "192.168.4.41")
