"""Adoption by the program's cluster part on a real API server (tests/test_box_adoption.py): the
settings of docs/adoption.md step 2, and a playbook's lab that lacks an object the program imports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e.box.cluster_part import (
    CHART_REPOS,
    CHART_TEMPLATES,
    _box_engine,
    _engine_run,
    _operator_webhooks,
    _webhook_standins,
)
from e2e.box.management import k3s_charts
from e2e.box.management.handover import CONTROLLERS, _handover, _playbook_capmox_data
from e2e.box.scenarios import (
    VM_ADDRESS,
    _lab_secrets,
    _readme_first_run,
    _step,
)
from e2e.controllers import helm_controller
from e2e.engine import control_plane
from e2e.engine.cli import Engine
from e2e.standins.cluster import chart_repo_standin, playbook_lab
from e2e.standins.guest import k3s_deploy


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
        control_plane.running(base / "control-plane", VM_ADDRESS, controllers=CONTROLLERS) as cluster,
        _operator_webhooks(cluster, base) as (webhook, injector),
        k3s_charts.serving(cluster, base, CHART_TEMPLATES) as machinery,
        helm_controller.running(cluster, base / "helm-controller"),
    ):
        playbook_lab.lay_out(
            cluster,
            base / "manifests",
            _playbook_capmox_data(),
            k3s=lambda folder: k3s_deploy.started(cluster.kubeconfig, folder, playbook_lab.K3S_DISABLES),
            installed=lambda: machinery.until_installed(playbook_lab.HANDED_OVER),
        )
        cluster.kubectl(
            "delete", f"ipamprovider.{playbook_lab.PROVIDER_GROUP}", "in-cluster", "-n", "capi-ipam-in-cluster-system"
        )
        _handover(cluster, base, base / "manifests")
        with chart_repo_standin.serve(CHART_REPOS, base) as charts:
            engine, steps = _adopting(base, charts, cluster)
            preview = _engine_run(engine, cluster, "preview")
        return {"steps": steps, "preview": preview, **_webhook_standins(webhook, injector), **machinery.problems()}
