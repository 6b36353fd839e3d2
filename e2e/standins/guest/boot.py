"""A box guest's boot (guest.py), run as `python -m e2e.standins.guest.boot BOOT_JSON`, the guest's
PID 1 inside its new namespaces: it lays out the disk, does cloud-init's per-instance work,
configures the network, starts sshd and the enabled units, and powers everything off on SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from e2e.engine.cli import REPO
from e2e.standins.guest.guest import (
    BOOT_BOUND_SECONDS,
    CALL_LOG,
    INTERFACE,
    LOG_DIR,
    SHUTDOWN_BOUND_SECONDS,
    VIRTIO_DIR,
    Boot,
    standin_wrapper,
)

# cloud-init's final stage ends a little after sshd answers, as on a real first boot: long enough
# that `cloud-init status --wait` has to wait.
CLOUD_INIT_FINAL_SECONDS = 3
# The image's overlaid trees; /home, /opt and /usr/local start empty, as on Ubuntu's cloud image.
OVERLAID = ("etc", "usr", "var", "root")
EMPTY = ("home", "opt", "usr/local")
STANDINS = {
    "usr/bin/cloud-init": "e2e.standins.guest.cloud_init_standin",
    "usr/bin/systemctl": "e2e.standins.guest.systemctl_standin",
    "usr/bin/apt-get": "e2e.standins.guest.apt_get_standin",
}
# PVE's user-data sets `user:` as a string, deprecated since cloud-init 22.2: every boot ends
# "done with recoverable errors" (exit 2).
DEPRECATION = (
    "Deprecated cloud-config provided: user: Use of type string is deprecated in 22.2 and scheduled to be"
    " removed in 27.2. Use ``users`` instead."
)


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True)


def _lay_out_disk(boot: Boot) -> None:
    """Mounts the guest's trees; on the disk's first boot, first makes the image: the stand-ins,
    the sites the box stands in for and their CA, and sshd as Ubuntu's cloud image configures it."""
    # The stand-ins run from this repository and k3s's on the built control plane, wherever they
    # are (CI's clone, or an engine cache that LAB_MGMT_ENGINE_CACHE moved, may be under /tmp, which
    # the guest covers): keep a handle on each to bind it back at its own path once all is mounted.
    kept = {path: os.open(path, os.O_PATH) for path in _from_the_machine()}
    disk = Path(boot.disk)
    new_image = not (disk / "image").exists()
    if new_image:
        for path, module in STANDINS.items():
            target = disk / "upper" / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(standin_wrapper(module))
            target.chmod(0o755)
        etc = disk / "upper" / "etc"
        (etc / "ssl" / "certs").mkdir(parents=True)
        bundle = Path("/etc/ssl/certs/ca-certificates.crt").read_text()
        extra = "".join(Path(path).read_text() for path in boot.trusted)
        (etc / "ssl" / "certs" / "ca-certificates.crt").write_text(bundle + extra)
        hosts = f"127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n127.0.1.1 {boot.hostname}\n"
        (etc / "hosts").write_text(hosts + "".join(f"{address} {name}\n" for name, address in boot.hosts.items()))
        (etc / "ssh" / "sshd_config.d").mkdir(parents=True)
        (etc / "ssh" / "sshd_config.d" / "60-cloudimg-settings.conf").write_text("PasswordAuthentication no\n")
    for tree in OVERLAID:
        upper, work = disk / "upper" / tree, disk / "work" / tree
        upper.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        _sh("mount", "-t", "overlay", "overlay", "-o", f"lowerdir=/{tree},upperdir={upper},workdir={work}", f"/{tree}")
    for tree in EMPTY:
        (disk / "own" / tree).mkdir(parents=True, exist_ok=True)
        _sh("mount", "--bind", str(disk / "own" / tree), f"/{tree}")
    Path(LOG_DIR).mkdir(parents=True, exist_ok=True)
    _sh("mount", "--bind", boot.logs, LOG_DIR)
    # A stand-in command run by the login user (`systemctl show` without sudo) records its call too.
    Path(CALL_LOG).touch()
    Path(CALL_LOG).chmod(0o666)
    _sh("mount", "-t", "tmpfs", "tmpfs", "/run")
    if boot.agent:
        Path(VIRTIO_DIR).mkdir()
        _sh("mount", "--bind", boot.virtio, VIRTIO_DIR)
    if new_image:
        # The machine's own enabled units are not the image's: only ssh is, and it starts below.
        for link in Path("/etc/systemd/system").glob("*.wants/*"):
            link.unlink()
        (disk / "image").write_text("made\n")
    # Last: the tests' files under /tmp (the disk included) are out of the guest's sight from here.
    _sh("mount", "-t", "tmpfs", "tmpfs", "/tmp")  # noqa: S108 - the guest's own /tmp
    for covered, handle in kept.items():
        if not covered.exists():
            covered.mkdir(parents=True)
            # --no-canonicalize: mount(8) would otherwise turn the handle back into the covered path.
            _sh("mount", "--no-canonicalize", "--bind", f"/proc/{os.getpid()}/fd/{handle}", str(covered))
            _sh("mount", "-o", "remount,bind,ro", str(covered))
        os.close(handle)


