"""What kubeadm does on the VMs, which cannot run here: the bootstrap data a kubeadm bootstrap
writes (`bootstrap_data`, read back by `kubeadm_configuration`), a control-plane Node as `kubeadm
init` or a control-plane `kubeadm join` registers it (`register_control_plane_node`), kubeadm
init's CoreDNS (`kubeadm_addons`); and a stand-in for Cluster API's kubeadm bootstrap provider.
The KubeadmControlPlane's stand-in is kubeadm_control_plane.py.

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
from typing import Any

from e2e.engine.control_plane import ADMIN_USER, KUBELET_USER, ControlPlane
from e2e.standins.workload import kubelet
from e2e.standins.workload.capmox import need_true, size
from e2e.standins.workload.objects import (
    BOOTSTRAP,
    CLUSTER_NAME_LABEL,
    CORE,
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
# Where the control plane's bootstrap data writes kubeadm's InitConfiguration.
INIT_CONFIG_PATH = "/run/kubeadm/kubeadm.yaml"
KUBEADM_API = "kubeadm.k8s.io/v1beta4"
UNINITIALIZED_TAINT = {"key": "node.cluster.x-k8s.io/uninitialized", "effect": "NoSchedule"}


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
        client.apply(bootstrap_data(secret_meta, JOIN_CONFIG_PATH, join, "join", spec.get("users", [])))
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


def bootstrap_data(
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


def register_control_plane_node(
    client: Client, kcp: dict[str, Any], machine: dict[str, Any], vm: dict[str, Any], lab: ControlPlane
) -> None:
    """The Node of the control-plane VM `vm` (its provisioned ProxmoxMachine), as `kubeadm init`
    or a control-plane `kubeadm join` registers it, through the kubelet stand-in's code: named
    after the VM, the bootstrap data's kubelet arguments (its providerID must be the
    ProxmoxMachine's), the labels kubeadm's mark-control-plane phase sets and its default taint
    `node-role.kubernetes.io/control-plane:NoSchedule` (unless the configuration names taints), the
    capacity of the template it was cloned from, the VM's addresses, the Machine's version."""
    provider_id: str = need(vm, "spec.providerID")
    vm_uuid = provider_id.removeprefix("proxmox://")
    registration = dict(kubeadm_configuration(client, machine).get("nodeRegistration", {}))
    registration.setdefault("taints", [{"key": CONTROL_PLANE_LABEL, "effect": "NoSchedule"}])
    node = kubelet.node_of(ident(kcp), vm["metadata"]["name"], registration, vm_uuid)
    if node["spec"]["providerID"] != provider_id:
        raise ValueError(
            f"{ident(kcp)}: the kubelet would register providerID {node['spec']['providerID']!r}, not {provider_id!r}"
        )
    node["metadata"]["labels"] |= {
        CONTROL_PLANE_LABEL: "",
        "node.kubernetes.io/exclude-from-external-load-balancers": "",
    }
    capacity = size({**vm, "spec": need(vm, "spec")})
    addresses = [{"type": a["type"], "address": a["address"]} for a in need(vm, "status.addresses")]
    version = need(machine, "spec.version")
    kubelet.register(Client(lab, KUBELET_USER), node, capacity, addresses, version=version, vm_uuid=vm_uuid)


def kubeadm_configuration(client: Client, machine: dict[str, Any]) -> dict[str, Any]:
    """The kubeadm Init- or JoinConfiguration that the control-plane `machine`'s bootstrap data writes."""
    name = need(machine, "spec.bootstrap.dataSecretName")
    secret = client.get("secrets", "v1", machine["metadata"]["namespace"], name)
    if secret is None:
        raise KeyError(f"{ident(machine)}'s bootstrap data Secret {name} is gone")
    value = base64.b64decode(secret["data"]["value"]).decode()
    cloud_config = json.loads(value.split("#cloud-config\n", 1)[1])
    written = {entry["path"]: entry["content"] for entry in cloud_config.get("write_files", [])}
    for path in (INIT_CONFIG_PATH, JOIN_CONFIG_PATH):
        if path in written:
            found: dict[str, Any] = json.loads(written[path])
            return found
    raise ValueError(f"{ident(machine)}'s bootstrap data writes no kubeadm configuration")


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


def kubeadm_addons(lab: ControlPlane) -> None:
    """What `kubeadm init` installs that the box's workloads meet: CoreDNS (kube-proxy is left out:
    nothing here routes Service traffic)."""
    Client(lab, ADMIN_USER).apply(COREDNS)
