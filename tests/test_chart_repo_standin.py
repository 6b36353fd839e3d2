"""What the box's chart repository stand-in serves besides the program's charts
(e2e/standins/cluster/chart_repo_standin.py): the minimal `cilium` chart (our own templates, Cilium's
DaemonSet and operator with upstream's default of two operator replicas) and CAPMOX's
cluster-template.yaml read out of the v0.9.0 archive, for v0.9.0 and v0.9.1 only. Reads
../shared/vendor."""

from __future__ import annotations

import io
import re
import tarfile

import yaml

from e2e.engine import vendor
from e2e.standins.cluster import chart_repo_standin


def _files(chart: chart_repo_standin.Chart) -> dict[str, str]:
    with tarfile.open(fileobj=io.BytesIO(chart.archive()), mode="r:gz") as tar:
        return {
            entry.name: extracted.read().decode()
            for entry in tar.getmembers()
            if (extracted := tar.extractfile(entry)) is not None
        }


def test_the_cilium_chart_has_the_agent_and_an_operator_of_two_replicas_by_default() -> None:
    chart = chart_repo_standin.cilium_chart("1.18.4")
    files = _files(chart)
    assert yaml.safe_load(files["cilium/Chart.yaml"])["version"] == "1.18.4"
    assert yaml.safe_load(files["cilium/values.yaml"]) == {
        "operator": {"replicas": 2, "podDisruptionBudget": {"enabled": False, "maxUnavailable": 1}}
    }
    kinds = {}
    for text in chart.templates[:2]:
        filled = text.replace("{{ .Values.operator.replicas }}", "2")
        obj = yaml.safe_load(filled.replace("{{ .Release.Namespace }}", "kube-system"))
        kinds[obj["kind"], obj["metadata"]["name"]] = obj
    agent = kinds["DaemonSet", "cilium"]["spec"]["template"]["spec"]
    assert agent["tolerations"] == [{"operator": "Exists"}]
    operator = kinds["Deployment", "cilium-operator"]
    assert operator["spec"]["replicas"] == 2
    assert "{{ .Values.operator.replicas }}" in chart.templates[1]
    pod = operator["spec"]["template"]["spec"]
    assert pod["tolerations"][0]["key"] == "node-role.kubernetes.io/control-plane"
    [anti] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    # The operator's budget, as upstream's: only when enabled, selecting the operator's pods.
    budget = chart.templates[2]
    assert budget.startswith("{{- if .Values.operator.podDisruptionBudget.enabled }}\n")
    filled = budget.replace("{{ .Values.operator.podDisruptionBudget.maxUnavailable }}", "1")
    body = yaml.safe_load(filled.split("\n", 1)[1].rsplit("{{- end }}", 1)[0].replace("{{ .Release.Namespace }}", "x"))
    assert body["kind"] == "PodDisruptionBudget"
    assert body["spec"]["selector"]["matchLabels"] == operator["spec"]["selector"]["matchLabels"]
    # The same bytes every time: the index's digest is the served archive's.
    assert chart.archive() == chart_repo_standin.cilium_chart("1.18.4").archive()


def test_capmox_template_is_v0_9_0_s_for_v0_9_0_and_v0_9_1_only() -> None:
    assets = chart_repo_standin.capmox_release_assets()
    assert sorted(assets) == ["/capmox/v0.9.0/cluster-template.yaml", "/capmox/v0.9.1/cluster-template.yaml"]
    template = vendor.member(vendor.CAPMOX_ARCHIVE, "templates/cluster-template.yaml").encode()
    assert set(assets.values()) == {template}
    kinds = sorted(re.findall(r"^kind: (\w+)$", template.decode(), re.MULTILINE))
    assert kinds == [
        "Cluster",
        "KubeadmConfigTemplate",
        "KubeadmControlPlane",
        "MachineDeployment",
        "ProxmoxCluster",
        "ProxmoxMachineTemplate",
        "ProxmoxMachineTemplate",
    ]
