"""`make exit-criteria` and `make scaling-status` (issue 56) on what kubectl answers, without a
cluster: what they refuse to start without, the bounds they wait within, the blockers they name
and never evict, and the report's milestones and picture. The box runs the command itself on the
lab1 the owner's takeover left (tests/test_box_takeover.py)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from components.settings.workload import MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION
from tools import exit_criteria, scaling_lab, scaling_picture, scaling_status
from tools.scaling_lab import Kubectl, RefusedError

REPO = Path(__file__).resolve().parents[1]


def deployment(**annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "lab1-workers",
            "namespace": "default",
            "annotations": {
                MIN_SIZE_ANNOTATION: "0",
                MAX_SIZE_ANNOTATION: "3",
                "capacity.cluster-autoscaler.kubernetes.io/cpu": "4",
                **annotations,
            },
        },
        "spec": {"replicas": 0},
    }


def autoscaler_deployment(*args: str, ready: int = 1) -> dict[str, Any]:
    argv = [
        "./cluster-autoscaler",
        "--cloud-provider=clusterapi",
        "--node-group-auto-discovery=clusterapi:namespace=default,clusterName=lab1",
        *args,
    ]
    return {
        "metadata": {"name": "lab1-autoscaler", "namespace": "default"},
        "spec": {"template": {"spec": {"containers": [{"name": "autoscaler", "command": argv}]}}},
        "status": {"readyReplicas": ready},
    }


@dataclasses.dataclass(frozen=True)
class Answers(Kubectl):
    """kubectl answering `get` from `found` (its first argument -> items); anything else refused."""

    found: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        raise AssertionError(f"nothing is written or run while reading: kubectl {' '.join(args)}")

    def items(self, *args: str) -> list[dict[str, Any]]:
        if args[0] not in self.found:
            raise AssertionError(f"kubectl get {' '.join(args)}: not an answer the test gives")
        return self.found[args[0]]


def lab_answers(group: dict[str, Any] | None = None, scaler: dict[str, Any] | None = None) -> tuple[Answers, Answers]:
    """The management cluster with `group` and `scaler` (an empty dict: no autoscaler at all)."""
    mgmt = Answers(Path("mgmt"), found={"machinedeployments": [group or deployment()], "deployments": []})
    if scaler != {}:
        mgmt.found["deployments"].append(scaler or autoscaler_deployment())
    workload = Answers(Path("lab1"), found={"nodes": [], "pods": []})
    return mgmt, workload


def test_go_durations_are_read_in_seconds() -> None:
    assert [scaling_lab.seconds(d) for d in ("10s", "1m30s", "15m0s", "2h", "500ms")] == [10, 90, 900, 7200, 0.5]
    with pytest.raises(ValueError, match="is not a duration"):
        scaling_lab.seconds("ten seconds")


def test_the_autoscalers_timings_come_from_its_flags_and_upstreams_defaults() -> None:
    mgmt, _ = lab_answers(scaler=autoscaler_deployment("--scan-interval=2s", "--scale-down-unneeded-time=1m0s"))
    found = scaling_lab.autoscaler(mgmt, "default", "lab1")
    assert found is not None
    assert found.timings == {
        "scan-interval": 2,
        "scale-down-unneeded-time": 60,
        "scale-down-delay-after-add": 600,
        "max-node-provision-time": 900,
    }
    assert scaling_lab.autoscaler(mgmt, "default", "lab2") is None
    assert scaling_lab.autoscaler(mgmt, "other", "lab1") is None


def test_each_step_is_bounded_by_the_autoscalers_own_timings() -> None:
    mgmt, workload = lab_answers(scaler=autoscaler_deployment("--scan-interval=2s", "--max-node-provision-time=5m"))
    lab = exit_criteria.read_lab(mgmt, workload, "default", "lab1", margin=30)
    assert lab.bound(1) == 300 + 3 * 2 + 30
    assert lab.bound(0) == 600 + 600 + 3 * 2 + 30
    # Seven tenths of the 4 cpus the capacity annotation gives: one pod per worker.
    assert lab.millicores == 2800


@pytest.mark.parametrize(
    ("group", "scaler", "named"),
    [
        (deployment(**{MIN_SIZE_ANNOTATION: "1"}), None, "min-size is 1, so scale-from-zero cannot happen"),
        (deployment(**{MAX_SIZE_ANNOTATION: "2"}), None, "max-size is 2; 1->3 needs 3 (workers.maxSize)"),
        (
            {
                **deployment(),
                "metadata": {
                    **deployment()["metadata"],
                    "annotations": {MIN_SIZE_ANNOTATION: "0", MAX_SIZE_ANNOTATION: "3"},
                },
            },
            None,
            "no capacity cpu annotation",
        ),
        (None, {}, "no cluster-autoscaler on the management cluster discovers default/lab1"),
        (None, autoscaler_deployment(ready=0), "the autoscaler default/lab1-autoscaler has no Ready replica"),
    ],
)
def test_what_the_lab_lacks_is_named_before_anything_is_made(group: Any, scaler: Any, named: str) -> None:
    mgmt, workload = lab_answers(group, scaler)
    with pytest.raises(RefusedError, match=named.replace("(", r"\(").replace(")", r"\)")):
        exit_criteria.read_lab(mgmt, workload, "default", "lab1", margin=0)


def test_a_pod_of_the_owners_on_a_worker_is_named_as_a_blocker() -> None:
    mgmt, workload = lab_answers()
    workload.found["nodes"] = [
        {"metadata": {"name": "lab1-workers-a", "labels": {}}},
        {"metadata": {"name": "lab1-cp", "labels": {scaling_lab.CONTROL_PLANE_ROLE: ""}}},
    ]

    def pod(name: str, node: str, *owners: str, tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": "apps", "ownerReferences": [{"kind": o} for o in owners]},
            "spec": {"nodeName": node, "tolerations": tolerations or []},
        }

    workload.found["pods"] = [
        pod("db-0", "lab1-workers-a", "StatefulSet"),
        pod("debug", "lab1-workers-a"),
        pod("cilium-x", "lab1-workers-a", "DaemonSet"),
        pod("coredns-1", "lab1-workers-a", "ReplicaSet", tolerations=[{"key": scaling_lab.CONTROL_PLANE_ROLE}]),
        pod("cilium-operator-1", "lab1-workers-a", "ReplicaSet", tolerations=[{"operator": "Exists"}]),
        pod("web-1", "lab1-cp", "ReplicaSet"),
    ]
    lab = exit_criteria.read_lab(mgmt, workload, "default", "lab1", margin=0)
    assert exit_criteria.blockers(lab) == [
        "apps/db-0 on lab1-workers-a: at 0 workers no node would take it (it does not tolerate the control "
        "plane's taint)",
        "apps/debug on lab1-workers-a: no controller makes it again elsewhere, so the autoscaler does not "
        "remove its node",
    ]


def test_milestones_are_what_moved_first_in_each_criterion() -> None:
    timeline = [
        [0.0, "replicas", 0],
        [3.0, "pending", 1],
        [5.0, "replicas", 1],
        [20.0, "workers", 1],
        [30.0, "pending", 3],
    ]
    results = [
        {"name": "from", "started": 2.0, "first_row": 1, "passed": True},
        {"name": "up", "started": 25.0, "first_row": 4, "passed": True},
        {"name": "down", "passed": False, "reason": "not run"},
    ]
    assert exit_criteria.milestones(timeline, results) == [
        {"criterion": "from", "seconds": 1.0, "pending": 1},
        {"criterion": "from", "seconds": 3.0, "replicas": 1},
        {"criterion": "from", "seconds": 18.0, "workers": 1},
        {"criterion": "up", "seconds": 5.0, "pending": 3},
    ]
    # Refused before anything ran (a blocker named): no milestone, and the report is still written.
    assert exit_criteria.milestones(timeline, [{"name": "from", "passed": False, "reason": "not run"}]) == []


def test_the_picture_draws_both_counts_and_marks_each_criterion() -> None:
    timeline = [[0.0, "workers", 0], [0.0, "pending", 1], [12.0, "workers", 1], [12.0, "pending", 0]]
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
        node_groups=[scaling_lab.NodeGroup.of(deployment())],
        autoscaler=scaling_lab.Autoscaler("default", "lab1-autoscaler", 1, {"scan-interval": 10.0}),
        status="Cluster-autoscaler status at 2026-12-06:\nHealth: Healthy",
        events=[{"at": "2026-12-06T03:00:00Z", "reason": "ScaledUpGroup", "object": "Pod/demand-1", "message": "1->2"}],
    )
    shown = scaling_status.show(found)
    assert "default/lab1-workers: min 0, max 3, replicas 0, capacity cpu=4" in shown
    assert "autoscaler: default/lab1-autoscaler, 1 Ready; scan-interval 10s" in shown
    assert "  Health: Healthy" in shown
    assert "ScaledUpGroup  Pod/demand-1: 1->2" in shown
    assert json.loads(json.dumps(dataclasses.asdict(found)))["node_groups"][0]["max_size"] == 3


def test_the_make_targets_and_the_docs_name_the_command_as_the_box_types_it() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "-m tools.exit_criteria --cluster $(CLUSTER)" in makefile
    assert "-m tools.scaling_status --cluster $(CLUSTER)" in makefile
    for page in ("README.md", "docs/operations.md"):
        assert "make exit-criteria CLUSTER=lab1" in (REPO / page).read_text(), page
    assert "make scaling-status CLUSTER=lab1" in (REPO / "docs/operations.md").read_text()


def test_a_run_refused_for_a_blocker_still_writes_its_report_and_picture(tmp_path: Path) -> None:
    mgmt, workload = lab_answers()
    lab = exit_criteria.read_lab(mgmt, workload, "default", "lab1", margin=0)
    failed = [{"name": name, "passed": False, "reason": "not run: apps/db-0 …"} for name, _ in exit_criteria.CRITERIA]
    path = exit_criteria.report(lab, "default/lab1", failed, exit_criteria.Timeline(), tmp_path)
    written = json.loads(path.read_text())
    assert [c["passed"] for c in written["criteria"]] == [False, False, False]
    assert (written["milestones"], written["timeline"]) == ([], [])
    assert path.with_suffix(".svg").read_text().startswith("<svg")


def test_the_cluster_is_named_with_its_namespace_and_an_unreachable_lab_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = scaling_lab.arguments("").parse_args(
        ["--cluster", "edge/edge1", "--kubeconfig", "~/k", "--kubectl", "false"]
    )
    mgmt, namespace, name = scaling_lab.reached(args)
    assert (namespace, name, mgmt.kubeconfig, mgmt.binary) == ("edge", "edge1", Path("~/k").expanduser(), "false")
    assert scaling_lab.reached(scaling_lab.arguments("").parse_args(["--cluster", "lab1"]))[1:] == ("default", "lab1")
    # kubectl failing (here `false`): refused with its words, nothing made, exit 2, for both commands.
    assert exit_criteria.main(["--cluster", "edge/edge1", "--kubectl", "false", "--report-dir", "/nonexistent"]) == 2
    assert scaling_status.main(["--cluster", "edge/edge1", "--kubectl", "false"]) == 2
    assert "kubectl get secret edge1-kubeconfig -n edge" in capsys.readouterr().err
