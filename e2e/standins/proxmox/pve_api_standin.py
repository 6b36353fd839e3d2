"""A stand-in for the Proxmox VE API: the program's own token and clone-source checks (`GET
/access/permissions`, whole or for one path, `GET /cluster/status`, a template's config and the
storages' `shared` flags), every call bpg/terraform-provider-proxmox v0.111.1 (in
pulumi-proxmoxve 8.3.0) makes for the program's `download.File` and `VmLegacy` (the call map:
/work/shared/notes/proxmox-api-calls-verified.md), and every call CAPMOX v0.9.0 makes through go-proxmox v0.6.0 to
clone, configure, boot, check and delete a worker VM (/work/shared/notes/real-controllers-study.md,
"Proxmox VE calls on create, start and delete"), over HTTPS with a self-signed certificate, on
127.0.0.1 or, inside a network namespace that a test made, on the lab's own address.

It answers from its own table of tokens, as Proxmox VE does: 401 for an unknown token id or a
wrong secret, and 403 for a call the token's privileges do not allow (each route's `permissions`
in qemu-server, pve-manager and pve-storage). Bodies are form-encoded (bpg), JSON (go-proxmox) or
multipart (go-proxmox's upload); answers are `{"data": ...}`, and failures a non-2xx status whose
reason phrase is Proxmox VE's message, with a 400's per-parameter `errors` in the body. The node's
storages, volumes, VMs and tasks live in a JSON file in the given directory
(e2e/standins/proxmox/pve_tasks.py), uploaded files beside it, so a stand-in started again there
goes on.

Every request is recorded with its parameter names (never their values). A call or parameter it
does not know is answered 501 naming it and recorded in `unknown`, so a test can fail on it.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from e2e.standins import https_server
from e2e.standins.proxmox.common import ROOT, ApiError, Ask, Faults, Guest, own_permissions, require
from e2e.standins.proxmox.pve_bodies import decode_body
from e2e.standins.proxmox.pve_clone import Clones, clone_permission
from e2e.standins.proxmox.pve_node import NODE_MEMORY, Node
from e2e.standins.proxmox.pve_storage import Storage
from e2e.standins.proxmox.pve_tasks import NodeState
from e2e.standins.proxmox.pve_vms import CONFIG_PRIVILEGES, Vms

PERMISSIONS_PATH = "/api2/json/access/permissions"
API_PREFIX = "/api2/json/"
WRITES = ("POST", "PUT", "DELETE")
NODE = "pv1-1"
VERSION = {"version": "8.4.1", "release": "8.4", "repoid": "2a5fa54a8503f96d"}


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    """Without the query string."""
    params: tuple[str, ...]
    """The names of the query and body parameters, sorted."""


@dataclass
class PveApiStandIn:
    url: str
    certificate: Path
    faults: Faults
    calls: list[Call] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """Each call the stand-in itself failed to carry out (a guest that could not boot, for one),
    answered 500 as Proxmox VE answers a task it could not start, never a dropped connection."""
    vms: Vms | None = None
    """The node's VMs, for `made_on_node`."""

    def made_on_node(self, vmid: int, qm_create: Mapping[str, str], volumes: Mapping[str, dict[str, Any]]) -> None:
        """What `qm create VMID ...`, `qm resize VMID scsi0 30G` and `qm start VMID` typed on the node
        leave, with `volumes` (the image `qm create`'s import-from reads) already on the storages.
        For the box's adoption (e2e/box/management/box_adoption.py): a VM this API did not make, so none of it
        is among `calls`. The same code as the API's calls stores it, as qm goes through the same
        library on a real node."""
        vms = self._vms_on_node()
        node = vms.state.node
        with vms.state.lock:
            vms.storage.volumes.update(volumes)
            vms.create(Ask(ROOT, {}, {"vmid": str(vmid), **qm_create}), node)
            vms.resize(Ask(ROOT, {}, {"disk": "scsi0", "size": "30G"}), node, str(vmid))
            vms.start(Ask(ROOT, {}, {}), node, str(vmid))
            vms.state.save()

    def qm_set(self, vmid: int, options: Mapping[str, str]) -> None:
        """`qm set VMID --KEY VALUE ...` typed on the node (docs/adoption.md step 2 asks the owner
        for one): not through this API, so not among `calls`."""
        vms = self._vms_on_node()
        with vms.state.lock:
            vms.update(Ask(ROOT, {}, dict(options)), vms.state.node, str(vmid))
            vms.state.save()

    def pvesm_free(self, volid: str) -> None:
        """`pvesm free VOLID` typed on the node (docs/operations.md, "Lost state or passphrase", has
        the owner delete the image file the lost stack downloaded): the storage's own delete, not
        through this API, so not among `calls`."""
        vms = self._vms_on_node()
        with vms.state.lock:
            vms.storage.delete(Ask(ROOT, {}, {}), vms.state.node, volid.split(":", 1)[0], volid)
            vms.state.save()

    def qm_reboot(self, vmid: int) -> None:
        """`qm reboot VMID` typed on the node (docs/adoption.md step 8.6 has the owner reboot in a
        window of their choosing): not through this API, so not among `calls`."""
        vms = self._vms_on_node()
        with vms.state.lock:
            vms.shutdown(Ask(ROOT, {}, {}), vms.state.node, str(vmid))
            vms.start(Ask(ROOT, {}, {}), vms.state.node, str(vmid))
            vms.state.save()

    def made_template(
        self,
        vmid: int,
        name: str,
        *,
        cores: int = 2,
        memory_mib: int = 2048,
        disk_gib: int = 32,
        mac: str | None = None,
        storage: str = "local-lvm",
    ) -> None:
        """What `qm create VMID --name NAME --cores C --memory M --scsi0 STORAGE:G --net0
        virtio=MAC,bridge=vmbr0 --agent 1 --boot order=scsi0 --scsihw virtio-scsi-pci --ostype l26
        && qm template VMID` typed on the node leave: a template whose disk is
        `STORAGE:base-VMID-disk-0` (a MAC made as Proxmox VE makes one unless given). Not
        through this API, so not among `calls`."""
        vms = self._vms_on_node()
        net0 = f"virtio={mac},bridge=vmbr0" if mac else "virtio,bridge=vmbr0"
        qm_create = {"vmid": str(vmid), "name": name, "cores": str(cores), "memory": str(memory_mib), "net0": net0}
        qm_create |= {"scsi0": f"{storage}:{disk_gib}", "agent": "1", "boot": "order=scsi0"}
        qm_create |= {"scsihw": "virtio-scsi-pci", "ostype": "l26"}
        with vms.state.lock:
            vms.create(Ask(ROOT, {}, qm_create), vms.state.node)
            vms.make_template(str(vmid))
            vms.state.save()

    def qm_destroy(self, vmid: int) -> None:
        """`qm destroy VMID` typed on the node (a template the owner removes): the API's delete,
        not through this API, so not among `calls`."""
        vms = self._vms_on_node()
        with vms.state.lock:
            vms.delete(Ask(ROOT, {}, {}), vms.state.node, str(vmid))
            vms.state.save()

    def qm_config(self, vmid: int) -> dict[str, Any]:
        """`qm config VMID` and `qm status VMID` typed on the node: the VM's config, and its power
        state as `status`. Not through this API, so not among `calls`."""
        vms = self._vms_on_node()
        with vms.state.lock:
            vm = vms.vm(vms.state.node, str(vmid))
            return {**vm["config"], "status": vm["status"]}

    def vms_on_node(self) -> dict[int, str]:
        """`qm list` typed on the node: each VM's name by VMID."""
        vms = self._vms_on_node()
        with vms.state.lock:
            return {int(vmid): vm["config"].get("name", "") for vmid, vm in vms.vms.items()}

    def volume_path(self, volid: str) -> Path:
        """The file holding a stored volume's bytes (`local:iso/user-data-101.iso`, which CAPMOX
        uploaded), for a guest or a test to read."""
        path = self._vms_on_node().storage.file(volid)
        if not path.is_file():
            raise FileNotFoundError(f"the stand-in holds no file for volume {volid!r}")
        return path

    def _vms_on_node(self) -> Vms:
        """The node's VMs, for a `qm` command typed on the node while the stand-in serves."""
        if self.vms is None:
            raise RuntimeError("the stand-in is not serving")
        return self.vms

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request."""
        return [(call.method, call.path) for call in self.calls]

    @property
    def writes(self) -> list[Call]:
        return [call for call in self.calls if call.method in WRITES]


Permission = Callable[[Ask, Mapping[str, Any]], None]
"""A route's `permissions` check, given the Ask and the path's segments with the parameters."""


def perm(template: str, *privileges: str, any_of: bool = False) -> Permission:
    """`check => ['perm', template, privileges]`: `{name}` filled in from the path and parameters."""
    return lambda ask, found: require(ask, template.format_map(found), *privileges, any_of=any_of)


@dataclass(frozen=True)
class Route:
    method: str
    pattern: str
    """Path segments after /api2/json/; `{name}` matches one segment, percent-decoded."""
    params: frozenset[str]
    answer: Callable[..., object]
    """Called with the Ask and, as keywords, the segments the pattern names."""
    permission: Permission | None = None
    """None where Proxmox VE lets every user call (`user => 'all'`, which may still filter or
    check in the call itself)."""


def routes(vms: Vms, storage: Storage, state: NodeState, node: Node) -> list[Route]:
    """Every call served, each where the provider makes it (paths and parameters as in
    proxmox/nodes/**, proxmox/cluster, proxmox/pools, proxmox/version of the provider) or where
    go-proxmox v0.6.0 makes it for CAPMOX (nodes.go, cluster.go, storage.go, virtual_machine.go),
    with Proxmox VE's privilege checks on the calls CAPMOX makes."""
    vm, disk = "nodes/{node}/qemu/{vmid}", "nodes/{node}/storage/{storage}"
    task = "nodes/{node}/tasks/{upid}"
    create = frozenset(
        (
            *("acpi", "agent", "balloon", "bios", "boot", "ciuser", "cores", "cpu", "description", "ide2", "ide3"),
            *("ipconfig0", "keyboard", "memory", "name", "nameserver", "net0", "numa", "onboot", "ostype"),
            *("protection", "scsi0", "scsihw", "serial0", "sockets", "sshkeys", "tablet", "template", "vga"),
        )
    )
    # What CAPMOX's config updates add: its tags and its cloud-init ISO's CD drive.
    config = create | {"delete", "tags", "ide0"}
    download = "checksum checksum-algorithm content filename node storage url verify-certificates"
    clone = "newid name full format target description pool snapname storage"
    audit, power, monitor = (
        perm("/vms/{vmid}", "VM.Audit"),
        perm("/vms/{vmid}", "VM.PowerMgmt"),
        perm("/vms/{vmid}", "VM.Monitor"),
    )
    configure = perm("/vms/{vmid}", *CONFIG_PRIVILEGES, any_of=True)

    def p(names: str = "") -> frozenset[str]:
        return frozenset(names.split())

    def whole(answer: Callable[..., object]) -> Callable[..., object]:
        """A volume ID that go-proxmox sends unescaped (`local:iso/user-data-101.iso`): two
        segments, one volume."""
        return lambda a, node, storage, volid, name: answer(a, node, storage, f"{volid}/{name}")

    return [
        Route("GET", "access/permissions", p("path"), own_permissions),
        Route("GET", "version", p(), lambda a: VERSION),
        Route("GET", "cluster/resources", p("type"), vms.resources),
        Route("GET", "cluster/status", p(), node.cluster_status, perm("/", "Sys.Audit")),
        Route("GET", "cluster/nextid", p("vmid"), node.nextid),
        # No resource pools in the lab.
        Route("GET", "pools", p(), lambda a: []),
        Route("GET", "nodes/{node}/status", p(), node.status, perm("/nodes/{node}", "Sys.Audit")),
        Route("GET", "nodes/{node}/lxc", p(), node.containers),
        Route("GET", "nodes/{node}/query-url-metadata", p("url verify-certificates"), storage.url_metadata),
        Route("GET", "nodes/{node}/storage", p("content enabled format storage target"), storage.index),
        Route("POST", f"{disk}/download-url", p(download), storage.download),
        Route(
            "POST",
            f"{disk}/upload",
            p("content filename"),
            storage.upload,
            perm("/storage/{storage}", "Datastore.AllocateTemplate"),
        ),
        Route("GET", f"{disk}/content", p("content"), storage.listing),
        Route("GET", f"{disk}/content/{{volid}}", p(), storage.volume),
        Route("GET", f"{disk}/content/{{volid}}/{{name}}", p(), whole(storage.volume)),
        Route("DELETE", f"{disk}/content/{{volid}}", p(), storage.delete),
        Route("DELETE", f"{disk}/content/{{volid}}/{{name}}", p(), whole(storage.delete)),
        Route("GET", f"{task}/status", p(), state.task_status),
        Route("GET", f"{task}/log", p(), state.task_log),
        Route("DELETE", task, p(), state.stop_task),
        Route("GET", "nodes/{node}/qemu", p("full"), vms.listing),
        Route("POST", "nodes/{node}/qemu", create | {"vmid"}, vms.create),
        Route("POST", f"{vm}/clone", p(clone), Clones(vms).clone, clone_permission),
        Route("GET", f"{vm}/config", p(), vms.config, audit),
        Route("PUT", f"{vm}/config", config, vms.update, configure),
        Route("POST", f"{vm}/config", config, vms.update_async, configure),
        Route("PUT", f"{vm}/cloudinit", p(), vms.regenerate_cloudinit),
        Route("PUT", f"{vm}/resize", p("disk size"), vms.resize, perm("/vms/{vmid}", "VM.Config.Disk")),
        Route("GET", f"{vm}/status/current", p(), vms.status, audit),
        Route("POST", f"{vm}/status/start", p("timeout"), vms.start, power),
        Route("POST", f"{vm}/status/shutdown", p("forceStop timeout"), vms.shutdown),
        Route("POST", f"{vm}/status/stop", p(), vms.stop, power),
        Route("DELETE", vm, p("destroy-unreferenced-disks purge"), vms.delete, perm("/vms/{vmid}", "VM.Allocate")),
        Route("GET", f"{vm}/agent/network-get-interfaces", p(), vms.agent_interfaces),
        Route("GET", f"{vm}/agent/get-osinfo", p(), node.agent_osinfo, monitor),
        Route("POST", f"{vm}/agent/exec", p("command input-data"), node.agent_exec, monitor),
        Route("GET", f"{vm}/agent/exec-status", p("pid"), node.agent_exec_status, monitor),
    ]


def match(route: Route, method: str, segments: list[str]) -> dict[str, str] | None:
    pattern = route.pattern.split("/")
    if method != route.method or len(pattern) != len(segments):
        return None
    found = {}
    for expected, segment in zip(pattern, segments, strict=True):
        if re.fullmatch(r"\{\w+\}", expected):
            found[expected[1:-1]] = urllib.parse.unquote(segment)
        elif expected != segment:
            return None
    return found


@contextmanager
def serve(
    tokens: Mapping[tuple[str, str], Mapping[str, Mapping[str, int]]],
    directory: Path,
    address: tuple[str, int] = ("127.0.0.1", 0),
    *,
    guest: Guest | None = None,
    node: str = NODE,
    trusted_certificates: Path | None = None,
    node_memory: int = NODE_MEMORY,
    peers: Mapping[str, bool] | None = None,
    nas: bool = False,
) -> Iterator[PveApiStandIn]:
    """The stand-in at `address` (an ephemeral loopback port by default), for the block, keeping
    its node's state in `directory`; a download verifying certificates trusts
    `trusted_certificates` (a CA file) besides the system's; the node has `node_memory` bytes of
    memory (what CAPMOX's scheduler reserves against). With `peers` (name -> online) the node is
    in a cluster with them, whose calls it does not serve; with `nas` it mounts an NFS storage
    `nas` for VM disks, shared by the cluster (pve_storage.NAS)."""
    key, cert = https_server.self_signed_certificate(directory, "pve-standin", address[0])
    faults = Faults()
    state = NodeState(directory, node, tuple(peers or {}))
    storage = Storage(state, faults, trusted_certificates, nas=nas)
    vms = Vms(state, storage, guest, faults)
    served = routes(vms, storage, state, Node(vms, address[0], node_memory, peers or {}))
    standin: PveApiStandIn

    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0 (the default) closes each connection after its answer, so a client never
        # reaches a stopped stand-in over a kept-alive connection after a restart.

        def do_GET(self) -> None:
            self._handle()

        def do_POST(self) -> None:
            self._handle()

        def do_PUT(self) -> None:
            self._handle()

        def do_DELETE(self) -> None:
            self._handle()

        def _handle(self) -> None:
            raw_path, _, query = self.path.partition("?")
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            params: dict[str, Any] = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
            try:
                body, file = decode_body(self.headers.get("Content-Type", ""), raw)
            except ValueError as error:
                standin.calls.append(Call(self.command, raw_path, tuple(sorted(params))))
                self._unknown(f"{self.command} {raw_path} with {error}")
                return
            params |= body
            standin.calls.append(Call(self.command, raw_path, tuple(sorted(params))))
            segments = raw_path.removeprefix(API_PREFIX).rstrip("/").split("/")
            found = [(route, m) for route in served if (m := match(route, self.command, segments)) is not None]
            if not raw_path.startswith(API_PREFIX) or not found:
                self._unknown(f"{self.command} {raw_path}")
                return
            route, path = found[0]
            if extra := sorted(set(params) - route.params):
                self._unknown(f"{self.command} {raw_path} parameter {', '.join(extra)}")
                return
            auth = self.headers.get("Authorization", "")
            token_id, _, secret = auth.removeprefix("PVEAPIToken=").partition("=")
            permissions = tokens.get((token_id, secret)) if auth.startswith("PVEAPIToken=") else None
            if permissions is None:
                self._answer(401, None, "authentication failure")
                return
            ask = Ask(token_id, permissions, params, file)
            try:
                with state.lock:
                    if route.permission is not None:
                        route.permission(ask, {**params, **path})
                    data = route.answer(ask, **path)
                    # A read changes nothing, and the state is a growing document: CAPMOX polls.
                    if self.command in WRITES:
                        state.save()
                    lost = faults.answer_lost(route.pattern)
            except ApiError as error:
                self._answer(error.status, None, error.message, error.errors)
                return
            except Exception as error:  # any failure of its own is recorded and answered
                standin.failed.append(f"{self.command} {raw_path}: {error!r}")
                self._answer(500, None, f"stand-in failed: {error}")
                return
            if not lost:  # else closed with nothing said, as each connection is after its answer
                self._answer(200, data)

        def _unknown(self, what: str) -> None:
            standin.unknown.append(what)
            self._answer(501, None, f"stand-in does not know {what}")

        def _answer(
            self, status: int, data: object, message: str | None = None, errors: Mapping[str, str] | None = None
        ) -> None:
            reason = " ".join((message or "").split()) or None
            answer = {"data": data} | ({"message": f"{message}\n"} if message else {})
            payload = json.dumps(answer | ({"errors": errors} if errors else {})).encode()
            self.send_response(status, reason)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            """Requests are recorded above; nothing goes to stderr."""

    with https_server.serving(Handler, address, key, cert) as server:
        standin = PveApiStandIn(
            url=f"https://{address[0]}:{server.server_address[1]}/", certificate=cert, faults=faults, vms=vms
        )
        try:
            yield standin
        finally:
            for fetch in storage.fetches:
                fetch.join()
