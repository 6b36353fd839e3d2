"""cert-manager's real controller and CA injector (e2e/controllers/cert_manager.py) on a real control
plane, without the rest of the box (issue 68): cert-manager's release as the program renders it
laid out and its two components run, then the operator's chart as the program renders it gives
them what it gives them on the owner's lab: its self-signed Issuer, the Certificate of its webhook
server and the two webhook configurations the program waits on, which ask the injector for that
Certificate's CA. Beside them, a configuration that names a Certificate no one made (the control).
tests/test_cert_manager_real.py runs it (`in_new_netns("management.cert_manager_trial.issued_and_injected", ...)`)
and reads what each wrote, as whom, and when.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

from components.cluster_api import CERT_MANAGER_NAMESPACE, CERT_MANAGER_VALUES, OPERATOR_NAMESPACE, OPERATOR_VALUES
from e2e.box.management import webhook_trial
from e2e.box.scenarios import VM_ADDRESS
from e2e.controllers import cert_manager, upstream_charts
from e2e.engine import control_plane

BOUND_SECONDS = 60.0
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
OPERATOR_KINDS = ("Issuer", "Certificate", *WEBHOOK_KINDS)
# A configuration that asks for a Certificate no one made (the stand-ins' trial's); its rule matches
# nothing sent.
UNISSUED = webhook_trial.OTHER


def _bundles(cluster: control_plane.ControlPlane) -> dict[str, list[str]]:
    """Each webhook configuration's CA bundles (decoded PEM) as the API server holds them."""
    listed = json.loads(cluster.kubectl("get", ",".join(k.lower() for k in WEBHOOK_KINDS), "-o", "json").stdout)
    return {
        f"{item['kind']}/{item['metadata']['name']}": [
            base64.b64decode(webhook["clientConfig"].get("caBundle", "")).decode() for webhook in item["webhooks"]
        ]
        for item in listed["items"]
    }


def _writes(cluster: control_plane.ControlPlane, users: set[str]) -> list[list[str]]:
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


def issued_and_injected(root: str) -> dict[str, Any]:
    base = Path(root)
    charts = base / "charts"
    charts.mkdir(parents=True)
    cert_manager_release = upstream_charts.rendered(
        upstream_charts.cert_manager(charts), "cert-manager", CERT_MANAGER_NAMESPACE, CERT_MANAGER_VALUES, charts
    )
    operator_release = upstream_charts.rendered(
        upstream_charts.operator(charts), "cluster-api-operator", OPERATOR_NAMESPACE, OPERATOR_VALUES, charts
    )
    operators = [document for document in operator_release if document["kind"] in OPERATOR_KINDS]
    out: dict[str, Any] = {"sent": [f"{d['kind']}/{d['metadata']['name']}" for d in operators]}
    with control_plane.running(base / "control-plane", VM_ADDRESS) as cluster:
        for namespace in (CERT_MANAGER_NAMESPACE, OPERATOR_NAMESPACE):
            cluster.kubectl("create", "namespace", namespace)
        cert_manager.installed(cluster, cert_manager_release)
        with (
            cert_manager.running(
                cluster, base / "cert-manager", cert_manager_release, cert_manager.CONTROLLER
            ) as controller,
            cert_manager.running(
                cluster, base / "cert-manager", cert_manager_release, cert_manager.CAINJECTOR
            ) as injector,
        ):
            out["processes"] = {
                run.deployment: {
                    "exe": str(Path(f"/proc/{run.pid}/exe").resolve()),
                    "args": list(run.args),
                    "user": run.user,
                }
                for run in (controller, injector)
            }
            sent = time.monotonic()
            items = [*operators, UNISSUED]
            cluster.kubectl(
                "apply",
                "--server-side",
                "-f",
                "-",
                stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
            )
            awaited = {f"{d['kind']}/{d['metadata']['name']}" for d in operators if d["kind"] in WEBHOOK_KINDS}
            deadline = time.monotonic() + BOUND_SECONDS
            while not all(all(bundle) for name, bundle in _bundles(cluster).items() if name in awaited):
                if time.monotonic() > deadline:
                    out["failed"] = (
                        f"not injected within {BOUND_SECONDS}s\n{controller.log_tail()}\n{injector.log_tail()}"
                    )
                    break
                time.sleep(0.5)
            out["injected_seconds"] = round(time.monotonic() - sent, 1)
            out["awaited"] = sorted(awaited)
            out["bundles"] = _bundles(cluster)
            [certificate] = [d for d in operators if d["kind"] == "Certificate"]
            out["certificate"] = certificate
            found = cluster.kubectl_as(
                cluster.kubeconfig,
                "get",
                "secret",
                certificate["spec"]["secretName"],
                "-n",
                OPERATOR_NAMESPACE,
                "-o",
                "json",
            )
            out["secret"] = json.loads(found.stdout) if found.returncode == 0 else None
            out["certificate_status"] = json.loads(
                cluster.kubectl(
                    "get", "certificate", certificate["metadata"]["name"], "-n", OPERATOR_NAMESPACE, "-o", "json"
                ).stdout
            ).get("status", {})
            out["writes"] = _writes(cluster, {controller.user, injector.user})
            out["alive"] = {run.deployment: Path(f"/proc/{run.pid}").exists() for run in (controller, injector)}
    return out
