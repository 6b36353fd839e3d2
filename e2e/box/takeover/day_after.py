"""The day after the owner's takeover (issue 55; tests/test_box_takeover.py), on the lab1 the program
took over (journey.py) and scaled (scaling.py): the owner upgrades lab1's Kubernetes as
docs/operations.md "Upgrading a workload cluster's Kubernetes" says (its step 3's lines as they
stand, then `pulumi up --stack lab` and, once the control plane has rolled, the zero-change
preview), which moves the control plane and the workers to machine templates under the program's
names; then the state and its passphrase are lost, and a new stack takes the lab back typing the
page's "Lost state or passphrase" as a lab whose takeover stopped before adoption.md step 8 does
(the journey's: no image file of the program's, adoption left on), with the VM's step and lab1's
lines (e2e/box/management/lost_state.py types it). Its step 4 stops naming the templates as lab1 runs
them, one line each, which the owner types before the next preview, as the page says, and takes
out again in step 5 with the sentence's line. Read around it: lab1's machine templates and
Machines before and after.

    after = day_after.upgraded_then_recovered(lab)
"""

from __future__ import annotations

import re
from typing import Any

from e2e.box.management import lost_state
from e2e.box.takeover import keyboard, lost_state_page
from e2e.box.takeover.owners_lab import OwnersLab
from e2e.box.workload.lab1_reads import LAB1, get, until

UPGRADE_SECTION = "### Upgrading a workload cluster's Kubernetes (deliberate)"
# The step's block sits in a numbered list, indented.
INDENTED_SH = re.compile(r"^ *```sh\n(.*?)^ *```$", re.MULTILINE | re.DOTALL)
UPGRADE_TO = "v1.35.10"
TEMPLATE_NAMES = "pulumi config set --path 'workloadClusters[0].templateNames."
# Step 5 says it in a sentence, not a block.
TEMPLATE_NAMES_OFF = re.compile(r"`(pulumi config rm --path 'workloadClusters\[0\]\.templateNames')`")
ADOPT_OFF = "pulumi config rm --path 'workloadClusters[0].adopt'"
ROLL_BOUND_SECONDS = 180


def upgrade_lines() -> list[str]:
    """The upgrade section's one `sh` block, line by line, as it stands."""
    page = lost_state_page.PAGE.read_text()
    start = page.index(UPGRADE_SECTION)
    [block] = INDENTED_SH.findall(page[start : page.index("\n### ", start + 1)])
    return [line.strip() for line in block.splitlines()]


def recovery_lines() -> list[lost_state_page.Line]:
    """The section as a lab whose takeover stopped before adoption.md step 8 types it (the
    journey's), with step 5's sentence typed right after lab1's own line."""
    off = TEMPLATE_NAMES_OFF.findall(lost_state_page.section())
    if len(off) != 1:
        raise ValueError(f"{lost_state_page.SECTION} names no one line taking templateNames out: {off}")
    lines = []
    for line in lost_state_page.for_a_lab_mid_takeover():
        lines.append(line)
        if line.text == ADOPT_OFF:
            lines.append(lost_state_page.Line(line.step, on_node=False, with_lab1=True, text=off[0]))
    return lines


def templates(lab: OwnersLab) -> dict[str, Any]:
    """The machine templates the control plane and the workers run, and lab1's Machines."""
    cluster = lab.box.cluster
    control_plane = get(cluster, "kubeadmcontrolplane", f"{LAB1.name}-control-plane") or {}
    deployment = get(cluster, "machinedeployment", LAB1.workers) or {}
    return {
        "control_plane": control_plane.get("spec", {})
        .get("machineTemplate", {})
        .get("spec", {})
        .get("infrastructureRef", {})
        .get("name"),
        "workers": deployment.get("spec", {})
        .get("template", {})
        .get("spec", {})
        .get("infrastructureRef", {})
        .get("name"),
        "version": control_plane.get("status", {}).get("version"),
        "machines": sorted(m["metadata"]["name"] for m in (get(cluster, "machines") or {}).get("items", [])),
    }


def upgraded_then_recovered(lab: OwnersLab) -> dict[str, Any]:
    out: dict[str, Any] = {"before": templates(lab)}
    out["upgrade"] = [lab.laptop(line) for line in upgrade_lines()]
    out["upgrade"].append(lab.laptop("pulumi up --stack lab"))
    if any(done["rc"] for done in out["upgrade"]):
        return out
    out["rolled"] = until(
        "the control plane at the new version on one Machine",
        lambda: (now := templates(lab))["version"] == UPGRADE_TO and len(now["machines"]) == 1 and now,
        bound=ROLL_BOUND_SECONDS,
    )
    out["upgrade"].append(lab.laptop("pulumi preview --stack lab --expect-no-changes"))
    out["recovery"] = lost_state.recovered(
        lab.box, recovery_lines(), told=lambda ran: keyboard.named_lines(ran, TEMPLATE_NAMES)
    )
    out["after"] = templates(lab)
    return out
