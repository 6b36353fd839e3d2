"""The lab in a box, whole: the program's own `__main__.py` through the real CLI, language host and
its three provider plugins, against a box that stands in for the lab, in a network namespace:

- the Proxmox VE API stand-in at the lab's address (e2e/pve_api_standin.py), both tokens holding
  every privilege the program checks, downloading the cloud image from a box-local HTTPS server
  and telling the guests of each power change;
- VM 201 as a real host (e2e/guest.py) at 192.168.4.21 on bridge vmbr0, installing k3s from the
  box's releases (e2e/k3s_release_standin.py), whose server is a real control plane;
- the Helm chart repositories (e2e/chart_repo_standin.py): the operator's chart runs a Deployment;
- the operator stand-in (e2e/operator_standin.py) against the guest's API server once k3s is up:
  it marks provider CRs Ready and runs the operator's Pods.

`whole_box(root)` is the scenario tests/test_box_whole.py runs (`in_new_netns("box.whole_box", ...)`):
the README's first run, `pulumi up` on the empty box, then a second run that must do nothing.
`python -m e2e.box DIRECTORY` (`make box`) runs the same first `up` and keeps the box up for a
user until `make box-down`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components import credentials
from e2e import (
    chart_repo_standin,
    control_plane,
    guest,
    https_server,
    k3s_release_standin,
    k3s_standin,
    operator_standin,
    playbook_lab,
    pve_api_standin,
    scenarios,
)
from e2e.engine import REPO, Engine, EngineRun, built_bin, fresh_engine
from e2e.netns import in_new_netns, netns_command

VMID = scenarios.VMID
IMAGE_PATH = "noble/20260926/noble-server-cloudimg-amd64.img"
OPERATOR_NAMESPACE = "capi-operator-system"
# The operator as its chart runs it: a Deployment whose Available status operator_ready.sh waits for.
OPERATOR_DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: capi-operator-controller-manager
  namespace: {{ .Release.Namespace }}
spec:
  replicas: 1
  selector: {matchLabels: {control-plane: controller-manager}}
  template:
    metadata: {labels: {control-plane: controller-manager}}
    spec:
      containers:
      - name: manager
        image: registry.k8s.io/capi-operator/cluster-api-operator:v{{ .Chart.Version }}
"""
# Every privilege components/credentials.py checks, on `/`, for both tokens.
ALL_PRIVILEGES = {
    "/": dict.fromkeys(
        (*credentials.PROGRAM_PRIVILEGES, *credentials.CAPMOX_ROOT_PRIVILEGES, *credentials.CAPMOX_PRIVILEGES), 1
    )
}
TOKENS = {
    (scenarios.PROGRAM_TOKEN, scenarios.PROGRAM_SECRET): ALL_PRIVILEGES,
    (scenarios.CAPMOX_TOKEN, scenarios.CAPMOX_SECRET): ALL_PRIVILEGES,
}
K8S_WRITES = {"create", "update", "patch", "delete", "deletecollection"}
# Who writes to the guest's API server for the program: k3s's admin certificate, which the
# kubeconfig the program reads carries, as do the host scripts' `k3s kubectl`. The box's own
# upkeep (the k3s stand-in's heartbeat, the controllers, the operator stand-in) is someone else.
PROGRAM_USER = "system:admin"


