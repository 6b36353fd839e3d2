"""Three faults in lab1's scaling path, run in the program's lab1 scenario (lab1_autoscaling.py) with
the real autoscaler running, each read where docs/troubleshooting.md sends the owner, and each
ending converged once its cause is gone:

- `edited_by_hand`: after a scale, the MachineDeployment's min-size annotation edited with
  kubectl. A plain preview does not see it (pulumi-kubernetes diffs the settings against the
  state's object); a preview with `--refresh` stops on the server-side apply conflict with
  kubectl's field manager. The hand edit taken off (`kubectl annotate <key>-`, which drops
  kubectl's claim with the field), `up --refresh` writes the setting back.
- `unreachable`: lab1 not answering at its VIP, two ways: its API server stopped, as when its
  kube-apiserver is down on a VM that is up (`connection refused`), and the VIP held by no host,
  as when kube-vip holds it nowhere (netns.held_nowhere: nobody answers on the wire). The
  autoscaler keeps its leader lease in lab1: it cannot renew it and exits; with the server
  stopped, each restart exits at once too (their dials refused), which the fault waits for; with
  the VIP held nowhere a restart's dial would wait out its 30 s before failing, so lab1 comes back
  after the first exit. What each process said. Once lab1 is back, the next restart stays up and
  reaches lab1 (it writes its status ConfigMap there).
- `never_a_node`: the template the workers are cloned from destroyed on the Proxmox node
  (proxmox_node.template_gone) while the autoscaler adds a worker for a pending pod. The new
  Machine's clone fails as the real CAPMOX reports it; the Machine stays Provisioning without a
  Node, and the autoscaler counts it as the worker on its way, adding no other, for
  `maxNodeProvisionTime`. With the template back, CAPMOX v0.9.0 clones again, the first answer
  lost on the way (the VM made, CAPMOX never told its id), so it clones once more; it leaves that
  VM as cloned (stopped, unconfigured) and reports it provisioned; deleting the Machine, as
  docs/troubleshooting.md says, gets a new one that becomes the Node the pod runs on, and the VM
  whose answer was lost stays on the node. A preview while the template is gone stops on the
  program's own check, naming templateVmId.
- `stray_named`: at 0, that VM still there, which `make exit-criteria` given the owner's read-only
  Proxmox token (docs/operations.md) names before it makes anything; then `qm destroy` as its line
  says.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from e2e.box.box import ROTATED_CAPMOX_SECRET, auditor_token_file
from e2e.box.workload import proxmox_node
from e2e.box.workload.lab1_controls import MAIN_LOOP, log_lines
from e2e.box.workload.lab1_reads import Lab, Workload, conditions, get, run, scales, until
from e2e.engine import netns
from e2e.engine.cli import REPO, Engine
from e2e.engine.control_plane import ControlPlane
from e2e.standins.cluster import pod_runner
from e2e.standins.proxmox.pve_api_standin import PveApiStandIn
from e2e.standins.workload.objects import owner

STATUS_CONFIGMAP = "cluster-autoscaler-status"
MIN_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
# Scans the autoscaler begins after the clone has failed, each adding nothing, before the
# template comes back.
SCANS_HELD = 1


def _log(runner: pod_runner.PodRunner) -> tuple[dict[str, Any], Path]:
    """The running autoscaler's start event and its log."""
    [*_, started] = [e for e in runner.events if e["event"] == "started"]
    return started, runner.folder / started["log"]


