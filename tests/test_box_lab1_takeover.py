"""lab1 as clusterctl left it, the state issue 31's takeover starts from (e2e/box/workload/clusterctl_lab1.py,
on e2e/box/workload/workload_box.py): the real `clusterctl generate cluster` renders the vendored CAPMOX
template with the owner's clusterctl.yaml, the real `kubectl apply` applies it client-side, the
real Cluster API core and the stand-ins bring up lab1's control plane and its one worker, and the
real `helm` installs Cilium into lab1. At the lab's values and at another site. Selected with
`pytest -m engine`; needs `e2e/engine/build-engine.sh control-plane plugins workload`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from e2e.box.workload import clusterctl_lab1, lab1_takeover
from e2e.engine.control_plane import ADMIN_USER, CLUSTER_API_USER, PROVIDERS_USER
from e2e.engine.netns import in_new_netns

pytestmark = pytest.mark.engine

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
CLIENT_SIDE_APPLY = "kubectl-client-side-apply"


@pytest.fixture(scope="module", params=list(lab1_takeover.RUN_AT))
def lab1(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp(f"lab1-takeover-{request.param}")
    result = in_new_netns(
        "workload.lab1_takeover.lab1_taken_over",
        str(root),
        request.param,
        addresses=clusterctl_lab1.addresses(request.param),
        timeout=1200,
    )
    return {**result, "name": request.param}


def _managers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each field manager's fields of the object, by `manager/operation[/subresource]`."""
    return {
        "/".join(filter(None, (entry["manager"], entry["operation"], entry.get("subresource")))): entry["fieldsV1"]
        for entry in obj["metadata"]["managedFields"]
    }


def test_the_scenario_ran_through_and_the_program_made_the_management_cluster(lab1: Any) -> None:
    assert not lab1.get("failed"), lab1["failed"]
    assert lab1["config_failed"] == []
    assert lab1["mgmt_up"]["rc"] == 0, lab1["mgmt_up"]["error"]
    assert lab1["runner"]["errors"] == []


def test_nothing_was_refused(lab1: Any) -> None:
    assert lab1["problems"] == {
        "operator": [],
        "workload": [],
        "webhook_unknown": [],
        "injector": [],
        "charts_unknown": [],
    }


def test_clusterctl_rendered_the_seven_objects_from_the_owners_variables(lab1: Any) -> None:
    generated, site = lab1["generate"], lab1["site"]
    assert generated["rc"] == 0, generated["stderr"]
    assert generated["args"][:2] == ["generate", "cluster"]
    documents = [doc for doc in generated["stdout"].split("\n---\n") if doc.strip()]
    assert len(documents) == len(clusterctl_lab1.OBJECTS)
    proxmox_cluster = lab1["objects"]["proxmoxcluster/lab1"]["spec"]
    assert proxmox_cluster["controlPlaneEndpoint"] == {"host": site["endpoint"], "port": 6443}
    assert proxmox_cluster["ipv4Config"] == {
        "addresses": site["node_ip_ranges"],
        "prefix": site["ip_prefix"],
        "gateway": site["gateway"],
        # Not rendered: the CRD's default, which the live object holds and a settings diff must not
        # report.
        "metric": 100,
    }
    assert proxmox_cluster["dnsServers"] == site["dns_servers"]
    assert proxmox_cluster["allowedNodes"] == [site["source_node"]]
    for role in ("control-plane", "worker"):
        machine = lab1["objects"][f"proxmoxmachinetemplate/lab1-{role}"]["spec"]["template"]["spec"]
        assert machine == {
            "sourceNode": site["source_node"],
            "templateID": site["template_vmid"],
            "format": "qcow2",
            "full": True,
            "numSockets": site["sockets"],
            "numCores": site["cores"],
            "memoryMiB": site["memory_mib"],
            "disks": {"bootVolume": {"disk": site["boot_volume_device"], "sizeGb": site["boot_volume_gb"]}},
            # The template sets no VLAN: what a setting `vlan` must match at the takeover.
            "network": {"networkDevices": [{"bridge": site["bridge"], "model": "virtio", "name": "net0"}]},
        }
    kcp = lab1["objects"]["kubeadmcontrolplane/lab1-control-plane"]["spec"]
    assert kcp["replicas"] == 1
    assert kcp["version"] == "v1.35.9"
    assert kcp["kubeadmConfigSpec"]["users"] == [{"name": "root", "sshAuthorizedKeys": site["ssh_keys"]}]
    # The template's pod CIDR, which overlaps the lab: as clusterctl left it.
    assert lab1["objects"]["cluster/lab1"]["spec"]["clusterNetwork"]["pods"]["cidrBlocks"] == ["192.168.0.0/16"]


