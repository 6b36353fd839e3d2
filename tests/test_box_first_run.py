"""The program's own first run on an empty management cluster, in the lab in a box: the Kubernetes
part (e2e/box/box_program.py) under the real engine and kubernetes plugin, with the chart
repositories' stand-in (the operator chart brings the five provider CRDs, as the real one does)
and the operator's stand-in, in a network namespace of the test's own. Selected with
`pytest -m engine`.

The VM and the k3s host steps are not in the box: their plugins are not served here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.box import scenarios
from e2e.engine.netns import in_new_netns

pytestmark = pytest.mark.engine

PREVIEW, UP, SECOND_PREVIEW, SECOND_UP = range(4)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("first-run")
    return in_new_netns(
        "management.cluster_first_run.fresh_install", str(root), addresses=[scenarios.VM_ADDRESS], timeout=900
    )


def names(run: dict[str, Any], op: str) -> set[str]:
    return {step["urn"].rsplit("::", 1)[1] for step in run["steps"] if step["op"] == op}


def test_the_first_run_creates_the_cluster_part_and_waits_for_every_provider(first_run: Any) -> None:
    for step in first_run["steps"]:
        assert step["rc"] == 0, step
    up = first_run["runs"][UP]
    assert up["error"] == "", up["error"]
    assert names(up, "create") >= {
        *scenarios.RELEASE_RESOURCES,
        *scenarios.PROVIDER_CR_RESOURCES,
        "mgmt-capmox-credentials",
        "mgmt-readonly-token",
    }
    assert names(up, "create") == names(first_run["runs"][PREVIEW], "create")
    # Every provider was installed by the operator before `pulumi up` returned.
    assert sorted(entry["kind"] for entry in first_run["reconciled"] if entry["at"] <= up["finished"]) == sorted(
        ["CoreProvider", "BootstrapProvider", "ControlPlaneProvider", "InfrastructureProvider", "IPAMProvider"]
    )
    assert first_run["operator_errors"] == []
    assert (first_run["webhook_unknown"], first_run["injector_errors"]) == ([], [])


def test_the_second_run_does_nothing(first_run: Any) -> None:
    for run in (first_run["runs"][SECOND_PREVIEW], first_run["runs"][SECOND_UP]):
        assert run["error"] == "", run["error"]
        assert {step["op"] for step in run["steps"]} == {"same", "read"}
        assert names(run, "read") == {"last-deployment"}
        assert run["writes"] == []


def test_each_run_leaves_the_kubernetes_plugin_s_kubeconfig_copies_behind_private(first_run: Any) -> None:
    # Upstream (pulumi-kubernetes provider.go, writeKubeconfigToFile at every Configure): the
    # admin's credentials in TMPDIR, mode 0600, never removed. docs/operations.md says so; when a
    # plugin bump stops it, this fails and the docs change with it.
    left = first_run["plugin_temp_files"]
    assert len(left) >= 4, left
    assert {(entry["name"].startswith("kubeconfig"), entry["mode"], entry["admin"]) for entry in left} == {
        (True, 0o600, True)
    }
