"""Every setting of the program, read once from the stack config and validated up front.

A bad value stops `pulumi preview` before any resource is registered, with one line per problem
that names the config key, what is wrong and what is expected.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pulumi
import yaml

PROJECT = "lab-mgmt"
REPO_ROOT = Path(__file__).resolve().parent.parent
# libyaml's safe loader where the installed PyYAML has it (the same documents, a fifth of the time
# or less): every run reads Pulumi.yaml here, in the time before anything is registered.
YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _declared_config() -> dict[str, dict[str, Any]]:
    """Pulumi.yaml's config block: every key with its type, default, secrecy and description, the
    one place a setting is declared (the CLI reads the same block)."""
    text = (REPO_ROOT / "Pulumi.yaml").read_text()
    config: dict[str, dict[str, Any]] = yaml.load(text, Loader=YAML_LOADER)["config"]  # noqa: S506 - a safe loader
    return config


_DECLARED = _declared_config()
# Optional, and secret: an ssh-agent serves instead. Pulumi.yaml cannot declare it, as the CLI
# requires a declared key that has no default, and a default would be a plain value.
_UNDECLARED_SECRET_KEYS = ("sshPrivateKey",)
# A list of objects, which Pulumi.yaml cannot declare (a project's config types are string,
# integer, boolean and arrays of those); absent is no workload cluster.
_UNDECLARED_KEYS = ("workloadClusters",)
KEYS = (*_DECLARED, *_UNDECLARED_SECRET_KEYS, *_UNDECLARED_KEYS)
"""Every key the program reads."""
SECRET_KEYS = (*(key for key, spec in _DECLARED.items() if spec.get("secret")), *_UNDECLARED_SECRET_KEYS)
"""The keys set with `pulumi config set --secret`."""
DEFAULTS: dict[str, Any] = {key: spec["default"] for key, spec in _DECLARED.items() if "default" in spec}
"""What the CLI gives the program for a key the stack leaves unset."""


def config_value(value: object) -> str:
    """A config value as the CLI passes it to the program: a string, JSON for a list."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


VMID_RANGE = (100, 999_999_999)
CORES_RANGE = (1, 64)
MEMORY_MIB_RANGE = (1024, 262_144)
DISK_GIB_RANGE = (10, 4096)
VLAN_RANGE = (1, 4094)
GENERATION_RANGE = (1, 1_000_000)
# Up to four hours: a slow link pulling every provider's image; a bound of 0 would fail at once.
PROVIDER_READY_MINUTES_RANGE = (1, 240)
WEBHOOK_MINUTES_RANGE = (1, 60)
SSH_DIAL_ATTEMPTS_RANGE = (5, 1000)

