"""Each workload cluster's nodes and template proven at preview (components.clone_sources): what
CAPMOX checks at no point, so that a name that is not a node, a templateVmId that is an ordinary
VM, a token without VM.Clone on the template, or a template on local storage that CAPMOX would
clone to another node, stops the run that declares it and not the first scale-up weeks later.
Wired under mocks, then for real over HTTPS against the Proxmox VE stand-in, which answers as PVE
8.4."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import harness
import pytest
from test_settings import lab_raw

from components import credentials
from components.clone_sources import CloneSourceError, verify_clone_sources
from components.settings import parse_settings
from e2e.box.box import CAPMOX_LEAST_PRIVILEGES
from e2e.standins.proxmox import pve_api_standin

CAPMOX_TOKEN = "capmox@pve!capi"
CAPMOX_SECRET = harness.DUMMY_SECRETS["capmoxTokenSecret"]
WHERE = "lab-mgmt:workloadClusters[0]"
[LAB1] = harness.stack_workload_clusters()
TEMPLATE = int(LAB1["templateVmId"])
NODE = LAB1["sourceNode"]


def lab1(**changes: Any) -> dict[str, Any]:
    return {"workloadClusters": [{**LAB1, **changes}]}


def refused(overrides: dict[str, Any], site: harness.ProxmoxSite | None = None) -> str:
    """The message of a run the check stops, which registers nothing."""
    record = harness.Run()
    with pytest.raises(CloneSourceError) as raised:
        harness.run_program(overrides, record=record, site=site)
    assert [key for key in record.resources if key[0] != "pulumi:pulumi:Stack"] == []
    assert CAPMOX_SECRET not in str(raised.value)
    return str(raised.value)


def site_with(nodes: dict[str, bool], vms: dict[tuple[str, int], dict[str, Any]]) -> harness.ProxmoxSite:
    return harness.ProxmoxSite(nodes, vms)


TEMPLATE_CONFIG = {"name": "ubuntu-2404-kube", "template": 1}


# --- wiring, under mocks -----------------------------------------------------------------------


def test_the_nodes_the_template_and_the_right_to_clone_it_are_read_once_with_capmox_token() -> None:
    run = harness.run_program()
    assert run.proxmox_reads == [
        (CAPMOX_TOKEN, "cluster/status"),
        (CAPMOX_TOKEN, f"nodes/{NODE}/qemu/{TEMPLATE}/config"),
        (CAPMOX_TOKEN, f"access/permissions?path=%2Fvms%2F{TEMPLATE}"),
    ]


def test_two_clusters_on_one_template_read_it_once() -> None:
    second = {
        **LAB1,
        "name": "lab2",
        "controlPlaneEndpoint": "192.168.4.61",
        "nodeIpRanges": ["192.168.4.62-192.168.4.69"],
    }
    run = harness.run_program({"workloadClusters": [LAB1, second]})
    reads = [path for _, path in run.proxmox_reads]
    assert reads.count(f"nodes/{NODE}/qemu/{TEMPLATE}/config") == 1
    assert reads.count(f"access/permissions?path=%2Fvms%2F{TEMPLATE}") == 1


def test_no_workload_cluster_no_call() -> None:
    assert harness.run_program(unset=("workloadClusters",)).proxmox_reads == []


def test_skipping_the_credentials_check_skips_this_one() -> None:
    site = site_with({}, {})  # a site that would refuse everything
    assert harness.run_program({"skipCredentialsCheck": True}, site=site).proxmox_reads == []


def test_an_ordinary_vm_as_template_is_refused() -> None:
    site = site_with({NODE: True}, {(NODE, TEMPLATE): {"name": "gitea", "memory": 4096}})
    message = refused({}, site)
    assert f"{WHERE}.templateVmId: VM {TEMPLATE} (gitea) on node {NODE} is not a template" in message


def test_a_template_id_with_no_vm_is_refused() -> None:
    message = refused(lab1(templateVmId=TEMPLATE + 7), site_with({NODE: True}, {(NODE, TEMPLATE): TEMPLATE_CONFIG}))
    assert f"{WHERE}.templateVmId: there is no VM {TEMPLATE + 7} on node {NODE}" in message


def test_an_allowed_node_that_is_not_a_node_is_refused_and_every_problem_named_at_once() -> None:
    message = refused(lab1(allowedNodes=[NODE, "pv1-9"]), site_with({NODE: True}, {(NODE, TEMPLATE): {"cores": 2}}))
    assert f"{WHERE}.allowedNodes: pv1-9 is not a node of the Proxmox VE cluster (its nodes: {NODE})" in message
    assert f"{WHERE}.templateVmId: VM {TEMPLATE} on node {NODE} is not a template" in message


def test_a_source_node_that_is_not_a_node_is_refused_without_reading_a_template_there() -> None:
    site = site_with({NODE: True}, {(NODE, TEMPLATE): TEMPLATE_CONFIG})
    record = harness.Run()
    with pytest.raises(CloneSourceError) as raised:
        harness.run_program(lab1(sourceNode="pv2-1", allowedNodes=[NODE]), record=record, site=site)
    assert f"{WHERE}.sourceNode: pv2-1 is not a node of the Proxmox VE cluster" in str(raised.value)
    assert record.proxmox_reads == [(CAPMOX_TOKEN, "cluster/status")]


def test_a_template_cloned_to_another_node_has_its_storages_read_once() -> None:
    disk = {**TEMPLATE_CONFIG, "scsi0": f"local-lvm:base-{TEMPLATE}-disk-0,size=32G", "ide2": "none,media=cdrom"}
    site = harness.ProxmoxSite({NODE: True, "pv1-2": True}, {(NODE, TEMPLATE): disk}, {"local-lvm": False})
    record = harness.Run()
    with pytest.raises(CloneSourceError) as raised:
        harness.run_program(lab1(allowedNodes=[NODE, "pv1-2"]), record=record, site=site)
    assert f"{WHERE}.allowedNodes: CAPMOX clones to node pv1-2 from {NODE}" in str(raised.value)
    assert [path for _, path in record.proxmox_reads].count(f"nodes/{NODE}/storage") == 1


def test_an_offline_node_warns_and_the_run_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    site = site_with({NODE: True, "pv1-2": False}, {(NODE, TEMPLATE): TEMPLATE_CONFIG})
    run = harness.run_program(lab1(allowedNodes=[NODE, "pv1-2"]), site=site)
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert f"{WHERE}.allowedNodes: node pv1-2 is offline; CAPMOX adds no worker until it is back" in warnings
    assert run.of_type("kubernetes:infrastructure.cluster.x-k8s.io/v1alpha2:ProxmoxCluster")


# --- the real HTTPS calls, against the Proxmox VE stand-in ---------------------------------------


@pytest.fixture
def node(tmp_path: Path) -> Iterator[pve_api_standin.PveApiStandIn]:
    """The stand-in as the lab's node, with lab1's template made as the owner makes it."""
    with pve_api_standin.serve({(CAPMOX_TOKEN, CAPMOX_SECRET): harness.FULL_PERMISSIONS}, tmp_path, node=NODE) as pve:
        pve.made_template(TEMPLATE, "ubuntu-2404-kube")
        yield pve
    assert pve.unknown == [], "the check called the API for something the stand-in does not know"
    assert pve.writes == [], "a check writes nothing"


def settings_at(pve: pve_api_standin.PveApiStandIn, **changes: Any) -> Any:
    return parse_settings(
        lab_raw(proxmoxEndpoint=pve.url.rstrip("/"), workloadClusters=json.dumps([{**LAB1, **changes}]))
    )


def test_a_template_on_an_existing_node_passes_in_three_calls(node: pve_api_standin.PveApiStandIn) -> None:
    verify_clone_sources(settings_at(node))
    assert node.requests == [
        ("GET", "/api2/json/cluster/status"),
        ("GET", f"/api2/json/nodes/{NODE}/qemu/{TEMPLATE}/config"),
        ("GET", "/api2/json/access/permissions"),
    ]
    assert node.calls[-1].params == ("path",)


def test_a_running_vm_is_not_taken_for_a_template(node: pve_api_standin.PveApiStandIn) -> None:
    node.made_on_node(TEMPLATE + 1, {"name": "gitea", "memory": "1024", "scsi0": "local-lvm:8"}, {})
    with pytest.raises(CloneSourceError) as raised:
        verify_clone_sources(settings_at(node, templateVmId=TEMPLATE + 1))
    assert f"{WHERE}.templateVmId: VM {TEMPLATE + 1} (gitea) on node {NODE} is not a template" in str(raised.value)


def test_a_node_the_cluster_does_not_have_is_named(node: pve_api_standin.PveApiStandIn) -> None:
    with pytest.raises(CloneSourceError) as raised:
        verify_clone_sources(settings_at(node, allowedNodes=[NODE, "pv1-2"]))
    assert f"{WHERE}.allowedNodes: pv1-2 is not a node of the Proxmox VE cluster (its nodes: {NODE})" in str(
        raised.value
    )


def test_a_token_that_may_not_read_the_template_is_named(tmp_path: Path) -> None:
    """Sys.Audit on `/` without propagation: the node list, and no VM."""
    tokens = {(CAPMOX_TOKEN, CAPMOX_SECRET): {"/": {"Sys.Audit": 0}}}
    with pve_api_standin.serve(tokens, tmp_path, node=NODE) as pve:
        pve.made_template(TEMPLATE, "ubuntu-2404-kube")
        with pytest.raises(CloneSourceError) as raised:
            verify_clone_sources(settings_at(pve))
    assert f"lab-mgmt:capmoxTokenId {CAPMOX_TOKEN} may not read VM {TEMPLATE} (VM.Audit on /vms/{TEMPLATE})" in str(
        raised.value
    )


def test_an_api_out_of_reach_says_how_to_skip(node: pve_api_standin.PveApiStandIn) -> None:
    settings = settings_at(node)
    with pytest.raises(CloneSourceError) as raised:
        verify_clone_sources(
            parse_settings(lab_raw(proxmoxEndpoint="https://127.0.0.1:9", workloadClusters=json.dumps([LAB1])))
        )
    assert "GET cluster/status" in str(raised.value)
    assert "set lab-mgmt:skipCredentialsCheck true to skip this check" in str(raised.value)
    verify_clone_sources(settings)  # the stand-in itself was reachable all along


# CAPMOX's least privileges but VM.Clone (cluster-api-provider-proxmox docs/advanced-setups.md),
# each on `/`: the token check passes wherever VM.Clone is held.
ALL_BUT_CLONE = {
    "/": dict.fromkeys(
        (
            *credentials.CAPMOX_ROOT_PRIVILEGES,
            *(privilege for privilege in credentials.CAPMOX_PRIVILEGES if privilege != "VM.Clone"),
            credentials.CAPMOX_GUEST_AGENT[0],
        ),
        1,
    )
}


@contextmanager
def lab(
    tmp_path: Path,
    permissions: Mapping[str, Mapping[str, int]] = harness.FULL_PERMISSIONS,
    *,
    peers: Mapping[str, bool] | None = None,
    storage: str = "local-lvm",
) -> Iterator[pve_api_standin.PveApiStandIn]:
    """The stand-in as the lab's node, with `peers` in its cluster and the NAS they share, and
    lab1's template made on `storage`; no call it does not know, and no write."""
    tokens = {(CAPMOX_TOKEN, CAPMOX_SECRET): permissions}
    with pve_api_standin.serve(tokens, tmp_path, node=NODE, peers=peers, nas=True) as pve:
        pve.made_template(TEMPLATE, "ubuntu-2404-kube", storage=storage)
        yield pve
    assert pve.unknown == []
    assert pve.writes == []


