"""A new stack taking over the lab that lab-mgmt made under a stack whose state or passphrase is
lost (`adopt` with `recover`, docs/operations.md "Lost state or passphrase"): everything the
program makes is imported under the name the program gave it, lab1 is declared as the program
declares it and compared field by field with what runs before anything is sent, and the run with
adopt off finds lab1 its own. The live lab is the one a run of the program declares."""

from __future__ import annotations

import copy
from typing import Any

import harness
import pytest
from test_cluster_takeover import (
    CLUSTER,
    MD,
    PMT,
    RELEASE,
    cluster_objects,
    clusterctl_lab1,
    record_of,
    taken_over_entry,
    workload_problems,
)
from test_settings import problems

from components.adoption import OBJECT_INPUTS, RELEASE_INPUTS
from components.cluster_takeover import RECORD_OUTPUT, TakeoverMismatchError, object_path
from components.hand_made_clusters import STACK_MARK, HandMadeClusterError
from components.settings import SettingsError, parse_settings
from e2e.box.takeover import doc_script, keyboard, lost_state_page

[LAB1] = harness.stack_workload_clusters()
RECOVER = {"adopt": True, "recover": True, "workloadClusters": [{**LAB1, "adopt": True}]}
SECRET = "kubernetes:core/v1:Secret"


@pytest.fixture(scope="module")
def made() -> harness.Run:
    return harness.run_program()


def running(made: harness.Run, stack: str = "organization/lab-mgmt/lab") -> dict[str, dict[str, Any]]:
    """API path -> lab1's objects as the lost stack applied them (marked as `stack`'s)."""
    live = {}
    for resource in cluster_objects(made):
        body = copy.deepcopy(resource.plain)
        if body["kind"] == "Cluster":
            body["metadata"]["annotations"][STACK_MARK] = stack
        body["status"] = {"observedGeneration": 1}
        live[object_path(body)] = body
    return live


@pytest.fixture(scope="module")
def recovered(made: harness.Run) -> harness.Run:
    return harness.run_program(RECOVER, live_objects=running(made))


def test_lab1_is_imported_under_the_names_the_program_gave_it(made: harness.Run, recovered: harness.Run) -> None:
    for resource in cluster_objects(recovered):
        name = made.get(resource.type, resource.name).plain["metadata"]["name"]
        assert (resource.import_id, resource.ignore_changes) == (f"default/{name}", OBJECT_INPUTS), resource.name
    assert {r.plain["metadata"]["name"] for r in recovered.of_type(PMT)} == {
        r.plain["metadata"]["name"] for r in made.of_type(PMT)
    }


def test_lab1_is_declared_as_the_program_declares_it(made: harness.Run, recovered: harness.Run) -> None:
    deployment = recovered.get(MD, "lab1-workers").plain
    assert deployment["metadata"]["annotations"] == made.get(MD, "lab1-workers").plain["metadata"]["annotations"]
    assert recovered.get(CLUSTER, "lab1-cluster").plain["spec"] == made.get(CLUSTER, "lab1-cluster").plain["spec"]


def test_every_release_and_object_the_program_made_is_imported(recovered: harness.Run) -> None:
    releases = {r.name: (r.import_id, r.ignore_changes) for r in recovered.of_type(RELEASE)}
    assert releases == {
        "lab1-autoscaler": ("default/lab1-autoscaler", RELEASE_INPUTS),
        "lab1-cilium": ("kube-system/cilium", RELEASE_INPUTS),
        "mgmt-cert-manager": ("cert-manager/cert-manager", RELEASE_INPUTS),
        "mgmt-cluster-api-operator": ("capi-operator-system/cluster-api-operator", RELEASE_INPUTS),
    }
    [capmox] = [r for r in recovered.of_type(SECRET) if r.name == "mgmt-capmox-credentials"]
    assert capmox.import_id == "capmox-system/" + capmox.plain["metadata"]["name"]
    readonly = {
        r.name: r.import_id
        for r in recovered.resources.values()
        if r.name.startswith(("mgmt-readonly-", "lab1-readonly-"))
    }
    assert readonly == {
        f"{cluster}-readonly-{part}": import_id
        for cluster in ("mgmt", "lab1")
        for part, import_id in (
            ("role", "lab-mgmt-readonly"),
            ("account", "kube-system/lab-mgmt-readonly"),
            ("binding", "lab-mgmt-readonly"),
            ("token", "kube-system/lab-mgmt-readonly-token-1"),
        )
    }
    # Nothing is created: the rest are the stack and its components, providers, the stack's read of
    # its own last outputs, host steps, the webhook configurations' patches and a read of lab1's
    # kubeconfig Secret.
    created = [
        r.name
        for r in recovered.resources.values()
        if not r.import_id
        and not r.type.startswith(("homelab:", "pulumi:", "command:"))
        and "Patch" not in r.type
        and r.name != "lab1-admin-kubeconfig"
    ]
    assert created == []


