"""The real Cluster API core beneath the program's lab1 in the box (the scenario of
e2e/box/workload/lab1_autoscaling.py, the session fixture `lab1_box` of tests/conftest.py, on
e2e/box/workload/workload_box.py): the operator stand-in installs each provider's real CRDs from the
upstream archives with their contract labels and starts the real cluster-api-manager v1.12.11;
its webhook defaults the replicas the program leaves out; the real Cluster, MachineDeployment,
MachineSet and Machine controllers make the first worker's chain, whose Node the kubelet stand-in
registers and the real Machine controller finds; lab1 is a second real control plane with its real
scheduler; the real IPAM in-cluster provider gives each machine its address and releases it;
the stand-ins of e2e/standins/workload/ do what cannot run here; and the control:
without its contract label the ProxmoxCluster cannot be resolved. Selected with `pytest -m engine`.
"""

from __future__ import annotations

from typing import Any

import harness
import pytest

from components.settings import SettingsError, config_value, parse_settings
from e2e.box.workload import lab1_controls, lab1_sites, proxmox_node
from e2e.engine.control_plane import ADMIN_USER, CLUSTER_API_USER, PROVIDERS_USER
from e2e.standins.workload import vm_boot

pytestmark = pytest.mark.engine

CONTRACT = "cluster.x-k8s.io/v1beta2"


def _capacity(sizing: dict[str, int]) -> dict[str, str]:
    """What a machine of `sizing` registers: sockets * cores, its memory as the API server writes
    it (4096 MiB as 4Gi), its boot volume, the kubelet's default pods."""
    mib = sizing["memoryMib"]
    memory = f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"
    cpu = str(sizing["sockets"] * sizing["cores"])
    return {"cpu": cpu, "memory": memory, "ephemeral-storage": f"{sizing['diskGib']}Gi", "pods": "110"}


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


def _write(lab1_box: Any, user: str, verb: str, resource: str) -> dict[str, Any] | None:
    """The count of `user`'s writes, their codes and the first's mutating webhooks (or None: none)."""
    found: dict[str, Any] | None = lab1_box["cluster_api_writes"].get(f"{user} {verb} {resource}")
    return found


def test_the_operator_installs_the_real_crds_with_their_contract_labels(lab1_box: Any) -> None:
    beneath = lab1_box["beneath"]
    applied = {entry["kind"]: entry["crds"] for entry in beneath["crds_applied"]}
    # The core first, as the operator installs it: the IPAM manager exits without its IPAddress CRDs.
    assert next(iter(applied)) == "CoreProvider"
    assert len(applied["CoreProvider"]) == 13
    assert "machinedeployments.cluster.x-k8s.io" in applied["CoreProvider"]
    assert applied["InfrastructureProvider"] == [
        f"{plural}.infrastructure.cluster.x-k8s.io"
        for plural in ("proxmoxclusters", "proxmoxclustertemplates", "proxmoxmachines", "proxmoxmachinetemplates")
    ]
    # The IPAM provider's, from the module the box's manager is built from (e2e/controllers/ipam.py).
    assert sorted(applied["IPAMProvider"]) == [
        f"{scope}{kind}pools.ipam.cluster.x-k8s.io"
        for scope in ("globalincluster", "incluster")
        for kind in ("ip", "prefix")
    ]
    labels = beneath["crd_labels"]
    assert labels["kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io"][CONTRACT] == "v1beta2"
    # Upstream's core CRDs carry no contract label: core kinds are never resolved by contract.
    assert CONTRACT not in labels["machinedeployments.cluster.x-k8s.io"]
    assert beneath["manager_ready_seconds"] < 60


