"""Adoption in the lab in a box: the playbook's lab (e2e/standins/cluster/playbook_lab.py) and lab1 on real
kube-apiservers, then the Kubernetes part of the program (e2e/box/box_program.py) under the real
engine and the real kubernetes plugin, with the chart repositories' and the operator's stand-ins,
in a network namespace of the test's own: the hand-over, the adoption run, the convergence runs,
then a version bump. What the engine sent the API servers is read from their audit logs.
Selected with `pytest -m engine`.

The VM and the k3s host steps are not in the box: their plugins are not served here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import waits_for

from e2e.box import scenarios
from e2e.engine.netns import in_new_netns
from e2e.standins.cluster import playbook_lab
from e2e.standins.cluster.admission_webhook_standin import CONFIGURATION_NAMES
from tools import adoption_check

pytestmark = pytest.mark.engine

PREVIEW, UP, SECOND_PREVIEW, SECOND_UP = range(4)
# What the box puts where the real program has the K3sNode.
BOX_TYPES = {"homelab:e2e:BoxNode"}
# Release name -> its namespace.
RELEASES = {name: playbook_lab.PLAYBOOK_CHARTS[name][0] for name in playbook_lab.HANDED_OVER}


@pytest.fixture(scope="module")
def adoption(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("adoption")
    return in_new_netns(
        "cluster_adoption.adoption_run",
        str(root),
        addresses=[scenarios.VM_ADDRESS, scenarios.LAB1_ADDRESS],
        timeout=900,
    )


def type_of(urn: str) -> str:
    return urn.split("::")[2].rsplit("$", 1)[-1]


def imported(run: dict[str, Any]) -> set[str]:
    return {step["urn"].rsplit("::", 1)[1] for step in run["steps"] if step["op"] == "import"}


def test_the_setup_and_the_hand_over_succeed(adoption: Any) -> None:
    for step in adoption["steps"]:
        assert step["rc"] == 0, step
    assert adoption["handover"]["rc"] == 0, adoption["handover"]


def test_the_plugins_run_as_installed_ones_without_a_warning(adoption: Any) -> None:
    """Installed in PULUMI_HOME at the pinned versions (tests/test_real_engine.py shows which
    binaries), none is taken from PATH, and the engine has nothing to say of them."""
    for run in adoption["runs"]:
        assert run["warnings"] == [], run["warnings"]


def test_the_adoption_preview_shows_imports_only(adoption: Any) -> None:
    preview = adoption["runs"][PREVIEW]
    assert preview["error"] == "", preview["error"]
    program_steps = [step for step in preview["steps"] if type_of(step["urn"]) not in BOX_TYPES]
    assert adoption_check.problems(program_steps) == []
    assert imported(preview) == {
        *scenarios.RELEASE_RESOURCES,
        *(f"mgmt-ns-{namespace}" for namespace, _, _ in playbook_lab.PROVIDERS.values()),
        *scenarios.PROVIDER_CR_RESOURCES,
    }


# The only write to an object of the playbook's: each of the operator's webhook configurations
# gets the annotation of the program's wait for its CA bundle.
WEBHOOK_WAITS = {
    ("patch", f"{kind}webhookconfigurations", f"capi-operator-{kind}-webhook-configuration")
    for kind in ("validating", "mutating")
}


def test_the_adoption_up_writes_nothing_but_its_own_readonly_account_and_the_wait(adoption: Any) -> None:
    up = adoption["runs"][UP]
    assert up["error"] == "", up["error"]
    assert imported(up) == imported(adoption["runs"][PREVIEW])
    written = {(verb, resource, name) for verb, resource, name, _ in up["writes"]}
    assert written >= WEBHOOK_WAITS, written
    written -= WEBHOOK_WAITS
    # Else only the program's own read-only account is new (server-side apply creates by patch).
    assert {resource for _, resource, _ in written} == {
        "clusterroles",
        "serviceaccounts",
        "clusterrolebindings",
        "secrets",
    }, written
    assert all(verb in ("create", "patch") and name.startswith("lab-mgmt-readonly") for verb, _, name in written)


def test_no_playbook_object_is_recreated_or_changed(adoption: Any) -> None:
    """Same UIDs (nothing re-created) and resourceVersions (nothing written), releases
    included, apart from the HelmCharts the hand-over deleted."""
    before, after = adoption["before"], adoption["after"]
    assert {key: value for key, value in after.items() if key in before} == before
    for release, namespace in RELEASES.items():
        assert f"Secret/{namespace}/sh.helm.release.v1.{release}.v1" in after
        assert f"ConfigMap/{namespace}/{release}-rendered" in after
    assert f"Secret/capmox-system/{playbook_lab.CAPMOX_SECRET}" in after
    assert f"ClusterRole//{playbook_lab.INSPECTOR}" in after


def test_the_stack_reports_the_playbook_versions(adoption: Any) -> None:
    versions = playbook_lab.stack_versions()
    expected = {setting: versions[setting] for _, _, setting in playbook_lab.PROVIDERS.values()}
    assert adoption["provider_versions"] == expected


def test_the_readonly_account_is_the_programs_own_and_can_only_read(adoption: Any) -> None:
    """Created next to the inspector's capi-readonly objects, which keep their UIDs (above); its
    token came from the real token controller, and its kubeconfig reads but neither lists Secrets
    nor deletes."""
    created = {step["urn"].rsplit("::", 1)[1] for step in adoption["runs"][UP]["steps"] if step["op"] == "create"}
    assert {"mgmt-readonly-role", "mgmt-readonly-account", "mgmt-readonly-binding", "mgmt-readonly-token"} <= created
    assert f"ServiceAccount/kube-system/{playbook_lab.INSPECTOR}" in adoption["after"]
    assert "ServiceAccount/kube-system/lab-mgmt-readonly" in adoption["after"]
    assert "readonlyKubeconfig" in adoption["secret_outputs"]
    reads = adoption["readonly"]
    assert reads["pods"]["rc"] == 0, reads["pods"]
    assert reads["coreproviders"]["rc"] == 0, reads["coreproviders"]
    for forbidden in ("secrets", "delete namespace"):
        assert reads[forbidden]["rc"] != 0
        assert "Forbidden" in reads[forbidden]["stderr"], reads[forbidden]


def test_lab1_made_by_hand_is_left_as_it_is(adoption: Any) -> None:
    """lab1 is not declared: a workload cluster made with clusterctl is taken over by its own
    procedure, not by the management cluster's adoption (docs/operations.md, Workload clusters)."""
    assert adoption["lab1_after"] == adoption["lab1_before"]
    assert f"ClusterRoleBinding//{playbook_lab.INSPECTOR}" in adoption["lab1_before"]
    assert adoption["lab1_writes"] == []


