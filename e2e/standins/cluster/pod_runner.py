"""A stand-in for the one piece of a kubelet the management cluster needs: running the Pods of one
Deployment (cluster-autoscaler's, which the real kube-controller-manager makes from the chart's
Deployment), or those a label selects (helm-controller's Jobs', which the real job controller
makes), as processes, since no image can run here. For each such Pod it:

- binds it to the runner's node (registering that Node first, as a kubelet does);
- starts its container as a process (pod_process.py: the binary built here for the image, exactly
  the command, args, env and volume mounts the chart rendered, a ServiceAccount token from the
  TokenRequest API, in mount and network namespaces of its own), its output in a log file of its
  own under the runner's folder (`<namespace>_<pod>/<container>-<restart>.log`);
- reports it Running and Ready while the process lives; when the process exits, the container
  terminated (exit code, reason, its termination message), restartCount up, CrashLoopBackOff, and
  a restart after the kubelet's backoff (10 s doubling to 5 minutes; `backoff_seconds` sets the
  first); or, as the Pod's restartPolicy says (a Job's: OnFailure, Never), the Pod Succeeded
  once its process exits 0 (Failed, under Never, once it fails), never started again;
- every `secret_sync_seconds` (the kubelet's sync is about a minute), writes the Pod's Secret
  volumes again from their Secrets, so a running process sees a changed Secret's files (whether it
  reads them again is its own business: cluster-autoscaler does not, #4784);
- on the Pod's deletion, stops the process (SIGTERM, then SIGKILL after the Pod's grace period)
  and removes the Pod, as the kubelet confirms a deletion; so a rollout (a changed pod annotation)
  restarts the process.

A Secret volume that is not there yet (cert-manager still issuing it) keeps the Pod Pending, mounted
again MOUNT_RETRY_SECONDS later, as the kubelet does. What it cannot do it says in `errors` and in
the container's status (CreateContainerError), once per Pod. It polls every `poll_seconds` (a
kubelet watches; the tests read what happened, in order). It does not run liveness probes, nor
refresh a token before it expires (an hour by default).
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.engine.control_plane import KUBELET_USER, ControlPlane
from e2e.engine.kube_api import MERGE_PATCH, Api, ApiError, UnreachableError
from e2e.standins.cluster import pod_process, pod_status, pod_volumes
from e2e.standins.cluster.controller_loop import looping

# A kubelet starts a pod in seconds; a pass a second lists the node's pods half as often as one
# every half second did, which an idle box with lab1 spent an eighth of its API server's requests
# on (74 LISTs in 30 s).
POLL_SECONDS = 1.0
BACKOFF_SECONDS = 10.0
BACKOFF_CAP_SECONDS = 300.0
SECRET_SYNC_SECONDS = 60.0
# The kubelet mounts a volume whose Secret is missing again after about two seconds at first.
MOUNT_RETRY_SECONDS = 2.0


@dataclass
class _Pod:
    namespace: str
    name: str
    uid: str
    folder: Path
    ip: str
    started: pod_process.Started | None = None
    start_time: str = ""
    restarts: int = 0
    last: dict[str, Any] | None = None
    next_start: float = 0.0
    failed: str = ""
    synced: float = 0.0
    ended: str = ""
    """The phase of a Pod whose container ended for good (Succeeded or Failed)."""


@dataclass
class PodRunner:
    cluster: ControlPlane
    namespace: str
    deployment: str
    node: str
    folder: Path
    backoff_seconds: float = BACKOFF_SECONDS
    secret_sync_seconds: float = SECRET_SYNC_SECONDS
    events: list[dict[str, Any]] = field(default_factory=list)
    """In order: {"event": "started"|"exited"|"stopped"|"deleted"|"synced", "pod", "uid", "at", ...}."""
    errors: list[str] = field(default_factory=list)
    pods: dict[str, _Pod] = field(default_factory=dict, repr=False)
    selector: str = ""
    internet: pod_volumes.Internet | None = None

    def logs(self) -> dict[str, str]:
        """Each process's output by its log file's path under the runner's folder."""
        return {
            str(path.relative_to(self.folder)): path.read_text(errors="replace")
            for path in sorted(self.folder.glob("*/*.log"))
        }

    def _record(self, event: str, pod: _Pod, **more: Any) -> None:
        self.events.append({"event": event, "pod": pod.name, "uid": pod.uid, "at": time.time(), **more})


def _api(runner: PodRunner) -> Api:
    return Api.from_kubeconfig(runner.cluster.kubeconfig_of(KUBELET_USER))