def _from_the_machine() -> list[Path]:
    """What the guest runs from the tests' machine: this repository, and the control plane that
    the k3s stand-in runs (k3s_release_standin names it to the guest), where the box has one."""
    control_plane = os.environ.get("LAB_MGMT_CONTROL_PLANE_BIN")
    return [REPO, *([Path(control_plane)] if control_plane else [])]


def _cloud_init(boot: Boot) -> None:
    """cloud-init's per-instance work, at the first boot of an instance id: the default user with
    its keys and passwordless sudo, and new SSH host keys (ssh_deletekeys, ssh_genkeytypes)."""
    marker = Path("/var/lib/cloud/data/instance-id")
    if marker.exists() and marker.read_text().strip() == boot.instance_id:
        print(f"cloud-init: instance {boot.instance_id} seen before; per-instance modules skipped", flush=True)
        return
    Path("/etc/hostname").write_text(boot.hostname + "\n")
    if subprocess.run(["id", boot.user], capture_output=True, check=False).returncode != 0:
        _sh("useradd", "--create-home", "--shell", "/bin/bash", "--groups", "adm,sudo", boot.user)
    sudoers = Path("/etc/sudoers.d/90-cloud-init-users")
    sudoers.write_text(
        f"# Created by cloud-init v. 25.1\n\n# User rules for {boot.user}\n{boot.user} ALL=(ALL) NOPASSWD:ALL\n"
    )
    sudoers.chmod(0o440)
    home = Path(f"/home/{boot.user}")
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    authorized = ssh_dir / "authorized_keys"
    # cloud-init adds the instance's keys to those there; it never removes one.
    present = authorized.read_text().splitlines() if authorized.exists() else []
    authorized.write_text("".join(f"{key}\n" for key in [*present, *(k for k in boot.keys if k not in present)]))
    authorized.chmod(0o600)
    _sh("chown", "-R", f"{boot.user}:{boot.user}", str(ssh_dir))
    # cc_ssh deletes the host keys unless a config file turns ssh_deletekeys off (the program's
    # keep_host_keys.sh does), then makes only the key types that are missing.
    deleting = not _ssh_deletekeys_off()
    if deleting:
        for old in Path("/etc/ssh").glob("ssh_host_*"):
            old.unlink()
    _sh("ssh-keygen", "-A")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(boot.instance_id + "\n")
    print(
        f"cloud-init: new instance {boot.instance_id}: user {boot.user}, {len(boot.keys)} key(s), "
        + ("new host keys" if deleting else "host keys kept (ssh_deletekeys: false)"),
        flush=True,
    )


def _ssh_deletekeys_off() -> bool:
    """What cloud-init's merged config says, from the drop-ins in /etc/cloud/cloud.cfg.d (the last
    file that sets it wins); only `false` keeps the keys."""
    setting = None
    for drop_in in sorted(Path("/etc/cloud/cloud.cfg.d").glob("*.cfg")):
        loaded = yaml.safe_load(drop_in.read_text()) or {}
        if isinstance(loaded, dict) and "ssh_deletekeys" in loaded:
            setting = loaded["ssh_deletekeys"]
    return setting is False


