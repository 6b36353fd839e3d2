"""Adoption of a lab that lacks one of the objects the program imports (docs/adoption.md step 4),
on a real kube-apiserver with the program's Kubernetes part (e2e/box/box_program.py) under the real
engine and kubernetes plugin: the preview stops, creating nothing in its place. The takeover of the
lab as it runs is tests/test_box_takeover.py (the page typed as it stands) and
tests/test_box_whole_adoption.py (the whole program at another site). Selected with
`pytest -m engine`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.box import scenarios
from e2e.engine.netns import in_new_netns

pytestmark = pytest.mark.engine


def test_adopting_a_lab_that_lacks_an_object_stops_at_preview_creating_nothing(tmp_path: Path) -> None:
    """docs/adoption.md step 4: an import needs the object to exist; the program never creates
    one in its place while adopting."""
    result = in_new_netns(
        "management.cluster_adoption.adoption_of_an_incomplete_lab", str(tmp_path), addresses=[scenarios.VM_ADDRESS]
    )
    for step in result["steps"]:
        assert step["rc"] == 0, step
    preview = result["preview"]
    assert "resource 'capi-ipam-in-cluster-system/in-cluster' does not exist" in preview["error"], preview["error"]
    assert "mgmt-ipam-in-cluster" not in {
        step["urn"].rsplit("::", 1)[1] for step in preview["steps"] if step["op"] == "create"
    }
    assert preview["writes"] == []
    # The playbook's charts were installed by k3s's helm-controller and its Jobs.
    assert (result["k3s_job_pod_errors"], result["k3s_chart_unknown"]) == ([], [])
