"""What the real-engine tests do, each run by e2e.netns in a network namespace of its own. Each
returns what it observed (exit codes, CLI output, the stand-ins' records) for the test to assert.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from e2e import pve_api_standin
from e2e.engine import Engine, fresh_engine

PROGRAM_TOKEN = "pulumi@pve!lab-mgmt"
CAPMOX_TOKEN = "capmox@pve!capi"
PROGRAM_SECRET = "0f1e2d3c-4b5a-4697-8877-66554433aa11"
CAPMOX_SECRET = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
PROXMOX_ADDRESS = "192.168.0.8"
PROXMOX_PORT = 8006


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


def inline_preview(
    root: str, settings: dict[str, str], secrets: dict[str, str], tokens: list[Any], legacy_layout: bool = False
) -> dict[str, Any]:
    """The README's steps with `secrets`, then `settings`, then a preview by the real engine
    with the Proxmox VE API stand-in at the lab's address answering from `tokens`
    ([token id, secret, permissions] triples)."""
    engine = fresh_engine(Path(root), legacy_layout=legacy_layout)
    steps = _readme_first_run(engine, {**_lab_secrets(), **secrets})
    for key, value in settings.items():
        steps.append(_step(engine, ("config", "set", key, value)))
    table = {(token_id, secret): permissions for token_id, secret, permissions in tokens}
    with pve_api_standin.serve(table, engine.root, (PROXMOX_ADDRESS, PROXMOX_PORT)) as standin:
        try:
            engine.inline_stack().preview()
            error = ""
        except auto.CommandError as failed:
            error = str(failed)
    stacks = engine.root / "state" / ".pulumi" / "stacks"
    return {
        "steps": steps,
        "error": error,
        "requests": standin.requests,
        "unknown": standin.unknown,
        "state_files": sorted(str(path.relative_to(stacks)) for path in stacks.rglob("*.json")),
    }