def edited_by_hand(engine: Engine, mgmt: ControlPlane, cluster: Workload) -> dict[str, Any]:
    """The min-size annotation raised by one with kubectl, then the owner's runs: a plain preview,
    one with `--refresh`, the hand edit taken off as docs/troubleshooting.md says, and `up --refresh`."""

    def min_size() -> str | None:
        deployment = get(mgmt, "machinedeployment", cluster.workers, namespace=cluster.namespace)
        value: str | None = deployment["metadata"]["annotations"].get(MIN_SIZE)
        return value

    def annotate(value: str) -> None:
        mgmt.kubectl("-n", cluster.namespace, "annotate", "--overwrite", "machinedeployment", cluster.workers, value)

    declared = min_size() or ""
    hand = str(int(declared) + 1)
    annotate(f"{MIN_SIZE}={hand}")
    plain = run(engine, mgmt, "preview", "--expect-no-changes")
    refreshed = engine.run("preview", "--refresh")
    annotate(f"{MIN_SIZE}-")
    taken_off = min_size()
    written_back = run(engine, mgmt, "up", "--refresh")
    return {
        "declared": declared,
        "hand": hand,
        "plain_preview": plain,
        "refreshed_preview": {"rc": refreshed.rc, "errors": refreshed.diagnostics("error")},
        "taken_off": taken_off,
        "refreshed_up": written_back,
        "after": min_size(),
    }


def _status_written(lab: Lab) -> str | None:
    """The resourceVersion of the autoscaler's status ConfigMap in lab1 (it writes it every scan)."""
    found = lab.get(lab.lab1, f"/api/v1/configmaps?fieldSelector=metadata.name%3D{STATUS_CONFIGMAP}") or {}
    items: list[dict[str, Any]] = found.get("items", [])
    return items[0]["metadata"]["resourceVersion"] if items else None


def _said(runner: pod_runner.PodRunner, event: dict[str, Any], endpoint: str) -> list[str]:
    """The lines of that process's log that are errors naming `endpoint`, or fatal."""
    lines = log_lines(runner.folder / event["log"])
    return [line for line in lines if line.startswith("F") or (line.startswith("E") and endpoint in line)]


def lab1_down(
    engine: Engine,
    mgmt: ControlPlane,
    lab: Lab,
    runner: pod_runner.PodRunner,
    lab1_plane: ControlPlane,
    *,
    network: str,
) -> dict[str, Any]:
    """`unreachable` two ways, by the key each is reported under: lab1's API server stopped, then
    its VIP held nowhere on the lab's `network` (the gateway's address with its prefix). While the
    API server is stopped, a change of the management cluster's alone is previewed and applied: a
    run that changes nothing of lab1's must not need lab1's API (issue 55)."""
    endpoint = f"{lab1_plane.address}:{lab1_plane.port}"
    stopped = lab1_plane.apiserver_stopped()
    held_nowhere = netns.held_nowhere(lab1_plane.address, network)
    return {
        "unreachable": unreachable(
            mgmt,
            lab,
            runner,
            endpoint=endpoint,
            down=stopped,
            exits_while_down=2,
            while_down=functools.partial(_capmox_token_rotated, engine, mgmt),
        ),
        "vip_held_nowhere": unreachable(mgmt, lab, runner, endpoint=endpoint, down=held_nowhere, exits_while_down=1),
    }


def _capmox_token_rotated(engine: Engine, mgmt: ControlPlane) -> dict[str, Any]:
    """CAPMOX's token rotated (docs/operations.md): a new Secret and the InfrastructureProvider CR,
    on the management cluster alone. `up` previews before it applies, so one run proves both."""
    config = engine.pulumi("config", "set", "--secret", "capmoxTokenSecret", stdin=ROTATED_CAPMOX_SECRET)
    return {"config": config.returncode, "up": run(engine, mgmt, "up")}