def test_every_object_was_applied_client_side_by_kubectl(lab1: Any) -> None:
    assert lab1["apply"]["rc"] == 0, lab1["apply"]["stderr"]
    for name, obj in lab1["objects"].items():
        assert obj["metadata"]["namespace"] == "default", name
        last_applied = json.loads(obj["metadata"]["annotations"][LAST_APPLIED])
        assert last_applied["metadata"]["name"] == obj["metadata"]["name"], name
        assert f"{CLIENT_SIDE_APPLY}/Update" in _managers(obj), (name, list(_managers(obj)))


def test_the_workers_replicas_are_1_and_owned_by_kubectl(lab1: Any) -> None:
    deployment = lab1["objects"]["machinedeployment/lab1-workers"]
    assert deployment["spec"]["replicas"] == 1
    owners = [key for key, fields in _managers(deployment).items() if "f:replicas" in fields.get("f:spec", {})]
    assert owners == [f"{CLIENT_SIDE_APPLY}/Update"]
    assert json.loads(deployment["metadata"]["annotations"][LAST_APPLIED])["spec"]["replicas"] == 1
    # No autoscaler annotations: clusterctl's template has none.
    assert not [key for key in deployment["metadata"].get("annotations", {}) if "autoscaler" in key]


def test_one_machineset_one_worker_machine_and_both_nodes_ready(lab1: Any) -> None:
    assert len(lab1["machinesets"]) == 1
    assert lab1["machinesets"][0].startswith("lab1-workers-")
    assert len(lab1["machines"]) == 1  # the KCP stand-in makes no control-plane Machine
    assert len(lab1["proxmoxmachines"]) == 1
    roles = sorted(
        "control-plane" if "node-role.kubernetes.io/control-plane" in node["metadata"]["labels"] else "worker"
        for node in lab1["nodes"]
    )
    assert roles == ["control-plane", "worker"]
    # Every write to Cluster API's objects after the apply is the real manager's or a stand-in's.
    assert set(lab1["cluster_api_writes_by"]) <= {ADMIN_USER, CLUSTER_API_USER, PROVIDERS_USER}


def test_cilium_was_installed_by_helm_as_release_cilium_in_kube_system(lab1: Any) -> None:
    [release] = lab1["helm_list"]
    assert (release["name"], release["namespace"], release["revision"], release["status"]) == (
        "cilium",
        "kube-system",
        "1",
        "deployed",
    )
    assert release["chart"] == "cilium-1.18.4"
    assert lab1["helm_values"] == {"ipam": {"mode": "kubernetes"}}
    [record] = lab1["release_secrets"]
    assert record["name"] == "sh.helm.release.v1.cilium.v1"
    assert record["type"] == "helm.sh/release.v1"
    assert record["labels"]["status"] == "deployed"
    assert sorted(node for _, node in lab1["cilium_pods"]) == sorted([n["metadata"]["name"] for n in lab1["nodes"]] * 2)


def test_the_settings_read_back_from_the_live_objects_are_the_owners_variables(lab1: Any) -> None:
    site = lab1["site"]
    sizing = {
        "sockets": site["sockets"],
        "cores": site["cores"],
        "memoryMib": site["memory_mib"],
        "diskGib": site["boot_volume_gb"],
    }
    assert lab1["settings_from_live"] == {
        "name": "lab1",
        "namespace": "default",
        "kubernetesVersion": "v1.35.9",
        "controlPlaneEndpoint": site["endpoint"],
        "nodeIpRanges": site["node_ip_ranges"],
        "ipPrefix": site["ip_prefix"],
        "gateway": site["gateway"],
        "dnsServers": site["dns_servers"],
        "allowedNodes": [site["source_node"]],
        "sshPublicKeys": site["ssh_keys"],
        "sourceNode": site["source_node"],
        "templateVmId": site["template_vmid"],
        "bootVolumeDevice": site["boot_volume_device"],
        "bridge": site["bridge"],
        "vipInterface": site["vip_interface"],
        # clusterctl's template's, which overlaps the lab's 192.168.0.0/16 (spec: traps).
        "podCidr": "192.168.0.0/16",
        "controlPlane": {"replicas": 1, **sizing},
        "workers": sizing,
    }


