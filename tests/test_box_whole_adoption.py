"""Adoption in the lab in a box, whole (e2e/box/management/box_adoption.py, issue 18): the box starts as the
playbook left the lab (the VM made on the node, not through the API, running k3s with an Ansible-
rendered config.yaml, the playbook's objects on its API server), then docs/adoption.md's steps 1 to
6 are typed as they stand for a lab that runs no workload cluster, with the real CLI and the
program's own __main__.py: the backups, the settings, the hand-over, the two adoption runs (the VM
and the node with adoptClusterObjects false, then the cluster's objects), each gated before its
`pulumi up`, the checks and the preview expecting no changes. Between its lines, the runs the page
does not make: a preview of the VM as the playbook left it, a first run whose k3sVersion is not
the installed one, a run targeted at the node. Then a k3sVersion that is not the installed one
again; then step 8's convergence, from code. At another node, VMID, address and k3s version than
the spec's lab (box_adoption.RUN_AT), whose owner's takeover types the page with lab1
(tests/test_box_takeover.py).
What each run made the box do is read from the stand-ins' and the guest's logs and its disk. In a
network namespace of the test's own; selected with `pytest -m engine`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.k3s_node import render_k3s_config
from e2e.box import box, scenarios
from e2e.box.management import box_adoption, playbook_vm
from e2e.box.observed import STANDIN_RECORDS
from e2e.box.takeover import doc_script
from e2e.engine.netns import in_new_netns
from e2e.standins.cluster import playbook_lab

pytestmark = pytest.mark.engine

# What the adoption run may write on the guest: keep_host_keys.sh's cloud-init drop-in, which
# docs/adoption.md step 8.6 relies on (a host that already has it is left alone).
KEEP_HOST_KEYS = "etc/cloud/cloud.cfg.d/99-lab-mgmt-keep-host-keys.cfg"
# Power changes, and anything else a reboot or a rebuild would send.
CHANGING_VERBS = ("start", "stop", "restart", "enable", "daemon-reload")


@pytest.fixture(scope="module", params=list(box_adoption.RUN_AT))
def adoption(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp(f"whole-adoption-{request.param}")
    result = in_new_netns(
        "management.box_adoption.adoption_in_the_box",
        str(root),
        request.param,
        addresses=[scenarios.PROXMOX_ADDRESS],
        timeout=2400,
    )
    return {**result, "site": box_adoption.SITES[request.param]}


# Step 8 runs at one site only (box_adoption.CONVERGED_AT): its tests read that site's run.
AT_CONVERGENCE = pytest.mark.parametrize("adoption", [box_adoption.CONVERGED_AT], indirect=True)


def changing_calls(calls: list[list[str]]) -> list[list[str]]:
    """The calls among a run's stand-in commands on the guest that change its services or packages."""
    return [
        argv
        for argv in calls
        if argv[0] == "apt-get" or tuple(argv[:2]) in {("systemctl", verb) for verb in CHANGING_VERBS}
    ]


def names(run: dict[str, Any], op: str) -> set[str]:
    return {step["urn"].rsplit("::", 1)[1] for step in run["steps"] if step["op"] == op}


def resources_summary(run: dict[str, Any]) -> list[str]:
    """The lines the CLI prints under `Resources:` at the end of a run (docs/adoption.md quotes them)."""
    _, _, tail = run["output"].rpartition("\nResources:\n")
    return [line.strip() for line in tail.split("\n\n", 1)[0].splitlines()]


def test_the_page_is_typed_as_it_stands_for_a_lab_without_workload_clusters(adoption: Any) -> None:
    """docs/adoption.md's steps 1 to 6, every line of every block but lab1's, in the page's order,
    with the site's VM in its placeholders; each line ran with status 0."""
    site = adoption["site"]
    values = {"<your backup storage>": box_adoption.BACKUP_STORAGE} | doc_script.vm_values(site.vmid, site.address)
    page = [
        (block.step, block.on_node, line)
        for block in doc_script.blocks(until=doc_script.TYPED_UNTIL, workload_clusters=False)
        for line in block.filled(values)
    ]
    typed = adoption["adoption"]["typed"]
    assert [(entry["step"], entry["on_node"], entry["line"]) for entry in typed] == page
    for entry in [*adoption["steps"], *typed]:
        assert entry["rc"] == 0, entry
    # This lab runs no workload cluster: step 2's line for it takes the shipped lab1 entry out.
    assert ("pulumi config rm workloadClusters", "2.") in [(entry["line"], entry["step"][:2]) for entry in typed]
    assert [entry["line"].split()[:3] for entry in typed if entry["on_node"]] == [
        ["vzdump", str(site.vmid), "--mode"],
        ["qm", "config", str(site.vmid)],
        ["qm", "set", str(site.vmid)],
        ["qm", "status", str(site.vmid)],
    ]
    assert adoption["adoption"]["charts_left"] == []


