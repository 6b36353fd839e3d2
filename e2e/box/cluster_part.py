"""What the scenarios of the program's cluster part (box_program.py) share, on a real API server
with no VM: the operator's chart and its webhooks, called on the loopback of the test's network
namespace, the engine running the box's program, and each run with the writes it sent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from e2e.box import box_program
from e2e.box.scenarios import WRITES
from e2e.engine import control_plane
from e2e.engine.cli import Engine, fresh_engine
from e2e.standins.cluster import admission_webhook_standin, cainjector_standin, chart_repo_standin, playbook_lab

# The operator chart's webhook configurations, calling the webhook server stand-in on the loopback
# of the test's network namespace, where these scenarios run their control plane.
OPERATOR_WEBHOOK_ADDRESS = "127.0.0.1"
CHART_TEMPLATES = {
    "cluster-api-operator": admission_webhook_standin.configurations(
        f"https://{OPERATOR_WEBHOOK_ADDRESS}:{admission_webhook_standin.PORT}"
    )
}
# How long after the webhook configurations appear the CA injector stand-in fills them in.
INJECT_SECONDS = 3.0
# The chart repositories' stand-in serves these at these paths.
CHART_REPOS = {
    "jetstack": [chart_repo_standin.Chart("cert-manager", playbook_lab.PLAYBOOK_CHARTS["cert-manager"][2])],
    "capi-operator": [
        chart_repo_standin.Chart(
            "cluster-api-operator",
            playbook_lab.PLAYBOOK_CHARTS["cluster-api-operator"][2],
            templates=CHART_TEMPLATES["cluster-api-operator"],
        )
    ],
}
# The operator's chart as a fresh install serves it: with the provider CRDs, which a first run
# needs before its provider CRs (the adoption scenarios' lab has them already).
OPERATOR_CHART_WITH_CRDS = chart_repo_standin.Chart(
    "cluster-api-operator",
    playbook_lab.PLAYBOOK_CHARTS["cluster-api-operator"][2],
    tuple(playbook_lab.provider_crd(kind) for kind in playbook_lab.PROVIDERS),
    CHART_TEMPLATES["cluster-api-operator"],
)


@contextmanager
def _operator_webhooks(
    cluster: control_plane.ControlPlane, base: Path
) -> Iterator[tuple[admission_webhook_standin.WebhookStandIn, cainjector_standin.CainjectorStandIn]]:
    """The operator's webhook server that CHART_TEMPLATES call, and cert-manager's CA injector
    making them callable on `cluster`, for the block."""
    with (
        admission_webhook_standin.serve(base, OPERATOR_WEBHOOK_ADDRESS) as webhook,
        cainjector_standin.running(
            cluster, {admission_webhook_standin.CERTIFICATE: webhook.certificate}, INJECT_SECONDS
        ) as injector,
    ):
        yield webhook, injector


def _webhook_standins(
    webhook: admission_webhook_standin.WebhookStandIn, injector: cainjector_standin.CainjectorStandIn
) -> dict[str, Any]:
    """What the webhook and CA injector stand-ins could not answer or do; each must be empty."""
    return {"webhook_unknown": webhook.unknown, "injector_errors": injector.errors}


def _engine_run(
    engine: Engine, cluster: control_plane.ControlPlane, action: str, targets: list[str] | None = None
) -> dict[str, Any]:
    """One `pulumi preview` or `pulumi up` of the box program: each resource's step, the error if
    it failed, and every write the engine (the admin user) sent to the API server."""
    audited = cluster.audit_mark()
    started = time.time()
    run = engine.run(action, targets=targets or ())
    writes = [request for request in _requests_since(cluster, audited) if request[0] in WRITES]
    return {
        "action": action,
        "steps": run.steps(),
        "summary": run.summary(),
        "error": run.output if run.rc != 0 else "",
        "writes": writes,
        "warnings": run.diagnostics("warning"),
        "started": started,
        "finished": time.time(),
    }


def _box_engine(
    base: Path,
    charts: chart_repo_standin.ChartRepoStandIn,
    cluster: control_plane.ControlPlane,
    *,
    workload_clusters: bool = False,
    folder: str = "engine",
    passphrase: str | None = None,
) -> Engine:
    """The engine running the box's program (e2e/box/box_program.py) against `cluster`, trusting the
    chart repositories' stand-in; Pulumi.lab.yaml's workload clusters kept with `workload_clusters`.
    Another `folder` is another laptop's (its own backend), and `passphrase` its stack's."""
    return fresh_engine(
        base / folder,
        extra_env={
            "SSL_CERT_FILE": str(charts.certificate),
            box_program.KUBECONFIG_VARIABLE: str(cluster.kubeconfig),
            **({"PULUMI_CONFIG_PASSPHRASE": passphrase} if passphrase else {}),
        },
        main=Path(box_program.__file__),
        workload_clusters=workload_clusters,
    )


def _requests_since(
    cluster: control_plane.ControlPlane, mark: int, user: str = control_plane.ADMIN_USER
) -> list[list[Any]]:
    """What `user` asked after the audit log's `mark`; by default the box's admin (scripts, kubectl,
    the engine), whose requests leave out the API server's own upkeep."""
    return [
        _request(event)
        for event in cluster.audit()[mark:]
        if event.get("user", {}).get("username") == user
        # A preview's server-side dry runs change nothing.
        and "dryRun=All" not in event.get("requestURI", "")
    ]


def _request(event: dict[str, Any]) -> list[Any]:
    """[verb, resource, name, what was sent (patches only)] of an audit event."""
    ref = event.get("objectRef", {})
    sent = event.get("requestObject") if event["verb"] == "patch" else None
    return [event["verb"], ref.get("resource", ""), ref.get("name", ""), sent]
