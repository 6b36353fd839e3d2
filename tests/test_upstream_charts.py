"""What the program and the box's stand-ins assume of the two charts its Releases install, read
against the real charts at the pinned versions, rebuilt as upstream's Makefiles release them and
rendered with `helm template` for the program's releases (e2e/controllers/upstream_charts.py;
issue 68). Of the operator's: the webhook configurations the program waits on for their CA bundle,
the certificate their annotation asks cert-manager's CA injector for, the webhooks the admission
stand-in serves, the operator's Deployment, the provider CRDs the playbook's lab lays out. Of
cert-manager's: the CRDs of the operator's Certificate and Issuer, the injection annotations its
CA injector reads, the three Deployments and the post-install hook the program's Release waits
on. And each time the program's values under the chart's schema, with a control that the schema
is read. Selected with `pytest -m engine` (it needs kubectl, helm and the charts' sources:
e2e/engine/build-engine.sh control-plane workload).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.cluster_api import (
    CERT_MANAGER_NAMESPACE,
    CERT_MANAGER_VALUES,
    OPERATOR_NAMESPACE,
    OPERATOR_VALUES,
    OPERATOR_WEBHOOK_CONFIGURATIONS,
)
from e2e.box import box
from e2e.controllers import upstream_charts
from e2e.engine import pins
from e2e.standins.cluster import admission_webhook_standin, playbook_lab
from e2e.standins.cluster.cainjector_standin import INJECT_CA_FROM

pytestmark = pytest.mark.engine


# Each chart as the program releases it (components/cluster_api.py): its rebuild, the release's
# name, namespace and values, and a value its schema must refuse (the control): for the operator, a
# provider given as the chart's older releases took it; for cert-manager, `crds.enabled` as a string.
RELEASES: dict[str, tuple[Callable[[Path], Path], str, str, dict[str, Any], dict[str, Any]]] = {
    "operator": (
        upstream_charts.operator,
        "cluster-api-operator",
        OPERATOR_NAMESPACE,
        OPERATOR_VALUES,
        {"core": "cluster-api:v1"},
    ),
    "cert-manager": (
        upstream_charts.cert_manager,
        "cert-manager",
        CERT_MANAGER_NAMESPACE,
        CERT_MANAGER_VALUES,
        {"crds": {"enabled": "yes"}},
    ),
}


def _released(folder: Path, chart: str, *, refused: bool = False) -> dict[tuple[str, str], dict[str, Any]]:
    """The chart's objects as the program's release renders them (or with the refused value), by
    kind and name."""
    build, release, namespace, values, refusing = RELEASES[chart]
    documents = upstream_charts.rendered(build(folder), release, namespace, refusing if refused else values, folder)
    return {(document["kind"], document["metadata"]["name"]): document for document in documents}


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    """The operator's chart, as the program releases it."""
    return _released(tmp_path_factory.mktemp("operator-chart"), "operator")