def _register_node(api: Api, node: str) -> None:
    code, _ = api.call("GET", f"/api/v1/nodes/{node}")
    if code == 404:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
        }
        code, answer = api.call("POST", "/api/v1/nodes", body)
        if code not in (201, 409):
            raise pod_volumes.PodError(f"cannot register node {node}: {code} {answer.get('message', '')}")


def _selector(api: Api, runner: PodRunner) -> str:
    """The runner's selector, or the Deployment's (immutable in apps/v1) once the Deployment
    exists; else ''."""
    if not runner.selector:
        code, deployment = api.call(
            "GET", f"/apis/apps/v1/namespaces/{runner.namespace}/deployments/{runner.deployment}"
        )
        if code == 404:
            return ""
        if code != 200:
            raise pod_volumes.PodError(f"deployment {runner.deployment}: {code} {deployment.get('message', '')}")
        selector = deployment["spec"]["selector"]
        if set(selector) != {"matchLabels"}:
            raise pod_volumes.PodError(f"deployment {runner.deployment}: selector {selector} is not matchLabels alone")
        runner.selector = ",".join(f"{key}={value}" for key, value in sorted(selector["matchLabels"].items()))
    return runner.selector


def _patch_status(api: Api, runner: PodRunner, pod: _Pod, spec: dict[str, Any]) -> None:
    container = spec["containers"][0]
    phase = "Running"
    if pod.ended:
        assert pod.last is not None
        state, phase = pod_status.terminated(container, pod.last, pod.restarts), pod.ended
    elif pod.started is not None:
        state = pod_status.running(container, pod.started.started_at, pod.restarts, pod.last)
    elif pod.failed:
        state = pod_status.waiting(container, "CreateContainerError", pod.failed, pod.restarts, pod.last)
    else:
        message = f"back-off restarting failed container {container['name']} in pod {pod.name}"
        state = pod_status.waiting(container, "CrashLoopBackOff", message, pod.restarts, pod.last)
    status = pod_status.status([state], pod.start_time, pod.ip, pod_process.HOST_SIDE_IP, phase)
    path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
    code, answer = api.call("PATCH", path, {"status": status}, content_type=MERGE_PATCH)
    if code != 200:
        runner.errors.append(f"status of {pod.name}: {code} {answer.get('message', '')}")


def _stop(runner: PodRunner, pod: _Pod, grace: float) -> None:
    started, pod.started = pod.started, None
    if started is None:
        return
    started.process.terminate()
    try:
        started.process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        started.process.kill()
        started.process.wait()
    runner._record("stopped", pod, exit_code=started.process.returncode)


def _start(api: Api, runner: PodRunner, pod: _Pod, item: dict[str, Any]) -> bool:
    """Whether the Pod's container started or failed for good, either of which its status says;
    a volume not there yet is mounted again MOUNT_RETRY_SECONDS later, the Pod still Pending."""
    log = pod.folder / f"{item['spec']['containers'][0]['name']}-{pod.restarts}.log"
    veth = pod_process.new_veth_name()
    address = (runner.cluster.address, runner.cluster.port)
    try:
        pod.started = pod_process.start(
            api, item, pod.folder, network=(pod.ip, veth), log=log, api_address=address, internet=runner.internet
        )
    except pod_volumes.SecretNotYetThereError:
        pod.next_start = time.monotonic() + MOUNT_RETRY_SECONDS
        return False
    except (pod_volumes.PodError, ApiError) as error:
        pod.failed = str(error)
        runner.errors.append(f"pod {pod.name}: {error}")
        return True
    runner._record("started", pod, pid=pod.started.process.pid, log=str(log.relative_to(runner.folder)))
    return True


def _exited(runner: PodRunner, pod: _Pod, restart_policy: str) -> None:
    """The process ended by itself: the container terminated, with its termination message; as
    the Pod's restartPolicy says, restarted after the backoff (Always; OnFailure after a failure)
    or ended for good, the Pod Succeeded or Failed (a Job's)."""
    assert pod.started is not None
    started, pod.started = pod.started, None
    # A runtime reports a signal's death as 128 + the signal.
    code = started.process.returncode if started.process.returncode >= 0 else 128 - started.process.returncode
    message = pod_volumes.termination_message(pod.folder)
    pod.last = {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": started.started_at,
        "finishedAt": pod_status.now(),
        **({"message": message} if message else {}),
    }
    runner._record("exited", pod, exit_code=code)
    if restart_policy == "Never" or (restart_policy == "OnFailure" and code == 0):
        pod.ended = "Succeeded" if code == 0 else "Failed"
        return
    pod.next_start = time.monotonic() + min(runner.backoff_seconds * 2**pod.restarts, BACKOFF_CAP_SECONDS)
    pod.restarts += 1


