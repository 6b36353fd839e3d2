"""The docs stay true to the repository: docs/graph.md is what tools/graph.py renders from the
program now, every relative link leads to a file (and to a heading there, where it names one),
every `make` target they name exists and sets up the virtualenv, and the README stays short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools import graph

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# [text](target), skipping URLs (scheme:) and anchors within the same page.
RELATIVE_LINK = re.compile(r"\[[^\]]*\]\((?![a-z][a-z0-9+.-]*:|#)([^)\s]+)\)")
# `make target` in inline code, or a command line of an indented code block.
MAKE_COMMAND = re.compile(r"(?:`|^ {4,}(?:.*&& )?)make ([\w.-]+)", re.MULTILINE)
MAKE_TARGET = re.compile(r"^([\w.-]+) *:(?!=)", re.MULTILINE)
# A rule's line: its targets and its prerequisites (variables as written, e.g. `$(VENV)`).
MAKE_RULE = re.compile(r"^([\w.$()-]+(?: +[\w.$()-]+)*) *:(?!=) *([^\n#]*)", re.MULTILINE)


def test_graph_doc_is_up_to_date() -> None:
    if graph.OUTPUT.read_text() != graph.render():
        pytest.fail("docs/graph.md is out of date with the program: run `make graph`")


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(REPO)))
def test_relative_links_lead_to_files(doc: Path) -> None:
    targets = RELATIVE_LINK.findall(doc.read_text())
    assert [t for t in targets if not (doc.parent / t.split("#", 1)[0]).exists()] == []


# [text](target#anchor) or [text](#anchor), skipping URLs.
ANCHORED_LINK = re.compile(r"\[[^\]]*\]\((?![a-z][a-z0-9+.-]*:)([^)\s#]*)#([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.MULTILINE)
# Two screens of a laptop terminal, with the scaling commands `make box-shell` takes as typed.
README_MAX_LINES = 140


def _anchors(doc: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to
    hyphens, and `-1`, `-2`... after a repeated one. Headings inside code blocks are not headings."""
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)
    anchors: set[str] = set()
    for heading in HEADING.findall(text):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchor, repeats = slug, 0
        while anchor in anchors:
            repeats += 1
            anchor = f"{slug}-{repeats}"
        anchors.add(anchor)
    return anchors


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(REPO)))
def test_links_to_a_heading_lead_to_one(doc: Path) -> None:
    links = ANCHORED_LINK.findall(doc.read_text())
    broken = [
        f"{target}#{anchor}"
        for target, anchor in links
        if anchor not in _anchors(doc.parent / target if target else doc)
    ]
    assert broken == []


def test_the_readme_fits_on_two_screens() -> None:
    """What the program is and what it does to a lab that runs already, watching it, configuring
    and running it, where the docs are, and, last, testing it; the rest lives in docs/."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES
    headings = [line for line in lines if line.startswith("## ")]
    first_screen = "\n".join(lines[: lines.index(headings[0])])
    assert "do not run `pulumi up` on it" in first_screen
    assert "[docs/adoption.md](docs/adoption.md)" in first_screen
    assert headings[0].startswith("## Watch it")
    assert headings[-2:] == ["## Docs", "## Test it"]
    assert "## Configure and run" in headings


def test_the_readme_links_every_doc() -> None:
    readme = (REPO / "README.md").read_text()
    assert [doc.name for doc in DOCS[1:] if f"](docs/{doc.name})" not in readme] == []


def test_make_targets_named_in_the_docs_exist() -> None:
    targets = set(MAKE_TARGET.findall((REPO / "Makefile").read_text()))
    named = {target for doc in DOCS for target in MAKE_COMMAND.findall(doc.read_text())}
    assert {"check", "graph"} <= named
    assert named - targets == set()


def _prerequisites() -> dict[str, list[str]]:
    """Each target's prerequisites, and what its recipe makes with `$(MAKE) TARGET` (a target
    that checks the machine first makes the virtualenv from its recipe)."""
    rules: dict[str, list[str]] = {}
    makefile = (REPO / "Makefile").read_text()
    for targets, prerequisites in MAKE_RULE.findall(makefile):
        for target in targets.split():
            rules.setdefault(target, []).extend(prerequisites.split())
    for target, recipe in re.findall(r"^([\w-]+):[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.MULTILINE):
        rules.setdefault(target, []).extend(re.findall(r"^\t\$\(MAKE\) (\S+)$", recipe, re.MULTILINE))
    return rules


def test_every_make_target_a_reader_types_sets_up_the_virtualenv_first() -> None:
    """On a fresh clone the first `make` a reader types (`make box`, `make check`, ...) must make
    `.venv` itself rather than stop at `.venv/bin/python: No such file or directory`."""
    rules = _prerequisites()
    assert "requirements-dev.txt" in (REPO / "Makefile").read_text().split("\nvenv:", 1)[1].split("\n\n", 1)[0]

    def reaches_venv(target: str, seen: frozenset[str] = frozenset()) -> bool:
        return target not in seen and any(
            prerequisite == "$(VENV)" or reaches_venv(prerequisite, seen | {target})
            for prerequisite in rules.get(target, [])
        )

    named = {target for doc in DOCS for target in MAKE_COMMAND.findall(doc.read_text())}
    assert {"box", "box-shell", "check"} <= named
    assert sorted(target for target in named - {"venv"} if not reaches_venv(target)) == []
