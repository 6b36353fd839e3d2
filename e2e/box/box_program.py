"""The Kubernetes part of the program for the lab in a box: components.management_cluster, as
__main__.py wires it, under the real engine and the real kubernetes plugin, against the box's API
server, with the box's admin kubeconfig (the file LAB_MGMT_BOX_KUBECONFIG names) where __main__.py
has the one the k3s steps read over SSH. The box's engine runs this file as the project's
`__main__.py` (e2e.engine.cli.fresh_engine's `main`), through the CLI and the language host.

The VM and the k3s host steps are left out of this part of the box; the host scripts are tested
on their own (tests/test_host_scripts.py, tests/test_box_handover.py). ClusterApi reaches the
cluster only through its Kubernetes provider, so all of it runs here as in the lab. Of
__main__.py's checks at preview, the workload clusters' nodes and template are made (against the
box's Proxmox node, with CAPMOX's token), not the program's own token, which nothing here uses.
"""

# No `from __future__ import annotations`: run as the project's __main__.py, the classes below
# have their annotations read by the Pulumi SDK against a namespace that is not this module's.
import os
from pathlib import Path

import pulumi
import pulumi_kubernetes as kubernetes

from components import charts
from components.clone_sources import verify_clone_sources
from components.management_cluster import manage_cluster
from components.run_records import RunRecords
from components.settings import load_settings

KUBECONFIG_VARIABLE = "LAB_MGMT_BOX_KUBECONFIG"


class BoxNode(pulumi.ComponentResource):
    """The box's cluster as a components.cluster_api.ClusterNode."""

    provider: kubernetes.Provider
    kubeconfig: pulumi.Output[str]
    on_cluster: pulumi.ResourceOptions

    def __init__(self, name: str, kubeconfig: str) -> None:
        super().__init__("homelab:e2e:BoxNode", name)
        self.kubeconfig = pulumi.Output.secret(kubeconfig)
        self.provider = kubernetes.Provider(
            f"{name}-kubernetes", kubeconfig=self.kubeconfig, opts=pulumi.ResourceOptions(parent=self)
        )
        # The box's API server outlives every run: nothing takes the objects with it.
        self.on_cluster = pulumi.ResourceOptions(provider=self.provider)
        self.register_outputs({})


def program(kubeconfig: str) -> None:
    settings = load_settings()
    verify_clone_sources(settings)
    cluster_charts = charts.cluster_charts(settings)
    records = RunRecords()
    manage_cluster(settings, BoxNode("mgmt", kubeconfig), cluster_charts, records)
    records.write()


if __name__ == "__main__":
    program(Path(os.environ[KUBECONFIG_VARIABLE]).read_text())