def test_the_playbooks_vm_as_left_stops_the_preview_and_the_gate_refuses_it(adoption: Any) -> None:
    """The playbook's `qm create` set no OS type; the provider reads it as "", which its own schema
    refuses, so the import cannot be planned: docs/adoption.md step 2 has the owner set it."""
    as_left = adoption["adoption"]["as_left"]
    assert as_left["preview"]["rc"] != 0
    assert "Examine values at 'mgmt-vm.operatingSystem.type'" in as_left["preview"]["output"]
    assert as_left["preview"]["ssh_sessions"] == []
    assert as_left["preview"]["pve_writes"] == []
    assert as_left["gate"]["rc"] == 1
    assert "this preview failed" in as_left["gate"]["output"]


def test_a_first_run_with_another_k3s_version_stops_with_step_2s_message_and_changes_nothing(adoption: Any) -> None:
    """Step 4's first run on the lab as the playbook left it, gated, with k3sVersion not the
    installed one: the gate cannot see it (a preview opens no SSH session), the up stops at the
    install step with step 2's message, and the lab is as it was but for the keep-host-keys
    drop-in, which the adoption writes anyway."""
    differs = adoption["adoption"]["k3s_differs_before_adoption"]
    assert differs["k3s_setting"]["rc"] == 0, differs["k3s_setting"]
    assert differs["gate"]["rc"] == 0, differs["gate"]["output"]
    up = differs["up"]
    assert up["rc"] != 0
    assert "set k3sVersion to the installed version (docs/adoption.md, step 2)" in up["output"]
    assert "mgmt-k3s-install" in up["output"]
    assert up["installs"] == []
    assert up["pve_writes"] == []
    assert up["k8s_writes"] == []
    assert differs["before"]["fingerprints"] == differs["after"]["fingerprints"]
    assert differs["before"]["vm"] == differs["after"]["vm"]
    assert differs["before"]["releases"] == differs["after"]["releases"]
    assert set(differs["changed_files"]) <= {KEEP_HOST_KEYS}
    assert differs["state_changed"], "the failed run recorded nothing in the backend"
    assert [step["rc"] for step in differs["put_back"]] == [0, 0], differs["put_back"]


def test_the_adopted_vm_is_the_sites(adoption: Any) -> None:
    site = adoption["site"]
    assert adoption["adopted_vm"] == {"id": str(site.vmid), "node": site.node, "address": site.address}


def test_a_first_run_targeted_at_the_node_cannot_leave_the_cluster_out(adoption: Any) -> None:
    """What --target would do instead of step 4's first run: a preview targeted at the Kubernetes
    provider and everything it depends on (box_adoption.NODE_TARGETS), so that the admin
    kubeconfig would be in the state before any preview plans a Kubernetes object. The engine plans an import whatever
    --target says (it decides an import before it consults the targets), so it plans the cluster's
    imports too, under the ClusterApi component that, untargeted, it does not create: the preview
    fails on the state's integrity, the gate refuses it, and nothing is touched."""
    first = adoption["adoption"]["node_first"]
    cluster_api = "urn:pulumi:lab::lab-mgmt::homelab:index:ClusterApi::mgmt"
    for output in (first["preview"]["output"], first["gate"]["output"]):
        assert f"refers to missing parent {cluster_api}" in output, output[-6000:]
    assert first["preview"]["rc"] != 0
    assert first["gate"]["preview_rc"] != 0
    imported_on_the_cluster = {
        step["urn"].rsplit("::", 1)[1]
        for step in first["gate"]["preview_steps"]
        if step["op"] == "import" and "$kubernetes:" in step["urn"]
    }
    assert imported_on_the_cluster, "the targeted preview planned no Kubernetes import"
    assert all(f"::{name}" not in " ".join(box_adoption.NODE_TARGETS) for name in imported_on_the_cluster)
    assert first["gate"]["rc"] == 1
    assert "this preview failed" in first["gate"]["output"]
    assert first["preview"]["ssh_sessions"] == []
    assert first["preview"]["pve_writes"] == []
    assert first["preview"]["k8s_writes"] == []
    assert first["state_changed"] == []