def test_the_real_webhook_defaults_replicas_to_the_min_size(lab1_box: Any) -> None:
    # The program leaves replicas out (pulumi never owns them: test_box_lab1_autoscaling.py);
    # the webhook set them to the group's min size when the engine created the MachineDeployment.
    created = lab1_box["md_created"]
    assert created["spec"]["replicas"] == 0
    assert created["metadata"]["annotations"]["cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"] == "0"
    create = _write(lab1_box, ADMIN_USER, "create", "machinedeployments")
    assert create is not None
    assert (create["codes"], create["mutated_by"]) == ([201], ["default.machinedeployment.cluster.x-k8s.io"])
    assert {
        "MutatingWebhookConfiguration/capi-mutating-webhook-configuration",
        "ValidatingWebhookConfiguration/capi-validating-webhook-configuration",
    } <= set(lab1_box["beneath"]["webhook_configurations"])
    assert lab1_box["v1beta1_requests"] == {}, "something asked for v1beta1: the CRDs need their conversion webhook"


def test_the_programs_kubeadm_objects_go_through_the_real_kubeadm_webhooks(lab1_box: Any) -> None:
    """issue 57: the kubeadm control-plane manager runs for its webhooks alone (its controller idle
    behind a watch filter no object carries), the bootstrap, IPAM and CAPMOX managers whole, and
    the program's KubeadmControlPlane and KubeadmConfigTemplate were created through upstream's
    defaulting."""
    processes = {line.split()[0]: line for line in lab1_box["beneath"]["manager_processes"]}
    whole = (
        "cluster-api-manager",
        "kubeadm-bootstrap-manager",
        "cluster-api-ipam-in-cluster-manager",
        "capmox-manager",
    )
    assert set(processes) == {"kubeadm-control-plane-manager", *whole}
    assert "--watch-filter=lab-mgmt-webhooks-only" in processes["kubeadm-control-plane-manager"]
    for binary in whole:
        assert "--watch-filter" not in processes[binary], processes[binary]
    assert {
        f"{kind}/capi-kubeadm-{provider}-{what}-webhook-configuration"
        for provider in ("control-plane", "bootstrap")
        for kind, what in (
            ("MutatingWebhookConfiguration", "mutating"),
            ("ValidatingWebhookConfiguration", "validating"),
        )
    } <= set(lab1_box["beneath"]["webhook_configurations"])
    control_plane = _write(lab1_box, ADMIN_USER, "create", "kubeadmcontrolplanes")
    assert control_plane is not None
    print("mutated:", control_plane["mutated_by"], _write(lab1_box, ADMIN_USER, "create", "kubeadmconfigtemplates"))
    assert control_plane["codes"] == [201]
    assert "default.kubeadmcontrolplane.controlplane.cluster.x-k8s.io" in control_plane["mutated_by"]
    # And its validation: a skipped minor refused (the program refuses it first: tests/test_day_after.py).
    version = lab1_box["entry"]["kubernetesVersion"]
    assert f"cannot update Kubernetes version from {version} to v1.37.0" in lab1_box["beneath"]["minor_skipped"]


def test_the_real_cluster_controller_does_its_part_and_the_stand_ins_theirs(lab1_box: Any) -> None:
    # Owner references and the endpoint are the manager's writes, the providers' status theirs:
    # the ProxmoxCluster's the real CAPMOX's (the managers' user), the KCP's its stand-in's.
    for resource in ("proxmoxclusters", "kubeadmcontrolplanes", "clusters"):
        assert _write(lab1_box, CLUSTER_API_USER, "patch", resource), resource
    for resource, writer in (
        ("proxmoxclusters/status", CLUSTER_API_USER),
        ("kubeadmcontrolplanes/status", PROVIDERS_USER),
    ):
        writers = {key.split(" ")[0] for key in lab1_box["cluster_api_writes"] if key.endswith(f" {resource}")}
        assert writers == {writer}, resource
    cluster = lab1_box["cluster"]
    assert cluster["spec"]["controlPlaneEndpoint"] == {"host": lab1_box["entry"]["controlPlaneEndpoint"], "port": 6443}
    assert cluster["status"]["initialization"] == {"infrastructureProvisioned": True, "controlPlaneInitialized": True}
    assert _condition(cluster, "ControlPlaneInitialized")["status"] == "True"
    [machine_set] = lab1_box["beneath"]["machine_sets"]
    assert [owner["kind"] for owner in machine_set["metadata"]["ownerReferences"]] == ["MachineDeployment"]


