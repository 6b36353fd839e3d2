"""The Proxmox VE API stand-in (e2e/standins/proxmox/pve_api_standin.py), spoken to over HTTPS on 127.0.0.1 as
bpg/terraform-provider-proxmox speaks to Proxmox VE: TLS 1.3, a PVEAPIToken header, form bodies,
and the exact bodies its call map (/work/shared/notes/proxmox-api-calls-verified.md) gives for
this program's image and VM.
"""

from __future__ import annotations

import functools
import hashlib
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from e2e.box.box import ALL_PRIVILEGES
from e2e.standins.proxmox import pve_api_standin
from e2e.standins.proxmox.pve_api_standin import PveApiStandIn

TOKEN = "pulumi@pve!lab-mgmt"
SECRET = "0f1e2d3c-4b5a-4697-8877-66554433aa11"
WRONG_SECRET = "deadbeef-0000-4000-8000-000000000000"
# The box's tokens: every privilege the program and CAPMOX need, on `/`.
PERMISSIONS = ALL_PRIVILEGES
NODE = "pv1-1"
IMAGE = b"QFI\xfb" + bytes(range(256)) * 64
FILE_NAME = "noble-server-cloudimg-amd64-20260926.qcow2"
VOLID = f"local:import/{FILE_NAME}"
VM = "/nodes/pv1-1/qemu/201"
# The create body on the wire (the call map's section 5.2), once form-decoded; import-from is the
# downloaded file's volume.
CREATE = {
    **{"acpi": "1", "agent": "enabled=1,fstrim_cloned_disks=0,type=virtio", "balloon": "0", "bios": "seabios"},
    **{"boot": "order=scsi0", "ciuser": "ubuntu", "cores": "2", "cpu": "x86-64-v2-AES"},
    **{"description": "Kubernetes management cluster (k3s), managed by the lab-mgmt Pulumi program."},
    **{"ide2": "file=local-lvm:cloudinit,", "ide3": "file=cdrom,media=cdrom,"},
    **{"ipconfig0": "gw=192.168.4.8,ip=192.168.4.21/24", "keyboard": "en-us", "memory": "4096", "name": "lab-mgmt"},
    **{"nameserver": "8.8.8.8 2.2.2.2", "net0": "model=virtio,bridge=vmbr0,firewall=0,tag=4", "numa": "0"},
    **{"onboot": "1", "ostype": "l26", "protection": "0", "scsihw": "virtio-scsi-pci", "serial0": "socket"},
    "scsi0": f"file=local-lvm:0,import-from={VOLID},format=raw,size=32212254720,aio=io_uring,backup=1,iothread=0,"
    "ssd=0,discard=ignore,cache=none,replicate=1",
    "sshkeys": "ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIHhnI9tkG93j66SuHRKoLRSzSk70QX%2BhEMVq3CTkCXjc%20owner%40laptop",
    **{"sockets": "1", "tablet": "1", "template": "0", "vga": "memory=16,type=serial0", "vmid": "201"},
}
INTERFACES = [
    {
        "name": "eth0",
        "hardware-address": "bc:24:11:aa:bb:cc",
        "ip-addresses": [{"ip-address": "192.168.4.21", "ip-address-type": "ipv4", "prefix": 24}],
    }
]


@dataclass
class RecordingGuest:
    """A guest whose agent runs once `agent` is set."""

    events: list[tuple[str, int]] = field(default_factory=list)
    started_with: dict[str, str] = field(default_factory=dict)
    agent: list[dict[str, Any]] | None = None

    def start(self, vmid: int, config: dict[str, str]) -> None:
        self.events.append(("start", vmid))
        self.started_with = config

    def stop(self, vmid: int) -> None:
        self.events.append(("stop", vmid))

    def destroy(self, vmid: int) -> None:
        self.events.append(("destroy", vmid))

    def agent_interfaces(self, vmid: int) -> list[dict[str, Any]] | None:
        return self.agent

    def agent_osinfo(self, vmid: int) -> dict[str, Any] | None:
        return None

    def agent_exec(self, vmid: int, command: list[str], input_data: str) -> dict[str, Any] | None:
        return None


