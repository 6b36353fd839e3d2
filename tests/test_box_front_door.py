"""The front door as a newcomer walks it (README, "Watch it"): in a clone of the checked-out commit,
with no virtualenv, `make box` makes `.venv`, finds the engine, runs the whole program's `pulumi up`
in a box of its own and says what to type next; `make box-shell`, typed into, answers
`kubectl get nodes` and `pulumi preview --expect-no-changes` as typed; `make box-down` stops the box
and removes it. The box makes its own network namespace (e2e/box/make_box.py). Selected with
`pytest -m engine`.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from e2e.engine.cli import REPO
from e2e.engine.vendor import vendor_dir

pytestmark = pytest.mark.engine

# What a newcomer types into `make box-shell`, each answer marked so that the test finds it.
SHELL_INPUT = """kubectl get nodes
echo "kubectl rc=$?"
pulumi preview --expect-no-changes
echo "preview rc=$?"
"""


def _newcomer_env(box_dir: Path) -> dict[str, str]:
    """This machine's environment without what the tests set: the clone's make finds its own
    virtualenv and engine; the archives are where the tests found them, which a clone's default
    (../shared beside it) is not."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if not (name.startswith(("LAB_MGMT_", "PYTEST_")) or name in {"VIRTUAL_ENV", "PYTHONPATH"})
    }
    return kept | {"LAB_MGMT_VENDOR": str(vendor_dir()), "BOX_DIR": str(box_dir)}


def _make(clone: Path, env: dict[str, str], target: str, stdin: str = "") -> dict[str, Any]:
    done = subprocess.run(
        ["make", target], cwd=clone, env=env, input=stdin, capture_output=True, text=True, timeout=900, check=False
    )
    return {"rc": done.returncode, "output": done.stdout + done.stderr}


@pytest.fixture(scope="module")
def front_door(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("front-door")
    clone, box_dir = root / "lab-mgmt", root / "box"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    env = _newcomer_env(box_dir)
    had_venv = (clone / ".venv").exists()
    try:
        box = _make(clone, env, "box")
        shell = _make(clone, env, "box-shell", SHELL_INPUT)
        down = _make(clone, env, "box-down")
        box_left = box_dir.exists()
    finally:
        if box_dir.exists():
            _make(clone, env, "box-down")
    return {
        "had_venv": had_venv,
        "venv": (clone / ".venv" / "bin" / "python").exists(),
        "box": box,
        "shell": shell,
        "down": down,
        "box_left": box_left,
    }


def test_make_box_on_a_fresh_clone_makes_its_virtualenv_and_the_whole_up(front_door: Any) -> None:
    box = front_door["box"]
    assert box["rc"] == 0, box["output"][-4000:]
    assert (front_door["had_venv"], front_door["venv"]) == (False, True)
    assert re.search(r"pulumi up of the whole program: rc 0 in [\d.]+s, \{'create': \d+\}", box["output"])
    assert "make box-shell opens a shell there" in box["output"]


def test_the_box_shell_answers_kubectl_and_a_zero_change_preview_as_typed(front_door: Any) -> None:
    shell = front_door["shell"]
    assert shell["rc"] == 0, shell["output"][-4000:]
    assert re.search(r"^lab-mgmt\s+Ready\s+control-plane\s", shell["output"], re.MULTILINE), shell["output"]
    assert "kubectl rc=0" in shell["output"]
    assert "preview rc=0" in shell["output"], shell["output"][-4000:]
    assert re.search(r"^\s+\d+ unchanged$", shell["output"], re.MULTILINE)


def test_make_box_down_stops_the_box_and_removes_it(front_door: Any) -> None:
    down = front_door["down"]
    assert down["rc"] == 0, down["output"]
    assert "stopped and removed" in down["output"]
    assert front_door["box_left"] is False
