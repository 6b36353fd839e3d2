"""The whole box (e2e/box/box.py) with the program's lab1 in it, as `make box` runs it: the stack file
keeps Pulumi.lab.yaml's lab1 as shipped (the box's short autoscaler timings added), and the box runs
what lab1 needs beneath the program, as the workload box (workload_box.py) does beside a bare API
server:

- the operator stand-in installs each provider's real CRDs, and once the CoreProvider appears the
  REAL Cluster API core manager starts against the VM's k3s (and, for the ControlPlaneProvider,
  the BootstrapProvider and the IPAMProvider, the REAL kubeadm control-plane manager for its
  webhooks alone, the REAL bootstrap and IPAM in-cluster managers: e2e/controllers/deployed.py),
  their webhooks served at the box's address on the lab network, which the VM's API server calls;
- the workload stand-ins (e2e/standins/workload/providers.py) start lab1's control plane at its
  endpoint and a kubelet for each worker Machine;
- the pod runner runs the program's cluster-autoscaler Deployment as the real binary, in a network
  of its own that the box routes to the VM (the VM's default route is the box);
- the chart repositories serve Cilium's chart and the autoscaler's, and CAPMOX's release.

    with lab1_box.running(base) as (box, lab1):  # in a network namespace holding ADDRESSES

`lab1.problems()` is what any of these refused or did not know.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.box import box as whole_box
from e2e.box import scenarios
from e2e.box.workload import lab1_autoscaling, lab1_reads, proxmox_node, workload_box
from e2e.controllers import deployed
from e2e.controllers.manager import RunningManager
from e2e.engine.cli import PROJECT, REPO, STACK, Engine, declare_workload_clusters
from e2e.engine.control_plane import ControlPlane
from e2e.standins.cluster import chart_repo_standin, pod_process, pod_runner
from e2e.standins.workload import providers
from e2e.standins.workload.vm_guest import WorkloadGuests

# The workload cluster as Pulumi.lab.yaml ships it, and the management VM's name, which its guest
# takes as hostname and k3s as its Node's name: the pod runner runs the autoscaler "there".
_STACK = yaml.safe_load((REPO / f"Pulumi.{STACK}.yaml").read_text())["config"]
LAB1_ENTRY: dict[str, Any] = _STACK[f"{PROJECT}:workloadClusters"][0]
LAB1 = lab1_reads.Workload.of(LAB1_ENTRY)
VM_NODE = _STACK[f"{PROJECT}:vmName"]
ADDRESSES = (scenarios.PROXMOX_ADDRESS, LAB1_ENTRY["controlPlaneEndpoint"])


@dataclass
class Lab1Parts:
    standins: providers.WorkloadStandIns
    runner: pod_runner.PodRunner
    managers: list[RunningManager]
    """The real Cluster API managers, each once its provider CR is installed (e2e/controllers/deployed.py)."""

    def kubeconfig(self) -> Path:
        """lab1's admin kubeconfig, as Cluster API keeps it (`lab1-kubeconfig`), once it runs."""
        return self.standins.running[LAB1.key].kubeconfig

    def problems(self) -> dict[str, list[str]]:
        return {"workload": self.standins.record.errors, "autoscaler_runner": self.runner.errors}


def _configure(
    engine: Engine, charts: chart_repo_standin.ChartRepoStandIn, *, as_shipped: bool
) -> list[dict[str, Any]]:
    """The settings pointing the program at the charts and the CAPMOX release the box serves; unless
    `as_shipped`, the box's short autoscaler timings in lab1's entry and the Cilium version it
    serves too."""
    served = {
        "ciliumChartRepo": f"{charts.url}/cilium",
        "clusterAutoscalerChartRepo": f"{charts.url}/autoscaler",
        "capmoxReleaseUrl": f"{charts.url}/{chart_repo_standin.CAPMOX_ASSETS}",
    }
    if not as_shipped:
        declare_workload_clusters(engine, [LAB1_ENTRY | {"autoscaler": lab1_autoscaling.TIMINGS}])
        served["ciliumVersion"] = workload_box.CILIUM_VERSION
    return [scenarios._set_all(engine, served.items())]


@contextmanager
def running(base: Path, *, as_shipped: bool = False) -> Iterator[tuple[whole_box.Box, Lab1Parts]]:
    """The box with lab1's machinery; `as_shipped`, the stack file's lab1 and ciliumVersion stay
    as Pulumi.lab.yaml ships them (the owner's takeover, e2e/box/takeover/)."""
    pod_process.route_through_the_box()
    with ExitStack() as stack:
        managers: list[RunningManager] = []
        managers_stack = ExitStack()

        def on_installed(cluster: ControlPlane, kind: str, _name: str) -> None:
            deployed.start_for(kind, cluster, base, whole_box.SPEC_SITE.gateway, stack=managers_stack, started=managers)

        parts = whole_box.WorkloadParts(
            charts={
                "cilium": [chart_repo_standin.cilium_chart(workload_box.CILIUM_VERSION)],
                "autoscaler": [workload_box.AUTOSCALER_CHART],
            },
            release_assets=chart_repo_standin.capmox_release_assets(),
            on_installed=on_installed,
            guests=WorkloadGuests(),
            templates=proxmox_node.templates_of(LAB1_ENTRY),
        )
        box = stack.enter_context(whole_box.running(base, workload=parts))
        standins = stack.enter_context(providers.running(box.cluster, base / "workload", parts.guests))
        # The manager stops before lab1's control plane, which its cluster cache watches: a watched
        # API server waits out its bound (20 s) before it is killed.
        stack.enter_context(managers_stack)
        runner = stack.enter_context(
            pod_runner.running(
                box.cluster,
                LAB1.namespace,
                LAB1.autoscaler,
                base / "pods",
                node=VM_NODE,
                backoff_seconds=lab1_autoscaling.BACKOFF_SECONDS,
                secret_sync_seconds=lab1_autoscaling.SECRET_SYNC_SECONDS,
            )
        )
        box.steps += _configure(box.engine, box.charts, as_shipped=as_shipped)
        yield box, Lab1Parts(standins, runner, managers)