def clone_refusal(pve: pve_api_standin.PveApiStandIn, **changes: Any) -> str:
    with pytest.raises(CloneSourceError) as raised:
        verify_clone_sources(settings_at(pve, **changes))
    return str(raised.value)


def test_a_token_holding_vm_clone_only_on_a_pool_without_the_template_is_refused(tmp_path: Path) -> None:
    """The token check passes (VM.Clone is held somewhere); the clone would not."""
    on_a_pool = {**ALL_BUT_CLONE, "/pool/capi-templates": {"VM.Clone": 1}}
    with lab(tmp_path, on_a_pool) as pve:
        check = credentials.token_checks(settings_at(pve))[1]
        held = credentials.read_permissions(pve.url, CAPMOX_TOKEN, CAPMOX_SECRET, insecure=True)
        assert credentials.missing_privileges(held, check) == []
        message = clone_refusal(pve)
    assert (
        f"{WHERE}.templateVmId: lab-mgmt:capmoxTokenId {CAPMOX_TOKEN} lacks VM.Clone on /vms/{TEMPLATE}, "
        "which CAPMOX clones every worker from"
    ) in message


def test_vm_clone_on_the_template_alone_is_enough(tmp_path: Path) -> None:
    """As a pool holding the template gives it: on /vms/<id>, not propagated."""
    with lab(tmp_path, {**ALL_BUT_CLONE, f"/vms/{TEMPLATE}": {"VM.Clone": 0}}) as pve:
        verify_clone_sources(settings_at(pve))


