"""`make box-shell` (e2e/box/make_box.py): the shell it opens inside the box has the box's CLI and kubectl
first on PATH, the admin kubeconfig, the CLI's state, plugins and passphrase, and the deployed
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
    kubectl = tmp_path / "control-plane-bin"
    _tool(engine.bin_dir, "pulumi")
    _tool(kubectl, "kubectl")
    engine.project.mkdir(parents=True)
    env = engine.env() | {"SSL_CERT_FILE": str(tmp_path / "charts.pem")}
    rc = tmp_path / "shell.rc"
    rc.write_text(make_box.shell_rc(env, [engine.bin_dir, kubectl], tmp_path / "lab-mgmt.yaml", engine.project))
    shown = subprocess.run(
        ["bash", "-c", f". {rc} && pwd && kubectl && pulumi && env"],
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert shown[:3] == [str(engine.project), f"kubectl from {kubectl}", f"pulumi from {engine.bin_dir}"]
    variables = dict(line.split("=", 1) for line in shown[3:] if "=" in line)
    assert variables["KUBECONFIG"] == str(tmp_path / "lab-mgmt.yaml")
    assert variables["PATH"] == f"{engine.bin_dir}:{kubectl}:/usr/bin:/bin"
    for name in ("PULUMI_HOME", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "TMPDIR", "SSL_CERT_FILE"):
        assert variables[name] == env[name], name


def test_the_box_shell_without_a_box_says_to_start_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert make_box._shell(tmp_path / ".box") == 1
    assert "run `make box` first" in capsys.readouterr().err
