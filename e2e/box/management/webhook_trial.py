"""The operator's admission webhooks on a real control plane, without the rest of the box: the
webhook server stand-in (e2e/standins/cluster/admission_webhook_standin.py) behind the chart's two webhook
configurations, and the CA injector stand-in (e2e/standins/cluster/cainjector_standin.py) filling them in, with the
mutating one withheld at first. tests/test_webhook_standins.py runs it
(`in_new_netns("management.webhook_trial.injection", ...)`) and reads what the API server answered a provider
CR at each point, what the injector wrote and what the webhook server reviewed.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from e2e.box import box
from e2e.box.scenarios import VM_ADDRESS
from e2e.engine import control_plane
from e2e.standins.cluster import admission_webhook_standin, cainjector_standin, chart_repo_standin, playbook_lab

DELAY_SECONDS = 2.0
BOUND_SECONDS = 30.0
MUTATING = "MutatingWebhookConfiguration"
WITHHELD = (MUTATING, admission_webhook_standin.CONFIGURATION_NAMES[MUTATING])
CORE = playbook_lab.PROVIDERS["CoreProvider"]
# A webhook configuration that names a certificate the injector was not given; its rule matches
# nothing the trial sends.
OTHER: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "other-webhooks", "annotations": {cainjector_standin.INJECT_CA_FROM: "default/other-cert"}},
    "webhooks": [
        {
            "name": "vwidget.example.com",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"url": "https://127.0.0.1:1/validate-widget"},
            "rules": [
                {"apiGroups": ["example.com"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["w"]}
            ],
        }
    ],
}


def _core_provider(version: str) -> str:
    namespace, name, _ = CORE
    return json.dumps(
        {
            "apiVersion": f"{playbook_lab.PROVIDER_GROUP}/{admission_webhook_standin.VERSION}",
            "kind": "CoreProvider",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"version": version},
        }
    )


def _sent(cluster: control_plane.ControlPlane, verb: str, version: str) -> dict[str, Any]:
    """The admin's CoreProvider, `create`d or `apply`d, and what the API server answered."""
    done = cluster.kubectl_as(cluster.kubeconfig, verb, "-f", "-", stdin=_core_provider(version))
    return {"rc": done.returncode, "stderr": done.stderr, "at": time.time()}


def _until(what: str, done: Any) -> None:
    deadline = time.monotonic() + BOUND_SECONDS
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {BOUND_SECONDS}s")
        time.sleep(0.2)


def _unknown_review(webhook: admission_webhook_standin.WebhookStandIn) -> dict[str, Any]:
    """A review of a kind the server does not know, sent to the CoreProvider's validating path."""
    context = ssl.create_default_context(cafile=str(webhook.certificate))
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0d1c2b3a",
            "kind": {"group": "cluster.x-k8s.io", "version": "v1beta1", "kind": "Machine"},
            "name": "lab1-md-0",
            "operation": "CREATE",
        },
    }
    path = next(path for path, (action, kind) in admission_webhook_standin.PATHS.items() if action == "validate")
    request = urllib.request.Request(  # noqa: S310 - the stand-in's own https URL
        webhook.url + path, data=json.dumps(review).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10, context=context) as answer:  # noqa: S310
        return dict(json.loads(answer.read())["response"])


def bundles(cluster: control_plane.ControlPlane) -> dict[str, list[str]]:
    """Each webhook configuration's CA bundles as the API server holds them."""
    listed = json.loads(cluster.kubectl("get", ",".join(cainjector_standin.KINDS.values()), "-o", "json").stdout)
    return {
        f"{item['kind']}/{item['metadata']['name']}": [
            webhook["clientConfig"].get("caBundle", "") for webhook in item["webhooks"]
        ]
        for item in listed["items"]
    }


def injection(root: str) -> dict[str, Any]:
    """The chart's webhook configurations made, the mutating one withheld from the injector; a
    CoreProvider sent at once, again once the validating one is filled in and the withheld one
    has waited as long, then once that is released and filled in too; then changed (an UPDATE);
    then a review of a kind the server does not know."""
    base = Path(root)
    with (
        control_plane.running(base / "control-plane", VM_ADDRESS) as cluster,
        admission_webhook_standin.serve(base, "127.0.0.1") as webhook,
        cainjector_standin.running(
            cluster, {admission_webhook_standin.CERTIFICATE: webhook.certificate}, DELAY_SECONDS
        ) as injector,
    ):
        injector.withhold(*WITHHELD)
        cluster.kubectl("apply", "-f", "-", stdin=playbook_lab.provider_crd("CoreProvider"))
        cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        cluster.kubectl("create", "namespace", CORE[0])
        _, _, version, _ = playbook_lab.PLAYBOOK_CHARTS["cluster-api-operator"]
        chart = chart_repo_standin.Chart("cluster-api-operator", version)
        made = time.time()
        for template in admission_webhook_standin.configurations(webhook.url):
            rendered = chart_repo_standin.rendered(chart.name, box.OPERATOR_NAMESPACE, chart, template)
            cluster.kubectl("create", "-f", "-", stdin=rendered)
        cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump(OTHER))
        result: dict[str, Any] = {"made": made, "before_injection": _sent(cluster, "create", "v1.12.11")}
        _until("the validating configuration injected", lambda: injector.injected)
        time.sleep(DELAY_SECONDS)
        result["one_withheld"] = _sent(cluster, "create", "v1.12.11")
        result["injected_while_withheld"] = list(injector.injected)
        injector.release(*WITHHELD)
        _until("the mutating configuration injected", lambda: len(injector.injected) == 2)
        result["injected"] = injector.injected
        result["after_injection"] = _sent(cluster, "create", "v1.12.11")
        result["changed"] = _sent(cluster, "apply", "v1.12.12")
        result["bundles"] = bundles(cluster)
        result["reviews"] = webhook.reviews
        result["unknown_review"] = _unknown_review(webhook)
        result["webhook_unknown"] = webhook.unknown
        result["injector_errors"] = injector.errors
        result["certificate"] = webhook.certificate.read_text()
        return result
