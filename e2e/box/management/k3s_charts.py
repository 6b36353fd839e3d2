"""k3s's chart machinery on a box's API server, real, as the owner's k3s runs it (issue 67): around
k3s's helm-controller (e2e/controllers/helm_controller.py, started by the caller, as a restarted
k3s restarts it), its install Jobs' pods run by the pod runner with klipper-helm's image, and the
public chart repositories at the HelmCharts' `repo` URLs (the chart repository stand-in on port
443 of the pods' side of the test's network namespace, which their /etc/hosts give those names).
And what reads helm-controller's work back: what it made for each HelmChart (wrangler's objectset
owner annotation, and the chart label on the Jobs' pods), its Jobs done, the releases they left.

    with k3s_charts.serving(cluster, base, templates, node=...) as charts, helm_controller.running(cluster, ...):
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.cluster_takeover import release_record
from e2e.box.workload.lab1_reads import until
from e2e.engine.control_plane import ControlPlane
from e2e.standins.cluster import chart_repo_standin, playbook_lab, pod_process, pod_runner, pod_volumes

# The label helm-controller gives its Jobs and their pods (chart.go LabelChartName), by which the
# pod runner runs them.
CHART_LABEL = "helmcharts.helm.cattle.io/chart"
# The annotation wrangler gives what helm-controller applies for a chart, naming the chart
# (wrangler pkg/apply/desiredset_apply.go); its removal of a chart's objects goes by it.
OWNER_NAME_KEY = "objectset.rio.cattle.io/owner-name"
# The kinds of what helm-controller applies for a chart, and the Jobs' pods.
MADE_KINDS = "secrets,configmaps,serviceaccounts,jobs,pods,clusterrolebindings"
HTTPS = 443
# An install Job's pod takes seconds (`helm install` of the box's small charts), after the job
# controller made it and the runner's next pass.
INSTALL_BOUND_SECONDS = 180


def made_for_a_chart(chart: str) -> list[tuple[str, str]]:
    """(resource, name) of what helm-controller applies for the HelmChart `chart` in kube-system
    (chart.go OnChange: the values Secret, the content ConfigMap, the ServiceAccount, the
    ClusterRoleBinding, the install Job), without the Job's pod, which the job controller makes."""
    return [
        ("secrets", f"chart-values-{chart}"),
        ("configmaps", f"chart-content-{chart}"),
        ("serviceaccounts", f"helm-{chart}"),
        ("clusterrolebindings", f"helm-kube-system-{chart}"),
        ("jobs", f"helm-install-{chart}"),
    ]


def repositories(
    templates: Mapping[str, tuple[str, ...]], more: Mapping[str, Sequence[str]] | None = None
) -> tuple[dict[str, list[chart_repo_standin.Chart]], list[str]]:
    """The playbook's charts at the paths of their `repo` URLs, with `templates` (by chart), and
    the charts `more` names beside each of them (of its version); and the repositories' host names."""
    served: dict[str, list[chart_repo_standin.Chart]] = {}
    hosts = []
    for name, (_, repo, version, _) in playbook_lab.PLAYBOOK_CHARTS.items():
        url = urllib.parse.urlsplit(repo)
        hosts.append(url.hostname or "")
        served[url.path.strip("/")] = [
            chart_repo_standin.Chart(chart, version, templates=templates.get(chart, ()))
            for chart in (name, *(more or {}).get(name, ()))
        ]
    return served, hosts


