"""cert-manager's controller, CA injector and webhook, and its post-install hook, as the box runs
them (issue 68): the binaries that `e2e/engine/build-engine.sh cert-manager` makes
(LAB_MGMT_CERT_MANAGER_BIN: v1.21.1, the newest tag the stored history holds, for the chart
v1.21.2 the program pins), each a process started as the kubelet starts the container of its
Deployment (or Job) in the chart as the program's Release renders it (upstream_charts.rendered):

- its args and environment from that workload, `$(VAR)` expanded from the environment and the
  pod's own fields (the namespace) as the kubelet fills them in;
- as the workload's ServiceAccount, with a token the API server issues for it (TokenRequest, as
  the kubelet's projected token is made), so that it holds the rights the chart's RBAC gives it and
  no other, and the audit log names it as it names the real one;
- out of the cluster, so the kubeconfig goes by `--kubeconfig` and by $KUBECONFIG (the injector's
  controller-runtime reads the variable: its flag of that name is cert-manager's own), and each
  metrics server moved off the port all default to, where they would meet in one network
  namespace (each pod has its own): the departures.

`installed` lays out what the release holds besides its workloads (CRDs, ServiceAccounts, RBAC);
`served` what reaches the webhook once it runs: its Service, the EndpointSlice the endpoint slice
controller would write for its pod, and cert-manager's own webhook configurations, which the API
server then calls through that Service (control_plane.running's `service_routing`, as k3s's).

    installed(cluster, documents)
    with running(cluster, folder, documents, WEBHOOK) as webhook:
        served(cluster, documents, address)
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.engine.cli import built_bin
from e2e.engine.control_plane import ControlPlane, stop, until_ready

# Each component's Deployment in the program's release, and its binary.
CONTROLLER = "cert-manager"
CAINJECTOR = "cert-manager-cainjector"
WEBHOOK = "cert-manager-webhook"
# The release's post-install hook Job, which Helm, and so the program's Release, waits for.
STARTUPAPICHECK = "cert-manager-startupapicheck"
BINARIES = {
    CONTROLLER: "cert-manager-controller",
    CAINJECTOR: "cert-manager-cainjector",
    WEBHOOK: "cert-manager-webhook",
    STARTUPAPICHECK: "cert-manager-startupapicheck",
}
DEPLOYMENTS = (CONTROLLER, CAINJECTOR, WEBHOOK)
# Where each serves its metrics in the box (all default to 0.0.0.0:9402, each in its own pod).
METRICS = {CONTROLLER: "127.0.0.1:9402", CAINJECTOR: "127.0.0.1:9412", WEBHOOK: "127.0.0.1:9422"}
# What of the release is laid out without a kubelet: all but what runs, and what reaches it (the
# webhook's Service and configurations: `served`).
LAID_OUT = ("CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
WEBHOOK_CONFIGURATIONS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
STARTED_BOUND_SECONDS = 60
# Above the hook's own `--wait=1m`.
JOB_BOUND_SECONDS = 120
_VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@dataclass(frozen=True)
class Running:
    deployment: str
    user: str
    """Who the audit log names for its requests."""
    args: tuple[str, ...]
    log: Path
    pid: int

    def log_tail(self) -> str:
        return _tail(self.log)


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def apply(cluster: ControlPlane, items: list[dict[str, Any]]) -> None:
    """`items` applied server-side as the admin, in one request list."""
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=listed)


def installed(cluster: ControlPlane, documents: list[dict[str, Any]]) -> None:
    """The release's LAID_OUT objects applied as the admin, the CRDs first and established."""
    crds = [document for document in documents if document["kind"] == "CustomResourceDefinition"]
    apply(cluster, crds)
    names = (crd["metadata"]["name"] for crd in crds)
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", *names, timeout=90)
    apply(cluster, [d for d in documents if d["kind"] in LAID_OUT and d["kind"] != "CustomResourceDefinition"])


def _container(documents: list[dict[str, Any]], kind: str, name: str) -> tuple[dict[str, Any], str, str]:
    """The workload's one container, its namespace and its ServiceAccount."""
    [found] = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    spec = found["spec"]["template"]["spec"]
    [container] = spec["containers"]
    return container, found["metadata"]["namespace"], spec["serviceAccountName"]


def _environment(container: dict[str, Any], namespace: str) -> dict[str, str]:
    """The container's env as the kubelet resolves it; a source the box cannot resolve is refused."""
    environment = {}
    for variable in container.get("env", []):
        if "value" in variable:
            environment[variable["name"]] = variable["value"]
        elif variable.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            environment[variable["name"]] = namespace
        else:
            raise ValueError(f"{container['name']}: the box cannot resolve the env {variable}")
    return environment


def _kubeconfig(cluster: ControlPlane, folder: Path, namespace: str, account: str) -> Path:
    """The admin's kubeconfig with a token the API server issued for `account` in its stead, and
    the account's namespace as the context's, as an in-cluster client reads it from its pod."""
    token = cluster.kubectl("create", "token", account, "-n", namespace, "--duration=24h").stdout.strip()
    config = json.loads(cluster.kubeconfig.read_text())
    config["users"] = [{"name": account, "user": {"token": token}}]
    config["contexts"][0]["context"] |= {"user": account, "namespace": namespace}
    path = folder / f"{account}.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class _Command:
    container: dict[str, Any]
    argv: list[str]
    environment: dict[str, str]
    user: str


