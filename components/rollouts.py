"""What of a workload cluster a run would roll, said at preview, before anything rolls.

Cluster API replaces every machine of the control plane when the KubeadmControlPlane's spec
changes (its version, kubeadm's configuration, its machine template), and every worker when the
MachineDeployment's machine template changes (its version, a new machine or bootstrap template);
the replica counts roll nothing. A sizing change, a Kubernetes upgrade, a cluster moved to
another release's template (its templateVersion): each shows in the preview only as an update of one object. So each run
records a digest of those two parts per cluster (the stack output ROLLOUT_OUTPUT), and a run whose
parts differ from the last deployment's warns, naming the cluster and what rolls.
"""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

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


def announce(name: str, last: Mapping[str, str] | None, now: Mapping[str, str]) -> None:
    """Warns once of the parts that roll, naming the cluster; nothing for a cluster the last
    deployment did not have."""
    rolled = [part for part, digest in now.items() if last is not None and last.get(part, digest) != digest]
    if rolled:
        pulumi.log.warn(
            f"{PROJECT}:workloadClusters: {name}: this run rolls its {' and its '.join(rolled)}: Cluster API "
            'replaces each of those machines, one at a time (docs/operations.md, "Scaling: what you set")'
        )
