"""The Proxmox VE API stand-in (e2e/standins/proxmox/) spoken to as CAPMOX v0.9.0 speaks to Proxmox
VE through go-proxmox v0.6.0: JSON bodies on POST and PUT (proxmox.go Post/Put), the cloud-init
ISO as a multipart upload (UploadReader: the field `content`, then the file as the part
`filename`), the ISO's volume ID unescaped in the path (storage.go ISO and deleteVolume), and the
calls of /work/shared/notes/real-controllers-study.md, "Proxmox VE calls on create, start and
delete", in CAPMOX's order.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from e2e.box.box import ALL_PRIVILEGES
from e2e.standins.proxmox import pve_api_standin
from e2e.standins.proxmox.pve_api_standin import PveApiStandIn

TOKEN = "capmox@pve!capi"
CLONELESS, MONITORLESS = "narrow@pve!cloneless", "narrow@pve!monitorless"
SECRET = "5f0c2b1e-8d7a-4c3b-9e6f-112233445566"
NODE = "pv1-1"
TEMPLATE = 9000
VMID = 101
VM = f"/nodes/{NODE}/qemu/{VMID}"
NAME = "lab1-workers-7x2kq-abcde"
ISO_NAME = f"user-data-{VMID}.iso"
ISO_VOLID = f"local:iso/{ISO_NAME}"
ISO = b"\0" * 32768 + b"\x01CD001\x01" + b"cidata".ljust(32) + b"\0" * 4000
CLOUD_INIT_TAG = "go-proxmox+cloud-init"
OS_INFO = {"id": "ubuntu", "name": "Ubuntu", "pretty-name": "Ubuntu 24.04.3 LTS", "version-id": "24.04"}


@dataclass
class AgentGuest:
    """A guest whose agent answers once `agent` is set, running only `cloud-init status`."""

    agent: bool = False
    started_with: dict[int, dict[str, str]] = field(default_factory=dict)
    events: list[tuple[str, int]] = field(default_factory=list)

    def start(self, vmid: int, config: dict[str, str]) -> None:
        self.events.append(("start", vmid))
        self.started_with[vmid] = config

    def stop(self, vmid: int) -> None:
        self.events.append(("stop", vmid))

    def destroy(self, vmid: int) -> None:
        self.events.append(("destroy", vmid))

    def agent_interfaces(self, vmid: int) -> list[dict[str, Any]] | None:
        return None

    def agent_osinfo(self, vmid: int) -> dict[str, Any] | None:
        return dict(OS_INFO) if self.agent else None

    def agent_exec(self, vmid: int, command: list[str], input_data: str) -> dict[str, Any] | None:
        if not self.agent:
            return None
        assert (command, input_data) == (["cloud-init", "status"], "")
        return {"exitcode": 0, "out-data": "status: done\n"}


@dataclass
class Answer:
    status: int
    reason: str
    data: Any
    errors: dict[str, str] | None = None


def send(
    standin: PveApiStandIn,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    secret: str = SECRET,
    token: str = TOKEN,
    content_type: str = "application/json",
    raw: bytes | None = None,
) -> Answer:
    """As go-proxmox's Client.Req: the path as formatted (a query string in it for GET), a JSON
    body with its content type, or `raw` as it is."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(standin.url.rstrip("/") + "/api2/json" + path, data=data, method=method)  # noqa: S310
    if data is not None:
        request.add_header("Content-Type", content_type)
    request.add_header("Authorization", f"PVEAPIToken={token}={secret}")
    request.add_header("Accept", "application/json")
    context = ssl.create_default_context(cafile=standin.certificate)
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:  # noqa: S310
            return Answer(answer.status, answer.reason, json.loads(answer.read())["data"])
    except urllib.error.HTTPError as error:
        payload = json.loads(error.read())
        return Answer(error.code, error.reason, payload["data"], payload.get("errors"))


def upload(standin: PveApiStandIn, storage: str, filename: str, content: bytes, **kwargs: Any) -> Answer:
    """As go-proxmox's Storage.Upload through UploadReader: a multipart body with the field
    `content` and the file in the part `filename`."""
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="content"\r\n\r\niso\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="filename"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return send(
        standin,
        "POST",
        f"/nodes/{NODE}/storage/{storage}/upload",
        raw=body,
        content_type=f"multipart/form-data; boundary={boundary}",
        **kwargs,
    )