# The forms each upstream uses for its releases; anything else (empty, "latest", a branch) is refused.
K3S_VERSION = re.compile(r"^v\d+\.\d+\.\d+\+k3s\d+$")
V_SEMVER = re.compile(r"^v\d+\.\d+\.\d+$")
BARE_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
# How cloud-images.ubuntu.com names a build's directory: its date, maybe a respin number.
DATED_SERIAL = re.compile(r"^(?:release-)?((?:19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])(?:\.\d+)?)$")
# What `pveum user token add` prints as a token's secret.
TOKEN_SECRET = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
TOKEN_ID = re.compile(r"^[^@!\s]+@[^@!\s]+![A-Za-z][A-Za-z0-9._-]*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SSH_KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)


class SettingsError(pulumi.RunError, ValueError):
    """The stack config has one or more bad values; the message lists every one. A RunError, so
    the CLI shows the message alone, with no Python traceback above it."""


class _Reader:
    """Reads raw config values and collects every problem instead of stopping at the first.

    A bad or missing value is recorded and replaced by a neutral stand-in, so that the readers
    stay simple; parse_settings raises before any stand-in can be used.
    """

    def __init__(self, raw: Mapping[str, str]) -> None:
        self._raw = raw
        self.problems: list[str] = []
        self.warnings: list[str] = []

    def fail(self, key: str, message: str) -> None:
        self.problems.append(f"{PROJECT}:{key}: {message}")

    def warn(self, key: str, message: str) -> None:
        """A value accepted that the owner should know the cost of."""
        self.warnings.append(f"{PROJECT}:{key}: {message}")

    def _value(self, key: str) -> str:
        """The stack's value, or else Pulumi.yaml's default, as the CLI would have given it."""
        value = self._raw.get(key)
        if value is None and key in DEFAULTS:
            return config_value(DEFAULTS[key])
        return value or ""

    def optional(self, key: str) -> str | None:
        return self._value(key).strip() or None

    def verbatim(self, key: str) -> str | None:
        """Unstripped, for a key file whose last newline belongs to its format."""
        value = self._value(key)
        return value if value.strip() else None

    def text(self, key: str) -> str:
        value = self.optional(key)
        if value is None:
            self.fail(key, "is required but not set")
            return ""
        return value

    def integer(self, key: str, bounds: tuple[int, int], what: str) -> int:
        value = self.text(key)
        if not re.fullmatch(r"-?\d+", value):
            if value:
                self.fail(key, f"{value!r} is not a whole number")
            return bounds[0]
        number = int(value)
        if not bounds[0] <= number <= bounds[1]:
            self.fail(key, f"{number} is outside the {what} range {bounds[0]}..{bounds[1]}")
        return number

    def boolean(self, key: str) -> bool:
        value = self.text(key)
        if value.lower() not in ("true", "false"):
            if value:
                self.fail(key, f"{value!r} is not true or false")
            return False
        return value.lower() == "true"

    def matching(self, key: str, pattern: re.Pattern[str], expected: str) -> str:
        value = self.text(key)
        if value and not pattern.fullmatch(value):
            self.fail(key, f"{value!r} is not {expected}")
        return value

    def version(self, key: str, pattern: re.Pattern[str], example: str) -> str:
        value = self.text(key)
        if value.lower() in ("latest", "stable", "main", "master"):
            self.fail(key, f"{value!r} floats; pin a release of the form {example}")
        elif value and not pattern.fullmatch(value):
            self.fail(key, f"{value!r} is not a release of the form {example}")
        return value

    def token_secret(self, key: str) -> str:
        """A Proxmox API token secret; a bad one is refused without echoing it."""
        value = self.text(key)
        if value and not TOKEN_SECRET.fullmatch(value):
            self.fail(key, "is not a Proxmox API token secret (the UUID that `pveum user token add` prints)")
        return value

    def https_url(self, key: str) -> str:
        value = self.text(key)
        url = urlparse(value)
        if value and (url.scheme != "https" or not url.hostname):
            self.fail(key, f"{value!r} is not an https:// URL")
        return value

    def string_list(self, key: str) -> tuple[str, ...] | None:
        """The list, or None when it is missing or not a list (the problem is recorded)."""
        value = self.text(key)
        if not value:
            return None
        try:
            items = json.loads(value)
        except ValueError:
            items = None
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            self.fail(
                key,
                f"{value!r} is not a list of strings; give one entry each "
                f"(pulumi config set --path '{key}[0]' ...), not one comma-separated string",
            )
            return None
        return tuple(i.strip() for i in items)


# --- the Proxmox VE API: ManagementVm's provider and the token check ------------------------------


@dataclass(frozen=True)
class ProxmoxSettings:
    endpoint: str
    insecure: bool
    api_token_id: str
    api_token_secret: str = field(repr=False)
    node: str
    skip_credentials_check: bool


def _read_proxmox(r: _Reader) -> ProxmoxSettings:
    return ProxmoxSettings(
        endpoint=r.https_url("proxmoxEndpoint"),
        insecure=r.boolean("proxmoxInsecure"),
        api_token_id=r.matching("proxmoxApiTokenId", TOKEN_ID, "an API token id of the form user@realm!tokenname"),
        api_token_secret=r.token_secret("proxmoxApiTokenSecret"),
        node=r.matching("proxmoxNode", DNS_LABEL, "a Proxmox node name"),
        skip_credentials_check=r.boolean("skipCredentialsCheck"),
    )


# --- the VM: ManagementVm, and cloud-init as K3sNode reaches it -----------------------------------


@dataclass(frozen=True)
class VmSettings:
    vm_id: int
    name: str
    cores: int
    memory_mib: int
    disk_gib: int
    bridge: str
    vlan_tag: int | None
    address: ipaddress.IPv4Interface
    gateway: ipaddress.IPv4Address
    dns_servers: tuple[str, ...]
    disk_storage: str
    protected: bool
    rebuild_from_image: bool
    ci_user: str
    ssh_public_keys: tuple[str, ...]


def _read_vm(r: _Reader) -> VmSettings:
    vlan_text = r.text("vmVlanTag")
    vlan = int(vlan_text) if re.fullmatch(r"[0-9]+", vlan_text) else -1
    if vlan_text and vlan != 0 and not VLAN_RANGE[0] <= vlan <= VLAN_RANGE[1]:
        r.fail("vmVlanTag", f"{vlan_text!r} is not a VLAN id {VLAN_RANGE[0]}..{VLAN_RANGE[1]} (0 for untagged)")
    protected = r.boolean("vmProtected")
    rebuild = r.boolean("vmRebuildFromImage")
    if rebuild and protected:
        r.fail(
            "vmRebuildFromImage",
            "true needs vmProtected=false applied in an earlier `pulumi up` (see docs/operations.md)",
        )
    address = _read_address(r)
    return VmSettings(
        vm_id=r.integer("vmId", VMID_RANGE, "Proxmox VMID"),
        name=r.matching("vmName", DNS_LABEL, "a DNS label (lower case letters, digits, '-')"),
        cores=r.integer("vmCores", CORES_RANGE, "cores"),
        memory_mib=r.integer("vmMemoryMib", MEMORY_MIB_RANGE, "memory MiB"),
        disk_gib=r.integer("vmDiskGib", DISK_GIB_RANGE, "disk GiB"),
        bridge=r.matching("vmBridge", NAME, "a Linux bridge name"),
        vlan_tag=vlan or None,
        address=address or ipaddress.IPv4Interface("192.0.2.1/24"),
        gateway=_read_gateway(r, address),
        dns_servers=_read_list(r, "vmDnsServers", "an IP address of a DNS server", _is_ip_address),
        disk_storage=r.matching("vmDiskStorage", NAME, "a storage id"),
        protected=protected,
        rebuild_from_image=rebuild,
        ci_user=r.matching("ciUser", re.compile(r"^[a-z_][a-z0-9_-]*$"), "a Linux user name"),
        ssh_public_keys=_read_list(r, "sshPublicKeys", "an OpenSSH public key line", _is_ssh_public_key),
    )


def _read_address(r: _Reader) -> ipaddress.IPv4Interface | None:
    text = r.text("vmAddress")
    if not text:
        return None
    if "/" not in text:
        r.fail("vmAddress", f"{text!r} has no prefix length; expected e.g. 192.168.4.21/24")
        return None
    try:
        address = ipaddress.IPv4Interface(text)
    except ValueError:
        r.fail("vmAddress", f"{text!r} is not an IPv4 address with a prefix length, e.g. 192.168.4.21/24")
        return None
    if address.network.prefixlen < 31 and address.ip in (
        address.network.network_address,
        address.network.broadcast_address,
    ):
        r.fail("vmAddress", f"{text!r} is the network or broadcast address of its subnet")
    return address


def _read_gateway(r: _Reader, address: ipaddress.IPv4Interface | None) -> ipaddress.IPv4Address:
    text = r.text("vmGateway")
    try:
        gateway = ipaddress.IPv4Address(text)
    except ValueError:
        if text:
            r.fail("vmGateway", f"{text!r} is not an IPv4 address")
        return ipaddress.IPv4Address(0)
    if address is not None and gateway not in address.network:
        r.fail("vmGateway", f"{gateway} is outside the VM's subnet {address.network}")
    elif address is not None and gateway == address.ip:
        r.fail("vmGateway", f"{gateway} is the VM's own address")
    return gateway


def _read_list(r: _Reader, key: str, what: str, valid: Callable[[str], bool]) -> tuple[str, ...]:
    items = r.string_list(key)
    if items == ():
        r.fail(key, f"is empty; give at least one {what}")
    for item in items or ():
        if not valid(item):
            r.fail(key, f"{item[:40]!r} is not {what}")
    return items or ()


def _is_ip_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_ssh_public_key(line: str) -> bool:
    parts = line.split()
    if len(parts) < 2 or parts[0] not in SSH_KEY_TYPES:
        return False
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except binascii.Error:
        return False
    # The blob starts with its own key type; a pasted fragment or a mismatched type fails here.
    return blob[4 : 4 + len(parts[0])] == parts[0].encode()


# --- the cloud image: ManagementVm ----------------------------------------------------------------


@dataclass(frozen=True)
class ImageSettings:
    url: str
    sha256: str
    storage: str

    @property
    def serial(self) -> str | None:
        """The dated build serial a directory of the URL names (`20260926`, `release-20260926`,
        `20260926.1`); None for a floating one (`current`, `release`)."""
        parts = [p for p in urlparse(self.url).path.split("/") if p][:-1]
        return next((match[1] for p in reversed(parts) if (match := DATED_SERIAL.fullmatch(p))), None)

    @property
    def file_name(self) -> str:
        """Proxmox imports only files named *.qcow2 (the Ubuntu .img is qcow2); the serial in the
        URL's path keeps names of two image builds apart."""
        stem = urlparse(self.url).path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        return f"{stem}-{self.serial}.qcow2"


def _read_image(r: _Reader) -> ImageSettings:
    url = r.https_url("imageUrl")
    image = ImageSettings(
        url=url,
        sha256=r.matching("imageSha256", SHA256, "a sha256 digest (64 lower-case hex characters)"),
        storage=r.matching("imageStorage", NAME, "a storage id"),
    )
    if url.startswith("https://") and not urlparse(url).path.endswith((".img", ".qcow2")):
        r.fail("imageUrl", f"{url!r} is not a cloud image file (.img or .qcow2)")
    elif url.startswith("https://") and image.serial is None:
        # A floating directory serves another build tomorrow: the pinned checksum would fail, or
        # two builds would share one file name on the storage.
        r.fail("imageUrl", f"{url!r} names no dated serial (e.g. .../noble/20260926/...); pin one, never `current`")
    return image


# --- k3s over SSH: K3sNode ------------------------------------------------------------------------


@dataclass(frozen=True)
class K3sSettings:
    version: str
    ssh_private_key: str | None = field(repr=False)
    kubeconfig_path: Path | None
    ssh_dial_attempts: int
    """How many times each host step dials the VM before it fails."""


def _read_k3s(r: _Reader) -> K3sSettings:
    private_key = r.verbatim("sshPrivateKey")
    if private_key is not None and "PRIVATE KEY" not in private_key:
        r.fail("sshPrivateKey", "is not a private key in PEM/OpenSSH form (give the key file's whole content)")
    return K3sSettings(
        version=r.version("k3sVersion", K3S_VERSION, "v1.35.8+k3s1"),
        ssh_private_key=private_key,
        kubeconfig_path=_read_kubeconfig_path(r),
        ssh_dial_attempts=r.integer("sshDialAttempts", SSH_DIAL_ATTEMPTS_RANGE, "dial attempts"),
    )


def _read_kubeconfig_path(r: _Reader) -> Path | None:
    text = r.optional("kubeconfigPath")
    if text is None:
        return None
    try:
        path = Path(text).expanduser()
    except RuntimeError:
        r.fail("kubeconfigPath", f"{text!r} names the home directory of an unknown user")
        return None
    if not path.is_absolute():
        r.fail("kubeconfigPath", f"{text!r} is not an absolute path")
    elif path.resolve() == REPO_ROOT or REPO_ROOT in path.resolve().parents:
        r.fail("kubeconfigPath", f"{text!r} is inside this repository; a kubeconfig must never be committed")
    return path


# --- cert-manager, the operator and its providers: ClusterApi -------------------------------------


@dataclass(frozen=True)
class ProviderVersions:
    """The five Cluster API Operator providers, in the order the operator wants upgrades done."""

    core: str
    bootstrap: str
    control_plane: str
    infrastructure: str
    ipam: str


@dataclass(frozen=True)
class ClusterApiSettings:
    cert_manager_version: str
    operator_version: str
    cert_manager_repo: str
    operator_repo: str
    providers: ProviderVersions
    capmox_token_id: str
    capmox_token_secret: str = field(repr=False)
    existing_capmox_secret: str | None
    """A credentials Secret that someone else made (the playbook's `capmox-variables`): the
    program points CAPMOX at it and makes none of its own."""
    provider_ready_timeout_minutes: int
    """How long `pulumi up` waits for each provider CR to become Ready."""
    operator_webhook_timeout_minutes: int
    """How long `pulumi up` waits for the CA bundle of each of the operator's webhooks."""


def _read_cluster_api(r: _Reader) -> ClusterApiSettings:
    return ClusterApiSettings(
        cert_manager_version=r.version("certManagerVersion", V_SEMVER, "v1.21.2"),
        operator_version=r.version("capiOperatorVersion", BARE_SEMVER, "0.28.0"),
        cert_manager_repo=r.https_url("certManagerChartRepo"),
        operator_repo=r.https_url("capiOperatorChartRepo"),
        providers=ProviderVersions(
            core=r.version("capiCoreVersion", V_SEMVER, "v1.12.11"),
            bootstrap=r.version("capiBootstrapVersion", V_SEMVER, "v1.12.11"),
            control_plane=r.version("capiControlPlaneVersion", V_SEMVER, "v1.12.11"),
            infrastructure=r.version("capmoxVersion", V_SEMVER, "v0.9.1"),
            ipam=r.version("ipamInClusterVersion", V_SEMVER, "v1.1.1"),
        ),
        capmox_token_id=r.matching("capmoxTokenId", TOKEN_ID, "an API token id of the form user@realm!tokenname"),
        capmox_token_secret=r.token_secret("capmoxTokenSecret"),
        existing_capmox_secret=_read_existing_capmox_secret(r),
        provider_ready_timeout_minutes=r.integer(
            "providerReadyTimeoutMinutes", PROVIDER_READY_MINUTES_RANGE, "minutes"
        ),
        operator_webhook_timeout_minutes=r.integer("operatorWebhookTimeoutMinutes", WEBHOOK_MINUTES_RANGE, "minutes"),
    )


def _read_existing_capmox_secret(r: _Reader) -> str | None:
    name = r.optional("capmoxExistingSecret")
    if name is not None and not DNS_SUBDOMAIN.fullmatch(name):
        r.fail("capmoxExistingSecret", f"{name!r} is not a Kubernetes object name")
    return name


# --- read-only access: ReadOnlyAccess and WorkloadClusterAccess -----------------------------------


@dataclass(frozen=True)
class AccessSettings:
    """The read-only accounts, on the management cluster and on each workload cluster (those of
    `workload.clusters`: one declaration gives a cluster and read-only access to it)."""

    readonly_token_generation: int


def _read_access(r: _Reader) -> AccessSettings:
    return AccessSettings(
        readonly_token_generation=r.integer("readonlyTokenGeneration", GENERATION_RANGE, "token generation"),
    )


# --- workload clusters: WorkloadCluster (and its read-only access), Cilium, cluster-autoscaler ----

# Not declared in Pulumi.yaml: a project's config block declares strings, numbers, booleans and
# arrays of those only, never a list of objects. The stack sets it as a list (`--path`).
WORKLOAD_CLUSTERS_KEY = "workloadClusters"
WORKLOAD_DOCS = "docs/operations.md#workload-clusters"
# Cluster API v1.12 (capiCoreVersion; CAPMOX v0.9 is tested with CAPI 1.11 and 1.12 only) supports
# workload clusters up to Kubernetes 1.35: a newer minor waits for a newer Cluster API.
NEWEST_WORKLOAD_KUBERNETES = (1, 35)
CONTROL_PLANE_REPLICAS = (1, 3, 5)
SOCKETS_RANGE = (1, 8)
WORKER_COUNT_RANGE = (0, 100)
IP_PREFIX_RANGE = (1, 32)
CONTROL_PLANE_MINUTES_RANGE = (1, 240)
# What Go's time.ParseDuration takes (cluster-autoscaler's flags), signs left out.
GO_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$")
BOOT_DEVICE = re.compile(r"^(?:scsi|virtio|sata|ide)\d+$")
INTERFACE = re.compile(r"^[A-Za-z0-9._-]{1,15}$")
# Image tags of cluster-autoscaler that are known broken for this setup.
BROKEN_AUTOSCALER_TAGS = {
    "v1.35.0": "mis-resolves the infrastructure provider's API version (kubernetes/autoscaler#9439); use v1.35.2",
}
# The management cluster's resources are named `mgmt-*`: a workload cluster's would clash.
RESERVED_CLUSTER_NAMES = ("mgmt",)
# The longest cluster name that every name made from it fits: the autoscaler's Helm release
# `<name>-autoscaler` (Helm refuses release names over 53 characters), which is tighter than the
# label value `<name>-workers` (63, Cluster API's MachineDeployment name label).
HELM_RELEASE_NAME_MAX = 53
CLUSTER_NAME_MAX = HELM_RELEASE_NAME_MAX - len("-autoscaler")


@dataclass(frozen=True)
class MachineSizing:
    """One ProxmoxMachineTemplate's VM: what CAPMOX clones from the template VM."""

    sockets: int
    cores: int
    memory_mib: int
    disk_gib: int

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores


@dataclass(frozen=True)
class ControlPlane:
    replicas: int
    sizing: MachineSizing


@dataclass(frozen=True)
class Workers:
    """The one worker MachineDeployment; cluster-autoscaler moves its replicas within min..max."""

    min_size: int
    max_size: int
    sizing: MachineSizing


@dataclass(frozen=True)
class AutoscalerTimings:
    """cluster-autoscaler's flags of the same names, as Go durations (upstream's defaults)."""

    scan_interval: str
    scale_down_unneeded_time: str
    scale_down_delay_after_add: str
    max_node_provision_time: str


@dataclass(frozen=True)
class WorkloadCluster:
    """A workload cluster as CAPMOX's default cluster template takes it (components.cluster_template),
    plus what the template gets wrong for this lab (VLAN, pod and service networks)."""

    name: str
    namespace: str
    template_version: str
    """The CAPMOX release whose cluster template renders this cluster, apart from capmoxVersion:
    a provider bump changes the provider only, and a cluster follows a newer template only when
    its own entry asks for it (the rollout it may bring is named at preview, components.rollouts)."""
    kubernetes_version: str
    control_plane_endpoint: ipaddress.IPv4Address
    """The kube-vip address of the API server."""
    node_ip_ranges: tuple[str, ...]
    """`a.b.c.d-a.b.c.e` ranges or CIDRs, as CAPMOX's ipv4Config.addresses takes them."""
    ip_prefix: int
    gateway: ipaddress.IPv4Address
    dns_servers: tuple[str, ...]
    ssh_public_keys: tuple[str, ...]
    source_node: str
    allowed_nodes: tuple[str, ...]
    template_vm_id: int
    boot_volume_device: str
    bridge: str
    vlan: int | None
    pod_cidr: ipaddress.IPv4Network
    service_cidr: ipaddress.IPv4Network
    vip_interface: str
    """Empty: kube-vip finds the interface itself."""
    control_plane: ControlPlane
    workers: Workers
    autoscaler: AutoscalerTimings
    protected: bool
    """Its Cluster API objects are protected: deleting the Cluster deletes every VM of the
    cluster, so taking it out of the stack takes a run with `protected: false` first."""
    taken_over: bool
    """Made by clusterctl from the same template, then taken over (docs/adoption.md): its networks
    stay as clusterctl made them, which they can no longer leave (the template's pod CIDR, no
    service CIDR declared)."""
    adopt: bool
    """This run imports its running objects and Cilium's release as they are and declares only
    what clusterctl rendered (components.cluster_takeover); on for the adoption run only."""

    @property
    def node_network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"{self.gateway}/{self.ip_prefix}", strict=False)


