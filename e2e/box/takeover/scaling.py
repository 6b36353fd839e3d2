"""After the owner's takeover (journey.py), phase 1's exit criteria proven on the lab1 it took over
(issues 40 and 56): `make exit-criteria CLUSTER=lab1` typed on the laptop as docs/operations.md
shows it, with the owner's two workers running and nothing of theirs on them. The command brings
them to 0, then scales from zero, 1 -> 3 and back to 0 through the autoscaler the program now
runs; `pulumi preview --expect-no-changes` is typed after it. Only the timings change from the
lab's: the owner's entry leaves them at the autoscaler's defaults (a worker unneeded for 10
minutes goes), which the box shortens through the entry's own keys, as an owner would, with one
`pulumi up` that changes the autoscaler's release alone. Before, typed twice where it must refuse:
min-size 1, and the owner's things on a worker, one for each reason the autoscaler keeps it.
Read around it: what the box saw (every write to the MachineDeployment, from the audit log), the
report and picture the command wrote, what it left, and what `make scaling-status` shows
afterwards.

    scaled = scaling.exit_criteria(lab)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

import yaml

from components.settings.workload import CAPACITY_ANNOTATION, MIN_SIZE_ANNOTATION
from e2e.box import observed
from e2e.box.box import auditor_token_file
from e2e.box.scenarios import PROXMOX_ADDRESS, PROXMOX_PORT
from e2e.box.takeover import keyboard
from e2e.box.takeover.owners_lab import OwnersLab
from e2e.box.workload import lab1_sites, proxmox_node
from e2e.box.workload.lab1_reads import LAB1, get, scales, until
from e2e.engine.cli import PROJECT, STACK
from tools.exit_criteria import SAFE_TO_EVICT, SCALE_DOWN_DISABLED
from tools.scaling_lab import CONTROL_PLANE_ROLE

# The shipped Pulumi.lab.yaml's lab1 bounds.
BOUNDS = lab1_sites.declared("lab")["workers"]
MIN_SIZE, MAX_SIZE = BOUNDS["minSize"], BOUNDS["maxSize"]
# A pending pod starts the autoscaler's loop at once, so the scan interval paces only its
# scale-downs, and each loop costs the box's API servers CPU (lab1_autoscaling.py): 5 s. The
# provision time bounds each scale-up step's wait, and a worker whose Node is later than it is
# given up: a box's worker has its Node within 3 s of its Machine in a quiet hour, but a fresh
# clone's run beside three other scenarios took 17.6 s (its IP address 10 s of it), and the
# autoscaler gave that worker up at 15 s and backed the node group off past the criterion's bound;
# so 30 s, which lets a worker that never joins fail its criterion in 45 s (never_joins, with no
# margin).
TIMINGS = {
    "scanInterval": "5s",
    "scaleDownUnneededTime": "5s",
    "scaleDownDelayAfterAdd": "5s",
    "maxNodeProvisionTime": "30s",
}
NEVER_JOINS_BOUND = 30 + 3 * 5
# By when the passing run's demand is in lab1: after the owner's two workers went to 0 first (a
# step down, and the IP addresses' 60 s of reuse grace that CAPMOX gives its pool).
RESTART_BY_SECONDS = 600
EXIT_CRITERIA = "make exit-criteria CLUSTER=lab1"
# The passing run as docs/operations.md types it with the owner's read-only Proxmox token (made with
# `pveum` as the page says, kept in a file of mode 0600): each step reads the workers' VMs too.
AUDITOR_TOKEN_FILE = ".config/pve-auditor.token"
WITH_PROXMOX = (
    f"{EXIT_CRITERIA} EXIT_CRITERIA_FLAGS='--proxmox-endpoint https://{PROXMOX_ADDRESS}:{PROXMOX_PORT}/"
    f" --proxmox-insecure --proxmox-token-file ~/{AUDITOR_TOKEN_FILE}'"
)
# What the command makes in lab1, which must be gone after it.
COMMAND_NAMESPACE = "lab-mgmt-exit-criteria"
# Where it writes its reports by default, in the laptop's home: outside the clone.
REPORTS = "lab-mgmt-exit-criteria"
# The owner's hand edit of the workers' annotations, which docs/troubleshooting.md says not to make.
ANNOTATE_WORKERS = (
    f"kubectl --kubeconfig ~/.kube/lab-mgmt.kubeconfig -n default annotate --overwrite machinedeployment {LAB1.workers}"
)
AT_ZERO = {"replicas": 0, "machines": 0, "ready_workers": 0}
# Less memory than the command's demand pod asks for (tools/exit_criteria.py DEMAND_MEMORY, 64Mi).
WRONG_MEMORY = "32Mi"
# A pod of the owner's that no controller makes again: the command must name it and leave it.
OWNERS_POD = "owners-debug"
PAUSE = "registry.k8s.io/pause:3.10"


def _worker_nodes(lab: OwnersLab) -> list[dict[str, Any]]:
    nodes = (get(lab.box.cluster, "nodes", namespace="", kubeconfig=lab.lab1_kubeconfig) or {}).get("items", [])
    return [node for node in nodes if "node-role.kubernetes.io/control-plane" not in node["metadata"].get("labels", {})]


def workers(lab: OwnersLab) -> dict[str, Any]:
    """The MachineDeployment's count, the workers' Machines, and lab1's worker Nodes that are Ready."""
    deployment = get(lab.box.cluster, "machinedeployment", LAB1.workers) or {}
    machines = (get(lab.box.cluster, "machines", selector=LAB1.workers_selector) or {}).get("items", [])
    ready = [
        node
        for node in _worker_nodes(lab)
        if any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
    ]
    return {
        "replicas": deployment.get("spec", {}).get("replicas"),
        "machines": len(machines),
        "ready_workers": len(ready),
    }


