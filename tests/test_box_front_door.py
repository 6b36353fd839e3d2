"""The front door as a newcomer walks it (README, "Watch it"): in a clone of the checked-out commit,
with no virtualenv, `make box` makes `.venv`, finds the engine, runs the whole program's `pulumi up`
with lab1 in a box of its own and says what to type next; `make box-shell`, typed into, answers
`kubectl get nodes` for both clusters, then takes the README's scaling commands as the README
writes them: lab1 goes 0 -> 2 -> 0 workers through the real cluster-autoscaler and Cluster API, and
the zero-change preview passes; `make box-down` stops the box and removes it. The box makes its own
network namespace (e2e/box/make_box.py). Selected with `pytest -m engine`.
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

# What a newcomer types into `make box-shell` first, then the README's scaling commands.
FIRST_LOOK = ("kubectl get nodes", "kubectl --context lab1 get nodes")
STEP_MARK = re.compile(r"^step (\d+) rc=(\d+) in (\d+)s$", re.MULTILINE)


def readme_scaling_commands() -> list[str]:
    """The README's block of commands that scale lab1, line by line as written there."""
    blocks = re.findall(r"(?:^    \S.*\n)+", (REPO / "README.md").read_text(), re.MULTILINE)
    [block] = [block for block in blocks if "create deployment demand" in block]
    return [line.strip() for line in block.splitlines()]


def shell_input(commands: list[str]) -> str:
    """Each command as typed, then its exit code and seconds, marked so that the test finds them."""
    return "".join(
        f'SECONDS=0\n{command}\necho "step {index} rc=$? in ${{SECONDS}}s"\n' for index, command in enumerate(commands)
    )


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
        shell = _make(clone, env, "box-shell", shell_input([*FIRST_LOOK, *readme_scaling_commands()]))
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


def test_make_box_on_a_fresh_clone_makes_its_virtualenv_and_the_whole_up_with_lab1(front_door: Any) -> None:
    box = front_door["box"]
    assert box["rc"] == 0, box["output"][-4000:]
    assert (front_door["had_venv"], front_door["venv"]) == (False, True)
    assert re.search(r"pulumi up of the whole program: rc 0 in [\d.]+s, \{'create': \d+\}", box["output"])
    assert "(contexts lab-mgmt and lab1)" in box["output"]
    assert "make box-shell opens a shell there" in box["output"]


def test_the_readme_scaling_block_is_what_the_shell_is_given() -> None:
    commands = readme_scaling_commands()
    assert commands[0].startswith("kubectl --context lab1 create deployment demand")
    assert commands[-1] == "pulumi preview --expect-no-changes"
    typed = shell_input(commands)
    assert [line for line in typed.splitlines() if not line.startswith(("SECONDS=0", "echo "))] == commands


def test_the_box_shell_shows_both_clusters_and_scales_lab1_as_the_readme_says(front_door: Any) -> None:
    shell = front_door["shell"]
    output = shell["output"]
    assert shell["rc"] == 0, output[-4000:]
    steps = {int(index): (int(rc), int(seconds)) for index, rc, seconds in STEP_MARK.findall(output)}
    commands = [*FIRST_LOOK, *readme_scaling_commands()]
    assert sorted(steps) == list(range(len(commands))), output[-4000:]
    assert {commands[index]: rc for index, (rc, _) in steps.items() if rc} == {}, output[-6000:]
    assert re.search(r"^lab-mgmt\s+Ready\s+control-plane\s", output, re.MULTILINE), output
    assert re.search(r"^lab1-control-plane-\S+\s+Ready\s+control-plane\s", output, re.MULTILINE), output
    assert 'deployment "demand" successfully rolled out' in output
    assert len(re.findall(r"^lab1-workers-\S+\s+lab1\s+lab1-workers-\S+\s+True\s", output, re.MULTILINE)) == 2, output
    assert len(re.findall(r"^machine\.cluster\.x-k8s\.io/lab1-workers-\S+ condition met$", output, re.MULTILINE)) == 2
    assert re.search(r"^\s+\d+ unchanged$", output, re.MULTILINE)
    print("seconds per command:", {commands[index]: seconds for index, (_, seconds) in steps.items()})


def test_make_box_down_stops_the_box_and_removes_it(front_door: Any) -> None:
    down = front_door["down"]
    assert down["rc"] == 0, down["output"]
    assert "stopped and removed" in down["output"]
    assert front_door["box_left"] is False
