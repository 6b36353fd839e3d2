"""Runs the whole program (__main__.py) under the Pulumi SDK's mocks and records its graph.

A run takes the stack config the Pulumi CLI would give the program: the defaults of Pulumi.yaml,
then Pulumi.lab.yaml, then the dummy secrets the README sets with `pulumi config set --secret`,
then per-test overrides. Every registered resource is recorded with its type, name, inputs,
parent, dependencies, provider and options. The mock monitor does not apply
additional_secret_outputs, and numbers come back as floats; both are accounted for here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import hashlib
import json
import re
import runpy
import subprocess
import tempfile
import urllib.error
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import rpc, settings
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.settings import ROOT
from pulumi.runtime.sync_await import _sync_await

from components import charts, credentials, hand_made_clusters, proxmox_api
from components.settings import DEFAULTS, SECRET_KEYS, config_value

REPO = Path(__file__).resolve().parent.parent
PROJECT = "lab-mgmt"
STACK = "lab"

DUMMY_SECRETS = {
    "proxmoxApiTokenSecret": "11111111-2222-4333-8444-555555555555",
    "capmoxTokenSecret": "66666666-7777-4888-9999-aaaaaaaaaaaa",
    "sshPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nZHVtbXk=\n-----END OPENSSH PRIVATE KEY-----\n",
}

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE8sY2Fr3y0Q0pq6o2m9r9hX9sJ1Wl0a3b4c5d6e7f8g"
SA_TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJyZWFkb25seSJ9.c2lnbmF0dXJl"
CA_DATA = "TFMwdExTMUNSVWRKVGlCRFJWSlVTVVpKUTBGVVJTMHRMUzB0Q2c9PQ=="


def client_certificate(days: int) -> str:
    """A real client certificate (PEM) as k3s issues the admin's, valid for `days` from now."""
    with tempfile.TemporaryDirectory() as directory:
        subprocess.run(
            [
                *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
                *("-keyout", f"{directory}/key.pem", "-out", f"{directory}/cert.pem", "-days", str(days)),
                *("-subj", "/O=system:masters/CN=system:admin"),
            ],
            check=True,
            capture_output=True,
        )
        return Path(directory, "cert.pem").read_text()


def not_after(certificate: str) -> datetime:
    """The certificate's notAfter as openssl reads it."""
    printed = subprocess.run(
        ["openssl", "x509", "-noout", "-enddate"], input=certificate, check=True, capture_output=True, text=True
    ).stdout
    return datetime.strptime(printed.strip(), "notAfter=%b %d %H:%M:%S %Y GMT").replace(tzinfo=UTC)


# k3s puts its client CA after the admin's certificate in client-certificate-data.
CLIENT_CA = client_certificate(3650)


def k3s_kubeconfig(certificate: str) -> str:
    """k3s's admin kubeconfig with `certificate` as the admin's client certificate."""
    certificate_data = base64.b64encode((certificate + CLIENT_CA).encode()).decode()
    return f"""apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: {CA_DATA}
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
preferences: {{}}
users:
- name: default
  user:
    client-certificate-data: {certificate_data}
    client-key-data: Y2xpZW50LWtleQ==
"""


# A year, as k3s issues it: far from its renewal window.
K3S_KUBECONFIG = k3s_kubeconfig(client_certificate(365))
WORKLOAD_KUBECONFIG = K3S_KUBECONFIG.replace("https://127.0.0.1:6443", "https://192.168.4.40:6443")

VM_MAC = "BC:24:11:4A:00:01"

SECRET = "__secret__"


def waits_for(condition: str) -> str:
    """The `pulumi.com/waitFor` annotation's value for `condition`, met only by the applied object
    (components/waits.py): the condition, then the annotation's own presence."""
    return json.dumps([condition, "jsonpath={.metadata.annotations['pulumi.com/waitFor']}"])


# The annotation that names the program's one field manager on every object it applies
# (components/field_manager.py), spelled out as a reader of the object finds it.
MANAGED = {"pulumi.com/patchFieldManager": "pulumi-kubernetes-lab-mgmt"}


UNKNOWN = "__unknown__"


