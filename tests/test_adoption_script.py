"""docs/adoption.md reads as a script (e2e/box/takeover/doc_script.py), which the owner's takeover
in the box types as it stands (tests/test_box_takeover.py): every command is in a `sh` block, in
the order the owner types it, each block on the laptop or on the Proxmox node, with only the tools
the box gives each and only the placeholders the journey fills in."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from e2e.box.takeover import doc_script

REPO = Path(__file__).resolve().parent.parent
PAGE = (REPO / "docs" / "adoption.md").read_text()
JOURNEY = doc_script.blocks(until=doc_script.TYPED_UNTIL)
WITHOUT_LAB1 = doc_script.blocks(until=doc_script.TYPED_UNTIL, workload_clusters=False)


def test_no_command_hides_in_an_indented_block_the_script_would_skip() -> None:
    outside_fences = re.sub(r"^```.*?^```$", "", PAGE, flags=re.MULTILINE | re.DOTALL)
    assert [line for line in outside_fences.splitlines() if line.startswith("    ") and line.strip()] == []


def test_every_fence_is_a_command_or_what_a_tool_prints() -> None:
    assert {match.group(1) for match in doc_script.FENCE.finditer(PAGE)} == {"sh", "text"}


def test_the_journey_types_the_takeover_in_the_pages_order() -> None:
    steps = [block.step.split(".")[0] for block in JOURNEY]
    assert steps[0] == "1"
    assert steps[-1] == "W7"
    assert [step for i, step in enumerate(steps) if step != steps[i - 1] or i == 0] == [
        *("1", "2", "W1", "W2", "3", "4", "5", "6", "W6", "W7"),
    ]
    # The two gated adoption runs: the check before each `up`.
    lines = [line for block in JOURNEY for line in block.lines]
    checks = [i for i, line in enumerate(lines) if line.startswith(".venv/bin/python tools/adoption_check.py")]
    ups = [i for i, line in enumerate(lines) if line.startswith("pulumi up")]
    assert len(checks) == 2
    assert checks[0] < ups[0]
    assert checks[1] < ups[1]


def test_each_block_uses_only_the_tools_of_where_it_is_typed() -> None:
    for block in JOURNEY:
        allowed = doc_script.NODE_TOOLS if block.on_node else doc_script.LAPTOP_TOOLS
        assert doc_script.tools(block) <= allowed, block


@pytest.mark.parametrize("typed", [JOURNEY, WITHOUT_LAB1], ids=["with lab1", "without"])
def test_the_node_blocks_back_up_set_the_os_type_and_read_the_uptime(typed: list[doc_script.Block]) -> None:
    node = [line for block in typed if block.on_node for line in block.lines]
    assert [line.split()[:2] for line in node] == [
        ["vzdump", "<vmId>"],
        ["qm", "config"],
        ["qm", "set"],
        ["qm", "status"],
    ]


def test_the_placeholders_are_the_owners_seven_values_and_the_vms_two() -> None:
    found = {placeholder for block in JOURNEY for placeholder in block.placeholders()}
    assert found == {
        *("<your backup storage>", "<the running chart version>", "<its namespace>", "<its release>"),
        *("<flag>", "<its value>", "<the kubeconfigs folder of your inspector>", "<vmId>", "<vmAddress>"),
    }
    block = next(block for block in JOURNEY if "<your backup storage>" in block.placeholders())
    values = {"<your backup storage>": "local"} | doc_script.vm_values(305, "192.168.7.30")
    assert block.filled(values)[0] == "vzdump 305 --mode snapshot --storage local"


def test_no_typed_line_names_the_labs_own_vm() -> None:
    """The page is typed at another site too: the VM's id and address come from placeholders."""
    for block in JOURNEY:
        for line in block.lines:
            assert not re.search(r"\b(201|192\.168\.4\.21)\b", line), line


def test_a_placeholder_without_a_value_is_an_error_not_a_command() -> None:
    block = next(block for block in JOURNEY if block.placeholders())
    with pytest.raises(KeyError, match=block.placeholders()[0]):
        block.filled({})


def test_the_files_the_commands_read_are_the_repositorys() -> None:
    lines = " ".join(line for block in JOURNEY for line in block.lines)
    for path in ("components/scripts/helmchart_handover.sh", "tools/adoption_check.py"):
        assert path in lines
        assert (REPO / path).exists()


def test_a_lab_without_workload_clusters_takes_the_shipped_entry_out_in_step_2_and_only_there() -> None:
    """The adoption box at another site types it (tests/test_box_whole_adoption.py); the owner's
    lab, which runs lab1, never does."""
    [block] = [block for block in WITHOUT_LAB1 if "pulumi config rm workloadClusters" in block.lines]
    assert block.step.startswith("2.")
    assert block.lines == ("pulumi config rm workloadClusters",)
    assert not block.on_node
    assert "pulumi config rm workloadClusters" not in [line for b in JOURNEY for line in b.lines]


def test_a_lab_without_workload_clusters_types_every_line_but_lab1s() -> None:
    """No W-step, no line that reads lab1 or uninstalls its autoscaler; every other line of the
    owner's journey, in the same order."""
    without = [line for block in WITHOUT_LAB1 for line in block.lines]
    assert [block.step.split(".")[0] for block in WITHOUT_LAB1 if block.step.startswith("W")] == []
    assert not [line for line in without if "lab1" in line or " uninstall " in line]
    shared = [line for block in JOURNEY if not block.step.startswith("W") for line in block.lines]
    assert [line for line in without if line != "pulumi config rm workloadClusters"] == [
        line for line in shared if "lab1" not in line and " uninstall " not in line
    ]


# `kubectl get pods -A -o custom-columns=...` as the VM answers it after the playbook: k3s's two
# Completed install pods among the others, and a pod of the owner's whose name only contains the words.
PODS = """\
capi-operator-system   cluster-api-operator-5d8f7c9b6-x2x7q        0a1
cert-manager           cert-manager-7b9c6d5f4-kq2lm                0a2
kube-system            helm-install-cert-manager-vx8hn             0a3
kube-system            helm-install-cluster-api-operator-9tq4d     0a4
default                nightly-helm-install-report-4kzq2           0a5
"""


def test_the_pod_lists_of_steps_1_and_6_leave_k3s_s_install_pods_out(tmp_path: Path) -> None:
    """Step 3 makes k3s's helm-controller delete its Completed `helm-install-<chart>` pods
    (e2e/box/management/k3s_charts.py): both lists leave them out the same way, or
    step 6's diff prints them. Each line's pipeline run in bash on what kubectl prints."""
    listings = [(block.step, line) for block in JOURNEY for line in block.lines if " get pods -A " in line]
    assert [step.split(".")[0] for step, _ in listings] == ["1", "6"]
    (before, after) = (line for _, line in listings)
    assert before.replace("pods.before", "pods") == after.replace("pods.after", "pods")
    (tmp_path / "lab-mgmt-adoption").mkdir()
    pipeline = before.split(" | ", 1)[1]
    done = subprocess.run(
        ["bash", "-c", f"cat <<'EOF' | {pipeline}\n{PODS}EOF"],
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "lab-mgmt-adoption" / "pods.before").read_text().splitlines() == [
        "capi-operator-system cluster-api-operator-5d8f7c9b6-x2x7q 0a1",
        "cert-manager cert-manager-7b9c6d5f4-kq2lm 0a2",
        "default nightly-helm-install-report-4kzq2 0a5",
    ]