RUNS = tuple(name for name, _ in box_adoption.ADOPTION_RUNS)
CLUSTER_IMPORTS = {
    *scenarios.RELEASE_RESOURCES,
    *(f"mgmt-ns-{namespace}" for namespace, _, _ in playbook_lab.PROVIDERS.values()),
    *scenarios.PROVIDER_CR_RESOURCES,
}
# What each run opens on the guest and writes to the cluster, as the box shows it: the first runs
# the seven host steps, the second none and writes the program's lab-mgmt-readonly role, account,
# binding and token, and the annotation of its wait on each of the operator's webhook
# configurations.
SSH_SESSIONS = {"node": 7, "cluster": 0}
K8S_WRITES = {"node": 0, "cluster": 6}
WEBHOOK_CONFIGURATIONS = {f"capi-operator-{kind}-webhook-configuration" for kind in ("validating", "mutating")}


@pytest.mark.parametrize("run", RUNS)
def test_the_adoption_gate_passes(adoption: Any, run: str) -> None:
    gate = adoption["adoption"]["runs"][run]["gate"]
    assert gate["preview_rc"] == 0, gate["preview_stderr"]
    assert gate["rc"] == 0, gate["output"]
    assert {step["op"] for step in gate["preview_steps"]} <= {"same", "create", "import", "read"}


def test_the_first_run_leaves_the_cluster_out_and_the_second_imports_it(adoption: Any) -> None:
    node, cluster = (adoption["adoption"]["runs"][run] for run in RUNS)
    for run in (node, cluster):
        assert run["up"]["rc"] == 0, run["up"]["output"][-6000:]
        assert names(run["up"], "update") == set()
    assert not any("$kubernetes:" in step["urn"] for key in ("preview", "up") for step in node[key]["steps"])
    assert names(node["up"], "import") == {"mgmt-vm"}
    assert names(cluster["up"], "import") == CLUSTER_IMPORTS
    assert names(cluster["preview"], "import") == CLUSTER_IMPORTS
    assert resources_summary(node["up"]) == ["+ 12 created", "= 1 imported", "13 changes"]
    assert resources_summary(cluster["up"]) == ["+ 8 created", "= 12 imported", "20 changes. 13 unchanged"]


@pytest.mark.parametrize("run", RUNS)
def test_the_adoption_preview_opens_no_session_and_writes_nothing(adoption: Any, run: str) -> None:
    preview = adoption["adoption"]["runs"][run]["preview"]
    assert preview["rc"] == 0, preview["output"][-6000:]
    assert preview["ssh_sessions"] == []
    assert preview["pve_writes"] == []
    assert preview["k8s_writes"] == []


def test_the_adoption_preview_imports_the_vm(adoption: Any) -> None:
    assert "mgmt-vm" in names(adoption["adoption"]["runs"]["node"]["preview"], "import")


@pytest.mark.parametrize("run", RUNS)
def test_the_adoption_up_writes_nothing_to_proxmox_and_reboots_nothing(adoption: Any, run: str) -> None:
    up = adoption["adoption"]["runs"][run]["up"]
    assert up["rc"] == 0, up["output"][-6000:]
    assert "mgmt-image" not in names(up, "create")
    assert up["pve_writes"] == []
    before, after = adoption["adoption"]["runs"][run]["before"], adoption["adoption"]["runs"][run]["after"]
    assert before["vm"] == after["vm"]
    assert after["vm"]["status"] == "running"
    # No image downloaded, no volume made.
    assert before["pve_volumes"] == after["pve_volumes"]