def refusals(lab: OwnersLab) -> dict[str, Any]:
    """The command typed on a lab it must not run on, each time with nothing made: min-size 1 on
    the MachineDeployment (kubectl's edit, then put back), and the owner's things on a worker
    (_owners_things), which it names, each for its reason, and leaves running; then they go."""
    out: dict[str, Any] = {"min_size": [lab.laptop(f"{ANNOTATE_WORKERS} {MIN_SIZE_ANNOTATION}=1")]}
    out["min_size"] += [lab.laptop(EXIT_CRITERIA), lab.laptop(f"{ANNOTATE_WORKERS} {MIN_SIZE_ANNOTATION}={MIN_SIZE}")]
    lab1 = lab.box.cluster.kubectl_as
    worker = _worker_nodes(lab)[0]["metadata"]["name"]
    out["worker"] = worker
    _lay_out_owners_things(lab, worker)
    out["blocked"] = lab.laptop(EXIT_CRITERIA)
    out["pods_after"] = _owners_pods(lab)
    out["made"] = lab1(lab.lab1_kubeconfig, "get", "namespace", COMMAND_NAMESPACE).returncode == 0
    _take_away_owners_things(lab, worker)
    return out


# What the owner's things carry, so that they are found again and taken away.
OWNERS_LABEL = "lab-mgmt-test/owners"
# The pod of the owner's that the command must name for each reason the autoscaler would keep a
# worker (tools/exit_criteria.py RULES, the program's autoscaler's flags), by the name its
# controller gives it; and those it must not name: a finished pod, one safe to evict, and a
# kube-system pod with no budget, which the program's autoscaler moves (--skip-nodes-with-system-pods=false).
BLOCKERS = {
    OWNERS_POD: "no controller makes it again elsewhere",
    "owners-operated": "its controller is a ConfigMap",
    "owners-unsafe": f'annotated {SAFE_TO_EVICT}: "false"',
    "owners-scratch": "local storage (scratch)",
    "owners-budgeted": "its PodDisruptionBudget owners-budgeted allows no disruption",
    "owners-workers-only": "at 0 workers no node would take it",
}
NOT_BLOCKERS = ("owners-done", "owners-evictable", "owners-system")


def _owners_pods(lab: OwnersLab) -> dict[str, dict[str, str]]:
    """Each pod of the owner's things, by name: its node and phase."""
    found = get(lab.box.cluster, "pods", namespace="", selector=OWNERS_LABEL, kubeconfig=lab.lab1_kubeconfig) or {}
    return {
        pod["metadata"]["name"]: {"node": pod["spec"].get("nodeName", ""), "phase": pod["status"].get("phase", "")}
        for pod in found.get("items", [])
    }


