"""The real cluster-autoscaler beneath the program's lab1 in the box (issue 30; the scenario of
e2e/box/workload/lab1_autoscaling.py, the session fixture `lab1_box` of tests/conftest.py): the official
chart installed by the program's Helm release through the real engine, its Pod run by the pod
runner stand-in as the real autoscaler 1.35.2 binary with exactly the chart's args, env and mounts
and a ServiceAccount token, so that RBAC is the real API server's; a rotated Secret reaches the
mounted file but not the running process (#4784), a new digest on the pod template restarts it,
and a killed process is restarted after the backoff. Selected with `pytest -m engine`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from components.cluster_autoscaler import KUBECONFIG_DIGEST_ANNOTATION
from e2e.box import scenarios
from e2e.box.workload import lab1_autoscaling, lab1_reads

pytestmark = pytest.mark.engine


def _log_of(lab1_box: Any, started: dict[str, Any]) -> str:
    """The start of the log of the process a `started` event names."""
    log: str = lab1_box["autoscaler_log_heads"][started["log"]]
    return log


def _first_started(lab1_box: Any) -> dict[str, Any]:
    started: dict[str, Any] = next(e for e in lab1_box["runner"]["events"] if e["event"] == "started")
    return started


def test_the_engine_installs_the_chart_and_the_runner_runs_it_as_the_real_autoscaler(lab1_box: Any) -> None:
    assert any(path.endswith("/cluster-autoscaler-9.59.0.tgz") for path in lab1_box["chart_requests"])
    assert lab1_box["runner"]["errors"] == []
    pod = lab1_box["autoscaler"]["pod"]
    assert pod["status"]["phase"] == "Running"
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    container = pod["spec"]["containers"][0]
    assert container["image"] == "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.2"
    # The process got exactly the command the chart rendered, and its env.
    process = lab1_box["autoscaler"]["process"]
    assert process["argv"] == container["command"] + container.get("args", [])
    assert process["argv"][:2] == ["./cluster-autoscaler", "--cloud-provider=clusterapi"]
    cluster = lab1_reads.Workload.of(lab1_box["entry"])
    discovery = f"clusterapi:clusterName={cluster.name},namespace={cluster.namespace}"
    assert f"--node-group-auto-discovery={discovery}" in process["argv"]
    assert {f"POD_NAMESPACE={cluster.namespace}", f"SERVICE_ACCOUNT={cluster.autoscaler}"} <= set(process["environ"])
    assert {f"KUBERNETES_SERVICE_HOST={scenarios.VM_ADDRESS}", "KUBERNETES_SERVICE_PORT=6443"} <= set(
        process["environ"]
    )
    assert process["hostname"] == pod["metadata"]["name"] == _first_started(lab1_box)["pod"]


def test_the_mounts_are_the_secret_and_a_token_of_the_charts_service_account(lab1_box: Any) -> None:
    process = lab1_box["autoscaler"]["process"]
    assert process["kubeconfig"] == lab1_box["beneath"]["secret"]["value"]
    cluster = lab1_reads.Workload.of(lab1_box["entry"])
    assert (process["namespace"], process["ca"]) == (cluster.namespace, lab1_box["autoscaler"]["mgmt_ca"])
    claims = process["token_claims"]
    assert claims["sub"] == cluster.account
    assert claims["kubernetes.io"]["pod"]["name"] == lab1_box["autoscaler"]["pod"]["metadata"]["name"]
    assert process["etc_on_the_machine_unchanged"]


def test_the_autoscaler_starts_the_clusterapi_provider_with_the_charts_discovery(lab1_box: Any) -> None:
    log = _log_of(lab1_box, _first_started(lab1_box))
    assert "Cluster Autoscaler 1.35.2" in log
    assert "Building clusterapi cloud provider." in log
    assert "Using kubeconfig file: /etc/kubernetes/value" in log
    cluster = lab1_reads.Workload.of(lab1_box["entry"])
    assert f"[clusterapi:clusterName={cluster.name},namespace={cluster.namespace}]" in log
    assert 'Using version "v1beta2" for API group "cluster.x-k8s.io"' in log
    assert '"Caches populated" type="infrastructure.cluster.x-k8s.io/v1alpha2, Resource=proxmoxmachinetemplates"' in log


def test_rbac_is_the_api_servers_own(lab1_box: Any) -> None:
    allowed = lab1_box["control"]["allowed_with_the_rule"]
    reads = {"list", "watch"}
    assert (lab1_box["entry"]["namespace"], 200) in {
        (namespace, code) for namespace, verb, code in allowed["machinedeployments"] if verb in reads
    }
    # With the program's additional rule the templates are read; once the control took it off the
    # Role, the restarted autoscaler is refused them, and says so (kubernetes/autoscaler #5912).
    assert {code for _, verb, code in allowed["proxmoxmachinetemplates"] if verb in reads} == {200}
    refused = lab1_box["control"]["refused_without"]["proxmoxmachinetemplates"]
    assert refused
    assert {code for _, _, code in refused} == {403}
    assert all(
        "proxmoxmachinetemplates.infrastructure.cluster.x-k8s.io is forbidden" in line
        for line in lab1_box["control"]["forbidden"]
    )


def test_a_rotated_secret_reaches_the_mounted_file_but_not_the_running_autoscaler(lab1_box: Any) -> None:
    sync = lab1_box["rotation_sync"]
    assert sync["events"] == ["synced"]
    assert sync["kubeconfig_seen"]
    assert sync["same_process_alive"]


def test_a_new_digest_on_the_pod_template_restarts_the_autoscaler(lab1_box: Any) -> None:
    events = lab1_box["rotation_events"]
    [started] = [event for event in events if event["event"] == "started"]
    [stopped] = [event for event in events if event["event"] == "stopped"]
    # The rollout starts the new Pod before it stops the old one.
    assert started["uid"] != stopped["uid"]
    assert started["at"] < stopped["at"]
    digest = hashlib.sha256(lab1_box["rotation_sync"]["rotated"].encode()).hexdigest()
    annotations = lab1_box["rotation_deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations[KUBECONFIG_DIGEST_ANNOTATION] == digest
    pod = lab1_box["rotation_pod"]
    assert pod["metadata"]["annotations"][KUBECONFIG_DIGEST_ANNOTATION] == digest
    assert pod["metadata"]["name"] == started["pod"]
    assert "Cluster Autoscaler 1.35.2" in _log_of(lab1_box, started)


def test_a_process_that_dies_is_restarted_after_the_backoff_as_a_kubelet_would(lab1_box: Any) -> None:
    crash = lab1_box["control"]["crash"]
    assert [event["event"] for event in crash] == ["exited", "started"]
    exited, restarted = crash
    assert exited["exit_code"] == 137  # 128 + SIGKILL, as a runtime says
    assert restarted["uid"] == exited["uid"]
    assert restarted["at"] - exited["at"] >= lab1_autoscaling.BACKOFF_SECONDS
    (status,) = lab1_box["control"]["pod"]["status"]["containerStatuses"]
    assert status["restartCount"] == 1
    assert status["lastState"]["terminated"]["reason"] == "Error"
    assert "running" in status["state"]
    assert restarted["log"].endswith("-1.log")
