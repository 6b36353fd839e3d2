"""Read-only access to the workload clusters named in workloadClusters: each one gets its own
Kubernetes provider from CAPI's admin kubeconfig Secret and the read-only account inside it."""

from __future__ import annotations

import harness
import pytest
from test_readonly_access import (
    ACCOUNT,
    BINDING,
    CLUSTER_ROLE,
    SECRET,
    parse_kubeconfig,
    secret_output,
    uses_provider,
)

COMPONENT = "homelab:index:WorkloadClusterAccess"
K8S_PROVIDER = "pulumi:providers:kubernetes"
LAB1_RBAC = [
    (CLUSTER_ROLE, "lab1-readonly-role"),
    (ACCOUNT, "lab1-readonly-account"),
    (BINDING, "lab1-readonly-binding"),
    (SECRET, "lab1-readonly-token"),
]


@pytest.fixture(scope="module")
def without() -> harness.Run:
    return harness.run_program()


@pytest.fixture(scope="module")
def lab1() -> harness.Run:
    return harness.run_program(overrides={"workloadClusters": ["default/lab1"]})


def test_no_workload_clusters_by_default(without: harness.Run) -> None:
    assert without.of_type(COMPONENT) == []
    assert [name for _, name in without.names() if name.startswith("lab1")] == []
    assert {r.name for r in without.of_type(K8S_PROVIDER)} == {"mgmt-kubernetes"}
    assert secret_output(without, "workloadReadonlyKubeconfigs") == {}


def test_component(lab1: harness.Run) -> None:
    assert [r.name for r in lab1.of_type(COMPONENT)] == ["lab1"]


def test_provider_uses_the_clusters_admin_kubeconfig_as_a_secret(lab1: harness.Run) -> None:
    provider = lab1.get(K8S_PROVIDER, "lab1-kubernetes")
    assert set(provider.inputs["kubeconfig"]) == {harness.SECRET}
    # Read from the `value` key of CAPI's Secret, base64-decoded.
    assert provider.plain["kubeconfig"] == harness.WORKLOAD_KUBECONFIG
    assert provider.plain["clusterIdentifier"] == "default/lab1"
    assert provider.parent == lab1.get(COMPONENT, "lab1").urn


@pytest.mark.parametrize("key", LAB1_RBAC, ids=lambda key: key[1])
def test_rbac_objects_are_created_inside_the_workload_cluster(lab1: harness.Run, key: tuple[str, str]) -> None:
    resource = lab1.get(*key)
    assert uses_provider(lab1, resource, "lab1-kubernetes")
    assert "lab1-kubernetes" in resource.provider
    assert "mgmt-kubernetes" not in resource.provider


def test_same_account_as_on_the_management_cluster(lab1: harness.Run) -> None:
    for kind, name in LAB1_RBAC:
        mgmt = lab1.get(kind, name.replace("lab1-", "mgmt-", 1))
        assert lab1.get(kind, name).plain == mgmt.plain, name


def test_workload_kubeconfig_output(lab1: harness.Run) -> None:
    kubeconfigs = secret_output(lab1, "workloadReadonlyKubeconfigs")
    assert set(kubeconfigs) == {"lab1"}
    kubeconfig = parse_kubeconfig(kubeconfigs["lab1"])
    assert kubeconfig.current_context == "lab1-ro"
    assert kubeconfig.server == parse_kubeconfig(harness.WORKLOAD_KUBECONFIG).server == "https://192.168.4.40:6443"
    assert kubeconfig.user == {"token": harness.SA_TOKEN}
    assert "client-key-data" not in kubeconfigs["lab1"]


def test_adding_a_workload_cluster_only_adds(without: harness.Run, lab1: harness.Run) -> None:
    added = harness.changed(without, lab1)
    assert added
    assert added.isdisjoint(without.names())
    assert {name for _, name in added} == {
        "lab1",
        "lab1-kubernetes",
        "lab1-readonly",
        "lab1-admin-kubeconfig",  # a read of CAPI's Secret, which stays CAPI's
        *(name for _, name in LAB1_RBAC),
    }
