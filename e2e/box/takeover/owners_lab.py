"""The lab as its owner runs it today (issue 40), in the whole box with lab1's machinery
(e2e/box/workload/lab1_box.py), at the lab's values:

- the management cluster as the Ansible playbook left it: VM 201 made on the node, k3s, the
  HelmCharts, the providers, `capmox-variables` and the inspector's RBAC (playbook_vm.py);
- lab1 made with `clusterctl generate cluster lab1` from the owner's clusterctl.yaml with two
  workers and applied client-side, Cilium installed into it with `helm install`
  (workload/clusterctl_lab1.py), brought up by the real Cluster API manager and the workload
  stand-ins;
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

A laptop command runs in a real bash whose HOME is the laptop's; ssh, which reads the password
database's home instead, finds the laptop's keys there, bound in a mount namespace of the line's own.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.box import box as whole_box
from e2e.box import playbook_vm
from e2e.box.takeover import inspector
from e2e.box.workload import clusterctl_lab1, lab1_box
from e2e.engine.cli import REPO, built_bin
from e2e.engine.control_plane import ControlPlane
from e2e.standins.cluster.chart_repo_standin import ChartRepoStandIn
from e2e.standins.proxmox import node_shell

# The owner's clusterctl.yaml at the lab's values, with the workers lab1 runs today: more than one,
# within the shipped entry's minSize..maxSize.
SITE = dataclasses.replace(clusterctl_lab1.SITES["lab"], workers=2)
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
# ssh alone reads its keys and known hosts from the password database's home, not from HOME: the
# laptop's are bound there, in a mount namespace of the line's own.
LAPTOP_SHELL = (
    'mkdir -p ~root/.ssh && mount --bind "$HOME/.ssh" ~root/.ssh && cd "$PROJECT" && exec bash -o pipefail -c "$LINE"'
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
    made: dict[str, Any] = field(default_factory=dict)
    """What the owner's steps did and the state they left (clusterctl_lab1's record)."""

    @property
    def home(self) -> Path:
        """The laptop's home directory: the engine's root, where the README's first run left the
        key and the CLI's state."""
        return self.box.engine.root

    def laptop(self, line: str) -> dict[str, Any]:
        """One line typed on the laptop, in the repository's folder."""
        engine = self.box.engine
        tools = [engine.bin_dir, *(built_bin(v, b) for v, b in _LAPTOP_BINARIES), Path("/usr/bin"), Path("/bin")]
        env = {
            **engine.env(),
            "PATH": ":".join(map(str, tools)),
            "HOME": str(self.home),
            "PROJECT": str(engine.project),
            "LINE": line,
        }
        argv = ["unshare", "--mount", "--", "bash", "-c", LAPTOP_SHELL]
        return _ran(line, subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False))

    def node(self, line: str) -> dict[str, Any]:
        """One line typed on the Proxmox node, as root."""
        home = self.box.engine.root.parent / "node-root"
        home.mkdir(exist_ok=True)
        env = {"PATH": f"{self.node_shell.bin}:/usr/bin:/bin", "HOME": str(home)}
        argv = ["bash", "-o", "pipefail", "-c", line]
        return _ran(
            line, subprocess.run(argv, env=env, cwd=home, capture_output=True, text=True, timeout=120, check=False)
        )


_LAPTOP_BINARIES = (("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl"), ("LAB_MGMT_HELM_BIN", "helm"))


def _ran(line: str, done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return {"line": line, "rc": done.returncode, "stdout": done.stdout[-6000:], "stderr": done.stderr[-6000:]}


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
    the VM's host key (the owner has dialled it before), and the repository's tools beside the
    program."""
    kube = lab.home / ".kube"
    kube.mkdir(exist_ok=True)
    shutil.copy2(lab.box.cluster.kubeconfig, kube / "lab-mgmt.kubeconfig")
    shutil.copy2(lab.lab1_kubeconfig, kube / "lab1.kubeconfig")
    for path in kube.iterdir():
        path.chmod(0o600)
    host_key = lab.box.guests.disk_path(lab.box.site.vmid, "/etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
    (lab.home / ".ssh" / "known_hosts").write_text(f"{lab.box.site.address} {host_key[0]} {host_key[1]}\n")
    shutil.copytree(REPO / "tools", lab.box.engine.project / "tools", ignore=shutil.ignore_patterns("__pycache__"))


@contextmanager
def running(base: Path) -> Iterator[OwnersLab]:
    with lab1_box.running(base, as_shipped=True) as (box, parts), node_shell.serving(box.pve, base / "node") as node:
        playbook_vm.playbook_left(box, base)
        # clusterctl_lab1 leaves lab1's admin kubeconfig there, read from its Secret.
        lab = OwnersLab(box, parts, node, base / "lab1.kubeconfig")
        marks: list[str] = []
        clusterctl_lab1.left_by_the_owner(
            _Management(base, box.cluster, box.charts), base, SITE, lab.made, mark=marks.append
        )
        _laptop_files(lab)
        lab.made["hand_autoscaler"] = _hand_autoscaler(lab)
        # The inspector's files as this week's refresh left them (lab1's RBAC applied there once).
        for cluster in inspector.CONTEXTS:
            admin = f"~/.kube/{cluster}.kubeconfig"
            inspector.mint_old_file(lab, box.engine.project, cluster, admin, apply_rbac=cluster == "lab1")
        yield lab
