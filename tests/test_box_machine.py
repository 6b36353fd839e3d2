"""What the lab in a box takes from the machine it runs on (e2e/standins/guest/guest.py): a machine
without it is refused before any VM boots, naming the Debian packages, instead of the program's
first SSH dial retrying for minutes against a guest that has no sshd or no sudo rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.standins.guest import guest


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine whose sshd and sudoers.d are under tmp_path, neither there yet."""
    monkeypatch.setattr(
        guest, "MACHINE_PATHS", {str(tmp_path / "sshd"): "openssh-server", str(tmp_path / "sudoers.d"): "sudo"}
    )
    return tmp_path


def test_a_machine_without_sshd_or_sudo_is_refused_naming_the_packages(machine: Path) -> None:
    with pytest.raises(
        RuntimeError, match=r"need openssh-server, sudo on this machine: apt-get install openssh-server sudo"
    ):
        guest.Guests(machine / "guests")
    assert not (machine / "guests").exists()


def test_a_machine_with_them_starts_the_box_s_vms(machine: Path) -> None:
    (machine / "sshd").touch()
    (machine / "sudoers.d").mkdir()
    with guest.Guests(machine / "guests"):
        assert (machine / "guests").is_dir()
