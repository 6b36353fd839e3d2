"""What one run of the program leaves for the next, in one place: the stack's outputs.

A run reads its own last deployment once (a StackReference to this very stack) and checks what it
is asked to do against it: the addresses and user the host steps dialed, the SSH host key they
pinned, the k3s version every node runs, the VM's cloud-init and size as it holds them, its
protection, the admin certificate's renewal marker, the kubeconfig file's generation, the
providers' versions. Each component keeps here what the next run will read of it, and the program
writes them all once, as the stack's outputs, at the end of its graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

# The organization that every self-managed (DIY: file or object store) backend reports.
DIY_ORGANIZATION = "organization"


def own_stack_reference_name(organization: str, project: str, stack: str) -> str:
    """How this stack names itself in a StackReference, on every backend. A DIY backend in its
    older layout (state made before project-scoped stacks) refuses `organization/project/stack`
    as a stack name, while a bare name means this project's stack in both of its layouts. Pulumi
    Cloud reads a bare name in the user's default organization, which need not be the stack's."""
    return stack if organization == DIY_ORGANIZATION else f"{organization}/{project}/{stack}"


class RunRecords:
    """The last deployment's outputs (`last`), and this run's, kept by the components that make
    them (`keep`) until `write`."""

    last: pulumi.Output[Mapping[str, Any]]
    """The outputs of this stack's last deployment, as a whole secret (the kubeconfigs are);
    empty for a stack that was never deployed."""

    def __init__(self) -> None:
        reference = pulumi.StackReference(
            "last-deployment",
            stack_name=own_stack_reference_name(pulumi.get_organization(), pulumi.get_project(), pulumi.get_stack()),
        )
        self.last = reference.outputs.apply(lambda outputs: dict(outputs or {}))
        self._kept: dict[str, pulumi.Input[Any]] = {}

    def last_value(self, name: str) -> pulumi.Output[Any]:
        """One output of the last deployment, None where it had none; not secret, so only for
        outputs that are not."""
        return deployed_output(self.last, name)

    def keep(self, name: str, value: pulumi.Input[Any]) -> None:
        """Make `value` this run's output `name`; a name is kept once."""
        if name in self._kept:
            raise ValueError(f"the stack output {name} is kept twice")
        self._kept[name] = value

    def write(self) -> None:
        """Every kept output, as the stack's outputs."""
        for name, value in self._kept.items():
            pulumi.export(name, value)


def deployed_output(deployment: pulumi.Output[Mapping[str, Any]], name: str) -> pulumi.Output[Any]:
    """One output of `deployment` (RunRecords.last), None where it had none; not secret, so only
    for outputs that are not."""
    return pulumi.Output.unsecret(deployment.apply(lambda outputs: outputs.get(name)))
