"""The lab's values and the steps the scenarios of this package share (the README's first run, a
`pulumi config` step, an SSH command), and the scenarios of the README's first run and the CLI
(tests/test_real_engine.py), which e2e.engine.netns runs by their bare names. A scenario runs in a
network namespace of its own and returns what it observed (exit codes, CLI output, the stand-ins'
records) for the test to assert.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from e2e.engine.cli import PASSPHRASE, PLUGINS, REPO, Engine, fresh_engine
from e2e.standins.cluster import chart_repo_standin, playbook_lab
from e2e.standins.proxmox import pve_api_standin

PROGRAM_TOKEN = "pulumi@pve!lab-mgmt"
CAPMOX_TOKEN = "capmox@pve!capi"
PROGRAM_SECRET = "0f1e2d3c-4b5a-4697-8877-66554433aa11"
CAPMOX_SECRET = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
PROXMOX_ADDRESS = "192.168.0.8"
PROXMOX_PORT = 8006
VM_ADDRESS = "192.168.4.21"
# The spec does not say where lab1's API server is; any free address of the lab's subnet will do.
LAB1_ADDRESS = "192.168.4.40"


def _readme_first_run(engine: Engine, secrets: dict[str, str]) -> list[dict[str, Any]]:
    """The README's first-run steps, literally: stack init, the public key, the secrets (which
    `pulumi config set --secret KEY` reads from stdin when it is not a terminal)."""
    key = engine.root / ".ssh" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "owner@laptop", "-f", str(key)], check=True)
    steps = [
        ("stack", "init", "lab"),
        ("config", "set", "--path", "sshPublicKeys[0]", key.with_suffix(".pub").read_text().strip()),
    ]
    ran = [_step(engine, args) for args in steps]
    for name, value in secrets.items():
        ran.append(_step(engine, ("config", "set", "--secret", name), stdin=value))
    ran.append(_step(engine, ("config", "set", "--secret", "sshPrivateKey"), stdin=key.read_text()))
    return ran


def _step(engine: Engine, args: tuple[str, ...], stdin: str | None = None) -> dict[str, Any]:
    done = engine.pulumi(*args, stdin=stdin)
    return {"args": list(args), "rc": done.returncode, "output": done.stdout + done.stderr}


def _set_all(engine: Engine, settings: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The box's own settings (its addresses, repositories, files) in one `pulumi config set-all`:
    a `config set` each would pay the CLI's start for every one."""
    return _step(engine, ("config", "set-all", *(f"--plaintext={key}={value}" for key, value in settings)))


def _lab_secrets() -> dict[str, str]:
    return {"proxmoxApiTokenSecret": PROGRAM_SECRET, "capmoxTokenSecret": CAPMOX_SECRET}


def readme_first_run(root: str) -> dict[str, Any]:
    engine = fresh_engine(Path(root))
    steps = _readme_first_run(engine, _lab_secrets())
    config = engine.pulumi("config", "--json")
    return {
        "steps": steps,
        "stack_file": (engine.project / "Pulumi.lab.yaml").read_text(),
        "config_rc": config.returncode,
        "config": config.stdout,
    }


