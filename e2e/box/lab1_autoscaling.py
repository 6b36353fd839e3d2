"""The PROGRAM's lab1 in the box (tests/test_box_lab1_autoscaling.py; issue 30's scenario): on the
workload box (e2e/box/workload_box.py) with the real Cluster API core, the program (box_program.py)
declares Pulumi.lab.yaml's lab1, pointed at the box with `pulumi config set --path`, and each step
goes through the real CLI: the first `pulumi up` (lab1 at 0 workers, Cilium once the Cluster is
ControlPlaneInitialized, cluster-autoscaler from the real chart 9.59.0 whose Pod the pod runner
runs as the real binary); then demand in lab1 that fits nowhere, which the real autoscaler meets
0 -> 1 -> 3 and, once it is gone, 3 -> 0; a worker sizing change; a rotated lab1 kubeconfig; and,
last, the control: without the proxmoxmachinetemplates rule, no scale-from-zero. Between steps,
`pulumi preview --expect-no-changes` and a `pulumi up` that writes nothing. Every write is read from
the API servers' audit logs; the scale-up and scale-down are recorded as a timeline.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from e2e.box import autoscaler_box, workload_box
from e2e.box.cluster_part import _requests_since
from e2e.box.scenarios import LAB1_ADDRESS, WRITES, _lab_secrets, _readme_first_run, _step
from e2e.engine.cli import Engine
from e2e.engine.control_plane import ADMIN_USER, OPERATOR_USER, ControlPlane
from e2e.standins.cluster import pod_runner
from e2e.standins.cluster.pod_process import Api

NS, CLUSTER = "default", "lab1"
WORKERS, AUTOSCALER = f"{CLUSTER}-workers", f"{CLUSTER}-autoscaler"
ACCOUNT = f"system:serviceaccount:{NS}:{AUTOSCALER}"
WORKER = {"sockets": 2, "cores": 2, "memoryMib": 4096, "diskGib": 30}
RESIZED_MIB = 6144
# The box's short timings, through the program's own settings.
TIMINGS = {"scanInterval": "2s", "scaleDownUnneededTime": "10s", "scaleDownDelayAfterAdd": "5s"}
# One demand pod fills a worker (4 cpu, Cilium's agent takes 100m); none fits the control plane.
DEMAND = "demand"
DEMAND_CPU = "3"
BOUND = 180.0
POLL = 0.5
# The control watches this long (many scan intervals) for a scale-up that must not come.
CONTROL_WINDOW = 20.0
CORE = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default"
# The autoscaler's Deployment becomes a Pod (the pod runner runs it); the garbage collector ends a
# foreground deletion (pulumi-kubernetes deletes the old machine template so), as k3s's does.
MGMT_CONTROLLERS = (*autoscaler_box.CONTROLLERS, "garbage-collector-controller")


def _config(engine: Engine, box: workload_box.WorkloadBox) -> list[dict[str, Any]]:
    steps = _readme_first_run(engine, _lab_secrets())
    lab1 = "workloadClusters[0]"
    settings = {
        "certManagerChartRepo": box.repo_url("jetstack"),
        "capiOperatorChartRepo": box.repo_url("capi-operator"),
        "ciliumChartRepo": box.repo_url("cilium"),
        "ciliumVersion": workload_box.CILIUM_VERSION,
        "clusterAutoscalerChartRepo": box.repo_url("autoscaler"),
        "capmoxReleaseUrl": box.capmox_release_url,
        f"{lab1}.controlPlaneEndpoint": LAB1_ADDRESS,
        **{f"{lab1}.workers.{key}": str(value) for key, value in WORKER.items()},
        **{f"{lab1}.autoscaler.{key}": value for key, value in TIMINGS.items()},
    }
    return steps + [_step(engine, ("config", "set", "--path", key, value)) for key, value in settings.items()]


def _run(engine: Engine, mgmt: ControlPlane, action: str, *args: str) -> dict[str, Any]:
    """One CLI run: its exit code, seconds, changes, and the admin's writes (the engine's) to the
    management cluster, each [verb, resource, name]."""
    mark, began, started = len(mgmt.audit()), time.monotonic(), time.time()
    run = engine.run(action, *args)
    writes = [request[:3] for request in _requests_since(mgmt, mark) if request[0] in WRITES]
    return {
        **{"action": " ".join((action, *args)), "rc": run.rc, "seconds": round(time.monotonic() - began, 1)},
        "summary": run.summary(),
        "changed": [s for s in run.steps() if s["op"] not in ("same", "read")],
        "writes": writes,
        "error": run.output[-5000:] if run.rc else "",
        "order": _order(run.events),
        "started": started,
    }


def _order(events: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """[index in the event log, timestamp] of the Cluster's step done and of Cilium's begun."""
    found: dict[str, list[Any]] = {}
    for index, event in enumerate(events):
        for kind, suffix, key in (
            ("resOutputsEvent", "::lab1-cluster", "cluster_done"),
            ("resourcePreEvent", "::lab1-cilium", "cilium_begun"),
        ):
            if kind in event and event[kind]["metadata"]["urn"].endswith(suffix) and key not in found:
                found[key] = [index, event.get("timestamp")]
    return found


class Lab:
    """Reads of both clusters through their APIs (no kubectl process per poll)."""

    def __init__(self, mgmt: ControlPlane, lab1_kubeconfig: Path) -> None:
        self.mgmt, self.lab1 = Api.from_kubeconfig(mgmt.kubeconfig), Api.from_kubeconfig(lab1_kubeconfig)

    def get(self, api: Api, path: str) -> Any:
        code, body = api.call("GET", path)
        return body if code == 200 else None

    def sample(self) -> dict[str, Any]:
        deployment = self.get(self.mgmt, f"{CORE}/machinedeployments/{WORKERS}") or {}
        machines = (self.get(self.mgmt, f"{CORE}/machines") or {}).get("items", [])
        workers = [m for m in machines if "cluster.x-k8s.io/deployment-name" in m["metadata"].get("labels", {})]
        nodes = (self.get(self.lab1, "/api/v1/nodes") or {}).get("items", [])
        pods = (self.get(self.lab1, f"/api/v1/namespaces/default/pods?labelSelector=app%3D{DEMAND}") or {}).get(
            "items", []
        )
        return {
            "replicas": deployment.get("spec", {}).get("replicas"),
            "machines": len(workers),
            "machines_with_node": len([m for m in workers if m.get("status", {}).get("nodeRef")]),
            "nodes": len([n for n in nodes if "node-role.kubernetes.io/control-plane" not in n["metadata"]["labels"]]),
            "pending": len([p for p in pods if not p["spec"].get("nodeName")]),
            "scheduled": len([p for p in pods if p["spec"].get("nodeName")]),
        }

    def watch(self, what: str, done: Callable[[dict[str, Any]], bool], began: float) -> list[list[Any]]:
        """[seconds since `began`, field, value] each time a sampled value changes, until `done`."""
        timeline: list[list[Any]] = []
        last: dict[str, Any] = {}
        deadline = time.monotonic() + BOUND
        while True:
            now = self.sample()
            stamp = round(time.monotonic() - began, 1)
            timeline += [[stamp, key, value] for key, value in now.items() if last.get(key) != value]
            last = now
            if done(now):
                return timeline
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {BOUND}s: {what}; last {now}; timeline {timeline}")
            time.sleep(POLL)


def _demand(lab1: Path, mgmt: ControlPlane, replicas: int) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEMAND, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": DEMAND}},
            "template": {
                "metadata": {"labels": {"app": DEMAND}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": DEMAND_CPU, "memory": "1Gi"}},
                        }
                    ],
                },
            },
        },
    }
    mgmt.kubectl_as(lab1, "apply", "-f", "-", stdin=json.dumps(deployment)).check_returncode()


def _scales(mgmt: ControlPlane, mark: int) -> list[dict[str, Any]]:
    """Each write to the MachineDeployment (or its /scale) after `mark`: who, how, when."""
    return [
        {
            "user": event["user"]["username"],
            "verb": event["verb"],
            "subresource": event["objectRef"].get("subresource", ""),
            "at": event["requestReceivedTimestamp"],
            "code": event.get("responseStatus", {}).get("code"),
        }
        for event in mgmt.audit()[mark:]
        if event.get("objectRef", {}).get("resource") == "machinedeployments"
        and event["objectRef"].get("name") == WORKERS
        and event["verb"] in WRITES
        and "dryRun=All" not in event.get("requestURI", "")
    ]


def _no_change(engine: Engine, mgmt: ControlPlane, after: str) -> dict[str, Any]:
    mark = len(mgmt.audit())
    preview = _run(engine, mgmt, "preview", "--expect-no-changes")
    up = _run(engine, mgmt, "up")
    return {"after": after, "preview": preview, "up": up, "md_writes": _scales(mgmt, mark)}


def _managers(mgmt: ControlPlane) -> dict[str, list[str]]:
    """Which field manager owns which of the MachineDeployment's spec fields (top level)."""
    done = mgmt.kubectl("get", "machinedeployment", WORKERS, "-n", NS, "-o", "json", "--show-managed-fields")
    return {
        "/".join(filter(None, (entry["manager"], entry["operation"], entry.get("subresource")))): sorted(
            key.removeprefix("f:") for key in entry.get("fieldsV1", {}).get("f:spec", {})
        )
        for entry in json.loads(done.stdout)["metadata"]["managedFields"]
    }


