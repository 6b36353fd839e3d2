"""`make bench`'s engine floor: what any `pulumi up` with the program's three provider plugins
costs in the same box, to hold the program's no-op against.

The floor is a Pulumi project generated into the box's directory at bench time (never a second
program in the repository): one explicit provider of each package the program uses (proxmoxve,
command, kubernetes, at the versions the same SDKs ask for), configured as the program's are
(the box's Proxmox VE API with the program's token, the stack's admin kubeconfig), and nothing
else. It runs under the same CLI, PULUMI_HOME, backend (the box's file state) and passphrase as
the program. `interleaved` times its no-op `pulumi up` and the program's in turn.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.box import scenarios
from e2e.box.box import Box
from e2e.engine.cli import Engine

RUNS = 5
PROJECT = "lab-mgmt-floor"
PULUMI_YAML = f"""name: {PROJECT}
runtime:
  name: python
  options:
    toolchain: pip
    virtualenv: .venv
"""
PROGRAM = """import pulumi
import pulumi_command as command
import pulumi_kubernetes as kubernetes
import pulumi_proxmoxve as proxmoxve

config = pulumi.Config()
proxmoxve.Provider(
    "floor-proxmox", endpoint=config.require("endpoint"), api_token=config.require_secret("apiToken"), insecure=True
)
command.Provider("floor-command")
kubernetes.Provider("floor-kubernetes", kubeconfig=config.require_secret("kubeconfig"))
"""


def floor_engine(box: Box, kubeconfig: str) -> Engine:
    """The floor project beside the box's engine, on its PULUMI_HOME (the plugins) and backend,
    deployed once so that its next `up` has nothing to do."""
    program_env = box.engine.env()
    shared = {name: program_env[name] for name in ("PULUMI_HOME", "PULUMI_BACKEND_URL")}
    engine = Engine(box.engine.bin_dir, box.engine.root.parent / "floor", extra_env={**box.engine.extra_env, **shared})
    engine.project.mkdir(parents=True)
    (engine.project / "Pulumi.yaml").write_text(PULUMI_YAML)
    (engine.project / "__main__.py").write_text(PROGRAM)
    (engine.project / ".venv").symlink_to(Path(sys.prefix))
    endpoint = f"https://{scenarios.PROXMOX_ADDRESS}:{scenarios.PROXMOX_PORT}/"
    for args, stdin in (
        (("stack", "init", "lab"), None),
        (("config", "set", "endpoint", endpoint), None),
        (("config", "set", "--secret", "apiToken"), f"{scenarios.PROGRAM_TOKEN}={scenarios.PROGRAM_SECRET}"),
        (("config", "set", "--secret", "kubeconfig"), kubeconfig),
    ):
        engine.pulumi(*args, stdin=stdin).check_returncode()
    first = engine.run("up")
    if first.rc != 0:
        raise RuntimeError(f"the floor project's first pulumi up failed:\n{first.output[-4000:]}")
    return engine


def timed_up(engine: Engine) -> dict[str, Any]:
    started = time.monotonic()
    run = engine.run("up")
    return {"rc": run.rc, "seconds": round(time.monotonic() - started, 2), "summary": run.summary()}


def interleaved(floor: Engine, program_up: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """RUNS no-op `pulumi up`s of each, in turn (floor, program, floor, ...): whatever else the
    machine does weighs on both alike."""
    runs: dict[str, list[dict[str, Any]]] = {"floor": [], "program": []}
    for _ in range(RUNS):
        runs["floor"].append(timed_up(floor))
        runs["program"].append(program_up())
    return runs


def summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Median and min of each, and the program's over the floor's."""
    floor = [run["seconds"] for run in runs["floor"]]
    program = [run["seconds"] for run in runs["program"]]
    return {
        "floor_median": statistics.median(floor),
        "floor_min": min(floor),
        "program_median": statistics.median(program),
        "program_min": min(program),
        "ratio_median": round(statistics.median(program) / statistics.median(floor), 2),
        "ratio_min": round(min(program) / min(floor), 2),
    }
