"""What the lab1 scenarios (lab1_autoscaling.py, the owner's journey's scaling) read, and how they wait: both
clusters through their APIs (`Lab`), the audit logs (who wrote what, who was refused), the CLI's runs, the autoscaler's
process from /proc and from inside its namespaces, and the Cluster API objects a step leaves. Each
function returns plain data for the tests (tests/test_box_lab1_*.py) to assert on.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.box.cluster_part import _requests_since
from e2e.box.scenarios import WRITES
from e2e.controllers import deployed
from e2e.engine.cli import Engine, built_bin
from e2e.engine.control_plane import ControlPlane
from e2e.engine.kube_api import Api, UnreachableError
from e2e.standins.cluster import chart_repo_standin
from e2e.standins.workload.objects import DEPLOYMENT_NAME_LABEL


@dataclass(frozen=True)
class Workload:
    """A workload cluster's names on the management cluster: its namespace and name, and what the
    program and Cluster API name after them."""

    namespace: str
    name: str

    @classmethod
    def of(cls, entry: dict[str, Any]) -> Workload:
        """The names of a `workloadClusters` entry."""
        return cls(entry["namespace"], entry["name"])

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def workers(self) -> str:
        return f"{self.name}-workers"

    @property
    def workers_selector(self) -> str:
        """The label selector of the workers' Machines."""
        return f"{DEPLOYMENT_NAME_LABEL}={self.workers}"

    @property
    def autoscaler(self) -> str:
        return f"{self.name}-autoscaler"

    @property
    def account(self) -> str:
        """The autoscaler's ServiceAccount as the audit log names it."""
        return f"system:serviceaccount:{self.namespace}:{self.autoscaler}"

    @property
    def core(self) -> str:
        """The API path of its Cluster API core objects."""
        return f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{self.namespace}"

    @property
    def kubeconfig_secret(self) -> str:
        return f"{self.name}-kubeconfig"


LAB1 = Workload("default", "lab1")
"""lab1 as the owner made it with clusterctl (the takeover's)."""
DEMAND = "demand"
BOUND = 180.0
POLL = 0.5
ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def until(what: str, done: Callable[[], Any], bound: float = BOUND) -> Any:
    """`done()`'s first true answer, polled; an AssertionError after `bound` seconds."""
    deadline = time.monotonic() + bound
    while not (answer := done()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound}s: {what}")
        time.sleep(POLL)
    return answer


