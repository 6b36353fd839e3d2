"""The program's lab1 in the box (e2e/box/workload/lab1_autoscaling.py, issue 30's scenario; the
session fixture `lab1_box` of tests/conftest.py), each step through the real CLI, each write read
from the audit logs: the first `pulumi up` makes lab1 at 0 workers with Cilium (after
ControlPlaneInitialized) and the real cluster-autoscaler; demand that fits nowhere is met 0 -> 1
(from zero) -> 3 and, once gone, -> 0 by the real autoscaler through the real Cluster API
controllers; between the steps the program plans nothing and writes nothing; a rotated lab1
kubeconfig restarts the autoscaler at the next `pulumi up`; a Kubernetes upgrade with a worker
running replaces it through the real MachineDeployment controller, its demand rescheduled, the
autoscaler writing nothing; three faults in the scaling path, an annotation edited by hand (at 3),
a Machine that never becomes a Node (at 3 -> 4) and lab1's API server down (at 0), each read as
docs/troubleshooting.md says and each ending converged;
a worker sizing change is a new template and a new MachineSet; and the
control: without the proxmoxmachinetemplates rule no scale-from-zero, while the autoscaler's main
loop waits for the templates it is refused. What the Cluster API core and the autoscaler's process
did beneath: tests/test_box_lab1_cluster_api.py and tests/test_box_lab1_autoscaler.py. Selected with
`pytest -m engine`; needs `e2e/engine/build-engine.sh control-plane plugins workload`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from e2e.box.workload import lab1_controls, lab1_faults, lab1_reads, lab1_rollouts, proxmox_node
from tools import exit_criteria

pytestmark = pytest.mark.engine


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _account(lab1_box: Any) -> str:
    return lab1_reads.Workload.of(lab1_box["entry"]).account


def _scaled_by_the_autoscaler(lab1_box: Any, writes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    account = _account(lab1_box)
    return [w for w in writes if (w["user"], w["verb"], w["subresource"]) == (account, "patch", "scale")]


def test_every_step_ran_and_nothing_was_refused(lab1_box: Any) -> None:
    print("times:", lab1_box["times"])
    assert "failed" not in lab1_box, lab1_box["failed"]
    assert lab1_box["config"] == []
    assert lab1_box["runner"]["errors"] == []
    # The one thing asked of a stand-in that it did not know: the CAPMOX version it does not serve.
    assert lab1_box["problems"] == {
        "operator": [],
        "workload": [],
        "webhook_unknown": [],
        "injector": [],
        "charts_unknown": ["GET /capmox/v0.9.2/cluster-template.yaml"],
        "proxmox_unknown": [],
        "proxmox_failed": [],
    }


def test_the_first_up_makes_lab1_at_zero_with_cilium_after_control_plane_initialized(lab1_box: Any) -> None:
    up = lab1_box["up1"]
    assert (up["rc"], up["error"]) == (0, "")
    assert "HandMadeCluster" not in up["error"]
    assert lab1_box["md_created"]["spec"]["replicas"] == 0
    annotations = lab1_box["md_created"]["metadata"]["annotations"]
    workers = lab1_box["entry"]["workers"]
    assert annotations["capacity.cluster-autoscaler.kubernetes.io/cpu"] == str(workers["sockets"] * workers["cores"])
    assert annotations["capacity.cluster-autoscaler.kubernetes.io/memory"] == f"{workers['memoryMib']}Mi"
    # The engine began Cilium's release only once the Cluster's step was done, and lab1's API
    # server got the release's first write after the condition turned True.
    order = up["order"]
    assert order["cluster_done"][0] < order["cilium_begun"][0], order
    initialized = lab1_box["cluster_conditions"]["ControlPlaneInitialized"]
    assert initialized["status"] == "True"
    first_helm_write = lab1_box["lab1_helm_writes"][0]
    assert first_helm_write[2] == "sh.helm.release.v1.cilium.v1"
    assert _at(initialized["lastTransitionTime"]) <= _at(first_helm_write[0])


def test_between_steps_nothing_is_planned_and_nothing_written(lab1_box: Any) -> None:
    assert [entry["after"] for entry in lab1_box["no_change"]] == [
        "first up",
        "0 -> 1, recovered",
        "upgrade",
        "1 -> 3",
        "3 -> 4",
        "4 -> 0 and lab1 unreachable",
        "sizing change",
        "the template rule back",
    ]
    first = lab1_box["no_change"][0]
    assert first["preview"]["rc"] == 0, first["preview"]["error"]
    for entry in lab1_box["no_change"]:
        assert entry["up"]["action"] == "up --expect-no-changes"
        assert entry["up"]["rc"] == 0, entry["up"]["error"]
        assert entry["up"]["changed"] == [], entry["after"]
        assert entry["up"]["writes"] == [], entry["after"]
        # The record of what rolls (components/rollouts.py) is of the objects as the real API
        # server returned them, defaults and all: after the upgrade and the sizing, nothing more rolls.
        assert [w for w in entry["up"]["warnings"] if "this run rolls" in w] == [], entry["after"]
        # The Cluster API manager's own status updates go on; nobody else writes to it.
        assert {(w["user"], w["subresource"]) for w in entry["md_writes"]} <= {("capi-controller-manager", "status")}


def test_the_autoscaler_scales_from_zero_then_to_three(lab1_box: Any) -> None:
    print("reaction (demand created -> /scale):", lab1_box["reaction"], "s")
    assert len(_scaled_by_the_autoscaler(lab1_box, lab1_box["scale_from_zero"])) == 1
    assert [w for w in lab1_box["scale_from_zero"] if w["user"] == "admin"] == []
    assert _scaled_by_the_autoscaler(lab1_box, lab1_box["scale_up"])
    timelines = lab1_box["timelines"]
    assert timelines["0->1"][-1][0] < lab1_reads.BOUND
    assert [max(value for _, key, value in timelines[step] if key == "nodes") for step in ("0->1", "1->3")] == [1, 3]


def test_at_max_size_the_pod_left_over_stays_pending_and_the_autoscaler_says_why(lab1_box: Any) -> None:
    """docs/troubleshooting.md, "maxSize reached", quotes this event."""
    assert (lab1_box["at_max_size"]["replicas"], lab1_box["at_max_size"]["pending"]) == (3, 1)
    assert any("max node group size reached" in message for message in lab1_box["max_size_reached"])
    print("NotTriggerScaleUp:", lab1_box["max_size_reached"][0])


def test_raising_max_size_gives_the_pod_taken_back_its_worker(lab1_box: Any) -> None:
    config, up = lab1_box["max_size_raised"]
    assert (config["rc"], up["rc"]) == (0, 0), up["error"]
    last = {key: value for _, key, value in lab1_box["timelines"]["3->4"]}
    assert (last["replicas"], last["nodes"], last["scheduled"], last["pending"]) == (4, 4, 4, 0)


def test_spec_replicas_is_never_pulumis(lab1_box: Any) -> None:
    # pulumi's managers own what the program sends, never spec.replicas: its create (a POST under
    # the static `pulumi-kubernetes`, 4.29 and later) and its updates' server-side apply (under
    # `pulumi-kubernetes-<random>`); the autoscaler's writes through /scale of a custom resource
    # leave no managed-fields entry (the audit log has them).
    for managers in (lab1_box["managers_at_3"], lab1_box["managers_at_0"]):
        pulumis = [manager for manager in managers if manager.split("/")[0].startswith("pulumi-kubernetes")]
        assert pulumis, managers
        for pulumi in pulumis:
            assert "replicas" not in managers[pulumi], managers


def test_without_demand_it_scales_down_to_zero(lab1_box: Any) -> None:
    assert _scaled_by_the_autoscaler(lab1_box, lab1_box["scale_down"])
    last = {key: value for _, key, value in lab1_box["timelines"]["4->0"]}
    assert (last["replicas"], last["machines"], last["nodes"]) == (0, 0, 0)


def test_the_timeline_of_a_scale_up_and_a_scale_down(lab1_box: Any) -> None:
    for step in ("0->1", "4->0"):
        print(step)
        for seconds, key, value in lab1_box["timelines"][step]:
            print(f"  {seconds:6.1f}s  {key} = {value}")


def test_a_kubernetes_upgrade_is_named_at_preview_then_rolls_the_running_worker(lab1_box: Any) -> None:
    upgrade = lab1_box["upgrade"]
    assert [step["rc"] for step in upgrade["config"]] == [0, 0], upgrade["config"]
    name = f"{lab1_box['entry']['namespace']}/{lab1_box['entry']['name']}"
    preview = upgrade["preview"]
    assert preview["rc"] == 0, preview["error"]
    assert any(f"{name}: this run rolls its control plane and its workers" in w for w in preview["warnings"]), preview[
        "warnings"
    ]
    assert upgrade["up"]["rc"] == 0, upgrade["up"]["error"]
    print("upgrade:", upgrade["seconds"], "s")
    for seconds, key, value in upgrade["timeline"]:
        print(f"  {seconds:6.1f}s  {key} = {value}")
    # The one worker there was, replaced by one at the new version on a Node of its own.
    [(old_machine, old_version, old_node)] = upgrade["before"]["machines"]
    assert old_version == lab1_box["entry"]["kubernetesVersion"]
    [(machine, version, node)] = upgrade["after"]["machines"]
    assert (version, machine != old_machine, node != old_node) == (lab1_rollouts.UPGRADE_TO, True, True)
    assert upgrade["after"]["nodes"] == [[node, lab1_rollouts.UPGRADE_TO]]
    # Cluster API drained the old worker before deleting it and its Node (its log says so, in that
    # order): the demand pod was evicted and made again on the new worker.
    assert upgrade["deletion"] == list(lab1_rollouts.DELETION), upgrade["deletion"]
    assert [pod[1:] for pod in upgrade["pods_before"]] == [[old_node, "Running"]]
    assert [pod[1:] for pod in upgrade["pods_after"]] == [[node, "Running"]]
    assert upgrade["pods_after"][0][0] != upgrade["pods_before"][0][0]
    # One at a time: one worker above the count while it rolls (maxSurge 1), then the count again
    # (the one Machine after it, above).
    timeline = upgrade["timeline"]
    assert max(value for _, key, value in timeline if key == "machines") == 2, timeline
    # The autoscaler did not fight the rollout: the new worker was never empty, the count stayed
    # at one, and the autoscaler wrote nothing.
    assert [value for _, key, value in timeline if key == "replicas"] == [1], timeline
    account = lab1_reads.Workload.of(lab1_box["entry"]).account
    assert [w for w in upgrade["md_writes"] if w["user"] == account] == [], upgrade["md_writes"]


def test_the_upgrade_rolls_the_control_plane_one_machine_more_first(lab1_box: Any) -> None:
    """The KubeadmControlPlane stand-in rolls as KCP does with maxSurge 1: a new control-plane
    Machine at the new version joins with a VM and an address of its own, then Cluster API drains
    and deletes the old one and its Node. (lab1's API server itself is the box's one process at the
    VIP; what a real control plane adds is in docs/operations.md.)"""
    upgrade = lab1_box["upgrade"]
    control = upgrade["control_plane"]
    print("system pods before:", upgrade["system_pods_before"], "\nafter:", upgrade["system_pods_after"])
    [(old, old_version, old_node, _)] = control["before"]["machines"]
    assert old_version == lab1_box["entry"]["kubernetesVersion"]
    assert control["before"]["nodes"] == [[old_node, old_version]]
    [(new, version, node, deleting)] = control["after"]["machines"]
    assert (new != old, version, node != old_node, deleting) == (True, lab1_rollouts.UPGRADE_TO, True, False)
    assert control["after"]["nodes"] == [[node, lab1_rollouts.UPGRADE_TO]]
    assert control["deletion"] == list(lab1_rollouts.DELETION), control["deletion"]
    # version, replicas, upToDateReplicas, readyReplicas
    assert control["status"] == [lab1_rollouts.UPGRADE_TO, 1, 1, 1]
    # The control plane first: the real MachineSet controller held the new worker back while the
    # KubeadmControlPlane's lowest Machine was at the old version.
    kcp = f"KubeadmControlPlane {lab1_box['entry']['namespace']}/{lab1_box['entry']['name']}-control-plane"
    held = upgrade["workers_held"]
    assert f'{kcp} is upgrading ("ControlPlaneIsStable" preflight check failed)' in held, held
    # What ran on the old control plane runs again on a Node that is there.
    nodes = {name for name, _ in [*control["after"]["nodes"], *upgrade["after"]["nodes"]]}
    assert all(pod[1] in nodes and pod[2] == "Running" for pod in upgrade["system_pods_after"]), upgrade[
        "system_pods_after"
    ]


def test_an_annotation_edited_by_hand_stops_a_refreshed_run_until_taken_off(lab1_box: Any) -> None:
    """docs/troubleshooting.md, "`pulumi preview` shows a change after the autoscaler scaled"."""
    edit, cluster = lab1_box["edited_by_hand"], lab1_reads.Workload.of(lab1_box["entry"])
    workers = cluster.workers
    print("plain preview:", edit["plain_preview"]["summary"], "\nwith --refresh:", *edit["refreshed_preview"]["errors"])
    # The state's object is what pulumi-kubernetes diffs against: the edit is not seen.
    assert edit["hand"] != edit["declared"]
    assert edit["plain_preview"]["rc"] == 0, edit["plain_preview"]["error"]
    # Read into the state, the program's apply would take the field from kubectl's manager, which
    # it does not force: the preview stops, naming both and the field.
    refreshed = edit["refreshed_preview"]
    assert refreshed["rc"] != 0
    assert any(
        "server-side apply field conflict" in error
        and 'conflict with "kubectl-annotate"' in error
        and f".metadata.annotations.{lab1_faults.MIN_SIZE}" in error
        and f"{cluster.namespace}/{workers}" in error
        for error in refreshed["errors"]
    ), refreshed["errors"]
    # Taken off by hand, the setting is written back by the refreshed up, to that object alone.
    assert edit["taken_off"] is None
    up = edit["refreshed_up"]
    assert up["rc"] == 0, up["error"]
    assert [step["urn"].rsplit("::", 1)[-1] for step in up["changed"] if step["op"] == "update"] == [workers]
    assert {tuple(write) for write in up["writes"]} == {("patch", "machinedeployments", workers)}
    assert edit["after"] == edit["declared"]


# How lab1 was down: what the running autoscaler's lease renewal got, and whether its restarts
# exited too while it was down. Its API server stopped, every dial is refused at once; its VIP
# held by no host, the open connection stops answering, and a restart's dial would wait out 30 s,
# so lab1 comes back after the first exit.
UNREACHABLE = {
    "unreachable": ("connect: connection refused", True),
    "vip_held_nowhere": ("context deadline exceeded", False),
}


@pytest.mark.parametrize("how", UNREACHABLE)
def test_with_lab1_unreachable_the_autoscaler_exits_until_lab1_is_back_then_stays_up(lab1_box: Any, how: str) -> None:
    """docs/troubleshooting.md, "The autoscaler cannot reach lab1", quotes what it said."""
    fault = lab1_box[how]
    renewal, restarts_exit = UNREACHABLE[how]
    first, *restarts, last = fault["said"]
    print(
        f"exited {fault['exited_in']} s after lab1 went ({how}); down {fault['down_for']} s;",
        f"reached again {fault['reached_again_in']} s after it was back",
        *fault["pods"],
        sep="\n",
    )
    for said in fault["said"]:
        print("---", *said[-3:], sep="\n")
    # Its leader lease lives in lab1: without its renewal, it exits.
    lease = f"{fault['endpoint']}/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cluster-autoscaler"
    assert any(lease in line and renewal in line for line in first), first
    assert any(line.startswith("F") and line.endswith("lost master") for line in first)
    # Each restart while lab1 did not answer exits at once, naming lab1's address.
    assert bool(restarts) == restarts_exit
    for said in restarts:
        [fatal] = [line for line in said if line.startswith("F")]
        assert "Failed to get nodes from apiserver" in fatal
        assert f"dial tcp {fault['endpoint']}: {renewal}" in fatal
    # Back, the next one stays up and writes its status in lab1 at its first scan.
    assert not any(line.startswith("F") for line in last)
    assert set(fault["runner_events"]) == {"exited", "started"}
    assert fault["runner_events"][-1] == "started"
    before, after = fault["status_written"]
    assert before != after


def test_with_lab1s_api_server_stopped_a_change_of_the_management_clusters_goes_through(lab1_box: Any) -> None:
    """A provider bump or a token rotation of the management cluster must not wait on lab1 (issue
    55): CAPMOX's token rotated while lab1's API server is stopped previews and applies (one `pulumi
    up`), changing the management cluster's objects alone."""
    ran = lab1_box["unreachable"]["ran_while_down"]
    print(ran["up"]["warnings"])
    assert ran["config"] == 0
    assert ran["up"]["rc"] == 0, ran["up"]["error"]
    changed = {(s["op"], s["urn"].rsplit("::", 1)[1]) for s in ran["up"]["changed"]}
    assert ("update", "mgmt-infrastructure-proxmox") in changed, changed
    assert {name for _, name in changed} <= {"mgmt-infrastructure-proxmox", "mgmt-capmox-credentials"}, changed


