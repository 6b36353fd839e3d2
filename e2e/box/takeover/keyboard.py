"""The owner's keyboard: one line of a page typed as it stands, on the laptop (a real bash in the
repository's folder, with the CLI, kubectl and helm on PATH) or on the Proxmox node (a real bash
with the node's own `qm` and `vzdump`, e2e/standins/proxmox/node_shell.py). The owner's takeover
(journey.py) and the adoption box at another site (e2e/box/management/box_adoption.py) type docs/adoption.md
through it; the lost state's two boxes (e2e/box/management/lost_state.py, e2e/box/workload/lab1_recovery.py)
type docs/operations.md's section a page at a time (`type_page`).

A laptop line's HOME is the laptop's (the engine's root, where the README's first run left the key
and the CLI's state); ssh, which reads the password database's home instead, finds the laptop's
keys there, bound in a mount namespace of the line's own.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from e2e.engine.cli import REPO, Engine, built_bin
from e2e.standins.proxmox.node_shell import NodeShell

LAPTOP_SHELL = (
    'mkdir -p ~root/.ssh && mount --bind "$HOME/.ssh" ~root/.ssh && cd "$PROJECT" && exec bash -o pipefail -c "$LINE"'
)
_LAPTOP_BINARIES = (("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl"), ("LAB_MGMT_HELM_BIN", "helm"))


# A line that only sets a shell variable (`INSPECTOR=~/src/…`), which the terminal's shell keeps
# for the lines typed after it.
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(\S+)$")


def laptop(
    engine: Engine, line: str, *, typed_in: str | None = None, variables: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """One line typed on the laptop, in the repository's folder (the engine's project); `typed_in`:
    what the owner types at its prompt (a `pulumi config set --secret KEY`'s value); `variables`:
    what lines typed before it set in the same shell (`assigned`)."""
    done = subprocess.run(
        _LAPTOP_ARGV,
        env={**_laptop_env(engine, line), **(variables or {})},
        input=typed_in,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return _ran(line, done)


def assigned(engine: Engine, line: str, variables: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """A line that sets a shell variable (ASSIGNMENT), typed as any other, and the variables the
    shell then holds: the value as the shell expanded it (`~` to the home)."""
    found = ASSIGNMENT.match(line)
    if found is None:
        raise ValueError(f"not a line that only sets a variable: {line}")
    ran = laptop(engine, f'{line} && printf %s "${found[1]}"', variables=variables)
    return {**ran, "line": line, "stdout": ""}, {**variables, found[1]: ran["stdout"]}


def laptop_started(engine: Engine, line: str) -> subprocess.Popen[str]:
    """One line typed on the laptop and left running, for the caller to signal and wait for: a job
    of its own (its process group, the process's id), as a shell with job control starts it."""
    return subprocess.Popen(
        _LAPTOP_ARGV,
        env=_laptop_env(engine, line),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def laptop_ended(line: str, process: subprocess.Popen[str]) -> dict[str, Any]:
    """What a line left running (laptop_started) did, once it ends."""
    stdout, stderr = process.communicate(timeout=900)
    return _ran(line, subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))


_LAPTOP_ARGV = ["unshare", "--mount", "--", "bash", "-c", LAPTOP_SHELL]


def _laptop_env(engine: Engine, line: str) -> dict[str, str]:
    tools = [engine.bin_dir, *(built_bin(v, b) for v, b in _LAPTOP_BINARIES), Path("/usr/bin"), Path("/bin")]
    return {
        **engine.env(),
        "PATH": ":".join(map(str, tools)),
        "HOME": str(engine.root),
        "PROJECT": str(engine.project),
        "LINE": line,
    }


def node(shell: NodeShell, home: Path, line: str) -> dict[str, Any]:
    """One line typed on the Proxmox node, as root, whose home is `home`."""
    home.mkdir(exist_ok=True)
    env = {"PATH": f"{shell.bin}:/usr/bin:/bin", "HOME": str(home)}
    argv = ["bash", "-o", "pipefail", "-c", line]
    return _ran(line, subprocess.run(argv, env=env, cwd=home, capture_output=True, text=True, timeout=120, check=False))


def laptop_as_the_owners(engine: Engine, address: str, host_key_file: Path) -> None:
    """What the owner's laptop holds beside the engine's project: the repository's tools (the page
    runs tools/adoption_check.py), and the VM's host key in known_hosts, as the owner has dialled it
    before."""
    with_the_tools(engine)
    algorithm, key = host_key_file.read_text().split()[:2]
    (engine.root / ".ssh" / "known_hosts").write_text(f"{address} {algorithm} {key}\n")


class PageLine(Protocol):
    """A line of a page's `sh` blocks (lost_state_page.Line): what is typed, and where."""

    @property
    def text(self) -> str: ...

    @property
    def on_node(self) -> bool: ...


def typed_in(line: str, secrets: Mapping[str, str]) -> str | None:
    """What the owner types at a line's prompt: the value of a `pulumi config set --secret KEY`
    that reads it from the terminal (not one that reads a file, `< ~/.ssh/...`)."""
    words = line.split()
    if words[:4] != ["pulumi", "config", "set", "--secret"] or "<" in words:
        return None
    return secrets[words[4]]


def named_lines(ran: dict[str, Any], prefix: str) -> list[str]:
    """The lines a run that stopped told the owner to type, each starting with `prefix` on a line
    of its own (the program's refusals indent them under the message)."""
    said = "\n".join(str(ran.get(key, "")) for key in ("stdout", "stderr", "output"))
    return list(dict.fromkeys(found.strip() for found in said.splitlines() if found.strip().startswith(prefix)))


def type_page(
    lines: Iterable[PageLine],
    engine: Engine,
    secrets: Mapping[str, str],
    *,
    run: Callable[[str], dict[str, Any]],
    on_node: Callable[[str], dict[str, Any]] | None = None,
    told: Callable[[dict[str, Any]], list[str]] | None = None,
) -> list[dict[str, Any]]:
    """A page's lines typed in order, each as `{"line", "rc", …}`, up to the first that fails: a
    `pulumi preview` or `up` through `run` (which reads its plan), a node's line through `on_node`,
    any other on the laptop, its prompt answered from `secrets`. Where the page says to type the
    lines a stopped run names, then run it again, `told(ran)` gives them: each is typed on the
    laptop and the line again, once."""
    typed: list[dict[str, Any]] = []
    for line in lines:
        typed.append(_type(line, engine, secrets, run, on_node))
        if typed[-1]["rc"] != 0 and told is not None and (answers := told(typed[-1])):
            typed += [laptop(engine, answer) for answer in answers]
            if all(done["rc"] == 0 for done in typed[-len(answers) :]):
                typed.append(_type(line, engine, secrets, run, on_node))
        if typed[-1]["rc"] != 0:
            break
    return typed


def _type(
    line: PageLine,
    engine: Engine,
    secrets: Mapping[str, str],
    run: Callable[[str], dict[str, Any]],
    on_node: Callable[[str], dict[str, Any]] | None,
) -> dict[str, Any]:
    if line.on_node:
        if on_node is None:
            raise ValueError(f"no Proxmox node to type {line.text!r} on")
        return on_node(line.text)
    if line.text.split()[:2] in (["pulumi", "preview"], ["pulumi", "up"]):
        return {"line": line.text, **run(line.text)}
    return laptop(engine, line.text, typed_in=typed_in(line.text, secrets))


def with_the_tools(engine: Engine) -> None:
    """The repository's tools/ and Makefile beside the engine's project, as in the owner's clone."""
    shutil.copytree(REPO / "tools", engine.project / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "Makefile", engine.project / "Makefile")


def _ran(line: str, done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return {"line": line, "rc": done.returncode, "stdout": done.stdout[-6000:], "stderr": done.stderr[-6000:]}