def built_tool(variable: str, binary: str, base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A built CLI with a home of its own under the box (no version check, no user config)."""
    home = base / "home"
    home.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "CLUSTERCTL_DISABLE_VERSIONCHECK": "true",
    }
    return subprocess.run(
        [str(built_bin(variable, binary) / binary), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=base,
    )


def ran(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """What a built CLI's run did, for a test to read: its arguments, exit code and output's end."""
    return {"args": done.args[1:], "rc": done.returncode, "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:]}


def get(
    cluster: ControlPlane,
    resource: str,
    name: str = "",
    *,
    namespace: str = LAB1.namespace,
    selector: str = "",
    kubeconfig: Path | None = None,
) -> Any:
    """What `kubectl get -o json` prints, through the API (no process a poll), as the admin of
    `cluster` or whoever `kubeconfig` names; None where not found, not yet served, or its API
    server not answering yet."""
    api = Api.from_kubeconfig(kubeconfig or cluster.kubeconfig)
    try:
        return api.read(resource, name, namespace=namespace, selector=selector)
    except UnreachableError:  # lab1's API server, not up yet
        return None


def bootstrap(mgmt: ControlPlane, machine: dict[str, Any], lab1: Path) -> dict[str, Any]:
    """A worker Machine's KubeadmConfig, its bootstrap data as the VM boots with it, and the
    bootstrap tokens lab1 holds (their Secrets' names)."""
    namespace = machine["metadata"]["namespace"]
    secret = get(mgmt, "secret", machine["spec"]["bootstrap"]["dataSecretName"], namespace=namespace)
    tokens = get(mgmt, "secrets", namespace="kube-system", kubeconfig=lab1)["items"]
    return {
        "config": get(mgmt, "kubeadmconfig", machine["spec"]["bootstrap"]["configRef"]["name"], namespace=namespace),
        "data": base64.b64decode(secret["data"]["value"]).decode(),
        "tokens": sorted(t["metadata"]["name"] for t in tokens if t["type"] == "bootstrap.kubernetes.io/token"),
    }


# By version: the pools are served at v1alpha2 only, not at their group's preferred version (the
# claims' v1beta2), and `ipaddresses` alone names Kubernetes' own (networking.k8s.io) kind.
IPAM_READS = {
    "inclusterippools": "ipam.cluster.x-k8s.io/v1alpha2",
    "ipaddressclaims": "ipam.cluster.x-k8s.io/v1beta2",
    "ipaddresses": "ipam.cluster.x-k8s.io/v1beta2",
    "proxmoxmachines": "infrastructure.cluster.x-k8s.io/v1alpha2",
}


def ipam(mgmt: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    """The IPAM objects and the ProxmoxMachines they are for, as they are now, by resource and name."""
    api = Api.from_kubeconfig(mgmt.kubeconfig)
    listed = {resource: api.items(version, resource, namespace) or [] for resource, version in IPAM_READS.items()}
    return {resource: {item["metadata"]["name"]: item for item in items} for resource, items in listed.items()}


def conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions", [])}


def names(mgmt: ControlPlane, resource: str, namespace: str) -> list[str]:
    return sorted(item["metadata"]["name"] for item in get(mgmt, resource, namespace=namespace)["items"])


def run(engine: Engine, mgmt: ControlPlane, action: str, *args: str) -> dict[str, Any]:
    """One CLI run: its exit code, seconds, changes, and the admin's writes (the engine's) to the
    management cluster, each [verb, resource, name]."""
    mark, began, started = mgmt.audit_mark(), time.monotonic(), time.time()
    done = engine.run(action, *args)
    writes = [request[:3] for request in _requests_since(mgmt, mark) if request[0] in WRITES]
    return {
        **{"action": " ".join((action, *args)), "rc": done.rc, "seconds": round(time.monotonic() - began, 1)},
        "summary": done.summary(),
        "changed": [s for s in done.steps() if s["op"] not in ("same", "read")],
        "warnings": done.diagnostics("warning"),
        "writes": writes,
        "error": done.output[-5000:] if done.rc else "",
        "order": _order(done.events),
        "started": started,
    }


# The URN types of a workload cluster's Cluster and of Cilium's release, whatever their names.
CLUSTER_STEP = "$kubernetes:cluster.x-k8s.io/v1beta2:Cluster::"
CILIUM_STEP = "homelab:index:Cilium$kubernetes:helm.sh/v3:Release::"


def _order(events: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """[index in the event log, timestamp] of the Cluster's step done and of Cilium's begun."""
    found: dict[str, list[Any]] = {}
    for index, event in enumerate(events):
        for kind, infix, key in (
            ("resOutputsEvent", CLUSTER_STEP, "cluster_done"),
            ("resourcePreEvent", CILIUM_STEP, "cilium_begun"),
        ):
            if kind in event and infix in event[kind]["metadata"]["urn"] and key not in found:
                found[key] = [index, event.get("timestamp")]
    return found


class Lab:
    """Reads of both clusters through their APIs (no kubectl process per poll)."""

    def __init__(self, mgmt: ControlPlane, lab1_kubeconfig: Path, cluster: Workload) -> None:
        self.mgmt, self.lab1 = Api.from_kubeconfig(mgmt.kubeconfig), Api.from_kubeconfig(lab1_kubeconfig)
        self.cluster = cluster

    def get(self, api: Api, path: str) -> Any:
        code, body = api.call("GET", path)
        return body if code == 200 else None

    def demand_pods(self) -> list[dict[str, Any]]:
        found = self.get(self.lab1, f"/api/v1/namespaces/default/pods?labelSelector=app%3D{DEMAND}") or {}
        pods: list[dict[str, Any]] = found.get("items", [])
        return pods

    def sample(self) -> dict[str, Any]:
        core = self.cluster.core
        deployment = self.get(self.mgmt, f"{core}/machinedeployments/{self.cluster.workers}") or {}
        machines = (self.get(self.mgmt, f"{core}/machines") or {}).get("items", [])
        workers = [m for m in machines if DEPLOYMENT_NAME_LABEL in m["metadata"].get("labels", {})]
        nodes = (self.get(self.lab1, "/api/v1/nodes") or {}).get("items", [])
        pods = self.demand_pods()
        return {
            "replicas": deployment.get("spec", {}).get("replicas"),
            "machines": len(workers),
            "machines_with_node": len([m for m in workers if m.get("status", {}).get("nodeRef")]),
            "nodes": len([n for n in nodes if "node-role.kubernetes.io/control-plane" not in n["metadata"]["labels"]]),
            "pending": len([p for p in pods if not p["spec"].get("nodeName")]),
            "scheduled": len([p for p in pods if p["spec"].get("nodeName")]),
        }

    def watch(self, what: str, done: Callable[[dict[str, Any]], bool], began: float) -> list[list[Any]]:
        """[seconds since `began`, field, value] each time a sampled value changes, until `done`."""
        timeline: list[list[Any]] = []
        last: dict[str, Any] = {}
        deadline = time.monotonic() + BOUND
        while True:
            now = self.sample()
            stamp = round(time.monotonic() - began, 1)
            timeline += [[stamp, key, value] for key, value in now.items() if last.get(key) != value]
            last = now
            if done(now):
                return timeline
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {BOUND}s: {what}; last {now}; timeline {timeline}")
            time.sleep(POLL)


def scales(mgmt: ControlPlane, mark: int, cluster: Workload) -> list[dict[str, Any]]:
    """Each write to `cluster`'s MachineDeployment (or its /scale) after `mark`: who, how, when."""
    return [
        {
            "user": event["user"]["username"],
            "verb": event["verb"],
            "subresource": event["objectRef"].get("subresource", ""),
            "at": event["requestReceivedTimestamp"],
            "code": event.get("responseStatus", {}).get("code"),
        }
        for event in mgmt.audit()[mark:]
        if event.get("objectRef", {}).get("resource") == "machinedeployments"
        and event["objectRef"].get("name") == cluster.workers
        and event["objectRef"].get("namespace") == cluster.namespace
        and event["verb"] in WRITES
        and "dryRun=All" not in event.get("requestURI", "")
    ]


def managers(mgmt: ControlPlane, cluster: Workload) -> dict[str, list[str]]:
    """Which field manager owns which of `cluster`'s MachineDeployment's spec fields (top level)."""
    return {
        "/".join(filter(None, (entry["manager"], entry["operation"], entry.get("subresource")))): sorted(
            key.removeprefix("f:") for key in entry.get("fieldsV1", {}).get("f:spec", {})
        )
        for entry in get(mgmt, "machinedeployment", cluster.workers, namespace=cluster.namespace)["metadata"][
            "managedFields"
        ]
    }


def cluster_api_writes(mgmt: ControlPlane) -> dict[str, dict[str, Any]]:
    """Every write to a cluster.x-k8s.io group, by "user verb resource[/subresource]": how many,
    their response codes (each once), and which mutating webhooks changed the first one."""
    writes: dict[str, dict[str, Any]] = {}
    for event in mgmt.audit():
        ref = event.get("objectRef", {})
        if not ref.get("apiGroup", "").endswith("cluster.x-k8s.io") or event["verb"] not in WRITES:
            continue
        if "dryRun=All" in event.get("requestURI", ""):
            continue
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        key = f"{event['user']['username']} {event['verb']} {resource}"
        code = event.get("responseStatus", {}).get("code")
        if key in writes:
            writes[key]["count"] += 1
            writes[key]["codes"] = sorted({*writes[key]["codes"], code})
            continue
        mutated = [
            json.loads(value)["webhook"]
            for name, value in (event.get("annotations") or {}).items()
            if name.startswith("mutation.webhook.admission.k8s.io/") and json.loads(value).get("mutated")
        ]
        writes[key] = {"count": 1, "codes": [code], "mutated_by": mutated}
    return writes


def not_triggered(mgmt: ControlPlane, lab1: Path) -> list[str]:
    """What the autoscaler's NotTriggerScaleUp events on lab1's demand pods say."""
    events = get(mgmt, "events", namespace="default", kubeconfig=lab1) or {"items": []}
    return [
        event["message"]
        for event in events["items"]
        if event["reason"] == "NotTriggerScaleUp" and event["involvedObject"]["name"].startswith(DEMAND)
    ]


def manager_processes() -> list[str]:
    """The real managers (deployed.FOR_PROVIDER) running on this machine, each as its argv."""
    binaries = {manager.binary for manager in deployed.FOR_PROVIDER.values()}
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:  # gone meanwhile
            continue
        if Path(argv[0]).name in binaries:
            found.append(" ".join(filter(None, [Path(argv[0]).name, *argv[1:]])))
    return sorted(found)


def _inside(pid: int, namespace: str, *command: str) -> str:
    """What `command` prints in the process's own namespace (`--mount`, `--uts`); in its mount
    namespace, from its own root (the pod runner's root of the Pod, where its mounts are)."""
    entered = [namespace, "--root"] if namespace == "--mount" else [namespace]
    done = subprocess.run(["nsenter", "-t", str(pid), *entered, *command], capture_output=True, text=True, check=True)
    return done.stdout


def mounted_kubeconfig(pid: int) -> str:
    """The workload kubeconfig as the process sees it, at the chart's mount path."""
    return _inside(pid, "--mount", "cat", "/etc/kubernetes/value")


def process(pid: int) -> dict[str, Any]:
    """What a running process got, read from /proc and from inside its namespaces: its argv, its
    environment, its hostname, and the files at their mount paths as it sees them."""
    proc = Path(f"/proc/{pid}")
    token = _inside(pid, "--mount", "cat", f"{ACCOUNT_MOUNT}/token")
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return {
        "pid": pid,
        "argv": (proc / "cmdline").read_bytes().decode().split("\0")[:-1],
        "environ": sorted((proc / "environ").read_bytes().decode().split("\0")[:-1]),
        "kubeconfig": mounted_kubeconfig(pid),
        "namespace": _inside(pid, "--mount", "cat", f"{ACCOUNT_MOUNT}/namespace"),
        "ca": _inside(pid, "--mount", "cat", f"{ACCOUNT_MOUNT}/ca.crt"),
        "token_claims": claims,
        "hostname": _inside(pid, "--uts", "cat", "/proc/sys/kernel/hostname").strip(),
        "etc_on_the_machine_unchanged": not Path("/etc/kubernetes").exists(),
    }


def kubeconfig_secret(mgmt: ControlPlane, cluster: Workload) -> dict[str, Any]:
    """`<name>-kubeconfig` as Cluster API keeps it: its type, metadata, keys and decoded value."""
    secret = get(mgmt, "secret", cluster.kubeconfig_secret, namespace=cluster.namespace)
    return {key: secret[key] for key in ("type", "metadata")} | {
        "keys": sorted(secret["data"]),
        "value": base64.b64decode(secret["data"]["value"]).decode(),
    }


def capmox_assets(charts: chart_repo_standin.ChartRepoStandIn) -> dict[str, list[Any]]:
    """GETs of CAPMOX's cluster-template.yaml from the chart repository stand-in, for the
    program's version, the one before and one it does not serve: [status, body] each."""
    context = ssl.create_default_context(cafile=str(charts.certificate))
    assets: dict[str, list[Any]] = {}
    for version in ("v0.9.0", "v0.9.1", "v0.9.2"):
        url = f"{charts.url}/{chart_repo_standin.CAPMOX_ASSETS}/{version}/cluster-template.yaml"
        try:
            with urllib.request.urlopen(url, timeout=10, context=context) as answer:  # noqa: S310
                assets[version] = [answer.status, answer.read().decode()]
        except urllib.error.HTTPError as refused:
            assets[version] = [refused.code, ""]
    return assets


def demand(mgmt: ControlPlane, lab1: Path, replicas: int, requests: dict[str, str]) -> None:
    """`replicas` pods, each requesting `requests`, in lab1 (its admin kubeconfig `lab1`): sized to
    fit one worker each and never the control plane (they tolerate no taint)."""
    container = {"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": requests}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEMAND, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": DEMAND}},
            "template": {
                "metadata": {"labels": {"app": DEMAND}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [container]},
            },
        },
    }
    mgmt.kubectl_as(lab1, "apply", "-f", "-", stdin=json.dumps(deployment)).check_returncode()
