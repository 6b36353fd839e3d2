"""Adoption in the lab in a box, whole (e2e/box_adoption.py, issue 18): the box starts as the
playbook left the lab (VM 201 made on the node, not through the API, running k3s with an Ansible-
rendered config.yaml, the playbook's objects on its API server), then docs/adoption.md is followed
with the real CLI and the program's own __main__.py: the hand-over, the adoption gate, the
adoption `pulumi up`, the preview expecting no changes; then a k3sVersion that is not the
installed one. What each run made the box do is read from the stand-ins' and the guest's logs and
its disk. In a network namespace of the test's own; selected with `pytest -m engine`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from components.k3s_node import render_k3s_config
from e2e import box_adoption, playbook_lab, scenarios
from e2e.netns import in_new_netns

pytestmark = pytest.mark.engine

# What the adoption run may write on the guest: keep_host_keys.sh's cloud-init drop-in, which
# docs/adoption.md step 8.6 relies on (a host that already has it is left alone).
KEEP_HOST_KEYS = "etc/cloud/cloud.cfg.d/99-lab-mgmt-keep-host-keys.cfg"
# Power changes, and anything else a reboot or a rebuild would send.
CHANGING_VERBS = ("start", "stop", "restart", "enable", "daemon-reload")


@pytest.fixture(scope="module")
def adoption(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("whole-adoption")
    return in_new_netns(
        "box_adoption.adoption_in_the_box", str(root), addresses=[scenarios.PROXMOX_ADDRESS], timeout=2400
    )


def names(run: dict[str, Any], op: str) -> set[str]:
    return {step["urn"].rsplit("::", 1)[1] for step in run["steps"] if step["op"] == op}


def test_the_settings_and_the_hand_over_succeed(adoption: Any) -> None:
    for step in [*adoption["steps"], *adoption["adoption"]["settings"]]:
        assert step["rc"] == 0, step
    handover = adoption["adoption"]["handover"]
    assert handover["rc"] == 0, handover
    assert adoption["adoption"]["charts_left"] == ["helmchart.helm.cattle.io/traefik"]


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


def test_a_first_run_targeted_at_the_node_cannot_leave_the_cluster_out(adoption: Any) -> None:
    """The two-run adoption tried before step 4: a preview targeted at the Kubernetes provider and
    everything it depends on (box_adoption.NODE_TARGETS), so that the admin kubeconfig would be in
    the state before any preview plans a Kubernetes object. The engine plans an import whatever
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


@pytest.mark.xfail(
    strict=True,
    reason="program defect: the kubernetes provider's kubeconfig is the k3s read step's output, unknown at "
    "the first (adoption) preview, so the engine plans an update after every Kubernetes import, which the "
    "gate refuses; the up makes none of them (tests below). A first run with --target cannot record the "
    "kubeconfig first: the engine imports whatever --target says (test above); the program must change",
)
def test_the_adoption_gate_passes(adoption: Any) -> None:
    gate = adoption["adoption"]["gate"]
    assert gate["preview_rc"] == 0, gate["preview_stderr"]
    assert gate["rc"] == 0, gate["output"]


def test_the_gate_refuses_only_updates_of_what_the_preview_imports_and_the_up_makes_none(adoption: Any) -> None:
    gate, preview, up = (adoption["adoption"][key] for key in ("gate", "preview", "up"))
    refused = {line.strip().rsplit("::", 1)[1] for line in gate["output"].splitlines() if line.startswith("  update: ")}
    assert refused == names(preview, "update")
    assert refused == {
        *scenarios.RELEASE_RESOURCES,
        *(f"mgmt-ns-{namespace}" for namespace, _, _ in playbook_lab.PROVIDERS.values()),
        *scenarios.PROVIDER_CR_RESOURCES,
    }
    assert refused <= names(preview, "import")
    assert names(up, "update") == set()
    assert refused <= names(up, "import")


