"""What the machine must have for the box and the real-engine tests is checked before anything is
built (e2e/engine/preflight.py): every missing piece in one message, each with what brings it, no
traceback; and `make box` and `make test-engine` run that check first."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.engine import preflight
from e2e.engine.cli import REPO


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine without sshd and sudo's folder (under tmp_path), with a command no machine has,
    and an empty engine cache on a disk that needs more room than any has."""
    monkeypatch.setattr(
        preflight,
        "MACHINE_PATHS",
        {str(tmp_path / "sshd"): "openssh-server", str(tmp_path / "sudoers.d"): "sudo"},
    )
    monkeypatch.setattr(preflight, "COMMANDS", {**preflight.COMMANDS, "no-such-command-here": "iproute2"})
    monkeypatch.setenv("LAB_MGMT_ENGINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(preflight, "COLD_BUILD_GB", 10**9)
    return tmp_path


def test_every_missing_piece_is_named_in_one_message_with_its_package(
    bare: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert preflight.main([]) == 1
    said = capsys.readouterr().err
    assert "apt-get install iproute2 openssh-server sudo" in said
    assert f"{10**9} GB free at {bare}" in said
    assert "Traceback" not in said


def test_the_packages_alone_for_ci_to_install(bare: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert preflight.main(["--packages"]) == 0
    assert capsys.readouterr().out.split() == ["iproute2", "openssh-server", "sudo"]


def test_a_machine_that_has_them_passes(bare: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (bare / "sshd").touch()
    (bare / "sudoers.d").mkdir()
    built = bare / "cache" / "pulumi-v3.274.0" / "bin"
    built.mkdir(parents=True)
    (built / "pulumi").touch()
    commands = {
        command: package for command, package in preflight.COMMANDS.items() if command != "no-such-command-here"
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preflight, "COMMANDS", commands)
        patch.setattr(preflight, "WARM_RUN_GB", 0)
        assert preflight.problems() == [], "this machine runs the real-engine tests"
    assert capsys.readouterr().err == ""


def test_it_runs_without_site_packages_before_any_virtualenv() -> None:
    """`-S`: no site-packages, so nothing but the standard library can be imported."""
    done = subprocess.run(
        [sys.executable, "-S", "-m", "e2e.engine.preflight", "--packages"],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("target", ["box", "test-engine"])
def test_make_checks_the_machine_before_the_virtualenv_and_the_build(target: str) -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(rf"^{target}:(.*)\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe is not None
    assert recipe[1].strip() == "", "no prerequisite may run before the check"
    assert recipe[2].splitlines()[0] == "\t$(PREFLIGHT)"
