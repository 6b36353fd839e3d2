"""Cilium's Helm values: the program's own, the ones an owner keeps beside them
(`workloadClusters[i].ciliumValues`), and what a release running with other values would lose.

A taken-over cluster's Cilium was installed by hand; the run with adopt off upgrades the release to
the values declared here, and Helm drops every value the owner set that is not among them
(docs/adoption.md, W6). So the values that run would drop are named before it, each by its path
(`kubeProxyReplacement: running true, the program sets nothing`), and a value kept in the entry
is sent with the program's.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

PROGRAM: dict[str, Any] = {
    # Pod addresses come from each Node's podCIDR, which kube-controller-manager carves out of the
    # Cluster's pod CIDR (clusterNetwork.pods): the one setting that says which range pods use.
    "ipam": {"mode": "kubernetes"},
    # The chart's two replicas are kept on different nodes: on a cluster whose only node is its
    # control plane, the second one stays Pending, and cluster-autoscaler adds a worker for it,
    # forever (spec, "Phase 1 continued").
    # A budget let cluster-autoscaler evict the operator from a worker it scales down before the
    # program's release passed --skip-nodes-with-system-pods=false (components.autoscaler_flags),
    # which moves every kube-system pod: an entry that keeps the upstream default still needs it,
    # and taking it away would upgrade every cluster's Cilium for nothing (docs/operations.md,
    # "Scaling: what you set, what the autoscaler owns").
    "operator": {"replicas": 1, "podDisruptionBudget": {"enabled": True}},
}
_ABSENT = object()


def leaves(values: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Each value that is not a mapping, by its dotted path (`ipam.mode`); a list is one value."""
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from leaves(value, f"{path}.")
        else:
            yield path, value


def programs_own(kept: Mapping[str, Any]) -> list[str]:
    """The paths of `kept` that the program sets itself, or that hold one it sets."""
    own = [path for path, _ in leaves(PROGRAM)]
    return [
        path
        for path, _ in leaves(kept)
        if any(path == mine or mine.startswith(f"{path}.") or path.startswith(f"{mine}.") for mine in own)
    ]


def declared(kept: Mapping[str, Any]) -> dict[str, Any]:
    """The values the release is given: the program's, and those the entry keeps."""
    merged = copy.deepcopy(PROGRAM)
    for path, value in leaves(kept):
        *parents, last = path.split(".")
        node = merged
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = copy.deepcopy(value)
    return merged


# The program's values that its upgrade may set over a running one: the operator's, which roll
# its Deployment for a few seconds. Not ipam.mode: Cilium cannot change a running cluster's.
SET_OVER_RUNNING = ("operator.replicas", "operator.podDisruptionBudget.enabled")


def dropped(running: Mapping[str, Any], values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Each value of the running release (those the owner set, `helm get values`, or all it runs
    with, `running`) that `values` would not keep as it is: its path, and `path: running X, the
    program sets Y`."""
    found = []
    for path, value in leaves(running):
        node: Any = values
        for key in path.split("."):
            node = node.get(key, _ABSENT) if isinstance(node, Mapping) else _ABSENT
        if node != value:
            shown = "nothing" if node is _ABSENT else shown_value(path, node)
            found.append((path, f"{path}: running {shown_value(path, value)}, the program sets {shown}"))
    return found


def running(release: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The values a deployed release (as Helm stores it) runs with: its `config`, the values given
    at install or upgrade (`helm get values`), over its chart's own (`release["chart"]["values"]`,
    the chart's values.yaml), as Helm coalesces them. A value the chart sets by default runs as
    surely as one given: a Cilium installed without `--set ipam.mode` runs the chart's
    `cluster-pool`. With `config`, the values the same chart runs with given `config` instead: the
    program's release, whose ciliumVersion is the running chart's (docs/adoption.md, W2), so that a
    default both run alike is no change, and comparing the two (`dropped`) names only what differs."""
    chart = (release.get("chart") or {}).get("values") or {}
    return _coalesced((release.get("config") or {}) if config is None else config, chart)


def _coalesced(given: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """`given` over `defaults` as Helm's CoalesceValues merges them: a mapping key by key, anything
    else (a list among them) whole, and a null given removes the default."""
    merged = copy.deepcopy(dict(defaults))
    for key, value in given.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _coalesced(value, merged[key])
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# The last words of a value's name that say it is a secret (Cilium's `tls.ca.key`, a token or a
# password given at `helm install`): a refusal goes to the terminal and the update history.
SECRET_WORDS = ("key", "token", "password", "secret")


HIDDEN = "(hidden: a secret's value)"


def secret(path: str, value: Any) -> bool:
    """Whether a refusal must not print `value`, as `path` names a secret (review 4, 9d)."""
    return path.rsplit(".", 1)[-1].lower().endswith(SECRET_WORDS) and value not in (None, "", {}, [])


def shown_value(path: str, value: Any) -> str:
    """`value` as a refusal prints it (JSON), unless it is a secret."""
    return HIDDEN if secret(path, value) else json.dumps(value)
