"""A stand-in for the Helm chart repositories the program installs from (charts.jetstack.io and
cluster-api-operator's), which cannot be reached here: an HTTPS server on loopback, with a
self-signed certificate that the caller hands to the engine (SSL_CERT_FILE), serving for each
repository path an `index.yaml` and the chart archives it lists.

The charts are stand-ins too: a chart of the real name and version whose template renders a
ConfigMap named after the release, so the objects a release owns can be told apart, and whatever
other templates and CRDs a test gives it (`cilium_chart`: Cilium's DaemonSet and operator, as
the workload cluster waits on them). Where a box asks for a real chart, it is one of the
upstream charts in ../shared/vendor (`VendoredChart`: a `git archive` of the chart's folder, read
at run time and packed as `helm package` would, under the chart's name, with its own Chart.yaml in
the index). Besides the charts it serves CAPMOX's release asset `cluster-template.yaml`
(`capmox_release_assets`). Every request
is recorded; any other path or method is answered 404 naming it and recorded as unknown, so a test
can fail on it. A test can take the repositories down for a while (`down`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import yaml

from e2e.engine import vendor
from e2e.standins import https_server

TEMPLATE = """apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-rendered
  namespace: {{ .Release.Namespace }}
  labels: {app.kubernetes.io/managed-by: Helm}
  annotations:
    meta.helm.sh/release-name: {{ .Release.Name }}
    meta.helm.sh/release-namespace: {{ .Release.Namespace }}
