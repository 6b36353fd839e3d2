"""What `make exit-criteria` and `make scaling-status` read of a lab's scaling path, through the
owner's own kubectl: the workload cluster's node group (the MachineDeployment whose node-group
annotations the autoscaler discovers, with its capacity and per-group timing annotations), the
autoscaler that scales it (its Deployment on the management cluster, and the flags it runs with),
and the workload cluster's kubeconfig, which Cluster API keeps in `<cluster>-kubeconfig` on the
management cluster; and, given a token, the VMs on Proxmox VE. Pure reading: nothing here writes to
either cluster or to Proxmox VE.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shlex
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from components.settings.workload import CAPACITY_ANNOTATION, MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION

DEFAULT_KUBECONFIG = "~/.kube/lab-mgmt.kubeconfig"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
DEPLOYMENT_NAME_LABEL = "cluster.x-k8s.io/deployment-name"
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
# The clusterapi provider's per-node-group overrides of the autoscaler's flags
# (cloudprovider/clusterapi/clusterapi_nodegroup.go, GetOptions), by the flag each overrides.
OPTIONS_ANNOTATION = "cluster.x-k8s.io/autoscaling-options-"
GROUP_OPTIONS = {
    "scale-down-unneeded-time": "scaledownunneededtime",
    "max-node-provision-time": "maxnodeprovisiontime",
}
# cluster-autoscaler 1.35.2's defaults (config/flags/flags.go) for a flag its Deployment does not
# pass: the timings each step is bounded with, where it keeps its status, and what keeps a node.
AUTOSCALER_DEFAULTS = {
    "scan-interval": "10s",
    "scale-down-unneeded-time": "10m",
    "scale-down-delay-after-add": "10m",
    "max-node-provision-time": "15m",
    "unremovable-node-recheck-timeout": "5m",
}
FLAG_DEFAULTS = {
    "namespace": "kube-system",
    "status-config-map-name": "cluster-autoscaler-status",
    "skip-nodes-with-system-pods": "true",
    "skip-nodes-with-local-storage": "true",
    "skip-nodes-with-custom-controller-pods": "true",
    "blocking-system-pod-distruption-timeout": "1h",
}
# pflag gives a bool flag written without `=` its true and leaves the next word an argument, so
# `--k v` is a value only for the others.
BOOLEAN_FLAGS = frozenset(flag for flag in FLAG_DEFAULTS if flag.startswith("skip-nodes-with-"))
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_QUANTITY = re.compile(r"^([0-9.]+)(?:([eE][-+]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")
_SUFFIX = {
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate(("k", "M", "G", "T", "P", "E"))},
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
}
# What a request answers while the API server restarts, its etcd elects, or the network blinks:
# worth asking again within a step's bound. Anything else (NotFound, Forbidden, a bad flag) is not.
# A restarted API server (k3s restarted on the VM) answers before it serves the CRDs' kinds again:
# kubectl then finds no such resource type, or a 404 for the kind itself, for kinds the run has
# already read.
TRANSIENT = re.compile(
    r"connection refused|The connection to the server \S+ was refused|connection reset"
    r"|the server doesn't have a resource type|the server could not find the requested resource"
    r"|Unable to connect to the server|i/o timeout|TLS handshake timeout|context deadline exceeded"
    r"|Client\.Timeout|http2: client connection lost|no route to host|\bEOF\b"
    r"|ServiceUnavailable|InternalError|TooManyRequests|\(Timeout\)|etcdserver|leader changed"
    r"|the server is currently unable|did not answer within",
)
# Each request of a kubectl that does not wait; one that waits (`--timeout`) gets that long.
REQUEST_SECONDS = 30
# Above kubectl's own limit, so that kubectl, not the subprocess, says what took too long.
SUBPROCESS_SLACK = 30


class RefusedError(Exception):
    """What the lab lacks for the run, said with what to do; nothing was made."""


class KubectlError(Exception):
    """A kubectl call that failed, with its words; `transient` when asking again may answer."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class ProxmoxError(KubectlError):
    """A Proxmox VE API request that failed, asked again as a kubectl call is where transient."""


