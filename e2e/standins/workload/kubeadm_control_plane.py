"""A stand-in for Cluster API's KubeadmControlPlane where it cannot run here (kubeadm on VMs, and
KCP's etcd health checks through a port-forward to control-plane pods); every machine's bootstrap
data, the control plane's too, is the real kubeadm bootstrap provider's (e2e/controllers/cluster_api.py):

- KubeadmControlPlane (controlplane.cluster.x-k8s.io/v1beta2): once its Cluster owns it and the
  Cluster's infrastructure is provisioned with a control-plane endpoint, the workload cluster's
  control plane starts for real at that endpoint (etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler; e2e/engine/control_plane.py), its admin kubeconfig and its certificates are
  written where Cluster API writes them (Secrets `<cluster>-kubeconfig`, key `value`, and
  `<cluster>-ca`, `-etcd`, `-proxy` and `-sa`, keys `tls.crt` and `tls.key`, from which the
  bootstrap provider renders a control plane's data and pins the CA in each join; type
  cluster.x-k8s.io/secret, labelled with the cluster's name, owned by the KCP), and the KCP's
  status says what the contract asks:
  initialization.controlPlaneInitialized, the replica counts, selector, version,
  observedGeneration and the conditions Available (which the Cluster's ControlPlaneAvailable
  mirrors), Initialized, CertificatesAvailable, EtcdClusterHealthy, ControlPlaneComponentsHealthy.
  The control plane's VM is made as KCP makes a control-plane machine: a ProxmoxMachine cloned
  from the KCP's ProxmoxMachineTemplate (with Cluster API's cloned-from annotations), a
  KubeadmConfig of the KCP's kubeadmConfigSpec as KCP computes it (`kubeadm_config_spec`: init for
  the first, a control-plane join after), which the real bootstrap provider renders, and a Machine
  owned by the KCP with Cluster API's control-plane labels, which the real
  Machine controller reconciles and CAPMOX provisions like any other (a VM cloned on the Proxmox
  stand-in, an address from the pool, a providerID). With it, Cluster API drains a worker's Node before it
  deletes the worker, and then deletes the Node (isDeleteNodeAllowed in
  internal/controllers/machine/machine_controller.go: with no control-plane Machine it does
  neither). Once that VM is provisioned, its boot reads that data from CAPMOX's ISO (vm_guest.py,
  kubeadm.py: kubeadm init, or a
  control-plane join whose discovery is checked) and its Node is registered through the kubelet stand-in's
  code (kubelet.node_of, kubelet.register; the kubelet stand-in heartbeats it and runs its pods
  until the VM is gone) with the providerID of the bootstrap data's kubelet arguments (which must
  equal the ProxmoxMachine's), the `node-role.kubernetes.io/control-plane` label and kubeadm's
  default `node-role.kubernetes.io/control-plane:NoSchedule` taint, the capacity of its template
  and the Machine's version; with the first one, kubeadm init's CoreDNS (two replicas tolerating
  that taint) is applied, so that what tolerates the control plane runs there and never asks the
  autoscaler for a worker, and the KCP is reported initialized.
  A version or template that a Machine does not have rolls the control plane as KCP's
  rollingUpdate does with its default maxSurge of 1: a new Machine joins first (its bootstrap data
  a control-plane `kubeadm join`), and once every Machine has its Node the out-of-date one is
  deleted; the real Machine controller drains its Node (as it does for a KCP's Machine only while
  KCP's pre-terminate hook is on it), waits for the hook, which the stand-in then takes off as KCP
  does, deletes its ProxmoxMachine (whose VM CAPMOX destroys, freeing its address)
  and its Node. The status follows: replicas,
  upToDateReplicas, readyReplicas, RollingOut, MachinesUpToDate.
  What it leaves out is the rest of KCP's logic: one control plane process runs at the endpoint
  whatever the Machines are, started before any Machine (no kubeadm init on a VM, no etcd members
  to move), so spec.replicas other than 1 is refused.
"""

