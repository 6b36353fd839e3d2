"""The owner's read-only inspector (the spec's "The owner's read-only inspector"; issue 40): its
kubeconfigs as the owner's make-kubeconfig.sh mints them today, and its checks, typed on the
laptop through whichever kubeconfigs sit where it reads them (the owner's own repository, not the
lab-mgmt clone), before the takeover (the old
`capi-readonly` account's 7-day tokens) and after it (the program's read-only accounts, written
there by docs/adoption.md's W7).

    inspector.mint_old_file(lab, project, "lab1", "~/.kube/lab1.kubeconfig", apply_rbac=True)
    found = inspector.checks(lab)   # {"lab-mgmt": {...}, "lab1": {...}}
    inspector.problems(found)       # [] when every check answered as the spec says
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import yaml

from components.kubeconfig import token_kubeconfig
from e2e.standins.cluster import playbook_lab

# Where the inspector reads: in the owner's own repository, beside the lab-mgmt clone in the
# laptop's home (docs/adoption.md W7), as the laptop's shell names it; and the context each file names.
OWNERS_REPOSITORY = Path("src/cluster-autoscaler-with-capi")
FOLDER = OWNERS_REPOSITORY / ".claude/cluster-inspector/kubeconfigs"
TYPED_FOLDER = f"~/{FOLDER}"
CONTEXTS = {"lab-mgmt": "lab-mgmt-ro", "lab1": "lab1-ro"}
# make-kubeconfig.sh's token lifetime: seven days, refreshed weekly.
OLD_TOKEN_DURATION = "168h"
MACHINE_MAP = (
    "get machines -A --no-headers"
    " -o custom-columns=MACHINE:.metadata.name,NODE:.status.nodeRef.name,PROVIDER_ID:.spec.providerID"
)
VM_MAP = (
    "get proxmoxmachines -A --no-headers"
    " -o custom-columns=NAME:.metadata.name,VMID:.spec.virtualMachineID,PROVIDER_ID:.spec.providerID"
)
# What the inspector reads (the spec's list), by cluster: every command must answer.
READS = {
    "lab-mgmt": (
        "get nodes",
        "get coreproviders,bootstrapproviders,controlplaneproviders,infrastructureproviders -A",
        "get helmcharts -A",
        MACHINE_MAP,
        VM_MAP,
        "describe machinedeployment -n default lab1-workers",
        "get events -A",
    ),
    "lab1": (
        "get nodes",
        "get pods -n kube-system -o wide",
        "get poddisruptionbudgets -A",
        "get events -A",
    ),
}
# `kubectl auth can-i` answers, the same on both clusters: logs allowed; a delete and Secrets refused.
ANSWERS = {
    "auth can-i get pods --subresource=log -A": "yes",
    "auth can-i get nodes": "yes",
    "auth can-i delete machines.cluster.x-k8s.io -A": "no",
    "auth can-i get secrets -A": "no",
}


class Laptop(Protocol):
    """Where the inspector's commands are typed (owners_lab.OwnersLab)."""

    def laptop(self, line: str) -> dict[str, Any]: ...


def mint_old_file(lab: Laptop, home: Path, cluster: str, admin: str, *, apply_rbac: bool) -> None:
    """make-kubeconfig.sh NAME --admin-kubeconfig ... [--apply-rbac]: the inspector's RBAC applied
    where asked, a 7-day token of `capi-readonly` and the file written where the inspector reads."""
    if apply_rbac:
        _answer(lab.laptop(f"kubectl --kubeconfig {admin} apply -f -  <<'EOF'\n{playbook_lab.INSPECTOR_RBAC}EOF"))
    token = _answer(
        lab.laptop(
            f"kubectl --kubeconfig {admin} -n kube-system create token {playbook_lab.INSPECTOR}"
            f" --duration={OLD_TOKEN_DURATION}"
        )
    ).strip()
    admin_config = yaml.safe_load(
        _answer(lab.laptop(f"kubectl --kubeconfig {admin} config view --raw --minify --flatten"))
    )
    cluster_entry = admin_config["clusters"][0]["cluster"]
    path = home / FOLDER / f"{cluster}.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        token_kubeconfig(cluster_entry["server"], cluster_entry["certificate-authority-data"], token, CONTEXTS[cluster])
    )
    path.chmod(0o600)


def checks(lab: Laptop) -> dict[str, dict[str, Any]]:
    """Every check of the inspector's, typed on the laptop through the files where it reads:
    per cluster, its context, each read's exit code and output, and each `can-i`'s answer."""
    found: dict[str, dict[str, Any]] = {}
    for cluster, reads in READS.items():
        base = f"kubectl --kubeconfig {TYPED_FOLDER}/{cluster}.kubeconfig"
        context = lab.laptop(f"{base} config current-context")
        found[cluster] = {
            "context": context["stdout"].strip(),
            "who": lab.laptop(f"{base} auth whoami -o jsonpath={{.status.userInfo.username}}")["stdout"],
            "reads": {read: lab.laptop(f"{base} {read}") for read in reads},
            "answers": {ask: lab.laptop(f"{base} {ask}")["stdout"].strip() for ask in ANSWERS},
        }
    return found


def machine_map(found: dict[str, dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The cluster map the inspector draws: each Machine with its Node and its VM's id, matched by
    providerID, as lab-mgmt's reads list them."""
    reads = found["lab-mgmt"]["reads"]
    vms = {row[2]: row[1] for row in _rows(reads[VM_MAP]["stdout"])}
    machines = _rows(reads[MACHINE_MAP]["stdout"])
    return [(machine, node, vms.get(provider_id, "")) for machine, node, provider_id in machines]


def problems(found: dict[str, dict[str, Any]]) -> list[str]:
    """Every check that did not answer as the spec says, named; [] when all did."""
    wrong = []
    for cluster, result in found.items():
        if result["context"] != CONTEXTS[cluster]:
            wrong.append(f"{cluster}: context {result['context']!r}, not {CONTEXTS[cluster]}")
        for read, ran in result["reads"].items():
            if ran["rc"]:
                wrong.append(f"{cluster}: kubectl {read}: rc {ran['rc']}: {ran['stderr'].strip()[-300:]}")
        for ask, answer in result["answers"].items():
            if answer != ANSWERS[ask]:
                wrong.append(f"{cluster}: kubectl {ask}: {answer!r}, not {ANSWERS[ask]}")
    lab1_nodes = {row[0] for row in _rows(found["lab1"]["reads"]["get nodes"]["stdout"])}
    for machine, node, vmid in machine_map(found):
        if node not in lab1_nodes or not vmid.isdigit():
            wrong.append(f"the map: Machine {machine} -> Node {node!r} (lab1's: {sorted(lab1_nodes)}) -> VM {vmid!r}")
    return wrong


def _rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.splitlines() if line.strip()]


def _answer(ran: dict[str, Any]) -> str:
    if ran["rc"]:
        raise RuntimeError(f"{ran['line']}: rc {ran['rc']}: {ran['stderr']}")
    return str(ran["stdout"])