def _owners_things(worker: str, operator_uid: str) -> list[dict[str, Any]]:
    """BLOCKERS' and NOT_BLOCKERS' pods, each made as an owner makes it (a bare pod, a Deployment,
    a pod the ConfigMap `owners-operator` of `operator_uid` controls, a budget), pinned on `worker`
    by name, as the scheduler would have placed them; all but the first and the node-bound one
    tolerate the control plane's taint, so that only their own reason keeps the worker."""
    everywhere = [{"operator": "Exists"}]

    def meta(name: str, namespace: str = "default", **more: Any) -> dict[str, Any]:
        return {"name": name, "namespace": namespace, "labels": {OWNERS_LABEL: "yes", "app": name}, **more}

    def pod_spec(**more: Any) -> dict[str, Any]:
        return {"nodeName": worker, "containers": [{"name": "app", "image": PAUSE}], **more}

    def pod(name: str, annotations: dict[str, str] | None = None, **more: Any) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta(name, annotations=annotations or {}),
            "spec": pod_spec(**more),
        }

    def deployment(
        name: str, namespace: str = "default", annotations: dict[str, str] | None = None, **more: Any
    ) -> dict[str, Any]:
        labels = meta(name)["labels"]
        template = {"metadata": {"labels": labels, "annotations": annotations or {}}, "spec": pod_spec(**more)}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta(name, namespace),
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template},
        }

    operated = pod("owners-operated", tolerations=everywhere)
    operated["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owners-operator", "uid": operator_uid, "controller": True}
    ]
    workers_only = {"matchExpressions": [{"key": CONTROL_PLANE_ROLE, "operator": "DoesNotExist"}]}
    return [
        pod(OWNERS_POD),
        operated,
        deployment("owners-unsafe", annotations={SAFE_TO_EVICT: "false"}, tolerations=everywhere),
        deployment("owners-scratch", tolerations=everywhere, volumes=[{"name": "scratch", "emptyDir": {}}]),
        deployment("owners-budgeted", tolerations=everywhere),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": meta("owners-budgeted"),
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "owners-budgeted"}}},
        },
        deployment(
            "owners-workers-only",
            tolerations=everywhere,
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [workers_only]}
                }
            },
        ),
        pod("owners-done", restartPolicy="Never"),
        pod("owners-evictable", annotations={SAFE_TO_EVICT: "true"}),
        deployment("owners-system", "kube-system", tolerations=everywhere),
    ]


