"""lab-mgmt: the home lab's Kubernetes management cluster on Proxmox VE, as one graph."""

import pulumi

from components.cluster_api import ClusterApi, last_deployed_versions
from components.credentials import verify_tokens
from components.helm_repositories import verify_chart_repositories
from components.k3s_node import K3sNode
from components.management_vm import ManagementVm
from components.readonly_access import ReadOnlyAccess
from components.settings import load_settings
from components.workload_cluster import WorkloadClusterAccess

settings = load_settings()
if not settings.proxmox.skip_credentials_check:
    verify_tokens(settings)
if settings.adopt:
    verify_chart_repositories(settings)

vm = ManagementVm("mgmt", settings.proxmox, settings.vm, settings.image, adopt=settings.adopt)
k3s = K3sNode("mgmt", vm, settings.k3s, settings.vm.ci_user, adopt=settings.adopt)
cluster_api = ClusterApi(
    "mgmt",
    k3s,
    settings.cluster_api,
    proxmox_url=settings.proxmox.endpoint,
    protected=settings.vm.protected,
    adopt=settings.adopt,
    deployed_versions=last_deployed_versions(),
)
readonly = ReadOnlyAccess(
    "mgmt-readonly",
    k3s.provider,
    k3s.kubeconfig,
    context_name=f"{settings.vm.name}-ro",
    token_generation=settings.cluster_api.readonly_token_generation,
)
workload_clusters = {
    cluster.name: WorkloadClusterAccess(
        cluster, k3s.provider, token_generation=settings.cluster_api.readonly_token_generation
    )
    for cluster in settings.cluster_api.workload_clusters
}

pulumi.export("vmAddress", vm.address)
pulumi.export("kubeconfig", k3s.kubeconfig)
pulumi.export("readonlyKubeconfig", readonly.kubeconfig)
pulumi.export(
    "workloadReadonlyKubeconfigs",
    pulumi.Output.secret({name: access.kubeconfig for name, access in workload_clusters.items()}),
)
pulumi.export("providerVersions", cluster_api.provider_versions)
