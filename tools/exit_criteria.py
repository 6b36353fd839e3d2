"""Phase 1's exit criteria proven on the lab as it runs: scale-from-zero, scale-up 1->3 and
scale-down to 0 of a workload cluster's workers, by its own cluster-autoscaler, timed.

    make exit-criteria CLUSTER=lab1
    .venv/bin/python -m tools.exit_criteria --cluster default/lab1 [--kubeconfig FILE] [--workload-kubeconfig FILE]
        [--report-dir DIR] [--repeat N] [--margin SECONDS] [--poll SECONDS]
        [--proxmox-endpoint URL --proxmox-token-file FILE [--proxmox-insecure]]

It reads first, and starts only with all of it (each lack named, exit 2, nothing made): the
management cluster through `--kubeconfig` (default ~/.kube/lab-mgmt.kubeconfig), the workload
cluster through the kubeconfig Cluster API keeps for it (or `--workload-kubeconfig`), the workers'
MachineDeployment with min-size 0, max-size 3 or more and both its cpu and memory capacity
annotations (the clusterapi provider scales from zero only with both), and the autoscaler that
discovers the cluster, Ready, with the flags it runs with. Whatever would keep a worker from going
at 0 is named in the autoscaler's own rule order (cluster-autoscaler 1.35.2,
simulator/drainability/rules/rules.go, under that autoscaler's `--skip-nodes-with-*` flags), each
with the kubectl line that shows it, and the run stops there (exit 2): it never evicts anything.
So is each VM of the workers' on Proxmox VE (when a token is given to read them) that no
ProxmoxMachine holds, which would stay at 0: it never destroys anything either.

Then, in a namespace of its own, the workers go to 0 if some run, the autoscaler's pod is
restarted (deleted, its Deployment Ready again: nothing the stack declares changes) so that it has
no template cached from a real worker and scale-from-zero comes from the annotations alone, and a
demand Job whose pods each ask for most of a worker's cpu (so that N pods need N workers) goes
0 -> 1, 1 -> 3 and 3 -> 0, each step waited on within a bound made of the autoscaler's own timings
(its flags, or the MachineDeployment's `autoscaling-options-*` annotations) and `--margin`. Each
step ends when the MachineDeployment's spec and status, each Machine Running with its Node Ready and
untainted, the ProxmoxMachines, the workers' VMs on Proxmox VE when a token is given to read them,
and the demand's pods all stand at the target (at 0: no worker Node at all, no ProxmoxMachine, no
IPAddress and no VM of the workers), without ever going above it; the new worker's capacity must
match the annotations, and the scale-down must not start before `scale-down-unneeded-time`. The
Job ends by itself (`activeDeadlineSeconds`) should this command die. `--repeat N` runs the three
N times, with the min/median/max of each.

The report, written in every case and before anything is removed: each criterion, the timeline as
a table, JSON and a picture (SVG), the versions (autoscaler, Kubernetes, Cluster API, CAPMOX, IPAM,
this program's commit), the autoscaler's events and status ConfigMap, and its log when something
failed, in `--report-dir` (default ~/lab-mgmt-exit-criteria/<time>). Ctrl-C, SIGTERM and a closed
terminal (SIGHUP) stop the run the same way; then the namespace is removed if it is the command's
(never one of that name that is not) and the removal checked. Exit 0 all passed, 1 a criterion
failed, 2 refused before anything was made, 3 interrupted or something could not be removed.
Nothing of the stack's is changed: `pulumi preview --expect-no-changes` passes afterwards
(docs/operations.md, "Phase 1's exit criteria").
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from tools import scaling_picture, scaling_status
from tools.scaling_lab import (
    CONTROL_PLANE_ROLE,
    DEPLOYMENT_NAME_LABEL,
    GROUP_OPTIONS,
    Autoscaler,
    Kubectl,
    KubectlError,
    NodeGroup,
    Proxmox,
    RefusedError,
    arguments,
    autoscaler,
    node_groups,
    quantity,
    reached,
    ready,
    seconds,
    worker,
    workload_kubeconfig,
)

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "lab-mgmt-exit-criteria"
MADE_BY = {"app.kubernetes.io/managed-by": "lab-mgmt-exit-criteria"}
DEMAND = "demand"
# Each demand pod asks for this share of a worker's cpu: one fits a worker beside its DaemonSets
# (Cilium's agent asks 100m), two never do.
SHARE_OF_CPU = 0.7
DEMAND_MEMORY = "64Mi"
TOP = 3
FROM_ZERO, SCALE_DOWN = "scale-from-zero", "scale-down to 0"
CRITERIA = ((FROM_ZERO, 1), (f"scale-up 1->{TOP}", TOP), (SCALE_DOWN, 0))
PASSED, FAILED, REFUSED, INTERRUPTED = 0, 1, 2, 3
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# A VM's Node reports the memory its kernel leaves, a few percent below what the VM was given
# (and the annotation says); more apart than this, the autoscaler plans with a worker that is not.
MEMORY_TOLERANCE = 0.1
# How long the removal of the namespace may take: its pods may sit on a worker being removed.
CLEANUP_SECONDS = 300.0
# The autoscaler's pod deleted and its Deployment Ready again: an image already on the node.
RESTART_SECONDS = 180.0
# The demand Job outlives the bounds of its two steps up by the reads between and after them.
JOB_SLACK_SECONDS = 60.0
# What keeps a pod where it is in the autoscaler's drainability rules.
MIRROR = "kubernetes.io/config.mirror"
DAEMONSET_POD = "cluster-autoscaler.kubernetes.io/daemonset-pod"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
SAFE_LOCAL_VOLUMES = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
REPLICATED_KINDS = frozenset({"ReplicationController", "Job", "ReplicaSet", "StatefulSet"})
# The management cluster's kinds each sample counts, named in full: a short name can be another
# API group's.
CAPI_KINDS = (
    "machinedeployments.cluster.x-k8s.io",
    "machines.cluster.x-k8s.io",
    "proxmoxmachines.infrastructure.cluster.x-k8s.io",
    "ipaddresses.ipam.cluster.x-k8s.io",
)
# The controllers whose versions the report keeps, by a part of their image's name.
COMPONENTS = {
    "cluster-api": "cluster-api-controller",
    "capmox": "cluster-api-provider-proxmox",
    "ipam": "ipam-in-cluster",
}
# The names Cluster API gives a MachineDeployment's machines, and CAPMOX their VMs: its MachineSet's,
# `<deployment>-<random>` (cluster-api v1.12 machinedeployment_sync.go computeNewMachineSetName),
# then `-<random>` (machineset_controller.go computeDesiredMachine's default template), five
# characters of apimachinery's util/rand each.
MACHINE_SUFFIX = r"-[a-z0-9]{5}-[a-z0-9]{5}"
T = TypeVar("T")


class InterruptError(Exception):
    """A signal (Ctrl-C, SIGTERM, a closed terminal) stopped the run."""


def say(*lines: str, err: bool = False) -> None:
    """Printed, unless the terminal is gone (SIGHUP): the run goes on to its report and cleanup."""
    with contextlib.suppress(OSError):
        print(*lines, sep="\n", file=sys.stderr if err else sys.stdout, flush=True)


@dataclass(frozen=True)
class Lab:
    """What the run needs, read and checked before anything is made."""

    mgmt: Kubectl
    workload: Kubectl
    group: NodeGroup
    scaler: Autoscaler
    millicores: int
    margin: float
    proxmox: Proxmox | None = None

    def timing(self, flag: str) -> float:
        """The autoscaler's timing in seconds for this node group: its annotation where the
        clusterapi provider reads one (and it parses), else the autoscaler's flag."""
        option = self.group.options.get(GROUP_OPTIONS.get(flag, ""))
        try:
            return seconds(option) if option else self.scaler.timings[flag]
        except ValueError:
            return self.scaler.timings[flag]

    def bound(self, replicas: int) -> float:
        """Seconds a step to `replicas` workers may take: up, the scans and the provision time the
        autoscaler allows a node; down, the delay after a scale-up, the unneeded time and scans."""
        scans = 3 * self.timing("scan-interval") + self.margin
        if replicas:
            return self.timing("max-node-provision-time") + scans
        return self.timing("scale-down-delay-after-add") + self.timing("scale-down-unneeded-time") + scans

    def first_bound(self) -> float:
        """Seconds the workers running at the start may take to go: a step down, and the time the
        autoscaler leaves a worker it found it could not remove (a pod that kept it, the blocker
        the owner has just taken away) before it looks at it again."""
        return self.bound(0) + self.timing("unremovable-node-recheck-timeout")