def test_the_snapshot_holds_what_a_takeover_must_leave_alone(lab1: Any) -> None:
    kinds = sorted({name.split("/")[0] for name in lab1["snapshot"]})
    assert kinds == [
        "cluster",
        "helm-releases",
        "kubeadmconfigs",
        "kubeadmconfigtemplate",
        "kubeadmcontrolplane",
        "machinedeployment",
        "machines",
        "machinesets",
        "nodes",
        "proxmoxcluster",
        "proxmoxmachines",
        "proxmoxmachinetemplate",
    ]
    assert len(lab1["snapshot"]) == 7 + 4 + 2 + 1


def test_before_the_takeover_the_program_refuses_lab1_and_writes_nothing_to_it(lab1: Any) -> None:
    # The live pod CIDR, the template's 192.168.0.0/16, is refused by the settings.
    live = lab1["preview_live_values"]
    assert live["rc"] != 0
    assert "lab-mgmt:workloadClusters[0].podCidr: 192.168.0.0/16 overlaps" in live["error"]
    # With the program's own, the preview stops at the Cluster kubectl made (docs/adoption.md).
    declared = lab1["preview_program_pod_cidr"]
    assert declared["rc"] != 0
    assert "the Cluster default/lab1 exists on the management cluster, made by" in declared["error"]
    refusal = " ".join(declared["error"].split())
    assert "kubectl-client-side-apply" in refusal
    assert "not by this stack (organization/lab-mgmt/lab): it has no lab-mgmt.homelab/stack annotation" in refusal
    assert lab1["changed_by_previews"] == {"appeared": [], "gone": [], "rewritten": []}
    assert [w for w in lab1["writes_by_previews"] if w["user"] == ADMIN_USER] == []


def test_w3_the_gate_refuses_a_vlan_and_another_worker_size_naming_each_field(lab1: Any) -> None:
    assert [step["rc"] for step in lab1["w2"] + lab1["variant_config"] + lab1["fixed_config"]] == [0] * 8
    variant = lab1["variant_gate"]
    assert (variant["preview_rc"], variant["rc"]) == (1, 1)
    named = [
        line.strip() for line in variant["output"].splitlines() if line.strip().startswith("ProxmoxMachineTemplate")
    ]
    memory = lab1["site"]["memory_mib"]
    assert named == [
        "ProxmoxMachineTemplate lab1-control-plane: spec.template.spec.network.networkDevices[0].vlan: "
        "running nothing, the settings render 4",
        f"ProxmoxMachineTemplate lab1-worker: spec.template.spec.memoryMiB: running {memory}, the settings render 8192",
        "ProxmoxMachineTemplate lab1-worker: spec.template.spec.network.networkDevices[0].vlan: "
        "running nothing, the settings render 4",
    ]


def test_w3_with_w1s_values_the_gate_passes_on_imports_and_the_programs_new_objects(lab1: Any) -> None:
    gate = lab1["gate"]
    assert (gate["preview_rc"], gate["rc"]) == (0, 0), gate["output"]
    # The machine templates' resources are named with their spec's digest (the run record maps it
    # to clusterctl's name).
    imported = sorted(
        re.sub(r"-[0-9a-f]{8}$", "-<digest>", op.split(" ", 1)[1]) for op in gate["ops"] if op.startswith("import ")
    )
    assert imported == [
        "lab1-cilium",
        "lab1-cluster",
        "lab1-control-plane",
        "lab1-control-plane-<digest>",
        "lab1-proxmox-cluster",
        "lab1-worker-<digest>",
        "lab1-worker-config",
        "lab1-workers",
    ]
    assert not [op for op in gate["ops"] if op.split(" ", 1)[0] in ("update", "replace", "delete")]