@dataclass(frozen=True)
class WorkloadSettings:
    """The declared workload clusters and what every one of them gets alike."""

    clusters: tuple[WorkloadCluster, ...]
    capmox_release_url: str
    """Where CAPMOX's release assets are, `<url>/<templateVersion>/cluster-template.yaml` among them."""
    cilium_version: str
    cilium_repo: str
    autoscaler_chart_version: str
    autoscaler_image_tag: str
    autoscaler_repo: str
    control_plane_timeout_minutes: int
    """How long `pulumi up` waits for a new cluster's control plane (ControlPlaneInitialized)."""


class _Entry:
    """One object of workloadClusters, or an object inside it, read key by key. Every problem
    names its key in full (`workloadClusters[0].workers.maxSize`); a key nobody read is refused."""

    def __init__(self, r: _Reader, path: str, value: Mapping[str, Any]) -> None:
        self.r, self.path, self._value = r, path, value
        self._read: set[str] = set()

    def fail(self, name: str, message: str) -> None:
        self.r.fail(f"{self.path}.{name}", message)

    def warn(self, name: str, message: str) -> None:
        self.r.warn(f"{self.path}.{name}", message)

    def has(self, name: str) -> bool:
        return self._value.get(name) is not None

    def raw(self, name: str, default: Any = None) -> Any:
        self._read.add(name)
        value = self._value.get(name)
        if value is None and default is None:
            self.fail(name, "is required but not set")
        return default if value is None else value

    def text(self, name: str, pattern: re.Pattern[str], expected: str, default: str | None = None) -> str:
        value = self.raw(name, default)
        if value is None:
            return ""
        if not isinstance(value, str) or (value.strip() != default and not pattern.fullmatch(value.strip())):
            self.fail(name, f"{value!r} is not {expected}")
            return default or ""
        return value.strip()

    def integer(self, name: str, bounds: tuple[int, int], what: str, default: int | None = None) -> int:
        value = self.raw(name, default)
        if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
            value = int(value)
        if value is None or isinstance(value, bool) or not isinstance(value, int):
            if value is not None:
                self.fail(name, f"{value!r} is not a whole number")
            return bounds[0]
        if not bounds[0] <= value <= bounds[1]:
            self.fail(name, f"{value} is outside the {what} range {bounds[0]}..{bounds[1]}")
        return value

    def strings(self, name: str, what: str, valid: Callable[[str], object], default: Any = None) -> tuple[str, ...]:
        value = self.raw(name, default)
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)) or not all(isinstance(i, str) for i in value):
            self.fail(name, f"{value!r} is not a list of strings (one entry each)")
            return ()
        if not value and default is None:
            self.fail(name, f"is empty; give at least one {what}")
        for item in value:
            if not valid(item.strip()):
                self.fail(name, f"{item[:40]!r} is not {what}")
        return tuple(i.strip() for i in value)

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw(name, default)
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        if not isinstance(value, bool):
            self.fail(name, f"{value!r} is not true or false")
            return default
        return value

    def address(self, name: str) -> ipaddress.IPv4Address | None:
        value = self.raw(name)
        try:
            return ipaddress.IPv4Address(str(value).strip()) if value is not None else None
        except ValueError:
            self.fail(name, f"{value!r} is not an IPv4 address")
            return None

    def network(self, name: str, default: str | None = None) -> ipaddress.IPv4Network | None:
        value = self.raw(name, default)
        try:
            return ipaddress.IPv4Network(str(value).strip()) if value is not None else None
        except ValueError:
            self.fail(name, f"{value!r} is not an IPv4 network with its prefix length (e.g. 10.244.0.0/16)")
            return None

    def entry(self, name: str) -> _Entry:
        value = self.raw(name, {})
        if not isinstance(value, dict):
            self.fail(name, f"{value!r} is not an object")
            value = {}
        return _Entry(self.r, f"{self.path}.{name}", value)

    def done(self) -> None:
        """Refuses the keys nobody read: a misspelt key would otherwise be ignored without a word."""
        for unknown in sorted(set(self._value) - self._read):
            self.fail(unknown, f"is not a setting this program knows; see {WORKLOAD_DOCS}")


