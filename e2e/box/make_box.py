"""`make box`, `make box-shell`, `make box-down` and `make bench`: `python -m e2e.box.make_box up
DIRECTORY` runs the box with lab1 (e2e/box/workload/lab1_box.py) and its first `up` in a network
namespace of its own, detached, and keeps it up for a user until `make box-down`; `make box-shell`
opens a shell inside it, with a context for each cluster.
"""

from __future__ import annotations

import base64
import contextlib
import json
import operator
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from e2e.box import scenarios
from e2e.box.box import K3S_BUMP, Box
from e2e.box.management import floor
from e2e.box.observed import observe
from e2e.box.workload import lab1_box, lab1_sites
from e2e.engine.cli import REPO, built_bin
from e2e.engine.netns import in_new_netns, netns_command

# `make box`: the box in a network namespace of its own, detached, until `make box-down`.
PID_FILE = "box.pid"
LOG_FILE = "box.log"
SHELL_RC = "shell.rc"
READY_MARK = "lab-mgmt-box: ready"
FAILED_MARK = "lab-mgmt-box: failed"


def shell_rc(env: dict[str, str], path: list[Path], kubeconfigs: list[Path], project: Path) -> str:
    """What `make box-shell` runs before its prompt: the box engine's CLI with its state, plugins
    and passphrase (`env`), `path` before the user's PATH (the CLI, kubectl, helm), the admin
    kubeconfigs (the first one's context current), and the project the box deployed as the
    working directory."""
    # The chart stand-in's certificate too, which the kubernetes plugin must trust to read the
    # releases' charts.
    names = ("PULUMI_HOME", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_SKIP_UPDATE_CHECK", "TMPDIR")
    kubeconfig = os.pathsep.join(map(str, kubeconfigs))
    exports = {name: env[name] for name in (*names, "SSL_CERT_FILE") if name in env} | {"KUBECONFIG": kubeconfig}
    return "\n".join(
        [
            "[ -f ~/.bashrc ] && . ~/.bashrc",
            *(f"export {name}={shlex.quote(value)}" for name, value in exports.items()),
            f'export PATH={shlex.quote(os.pathsep.join(map(str, path)))}:"$PATH"',
            f"cd {shlex.quote(str(project))}",
            'PS1="(lab-mgmt box) ${PS1:-\\$ }"',
            "",
        ]
    )


def _kubeconfigs(box: Box, outputs: dict[str, Any]) -> list[Path]:
    """The management cluster's admin kubeconfig from the stack's output, and lab1's from the
    Secret Cluster API keeps it in, as `clusterctl get kubeconfig` reads it, its context named
    `lab1` so that the two merge in one KUBECONFIG."""
    mgmt, lab1 = box.engine.root / "lab-mgmt.yaml", box.engine.root / "lab1.yaml"
    mgmt.write_text(outputs["kubeconfig"])
    secret = box.kubectl(
        mgmt, "get", "secret", lab1_box.LAB1.kubeconfig_secret, "-n", lab1_box.LAB1.namespace, "-o", "json"
    )
    if secret["rc"] != 0:
        raise RuntimeError(f"cannot read lab1's kubeconfig: {secret['stderr']}")
    config = yaml.safe_load(base64.b64decode(json.loads(secret["stdout"])["data"]["value"]))
    [cluster], [user], [_] = config["clusters"], config["users"], config["contexts"]
    name = lab1_box.LAB1.name
    config |= {
        "clusters": [cluster | {"name": name}],
        "users": [user | {"name": name}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    lab1.write_text(yaml.safe_dump(config))
    for path in (mgmt, lab1):
        path.chmod(0o600)
    return [mgmt, lab1]


def _usage(box: Box, first: dict[str, Any], outputs: dict[str, Any]) -> str:
    engine = box.engine
    kubeconfigs = _kubeconfigs(box, outputs)
    tools = [
        engine.bin_dir,
        built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl"),
        built_bin("LAB_MGMT_HELM_BIN", "helm"),
    ]
    rc = shell_rc(engine.env(), tools, kubeconfigs, engine.project)
    (engine.root.parent / SHELL_RC).write_text(rc)
    shown = {key: value for key, value in outputs.items() if "ubeconfig" not in key}
    return "\n".join(
        [
            f"pulumi up of the whole program: rc {first['rc']} in {first['seconds']}s, {first['summary']}",
            f"outputs (kubeconfigs left out): {json.dumps(shown)}",
            f"kubeconfigs: {', '.join(map(str, kubeconfigs))} (contexts lab-mgmt and {lab1_box.LAB1.name})",
            f"{lab1_box.LAB1.name} runs with 0 workers; cluster-autoscaler watches it.",
            "The box's addresses exist only inside it. make box-shell opens a shell there, with KUBECONFIG,",
            "the CLI's state and PATH (pulumi, kubectl, helm) set; try: kubectl get nodes,",
            'pulumi preview --expect-no-changes, and the README\'s "Watch lab1 scale".',
            "make box-down stops it.",
        ]
    )


def failure_report(output: str, log_dirs: list[Path]) -> str:
    """The failed first `up`'s last output, and where the VM's own logs are: a guest that never
    got as far as sshd (the program's first SSH dial then retries for minutes) says why there."""
    logs = "\n".join(f"  {directory}" for directory in log_dirs) or "  none: no VM was started"
    return f"{output[-8000:]}\nthe VM's console, sshd and unit logs (console.log first):\n{logs}"


def _serve(root: str) -> None:
    """Inside the box's network namespace: the box, the first `up`, then up until SIGTERM."""

    def down(_signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, down)
    with lab1_box.running(Path(root)) as (box, _lab1):
        first = observe(box, "up")
        if first["rc"] != 0:
            print(failure_report(first["output"], box.guests.log_dirs(box.site.vmid)), f"\n{FAILED_MARK}", flush=True)
            return
        print(_usage(box, first, box.engine.outputs()), f"\n{READY_MARK}", flush=True)
        signal.pause()


def _up(root: Path) -> int:
    """Starts the box detached and follows its log until the first `up` has finished."""
    if root.exists():
        print(f"{root} exists: a box is up there, or was left; `make box-down` removes it", file=sys.stderr)
        return 1
    root.mkdir(parents=True)
    with (root / LOG_FILE).open("wb") as log:
        process = subprocess.Popen(
            netns_command(
                [sys.executable, "-m", "e2e.box.make_box", "--serve", str(root / "box")], list(lab1_box.ADDRESSES)
            ),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (root / PID_FILE).write_text(f"{process.pid}\n")
    print(f"the box is starting (log: {root / LOG_FILE}); the first pulumi up takes a few minutes", flush=True)
    while process.poll() is None:
        text = (root / LOG_FILE).read_text()
        if READY_MARK in text or FAILED_MARK in text:
            break
        time.sleep(2)
    text = (root / LOG_FILE).read_text()
    print(text.split("lab-mgmt-box:")[0][-8000:])
    return 0 if READY_MARK in text else 1


def _shell(root: Path) -> int:
    """`make box-shell`: an interactive shell in the running box's network namespace, set up by the
    `shell_rc` that the box wrote once ready. It replaces this process, so Ctrl-C reaches the shell."""
    rc, pid_file = root / "box" / SHELL_RC, root / PID_FILE
    pid = int(pid_file.read_text()) if pid_file.exists() else 0
    if not (rc.exists() and pid and Path(f"/proc/{pid}/ns/net").exists()):
        print(f"no box ready at {root}: run `make box` first", file=sys.stderr)
        return 1
    # A box started by a user other than root runs in a user namespace of its own (e2e/engine/netns.py).
    own_user = os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
    enter = ["nsenter", f"--target={pid}", "--net", *(["--user"] if own_user else [])]
    os.execvp(enter[0], [*enter, "--", "bash", "--rcfile", str(rc), "-i"])  # noqa: S606 - argv, no shell
    return 1


def _down(root: Path) -> int:
    pid_file = root / PID_FILE
    if not pid_file.exists():
        print(f"no box at {root}")
        return 0
    pid = int(pid_file.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            time.sleep(1)
        print(f"box process {pid} still running after 120s", file=sys.stderr)
        return 1
    shutil.rmtree(root)
    print(f"box at {root} stopped and removed")
    return 0


def _what_it_did(name: str, run: dict[str, Any]) -> str:
    return (
        f"{name}: rc {run['rc']}, {run['seconds']}s, {len(run['ssh_sessions'])} SSH sessions, "
        f"{len(run['chart_requests'])} chart repository requests, "
        f"{len(run['pve_writes'])} Proxmox VE writes, {len(run['k8s_writes'])} Kubernetes writes"
    )


# What `make bench` reads off a scaling step's timeline ([seconds, field, value] each time a field
# changed, from the demand's change on): when each link of the chain first reached the step's end.
SCALING_STEPS = {"0->1": ("scale-up 0 -> 1, from zero", 1), "1->3": ("scale-up 1 -> 3", 3)}
CHAIN = (("replicas", "replicas"), ("machines", "Machines"), ("nodes", "Nodes"), ("scheduled", "pods scheduled"))


def scaling_lines(result: dict[str, Any]) -> list[str]:
    """The scale-up lines of the program's lab1 scenario (lab1_autoscaling.py): from the demand to
    the pending pod, the autoscaler's `/scale` (its reaction), the Machine, the Node and the pod
    scheduled; and the scale-down to zero."""
    lines = [f"autoscaler's reaction from zero (demand created -> its /scale): {result['reaction']}s"]
    for step, (title, target) in SCALING_STEPS.items():
        timeline = result["timelines"][step]
        reached = [f"pod pending at {_first(timeline, 'pending', lambda value: value > 0)}"]
        for field, label in CHAIN:
            reached.append(f"{label} {target} at {_first(timeline, field, partial(operator.eq, target))}")
        lines.append(f"{title}: {', '.join(reached)}")
    timeline = result["timelines"]["4->0"]
    gone = [f"{label} 0 at {_first(timeline, field, lambda value: value == 0)}" for field, label in CHAIN[:3]]
    lines.append(f"scale-down 4 -> 0 once the demand is deleted: {', '.join(gone)}")
    return lines


def _first(timeline: list[list[Any]], field: str, reached: Callable[[Any], bool]) -> str:
    """When `field` first `reached` its mark, in seconds since the demand changed; or never."""
    return next((f"{seconds}s" for seconds, key, value in timeline if key == field and reached(value)), "never")


def _bench(root: Path) -> int:
    """The tests' first run and no-op run, the no-op against the engine's floor, a k3s bump and
    the program's lab1 scaling from zero and back, their numbers printed."""
    result = in_new_netns(
        "management.lifecycle.whole_box_bench", str(root), addresses=[scenarios.PROXMOX_ADDRESS], timeout=1800
    )
    first, second = result["first_up"], result["second_up"]
    print(f"first pulumi up: rc {first['rc']}, {first['seconds']}s, {first['summary']}")
    print(_what_it_did("no-op pulumi up", second))
    runs = [first, second]
    if "bench" in result:
        bench = result["bench"]
        numbers = floor.summary(bench)
        print(
            f"engine floor ({floor.PROJECT}: the three plugins, nothing to do), {floor.RUNS} pulumi up: "
            f"median {numbers['floor_median']}s, min {numbers['floor_min']}s "
            f"({', '.join(str(run['seconds']) for run in bench['floor'])})"
        )
        print(
            f"no-op pulumi up, in turn with it: median {numbers['program_median']}s, min {numbers['program_min']}s "
            f"({', '.join(str(run['seconds']) for run in bench['program'])}): "
            f"{numbers['ratio_median']}x the floor (min over min {numbers['ratio_min']}x)"
        )
        for index, run in enumerate(bench["program"], 1):
            print("  ", _what_it_did(f"no-op {index}", run))
        traced = result["traced"]
        print(
            f"where the time goes, one run of each with PULUMI_DEBUG_GRPC "
            f"(floor {traced['floor']['seconds']}s / no-op {traced['program']['seconds']}s):"
        )
        for phase, seconds in traced["floor"]["phases"].items():
            print(f"   {phase.replace('_', ' ')}: {seconds}s / {traced['program']['phases'][phase]}s")
        runs += [traced["floor"], traced["program"]]
        runs += [*bench["floor"], *bench["program"]]
    if "k3s_bump" in result:
        bump = result["k3s_bump"]["up"]
        print(_what_it_did(f"k3s bump to {K3S_BUMP}, pulumi up", bump), f"({len(bump['installs'])} installer runs)")
        runs.append(bump)
    (root / "lab1").mkdir()
    scaling = in_new_netns(
        "workload.lab1_autoscaling.lab1_autoscaling",
        str(root / "lab1"),
        "lab",
        addresses=lab1_sites.addresses("lab"),
        timeout=900,
    )
    if "failed" in scaling:
        print("lab1 scaling failed:", scaling["failed"][-3000:])
    else:
        print(*scaling_lines(scaling), sep="\n")
    return 0 if "k3s_bump" in result and "failed" not in scaling and all(run["rc"] == 0 for run in runs) else 1


if __name__ == "__main__":
    command, directory = sys.argv[1], sys.argv[2]
    if command == "--serve":
        _serve(directory)
    else:
        actions = {"up": _up, "shell": _shell, "down": _down, "bench": _bench}
        sys.exit(actions[command](Path(directory).resolve()))