def test_lab1_kubeconfig_is_written_where_cluster_api_reads_it_and_works(lab1_box: Any) -> None:
    secret = lab1_box["beneath"]["secret"]
    assert secret["type"] == "cluster.x-k8s.io/secret"
    assert secret["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": lab1_box["entry"]["name"]}
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "KubeadmControlPlane"
    assert secret["keys"] == ["value"]
    assert lab1_box["beneath"]["readyz"] == "ok"


def test_the_control_plane_node_takes_what_tolerates_it(lab1_box: Any) -> None:
    node = lab1_box["beneath"]["control_node"]
    assert node["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] == ""
    assert node["spec"]["taints"] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert node["spec"]["providerID"].startswith("proxmox://")
    # The control-plane ProxmoxMachineTemplate's sizing: the program's default (2 sockets * 4 cores,
    # 16384 MiB, a 100 GB boot volume) at every site.
    assert node["status"]["capacity"] == _capacity(lab1_sites.TEMPLATE_SIZING)
    # Cilium's agent and operator (the stand-in chart, the operator at the program's one replica)
    # and CoreDNS.
    placed = sorted(
        (pod["metadata"]["labels"].get("name") or pod["metadata"]["labels"]["k8s-app"], pod["spec"]["nodeName"])
        for pod in lab1_box["beneath"]["system_pods"]
    )
    control = node["metadata"]["name"]
    assert placed == [("cilium", control), ("cilium-operator", control), ("kube-dns", control), ("kube-dns", control)]
    # Its Machine, made as KCP makes one, found its Node through the real Machine controller.
    machine = lab1_box["control_machine"]
    assert machine is not None, "no control-plane Machine Running with its nodeRef at 1 worker"
    assert machine["status"]["nodeRef"]["name"] == control
    assert machine["spec"]["providerID"] == node["spec"]["providerID"]
    assert [o["kind"] for o in machine["metadata"]["ownerReferences"]] == ["KubeadmControlPlane"]
    kcp = f"{lab1_box['entry']['name']}-control-plane"
    assert machine["metadata"]["labels"]["cluster.x-k8s.io/control-plane-name"] == kcp
    # Its bootstrap data is the real bootstrap provider's rendering of the KubeadmConfig KCP made
    # of the program's kubeadmConfigSpec, which the Machine controller named on the Machine (the
    # KCP stand-in refuses a VM whose data would not run kubeadm init there, or a control-plane join).
    config = machine["spec"]["bootstrap"]["configRef"]
    assert (config["kind"], config["name"]) == ("KubeadmConfig", machine["metadata"]["name"])
    assert machine["spec"]["bootstrap"]["dataSecretName"] == machine["metadata"]["name"]


def test_scaling_to_one_makes_a_machine_whose_node_the_real_controller_finds(lab1_box: Any) -> None:
    worker = lab1_box["worker"]
    machine, proxmox, node = worker["machine"], worker["proxmox_machine"], worker["node"]
    assert machine["status"]["phase"] == "Running"
    assert machine["status"]["nodeRef"]["name"] == node["metadata"]["name"]
    assert machine["spec"]["providerID"] == proxmox["spec"]["providerID"] == node["spec"]["providerID"]
    assert [o["kind"] for o in proxmox["metadata"]["ownerReferences"]] == ["Machine"]
    assert [o["kind"] for o in worker["bootstrap"]["config"]["metadata"]["ownerReferences"]] == ["Machine"]
    for resource in ("proxmoxmachines", "kubeadmconfigs", "machines"):
        write = _write(lab1_box, CLUSTER_API_USER, "patch", resource)
        assert write is not None, resource
        assert 201 in write["codes"], resource  # the MachineSet controller's server-side apply creates
    # The real Machine controller synced the Node and dropped Cluster API's uninitialized taint.
    assert node["metadata"]["annotations"]["cluster.x-k8s.io/machine"] == machine["metadata"]["name"]
    assert "taints" not in node["spec"] or node["spec"]["taints"] == []
    assert node["status"]["capacity"] == _capacity(lab1_box["entry"]["workers"])
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.35.9"
    assert worker["lease_later"]["spec"]["renewTime"] > worker["lease"]["spec"]["renewTime"]


def test_the_workers_bootstrap_data_is_the_real_providers_and_the_vm_joins_with_it(lab1_box: Any) -> None:
    """issue 57: the real kubeadm bootstrap provider rendered the worker's bootstrap data from the
    program's KubeadmConfigTemplate, with a bootstrap token it made in lab1 and the pin of lab1's
    CA (`lab1-ca`, which the KCP stand-in keeps); the VM stand-in's kubeadm join checked both
    against lab1 (e2e/standins/workload/vm_boot.py) before its kubelet registered the Node."""
    bootstrap, entry = lab1_box["worker"]["bootstrap"], lab1_box["entry"]
    status = _write(lab1_box, CLUSTER_API_USER, "patch", "kubeadmconfigs/status")
    assert status is not None
    assert 200 in status["codes"]
    assert _write(lab1_box, PROVIDERS_USER, "patch", "kubeadmconfigs/status") is None
    assert bootstrap["config"]["status"]["initialization"] == {"dataSecretCreated": True}
    discovery = bootstrap["config"]["spec"]["joinConfiguration"]["discovery"]["bootstrapToken"]
    assert discovery["apiServerEndpoint"] == f"{entry['controlPlaneEndpoint']}:6443"
    assert [h.startswith("sha256:") for h in discovery["caCertHashes"]] == [True]
    assert f"bootstrap-token-{discovery['token'].split('.')[0]}" in bootstrap["tokens"]
    data = bootstrap["data"]
    # Upstream's node template (bootstrap/kubeadm/internal/cloudinit/node.go), with the program's
    # provider-id argument left for cloud-init to render on the VM.
    assert data.startswith("## template: jinja\n#cloud-config\n")
    assert "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml" in data
    assert "echo success > /run/cluster-api/bootstrap-success.complete" in data
    assert "value: proxmox://'{{ ds.meta_data.instance_id }}'" in data
    assert "key: node.cluster.x-k8s.io/uninitialized" in data
    # The program's sshPublicKeys, for cloud-init's users module: root's authorized keys on the VM.
    cloud_config = vm_boot.render(data, {"instance-id": "uuid", "local-hostname": "name"})
    assert cloud_config["users"] == [{"name": "root", "ssh_authorized_keys": entry["sshPublicKeys"]}]


def test_the_workers_vm_is_the_programs_clone_configured_by_the_real_capmox(lab1_box: Any) -> None:
    """issue 57: the first worker's VM, as the real CAPMOX made it on the Proxmox stand-in: cloned
    on the program's node, named after its machine, with the program's sockets, cores, memory and
    boot disk, net0 on the program's bridge and VLAN, its address as CAPMOX tags it, and the
    cloud-init ISO ejected once the Machine had its Node; it runs."""
    worker, entry = lab1_box["worker"], lab1_box["entry"]
    vm, spec, sizing = worker["vm"], worker["proxmox_machine"]["spec"], entry["workers"]
    print("the first worker's VM:", vm)
    assert (vm["status"], vm["name"]) == ("running", worker["proxmox_machine"]["metadata"]["name"])
    assert (spec["sourceNode"], spec["templateID"]) == (entry["sourceNode"], entry["templateVmId"])
    assert (vm["sockets"], vm["cores"], vm["memory"]) == (sizing["sockets"], sizing["cores"], sizing["memoryMib"])
    assert f",size={sizing['diskGib']}G" in vm["scsi0"]
    net0 = dict(part.split("=", 1) for part in vm["net0"].split(",")[1:])
    assert (net0["bridge"], net0.get("tag")) == (entry["bridge"], str(entry["vlan"]) if entry.get("vlan") else None)
    [address] = [a["address"] for a in worker["proxmox_machine"]["status"]["addresses"] if a["type"] == "InternalIP"]
    assert f"ip_net0_{address}" in vm["tags"].split(";")
    assert vm["ide0"] == "none,media=cdrom"


def test_the_workers_address_is_the_real_ipam_providers_from_the_programs_range(lab1_box: Any) -> None:
    """issue 57: the IPAM in-cluster manager runs for real; the InClusterIPPool and the claim are
    the real CAPMOX's from the program's ProxmoxCluster, and the address the worker's VM gets is
    the one the real provider answered the claim with."""
    worker, entry = lab1_box["worker"], lab1_box["entry"]
    [pool] = worker["ipam"]["inclusterippools"].values()
    assert pool["spec"] == {
        "addresses": entry["nodeIpRanges"],
        "prefix": entry["ipPrefix"],
        "gateway": entry["gateway"],
        "addressReuseGracePeriodSeconds": 60,
    }
    name = worker["proxmox_machine"]["metadata"]["name"]
    claim = worker["ipam"]["ipaddressclaims"][f"{name}-net0-00-inet"]
    assert [o["uid"] for o in claim["metadata"]["ownerReferences"]] == [worker["proxmox_machine"]["metadata"]["uid"]]
    address = worker["ipam"]["ipaddresses"][claim["status"]["addressRef"]["name"]]["spec"]
    internal = [a["address"] for a in worker["proxmox_machine"]["status"]["addresses"] if a["type"] == "InternalIP"]
    assert internal == [address["address"]]
    first, last = (tuple(int(p) for p in end.split(".")) for end in entry["nodeIpRanges"][0].split("-"))
    assert first <= tuple(int(p) for p in address["address"].split(".")) <= last
    assert (address["prefix"], address["gateway"]) == (entry["ipPrefix"], entry["gateway"])
    # The providers wrote the pool, the claims and the addresses; no stand-in did.
    for resource in ("inclusterippools", "ipaddressclaims", "ipaddresses"):
        made = _write(lab1_box, CLUSTER_API_USER, "create", resource)
        assert made is not None, resource
        assert made["codes"] == [201], resource
    writes = lab1_box["cluster_api_writes"]
    assert [key for key in writes if key.startswith(f"{PROVIDERS_USER} ") and "ip" in key.split(" ")[-1]] == []


def test_a_gone_machines_address_is_released_and_only_live_machines_hold_one(lab1_box: Any) -> None:
    """The claim goes with its ProxmoxMachine (the management cluster's garbage collector, as k3s
    runs it), and the real provider releases its address after the pool's grace period."""
    at_end = lab1_box["ipam_at_end"]
    held = {n for n, claim in at_end["ipaddressclaims"].items() if "deletionTimestamp" not in claim["metadata"]}
    assert held == {f"{name}-net0-00-inet" for name in at_end["proxmoxmachines"]}
    for claim in at_end["ipaddressclaims"].values():
        assert claim["status"]["addressRef"]["name"] in at_end["ipaddresses"]
    released = _write(lab1_box, CLUSTER_API_USER, "delete", "ipaddresses")
    assert released is not None
    assert released["count"] >= 4  # the workers of the 4 -> 0 scale-down, long enough ago
    assert _write(lab1_box, PROVIDERS_USER, "delete", "ipaddressclaims") is None


def _program_accepts(ranges: tuple[str, ...], prefix: int, gateway: str, endpoint: str) -> bool:
    [lab1] = harness.stack_workload_clusters()
    lab1 |= {"nodeIpRanges": list(ranges), "ipPrefix": prefix, "gateway": gateway, "controlPlaneEndpoint": endpoint}
    raw = {key.removeprefix(f"{harness.PROJECT}:"): value for key, value in harness.stack_config().items()}
    try:
        parse_settings({**raw, "workloadClusters": config_value([lab1])})
    except SettingsError:
        return False
    return True


def test_no_node_network_the_program_accepts_is_refused_by_the_real_ipam_provider(lab1_box: Any) -> None:
    """Shapes of nodeIpRanges beyond the lab's (lab1_controls.POOLS): the pool CAPMOX makes of each
    that the program accepts passes the real IPAM webhook; and the webhook can refuse (a range
    across two networks of its prefix), where the program refuses first."""
    verdicts = dict(zip(lab1_controls.POOLS, lab1_box["verdicts"]["ipam"], strict=True))
    accepted = {pool for pool in lab1_controls.POOLS if _program_accepts(*pool)}
    assert len(accepted) >= 3
    assert {pool: verdicts[pool] for pool in accepted if verdicts[pool]} == {}
    refused = [verdict for verdict in verdicts.values() if verdict]
    assert len(refused) == 1
    assert "provided address belongs to a different subnet than others" in refused[0]
    assert lab1_controls.POOLS[-1] not in accepted


def test_no_endpoint_the_program_accepts_is_refused_by_the_real_capmox_webhook(lab1_box: Any) -> None:
    """The program's ProxmoxCluster with each of lab1_controls.POOLS' node networks and endpoints:
    what the program accepts passes CAPMOX's webhook; the webhook refuses an endpoint inside the
    nodes' addresses (a range, a CIDR), which the program refuses first."""
    verdicts = dict(zip(lab1_controls.POOLS, lab1_box["verdicts"]["capmox"], strict=True))
    accepted = {pool for pool in lab1_controls.POOLS if _program_accepts(*pool)}
    assert len(accepted) >= 3
    assert {pool: verdicts[pool] for pool in accepted if verdicts[pool]} == {}
    inside = {pool for pool in lab1_controls.POOLS if "addresses may not contain the endpoint IP" in verdicts[pool]}
    assert len(inside) == 2, verdicts
    assert not inside & accepted


def test_the_real_scheduler_places_what_fits_and_leaves_the_rest_unschedulable(lab1_box: Any) -> None:
    running = lab1_box["worker"]["running"]
    assert running["spec"]["nodeName"] == lab1_box["worker"]["node"]["metadata"]["name"]
    assert running["status"]["phase"] == "Running"
    scheduled = _condition(lab1_box["unschedulable"], "PodScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert "Insufficient cpu" in scheduled["message"]


def test_scaling_to_zero_takes_the_machines_their_vms_and_their_nodes(lab1_box: Any) -> None:
    # The control plane's Node alone: the one its rollout for the upgrade left.
    [(control_node, _)] = lab1_box["upgrade"]["control_plane"]["after"]["nodes"]
    assert lab1_box["nodes_after"] == [control_node]
    # CAPMOX destroyed each worker's VM: the node holds the templates, the control plane's VM, and
    # the clone whose answer was lost, which CAPMOX never knew (test_box_lab1_autoscaling.py).
    worker = lab1_box["worker"]["proxmox_machine"]["spec"]["virtualMachineID"]
    left = lab1_box["vms_after"]
    assert str(worker) not in left
    templates = {str(vmid) for vmid in proxmox_node.templates_of(lab1_box["entry"])}
    strays = lab1_box["stray"]["strays"]
    assert [name for vmid, name in left.items() if vmid not in templates | set(strays)] == [control_node]


def test_the_capmox_template_is_served_for_v0_9_0_and_v0_9_1_only(lab1_box: Any) -> None:
    assets = lab1_box["capmox_assets"]
    assert assets["v0.9.0"] == assets["v0.9.1"]
    assert assets["v0.9.1"][0] == 200
    assert "kind: ProxmoxMachineTemplate" in assets["v0.9.1"][1]
    assert assets["v0.9.2"][0] == 404


def test_without_the_contract_label_the_infrastructure_cannot_be_resolved(lab1_box: Any) -> None:
    # The control: a second Cluster, once the ProxmoxCluster CRD lost its labels.
    unlabelled = lab1_box["unlabelled"]
    assert lab1_controls.CONTRACT_ERROR in unlabelled["log"]
    assert "proxmoxclusters.infrastructure.cluster.x-k8s.io" in unlabelled["log"]
    assert "ProxmoxCluster" not in unlabelled["condition"]
