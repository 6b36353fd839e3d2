"""Adopting the Helm releases that k3s's helm-controller installed. A release records its chart's
name and version but not where the chart came from, so pulumi-kubernetes resolves an imported
release's chart through this machine's Helm client configuration (the repositories `helm repo
add` lists, with the indexes `helm repo update` fetched), and fails the import's check when none
lists it ("non-absolute URLs should be in form of repo_name/path_to_chart", pulumi-kubernetes
#3502). An adoption run checks this first and, if a chart is missing, stops naming the settings
and the commands that fix it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pulumi
import yaml

from components.settings import PROJECT, Settings


class ChartRepositoryError(pulumi.RunError, ValueError):
    """An adopted release's chart is not in this machine's Helm repositories (a RunError: the CLI
    shows the message alone, with no traceback)."""


@dataclass(frozen=True)
class ChartSource:
    chart: str
    version: str
    repo: str
    version_key: str
    repo_key: str

    @property
    def alias(self) -> str:
        """The repository name the fix suggests: one that no other repository is likely to hold."""
        return f"lab-mgmt-{self.chart}"


def chart_sources(settings: Settings) -> list[ChartSource]:
    cluster_api = settings.cluster_api
    return [
        ChartSource(
            "cert-manager",
            cluster_api.cert_manager_version,
            cluster_api.cert_manager_repo,
            "certManagerVersion",
            "certManagerChartRepo",
        ),
        ChartSource(
            "cluster-api-operator",
            cluster_api.operator_version,
            cluster_api.operator_repo,
            "capiOperatorVersion",
            "capiOperatorChartRepo",
        ),
    ]


def helm_paths(
    env: Mapping[str, str] = os.environ, platform: str = sys.platform, home: Path | None = None
) -> tuple[Path, Path]:
    """repositories.yaml and the index cache, where the Helm client (and so pulumi-kubernetes)
    looks for them: HELM_REPOSITORY_CONFIG / HELM_REPOSITORY_CACHE, else the XDG variables, else
    each platform's default (Helm's helmpath package)."""
    home = home or Path.home()
    if platform == "darwin":
        config_home, cache_home = home / "Library" / "Preferences", home / "Library" / "Caches"
    elif platform == "win32":
        config_home, cache_home = Path(env.get("APPDATA", home)), Path(env.get("TEMP", home))
    else:
        config_home, cache_home = home / ".config", home / ".cache"
    config_home = Path(env.get("XDG_CONFIG_HOME") or config_home)
    cache_home = Path(env.get("XDG_CACHE_HOME") or cache_home)
    return (
        Path(env.get("HELM_REPOSITORY_CONFIG") or config_home / "helm" / "repositories.yaml"),
        Path(env.get("HELM_REPOSITORY_CACHE") or cache_home / "helm" / "repository"),
    )


def _same_url(left: str, right: str) -> bool:
    return left.rstrip("/") == right.rstrip("/")


def _same_version(left: str, right: str) -> bool:
    return left.removeprefix("v") == right.removeprefix("v")


def _listed(source: ChartSource, repositories: Sequence[Mapping[str, str]], cache: Path) -> bool:
    for repository in repositories:
        if not _same_url(repository.get("url", ""), source.repo):
            continue
        index = cache / f"{repository.get('name', '')}-index.yaml"
        if not index.is_file():
            continue
        entries = (yaml.safe_load(index.read_text()) or {}).get("entries") or {}
        if any(_same_version(str(entry.get("version", "")), source.version) for entry in entries.get(source.chart, [])):
            return True
    return False


def missing_charts(sources: Sequence[ChartSource], repositories_file: Path, cache: Path) -> list[ChartSource]:
    loaded = yaml.safe_load(repositories_file.read_text()) if repositories_file.is_file() else None
    repositories = (loaded or {}).get("repositories") or []
    return [source for source in sources if not _listed(source, repositories, cache)]


def verify_chart_repositories(settings: Settings) -> None:
    """Only an adoption imports releases; other runs install from the repositories directly."""
    repositories_file, cache = helm_paths()
    missing = missing_charts(chart_sources(settings), repositories_file, cache)
    if not missing:
        return
    lines = [
        f"{source.chart} {source.version} from {source.repo} "
        f"({PROJECT}:{source.repo_key}, {PROJECT}:{source.version_key})"
        for source in missing
    ]
    commands = [f"helm repo add {source.alias} {source.repo}" for source in missing] + ["helm repo update"]
    raise ChartRepositoryError(
        f"{PROJECT}:adopt imports the running Helm releases, whose charts pulumi-kubernetes finds only "
        f"through this machine's Helm repositories ({repositories_file}); none lists:\n  "
        + "\n  ".join(lines)
        + "\nRun, then preview again:\n  "
        + "\n  ".join(commands)
    )
