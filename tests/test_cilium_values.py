"""Cilium's values as a release runs them (components.cilium_values.running): what the user gave
over the chart's own, so that the values the chart sets by default are compared too, and a default
the program's release runs alike is no change."""

from __future__ import annotations

from typing import Any

from components import autoscaler_flags, cilium_values

# A few of Cilium's chart defaults (values.yaml): the IPAM mode the playbook's install did not set
# and the program does, the operator's replicas, and two it leaves alone.
CHART = {
    "ipam": {"mode": "cluster-pool", "operator": {"clusterPoolIPv4PodCIDRList": ["10.0.0.0/8"]}},
    "operator": {"replicas": 2, "podDisruptionBudget": {"enabled": False, "maxUnavailable": 1}},
    "debug": {"enabled": False},
    "kubeProxyReplacement": "false",
}


def release(config: dict[str, Any]) -> dict[str, Any]:
    """A deployed release as Helm stores it: the values given, and its chart's own."""
    return {"name": "cilium", "config": config, "chart": {"metadata": {"name": "cilium"}, "values": CHART}}


def changed(running: dict[str, Any], kept: dict[str, Any] | None = None) -> list[str]:
    """What a release running with `running` given would lose to the program's, from the same chart."""
    deployed = release(running)
    program = cilium_values.running(deployed, cilium_values.declared(kept or {}))
    return [path for path, _ in cilium_values.dropped(cilium_values.running(deployed), program)]


def test_a_default_the_chart_sets_is_compared() -> None:
    """`helm install cilium` with no `--set ipam.mode`: the release's config is empty, and it runs
    the chart's cluster-pool, which W6's upgrade to `kubernetes` would change on a running cluster."""
    declared = cilium_values.declared({})
    dropped = dict(cilium_values.dropped(cilium_values.running(release({})), declared))
    assert dropped["ipam.mode"] == 'ipam.mode: running "cluster-pool", the program sets "kubernetes"'
    assert changed({}) == ["ipam.mode", "operator.replicas", "operator.podDisruptionBudget.enabled"]


def test_the_chart_defaults_both_releases_run_are_no_change() -> None:
    assert (
        changed({"ipam": {"mode": "kubernetes"}, "operator": {"replicas": 1, "podDisruptionBudget": {"enabled": True}}})
        == []
    )


def test_a_value_given_over_a_default_is_compared_with_the_programs_and_what_the_entry_keeps() -> None:
    given = {"ipam": {"mode": "kubernetes"}, "operator": {"replicas": 1}, "kubeProxyReplacement": "true"}
    assert changed(given) == ["operator.podDisruptionBudget.enabled", "kubeProxyReplacement"]
    kept = {"kubeProxyReplacement": "true"}
    assert changed({**given, "operator": {"replicas": 1, "podDisruptionBudget": {"enabled": True}}}, kept) == []


def test_values_coalesce_as_helms_do() -> None:
    """A mapping merges key by key, a list is replaced whole, and a null removes the default."""
    ran = cilium_values.running(
        release({"ipam": {"operator": {"clusterPoolIPv4PodCIDRList": ["10.42.0.0/16"]}}, "debug": None})
    )
    assert ran["ipam"] == {"mode": "cluster-pool", "operator": {"clusterPoolIPv4PodCIDRList": ["10.42.0.0/16"]}}
    assert "debug" not in ran
    assert CHART["debug"] == {"enabled": False}


def test_a_release_without_its_chart_runs_what_it_was_given() -> None:
    assert cilium_values.running({"name": "cilium", "config": {"ipam": {"mode": "kubernetes"}}}) == {
        "ipam": {"mode": "kubernetes"}
    }


def test_a_secret_value_is_named_but_never_printed() -> None:
    """A refusal lands in the terminal and the update history: a key given at `helm install` is
    named by its path alone."""
    deployed = release({"tls": {"ca": {"key": "LS0tLS1CRUdJTi1LRVk="}}, "debug": {"enabled": True}})
    lines = [
        line for _, line in cilium_values.dropped(cilium_values.running(deployed), cilium_values.running(deployed, {}))
    ]
    assert "tls.ca.key: running (hidden: a secret's value), the program sets nothing" in lines
    assert "debug.enabled: running true, the program sets false" in lines
    assert not [line for line in lines if "LS0t" in line]


def test_a_hand_installed_autoscalers_secret_flag_is_named_but_never_printed() -> None:
    [line] = autoscaler_flags.dropped({"extraArgs": {"gce-api-token": "abc123"}}, {})
    assert line.startswith("gce-api-token: running (hidden: a secret's value), the program's release does not pass it")
