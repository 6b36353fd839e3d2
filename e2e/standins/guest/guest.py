"""The management VM as a real host, for the lab in a box: a started VM is a guest with network,
mount, UTS and PID namespaces of its own, at the VM's address on a bridge of the box's network
namespace, running the real OpenSSH sshd and sudo. Its disk is the machine's own /etc, /usr, /var
and /root under overlays whose upper layers are the guest's, with an empty /home, /opt and
/usr/local, so what the host scripts write (/etc/rancher, /var/lib/rancher, /usr/local/bin, ...)
lands on the guest's disk and nowhere else. Only what is not the program's own work is a stand-in
(each in a module of its own beside this one, each logging its calls): cloud-init's status
(cloud_init_standin.py), systemctl (systemctl_standin.py), apt-get with the one package it knows
(apt_get_standin.py), the guest agent (qga_standin.py) and k3s (k3s_standin.py).

    add_bridge("vmbr0", "192.168.4.8/24")
    with Guests(root) as guests:
        guests.start(201, {"name": "lab-mgmt", "ciuser": "ubuntu", "sshkeys": "ssh-ed25519%20AAAA...",
                           "ipconfig0": "ip=192.168.4.21/24,gw=192.168.4.8", "net0": "virtio=...,bridge=vmbr0"})

Like Proxmox: a VM's disk outlives stop and start, and `destroy` throws it away, so a re-created VM
boots a fresh image with new SSH host keys. Like cloud-init: the instance id is derived from the
generated user-data and network config, as Proxmox derives it, and at a boot with a new one the
per-instance work runs again: the user and its keys, and new SSH host keys.

The boot itself (`python -m e2e.standins.guest.guest BOOT_JSON`) runs as the guest's PID 1 inside the new
namespaces: it lays out the disk, does cloud-init's per-instance work, configures the network,
starts sshd and the enabled units, and powers everything off on SIGTERM.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote

import yaml

from e2e.engine.cli import REPO

BOOT_BOUND_SECONDS = 30
SHUTDOWN_BOUND_SECONDS = 30
# cloud-init's final stage ends a little after sshd answers, as on a real first boot: long enough
# that `cloud-init status --wait` has to wait.
CLOUD_INIT_FINAL_SECONDS = 3
INTERFACE = "ens18"
# Where the guest agent's virtio port appears in the guest, and the guest's log directory, which the
# box keeps beside the disk so a test reads it after the VM is gone.
VIRTIO_DIR = "/run/box-virtio"
QGA_PORT = "org.qemu.guest_agent.0"
LOG_DIR = "/var/log/box"
CALL_LOG = f"{LOG_DIR}/calls.log"
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


def standin_wrapper(module: str) -> str:
    """A command in the guest that runs one of the box's stand-in modules with the tests'
    interpreter (the repository is visible in the guest, and so is the interpreter)."""
    return f"#!/bin/sh\nPYTHONPATH='{REPO}' exec '{sys.executable}' -m {module} \"$@\"\n"


def record_call(argv: Sequence[str], rc: int, note: str = "") -> None:
    """One line in the guest's call log for each stand-in command run."""
    line = json.dumps({"at": time.time(), "argv": list(argv), "rc": rc, "note": note})
    with open(CALL_LOG, "a") as log:
        log.write(line + "\n")


@dataclass(frozen=True)
class Boot:
    """What a guest boots with: the VM's config as Proxmox hands it to QEMU and cloud-init."""

    vmid: int
    hostname: str
    user: str
    keys: list[str]
    address: str
    """With its prefix, as ipconfig0 gives it."""
    gateway: str | None
    nameservers: list[str]
    mac: str
    bridge: str
    agent: bool
    instance_id: str
    disk: str
    logs: str
    virtio: str
    hosts: dict[str, str]
    trusted: list[str]
    python: str

    @property
    def ip(self) -> str:
        return self.address.split("/", 1)[0]