def test_a_second_node_with_the_template_on_local_storage_is_refused(tmp_path: Path) -> None:
    """CAPMOX clones with `target` for each allowed node; Proxmox VE refuses a template on local
    storage to any node but its own, which the stand-in's clone shows too."""
    with lab(tmp_path, peers={"pv1-2": True}) as pve:
        message = clone_refusal(pve, allowedNodes=[NODE, "pv1-2"])
        verify_clone_sources(settings_at(pve, allowedNodes=[NODE]))
    assert (
        f"{WHERE}.allowedNodes: CAPMOX clones to node pv1-2 from {NODE}, which Proxmox VE refuses while template "
        f"{TEMPLATE} has volumes on local storage local-lvm (can't clone VM to node 'pv1-2' (VM uses local storage))"
    ) in message
    assert ("GET", f"/api2/json/nodes/{NODE}/storage") in pve.requests


def test_an_offline_second_node_is_checked_too(tmp_path: Path) -> None:
    with lab(tmp_path, peers={"pv1-2": False}) as pve:
        message = clone_refusal(pve, allowedNodes=[NODE, "pv1-2"])
    assert "CAPMOX clones to node pv1-2" in message


def test_a_template_on_shared_storage_is_cloned_to_any_node(tmp_path: Path) -> None:
    with lab(tmp_path, peers={"pv1-2": True, "pv1-3": True}, storage="nas") as pve:
        verify_clone_sources(settings_at(pve, allowedNodes=["pv1-2", NODE, "pv1-3"]))
    assert pve.requests.count(("GET", f"/api2/json/nodes/{NODE}/storage")) == 1


