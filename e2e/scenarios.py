"""What the real-engine tests do, each run by e2e.netns in a network namespace of its own. Each
returns what it observed (exit codes, CLI output, the stand-ins' records) for the test to assert.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from e2e import control_plane, pve_api_standin
from e2e.engine import REPO, Engine, fresh_engine

PROGRAM_TOKEN = "pulumi@pve!lab-mgmt"
CAPMOX_TOKEN = "capmox@pve!capi"
PROGRAM_SECRET = "0f1e2d3c-4b5a-4697-8877-66554433aa11"
CAPMOX_SECRET = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
PROXMOX_ADDRESS = "192.168.0.8"
PROXMOX_PORT = 8006
VM_ADDRESS = "192.168.4.21"


def _readme_first_run(engine: Engine, secrets: dict[str, str]) -> list[dict[str, Any]]:
    """The README's first-run steps, literally: stack init, the public key, the secrets (which
    `pulumi config set --secret KEY` reads from stdin when it is not a terminal)."""
    key = engine.root / ".ssh" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "owner@laptop", "-f", str(key)], check=True)
    steps = [
        ("stack", "init", "lab"),
        ("config", "set", "--path", "sshPublicKeys[0]", key.with_suffix(".pub").read_text().strip()),
    ]
    ran = [_step(engine, args) for args in steps]
    for name, value in secrets.items():
        ran.append(_step(engine, ("config", "set", "--secret", name), stdin=value))
    ran.append(_step(engine, ("config", "set", "--secret", "sshPrivateKey"), stdin=key.read_text()))
    return ran


def _step(engine: Engine, args: tuple[str, ...], stdin: str | None = None) -> dict[str, Any]:
    done = engine.pulumi(*args, stdin=stdin)
    return {"args": list(args), "rc": done.returncode, "output": done.stdout + done.stderr}


def _lab_secrets() -> dict[str, str]:
    return {"proxmoxApiTokenSecret": PROGRAM_SECRET, "capmoxTokenSecret": CAPMOX_SECRET}


def readme_first_run(root: str) -> dict[str, Any]:
    engine = fresh_engine(Path(root))
    steps = _readme_first_run(engine, _lab_secrets())
    config = engine.pulumi("config", "--json")
    return {
        "steps": steps,
        "stack_file": (engine.project / "Pulumi.lab.yaml").read_text(),
        "config_rc": config.returncode,
        "config": config.stdout,
    }


def cli_preview(root: str, unset: list[str], settings: dict[str, str]) -> dict[str, Any]:
    """The README's steps, then config changes, then `pulumi preview --stack lab` as typed."""
    engine = fresh_engine(Path(root))
    steps = _readme_first_run(engine, _lab_secrets())
    for key in unset:
        steps.append(_step(engine, ("config", "rm", key)))
    for key, value in settings.items():
        steps.append(_step(engine, ("config", "set", key, value)))
    preview = engine.pulumi("preview", "--stack", "lab")
    return {"steps": steps, "rc": preview.returncode, "output": preview.stdout + preview.stderr}


def inline_preview(
    root: str, settings: dict[str, str], secrets: dict[str, str], tokens: list[Any], legacy_layout: bool = False
) -> dict[str, Any]:
    """The README's steps with `secrets`, then `settings`, then a preview by the real engine
    with the Proxmox VE API stand-in at the lab's address answering from `tokens`
    ([token id, secret, permissions] triples)."""
    engine = fresh_engine(Path(root), legacy_layout=legacy_layout)
    steps = _readme_first_run(engine, {**_lab_secrets(), **secrets})
    for key, value in settings.items():
        steps.append(_step(engine, ("config", "set", key, value)))
    table = {(token_id, secret): permissions for token_id, secret, permissions in tokens}
    with pve_api_standin.serve(table, engine.root, (PROXMOX_ADDRESS, PROXMOX_PORT)) as standin:
        try:
            engine.inline_stack().preview()
            error = ""
        except auto.CommandError as failed:
            error = str(failed)
    stacks = engine.root / "state" / ".pulumi" / "stacks"
    return {
        "steps": steps,
        "error": error,
        "requests": standin.requests,
        "unknown": standin.unknown,
        "state_files": sorted(str(path.relative_to(stacks)) for path in stacks.rglob("*.json")),
    }


HELMCHART_CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: helmcharts.helm.cattle.io
spec:
  group: helm.cattle.io
  names: {kind: HelmChart, listKind: HelmChartList, plural: helmcharts, singular: helmchart}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""