def _options(value: str) -> dict[str, str]:
    """`a=1,b=2` (Proxmox's property strings) as a dict; a bare first item (`virtio`) maps to ''."""
    return {key: val for key, _, val in (item.partition("=") for item in value.split(",") if item)}


def _nocloud(config: Mapping[str, str], vmid: int) -> tuple[str, str]:
    """(user-data, network-config) as Proxmox generates them for NoCloud, to the extent that they
    feed the instance id: the keys, user, name and network settings."""
    name = config.get("name", f"VM{vmid}")
    keys = [key for key in unquote(config.get("sshkeys", "")).splitlines() if key.strip()]
    user_data = "#cloud-config\n" + json.dumps(
        {
            "hostname": name,
            "manage_etc_hosts": True,
            "fqdn": name,
            "user": config.get("ciuser"),
            "ssh_authorized_keys": keys,
            "chpasswd": {"expire": False},
            "users": ["default"],
            "package_upgrade": config.get("ciupgrade", "1") == "1",
        },
        sort_keys=True,
    )
    network = json.dumps(
        {
            "net0": config.get("net0"),
            "ipconfig0": config.get("ipconfig0"),
            "nameserver": config.get("nameserver"),
            "searchdomain": config.get("searchdomain"),
        },
        sort_keys=True,
    )
    return user_data, network


def add_bridge(name: str, address: str) -> None:
    """A bridge of the box's network namespace with the box's address on it (`vmbr0`,
    `192.168.4.8/24`): the lab network that VMs' NICs join."""
    subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True)
    subprocess.run(["ip", "addr", "add", address, "dev", name], check=True)
    subprocess.run(["ip", "link", "set", name, "up"], check=True)


