"""The HelmChart hand-over (components/scripts/helmchart_handover.sh) against a real
kube-apiserver and etcd with k3s's real helm-controller running (issue 67), in a network namespace
of the test's own, with the playbook's HelmCharts in place and their releases installed by
helm-controller's Jobs, whose pods run klipper-helm's `entry` with Helm v4.1.4 as the lab's k3s
runs them: what the script asked the API server, in which order, and what helm-controller did about
it, are read from the server's audit log. Selected with `pytest -m engine`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.box import scenarios
from e2e.box.management import handover as scenario
from e2e.box.management import k3s_charts
from e2e.engine.netns import in_new_netns
from e2e.standins.cluster import playbook_lab
from e2e.standins.guest import k3s_deploy

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
    annotation must be on before the finalizer comes off, and both before the delete. (The
    first chart's annotation was put on by the run cut off before: kubectl sends an empty patch.)"""
    first = handover["runs"][0]
    assert first["rc"] == 0, first
    expected = []
    for name in playbook_lab.HANDED_OVER:
        expected += [
            ["patch", "helmcharts", name, {} if name == playbook_lab.HANDED_OVER[0] else UNMANAGED],
            ["patch", "helmcharts", name, NO_FINALIZERS],
            ["delete", "helmcharts", name, None],
        ]
    assert writes(first, "helmcharts") == expected
    for name in playbook_lab.HANDED_OVER:
        assert f"{name}: annotated helmcharts.helm.cattle.io/unmanaged=true" in first["stdout"]


def test_a_run_cut_off_before_its_delete_leaves_the_chart_alone_and_the_next_run_converges(handover: Any) -> None:
    """The session dropped between the first chart's finalizer removal and its delete: the chart
    is left unmanaged and without its finalizer, which helm-controller leaves alone (no helm-delete
    Job: test_helm_controller_runs_no_helm_delete_and_takes_away_what_it_made); typed again, the
    script takes it from there (the order above is the second run's) and the third run finds
    nothing to do."""
    cut = handover["cut"]
    assert cut["rc"] != 0
    assert "the session dropped here" in cut["stderr"]
    first = playbook_lab.HANDED_OVER[0]
    assert writes(cut, "helmcharts") == [
        ["patch", "helmcharts", first, UNMANAGED],
        ["patch", "helmcharts", first, NO_FINALIZERS],
    ]
    assert f"{first}: no manifest file defines it" in handover["runs"][0]["stdout"]


def test_the_releases_are_untouched_and_no_chart_is_left(handover: Any) -> None:
    for run in [handover["cut"], *handover["runs"]]:
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


def test_helm_controller_makes_for_each_chart_its_helpers_its_job_and_the_jobs_pod(handover: Any) -> None:
    """What the journey's step 3 expects helm-controller to take away with each chart
    (k3s_charts.made_for_a_chart), each marked with the chart as its objectset owner, which that
    removal goes by; and the Job's pod, which the job controller made."""
    for name in playbook_lab.HANDED_OVER:
        made = [o for o in handover["made"][name] if o["kind"] != "Pod"]
        assert sorted((f"{o['kind'].lower()}s", o["name"]) for o in made) == sorted(k3s_charts.made_for_a_chart(name))
        assert {o["annotations"].get(k3s_charts.OWNER_NAME_KEY) for o in made} == {name}
        [pod] = [o for o in handover["made"][name] if o["kind"] == "Pod"]
        assert pod["owners"] == [f"helm-install-{name}"]


def test_helm_controller_runs_no_helm_delete_and_takes_away_what_it_made(handover: Any) -> None:
    """Owner's reading 5, A: once a HelmChart goes, helm-controller deletes its install Job and
    the Job's helpers, `unmanaged` or not, and the garbage collector the Job's pod; it makes no
    helm-delete Job. A script changed to delete a chart with the finalizer on fails here: the
    control below shows the helm-delete Job such a delete gets."""
    writes = handover["controller_writes"]
    assert [w for w in writes if w[0] == "create" and w[1] == "jobs"] == []
    expected = sorted(made for chart in playbook_lab.HANDED_OVER for made in k3s_charts.made_for_a_chart(chart))
    assert sorted((w[1], w[2]) for w in writes if w[0] == "delete") == expected
    # Each pod of the Jobs, once or more: the garbage collector asks again while the job
    # controller takes its tracking finalizer off.
    pods = {w[2] for w in handover["collector_writes"] if w[:2] == ["delete", "pods"]}
    assert sorted(pod.rsplit("-", 1)[0] for pod in pods) == sorted(
        f"helm-install-{c}" for c in playbook_lab.HANDED_OVER
    )


def test_a_restarted_helm_controller_changes_nothing(handover: Any) -> None:
    """As a restarted k3s restarts it: it lists what is left and writes nothing of the charts,
    their releases or what it made for them."""
    touched = {"helmcharts", "jobs", "pods", "secrets", "configmaps", "serviceaccounts", "clusterrolebindings"}
    assert [w for w in handover["restarted_writes"] if w[1] in touched] == []
    assert handover["releases_after"] == handover["releases_before"]


