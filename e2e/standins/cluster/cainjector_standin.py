"""A stand-in for cert-manager's CA injector (cainjector), which cannot run in the box (no kubelet,
no cert-manager image): once a webhook configuration carrying `cert-manager.io/inject-ca-from` has
existed for a while, it writes the CA of the certificate the annotation names into every one of its
webhooks' `clientConfig.caBundle`, as cainjector does some time after the chart that made the
configuration was installed. Until then the API server cannot call the webhook (the box's webhook
server's certificate is trusted by nothing else: e2e/standins/cluster/admission_webhook_standin.py).

It knows the certificates it is given (namespace/name -> the CA's PEM file); an annotation naming
any other is an error, never injected. It records each injection, and writes again wherever a
bundle is not what it injects. A configuration it is told to withhold it leaves as it is until it is
told to release it: a cainjector that never gets to it.

It talks to the API server under an identity of its own, so its writes are not the engine's. Until
the cluster exists (its kubeconfig is written once the API server answers) it waits.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.engine.control_plane import INJECTOR_USER, ControlPlane
from e2e.engine.kube_api import Api, ApiError
from e2e.standins.cluster.controller_loop import looping, refused

INJECT_CA_FROM = "cert-manager.io/inject-ca-from"
ADMISSION = "admissionregistration.k8s.io/v1"
KINDS = {
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
}


@dataclass
class CainjectorStandIn:
    delay_seconds: float
    bundles: dict[str, str]
    """namespace/name of a certificate -> its CA as caBundle holds it (PEM, in base64)."""
    injected: list[dict[str, Any]] = field(default_factory=list)
    """kind, name and the time.time() of each write of a configuration's bundles."""
    errors: list[str] = field(default_factory=list)
    withheld: set[str] = field(default_factory=set)
    """kind/name of each configuration it leaves as it is."""

    def withhold(self, kind: str, name: str) -> None:
        """From now on, until `release`, that configuration gets no CA bundle."""
        # A kind it never injects into would get no bundle anyway: withholding it proves nothing.
        if kind not in KINDS:
            raise ValueError(f"the CA injector stand-in injects into {', '.join(KINDS)}, not {kind}")
        self.withheld.add(f"{kind}/{name}")

    def release(self, kind: str, name: str) -> None:
        """That configuration gets its bundle again, as any other."""
        configuration = f"{kind}/{name}"
        if configuration not in self.withheld:
            raise KeyError(f"{configuration} is not withheld")
        self.withheld.remove(configuration)


def _inject(cluster: ControlPlane, standin: CainjectorStandIn, seen: dict[str, float]) -> None:
    api = Api.from_kubeconfig(cluster.kubeconfig_of(INJECTOR_USER))
    try:
        listed = [item for resource in KINDS.values() for item in api.items(ADMISSION, resource) or []]
    except ApiError as error:
        refused(standin.errors, error)
        return
    for item in listed:
        meta = item["metadata"]
        source = (meta.get("annotations") or {}).get(INJECT_CA_FROM)
        configuration = f"{item['kind']}/{meta['name']}"
        if source is None or configuration in standin.withheld:
            continue
        if source not in standin.bundles:
            unknown = f"{configuration}: no certificate {source} to inject (knows {sorted(standin.bundles)})"
            if unknown not in standin.errors:
                standin.errors.append(unknown)
            continue
        first_seen = seen.setdefault(meta["uid"], time.monotonic())
        webhooks = item.get("webhooks") or []
        bundle = standin.bundles[source]
        if time.monotonic() - first_seen < standin.delay_seconds or all(
            webhook["clientConfig"].get("caBundle") == bundle for webhook in webhooks
        ):
            continue
        # Every webhook in one write, as cainjector does.
        patch = [
            {"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": bundle}
            for index in range(len(webhooks))
        ]
        try:
            api.json_patch(item, patch)
        except ApiError as error:
            refused(standin.errors, error)
            continue
        standin.injected.append({"kind": item["kind"], "name": meta["name"], "at": time.time()})


@contextmanager
def running(
    cluster: ControlPlane, certificates: Mapping[str, Path], delay_seconds: float
) -> Iterator[CainjectorStandIn]:
    """Injects, on `cluster` for the block, the CA of each of `certificates` (namespace/name -> PEM
    file) into the webhook configurations that name it, each `delay_seconds` after it appeared."""
    standin = CainjectorStandIn(
        delay_seconds,
        {source: base64.b64encode(path.read_bytes()).decode() for source, path in certificates.items()},
    )
    seen: dict[str, float] = {}
    with looping(cluster, INJECTOR_USER, lambda: _inject(cluster, standin, seen), standin.errors, "inject"):
        yield standin
