"""lab-mgmt: the home lab's Kubernetes management cluster on Proxmox VE, as one graph."""

from components import charts
from components.clone_sources import verify_clone_sources
from components.credentials import verify_tokens
from components.k3s_node import K3sNode
from components.management_cluster import manage_cluster
from components.management_vm import ManagementVm
from components.run_records import RunRecords
from components.settings import load_settings

settings = load_settings()
if not settings.proxmox.skip_credentials_check:
    verify_tokens(settings)
verify_clone_sources(settings)
# Where a chart is not in the project's folder yet, its repository is asked now, before anything
# is registered: one out of reach stops the run with nothing begun (warns, with skipCredentialsCheck).
cluster_charts = charts.cluster_charts(settings) if settings.adopt_cluster_objects else None

records = RunRecords()
vm = ManagementVm("mgmt", settings.proxmox, settings.vm, settings.image, adopt=settings.adopt, records=records)
k3s = K3sNode("mgmt", vm, settings.k3s, settings.vm, adopt=settings.adopt, records=records)
# The first adoption run leaves the cluster out: its Kubernetes provider takes the kubeconfig
# that this run reads from the node, unknown at the preview, which would plan an update after
# every Kubernetes import (docs/adoption.md step 4); the next run takes them.
if cluster_charts is not None:
    manage_cluster(settings, k3s, cluster_charts, records)
records.write()