def test_a_machine_that_never_becomes_a_node_holds_the_scale_up_until_it_is_deleted(lab1_box: Any) -> None:
    """docs/troubleshooting.md, "A Machine never becomes a Node", quotes what the box printed."""
    fault, account = lab1_box["never_a_node"], _account(lab1_box)
    held, grown = fault["held"], lab1_box["entry"]["workers"]["maxSize"] + 1
    print(f"clone failed {fault['failed_in']} s after the pod came back", *held["machines"], sep="\n")
    print(*held["autoscaler_lines"], sep="\n")
    said = lab1_reads.conditions(held["proxmox_machine"])["VirtualMachineProvisioned"]
    config = f"nodes/{held['proxmox_machine']['spec']['sourceNode']}/qemu-server/{fault['template']}.conf"
    assert (said["status"], said["reason"]) == ("False", "CloningFailed")
    assert said["message"] == f"unable to find vm template: 500 Configuration file '{config}' does not exist"
    # The Machine waits for its infrastructure, with no Node; the autoscaler counts it as the
    # worker on its way and adds no other while its scans go by.
    assert held["machine"]["status"]["phase"] == "Provisioning"
    assert "nodeRef" not in held["machine"]["status"]
    assert held["sample"] == {
        "replicas": grown,
        "machines": grown,
        "machines_with_node": grown - 1,
        "nodes": grown - 1,
        "pending": 1,
        "scheduled": grown - 1,
    }
    assert any("upcoming" in line for line in held["autoscaler_lines"])
    # The owner's preview meanwhile stops on the program's own check, before it plans anything.
    node = held["proxmox_machine"]["spec"]["sourceNode"]
    assert held["preview"]["rc"] != 0
    assert (
        f"lab-mgmt:workloadClusters[0].templateVmId: there is no VM {fault['template']} on node {node}"
        in held["preview"]["error"]
    ), held["preview"]["error"]
    # The template back, the real CAPMOX v0.9.0 clones again, but that machine keeps its
    # CloningFailed reason, which no later step starts from: the VM stays as the template made it,
    # stopped, with no cloud-init ISO, while CAPMOX reports it provisioned. No Node comes of it.
    stuck = fault["stuck"]
    print("the template back:", stuck["vm"], stuck["machine"]["status"]["conditions"], sep="\n")
    said = lab1_reads.conditions(stuck["proxmox_machine"])["VirtualMachineProvisioned"]
    assert (said["status"], said["reason"], stuck["proxmox_machine"]["status"]["vmStatus"]) == (
        "True",
        "Provisioned",
        "ready",
    )
    assert stuck["vm"]["status"] == "stopped"
    assert "ide0" not in stuck["vm"]
    # As the template left it, at any site: its sizing and NIC (no VLAN), no address tag.
    template = (proxmox_node.TEMPLATE_CORES, proxmox_node.TEMPLATE_MEMORY_MIB)
    assert (stuck["vm"]["cores"], stuck["vm"]["memory"]) == template
    assert "tag=" not in stuck["vm"]["net0"]
    assert "tags" not in stuck["vm"]
    assert "nodeRef" not in stuck["machine"]["status"]
    # The first clone after the template came back lost its answer: that VM has the machine's name
    # and an id CAPMOX never recorded, and stays, stopped, when the Machine goes.
    lost = _lost_clone(fault)
    assert stuck["answers_lost"] == 0
    assert stuck["named_so"][lost]["status"] == "stopped"
    assert fault["named_so_after"] == {lost: stuck["proxmox_machine"]["metadata"]["name"]}
    # Deleted as the page says, the Machine's replacement became the Node the pod left over runs
    # on; the autoscaler scaled once for it all.
    last = {key: value for _, key, value in fault["after_machine_deleted"]}
    assert (last["machines_with_node"], last["pending"]) == (grown, 0)
    assert [w["subresource"] for w in fault["scaled"] if w["user"] == account] == ["scale"]


