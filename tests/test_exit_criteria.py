"""`make exit-criteria` and `make scaling-status` (issues 56 and 66) on what kubectl answers,
without a cluster (tests/exit_criteria_world.py): what they refuse to start without, the blockers
they name in the autoscaler's own rule order and never evict, the autoscaler restarted at 0 so
that scale-from-zero is planned from the annotations, the end states each step must reach, what
survives an API error or a signal, the cleanup checked, the exit codes, and the report. The box
runs the command itself on the lab1 the owner's takeover left (tests/test_box_takeover.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from exit_criteria_world import NOT_FOUND, QUICK, REFUSED, World, autoscaler_deployment, node

from components.settings.workload import MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION
from tools import exit_criteria, scaling_lab, scaling_picture, scaling_status
from tools.scaling_lab import CONTROL_PLANE_ROLE, Kubectl, KubectlError, RefusedError

REPO = Path(__file__).resolve().parents[1]
MGMT, LAB1 = Kubectl(Path("mgmt")), Kubectl(Path("lab1"), what="workload cluster lab1")
NOW = datetime(2026, 12, 7, tzinfo=UTC)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    """The lab kubectl answers for, at 0 workers with nothing of the owner's on them."""
    found = World()
    monkeypatch.setattr(subprocess, "run", found.run)
    return found


def typed(tmp_path: Path, *more: str) -> int:
    """The command as the Makefile runs it, on the world's lab, with no margin and no pause."""
    flags = ["--cluster", "default/lab1", "--kubeconfig", "mgmt", "--workload-kubeconfig", "lab1"]
    return exit_criteria.main([*flags, "--report-dir", str(tmp_path), "--margin", "0", "--poll", "0", *more])


def written(tmp_path: Path) -> dict[str, Any]:
    [path] = tmp_path.glob("*.json")
    found: dict[str, Any] = json.loads(path.read_text())
    return found


def verdicts(report: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(c["name"], c["passed"]) for c in report["criteria"]]


ALL_PASSED = [("scale-from-zero", True), ("scale-up 1->3", True), ("scale-down to 0", True)]


def test_go_durations_and_quantities_are_read_in_their_base_units() -> None:
    assert [scaling_lab.seconds(d) for d in ("10s", "1m30s", "15m0s", "2h", "500ms")] == [10, 90, 900, 7200, 0.5]
    with pytest.raises(ValueError, match="is not a duration"):
        scaling_lab.seconds("ten seconds")
    assert [scaling_lab.quantity(q) for q in ("8", "1500m", "16Gi", "16393244Ki", "1e3", "2k")] == [
        8,
        1.5,
        16 * 1024**3,
        16393244 * 1024,
        1000,
        2000,
    ]
    with pytest.raises(ValueError, match="is not a quantity"):
        scaling_lab.quantity("lots")


def test_the_autoscalers_flags_are_read_in_both_forms_and_its_timings_from_them(world: World) -> None:
    world.flags = ("--scan-interval", "2s", "--scale-down-unneeded-time=1m0s", "--skip-nodes-with-local-storage", "x")
    found = scaling_lab.autoscaler(MGMT, "default", "lab1")
    assert found is not None
    assert found.timings == {
        "scan-interval": 2,
        "scale-down-unneeded-time": 60,
        "scale-down-delay-after-add": 600,
        "max-node-provision-time": 900,
        "unremovable-node-recheck-timeout": 300,
    }
    # A bool flag without `=` is true and takes no value (pflag); upstream's defaults otherwise.
    assert found.skips("local-storage")
    assert found.skips("system-pods")
    assert found.status_configmap == ("kube-system", "cluster-autoscaler-status")
    assert found.image.endswith(":v1.35.2")
    world.flags = ("--skip-nodes-with-system-pods=false", "--namespace", "lab1-system")
    found = scaling_lab.autoscaler(MGMT, "default", "lab1")
    assert found is not None
    assert not found.skips("system-pods")
    assert found.status_configmap == ("lab1-system", "cluster-autoscaler-status")


