"""What of a workload cluster a run would roll, said at preview, before anything rolls.

Cluster API replaces every machine of the control plane when the KubeadmControlPlane's spec
changes (its version, kubeadm's configuration, its machine template), and every worker when the
MachineDeployment's machine template changes (its version, a new machine or bootstrap template);
the replica counts roll nothing. A sizing change, a Kubernetes upgrade, a cluster moved to
another release's template (its templateVersion): each shows in the preview only as an update of one object. So each run
records a digest of those two parts per cluster (the stack output ROLLOUT_OUTPUT), and a run whose
parts differ from the last deployment's warns, naming the cluster and what rolls.

The record is of what runs, not of what is declared: a part whose object the run left as it was
(a `pulumi up --target` that passed it by: the engine hands the program the object's earlier
outputs, and still writes every stack output) keeps its earlier digest, so that the run that does
apply it warns too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from components.cluster_takeover import unlike_live
from components.cluster_template import ClusterObjects, spec_digest
from components.settings import PROJECT

DIGEST_LENGTH = 16
ROLLOUT_OUTPUT = "workloadMachineSpecs"
"""`{"<namespace>/<name>": {"control plane": digest, "workers": digest}}`, one entry per cluster."""


def machine_specs(objects: ClusterObjects) -> dict[str, str]:
    """The digests of what rolls each part of the cluster, from the objects as declared."""
    control_plane = {k: v for k, v in objects.control_plane["spec"].items() if k != "replicas"}
    return {
        "control plane": spec_digest(control_plane, DIGEST_LENGTH),
        "workers": spec_digest(objects.machine_deployment["spec"]["template"], DIGEST_LENGTH),
    }


def runs_declared(objects: ClusterObjects, control_plane_spec: Any, machine_deployment_spec: Any) -> dict[str, bool]:
    """Which part's object, as the run left it, holds what the settings declare (machine_specs'
    parts): the server adds its defaults beside the declared fields, never in place of them."""
    return {
        "control plane": _holds(control_plane_spec, objects.control_plane["spec"]),
        "workers": _holds(
            (machine_deployment_spec or {}).get("template"), objects.machine_deployment["spec"]["template"]
        ),
    }


def recorded(last: Mapping[str, str] | None, declared: Mapping[str, str], runs: Mapping[str, bool]) -> dict[str, str]:
    """The digests the record keeps: the declared one of a part that runs it, the last one of a
    part the run passed by (a new cluster's: the declared one, as there is nothing to warn of)."""
    earlier = last or {}
    return {part: digest if runs[part] else earlier.get(part, digest) for part, digest in declared.items()}


def _holds(live: Any, declared: Any) -> bool:
    # Numbers come back from the engine as floats, which compare equal: 3 == 3.0.
    return not any(unlike_live(live, declared))


def announce(name: str, last: Mapping[str, str] | None, now: Mapping[str, str]) -> None:
    """Warns once of the parts that roll, naming the cluster; nothing for a cluster the last
    deployment did not have."""
    rolled = [part for part, digest in now.items() if last is not None and last.get(part, digest) != digest]
    if rolled:
        pulumi.log.warn(
            f"{PROJECT}:workloadClusters: {name}: this run rolls its {' and its '.join(rolled)}: Cluster API "
            'replaces each of those machines, one at a time (docs/operations.md, "Scaling: what you set")'
        )
