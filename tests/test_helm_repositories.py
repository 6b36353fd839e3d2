"""An adoption imports the running Helm releases, whose charts pulumi-kubernetes resolves only
through this machine's Helm client configuration: a run that would fail that way is refused up
front, naming the settings and the commands (components/helm_repositories.py)."""

from __future__ import annotations

from pathlib import Path

import harness
import pytest
import yaml

from components.helm_repositories import ChartRepositoryError, ChartSource, helm_paths, missing_charts

ADOPT = {"adopt": True, "capmoxExistingSecret": "capmox-variables"}
CERT_MANAGER = ChartSource(
    "cert-manager", "v1.21.2", "https://charts.jetstack.io", "certManagerVersion", "certManagerChartRepo"
)


def test_an_adoption_without_the_charts_in_the_helm_client_is_refused_naming_settings_and_commands() -> None:
    with pytest.raises(ChartRepositoryError) as refused:
        harness.run_program(ADOPT, helm_charts_listed=False)
    message = str(refused.value)
    assert (
        "cert-manager v1.21.2 from https://charts.jetstack.io "
        "(lab-mgmt:certManagerChartRepo, lab-mgmt:certManagerVersion)" in message
    )
    assert "(lab-mgmt:capiOperatorChartRepo, lab-mgmt:capiOperatorVersion)" in message
    assert "helm repo add lab-mgmt-cert-manager https://charts.jetstack.io" in message
    assert (
        "helm repo add lab-mgmt-cluster-api-operator https://kubernetes-sigs.github.io/cluster-api-operator" in message
    )
    assert message.rstrip().endswith("helm repo update")


def test_only_an_adoption_needs_the_charts_in_the_helm_client() -> None:
    run = harness.run_program(helm_charts_listed=False)
    assert any(r.type == "kubernetes:helm.sh/v3:Release" for r in run.resources.values())


def write_client(directory: Path, url: str, versions: list[str]) -> tuple[Path, Path]:
    cache = directory / "cache"
    cache.mkdir()
    (directory / "repositories.yaml").write_text(yaml.safe_dump({"repositories": [{"name": "jetstack", "url": url}]}))
    entries = {"cert-manager": [{"version": version} for version in versions]}
    (cache / "jetstack-index.yaml").write_text(yaml.safe_dump({"entries": entries}))
    return directory / "repositories.yaml", cache


def test_a_chart_is_listed_only_at_the_configured_version_and_url(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    assert (
        missing_charts([CERT_MANAGER], *write_client(tmp_path / "a", "https://charts.jetstack.io/", ["v1.21.2"])) == []
    )
    (tmp_path / "b").mkdir()
    assert missing_charts([CERT_MANAGER], *write_client(tmp_path / "b", "https://charts.jetstack.io", ["v1.21.1"])) == [
        CERT_MANAGER
    ]
    (tmp_path / "c").mkdir()
    assert missing_charts([CERT_MANAGER], *write_client(tmp_path / "c", "https://mirror.example", ["v1.21.2"])) == [
        CERT_MANAGER
    ]


def test_a_repository_added_but_never_updated_lists_nothing(tmp_path: Path) -> None:
    repositories, cache = write_client(tmp_path, "https://charts.jetstack.io", ["v1.21.2"])
    (cache / "jetstack-index.yaml").unlink()
    assert missing_charts([CERT_MANAGER], repositories, cache) == [CERT_MANAGER]


def test_the_helm_client_paths_follow_helm_on_each_platform() -> None:
    home = Path("/home/owner")
    assert helm_paths({}, "linux", home) == (
        home / ".config/helm/repositories.yaml",
        home / ".cache/helm/repository",
    )
    assert helm_paths({}, "darwin", home) == (
        home / "Library/Preferences/helm/repositories.yaml",
        home / "Library/Caches/helm/repository",
    )
    assert helm_paths({"XDG_CONFIG_HOME": "/x/config", "XDG_CACHE_HOME": "/x/cache"}, "darwin", home) == (
        Path("/x/config/helm/repositories.yaml"),
        Path("/x/cache/helm/repository"),
    )
    assert helm_paths({"HELM_REPOSITORY_CONFIG": "/r.yaml", "HELM_REPOSITORY_CACHE": "/c"}, "linux", home) == (
        Path("/r.yaml"),
        Path("/c"),
    )
