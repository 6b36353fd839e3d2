"""One field manager for every object the program applies, whichever stack applies it.

pulumi-kubernetes (v4.32, provider.go `fieldManagerName`) applies each object under a name it
draws at random for that resource (`pulumi-kubernetes-<suffix>`) unless the object's
`pulumi.com/patchFieldManager` annotation names one. A stack that recovers a lab whose state was
lost (docs/operations.md "Lost state or passphrase") draws new names, and the lost stack's stay
co-owners of every field they applied: the first change of such a field (a provider bump, a
CAPMOX token rotation, a workload cluster's upgrade) then stops at a conflict with a manager no
stack has any more (review 4, finding 2). Named here, the manager is the same for the lost stack
and the new one. A stack that applied under a drawn name takes this one at its next update: the
provider applies under the new name and relinquishes the old one (provider.go `Update`,
ssa.Relinquish), so each object keeps exactly one pulumi-kubernetes manager; but it relinquishes
only after a successful apply, which is not forced, so any value that update changes conflicts
with the drawn name. A workload cluster's object still under one is forced in that run
(cluster_takeover.TakeoverPlan.forced); docs/operations.md, "Upgrading lab-mgmt", says what to do
for the management cluster's objects (review 5, finding 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pulumi_kubernetes as kubernetes

ANNOTATION = "pulumi.com/patchFieldManager"
# The manager of pulumi-kubernetes's create (a POST, await.go), which each name it applies under
# starts with: its drawn `pulumi-kubernetes-<suffix>` and the program's NAME.
CREATE = "pulumi-kubernetes"
# pulumi-kubernetes's own prefix kept, so that anything reading managers by it (kubectl's
# managed-fields listing as docs/adoption.md W1 shows it, the box) still finds the program's.
NAME = "pulumi-kubernetes-lab-mgmt"


def managed(metadata: Mapping[str, Any]) -> kubernetes.meta.v1.ObjectMetaArgsDict:
    """`metadata` with the annotation that names the program's field manager."""
    annotations = {**(metadata.get("annotations") or {}), ANNOTATION: NAME}
    return cast("kubernetes.meta.v1.ObjectMetaArgsDict", {**metadata, "annotations": annotations})