def readme_first_run_commands() -> list[str]:
    """The README's first run, as a user types it: the first command block under "Configure and
    run"."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Configure and run") :]
    block = section[section.index("\n    ") + 1 :]
    return [line.removeprefix("    ") for line in block.split("\n\n", 1)[0].splitlines()]


# What stands in for the user at a prompt, and for the pip install of the requirements (the
# engine's project copy runs in the tests' own virtualenv: no package index is reachable here).
TYPED_SECRETS = {"proxmoxApiTokenSecret": PROGRAM_SECRET, "capmoxTokenSecret": CAPMOX_SECRET}
ALREADY_INSTALLED = "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt"


def newcomer_first_run(root: str, tokens: list[Any]) -> dict[str, Any]:
    """The README's first run word for word, in one shell, on a laptop with an empty HOME (but for
    an SSH key pair and the plugins, which the CLI would download), with only the variables the
    README sets, against the Proxmox VE API stand-in at the lab's address answering from `tokens`
    ([token id, secret, permissions] triples). No chart repository can be reached here: the
    charts are in the repository's folder, as after a first run."""
    engine = fresh_engine(Path(root))
    _charts_in_place(engine)
    key = engine.root / ".ssh" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "owner@laptop", "-f", str(key)], check=True)
    typed = []
    for command in readme_first_run_commands():
        secret = command.removeprefix("pulumi config set --secret ")
        if command == ALREADY_INSTALLED:
            continue
        if " cat > " in command:
            # The line that writes the passphrase's file reads it from the keyboard.
            typed.append(f"{command} <<<'{PASSPHRASE}'")
        elif secret in TYPED_SECRETS:
            typed.append(f"{command} <<<'{TYPED_SECRETS[secret]}'")
        else:
            typed.append(command)
    # A user whose home directory is the new, empty one: the CLI reads it from /etc/passwd
    # (`~` in `pulumi login file://~/...`, and where its plugins live), so the scenario's own
    # mount namespace gets a password database saying so.
    passwd = engine.root.parent / "passwd"
    passwd.write_text(
        "".join(
            f"root:x:0:0:root:{engine.root}:/bin/bash\n" if line.startswith("root:") else line + "\n"
            for line in Path("/etc/passwd").read_text().splitlines()
        )
    )
    as_newcomer = ["unshare", "--mount", "--", "sh", "-c", 'mount --bind "$0" /etc/passwd && exec "$@"', str(passwd)]
    table = {(token_id, secret): permissions for token_id, secret, permissions in tokens}
    with pve_api_standin.serve(table, engine.root, (PROXMOX_ADDRESS, PROXMOX_PORT)) as standin:
        done = subprocess.run(
            [*as_newcomer, "bash", "-euo", "pipefail", "-c", "\n".join(typed)],
            cwd=engine.project,
            env=engine.newcomer_env(),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    return {
        "typed": typed,
        "rc": done.returncode,
        "output": done.stdout + done.stderr,
        "requests": standin.requests,
        "state_files": sorted(str(p.relative_to(engine.root)) for p in (engine.root / ".pulumi-state").rglob("*.json")),
    }


def mistakes(root: str) -> dict[str, Any]:
    """The CLI's output for three mistakes a newcomer makes: a bad setting, a Proxmox API that
    cannot be reached (nothing listens at its address), and chart repositories that cannot be
    reached (no name resolves here) with the charts not in the project's folder yet."""
    engine = fresh_engine(Path(root))
    steps = _readme_first_run(engine, _lab_secrets())
    outputs = {}
    mistakes: dict[str, list[tuple[str, ...]]] = {
        "bad setting": [("vmId", "12")],
        "unreachable API": [("vmId", "201")],
        "unreachable chart repository": [("skipCredentialsCheck", "true")],
    }
    for mistake, settings in mistakes.items():
        steps += [_step(engine, ("config", "set", *setting)) for setting in settings]
        preview = engine.pulumi("preview", "--stack", "lab")
        outputs[mistake] = {"rc": preview.returncode, "output": preview.stdout + preview.stderr}
    return {"steps": steps, "outputs": outputs}


def installed_plugins(root: str) -> dict[str, Any]:
    """What `pulumi plugin ls` lists in a fresh engine's PULUMI_HOME, and whether each installed
    binary is the one e2e/engine/build-engine.sh built."""
    engine = fresh_engine(Path(root))
    listed = engine.pulumi("plugin", "ls", "--json")
    listed.check_returncode()
    plugins = json.loads(listed.stdout)
    return {
        "listed": [[plugin["kind"], plugin["name"], plugin["version"]] for plugin in plugins],
        "built_here": {
            plugin.name: _digest(engine.pulumi_home / "plugins" / plugin.folder / plugin.binary.name)
            == _digest(plugin.binary)
            for plugin in PLUGINS
        },
    }


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def documented_config_sets(root: str, commands: list[list[str]]) -> list[dict[str, Any]]:
    """Each `pulumi config set` the docs show, as typed, on a fresh stack; a secret the command
    reads from stdin gets a UUID, as a Proxmox token secret is."""
    engine = fresh_engine(Path(root))
    ran = [_step(engine, ("stack", "init", "lab"))]
    ran += [_step(engine, tuple(command), stdin=PROGRAM_SECRET) for command in commands]
    return ran


def cli_preview(root: str, unset: list[str], settings: dict[str, str]) -> dict[str, Any]:
    """The README's steps, then config changes, then `pulumi preview --stack lab` as typed."""
    engine = fresh_engine(Path(root))
    steps = _readme_first_run(engine, _lab_secrets())
    for key in unset:
        steps.append(_step(engine, ("config", "rm", key)))
    for key, value in settings.items():
        steps.append(_step(engine, ("config", "set", key, value)))
    preview = engine.pulumi("preview", "--stack", "lab")
    return {"steps": steps, "rc": preview.returncode, "output": preview.stdout + preview.stderr}


def program_preview(
    root: str, settings: dict[str, str], secrets: dict[str, str], tokens: list[Any], legacy_layout: bool = False
) -> dict[str, Any]:
    """The README's steps with `secrets`, then `settings`, then `pulumi preview` of the program by
    the CLI, with the Proxmox VE API stand-in at the lab's address answering from `tokens`
    ([token id, secret, permissions] triples). The charts are in the project's folder, as after a
    first run: no chart repository can be reached here."""
    engine = fresh_engine(Path(root), legacy_layout=legacy_layout)
    _charts_in_place(engine)
    steps = _readme_first_run(engine, {**_lab_secrets(), **secrets})
    for key, value in settings.items():
        steps.append(_step(engine, ("config", "set", key, value)))
    table = {(token_id, secret): permissions for token_id, secret, permissions in tokens}
    with pve_api_standin.serve(table, engine.root, (PROXMOX_ADDRESS, PROXMOX_PORT)) as standin:
        preview = engine.run("preview")
    stacks = engine.root / "state" / ".pulumi" / "stacks"
    return {
        "steps": steps,
        "rc": preview.rc,
        "output": preview.output,
        "plan": preview.steps(),
        "warnings": preview.diagnostics("warning"),
        "requests": standin.requests,
        "unknown": standin.unknown,
        "state_files": sorted(str(path.relative_to(stacks)) for path in stacks.rglob("*.json")),
    }


def _charts_in_place(engine: Engine) -> None:
    """The lab's two chart archives in the project's folder, as a user puts them there by hand
    (docs/operations.md) or a first run leaves them."""
    for chart, (_, _, version, _) in playbook_lab.PLAYBOOK_CHARTS.items():
        archive = chart_repo_standin.Chart(chart, version)
        (engine.project / archive.archive_name).write_bytes(archive.archive())


WRITES = {"create", "update", "patch", "delete", "deletecollection"}
# The program's resource names (the last part of their URNs) for the adopted objects.
RELEASE_RESOURCES = ("mgmt-cert-manager", "mgmt-cluster-api-operator")
PROVIDER_CR_RESOURCES = (
    "mgmt-core-cluster-api",
    "mgmt-bootstrap-kubeadm",
    "mgmt-controlplane-kubeadm",
    "mgmt-infrastructure-proxmox",
    "mgmt-ipam-in-cluster",
)


# How long the operator stand-in takes to install a provider: long enough to tell a `pulumi up`
# that waits for it from one that does not.
OPERATOR_INSTALL_SECONDS = 5.0
BUMPED_CAPMOX = "v0.9.2"


# The VM as a real host (e2e/standins/guest/guest.py) with k3s from the box's releases
# (e2e/standins/guest/k3s_release_standin.py).
GATEWAY = "192.168.4.8"
VMID = 201
K3S_VERSION = "v1.35.8+k3s1"
K3S_BUMP = "v1.35.9+k3s1"


def _ssh(
    key: Path,
    known_hosts: Path | None,
    command: str,
    *,
    booting: bool = False,
    stdin: str | None = None,
    address: str = VM_ADDRESS,
) -> dict[str, Any]:
    """One command over real ssh to the VM at `address` as the program's connection makes it: the
    host key unchecked (`known_hosts` None, the first step) or pinned. While `booting`, a refused or
    unrouted connection is dialled again, as the provider does. `stdin` is what the command reads
    (a script for `bash -s`, as docs/adoption.md sends the hand-over)."""
    pinned = ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes"] if known_hosts else []
    unpinned = ["-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no"]
    argv = [
        *("ssh", "-F", "/dev/null", "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"),
        *("-o", "ConnectTimeout=10", *(pinned or unpinned), f"ubuntu@{address}", command),
    ]
    started = time.monotonic()
    while True:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=600, check=False)
        dialled_too_early = done.returncode == 255 and "connect to host" in done.stderr
        if not (booting and dialled_too_early and time.monotonic() - started < 120):
            break
        time.sleep(0.5)
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "seconds": time.monotonic() - started}


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def adoption_gate(engine: Engine, base: Path, targets: tuple[str, ...] = ()) -> dict[str, Any]:
    """docs/adoption.md's gate (step 4, and W3 for a workload cluster): `pulumi preview --json >
    preview.json` (with the run's targets), then tools/adoption_check.py on it."""
    preview = engine.pulumi("preview", "--stack", "lab", "--json", *(f"--target={urn}" for urn in targets))
    saved = base / f"preview-{len(list(base.glob('preview-*.json')))}.json"
    saved.write_text(preview.stdout)
    check = subprocess.run(
        [sys.executable, str(REPO / "tools" / "adoption_check.py"), str(saved)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return {
        "preview_rc": preview.returncode,
        "preview_stderr": preview.stderr[-4000:],
        "preview_steps": [
            {"op": step.get("op", "?"), "urn": step.get("urn", "?")}
            for step in (json.loads(preview.stdout).get("steps") or [] if preview.stdout.strip() else [])
        ],
        "rc": check.returncode,
        "output": check.stdout + check.stderr,
    }