from __future__ import annotations

import base64
import copy
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from e2e.engine.control_plane import ADMIN_USER, OTHER_CAS, ControlPlane
from e2e.standins.workload import kubeadm
from e2e.standins.workload.objects import (
    BOOTSTRAP,
    CLUSTER_NAME_LABEL,
    CONTROL_PLANE,
    CONTROL_PLANE_MACHINE_LABEL,
    CORE,
    INFRASTRUCTURE,
    SECRET_TYPE,
    Client,
    Record,
    conditions,
    ident,
    need,
    need_true,
    owner,
    owner_ref,
)
from e2e.standins.workload.vm_guest import WorkloadGuests

# Cluster API's label naming a control-plane Machine's KCP (api/core/v1beta2/machine_types.go).
CONTROL_PLANE_NAME_LABEL = "cluster.x-k8s.io/control-plane-name"
# What Cluster API writes on an object it clones from a template (api/core/v1beta2/common_types.go):
# KCP compares the name with its template's to know whether a Machine is up to date.
CLONED_FROM_NAME = "cluster.x-k8s.io/cloned-from-name"
CLONED_FROM_GROUP_KIND = "cluster.x-k8s.io/cloned-from-groupkind"
INFRASTRUCTURE_GROUP = INFRASTRUCTURE.split("/", 1)[0]
# KCP's hook on each of its Machines (api/controlplane/kubeadm/v1beta2): the Machine controller
# drains a control-plane Machine's Node only while it is there, and deletes the VM once it is gone.
PRE_TERMINATE_HOOK = "pre-terminate.delete.hook.machine.cluster.x-k8s.io/kcp-cleanup"
WAITING_FOR_HOOK = "WaitingForPreTerminateHook"
# KubeadmControlPlane's default rollout.strategy.rollingUpdate.maxSurge: one Machine more than
# spec.replicas while it rolls out.
MAX_SURGE = 1
# The feature gate KCP turns on for the versions that have it (desiredstate.DefaultFeatureGates).
LOCAL_MODE_GATE = "ControlPlaneKubeletLocalMode"
BOOTSTRAP_GROUP = BOOTSTRAP.split("/", 1)[0]
KCP_CONDITIONS = {
    "Available": "Available",
    "Initialized": "Initialized",
    "CertificatesAvailable": "Available",
    "EtcdClusterHealthy": "Healthy",
    "ControlPlaneComponentsHealthy": "Healthy",
    "MachinesReady": "Ready",
    "Remediating": "NotRemediating",
    "Deleting": "NotDeleting",
    "Paused": "NotPaused",
}