def _lost_clone(fault: dict[str, Any]) -> str:
    """The VMID of the clone whose answer was lost in never_a_node: named as the stuck machine, not
    the id its ProxmoxMachine recorded."""
    recorded = str(fault["stuck"]["proxmox_machine"]["spec"]["virtualMachineID"])
    [lost] = [str(vmid) for vmid in fault["stuck"]["named_so"] if vmid != recorded]
    return lost


def test_at_zero_the_exit_criteria_name_the_vm_whose_clone_answer_was_lost_and_make_nothing(lab1_box: Any) -> None:
    stray, lost = lab1_box["stray"], _lost_clone(lab1_box["never_a_node"])
    print(stray["out"], stray["err"], sep="\n")
    # Read with the auditor's token alone, the one VM that no ProxmoxMachine holds is that clone.
    assert list(stray["strays"]) == [lost]
    name, node = stray["strays"][lost], lab1_box["entry"]["sourceNode"]
    assert stray["rc"] == exit_criteria.REFUSED, stray["err"]
    assert f"VM {lost} {name} on {node} (stopped): a worker's VM that no ProxmoxMachine holds" in stray["err"]
    assert f"qm destroy {lost} --purge" in stray["err"]
    assert stray["report"]["exit"] == exit_criteria.REFUSED
    assert stray["made"] is None
    # Destroyed as the line says, the node holds the templates and lab1's control plane alone.
    assert lost not in stray["vms_after"]
    assert set(stray["vms_after"]) == set(lab1_box["vms_after"]) - {lost}


