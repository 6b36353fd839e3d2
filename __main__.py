"""lab-mgmt: the home lab's Kubernetes management cluster on Proxmox VE, as one graph."""

import pulumi

from components.credentials import verify_tokens
from components.helm_repositories import verify_chart_repositories
from components.k3s_node import K3sNode
from components.management_cluster import manage_cluster
from components.management_vm import ManagementVm
from components.settings import load_settings

settings = load_settings()
if not settings.proxmox.skip_credentials_check:
    verify_tokens(settings)
if settings.adopt:
    verify_chart_repositories(settings)

vm = ManagementVm("mgmt", settings.proxmox, settings.vm, settings.image, adopt=settings.adopt)
k3s = K3sNode("mgmt", vm, settings.k3s, settings.vm.ci_user, adopt=settings.adopt)
cluster = manage_cluster(settings, k3s)

pulumi.export("vmAddress", vm.address)
pulumi.export("kubeconfig", k3s.kubeconfig)
pulumi.export("readonlyKubeconfig", cluster.readonly_kubeconfig)
pulumi.export("workloadReadonlyKubeconfigs", cluster.workload_readonly_kubeconfigs)
pulumi.export("providerVersions", cluster.provider_versions)
