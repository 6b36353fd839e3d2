"""The read-only account: a ClusterRole that reads everything but Secrets, its service account,
binding and long-lived token, and the secret kubeconfig built on that token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import harness
import pytest
import yaml

CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
ACCOUNT = "kubernetes:core/v1:ServiceAccount"
SECRET = "kubernetes:core/v1:Secret"
READ_VERBS = {"get", "list", "watch"}
TOKEN_TYPE = "kubernetes.io/service-account-token"
ACCOUNT_ANNOTATION = "kubernetes.io/service-account.name"


# --- helpers shared with test_workload_cluster -------------------------------------------------


@dataclass(frozen=True)
class Kubeconfig:
    """The parts of a one-cluster, one-user kubeconfig that matter here."""

    doc: dict[str, Any]

    @property
    def current_context(self) -> str:
        value = self.doc["current-context"]
        assert isinstance(value, str)
        return value

    def _named(self, section: str, name: str) -> dict[str, Any]:
        matches = [entry for entry in self.doc[section] if entry["name"] == name]
        assert len(matches) == 1, f"{section}: {self.doc[section]}"
        entry: dict[str, Any] = matches[0]
        return entry

    @property
    def context(self) -> dict[str, Any]:
        context: dict[str, Any] = self._named("contexts", self.current_context)["context"]
        return context

    @property
    def server(self) -> str:
        server: str = self._named("clusters", self.context["cluster"])["cluster"]["server"]
        return server

    @property
    def user(self) -> dict[str, Any]:
        user: dict[str, Any] = self._named("users", self.context["user"])["user"]
        return user


def parse_kubeconfig(text: object) -> Kubeconfig:
    assert isinstance(text, str)
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    assert doc["kind"] == "Config"
    return Kubeconfig(doc)


def secret_output(run: harness.Run, name: str) -> Any:
    """A stack output's value, which must be secret."""
    value, is_secret = run.outputs[name]
    assert is_secret is True, f"stack output {name} is not secret"
    return value


def uses_provider(run: harness.Run, resource: harness.Resource, provider_name: str) -> bool:
    """Whether `resource` is managed through the kubernetes provider resource `provider_name`."""
    provider = run.get("pulumi:providers:kubernetes", provider_name)
    return resource.provider.startswith(provider.urn + "::")


# --- an RBAC evaluator -------------------------------------------------------------------------


