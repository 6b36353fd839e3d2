"""cert-manager's real controller, CA injector and webhook (e2e/controllers/cert_manager.py) on a real
control plane, without the rest of the box (issue 68): cert-manager's release as the program
renders it laid out and its three components run, the webhook reached through its Service (a
Certificate shorter than an hour sent, which it alone refuses); then the operator's chart as the
program renders it gives them what it gives them on the owner's lab: its self-signed Issuer, the
Certificate of its webhook server and the two webhook configurations the program waits on, which
ask the injector for that Certificate's CA. Beside them, a configuration that names a Certificate
no one made (the control). tests/test_cert_manager_real.py runs it
(`in_new_netns("management.cert_manager_trial.issued_and_injected", ...)`) and reads what each
wrote, as whom, and when.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from components.cluster_api import CERT_MANAGER_NAMESPACE, CERT_MANAGER_VALUES, OPERATOR_NAMESPACE, OPERATOR_VALUES
from e2e.box.management import webhook_trial
from e2e.box.scenarios import VM_ADDRESS
from e2e.controllers import cert_manager, upstream_charts
from e2e.engine import control_plane

BOUND_SECONDS = 60.0
OPERATOR_KINDS = ("Issuer", "Certificate", *cert_manager.WEBHOOK_CONFIGURATIONS)
# A configuration that asks for a Certificate no one made (the stand-ins' trial's); its rule matches
# nothing sent.
UNISSUED = webhook_trial.OTHER


def writes(cluster: control_plane.ControlPlane, users: set[str]) -> list[list[str]]:
    """Each write by `users`, in order, as [user, verb, resource, namespace/name]."""
    return [
        [
            e["user"]["username"],
            e["verb"],
            e["objectRef"].get("resource", ""),
            f"{e['objectRef'].get('namespace', '')}/{e['objectRef'].get('name', '')}",
        ]
        for e in cluster.audit()
        if e["user"]["username"] in users
        and e["verb"] in {"create", "update", "patch", "delete"}
        and e["stage"] == "ResponseComplete"
    ]


# A Certificate the CRD's schema lets through and the webhook refuses (shorter than an hour).
TOO_SHORT = {
    "apiVersion": "cert-manager.io/v1",
    "kind": "Certificate",
    "metadata": {"name": "too-short", "namespace": OPERATOR_NAMESPACE},
    "spec": {
        "secretName": "too-short",
        "dnsNames": ["too-short.example"],
        "duration": "1m",
        "issuerRef": {"name": "capi-operator-selfsigned-issuer", "kind": "Issuer"},
    },
}


def until_filled(cluster: control_plane.ControlPlane, names: set[str], logs: list[cert_manager.Running]) -> float:
    """Seconds until every webhook of `names` holds a CA bundle; past BOUND_SECONDS a RuntimeError
    with the components' logs."""
    began = time.monotonic()
    while not all(all(bundle) for name, bundle in webhook_trial.bundles(cluster).items() if name in names):
        if time.monotonic() > began + BOUND_SECONDS:
            tails = "\n".join(run.log_tail() for run in logs)
            raise RuntimeError(f"{sorted(names)} not injected within {BOUND_SECONDS}s\n{tails}")
        time.sleep(0.5)
    return round(time.monotonic() - began, 1)


def _secret(cluster: control_plane.ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    found = cluster.kubectl_as(cluster.kubeconfig, "get", "secret", name, "-n", namespace, "-o", "json")
    return json.loads(found.stdout) if found.returncode == 0 else None


Documents = list[dict[str, Any]]


def releases(base: Path) -> tuple[Documents, Documents]:
    """cert-manager's and cluster-api-operator's releases as the program renders them."""
    charts = base / "charts"
    charts.mkdir(parents=True)
    return (
        upstream_charts.rendered(
            upstream_charts.cert_manager(charts), "cert-manager", CERT_MANAGER_NAMESPACE, CERT_MANAGER_VALUES, charts
        ),
        upstream_charts.rendered(
            upstream_charts.operator(charts), "cluster-api-operator", OPERATOR_NAMESPACE, OPERATOR_VALUES, charts
        ),
    )


@contextmanager
def cert_manager_running(
    cluster: control_plane.ControlPlane, base: Path, release: Documents
) -> Iterator[list[cert_manager.Running]]:
    """The two releases' namespaces made, cert-manager's release laid out and its three
    components run, for the block."""
    for namespace in (CERT_MANAGER_NAMESPACE, OPERATOR_NAMESPACE):
        cluster.kubectl("create", "namespace", namespace)
    cert_manager.installed(cluster, release)
    folder = base / "cert-manager"
    with ExitStack() as running:
        yield [
            running.enter_context(cert_manager.running(cluster, folder, release, deployment))
            for deployment in cert_manager.DEPLOYMENTS
        ]


def issued_and_injected(root: str) -> dict[str, Any]:
    """cert-manager's release laid out and its three components run; its own webhook reached
    through its Service once the injector has filled cert-manager's configurations in, and a
    Certificate it refuses sent; then the operator chart's objects and the control."""
    base = Path(root)
    release, operator_release = releases(base)
    operators = [document for document in operator_release if document["kind"] in OPERATOR_KINDS]
    [certificate] = [d for d in operators if d["kind"] == "Certificate"]
    out: dict[str, Any] = {"certificate": certificate}
    folder = base / "cert-manager"
    with (
        control_plane.running(base / "control-plane", VM_ADDRESS, service_routing=True) as cluster,
        cert_manager_running(cluster, base, release) as runs,
    ):
        out["processes"] = {
            run.deployment: {
                "exe": str(Path(f"/proc/{run.pid}/exe").resolve()),
                "args": list(run.args),
                "user": run.user,
            }
            for run in runs
        }
        try:
            out["own_configurations"] = cert_manager.served(cluster, release, VM_ADDRESS)
            # As Helm runs the release's post-install hook: once its objects are made.
            out["startupapicheck"] = cert_manager.ran(cluster, folder, release, cert_manager.STARTUPAPICHECK)
            out["own_injected_seconds"] = until_filled(cluster, set(out["own_configurations"]), runs)
            refused = cluster.kubectl_as(cluster.kubeconfig, "create", "-f", "-", stdin=json.dumps(TOO_SHORT))
            out["too_short"] = {"rc": refused.returncode, "stderr": refused.stderr}
            cert_manager.apply(cluster, [*operators, UNISSUED])
            out["awaited"] = sorted(
                f"{d['kind']}/{d['metadata']['name']}"
                for d in operators
                if d["kind"] in cert_manager.WEBHOOK_CONFIGURATIONS
            )
            out["injected_seconds"] = until_filled(cluster, set(out["awaited"]), runs)
        except RuntimeError as failed:
            out["failed"] = str(failed)
        out["bundles"] = webhook_trial.bundles(cluster)
        out["secret"] = _secret(cluster, OPERATOR_NAMESPACE, certificate["spec"]["secretName"])
        out["webhook_ca"] = _secret(cluster, CERT_MANAGER_NAMESPACE, "cert-manager-webhook-ca")
        status = cluster.kubectl(
            "get", "certificate", certificate["metadata"]["name"], "-n", OPERATOR_NAMESPACE, "-o", "json"
        )
        out["certificate_status"] = json.loads(status.stdout).get("status", {})
        out["writes"] = writes(cluster, {run.user for run in runs})
        out["alive"] = {run.deployment: Path(f"/proc/{run.pid}").exists() for run in runs}
    return out
