"""What kubeadm does on the control plane's VMs, which cannot run here, for the KubeadmControlPlane
stand-in (kubeadm_control_plane.py): the bootstrap data of a control-plane Machine
(`bootstrap_data`: the KCP stand-in makes no KubeadmConfig, so the real kubeadm bootstrap provider,
which renders every worker's, has none to render), a control-plane Node as `kubeadm init` or a
control-plane `kubeadm join` registers it (`register_control_plane_node`, from the configuration
the VM's boot reads: vm_boot.py), and kubeadm init's CoreDNS (`kubeadm_addons`).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from e2e.engine.control_plane import ADMIN_USER, KUBELET_USER, ControlPlane
from e2e.standins.workload import kubelet, vm_boot
from e2e.standins.workload.capmox import size
from e2e.standins.workload.objects import SECRET_TYPE, Client, ident, need

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# Where the control plane's bootstrap data writes kubeadm's InitConfiguration.
INIT_CONFIG_PATH = "/run/kubeadm/kubeadm.yaml"
KUBEADM_API = "kubeadm.k8s.io/v1beta4"


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
    # JSON, which cloud-init reads as the YAML it is.
    value = vm_boot.HEADER + json.dumps(cloud_config, indent=1)
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
    meta = vm_boot.meta_data(vm_uuid, vm["metadata"]["name"])
    registration = dict(kubeadm_configuration(client, machine, meta).get("nodeRegistration", {}))
    registration.setdefault("taints", [{"key": CONTROL_PLANE_LABEL, "effect": "NoSchedule"}])
    node = kubelet.node_of(ident(kcp), vm["metadata"]["name"], registration)
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


def kubeadm_configuration(client: Client, machine: dict[str, Any], meta: dict[str, str]) -> dict[str, Any]:
    """The kubeadm Init- or JoinConfiguration that the control-plane `machine`'s bootstrap data
    runs kubeadm with, on a VM of meta-data `meta`."""
    name = need(machine, "spec.bootstrap.dataSecretName")
    secret = client.get("secrets", "v1", machine["metadata"]["namespace"], name)
    if secret is None:
        raise KeyError(f"{ident(machine)}'s bootstrap data Secret {name} is gone")
    return vm_boot.kubeadm_run(base64.b64decode(secret["data"]["value"]).decode(), meta).configuration


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