@dataclass
class Box:
    engine: Engine
    pve: pve_api_standin.PveApiStandIn
    guests: guest.Guests
    charts: chart_repo_standin.ChartRepoStandIn
    releases: k3s_release_standin.K3sReleases
    operator: operator_standin.OperatorStandIn
    cluster: control_plane.ControlPlane
    """The guest's k3s control plane as the box reaches it: its files on the VM's disk, its API
    server at the VM's address; there once the program has installed k3s."""
    steps: list[dict[str, Any]]
    """The README's first run and the settings pointing the program at the box."""

    def ssh_log(self) -> list[str]:
        try:
            path = self.guests.logs(VMID) / "sshd.log"
        except KeyError:  # VM 201 has not started yet
            return []
        return path.read_text().splitlines() if path.exists() else []

    def kubectl(self, kubeconfig: Path, *args: str) -> dict[str, Any]:
        """The real kubectl as a user runs it with a kubeconfig of the stack's."""
        kubectl = built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl") / "kubectl"
        done = subprocess.run(
            [str(kubectl), f"--kubeconfig={kubeconfig}", *args],
            env={"PATH": "/usr/bin:/bin", "HOME": str(self.engine.root)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def _cloud_image(base: Path) -> tuple[Path, str]:
    """A stand-in cloud image under a dated serial directory, as settings.py wants the URL; its
    sha256."""
    image = base / "images" / IMAGE_PATH
    image.parent.mkdir(parents=True)
    image.write_bytes(b"QFI\xfb" + bytes(range(256)) * 4096)
    return base / "images", hashlib.sha256(image.read_bytes()).hexdigest()


def _chart_repos() -> dict[str, list[chart_repo_standin.Chart]]:
    operator_version = playbook_lab.PLAYBOOK_CHARTS["cluster-api-operator"][2]
    return {
        **scenarios.CHART_REPOS,
        "capi-operator": [
            chart_repo_standin.Chart(
                "cluster-api-operator",
                operator_version,
                tuple(playbook_lab.provider_crd(kind) for kind in playbook_lab.PROVIDERS),
                (OPERATOR_DEPLOYMENT,),
            )
        ],
    }


@contextmanager
def running(base: Path) -> Iterator[Box]:
    """The box, up for the block, with a fresh engine configured as the README's first run and
    pointed at it. Only inside a network namespace of its own (e2e/netns.py) with the Proxmox
    address on loopback."""
    guest.add_bridge("vmbr0", f"{scenarios.GATEWAY}/24")
    images, digest = _cloud_image(base)
    key, cert = https_server.self_signed_certificate(base, "images", "127.0.0.1")
    with ExitStack() as stack:
        releases = stack.enter_context(k3s_release_standin.serve([scenarios.K3S_VERSION], base, scenarios.GATEWAY))
        guests = stack.enter_context(
            guest.Guests(base / "guests", hosts=releases.hosts, trusted=[releases.certificate])
        )
        files = stack.enter_context(https_server.serving_files(images, ("127.0.0.1", 0), key, cert))
        pve = stack.enter_context(
            pve_api_standin.serve(
                TOKENS,
                base,
                (scenarios.PROXMOX_ADDRESS, scenarios.PROXMOX_PORT),
                guest=guests,
                trusted_certificates=cert,
            )
        )
        charts = stack.enter_context(chart_repo_standin.serve(_chart_repos(), base))
        cluster = control_plane.ControlPlane(
            built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kube-apiserver"),
            guests.disk_path(VMID, str(k3s_standin.DATA / "box")),
            scenarios.VM_ADDRESS,
        )
        operator = stack.enter_context(
            operator_standin.running(
                cluster,
                playbook_lab.PROVIDER_RESOURCES,
                scenarios.OPERATOR_INSTALL_SECONDS,
                runs_pods_in=OPERATOR_NAMESPACE,
            )
        )
        # Only the chart repositories' certificate: the program trusts the Proxmox API as the lab
        # does (proxmoxInsecure), and the stand-in, not the program, fetches the image.
        engine = fresh_engine(base / "engine", extra_env={"SSL_CERT_FILE": str(charts.certificate)})
        steps = scenarios._readme_first_run(engine, scenarios._lab_secrets())
        for setting in (
            ("imageUrl", f"https://127.0.0.1:{files.server_address[1]}/{IMAGE_PATH}"),
            ("imageSha256", digest),
            ("certManagerChartRepo", f"{charts.url}/jetstack"),
            ("capiOperatorChartRepo", f"{charts.url}/capi-operator"),
        ):
            steps.append(scenarios._step(engine, ("config", "set", *setting)))
        yield Box(engine, pve, guests, charts, releases, operator, cluster, steps)


@dataclass(frozen=True)
class Marks:
    """Where each record stood before a run."""

    pve: int
    ssh: int
    audit: int

    @classmethod
    def of(cls, box: Box) -> Marks:
        return cls(len(box.pve.calls), len(box.ssh_log()), len(box.cluster.audit()))


def _observed(box: Box, action: str, *args: str) -> dict[str, Any]:
    """One `pulumi preview` or `up` with its wall time, and what it made the box do: SSH sessions
    on the guest, Proxmox VE writes, and the program's Kubernetes writes."""
    marks = Marks.of(box)
    started = time.monotonic()
    run: EngineRun = box.engine.run(action, *args)
    seconds = time.monotonic() - started
    ssh = box.ssh_log()[marks.ssh :]
    return {
        "rc": run.rc,
        "output": run.output,
        "seconds": round(seconds, 1),
        "steps": run.steps(),
        "summary": run.summary(),
        "warnings": run.diagnostics("warning"),
        "ssh_connections": [line for line in ssh if "Connection from" in line],
        "ssh_sessions": [line for line in ssh if "Accepted publickey" in line],
        "pve_writes": [
            [call.method, call.path, list(call.params)]
            for call in box.pve.calls[marks.pve :]
            if call.method in pve_api_standin.WRITES
        ],
        "k8s_writes": [
            [event["verb"], event.get("objectRef", {}).get("resource", ""), event.get("objectRef", {}).get("name", "")]
            for event in box.cluster.audit()[marks.audit :]
            if event["verb"] in K8S_WRITES
            and event.get("user", {}).get("username") == PROGRAM_USER
            # A preview's server-side dry runs change nothing.
            and "dryRun=All" not in event.get("requestURI", "")
        ],
    }


def _kubeconfig_use(box: Box, outputs: dict[str, Any]) -> dict[str, Any]:
    """The stack's kubeconfigs as a user saves and uses them: the admin's lists namespaces; the
    read-only one lists pods but may neither read Secrets nor delete."""
    admin, readonly = box.engine.root / "lab-mgmt.yaml", box.engine.root / "lab-mgmt-readonly.yaml"
    for path, output in ((admin, "kubeconfig"), (readonly, "readonlyKubeconfig")):
        path.write_text(outputs[output])
        path.chmod(0o600)
    return {
        "namespaces": box.kubectl(admin, "get", "namespaces", "-o", "name"),
        "readonly_pods": box.kubectl(readonly, "get", "pods", "-A", "-o", "name"),
        "readonly_can_get_secrets": box.kubectl(readonly, "auth", "can-i", "get", "secrets", "-A"),
        "readonly_can_delete_namespaces": box.kubectl(readonly, "auth", "can-i", "delete", "namespaces"),
        "readonly_can_delete_pods": box.kubectl(readonly, "auth", "can-i", "delete", "pods", "-A"),
    }


def _standins(box: Box) -> dict[str, Any]:
    """What the stand-ins could not answer or do; each must be empty."""
    return {
        "pve_unknown": box.pve.unknown,
        "chart_unknown": box.charts.unknown,
        "release_unknown": box.releases.unknown,
        "operator_errors": box.operator.errors,
    }


def whole_box(root: str) -> dict[str, Any]:
    """The README's first run, `pulumi up` of the whole program on the empty box, the stack's
    kubeconfigs used, then `pulumi preview --expect-no-changes` and a second `pulumi up`."""
    with running(Path(root)) as box:
        first = _observed(box, "up")
        outputs = box.engine.outputs() if first["rc"] == 0 else {}
        use = _kubeconfig_use(box, outputs) if outputs else {}
        no_changes = _observed(box, "preview", "--expect-no-changes")
        second = _observed(box, "up")
        return {
            "steps": box.steps,
            "first_up": first,
            "outputs": {key: value for key, value in outputs.items() if "ubeconfig" not in key},
            "secret_outputs": box.engine.secret_outputs() if outputs else [],
            "kubeconfig_use": use,
            "no_changes_preview": no_changes,
            "second_up": second,
            "pods_run": box.operator.pods_run,
            "providers_reconciled": [f"{entry['kind']}/{entry['name']}" for entry in box.operator.reconciled],
            **_standins(box),
        }


# `make box`: the box in a network namespace of its own, detached, until `make box-down`.
PID_FILE = "box.pid"
LOG_FILE = "box.log"
READY_MARK = "lab-mgmt-box: ready"
FAILED_MARK = "lab-mgmt-box: failed"


def _usage(box: Box, first: dict[str, Any], outputs: dict[str, Any]) -> str:
    engine = box.engine
    kubeconfig = engine.root / "lab-mgmt.yaml"
    kubeconfig.write_text(outputs["kubeconfig"])
    kubeconfig.chmod(0o600)
    kubectl = built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl") / "kubectl"
    netns = f"nsenter --net=/proc/{os.getpid()}/ns/net"
    # The box engine's own state and plugins, and the chart stand-in's certificate that the
    # kubernetes plugin must trust to read the releases' charts.
    env = " ".join(
        f"{name}={engine.env()[name]}"
        for name in ("PULUMI_HOME", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "SSL_CERT_FILE")
    )
    shown = {key: value for key, value in outputs.items() if "ubeconfig" not in key}
    return "\n".join(
        [
            f"pulumi up of the whole program: rc {first['rc']} in {first['seconds']}s, {first['summary']}",
            f"outputs (kubeconfigs left out): {json.dumps(shown)}",
            f"admin kubeconfig: {kubeconfig}",
            "The box's addresses exist only in its network namespace; reach them from there:",
            f"  {netns} {kubectl} --kubeconfig={kubeconfig} get namespaces",
            f"  cd {engine.project} && {netns} env {env} {engine.bin_dir / 'pulumi'} preview --stack lab "
            "--expect-no-changes",
            "make box-down stops it.",
        ]
    )


def _serve(root: str) -> None:
    """Inside the box's network namespace: the box, the first `up`, then up until SIGTERM."""

    def down(_signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, down)
    with running(Path(root)) as box:
        first = _observed(box, "up")
        if first["rc"] != 0:
            print(first["output"][-8000:], f"\n{FAILED_MARK}", flush=True)
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
            netns_command([sys.executable, "-m", "e2e.box", "--serve", str(root / "box")], [scenarios.PROXMOX_ADDRESS]),
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


def _bench(root: Path) -> int:
    """The test's scenario, its numbers printed."""
    result = in_new_netns("box.whole_box", str(root), addresses=[scenarios.PROXMOX_ADDRESS], timeout=1800)
    first, second = result["first_up"], result["second_up"]
    print(f"first pulumi up: rc {first['rc']}, {first['seconds']}s, {first['summary']}")
    print(
        f"no-op pulumi up: rc {second['rc']}, {second['seconds']}s, {len(second['ssh_sessions'])} SSH sessions, "
        f"{len(second['pve_writes'])} Proxmox VE writes, {len(second['k8s_writes'])} Kubernetes writes"
    )
    return 0 if first["rc"] == second["rc"] == 0 else 1


if __name__ == "__main__":
    command, directory = sys.argv[1], sys.argv[2]
    if command == "--serve":
        _serve(directory)
    else:
        actions = {"up": _up, "down": _down, "bench": _bench}
        sys.exit(actions[command](Path(directory).resolve()))
