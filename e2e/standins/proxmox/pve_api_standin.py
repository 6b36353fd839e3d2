"""A stand-in for the Proxmox VE API: the program's own token check (`GET /access/permissions`)
and every call bpg/terraform-provider-proxmox v0.111.1 (in pulumi-proxmoxve 8.3.0) makes for the
program's `download.File` and `VmLegacy` (the call map: /work/shared/notes/
proxmox-api-calls-verified.md), over HTTPS with a self-signed certificate, on 127.0.0.1 or, inside
a network namespace that a test made, on the lab's own address.

It answers from its own table of tokens, as Proxmox VE does: 401 for an unknown token id or a
wrong secret. Bodies are form-encoded; answers are `{"data": ...}`, and failures a non-2xx status
whose reason phrase is Proxmox VE's message. The node's storages, volumes, VMs and tasks live in
a JSON file in the given directory (e2e/standins/proxmox/pve_tasks.py), so a stand-in started again there goes on.

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
from e2e.standins.proxmox.common import ApiError, Ask, Faults, Guest
from e2e.standins.proxmox.pve_storage import Storage
from e2e.standins.proxmox.pve_tasks import NodeState
from e2e.standins.proxmox.pve_vms import Vms

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
            vms.create(Ask("root@pam", {}, {"vmid": str(vmid), **qm_create}), node)
            vms.resize(Ask("root@pam", {}, {"disk": "scsi0", "size": "30G"}), node, str(vmid))
            vms.start(Ask("root@pam", {}, {}), node, str(vmid))
            vms.state.save()

    def qm_set(self, vmid: int, options: Mapping[str, str]) -> None:
        """`qm set VMID --KEY VALUE ...` typed on the node (docs/adoption.md step 2 asks the owner
        for one): not through this API, so not among `calls`."""
        vms = self._vms_on_node()
        with vms.state.lock:
            vms.update(Ask("root@pam", {}, dict(options)), vms.state.node, str(vmid))
            vms.state.save()

    def pvesm_free(self, volid: str) -> None:
        """`pvesm free VOLID` typed on the node (docs/operations.md, "Lost state or passphrase", has
        the owner delete the image file the lost stack downloaded): the storage's own delete, not
        through this API, so not among `calls`."""
        vms = self._vms_on_node()
        with vms.state.lock:
            vms.storage.delete(Ask("root@pam", {}, {}), vms.state.node, volid.split(":", 1)[0], volid)
            vms.state.save()

    def qm_reboot(self, vmid: int) -> None:
        """`qm reboot VMID` typed on the node (docs/adoption.md step 8.6 has the owner reboot in a
        window of their choosing): not through this API, so not among `calls`."""
        vms = self._vms_on_node()
        with vms.state.lock:
            vms.shutdown(Ask("root@pam", {}, {}), vms.state.node, str(vmid))
            vms.start(Ask("root@pam", {}, {}), vms.state.node, str(vmid))
            vms.state.save()

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


@dataclass(frozen=True)
class Route:
    method: str
    pattern: str
    """Path segments after /api2/json/; `{name}` matches one segment, percent-decoded."""
    params: frozenset[str]
    answer: Callable[..., object]
    """Called with the Ask and, as keywords, the segments the pattern names."""


def routes(vms: Vms, storage: Storage, state: NodeState) -> list[Route]:
    """Every call served, each where the provider makes it (paths and parameters as in
    proxmox/nodes/**, proxmox/cluster, proxmox/pools, proxmox/version of the provider)."""
    vm, disk = "nodes/{node}/qemu/{vmid}", "nodes/{node}/storage/{storage}"
    task = "nodes/{node}/tasks/{upid}"
    create = frozenset(
        (
            *("acpi", "agent", "balloon", "bios", "boot", "ciuser", "cores", "cpu", "description", "ide2", "ide3"),
            *("ipconfig0", "keyboard", "memory", "name", "nameserver", "net0", "numa", "onboot", "ostype"),
            *("protection", "scsi0", "scsihw", "serial0", "sockets", "sshkeys", "tablet", "template", "vga"),
        )
    )
    download = "checksum checksum-algorithm content filename node storage url verify-certificates"

    def p(names: str = "") -> frozenset[str]:
        return frozenset(names.split())

    return [
        Route("GET", "access/permissions", p(), lambda a: a.permissions),
        Route("GET", "version", p(), lambda a: VERSION),
        Route("GET", "cluster/resources", p("type"), lambda a: vms.resources(a.params["type"])),
        # No resource pools in the lab.
        Route("GET", "pools", p(), lambda a: []),
        Route("GET", "nodes/{node}/query-url-metadata", p("url verify-certificates"), storage.url_metadata),
        Route("POST", f"{disk}/download-url", p(download), storage.download),
        Route("GET", f"{disk}/content", p("content"), storage.listing),
        Route("GET", f"{disk}/content/{{volid}}", p(), storage.volume),
        Route("DELETE", f"{disk}/content/{{volid}}", p(), storage.delete),
        Route("GET", f"{task}/status", p(), state.task_status),
        Route("GET", f"{task}/log", p(), state.task_log),
        Route("DELETE", task, p(), state.stop_task),
        Route("POST", "nodes/{node}/qemu", create | {"vmid"}, vms.create),
        Route("GET", f"{vm}/config", p(), vms.config),
        Route("PUT", f"{vm}/config", create | {"delete"}, vms.update),
        Route("POST", f"{vm}/config", create | {"delete"}, vms.update_async),
        Route("PUT", f"{vm}/cloudinit", p(), vms.regenerate_cloudinit),
        Route("PUT", f"{vm}/resize", p("disk size"), vms.resize),
        Route("GET", f"{vm}/status/current", p(), vms.status),
        Route("POST", f"{vm}/status/start", p("timeout"), vms.start),
        Route("POST", f"{vm}/status/shutdown", p("forceStop timeout"), vms.shutdown),
        Route("POST", f"{vm}/status/stop", p(), vms.stop),
        Route("DELETE", vm, p("destroy-unreferenced-disks purge"), vms.delete),
        Route("GET", f"{vm}/agent/network-get-interfaces", p(), vms.agent_interfaces),
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
) -> Iterator[PveApiStandIn]:
    """The stand-in at `address` (an ephemeral loopback port by default), for the block, keeping
    its node's state in `directory`; a download verifying certificates trusts
    `trusted_certificates` (a CA file) besides the system's."""
    key, cert = https_server.self_signed_certificate(directory, "pve-standin", address[0])
    faults = Faults()
    state = NodeState(directory, node)
    storage = Storage(state, faults, trusted_certificates)
    vms = Vms(state, storage, guest, faults)
    served = routes(vms, storage, state)
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
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
            params |= dict(urllib.parse.parse_qsl(body, keep_blank_values=True))
            standin.calls.append(Call(self.command, raw_path, tuple(sorted(params))))
            form = self.headers.get_content_type() == "application/x-www-form-urlencoded"
            if body and not form:
                self._unknown(f"{self.command} {raw_path} with a {self.headers.get_content_type()} body")
                return
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
            try:
                with state.lock:
                    data = route.answer(Ask(token_id, permissions, params), **path)
                    state.save()
            except ApiError as error:
                self._answer(error.status, None, error.message)
                return
            self._answer(200, data)

        def _unknown(self, what: str) -> None:
            standin.unknown.append(what)
            self._answer(501, None, f"stand-in does not know {what}")

        def _answer(self, status: int, data: object, message: str | None = None) -> None:
            reason = " ".join((message or "").split()) or None
            payload = json.dumps({"data": data} | ({"message": f"{message}\n"} if message else {})).encode()
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