def seconds(duration: str) -> float:
    """A Go duration (`10s`, `1m30s`, `15m0s`) in seconds."""
    parts = _DURATION.findall(duration)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != duration:
        raise ValueError(f"{duration!r} is not a duration (for example 10s or 1m30s)")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def quantity(text: str) -> float:
    """A Kubernetes quantity (`8`, `1500m`, `16Gi`, `16393244Ki`) in its base unit."""
    found = _QUANTITY.match(text.strip())
    if not found:
        raise ValueError(f"{text!r} is not a quantity (for example 8, 500m or 16Gi)")
    number, exponent, suffix = found.groups()
    try:
        value = Decimal(number) * (Decimal(f"1{exponent}") if exponent else _SUFFIX.get(suffix or "", Decimal(1)))
    except InvalidOperation as invalid:
        raise ValueError(f"{text!r} is not a quantity") from invalid
    return float(value)


def go_bool(text: str) -> bool:
    """A bool flag's value as Go's strconv.ParseBool reads it."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise ValueError(f"{text!r} is not a bool")


@dataclass(frozen=True)
class Kubectl:
    """The owner's kubectl with one kubeconfig; `shown` is how a printed line names that
    kubeconfig (a path, or how to read it from the management cluster)."""

    kubeconfig: Path
    binary: str = "kubectl"
    what: str = "the management cluster"
    shown: str = ""

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True, waits: float = 0
    ) -> subprocess.CompletedProcess[str]:
        """kubectl `args`; `waits`: seconds kubectl itself may wait (`--timeout`), else each
        request is bounded. Its own session, so that the terminal's Ctrl-C or hang-up reaches
        only this command, which then still removes what it made with kubectl."""
        limit = [f"--timeout={waits:g}s"] if waits else [f"--request-timeout={REQUEST_SECONDS}s"]
        line = [self.binary, f"--kubeconfig={self.kubeconfig}", *args, *limit]
        allowed = (waits or REQUEST_SECONDS) + SUBPROCESS_SLACK
        try:
            done = subprocess.run(  # noqa: S603 - the owner's kubectl, arguments of the command's own
                line, input=stdin, capture_output=True, text=True, timeout=allowed, check=False, start_new_session=True
            )
        except subprocess.TimeoutExpired as expired:
            raise KubectlError(
                f"{self.what}: kubectl {' '.join(args)}: did not answer within {allowed:g} s", transient=True
            ) from expired
        if check and done.returncode != 0:
            raise self.failed(args, done.stderr)
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run("get", *args, "-o", "json").stdout)

    def items(self, *args: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.json(*args)["items"]
        return found

    def found(self, *args: str) -> Any | None:
        """`get` of one object, or None where it does not exist."""
        done = self.run("get", *args, "-o", "json", check=False)
        if done.returncode == 0:
            return json.loads(done.stdout)
        if "NotFound" in done.stderr or "not found" in done.stderr:
            return None
        raise self.failed(("get", *args), done.stderr)

    def failed(self, args: Sequence[str], stderr: str) -> KubectlError:
        words = stderr.strip()
        return KubectlError(f"{self.what}: kubectl {' '.join(args)}: {words}", transient=bool(TRANSIENT.search(words)))

    def line(self, *args: str) -> str:
        """The kubectl line an owner types to see what `args` show."""
        return " ".join(
            ["kubectl", "--kubeconfig", self.shown or shlex.quote(str(self.kubeconfig)), *map(shlex.quote, args)]
        )


@dataclass(frozen=True)
class Proxmox:
    """Proxmox VE's API, read with an API token (`user@realm!name=secret`; one with VM.Audit
    alone, PVEAuditor's, is enough); `insecure` skips the TLS checks, for a self-signed certificate."""

    endpoint: str
    token: str = field(repr=False)
    insecure: bool = False

    def vms(self) -> list[dict[str, Any]]:
        """Every VM of the cluster, on every node: vmid, name, node, status."""
        url = urllib.parse.urljoin(self.endpoint.rstrip("/") + "/", "api2/json/cluster/resources?type=vm")
        if urllib.parse.urlparse(url).scheme not in ("https", "http"):
            raise ProxmoxError(f"Proxmox VE: {self.endpoint} is not an http(s) address", transient=False)
        request = urllib.request.Request(url, headers={"Authorization": f"PVEAPIToken={self.token}"})  # noqa: S310 - checked above
        context = ssl.create_default_context()
        if self.insecure:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_SECONDS, context=context) as answer:  # noqa: S310
                found: list[dict[str, Any]] = json.loads(answer.read())["data"]
        except urllib.error.HTTPError as error:
            raise ProxmoxError(
                f"Proxmox VE: GET {url}: {error.code} {error.reason}", transient=error.code >= 500
            ) from error
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            raise ProxmoxError(f"Proxmox VE: GET {url}: {error}", transient=True) from error
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
    options: dict[str, str] = field(default_factory=dict)
    """Its `cluster.x-k8s.io/autoscaling-options-*` annotations, by option."""

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
            options={
                key.removeprefix(OPTIONS_ANNOTATION): value
                for key, value in annotations.items()
                if key.startswith(OPTIONS_ANNOTATION)
            },
        )


