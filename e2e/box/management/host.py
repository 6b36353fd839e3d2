"""VM 201 as a real host (e2e/standins/guest/guest.py) with k3s from the box's releases
(e2e/standins/guest/k3s_release_standin.py): the program's host scripts over real ssh, run again,
a k3s bump, reboots and a re-created VM (tests/test_box_guest.py).
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from components.host_script import script_command
from components.k3s_node import render_k3s_config
from components.kubeconfig import rename_k3s_kubeconfig
from e2e.box.scenarios import GATEWAY, K3S_BUMP, K3S_VERSION, VM_ADDRESS, VMID, _lines, _ssh
from e2e.engine.cli import built_bin
from e2e.standins.guest import guest, k3s_release_standin

HOST_STEPS = (
    *("host_ready.sh", "keep_host_keys.sh", "guest_agent.sh", "k3s_config.sh"),
    *("k3s_install.sh", "node_ready.sh", "read_kubeconfig.sh"),
)


def _vm_config(keys: list[Path]) -> dict[str, str]:
    """VM 201 as Proxmox hands its config to the box (strings; sshkeys URL-encoded)."""
    return {
        "name": "lab-mgmt",
        "ciuser": "ubuntu",
        "sshkeys": quote("".join(key.with_suffix(".pub").read_text() for key in keys), safe=""),
        "ipconfig0": f"ip={VM_ADDRESS}/24,gw={GATEWAY}",
        "nameserver": "8.8.8.8 2.2.2.2",
        "net0": "virtio=BC:24:11:5E:00:C9,bridge=vmbr0,tag=4",
        "agent": "1",
        "cores": "2",
        "memory": "4096",
    }


def _host_step(key: Path, known_hosts: Path | None, script: str, *args: str, booting: bool = False) -> dict[str, Any]:
    """A host script as components/host_script.py sends it."""
    return {"script": script, **_ssh(key, known_hosts, script_command(script, *args), booting=booting)}


def _pin(known_hosts: Path, host_ready: dict[str, Any]) -> str:
    host_key = str(host_ready["stdout"]).strip()
    known_hosts.write_text(f"{VM_ADDRESS} {host_key}\n")
    return host_key


def _calls(guests: guest.Guests, since: int = 0) -> list[list[str]]:
    return [json.loads(line)["argv"] for line in _lines(guests.logs(VMID) / "calls.log")[since:]]


def _node(key: Path, known_hosts: Path) -> dict[str, Any]:
    done = _ssh(key, known_hosts, "sudo k3s kubectl get node lab-mgmt -o json")
    node: dict[str, Any] = json.loads(done["stdout"]) if done["rc"] == 0 else {"error": done["stderr"]}
    return node


def _first_run(guests: guest.Guests, base: Path, key: Path, known_hosts: Path) -> dict[str, Any]:
    """The host scripts in the program's order on a new VM, then kubectl with the program's
    rewrite of the kubeconfig they read."""
    started = time.monotonic()
    guests.start(VMID, _vm_config([key]))
    agent_before = guests.agent_interfaces(VMID)
    steps = [_host_step(key, None, "host_ready.sh", booting=True)]
    host_key = _pin(known_hosts, steps[0])
    steps += [_host_step(key, known_hosts, script, *_step_args(script)) for script in HOST_STEPS[1:]]
    seconds = time.monotonic() - started
    kubeconfig = base / "lab-mgmt.kubeconfig"
    kubeconfig.write_text(rename_k3s_kubeconfig(steps[-1]["stdout"], VM_ADDRESS, "lab-mgmt"))
    kubectl = built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl") / "kubectl"
    namespaces = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", "get", "namespaces", "-o", "name"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(base)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return {
        "steps": steps,
        "seconds": seconds,
        "host_key": host_key,
        "agent_before": agent_before,
        "agent_after": guests.agent_interfaces(VMID),
        "namespaces": {"rc": namespaces.returncode, "stdout": namespaces.stdout, "stderr": namespaces.stderr},
        "node": _node(key, known_hosts),
    }


def _step_args(script: str, version: str = K3S_VERSION) -> list[str]:
    config_b64 = base64.b64encode(render_k3s_config(VM_ADDRESS).encode()).decode()
    return {"k3s_config.sh": [config_b64], "k3s_install.sh": [version], "node_ready.sh": ["300", version]}.get(
        script, []
    )


def _observed(guests: guest.Guests, key: Path, known_hosts: Path, scripts: list[tuple[str, str]]) -> dict[str, Any]:
    """(script, k3s version) steps on the running VM, with the stand-in calls and installer runs
    they caused."""
    calls, installs = len(_calls(guests)), len(_lines(guests.logs(VMID) / "installer.log"))
    started = time.monotonic()
    steps = [_host_step(key, known_hosts, script, *_step_args(script, version)) for script, version in scripts]
    return {
        "steps": steps,
        "seconds": time.monotonic() - started,
        "calls": _calls(guests, calls),
        "installs": _lines(guests.logs(VMID) / "installer.log")[installs:],
    }


def _reboots(guests: guest.Guests, keys: list[Path], known_hosts: Path) -> dict[str, Any]:
    """A shutdown and start, then a start with another key (a new instance id), then the VM
    destroyed and created again."""
    key, second_key = keys
    guests.stop(VMID)
    agent_stopped = guests.agent_interfaces(VMID)
    started = time.monotonic()
    guests.start(VMID, _vm_config([key]))
    reboot = [
        _host_step(key, None, "host_ready.sh", booting=True),
        # The scenario bumped k3s before it reboots the VM.
        _host_step(key, known_hosts, "node_ready.sh", *_step_args("node_ready.sh", K3S_BUMP)),
    ]
    reboot_seconds = time.monotonic() - started
    guests.stop(VMID)
    guests.start(VMID, _vm_config([key, second_key]))
    new_instance = _host_step(second_key, None, "host_ready.sh", booting=True)
    new_instance_first_key = _ssh(key, None, "true")
    guests.destroy(VMID)
    guests.start(VMID, _vm_config([key]))
    return {
        "agent_stopped": agent_stopped,
        "reboot": reboot,
        "reboot_seconds": reboot_seconds,
        "new_instance": new_instance,
        "new_instance_first_key": new_instance_first_key,
        "recreated": _host_step(key, None, "host_ready.sh", booting=True),
        "recreated_pinned": _ssh(key, known_hosts, "true"),
    }


def box_guest(root: str) -> dict[str, Any]:
    """VM 201 as a real host: the program's host scripts in order over real ssh, again (changing
    nothing), a k3s version bump, a wrong key, a reboot, a new instance id and a re-created VM."""
    base = Path(root)
    key, wrong_key, second_key = (base / name for name in ("id_ed25519", "wrong", "second"))
    for path in (key, wrong_key, second_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    known_hosts = base / "known_hosts"
    guest.add_bridge("vmbr0", f"{GATEWAY}/24")
    with (
        k3s_release_standin.serve([K3S_VERSION, K3S_BUMP], base, GATEWAY) as releases,
        guest.Guests(base / "guests", hosts=releases.hosts, trusted=[releases.certificate]) as guests,
    ):
        result: dict[str, Any] = {"first_run": _first_run(guests, base, key, known_hosts)}
        result["second_run"] = _observed(guests, key, known_hosts, [(script, K3S_VERSION) for script in HOST_STEPS])
        result["wrong_key"] = _ssh(wrong_key, known_hosts, "true")
        result["bump"] = _observed(
            guests, key, known_hosts, [("k3s_install.sh", K3S_BUMP), ("node_ready.sh", K3S_BUMP)]
        )
        result["bump_version"] = _ssh(key, known_hosts, "k3s --version")
        result["bump_node"] = _node(key, known_hosts)
        result["reboots"] = _reboots(guests, [key, second_key], known_hosts)
        result["sshd_log"] = (guests.logs(VMID) / "sshd.log").read_text()
        result["release_requests"] = releases.requests
        result["release_unknown"] = releases.unknown
    return result
