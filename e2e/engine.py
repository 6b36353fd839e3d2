"""The real `pulumi` CLI in isolation, on a copy of the project: its own PULUMI_HOME, a local file
backend, a passphrase secrets provider, and nothing ever fetched (no update check, no automatic
plugin download). The CLI comes from e2e/build-engine.sh, whose bin directory the caller names in
LAB_MGMT_ENGINE_BIN.

The Python language host (`pulumi-language-python`) cannot be built here (the Go module proxy does
not serve its module), so the program runs through the Automation API's inline mode: the CLI
connects to a language runtime server that the Python SDK runs in this process (`--client`),
which then runs `__main__.py` as the language host would.
"""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pulumi import automation as auto

REPO = Path(__file__).resolve().parent.parent
PROJECT_FILES = ("Pulumi.yaml", "Pulumi.lab.yaml", "__main__.py", "requirements.txt")
PASSPHRASE = "lab-in-a-box"


def built_bin(variable: str, binary: str) -> Path:
    """The directory e2e/build-engine.sh built `binary` into, which its `variable=...` line names
    (`export $(e2e/build-engine.sh control-plane plugins)` sets them all)."""
    value = os.environ.get(variable)
    if not value or not (Path(value) / binary).is_file():
        raise RuntimeError(f"{variable} names no directory with {binary}: export the lines of e2e/build-engine.sh")
    return Path(value)


@dataclass(frozen=True)
class Engine:
    bin_dir: Path
    root: Path
    """Holds the project copy, PULUMI_HOME and the state."""
    legacy_layout: bool = False
    """State laid out as file backends were before project-scoped stacks."""
    plugin_dirs: tuple[Path, ...] = ()
    """Provider plugins on PATH, which the CLI runs in place of installed ones (and says so)."""
    extra_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def project(self) -> Path:
        return self.root / "project"

    def env(self) -> dict[str, str]:
        # The CLI refuses old-layout state unless told to go on: it asks for `pulumi state upgrade`.
        legacy = (
            {"PULUMI_DIY_BACKEND_LEGACY_LAYOUT": "true", "PULUMI_DIY_BACKEND_IGNORE_DEPRECATION_ERROR": "true"}
            if self.legacy_layout
            else {}
        )
        path = [self.bin_dir, *self.plugin_dirs, Path(sys.executable).parent, Path("/usr/bin"), Path("/bin")]
        return (
            legacy
            | dict(self.extra_env)
            | {
                "PATH": os.pathsep.join(map(str, path)),
                "HOME": str(self.root),
                "PULUMI_HOME": str(self.root / "pulumi-home"),
                "PULUMI_BACKEND_URL": f"file://{self.root / 'state'}",
                "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
                "PULUMI_SKIP_UPDATE_CHECK": "true",
                "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
                "PULUMI_SKIP_CONFIRMATIONS": "true",
                "NO_COLOR": "1",
            }
        )

    def pulumi(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """One CLI command in the project copy, as a user would type it."""
        return subprocess.run(
            [str(self.bin_dir / "pulumi"), *args, "--non-interactive"],
            cwd=self.project,
            env=self.env(),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def inline_stack(self, stack: str = "lab", program: Callable[[], None] | None = None) -> auto.Stack:
        """The project's program (or `program`) under the real engine, through the Automation
        API's inline mode."""

        def project_program() -> None:
            runpy.run_path(str(self.project / "__main__.py"), run_name="__main__")

        def in_the_cli_environment() -> None:
            # The program runs in this process, where the language host would run it with the
            # CLI's environment: what it reads of the machine (the Helm client's files under
            # $HOME) must be the engine's, as the plugins see it.
            os.environ["HOME"] = str(self.root)
            (program or project_program)()

        options = auto.LocalWorkspaceOptions(
            work_dir=str(self.project),
            pulumi_home=str(self.root / "pulumi-home"),
            env_vars=self.env(),
            pulumi_command=auto.PulumiCommand(root=str(self.bin_dir.parent)),
        )
        return auto.select_stack(stack, project_name="lab-mgmt", program=in_the_cli_environment, opts=options)


def fresh_engine(
    root: Path,
    *,
    legacy_layout: bool = False,
    plugin_dirs: tuple[Path, ...] = (),
    extra_env: Mapping[str, str] | None = None,
) -> Engine:
    """A copy of the project under `root` and an empty backend, as on a user's laptop."""
    engine = Engine(built_bin("LAB_MGMT_ENGINE_BIN", "pulumi"), root, legacy_layout, plugin_dirs, extra_env or {})
    engine.project.mkdir(parents=True)
    for name in PROJECT_FILES:
        shutil.copy2(REPO / name, engine.project / name)
    shutil.copytree(REPO / "components", engine.project / "components", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "state").mkdir()
    # The program imports `components` from its own directory, as the language host would run it.
    sys.path.insert(0, str(engine.project))
    return engine
