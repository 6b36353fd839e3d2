"""What rolls lab1's machines, two steps of the program's lab1 scenario (lab1_autoscaling.py): a worker
sizing change at 0 workers (a new template, the MachineDeployment repointed, the old template
deleted), and lab1's Kubernetes upgrade with a worker running (issue 41; docs/operations.md,
"Upgrading a workload cluster's Kubernetes"): the entry's kubernetesVersion and templateVmId set as
the owner sets them, the preview naming the rollout, one `pulumi up`; then the control plane rolls
first (the KubeadmControlPlane stand-in: a new control-plane Machine, then the old one drained and
deleted by the real Machine controller), while the real MachineSet controller holds the new worker
back (its ControlPlaneIsStable preflight check); then it replaces the worker (a new one first,
maxSurge 1), and the real Machine controller drains the old one (DELETION: the demand pod evicted,
made again and placed by the real scheduler on the new worker) before it deletes it and its Node.
Sampled until every machine runs the new version and the demand and kube-system's pods run again:
the workers' counts as a timeline, the MachineDeployment's writes (the autoscaler's among them),
the Machines and Nodes of both parts before and after. And the autoscaler's Deployment rolled by
a renewed lab1 kubeconfig (`rotate_kubeconfig`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from e2e.box.scenarios import WRITES, _step
from e2e.box.workload.lab1_reads import (
    Lab,
    Workload,
    get,
    kubeconfig_secret,
    mounted_kubeconfig,
    names,
    run,
    scales,
    until,
)
from e2e.box.workload.proxmox_node import TEMPLATE_STEP
from e2e.engine.cli import Engine
from e2e.engine.control_plane import ADMIN_USER, OPERATOR_USER, ControlPlane
from e2e.standins.cluster import pod_runner
from e2e.standins.workload.kubeadm import CONTROL_PLANE_LABEL as CONTROL_PLANE_NODE_LABEL
from e2e.standins.workload.objects import CONTROL_PLANE_MACHINE_LABEL

# The sizing change the scenario makes to the workers.
RESIZE_BY_MIB = 2048

# The next patch release; a version bump needs its template, whose images the new nodes boot
# (proxmox_node.TEMPLATE_STEP: the one the box's node holds).
UPGRADE_TO = "v1.35.10"


def _workers(mgmt: ControlPlane, lab: Lab, cluster: Workload) -> dict[str, Any]:
    """The worker Machines (name, version, node) and lab1's worker Nodes (name, kubelet version)."""
    return _machines_and_nodes(mgmt, lab, cluster, cluster.workers_selector, control_plane=False)


def _control_plane(mgmt: ControlPlane, lab: Lab, cluster: Workload) -> dict[str, Any]:
    """The control-plane Machines (name, version, node, deleting) and lab1's control-plane Nodes."""
    return _machines_and_nodes(mgmt, lab, cluster, CONTROL_PLANE_MACHINE_LABEL, control_plane=True)


def _machines_and_nodes(
    mgmt: ControlPlane, lab: Lab, cluster: Workload, selector: str, *, control_plane: bool
) -> dict[str, Any]:
    machines = get(mgmt, "machines", namespace=cluster.namespace, selector=selector)
    nodes = lab.get(lab.lab1, "/api/v1/nodes") or {"items": []}
    return {
        "machines": sorted(
            [
                m["metadata"]["name"],
                m["spec"].get("version"),
                (m.get("status", {}).get("nodeRef") or {}).get("name"),
                *(["deletionTimestamp" in m["metadata"]] if control_plane else []),
            ]
            for m in machines["items"]
        ),
        "nodes": sorted(
            [n["metadata"]["name"], n["status"]["nodeInfo"]["kubeletVersion"]]
            for n in nodes["items"]
            if (CONTROL_PLANE_NODE_LABEL in n["metadata"]["labels"]) == control_plane
        ),
    }


def _rolled(now: dict[str, Any], lab: Lab, before: dict[str, Any]) -> bool:
    """Every worker at the new version on a Node of its own, none of the old left, and the demand
    running on the new ones (a pod bound to a deleted Node still says Running until it is gone)."""
    nodes = {name for name, _ in now["nodes"]}
    return (
        bool(now["machines"])
        and all(version == UPGRADE_TO and node for _, version, node in now["machines"])
        and [version for _, version in now["nodes"]] == [UPGRADE_TO] * len(now["machines"])
        and not {name for name, _ in before["nodes"]} & nodes
        and all(pod[1] in nodes and pod[2] == "Running" for pod in _pods(lab))
    )