def read_lab(
    mgmt: Kubectl, workload: Kubectl, namespace: str, cluster: str, margin: float, *, proxmox: Proxmox | None = None
) -> Lab:
    """The lab as the run needs it, or RefusedError naming everything it lacks (kubectl's or
    Proxmox VE's own words where one does not answer)."""
    problems = []
    groups = node_groups(mgmt, namespace, cluster)
    if len(groups) != 1:
        names = ", ".join(g.name for g in groups) or "none"
        raise RefusedError(
            f"{namespace}/{cluster}: one MachineDeployment with node-group min/max annotations wanted, found {names}"
        )
    group = groups[0]
    if group.min_size != 0:
        problems.append(
            f"{group.name}: min-size is {group.min_size}, so scale-from-zero cannot happen: set the entry's "
            "workers.minSize to 0 and `pulumi up` first"
        )
    if group.max_size < TOP:
        problems.append(f"{group.name}: max-size is {group.max_size}; 1->{TOP} needs {TOP} (workers.maxSize)")
    for resource in ("cpu", "memory"):
        try:
            readable = quantity(group.capacity.get(resource, "")) > 0
        except ValueError:
            readable = False
        if not readable:
            problems.append(
                f"{group.name}: no {resource} capacity annotation the autoscaler can read, and it scales from zero "
                f"only with cpu and memory (workers.capacity.{resource})"
            )
    scaler = autoscaler(mgmt, namespace, cluster)
    if scaler is None:
        problems.append(f"no cluster-autoscaler on the management cluster discovers {namespace}/{cluster}")
    elif scaler.ready == 0:
        problems.append(f"the autoscaler {scaler.namespace}/{scaler.name} has no Ready replica")
    # Every kind a sample reads, so that a missing one refuses now rather than fails a criterion.
    listed = mgmt.items(",".join(CAPI_KINDS), "-n", namespace)
    workload.items("nodes")
    if proxmox is not None:
        problems += strays(group.name, listed, proxmox.vms())
    if problems or scaler is None:
        raise RefusedError("\n".join(problems))
    millicores = int(quantity(group.capacity["cpu"]) * 1000 * SHARE_OF_CPU)
    return Lab(mgmt, workload, group, scaler, millicores, margin, proxmox)


def blockers(lab: Lab, now: datetime) -> list[str]:
    """What keeps a worker from going at 0, each with the kubectl line that shows it: a worker
    annotated not to be scaled down, and each pod the autoscaler would not move or that no node
    left at 0 would take (the command evicts nothing of the owner's, and names them instead)."""
    nodes = lab.workload.items("nodes")
    workers = {node["metadata"]["name"]: node for node in nodes if worker(node)}
    control_planes = [node for node in nodes if not worker(node)]
    drain = Drain(lab.scaler, lab.workload.items("poddisruptionbudgets", "--all-namespaces"), control_planes, now)
    found = [
        f"node {name}: annotated {SCALE_DOWN_DISABLED}=true, which the autoscaler never scales down\n"
        f"    {lab.workload.line('get', 'node', name, '-o', 'jsonpath={.metadata.annotations}')}"
        for name, node in workers.items()
        if (node["metadata"].get("annotations") or {}).get(SCALE_DOWN_DISABLED) == "true"
    ]
    for pod in lab.workload.items("pods", "--all-namespaces"):
        meta, on = pod["metadata"], pod["spec"].get("nodeName")
        if on not in workers or meta["namespace"] == NAMESPACE:
            continue
        kept = why_it_stays(pod, drain)
        if kept:
            why, shows = kept
            found.append(f"{meta['namespace']}/{meta['name']} on {on}: {why}\n    {lab.workload.line(*shows)}")
    return found


def strays(deployment: str, listed: list[dict[str, Any]], vms: list[dict[str, Any]]) -> list[str]:
    """Of Proxmox VE's `vms`, the workers' that no ProxmoxMachine of `listed` holds, each with the
    lines that show and remove it on the node: named as the MachineDeployment `deployment`'s
    machines, with an id that no ProxmoxMachine recorded, and no ProxmoxMachine of that name still
    cloning. CAPMOX leaves one where a clone's answer was lost: it records the VM's id only from
    that answer, and clones again under a new id (v0.9.0 internal/service/vmservice/vm.go
    reconcileVirtualMachine). At 0 such a VM would stay, and fail the last criterion after the
    whole run."""
    named = re.compile(re.escape(deployment) + MACHINE_SUFFIX)
    held = [i for i in listed if i["kind"] == "ProxmoxMachine"]
    ids = {(i.get("spec") or {}).get("virtualMachineID") for i in held}
    cloning = {i["metadata"]["name"] for i in held if (i.get("spec") or {}).get("virtualMachineID") is None}
    return [
        f"VM {vm['vmid']} {vm['name']} on {vm.get('node', 'its node')} ({vm.get('status', 'status unknown')}): "
        "a worker's VM that no ProxmoxMachine holds, which would still be there at 0\n"
        f"    on the node: qm config {vm['vmid']}   and once it is no one's: qm destroy {vm['vmid']} --purge"
        for vm in vms
        if not vm.get("template")
        and named.fullmatch(str(vm.get("name", "")))
        and vm.get("vmid") not in ids
        and vm["name"] not in cloning
    ]


