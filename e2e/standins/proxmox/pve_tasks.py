"""The Proxmox VE stand-in's node state, kept in one JSON file so that a stand-in started again on
the same directory goes on where the last one stopped, and its tasks: each asynchronous call
answers a UPID that the client polls at `/nodes/{node}/tasks/{upid}/status`.

A UPID has the layout bpg/terraform-provider-proxmox parses (proxmox/nodes/tasks/tasks_types.go:
`UPID:node:pid:pstart:starttime:type:id:user:`, the three numbers in hex).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from e2e.standins.proxmox.common import ApiError, Ask, require

STATE_FILE = "pve-standin-state.json"
# A task still running when its stand-in stopped never finishes: Proxmox VE reports a task whose
# worker died with this exit status.
INTERRUPTED = "unexpected status"


class NodeState:
    """The JSON document (`vms`, `volumes`, `tasks`) behind one lock; every change is saved."""

    def __init__(self, directory: Path, node: str, peers: tuple[str, ...] = ()) -> None:
        self.node = node
        self.peers = peers
        """The other nodes of its cluster, which it names but does not serve."""
        self.directory = directory
        self.lock = threading.RLock()
        self._file = directory / STATE_FILE
        empty: dict[str, Any] = {"vms": {}, "volumes": {}, "tasks": {}, "task_counter": 0}
        self.data: dict[str, Any] = json.loads(self._file.read_text()) if self._file.exists() else empty
        for task in self.data["tasks"].values():
            if task["status"] == "running":
                task.update(status="stopped", exitstatus=INTERRUPTED)
        self.save()

    def save(self) -> None:
        with self.lock:
            partial = self._file.with_suffix(".partial")
            partial.write_text(json.dumps(self.data, indent=1, sort_keys=True))
            partial.replace(self._file)

    def start_task(self, kind: str, subject: str, user: str, log: list[str]) -> str:
        """A running task's UPID; `finish_task` ends it."""
        with self.lock:
            self.data["task_counter"] += 1
            pid = 0x1000 + self.data["task_counter"]
            started = int(time.time())
            upid = f"UPID:{self.node}:{pid:08X}:{pid * 7:08X}:{started:08X}:{kind}:{subject}:{user}:"
            self.data["tasks"][upid] = {
                **{"upid": upid, "node": self.node, "pid": pid, "pstart": pid * 7, "starttime": started},
                **{"type": kind, "id": subject, "user": user, "status": "running", "log": list(log)},
            }
            self.save()
            return upid

    def finish_task(self, upid: str, error: str | None = None) -> None:
        """Ends the task: exit status OK, or `error` (which is what Proxmox VE reports)."""
        with self.lock:
            task = self.data["tasks"][upid]
            task["log"].append(f"TASK ERROR: {error}" if error else "TASK OK")
            task.update(status="stopped", exitstatus=error or "OK")
            self.save()

    def done_task(self, kind: str, subject: str, user: str, log: list[str]) -> str:
        """The UPID of a task that has already ended well: its work was done before answering."""
        upid = self.start_task(kind, subject, user, log)
        self.finish_task(upid)
        return upid

    def _task(self, node: str, upid: str) -> dict[str, Any]:
        self.check_node(node)
        task: dict[str, Any] | None = self.data["tasks"].get(upid)
        if task is None:
            raise ApiError(500, f"no such task '{upid}'")
        return task

    def task_status(self, ask: Ask, node: str, upid: str) -> dict[str, Any]:
        task = self._task(node, upid)
        # pve-manager PVE/API2/Tasks.pm: another user's task needs Sys.Audit on the node.
        if task["user"] != ask.user:
            require(ask, f"/nodes/{node}", "Sys.Audit")
        return {key: value for key, value in task.items() if key != "log"}

    def task_log(self, ask: Ask, node: str, upid: str) -> list[dict[str, Any]]:
        return [{"n": n, "t": line} for n, line in enumerate(self._task(node, upid)["log"], start=1)]

    def stop_task(self, ask: Ask, node: str, upid: str) -> None:
        """What DELETE on a task does: a running one is ended (a finished one stays as it ended)."""
        if self._task(node, upid)["status"] == "running":
            self.finish_task(upid, "received interrupt")

    def check_node(self, node: str) -> None:
        """The node the stand-in is. Proxmox VE proxies a peer's call to the peer (`proxyto`),
        which the stand-in does not model: refused as unknown, never answered as its own."""
        if node in self.peers:
            raise ApiError(501, f"the stand-in serves node {self.node}, not its peer {node}")
        if node != self.node:
            raise ApiError(500, f"no such cluster node '{node}'")
