"""`make box-shell` (e2e/box/make_box.py): the shell it opens inside the box has the box's CLI, kubectl
and helm first on PATH, both clusters' admin kubeconfigs, the CLI's state, plugins and passphrase, and the deployed
project as its directory, so that `kubectl get nodes` and `pulumi preview --expect-no-changes`
work as typed. The box itself runs only in `make box` and the real-engine tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from e2e.box import make_box
from e2e.engine.cli import Engine


def _tool(directory: Path, name: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(f'#!/bin/sh\necho "{name} from {directory}"\n')
    (directory / name).chmod(0o755)


def test_the_box_shell_sets_what_kubectl_and_pulumi_need(tmp_path: Path) -> None:
    engine = Engine(tmp_path / "engine-bin", tmp_path / "engine")
    kubectl, helm = tmp_path / "control-plane-bin", tmp_path / "helm-bin"
    _tool(engine.bin_dir, "pulumi")
    _tool(kubectl, "kubectl")
    _tool(helm, "helm")
    engine.project.mkdir(parents=True)
    env = engine.env() | {"SSL_CERT_FILE": str(tmp_path / "charts.pem")}
    rc = tmp_path / "shell.rc"
    kubeconfigs = [tmp_path / "lab-mgmt.yaml", tmp_path / "lab1.yaml"]
    rc.write_text(make_box.shell_rc(env, [engine.bin_dir, kubectl, helm], kubeconfigs, engine.project))
    shown = subprocess.run(
        ["bash", "-c", f". {rc} && pwd && kubectl && pulumi && helm && env"],
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert shown[:4] == [
        str(engine.project),
        f"kubectl from {kubectl}",
        f"pulumi from {engine.bin_dir}",
        f"helm from {helm}",
    ]
    variables = dict(line.split("=", 1) for line in shown[4:] if "=" in line)
    assert variables["KUBECONFIG"] == f"{kubeconfigs[0]}:{kubeconfigs[1]}"
    assert variables["PATH"] == f"{engine.bin_dir}:{kubectl}:{helm}:/usr/bin:/bin"
    for name in ("PULUMI_HOME", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "TMPDIR", "SSL_CERT_FILE"):
        assert variables[name] == env[name], name


def test_the_box_shell_without_a_box_says_to_start_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert make_box._shell(tmp_path / ".box") == 1
    assert "run `make box` first" in capsys.readouterr().err


def test_make_bench_reads_the_scaling_chain_off_the_timelines() -> None:
    timeline_up = [[0.4, "pending", 1], [12.0, "replicas", 1], [12.3, "machines", 1], [14.9, "nodes", 1]]
    result = {
        "reaction": 11.8,
        "timelines": {
            "0->1": [*timeline_up, [15.6, "scheduled", 1], [15.6, "pending", 0]],
            "1->3": [[0.3, "pending", 2], [5.1, "replicas", 3], [5.2, "machines", 3], [7.0, "nodes", 2]],
            "4->0": [[9.0, "replicas", 0], [9.1, "machines", 2], [9.4, "machines", 0], [10.2, "nodes", 0]],
        },
    }
    assert make_box.scaling_lines(result) == [
        "autoscaler's reaction from zero (demand created -> its /scale): 11.8s",
        "scale-up 0 -> 1, from zero: pod pending at 0.4s, replicas 1 at 12.0s, Machines 1 at 12.3s, Nodes 1 at 14.9s, "
        "pods scheduled 1 at 15.6s",
        # A link that never got there says so.
        "scale-up 1 -> 3: pod pending at 0.3s, replicas 3 at 5.1s, Machines 3 at 5.2s, Nodes 3 at never, "
        "pods scheduled 3 at never",
        "scale-down 4 -> 0 once the demand is deleted: replicas 0 at 9.0s, Machines 0 at 9.4s, Nodes 0 at 10.2s",
    ]


def test_a_failed_make_box_points_at_the_vm_s_logs(tmp_path: Path) -> None:
    logs = [tmp_path / "guests" / "vm201-0" / "logs"]
    output = "x" * 9000 + "dial tcp 192.168.4.21:22: connect: no route to host"
    report = make_box.failure_report(output, logs)
    # The output's last 8000 characters, then the logs.
    assert report.startswith(output[-8000:] + "\nthe VM's console")
    assert not report.startswith(output[-8001:])
    assert report.endswith(f"(console.log first):\n  {logs[0]}")
    assert make_box.failure_report("error", []).endswith("  none: no VM was started")
