"""The Kubernetes part of the program for the lab in a box: components.management_cluster, as
__main__.py wires it, under the real engine and the real kubernetes plugin, against the box's API
server, with the box's admin kubeconfig (the file LAB_MGMT_BOX_KUBECONFIG names) where __main__.py
has the one the k3s steps read over SSH. The box's engine runs this file as the project's
`__main__.py` (e2e.engine.fresh_engine's `main`), through the CLI and the language host.

The VM and the k3s host steps are left out of this part of the box; the host scripts are tested
on their own (tests/test_host_scripts.py, tests/test_box_handover.py). ClusterApi's one host step,
the operator's readiness check on the VM, is recorded as a step that did not run: in the box no
operator runs, its stand-in (e2e/operator_standin.py) answers for it.
"""

# No `from __future__ import annotations`: run as the project's __main__.py, the classes below
# have their annotations read by the Pulumi SDK against a namespace that is not this module's.
import os
from collections.abc import Sequence
from pathlib import Path

import pulumi
import pulumi_kubernetes as kubernetes

from components.helm_repositories import verify_chart_repositories
from components.management_cluster import manage_cluster
from components.settings import load_settings

KUBECONFIG_VARIABLE = "LAB_MGMT_BOX_KUBECONFIG"
# The host steps ClusterApi may ask for; any other is refused.
KNOWN_HOST_STEPS = {"operator_ready.sh"}


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

    def host_step(
        self,
        name: str,
        script: str,
        args: list[str],
        *,
        after: pulumi.Resource,
        parent: pulumi.Resource,
        triggers: Sequence[pulumi.Input[object]],
    ) -> pulumi.Resource:
        if script not in KNOWN_HOST_STEPS:
            raise RuntimeError(f"the box runs no host step {script}; it knows {sorted(KNOWN_HOST_STEPS)}")
        return HostStepNotRun(name, script, opts=pulumi.ResourceOptions(parent=parent, depends_on=[after]))


class HostStepNotRun(pulumi.ComponentResource):
    """Where the real program runs a script on the node over SSH."""

    def __init__(self, name: str, script: str, opts: pulumi.ResourceOptions) -> None:
        super().__init__("homelab:e2e:HostStepNotRun", name, None, opts)
        self.register_outputs({"script": script})


def program(kubeconfig: str) -> None:
    settings = load_settings()
    if settings.adopt:
        verify_chart_repositories(settings)
    cluster = manage_cluster(settings, BoxNode("mgmt", kubeconfig))
    pulumi.export("readonlyKubeconfig", cluster.readonly_kubeconfig)
    pulumi.export("workloadReadonlyKubeconfigs", cluster.workload_readonly_kubeconfigs)
    pulumi.export("providerVersions", cluster.provider_versions)


if __name__ == "__main__":
    program(Path(os.environ[KUBECONFIG_VARIABLE]).read_text())