def reconcile_control_planes(
    client: Client,
    record: Record,
    running: dict[str, ControlPlane],
    start: Callable[[str, str, int], ControlPlane],
    *,
    registered: set[str],
    control_plane_nodes: dict[str, str],
    guests: WorkloadGuests,
) -> None:
    """Each KubeadmControlPlane, and the pre-terminate hook of each of its Machines being deleted
    (`_pre_terminate_hooks`). `running` holds each workload cluster's control plane by `namespace/cluster`;
    `start(key, host, port)` starts one for the rest of the stand-ins' block. Each control-plane
    Node registered goes into `registered` as `namespace/cluster/node`, where the kubelet stand-in
    heartbeats it (kubelet.reconcile) until its VM is gone; `control_plane_nodes` gets the name of
    the newest one, by `namespace/cluster`."""
    _pre_terminate_hooks(client, record)
    for kcp in client.items("kubeadmcontrolplanes", CONTROL_PLANE):
        meta = kcp["metadata"]
        cluster_name = owner(kcp, "Cluster", "cluster.x-k8s.io")
        if cluster_name is None or "deletionTimestamp" in meta:
            continue
        cluster = client.get("clusters", CORE, meta["namespace"], cluster_name)
        if cluster is None or not need_true(cluster, "status.initialization.infrastructureProvisioned"):
            continue
        endpoint = cluster["spec"].get("controlPlaneEndpoint") or {}
        if not endpoint.get("host"):
            continue  # the Cluster controller copies it from the ProxmoxCluster
        if (replicas := need(kcp, "spec.replicas")) != 1:
            raise ValueError(f"{ident(kcp)} spec.replicas={replicas}: the stand-in runs one control plane")
        key = f"{meta['namespace']}/{cluster_name}"
        if key not in running:
            running[key] = start(key, endpoint["host"], int(endpoint["port"]))
            record.did(f"control plane up at {endpoint['host']}:{endpoint['port']}", ident(kcp))
        _write_cluster_secrets(client, record, kcp, cluster_name, running[key])
        machines = _machines(client, kcp) or [_control_plane_machine(client, record, kcp, cluster_name)]
        nodes = [
            node
            for machine in machines
            if (
                node := _registered_once_provisioned(
                    client, kcp, machine, running[key], registered=registered, key=key, guests=guests
                )
            )
        ]
        if not nodes:
            continue  # kubeadm init runs once CAPMOX has cloned the VM
        if key not in control_plane_nodes:
            kubeadm.kubeadm_addons(running[key])
            record.did(f"control-plane Node {nodes[-1]} registered, CoreDNS applied", ident(kcp))
        elif control_plane_nodes[key] != nodes[-1]:
            record.did(f"control-plane Node {nodes[-1]} joined", ident(kcp))
        control_plane_nodes[key] = nodes[-1]
        up_to_date = [machine for machine in machines if _up_to_date(client, kcp, machine)]
        rollout = _Rollout(client, record, kcp, cluster_name, machines, up_to_date)
        rollout.step()
        rollout.report()


def _pre_terminate_hooks(client: Client, record: Record) -> None:
    """KCP's pre-terminate hook taken off a control-plane Machine being deleted, as KCP does
    (reconcilePreTerminateHook in controlplane/kubeadm/internal/controllers/controller.go): once
    the Machine controller waits for it (the Machine's Deleting condition, WaitingForPreTerminateHook,
    after the drain), with etcd's leadership and member moved first (none here: one control plane
    process runs at the endpoint whatever the Machines are); and at once, with no drain, from the
    Machines of a KCP that is going (reconcileDelete)."""
    for machine in client.items("machines", CORE):
        meta = machine["metadata"]
        if "deletionTimestamp" not in meta or PRE_TERMINATE_HOOK not in (meta.get("annotations") or {}):
            continue
        kcp_name = owner(machine, "KubeadmControlPlane", CONTROL_PLANE.split("/", 1)[0])
        kcp = client.get("kubeadmcontrolplanes", CONTROL_PLANE, meta["namespace"], kcp_name) if kcp_name else None
        said = {c["type"]: c for c in (machine.get("status") or {}).get("conditions", [])}.get("Deleting") or {}
        waiting = (said.get("status"), said.get("reason")) == ("True", WAITING_FOR_HOOK)
        if kcp is None or "deletionTimestamp" in kcp["metadata"] or waiting:
            client.patch(machine, {"metadata": {"annotations": {PRE_TERMINATE_HOOK: None}}})
            record.did("pre-terminate hook taken off", ident(machine))


def _machines(client: Client, kcp: dict[str, Any]) -> list[dict[str, Any]]:
    """The KCP's Machines, oldest first (a deleting one among them, as KCP counts it until it is gone)."""
    meta = kcp["metadata"]
    return sorted(
        (
            machine
            for machine in client.items("machines", CORE, meta["namespace"])
            if machine["metadata"].get("labels", {}).get(CONTROL_PLANE_NAME_LABEL) == meta["name"]
        ),
        key=lambda machine: (machine["metadata"]["creationTimestamp"], machine["metadata"]["name"]),
    )