def _control_plane_rolled(now: dict[str, Any], before: dict[str, Any]) -> bool:
    """One control-plane Machine, at the new version, new, with its Node, the only control-plane
    Node, at the new version."""
    old = {name for name, *_ in before["machines"]}
    return (
        len(now["machines"]) == 1
        and now["machines"][0][0] not in old
        and now["machines"][0][1:] == [UPGRADE_TO, now["machines"][0][2], False]
        and now["nodes"] == [[now["machines"][0][2], UPGRADE_TO]]
    )


# What the Cluster API manager logs as it deletes a worker (reconcileDelete and drainNode in
# internal/controllers/machine/machine_controller.go), in its order: the Node drained (its pods
# evicted), then, once the VM is gone, the Node deleted.
DELETION = ("Draining Node", "Drain completed", "Deleting Node")


def upgrade(
    engine: Engine, mgmt: ControlPlane, lab: Lab, cluster: Workload, entry: dict[str, Any], *, manager_log: Path
) -> dict[str, Any]:
    before = _workers(mgmt, lab, cluster)
    control_before = _control_plane(mgmt, lab, cluster)
    out: dict[str, Any] = {"before": before, "pods_before": _pods(lab), "system_pods_before": _system_pods(lab)}
    out["config"] = [
        _step(engine, ("config", "set", "--path", "workloadClusters[0].kubernetesVersion", UPGRADE_TO)),
        _step(
            engine,
            ("config", "set", "--path", "workloadClusters[0].templateVmId", str(entry["templateVmId"] + TEMPLATE_STEP)),
        ),
    ]
    out["preview"] = run(engine, mgmt, "preview")
    audit_mark, began = mgmt.audit_mark(), time.monotonic()
    out["up"] = run(engine, mgmt, "up")
    out["workers_held"] = until(
        "a MachineSet held for the control plane", lambda: _held_for_the_control_plane(mgmt, cluster)
    )
    out["timeline"] = lab.watch(
        f"the control plane and the workers at {UPGRADE_TO}",
        lambda _: (
            _rolled(_workers(mgmt, lab, cluster), lab, before)
            and _control_plane_rolled(_control_plane(mgmt, lab, cluster), control_before)
            and _kcp_status(mgmt, cluster) == [UPGRADE_TO, 1, 1, 1]
            and _system_pods_placed(lab)
        ),
        began,
    )
    out["seconds"] = round(time.monotonic() - began, 1)
    out["after"] = _workers(mgmt, lab, cluster)
    out["pods_after"] = _pods(lab)
    out["system_pods_after"] = _system_pods(lab)
    out["md_writes"] = scales(mgmt, audit_mark, cluster)
    log = manager_log.read_text(errors="replace").splitlines()
    out["deletion"] = _deletion(log, cluster, before)
    out["control_plane"] = {
        "before": control_before,
        "after": _control_plane(mgmt, lab, cluster),
        "deletion": _deletion(log, cluster, control_before),
        "status": _kcp_status(mgmt, cluster),
    }
    return out


def _kcp_status(mgmt: ControlPlane, cluster: Workload) -> list[Any]:
    """The KubeadmControlPlane's status: version, replicas, upToDateReplicas, readyReplicas."""
    kcp = get(mgmt, "kubeadmcontrolplane", f"{cluster.name}-control-plane", namespace=cluster.namespace)
    status = kcp.get("status", {})
    return [status.get(field) for field in ("version", "replicas", "upToDateReplicas", "readyReplicas")]


def _held_for_the_control_plane(mgmt: ControlPlane, cluster: Workload) -> str | None:
    """A MachineSet's ScalingUp message while its preflight checks hold its new worker back
    (internal/controllers/machineset/machineset_preflight.go: ControlPlaneIsStable fails while the
    KubeadmControlPlane's status.version, its lowest Machine's, is below its spec.version)."""
    for machine_set in get(mgmt, "machinesets", namespace=cluster.namespace)["items"]:
        for condition in machine_set.get("status", {}).get("conditions", []):
            if condition["type"] == "ScalingUp" and "preflight check failed" in condition.get("message", ""):
                return f"{machine_set['metadata']['name']}: {condition['message']}"
    return None


def _deletion(log: list[str], cluster: Workload, before: dict[str, Any]) -> list[str]:
    """DELETION's steps that the manager logged for the Machines of `before`, in the order first said."""
    old = {name for name, *_ in before["machines"]}
    said = [
        step
        for line in log
        for step in DELETION
        if f'"{step}' in line and any(f'Machine="{cluster.namespace}/{name}"' in line for name in old)
    ]
    return list(dict.fromkeys(said))


def _system_pods_placed(lab: Lab) -> bool:
    """What ran on the old control plane (CoreDNS, Cilium's operator) Running again, each on a Node
    that is there."""
    nodes = {node["metadata"]["name"] for node in (lab.get(lab.lab1, "/api/v1/nodes") or {"items": []})["items"]}
    return all(node in nodes and phase == "Running" for _, node, phase in _system_pods(lab))


