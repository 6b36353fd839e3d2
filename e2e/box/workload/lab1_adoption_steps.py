"""docs/adoption.md's workload-cluster steps (W1 to W6) followed with the real CLI on lab1 as
clusterctl left it (e2e/box/workload/lab1_takeover.py runs them), then the autoscaler scaling lab1's
workers 1 -> 2 -> 1 with `pulumi up` a no-op around each scale. Every write is read from the
management cluster's audit log, every object's identity from lab1_state's snapshots.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from e2e.box.scenarios import _step, adoption_gate
from e2e.box.workload import lab1_state, workload_box
from e2e.box.workload.lab1_reads import DEMAND, LAB1, demand, get, managers, run, scales, until
from e2e.engine.cli import Engine
from e2e.engine.control_plane import ADMIN_USER

# A variant the gate must refuse naming its fields: a VLAN the templates do not have, another
# worker memory.
VARIANT_MEMORY_MIB = 8192
VARIANT_VLAN = 4


def gate(engine: Engine, base: Path) -> dict[str, Any]:
    """W3, and each step it plans as `op name`."""
    checked = adoption_gate(engine, base)
    ops = {f"{step['op']} {step['urn'].rsplit('::', 1)[-1]}" for step in checked["preview_steps"]}
    return checked | {"ops": sorted(ops)}


def _admin_writes(box: workload_box.WorkloadBox, mark: int) -> list[dict[str, Any]]:
    """The engine's writes (the admin's kubeconfig) to lab1's objects after `mark`."""
    return [write for write in lab1_state.writes(box.mgmt, mark) if write["user"] == ADMIN_USER]


def _field_managers(box: workload_box.WorkloadBox) -> dict[str, list[str]]:
    return {
        name: sorted(
            "/".join(filter(None, (entry["manager"], entry["operation"], entry.get("subresource"))))
            for entry in item["metadata"]["managedFields"]
        )
        for name, item in lab1_state.objects(box.mgmt).items()
    }


def adopt(engine: Engine, box: workload_box.WorkloadBox, base: Path, out: dict[str, Any]) -> None:
    """W2 to W5: the entry's keys set as W2 has them, the variant refused by the gate, the gate
    passing, the adoption `up` and `preview --expect-no-changes`, each read from the audit log."""
    lab1 = base / "lab1.kubeconfig"
    chart = out["helm_list"][0]["chart"].removeprefix("cilium-")
    w2 = [
        ("config", "set", "--path", "workloadClusters[0].takenOver", "true"),
        ("config", "set", "--path", "workloadClusters[0].adopt", "true"),
        ("config", "set", "--path", "workloadClusters[0].podCidr", out["settings_from_live"]["podCidr"]),
        ("config", "set", "ciliumVersion", chart),
    ]
    out["w2"] = [_step(engine, args) for args in w2]
    # The variant: a VLAN and another worker memory, refused naming both; then back to W1's values.
    variant = [
        ("config", "set", "--path", "workloadClusters[0].vlan", str(VARIANT_VLAN)),
        ("config", "set", "--path", "workloadClusters[0].workers.memoryMib", str(VARIANT_MEMORY_MIB)),
    ]
    out["variant_config"] = [_step(engine, args) for args in variant]
    out["variant_gate"] = gate(engine, base)
    memory = str(out["settings_from_live"]["workers"]["memoryMib"])
    fixed = [
        ("config", "rm", "--path", "workloadClusters[0].vlan"),
        ("config", "set", "--path", "workloadClusters[0].workers.memoryMib", memory),
    ]
    out["fixed_config"] = [_step(engine, args) for args in fixed]
    before, mark = lab1_state.snapshot(box.mgmt, lab1), len(box.mgmt.audit())
    out["gate"] = gate(engine, base)
    out["adoption_up"] = run(engine, box.mgmt, "up")
    out["adoption_writes"] = _admin_writes(box, mark)
    out["adoption_changed"] = lab1_state.changed(before, lab1_state.snapshot(box.mgmt, lab1))
    out["managers_after_adoption"] = _field_managers(box)
    out["md_spec_owners_after_adoption"] = managers(box.mgmt, LAB1)
    out["w5"] = run(engine, box.mgmt, "preview", "--expect-no-changes")
    out["adopted_output"] = engine.pulumi("stack", "output", "adoptedWorkloadClusters", "--json").stdout


def adopt_off(engine: Engine, box: workload_box.WorkloadBox, base: Path, out: dict[str, Any]) -> None:
    """W6: adopt off, preview, up, preview --expect-no-changes."""
    lab1 = base / "lab1.kubeconfig"
    out["w6_config"] = _step(engine, ("config", "set", "--path", "workloadClusters[0].adopt", "false"))
    before, mark = lab1_state.snapshot(box.mgmt, lab1), len(box.mgmt.audit())
    out["w6_preview"] = run(engine, box.mgmt, "preview")
    out["w6_up"] = run(engine, box.mgmt, "up")
    out["w6_writes"] = _admin_writes(box, mark)
    out["w6_changed"] = lab1_state.changed(before, lab1_state.snapshot(box.mgmt, lab1))
    out["managers_after_w6"] = _field_managers(box)
    out["md_spec_owners_after_w6"] = managers(box.mgmt, LAB1)
    out["w6_no_change"] = run(engine, box.mgmt, "preview", "--expect-no-changes")


