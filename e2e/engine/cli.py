"""The real `pulumi` CLI in isolation, on a copy of the project, as a user's laptop runs it: its
own PULUMI_HOME holding the provider plugins, a local file backend, a passphrase secrets provider,
and nothing ever fetched (no update check, no automatic plugin download). `pulumi preview` and
`pulumi up` run `__main__.py` through the Python language host under Pulumi.yaml's runtime
options, with the project's virtualenv.

Everything comes from e2e/engine/build-engine.sh, whose `VARIABLE=directory` lines the caller exports:
the CLI with the language host beside it (LAB_MGMT_ENGINE_BIN) and the provider plugins, which
the CLI installs once beside its build, at the version the pinned SDK asks for, and each engine
finds in its own PULUMI_HOME (hard links).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
PROJECT, STACK = "lab-mgmt", "lab"
PROJECT_FILES = ("Pulumi.yaml", f"Pulumi.{STACK}.yaml", "__main__.py", "requirements.txt")
PASSPHRASE = "lab-in-a-box"
CLI_TIMEOUT_SECONDS = 900


@dataclass(frozen=True)
class Plugin:
    package: str
    """The Python SDK whose pulumi-plugin.json names the plugin and the version it asks for."""
    bin_variable: str

    @property
    def name(self) -> str:
        return str(self._wanted()["name"])

    @property
    def version(self) -> str:
        return str(self._wanted()["version"])

    @property
    def folder(self) -> str:
        """The plugin's folder in PULUMI_HOME/plugins."""
        return f"resource-{self.name}-v{self.version}"

    @property
    def binary(self) -> Path:
        name = f"pulumi-resource-{self.name}"
        return built_bin(self.bin_variable, name) / name

    def _wanted(self) -> dict[str, Any]:
        wanted: dict[str, Any] = json.loads(resources.files(self.package).joinpath("pulumi-plugin.json").read_text())
        return wanted


# What the engine warns when a plugin's binary reports another version than the SDK asked for: the
# box would then prove another provider than the one that ships.
_VERSION_MISMATCH = re.compile(r"resource plugin (\S+) is expected to have version >=([^\s;,]+), but has ([^\s;,]+)")


class PluginVersionMismatchError(RuntimeError):
    """A plugin the engine ran is not the version the program's packages pin."""


def refuse_plugin_mismatch(output: str) -> None:
    """Raises, naming each plugin and both versions, when `output` (a CLI command's) has the
    engine's warning of a plugin at another version than the program's packages ask for."""
    mismatches = [
        f"{name}: the program's packages ask for {wanted}, the box ran {has}"
        for name, wanted, has in _VERSION_MISMATCH.findall(output)
    ]
    if mismatches:
        raise PluginVersionMismatchError(
            "the box must run the plugin versions the program pins (e2e/engine/build-engine.sh and "
            "requirements.txt move together): " + "; ".join(sorted(set(mismatches)))
        )


PLUGINS = (
    Plugin("pulumi_proxmoxve", "LAB_MGMT_PROXMOXVE_PLUGIN_BIN"),
    Plugin("pulumi_command", "LAB_MGMT_COMMAND_PLUGIN_BIN"),
    Plugin("pulumi_kubernetes", "LAB_MGMT_KUBERNETES_PLUGIN_BIN"),
)


def built_bin(variable: str, binary: str) -> Path:
    """The directory e2e/engine/build-engine.sh built `binary` into, which its `variable=...` line names
    (`export $(e2e/engine/build-engine.sh control-plane plugins)` sets them all)."""
    value = os.environ.get(variable)
    if not value or not (Path(value) / binary).is_file():
        raise RuntimeError(
            f"{variable} names no directory with {binary}: export the lines of e2e/engine/build-engine.sh"
        )
    return Path(value)