def lab1_autoscaling(root: str) -> dict[str, Any]:
    base, out = Path(root), dict[str, Any]()
    times: dict[str, float] = {}
    began = time.monotonic()

    def mark(what: str) -> None:
        times[what] = round(time.monotonic() - began, 1)

    with ExitStack() as stack:
        box = stack.enter_context(
            workload_box.running(
                base,
                extra_charts={"autoscaler": [autoscaler_box.CHART]},
                operator_install_seconds=0.0,
                mgmt_controllers=MGMT_CONTROLLERS,
            )
        )
        mgmt = box.mgmt
        runner = stack.enter_context(
            pod_runner.running(mgmt, NS, AUTOSCALER, base / "pods", backoff_seconds=1.0, secret_sync_seconds=2.0)
        )
        try:
            _steps(box, runner, out, mark)
        except Exception:  # what happened so far is the test's to read
            out["failed"] = traceback.format_exc()
        out |= {
            "times": times,
            "problems": box.problems(),
            "runner": {"events": runner.events, "errors": runner.errors},
            "autoscaler_logs": {path: text[-6000:] for path, text in runner.logs().items()},
            "standins_timeline": box.standins.record.timeline[-80:],
        }
        if out.get("failed"):
            out["manager_log_tail"] = box.manager.log_tail(40) if box.managers else ""
    print("timeline:", json.dumps(out.get("timelines", {})), "\ntimes:", times, "\nreaction:", out.get("reaction"))
    return out


