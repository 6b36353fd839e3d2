"""cert-manager, the Cluster API Operator and its five providers on the management cluster."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pulumi
import pulumi_kubernetes as kubernetes

from components import adoption, charts, field_manager, waits
from components.settings import ClusterApiSettings, ProviderVersions

CERT_MANAGER_NAMESPACE = "cert-manager"
OPERATOR_NAMESPACE = "capi-operator-system"
RELEASE_TIMEOUT_SECONDS = 600
PROVIDER_API_VERSION = "operator.cluster.x-k8s.io/v1alpha2"
# The operator's admission webhooks, as chart 0.28.0 names them for a release called after the
# chart. cert-manager's CA injector fills in their CA bundle some time after the Helm release
# reports ready; until then the API server cannot call them and, failing closed, refuses every
# provider CR.
OPERATOR_WEBHOOK_CONFIGURATIONS = {
    "validating": "capi-operator-validating-webhook-configuration",
    "mutating": "capi-operator-mutating-webhook-configuration",
}
# The releases' values: cert-manager installs its CRDs; provider CRs in the operator chart's values
# would become Helm hooks (cluster-api-operator #1052) and would clash with ClusterApi's own, so
# its values stay empty.
CERT_MANAGER_VALUES: dict[str, object] = {"crds": {"enabled": True}}
OPERATOR_VALUES: dict[str, object] = {}
# The injector fills in every webhook of a configuration in one write: the first one's will do.
CA_BUNDLE_INJECTED = "jsonpath={.webhooks[0].clientConfig.caBundle}"


@dataclass(frozen=True)
class CapiProvider:
    """One of the providers the Cluster API Operator installs, as its CR names it."""

    config_key: str
    """The setting that pins its version; also how errors and the stack output name it."""
    setting: str
    """Its field in ProviderVersions."""
    kind: str
    name: str
    namespace: str


# The one whose CR names CAPMOX's credentials Secret.
INFRASTRUCTURE = CapiProvider("capmoxVersion", "infrastructure", "InfrastructureProvider", "proxmox", "capmox-system")
# In the order the operator wants upgrades applied: core first.
PROVIDERS = (
    CapiProvider("capiCoreVersion", "core", "CoreProvider", "cluster-api", "capi-system"),
    CapiProvider("capiBootstrapVersion", "bootstrap", "BootstrapProvider", "kubeadm", "capi-kubeadm-bootstrap-system"),
    CapiProvider(
        "capiControlPlaneVersion",
        "control_plane",
        "ControlPlaneProvider",
        "kubeadm",
        "capi-kubeadm-control-plane-system",
    ),
    INFRASTRUCTURE,
    CapiProvider("ipamInClusterVersion", "ipam", "IPAMProvider", "in-cluster", "capi-ipam-in-cluster-system"),
)


class UpgradeOrderError(pulumi.RunError):
    """More than one provider version changed in one run (a RunError: the CLI shows the message
    alone, with no traceback)."""


def provider_versions(versions: ProviderVersions) -> dict[str, str]:
    """Config key -> version, in PROVIDERS order."""
    return {p.config_key: getattr(versions, p.setting) for p in PROVIDERS}


def check_upgrade_order(deployed: Mapping[str, str] | None, wanted: Mapping[str, str]) -> dict[str, str]:
    """The operator upgrades providers one at a time, core first. A run that would change the
    version of more than one installed provider is refused, naming them; a fresh install (no
    versions deployed yet) or a newly added provider is not an upgrade."""
    deployed = deployed or {}
    bumped = [key for key, version in wanted.items() if key in deployed and deployed[key] != version]
    if len(bumped) > 1:
        changes = ", ".join(f"{key} {deployed[key]} -> {wanted[key]}" for key in bumped)
        raise UpgradeOrderError(
            f"this run would upgrade {len(bumped)} Cluster API providers at once ({changes}); "
            f"the operator upgrades one at a time: set {bumped[0]} alone, run `pulumi up`, then the next"
        )
    return dict(wanted)


class ClusterNode(Protocol):
    """What the program needs of the node its cluster runs on (components.k3s_node.K3sNode): the
    cluster's Kubernetes provider and admin kubeconfig."""

    provider: kubernetes.Provider
    kubeconfig: pulumi.Output[str]
    on_cluster: pulumi.ResourceOptions
    """The options of an object the program makes on the cluster: the provider, and the machine
    whose deletion takes the cluster, and so the object, with it."""


