"""After the owner's takeover (journey.py), the autoscaler the program now runs scales the taken-over
lab1 (issue 40): from the two workers the owner ran up to the entry's maxSize, then down to its
minSize, with `pulumi preview --expect-no-changes` typed on the laptop after each. Only the
timings change from the lab's: the owner's entry leaves them at the autoscaler's defaults (a
worker unneeded for 10 minutes goes), which the box shortens through the entry's own keys, as an
owner would, with one `pulumi up` that changes the autoscaler's release alone.

    scaled = scaling.up_and_down(lab)
"""

from __future__ import annotations

import time
from typing import Any

from e2e.box.takeover.owners_lab import OwnersLab
from e2e.box.workload import lab1_sites
from e2e.box.workload.lab1_reads import DEMAND, LAB1, demand, get, scales, until

# The shipped Pulumi.lab.yaml's lab1 bounds.
BOUNDS = lab1_sites.declared("lab")["workers"]
MIN_SIZE, MAX_SIZE = BOUNDS["minSize"], BOUNDS["maxSize"]
TIMINGS = {"scanInterval": "2s", "scaleDownUnneededTime": "10s", "scaleDownDelayAfterAdd": "5s"}
BOUND_SECONDS = 300.0


def workers(lab: OwnersLab) -> dict[str, Any]:
    """The MachineDeployment's count, the workers' Machines, and lab1's worker Nodes that are Ready."""
    deployment = get(lab.box.cluster, "machinedeployment", LAB1.workers) or {}
    machines = (get(lab.box.cluster, "machines", selector=LAB1.workers_selector) or {}).get("items", [])
    nodes = (get(lab.box.cluster, "nodes", namespace="", kubeconfig=lab.lab1_kubeconfig) or {}).get("items", [])
    ready = [
        node
        for node in nodes
        if "node-role.kubernetes.io/control-plane" not in node["metadata"].get("labels", {})
        and any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
    ]
    return {
        "replicas": deployment.get("spec", {}).get("replicas"),
        "machines": len(machines),
        "ready_workers": len(ready),
    }


def _scaled_to(lab: OwnersLab, count: int, what: str) -> dict[str, Any]:
    """Waits until lab1 runs `count` workers, then types the zero-change preview."""
    mark, began = len(lab.box.cluster.audit()), time.monotonic()
    until(
        what,
        lambda: workers(lab) == {"replicas": count, "machines": count, "ready_workers": count},
        bound=BOUND_SECONDS,
    )
    return {
        "seconds": round(time.monotonic() - began, 1),
        "writes": scales(lab.box.cluster, mark, LAB1),
        "no_changes": lab.laptop("pulumi preview --stack lab --expect-no-changes"),
    }


def up_and_down(lab: OwnersLab) -> dict[str, Any]:
    """maxSize demand pods, each wanting more than half a worker's CPU: the owner's two workers take
    two, the third is pending until a third worker runs. Then the box's timings, and no demand."""
    sizing = lab.made["settings_from_live"]["workers"]
    cpu = f"{sizing['sockets'] * sizing['cores'] * 600}m"
    out: dict[str, Any] = {"before": workers(lab)}
    demand(lab.box.cluster, lab.lab1_kubeconfig, MAX_SIZE, {"cpu": cpu})
    out["up"] = _scaled_to(lab, MAX_SIZE, f"lab1 scaled up to maxSize {MAX_SIZE}")
    out["timings"] = [
        lab.laptop(f"pulumi config set --path 'workloadClusters[0].autoscaler.{key}' {value}")
        for key, value in TIMINGS.items()
    ]
    out["timings_up"] = lab.laptop("pulumi up --stack lab --yes --skip-preview")
    lab.box.cluster.kubectl_as(lab.lab1_kubeconfig, "delete", "deployment", DEMAND, "-n", "default").check_returncode()
    out["down"] = _scaled_to(lab, MIN_SIZE, f"lab1 scaled down to minSize {MIN_SIZE}")
    return out
