"""One box for a workload cluster (lab1) with the real Cluster API core, for a scenario of the
program's (e2e/box/workload/lab1_autoscaling.py: its `pulumi up` through box_program.py declaring lab1).

    with workload_box.running(base, entry) as box:  # inside in_new_netns(..., addresses=addresses(entry))
        engine = box.engine(workload_clusters=True)  # the program's engine (box_program.py)
        ...                                        # box.mgmt, box.manager, box.standins, box.charts

For the block it runs, in the test's network namespace:

- the management cluster's real control plane at VM_ADDRESS (`box.mgmt`, admin kubeconfig
  `box.mgmt.kubeconfig`);
- the operator stand-in with the real CRDs (`real_crds=True`): when a provider CR appears (applied
  by the program), it installs that provider's CRDs from the archives, and for the CoreProvider it
  starts the REAL Cluster API core manager with its webhooks (e2e/controllers/cluster_api.py;
  `box.manager`), for the ControlPlaneProvider and the BootstrapProvider the REAL kubeadm
  control-plane manager for its webhooks alone and the REAL bootstrap manager, for the
  IPAMProvider the REAL IPAM in-cluster manager (e2e/controllers/ipam.py), for the
  InfrastructureProvider the REAL CAPMOX manager (e2e/controllers/capmox.py; all in
  `box.managers`), before marking the provider Ready, where cluster-api-operator would deploy it
  (the CoreProvider first);
- the Proxmox VE stand-in at the program's proxmoxEndpoint, serving the node the workload cluster
  `entry` is cloned on with its templates, and the insides of the VMs CAPMOX clones there
  (proxmox_node.py; `box.pve`, `box.guests`);
- the operator chart's webhook server and cert-manager's CA injector stand-ins (what the program's
  operator release needs, as in the cluster-part scenarios, cluster_part.py);
- the chart repositories' stand-in (`box.charts`, trusted by `box.engine()`): cert-manager, the
  operator chart with the provider CRDs, `cilium` at `cilium_version` (chart_repo_standin.
  cilium_chart), any `extra_charts` (the autoscaler's, for instance), and CAPMOX's release asset
  `cluster-template.yaml` under `box.capmox_release_url` (`<url>/<version>/cluster-template.yaml`,
  v0.9.0 and v0.9.1; anything else a 404 recorded in `box.charts.unknown`);
- the workload stand-ins' loop (e2e/standins/workload/providers.py: KCP and the kubelets of the
  VMs CAPMOX booted; `box.standins`), which starts lab1's real control plane at the
  ProxmoxCluster's endpoint (LAB1_ADDRESS in the box's lab) once the real Cluster controller has
  done its part.

`box.problems()` is everything any stand-in refused or did not know: a scenario asserts it empty.
The namespace must hold `addresses(entry)` (the management cluster's, the Proxmox API's and the
workload cluster's endpoint).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.box.box import TOKENS
from e2e.box.cluster_part import CHART_REPOS, OPERATOR_CHART_WITH_CRDS, _box_engine, _operator_webhooks
from e2e.box.scenarios import OPERATOR_INSTALL_SECONDS, PROXMOX_ADDRESS, VM_ADDRESS
from e2e.box.workload import proxmox_node
from e2e.controllers import cluster_api, deployed
from e2e.controllers.manager import RunningManager
from e2e.engine import control_plane
from e2e.engine.cli import Engine
from e2e.standins.cluster import (
    admission_webhook_standin,
    cainjector_standin,
    chart_repo_standin,
    operator_standin,
    playbook_lab,
    pod_runner,
)
from e2e.standins.proxmox.pve_api_standin import PveApiStandIn
from e2e.standins.workload import providers
from e2e.standins.workload.vm_guest import WorkloadGuests

CILIUM_VERSION = "1.18.4"


def addresses(entry: Mapping[str, Any]) -> list[str]:
    """What the box's network namespace must hold for the workload cluster `entry`."""
    return [VM_ADDRESS, PROXMOX_ADDRESS, entry["controlPlaneEndpoint"]]


@dataclass
class WorkloadBox:
    base: Path
    mgmt: control_plane.ControlPlane
    operator: operator_standin.OperatorStandIn
    standins: providers.WorkloadStandIns
    charts: chart_repo_standin.ChartRepoStandIn
    webhook: admission_webhook_standin.WebhookStandIn
    injector: cainjector_standin.CainjectorStandIn
    pve: PveApiStandIn
    guests: WorkloadGuests
    managers: list[RunningManager] = field(default_factory=list)
    """The real Cluster API managers, each once the operator stand-in started it for its provider."""

    @property
    def manager(self) -> RunningManager:
        """The core manager."""
        found = cluster_api.core(self.managers)
        if found is None:
            raise RuntimeError("the Cluster API manager has not started: no CoreProvider is installed yet")
        return found

    @property
    def capmox_release_url(self) -> str:
        """What the program's CAPMOX release URL setting is set to in the box."""
        return f"{self.charts.url}/{chart_repo_standin.CAPMOX_ASSETS}"

    def repo_url(self, repository: str) -> str:
        """A chart repository's URL: `jetstack`, `capi-operator`, `cilium` or an extra one."""
        return f"{self.charts.url}/{repository}"

    def served_settings(self) -> dict[str, str]:
        """The program's settings that point it at what the box serves: the chart repositories
        (the autoscaler's too), Cilium's version there, and CAPMOX's release."""
        return {
            "certManagerChartRepo": self.repo_url("jetstack"),
            "capiOperatorChartRepo": self.repo_url("capi-operator"),
            "ciliumChartRepo": self.repo_url("cilium"),
            "ciliumVersion": CILIUM_VERSION,
            "clusterAutoscalerChartRepo": self.repo_url("autoscaler"),
            "capmoxReleaseUrl": self.capmox_release_url,
        }

    def engine(
        self, *, workload_clusters: bool = False, folder: str = "engine", passphrase: str | None = None
    ) -> Engine:
        """The real engine running the program's cluster part (box_program.py) against `mgmt`,
        trusting the chart repositories' stand-in; its stack config is the caller's to set (with
        `workload_clusters`, Pulumi.lab.yaml's lab1 in it, to be pointed at the box). Another
        `folder` and `passphrase`: another backend, as after the state was lost."""
        return _box_engine(
            self.base, self.charts, self.mgmt, workload_clusters=workload_clusters, folder=folder, passphrase=passphrase
        )

    def problems(self) -> dict[str, list[str]]:
        """What each stand-in refused or did not know; all empty in a good run."""
        return {
            "operator": self.operator.errors,
            "workload": self.standins.record.errors,
            "webhook_unknown": self.webhook.unknown,
            "injector": self.injector.errors,
            "charts_unknown": self.charts.unknown,
            "proxmox_unknown": self.pve.unknown,
            "proxmox_failed": self.pve.failed,
        }


