"""The PROGRAM's lab1 in the box (tests/test_box_lab1_*.py; issue 30's scenario): on the workload box
(e2e/box/workload/workload_box.py) with the real Cluster API core, the program (box_program.py)
declares a workload cluster in its stack file as an owner edits it, at one of lab1_sites.SITES (the
lab's own lab1, or another site's), and each step goes through the real CLI: the first `pulumi up`
(the cluster at 0 workers, Cilium once the Cluster is ControlPlaneInitialized, cluster-autoscaler
from the real chart 9.59.0 whose Pod the pod runner runs as the real binary); then demand in lab1
that fits nowhere, which the real autoscaler meets 0 -> 1 -> 3 (maxSize; the pod more than that
stays pending, the autoscaler's event saying why), 3 -> 4 once maxSize is raised, and, once the
demand is gone, 4 -> 0; after 0 -> 1, the state lost and the lab taken over by a new stack, which
runs the rest (lab1_recovery.py), and lab1's Kubernetes upgrade with the worker running
(lab1_rollouts.py); three faults in the scaling path (lab1_faults.py): an annotation edited
by hand at 3, the fourth worker's Machine never becoming a Node while its template is gone (and
its next clone's answer lost, whose VM the exit criteria name at 0), and lab1's API server down
and then its VIP held nowhere, at 0; a rotated lab1 kubeconfig; a worker
sizing change; and, last, the controls (lab1_controls.py): without the proxmoxmachinetemplates
rule, no scale-from-zero; without its contract label, the ProxmoxCluster cannot be resolved.
Between steps, a `pulumi up --expect-no-changes` that writes nothing (after the first up, a
zero-change preview too). Every write is read from the audit logs; the scale-up and scale-down
are recorded as a timeline.

Along the way it records what the real Cluster API core and the real autoscaler did beneath the
program: the operator stand-in's real CRDs, the webhook's defaulting, the Cluster -> MachineSet ->
Machine -> Node chain of the first worker, the autoscaler's process (argv, env, mounts, token)
against its chart-rendered Pod, its requests through the real API server's RBAC, a rotated Secret
reaching its mounted file, and a crash restarted after the backoff.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.box.scenarios import WRITES, _lab_secrets, _readme_first_run, _set_all, _step
from e2e.box.workload import lab1_controls, lab1_faults, lab1_recovery, lab1_rollouts, proxmox_node, workload_box
from e2e.box.workload.lab1_reads import (
    DEMAND,
    Lab,
    Workload,
    bootstrap,
    capmox_assets,
    cluster_api_writes,
    conditions,
    demand,
    get,
    ipam,
    kubeconfig_secret,
    manager_processes,
    managers,
    not_triggered,
    process,
    run,
    scales,
    until,
)
from e2e.box.workload.lab1_sites import declared
from e2e.controllers import cluster_api
from e2e.engine.cli import Engine, declare_workload_clusters
from e2e.engine.control_plane import ControlPlane
from e2e.standins.cluster import pod_runner
from e2e.standins.proxmox.pve_api_standin import PveApiStandIn
from e2e.standins.workload.objects import CONTROL_PLANE_MACHINE_LABEL

# One demand pod fills three quarters of a worker's cpu: one fits a worker beside Cilium's agent
# (100m), two never do, and none fits the control plane, whose taint it does not tolerate.
DEMAND_SHARE_OF_CPU = 0.75
# The box's short timings, through the program's own settings. The scan interval stays the upstream
# 10 s: a pending pod starts a loop at once, and a shorter one with the autoscaler's client
# unthrottled (components/cluster_autoscaler.py) cost the suite minutes of CPU in the API servers.
TIMINGS = {"scaleDownUnneededTime": "5s", "scaleDownDelayAfterAdd": "5s"}
# The kubelet's first restart backoff is 10 s and it syncs a mounted Secret about every minute;
# the box's pod runner, through its settings, 1 s and every 2 s.
BACKOFF_SECONDS = 1.0
SECRET_SYNC_SECONDS = 2.0
# Each log's start (the autoscaler's startup lines), for the tests to read.
LOG_HEAD_CHARS = 60_000


def _config(engine: Engine, box: workload_box.WorkloadBox, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's first run, the cluster declared in the stack file as an owner edits it (with
    the box's short timings), and the box's chart repositories and CAPMOX release."""
    steps = _readme_first_run(engine, _lab_secrets())
    declare_workload_clusters(engine, [entry | {"autoscaler": TIMINGS}])
    return [*steps, _set_all(engine, box.served_settings().items())]