data: {chart: {{ .Chart.Name }}}
"""


@dataclass(frozen=True)
class Chart:
    name: str
    version: str
    crds: tuple[str, ...] = ()
    """CustomResourceDefinitions the chart installs before its templates (its crds/ folder)."""
    templates: tuple[str, ...] = ()
    """Templates besides the ConfigMap, such as the Deployment of the operator the chart runs."""
    values: str = "{}\n"
    """The chart's values.yaml: its defaults."""

    def metadata(self) -> dict[str, str]:
        return {"apiVersion": "v2", "name": self.name, "version": self.version, "appVersion": self.version}

    @property
    def archive_name(self) -> str:
        return f"{self.name}-{self.version}.tgz"

    def template_files(self) -> dict[str, str]:
        """Every template of the chart by its path in the chart: the ConfigMap's, then the others."""
        extra = {f"templates/extra-{index}.yaml": template for index, template in enumerate(self.templates)}
        return {"templates/rendered.yaml": TEMPLATE, **extra}

    def archive(self) -> bytes:
        """The same bytes on every call (no time in the gzip header or the tar entries), so that
        the digest the index lists is the archive's that is served."""
        files = {
            "Chart.yaml": yaml.safe_dump(self.metadata()),
            "values.yaml": self.values,
            **self.template_files(),
            **{f"crds/crd-{index}.yaml": crd for index, crd in enumerate(self.crds)},
        }
        buffer = io.BytesIO()
        with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as packed, tarfile.open(fileobj=packed, mode="w") as tar:
            for path, text in files.items():
                data = text.encode()
                info = tarfile.TarInfo(f"{self.name}/{path}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buffer.getvalue()


@dataclass(frozen=True)
class VendoredChart:
    """An upstream chart from its archive in ../shared/vendor (checked against its pinned sha256),
    served as the chart archive `<name>-<version>.tgz`, packed deterministically as `Chart` is."""

    source: str
    """The archive's file name, e.g. cluster-autoscaler-chart-9.59.0.tar.gz."""

    def _files(self) -> dict[str, bytes]:
        files = {}
        with tarfile.open(vendor.checked(self.source), "r:gz") as tar:
            for member in tar.getmembers():
                extracted = tar.extractfile(member) if member.isfile() else None
                if extracted is not None and "/" in member.name:
                    files[member.name.split("/", 1)[1]] = extracted.read()
        return dict(sorted(files.items()))

    def metadata(self) -> dict[str, Any]:
        chart: dict[str, Any] = yaml.safe_load(self._files()["Chart.yaml"])
        return chart

    @property
    def name(self) -> str:
        return str(self.metadata()["name"])

    @property
    def version(self) -> str:
        return str(self.metadata()["version"])

    @property
    def archive_name(self) -> str:
        return f"{self.name}-{self.version}.tgz"

    def archive(self) -> bytes:
        buffer = io.BytesIO()
        with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as packed, tarfile.open(fileobj=packed, mode="w") as tar:
            for path, data in self._files().items():
                info = tarfile.TarInfo(f"{self.name}/{path}")
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
        return buffer.getvalue()


def rendered(release: str, namespace: str, chart: Chart, template: str = TEMPLATE) -> str:
    """The object `template` (one of the chart's) renders for a release."""
    return (
        template.replace("{{ .Release.Name }}", release)
        .replace("{{ .Release.Namespace }}", namespace)
        .replace("{{ .Chart.Name }}", chart.name)
        .replace("{{ .Chart.Version }}", chart.version)
    )


@dataclass
class ChartRepoStandIn:
    url: str
    """https://127.0.0.1:PORT; each repository is a path under it."""
    certificate: Path
    listening: ExitStack = field(repr=False)
    """The server, while the repositories are up."""
    listen: Callable[[], None] = field(repr=False)
    """Serves the repositories at `url` again."""
    requests: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    @contextmanager
    def down(self) -> Iterator[None]:
        """Out of reach for the block: nothing listens at `url`; then served there again."""
        self.listening.close()
        try:
            yield
        finally:
            self.listen()


def _index(charts: Sequence[Chart | VendoredChart]) -> bytes:
    entries: dict[str, list[dict[str, Any]]] = {}
    for chart in charts:
        entries.setdefault(chart.name, []).append(
            {
                **chart.metadata(),
                "urls": [chart.archive_name],
                "digest": hashlib.sha256(chart.archive()).hexdigest(),
                "created": "2026-03-01T00:00:00Z",
            }
        )
    return yaml.safe_dump({"apiVersion": "v1", "entries": entries, "generated": "2026-03-01T00:00:00Z"}).encode()


@contextmanager
def serve(
    repositories: Mapping[str, Sequence[Chart | VendoredChart]],
    directory: Path,
    assets: Mapping[str, bytes] | None = None,
    *,
    address: tuple[str, int] = ("127.0.0.1", 0),
    hostnames: Sequence[str] = (),
) -> Iterator[ChartRepoStandIn]:
    """The repositories (path -> charts; '' for one at the root) at https://127.0.0.1:<ephemeral
    port>/<path>, and any other files at the paths `assets` names (a release's assets:
    capmox_release_assets). At another `address` (the public repositories' port 443), with a
    certificate for `hostnames` too: the names the repositories have on the internet, which the
    box's DNS answers with it; their paths must not overlap (the Host header is not read)."""
    key, cert = https_server.self_signed_certificate(directory, "chart-repo-standin", address[0], hostnames)
    files: dict[str, bytes] = dict(assets or {})
    for path, charts in repositories.items():
        prefix = f"/{path}" if path else ""
        files[f"{prefix}/index.yaml"] = _index(charts)
        files.update({f"{prefix}/{chart.archive_name}": chart.archive() for chart in charts})
    standin: ChartRepoStandIn

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            standin.requests.append(self.path)
            body = files.get(self.path.split("?", 1)[0])
            if body is None:
                standin.unknown.append(f"GET {self.path}")
                self._answer(404, f"stand-in has no {self.path}".encode())
                return
            self._answer(200, body)

        def do_POST(self) -> None:
            standin.unknown.append(f"POST {self.path}")
            self._answer(404, f"stand-in does not know POST {self.path}".encode())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Requests are recorded above; nothing goes to stderr."""

    with ExitStack() as listening:
        port = listening.enter_context(https_server.serving(Handler, address, key, cert)).server_address[1]

        def listen() -> None:
            listening.enter_context(https_server.serving(Handler, (address[0], port), key, cert))

        standin = ChartRepoStandIn(f"https://{address[0]}:{port}", cert, listening, listen)
        yield standin


# Cilium as the box's chart repository serves it (`cilium_chart`): our own minimal templates, not
# upstream's. They stand in for the objects a `helm install --wait` of Cilium waits on in the
# workload cluster, a DaemonSet `cilium` on every Node (it tolerates every taint) and the
# Deployment `cilium-operator`, with upstream's default of two operator replicas
# (`.Values.operator.replicas`) that may not share a Node (upstream's required anti-affinity by
# hostname) and a toleration of the control plane's taint: on a cluster with one Node a second
# replica stays Pending; and upstream's PodDisruptionBudget `cilium-operator`, made only when
# `.Values.operator.podDisruptionBudget.enabled` (off by default), with its `maxUnavailable`. The
# datapath itself cannot run here: nothing routes pod traffic.
CILIUM_VALUES = "operator:\n  replicas: 2\n  podDisruptionBudget:\n    enabled: false\n    maxUnavailable: 1\n"
CILIUM_AGENT = """apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: cilium
  namespace: {{ .Release.Namespace }}
  labels: {k8s-app: cilium, app.kubernetes.io/part-of: cilium}
spec:
  selector: {matchLabels: {k8s-app: cilium}}
  template:
    metadata: {labels: {k8s-app: cilium, app.kubernetes.io/part-of: cilium}}
    spec:
      priorityClassName: system-node-critical
      nodeSelector: {kubernetes.io/os: linux}
      tolerations: [{operator: Exists}]
      containers:
      - name: cilium-agent
        image: "quay.io/cilium/cilium:v{{ .Chart.AppVersion }}"
        resources: {requests: {cpu: 100m, memory: 100Mi}}
"""
CILIUM_OPERATOR = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: cilium-operator
  namespace: {{ .Release.Namespace }}
  labels: {io.cilium/app: operator, name: cilium-operator, app.kubernetes.io/part-of: cilium}
spec:
  replicas: {{ .Values.operator.replicas }}
  selector: {matchLabels: {io.cilium/app: operator, name: cilium-operator}}
  template:
    metadata: {labels: {io.cilium/app: operator, name: cilium-operator, app.kubernetes.io/part-of: cilium}}
    spec:
      priorityClassName: system-cluster-critical
      nodeSelector: {kubernetes.io/os: linux}
      tolerations:
      - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - topologyKey: kubernetes.io/hostname
            labelSelector: {matchLabels: {io.cilium/app: operator}}
      containers:
      - name: cilium-operator
        image: "quay.io/cilium/operator-generic:v{{ .Chart.AppVersion }}"
        resources: {requests: {cpu: 50m, memory: 64Mi}}
"""


CILIUM_OPERATOR_BUDGET = """{{- if .Values.operator.podDisruptionBudget.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: cilium-operator
  namespace: {{ .Release.Namespace }}
  labels: {io.cilium/app: operator, name: cilium-operator, app.kubernetes.io/part-of: cilium}
spec:
  maxUnavailable: {{ .Values.operator.podDisruptionBudget.maxUnavailable }}
  selector: {matchLabels: {io.cilium/app: operator, name: cilium-operator}}
{{- end }}
"""


def cilium_chart(version: str) -> Chart:
    """The chart `cilium` at `version` (which its images are tagged with, as upstream's appVersion)."""
    return Chart(
        "cilium", version, templates=(CILIUM_AGENT, CILIUM_OPERATOR, CILIUM_OPERATOR_BUDGET), values=CILIUM_VALUES
    )


# CAPMOX's release asset `cluster-template.yaml`, which the program fetches from
# `{capmoxReleaseUrl}/{templateVersion}/cluster-template.yaml` (a GitHub release's download URL).
CAPMOX_ASSETS = "capmox"
CAPMOX_TEMPLATE = "templates/cluster-template.yaml"
CAPMOX_ARCHIVED = "v0.9.0"
# v0.9.1, the lab's CAPMOX, has no archive here: it gets v0.9.0's template, since the research
# (../shared/notes/lab1-autoscaler-research.md, section 1) found no difference in templates/
# between v0.9.0 and a later main. Any other version is a 404.
CAPMOX_SERVED_AS_ARCHIVED = ("v0.9.1",)


def capmox_release_assets() -> dict[str, bytes]:
    """`/capmox/<version>/cluster-template.yaml` for v0.9.0 and v0.9.1, read from the CAPMOX v0.9.0
    archive (its digest checked, e2e/engine/vendor.py) when the repository starts serving."""
    template = vendor.member(vendor.CAPMOX_ARCHIVE, CAPMOX_TEMPLATE).encode()
    return {
        f"/{CAPMOX_ASSETS}/{version}/cluster-template.yaml": template
        for version in (CAPMOX_ARCHIVED, *CAPMOX_SERVED_AS_ARCHIVED)
    }
