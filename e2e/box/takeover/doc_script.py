"""docs/adoption.md as a script: its `sh` blocks, in the page's order, each with the step it belongs
to and where the owner types it (the laptop, in the repository's folder, or the Proxmox node when
the block's first line is `# on the Proxmox node`), and the placeholders (`<your backup storage>`)
that the owner fills in. The page is typed two ways: on the owner's lab, which runs lab1, every
block but those whose first line is `# in a lab that runs no workload cluster`; on a lab that
runs no workload cluster (the adoption box at another site, e2e/box/management/box_adoption.py), every
block but lab1's: those of the W-steps and those whose first line is `# in a lab that runs lab1`.
Pure reading: the journey (journey.py) runs what this returns, and the
mocks tests check that the page reads as a script at all (tests/test_adoption_script.py).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from e2e.engine.cli import REPO

PAGE = REPO / "docs" / "adoption.md"
ON_THE_NODE = "# on the Proxmox node"
WITHOUT_WORKLOAD_CLUSTERS = "# in a lab that runs no workload cluster"
WITH_LAB1 = "# in a lab that runs lab1"
MARKERS = (ON_THE_NODE, WITHOUT_WORKLOAD_CLUSTERS, WITH_LAB1)
# The headings of the steps that take lab1 over ("W1. Read the values clusterctl used").
LAB1_STEP = re.compile(r"^W\d+\.")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
STEP = re.compile(r"^##+ +(.+?) *$", re.MULTILINE)
PLACEHOLDER = re.compile(r"<[a-z][^<>\n]*>")
# The tools the page has the owner type, by where: what the journey must provide, and no other.
LAPTOP_TOOLS = frozenset(
    (
        *("pulumi", "ssh", "kubectl", "helm", "mkdir", "chmod", ".venv/bin/python"),
        *("diff", "grep", "sort", "tr", "echo", "sed", "cat", "sh", "true"),
    )
)
NODE_TOOLS = frozenset(("qm", "vzdump", "grep"))
# Step 7 lists what is left behind and step 8 converges one target at a time, in a window the
# owner picks: a takeover typed in the box ends before them (the adoption box at the other site
# runs step 8 from code).
TYPED_UNTIL = "7."
COMMAND_SEPARATORS = frozenset(("|", ";", "&&", "||", "<(", "("))


@dataclass(frozen=True)
class Block:
    step: str
    """The heading the block sits under (`## 4. First run: ...`'s text, or a W-step's)."""
    on_node: bool
    lines: tuple[str, ...]
    """The commands, as typed (the marker dropped)."""

    def placeholders(self) -> list[str]:
        return [found for line in self.lines for found in PLACEHOLDER.findall(line)]

    def filled(self, values: dict[str, str]) -> tuple[str, ...]:
        """The lines with each placeholder replaced by the owner's value; one not in `values` is an
        error, never left in a command."""

        def fill(match: re.Match[str]) -> str:
            if match.group(0) not in values:
                raise KeyError(f"no value for {match.group(0)} in the step {self.step!r}")
            return values[match.group(0)]

        return tuple(PLACEHOLDER.sub(fill, line) for line in self.lines)


def vm_values(vm_id: int, address: str) -> dict[str, str]:
    """The values of the page's two placeholders for the VM, named after the settings that hold them."""
    return {"<vmId>": str(vm_id), "<vmAddress>": address}


def blocks(text: str | None = None, *, until: str | None = None, workload_clusters: bool = True) -> list[Block]:
    """The page's `sh` blocks in order, as typed in a lab that runs lab1 (or, with
    `workload_clusters` false, in a lab that runs no workload cluster); with `until`, those before
    the heading that starts with it."""
    text = PAGE.read_text() if text is None else text
    if until is not None:
        heading = re.search(rf"^##+ +{re.escape(until)}", text, re.MULTILINE)
        if heading is None:
            raise ValueError(f"docs/adoption.md has no heading starting with {until!r}")
        text = text[: heading.start()]
    found = []
    for fence in FENCE.finditer(text):
        if fence.group(1) != "sh":
            continue
        headings = STEP.findall(text, 0, fence.start())
        step = headings[-1] if headings else ""
        lines = [line for line in fence.group(2).splitlines() if line.strip()]
        marker = lines[0] if lines and lines[0] in MARKERS else None
        lab1s = marker == WITH_LAB1 or LAB1_STEP.match(step) is not None
        if (marker == WITHOUT_WORKLOAD_CLUSTERS and workload_clusters) or (lab1s and not workload_clusters):
            continue
        typed = tuple(lines[1:] if marker else lines)
        found.append(Block(step, marker == ON_THE_NODE, typed))
    return found


# A word that sets a variable, before a command's name or alone on its line.
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def tools(block: Block) -> set[str]:
    """The first word of each command of a block's pipelines, lists and process substitutions,
    read as the shell reads them (a quoted `;` or `|` starts nothing, an assignment before the
    name is no command); a placeholder is a value, whatever its brackets."""
    used = set()
    for line in block.lines:
        lexer = shlex.shlex(PLACEHOLDER.sub("value", line), posix=True, punctuation_chars=True)
        lexer.commenters = ""
        starts_command = True
        for token in lexer:
            if starts_command and ASSIGNMENT.match(token):
                continue
            if starts_command and not token.startswith("#") and token not in COMMAND_SEPARATORS:
                used.add(token)
            starts_command = token in COMMAND_SEPARATORS
    return used
