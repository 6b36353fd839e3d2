"""cert-manager, the Cluster API Operator, the CAPMOX credentials and the five provider CRs.

Everything runs the whole program under the harness's mocks; a change set is what `pulumi up`
would touch after a config change, so each one is asserted exactly.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from typing import Any

import harness
import pytest
from pulumi.runtime import rpc

from components.cluster_api import (
    CREDENTIALS_ROLLOUT_ENV,
    UpgradeOrderError,
    check_upgrade_order,
    credentials_rollout,
    credentials_secret_name,
)
from components.run_records import own_stack_reference_name
from components.settings import SettingsError

RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"
SECRET = "kubernetes:core/v1:Secret"
K8S_PROVIDER = "pulumi:providers:kubernetes"
OPERATOR_API = "operator.cluster.x-k8s.io/v1alpha2"

CERT_MANAGER = (RELEASE, "mgmt-cert-manager")
OPERATOR = (RELEASE, "mgmt-cluster-api-operator")
# The operator's webhook configurations, patched to be waited on until cert-manager injected
# their CA bundle, as chart 0.28.0 names them.
WEBHOOK_WAITS = {
    (
        f"kubernetes:admissionregistration.k8s.io/v1:{kind}WebhookConfigurationPatch",
        f"mgmt-operator-webhook-{kind.lower()}",
    ): (f"capi-operator-{kind.lower()}-webhook-configuration")
    for kind in ("Validating", "Mutating")
}
CREDENTIALS = (SECRET, "mgmt-capmox-credentials")


@dataclasses.dataclass(frozen=True)
class ExpectedProvider:
    config_key: str
    kind: str
    resource_name: str
    name: str
    namespace: str
    version: str

    @property
    def key(self) -> tuple[str, str]:
        return (f"kubernetes:{OPERATOR_API}:{self.kind}", self.resource_name)


# The spec, written out independently of components.cluster_api.PROVIDERS.
PROVIDERS = (
    ExpectedProvider(
        "capiCoreVersion", "CoreProvider", "mgmt-core-cluster-api", "cluster-api", "capi-system", "v1.12.11"
    ),
    ExpectedProvider(
        "capiBootstrapVersion",
        "BootstrapProvider",
        "mgmt-bootstrap-kubeadm",
        "kubeadm",
        "capi-kubeadm-bootstrap-system",
        "v1.12.11",
    ),
    ExpectedProvider(
        "capiControlPlaneVersion",
        "ControlPlaneProvider",
        "mgmt-controlplane-kubeadm",
        "kubeadm",
        "capi-kubeadm-control-plane-system",
        "v1.12.11",
    ),
    ExpectedProvider(
        "capmoxVersion", "InfrastructureProvider", "mgmt-infrastructure-proxmox", "proxmox", "capmox-system", "v0.9.1"
    ),
    ExpectedProvider(
        "ipamInClusterVersion",
        "IPAMProvider",
        "mgmt-ipam-in-cluster",
        "in-cluster",
        "capi-ipam-in-cluster-system",
        "v1.1.1",
    ),
)
PROVIDER_BY_KEY = {p.config_key: p for p in PROVIDERS}
INFRASTRUCTURE = PROVIDER_BY_KEY["capmoxVersion"]
LAB_VERSIONS = {p.config_key: p.version for p in PROVIDERS}
PROVIDER_NAMESPACES = {p.namespace for p in PROVIDERS}
NEW_TOKEN = "bbbbbbbb-cccc-4ddd-8eee-ffffffffffff"
OTHER_TOKEN_ID = "other@pve!capi"
LAB_CREDENTIALS = {
    "PROXMOX_URL": "https://192.168.0.8:8006",
    "PROXMOX_TOKEN": "capmox@pve!capi",
    "PROXMOX_SECRET": harness.DUMMY_SECRETS["capmoxTokenSecret"],
}


def b64decode(text: str) -> str:
    return base64.b64decode(text, validate=True).decode()


def b64encode(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def capmox_secret_name(**changes: str) -> str:
    """The credentials Secret's name for the lab's CAPMOX credentials with `changes`."""
    return credentials_secret_name({**LAB_CREDENTIALS, **changes})


def secret_stack_output(value: Any) -> dict[str, Any]:
    """A stack output as a StackReference reads a secret one back."""
    return {rpc._special_sig_key: rpc._special_secret_sig, "value": value}


def deployed() -> dict[str, Any]:
    """The outputs of a last deployment as the lab really has them: its kubeconfigs are secret."""
    return {
        "providerVersions": dict(LAB_VERSIONS),
        "kubeconfig": secret_stack_output(harness.K3S_KUBECONFIG),
        "readonlyKubeconfig": secret_stack_output("ro"),
        "workloadReadonlyKubeconfigs": secret_stack_output({}),
        "vmAddress": "192.168.4.21",
    }


def provider_version_outputs(run: harness.Run) -> dict[str, str]:
    value, _ = run.outputs["providerVersions"]
    assert isinstance(value, dict)
    return value


@pytest.fixture(scope="module")
def run() -> harness.Run:
    """The lab stack as committed, first deployment (no previous outputs)."""
    return harness.run_program()


@pytest.fixture(scope="module")
def redeploy(run: harness.Run) -> harness.Run:
    """The lab stack as committed, after the first deployment recorded its provider versions."""
    return harness.run_program(previous_outputs={"providerVersions": provider_version_outputs(run)})


# --- Helm releases -----------------------------------------------------------------------------


def assert_on_mgmt_cluster(run: harness.Run, resource: harness.Resource) -> None:
    mgmt = run.get(K8S_PROVIDER, "mgmt-kubernetes")
    assert resource.provider.startswith(mgmt.urn + "::"), resource.provider
    assert "mgmt-kubernetes" in resource.provider


def test_cert_manager_release(run: harness.Run) -> None:
    release = run.get(*CERT_MANAGER)
    inputs = release.plain
    # The archive in the project's folder, as Helm names it: no run reads the repository.
    assert inputs["chart"] == "cert-manager-v1.21.2.tgz"
    assert inputs["version"] == "v1.21.2"
    assert "repositoryOpts" not in inputs
    assert inputs["namespace"] == "cert-manager"
    assert inputs["createNamespace"] is True
    assert inputs["values"] == {"crds": {"enabled": True}}
    assert inputs["name"] == "cert-manager"
    assert not inputs.get("skipAwait", False)
    assert_on_mgmt_cluster(run, release)


def test_operator_release_has_no_providers_in_its_values(run: harness.Run) -> None:
    release = run.get(*OPERATOR)
    inputs = release.plain
    assert inputs["chart"] == "cluster-api-operator-0.28.0.tgz"
    assert inputs["version"] == "0.28.0"
    assert "repositoryOpts" not in inputs
    assert inputs["namespace"] == "capi-operator-system"
    # The name k3s's HelmChart gave the playbook's release, so that the lab it built is adoptable.
    assert inputs["name"] == "cluster-api-operator"
    assert not inputs.get("skipAwait", False)
    # Providers in the chart's values would become Helm hooks and clash with the CRs.
    values = inputs.get("values", {})
    assert not {"core", "bootstrap", "controlPlane", "infrastructure", "ipam", "addon"} & set(values)
    assert values == {}
    assert run.depends_on(release, run.get(*CERT_MANAGER))
    assert_on_mgmt_cluster(run, release)


# --- the operator's webhooks, waited on from the Kubernetes side -------------------------------


@pytest.mark.parametrize("key", WEBHOOK_WAITS, ids=lambda key: key[1])
def test_the_operator_webhook_is_waited_on_until_its_ca_bundle_is_injected(
    run: harness.Run, key: tuple[str, str]
) -> None:
    wait = run.get(*key)
    # Nothing but the wait's annotation: the chart keeps owning the object and its webhooks.
    assert wait.plain["metadata"] == {
        "name": WEBHOOK_WAITS[key],
        "annotations": {
            "pulumi.com/waitFor": harness.waits_for("jsonpath={.webhooks[0].clientConfig.caBundle}"),
            **harness.MANAGED,
        },
    }
    assert set(wait.plain) == {"apiVersion", "kind", "metadata"}
    assert wait.custom_timeouts == {"create": "5m", "update": "5m"}
    assert run.depends_on(wait, run.get(*OPERATOR))
    # Dropping the patch takes only its annotation away: it is neither protected nor retained.
    assert not wait.protect
    assert not wait.retain_on_delete
    assert wait.import_id == ""
    assert_on_mgmt_cluster(run, wait)


def test_nothing_of_the_cluster_is_reached_over_ssh(run: harness.Run) -> None:
    cluster_api = next(r for r in run.of_type("homelab:index:ClusterApi"))
    children = [r for r in run.resources.values() if r.parent == cluster_api.urn]
    assert children, "guard: ClusterApi has children"
    assert [r.name for r in children if r.type == "command:remote:Command"] == []


# --- provider CRs ------------------------------------------------------------------------------


@pytest.mark.parametrize("expected", PROVIDERS, ids=lambda p: p.kind)
def test_provider_cr(run: harness.Run, expected: ExpectedProvider) -> None:
    cr = run.get(*expected.key)
    inputs = cr.plain
    assert inputs["apiVersion"] == OPERATOR_API
    assert inputs["kind"] == expected.kind
    assert inputs["metadata"]["name"] == expected.name
    assert inputs["metadata"]["namespace"] == expected.namespace
    assert inputs["metadata"]["annotations"]["pulumi.com/waitFor"] == harness.waits_for("condition=Ready")
    assert cr.custom_timeouts == {"create": "15m", "update": "15m"}
    assert inputs["spec"]["version"] == expected.version
    assert "fetchConfig" not in inputs["spec"]
    if expected is INFRASTRUCTURE:
        assert inputs["spec"]["configSecret"] == {"name": capmox_secret_name()}
        assert inputs["spec"]["deployment"] == credentials_rollout(capmox_secret_name())
        assert set(inputs["spec"]) == {"version", "configSecret", "deployment"}
    else:
        assert set(inputs["spec"]) == {"version"}
    assert run.depends_on(cr, run.get(NAMESPACE, f"mgmt-ns-{expected.namespace}"))
    assert all(run.depends_on(cr, run.get(*wait)) for wait in WEBHOOK_WAITS)
    assert run.depends_on(cr, run.get(*OPERATOR))
    assert run.depends_on(cr, run.get(*CREDENTIALS)) == (expected is INFRASTRUCTURE)
    assert_on_mgmt_cluster(run, cr)


def test_each_provider_cr_waits_as_long_as_the_setting_says() -> None:
    bounded = harness.run_program(overrides={"providerReadyTimeoutMinutes": 1})
    for p in PROVIDERS:
        assert bounded.get(*p.key).custom_timeouts == {"create": "1m", "update": "1m"}, p.kind


def test_each_webhook_waits_for_its_ca_bundle_as_long_as_the_setting_says() -> None:
    bounded = harness.run_program(overrides={"operatorWebhookTimeoutMinutes": 1})
    for wait in WEBHOOK_WAITS:
        assert bounded.get(*wait).custom_timeouts == {"create": "1m", "update": "1m"}, wait


def test_exactly_the_five_provider_crs(run: harness.Run) -> None:
    crs = {key for key in run.names() if key[0].startswith(f"kubernetes:{OPERATOR_API}:")}
    assert crs == {p.key for p in PROVIDERS}


def test_provider_crs_do_not_wait_on_each_other(run: harness.Run) -> None:
    """A fresh install applies all five together once the operator is ready."""
    crs = [run.get(*p.key) for p in PROVIDERS]
    for cr in crs:
        for other in crs:
            if other is not cr:
                assert not run.depends_on(cr, other), (cr.name, other.name)


# --- namespaces, credentials, RBAC wait for nothing they need not ------------------------------


def test_exactly_the_five_provider_namespaces(run: harness.Run) -> None:
    namespaces = run.of_type(NAMESPACE)
    assert {ns.plain["metadata"]["name"] for ns in namespaces} == PROVIDER_NAMESPACES
    assert {ns.name for ns in namespaces} == {f"mgmt-ns-{ns}" for ns in PROVIDER_NAMESPACES}


@pytest.mark.parametrize(
    "key",
    [
        *[(NAMESPACE, f"mgmt-ns-{ns}") for ns in sorted(PROVIDER_NAMESPACES)],
        CREDENTIALS,
        ("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "mgmt-readonly-role"),
        ("kubernetes:core/v1:ServiceAccount", "mgmt-readonly-account"),
        ("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding", "mgmt-readonly-binding"),
        (SECRET, "mgmt-readonly-token"),
    ],
    ids=lambda key: key[1],
)
def test_does_not_wait_for_the_helm_releases(run: harness.Run, key: tuple[str, str]) -> None:
    resource = run.get(*key)
    for release in (CERT_MANAGER, OPERATOR, *WEBHOOK_WAITS):
        assert not run.depends_on(resource, run.get(*release)), release


# --- CAPMOX credentials ------------------------------------------------------------------------


def test_capmox_credentials_secret(run: harness.Run) -> None:
    secret = run.get(*CREDENTIALS)
    assert secret.plain["metadata"] == {
        "name": capmox_secret_name(),
        "namespace": "capmox-system",
        "annotations": harness.MANAGED,
    }
    assert secret.plain["immutable"] is True
    assert set(secret.inputs["data"]) == {harness.SECRET}, "the data must be sent as a secret"
    data = secret.plain["data"]
    assert set(data) == {"PROXMOX_URL", "PROXMOX_TOKEN", "PROXMOX_SECRET"}
    assert {key: b64decode(value) for key, value in data.items()} == LAB_CREDENTIALS
    assert run.depends_on(secret, run.get(NAMESPACE, "mgmt-ns-capmox-system"))


def test_capmox_secret_name_follows_everything_the_secret_holds_but_reveals_nothing() -> None:
    name = capmox_secret_name()
    assert re.fullmatch(r"capmox-credentials-[0-9a-f]{10}", name), name
    assert capmox_secret_name() == name, "the same content must give the same name on every run"
    changed_names = {
        capmox_secret_name(PROXMOX_SECRET=NEW_TOKEN),
        capmox_secret_name(PROXMOX_TOKEN=OTHER_TOKEN_ID),
        capmox_secret_name(PROXMOX_URL="https://pve.lab.example:8006"),
    }
    assert len(changed_names) == 3
    assert name not in changed_names
    assert harness.DUMMY_SECRETS["capmoxTokenSecret"] not in name


def test_a_new_proxmox_url_reaches_capmox_through_a_new_secret(redeploy: harness.Run) -> None:
    """The operator never re-reads its configSecret: a Secret re-created under the same name
    would leave CAPMOX on the old URL."""
    moved = harness.run_program(
        overrides={"proxmoxEndpoint": "https://pve.lab.example:8006/"},
        previous_outputs={"providerVersions": provider_version_outputs(redeploy)},
    )
    new_name = capmox_secret_name(PROXMOX_URL="https://pve.lab.example:8006")
    assert moved.get(*CREDENTIALS).plain["metadata"]["name"] == new_name
    assert moved.get(*INFRASTRUCTURE.key).plain["spec"]["configSecret"] == {"name": new_name}


@pytest.mark.parametrize(
    "needle",
    [harness.DUMMY_SECRETS["capmoxTokenSecret"], b64encode(harness.DUMMY_SECRETS["capmoxTokenSecret"])],
    ids=["plain", "base64"],
)
def test_capmox_token_secret_appears_only_inside_secrets(run: harness.Run, needle: str) -> None:
    encoded = b64encode(harness.DUMMY_SECRETS["capmoxTokenSecret"])
    assert run.get(*CREDENTIALS).inputs["data"][harness.SECRET]["PROXMOX_SECRET"] == encoded, "guard"
    leaks = [r.name for r in run.resources.values() if harness.contains_plain(r.inputs, needle)]
    assert leaks == []
    assert not harness.contains_plain({k: v for k, (v, secret) in run.outputs.items() if not secret}, needle)


# --- change sets -------------------------------------------------------------------------------


def test_same_config_changes_nothing(run: harness.Run) -> None:
    assert harness.changed(run, harness.run_program()) == set()


def test_redeploy_with_recorded_versions_changes_nothing(run: harness.Run, redeploy: harness.Run) -> None:
    assert harness.changed(run, redeploy) == set()


@pytest.mark.parametrize(
    ("key", "version", "release"),
    [("certManagerVersion", "v1.21.3", CERT_MANAGER), ("capiOperatorVersion", "0.28.1", OPERATOR)],
)
def test_chart_bump_changes_only_the_release(
    redeploy: harness.Run, key: str, version: str, release: tuple[str, str]
) -> None:
    """The upgraded chart keeps the CA bundle already injected: no wait runs again, nothing over SSH."""
    bumped = harness.run_program(
        overrides={key: version}, previous_outputs={"providerVersions": provider_version_outputs(redeploy)}
    )
    assert harness.changed(redeploy, bumped) == {release}
    assert bumped.get(*release).plain["version"] == version
    assert bumped.get(*release).plain["chart"] == f"{release[1].removeprefix('mgmt-')}-{version}.tgz"


@pytest.mark.parametrize("expected", PROVIDERS, ids=lambda p: p.config_key)
def test_single_provider_bump_changes_only_its_cr(
    run: harness.Run, redeploy: harness.Run, expected: ExpectedProvider
) -> None:
    new_version = "v9.9.9"
    bumped = harness.run_program(
        overrides={expected.config_key: new_version},
        previous_outputs={"providerVersions": provider_version_outputs(run)},
    )
    assert harness.changed(redeploy, bumped) == {expected.key}
    assert bumped.get(*expected.key).plain["spec"]["version"] == new_version
    assert provider_version_outputs(bumped) == {**LAB_VERSIONS, expected.config_key: new_version}


def test_rotating_the_capmox_token_makes_a_new_secret_and_repoints_the_provider(redeploy: harness.Run) -> None:
    rotated = harness.run_program(
        overrides={"capmoxTokenSecret": NEW_TOKEN},
        previous_outputs={"providerVersions": provider_version_outputs(redeploy)},
    )
    assert harness.changed(redeploy, rotated) == {CREDENTIALS, INFRASTRUCTURE.key}
    new_name = capmox_secret_name(PROXMOX_SECRET=NEW_TOKEN)
    old_name = redeploy.get(*CREDENTIALS).plain["metadata"]["name"]
    assert new_name != old_name
    assert rotated.get(*CREDENTIALS).plain["metadata"]["name"] == new_name
    assert b64decode(rotated.get(*CREDENTIALS).plain["data"]["PROXMOX_SECRET"]) == NEW_TOKEN
    assert rotated.get(*INFRASTRUCTURE.key).plain["spec"]["configSecret"] == {"name": new_name}


def test_rotating_the_capmox_token_rolls_its_manager_through_the_operator(redeploy: harness.Run) -> None:
    """The manager reads its credentials once, as it starts, and the operator's update of its
    Deployment starts nothing when the template is unchanged (the real operator's trial): the
    Secret's new name in the manager container's env is what changes the template."""
    rotated = harness.run_program(
        overrides={"capmoxTokenSecret": NEW_TOKEN},
        previous_outputs={"providerVersions": provider_version_outputs(redeploy)},
    )
    [container] = rotated.get(*INFRASTRUCTURE.key).plain["spec"]["deployment"]["containers"]
    [before] = redeploy.get(*INFRASTRUCTURE.key).plain["spec"]["deployment"]["containers"]
    assert container["name"] == before["name"] == "manager"
    assert container["env"] == [
        {"name": CREDENTIALS_ROLLOUT_ENV, "value": capmox_secret_name(PROXMOX_SECRET=NEW_TOKEN)}
    ]
    assert container["env"] != before["env"]


# --- upgrade order -----------------------------------------------------------------------------

TWO_BUMPS = {"capiCoreVersion": "v1.12.12", "capiBootstrapVersion": "v1.12.12"}
ALL_BUMPED = {p.config_key: "v9.9.9" for p in PROVIDERS}


def test_two_provider_bumps_in_one_run_are_refused() -> None:
    refused = harness.Run()
    with pytest.raises(UpgradeOrderError) as error:
        harness.run_program(overrides=TWO_BUMPS, previous_outputs={"providerVersions": LAB_VERSIONS}, record=refused)
    message = str(error.value)
    assert "capiCoreVersion" in message
    assert "capiBootstrapVersion" in message
    assert "v1.12.11 -> v1.12.12" in message
    # Every CR's version waits on the check: a refused run sends none of them.
    assert not {p.key for p in PROVIDERS} & refused.names()


def test_two_provider_bumps_are_refused_in_preview_too() -> None:
    with pytest.raises(UpgradeOrderError):
        harness.run_program(overrides=TWO_BUMPS, previous_outputs=deployed(), preview=True)


def test_two_provider_bumps_are_refused_against_realistic_outputs() -> None:
    with pytest.raises(UpgradeOrderError):
        harness.run_program(overrides=TWO_BUMPS, previous_outputs=deployed())


@pytest.mark.parametrize(
    "previous",
    [None, {}, {"vmAddress": "192.168.4.21"}],
    ids=["never-deployed", "no-outputs", "outputs-without-providerVersions"],
)
def test_fresh_install_may_set_every_version(previous: dict[str, Any] | None) -> None:
    fresh = harness.run_program(overrides=ALL_BUMPED, previous_outputs=previous)
    assert provider_version_outputs(fresh) == ALL_BUMPED
    for p in PROVIDERS:
        assert fresh.get(*p.key).plain["spec"]["version"] == "v9.9.9"


def test_one_provider_bump_is_allowed() -> None:
    bumped = harness.run_program(
        overrides={"capiCoreVersion": "v1.12.12"}, previous_outputs={"providerVersions": LAB_VERSIONS}
    )
    assert provider_version_outputs(bumped) == {**LAB_VERSIONS, "capiCoreVersion": "v1.12.12"}


def test_check_upgrade_order_allows_a_fresh_install() -> None:
    wanted = {**LAB_VERSIONS, "capiCoreVersion": "v1.12.12", "capmoxVersion": "v0.9.2"}
    assert check_upgrade_order(None, wanted) == wanted
    assert check_upgrade_order({}, wanted) == wanted


def test_check_upgrade_order_allows_no_change_and_one_change() -> None:
    assert check_upgrade_order(LAB_VERSIONS, LAB_VERSIONS) == LAB_VERSIONS
    one = {**LAB_VERSIONS, "capmoxVersion": "v0.9.2"}
    assert check_upgrade_order(LAB_VERSIONS, one) == one


def test_check_upgrade_order_returns_a_copy() -> None:
    wanted = dict(LAB_VERSIONS)
    result = check_upgrade_order(LAB_VERSIONS, wanted)
    assert result == wanted
    assert result is not wanted


def test_check_upgrade_order_refuses_two_changes_naming_both() -> None:
    wanted = {**LAB_VERSIONS, **TWO_BUMPS}
    with pytest.raises(UpgradeOrderError) as error:
        check_upgrade_order(LAB_VERSIONS, wanted)
    message = str(error.value)
    assert "capiCoreVersion v1.12.11 -> v1.12.12" in message
    assert "capiBootstrapVersion v1.12.11 -> v1.12.12" in message
    assert "2 Cluster API providers" in message
    # Core goes first: the advice names it.
    assert "set capiCoreVersion alone" in message


def test_check_upgrade_order_counts_a_downgrade_as_a_change() -> None:
    wanted = {**LAB_VERSIONS, "capiCoreVersion": "v1.12.10", "ipamInClusterVersion": "v1.1.2"}
    with pytest.raises(UpgradeOrderError, match=re.escape("ipamInClusterVersion v1.1.1 -> v1.1.2")):
        check_upgrade_order(LAB_VERSIONS, wanted)


def test_check_upgrade_order_does_not_count_a_newly_added_provider() -> None:
    deployed_without_ipam = {k: v for k, v in LAB_VERSIONS.items() if k != "ipamInClusterVersion"}
    wanted = {**LAB_VERSIONS, "capiCoreVersion": "v1.12.12"}
    assert check_upgrade_order(deployed_without_ipam, wanted) == wanted


# --- providerVersions output -------------------------------------------------------------------


def test_provider_versions_output(run: harness.Run) -> None:
    value, is_secret = run.outputs["providerVersions"]
    assert value == LAB_VERSIONS
    assert is_secret is False


def test_provider_versions_are_read_back_from_the_provider_crs() -> None:
    """The output must mean "deployed and Ready": it comes from each CR's outputs, which exist
    only once the CR was Ready, not from the settings, which the engine stores at once."""
    live = harness.run_program(live_outputs={"mgmt-core-cluster-api": {"spec": {"version": "v1.12.10"}}})
    value, _ = live.outputs["providerVersions"]
    assert value == {**LAB_VERSIONS, "capiCoreVersion": "v1.12.10"}


def test_provider_versions_stay_plain_after_a_real_deployment() -> None:
    """A real last deployment has secret outputs (the kubeconfigs); providerVersions and the CRs'
    versions must not become secret because of them."""
    after = harness.run_program(previous_outputs=deployed())
    value, is_secret = after.outputs["providerVersions"]
    assert value == LAB_VERSIONS
    assert is_secret is False
    for p in PROVIDERS:
        assert after.get(*p.key).inputs["spec"] == after.get(*p.key).plain["spec"], p.kind


# --- the stack's reference to itself -----------------------------------------------------------


def _self_reference(run: harness.Run) -> str:
    name: str = run.get("pulumi:pulumi:StackReference", "last-deployment").plain["name"]
    return name


def test_self_reference_is_a_bare_stack_name_on_a_diy_backend(run: harness.Run) -> None:
    """A file backend in the layout from before project-scoped stacks rejects
    `organization/lab-mgmt/lab`; a bare name works in both layouts."""
    assert _self_reference(run) == "lab"
    assert "/" not in own_stack_reference_name("organization", "lab-mgmt", "lab")


def test_self_reference_is_fully_qualified_on_pulumi_cloud() -> None:
    """A bare name would be looked up in the user's default organization, not the stack's."""
    assert _self_reference(harness.run_program(organization="acme")) == "acme/lab-mgmt/lab"


# --- chart repositories --------------------------------------------------------------------------


def test_a_mirror_is_where_a_missing_chart_comes_from_and_changes_no_release(run: harness.Run) -> None:
    mirrors = {
        "certManagerChartRepo": "https://charts.mirror.lab/jetstack",
        "capiOperatorChartRepo": "https://charts.mirror.lab/capi-operator",
        "ciliumChartRepo": "https://charts.mirror.lab/cilium",
        "clusterAutoscalerChartRepo": "https://charts.mirror.lab/autoscaler",
    }
    mirrored = harness.run_program(overrides=mirrors)
    chart_requests = [url for url in mirrored.chart_requests if not url.endswith("/cluster-template.yaml")]
    assert {url.rsplit("/", 1)[0].removesuffix("/charts") for url in chart_requests} == set(mirrors.values())
    assert harness.changed(run, mirrored) == set()


@pytest.mark.parametrize(
    "key", ["certManagerChartRepo", "capiOperatorChartRepo", "ciliumChartRepo", "clusterAutoscalerChartRepo"]
)
def test_a_chart_repository_must_be_https(key: str) -> None:
    with pytest.raises(SettingsError, match=f"lab-mgmt:{key}: 'http://charts.mirror.lab' is not an https:// URL"):
        harness.run_program(overrides={key: "http://charts.mirror.lab"})