class ClusterApi(pulumi.ComponentResource):
    """cert-manager and cluster-api-operator as Helm releases, the provider namespaces, the CAPMOX
    credentials Secret, and the five provider CRs, each waited on until Ready; the CRs are sent
    only once the operator's webhooks can be called.

    None of the releases, namespaces and CRs is ever uninstalled by a Pulumi action: each is
    retained on delete (a delete or a replacement only drops it from the state) and protected
    while the VM is. Adopted, each is imported as it runs (components.adoption)."""

    provider_versions: pulumi.Output[dict[str, str]]
    """Config key -> provider version, as deployed and Ready; read back by the next run's upgrade
    check."""
    providers: list[kubernetes.apiextensions.CustomResource]
    """The five provider CRs, each done once its provider is Ready: what a workload cluster's
    objects wait for (their CRDs and webhooks come with the providers)."""

    def __init__(
        self,
        name: str,
        node: ClusterNode,
        settings: ClusterApiSettings,
        cluster_charts: charts.ClusterCharts,
        *,
        proxmox_url: str,
        deployed_versions: pulumi.Input[Mapping[str, str] | None],
        protected: bool,
        adopt: bool,
        recover: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`recover`: adopting a lab that lab-mgmt made (Settings.recover), whose CAPMOX Secret is
        the program's own and is imported as it runs."""
        super().__init__("homelab:index:ClusterApi", name, None, opts)
        child = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=self), node.on_cluster)
        lasting = _Lasting(
            pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=protected, retain_on_delete=True)),
            adopt=adopt,
        )
        operator = _releases(name, cluster_charts, lasting)
        webhooks = _operator_webhooks(name, f"{settings.operator_webhook_timeout_minutes}m", after=operator, opts=child)
        namespaces = {
            p.namespace: kubernetes.core.v1.Namespace(
                f"{name}-ns-{p.namespace}",
                metadata=field_manager.managed({"name": p.namespace}),
                opts=lasting.options(p.namespace, adoption.OBJECT_INPUTS),
            )
            for p in PROVIDERS
        }
        credentials = _capmox_credentials(
            name, settings, proxmox_url, after=namespaces[INFRASTRUCTURE.namespace], opts=child, adopt=recover
        )
        self.provider_versions, self.providers = _provider_crs(
            name,
            settings,
            deployed_versions,
            lasting,
            after=webhooks,
            namespaces=namespaces,
            credentials=credentials,
        )
        self.register_outputs({"providerVersions": self.provider_versions})


@dataclass(frozen=True)
class _Lasting:
    """How ClusterApi registers what it installs: never uninstalled by Pulumi (`never_uninstalled`
    holds the component's parent and provider, protect and retain_on_delete), and, adopted,
    imported as it runs."""

    never_uninstalled: pulumi.ResourceOptions
    adopt: bool

    def options(
        self, import_id: str, kept: list[str], more: pulumi.ResourceOptions | None = None
    ) -> pulumi.ResourceOptions:
        imported = adoption.imported(import_id, kept, adopt=self.adopt)
        return pulumi.ResourceOptions.merge(pulumi.ResourceOptions.merge(self.never_uninstalled, imported), more)


def _releases(name: str, cluster_charts: charts.ClusterCharts, lasting: _Lasting) -> kubernetes.helm.v3.Release:
    """cert-manager, then the operator; the operator's release."""
    cert_manager = _release(
        name, cluster_charts.cert_manager, namespace=CERT_MANAGER_NAMESPACE, values=CERT_MANAGER_VALUES, lasting=lasting
    )
    return _release(
        name,
        cluster_charts.operator,
        namespace=OPERATOR_NAMESPACE,
        values=OPERATOR_VALUES,
        lasting=lasting,
        after=cert_manager,
    )


