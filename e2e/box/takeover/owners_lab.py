"""The lab as its owner runs it today (issue 40), in the whole box with lab1's machinery
(e2e/box/workload/lab1_box.py), at the lab's values:

- the management cluster as the Ansible playbook left it: VM 201 made on the node, k3s, the
  HelmCharts, installed by k3s's real helm-controller and its Jobs, the providers,
  `capmox-variables` and the inspector's RBAC (playbook_vm.py; e2e/box/management/k3s_charts.py);
- lab1 made with `clusterctl generate cluster lab1` from the owner's clusterctl.yaml with two
  workers and applied client-side, Cilium installed into it with `helm install`
  (workload/clusterctl_lab1.py), brought up by the real Cluster API manager and the workload
  stand-ins;
- phase 1's hand work on lab1's objects with `kubectl annotate`, `label` and `patch` (HAND_WORK);
- a cluster-autoscaler installed by hand with Helm from a values file like the owner's
  `configs/cluster-autoscaler/values.yaml` (`kube-system/cluster-autoscaler`);
- the owner's laptop: the repository's folder (the engine's project) with `Pulumi.lab.yaml` as
  shipped and the stack `lab` made by the README's first run, the admin kubeconfigs where the
  owner keeps them (`~/.kube/lab-mgmt.kubeconfig`, `~/.kube/lab1.kubeconfig`), the inspector's
  read-only ones as its weekly `make-kubeconfig.sh` left them (inspector.py), the owner's SSH key
  and the VM's host key known; and the Proxmox node's own `qm` and `vzdump`
  (e2e/standins/proxmox/node_shell.py).

    with owners_lab.running(base) as lab:  # in a network namespace holding lab1_box.ADDRESSES
        lab.laptop("pulumi preview --stack lab")  # as typed, in the repository's folder
        lab.node("qm config 201")                  # as typed on the node

Each line is typed through keyboard.py.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.box import box as whole_box
from e2e.box.management import box_adoption, playbook_vm
from e2e.box.management.k3s_charts import K3sCharts
from e2e.box.takeover import inspector, keyboard
from e2e.box.workload import clusterctl_lab1, lab1_box
from e2e.engine.control_plane import ControlPlane
from e2e.standins.cluster.chart_repo_standin import ChartRepoStandIn
from e2e.standins.proxmox import node_shell

# The owner's clusterctl.yaml at the lab's values, with the workers lab1 runs today: more than one,
# within the shipped entry's minSize..maxSize; and the capacity annotations for scale from zero,
# which the owner added to the rendered manifest before `kubectl apply` (issue 54: they sit in
# kubectl's last-applied record, and pass the takeover's gate as the settings render them).
_LAB = clusterctl_lab1.SITES["lab"]
SITE = dataclasses.replace(
    _LAB,
    workers=2,
    deployment_annotations=(
        ("capacity.cluster-autoscaler.kubernetes.io/cpu", str(_LAB.sockets * _LAB.cores)),
        ("capacity.cluster-autoscaler.kubernetes.io/memory", f"{_LAB.memory_mib}Mi"),
    ),
)
# The autoscaler the owner installed by hand, and their values file for it (the spec's chart and
# image, in the management cluster in kubeconfig-incluster mode, as the program's own).
HAND_AUTOSCALER = ("kube-system", "cluster-autoscaler")
HAND_AUTOSCALER_CHART = "9.59.0"
HAND_AUTOSCALER_VALUES = {
    "cloudProvider": "clusterapi",
    "clusterAPIMode": "kubeconfig-incluster",
    "clusterAPIKubeconfigSecret": "lab1-kubeconfig",
    "autoDiscovery": {"clusterName": "lab1", "namespace": "default"},
    "image": {"tag": "v1.35.2"},
    # One flag the program's release does not pass (docs/adoption.md W2 keeps it), one it passes alike.
    "extraArgs": {"balance-similar-node-groups": True, "scale-down-unneeded-time": "10m"},
}


# Phase 1's hand work on lab1 after clusterctl's apply (issue 54), as the owner typed it: the
# node group's bounds and a scale-from-zero hint for their autoscaler, a label, an annotation on
# the workers' bootstrap template, and an API server flag patched into the control plane.
# docs/adoption.md keeps every one of them through the takeover.
HAND_WORK = (
    "kubectl --kubeconfig ~/.kube/lab-mgmt.kubeconfig -n default annotate machinedeployment lab1-workers"
    " cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size=0"
    " cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size=3"
    " capacity.cluster-autoscaler.kubernetes.io/labels=disk=ssd",
    "kubectl --kubeconfig ~/.kube/lab-mgmt.kubeconfig -n default label cluster lab1 site=home",
    "kubectl --kubeconfig ~/.kube/lab-mgmt.kubeconfig -n default annotate kubeadmconfigtemplate lab1-worker"
    " lab.home/phase=1",
    "kubectl --kubeconfig ~/.kube/lab-mgmt.kubeconfig -n default patch kubeadmcontrolplane lab1-control-plane"
    " --type=merge -p '"
    '{"spec":{"kubeadmConfigSpec":{"clusterConfiguration":{"apiServer":{"extraArgs":'
    '[{"name":"audit-log-maxage","value":"30"}]}}}}}'
    "'",
)


@dataclass
class _Management:
    """The VM's k3s as clusterctl_lab1 applies lab1 to it."""

    base: Path
    mgmt: ControlPlane
    charts: ChartRepoStandIn

    def repo_url(self, repository: str) -> str:
        return f"{self.charts.url}/{repository}"


