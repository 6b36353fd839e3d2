"""cluster-api-operator's real manager (issue 68; e2e/box/management/operator_trial.py and
operator_changes.py): its release as the program renders it, its Pod run by the pod runner as the
binary built here, its webhook
certificate issued by cert-manager's real controller and injected by its real CA injector, its
webhooks reached through its Service at the Pod's address, the providers' releases served where it
asks for them; the program's five provider CRs go through those webhooks, each provider is fetched,
installed and Ready with its manager's Pod run as the binary built here (CAPMOX's with the
program's credentials, against the Proxmox VE stand-in), and the operator's preflight says of each
what it says on the owner's lab, and refuses what the program must never send. Selected with
`pytest -m engine` (it needs e2e/engine/build-engine.sh control-plane workload cert-manager
operator).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.cluster_api import (
    CREDENTIALS_ROLLOUT_ENV,
    INFRASTRUCTURE,
    OPERATOR_NAMESPACE,
    PROVIDERS,
    credentials_rollout,
    credentials_secret_name,
)
from e2e.box import scenarios
from e2e.box.management import operator_changes, operator_trial
from e2e.engine import pins, vendor
from e2e.engine.netns import in_new_netns
from e2e.standins.cluster import provider_releases

pytestmark = pytest.mark.engine

OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:capi-operator-manager"
CORE_PIN = pins.pinned(operator_trial.CORE.config_key)


@pytest.fixture(scope="module")
def trial(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("operator-trial")
    return in_new_netns(
        "management.operator_trial.preflight",
        str(root),
        addresses=[scenarios.VM_ADDRESS, scenarios.PROXMOX_ADDRESS],
        timeout=400,
    )


def _key(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}"


def test_the_operator_ran_as_its_pod_from_the_binary_built_here(trial: Any) -> None:
    assert "failed" not in trial, trial["failed"]
    assert trial["runner_errors"] == []
    # Started once, and stopped only when the trial ended: it never exited on its own.
    assert [event["event"] for event in trial["runner_events"]] == ["started", "stopped"]
    [log] = trial["operator_log"].values()
    assert '"Starting workers" controller="coreprovider"' in log
    assert {write[0] for write in trial["writes"]} == {OPERATOR_USER}
    assert ["create", "leases", f"{OPERATOR_NAMESPACE}/controller-leader-election-capi-operator"] in [
        write[1:] for write in trial["writes"]
    ]


def test_its_webhooks_admit_the_program_s_five_crs_and_default_the_credentials_namespace(trial: Any) -> None:
    """Sent once the injector had filled both configurations in: admitted at once. The real
    mutating webhook adds configSecret's namespace, which the program leaves out (the webhook
    stand-in of the other scenarios does not)."""
    assert trial["program"]["rc"] == 0, trial["program"]["stderr"]
    for cr in operator_trial.provider_crs():
        live = trial["providers"][operator_changes.key_of(cr)]["spec"]
        expected = dict(cr["spec"])
        if cr["kind"] == INFRASTRUCTURE.kind:  # as the rotation, sent afterwards, left it
            rotated = credentials_secret_name(operator_changes.ROTATED)
            expected["configSecret"] = {"name": rotated, "namespace": INFRASTRUCTURE.namespace}
            expected["deployment"] = credentials_rollout(rotated)
        if cr["kind"] == operator_changes.IPAM.kind:
            expected["version"] = operator_changes.UNRELEASED  # the no-release control, sent last
        assert live == expected


def test_the_core_s_release_is_fetched_where_the_owner_s_lab_fetches_it(trial: Any) -> None:
    """The versions through the Go module proxy by the repository's path (and the next major's
    list, which the real proxy answers 404 too), then the release's files from github.com; nothing
    else is asked before the core is installed."""
    download = f"/{provider_releases.CLUSTER_API_REPOSITORY}/releases/download/{CORE_PIN}"
    listed = f"/github.com/{provider_releases.CLUSTER_API_REPOSITORY}"
    assert trial["release_requests"][:4] == [
        f"{listed}/@v/list",
        f"{listed}/v2/@v/list",
        f"{download}/metadata.yaml",
        f"{download}/core-components.yaml",
    ]
    assert trial["release_unknown"][0] == f"GET {listed}/v2/@v/list"


def test_the_core_s_components_are_cached_per_version_and_installed_at_its_pin(trial: Any) -> None:
    [cache] = trial["cache"]
    assert cache["name"] == f"core-cluster-api-{CORE_PIN}"
    assert cache["labels"] == {
        "managed-by.operator.cluster.x-k8s.io": "true",
        "provider.cluster.x-k8s.io/name": "cluster-api",
        "provider.cluster.x-k8s.io/type": "core",
        "provider.cluster.x-k8s.io/version": CORE_PIN,
    }
    assert trial["core_deployments"] == {
        "capi-controller-manager": [f"{provider_releases.IMAGES}/cluster-api-controller:{CORE_PIN}"]
    }
    core = trial["providers"][_key("CoreProvider", "capi-system", "cluster-api")]["conditions"]
    assert (core["PreflightCheckPassed"]["status"], core["ProviderInstalled"]["status"]) == ("True", "True")


def test_the_core_is_ready_once_its_deployment_is_available_and_not_before(trial: Any) -> None:
    """What the program's wait (`condition=Ready`) reads: before anything runs the core's Pod, not
    Ready; once the pod runner runs it as Cluster API's core manager built here, Ready."""
    before = trial["core_before_its_pod"]
    assert (before["status"], before["reason"]) == ("False", "MinimumReplicasUnavailable")
    ready = trial["providers"][_key("CoreProvider", "capi-system", "cluster-api")]["conditions"]["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "MinimumReplicasAvailable")
    # Cluster API's three managers started once and never exited (IPAM's is upgraded in place
    # and CAPMOX's rolled onto its rotated credentials, later).
    steady = [
        event["event"]
        for event in trial["manager_events"]
        if "-ipam-" not in event["pod"] and "capmox" not in event["pod"]
    ]
    assert steady == ["started"] * 3
    assert trial["core_ready_seconds"] < 30


def test_the_other_four_wait_for_the_core_then_are_installed_and_ready(trial: Any) -> None:
    """Waiting while the core is not Ready; once it is, fetched from their releases, installed,
    and Ready once their managers' Pods run (the control plane's whole: nothing to reconcile here)."""
    for p in PROVIDERS:
        if p.kind == "CoreProvider":
            continue
        key = _key(p.kind, p.namespace, p.name)
        assert trial["before_the_core"][key] == operator_trial.WAITING_FOR_CORE
        conditions = trial["once_ready"][key]["conditions"]
        assert [conditions[c]["status"] for c in ("ProviderInstalled", "Ready")] == ["True"] * 2, conditions


def test_capmox_s_release_is_fetched_and_its_manager_runs_with_the_program_s_credentials(trial: Any) -> None:
    """CAPMOX's versions through the proxy, its release from github.com; the operator substitutes
    the program's configSecret into the release's credentials Secret, whose keys the manager's
    container reads as PROXMOX_URL, PROXMOX_TOKEN and PROXMOX_SECRET: the manager asked the
    Proxmox VE stand-in at the program's URL for its version with the program's token (a token
    it refuses ends the manager at its start, and the provider is never Ready)."""
    download = f"/{provider_releases.CAPMOX_REPOSITORY}/releases/download/{pins.CAPMOX_VERSION}"
    for path in ("metadata.yaml", "infrastructure-components.yaml"):
        assert f"{download}/{path}" in trial["release_requests"]
    assert f"/github.com/{provider_releases.CAPMOX_REPOSITORY}/@v/list" in trial["release_requests"]
    assert ("GET", "/api2/json/version") in [tuple(call) for call in trial["proxmox_calls"]]
    key = _key(INFRASTRUCTURE.kind, INFRASTRUCTURE.namespace, INFRASTRUCTURE.name)
    assert trial["providers"][key]["conditions"]["Ready"]["status"] == "True"
    logs = [log for name, log in trial["manager_logs"].items() if "capmox" in name]
    assert logs
    assert not [log for log in logs if "unable to initialize proxmox api client" in log]


def test_a_rotated_capmox_token_reaches_a_new_manager_pod_through_the_operator(trial: Any) -> None:
    """The program's rotation (a Secret of a new name, the InfrastructureProvider pointed at it):
    the operator renders the new secret into the manager's credentials Secret, and the Secret's
    name in the manager container's env (components/cluster_api.py `credentials_rollout`) rolls
    the Deployment, whose new Pod starts with the new token. Without that env the operator's update
    leaves the template as it was: the running manager keeps the old token, and the owner's next
    step, removing the old token in Proxmox, would cut CAPMOX off."""
    rotation = trial["rotation"]
    before, after = rotation["generation"]
    assert after > before
    starts = [
        event["pod"] for event in trial["manager_events"] if "capmox" in event["pod"] and event["event"] == "started"
    ]
    assert len(starts) == len(set(starts)) == 2
    assert trial["capmox_credentials"] == {
        **operator_changes.ROTATED,
        CREDENTIALS_ROLLOUT_ENV: credentials_secret_name(operator_changes.ROTATED),
    }


def test_a_provider_name_the_operator_does_not_know_is_refused_by_its_preflight(trial: Any) -> None:
    assert trial["unknown_sent"]["rc"] == 0, "the webhooks let it through; the preflight refuses it"
    kind, name, namespace = operator_trial.UNKNOWN
    condition = trial["unknown_preflight"]
    assert (condition["status"], condition["reason"]) == ("False", "FetchConfigValidationError")
    assert "not predefined provider" in condition["message"]
    # Deleted afterwards: left, it stops every other provider's upgrade (operator_trial.py).
    assert trial["unknown_deleted"] == 0
    assert _key(kind, namespace, name) not in trial["providers"]


def test_a_bumped_pin_is_upgraded_in_place_and_the_old_version_s_cache_is_left(trial: Any) -> None:
    """IPAM sent at its module's version (a stack from before the bump), installed and Ready, then
    at the program's pin, as the program's one-at-a-time upgrade sends it: the operator fetches the
    new release and upgrades in place within seconds; the manager's Deployment carries the new
    image and its old Pod is replaced; the old version's cached components stay beside the new
    (`ipam-in-cluster-<version>` ConfigMaps: the operator never removes one, cluster-api-operator
    #873)."""
    bump = trial["bump"]
    pin = pins.pinned(operator_changes.IPAM.config_key)
    assert bump["installed"] == [vendor.IPAM_VERSION, pin]
    assert bump["images"] == [f"{provider_releases.IPAM_IMAGE}:{pin}"]
    ipam = [(e["event"], e["pod"]) for e in trial["manager_events"] if "-ipam-" in e["pod"]]
    assert [event for event, _pod in ipam] == ["started", "stopped", "deleted", "started"]
    assert ipam[0][1] == ipam[1][1] != ipam[3][1]
    assert bump["caches"] == {
        "configmaps": [f"ipam-in-cluster-{vendor.IPAM_VERSION}", f"ipam-in-cluster-{pin}"],
        "secrets": [],
    }
    assert (
        f"/{provider_releases.IPAM_REPOSITORY}/releases/download/{pin}/ipam-components.yaml"
        in trial["release_requests"]
    )


def test_a_pin_older_than_the_installed_version_is_refused_and_the_installed_one_kept(trial: Any) -> None:
    """The IPAMProvider the operator installed at the program's pin, then a pin a minor below it
    applied, as a recovery from an older stack file would: refused as a downgrade (v0.28.0's
    message keeps an unformatted `%s`), and the installed provider stays as it was, Ready."""
    ipam = operator_changes.IPAM
    downgrade = trial["downgrade"]
    assert downgrade["installed"] == pins.pinned(ipam.config_key)
    assert downgrade["sent"]["rc"] == 0, "the webhooks let it through; the preflight refuses it"
    found = downgrade["found"]
    assert found["spec"]["version"] == operator_changes.OLDER
    refused = found["conditions"]["PreflightCheckPassed"]
    assert (refused["status"], refused["reason"]) == ("False", "UnsupportedProviderDowngradeReason")
    assert found["conditions"]["Ready"]["status"] == "True"


def test_a_pin_with_no_release_is_named_and_the_program_s_wait_does_not_pass(trial: Any) -> None:
    """The IPAMProvider sent at a version its repository never released, as a mistyped pin would
    send it: the operator asks for the release where the owner's lab does, finds none and says so
    with the version, and keeps the installed one running. Its Ready condition stays True, but of
    an older generation of the CR, so the program's `condition=Ready` wait does not pass on it
    (pulumi-kubernetes's condition wait, await/condition/kubectl.go, wants a current
    observedGeneration): the `up` fails at its bound instead of reporting the pin installed."""
    unreleased, ipam = trial["unreleased"], operator_changes.IPAM
    assert unreleased["sent"]["rc"] == 0, "the webhooks let it through; the fetch fails"
    assert unreleased["installed"] == pins.pinned(ipam.config_key)
    installed = unreleased["conditions"]["ProviderInstalled"]
    assert (installed["status"], installed["reason"]) == ("False", "ComponentsFetchError")
    assert f"release not found for version {operator_changes.UNRELEASED}" in installed["message"]
    ready = unreleased["conditions"]["Ready"]
    assert ready["status"] == "True"
    assert ready["observedGeneration"] < unreleased["generation"]
    download = f"/{provider_releases.IPAM_REPOSITORY}/releases/download/{operator_changes.UNRELEASED}"
    assert f"GET {download}/metadata.yaml" in trial["release_unknown"]


def test_the_program_s_credentials_keys_are_every_variable_capmox_s_release_reads(tmp_path: Path) -> None:
    """The variables of CAPMOX's release that the operator fills from the configSecret are the
    keys the program writes, no more, no fewer. A key misnamed by the program would pass unseen:
    the release defaults each to "" (`${PROXMOX_TOKEN=""}`), the operator installs it and says
    Ready, and CAPMOX's manager, given any of the three empty, starts without a Proxmox client at
    all and fails only each cluster it reconciles (cmd/main.go `setupProxmoxClient`)."""
    served = provider_releases.capmox(tmp_path)
    download = f"/{provider_releases.CAPMOX_REPOSITORY}/releases/download/{provider_releases.CAPMOX_SERVED_AS}"
    documents = yaml.safe_load_all(served[f"{download}/infrastructure-components.yaml"])
    [secret] = [d for d in documents if d and d["metadata"]["name"] == operator_changes.MANAGER_CREDENTIALS]
    variables = [re.fullmatch(r'\$\{([A-Z_]+)=""\}', value) for value in secret["stringData"].values()]
    assert all(variables), secret["stringData"]
    assert {found[1] for found in variables if found} == set(operator_changes.CREDENTIALS)
