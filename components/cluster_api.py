"""cert-manager, the Cluster API Operator and its five providers on the management cluster."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pulumi
import pulumi_kubernetes as kubernetes

from components.settings import ClusterApiSettings, ProviderVersions

CERT_MANAGER_NAMESPACE = "cert-manager"
OPERATOR_NAMESPACE = "capi-operator-system"
RELEASE_TIMEOUT_SECONDS = 600
OPERATOR_READY_BOUND_SECONDS = 300
PROVIDER_READY_TIMEOUT = "15m"
PROVIDER_API_VERSION = "operator.cluster.x-k8s.io/v1alpha2"
# Every input a Helm release gets (`compat` from the SDK itself): adopted, none of them is forced
# on the live release (an import reads back no repositoryOpts, createNamespace or timeout).
RELEASE_INPUTS = [
    *("name", "chart", "repositoryOpts", "namespace", "createNamespace", "values", "timeout", "version"),
    "compat",
]


@dataclass(frozen=True)
class Provider:
    config_key: str
    """The setting that pins its version; also how errors and the stack output name it."""
    setting: str
    """Its field in ProviderVersions."""
    kind: str
    name: str
    namespace: str


# In the order the operator wants upgrades applied: core first.
PROVIDERS = (
    Provider("capiCoreVersion", "core", "CoreProvider", "cluster-api", "capi-system"),
    Provider("capiBootstrapVersion", "bootstrap", "BootstrapProvider", "kubeadm", "capi-kubeadm-bootstrap-system"),
    Provider(
        "capiControlPlaneVersion",
        "control_plane",
        "ControlPlaneProvider",
        "kubeadm",
        "capi-kubeadm-control-plane-system",
    ),
    Provider("capmoxVersion", "infrastructure", "InfrastructureProvider", "proxmox", "capmox-system"),
    Provider("ipamInClusterVersion", "ipam", "IPAMProvider", "in-cluster", "capi-ipam-in-cluster-system"),
)
INFRASTRUCTURE = PROVIDERS[3]


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


# The organization that every self-managed (DIY: file or object store) backend reports.
DIY_ORGANIZATION = "organization"


def own_stack_reference_name(organization: str, project: str, stack: str) -> str:
    """How this stack names itself in a StackReference, on every backend. A DIY backend in its
    older layout (state made before project-scoped stacks) refuses `organization/project/stack`
    as a stack name, while a bare name means this project's stack in both of its layouts. Pulumi
    Cloud reads a bare name in the user's default organization, which need not be the stack's."""
    return stack if organization == DIY_ORGANIZATION else f"{organization}/{project}/{stack}"


class ClusterNode(Protocol):
    """What the program needs of the node its cluster runs on (components.k3s_node.K3sNode): the
    cluster's Kubernetes provider and admin kubeconfig, and a way to run a script on the node."""

    provider: kubernetes.Provider
    kubeconfig: pulumi.Output[str]

    def host_step(
        self,
        name: str,
        script: str,
        args: list[str],
        *,
        after: pulumi.Resource,
        parent: pulumi.Resource,
        triggers: Sequence[pulumi.Input[object]],
    ) -> pulumi.Resource: ...


def last_deployment() -> pulumi.Output[Mapping[str, Any]]:
    """The outputs of this stack's last deployment, as a whole secret (the kubeconfigs are);
    empty for a stack that was never deployed."""
    reference = pulumi.StackReference(
        "last-deployment",
        stack_name=own_stack_reference_name(pulumi.get_organization(), pulumi.get_project(), pulumi.get_stack()),
    )
    return reference.outputs.apply(lambda outputs: dict(outputs or {}))


def deployed_output(deployment: pulumi.Output[Mapping[str, Any]], name: str) -> pulumi.Output[Any]:
    """One output of the last deployment, None where it had none; not secret, so only for
    outputs that are not."""
    return pulumi.Output.unsecret(deployment.apply(lambda outputs: outputs.get(name)))


def last_deployed_versions(deployment: pulumi.Output[Mapping[str, Any]]) -> pulumi.Output[Mapping[str, str] | None]:
    """The providerVersions output of the last deployment, which the upgrade check compares
    against; None for a stack that was never deployed."""
    return deployed_output(deployment, "providerVersions")