def done(standin: PveApiStandIn, answer: Answer, kind: str) -> None:
    """The task's UPID is of `kind` and the task ended well (go-proxmox's Task.WaitFor)."""
    assert answer.status == 200, answer
    assert f":{kind}:" in answer.data
    # As go-proxmox (tasks.go Ping) puts it in the path: not escaped.
    path = f"/nodes/{NODE}/tasks/{answer.data}/status"
    for _ in range(50):
        status = send(standin, "GET", path).data
        if status["status"] == "stopped":
            assert status["exitstatus"] == "OK", status
            return
        time.sleep(0.1)
    raise AssertionError(f"task {answer.data} still running")


def config(standin: PveApiStandIn, vmid: int = VMID) -> dict[str, Any]:
    answer = send(standin, "GET", f"/nodes/{NODE}/qemu/{vmid}/config")
    assert answer.status == 200, answer
    return dict(answer.data)


def without(privilege: str) -> dict[str, dict[str, int]]:
    return {"/": {name: 1 for name in ALL_PRIVILEGES["/"] if name != privilege}}


@pytest.fixture
def guest() -> AgentGuest:
    return AgentGuest()


@pytest.fixture
def standin(tmp_path: Path, guest: AgentGuest) -> Iterator[PveApiStandIn]:
    tokens = {(TOKEN, SECRET): ALL_PRIVILEGES, (MONITORLESS, SECRET): without("VM.Monitor")}
    tokens[(CLONELESS, SECRET)] = without("VM.Clone")
    with pve_api_standin.serve(tokens, tmp_path, guest=guest) as running:
        running.made_template(TEMPLATE, "ubuntu-2404-kube", disk_gib=10)
        yield running
    assert running.unknown == []


def cloned(standin: PveApiStandIn) -> None:
    """CAPMOX's createVM: a full clone of the template to VMID, waited on."""
    clone = {"newid": VMID, "full": 1, "name": NAME, "target": NODE}
    done(standin, send(standin, "POST", f"/nodes/{NODE}/qemu/{TEMPLATE}/clone", clone), "qmclone")


# --- the whole walk ------------------------------------------------------------------------------


