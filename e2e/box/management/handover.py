"""The playbook's lab handed over: its HelmCharts on a real API server with k3s's real
helm-controller running (e2e/controllers/helm_controller.py), which makes for each chart what it
makes on the owner's k3s (the install Job, its pod through the real job controller, the Job's
helpers); each Job's pod runs klipper-helm's `entry` with Helm v4.1.4 as the lab's k3s runs it
(the pod runner), which installs the release from the chart repository at the HelmChart's `repo`
URL (the chart repository stand-in under its internet name). Then
components/scripts/helmchart_handover.sh as docs/adoption.md runs it: cut off between the first
chart's finalizer removal and its delete, then typed again, twice (tests/test_box_handover.py).
Then helm-controller restarted, as a restarted k3s restarts it; and last, the control: a chart of
the same kind deleted with helm-controller's finalizer on, which is what the script must never
do: its release is uninstalled.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from e2e.box.cluster_part import _requests_since
from e2e.box.management import k3s_charts
from e2e.box.scenarios import CAPMOX_SECRET, CAPMOX_TOKEN, PROXMOX_ADDRESS, PROXMOX_PORT, VM_ADDRESS, WRITES
from e2e.box.workload.lab1_reads import built_tool, ran, until
from e2e.controllers import helm_controller
from e2e.engine import control_plane
from e2e.engine.cli import REPO
from e2e.standins.cluster import chart_repo_standin, playbook_lab
from e2e.standins.guest import k3s_deploy

# What k3s's controller manager runs, of what the hand-over meets: the job controller makes each
# install Job's pod, and the garbage collector takes the pod when helm-controller deletes its Job;
# the pod's service account volume projects the `kube-root-ca.crt` ConfigMap that the publisher
# makes in each namespace.
CONTROLLERS = (
    *("serviceaccount-token-controller", "job-controller", "garbage-collector-controller"),
    "root-ca-certificate-publisher-controller",
)
# A chart of the playbook's kind, there only to be deleted with its finalizer on.
CONTROL_CHART = "finalizer-control"
# How long the restarted helm-controller is watched doing nothing: it lists every HelmChart and
# handles each within a second of starting.
RESTARTED_WATCH_SECONDS = 10


def _upgraded_by_the_programs_helm(machinery: k3s_charts.K3sCharts, base: Path, name: str) -> dict[str, Any]:
    """What the program does next to a handed-over release (docs/adoption.md step 4: its Release
    upgrades it), by the Helm it runs (v3.20.2, inside the kubernetes plugin: its CLI here) on the
    release Helm v4 made: `helm upgrade` with the same chart, version and values. Its status
    before, the upgrade, and the record and rendered object after."""
    cluster = machinery.cluster
    namespace, _, version, _ = playbook_lab.PLAYBOOK_CHARTS[name]
    archive = base / f"{name}-{version}.tgz"
    archive.write_bytes(chart_repo_standin.Chart(name, version).archive())
    rendered = f"configmap/{name}-rendered"

    def helm(*args: str) -> dict[str, Any]:
        return ran(built_tool("LAB_MGMT_HELM_BIN", "helm", base, f"--kubeconfig={cluster.kubeconfig}", *args))

    before = cluster.kubectl("get", rendered, "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
    out: dict[str, Any] = {"status": helm("status", name, "-n", namespace, "-o", "json")}
    out["upgrade"] = helm("upgrade", name, str(archive), "-n", namespace, "--reuse-values")
    out["records"] = machinery.releases(namespace)
    out["rendered_kept"] = (
        before == cluster.kubectl("get", rendered, "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
    )
    return out


def _k3s_on_path(directory: Path, kubectl: Path, kubeconfig: Path, *, cut_at_delete: bool) -> dict[str, str]:
    """`k3s kubectl` as the real kubectl against the box's API server; any other k3s command is
    refused loudly. `python3` is this interpreter, which has PyYAML as Ubuntu's has. With
    `cut_at_delete`, the run is cut off at its first HelmChart delete, before it reaches the API
    server, as a dropped SSH session cuts it."""
    directory.mkdir(exist_ok=True)
    cut = (
        'case "$*" in *" delete helmchart "*) echo "k3s stand-in: the session dropped here" >&2; exit 255;; esac\n'
        if cut_at_delete
        else ""
    )
    (directory / "k3s").write_text(
        "#!/bin/sh\n"
        f"{cut}"
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


def _handover(
    cluster: control_plane.ControlPlane, base: Path, manifests: Path, *, cut_at_delete: bool = False
) -> dict[str, Any]:
    """components/scripts/helmchart_handover.sh as docs/adoption.md runs it, with what it asked."""
    env = {
        **_k3s_on_path(base / "bin", cluster.bin_dir / "kubectl", cluster.kubeconfig, cut_at_delete=cut_at_delete),
        "K3S_MANIFESTS_DIR": str(manifests),
    }
    script = REPO / "components" / "scripts" / "helmchart_handover.sh"
    audited = cluster.audit_mark()
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


def _writes_by(cluster: control_plane.ControlPlane, mark: int, user: str) -> list[list[Any]]:
    """[verb, resource, name] of each write `user` made after the audit log's `mark`."""
    return [request[:3] for request in _requests_since(cluster, mark, user) if request[0] in WRITES]


