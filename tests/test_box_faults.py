"""Faults in the lab in a box (e2e/box/management/box_faults.py, issue 18): each fault injected during a real
`pulumi up` of the whole program ends the run with an error naming what failed and where, with no
secret in it, the state still readable, and the next run without the fault converges with one VM
made by one create and k3s installed once. The faults: Proxmox VE's errors, sshd's, another host
key, a k3s upgrade's session dying before its restart, the API server going down after the k3s
steps, a provider CR never Ready, the operator's webhooks never given their CA bundle, and Ctrl-C.
In network namespaces of the tests' own; selected with `pytest -m engine`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from e2e.box import scenarios
from e2e.box.management import box_faults
from e2e.box.observed import PROGRAM_USER, STANDIN_RECORDS
from e2e.engine.control_plane import INJECTOR_USER
from e2e.engine.netns import in_new_netns
from e2e.standins.cluster import admission_webhook_standin, playbook_lab

pytestmark = pytest.mark.engine

ONE_VM = {"vms": [str(scenarios.VMID)], "creates": 1}
# What the program makes on the cluster first, once it answers: the releases and the namespaces.
ON_THE_CLUSTER = {"mgmt-cert-manager", "mgmt-cluster-api-operator", "mgmt-ns-capi-system", "mgmt-ns-capmox-system"}
WEBHOOK_WAITS = ("mgmt-operator-webhook-validating", "mgmt-operator-webhook-mutating")


def _scenario(factory: pytest.TempPathFactory, name: str) -> Any:
    root: Path = factory.mktemp(name)
    return in_new_netns(f"management.box_faults.{name}", str(root), addresses=[scenarios.PROXMOX_ADDRESS], timeout=1800)


@pytest.fixture(scope="module")
def pve(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _scenario(tmp_path_factory, "pve_faults")


@pytest.fixture(scope="module")
def ssh(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _scenario(tmp_path_factory, "ssh_faults")


@pytest.fixture(scope="module")
def api_down(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _scenario(tmp_path_factory, "api_server_down")


@pytest.fixture(scope="module")
def bounds(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _scenario(tmp_path_factory, "bounds_waited_out")


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _scenario(tmp_path_factory, "interrupted")


def _failed(run: dict[str, Any], resource: str, *said: str) -> None:
    """The run failed on `resource`, its error saying each of `said`, and left a readable state
    with no secret in the output or the state and no pending operation."""
    assert run["rc"] != 0
    errored = f"{resource} **creating failed**" in run["output"] or f"{resource} **updating failed**" in run["output"]
    assert errored, run["output"][-6000:]
    for text in said:
        assert text in run["output"], text
    assert run["leaked"] == []
    assert run["state"]["parsed"]
    assert run["state"]["leaked"] == []
    assert run["state"]["pending"] == []


def _converged(run: dict[str, Any]) -> None:
    assert run["rc"] == 0, run["output"][-6000:]
    assert run["pve"] == ONE_VM
    assert len(run["installs"]) == 1, run["installs"]
    assert run["leaked"] == []


def test_a_failed_download_task_names_the_image_and_proxmox_s_error(pve: Any) -> None:
    _failed(pve["download"], "mgmt-image", "failed to complete with exit code: " + box_faults.DOWNLOAD_ERROR)
    assert "mgmt-image" not in pve["download"]["state"]["resources"]
    assert pve["download"]["pve"] == {"vms": [], "creates": 0}


def test_vm_create_answering_500_names_the_vm_and_proxmox_s_reason(pve: Any) -> None:
    _failed(pve["vm_create"], "mgmt-vm", "received an HTTP 500 response - Reason: " + box_faults.CREATE_ERROR)
    resources = pve["vm_create"]["state"]["resources"]
    assert "mgmt-image" in resources
    assert "mgmt-vm" not in resources
    assert pve["vm_create"]["pve"] == {"vms": [], "creates": 0}


def test_after_the_proxmox_faults_the_next_up_converges_with_one_vm(pve: Any) -> None:
    _converged(pve["recovered"])
    assert set(pve["again"]["summary"]) <= {"same", "read"}, pve["again"]["summary"]
    assert pve["again"]["pve_writes"] == []


def test_the_proxmox_stand_ins_knew_every_request(pve: Any) -> None:
    for key in STANDIN_RECORDS:
        assert pve[key] == [], key


def test_sshd_closing_a_session_mid_script_fails_that_step(ssh: Any) -> None:
    assert ssh["closed_sessions"] == 1
    _failed(ssh["mid_script"], "mgmt-node-ready")
    assert "mgmt-node-ready" not in ssh["mid_script"]["state"]["resources"]
    assert "mgmt-k3s-install" in ssh["mid_script"]["state"]["resources"]


def test_after_the_closed_session_the_next_up_converges_without_a_second_install(ssh: Any) -> None:
    _converged(ssh["mid_script_recovered"])
    created = {
        step["urn"].rsplit("::", 1)[1] for step in ssh["mid_script_recovered"]["steps"] if step["op"] == "create"
    }
    assert "mgmt-node-ready" in created
    assert "mgmt-k3s-install" not in created


def test_sshd_refusing_connections_fails_the_host_step_naming_the_address(ssh: Any) -> None:
    assert ssh["setting"]["rc"] == 0, ssh["setting"]
    # After as many dials as sshDialAttempts says: the provider counts the failures before the last.
    attempts = f"after {box_faults.SSH_DIAL_ATTEMPTS} failed attempts"
    _failed(ssh["refused"], box_faults.HOST_STEP, f"{scenarios.VM_ADDRESS}:22", "connection refused", attempts)
    assert ssh["refused"]["ssh_sessions"] == []


def test_another_host_key_is_refused_and_never_accepted(ssh: Any) -> None:
    _failed(
        ssh["host_key"], box_faults.HOST_STEP, "ssh: host key mismatch", f"after {box_faults.SSH_DIAL_ATTEMPTS} failed"
    )
    assert ssh["host_key"]["ssh_connections"], "the step dialled the VM"
    assert ssh["host_key"]["ssh_sessions"] == []


def test_with_sshd_and_its_key_back_the_host_step_runs_and_installs_nothing(ssh: Any) -> None:
    for run in ("refused_recovered", "host_key_recovered"):
        _converged(ssh[run])
        assert ssh[run]["ssh_sessions"], run
    assert set(ssh["again"]["summary"]) <= {"same", "read"}, ssh["again"]["summary"]


def test_an_upgrade_whose_session_dies_before_k3s_restarts_fails_the_install_step(ssh: Any) -> None:
    """Killed after the installer put the new binary in place, before its restart of k3s: the
    old k3s runs on, and the retry finds the new version installed (issue 28)."""
    assert ssh["upgrade_setting"]["rc"] == 0, ssh["upgrade_setting"]
    assert ssh["upgrade_killed_sessions"] == 1
    run = ssh["upgrade_interrupted"]
    _failed(run, "mgmt-k3s-install")
    assert run["k3s_restarts"] == []
    assert scenarios.K3S_BUMP in ssh["binary_after_interruption"]
    # The installer was killed before it logged: the box's one install is still the first run's.
    assert len(run["installs"]) == 1, run["installs"]


def test_after_the_interrupted_upgrade_the_next_up_restarts_k3s_once_and_converges(ssh: Any) -> None:
    """k3s_install.sh finds the binary newer than k3s's last start and restarts k3s, without
    running the installer again; the node comes back at the new version (node-ready waits for it)
    and nothing is left to change."""
    run = ssh["upgrade_converged"]
    _converged(run)
    assert len(run["k3s_restarts"]) == 1, run["k3s_restarts"]
    ops = {(step["urn"].rsplit("::", 1)[1], step["op"]) for step in run["steps"]}
    assert {("mgmt-k3s-install", "update"), ("mgmt-node-ready", "replace"), ("mgmt-read-kubeconfig", "replace")} <= ops
    assert scenarios.K3S_BUMP in ssh["binary_after_convergence"]
    assert ssh["upgrade_no_changes"]["rc"] == 0, ssh["upgrade_no_changes"]["output"][-6000:]
    assert ssh["upgrade_no_changes"]["ssh_connections"] == []


def test_the_api_server_down_after_the_k3s_steps_fails_an_object_on_the_cluster_naming_the_address(
    api_down: Any,
) -> None:
    assert api_down["stopped"] == 1
    run = api_down["down"]
    # Which object on the cluster the engine reaches first (and stops the run on) varies: a
    # namespace or a release; every one that failed is on the cluster.
    marked = re.findall(r"^\s*\S*\s*(\S+) (\S+) \*\*creating failed\*\*", run["output"], re.MULTILINE)
    # The stack is marked failed too, as every failed run's is.
    failed = [(type_, name) for type_, name in marked if type_ != "pulumi:pulumi:Stack"]
    assert failed, run["output"][-6000:]
    assert {type_.split(":", 1)[0] for type_, _ in failed} == {"kubernetes"}, failed
    _failed(run, failed[0][1], f"{scenarios.VM_ADDRESS}:6443", "connection refused")
    # Every host step had run: what they made is in the state, and k3s was installed once; none
    # of what the next run creates on the cluster is.
    assert "mgmt-read-kubeconfig" in run["state"]["resources"]
    assert not ON_THE_CLUSTER & set(run["state"]["resources"])
    assert run["pve"] == ONE_VM
    assert len(run["installs"]) == 1


def test_with_the_api_server_back_the_next_up_installs_the_releases_and_no_k3s(api_down: Any) -> None:
    run = api_down["recovered"]
    _converged(run)
    created = {step["urn"].rsplit("::", 1)[1] for step in run["steps"] if step["op"] == "create"}
    assert created >= ON_THE_CLUSTER
    assert not created & {"mgmt-vm", "mgmt-k3s-install", "mgmt-read-kubeconfig"}
    # No host step comes after the releases.
    assert run["ssh_sessions"] == []
    assert set(api_down["again"]["summary"]) <= {"same", "read"}, api_down["again"]["summary"]
    for key in ("pve_unknown", "chart_unknown", "release_unknown", "webhook_unknown"):
        assert api_down[key] == [], key
    # Whatever the operator's and the CA injector's stand-ins said while the API server was down
    # (they may not have polled then) is that the API server went away: it refused them, or, for
    # a poll in flight when k3s stopped, reset the connection or closed it unanswered (http.client's
    # RemoteDisconnected, seen on a fresh clone on 2026-12-05); nothing else (no TLS or auth error).
    went_away = ("Connection refused", "Connection reset by peer", "Remote end closed connection without response")
    for error in api_down["operator_errors"] + api_down["injector_errors"]:
        assert f"{scenarios.VM_ADDRESS}:6443" in error, error
        assert any(said in error for said in went_away), error


NEVER_READY_CR = "mgmt-infrastructure-proxmox"
READY_PROVIDERS = [
    "CoreProvider/cluster-api@v1.12.11",
    "BootstrapProvider/kubeadm@v1.12.11",
    "ControlPlaneProvider/kubeadm@v1.12.11",
    "IPAMProvider/in-cluster@v1.1.1",
]


def _sent(admission: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the program sent provider CRs, dry runs too, whatever the API server answered."""
    return [write for write in admission if write["user"] == PROGRAM_USER and write["resource"].endswith("providers")]