def _delete(api: Api, runner: PodRunner, item: dict[str, Any]) -> None:
    """The kubelet's confirmation of a graceful deletion: the Pod removed at once, if still it."""
    meta = item["metadata"]
    body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
    code, answer = api.call("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body)
    if code not in (200, 404, 409):
        runner.errors.append(f"delete {meta['name']}: {code} {answer.get('message', '')}")


def _tend(api: Api, runner: PodRunner, pod: _Pod, item: dict[str, Any]) -> None:
    """One Pod, as the kubelet's sync of it: stopped and removed once deleted; else bound, its
    process started, watched, restarted, and its Secret volumes kept in sync."""
    meta, spec = item["metadata"], item["spec"]
    if meta.get("deletionTimestamp"):
        _stop(runner, pod, float(spec.get("terminationGracePeriodSeconds", 30)))
        _delete(api, runner, item)
        if not any(event["event"] == "deleted" and event["uid"] == pod.uid for event in runner.events):
            runner._record("deleted", pod)
        return
    if not spec.get("nodeName"):
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        code, answer = api.call("POST", path, pod_status.binding(pod.name, runner.node))
        if code != 201:
            runner.errors.append(f"bind {pod.name}: {code} {answer.get('message', '')}")
            return
        item = api.get(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}")
    changed = False
    if pod.started is not None and pod.started.process.poll() is not None:
        _exited(runner, pod, spec.get("restartPolicy", "Always"))
        changed = True
    if pod.started is None and not pod.failed and not pod.ended and time.monotonic() >= pod.next_start:
        changed = _start(api, runner, pod, item) or changed
    if changed:
        _patch_status(api, runner, pod, spec)
        pod.synced = time.monotonic()
    elif pod.started is not None and time.monotonic() - pod.synced >= runner.secret_sync_seconds:
        pod.synced = time.monotonic()
        volumes = pod_volumes.refresh_secrets(api, item, pod.folder)
        if volumes:
            runner._record("synced", pod, volumes=volumes)


def _step(api: Api, runner: PodRunner) -> None:
    selector = _selector(api, runner)
    if not selector:
        return
    query = urllib.parse.urlencode({"labelSelector": selector})
    seen = set()
    for item in api.get(f"/api/v1/namespaces/{runner.namespace}/pods?{query}")["items"]:
        meta = item["metadata"]
        seen.add(meta["uid"])
        pod = runner.pods.get(meta["uid"])
        if pod is None:
            ip = pod_process.new_pod_ip()
            folder = runner.folder / f"{meta['namespace']}_{meta['name']}"
            pod = runner.pods[meta["uid"]] = _Pod(meta["namespace"], meta["name"], meta["uid"], folder, ip)
            pod.start_time = pod_status.now()
        _tend(api, runner, pod, item)
    for uid, pod in runner.pods.items():
        if uid not in seen and pod.started is not None:
            _stop(runner, pod, 5)


@contextmanager
def running(
    cluster: ControlPlane,
    namespace: str,
    deployment: str,
    folder: Path,
    *,
    node: str = "mgmt",
    poll_seconds: float = POLL_SECONDS,
    backoff_seconds: float = BACKOFF_SECONDS,
    secret_sync_seconds: float = SECRET_SYNC_SECONDS,
    selector: str = "",
    internet: pod_volumes.Internet | None = None,
) -> Iterator[PodRunner]:
    """Runs the Pods of `deployment` in `namespace` on `cluster` as processes for the block (or,
    with `selector`, the Pods it selects there: a controller's Jobs'), from the node `node`,
    reaching `internet`'s stand-ins; every process still running is stopped afterwards."""
    if os.geteuid() != 0:
        raise RuntimeError(
            "the pod runner mounts a Pod's volumes at their absolute paths in a mount namespace of the "
            "process's own and gives it a network namespace with a veth pair: that needs root"
        )
    folder.mkdir(parents=True, exist_ok=True)
    runner = PodRunner(
        cluster,
        namespace,
        deployment,
        node,
        folder,
        backoff_seconds,
        secret_sync_seconds,
        selector=selector,
        internet=internet,
    )
    registered: list[bool] = []

    def step() -> None:
        api = _api(runner)
        try:
            if not registered:
                _register_node(api, node)
                registered.append(True)
            _step(api, runner)
        except UnreachableError:
            raise  # its next pass tries again (controller_loop)
        except OSError as unreachable:
            runner.errors.append(f"cannot run pods: {unreachable!r}")

    try:
        with looping(cluster, KUBELET_USER, step, runner.errors, "run pods", interval=poll_seconds):
            yield runner
    finally:
        for pod in runner.pods.values():
            _stop(runner, pod, 10)