def test_capmox_creates_configures_boots_checks_and_deletes_a_worker(standin: PveApiStandIn, guest: AgentGuest) -> None:
    assert send(standin, "GET", "/version").data["release"] == "8.4"
    # CloneVM and the scheduler: the node, its VMs and containers, the template, a free VMID.
    memory = send(standin, "GET", f"/nodes/{NODE}/status").data["memory"]
    assert (memory["total"], memory["used"] + memory["free"]) == (64 << 30, 64 << 30)
    listed = send(standin, "GET", f"/nodes/{NODE}/qemu").data
    assert [(vm["vmid"], vm["name"], vm.get("template")) for vm in listed] == [(TEMPLATE, "ubuntu-2404-kube", 1)]
    assert send(standin, "GET", f"/nodes/{NODE}/lxc").data == []
    template = config(standin, TEMPLATE)
    assert template["scsi0"] == "local-lvm:base-9000-disk-0,size=10G"
    assert (template["boot"], template["agent"], template["template"]) == ("order=scsi0", "1", 1)
    assert send(standin, "GET", "/cluster/status").data == [
        {"type": "node", "id": f"node/{NODE}", "name": NODE, "ip": "127.0.0.1", "local": 1}
        | {"nodeid": 0, "online": 1, "level": ""}
    ]
    assert send(standin, "GET", f"/cluster/nextid?vmid={VMID}").data == str(VMID)
    cloned(standin)
    vm = config(standin)
    assert (vm["name"], vm["scsi0"], "template" in vm) == (NAME, "local-lvm:vm-101-disk-0,size=10G", False)
    assert vm["net0"].startswith("virtio=BC:24:11:")
    assert vm["net0"] != template["net0"]
    assert vm["smbios1"].startswith("uuid=")
    assert vm["smbios1"] != template["smbios1"]
    # reconcileVirtualMachineConfig, reconcileDisks, the IP tag.
    sizing = {"sockets": 1, "cores": 4, "memory": 4096, "net0": "virtio,bridge=vmbr0,tag=4"}
    done(standin, send(standin, "POST", f"{VM}/config", sizing), "qmconfig")
    done(standin, send(standin, "PUT", f"{VM}/resize", {"disk": "scsi0", "size": "20G"}), "resize")
    done(standin, send(standin, "POST", f"{VM}/config", {"tags": "ip_net0_192.168.4.31"}), "qmconfig")
    vm = config(standin)
    assert (vm["sockets"], vm["cores"], vm["memory"], vm["scsi0"]) == (1, 4, 4096, "local-lvm:vm-101-disk-0,size=20G")
    model_mac, rest = vm["net0"].split(",", 1)
    assert model_mac.startswith("virtio=BC:24:11:")
    assert rest == "bridge=vmbr0,tag=4"
    # VirtualMachine.CloudInit: the ISO storage, the upload, the tag, the CD drive and boot order.
    storages = send(standin, "GET", f"/nodes/{NODE}/storage").data
    iso_storage = next(s for s in storages if s["enabled"] and "iso" in s["content"].split(","))
    assert iso_storage["storage"] == "local"
    done(standin, upload(standin, "local", ISO_NAME, ISO), "imgcopy")
    assert standin.volume_path(ISO_VOLID).read_bytes() == ISO
    tags = f"ip_net0_192.168.4.31;{CLOUD_INIT_TAG}"
    done(standin, send(standin, "POST", f"{VM}/config", {"tags": tags}), "qmconfig")
    mount = {"ide0": f"{ISO_VOLID},media=cdrom", "boot": f"{vm['boot']};ide0"}
    done(standin, send(standin, "POST", f"{VM}/config", mount), "qmconfig")
    assert (config(standin)["ide0"], config(standin)["boot"]) == (f"{ISO_VOLID},media=cdrom", "order=scsi0;ide0")
    # Power on; checkCloudInitStatus waits for the agent, then asks cloud-init.
    done(standin, send(standin, "POST", f"{VM}/status/start"), "qmstart")
    assert guest.started_with[VMID]["ide0"] == f"{ISO_VOLID},media=cdrom"
    assert send(standin, "GET", f"/nodes/{NODE}/status").data["memory"]["used"] == (2 << 30) + (4096 << 20)
    silent = send(standin, "GET", f"{VM}/agent/get-osinfo")
    assert (silent.status, silent.reason) == (500, "QEMU guest agent is not running")
    guest.agent = True
    assert send(standin, "GET", f"{VM}/agent/get-osinfo").data == {"result": OS_INFO}
    started = send(standin, "POST", f"{VM}/agent/exec", {"command": ["cloud-init", "status"], "input-data": ""})
    status = send(standin, "GET", f"{VM}/agent/exec-status?pid={started.data['pid']}").data
    assert status == {"exited": 1, "exitcode": 0, "out-data": "status: done\n"}
    # UnmountCloudInitISO: eject, find the ISO (its volume ID unescaped), delete it, drop the tag.
    done(standin, send(standin, "POST", f"{VM}/config", {"ide0": "none,media=cdrom"}), "qmconfig")
    iso = send(standin, "GET", f"/nodes/{NODE}/storage/local/content/{ISO_VOLID}")
    assert (iso.status, iso.data["size"], iso.data["path"]) == (200, len(ISO), f"/var/lib/vz/template/iso/{ISO_NAME}")
    done(standin, send(standin, "DELETE", f"/nodes/{NODE}/storage/local/content/{ISO_VOLID}"), "imgdel")
    with pytest.raises(FileNotFoundError):
        standin.volume_path(ISO_VOLID)
    done(standin, send(standin, "POST", f"{VM}/config", {"tags": "ip_net0_192.168.4.31"}), "qmconfig")
    # DeleteVM: the id is taken, the VM stops and goes; then the id is free.
    taken = send(standin, "GET", f"/cluster/nextid?vmid={VMID}")
    assert (taken.status, taken.reason, taken.errors) == (
        400,
        "Parameter verification failed.",
        {"vmid": "VM 101 already exists"},
    )
    done(standin, send(standin, "POST", f"{VM}/status/stop"), "qmstop")
    done(standin, send(standin, "DELETE", VM), "qmdestroy")
    assert send(standin, "GET", f"/cluster/nextid?vmid={VMID}").data == str(VMID)
    assert send(standin, "GET", "/cluster/nextid").data == "100"
    assert guest.events == [("start", VMID), ("stop", VMID), ("destroy", VMID)]
    assert [volume["volid"] for volume in send(standin, "GET", f"/nodes/{NODE}/storage/local-lvm/content").data] == [
        "local-lvm:base-9000-disk-0"
    ]
    assert ("POST", f"/api2/json{VM}/config", ("boot", "ide0")) in [(c.method, c.path, c.params) for c in standin.calls]


# --- refusals ------------------------------------------------------------------------------------