@dataclass
class OwnersLab:
    box: whole_box.Box
    parts: lab1_box.Lab1Parts
    node_shell: node_shell.NodeShell
    lab1_kubeconfig: Path
    k3s_charts: K3sCharts
    made: dict[str, Any] = field(default_factory=dict)
    """What the owner's steps did and the state they left (clusterctl_lab1's record)."""
    variables: dict[str, str] = field(default_factory=dict)
    """What lines typed on the laptop set in its shell, for the lines after them."""

    @property
    def home(self) -> Path:
        """The laptop's home directory: the engine's root, where the README's first run left the
        key and the CLI's state."""
        return self.box.engine.root

    def laptop(self, line: str) -> dict[str, Any]:
        """One line typed on the laptop, in the repository's folder, in the one shell the owner
        types the page in: a variable a line sets is there for the lines after it."""
        if keyboard.ASSIGNMENT.match(line):
            ran, self.variables = keyboard.assigned(self.box.engine, line, self.variables)
            return ran
        return keyboard.laptop(self.box.engine, line, variables=self.variables)

    def node(self, line: str) -> dict[str, Any]:
        """One line typed on the Proxmox node, as root."""
        return keyboard.node(self.node_shell, self.box.engine.root.parent / "node-root", line)


def _hand_autoscaler(lab: OwnersLab) -> dict[str, Any]:
    """`helm install` of the autoscaler's chart from the owner's values file, into the management
    cluster, as the owner ran it from the laptop."""
    values = lab.home / "configs" / "cluster-autoscaler" / "values.yaml"
    values.parent.mkdir(parents=True)
    values.write_text(yaml.safe_dump(HAND_AUTOSCALER_VALUES))
    namespace, release = HAND_AUTOSCALER
    charts = lab.box.charts
    lab.laptop(f"helm repo add autoscaler {charts.url}/autoscaler --ca-file {charts.certificate}")
    return lab.laptop(
        f"helm --kubeconfig ~/.kube/lab-mgmt.kubeconfig install {release} autoscaler/cluster-autoscaler"
        f" --version {HAND_AUTOSCALER_CHART} -n {namespace} -f {values}"
    )


def _laptop_files(lab: OwnersLab) -> None:
    """What the owner's laptop holds already: both admin kubeconfigs where the owner keeps them,
    and what any owner's laptop holds (keyboard.laptop_as_the_owners)."""
    kube = lab.home / ".kube"
    kube.mkdir(exist_ok=True)
    shutil.copy2(lab.box.cluster.kubeconfig, kube / "lab-mgmt.kubeconfig")
    shutil.copy2(lab.lab1_kubeconfig, kube / "lab1.kubeconfig")
    for path in kube.iterdir():
        path.chmod(0o600)
    keyboard.laptop_as_the_owners(lab.box.engine, lab.box.site.address, box_adoption._host_key_file(lab.box))


@contextmanager
def running(base: Path) -> Iterator[OwnersLab]:
    with lab1_box.running(base, as_shipped=True) as (box, parts), node_shell.serving(box.pve, base / "node") as node:
        k3s_charts = playbook_vm.playbook_left(box, base)
        # clusterctl_lab1 leaves lab1's admin kubeconfig there, read from its Secret.
        lab = OwnersLab(box, parts, node, base / "lab1.kubeconfig", k3s_charts)
        marks: list[str] = []
        clusterctl_lab1.left_by_the_owner(
            _Management(base, box.cluster, box.charts), base, SITE, lab.made, mark=marks.append
        )
        _laptop_files(lab)
        lab.made["hand_work"] = [lab.laptop(line) for line in HAND_WORK]
        lab.made["hand_autoscaler"] = _hand_autoscaler(lab)
        # The inspector's files as this week's refresh left them (lab1's RBAC applied there once).
        for cluster in inspector.CONTEXTS:
            admin = f"~/.kube/{cluster}.kubeconfig"
            inspector.mint_old_file(lab, lab.home, cluster, admin, apply_rbac=cluster == "lab1")
        yield lab
