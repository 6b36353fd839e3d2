"""What the real-engine tests and the lab in a box take from the machine, checked in seconds before
anything is built: a missing piece named after a 25-minute build, or as a traceback from deep in
the box, costs a newcomer the build. Every missing piece is named in one message, each with the
Debian package (or the setting) that brings it.

    python3 -m e2e.engine.preflight             # exit 1 with the message, or 0
    python3 -m e2e.engine.preflight --packages  # the Debian packages to install, one a line

Standard library only: it runs before the project's virtualenv exists (Makefile `box`,
`test-engine`; .ci/run installs what `--packages` lists).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# Commands the machinery runs, with the Debian package that brings each.
COMMANDS = {
    "ip": "iproute2",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "openssl": "openssl",
    "curl": "curl",
    # klipper-helm's `entry`, which the pod runner runs for helm-controller's Jobs, reads Helm's
    # answers with jq, as the image's Alpine jq does.
    "jq": "jq",
}
# What the box's VMs take from the machine (e2e/standins/guest/guest.py): without them a VM boots
# without sshd or without its user's sudo rule.
MACHINE_PATHS = {"/usr/sbin/sshd": "openssh-server", "/etc/sudoers.d": "sudo"}
GO_MINIMUM = (1, 26)
GO_FALLBACK = Path("/usr/local/go/bin/go")
# The engine build's cache from empty (docs/testing.md: 29 GB measured for the six targets on
# 2026-12-08, with room to link), and what a run needs once it is built (the box's disks, the test
# engines' homes).
COLD_BUILD_GB = 32
WARM_RUN_GB = 3


def engine_cache() -> Path:
    """Where e2e/engine/build-engine.sh keeps what it built (its LAB_MGMT_ENGINE_CACHE)."""
    return Path(os.environ.get("LAB_MGMT_ENGINE_CACHE", Path.home() / ".cache" / "lab-mgmt-engine"))


def missing_packages() -> list[str]:
    """The Debian packages of COMMANDS and MACHINE_PATHS this machine lacks."""
    packages = {package for command, package in COMMANDS.items() if shutil.which(command) is None}
    packages |= {package for path, package in MACHINE_PATHS.items() if not Path(path).exists()}
    return sorted(packages)


def go_problem() -> str | None:
    """Why the machine's Go cannot build the engine, or None."""
    go = shutil.which("go") or (str(GO_FALLBACK) if GO_FALLBACK.exists() else None)
    if go is None:
        return f"Go {'.'.join(map(str, GO_MINIMUM))} or newer (not found on PATH or at {GO_FALLBACK})"
    said = subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout
    found = re.search(r"go(\d+)\.(\d+)", said)
    if found is None or (int(found[1]), int(found[2])) < GO_MINIMUM:
        return f"Go {'.'.join(map(str, GO_MINIMUM))} or newer ({go} says {said.strip() or 'nothing'})"
    return None


def namespace_problem() -> str | None:
    """Why this user cannot make the network namespaces every scenario runs in, or None."""
    if os.geteuid() == 0:
        return None
    tried = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--net", "true"], capture_output=True, text=True, check=False
    )
    if tried.returncode == 0:
        return None
    return (
        "root, or unprivileged user namespaces (this user's `unshare --user --map-root-user --net` "
        f"failed: {tried.stderr.strip()}; Ubuntu 24.04 restricts them: "
        "sysctl kernel.apparmor_restrict_unprivileged_userns=0)"
    )


def disk_problem(cache: Path) -> str | None:
    """Whether the disk that holds the engine cache has room for what is still to be built."""
    built = any(cache.glob("pulumi-v*/bin/pulumi"))
    needed = WARM_RUN_GB if built else COLD_BUILD_GB
    existing = next(parent for parent in (cache, *cache.parents) if parent.exists())
    free_gb = shutil.disk_usage(existing).free / 1e9
    if free_gb >= needed:
        return None
    why = "for the box's disks and engines" if built else "for the engine build's cache, which is empty"
    return f"{needed} GB free at {existing} {why} (LAB_MGMT_ENGINE_CACHE moves it): {free_gb:.1f} GB free"


def problems() -> list[str]:
    """Each missing piece, as one line that says what brings it."""
    packages = missing_packages()
    found: list[str | None] = (
        [f"the Debian packages {', '.join(packages)}: apt-get install {' '.join(packages)}"] if packages else []
    )
    if shutil.which("unshare"):
        found.append(namespace_problem())
    found += [go_problem(), disk_problem(engine_cache())]
    return [problem for problem in found if problem]


def main(argv: list[str]) -> int:
    if argv == ["--packages"]:
        print("\n".join(missing_packages()))
        return 0
    missing = problems()
    if not missing:
        return 0
    print(
        "this machine lacks what the lab in a box needs (README, 'Watch it work'); nothing was built:\n"
        + "\n".join(f"  - {problem}" for problem in missing),
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
