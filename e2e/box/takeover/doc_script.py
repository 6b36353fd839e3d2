"""docs/adoption.md as a script: its `sh` blocks, in the page's order, each with the step it belongs
to and where the owner types it (the laptop, in the repository's folder, or the Proxmox node when
the block's first line is `# on the Proxmox node`), and the placeholders (`<your backup storage>`)
that the owner fills in. A block whose first line is `# in a lab that runs no workload cluster`
is typed only there (the adoption box at another site, e2e/box/box_adoption.py), never on the
owner's lab, which runs lab1. Pure reading: the journey (journey.py) runs what this returns, and the
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
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
STEP = re.compile(r"^##+ +(.+?) *$", re.MULTILINE)
PLACEHOLDER = re.compile(r"<[a-z][^<>\n]*>")
# The tools the page has the owner type, by where: what the journey must provide, and no other.
LAPTOP_TOOLS = frozenset(
    ("pulumi", "ssh", "kubectl", "helm", "mkdir", "chmod", ".venv/bin/python", "diff", "grep", "sort", "tr", "echo")
)
NODE_TOOLS = frozenset(("qm", "vzdump", "grep"))
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


def blocks(text: str | None = None, *, until: str | None = None, workload_clusters: bool = True) -> list[Block]:
    """The page's `sh` blocks in order, as typed in a lab that runs workload clusters (or, with
    `workload_clusters` false, only the blocks for a lab that runs none); with `until`, those
    before the heading that starts with it."""
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
        lines = [line for line in fence.group(2).splitlines() if line.strip()]
        marker = lines[0] if lines else ""
        without = marker == WITHOUT_WORKLOAD_CLUSTERS
        if without == workload_clusters:
            continue
        on_node = marker == ON_THE_NODE
        typed = tuple(lines[1:] if on_node or without else lines)
        found.append(Block(headings[-1] if headings else "", on_node, typed))
    return found


def tools(block: Block) -> set[str]:
    """The first word of each command of a block's pipelines, lists and process substitutions,
    read as the shell reads them (a quoted `;` or `|` starts nothing)."""
    used = set()
    for line in block.lines:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.commenters = ""
        starts_command = True
        for token in lexer:
            if starts_command and not token.startswith("#"):
                used.add(token)
            starts_command = token in COMMAND_SEPARATORS
    return used