def _up_to_date(client: Client, kcp: dict[str, Any], machine: dict[str, Any]) -> bool:
    """KCP's rollout criteria that the program's changes meet: the Machine's version is the KCP's,
    and its ProxmoxMachine was cloned from the KCP's template (Cluster API's cloned-from
    annotation); the stand-in makes no other change to a control-plane machine."""
    vm = client.get("proxmoxmachines", INFRASTRUCTURE, machine["metadata"]["namespace"], machine["metadata"]["name"])
    cloned_from = ((vm or {}).get("metadata", {}).get("annotations") or {}).get(CLONED_FROM_NAME)
    return bool(
        machine["spec"].get("version") == need(kcp, "spec.version")
        and cloned_from == need(kcp, "spec.machineTemplate.spec.infrastructureRef.name")
    )


@dataclass(frozen=True)
class _Rollout:
    """A KCP's Machines as one pass reads them (oldest first), and those of them up to date."""

    client: Client
    record: Record
    kcp: dict[str, Any]
    cluster_name: str
    machines: list[dict[str, Any]]
    up_to_date: list[dict[str, Any]]

    def step(self) -> None:
        """KCP's rollingUpdate (controlplane/kubeadm/internal/controllers/update.go) with its default
        maxSurge of 1: below one Machine more than spec.replicas, a new Machine joins first; at it, once
        every Machine has its Node (scaleDownControlPlane's preflight checks), the oldest out-of-date
        one is deleted, and the real Machine controller drains and deletes its Node, then its
            ProxmoxMachine (with another control-plane Machine active, isDeleteNodeAllowed lets it)."""
        machines = self.machines
        outdated = [machine for machine in machines if machine not in self.up_to_date]
        if not outdated or any("deletionTimestamp" in machine["metadata"] for machine in machines):
            return
        if len(machines) < need(self.kcp, "spec.replicas") + MAX_SURGE:
            _control_plane_machine(self.client, self.record, self.kcp, self.cluster_name)
            return
        if all((machine.get("status") or {}).get("nodeRef") for machine in machines):
            self.client.delete(outdated[0])
            self.record.did("out-of-date control-plane Machine deleted", ident(outdated[0]))

    def report(self) -> None:
        """The KCP's status as the contract reads it, written when what it says changes; its
        version the lowest of its Machines' (as KCP's updateStatus sets it)."""
        machines, kcp = self.machines, self.kcp
        meta, wanted = kcp["metadata"], need(kcp, "spec.replicas")
        ready = [machine for machine in machines if (machine.get("status") or {}).get("nodeRef")]
        rolling = len(self.up_to_date) < len(machines)
        reasons = KCP_CONDITIONS | {
            "MachinesUpToDate": "NotUpToDate" if rolling else "UpToDate",
            "RollingOut": "RollingOut" if rolling else "NotRollingOut",
            "ScalingUp": "ScalingUp" if len(machines) < wanted else "NotScalingUp",
            "ScalingDown": "ScalingDown" if len(machines) > wanted else "NotScalingDown",
        }
        lowest = min((need(machine, "spec.version") for machine in machines), key=_release)
        status = {
            "initialization": {"controlPlaneInitialized": True},
            **{"replicas": len(machines), "readyReplicas": len(ready), "availableReplicas": len(ready)},
            "upToDateReplicas": len(self.up_to_date),
            "selector": f"{CLUSTER_NAME_LABEL}={self.cluster_name},{CONTROL_PLANE_MACHINE_LABEL}",
            **{"version": lowest, "observedGeneration": meta["generation"]},
        }
        before = kcp.get("status") or {}
        said = {condition["type"]: condition["reason"] for condition in before.get("conditions", [])}
        if said == reasons and all(before.get(field) == value for field, value in status.items()):
            return
        self.client.patch(
            kcp, {"status": {**status, "conditions": conditions(meta["generation"], reasons)}}, status=True
        )
        self.record.did(
            f"status: {len(machines)} Machines, {len(self.up_to_date)} up to date, {len(ready)} with a Node", ident(kcp)
        )


def _release(version: str) -> tuple[int, ...]:
    """`v1.35.10` as (1, 35, 10), which orders as releases do."""
    return tuple(int(part) for part in version.lstrip("v").split("."))


