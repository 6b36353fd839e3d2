"""What a `pulumi preview` or `up` in the whole box (box.py) made the box do, read from the stand-ins'
records, the guest's logs and the API server's audit log; and what each stand-in could not answer.
Every scenario of the whole box reports its runs through `observe` (or, for a line of a page
typed as it stands, `observe_typed`) and ends with `standin_problems`, which a test asserts empty.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from e2e.box.box import Box
from e2e.engine.cli import EngineRun, read_events
from e2e.standins.proxmox import pve_api_standin

K8S_WRITES = {"create", "update", "patch", "delete", "deletecollection"}
# Who writes to the guest's API server for the program: k3s's admin certificate, which the
# kubeconfig the program reads carries, as do the host scripts' `k3s kubectl`. The box's own
# upkeep (the k3s stand-in's heartbeat, the controllers, the operator stand-in) is someone else.
PROGRAM_USER = "system:admin"


@dataclass(frozen=True)
class Marks:
    """Where each record stood before a run."""

    pve: int
    ssh: int
    installs: int
    audit: int
    charts: int
    calls: int

    @classmethod
    def of(cls, box: Box) -> Marks:
        return cls(
            len(box.pve.calls),
            len(box.guest_log("sshd.log")),
            len(box.guest_log("installer.log")),
            box.cluster.audit_mark(),
            len(box.charts.requests),
            len(box.guest_log("calls.log")),
        )


# What sshd (at LogLevel DEBUG1) logs of each connection's key exchange: the host key algorithm
# the client asked for. The provider asks for the pinned key's type alone when it has a host key
# to check (ssh-ed25519), and, with none, Go's default list, in which ECDSA comes first.
HOST_KEY_ALGORITHM = "kex: host key algorithm: "


def k3s_restarts(calls: list[str]) -> list[str]:
    """The guest's `systemctl restart k3s` calls (calls.log), whoever made them: a host script or
    the k3s installer; a call killed before it ended is none."""
    restart = json.dumps({"argv": ["systemctl", "restart", "k3s"]})[1:-1]
    return [line for line in calls if restart in line]


def _host_key_algorithms(sshd_log: list[str]) -> list[str]:
    """The host key algorithm of each key exchange in `sshd_log`, in order."""
    return [line.split(HOST_KEY_ALGORITHM, 1)[1].split()[0] for line in sshd_log if HOST_KEY_ALGORITHM in line]


def observe(box: Box, action: str, *args: str) -> dict[str, Any]:
    """One `pulumi preview` or `up` with its wall time, and what it made the box do: SSH sessions
    on the guest (and the host key algorithm each connection asked for), k3s restarts and k3s
    installer runs there, Proxmox VE writes, the program's Kubernetes writes, and requests to the
    chart repositories."""
    return _observed(box, lambda: box.engine.run(action, *args))


def observe_typed(box: Box, line: str, laptop: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """`observe` for a `pulumi preview` or `pulumi up` line of a page, typed through `laptop` as it
    stands but for one flag after the action, `--event-log`, which only records the engine's events
    in a file. A `pulumi up` that previews first logs the preview's events too: only the update's
    are kept."""
    program, action, rest = [*line.split(" ", 2), ""][:3]
    if program != "pulumi" or action not in ("preview", "up"):
        raise ValueError(f"not a pulumi preview or up: {line}")
    log = box.engine.root / f"events-typed-{len(list(box.engine.root.glob('events-typed-*.jsonl')))}.jsonl"

    def typed() -> EngineRun:
        ran = laptop(f"pulumi {action} --event-log={log} {rest}".rstrip())
        events = read_events(log)
        summaries = [i for i, event in enumerate(events) if "summaryEvent" in event]
        if action == "up" and len(summaries) == 2:
            events = events[summaries[0] + 1 :]
        return EngineRun(ran["rc"], ran["stdout"] + ran["stderr"], events)

    return {"line": line, **_observed(box, typed)}


def _observed(box: Box, run_it: Callable[[], EngineRun]) -> dict[str, Any]:
    marks = Marks.of(box)
    started = time.monotonic()
    run = run_it()
    seconds = time.monotonic() - started
    ssh = box.guest_log("sshd.log")[marks.ssh :]
    calls = box.guest_log("calls.log")[marks.calls :]
    return {
        "rc": run.rc,
        "output": run.output,
        "seconds": round(seconds, 2),
        "steps": run.steps(),
        "summary": run.summary(),
        "warnings": run.diagnostics("warning"),
        "ssh_connections": [line for line in ssh if "Connection from" in line],
        "ssh_sessions": [line for line in ssh if "Accepted publickey" in line],
        "host_key_algorithms": _host_key_algorithms(ssh),
        "k3s_restarts": k3s_restarts(calls),
        "installs": box.guest_log("installer.log")[marks.installs :],
        "chart_requests": box.charts.requests[marks.charts :],
        "pve_writes": [
            [call.method, call.path, list(call.params)]
            for call in box.pve.calls[marks.pve :]
            if call.method in pve_api_standin.WRITES
        ],
        "k8s_writes": [
            [event["verb"], event.get("objectRef", {}).get("resource", ""), event.get("objectRef", {}).get("name", "")]
            for event in box.cluster.audit()[marks.audit :]
            if event["verb"] in K8S_WRITES
            and event.get("user", {}).get("username") == PROGRAM_USER
            # A preview's server-side dry runs change nothing.
            and "dryRun=All" not in event.get("requestURI", "")
        ],
    }


# What each stand-in could not answer or do, by the key a scenario reports it under; each must be
# empty.
STANDIN_RECORDS: dict[str, Callable[[Box], list[str]]] = {
    "pve_unknown": lambda box: box.pve.unknown,
    "pve_failed": lambda box: box.pve.failed,
    "chart_unknown": lambda box: box.charts.unknown,
    "release_unknown": lambda box: box.releases.unknown,
    "operator_errors": lambda box: box.operator.errors,
    "webhook_unknown": lambda box: box.webhook.unknown,
    "injector_errors": lambda box: box.injector.errors,
}


def standin_problems(box: Box) -> dict[str, Any]:
    return {key: record(box) for key, record in STANDIN_RECORDS.items()}