@dataclass
class Answer:
    status: int
    reason: str
    data: Any


def call(
    standin: PveApiStandIn, method: str, path: str, params: dict[str, str] | None = None, secret: str | None = SECRET
) -> Answer:
    """As the provider calls: query for GET and DELETE, a form body for POST and PUT."""
    encoded = urllib.parse.urlencode(params or {})
    url = standin.url.rstrip("/") + "/api2/json" + path
    body = None
    if method in ("GET", "DELETE") and encoded:
        url += "?" + encoded
    elif encoded:
        body = encoded.encode()
    request = urllib.request.Request(url, data=body, method=method)  # noqa: S310 - the loopback stand-in
    if body:
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
    if secret is not None:
        request.add_header("Authorization", f"PVEAPIToken={TOKEN}={secret}")
    context = ssl.create_default_context(cafile=standin.certificate)
    context.minimum_version = ssl.TLSVersion.TLSv1_3  # the provider's default minimum
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:  # noqa: S310
            return Answer(answer.status, answer.reason, json.loads(answer.read())["data"])
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.reason, json.loads(error.read())["data"])


def wait(standin: PveApiStandIn, upid: str) -> dict[str, Any]:
    """Polls the task as the provider does, until it stops."""
    path = f"/nodes/{NODE}/tasks/{urllib.parse.quote(upid, safe=':@')}/status"
    for _ in range(100):
        status = call(standin, "GET", path)
        assert status.status == 200, status
        if status.data["status"] != "running":
            return dict(status.data)
        time.sleep(0.1)
    raise AssertionError(f"task {upid} still running")


@pytest.fixture
def image_server(tmp_path: Path) -> Iterator[str]:
    """A box-local HTTP server holding the image; its URL."""
    served = tmp_path / "images"
    served.mkdir()
    (served / "noble-server-cloudimg-amd64.img").write_bytes(IMAGE)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(served))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/noble-server-cloudimg-amd64.img"
    server.shutdown()
    server.server_close()


@pytest.fixture
def guest() -> RecordingGuest:
    return RecordingGuest()


@pytest.fixture
def standin(tmp_path: Path, guest: RecordingGuest) -> Iterator[PveApiStandIn]:
    with pve_api_standin.serve({(TOKEN, SECRET): PERMISSIONS}, tmp_path, guest=guest) as running:
        yield running


def download(standin: PveApiStandIn, url: str, checksum: str = hashlib.sha256(IMAGE).hexdigest()) -> Answer:
    form = {"checksum": checksum, "checksum-algorithm": "sha256", "content": "import", "filename": FILE_NAME}
    form |= {"node": NODE, "storage": "local", "url": url, "verify-certificates": "1"}
    return call(standin, "POST", f"/nodes/{NODE}/storage/local/download-url", form)


def downloaded(standin: PveApiStandIn, url: str) -> None:
    started = download(standin, url)
    assert started.status == 200, started
    assert wait(standin, started.data)["exitstatus"] == "OK"


def running_vm(standin: PveApiStandIn, url: str) -> None:
    """The provider's create: create, resize, start, each waited on."""
    downloaded(standin, url)
    for method, path, form in [
        ("POST", f"/nodes/{NODE}/qemu", CREATE),
        ("PUT", f"{VM}/resize", {"disk": "scsi0", "size": "32212254720"}),
        ("POST", f"{VM}/status/start", {"timeout": "1800"}),
    ]:
        answer = call(standin, method, path, form)
        assert answer.status == 200, answer
        assert wait(standin, answer.data)["exitstatus"] == "OK"


# --- auth, TLS, what the stand-in does not know ----------------------------------------------