def _control_plane_machine(client: Client, record: Record, kcp: dict[str, Any], cluster_name: str) -> dict[str, Any]:
    """A control-plane Machine for the KCP's spec, made as KCP makes one
    (cloneConfigsAndGenerateMachine in controlplane/kubeadm/internal/controllers/helpers.go), once:
    named `<kcp>-<5 characters>` (here of the KCP's uid, version and template, so that a stand-in
    started again finds it), with the labels of desiredstate.ControlPlaneMachineLabels, its
    ProxmoxMachine cloned from the KCP's template (with Cluster API's cloned-from annotations) and
    owned by the KCP until the Machine controller takes it over, its bootstrap data a Secret owned
    by the KCP: kubeadm init for the first, a control-plane join for the next."""
    meta = kcp["metadata"]
    version = need(kcp, "spec.version")
    template_name = need(kcp, "spec.machineTemplate.spec.infrastructureRef.name")
    digest = hashlib.sha256(f"{meta['uid']}/{version}/{template_name}".encode()).hexdigest()
    namespace, name = meta["namespace"], f"{meta['name']}-{digest[:5]}"
    found = client.get("machines", CORE, namespace, name)
    if found is not None:
        return found
    template = _machine_template(client, kcp)
    labels = {
        **(need(kcp, "spec.machineTemplate").get("metadata") or {}).get("labels", {}),
        **{CLUSTER_NAME_LABEL: cluster_name, CONTROL_PLANE_MACHINE_LABEL: "", CONTROL_PLANE_NAME_LABEL: meta["name"]},
    }
    made = {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner_ref(kcp)]}
    cloned = {CLONED_FROM_NAME: template_name, CLONED_FROM_GROUP_KIND: f"ProxmoxMachineTemplate.{INFRASTRUCTURE_GROUP}"}
    config = {
        **{"apiVersion": BOOTSTRAP, "kind": "KubeadmConfig", "metadata": made},
        "spec": kubeadm_config_spec(kcp, join=need_true(kcp, "status.initialization.controlPlaneInitialized")),
    }
    machine = {
        "apiVersion": CORE,
        "kind": "Machine",
        "metadata": {**made, "annotations": {PRE_TERMINATE_HOOK: ""}},
        "spec": {
            "clusterName": cluster_name,
            "version": version,
            "bootstrap": {"configRef": {"apiGroup": BOOTSTRAP_GROUP, "kind": "KubeadmConfig", "name": name}},
            "infrastructureRef": {"apiGroup": INFRASTRUCTURE_GROUP, "kind": "ProxmoxMachine", "name": name},
        },
    }
    infrastructure_machine = {
        **{"apiVersion": INFRASTRUCTURE, "kind": "ProxmoxMachine", "metadata": {**made, "annotations": cloned}},
        "spec": need(template, "spec.template.spec"),
    }
    client.apply({"apiVersion": "v1", "kind": "List", "items": [config, infrastructure_machine, machine]})
    record.did("control-plane Machine, ProxmoxMachine and KubeadmConfig made", f"Machine/{namespace}/{name}")
    return machine


def kubeadm_config_spec(kcp: dict[str, Any], *, join: bool) -> dict[str, Any]:
    """A control-plane machine's KubeadmConfig spec as KCP computes it from its kubeadmConfigSpec
    (ComputeDesiredKubeadmConfig in controlplane/kubeadm/internal/desiredstate/desired_state.go):
    the first machine's without joinConfiguration (kubeadm init); a joining one's without
    initConfiguration, its joinConfiguration marked a control plane's; and DefaultFeatureGates:
    kubeadm's ControlPlaneKubeletLocalMode on, unless set, from Kubernetes v1.31 until v1.36, where
    the gate went GA."""
    spec: dict[str, Any] = copy.deepcopy(need(kcp, "spec.kubeadmConfigSpec"))
    if join:
        spec.pop("initConfiguration", None)
        spec["joinConfiguration"] = {"controlPlane": {}, **spec.get("joinConfiguration", {})}
    else:
        spec.pop("joinConfiguration", None)
    if (1, 31) <= _release(need(kcp, "spec.version"))[:2] < (1, 36):
        gates = spec.setdefault("clusterConfiguration", {}).setdefault("featureGates", {})
        gates.setdefault(LOCAL_MODE_GATE, True)
    return spec