@pytest.fixture(scope="module")
def cert_manager(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    """cert-manager's chart, as the program releases it."""
    return _released(tmp_path_factory.mktemp("cert-manager-chart"), "cert-manager")


def _webhook_configurations(chart: dict[tuple[str, str], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: document for (kind, name), document in chart.items() if kind.endswith("WebhookConfiguration")}


def test_the_program_waits_on_the_webhook_configurations_the_chart_makes(chart: Any) -> None:
    assert set(_webhook_configurations(chart)) == set(OPERATOR_WEBHOOK_CONFIGURATIONS.values())
    assert {
        kind: name for (kind, name) in chart if kind.endswith("WebhookConfiguration")
    } == admission_webhook_standin.CONFIGURATION_NAMES


def test_both_ask_cert_manager_for_the_certificate_the_injector_stand_in_reads(chart: Any) -> None:
    namespace, name = admission_webhook_standin.CERTIFICATE.split("/")
    for configuration in _webhook_configurations(chart).values():
        assert configuration["metadata"]["annotations"][INJECT_CA_FROM] == admission_webhook_standin.CERTIFICATE
    certificate = chart[("Certificate", name)]
    assert certificate["metadata"]["namespace"] == namespace == OPERATOR_NAMESPACE
    assert admission_webhook_standin.HOST in certificate["spec"]["dnsNames"]


def test_the_stand_in_serves_each_webhook_of_the_five_providers_at_its_path_failing_closed(chart: Any) -> None:
    """Every webhook of a kind the program declares, as the chart registers it: through the
    Service the stand-in's host name is, at the path the stand-in answers, failing closed, on
    CREATE and UPDATE; the chart's two other kinds (add-on and runtime-extension providers) the
    program never declares."""
    served = {}
    for configuration in _webhook_configurations(chart).values():
        for webhook in configuration["webhooks"]:
            service = webhook["clientConfig"]["service"]
            assert f"{service['name']}.{service['namespace']}.svc" == admission_webhook_standin.HOST
            [rule] = webhook["rules"]
            assert (webhook["failurePolicy"], rule["operations"]) == ("Fail", ["CREATE", "UPDATE"])
            assert rule["apiGroups"] == [playbook_lab.PROVIDER_GROUP]
            assert rule["apiVersions"] == [admission_webhook_standin.VERSION]
            served[service["path"]] = rule["resources"]
    for path, (_, kind) in admission_webhook_standin.PATHS.items():
        assert served.pop(path) == [f"{kind.lower()}s"], path
    assert sorted(resource for [resource] in served.values()) == sorted(
        ["addonproviders", "runtimeextensionproviders"] * 2
    )


def test_the_operator_deployment_is_the_one_the_box_s_chart_runs(chart: Any) -> None:
    stand_in = yaml.safe_load(box.OPERATOR_DEPLOYMENT.replace("{{ .Release.Namespace }}", OPERATOR_NAMESPACE))
    deployment = chart[("Deployment", stand_in["metadata"]["name"])]
    assert deployment["metadata"]["namespace"] == OPERATOR_NAMESPACE
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    repository, tag = pins.OPERATOR_IMAGE
    assert container["image"] == f"{repository}:{tag}"
    [stand_in_container] = stand_in["spec"]["template"]["spec"]["containers"]
    assert stand_in_container["image"].replace("{{ .Chart.Version }}", pins.OPERATOR_VERSION) == container["image"]


def test_the_provider_crds_are_those_the_playbooks_lab_lays_out(chart: Any) -> None:
    """Each provider kind's CRD: the group, the one served and stored version, namespaced, with
    the status subresource, as playbook_lab.provider_crd has them."""
    for kind in playbook_lab.PROVIDERS:
        real = chart[("CustomResourceDefinition", f"{kind.lower()}s.{playbook_lab.PROVIDER_GROUP}")]["spec"]
        laid_out = yaml.safe_load(playbook_lab.provider_crd(kind))["spec"]
        assert (real["group"], real["scope"], real["names"]["kind"]) == (
            laid_out["group"],
            laid_out["scope"],
            laid_out["names"]["kind"],
        )
        [version] = [v for v in real["versions"] if v["storage"]]
        assert (version["name"], version["served"], version["subresources"]) == (
            admission_webhook_standin.VERSION,
            True,
            {"status": {}},
        )


def test_the_operators_certificate_and_issuer_are_kinds_cert_manager_installs(chart: Any, cert_manager: Any) -> None:
    """With the program's `crds.enabled`, cert-manager's release holds the CRDs the operator's
    chart needs at the version it writes them."""
    for kind in ("Certificate", "Issuer"):
        [made] = [document for (k, _), document in chart.items() if k == kind]
        group, version = made["apiVersion"].split("/")
        crd = cert_manager[("CustomResourceDefinition", f"{kind.lower()}s.{group}")]["spec"]
        assert version in {v["name"] for v in crd["versions"] if v["served"]}, kind


def test_cert_manager_s_injector_reads_the_annotation_the_stand_in_reads(cert_manager: Any) -> None:
    """cert-manager's own webhook configurations ask its CA injector by the same annotation's
    family (`-from-secret`, for the webhook's self-made CA), and its injector Deployment runs."""
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        annotations = cert_manager[(kind, "cert-manager-webhook")]["metadata"]["annotations"]
        assert annotations == {f"{INJECT_CA_FROM}-secret": f"{CERT_MANAGER_NAMESPACE}/cert-manager-webhook-ca"}


def test_cert_manager_runs_three_deployments_and_a_post_install_check(cert_manager: Any) -> None:
    """What the box will run for cert-manager (its controller, injector and webhook at the pinned
    version), and the `startupapicheck` Job that the program's Release waits for after install."""
    images = {}
    for name in ("cert-manager", "cert-manager-cainjector", "cert-manager-webhook"):
        deployment = cert_manager[("Deployment", name)]
        assert deployment["metadata"]["namespace"] == CERT_MANAGER_NAMESPACE
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        images[name] = container["image"]
    version = pins.CERT_MANAGER_VERSION
    assert images == {
        "cert-manager": f"quay.io/jetstack/cert-manager-controller:{version}",
        "cert-manager-cainjector": f"quay.io/jetstack/cert-manager-cainjector:{version}",
        "cert-manager-webhook": f"quay.io/jetstack/cert-manager-webhook:{version}",
    }
    hook = cert_manager[("Job", "cert-manager-startupapicheck")]["metadata"]["annotations"]
    assert hook["helm.sh/hook"] == "post-install"


@pytest.mark.parametrize("chart_name", list(RELEASES))
def test_a_value_the_chart_s_schema_refuses_fails_the_render(tmp_path: Path, chart_name: str) -> None:
    """The control: each chart's schema is read, so the program's values passing means something."""
    with pytest.raises(RuntimeError, match="values don't meet the specifications of the schema"):
        _released(tmp_path, chart_name, refused=True)
