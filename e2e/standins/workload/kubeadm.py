"""What kubeadm does on the control plane's VMs, which cannot run here, for the KubeadmControlPlane
stand-in (kubeadm_control_plane.py): a control-plane Node as `kubeadm init` or a control-plane
`kubeadm join` registers it (`register_control_plane_node`), from the bootstrap data the real
kubeadm bootstrap provider rendered for the machine's KubeadmConfig, as the VM's boot reads it
(vm_boot.py), and kubeadm init's CoreDNS (`kubeadm_addons`).
"""

from __future__ import annotations

from typing import Any

from e2e.engine.control_plane import ADMIN_USER, KUBELET_USER, ControlPlane
from e2e.standins.workload import kubelet, vm_boot
from e2e.standins.workload.objects import Client, ident, need_true
from e2e.standins.workload.vm_guest import Boot

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


def register_control_plane_node(
    kcp: dict[str, Any], machine: dict[str, Any], vm: dict[str, Any], boot: Boot, lab: ControlPlane
) -> None:
    """The Node of the control-plane VM `vm` (its provisioned ProxmoxMachine), as `kubeadm init`
    (the first) or a control-plane `kubeadm join` (once the KCP is initialized; its discovery
    checked against the cluster as a worker's) registers it, through the kubelet stand-in's code:
    named after the VM, the bootstrap data's kubelet arguments (its providerID must be the
    ProxmoxMachine's), the labels kubeadm's mark-control-plane phase sets and its default taint
    `node-role.kubernetes.io/control-plane:NoSchedule` (unless the configuration names taints), the
    capacity, addresses and kubelet version of the VM it booted (`boot`)."""
    run = vm_boot.booted(boot)
    joining = need_true(kcp, "status.initialization.controlPlaneInitialized")
    if (run.phase, "controlPlane" in run.configuration) != (("join", True) if joining else ("init", False)):
        raise ValueError(
            f"{ident(machine)}: its bootstrap data runs kubeadm {run.phase} "
            f"({run.configuration.get('kind')}), where the control plane's {'join' if joining else 'init'} is due"
        )
    if joining:
        vm_boot.discover(Client(lab, KUBELET_USER), run.configuration)
    registration = run.configuration.get("nodeRegistration", {})
    node = kubelet.node_of(ident(kcp), vm, registration, [{"key": CONTROL_PLANE_LABEL, "effect": "NoSchedule"}])
    node["metadata"]["labels"] |= {
        CONTROL_PLANE_LABEL: "",
        "node.kubernetes.io/exclude-from-external-load-balancers": "",
    }
    kubelet.register(Client(lab, KUBELET_USER), node, boot)


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