def _machine_template(client: Client, kcp: dict[str, Any]) -> dict[str, Any]:
    name = need(kcp, "spec.machineTemplate.spec.infrastructureRef.name")
    template = client.get("proxmoxmachinetemplates", INFRASTRUCTURE, kcp["metadata"]["namespace"], name)
    if template is None:
        raise KeyError(f"{ident(kcp)}: no ProxmoxMachineTemplate {name}")
    return template


def _registered_once_provisioned(
    client: Client,
    kcp: dict[str, Any],
    machine: dict[str, Any],
    lab: ControlPlane,
    *,
    registered: set[str],
    key: str,
    guests: WorkloadGuests,
) -> str | None:
    """The name of the Node of the control-plane `machine`, registered once its VM is provisioned
    and runs (as kubeadm init or join does, `_register_control_plane_node`); None until then, or
    once the Machine is being deleted and its VM gone."""
    meta = machine["metadata"]
    vm = client.get("proxmoxmachines", INFRASTRUCTURE, meta["namespace"], meta["name"])
    if vm is None or "deletionTimestamp" in vm["metadata"] or not need_true(vm, "status.initialization.provisioned"):
        return None
    name: str = vm["metadata"]["name"]
    if f"{key}/{name}" not in registered:
        boot = guests.boot_of(need(vm, "spec.providerID"))
        if "deletionTimestamp" in meta or boot is None:
            return None
        kubeadm.register_control_plane_node(kcp, machine, vm, boot, lab)
        registered.add(f"{key}/{name}")
    return name


def _write_cluster_secrets(
    client: Client, record: Record, kcp: dict[str, Any], cluster_name: str, lab: ControlPlane
) -> None:
    """What KCP keeps for the workload cluster (its certificates' LookupOrGenerate): its admin
    kubeconfig; its CA, etcd's and the front proxy's, each with its key (kubeadm's, made when its
    control plane started, control_plane.made_pki), and the service-account key pair its API server
    signs tokens with. The kubeadm bootstrap provider renders a control-plane machine's data from
    them (their files on the VM) and puts the CA's pin in every worker's join."""
    namespace = kcp["metadata"]["namespace"]
    if lab.pki is None or lab.pki.ca_key is None:
        raise ValueError(f"{ident(kcp)}: its control plane was started without kubeadm's CA")
    pki = lab.pki.ca.parent
    for purpose, data in (
        ("kubeconfig", {"value": lab.kubeconfig_of(ADMIN_USER).read_bytes()}),
        ("ca", {"tls.crt": lab.pki.ca.read_bytes(), "tls.key": lab.pki.ca_key.read_bytes()}),
        *(
            (purpose, {"tls.crt": (pki / f"{stem}.crt").read_bytes(), "tls.key": (pki / f"{stem}.key").read_bytes()})
            for purpose, stem in OTHER_CAS.items()
        ),
        ("sa", {"tls.crt": (lab.root / "sa.pub").read_bytes(), "tls.key": (lab.root / "sa.key").read_bytes()}),
    ):
        name = f"{cluster_name}-{purpose}"
        encoded = {key: base64.b64encode(value).decode() for key, value in data.items()}
        existing = client.get("secrets", "v1", namespace, name)
        if existing is not None and existing.get("data") == encoded:
            continue
        client.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": SECRET_TYPE,
                "metadata": {
                    **{"name": name, "namespace": namespace, "labels": {CLUSTER_NAME_LABEL: cluster_name}},
                    "ownerReferences": [owner_ref(kcp)],
                },
                "data": encoded,
            }
        )
        record.did(f"{purpose} written", f"Secret/{namespace}/{name}")
