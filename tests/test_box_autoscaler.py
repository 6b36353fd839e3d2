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
DIGEST_ANNOTATION = "lab-mgmt.homelab/workload-kubeconfig-sha256"


@pytest.fixture(scope="module")
def autoscaler_box(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("autoscaler")
    return in_new_netns("autoscaler_box.real_autoscaler", str(root), addresses=[scenarios.VM_ADDRESS], timeout=900)


def _logs(box: Any, cluster: str) -> list[str]:
    """Each process's log, in the order the processes started."""
    logs = box["runners"][cluster]["logs"]
    return [logs[event["log"]] for event in box["runners"][cluster]["events"] if event["event"] == "started"]


def _pod(box: Any, namespace: str) -> dict[str, Any]:
    pods: list[dict[str, Any]] = [pod for pod in box["pods"] if pod["namespace"] == namespace]
    assert len(pods) == 1, pods
    return pods[0]


def test_the_engine_installs_the_chart_and_the_runner_runs_it_as_the_real_autoscaler(autoscaler_box: Any) -> None:
    print(autoscaler_box["timings"])
    for run in autoscaler_box["runs"]:
        assert run["rc"] == 0, run["output"]
    assert autoscaler_box["chart_unknown"] == []
    assert any(path.endswith("/cluster-autoscaler-9.59.0.tgz") for path in autoscaler_box["chart_requests"])
    for cluster in ("lab1", "lab2"):
        assert autoscaler_box["runners"][cluster]["errors"] == []
    pod = _pod(autoscaler_box, "lab1")
    assert pod["status"]["phase"] == "Running"
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    container = pod["spec"]["containers"][0]
    assert container["image"] == "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.2"
    # The process got exactly the command the chart rendered, and its env.
    process = autoscaler_box["process"]
    assert process["argv"] == container["command"] + container.get("args", [])
    assert process["argv"][:2] == ["./cluster-autoscaler", "--cloud-provider=clusterapi"]
    assert "--node-group-auto-discovery=clusterapi:clusterName=lab1,namespace=lab1" in process["argv"]
    assert {"POD_NAMESPACE=lab1", "SERVICE_ACCOUNT=lab1-autoscaler"} <= set(process["environ"])
    assert {"KUBERNETES_SERVICE_HOST=192.168.4.21", "KUBERNETES_SERVICE_PORT=6443"} <= set(process["environ"])
    assert process["hostname"] == pod["name"]


def test_the_mounts_are_the_secret_and_a_token_of_the_charts_service_account(autoscaler_box: Any) -> None:
    process = autoscaler_box["process"]
    assert process["kubeconfig"] == autoscaler_box["admin_kubeconfig"]
    assert (process["namespace"], process["ca"]) == ("lab1", autoscaler_box["cluster_ca"])
    claims = process["token_claims"]
    assert claims["sub"] == LAB1_ACCOUNT
    assert claims["kubernetes.io"]["pod"]["name"] == _pod(autoscaler_box, "lab1")["name"]
    assert process["etc_on_the_machine_unchanged"]


def test_the_autoscaler_starts_the_clusterapi_provider_with_the_charts_discovery(autoscaler_box: Any) -> None:
    log = _logs(autoscaler_box, "lab1")[0]
    assert "Cluster Autoscaler 1.35.2" in log
    assert "Building clusterapi cloud provider." in log
    assert "Using kubeconfig file: /etc/kubernetes/value" in log
    assert "[clusterapi:clusterName=lab1,namespace=lab1]" in log
    assert 'Using version "v1beta2" for API group "cluster.x-k8s.io"' in log
    assert '"Caches populated" type="infrastructure.cluster.x-k8s.io/v1alpha2, Resource=proxmoxmachinetemplates"' in log


def test_rbac_is_the_api_servers_own(autoscaler_box: Any) -> None:
    requests = autoscaler_box["requests"]
    reads = {"list", "watch"}
    lab1 = {
        (r["namespace"], r["code"])
        for r in requests["machinedeployments"]
        if r["user"] == LAB1_ACCOUNT and r["verb"] in reads
    }
    assert ("lab1", 200) in lab1
    templates = requests["proxmoxmachinetemplates"]
    # With the chart's additional rule the template is read; without it (lab2), refused, and the
    # autoscaler stays waiting for it (kubernetes/autoscaler #5912).
    assert {r["code"] for r in templates if r["user"] == LAB1_ACCOUNT and r["verb"] in reads} == {200}
    assert {r["code"] for r in templates if r["user"] == LAB2_ACCOUNT} == {403}
    assert any(
        "proxmoxmachinetemplates.infrastructure.cluster.x-k8s.io is forbidden" in log
        for log in _logs(autoscaler_box, "lab2")
    )


def test_a_new_digest_on_the_pod_template_restarts_the_autoscaler(autoscaler_box: Any) -> None:
    everything = autoscaler_box["runners"]["lab1"]["events"]
    # Up to the kill of the next test.
    events = everything[: [event["event"] for event in everything].index("exited")]
    started = [event for event in events if event["event"] == "started"]
    stopped = [event for event in events if event["event"] == "stopped"]
    assert len(started) == 2, events
    assert len(stopped) == 1, events
    assert started[0]["uid"] == stopped[0]["uid"] != started[1]["uid"]
    assert started[1]["at"] < stopped[0]["at"]
    annotations = autoscaler_box["deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {DIGEST_ANNOTATION: "1" * 64}
    assert _pod(autoscaler_box, "lab1")["annotations"][DIGEST_ANNOTATION] == "1" * 64
    assert "Cluster Autoscaler 1.35.2" in _logs(autoscaler_box, "lab1")[1]
    assert _pod(autoscaler_box, "lab1")["name"] == started[1]["pod"]


def test_a_process_that_dies_is_restarted_after_the_backoff_as_a_kubelet_would(autoscaler_box: Any) -> None:
    events = autoscaler_box["runners"]["lab1"]["events"]
    exited = [event for event in events if event["event"] == "exited"]
    assert [event["exit_code"] for event in exited] == [137]  # 128 + SIGKILL, as a runtime says
    restarted = events[events.index(exited[0]) + 1]
    assert (restarted["event"], restarted["uid"]) == ("started", exited[0]["uid"])
    assert restarted["at"] - exited[0]["at"] >= 1.0
    (status,) = _pod(autoscaler_box, "lab1")["status"]["containerStatuses"]
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["reason"] == "Error"
    assert "running" in status["state"]
    assert restarted["log"].endswith("-1.log")


def test_a_rotated_secret_reaches_the_mounted_file_but_not_the_running_autoscaler(autoscaler_box: Any) -> None:
    rotation = autoscaler_box["rotation"]
    assert rotation["kubeconfig_seen"]
    assert rotation["events"] == ["synced"]
    assert rotation["same_process_alive"]