def test_a_token_is_needed_for_every_call(standin: PveApiStandIn) -> None:
    assert call(standin, "GET", "/access/permissions").data == PERMISSIONS
    assert call(standin, "GET", "/access/permissions", secret=WRONG_SECRET).status == 401
    assert call(standin, "GET", "/cluster/resources", {"type": "vm"}, secret=None).status == 401
    assert call(standin, "POST", f"/nodes/{NODE}/qemu", CREATE, secret=WRONG_SECRET).status == 401
    assert call(standin, "GET", "/cluster/resources", {"type": "vm"}).data == []


def test_an_unknown_call_or_parameter_fails_loudly_and_is_recorded(standin: PveApiStandIn) -> None:
    unknown_call = call(standin, "GET", f"{VM}/pending")
    assert (unknown_call.status, unknown_call.data) == (501, None)
    assert "/api2/json/nodes/pv1-1/qemu/201/pending" in unknown_call.reason
    unknown_parameter = call(standin, "GET", "/pools", {"poolid": "lab"})
    assert unknown_parameter.status == 501
    assert "poolid" in unknown_parameter.reason
    assert standin.unknown == [
        "GET /api2/json/nodes/pv1-1/qemu/201/pending",
        "GET /api2/json/pools parameter poolid",
    ]
    standin.unknown.clear()


def test_every_request_is_recorded_with_its_parameter_names_only(standin: PveApiStandIn) -> None:
    call(standin, "GET", "/cluster/resources", {"type": "vm"})
    call(standin, "POST", f"/nodes/{NODE}/qemu", CREATE)
    assert standin.calls[0] == pve_api_standin.Call("GET", "/api2/json/cluster/resources", ("type",))
    assert standin.writes == [pve_api_standin.Call("POST", "/api2/json/nodes/pv1-1/qemu", tuple(sorted(CREATE)))]
    assert SECRET not in repr(standin.calls)


# --- tasks and the image download --------------------------------------------------------------


def test_the_image_is_fetched_and_checked_in_a_task(standin: PveApiStandIn, image_server: str) -> None:
    metadata = call(
        standin, "GET", f"/nodes/{NODE}/query-url-metadata", {"url": image_server, "verify-certificates": "1"}
    )
    assert metadata.data == {
        "filename": "noble-server-cloudimg-amd64.img",
        "size": len(IMAGE),
        "mimetype": metadata.data["mimetype"],
    }
    started = download(standin, image_server)
    assert started.data.startswith(f"UPID:{NODE}:")
    assert f":download:local:{TOKEN}:" in started.data
    status = wait(standin, started.data)
    assert (status["status"], status["exitstatus"], type(status["pid"])) == ("stopped", "OK", int)
    listing = call(standin, "GET", f"/nodes/{NODE}/storage/local/content", {"content": "import"})
    assert listing.data == [{"volid": VOLID, "content": "import", "format": "qcow2", "size": len(IMAGE)}]
    again = download(standin, image_server)
    assert again.status == 500
    assert "refusing to override existing file" in again.reason
    escaped = urllib.parse.quote(VOLID, safe=":")
    assert call(standin, "DELETE", f"/nodes/{NODE}/storage/local/content/{escaped}").status == 200
    assert call(standin, "GET", f"/nodes/{NODE}/storage/local/content", {"content": "import"}).data == []


def test_a_wrong_checksum_ends_the_task_in_error_with_a_log(standin: PveApiStandIn, image_server: str) -> None:
    started = download(standin, image_server, checksum="0" * 64)
    status = wait(standin, started.data)
    assert status["exitstatus"].startswith("checksum mismatch")
    log = call(standin, "GET", f"/nodes/{NODE}/tasks/{urllib.parse.quote(started.data, safe=':@')}/log")
    assert log.data[-1]["t"].startswith("TASK ERROR: checksum mismatch")
    assert call(standin, "GET", f"/nodes/{NODE}/storage/local/content", {"content": "import"}).data == []


def test_a_download_can_be_made_to_fail(standin: PveApiStandIn, image_server: str) -> None:
    standin.faults.download = "download failed: 503 Service Unavailable"
    status = wait(standin, download(standin, image_server).data)
    assert status["exitstatus"] == "download failed: 503 Service Unavailable"
    upid = urllib.parse.quote(download(standin, image_server).data, safe=":@")
    assert call(standin, "DELETE", f"/nodes/{NODE}/tasks/{upid}").status == 200