def _lay_out_owners_things(lab: OwnersLab, worker: str) -> None:
    """_owners_things on `worker`, the worker annotated scale-down-disabled, every pod Running
    (the kubelet stand-in), then the finished one's container ended as a kubelet reports one that
    exited 0, which no stand-in here runs."""
    lab1 = lab.box.cluster.kubectl_as
    operator = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "owners-operator", "namespace": "default", "labels": {OWNERS_LABEL: "yes"}},
    }
    lab1(lab.lab1_kubeconfig, "apply", "-f", "-", stdin=json.dumps(operator)).check_returncode()
    uid = lab1(lab.lab1_kubeconfig, "get", "configmap", "owners-operator", "-o", "jsonpath={.metadata.uid}").stdout
    things = {"apiVersion": "v1", "kind": "List", "items": _owners_things(worker, uid)}
    lab1(lab.lab1_kubeconfig, "apply", "-f", "-", stdin=json.dumps(things)).check_returncode()
    lab1(lab.lab1_kubeconfig, "annotate", "node", worker, f"{SCALE_DOWN_DISABLED}=true").check_returncode()
    running = [{"node": worker, "phase": "Running"}] * (len(BLOCKERS) + len(NOT_BLOCKERS))
    until("the owner's things running", lambda: list(_owners_pods(lab).values()) == running)
    ended = {"phase": "Succeeded", "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}]}
    ended["containerStatuses"] = [
        {
            **{"name": "app", "image": PAUSE, "imageID": "", "ready": False, "started": False, "restartCount": 0},
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
        }
    ]
    finished = (
        "patch",
        "pod",
        "owners-done",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": ended}),
    )
    lab1(lab.lab1_kubeconfig, *finished).check_returncode()


def _take_away_owners_things(lab: OwnersLab, worker: str) -> None:
    """What _lay_out_owners_things made goes, its pods through the kubelet stand-in's final
    delete, and the worker's annotation."""
    lab1 = lab.box.cluster.kubectl_as
    for namespace in ("default", "kube-system"):
        lab1(
            lab.lab1_kubeconfig,
            "delete",
            "-n",
            namespace,
            "deployments,pods,poddisruptionbudgets,configmaps",
            "-l",
            OWNERS_LABEL,
        ).check_returncode()
    lab1(lab.lab1_kubeconfig, "annotate", "node", worker, f"{SCALE_DOWN_DISABLED}-").check_returncode()
    until("the owner's things gone", lambda: not _owners_pods(lab))


def exit_criteria(lab: OwnersLab) -> dict[str, Any]:
    """The box's timings, then the command as typed, and what it did and left."""
    out: dict[str, Any] = {"before": workers(lab)}
    # Before the timings' `up`, whose new autoscaler has never seen the owner's pod: one that saw a
    # worker kept by it leaves that worker for --unremovable-node-recheck-timeout (5 minutes), which
    # the command's wait for 0 allows (Lab.first_bound) and the box need not spend.
    out["refusals"] = refusals(lab)
    out["timings"] = [
        lab.laptop(f"pulumi config set --path 'workloadClusters[0].autoscaler.{key}' {value}")
        for key, value in TIMINGS.items()
    ]
    out["timings_up"] = lab.laptop("pulumi up --stack lab --yes --skip-preview")
    mark, began = lab.box.cluster.audit_mark(), time.monotonic()
    out["typed"], out["k3s_restarted"] = _with_k3s_restarted(lab, began)
    out["seconds"] = round(time.monotonic() - began, 1)
    out["writes"] = scales(lab.box.cluster, mark, LAB1)
    out |= _left(lab)
    out["after"] = workers(lab)
    out["no_changes"] = lab.laptop("pulumi preview --stack lab --expect-no-changes")
    out["status"] = lab.laptop("make scaling-status CLUSTER=lab1")
    # While the autoscaler still holds the template it made from the passing run's real workers.
    out["wrong_memory"] = wrong_memory(lab)
    out["interrupted"] = interrupted(lab)
    out["hung_up"] = hung_up(lab)
    out["never_joins"] = never_joins(lab)
    return out


def _with_k3s_restarted(lab: OwnersLab, began: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """The command typed, and once its demand is in lab1, k3s restarted on the VM from another
    terminal, as the program's warning of an expiring admin certificate tells the owner to
    (components/certificate_renewal.py: the management cluster's API server away for seconds):
    what the restart typed did, when from the command's start, and the guest's k3s restarts it
    made (issue 66)."""
    stack = yaml.safe_load((lab.box.engine.project / f"Pulumi.{STACK}.yaml").read_text())["config"]
    line = f"ssh {stack[f'{PROJECT}:ciUser']}@{lab.box.site.address} sudo systemctl restart k3s"
    auditor_token_file(lab.home / AUDITOR_TOKEN_FILE)
    process = keyboard.laptop_started(lab.box.engine, WITH_PROXMOX)
    try:
        until("the command's demand in lab1", lambda: _demand(lab), bound=RESTART_BY_SECONDS)
        calls, at = len(lab.box.guest_log("calls.log")), round(time.monotonic() - began, 1)
        restart = {"at": at, **lab.laptop(line), "done_at": round(time.monotonic() - began, 1)}
        restart["k3s_restarts"] = observed.k3s_restarts(lab.box.guest_log("calls.log")[calls:])
    finally:
        typed = keyboard.laptop_ended(WITH_PROXMOX, process)
    return typed, restart


def wrong_memory(lab: OwnersLab) -> dict[str, Any]:
    """Issue 66: the workers' memory annotation made wrong by hand (WRONG_MEMORY, less than the
    demand asks) on a lab1 whose autoscaler has seen real workers and so plans from their template:
    the command, typed with no margin, restarts the autoscaler at 0, whose plan then comes from the
    annotations, on which the demand fits no worker: scale-from-zero fails at its bound, and the
    demand goes. The annotation put back as it was."""
    key = f"{CAPACITY_ANNOTATION}memory"
    deployment = get(lab.box.cluster, "machinedeployment", LAB1.workers) or {}
    kept = deployment["metadata"]["annotations"][key]
    out: dict[str, Any] = {"wrong": lab.laptop(f"{ANNOTATE_WORKERS} {key}={WRONG_MEMORY}")}
    out["typed"] = lab.laptop(f"{EXIT_CRITERIA} EXIT_CRITERIA_FLAGS='--margin 0'")
    out |= _left(lab)
    out["put_back"] = lab.laptop(f"{ANNOTATE_WORKERS} {key}={kept}")
    out["after"] = workers(lab)
    return out


def interrupted(lab: OwnersLab) -> dict[str, Any]:
    """Issue 66: the command stopped with SIGTERM (a laptop shutting down) once its demand is in
    lab1: it writes its report, removes its namespace and exits 3 (make's 2); lab1 then goes back
    to 0 by its autoscaler, which the scenario waits for."""
    process = keyboard.laptop_started(lab.box.engine, EXIT_CRITERIA)
    out: dict[str, Any] = {"demand": until("the command's demand in lab1", lambda: _demand(lab))}
    [pid] = _command_pids()
    os.kill(pid, signal.SIGTERM)
    out["typed"] = keyboard.laptop_ended(EXIT_CRITERIA, process)
    out |= _left(lab)
    _back_at_zero(lab)
    return out


def hung_up(lab: OwnersLab) -> dict[str, Any]:
    """Issue 66: the terminal closed once the demand is in lab1: nothing reads what the command
    writes any more, and the owner's shell hangs up the job (SIGHUP to its process group: the
    shell that runs the line, make and the command). The command goes on to its report and the
    removal of its namespace, checked, and ends; lab1 then goes back to 0, which the scenario
    waits for."""
    process = keyboard.laptop_started(lab.box.engine, EXIT_CRITERIA)
    out: dict[str, Any] = {"demand": until("the command's demand in lab1", lambda: _demand(lab))}
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()
    os.killpg(process.pid, signal.SIGHUP)
    out["shell_exit"] = process.wait(timeout=60)
    until("the command ended", lambda: not _command_pids())
    out |= _left(lab)
    _back_at_zero(lab)
    return out


def _demand(lab: OwnersLab) -> str:
    """The command's demand in lab1, by name."""
    found = lab.box.cluster.kubectl_as(lab.lab1_kubeconfig, "get", "jobs", "-n", COMMAND_NAMESPACE, "-o", "name")
    return found.stdout.strip()


def _command_pids() -> list[int]:
    found = subprocess.run(["pgrep", "-f", "tools[.]exit_criteria"], capture_output=True, text=True, check=False)
    return [int(word) for word in found.stdout.split()]


def never_joins(lab: OwnersLab) -> dict[str, Any]:
    """The workers' template gone from the Proxmox node: the first worker's clone fails, and the
    command, typed with no margin, fails scale-from-zero within its bound and removes its
    demand; the template back, lab1 is at 0 again once the autoscaler has given the worker up
    (the zero-change preview after the passing run stands for this one: the count is never the
    stack's)."""
    with proxmox_node.template_gone(lab.box.pve, int(lab.made["site"]["template_vmid"])):
        out = {"typed": lab.laptop(f"{EXIT_CRITERIA} EXIT_CRITERIA_FLAGS='--margin 0'")} | _left(lab)
    _back_at_zero(lab)
    return out


def _left(lab: OwnersLab) -> dict[str, Any]:
    """What the command typed last left: its report and picture (each run's folder under the
    laptop's home, named by when it began: docs/operations.md), and whether its namespace is
    still in lab1."""
    reports = sorted((lab.home / REPORTS).glob("*/*.json"))
    left = lab.box.cluster.kubectl_as(lab.lab1_kubeconfig, "get", "namespace", COMMAND_NAMESPACE)
    return {
        "report": json.loads(reports[-1].read_text()) if reports else None,
        "picture": reports[-1].with_suffix(".svg").read_text() if reports else "",
        "namespace_left": left.returncode == 0,
    }


def _back_at_zero(lab: OwnersLab) -> None:
    until("lab1 at 0 workers again", lambda: workers(lab) == AT_ZERO)
