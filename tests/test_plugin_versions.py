"""The box runs the plugin versions the program pins: a CLI command whose engine met a plugin of
another version fails the test machinery, naming the plugin and both versions
(e2e.engine.cli.refuse_plugin_mismatch, which every Engine.pulumi applies to its output). And the
engine build that makes them (e2e/engine/build-engine.sh) shares its cache safely between two runs."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from e2e.engine.cli import REPO, PluginVersionMismatchError, refuse_plugin_mismatch

BUILD_SCRIPT = REPO / "e2e" / "engine" / "build-engine.sh"

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
    script = BUILD_SCRIPT.read_text()
    [built] = re.findall(r"^KUBERNETES_PLUGIN_VERSION=([0-9.]+)$", script, re.MULTILINE)
    [pinned] = re.findall(r"^pulumi-kubernetes==([0-9.]+)$", (REPO / "requirements.txt").read_text(), re.MULTILINE)
    assert built == pinned


def helm_controller_version() -> str:
    versions: list[str] = re.findall(r"^HELM_CONTROLLER_VERSION=([0-9.]+)$", BUILD_SCRIPT.read_text(), re.MULTILINE)
    [version] = versions
    return version


def klipper_helm_version() -> str:
    versions: list[str] = re.findall(r"^KLIPPER_HELM_VERSION=(\S+)$", BUILD_SCRIPT.read_text(), re.MULTILINE)
    [version] = versions
    return version


# A stand-in `go` for the engine build: it answers the module queries the script makes, and links a
# binary slowly (2 s), logging where, so that two runs of the script overlap.
STANDIN_GO = r"""#!/usr/bin/env bash
set -euo pipefail
case "$1 $2" in
  "list -m") echo "github.com/pulumi/pulumi/pkg/v3 v3.274.0" ;;
  "mod download")
    dir="$STANDIN_MODULES/${4//\//%}"
    mkdir -p "$dir" && touch "$dir/go.mod"
    printf '{"Dir": "%s"}\n' "$dir"
    ;;
  "build -trimpath")
    while [ "$1" != -o ]; do shift; done
    printf '%s\n' "$2" >>"$STANDIN_LOG"
    sleep 2
    printf '#!/bin/sh\n' >"$2" && chmod +x "$2"
    ;;
  *) echo "go $*: not modelled by the stand-in" >&2; exit 99 ;;
esac
"""


def test_two_engine_builds_sharing_the_cache_take_turns(tmp_path: Path) -> None:
    """Issue 67: two runs sharing the engine cache (a `make box` beside a `make test-engine`) both
    linked into the same `<binary>.partial`, and one failed. Side by side, one now builds
    helm-controller while the other waits for its lock, then finds it cached; both succeed, it is
    linked once, and no run leaves a partial file behind."""
    standins = tmp_path / "bin"
    standins.mkdir()
    (standins / "go").write_text(STANDIN_GO)
    (standins / "go").chmod(0o755)
    cache = tmp_path / "cache"
    cli = cache / "pulumi-v3.274.0" / "bin"
    cli.mkdir(parents=True)
    # The image of helm-controller's Jobs, built before (its build is not the one that races).
    klipper = cache / f"klipper-helm-v{klipper_helm_version()}" / "bin"
    klipper.mkdir(parents=True)
    for binary in (cli / "pulumi", klipper / "entry", klipper / "helm"):
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    links = tmp_path / "links"
    env = {
        **os.environ,
        "PATH": f"{standins}{os.pathsep}{os.environ['PATH']}",
        "LAB_MGMT_ENGINE_CACHE": str(cache),
        "STANDIN_LOG": str(links),
        "STANDIN_MODULES": str(tmp_path / "modules"),
    }
    runs = [
        subprocess.Popen(
            ["bash", str(BUILD_SCRIPT), "helm-controller"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    said = [run.communicate(timeout=60) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], said
    built = cache / f"helm-controller-v{helm_controller_version()}" / "bin"
    for out, _ in said:
        assert sorted(out.splitlines()) == [
            f"LAB_MGMT_ENGINE_BIN={cli}",
            f"LAB_MGMT_HELM_CONTROLLER_BIN={built}",
            f"LAB_MGMT_KLIPPER_HELM_BIN={klipper}",
        ]
    assert links.read_text().count("\n") == 1
    assert os.access(built / "helm-controller", os.X_OK)
    assert sorted("built in" in err for _, err in said) == [False, True]
    assert list(cache.glob(".partial.*")) == []