def _demand(lab1: Path, mgmt: ControlPlane, replicas: int, worker_cpus: int) -> None:
    demand(mgmt, lab1, replicas, {"cpu": f"{int(worker_cpus * 1000 * DEMAND_SHARE_OF_CPU)}m", "memory": "1Gi"})


def _no_change(
    engine: Engine, mgmt: ControlPlane, cluster: Workload, after: str, *, preview: bool = False
) -> dict[str, Any]:
    """`pulumi up --expect-no-changes` (it fails on any change it makes) and what was written
    meanwhile; after the first up, the zero-change preview a user runs first too. Between the
    autoscaler's steps a preview would only repeat the up's plan: nothing upstream changed, so
    nothing is unknown in it."""
    mark = mgmt.audit_mark()
    checked = {"preview": run(engine, mgmt, "preview", "--expect-no-changes")} if preview else {}
    up = run(engine, mgmt, "up", "--expect-no-changes")
    return {"after": after, **checked, "up": up, "md_writes": scales(mgmt, mark, cluster)}


def lab1_autoscaling(root: str, site: str) -> dict[str, Any]:
    base, entry = Path(root), declared(site)
    cluster = Workload.of(entry)
    out: dict[str, Any] = {"site": site, "entry": entry}
    times: dict[str, float] = {}
    began = time.monotonic()

    def mark(what: str) -> None:
        times[what] = round(time.monotonic() - began, 1)

    with workload_box.running_with_autoscaler(
        base,
        entry,
        cluster.namespace,
        cluster.autoscaler,
        backoff_seconds=BACKOFF_SECONDS,
        secret_sync_seconds=SECRET_SYNC_SECONDS,
    ) as (box, runner):
        try:
            _steps(box, runner, entry, out, mark)
        except Exception:  # what happened so far is the test's to read
            out["failed"] = traceback.format_exc()
        out |= {
            "times": times,
            "problems": box.problems(),
            "chart_requests": box.charts.requests,
            "cluster_api_writes": cluster_api_writes(box.mgmt),
            "v1beta1_requests": cluster_api.v1beta1_requests(box.mgmt),
            "runner": {"events": runner.events, "errors": runner.errors},
            "autoscaler_logs": {path: text[-6000:] for path, text in runner.logs().items()},
            "autoscaler_log_heads": {path: text[:LOG_HEAD_CHARS] for path, text in runner.logs().items()},
            "standins_timeline": box.standins.record.timeline,
            "proxmox_calls": proxmox_node.calls_by_route(box.pve),
        }
        if out.get("failed"):
            out["manager_log_tail"] = core.log_tail(40) if (core := cluster_api.core(box.managers)) else ""
    print("timeline:", json.dumps(out.get("timelines", {})), "\ntimes:", times, "\nreaction:", out.get("reaction"))
    return out


