"""The lab1 scenario's controls (lab1_autoscaling.py), run last on what the program made: what
breaks when a piece the program or its providers supply is taken away.

- Without the Role's proxmoxmachinetemplates rule, no scale-from-zero (kubernetes/autoscaler
  #5912): the autoscaler, killed as a crash would (the pod runner restarts it in its Pod after the
  backoff, as a kubelet), starts afresh without the rule; the real API server refuses it the
  templates, and its main loop, once demand is pending, waits for their cache and scales nothing.
  How long to watch is the autoscaler's own business: its informer retries the refused list with
  a growing backoff, and the control waits for CONTROL_REFUSALS of those retries after the demand
  is pending, not for a span of wall time. Then the cause goes as docs/troubleshooting.md has the
  owner take it away (the release rolled back to its own revision, which renders the Role again),
  and the same autoscaler process syncs the templates at its informer's next retry and scales
  from zero.
- Without its contract label, the ProxmoxCluster CRD cannot be resolved: a second Cluster's
  infrastructure is never found, and the real Cluster API manager says why.
- The node network's shapes beyond the lab's (POOLS): what the real IPAM provider's webhook says
  of the InClusterIPPool CAPMOX would make of each, and CAPMOX's of the program's ProxmoxCluster
  with each node network and control-plane endpoint (two with the endpoint inside the nodes'
  addresses), asked without writing; the test asks the program's settings about the same and
  wants nothing the program accepts refused.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from e2e.box.workload.lab1_reads import Lab, built_tool, conditions, get, ran, scales, until
from e2e.controllers.manager import RunningManager
from e2e.engine.control_plane import ControlPlane
from e2e.standins.cluster import pod_runner

TEMPLATES = "proxmoxmachinetemplates"
HELM = "LAB_MGMT_HELM_BIN"
# Each retry of the autoscaler's informer on the templates that the API server refuses (its log).
REFUSED = '"Failed to watch"'
# Three refused retries after the demand is pending (about 8 s of the informer's backoff): a main
# loop that were free would have run again meanwhile, started at once by the pending pod.
CONTROL_REFUSALS = 3
# nodeIpRanges, ipPrefix, gateway and controlPlaneEndpoint: the lab's, a CIDR spanning its network's
# broadcast address, single addresses beside a range elsewhere, ranges in two /24s of a /16, a range
# outside the gateway's network, a range across two /24s at prefix 24.
POOLS = (
    (("192.168.4.41-192.168.4.60",), 24, "192.168.4.8", "192.168.4.40"),
    (("192.168.4.240/28",), 24, "192.168.4.8", "192.168.4.100"),
    (("10.20.30.41", "10.20.30.43-10.20.30.45"), 24, "10.20.30.1", "10.20.30.40"),
    (("192.168.5.10-192.168.5.20", "192.168.4.50"), 16, "192.168.4.8", "192.168.4.40"),
    (("192.168.5.10-192.168.5.20",), 24, "192.168.4.8", "192.168.4.40"),
    (("192.168.4.30-192.168.4.60",), 24, "192.168.4.8", "192.168.4.40"),
    (("192.168.4.32/27",), 24, "192.168.4.8", "192.168.4.40"),
    (("192.168.4.250-192.168.5.5",), 24, "192.168.4.8", "192.168.4.40"),
)
MAIN_LOOP = "Starting main loop"
WAITING_FOR_TEMPLATES = "waiting for cache sync on infrastructure resource"
# The control's second cluster, and what Cluster API says of a CRD without its contract label.
UNLABELLED = "lab2"
CONTRACT_ERROR = "cannot find any versions matching contract versions"


def account_requests(events: list[dict[str, Any]], account: str, since: float = 0.0) -> dict[str, list[list[Any]]]:
    """The autoscaler's ServiceAccount's (`account`) requests on the Cluster API objects it reads, received at
    `since` (a time.time()) or later: for each resource, each distinct [namespace, verb, code]."""
    found: dict[str, set[tuple[str, str, int]]] = {}
    for event in events:
        ref = event.get("objectRef", {})
        if event["user"]["username"] != account or ref.get("resource") not in ("machinedeployments", TEMPLATES):
            continue
        received = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
        if received >= since:
            code = event.get("responseStatus", {}).get("code", 0)
            found.setdefault(ref["resource"], set()).add((ref.get("namespace", ""), event["verb"], code))
    return {resource: [list(entry) for entry in sorted(entries)] for resource, entries in found.items()}


def without_the_template_rule(
    mgmt: ControlPlane, lab: Lab, runner: pod_runner.PodRunner, demand: Callable[[], None]
) -> dict[str, Any]:
    """The Role without the proxmoxmachinetemplates rule, the autoscaler killed and restarted,
    demand at 0 workers: refused the templates, it scales nothing (see the module's docstring).
    Also what its ServiceAccount was allowed before, and the crash and restart."""
    cluster = lab.cluster
    roles = get(mgmt, "roles", namespace=cluster.namespace)["items"]
    [role] = [r for r in roles if any(TEMPLATES in rule.get("resources", []) for rule in r["rules"])]
    role["rules"] = [rule for rule in role["rules"] if TEMPLATES not in rule.get("resources", [])]
    mgmt.kubectl("replace", "-f", "-", stdin=json.dumps(role))
    allowed = account_requests(mgmt.audit(), cluster.account)
    [*_, running] = [e for e in runner.events if e["event"] == "started"]
    events = len(runner.events)
    os.kill(running["pid"], signal.SIGKILL)
    restarted = until(
        "the killed autoscaler restarted after the backoff",
        lambda: next((e for e in runner.events[events:] if e["event"] == "started"), None),
    )
    crash = runner.events[events:]
    log = runner.folder / restarted["log"]
    until("the restarted autoscaler refused the templates", lambda: _refusals(log_lines(log)))
    pod = until(
        "the Pod's status with the restart",
        lambda: (
            (found := get(mgmt, "pod", restarted["pod"], namespace=cluster.namespace))
            and "running" in (found["status"].get("containerStatuses") or [{"state": {}}])[0]["state"]
            and found
        ),
    )
    audit_mark = mgmt.audit_mark()
    demand()
    until(
        "the demand pod Unschedulable",
        lambda: any(conditions(p).get("PodScheduled", {}).get("reason") == "Unschedulable" for p in lab.demand_pods()),
    )
    pending_from = len(log_lines(log))
    until(
        f"{CONTROL_REFUSALS} refused retries of the templates once the demand is pending",
        lambda: len(_refusals(log_lines(log)[pending_from:])) >= CONTROL_REFUSALS,
    )
    lines, now = log_lines(log), lab.sample()
    loops = [index for index, line in enumerate(lines) if MAIN_LOOP in line]
    return {
        "role": role["metadata"]["name"],
        "allowed_with_the_rule": allowed,
        "refused_without": account_requests(mgmt.audit(), cluster.account, since=restarted["at"]),
        "crash": crash,
        "pod": pod,
        "refusals_after_pending": len(_refusals(lines[pending_from:])),
        "main_loops": len(loops),
        "waiting_for_templates": bool(loops) and any(WAITING_FOR_TEMPLATES in line for line in lines[loops[-1] :]),
        "replicas": now["replicas"],
        "pending_at_end": now["pending"],
        "scales": scales(mgmt, audit_mark, cluster),
        "forbidden": _refusals(lines)[:3],
        "rule_back": _rule_back(mgmt, lab, runner),
    }


def _rule_back(mgmt: ControlPlane, lab: Lab, runner: pod_runner.PodRunner) -> dict[str, Any]:
    """docs/troubleshooting.md's fix, its two helm commands (the history read as JSON here): the
    release's last revision, and a rollback to it, which renders the chart's Role again with the
    program's rule (Helm patches what the live object lost); then scale-from-zero, watched until
    the demand runs."""
    cluster = lab.cluster
    audit_mark, events, began = mgmt.audit_mark(), len(runner.events), time.monotonic()
    helm = ("--kubeconfig", str(mgmt.kubeconfig), "-n", cluster.namespace)
    history = built_tool(HELM, "helm", mgmt.root, "history", cluster.autoscaler, "--max", "1", "-o", "json", *helm)
    [last] = json.loads(history.stdout)
    rollback = built_tool(HELM, "helm", mgmt.root, "rollback", cluster.autoscaler, str(last["revision"]), *helm)
    timeline = lab.watch(
        "scale-from-zero with the rule back",
        lambda s: s["pending"] == 0 and s["scheduled"] == s["nodes"] == s["replicas"] == 1,
        began,
    )
    roles = get(mgmt, "roles", namespace=cluster.namespace)["items"]
    return {
        "revision": last["revision"],
        "rollback": ran(rollback),
        "rule_restored": any(TEMPLATES in rule.get("resources", []) for role in roles for rule in role["rules"]),
        "timeline": timeline,
        "scales": scales(mgmt, audit_mark, cluster),
        "runner_events": [event["event"] for event in runner.events[events:]],
    }


def log_lines(log: Path) -> list[str]:
    """A process's log, line by line, as far as it is written."""
    return log.read_text(errors="replace").splitlines()


def _refusals(lines: list[str]) -> list[str]:
    return [line for line in lines if REFUSED in line and TEMPLATES in line and "forbidden" in line]


def without_contract_labels(mgmt: ControlPlane, manager: RunningManager) -> dict[str, Any]:
    """With the contract labels taken off the ProxmoxCluster CRD, a second Cluster's
    infrastructure cannot be resolved, and the manager says why."""
    mgmt.kubectl(
        "label",
        "crd/proxmoxclusters.infrastructure.cluster.x-k8s.io",
        "cluster.x-k8s.io/v1beta1-",
        "cluster.x-k8s.io/v1beta2-",
    )
    meta = {"name": UNLABELLED, "namespace": "default", "labels": {"cluster.x-k8s.io/cluster-name": UNLABELLED}}
    infrastructure = {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "ProxmoxCluster", "name": UNLABELLED}
    second = [
        {
            **{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": meta},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}},
                "infrastructureRef": infrastructure,
            },
        },
        {
            **{"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha2", "kind": "ProxmoxCluster", "metadata": meta},
            "spec": {
                "controlPlaneEndpoint": {"host": "192.168.4.41", "port": 6443},
                "ipv4Config": {"addresses": ["192.168.4.50-192.168.4.59"], "prefix": 24, "gateway": "192.168.4.8"},
                "dnsServers": ["8.8.8.8"],
                "allowedNodes": [],
            },
        },
    ]
    mgmt.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": second}))
    said = until(
        "the manager refuses the unlabelled CRD",
        lambda: [line for line in log_lines(manager.log) if CONTRACT_ERROR in line and UNLABELLED in line],
    )
    infra = conditions(get(mgmt, "cluster", UNLABELLED)).get("InfrastructureReady", {})
    return {"log": said[0], "condition": f"{infra.get('reason', '')}: {infra.get('message', '')}"}


def verdicts(mgmt: ControlPlane, namespace: str, live: dict[str, Any]) -> dict[str, list[str]]:
    """For each of POOLS, what the IPAM provider (`ipam`) and CAPMOX (`capmox`) refuse of it."""
    return {"ipam": _ipam_verdicts(mgmt, namespace), "capmox": _capmox_verdicts(mgmt, namespace, live)}


def _ipam_verdicts(mgmt: ControlPlane, namespace: str) -> list[str]:
    """For each of POOLS, the IPAM provider's refusal of the InClusterIPPool CAPMOX would make of
    it (pkg/kubernetes/ipam/ipam.go CreateOrUpdateInClusterIPPool), or "" where it accepts it."""
    return [
        _dry_run(
            mgmt,
            {
                "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2",
                "kind": "InClusterIPPool",
                "metadata": {"name": "candidate-v4-icip", "namespace": namespace},
                "spec": {
                    "addresses": list(ranges),
                    "prefix": prefix,
                    "gateway": gateway,
                    "addressReuseGracePeriodSeconds": 60,
                },
            },
        )
        for ranges, prefix, gateway, _endpoint in POOLS
    ]


def _capmox_verdicts(mgmt: ControlPlane, namespace: str, live: dict[str, Any]) -> list[str]:
    """For each of POOLS, CAPMOX's webhook's refusal of the ProxmoxCluster `live` (the program's)
    with that node network and control-plane endpoint, or "" where it accepts it."""
    verdicts = []
    for ranges, prefix, gateway, endpoint in POOLS:
        spec = live["spec"] | {
            "controlPlaneEndpoint": {"host": endpoint, "port": live["spec"]["controlPlaneEndpoint"]["port"]},
            "ipv4Config": {"addresses": list(ranges), "prefix": prefix, "gateway": gateway},
        }
        candidate = {"apiVersion": live["apiVersion"], "kind": live["kind"], "spec": spec}
        verdicts.append(_dry_run(mgmt, candidate | {"metadata": {"name": "candidate", "namespace": namespace}}))
    return verdicts


def _dry_run(mgmt: ControlPlane, obj: dict[str, Any]) -> str:
    """The admission webhooks' refusal of creating `obj`, or "": a server-side dry run, so the
    webhooks answer and nothing is written."""
    asked = mgmt.kubectl_as(mgmt.kubeconfig, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(obj))
    return "" if asked.returncode == 0 else asked.stderr.strip()
