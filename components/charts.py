"""The two Helm charts the program installs, kept as archives in the project's folder and given to
the kubernetes provider by that file name, with no repository.

Given a repository URL, pulumi-kubernetes (v4.25.0) fetches the repository's index and downloads
the chart archive in the check of every run whose release inputs are known, with no cache: a run
that changes nothing would still need both repositories. A chart given as a file is read from the
disk. So the program fetches an archive only when it is missing (a new laptop, a chart bump):
the repository's index names the archive and its sha256, which the download must match; the
digest is kept beside the archive and checked on every later run. Both charts are made sure of
before the program registers anything, in a preview as in an up, as the tokens are: a repository
out of reach stops a run with nothing begun.

CAPMOX's cluster template (components.cluster_template) is kept the same way, one per release a
workload cluster names (its `templateVersion`), as `cluster-template-<release>.yaml`, by
`kept_asset`: a release asset has no index that lists its digest, so the first download is trusted
and its sha256 recorded beside it.

The file bears the name Helm gives it, `<chart>-<version>.tgz`, which is also the name an imported
release's chart is looked for first in the project's folder: adopting the releases needs no Helm
client configuration either.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pulumi
import yaml

from components.settings import PROJECT, YAML_LOADER, Settings

CONNECT_SECONDS = 10
"""To connect, and for any read to answer."""
DOWNLOAD_SECONDS = 60
"""For a whole response: the index of a large repository, or an archive."""
DIGEST_SUFFIX = ".sha256"


class ChartRepositoryError(pulumi.RunError):
    """A chart archive that is not in the project's folder could not be fetched, or was not what
    the repository's index says (a RunError: the CLI shows the message alone)."""


class ChartRepositoryUnreachableError(ChartRepositoryError):
    """The repository, or the archive its index lists, could not be read at all."""


@dataclass(frozen=True)
class ChartSource:
    chart: str
    version: str
    repo: str
    repo_key: str
    """The setting that names the repository."""

    @property
    def file_name(self) -> str:
        """As `helm pull` names the archive, and as an import looks for it."""
        return f"{self.chart}-{self.version}.tgz"


@dataclass(frozen=True)
class LocalChart:
    """A chart whose archive is in the project's folder."""

    chart: str
    version: str
    file_name: str
    """What the release gives the provider as its chart."""


@dataclass(frozen=True)
class WorkloadCharts:
    """What every workload cluster is made from, fetched only where one is declared."""

    cluster_templates: Mapping[str, str | None]
    """CAPMOX's cluster template (components.cluster_template renders it) by the release the
    clusters name (templateVersion); None, best effort, where it could not be fetched."""
    cilium: LocalChart
    autoscaler: LocalChart


@dataclass(frozen=True)
class ClusterCharts:
    cert_manager: LocalChart
    operator: LocalChart
    workload: WorkloadCharts | None = None
    """None when no workload cluster is declared: then none of its sources is asked."""


def cluster_charts(settings: Settings) -> ClusterCharts:
    """cert-manager's chart and the operator's in the project's folder (chart_directory), each
    fetched first unless there, and CAPMOX's cluster template where a workload cluster is
    declared; best effort with skipCredentialsCheck (local_chart, kept_asset)."""
    cluster_api, directory = settings.cluster_api, chart_directory()
    best_effort = settings.proxmox.skip_credentials_check
    return ClusterCharts(
        workload=_workload_charts(settings, directory, best_effort=best_effort) if settings.workload.clusters else None,
        cert_manager=local_chart(
            ChartSource(
                "cert-manager", cluster_api.cert_manager_version, cluster_api.cert_manager_repo, "certManagerChartRepo"
            ),
            directory,
            best_effort=best_effort,
        ),
        operator=local_chart(
            ChartSource(
                "cluster-api-operator", cluster_api.operator_version, cluster_api.operator_repo, "capiOperatorChartRepo"
            ),
            directory,
            best_effort=best_effort,
        ),
    )


def _workload_charts(settings: Settings, directory: Path, *, best_effort: bool) -> WorkloadCharts:
    workload = settings.workload
    templates = {
        version: kept_asset(
            cluster_template_url(workload.capmox_release_url, version),
            cluster_template_file_name(version),
            directory,
            setting_key="capmoxReleaseUrl",
            best_effort=best_effort,
        )
        for version in sorted({cluster.template_version for cluster in workload.clusters})
    }
    autoscaler = ChartSource(
        "cluster-autoscaler", workload.autoscaler_chart_version, workload.autoscaler_repo, "clusterAutoscalerChartRepo"
    )
    return WorkloadCharts(
        cluster_templates={
            version: template.decode() if template is not None else None for version, template in templates.items()
        },
        cilium=local_chart(
            ChartSource("cilium", workload.cilium_version, workload.cilium_repo, "ciliumChartRepo"),
            directory,
            best_effort=best_effort,
        ),
        autoscaler=local_chart(autoscaler, directory, best_effort=best_effort),
    )


def chart_directory() -> Path:
    """Where the provider reads a chart given by a relative path: its working directory, which
    the engine makes the project's folder, as it does the program's."""
    return Path.cwd()


def fetch(url: str) -> bytes:
    """One GET, bounded: CONNECT_SECONDS to connect and between reads, DOWNLOAD_SECONDS in all.
    A proxy in HTTPS_PROXY is honoured, and SSL_CERT_FILE names the certificates to trust."""
    deadline = time.monotonic() + DOWNLOAD_SECONDS
    chunks = []
    with urllib.request.urlopen(url, timeout=CONNECT_SECONDS) as response:  # noqa: S310 - an https:// setting
        while chunk := response.read(1 << 16):
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise TimeoutError(f"not received within {DOWNLOAD_SECONDS}s")
    return b"".join(chunks)


