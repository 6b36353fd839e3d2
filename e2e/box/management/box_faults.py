"""Faults in the lab in a box (issue 18): each fault injected during a real `pulumi up` of the whole
program must end the run with an error that names what failed and where, with no secret in it,
and leave the stack's state readable; the next run without the fault must converge with one VM 201
made by one create and k3s installed once. Each scenario runs the box of e2e/box/box.py (`running`) in
a network namespace of its own (tests/test_box_faults.py):

- `pve_faults`: Proxmox VE's download task ending in error, then VM create answering 500;
- `ssh_faults`: sshd closing a session mid-script in the first up; then a host step run again
  (`--replace`, as docs/troubleshooting.md has a user do) against sshd refusing connections, and
  against another host key at the VM's address; then a k3s upgrade whose session dies between the
  installer's new binary and its restart of k3s;
- `api_server_down`: k3s's API server going down after the k3s steps, as the Helm releases begin;
- `bounds_waited_out`: cert-manager's CA injector never filling in the operator's webhook
  configurations, so that `pulumi up` hits its bound waiting on them (operatorWebhookTimeoutMinutes),
  having sent no provider CR; then, in the same box, the operator never making the
  InfrastructureProvider Ready, so that the next `pulumi up` hits its bound
  (providerReadyTimeoutMinutes) on that CR;
- `interrupted`: `pulumi up` interrupted with SIGINT mid-run, then the pending operation cleared as
  docs/troubleshooting.md says.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from e2e.box import scenarios
from e2e.box.box import VMID, Box, running
from e2e.box.management.guest_processes import (
    FAULT_BOUND_SECONDS,
    _as_in_guest,
    _guest_output,
    _in_guest,
    _kill_at_k3s_restart,
    _kill_session,
    _restart_sshd,
    _sshd,
    _when_running,
)
from e2e.box.management.lifecycle import _admission, _reconciled_since
from e2e.box.observed import observe, standin_problems
from e2e.engine.cli import CLI_TIMEOUT_SECONDS
from e2e.standins.cluster import admission_webhook_standin, playbook_lab
from e2e.standins.guest.systemctl_standin import HELD
from e2e.standins.proxmox import pve_tasks

DOWNLOAD_ERROR = "500 Can't connect to cloud-images.ubuntu.com:443 (Connection timed out)"
CREATE_ERROR = "unable to create VM 201 - no such logical volume pve/data"
HOST_STEP = "mgmt-k3s-install"
"""The host step a fault run re-runs: run again, it must find k3s installed and install nothing."""
PROVIDER_READY_MINUTES = "1"
"""providerReadyTimeoutMinutes in the run whose provider never becomes Ready: the shortest bound."""
WEBHOOK_MINUTES = "1"
"""operatorWebhookTimeoutMinutes in the run whose webhooks are never injected: the shortest bound."""
SSH_DIAL_ATTEMPTS = "8"
"""sshDialAttempts in the SSH faults: about 20 seconds of dialling, of which the box's VM, booting in
seconds, needs a few (mgmt-host-ready took 5 s after the VM's create on 2026-12-05); a run against
a refusing or impostor sshd fails after them (15 took 41 s each), not after the default 60 (about
5 minutes each)."""
NEVER_READY = ("InfrastructureProvider", *playbook_lab.PROVIDERS["InfrastructureProvider"][:2])
"""The provider CR the operator never makes Ready: kind, namespace and name."""


def _leaked(box: Box, text: str) -> list[str]:
    """Which secrets `text` holds: the token secrets, the SSH private key, or kubeconfig material."""
    key = (box.engine.root / ".ssh" / "id_ed25519").read_text().splitlines()[1:-1]
    secrets = {
        "proxmoxApiTokenSecret": [scenarios.PROGRAM_SECRET],
        "capmoxTokenSecret": [scenarios.CAPMOX_SECRET],
        "sshPrivateKey": ["PRIVATE KEY", *key],
        "kubeconfig": ["client-key-data", "client-certificate-data", "BEGIN RSA", "BEGIN EC"],
    }
    return sorted(name for name, values in secrets.items() if any(value in text for value in values))


def _state(box: Box) -> dict[str, Any]:
    """`pulumi stack export` as a user checks a stack after a failed run: does it parse, what does
    it list, what operations are pending."""
    done = box.engine.pulumi("stack", "export", "--stack", "lab")
    try:
        deployment = json.loads(done.stdout)["deployment"]
    except (json.JSONDecodeError, KeyError):
        return {"rc": done.returncode, "parsed": False, "resources": [], "pending": [], "leaked": []}
    return {
        "rc": done.returncode,
        "parsed": True,
        "resources": [resource["urn"].rsplit("::", 1)[1] for resource in deployment.get("resources") or []],
        "pending": [
            [operation["type"], operation["resource"]["urn"].rsplit("::", 1)[1]]
            for operation in deployment.get("pending_operations") or []
        ],
        "leaked": _leaked(box, done.stdout),
    }


def _pve(base: Path) -> dict[str, Any]:
    """What the Proxmox VE stand-in holds: its VMs, and how many creates ever succeeded."""
    data = json.loads((base / pve_tasks.STATE_FILE).read_text())
    return {
        "vms": sorted(data["vms"]),
        "creates": sum(1 for task in data["tasks"].values() if task["type"] == "qmcreate"),
    }


def _installs(box: Box) -> list[str]:
    """The k3s installer's runs on the guest, one line each."""
    try:
        path = box.guests.logs(VMID) / "installer.log"
    except KeyError:  # VM 201 has not started yet
        return []
    return path.read_text().splitlines() if path.exists() else []


def _run(box: Box, base: Path, *args: str) -> dict[str, Any]:
    """One `pulumi up` measured as e2e/box/box.py measures it, with what a fault test asks after it."""
    run = observe(box, "up", *args)
    return {
        **run,
        "leaked": _leaked(box, run["output"]),
        "state": _state(box),
        "pve": _pve(base),
        "installs": _installs(box),
    }


def _urn(box: Box, name: str) -> str:
    done = box.engine.pulumi("stack", "--stack", "lab", "--show-urns")
    return next(word for word in done.stdout.split() if word.startswith("urn:") and word.endswith(f"::{name}"))


def pve_faults(root: str) -> dict[str, Any]:
    """The download task ending in error, then VM create answering 500, then the run without a
    fault, then one more that must do nothing."""
    base = Path(root)
    with running(base) as box:
        box.pve.faults.download = DOWNLOAD_ERROR
        download = _run(box, base)
        box.pve.faults.download = None
        box.pve.faults.vm_create = CREATE_ERROR
        create = _run(box, base)
        box.pve.faults.vm_create = None
        recovered = _run(box, base)
        again = _run(box, base)
        return {
            "download": download,
            "vm_create": create,
            "recovered": recovered,
            "again": again,
            **standin_problems(box),
        }


def ssh_faults(root: str) -> dict[str, Any]:
    """With sshDialAttempts short, sshd closing the session that runs node_ready.sh in the first
    up, the run after it; then, for a host step run again, sshd refusing connections and another
    host key answering, each followed by the same run without the fault; then an interrupted k3s
    upgrade (_interrupted_upgrade)."""
    base = Path(root)
    with running(base) as box:
        result: dict[str, Any] = {
            "setting": scenarios._step(box.engine, ("config", "set", "sshDialAttempts", SSH_DIAL_ATTEMPTS))
        }
        with _when_running("node_ready.sh", _kill_session) as closed:
            result["mid_script"] = _run(box, base)
        result["closed_sessions"] = len(closed)
        result["mid_script_recovered"] = _run(box, base)
        replace = ("--replace", _urn(box, HOST_STEP))
        listener, init = _sshd()
        os.kill(listener, signal.SIGTERM)
        result["refused"] = _run(box, base, *replace)
        _restart_sshd(box, init)
        result["refused_recovered"] = _run(box, base, *replace)
        listener, init = _sshd()
        _in_guest(
            init,
            "mkdir /root/pinned && cp -p /etc/ssh/ssh_host_* /root/pinned/ && rm /etc/ssh/ssh_host_* && ssh-keygen -A",
        )
        os.kill(listener, signal.SIGHUP)
        result["host_key"] = _run(box, base, *replace)
        _in_guest(init, "cp -p /root/pinned/* /etc/ssh/")
        os.kill(listener, signal.SIGHUP)
        result["host_key_recovered"] = _run(box, base, *replace)
        result["again"] = _run(box, base)
        result.update(_interrupted_upgrade(box, base, init))
        return {**result, **standin_problems(box)}


def _interrupted_upgrade(box: Box, base: Path, init: int) -> dict[str, Any]:
    """A k3s upgrade whose session dies after the installer has put the new binary in place and
    before it restarts k3s (the restart held until the session is killed); then the same `pulumi
    up` without the fault, which must finish the job, and the zero-change preview."""
    result: dict[str, Any] = {
        "upgrade_setting": scenarios._step(box.engine, ("config", "set", "k3sVersion", scenarios.K3S_BUMP))
    }
    held = f"{HELD}/k3s.service.restart"
    _in_guest(init, f"mkdir -p {HELD} && touch {held}")
    with _when_running("k3s_install.sh", _kill_at_k3s_restart) as killed:
        result["upgrade_interrupted"] = _run(box, base)
    result["upgrade_killed_sessions"] = len(killed)
    result["binary_after_interruption"] = _guest_output(init, "/usr/local/bin/k3s", "--version").split("\n", 1)[0]
    _in_guest(init, f"rm {held}")
    result["upgrade_converged"] = _run(box, base)
    result["binary_after_convergence"] = _guest_output(init, "/usr/local/bin/k3s", "--version").split("\n", 1)[0]
    result["upgrade_no_changes"] = observe(box, "preview", "--expect-no-changes")
    return result


def _k3s(box: Box, verb: str) -> None:
    """systemctl `verb` k3s in the guest, as its owner would type it there."""
    _, init = _sshd()
    with (box.guests.logs(VMID) / "owner-systemctl.log").open("ab") as log:
        # The unit's server outlives this systemctl: it must not hold a pipe of ours open.
        subprocess.run(
            _as_in_guest(init, "systemctl", verb, "k3s"),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            check=True,
            timeout=FAULT_BOUND_SECONDS,
        )


def api_server_down(root: str) -> dict[str, Any]:
    """k3s stopped as soon as node_ready.sh has found the node Ready in the first up, so that its
    API server is down from the last host step on (which only reads k3s's kubeconfig file), when
    the Helm releases begin; then k3s started again and the run after it, and one more that must
    do nothing."""
    base = Path(root)
    with running(base) as box:
        with _when_running("node_ready.sh", lambda _session: _k3s(box, "stop"), once_done=True) as stopped:
            down = _run(box, base)
        _k3s(box, "start")
        recovered = _run(box, base)
        again = _run(box, base)
        return {"down": down, "stopped": len(stopped), "recovered": recovered, "again": again, **standin_problems(box)}


def bounds_waited_out(root: str) -> dict[str, Any]:
    """The two bounds a first `pulumi up` can wait out, in one box, with operatorWebhookTimeoutMinutes
    and providerReadyTimeoutMinutes at their least: the first up while the CA injector withholds
    both of the operator's webhook configurations and the operator never makes the
    InfrastructureProvider Ready, which waits out the webhooks' bound having sent no provider CR;
    then the bundles released, the run after it, which sends the CRs and waits out the provider's
    bound on that one; then Ready released, the run after it, and the zero-change preview. Around
    each, what the injector wrote, what the webhook server reviewed, the program's writes to the
    webhook configurations and the CRs, and what the operator made Ready. The whole scenario timed."""
    started = time.monotonic()
    base = Path(root)
    with running(base) as box:
        settings = [
            scenarios._step(box.engine, ("config", "set", key, minutes))
            for key, minutes in (
                ("operatorWebhookTimeoutMinutes", WEBHOOK_MINUTES),
                ("providerReadyTimeoutMinutes", PROVIDER_READY_MINUTES),
            )
        ]
        for configuration in admission_webhook_standin.CONFIGURATION_NAMES.items():
            box.injector.withhold(*configuration)
        box.operator.withhold(*NEVER_READY)
        result: dict[str, Any] = {"settings": settings, "not_injected": _run(box, base)}
        result["withheld"] = {
            "injected": list(box.injector.injected),
            "reviews": list(box.webhook.reviews),
            "admission": _admission(box),
        }
        for configuration in admission_webhook_standin.CONFIGURATION_NAMES.items():
            box.injector.release(*configuration)
        result["not_ready"] = _run(box, base)
        # Copies: the Ready run after it reviews and injects more.
        result["injected"] = list(box.injector.injected)
        result["reviews"] = list(box.webhook.reviews)
        result["admission"] = _admission(box)
        result["reconciled_while_withheld"] = _reconciled_since(box, 0)
        box.operator.release(*NEVER_READY)
        result["released"] = _run(box, base)
        result["reconciled_once_released"] = _reconciled_since(box, len(result["reconciled_while_withheld"]))
        result["provider_versions"] = box.engine.outputs().get("providerVersions")
        result["no_changes"] = observe(box, "preview", "--expect-no-changes")
        result.update(standin_problems(box))
    return {**result, "seconds": round(time.monotonic() - started, 1)}


def _press_ctrl_c_twice(process: subprocess.Popen[str]) -> None:
    """A user's Ctrl-C, then a second one while the CLI waits for the running step to finish."""
    process.send_signal(signal.SIGINT)
    time.sleep(1)
    process.send_signal(signal.SIGINT)


def interrupted(root: str) -> dict[str, Any]:
    """The first `pulumi up` interrupted with SIGINT twice while node_ready.sh runs, the state after
    it, the next `pulumi up`, the pending operation cleared as docs/troubleshooting.md says, and the
    run after that."""
    base = Path(root)
    with running(base) as box:
        engine = box.engine
        process = subprocess.Popen(
            [str(engine.bin_dir / "pulumi"), "up", "--stack", "lab", "--skip-preview", "--non-interactive"],
            cwd=engine.project,
            env=engine.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        with _when_running("node_ready.sh", lambda _session: _press_ctrl_c_twice(process)) as signalled:
            output, _ = process.communicate(timeout=CLI_TIMEOUT_SECONDS)
        result: dict[str, Any] = {
            "interrupted": {
                "rc": process.returncode,
                "output": output,
                "signalled": len(signalled),
                "leaked": _leaked(box, output),
                "state": _state(box),
                "pve": _pve(base),
                "installs": _installs(box),
            }
        }
        result["pending_up"] = _run(box, base)
        cleared = engine.pulumi("refresh", "--stack", "lab", "--clear-pending-creates", "--yes")
        result["cleared"] = {"rc": cleared.returncode, "output": cleared.stdout + cleared.stderr, "state": _state(box)}
        result["next"] = _run(box, base)
        return {**result, **standin_problems(box)}
