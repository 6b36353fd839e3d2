"""What `make exit-criteria` and `make scaling-status` read of a lab's scaling path, through the
owner's own kubectl: the workload cluster's node group (the MachineDeployment whose node-group
annotations the autoscaler discovers), the autoscaler that scales it (its Deployment on the
management cluster and the timings its flags set), and the workload cluster's kubeconfig, which
Cluster API keeps in `<cluster>-kubeconfig` on the management cluster. Pure reading: nothing here
writes to either cluster.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.settings.workload import CAPACITY_ANNOTATION, MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION

DEFAULT_KUBECONFIG = "~/.kube/lab-mgmt.kubeconfig"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
DEPLOYMENT_NAME_LABEL = "cluster.x-k8s.io/deployment-name"
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
STATUS_CONFIGMAP = ("kube-system", "cluster-autoscaler-status")
# cluster-autoscaler's defaults (FAQ, "What are the parameters to CA?") for a flag its Deployment
# does not pass.
AUTOSCALER_DEFAULTS = {
    "scan-interval": "10s",
    "scale-down-unneeded-time": "10m",
    "scale-down-delay-after-add": "10m",
    "max-node-provision-time": "15m",
}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


class RefusedError(Exception):
    """What the lab lacks for the run, said with what to do; nothing was made."""


def seconds(duration: str) -> float:
    """A Go duration (`10s`, `1m30s`, `15m0s`) in seconds."""
    parts = _DURATION.findall(duration)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != duration:
        raise ValueError(f"{duration!r} is not a duration (for example 10s or 1m30s)")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


@dataclass(frozen=True)
class Kubectl:
    """The owner's kubectl with one kubeconfig."""

    kubeconfig: Path
    binary: str = "kubectl"
    what: str = "the management cluster"

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(  # noqa: S603 - the owner's kubectl, arguments of the command's own
            [self.binary, f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and done.returncode != 0:
            raise RefusedError(f"{self.what}: kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run("get", *args, "-o", "json").stdout)

    def items(self, *args: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.json(*args)["items"]
        return found


@dataclass(frozen=True)
class NodeGroup:
    """The workload cluster's MachineDeployment the autoscaler scales, as its annotations say."""

    namespace: str
    name: str
    min_size: int
    max_size: int
    capacity: dict[str, str]
    replicas: int

    @classmethod
    def of(cls, deployment: dict[str, Any]) -> NodeGroup:
        annotations = deployment["metadata"].get("annotations") or {}
        return cls(
            namespace=deployment["metadata"]["namespace"],
            name=deployment["metadata"]["name"],
            min_size=int(annotations[MIN_SIZE_ANNOTATION]),
            max_size=int(annotations[MAX_SIZE_ANNOTATION]),
            capacity={
                key.removeprefix(CAPACITY_ANNOTATION): value
                for key, value in annotations.items()
                if key.startswith(CAPACITY_ANNOTATION)
            },
            replicas=int(deployment["spec"].get("replicas") or 0),
        )


def node_groups(mgmt: Kubectl, namespace: str, cluster: str) -> list[NodeGroup]:
    """The cluster's MachineDeployments that carry both node-group annotations."""
    deployments = mgmt.items("machinedeployments", "-n", namespace, "-l", f"{CLUSTER_NAME_LABEL}={cluster}")
    return [
        NodeGroup.of(deployment)
        for deployment in deployments
        if {MIN_SIZE_ANNOTATION, MAX_SIZE_ANNOTATION} <= set(deployment["metadata"].get("annotations") or {})
    ]


@dataclass(frozen=True)
class Autoscaler:
    """The cluster-autoscaler Deployment that discovers the cluster, and its timings in seconds."""

    namespace: str
    name: str
    ready: int
    timings: dict[str, float]


def autoscaler(mgmt: Kubectl, namespace: str, cluster: str) -> Autoscaler | None:
    """The Deployment on the management cluster whose autoscaler discovers `cluster` (the
    program's release or one installed by hand): its node-group auto-discovery names it."""
    for deployment in mgmt.items("deployments", "--all-namespaces"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            flags = _flags([*(container.get("command") or []), *(container.get("args") or [])])
            discovery = flags.get("node-group-auto-discovery", "")
            if flags.get("cloud-provider") != "clusterapi" or f"clusterName={cluster}" not in discovery:
                continue
            if "namespace=" in discovery and f"namespace={namespace}" not in discovery:
                continue
            return Autoscaler(
                namespace=deployment["metadata"]["namespace"],
                name=deployment["metadata"]["name"],
                ready=int((deployment.get("status") or {}).get("readyReplicas") or 0),
                timings={key: seconds(flags.get(key, default)) for key, default in AUTOSCALER_DEFAULTS.items()},
            )
    return None


def _flags(argv: Sequence[str]) -> dict[str, str]:
    return {
        arg.removeprefix("--").split("=", 1)[0]: arg.split("=", 1)[1]
        for arg in argv
        if arg.startswith("--") and "=" in arg
    }


@contextmanager
def workload_kubeconfig(mgmt: Kubectl, namespace: str, cluster: str, given: Path | None) -> Iterator[Kubectl]:
    """kubectl for the workload cluster: through `given`, or through Cluster API's
    `<cluster>-kubeconfig` Secret written to a private file for the block (then removed)."""
    if given is not None:
        yield Kubectl(given, mgmt.binary, f"workload cluster {cluster}")
        return
    secret = mgmt.json("secret", f"{cluster}-kubeconfig", "-n", namespace)
    text = base64.b64decode(secret["data"]["value"]).decode()
    handle, name = tempfile.mkstemp(prefix=f"{cluster}-", suffix=".kubeconfig")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
        yield Kubectl(Path(name), mgmt.binary, f"workload cluster {cluster}")
    finally:
        Path(name).unlink(missing_ok=True)


def worker(node: dict[str, Any]) -> bool:
    return CONTROL_PLANE_ROLE not in node["metadata"].get("labels", {})


def worker_nodes(workload: Kubectl) -> list[dict[str, Any]]:
    return [node for node in workload.items("nodes") if worker(node)]


def ready(node: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))


def arguments(description: str) -> argparse.ArgumentParser:
    """What both commands take: the workload cluster, and how to reach it and the management cluster."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cluster", required=True, help="the workload cluster, `name` or `namespace/name`")
    parser.add_argument("--kubeconfig", default=DEFAULT_KUBECONFIG, help="the management cluster's")
    parser.add_argument("--workload-kubeconfig", type=Path, help="default: the one Cluster API keeps")
    parser.add_argument("--kubectl", default="kubectl")
    return parser


def reached(args: argparse.Namespace) -> tuple[Kubectl, str, str]:
    """kubectl for the management cluster, and the workload cluster's namespace and name
    (`namespace/name`, or a name in `default`)."""
    namespace, _, name = str(args.cluster).rpartition("/")
    return Kubectl(Path(args.kubeconfig).expanduser(), args.kubectl), namespace or "default", name
