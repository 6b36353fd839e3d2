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
from dataclasses import dataclass
from pathlib import Path

from pulumi import automation as auto

REPO = Path(__file__).resolve().parent.parent
PROJECT_FILES = ("Pulumi.yaml", "Pulumi.lab.yaml", "__main__.py", "requirements.txt")
PASSPHRASE = "lab-in-a-box"


def engine_bin() -> Path:
    value = os.environ.get("LAB_MGMT_ENGINE_BIN")
    if not value:
        raise RuntimeError("LAB_MGMT_ENGINE_BIN is not set: run e2e/build-engine.sh and export its last line")
    path = Path(value)
    if not (path / "pulumi").is_file():
        raise RuntimeError(f"LAB_MGMT_ENGINE_BIN={value} holds no pulumi binary")
    return path


@dataclass(frozen=True)
class Engine:
    bin_dir: Path
    root: Path
    """Holds the project copy, PULUMI_HOME and the state."""
    legacy_layout: bool = False
    """State laid out as file backends were before project-scoped stacks."""

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
        return legacy | {
            "PATH": f"{self.bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin",
            "HOME": str(self.root),
            "PULUMI_HOME": str(self.root / "pulumi-home"),
            "PULUMI_BACKEND_URL": f"file://{self.root / 'state'}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_SKIP_CONFIRMATIONS": "true",
            "NO_COLOR": "1",
        }

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

    def inline_stack(self, stack: str = "lab") -> auto.Stack:
        """The project's program under the real engine, through the Automation API's inline mode."""

        def program() -> None:
            runpy.run_path(str(self.project / "__main__.py"), run_name="__main__")

        options = auto.LocalWorkspaceOptions(
            work_dir=str(self.project),
            pulumi_home=str(self.root / "pulumi-home"),
            env_vars=self.env(),
            pulumi_command=auto.PulumiCommand(root=str(self.bin_dir.parent)),
        )
        return auto.select_stack(stack, project_name="lab-mgmt", program=program, opts=options)


def fresh_engine(root: Path, *, legacy_layout: bool = False) -> Engine:
    """A copy of the project under `root` and an empty backend, as on a user's laptop."""
    engine = Engine(engine_bin(), root, legacy_layout)
    engine.project.mkdir(parents=True)
    for name in PROJECT_FILES:
        shutil.copy2(REPO / name, engine.project / name)
    shutil.copytree(REPO / "components", engine.project / "components", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "state").mkdir()
    # The program imports `components` from its own directory, as the language host would run it.
    sys.path.insert(0, str(engine.project))
    return engine
