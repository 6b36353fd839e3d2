"""The playbook's lab handed over: its HelmCharts on a real API server, then
components/scripts/helmchart_handover.sh as docs/adoption.md runs it (tests/test_box_handover.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from e2e.box.cluster_part import _requests_since
from e2e.box.scenarios import CAPMOX_SECRET, CAPMOX_TOKEN, PROXMOX_ADDRESS, PROXMOX_PORT, VM_ADDRESS
from e2e.engine import control_plane
from e2e.engine.cli import REPO
from e2e.standins.cluster import playbook_lab


def _k3s_on_path(directory: Path, kubectl: Path, kubeconfig: Path) -> dict[str, str]:
    """`k3s kubectl` as the real kubectl against the box's API server; any other k3s command is
    refused loudly. `python3` is this interpreter, which has PyYAML as Ubuntu's has."""
    directory.mkdir(exist_ok=True)
    (directory / "k3s").write_text(
        "#!/bin/sh\n"
        f'[ "$1" = kubectl ] && shift && exec {kubectl} --kubeconfig={kubeconfig} "$@"\n'
        'echo "k3s stand-in: unknown command: $*" >&2\nexit 99\n'
    )
    (directory / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    for tool in directory.iterdir():
        tool.chmod(0o755)
    # kubectl keeps a discovery cache under $HOME: the box's own directory, not the repository.
    return {"PATH": f"{directory}:/usr/bin:/bin", "HOME": str(directory.parent)}


def _playbook_capmox_data() -> dict[str, str]:
    return {
        "PROXMOX_URL": f"https://{PROXMOX_ADDRESS}:{PROXMOX_PORT}",
        "PROXMOX_TOKEN": CAPMOX_TOKEN,
        "PROXMOX_SECRET": CAPMOX_SECRET,
    }


def _handover(cluster: control_plane.ControlPlane, base: Path, manifests: Path) -> dict[str, Any]:
    """components/scripts/helmchart_handover.sh as docs/adoption.md runs it, with what it asked."""
    env = {
        **_k3s_on_path(base / "bin", cluster.bin_dir / "kubectl", cluster.kubeconfig),
        "K3S_MANIFESTS_DIR": str(manifests),
    }
    script = REPO / "components" / "scripts" / "helmchart_handover.sh"
    audited = len(cluster.audit())
    done = subprocess.run(
        ["bash", str(script), *playbook_lab.HANDED_OVER],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return {
        "rc": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "requests": _requests_since(cluster, audited),
    }


def _releases(cluster: control_plane.ControlPlane) -> list[tuple[str, str, str]]:
    listed = cluster.kubectl("get", "secret", "-A", "-l", "owner=helm", "-o", "json").stdout
    return sorted(
        (item["metadata"]["name"], item["metadata"]["uid"], item["metadata"]["resourceVersion"])
        for item in json.loads(listed)["items"]
    )


def helmchart_handover(root: str) -> dict[str, Any]:
    """The playbook's lab on a real API server, then the hand-over script twice."""
    base = Path(root)
    with control_plane.running(base / "control-plane", VM_ADDRESS) as cluster:
        manifests = base / "manifests"
        playbook_lab.lay_out(cluster, manifests, _playbook_capmox_data())
        before = _releases(cluster)
        runs = [_handover(cluster, base, manifests) for _ in range(2)]
        charts = cluster.kubectl("get", "helmchart", "-n", "kube-system", "-o", "name").stdout.split()
        return {
            "runs": runs,
            "charts_left": charts,
            "releases_before": before,
            "releases_after": _releases(cluster),
            "manifests_left": sorted(p.name for p in manifests.iterdir()),
            "handed_over_files": sorted(p.name for p in (base / "manifests-handed-over").iterdir()),
        }