def _command(cluster: ControlPlane, folder: Path, documents: list[dict[str, Any]], kind: str, name: str) -> _Command:
    """The workload's container as the kubelet would start it, as a process of the built binary."""
    container, namespace, account = _container(documents, kind, name)
    environment = _environment(container, namespace)
    args = [_VARIABLE.sub(lambda m: environment[m.group(1)], arg) for arg in container.get("args", [])]
    folder.mkdir(parents=True, exist_ok=True)
    kubeconfig = _kubeconfig(cluster, folder, namespace, account)
    args.append(f"--kubeconfig={kubeconfig}")
    if name in METRICS:
        args.append(f"--metrics-listen-address={METRICS[name]}")
    binary = built_bin("LAB_MGMT_CERT_MANAGER_BIN", BINARIES[name]) / BINARIES[name]
    environment |= {"PATH": "/usr/bin:/bin", "KUBECONFIG": str(kubeconfig)}
    return _Command(container, [str(binary), *args], environment, f"system:serviceaccount:{namespace}:{account}")


@contextmanager
def running(cluster: ControlPlane, folder: Path, documents: list[dict[str, Any]], deployment: str) -> Iterator[Running]:
    """`deployment`'s container as a process for the block, from its first request to the API
    server (read from the audit log) and, where the container has a readiness probe, once that
    answers as the kubelet asks it; stopped afterwards."""
    command = _command(cluster, folder, documents, "Deployment", deployment)
    log = folder / f"{deployment}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command.argv, stdout=output, stderr=subprocess.STDOUT, env=command.environment)
        try:
            _until_it_asks(cluster, process, command.user, log)
            if probe := command.container.get("readinessProbe", {}).get("httpGet"):
                ports = {port["name"]: port["containerPort"] for port in command.container["ports"]}
                until_ready(
                    f"http://127.0.0.1:{ports.get(probe['port'], probe['port'])}{probe['path']}",
                    lambda: None if process.poll() is None else f"{log.stem} exited {process.returncode}",
                    what=f"{deployment}'s readiness probe (its log: {log})",
                    bound=STARTED_BOUND_SECONDS,
                    interval=0.5,
                )
            yield Running(deployment, command.user, tuple(command.argv[1:]), log, process.pid)
        finally:
            stop(process)


def ran(cluster: ControlPlane, folder: Path, documents: list[dict[str, Any]], job: str) -> dict[str, Any]:
    """`job`'s container run once to its end (its own `--wait` bounds it), as the Job's pod: its exit
    code, output, seconds and user."""
    command = _command(cluster, folder, documents, "Job", job)
    began = time.monotonic()
    done = subprocess.run(
        command.argv, env=command.environment, capture_output=True, text=True, timeout=JOB_BOUND_SECONDS, check=False
    )
    seconds = round(time.monotonic() - began, 1)
    return {"rc": done.returncode, "output": done.stdout + done.stderr, "seconds": seconds, "user": command.user}


def _until_it_asks(cluster: ControlPlane, process: subprocess.Popen[bytes], user: str, log: Path) -> None:
    """Until `user` has made a request; its exit or silence ends the block with its log's end."""
    deadline = time.monotonic() + STARTED_BOUND_SECONDS
    while not any(event["user"]["username"] == user for event in cluster.audit()):
        tail = _tail(log)
        if process.poll() is not None:
            raise RuntimeError(f"{log.stem} exited {process.returncode}; the end of {log}:\n{tail}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{log.stem} asked the API server nothing within {STARTED_BOUND_SECONDS}s:\n{tail}")
        time.sleep(0.5)


def served(cluster: ControlPlane, documents: list[dict[str, Any]], address: str) -> list[str]:
    """The webhook reached as on the owner's lab: its Service as the release renders it, an
    EndpointSlice as the endpoint slice controller writes it for a Ready pod at `address`, then the
    release's webhook configurations, which name that Service (and which its CA injector fills in
    from the webhook's own CA Secret). Returns kind/name of each configuration."""
    container, namespace, _ = _container(documents, "Deployment", WEBHOOK)
    [service] = [d for d in documents if d["kind"] == "Service" and d["metadata"]["name"] == WEBHOOK]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{WEBHOOK}-box",
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": WEBHOOK, "endpointslice.kubernetes.io/managed-by": "box"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        # The port the API server dials; the metrics one, moved in the box, no one asks for.
        "ports": [
            {"name": port["name"], "port": ports[port["targetPort"]], "protocol": "TCP"}
            for port in service["spec"]["ports"]
            if port["targetPort"] == "https"
        ],
    }
    configurations = [d for d in documents if d["kind"] in WEBHOOK_CONFIGURATIONS]
    apply(cluster, [service, endpoints])
    apply(cluster, configurations)
    return [f"{d['kind']}/{d['metadata']['name']}" for d in configurations]