def test_a_worker_sizing_change_is_a_new_template_repointed_then_the_old_deleted(lab1_box: Any) -> None:
    assert lab1_box["resize"]["rc"] == 0, lab1_box["resize"]["error"]
    writes = [(verb, resource) for verb, resource, _, _ in lab1_box["resize_writes"]]
    # The new template first (a create is a POST), then the MachineDeployment (the provider's
    # apply, and its field-manager fix-up), the old template last.
    assert writes[0] == ("create", "proxmoxmachinetemplates"), writes
    assert writes[-1] == ("delete", "proxmoxmachinetemplates"), writes
    assert set(writes[1:-1]) == {("patch", "machinedeployments")}, writes
    created, deleted = lab1_box["resize_writes"][0][2], lab1_box["resize_writes"][-1][2]
    assert created != deleted
    assert lab1_box["md_resized"]["spec"]["template"]["spec"]["infrastructureRef"]["name"] == created
    assert deleted not in lab1_box["templates"]
    assert len(lab1_box["machinesets"]["new"]) == 1


def test_a_rotated_kubeconfig_restarts_the_autoscaler_at_the_next_up(lab1_box: Any) -> None:
    assert lab1_box["rotated_secret"]
    up = lab1_box["rotation_up"]
    assert up["rc"] == 0, up["error"]
    assert [
        step["op"] for step in up["changed"] if step["urn"].endswith(f"::{lab1_box['entry']['name']}-autoscaler")
    ] == ["update"]
    events = lab1_box["rotation_events"]
    started = [e for e in events if e["event"] == "started"]
    stopped = [e for e in events if e["event"] == "stopped"]
    assert started
    assert stopped
    assert started[0]["uid"] != stopped[0]["uid"]