def test_the_run_records_lab1_as_the_stacks_own_and_the_next_one_declares_it_as_before(
    made: harness.Run, recovered: harness.Run
) -> None:
    assert record_of(recovered) == {"default/lab1": {}}
    after = harness.run_program(
        previous_outputs={RECORD_OUTPUT: record_of(recovered)}, live_objects=running(made, "organization/lab-mgmt/old")
    )
    for resource in cluster_objects(after):
        assert resource.plain == made.get(resource.type, resource.name).plain, resource.name
        assert resource.import_id == ""
    # Without the record, the old stack's mark is another stack's.
    with pytest.raises(HandMadeClusterError, match="organization/lab-mgmt/old"):
        harness.run_program(live_objects=running(made, "organization/lab-mgmt/old"))


def test_a_cluster_marked_by_the_lost_stack_of_another_name_is_recovered(made: harness.Run) -> None:
    run = harness.run_program(RECOVER, live_objects=running(made, "organization/lab-mgmt/old"))
    assert run.get(CLUSTER, "lab1-cluster").import_id == "default/lab1"


def test_settings_that_render_another_cluster_are_refused_naming_each_field(made: harness.Run) -> None:
    live = running(made)
    deployment = next(body for body in live.values() if body["kind"] == "MachineDeployment")
    deployment["metadata"]["annotations"]["cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"] = "5"
    control_plane = next(body for body in live.values() if body["kind"] == "KubeadmControlPlane")
    control_plane["spec"]["version"] = "v1.35.8"
    with pytest.raises(TakeoverMismatchError) as error:
        harness.run_program(RECOVER, live_objects=live)
    message = str(error.value)
    assert "lab1's settings do not render the cluster as it runs" in message
    assert 'KubeadmControlPlane lab1-control-plane: spec.version: running "v1.35.8", the settings render "v1.35.9"' in (
        message
    )
    assert 'cluster-api-autoscaler-node-group-max-size: running "5", the settings render' in message


def test_a_template_the_settings_name_otherwise_is_named_as_missing(made: harness.Run) -> None:
    entry = {**LAB1, "adopt": True, "workers": {**LAB1["workers"], "memoryMib": 32768}}
    with pytest.raises(TakeoverMismatchError, match=r"ProxmoxMachineTemplate lab1-worker-[0-9a-f]+: does not exist"):
        harness.run_program({**RECOVER, "workloadClusters": [entry]}, live_objects=running(made))


def test_recover_needs_adopt_and_lets_a_cluster_the_program_made_be_adopted() -> None:
    with pytest.raises(SettingsError) as error:
        parse_settings(_raw({"recover": True}))
    assert problems(error.value) == [
        "lab-mgmt:recover: true needs adopt=true: recovering takes the running lab over without changing it"
    ]
    settings = parse_settings(_raw(RECOVER))
    assert settings.cluster_api.existing_capmox_secret is None
    assert [(c.adopt, c.recover, c.taken_over) for c in settings.workload.clusters] == [(True, True, False)]


def test_without_recover_a_cluster_not_taken_over_cannot_be_adopted() -> None:
    lines = workload_problems({**LAB1, "adopt": True})
    assert lines == [
        "lab-mgmt:workloadClusters[0].adopt: true needs takenOver: true (the cluster was made by clusterctl and "
        "stays as it was made), or, for a cluster lab-mgmt made under a stack whose state is lost, recover=true"
    ]


def _raw(overrides: dict[str, Any]) -> dict[str, str]:
    return {key.split(":", 1)[1]: value for key, value in harness.stack_config(overrides).items()}


def test_the_section_reads_as_a_script_for_both_boxes() -> None:
    lines = lost_state_page.lines()
    assert [line.text for line in lines if line.with_lab1] == [
        "pulumi config set --path 'workloadClusters[0].adopt' true",
        "pulumi config rm --path 'workloadClusters[0].adopt'",
    ]
    assert [line.filled({"<image file>": "x.qcow2"}) for line in lines if line.on_node] == [
        "pvesm free local:import/x.qcow2"
    ]
    assert [line.step for line in lines] == sorted(line.step for line in lines)
    whole, lab1 = lost_state_page.for_the_whole_box(), lost_state_page.for_the_lab1_box()
    assert len(whole) + 2 == len(lost_state_page.lines())
    assert [line.text for line in lines if line not in lab1] == [
        *(line.text for line in lines if line.step == lost_state_page.VM_STEP),
        "pvesm free local:import/<image file>",
    ]
    # Every laptop line is one the boxes can type: the CLI, the page's sed, or the adoption check.
    for line in whole + lab1:
        assert line.on_node or line.text.startswith(("pulumi ", "sed -i.bak ", ".venv/bin/python tools/")), line
    secrets = {"proxmoxApiTokenSecret": "p", "capmoxTokenSecret": "c", "sshPrivateKey": "k"}
    assert [keyboard.typed_in(line.text, secrets) for line in lines if "--secret" in line.text] == ["p", "c", None]
    # A lab whose takeover from the playbook stopped before adoption.md step 8 has no image file
    # and stays adopted: the lines of a finished takeover are the node's and `config rm adopt`.
    mid_takeover = lost_state_page.for_a_lab_mid_takeover()
    assert [line.text for line in lines if line not in mid_takeover] == [
        "pvesm free local:import/<image file>",
        "pulumi config rm adopt",
    ]