class Guests:
    """The box's VMs: start, stop and destroy by VMID, and the guest agent's answer."""

    def __init__(self, root: Path, *, hosts: Mapping[str, str] | None = None, trusted: Sequence[Path] = ()) -> None:
        """`hosts` (name -> address) and `trusted` (CA certificates) are in every new guest's image,
        for the stand-ins of the sites it downloads from."""
        self.root = root
        self.hosts = dict(hosts or {})
        self.trusted = [str(path) for path in trusted]
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self._instances: dict[int, Path] = {}
        """Each VM's current disk and logs."""
        self._latest: dict[int, Path] = {}
        """Each VM's last disk and logs, kept past `destroy`."""
        root.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> Guests:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        for vmid in list(self._running):
            self.stop(vmid)

    def logs(self, vmid: int) -> Path:
        """The log directory of the VM's current disk (or its last one, once destroyed): sshd.log,
        calls.log (every stand-in command), installer.log, console.log and each unit's log."""
        return self._latest[vmid] / "logs"

    def log_dirs(self, vmid: int) -> list[Path]:
        """The log directories of every VM there has been with this VMID, oldest first (a
        re-created VM's follow its predecessor's); the next VM's disk is instance len(...)."""
        return [self._instance_dir(vmid, serial) / "logs" for serial in range(len(list(self.root.glob(f"vm{vmid}-*"))))]

    def disk_path(self, vmid: int, path: str, instance: int = 0) -> Path:
        """Where the box sees what the guest wrote at `path` (absolute, in the guest) on the VM's
        `instance`-th disk (0: the disk of the first VM with this VMID): its overlay's upper
        layer. It exists once the guest has written there."""
        return self._instance_dir(vmid, instance) / "disk" / "upper" / path.lstrip("/")

    def running(self, vmid: int) -> bool:
        return vmid in self._running

    def start(self, vmid: int, config: Mapping[str, str]) -> None:
        """Powers the VM on and returns once its network is wired, as QEMU starting does; sshd and
        cloud-init come up in the guest after that."""
        if vmid in self._running:
            raise RuntimeError(f"VM {vmid} already running")
        if vmid not in self._instances:
            self._instances[vmid] = self._latest[vmid] = self._new_instance(vmid)
        instance = self._instances[vmid]
        boot = self._boot(vmid, config, instance)
        known = subprocess.run(["ip", "link", "show", "dev", boot.bridge], capture_output=True, check=False)
        if known.returncode != 0:
            raise RuntimeError(f"VM {vmid}: bridge '{boot.bridge}' does not exist")
        console = (instance / "logs" / "console.log").open("ab")
        process = subprocess.Popen(
            [
                *("unshare", "--net", "--mount", "--uts", "--pid", "--fork", "--mount-proc", "--"),
                *(sys.executable, "-m", "e2e.standins.guest.guest", json.dumps(asdict(boot))),
            ],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
        )
        console.close()
        self._running[vmid] = process
        self._wire(vmid, process, boot)

    def stop(self, vmid: int) -> None:
        """A shutdown: the guest's processes get SIGTERM, and what is left after the bound is
        killed with the guest's PID 1. The disk stays."""
        process = self._running.pop(vmid, None)
        if process is None:
            return
        init = self._init_pid(process)
        if init is not None:
            os.kill(init, signal.SIGTERM)
        try:
            process.wait(timeout=SHUTDOWN_BOUND_SECONDS + 10)
        except subprocess.TimeoutExpired:
            if init is not None:
                os.kill(init, signal.SIGKILL)
            process.wait(timeout=10)

    def destroy(self, vmid: int) -> None:
        """Stops the VM and throws its disk away; its logs stay for the test."""
        self.stop(vmid)
        # The next start of this VMID is a new VM with a new disk.
        instance = self._instances.pop(vmid, None)
        if instance is not None:
            shutil.rmtree(instance / "disk")

    def agent_interfaces(self, vmid: int) -> list[dict[str, Any]] | None:
        """The guest agent's `guest-network-get-interfaces` answer, or None while no agent answers
        (not installed, not running, VM off, or the VM has no agent port)."""
        if vmid not in self._running:
            return None
        port = self._instances[vmid] / "virtio" / QGA_PORT
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(10)
                connection.connect(str(port))
                connection.sendall(b'{"execute": "guest-network-get-interfaces"}\n')
                answer = json.loads(connection.makefile("rb").readline())
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        if "return" not in answer:
            raise RuntimeError(f"guest agent of VM {vmid}: {answer}")
        interfaces: list[dict[str, Any]] = answer["return"]
        return interfaces

    def _instance_dir(self, vmid: int, serial: int) -> Path:
        return self.root / f"vm{vmid}-{serial}"

    def _new_instance(self, vmid: int) -> Path:
        instance = self._instance_dir(vmid, len(list(self.root.glob(f"vm{vmid}-*"))))
        for directory in ("disk", "logs", "virtio"):
            (instance / directory).mkdir(parents=True)
        return instance

    def _boot(self, vmid: int, config: Mapping[str, str], instance: Path) -> Boot:
        ipconfig = _options(config.get("ipconfig0", ""))
        if "/" not in ipconfig.get("ip", ""):
            raise ValueError(f"VM {vmid}: ipconfig0 {config.get('ipconfig0')!r}: the box knows only ip=ADDRESS/PREFIX")
        ipaddress.ip_interface(ipconfig["ip"])
        net0 = _options(config.get("net0", ""))
        model = next(iter(net0), "")
        if model != "virtio" or not net0[model] or "bridge" not in net0:
            raise ValueError(f"VM {vmid}: net0 {config.get('net0')!r}: the box knows only virtio=MAC,bridge=...")
        user_data, network = _nocloud(config, vmid)
        agent = config.get("agent", "0")
        return Boot(
            vmid=vmid,
            hostname=config.get("name", f"VM{vmid}"),
            user=config.get("ciuser", "ubuntu"),
            keys=[key for key in unquote(config.get("sshkeys", "")).splitlines() if key.strip()],
            address=ipconfig["ip"],
            gateway=ipconfig.get("gw"),
            nameservers=config.get("nameserver", "").split(),
            mac=net0[model].lower(),
            bridge=net0["bridge"],
            agent=agent == "1" or _options(agent).get("enabled") == "1",
            instance_id=hashlib.sha1((user_data + network).encode()).hexdigest(),  # noqa: S324 - as Proxmox does
            disk=str(instance / "disk"),
            logs=str(instance / "logs"),
            virtio=str(instance / "virtio"),
            hosts=self.hosts,
            trusted=self.trusted,
            python=sys.executable,
        )

    def _wire(self, vmid: int, process: subprocess.Popen[bytes], boot: Boot) -> None:
        """The VM's NIC: a veth pair, one end in the guest (named and addressed as Proxmox's virtio
        NIC appears in Ubuntu), the other on the bridge."""
        own = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + BOOT_BOUND_SECONDS
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"VM {vmid} did not start; see {self.logs(vmid) / 'console.log'}")
            try:
                if os.readlink(f"/proc/{process.pid}/ns/net") != own:
                    break
            except FileNotFoundError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"VM {vmid}: no network namespace within {BOOT_BOUND_SECONDS}s")
            time.sleep(0.05)
        tap = f"tap{vmid}i0"
        subprocess.run(
            [
                *("ip", "link", "add", tap, "type", "veth", "peer", "name", INTERFACE),
                *("address", boot.mac, "netns", str(process.pid)),
            ],
            check=True,
        )
        subprocess.run(["ip", "link", "set", tap, "master", boot.bridge, "up"], check=True)

    @staticmethod
    def _init_pid(process: subprocess.Popen[bytes]) -> int | None:
        """The guest's PID 1, as the host numbers it: unshare's one child."""
        try:
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        except FileNotFoundError:
            return None
        return int(children[0]) if children else None


