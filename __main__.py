"""lab-mgmt: the home lab's Kubernetes management cluster on Proxmox VE, as one graph."""

import pulumi

from components.k3s_node import K3sNode
from components.management_vm import ManagementVm
from components.settings import load_settings

settings = load_settings()

vm = ManagementVm("mgmt", settings.proxmox, settings.vm, settings.image)
k3s = K3sNode("mgmt", vm, settings.k3s, settings.vm.ci_user)

pulumi.export("vmAddress", vm.address)
pulumi.export("kubeconfig", k3s.kubeconfig)