def _steps(  # noqa: PLR0915 - one scenario, step by step
    box: workload_box.WorkloadBox,
    runner: pod_runner.PodRunner,
    entry: dict[str, Any],
    out: dict[str, Any],
    mark: Callable[[str], None],
) -> None:
    mgmt, cluster = box.mgmt, Workload.of(entry)
    ns = cluster.namespace
    mark("box up")
    engine = box.engine(workload_clusters=True)
    out["config"] = [step for step in _config(engine, box, entry) if step["rc"] != 0]
    # 1. The first up: lab1 at 0 workers, Cilium after ControlPlaneInitialized, the autoscaler.
    out["up1"] = run(engine, mgmt, "up")
    mark("first pulumi up")
    if out["up1"]["rc"]:
        raise AssertionError("the first pulumi up failed")
    lab1_plane = box.standins.running[cluster.key]
    # The admin's kubeconfig as it is now (step 6 rotates the one the stand-in keeps).
    lab1 = lab1_plane.root / "scenario-lab1.kubeconfig"
    lab1.write_text(lab1_plane.kubeconfig.read_text())
    made = get(mgmt, "cluster", cluster.name, namespace=ns)
    out["cluster"], out["cluster_conditions"] = made, conditions(made)
    out["lab1_helm_writes"] = [
        [e["requestReceivedTimestamp"], e["verb"], e["objectRef"].get("name", "")]
        for e in lab1_plane.audit()
        if e["objectRef"].get("resource") == "secrets"
        and e["objectRef"].get("name", "").startswith("sh.helm.release")
        and e["verb"] in WRITES
    ]
    out["md_created"] = get(mgmt, "machinedeployment", cluster.workers, namespace=ns)
    worker_cpus = int(out["md_created"]["metadata"]["annotations"]["capacity.cluster-autoscaler.kubernetes.io/cpu"])
    out["beneath"] = _beneath_the_first_up(box, cluster, lab1)
    out["autoscaler"] = _the_first_autoscaler(mgmt, cluster, runner)
    out["no_change"] = [_no_change(engine, mgmt, cluster, "first up", preview=True)]
    mark("no-change preview and up")
    lab = Lab(mgmt, lab1, cluster)
    # 3. Demand that fits nowhere: 0 -> 1 from zero, then 1 -> 3.
    timelines, audit_mark = {}, mgmt.audit_mark()
    step_began, wall = time.monotonic(), time.time()
    _demand(lab1, mgmt, 1, worker_cpus)
    timelines["0->1"] = lab.watch(
        "0 -> 1", lambda s: s["scheduled"] == 1 and s["nodes"] == 1 and s["replicas"] == 1, step_began
    )
    out["scale_from_zero"] = scale_writes = scales(mgmt, audit_mark, cluster)
    first = next((s for s in scale_writes if s["user"] == cluster.account), None)
    if first:
        at = time.mktime(time.strptime(first["at"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        out["reaction"] = round(at + float("0." + first["at"][20:26]) - wall, 1)
    mark("0 -> 1")
    out["worker"] = worker = _the_first_worker(mgmt, box.pve, cluster, lab, lab1)
    # Read here, not at the first up: the Machine controller finds the control plane's Node once its
    # cache of lab1 connects, which it retries with a backoff (about 25 s after the Node registered).
    out["control_machine"] = _running_machine(mgmt, cluster, CONTROL_PLANE_MACHINE_LABEL)
    # The state and its passphrase lost: a new stack takes the lab over and runs the rest.
    engine, out["recovery"] = lab1_recovery.recover(box, engine, lab1, cluster)
    mark("recovery")
    out["no_change"].append(_no_change(engine, mgmt, cluster, "0 -> 1, recovered"))
    worker["lease_later"] = get(
        mgmt, "lease", worker["node"]["metadata"]["name"], namespace="kube-node-lease", kubeconfig=lab1
    )
    # lab1's Kubernetes upgrade with that worker running and its demand on it (lab1_rollouts.py).
    out["upgrade"] = lab1_rollouts.upgrade(engine, mgmt, lab, cluster, entry, manager_log=box.manager.log)
    mark("Kubernetes upgrade")
    out["no_change"].append(_no_change(engine, mgmt, cluster, "upgrade"))
    # One demand pod more than maxSize workers hold: the autoscaler stops at maxSize and says why
    # on the pod left over (docs/troubleshooting.md quotes it).
    audit_mark, step_began, max_size = mgmt.audit_mark(), time.monotonic(), entry["workers"]["maxSize"]
    _demand(lab1, mgmt, max_size + 1, worker_cpus)
    # The real scheduler finds no room for the new demand, before the autoscaler makes some.
    out["unschedulable"] = until(
        "a demand pod Unschedulable",
        lambda: next(
            (p for p in lab.demand_pods() if conditions(p).get("PodScheduled", {}).get("reason") == "Unschedulable"),
            None,
        ),
    )
    timelines["1->3"] = lab.watch(
        "1 -> 3",
        lambda s: s["scheduled"] == max_size and s["nodes"] == max_size and s["replicas"] == max_size,
        step_began,
    )
    out["max_size_reached"] = until("the demand pod left over told why", lambda: not_triggered(mgmt, lab1))
    out["at_max_size"] = lab.sample()
    out["scale_up"] = scales(mgmt, audit_mark, cluster)
    mark("1 -> 3")
    out["managers_at_3"] = managers(mgmt, cluster)
    out["no_change"].append(_no_change(engine, mgmt, cluster, "1 -> 3"))
    # After the scale, an annotation edited by hand: what the runs show of it (lab1_faults.py).
    out["edited_by_hand"] = lab1_faults.edited_by_hand(engine, mgmt, cluster)
    mark("an annotation edited by hand")
    # The fault's cause gone: one worker more allowed, with the pod left over taken back first, so
    # that the up, which proves the template is there (components/clone_sources.py), adds no worker.
    # Then the workers' template is taken off the Proxmox node and the pod comes back: the new
    # worker's Machine waits without a Node until the template is back (lab1_faults.py).
    _demand(lab1, mgmt, max_size, worker_cpus)
    out["max_size_raised"] = [
        _step(engine, ("config", "set", "--path", "workloadClusters[0].workers.maxSize", str(max_size + 1))),
        run(engine, mgmt, "up"),
    ]
    step_began = time.monotonic()
    out["never_a_node"] = lab1_faults.never_a_node(
        mgmt,
        lab,
        box.pve,
        runner,
        scale_up=lambda: _demand(lab1, mgmt, max_size + 1, worker_cpus),
        preview=lambda: run(engine, mgmt, "preview"),
    )
    mark("a Machine that never becomes a Node")
    timelines["3->4"] = lab.watch(
        "3 -> 4, maxSize raised",
        lambda s: s["scheduled"] == s["nodes"] == s["replicas"] == max_size + 1 and s["pending"] == 0,
        step_began,
    )
    mark("3 -> 4, maxSize raised")
    out["no_change"].append(_no_change(engine, mgmt, cluster, "3 -> 4"))
    # 5. The demand gone: down to 0.
    audit_mark, step_began = mgmt.audit_mark(), time.monotonic()
    mgmt.kubectl_as(lab1, "delete", "deployment", DEMAND, "--wait=false").check_returncode()
    timelines["4->0"] = lab.watch(
        "4 -> 0", lambda s: s["replicas"] == 0 and s["machines"] == 0 and s["nodes"] == 0, step_began
    )
    out["scale_down"] = scales(mgmt, audit_mark, cluster)
    out["timelines"] = timelines
    out["nodes_after"] = [n["metadata"]["name"] for n in get(mgmt, "nodes", kubeconfig=lab1)["items"]]
    out["vms_after"] = box.pve.vms_on_node()
    mark("4 -> 0")
    # The VM whose clone answer was lost (never_a_node) named by the exit criteria, then destroyed.
    out["stray"] = lab1_faults.stray_named(mgmt, lab, lab1, box.pve, lab1_plane.root / "laptop")
    mark("a stray VM named")
    # lab1 unreachable at 0, two ways (lab1_faults.py); the zero-change run after them is the scale-down's too.
    network = f"{entry['gateway']}/{entry['ipPrefix']}"
    out |= lab1_faults.lab1_down(engine, mgmt, lab, runner, lab1_plane, network=network)
    mark("lab1 unreachable")
    out["no_change"].append(_no_change(engine, mgmt, cluster, "4 -> 0 and lab1 unreachable"))
    out["managers_at_0"] = managers(mgmt, cluster)
    # 6. lab1's kubeconfig rotated where Cluster API keeps it (the KCP stand-in writes the Secret
    # from its control plane's admin kubeconfig): the next up restarts the autoscaler. Before the
    # sizing change, whose runs take the time the new autoscaler waits for its predecessor's lease.
    lab1_rollouts.rotate_kubeconfig(engine, mgmt, cluster, lab1_plane=lab1_plane, runner=runner, out=out)
    mark("kubeconfig rotation")
    # 7. A worker sizing change: a new template, the MachineDeployment repointed, the old deleted.
    lab1_rollouts.resize(engine, mgmt, cluster, entry["workers"]["memoryMib"] + lab1_rollouts.RESIZE_BY_MIB, out)
    mark("worker sizing change")
    out["no_change"].append(_no_change(engine, mgmt, cluster, "sizing change"))
    # 8. The controls: without the rule, scale-from-zero does not happen; without the contract
    # label, the infrastructure cannot be resolved. The CAPMOX assets the chart stand-in serves.
    out["control"] = lab1_controls.without_the_template_rule(
        mgmt, lab, runner, lambda: _demand(lab1, mgmt, 1, worker_cpus)
    )
    mark("control")
    out["no_change"].append(_no_change(engine, mgmt, cluster, "the template rule back"))
    out["capmox_assets"], out["unlabelled"] = (
        capmox_assets(box.charts),
        lab1_controls.without_contract_labels(mgmt, box.manager),
    )
    out["ipam_at_end"], live = ipam(mgmt, ns), get(mgmt, "proxmoxcluster", cluster.name, namespace=ns)
    out["verdicts"] = lab1_controls.verdicts(mgmt, ns, live)
    mark("contract control")


def _beneath_the_first_up(box: workload_box.WorkloadBox, cluster: Workload, lab1: Path) -> dict[str, Any]:
    """What the operator stand-in, the real Cluster API manager and the workload stand-ins made
    of the program's objects: the real CRDs and their labels, the webhooks, the MachineSet, the
    kubeconfig Secret, lab1's control-plane Node and the system pods on it."""
    mgmt = box.mgmt
    control_node = until("the control-plane Node", lambda: box.standins.control_plane_nodes.get(cluster.key))
    system_pods = until(
        "CoreDNS and Cilium Running on the control plane",
        lambda: (
            (pods := (get(mgmt, "pods", namespace="kube-system", kubeconfig=lab1) or {}).get("items", []))
            # CoreDNS twice, Cilium's operator and agent.
            and len([p for p in pods if p["status"].get("phase") == "Running"]) >= 4
            and pods
        ),
    )
    return {
        "crds_applied": box.operator.crds_applied,
        "crd_labels": {crd["metadata"]["name"]: crd["metadata"].get("labels", {}) for crd in get(mgmt, "crd")["items"]},
        "webhook_configurations": [c for m in box.managers for c in m.configurations],
        "manager_processes": manager_processes(),
        "manager_ready_seconds": box.manager.started_seconds,
        "machine_sets": get(mgmt, "machinesets", namespace=cluster.namespace)["items"],
        "secret": kubeconfig_secret(mgmt, cluster),
        "readyz": mgmt.kubectl_as(lab1, "get", "--raw", "/readyz").stdout,
        "control_node": get(mgmt, "node", control_node, kubeconfig=lab1),
        "system_pods": system_pods,
        # The real KubeadmControlPlane webhook's refusal of a skipped minor, asked without writing.
        "minor_skipped": mgmt.kubectl_as(
            mgmt.kubeconfig,
            *("-n", cluster.namespace, "patch", "kubeadmcontrolplane", f"{cluster.name}-control-plane"),
            *("--type=merge", "-p", '{"spec": {"version": "v1.37.0"}}', "--dry-run=server"),
        ).stderr,
    }


def _the_first_autoscaler(mgmt: ControlPlane, cluster: Workload, runner: pod_runner.PodRunner) -> dict[str, Any]:
    """The autoscaler's first process as it runs, and the Pod it runs for."""
    started = until("the autoscaler started", lambda: next((e for e in runner.events if e["event"] == "started"), None))
    return {
        "process": process(started["pid"]),
        "pod": get(mgmt, "pod", started["pod"], namespace=cluster.namespace),
        "mgmt_ca": (mgmt.root / "pki" / "apiserver.crt").read_text(),
    }


def _running_machine(mgmt: ControlPlane, cluster: Workload, selector: str) -> dict[str, Any] | None:
    """The first of the cluster's Machines that `selector` selects Running with its nodeRef."""
    machines = get(mgmt, "machines", namespace=cluster.namespace, selector=selector)["items"]
    running = [m for m in machines if m.get("status", {}).get("phase") == "Running" and m["status"].get("nodeRef")]
    return running[0] if running else None


def _the_first_worker(
    mgmt: ControlPlane, pve: PveApiStandIn, cluster: Workload, lab: Lab, lab1: Path
) -> dict[str, Any]:
    """The chain the real MachineSet and Machine controllers made for the first worker, its VM as
    CAPMOX made it, the Node the kubelet stand-in registered, the demand pod the real scheduler
    placed on it."""
    machine = until(
        "a worker Machine Running with its nodeRef", lambda: _running_machine(mgmt, cluster, cluster.workers_selector)
    )
    node = until(
        "the worker Node without Cluster API's uninitialized taint",
        lambda: (
            (found := get(mgmt, "node", machine["status"]["nodeRef"]["name"], kubeconfig=lab1))
            and not any(t["key"].startswith("node.cluster.x-k8s.io/") for t in found["spec"].get("taints", []))
            and found
        ),
    )
    infra = get(mgmt, "proxmoxmachine", machine["spec"]["infrastructureRef"]["name"], namespace=cluster.namespace)
    return {
        "machine": machine,
        "proxmox_machine": infra,
        "vm": pve.qm_config(int(infra["spec"]["virtualMachineID"])),
        "bootstrap": bootstrap(mgmt, machine, lab1),
        "ipam": ipam(mgmt, cluster.namespace),
        "node": node,
        "running": until(
            "the demand pod Running",
            lambda: next((p for p in lab.demand_pods() if p["status"].get("phase") == "Running"), None),
        ),
        "lease": get(mgmt, "lease", node["metadata"]["name"], namespace="kube-node-lease", kubeconfig=lab1),
    }
