"""docs/operations.md "Lost state or passphrase" as a script: its `sh` blocks in the section's
order, each line with the step it sits under and where it is typed (the Proxmox node when the
block's first line is `# on the Proxmox node`, else the laptop). Three boxes type it: the whole box,
whose lab the program made and which runs no workload cluster, every block but lab1's (first line
`# in a lab that runs lab1`); the lab1 box, which has no VM of the program's, every block but the
VM's step and the node's; and the owner's lab taken over (e2e/box/takeover/day_after.py), whose
adoption stops before its step 8, every block but those of a finished takeover (`# in a lab whose
takeover is done`). Pure reading, as doc_script is for docs/adoption.md; the mocks tests
check that the section reads as such a script (tests/test_recovery.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from e2e.box.takeover.doc_script import FENCE, ON_THE_NODE, PLACEHOLDER, WITH_LAB1
from e2e.engine.cli import REPO

PAGE = REPO / "docs" / "operations.md"
SECTION = "## Lost state or passphrase"
STEP = re.compile(r"^### (\d+)\. .*$", re.MULTILINE)
# The step that takes the VM and the k3s node over, which the lab1 box, holding no VM of the
# program's, leaves out.
VM_STEP = "3"


# A block's marker (its first line) for a lab that finished its takeover from the playbook
# (adoption.md step 8): one still in the middle of it has no image file and stays adopted.
TAKEOVER_DONE = "# in a lab whose takeover is done"
MARKERS = {
    ON_THE_NODE: (True, False, False),
    f"{ON_THE_NODE}, {TAKEOVER_DONE.removeprefix('# ')}": (True, False, True),
    WITH_LAB1: (False, True, False),
    TAKEOVER_DONE: (False, False, True),
}


@dataclass(frozen=True)
class Line:
    step: str
    """The number of the `### N.` heading it sits under."""
    on_node: bool
    with_lab1: bool
    text: str
    takeover_done: bool = False
    """Only for a lab whose takeover from the playbook is done."""

    def filled(self, values: dict[str, str]) -> str:
        """The line with each placeholder replaced; one not in `values` is an error."""

        def fill(match: re.Match[str]) -> str:
            if match.group(0) not in values:
                raise KeyError(f"no value for {match.group(0)} in step {self.step}")
            return values[match.group(0)]

        return PLACEHOLDER.sub(fill, self.text)


def section() -> str:
    page = PAGE.read_text()
    start = page.index(SECTION)
    return page[start : page.index("\n## ", start + 1)]


def lines() -> list[Line]:
    """Every line of the section's `sh` blocks, in order, markers dropped."""
    text = section()
    steps = [(match.start(), match.group(1)) for match in STEP.finditer(text)]
    found = []
    for fence in FENCE.finditer(text):
        if fence.group(1) != "sh":
            continue
        step = next((number for at, number in reversed(steps) if at < fence.start()), "")
        block = fence.group(2).splitlines()
        marked = block[0].startswith("#")
        if marked and block[0] not in MARKERS:
            raise ValueError(f"{SECTION}, step {step}: a block marked {block[0]!r}, which no box knows")
        on_node, with_lab1, takeover_done = MARKERS[block[0]] if marked else (False, False, False)
        commands = block[1:] if marked else block
        found += [Line(step, on_node, with_lab1, command, takeover_done) for command in commands]
    return found


def for_the_whole_box() -> list[Line]:
    """What a lab the program made, with no workload cluster, types: every line but lab1's."""
    return [line for line in lines() if not line.with_lab1]


def for_the_lab1_box() -> list[Line]:
    """What the box beside lab1, with no VM of the program's, types: every line but the VM step's
    and the node's."""
    return [line for line in lines() if line.step != VM_STEP and not line.on_node]


def for_a_lab_mid_takeover() -> list[Line]:
    """What a lab whose takeover from the playbook stopped before adoption.md step 8 types (lab1
    taken over with it): every line but those of a finished takeover."""
    return [line for line in lines() if not line.takeover_done]
