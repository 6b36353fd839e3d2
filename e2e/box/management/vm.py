"""The program's image and VM (box_vm_program.py) under the real engine and proxmoxve plugin,
against the Proxmox VE API stand-in (tests/test_box_vm.py).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from e2e.box.box import ALL_PRIVILEGES
from e2e.box.scenarios import (
    PROGRAM_SECRET,
    PROGRAM_TOKEN,
    PROXMOX_ADDRESS,
    PROXMOX_PORT,
    _lab_secrets,
    _readme_first_run,
    _step,
)
from e2e.engine.cli import REPO, Engine, fresh_engine
from e2e.standins import https_server
from e2e.standins.proxmox import pve_api_standin


def vm_lifecycle(root: str) -> dict[str, Any]:
    """The program's image and VM (e2e/box/box_vm_program.py) under the real engine and proxmoxve
    plugin, against the Proxmox VE API stand-in at the lab's address, the image served by a
    box-local HTTPS server: a preview, the first `up` (download, create, start), a second `up`,
    more cores, the protection lifted, and `destroy`; each run with the API calls it made
    ([method, path, parameter names])."""
    base = Path(root)
    # The CLI takes engine.run's --event-log only with its debug commands on.
    engine = fresh_engine(
        base / "engine", extra_env={"PULUMI_DEBUG_COMMANDS": "true"}, main=REPO / "e2e" / "box" / "box_vm_program.py"
    )
    steps = _readme_first_run(engine, _lab_secrets())
    image = base / "images" / "noble" / "20260926" / "noble-server-cloudimg-amd64.img"
    image.parent.mkdir(parents=True)
    image.write_bytes(b"QFI\xfb" + bytes(range(256)) * 4096)
    key, cert = https_server.self_signed_certificate(base, "images", "127.0.0.1")
    # The program's own check is skipped here; Proxmox VE still checks each call's privileges.
    tokens = {(PROGRAM_TOKEN, PROGRAM_SECRET): ALL_PRIVILEGES}
    runs: dict[str, dict[str, Any]] = {}
    with (
        https_server.serving_files(base / "images", ("127.0.0.1", 0), key, cert) as files,
        pve_api_standin.serve(tokens, base, (PROXMOX_ADDRESS, PROXMOX_PORT), trusted_certificates=cert) as standin,
    ):
        url = f"https://127.0.0.1:{files.server_address[1]}/{image.relative_to(base / 'images')}"
        digest = hashlib.sha256(image.read_bytes()).hexdigest()
        for name, value in {"skipCredentialsCheck": "true", "imageUrl": url, "imageSha256": digest}.items():
            steps.append(_step(engine, ("config", "set", name, value)))
        runs["preview"] = _vm_run(engine, standin, "preview")
        runs["first up"] = _vm_run(engine, standin, "up")
        runs["second preview"] = _vm_run(engine, standin, "preview", "--diff")
        runs["second up"] = _vm_run(engine, standin, "up")
        steps.append(_step(engine, ("config", "set", "vmCores", "4")))
        runs["cores"] = _vm_run(engine, standin, "up")
        steps.append(_step(engine, ("config", "set", "vmProtected", "false")))
        runs["unprotect"] = _vm_run(engine, standin, "up")
        runs["destroy"] = _vm_run(engine, standin, "destroy", "--yes")
    return {"steps": steps, "runs": runs, "unknown": standin.unknown}


def _vm_run(engine: Engine, standin: pve_api_standin.PveApiStandIn, action: str, *args: str) -> dict[str, Any]:
    mark = len(standin.calls)
    run = engine.run(action, *args)
    return {
        "rc": run.rc,
        "output": run.output,
        "steps": run.steps(),
        "summary": run.summary(),
        "warnings": run.diagnostics("warning"),
        "calls": [[call.method, call.path, list(call.params)] for call in standin.calls[mark:]],
    }