def _system_pods(lab: Lab) -> list[list[str]]:
    """kube-system's pods that are not a DaemonSet's: name, node, phase."""
    pods = lab.get(lab.lab1, "/api/v1/namespaces/kube-system/pods") or {"items": []}
    return sorted(
        [p["metadata"]["name"], p["spec"].get("nodeName", ""), p.get("status", {}).get("phase", "")]
        for p in pods["items"]
        if not any(o["kind"] == "DaemonSet" for o in p["metadata"].get("ownerReferences", []))
    )


def _pods(lab: Lab) -> list[list[str]]:
    """The demand's pods: name, node, phase."""
    return sorted(
        [p["metadata"]["name"], p["spec"].get("nodeName", ""), p.get("status", {}).get("phase", "")]
        for p in lab.demand_pods()
    )


def resize(engine: Engine, mgmt: ControlPlane, cluster: Workload, memory_mib: int, out: dict[str, Any]) -> None:
    ns = cluster.namespace
    sets_before = names(mgmt, "machinesets", ns)
    out["resize_config"] = _step(
        engine, ("config", "set", "--path", "workloadClusters[0].workers.memoryMib", str(memory_mib))
    )
    audit_mark = mgmt.audit_mark()
    out["resize_preview"] = run(engine, mgmt, "preview")
    out["resize"] = run(engine, mgmt, "up")
    out["resize_writes"] = [
        [e["verb"], e["objectRef"]["resource"], e["objectRef"].get("name", ""), e["requestReceivedTimestamp"]]
        for e in mgmt.audit()[audit_mark:]
        if e["user"]["username"] == ADMIN_USER
        and e["verb"] in WRITES
        and e["objectRef"].get("resource") in ("proxmoxmachinetemplates", "machinedeployments")
        and "dryRun=All" not in e.get("requestURI", "")
    ]
    new_sets = until("a new MachineSet", lambda: sorted(set(names(mgmt, "machinesets", ns)) - set(sets_before)) or None)
    out["machinesets"] = {"before": sets_before, "new": new_sets}
    out["md_resized"] = get(mgmt, "machinedeployment", cluster.workers, namespace=ns)
    out["templates"] = names(mgmt, "proxmoxmachinetemplates", ns)


def rotate_kubeconfig(
    engine: Engine,
    mgmt: ControlPlane,
    cluster: Workload,
    *,
    lab1_plane: ControlPlane,
    runner: pod_runner.PodRunner,
    out: dict[str, Any],
) -> None:
    """A renewed admin kubeconfig rolls the autoscaler: the Secret rewritten reaches the running
    autoscaler's mounted file, which it does not read again (#4784); the next `pulumi up` puts the
    new digest on the pod template, and the rollout restarts it."""
    before = kubeconfig_secret(mgmt, cluster)["value"]
    [*_, running] = [e for e in runner.events if e["event"] == "started"]
    # Marked before the rotation: the runner may sync the new Secret before it is seen here.
    events = len(runner.events)
    # Another user's credentials, as a renewal gives a new client certificate.
    rotated = json.loads(lab1_plane.kubeconfig_of(OPERATOR_USER).read_text())
    lab1_plane.kubeconfig_of(ADMIN_USER).write_text(json.dumps(rotated))
    value = until(
        f"the KCP stand-in rewrites {cluster.kubeconfig_secret}",
        lambda: (now := kubeconfig_secret(mgmt, cluster)["value"]) != before and now,
    )
    out["rotated_secret"] = True
    until("the runner syncs the mounted Secret", lambda: any(e["event"] == "synced" for e in runner.events[events:]))
    out["rotation_sync"] = {
        "events": [e["event"] for e in runner.events[events:]],
        "kubeconfig_seen": mounted_kubeconfig(running["pid"]) == value,
        "same_process_alive": Path(f"/proc/{running['pid']}").exists(),
        "rotated": value,
    }
    events = len(runner.events)
    out["rotation_up"] = run(engine, mgmt, "up")

    def restarted() -> bool:
        later = [event["event"] for event in runner.events[events:]]
        return "started" in later and "stopped" in later

    until("the autoscaler restarted with the new kubeconfig", restarted)
    out["rotation_events"] = runner.events[events:]
    [new] = [e for e in out["rotation_events"] if e["event"] == "started"]
    out["rotation_deployment"] = get(mgmt, "deployment", cluster.autoscaler, namespace=cluster.namespace)
    out["rotation_pod"] = get(mgmt, "pod", new["pod"], namespace=cluster.namespace)