# helm-controller's finalizer: while it is on, deleting the HelmChart waits for the controller,
# which would run `helm delete` for a chart it still manages.
HELM_CONTROLLER_FINALIZER = "wrangler.cattle.io/on-helm-chart-remove"
# The playbook's two charts (names from its install jobs) and one k3s keeps managing.
PLAYBOOK_CHARTS = {
    "cert-manager": ("cert-manager", "https://charts.jetstack.io", "v1.21.2"),
    "cluster-api-operator": (
        "capi-operator-system",
        "https://kubernetes-sigs.github.io/cluster-api-operator",
        "0.28.0",
    ),
    "traefik": ("kube-system", "https://traefik.github.io/charts", "37.1.1"),
}
HANDED_OVER = ["cert-manager", "cluster-api-operator"]


def _helmchart(name: str) -> str:
    target, repo, version = PLAYBOOK_CHARTS[name]
    return (
        f"apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n  name: {name}\n  namespace: kube-system\n"
        f"  finalizers: [{HELM_CONTROLLER_FINALIZER}]\n"
        f"spec:\n  chart: {name}\n  repo: {repo}\n  version: {version}\n  targetNamespace: {target}\n"
    )


def _release_secret(name: str) -> str:
    """What `helm install` (run by helm-controller's job) keeps of a release."""
    namespace = PLAYBOOK_CHARTS[name][0]
    return (
        f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: sh.helm.release.v1.{name}.v1\n  namespace: {namespace}\n"
        f"  labels: {{owner: helm, name: {name}, status: deployed, version: '1'}}\n"
        "type: helm.sh/release.v1\ndata: {release: H4sIAAAAAAAA/wMAAAAAAAAAAAA=}\n"
    )


def _k3s_on_path(directory: Path, kubectl: Path, kubeconfig: Path) -> dict[str, str]:
    """`k3s kubectl` as the real kubectl against the box's API server; any other k3s command is
    refused loudly. `python3` is this interpreter, which has PyYAML as Ubuntu's has."""
    directory.mkdir()
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


def helmchart_handover(root: str) -> dict[str, Any]:
    """The playbook's HelmCharts and release Secrets on a real API server, then the hand-over
    script twice, as docs/adoption.md runs it."""
    base = Path(root)
    with control_plane.running(base / "control-plane", VM_ADDRESS) as cluster:
        cluster.kubectl("apply", "-f", "-", stdin=HELMCHART_CRD)
        cluster.kubectl("wait", "--for=condition=Established", "crd/helmcharts.helm.cattle.io", "--timeout=60s")
        for name, (namespace, _, _) in PLAYBOOK_CHARTS.items():
            if namespace != "kube-system":
                cluster.kubectl("create", "namespace", namespace)
            cluster.kubectl("apply", "-f", "-", stdin=_helmchart(name))
        for name in HANDED_OVER:
            cluster.kubectl("apply", "-f", "-", stdin=_release_secret(name))
        manifests = base / "manifests"
        manifests.mkdir()
        for name in PLAYBOOK_CHARTS:
            (manifests / f"{name}.yaml").write_text(_helmchart(name))

        def releases() -> Any:
            listed = cluster.kubectl("get", "secret", "-A", "-l", "owner=helm", "-o", "json").stdout
            return sorted(
                (item["metadata"]["name"], item["metadata"]["uid"], item["metadata"]["resourceVersion"])
                for item in json.loads(listed)["items"]
            )

        before = releases()
        env = {
            **_k3s_on_path(base / "bin", cluster.bin_dir / "kubectl", cluster.kubeconfig),
            "K3S_MANIFESTS_DIR": str(manifests),
        }
        script = REPO / "components" / "scripts" / "helmchart_handover.sh"
        runs = []
        for _ in range(2):
            audited = len(cluster.audit())
            done = subprocess.run(
                ["bash", str(script), *HANDED_OVER], env=env, capture_output=True, text=True, timeout=180, check=False
            )
            runs.append(
                {
                    "rc": done.returncode,
                    "stdout": done.stdout,
                    "stderr": done.stderr,
                    "requests": [_request(event) for event in cluster.audit()[audited:]],
                }
            )
        charts = cluster.kubectl("get", "helmchart", "-n", "kube-system", "-o", "name").stdout.split()
        return {
            "runs": runs,
            "charts_left": charts,
            "releases_before": before,
            "releases_after": releases(),
            "manifests_left": sorted(p.name for p in manifests.iterdir()),
            "handed_over_files": sorted(p.name for p in (base / "manifests-handed-over").iterdir()),
        }


def _request(event: dict[str, Any]) -> list[Any]:
    """[verb, resource, name, what was sent (patches only)] of an audit event."""
    ref = event.get("objectRef", {})
    sent = event.get("requestObject") if event["verb"] == "patch" else None
    return [event["verb"], ref.get("resource", ""), ref.get("name", ""), sent]
