"""The real cluster-autoscaler in the box (issue 30): the official chart installed by the real
engine's Helm release, its Pod run by the pod runner stand-in as the real autoscaler 1.35.2 binary
with the chart's args, env and mounts and a ServiceAccount token, so that RBAC is the real API
server's; then a new digest on the pod template restarts it (e2e/box/autoscaler_box.py). Selected
with `pytest -m engine`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.box import scenarios
from e2e.engine.netns import in_new_netns

pytestmark = pytest.mark.engine

LAB1_ACCOUNT = "system:serviceaccount:lab1:lab1-autoscaler"
LAB2_ACCOUNT = "system:serviceaccount:lab2:lab2-autoscaler"


@pytest.fixture(scope="module")
def autoscaler_box(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("autoscaler")
    return in_new_netns("autoscaler_box.real_autoscaler", str(root), addresses=[scenarios.VM_ADDRESS], timeout=900)


def _first_log(box: Any, cluster: str) -> str:
    logs = box["runners"][cluster]["logs"]
    return logs[sorted(logs)[0]]


def test_the_engine_installs_the_chart_and_the_runner_starts_the_real_autoscaler(autoscaler_box: Any) -> None:
    print(autoscaler_box["timings"])
    for run in autoscaler_box["runs"]:
        assert run["rc"] == 0, run["output"]
    assert autoscaler_box["chart_unknown"] == []
    assert any(path.endswith("/cluster-autoscaler-9.59.0.tgz") for path in autoscaler_box["chart_requests"])
    for cluster in ("lab1", "lab2"):
        assert autoscaler_box["runners"][cluster]["errors"] == []
    pod = next(pod for pod in autoscaler_box["pods"] if pod["namespace"] == "lab1")
    container = pod["spec"]["containers"][0]
    assert container["image"] == "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.2"
    assert container["command"][:2] == ["./cluster-autoscaler", "--cloud-provider=clusterapi"]
    assert "--node-group-auto-discovery=clusterapi:clusterName=lab1,namespace=lab1" in container["command"]
    log = _first_log(autoscaler_box, "lab1")
    # The flags the process got, as the binary itself logs them at start.
    for flag in ('--cloud-provider="clusterapi"', '--kubeconfig="/etc/kubernetes/value"', '--namespace="kube-system"'):
        assert f"FLAG: {flag}" in log, log[:3000]
    assert 'FLAG: --node-group-auto-discovery="[clusterapi:clusterName=lab1,namespace=lab1]"' in log
    assert 'FLAG: --scale-down-unneeded-time="30s"' in log
    assert pod["status"]["phase"] == "Running"
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"


def test_rbac_is_the_api_servers_own(autoscaler_box: Any) -> None:
    requests = autoscaler_box["requests"]
    lab1 = [r for r in requests["machinedeployments"] if r["user"] == LAB1_ACCOUNT]
    assert {(r["verb"], r["namespace"], r["code"]) for r in lab1} >= {("list", "lab1", 200)}
    templates = requests["proxmoxmachinetemplates"]
    # With the chart's additional rule the template is read; without it (lab2), refused.
    assert {(r["verb"], r["code"]) for r in templates if r["user"] == LAB1_ACCOUNT} >= {("list", 200)}
    assert {r["code"] for r in templates if r["user"] == LAB2_ACCOUNT} == {403}


def test_a_new_digest_on_the_pod_template_restarts_the_autoscaler(autoscaler_box: Any) -> None:
    events = autoscaler_box["runners"]["lab1"]["events"]
    started = [event for event in events if event["event"] == "started"]
    stopped = [event for event in events if event["event"] == "stopped"]
    assert len(started) == 2, events
    assert len(stopped) == 1, events
    assert started[0]["uid"] == stopped[0]["uid"] != started[1]["uid"]
    assert not any(event["event"] == "exited" for event in events), events
    annotations = autoscaler_box["deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"lab-mgmt.homelab/workload-kubeconfig-sha256": "1" * 64}
