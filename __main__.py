"""lab-mgmt: the home lab's Kubernetes management cluster on Proxmox VE, as one graph."""

import pulumi

from components import charts
from components.certificate_renewal import CERTIFICATE_RENEWAL_OUTPUT
from components.cluster_api import last_deployment
from components.credentials import verify_tokens
from components.k3s_node import K3S_VERSION_OUTPUT, KUBECONFIG_FILE_OUTPUT, SSH_HOST_KEY_OUTPUT, K3sNode
from components.management_cluster import manage_cluster
from components.management_vm import PROTECTED_OUTPUT, ManagementVm
from components.next_boot import CLOUD_INIT_OUTPUT, SIZE_OUTPUT, dialed_address, held_cloud_init, held_size
from components.settings import load_settings

settings = load_settings()
if not settings.proxmox.skip_credentials_check:
    verify_tokens(settings)
# Where a chart is not in the project's folder yet, its repository is asked now, before anything
# is registered: one out of reach stops the run with nothing begun (warns, with skipCredentialsCheck).
cluster_charts = charts.cluster_charts(settings) if settings.adopt_cluster_objects else None

deployment = last_deployment()
vm = ManagementVm("mgmt", settings.proxmox, settings.vm, settings.image, adopt=settings.adopt, deployment=deployment)
k3s = K3sNode(
    "mgmt",
    vm,
    settings.k3s,
    settings.vm.ci_user,
    host=dialed_address(settings.vm, deployment, adopt=settings.adopt),
    adopt=settings.adopt,
    deployment=deployment,
)

pulumi.export("vmAddress", vm.address)
pulumi.export(PROTECTED_OUTPUT, vm.protection)
pulumi.export(CLOUD_INIT_OUTPUT, held_cloud_init(vm.vm, adopt=settings.adopt))
pulumi.export(SIZE_OUTPUT, held_size(vm.vm, adopt=settings.adopt))
pulumi.export("kubeconfig", k3s.kubeconfig)
# The next run's k3s version order check reads it.
pulumi.export(K3S_VERSION_OUTPUT, k3s.k3s_version)
# The next run's first contact with the same VM dials with this key.
pulumi.export(SSH_HOST_KEY_OUTPUT, k3s.ssh_host_key)
# None (no output) until the held admin certificate first nears expiry; the next run reads it.
pulumi.export(CERTIFICATE_RENEWAL_OUTPUT, k3s.certificate_renewal)
# The first adoption run leaves the cluster out: its Kubernetes provider takes the kubeconfig
# that this run reads from the node, unknown at the preview, which would plan an update after
# every Kubernetes import (docs/adoption.md step 4); the next run takes them.
if cluster_charts is not None:
    cluster = manage_cluster(settings, k3s, cluster_charts, deployment)
    pulumi.export("readonlyKubeconfig", cluster.readonly_kubeconfig)
    pulumi.export("workloadReadonlyKubeconfigs", cluster.workload_readonly_kubeconfigs)
    pulumi.export("providerVersions", cluster.provider_versions)
# Only with a file to keep: the next run reads it to notice the file deleted by hand.
if k3s.kubeconfig_file is not None:
    pulumi.export(KUBECONFIG_FILE_OUTPUT, k3s.kubeconfig_file)