def test_k3s_restarted_after_the_hand_over_brings_no_chart_back(handover: Any) -> None:
    """k3s's deploy controller (its stand-in, e2e/standins/guest/k3s_deploy.py) made the playbook's
    HelmCharts from their files, each owned by the Addon named after its file; restarted after
    the hand-over, its first pass applies whatever the manifests folder holds, and the moved files
    are not there: no chart comes back."""
    for chart in handover["charts_before"]:
        annotations = chart["metadata"]["annotations"]
        assert annotations[k3s_deploy.OWNER_GVK] == "k3s.cattle.io/v1, Kind=Addon"
        assert annotations[k3s_charts.OWNER_NAME_KEY] == chart["metadata"]["name"]
    assert [w for w in handover["k3s_restarted_writes"] if w[1] == "helmcharts"] == []
    assert handover["charts_after_k3s_restart"] == []


def test_a_manifest_left_brings_its_chart_back_managed_and_installed_again(handover: Any) -> None:
    """The control of the hand-over's move: a handed-over file put back in the manifests folder,
    k3s restarted, and the chart is back without the unmanaged annotation, and helm-controller
    makes its install Job, which would install over the release the program now keeps."""
    left, name = handover["manifest_left"], playbook_lab.HANDED_OVER[0]
    assert left["chart"]["metadata"]["name"] == name
    assert "helmcharts.helm.cattle.io/unmanaged" not in left["chart"]["metadata"]["annotations"]
    assert left["job"]["name"] == f"helm-install-{name}"


def test_each_release_is_installed_by_its_charts_job_as_the_labs_k3s_installs_it(handover: Any) -> None:
    """Each install Job's pod ran klipper-helm's `entry` to its end (helm-controller's Job, its
    arguments, environment and volumes), which fetched the chart from the HelmChart's `repo` URL
    and installed it with Helm v4.1.4: revision 1, deployed, the HelmChart's version and values,
    applied server-side (`apply_method: ssa`, which Helm v3 never records)."""
    assert "failed" not in handover, handover.get("failed")
    assert handover["pod_errors"] == []
    assert handover["chart_unknown"] == []
    for name in playbook_lab.HANDED_OVER:
        namespace, repo, version, values = playbook_lab.PLAYBOOK_CHARTS[name]
        pod = handover["installed"][name]
        assert pod["phase"] == "Succeeded", pod
        assert pod["state"]["terminated"]["exitCode"] == 0, pod
        assert pod["state"]["terminated"]["message"] == "Installing helm chart\n", pod
        record = handover["releases"][f"sh.helm.release.v1.{name}.v1"]
        assert (record["name"], record["namespace"], record["version"]) == (name, namespace, 1)
        assert record["info"]["status"] == "deployed"
        assert record["chart"]["metadata"]["version"] == version
        assert record.get("config", {}) == values
        assert record["apply_method"] == "ssa"
        path = repo.split("://", 1)[1].partition("/")[2]
        assert f"{'/' + path if path else ''}/{name}-{version}.tgz" in handover["chart_requests"]


def test_a_chart_deleted_with_its_finalizer_on_loses_its_release(handover: Any) -> None:
    """The control: what the script's finalizer step exists to avoid, shown on the real
    helm-controller and its Jobs: a managed chart, installed, then deleted with its finalizer on,
    gets a helm-delete Job, whose pod uninstalls the release, and only then goes."""
    control = handover["control"]
    assert control["installed"] == [f"sh.helm.release.v1.{scenario.CONTROL_CHART}.v1"]
    assert ["create", "jobs", f"helm-delete-{scenario.CONTROL_CHART}"] in control["writes"]
    assert control["job_args"] == ["delete"]
    assert control["releases_left"] == []
    assert f"configmap/{scenario.CONTROL_CHART}-rendered" not in control["rendered_left"]


def test_the_programs_helm_upgrades_the_releases_helm_v4_made(handover: Any) -> None:
    """docs/adoption.md step 4: the program's Release upgrades each handed-over release with the
    Helm inside the kubernetes plugin (v3.20.2; its CLI here), on the record Helm v4.1.4 wrote
    (with `apply_method`, which v3 does not know): it reads it, upgrades to revision 2 and
    supersedes revision 1, and the object the release rendered stays the same object."""
    for name, upgraded in zip(playbook_lab.HANDED_OVER, handover["upgraded"], strict=True):
        assert upgraded["status"]["rc"] == 0, upgraded["status"]
        assert '"status":"deployed"' in upgraded["status"]["stdout"].replace(" ", ""), upgraded["status"]
        assert upgraded["upgrade"]["rc"] == 0, upgraded["upgrade"]
        records = upgraded["records"]
        assert {key: record["info"]["status"] for key, record in records.items()} == {
            f"sh.helm.release.v1.{name}.v1": "superseded",
            f"sh.helm.release.v1.{name}.v2": "deployed",
        }
        assert upgraded["rendered_kept"] is True
