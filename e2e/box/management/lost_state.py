"""The state and its passphrase lost, on the whole box (a step of lifecycle.whole_box_lifecycle,
which tests/test_box_lifecycle.py reads): a new stack, on another laptop's empty backend with a new
passphrase, takes over the lab the lost stack made (the VM, k3s and the cluster part; no workload
cluster), typing docs/operations.md "Lost state or passphrase" as it stands but for lab1's lines
(e2e/box/takeover/lost_state_page.py): a laptop line in a real bash in the repository's folder, the
node's line with the node's own `pvesm`, each `pulumi preview` and `up` read as observe_typed reads
it. Around it: the VM's Proxmox config, the guest's boots and the VM's volumes, before and after.
The box goes on with the new stack (box.engine).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Sequence
from typing import Any

from e2e.box.box import VMID, Box
from e2e.box.observed import observe_typed
from e2e.box.takeover import keyboard, lost_state_page
from e2e.engine.cli import STACK, fresh_engine
from e2e.standins.proxmox import node_shell

NEW_PASSPHRASE = "another-new-passphrase-for-a-new-stack"
IMAGE_FILE = "<image file>"


def _image_file(box: Box) -> str:
    """The file name the program gave the image it downloaded: the one import volume there is."""
    assert box.pve.vms is not None, "the Proxmox VE stand-in is not serving"
    [volume] = [volid for volid in box.pve.vms.storage.volumes if ":import/" in volid]
    return volume.split(":import/", 1)[1]


def recovered(
    box: Box,
    lines: Sequence[lost_state_page.Line] | None = None,
    *,
    told: Callable[[dict[str, Any]], list[str]] | None = None,
) -> dict[str, Any]:
    """What each line did (`typed`, with each run's observation), and the VM and guest around it.
    `lines` are the page's to type (by default the whole box's: lab1's left out), `told` what the
    owner types where a run stops naming lines (keyboard.type_page)."""
    lost = box.engine
    config = json.loads(lost.pulumi("config", "--show-secrets", "--json").stdout)
    secrets = {key.split(":", 1)[1]: entry["value"] for key, entry in config.items() if entry.get("secret")}
    engine = fresh_engine(
        lost.root.parent / "engine-recovered", extra_env={**lost.extra_env, "PULUMI_CONFIG_PASSPHRASE": NEW_PASSPHRASE}
    )
    # The owner's clone: the stack file as the lost stack last ran with it, the tools, and the
    # program's SSH key where the page reads it.
    stack_file = f"Pulumi.{STACK}.yaml"
    shutil.copy2(lost.project / stack_file, engine.project / stack_file)
    keyboard.with_the_tools(engine)
    key = engine.root / ".ssh" / "id_ed25519"
    key.parent.mkdir(mode=0o700)
    key.write_text(secrets["sshPrivateKey"])
    key.chmod(0o600)
    assert box.pve.vms is not None, "the Proxmox VE stand-in is not serving"
    vm_config = dict(box.pve.vms.vms[str(VMID)]["config"])
    boots = len(box.guests.log_dirs(VMID))
    page = lost_state_page.for_the_whole_box() if lines is None else lines
    # A lab whose takeover is not done has no image file, nor a line naming it.
    values = {IMAGE_FILE: _image_file(box)} if any(IMAGE_FILE in line.text for line in page) else {}
    box.engine = engine
    filled = [dataclasses.replace(line, text=line.filled(values)) for line in page]
    with node_shell.serving(box.pve, engine.root / "node") as shell:
        typed = keyboard.type_page(
            filled,
            engine,
            secrets,
            run=lambda line: observe_typed(box, line, lambda text: keyboard.laptop(engine, text)),
            on_node=lambda line: keyboard.node(shell, engine.root / "node-home", line),
            told=told,
        )
        unknown = list(shell.unknown)
    return {
        "typed": typed,
        "image_file": values.get(IMAGE_FILE),
        "vm_config_before": vm_config,
        "vm_config_after": dict(box.pve.vms.vms[str(VMID)]["config"]),
        "boots": [boots, len(box.guests.log_dirs(VMID))],
        "volumes_after": sorted(box.pve.vms.storage.volumes),
        "node_unknown": unknown,
    }