def test_the_next_run_changes_nothing(adoption: Any) -> None:
    for run in (adoption["runs"][SECOND_PREVIEW], adoption["runs"][SECOND_UP]):
        assert run["error"] == "", run["error"]
        changed = [step for step in run["steps"] if step["op"] != "same"]
        # Every run reads the stack's own last outputs.
        assert sorted((step["op"], type_of(step["urn"])) for step in changed) == [
            ("read", "pulumi:pulumi:StackReference"),
        ]
        assert run["writes"] == []


def test_the_charts_came_from_the_configured_repositories_only(adoption: Any) -> None:
    """The program fetched them into the project's folder, where the imports found them."""
    assert adoption["chart_unknown"] == []
    assert any(path.endswith("cert-manager-v1.21.2.tgz") for path in adoption["chart_requests"])


# docs/adoption.md step 8, as far as the box goes: each targeted run, previewed first.


def convergence_run(adoption: Any, group: str, action: str) -> dict[str, Any]:
    run: dict[str, Any] = next(run for run in adoption["convergence"]["runs"][group] if run["action"] == action)
    assert run["error"] == "", run["error"]
    return run


def updated(run: dict[str, Any]) -> set[str]:
    return {step["urn"].rsplit("::", 1)[1] for step in run["steps"] if step["op"] == "update"}


def test_converging_the_releases_is_one_helm_upgrade_each_and_nothing_else(adoption: Any) -> None:
    assert updated(convergence_run(adoption, "releases", "preview")) == set(scenarios.RELEASE_RESOURCES)
    writes = convergence_run(adoption, "releases", "up")["writes"]
    # Beside its release records, the operator's upgrade patches the chart's own webhook
    # configurations, as any `helm upgrade` of it does.
    webhook_configurations = {f"{kind.lower()}s": name for kind, name in CONFIGURATION_NAMES.items()}
    helm_patched = {(resource, name) for verb, resource, name, _ in writes if verb == "patch"}
    assert helm_patched <= set(webhook_configurations.items()), writes
    records = [write for write in writes if write[0] != "patch"]
    assert {(verb, resource) for verb, resource, _, _ in records} == {("create", "secrets"), ("update", "secrets")}
    assert {name for _, _, name, _ in records} == {
        f"sh.helm.release.v1.{release}.v{revision}" for release in RELEASES for revision in (1, 2)
    }


def test_the_webhook_configurations_keep_their_ca_bundle_and_the_wait_through_the_upgrade(adoption: Any) -> None:
    for kind, configuration in adoption["convergence"]["webhook_configurations"].items():
        assert configuration["metadata"]["annotations"]["pulumi.com/waitFor"] == (
            waits_for("jsonpath={.webhooks[0].clientConfig.caBundle}")
        ), kind
        assert all(webhook["clientConfig"].get("caBundle") for webhook in configuration["webhooks"]), kind