def test_w4_the_adoption_up_imports_and_writes_nothing_to_lab1(lab1: Any) -> None:
    up = lab1["adoption_up"]
    assert up["rc"] == 0, up["error"]
    assert up["summary"]["import"] == 8
    assert "update" not in up["summary"]
    assert "delete" not in up["summary"]
    # No write by the engine to the seven objects or what Cluster API made from them.
    assert lab1["adoption_writes"] == []
    # No MachineSet, Machine or Node appeared or went; nothing rewritten; Cilium's release record
    # still revision 1.
    assert lab1["adoption_changed"] == {"appeared": [], "gone": [], "rewritten": []}
    for name, managers in lab1["managers_after_adoption"].items():
        assert f"{CLIENT_SIDE_APPLY}/Update" in managers, name
        assert not [m for m in managers if m.startswith("pulumi-kubernetes")], name
    assert lab1["md_spec_owners_after_adoption"][f"{CLIENT_SIDE_APPLY}/Update"].count("replicas") == 1
    adopted = json.loads(lab1["adopted_output"])["default/lab1"]
    assert sorted(adopted.values()) == ["lab1-control-plane", "lab1-worker"]


def test_w5_nothing_left_to_change(lab1: Any) -> None:
    assert lab1["w5"]["rc"] == 0, lab1["w5"]["error"]
    assert set(lab1["w5"]["summary"]) <= {"same", "read"}


def test_w6_the_preview_with_adoption_off_passes(lab1: Any) -> None:
    assert lab1["w6_preview"]["rc"] == 0, lab1["w6_preview"]["error"]


def test_w6_adoption_off_updates_metadata_only_and_upgrades_cilium_once(lab1: Any) -> None:
    up = lab1["w6_up"]
    assert up["rc"] == 0, up["error"]
    assert set(up["summary"]) == {"read", "same", "update"}
    changed = lab1["w6_changed"]
    assert changed["appeared"] == ["helm-releases/sh.helm.release.v1.cilium.v2"]
    assert changed["gone"] == []
    # No spec changed: every generation stays (the MachineSet takes the MachineDeployment's new
    # annotations).
    for line in changed["rewritten"]:
        name, _, generations = line.rpartition(" generation ")
        before, after = generations.split("->")
        assert before == after, line
    # pulumi's manager replaces kubectl's; spec.replicas is nobody's but Cluster API's status.
    for name, managers in lab1["managers_after_w6"].items():
        assert f"{CLIENT_SIDE_APPLY}/Update" not in managers, name
    assert not [m for m, fields in lab1["md_spec_owners_after_w6"].items() if "replicas" in fields]
    assert lab1["w6_no_change"]["rc"] == 0, lab1["w6_no_change"]["error"]


# The scaling runs at lab1_takeover.SCALING_SITES only: its test reads those sites' runs.
@pytest.mark.parametrize("lab1", lab1_takeover.SCALING_SITES, indirect=True)
def test_the_autoscaler_scales_1_2_1_and_pulumi_up_stays_a_no_op(lab1: Any) -> None:
    autoscaler = "system:serviceaccount:default:lab1-autoscaler"
    for step in ("scale_up", "scale_down"):
        scales = [
            [w["user"], w["verb"], w["subresource"], w["code"]]
            for w in lab1[step]["writes"]
            if w["subresource"] == "scale"
        ]
        assert scales == [[autoscaler, "patch", "scale", 200]], step
        assert not [w for w in lab1[step]["writes"] if w["user"] == ADMIN_USER], step
    # The drop to one pod removed the new worker's (lab1_adoption_steps._keep_demand_on).
    assert len(lab1["demand_kept_on_first_worker"]) == 1
    assert lab1["workers_at_end"] == {"replicas": 1, "machines": 1, "running": 1, "ready_workers": 1}
    assert [no_change["after"] for no_change in lab1["no_change"]] == ["1 -> 2", "2 -> 1"]
    for no_change in lab1["no_change"]:
        assert no_change["up"]["rc"] == 0, (no_change["after"], no_change["up"]["error"])
        assert set(no_change["up"]["summary"]) <= {"same", "read"}, no_change["after"]
        # Cluster API's status writes go on; the engine writes nothing to the MachineDeployment.
        assert not [w for w in no_change["md_writes"] if w["user"] == ADMIN_USER], no_change["after"]