@dataclass(frozen=True)
class Drain:
    """What the autoscaler's drainability rules read beside the pod."""

    scaler: Autoscaler
    budgets: list[dict[str, Any]]
    control_planes: list[dict[str, Any]]
    now: datetime

    def budgets_of(self, meta: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            b
            for b in self.budgets
            if b["metadata"]["namespace"] == meta["namespace"] and selects(b["spec"].get("selector"), meta)
        ]


Kept = tuple[str, tuple[str, ...]]
"""Why a pod keeps its worker, and the kubectl `get` that shows it."""
MOVES: Kept = ("", ())
"""A rule's verdict that the pod goes, which ends the rules as a reason would."""


def _shown(meta: dict[str, Any], path: str) -> tuple[str, ...]:
    return ("get", "pod", "-n", meta["namespace"], meta["name"], "-o", f"jsonpath={{{path}}}")


def _controller(meta: dict[str, Any]) -> dict[str, Any] | None:
    return next((ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")), None)


def _skipped(pod: dict[str, Any], drain: Drain) -> Kept | None:
    """Mirror pods (the kubelet's) and pods whose deletion began are no reason either way."""
    meta = pod["metadata"]
    return MOVES if MIRROR in (meta.get("annotations") or {}) or meta.get("deletionTimestamp") else None


def _drained(pod: dict[str, Any], drain: Drain) -> Kept | None:
    """A DaemonSet's pod, one annotated safe to evict, and a terminal pod go with the node."""
    annotations = pod["metadata"].get("annotations") or {}
    daemon = (_controller(pod["metadata"]) or {}).get("kind") == "DaemonSet" or annotations.get(DAEMONSET_POD) == "true"
    return MOVES if daemon or annotations.get(SAFE_TO_EVICT) == "true" or terminal(pod) else None


def _replicated(pod: dict[str, Any], drain: Drain) -> Kept | None:
    meta = pod["metadata"]
    controller = _controller(meta)
    if controller is None:
        return (
            "no controller makes it again elsewhere (not replicated), so the autoscaler does not remove its node",
            _shown(meta, ".metadata.ownerReferences"),
        )
    if drain.scaler.skips("custom-controller-pods") and controller["kind"] not in REPLICATED_KINDS:
        return (
            f"its controller is a {controller['kind']}, which the autoscaler does not know to make it again "
            "(--skip-nodes-with-custom-controller-pods=true)",
            _shown(meta, ".metadata.ownerReferences"),
        )
    return None


def _system(pod: dict[str, Any], drain: Drain) -> Kept | None:
    """A kube-system pod with no budget, under --skip-nodes-with-system-pods, until it is older
    than --blocking-system-pod-distruption-timeout; from then on it goes."""
    meta = pod["metadata"]
    if meta["namespace"] != "kube-system" or not drain.scaler.skips("system-pods") or drain.budgets_of(meta):
        return None
    timeout = seconds(drain.scaler.flag("blocking-system-pod-distruption-timeout"))
    created = datetime.fromisoformat(meta.get("creationTimestamp", drain.now.isoformat()).replace("Z", "+00:00"))
    if (drain.now - created).total_seconds() > timeout:
        return MOVES
    return (
        "a kube-system pod with no PodDisruptionBudget, and the autoscaler runs with "
        f"--skip-nodes-with-system-pods=true (it moves one only {timeout:g} s after it started)",
        ("get", "poddisruptionbudgets", "-n", "kube-system"),
    )


def _not_safe(pod: dict[str, Any], drain: Drain) -> Kept | None:
    meta = pod["metadata"]
    if (meta.get("annotations") or {}).get(SAFE_TO_EVICT) == "false":
        return (f'annotated {SAFE_TO_EVICT}: "false"', _shown(meta, ".metadata.annotations"))
    return None


def _local_storage(pod: dict[str, Any], drain: Drain) -> Kept | None:
    local = local_volumes(pod)
    if local and drain.scaler.skips("local-storage"):
        return (
            f"local storage ({', '.join(local)}), and the autoscaler runs with --skip-nodes-with-local-storage=true",
            _shown(pod["metadata"], ".spec.volumes"),
        )
    return None


def _budget(pod: dict[str, Any], drain: Drain) -> Kept | None:
    meta = pod["metadata"]
    for budget in drain.budgets_of(meta):
        if int((budget.get("status") or {}).get("disruptionsAllowed") or 0) < 1:
            name = budget["metadata"]["name"]
            return (
                f"its PodDisruptionBudget {name} allows no disruption",
                ("get", "poddisruptionbudget", "-n", meta["namespace"], name),
            )
    return None


def _control_plane(pod: dict[str, Any], drain: Drain) -> Kept | None:
    """Past the autoscaler's rules: at 0 only the control plane is left to take the pod."""
    if any(fits(pod, node) for node in drain.control_planes):
        return None
    return (
        "at 0 workers no node would take it (it does not tolerate the control plane's taint, or its "
        "nodeSelector or required node affinity asks for a worker)",
        _shown(pod["metadata"], ".spec.tolerations"),
    )


# cluster-autoscaler 1.35.2's rules in their order (simulator/drainability/rules/rules.go:
# mirror, long-terminating, DaemonSet, safe-to-evict, terminal; replicated, system, not safe to
# evict, local storage, PDB), then what only a scale-down to 0 asks.
RULES: tuple[Callable[[dict[str, Any], Drain], Kept | None], ...] = (
    _skipped,
    _drained,
    _replicated,
    _system,
    _not_safe,
    _local_storage,
    _budget,
    _control_plane,
)


def why_it_stays(pod: dict[str, Any], drain: Drain) -> Kept | None:
    """Why the autoscaler would keep a pod's worker, and the kubectl `get` that shows it; None
    where the pod goes. The first rule that decides wins, as in the autoscaler."""
    for rule in RULES:
        verdict = rule(pod, drain)
        if verdict is not None:
            return verdict if verdict != MOVES else None
    return None


def terminal(pod: dict[str, Any]) -> bool:
    """A pod that will never run again (utils/drain/drain.go, IsPodTerminal)."""
    phase, policy = (pod.get("status") or {}).get("phase"), pod["spec"].get("restartPolicy", "Always")
    return phase == "Failed" or (phase == "Succeeded" and policy in ("Never", "OnFailure"))


def local_volumes(pod: dict[str, Any]) -> list[str]:
    """Its hostPath and disk-backed emptyDir volumes not named safe to evict."""
    safe = set(((pod["metadata"].get("annotations") or {}).get(SAFE_LOCAL_VOLUMES) or "").split(","))
    return [
        volume["name"]
        for volume in pod["spec"].get("volumes") or []
        if volume["name"] not in safe
        and ("hostPath" in volume or ("emptyDir" in volume and (volume["emptyDir"] or {}).get("medium") != "Memory"))
    ]


def selects(selector: dict[str, Any] | None, meta: dict[str, Any]) -> bool:
    """Whether a label selector selects an object (an empty one selects all, none selects none)."""
    if selector is None:
        return False
    labels = meta.get("labels") or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_holds(expression, labels) for expression in selector.get("matchExpressions") or [])


def fits(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether the pod tolerates every taint of the node that keeps pods off, and its nodeSelector
    and required node affinity match the node, as the scheduler's filters that the autoscaler's
    simulation runs do (a pod made to run on workers alone keeps its worker)."""
    spec, labels = pod["spec"], node["metadata"].get("labels") or {}
    if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required and not any(_term_matches(term, node) for term in required.get("nodeSelectorTerms") or []):
        return False
    tolerations = spec.get("tolerations") or []
    return all(
        any(tolerates(toleration, taint) for toleration in tolerations)
        for taint in node["spec"].get("taints") or []
        if taint.get("effect") in ("NoSchedule", "NoExecute")
    )


def _term_matches(term: dict[str, Any], node: dict[str, Any]) -> bool:
    """A nodeSelectorTerm: every expression on the node's labels and every field (metadata.name
    alone) holds; a term with neither matches no node (k8s.io/component-helpers nodeaffinity)."""
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = node["metadata"].get("labels") or {}
    named = {"metadata.name": node["metadata"]["name"]}
    return all(_holds(e, labels) for e in expressions) and all(_holds(f, named) for f in fields)


def _holds(requirement: dict[str, Any], values: dict[str, str]) -> bool:
    """A label selector's requirement, or a node selector's (which adds Gt and Lt), on `values`."""
    key, operator, wanted = requirement["key"], requirement["operator"], requirement.get("values") or []
    if operator in ("Gt", "Lt"):
        if key not in values or not values[key].lstrip("-").isdigit():
            return False
        return int(values[key]) > int(wanted[0]) if operator == "Gt" else int(values[key]) < int(wanted[0])
    return {
        "In": key in values and values[key] in wanted,
        "NotIn": key not in values or values[key] not in wanted,
        "Exists": key in values,
        "DoesNotExist": key not in values,
    }[operator]


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """The scheduler's match of a toleration to a taint: the effect if given, then the key (any
    with Exists and no key), then the value unless Exists."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or bool(toleration["key"] == taint["key"])
    return bool(toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get("value", ""))