def stack_config(overrides: Mapping[str, Any] | None = None, unset: tuple[str, ...] = ()) -> dict[str, str]:
    """Config as the CLI passes it: full keys, every value a string (JSON for lists)."""
    values: dict[str, Any] = dict(DEFAULTS)
    stack = yaml.safe_load((REPO / f"Pulumi.{STACK}.yaml").read_text())["config"]
    values.update({k.split(":", 1)[1]: v for k, v in stack.items()})
    values.update(DUMMY_SECRETS)
    values.update(overrides or {})
    for key in unset:
        values.pop(key, None)
    return {f"{PROJECT}:{k}": config_value(v) for k, v in values.items()}


def stack_workload_clusters() -> list[dict[str, Any]]:
    """The workload clusters Pulumi.lab.yaml declares (lab1), as a list of objects to change."""
    stack = yaml.safe_load((REPO / f"Pulumi.{STACK}.yaml").read_text())["config"]
    clusters: list[dict[str, Any]] = stack[f"{PROJECT}:workloadClusters"]
    return clusters


def _plain(value: Any) -> Any:
    """Deserialized RPC values to plain data: secrets as {SECRET: value}, unknowns as UNKNOWN,
    whole floats as ints."""
    if rpc.is_rpc_secret(value):
        return {SECRET: _plain(rpc.unwrap_rpc_secret(value))}
    if isinstance(value, pulumi.output.Unknown) or value == rpc.UNKNOWN:
        return UNKNOWN
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def unsecret(value: Any) -> Any:
    """The value with every secret marker stripped."""
    if isinstance(value, dict):
        if set(value) == {SECRET}:
            return unsecret(value[SECRET])
        return {k: unsecret(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unsecret(v) for v in value]
    return value


def contains_plain(value: Any, needle: str) -> bool:
    """Whether `needle` occurs anywhere in `value` outside a secret."""
    if isinstance(value, dict):
        if set(value) == {SECRET}:
            return False
        return any(contains_plain(v, needle) for v in value.values())
    if isinstance(value, list):
        return any(contains_plain(v, needle) for v in value)
    return isinstance(value, str) and needle in value


@dataclass
class Resource:
    type: str
    name: str
    urn: str
    parent: str
    provider: str
    dependencies: list[str]
    inputs: dict[str, Any]
    additional_secret_outputs: list[str]
    protect: bool = False
    ignore_changes: list[str] = field(default_factory=list)
    replace_on_changes: list[str] = field(default_factory=list)
    delete_before_replace: bool = False
    custom_timeouts: dict[str, str] = field(default_factory=dict)
    import_id: str = ""
    retain_on_delete: bool = False
    deleted_with: str = ""

    @property
    def plain(self) -> dict[str, Any]:
        plain: dict[str, Any] = unsecret(self.inputs)
        return plain


@dataclass
class Run:
    resources: dict[tuple[str, str], Resource] = field(default_factory=dict)
    outputs: dict[str, tuple[Any, bool]] = field(default_factory=dict)
    permission_calls: list[tuple[str, str, str, bool]] = field(default_factory=list)
    """(endpoint, token id, token secret, insecure) of every token check the program made."""
    chart_requests: list[str] = field(default_factory=list)
    """The URL of every request to a chart repository."""
    cluster_reads: list[str] = field(default_factory=list)
    """The API path of every object the program read from the management cluster itself."""
    proxmox_reads: list[tuple[str, str]] = field(default_factory=list)
    """(token id, API path) of every other read of the Proxmox API (components.clone_sources)."""

    def get(self, type_: str, name: str) -> Resource:
        return self.resources[(type_, name)]

    def of_type(self, type_: str) -> list[Resource]:
        return sorted((r for r in self.resources.values() if r.type == type_), key=lambda r: r.name)

    def by_urn(self, urn: str) -> Resource:
        return next(r for r in self.resources.values() if r.urn == urn)

    def names(self) -> set[tuple[str, str]]:
        return set(self.resources)

    def depends_on(self, dependent: Resource, dependency: Resource) -> bool:
        """Directly or through other recorded resources."""
        seen: set[str] = set()
        todo = list(dependent.dependencies)
        while todo:
            urn = todo.pop()
            if urn == dependency.urn:
                return True
            if urn in seen:
                continue
            seen.add(urn)
            todo.extend(next((r.dependencies for r in self.resources.values() if r.urn == urn), []))
        return False


def _steps(path: str) -> list[int | str]:
    """A property path like `disks[0].importFrom` as keys and indices."""
    return [int(p) if p.isdigit() else p for p in re.split(r"\.|\[|\]\.?", path) if p]


_MISSING = object()


def _value_at(inputs: dict[str, Any], path: str) -> Any:
    node: Any = inputs
    for step in _steps(path):
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return node


def _without(inputs: dict[str, Any], path: str) -> dict[str, Any]:
    """A copy of `inputs` without the property at an ignoreChanges path like `disks[0].importFrom`."""
    steps = _steps(path)
    copy: Any = json.loads(json.dumps(inputs))
    node = copy
    for step in steps[:-1]:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return dict(copy)
    if isinstance(node, dict):
        node.pop(steps[-1], None)
    return dict(copy)


def _effective_inputs(resource: Resource, ignore_changes: list[str]) -> dict[str, Any]:
    inputs = resource.inputs
    for path in ignore_changes:
        inputs = _without(inputs, path)
    return inputs


def changed(before: Run, after: Run) -> set[tuple[str, str]]:
    """Resources that the engine would add, remove, or update between two runs: other inputs
    (minus the paths the new run's ignoreChanges keeps from the old state) or other options."""
    keys = before.names() | after.names()
    result = set()
    for key in keys:
        a, b = before.resources.get(key), after.resources.get(key)
        if a is None or b is None:
            result.add(key)
            continue
        fields_a = (_effective_inputs(a, b.ignore_changes), a.protect, a.ignore_changes, a.provider)
        fields_b = (_effective_inputs(b, b.ignore_changes), b.protect, b.ignore_changes, b.provider)
        if fields_a != fields_b:
            result.add(key)
    return result


# Every privilege either token is asked for, on `/`: what a correctly set up lab answers.
FULL_PERMISSIONS: dict[str, dict[str, int]] = {
    "/": dict.fromkeys(
        (
            *credentials.PROGRAM_PRIVILEGES,
            *credentials.CAPMOX_ROOT_PRIVILEGES,
            *credentials.CAPMOX_PRIVILEGES,
            credentials.CAPMOX_GUEST_AGENT[0],
        ),
        1,
    )
}
TokenTable = Mapping[tuple[str, str], Mapping[str, Mapping[str, int]]]


def configured_tokens(config: Mapping[str, str]) -> TokenTable:
    """Both tokens exactly as the stack config has them, each with every privilege."""
    return {
        (config[f"{PROJECT}:{id_key}"], config[f"{PROJECT}:{secret_key}"]): FULL_PERMISSIONS
        for id_key, secret_key in (
            ("proxmoxApiTokenId", "proxmoxApiTokenSecret"),
            ("capmoxTokenId", "capmoxTokenSecret"),
        )
        if f"{PROJECT}:{id_key}" in config and f"{PROJECT}:{secret_key}" in config
    }


def _permissions_table(run: Run, tokens: TokenTable) -> credentials.PermissionsReader:
    """Stands in for the Proxmox API's permissions call, which must never leave this machine in
    a test: answers from `tokens` (id, secret) -> permissions, a 401 for any other pair."""

    def read(endpoint: str, token_id: str, token_secret: str, *, insecure: bool) -> credentials.Permissions:
        run.permission_calls.append((endpoint, token_id, token_secret, insecure))
        if (token_id, token_secret) not in tokens:
            raise credentials.TokenRejectedError(f"{endpoint} rejected token {token_id}")
        return tokens[(token_id, token_secret)]

    return read


@dataclass(frozen=True)
class ProxmoxSite:
    """What the Proxmox VE API answers components.clone_sources: the cluster's nodes (name ->
    online), its VMs' configs by (node, VMID) and its storages (name -> shared)."""

    nodes: Mapping[str, bool]
    vms: Mapping[tuple[str, int], Mapping[str, Any]]
    storages: Mapping[str, bool] = field(default_factory=dict)


def configured_site(config: Mapping[str, str]) -> ProxmoxSite:
    """A lab set up as the stack config says: every node it names online, and each workload
    cluster's templateVmId a template on its sourceNode."""
    node = config[f"{PROJECT}:proxmoxNode"]
    clusters = json.loads(config.get(f"{PROJECT}:workloadClusters", "[]"))
    sources = {(entry.get("sourceNode", node), int(entry["templateVmId"])) for entry in clusters}
    named = {node, *(source for source, _ in sources)}
    named |= {allowed for entry in clusters for allowed in entry.get("allowedNodes", [])}
    templates = {source: {"name": f"ubuntu-2404-kube-{source[1]}", "template": 1} for source in sources}
    return ProxmoxSite(dict.fromkeys(named, True), templates)


def _proxmox_site(run: Run, given: ProxmoxSite | None, config: Mapping[str, str], tokens: TokenTable) -> Any:
    """Stands in for proxmox_api.get, which must never leave this machine in a test: the reads
    components.clone_sources makes, answered as Proxmox VE answers them from the `given` site or,
    by default, `configured_site` (read at the first call: a config the program refuses is never
    read here), and a token's privileges on one path from `tokens`; any other path fails the run."""

    def get(token: proxmox_api.Token, path: str) -> object:
        run.proxmox_reads.append((token.token_id, path))
        site = given or configured_site(config)
        if path == "cluster/status":
            return [{"type": "node", "name": name, "online": int(up)} for name, up in site.nodes.items()]
        if path.startswith("access/permissions?"):
            [acl_path] = urllib.parse.parse_qs(path.partition("?")[2])["path"]
            table = tokens.get((token.token_id, token.token_secret))
            if table is None:
                raise proxmox_api.ApiCallError(401, "authentication failure")
            held = {privilege for privileges in table.values() for privilege in privileges}
            return {acl_path: {p: 1 for p in sorted(held) if credentials.holds(table, acl_path, p)}}
        if re.fullmatch(r"nodes/[^/]+/storage", path):
            return [{"storage": name, "shared": int(shared)} for name, shared in site.storages.items()]
        found = re.fullmatch(r"nodes/([^/]+)/qemu/(\d+)/config", path)
        if found is None:
            raise AssertionError(f"the harness's Proxmox API does not know GET {path}")
        node, vmid = found[1], int(found[2])
        if node not in site.nodes:
            raise proxmox_api.ApiCallError(500, f"no such cluster node '{node}'")
        if (node, vmid) not in site.vms:
            raise proxmox_api.ApiCallError(
                500, f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
            )
        return dict(site.vms[(node, vmid)])

    return get


def replaced(before: Run, after: Run) -> set[tuple[str, str]]:
    """Resources that the engine would replace because a property named in the new run's
    replaceOnChanges changed. The mocks know no provider's ForceNew properties: this is only what
    the program asks for itself."""
    result = set()
    for key in before.names() & after.names():
        a, b = before.resources[key], after.resources[key]
        if any(_value_at(a.inputs, path) != _value_at(b.inputs, path) for path in b.replace_on_changes):
            result.add(key)
    return result


class _Mocks(pulumi.runtime.Mocks):
    def __init__(
        self, previous_outputs: Mapping[str, Any] | None, vm_mac: str, live_outputs: Mapping[str, Mapping[str, Any]]
    ) -> None:
        self.previous_outputs = dict(previous_outputs or {})
        self.vm_mac = vm_mac
        self.live_outputs = live_outputs

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        outputs = dict(args.inputs)
        if args.typ == "command:remote:Command":
            outputs["stdout"] = {
                "host-ready": HOST_KEY + "\n",
                "read-kubeconfig": K3S_KUBECONFIG,
            }.get(args.name.split("-", 1)[1], "")
            outputs["stderr"] = ""
        elif args.typ == "pulumi:pulumi:StackReference":
            outputs["outputs"] = self.previous_outputs
            outputs["secretOutputNames"] = []
        elif args.typ == "kubernetes:core/v1:Secret":
            if outputs.get("type") == "kubernetes.io/service-account-token":
                outputs["data"] = {"token": base64.b64encode(SA_TOKEN.encode()).decode(), "ca.crt": CA_DATA}
            elif args.resource_id:
                outputs["data"] = {"value": base64.b64encode(WORKLOAD_KUBECONFIG.encode()).decode()}
        elif args.typ == "proxmoxve:index/vmLegacy:VmLegacy":
            # Proxmox picks the MAC address when it creates the VM.
            outputs["networkDevices"] = [{**nic, "macAddress": self.vm_mac} for nic in outputs["networkDevices"]]
            # The provider's id of a VM is its VMID, created or imported (as node/VMID) alike.
            outputs.update(self.live_outputs.get(args.name, {}))
            return str(int(args.inputs["vmId"])), outputs
        elif args.typ == "proxmoxve:download/file:File":
            inputs = args.inputs
            return f"{inputs['datastoreId']}:{inputs['contentType']}/{inputs['fileName']}", outputs
        outputs.update(self.live_outputs.get(args.name, {}))
        return (args.resource_id or f"{args.name}-id"), outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


class _RecordingMonitor(MockMonitor):
    def __init__(self, mocks: _Mocks, run: Run) -> None:
        super().__init__(mocks)
        self.run = run

    def _record(self, request: Any, response: Any, inputs: dict[str, Any], **options: Any) -> None:
        self.run.resources[(request.type, request.name)] = Resource(
            type=request.type,
            name=request.name,
            urn=response.urn,
            parent=request.parent,
            provider=request.provider,
            dependencies=sorted(request.dependencies),
            inputs=_plain(inputs),
            additional_secret_outputs=list(request.additionalSecretOutputs),
            **options,
        )

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - the gRPC method's name
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        self._record(
            request,
            response,
            rpc.deserialize_properties(request.object) if request.object else {},
            protect=request.protect if request.HasField("protect") else False,
            ignore_changes=list(request.ignoreChanges),
            replace_on_changes=list(request.replaceOnChanges),
            delete_before_replace=request.deleteBeforeReplace,
            custom_timeouts={
                op: value for op in ("create", "update", "delete") if (value := getattr(request.customTimeouts, op))
            },
            import_id=request.importId,
            retain_on_delete=request.retainOnDelete if request.HasField("retainOnDelete") else False,
            deleted_with=request.deletedWith,
        )
        return response

    def ReadResource(self, request: Any) -> Any:  # noqa: N802 - the gRPC method's name
        """A read (a StackReference, a `get`) is part of the graph too; it has no options."""
        response = super().ReadResource(request)  # type: ignore[no-untyped-call]
        self._record(request, response, rpc.deserialize_properties(request.properties))
        return response


@contextlib.contextmanager
def _patched(module: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


# Each chart the program installs: its repository's and its version's settings.
CHART_SETTINGS = (
    ("cert-manager", "certManagerChartRepo", "certManagerVersion"),
    ("cluster-api-operator", "capiOperatorChartRepo", "capiOperatorVersion"),
    ("cilium", "ciliumChartRepo", "ciliumVersion"),
    ("cluster-autoscaler", "clusterAutoscalerChartRepo", "clusterAutoscalerChartVersion"),
)


# The tests' stand-in for CAPMOX's cluster-template.yaml (the same variables and objects).
CLUSTER_TEMPLATE = REPO / "tests" / "data" / "cluster-template-test.yaml"


def chart_repositories(config: Mapping[str, str]) -> dict[str, bytes]:
    """URL -> content: what the configured chart repositories serve, in memory: an index listing
    the configured version of their chart, its archive under a path relative to the repository,
    and its sha256 (the archive is a stand-in the mocks never unpack); and CAPMOX's release
    assets, its cluster template (CLUSTER_TEMPLATE) for each release a declared cluster names."""
    release_url = config[f"{PROJECT}:capmoxReleaseUrl"].rstrip("/")
    files = {
        f"{release_url}/{release}/cluster-template.yaml": CLUSTER_TEMPLATE.read_bytes()
        for release in _template_releases(config.get(f"{PROJECT}:workloadClusters", "[]"))
    }
    for chart, repo_key, version_key in CHART_SETTINGS:
        repo, version = config[f"{PROJECT}:{repo_key}"].rstrip("/"), config[f"{PROJECT}:{version_key}"]
        archive = f"{chart} {version}\n".encode()
        entry = {
            "name": chart,
            "version": version,
            "urls": [f"charts/{chart}-{version}.tgz"],
            "digest": hashlib.sha256(archive).hexdigest(),
        }
        files[f"{repo}/index.yaml"] = yaml.safe_dump({"apiVersion": "v1", "entries": {chart: [entry]}}).encode()
        files[f"{repo}/charts/{chart}-{version}.tgz"] = archive
    return files


def _template_releases(workload_clusters: str) -> set[str]:
    """The templateVersions of the declared clusters; none where the setting is refused anyway."""
    try:
        clusters = json.loads(workload_clusters)
    except ValueError:
        return set()
    if not isinstance(clusters, list):
        return set()
    return {c["templateVersion"] for c in clusters if isinstance(c, dict) and isinstance(c.get("templateVersion"), str)}


def _fetch_from(served: Mapping[str, bytes], run: Run) -> Any:
    """components.charts.fetch for the block: `served` only, every request recorded; any other
    URL is out of reach, as a host that does not resolve is."""

    def fetch(url: str) -> bytes:
        run.chart_requests.append(url)
        if url not in served:
            raise urllib.error.URLError(f"{url} is out of reach")
        return served[url]

    return fetch


def _management_cluster(live: Mapping[str, Mapping[str, Any]], run: Run) -> Any:
    """components.hand_made_clusters.read_object for the block: `live` (API path -> object)
    only, every read recorded; any other object does not exist."""

    def read_object(kubeconfig: str, path: str, *, cluster: str = "the management cluster") -> Mapping[str, Any] | None:
        run.cluster_reads.append(path)
        return live.get(path)

    return read_object


def run_program(
    overrides: Mapping[str, Any] | None = None,
    unset: tuple[str, ...] = (),
    *,
    previous_outputs: Mapping[str, Any] | None = None,
    vm_mac: str = VM_MAC,
    live_outputs: Mapping[str, Mapping[str, Any]] | None = None,
    organization: str = "organization",
    tokens: TokenTable | None = None,
    preview: bool = False,
    record: Run | None = None,
    chart_directory: Path | None = None,
    charts_served: Mapping[str, bytes] | None = None,
    live_objects: Mapping[str, Mapping[str, Any]] | None = None,
    site: ProxmoxSite | None = None,
) -> Run:
    """Run __main__.py once with the lab stack's config changed by `overrides`/`unset`.
    `previous_outputs` are the stack outputs of the last deployment, as a StackReference to the
    stack itself sees them; a different `vm_mac` stands for a re-created VM; `live_outputs` (by
    resource name) are what the cloud reports back beyond the inputs. `organization` is what the
    CLI passes: `organization` for a self-managed (DIY) backend. `tokens` is what the Proxmox API
    stand-in accepts, (id, secret) -> permissions (default: both configured tokens, with every
    privilege). Pass `record` to keep what a run that raises
    registered before it failed. `chart_directory` is the project's folder where the program
    keeps the chart archives (a new empty one by default); `charts_served` what the chart
    repositories serve, URL -> content (by default, `chart_repositories` of the config);
    `live_objects` what the management cluster holds, API path -> object (by default nothing);
    `site` the Proxmox cluster's nodes and VMs (by default, `configured_site` of the config)."""
    run = record if record is not None else Run()
    mocks = _Mocks(previous_outputs, vm_mac, live_outputs or {})
    ROOT.set(None)
    pulumi.runtime.set_mocks(
        mocks,
        project=PROJECT,
        stack=STACK,
        organization=organization,
        preview=preview,
        monitor=_RecordingMonitor(mocks, run),
    )
    config = stack_config(overrides, unset)
    pulumi.runtime.set_all_config(config, [f"{PROJECT}:{k}" for k in SECRET_KEYS if f"{PROJECT}:{k}" in config])

    def program() -> None:
        runpy.run_path(str(REPO / "__main__.py"), run_name="__main__")

    try:
        table = configured_tokens(config) if tokens is None else tokens
        served = chart_repositories(config) if charts_served is None else charts_served
        with (
            _patched(credentials, "read_permissions", _permissions_table(run, table)),
            _patched(proxmox_api, "get", _proxmox_site(run, site, config, table)),
            _patched(charts, "fetch", _fetch_from(served, run)),
            _patched(hand_made_clusters, "read_object", _management_cluster(live_objects or {}, run)),
            tempfile.TemporaryDirectory() as empty,
            _patched(charts, "chart_directory", lambda: chart_directory or Path(empty)),
        ):
            pulumi.runtime.test(program)()  # type: ignore[no-untyped-call]
    except BaseException:
        # A failed run leaves futures holding its error; collect them now, so that asyncio does
        # not report them ("Future exception was never retrieved") at the end of the session.
        ROOT.set(None)
        settings.configure(settings.Settings(project=None, stack=None))
        # Every output that derives from a failed one holds the error too; the test has seen it.
        # One still pending when the run stopped (an apply waiting on the failed one) would fail
        # later, unseen: it is cancelled instead.
        for future in [obj for obj in gc.get_objects() if isinstance(obj, asyncio.Future)]:
            if future.done() and not future.cancelled():
                future.exception()
            elif not future.done():
                future.cancel()
        gc.collect()
        raise
    root = ROOT.get()
    for key, value in (getattr(root, "outputs", None) or {}).items():
        out = pulumi.Output.from_input(value)
        run.outputs[key] = (_sync_await(out.future()), _sync_await(out.is_secret()))
    return run
