"""Phase 1's exit criteria proven on the lab as it runs: scale-from-zero, scale-up 1->3 and
scale-down to 0 of a workload cluster's workers, by its own cluster-autoscaler, timed.

    make exit-criteria CLUSTER=lab1
    .venv/bin/python -m tools.exit_criteria --cluster default/lab1 [--kubeconfig FILE] [--workload-kubeconfig FILE]

It reads first, and starts only with all of it (each lack named, exit 2, nothing made): the
management cluster through `--kubeconfig` (default ~/.kube/lab-mgmt.kubeconfig), the workload
cluster through the kubeconfig Cluster API keeps for it (or `--workload-kubeconfig`), the workers'
MachineDeployment with min-size 0, max-size 3 or more and its cpu capacity annotation, and the
autoscaler that discovers the cluster, Ready, with its timings. A pod on a worker that no other
node could take at 0 keeps that worker from going: it is named, never evicted, and the run fails
without starting.

Then, in a namespace of its own, a demand Deployment whose pods each ask for most of a worker's
cpu (so that N pods need N workers) goes 0 -> 1 (after the workers went to 0, if some ran), 1 -> 3
and 3 -> 0, each step waited on within a bound made of the autoscaler's own timings
(tools.scaling_lab) and `--margin`. Progress is printed as it comes; the namespace is deleted at
the end whatever happened (a failure, a timeout, Ctrl-C). The report: each criterion passed or
failed, the timeline as a table, as JSON and as a picture (SVG) beside it in `--report-dir`. Exit
status 0 only when all three passed. Nothing of the stack's is changed: `pulumi preview
--expect-no-changes` passes afterwards (docs/operations.md, "Phase 1's exit criteria").
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from tools import scaling_picture
from tools.scaling_lab import (
    CONTROL_PLANE_ROLE,
    DEPLOYMENT_NAME_LABEL,
    Autoscaler,
    Kubectl,
    NodeGroup,
    RefusedError,
    arguments,
    autoscaler,
    node_groups,
    reached,
    ready,
    worker,
    worker_nodes,
    workload_kubeconfig,
)

NAMESPACE = "lab-mgmt-exit-criteria"
MADE_BY = {"app.kubernetes.io/managed-by": "lab-mgmt-exit-criteria"}
DEMAND = "demand"
# Each demand pod asks for this share of a worker's cpu: one fits a worker beside its DaemonSets
# (Cilium's agent asks 100m), two never do.
SHARE_OF_CPU = 0.7
TOP = 3
SCALE_DOWN = "scale-down to 0"
CRITERIA = (("scale-from-zero", 1), (f"scale-up 1->{TOP}", TOP), (SCALE_DOWN, 0))


@dataclass(frozen=True)
class Lab:
    """What the run needs, read and checked before anything is made."""

    mgmt: Kubectl
    workload: Kubectl
    group: NodeGroup
    scaler: Autoscaler
    millicores: int
    margin: float

    def bound(self, replicas: int) -> float:
        """Seconds a step to `replicas` workers may take: up, the scans and the provision time the
        autoscaler allows a node; down, the delay after a scale-up, the unneeded time and scans."""
        t = self.scaler.timings
        if replicas:
            return t["max-node-provision-time"] + 3 * t["scan-interval"] + self.margin
        return t["scale-down-delay-after-add"] + t["scale-down-unneeded-time"] + 3 * t["scan-interval"] + self.margin


def read_lab(mgmt: Kubectl, workload: Kubectl, namespace: str, cluster: str, margin: float) -> Lab:
    """The lab as the run needs it, or RefusedError naming everything it lacks."""
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
    if "cpu" not in group.capacity:
        problems.append(f"{group.name}: no capacity cpu annotation, which sizes the demand (workers.capacity.cpu)")
    scaler = autoscaler(mgmt, namespace, cluster)
    if scaler is None:
        problems.append(f"no cluster-autoscaler on the management cluster discovers {namespace}/{cluster}")
    elif scaler.ready == 0:
        problems.append(f"the autoscaler {scaler.namespace}/{scaler.name} has no Ready replica")
    workload.items("nodes")  # reachable, or refused with kubectl's words
    if problems or scaler is None:
        raise RefusedError("\n".join(problems))
    millicores = int(
        float(group.capacity["cpu"].removesuffix("m")) * (1 if group.capacity["cpu"].endswith("m") else 1000)
    )
    return Lab(mgmt, workload, group, scaler, int(millicores * SHARE_OF_CPU), margin)


def blockers(lab: Lab) -> list[str]:
    """Pods on the workers that keep one from going, each with why (the command evicts nothing of
    the owner's, and names them instead)."""
    workers = {node["metadata"]["name"] for node in worker_nodes(lab.workload)}
    found = []
    for pod in lab.workload.items("pods", "--all-namespaces"):
        meta, on = pod["metadata"], pod["spec"].get("nodeName")
        why = why_it_stays(pod)
        if on in workers and meta["namespace"] != NAMESPACE and why:
            found.append(f"{meta['namespace']}/{meta['name']} on {on}: {why}")
    return found


def why_it_stays(pod: dict[str, Any]) -> str:
    """Why the autoscaler would keep a pod's worker at 0 (its drainability rules: a DaemonSet's
    or a mirror pod is never a reason), or "" where the pod can move. At 0 only the control
    plane is left to move it to, so a pod must tolerate its taint: the program's autoscaler moves
    kube-system pods too (--skip-nodes-with-system-pods=false), and CoreDNS and Cilium's operator
    tolerate it."""
    owners = {ref["kind"] for ref in pod["metadata"].get("ownerReferences") or []}
    if owners & {"DaemonSet", "Node"}:
        return ""
    if not owners:
        return "no controller makes it again elsewhere, so the autoscaler does not remove its node"
    tolerated = any(
        (t.get("operator") == "Exists" and not t.get("key")) or t.get("key") == CONTROL_PLANE_ROLE
        for t in pod["spec"].get("tolerations") or []
    )
    if not tolerated:
        return "at 0 workers no node would take it (it does not tolerate the control plane's taint)"
    return ""


@dataclass
class Timeline:
    """Each sampled value as it changed, [seconds, key, value], from `began`."""

    began: float = field(default_factory=time.monotonic)
    wall: float = field(default_factory=time.time)
    """When it began, in seconds since the epoch: the report's times are counted from it."""
    rows: list[list[Any]] = field(default_factory=list)
    last: dict[str, Any] = field(default_factory=dict)
    say: Callable[[str], None] = print

    def sample(self, lab: Lab) -> None:
        """One sample of `lab`, stamped when it began: the first thing it reads is the
        MachineDeployment, so a write to its count comes before its stamp."""
        stamp = self.now()
        self.add(stamp, sample(lab))

    def add(self, stamp: float, sample: dict[str, int]) -> None:
        changed = {key: value for key, value in sample.items() if self.last.get(key) != value}
        self.rows += [[stamp, key, value] for key, value in changed.items()]
        self.last = dict(sample)
        if changed:
            self.say(f"{stamp:7.1f}s  " + "  ".join(f"{key}={value}" for key, value in sample.items()))

    def now(self) -> float:
        return round(time.monotonic() - self.began, 1)


def sample(lab: Lab) -> dict[str, int]:
    """The counts, in two reads: one of each cluster (kubectl lists several kinds at once)."""
    group = lab.group
    listed = lab.mgmt.items("machinedeployments,machines", "-n", group.namespace)
    [deployment] = [i for i in listed if i["kind"] == "MachineDeployment" and i["metadata"]["name"] == group.name]
    machines = [
        i
        for i in listed
        if i["kind"] == "Machine" and (i["metadata"].get("labels") or {}).get(DEPLOYMENT_NAME_LABEL) == group.name
    ]
    found = lab.workload.items("nodes,pods", "-n", NAMESPACE)
    pods = [i for i in found if i["kind"] == "Pod" and (i["metadata"].get("labels") or {}).get("app") == DEMAND]
    nodes = [i for i in found if i["kind"] == "Node" and worker(i)]
    return {
        "pending": len([p for p in pods if p["status"].get("phase") == "Pending"]),
        "running": len([p for p in pods if p["status"].get("phase") == "Running"]),
        "replicas": int(deployment["spec"].get("replicas") or 0),
        "machines": len(machines),
        "provisioned": len([m for m in machines if (m.get("status") or {}).get("phase") in ("Provisioned", "Running")]),
        "workers": len([n for n in nodes if ready(n)]),
    }


def at(count: int) -> Callable[[dict[str, int]], bool]:
    return lambda s: s["replicas"] == s["machines"] == s["workers"] == s["running"] == count and s["pending"] == 0


def wait(lab: Lab, timeline: Timeline, done: Callable[[dict[str, int]], bool], bound: float, poll: float) -> bool:
    deadline = time.monotonic() + bound
    while True:
        timeline.sample(lab)
        if done(timeline.last):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)


