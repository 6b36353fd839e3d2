"""The owner's takeover, word for word (issue 40; e2e/box/takeover/journey.py): the lab as its owner
runs it today (the playbook's management cluster, lab1 made with clusterctl running two workers,
Cilium and a cluster-autoscaler installed by hand), and docs/adoption.md's commands typed on it as
they stand, with Pulumi.lab.yaml as shipped, from the backup of step 1 to W6's zero-change
preview. The owner must find nothing rebooted, restarted or replaced, and nothing written to
lab1's objects before W6."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.box.takeover import doc_script, journey
from e2e.box.workload import lab1_box, lab1_state
from e2e.engine.control_plane import CLUSTER_API_USER, PROVIDERS_USER
from e2e.engine.netns import in_new_netns

pytestmark = pytest.mark.engine
LINES = [line for block in doc_script.blocks(until=journey.UNTIL) for line in block.lines]
# Who writes to lab1's objects on their own: Cluster API's manager and the workload stand-ins. Every
# other writer is the laptop: the engine (k3s's admin), kubectl and helm (the owner's admin).
CONTROLLERS = {CLUSTER_API_USER, PROVIDERS_USER}


def _by_the_laptop(writes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [write for write in writes if write["user"] not in CONTROLLERS]


@pytest.fixture(scope="module")
def takeover(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("takeover")
    return in_new_netns("takeover.journey.owners_takeover", str(root), addresses=list(lab1_box.ADDRESSES), timeout=2400)


def _failed(takeover: dict[str, Any]) -> str:
    last = (takeover.get("typed") or [{}])[-1]
    return (
        takeover.get("failed") or f"{last.get('line')}: rc {last.get('rc')}\n{last.get('stdout')}\n{last.get('stderr')}"
    )


def test_the_lab_starts_as_its_owner_runs_it(takeover: Any) -> None:
    made = takeover["made"]
    assert made["hand_autoscaler"]["rc"] == 0, made["hand_autoscaler"]
    assert made["site"]["workers"] == 2
    assert len(made["machines"]) == 2  # the workers'
    assert [release["name"] for release in made["helm_list"]] == ["cilium"]


def test_every_line_of_the_page_ran_as_typed_and_none_failed(takeover: Any) -> None:
    typed = takeover.get("typed", [])
    assert [entry["line"] for entry in typed if entry["rc"]] == [], _failed(takeover)
    assert len(typed) == len(LINES), _failed(takeover)


def test_both_gates_passed_and_the_last_previews_found_nothing_to_change(takeover: Any) -> None:
    typed = takeover["typed"]
    gates = [entry for entry in typed if entry["line"].startswith(".venv/bin/python tools/adoption_check.py")]
    assert [entry["rc"] for entry in gates] == [0, 0]
    no_changes = [entry for entry in typed if entry["line"].endswith("--expect-no-changes")]
    assert [entry["step"].split(".")[0] for entry in no_changes] == ["6", "W6"]


def test_the_node_made_one_backup_and_knew_every_command(takeover: Any) -> None:
    assert len(takeover["backups"]) == 1
    assert takeover["backups"][0].startswith("local:backup/vzdump-qemu-201-")
    assert takeover["node_unknown"] == []


def test_nothing_rebooted_and_k3s_did_not_restart(takeover: Any) -> None:
    assert takeover["after"]["vm"] == takeover["before"]["vm"]
    assert takeover["after"]["fingerprints"] == takeover["before"]["fingerprints"]


def test_no_machineset_machine_or_node_of_lab1_was_replaced(takeover: Any) -> None:
    def identities(state: dict[str, Any]) -> dict[str, str]:
        return {
            name: found["uid"]
            for name, found in state["lab1"].items()
            if name.split("/")[0] in ("machinesets", "machines", "nodes")
        }

    before = identities(takeover["before"])
    assert len([name for name in before if name.startswith("machines/")]) == 2
    assert identities(takeover["after"]) == before


def test_nothing_wrote_to_lab1s_objects_before_w6(takeover: Any) -> None:
    """Cluster API's controllers and the workload stand-ins go on writing status; the laptop's
    tools write nothing to lab1's objects, nor to what Cluster API made from them."""
    assert _by_the_laptop(takeover["writes_before_w6"]) == []


def test_w6_writes_only_the_seven_objects_and_no_replicas(takeover: Any) -> None:
    writes = _by_the_laptop(takeover["writes_from_w6"])
    assert writes, "W6 applies the program's fields"
    seven = {f"{kind}s" for kind, _ in lab1_state.OBJECTS}
    assert {write["resource"] for write in writes} <= seven
    # The worker count stays the autoscaler's: W6 never sends the MachineDeployment's spec.replicas.
    deployment = [w for w in writes if w["resource"] == "machinedeployments"]
    assert deployment
    assert [w for w in deployment if "replicas" in ((w["sent"] or {}).get("spec") or {})] == []


def test_the_stand_ins_knew_every_request(takeover: Any) -> None:
    problems = {key: value for key, value in takeover.items() if key.endswith(("_unknown", "_errors")) and value}
    assert problems == {}
    assert takeover["lab1_problems"] == {"workload": [], "autoscaler_runner": []}
