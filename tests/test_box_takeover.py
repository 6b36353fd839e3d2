"""The owner's takeover, word for word (issue 40; e2e/box/takeover/journey.py): the lab as its owner
runs it today (the playbook's management cluster, lab1 made with clusterctl running two workers,
Cilium and a cluster-autoscaler installed by hand), and docs/adoption.md's commands typed on it as
they stand, with Pulumi.lab.yaml as shipped, from the backup of step 1 to W7's read-only
kubeconfigs. The owner must find nothing rebooted, restarted or replaced, nothing written to
lab1's objects before W6, and the inspector answering before and after."""

from __future__ import annotations

import itertools
import signal
from datetime import datetime
from typing import Any

import pytest

from components.readonly_access import ACCOUNT
from components.settings.workload import MAX_SIZE_ANNOTATION
from e2e.box.management import k3s_charts
from e2e.box.takeover import day_after, doc_script, inspector, owners_lab, scaling
from e2e.box.workload import lab1_box, lab1_state
from e2e.engine.cli import REPO
from e2e.engine.control_plane import CLUSTER_API_USER, PROVIDERS_USER
from e2e.engine.netns import in_new_netns
from e2e.standins.cluster import playbook_lab

pytestmark = pytest.mark.engine
LINES = [line for block in doc_script.blocks(until=doc_script.TYPED_UNTIL) for line in block.lines]
# Who writes to lab1's objects on their own: Cluster API's manager and the workload stand-ins. Every
# other writer is the laptop: the engine (k3s's admin), kubectl and helm (the owner's admin).
CONTROLLERS = {CLUSTER_API_USER, PROVIDERS_USER}