# What follows runs inside the guest, as its PID 1.


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True)


def _lay_out_disk(boot: Boot) -> None:
    """Mounts the guest's trees; on the disk's first boot, first makes the image: the stand-ins,
    the sites the box stands in for and their CA, and sshd as Ubuntu's cloud image configures it."""
    # The stand-ins run from this repository, wherever the clone is (CI's may be under /tmp, which
    # the guest covers): keep a handle on it to bind it back at its own path once all is mounted.
    repository = os.open(REPO, os.O_PATH)
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
    if not (REPO / "e2e" / "standins" / "guest" / "guest.py").is_file():
        REPO.mkdir(parents=True, exist_ok=True)
        # --no-canonicalize: mount(8) would otherwise turn the handle back into the covered path.
        _sh("mount", "--no-canonicalize", "--bind", f"/proc/{os.getpid()}/fd/{repository}", str(REPO))
        _sh("mount", "-o", "remount,bind,ro", str(REPO))
    os.close(repository)


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
    """The NIC as netplan configures it from cloud-init's network config. No default route: the
    box has no way out, and a guest that tried one would only send its packets to the bridge."""
    deadline = time.monotonic() + BOOT_BOUND_SECONDS
    while subprocess.run(["ip", "link", "show", "dev", INTERFACE], capture_output=True, check=False).returncode:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {INTERFACE} within {BOOT_BOUND_SECONDS}s")
        time.sleep(0.05)
    _sh("ip", "link", "set", "lo", "up")
    _sh("ip", "addr", "add", boot.address, "dev", INTERFACE)
    _sh("ip", "link", "set", INTERFACE, "up")
    Path("/etc/resolv.conf").unlink(missing_ok=True)
    Path("/etc/resolv.conf").write_text("".join(f"nameserver {server}\n" for server in boot.nameservers))


def _start_units(boot: Boot) -> list[subprocess.Popen[bytes]]:
    """sshd, then every enabled unit and the guest agent (udev starts it when its port exists),
    through the systemctl stand-in, in the background as systemd would."""
    Path("/run/sshd").mkdir(mode=0o755)
    with Path(LOG_DIR, "sshd.log").open("ab") as sshd_log:
        started = [
            subprocess.Popen(
                ["/usr/sbin/sshd", "-D", "-e", "-o", "LogLevel=VERBOSE"], stderr=sshd_log, stdin=subprocess.DEVNULL
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