# --- the VM -------------------------------------------------------------------------------------


def test_a_created_vm_reads_back_as_proxmox_stores_it(standin: PveApiStandIn, image_server: str) -> None:
    running_vm(standin, image_server)
    config = call(standin, "GET", f"{VM}/config").data
    assert config["sshkeys"] == CREATE["sshkeys"]
    assert (config["ide2"], config["ide3"]) == ("local-lvm:vm-201-cloudinit,media=cdrom", "cdrom,media=cdrom")
    assert config["scsi0"].startswith("local-lvm:vm-201-disk-0,")
    assert "size=30G" in config["scsi0"].split(",")
    assert "import-from" not in config["scsi0"]
    model_mac, rest = config["net0"].split(",", 1)
    assert model_mac.startswith("virtio=BC:24:11:")
    assert rest == "bridge=vmbr0,firewall=0,tag=4"
    assert (config["cores"], config["memory"], config["onboot"], config["protection"]) == (2, 4096, 1, 0)
    disk = call(standin, "GET", f"/nodes/{NODE}/storage/local-lvm/content/local-lvm:vm-201-disk-0").data
    assert (disk["format"], disk["size"]) == ("raw", 30 << 30)
    resources = call(standin, "GET", "/cluster/resources", {"type": "vm"}).data
    assert [(vm["vmid"], vm["node"], vm["status"]) for vm in resources] == [(201, NODE, "running")]
    assert call(standin, "GET", f"{VM}/status/current").data["status"] == "running"


def test_a_cd_drive_an_update_names_joins_the_boot_order(standin: PveApiStandIn, image_server: str) -> None:
    """qemu-server's update_vm_api, as the provider's update after an import sends the CD drive
    the VM has already: it is appended to the order, to be bootable; the cloud-init drive is not."""
    running_vm(standin, image_server)
    cloud_init = {"ide2": "file=local-lvm:vm-201-cloudinit,media=cdrom"}
    assert call(standin, "PUT", f"{VM}/config", cloud_init).status == 200
    assert call(standin, "GET", f"{VM}/config").data["boot"] == "order=scsi0"
    assert call(standin, "PUT", f"{VM}/config", {"ide3": "file=cdrom,media=cdrom,"}).status == 200
    assert call(standin, "GET", f"{VM}/config").data["boot"] == "order=scsi0;ide3"


def test_the_guest_is_told_of_each_power_change(
    standin: PveApiStandIn, image_server: str, guest: RecordingGuest
) -> None:
    running_vm(standin, image_server)
    assert guest.events == [("start", 201)]
    assert guest.started_with["ipconfig0"] == "gw=192.168.4.8,ip=192.168.4.21/24"
    assert guest.started_with["nameserver"] == "8.8.8.8 2.2.2.2"
    assert guest.started_with["net0"].startswith("virtio=BC:24:11:")
    shutdown = call(standin, "POST", f"{VM}/status/shutdown", {"forceStop": "1", "timeout": "1800"})
    assert wait(standin, shutdown.data)["exitstatus"] == "OK"
    assert call(standin, "GET", f"{VM}/status/current").data["status"] == "stopped"
    assert wait(standin, call(standin, "POST", f"{VM}/status/start", {"timeout": "1800"}).data)["exitstatus"] == "OK"
    assert wait(standin, call(standin, "POST", f"{VM}/status/stop").data)["exitstatus"] == "OK"
    assert guest.events == [("start", 201), ("stop", 201), ("start", 201), ("stop", 201)]


def test_the_agent_answers_only_when_the_guest_runs_one(
    standin: PveApiStandIn, image_server: str, guest: RecordingGuest
) -> None:
    running_vm(standin, image_server)
    silent = call(standin, "GET", f"{VM}/agent/network-get-interfaces")
    assert (silent.status, silent.reason) == (500, "QEMU guest agent is not running")
    guest.agent = INTERFACES
    assert call(standin, "GET", f"{VM}/agent/network-get-interfaces").data == {"result": INTERFACES}


