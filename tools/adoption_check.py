"""Reads `pulumi preview --json` of an adoption run and fails unless it only imports, reads and
adds the program's own new objects: any update, replace or delete, or a create of something the
playbook's lab already has, is listed with each field that differs and exits 1 (docs/adoption.md).

    pulumi preview --stack lab --json > preview.json && .venv/bin/python tools/adoption_check.py preview.json

A preview that failed is refused whatever it planned: one with an error, or one the engine stopped
midway (the program's traceback on its stderr).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

HARMLESS_OPS = {"same", "import", "read"}
# What adoption adds to the lab: no object of these types exists there before the first run.
NEW_TO_THE_LAB = {
    "pulumi:pulumi:Stack",
    "pulumi:pulumi:StackReference",
    # The default provider that reads the StackReference: the real engine plans its create.
    "pulumi:providers:pulumi",
    "pulumi:providers:proxmoxve",
    "pulumi:providers:kubernetes",
    "command:remote:Command",
    "homelab:index:ManagementVm",
    "homelab:index:K3sNode",
    "homelab:index:ClusterApi",
    "homelab:index:ReadOnlyAccess",
    # A workload cluster being taken over: its components are the program's; what they hold is
    # judged one by one (its seven Cluster API objects and Cilium's release must be imported).
    "homelab:index:WorkloadCluster",
    "homelab:index:Cilium",
    "homelab:index:ClusterAutoscaler",
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
    "kubernetes:core/v1:ServiceAccount",
}
# New to the lab only under these parents: the read-only token Secret is the program's own, while
# a CAPMOX credentials Secret created in an adoption run would take CAPMOX off the playbook's. The
# operator's webhook configurations are the chart's: ClusterApi's patches of them add only the
# annotation that the program waits on, and change nothing the operator or Helm reads. K3sNode's
# local command writes the admin kubeconfig file that kubeconfigPath names, on this machine. A
# workload cluster's autoscaler is the program's own release (docs/adoption.md says what to do
# with one installed by hand); Cilium's release under its own component must be imported.
NEW_TO_THE_LAB_UNDER = {
    "command:local:Command": "homelab:index:K3sNode",
    "kubernetes:core/v1:Secret": "homelab:index:ReadOnlyAccess",
    "kubernetes:helm.sh/v3:Release": "homelab:index:ClusterAutoscaler",
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfigurationPatch": "homelab:index:ClusterApi",
    "kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfigurationPatch": "homelab:index:ClusterApi",
}


def _types_of(urn: str) -> list[str]:
    """The resource's type, preceded by its parents' types, outermost first."""
    # urn:pulumi:<stack>::<project>::<parent types$>type::<name>
    return urn.split("::")[2].split("$")


def _new_to_the_lab(urn: str) -> bool:
    *parents, type_ = _types_of(urn)
    if type_ in NEW_TO_THE_LAB_UNDER:
        return parents[-1:] == [NEW_TO_THE_LAB_UNDER[type_]]
    return type_ in NEW_TO_THE_LAB


def problems(steps: Iterable[Mapping[str, Any]]) -> list[str]:
    found = []
    for step in steps:
        op, urn = step.get("op", "?"), step.get("urn", "?")
        if op in HARMLESS_OPS:
            continue
        if op == "create" and _new_to_the_lab(urn):
            continue
        found.append(f"{op}: {urn}")
        found += [f"    {field}" for field in differing_fields(step)]
    return found


def differing_fields(step: Mapping[str, Any]) -> list[str]:
    """Each property path the step would change, with how (`spec.replicas (update)`), from the
    engine's detailed diff (pulumi display/json.go PreviewStep.detailedDiff: path -> {kind,
    inputDiff}), or else its top-level diffReasons/replaceReasons; a replacement's cause is marked."""
    detailed = step.get("detailedDiff") or {}
    if detailed:
        return [f"{path} ({diff.get('kind', '?')})" for path, diff in sorted(detailed.items())]
    replacing = set(step.get("replaceReasons") or [])
    return [
        f"{key} ({'replace' if key in replacing else 'differs'})"
        for key in sorted(set(step.get("diffReasons") or []) | replacing)
    ]


# What the program prints on stderr when the engine stops it midway: the box saw a preview whose engine
# cancelled with no error diagnostic at all, the JSON holding only the steps before that and the
# Python program's traceback (tests/test_adoption_check.py).
PROGRAM_TRACEBACK = "Traceback (most recent call last):"


def _failures(diagnostics: Iterable[Mapping[str, Any]]) -> list[str]:
    """The errors of a preview that failed, or the program's traceback when the engine stopped it."""
    errors = [
        str(diagnostic.get("message", "")).strip()
        for diagnostic in diagnostics
        if diagnostic.get("severity") == "error"
    ]
    if errors:
        return errors
    stderr = [str(d.get("message", "")) for d in diagnostics if d.get("severity") == "info#err"]
    if any(line.strip().startswith(PROGRAM_TRACEBACK) for line in stderr):
        raised = dict.fromkeys(line.strip() for line in stderr if "Error: " in line)
        return ["the engine stopped the program before the preview ended:", *list(raised)[-3:]]
    return []


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    preview = json.loads(Path(argv[1]).read_text())
    steps = preview.get("steps")
    if not isinstance(steps, list) or not steps:
        print(f"{argv[1]}: no steps; is this the output of `pulumi preview --json`?", file=sys.stderr)
        return 2
    # A preview that failed plans only the steps before its error: what it did not reach is unchecked.
    errors = _failures(preview.get("diagnostics") or [])
    if errors:
        print("this preview failed; fix what it names, then preview again:", file=sys.stderr)
        for line in errors:
            print(f"  {line}", file=sys.stderr)
        return 1
    found = problems(steps)
    if found:
        print("this preview would change the running lab; do not run `pulumi up`:", file=sys.stderr)
        for line in found:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"{len(steps)} steps: imports, reads and the program's own new objects only")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