def _changed(run: dict[str, Any]) -> dict[str, str]:
    return {step["urn"].rsplit("::", 1)[1]: step["op"] for step in run["steps"] if step["op"] not in {"same", "read"}}


def test_webhooks_never_given_their_ca_bundle_fail_the_up_at_the_wait_s_bound_sending_no_cr(bounds: Any) -> None:
    assert [setting["rc"] for setting in bounds["settings"]] == [0, 0], bounds["settings"]
    run = bounds["not_injected"]
    # While it waits, the CLI shows what for; then each wait names its resource and the timeout.
    assert "{.webhooks[0].clientConfig.caBundle} selected nothing" in run["output"]
    for wait in WEBHOOK_WAITS:
        _failed(
            run,
            wait,
            f'::{wait}" was successfully created, but the Kubernetes API server reported that it failed to '
            "fully initialize or become live: timed out waiting for the condition",
        )
        # operatorWebhookTimeoutMinutes 1, not the default 5: the CLI's own clock on each wait.
        [waited] = re.findall(rf"{wait} creating \((\d+)s\) error:", run["output"])
        assert 60 <= int(waited) < 120, (wait, waited)
    withheld = bounds["withheld"]
    assert withheld["injected"] == []
    assert withheld["reviews"] == []
    assert _sent(withheld["admission"]) == []
    assert not set(scenarios.PROVIDER_CR_RESOURCES) & set(run["state"]["resources"])
    assert set(run["state"]["resources"]) >= ON_THE_CLUSTER
    assert run["pve"] == ONE_VM
    assert len(run["installs"]) == 1


