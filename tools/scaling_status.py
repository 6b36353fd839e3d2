"""What the autoscaler of a workload cluster sees and did, read only:

    make scaling-status CLUSTER=lab1
    .venv/bin/python -m tools.scaling_status --cluster default/lab1 [--kubeconfig FILE] [--workload-kubeconfig FILE]

The node groups it discovers (each MachineDeployment with its min/max, replicas and capacity
annotations), the autoscaler's Deployment and timings, its status ConfigMap in the workload
cluster where its flags put it (its health, each node group's scale-up and scale-down state and when it last changed),
and its latest events there: the scale-ups it made, the pods it did not help and why, the nodes
it removed or keeps. Changes nothing on either cluster.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass

from tools.scaling_lab import (
    FLAG_DEFAULTS,
    Autoscaler,
    Kubectl,
    KubectlError,
    NodeGroup,
    RefusedError,
    arguments,
    autoscaler,
    node_groups,
    reached,
    workload_kubeconfig,
)

# The reasons the autoscaler records its decisions under (cluster-autoscaler's FAQ, "What events
# are emitted by CA?"), on pods and nodes of the workload cluster and on its status ConfigMap.
EVENT_REASONS = (
    "TriggeredScaleUp",
    "NotTriggerScaleUp",
    "ScaledUpGroup",
    "ScaleDown",
    "ScaleDownEmpty",
    "ScaleDownFailed",
    "ScaleUpTimedOut",
    "FailedToScaleUpGroup",
)
LATEST_EVENTS = 15


@dataclass(frozen=True)
class Status:
    node_groups: list[NodeGroup]
    autoscaler: Autoscaler | None
    status: str | None
    """The status ConfigMap's text, None before the autoscaler's first scan."""
    events: list[dict[str, str]]


def status(
    mgmt: Kubectl, workload: Kubectl, namespace: str, cluster: str, latest: int | None = LATEST_EVENTS
) -> Status:
    """What it sees and did; `latest`: how many of its latest events (None: all the API server keeps)."""
    scaler = autoscaler(mgmt, namespace, cluster)
    where = scaler.status_configmap if scaler else (FLAG_DEFAULTS["namespace"], FLAG_DEFAULTS["status-config-map-name"])
    configmap = workload.found("configmap", where[1], "-n", where[0])
    events = [
        event
        for event in workload.items("events", "--all-namespaces", "--sort-by=.lastTimestamp")
        if event.get("reason") in EVENT_REASONS
    ]
    return Status(
        node_groups=node_groups(mgmt, namespace, cluster),
        autoscaler=scaler,
        status=(configmap.get("data") or {}).get("status") if configmap else None,
        events=[
            {
                "at": str(event.get("lastTimestamp") or event.get("eventTime")),
                "reason": event["reason"],
                "object": f"{event['involvedObject'].get('kind')}/{event['involvedObject'].get('name')}",
                "message": event.get("message", ""),
            }
            for event in events[-(latest or len(events)) :]
        ],
    )


def show(found: Status) -> str:
    lines = ["node groups:"]
    for group in found.node_groups:
        capacity = ", ".join(f"{key}={value}" for key, value in group.capacity.items()) or "none"
        lines.append(
            f"  {group.namespace}/{group.name}: min {group.min_size}, max {group.max_size}, "
            f"replicas {group.replicas}, capacity {capacity}"
        )
    scaler = found.autoscaler
    if scaler is None:
        lines.append("autoscaler: none discovers this cluster")
    else:
        timings = ", ".join(f"{key} {value:g}s" for key, value in scaler.timings.items())
        lines.append(f"autoscaler: {scaler.namespace}/{scaler.name}, {scaler.ready} Ready; {timings}")
    lines += ["status:", *(f"  {line}" for line in (found.status or "no status ConfigMap yet").splitlines())]
    lines.append("latest events:")
    lines += [f"  {e['at']}  {e['reason']}  {e['object']}: {e['message']}" for e in found.events] or ["  none"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead")
    args = parser.parse_args(argv)
    mgmt, namespace, name = reached(args)
    try:
        with workload_kubeconfig(mgmt, namespace, name, args.workload_kubeconfig) as workload:
            found = status(mgmt, workload, namespace, name)
    except (RefusedError, KubectlError) as refused:
        print(refused, file=sys.stderr)
        return 2
    print(json.dumps(dataclasses.asdict(found), indent=2) if args.json else show(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