def test_a_config_update_is_read_back(standin: PveApiStandIn, image_server: str) -> None:
    running_vm(standin, image_server)
    update = {"balloon": "0", "cores": "4", "cpu": "x86-64-v2-AES", "delete": "vcpus,cpulimit", "memory": "8192"}
    assert (
        call(standin, "PUT", f"{VM}/config", {**update, "name": "lab-mgmt", "numa": "0", "sockets": "1"}).data is None
    )
    config = call(standin, "GET", f"{VM}/config").data
    assert (config["cores"], config["memory"]) == (4, 8192)
    assert call(standin, "PUT", f"{VM}/cloudinit").status == 200


def test_a_protected_vm_refuses_delete_as_proxmox_does(
    standin: PveApiStandIn, image_server: str, guest: RecordingGuest
) -> None:
    running_vm(standin, image_server)
    delete = {"destroy-unreferenced-disks": "1", "purge": "1"}
    assert call(standin, "DELETE", f"{VM}/", delete).reason == "VM 201 is running - destroy failed"
    call(standin, "PUT", f"{VM}/config", {"protection": "1"})
    wait(standin, call(standin, "POST", f"{VM}/status/shutdown", {"forceStop": "1", "timeout": "1800"}).data)
    refused = call(standin, "DELETE", f"{VM}/", delete)
    assert (refused.status, refused.reason) == (500, "can't remove VM 201 - protection mode enabled")
    call(standin, "PUT", f"{VM}/config", {"protection": "0"})
    assert wait(standin, call(standin, "DELETE", f"{VM}/", delete).data)["exitstatus"] == "OK"
    assert guest.events[-1] == ("destroy", 201)
    gone = call(standin, "GET", f"{VM}/status/current")
    assert (gone.status, gone.reason) == (500, "Configuration file 'nodes/pv1-1/qemu-server/201.conf' does not exist")
    assert call(standin, "GET", "/cluster/resources", {"type": "vm"}).data == []
    assert call(standin, "GET", f"/nodes/{NODE}/storage/local-lvm/content", {"content": "images"}).data == []


def test_vm_create_can_be_made_to_fail(standin: PveApiStandIn, image_server: str) -> None:
    downloaded(standin, image_server)
    standin.faults.vm_create = "got timeout"
    failed = call(standin, "POST", f"/nodes/{NODE}/qemu", CREATE)
    assert (failed.status, failed.reason) == (500, "got timeout")
    standin.faults.vm_create = None
    assert call(standin, "POST", f"/nodes/{NODE}/qemu", CREATE).status == 200
    assert call(standin, "POST", f"/nodes/{NODE}/qemu", CREATE).reason.endswith("already exists on node 'pv1-1'")


def test_a_new_standin_on_the_same_directory_goes_on(tmp_path: Path, image_server: str) -> None:
    tokens = {(TOKEN, SECRET): PERMISSIONS}
    with pve_api_standin.serve(tokens, tmp_path) as first:
        running_vm(first, image_server)
        config = call(first, "GET", f"{VM}/config").data
        creation = next(call for call in first.writes if call.path.endswith("/qemu"))
    with pve_api_standin.serve(tokens, tmp_path) as second:
        again = call(second, "GET", f"{VM}/config").data
        assert again == config
        assert call(second, "GET", f"{VM}/status/current").data["status"] == "running"
        listing = call(second, "GET", f"/nodes/{NODE}/storage/local/content", {"content": "import"}).data
        assert [volume["volid"] for volume in listing] == [VOLID]
        assert second.writes == []
    assert creation.params == tuple(sorted(CREATE))


# --- a token's own permissions on one path, a cluster's nodes and shared storage -----------------