def _network(boot: Boot) -> None:
    """The NIC as netplan configures it from cloud-init's network config: the address, and the
    default route through the gateway where the config gives one. The gateway is the box's own
    address on the bridge, which routes nothing onwards unless a box forwards to a pod's network
    (e2e/box/workload/lab1_box.py), so a guest's packets to the world go no further than the box."""
    deadline = time.monotonic() + BOOT_BOUND_SECONDS
    while subprocess.run(["ip", "link", "show", "dev", INTERFACE], capture_output=True, check=False).returncode:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {INTERFACE} within {BOOT_BOUND_SECONDS}s")
        time.sleep(0.05)
    _sh("ip", "link", "set", "lo", "up")
    _sh("ip", "addr", "add", boot.address, "dev", INTERFACE)
    _sh("ip", "link", "set", INTERFACE, "up")
    if boot.gateway:
        _sh("ip", "route", "add", "default", "via", boot.gateway, "dev", INTERFACE)
    Path("/etc/resolv.conf").unlink(missing_ok=True)
    Path("/etc/resolv.conf").write_text("".join(f"nameserver {server}\n" for server in boot.nameservers))


def _start_units(boot: Boot) -> list[subprocess.Popen[bytes]]:
    """sshd, then every enabled unit and the guest agent (udev starts it when its port exists),
    through the systemctl stand-in, in the background as systemd would."""
    Path("/run/sshd").mkdir(mode=0o755)
    # DEBUG1 logs each connection's key exchange, whose host key algorithm tells a dial that pins
    # the host key (the provider then asks for its type alone) from one that checks none.
    with Path(LOG_DIR, "sshd.log").open("ab") as sshd_log:
        started = [
            subprocess.Popen(
                ["/usr/sbin/sshd", "-D", "-e", "-o", "LogLevel=DEBUG1"], stderr=sshd_log, stdin=subprocess.DEVNULL
            )
        ]
    units = sorted(link.name for link in Path("/etc/systemd/system/multi-user.target.wants").glob("*.service"))
    if boot.agent and Path("/usr/lib/systemd/system/qemu-guest-agent.service").exists():
        units.append("qemu-guest-agent.service")
    for unit in units:
        started.append(subprocess.Popen(["systemctl", "start", unit], stdin=subprocess.DEVNULL))
    return started


def _finish_cloud_init() -> None:
    result = Path("/run/cloud-init/result.json")
    result.parent.mkdir(parents=True, exist_ok=True)
    result.write_text(
        json.dumps(
            {
                "v1": {
                    "datasource": "DataSourceNoCloud [seed=/dev/sr0]",
                    "errors": [],
                    "recoverable_errors": {"DEPRECATED": [DEPRECATION]},
                }
            }
        )
    )
    print("cloud-init: final stage done (recoverable errors: 1 deprecation)", flush=True)


def _power_off(_signum: int, _frame: object) -> None:
    """A shutdown: every process of the guest gets SIGTERM, then SIGKILL after the bound."""
    print("guest: shutting down", flush=True)
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGTERM)
    deadline = time.monotonic() + SHUTDOWN_BOUND_SECONDS
    while time.monotonic() < deadline:
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGKILL)
    print("guest: off", flush=True)
    os._exit(0)


def _run(boot: Boot) -> None:
    signal.signal(signal.SIGTERM, _power_off)
    _lay_out_disk(boot)
    _sh("hostname", boot.hostname)
    _cloud_init(boot)
    _network(boot)
    _start_units(boot)
    print(f"guest {boot.vmid}: up at {boot.address}", flush=True)
    finished_at = time.monotonic() + CLOUD_INIT_FINAL_SECONDS
    finished = False
    # PID 1's work from here: reap every orphan (daemons the systemctl stand-in starts end up here).
    while True:
        if not finished and time.monotonic() >= finished_at:
            _finish_cloud_init()
            finished = True
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pid = 0
        if pid == 0:
            time.sleep(0.2)


if __name__ == "__main__":
    fields = json.loads(sys.argv[1])
    _run(Boot(**fields))
