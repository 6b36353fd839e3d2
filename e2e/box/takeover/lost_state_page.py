"""docs/operations.md "Lost state or passphrase" as a script: its `sh` blocks in the section's
order, each line with the step it sits under and where it is typed (the Proxmox node when the
block's first line is `# on the Proxmox node`, else the laptop). Two boxes type it: the whole box,
whose lab the program made and which runs no workload cluster, every block but lab1's (first line
`# in a lab that runs lab1`); the lab1 box, which has no VM of the program's, every block but the
VM's step and the node's. Pure reading, as doc_script is for docs/adoption.md; the mocks tests
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


@dataclass(frozen=True)
class Line:
    step: str
    """The number of the `### N.` heading it sits under."""
    on_node: bool
    with_lab1: bool
    text: str

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
        on_node, with_lab1 = block[0] == ON_THE_NODE, block[0] == WITH_LAB1
        commands = block[1:] if on_node or with_lab1 else block
        found += [Line(step, on_node, with_lab1, command) for command in commands]
    return found


def for_the_whole_box() -> list[Line]:
    """What a lab the program made, with no workload cluster, types: every line but lab1's."""
    return [line for line in lines() if not line.with_lab1]


def for_the_lab1_box() -> list[Line]:
    """What the box beside lab1, with no VM of the program's, types: every line but the VM step's
    and the node's."""
    return [line for line in lines() if line.step != VM_STEP and not line.on_node]