def _release(
    name: str,
    local: charts.LocalChart,
    *,
    namespace: str,
    values: dict[str, object],
    lasting: _Lasting,
    after: pulumi.Resource | None = None,
) -> kubernetes.helm.v3.Release:
    """A real Helm release (hooks run, `helm list` shows it) that Pulumi waits on. It is named
    after its chart, as k3s's HelmChart named the playbook's release, so the lab it built can be
    adopted. Its chart is the archive in the project's folder (components.charts): a run reads no
    chart repository."""
    return kubernetes.helm.v3.Release(
        f"{name}-{local.chart}",
        name=local.chart,
        chart=local.file_name,
        namespace=namespace,
        create_namespace=True,
        values=values,
        timeout=RELEASE_TIMEOUT_SECONDS,
        version=local.version,
        opts=lasting.options(
            f"{namespace}/{local.chart}",
            adoption.RELEASE_INPUTS,
            pulumi.ResourceOptions(depends_on=[after]) if after else None,
        ),
    )


def _operator_webhooks(
    name: str, injected_within: str, *, after: pulumi.Resource, opts: pulumi.ResourceOptions
) -> list[pulumi.Resource]:
    """The operator's webhook configurations, each waited on until its CA bundle is injected, for
    `injected_within` at most (operatorWebhookTimeoutMinutes). The
    patch adds nothing but the wait's annotation to the chart's object; a Helm upgrade keeps it,
    and removing the patch takes only the annotation away. Its inputs never change with a chart
    version, so a bump does not wait again: the bundle is there already."""
    admission = kubernetes.admissionregistration.v1
    patches = {
        "validating": admission.ValidatingWebhookConfigurationPatch,
        "mutating": admission.MutatingWebhookConfigurationPatch,
    }
    return [
        patch(
            f"{name}-operator-webhook-{kind}",
            metadata=field_manager.managed(
                {"name": OPERATOR_WEBHOOK_CONFIGURATIONS[kind], "annotations": waits.wait_for(CA_BUNDLE_INJECTED)}
            ),
            opts=pulumi.ResourceOptions.merge(
                opts,
                pulumi.ResourceOptions(
                    depends_on=[after],
                    custom_timeouts=pulumi.CustomTimeouts(create=injected_within, update=injected_within),
                ),
            ),
        )
        for kind, patch in patches.items()
    ]


@dataclass(frozen=True)
class _Credentials:
    """The Secret CAPMOX reads its Proxmox token from; `resource` is None for one made outside
    the program."""

    name: str
    resource: kubernetes.core.v1.Secret | None


def _capmox_credentials(
    name: str,
    settings: ClusterApiSettings,
    proxmox_url: str,
    *,
    after: pulumi.Resource,
    opts: pulumi.ResourceOptions,
    adopt: bool,
) -> _Credentials:
    # A Secret made outside the program (the playbook's) stays CAPMOX's until the owner moves it
    # to the program's own (docs/adoption.md); the program neither makes nor changes one.
    if settings.existing_capmox_secret is not None:
        return _Credentials(settings.existing_capmox_secret, None)
    data = credentials_data(proxmox_url, settings.capmox_token_id, settings.capmox_token_secret)
    secret_name = credentials_secret_name(data)
    secret = kubernetes.core.v1.Secret(
        f"{name}-capmox-credentials",
        metadata=field_manager.managed({"name": secret_name, "namespace": INFRASTRUCTURE.namespace}),
        type="Opaque",
        # The operator reads it once; new credentials come as a new Secret (its name follows its
        # content), and immutability keeps anyone from editing this one in place.
        immutable=True,
        data=pulumi.Output.secret({key: _b64(value) for key, value in data.items()}),
        opts=pulumi.ResourceOptions.merge(
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[after])),
            # The same credentials name the same Secret (credentials_secret_name): one another
            # name would not find is refused by the import, before anything is written.
            adoption.imported(
                f"{INFRASTRUCTURE.namespace}/{secret_name}", ["metadata", "type", "immutable", "data"], adopt=adopt
            ),
        ),
    )
    return _Credentials(secret_name, secret)