def test_a_block_marked_for_no_box_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    section = lost_state_page.section().replace(doc_script.WITH_LAB1, "# in a lab that runs lab2")
    monkeypatch.setattr(lost_state_page, "section", lambda: section)
    with pytest.raises(ValueError, match="a block marked '# in a lab that runs lab2', which no box knows"):
        lost_state_page.lines()


def test_a_read_only_token_is_never_replaced_for_its_data(made: harness.Run, recovered: harness.Run) -> None:
    # An imported token Secret brings the token controller's data among its inputs; a Secret's data
    # that leaves them is a replacement, a new token: the data stays out of every diff.
    for run in (made, recovered):
        for name in ("mgmt-readonly-token", "lab1-readonly-token"):
            assert "data" in run.get(SECRET, name).ignore_changes, name


def test_a_rotation_after_a_recovery_makes_each_token_anew(recovered: harness.Run) -> None:
    """The recovered token's inputs hold its data (an import reads them all), which ignore_changes
    keeps: a rotation that replaced that resource would create the new Secret holding the revoked
    token. The next generation is a resource of its own, with no inputs of the old one's."""
    rotated = harness.run_program(overrides={"readonlyTokenGeneration": 2})
    for name in ("mgmt-readonly-token", "lab1-readonly-token"):
        assert (SECRET, name) not in rotated.resources
        fresh = rotated.get(SECRET, f"{name}-2")
        assert (fresh.import_id, "data" in fresh.plain) == ("", False)
        assert recovered.get(SECRET, name).plain["metadata"]["name"] == "lab-mgmt-readonly-token-1"


def test_a_taken_over_cluster_whose_templates_rolled_is_recovered_by_their_running_names() -> None:
    """After its takeover, lab1's first upgrade (a new template VM) rolled both machine templates to
    their digested names; only the lost state recorded that. The recovery names what runs from the
    live referrers, and imports them under the names the entry then gives (review 4, finding 3)."""
    taken_over = taken_over_entry()
    adopted = harness.run_program(
        {"workloadClusters": [{**taken_over, "adopt": True}]}, live_objects=clusterctl_lab1(taken_over)
    )
    upgraded_entry = {**taken_over, "templateVmId": 9001}
    upgraded = harness.run_program(
        {"workloadClusters": [upgraded_entry]}, previous_outputs={RECORD_OUTPUT: record_of(adopted)}
    )
    rolled = {r.name: r.plain["metadata"]["name"] for r in upgraded.of_type(PMT)}
    assert all(name == kubernetes_name for name, kubernetes_name in rolled.items())
    live = running(upgraded)
    recover = {"adopt": True, "recover": True, "workloadClusters": [{**upgraded_entry, "adopt": True}]}
    with pytest.raises(TakeoverMismatchError) as refused:
        harness.run_program(recover, live_objects=live)
    control_plane, worker = (next(n for n in rolled if n.startswith(f"lab1-{p}-")) for p in ("control-plane", "worker"))
    assert str(refused.value).split("\n    ")[1:] == [
        f"pulumi config set --path 'workloadClusters[0].templateNames.controlPlane' {control_plane}",
        f"pulumi config set --path 'workloadClusters[0].templateNames.worker' {worker}",
    ]
    names = {"controlPlane": control_plane, "worker": worker}
    recover["workloadClusters"] = [{**upgraded_entry, "adopt": True, "templateNames": names}]
    recovered = harness.run_program(recover, live_objects=live)
    assert {r.import_id for r in recovered.of_type(PMT)} == {f"default/{control_plane}", f"default/{worker}"}
    assert record_of(recovered) == {"default/lab1": {}}


def test_template_names_are_read_only_while_recovering_a_taken_over_cluster() -> None:
    assert workload_problems(taken_over_entry(templateNames={"worker": "lab1-worker-1a2b3c4d"})) == [
        "lab-mgmt:workloadClusters[0].templateNames: is read only while recovering a taken-over cluster (recover, "
        "adopt and takenOver): the record of a live stack names the templates"
    ]


def test_what_the_lost_stacks_create_holds_beyond_the_rendering_is_no_hand_work(made: harness.Run) -> None:
    """pulumi-kubernetes creates with a POST (manager `pulumi-kubernetes`, Update); the API server
    gives it what the CRD defaulted (found by the box: a ProxmoxCluster's ipv4Config.metric)."""
    live = running(made)
    path = "/apis/infrastructure.cluster.x-k8s.io/v1alpha2/namespaces/default/proxmoxclusters/lab1"
    live[path]["spec"]["ipv4Config"]["metric"] = 100
    live[path]["metadata"]["managedFields"] = [
        {
            "manager": "pulumi-kubernetes",
            "operation": "Update",
            "fieldsV1": {"f:spec": {"f:ipv4Config": {"f:metric": {}}}},
        }
    ]
    harness.run_program(RECOVER, live_objects=live)
