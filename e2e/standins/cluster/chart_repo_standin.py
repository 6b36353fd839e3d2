"""A stand-in for the Helm chart repositories the program installs from (charts.jetstack.io and
cluster-api-operator's), which cannot be reached here: an HTTPS server on loopback, with a
self-signed certificate that the caller hands to the engine (SSL_CERT_FILE), serving for each
repository path an `index.yaml` and the chart archives it lists.

The charts are stand-ins too: a chart of the real name and version whose template renders a
ConfigMap named after the release, so the objects a release owns can be told apart, and whatever
other templates and CRDs a test gives it. Where a box asks for a real chart, it is one of the
upstream charts in ../shared/vendor (`VendoredChart`: a `git archive` of the chart's folder, read
at run time and packed as `helm package` would, under the chart's name, with its own Chart.yaml in
the index). Every request
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
            "values.yaml": "{}\n",
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
def serve(repositories: Mapping[str, Sequence[Chart | VendoredChart]], directory: Path) -> Iterator[ChartRepoStandIn]:
    """The repositories (path -> charts) at https://127.0.0.1:<ephemeral port>/<path>."""
    address = "127.0.0.1"
    key, cert = https_server.self_signed_certificate(directory, "chart-repo-standin", address)
    files: dict[str, bytes] = {}
    for path, charts in repositories.items():
        files[f"/{path}/index.yaml"] = _index(charts)
        files.update({f"/{path}/{chart.archive_name}": chart.archive() for chart in charts})
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
        port = listening.enter_context(https_server.serving(Handler, (address, 0), key, cert)).server_address[1]

        def listen() -> None:
            listening.enter_context(https_server.serving(Handler, (address, port), key, cert))

        standin = ChartRepoStandIn(f"https://{address}:{port}", cert, listening, listen)
        yield standin