def test_the_adoption_preview_imports_the_vm_and_opens_no_session(adoption: Any) -> None:
    preview = adoption["adoption"]["preview"]
    assert preview["rc"] == 0, preview["output"][-6000:]
    assert "mgmt-vm" in names(preview, "import")
    assert preview["ssh_sessions"] == []
    assert preview["pve_writes"] == []


def test_the_adoption_up_imports_the_vm_with_no_proxmox_write_and_no_reboot(adoption: Any) -> None:
    up = adoption["adoption"]["up"]
    assert up["rc"] == 0, up["output"][-6000:]
    assert "mgmt-vm" in names(up, "import")
    assert "mgmt-image" not in names(up, "create")
    assert up["pve_writes"] == []
    before, after = adoption["adoption"]["before"], adoption["adoption"]["after"]
    assert before["vm"] == after["vm"]
    assert after["vm"]["status"] == "running"
    # No image downloaded, no volume made.
    assert before["pve_volumes"] == after["pve_volumes"]


def test_the_host_steps_open_sessions_that_change_nothing_on_the_guest(adoption: Any) -> None:
    up = adoption["adoption"]["up"]
    assert up["ssh_sessions"], "the host steps ran no SSH session"
    assert up["installs"] == []
    before, after = adoption["adoption"]["before"], adoption["adoption"]["after"]
    assert before["fingerprints"] == after["fingerprints"]
    assert set(adoption["adoption"]["changed_files"]) <= {KEEP_HOST_KEYS}
    calls = adoption["adoption"]["calls_during_up"]
    changing = [argv for argv in calls if tuple(argv[:2]) in {("systemctl", verb) for verb in CHANGING_VERBS}]
    assert changing == [], changing
    assert [argv for argv in calls if argv[0] == "apt-get"] == []


def test_the_releases_keep_their_revision_and_no_playbook_object_is_written(adoption: Any) -> None:
    before, after = adoption["adoption"]["before"], adoption["adoption"]["after"]
    assert before["releases"] == after["releases"]
    assert {name for name, _, _ in after["releases"]} == {
        f"sh.helm.release.v1.{release}.v1" for release in playbook_lab.HANDED_OVER
    }
    assert {key: value for key, value in after["objects"].items() if key in before["objects"]} == before["objects"]
    written = adoption["adoption"]["up"]["k8s_writes"]
    assert all(name.startswith("lab-mgmt-readonly") for _, _, name in written), written


def test_the_next_preview_expects_no_changes_and_passes(adoption: Any) -> None:
    preview = adoption["adoption"]["no_changes_preview"]
    assert preview["rc"] == 0, preview["output"][-6000:]
    assert preview["ssh_sessions"] == []
    assert preview["pve_writes"] == []


def test_a_k3s_version_other_than_the_installed_one_stops_with_step_2s_message(adoption: Any) -> None:
    differs = adoption["k3s_differs"]
    up = differs["up"]
    assert up["rc"] != 0
    assert "set k3sVersion to the installed version (docs/adoption.md, step 2)" in up["output"]
    assert up["installs"] == []
    assert up["pve_writes"] == []
    assert up["k8s_writes"] == []
    assert differs["before"]["fingerprints"] == differs["after"]["fingerprints"]
    assert differs["changed_files"] == []
    assert differs["before"]["vm"] == differs["after"]["vm"]


def test_the_stand_ins_knew_every_request(adoption: Any) -> None:
    for key in ("pve_unknown", "chart_unknown", "release_unknown", "operator_errors"):
        assert adoption[key] == [], key


def test_the_playbook_config_is_written_another_way_with_the_same_meaning() -> None:
    """What the box's lab has in config.yaml is not the program's bytes but means the same."""
    assert render_k3s_config(scenarios.VM_ADDRESS) != box_adoption.ANSIBLE_CONFIG
    assert yaml.safe_load(box_adoption.ANSIBLE_CONFIG) == yaml.safe_load(render_k3s_config(scenarios.VM_ADDRESS))