@pytest.mark.parametrize("run", RUNS)
def test_the_host_steps_open_sessions_that_change_nothing_on_the_guest(adoption: Any, run: str) -> None:
    adopted = adoption["adoption"]["runs"][run]
    up = adopted["up"]
    assert len(up["ssh_sessions"]) == SSH_SESSIONS[run], up["ssh_sessions"]
    assert up["installs"] == []
    assert adopted["before"]["fingerprints"] == adopted["after"]["fingerprints"]
    assert set(adopted["changed_files"]) <= {KEEP_HOST_KEYS}
    assert changing_calls(adopted["calls_during_up"]) == []


@pytest.mark.parametrize("run", RUNS)
def test_the_releases_keep_their_revision_and_no_playbook_object_is_written(adoption: Any, run: str) -> None:
    adopted = adoption["adoption"]["runs"][run]
    before, after = adopted["before"], adopted["after"]
    assert before["releases"] == after["releases"]
    assert {name for name, _, _ in after["releases"]} == {
        f"sh.helm.release.v1.{release}.v1" for release in playbook_lab.HANDED_OVER
    }
    assert {key: value for key, value in after["objects"].items() if key in before["objects"]} == before["objects"]
    written = adopted["up"]["k8s_writes"]
    assert len(written) == K8S_WRITES[run], written
    assert all(name.startswith("lab-mgmt-readonly") or name in WEBHOOK_CONFIGURATIONS for _, _, name in written), (
        written
    )


def test_the_next_preview_expects_no_changes_and_passes(adoption: Any) -> None:
    preview = adoption["adoption"]["no_changes_preview"]
    assert preview["rc"] == 0, preview["output"][-6000:]
    assert resources_summary(preview) == ["33 unchanged"]
    assert preview["ssh_sessions"] == []
    assert preview["pve_writes"] == []


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def test_a_k3s_version_other_than_the_installed_one_stops_with_step_2s_message(adoption: Any) -> None:
    differs = adoption["k3s_differs"]
    up = differs["up"]
    assert up["rc"] != 0
    # Once adopted, the stack records the installed k3s: an older k3sVersion (the one the box
    # serves besides the other site's) is refused as a downgrade before any host step dials.
    wanted, installed = differs["setting"]["args"][-1], differs["put_back"]["args"][-1]
    if _release(wanted) < _release(installed):
        assert f"runs k3s {installed}, and {wanted} is older: k3s supports no downgrade" in up["output"]
        assert up["ssh_sessions"] == []
    else:
        assert "set k3sVersion to the installed version (docs/adoption.md, step 2)" in up["output"]
    assert up["installs"] == []
    assert up["pve_writes"] == []
    assert up["k8s_writes"] == []
    assert differs["before"]["fingerprints"] == differs["after"]["fingerprints"]
    assert differs["changed_files"] == []
    assert differs["before"]["vm"] == differs["after"]["vm"]
    assert differs["put_back"]["rc"] == 0, differs["put_back"]


def test_the_stand_ins_knew_every_request(adoption: Any) -> None:
    for key in STANDIN_RECORDS:
        assert adoption[key] == [], key


@pytest.mark.parametrize("site", box_adoption.SITES.values())
def test_the_playbook_config_is_written_another_way_with_the_same_meaning(site: box.Site) -> None:
    """What the box's lab has in config.yaml is not the program's bytes but means the same."""
    ansible = playbook_vm.ansible_config(site.address)
    assert render_k3s_config(site.address) != ansible
    assert yaml.safe_load(ansible) == yaml.safe_load(render_k3s_config(site.address))


# docs/adoption.md step 8 on the whole program: what each item may write, as the box shows it.
CONVERGENCE_ITEMS = tuple(item for item, _, _ in box_adoption.CONVERGENCE)
PVE_WRITES = {"image": ["POST storage/local/download-url"], "VM": ["PUT qemu/{vmid}/config"]}
SSH_AT_CONVERGENCE = {"k3s steps": 2}
PROVIDER_KINDS = {f"{kind.lower()}s" for kind in playbook_lab.PROVIDERS}


