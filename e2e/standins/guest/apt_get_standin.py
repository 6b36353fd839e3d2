"""apt-get in a box guest (e2e/standins/guest/guest.py), which reaches no archive: what guest_agent.sh runs,
`apt-get [-o DPkg::Lock::Timeout=N] [-q] update` and `... install -y [-q] qemu-guest-agent`. The
install does what the package does: the agent (e2e/standins/guest/qga_standin.py) as /usr/sbin/qemu-ga, its
static unit, its entry in the guest's dpkg database (so the real dpkg-query finds it), and the
postinst starting it. Any other option, command or package fails with a message, exit 100 (apt's).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from e2e.standins.guest.guest import record_call, standin_wrapper

KNOWN_OPTIONS = {"DPkg::Lock::Timeout"}
AGENT = Path("/usr/sbin/qemu-ga")
UNIT = Path("/usr/lib/systemd/system/qemu-guest-agent.service")
# As Ubuntu's: no [Install] section (static), started when the virtio port appears.
UNIT_TEXT = """[Unit]
Description=QEMU Guest Agent
BindsTo=dev-virtio\\x2dports-org.qemu.guest_agent.0.device
After=dev-virtio\\x2dports-org.qemu.guest_agent.0.device

[Service]
ExecStart=-/usr/sbin/qemu-ga
"""
STATUS = Path("/var/lib/dpkg/status")
DPKG_ENTRY = """
Package: qemu-guest-agent
Status: install ok installed
Priority: optional
Section: admin
Installed-Size: 1024
Maintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>
Architecture: amd64
Source: qemu
Version: 1:8.2.2+ds-0ubuntu1.4
Description: Guest-side qemu-system agent
"""


class RefusedError(Exception):
    pass


def _install(packages: list[str]) -> None:
    if packages != ["qemu-guest-agent"]:
        raise RefusedError(f"E: apt-get stand-in: knows only qemu-guest-agent, not {' '.join(packages)}")
    if "Package: qemu-guest-agent\n" in STATUS.read_text():
        print("qemu-guest-agent is already the newest version (1:8.2.2+ds-0ubuntu1.4).")
        return
    print("Setting up qemu-guest-agent (1:8.2.2+ds-0ubuntu1.4) ...")
    AGENT.write_text(standin_wrapper("e2e.standins.guest.qga_standin"))
    AGENT.chmod(0o755)
    UNIT.parent.mkdir(parents=True, exist_ok=True)
    UNIT.write_text(UNIT_TEXT)
    with STATUS.open("a") as status:
        status.write(DPKG_ENTRY)
    # The postinst (deb-systemd-invoke start): the unit starts where its virtio port exists.
    if Path("/run/box-virtio").is_dir():
        subprocess.run(["systemctl", "start", "qemu-guest-agent"], check=True)


def apt_get(args: list[str]) -> None:
    words = []
    rest = iter(args)
    for arg in rest:
        if arg == "-o":
            key = next(rest, "").partition("=")[0]
            if key not in KNOWN_OPTIONS:
                raise RefusedError(f"E: apt-get stand-in: does not know the option {key}")
        elif arg in ("-q", "-y"):
            continue
        elif arg.startswith("-"):
            raise RefusedError(f"E: apt-get stand-in: does not know {arg}")
        else:
            words.append(arg)
    if words == ["update"]:
        print("Reading package lists... Done")
    elif words[:1] == ["install"] and "-y" in args:
        _install(words[1:])
    else:
        raise RefusedError(f"E: apt-get stand-in: does not know `apt-get {' '.join(args)}`")


def main() -> int:
    args = sys.argv[1:]
    try:
        apt_get(args)
    except RefusedError as refused:
        print(refused, file=sys.stderr)
        record_call(["apt-get", *args], 100, str(refused))
        return 100
    record_call(["apt-get", *args], 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
