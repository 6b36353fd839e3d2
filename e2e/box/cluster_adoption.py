"""Adoption of the playbook's lab by the program's cluster part (tests/test_box_adoption.py): the
playbook's lab and lab1 on real API servers, docs/adoption.md followed as far as the box goes,
then the stack managing the lab as docs/operations.md says.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from e2e.box.cluster_part import (
    CHART_REPOS,
    CHART_TEMPLATES,
    _box_engine,
    _engine_run,
    _operator_webhooks,
    _requests_since,
    _webhook_standins,
)
from e2e.box.handover import _handover, _playbook_capmox_data
from e2e.box.scenarios import (
    BUMPED_CAPMOX,
    LAB1_ADDRESS,
    OPERATOR_INSTALL_SECONDS,
    PROVIDER_CR_RESOURCES,
    RELEASE_RESOURCES,
    VM_ADDRESS,
    WRITES,
    _lab_secrets,
    _readme_first_run,
    _step,
)
from e2e.engine import control_plane
from e2e.engine.cli import Engine
from e2e.standins.cluster import admission_webhook_standin, chart_repo_standin, operator_standin, playbook_lab


def _adopting(
    base: Path,
    charts: chart_repo_standin.ChartRepoStandIn,
    cluster: control_plane.ControlPlane,
) -> tuple[Engine, list[dict[str, Any]]]:
    """docs/adoption.md step 2 on a fresh laptop: the README's first run, the adoption settings;
    the chart repositories are the stand-in's."""
    engine = _box_engine(base, charts, cluster)
    steps = _readme_first_run(engine, _lab_secrets())
    return engine, steps + adoption_settings(engine, charts)


def adoption_settings(engine: Engine, charts: chart_repo_standin.ChartRepoStandIn) -> list[dict[str, Any]]:
    """docs/adoption.md step 2 after the README's first run: the adoption settings; the chart
    repositories are the stand-in's."""
    settings: list[tuple[str, ...]] = [
        ("adopt", "true"),
        ("--plaintext", "capmoxExistingSecret", playbook_lab.CAPMOX_SECRET),
        ("certManagerChartRepo", f"{charts.url}/jetstack"),
        ("capiOperatorChartRepo", f"{charts.url}/capi-operator"),
    ]
    return [_step(engine, ("config", "set", *setting)) for setting in settings]


def adoption_of_an_incomplete_lab(root: str) -> dict[str, Any]:
    """The adoption preview on a lab that lacks one of the objects the program imports (the
    IPAMProvider): the preview must stop, creating nothing in its place."""
    base = Path(root)
    with (
        control_plane.running(base / "control-plane", VM_ADDRESS) as cluster,
        _operator_webhooks(cluster, base) as (webhook, injector),
    ):
        playbook_lab.lay_out(cluster, base / "manifests", _playbook_capmox_data(), chart_templates=CHART_TEMPLATES)
        cluster.kubectl(
            "delete", f"ipamprovider.{playbook_lab.PROVIDER_GROUP}", "in-cluster", "-n", "capi-ipam-in-cluster-system"
        )
        _handover(cluster, base, base / "manifests")
        with chart_repo_standin.serve(CHART_REPOS, base) as charts:
            engine, steps = _adopting(base, charts, cluster)
            preview = _engine_run(engine, cluster, "preview")
        return {"steps": steps, "preview": preview, **_webhook_standins(webhook, injector)}


def adoption_run(root: str) -> dict[str, Any]:
    """docs/adoption.md's steps on the playbook's lab and lab1, as far as the box goes
    (e2e/box/box_program.py): the hand-over and the stack config, the adoption
    preview and `pulumi up`, then a second preview and up, which must find nothing to do; what
    the read-only kubeconfigs may do; then the convergence runs. Both clusters' objects are read
    before and after, and every write the engine sent is read from their audit logs."""
    base = Path(root)
    with (
        control_plane.running(base / "control-plane", VM_ADDRESS) as cluster,
        control_plane.running(base / "lab1", LAB1_ADDRESS) as lab1,
        operator_standin.running(cluster, playbook_lab.PROVIDER_RESOURCES, OPERATOR_INSTALL_SECONDS) as operator,
        _operator_webhooks(cluster, base) as (webhook, injector),
    ):
        manifests = base / "manifests"
        playbook_lab.lay_out(
            cluster, manifests, _playbook_capmox_data(), lab1.kubeconfig.read_text(), chart_templates=CHART_TEMPLATES
        )
        playbook_lab.lay_out_lab1(lab1)
        cluster.kubectl(
            *("wait", "--for=condition=Ready", ",".join(playbook_lab.PROVIDER_RESOURCES), "--all", "-A"),
            "--timeout=60s",
        )
        handover = _handover(cluster, base, manifests)
        before = playbook_lab.snapshot(cluster)
        lab1_before = playbook_lab.snapshot(lab1, playbook_lab.CORE_KINDS)
        lab1_mark = len(lab1.audit())
        with chart_repo_standin.serve(CHART_REPOS, base) as charts:
            engine, steps = _adopting(base, charts, cluster)
            runs = [_engine_run(engine, cluster, action) for action in ("preview", "up", "preview", "up")]
            outputs = engine.outputs()
            readonly = _readonly_reads(
                cluster,
                base / "readonly.kubeconfig",
                outputs["readonlyKubeconfig"],
                coreproviders=("get", f"coreproviders.{playbook_lab.PROVIDER_GROUP}", "-A"),
            )
            lab1_writes = [request for request in _requests_since(lab1, lab1_mark) if request[0] in WRITES]
            adopted = playbook_lab.snapshot(cluster)
            convergence = _converge(engine, cluster, runs[1]["steps"])
            managed = _manage(engine, cluster, operator)
        return {
            "handover": handover,
            "steps": steps,
            "runs": runs,
            "provider_versions": outputs["providerVersions"],
            "secret_outputs": engine.secret_outputs(),
            "readonly": readonly,
            "lab1_before": lab1_before,
            "lab1_after": playbook_lab.snapshot(lab1, playbook_lab.CORE_KINDS),
            "lab1_writes": lab1_writes,
            "chart_requests": charts.requests,
            "chart_unknown": charts.unknown,
            "before": before,
            "after": adopted,
            "convergence": convergence,
            "managed": managed,
            "operator_errors": operator.errors,
            **_webhook_standins(webhook, injector),
            "converged": playbook_lab.snapshot(cluster),
        }