def test_a_token_without_the_privilege_is_refused_as_proxmox_refuses_it(standin: PveApiStandIn) -> None:
    clone = {"newid": VMID, "full": 1, "name": NAME}
    refused = send(standin, "POST", f"/nodes/{NODE}/qemu/{TEMPLATE}/clone", clone, token=CLONELESS)
    assert (refused.status, refused.reason) == (403, f"Permission check failed (/vms/{TEMPLATE}, VM.Clone)")
    assert VMID not in [vm["vmid"] for vm in send(standin, "GET", f"/nodes/{NODE}/qemu").data]
    cloned(standin)
    agent = send(standin, "GET", f"{VM}/agent/get-osinfo", token=MONITORLESS)
    assert (agent.status, agent.reason) == (403, f"Permission check failed (/vms/{VMID}, VM.Monitor)")


def test_an_unpropagated_privilege_holds_on_its_path_only(tmp_path: Path) -> None:
    tokens = {(TOKEN, SECRET): {"/": {"Sys.Audit": 0}, "/vms": {"VM.Audit": 1}}}
    with pve_api_standin.serve(tokens, tmp_path) as standin:
        standin.made_template(TEMPLATE, "ubuntu-2404-kube")
        assert send(standin, "GET", "/cluster/status").status == 200
        node = send(standin, "GET", f"/nodes/{NODE}/status")
        assert (node.status, node.reason) == (403, f"Permission check failed (/nodes/{NODE}, Sys.Audit)")
        assert send(standin, "GET", f"/nodes/{NODE}/qemu/{TEMPLATE}/status/current").status == 200
        assert send(standin, "GET", f"/nodes/{NODE}/storage").data == []


def test_a_linked_clone_needs_a_template_and_a_clone_needs_its_source(standin: PveApiStandIn) -> None:
    cloned(standin)
    linked = send(standin, "POST", f"{VM}/clone", {"newid": 102, "full": 0, "name": "linked"})
    assert (linked.status, linked.reason) == (
        500,
        "Linked clone feature is not supported for 'local-lvm:vm-101-disk-0' (scsi0)",
    )
    storage = send(standin, "POST", f"{VM}/clone", {"newid": 102, "full": 0, "storage": "local-lvm"})
    assert storage.reason == "parameter 'storage' not allowed for linked clones"
    linked_from_template = {"newid": 103, "name": "linked"}
    done(standin, send(standin, "POST", f"/nodes/{NODE}/qemu/{TEMPLATE}/clone", linked_from_template), "qmclone")
    assert config(standin, 103)["scsi0"] == "local-lvm:vm-103-disk-0,size=10G"
    again = send(standin, "POST", f"/nodes/{NODE}/qemu/{TEMPLATE}/clone", {"newid": VMID, "full": 1})
    assert again.reason == f"unable to create VM {VMID}: config file already exists"
    missing = send(standin, "POST", f"/nodes/{NODE}/qemu/9001/clone", {"newid": 104, "full": 1})
    assert (missing.status, missing.reason) == (
        500,
        f"Configuration file 'nodes/{NODE}/qemu-server/9001.conf' does not exist",
    )
    images = send(
        standin, "POST", f"/nodes/{NODE}/qemu/{TEMPLATE}/clone", {"newid": 104, "full": 1, "storage": "local"}
    )
    assert (images.status, images.errors) == (400, {"storage": "storage 'local' does not support vm images"})


def test_a_clone_whose_answer_is_lost_is_made_and_the_next_one_answered(standin: PveApiStandIn) -> None:
    standin.faults.clone_answers_lost = 1
    clone = {"newid": VMID, "full": 1, "name": NAME, "target": NODE}
    # The connection closes with nothing said, as go-proxmox then reads it (an EOF, no status).
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        send(standin, "POST", f"/nodes/{NODE}/qemu/{TEMPLATE}/clone", clone)
    assert config(standin, VMID)["name"] == NAME
    again = {**clone, "newid": VMID + 1}
    done(standin, send(standin, "POST", f"/nodes/{NODE}/qemu/{TEMPLATE}/clone", again), "qmclone")
    assert [vm["name"] for vm in send(standin, "GET", "/cluster/resources?type=vm").data if not vm["template"]] == [
        NAME,
        NAME,
    ]
    assert standin.faults.clone_answers_lost == 0


