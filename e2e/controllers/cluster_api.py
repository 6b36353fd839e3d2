"""The real Cluster API managers of v1.12.11, built by `e2e/engine/build-engine.sh workload` from
the archive (their directory in LAB_MGMT_CLUSTER_API_BIN), each running against a box's management
API server (e2e/engine/control_plane.py) as cluster-api-operator would deploy it for its provider
CR (e2e/controllers/deployed.py):

- CORE, the core manager (the archive's root main.go): the Cluster, MachineDeployment, MachineSet
  and Machine controllers and the webhooks (defaulting and validation; replicas are defaulted
  there) of upstream, unchanged;
- BOOTSTRAP, the kubeadm bootstrap manager (bootstrap/kubeadm): its webhooks and its KubeadmConfig
  controller, which renders each worker's bootstrap data from the program's KubeadmConfigTemplate
  (cloud-config running `kubeadm join`) with a bootstrap token it makes in the workload cluster and
  the pin of the CA in `<cluster>-ca`; the VMs boot with that data (e2e/standins/workload/vm_boot.py);
- CONTROL_PLANE, the KubeadmControlPlane manager (controlplane/kubeadm), webhooks only (issue 57):
  every KubeadmControlPlane the program or clusterctl sends goes through upstream's defaulting and
  validation, while its controller is kept idle by `--watch-filter` (a label value no object
  carries), since what it drives (kubeadm init on the VMs, etcd through port-forwards) is the KCP
  stand-in's (e2e/standins/workload/kubeadm_control_plane.py).

Each starts as e2e/controllers/manager.py starts a provider's manager.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from e2e.controllers.manager import Manager, RunningManager
from e2e.engine import vendor
from e2e.engine.control_plane import ControlPlane

# A label value no object carries: the managers run for their webhooks have nothing to reconcile.
IDLE_WATCH_FILTER = "lab-mgmt-webhooks-only"
BIN_VARIABLE = "LAB_MGMT_CLUSTER_API_BIN"
HEALTH_FLAG = "--health-addr"


def _manager(
    binary: str, tree: str, prefix: str, ports: tuple[int, int, int], watch_filter: str | None = None
) -> Manager:
    """A manager of the archive's tree at `tree` (its config/ there), at its webhook, health and
    diagnostics `ports`."""
    manifests = partial(vendor.member, vendor.CLUSTER_API_ARCHIVE, f"{tree}config/webhook/manifests.yaml")
    return Manager(binary, BIN_VARIABLE, manifests, prefix, *ports, HEALTH_FLAG, watch_filter=watch_filter)


CORE = _manager("cluster-api-manager", "", "capi-", (9445, 9440, 8443))
CONTROL_PLANE = _manager(
    "kubeadm-control-plane-manager",
    "controlplane/kubeadm/",
    "capi-kubeadm-control-plane-",
    (9446, 9441, 8444),
    IDLE_WATCH_FILTER,
)
BOOTSTRAP = _manager("kubeadm-bootstrap-manager", "bootstrap/kubeadm/", "capi-kubeadm-bootstrap-", (9447, 9442, 8445))


def core(managers: Sequence[RunningManager]) -> RunningManager | None:
    """The core manager among `managers`, once it started."""
    return next((m for m in managers if m.manager is CORE), None)


def v1beta1_requests(cluster: ControlPlane) -> dict[str, int]:
    """How many requests the API server counted for each cluster.x-k8s.io group at v1beta1 (its
    apiserver_request_total metric), by `group resource verb`; empty when none came."""
    metrics = cluster.kubectl("get", "--raw", "/metrics").stdout
    counted: dict[str, int] = {}
    for line in metrics.splitlines():
        if not line.startswith("apiserver_request_total{") or 'version="v1beta1"' not in line:
            continue
        labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.rindex("}")].split(","))
        group = labels.get("group", "").strip('"')
        if group.endswith("cluster.x-k8s.io"):
            key = " ".join(labels.get(name, "").strip('"') for name in ("group", "resource", "verb"))
            counted[key] = counted.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
    return counted