@dataclass(frozen=True)
class _Lab:
    """What a workload cluster's defaults and network checks take from the rest of the settings."""

    proxmox_node: str
    bridge: str
    networks: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...]
    """The lab's networks and addresses a pod or service network must not overlap, each described."""
    hosts: tuple[tuple[ipaddress.IPv4Address, str], ...]
    """The lab's own hosts, whose addresses no workload cluster's node or VIP may take, each described."""


def _lab(proxmox: ProxmoxSettings, vm: VmSettings) -> _Lab:
    networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = [
        (vm.address.network, f"the management VM's subnet {vm.address.network} (vmAddress)")
    ]
    hosts = [
        (vm.address.ip, f"the management VM's address {vm.address.ip} (vmAddress)"),
        (vm.gateway, f"the lab's gateway {vm.gateway} (vmGateway)"),
    ]
    host = urlparse(proxmox.endpoint).hostname or ""
    if _is_ip_address(host):
        networks.append((ipaddress.ip_network(host), f"the Proxmox VE API's address {host} (proxmoxEndpoint)"))
        hosts += _ipv4_hosts([host], "the Proxmox VE API's address {} (proxmoxEndpoint)")
    networks += [
        (ipaddress.ip_network(d), f"the DNS server {d} (vmDnsServers)") for d in vm.dns_servers if _is_ip_address(d)
    ]
    hosts += _ipv4_hosts(vm.dns_servers, "the DNS server {} (vmDnsServers)")
    return _Lab(proxmox.node, vm.bridge, tuple(networks), tuple(hosts))


