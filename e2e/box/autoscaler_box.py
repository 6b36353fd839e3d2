"""The real cluster-autoscaler in the box (issue 30, "The autoscaler is real"), on the management
control plane alone (tests/test_box_autoscaler.py): Cluster API's real CRDs (CAPMOX's machine
templates too), a worker MachineDeployment at 0 and its ProxmoxMachineTemplate, lab1's kubeconfig
Secret pointing at the management API server itself (the autoscaler only needs an API server for
nodes and pods here), the official chart installed by a minimal Pulumi program
(autoscaler_program.py) through the real engine and the kubernetes plugin's Helm from the box's
chart repository, and the pod runner running the chart's Pod as the real autoscaler. A second
release, lab2, has no proxmoxmachinetemplates rule: the control.

Then a new digest on the pod template (a rotated kubeconfig, the program's next run): the rollout
stops the old process and starts a new one. A rotated Secret alone reaches the running process's
mounted file, and the process goes on as it was (it does not read it again: #4784). A killed
process is restarted after the backoff.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from e2e.box import autoscaler_program
from e2e.box.scenarios import VM_ADDRESS, _lab_secrets, _step
from e2e.engine import control_plane
from e2e.engine.cli import fresh_engine
from e2e.standins.cluster import chart_repo_standin, pod_runner, provider_crds

CHART = chart_repo_standin.VendoredChart("cluster-autoscaler-chart-9.59.0.tar.gz")
CONTROLLERS = (
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "deployment-controller",
    "replicaset-controller",
)
# lab1 as the program installs it; lab2 without the proxmoxmachinetemplates rule, and with a lease of
# its own: both clusters' kubeconfigs point at the one API server, where the lease is kept.
CLUSTERS = {"lab1": (True, None), "lab2": (False, "lab2-autoscaler")}
WAIT_SECONDS = 180.0
# The kubelet's first restart backoff is 10 s; the box's is short, through the runner's setting.
BACKOFF_SECONDS = 1.0
# The kubelet syncs a mounted Secret about every minute; the box's runner every 2 s.
SECRET_SYNC_SECONDS = 2.0


def _objects(cluster: str, namespace: str, kubeconfig: str) -> list[dict[str, Any]]:
    """The cluster's namespace, its kubeconfig Secret, a worker template and a MachineDeployment at
    0 that auto-discovery finds (min 0, max 3, no capacity annotations: the autoscaler reads the
    template)."""
    labels = {"cluster.x-k8s.io/cluster-name": cluster}
    template = f"{cluster}-worker"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{cluster}-kubeconfig", "namespace": namespace, "labels": labels},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": kubeconfig},
        },
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha2",
            "kind": "ProxmoxMachineTemplate",
            "metadata": {"name": template, "namespace": namespace},
            "spec": {
                "template": {
                    "spec": {
                        "sourceNode": "pv1-1",
                        "templateID": 9000,
                        "network": {"networkDevices": [{"name": "net0", "bridge": "vmbr0"}]},
                    }
                }
            },
        },
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineDeployment",
            "metadata": {
                "name": f"{cluster}-workers",
                "namespace": namespace,
                "labels": labels,
                "annotations": {
                    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "0",
                    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "3",
                },
            },
            "spec": {
                "clusterName": cluster,
                "replicas": 0,
                "selector": {"matchLabels": {"pool": "workers", **labels}},
                "template": {
                    "metadata": {"labels": {"pool": "workers", **labels}},
                    "spec": {
                        "clusterName": cluster,
                        "version": "v1.35.9",
                        "bootstrap": {"dataSecretName": f"{cluster}-bootstrap"},
                        "infrastructureRef": {
                            "apiGroup": "infrastructure.cluster.x-k8s.io",
                            "kind": "ProxmoxMachineTemplate",
                            "name": template,
                        },
                    },
                },
            },
        },
    ]


def _apply(cluster: control_plane.ControlPlane, objects: list[dict[str, Any]]) -> None:
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    cluster.kubectl("apply", "--server-side", "--field-manager=box", "-f", "-", stdin=listed)


def _until(
    what: str, ready: Callable[[], bool], timings: dict[str, float], since: float, context: Callable[[], str]
) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_SECONDS}s: {what}\n{context()}")
        time.sleep(0.5)
    timings[what] = round(time.monotonic() - since, 1)


def _requests(cluster: control_plane.ControlPlane, resource: str) -> list[dict[str, Any]]:
    """user, verb, namespace and response code of each audited request on `resource`."""
    return [
        {
            "user": event["user"]["username"],
            "verb": event["verb"],
            "namespace": event["objectRef"].get("namespace", ""),
            "code": event.get("responseStatus", {}).get("code"),
            "stage": event["stage"],
        }
        for event in cluster.audit()
        if event.get("objectRef", {}).get("resource") == resource
    ]


def _state(runners: dict[str, pod_runner.PodRunner]) -> str:
    """What the pod runners did and could not do, and the tail of each process's log."""
    return json.dumps(
        {
            name: {
                "events": runner.events,
                "errors": runner.errors,
                "logs": {path: text[-1500:] for path, text in runner.logs().items()},
            }
            for name, runner in runners.items()
        },
        indent=1,
    )