def _k8s_writes_allowed(item: str, write: list[str]) -> bool:
    verb, resource, name = write
    if item == "releases":
        # The operator's upgrade patches the chart's own webhook configurations too, as any
        # `helm upgrade` of it does (tests/test_box_adoption.py checks they keep their bundle).
        return (
            resource == "secrets"
            and name.startswith(tuple(f"sh.helm.release.v1.{release}.v" for release in playbook_lab.HANDED_OVER))
        ) or (verb == "patch" and name in WEBHOOK_CONFIGURATIONS)
    if item == "provider CRs":
        return verb == "patch" and resource in PROVIDER_KINDS
    if item == "namespaces":
        return (verb, resource) == ("patch", "namespaces")
    if item == "CAPMOX Secret":
        # The Secret of the new name is created (a POST, pulumi-kubernetes 4.29 and later), the
        # provider CR repointed at it.
        return (verb, resource, name) == ("patch", "infrastructureproviders", "proxmox") or (
            verb == "create" and resource == "secrets" and name.startswith("capmox-credentials-")
        )
    return False


@AT_CONVERGENCE
@pytest.mark.parametrize("item", CONVERGENCE_ITEMS)
def test_each_convergence_run_changes_only_what_its_item_says(adoption: Any, item: str) -> None:
    convergence = adoption["convergence"]
    assert convergence["adopt_off"]["rc"] == 0
    run = convergence["items"][item]
    assert [step["rc"] for step in run["settings"]] == [0] * len(run["settings"]), run["settings"]
    for action in ("preview", "up"):
        assert run[action]["rc"] == 0, run[action]["output"][-6000:]
        assert not {"delete", "replace", "create-replacement", "delete-replaced"} & set(run[action]["summary"])
    up = run["up"]
    vmid = adoption["site"].vmid
    written = [f"{method} {path.split('/', 5)[-1]}" for method, path, _ in up["pve_writes"]]
    assert written == [write.format(vmid=vmid) for write in PVE_WRITES.get(item, [])], up["pve_writes"]
    assert len(up["ssh_sessions"]) == SSH_AT_CONVERGENCE.get(item, 0), up["ssh_sessions"]
    assert up["installs"] == []
    assert all(_k8s_writes_allowed(item, write) for write in up["k8s_writes"]), up["k8s_writes"]
    assert run["before"]["fingerprints"] == run["after"]["fingerprints"]
    assert run["changed_files"] == []
    assert run["before"]["vm"] == run["after"]["vm"]
    assert changing_calls(run["calls_during_up"]) == []


@AT_CONVERGENCE
def test_the_convergence_upgrades_each_release_once_and_writes_every_provider_cr_and_namespace(
    adoption: Any,
) -> None:
    items = adoption["convergence"]["items"]
    assert {name for name, _, _ in items["releases"]["after"]["releases"]} == {
        f"sh.helm.release.v1.{release}.v{revision}" for release in playbook_lab.HANDED_OVER for revision in (1, 2)
    }
    assert {resource for _, resource, _ in items["provider CRs"]["up"]["k8s_writes"]} == PROVIDER_KINDS
    assert {name for _, _, name in items["namespaces"]["up"]["k8s_writes"]} == {
        namespace for namespace, _, _ in playbook_lab.PROVIDERS.values()
    }
    assert any(name.startswith("capmox-credentials-") for _, _, name in items["CAPMOX Secret"]["up"]["k8s_writes"])


@AT_CONVERGENCE
def test_the_owners_reboot_after_the_vm_run_keeps_the_host_key_and_the_last_preview_is_empty(adoption: Any) -> None:
    convergence = adoption["convergence"]
    assert convergence["host_key_before_reboot"] == convergence["host_key_after_reboot"]
    preview = convergence["no_changes_preview"]
    assert preview["rc"] == 0, preview["output"][-6000:]
    assert preview["ssh_sessions"] == []
    assert preview["pve_writes"] == []


def test_the_stand_ins_knew_every_request_and_k3s_s_jobs_installed_the_charts(adoption: Any) -> None:
    """Every stand-in of the box answered what it was asked, and the playbook's charts were
    installed by k3s's helm-controller and its Jobs (e2e/box/management/k3s_charts.py)."""
    problems = {key: value for key, value in adoption.items() if key.endswith(("_unknown", "_errors")) and value}
    assert problems == {}
    assert {"k3s_job_pod_errors", "k3s_chart_unknown"} <= set(adoption)
