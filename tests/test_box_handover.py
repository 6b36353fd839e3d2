"""The HelmChart hand-over (components/scripts/helmchart_handover.sh) against a real
kube-apiserver and etcd, in a network namespace of the test's own, with the playbook's HelmCharts
(helm-controller's finalizer on) and Helm release Secrets in place: what it asked the API server,
in which order, is read from the server's audit log. Selected with `pytest -m engine`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.box import scenarios
from e2e.engine.netns import in_new_netns
from e2e.standins.cluster import playbook_lab

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def handover(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("handover")
    return in_new_netns("management.handover.helmchart_handover", str(root), addresses=[scenarios.VM_ADDRESS])


def writes(run: dict[str, Any], resource: str) -> list[list[Any]]:
    return [request for request in run["requests"] if request[0] in scenarios.WRITES and request[1] == resource]


UNMANAGED = {"metadata": {"annotations": {"helmcharts.helm.cattle.io/unmanaged": "true"}}}
NO_FINALIZERS = {"metadata": {"finalizers": None}}


def test_each_chart_is_unmanaged_first_then_freed_of_its_finalizer_then_deleted(handover: Any) -> None:
    """helm-controller runs `helm delete` for a chart it manages when the chart goes: the
    annotation must be on before the finalizer comes off, and both before the delete."""
    first = handover["runs"][0]
    assert first["rc"] == 0, first
    expected = []
    for name in playbook_lab.HANDED_OVER:
        expected += [
            ["patch", "helmcharts", name, UNMANAGED],
            ["patch", "helmcharts", name, NO_FINALIZERS],
            ["delete", "helmcharts", name, None],
        ]
    assert writes(first, "helmcharts") == expected
    for name in playbook_lab.HANDED_OVER:
        assert f"{name}: annotated helmcharts.helm.cattle.io/unmanaged=true" in first["stdout"]


def test_the_releases_are_untouched_and_no_chart_is_left(handover: Any) -> None:
    for run in handover["runs"]:
        assert writes(run, "secrets") == []
    assert handover["releases_after"] == handover["releases_before"]
    assert len(handover["releases_before"]) == len(playbook_lab.HANDED_OVER)
    assert handover["charts_left"] == []


def test_the_manifests_move_out_of_k3s_reach(handover: Any) -> None:
    assert handover["manifests_left"] == []
    assert handover["handed_over_files"] == [f"{name}.yaml" for name in playbook_lab.HANDED_OVER]


def test_a_second_run_changes_nothing_and_says_so(handover: Any) -> None:
    second = handover["runs"][1]
    assert second["rc"] == 0, second
    assert [request for request in second["requests"] if request[0] in scenarios.WRITES] == []
    for name in playbook_lab.HANDED_OVER:
        assert f"{name}: not present" in second["stdout"]