def local_chart(source: ChartSource, directory: Path, *, best_effort: bool = False) -> LocalChart:
    """The chart's archive in `directory`, fetched there first unless it is there already and
    still what was fetched. A file put there by hand, with no recorded digest, is taken as it is.
    `best_effort` (skipCredentialsCheck: a run that may not reach what it would check) makes a
    repository out of reach a warning: the run goes on, and the release's preview cannot read it."""
    archive = directory / source.file_name
    recorded = directory / (source.file_name + DIGEST_SUFFIX)
    if not archive.is_file():
        why = f"{source.file_name} is not in {directory}"
    elif recorded.is_file() and _sha256(archive.read_bytes()) != recorded.read_text().strip():
        why = f"{archive} is no longer what was fetched (its sha256 differs from {recorded.name})"
    else:
        return LocalChart(source.chart, source.version, source.file_name)
    try:
        data, digest = _download(source, why)
    except ChartRepositoryUnreachableError as unreachable:
        if not best_effort:
            raise
        pulumi.log.warn(
            f"{unreachable}. skipCredentialsCheck lets this run go on without it; "
            "its release cannot be installed until it is there"
        )
        return LocalChart(source.chart, source.version, source.file_name)
    _replace(archive, data)
    _replace(recorded, f"{digest}\n".encode())
    return LocalChart(source.chart, source.version, source.file_name)


def cluster_template_url(release_url: str, release: str) -> str:
    """Where CAPMOX publishes the default template of a release, as clusterctl fetches it."""
    return f"{release_url.rstrip('/')}/{release}/cluster-template.yaml"


def cluster_template_file_name(release: str) -> str:
    return f"cluster-template-{release}.yaml"


def kept_asset(
    url: str, file_name: str, directory: Path, *, setting_key: str, best_effort: bool = False
) -> bytes | None:
    """A release asset kept in `directory` as `file_name`, fetched there first unless it is there.
    There is no index to check it against, so the first download is trusted (trust on first use):
    its sha256 is recorded beside it, and every later run checks the file against it; a file that
    differs is fetched again and must then match the record. A file put there by hand, with no
    record, is taken as it is. `best_effort` as in local_chart: out of reach, it warns and gives None."""
    path, recorded = directory / file_name, directory / (file_name + DIGEST_SUFFIX)
    expected = recorded.read_text().strip() if recorded.is_file() else None
    if path.is_file():
        kept = path.read_bytes()
        if expected is None or _sha256(kept) == expected:
            return kept
    why = f"{file_name} is not in {directory}" if not path.is_file() else f"{path} is not what was fetched"
    try:
        data = fetch(url)
    except (OSError, http.client.HTTPException, ValueError) as error:
        unreachable = ChartRepositoryUnreachableError(
            f"{PROJECT}:{setting_key}: cannot fetch {url} ({error}); the program needs it because {why}. "
            f"Point {setting_key} at a mirror that serves it, or put the file there by hand "
            f"(`curl -fLo {file_name} {url}` in that folder), then run again"
        )
        if not best_effort:
            raise unreachable from None
        pulumi.log.warn(f"{unreachable}. skipCredentialsCheck lets this run go on without it")
        return None
    if expected is not None and _sha256(data) != expected:
        raise ChartRepositoryError(
            f"{PROJECT}:{setting_key}: {url} has sha256 {_sha256(data)}, but {recorded} recorded {expected} "
            f"when it was first fetched; nothing was kept. If the new content is to be trusted, delete "
            f"{recorded.name} and run again"
        )
    _replace(path, data)
    if expected is None:
        _replace(recorded, f"{_sha256(data)}\n".encode())
    return data


def _download(source: ChartSource, why: str) -> tuple[bytes, str]:
    """The archive the repository's index lists for the chart's version, checked against the
    digest listed with it."""
    base = source.repo.rstrip("/") + "/"
    try:
        entry = _entry(source, yaml.load(fetch(base + "index.yaml"), Loader=YAML_LOADER))  # noqa: S506 - a safe loader
        url = urljoin(base, str(entry["urls"][0]))
        data = fetch(url)
    except (OSError, http.client.HTTPException, ValueError, yaml.YAMLError) as error:
        raise ChartRepositoryUnreachableError(
            f"{PROJECT}:{source.repo_key}: cannot fetch {source.chart} {source.version} from {source.repo} "
            f"({error}); the program needs it because {why}. Point {source.repo_key} at a mirror that "
            f"serves it, or put the archive there by hand (`helm pull {source.chart} --repo {source.repo} "
            f"--version {source.version}` in that folder), then run again"
        ) from None
    digest = _sha256(data)
    if digest != entry.get("digest"):
        raise ChartRepositoryError(
            f"{PROJECT}:{source.repo_key}: {url} has sha256 {digest}, but the index of {source.repo} "
            f"lists {entry.get('digest') or 'no digest'} for {source.chart} {source.version}; nothing was kept"
        )
    return data, digest


def _entry(source: ChartSource, index: Any) -> dict[str, Any]:
    entries = index.get("entries") if isinstance(index, dict) else None
    for entry in (entries or {}).get(source.chart) or []:
        if isinstance(entry, dict) and str(entry.get("version")) == source.version and entry.get("urls"):
            return entry
    raise ValueError(f"its index.yaml lists no {source.chart} {source.version}")


def _replace(path: Path, data: bytes) -> None:
    """Written whole or not at all: a run stopped halfway leaves no partial file under the name."""
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as part:
        part.write(data)
    os.replace(part.name, path)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