def allows(rules: list[dict[str, Any]], verb: str, group: str, resource: str) -> bool:
    """Whether any rule grants `verb` on `resource` in API group `group`, as the RBAC authorizer
    decides it for resource requests ("*" matches any verb, group or resource)."""
    return any(
        (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
        and (group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
        and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
        for rule in rules
    )


def test_evaluator() -> None:
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": ["x"], "resources": ["*"], "verbs": ["list"]},
    ]
    assert allows(rules, "get", "", "pods")
    assert not allows(rules, "list", "", "pods")
    assert not allows(rules, "get", "apps", "pods")
    assert allows(rules, "list", "x", "anything")
    assert not allows(rules, "list", "", "anything")
    assert allows([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], "delete", "", "secrets")


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run() -> harness.Run:
    return harness.run_program()


@pytest.fixture(scope="module")
def rules(run: harness.Run) -> list[dict[str, Any]]:
    role = run.get(CLUSTER_ROLE, "mgmt-readonly-role")
    value: list[dict[str, Any]] = role.plain["rules"]
    return value


# --- the ClusterRole ---------------------------------------------------------------------------


def test_role_name(run: harness.Run) -> None:
    assert run.get(CLUSTER_ROLE, "mgmt-readonly-role").plain["metadata"]["name"] == "lab-mgmt-readonly"


def test_role_only_reads(rules: list[dict[str, Any]]) -> None:
    assert rules
    for rule in rules:
        assert set(rule["verbs"]) <= READ_VERBS, rule


def test_role_names_no_secrets_and_no_core_wildcard(rules: list[dict[str, Any]]) -> None:
    for rule in rules:
        assert "*" not in rule["apiGroups"], rule
        assert "secrets" not in rule["resources"], rule
        if "" in rule["apiGroups"]:
            assert "*" not in rule["resources"], rule
        assert not rule.get("nonResourceURLs"), rule


def test_role_covers_what_diagnosis_needs(rules: list[dict[str, Any]]) -> None:
    core = {r for rule in rules if "" in rule["apiGroups"] for r in rule["resources"]}
    assert {"nodes", "namespaces", "events", "pods/log"} <= core
    groups = {g for rule in rules for g in rule["apiGroups"]}
    assert {
        "cluster.x-k8s.io",
        "operator.cluster.x-k8s.io",
        "helm.cattle.io",
        "infrastructure.cluster.x-k8s.io",
    } <= groups


@pytest.mark.parametrize(
    ("verb", "group", "resource", "allowed"),
    [
        ("delete", "cluster.x-k8s.io", "machines", False),
        ("get", "", "secrets", False),
        ("list", "", "secrets", False),
        ("watch", "", "secrets", False),
        ("get", "cluster.x-k8s.io", "machines", True),
        ("watch", "operator.cluster.x-k8s.io", "coreproviders", True),
        ("get", "", "pods/log", True),
        ("list", "", "nodes", True),
        ("patch", "", "nodes", False),
        ("create", "", "pods/exec", False),
        ("get", "", "pods/exec", False),
        ("update", "operator.cluster.x-k8s.io", "infrastructureproviders", False),
        # The owner's inspector's scale-down and CNI triage (the old capi-readonly built on `view`).
        ("list", "policy", "poddisruptionbudgets", True),
        ("get", "coordination.k8s.io", "leases", True),
        ("list", "networking.k8s.io", "networkpolicies", True),
        ("list", "cilium.io", "ciliumnodes", True),
        ("delete", "cilium.io", "ciliumendpoints", False),
        ("delete", "policy", "poddisruptionbudgets", False),
    ],
)
def test_role_decisions(rules: list[dict[str, Any]], verb: str, group: str, resource: str, allowed: bool) -> None:
    assert allows(rules, verb, group, resource) is allowed


# --- account, binding, token -------------------------------------------------------------------


def test_binding_binds_the_role_to_the_account(run: harness.Run) -> None:
    role = run.get(CLUSTER_ROLE, "mgmt-readonly-role")
    account = run.get(ACCOUNT, "mgmt-readonly-account")
    binding = run.get(BINDING, "mgmt-readonly-binding")
    assert account.plain["metadata"] == {
        "name": "lab-mgmt-readonly",
        "namespace": "kube-system",
        "annotations": harness.MANAGED,
    }
    assert binding.plain["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role.plain["metadata"]["name"],
    }
    assert binding.plain["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account.plain["metadata"]["name"],
            "namespace": account.plain["metadata"]["namespace"],
        }
    ]
    assert run.depends_on(binding, role)
    assert run.depends_on(binding, account)


def test_token_secret(run: harness.Run) -> None:
    account = run.get(ACCOUNT, "mgmt-readonly-account")
    token = run.get(SECRET, "mgmt-readonly-token")
    assert token.plain["type"] == TOKEN_TYPE
    assert token.plain["metadata"]["namespace"] == account.plain["metadata"]["namespace"]
    assert token.plain["metadata"]["annotations"] == {
        ACCOUNT_ANNOTATION: account.plain["metadata"]["name"],
        # The provider's built-in wait for a token Secret lasts 5 seconds; this waits for the
        # token itself, bounded by the timeouts below.
        "pulumi.com/waitFor": "jsonpath={.data.token}",
        **harness.MANAGED,
    }
    assert token.custom_timeouts == {"create": "5m", "update": "5m"}
    assert token.plain["metadata"]["name"] == "lab-mgmt-readonly-token-1"
    # The token controller fills the Secret in only once the account exists.
    assert run.depends_on(token, account)
    assert "data" in token.additional_secret_outputs


