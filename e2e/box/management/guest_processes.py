"""The guest's processes as the box's fault scenarios (box_faults.py) see and act on them from
outside: sshd's listener and the guest's PID 1, a command run in the guest as its owner would,
and the sshd session that runs a host script, watched for and killed mid-script.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from e2e.box.box import VMID, Box

SSHD = ["/usr/sbin/sshd", "-D", "-e", "-o", "LogLevel=DEBUG1"]
"""The guest's sshd as e2e/standins/guest/guest.py starts it, to start it again."""
FAULT_BOUND_SECONDS = 120
# How often a fault's watcher reads every process of the machine for the host script it waits on,
# through a whole `pulumi up`: the scripts it waits on run for seconds, and boxes side by side
# share the cores with it.
WATCH_SECONDS = 0.25


def _descendants() -> Iterator[tuple[int, int, list[str]]]:
    """(pid, parent pid, argv) of every process this scenario started, the guests' included."""
    processes = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            except (FileNotFoundError, ProcessLookupError):
                continue
            parent = int(next(line for line in status.splitlines() if line.startswith("PPid:")).split()[1])
            processes[int(entry.name)] = (parent, argv)
    mine = {os.getpid()}
    # Parents come before children in no particular order: repeat until no new one joins.
    while True:
        joined = {pid for pid, (parent, _) in processes.items() if parent in mine} - mine
        if not joined:
            break
        mine |= joined
    for pid in sorted(mine - {os.getpid()}):
        yield pid, processes[pid][0], processes[pid][1]


def _listener(argv: list[str]) -> bool:
    """sshd's listener, whose title sshd sets to `sshd: /usr/sbin/sshd -D ... [listener] ...`."""
    return " ".join(SSHD) in " ".join(argv) and "[listener]" in " ".join(argv)


def _sshd() -> tuple[int, int]:
    """The guest's sshd listener and the guest's PID 1, whose namespaces it shares."""
    return next((pid, parent) for pid, parent, argv in _descendants() if _listener(argv))


def _in_guest(init: int, script: str) -> None:
    subprocess.run(["nsenter", f"--target={init}", "--mount", "--", "sh", "-euc", script], check=True)


def _as_in_guest(init: int, *argv: str) -> list[str]:
    """`argv` run as the guest's own processes are: in its mount, network, UTS and PID namespaces."""
    return ["nsenter", f"--target={init}", "--mount", "--net", "--uts", "--pid", "--", *argv]


def _restart_sshd(box: Box, init: int) -> None:
    """sshd started again in the guest, logging where e2e/standins/guest/guest.py has it log."""
    with (box.guests.logs(VMID) / "sshd.log").open("ab") as log:
        subprocess.Popen(
            _as_in_guest(init, *SSHD),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    _wait("sshd answering again", lambda: any(_listener(argv) for _, _, argv in _descendants()))


def _wait(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + FAULT_BOUND_SECONDS
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {FAULT_BOUND_SECONDS}s")
        time.sleep(0.05)


def _kill_session(session: int) -> None:
    """sshd dying under a session: its monitor and the unprivileged child that holds the connection
    after authentication, and what runs in the session."""
    tree = {session}
    for pid, parent, _ in _descendants():
        if parent in tree:
            tree.add(pid)
    # All stopped first, then all killed: killed one by one, a parent still running could see its
    # child die and run its EXIT trap (the installer logging "failed (exit 137)" on a loaded machine).
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)


@contextmanager
def _when_running(script: str, act: Callable[[int], None], *, once_done: bool = False) -> Iterator[list[int]]:
    """For the block: `act` on the sshd session that first runs host script `script` (its pid),
    while it runs, or `once_done`, as soon as it has ended; yields the sessions acted on."""
    acted: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            session = _session_running(script)
            if session is not None:
                while once_done and not stop.is_set() and _session_running(script) == session:
                    time.sleep(WATCH_SECONDS)
                act(session)
                acted.append(session)
                return
            time.sleep(WATCH_SECONDS)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield acted
    finally:
        stop.set()
        watcher.join()


def _session_running(script: str) -> int | None:
    """The sshd process serving the connection that runs host script `script`, while it runs."""
    processes = {pid: (parent, argv) for pid, parent, argv in _descendants()}
    listener = next((pid for pid, (_, argv) in processes.items() if _listener(argv)), None)
    for running_script, (_, argv) in processes.items():
        if argv[:2] == ["bash", "-c"] and argv[3:4] == [script]:
            session = running_script
            while session in processes and processes[session][0] != listener:
                session = processes[session][0]
            return session if session in processes else None
    return None


def _kill_at_k3s_restart(session: int) -> None:
    """The session killed, with all it runs, once `systemctl restart k3s` is called in it (and
    held there, so before it stops anything)."""
    deadline = time.monotonic() + FAULT_BOUND_SECONDS
    while not any(_restarting_k3s(argv) for argv in _session_tree(session).values()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no `systemctl restart k3s` in session {session} within {FAULT_BOUND_SECONDS}s")
        time.sleep(WATCH_SECONDS)
    _kill_session(session)


def _restarting_k3s(argv: list[str]) -> bool:
    """The guest's systemctl stand-in, run as `systemctl restart k3s`."""
    return "e2e.standins.guest.systemctl_standin" in argv and argv[-2:] == ["restart", "k3s"]


def _session_tree(session: int) -> dict[int, list[str]]:
    """The argv of `session` and of every process under it."""
    processes = {pid: (parent, argv) for pid, parent, argv in _descendants()}
    tree = {session} & set(processes)
    while True:
        joined = {pid for pid, (parent, _) in processes.items() if parent in tree} - tree
        if not joined:
            return {pid: processes[pid][1] for pid in tree}
        tree |= joined


def _guest_output(init: int, *argv: str) -> str:
    """What `argv` prints run in the guest as its owner would run it there."""
    done = subprocess.run(_as_in_guest(init, *argv), capture_output=True, text=True, timeout=60, check=True)
    return done.stdout
