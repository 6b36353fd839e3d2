"""The docs stay true to the repository: docs/graph.md is what tools/graph.py renders from the
program now, every relative link leads to a file (and to a heading there, where it names one),
every `make` target they name exists and sets up the virtualenv, the README stays short, and every
line they have the owner type reads in zsh as it does in bash, and writes nothing into the clone
that belongs elsewhere."""

from __future__ import annotations

import contextlib
import re
import shlex
from collections.abc import Iterator
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
            prerequisite in ("$(VENV)", "$(PY)") or reaches_venv(prerequisite, seen | {target})
            for prerequisite in rules.get(target, [])
        )

    named = {target for doc in DOCS for target in MAKE_COMMAND.findall(doc.read_text())}
    assert {"box", "box-shell", "check"} <= named
    assert sorted(target for target in named - {"venv"} if not reaches_venv(target)) == []


def test_the_lab_targets_check_the_cluster_first_and_install_no_development_tools() -> None:
    """Owner's reading 5: `make exit-criteria` installed pytest, ruff and mypy into the README's
    venv, and did so before it said CLUSTER was missing."""
    rules = _prerequisites()
    makefile = (REPO / "Makefile").read_text()
    for target in ("exit-criteria", "scaling-status"):
        assert rules[target] == ["$(PY)"], target
        recipe = makefile.split(f"\n{target}:\n", 1)[1]
        assert recipe.index("$(CLUSTER_REQUIRED)") < recipe.index("$(MAKE) $(PY)"), target
    made = makefile.split("\n$(PY):\n", 1)[1].split("\n\n", 1)[0]
    assert "requirements.txt" in made
    assert "requirements-dev.txt" not in made
    assert "(3, 11)" in made


# A fence's first line (```sh) and a list item's marker, whose text sets the indentation that a
# code block inside the item starts 4 columns beyond.
FENCE = re.compile(r"^ *```(\w*) *$")
LIST_ITEM = re.compile(r"^( *)(?:[-*+]|\d+[.)]) +")


def typed_lines(text: str) -> Iterator[str]:
    """Each command line of a page's code blocks, as the owner types it: a `sh` fence's lines, and
    an indented block's, at 4 columns beyond the paragraph or list item it follows after a blank
    line (a list item's wrapped text is not code); a line that ends in `\\` goes on the next."""
    fence: str | None = None
    context, after_blank, in_code = 0, True, False
    pending = ""
    for line in text.splitlines():
        opened = FENCE.match(line)
        if fence is not None:
            code = fence == "sh" and not opened
            fence = None if opened and not opened.group(1) else fence
        elif opened:
            fence, code, in_code = opened.group(1), False, False
        elif not line.strip():
            after_blank, code = True, False
        else:
            indent = len(line) - len(line.lstrip(" "))
            in_code = code = (after_blank or in_code) and indent >= context + 4
            if not code:
                item = LIST_ITEM.match(line)
                context = item.end() if item else indent if after_blank else context
            after_blank = False
        if code and line.strip():
            pending += line.strip()
            if pending.endswith("\\"):
                pending = pending[:-1]
                continue
            yield pending
        pending = ""


def _words(line: str) -> list[str]:
    """The line's words as a shell splits them, with `#` not taken for a comment and each quoted
    word in its quotes (`'#'` is no comment in any shell); up to an unbalanced quote, where a shell
    would go on reading the next line."""
    lexer = shlex.shlex(line, posix=False, punctuation_chars=True)
    lexer.commenters, lexer.whitespace_split = "", True
    words: list[str] = []
    with contextlib.suppress(ValueError):
        words.extend(lexer)
    return words


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(REPO)))
def test_no_typed_line_ends_in_a_comment(doc: Path) -> None:
    """zsh, the Mac's shell, reads `#` as a comment only with `setopt interactive_comments`, off
    by default: without it a trailing `# ...` is words of the command, where a `'` opens a quote
    that swallows the next pasted lines and a `?` fails as a glob (owner reading 5, E). A line
    that starts with `#` only says where to type its block."""
    commented = [
        line for line in typed_lines(doc.read_text()) if any(word.startswith("#") for word in _words(line)[1:])
    ]
    assert commented == []


# The inspector's folder, relative (quoted or not): in this clone, where nothing reads it
# (docs/adoption.md, W7).
INSPECTOR_IN_THE_CLONE = re.compile(r"^['\"]?(?:\./)?\.claude/")


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(REPO)))
def test_no_typed_line_writes_the_inspectors_files_into_the_clone(doc: Path) -> None:
    """The docs' lines run in this repository's folder: the inspector reads its kubeconfigs in the
    owner's own repository, so a relative `.claude/` path puts them where it never looks."""
    found = [
        line
        for line in typed_lines(doc.read_text())
        if any(INSPECTOR_IN_THE_CLONE.match(word) for word in _words(line))
    ]
    assert found == []


def test_the_checks_of_typed_lines_find_what_they_refuse() -> None:
    """The two checks above can fail: a trailing comment in an indented block (after a list item
    too) or a fenced one, a relative `.claude/` path; a `#` inside quotes, a line that starts with
    `#`, and a list item's wrapped text are not taken for them."""
    page = (
        "Text:\n\n    pulumi preview   # v1.12's\n    echo '#quoted' a#b\n\n"
        "- item\n    wrapped #1 text\n\n      kubectl get pods  # Running?\n\n"
        "```sh\n# on the Proxmox node\nqm status 201  # uptime\nmkdir -p .claude/x\n```\n"
    )
    lines = list(typed_lines(page))
    assert lines == [
        "pulumi preview   # v1.12's",
        "echo '#quoted' a#b",
        "kubectl get pods  # Running?",
        "# on the Proxmox node",
        "qm status 201  # uptime",
        "mkdir -p .claude/x",
    ]
    assert [any(w.startswith("#") for w in _words(line)[1:]) for line in lines] == [
        True,
        False,
        True,
        False,
        True,
        False,
    ]
    assert [any(INSPECTOR_IN_THE_CLONE.match(w) for w in _words(line)) for line in lines][-1] is True
