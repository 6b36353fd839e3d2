"""The two charts the program's Releases install on the management cluster, at the versions it
pins (Pulumi.lab.yaml's certManagerVersion and capiOperatorVersion), rebuilt from their upstream
sources as each project's Makefile releases them (issue 68), from the Go modules at those versions,
which `e2e/engine/build-engine.sh workload` copies into LAB_MGMT_CERT_MANAGER_CHART_SOURCE and
LAB_MGMT_OPERATOR_SOURCE:

- cert-manager (make/manifests.mk, `$(bin_dir)/cert-manager-$(VERSION).tgz`): the files of
  deploy/charts/cert-manager it lists (templates, values and their schema, .helmignore; not tests/),
  README.md from its template, Chart.yaml with the release's version, appVersion and the two
  annotations it sets (yq there, PyYAML here), then `helm package --app-version --version`;
- cluster-api-operator (Makefile `release`: `chart-manifest-modification`, then `release-chart`):
  hack/charts/cluster-api-operator with the manager's image set in values.yaml to the production
  registry at the release tag, IfNotPresent (yq there, the same lines here), `kustomize build
  config/chart` as templates/operator-components.yaml (kubectl's kustomize here), then `helm
  package --app-version --version`.

`rendered` is what `helm template` makes of one for a release: what the program and the box's
stand-ins assume of them is read against it (tests/test_upstream_charts.py).

    documents = upstream_charts.rendered(upstream_charts.operator(folder), NAME, namespace, values, folder)
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from e2e.engine import pins
from e2e.engine.cli import built_bin

# What chart-manifest-modification rewrites in the operator's values.yaml: the tree's staging image.
STAGING_IMAGE_LINES = (
    "    repository: gcr.io/k8s-staging-capi-operator/cluster-api-operator\n",
    "    tag: dev\n",
    "    pullPolicy: IfNotPresent\n",
)
# What cert-manager's Makefile copies of its chart's folder, besides the templates and Chart.yaml.
CERT_MANAGER_FILES = ("values.yaml", "values.schema.json", ".helmignore")


def _run(*args: str, home: Path, cwd: Path | None = None) -> str:
    """A built CLI with `home` for its caches and settings (helm keeps both under it)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: rc {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _sources(variable: str, name: str, version: str) -> Path:
    """The sources build-engine.sh copied for `name` at `version`: a variable left from another
    version's build says so."""
    source = built_bin(variable, "LICENSE")
    if source.parent.name != f"{name}-v{version.removeprefix('v')}":
        raise RuntimeError(f"{variable} is {source}, not the sources of {name} {version}: build them again")
    return source


def _packaged(chart: Path, version: str, folder: Path) -> Path:
    helm = built_bin("LAB_MGMT_HELM_BIN", "helm") / "helm"
    _run(str(helm), "package", str(chart), f"--app-version={version}", f"--version={version}", home=folder, cwd=folder)
    return folder / f"{chart.name}-{version}.tgz"


def cert_manager(folder: Path) -> Path:
    """cert-manager's chart archive, rebuilt in `folder`."""
    source = _sources("LAB_MGMT_CERT_MANAGER_CHART_SOURCE", "cert-manager-chart", pins.CERT_MANAGER_VERSION)
    tree, chart = source / "deploy" / "charts" / "cert-manager", folder / "cert-manager"
    shutil.copytree(tree / "templates", chart / "templates")
    for name in CERT_MANAGER_FILES:
        shutil.copy(tree / name, chart / name)
    readme = (tree / "README.template.md").read_text().replace("{{RELEASE_VERSION}}", pins.CERT_MANAGER_VERSION)
    (chart / "README.md").write_text(readme)
    metadata = yaml.safe_load((tree / "Chart.yaml").read_text())
    metadata["annotations"] |= {
        "artifacthub.io/signKey": (tree / "signkey_annotation.txt").read_text(),
        "artifacthub.io/prerelease": "false",
    }
    metadata |= {"version": pins.CERT_MANAGER_VERSION, "appVersion": pins.CERT_MANAGER_VERSION}
    (chart / "Chart.yaml").write_text(yaml.safe_dump(metadata, sort_keys=False))
    return _packaged(chart, pins.CERT_MANAGER_VERSION, folder)


def _with_release_image(values: str) -> str:
    """The operator's values.yaml as chart-manifest-modification leaves it; the tree's lines must be
    as expected, else the rebuild says what it looked for."""
    staging = "".join(STAGING_IMAGE_LINES)
    if values.count(staging) != 1:
        raise RuntimeError(f"the operator chart's values.yaml no longer holds the image lines {STAGING_IMAGE_LINES}")
    repository, tag = pins.OPERATOR_IMAGE
    return values.replace(staging, f"    repository: {repository}\n    tag: {tag}\n    pullPolicy: IfNotPresent\n")


def operator(folder: Path) -> Path:
    """cluster-api-operator's chart archive, rebuilt in `folder`."""
    source = _sources("LAB_MGMT_OPERATOR_SOURCE", "cluster-api-operator", pins.OPERATOR_VERSION)
    chart = folder / "cluster-api-operator"
    shutil.copytree(source / "hack" / "charts" / "cluster-api-operator", chart)
    values = chart / "values.yaml"
    values.write_text(_with_release_image(values.read_text()))
    kubectl = built_bin("LAB_MGMT_CONTROL_PLANE_BIN", "kubectl") / "kubectl"
    components = _run(str(kubectl), "kustomize", "config/chart", home=folder, cwd=source)
    (chart / "templates" / "operator-components.yaml").write_text(components)
    return _packaged(chart, pins.OPERATOR_VERSION, folder)


def rendered(archive: Path, release: str, namespace: str, values: dict[str, Any], folder: Path) -> list[dict[str, Any]]:
    """`helm template` of `archive` as the release `release` in `namespace` with `values`; a value
    the chart's schema refuses fails it."""
    values_file = folder / f"{release}-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    helm = built_bin("LAB_MGMT_HELM_BIN", "helm") / "helm"
    out = _run(
        *(str(helm), "template", release, str(archive), "-n", namespace, "-f", str(values_file)),
        f"--kube-version={pins.KUBE_VERSION}",
        home=folder,
    )
    return [document for document in yaml.safe_load_all(out) if document]