def _inside(pid: int, namespace: str, *command: str) -> str:
    """What `command` prints in the process's own namespace (`--mount`, `--uts`)."""
    done = subprocess.run(["nsenter", "-t", str(pid), namespace, *command], capture_output=True, text=True, check=True)
    return done.stdout


def _process(pid: int) -> dict[str, Any]:
    """What a running process got, read from /proc and from inside its namespaces: its argv, its
    environment, its hostname, and the files at their mount paths as it sees them."""
    proc = Path(f"/proc/{pid}")
    account = "/var/run/secrets/kubernetes.io/serviceaccount"
    token = _inside(pid, "--mount", "cat", f"{account}/token")
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return {
        "pid": pid,
        "argv": (proc / "cmdline").read_bytes().decode().split("\0")[:-1],
        "environ": sorted((proc / "environ").read_bytes().decode().split("\0")[:-1]),
        "kubeconfig": _inside(pid, "--mount", "cat", "/etc/kubernetes/value"),
        "namespace": _inside(pid, "--mount", "cat", f"{account}/namespace"),
        "ca": _inside(pid, "--mount", "cat", f"{account}/ca.crt"),
        "token_claims": claims,
        "hostname": _inside(pid, "--uts", "cat", "/proc/sys/kernel/hostname").strip(),
        "etc_on_the_machine_unchanged": not Path("/etc/kubernetes").exists(),
    }


def _service_account(cluster: str) -> str:
    return f"system:serviceaccount:{cluster}:{cluster}-autoscaler"


def _rotate_and_kill(
    cluster: control_plane.ControlPlane, runners: dict[str, pod_runner.PodRunner], pid: int, timings: dict[str, float]
) -> dict[str, Any]:
    """A rotated kubeconfig (another user's token, as Cluster API rotates the Secret): the runner
    updates the mounted file, and lab1's process `pid` goes on as it was (#4784). Then that process
    dies: the container terminated, then restarted after the backoff."""
    runner = runners["lab1"]
    before = len(runner.events)
    rotated = cluster.kubeconfig_of(control_plane.OPERATOR_USER).read_text()
    _apply(cluster, [_objects("lab1", "lab1", rotated)[1]])

    def synced() -> bool:
        return any(event["event"] == "synced" for event in runner.events[before:])

    what = "lab1's rotated kubeconfig in the running process's mount"
    _until(what, synced, timings, time.monotonic(), lambda: _state(runners))
    rotation = {
        "kubeconfig_seen": _inside(pid, "--mount", "cat", "/etc/kubernetes/value") == rotated,
        "events": [event["event"] for event in runner.events[before:]],
        "same_process_alive": Path(f"/proc/{pid}").exists(),
    }
    before = len(runner.events)
    os.kill(pid, signal.SIGKILL)

    def restarted() -> bool:
        return [event["event"] for event in runner.events[before:]] == ["exited", "started"]

    _until("lab1's killed autoscaler restarted", restarted, timings, time.monotonic(), lambda: _state(runners))
    return rotation


