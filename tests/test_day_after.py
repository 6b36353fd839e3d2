"""The day after a takeover or a recovery, under the SDK's mocks (issue 55): a cluster's VIP on its
own gateway, a renamed stack's own clusters, and the docs' commands on a Mac."""

from __future__ import annotations

import re
from typing import Any

import harness
import pytest
from test_cluster_takeover import CLUSTER, cluster_objects, settings_of, workload_problems

from components.cluster_takeover import KubernetesMinorSkippedError
from components.hand_made_clusters import STACK_MARK, HandMadeClusterError
from components.rollouts import ROLLOUT_OUTPUT
from e2e.box.takeover import doc_script

CLUSTER_PATH = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters/lab1"


def other_site(**changes: Any) -> dict[str, Any]:
    """lab1 at a second site, whose gateway is not the management VM's."""
    [lab1] = harness.stack_workload_clusters()
    return {
        **lab1,
        "gateway": "10.20.30.1",
        "ipPrefix": 24,
        "nodeIpRanges": ["10.20.30.41-10.20.30.60"],
        "controlPlaneEndpoint": "10.20.30.40",
        **changes,
    }


def test_a_vip_on_the_clusters_own_gateway_is_refused() -> None:
    settings_of(other_site())
    assert workload_problems(other_site(controlPlaneEndpoint="10.20.30.1")) == [
        "lab-mgmt:workloadClusters[0].controlPlaneEndpoint: 10.20.30.1 is the cluster's gateway (gateway)"
    ]


def _marked_by(stack: str) -> dict[str, Any]:
    return {CLUSTER_PATH: {"kind": "Cluster", "metadata": {"name": "lab1", "annotations": {STACK_MARK: stack}}}}


def test_a_renamed_stack_keeps_the_clusters_it_declared_and_marks_them_anew() -> None:
    """`pulumi stack rename` keeps the state (so the last run's outputs), not the name in the mark."""
    before_the_rename = _marked_by("organization/lab-mgmt/home")
    with pytest.raises(HandMadeClusterError, match="this stack's last run did not declare it"):
        harness.run_program(live_objects=before_the_rename)
    first = harness.run_program()
    [record] = [value for key, (value, _) in first.outputs.items() if key == ROLLOUT_OUTPUT]
    renamed = harness.run_program(live_objects=before_the_rename, previous_outputs={ROLLOUT_OUTPUT: record})
    cluster = next(r for r in cluster_objects(renamed) if r.type == CLUSTER)
    assert cluster.plain["metadata"]["annotations"][STACK_MARK] == "organization/lab-mgmt/lab"


@pytest.mark.parametrize(("running", "refused"), [("v1.33.4", True), ("v1.34.2", False), ("v1.35.9", False)])
def test_a_kubernetes_upgrade_that_skips_a_minor_is_refused_before_anything_is_sent(
    running: str, refused: bool
) -> None:
    """Cluster API's KubeadmControlPlane webhook refuses a skipped minor, but only once the run has
    made the machine templates it would roll to: the program refuses it first, naming the key."""
    live = {
        **_marked_by("organization/lab-mgmt/lab"),
        "/apis/controlplane.cluster.x-k8s.io/v1beta2/namespaces/default/kubeadmcontrolplanes/lab1-control-plane": {
            "kind": "KubeadmControlPlane",
            "spec": {"version": running},
        },
    }
    if not refused:
        harness.run_program(live_objects=live)
        return
    with pytest.raises(KubernetesMinorSkippedError) as skipped:
        harness.run_program(live_objects=live)
    assert str(skipped.value) == (
        "lab-mgmt:workloadClusters[0].kubernetesVersion: v1.35.9 is more than one minor after v1.33.4, which "
        "default/lab1's control plane runs: Cluster API upgrades one minor at a time and refuses the skip, after "
        "this run would have made the new machine templates. Upgrade to a v1.34 release first (docs/operations.md, "
        '"Upgrading a workload cluster\'s Kubernetes")'
    )


# GNU-only forms that macOS's BSD tools reject or read otherwise (the owner's laptop is a Mac).
GNU_ONLY = {
    "sed -i without a suffix": re.compile(r"\bsed\s+(?:-[a-zA-Z]*\s+)*-i(?:\s|$)(?!\.)"),
    "grep -P": re.compile(r"\bgrep\s+(?:-[a-zA-Z]*)?P"),
    "readlink -f": re.compile(r"\breadlink\s+-f\b"),
    "date -d": re.compile(r"\bdate\s+-d\b"),
}


@pytest.mark.parametrize("page", [*sorted(p.name for p in (harness.REPO / "docs").glob("*.md")), "README.md"])
def test_no_typed_line_uses_a_gnu_only_option(page: str) -> None:
    path = harness.REPO / ("README.md" if page == "README.md" else f"docs/{page}")
    text = path.read_text()
    lines = [line for block in doc_script.blocks(text, workload_clusters=True) for line in block.lines]
    lines = [
        *lines,
        *(line.strip() for line in text.splitlines() if line.startswith("    ") and not line.startswith("     ")),
    ]
    found = [(what, line) for line in lines for what, form in GNU_ONLY.items() if form.search(line)]
    assert found == []


def test_the_gnu_only_forms_are_found() -> None:
    """The check above can fail: each form on its own line is caught, the portable one is not."""
    caught = [
        "sed -i '/^encryptionsalt:/d' Pulumi.lab.yaml",
        "grep -P '\\d+' x",
        "readlink -f x",
        "date -d yesterday",
    ]
    assert [any(form.search(line) for form in GNU_ONLY.values()) for line in caught] == [True] * 4
    assert not any(form.search("sed -i.bak '/^encryptionsalt:/d' Pulumi.lab.yaml") for form in GNU_ONLY.values())


def test_every_object_the_program_applies_names_the_one_field_manager() -> None:
    """A recovered stack applies under the lost one's manager name (components/field_manager.py):
    every Kubernetes object the program sends, on both clusters, names it; the Helm releases
    (applied by Helm), the providers and what is only read (the admin kubeconfig's Secret, a
    `get` with no inputs) send none."""
    run = harness.run_program({"workloadClusters": harness.stack_workload_clusters()})
    objects = [
        resource
        for resource in run.resources.values()
        if resource.type.startswith("kubernetes:")
        and not resource.type.startswith(("kubernetes:helm.sh/", "pulumi:providers:"))
        and resource.inputs
    ]
    kinds = {resource.type.rsplit(":", 1)[1] for resource in objects}
    # Both clusters' kinds: the provider CRs, the CAPMOX Secret, the webhook patches, the read-only
    # access, and the workload cluster's objects.
    assert {"CoreProvider", "Secret", "MutatingWebhookConfigurationPatch", "ClusterRole", "Cluster"} <= kinds, kinds
    unnamed = [
        resource.name
        for resource in objects
        if (resource.plain["metadata"].get("annotations") or {}).get("pulumi.com/patchFieldManager")
        != harness.MANAGED["pulumi.com/patchFieldManager"]
    ]
    assert unnamed == []