def _deleted_with_its_finalizer(machinery: k3s_charts.K3sCharts) -> dict[str, Any]:
    """The control: a chart helm-controller manages, installed, then deleted with its finalizer on,
    as the script must never do: what helm-controller makes of the delete (a helm-delete Job, whose
    pod uninstalls the release), and what is left of the release once the chart is gone."""
    cluster = machinery.cluster
    chart = playbook_lab.helmchart("cert-manager").replace("cert-manager", CONTROL_CHART)
    cluster.kubectl("apply", "-f", "-", stdin=chart)
    until(f"helm-controller made {CONTROL_CHART}'s install Job", lambda: machinery.all_made([CONTROL_CHART]))
    until(f"{CONTROL_CHART}'s install Job done", lambda: machinery.installed([CONTROL_CHART]))
    installed = sorted(machinery.releases(CONTROL_CHART))
    mark = cluster.audit_mark()
    cluster.kubectl("delete", "helmchart", CONTROL_CHART, "-n", "kube-system", "--wait=false")
    deleting = until(
        f"a helm-delete Job for {CONTROL_CHART}",
        lambda: json.loads(
            cluster.kubectl(
                "get", "job", f"helm-delete-{CONTROL_CHART}", "-n", "kube-system", "-o", "json", "--ignore-not-found"
            ).stdout
            or "null"
        ),
    )
    until(
        f"{CONTROL_CHART} gone once its helm-delete Job is done",
        lambda: not cluster.kubectl("get", "helmchart", "-n", "kube-system", "-o", "name").stdout.strip(),
    )
    return {
        "job_args": deleting["spec"]["template"]["spec"]["containers"][0].get("args", []),
        "installed": installed,
        "releases_left": sorted(machinery.releases(CONTROL_CHART)),
        "rendered_left": cluster.kubectl("get", "configmaps", "-n", CONTROL_CHART, "-o", "name").stdout.split(),
        "writes": _writes_by(cluster, mark, control_plane.HELM_CONTROLLER_USER),
    }


def _a_manifest_left(machinery: k3s_charts.K3sCharts, base: Path, manifests: Path) -> dict[str, Any]:
    """The control of the hand-over's move: one handed-over file put back in the manifests folder,
    and k3s restarted. Its deploy controller makes that HelmChart again, managed, and
    helm-controller makes an install Job for it, which would install over the program's release."""
    cluster, name = machinery.cluster, playbook_lab.HANDED_OVER[0]
    (manifests / f"{name}.yaml").write_text((base / "manifests-handed-over" / f"{name}.yaml").read_text())
    with helm_controller.running(cluster, base / "helm-controller"):
        k3s_deploy.started(cluster.kubeconfig, manifests, playbook_lab.K3S_DISABLES)
        chart = json.loads(cluster.kubectl("get", "helmchart", "-n", "kube-system", name, "-o", "json").stdout)
        job = until(
            f"helm-controller's install Job for {name} again",
            lambda: next((i for i in machinery.made_for().get(name, []) if i["kind"] == "Job"), None),
        )
    return {"chart": chart, "job": job}