def _manage(
    engine: Engine, cluster: control_plane.ControlPlane, operator: operator_standin.OperatorStandIn
) -> dict[str, Any]:
    """docs/operations.md on the adopted and converged stack: a provider version bump is one CR
    updated, and `pulumi up` returns once the operator has installed it; two bumps at once are
    refused at preview."""
    steps = [_step(engine, ("config", "set", "capmoxVersion", BUMPED_CAPMOX))]
    preview = _engine_run(engine, cluster, "preview")
    up = _engine_run(engine, cluster, "up")
    versions = engine.outputs()["providerVersions"]
    for setting in ("capiCoreVersion", "capiBootstrapVersion"):
        steps.append(_step(engine, ("config", "set", setting, "v1.12.12")))
    return {
        "steps": steps,
        "preview": preview,
        "up": up,
        "reconciled_during_up": [
            entry for entry in operator.reconciled if up["started"] <= entry["at"] <= up["finished"]
        ],
        "provider_versions": versions,
        "two_bumps": _engine_run(engine, cluster, "preview"),
    }


def _readonly_reads(
    cluster: control_plane.ControlPlane, path: Path, kubeconfig: str, **more: tuple[str, ...]
) -> dict[str, Any]:
    """What a read-only kubeconfig of the stack may do: the reads in `more` and listing pods; not
    listing Secrets nor deleting a namespace."""
    path.write_text(kubeconfig)
    path.chmod(0o600)
    attempts = {
        "pods": ("get", "pods", "-A"),
        **more,
        "secrets": ("get", "secrets", "-A"),
        "delete namespace": ("delete", "namespace", "kube-system", "--dry-run=server"),
    }
    results = {}
    for name, args in attempts.items():
        done = cluster.kubectl_as(path, *args)
        results[name] = {"rc": done.returncode, "stderr": done.stderr}
    return results


def _converge(
    engine: Engine, cluster: control_plane.ControlPlane, adoption_steps: list[dict[str, str]]
) -> dict[str, Any]:
    """docs/adoption.md step 8, as far as the box goes (the image and the VM are not in it): adoption
    off, then one targeted run per group, each previewed first, then a preview of everything."""
    urns = {step["urn"].rsplit("::", 1)[1]: step["urn"] for step in adoption_steps}
    secret_urn = urns["mgmt-ns-capmox-system"].replace(
        "kubernetes:core/v1:Namespace::mgmt-ns-capmox-system", "kubernetes:core/v1:Secret::mgmt-capmox-credentials"
    )
    groups = {
        "releases": list(RELEASE_RESOURCES),
        "provider CRs": list(PROVIDER_CR_RESOURCES),
        "namespaces": [f"mgmt-ns-{namespace}" for namespace, _, _ in playbook_lab.PROVIDERS.values()],
    }
    steps = [_step(engine, ("config", "set", "adopt", "false"))]
    runs: dict[str, list[dict[str, Any]]] = {}
    for group, names in groups.items():
        targets = [urns[name] for name in names]
        runs[group] = [_engine_run(engine, cluster, action, targets) for action in ("preview", "up")]
    steps.append(_step(engine, ("config", "rm", "capmoxExistingSecret")))
    targets = [secret_urn, urns["mgmt-infrastructure-proxmox"]]
    runs["CAPMOX Secret"] = [_engine_run(engine, cluster, action, targets) for action in ("preview", "up")]
    runs["everything"] = [_engine_run(engine, cluster, "preview")]
    providers = {
        kind: json.loads(
            cluster.kubectl(
                "get", f"{kind.lower()}.{playbook_lab.PROVIDER_GROUP}", name, "-n", namespace, "-o", "json"
            ).stdout
        )
        for kind, (namespace, name, _) in playbook_lab.PROVIDERS.items()
    }
    webhooks = {
        kind: json.loads(cluster.kubectl("get", kind, name, "-o", "json").stdout)
        for kind, name in admission_webhook_standin.CONFIGURATION_NAMES.items()
    }
    return {"steps": steps, "runs": runs, "providers": providers, "webhook_configurations": webhooks}
