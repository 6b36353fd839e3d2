"""The box runs the plugin versions the program pins: a CLI command whose engine met a plugin of
another version fails the test machinery, naming the plugin and both versions
(e2e.engine.cli.refuse_plugin_mismatch, which every Engine.pulumi applies to its output)."""

from __future__ import annotations

import re

import pytest

from e2e.engine.cli import REPO, PluginVersionMismatchError, refuse_plugin_mismatch

# The engine's warning, as the CLI v3.274.0 prints it (pkg/host/host.go).
WARNING = (
    "warning: resource plugin kubernetes is expected to have version >=4.32.0, but has 4.25.0; "
    "the wrong version may be on your path, or this may be a bug in the plugin"
)


def test_a_plugin_at_another_version_fails_naming_it_and_both_versions() -> None:
    with pytest.raises(PluginVersionMismatchError) as refused:
        refuse_plugin_mismatch(f"Previewing update (lab):\n{WARNING}\n    pulumi:pulumi:Stack lab-mgmt-lab\n")
    assert "kubernetes: the program's packages ask for 4.32.0, the box ran 4.25.0" in str(refused.value)


def test_output_without_the_warning_passes() -> None:
    refuse_plugin_mismatch("Previewing update (lab):\nResources:\n    45 unchanged\n")


def test_the_engine_build_makes_the_kubernetes_plugin_requirements_txt_pins() -> None:
    """The build refuses to run when the two differ; this says so before any build starts."""
    script = (REPO / "e2e" / "engine" / "build-engine.sh").read_text()
    [built] = re.findall(r"^KUBERNETES_PLUGIN_VERSION=([0-9.]+)$", script, re.MULTILINE)
    [pinned] = re.findall(r"^pulumi-kubernetes==([0-9.]+)$", (REPO / "requirements.txt").read_text(), re.MULTILINE)
    assert built == pinned