def node_groups(mgmt: Kubectl, namespace: str, cluster: str) -> list[NodeGroup]:
    """The cluster's MachineDeployments that carry both node-group annotations."""
    deployments = mgmt.items(
        "machinedeployments.cluster.x-k8s.io", "-n", namespace, "-l", f"{CLUSTER_NAME_LABEL}={cluster}"
    )
    return [
        NodeGroup.of(deployment)
        for deployment in deployments
        if {MIN_SIZE_ANNOTATION, MAX_SIZE_ANNOTATION} <= set(deployment["metadata"].get("annotations") or {})
    ]


@dataclass(frozen=True)
class Autoscaler:
    """The cluster-autoscaler Deployment that discovers the cluster: its timings in seconds and
    every flag it runs with (the last of a repeated one)."""

    namespace: str
    name: str
    ready: int
    timings: dict[str, float]
    flags: dict[str, str] = field(default_factory=dict)
    image: str = ""
    selector: dict[str, str] = field(default_factory=dict)

    def flag(self, name: str) -> str:
        return self.flags.get(name, FLAG_DEFAULTS.get(name, ""))

    def skips(self, what: str) -> bool:
        """Whether it keeps a node with such pods: `--skip-nodes-with-<what>`."""
        return go_bool(self.flag(f"skip-nodes-with-{what}"))

    @property
    def status_configmap(self) -> tuple[str, str]:
        """Where it writes its status, in the workload cluster: `--namespace`, `--status-config-map-name`."""
        return self.flag("namespace"), self.flag("status-config-map-name")


def autoscaler(mgmt: Kubectl, namespace: str, cluster: str) -> Autoscaler | None:
    """The Deployment on the management cluster whose autoscaler discovers `cluster` (the
    program's release or one installed by hand): its node-group auto-discovery names it."""
    for deployment in mgmt.items("deployments", "--all-namespaces"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            flags = parse_flags([*(container.get("command") or []), *(container.get("args") or [])])
            if flags.get("cloud-provider", [""])[-1] != "clusterapi":
                continue
            if not any(discovers(spec, namespace, cluster) for spec in flags.get("node-group-auto-discovery", [""])):
                continue
            last = {key: values[-1] for key, values in flags.items()}
            return Autoscaler(
                namespace=deployment["metadata"]["namespace"],
                name=deployment["metadata"]["name"],
                ready=int((deployment.get("status") or {}).get("readyReplicas") or 0),
                timings={key: seconds(last.get(key, default)) for key, default in AUTOSCALER_DEFAULTS.items()},
                flags=last,
                image=container.get("image", ""),
                selector=dict((deployment["spec"].get("selector") or {}).get("matchLabels") or {}),
            )
    return None


def discovers(spec: str, namespace: str, cluster: str) -> bool:
    """Whether `--node-group-auto-discovery=clusterapi:k=v,…` takes in the cluster: each of its
    clusterName and namespace, when given, equal to the cluster's (none given: every cluster)."""
    found = dict(pair.split("=", 1) for pair in spec.removeprefix("clusterapi:").split(",") if "=" in pair)
    return found.get("clusterName", cluster) == cluster and found.get("namespace", namespace) == namespace


def parse_flags(argv: Sequence[str]) -> dict[str, list[str]]:
    """Each `--flag` of a command line with its values in order, written `--k=v` or `--k v`."""
    found: dict[str, list[str]] = {}
    words = list(argv)
    for index, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name, equals, value = word.removeprefix("--").partition("=")
        following = words[index + 1] if index + 1 < len(words) else None
        if not equals and name not in BOOLEAN_FLAGS and following is not None and not following.startswith("-"):
            value = following
        elif not equals:
            value = "true"
        found.setdefault(name, []).append(value)
    return found


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
    read_it = mgmt.line("get", "secret", f"{cluster}-kubeconfig", "-n", namespace, "-o", "jsonpath={.data.value}")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
        yield Kubectl(Path(name), mgmt.binary, f"workload cluster {cluster}", f"<({read_it} | base64 -d)")
    finally:
        Path(name).unlink(missing_ok=True)


def worker(node: dict[str, Any]) -> bool:
    return CONTROL_PLANE_ROLE not in (node["metadata"].get("labels") or {})


def ready(node: dict[str, Any]) -> bool:
    """A Node's, or a Pod's, Ready condition."""
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


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
