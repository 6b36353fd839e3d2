"""A stand-in for cluster-api-operator's admission webhook server, which cannot run in the box (no
kubelet, no operator image): HTTPS with a certificate of its own, self-signed as chart 0.28.0's
cert-manager Issuer makes the operator's serving certificate, so that the API server cannot call
it until cert-manager's CA injector (e2e/standins/cluster/cainjector_standin.py) has put that certificate in the
webhook configurations' caBundle; before that, the API server's call fails on x509 and, the
webhooks failing closed, every provider CR is refused, as on the lab.

It answers AdmissionReview v1 with `allowed: true` for the provider kinds it knows, on the path of
each kind's webhook, and records every review (which webhook, kind, namespace, name, operation,
dry run). A review of any other kind or path, or a request it cannot read, is recorded as unknown
and refused, naming what it did not know, so a test can fail on it.

`configurations(url)` are the two webhook configurations as the box's operator chart holds them
(names, annotation, rules and failure policy as chart 0.28.0's), calling the server at `url`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import yaml

from e2e.standins import https_server
from e2e.standins.cluster import playbook_lab
from e2e.standins.cluster.cainjector_standin import INJECT_CA_FROM

# The name the API server calls the chart's webhook Service by. The box has no Services' network:
# a box guest's /etc/hosts points the name at the box, where the stand-in listens on PORT: not the
# chart's 9443, which CAPMOX's manager takes on every address of the box (e2e/controllers/capmox.py).
HOST = "capi-operator-webhook-service.capi-operator-system.svc"
PORT = 9543
SERVING_CERT = "capi-operator-serving-cert"
# The certificate as the configurations' annotation names it for the release, in its namespace.
CERTIFICATE = f"{playbook_lab.PLAYBOOK_CHARTS['cluster-api-operator'][0]}/{SERVING_CERT}"
CONFIGURATION_NAMES = {
    "ValidatingWebhookConfiguration": "capi-operator-validating-webhook-configuration",
    "MutatingWebhookConfiguration": "capi-operator-mutating-webhook-configuration",
}
# Each configuration's webhooks by the path they are served at, as controller-runtime names a
# webhook's path after its group, version and kind.
ACTIONS = {"ValidatingWebhookConfiguration": "validate", "MutatingWebhookConfiguration": "mutate"}
VERSION = "v1alpha2"


def _path(action: str, kind: str) -> str:
    return f"/{action}-{playbook_lab.PROVIDER_GROUP.replace('.', '-')}-{VERSION}-{kind.lower()}"


PATHS = {_path(action, kind): (action, kind) for action in ACTIONS.values() for kind in playbook_lab.PROVIDERS}


def configurations(url: str) -> tuple[str, ...]:
    """The validating and the mutating webhook configuration as chart templates: one webhook per
    provider kind on CREATE and UPDATE, failing closed, with no caBundle (the injector's to fill)."""
    templates = []
    for kind, name in CONFIGURATION_NAMES.items():
        action = ACTIONS[kind]
        webhooks = [
            {
                "name": f"{action[0]}{provider.lower()}.{playbook_lab.PROVIDER_GROUP}",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "clientConfig": {"url": url + _path(action, provider)},
                "rules": [
                    {
                        "apiGroups": [playbook_lab.PROVIDER_GROUP],
                        "apiVersions": [VERSION],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [f"{provider.lower()}s"],
                    }
                ],
            }
            for provider in playbook_lab.PROVIDERS
        ]
        configuration = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {
                "name": name,
                "annotations": {INJECT_CA_FROM: "{{ .Release.Namespace }}/" + SERVING_CERT},
            },
            "webhooks": webhooks,
        }
        templates.append(yaml.safe_dump(configuration, sort_keys=False))
    return tuple(templates)


@dataclass
class WebhookStandIn:
    url: str
    """https://ADDRESS:PORT, which the certificate names with HOST."""
    certificate: Path
    """Its serving certificate, which is its own CA: what the injector puts in caBundle."""
    reviews: list[dict[str, Any]] = field(default_factory=list)
    """webhook (validate or mutate), kind, namespace, name, operation, dry_run and the time.time()."""
    unknown: list[str] = field(default_factory=list)


def _review(standin: WebhookStandIn, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """The HTTP status and the answer to one call of the API server."""
    try:
        review = json.loads(body)
        request = review["request"]
        uid, kind, operation = request["uid"], request["kind"]["kind"], request["operation"]
    except (ValueError, KeyError, TypeError) as unreadable:
        standin.unknown.append(f"POST {path}: not an AdmissionReview: {unreadable!r}")
        return 400, {"error": f"the webhook stand-in cannot read this review: {unreadable!r}"}
    # The API server adds its own timeout as a query.
    known = PATHS.get(path.split("?", 1)[0])
    if known is None or known[1] != kind or review.get("apiVersion") != "admission.k8s.io/v1":
        said = f"{review.get('apiVersion')} review of {kind} {request.get('name')} at {path}"
        standin.unknown.append(said)
        refused = {"allowed": False, "status": {"code": 400, "message": f"the webhook stand-in does not know {said}"}}
        return 200, _answer(uid, refused)
    standin.reviews.append(
        {
            "webhook": known[0],
            "kind": kind,
            "namespace": request.get("namespace", ""),
            "name": request.get("name", ""),
            "operation": operation,
            "dry_run": bool(request.get("dryRun")),
            "at": time.time(),
        }
    )
    return 200, _answer(uid, {"allowed": True})


def _answer(uid: str, response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": uid, **response}}


@contextmanager
def serve(directory: Path, address: str, port: int = PORT) -> Iterator[WebhookStandIn]:
    """The webhook server at https://`address`:`port` for the block."""
    key, cert = https_server.self_signed_certificate(directory, SERVING_CERT, address, (HOST,))
    standin = WebhookStandIn(url=f"https://{address}:{port}", certificate=cert)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status, answer = _review(standin, self.path, body)
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            standin.unknown.append(f"GET {self.path}")
            payload = f"the webhook stand-in does not know GET {self.path}".encode()
            self.send_response(404)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            """Reviews are recorded above; nothing goes to stderr."""

    with https_server.serving(Handler, (address, port), key, cert):
        yield standin