def _ipv4_hosts(texts: Sequence[str], what: str) -> list[tuple[ipaddress.IPv4Address, str]]:
    """Each IPv4 address of `texts`, described by `what` with the address in its `{}`."""
    addresses = [ipaddress.ip_address(text) for text in texts if _is_ip_address(text)]
    return [(address, what.format(address)) for address in addresses if isinstance(address, ipaddress.IPv4Address)]


def _read_workload(r: _Reader, lab: _Lab) -> WorkloadSettings:
    entries = _workload_entries(r)
    clusters = tuple(_read_workload_cluster(entry, lab) for entry in entries)
    names = [c.name for c in clusters]
    for name in sorted({n for n in names if names.count(n) > 1}):
        r.fail(WORKLOAD_CLUSTERS_KEY, f"declares the cluster {name!r} twice; each cluster name must be unique")
    _check_clusters_apart(list(zip(entries, clusters, strict=True)))
    return WorkloadSettings(
        clusters=clusters,
        capmox_release_url=r.https_url("capmoxReleaseUrl"),
        cilium_version=r.version("ciliumVersion", BARE_SEMVER, "1.19.8"),
        cilium_repo=r.https_url("ciliumChartRepo"),
        autoscaler_chart_version=r.version("clusterAutoscalerChartVersion", BARE_SEMVER, "9.59.0"),
        autoscaler_image_tag=_read_autoscaler_image_tag(r),
        autoscaler_repo=r.https_url("clusterAutoscalerChartRepo"),
        control_plane_timeout_minutes=r.integer(
            "workloadControlPlaneTimeoutMinutes", CONTROL_PLANE_MINUTES_RANGE, "minutes"
        ),
    )


def _read_autoscaler_image_tag(r: _Reader) -> str:
    tag = r.version("clusterAutoscalerImageTag", V_SEMVER, "v1.35.2")
    if tag in BROKEN_AUTOSCALER_TAGS:
        r.fail("clusterAutoscalerImageTag", f"{tag} {BROKEN_AUTOSCALER_TAGS[tag]}")
    return tag


