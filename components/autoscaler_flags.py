"""cluster-autoscaler's command-line flags as the program's release passes them (the chart's
`extraArgs`): its own, the four timings the entry sets (`workloadClusters[i].autoscaler`), the
flags an owner keeps beside them (`autoscaler.extraArgs`), and those an autoscaler installed by
hand runs with that the program's would not.

Taking over a cluster, the owner uninstalls the autoscaler they installed by hand before the
program installs its own (docs/adoption.md step 5): a flag of theirs that the program's release
does not pass would be lost without a word, so each is named before that run, with the key that
keeps it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from components import cilium_values

# The clusterapi provider reads each MachineDeployment's /scale several times a main loop through a
# client held at client-go's default 5 requests a second (burst 10): in the box one loop with one
# MachineDeployment waited about 6 s on that limit, and scale-from-zero took 16 s from the pending
# pod (kubernetes/autoscaler #6333; #6416 made these flags reach the provider's clients). A lab's
# API servers take this from one client at ease.
CLIENT_LIMITS = {"kube-client-qps": "30", "kube-client-burst": "60"}
# The taint a new node carries only until it is initialized: Cluster API's, until the Machine
# controller has found it. As a startup taint the autoscaler counts such a node as not ready yet,
# instead of a ready node the pending pod cannot use, for which it added a second node (the box,
# 1 -> 2 for one pod while the first worker was uninitialized; kubernetes/autoscaler #7268).
# Cilium's `node.cilium.io/agent-not-ready` is not among them: Cilium removes it but never puts it
# on a node, and CAPMOX's template registers nodes with no taint (templates/cluster-template.yaml),
# so the flag for it would be inert. The chart repeats a flag for each key, up to its first `_`.
STARTUP_TAINTS = ("node.cluster.x-k8s.io/uninitialized",)
# kube-system's pods moved like any other's: by default cluster-autoscaler 1.35 keeps a worker
# that runs a kube-system pod without a PodDisruptionBudget for an hour
# (--blocking-system-pod-distruption-timeout; simulator/drainability/rules/system/rule.go), and
# kubeadm's CoreDNS, which has none, can land on a worker whenever it is rescheduled: in one run of
# the box the control plane rolled for a Kubernetes upgrade, its CoreDNS came back on the worker,
# and the scale-down to zero stopped there. A node goes only when its pods fit elsewhere, so a
# kube-system pod that cannot go anywhere else still keeps its node. An owner may keep the
# upstream default (autoscaler.extraArgs.skip-nodes-with-system-pods: "true").
SYSTEM_PODS = {"skip-nodes-with-system-pods": "false"}
# The flags the entry's own keys set, by flag.
TIMING_KEYS = {
    "scan-interval": "scanInterval",
    "scale-down-unneeded-time": "scaleDownUnneededTime",
    "scale-down-delay-after-add": "scaleDownDelayAfterAdd",
    "max-node-provision-time": "maxNodeProvisionTime",
}
# What the chart itself passes from its other values, never through extraArgs.
CHART_FLAGS = ("cloud-provider", "namespace", "node-group-auto-discovery", "kubeconfig", "cloud-config")
# The extraArgs of the pinned chart's values.yaml (clusterAutoscalerChartVersion 9.59.0): Helm merges
# a release's extraArgs map over them, so the program's release and one installed by hand from the
# same chart both pass them unless their values say otherwise, and a hand release that sets them as
# the chart does (a values file copied from the chart's) loses nothing.
CHART_DEFAULTS = {"logtostderr": "true", "stderrthreshold": "info", "v": "4"}


def program_flags(timings: Mapping[str, str], kept: Mapping[str, str]) -> dict[str, str]:
    """The release's extraArgs: the timings (by flag), the program's own flags and those kept."""
    return {
        **timings,
        **CLIENT_LIMITS,
        **SYSTEM_PODS,
        **{f"startup-taint_{index}": taint for index, taint in enumerate(STARTUP_TAINTS, 1)},
        **kept,
    }


def refused_to_keep(flag: str) -> str | None:
    """Why `flag` may not be kept under autoscaler.extraArgs, or None."""
    if flag in TIMING_KEYS:
        return f"has its own key: autoscaler.{TIMING_KEYS[flag]}"
    if flag in CLIENT_LIMITS or flag.split("_", 1)[0] == "startup-taint" or flag in CHART_FLAGS:
        return "is the program's own flag for cluster-autoscaler, not one to keep beside it"
    return None


def dropped(hand_made: Mapping[str, Any], flags: Mapping[str, str]) -> Iterator[str]:
    """Each flag of a hand-installed release's extraArgs that the program's release, given `flags`
    over the chart's own (CHART_DEFAULTS), does not pass as it is, with the key that would keep it."""
    passed = {**CHART_DEFAULTS, **flags}
    for flag, value in (hand_made.get("extraArgs") or {}).items():
        running = flag_value(value)
        if passed.get(flag) == running:
            continue
        key = f"autoscaler.{TIMING_KEYS[flag]}" if flag in TIMING_KEYS else f"autoscaler.extraArgs.{flag}"
        passes = f"passes {_shown(flag, passed[flag])}" if flag in passed else "does not pass it"
        yield f"{flag}: running {_shown(flag, running)}, the program's release {passes} (keep it with {key})"


# The values a comparison of two releases' values leaves out: the flags (dropped names them with
# their keys) and the program's restart-on-new-kubeconfig annotation.
NOT_COMPARED = ("extraArgs", "podAnnotations")


def changed_values(hand_made: Mapping[str, Any], program: Mapping[str, Any]) -> list[str]:
    """Each value of a hand-installed release (`helm get values`) that the program's release sets
    otherwise or not at all, flags aside, as `path: running X, the program sets Y`."""
    return [line for path, line in cilium_values.dropped(hand_made, program) if path.split(".")[0] not in NOT_COMPARED]


def _shown(flag: str, value: str) -> str:
    return cilium_values.HIDDEN if cilium_values.secret(flag, value) else value


def flag_value(value: Any) -> str:
    """A value as the chart writes it on the command line (`--flag=value`): true, not True."""
    return str(value).lower() if isinstance(value, bool) else str(value)