def helmchart_handover(root: str) -> dict[str, Any]:
    """The playbook's lab on a real API server with helm-controller running, then the hand-over
    script twice; helm-controller restarted; the control."""
    base = Path(root)
    out: dict[str, Any] = {}
    with (
        control_plane.running(base / "control-plane", VM_ADDRESS, controllers=CONTROLLERS) as cluster,
        k3s_charts.serving(cluster, base, {}, more={"cert-manager": [CONTROL_CHART]}) as machinery,
    ):
        try:
            _handed_over(machinery, base, out)
        except Exception:  # what happened so far, and the pods' side of it, are the tests' to read
            out["failed"] = traceback.format_exc()
        out |= {"pod_errors": machinery.pods.errors, "pod_logs": machinery.pods.logs()}
        out |= {"chart_requests": machinery.charts.requests, "chart_unknown": machinery.charts.unknown}
    return out


def _handed_over(machinery: k3s_charts.K3sCharts, base: Path, out: dict[str, Any]) -> None:
    """The lab laid out and installed by helm-controller's Jobs; the script cut off, then typed
    twice; helm-controller restarted; the control; the releases upgraded by the program's Helm."""
    cluster, manifests = machinery.cluster, base / "manifests"
    with helm_controller.running(cluster, base / "helm-controller") as controller:
        out["controller_args"] = controller.args
        playbook_lab.lay_out(
            cluster,
            manifests,
            _playbook_capmox_data(),
            k3s=lambda folder: k3s_deploy.started(cluster.kubeconfig, folder, playbook_lab.K3S_DISABLES),
            installed=lambda: out.update(
                made=until(
                    "helm-controller made each chart's Job, its pod and its helpers",
                    lambda: machinery.all_made(playbook_lab.HANDED_OVER),
                ),
                installed=until("each chart's install Job done", lambda: machinery.installed(playbook_lab.HANDED_OVER)),
            ),
        )
        out["releases"] = machinery.releases()
        out["charts_before"] = json.loads(
            cluster.kubectl("get", "helmchart", "-n", "kube-system", "-o", "json").stdout
        )["items"]
        out["releases_before"] = _releases(cluster)
        mark = cluster.audit_mark()
        # Cut off between the first chart's finalizer removal and its delete, then typed
        # again, and once more: the second run finishes, the third finds nothing to do.
        out["cut"] = _handover(cluster, base, manifests, cut_at_delete=True)
        out["runs"] = [_handover(cluster, base, manifests) for _ in range(2)]
        until("helm-controller removed what it made for the handed-over charts", lambda: not machinery.made_for())
        out["controller_writes"] = _writes_by(cluster, mark, control_plane.HELM_CONTROLLER_USER)
        out["collector_writes"] = _writes_by(cluster, mark, control_plane.CONTROLLER_USER)
    mark = cluster.audit_mark()
    with helm_controller.running(cluster, base / "helm-controller"):
        time.sleep(RESTARTED_WATCH_SECONDS)
        out["restarted_writes"] = _writes_by(cluster, mark, control_plane.HELM_CONTROLLER_USER)
        out["charts_left"] = cluster.kubectl("get", "helmchart", "-n", "kube-system", "-o", "name").stdout.split()
        out["releases_after"] = _releases(cluster)
        out["manifests_left"] = sorted(p.name for p in manifests.iterdir())
        out["handed_over_files"] = sorted(p.name for p in (base / "manifests-handed-over").iterdir())
        # k3s restarted: its deploy controller's first pass applies what the manifests folder holds.
        mark = cluster.audit_mark()
        k3s_deploy.started(cluster.kubeconfig, manifests, playbook_lab.K3S_DISABLES)
        out["k3s_restarted_writes"] = _writes_by(cluster, mark, control_plane.ADMIN_USER)
        out["charts_after_k3s_restart"] = cluster.kubectl(
            "get", "helmchart", "-n", "kube-system", "-o", "name"
        ).stdout.split()
        out["control"] = _deleted_with_its_finalizer(machinery)
    out["upgraded"] = [_upgraded_by_the_programs_helm(machinery, base, name) for name in playbook_lab.HANDED_OVER]
    out["manifest_left"] = _a_manifest_left(machinery, base, manifests)