def test_with_the_bundles_injected_the_next_up_sends_the_crs_after_them(bounds: Any) -> None:
    """The waits that timed out are in the state: the next run waits again (the bundles are there
    now), then creates every CR, each reviewed by the operator's webhooks."""
    run = bounds["not_ready"]
    assert _changed(run) == {
        **dict.fromkeys(WEBHOOK_WAITS, "update"),
        **dict.fromkeys(scenarios.PROVIDER_CR_RESOURCES, "create"),
    }
    assert run["ssh_sessions"] == []
    injected = [write for write in bounds["admission"] if write["user"] == INJECTOR_USER]
    assert sorted(write["name"] for write in injected) == sorted(admission_webhook_standin.CONFIGURATION_NAMES.values())
    sent = _sent(bounds["admission"])
    # Server-side apply creates each CR by a patch, answered 201.
    assert sorted((write["resource"], write["name"]) for write in sent if write["code"] == 201) == sorted(
        (f"{kind.lower()}s", name) for kind, (_, name, _) in playbook_lab.PROVIDERS.items()
    )
    filled_in = max(write["answered"] for write in injected)
    assert all(write["received"] > filled_in for write in sent), (sent, injected)
    assert {(review["kind"], review["operation"]) for review in bounds["reviews"]} == {
        (kind, "CREATE") for kind in playbook_lab.PROVIDERS
    }


