"""The Proxmox VE stand-in's node and cluster as CAPMOX asks after them (pve-manager
PVE/API2/Nodes.pm status, PVE/API2/Cluster.pm status and nextid), its empty container list, and
the guest agent's `get-osinfo`, `exec` and `exec-status` (qemu-server PVE/API2/Qemu/Agent.pm),
which the VM's guest answers.

The node is standalone, in no cluster, unless it is given peers: then it is the first member of a
cluster with them, which `GET /cluster/status` lists, each online or not. Its memory is the
stand-in's setting; what its running VMs were given, and a fixed amount for the host, is in use.
"""

from __future__ import annotations

import ipaddress
import itertools
import time
from collections.abc import Mapping
from typing import Any

from e2e.standins.proxmox.common import ApiError, Ask, param_error
from e2e.standins.proxmox.pve_vms import AGENT_NOT_RUNNING, Vms

NODE_MEMORY = 64 << 30
HOST_MEMORY = 2 << 30
"""What the node's own services use."""
CPU_INFO = {"model": "AMD Ryzen 7 5700G with Radeon Graphics", "cpus": 16, "cores": 8, "sockets": 1}
KERNEL = ("6.8.12-9-pve", "#1 SMP PREEMPT_DYNAMIC PMX 6.8.12-9 (2025-03-16T19:18Z)")
# The cluster's name, as `pvecm create` was given it, when the node has peers.
CLUSTER = "lab"
# pve-manager PVE/API2/Cluster.pm nextid: the datacenter's default range.
FIRST_VMID, VMID_BOUND = 100, 1000 * 1000


class Node:
    def __init__(self, vms: Vms, address: str, memory: int, peers: Mapping[str, bool]) -> None:
        self.vms = vms
        self.address = address
        self.memory = memory
        self.peers = peers
        """The cluster's other nodes, each online or not."""
        self.started = time.time()
        self._pids = itertools.count(1000)
        self._exec: dict[tuple[str, int], dict[str, Any]] = {}
        """How each command the agent ran ended, by VMID and PID: the agent's own memory."""

    def status(self, ask: Ask, node: str) -> dict[str, Any]:
        """Nodes.pm status, with this node's memory."""
        self.vms.state.check_node(node)
        running = [vm for vm in self.vms.vms.values() if vm["status"] == "running"]
        used = min(self.memory, HOST_MEMORY + sum(int(vm["config"].get("memory", 512)) << 20 for vm in running))
        release, version = KERNEL
        return {
            **{"uptime": int(time.time() - self.started), "idle": 0, "cpu": 0.02, "wait": 0.0},
            **{"loadavg": ["0.12", "0.18", "0.20"], "kversion": f"Linux {release} {version}"},
            "current-kernel": {"sysname": "Linux", "release": release, "version": version, "machine": "x86_64"},
            "boot-info": {"mode": "efi", "secureboot": 0},
            "cpuinfo": {**CPU_INFO, "mhz": "3800.000", "user_hz": 100, "hvm": "1", "flags": "fpu vme de pse"},
            "memory": {"total": self.memory, "used": used, "free": self.memory - used},
            "ksm": {"shared": 0},
            "swap": {"total": 8 << 30, "used": 0, "free": 8 << 30},
            "pveversion": "pve-manager/8.4.1/2a5fa54a8503f96d",
            "rootfs": {"total": 100 << 30, "avail": 88 << 30, "used": 12 << 30, "free": 88 << 30},
        }

    def cluster_status(self, ask: Ask) -> list[dict[str, Any]]:
        """Cluster.pm get_status (pve-manager 8.4.1, :773-838): on a node in no cluster its own
        entry only; in a cluster the cluster's entry and each member's (the peers at the next
        addresses, no subscription `level`)."""
        node = self.vms.state.node
        if not self.peers:
            return [
                {"type": "node", "id": f"node/{node}", "name": node, "ip": self.address, "local": 1}
                | {"nodeid": 0, "online": 1, "level": ""}
            ]
        members = {node: True, **self.peers}
        quorate = int(2 * sum(members.values()) > len(members))
        cluster = {"type": "cluster", "id": "cluster", "name": CLUSTER, "nodes": len(members), "version": 1}
        return [cluster | {"quorate": quorate}] + [
            {"type": "node", "id": f"node/{name}", "name": name, "nodeid": nodeid, "local": int(name == node)}
            | {"online": int(online), "ip": str(ipaddress.ip_address(self.address) + nodeid - 1), "level": ""}
            for nodeid, (name, online) in enumerate(members.items(), start=1)
        ]

    def nextid(self, ask: Ask) -> str:
        """Cluster.pm nextid. A string, as Proxmox VE's JSON has it (Perl made the number a string
        when it used it as a hash key), which go-proxmox reads into a Go string."""
        if "vmid" in ask.params:
            vmid = str(ask.params["vmid"])
            if vmid in self.vms.vms:
                raise param_error("vmid", f"VM {vmid} already exists")
            return vmid
        free = next((vmid for vmid in range(FIRST_VMID, VMID_BOUND) if str(vmid) not in self.vms.vms), None)
        if free is None:
            raise ApiError(500, f"unable to get any free VMID in range [{FIRST_VMID}, {VMID_BOUND}]")
        return str(free)

    def containers(self, ask: Ask, node: str) -> list[dict[str, Any]]:
        """No containers on the lab's node."""
        self.vms.state.check_node(node)
        return []

    def agent_osinfo(self, ask: Ask, node: str, vmid: str) -> dict[str, Any]:
        info = self.vms.agent_available(node, vmid).agent_osinfo(int(vmid))
        if info is None:
            raise ApiError(500, AGENT_NOT_RUNNING)
        return {"result": info}

    def agent_exec(self, ask: Ask, node: str, vmid: str) -> dict[str, int]:
        """Agent.pm exec: the command runs at once; exec-status answers how it ended."""
        guest = self.vms.agent_available(node, vmid)
        command = ask.params.get("command")
        if not isinstance(command, list) or not command:
            raise param_error("command", "property is missing and it is not optional")
        ended = guest.agent_exec(int(vmid), command, str(ask.params.get("input-data", "")))
        if ended is None:
            raise ApiError(500, AGENT_NOT_RUNNING)
        pid = next(self._pids)
        self._exec[(vmid, pid)] = ended
        return {"pid": pid}

    def agent_exec_status(self, ask: Ask, node: str, vmid: str) -> dict[str, Any]:
        """Agent.pm exec-status; a PID the agent never gave is QGA's error, as
        PVE/QemuServer/Agent.pm check_agent_error words it."""
        self.vms.agent_available(node, vmid)
        pid = str(ask.params["pid"])
        if not pid.isdigit():
            raise param_error("pid", f"type check ('integer') failed - got '{pid}'")
        ended = self._exec.get((vmid, int(pid)))
        if ended is None:
            raise ApiError(500, "Agent error: Invalid parameter 'pid'")
        return {"exited": 1, **ended}