class ClusterApi(pulumi.ComponentResource):
    """cert-manager and cluster-api-operator as Helm releases, the provider namespaces, the CAPMOX
    credentials Secret, and the five provider CRs, each waited on until Ready."""

    provider_versions: pulumi.Output[dict[str, str]]
    """Config key -> provider version, as deployed and Ready; read back by the next run's upgrade
    check."""

    def __init__(
        self,
        name: str,
        node: ClusterNode,
        settings: ClusterApiSettings,
        *,
        proxmox_url: str,
        deployed_versions: pulumi.Input[Mapping[str, str] | None],
        protected: bool,
        adopt: bool,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("homelab:index:ClusterApi", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=node.provider)

        def kept(import_id: str, adopted_as_is: list[str]) -> pulumi.ResourceOptions:
            """cert-manager, the operator and its providers: no Pulumi action uninstalls them.
            Retained on delete (a delete or replacement only drops them from the state),
            protected while the VM is; adopted, they are imported as they run, nothing forced."""
            return pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    protect=protected,
                    retain_on_delete=True,
                    import_=import_id if adopt else None,
                    ignore_changes=adopted_as_is if adopt else None,
                ),
            )

        def release(
            release_name: str, chart: str, repo: str, namespace: str, values: dict[str, object], **extra: Any
        ) -> kubernetes.helm.v3.Release:
            """A real Helm release (hooks run, `helm list` shows it) that Pulumi waits on. Its
            name is the one k3s's HelmChart gave the playbook's release, so the lab it built can
            be adopted."""
            return kubernetes.helm.v3.Release(
                f"{name}-{release_name}",
                name=release_name,
                chart=chart,
                repository_opts=kubernetes.helm.v3.RepositoryOptsArgs(repo=repo),
                namespace=namespace,
                create_namespace=True,
                values=values,
                timeout=RELEASE_TIMEOUT_SECONDS,
                **extra,
            )

        cert_manager = release(
            "cert-manager",
            "cert-manager",
            settings.cert_manager_repo,
            CERT_MANAGER_NAMESPACE,
            {"crds": {"enabled": True}},
            version=settings.cert_manager_version,
            opts=kept(f"{CERT_MANAGER_NAMESPACE}/cert-manager", RELEASE_INPUTS),
        )
        # Provider CRs in the chart's values would become Helm hooks (cluster-api-operator #1052)
        # and would clash with the ones below: the values stay empty.
        operator = release(
            "cluster-api-operator",
            "cluster-api-operator",
            settings.operator_repo,
            OPERATOR_NAMESPACE,
            {},
            version=settings.operator_version,
            opts=pulumi.ResourceOptions.merge(
                kept(f"{OPERATOR_NAMESPACE}/cluster-api-operator", RELEASE_INPUTS),
                pulumi.ResourceOptions(depends_on=[cert_manager]),
            ),
        )
        operator_ready = node.host_step(
            f"{name}-operator-ready",
            "operator_ready.sh",
            [str(OPERATOR_READY_BOUND_SECONDS)],
            after=operator,
            triggers=[settings.cert_manager_version, settings.operator_version],
            parent=self,
        )

        # An imported namespace brings its live spec (the `kubernetes` finalizer) among its inputs:
        # adopted, that is ignored too, or the run would plan an update of it.
        namespaces = {
            p.namespace: kubernetes.core.v1.Namespace(
                f"{name}-ns-{p.namespace}", metadata={"name": p.namespace}, opts=kept(p.namespace, ["metadata", "spec"])
            )
            for p in PROVIDERS
        }
        # A Secret made outside the program (the playbook's) stays CAPMOX's until the owner moves
        # it to the program's own (docs/adoption.md); the program neither makes nor changes one.
        credentials: kubernetes.core.v1.Secret | None = None
        credentials_name = settings.existing_capmox_secret
        if credentials_name is None:
            credentials_data = {
                "PROXMOX_URL": proxmox_url.rstrip("/"),
                "PROXMOX_TOKEN": settings.capmox_token_id,
                "PROXMOX_SECRET": settings.capmox_token_secret,
            }
            credentials_name = credentials_secret_name(credentials_data)
            credentials = kubernetes.core.v1.Secret(
                f"{name}-capmox-credentials",
                metadata={"name": credentials_name, "namespace": INFRASTRUCTURE.namespace},
                type="Opaque",
                # The operator reads it once; new credentials come as a new Secret (its name follows
                # its content), and immutability keeps anyone from editing this one in place.
                immutable=True,
                data=pulumi.Output.secret({key: _b64(value) for key, value in credentials_data.items()}),
                opts=pulumi.ResourceOptions.merge(
                    child, pulumi.ResourceOptions(depends_on=[namespaces[INFRASTRUCTURE.namespace]])
                ),
            )

        wanted = provider_versions(settings.providers)
        # Resolves only if the run upgrades at most one provider; every CR's version waits on it,
        # so a refused run sends no CR at all.
        checked_versions = pulumi.Output.from_input(deployed_versions).apply(
            lambda deployed: check_upgrade_order(deployed, wanted)
        )
        ready_versions: dict[str, pulumi.Output[str]] = {}
        for p in PROVIDERS:
            spec: dict[str, pulumi.Input[object]] = {"version": checked_versions[p.config_key]}
            depends_on: list[pulumi.Resource] = [operator_ready, namespaces[p.namespace]]
            if p is INFRASTRUCTURE:
                spec["configSecret"] = {"name": credentials_name}
                if credentials is not None:
                    depends_on.append(credentials)
            provider_cr = kubernetes.apiextensions.CustomResource(
                f"{name}-{p.kind.removesuffix('Provider').lower()}-{p.name}",
                api_version=PROVIDER_API_VERSION,
                kind=p.kind,
                metadata={
                    "name": p.name,
                    "namespace": p.namespace,
                    # Done when the provider's Deployment is Available, which Ready mirrors.
                    "annotations": {"pulumi.com/waitFor": "condition=Ready"},
                },
                spec=spec,
                opts=pulumi.ResourceOptions.merge(
                    kept(f"{p.namespace}/{p.name}", ["metadata", "spec"]),
                    pulumi.ResourceOptions(
                        depends_on=depends_on,
                        custom_timeouts=pulumi.CustomTimeouts(
                            create=PROVIDER_READY_TIMEOUT, update=PROVIDER_READY_TIMEOUT
                        ),
                    ),
                ),
            )
            # Read back from the CR, whose outputs exist only once it was Ready: a provider that
            # failed or timed out leaves the stack's last Ready versions for the next check.
            ready_versions[p.config_key] = _live_spec(provider_cr).apply(lambda live: str(live["version"]))
        self.provider_versions = pulumi.Output.all(**ready_versions)

        self.register_outputs({"providerVersions": self.provider_versions})


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
