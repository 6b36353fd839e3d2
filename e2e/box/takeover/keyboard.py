"""The owner's keyboard: one line of a page typed as it stands, on the laptop (a real bash in the
repository's folder, with the CLI, kubectl and helm on PATH) or on the Proxmox node (a real bash
with the node's own `qm` and `vzdump`, e2e/standins/proxmox/node_shell.py). The owner's takeover
(journey.py) and the adoption box at another site (e2e/box/box_adoption.py) type docs/adoption.md
through it.

A laptop line's HOME is the laptop's (the engine's root, where the README's first run left the key
and the CLI's state); ssh, which reads the password database's home instead, finds the laptop's
keys there, bound in a mount namespace of the line's own.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from e2e.engine.cli import REPO, Engine, built_bin
from e2e.standins.proxmox.node_shell import NodeShell

LAPTOP_SHELL = (
    'mkdir -p ~root/.ssh && mount --bind "$HOME/.ssh" ~root/.ssh && cd "$PROJECT" && exec bash -o pipefail -c "$LINE"'
)
_LAPTOP_BINARIES = (("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl"), ("LAB_MGMT_HELM_BIN", "helm"))


def laptop(engine: Engine, line: str, *, typed_in: str | None = None) -> dict[str, Any]:
    """One line typed on the laptop, in the repository's folder (the engine's project); `typed_in`:
    what the owner types at its prompt (a `pulumi config set --secret KEY`'s value)."""
    tools = [engine.bin_dir, *(built_bin(v, b) for v, b in _LAPTOP_BINARIES), Path("/usr/bin"), Path("/bin")]
    env = {
        **engine.env(),
        "PATH": ":".join(map(str, tools)),
        "HOME": str(engine.root),
        "PROJECT": str(engine.project),
        "LINE": line,
    }
    argv = ["unshare", "--mount", "--", "bash", "-c", LAPTOP_SHELL]
    done = subprocess.run(argv, env=env, input=typed_in, capture_output=True, text=True, timeout=900, check=False)
    return _ran(line, done)


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


def with_the_tools(engine: Engine) -> None:
    """The repository's tools/ beside the engine's project, as in the owner's clone."""
    shutil.copytree(REPO / "tools", engine.project / "tools", ignore=shutil.ignore_patterns("__pycache__"))


def _ran(line: str, done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return {"line": line, "rc": done.returncode, "stdout": done.stdout[-6000:], "stderr": done.stderr[-6000:]}