@pytest.mark.parametrize(
    ("discovery", "cluster", "found"),
    [
        ("namespace=default,clusterName=lab1", "default/lab1", True),
        ("namespace=default,clusterName=lab10", "default/lab1", False),
        ("namespace=default2,clusterName=lab1", "default/lab1", False),
        ("clusterName=lab1", "edge/lab1", True),
        ("namespace=default", "default/lab7", True),
        ("namespace=default,clusterName=lab1", "default/lab", False),
    ],
)
def test_the_autoscaler_is_the_one_whose_discovery_names_the_cluster_exactly(
    discovery: str, cluster: str, found: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lab1` is not `lab10`, nor `default` `default2` (tools/scaling_lab.py matched substrings)."""
    answer = {"items": [autoscaler_deployment(discovery=discovery)]}
    monkeypatch.setattr(
        subprocess, "run", lambda line, **_: subprocess.CompletedProcess(line, 0, json.dumps(answer), "")
    )
    namespace, name = cluster.split("/")
    assert (scaling_lab.autoscaler(MGMT, namespace, name) is not None) is found


def test_each_step_is_bounded_by_the_autoscalers_timings_and_the_groups_own_annotations(world: World) -> None:
    world.flags = ("--scan-interval=2s", "--max-node-provision-time=5m")
    lab = exit_criteria.read_lab(MGMT, LAB1, "default", "lab1", margin=30)
    assert lab.bound(1) == 300 + 3 * 2 + 30
    assert lab.bound(0) == 600 + 600 + 3 * 2 + 30
    # The workers running at the start: one the autoscaler found it could not remove (a blocker
    # the owner has just taken away) is looked at again only after the recheck timeout.
    assert lab.first_bound() == lab.bound(0) + 300
    # Seven tenths of the 4 cpus the capacity annotation gives: one pod per worker.
    assert lab.millicores == 2800
    # The clusterapi provider's per-MachineDeployment options override the flags they name.
    world.annotations["cluster.x-k8s.io/autoscaling-options-maxnodeprovisiontime"] = "1m"
    world.annotations["cluster.x-k8s.io/autoscaling-options-scaledownunneededtime"] = "30s"
    lab = exit_criteria.read_lab(MGMT, LAB1, "default", "lab1", margin=30)
    assert lab.bound(1) == 60 + 3 * 2 + 30
    assert lab.bound(0) == 600 + 30 + 3 * 2 + 30


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({MIN_SIZE_ANNOTATION: "1"}, "min-size is 1, so scale-from-zero cannot happen"),
        ({MAX_SIZE_ANNOTATION: "2"}, "max-size is 2; 1->3 needs 3 (workers.maxSize)"),
        ({"capacity.cluster-autoscaler.kubernetes.io/cpu": None}, "no cpu capacity annotation"),
        ({"capacity.cluster-autoscaler.kubernetes.io/memory": None}, "no memory capacity annotation"),
        ({"capacity.cluster-autoscaler.kubernetes.io/memory": "0"}, "no memory capacity annotation"),
    ],
)
def test_what_the_node_group_lacks_is_named_before_anything_is_made(
    world: World, tmp_path: Path, change: dict[str, str | None], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both cpu and memory: the clusterapi provider scales from zero only with both
    (clusterapi_unstructured.go, CanScaleFromZero)."""
    for key, value in change.items():
        if value is None:
            del world.annotations[key]
        else:
            world.annotations[key] = value
    assert typed(tmp_path) == exit_criteria.REFUSED
    assert named in capsys.readouterr().err
    assert world.writes() == []
    assert verdicts(written(tmp_path)) == [(name, False) for name, _ in exit_criteria.CRITERIA]


def test_no_autoscaler_or_none_ready_is_refused(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(World, "deployments", lambda self: [])
    with pytest.raises(RefusedError, match="no cluster-autoscaler on the management cluster discovers default/lab1"):
        exit_criteria.read_lab(MGMT, LAB1, "default", "lab1", margin=0)
    monkeypatch.setattr(World, "deployments", lambda self: [autoscaler_deployment(ready=0)])
    with pytest.raises(RefusedError, match="the autoscaler default/lab1-autoscaler has no Ready replica"):
        exit_criteria.read_lab(MGMT, LAB1, "default", "lab1", margin=0)


def pod(
    name: str,
    *owners: str,
    namespace: str = "apps",
    tolerate: bool = True,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod of the owner's on the worker; `owners` its controllers' kinds; by default it tolerates
    every taint, so that only the rule a test is about keeps it."""
    status = spec.pop("status", {"phase": "Running"})
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": name},
            "annotations": annotations or {},
            "creationTimestamp": "2026-12-06T23:30:00Z",
            "ownerReferences": [{"kind": kind, "name": f"{name}-owner", "controller": True} for kind in owners],
        },
        "spec": {
            "nodeName": "lab1-workers-q7x2k-w0000",
            "tolerations": [{"operator": "Exists"}] if tolerate else [],
            **spec,
        },
        "status": status,
    }


def budget(name: str, allowed: int, namespace: str = "apps") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{name}-budget", "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": name}}},
        "status": {"disruptionsAllowed": allowed},
    }


EVERY_TAINT = {"tolerations": [{"operator": "Exists"}]}


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def by_role(operator: str) -> dict[str, Any]:
    """Required node affinity on the control plane's role label: DoesNotExist keeps the pod on
    workers, In lets it onto the control plane."""
    values = {"values": [""]} if operator == "In" else {}
    return _required({"matchExpressions": [{"key": CONTROL_PLANE_ROLE, "operator": operator, **values}]})


def named(*nodes: str) -> dict[str, Any]:
    """Required node affinity on the nodes' names, one term each (a pod may go where any term holds)."""
    return _required(*({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]} for n in nodes))


@pytest.mark.parametrize(
    ("case", "flags", "budgets", "why"),
    [
        (pod("mirror", annotations={exit_criteria.MIRROR: "x"}, tolerate=False), (), [], None),
        (pod("agent", "DaemonSet", tolerate=False, volumes=[{"name": "h", "hostPath": {}}]), (), [], None),
        (pod("done", status={"phase": "Succeeded"}, restartPolicy="Never", tolerate=False), (), [], None),
        (pod("failed", status={"phase": "Failed"}, tolerate=False), (), [], None),
        (pod("bare-but-safe", annotations={exit_criteria.SAFE_TO_EVICT: "true"}, tolerate=False), (), [], None),
        (pod("debug"), (), [], "no controller makes it again elsewhere (not replicated)"),
        (pod("crd", "MyOperator"), (), [], "its controller is a MyOperator"),
        (pod("crd", "MyOperator"), ("--skip-nodes-with-custom-controller-pods=false",), [], None),
        (pod("dns", "ReplicaSet", namespace="kube-system"), (), [], "a kube-system pod with no PodDisruptionBudget"),
        (pod("dns", "ReplicaSet", namespace="kube-system"), ("--skip-nodes-with-system-pods=false",), [], None),
        # pflag reads a bool flag without `=` as true, and the next word as an argument.
        (
            pod("dns", "ReplicaSet", namespace="kube-system"),
            ("--skip-nodes-with-system-pods", "false"),
            [],
            "a kube-system pod with no PodDisruptionBudget",
        ),
        (
            pod("dns", "ReplicaSet", namespace="kube-system"),
            ("--blocking-system-pod-distruption-timeout", "10m"),
            [],
            None,
        ),
        (pod("dns", "ReplicaSet", namespace="kube-system"), (), [budget("dns", 1, "kube-system")], None),
        (
            pod("db", "StatefulSet", annotations={exit_criteria.SAFE_TO_EVICT: "false"}),
            (),
            [],
            'safe-to-evict: "false"',
        ),
        (pod("cache", "ReplicaSet", volumes=[{"name": "scratch", "emptyDir": {}}]), (), [], "local storage (scratch)"),
        (pod("cache", "ReplicaSet", volumes=[{"name": "tmp", "emptyDir": {"medium": "Memory"}}]), (), [], None),
        (
            pod(
                "cache",
                "ReplicaSet",
                annotations={exit_criteria.SAFE_LOCAL_VOLUMES: "s"},
                volumes=[{"name": "s", "hostPath": {}}],
            ),
            (),
            [],
            None,
        ),
        (
            pod("cache", "ReplicaSet", volumes=[{"name": "s", "hostPath": {}}]),
            ("--skip-nodes-with-local-storage=false",),
            [],
            None,
        ),
        (pod("web", "ReplicaSet"), (), [budget("web", 0)], "its PodDisruptionBudget web-budget allows no disruption"),
        (pod("web", "ReplicaSet"), (), [budget("web", 1)], None),
        (pod("web", "ReplicaSet", tolerate=False), (), [], "at 0 workers no node would take it"),
        (pod("web", "ReplicaSet", nodeSelector={"disk": "ssd"}), (), [], "at 0 workers no node would take it"),
        (pod("web", "ReplicaSet", affinity=by_role("DoesNotExist")), (), [], "at 0 workers no node would take it"),
        (pod("web", "ReplicaSet", affinity=by_role("In")), (), [], None),
        (
            pod("web", "ReplicaSet", affinity=named("lab1-workers-q7x2k-w0000")),
            (),
            [],
            "at 0 workers no node would take it",
        ),
        (pod("web", "ReplicaSet", affinity=named("lab1-workers-q7x2k-w0000", "lab1-cp")), (), [], None),
        # The first rule that decides wins: safe-to-evict "true" before local storage and budgets,
        # no controller before local storage.
        (
            pod(
                "s",
                "ReplicaSet",
                annotations={exit_criteria.SAFE_TO_EVICT: "true"},
                volumes=[{"name": "v", "hostPath": {}}],
            ),
            (),
            [budget("s", 0)],
            None,
        ),
        (pod("bare", volumes=[{"name": "v", "hostPath": {}}]), (), [], "not replicated"),
    ],
)
def test_each_reason_the_autoscaler_keeps_a_worker_is_named_in_its_own_rule_order(
    world: World, case: dict[str, Any], flags: tuple[str, ...], budgets: list[dict[str, Any]], why: str | None
) -> None:
    """cluster-autoscaler 1.35.2's simulator/drainability/rules/rules.go, under the flags of the
    autoscaler found; then what a scale-down to 0 adds: the control plane must take the pod."""
    world.flags = QUICK + flags
    scaler = scaling_lab.autoscaler(MGMT, "default", "lab1")
    assert scaler is not None
    drain = exit_criteria.Drain(scaler, budgets, [node("lab1-cp", control_plane=True)], NOW)
    kept = exit_criteria.why_it_stays(case, drain)
    if why is None:
        assert kept is None
    else:
        assert kept is not None
        assert why in kept[0]
        assert kept[1][0] == "get"


def test_a_blocker_stops_the_run_with_nothing_made_each_named_with_the_kubectl_line_that_shows_it(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world.workers = 1
    world.owners_pods = [
        pod("debug"),
        pod("cache", "ReplicaSet", volumes=[{"name": "scratch", "emptyDir": {}}]),
        pod("done", "Job", status={"phase": "Succeeded"}, restartPolicy="Never"),
    ]
    world.worker_annotations = {exit_criteria.SCALE_DOWN_DISABLED: "true"}
    assert typed(tmp_path) == exit_criteria.REFUSED
    out = capsys.readouterr().out
    assert "node lab1-workers-q7x2k-w0000: annotated cluster-autoscaler.kubernetes.io/scale-down-disabled=true" in out
    assert "apps/debug on lab1-workers-q7x2k-w0000: no controller makes it again elsewhere" in out
    assert "kubectl --kubeconfig lab1 get pod -n apps debug -o 'jsonpath={.metadata.ownerReferences}'" in out
    assert "apps/cache on lab1-workers-q7x2k-w0000: local storage (scratch)" in out
    assert "apps/done" not in out
    assert out.count("FAILED") == 3
    assert world.writes() == []
    assert written(tmp_path)["exit"] == exit_criteria.REFUSED


def test_the_three_criteria_pass_on_a_lab_that_scales_and_nothing_is_left(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """From the owner's two workers; a demand pod that failed and was replaced (the world keeps
    one) is no demand."""
    world.workers = 2
    assert typed(tmp_path) == exit_criteria.PASSED
    report = written(tmp_path)
    assert verdicts(report) == ALL_PASSED
    assert report["exit"] == exit_criteria.PASSED
    assert report["left"] == []
    assert world.namespace is None
    assert world.jobs == {}
    assert world.workers == 0
    out = capsys.readouterr().out
    assert "namespace lab-mgmt-exit-criteria removed" in out
    # The demand is a Job that ends by itself within the run's bound, should the laptop die.
    [job] = [body for body in world.applied if body["kind"] == "Job"]
    # The bounds of 0->1 and 1->3 (none here: no timings, no margin) and a minute's slack.
    assert job["spec"]["activeDeadlineSeconds"] == exit_criteria.JOB_SLACK_SECONDS
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_the_autoscaler_is_restarted_at_zero_before_the_demand_so_scale_from_zero_comes_from_the_annotations(
    world: World, tmp_path: Path
) -> None:
    """The issue's run: a lab whose autoscaler saw its workers, and a memory annotation (32Mi)
    below what each demand pod asks (64Mi). Planned from its cache of a real worker, the
    autoscaler scaled and the criterion passed; restarted at 0 first, it plans from the
    annotations, adds nothing, and scale-from-zero fails."""
    world.workers = 2
    world.annotations["capacity.cluster-autoscaler.kubernetes.io/memory"] = "32Mi"
    assert typed(tmp_path) == exit_criteria.FAILED
    report = written(tmp_path)
    assert verdicts(report) == [("scale-from-zero", False), ("scale-up 1->3", False), ("scale-down to 0", False)]
    assert report["criteria"][0]["reason"].startswith("not at 1 workers within 0 s: ")
    assert "unschedulable=1" in report["criteria"][0]["reason"]
    # Deleted at 0 (after the owner's two went) and before the Job.
    writes = [call[:3] for call in world.writes()]
    restart = writes.index(("mgmt", "delete", "pod"))
    assert writes.index(("lab1", "apply", "-f")) < restart  # the namespace
    assert restart < len(writes) - 1 - writes[::-1].index(("lab1", "apply", "-f"))  # the Job after it
    assert report["restarts"][0]["deleted"] == ["lab1-autoscaler-0"]
    assert report["restarts"][0]["ready"] == ["lab1-autoscaler-1"]
    assert report["versions"]["autoscaler"].endswith(":v1.35.2")
    # The autoscaler's log is kept beside the report when something failed.
    [log] = tmp_path.glob("*.autoscaler.log")
    assert "no expansion options" in log.read_text()


def test_a_worker_unlike_its_annotations_fails_scale_from_zero_naming_what_differs(
    world: World, tmp_path: Path
) -> None:
    world.node_capacity = {"cpu": "4", "memory": "16Gi"}
    assert typed(tmp_path) == exit_criteria.FAILED
    reason = written(tmp_path)["criteria"][0]["reason"]
    assert (
        "lab1-workers-q7x2k-w0000 has memory 16Gi, "
        "the annotation capacity.cluster-autoscaler.kubernetes.io/memory says 8Gi" in reason
    )
    # What the kernel keeps of a VM's memory is no mismatch.
    world.node_capacity = {"cpu": "4", "memory": "8130000Ki"}
    assert typed(tmp_path / "again") == exit_criteria.PASSED


@pytest.mark.parametrize(
    ("fault", "step", "named"),
    [
        ("stale_node", "scale-down to 0", "nodes=1"),
        ("leaked_address", "scale-down to 0", "ip_addresses=1"),
        ("overshoot", "scale-from-zero", "the MachineDeployment went to 2 replicas, above this step's 1"),
    ],
)
def test_each_step_ends_only_in_its_strict_end_state(
    world: World, tmp_path: Path, fault: str, step: str, named: str
) -> None:
    """A NotReady Node left after the scale-down fails "to 0" (Cluster API gives up deleting a
    Node after 10 s); so does an IPAddress of a worker that is gone; a count above the step's
    target fails it even when it settles."""
    setattr(world, fault, 1 if fault == "overshoot" else True)
    # An overshoot settles at the next sample; the others never do, and fail at once with no margin.
    margin = "5" if fault == "overshoot" else "0"
    assert typed(tmp_path, "--margin", margin) == exit_criteria.FAILED
    [failed] = [c for c in written(tmp_path)["criteria"] if c["name"] == step]
    assert named in failed["reason"]
    if fault == "stale_node":
        assert "worker Nodes: lab1-workers-q7x2k-w0002 (NotReady)" in failed["reason"]


def test_a_scale_down_before_the_groups_unneeded_time_is_named(world: World, tmp_path: Path) -> None:
    world.annotations["cluster.x-k8s.io/autoscaling-options-scaledownunneededtime"] = "1h"
    assert typed(tmp_path, "--margin", "5") == exit_criteria.FAILED
    [down] = [c for c in written(tmp_path)["criteria"] if c["name"] == "scale-down to 0"]
    assert "before scale-down-unneeded-time (3600 s)" in down["reason"]


def test_pending_means_unschedulable_not_a_pod_pulling_its_image(world: World) -> None:
    pulling = {"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}}
    waiting = {
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    }
    assert not exit_criteria.unschedulable(pulling)
    assert exit_criteria.unschedulable(waiting)


# What kubectl says while a restarted API server does not serve the CRDs' kinds yet.
UNSERVED = (
    'error: the server doesn\'t have a resource type "machinedeployments"',
    "Error from server (NotFound): the server could not find the requested resource (get machines.cluster.x-k8s.io)",
)


@pytest.mark.parametrize("error", [REFUSED, *UNSERVED])
def test_a_transient_api_error_mid_run_is_asked_again_within_the_steps_bound(
    world: World, tmp_path: Path, error: str
) -> None:
    sample = f"mgmt get {','.join(exit_criteria.CAPI_KINDS)}"
    # From the namespace's making on: what was read before it is the refusal's to fail.
    world.hooks = {"lab1 apply": lambda: world.answers.update({sample: [(1, error)] * 3})}
    world.answers = {"lab1 patch job": [(1, REFUSED)]}
    assert typed(tmp_path, "--margin", "30") == exit_criteria.PASSED
    assert verdicts(written(tmp_path)) == ALL_PASSED


def test_an_error_that_asking_again_does_not_cure_fails_the_run_and_still_cleans_up(
    world: World, tmp_path: Path
) -> None:
    world.answers = {"lab1 patch job": [(1, 'Error from server (Forbidden): jobs.batch "demand-1" is forbidden')]}
    assert typed(tmp_path, "--margin", "30") == exit_criteria.FAILED
    report = written(tmp_path)
    assert "Forbidden" in report["stopped"]
    assert verdicts(report)[0] == ("scale-from-zero", True)
    assert report["criteria"][1]["reason"].startswith("not run to its end: asking again did not help")
    assert world.namespace is None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_mid_run_writes_the_report_removes_the_demand_and_exits_3(
    world: World, tmp_path: Path, signum: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C, SIGTERM and a closed terminal alike; a second signal during the removal is only
    noted, so it does not cut the removal short."""
    world.hooks = {
        "lab1 patch job": lambda: os.kill(os.getpid(), signum),
        f"lab1 delete namespace {exit_criteria.NAMESPACE}": lambda: os.kill(os.getpid(), signal.SIGTERM),
    }
    assert typed(tmp_path) == exit_criteria.INTERRUPTED
    report = written(tmp_path)
    assert report["stopped"] == f"{signal.Signals(signum).name}: the run was interrupted"
    assert verdicts(report) == [("scale-from-zero", True), ("scale-up 1->3", False), ("scale-down to 0", False)]
    assert report["left"] == []
    assert (world.namespace, world.jobs) == (None, {})
    assert "SIGTERM: noted; the removal goes on" in capsys.readouterr().err
    assert signal.getsignal(signum) is not exit_criteria._interrupted


def test_a_removal_that_fails_is_named_and_exits_3(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world.answers = {f"lab1 delete namespace {exit_criteria.NAMESPACE}": [(1, "Error from server (Forbidden): no")]}
    assert typed(tmp_path) == exit_criteria.INTERRUPTED
    report = written(tmp_path)
    assert verdicts(report) == ALL_PASSED
    [left] = report["left"]
    assert left.startswith(f"namespace {exit_criteria.NAMESPACE} in the workload cluster, not removed")
    assert "left behind, to remove by hand" in capsys.readouterr().err


def test_a_namespace_of_that_name_not_the_commands_is_refused_and_never_deleted(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world.namespace = {"kind": "Namespace", "metadata": {"name": exit_criteria.NAMESPACE, "labels": {}}}
    assert typed(tmp_path) == exit_criteria.REFUSED
    assert "is not the command's" in capsys.readouterr().err
    assert world.writes() == []
    assert world.namespace is not None


def test_the_commands_own_namespace_left_by_a_killed_run_is_removed_first(world: World, tmp_path: Path) -> None:
    world.namespace = {
        "kind": "Namespace",
        "metadata": {"name": exit_criteria.NAMESPACE, "labels": exit_criteria.MADE_BY},
    }
    assert typed(tmp_path) == exit_criteria.PASSED
    assert world.writes()[0][:3] == ("lab1", "delete", "namespace")


def test_kubectls_process_outlives_kubectls_own_timeout_and_a_hung_one_is_an_error_asked_again(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert typed(tmp_path) == exit_criteria.PASSED
    for line, allowed in world.limits:
        limit = line[-1]
        waits = scaling_lab.seconds(limit.split("=", 1)[1])
        assert limit.startswith(("--timeout=", "--request-timeout=")), line
        assert allowed > waits, line
    deletes = [limit for line, limit in world.limits if line[1:3] == ("delete", "namespace")]
    assert deletes
    assert all(limit > exit_criteria.CLEANUP_SECONDS for limit in deletes)

    def hung(line: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(line, kwargs["timeout"])

    monkeypatch.setattr(subprocess, "run", hung)
    with pytest.raises(KubectlError, match="did not answer within 60 s") as raised:
        MGMT.items("nodes")
    assert raised.value.transient


def test_repeat_runs_the_three_again_and_reports_min_median_max(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert typed(tmp_path, "--repeat", "3") == exit_criteria.PASSED
    report = written(tmp_path)
    assert [(c["name"], c["run"]) for c in report["criteria"]] == [
        (name, run) for run in (1, 2, 3) for name, _ in exit_criteria.CRITERIA
    ]
    assert set(report["summary"]) == {name for name, _ in exit_criteria.CRITERIA}
    assert report["summary"]["scale-from-zero"]["runs"] == 3
    assert world.restarts == 3
    out = capsys.readouterr().out
    assert "scale-up 1->3 #3" in out
    assert "median s" in out


def test_the_report_keeps_the_versions_and_what_the_autoscaler_saw_and_goes_outside_the_clone(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    flags = [
        "--cluster",
        "lab1",
        "--kubeconfig",
        "mgmt",
        "--workload-kubeconfig",
        "lab1",
        "--margin",
        "0",
        "--poll",
        "0",
    ]
    assert exit_criteria.main(flags) == exit_criteria.PASSED
    [path] = (tmp_path / "lab-mgmt-exit-criteria").glob("*/exit-criteria-default-lab1-*.json")
    report = json.loads(path.read_text())
    assert report["versions"] == {
        "autoscaler": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.2",
        "kubernetes": {"management": "v1.35.0+k3s1", "workload": "v1.35.0"},
        "cluster-api": ["registry.k8s.io/cluster-api/cluster-api-controller:v1.12.11"],
        "capmox": [],
        "ipam": [],
        "lab-mgmt": "0123abc",
    }
    assert "Healthy" in report["autoscalerSaw"]["status"]
    assert [e["reason"] for e in report["autoscalerSaw"]["events"]] == ["TriggeredScaleUp"]
    assert path.with_suffix(".svg").read_text().startswith("<svg")
    assert not path.with_suffix(".autoscaler.log").exists()


@pytest.fixture
def proxmox(world: World) -> Iterator[tuple[str, list[str]]]:
    """Proxmox VE's API on 127.0.0.1, answering /cluster/resources?type=vm from the world; its
    address and the Authorization header of each request."""
    seen: list[str] = []

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            found = self.path == "/api2/json/cluster/resources?type=vm"
            body = json.dumps({"data": world.vms()} if found else {}).encode()
            self.send_response(200 if found else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", seen
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize("left", [False, True])
def test_with_a_proxmox_token_the_workers_vms_are_read_and_one_left_fails_scale_down(
    world: World, tmp_path: Path, proxmox: tuple[str, list[str]], left: bool
) -> None:
    endpoint, asked = proxmox
    token = tmp_path / "token"
    token.write_text("auditor@pve!ro=s3cret\n")
    world.vm_left = left
    flags = ("--proxmox-endpoint", endpoint, "--proxmox-token-file", str(token))
    assert typed(tmp_path / "report", *flags) == (exit_criteria.FAILED if left else exit_criteria.PASSED)
    report = written(tmp_path / "report")
    assert {row[1] for row in report["timeline"]} >= {"vms"}
    assert set(asked) == {"PVEAPIToken=auditor@pve!ro=s3cret"}
    if left:
        assert "vms=1" in report["criteria"][2]["reason"]
        assert "the workers' VMs: 399 lab1-workers-q7x2k-w0002" in report["criteria"][2]["reason"]
    else:
        assert verdicts(report) == ALL_PASSED


def test_a_workers_vm_no_proxmox_machine_holds_is_named_before_anything_is_made(
    world: World, tmp_path: Path, proxmox: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    # A clone whose answer CAPMOX lost: the VM has a running worker's name and an id no
    # ProxmoxMachine recorded. Beside it, VMs that are not this MachineDeployment's: another
    # deployment's, another cluster's (lab10), and a worker's VM still being cloned.
    world.workers = 2
    world.strays = [
        {"vmid": 398, "name": "lab1-workers-q7x2k-w0000", "node": "pve1", "status": "stopped"},
        {"vmid": 397, "name": "lab1-workers-gpu-q7x2k-w0000", "node": "pve1", "status": "stopped"},
        {"vmid": 396, "name": "lab10-workers-q7x2k-w0000", "node": "pve1", "status": "running"},
    ]
    token = tmp_path / "token"
    token.write_text("auditor@pve!ro=s3cret\n")
    flags = ("--proxmox-endpoint", proxmox[0], "--proxmox-token-file", str(token))
    assert typed(tmp_path / "report", *flags) == exit_criteria.REFUSED
    out = capsys.readouterr().err
    assert "VM 398 lab1-workers-q7x2k-w0000 on pve1 (stopped): a worker's VM that no ProxmoxMachine holds" in out
    assert "qm config 398   and once it is no one's: qm destroy 398 --purge" in out
    assert "397" not in out
    assert "396" not in out
    assert world.writes() == []
    # Destroyed as the line says, the others left as they are: the run goes on and passes.
    world.strays = world.strays[1:]
    assert typed(tmp_path / "again", *flags) == exit_criteria.PASSED


def test_proxmox_ves_refusal_is_named_before_anything_is_made(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = tmp_path / "token"
    token.write_text("auditor@pve!ro=s3cret")
    flags = ("--proxmox-endpoint", "ftp://127.0.0.1/", "--proxmox-token-file", str(token))
    assert typed(tmp_path / "report", *flags) == exit_criteria.REFUSED
    assert "is not an http(s) address" in capsys.readouterr().err
    assert typed(tmp_path / "report", "--proxmox-endpoint", "http://127.0.0.1:9/") == exit_criteria.REFUSED
    assert "--proxmox-endpoint needs --proxmox-token-file" in capsys.readouterr().err
    assert world.writes() == []


def test_milestones_are_what_moved_first_in_each_criterion() -> None:
    timeline = [
        [0.0, "replicas", 0],
        [3.0, "unschedulable", 1],
        [5.0, "replicas", 1],
        [20.0, "workers", 1],
        [30.0, "unschedulable", 3],
    ]
    results = [
        {"name": "from", "started": 2.0, "first_row": 1, "passed": True},
        {"name": "up", "started": 25.0, "first_row": 4, "passed": True},
        {"name": "down", "passed": False, "reason": "not run"},
    ]
    assert exit_criteria.milestones(timeline, results) == [
        {"criterion": "from", "seconds": 1.0, "unschedulable": 1},
        {"criterion": "from", "seconds": 3.0, "replicas": 1},
        {"criterion": "from", "seconds": 18.0, "workers": 1},
        {"criterion": "up", "seconds": 5.0, "unschedulable": 3},
    ]
    assert exit_criteria.milestones(timeline, [{"name": "from", "passed": False, "reason": "not run"}]) == []


def test_the_picture_draws_both_counts_and_marks_each_criterion() -> None:
    timeline = [[0.0, "workers", 0], [0.0, "unschedulable", 1], [12.0, "workers", 1], [12.0, "unschedulable", 0]]
    results = [
        {"name": "scale-from-zero", "started": 0.0, "seconds": 12.0, "passed": True},
        {"name": "scale-up 1->3", "started": 12.0, "seconds": 5.0, "passed": False},
    ]
    picture = scaling_picture.svg(timeline, results, title="default/lab1")
    assert picture.startswith("<svg")
    assert picture.rstrip().endswith("</svg>")
    assert picture.count("<polyline") == 2
    assert "scale-from-zero: passed" in picture
    assert "scale-up 1-&gt;3: FAILED" in picture


def test_scaling_status_shows_the_node_groups_the_autoscaler_and_its_decisions() -> None:
    found = scaling_status.Status(
        node_groups=[scaling_lab.NodeGroup("default", "lab1-workers", 0, 3, {"cpu": "4"}, 0)],
        autoscaler=scaling_lab.Autoscaler("default", "lab1-autoscaler", 1, {"scan-interval": 10.0}),
        status="autoscalerStatus: Running\nclusterWide:\n  health:\n    status: Healthy",
        events=[{"at": "2026-12-06T03:00:00Z", "reason": "ScaledUpGroup", "object": "Pod/demand-1", "message": "1->2"}],
    )
    shown = scaling_status.show(found)
    assert "default/lab1-workers: min 0, max 3, replicas 0, capacity cpu=4" in shown
    assert "autoscaler: default/lab1-autoscaler, 1 Ready; scan-interval 10s" in shown
    assert "      status: Healthy" in shown
    assert "ScaledUpGroup  Pod/demand-1: 1->2" in shown


def test_scaling_status_reads_the_status_configmap_where_the_autoscalers_flags_put_it(world: World) -> None:
    found = scaling_status.status(MGMT, LAB1, "default", "lab1")
    assert found.status is not None
    assert "Healthy" in found.status
    world.flags = ("--namespace=elsewhere",)
    world.answers = {"lab1 get configmap cluster-autoscaler-status -n elsewhere": [(1, NOT_FOUND)]}
    assert scaling_status.status(MGMT, LAB1, "default", "lab1").status is None


def test_the_make_target_and_the_docs_name_the_command_its_codes_and_its_report_folder() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "-m tools.exit_criteria --cluster $(CLUSTER)" in makefile
    assert "-m tools.scaling_status --cluster $(CLUSTER)" in makefile
    assert "~/lab-mgmt-exit-criteria/" in makefile
    for page in ("README.md", "docs/operations.md"):
        assert "make exit-criteria CLUSTER=lab1" in (REPO / page).read_text(), page
    operations = (REPO / "docs/operations.md").read_text()
    section = operations.split("### Phase 1's exit criteria")[1].split("\n### ")[0]
    assert "make scaling-status CLUSTER=lab1" in section
    for said in ("--report-dir", "~/lab-mgmt-exit-criteria/", "--repeat", "exit 3", "SIGHUP", "restart"):
        assert said in section, said
    doc = exit_criteria.__doc__ or ""
    assert "Exit 0 all passed, 1 a criterion\nfailed, 2 refused before anything was made, 3 interrupted" in doc


def test_an_unreachable_lab_is_refused_by_both_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = scaling_lab.arguments("").parse_args(
        ["--cluster", "edge/edge1", "--kubeconfig", "~/k", "--kubectl", "false"]
    )
    mgmt, namespace, name = scaling_lab.reached(args)
    assert (namespace, name, mgmt.kubeconfig, mgmt.binary) == ("edge", "edge1", Path("~/k").expanduser(), "false")
    assert scaling_lab.reached(scaling_lab.arguments("").parse_args(["--cluster", "lab1"]))[1:] == ("default", "lab1")
    # kubectl failing (here `false`): refused with its words, nothing made, exit 2, for both commands.
    assert exit_criteria.main(["--cluster", "edge/edge1", "--kubectl", "false", "--report-dir", str(tmp_path)]) == 2
    assert scaling_status.main(["--cluster", "edge/edge1", "--kubectl", "false"]) == 2
    assert "kubectl get secret edge1-kubeconfig -n edge" in capsys.readouterr().err
    assert written(tmp_path)["refused"]