def _workload_entries(r: _Reader) -> list[_Entry]:
    """workloadClusters as a list of objects; absent or empty is no workload cluster at all."""
    text = r.optional(WORKLOAD_CLUSTERS_KEY)
    try:
        items = json.loads(text) if text is not None else []
    except ValueError:
        items = None
    if not isinstance(items, list):
        r.fail(WORKLOAD_CLUSTERS_KEY, f"is not a list of clusters, each an object; see {WORKLOAD_DOCS}")
        return []
    entries = []
    for index, item in enumerate(items):
        path = f"{WORKLOAD_CLUSTERS_KEY}[{index}]"
        if isinstance(item, dict):
            entries.append(_Entry(r, path, item))
        elif isinstance(item, str):
            r.fail(
                path,
                f"{item!r} names a cluster only; declare the cluster as an object with its settings "
                f"(name, namespace, network, sizing), which also gives it read-only access: see {WORKLOAD_DOCS}",
            )
        else:
            r.fail(path, f"{item!r} is not an object; see {WORKLOAD_DOCS}")
    return entries


def _read_workload_cluster(e: _Entry, lab: _Lab) -> WorkloadCluster:
    name = e.text("name", DNS_LABEL, "a DNS label (lower case letters, digits, '-')")
    if name in RESERVED_CLUSTER_NAMES:
        e.fail("name", f"{name!r} is the management cluster's own name in this program; pick another")
    network = _read_cluster_network(e)
    cluster = WorkloadCluster(
        name=name,
        namespace=e.text("namespace", DNS_LABEL, "a namespace name", default="default"),
        template_version=e.text("templateVersion", V_SEMVER, "a CAPMOX release of the form v0.9.1"),
        kubernetes_version=_read_workload_kubernetes(e),
        **network,
        ssh_public_keys=e.strings("sshPublicKeys", "an OpenSSH public key line", _is_ssh_public_key),
        source_node=e.text("sourceNode", DNS_LABEL, "a Proxmox node name", default=lab.proxmox_node),
        allowed_nodes=e.strings("allowedNodes", "a Proxmox node name", DNS_LABEL.fullmatch, default=[]),
        template_vm_id=e.integer("templateVmId", VMID_RANGE, "Proxmox VMID"),
        boot_volume_device=e.text("bootVolumeDevice", BOOT_DEVICE, "a Proxmox disk like scsi0", default="scsi0"),
        bridge=e.text("bridge", NAME, "a Linux bridge name", default=lab.bridge),
        vip_interface=e.text("vipInterface", INTERFACE, "a network interface name", default=""),
        control_plane=_read_control_plane(e.entry("controlPlane")),
        workers=_read_workers(e.entry("workers")),
        autoscaler=_read_autoscaler_timings(e.entry("autoscaler")),
        protected=e.boolean("protected", default=True),
        taken_over=e.boolean("takenOver", default=False),
        adopt=e.boolean("adopt", default=False),
    )
    if len(name) > CLUSTER_NAME_MAX:
        e.fail(
            "name",
            f"{name!r} has {len(name)} characters, more than {CLUSTER_NAME_MAX}: the release {name}-autoscaler "
            f"must fit Helm's {HELM_RELEASE_NAME_MAX}",
        )
    _check_pod_and_service_networks(e, cluster, lab)
    _check_lab_hosts(e, cluster, lab)
    _check_taken_over(e, cluster)
    e.done()
    return cluster


def _check_lab_hosts(e: _Entry, cluster: WorkloadCluster, lab: _Lab) -> None:
    """No node and no VIP on an address the lab's own hosts have (a node given one cuts that host
    off), no VIP on the node network's own or broadcast address; and the pool holds a rollout's
    surge. A range may span those two: the in-cluster IPAM provider never hands them out (its
    pools' allowReservedIPs is false)."""
    network = cluster.node_network
    taken = [*lab.hosts, *_ipv4_hosts(cluster.dns_servers, "the DNS server {} (dnsServers)")]
    spans = _spans(cluster.node_ip_ranges)
    for address, what in taken:
        if address == cluster.control_plane_endpoint:
            e.fail("controlPlaneEndpoint", f"{address} is {what}")
        for text, (first, last) in spans:
            # The cluster's own gateway in its ranges is refused once, by _read_cluster_network.
            if first <= address <= last and address != cluster.gateway:
                e.fail("nodeIpRanges", f"{text} contains {what}")
    if network.prefixlen < 31:
        for address, what in ((network.network_address, "network"), (network.broadcast_address, "broadcast")):
            if address == cluster.control_plane_endpoint:
                e.fail("controlPlaneEndpoint", f"{address} is the {what} address of {network} (gateway/ipPrefix)")
    pool = sum(int(last) - int(first) + 1 for _, (first, last) in spans)
    needed = cluster.control_plane.replicas + cluster.workers.max_size + 1
    if spans and pool < needed:
        e.warn(
            "nodeIpRanges",
            f"holds {pool} addresses, fewer than controlPlane.replicas + workers.maxSize + 1 = {needed}: a rollout "
            "makes one machine more before it deletes one, and finds no address for it",
        )


def _check_clusters_apart(clusters: Sequence[tuple[_Entry, WorkloadCluster]]) -> None:
    """No two clusters share an address: two kube-vips announcing one VIP, or one address handed
    to nodes of both, break both clusters."""
    for index, (entry, cluster) in enumerate(clusters):
        spans = _spans(cluster.node_ip_ranges)
        for _, earlier in clusters[:index]:
            earlier_spans = _spans(earlier.node_ip_ranges)
            vip, earlier_vip = cluster.control_plane_endpoint, earlier.control_plane_endpoint
            if vip == earlier_vip or any(first <= vip <= last for _, (first, last) in earlier_spans):
                entry.fail("controlPlaneEndpoint", f"{vip} is an address of the cluster {earlier.name}")
            for text, (first, last) in spans:
                if first <= earlier_vip <= last or any(
                    first <= other_last and other_first <= last for _, (other_first, other_last) in earlier_spans
                ):
                    entry.fail("nodeIpRanges", f"{text} overlaps the addresses of the cluster {earlier.name}")


def _spans(ranges: Sequence[str]) -> list[tuple[str, tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]]]:
    return [(text, span) for text in ranges if (span := _address_span(text))]