def _provider_crs(
    name: str,
    settings: ClusterApiSettings,
    deployed_versions: pulumi.Input[Mapping[str, str] | None],
    lasting: _Lasting,
    *,
    after: list[pulumi.Resource],
    namespaces: Mapping[str, pulumi.Resource],
    credentials: _Credentials,
) -> tuple[pulumi.Output[dict[str, str]], list[kubernetes.apiextensions.CustomResource]]:
    """The five provider CRs, each after `after`, its namespace and (CAPMOX's) its credentials;
    config key -> version as Ready, and the CRs."""
    wanted = provider_versions(settings.providers)
    # Resolves only if the run upgrades at most one provider; every CR's version waits on it, so
    # a refused run sends no CR at all.
    checked_versions = pulumi.Output.from_input(deployed_versions).apply(
        lambda deployed: check_upgrade_order(deployed, wanted)
    )
    ready_versions: dict[str, pulumi.Output[str]] = {}
    crs = []
    ready_within = f"{settings.provider_ready_timeout_minutes}m"
    for p in PROVIDERS:
        spec: dict[str, pulumi.Input[object]] = {"version": checked_versions[p.config_key]}
        depends_on = [*after, namespaces[p.namespace]]
        if p is INFRASTRUCTURE:
            spec["configSecret"] = {"name": credentials.name}
            # Only for the program's own Secret: it alone rotates by a new name (the playbook's
            # stays as the owner made it, and CAPMOX's manager is left as it runs).
            if credentials.resource is not None:
                spec["deployment"] = credentials_rollout(credentials.name)
                depends_on.append(credentials.resource)
        provider_cr = kubernetes.apiextensions.CustomResource(
            f"{name}-{p.kind.removesuffix('Provider').lower()}-{p.name}",
            api_version=PROVIDER_API_VERSION,
            kind=p.kind,
            metadata=field_manager.managed(
                {
                    "name": p.name,
                    "namespace": p.namespace,
                    # Done when the provider's Deployment is Available, which Ready mirrors.
                    "annotations": waits.wait_for("condition=Ready"),
                }
            ),
            spec=spec,
            opts=lasting.options(
                f"{p.namespace}/{p.name}",
                adoption.OBJECT_INPUTS,
                pulumi.ResourceOptions(
                    depends_on=depends_on,
                    custom_timeouts=pulumi.CustomTimeouts(create=ready_within, update=ready_within),
                ),
            ),
        )
        # Read back from the CR, whose outputs exist only once it was Ready: a provider that
        # failed or timed out leaves the stack's last Ready versions for the next check.
        ready_versions[p.config_key] = _live_spec(provider_cr).apply(lambda live: str(live["version"]))
        crs.append(provider_cr)
    return pulumi.Output.all(**ready_versions), crs


# On CAPMOX's manager container, the configSecret's name: the operator puts the new credentials in
# the release's Secret, but the manager read them into its environment when it started, and the
# operator's update of an unchanged Deployment starts nothing. A rotation renames the Secret, so
# this value changes the Deployment's template and the manager is rolled onto the new token before
# the old one is removed in Proxmox (seen with the real operator, e2e/box/management/operator_changes.py).
CREDENTIALS_ROLLOUT_ENV = "LAB_MGMT_CONFIG_SECRET"


def credentials_rollout(secret_name: str) -> dict[str, object]:
    """The provider CR's `spec.deployment` (the operator's customization of the manager's
    Deployment) that rolls CAPMOX's manager when its configSecret changes."""
    return {"containers": [{"name": "manager", "env": [{"name": CREDENTIALS_ROLLOUT_ENV, "value": secret_name}]}]}


def credentials_data(proxmox_url: str, token_id: str, token_secret: str) -> dict[str, str]:
    """The configSecret's keys: the variables CAPMOX's release substitutes into the Secret its
    manager reads (config/default/proxmox-credentials-secret.yaml)."""
    return {"PROXMOX_URL": proxmox_url.rstrip("/"), "PROXMOX_TOKEN": token_id, "PROXMOX_SECRET": token_secret}


def credentials_secret_name(data: Mapping[str, str]) -> str:
    """The operator never re-reads its configSecret, so changed credentials (URL, token id or
    secret) need a Secret of a new name; a digest of everything the Secret holds gives one, the
    same on every run while the content is the same. 40 bits of a digest that includes a 122-bit
    random secret reveal nothing usable about it."""
    canonical = "\n".join(f"{key}={data[key]}" for key in sorted(data))
    return f"capmox-credentials-{hashlib.sha256(canonical.encode()).hexdigest()[:10]}"


def _live_spec(resource: kubernetes.apiextensions.CustomResource) -> pulumi.Output[dict[str, Any]]:
    # A CustomResource has an output for every property it was given; its type declares none.
    spec: pulumi.Output[dict[str, Any]] = resource.spec  # type: ignore[attr-defined]
    return spec


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