def test_control_without_the_template_rule_no_scale_from_zero(lab1_box: Any) -> None:
    control = lab1_box["control"]
    assert control["forbidden"], control
    # Once the demand was pending, the autoscaler retried the list it is refused, again and again;
    # its main loop, which the pending pod would have started again at once, ran once and
    # waits for the templates' cache, which nothing refused can fill: no scale-up can come.
    assert control["refusals_after_pending"] >= lab1_controls.CONTROL_REFUSALS
    assert control["main_loops"] == 1
    assert control["waiting_for_templates"]
    assert (control["replicas"], control["pending_at_end"]) == (0, 1)
    assert [w for w in control["scales"] if w["user"] == _account(lab1_box)] == []


def test_with_the_rule_back_the_same_autoscaler_scales_from_zero(lab1_box: Any) -> None:
    """docs/troubleshooting.md, "`forbidden` on proxmoxmachinetemplates": the release rolled back
    to its own revision renders the Role with the rule again, and nothing else is needed."""
    back = lab1_box["control"]["rule_back"]
    print(f"helm rollback to revision {back['revision']}:", back["rollback"]["stdout"].strip())
    for seconds, key, value in back["timeline"]:
        print(f"  {seconds:6.1f}s  {key} = {value}")
    assert back["rollback"]["rc"] == 0, back["rollback"]["stderr"]
    assert "Rollback was a success" in back["rollback"]["stdout"]
    assert back["rule_restored"]
    # The refused process itself synced the templates at its informer's next retry: no restart.
    assert "started" not in back["runner_events"], back["runner_events"]
    assert [w["subresource"] for w in back["scales"] if w["user"] == _account(lab1_box)] == ["scale"]
    # The zero-change run after it (test_between_steps_nothing_is_planned_and_nothing_written):
    # the rollback left nothing for the program to change.