def test_the_agent_answers_only_while_the_vm_runs_and_its_agent_does(standin: PveApiStandIn, guest: AgentGuest) -> None:
    cloned(standin)
    guest.agent = True
    off = send(standin, "POST", f"{VM}/agent/exec", {"command": ["cloud-init", "status"], "input-data": ""})
    assert (off.status, off.reason) == (500, f"VM {VMID} is not running")
    done(standin, send(standin, "POST", f"{VM}/status/start"), "qmstart")
    guest.agent = False
    silent = send(standin, "POST", f"{VM}/agent/exec", {"command": ["cloud-init", "status"], "input-data": ""})
    assert (silent.status, silent.reason) == (500, "QEMU guest agent is not running")
    unknown_pid = send(standin, "GET", f"{VM}/agent/exec-status?pid=4242")
    assert (unknown_pid.status, unknown_pid.reason) == (500, "Agent error: Invalid parameter 'pid'")
    done(standin, send(standin, "POST", f"{VM}/config", {"delete": "agent"}), "qmconfig")
    unconfigured = send(standin, "GET", f"{VM}/agent/get-osinfo")
    assert unconfigured.reason == "No QEMU guest agent configured"


def test_what_the_standin_does_not_know_still_fails_loudly(standin: PveApiStandIn) -> None:
    cloned(standin)
    unknown = send(standin, "POST", f"{VM}/config", {"cores": 2, "hookscript": "local:snippets/x.sh"})
    assert (unknown.status, unknown.reason) == (
        501,
        f"stand-in does not know POST /api2/json{VM}/config parameter hookscript",
    )
    body = send(standin, "POST", f"{VM}/config", raw=b"<cores>2</cores>", content_type="application/xml")
    assert body.status == 501
    nested = send(standin, "POST", f"{VM}/config", {"cores": {"value": 2}})
    assert nested.status == 501
    assert config(standin)["cores"] == 2
    assert len(standin.unknown) == 3
    assert standin.calls[-4].params == ("cores", "hookscript")
    standin.unknown.clear()


# --- what Proxmox VE makes of CAPMOX's values ------------------------------------------------------


def test_tags_nics_and_boot_orders_are_taken_as_proxmox_takes_them(standin: PveApiStandIn) -> None:
    cloned(standin)
    done(standin, send(standin, "POST", f"{VM}/config", {"tags": "Zeta;ip_net0_10.0.0.5,zeta alpha"}), "qmconfig")
    assert config(standin)["tags"] == "alpha;ip_net0_10.0.0.5;zeta"
    assert send(standin, "GET", "/cluster/resources?type=vm").data[0]["tags"] == "alpha;ip_net0_10.0.0.5;zeta"
    kept = {"net0": "virtio=AA:BB:CC:00:11:22,bridge=vmbr1,mtu=1400"}
    done(standin, send(standin, "POST", f"{VM}/config", kept), "qmconfig")
    assert config(standin)["net0"] == "virtio=AA:BB:CC:00:11:22,bridge=vmbr1,mtu=1400"
    done(standin, send(standin, "POST", f"{VM}/config", {"net0": "virtio,bridge=vmbr0"}), "qmconfig")
    assert not config(standin)["net0"].startswith("virtio=AA:BB:CC:00:11:22")
    legacy = send(standin, "POST", f"{VM}/config", {"boot": "cdn;ide0"})
    assert (legacy.status, list(legacy.errors or {})) == (400, ["boot"])
    absent = send(standin, "POST", f"{VM}/config", {"boot": "order=scsi0;ide0"})
    assert (absent.status, absent.reason) == (500, "invalid bootorder: device 'ide0' does not exist'")
    missing_iso = {"ide0": "local:iso/user-data-999.iso,media=cdrom", "boot": "order=scsi0;ide0"}
    done(standin, send(standin, "POST", f"{VM}/config", missing_iso), "qmconfig")
    start = send(standin, "POST", f"{VM}/status/start")
    assert (start.status, start.reason) == (500, "volume 'local:iso/user-data-999.iso' does not exist")


def test_an_upload_lands_only_where_isos_may(standin: PveApiStandIn) -> None:
    lvm = upload(standin, "local-lvm", ISO_NAME, ISO)
    assert (lvm.status, lvm.reason) == (500, "can't upload to storage type 'lvmthin'")
    wrong = upload(standin, "local", "user-data-101.txt", ISO)
    assert (wrong.status, wrong.errors) == (400, {"filename": "wrong file extension"})
    assert send(standin, "GET", f"/nodes/{NODE}/storage/local/content").data == []
    assert standin.calls[-2].params == ("content", "filename")


def test_the_node_memory_is_the_standins_setting(tmp_path: Path) -> None:
    with pve_api_standin.serve({(TOKEN, SECRET): ALL_PRIVILEGES}, tmp_path, node_memory=16 << 30) as standin:
        memory = send(standin, "GET", f"/nodes/{NODE}/status").data["memory"]
        assert (memory["total"], memory["used"], memory["free"]) == (16 << 30, 2 << 30, 14 << 30)