@dataclass(frozen=True)
class Engine:
    bin_dir: Path
    root: Path
    """Holds the project copy, PULUMI_HOME and the state; also the user's HOME."""
    legacy_layout: bool = False
    """State laid out as file backends were before project-scoped stacks."""
    extra_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def project(self) -> Path:
        return self.root / "project"

    @property
    def pulumi_home(self) -> Path:
        """Where a user's CLI keeps plugins: `.pulumi` in their home directory, which is `root`."""
        return self.root / ".pulumi"

    @property
    def temp_dir(self) -> Path:
        """The plugins' TMPDIR: the kubernetes plugin leaves its provider's kubeconfig there at every
        Configure (docs/operations.md, "Outputs"), so each engine's copies go with its root."""
        return self.root / "tmp"

    def make_dirs(self) -> None:
        self.project.mkdir(parents=True)
        self.temp_dir.mkdir()

    def newcomer_env(self) -> dict[str, str]:
        """What a new laptop has: a HOME and the CLI on PATH; nothing of the tests'.
        The CLI finds the home directory in the password database, not in HOME: run it where
        that says `root` too (e2e.box.scenarios.newcomer_first_run)."""
        return {"PATH": self.env()["PATH"], "HOME": str(self.root)}

    def env(self) -> dict[str, str]:
        # The CLI refuses old-layout state unless told to go on: it asks for `pulumi state upgrade`.
        legacy = (
            {"PULUMI_DIY_BACKEND_LEGACY_LAYOUT": "true", "PULUMI_DIY_BACKEND_IGNORE_DEPRECATION_ERROR": "true"}
            if self.legacy_layout
            else {}
        )
        path = [self.bin_dir, Path("/usr/bin"), Path("/bin")]
        return (
            legacy
            | {
                "PATH": os.pathsep.join(map(str, path)),
                "HOME": str(self.root),
                "PULUMI_HOME": str(self.pulumi_home),
                "TMPDIR": str(self.temp_dir),
                # As the README logs in: no sidecar file whose rewrite a read can catch half-written
                # (docs/troubleshooting.md, `failed to load checkpoint: EOF`).
                "PULUMI_BACKEND_URL": f"file://{self.root / 'state'}?metadata=skip",
                "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
                "PULUMI_SKIP_UPDATE_CHECK": "true",
                "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
                "PULUMI_SKIP_CONFIRMATIONS": "true",
                "NO_COLOR": "1",
                # Makes `--event-log` available, the engine's events that the Automation API reads.
                "PULUMI_DEBUG_COMMANDS": "true",
            }
            | dict(self.extra_env)
        )

    def pulumi(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """One CLI command in the project copy, as a user would type it; one that ran a plugin at
        another version than the pinned SDK asks for raises (refuse_plugin_mismatch)."""
        done = subprocess.run(
            [str(self.bin_dir / "pulumi"), "--non-interactive", *args],
            cwd=self.project,
            env=self.env(),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_SECONDS,
            check=False,
        )
        refuse_plugin_mismatch(done.stdout + done.stderr)
        return done

    def run(self, action: str, *args: str, targets: Sequence[str] = ()) -> EngineRun:
        """`pulumi preview` or `pulumi up` of the stack, with the engine's events kept."""
        log = self.root / f"events-{len(list(self.root.glob('events-*.jsonl')))}.jsonl"
        extra = ("--skip-preview",) if action == "up" else ()
        targeted = [f"--target={urn}" for urn in targets]
        done = self.pulumi(action, "--stack", "lab", f"--event-log={log}", *extra, *targeted, *args)
        return EngineRun(done.returncode, done.stdout + done.stderr, read_events(log))

    def outputs(self) -> dict[str, Any]:
        done = self.pulumi("stack", "output", "--stack", "lab", "--json", "--show-secrets")
        done.check_returncode()
        outputs: dict[str, Any] = json.loads(done.stdout)
        return outputs

    def secret_outputs(self) -> list[str]:
        """The stack outputs the CLI keeps secret: it shows them as `[secret]` unless asked."""
        done = self.pulumi("stack", "output", "--stack", "lab", "--json")
        done.check_returncode()
        return sorted(key for key, value in json.loads(done.stdout).items() if value == "[secret]")


@dataclass(frozen=True)
class EngineRun:
    rc: int
    output: str
    """What the CLI printed, as a user sees it."""
    events: list[dict[str, Any]]
    """The engine's event log (`--event-log`), one JSON object an event."""

    def steps(self) -> list[dict[str, str]]:
        return [
            {"op": event["resourcePreEvent"]["metadata"]["op"], "urn": event["resourcePreEvent"]["metadata"]["urn"]}
            for event in self.events
            if "resourcePreEvent" in event
        ]

    def diagnostics(self, severity: str) -> list[str]:
        return [
            event["diagnosticEvent"]["message"].strip()
            for event in self.events
            if event.get("diagnosticEvent", {}).get("severity") == severity
        ]

    def summary(self) -> dict[str, int]:
        for event in self.events:
            if "summaryEvent" in event:
                changes: dict[str, int] = event["summaryEvent"].get("resourceChanges") or {}
                return changes
        return {}


def read_events(log: Path) -> list[dict[str, Any]]:
    """The engine's events that `--event-log` wrote to `log`, one JSON object a line; none if the
    run stopped before it opened the file."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


def declare_workload_clusters(engine: Engine, entries: list[dict[str, Any]]) -> str:
    """The owner's edit of the stack file: `workloadClusters` set to `entries`, the rest of the
    file as it is, byte for byte. The text written."""
    stack_file = engine.project / f"Pulumi.{STACK}.yaml"
    text = stack_file.read_text()
    start = text.index(f"  {PROJECT}:workloadClusters:")
    # The next top-level key; the list's items, indented or not, are the block's own.
    following = re.search(r"^  [^\s-]", text[start + 1 :], re.MULTILINE)
    end = start + 1 + following.start() if following else len(text)
    written = textwrap.indent(yaml.safe_dump({f"{PROJECT}:workloadClusters": entries}, sort_keys=False), "  ")
    stack_file.write_text(text[:start] + written + text[end:])
    return written


def fresh_engine(
    root: Path,
    *,
    legacy_layout: bool = False,
    extra_env: Mapping[str, str] | None = None,
    main: Path = REPO / "__main__.py",
    workload_clusters: bool = False,
) -> Engine:
    """A copy of the project under `root` (with `main` as its `__main__.py`), the plugins installed
    in its PULUMI_HOME, and an empty backend, as on a user's laptop. Pulumi.lab.yaml's workload
    cluster (lab1) is left out unless `workload_clusters`: a box stands in for it only where it
    runs lab1's controllers and stand-ins (e2e/box/workload/workload_box.py)."""
    engine = Engine(built_bin("LAB_MGMT_ENGINE_BIN", "pulumi"), root, legacy_layout, extra_env or {})
    engine.make_dirs()
    for name in PROJECT_FILES:
        shutil.copy2(REPO / name, engine.project / name)
    if not workload_clusters:
        declare_workload_clusters(engine, [])
    shutil.copy2(main, engine.project / "__main__.py")
    shutil.copytree(REPO / "components", engine.project / "components", ignore=shutil.ignore_patterns("__pycache__"))
    # Pulumi.yaml's runtime options name `.venv` beside the program: the one the tests run in.
    (engine.project / ".venv").symlink_to(Path(sys.prefix))
    (root / "state").mkdir()
    for plugin in PLUGINS:
        shutil.copytree(
            installed_plugin(engine, plugin),
            engine.pulumi_home / "plugins" / plugin.folder,
            copy_function=_link_or_copy,
        )
    return engine


def installed_plugin(engine: Engine, plugin: Plugin) -> Path:
    """`plugin` as `pulumi plugin install resource NAME VERSION --file BINARY` lays it out in a
    PULUMI_HOME, done once per built binary beside the CLI's build and hard-linked into each
    engine's own PULUMI_HOME: installing the three binaries (280 MB) into each of the suite's 30-odd
    engines cost about 100 s of the suite's CPU."""
    installed = engine.bin_dir.parent / "installed-plugins" / plugin.folder
    binary = installed / plugin.binary.name
    if binary.is_file() and binary.stat().st_size == plugin.binary.stat().st_size:
        return installed
    installer = Engine(engine.bin_dir, Path(tempfile.mkdtemp(prefix="installing-", dir=engine.bin_dir.parent)))
    installer.make_dirs()
    done = installer.pulumi("plugin", "install", "resource", plugin.name, plugin.version, "--file", str(plugin.binary))
    if done.returncode != 0:
        raise RuntimeError(f"pulumi plugin install {plugin.name} {plugin.version} failed:\n{done.stderr}")
    shutil.rmtree(installed, ignore_errors=True)
    installed.parent.mkdir(exist_ok=True)
    # Engines of other workers may install the same plugin at once: one rename wins, and either
    # folder is a whole install.
    with contextlib.suppress(OSError):
        (installer.pulumi_home / "plugins" / plugin.folder).rename(installed)
    shutil.rmtree(installer.root)
    return installed


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem (a tmpfs /tmp)
        shutil.copy2(source, target)