def unreachable(
    mgmt: ControlPlane,
    lab: Lab,
    runner: pod_runner.PodRunner,
    *,
    endpoint: str,
    down: AbstractContextManager[Any],
    exits_while_down: int,
    while_down: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """lab1 down (`down`, its API server stopped or its VIP held nowhere) until the autoscaler has
    exited `exits_while_down` times (the running process, then restarts), then back; what each of
    its processes said, and the first scan that reached lab1 afterwards."""
    running, _ = _log(runner)
    written_before = until("the autoscaler's status ConfigMap in lab1", lambda: _status_written(lab))
    events = len(runner.events)

    def exits() -> list[dict[str, Any]]:
        return [e for e in runner.events[events:] if e["event"] == "exited"]

    stopped = time.monotonic()  # kube-apiserver stops listening at once, then drains for seconds
    with down:
        until("the autoscaler exits", exits)
        exited_in = round(time.monotonic() - stopped, 1)
        until(f"{exits_while_down} exits", lambda: len(exits()) >= exits_while_down)
        pods = mgmt.kubectl("get", "pods", "-n", lab.cluster.namespace).stdout.splitlines()
        ran_while_down = while_down() if while_down is not None else None
    back = time.monotonic()
    written = until(
        "the autoscaler writes its status ConfigMap in lab1 again",
        lambda: (now := _status_written(lab)) not in (None, written_before) and now,
    )
    processes = [running, *(e for e in runner.events[events:] if e["event"] == "started")]
    return {
        "endpoint": endpoint,
        "exited_in": exited_in,
        "down_for": round(back - stopped, 1),
        "reached_again_in": round(time.monotonic() - back, 1),
        "status_written": [written_before, written],
        "pods": [line for line in pods if line.startswith(("NAME", lab.cluster.autoscaler))],
        "runner_events": [e["event"] for e in runner.events[events:]],
        "said": [_said(runner, started, endpoint) for started in processes],
        "ran_while_down": ran_while_down,
    }


def _current_template(mgmt: ControlPlane, lab: Lab) -> int:
    """The template VMID the MachineDeployment's workers are cloned from now."""
    namespace = lab.cluster.namespace
    deployment = get(mgmt, "machinedeployment", lab.cluster.workers, namespace=namespace)
    infrastructure = deployment["spec"]["template"]["spec"]["infrastructureRef"]["name"]
    template = get(mgmt, "proxmoxmachinetemplate", infrastructure, namespace=namespace)
    return int(template["spec"]["template"]["spec"]["templateID"])


def never_a_node(
    mgmt: ControlPlane,
    lab: Lab,
    pve: PveApiStandIn,
    runner: pod_runner.PodRunner,
    *,
    scale_up: Callable[[], None],
    preview: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """The workers' template gone from the Proxmox node `pve` while `scale_up()` makes the
    autoscaler add a worker; what the owner reads while it is (`preview()` among it: the program's
    check finds the template gone), then the template back."""
    cluster = lab.cluster
    template = _current_template(mgmt, lab)
    _, log = _log(runner)
    audit_mark, began = mgmt.audit_mark(), time.monotonic()
    with proxmox_node.template_gone(pve, template):
        scale_up()
        failed = until(
            "a worker's clone failed",
            lambda: next(
                (
                    m
                    for m in get(mgmt, "proxmoxmachines", namespace=cluster.namespace)["items"]
                    if conditions(m).get("VirtualMachineProvisioned", {}).get("reason") == "CloningFailed"
                ),
                None,
            ),
        )
        failed_in = round(time.monotonic() - began, 1)
        from_line = len(log_lines(log))
        until(
            f"{SCANS_HELD} scans of the autoscaler after the clone failed",
            lambda: sum(MAIN_LOOP in line for line in log_lines(log)[from_line:]) >= SCANS_HELD,
        )
        machine = owner(failed, "Machine", "cluster.x-k8s.io") or ""
        listed = mgmt.kubectl("get", "machines", "-n", cluster.namespace).stdout.splitlines()
        held = {
            "sample": lab.sample(),
            "machines": [line for line in listed if line.startswith(("NAME", machine))],
            "machine": get(mgmt, "machine", machine, namespace=cluster.namespace),
            "proxmox_machine": get(mgmt, "proxmoxmachine", failed["metadata"]["name"], namespace=cluster.namespace),
            "autoscaler_lines": [line for line in log_lines(log)[from_line:] if "upcoming" in line.lower()][:6],
            "preview": preview(),
        }
    # CAPMOX clones again once the template is back, and that clone's answer is lost: CAPMOX
    # records a VM's id only from the answer, so it clones once more under a new id. The
    # ProxmoxMachine keeps the CloningFailed reason, and each later step of CAPMOX's state machine
    # runs only from the reason before it: the clone stays as cloned, stopped, and the
    # ProxmoxMachine is reported provisioned.
    pve.faults.clone_answers_lost = 1
    name = failed["metadata"]["name"]
    provisioned = until(
        "the template back: the failed machine's second clone",
        lambda: (
            (item := get(mgmt, "proxmoxmachine", name, namespace=cluster.namespace))
            and (item.get("status") or {}).get("initialization", {}).get("provisioned")
            and item
        ),
    )
    recorded = int(provisioned["spec"]["virtualMachineID"])
    stuck = {
        "proxmox_machine": provisioned,
        "vm": pve.qm_config(recorded),
        "machine": get(mgmt, "machine", machine, namespace=cluster.namespace),
        "answers_lost": pve.faults.clone_answers_lost,
        "named_so": {vmid: pve.qm_config(vmid) for vmid, vm in pve.vms_on_node().items() if vm == name},
    }
    # docs/troubleshooting.md's way out: delete that Machine; CAPMOX destroys its VM and the
    # MachineSet makes another, which is cloned and configured from the start.
    back = time.monotonic()
    deleted = mgmt.kubectl("delete", "machine", machine, "-n", cluster.namespace, "--wait=false")
    timeline = lab.watch(
        "the stuck Machine deleted: its replacement becomes a Node and the demand runs",
        lambda s: s["pending"] == 0 and s["machines_with_node"] == s["machines"] == s["nodes"] == s["replicas"],
        back,
    )
    return {
        "template": template,
        "failed_in": failed_in,
        "held": held,
        "stuck": stuck,
        "deleted": deleted.stdout + deleted.stderr,
        "after_machine_deleted": timeline,
        "named_so_after": {vmid: vm for vmid, vm in pve.vms_on_node().items() if vm == name},
        "scaled": scales(mgmt, audit_mark, cluster),
    }


def stray_named(mgmt: ControlPlane, lab: Lab, lab1: Path, pve: PveApiStandIn, folder: Path) -> dict[str, Any]:
    """At 0, each VM named as a worker that no ProxmoxMachine holds (never_a_node's lost answer):
    the exit criteria typed with the owner's read-only Proxmox token (a PVEAuditor's, in a file of
    mode 0600, as docs/operations.md has it made) must name it and make nothing; then it is
    `qm destroy`ed on the node, as the line the command printed says."""
    cluster = lab.cluster
    held = {
        item["spec"].get("virtualMachineID")
        for item in get(mgmt, "proxmoxmachines", namespace=cluster.namespace)["items"]
    }
    strays = {
        vmid: vm for vmid, vm in pve.vms_on_node().items() if vm.startswith(f"{cluster.workers}-") and vmid not in held
    }
    token = auditor_token_file(folder / "pve-auditor.token")
    typed = subprocess.run(
        [
            *(sys.executable, "-m", "tools.exit_criteria", "--cluster", f"{cluster.namespace}/{cluster.name}"),
            *("--kubeconfig", str(mgmt.kubeconfig), "--workload-kubeconfig", str(lab1)),
            *("--kubectl", str(mgmt.bin_dir / "kubectl"), "--report-dir", str(folder / "report")),
            *("--proxmox-endpoint", pve.url, "--proxmox-token-file", str(token), "--proxmox-insecure"),
        ],
        cwd=REPO,
        env={**os.environ, "HOME": str(folder)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    [report] = (folder / "report").glob("*.json")
    made = get(mgmt, "namespace", "lab-mgmt-exit-criteria", namespace="", kubeconfig=lab1)
    for vmid in strays:
        pve.qm_destroy(vmid)
    return {
        "strays": strays,
        "rc": typed.returncode,
        "out": typed.stdout,
        "err": typed.stderr,
        "report": json.loads(report.read_text()),
        "made": made,
        "vms_after": pve.vms_on_node(),
    }