def real_autoscaler(root: str) -> dict[str, Any]:
    base = Path(root)
    timings: dict[str, float] = {}
    started = time.monotonic()
    with ExitStack() as stack:
        cluster = stack.enter_context(
            control_plane.running(base / "control-plane", VM_ADDRESS, controllers=CONTROLLERS)
        )
        crds = [
            *(crd for crd in provider_crds.crds("CoreProvider", "cluster-api")),
            *(crd for crd in provider_crds.crds("InfrastructureProvider", "proxmox")),
        ]
        _apply(cluster, crds)
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        kubeconfig = cluster.kubeconfig.read_text()
        for name in CLUSTERS:
            _apply(cluster, _objects(name, name, kubeconfig)[:2])
            _apply(cluster, _objects(name, name, kubeconfig)[2:])
        timings["control plane, CRDs and objects"] = round(time.monotonic() - started, 1)
        charts = stack.enter_context(chart_repo_standin.serve({"autoscaler": [CHART]}, base))
        runners = {
            name: stack.enter_context(
                pod_runner.running(
                    cluster,
                    name,
                    f"{name}-autoscaler",
                    base / f"pods-{name}",
                    backoff_seconds=BACKOFF_SECONDS,
                    secret_sync_seconds=SECRET_SYNC_SECONDS,
                )
            )
            for name in CLUSTERS
        }
        wanted = base / "autoscalers.json"

        def want(digest: str) -> None:
            releases = [
                {"cluster": name, "namespace": name, "digest": digest, "proxmox_rule": rule, "lease": lease}
                for name, (rule, lease) in CLUSTERS.items()
            ]
            wanted.write_text(json.dumps({"repository": f"{charts.url}/autoscaler", "releases": releases}))

        want("0" * 64)
        engine = fresh_engine(
            base / "engine",
            extra_env={
                "SSL_CERT_FILE": str(charts.certificate),
                autoscaler_program.KUBECONFIG_VARIABLE: str(cluster.kubeconfig),
                autoscaler_program.RELEASES_VARIABLE: str(wanted),
            },
            main=Path(autoscaler_program.__file__),
        )
        # The project's required settings have no default: the stack holds them, as any lab's does.
        steps = [_step(engine, ("stack", "init", "lab"))]
        steps += [
            _step(engine, ("config", "set", "--secret", key), stdin=value) for key, value in _lab_secrets().items()
        ]
        mark = time.monotonic()
        first = engine.run("up")
        timings["first pulumi up (both releases Ready)"] = round(time.monotonic() - mark, 1)
        if first.rc != 0:
            raise AssertionError(f"the first pulumi up failed:\n{first.output[-4000:]}\n{_state(runners)}")
        lab1 = _service_account("lab1")

        def listed_by_lab1() -> bool:
            return any(r["user"] == lab1 and r["code"] == 200 for r in _requests(cluster, "proxmoxmachinetemplates"))

        _until(
            "lab1's autoscaler lists proxmoxmachinetemplates", listed_by_lab1, timings, mark, lambda: _state(runners)
        )
        _until(
            "lab2's autoscaler refused proxmoxmachinetemplates",
            lambda: any(r["user"] == _service_account("lab2") for r in _requests(cluster, "proxmoxmachinetemplates")),
            timings,
            mark,
            lambda: _state(runners),
        )
        before = len(runners["lab1"].events)
        want("1" * 64)
        mark = time.monotonic()
        second = engine.run("up")
        timings["second pulumi up (new digest, rollout done)"] = round(time.monotonic() - mark, 1)
        if second.rc != 0:
            raise AssertionError(f"the second pulumi up failed:\n{second.output[-4000:]}\n{_state(runners)}")

        def rolled() -> bool:
            later = [event["event"] for event in runners["lab1"].events[before:]]
            return "started" in later and "stopped" in later

        _until("lab1's autoscaler restarted by the rollout", rolled, timings, mark, lambda: _state(runners))
        process = _process([e for e in runners["lab1"].events if e["event"] == "started"][-1]["pid"])
        rotation = _rotate_and_kill(cluster, runners, process["pid"], timings)
        pods = json.loads(cluster.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
        deployment = json.loads(
            cluster.kubectl("get", "deployment", "-n", "lab1", "lab1-autoscaler", "-o", "json").stdout
        )
        return {
            "steps": steps,
            "runs": [{"rc": run.rc, "summary": run.summary(), "output": run.output[-3000:]} for run in (first, second)],
            "timings": timings,
            "runners": {
                name: {"events": list(runner.events), "errors": list(runner.errors), "logs": runner.logs()}
                for name, runner in runners.items()
            },
            "requests": {
                resource: _requests(cluster, resource)
                for resource in ("machinedeployments", "proxmoxmachinetemplates", "machinesets", "machines")
            },
            "pods": [
                {
                    "name": pod["metadata"]["name"],
                    "namespace": pod["metadata"]["namespace"],
                    "annotations": pod["metadata"].get("annotations", {}),
                    "spec": pod["spec"],
                    "status": pod["status"],
                }
                for pod in pods
            ],
            "deployment": deployment,
            "process": process,
            "rotation": rotation,
            "cluster_ca": (base / "control-plane" / "pki" / "apiserver.crt").read_text(),
            "admin_kubeconfig": kubeconfig,
            "chart_requests": charts.requests,
            "chart_unknown": charts.unknown,
        }