def chart_repositories(
    cilium_version: str, extra: Mapping[str, Sequence[chart_repo_standin.Chart | chart_repo_standin.VendoredChart]]
) -> dict[str, list[chart_repo_standin.Chart | chart_repo_standin.VendoredChart]]:
    """cert-manager's, the operator's (with the provider CRDs, as cluster_first_run serves it),
    Cilium's, and `extra`."""
    return {
        "jetstack": list(CHART_REPOS["jetstack"]),
        "capi-operator": [OPERATOR_CHART_WITH_CRDS],
        "cilium": [chart_repo_standin.cilium_chart(cilium_version)],
        **{path: list(charts) for path, charts in extra.items()},
    }


@contextmanager
def running(
    base: Path,
    entry: Mapping[str, Any],
    *,
    cilium_version: str = CILIUM_VERSION,
    extra_charts: Mapping[str, Sequence[chart_repo_standin.Chart | chart_repo_standin.VendoredChart]] | None = None,
    operator_install_seconds: float = OPERATOR_INSTALL_SECONDS,
    interval: float = 1.0,
    mgmt_controllers: Sequence[str] = ("serviceaccount-token-controller",),
) -> Iterator[WorkloadBox]:
    """The workload box for the block (see the module's docstring); `interval` is the workload
    stand-ins' pass; `mgmt_controllers` what the management cluster's kube-controller-manager runs
    (the token controller alone unless a Deployment must become Pods: the autoscaler's)."""
    with ExitStack() as stack:
        mgmt = stack.enter_context(control_plane.running(base / "mgmt", VM_ADDRESS, controllers=mgmt_controllers))
        # Before the managers, so that CAPMOX's finds it when it starts and it outlives them.
        pve, guests = stack.enter_context(proxmox_node.serving(base / "pve", entry, TOKENS))
        # The workload stand-ins' block, whose workload control planes stop after the manager: a
        # workload API server still watched by the manager's cluster cache waits out its bound
        # (20 s) before it is killed.
        standins = stack.enter_context(providers.running(mgmt, base / "workload", guests, interval=interval))
        # Entered before the operator's loop, so closed after it: nothing starts a manager then.
        managers_stack = stack.enter_context(ExitStack())
        managers: list[RunningManager] = []

        def on_installed(kind: str, _name: str) -> None:
            deployed.start_for(kind, mgmt, base, VM_ADDRESS, stack=managers_stack, started=managers)

        operator = stack.enter_context(
            operator_standin.running(
                mgmt,
                playbook_lab.PROVIDER_RESOURCES,
                operator_install_seconds,
                real_crds=True,
                on_installed=on_installed,
            )
        )
        webhook, injector = stack.enter_context(_operator_webhooks(mgmt, base))
        charts = stack.enter_context(
            chart_repo_standin.serve(
                chart_repositories(cilium_version, extra_charts or {}),
                base,
                chart_repo_standin.capmox_release_assets(),
            )
        )
        yield WorkloadBox(base, mgmt, operator, standins, charts, webhook, injector, pve, guests, managers)


# The official cluster-autoscaler chart 9.59.0 from the archives, which the program's release installs.
AUTOSCALER_CHART = chart_repo_standin.VendoredChart("cluster-autoscaler-chart-9.59.0.tar.gz")
# The management cluster's kube-controller-manager with the autoscaler: the token controller, what
# makes its Deployment a Pod (the pod runner runs it), and the garbage collector, which ends a
# foreground deletion (pulumi-kubernetes deletes an old machine template so), as k3s's does.
AUTOSCALER_MGMT_CONTROLLERS = (
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
)


@contextmanager
def running_with_autoscaler(
    base: Path,
    entry: Mapping[str, Any],
    namespace: str,
    deployment: str,
    *,
    backoff_seconds: float,
    secret_sync_seconds: float,
) -> Iterator[tuple[WorkloadBox, pod_runner.PodRunner]]:
    """The workload box for the block with the autoscaler's chart served, and the pod runner that
    runs the program's autoscaler Deployment `namespace/deployment` as the real binary."""
    with ExitStack() as stack:
        box = stack.enter_context(
            running(
                base,
                entry,
                extra_charts={"autoscaler": [AUTOSCALER_CHART]},
                operator_install_seconds=0.0,
                mgmt_controllers=AUTOSCALER_MGMT_CONTROLLERS,
            )
        )
        runner = stack.enter_context(
            pod_runner.running(
                box.mgmt,
                namespace,
                deployment,
                base / "pods",
                backoff_seconds=backoff_seconds,
                secret_sync_seconds=secret_sync_seconds,
            )
        )
        yield box, runner
