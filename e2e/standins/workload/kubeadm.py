"""Stand-ins for Cluster API's kubeadm providers where they cannot run here (kubeadm on VMs, and
KCP's etcd health checks through a port-forward to control-plane pods):

- KubeadmControlPlane (controlplane.cluster.x-k8s.io/v1beta2): once its Cluster owns it and the
  Cluster's infrastructure is provisioned with a control-plane endpoint, the workload cluster's
  control plane starts for real at that endpoint (etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler; e2e/engine/control_plane.py), its admin kubeconfig is written where Cluster API
  writes it (Secret `<cluster>-kubeconfig`, key `value`, type cluster.x-k8s.io/secret, labelled
  with the cluster's name, owned by the KCP), and the KCP's status says what the contract asks:
  initialization.controlPlaneInitialized, the replica counts, selector, version,
  observedGeneration and the conditions Available (which the Cluster's ControlPlaneAvailable
  mirrors), Initialized, CertificatesAvailable, EtcdClusterHealthy, ControlPlaneComponentsHealthy.
  The control plane's VM is made as KCP makes a control-plane machine: a ProxmoxMachine cloned
  from the KCP's ProxmoxMachineTemplate, bootstrap data, and a Machine owned by the KCP with
  Cluster API's control-plane labels, which the real Machine controller reconciles and the CAPMOX
  stand-in provisions like any other (a VMID, an address from the pool, a providerID). With it,
  Cluster API drains a worker's Node before it deletes the worker, and then deletes the Node
  (isDeleteNodeAllowed in internal/controllers/machine/machine_controller.go: with no
  control-plane Machine it does neither). Once that VM is provisioned its Node is registered
  through the kubelet stand-in's code (kubelet.node_of, kubelet.register; it heartbeats and runs
  pods there too) with the providerID of the initConfiguration's kubelet arguments (which must
  equal the ProxmoxMachine's), the `node-role.kubernetes.io/control-plane` label and kubeadm's
  default `node-role.kubernetes.io/control-plane:NoSchedule` taint, and the capacity of the
  KCP's ProxmoxMachineTemplate; kubeadm init's CoreDNS (two replicas tolerating that taint) is
  applied, so that what tolerates the control plane runs there and never asks the autoscaler for
  a worker; then the KCP is reported initialized.
  What it leaves out is KCP's own logic: the bootstrap data is written for the Machine directly
  (bootstrap.dataSecretName; the real KCP makes a KubeadmConfig with an initConfiguration, which
  the KubeadmConfig stand-in refuses), one control plane runs here whatever a VM would be, so
  spec.replicas other than 1 is refused, and the control plane is never rolled: a version bump
  reaches the KCP's status.version, while its Machine keeps the version it was made with
  (MachinesUpToDate then says NotUpToDate).
- KubeadmConfig (bootstrap.cluster.x-k8s.io/v1beta2), a worker's, made from its
  KubeadmConfigTemplate by the MachineSet controller: once a Machine owns it and the Cluster's
  control plane is initialized (a join waits for it, as the real provider does), a bootstrap data
  Secret named after it (cloud-config writing the kubeadm JoinConfiguration, as the real one
  does, with Cluster API's `node.cluster.x-k8s.io/uninitialized:NoSchedule` taint added to its
  nodeRegistration as the real provider adds it), then status.initialization.dataSecretCreated,
  status.dataSecretName and the conditions Ready, DataSecretAvailable and CertificatesAvailable.
  A control plane's (initConfiguration) or a non-cloud-config format is refused.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from e2e.engine.control_plane import ADMIN_USER, KUBELET_USER, ControlPlane
from e2e.standins.workload import kubelet
from e2e.standins.workload.capmox import need_true, size
from e2e.standins.workload.objects import (
    BOOTSTRAP,
    CLUSTER_NAME_LABEL,
    CONTROL_PLANE,
    CONTROL_PLANE_MACHINE_LABEL,
    CORE,
    INFRASTRUCTURE,
    JOIN_CONFIG_PATH,
    SECRET_TYPE,
    Client,
    Record,
    conditions,
    ident,
    need,
    owner,
    owner_ref,
)

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# Cluster API's label naming a control-plane Machine's KCP (api/core/v1beta2/machine_types.go).
CONTROL_PLANE_NAME_LABEL = "cluster.x-k8s.io/control-plane-name"
# Where the control plane's bootstrap data writes kubeadm's InitConfiguration.
INIT_CONFIG_PATH = "/run/kubeadm/kubeadm.yaml"
UNINITIALIZED_TAINT = {"key": "node.cluster.x-k8s.io/uninitialized", "effect": "NoSchedule"}
KCP_CONDITIONS = {
    "Available": "Available",
    "Initialized": "Initialized",
    "CertificatesAvailable": "Available",
    "EtcdClusterHealthy": "Healthy",
    "ControlPlaneComponentsHealthy": "Healthy",
    "MachinesReady": "Ready",
    "RollingOut": "NotRollingOut",
    "ScalingUp": "NotScalingUp",
    "ScalingDown": "NotScalingDown",
    "Remediating": "NotRemediating",
    "Deleting": "NotDeleting",
    "Paused": "NotPaused",
}


def reconcile_control_planes(
    client: Client,
    record: Record,
    running: dict[str, ControlPlane],
    start: Callable[[str, str, int], ControlPlane],
    control_plane_nodes: dict[str, str],
) -> None:
    """`running` holds each workload cluster's control plane by `namespace/cluster`;
    `start(key, host, port)` starts one for the rest of the stand-ins' block;
    `control_plane_nodes` gets the name of the Node each one registers, by the same key."""
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
        version = need(kcp, "spec.version")
        key = f"{meta['namespace']}/{cluster_name}"
        if key not in running:
            running[key] = start(key, endpoint["host"], int(endpoint["port"]))
            record.did(f"control plane up at {endpoint['host']}:{endpoint['port']}", ident(kcp))
        _write_kubeconfig(client, record, kcp, cluster_name, running[key])
        machine = _control_plane_machine(client, record, kcp, cluster_name)
        if key not in control_plane_nodes:
            vm = client.get("proxmoxmachines", INFRASTRUCTURE, meta["namespace"], machine["metadata"]["name"])
            if vm is None or not need_true(vm, "status.initialization.provisioned"):
                continue  # kubeadm init runs once CAPMOX has cloned the VM
            control_plane_nodes[key] = _register_control_plane_node(client, kcp, vm, running[key])
            _kubeadm_addons(running[key])
            record.did(f"control-plane Node {control_plane_nodes[key]} registered, CoreDNS applied", ident(kcp))
        status = kcp.get("status") or {}
        if (
            need_true(kcp, "status.initialization.controlPlaneInitialized")
            and status.get("observedGeneration") == meta["generation"]
        ):
            continue
        selector = f"{CLUSTER_NAME_LABEL}={cluster_name},{CONTROL_PLANE_MACHINE_LABEL}"
        up_to_date = int(machine["spec"].get("version") == version)
        counts = dict.fromkeys(("replicas", "readyReplicas", "availableReplicas"), 1)
        reasons = KCP_CONDITIONS | {"MachinesUpToDate": "UpToDate" if up_to_date else "NotUpToDate"}
        status = {
            "initialization": {"controlPlaneInitialized": True},
            **counts,
            "upToDateReplicas": up_to_date,
            **{"selector": selector, "version": version, "observedGeneration": meta["generation"]},
            "conditions": conditions(meta["generation"], reasons),
        }
        client.patch(kcp, {"status": status}, status=True)
        record.did("control plane initialized", ident(kcp))


def _control_plane_machine(client: Client, record: Record, kcp: dict[str, Any], cluster_name: str) -> dict[str, Any]:
    """The KCP's one control-plane Machine, made once as KCP makes one
    (cloneConfigsAndGenerateMachine in controlplane/kubeadm/internal/controllers/helpers.go): named
    `<kcp>-<5 characters>` (here of the KCP's uid, so that a stand-in started again finds it), with
    the labels of desiredstate.ControlPlaneMachineLabels, its ProxmoxMachine cloned from the KCP's
    template and owned by the KCP until the Machine controller takes it over, its bootstrap data a
    Secret owned by the KCP."""
    meta = kcp["metadata"]
    namespace, name = meta["namespace"], f"{meta['name']}-{meta['uid'][:5]}"
    found = client.get("machines", CORE, namespace, name)
    if found is not None:
        return found
    template = _machine_template(client, kcp)
    labels = {
        **(need(kcp, "spec.machineTemplate").get("metadata") or {}).get("labels", {}),
        **{CLUSTER_NAME_LABEL: cluster_name, CONTROL_PLANE_MACHINE_LABEL: "", CONTROL_PLANE_NAME_LABEL: meta["name"]},
    }
    made = {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner_ref(kcp)]}
    kubeadm = need(kcp, "spec.kubeadmConfigSpec")
    init = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration", **kubeadm.get("initConfiguration", {})}
    machine = {
        "apiVersion": CORE,
        "kind": "Machine",
        "metadata": made,
        "spec": {
            "clusterName": cluster_name,
            "version": need(kcp, "spec.version"),
            "bootstrap": {"dataSecretName": name},
            "infrastructureRef": {"apiGroup": INFRASTRUCTURE.split("/")[0], "kind": "ProxmoxMachine", "name": name},
        },
    }
    client.apply(
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                _bootstrap_data(made, INIT_CONFIG_PATH, init, "init", kubeadm.get("users", [])),
                {
                    **{"apiVersion": INFRASTRUCTURE, "kind": "ProxmoxMachine", "metadata": made},
                    "spec": need(template, "spec.template.spec"),
                },
                machine,
            ],
        }
    )
    record.did("control-plane Machine, ProxmoxMachine and bootstrap data made", f"Machine/{namespace}/{name}")
    return machine


def _machine_template(client: Client, kcp: dict[str, Any]) -> dict[str, Any]:
    name = need(kcp, "spec.machineTemplate.spec.infrastructureRef.name")
    template = client.get("proxmoxmachinetemplates", INFRASTRUCTURE, kcp["metadata"]["namespace"], name)
    if template is None:
        raise KeyError(f"{ident(kcp)}: no ProxmoxMachineTemplate {name}")
    return template


def _register_control_plane_node(client: Client, kcp: dict[str, Any], vm: dict[str, Any], lab: ControlPlane) -> str:
    """The Node of the control-plane VM `vm` (its provisioned ProxmoxMachine), as `kubeadm init`
    registers it, through the kubelet stand-in's code: named after the VM, the initConfiguration's
    kubelet arguments (its providerID must be the ProxmoxMachine's), the labels kubeadm's
    mark-control-plane phase sets and its default taint `node-role.kubernetes.io/control-plane:
    NoSchedule` (unless the initConfiguration names taints), the capacity of the KCP's
    ProxmoxMachineTemplate, the VM's addresses. Its name."""
    name: str = vm["metadata"]["name"]
    provider_id: str = need(vm, "spec.providerID")
    vm_uuid = provider_id.removeprefix("proxmox://")
    registration = dict(need(kcp, "spec.kubeadmConfigSpec").get("initConfiguration", {}).get("nodeRegistration", {}))
    registration.setdefault("taints", [{"key": CONTROL_PLANE_LABEL, "effect": "NoSchedule"}])
    node = kubelet.node_of(ident(kcp), name, registration, vm_uuid)
    if node["spec"]["providerID"] != provider_id:
        raise ValueError(
            f"{ident(kcp)}: the kubelet would register providerID {node['spec']['providerID']!r}, not {provider_id!r}"
        )
    node["metadata"]["labels"] |= {
        CONTROL_PLANE_LABEL: "",
        "node.kubernetes.io/exclude-from-external-load-balancers": "",
    }
    template = _machine_template(client, kcp)
    capacity = size({**template, "spec": need(template, "spec.template.spec")})
    addresses = [{"type": a["type"], "address": a["address"]} for a in need(vm, "status.addresses")]
    kubelet.register(
        Client(lab, KUBELET_USER), node, capacity, addresses, version=need(kcp, "spec.version"), vm_uuid=vm_uuid
    )
    return name


# kubeadm init's CoreDNS addon, as this stand-in writes it (not kubeadm's manifest): two replicas
# that tolerate the control plane's taint, so that they run there and never ask for a worker.
COREDNS = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "coredns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
        "template": {
            "metadata": {"labels": {"k8s-app": "kube-dns"}},
            "spec": {
                "priorityClassName": "system-cluster-critical",
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [
                    {"key": "CriticalAddonsOnly", "operator": "Exists"},
                    {"key": CONTROL_PLANE_LABEL, "effect": "NoSchedule"},
                ],
                "containers": [
                    {
                        "name": "coredns",
                        "image": "registry.k8s.io/coredns/coredns:v1.12.1",
                        "resources": {"requests": {"cpu": "100m", "memory": "70Mi"}, "limits": {"memory": "170Mi"}},
                    }
                ],
            },
        },
    },
}


