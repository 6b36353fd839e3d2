"""A read-only account on a cluster, and a kubeconfig that uses its token."""

from __future__ import annotations

import base64

import pulumi
import pulumi_kubernetes as kubernetes

from components import adoption, field_manager
from components.kubeconfig import cluster_endpoint, token_kubeconfig

# Not the old inspector's `capi-readonly`, which the playbook's lab still has and a weekly script
# re-applies: the two would fight over the same objects.
ACCOUNT = "lab-mgmt-readonly"
ACCOUNT_NAMESPACE = "kube-system"
READ_VERBS = ["get", "list", "watch"]
# A waitFor JSONPath without a value is met once the path exists (pulumi-kubernetes
# provider/pkg/jsonpath); it also replaces the provider's built-in 5-second token wait.
TOKEN_PRESENT = "jsonpath={.data.token}"  # noqa: S105 - a JSONPath, not a secret
TOKEN_TIMEOUT = "5m"  # noqa: S105 - a duration


def _read(api_groups: list[str], resources: list[str]) -> kubernetes.rbac.v1.PolicyRuleArgs:
    return kubernetes.rbac.v1.PolicyRuleArgs(api_groups=api_groups, resources=resources, verbs=READ_VERBS)


# What an operator needs to diagnose the lab, read-only. RBAC has no partial wildcards in API
# groups, so the Cluster API groups are listed one by one. No rule names `secrets`, and `*` on
# the non-core groups cannot reach them: Secrets live in the core group only.
READONLY_RULES = [
    _read(
        [""],
        [
            "configmaps",
            "endpoints",
            "events",
            "limitranges",
            "namespaces",
            "nodes",
            "persistentvolumeclaims",
            "persistentvolumes",
            "pods",
            "pods/log",
            "replicationcontrollers",
            "resourcequotas",
            "serviceaccounts",
            "services",
        ],
    ),
    _read(["apps"], ["daemonsets", "deployments", "replicasets", "statefulsets"]),
    _read(["batch"], ["cronjobs", "jobs"]),
    _read(["events.k8s.io"], ["events"]),
    _read(["apiextensions.k8s.io"], ["customresourcedefinitions"]),
    # What the owner's inspector triages with, which the old `capi-readonly` had through `view`:
    # the PodDisruptionBudgets that decide a scale-down, leases (which controller leads), network
    # policies and endpoint slices, and Cilium's objects on a workload cluster.
    _read(["policy"], ["poddisruptionbudgets"]),
    _read(["coordination.k8s.io"], ["leases"]),
    _read(["networking.k8s.io"], ["ingresses", "networkpolicies"]),
    _read(["discovery.k8s.io"], ["endpointslices"]),
    _read(["autoscaling"], ["horizontalpodautoscalers"]),
    _read(["cilium.io"], ["*"]),
    _read(
        [
            "cluster.x-k8s.io",
            "addons.cluster.x-k8s.io",
            "bootstrap.cluster.x-k8s.io",
            "controlplane.cluster.x-k8s.io",
            "infrastructure.cluster.x-k8s.io",
            "ipam.cluster.x-k8s.io",
            "runtime.cluster.x-k8s.io",
            "clusterctl.cluster.x-k8s.io",
            "operator.cluster.x-k8s.io",
            "cert-manager.io",
            "helm.cattle.io",
        ],
        ["*"],
    ),
]


