"""A lab for `make exit-criteria` without a cluster (tests/test_exit_criteria.py): kubectl's
answers for the management cluster and lab1, given at the process boundary (subprocess.run), so
that the command's own kubectl (its flags, timeouts, error reading) runs as it does on a lab. A
fake autoscaler, Cluster API and CAPMOX move the lab at each sample of the management cluster,
with what can go wrong on a real one switched on by field: a node-template cache kept until the
autoscaler restarts, a Node left NotReady, an address leaked, an overshoot, API errors, signals."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from components.settings.workload import MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION
from tools import exit_criteria
from tools.scaling_lab import CONTROL_PLANE_ROLE, DEPLOYMENT_NAME_LABEL, quantity

NOT_FOUND = 'Error from server (NotFound): namespaces "lab-mgmt-exit-criteria" not found'
REFUSED = "The connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?"
# Timings of zero: each step's bound is the --margin a test gives.
QUICK = (
    "--scan-interval=0s",
    "--scale-down-unneeded-time=0s",
    "--scale-down-delay-after-add=0s",
    "--max-node-provision-time=0s",
    "--unremovable-node-recheck-timeout=0s",
)
CAPACITY = {"cpu": "4", "memory": "8Gi"}


def autoscaler_deployment(
    *args: str, ready: int = 1, discovery: str = "namespace=default,clusterName=lab1"
) -> dict[str, Any]:
    argv = [
        "./cluster-autoscaler",
        "--cloud-provider=clusterapi",
        f"--node-group-auto-discovery=clusterapi:{discovery}",
        *args,
    ]
    return {
        "metadata": {"name": "lab1-autoscaler", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": "lab1-autoscaler"}},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "autoscaler",
                            "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.2",
                            "command": argv,
                        }
                    ]
                }
            },
        },
        "status": {"readyReplicas": ready},
    }


def node(
    name: str,
    *,
    control_plane: bool = False,
    ready: bool = True,
    capacity: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {CONTROL_PLANE_ROLE: ""} if control_plane else {},
            "annotations": annotations or {},
        },
        "spec": {"taints": [{"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"}]} if control_plane else {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "capacity": capacity or CAPACITY,
        },
    }


@dataclass
class World:
    """lab1 and its management cluster as kubectl shows them; the fields say what goes wrong."""

    workers: int = 0
    annotations: dict[str, str] = field(
        default_factory=lambda: {f"capacity.cluster-autoscaler.kubernetes.io/{k}": v for k, v in CAPACITY.items()}
    )
    node_capacity: dict[str, str] = field(default_factory=lambda: dict(CAPACITY))
    flags: tuple[str, ...] = QUICK
    owners_pods: list[dict[str, Any]] = field(default_factory=list)
    worker_annotations: dict[str, str] = field(default_factory=dict)
    budgets: list[dict[str, Any]] = field(default_factory=list)
    namespace: dict[str, Any] | None = None
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    cache: bool = False
    """The autoscaler has seen a worker since it started: it plans from that, not the annotations."""
    restarts: int = 0
    stale_node: bool = False
    leaked_address: bool = False
    vm_left: bool = False
    """A worker's VM still on Proxmox VE after its Machine went (a clone CAPMOX lost track of)."""
    strays: list[dict[str, Any]] = field(default_factory=list)
    """VMs on Proxmox VE from before the run, beside the management VM, the template and the workers'."""
    overshoot: int = 0
    answers: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    """Failures to answer first, by the start of the kubectl line (cluster and words)."""
    hooks: dict[str, Callable[[], None]] = field(default_factory=dict)
    """Run when a kubectl line starting so is called (a signal sent mid-run)."""
    calls: list[tuple[str, ...]] = field(default_factory=list)
    limits: list[tuple[tuple[str, ...], float]] = field(default_factory=list)
    """Each kubectl line with the seconds its process was allowed."""
    gone: list[str] = field(default_factory=list)
    applied: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cache = self.cache or self.workers > 0

    # The management cluster's side.

    def machine_names(self) -> list[str]:
        return [f"lab1-workers-q7x2k-w000{index}" for index in range(self.workers)]

    def demand(self) -> int:
        return sum(int(job["spec"]["parallelism"]) for job in self.jobs.values())

    def fits_the_annotations(self) -> bool:
        job = next(iter(self.jobs.values()), None)
        if job is None:
            return True
        requests = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
        annotated = {k.rsplit("/", 1)[1]: v for k, v in self.annotations.items() if k.startswith("capacity.")}
        return all(quantity(annotated.get(r, "0")) >= quantity(requests[r]) for r in ("cpu", "memory"))

    def advance(self) -> None:
        """The autoscaler's decision and everything Cluster API and CAPMOX do for it, at once; only
        once the command made its namespace, so that what it reads first stands still."""
        if self.namespace is None:
            return
        wanted = self.demand()
        if wanted > self.workers and (self.cache or self.fits_the_annotations()):
            self.workers, self.overshoot = wanted + self.overshoot, 0
        elif wanted < self.workers:
            self.gone += self.machine_names()[wanted:]
            self.workers = wanted
        self.cache = self.cache or self.workers > 0

    def sampled(self) -> dict[str, Any]:
        """What a sample of the management cluster finds, the lab moved first."""
        self.advance()
        return {"items": self.capi()}

    def capi(self) -> list[dict[str, Any]]:
        labels = {DEPLOYMENT_NAME_LABEL: "lab1-workers"}
        names = self.machine_names()
        leaked = self.gone[-1:] if self.leaked_address else []
        return [
            {
                "kind": "MachineDeployment",
                "metadata": {"name": "lab1-workers", "namespace": "default", "annotations": self.md_annotations()},
                "spec": {"replicas": self.workers},
                "status": {"replicas": self.workers, "readyReplicas": self.workers},
            },
            *(
                {
                    "kind": "Machine",
                    "metadata": {"name": name, "labels": labels},
                    "status": {"phase": "Running", "nodeRef": {"name": name}},
                }
                for name in names
            ),
            *(
                {
                    "kind": "ProxmoxMachine",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"virtualMachineID": vmid},
                }
                for name, vmid in zip(names, self.vmids(), strict=True)
            ),
            *({"kind": "IPAddress", "metadata": {"name": f"{name}-net0-00-inet"}} for name in [*names, *leaked]),
            {"kind": "IPAddress", "metadata": {"name": "lab1-control-plane-a-net0-00-inet"}},
        ]

    def vmids(self) -> list[int]:
        return [300 + index for index in range(self.workers)]

    def vms(self) -> list[dict[str, Any]]:
        """What Proxmox VE's /cluster/resources?type=vm lists: the management VM, the template, the
        workers' VMs, and one left by a gone worker, named after its machine, if `vm_left`."""
        left = [{"vmid": 399, "name": self.gone[-1], "status": "stopped"}] if self.vm_left and self.gone else []
        workers = [
            {"vmid": v, "name": n, "status": "running"} for v, n in zip(self.vmids(), self.machine_names(), strict=True)
        ]
        return [
            {"vmid": 201, "name": "lab-mgmt"},
            {"vmid": 9000, "name": "ubuntu-template", "template": 1},
            *workers,
            *left,
            *self.strays,
        ]

    def md_annotations(self) -> dict[str, str]:
        return {MIN_SIZE_ANNOTATION: "0", MAX_SIZE_ANNOTATION: "3", **self.annotations}

    def deployments(self) -> list[dict[str, Any]]:
        capi = {
            "metadata": {"name": "capi-controller-manager", "namespace": "capi-system"},
            "spec": {
                "template": {
                    "spec": {"containers": [{"image": "registry.k8s.io/cluster-api/cluster-api-controller:v1.12.11"}]}
                }
            },
        }
        return [autoscaler_deployment(*self.flags), capi]

    def autoscaler_pods(self) -> list[dict[str, Any]]:
        return [
            {
                "metadata": {"name": f"lab1-autoscaler-{self.restarts}"},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        ]

    # lab1's side.

    def nodes(self) -> list[dict[str, Any]]:
        stale = [node(self.gone[-1], ready=False)] if self.stale_node and self.gone else []
        return [
            node("lab1-cp", control_plane=True),
            *(node(n, capacity=self.node_capacity, annotations=self.worker_annotations) for n in self.machine_names()),
            *stale,
        ]

    def demand_pods(self) -> list[dict[str, Any]]:
        """The Jobs' pods, Running on a worker each or unschedulable, and one that failed (a record
        that stays beside its replacement) once there is demand."""
        running = min(self.demand(), self.workers)
        failed = {"kind": "Pod", "metadata": {"name": "demand-evicted", "labels": {"app": "demand"}}}
        return [
            *([{**failed, "status": {"phase": "Failed", "reason": "Evicted"}}] if self.jobs else []),
            *(
                {
                    "kind": "Pod",
                    "metadata": {"name": f"demand-{index}", "labels": {"app": "demand"}},
                    "status": {"phase": "Running"}
                    if index < running
                    else {
                        "phase": "Pending",
                        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                    },
                }
                for index in range(self.demand())
            ),
        ]

    def apply(self, body: dict[str, Any]) -> str:
        self.applied.append(body)
        if body["kind"] == "Namespace":
            self.namespace = body
        else:
            assert self.namespace is not None, "a Job before its namespace"
            self.jobs[body["metadata"]["name"]] = body
        return "applied"

    # kubectl.

    def kubectl(self, cluster: str, args: tuple[str, ...], stdin: str | None) -> tuple[int, Any]:
        """rc and what kubectl prints (an object to print as JSON, or text)."""
        words = " ".join(args)
        if cluster == "mgmt":
            answers: dict[str, Callable[[], Any]] = {
                "get machinedeployments.cluster.x-k8s.io": lambda: {"items": self.capi()[:1]},
                "get deployments --all-namespaces": lambda: {"items": self.deployments()},
                f"get {','.join(exit_criteria.CAPI_KINDS)}": self.sampled,
                "get pods -n default -l": lambda: {"items": self.autoscaler_pods()},
                "delete pod -n default": self.restarted,
                "get deployment lab1-autoscaler": lambda: autoscaler_deployment(*self.flags),
                "logs -n default deployment/lab1-autoscaler": lambda: "I1207 scale_up.go: no expansion options",
                "version": lambda: {"serverVersion": {"gitVersion": "v1.35.0+k3s1"}},
            }
        else:
            answers = {
                "get nodes -o json": lambda: {"items": self.nodes()},
                "get pods --all-namespaces": lambda: {"items": self.owners_pods},
                "get poddisruptionbudgets --all-namespaces": lambda: {"items": self.budgets},
                f"get nodes,pods -n {exit_criteria.NAMESPACE}": lambda: {"items": self.nodes() + self.demand_pods()},
                f"get namespace {exit_criteria.NAMESPACE}": lambda: self.namespace or (1, NOT_FOUND),
                "apply -f -": lambda: self.apply(json.loads(stdin or "")),
                "patch job": lambda: self.patch(args),
                f"delete namespace {exit_criteria.NAMESPACE}": self.removed,
                "get events --all-namespaces": lambda: {"items": self.events()},
                "get configmap cluster-autoscaler-status -n kube-system": lambda: {
                    "data": {"status": "autoscalerStatus: Running\nclusterWide:\n  health:\n    status: Healthy"}
                },
                f"get jobs,pods -n {exit_criteria.NAMESPACE}": lambda: {
                    "items": [{"kind": "Job", "metadata": {"name": n}} for n in self.jobs]
                },
                "version": lambda: {"serverVersion": {"gitVersion": "v1.35.0"}},
            }
        for start, hook in self.hooks.items():
            if f"{cluster} {words}".startswith(start):
                hook()
        for start, failures in self.answers.items():
            if f"{cluster} {words}".startswith(start) and failures:
                return failures.pop(0)
        # The longest start that fits: listing several kinds starts as listing the first.
        for start in sorted(answers, key=len, reverse=True):
            if words.startswith(start):
                found = answers[start]()
                return found if isinstance(found, tuple) else (0, found)
        raise AssertionError(f"kubectl {words} ({cluster}): not an answer the world gives")

    def restarted(self) -> str:
        self.restarts += 1
        self.cache = False
        return "pod deleted"

    def patch(self, args: tuple[str, ...]) -> str:
        self.jobs[args[2]]["spec"].update(json.loads(args[args.index("-p") + 1])["spec"])
        return "patched"

    def removed(self) -> str:
        self.namespace, self.jobs = None, {}
        return "namespace deleted"

    def events(self) -> list[dict[str, Any]]:
        return [
            {
                "reason": "TriggeredScaleUp",
                "lastTimestamp": "2999-01-01T00:00:00Z",
                "involvedObject": {"kind": "Pod", "name": "demand-0"},
                "message": "pod triggered scale-up",
            }
        ]

    def run(self, line: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """subprocess.run for kubectl (and git, for the report's commit)."""
        if line[0] == "git":
            return subprocess.CompletedProcess(line, 0, "0123abc\n", "")
        cluster = line[1].removeprefix("--kubeconfig=")
        args = tuple(line[2:-1])
        self.calls.append((cluster, *args))
        self.limits.append(((cluster, *args, line[-1]), kwargs["timeout"]))
        rc, out = self.kubectl(cluster, args, kwargs.get("input"))
        text = out if isinstance(out, str) else json.dumps(out)
        return subprocess.CompletedProcess(line, rc, text if rc == 0 else "", "" if rc == 0 else text)

    def writes(self) -> list[tuple[str, ...]]:
        """Every call that changed something, in order."""
        return [call for call in self.calls if call[1] in ("apply", "patch", "delete")]
