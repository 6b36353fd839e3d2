"""The real `pulumi` CLI, Python language host and provider plugins (built by
e2e/engine/build-engine.sh) on a copy of the project, each test in a network namespace of its own
(e2e/engine/netns.py): the README's first-run steps, the CLI's own config checks, the program's checks,
the token check against a Proxmox VE API stand-in at the lab's address, and the whole program's
preview, which must plan what the mocks harness records. Selected with `pytest -m engine`;
`.ci/run` builds the engine and runs them.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import harness
import pytest

from components.settings import SECRET_KEYS
from e2e.box import scenarios
from e2e.engine.cli import REPO
from e2e.engine.netns import in_new_netns

pytestmark = pytest.mark.engine

ALL_PRIVILEGES = harness.FULL_PERMISSIONS
WRONG_SECRET = "deadbeef-0000-4000-8000-000000000000"


def assert_steps_passed(result: dict[str, Any]) -> None:
    for step in result["steps"]:
        assert step["rc"] == 0, step


def test_readme_first_run_keeps_every_secret_encrypted(tmp_path: Path) -> None:
    result = in_new_netns("readme_first_run", str(tmp_path))
    assert_steps_passed(result)
    stack_file = result["stack_file"]
    for value in (scenarios.PROGRAM_SECRET, scenarios.CAPMOX_SECRET, "PRIVATE KEY"):
        assert value not in stack_file
    assert result["config_rc"] == 0
    config = json.loads(result["config"])
    for key in SECRET_KEYS:
        entry = config[f"lab-mgmt:{key}"]
        assert entry["secret"] is True, key
        assert "value" not in entry, key
        assert f"lab-mgmt:{key}:\n    secure: v1:" in stack_file, key
    assert config["lab-mgmt:sshPublicKeys"]["value"].startswith('["ssh-ed25519 ')


def _pinned(package: str) -> str:
    [version] = re.findall(rf"^{package}==([0-9.]+)$", (REPO / "requirements.txt").read_text(), re.MULTILINE)
    return str(version)


def test_each_plugin_is_installed_at_the_version_requirements_txt_pins(tmp_path: Path) -> None:
    """The CLI then runs them as it runs released plugins, never from PATH; each binary built here
    reports that version itself (any run that meets another fails: e2e.engine.cli.refuse_plugin_mismatch)."""
    result = in_new_netns("installed_plugins", str(tmp_path))
    assert sorted(result["listed"]) == [
        ["resource", "command", _pinned("pulumi-command")],
        ["resource", "kubernetes", _pinned("pulumi-kubernetes")],
        ["resource", "proxmoxve", _pinned("pulumi-proxmoxve")],
    ]
    # Since 4.29.0 a create no longer takes over an existing object (the hand-made guard's premise).
    assert tuple(map(int, _pinned("pulumi-kubernetes").split("."))) >= (4, 29, 0)
    assert result["built_here"] == {"proxmoxve": True, "command": True, "kubernetes": True}


def test_the_cli_refuses_a_missing_required_secret_naming_it(tmp_path: Path) -> None:
    result = in_new_netns("cli_preview", str(tmp_path), ["capmoxTokenSecret"], {})
    assert_steps_passed(result)
    assert result["rc"] != 0
    assert "capmoxTokenSecret" in result["output"]
    assert "missing" in result["output"].lower()


def test_the_cli_refuses_a_value_of_the_wrong_type_naming_it(tmp_path: Path) -> None:
    result = in_new_netns("cli_preview", str(tmp_path), [], {"vmCores": "two"})
    assert_steps_passed(result)
    assert result["rc"] != 0
    assert "vmCores" in result["output"]
    assert "integer" in result["output"]


def _preview(
    tmp_path: Path, settings: dict[str, str], secrets: dict[str, str], tokens: list[Any], *, legacy_layout: bool = False
) -> Any:
    result = in_new_netns(
        "program_preview",
        str(tmp_path),
        settings,
        secrets,
        tokens,
        legacy_layout,
        addresses=[scenarios.PROXMOX_ADDRESS],
    )
    assert_steps_passed(result)
    assert result["unknown"] == [], "the program called the Proxmox VE API for something unknown"
    for secret in (scenarios.PROGRAM_SECRET, scenarios.CAPMOX_SECRET, WRONG_SECRET):
        assert secret not in result["output"]
    return result


LAB_TOKENS = [
    [scenarios.PROGRAM_TOKEN, scenarios.PROGRAM_SECRET, ALL_PRIVILEGES],
    [scenarios.CAPMOX_TOKEN, scenarios.CAPMOX_SECRET, ALL_PRIVILEGES],
]
PERMISSIONS_CALL = ["GET", "/api2/json/access/permissions"]


def test_the_program_refuses_a_bad_value_naming_the_key(tmp_path: Path) -> None:
    result = _preview(tmp_path, {"vmGateway": "10.9.9.9"}, {}, LAB_TOKENS)
    assert "lab-mgmt:vmGateway: 10.9.9.9 is outside the VM's subnet 192.168.4.0/24" in result["output"]
    assert result["requests"] == [], "settings are refused before anything is asked of Proxmox"


def test_a_wrong_capmox_secret_stops_the_preview_naming_the_token(tmp_path: Path) -> None:
    result = _preview(tmp_path, {}, {"capmoxTokenSecret": WRONG_SECRET}, LAB_TOKENS)
    assert f"lab-mgmt:capmoxTokenSecret (token {scenarios.CAPMOX_TOKEN}): rejected" in result["output"]
    assert result["requests"] == [PERMISSIONS_CALL, PERMISSIONS_CALL]


def test_a_token_lacking_vm_allocate_stops_the_preview_naming_it(tmp_path: Path) -> None:
    lacking = {"/": {p: 1 for p in ALL_PRIVILEGES["/"] if p != "VM.Allocate"}}
    tokens = [[scenarios.PROGRAM_TOKEN, scenarios.PROGRAM_SECRET, lacking], LAB_TOKENS[1]]
    result = _preview(tmp_path, {}, {}, tokens)
    assert (
        f"lab-mgmt:proxmoxApiTokenSecret (token {scenarios.PROGRAM_TOKEN}): lacks VM.Allocate on /" in result["output"]
    )


def planned(result: dict[str, Any]) -> set[tuple[str, str]]:
    """(type, name) of every resource the preview planned, as the mocks harness records them:
    without the providers the engine makes by default (`default`, `default_1_2_1`)."""
    names = set()
    for step in result["plan"]:
        type_part, name = step["urn"].split("::")[2:]
        type_ = type_part.rsplit("$", 1)[-1]
        if not (type_.startswith("pulumi:providers:") and name.startswith("default")):
            names.add((type_, name))
    return names


def assert_plans_the_mocks_graph(result: dict[str, Any], overrides: dict[str, Any]) -> None:
    assert result["rc"] == 0, result["output"]
    assert result["warnings"] == []
    # The box's engine leaves the lab's workload cluster out (e2e.engine.cli.fresh_engine).
    mocks = harness.run_program({**overrides, "workloadClusters": []}, preview=True)
    assert planned(result) == mocks.names()
    assert {step["op"] for step in result["plan"]} <= {"create", "read", "same"}


def test_the_right_tokens_cost_one_call_each_and_the_whole_program_plans_the_mocks_graph(tmp_path: Path) -> None:
    result = _preview(tmp_path, {}, {}, LAB_TOKENS)
    assert result["requests"] == [PERMISSIONS_CALL, PERMISSIONS_CALL]
    assert result["state_files"] == ["lab-mgmt/lab.json"]
    assert_plans_the_mocks_graph(result, {})


OTHER_LAB = {"proxmoxNode": "pve-b2", "vmId": "350", "vmAddress": "10.20.30.40/24", "vmGateway": "10.20.30.1"}


def test_the_whole_program_plans_the_mocks_graph_for_another_lab(tmp_path: Path) -> None:
    result = _preview(tmp_path, OTHER_LAB, {}, LAB_TOKENS)
    assert_plans_the_mocks_graph(result, {**OTHER_LAB, "vmId": 350})
    vm = next(step for step in result["plan"] if step["urn"].endswith("::mgmt-vm"))
    assert vm["op"] == "create"


def test_the_stack_reads_itself_on_a_file_backend_in_the_old_layout(tmp_path: Path) -> None:
    """State made before project-scoped stacks refuses `organization/lab-mgmt/lab` as a stack
    name; the program names itself so that both layouts read it. (The CLI itself now refuses
    such state and asks for `pulumi state upgrade` unless told to go on.)"""
    result = _preview(tmp_path, {}, {}, LAB_TOKENS, legacy_layout=True)
    assert result["state_files"] == ["lab.json"]
    assert result["rc"] == 0, result["output"]
    assert ("pulumi:pulumi:StackReference", "last-deployment") in planned(result)


def test_an_adoption_that_would_change_the_lab_is_refused_naming_the_setting(tmp_path: Path) -> None:
    result = _preview(tmp_path, {"adopt": "true"}, {}, LAB_TOKENS)
    assert "lab-mgmt:adopt: true needs capmoxExistingSecret" in result["output"]
    assert result["requests"] == [], "settings are refused before anything is asked of Proxmox"


# What a documented command holds where the reader puts a value of their own.
PLACEHOLDERS = ("$(", "<", "…", " KEY")


def documented_config_sets() -> list[list[str]]:
    """Every `pulumi config set` in the README and docs/, as the reader would type it."""
    commands = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for line in re.findall(r"pulumi config set [^`\n]*", doc.read_text()):
            for part in line.split("&&"):
                command = part.split(" #", 1)[0].strip()
                if command.startswith("pulumi config set") and not any(mark in command for mark in PLACEHOLDERS):
                    commands.append(shlex.split(command)[1:])
    return commands


def test_every_documented_config_set_is_accepted_by_the_cli(tmp_path: Path) -> None:
    """The CLI refuses a plain value for a key that looks secret ("Token", "Secret" in its
    name) unless told `--plaintext`; a newcomer copying the docs must not meet that."""
    commands = documented_config_sets()
    assert len(commands) >= 15, commands
    assert ["config", "set", "--plaintext", "capmoxExistingSecret", "capmox-variables"] in commands
    for step in in_new_netns("documented_config_sets", str(tmp_path), commands):
        assert step["rc"] == 0, step


def test_the_readme_first_run_works_word_for_word_on_a_new_laptop(tmp_path: Path) -> None:
    """From `pulumi login` to the plan, as typed, with HOME empty and only the passphrase set."""
    result = in_new_netns("newcomer_first_run", str(tmp_path), LAB_TOKENS, addresses=[scenarios.PROXMOX_ADDRESS])
    assert result["typed"][0] == "mkdir -p ~/.pulumi-state && pulumi login 'file://~/.pulumi-state?metadata=skip'"
    assert result["typed"][-1] == "pulumi preview"
    assert result["rc"] == 0, result["output"]
    assert result["requests"] == [PERMISSIONS_CALL, PERMISSIONS_CALL]
    assert ".pulumi-state/.pulumi/stacks/lab-mgmt/lab.json" in result["state_files"]
    assert re.search(r"Resources:\s+\+ \d+ to create", result["output"]), result["output"][-2000:]


def test_a_mistake_reads_as_a_message_naming_the_key_and_the_fix(tmp_path: Path) -> None:
    result = in_new_netns("mistakes", str(tmp_path), addresses=[scenarios.PROXMOX_ADDRESS])
    assert_steps_passed(result)
    expected = {
        "bad setting": ["lab-mgmt:vmId: 12 is outside"],
        "unreachable API": ["lab-mgmt:proxmoxApiTokenSecret", "set lab-mgmt:skipCredentialsCheck true"],
        "unreachable chart repository": [
            "lab-mgmt:certManagerChartRepo: cannot fetch cert-manager v1.21.2 from https://charts.jetstack.io",
            "helm pull cert-manager --repo https://charts.jetstack.io --version v1.21.2",
        ],
    }
    # With skipCredentialsCheck set (to get past the unreachable API), a chart repository out of
    # reach is a warning, and a first preview, whose releases wait on a cluster not made yet,
    # plans without the charts.
    warned = {"unreachable chart repository"}
    for mistake, fragments in expected.items():
        shown = result["outputs"][mistake]
        assert (shown["rc"] == 0) == (mistake in warned), mistake
        for fragment in fragments:
            assert fragment in shown["output"], (mistake, fragment, shown["output"])
        assert "Traceback" not in shown["output"], (mistake, shown["output"])
        assert "unhandled exception" not in shown["output"], (mistake, shown["output"])
