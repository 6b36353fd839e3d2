"""The operator's admission webhooks as the box stands them in: its chart's two webhook
configurations are the ones the program waits on, failing closed on every provider kind; on a real
API server (e2e/box/management/webhook_trial.py, in a network namespace of the test's own, `pytest -m engine`) a
provider CR is refused with x509's unknown authority until the CA injector stand-in has filled in
both, withheld means never filled in, and the webhook server stand-in reviews what it knows and
refuses what it does not."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from components import cluster_api
from e2e.box import box, scenarios
from e2e.box.management.webhook_trial import DELAY_SECONDS
from e2e.engine.netns import in_new_netns
from e2e.standins.cluster import admission_webhook_standin, chart_repo_standin, playbook_lab
from e2e.standins.cluster.cainjector_standin import INJECT_CA_FROM, CainjectorStandIn

VALIDATING, MUTATING = admission_webhook_standin.CONFIGURATION_NAMES.values()
REFUSED = "x509: certificate signed by unknown authority"


def _chart_configurations() -> dict[str, dict[str, Any]]:
    """The webhook configurations the box's operator chart renders for its release, by kind."""
    [chart] = box._chart_repos()["capi-operator"]
    loaded = (
        yaml.safe_load(chart_repo_standin.rendered(chart.name, box.OPERATOR_NAMESPACE, chart, template))
        for template in chart.template_files().values()
    )
    return {item["kind"]: item for item in loaded if item["kind"].endswith("WebhookConfiguration")}


def test_the_chart_holds_the_webhook_configurations_the_program_waits_on() -> None:
    configurations = _chart_configurations()
    assert {item["metadata"]["name"] for item in configurations.values()} == set(
        cluster_api.OPERATOR_WEBHOOK_CONFIGURATIONS.values()
    )
    for item in configurations.values():
        assert item["metadata"]["annotations"] == {INJECT_CA_FROM: "capi-operator-system/capi-operator-serving-cert"}
        resources: set[str] = set()
        for webhook in item["webhooks"]:
            assert (webhook["failurePolicy"], webhook["sideEffects"]) == ("Fail", "None")
            assert webhook["admissionReviewVersions"] == ["v1"]
            assert "caBundle" not in webhook["clientConfig"]
            assert webhook["clientConfig"]["url"].startswith(
                f"https://{admission_webhook_standin.HOST}:{admission_webhook_standin.PORT}/"
            )
            [rule] = webhook["rules"]
            assert rule["apiGroups"] == [playbook_lab.PROVIDER_GROUP]
            assert rule["apiVersions"] == ["v1alpha2"]
            assert rule["operations"] == ["CREATE", "UPDATE"]
            resources.update(f"{resource}.{playbook_lab.PROVIDER_GROUP}" for resource in rule["resources"])
        assert resources == set(playbook_lab.PROVIDER_RESOURCES)


def test_a_withheld_configuration_is_released_once() -> None:
    standin = CainjectorStandIn(0.0, {})
    standin.withhold("MutatingWebhookConfiguration", MUTATING)
    assert standin.withheld == {f"MutatingWebhookConfiguration/{MUTATING}"}
    standin.release("MutatingWebhookConfiguration", MUTATING)
    assert standin.withheld == set()
    with pytest.raises(KeyError, match=f"MutatingWebhookConfiguration/{MUTATING} is not withheld"):
        standin.release("MutatingWebhookConfiguration", MUTATING)


def test_a_kind_it_does_not_inject_into_is_refused() -> None:
    with pytest.raises(ValueError, match="not APIService"):
        CainjectorStandIn(0.0, {}).withhold("APIService", "v1beta1.metrics.k8s.io")


@pytest.fixture(scope="module")
def trial(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("webhook-trial")
    return in_new_netns("management.webhook_trial.injection", str(root), addresses=[scenarios.VM_ADDRESS], timeout=300)


@pytest.mark.engine
def test_before_injection_a_provider_cr_is_refused_for_the_unknown_authority(trial: Any) -> None:
    for attempt in ("before_injection", "one_withheld"):
        assert trial[attempt]["rc"] != 0, attempt
        assert REFUSED in trial[attempt]["stderr"], trial[attempt]["stderr"]
    # Once the validating configuration has its bundle, the mutating one, withheld, still refuses.
    assert "mcoreprovider." in trial["one_withheld"]["stderr"], trial["one_withheld"]["stderr"]


@pytest.mark.engine
def test_a_withheld_configuration_is_never_injected_and_the_others_are_after_the_delay(trial: Any) -> None:
    assert [(entry["kind"], entry["name"]) for entry in trial["injected_while_withheld"]] == [
        ("ValidatingWebhookConfiguration", VALIDATING)
    ]
    assert [(entry["kind"], entry["name"]) for entry in trial["injected"]] == [
        ("ValidatingWebhookConfiguration", VALIDATING),
        ("MutatingWebhookConfiguration", MUTATING),
    ]
    assert trial["injected"][0]["at"] - trial["made"] >= DELAY_SECONDS
    assert trial["injected"][1]["at"] >= trial["one_withheld"]["at"]


@pytest.mark.engine
def test_every_webhook_holds_the_servers_certificate_and_an_unknown_source_is_an_error(trial: Any) -> None:
    bundle = base64.b64encode(trial["certificate"].encode()).decode()
    assert trial["bundles"] == {
        f"ValidatingWebhookConfiguration/{VALIDATING}": [bundle] * 5,
        f"MutatingWebhookConfiguration/{MUTATING}": [bundle] * 5,
        "ValidatingWebhookConfiguration/other-webhooks": [""],
    }
    assert trial["injector_errors"] == [
        "ValidatingWebhookConfiguration/other-webhooks: no certificate default/other-cert to inject"
        f" (knows ['{admission_webhook_standin.CERTIFICATE}'])"
    ]


@pytest.mark.engine
def test_after_injection_the_cr_is_accepted_and_each_webhook_reviewed_it(trial: Any) -> None:
    for attempt in ("after_injection", "changed"):
        assert trial[attempt]["rc"] == 0, trial[attempt]["stderr"]
    namespace, name, _ = playbook_lab.PROVIDERS["CoreProvider"]
    reviewed = [
        (review["webhook"], review["kind"], review["namespace"], review["name"], review["operation"], review["dry_run"])
        for review in trial["reviews"]
    ]
    # The mutating webhooks are called before the validating ones; the refused attempts reached
    # no webhook.
    assert reviewed == [
        (webhook, "CoreProvider", namespace, name, operation, False)
        for operation in ("CREATE", "UPDATE")
        for webhook in ("mutate", "validate")
    ]


@pytest.mark.engine
def test_a_review_of_a_kind_the_server_does_not_know_is_refused_and_recorded(trial: Any) -> None:
    answer = trial["unknown_review"]
    assert answer["allowed"] is False
    assert "does not know" in answer["status"]["message"]
    assert answer["uid"] == "0d1c2b3a"
    [unknown] = trial["webhook_unknown"]
    assert "Machine lab1-md-0" in unknown