def _check_taken_over(e: _Entry, cluster: WorkloadCluster) -> None:
    """What an adoption needs (docs/adoption.md, "A workload cluster made with clusterctl")."""
    if cluster.adopt and not cluster.taken_over:
        e.fail("adopt", "true needs takenOver: true (the cluster was made by clusterctl and stays as it was made)")
    if cluster.adopt and not cluster.protected:
        e.fail("adopt", "true needs protected: true: a cluster being taken over is never deleted by Pulumi")
    if cluster.taken_over and e.has("serviceCidr"):
        # clusterctl's template declares none, so kubeadm took its default; declaring one now
        # would change a running cluster's network.
        e.fail("serviceCidr", "must stay unset with takenOver: true; the cluster runs kubeadm's default 10.96.0.0/12")


def _read_workload_kubernetes(e: _Entry) -> str:
    version = e.text("kubernetesVersion", V_SEMVER, "a Kubernetes release of the form v1.35.9")
    if version and _release(version)[:2] > NEWEST_WORKLOAD_KUBERNETES:
        newest = ".".join(map(str, NEWEST_WORKLOAD_KUBERNETES))
        e.fail(
            "kubernetesVersion",
            f"{version} is newer than Kubernetes {newest}, the newest that Cluster API v1.12 "
            "(capiCoreVersion; CAPMOX v0.9 is tested with CAPI 1.11 and 1.12) supports for a workload cluster",
        )
    return version


def _read_cluster_network(e: _Entry) -> dict[str, Any]:
    """The nodes' network (as WorkloadCluster's fields): addresses inside the network that the
    gateway and prefix make, the endpoint outside the nodes' ranges."""
    endpoint = e.address("controlPlaneEndpoint")
    ranges = e.strings("nodeIpRanges", "an address, a range a.b.c.d-a.b.c.e or a CIDR", _address_span)
    prefix = e.integer("ipPrefix", IP_PREFIX_RANGE, "prefix length")
    gateway = e.address("gateway")
    vlan_set = e.raw("vlan", default="")
    vlan = None if vlan_set == "" else e.integer("vlan", VLAN_RANGE, "VLAN id")
    network = ipaddress.IPv4Network(f"{gateway}/{prefix}", strict=False) if gateway else None
    spans = _spans(ranges)
    for text, (first, last) in spans:
        if network is not None and not (first in network and last in network):
            e.fail("nodeIpRanges", f"{text} is outside the nodes' network {network} (gateway/ipPrefix)")
    if gateway is not None and any(first <= gateway <= last for _, (first, last) in spans):
        e.fail("gateway", f"{gateway} is inside nodeIpRanges; a node would be given the gateway's address")
    if endpoint is not None and network is not None and endpoint not in network:
        e.fail(
            "controlPlaneEndpoint", f"{endpoint} is outside the nodes' network {network}; kube-vip announces it there"
        )
    if endpoint is not None and any(first <= endpoint <= last for _, (first, last) in spans):
        e.fail("controlPlaneEndpoint", f"{endpoint} is inside nodeIpRanges; a node could be given the same address")
    return {
        "control_plane_endpoint": endpoint or ipaddress.IPv4Address(0),
        "node_ip_ranges": ranges,
        "ip_prefix": prefix,
        "gateway": gateway or ipaddress.IPv4Address(0),
        "dns_servers": e.strings("dnsServers", "an IP address of a DNS server", _is_ip_address),
        "vlan": vlan,
        "pod_cidr": e.network("podCidr") or _NO_NETWORK,
        "service_cidr": e.network("serviceCidr", default="10.96.0.0/12") or _NO_NETWORK,
    }


# Stands in for a network that was refused (the run stops before it is used); it overlaps nothing.
_NO_NETWORK = ipaddress.IPv4Network("0.0.0.0/32")


def _address_span(text: str) -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address] | None:
    """The first and last address of `a.b.c.d-a.b.c.e`, of a CIDR or of one address (CAPMOX's
    webhook takes all three); None for anything else."""
    try:
        if "-" in text:
            first, last = (ipaddress.IPv4Address(part.strip()) for part in text.split("-", 1))
        elif "/" in text:
            network = ipaddress.IPv4Network(text)
            first, last = network[0], network[-1]
        else:
            first = last = ipaddress.IPv4Address(text.strip())
    except ValueError:
        return None
    return (first, last) if first <= last else None


def _check_pod_and_service_networks(e: _Entry, cluster: WorkloadCluster, lab: _Lab) -> None:
    """Neither the pod nor the service network may overlap the other or the lab: a pod address
    that is also a lab address is routed to the pod, and the host behind it is cut off."""
    taken = [
        *lab.networks,
        (cluster.node_network, f"the cluster's node network {cluster.node_network} (gateway/ipPrefix)"),
        (
            ipaddress.ip_network(cluster.control_plane_endpoint),
            f"the control-plane endpoint {cluster.control_plane_endpoint} (controlPlaneEndpoint)",
        ),
        *(
            (ipaddress.ip_network(d), f"the DNS server {d} (dnsServers)")
            for d in cluster.dns_servers
            if _is_ip_address(d)
        ),
    ]
    for key, cidr, example in (
        ("podCidr", cluster.pod_cidr, "10.244.0.0/16"),
        ("serviceCidr", cluster.service_cidr, "10.96.0.0/12"),
    ):
        if cidr == _NO_NETWORK:
            continue
        for network, what in taken:
            if network.version == 4 and cidr.overlaps(network):
                if cluster.taken_over:
                    # Made so by clusterctl's template (192.168.0.0/16), and a running cluster's pod
                    # network cannot move: said, not refused.
                    e.warn(key, f"{cidr} overlaps {what}: a host there is unreachable from the cluster's pods")
                else:
                    e.fail(key, f"{cidr} overlaps {what}; pick e.g. {example}")
    if _NO_NETWORK not in (cluster.pod_cidr, cluster.service_cidr) and cluster.pod_cidr.overlaps(cluster.service_cidr):
        e.fail("serviceCidr", f"{cluster.service_cidr} overlaps podCidr {cluster.pod_cidr}")


def _read_sizing(e: _Entry) -> MachineSizing:
    """CAPMOX's template's own defaults: 2 sockets of 4 cores, 16 GiB, a 100 GiB boot disk."""
    return MachineSizing(
        sockets=e.integer("sockets", SOCKETS_RANGE, "sockets", default=2),
        cores=e.integer("cores", CORES_RANGE, "cores", default=4),
        memory_mib=e.integer("memoryMib", MEMORY_MIB_RANGE, "memory MiB", default=16384),
        disk_gib=e.integer("diskGib", DISK_GIB_RANGE, "disk GiB", default=100),
    )