def _by_the_laptop(writes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [write for write in writes if write["user"] not in CONTROLLERS]


@pytest.fixture(scope="module")
def takeover(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("takeover")
    return in_new_netns(
        "takeover.journey.owners_takeover", str(root), addresses=list(lab1_box.ADDRESSES), timeout=2400, longest=True
    )


def _failed(takeover: dict[str, Any]) -> str:
    last = (takeover.get("typed") or [{}])[-1]
    return (
        takeover.get("failed") or f"{last.get('line')}: rc {last.get('rc')}\n{last.get('stdout')}\n{last.get('stderr')}"
    )


def test_the_lab_starts_as_its_owner_runs_it(takeover: Any) -> None:
    made = takeover["made"]
    assert made["hand_autoscaler"]["rc"] == 0, made["hand_autoscaler"]
    assert made["site"]["workers"] == 2
    assert len(made["machines"]) == 3  # the control plane's and the workers'
    assert [release["name"] for release in made["helm_list"]] == ["cilium"]


def test_the_owners_hand_work_is_on_lab1(takeover: Any) -> None:
    assert [done["rc"] for done in takeover["made"]["hand_work"]] == [0] * len(owners_lab.HAND_WORK)
    hand_work = takeover["before"]["hand_work"]
    assert hand_work["machinedeployment"]["capacity.cluster-autoscaler.kubernetes.io/labels"] == "disk=ssd"
    # And the capacity annotations the owner added to the manifest before applying it.
    for key, value in owners_lab.SITE.deployment_annotations:
        assert hand_work["machinedeployment"][key] == value, key
    assert hand_work["cluster"]["site"] == "home"
    assert hand_work["kubeadmconfigtemplate"] == {"lab.home/phase": "1"}
    assert hand_work["clusterConfiguration"] == {
        "apiServer": {"extraArgs": [{"name": "audit-log-maxage", "value": "30"}]}
    }


def test_the_hand_work_is_kept_through_the_takeover_and_the_control_plane_keeps_its_generation(
    takeover: Any,
) -> None:
    """Step 5's preview named each field with the line that keeps it, the page collected them
    and ran them; W6 then took kubectl's fields without removing any (issue 54)."""
    before, after = takeover["before"], takeover["after"]
    assert {
        key: value
        for key, value in after["hand_work"]["machinedeployment"].items()
        if key in before["hand_work"]["machinedeployment"]
    } == before["hand_work"]["machinedeployment"]
    for part in ("cluster", "kubeadmconfigtemplate", "clusterConfiguration"):
        assert after["hand_work"][part] == before["hand_work"][part], part
    control_plane = f"kubeadmcontrolplane/{lab1_state.CLUSTER}-control-plane"
    assert after["lab1"][control_plane]["generation"] == before["lab1"][control_plane]["generation"]
    keep = [
        entry for entry in takeover["typed"] if entry["line"].startswith("cat ") and "lab1-keep.sh" in entry["line"]
    ]
    assert len(keep) == 1
    # The label hint, the label, the template's annotation and the API server flag's name and value.
    assert keep[0]["stdout"].count("keptFields") == 5, keep[0]["stdout"]


def test_every_line_of_the_page_ran_as_typed_and_none_failed(takeover: Any) -> None:
    typed = takeover.get("typed", [])
    assert [entry["line"] for entry in typed if entry["rc"]] == [], _failed(takeover)
    assert len(typed) == len(LINES), _failed(takeover)


def test_both_gates_passed_and_the_last_previews_found_nothing_to_change(takeover: Any) -> None:
    typed = takeover["typed"]
    gates = [entry for entry in typed if entry["line"].startswith(".venv/bin/python tools/adoption_check.py")]
    assert [entry["rc"] for entry in gates] == [0, 0]
    no_changes = [entry for entry in typed if entry["line"].endswith("--expect-no-changes")]
    assert [entry["step"].split(".")[0] for entry in no_changes] == ["6", "W6"]


def test_the_node_made_one_backup_and_knew_every_command(takeover: Any) -> None:
    assert len(takeover["backups"]) == 1
    assert takeover["backups"][0].startswith("local:backup/vzdump-qemu-201-")
    assert takeover["node_unknown"] == []


def test_nothing_rebooted_and_k3s_did_not_restart(takeover: Any) -> None:
    assert takeover["after"]["vm"] == takeover["before"]["vm"]
    assert takeover["after"]["fingerprints"] == takeover["before"]["fingerprints"]


def test_no_machineset_machine_or_node_of_lab1_was_replaced(takeover: Any) -> None:
    def identities(state: dict[str, Any]) -> dict[str, str]:
        return {
            name: found["uid"]
            for name, found in state["lab1"].items()
            if name.split("/")[0] in ("machinesets", "machines", "nodes")
        }

    before = identities(takeover["before"])
    assert len([name for name in before if name.startswith("machines/")]) == 3  # the control plane's and 2 workers'
    assert identities(takeover["after"]) == before


def test_nothing_wrote_to_lab1s_objects_before_w6(takeover: Any) -> None:
    """Cluster API's controllers and the workload stand-ins go on writing status; the laptop's
    tools write nothing to lab1's objects, nor to what Cluster API made from them."""
    assert _by_the_laptop(takeover["writes_before_w6"]) == []


def test_w6_writes_only_the_seven_objects_and_no_replicas(takeover: Any) -> None:
    writes = _by_the_laptop(takeover["writes_from_w6"])
    assert writes, "W6 applies the program's fields"
    seven = {f"{kind}s" for kind, _ in lab1_state.OBJECTS}
    assert {write["resource"] for write in writes} <= seven
    # The worker count stays the autoscaler's: W6 never sends the MachineDeployment's spec.replicas.
    deployment = [w for w in writes if w["resource"] == "machinedeployments"]
    assert deployment
    assert [w for w in deployment if "replicas" in ((w["sent"] or {}).get("spec") or {})] == []


def test_the_stand_ins_knew_every_request(takeover: Any) -> None:
    problems = {key: value for key, value in takeover.items() if key.endswith(("_unknown", "_errors")) and value}
    assert problems == {}
    assert takeover["lab1_problems"] == {"workload": [], "autoscaler_runner": []}


def test_step_3_took_k3s_s_install_jobs_and_their_helpers_with_the_helmcharts(takeover: Any) -> None:
    """As k3s's real helm-controller does when a HelmChart goes (e2e/box/management/k3s_charts.py):
    for each chart, it deleted what it made to install it, and made no helm-delete Job (the
    uninstall the hand-over exists to avoid); the garbage collector then took the Jobs' Completed
    pods, which step 6's pod lists leave out as step 1's do, so its diff prints nothing (every line
    passed above). Nothing it made is left."""
    seen = takeover["helm_controller"]
    expected = sorted(made for chart in playbook_lab.HANDED_OVER for made in k3s_charts.made_for_a_chart(chart))
    assert sorted((resource, name) for verb, resource, name in seen["writes"] if verb == "delete") == expected
    assert [write for write in seen["writes"] if write[0] != "delete"] == []
    pods = {
        name.rsplit("-", 1)[0] for verb, resource, name in seen["collected"] if (verb, resource) == ("delete", "pods")
    }
    assert pods == {f"helm-install-{chart}" for chart in playbook_lab.HANDED_OVER}
    assert seen["left"] == {}


def _account(name: str) -> str:
    return f"system:serviceaccount:kube-system:{name}"


def test_before_the_takeover_the_inspector_answers_through_the_old_accounts_files(takeover: Any) -> None:
    """All but the VM of its map: the old role, as the spec's rbac.yaml has it, reads no group of
    infrastructure.cluster.x-k8s.io, so ProxmoxMachines (and their VM ids) are refused to it."""
    found = takeover["inspector_before"]
    problems = inspector.problems(found)
    refused = [problem for problem in problems if inspector.VM_MAP in problem]
    assert len(refused) == 1
    assert "Forbidden" in refused[0]
    assert [problem for problem in problems if problem not in refused and not problem.startswith("the map:")] == []
    assert {cluster: result["who"] for cluster, result in found.items()} == dict.fromkeys(
        inspector.CONTEXTS, _account(playbook_lab.INSPECTOR)
    )
    assert len(inspector.machine_map(found)) == 3  # the control plane and 2 workers, each with its Node and VM


def test_after_w7_the_inspector_answers_through_the_programs_accounts(takeover: Any) -> None:
    """Through the files in the owner's own repository, where it reads: W7 writes nothing into the
    lab-mgmt clone."""
    assert takeover["written_into_the_clone"] == []
    found = takeover["inspector_after"]
    assert inspector.problems(found) == []
    assert {cluster: result["who"] for cluster, result in found.items()} == dict.fromkeys(
        inspector.CONTEXTS, _account(ACCOUNT)
    )
    # The same Machines on the same Nodes as before, each with its VM's id now.
    nodes = [(machine, node) for machine, node, _ in inspector.machine_map(takeover["inspector_before"])]
    assert [(machine, node) for machine, node, _ in inspector.machine_map(found)] == nodes


def test_the_programs_cilium_gives_its_operator_a_budget_the_autoscaler_can_evict_through(takeover: Any) -> None:
    def budgets(found: dict[str, Any]) -> str:
        return str(found["lab1"]["reads"]["get poddisruptionbudgets -A"]["stdout"])

    assert "cilium-operator" not in budgets(takeover["inspector_before"])
    assert "cilium-operator" in budgets(takeover["inspector_after"])


def _by_the_autoscaler(writes: list[dict[str, Any]]) -> bool:
    """Whether the MachineDeployment's spec was written, and by the program's autoscaler through
    /scale alone (Cluster API's manager writes its status meanwhile)."""
    to_spec = [write for write in writes if write["subresource"] != "status"]
    return bool(to_spec) and all(
        write["user"] == "system:serviceaccount:default:lab1-autoscaler" and write["subresource"] == "scale"
        for write in to_spec
    )


def test_after_the_takeover_a_hand_edit_of_a_declared_field_stops_a_refreshed_run_as_a_conflict(
    takeover: Any,
) -> None:
    """The force was W6's alone (issue 54): kubectl's raised max size is not written over by a
    refreshed run, which stops naming kubectl's manager, until the edit is taken off."""
    edited = takeover["hand_edit"]
    assert edited["edit"]["rc"] == 0, edited["edit"]
    preview = edited["refreshed_preview"]
    assert preview["rc"] != 0
    assert 'conflict with "kubectl-annotate"' in preview["stdout"] + preview["stderr"]
    assert MAX_SIZE_ANNOTATION in preview["stdout"] + preview["stderr"]
    assert [edited[step]["rc"] for step in ("taken_off", "refreshed_up", "no_changes")] == [0, 0, 0]
    assert edited["max_size"] == str(scaling.MAX_SIZE)


def test_after_the_takeover_the_exit_criteria_pass_on_the_lab1_it_took_over(takeover: Any) -> None:
    """`make exit-criteria CLUSTER=lab1` typed as docs/operations.md shows it (issue 56): the
    owner's two workers go to 0 first, then scale-from-zero, 1->3 and 3->0 pass, through the
    autoscaler the program runs, with the box's timings set as an owner sets them; and k3s,
    restarted on the VM from another terminal once the demand is in lab1 (its management API
    server away meanwhile), does not stop it (issue 66)."""
    scaled = takeover["scaling"]
    assert scaled["before"] == {"replicas": 2, "machines": 2, "ready_workers": 2}
    assert [done["rc"] for done in scaled["timings"]] == [0] * len(scaling.TIMINGS)
    assert scaled["timings_up"]["rc"] == 0, scaled["timings_up"]
    typed = scaled["typed"]
    print(typed["stdout"], typed["stderr"], sep="\n")
    assert typed["rc"] == 0
    report = scaled["report"]
    assert [(c["name"], c["passed"]) for c in report["criteria"]] == [
        ("scale-from-zero", True),
        ("scale-up 1->3", True),
        ("scale-down to 0", True),
    ]
    for criterion in report["criteria"]:
        assert 0 < criterion["seconds"] <= criterion["bound"], criterion
    assert "scale-from-zero: passed" in scaled["picture"]
    assert scaled["after"] == {"replicas": 0, "machines": 0, "ready_workers": 0}
    # Typed with the owner's read-only Proxmox token as the page has it: each step counted the
    # workers' VMs, up to 3, and at 0 none was left.
    assert scaling.WITH_PROXMOX in (REPO / "docs" / "operations.md").read_text()
    vms = [value for _, key, value in report["timeline"] if key == "vms"]
    assert max(vms) == 3, report["timeline"]
    assert vms[-1] == 0, report["timeline"]
    restarted = scaled["k3s_restarted"]
    assert restarted["rc"] == 0, restarted
    assert len(restarted["k3s_restarts"]) == 1, restarted
    assert restarted["done_at"] < scaled["seconds"], restarted


def test_the_exit_criteria_refuse_a_lab_that_cannot_prove_them_and_make_nothing(takeover: Any) -> None:
    """min-size 1 is named with the setting that fixes it. On a worker, each of the owner's things
    that the autoscaler would not move is named with its own reason and the kubectl line that
    shows it (issue 66): a worker annotated scale-down-disabled, a bare pod, a pod a ConfigMap
    controls, one annotated safe-to-evict "false", one with an emptyDir, one under a budget the
    real disruption controller counts at 0, one whose node affinity keeps it off the control
    plane; a finished pod, one safe to evict and a kube-system pod (which the program's autoscaler
    moves) are not named. Every criterion fails unrun, everything is left where it runs, nothing
    is made: the command's 2 (make exits 2 whenever its command fails)."""
    refused = takeover["scaling"]["refusals"]
    annotate, typed, put_back = refused["min_size"]
    assert (annotate["rc"], typed["rc"], put_back["rc"]) == (0, 2, 0), typed
    assert "min-size is 1, so scale-from-zero cannot happen: set the entry's workers.minSize to 0" in typed["stderr"]
    blocked, worker = refused["blocked"], refused["worker"]
    print(blocked["stdout"], blocked["stderr"], sep="\n")
    assert blocked["rc"] == 2
    lines = blocked["stdout"].splitlines()
    # Each pod's line, then the kubectl line that shows why: the pod, or the budget it is under.
    named = {
        line.strip().split(" on ", 1)[0]: (line.split(": ", 1)[1], shows.strip())
        for line, shows in itertools.pairwise(lines)
        if f" on {worker}: " in line
    }
    for owners, why in scaling.BLOCKERS.items():
        [pod] = [name for name in named if name.split("/")[1].startswith(owners)]
        reason, shows = named.pop(pod)
        assert reason.startswith(why), (pod, why)
        shown = "poddisruptionbudget -n default owners-budgeted" if "Budget" in why else f"pod -n default {pod[8:]}"
        assert shows.startswith("kubectl --kubeconfig "), shows
        assert f" get {shown}" in shows, (pod, shows)
    assert named == {}, named
    assert f"node {worker}: annotated cluster-autoscaler.kubernetes.io/scale-down-disabled=true" in blocked["stdout"]
    for owners in scaling.NOT_BLOCKERS:
        assert owners not in blocked["stdout"], owners
    pods = refused["pods_after"]
    assert len(pods) == len(scaling.BLOCKERS) + len(scaling.NOT_BLOCKERS), pods
    assert {pod["node"] for pod in pods.values()} == {worker}, pods
    assert blocked["stdout"].count("FAILED") == 3
    assert "Error 2" in blocked["stderr"]
    assert refused["made"] is False


def test_scaling_status_shows_the_node_group_the_autoscaler_and_its_decisions(takeover: Any) -> None:
    """`make scaling-status CLUSTER=lab1` after the run: the node group with its bounds and the
    owner's capacity, the program's autoscaler with the box's timings, its status ConfigMap, and
    the scale-ups and scale-downs it recorded in lab1."""
    shown = takeover["scaling"]["status"]
    print(shown["stdout"], shown["stderr"], sep="\n")
    assert shown["rc"] == 0
    [group] = [line for line in shown["stdout"].splitlines() if line.startswith("  default/lab1-workers: ")]
    assert group.startswith("  default/lab1-workers: min 0, max 3, replicas 0, capacity "), group
    assert {"cpu=8", "memory=16384Mi"} <= set(group.split("capacity ")[1].split(", ")), group
    assert "autoscaler: default/lab1-autoscaler, 1 Ready; scan-interval 5s" in shown["stdout"]
    assert "Health" in shown["stdout"]
    assert "ScaledUpGroup" in shown["stdout"]


def test_a_wrong_memory_annotation_fails_scale_from_zero_on_a_lab_whose_autoscaler_saw_workers(takeover: Any) -> None:
    """Issue 66: with the workers' memory annotation at 32Mi (the demand asks 64Mi), an autoscaler
    that has seen the passing run's workers would plan from their template and scale; the command
    restarts it at 0 first, so scale-from-zero is planned from the annotations, fails at its bound
    (45 s, no margin), the next two are not run, and nothing of the command's stays."""
    wrong = takeover["scaling"]["wrong_memory"]
    assert (wrong["wrong"]["rc"], wrong["put_back"]["rc"]) == (0, 0), wrong
    typed = wrong["typed"]
    print(typed["stdout"], typed["stderr"], sep="\n")
    assert typed["rc"] == 2  # make's, for the command's 1
    assert "Error 1" in typed["stderr"]
    report = wrong["report"]
    assert [(c["name"], c["passed"]) for c in report["criteria"]] == [
        ("scale-from-zero", False),
        ("scale-up 1->3", False),
        ("scale-down to 0", False),
    ]
    from_zero = report["criteria"][0]
    assert from_zero["bound"] == scaling.NEVER_JOINS_BOUND
    assert f"not at 1 workers within {scaling.NEVER_JOINS_BOUND} s" in from_zero["reason"], from_zero
    # The autoscaler was restarted at 0 and Ready again before the demand was made.
    [restart] = report["restarts"]
    assert "failed" not in restart, restart
    assert wrong["namespace_left"] is False
    assert wrong["after"] == {"replicas": 0, "machines": 0, "ready_workers": 0}


def test_a_sigterm_mid_run_writes_the_report_and_leaves_no_demand(takeover: Any) -> None:
    """Issue 66: SIGTERM once the demand is in lab1: the report written with why it stopped, the
    command's namespace removed and checked, the command's exit 3 (make's 2)."""
    stopped = takeover["scaling"]["interrupted"]
    assert stopped["demand"], stopped
    typed = stopped["typed"]
    print(typed["stdout"], typed["stderr"], sep="\n")
    assert typed["rc"] == 2
    assert "Error 3" in typed["stderr"]
    assert "SIGTERM: the run was interrupted" in typed["stderr"]
    report = stopped["report"]
    assert (report["exit"], report["stopped"], report["left"]) == (3, "SIGTERM: the run was interrupted", [])
    assert stopped["namespace_left"] is False


def test_a_closed_terminal_mid_run_still_writes_the_report_and_leaves_no_demand(takeover: Any) -> None:
    """Issue 66: the terminal gone once the demand is in lab1 (nothing reads the command's output,
    SIGHUP to the job's process group): the command, writing to nobody, still writes its report
    with why it stopped, removes its namespace and checks it, and ends with its 3. make (the line
    the shell ran, by exec) died of the hang-up after its child, or of writing its notice to the
    closed terminal first."""
    stopped = takeover["scaling"]["hung_up"]
    assert stopped["demand"], stopped
    assert stopped["shell_exit"] in (-signal.SIGHUP, -signal.SIGPIPE), stopped
    report = stopped["report"]
    assert (report["exit"], report["stopped"], report["left"]) == (3, "SIGHUP: the run was interrupted", [])
    assert stopped["namespace_left"] is False


def test_a_worker_that_never_joins_fails_scale_from_zero_within_its_bound_and_the_demand_goes(
    takeover: Any,
) -> None:
    """The workers' template gone from the node: the first clone fails, scale-from-zero fails
    within max-node-provision-time and three scans (45 s, no margin), the next two are not run,
    and nothing of the command's stays; lab1 is at 0 again once the autoscaler gave the worker up
    (the scenario waits for it)."""
    failed = takeover["scaling"]["never_joins"]
    typed = failed["typed"]
    print(typed["stdout"], typed["stderr"], sep="\n")
    assert typed["rc"] == 2  # make's, for the command's 1
    assert "Error 1" in typed["stderr"]
    # The criteria's table: the name in 20 columns, then the verdict (the milestones' table follows).
    lines = {
        line[:20].strip(): line[21:] for line in typed["stdout"].splitlines() if line[21:27] in ("passed", "FAILED")
    }
    verdict, seconds, bound = lines["scale-from-zero"].split()[:3]
    assert (verdict, float(bound)) == ("FAILED", scaling.NEVER_JOINS_BOUND)
    assert scaling.NEVER_JOINS_BOUND <= float(seconds) < scaling.NEVER_JOINS_BOUND + 10
    assert f"not at 1 workers within {scaling.NEVER_JOINS_BOUND} s" in lines["scale-from-zero"]
    assert "not run: the criterion before it failed" in lines["scale-up 1->3"]
    assert failed["namespace_left"] is False


def test_the_exit_criteria_report_what_the_box_saw_and_leave_nothing_behind(takeover: Any) -> None:
    """Each change of the workers' count in the report goes with one of the autoscaler's writes to
    the MachineDeployment's /scale, which the audit log has, and each such write is seen; the
    command's namespace is gone and the stack has nothing to change."""
    scaled, report = takeover["scaling"], takeover["scaling"]["report"]
    assert _by_the_autoscaler(scaled["writes"]), scaled["writes"]
    writes = [w for w in scaled["writes"] if w["subresource"] == "scale"]
    written = [datetime.fromisoformat(w["at"].replace("Z", "+00:00")).timestamp() for w in writes]
    first = report["timeline"][0][0]  # the first sample, every value as it was
    moves = [report["began"] + stamp for stamp, key, _ in report["timeline"] if key == "replicas" and stamp > first]
    # To 0 first (2 -> 0), from zero (0 -> 1), 1 -> 3, 3 -> 0: one write each at least.
    assert len(moves) >= 4, report["timeline"]

    # A sample is stamped as it begins, and its first read (the count) comes a kubectl start later:
    # up to 2 s on a loaded machine; it comes within --poll's 2 s and a sample's two reads after.
    def seen(moved: float, at: float) -> bool:
        return -2 <= moved - at <= 2.0 + 8

    for moved in moves:
        assert any(seen(moved, at) for at in written), (moved, written)
    for at in written:
        assert any(seen(moved, at) for moved in moves), (at, moves)
    assert scaled["namespace_left"] is False
    assert scaled["no_changes"]["rc"] == 0, scaled["no_changes"]


def test_after_its_upgrade_the_taken_over_lab1_is_recovered_by_naming_its_templates_as_they_run(
    takeover: Any,
) -> None:
    """issue 55 (review 4, finding 2): lab1's Kubernetes upgraded as docs/operations.md says moves
    it off clusterctl's template names; with the state lost, the page typed on the lab (its
    takeover stopped before adoption.md step 8) stops at step 4 naming the templates as lab1 runs
    them, one line each; typed, the recovery goes on to the zero-change preview, and no Machine
    of lab1's is made or replaced."""
    after = takeover["day_after"]
    assert [done["rc"] for done in after["upgrade"]] == [0] * len(after["upgrade"]), after["upgrade"]
    before, rolled = after["before"], after["rolled"]
    assert (before["control_plane"], before["workers"]) == ("lab1-control-plane", "lab1-worker")
    assert rolled["version"] == day_after.UPGRADE_TO
    assert rolled["control_plane"] != before["control_plane"]
    assert rolled["workers"] != before["workers"]
    typed = after["recovery"]["typed"]
    stopped = [done for done in typed if done["rc"]]
    assert [done["line"] for done in stopped] == ["pulumi preview"]
    assert "machine templates rolled since its takeover" in stopped[0]["output"]
    at = typed.index(stopped[0])
    named = [done["line"] for done in typed[at + 1 : at + 3]]
    assert named == [
        f"{day_after.TEMPLATE_NAMES}controlPlane' {rolled['control_plane']}",
        f"{day_after.TEMPLATE_NAMES}worker' {rolled['workers']}",
    ]
    assert typed[at + 3]["line"] == "pulumi preview"  # the same line again, once
    assert [done["rc"] for done in typed[at + 1 :]] == [0] * len(typed[at + 1 :])
    assert typed[-1]["line"] == "pulumi preview --expect-no-changes"
    assert len(typed) == len(day_after.recovery_lines()) + 3
    assert after["after"] == rolled