class ReadOnlyAccess(pulumi.ComponentResource):
    """ClusterRole `lab-mgmt-readonly` (get, list, watch; no secrets), a service account bound to it,
    a long-lived token for it, and a kubeconfig (secret) with that token.

    The token lives until its Secret is deleted: bumping `token_generation` creates a token
    Secret of a new name and deletes the old one, which revokes the old token.

    Adopted (`adopt`: made by a stack whose state is lost), each object is imported as it runs, the
    token with it: the kubeconfigs given out with it keep working.
    """

    kubeconfig: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        on_cluster: pulumi.ResourceOptions,
        admin_kubeconfig: pulumi.Input[str],
        *,
        context_name: str,
        token_generation: int,
        adopt: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`on_cluster`: the options of an object on the cluster (ClusterNode.on_cluster)."""
        super().__init__("homelab:index:ReadOnlyAccess", name, None, opts)
        child = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=self), on_cluster)

        def imported(import_id: str, kept: list[str]) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions.merge(child, adoption.imported(import_id, kept, adopt=adopt))

        role = kubernetes.rbac.v1.ClusterRole(
            f"{name}-role",
            metadata=field_manager.managed({"name": ACCOUNT}),
            rules=READONLY_RULES,
            opts=imported(ACCOUNT, ["metadata", "rules"]),
        )
        account = kubernetes.core.v1.ServiceAccount(
            f"{name}-account",
            metadata=field_manager.managed({"name": ACCOUNT, "namespace": ACCOUNT_NAMESPACE}),
            opts=imported(f"{ACCOUNT_NAMESPACE}/{ACCOUNT}", ["metadata"]),
        )
        kubernetes.rbac.v1.ClusterRoleBinding(
            f"{name}-binding",
            metadata=field_manager.managed({"name": ACCOUNT}),
            role_ref=kubernetes.rbac.v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=ACCOUNT
            ),
            subjects=[kubernetes.rbac.v1.SubjectArgs(kind="ServiceAccount", name=ACCOUNT, namespace=ACCOUNT_NAMESPACE)],
            opts=pulumi.ResourceOptions.merge(
                imported(ACCOUNT, ["metadata", "roleRef", "subjects"]),
                pulumi.ResourceOptions(depends_on=[role, account]),
            ),
        )
        token = _token(f"{name}-token", token_generation, account, child, adopt=adopt)

        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(admin_kubeconfig, token.data).apply(
                lambda args: _readonly_kubeconfig(args[0], args[1], context_name)
            )
        )
        self.register_outputs({"kubeconfig": self.kubeconfig})


def _token(
    name: str,
    generation: int,
    account: kubernetes.core.v1.ServiceAccount,
    child: pulumi.ResourceOptions,
    *,
    adopt: bool,
) -> kubernetes.core.v1.Secret:
    """The account's long-lived token, in a Secret named after its generation; from the second
    generation on, its Pulumi name too, so that a rotation is a new resource with no inputs of the
    old one's (an imported token's `data`, which `ignore_changes` would copy into a replacement:
    the new Secret then held the revoked token, and the token controller fills in only a missing
    one)."""
    secret_name = f"{ACCOUNT}-token-{generation}"
    resource_name = name if generation == 1 else f"{name}-{generation}"
    # The token controller's `data`: an import brings it among the inputs, and a Secret's data
    # that leaves them replaces the Secret (pulumi-kubernetes' forceNewProperties), a new token
    # (found by the box: the run after a recovery replaced both tokens). Never declared, so never
    # diffed.
    imported = adoption.imported(
        f"{ACCOUNT_NAMESPACE}/{secret_name}", ["metadata", "type", "data"], adopt=adopt, otherwise_ignored=["data"]
    )
    return kubernetes.core.v1.Secret(
        resource_name,
        metadata=field_manager.managed(
            {
                "name": secret_name,
                "namespace": ACCOUNT_NAMESPACE,
                "annotations": {
                    "kubernetes.io/service-account.name": ACCOUNT,
                    # The provider's own wait for a token Secret gives up after 5 seconds, which a
                    # fresh, busy k3s's token controller can miss; wait for the token itself.
                    "pulumi.com/waitFor": TOKEN_PRESENT,
                },
            }
        ),
        type="kubernetes.io/service-account-token",
        # The token controller fills the Secret in only once the account exists.
        opts=pulumi.ResourceOptions.merge(
            pulumi.ResourceOptions.merge(child, imported),
            pulumi.ResourceOptions(
                depends_on=[account],
                additional_secret_outputs=["data"],
                custom_timeouts=pulumi.CustomTimeouts(create=TOKEN_TIMEOUT, update=TOKEN_TIMEOUT),
            ),
        ),
    )


def _readonly_kubeconfig(admin_kubeconfig: str, token_data: dict[str, str], context_name: str) -> str:
    server, ca_data = cluster_endpoint(admin_kubeconfig)
    token = base64.b64decode(token_data["token"]).decode()
    return token_kubeconfig(server, ca_data, token, context_name)