@dataclass
class Timeline:
    """Each sampled count as it changed, [seconds, key, value], from `began`; and every worker
    machine seen (with its VM's id once CAPMOX has one), whose IP addresses and VM must go with it."""

    began: float = field(default_factory=time.monotonic)
    wall: float = field(default_factory=time.time)
    """When it began, in seconds since the epoch: the report's times are counted from it."""
    rows: list[list[Any]] = field(default_factory=list)
    last: dict[str, int] = field(default_factory=dict)
    seen: dict[str, int | None] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    """The worker Nodes at the last sample, each with what is wrong with it."""
    vms: list[str] = field(default_factory=list)
    """The workers' VMs on Proxmox VE at the last sample (when it is read), by id and name."""

    def sample(self, lab: Lab) -> None:
        """One sample of `lab`, stamped when it began: the first thing it reads is the
        MachineDeployment, so a write to its count comes before its stamp."""
        stamp = self.now()
        counts, self.nodes, self.vms = sample(lab, self.seen)
        self.add(stamp, counts)

    def add(self, stamp: float, sample: dict[str, int]) -> None:
        changed = {key: value for key, value in sample.items() if self.last.get(key) != value}
        self.rows += [[stamp, key, value] for key, value in changed.items()]
        self.last = dict(sample)
        if changed:
            say(f"{stamp:7.1f}s  " + "  ".join(f"{key}={value}" for key, value in sample.items()))

    def now(self) -> float:
        return round(time.monotonic() - self.began, 1)

    def first_drop(self, key: str, since: int, below: int) -> float | None:
        """When `key` first went below `below` in the rows from `since`."""
        return next((stamp for stamp, name, value in self.rows[since:] if name == key and value < below), None)


