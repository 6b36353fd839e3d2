"""Writes docs/graph.md: the program's resource graph, and what each settings change touches.

Both are read from the program itself, run under the tests' mocks harness with the lab stack,
so the document shows what the code registers; tests/test_docs.py fails when the committed file
differs from what this renders now. Run it with `make graph`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Run as a script, neither the program's packages nor the harness are on the path yet.
sys.path[:0] = [entry for entry in (str(REPO), str(REPO / "tests")) if entry not in sys.path]

import harness  # noqa: E402

from components.cluster_api import PROVIDERS  # noqa: E402
from components.settings import SECRET_KEYS  # noqa: E402

OUTPUT = REPO / "docs" / "graph.md"
STACK_TYPE = "pulumi:pulumi:Stack"

NEXT_IMAGE = {
    "imageUrl": "https://cloud-images.ubuntu.com/noble/20261020/noble-server-cloudimg-amd64.img",
    "imageSha256": "0123456789abcdef" * 4,
}
# Proxmox gives a re-created VM a new MAC address; another vm_mac is how the harness stands for it.
REBUILT_VM_MAC = "BC:24:11:4A:00:02"
# Longer values (URLs, digests) would only widen the table; the key says what changed.
SHOWN_VALUE_LENGTH = 24


@dataclass(frozen=True)
class ChangeSet:
    """A settings change applied to an installed stack, as `pulumi up` would see it."""

    what: str
    settings: Mapping[str, object]
    base: Mapping[str, object] = field(default_factory=dict)
    """Settings applied in an earlier run, before this change."""
    vm_mac: str = harness.VM_MAC


def next_patch(version: str) -> str:
    head, patch = version.rsplit(".", 1)
    return f"{head}.{int(patch) + 1}"


def change_sets(deployed: Mapping[str, str]) -> list[ChangeSet]:
    return [
        ChangeSet("k3s bump", {"k3sVersion": "v1.35.9+k3s1"}),
        ChangeSet("cert-manager chart", {"certManagerVersion": "v1.21.3"}),
        ChangeSet("operator chart", {"capiOperatorVersion": "0.28.1"}),
        *(ChangeSet(f"{p.kind} `{p.name}`", {p.config_key: next_patch(deployed[p.config_key])}) for p in PROVIDERS),
        ChangeSet("CAPMOX token rotation", {"capmoxTokenSecret": "bbbbbbbb-cccc-4ddd-8eee-ffffffffffff"}),
        ChangeSet("read-only token rotation", {"readonlyTokenGeneration": 2}),
        ChangeSet("VM size", {"vmCores": 4, "vmMemoryMib": 8192}),
        ChangeSet(
            "rebuild from a new image (after a run with `vmProtected` false, no workload cluster declared)",
            {"vmRebuildFromImage": True, **NEXT_IMAGE},
            base={"vmProtected": False, "workloadClusters": []},
            vm_mac=REBUILT_VM_MAC,
        ),
    ]


# --- the flowchart -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Node:
    urn: str
    type: str
    name: str
    parent: str
    dependencies: tuple[str, ...]
    provider: str

    @property
    def id(self) -> str:
        return re.sub(r"\W", "_", f"{self.type}__{self.name}")

    @property
    def label(self) -> str:
        package, _, kind = self.type.rpartition(":")
        return f"provider {kind}" if package == "pulumi:providers" else kind


class _Graph:
    def __init__(self, run: harness.Run) -> None:
        self.nodes = {
            r.urn: _Node(r.urn, r.type, r.name, r.parent, tuple(r.dependencies), r.provider.rpartition("::")[0])
            for r in run.resources.values()
            if r.type != STACK_TYPE
        }
        self.components = {node.parent for node in self.nodes.values() if node.parent in self.nodes}

    def ancestors(self, urn: str) -> set[str]:
        found = set()
        while (urn := self.nodes[urn].parent) in self.nodes:
            found.add(urn)
        return found

    def children(self, parent: str) -> list[_Node]:
        """Directly inside `parent`; "" is the top level, inside the stack (which is no node)."""
        inside = [n for n in self.nodes.values() if (n.parent if n.parent in self.nodes else "") == parent]
        return sorted(inside, key=lambda n: (n.type, n.name))

    def members(self, component: str) -> set[str]:
        return {urn for urn in self.nodes if urn not in self.components and component in self.ancestors(urn)}

    def collapse(self, urns: set[str], outside: str) -> set[str]:
        """`urns` with every component whose resources are all in it drawn as that component
        (what `depends_on=[component]` registers), outermost first; `outside` is the other end
        of the arrows, which no component that holds it may stand for."""
        for component in sorted(self.components, key=lambda urn: (len(self.ancestors(urn)), urn)):
            members = self.members(component)
            if members and members <= urns and component not in self.ancestors(outside) | {outside}:
                urns = (urns - members) | {component}
        return urns

    def edges(self) -> set[tuple[str, str, str]]:
        """(from, arrow, to): solid for a dependency, dotted for the provider a resource goes
        through; arrows between a component and what it holds are implied by the nesting."""
        found: set[tuple[str, str, str]] = set()
        users: dict[str, set[str]] = {}
        for urn, node in self.nodes.items():
            if urn in self.components:
                continue
            found.update((dependency, "-->", urn) for dependency in self.collapse(set(node.dependencies), urn))
            if node.provider in self.nodes:
                users.setdefault(node.provider, set()).add(urn)
        for provider, used_by in users.items():
            found.update((provider, "-.->", user) for user in self.collapse(used_by, provider))
        return {
            (self.nodes[a].id, arrow, self.nodes[b].id)
            for a, arrow, b in found
            if a not in self.ancestors(b) and b not in self.ancestors(a)
        }

    def lines(self, parent: str = "", indent: str = "    ") -> Iterable[str]:
        for node in self.children(parent):
            if node.urn in self.components:
                yield f'{indent}subgraph {node.id}["{node.label} {node.name}"]'
                yield from self.lines(node.urn, indent + "    ")
                yield f"{indent}end"
            else:
                yield f'{indent}{node.id}["{node.name}<br/>{node.label}"]'


def flowchart(run: harness.Run) -> list[str]:
    graph = _Graph(run)
    return [
        "flowchart TD",
        *graph.lines(),
        *(f"    {a} {arrow} {b}" for a, arrow, b in sorted(graph.edges())),
    ]


# --- the change table --------------------------------------------------------------------------


def _setting(key: str, before: Mapping[str, str], after: Mapping[str, str]) -> str:
    old, new = before[f"{harness.PROJECT}:{key}"], after[f"{harness.PROJECT}:{key}"]
    if key in SECRET_KEYS:
        return f"`{key}`: a new secret"
    if max(len(old), len(new)) > SHOWN_VALUE_LENGTH:
        return f"`{key}`: a new value"
    return f"`{key}` {old} -> {new}"


def change_row(change: ChangeSet, installed: Mapping[str, object]) -> str:
    after_settings = {**change.base, **change.settings}
    before = harness.run_program(change.base, previous_outputs=installed)
    # The change is applied to what the base settings deployed (the rebuild guard reads that).
    deployed = {**installed, "vmProtected": before.outputs["vmProtected"][0]}
    after = harness.run_program(after_settings, previous_outputs=deployed, vm_mac=change.vm_mac)
    before_config, after_config = harness.stack_config(change.base), harness.stack_config(after_settings)
    settings = ", ".join(_setting(key, before_config, after_config) for key in change.settings)
    touched = ", ".join(f"`{name}`" for name in sorted(name for _, name in harness.changed(before, after)))
    return f"| {change.what} | {settings} | {touched or 'nothing'} |"


def render() -> str:
    lab = harness.run_program()
    deployed, _ = lab.outputs["providerVersions"]
    # The upgrade guard compares with the last deployment's outputs: these stand for an installed stack.
    installed = {"providerVersions": deployed}
    return "\n".join(
        [
            "<!-- Generated by tools/graph.py from the program under the tests' mocks; run `make graph`. -->",
            "# Resource graph",
            "",
            "Every resource the program registers for the lab stack (`Pulumi.lab.yaml`), in a box per",
            "component. A solid arrow points from a resource to one that waits for it (an input or",
            "`depends_on`); a dotted one from a provider to what is created through it. An arrow from or",
            "to a box stands for every resource in it. `last-deployment` is this stack's own last",
            "deployment, read for the provider upgrade check. With `workloadClusters` set, each cluster",
            "adds a `WorkloadCluster` box with its `Cilium`, `ClusterAutoscaler` and `ReadOnlyAccess` inside. See",
            "[architecture.md](architecture.md) for what flows along the arrows.",
            "",
            "```mermaid",
            *flowchart(lab),
            "```",
            "",
            "## What each settings change touches",
            "",
            "Each change is applied to an installed lab stack; the resources listed are those whose",
            "inputs or options differ, the ones `pulumi preview` shows changing.",
            "",
            "| change | settings | touches |",
            "| --- | --- | --- |",
            *(change_row(change, installed) for change in change_sets(deployed)),
            "",
            "A k3s bump restarts k3s, which renews its client certificates at start when they are within",
            "their renewal window: the run reads the kubeconfig again and updates `mgmt-kubernetes` in place (the",
            "mocks above read the same kubeconfig again, so the table cannot show it). The new",
            "kubeconfig is unknown until `mgmt-read-kubeconfig` has run, so the preview also lists every",
            "object created through `mgmt-kubernetes` as a possible update (the box shows 17); `pulumi up`",
            "leaves them as they are.",
            "",
            "A rebuild replaces the VM, which has a new identity, so `mgmt-kubernetes` is replaced too,",
            "and with it every object created through it (cert-manager, the operator, namespaces,",
            "Secrets, provider CRs, read-only access). They live on the old VM's disk and go with it",
            "(`deleted_with`: no call to the old API server); they are created again on the new cluster.",
            "",
        ]
    )


def main() -> None:
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