def test_converging_the_provider_crs_adds_the_wait_annotation_and_keeps_their_spec(adoption: Any) -> None:
    assert updated(convergence_run(adoption, "provider CRs", "up")) == set(scenarios.PROVIDER_CR_RESOURCES)
    versions = playbook_lab.stack_versions()
    for kind, (_, _, setting) in playbook_lab.PROVIDERS.items():
        live = adoption["convergence"]["providers"][kind]
        assert live["metadata"]["annotations"]["pulumi.com/waitFor"] == waits_for("condition=Ready")
        assert live["spec"]["version"] == versions[setting]


def test_converging_the_capmox_secret_creates_the_programs_own_and_repoints_capmox(adoption: Any) -> None:
    up = convergence_run(adoption, "CAPMOX Secret", "up")
    created = [step["urn"].rsplit("::", 1)[1] for step in up["steps"] if step["op"] == "create"]
    assert created == ["mgmt-capmox-credentials"]
    secret = adoption["convergence"]["providers"]["InfrastructureProvider"]["spec"]["configSecret"]["name"]
    assert secret.startswith("capmox-credentials-")
    assert f"Secret/capmox-system/{secret}" in adoption["converged"]
    # Deleted by hand afterwards (docs/adoption.md), never by the program.
    assert f"Secret/capmox-system/{playbook_lab.CAPMOX_SECRET}" in adoption["converged"]


def test_after_converging_nothing_is_left_to_change_and_nothing_was_recreated(adoption: Any) -> None:
    final = convergence_run(adoption, "everything", "preview")
    assert {step["op"] for step in final["steps"]} <= {"same", "read"}
    adopted, converged = adoption["after"], adoption["converged"]
    assert {key: uid for key, (uid, _) in converged.items() if key in adopted} == {
        key: uid for key, (uid, _) in adopted.items()
    }
    for run in (run for runs in adoption["convergence"]["runs"].values() for run in runs):
        assert [write for write in run["writes"] if write[0] == "delete"] == []


# The adopted stack then manages the lab as docs/operations.md says.


def test_a_provider_version_bump_updates_that_one_cr_and_waits_for_the_operator(adoption: Any) -> None:
    managed = adoption["managed"]
    for step in managed["steps"]:
        assert step["rc"] == 0, step
    assert updated(managed["preview"]) == {"mgmt-infrastructure-proxmox"}
    up = managed["up"]
    assert up["error"] == "", up["error"]
    assert updated(up) == {"mgmt-infrastructure-proxmox"}
    # The kubernetes plugin updates a CR by two patches: its field managers put right, then the apply.
    assert [write[:3] for write in up["writes"]] == [["patch", "infrastructureproviders", "proxmox"]] * 2
    # `pulumi up` returned only after the operator had installed the new version.
    installed = [entry for entry in managed["reconciled_during_up"] if entry["kind"] == "InfrastructureProvider"]
    assert [entry["version"] for entry in installed] == [scenarios.BUMPED_CAPMOX]
    assert up["finished"] - up["started"] >= scenarios.OPERATOR_INSTALL_SECONDS
    assert managed["provider_versions"]["capmoxVersion"] == scenarios.BUMPED_CAPMOX


def test_two_provider_bumps_at_once_are_refused_before_anything_is_sent(adoption: Any) -> None:
    refused = adoption["managed"]["two_bumps"]
    assert "capiCoreVersion v1.12.11 -> v1.12.12, capiBootstrapVersion v1.12.11 -> v1.12.12" in refused["error"]
    assert "set capiCoreVersion alone" in refused["error"]
    assert refused["writes"] == []


def test_the_operator_standin_met_nothing_it_did_not_know(adoption: Any) -> None:
    assert adoption["operator_errors"] == []
    assert (adoption["webhook_unknown"], adoption["injector_errors"]) == ([], [])


def test_adopting_a_lab_that_lacks_an_object_stops_at_preview_creating_nothing(tmp_path: Path) -> None:
    """docs/adoption.md step 4: an import needs the object to exist; the program never creates
    one in its place while adopting."""
    result = in_new_netns(
        "cluster_adoption.adoption_of_an_incomplete_lab", str(tmp_path), addresses=[scenarios.VM_ADDRESS]
    )
    for step in result["steps"]:
        assert step["rc"] == 0, step
    preview = result["preview"]
    assert "resource 'capi-ipam-in-cluster-system/in-cluster' does not exist" in preview["error"], preview["error"]
    assert "mgmt-ipam-in-cluster" not in {
        step["urn"].rsplit("::", 1)[1] for step in preview["steps"] if step["op"] == "create"
    }
    assert preview["writes"] == []
