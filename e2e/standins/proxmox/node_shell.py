"""The Proxmox node's own commands, for a procedure that has the owner type them on the node
(docs/adoption.md: `vzdump 201 ...`, `qm config 201 > ...`, `qm set 201 --ostype l26`,
`qm status 201 --verbose | grep uptime`; docs/operations.md: `pvesm free local:import/...`): `qm`,
`vzdump` and `pvesm` executables that a real bash runs,
with its own pipes and redirections, answered by the Proxmox VE stand-in's node state, as the real
tools go through the same library as the API.

    with node_shell.serving(pve, directory) as node:
        subprocess.run(["bash", "-c", line], env={..., "PATH": f"{node.bin}:..."})

Each executable sends its argv over a Unix socket to this process. What the stand-in does not
know (another subcommand, an option it does not read) fails with exit status 2 and a message,
and is kept in `unknown`; `backups` lists what vzdump stored.
"""

from __future__ import annotations

import json
import os
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from e2e.standins.proxmox.common import ApiError
from e2e.standins.proxmox.pve_api_standin import PveApiStandIn
from e2e.standins.proxmox.pve_vms import Vms

COMMANDS = ("qm", "vzdump", "pvesm")
# What `qm status --verbose` prints, in its order (a subset of qm's keys, each one the stand-in keeps).
STATUS_KEYS = ("cpus", "maxdisk", "maxmem", "name", "pid", "qmpstatus", "status", "uptime", "vmid")

CLIENT = """#!{python}
import json, socket, sys
with socket.socket(socket.AF_UNIX) as s:
    s.connect({socket!r})
    s.sendall(json.dumps([{command!r}, *sys.argv[1:]]).encode() + b"\\n")
    answer = json.loads(s.makefile().readline())
sys.stdout.write(answer["stdout"])
sys.stderr.write(answer["stderr"])
sys.exit(answer["rc"])
"""


class RefusedError(Exception):
    """What the real tool would refuse, with its exit status."""

    def __init__(self, message: str, rc: int = 255) -> None:
        super().__init__(message)
        self.rc = rc


@dataclass
class NodeShell:
    pve: PveApiStandIn
    bin: Path
    unknown: list[str] = field(default_factory=list)
    backups: list[str] = field(default_factory=list)

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        """One command as the node runs it: (exit status, stdout, stderr)."""
        handlers: dict[tuple[str, str], Callable[[list[str]], str]] = {
            ("qm", "config"): self._qm_config,
            ("qm", "set"): self._qm_set,
            ("qm", "status"): self._qm_status,
            ("vzdump", ""): self._vzdump,
            ("pvesm", "free"): self._pvesm_free,
        }
        command, rest = argv[0], argv[1:]
        with_subcommand = command in ("qm", "pvesm")
        key = (command, rest[0] if rest and with_subcommand else "")
        handler = handlers.get(key)
        if handler is None:
            return self._unknown(argv)
        try:
            return 0, handler(rest[1:] if with_subcommand else rest), ""
        except KeyError:
            return self._unknown(argv)
        except RefusedError as refused:
            return refused.rc, "", f"{refused}\n"
        except ApiError as error:
            return 255, "", f"{error.message}\n"

    def _unknown(self, argv: list[str]) -> tuple[int, str, str]:
        self.unknown.append(" ".join(argv))
        return 2, "", f"the Proxmox node stand-in does not know `{' '.join(argv)}`\n"

    @property
    def _vms(self) -> Vms:
        assert self.pve.vms is not None, "the Proxmox VE stand-in is not serving"
        return self.pve.vms

    def _vmid(self, args: list[str]) -> str:
        if not args or not args[0].isdigit():
            raise KeyError("a VMID")
        vmid = args[0]
        if vmid not in self._vms.vms:
            node = self._vms.state.node
            raise RefusedError(f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist", 2)
        return vmid

    def _qm_config(self, args: list[str]) -> str:
        vmid = self._vmid(args)
        if args[1:]:
            raise KeyError(args[1])
        config = self._vms.vms[vmid]["config"]
        return "".join(f"{key}: {config[key]}\n" for key in sorted(config))

    def _qm_set(self, args: list[str]) -> str:
        vmid, options = self._vmid(args), args[1:]
        if len(options) % 2 or not all(name.startswith("--") for name in options[::2]):
            raise KeyError(" ".join(options))
        values = {name[2:]: value for name, value in zip(options[::2], options[1::2], strict=True)}
        self.pve.qm_set(int(vmid), values)
        return f"update VM {vmid}: " + " ".join(f"-{name} {value}" for name, value in values.items()) + "\n"

    def _qm_status(self, args: list[str]) -> str:
        vmid = self._vmid(args)
        if args[1:] == []:
            return f"status: {self._vms.vms[vmid]['status']}\n"
        if args[1:] != ["--verbose"]:
            raise KeyError(" ".join(args[1:]))
        status = self._vms.status_of(vmid)
        return "".join(f"{key}: {status[key]}\n" for key in STATUS_KEYS if key in status)

    def _pvesm_free(self, args: list[str]) -> str:
        """One `<storage>:<content>/<file>` volume deleted (the image the program downloaded, say)."""
        if len(args) != 1 or ":" not in args[0]:
            raise KeyError(" ".join(args))
        self.pve.pvesm_free(args[0])
        return ""

    def _vzdump(self, args: list[str]) -> str:
        """A snapshot-mode backup onto a storage that takes backups: a new volume, nothing else."""
        vmid = self._vmid(args)
        options = dict(zip(args[1::2], args[2::2], strict=True))
        if set(options) != {"--mode", "--storage"} or options["--mode"] != "snapshot":
            raise KeyError(" ".join(args[1:]))
        storage = options["--storage"]
        self._vms.storage.check(self._vms.state.node, storage, "backup")
        stamp = time.strftime("%Y_%m_%d-%H_%M_%S", time.gmtime())
        volid = f"{storage}:backup/vzdump-qemu-{vmid}-{stamp}.vma.zst"
        with self._vms.state.lock:
            self._vms.storage.volumes[volid] = {"content": "backup", "size": 1 << 20, "vmid": int(vmid)}
            self._vms.state.save()
        self.backups.append(volid)
        started = f"INFO: starting new backup job: vzdump {vmid} --mode snapshot --storage {storage}\n"
        return started + "INFO: Backup job finished successfully\n"


@contextmanager
def serving(pve: PveApiStandIn, directory: Path) -> Iterator[NodeShell]:
    """The node's commands in `directory/bin` for the block."""
    directory.mkdir(parents=True, exist_ok=True)
    address = str(directory / "node.sock")
    shell = NodeShell(pve, directory / "bin")
    shell.bin.mkdir(exist_ok=True)
    for command in COMMANDS:
        path = shell.bin / command
        path.write_text(CLIENT.format(python=sys.executable, socket=address, command=command))
        path.chmod(0o755)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            rc, stdout, stderr = shell.run(json.loads(self.rfile.readline()))
            self.wfile.write(json.dumps({"rc": rc, "stdout": stdout, "stderr": stderr}).encode() + b"\n")

    with socketserver.ThreadingUnixStreamServer(address, Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield shell
        finally:
            server.shutdown()
            os.unlink(address)
