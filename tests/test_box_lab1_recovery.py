"""The state and its passphrase lost, in the box (e2e/box/workload/lab1_recovery.py, a step of the
program's lab1 scenario, the session fixture `lab1_box`): a new stack on an empty backend, with a
new passphrase, types docs/operations.md "Lost state or passphrase" line by line (but the VM's
step and the node's line) and takes over
the lab the lost stack made, lab1 with a worker running: the adoption run imports and writes
nothing, the run with adopt off writes metadata and one Helm revision per release and no node
rolls, and the zero-change preview passes; the rest of the scenario runs on the new stack.
Selected with `pytest -m engine`."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.box.takeover import lost_state_page

pytestmark = pytest.mark.engine

# The adoption run creates nothing of the lab's but the annotation patches of the operator's two
# webhook configurations: a patch is an apply, which a new stack's run makes again.
WEBHOOK_PATCH = "WebhookConfigurationPatch::"


def _runs(lab1_box: Any) -> list[dict[str, Any]]:
    """The typed `pulumi preview` and `up` lines, each with its plan and writes."""
    return [typed for typed in lab1_box["recovery"]["typed"] if "action" in typed]


def _of_the_lab(step: dict[str, str]) -> bool:
    """A step of an object on a cluster, not of a component, a provider or the stack itself."""
    return "$kubernetes:" in step["urn"] and "pulumi:providers:" not in step["urn"].rsplit("$", 1)[-1]


def test_every_line_of_the_section_is_typed_and_succeeds(lab1_box: Any) -> None:
    typed = lab1_box["recovery"]["typed"]
    assert [t["line"] for t in typed] == [line.text for line in lost_state_page.for_the_lab1_box()]
    for entry in typed:
        assert entry["rc"] == 0, entry


def test_the_adoption_run_imports_every_object_and_writes_nothing(lab1_box: Any) -> None:
    preview, up = _runs(lab1_box)[:2]
    for run in (preview, up):
        steps = [s for s in run["changed"] if _of_the_lab(s)]
        assert steps
        assert [s for s in steps if s["op"] != "import" and WEBHOOK_PATCH not in s["urn"]] == []
        assert len([s for s in steps if WEBHOOK_PATCH in s["urn"]]) == 2
    assert {w[1] for w in up["writes"]} <= {"validatingwebhookconfigurations", "mutatingwebhookconfigurations"}
    assert lab1_box["recovery"]["adopted"] == {"appeared": [], "gone": [], "rewritten": []}


def test_the_run_with_adopt_off_rolls_nothing_and_the_next_preview_is_empty(lab1_box: Any) -> None:
    runs = _runs(lab1_box)
    preview, up, last = runs[2:]
    for run in (preview, up):
        assert {s["op"] for s in run["changed"] if _of_the_lab(s)} <= {"update"}, run["changed"]
    recovered = lab1_box["recovery"]["recovered"]
    # The read-only tokens among what stayed: the kubeconfigs given out with them still work.
    assert recovered["gone"] == []
    # One Helm revision more for each release, nothing else new: no Machine, no Node.
    assert all(name.startswith("helm-releases/") for name in recovered["appeared"]), recovered["appeared"]
    assert len(recovered["appeared"]) == 4, recovered["appeared"]
    # Metadata only: no spec of lab1's moved, nor any Deployment's the releases made.
    for line in recovered["rewritten"]:
        if not line.startswith("helm-releases/"):
            generations = line.rpartition(" generation ")[2]
            before, after = generations.split("->")
            assert before == after, line
    assert (last["action"], last["rc"], last["changed"]) == ("preview --expect-no-changes", 0, [])


def test_the_autoscaler_runs_on_through_the_recovery(lab1_box: Any) -> None:
    recovery = lab1_box["recovery"]
    events = lab1_box["runner"]["events"]
    assert events[0]["event"] == "started"
    assert [e for e in events if recovery["began"] <= e["at"] <= recovery["ended"]] == []


def test_after_the_recovery_each_object_has_one_applier_the_stacks(lab1_box: Any) -> None:
    """The lost stack's last run updated the InfrastructureProvider CR and the MachineDeployment
    under its field manager; the new stack applies under the same name (components/field_manager.py),
    so no manager of a stack that is gone co-owns a field (review 4, finding 3). The control plane,
    which the lost stack only created (a POST under `pulumi-kubernetes`), is the new stack's too."""
    recovery = lab1_box["recovery"]
    updated = recovery["lost_stack_updated"]
    assert [step["rc"] for step in updated["steps"]] == [0, 0]
    assert updated["up"]["rc"] == 0, updated["up"]["error"]
    touched = {step["urn"].rsplit("::", 1)[1] for step in updated["up"]["changed"]}
    assert {"mgmt-infrastructure-proxmox", f"{lab1_box['entry']['name']}-workers"} <= touched, touched
    assert recovery["appliers"] == {
        kind: ["pulumi-kubernetes-lab-mgmt/Apply"]
        for kind in ("infrastructureprovider", "machinedeployment", "kubeadmcontrolplane")
    }


def test_a_token_rotation_after_the_recovery_gives_kubeconfigs_that_answer(lab1_box: Any) -> None:
    """Each cluster answers the inspector's read through the new read-only kubeconfig (review 4,
    finding 4: they answered 401, the new Secret holding the revoked token). In the same run
    CAPMOX's token goes back to the first one: a change of the InfrastructureProvider CR, which
    the lost stack had updated, passes (without one field manager it stopped at a conflict)."""
    rotated = lab1_box["recovery"]["rotated_tokens"]
    assert (rotated["config"], rotated["up"]["rc"]) == ([0, 0], 0), rotated["up"]["error"]
    first, lost_stacks = lab1_box["recovery"]["lost_stack_updated"]["capmox_secrets"]
    assert first != lost_stacks
    assert rotated["capmox_secret"] == first
    assert rotated["reads"] == {
        "lab-mgmt": {"rc": 0, "stderr": ""},
        lab1_box["entry"]["name"]: {"rc": 0, "stderr": ""},
    }
