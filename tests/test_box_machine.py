"""What the lab in a box takes from the machine it runs on (e2e/standins/guest/guest.py): a machine
without it is refused before any VM boots, naming the Debian packages, instead of the program's
first SSH dial retrying for minutes against a guest that has no sshd or no sudo rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.standins.guest import guest


def test_a_machine_without_sshd_or_sudo_is_refused_naming_the_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        guest, "MACHINE_NEEDS", {str(tmp_path / "sshd"): "openssh-server", str(tmp_path / "sudoers.d"): "sudo"}
    )
    with pytest.raises(
        RuntimeError, match=r"need openssh-server, sudo on this machine: apt-get install openssh-server sudo"
    ):
        guest.Guests(tmp_path / "guests")
    assert not (tmp_path / "guests").exists()


def test_a_machine_with_them_starts_the_box_s_vms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sshd").touch()
    (tmp_path / "sudoers.d").mkdir()
    monkeypatch.setattr(
        guest, "MACHINE_NEEDS", {str(tmp_path / "sshd"): "openssh-server", str(tmp_path / "sudoers.d"): "sudo"}
    )
    with guest.Guests(tmp_path / "guests"):
        assert (tmp_path / "guests").is_dir()
