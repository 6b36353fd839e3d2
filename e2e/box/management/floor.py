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

import dataclasses
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime
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
    engine.make_dirs()
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


def traced_up(engine: Engine, log: Path) -> dict[str, Any]:
    """One more no-op `pulumi up`, untimed, with the engine's gRPC log (PULUMI_DEBUG_GRPC: every
    call between the engine, the program and the plugins, timestamped) written to `log`."""
    traced = dataclasses.replace(engine, extra_env={**engine.extra_env, "PULUMI_DEBUG_GRPC": str(log)})
    run = timed_up(traced)
    found = phases(log)
    # Before its first gRPC call and after its last: the CLI itself (the state and secrets read
    # and written, plugins found).
    cli_alone = round(run["seconds"] - found.pop("logged"), 2)
    return {**run, "phases": {**found, "cli_alone": cli_alone}}


def _when(entry: dict[str, Any]) -> float:
    """An entry's timestamp in seconds (RFC 3339 with nanoseconds, which fromisoformat cuts to
    microseconds here)."""
    stamp = re.sub(r"(\.\d{6})\d*", r"\1", entry["timestamp"]).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


def phases(log: Path) -> dict[str, float]:
    """Where a traced run's time went, in seconds, from its gRPC log: the language host before
    the program runs; the program from its start to the engine's answer to its first
    registration (the stack's, which the Python SDK sends once the program's own code has run:
    imports, settings, the token checks, building the graph); then until the program's last
    registration is answered; the rest of the program's run (its shutdown); the time the log
    spans. And the provider calls (plugins' Configure, Check, Diff, Read ...), summed: they
    overlap the phases above."""
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    # The engine's side of the program's calls has no start time, only its answer's.
    answered = [entry for entry in entries if entry.get("progress") == "response_completed"]
    run = next(entry for entry in entries if entry["method"].endswith("LanguageRuntime/Run"))
    run_end = next(entry for entry in answered if entry["method"].endswith("LanguageRuntime/Run"))
    monitor = [entry for entry in answered if "/pulumirpc.ResourceMonitor/" in entry["method"]]
    first_registered = next(entry for entry in monitor if entry["method"].endswith("/RegisterResource"))
    provider = [entry for entry in answered if "/pulumirpc.ResourceProvider/" in entry["method"]]
    start, begun = _when(entries[0]), _when(run)
    return {
        "before_program": round(begun - start, 2),
        "program_to_first_registration": round(_when(first_registered) - begun, 2),
        "registrations": round(_when(monitor[-1]) - _when(first_registered), 2),
        "program_shutdown": round(_when(run_end) - _when(monitor[-1]), 2),
        "provider_calls": round(sum(entry.get("duration", 0) for entry in provider) / 1e9, 2),
        "logged": round(_when(entries[-1]) - start, 2),
    }