def test_a_token_reads_its_permissions_on_one_path_as_proxmox_computes_them(tmp_path: Path) -> None:
    """pve-access-control's `permissions` with `path`: what holds there with its propagate flag,
    the path keyed as asked even where nothing holds; a pool's grant reaches no VM of the lab."""
    granted = {"/": {"Sys.Audit": 0, "VM.Audit": 1}, "/vms/9000": {"VM.Clone": 0}, "/pool/capi": {"VM.Clone": 1}}
    with pve_api_standin.serve({(TOKEN, SECRET): granted}, tmp_path) as standin:
        assert call(standin, "GET", "/access/permissions", {"path": "/vms/9000"}).data == {
            "/vms/9000": {"VM.Audit": 1, "VM.Clone": 0}
        }
        assert call(standin, "GET", "/access/permissions", {"path": "/vms/9001"}).data == {"/vms/9001": {"VM.Audit": 1}}
        assert call(standin, "GET", "/access/permissions", {"path": "/"}).data == {"/": {"Sys.Audit": 0, "VM.Audit": 1}}
        assert call(standin, "GET", "/access/permissions", {"path": "/storage/local"}).data == {
            "/storage/local": {"VM.Audit": 1}
        }
        assert call(standin, "GET", "/access/permissions").data == granted
        assert call(standin, "GET", "/access/permissions", {"userid": "root@pam"}).status == 501
        standin.unknown.clear()


def test_a_node_with_peers_lists_its_cluster_and_serves_only_itself(tmp_path: Path) -> None:
    with pve_api_standin.serve({(TOKEN, SECRET): PERMISSIONS}, tmp_path, peers={"pv1-2": True, "pv1-3": False}) as pve:
        status = call(pve, "GET", "/cluster/status").data
        peer = call(pve, "GET", "/nodes/pv1-2/status")
    assert status[0] == {"type": "cluster", "id": "cluster", "name": "lab", "nodes": 3, "version": 1, "quorate": 1}
    assert [(entry["name"], entry["local"], entry["online"], entry["nodeid"]) for entry in status[1:]] == [
        (NODE, 1, 1, 1),
        ("pv1-2", 0, 1, 2),
        ("pv1-3", 0, 0, 3),
    ]
    assert (peer.status, peer.reason) == (501, f"the stand-in serves node {NODE}, not its peer pv1-2")


def test_a_clone_to_a_peer_needs_every_volume_on_shared_storage(tmp_path: Path) -> None:
    """qemu-server's clone_vm with `target`: refused for a template on local storage, or a local
    target storage; from the NAS it would go to the peer, which the stand-in does not serve."""
    with pve_api_standin.serve({(TOKEN, SECRET): PERMISSIONS}, tmp_path, peers={"pv1-2": True}, nas=True) as pve:
        pve.made_template(9000, "ubuntu-2404-kube")
        pve.made_template(9001, "ubuntu-2404-kube-nas", storage="nas")
        clone = {"newid": "101", "name": "lab1-worker", "full": "1", "format": "qcow2", "target": "pv1-2"}
        local = call(pve, "POST", f"/nodes/{NODE}/qemu/9000/clone", clone)
        to_local = call(pve, "POST", f"/nodes/{NODE}/qemu/9001/clone", clone | {"storage": "local-lvm"})
        shared = call(pve, "POST", f"/nodes/{NODE}/qemu/9001/clone", clone)
        here = call(pve, "POST", f"/nodes/{NODE}/qemu/9000/clone", clone | {"target": NODE})
        storages = {entry["storage"]: entry["shared"] for entry in call(pve, "GET", f"/nodes/{NODE}/storage").data}
        across = call(pve, "GET", f"/nodes/{NODE}/storage", {"target": "pv1-2"}).data
    assert (local.status, local.reason) == (500, "can't clone VM to node 'pv1-2' (VM uses local storage)")
    assert (to_local.status, to_local.reason) == (500, "can't clone to non-shared storage 'local-lvm'")
    assert (shared.status, shared.reason) == (501, f"the stand-in serves node {NODE}, not its peer pv1-2")
    assert here.status == 200, here
    assert storages == {"local": 0, "local-lvm": 0, "nas": 1}
    assert [entry["storage"] for entry in across] == ["nas"]