def test_a_storage_the_token_may_not_see_is_named(tmp_path: Path) -> None:
    """Datastore.Audit and Datastore.AllocateSpace on `local` alone: the listing leaves local-lvm out."""
    unseen = {
        "/": {privilege: 1 for privilege in harness.FULL_PERMISSIONS["/"] if not privilege.startswith("Datastore.")},
        "/storage/local": dict.fromkeys(("Datastore.Audit", "Datastore.AllocateSpace"), 1),
    }
    with lab(tmp_path, unseen, peers={"pv1-2": True}) as pve:
        message = clone_refusal(pve, allowedNodes=[NODE, "pv1-2"])
    assert (
        f"{WHERE}.allowedNodes: lab-mgmt:capmoxTokenId {CAPMOX_TOKEN} may not see storage local-lvm of template "
        f"{TEMPLATE} (Datastore.Audit or Datastore.AllocateSpace on /storage/local-lvm; the clone needs the latter "
        "on a disk's storage)"
    ) in message


def test_the_boxs_capmox_token_passes_every_read(tmp_path: Path) -> None:
    """What the token check asks of CAPMOX's token, and nothing more, covers every read here."""
    with lab(tmp_path, CAPMOX_LEAST_PRIVILEGES, peers={"pv1-2": True}, storage="nas") as pve:
        verify_clone_sources(settings_at(pve, allowedNodes=[NODE, "pv1-2"]))
    assert len(pve.requests) == 4
