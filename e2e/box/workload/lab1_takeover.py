"""Issue 31 in the box (tests/test_box_lab1_takeover.py): lab1 as clusterctl left it, taken over by
the program. On the workload box (e2e/box/workload/workload_box.py) with the real Cluster API core, the
autoscaler's chart and the pod runner as the program's lab1 scenario has them:

1. the program's first `pulumi up` through the real CLI with no workload cluster: the management
   cluster's part (cert-manager, the operator, the providers; the operator stand-in starts the
   real Cluster API manager);
2. the owner's steps (e2e/box/workload/clusterctl_lab1.py): `clusterctl generate cluster lab1` with the
   owner's clusterctl.yaml at one of its SITES, `kubectl apply`, `helm install cilium`, until the
   worker's Machine runs and both Nodes are Ready; the state that leaves, and a snapshot of what
   the takeover must leave alone (e2e/box/workload/lab1_state.py).

    in_new_netns("workload.lab1_takeover.lab1_taken_over", root, site, addresses=clusterctl_lab1.addresses(site))
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from e2e.box.scenarios import _lab_secrets, _readme_first_run, _set_all
from e2e.box.workload import clusterctl_lab1, lab1_adoption_steps, lab1_reads, lab1_state, workload_box
from e2e.engine.cli import Engine, declare_workload_clusters

# The workers' bounds the owner picks (at least the one worker running, W1), and the box's short autoscaler timings
# through the program's own settings (as the program's lab1 scenario sets them).
WORKER_BOUNDS = {"minSize": 1, "maxSize": 3}
TIMINGS = {"scaleDownUnneededTime": "10s", "scaleDownDelayAfterAdd": "5s"}
# Where the box runs this scenario: the lab's lab1 is taken over by the owner's journey, which types
# docs/adoption.md as it stands (e2e/box/takeover/); this one shows the W-steps at the other site,
# the runs the page does not make (the refused variant, previews before the takeover) and, after
# W6, the program's autoscaler scaling the taken-over lab1.
RUN_AT = ("other",)
SCALING_SITES = ("other",)
# What Pulumi.lab.yaml declares (the template's overlaps the lab).
PROGRAM_POD_CIDR = "10.244.0.0/16"


def _before_the_takeover(
    engine: Engine, box: workload_box.WorkloadBox, base: Path, entry: dict[str, Any], out: dict[str, Any]
) -> None:
    """What the program does today with lab1 declared as the live objects say: the live pod CIDR
    (the template's) is refused by the settings; with the program's own pod CIDR the preview stops
    at the Cluster that kubectl made. Neither writes to lab1 (the snapshot unchanged)."""
    mark = len(box.mgmt.audit())
    out["declared"] = declare_workload_clusters(engine, [entry])
    out["preview_live_values"] = lab1_reads.run(engine, box.mgmt, "preview")
    declare_workload_clusters(engine, [entry | {"podCidr": PROGRAM_POD_CIDR}])
    out["preview_program_pod_cidr"] = lab1_reads.run(engine, box.mgmt, "preview")
    out["changed_by_previews"] = lab1_state.changed(
        out["snapshot"], lab1_state.snapshot(box.mgmt, base / "lab1.kubeconfig")
    )
    out["writes_by_previews"] = lab1_state.writes(box.mgmt, mark)


def lab1_taken_over(root: str, site: str) -> dict[str, Any]:
    base, times, began = Path(root), dict[str, float](), time.monotonic()
    out: dict[str, Any] = {}

    def mark(what: str) -> None:
        times[what] = round(time.monotonic() - began, 1)

    with workload_box.running_with_autoscaler(
        base, lab1_reads.LAB1.namespace, lab1_reads.LAB1.autoscaler, backoff_seconds=1.0, secret_sync_seconds=2.0
    ) as (
        box,
        runner,
    ):
        out["problems"] = box.problems()  # the stand-ins' lists, filled as they go

        mark("box up")
        try:
            engine = box.engine()
            config = _readme_first_run(engine, _lab_secrets())
            config.append(_set_all(engine, box.served_settings().items()))
            out["config_failed"] = [step for step in config if step["rc"]]
            out["mgmt_up"] = lab1_reads.run(engine, box.mgmt, "up")
            if out["mgmt_up"]["rc"]:
                raise AssertionError("the program's first pulumi up (the management cluster) failed")
            lab1_reads.until("the Cluster API manager running", lambda: box.managers)
            mark("the program's first up: the management cluster")
            clusterctl_lab1.left_by_the_owner(box, base, clusterctl_lab1.SITES[site], out, mark=mark)
            # The entry the live objects say, with the release clusterctl was given, the owner's
            # bounds and the box's timings.
            entry = out["settings_from_live"] | {
                "templateVersion": clusterctl_lab1.TEMPLATE_RELEASE,
                "autoscaler": TIMINGS,
            }
            entry["workers"] = WORKER_BOUNDS | entry["workers"]
            _before_the_takeover(engine, box, base, entry, out)
            mark("previews with lab1 declared, before the takeover")
            lab1_adoption_steps.adopt(engine, box, base, out)
            mark("W2-W5: the gate refuses the variant, passes; the adoption up; no changes")
            lab1_adoption_steps.adopt_off(engine, box, base, out)
            mark("W6: adoption off")
            if site in SCALING_SITES:
                lab1_adoption_steps.scale(engine, box, base, out)
                mark("the autoscaler: 1 -> 2 -> 1")
        except Exception:  # what happened so far is the test's to read
            out["failed"] = traceback.format_exc()
        out |= {
            "times": times,
            "timeline": box.standins.record.timeline,
            "runner": {"events": runner.events, "errors": runner.errors},
        }
        if out.get("failed") and box.managers:
            out["manager_log_tail"] = box.manager.log_tail(30)
    mark("box down")
    print("times:", times)
    return out