def _kubeadm_addons(lab: ControlPlane) -> None:
    """What `kubeadm init` installs that the box's workloads meet: CoreDNS (kube-proxy is left out:
    nothing here routes Service traffic)."""
    Client(lab, ADMIN_USER).apply(COREDNS)


def _write_kubeconfig(
    client: Client, record: Record, kcp: dict[str, Any], cluster_name: str, lab: ControlPlane
) -> None:
    namespace, name = kcp["metadata"]["namespace"], f"{cluster_name}-kubeconfig"
    value = lab.kubeconfig_of(ADMIN_USER).read_text()
    existing = client.get("secrets", "v1", namespace, name)
    if existing is not None and base64.b64decode(existing["data"]["value"]).decode() == value:
        return
    client.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": SECRET_TYPE,
            "metadata": {
                **{"name": name, "namespace": namespace, "labels": {CLUSTER_NAME_LABEL: cluster_name}},
                "ownerReferences": [owner_ref(kcp)],
            },
            "data": {"value": base64.b64encode(value.encode()).decode()},
        }
    )
    record.did("kubeconfig written", f"Secret/{namespace}/{name}")


def reconcile_configs(client: Client, record: Record) -> None:
    for config in client.items("kubeadmconfigs", BOOTSTRAP):
        meta, spec = config["metadata"], config.get("spec") or {}
        if need_true(config, "status.initialization.dataSecretCreated") or "deletionTimestamp" in meta:
            continue
        if owner(config, "Machine", "cluster.x-k8s.io") is None:
            continue
        if "initConfiguration" in spec or "clusterConfiguration" in spec:
            raise ValueError(f"{ident(config)}: a control plane's config; the stand-in bootstraps workers only")
        if spec.get("format", "cloud-config") != "cloud-config":
            raise ValueError(f"{ident(config)} spec.format={spec['format']}: the stand-in writes cloud-config only")
        cluster_name = meta.get("labels", {}).get(CLUSTER_NAME_LABEL)
        if not cluster_name:
            raise KeyError(f"{ident(config)} has no label {CLUSTER_NAME_LABEL}")
        cluster = client.get("clusters", CORE, meta["namespace"], cluster_name)
        if cluster is None or not need_true(cluster, "status.initialization.controlPlaneInitialized"):
            continue
        join = {
            "apiVersion": "kubeadm.k8s.io/v1beta4",
            "kind": "JoinConfiguration",
            **spec.get("joinConfiguration", {}),
        }
        # As the real provider does: the Node joins with Cluster API's uninitialized taint, which
        # the Machine controller drops once it has synced the Node's labels.
        registration = join.setdefault("nodeRegistration", {})
        taints = registration.setdefault("taints", [])
        if not any(taint["key"] == UNINITIALIZED_TAINT["key"] for taint in taints):
            taints.append(UNINITIALIZED_TAINT)
        secret_meta = {
            **{"name": meta["name"], "namespace": meta["namespace"]},
            **{"labels": {CLUSTER_NAME_LABEL: cluster_name}, "ownerReferences": [owner_ref(config)]},
        }
        client.apply(_bootstrap_data(secret_meta, JOIN_CONFIG_PATH, join, "join", spec.get("users", [])))
        status = {
            "initialization": {"dataSecretCreated": True},
            "dataSecretName": meta["name"],
            "observedGeneration": meta["generation"],
            "conditions": conditions(
                meta["generation"],
                {"Ready": "Ready", "DataSecretAvailable": "Available", "CertificatesAvailable": "Available"},
            ),
        }
        client.patch(config, {"status": status}, status=True)
        record.did("bootstrap data written", ident(config))


def _bootstrap_data(
    metadata: dict[str, Any], path: str, configuration: dict[str, Any], phase: str, users: list[Any]
) -> dict[str, Any]:
    """The bootstrap data Secret a kubeadm bootstrap writes: cloud-config that writes kubeadm's
    `configuration` to `path` and runs `kubeadm <phase>` with it, the `users` it adds, and its format."""
    cloud_config = {
        "write_files": [
            {"path": path, "owner": "root:root", "permissions": "0640", "content": json.dumps(configuration)}
        ],
        "runcmd": [f"kubeadm {phase} --config {path}"],
        "users": users,
    }
    value = "## template: jinja\n#cloud-config\n" + json.dumps(cloud_config, indent=1)
    return {
        **{"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE, "metadata": metadata},
        "data": {
            key: base64.b64encode(text.encode()).decode()
            for key, text in (("value", value), ("format", "cloud-config"))
        },
    }
