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

The boot itself runs as the guest's PID 1 inside the new namespaces (boot.py).
"""

from __future__ import annotations

import base64
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

from e2e.engine.cli import REPO
from e2e.engine.preflight import MACHINE_PATHS

BOOT_BOUND_SECONDS = 30
SHUTDOWN_BOUND_SECONDS = 30
INTERFACE = "ens18"
# Where the guest agent's virtio port appears in the guest, and the guest's log directory, which the
# box keeps beside the disk so a test reads it after the VM is gone.
VIRTIO_DIR = "/run/box-virtio"
QGA_PORT = "org.qemu.guest_agent.0"
LOG_DIR = "/var/log/box"
CALL_LOG = f"{LOG_DIR}/calls.log"


def missing_from_machine() -> list[str]:
    """The Debian packages of what the guest's image takes from the machine (MACHINE_PATHS) that
    this machine lacks: without them the VM boots without sshd or without its user's sudo rule, and
    the program's first SSH dial retries for minutes against a guest whose console holds the reason.
    `make box` checks them before any build (e2e.engine.preflight); this is for the box started
    any other way."""
    return sorted({package for path, package in MACHINE_PATHS.items() if not Path(path).exists()})


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
        missing = missing_from_machine()
        if missing:
            raise RuntimeError(
                f"the box's VMs need {', '.join(missing)} on this machine: apt-get install {' '.join(missing)}"
            )
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
                *(sys.executable, "-m", "e2e.standins.guest.boot", json.dumps(asdict(boot))),
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
        killed with the guest's PID 1. The disk stays. It returns with the VM's tap gone, as QEMU's
        exit takes it: the kernel tears a dead namespace's veth pair down later, in a work queue,
        and a start at once (a reboot) found `tap<vmid>i0` still there on a loaded machine."""
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
        subprocess.run(["ip", "link", "del", _tap(vmid)], capture_output=True, check=False)

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
        interfaces: list[dict[str, Any]] | None = self._agent(vmid, "guest-network-get-interfaces")
        return interfaces

    def agent_osinfo(self, vmid: int) -> dict[str, Any] | None:
        """The guest agent's `guest-get-osinfo` answer, or None while no agent answers. The
        management VM's agent (qga_standin.py) knows no such command: its refusal is raised."""
        info: dict[str, Any] | None = self._agent(vmid, "guest-get-osinfo")
        return info

    def agent_exec(self, vmid: int, command: list[str], input_data: str) -> dict[str, Any] | None:
        """`command` run by the guest agent as Proxmox VE runs it (`guest-exec` with its output
        captured, then `guest-exec-status` until it has exited), its output decoded; None while
        no agent answers. The management VM's agent (qga_standin.py) knows neither command: its
        refusal is raised."""
        arguments = {"path": command[0], "arg": command[1:], "capture-output": True}
        arguments |= {"input-data": base64.b64encode(input_data.encode()).decode()} if input_data else {}
        started = self._agent(vmid, "guest-exec", arguments)
        deadline = time.monotonic() + BOOT_BOUND_SECONDS
        while started is not None:
            status = self._agent(vmid, "guest-exec-status", {"pid": started["pid"]})
            if status is None or status["exited"]:
                return status and {
                    key: base64.b64decode(value).decode() if key.endswith("-data") else value
                    for key, value in status.items()
                    if key != "exited"
                }
            if time.monotonic() > deadline:
                raise RuntimeError(f"guest agent of VM {vmid}: {command} still running after {BOOT_BOUND_SECONDS}s")
            time.sleep(0.1)
        return None

    def _agent(self, vmid: int, execute: str, arguments: Mapping[str, Any] | None = None) -> Any:
        """One command to the VM's guest agent over its virtio port, as QEMU passes it on: its
        `return`, or None while no agent answers; an error answer is raised."""
        if vmid not in self._running:
            return None
        port = self._instances[vmid] / "virtio" / QGA_PORT
        request = {"execute": execute} | ({"arguments": dict(arguments)} if arguments else {})
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(10)
                connection.connect(str(port))
                connection.sendall(json.dumps(request).encode() + b"\n")
                answer = json.loads(connection.makefile("rb").readline())
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        if "return" not in answer:
            raise RuntimeError(f"guest agent of VM {vmid}: {answer}")
        return answer["return"]

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
        tap = _tap(vmid)
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


def _tap(vmid: int) -> str:
    """The host's end of the VM's NIC, as Proxmox VE names it."""
    return f"tap{vmid}i0"