def sample(lab: Lab, seen: dict[str, int | None]) -> tuple[dict[str, int], list[str], list[str]]:
    """The counts, in two reads, one of each cluster (kubectl lists several kinds at once), and a
    third of Proxmox VE's VMs if it is read; the worker Nodes with what is wrong with each; and the
    workers' VMs. `seen` gains the worker machines listed, with their VMs' ids."""
    group = lab.group
    listed = lab.mgmt.items(",".join(CAPI_KINDS), "-n", group.namespace)

    def of(kind: str) -> list[dict[str, Any]]:
        return [
            i
            for i in listed
            if i["kind"] == kind and (i["metadata"].get("labels") or {}).get(DEPLOYMENT_NAME_LABEL) == group.name
        ]

    [deployment] = [i for i in listed if i["kind"] == "MachineDeployment" and i["metadata"]["name"] == group.name]
    machines, proxmox = of("Machine"), of("ProxmoxMachine")
    for item in (*machines, *proxmox):
        vmid = (item.get("spec") or {}).get("virtualMachineID") if item["kind"] == "ProxmoxMachine" else None
        seen[item["metadata"]["name"]] = vmid or seen.get(item["metadata"]["name"])
    # CAPMOX names a machine's IPAddressClaim, and the IPAM provider its IPAddress, after the machine.
    addresses = [
        i
        for i in listed
        if i["kind"] == "IPAddress" and any(i["metadata"]["name"].startswith(f"{name}-") for name in seen)
    ]
    found = lab.workload.items("nodes,pods", "-n", NAMESPACE)
    # A demand pod that failed (evicted, its node gone) stays as a record beside its replacement.
    pods = [
        i
        for i in found
        if i["kind"] == "Pod"
        and (i["metadata"].get("labels") or {}).get("app") == DEMAND
        and (i.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    nodes = {i["metadata"]["name"]: i for i in found if i["kind"] == "Node" and worker(i)}
    wrong = {name: what_is_wrong(node) for name, node in nodes.items()}
    status = deployment.get("status") or {}
    linked = [
        m
        for m in machines
        if (m.get("status") or {}).get("phase") == "Running"
        and ((m["status"].get("nodeRef") or {}).get("name") in nodes)
        and not wrong[m["status"]["nodeRef"]["name"]]
    ]
    counts = {
        "unschedulable": len([p for p in pods if unschedulable(p)]),
        "running": len([p for p in pods if (p.get("status") or {}).get("phase") == "Running"]),
        "replicas": int(deployment["spec"].get("replicas") or 0),
        "status_replicas": int(status.get("replicas") or 0),
        "ready_replicas": int(status.get("readyReplicas") or 0),
        "machines": len(machines),
        "machines_running": len(linked),
        "proxmox_machines": len(proxmox),
        "ip_addresses": len(addresses),
        "nodes": len(nodes),
        "workers": len([name for name in nodes if not wrong[name]]),
        "pods": len(pods),
    }
    vms = []
    if lab.proxmox is not None:
        # A worker's VM by the id CAPMOX recorded, or by its name (the machine's) where a clone
        # failed before CAPMOX recorded one.
        vms = [
            f"{vm['vmid']} {vm.get('name', '')}".strip()
            for vm in lab.proxmox.vms()
            if vm.get("vmid") in seen.values() or vm.get("name") in seen
        ]
        counts["vms"] = len(vms)
    return counts, [f"{name} ({wrong[name]})" if wrong[name] else name for name in sorted(nodes)], vms


def what_is_wrong(node: dict[str, Any]) -> str:
    """Why a worker Node cannot take the demand: not Ready, cordoned, or tainted; "" for none."""
    taints = [t["key"] for t in node["spec"].get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
    wrong = [] if ready(node) else ["NotReady"]
    wrong += ["cordoned"] if node["spec"].get("unschedulable") else []
    wrong += [f"tainted {key}" for key in taints]
    return ", ".join(wrong)


def unschedulable(pod: dict[str, Any]) -> bool:
    """Pending because no node has room for it, which is what the autoscaler acts on (not a pod
    whose image is still being pulled)."""
    return any(
        c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def short_of(counts: dict[str, int], target: int) -> list[str]:
    """What still differs from `target` workers, each as `count=value`; empty once there. The
    MachineDeployment's readyReplicas is the timeline's, not the verdict's: Cluster API's Machine
    Ready sums up conditions beyond the worker (a MachineHealthCheck's, readiness gates), while
    machines_running asks what the criteria do, each Machine Running with its Node Ready."""
    wanted = {key: target for key in counts if key not in ("unschedulable", "ip_addresses", "ready_replicas")}
    wanted["unschedulable"] = 0
    if target == 0:
        wanted["ip_addresses"] = 0
    return [f"{key}={counts[key]}" for key, value in wanted.items() if counts[key] != value]


def retried(action: Callable[[], T], deadline: float, poll: float) -> T:
    """`action`, asked again after each transient error until `deadline` (monotonic) passes."""
    while True:
        try:
            return action()
        except KubectlError as error:
            if not error.transient or time.monotonic() > deadline:
                raise
            say(f"  {error}; again in {poll:g} s")
            time.sleep(poll)


def wait(lab: Lab, timeline: Timeline, target: int, *, cap: int, bound: float, poll: float, deadline: float) -> str:
    """Samples until the workers stand at `target`, by `deadline` (monotonic; `bound` seconds from
    the step's start), through transient errors; "" when they did without the count going above
    `cap`, else why not."""
    overshoot, missing = 0, ["no answer yet"]
    while True:
        try:
            timeline.sample(lab)
        except KubectlError as error:
            if not error.transient:
                return str(error)
            missing = [f"the last read failed: {error}"]
            say(f"  {error}; again in {poll:g} s")
        else:
            overshoot = max(overshoot, timeline.last["replicas"])
            missing = short_of(timeline.last, target)
            if not missing:
                break
        if time.monotonic() > deadline:
            nodes = f"; worker Nodes: {', '.join(timeline.nodes)}" if timeline.nodes else ""
            vms = f"; the workers' VMs: {', '.join(timeline.vms)}" if len(timeline.vms) != target else ""
            return f"not at {target} workers within {bound:.0f} s: {', '.join(missing)}{nodes}{vms}"
        time.sleep(poll)
    if overshoot > cap:
        return f"the MachineDeployment went to {overshoot} replicas, above this step's {cap}"
    return ""


def demand_job(lab: Lab, name: str, parallelism: int, lifetime: float) -> dict[str, Any]:
    """The demand: a Job whose `parallelism` pods each fit a worker and never the control plane,
    and that ends by itself after `lifetime` seconds should the command die before removing it."""
    container = {
        "name": "demand",
        "image": "registry.k8s.io/pause:3.10",
        "imagePullPolicy": "IfNotPresent",
        "resources": {"requests": {"cpu": f"{lab.millicores}m", "memory": DEMAND_MEMORY}},
    }
    never_the_control_plane = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": CONTROL_PLANE_ROLE, "operator": "DoesNotExist"}]}]
            }
        }
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": MADE_BY},
        "spec": {
            "parallelism": parallelism,
            "activeDeadlineSeconds": int(lifetime),
            "template": {
                "metadata": {"labels": {"app": DEMAND}},
                "spec": {
                    "containers": [container],
                    "affinity": never_the_control_plane,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }


@dataclass
class Record:
    """What the run did and found, for its report, whatever way it ends."""

    cluster: str
    folder: Path
    lab: Lab | None = None
    timeline: Timeline = field(default_factory=Timeline)
    results: list[dict[str, Any]] = field(default_factory=list)
    restarts: list[dict[str, Any]] = field(default_factory=list)
    capacity: list[dict[str, Any]] = field(default_factory=list)
    refused: str = ""
    stopped: str = ""
    """Why the run stopped short: a signal, or an error asking again did not cure."""
    interrupted: bool = False
    made: bool = False
    left: list[str] | None = None
    """What could not be removed (None: nothing was made to remove, or removal not reached)."""
    evidence: dict[str, Any] = field(default_factory=dict)
    run: int = 1
    """The repetition under way."""

    def unrun(self, reason: str) -> None:
        """This repetition's criteria not yet in the results, failed for `reason`."""
        done = {r["name"] for r in self.results if r["run"] == self.run}
        self.results += [
            {"name": name, "run": self.run, "passed": False, "reason": reason}
            for name, _ in CRITERIA
            if name not in done
        ]

    def code(self) -> int:
        if self.interrupted or self.left:
            return INTERRUPTED
        if self.refused:
            return REFUSED
        if self.stopped or not self.results or not all(r["passed"] for r in self.results):
            return FAILED
        return PASSED


def make_namespace(lab: Lab, record: Record, poll: float) -> None:
    """The run's namespace; one left by a run that was killed is removed first, anything else of
    that name refused, and never touched."""
    found = lab.workload.found("namespace", NAMESPACE)
    if found is not None and not ours(found):
        raise RefusedError(f"namespace {NAMESPACE} exists in the workload cluster and is not the command's")
    record.made = True
    deadline = time.monotonic() + CLEANUP_SECONDS
    if found is not None:
        say(f"namespace {NAMESPACE} left by a run that was stopped: removed first")
        retried(
            functools.partial(
                lab.workload.run,
                "delete",
                "namespace",
                NAMESPACE,
                "--ignore-not-found",
                "--wait=true",
                waits=CLEANUP_SECONDS,
            ),
            deadline,
            poll,
        )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": MADE_BY}}
    retried(functools.partial(lab.workload.run, "apply", "-f", "-", stdin=json.dumps(namespace)), deadline, poll)


def ours(namespace: dict[str, Any]) -> bool:
    return MADE_BY.items() <= (namespace["metadata"].get("labels") or {}).items()


def restart_autoscaler(lab: Lab, timeline: Timeline, poll: float) -> dict[str, Any]:
    """The autoscaler's pods deleted and its Deployment Ready again on new ones: a new process
    has no node template cached from a worker it saw, so the next scale-from-zero is planned
    from the capacity annotations. What the restart took, with `failed` saying why if it did not."""
    scaler, started = lab.scaler, timeline.now()
    if not scaler.selector:
        return {"started": started, "failed": "its Deployment selects its pods by no label: which to delete is unclear"}
    deadline = time.monotonic() + RESTART_SECONDS
    selector = ",".join(f"{key}={value}" for key, value in sorted(scaler.selector.items()))
    say(f"the autoscaler {scaler.namespace}/{scaler.name} restarted at 0, so that it has seen no worker")
    old = retried(lambda: lab.mgmt.items("pods", "-n", scaler.namespace, "-l", selector), deadline, poll)
    names = [pod["metadata"]["name"] for pod in old]
    if names:
        retried(
            lambda: lab.mgmt.run(
                "delete",
                "pod",
                "-n",
                scaler.namespace,
                *names,
                "--ignore-not-found",
                "--wait=true",
                waits=RESTART_SECONDS,
            ),
            deadline,
            poll,
        )
    record: dict[str, Any] = {"started": started, "deleted": names}
    while True:
        try:
            deployment = lab.mgmt.json("deployment", scaler.name, "-n", scaler.namespace)
            pods = lab.mgmt.items("pods", "-n", scaler.namespace, "-l", selector)
        except KubectlError as error:
            if not error.transient:
                return {**record, "failed": str(error)}
        else:
            wanted = int(deployment["spec"].get("replicas", 1))
            fresh = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] not in names and ready(p)]
            if len(fresh) >= wanted and int((deployment.get("status") or {}).get("readyReplicas") or 0) >= wanted:
                return {**record, "ready": fresh, "seconds": round(timeline.now() - started, 1)}
        if time.monotonic() > deadline:
            return {**record, "failed": f"its Deployment was not Ready on new pods within {RESTART_SECONDS:.0f} s"}
        time.sleep(poll)


def capacity_mismatch(lab: Lab) -> list[dict[str, Any]]:
    """The new worker's capacity against the annotations the autoscaler planned it from: each
    worker Node's cpu and memory, with `mismatch` naming what differs."""
    found = []
    for node in (n for n in lab.workload.items("nodes") if worker(n)):
        capacity = (node.get("status") or {}).get("capacity") or {}
        mismatch = []
        for resource in ("cpu", "memory"):
            annotated, has = quantity(lab.group.capacity[resource]), quantity(capacity.get(resource, "0"))
            tolerance = MEMORY_TOLERANCE if resource == "memory" else 0.001
            if abs(has - annotated) > tolerance * annotated:
                mismatch.append(
                    f"{node['metadata']['name']} has {resource} {capacity.get(resource)}, the annotation "
                    f"capacity.cluster-autoscaler.kubernetes.io/{resource} says {lab.group.capacity[resource]}"
                )
        found.append({"node": node["metadata"]["name"], "capacity": capacity, "mismatch": mismatch})
    return found


def criteria(lab: Lab, record: Record, run: int, poll: float) -> None:
    """Each criterion in turn into the record's results, until one fails: the workers brought to
    0 first, the autoscaler restarted there, then the demand at 1, 3 and 0."""
    timeline = record.timeline
    bound = lab.first_bound()
    retried(lambda: timeline.sample(lab), time.monotonic() + bound, poll)
    if short_of(timeline.last, 0):
        say("the workers go to 0 first (no demand)")
        reason = wait(
            lab, timeline, 0, cap=timeline.last["replicas"], bound=bound, poll=poll, deadline=time.monotonic() + bound
        )
        if reason:
            record.unrun(f"the workers never went to 0 first: {reason}")
            return
    restart = restart_autoscaler(lab, timeline, poll)
    record.restarts.append(restart)
    if "failed" in restart:
        record.unrun(f"the autoscaler was not back after its restart: {restart['failed']}")
        return
    job = f"{DEMAND}-{run}"
    lifetime = lab.bound(1) + lab.bound(TOP) + JOB_SLACK_SECONDS
    previous = 0
    for name, replicas in CRITERIA:
        if record.results[-1:] and record.results[-1]["run"] == run and not record.results[-1]["passed"]:
            record.unrun("not run: the criterion before it failed")
            return
        say(f"{name}: the demand at {replicas}")
        started, first, bound = timeline.now(), len(timeline.rows), lab.bound(replicas)
        deadline = time.monotonic() + bound
        # The Job made at its first step; its parallelism changed at the next (a Job's own field).
        if name == FROM_ZERO:
            write = functools.partial(
                lab.workload.run, "apply", "-f", "-", stdin=json.dumps(demand_job(lab, job, replicas, lifetime))
            )
        else:
            patch = json.dumps({"spec": {"parallelism": replicas}})
            write = functools.partial(
                lab.workload.run, "patch", "job", job, "-n", NAMESPACE, "--type=merge", "-p", patch
            )
        retried(write, deadline, poll)
        reason = wait(lab, timeline, replicas, cap=max(replicas, previous), bound=bound, poll=poll, deadline=deadline)
        seconds_taken = round(timeline.now() - started, 1)
        if not reason and name == FROM_ZERO:
            checked = retried(lambda: capacity_mismatch(lab), time.monotonic() + bound, poll)
            record.capacity += [{"run": run, **node} for node in checked]
            reason = "; ".join(m for node in checked for m in node["mismatch"])
        if not reason and name == SCALE_DOWN:
            dropped = timeline.first_drop("replicas", first, previous)
            unneeded = lab.timing("scale-down-unneeded-time")
            if dropped is not None and dropped - started < unneeded:
                reason = (
                    f"the scale-down began {dropped - started:.0f} s after the demand went, before "
                    f"scale-down-unneeded-time ({unneeded:g} s): other timings are in effect, or something else scaled"
                )
        record.results.append(
            {
                "name": name,
                "run": run,
                "passed": not reason,
                "started": started,
                "first_row": first,
                "seconds": seconds_taken,
                "bound": bound,
                "reason": reason,
            }
        )
        previous = replicas


def cleanup(lab: Lab, poll: float) -> list[str]:
    """The command's namespace removed (the demand with it), asked again through transient
    errors, and checked: what is left, named; never a namespace of that name not the command's."""
    deadline = time.monotonic() + CLEANUP_SECONDS

    def remove() -> dict[str, Any] | None:
        found = lab.workload.found("namespace", NAMESPACE)
        if found is not None and ours(found):
            lab.workload.run(
                "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", waits=CLEANUP_SECONDS
            )
            found = lab.workload.found("namespace", NAMESPACE)
        return found

    try:
        found = retried(remove, deadline, poll)
    except KubectlError as error:
        return [f"namespace {NAMESPACE} in the workload cluster, not removed: {error}"]
    if found is None or not ours(found):
        return []
    try:
        inside = lab.workload.items("jobs,pods", "-n", NAMESPACE)
    except KubectlError:
        inside = []
    what = ", ".join(f"{i['kind']}/{i['metadata']['name']}" for i in inside) or "nothing listed"
    return [
        f"namespace {NAMESPACE} in the workload cluster is still there ({what}): "
        f"{lab.workload.line('delete', 'namespace', NAMESPACE)}"
    ]


def evidence(record: Record, mgmt: Kubectl, workload: Kubectl, namespace: str, name: str) -> None:
    """What the report keeps beside the counts: the versions, the autoscaler's status ConfigMap
    and its events since the run began (events expire within hours), and on failure its log.
    Each read that fails is named instead: the report is written whatever answers."""
    began = datetime.fromtimestamp(record.timeline.wall, UTC)

    def kept(key: str, read: Callable[[], Any]) -> None:
        try:
            record.evidence[key] = read()
        except (KubectlError, RefusedError, subprocess.SubprocessError, OSError, ValueError, KeyError) as error:
            record.evidence[key] = f"could not be read: {error}"

    kept("versions", lambda: versions(record.lab, mgmt, workload))
    if record.lab is None:
        return
    since = began.strftime("%Y-%m-%dT%H:%M:%SZ")

    def status() -> dict[str, Any]:
        found = scaling_status.status(mgmt, workload, namespace, name, latest=None)
        return {"status": found.status, "events": [e for e in found.events if e["at"] >= since]}

    kept("autoscaler", status)
    if record.code() != PASSED and record.made:
        scaler = record.lab.scaler
        kept(
            "log",
            lambda: (
                mgmt.run(
                    "logs",
                    "-n",
                    scaler.namespace,
                    f"deployment/{scaler.name}",
                    "--all-containers",
                    f"--since-time={since}",
                ).stdout
            ),
        )


def versions(lab: Lab | None, mgmt: Kubectl, workload: Kubectl) -> dict[str, Any]:
    """The autoscaler's image, both clusters' Kubernetes, Cluster API's, CAPMOX's and IPAM's
    images, and this program's commit (`+dirty` with changes not committed)."""
    commit = subprocess.run(  # noqa: S603 - git in this repository
        ["git", "-C", str(REPO), "describe", "--always", "--dirty=+dirty", "--abbrev=40"],  # noqa: S607
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    images = [
        container.get("image", "")
        for deployment in mgmt.items("deployments", "--all-namespaces")
        for container in deployment["spec"]["template"]["spec"]["containers"]
    ]

    def kubernetes(kubectl: Kubectl) -> str:
        return str(json.loads(kubectl.run("version", "-o", "json").stdout)["serverVersion"]["gitVersion"])

    return {
        "autoscaler": lab.scaler.image if lab else "",
        "kubernetes": {"management": kubernetes(mgmt), "workload": kubernetes(workload)},
        **{component: sorted({i for i in images if part in i}) for component, part in COMPONENTS.items()},
        "lab-mgmt": commit.stdout.strip() or commit.stderr.strip(),
    }


def summary(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per criterion, the seconds of its passed runs: min, median and max."""
    found = {}
    for name, _ in CRITERIA:
        taken = [r["seconds"] for r in results if r["name"] == name and r["passed"]]
        if taken:
            found[name] = {"runs": len(taken), "min": min(taken), "median": statistics.median(taken), "max": max(taken)}
    return found


def milestones(timeline: list[list[Any]], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first change of each value after each criterion's demand was set: the autoscaler's
    decision (replicas), a Machine made or deleted, Running with its Node, a Node Ready or gone, a
    pod unschedulable or Running; seconds from the criterion's start."""
    ran = [result for result in results if "first_row" in result]
    found = []
    for index, result in enumerate(ran):
        seen: set[str] = set()
        until = ran[index + 1]["first_row"] if index + 1 < len(ran) else None
        for stamp, key, value in timeline[result["first_row"] : until]:
            if key not in seen:
                seen.add(key)
                found.append({"criterion": result["name"], "seconds": round(stamp - result["started"], 1), key: value})
    return found


def report(record: Record) -> Path:
    """The JSON report and its picture in the record's folder; the tables printed the first time."""
    record.folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.fromtimestamp(record.timeline.wall, UTC).strftime("%Y%m%dT%H%M%SZ")
    path = record.folder / f"exit-criteria-{record.cluster.replace('/', '-')}-{stamp}.json"
    found = milestones(record.timeline.rows, record.results)
    lab = record.lab
    log = record.evidence.get("log")
    if isinstance(log, str) and not log.startswith("could not be read"):
        path.with_suffix(".autoscaler.log").write_text(log)
    body = {
        "cluster": record.cluster,
        "began": record.timeline.wall,
        "exit": record.code(),
        "refused": record.refused,
        "stopped": record.stopped,
        "left": record.left,
        "versions": record.evidence.get("versions"),
        "nodeGroup": dataclasses.asdict(lab.group) if lab else None,
        "autoscaler": dataclasses.asdict(lab.scaler) if lab else None,
        "demandMillicores": lab.millicores if lab else None,
        "criteria": record.results,
        "summary": summary(record.results),
        "restarts": record.restarts,
        "capacity": record.capacity,
        "milestones": found,
        "timeline": record.timeline.rows,
        "autoscalerSaw": record.evidence.get("autoscaler"),
    }
    written = path.exists()
    path.write_text(json.dumps(body, indent=2) + "\n")
    title = f"{record.cluster}: exit criteria"
    path.with_suffix(".svg").write_text(scaling_picture.svg(record.timeline.rows, record.results, title=title))
    if not written:
        show(record, found, path)
    return path


def show(record: Record, found: list[dict[str, Any]], path: Path) -> None:
    lines = [f"\n{'criterion':<20} {'result':<7} {'seconds':>8} {'bound':>7}  why"]
    several = any(r.get("run", 1) > 1 for r in record.results)
    for result in record.results:
        name = f"{result['name']} #{result['run']}" if several else result["name"]
        verdict = "passed" if result["passed"] else "FAILED"
        lines.append(
            f"{name:<20} {verdict:<7} {result.get('seconds', ''):>8} {result.get('bound', ''):>7}  {result['reason']}"
        )
    if several:
        lines.append(f"\n{'criterion':<20} {'runs':>5} {'min s':>8} {'median s':>9} {'max s':>8}")
        for name, spread in summary(record.results).items():
            lines.append(f"{name:<20} {spread['runs']:>5} {spread['min']:>8} {spread['median']:>9} {spread['max']:>8}")
    lines.append(f"\n{'criterion':<20} {'after s':>8}  what moved")
    for row in found:
        what = next(f"{key}={value}" for key, value in row.items() if key not in ("criterion", "seconds"))
        lines.append(f"{row['criterion']:<20} {row['seconds']:>8}  {what}")
    lines.append(f"\nreport: {path}\npicture: {path.with_suffix('.svg')}")
    say(*lines)


def conclude(
    record: Record, mgmt: Kubectl, workload: Kubectl | None, *, namespace: str, name: str, poll: float
) -> None:
    """The report first, so that slow reads or a removal that hangs or is cut lose nothing; then
    what the autoscaler saw, read before the removal takes the demand pods' events with it; then
    the removal, checked; the report written again after each. Signals from here on are only
    noted."""
    for signum in SIGNALS:
        signal.signal(signum, _noted)

    def written() -> bool:
        try:
            report(record)
        except OSError as error:
            say(f"the report could not be written in {record.folder}: {error}", err=True)
            return False
        return True

    if written() and workload is not None:
        evidence(record, mgmt, workload, namespace, name)
        written()
    if record.made and record.lab is not None:
        say(f"removing namespace {NAMESPACE} (the demand) from the workload cluster")
        record.left = cleanup(record.lab, poll)
        written()
    if record.left:
        say("left behind, to remove by hand:", *(f"  {what}" for what in record.left), err=True)
    elif record.made:
        say(f"namespace {NAMESPACE} removed: nothing of the command's is left in the workload cluster")
    if record.stopped:
        say(f"stopped: {record.stopped}", err=True)
    if record.made and record.lab is not None and record.timeline.last.get("replicas"):
        say(f"the autoscaler takes the workers back to 0 within about {record.lab.bound(0):.0f} s, the demand gone")


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise InterruptError(signal.Signals(signum).name)


def _noted(signum: int, frame: FrameType | None) -> None:
    say(f"{signal.Signals(signum).name}: noted; the removal goes on, bounded", err=True)


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__.split("\n\n")[0])
    parser.add_argument(
        "--report-dir",
        type=Path,
        help="where the report, picture and log go (default ~/lab-mgmt-exit-criteria/<time>, outside the clone)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="run the three criteria this many times")
    parser.add_argument(
        "--proxmox-endpoint", help="read the workers' VMs on Proxmox VE too (https://host:8006/); needs a token"
    )
    parser.add_argument(
        "--proxmox-token-file", type=Path, help="a file with user@realm!name=secret; VM.Audit (PVEAuditor) is enough"
    )
    parser.add_argument("--proxmox-insecure", action="store_true", help="skip Proxmox VE's TLS checks (self-signed)")
    parser.add_argument(
        "--margin",
        type=float,
        default=240.0,
        help="seconds added to each bound (a worker given up and made again under load)",
    )
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between samples")
    args = parser.parse_args(argv)
    mgmt, namespace, name = reached(args)
    began = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = args.report_dir or Path("~/lab-mgmt-exit-criteria") / began
    record = Record(f"{namespace}/{name}", folder.expanduser())
    previous = {number: signal.signal(number, _interrupted) for number in SIGNALS}
    try:
        with workload_kubeconfig(mgmt, namespace, name, args.workload_kubeconfig) as workload:
            try:
                run(record, mgmt, workload, namespace=namespace, name=name, args=args)
            finally:
                conclude(record, mgmt, workload, namespace=namespace, name=name, poll=args.poll)
    except (RefusedError, KubectlError) as refused:
        record.refused = str(refused)
        say(f"refused, nothing made:\n{refused}", err=True)
        conclude(record, mgmt, None, namespace=namespace, name=name, poll=args.poll)
    except InterruptError as signum:
        record.interrupted, record.stopped = True, f"{signum}: the run was interrupted"
        conclude(record, mgmt, None, namespace=namespace, name=name, poll=args.poll)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return record.code()


def proxmox_of(args: Any) -> Proxmox | None:
    """Proxmox VE to read, when `--proxmox-endpoint` is given, with the token in `--proxmox-token-file`."""
    if not args.proxmox_endpoint:
        return None
    if args.proxmox_token_file is None:
        raise RefusedError("--proxmox-endpoint needs --proxmox-token-file, a file with user@realm!name=secret")
    try:
        token = args.proxmox_token_file.expanduser().read_text().strip()
    except OSError as error:
        raise RefusedError(f"--proxmox-token-file: {error}") from error
    return Proxmox(args.proxmox_endpoint, token.removeprefix("PVEAPIToken="), args.proxmox_insecure)


def run(record: Record, mgmt: Kubectl, workload: Kubectl, *, namespace: str, name: str, args: Any) -> None:
    """The run proper, each way it can end recorded for conclude()."""
    try:
        lab = record.lab = read_lab(mgmt, workload, namespace, name, args.margin, proxmox=proxmox_of(args))
        blocking = blockers(lab, datetime.now(UTC))
        if blocking:
            say("refused, nothing made: these keep a worker from going", *(f"  {b}" for b in blocking))
            more = f" (and {len(blocking) - 1} more)" if len(blocking) > 1 else ""
            record.refused = blocking[0].split("\n")[0] + more
        else:
            make_namespace(lab, record, args.poll)
            for record.run in range(1, args.repeat + 1):
                criteria(lab, record, record.run, args.poll)
                if not all(r["passed"] for r in record.results):
                    break
    except InterruptError as signum:
        record.interrupted, record.stopped = True, f"{signum}: the run was interrupted"
    except (RefusedError, KubectlError) as error:
        if record.made:
            record.stopped = f"asking again did not help: {error}"
        else:
            record.refused = str(error)
            say(f"refused, nothing made:\n{error}", err=True)
    if record.refused:
        record.unrun(f"not run: {record.refused}")
    elif record.stopped:
        record.unrun(f"not run to its end: {record.stopped}")


if __name__ == "__main__":
    sys.exit(main())