@dataclass(frozen=True)
class K3sCharts:
    cluster: ControlPlane
    pods: pod_runner.PodRunner
    charts: chart_repo_standin.ChartRepoStandIn

    def made_for(self) -> dict[str, list[dict[str, Any]]]:
        """HelmChart name -> what names it its owner, and the pods of its Jobs, each as kind,
        namespace, name, labels, annotations and owners."""
        listed = json.loads(self.cluster.kubectl("get", MADE_KINDS, "-A", "-o", "json").stdout)["items"]
        made: dict[str, list[dict[str, Any]]] = {}
        for item in listed:
            meta = item["metadata"]
            chart = (meta.get("annotations") or {}).get(OWNER_NAME_KEY) or (meta.get("labels") or {}).get(CHART_LABEL)
            if chart is not None:
                made.setdefault(chart, []).append(
                    {
                        "kind": item["kind"],
                        "namespace": meta.get("namespace", ""),
                        "name": meta["name"],
                        "labels": meta.get("labels") or {},
                        "annotations": meta.get("annotations") or {},
                        "owners": [o["name"] for o in meta.get("ownerReferences", [])],
                    }
                )
        return made

    def all_made(self, charts: list[str]) -> dict[str, list[dict[str, Any]]] | None:
        """What helm-controller made for each of `charts`, once all of it is there."""
        made = self.made_for()
        return made if all(len(made.get(chart, [])) == len(made_for_a_chart(chart)) + 1 for chart in charts) else None

    def installed(self, charts: list[str]) -> dict[str, Any] | None:
        """Once each of `charts` has its install Job Complete: the Jobs' pods (phase and container
        state) by chart."""
        jobs = json.loads(self.cluster.kubectl("get", "jobs", "-n", "kube-system", "-o", "json").stdout)["items"]
        complete = {
            job["metadata"]["labels"].get(CHART_LABEL)
            for job in jobs
            for condition in job.get("status", {}).get("conditions", [])
            if condition["type"] == "Complete" and condition["status"] == "True"
        }
        if not set(charts) <= complete:
            return None
        pods = self.cluster.kubectl("get", "pods", "-n", "kube-system", "-l", CHART_LABEL, "-o", "json").stdout
        return {
            pod["metadata"]["labels"][CHART_LABEL]: {
                "phase": pod["status"].get("phase"),
                "state": (pod["status"].get("containerStatuses") or [{}])[0].get("state", {}),
            }
            for pod in json.loads(pods)["items"]
            if pod["metadata"]["labels"][CHART_LABEL] in charts
        }

    def releases(self, namespace: str = "") -> dict[str, dict[str, Any]]:
        """Each Helm release Secret's name -> the release record it keeps."""
        scope = ["-n", namespace] if namespace else ["-A"]
        listed = self.cluster.kubectl("get", "secret", *scope, "-l", "owner=helm", "-o", "json").stdout
        return {item["metadata"]["name"]: release_record(item) for item in json.loads(listed)["items"]}

    def until_installed(self, charts: list[str], bound: float = INSTALL_BOUND_SECONDS) -> Any:
        """installed(charts) once it is; past `bound`, an AssertionError with what the Jobs, their
        pods and the repositories did."""
        try:
            return until(f"helm-controller's Jobs installed {', '.join(charts)}", lambda: self.installed(charts), bound)
        except AssertionError as late:
            jobs = self.cluster.kubectl("get", "jobs,pods", "-n", "kube-system", "-o", "wide").stdout
            raise AssertionError(
                f"{late}\n{jobs}\npod errors: {self.pods.errors}\nrepository requests: {self.charts.requests}"
                f" unknown: {self.charts.unknown}\npods' logs: {json.dumps(self.pods.logs())[-4000:]}"
            ) from None

    def problems(self) -> dict[str, list[str]]:
        """What the Jobs' pods and the chart repositories could not do or answer; each must be empty."""
        return {"k3s_job_pod_errors": self.pods.errors, "k3s_chart_unknown": self.charts.unknown}


@contextmanager
def serving(
    cluster: ControlPlane,
    base: Path,
    templates: Mapping[str, tuple[str, ...]],
    *,
    node: str = "mgmt",
    more: Mapping[str, Sequence[str]] | None = None,
) -> Iterator[K3sCharts]:
    """The chart repositories (repositories()) and the runner of helm-controller's Jobs' pods on
    `cluster`, from the node `node`, for the block."""
    served, hosts = repositories(templates, more)
    address = pod_process.route_through_the_box()
    # A folder of its own: the certificate's files are named after the stand-in, not the repository.
    (base / "k3s-charts").mkdir(parents=True, exist_ok=True)
    with (
        chart_repo_standin.serve(served, base / "k3s-charts", address=(address, HTTPS), hostnames=hosts) as charts,
        pod_runner.running(
            cluster,
            "kube-system",
            "",
            base / "k3s-job-pods",
            node=node,
            selector=CHART_LABEL,
            internet=pod_volumes.Internet(dict.fromkeys(hosts, address), (charts.certificate,)),
        ) as pods,
    ):
        yield K3sCharts(cluster, pods, charts)