def _steps(  # noqa: PLR0915 - one scenario, step by step
    box: workload_box.WorkloadBox, runner: pod_runner.PodRunner, out: dict[str, Any], mark: Callable[[str], None]
) -> None:
    mgmt = box.mgmt
    mark("box up")
    engine = box.engine(workload_clusters=True)
    out["config"] = [step for step in _config(engine, box) if step["rc"] != 0]
    # 1. The first up: lab1 at 0 workers, Cilium after ControlPlaneInitialized, the autoscaler.
    out["up1"] = _run(engine, mgmt, "up")
    mark("first pulumi up")
    if out["up1"]["rc"]:
        raise AssertionError("the first pulumi up failed")
    lab1_plane = box.standins.running[f"{NS}/{CLUSTER}"]
    # The admin's kubeconfig as it is now (step 7 rotates the one the stand-in keeps).
    lab1 = lab1_plane.root / "scenario-lab1.kubeconfig"
    lab1.write_text(lab1_plane.kubeconfig.read_text())
    cluster = json.loads(mgmt.kubectl("get", "cluster", CLUSTER, "-n", NS, "-o", "json").stdout)
    out["cluster_conditions"] = {c["type"]: c for c in cluster["status"]["conditions"]}
    out["lab1_helm_writes"] = [
        [e["requestReceivedTimestamp"], e["verb"], e["objectRef"].get("name", "")]
        for e in lab1_plane.audit()
        if e["objectRef"].get("resource") == "secrets"
        and e["objectRef"].get("name", "").startswith("sh.helm.release")
        and e["verb"] in WRITES
    ]
    out["md_created"] = json.loads(mgmt.kubectl("get", "machinedeployment", WORKERS, "-n", NS, "-o", "json").stdout)
    # 2. Nothing to change, nothing written.
    out["no_change"] = [_no_change(engine, mgmt, "first up")]
    mark("no-change preview and up")
    lab = Lab(mgmt, lab1)
    # 3. Demand that fits nowhere: 0 -> 1 from zero, then 1 -> 3.
    timelines, audit_mark = {}, len(mgmt.audit())
    step_began, wall = time.monotonic(), time.time()
    _demand(lab1, mgmt, 1)
    timelines["0->1"] = lab.watch(
        "0 -> 1", lambda s: s["scheduled"] == 1 and s["nodes"] == 1 and s["replicas"] == 1, step_began
    )
    scales = _scales(mgmt, audit_mark)
    out["scale_from_zero"] = scales
    first = next((s for s in scales if s["user"] == ACCOUNT), None)
    if first:
        at = time.mktime(time.strptime(first["at"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        out["reaction"] = round(at + float("0." + first["at"][20:26]) - wall, 1)
    mark("0 -> 1")
    out["no_change"].append(_no_change(engine, mgmt, "0 -> 1"))
    audit_mark, step_began = len(mgmt.audit()), time.monotonic()
    _demand(lab1, mgmt, 3)
    timelines["1->3"] = lab.watch(
        "1 -> 3", lambda s: s["scheduled"] == 3 and s["nodes"] == 3 and s["replicas"] == 3, step_began
    )
    out["scale_up"] = _scales(mgmt, audit_mark)
    mark("1 -> 3")
    out["managers_at_3"] = _managers(mgmt)
    out["no_change"].append(_no_change(engine, mgmt, "1 -> 3"))
    # 5. The demand gone: down to 0.
    audit_mark, step_began = len(mgmt.audit()), time.monotonic()
    mgmt.kubectl_as(lab1, "delete", "deployment", DEMAND, "--wait=false").check_returncode()
    timelines["3->0"] = lab.watch(
        "3 -> 0", lambda s: s["replicas"] == 0 and s["machines"] == 0 and s["nodes"] == 0, step_began
    )
    out["scale_down"] = _scales(mgmt, audit_mark)
    out["timelines"] = timelines
    mark("3 -> 0")
    out["no_change"].append(_no_change(engine, mgmt, "3 -> 0"))
    out["managers_at_0"] = _managers(mgmt)
    # 6. A worker sizing change: a new template, the MachineDeployment repointed, the old deleted.
    sets_before = _names(mgmt, "machinesets")
    out["resize_config"] = _step(
        engine, ("config", "set", "--path", "workloadClusters[0].workers.memoryMib", str(RESIZED_MIB))
    )
    audit_mark = len(mgmt.audit())
    out["resize_preview"] = _run(engine, mgmt, "preview")
    out["resize"] = _run(engine, mgmt, "up")
    out["resize_writes"] = [
        [e["verb"], e["objectRef"]["resource"], e["objectRef"].get("name", ""), e["requestReceivedTimestamp"]]
        for e in mgmt.audit()[audit_mark:]
        if e["user"]["username"] == ADMIN_USER
        and e["verb"] in WRITES
        and e["objectRef"].get("resource") in ("proxmoxmachinetemplates", "machinedeployments")
        and "dryRun=All" not in e.get("requestURI", "")
    ]
    deadline = time.monotonic() + BOUND
    while (
        new_sets := sorted(set(_names(mgmt, "machinesets")) - set(sets_before))
    ) == [] and time.monotonic() < deadline:
        time.sleep(POLL)
    out["machinesets"] = {"before": sets_before, "new": new_sets}
    out["md_resized"] = json.loads(mgmt.kubectl("get", "machinedeployment", WORKERS, "-n", NS, "-o", "json").stdout)
    out["templates"] = _names(mgmt, "proxmoxmachinetemplates")
    mark("worker sizing change")
    out["no_change"].append(_no_change(engine, mgmt, "sizing change"))
    # 7. lab1's kubeconfig rotated where Cluster API keeps it (the KCP stand-in writes the Secret
    # from its control plane's admin kubeconfig): the next up restarts the autoscaler.
    _rotate(engine, mgmt, lab1_plane, runner, out)
    mark("kubeconfig rotation")
    # 8. The control: without the rule, scale-from-zero does not happen.
    out["control"] = _control(mgmt, lab, lab1, runner)
    mark("control")


def _names(mgmt: ControlPlane, resource: str) -> list[str]:
    done = mgmt.kubectl("get", resource, "-n", NS, "-o", "jsonpath={.items[*].metadata.name}")
    return sorted(done.stdout.split())


def _rotate(
    engine: Engine, mgmt: ControlPlane, lab1_plane: ControlPlane, runner: pod_runner.PodRunner, out: dict[str, Any]
) -> None:
    def secret() -> str:
        done = mgmt.kubectl("get", "secret", f"{CLUSTER}-kubeconfig", "-n", NS, "-o", "jsonpath={.data.value}")
        return done.stdout

    before = secret()
    # Another user's credentials, as a renewal gives a new client certificate.
    rotated = json.loads(lab1_plane.kubeconfig_of(OPERATOR_USER).read_text())
    lab1_plane.kubeconfig_of(ADMIN_USER).write_text(json.dumps(rotated))
    _until("the KCP stand-in rewrites lab1-kubeconfig", lambda: secret() != before)
    out["rotated_secret"] = True
    events = len(runner.events)
    out["rotation_up"] = _run(engine, mgmt, "up")

    def restarted() -> bool:
        later = [event["event"] for event in runner.events[events:]]
        return "started" in later and "stopped" in later

    _until("the autoscaler restarted with the new kubeconfig", restarted)
    out["rotation_events"] = runner.events[events:]


def _until(what: str, done: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + BOUND
    while not (answer := done()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {BOUND}s: {what}")
        time.sleep(POLL)
    return answer


def _control(mgmt: ControlPlane, lab: Lab, lab1: Path, runner: pod_runner.PodRunner) -> dict[str, Any]:
    """The Role without the proxmoxmachinetemplates rule, the autoscaler restarted, demand at 0
    workers: it is refused the templates and scales nothing for CONTROL_WINDOW seconds."""
    roles = json.loads(mgmt.kubectl("get", "roles", "-n", NS, "-o", "json").stdout)["items"]
    [role] = [r for r in roles if any("proxmoxmachinetemplates" in rule.get("resources", []) for rule in r["rules"])]
    role["rules"] = [rule for rule in role["rules"] if "proxmoxmachinetemplates" not in rule.get("resources", [])]
    mgmt.kubectl("replace", "-f", "-", stdin=json.dumps(role))
    events = len(runner.events)
    mgmt.kubectl("delete", "pods", "-n", NS, "-l", runner.selector, "--wait=false")
    started = _until(
        "the autoscaler restarted",
        lambda: next((e for e in runner.events[events:] if e["event"] == "started"), None),
    )
    log = runner.folder / started["log"]
    _until(
        "the autoscaler refused the templates",
        lambda: "proxmoxmachinetemplates" in log.read_text() and "forbidden" in log.read_text(),
    )
    audit_mark, began = len(mgmt.audit()), time.monotonic()
    _demand(lab1, mgmt, 1)
    samples = []
    while time.monotonic() - began < CONTROL_WINDOW:
        samples.append(lab.sample())
        time.sleep(POLL)
    return {
        "role": role["metadata"]["name"],
        "replicas_seen": sorted({s["replicas"] for s in samples}),
        "pending_at_end": samples[-1]["pending"],
        "scales": _scales(mgmt, audit_mark),
        "forbidden": [line for line in log.read_text().splitlines() if "proxmoxmachinetemplates" in line][:3],
    }
