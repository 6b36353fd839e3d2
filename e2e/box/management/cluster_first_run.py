"""The program's cluster part installing onto an empty API server, with no adoption, and its
second run (tests/test_box_first_run.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e.box.cluster_part import (
    CHART_REPOS,
    OPERATOR_CHART_WITH_CRDS,
    _box_engine,
    _engine_run,
    _operator_webhooks,
    _webhook_standins,
)
from e2e.box.scenarios import OPERATOR_INSTALL_SECONDS, VM_ADDRESS, _lab_secrets, _readme_first_run, _set_all
from e2e.engine import control_plane
from e2e.engine.cli import Engine
from e2e.standins.cluster import chart_repo_standin, operator_standin, playbook_lab


def fresh_install(root: str) -> dict[str, Any]:
    """The program's own first run on an empty cluster (no adoption), then a second one."""
    base = Path(root)
    with (
        control_plane.running(base / "control-plane", VM_ADDRESS) as cluster,
        operator_standin.running(cluster, playbook_lab.PROVIDER_RESOURCES, OPERATOR_INSTALL_SECONDS) as operator,
        _operator_webhooks(cluster, base) as (webhook, injector),
    ):
        repos = {
            "jetstack": CHART_REPOS["jetstack"],
            "capi-operator": [OPERATOR_CHART_WITH_CRDS],
        }
        with chart_repo_standin.serve(repos, base) as charts:
            engine = _box_engine(base, charts, cluster)
            steps = _readme_first_run(engine, _lab_secrets())
            repositories = (
                ("certManagerChartRepo", f"{charts.url}/jetstack"),
                ("capiOperatorChartRepo", f"{charts.url}/capi-operator"),
            )
            steps.append(_set_all(engine, repositories))
            runs = [_engine_run(engine, cluster, action) for action in ("preview", "up", "preview", "up")]
        return {
            "steps": steps,
            "runs": runs,
            "operator_errors": operator.errors,
            "reconciled": operator.reconciled,
            "plugin_temp_files": _plugin_temp_files(engine),
            **_webhook_standins(webhook, injector),
        }


def _plugin_temp_files(engine: Engine) -> list[dict[str, Any]]:
    """What the four runs left in the plugins' TMPDIR: docs/operations.md warns of the kubernetes
    plugin's copies of the cluster's kubeconfig, which no run removes."""
    admin_token = control_plane.TOKENS[control_plane.ADMIN_USER]
    return [
        {"name": path.name, "mode": path.stat().st_mode & 0o777, "admin": admin_token in path.read_text()}
        for path in sorted(engine.temp_dir.iterdir())
    ]
