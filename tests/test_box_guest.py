"""The management VM as a real host in the lab in a box (e2e/standins/guest/guest.py): the program's host scripts
as components/host_script.py sends them (`sudo bash -c '<script>' name args`), over real ssh to a
real sshd, in the program's order, installing k3s from the box's releases (the installer at its
tag, a k3s whose server is a real etcd and kube-apiserver); then again, a version bump, a reboot,
a new cloud-init instance and a re-created VM, in a network namespace of the test's own. Selected
with `pytest -m engine`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.box import scenarios
from e2e.engine.netns import in_new_netns

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("guest")
    return in_new_netns("management.host.box_guest", str(root), timeout=900)


def by_script(steps: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {step["script"]: step for step in steps}


def test_the_host_scripts_bring_a_new_vm_to_a_ready_k3s_node(box: Any) -> None:
    first = box["first_run"]
    for step in first["steps"]:
        assert step["rc"] == 0, step
    steps = by_script(first["steps"])
    assert steps["host_ready.sh"]["stdout"].startswith("ssh-ed25519 ")
    assert "qemu-guest-agent running" in steps["guest_agent.sh"]["stdout"]
    assert steps["k3s_config.sh"]["stdout"] == "k3s config written\n"
    assert f"k3s {scenarios.K3S_VERSION} installed (previously: none)" in steps["k3s_install.sh"]["stdout"]
    assert f"every node Ready on k3s {scenarios.K3S_VERSION}" in steps["node_ready.sh"]["stdout"]
    assert "server: https://127.0.0.1:6443" in steps["read_kubeconfig.sh"]["stdout"]
    node = first["node"]
    assert node["status"]["nodeInfo"]["kubeletVersion"] == scenarios.K3S_VERSION
    assert {"type": "InternalIP", "address": scenarios.VM_ADDRESS} in node["status"]["addresses"]


def test_the_rewritten_kubeconfig_reaches_the_vm_with_verified_certificates(box: Any) -> None:
    namespaces = box["first_run"]["namespaces"]
    assert namespaces["rc"] == 0, namespaces["stderr"]
    assert {"namespace/default", "namespace/kube-system"} <= set(namespaces["stdout"].split())


def test_the_guest_agent_answers_only_once_installed(box: Any) -> None:
    first = box["first_run"]
    assert first["agent_before"] is None
    nic = next(interface for interface in first["agent_after"] if interface["name"] == "ens18")
    assert nic["hardware-address"] == "bc:24:11:5e:00:c9"
    assert {"ip-address-type": "ipv4", "ip-address": scenarios.VM_ADDRESS, "prefix": 24} in nic["ip-addresses"]
    assert box["reboots"]["agent_stopped"] is None


def test_a_second_run_changes_nothing(box: Any) -> None:
    second = box["second_run"]
    for step in second["steps"]:
        assert step["rc"] == 0, step
    steps = by_script(second["steps"])
    assert steps["host_ready.sh"]["stdout"].strip() == box["first_run"]["host_key"]
    assert steps["k3s_config.sh"]["stdout"] == "k3s config unchanged\n"
    assert steps["k3s_install.sh"]["stdout"] == f"k3s {scenarios.K3S_VERSION} already installed\n"
    assert second["installs"] == []
    changing = [call for call in second["calls"] if call[0] == "apt-get" or call[1:2] in (["restart"], ["start"])]
    assert changing == []


def test_a_version_bump_reruns_the_installer_and_restarts_k3s(box: Any) -> None:
    bump = box["bump"]
    for step in bump["steps"]:
        assert step["rc"] == 0, step
    assert [line.split(" ", 1)[1] for line in bump["installs"]] == [f"{scenarios.K3S_BUMP} installed; k3s restarted"]
    assert ["systemctl", "restart", "k3s"] in bump["calls"]
    assert box["bump_version"]["stdout"].splitlines()[0].split()[2] == scenarios.K3S_BUMP
    assert box["bump_node"]["status"]["nodeInfo"]["kubeletVersion"] == scenarios.K3S_BUMP
    assert box["release_unknown"] == []


def test_a_wrong_key_is_refused(box: Any) -> None:
    assert box["wrong_key"]["rc"] == 255
    assert "Permission denied (publickey)" in box["wrong_key"]["stderr"]


def test_a_reboot_keeps_the_host_key_and_brings_k3s_back(box: Any) -> None:
    reboot = box["reboots"]["reboot"]
    for step in reboot:
        assert step["rc"] == 0, step
    assert reboot[0]["stdout"].strip() == box["first_run"]["host_key"]


def test_a_new_instance_id_keeps_the_host_key_and_a_new_vm_gets_a_new_one(box: Any) -> None:
    """keep_host_keys.sh turned cloud-init's ssh_deletekeys off (issue 19, defect 1): a cloud-init
    change keeps the pinned key; only a re-created VM has a new one."""
    reboots = box["reboots"]
    first_key = box["first_run"]["host_key"]
    new_instance_key = reboots["new_instance"]["stdout"].strip()
    assert reboots["new_instance"]["rc"] == 0
    assert new_instance_key == first_key
    # cloud-init adds an instance's keys to those already there.
    assert reboots["new_instance_first_key"]["rc"] == 0
    recreated_key = reboots["recreated"]["stdout"].strip()
    assert reboots["recreated"]["rc"] == 0
    assert recreated_key.startswith("ssh-ed25519 ")
    assert recreated_key != first_key
    assert reboots["recreated_pinned"]["rc"] == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in reboots["recreated_pinned"]["stderr"]


def test_sshd_logs_every_session(box: Any) -> None:
    assert "Accepted publickey for ubuntu" in box["sshd_log"]
    assert "Starting session: command for ubuntu" in box["sshd_log"]