def test_objects_are_on_the_management_cluster(run: harness.Run) -> None:
    for key in [
        (CLUSTER_ROLE, "mgmt-readonly-role"),
        (ACCOUNT, "mgmt-readonly-account"),
        (BINDING, "mgmt-readonly-binding"),
        (SECRET, "mgmt-readonly-token"),
    ]:
        assert uses_provider(run, run.get(*key), "mgmt-kubernetes"), key


@pytest.fixture(scope="module")
def with_workload() -> harness.Run:
    return harness.run_program()  # the lab stack declares lab1


def token_secrets(run: harness.Run) -> dict[str, str]:
    return {r.name: r.plain["metadata"]["name"] for r in run.of_type(SECRET) if r.plain.get("type") == TOKEN_TYPE}


def test_bumping_the_generation_rotates_every_token_and_nothing_else(with_workload: harness.Run) -> None:
    rotated = harness.run_program(overrides={"readonlyTokenGeneration": 2})
    assert token_secrets(with_workload) == {
        "mgmt-readonly-token": "lab-mgmt-readonly-token-1",
        "lab1-readonly-token": "lab-mgmt-readonly-token-1",
    }
    # A new resource, never a replacement of the old one: a replacement would take the old one's
    # inputs that ignore_changes keeps, an imported token's `data` among them (review 4, finding 4).
    assert token_secrets(rotated) == {
        "mgmt-readonly-token-2": "lab-mgmt-readonly-token-2",
        "lab1-readonly-token-2": "lab-mgmt-readonly-token-2",
    }
    assert harness.changed(with_workload, rotated) == {
        *((SECRET, f"{name}-readonly-token") for name in ("mgmt", "lab1")),
        *((SECRET, f"{name}-readonly-token-2") for name in ("mgmt", "lab1")),
    }
    third = harness.run_program(overrides={"readonlyTokenGeneration": 3})
    assert set(token_secrets(third)) == {"mgmt-readonly-token-3", "lab1-readonly-token-3"}


def test_bumping_the_generation_without_workload_clusters() -> None:
    without: dict[str, object] = {"workloadClusters": []}
    rotated = harness.run_program(overrides={**without, "readonlyTokenGeneration": 2})
    assert harness.changed(harness.run_program(without), rotated) == {
        (SECRET, "mgmt-readonly-token"),
        (SECRET, "mgmt-readonly-token-2"),
    }


# --- kubeconfig outputs ------------------------------------------------------------------------


def test_readonly_kubeconfig(run: harness.Run) -> None:
    text = secret_output(run, "readonlyKubeconfig")
    kubeconfig = parse_kubeconfig(text)
    assert kubeconfig.current_context == "lab-mgmt-ro"
    assert kubeconfig.server == "https://192.168.4.21:6443"
    assert kubeconfig.user == {"token": harness.SA_TOKEN}
    assert "client-key-data" not in text
    assert "client-certificate-data" not in text


def test_admin_kubeconfig_is_secret(run: harness.Run) -> None:
    assert parse_kubeconfig(secret_output(run, "kubeconfig")).current_context == "lab-mgmt"


@pytest.mark.parametrize("workload_clusters", [[], ["default/lab1"]], ids=["no-workload", "lab1"])
def test_every_kubeconfig_output_is_secret(
    run: harness.Run, with_workload: harness.Run, workload_clusters: list[str]
) -> None:
    outputs = (with_workload if workload_clusters else run).outputs
    names = [name for name in outputs if "ubeconfig" in name]
    assert {"kubeconfig", "readonlyKubeconfig", "workloadReadonlyKubeconfigs"} <= set(names)
    assert [name for name in names if not outputs[name][1]] == []