def test_a_provider_cr_never_ready_fails_the_up_at_the_setting_s_bound_naming_the_cr(bounds: Any) -> None:
    run = bounds["not_ready"]
    _failed(
        run,
        NEVER_READY_CR,
        f'::{NEVER_READY_CR}" was successfully created, but the Kubernetes API server reported that it failed to '
        "fully initialize or become live: timed out waiting for the condition",
    )
    # providerReadyTimeoutMinutes 1, not the default 15: the CLI's own clock on the CR when it failed.
    [waited] = re.findall(rf"{NEVER_READY_CR} creating \((\d+)s\) error:", run["output"])
    assert 60 <= int(waited) < 120, waited


def test_after_the_provider_timeout_the_state_lists_everything_made(bounds: Any) -> None:
    run = bounds["not_ready"]
    made = {"mgmt-vm", "mgmt-host-ready", "mgmt-k3s-install", "mgmt-read-kubeconfig", *WEBHOOK_WAITS}
    crs = {"mgmt-core-cluster-api", "mgmt-bootstrap-kubeadm", "mgmt-controlplane-kubeadm", "mgmt-ipam-in-cluster"}
    # The CR that timed out is in the state too: it was created, only never Ready, and the next
    # run updates it rather than creating it again.
    assert made | ON_THE_CLUSTER | crs | {NEVER_READY_CR} <= set(run["state"]["resources"])
    assert sorted(bounds["reconciled_while_withheld"]) == sorted(READY_PROVIDERS)
    assert run["pve"] == ONE_VM
    assert len(run["installs"]) == 1


def test_with_the_provider_ready_the_next_up_converges_updating_only_that_cr(bounds: Any) -> None:
    run = bounds["released"]
    _converged(run)
    assert bounds["reconciled_once_released"] == ["InfrastructureProvider/proxmox@v0.9.1"]
    assert _changed(run) == {NEVER_READY_CR: "update"}
    assert run["ssh_sessions"] == []
    assert run["pve_writes"] == []
    # The kubernetes plugin updates a CR by two patches: its field managers put right, then the apply.
    assert run["k8s_writes"] == [["patch", "infrastructureproviders", "proxmox"]] * 2
    assert bounds["provider_versions"] == {
        "capiCoreVersion": "v1.12.11",
        "capiBootstrapVersion": "v1.12.11",
        "capiControlPlaneVersion": "v1.12.11",
        "capmoxVersion": "v0.9.1",
        "ipamInClusterVersion": "v1.1.1",
    }
    assert bounds["no_changes"]["rc"] == 0, bounds["no_changes"]["output"][-4000:]
    for key in STANDIN_RECORDS:
        assert bounds[key] == [], key


def test_ctrl_c_twice_stops_the_up_and_leaves_the_step_pending(interrupted: Any) -> None:
    run = interrupted["interrupted"]
    assert run["signalled"] == 1
    assert run["rc"] != 0
    assert run["leaked"] == []
    assert run["state"]["parsed"]
    assert run["state"]["pending"] == [["creating", "mgmt-node-ready"]]


def test_the_next_up_runs_the_step_again_but_keeps_the_pending_operation(interrupted: Any) -> None:
    run = interrupted["pending_up"]
    assert run["rc"] == 0, run["output"][-6000:]
    assert "Attempting to deploy or update resources with 1 pending operations" in run["output"]
    assert "mgmt-node-ready, interrupted while creating" in run["output"]
    assert run["state"]["pending"] == [["creating", "mgmt-node-ready"]]
    assert run["pve"] == ONE_VM
    assert len(run["installs"]) == 1


def test_the_pending_operation_is_cleared_as_the_troubleshooting_doc_says(interrupted: Any) -> None:
    cleared = interrupted["cleared"]
    assert cleared["rc"] == 0, cleared["output"][-4000:]
    assert cleared["state"]["pending"] == []
    doc = (Path(__file__).resolve().parent.parent / "docs" / "troubleshooting.md").read_text()
    assert "pulumi refresh --clear-pending-creates" in doc


def test_after_the_interrupt_the_next_up_converges_without_a_second_vm_or_install(interrupted: Any) -> None:
    _converged(interrupted["next"])