def _read_control_plane(e: _Entry) -> ControlPlane:
    replicas = e.integer("replicas", (1, 5), "control-plane replicas", default=1)
    if replicas not in CONTROL_PLANE_REPLICAS:
        e.fail("replicas", f"{replicas} is not 1, 3 or 5 (etcd needs an odd number of members)")
    control_plane = ControlPlane(replicas=replicas, sizing=_read_sizing(e))
    e.done()
    return control_plane


def _read_workers(e: _Entry) -> Workers:
    min_size = e.integer("minSize", WORKER_COUNT_RANGE, "worker count", default=0)
    max_size = e.integer("maxSize", (1, WORKER_COUNT_RANGE[1]), "worker count")
    if e.has("maxSize") and max_size < min_size:
        e.fail("maxSize", f"{max_size} is below minSize {min_size}")
    workers = Workers(min_size=min_size, max_size=max_size, sizing=_read_sizing(e))
    e.done()
    return workers


def _read_autoscaler_timings(e: _Entry) -> AutoscalerTimings:
    """cluster-autoscaler's own defaults; the lab in a box sets them short."""
    duration = "a Go duration such as 10s, 10m or 1h30m"
    timings = AutoscalerTimings(
        scan_interval=e.text("scanInterval", GO_DURATION, duration, default="10s"),
        scale_down_unneeded_time=e.text("scaleDownUnneededTime", GO_DURATION, duration, default="10m"),
        scale_down_delay_after_add=e.text("scaleDownDelayAfterAdd", GO_DURATION, duration, default="10m"),
        max_node_provision_time=e.text("maxNodeProvisionTime", GO_DURATION, duration, default="15m"),
    )
    e.done()
    return timings


# --- all of them, once ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    proxmox: ProxmoxSettings
    vm: VmSettings
    image: ImageSettings
    k3s: K3sSettings
    cluster_api: ClusterApiSettings
    access: AccessSettings
    workload: WorkloadSettings
    adopt: bool
    """Take the running lab into the stack as it is (docs/adoption.md): import, change nothing."""
    adopt_cluster_objects: bool
    """Whether this run also manages what is on the cluster; false only in the first adoption run."""
    warnings: tuple[str, ...] = ()
    """Values accepted with a cost, each naming its key; shown as the run's warnings."""


def _check_adoption(r: _Reader, settings: Settings) -> None:
    """Adoption imports the running lab and changes nothing in that run; settings that would
    make it create or replace something in the same run are refused."""
    if not settings.adopt:
        if not settings.adopt_cluster_objects:
            # Only the first adoption run leaves them out; a lab the program manages never drops them.
            r.fail(
                "adoptClusterObjects",
                "false needs adopt=true (the first adoption run, docs/adoption.md step 4); "
                "set it back to true (pulumi config rm adoptClusterObjects)",
            )
        return
    if settings.cluster_api.existing_capmox_secret is None:
        r.fail(
            "adopt",
            "true needs capmoxExistingSecret (the Secret CAPMOX uses now, e.g. capmox-variables); "
            "a new credentials Secret would change the adopted InfrastructureProvider",
        )
    if settings.vm.rebuild_from_image:
        r.fail("adopt", "true cannot go with vmRebuildFromImage=true: adoption must not replace the VM")
    if not settings.vm.protected:
        r.fail("adopt", "true needs vmProtected=true: an adopted lab is never deleted by Pulumi")


def parse_settings(raw: Mapping[str, str]) -> Settings:
    """Build the settings from raw config strings (keys without the project prefix)."""
    r = _Reader(raw)
    proxmox, vm = _read_proxmox(r), _read_vm(r)
    settings = Settings(
        proxmox=proxmox,
        vm=vm,
        image=_read_image(r),
        k3s=_read_k3s(r),
        cluster_api=_read_cluster_api(r),
        access=_read_access(r),
        workload=_read_workload(r, _lab(proxmox, vm)),
        adopt=r.boolean("adopt"),
        adopt_cluster_objects=r.boolean("adoptClusterObjects"),
        warnings=tuple(r.warnings),
    )
    _check_adoption(r, settings)
    _check_rebuild(r, settings)
    _check_template_versions(r, settings)
    if r.problems:
        raise SettingsError("invalid stack configuration:\n  " + "\n  ".join(r.problems))
    return settings


def _check_rebuild(r: _Reader, settings: Settings) -> None:
    """A rebuild replaces the management cluster, and with its provider every workload cluster's
    objects: the old ones are dropped with the VM (deleted_with) while their VMs run on, and the
    new management cluster creates the clusters again on the same addresses."""
    names = [cluster.name for cluster in settings.workload.clusters]
    if settings.vm.rebuild_from_image and names:
        r.fail(
            "vmRebuildFromImage",
            f"true would replace the management VM while workloadClusters declares {', '.join(names)}: their "
            "Cluster API objects would be created afresh on the new management cluster while their VMs still run "
            "(a second cluster on the same addresses). Remove each through Cluster API first (docs/operations.md, "
            '"Removing a workload cluster"), take it out of workloadClusters, then rebuild',
        )


def _check_template_versions(r: _Reader, settings: Settings) -> None:
    """A template newer than the running CAPMOX may declare fields its CRDs do not have yet."""
    running = settings.cluster_api.providers.infrastructure
    for index, cluster in enumerate(settings.workload.clusters):
        if _release(running) and _release(cluster.template_version) > _release(running):
            r.fail(
                f"{WORKLOAD_CLUSTERS_KEY}[{index}].templateVersion",
                f"{cluster.template_version} is newer than capmoxVersion {running}: its objects may use fields the "
                "running CAPMOX does not know; bump capmoxVersion first, in a run of its own",
            )


def _release(version: str) -> tuple[int, ...]:
    """v1.2.3 as (1, 2, 3), for comparing; () for a value refused on its own."""
    return tuple(int(part) for part in version[1:].split(".")) if V_SEMVER.fullmatch(version) else ()


def load_settings() -> Settings:
    """Read the stack's config once. Secret values are read as plain text for validation only;
    every component wraps them in pulumi.Output.secret before they reach a resource."""
    config = pulumi.Config(PROJECT)
    settings = parse_settings({key: value for key in KEYS if (value := config.get(key)) is not None})
    for warning in settings.warnings:
        pulumi.log.warn(warning)
    return settings
