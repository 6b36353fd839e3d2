"""Runs a scenario (a function of e2e.box.scenarios) in a network namespace of its own, with nothing
but a loopback interface (holding the lab addresses a scenario asks for), so that no packet can
leave the machine whatever an address in the stack config says.

    in_new_netns("readme_first_run", "/tmp/x", addresses=["192.168.0.8"]) -> the scenario's result

A scenario is a function of e2e.box.scenarios, or of another module of e2e.box named before it
(`management.lifecycle.whole_box_lifecycle`).

The scenario runs in a child process (`python -m e2e.engine.netns NAME ARGS_JSON`) started with
`unshare --net`, in a PID namespace of its own: whatever it started and left behind dies with it
(the CLI leaves its language host running when it refuses the stack's config, and a failed
scenario leaves its API servers), passed or failed or timed out. Its result comes back as JSON on
the last line of its stdout.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from e2e.engine.cli import REPO

RESULT_MARK = "lab-mgmt-scenario-result: "
ARTIFACTS = REPO / ".artifacts"

# Brings loopback up with the lab addresses on it too (this kernel has no dummy interfaces), and
# refuses to go on if the namespace holds any other interface; then runs the command.
SETUP = """set -eu
ip link set lo up
while [ "$1" != -- ]; do ip addr add "$1/32" dev lo; shift; done
shift
links="$(ip -o link show | awk -F': ' '{print $2}' | tr '\\n' ' ')"
if [ "$links" != "lo " ]; then
  echo "unexpected interfaces in the test's network namespace: $links" >&2
  exit 97
fi
"""
# A PID namespace of its own, with a /proc of that namespace (the scenarios read it by the PIDs they
# see). SETUP's shell is its first process and waits for the command rather than exec it: orphans
# are handed to the first process, and the shell reaps them, where a scenario would leave them as
# zombies that /proc still lists. unshare kills the shell, and so everything in the namespace, if
# the test's timeout kills unshare.
OWN_PROCESSES = ("--pid", "--fork", "--kill-child", "--mount", "--mount-proc")


def netns_command(command: Sequence[str], addresses: Sequence[str] = (), *, own_processes: bool = False) -> list[str]:
    """`command` as run in a new network namespace with loopback alone, holding `addresses`; with
    `own_processes`, in a PID namespace of its own too (OWN_PROCESSES)."""
    # A non-root user gets the namespace through a user namespace of its own, where it is root.
    as_user = [] if os.geteuid() == 0 else ["--map-root-user"]
    pids, run = (OWN_PROCESSES, '"$@"') if own_processes else ((), 'exec "$@"')
    setup = SETUP + run + "\n"
    return ["unshare", *as_user, "--net", *pids, "--", "sh", "-c", setup, "netns-setup", *addresses, "--", *command]


# The suite is bound by the CPU of two cores, and its time is that of its longest scenario if that
# one finishes last: the scenarios that say they are among the longest (`longest=True`) run at the
# workers' priority, every other one a little below it, so that they fill what the longest leave.
BESIDE_THE_LONGEST = 5


def in_new_netns(
    scenario: str, *args: Any, addresses: Sequence[str] = (), timeout: int = 600, longest: bool = False
) -> Any:
    """The scenario's result; `args` go to it as JSON."""
    command = netns_command(
        [sys.executable, "-m", "e2e.engine.netns", scenario, json.dumps(list(args))], addresses, own_processes=True
    )
    niceness = [] if longest else ["nice", "-n", str(BESIDE_THE_LONGEST)]
    # What the scenario's processes spent, all of them: the PID namespace's first process reaps
    # every one (OWN_PROCESSES), so each is counted in what the worker's child used.
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    done = subprocess.run([*niceness, *command], cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    spent = resource.getrusage(resource.RUSAGE_CHILDREN)
    _keep(
        scenario,
        args,
        done,
        seconds=round(time.monotonic() - began, 1),
        cpu_seconds=round(spent.ru_utime + spent.ru_stime - used.ru_utime - used.ru_stime, 1),
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if done.returncode != 0 or not lines:
        raise AssertionError(
            f"scenario {scenario} failed (exit {done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
    return json.loads(lines[-1].removeprefix(RESULT_MARK))


@contextmanager
def held_nowhere(address: str, network: str) -> Iterator[None]:
    """Inside a scenario's namespace: `address` (on loopback, as every lab address there) taken off
    for the block, on a lab network where nobody answers for it, as when a VIP is held by no host.
    One end of a veth pair holds `network` (an address with its prefix: the lab's gateway), so a
    connection to `address` is asked for on the wire and nobody answers, as on a real lab: a dial
    fails with `no route to host` once ARP has had no answer, or `i/o timeout` when its packets are
    dropped unresolved, and a connection already open stops getting answers; never at once with
    `network is unreachable`, which only a namespace without a route to it says."""
    link = "labnet"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    ip("link", "add", link, "type", "veth", "peer", "name", f"{link}-peer")
    try:
        ip("link", "set", link, "up")
        ip("link", "set", f"{link}-peer", "up")
        ip("addr", "add", network, "dev", link)
        ip("addr", "del", f"{address}/32", "dev", "lo")
        try:
            yield
        finally:
            ip("addr", "add", f"{address}/32", "dev", "lo")
    finally:
        ip("link", "del", link)


def _keep(scenario: str, args: tuple[Any, ...], done: subprocess.CompletedProcess[str], **cost: float) -> None:
    """Everything a scenario printed (CLI output, the result) stays in .artifacts/, passed or not,
    with its cost (wall and CPU seconds: docs/testing.md reads them to say where the time went)."""
    ARTIFACTS.mkdir(exist_ok=True)
    # Unique whatever runs beside it: scenarios run side by side, the same one in two workers too.
    handle, _ = tempfile.mkstemp(prefix=f"{time.strftime('%Y%m%d-%H%M%S')}-", suffix=f"-{scenario}.json", dir=ARTIFACTS)
    with os.fdopen(handle, "w") as kept:
        kept_run = {"args": list(args), "rc": done.returncode, **cost, "stdout": done.stdout, "stderr": done.stderr}
        json.dump(kept_run, kept)


def scenario(name: str) -> Callable[..., Any]:
    """The function a scenario name names: `MODULE.FUNCTION` in e2e.box.MODULE, or a bare
    `FUNCTION` in e2e.box.scenarios. Raises ImportError or AttributeError for a name that names none."""
    module, _, function = name.rpartition(".")
    found: Callable[..., Any] = getattr(importlib.import_module(f"e2e.box.{module or 'scenarios'}"), function)
    return found


def _main(argv: list[str]) -> None:
    name, args = argv[1], json.loads(argv[2])
    # Only the child process runs scenarios: their modules are imported here.
    result = scenario(name)(*args)
    print(RESULT_MARK + json.dumps(result), flush=True)


if __name__ == "__main__":
    _main(sys.argv)
