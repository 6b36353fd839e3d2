"""cert-manager's real controller, CA injector and webhook (issue 68;
e2e/box/management/cert_manager_trial.py): run from the Deployments of the release the program
renders, as their ServiceAccounts, on a real control plane, the webhook is reached through its
Service and refuses what it must; the controller issues the operator's webhook certificate from the
operator chart's Issuer and the injector fills the two webhook configurations the program waits on
with its CA, and nothing else: a configuration naming a Certificate no one made stays empty.
Selected with `pytest -m engine` (it needs e2e/engine/build-engine.sh control-plane workload
cert-manager).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography import x509

from components.cluster_api import OPERATOR_NAMESPACE, OPERATOR_WEBHOOK_CONFIGURATIONS
from e2e.box import scenarios
from e2e.box.management.cert_manager_trial import UNISSUED
from e2e.controllers import cert_manager
from e2e.engine.cli import built_bin
from e2e.engine.netns import in_new_netns

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def trial(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("cert-manager-trial")
    return in_new_netns(
        "management.cert_manager_trial.issued_and_injected", str(root), addresses=[scenarios.VM_ADDRESS], timeout=300
    )


def test_the_built_binaries_ran_as_the_chart_s_service_accounts_and_lasted(trial: Any) -> None:
    assert "failed" not in trial, trial["failed"]
    for deployment in cert_manager.DEPLOYMENTS:
        binary = cert_manager.BINARIES[deployment]
        ran = trial["processes"][deployment]
        assert ran["exe"] == str(built_bin("LAB_MGMT_CERT_MANAGER_BIN", binary) / binary)
        assert ran["user"] == f"system:serviceaccount:cert-manager:{deployment}"
    assert "--cluster-resource-namespace=cert-manager" in trial["processes"][cert_manager.CONTROLLER]["args"]
    assert trial["alive"] == dict.fromkeys(cert_manager.DEPLOYMENTS, True)


def test_the_post_install_check_the_program_s_release_waits_for_passes_once_the_webhook_answers(trial: Any) -> None:
    """Run as Helm runs the hook, right after the release's objects are made: it waits for the
    webhook through its Service (its own `--wait=1m`) and ends 0."""
    check = trial["startupapicheck"]
    assert (check["rc"], check["user"]) == (0, f"system:serviceaccount:cert-manager:{cert_manager.STARTUPAPICHECK}")
    assert "The cert-manager API is ready" in check["output"]
    assert check["seconds"] < 60


def test_the_controller_issues_the_operator_s_webhook_certificate(trial: Any) -> None:
    certificate, secret = trial["certificate"], trial["secret"]
    assert secret is not None, "no Secret issued"
    issued = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = issued.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(names.get_values_for_type(x509.DNSName)) == sorted(certificate["spec"]["dnsNames"])
    assert {c["type"]: c["status"] for c in trial["certificate_status"]["conditions"]}["Ready"] == "True"
    secret_path = f"{OPERATOR_NAMESPACE}/{certificate['spec']['secretName']}"
    controller = trial["processes"][cert_manager.CONTROLLER]["user"]
    # Written by server-side apply, as cert-manager writes the Secrets it issues.
    assert ["patch", "secrets", secret_path] in [write[1:] for write in trial["writes"] if write[0] == controller]


def test_the_injector_fills_both_configurations_the_program_waits_on_with_that_ca(trial: Any) -> None:
    awaited = {
        f"{kind.capitalize()}WebhookConfiguration/{name}" for kind, name in OPERATOR_WEBHOOK_CONFIGURATIONS.items()
    }
    assert set(trial["awaited"]) == awaited
    # Both base64 of the same PEM: the Secret's data as the API server holds it, the bundle likewise.
    ca = trial["secret"]["data"]["ca.crt"]
    for name in awaited:
        bundles = trial["bundles"][name]
        assert bundles, name
        assert set(bundles) == {ca}, name
    injector = trial["processes"][cert_manager.CAINJECTOR]["user"]
    written = {
        write[3].lstrip("/")
        for write in trial["writes"]
        if write[0] == injector and write[2].endswith("webhookconfigurations")
    }
    # And cert-manager's own two, from its webhook's CA Secret.
    assert written == {name.split("/")[1] for name in awaited} | {cert_manager.WEBHOOK}
    assert trial["injected_seconds"] < 60


def test_the_webhook_is_reached_through_its_service_and_refuses_what_it_must(trial: Any) -> None:
    """cert-manager's own configurations name the webhook's Service; filled with the CA the webhook
    made for itself, the API server calls it there for a Certificate the CRD's schema lets through."""
    own = {f"{kind}/{cert_manager.WEBHOOK}" for kind in cert_manager.WEBHOOK_CONFIGURATIONS}
    assert set(trial["own_configurations"]) == own
    ca = trial["webhook_ca"]["data"]["ca.crt"]
    for name in own:
        assert set(trial["bundles"][name]) == {ca}, name
    refused = trial["too_short"]
    assert refused["rc"] != 0
    assert 'admission webhook "webhook.cert-manager.io" denied the request' in refused["stderr"]
    assert "spec.duration" in refused["stderr"]


def test_a_configuration_naming_a_certificate_no_one_made_stays_empty(trial: Any) -> None:
    unissued = f"ValidatingWebhookConfiguration/{UNISSUED['metadata']['name']}"
    assert trial["bundles"][unissued] == [""]
