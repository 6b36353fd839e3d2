"""The owner's takeover, word for word (issue 40; tests/test_box_takeover.py): on the lab as its
owner runs it (owners_lab.py), every `sh` block of docs/adoption.md before step 7 typed as it
stands, in the page's order (doc_script.py), on the laptop or on the node as the block says, with
PLACEHOLDERS filled in; the first line that fails ends the journey there. Nothing the page does
not say is done between its lines. Around it, what the owner must find as it was: the VM's power
and k3s's files, lab1's objects and what Cluster API made from them, and who wrote to them when;
and the inspector's checks answering through its files before (the old account's) and after
(the program's, written by W7). Then the program's autoscaler scales the lab1 it took over
(scaling.py), and the day after: lab1's Kubernetes upgraded, then the state lost and the lab taken
back by the page (day_after.py).

    in_new_netns("takeover.journey.owners_takeover", root, addresses=lab1_box.ADDRESSES, timeout=...)
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from components.settings.workload import MAX_SIZE_ANNOTATION
from e2e.box import observed
from e2e.box.management import box_adoption, k3s_charts
from e2e.box.takeover import day_after, doc_script, inspector, owners_lab, scaling
from e2e.box.workload import lab1_state, workload_box
from e2e.controllers import cluster_api
from e2e.engine import control_plane

# The owner's values for the page's placeholders beside the VM's (the site's): the node's storage
# that takes backups, Cilium's chart version W1's `helm list` shows, the autoscaler W1's `helm
# list -A` shows, and the one flag of its values that the program's release would not pass
# (owners_lab.HAND_AUTOSCALER_VALUES).
PLACEHOLDERS = {
    "<your backup storage>": box_adoption.BACKUP_STORAGE,
    "<the running chart version>": workload_box.CILIUM_VERSION,
    "<its namespace>": owners_lab.HAND_AUTOSCALER[0],
    "<its release>": owners_lab.HAND_AUTOSCALER[1],
    "<flag>": "balance-similar-node-groups",
    "<its value>": "true",
    "<the kubeconfigs folder of your inspector>": inspector.TYPED_FOLDER,
}


def _lab(lab: owners_lab.OwnersLab) -> dict[str, Any]:
    """What the owner must find unchanged: the VM's power (a reboot starts it anew), k3s's files
    (a restart rewrites k3s.yaml), lab1's objects and what was made from them, and the hand work
    on them (owners_lab.HAND_WORK)."""
    return {
        "vm": box_adoption._vm_power(lab.box),
        "fingerprints": box_adoption._fingerprints(lab.box),
        "lab1": lab1_state.snapshot(lab.box.cluster, lab.lab1_kubeconfig),
        "hand_work": _hand_work(lab),
    }


def _hand_work(lab: owners_lab.OwnersLab) -> dict[str, Any]:
    """What HAND_WORK set, as the seven objects hold it now: the MachineDeployment's and the
    KubeadmConfigTemplate's annotations and the Cluster's labels that are not the program's or
    kubectl's, and the control plane's clusterConfiguration."""
    objects = lab1_state.objects(lab.box.cluster)

    def metadata(name: str, section: str) -> dict[str, str]:
        found = (objects[name] or {}).get("metadata", {}).get(section) or {}
        return {k: v for k, v in found.items() if not k.startswith(("kubectl.kubernetes.io/", "pulumi.com/"))}

    control_plane = objects[f"kubeadmcontrolplane/{lab1_state.CLUSTER}-control-plane"] or {}
    return {
        "machinedeployment": metadata(f"machinedeployment/{lab1_state.CLUSTER}-workers", "annotations"),
        "cluster": metadata(f"cluster/{lab1_state.CLUSTER}", "labels"),
        "kubeadmconfigtemplate": metadata(f"kubeadmconfigtemplate/{lab1_state.CLUSTER}-worker", "annotations"),
        "clusterConfiguration": control_plane.get("spec", {}).get("kubeadmConfigSpec", {}).get("clusterConfiguration"),
    }


def _typed(lab: owners_lab.OwnersLab) -> list[dict[str, Any]]:
    """The page's lines as run, each with its step, where and the audit log's length before it."""
    typed = []
    values = PLACEHOLDERS | doc_script.vm_values(lab.box.site.vmid, lab.box.site.address)
    for block in doc_script.blocks(until=doc_script.TYPED_UNTIL):
        for line in block.filled(values):
            mark = lab.box.cluster.audit_mark()
            ran = lab.node(line) if block.on_node else lab.laptop(line)
            typed.append({"step": block.step, "on_node": block.on_node, "audit_mark": mark, **ran})
            if ran["rc"]:
                return typed
    return typed


def _helm_controller_in_step_3(lab: owners_lab.OwnersLab, typed: list[dict[str, Any]]) -> dict[str, Any]:
    """What k3s's helm-controller wrote, of the kinds it makes for a chart, from step 3's first
    line to step 4's (each as verb, resource, name), what the garbage collector deleted then, and
    what it had made that is left."""
    marks = {entry["step"].split(".")[0]: entry["audit_mark"] for entry in reversed(typed)}
    kinds = tuple(k3s_charts.MADE_KINDS.split(","))
    found = lab1_state.writes(lab.box.cluster, marks["3"], kinds, until=marks.get("4"))

    def by(user: str) -> list[list[str]]:
        return [[write["verb"], write["resource"], write["name"]] for write in found if write["user"] == user]

    return {
        "writes": by(control_plane.HELM_CONTROLLER_USER),
        "collected": by(control_plane.CONTROLLER_USER),
        "left": lab.k3s_charts.made_for(),
    }


# A bound the owner raises by hand after the takeover, where docs/troubleshooting.md says not to.
HAND_EDIT = f"{scaling.ANNOTATE_WORKERS} {MAX_SIZE_ANNOTATION}=5"


def _hand_edit_after_the_takeover(lab: owners_lab.OwnersLab) -> dict[str, Any]:
    """After W6 the taken-over lab1 is the program's like one it made (issue 54): a hand edit of a
    declared field stops a refreshed preview as a conflict instead of being written over; taken
    off as docs/troubleshooting.md says, a refreshed up writes the setting back."""
    return {
        "edit": lab.laptop(HAND_EDIT),
        # The conflict's lines alone: the preview's whole output ends in the program's traceback.
        "refreshed_preview": lab.laptop("pulumi preview --stack lab --refresh 2>&1 | grep -e 'conflict with'"),
        "taken_off": lab.laptop(f"{scaling.ANNOTATE_WORKERS} {MAX_SIZE_ANNOTATION}-"),
        "refreshed_up": lab.laptop("pulumi up --stack lab --refresh --yes"),
        "no_changes": lab.laptop("pulumi preview --stack lab --expect-no-changes"),
        "max_size": (lab1_state.objects(lab.box.cluster)[f"machinedeployment/{lab1_state.CLUSTER}-workers"] or {})
        .get("metadata", {})
        .get("annotations", {})
        .get(MAX_SIZE_ANNOTATION),
    }


def owners_takeover(root: str) -> dict[str, Any]:
    base, began = Path(root), time.monotonic()
    out: dict[str, Any] = {}
    with owners_lab.running(base) as lab:
        out["made"] = lab.made
        out["setup_seconds"] = round(time.monotonic() - began, 1)
        try:
            out["before"] = _lab(lab)
            out["inspector_before"] = inspector.checks(lab)
            out["typed"] = _typed(lab)
            typed_until = lab.box.cluster.audit_mark()
            out["after"] = _lab(lab)
            out["inspector_after"] = inspector.checks(lab)
            out["written_into_the_clone"] = sorted(
                str(path.relative_to(lab.box.engine.project)) for path in lab.box.engine.project.rglob("*.kubeconfig")
            )
            start = out["typed"][0]["audit_mark"]
            w6 = next((entry["audit_mark"] for entry in out["typed"] if entry["step"].startswith("W6")), None)
            out["writes_before_w6"] = lab1_state.writes(lab.box.cluster, start, until=w6)
            out["writes_from_w6"] = lab1_state.writes(lab.box.cluster, w6, until=typed_until) if w6 is not None else []
            out["helm_controller"] = _helm_controller_in_step_3(lab, out["typed"])
            out["backups"] = lab.node_shell.backups
            out["node_unknown"] = lab.node_shell.unknown
            out["seconds"] = round(time.monotonic() - began, 1)
            if all(entry["rc"] == 0 for entry in out["typed"]):
                out["hand_edit"] = _hand_edit_after_the_takeover(lab)
                out["scaling"] = scaling.exit_criteria(lab)
                out["scaling"]["seconds"] = round(time.monotonic() - began - out["seconds"], 1)
                mark = time.monotonic()
                out["day_after"] = day_after.upgraded_then_recovered(lab)
                out["day_after"]["seconds"] = round(time.monotonic() - mark, 1)
        except Exception:  # what happened so far is the test's to read
            out["failed"] = traceback.format_exc()
        out |= {**observed.standin_problems(lab.box), **lab.k3s_charts.problems()}
        out |= {"lab1_problems": lab.parts.problems()}
        core = cluster_api.core(lab.parts.managers)
        if out.get("failed") and core is not None:
            out["manager_log_tail"] = core.log_tail(30)
    return out