def _worker_nodes(box: workload_box.WorkloadBox, lab1: Path) -> list[dict[str, Any]]:
    nodes = (get(box.mgmt, "nodes", kubeconfig=lab1) or {}).get("items", [])
    return [n for n in nodes if "node-role.kubernetes.io/control-plane" not in n["metadata"]["labels"]]


def _workers(box: workload_box.WorkloadBox, lab1: Path) -> dict[str, Any]:
    deployment = get(box.mgmt, "machinedeployment", LAB1.workers) or {}
    machines = (get(box.mgmt, "machines") or {}).get("items", [])
    ready = [
        n
        for n in _worker_nodes(box, lab1)
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
    ]
    return {
        "replicas": deployment.get("spec", {}).get("replicas"),
        "machines": len(machines),
        "running": len([m for m in machines if m.get("status", {}).get("phase") == "Running"]),
        "ready_workers": len(ready),
    }


# Which pod a Deployment scaled from two to one deletes is its ReplicaSet's choice, and two pods
# made together and Ready seconds apart can tie in its ranking (ready times in logarithmic buckets,
# then chance). Had the pod on the new worker stayed, neither worker could go: the first one runs
# Cilium's operator, which the autoscaler does not move (a kube-system pod without a
# PodDisruptionBudget). A deletion cost on the first worker's pod says which one goes.
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def _keep_demand_on(box: workload_box.WorkloadBox, lab1: Path, workers: set[str]) -> list[str]:
    """The demand's pods on `workers`, each given a deletion cost above the others' (0)."""
    pods = (get(box.mgmt, "pods", namespace="default", selector=f"app={DEMAND}", kubeconfig=lab1) or {}).get(
        "items", []
    )
    kept = [pod["metadata"]["name"] for pod in pods if pod["spec"].get("nodeName") in workers]
    for name in kept:
        box.mgmt.kubectl_as(lab1, "annotate", "pod", name, "--overwrite", f"{DELETION_COST}=100").check_returncode()
    return kept


def _no_change(engine: Engine, box: workload_box.WorkloadBox, after: str) -> dict[str, Any]:
    """`pulumi up --expect-no-changes` (it fails on any change it would make) and the writes to the
    MachineDeployment meanwhile. No preview first: nothing upstream changed, so the up's plan is
    the preview's."""
    mark = len(box.mgmt.audit())
    up = run(engine, box.mgmt, "up", "--expect-no-changes")
    return {"after": after, "up": up, "md_writes": scales(box.mgmt, mark, LAB1)}


def scale(engine: Engine, box: workload_box.WorkloadBox, base: Path, out: dict[str, Any]) -> None:
    """The autoscaler scales the workers 1 -> 2 (a second demand pod fits no worker) and, once the
    demand is one pod again, 2 -> 1 (minSize 1); `pulumi up` a no-op after each (before them, W6's
    zero-change preview)."""
    lab1 = base / "lab1.kubeconfig"
    cpus = out["settings_from_live"]["workers"]["sockets"] * out["settings_from_live"]["workers"]["cores"]
    cpu = f"{cpus * 600}m"  # more than half a worker: one pod on each
    out["no_change"] = []
    first_worker = {n["metadata"]["name"] for n in _worker_nodes(box, lab1)}
    mark, began = len(box.mgmt.audit()), time.monotonic()
    demand(box.mgmt, lab1, 2, {"cpu": cpu})
    until("1 -> 2", lambda: (now := _workers(box, lab1))["replicas"] == 2 and now["ready_workers"] == 2)
    out["scale_up"] = {"seconds": round(time.monotonic() - began, 1), "writes": scales(box.mgmt, mark, LAB1)}
    out["no_change"].append(_no_change(engine, box, "1 -> 2"))
    out["demand_kept_on_first_worker"] = _keep_demand_on(box, lab1, first_worker)
    mark, began = len(box.mgmt.audit()), time.monotonic()
    demand(box.mgmt, lab1, 1, {"cpu": cpu})
    until("2 -> 1", lambda: (now := _workers(box, lab1))["replicas"] == 1 and now["machines"] == 1)
    out["scale_down"] = {"seconds": round(time.monotonic() - began, 1), "writes": scales(box.mgmt, mark, LAB1)}
    out["no_change"].append(_no_change(engine, box, "2 -> 1"))
    out["workers_at_end"] = _workers(box, lab1)
    out["md_spec_owners_at_end"] = managers(box.mgmt, LAB1)