def demand(lab: Lab, replicas: int) -> None:
    """The demand Deployment at `replicas`: pods that fit a worker each and never the control plane."""
    container = {
        "name": "demand",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": f"{lab.millicores}m", "memory": "64Mi"}},
    }
    never_the_control_plane = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": CONTROL_PLANE_ROLE, "operator": "DoesNotExist"}]}]
            }
        }
    }
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEMAND, "namespace": NAMESPACE, "labels": MADE_BY},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": DEMAND}},
            "template": {
                "metadata": {"labels": {"app": DEMAND}},
                "spec": {
                    "containers": [container],
                    "affinity": never_the_control_plane,
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }
    lab.workload.run("apply", "-f", "-", stdin=json.dumps(body))


def make_namespace(lab: Lab) -> None:
    """The run's namespace; one left by a run that was killed is removed first, anything else of
    that name refused."""
    found = lab.workload.run("get", "namespace", NAMESPACE, "-o", "json", check=False)
    if found.returncode == 0:
        labels = json.loads(found.stdout)["metadata"].get("labels") or {}
        if not MADE_BY.items() <= labels.items():
            raise RefusedError(f"namespace {NAMESPACE} exists in the workload cluster and is not the command's")
        remove(lab)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": MADE_BY}}
    lab.workload.run("apply", "-f", "-", stdin=json.dumps(namespace))


def remove(lab: Lab) -> None:
    lab.workload.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=300s", check=False)


def criteria(lab: Lab, timeline: Timeline, poll: float) -> list[dict[str, Any]]:
    """Each criterion in turn, until one fails; the workers brought to 0 first."""
    results: list[dict[str, Any]] = []
    make_namespace(lab)
    demand(lab, 0)
    timeline.sample(lab)
    if timeline.last["workers"] or timeline.last["replicas"]:
        timeline.say("the workers go to 0 first (no demand)")
        if not wait(lab, timeline, at(0), lab.bound(0), poll):
            return [
                {"name": name, "passed": False, "reason": "the workers never went to 0 first"} for name, _ in CRITERIA
            ]
    for name, replicas in CRITERIA:
        if results and not results[-1]["passed"]:
            results.append({"name": name, "passed": False, "reason": "not run: the criterion before it failed"})
            continue
        timeline.say(f"{name}: the demand at {replicas}")
        started, first, bound = timeline.now(), len(timeline.rows), lab.bound(replicas)
        demand(lab, replicas)
        passed = wait(lab, timeline, at(replicas), bound, poll)
        results.append(
            {
                "name": name,
                "passed": passed,
                "started": started,
                "first_row": first,
                "seconds": round(timeline.now() - started, 1),
                "bound": bound,
                "reason": "" if passed else f"not at {replicas} workers within {bound:.0f} s",
            }
        )
    return results


def milestones(timeline: list[list[Any]], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first change of each value after each criterion's demand was set: the autoscaler's
    decision (replicas), a Machine made or deleted, provisioned, a Node Ready or gone, a pod
    pending or Running; seconds from the criterion's start."""
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


def report(lab: Lab, cluster: str, results: list[dict[str, Any]], timeline: Timeline, folder: Path) -> Path:
    """The JSON report and its picture beside it; the table printed."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"exit-criteria-{cluster.replace('/', '-')}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    found = milestones(timeline.rows, results)
    body = {
        "cluster": cluster,
        "began": timeline.wall,
        "nodeGroup": dataclasses.asdict(lab.group),
        "autoscaler": dataclasses.asdict(lab.scaler),
        "demandMillicores": lab.millicores,
        "criteria": results,
        "milestones": found,
        "timeline": timeline.rows,
    }
    path = folder / f"{stem}.json"
    path.write_text(json.dumps(body, indent=2) + "\n")
    (folder / f"{stem}.svg").write_text(scaling_picture.svg(timeline.rows, results, title=f"{cluster}: exit criteria"))
    print(f"\n{'criterion':<20} {'result':<7} {'seconds':>8} {'bound':>7}  why")
    for result in results:
        verdict = "passed" if result["passed"] else "FAILED"
        print(
            f"{result['name']:<20} {verdict:<7} {result.get('seconds', ''):>8} {result.get('bound', ''):>7}  "
            f"{result['reason']}"
        )
    print(f"\n{'criterion':<20} {'after s':>8}  what moved")
    for row in found:
        what = next(f"{key}={value}" for key, value in row.items() if key not in ("criterion", "seconds"))
        print(f"{row['criterion']:<20} {row['seconds']:>8}  {what}")
    print(f"\nreport: {path}\npicture: {path.with_suffix('.svg')}")
    return path


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--report-dir", type=Path, default=Path("exit-criteria"))
    parser.add_argument(
        "--margin",
        type=float,
        default=240.0,
        help="seconds added to each bound (a worker given up and made again under load)",
    )
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between samples")
    args = parser.parse_args(argv)
    mgmt, namespace, name = reached(args)
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        with workload_kubeconfig(mgmt, namespace, name, args.workload_kubeconfig) as workload:
            lab = read_lab(mgmt, workload, namespace, name, args.margin)
            blocking = blockers(lab)
            timeline = Timeline()
            if blocking:
                print("refused, nothing made: a pod of yours keeps a worker from going", *blocking, sep="\n  ")
                results = [{"name": n, "passed": False, "reason": "not run: " + blocking[0]} for n, _ in CRITERIA]
            else:
                try:
                    results = criteria(lab, timeline, args.poll)
                finally:
                    remove(lab)
            report(lab, f"{namespace}/{name}", results, timeline, args.report_dir)
    except RefusedError as refused:
        print(f"refused, nothing made:\n{refused}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the demand was removed", file=sys.stderr)
        return 130
    return 0 if all(result["passed"] for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
