"""What a kubelet writes about a Pod, shared by the stand-ins that run Pods on the management
cluster: the operator stand-in (which only reports its Pods running) and the pod runner (which
runs a Pod's container as a process, pod_runner.py). The Binding that puts a Pending Pod on a
node, and the Pod's status: its phase, conditions and container statuses, as the kubelet's
status manager reports them.
"""

from __future__ import annotations

import time
from typing import Any

CONDITIONS = ("PodScheduled", "Initialized", "ContainersReady", "Ready")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def binding(pod: str, node: str) -> dict[str, Any]:
    """The body of a POST to pods/<pod>/binding, as the scheduler sends it."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def running(
    container: dict[str, Any], started_at: str, restarts: int = 0, last: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A container's status while its process lives: running, started and ready (a container with
    no readiness probe is ready once it runs)."""
    return {
        **{"name": container["name"], "image": container["image"], "imageID": ""},
        **{"ready": True, "started": True, "restartCount": restarts, "state": {"running": {"startedAt": started_at}}},
        **({"lastState": {"terminated": last}} if last else {}),
    }


def waiting(
    container: dict[str, Any], reason: str, message: str, restarts: int, last: dict[str, Any] | None
) -> dict[str, Any]:
    """A container's status while it does not run: waiting for `reason` (CrashLoopBackOff between
    restarts, CreateContainerError when it cannot be started), with its last termination."""
    return {
        **{"name": container["name"], "image": container["image"], "imageID": ""},
        **{"ready": False, "started": False, "restartCount": restarts},
        "state": {"waiting": {"reason": reason, "message": message}},
        **({"lastState": {"terminated": last}} if last else {}),
    }


def terminated(container: dict[str, Any], ended: dict[str, Any], restarts: int) -> dict[str, Any]:
    """A container's status once it has ended for good (a Job's pod: restartPolicy OnFailure or
    Never, its process done): terminated as `ended` says (exitCode, reason, startedAt, finishedAt,
    and the message a kubelet reads from its terminationMessagePath)."""
    return {
        **{"name": container["name"], "image": container["image"], "imageID": ""},
        **{"ready": False, "started": False, "restartCount": restarts, "state": {"terminated": ended}},
    }


def status(
    containers: list[dict[str, Any]],
    started: str,
    pod_ip: str | None = None,
    host_ip: str | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    """The Pod's status in `phase` (Running; Succeeded or Failed once its containers ended for
    good), Ready when every container is; an ended Pod's readiness says why, as the kubelet's
    status manager words it (PodCompleted)."""
    ready = all(container["ready"] for container in containers)
    stamp = now()
    ended = {"reason": "PodCompleted"} if phase in ("Succeeded", "Failed") else {}
    conditions = [
        {
            "type": kind,
            "status": "True" if ready or kind in CONDITIONS[:2] else "False",
            "lastTransitionTime": stamp,
            **({} if ready or kind in CONDITIONS[:2] else ended),
        }
        for kind in CONDITIONS
    ]
    addresses = {"podIP": pod_ip, "podIPs": [{"ip": pod_ip}]} if pod_ip else {}
    return {
        "phase": phase,
        "startTime": started,
        "conditions": conditions,
        "containerStatuses": containers,
        **addresses,
        **({"hostIP": host_ip} if host_ip else {}),
    }
